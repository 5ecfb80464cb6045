//! bosun's domain: the events it journals and the state they fold into.
//!
//! ```text
//!   hook results, ConfigMap, queue workers ──► Event ──► journal (durable first)
//!                                                 └───► State::apply (the same fold on replay)
//! ```

pub mod bindings;
pub mod engine;
pub mod events;
pub mod global_hooks;
pub mod hook_config;
pub mod hook_metrics;
pub mod mailbox;
pub mod modules;
pub mod ports;
pub mod queue;
pub mod queue_actor;
pub mod rate;
pub mod schedule;
pub mod scheduler;
pub mod schema;
pub mod state;
pub mod telemetry;
pub mod values;

pub use events::{EVENT_VERSION, Event, Position, Scope, TaskId, TaskSpec, TaskType, ValuesLayer};
pub use state::State;
