//! addon-operator on bosun's runtime: modules, global hooks, values, hook configuration,
//! binding contexts and the converge conductor, with the events they journal and the
//! state those fold into.
//!
//! ```text
//!   ConfigMap, bindings, schedules ──► Engine (conductor) ──TaskSpec<AddonTask>──► queues
//!   queues ──► EngineHandler ──► GlobalHooksActor / ModuleActor × M ──► ports (hooks, Helm)
//!   hook output ──► hook_output::plan (pure) ──► Event ──► journal (durable first)
//!                                                  └───► State::apply (the same fold on replay)
//! ```

pub mod bindings;
pub mod context_stub;
pub mod engine;
pub mod events;
pub mod fakes;
pub mod global_hooks;
pub mod hook_config;
pub mod hook_metrics;
pub mod hook_output;
mod module_error;
pub mod modules;
pub mod ports;
pub mod queue;
pub mod rate;
pub mod schedule;
pub mod scheduler;
pub mod schema;
pub mod state;
pub mod sync_waiter;
pub mod task;
pub mod telemetry;
pub mod values;

pub use bosun_runtime::mailbox;
pub use events::{EVENT_VERSION, Event, Position, Scope, TaskEvent, TaskId, TaskSpec, ValuesLayer};
pub use state::State;
pub use task::{AddonTask, ModulePhase, TaskType};
