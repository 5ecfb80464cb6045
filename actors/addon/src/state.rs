//! The state rebuilt from the journal: values per scope, modules, queues, converge.
//!
//! [`State::apply`] is a pure, deterministic fold: the running actors and `bosun journal
//! state` use the same function, so what the journal explains is what bosun did. Task
//! events go to the runtime's [`Queues`] fold; the addon's own events are folded here.
//!
//! ```text
//!   Event::Task(e) ──► Queues<AddonTask>::apply   (queues, parked, last task id)
//!   Event::Values… ──► values per scope           Event::Module…/Release… ──► modules
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use bosun_runtime::Queues;

use crate::events::{Event, Scope, TaskId, ValuesLayer};
use crate::task::{AddonTask, ModulePhase};

/// Values of one scope.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScopeValues {
    /// Config values (from the ConfigMap and config patches).
    pub config: Value,
    /// Memory patches (from hooks' values patches), compacted, with paths relative to the
    /// hook's values document; replayed on top of the other layers.
    pub memory: Vec<json_patch::PatchOperation>,
}

/// A module as the journal knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModuleRecord {
    /// Whether it is enabled.
    pub enabled: bool,
    /// What decided the enabled state.
    pub reason: String,
    /// Its run phase.
    #[serde(default)]
    pub phase: ModulePhase,
    /// The task that reached `phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_task: Option<TaskId>,
    /// The last applied release revision (0 = none).
    pub revision: u32,
    /// Checksum of the last applied release.
    pub checksum: String,
}

/// A task waiting or running in a queue.
pub type QueuedTask = bosun_runtime::QueuedTask<AddonTask>;

/// Converge bookkeeping.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConvergeState {
    /// A converge is in progress.
    pub in_progress: bool,
    /// Converges completed.
    pub completed: u64,
    /// Why the current or last converge started.
    pub reason: String,
}

/// Everything the journal rebuilds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// Values per scope (`global` and module names).
    pub values: BTreeMap<String, ScopeValues>,
    /// Modules by name.
    pub modules: BTreeMap<String, ModuleRecord>,
    /// Queue contents and parked tasks (`queues`, `parked`, `lastTaskId` in snapshots).
    #[serde(flatten)]
    pub tasks: Queues<AddonTask>,
    /// The ConfigMap's `<module>Enabled` flags, by module name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub module_flags: BTreeMap<String, bool>,
    /// Converge bookkeeping.
    pub converge: ConvergeState,
    /// Events folded so far.
    pub events: u64,
    /// Patches that could not be applied during the fold (a journal written by a build
    /// that validated differently); kept as readable messages, never fatal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anomalies: Vec<String>,
}

impl State {
    /// Folds one event into the state.
    pub fn apply(&mut self, event: &Event) {
        self.events += 1;
        match event {
            Event::ValuesPatched {
                scope,
                layer: ValuesLayer::Memory,
                patch,
                ..
            } => {
                let v = self.values.entry(scope.to_string()).or_default();
                crate::values::compact_into(&mut v.memory, &patch.0);
            }
            Event::ValuesPatched {
                scope,
                layer: ValuesLayer::Config,
                patch,
                source,
            } => {
                let key = scope.values_key();
                let v = self.values.entry(scope.to_string()).or_default();
                let current = if v.config.is_null() {
                    Value::Object(Default::default())
                } else {
                    v.config.clone()
                };
                let mut doc = serde_json::json!({ key.clone(): current });
                match crate::values::apply_memory(&mut doc, &patch.0) {
                    Ok(()) => v.config = doc.get(&key).cloned().unwrap_or(Value::Null),
                    Err((i, e)) => {
                        let msg = format!(
                            "event {}: config patch from {source} to {scope}, operation {i}: {e}",
                            self.events
                        );
                        self.anomalies.push(msg);
                    }
                }
            }
            Event::ValuesSet {
                scope,
                layer: ValuesLayer::Config,
                values,
                ..
            } => {
                self.values.entry(scope.to_string()).or_default().config = values.clone();
            }
            Event::ValuesSet {
                scope,
                layer: ValuesLayer::Memory,
                values,
                ..
            } => {
                // Memory values set wholesale: one add of the scope's key.
                let op = serde_json::json!({"op": "add", "path": format!("/{}", scope.values_key()), "value": values});
                if let Ok(op) = serde_json::from_value::<json_patch::PatchOperation>(op) {
                    self.values.entry(scope.to_string()).or_default().memory = vec![op];
                }
            }
            Event::Task(e) => self.tasks.apply(e),
            Event::ModuleEnabled { module, reason } | Event::ModuleDisabled { module, reason } => {
                let m = self.modules.entry(module.clone()).or_default();
                m.enabled = matches!(event, Event::ModuleEnabled { .. });
                m.reason = reason.clone();
            }
            Event::ModulePhase {
                module,
                phase,
                task,
            } => {
                let m = self.modules.entry(module.clone()).or_default();
                m.phase = *phase;
                m.phase_task = *task;
            }
            Event::ReleaseApplied {
                module,
                revision,
                checksum,
            } => {
                let m = self.modules.entry(module.clone()).or_default();
                m.revision = *revision;
                m.checksum = checksum.clone();
            }
            Event::ReleaseDeleted { module } => {
                if let Some(m) = self.modules.get_mut(module) {
                    m.revision = 0;
                    m.checksum.clear();
                }
            }
            Event::ModuleFlagsSet { flags } => self.module_flags = flags.clone(),
            Event::ConvergeStarted { reason } => {
                self.converge.in_progress = true;
                self.converge.reason = reason.clone();
            }
            Event::ConvergeFinished => {
                self.converge.in_progress = false;
                self.converge.completed += 1;
            }
        }
    }

