//! The addon subsystem's task kinds with their typed parameters, and the phases a converge
//! and a module run go through. Leaf types: they depend on nothing else in the crate but
//! the binding contexts a hook run carries (`context_stub.rs`).
//!
//! ```text
//!   AddonTask ──(WireTask: taskType, module?, hook?, params?)──► journal JSON (version 1)
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context_stub::ContextStub;

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

impl TaskType {
    /// The name queue dumps and metrics show.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::GlobalHookRun => "GlobalHookRun",
            TaskType::GlobalHookEnableScheduleBindings => "GlobalHookEnableScheduleBindings",
            TaskType::GlobalHookEnableKubernetesBindings => "GlobalHookEnableKubernetesBindings",
            TaskType::GlobalHookWaitKubernetesSynchronization => {
                "GlobalHookWaitKubernetesSynchronization"
            }
            TaskType::ConvergeModules => "ConvergeModules",
            TaskType::ModuleEnsureCRDs => "ModuleEnsureCRDs",
            TaskType::ModuleRun => "ModuleRun",
            TaskType::ParallelModuleRun => "ParallelModuleRun",
            TaskType::ModuleHookRun => "ModuleHookRun",
            TaskType::ModuleDelete => "ModuleDelete",
            TaskType::ModulePurge => "ModulePurge",
            TaskType::DiscoverHelmReleases => "DiscoverHelmReleases",
            TaskType::ApplyKubeConfigValues => "ApplyKubeConfigValues",
        }
    }
}

/// The phases of a `ConvergeModules` task ("reload all modules"); each phase queues the
/// next one behind the work it starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConvergePhase {
    /// Not started: runs the beforeAll hooks.
    #[default]
    StandBy,
    /// beforeAll hooks done: decides the enabled modules and queues their tasks.
    WaitBeforeAll,
    /// Module deletions and runs done: runs the afterAll hooks.
    WaitDeleteAndRunModules,
    /// afterAll hooks done: the converge finishes.
    WaitAfterAll,
}

impl ConvergePhase {
    /// The phase's name, as addon-operator shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConvergePhase::StandBy => "StandBy",
            ConvergePhase::WaitBeforeAll => "WaitBeforeAll",
            ConvergePhase::WaitDeleteAndRunModules => "WaitDeleteAndRunModules",
            ConvergePhase::WaitAfterAll => "WaitAfterAll",
        }
    }
}

/// The steps of a module run, journaled as reached so a retried `ModuleRun` resumes after
/// the last one its task reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ModulePhase {
    /// No run has reached a phase yet.
    #[default]
    #[serde(rename = "")]
    Unset,
    /// The run started (onStartup hooks next).
    Startup,
    /// onStartup hooks ran.
    OnStartupDone,
    /// Bindings are synchronized: beforeHelm, Helm and afterHelm next.
    CanRunHelm,
    /// The release is applied.
    HelmDone,
    /// The run finished.
    Ready,
    /// The module was deleted.
    Disabled,
}

impl std::fmt::Display for ModulePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModulePhase::Unset => "",
            ModulePhase::Startup => "Startup",
            ModulePhase::OnStartupDone => "OnStartupDone",
            ModulePhase::CanRunHelm => "CanRunHelm",
            ModulePhase::HelmDone => "HelmDone",
            ModulePhase::Ready => "Ready",
            ModulePhase::Disabled => "Disabled",
        })
    }
}

/// Parameters of a hook run (`GlobalHookRun`, `ModuleHookRun`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookRunParams {
    /// The binding contexts the run receives (stubs rendered when it starts).
    #[serde(default)]
    pub binding_contexts: Vec<ContextStub>,
    /// A failure is logged and counted, and the task succeeds.
    #[serde(default)]
    pub allow_failure: bool,
    /// For a Synchronization run: whether the startup waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_synchronization: Option<bool>,
    /// For a Synchronization run: whether the hook runs at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute_hook_on_synchronization: Option<bool>,
}

impl HookRunParams {
    /// A run with these contexts.
    pub fn with(binding_contexts: Vec<ContextStub>, allow_failure: bool) -> HookRunParams {
        HookRunParams {
            binding_contexts,
            allow_failure,
            ..Default::default()
        }
    }

    /// The binding of the first context (`onStartup`, `kubernetes`, a binding name…).
    pub fn binding(&self) -> Option<&str> {
        self.binding_contexts.first().map(ContextStub::binding)
    }
}

