//! The modules as a [`Subsystem`] of the host: essential (the endpoints answer about them
//! from their first request, and bosun does not run when they cannot start); their journal
//! is the journal folder's top.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use futures::future::BoxFuture;

use super::{Operator, OperatorConfig};
use crate::explanation::{Explanation, Subject};
use crate::host::{Handle, Host, Parts, Subsystem, SubsystemView};
use crate::journal_kinds::JournalKind;

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
        crate::ha::JournalSpec::of::<bosun_addon::Event>(JOURNAL.name(), self.journal_dir.clone())
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

/// The modules' journal, read offline: the journal folder's top (the other subsystems'
/// journals are folders in it); its state is the values per scope, the modules and the
/// queues, replayed from its snapshots.
pub static JOURNAL: ModulesJournal = ModulesJournal;

/// The modules' [`JournalKind`].
pub struct ModulesJournal;

impl JournalKind for ModulesJournal {
    fn name(&self) -> &'static str {
        "modules"
    }

    fn dir(&self, dir: &Path) -> PathBuf {
        dir.to_path_buf()
    }

    /// Whether the folder holds a journal's files (the other journals are folders in it).
    fn present(&self, dir: &Path) -> bool {
        bosun_journal::Backend::found_in(dir).is_some()
    }

    fn replay(&self, dir: &Path, until: Option<&str>) -> anyhow::Result<serde_json::Value> {
        let journal = bosun_journal::Journal::<bosun_addon::Event>::open_read_only(dir)
            .with_context(|| format!("cannot open journal {}", dir.display()))?;
        let at = crate::debug::journal_views::point(&journal, until)?;
        Ok(serde_json::to_value(
            crate::debug::journal_views::state_at(&journal, at)?,
        )?)
    }

    fn explain(&self, dir: &Path, subject: &Subject, e: &mut Explanation) -> Result<(), String> {
        if !self.present(dir) {
            return Ok(());
        }
        match crate::journal_kinds::open_present::<bosun_addon::Event>(self.name(), dir)? {
            Some(journal) => crate::debug::explain::modules::explain(&journal, subject, e)
                .map_err(|err| format!("modules journal: {err}")),
            None => Ok(()),
        }
    }
}
