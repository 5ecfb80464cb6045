//! The events the addon subsystem journals before they take effect, and its task kinds.
//!
//! Every value patch, module transition and converge step is one [`Event`]; task
//! transitions are the runtime's shared [`TaskEvent`] over [`AddonTask`]. The journal stores
//! each with [`EVENT_VERSION`]; [`upgrade`] turns an older encoding into the current one so a
//! newer bosun replays an older journal.
//!
//! ```text
//!   Event ─┬─ Task(TaskEvent<AddonTask>)   shared task transitions (enqueued, started, …)
//!          └─ ValuesPatched, ModuleEnabled, ModulePhase, ReleaseApplied, Converge…
//! ```
//!
//! Wire format: every event is one JSON object tagged by `type` (`taskStarted`,
//! `valuesPatched`, …). A task is `{id, taskType, queue, module?, hook?, description?,
//! params?}` with typed `params` per task type (`AddonTask`'s `WireTask`), the same
//! encoding version 1 has always had, so journals written before the task kinds were typed
//! replay unchanged.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use bosun_runtime::{Position, TaskId};

pub use crate::task::{AddonTask, ModulePhase, TaskType};

/// A task of the addon subsystem.
pub type TaskSpec = bosun_runtime::TaskSpec<AddonTask>;
/// A queued addon task.
pub type QueuedTask = bosun_runtime::QueuedTask<AddonTask>;
/// A transition of an addon task.
pub type TaskEvent = bosun_runtime::TaskEvent<AddonTask>;

/// Version of the [`Event`] encoding written by this build.
pub const EVENT_VERSION: u32 = 1;

/// Where values live: the global values or one module's (by module name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "scope", content = "module")]
pub enum Scope {
    /// The `global` values.
    Global,
    /// A module's values, by module name (kebab case).
    Module(String),
}

impl Scope {
    /// The key of this scope in a hook's values document (`global`, `myModule`).
    pub fn values_key(&self) -> String {
        match self {
            Scope::Global => "global".into(),
            Scope::Module(m) => crate::values::values_key(m),
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Global => f.write_str("global"),
            Scope::Module(m) => f.write_str(m),
        }
    }
}

/// The two value layers hooks can patch: config values (persisted in the ConfigMap) and
/// memory values (the hooks' own, kept by bosun in the journal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ValuesLayer {
    /// Config values (`CONFIG_VALUES_JSON_PATCH_PATH`, the ConfigMap).
    Config,
    /// Memory values (`VALUES_JSON_PATCH_PATH`).
    Memory,
}

bosun_runtime::tagged_enum! {
    /// One journaled fact. Read through `EventDe`, its mirror ([`bosun_runtime::tagged`]).
    #[derive(Clone, Debug, PartialEq, Serialize)]
    #[serde(tag = "type", rename_all = "camelCase")]
    pub enum Event as EventDe {
        /// A JSON patch applied to one values layer of one scope.
        ValuesPatched {
            /// Whose values.
            scope: Scope,
            /// Which layer.
            layer: ValuesLayer,
            /// RFC 6902 operations.
            patch: json_patch::Patch,
            /// Who produced it (hook name, `configmap`, …).
            source: String,
        },
        /// A values layer replaced wholesale (a new ConfigMap section, static defaults).
        ValuesSet {
            /// Whose values.
            scope: Scope,
            /// Which layer.
            layer: ValuesLayer,
            /// The new content.
            values: Value,
            /// Who produced it.
            source: String,
        },
        /// A module became enabled.
        ModuleEnabled {
            /// Module name.
            module: String,
            /// Which extender decided (`static`, `configmap`, `dynamic`, `script`).
            reason: String,
        },
        /// A module became disabled.
        ModuleDisabled {
            /// Module name.
            module: String,
            /// Which extender decided.
            reason: String,
        },
        /// A module's run phase changed (`Startup`, `CanRunHelm`, `Ready`, …).
        ModulePhase {
            /// Module name.
            module: String,
            /// The new phase.
            phase: ModulePhase,
            /// The ModuleRun task that reached it (a retried task resumes after it).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            task: Option<TaskId>,
        },
        /// A Helm release was installed or upgraded.
        ReleaseApplied {
            /// Module name.
            module: String,
            /// Release revision after the upgrade.
            revision: u32,
            /// Checksum of the rendered manifests.
            checksum: String,
        },
        /// A Helm release was uninstalled.
        ReleaseDeleted {
            /// Module name (or release name for purged releases).
            module: String,
        },
        /// The `<module>Enabled` flags of the ConfigMap changed (the whole set, by module name).
        ModuleFlagsSet {
            /// Module name → flag.
            flags: std::collections::BTreeMap<String, bool>,
        },
        /// A ConvergeModules run began.
        ConvergeStarted {
            /// The event that triggered it (`OperatorStartup`, `ReloadAllModules`, …).
            reason: String,
        },
        /// A ConvergeModules run completed.
        ConvergeFinished,
    }
    untagged {
        /// A task transition (the runtime's shared part; its own `type` tags).
        Task(TaskEvent)
    }
}

