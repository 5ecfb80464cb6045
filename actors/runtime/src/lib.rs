//! bosun's actor runtime, shared by every subsystem (addon-operator's modules, the lambda
//! controllers, the DeployItem deployer). It knows tasks, queues, the keyed work queue,
//! mailboxes, time (Go durations, jitter), the journal port and the cluster ports' error,
//! and nothing of any subsystem's domain.
//!
//! ```text
//!   subsystem ──TaskSpec<K>──► QueueActor<K, E> ──TaskEvent<K> (as E)──► EventSink<E> (journal)
//!       ▲                          │ rules: QueueRules<K> (merging, dump lines, restarts)
//!       └──── TaskOutcome<K> ◄─ TaskHandler<K>::handle(task)
//!   Queues<K>::apply: the one fold of task events (replay, live queues, `bosun journal`)
//!   Mailboxes / Tracked<M>: every actor's pending messages, the one in progress, history
//!   runner::run: workers reconciling a WorkQueue<K>'s keys (lambda controllers, deployer),
//!                each queue shown as a mailbox too
//!   LastOutcomes<K, D>: the last outcome of each reconciled key, for the debug views
//! ```

pub mod clock;
pub mod last_outcome;
pub mod lifecycle;
pub mod mailbox;
pub mod ports;
pub mod queue;
pub mod queue_actor;
pub mod runner;
pub mod tagged;
pub mod task;
pub mod versions;
pub mod work_queue;

pub use ports::{
    BoxFut, Classified, ClusterError, ErrorClass, EventSink, MemoryJournal, PortError,
};
pub use queue::{QueueRules, Queues};
pub use task::{Position, QueuedTask, TaskEvent, TaskId, TaskIds, TaskKind, TaskSpec};