/// Parameters of a `ModuleRun`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModuleRunParams {
    /// Run the onStartup hooks and start the bindings first (a newly enabled module).
    #[serde(default)]
    pub do_startup: bool,
    /// What asked for the run (`OperatorStartup`, `ReloadAllModules`, …).
    #[serde(default)]
    pub reason: String,
    /// The run is a step of a converge.
    #[serde(default)]
    pub reload_all: bool,
    /// The module's `enabled` script failed during the converge: decide again first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub check_enabled: bool,
}

/// What an addon task does, with what it needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WireTask", into = "WireTask")]
pub enum AddonTask {
    /// Run a global hook.
    GlobalHookRun {
        /// The hook.
        hook: String,
        /// Its contexts.
        run: HookRunParams,
    },
    /// Start a global hook's schedule bindings.
    GlobalHookEnableScheduleBindings {
        /// The hook.
        hook: String,
    },
    /// Start a global hook's kubernetes bindings.
    GlobalHookEnableKubernetesBindings {
        /// The hook.
        hook: String,
    },
    /// Wait until the global Synchronization runs in named queues are done.
    GlobalHookWaitKubernetesSynchronization,
    /// Reload all modules, phase by phase.
    ConvergeModules {
        /// The phase this task runs.
        phase: ConvergePhase,
        /// What started the converge.
        reason: String,
    },
    /// Apply a newly enabled module's CRDs.
    ModuleEnsureCRDs {
        /// The module.
        module: String,
        /// Why.
        reason: String,
    },
    /// Run a module: hooks and Helm.
    ModuleRun {
        /// The module.
        module: String,
        /// How.
        run: ModuleRunParams,
    },
    /// Run a module hook.
    ModuleHookRun {
        /// The module.
        module: String,
        /// The hook.
        hook: String,
        /// Its contexts.
        run: HookRunParams,
    },
    /// Delete a disabled module (afterDeleteHelm hooks, uninstall).
    ModuleDelete {
        /// The module.
        module: String,
        /// Why.
        reason: String,
    },
    /// Uninstall a release that belongs to no module.
    ModulePurge {
        /// The release.
        module: String,
        /// Why.
        reason: String,
    },
    /// Purge releases of unknown modules.
    DiscoverHelmReleases,
}

impl AddonTask {
    /// Its type.
    pub fn task_type(&self) -> TaskType {
        match self {
            AddonTask::GlobalHookRun { .. } => TaskType::GlobalHookRun,
            AddonTask::GlobalHookEnableScheduleBindings { .. } => {
                TaskType::GlobalHookEnableScheduleBindings
            }
            AddonTask::GlobalHookEnableKubernetesBindings { .. } => {
                TaskType::GlobalHookEnableKubernetesBindings
            }
            AddonTask::GlobalHookWaitKubernetesSynchronization => {
                TaskType::GlobalHookWaitKubernetesSynchronization
            }
            AddonTask::ConvergeModules { .. } => TaskType::ConvergeModules,
            AddonTask::ModuleEnsureCRDs { .. } => TaskType::ModuleEnsureCRDs,
            AddonTask::ModuleRun { .. } => TaskType::ModuleRun,
            AddonTask::ModuleHookRun { .. } => TaskType::ModuleHookRun,
            AddonTask::ModuleDelete { .. } => TaskType::ModuleDelete,
            AddonTask::ModulePurge { .. } => TaskType::ModulePurge,
            AddonTask::DiscoverHelmReleases => TaskType::DiscoverHelmReleases,
        }
    }

    /// The module it concerns, if any.
    pub fn module(&self) -> Option<&str> {
        match self {
            AddonTask::ModuleEnsureCRDs { module, .. }
            | AddonTask::ModuleRun { module, .. }
            | AddonTask::ModuleHookRun { module, .. }
            | AddonTask::ModuleDelete { module, .. }
            | AddonTask::ModulePurge { module, .. } => Some(module),
            _ => None,
        }
    }

    /// The hook it runs or starts bindings of, if any.
    pub fn hook(&self) -> Option<&str> {
        match self {
            AddonTask::GlobalHookRun { hook, .. }
            | AddonTask::GlobalHookEnableScheduleBindings { hook }
            | AddonTask::GlobalHookEnableKubernetesBindings { hook }
            | AddonTask::ModuleHookRun { hook, .. } => Some(hook),
            _ => None,
        }
    }

    /// A hook run's parameters.
    pub fn hook_run(&self) -> Option<&HookRunParams> {
        match self {
            AddonTask::GlobalHookRun { run, .. } | AddonTask::ModuleHookRun { run, .. } => {
                Some(run)
            }
            _ => None,
        }
    }