impl bosun_runtime::tagged::Tagged for Event {
    const TAG: &'static str = "type";
    const EXPECTING: &'static str = "a journal event";

    fn from_tag<'de, A: serde::de::MapAccess<'de>>(tag: String, rest: A) -> Result<Self, A::Error> {
        if TaskEvent::TYPE_NAMES.contains(&tag.as_str()) {
            return TaskEvent::from_tag(tag, rest).map(Event::Task);
        }
        bosun_runtime::tagged::read_variant::<EventDe, A>(tag, rest).map(Event::from)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bosun_runtime::tagged::deserialize_tagged(d)
    }
}

impl From<TaskEvent> for Event {
    fn from(e: TaskEvent) -> Event {
        Event::Task(e)
    }
}

impl Event {
    /// The `type` names of the addon's own events, as written in the journal.
    pub const ADDON_TYPE_NAMES: [&'static str; 10] = [
        "valuesPatched",
        "valuesSet",
        "moduleEnabled",
        "moduleDisabled",
        "modulePhase",
        "releaseApplied",
        "releaseDeleted",
        "moduleFlagsSet",
        "convergeStarted",
        "convergeFinished",
    ];

    /// The event's type name, as written in the journal and counted by `journal stats`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::ValuesPatched { .. } => "valuesPatched",
            Event::ValuesSet { .. } => "valuesSet",
            Event::Task(t) => t.type_name(),
            Event::ModuleEnabled { .. } => "moduleEnabled",
            Event::ModuleDisabled { .. } => "moduleDisabled",
            Event::ModulePhase { .. } => "modulePhase",
            Event::ReleaseApplied { .. } => "releaseApplied",
            Event::ReleaseDeleted { .. } => "releaseDeleted",
            Event::ModuleFlagsSet { .. } => "moduleFlagsSet",
            Event::ConvergeStarted { .. } => "convergeStarted",
            Event::ConvergeFinished => "convergeFinished",
        }
    }

    /// The module the event concerns, if any.
    pub fn module(&self) -> Option<&str> {
        match self {
            Event::ValuesPatched {
                scope: Scope::Module(m),
                ..
            }
            | Event::ValuesSet {
                scope: Scope::Module(m),
                ..
            } => Some(m),
            Event::Task(TaskEvent::TaskEnqueued { task, .. }) => task.kind.module(),
            Event::ModuleEnabled { module, .. }
            | Event::ModuleDisabled { module, .. }
            | Event::ModulePhase { module, .. }
            | Event::ReleaseApplied { module, .. }
            | Event::ReleaseDeleted { module } => Some(module),
            _ => None,
        }
    }

    /// The task the event concerns, if any.
    pub fn task(&self) -> Option<TaskId> {
        match self {
            Event::Task(t) => Some(t.task()),
            _ => None,
        }
    }
}

/// An event encoding this build cannot read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UpgradeError {
    /// Written by a newer bosun.
    #[error(
        "event version {version} is newer than this bosun understands (up to {EVENT_VERSION}); upgrade bosun to read this journal"
    )]
    TooNew {
        /// The version found.
        version: u32,
    },
    /// Not a valid event of its version.
    #[error("event (version {version}) is not valid: {message}")]
    Invalid {
        /// The version found.
        version: u32,
        /// What was wrong.
        message: String,
    },
}

/// Decodes an event stored with `version`, upgrading older encodings.
pub fn upgrade(version: u32, raw: Value) -> Result<Event, UpgradeError> {
    let type_name = raw["type"].as_str().unwrap_or_default();
    let task = TaskEvent::TYPE_NAMES.contains(&type_name);
    if version <= EVENT_VERSION && !task && !Event::ADDON_TYPE_NAMES.contains(&type_name) {
        return Err(UpgradeError::Invalid {
            version,
            message: format!("unknown event type {}", raw["type"]),
        });
    }
    match version {
        // Version 0 never shipped; 1 is the first encoding. Future changes add arms that
        // rewrite `raw` from version N to N+1 before falling through to the current decoder.
        // Task events are decoded as such, so an error names the field that is wrong.
        1 if task => serde_json::from_value::<TaskEvent>(raw)
            .map(Event::Task)
            .map_err(|e| UpgradeError::Invalid {
                version,
                message: e.to_string(),
            }),
        1 => serde_json::from_value(raw).map_err(|e| UpgradeError::Invalid {
            version,
            message: e.to_string(),
        }),
        version => Err(UpgradeError::TooNew { version }),
    }
}

impl bosun_journal::Versioned for Event {
    const VERSION: u32 = EVENT_VERSION;

    type Error = UpgradeError;

