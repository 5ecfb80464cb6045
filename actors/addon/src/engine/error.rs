//! Why the engine did not start, and why it could not answer a request or take a step of
//! the converge.

use crate::global_hooks::GlobalHooksError;
use crate::modules::ModuleError;
use crate::ports::PortError;

/// Engine start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The journal refused the startup tasks.
    #[error("cannot journal the startup sequence: {0}")]
    Journal(#[from] PortError),
    /// An actor could not be spawned.
    #[error("cannot start actor {name}: {message}")]
    Spawn {
        /// Actor name.
        name: String,
        /// Why.
        message: String,
    },
    /// The ConfigMap's global section was not accepted.
    #[error("cannot apply the ConfigMap's global section: {0}")]
    Config(RequestError),
}

/// A request to the engine's actors that failed, naming the actor or module.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The global hooks actor does not take messages.
    #[error("the global hooks actor is not running")]
    GlobalHooksNotRunning,
    /// The global hooks actor stopped before it answered.
    #[error("the global hooks actor stopped")]
    GlobalHooksStopped,
    /// No module of that name.
    #[error("module {0} is not loaded")]
    NotLoaded(String),
    /// The module's actor does not take messages.
    #[error("the actor of module {0} is not running")]
    ModuleNotRunning(String),
    /// The module's actor stopped before it answered.
    #[error("the actor of module {0} stopped")]
    ModuleStopped(String),
    /// The global hooks actor refused.
    #[error(transparent)]
    Global(#[from] GlobalHooksError),
    /// A module's actor refused or failed.
    #[error(transparent)]
    Module(#[from] ModuleError),
    /// The journal refused the engine's own events.
    #[error(transparent)]
    Journal(#[from] PortError),
    /// The live objects of a module could not be previewed.
    #[error("module {module}: {source}")]
    Preview {
        /// The module.
        module: String,
        /// The cluster's error.
        source: PortError,
    },
    /// Several modules refused their ConfigMap sections.
    #[error("{}", join(.0))]
    Several(Vec<RequestError>),
}

impl RequestError {
    /// Whether it names a module that is not loaded (the request's subject does not
    /// exist, rather than failing).
    pub fn is_not_found(&self) -> bool {
        matches!(self, RequestError::NotLoaded(_))
    }
}

fn join(errors: &[RequestError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
