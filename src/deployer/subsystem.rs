//! The deployer as a [`Subsystem`] of the host: started after the endpoints, its
//! `selfConfig` targets reaching the host's API server; its journal is
//! `<journal dir>/deployer`.

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::{DeployerConfig, DeployerHandle};
use crate::debug::deployer_views::DeployItemsView;
use crate::host::{Handle, Host, Parts, Subsystem, SubsystemView};

/// landscaper's DeployItem deployer (`BOSUN_DEPLOYER`).
pub struct DeployItems {
    /// Switched on.
    pub on: bool,
    /// Where its journal lives.
    pub journal_dir: PathBuf,
    /// Its configuration; a bad one fails its start (`/readyz` names it).
    pub config: anyhow::Result<DeployerConfig>,
}

impl Subsystem for DeployItems {
    fn name(&self) -> &'static str {
        "deployer"
    }

    fn switched_on(&self) -> bool {
        self.on
    }

    fn journal(&self) -> crate::ha::JournalSpec {
        crate::ha::JournalSpec::of::<bosun_deployer::events::DeployerEvent>(
            JOURNAL.name,
            self.journal_dir.clone(),
        )
    }

    fn idle_view(&self) -> Option<Arc<dyn SubsystemView>> {
        Some(Arc::new(DeployItemsView::default()))
    }

    fn start<'a>(self: Box<Self>, host: &'a Host) -> BoxFuture<'a, anyhow::Result<Box<dyn Handle>>>
    where
        Self: 'a,
    {
        Box::pin(async move {
            let mut cfg = self.config?;
            cfg.resource_cluster = Some(host.resource_cluster.clone());
            let deployer = super::start(host, &cfg).await?;
            tracing::info!(identity = %cfg.identity, workers = cfg.workers, "deployer running");
            Ok(Box::new(deployer) as Box<dyn Handle>)
        })
    }
}

impl Handle for DeployerHandle {
    fn journal(&self) -> Arc<dyn crate::ha::replication::Source> {
        self.journal.clone()
    }

    fn view(&self) -> Arc<dyn SubsystemView> {
        Arc::new(DeployItemsView {
            deployer: Some(self.deployer.view()),
            journal: Some(self.journal.clone()),
        })
    }

    fn register(&self, parts: &mut Parts) {
        parts.journals.push(("deployer", self.journal.health()));
    }
}

/// The deployer's journal, read offline: each DeployItem's phase, last error and managed
/// objects.
pub static JOURNAL: crate::journal_kinds::Folded<
    bosun_deployer::events::DeployerEvent,
    std::collections::BTreeMap<String, bosun_deployer::journal_state::ItemState>,
> = crate::journal_kinds::Folded {
    name: "deployer",
    fold: bosun_deployer::journal_state::fold,
    explain: crate::debug::explain::deployer::explain,
};
