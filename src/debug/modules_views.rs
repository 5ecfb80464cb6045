//! [`ModulesView`], what the modules show on the endpoints: their engine, which the
//! modules' own endpoints ask, and their journal; their part of `/explain`.

use std::sync::Arc;

use bosun_journal::Journal;
use futures::future::BoxFuture;

use crate::explanation::{Explanation, Subject};
use crate::host::SubsystemView;

/// The modules as the endpoints read them.
#[derive(Clone)]
pub struct ModulesView {
    /// The engine.
    pub engine: Arc<bosun_addon::engine::Engine>,
    /// The modules' journal.
    pub journal: Arc<Journal<bosun_addon::Event>>,
}

impl SubsystemView for ModulesView {
    fn actor_kinds(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("global-hooks", "global-hooks"),
            ("queue", "queue"),
            ("module", "module"),
        ]
    }

    fn explain(&self, subject: &Subject, e: &mut Explanation) -> Result<(), String> {
        crate::debug::explain::modules::explain(&self.journal, subject, e)
            .map_err(|err| format!("modules journal: {err}"))
    }

    fn ask<'a>(&'a self, subject: &'a Subject, e: &'a mut Explanation) -> BoxFuture<'a, ()> {
        Box::pin(crate::debug::explain::modules::live(
            &self.engine,
            subject,
            e,
        ))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
