//! addon-operator's startup sequence, planned: the global hooks' onStartup runs, their
//! schedules and kubernetes bindings enabled, the wait for their Synchronization, and the
//! first converge, merged with whatever the journal says was still pending (a restart
//! reuses the steps it had queued, in order). Pure: tested without actors.

use bosun_runtime::{Queues, TaskIds};

use crate::context_stub::ContextStub;
use crate::events::{Position, TaskEvent, TaskId, TaskSpec};
use crate::global_hooks::GlobalHook;
use crate::state::QueuedTask;
use crate::task::{AddonTask, ConvergePhase, HookRunParams, converge_task};

pub(super) fn hook_task(
    id: TaskId,
    hook: &GlobalHook,
    binding: &str,
    contexts: Vec<ContextStub>,
    allow_failure: bool,
) -> TaskSpec {
    TaskSpec {
        id,
        queue: "main".into(),
        description: format!("{binding}:{}", hook.name),
        kind: AddonTask::GlobalHookRun {
            hook: hook.name.clone(),
            run: HookRunParams::with(contexts, allow_failure),
        },
    }
}

pub(super) fn main_task(id: TaskId, kind: AddonTask, description: &str) -> TaskSpec {
    TaskSpec {
        id,
        queue: "main".into(),
        description: description.to_string(),
        kind,
    }
}

/// Hooks with an ORDER for a binding, sorted by order then name.
pub(super) fn ordered(
    hooks: &[GlobalHook],
    order: impl Fn(&GlobalHook) -> Option<i64>,
) -> Vec<&GlobalHook> {
    let mut with: Vec<(i64, &GlobalHook)> = hooks
        .iter()
        .filter_map(|h| order(h).map(|o| (o, h)))
        .collect();
    with.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    with.into_iter().map(|(_, h)| h).collect()
}

/// The context of a global before*/after* run: the binding with every kubernetes
/// binding's snapshot, empty until the hook starts (rendering reads them then).
pub(super) fn around_context(hook: &GlobalHook, binding: &str) -> ContextStub {
    ContextStub::Named {
        binding: binding.to_string(),
        snapshots: Some(
            hook.config
                .kubernetes
                .iter()
                .map(|b| (b.name.clone(), Vec::new()))
                .collect(),
        ),
    }
}

/// The reference's startup sequence for the main queue.
pub(super) fn startup_tasks(hooks: &[GlobalHook], ids: &TaskIds) -> Vec<TaskSpec> {
    let mut tasks = Vec::new();
    for h in ordered(hooks, |h| h.config.on_startup) {
        tasks.push(hook_task(
            ids.next(),
            h,
            "onStartup",
            vec![ContextStub::named("onStartup")],
            false,
        ));
    }
    let mut by_name: Vec<&GlobalHook> = hooks.iter().collect();
    by_name.sort_by(|a, b| a.name.cmp(&b.name));
    for h in by_name.iter().filter(|h| !h.config.schedule.is_empty()) {
        tasks.push(main_task(
            ids.next(),
            AddonTask::GlobalHookEnableScheduleBindings {
                hook: h.name.clone(),
            },
            &h.name,
        ));
    }
    for h in by_name.iter().filter(|h| !h.config.kubernetes.is_empty()) {
        tasks.push(main_task(
            ids.next(),
            AddonTask::GlobalHookEnableKubernetesBindings {
                hook: h.name.clone(),
            },
            &h.name,
        ));
    }
    tasks.push(main_task(
        ids.next(),
        AddonTask::GlobalHookWaitKubernetesSynchronization,
        "",
    ));
    tasks.push(converge_task(ids.next(), "OperatorStartup"));
    tasks
}

/// Whether a pending task from before a restart is the same step as a startup task.
pub(super) fn same_step(a: &TaskSpec, b: &TaskSpec) -> bool {
    fn binding(t: &TaskSpec) -> Option<&str> {
        t.kind.hook_run().and_then(|r| r.binding())
    }
    a.kind.task_type() == b.kind.task_type()
        && a.kind.hook() == b.kind.hook()
        && a.queue == b.queue
        && binding(a) == binding(b)
        && a.kind.converge_phase() == b.kind.converge_phase()
}

/// Steps of a converge that was running when bosun stopped: the startup converge redoes
/// them (module deletions stay: the modules are already recorded as disabled).
pub(super) fn interrupted_converge_step(t: &TaskSpec) -> bool {
    crate::queue::is_converge_step(t) && t.kind.converge_phase() != Some(ConvergePhase::StandBy)
}

/// A hook task made only of kubernetes Event and Synchronization contexts: after a
/// restart the bindings synchronize again and deliver the current state, so running it
/// would show the hook a state older than the one it has just seen.
pub(super) fn superseded_by_resync(t: &TaskSpec) -> bool {
    t.kind.hook_run().is_some_and(|r| {
        let cs = &r.binding_contexts;
        !cs.is_empty() && cs.iter().all(|c| c.kubernetes_index().is_some())
    })
}

