//! Queue rules: retry backoff, merging of adjacent hook tasks, group compaction, the
//! 100-task compaction and queue-dump descriptions, as shell-operator/addon-operator do.
//! Pure functions over the queue contents; the queue actor turns their answers into events.

use std::time::Duration;

use serde_json::Value;

use crate::events::{Event, Position, TaskId, TaskSpec, TaskType};
use crate::state::QueuedTask;

/// Queued tasks of one hook at which all of them are compacted into one.
pub const COMPACTION_THRESHOLD: usize = 100;

/// The low-level operations on a queue's contents that `tasks_queue_action_duration_seconds`
/// times, named as the reference's task queue names its methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueAction {
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
    /// update a task in place (started, failed) or concern no queue.
    pub fn of(event: &Event) -> Option<QueueAction> {
        match event {
            Event::TaskEnqueued { position, .. } => Some(match position {
                Position::Head => QueueAction::AddFirst,
                Position::Tail => QueueAction::AddLast,
                Position::After(_) => QueueAction::AddAfter,
                Position::Before(_) => QueueAction::AddBefore,
            }),
            Event::TaskSucceeded { .. } | Event::TaskDropped { .. } | Event::TaskParked { .. } => {
                Some(QueueAction::Remove)
            }
            Event::TaskMerged { .. } => Some(QueueAction::Merge),
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

/// Binding contexts carried by a task (`params.bindingContexts`).
pub fn contexts(task: &QueuedTask) -> Vec<Value> {
    task.spec.params["bindingContexts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Whether a task is a step of a converge ("reload all modules"): its phases, its module
/// runs, and its beforeAll/afterAll hook runs.
pub fn is_converge_step(t: &TaskSpec) -> bool {
    let binding = t.params["bindingContexts"][0]["binding"].as_str();
    match t.task_type {
        TaskType::ConvergeModules => true,
        TaskType::ModuleRun => t.params["reloadAll"].as_bool() == Some(true),
        TaskType::GlobalHookRun => matches!(binding, Some("beforeAll" | "afterAll")),
        _ => false,
    }
}

fn is_hook_run(t: TaskType) -> bool {
    matches!(t, TaskType::GlobalHookRun | TaskType::ModuleHookRun)
}

fn sync_flags(task: &QueuedTask) -> Option<(bool, bool)> {
    let ctx = contexts(task);
    let sync = ctx.iter().any(|c| c["type"] == "Synchronization");
    sync.then(|| {
        let p = &task.spec.params;
        (
            p["waitForSynchronization"].as_bool().unwrap_or(true),
            p["executeHookOnSynchronization"].as_bool().unwrap_or(true),
        )
    })
}

/// Tasks right behind the head that merge into it: same hook, same task type, adjacent,
/// and — for Synchronization tasks — the same wait/execute flags. onStartup and
/// before/after tasks never merge.
pub fn adjacent_mergeable(queue: &[QueuedTask]) -> Vec<TaskId> {
    let Some(head) = queue.first() else {
        return Vec::new();
    };
    if !is_hook_run(head.spec.task_type) || head.spec.hook.is_none() || !mergeable_binding(head) {
        return Vec::new();
    }
    let head_flags = sync_flags(head);
    queue[1..]
        .iter()
        .take_while(|t| {
            t.spec.task_type == head.spec.task_type
                && t.spec.hook == head.spec.hook
                && mergeable_binding(t)
                && (head_flags.is_none() || sync_flags(t).is_none() || sync_flags(t) == head_flags)
        })
        .map(|t| t.spec.id)
        .collect()
}

fn mergeable_binding(task: &QueuedTask) -> bool {
    contexts(task).iter().all(|c| {
        !matches!(
            c["binding"].as_str(),
            Some("onStartup" | "beforeAll" | "afterAll" | "beforeHelm" | "afterHelm")
        )
    })
}

/// Drops every context followed by one of the same non-empty group (the last of each
/// run of equal groups is kept; ungrouped contexts are kept in order).
pub fn compact_groups(contexts: Vec<Value>) -> Vec<Value> {
    let group = |c: &Value| {
        c["groupName"]
            .as_str()
            .filter(|g| !g.is_empty())
            .map(String::from)
    };
    let mut out: Vec<Value> = Vec::with_capacity(contexts.len());
    for c in contexts {
        if let (Some(g), Some(last)) = (group(&c), out.last())
            && group(last).as_deref() == Some(g.as_str())
        {
            out.pop();
        }
        out.push(c);
    }
    out
}

/// When one hook has at least [`COMPACTION_THRESHOLD`] queued compactable tasks (not the
/// head, which may be running), all of them merge into the first: `(into, merged)`.
pub fn plan_compaction(queue: &[QueuedTask]) -> Option<(TaskId, Vec<TaskId>)> {
    let mut counts: std::collections::BTreeMap<&str, Vec<TaskId>> = Default::default();
    for t in queue
        .iter()
        .skip(1)
        .filter(|t| t.spec.task_type == TaskType::ModuleHookRun)
    {
        if let Some(h) = t.spec.hook.as_deref() {
            counts.entry(h).or_default().push(t.spec.id);
        }
    }
    counts
        .into_values()
        .find(|ids| ids.len() >= COMPACTION_THRESHOLD)
        .and_then(|ids| {
            let (first, rest) = ids.split_first()?;
            Some((*first, rest.to_vec()))
        })
}

/// The queue-dump line of a task: `<TaskType>:<queue>[:<description>][:failures N[:error]]`.
pub fn describe(task: &QueuedTask) -> String {
    let mut s = format!("{:?}:{}", task.spec.task_type, task.spec.queue);
    if !task.spec.description.is_empty() {
        s.push(':');
        s.push_str(&task.spec.description);
    }
    if task.failures > 0 {
        s.push_str(&format!(":failures {}", task.failures));
        if !task.last_error.is_empty() {
            s.push(':');
            s.push_str(&task.last_error);
        }
    }
    s
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
    use crate::events::TaskSpec;
    use serde_json::json;

    fn task(id: u64, hook: &str, contexts: Value) -> QueuedTask {
        QueuedTask {
            spec: TaskSpec {
                id: TaskId(id),
                task_type: TaskType::ModuleHookRun,
                queue: "main".into(),
                module: Some("m".into()),
                hook: Some(hook.into()),
                description: format!("kubernetes:{hook}"),
                params: json!({"bindingContexts": contexts}),
            },
            attempts: 0,
            failures: 0,
            last_error: String::new(),
            next_retry_at_ms: None,
        }
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
    fn only_adjacent_tasks_of_the_same_hook_merge() {
        let ev = |n: u64| json!([{"binding": "pods", "type": "Event", "n": n}]);
        let q = vec![
            task(1, "a", ev(1)),
            task(2, "a", ev(2)),
            task(3, "a", ev(3)),
            task(4, "b", ev(4)),
            task(5, "a", ev(5)),
        ];
        assert_eq!(adjacent_mergeable(&q), [TaskId(2), TaskId(3)]);
        let startup = vec![
            task(1, "a", json!([{"binding": "onStartup"}])),
            task(2, "a", ev(2)),
        ];
        assert!(adjacent_mergeable(&startup).is_empty());
    }

    #[test]
    fn group_compaction_keeps_the_last_of_each_run() {
        let c = |g: &str, n: u64| {
            if g.is_empty() {
                json!({"n": n})
            } else {
                json!({"groupName": g, "n": n})
            }
        };
        let out = compact_groups(vec![
            c("g", 1),
            c("g", 2),
            c("", 3),
            c("g", 4),
            c("h", 5),
            c("h", 6),
        ]);
        let ns: Vec<u64> = out.iter().filter_map(|v| v["n"].as_u64()).collect();
        assert_eq!(ns, [2, 3, 4, 6]);
    }

    #[test]
    fn hundred_queued_tasks_of_one_hook_compact() {
        let mut q: Vec<QueuedTask> = (0..101).map(|i| task(i, "a", json!([{"n": i}]))).collect();
        let (into, merged) = plan_compaction(&q).unwrap_or((TaskId(0), Vec::new()));
        assert_eq!((into, merged.len()), (TaskId(1), 99));
        q.truncate(50);
        assert!(plan_compaction(&q).is_none());
    }

    #[test]
    fn queue_actions_follow_the_event_and_index_all() {
        let spec = task(1, "a", json!([])).spec;
        let enqueued = |position| {
            QueueAction::of(&Event::TaskEnqueued {
                task: spec.clone(),
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
            QueueAction::of(&Event::TaskSucceeded { id: TaskId(1) }),
            Some(QueueAction::Remove)
        );
        assert_eq!(
            QueueAction::of(&Event::TaskStarted {
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

    #[test]
    fn descriptions_match_the_queue_dump() {
        let mut t = task(1, "hooks/a.sh", json!([]));
        assert_eq!(describe(&t), "ModuleHookRun:main:kubernetes:hooks/a.sh");
        t.failures = 2;
        t.last_error = "exit status 1".into();
        assert_eq!(
            describe(&t),
            "ModuleHookRun:main:kubernetes:hooks/a.sh:failures 2:exit status 1"
        );
    }
}
