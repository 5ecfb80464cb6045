//! Kubernetes and schedule bindings on the actor side: the contexts queued for them and how
//! those are turned into the binding context array a hook receives.
//!
//! ```text
//!   watch event / timer / startup ──► ContextStub in a task (binding, type, index…)
//!   task starts ──► render(stubs, hook config, current snapshots) ──► BINDING_CONTEXT_PATH
//! ```
//!
//! Snapshots are taken when the hook starts, not when the event happened, as in the
//! reference; a Synchronization stub gets its `objects` the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use bosun_runtime::TaskIds;

use serde_json::{Map, Value, json};

use crate::context_stub::{ContextStub, SharedJson};
use crate::events::{TaskId, TaskSpec};
use crate::hook_config::{HookConfig, WatchEvent};
use crate::task::{AddonTask, HookRunParams};

/// Who owns a hook: `global` or `module/<name>`.
pub fn owner_of(module: Option<&str>) -> String {
    match module {
        Some(m) => format!("module/{m}"),
        None => "global".to_string(),
    }
}

/// A hook of an owner, as the bindings port knows it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HookRef {
    /// `global` or `module/<name>`.
    pub owner: std::sync::Arc<str>,
    /// Hook name.
    pub hook: std::sync::Arc<str>,
}

/// An event of one kubernetes binding, ready to be queued.
#[derive(Clone, Debug)]
pub struct BindingEvent {
    /// The hook.
    pub hook: HookRef,
    /// Index of the binding in the hook's `kubernetes` list.
    pub index: usize,
    /// What happened to the object.
    pub watch_event: WatchEvent,
    /// The object, when the binding keeps full objects (the watch's text, shared by every
    /// binding that delivers it).
    pub object: Option<SharedJson>,
    /// The jq filter's result, when the binding has a filter (`null` when it gave none).
    pub filter_result: Option<SharedJson>,
}

/// Where a kubernetes binding's events go once released: the engine queues a hook task.
pub type BindingEvents = Arc<dyn Fn(BindingEvent) + Send + Sync>;

/// The stub of a Synchronization context for binding `index` of a hook.
pub(crate) fn sync_stub(config: &HookConfig, index: usize) -> ContextStub {
    let b = &config.kubernetes[index];
    ContextStub::Synchronization {
        binding: b.name.clone(),
        index,
        group: b.group.clone(),
    }
}

/// The stub of an Event context from the event a binding delivered (see
/// [`BindingEvent`]).
pub(crate) fn event_stub(config: &HookConfig, event: BindingEvent) -> ContextStub {
    let b = config.kubernetes.get(event.index);
    ContextStub::Event {
        binding: b.map(|b| b.name.clone()).unwrap_or_default(),
        index: event.index,
        group: b.and_then(|b| b.group.clone()),
        watch_event: event.watch_event,
        object: event.object,
        filter_result: event.filter_result,
    }
}

/// The stub of a Schedule context for schedule binding `index`.
#[cfg(test)]
pub(crate) fn schedule_stub(config: &HookConfig, index: usize) -> ContextStub {
    let b = &config.schedule[index];
    ContextStub::Schedule {
        binding: b.name.clone(),
        index: Some(index),
        group: b.group.clone(),
    }
}

/// A hook-run task for one firing of a schedule binding.
pub(crate) fn schedule_task(id: TaskId, entry: &crate::scheduler::ScheduleEntry) -> TaskSpec {
    let module = entry.owner.strip_prefix("module/");
    let b = &entry.binding;
    let stub = ContextStub::Schedule {
        binding: b.name.clone(),
        index: None,
        group: b.group.clone(),
    };
    hook_run_task(
        id,
        module,
        &entry.hook,
        &b.queue,
        &b.name,
        vec![stub],
        b.allow_failure,
    )
}

/// Schedule entries of a hook's `schedule` bindings.
pub(crate) fn schedule_entries(
    owner: &str,
    hook: &str,
    config: &HookConfig,
) -> Vec<crate::scheduler::ScheduleEntry> {
    config
        .schedule
        .iter()
        .map(|b| crate::scheduler::ScheduleEntry {
            owner: owner.to_string(),
            hook: hook.to_string(),
            binding: b.clone(),
        })
        .collect()
}

/// A hook-run task for binding contexts (`GlobalHookRun` or `ModuleHookRun`).
pub(crate) fn hook_run_task(
    id: TaskId,
    module: Option<&str>,
    hook: &str,
    queue: &str,
    binding: &str,
    contexts: Vec<ContextStub>,
    allow_failure: bool,
) -> TaskSpec {
    let run = HookRunParams::with(contexts, allow_failure);
    let hook = hook.to_string();
    TaskSpec {
        id,
        queue: queue.to_string(),
        description: format!("{binding}:{hook}"),
        kind: match module {
            Some(m) => AddonTask::ModuleHookRun {
                module: m.to_string(),
                hook,
                run,
            },
            None => AddonTask::GlobalHookRun { hook, run },
        },
    }
}