    /// Folds many events.
    pub fn apply_all<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) {
        for e in events {
            self.apply(e);
        }
    }

    /// The scope's hook values document `{"<key>": …}`: config values with the memory
    /// patches replayed on top.
    pub fn scope_document(&self, scope: &Scope) -> Value {
        let key = scope.values_key();
        let Some(v) = self.values.get(&scope.to_string()) else {
            return serde_json::json!({ key: {} });
        };
        let config = if v.config.is_null() {
            Value::Object(Default::default())
        } else {
            v.config.clone()
        };
        let mut doc = serde_json::json!({ key: config });
        // Patches were checked when accepted; replay keeps whatever still applies.
        let _ = crate::values::apply_memory(&mut doc, &v.memory);
        doc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context_stub::ContextStub;
    use crate::events::{Position, TaskEvent, TaskSpec};
    use crate::task::HookRunParams;
    use proptest::prelude::*;
    use serde_json::json;

    fn task(id: u64, queue: &str) -> TaskSpec {
        TaskSpec {
            id: TaskId(id),
            queue: queue.into(),
            description: String::new(),
            kind: AddonTask::ModuleHookRun {
                module: "m".into(),
                hook: "h".into(),
                run: HookRunParams::with(vec![tick(id)], false),
            },
        }
    }

    /// A schedule context numbered by its index.
    fn tick(n: u64) -> ContextStub {
        ContextStub::Schedule {
            binding: "b".into(),
            index: Some(n as usize),
            group: None,
        }
    }

    fn patch(ops: Value) -> json_patch::Patch {
        serde_json::from_value(ops).unwrap_or_else(|_| json_patch::Patch(Vec::new()))
    }

    #[test]
    fn queue_positions_failures_and_merged_contexts() {
        let mut s = State::default();
        let enqueue = |id, position| {
            Event::Task(TaskEvent::TaskEnqueued {
                task: task(id, "main"),
                position,
            })
        };
        s.apply(&enqueue(1, Position::Tail));
        s.apply(&enqueue(2, Position::Head));
        s.apply(&enqueue(3, Position::After(TaskId(2))));
        let ids: Vec<u64> = s.tasks.queue("main").iter().map(|t| t.spec.id.0).collect();
        assert_eq!(ids, [2, 3, 1]);
        s.apply(&Event::Task(TaskEvent::TaskFailed {
            id: TaskId(2),
            error: "boom".into(),
            failures: 1,
            next_retry_at_ms: 5,
        }));
        assert_eq!(s.tasks.queue("main")[0].last_error, "boom");
        // A merged task's contexts move to the task that absorbs it.
        s.apply(&Event::Task(TaskEvent::TaskMerged {
            id: TaskId(3),
            into: TaskId(2),
        }));
        let contexts = s.tasks.queue("main")[0].spec.kind.contexts();
        assert_eq!(contexts, [tick(2), tick(3)]);
        for id in [2, 1] {
            s.apply(&Event::Task(TaskEvent::TaskSucceeded { id: TaskId(id) }));
        }
        assert!(s.tasks.queues.is_empty());
        assert_eq!(s.tasks.last_task_id, 3);
    }

    #[test]
    fn values_patches_and_bad_patches() {
        let mut s = State::default();
        let scope = Scope::Module("m".into());
        s.apply(&Event::ValuesSet {
            scope: scope.clone(),
            layer: ValuesLayer::Config,
            values: json!({"a": 1, "b": {"c": 1}}),
            source: "configmap".into(),
        });
        s.apply(&Event::ValuesPatched {
            scope: scope.clone(),
            layer: ValuesLayer::Memory,
            patch: patch(json!([{"op": "add", "path": "/m/b/d", "value": 2}])),
            source: "hook".into(),
        });
        assert_eq!(
            s.scope_document(&scope),
            json!({"m": {"a": 1, "b": {"c": 1, "d": 2}}})
        );
        // Config patches that cannot apply (a scalar has no children) become anomalies.
        s.apply(&Event::ValuesPatched {
            scope: scope.clone(),
            layer: ValuesLayer::Config,
            patch: patch(json!([{"op": "add", "path": "/m/a/deeper", "value": 1}])),
            source: "hook".into(),
        });
        assert_eq!(s.anomalies.len(), 1);
        assert!(s.anomalies[0].contains("hook"), "{:?}", s.anomalies);
    }

    fn arb_event() -> impl Strategy<Value = Event> {
        let id = 0u64..8;
        let queue = prop_oneof![Just("main".to_string()), Just("q1".to_string())];
        let module = prop_oneof![Just("a".to_string()), Just("b".to_string())];
        prop_oneof![
            (id.clone(), queue.clone(), 0u8..4, 0u64..8).prop_map(|(i, q, p, other)| {
                Event::Task(TaskEvent::TaskEnqueued {
                    task: task(i, &q),
                    position: match p {
                        0 => Position::Head,
                        1 => Position::Tail,
                        2 => Position::After(TaskId(other)),
                        _ => Position::Before(TaskId(other)),
                    },
                })
            }),
            (id.clone(), 1u32..5).prop_map(|(i, a)| Event::Task(TaskEvent::TaskStarted {
                id: TaskId(i),
                attempt: a
            })),
            id.clone()
                .prop_map(|i| Event::Task(TaskEvent::TaskSucceeded { id: TaskId(i) })),
            (id.clone(), 1u32..5).prop_map(|(i, f)| Event::Task(TaskEvent::TaskFailed {
                id: TaskId(i),
                error: format!("e{f}"),
                failures: f,
                next_retry_at_ms: u64::from(f) * 1000
            })),
            (id.clone(), 1u32..5).prop_map(|(i, f)| Event::Task(TaskEvent::TaskParked {
                id: TaskId(i),
                reason: format!("e{f}"),
            })),
            (id, 0u64..8).prop_map(|(i, into)| Event::Task(TaskEvent::TaskMerged {
                id: TaskId(i),
                into: TaskId(into)
            })),
            (module.clone(), 0u8..3).prop_map(|(m, p)| Event::ModulePhase {
                module: m,
                phase: [
                    ModulePhase::Startup,
                    ModulePhase::CanRunHelm,
                    ModulePhase::Ready
                ][usize::from(p)],
                task: Some(TaskId(u64::from(p))),
            }),
            (module.clone(), any::<bool>()).prop_map(|(m, on)| if on {
                Event::ModuleEnabled {
                    module: m,
                    reason: "static".into(),
                }
            } else {
                Event::ModuleDisabled {
                    module: m,
                    reason: "configmap".into(),
                }
            }),
            (module.clone(), 0u32..4).prop_map(|(m, r)| Event::ReleaseApplied {
                module: m,
                revision: r,
                checksum: format!("c{r}")
            }),
            (module.clone(), 0i64..4, any::<bool>()).prop_map(|(m, v, add)| Event::ValuesPatched {
                scope: Scope::Module(m.clone()),
                layer: ValuesLayer::Memory,
                patch: patch(if add {
                    json!([{"op": "add", "path": format!("/{m}/x"), "value": v}])
                } else {
                    json!([{"op": "remove", "path": format!("/{m}/x")}])
                }),
                source: "hook".into(),
            }),
            (0i64..4).prop_map(|v| Event::ValuesSet {
                scope: Scope::Global,
                layer: ValuesLayer::Config,
                values: json!({"v": v}),
                source: "cm".into()
            }),
            Just(Event::ConvergeStarted {
                reason: "OperatorStartup".into()
            }),
            Just(Event::ConvergeFinished),
        ]
    }

    fn replay(events: &[Event]) -> State {
        let mut s = State::default();
        s.apply_all(events);
        s
    }

    proptest! {
        #[test]
        fn prefix_then_rest_equals_everything(events in proptest::collection::vec(arb_event(), 0..60), cut in 0usize..60) {
            let cut = cut.min(events.len());
            let mut s = replay(&events[..cut]);
            s.apply_all(&events[cut..]);
            prop_assert_eq!(s, replay(&events));
        }

        #[test]
        fn snapshot_plus_suffix_equals_full_replay(events in proptest::collection::vec(arb_event(), 0..60), cut in 0usize..60) {
            let cut = cut.min(events.len());
            let snapshot = serde_json::to_vec(&replay(&events[..cut])).unwrap_or_default();
            let mut restored: State = serde_json::from_slice(&snapshot).unwrap_or_default();
            restored.apply_all(&events[cut..]);
            prop_assert_eq!(restored, replay(&events));
        }

        #[test]
        fn events_survive_their_encoding(event in arb_event()) {
            let raw = serde_json::to_value(&event).unwrap_or_default();
            prop_assert_eq!(crate::events::upgrade(crate::events::EVENT_VERSION, raw), Ok(event));
        }
    }
}
