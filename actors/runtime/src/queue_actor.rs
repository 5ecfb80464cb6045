//! One actor per named queue: FIFO, one task at a time, the head retried with backoff.
//!
//! Every transition is journaled (durably) before the queue's in-memory copy changes, and
//! that copy is folded with the same [`Queues::apply`] that replay uses. What a task is, how
//! it is described and which tasks merge are the subsystem's: its [`QueueRules`] and its
//! [`TaskHandler`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::clock::{jitter, now_ms};
use crate::mailbox::{Describe, Envelope, MailboxHandle, Tracked};
use crate::ports::{BoxFut, EventSink, PortError};
use crate::queue::{QueueAction, QueueRules, Queues, backoff, go_duration};
use crate::task::{Position, QueuedTask, TaskEvent, TaskId, TaskKind, TaskSpec};

/// `tasks_queue_length{queue}`: tasks in a queue.
pub const TASKS_QUEUE_LENGTH: &str = "tasks_queue_length";
/// `task_wait_in_queue_seconds_total{module,hook,binding,queue}`: time tasks waited.
pub const TASK_WAIT_IN_QUEUE_SECONDS_TOTAL: &str = "task_wait_in_queue_seconds_total";
/// `tasks_queue_action_duration_seconds{queue_name,queue_action}`.
pub const TASKS_QUEUE_ACTION_DURATION_SECONDS: &str = "tasks_queue_action_duration_seconds";
/// `bosun_parked_tasks{queue}`: tasks set aside after too many attempts.
pub const PARKED_TASKS: &str = "bosun_parked_tasks";

/// How a task run ended, and what it asks the queue to do next.
#[derive(Debug)]
pub enum TaskOutcome<K> {
    /// Done: remove it; insert `head` tasks at the head, `after` right after it, `tail` at
    /// the end (tasks naming another queue go to that queue's tail).
    Success {
        /// Tasks to run next.
        head: Vec<TaskSpec<K>>,
        /// Tasks to run right after this one.
        after: Vec<TaskSpec<K>>,
        /// Tasks to append.
        tail: Vec<TaskSpec<K>>,
    },
    /// Failed: stays at the head and is retried after the backoff.
    Fail(String),
    /// Not done yet (multi-phase tasks): run `head` tasks before it, then it again.
    Keep {
        /// Tasks to insert before it.
        head: Vec<TaskSpec<K>>,
        /// Wait this long before running it again.
        delay: Duration,
    },
    /// Run it again after this delay (waiting for something).
    Repeat(Duration),
}

impl<K> TaskOutcome<K> {
    /// Success with no follow-up tasks.
    pub fn done() -> TaskOutcome<K> {
        TaskOutcome::Success {
            head: Vec::new(),
            after: Vec::new(),
            tail: Vec::new(),
        }
    }
}

/// Reports how a started task ended, to its queue (see [`TaskHandler::start`]).
///
/// Dropped without [`Completion::finish`] — the actor it was handed to stopped, with the
/// task in its mailbox or its run in flight — it reports a failure, so a queue never waits
/// for a task nobody runs; the task is retried like any failed one.
pub struct Completion<K>(Option<Box<dyn FnOnce(TaskOutcome<K>) + Send>>);

impl<K> Completion<K> {
    /// A completion that hands the outcome to `report`.
    pub fn new(report: impl FnOnce(TaskOutcome<K>) + Send + 'static) -> Completion<K> {
        Completion(Some(Box::new(report)))
    }

    /// Reports the task's end.
    pub fn finish(mut self, outcome: TaskOutcome<K>) {
        if let Some(report) = self.0.take() {
            report(outcome)
        }
    }
}

impl<K> Drop for Completion<K> {
    fn drop(&mut self) {
        if let Some(report) = self.0.take() {
            report(TaskOutcome::Fail(
                "the task's run stopped before it ended (its actor is gone)".into(),
            ))
        }
    }
}

impl<K> std::fmt::Debug for Completion<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Completion"
        } else {
            "Completion(finished)"
        })
    }
}

/// Runs tasks (the subsystem's conductor).
pub trait TaskHandler<K: Send + 'static>: Send + Sync + 'static {
    /// Runs one task.
    fn handle(&self, task: QueuedTask<K>) -> BoxFut<'_, TaskOutcome<K>>;

