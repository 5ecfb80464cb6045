//! The modules as a [`Subsystem`] of the host: essential (the endpoints answer about them
//! from their first request, and bosun does not run when they cannot start); their journal
//! is the journal folder's top.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{Operator, OperatorConfig};
use crate::host::{Handle, Host, Parts, Subsystem, SubsystemView};

/// addon-operator's modules and global hooks (`BOSUN_MODULES`).
pub struct Modules<'a> {
    /// Switched on.
    pub on: bool,
    /// Where their journal lives (the journal folder's top).
    pub journal_dir: std::path::PathBuf,
    /// Their configuration (the addon-operator environment and flags).
    pub cfg: &'a OperatorConfig,
}

impl Subsystem for Modules<'_> {
    fn name(&self) -> &'static str {
        "modules"
    }

    fn switched_on(&self) -> bool {
        self.on
    }

    fn journal(&self) -> crate::ha::JournalSpec {
        crate::ha::JournalSpec::of::<bosun_addon::Event>("modules", self.journal_dir.clone())
    }

    fn essential(&self) -> bool {
        true
    }

    fn switched_off(&self) {
        tracing::info!("modules switched off (BOSUN_MODULES=false): no global hooks, no modules");
    }

    fn start<'a>(self: Box<Self>, host: &'a Host) -> BoxFuture<'a, anyhow::Result<Box<dyn Handle>>>
    where
        Self: 'a,
    {
        Box::pin(async move {
            let operator = super::start(host, self.cfg, &self.journal_dir).await?;
            Ok(Box::new(operator) as Box<dyn Handle>)
        })
    }
}

impl Handle for Operator {
    fn journal(&self) -> Arc<dyn crate::ha::replication::Source> {
        self.journal.clone()
    }

    fn view(&self) -> Arc<dyn SubsystemView> {
        Arc::new(Operator::view(self))
    }

    fn register(&self, parts: &mut Parts) {
        parts.journals.push(("modules", self.journal.health()));
    }
}
