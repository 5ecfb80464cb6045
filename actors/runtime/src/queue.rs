//! The contents of the FIFO queues as a pure fold of [`TaskEvent`]s, the rules a subsystem
//! injects into its queues, and the timing rules every queue shares (retry backoff, Go
//! durations in dumps).
//!
//! ```text
//!   TaskEvent ──► Queues::apply ──► queues (head first) + parked
//!                     ▲ same fold on replay, in the queue actors and in `bosun journal`
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::task::{Position, QueuedTask, TaskEvent, TaskId, TaskKind, TaskSpec};

/// Every queue's contents and parked tasks, folded from task events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound = "K: TaskKind")]
pub struct Queues<K> {
    /// Queue contents by queue name, head first. A deque, so a task that ends at the head
    /// leaves without the thousands behind it being moved; kept contiguous by every method
    /// here (see [`Queues::queue`]).
    pub queues: BTreeMap<String, VecDeque<QueuedTask<K>>>,
    /// Tasks set aside after too many attempts, by queue.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parked: BTreeMap<String, Vec<QueuedTask<K>>>,
    /// The highest task id seen (new tasks get higher ones).
    #[serde(default)]
    pub last_task_id: u64,
}

impl<K> Default for Queues<K> {
    fn default() -> Self {
        Queues {
            queues: BTreeMap::new(),
            parked: BTreeMap::new(),
            last_task_id: 0,
        }
    }
}

impl<K: TaskKind> Queues<K> {
    /// Folds one task event.
    pub fn apply(&mut self, event: &TaskEvent<K>) {
        match event {
            TaskEvent::TaskEnqueued { task, position } => {
                let fresh = task.id.0 > self.last_task_id;
                self.last_task_id = self.last_task_id.max(task.id.0);
                self.enqueue(task.clone(), *position, fresh)
            }
            TaskEvent::TaskStarted { id, attempt } => {
                if let Some(t) = self.task_mut(*id) {
                    t.attempts = *attempt;
                }
            }
            TaskEvent::TaskFailed {
                id,
                error,
                failures,
                next_retry_at_ms,
            } => {
                if let Some(t) = self.task_mut(*id) {
                    t.failures = *failures;
                    t.last_error = error.clone();
                    t.next_retry_at_ms = Some(*next_retry_at_ms);
                }
            }
            TaskEvent::TaskMerged { id, into } => {
                if *id != *into {
                    if let Some(merged) = self.task_mut(*id).map(|t| t.spec.kind.clone())
                        && let Some(target) = self.task_mut(*into)
                    {
                        target.spec.kind.absorb(&merged);
                    }
                    self.remove_task(*id);
                }
            }
            TaskEvent::TaskSucceeded { id } | TaskEvent::TaskDropped { id, .. } => {
                self.remove_task(*id)
            }
            TaskEvent::TaskParked { id, reason } => {
                if let Some(mut t) = self.task_mut(*id).cloned() {
                    self.remove_task(*id);
                    t.last_error = reason.clone();
                    self.parked.entry(t.spec.queue.clone()).or_default().push(t);
                }
            }
        }
    }

    /// The tasks of one queue, head first.
    pub fn queue(&self, name: &str) -> &[QueuedTask<K>] {
        self.queues.get(name).map_or(&[], |q| {
            let (front, back) = q.as_slices();
            debug_assert!(back.is_empty(), "queue {name} is not contiguous");
            front
        })
    }

    /// The parked tasks of one queue.
    pub fn parked(&self, name: &str) -> &[QueuedTask<K>] {
        self.parked.get(name).map(Vec::as_slice).unwrap_or_default()
    }

    /// Every queued task, queue by queue.
    pub fn tasks(&self) -> impl Iterator<Item = &QueuedTask<K>> {
        self.queues.values().flatten()
    }