    /// Starts one task, which reports its end through `done`. By default
    /// [`TaskHandler::handle`] runs on a task of its own ([`run_on_own_task`]); a handler
    /// whose tasks another actor runs hands `done` to that actor instead, which spares a
    /// spawned task and two hand-offs between tasks per run.
    fn start(self: Arc<Self>, task: QueuedTask<K>, done: Completion<K>) {
        run_on_own_task(self, task, done)
    }

    /// How long the head task must wait before it may start (a hook's rate limit), or
    /// `None` when it may start now. While it waits it is neither started nor merged: the
    /// queue asks again after the delay, and the tasks that arrived meanwhile are merged
    /// into it when it starts.
    fn ready_in(&self, _task: &QueuedTask<K>) -> Option<Duration> {
        None
    }
}

/// Runs `task` through `handler`'s [`TaskHandler::handle`] on a task of its own and
/// reports its end: what [`TaskHandler::start`] does unless a handler starts tasks another way.
pub fn run_on_own_task<K: Send + 'static, H: TaskHandler<K> + ?Sized>(
    handler: Arc<H>,
    task: QueuedTask<K>,
    done: Completion<K>,
) {
    tokio::spawn(async move { done.finish(handler.handle(task).await) });
}

/// Delivers tasks to other queues (creating them on demand).
pub trait Router<K>: Send + Sync + 'static {
    /// Enqueues tasks at the tail of `queue`.
    fn enqueue(&self, queue: &str, tasks: Vec<TaskSpec<K>>);
}

/// Messages of a queue actor.
#[derive(Debug)]
pub enum QueueMsg<K> {
    /// Add tasks.
    Enqueue(Vec<(TaskSpec<K>, Position)>),
    /// Start the head task if idle and due.
    Kick,
    /// The running task finished.
    Finished {
        /// Which task.
        id: TaskId,
        /// How.
        outcome: TaskOutcome<K>,
    },
    /// Reply with the queue contents.
    Dump(RpcReplyPort<QueueDump<K>>),
    /// Restart a multi-step job (a converge): before the next task starts, the pending
    /// steps the rules name ([`QueueRules::dropped_by_restart`]) are dropped and this task
    /// goes to the head.
    Restart(Box<TaskSpec<K>>),
}

/// A queue's contents for the debug dump.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase", bound = "K: TaskKind")]
pub struct QueueDump<K> {
    /// Queue name.
    pub name: String,
    /// Tasks, head first.
    pub tasks: Vec<QueuedTask<K>>,
    /// Parked tasks.
    pub parked: Vec<QueuedTask<K>>,
    /// The running task.
    pub running: Option<TaskId>,
    /// Dump lines in the reference's format.
    pub lines: Vec<String>,
    /// What the queue is doing, in the reference's words: `""` (idle), `run first task`,
    /// `sleep after fail for 6s (3s left of 6s delay)`, `repeat head task`, …
    pub status: String,
}

impl<K> TaskOutcome<K> {
    /// One line: `success`, `fail: <error>`, `keep`, `repeat`.
    pub fn summary(&self) -> String {
        match self {
            TaskOutcome::Success { .. } => "success".to_string(),
            TaskOutcome::Fail(e) => format!("fail: {e}"),
            TaskOutcome::Keep { .. } => "keep".into(),
            TaskOutcome::Repeat(_) => "repeat".into(),
        }
    }
}

/// What a queue actor is doing, for its dump.
#[derive(Clone, Debug, Default)]
enum Activity {
    /// Waiting for tasks.
    #[default]
    Idle,
    /// The head task runs.
    Running,
    /// Waiting before the head task runs again.
    Sleeping {
        /// `sleep after fail for 6.3s`, `repeat head task`, `sleep for 3s`.
        text: String,
        delay: Duration,
        since: std::time::Instant,
    },
}

impl Activity {
    fn sleeping(text: String, delay: Duration) -> Activity {
        Activity::Sleeping {
            text,
            delay,
            since: std::time::Instant::now(),
        }
    }

