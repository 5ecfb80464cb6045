//! Why the engine did not start.

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
    Config(String),
}