    fn enqueue(&mut self, spec: TaskSpec<K>, position: Position, fresh: bool) {
        // A re-enqueued id replaces its old entry: ids are unique and increasing, so this
        // only happens in a journal written out of order, and keeping one copy keeps the
        // fold total. New ids skip the search.
        if !fresh {
            self.remove_task(spec.id);
        }
        let queue = self.queues.entry(spec.queue.clone()).or_default();
        let task = QueuedTask {
            spec,
            attempts: 0,
            failures: 0,
            last_error: String::new(),
            next_retry_at_ms: None,
        };
        let index = match position {
            Position::Head => 0,
            Position::Tail => queue.len(),
            Position::After(other) => queue
                .iter()
                .position(|t| t.spec.id == other)
                .map_or(queue.len(), |i| i + 1),
            Position::Before(other) => queue.iter().position(|t| t.spec.id == other).unwrap_or(0),
        };
        queue.insert(index, task);
        // A deque wraps around its buffer now and then (a task at the head of a queue whose
        // buffer starts at its first slot, or appended at the end of the buffer): moved
        // back into one piece, at most once per buffer's worth of inserts.
        queue.make_contiguous();
    }

    fn task_mut(&mut self, id: TaskId) -> Option<&mut QueuedTask<K>> {
        let (name, index) = self.locate(id).map(|(n, i)| (n.to_string(), i))?;
        self.queues.get_mut(&name)?.get_mut(index)
    }

    /// Where task `id` is: its queue's name and its index there. Heads are looked at first:
    /// the tasks that start, end and merge are nearly always heads, and a queue thousands
    /// of tasks deep is then not walked at every transition.
    fn locate(&self, id: TaskId) -> Option<(&str, usize)> {
        let head = self
            .queues
            .iter()
            .find(|(_, q)| q.front().is_some_and(|t| t.spec.id == id))
            .map(|(name, _)| (name.as_str(), 0));
        head.or_else(|| {
            self.queues.iter().find_map(|(name, q)| {
                q.iter()
                    .position(|t| t.spec.id == id)
                    .map(|i| (name.as_str(), i))
            })
        })
    }

    fn remove_task(&mut self, id: TaskId) {
        let Some((name, index)) = self.locate(id).map(|(n, i)| (n.to_string(), i)) else {
            return;
        };
        if let Some(q) = self.queues.get_mut(&name) {
            q.remove(index);
            if q.is_empty() {
                self.queues.remove(&name);
            }
        }
    }
}

/// What a subsystem decides about its own queues; the queue actor knows only FIFO order,
/// retries and journaling.
pub trait QueueRules<K>: Send + Sync + 'static {
    /// The queue-dump line of a task (`<Type>:<queue>[:<description>][:failures N[:error]]`).
    fn describe(&self, task: &QueuedTask<K>) -> String;
    /// Tasks right behind the head that merge into it before it starts.
    fn adjacent_mergeable(&self, queue: &[QueuedTask<K>]) -> Vec<TaskId>;
    /// Tasks merged wholesale before the head starts (`(into, merged)`), when a queue is
    /// flooded with one hook's tasks.
    fn compaction(&self, queue: &[QueuedTask<K>]) -> Option<(TaskId, Vec<TaskId>)>;
    /// A task appended at the tail that adds nothing because the tail already does the
    /// same work and has not started.
    fn redundant_at_tail(&self, task: &TaskSpec<K>, tail: &TaskSpec<K>) -> bool;
    /// Steps of a multi-step job that a restart of that job drops.
    fn dropped_by_restart(&self, task: &TaskSpec<K>) -> bool;
    /// Labels (`module`, `hook`, `binding`) of the time a task waited in its queue.
    fn wait_labels(&self, task: &QueuedTask<K>) -> [(&'static str, String); 3];
}

/// The low-level operations on a queue's contents that `tasks_queue_action_duration_seconds`
/// times, named as the reference's task queue names its methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueAction {
    /// A task inserted at the head.
    AddFirst,
    /// A task appended.
    AddLast,
    /// A task inserted after another.
    AddAfter,
    /// A task inserted before another.
    AddBefore,
    /// A task taken out (done, dropped or parked).
    Remove,
    /// A task merged into another (its binding contexts moved there).
    Merge,
    /// The head task read (to start it).
    GetFirst,
    /// The tasks of a restarted converge picked out to be dropped.
    Filter,
    /// Looking for tasks to merge: adjacent runs of one hook, and the 100-task compaction.
    Compact,
}