    /// The binding contexts a hook run carries (none for other tasks).
    pub fn contexts(&self) -> &[ContextStub] {
        self.hook_run()
            .map(|r| r.binding_contexts.as_slice())
            .unwrap_or_default()
    }

    /// Why the task was queued (converges, module tasks).
    pub fn reason(&self) -> Option<&str> {
        match self {
            AddonTask::ConvergeModules { reason, .. }
            | AddonTask::ModuleEnsureCRDs { reason, .. }
            | AddonTask::ModuleDelete { reason, .. }
            | AddonTask::ModulePurge { reason, .. } => Some(reason),
            AddonTask::ModuleRun { run, .. } => Some(&run.reason),
            _ => None,
        }
    }

    /// The converge phase, for a `ConvergeModules` task.
    pub fn converge_phase(&self) -> Option<ConvergePhase> {
        match self {
            AddonTask::ConvergeModules { phase, .. } => Some(*phase),
            _ => None,
        }
    }
}

/// How an addon task ended, and what it asks its queue to do next.
pub type TaskOutcome = bosun_runtime::queue_actor::TaskOutcome<AddonTask>;
/// Reports an addon task's end to its queue.
pub type Completion = bosun_runtime::queue_actor::Completion<AddonTask>;
/// A queue's contents, for the debug dump.
pub type QueueDump = bosun_runtime::queue_actor::QueueDump<AddonTask>;

/// A task of the addon subsystem (the events module's `TaskSpec`, which this leaf file
/// cannot name without a cycle).
type Spec = bosun_runtime::TaskSpec<AddonTask>;

/// A `ConvergeModules` task in its first phase, in the main queue.
pub(crate) fn converge_task(id: bosun_runtime::TaskId, reason: &str) -> Spec {
    Spec {
        id,
        queue: "main".into(),
        description: reason.to_string(),
        kind: AddonTask::ConvergeModules {
            phase: ConvergePhase::StandBy,
            reason: reason.to_string(),
        },
    }
}

/// A `ModuleRun` task, in the main queue.
pub(crate) fn module_run_task(
    id: bosun_runtime::TaskId,
    module: &str,
    do_startup: bool,
    reason: &str,
    reload_all: bool,
) -> Spec {
    Spec {
        id,
        queue: "main".into(),
        description: if do_startup {
            format!("{module}:doStartup:{reason}")
        } else {
            format!("{module}:{reason}")
        },
        kind: AddonTask::ModuleRun {
            module: module.to_string(),
            run: ModuleRunParams {
                do_startup,
                reason: reason.to_string(),
                reload_all,
                check_enabled: false,
            },
        },
    }
}

/// A module task described as `<module>:<reason>` (`ModuleDelete`, `ModuleEnsureCRDs`,
/// `ModulePurge`), in the main queue.
pub(crate) fn module_task(id: bosun_runtime::TaskId, kind: AddonTask) -> Spec {
    Spec {
        id,
        queue: "main".into(),
        description: format!(
            "{}:{}",
            kind.module().unwrap_or_default(),
            kind.reason().unwrap_or_default()
        ),
        kind,
    }
}

impl bosun_runtime::TaskKind for AddonTask {
    fn type_name(&self) -> &'static str {
        self.task_type().as_str()
    }

    fn absorb(&mut self, merged: &Self) {
        if let (
            AddonTask::GlobalHookRun { run, .. } | AddonTask::ModuleHookRun { run, .. },
            Some(other),
        ) = (self, merged.hook_run())
        {
            run.binding_contexts
                .extend(other.binding_contexts.iter().cloned());
        }
    }
}

/// A task as the journal stores it (version 1): the type, module and hook beside untyped
/// `params`, converted to and from [`AddonTask`] with checks.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireTask {
    task_type: TaskType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hook: Option<String>,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    params: Value,
}