    /// The reference's status string; while sleeping at least a second it adds
    /// `(Ns left of Ms delay)`, in whole seconds.
    fn status(&self) -> String {
        match self {
            Activity::Idle => String::new(),
            Activity::Running => "run first task".into(),
            Activity::Sleeping { text, delay, since } => {
                let delay = delay.as_secs();
                let waited = since.elapsed().as_secs();
                if delay == 0 || waited >= delay {
                    return text.clone();
                }
                format!(
                    "{text} ({} left of {} delay)",
                    go_duration(Duration::from_secs(delay - waited)),
                    go_duration(Duration::from_secs(delay))
                )
            }
        }
    }
}

impl<K: TaskKind> Describe for QueueMsg<K> {
    fn summary(&self) -> String {
        match self {
            QueueMsg::Enqueue(tasks) => {
                let names: Vec<String> = tasks
                    .iter()
                    .map(|(t, _)| t.kind.type_name().to_string())
                    .collect();
                format!("Enqueue {}", names.join(","))
            }
            QueueMsg::Kick => "Kick".into(),
            QueueMsg::Finished { id, outcome } => {
                format!("Finished {id} {}", outcome.summary())
            }
            QueueMsg::Dump(_) => "Dump".into(),
            QueueMsg::Restart(t) => format!("Restart {}", t.description),
        }
    }
}

/// Start-up arguments of a queue actor.
pub struct QueueArgs<K, E> {
    /// Queue name.
    pub name: String,
    /// The journal.
    pub sink: Arc<dyn EventSink<E>>,
    /// Runs tasks.
    pub handler: Arc<dyn TaskHandler<K>>,
    /// Other queues.
    pub router: Arc<dyn Router<K>>,
    /// The subsystem's queue rules.
    pub rules: Arc<dyn QueueRules<K>>,
    /// This actor's mailbox tracking.
    pub mailbox: MailboxHandle,
    /// Contents restored from the journal (every queue's; this actor keeps its own).
    pub restored: Queues<K>,
    /// Park a task after this many failed attempts (`None` = retry forever, as the
    /// reference does).
    pub max_attempts: Option<u32>,
    /// Time low-level queue operations (`tasks_queue_action_duration_seconds`).
    pub action_metrics: bool,
    /// The host's work gate: no task starts once it stops, and running ones are counted.
    pub gate: crate::lifecycle::WorkGate,
}

/// `tasks_queue_action_duration_seconds` of one queue: a histogram per [`QueueAction`],
/// registered at its first use (so that actions a queue never does show no series). Off,
/// it holds nothing and times nothing: the operation alone runs.
struct ActionTimes {
    queue: String,
    histograms: Option<[Option<metrics::Histogram>; QueueAction::ALL.len()]>,
}

impl ActionTimes {
    fn new(queue: &str, on: bool) -> ActionTimes {
        ActionTimes {
            queue: queue.to_string(),
            histograms: on.then(Default::default),
        }
    }

    /// Runs `op`, timing it as `action`.
    fn measure<T>(&mut self, action: QueueAction, op: impl FnOnce() -> T) -> T {
        let Some(histograms) = &mut self.histograms else {
            return op();
        };
        let started = Instant::now();
        let out = op();
        let took = started.elapsed();
        histograms[action as usize]
            .get_or_insert_with(|| {
                metrics::histogram!(
                    TASKS_QUEUE_ACTION_DURATION_SECONDS,
                    "queue_name" => self.queue.clone(),
                    "queue_action" => action.as_str()
                )
            })
            .record(took.as_secs_f64());
        out
    }
}

/// Events handed to the journal whose flush is still under way when their task starts.
///
/// A task's hook starts while its `taskStarted` (and the previous task's end) is being
/// flushed, instead of after: the flush and the process start overlap. This is safe
/// because the journal keeps order — whatever the run journals (values patches) was
/// handed over later and lands after it — and the task reports its end only once the
/// flush is done, so its end never lands without its start. A crash before the flush
/// completes leaves the task queued, and it runs again after the restart, exactly as after
/// a crash during the run itself.
struct Durable<E> {
    ack: Option<BoxFut<'static, Result<u64, PortError>>>,
    events: Vec<E>,
    sink: Option<Arc<dyn EventSink<E>>>,
}