/// Enqueue events that put the startup sequence in the main queue, reusing pending tasks
/// that are the same step (they keep their attempt counts) and keeping the sequence order.
/// Kubernetes event runs left from before the restart are dropped: the bindings'
/// Synchronization replaces them.
pub(super) fn plan_startup(restored: &Queues<AddonTask>, wanted: Vec<TaskSpec>) -> Vec<TaskEvent> {
    let mut events = Vec::new();
    for task in restored.tasks() {
        if superseded_by_resync(&task.spec) {
            events.push(TaskEvent::TaskDropped {
                id: task.spec.id,
                reason: "superseded by the Synchronization after the restart".into(),
            });
        }
    }
    let mut pending: Vec<&QueuedTask> = Vec::new();
    for task in restored.queue("main") {
        if superseded_by_resync(&task.spec) {
            continue;
        }
        if interrupted_converge_step(&task.spec) {
            events.push(TaskEvent::TaskDropped {
                id: task.spec.id,
                reason: "superseded by the startup converge".into(),
            });
        } else {
            pending.push(task);
        }
    }
    let mut anchor: Option<TaskId> = None;
    let mut used: Vec<TaskId> = Vec::new();
    for task in wanted {
        if let Some(existing) = pending
            .iter()
            .find(|p| !used.contains(&p.spec.id) && same_step(&p.spec, &task))
        {
            used.push(existing.spec.id);
            anchor = Some(existing.spec.id);
            continue;
        }
        let id = task.id;
        let position = match anchor {
            Some(a) => Position::After(a),
            None => match pending.iter().find(|p| !used.contains(&p.spec.id)) {
                Some(first) => Position::Before(first.spec.id),
                None => Position::Tail,
            },
        };
        events.push(TaskEvent::TaskEnqueued { task, position });
        anchor = Some(id);
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook_config::{HookKind, WatchEvent, parse};

    fn hook(name: &str, config: &str) -> GlobalHook {
        GlobalHook {
            name: name.into(),
            path: name.into(),
            config: parse(config, HookKind::Global, name).unwrap_or_default(),
        }
    }

    #[test]
    fn startup_sequence_follows_the_reference_order() {
        let hooks = vec![
            hook("b.sh", "configVersion: v1\nonStartup: 1"),
            hook(
                "a.sh",
                "configVersion: v1\nonStartup: 2\nschedule: [{crontab: '@daily'}]",
            ),
            hook(
                "c.sh",
                "configVersion: v1\nonStartup: 1\nkubernetes: [{kind: Pod}]",
            ),
        ];
        let tasks = startup_tasks(&hooks, &TaskIds::after(0));
        let lines: Vec<String> = tasks
            .iter()
            .map(|t| format!("{}:{}", t.kind.task_type().as_str(), t.description))
            .collect();
        assert_eq!(
            lines,
            [
                "GlobalHookRun:onStartup:b.sh",
                "GlobalHookRun:onStartup:c.sh",
                "GlobalHookRun:onStartup:a.sh",
                "GlobalHookEnableScheduleBindings:a.sh",
                "GlobalHookEnableKubernetesBindings:c.sh",
                "GlobalHookWaitKubernetesSynchronization:",
                "ConvergeModules:OperatorStartup",
            ]
        );
    }

    #[test]
    fn kubernetes_event_runs_from_before_a_restart_are_dropped() {
        let hooks = vec![hook("a.sh", "configVersion: v1\nonStartup: 1")];
        let mut restored = Queues::<AddonTask>::default();
        let event = crate::bindings::hook_run_task(
            TaskId(50),
            None,
            "w.sh",
            "other",
            "pods",
            vec![ContextStub::event("pods", 0, WatchEvent::Added)],
            false,
        );
        let schedule = crate::bindings::hook_run_task(
            TaskId(51),
            None,
            "w.sh",
            "other",
            "tick",
            vec![ContextStub::Schedule {
                binding: "tick".into(),
                index: None,
                group: None,
            }],
            false,
        );
        for task in [event, schedule] {
            restored.apply(&TaskEvent::TaskEnqueued {
                task,
                position: Position::Tail,
            });
        }
        for e in plan_startup(&restored, startup_tasks(&hooks, &TaskIds::after(51))) {
            restored.apply(&e);
        }
        let other: Vec<TaskId> = restored.queues["other"].iter().map(|t| t.spec.id).collect();
        assert_eq!(
            other,
            [TaskId(51)],
            "the Event run is dropped, the Schedule run kept"
        );
    }

    #[test]
    fn restart_reuses_pending_steps_in_order() {
        let hooks = vec![
            hook("a.sh", "configVersion: v1\nonStartup: 1"),
            hook("b.sh", "configVersion: v1\nonStartup: 2"),
        ];
        let first = startup_tasks(&hooks, &TaskIds::after(0));
        let mut restored = Queues::<AddonTask>::default();
        for e in plan_startup(&restored, first.clone()) {
            restored.apply(&e);
        }
        // a.sh finished; b.sh failed twice before the crash.
        restored.apply(&TaskEvent::TaskSucceeded { id: first[0].id });
        restored.apply(&TaskEvent::TaskFailed {
            id: first[1].id,
            error: "boom".into(),
            failures: 2,
            next_retry_at_ms: 0,
        });
        let again = startup_tasks(&hooks, &TaskIds::after(restored.last_task_id));
        for e in plan_startup(&restored, again) {
            restored.apply(&e);
        }
        let main = &restored.queues["main"];
        let lines: Vec<String> = main
            .iter()
            .map(|t| format!("{}:{}", t.spec.description, t.failures))
            .collect();
        assert_eq!(
            lines,
            [
                "onStartup:a.sh:0",
                "onStartup:b.sh:2",
                ":0",
                "OperatorStartup:0"
            ]
        );
        assert_eq!(
            main[1].spec.id, first[1].id,
            "the failed task resumes, not a copy"
        );
    }
}