/// A Synchronization task for binding `index`, with the flags the merge rule compares.
pub(crate) fn sync_task(
    id: TaskId,
    module: Option<&str>,
    hook: &str,
    config: &HookConfig,
    index: usize,
) -> TaskSpec {
    let b = &config.kubernetes[index];
    let mut t = hook_run_task(
        id,
        module,
        hook,
        &b.queue,
        &b.name,
        vec![sync_stub(config, index)],
        b.allow_failure,
    );
    if let AddonTask::GlobalHookRun { run, .. } | AddonTask::ModuleHookRun { run, .. } = &mut t.kind
    {
        run.wait_for_synchronization = Some(b.wait_for_synchronization);
        run.execute_hook_on_synchronization = Some(b.execute_hook_on_synchronization);
    }
    t
}

/// Binding indexes of the Synchronization contexts in a task's contexts.
pub(crate) fn synchronized(contexts: &[ContextStub]) -> Vec<usize> {
    contexts
        .iter()
        .filter_map(|c| match c {
            ContextStub::Synchronization { index, .. } => Some(*index),
            _ => None,
        })
        .collect()
}

/// Snapshots of the bindings with these indexes, read when the hook starts.
pub trait SnapshotSource {
    /// `[{object?, filterResult?}]` of one binding, sorted by namespace then name.
    fn snapshot(&self, index: usize) -> Vec<Value>;
}

impl<F: Fn(usize) -> Vec<Value>> SnapshotSource for F {
    fn snapshot(&self, index: usize) -> Vec<Value> {
        self(index)
    }
}

/// Indexes of the kubernetes bindings named in `names`, in order, without repeats.
fn indexes_named(config: &HookConfig, names: &[String]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for n in names {
        for (i, b) in config.kubernetes.iter().enumerate() {
            if &b.name == n && !out.contains(&i) {
                out.push(i);
            }
        }
    }
    out
}

fn snapshots_of(
    config: &HookConfig,
    indexes: &[usize],
    source: &dyn SnapshotSource,
    cache: &mut BTreeMap<usize, Vec<Value>>,
) -> Value {
    let mut map = Map::new();
    for &i in indexes {
        let objects = cache.entry(i).or_insert_with(|| source.snapshot(i)).clone();
        map.insert(config.kubernetes[i].name.clone(), Value::Array(objects));
    }
    Value::Object(map)
}

/// The binding context array for a hook run, rendered against the hook's current
/// snapshots, and the first context's binding name (for logs).
pub(crate) fn contexts_for_run(
    config: &HookConfig,
    stubs: Vec<ContextStub>,
    snapshots: &dyn SnapshotSource,
) -> (Value, String) {
    let contexts = render(config, stubs, snapshots);
    let binding = contexts
        .first()
        .and_then(|c| c["binding"].as_str())
        .unwrap_or_default()
        .to_string();
    (Value::Array(contexts), binding)
}

/// Turns queued context stubs into the array the hook receives: Group contexts for grouped
/// bindings, `objects` for Synchronization, `snapshots` where the binding asks for them,
/// every kubernetes binding's snapshot for `before*`/`after*` bindings.
pub fn render(
    config: &HookConfig,
    stubs: Vec<ContextStub>,
    source: &dyn SnapshotSource,
) -> Vec<Value> {
    let mut cache: BTreeMap<usize, Vec<Value>> = BTreeMap::new();
    let all: Vec<usize> = (0..config.kubernetes.len()).collect();
    stubs
        .into_iter()
        .map(|stub| render_one(config, stub, source, &all, &mut cache))
        .collect()
}