impl<E> Default for Durable<E> {
    fn default() -> Self {
        Durable {
            ack: None,
            events: Vec::new(),
            sink: None,
        }
    }
}

impl<E: Clone + Send + 'static> Durable<E> {
    /// Whether the flush is done, looked at once without waiting (it usually is by the time
    /// the task ends: the flush overlaps the run).
    fn done_now(&mut self) -> bool {
        let Some(ack) = &mut self.ack else {
            return self.sink.is_none();
        };
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match ack.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(_)) => {
                self.ack = None;
                self.sink = None;
                true
            }
            // Refused: `wait` appends the events again.
            std::task::Poll::Ready(Err(_)) => {
                self.ack = None;
                false
            }
            std::task::Poll::Pending => false,
        }
    }

    /// Waits for the flush; if the journal refused the events, appends them again until it
    /// takes them.
    async fn wait(self, queue: &str) {
        let Some(sink) = self.sink else {
            return;
        };
        if let Some(ack) = self.ack
            && ack.await.is_ok()
        {
            return;
        }
        let mut delay = Duration::from_millis(100);
        loop {
            match sink.append(self.events.clone()).await {
                Ok(_) => return,
                Err(e) => {
                    tracing::error!(queue, error = %e, "cannot journal queue transition; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// A queue actor for tasks of kind `K`, journaling into events of type `E`.
pub struct QueueActor<K, E>(std::marker::PhantomData<fn() -> (K, E)>);

impl<K, E> Default for QueueActor<K, E> {
    fn default() -> Self {
        QueueActor(std::marker::PhantomData)
    }
}

/// Its state.
pub struct QueueState<K: TaskKind, E> {
    name: String,
    sink: Arc<dyn EventSink<E>>,
    handler: Arc<dyn TaskHandler<K>>,
    router: Arc<dyn Router<K>>,
    rules: Arc<dyn QueueRules<K>>,
    mailbox: MailboxHandle,
    me: Tracked<QueueMsg<K>>,
    state: Queues<K>,
    running: Option<TaskId>,
    restart: Option<TaskSpec<K>>,
    max_attempts: Option<u32>,
    activity: Activity,
    /// Events applied in memory but not yet journaled. The actor handles no other
    /// message before [`QueueState::flush`] makes them durable, so nothing outside sees a
    /// transition before the journal has it — except a task's start, whose hook runs while
    /// the flush completes (see [`Durable`]).
    staged: Vec<E>,
    /// When each task not started yet was queued (restored ones: when this actor started).
    queued_at: HashMap<TaskId, Instant>,
    /// When the running task started (for its finish log line).
    running_since: Option<Instant>,
    /// The host's work gate.
    gate: crate::lifecycle::WorkGate,
    /// The running task in the gate's count (`WorkGate::wait_idle`).
    in_flight: Option<crate::lifecycle::InFlight>,
    length: metrics::Gauge,
    parked: metrics::Gauge,
    actions: ActionTimes,
    /// When the failed head may run again, on the runtime's clock: its journaled retry time
    /// (wall clock, kept across restarts) turned into a deadline the first time it is
    /// waited for, so that the wait is one timer, and tokio's paused time in tests skips it.
    retry_due: Option<(TaskId, u64, tokio::time::Instant)>,
}

impl<K: TaskKind, E: From<TaskEvent<K>> + Clone + Send + 'static> QueueState<K, E> {
    fn tasks(&self) -> &[QueuedTask<K>] {
        self.state.queue(&self.name)
    }

    /// The head task, cloned.
    fn first(&mut self) -> Option<QueuedTask<K>> {
        let name = &self.name;
        let state = &self.state;
        self.actions
            .measure(QueueAction::GetFirst, || state.queue(name).first().cloned())
    }

    /// Applies events in memory and keeps them for the next [`QueueState::flush`].
    fn stage(&mut self, events: Vec<TaskEvent<K>>) {
        for e in &events {
            match QueueAction::of(e) {
                Some(action) => self.actions.measure(action, || self.state.apply(e)),
                None => self.state.apply(e),
            }
        }
        let now = Instant::now();
        for e in &events {
            match e {
                TaskEvent::TaskEnqueued { task, .. } => {
                    self.queued_at.insert(task.id, now);
                }
                TaskEvent::TaskSucceeded { id }
                | TaskEvent::TaskDropped { id, .. }
                | TaskEvent::TaskMerged { id, .. }
                | TaskEvent::TaskParked { id, .. } => {
                    self.queued_at.remove(id);
                }
                _ => {}
            }
        }
        self.staged.extend(events.into_iter().map(E::from));
        self.length.set(self.tasks().len() as f64);
        self.parked.set(self.state.parked(&self.name).len() as f64);
    }

    /// Counts the time a task waited before its first start.
    fn record_wait(&mut self, task: &QueuedTask<K>) {
        let Some(at) = self.queued_at.remove(&task.spec.id) else {
            return;
        };
        let [(k1, v1), (k2, v2), (k3, v3)] = self.rules.wait_labels(task);
        // A float counter: recorded on a gauge that only grows (see the exporter).
        metrics::gauge!(
            TASK_WAIT_IN_QUEUE_SECONDS_TOTAL,
            k1 => v1,
            k2 => v2,
            k3 => v3,
            "queue" => self.name.clone()
        )
        .increment(at.elapsed().as_secs_f64());
    }

    /// Journals the staged events durably (retrying until the journal takes them).
    async fn flush(&mut self) -> Result<(), ActorProcessingErr> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let mut delay = Duration::from_millis(100);
        loop {
            match self.sink.append(self.staged.clone()).await {
                Ok(_) => break,
                Err(e) => {
                    tracing::error!(queue = %self.name, error = %e, "cannot journal queue transition; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        self.staged.clear();
        Ok(())
    }

    /// Hands the staged events to the journal without waiting for the flush; what is
    /// returned waits for it. A journal that cannot take them now is retried here, as
    /// [`QueueState::flush`] does.
    async fn submit_staged(&mut self) -> Result<Durable<E>, ActorProcessingErr> {
        if self.staged.is_empty() {
            return Ok(Durable::default());
        }
        match self.sink.submit(self.staged.clone()) {
            Ok(ack) => {
                let events = std::mem::take(&mut self.staged);
                Ok(Durable {
                    ack: Some(ack),
                    events,
                    sink: Some(self.sink.clone()),
                })
            }
            Err(e) => {
                tracing::error!(queue = %self.name, error = %e, "cannot journal queue transition; retrying");
                self.flush().await?;
                Ok(Durable::default())
            }
        }
    }

    /// A task appended behind one that does the same work and has not started adds
    /// nothing (a new converge behind a queued one: it reads the values when it runs).
    fn already_queued(&self, task: &TaskSpec<K>, position: Position) -> bool {
        if position != Position::Tail {
            return false;
        }
        let queued = self.tasks().last().is_some_and(|last| {
            self.running != Some(last.spec.id) && self.rules.redundant_at_tail(task, &last.spec)
        });
        if queued {
            tracing::debug!(queue = %self.name, "the same work is already queued; {} not added", task.description);
        }
        queued
    }

    /// Stages and journals events.
    async fn commit(&mut self, events: Vec<TaskEvent<K>>) -> Result<(), ActorProcessingErr> {
        self.stage(events);
        self.flush().await
    }

    /// A task's line for log messages: its queue-dump line without the failure count and
    /// the last error (the dump shows them; a log line gives them their own fields, so a
    /// retried task's lines do not repeat a long error).
    fn log_line(&self, task: &QueuedTask<K>) -> String {
        if task.failures == 0 && task.last_error.is_empty() {
            return self.rules.describe(task);
        }
        let mut bare = task.clone();
        bare.failures = 0;
        bare.last_error.clear();
        self.rules.describe(&bare)
    }

    fn kick_after(&self, delay: Duration) {
        let me = self.me.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = me.cast(QueueMsg::Kick);
        });
    }

    fn kick(&self) {
        let _ = self.me.cast(QueueMsg::Kick);
    }

    async fn start_head(&mut self) -> Result<(), ActorProcessingErr> {
        if self.running.is_some() || self.gate.is_stopping() {
            return Ok(());
        }
        if let Some(task) = self.restart.take() {
            let tasks = self.state.queue(&self.name);
            let rules = &self.rules;
            let mut events: Vec<TaskEvent<K>> = self.actions.measure(QueueAction::Filter, || {
                tasks
                    .iter()
                    .filter(|t| rules.dropped_by_restart(&t.spec))
                    .map(|t| TaskEvent::TaskDropped {
                        id: t.spec.id,
                        reason: format!("superseded by {}", task.description),
                    })
                    .collect()
            });
            tracing::info!(queue = %self.name, dropped = events.len(), "restarted: {}", task.description);
            events.push(TaskEvent::TaskEnqueued {
                task,
                position: Position::Head,
            });
            self.commit(events).await?;
        }
        // The head is looked at in place; it is cloned once, below, for its run.
        let Some((head_id, head_attempts, retry_at)) = self
            .tasks()
            .first()
            .map(|h| (h.spec.id, h.attempts, h.next_retry_at_ms))
        else {
            return Ok(());
        };
        if let Some(at) = retry_at {
            let due = match self.retry_due {
                Some((id, of, due)) if id == head_id && of == at => due,
                _ => {
                    let due = tokio::time::Instant::now()
                        + Duration::from_millis(at.saturating_sub(now_ms()));
                    self.retry_due = Some((head_id, at, due));
                    due
                }
            };
            let delay = due.saturating_duration_since(tokio::time::Instant::now());
            if !delay.is_zero() {
                if !matches!(self.activity, Activity::Sleeping { .. }) {
                    self.activity = Activity::sleeping(
                        format!("sleep after fail for {}", go_duration(delay)),
                        delay,
                    );
                }
                self.kick_after(delay);
                return Ok(());
            }
        }
        if let Some(delay) = self
            .tasks()
            .first()
            .and_then(|head| self.handler.ready_in(head))
        {
            self.activity = Activity::sleeping(
                format!("wait for the rate limit for {}", go_duration(delay)),
                delay,
            );
            self.kick_after(delay);
            return Ok(());
        }
        let mut events: Vec<TaskEvent<K>> = Vec::new();
        let tasks = self.state.queue(&self.name);
        let rules = &self.rules;
        let compaction = self
            .actions
            .measure(QueueAction::Compact, || rules.compaction(tasks));
        if let Some((into, merged)) = compaction {
            events.extend(
                merged
                    .into_iter()
                    .map(|id| TaskEvent::TaskMerged { id, into }),
            );
        }
        self.stage(std::mem::take(&mut events));
        let tasks = self.state.queue(&self.name);
        let rules = &self.rules;
        let adjacent = self
            .actions
            .measure(QueueAction::Compact, || rules.adjacent_mergeable(tasks));
        for id in adjacent {
            events.push(TaskEvent::TaskMerged { id, into: head_id });
        }
        events.push(TaskEvent::TaskStarted {
            id: head_id,
            attempt: head_attempts + 1,
        });
        // One journal write covers the previous task's end and this one's start. The task
        // starts while that write is flushed: see `durable_then`.
        self.stage(events);
        let durable = self.submit_staged().await?;
        let Some(task) = self.first() else {
            return Ok(());
        };
        self.running = Some(task.spec.id);
        self.in_flight = Some(self.gate.task_started());
        self.running_since = Some(Instant::now());
        self.activity = Activity::Running;
        self.record_wait(&task);
        let line = self.log_line(&task);
        // The previous error was logged when it happened ("task failed", in its own field).
        tracing::info!(queue = %self.name, task = %line, attempt = task.attempts, failures = task.failures, "task started");
        let job = self.mailbox.job_started(format!("task {line}"));
        let done = self.completion(task.spec.id, durable, job);
        self.handler.clone().start(task, done);
        Ok(())
    }

    /// How task `id` reports its end: as a `Finished` message to this actor, once its
    /// start is durable (see [`Durable`]; it nearly always is by then, and then the report
    /// goes out from where the run ended, with no task in between).
    fn completion(&self, id: TaskId, mut durable: Durable<E>, job: u64) -> Completion<K> {
        let me = self.me.clone();
        let mailbox = self.mailbox.clone();
        let queue = self.name.clone();
        Completion::new(move |outcome| {
            let report = move |outcome: TaskOutcome<K>| {
                let summary = outcome.summary();
                // Report first, so the actor never looks idle between the two.
                let _ = me.cast(QueueMsg::Finished { id, outcome });
                mailbox.job_finished(job, summary);
            };
            if durable.done_now() {
                return report(outcome);
            }
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(async move {
                        durable.wait(&queue).await;
                        report(outcome)
                    });
                }
                // No runtime: the process is stopping and nothing would take the report.
                Err(_) => tracing::debug!(queue = %queue, "a task ended as the process stopped"),
            }
        })
    }

    fn split_foreign(&self, tasks: Vec<TaskSpec<K>>) -> Vec<TaskSpec<K>> {
        let (own, foreign): (Vec<_>, Vec<_>) =
            tasks.into_iter().partition(|t| t.queue == self.name);
        for t in foreign {
            let queue = t.queue.clone();
            self.router.enqueue(&queue, vec![t]);
        }
        own
    }

    async fn finished(
        &mut self,
        id: TaskId,
        outcome: TaskOutcome<K>,
    ) -> Result<(), ActorProcessingErr> {
        if self.running != Some(id) {
            return Ok(());
        }
        // Counted as running until its end is journaled (when this returns).
        let _in_flight = self.in_flight.take();
        self.running = None;
        self.activity = Activity::Idle;
        let took = self
            .running_since
            .take()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        let Some((line, failures_before)) = self
            .tasks()
            .iter()
            .find(|t| t.spec.id == id)
            .map(|t| (self.log_line(t), t.failures))
        else {
            return Ok(());
        };
        tracing::info!(
            queue = %self.name,
            task = %line,
            duration = ?took,
            outcome = if matches!(outcome, TaskOutcome::Fail(_)) { "failed" } else { "done" },
            "task finished"
        );
        let mut events = Vec::new();
        match outcome {
            TaskOutcome::Success { head, after, tail } => {
                let mut prev = id;
                for t in self.split_foreign(after) {
                    let tid = t.id;
                    events.push(TaskEvent::TaskEnqueued {
                        task: t,
                        position: Position::After(prev),
                    });
                    prev = tid;
                }
                events.push(TaskEvent::TaskSucceeded { id });
                let mut prev: Option<TaskId> = None;
                for t in self.split_foreign(head) {
                    let tid = t.id;
                    let position = prev.map_or(Position::Head, Position::After);
                    events.push(TaskEvent::TaskEnqueued { task: t, position });
                    prev = Some(tid);
                }
                for t in self.split_foreign(tail) {
                    events.push(TaskEvent::TaskEnqueued {
                        task: t,
                        position: Position::Tail,
                    });
                }
                // Start the next task in the same journal write as this one's end.
                self.stage(events);
                self.start_head().await?;
                self.flush().await?;
            }
            TaskOutcome::Fail(error) => {
                let failures = failures_before + 1;
                let delay = backoff(failures_before, jitter());
                tracing::error!(queue = %self.name, task = %line, failures, retry_in = ?delay, error = %error, "task failed");
                events.push(TaskEvent::TaskFailed {
                    id,
                    error: error.clone(),
                    failures,
                    next_retry_at_ms: now_ms() + delay.as_millis() as u64,
                });
                let park = self.max_attempts.is_some_and(|m| failures >= m);
                if park {
                    tracing::error!(queue = %self.name, task = %line, "task parked after {failures} failed attempts");
                    events.push(TaskEvent::TaskParked { id, reason: error });
                }
                self.commit(events).await?;
                if park {
                    self.kick()
                } else {
                    self.activity = Activity::sleeping(
                        format!("sleep after fail for {}", go_duration(delay)),
                        delay,
                    );
                    self.kick_after(delay)
                }
            }
            TaskOutcome::Keep { head, delay } => {
                let mut prev: Option<TaskId> = None;
                for t in self.split_foreign(head) {
                    let tid = t.id;
                    events.push(TaskEvent::TaskEnqueued {
                        task: t,
                        position: prev.map_or(Position::Before(id), Position::After),
                    });
                    prev = Some(tid);
                }
                self.commit(events).await?;
                if delay.is_zero() {
                    self.kick()
                } else {
                    self.activity =
                        Activity::sleeping(format!("sleep for {}", go_duration(delay)), delay);
                    self.kick_after(delay)
                }
            }
            TaskOutcome::Repeat(delay) => {
                self.activity = Activity::sleeping("repeat head task".into(), delay);
                self.kick_after(delay)
            }
        }
        Ok(())
    }

    fn dump(&self) -> QueueDump<K> {
        let tasks = self.tasks().to_vec();
        QueueDump {
            name: self.name.clone(),
            lines: tasks.iter().map(|t| self.rules.describe(t)).collect(),
            parked: self.state.parked(&self.name).to_vec(),
            running: self.running,
            tasks,
            status: self.activity.status(),
        }
    }
}

impl<K: TaskKind, E: From<TaskEvent<K>> + Clone + Send + Sync + 'static> Actor
    for QueueActor<K, E>
{
    type Msg = Envelope<QueueMsg<K>>;
    type State = QueueState<K, E>;
    type Arguments = QueueArgs<K, E>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: QueueArgs<K, E>,
    ) -> Result<QueueState<K, E>, ActorProcessingErr> {
        let me = Tracked::new(myself, args.mailbox.clone());
        let started = Instant::now();
        let queued_at = args
            .restored
            .queue(&args.name)
            .iter()
            .map(|t| (t.spec.id, started))
            .collect();
        let length = metrics::gauge!(TASKS_QUEUE_LENGTH, "queue" => args.name.clone());
        let parked = metrics::gauge!(PARKED_TASKS, "queue" => args.name.clone());
        let actions = ActionTimes::new(&args.name, args.action_metrics);
        let mut state = QueueState {
            name: args.name,
            sink: args.sink,
            handler: args.handler,
            router: args.router,
            rules: args.rules,
            mailbox: args.mailbox,
            me,
            state: args.restored,
            running: None,
            restart: None,
            staged: Vec::new(),
            max_attempts: args.max_attempts,
            activity: Activity::Idle,
            retry_due: None,
            queued_at,
            running_since: None,
            gate: args.gate,
            in_flight: None,
            length,
            parked,
            actions,
        };
        state.stage(Vec::new());
        state.kick();
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        envelope: Self::Msg,
        st: &mut QueueState<K, E>,
    ) -> Result<(), ActorProcessingErr> {
        st.mailbox.begin(envelope.seq);
        let result = match envelope.msg {
            QueueMsg::Enqueue(tasks) => {
                let events = tasks
                    .into_iter()
                    .filter(|(task, position)| !st.already_queued(task, *position))
                    .map(|(task, position)| TaskEvent::TaskEnqueued { task, position })
                    .collect();
                let r = st.commit(events).await;
                st.kick();
                r
            }
            QueueMsg::Kick => st.start_head().await,
            QueueMsg::Finished { id, outcome } => st.finished(id, outcome).await,
            QueueMsg::Dump(reply) => {
                let _ = reply.send(st.dump());
                Ok(())
            }
            QueueMsg::Restart(task) => {
                st.restart = Some(*task);
                st.kick();
                Ok(())
            }
        };
        st.mailbox.end();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn recorder() -> (Arc<Mutex<Vec<String>>>, Completion<()>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let done = Completion::new(move |outcome: TaskOutcome<()>| {
            sink.lock().expect("lock").push(outcome.summary())
        });
        (seen, done)
    }

    #[test]
    fn a_completion_reports_the_outcome_it_is_given_once() {
        let (seen, done) = recorder();
        done.finish(TaskOutcome::done());
        assert_eq!(*seen.lock().expect("lock"), vec!["success".to_string()]);
    }

    #[test]
    fn a_completion_dropped_unfinished_reports_a_failure() {
        // The actor that held it stopped: the queue must not wait for the task forever.
        let (seen, done) = recorder();
        drop(done);
        let seen = seen.lock().expect("lock");
        assert_eq!(seen.len(), 1);
        assert!(seen[0].starts_with("fail: "), "{seen:?}");
        assert!(seen[0].contains("stopped before it ended"), "{seen:?}");
    }
}