/// A journaled task that does not fit its type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidTask {
    /// A field the type needs is missing.
    #[error("{task_type:?} task without a {field}")]
    Missing {
        /// The task's type.
        task_type: TaskType,
        /// `module` or `hook`.
        field: &'static str,
    },
    /// `params` do not fit the type.
    #[error("{task_type:?} task with invalid params: {message}")]
    Params {
        /// The task's type.
        task_type: TaskType,
        /// What is wrong.
        message: String,
    },
    /// A type this build never queues.
    #[error("{0:?} tasks are not handled by this version")]
    Unsupported(TaskType),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasonParams {
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConvergeParams {
    #[serde(default)]
    phase: ConvergePhase,
    #[serde(default)]
    reason: String,
}

impl TryFrom<WireTask> for AddonTask {
    type Error = InvalidTask;

    fn try_from(w: WireTask) -> Result<AddonTask, InvalidTask> {
        // Taken apart so that each field moves into the task: binding contexts are not
        // copied on their way in (a replay reads every enqueued task).
        let WireTask {
            task_type: t,
            module,
            hook,
            params: raw,
        } = w;
        let need = |v: Option<String>, field: &'static str| {
            v.ok_or(InvalidTask::Missing {
                task_type: t,
                field,
            })
        };
        fn params<P: serde::de::DeserializeOwned + Default>(
            t: TaskType,
            raw: Value,
        ) -> Result<P, InvalidTask> {
            if raw.is_null() {
                return Ok(P::default());
            }
            serde_json::from_value(raw).map_err(|e| InvalidTask::Params {
                task_type: t,
                message: e.to_string(),
            })
        }
        let reason = |raw: Value| -> Result<String, InvalidTask> {
            if raw.is_null() {
                return Ok(String::new());
            }
            serde_json::from_value::<ReasonParams>(raw)
                .map(|p| p.reason)
                .map_err(|e| InvalidTask::Params {
                    task_type: t,
                    message: e.to_string(),
                })
        };
        Ok(match t {
            TaskType::GlobalHookRun => AddonTask::GlobalHookRun {
                hook: need(hook, "hook")?,
                run: params(t, raw)?,
            },
            TaskType::GlobalHookEnableScheduleBindings => {
                AddonTask::GlobalHookEnableScheduleBindings {
                    hook: need(hook, "hook")?,
                }
            }
            TaskType::GlobalHookEnableKubernetesBindings => {
                AddonTask::GlobalHookEnableKubernetesBindings {
                    hook: need(hook, "hook")?,
                }
            }
            TaskType::GlobalHookWaitKubernetesSynchronization => {
                AddonTask::GlobalHookWaitKubernetesSynchronization
            }
            TaskType::ConvergeModules => {
                let p: ConvergeParams = if raw.is_null() {
                    ConvergeParams {
                        phase: ConvergePhase::StandBy,
                        reason: String::new(),
                    }
                } else {
                    serde_json::from_value(raw).map_err(|e| InvalidTask::Params {
                        task_type: t,
                        message: e.to_string(),
                    })?
                };
                AddonTask::ConvergeModules {
                    phase: p.phase,
                    reason: p.reason,
                }
            }
            TaskType::ModuleEnsureCRDs => AddonTask::ModuleEnsureCRDs {
                module: need(module, "module")?,
                reason: reason(raw)?,
            },
            TaskType::ModuleRun => AddonTask::ModuleRun {
                module: need(module, "module")?,
                run: params(t, raw)?,
            },
            TaskType::ModuleHookRun => AddonTask::ModuleHookRun {
                module: need(module, "module")?,
                hook: need(hook, "hook")?,
                run: params(t, raw)?,
            },
            TaskType::ModuleDelete => AddonTask::ModuleDelete {
                module: need(module, "module")?,
                reason: reason(raw)?,
            },
            TaskType::ModulePurge => AddonTask::ModulePurge {
                module: need(module, "module")?,
                reason: reason(raw)?,
            },
            TaskType::DiscoverHelmReleases => AddonTask::DiscoverHelmReleases,
            TaskType::ParallelModuleRun | TaskType::ApplyKubeConfigValues => {
                return Err(InvalidTask::Unsupported(t));
            }
        })
    }
}