fn render_one(
    config: &HookConfig,
    stub: ContextStub,
    source: &dyn SnapshotSource,
    all: &[usize],
    cache: &mut BTreeMap<usize, Vec<Value>>,
) -> Value {
    let binding = stub.binding().to_string();
    let kube = stub.kubernetes_index();
    let schedule = match &stub {
        ContextStub::Schedule { index, .. } => {
            index.or_else(|| config.schedule.iter().position(|b| b.name == binding))
        }
        _ => None,
    };
    let (group, include) = match (kube, schedule) {
        (Some(i), _) if i < config.kubernetes.len() => {
            let b = &config.kubernetes[i];
            (b.group.clone(), b.include_snapshots_from.clone())
        }
        (_, Some(i)) if i < config.schedule.len() => {
            let b = &config.schedule[i];
            (b.group.clone(), b.include_snapshots_from.clone())
        }
        _ => {
            // A binding the hook no longer has: the stub as it was queued. before*/after*
            // see every kubernetes binding's snapshot; onStartup none.
            let named = matches!(stub, ContextStub::Named { .. });
            let mut c = serde_json::to_value(stub).unwrap_or_default();
            if named && binding != "onStartup" {
                c["snapshots"] = snapshots_of(config, all, source, cache);
            }
            return c;
        }
    };
    if let Some(g) = group {
        // Group: the snapshots of every kubernetes binding of the group, after
        // includeSnapshotsFrom, in order and without repeats.
        let mut idx = indexes_named(config, &include);
        for (i, b) in config.kubernetes.iter().enumerate() {
            if b.group.as_deref() == Some(g.as_str()) && !idx.contains(&i) {
                idx.push(i);
            }
        }
        return json!({
            "binding": binding,
            "type": "Group",
            "groupName": g,
            "snapshots": snapshots_of(config, &idx, source, cache),
        });
    }
    let mut c = Map::new();
    c.insert("binding".into(), Value::String(binding));
    if let Some(t) = stub.type_name() {
        c.insert("type".into(), Value::String(t.into()));
    }
    match stub {
        ContextStub::Synchronization { index, .. } => {
            let objects = cache
                .entry(index)
                .or_insert_with(|| source.snapshot(index))
                .clone();
            c.insert("objects".into(), Value::Array(objects));
        }
        ContextStub::Event {
            watch_event,
            object,
            filter_result,
            ..
        } => {
            c.insert("watchEvent".into(), watch_event.as_str().into());
            if let Some(o) = object {
                c.insert("object".into(), o.to_value());
            }
            if let Some(f) = filter_result {
                c.insert("filterResult".into(), f.to_value());
            }
        }
        ContextStub::Schedule { .. } | ContextStub::Named { .. } => {}
    }
    if !include.is_empty() {
        let snapshots = snapshots_of(config, &indexes_named(config, &include), source, cache);
        c.insert("snapshots".into(), snapshots);
    }
    Value::Object(c)
}

