//! The lambda controllers as a [`Subsystem`] of the host: started after the endpoints,
//! with a client of their own (`--client-go-qps`); their journal is `<journal dir>/lambda`.

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::{Lambda, LambdaConfig};
use crate::debug::lambda_views::LambdaView;
use crate::host::{Handle, Host, Parts, Subsystem, SubsystemView};

/// metacontroller's CompositeController and DecoratorController objects (`BOSUN_LAMBDA`).
pub struct LambdaControllers {
    /// Switched on.
    pub on: bool,
    /// Where their journal lives.
    pub journal_dir: PathBuf,
    /// Their configuration; a bad one fails their start (`/readyz` names it).
    pub config: anyhow::Result<LambdaConfig>,
}

impl Subsystem for LambdaControllers {
    fn name(&self) -> &'static str {
        "lambda controllers"
    }

    fn switched_on(&self) -> bool {
        self.on
    }

    fn journal(&self) -> crate::ha::JournalSpec {
        crate::ha::JournalSpec::of::<bosun_lambda::events::LambdaEvent>(
            JOURNAL.name,
            self.journal_dir.clone(),
        )
    }

    fn idle_view(&self) -> Option<Arc<dyn SubsystemView>> {
        Some(Arc::new(LambdaView::default()))
    }

    fn start<'a>(self: Box<Self>, host: &'a Host) -> BoxFuture<'a, anyhow::Result<Box<dyn Handle>>>
    where
        Self: 'a,
    {
        Box::pin(async move {
            let cfg = self.config?;
            let client = host.client_for("lambda", cfg.client_limits)?;
            let hooks = Arc::new(super::webhook::Webhooks::new(client.clone()));
            let lambda = super::start(host, client, hooks, &cfg).await?;
            tracing::info!(workers = cfg.workers, "lambda controllers running");
            Ok(Box::new(lambda) as Box<dyn Handle>)
        })
    }
}

impl Handle for Lambda {
    fn journal(&self) -> Arc<dyn crate::ha::replication::Source> {
        self.journal.clone()
    }

    fn view(&self) -> Arc<dyn SubsystemView> {
        Arc::new(LambdaView {
            controllers: Some(self.controllers.clone()),
            journal: Some(self.journal.clone()),
        })
    }

    fn register(&self, parts: &mut Parts) {
        parts.journals.push(("lambda", self.journal.health()));
    }
}

/// The lambda controllers' journal, read offline: each controller and its parents' last
/// outcomes.
pub static JOURNAL: crate::journal_kinds::Folded<
    bosun_lambda::events::LambdaEvent,
    std::collections::BTreeMap<String, bosun_lambda::journal_state::ControllerState>,
> = crate::journal_kinds::Folded {
    name: "lambda",
    fold: bosun_lambda::journal_state::fold,
    explain: crate::debug::explain::lambda::explain,
};
