//! A realistic stream of the modules' journal events, for the journal and startup
//! benchmarks.

use bosun_addon::context_stub::ContextStub;
use bosun_addon::hook_config::WatchEvent;
use bosun_addon::task::{AddonTask, HookRunParams};
use bosun_addon::{Event, Position, Scope, TaskEvent, TaskId, TaskSpec, ValuesLayer};
use serde_json::json;

/// A realistic mix: a task's lifecycle (queued, started, succeeded) and, every tenth
/// task, a values patch from its hook.
pub fn event(i: u64) -> Event {
    let id = TaskId(i / 4 + 1);
    match i % 4 {
        0 => Event::Task(TaskEvent::TaskEnqueued {
            task: TaskSpec {
                id,
                queue: "main".into(),
                description: "kubernetes:hooks/certs.py:secrets".into(),
                kind: AddonTask::ModuleHookRun {
                    module: "ingress-nginx".into(),
                    hook: "hooks/certs.py".into(),
                    run: HookRunParams::with(
                        vec![ContextStub::event("secrets", 0, WatchEvent::Modified)],
                        false,
                    ),
                },
            },
            position: Position::Tail,
        }),
        1 => Event::Task(TaskEvent::TaskStarted { id, attempt: 1 }),
        2 if i % 40 == 2 => Event::ValuesPatched {
            scope: Scope::Module("ingress-nginx".into()),
            layer: ValuesLayer::Memory,
            patch: serde_json::from_value(json!([{"op": "add", "path": format!("/ingressNginx/internal/cert{}", i % 7), "value": i}])).unwrap_or(json_patch::Patch(Vec::new())),
            source: "hooks/certs.py".into(),
        },
        2 => Event::Task(TaskEvent::TaskStarted { id, attempt: 1 }),
        _ => Event::Task(TaskEvent::TaskSucceeded { id }),
    }
}
