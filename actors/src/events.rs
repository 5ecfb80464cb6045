//! The domain events bosun journals before they take effect.
//!
//! Every value patch and every task transition is one [`Event`]. The journal stores each
//! with [`EVENT_VERSION`]; [`upgrade`] turns an older encoding into the current one so a
//! newer bosun replays an older journal.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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

/// addon-operator's task types, with their names as shown in queue dumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum TaskType {
    GlobalHookRun,
    GlobalHookEnableScheduleBindings,
    GlobalHookEnableKubernetesBindings,
    GlobalHookWaitKubernetesSynchronization,
    ConvergeModules,
    ModuleEnsureCRDs,
    ModuleRun,
    ParallelModuleRun,
    ModuleHookRun,
    ModuleDelete,
    ModulePurge,
    DiscoverHelmReleases,
    ApplyKubeConfigValues,
}

/// Identifier of a task, unique within a journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(pub u64);

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "t{}", self.0)
    }
}

impl std::str::FromStr for TaskId {
    type Err = String;

    fn from_str(s: &str) -> Result<TaskId, String> {
        s.trim_start_matches('t')
            .parse()
            .map(TaskId)
            .map_err(|_| format!("invalid task id {s:?}: expected t<number>, e.g. t42"))
    }
}

/// What a task is: enough to rebuild and show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// Its identity.
    pub id: TaskId,
    /// Its type.
    pub task_type: TaskType,
    /// The named queue it runs in (`main`, …).
    pub queue: String,
    /// The module it concerns, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// The hook it runs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// The queue-dump description after `<Type>:<queue>:`, e.g. `onStartup:hook.sh`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Task parameters (binding contexts, flags) as the engine defines them.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
}

/// Where an enqueued task goes in its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "at", content = "task")]
pub enum Position {
    /// At the head (runs next).
    Head,
    /// At the tail.
    Tail,
    /// Right after this task (or at the tail if it is gone).
    After(TaskId),
    /// Right before this task (or at the head if it is gone).
    Before(TaskId),
}

/// One journaled fact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Event {
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
    /// A task was put in a queue.
    TaskEnqueued {
        /// The task.
        task: TaskSpec,
        /// Where.
        position: Position,
    },
    /// A task started an attempt.
    TaskStarted {
        /// Which task.
        id: TaskId,
        /// 1 for the first attempt.
        attempt: u32,
    },
    /// A task finished successfully and left its queue.
    TaskSucceeded {
        /// Which task.
        id: TaskId,
    },
    /// A task attempt failed; the task stays at the head of its queue.
    TaskFailed {
        /// Which task.
        id: TaskId,
        /// The error, as shown in `queue list`.
        error: String,
        /// Failures so far, this one included.
        failures: u32,
        /// When the next attempt is due (unix milliseconds).
        next_retry_at_ms: u64,
    },
    /// A task was merged into another (compaction) and left its queue.
    TaskMerged {
        /// The merged task.
        id: TaskId,
        /// The task that absorbed it.
        into: TaskId,
    },
    /// A task was removed without running (deduplicated, module disabled, queue drained).
    TaskDropped {
        /// Which task.
        id: TaskId,
        /// Why.
        reason: String,
    },
    /// A task reached the maximum number of attempts and was set aside so its queue can
    /// go on; it stays visible until an operator retries or drops it.
    TaskParked {
        /// Which task.
        id: TaskId,
        /// Why (the last error).
        reason: String,
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
        phase: String,
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

impl Event {
    /// The event's type name, as written in the journal and counted by `journal stats`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::ValuesPatched { .. } => "valuesPatched",
            Event::ValuesSet { .. } => "valuesSet",
            Event::TaskEnqueued { .. } => "taskEnqueued",
            Event::TaskStarted { .. } => "taskStarted",
            Event::TaskSucceeded { .. } => "taskSucceeded",
            Event::TaskFailed { .. } => "taskFailed",
            Event::TaskMerged { .. } => "taskMerged",
            Event::TaskDropped { .. } => "taskDropped",
            Event::TaskParked { .. } => "taskParked",
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
            Event::TaskEnqueued { task, .. } => task.module.as_deref(),
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
            Event::TaskEnqueued { task, .. } => Some(task.id),
            Event::TaskStarted { id, .. }
            | Event::TaskSucceeded { id }
            | Event::TaskFailed { id, .. }
            | Event::TaskMerged { id, .. }
            | Event::TaskDropped { id, .. }
            | Event::TaskParked { id, .. } => Some(*id),
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
    match version {
        // Version 0 never shipped; 1 is the first encoding. Future changes add arms that
        // rewrite `raw` from version N to N+1 before falling through to the current decoder.
        1 => serde_json::from_value(raw).map_err(|e| UpgradeError::Invalid {
            version,
            message: e.to_string(),
        }),
        version => Err(UpgradeError::TooNew { version }),
    }
}

impl bosun_journal::Versioned for Event {
    const VERSION: u32 = EVENT_VERSION;

    fn decode(version: u32, raw: Value) -> Result<Event, String> {
        upgrade(version, raw).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_round_trip_through_their_journal_encoding() {
        let e = Event::TaskFailed {
            id: TaskId(7),
            error: "hook exited 1".into(),
            failures: 2,
            next_retry_at_ms: 1000,
        };
        let raw = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(raw["type"], "taskFailed");
        assert_eq!(upgrade(EVENT_VERSION, raw), Ok(e));
    }

    #[test]
    fn unknown_versions_are_refused_with_a_clear_error() {
        let err = upgrade(9, json!({"type": "convergeFinished"})).unwrap_err();
        assert!(err.to_string().contains("version 9 is newer"), "{err}");
        let err = upgrade(1, json!({"type": "noSuchEvent"})).unwrap_err();
        assert!(err.to_string().contains("noSuchEvent"), "{err}");
    }

    #[test]
    fn task_ids_parse_as_printed() {
        assert_eq!("t42".parse::<TaskId>(), Ok(TaskId(42)));
        assert_eq!(TaskId(42).to_string(), "t42");
        assert!("x".parse::<TaskId>().is_err());
    }
}