impl QueueAction {
    /// Every action, in the order of their `usize` values.
    pub const ALL: [QueueAction; 9] = [
        QueueAction::AddFirst,
        QueueAction::AddLast,
        QueueAction::AddAfter,
        QueueAction::AddBefore,
        QueueAction::Remove,
        QueueAction::Merge,
        QueueAction::GetFirst,
        QueueAction::Filter,
        QueueAction::Compact,
    ];

    /// The `queue_action` label.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueAction::AddFirst => "AddFirst",
            QueueAction::AddLast => "AddLast",
            QueueAction::AddAfter => "AddAfter",
            QueueAction::AddBefore => "AddBefore",
            QueueAction::Remove => "Remove",
            QueueAction::Merge => "Merge",
            QueueAction::GetFirst => "GetFirst",
            QueueAction::Filter => "Filter",
            QueueAction::Compact => "Compact",
        }
    }

    /// What applying `event` does to the queue's contents; `None` for events that only
    /// update a task in place (started, failed).
    pub fn of<K>(event: &TaskEvent<K>) -> Option<QueueAction> {
        match event {
            TaskEvent::TaskEnqueued { position, .. } => Some(match position {
                Position::Head => QueueAction::AddFirst,
                Position::Tail => QueueAction::AddLast,
                Position::After(_) => QueueAction::AddAfter,
                Position::Before(_) => QueueAction::AddBefore,
            }),
            TaskEvent::TaskSucceeded { .. }
            | TaskEvent::TaskDropped { .. }
            | TaskEvent::TaskParked { .. } => Some(QueueAction::Remove),
            TaskEvent::TaskMerged { .. } => Some(QueueAction::Merge),
            _ => None,
        }
    }
}

/// Delay before retrying a task that has failed `failures` times before this failure:
/// 5 s, then 5 s + 2^(n-1) s + jitter (0–1 s), truncated to 100 ms, capped at 32 s.
pub fn backoff(failures: u32, jitter: Duration) -> Duration {
    if failures == 0 {
        return Duration::from_secs(5);
    }
    let exp = 2u64.saturating_pow(failures.saturating_sub(1).min(20));
    let total = Duration::from_secs(5u64.saturating_add(exp)) + jitter.min(Duration::from_secs(1));
    let truncated = Duration::from_millis(total.as_millis() as u64 / 100 * 100);
    truncated.min(Duration::from_secs(32))
}

