//! addon-operator's queue rules: merging of adjacent hook tasks, group compaction, the
//! 100-task compaction, queue-dump descriptions and which steps a restarted converge
//! drops. Pure functions over the queue contents; [`AddonQueueRules`] hands them to the
//! runtime's queue actor, which turns their answers into task events.

use bosun_runtime::QueueRules;

use crate::context_stub::ContextStub;
use crate::events::{TaskId, TaskSpec};
use crate::state::QueuedTask;
use crate::task::{AddonTask, ConvergePhase};

/// Queued tasks of one hook at which all of them are compacted into one.
pub(crate) const COMPACTION_THRESHOLD: usize = 100;

/// The rules the addon's queues run by.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AddonQueueRules;

impl QueueRules<AddonTask> for AddonQueueRules {
    fn describe(&self, task: &QueuedTask) -> String {
        describe(task)
    }

    fn adjacent_mergeable(&self, queue: &[QueuedTask]) -> Vec<TaskId> {
        adjacent_mergeable(queue)
    }

    fn compaction(&self, queue: &[QueuedTask]) -> Option<(TaskId, Vec<TaskId>)> {
        plan_compaction(queue)
    }

    /// A new converge appended behind one that has not started yet adds nothing: the
    /// queued one reads the values and flags when it runs (the reference deduplicates
    /// adjacent converges the same way).
    fn redundant_at_tail(&self, task: &TaskSpec, tail: &TaskSpec) -> bool {
        let fresh = |t: &TaskSpec| t.kind.converge_phase() == Some(ConvergePhase::StandBy);
        fresh(task) && fresh(tail)
    }

    fn dropped_by_restart(&self, task: &TaskSpec) -> bool {
        is_converge_step(task)
    }