impl From<AddonTask> for WireTask {
    fn from(task: AddonTask) -> WireTask {
        let task_type = task.task_type();
        // Plain data with string keys: serializing it cannot fail.
        fn to<T: Serialize>(params: &T) -> Value {
            serde_json::to_value(params).unwrap_or(Value::Null)
        }
        let (module, hook, params) = match &task {
            AddonTask::GlobalHookRun { hook, run } => (None, Some(hook.clone()), to(run)),
            AddonTask::GlobalHookEnableScheduleBindings { hook }
            | AddonTask::GlobalHookEnableKubernetesBindings { hook } => {
                (None, Some(hook.clone()), Value::Null)
            }
            AddonTask::GlobalHookWaitKubernetesSynchronization
            | AddonTask::DiscoverHelmReleases => (None, None, Value::Null),
            AddonTask::ConvergeModules { phase, reason } => (
                None,
                None,
                serde_json::json!({"phase": phase.as_str(), "reason": reason}),
            ),
            AddonTask::ModuleEnsureCRDs { module, reason }
            | AddonTask::ModuleDelete { module, reason }
            | AddonTask::ModulePurge { module, reason } => (
                Some(module.clone()),
                None,
                serde_json::json!({"reason": reason}),
            ),
            AddonTask::ModuleRun { module, run } => (Some(module.clone()), None, to(run)),
            AddonTask::ModuleHookRun { module, hook, run } => {
                (Some(module.clone()), Some(hook.clone()), to(run))
            }
        };
        WireTask {
            task_type,
            module,
            hook,
            params,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hook_runs_absorb_merged_contexts_and_other_tasks_ignore_them() {
        use bosun_runtime::TaskKind;
        let run = |n: u64| AddonTask::ModuleHookRun {
            module: "m".into(),
            hook: "h".into(),
            run: HookRunParams::with(vec![ContextStub::named(&format!("b{n}"))], false),
        };
        let mut a = run(1);
        a.absorb(&run(2));
        assert_eq!(
            a.contexts(),
            [ContextStub::named("b1"), ContextStub::named("b2")]
        );
        let mut c = AddonTask::DiscoverHelmReleases;
        c.absorb(&run(3));
        assert_eq!(c, AddonTask::DiscoverHelmReleases);
    }

    #[test]
    fn journaled_hook_runs_with_every_kind_of_context_write_back_the_same_bytes() {
        let lines = [
            r#"{"taskType":"GlobalHookRun","hook":"a.sh","params":{"allowFailure":false,"bindingContexts":[{"binding":"onStartup"}]}}"#,
            r#"{"taskType":"GlobalHookRun","hook":"a.sh","params":{"allowFailure":false,"bindingContexts":[{"binding":"beforeAll","snapshots":{"pods":[]}}]}}"#,
            r#"{"taskType":"ModuleHookRun","module":"m","hook":"h","params":{"allowFailure":true,"bindingContexts":[{"_index":0,"binding":"pods","groupName":"g","type":"Synchronization"}],"executeHookOnSynchronization":true,"waitForSynchronization":false}}"#,
            r#"{"taskType":"ModuleHookRun","module":"m","hook":"h","params":{"allowFailure":false,"bindingContexts":[{"_index":1,"binding":"cms","filterResult":{"a":1},"object":{"kind":"ConfigMap"},"type":"Event","watchEvent":"Added"},{"_index":1,"binding":"cms","filterResult":null,"type":"Event","watchEvent":"Deleted"}]}}"#,
            r#"{"taskType":"GlobalHookRun","hook":"a.sh","params":{"allowFailure":false,"bindingContexts":[{"binding":"every-min","type":"Schedule"},{"_schedule":0,"binding":"s","groupName":"g","type":"Schedule"}]}}"#,
        ];
        for line in lines {
            let task: AddonTask =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(!task.contexts().is_empty());
            assert_eq!(serde_json::to_string(&task).unwrap_or_default(), line);
        }
    }

    #[test]
    fn every_wire_shape_of_version_one_decodes() {
        let cases = [
            json!({"taskType": "GlobalHookRun", "hook": "a.sh", "params": {"bindingContexts": [{"binding": "onStartup"}], "allowFailure": false}}),
            json!({"taskType": "GlobalHookRun", "hook": "a.sh", "params": {"bindingContexts": []}}),
            json!({"taskType": "GlobalHookEnableScheduleBindings", "hook": "a.sh"}),
            json!({"taskType": "GlobalHookWaitKubernetesSynchronization"}),
            json!({"taskType": "ConvergeModules", "params": {"phase": "StandBy", "reason": "OperatorStartup"}}),
            json!({"taskType": "ModuleRun", "module": "m", "params": {"doStartup": true, "reason": "r", "reloadAll": true, "checkEnabled": true}}),
            json!({"taskType": "ModuleHookRun", "module": "m", "hook": "h", "params": {"bindingContexts": [], "allowFailure": true, "waitForSynchronization": false, "executeHookOnSynchronization": true}}),
            json!({"taskType": "ModuleDelete", "module": "m", "params": {"reason": "r"}}),
            json!({"taskType": "ModulePurge", "module": "old", "params": {"reason": "DiscoverHelmReleases"}}),
            json!({"taskType": "DiscoverHelmReleases"}),
        ];
        for raw in cases {
            let task: AddonTask = serde_json::from_value(raw.clone())
                .unwrap_or_else(|e| panic!("{raw} does not decode: {e}"));
            assert_eq!(task.task_type().as_str(), raw["taskType"], "{raw}");
            let back = serde_json::to_value(&task).unwrap_or_default();
            let again: AddonTask = serde_json::from_value(back).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(again, task, "{raw} survives a round trip");
        }
    }
}