/// A duration as Go prints it (`5s`, `6.3s`, `1m32s`, `25ms`), millisecond precision.
pub fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&s.to_string());
    if frac > 0 {
        out.push('.');
        out.push_str(format!("{frac:03}").trim_end_matches('0'));
    }
    out.push('s');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind that carries a list of numbers and absorbs merged ones.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Numbers(Vec<u32>);

    impl TaskKind for Numbers {
        fn type_name(&self) -> &'static str {
            "Numbers"
        }
        fn absorb(&mut self, merged: &Self) {
            self.0.extend(&merged.0);
        }
    }

    fn spec(id: u64, queue: &str) -> TaskSpec<Numbers> {
        TaskSpec {
            id: TaskId(id),
            queue: queue.into(),
            description: String::new(),
            kind: Numbers(vec![id as u32]),
        }
    }

    fn ids(q: &Queues<Numbers>, name: &str) -> Vec<u64> {
        q.queue(name).iter().map(|t| t.spec.id.0).collect()
    }

    /// A queue used as a FIFO for long (its buffer wraps around again and again), with
    /// tasks put at its head and in its middle now and then, keeps its order, and every
    /// look at it sees one piece.
    #[test]
    fn a_long_lived_queue_keeps_its_order() {
        let mut q = Queues::default();
        let mut model: std::collections::VecDeque<u64> = Default::default();
        for round in 0..2_000u64 {
            let next = round + 1;
            let position = match round % 7 {
                0 => Position::Head,
                3 => model
                    .get(model.len() / 2)
                    .map_or(Position::Tail, |&id| Position::After(TaskId(id))),
                _ => Position::Tail,
            };
            q.apply(&TaskEvent::TaskEnqueued {
                task: spec(next, "main"),
                position,
            });
            match position {
                Position::Head => model.push_front(next),
                Position::After(TaskId(after)) => {
                    let i = model
                        .iter()
                        .position(|&id| id == after)
                        .map_or(0, |i| i + 1);
                    model.insert(i, next);
                }
                _ => model.push_back(next),
            }
            if round % 3 != 0
                && let Some(head) = model.pop_front()
            {
                q.apply(&TaskEvent::TaskStarted {
                    id: TaskId(head),
                    attempt: 1,
                });
                q.apply(&TaskEvent::TaskSucceeded { id: TaskId(head) });
            }
            assert_eq!(ids(&q, "main"), Vec::from(model.clone()), "round {round}");
        }
        assert_eq!(q.queue("main").len(), model.len());
    }

    #[test]
    fn positions_failures_merges_and_parking() {
        let mut q = Queues::default();
        let enqueue = |id, position| TaskEvent::TaskEnqueued {
            task: spec(id, "main"),
            position,
        };
        for e in [
            enqueue(1, Position::Tail),
            enqueue(2, Position::Head),
            enqueue(3, Position::After(TaskId(2))),
            enqueue(4, Position::Before(TaskId(1))),
        ] {
            q.apply(&e);
        }
        assert_eq!(ids(&q, "main"), [2, 3, 4, 1]);
        q.apply(&TaskEvent::TaskFailed {
            id: TaskId(2),
            error: "boom".into(),
            failures: 1,
            next_retry_at_ms: 9,
        });
        assert_eq!(q.queue("main")[0].last_error, "boom");
        q.apply(&TaskEvent::TaskMerged {
            id: TaskId(3),
            into: TaskId(2),
        });
        assert_eq!(q.queue("main")[0].spec.kind, Numbers(vec![2, 3]));
        q.apply(&TaskEvent::TaskParked {
            id: TaskId(2),
            reason: "gave up".into(),
        });
        assert_eq!(ids(&q, "main"), [4, 1]);
        assert_eq!(q.parked("main")[0].last_error, "gave up");
        q.apply(&TaskEvent::TaskSucceeded { id: TaskId(4) });
        q.apply(&TaskEvent::TaskDropped {
            id: TaskId(1),
            reason: "x".into(),
        });
        assert!(q.queues.is_empty(), "empty queues are removed");
        assert_eq!(q.last_task_id, 4);
    }

    #[test]
    fn backoff_follows_the_reference_curve() {
        let secs: Vec<u64> = (0..8)
            .map(|n| backoff(n, Duration::ZERO).as_secs())
            .collect();
        assert_eq!(secs, [5, 6, 7, 9, 13, 21, 32, 32]);
        assert_eq!(
            backoff(2, Duration::from_millis(456)),
            Duration::from_millis(7400)
        );
        assert_eq!(
            backoff(u32::MAX, Duration::from_secs(5)),
            Duration::from_secs(32)
        );
    }

    #[test]
    fn queue_actions_follow_the_event_and_index_all() {
        let enqueued = |position| {
            QueueAction::of(&TaskEvent::TaskEnqueued {
                task: spec(1, "main"),
                position,
            })
        };
        assert_eq!(enqueued(Position::Head), Some(QueueAction::AddFirst));
        assert_eq!(enqueued(Position::Tail), Some(QueueAction::AddLast));
        assert_eq!(
            enqueued(Position::After(TaskId(3))),
            Some(QueueAction::AddAfter)
        );
        assert_eq!(
            QueueAction::of(&TaskEvent::<Numbers>::TaskSucceeded { id: TaskId(1) }),
            Some(QueueAction::Remove)
        );
        assert_eq!(
            QueueAction::of(&TaskEvent::<Numbers>::TaskStarted {
                id: TaskId(1),
                attempt: 1
            }),
            None
        );
        for (i, a) in QueueAction::ALL.iter().enumerate() {
            assert_eq!(*a as usize, i, "{}", a.as_str());
        }
    }

    #[test]
    fn durations_print_like_go() {
        let d = |ms: u64| go_duration(Duration::from_millis(ms));
        assert_eq!(
            [d(0), d(25), d(5000), d(6300), d(92_000), d(3_605_000)],
            ["0s", "25ms", "5s", "6.3s", "1m32s", "1h0m5s"]
        );
    }
}