/// Queues a hook task for every released event of a hook's kubernetes binding.
pub(crate) fn binding_events(
    module: Option<&str>,
    hook: &str,
    config: Arc<HookConfig>,
    router: Arc<dyn bosun_runtime::queue_actor::Router<crate::task::AddonTask>>,
    ids: TaskIds,
) -> BindingEvents {
    let module = module.map(String::from);
    let hook = hook.to_string();
    Arc::new(move |ev: BindingEvent| {
        let Some(b) = config.kubernetes.get(ev.index) else {
            return;
        };
        let stub = event_stub(&config, ev);
        let task = hook_run_task(
            ids.next(),
            module.as_deref(),
            &hook,
            &b.queue,
            &b.name,
            vec![stub],
            b.allow_failure,
        );
        router.enqueue(&b.queue, vec![task]);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event as a binding delivers it.
    fn delivered(
        index: usize,
        watch_event: WatchEvent,
        object: Option<Value>,
        filter_result: Option<Value>,
    ) -> BindingEvent {
        BindingEvent {
            hook: HookRef {
                owner: "global".into(),
                hook: "h".into(),
            },
            index,
            watch_event,
            object: object.as_ref().map(SharedJson::new),
            filter_result: filter_result.as_ref().map(SharedJson::new),
        }
    }
    use crate::hook_config::{HookKind, parse};

    fn config(text: &str) -> HookConfig {
        parse(text, HookKind::Global, "h").expect("valid config")
    }

    fn source(index: usize) -> Vec<Value> {
        vec![json!({"object": {"n": index}, "filterResult": index})]
    }

    #[test]
    fn synchronization_gets_objects_and_included_snapshots() {
        let c = config(
            "configVersion: v1\nkubernetes:\n- {name: pods, kind: Pod, includeSnapshotsFrom: [cms]}\n- {name: cms, kind: ConfigMap}",
        );
        let out = render(&c, vec![sync_stub(&c, 0)], &source);
        assert_eq!(
            out,
            [json!({
                "binding": "pods",
                "type": "Synchronization",
                "objects": [{"object": {"n": 0}, "filterResult": 0}],
                "snapshots": {"cms": [{"object": {"n": 1}, "filterResult": 1}]},
            })]
        );
    }

    #[test]
    fn grouped_bindings_become_group_contexts_with_the_group_snapshots() {
        let c = config(
            "configVersion: v1\nkubernetes:\n- {name: a, kind: Pod, group: g}\n- {name: b, kind: Node, group: g}\n- {name: c, kind: Secret, includeSnapshotsFrom: [a]}\nschedule:\n- {name: s, crontab: '@daily', group: g, includeSnapshotsFrom: [c]}",
        );
        let event = event_stub(&c, delivered(1, WatchEvent::Added, Some(json!({})), None));
        let out = render(&c, vec![event, schedule_stub(&c, 0)], &source);
        assert_eq!(
            out[0],
            json!({"binding": "b", "type": "Group", "groupName": "g",
                   "snapshots": {"a": source(0), "b": source(1)}})
        );
        assert_eq!(
            out[1],
            json!({"binding": "s", "type": "Group", "groupName": "g",
                   "snapshots": {"c": source(2), "a": source(0), "b": source(1)}})
        );
    }

    #[test]
    fn before_and_after_bindings_see_every_snapshot() {
        let c = config(
            "configVersion: v1\nbeforeAll: 1\nkubernetes:\n- {name: a, kind: Pod}\n- {name: b, kind: Node, keepFullObjectsInMemory: false}",
        );
        let out = render(
            &c,
            vec![
                ContextStub::named("beforeAll"),
                ContextStub::named("onStartup"),
            ],
            &source,
        );
        assert_eq!(
            out,
            [
                json!({"binding": "beforeAll", "snapshots": {"a": source(0), "b": source(1)}}),
                json!({"binding": "onStartup"}),
            ]
        );
    }

    #[test]
    fn events_keep_their_object_and_lose_internal_keys() {
        let c = config("configVersion: v1\nkubernetes:\n- {name: a, kind: Pod}");
        let ctx =
            json!({"binding": "a", "type": "Event", "watchEvent": "Deleted", "object": {"x": 1}});
        let event = delivered(0, WatchEvent::Deleted, Some(json!({"x": 1})), None);
        let out = render(&c, vec![event_stub(&c, event)], &source);
        assert_eq!(out, [ctx]);
        assert_eq!(synchronized(&[sync_stub(&c, 0)]), [0]);
    }

    /// The stubs as they were built before they were typed: JSON objects, written sorted.
    #[test]
    fn stubs_are_journaled_as_the_json_objects_they_replace() {
        let c = config(
            "configVersion: v1\nkubernetes:\n- {name: a, kind: Pod}\n- {name: b, kind: Node, group: g, jqFilter: .x}\nschedule:\n- {name: s, crontab: '@daily', group: g}\n- {name: t, crontab: '@daily'}",
        );
        let text = |stub: &ContextStub| serde_json::to_string(stub).unwrap_or_default();
        let old = |v: Value| v.to_string();
        assert_eq!(
            text(&sync_stub(&c, 0)),
            old(json!({"binding": "a", "type": "Synchronization", "_index": 0}))
        );
        assert_eq!(
            text(&sync_stub(&c, 1)),
            old(json!({"binding": "b", "type": "Synchronization", "_index": 1, "groupName": "g"}))
        );
        let event = delivered(
            1,
            WatchEvent::Modified,
            Some(json!({"metadata": {"name": "n"}})),
            Some(Value::Null),
        );
        let old_event = json!({"binding": "b", "type": "Event", "watchEvent": "Modified",
                               "object": {"metadata": {"name": "n"}}, "filterResult": null,
                               "_index": 1, "groupName": "g"});
        assert_eq!(text(&event_stub(&c, event)), old(old_event));
        assert_eq!(
            text(&schedule_stub(&c, 0)),
            old(json!({"binding": "s", "type": "Schedule", "_schedule": 0, "groupName": "g"}))
        );
        let entries = schedule_entries("module/m", "h", &c);
        let fired = |e| schedule_task(TaskId(1), e).kind.contexts().to_vec();
        assert_eq!(
            text(&fired(&entries[0])[0]),
            old(json!({"binding": "s", "type": "Schedule", "groupName": "g"}))
        );
        assert_eq!(
            text(&fired(&entries[1])[0]),
            old(json!({"binding": "t", "type": "Schedule"}))
        );
    }

    #[test]
    fn a_context_of_a_binding_the_hook_no_longer_has_is_passed_as_queued() {
        let c = config("configVersion: v1\nkubernetes:\n- {name: a, kind: Pod}");
        let gone = ContextStub::Synchronization {
            binding: "z".into(),
            index: 3,
            group: Some("g".into()),
        };
        assert_eq!(
            render(&c, vec![gone], &source),
            [json!({"binding": "z", "type": "Synchronization", "_index": 3, "groupName": "g"})]
        );
    }
}