    fn wait_labels(&self, task: &QueuedTask) -> [(&'static str, String); 3] {
        [
            (
                "module",
                task.spec.kind.module().unwrap_or_default().to_string(),
            ),
            (
                "hook",
                task.spec.kind.hook().unwrap_or_default().to_string(),
            ),
            ("binding", crate::telemetry::binding_of(task)),
        ]
    }
}

/// Whether a task is a step of a converge ("reload all modules"): its phases, its module
/// runs, and its beforeAll/afterAll hook runs.
pub(crate) fn is_converge_step(t: &TaskSpec) -> bool {
    match &t.kind {
        AddonTask::ConvergeModules { .. } => true,
        AddonTask::ModuleRun { run, .. } => run.reload_all,
        AddonTask::GlobalHookRun { run, .. } => {
            matches!(run.binding(), Some("beforeAll" | "afterAll"))
        }
        _ => false,
    }
}

fn sync_flags(task: &QueuedTask) -> Option<(bool, bool)> {
    let run = task.spec.kind.hook_run()?;
    let sync = run
        .binding_contexts
        .iter()
        .any(|c| matches!(c, ContextStub::Synchronization { .. }));
    sync.then(|| {
        (
            run.wait_for_synchronization.unwrap_or(true),
            run.execute_hook_on_synchronization.unwrap_or(true),
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
    if head.spec.kind.hook_run().is_none() || !mergeable_binding(head) {
        return Vec::new();
    }
    let head_flags = sync_flags(head);
    queue[1..]
        .iter()
        .take_while(|t| {
            t.spec.kind.task_type() == head.spec.kind.task_type()
                && t.spec.kind.module() == head.spec.kind.module()
                && t.spec.kind.hook() == head.spec.kind.hook()
                && mergeable_binding(t)
                && (head_flags.is_none() || sync_flags(t).is_none() || sync_flags(t) == head_flags)
        })
        .map(|t| t.spec.id)
        .collect()
}

fn mergeable_binding(task: &QueuedTask) -> bool {
    task.spec.kind.contexts().iter().all(|c| {
        !matches!(
            c.binding(),
            "onStartup" | "beforeAll" | "afterAll" | "beforeHelm" | "afterHelm"
        )
    })
}

/// Drops every context followed by one of the same non-empty group (the last of each
/// run of equal groups is kept; ungrouped contexts are kept in order).
pub(crate) fn compact_groups(contexts: Vec<ContextStub>) -> Vec<ContextStub> {
    let mut out: Vec<ContextStub> = Vec::with_capacity(contexts.len());
    for c in contexts {
        if let (Some(g), Some(last)) = (c.group(), out.last())
            && last.group() == Some(g)
        {
            out.pop();
        }
        out.push(c);
    }
    out
}

/// When one hook has at least [`COMPACTION_THRESHOLD`] queued compactable tasks (not the
/// head, which may be running), all of them merge into the first: `(into, merged)`.
pub(crate) fn plan_compaction(queue: &[QueuedTask]) -> Option<(TaskId, Vec<TaskId>)> {
    let mut counts: std::collections::BTreeMap<&str, Vec<TaskId>> = Default::default();
    for t in queue.iter().skip(1) {
        if let AddonTask::ModuleHookRun { hook, .. } = &t.spec.kind {
            counts.entry(hook).or_default().push(t.spec.id);
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
    let mut s = format!(
        "{}:{}",
        task.spec.kind.task_type().as_str(),
        task.spec.queue
    );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::HookRunParams;

    /// A kubernetes binding's context, told apart by its index and grouped by `group`.
    fn sync(n: usize, group: &str) -> ContextStub {
        ContextStub::Synchronization {
            binding: "pods".into(),
            index: n,
            group: Some(group.to_string()).filter(|g| !g.is_empty()),
        }
    }

    fn event(n: usize) -> ContextStub {
        ContextStub::event("pods", n, crate::hook_config::WatchEvent::Added)
    }

    fn task(id: u64, hook: &str, contexts: Vec<ContextStub>) -> QueuedTask {
        QueuedTask {
            spec: TaskSpec {
                id: TaskId(id),
                queue: "main".into(),
                description: format!("kubernetes:{hook}"),
                kind: AddonTask::ModuleHookRun {
                    module: "m".into(),
                    hook: hook.into(),
                    run: HookRunParams::with(contexts, false),
                },
            },
            attempts: 0,
            failures: 0,
            last_error: String::new(),
            next_retry_at_ms: None,
        }
    }

    #[test]
    fn only_adjacent_tasks_of_the_same_hook_merge() {
        let ev = |n: usize| vec![event(n)];
        let q = vec![
            task(1, "a", ev(1)),
            task(2, "a", ev(2)),
            task(3, "a", ev(3)),
            task(4, "b", ev(4)),
            task(5, "a", ev(5)),
        ];
        assert_eq!(adjacent_mergeable(&q), [TaskId(2), TaskId(3)]);
        let startup = vec![
            task(1, "a", vec![ContextStub::named("onStartup")]),
            task(2, "a", ev(2)),
        ];
        assert!(adjacent_mergeable(&startup).is_empty());
    }

    #[test]
    fn group_compaction_keeps_the_last_of_each_run() {
        let c = |g: &str, n: usize| sync(n, g);
        let out = compact_groups(vec![
            c("g", 1),
            c("g", 2),
            c("", 3),
            c("g", 4),
            c("h", 5),
            c("h", 6),
        ]);
        let ns: Vec<usize> = out
            .iter()
            .filter_map(ContextStub::kubernetes_index)
            .collect();
        assert_eq!(ns, [2, 3, 4, 6]);
    }

    #[test]
    fn hundred_queued_tasks_of_one_hook_compact() {
        let mut q: Vec<QueuedTask> = (0..101)
            .map(|i| task(i, "a", vec![event(i as usize)]))
            .collect();
        let (into, merged) = plan_compaction(&q).unwrap_or((TaskId(0), Vec::new()));
        assert_eq!((into, merged.len()), (TaskId(1), 99));
        q.truncate(50);
        assert!(plan_compaction(&q).is_none());
    }

    #[test]
    fn descriptions_match_the_queue_dump() {
        let mut t = task(1, "hooks/a.sh", Vec::new());
        assert_eq!(describe(&t), "ModuleHookRun:main:kubernetes:hooks/a.sh");
        t.failures = 2;
        t.last_error = "exit status 1".into();
        assert_eq!(
            describe(&t),
            "ModuleHookRun:main:kubernetes:hooks/a.sh:failures 2:exit status 1"
        );
    }
}