    fn decode(version: u32, raw: Value) -> Result<Event, UpgradeError> {
        upgrade(version, raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{AddonTask, ConvergePhase};
    use serde_json::json;

    #[test]
    fn events_round_trip_through_their_journal_encoding() {
        let e = Event::Task(TaskEvent::TaskFailed {
            id: TaskId(7),
            error: "hook exited 1".into(),
            failures: 2,
            next_retry_at_ms: 1000,
        });
        let raw = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(raw["type"], "taskFailed");
        assert_eq!(upgrade(EVENT_VERSION, raw), Ok(e));
        let e = Event::ModulePhase {
            module: "m".into(),
            phase: ModulePhase::CanRunHelm,
            task: Some(TaskId(3)),
        };
        let raw = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(
            raw,
            json!({"type": "modulePhase", "module": "m", "phase": "CanRunHelm", "task": 3})
        );
        assert_eq!(upgrade(EVENT_VERSION, raw), Ok(e));
    }

    #[test]
    fn every_event_reads_back_as_written_wherever_its_tag_is() {
        let module = || "m".to_string();
        let all = vec![
            Event::ValuesPatched {
                scope: Scope::Module(module()),
                layer: ValuesLayer::Memory,
                patch: serde_json::from_value(json!([{"op": "add", "path": "/a", "value": 1}]))
                    .unwrap_or(json_patch::Patch(Vec::new())),
                source: "hook.sh".into(),
            },
            Event::ValuesSet {
                scope: Scope::Global,
                layer: ValuesLayer::Config,
                values: json!({"a": {"b": [1, 2]}}),
                source: "configmap".into(),
            },
            Event::ModuleEnabled {
                module: module(),
                reason: "static".into(),
            },
            Event::ModuleDisabled {
                module: module(),
                reason: "script".into(),
            },
            Event::ModulePhase {
                module: module(),
                phase: ModulePhase::Ready,
                task: None,
            },
            Event::ReleaseApplied {
                module: module(),
                revision: 3,
                checksum: "c".into(),
            },
            Event::ReleaseDeleted { module: module() },
            Event::ModuleFlagsSet {
                flags: [(module(), true)].into_iter().collect(),
            },
            Event::ConvergeStarted {
                reason: "OperatorStartup".into(),
            },
            Event::ConvergeFinished,
            Event::Task(TaskEvent::TaskStarted {
                id: TaskId(1),
                attempt: 1,
            }),
            Event::Task(TaskEvent::TaskEnqueued {
                task: TaskSpec {
                    id: TaskId(2),
                    queue: "main".into(),
                    description: String::new(),
                    kind: AddonTask::ConvergeModules {
                        phase: ConvergePhase::WaitBeforeAll,
                        reason: "OperatorStartup".into(),
                    },
                },
                position: Position::Head,
            }),
        ];
        let own: std::collections::BTreeSet<_> = all.iter().map(Event::type_name).collect();
        for name in Event::ADDON_TYPE_NAMES {
            assert!(own.contains(name), "{name} is covered");
        }
        for e in all {
            let text = serde_json::to_string(&e).unwrap_or_default();
            assert_eq!(
                serde_json::from_str::<Event>(&text).ok(),
                Some(e.clone()),
                "{text}"
            );
            let value = serde_json::to_value(&e).unwrap_or_default();
            let sorted = value.to_string();
            assert_eq!(
                serde_json::from_str::<Event>(&sorted).ok(),
                Some(e.clone()),
                "{sorted}"
            );
            assert_eq!(upgrade(EVENT_VERSION, value), Ok(e));
        }
        let e = serde_json::from_str::<Event>(r#"{"type":"moduleExploded"}"#).expect_err("unknown");
        assert!(
            e.to_string().contains("unknown variant `moduleExploded`"),
            "{e}"
        );
    }

    #[test]
    fn version_one_tasks_decode_into_typed_kinds_and_encode_back_the_same() {
        let raw = json!({"type": "taskEnqueued", "position": {"at": "tail"}, "task": {
            "id": 9, "taskType": "ConvergeModules", "queue": "main",
            "description": "OperatorStartup:WaitBeforeAll",
            "params": {"phase": "WaitBeforeAll", "reason": "OperatorStartup"}}});
        let Ok(Event::Task(TaskEvent::TaskEnqueued { task, .. })) = upgrade(1, raw.clone()) else {
            panic!("a v1 converge task decodes");
        };
        assert_eq!(
            task.kind,
            AddonTask::ConvergeModules {
                phase: ConvergePhase::WaitBeforeAll,
                reason: "OperatorStartup".into()
            }
        );
        let again = serde_json::to_value(Event::Task(TaskEvent::TaskEnqueued {
            task,
            position: Position::Tail,
        }))
        .unwrap_or_default();
        assert_eq!(again, raw);
    }

    #[test]
    fn unknown_versions_and_bad_tasks_are_refused_with_a_clear_error() {
        let err = upgrade(9, json!({"type": "convergeFinished"})).unwrap_err();
        assert!(err.to_string().contains("version 9 is newer"), "{err}");
        let err = upgrade(1, json!({"type": "noSuchEvent"})).unwrap_err();
        assert!(err.to_string().contains("noSuchEvent"), "{err}");
        let err = upgrade(
            1,
            json!({"type": "taskEnqueued", "position": {"at": "tail"},
            "task": {"id": 1, "taskType": "ModuleRun", "queue": "main", "params": {}}}),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("ModuleRun task without a module"),
            "{err}"
        );
    }
}
