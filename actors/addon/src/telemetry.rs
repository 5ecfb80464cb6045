//! The operator's own metrics, recorded through the `metrics` facade (no IO here: the binary
//! installs the Prometheus recorder, which adds `ADDON_OPERATOR_PROMETHEUS_METRICS_PREFIX`
//! to every name that does not start with `bosun_`).
//!
//! Labels carry only names from the configuration (hooks, bindings, queues, modules) and
//! small fixed sets (activation, error type), so their cardinality stays bounded.

use std::time::Duration;

use metrics::Label;

pub use bosun_runtime::queue_actor::{
    PARKED_TASKS, TASK_WAIT_IN_QUEUE_SECONDS_TOTAL, TASKS_QUEUE_ACTION_DURATION_SECONDS,
    TASKS_QUEUE_LENGTH,
};

use crate::context_stub::ContextStub;
use crate::ports::ResourceUsage;
use crate::state::QueuedTask;

/// Counter, +1 every 10 s.
pub const LIVE_TICKS: &str = "live_ticks";
/// Histogram `{hook,binding,queue,activation}`.
pub const GLOBAL_HOOK_RUN_SECONDS: &str = "global_hook_run_seconds";
/// Counter `{hook,binding,queue,activation}`.
pub const GLOBAL_HOOK_RUN_SUCCESS_TOTAL: &str = "global_hook_run_success_total";
/// Counter `{hook,binding,queue,activation}`: failures without `allowFailure`.
pub const GLOBAL_HOOK_RUN_ERRORS_TOTAL: &str = "global_hook_run_errors_total";
/// Counter `{hook,binding,queue,activation}`: failures with `allowFailure`.
pub const GLOBAL_HOOK_RUN_ALLOWED_ERRORS_TOTAL: &str = "global_hook_run_allowed_errors_total";
/// Histogram `{hook,binding,queue,activation}`.
pub const GLOBAL_HOOK_RUN_SYS_CPU_SECONDS: &str = "global_hook_run_sys_cpu_seconds";
/// Histogram `{hook,binding,queue,activation}`.
pub const GLOBAL_HOOK_RUN_USER_CPU_SECONDS: &str = "global_hook_run_user_cpu_seconds";
/// Gauge `{hook,binding,queue,activation}`.
pub const GLOBAL_HOOK_RUN_MAX_RSS_BYTES: &str = "global_hook_run_max_rss_bytes";
/// Histogram `{module,hook,binding,queue,activation}`.
pub const MODULE_HOOK_RUN_SECONDS: &str = "module_hook_run_seconds";
/// Counter `{module,hook,binding,queue,activation}`.
pub const MODULE_HOOK_RUN_SUCCESS_TOTAL: &str = "module_hook_run_success_total";
/// Counter `{module,hook,binding,queue,activation}`.
pub const MODULE_HOOK_RUN_ERRORS_TOTAL: &str = "module_hook_run_errors_total";
/// Counter `{module,hook,binding,queue,activation}`.
pub const MODULE_HOOK_RUN_ALLOWED_ERRORS_TOTAL: &str = "module_hook_run_allowed_errors_total";
/// Histogram `{module,hook,binding,queue,activation}`.
pub const MODULE_HOOK_RUN_SYS_CPU_SECONDS: &str = "module_hook_run_sys_cpu_seconds";
/// Histogram `{module,hook,binding,queue,activation}`.
pub const MODULE_HOOK_RUN_USER_CPU_SECONDS: &str = "module_hook_run_user_cpu_seconds";
/// Gauge `{module,hook,binding,queue,activation}`.
pub const MODULE_HOOK_RUN_MAX_RSS_BYTES: &str = "module_hook_run_max_rss_bytes";
/// Histogram `{module,activation}`: a whole `ModuleRun`.
pub const MODULE_RUN_SECONDS: &str = "module_run_seconds";
/// Counter `{module,error_type}`.
pub const MODULE_RUN_ERRORS_TOTAL: &str = "module_run_errors_total";
/// Counter `{module}`.
pub const MODULE_DELETE_ERRORS_TOTAL: &str = "module_delete_errors_total";
/// Histogram `{module,activation}`: render, status and upgrade of the release.
pub const MODULE_HELM_SECONDS: &str = "module_helm_seconds";
/// Histogram `{module,activation,operation}`: one Helm step of a module, by
/// [`HelmOperation`].
pub const HELM_OPERATION_SECONDS: &str = "helm_operation_seconds";
/// Counter: ConfigMap changes rejected (YAML, flags or values schema), the last good
/// config values kept.
pub const CONFIG_VALUES_ERRORS_TOTAL: &str = "config_values_errors_total";
/// Counter: failures while deciding which modules run: `enabled` scripts, module hooks'
/// `--config`, Kubernetes API calls (listing Helm releases).
pub const MODULE_DISCOVER_ERRORS_TOTAL: &str = "module_discover_errors_total";
/// Counter `{activation}`: seconds spent converging.
pub const CONVERGENCE_SECONDS: &str = "convergence_seconds";
/// Counter `{activation}`: converges finished.
pub const CONVERGENCE_TOTAL: &str = "convergence_total";
/// Gauge `{module,hook}`: bindings of a hook.
pub const BINDING_COUNT: &str = "binding_count";
/// Gauge `{module,hook,binding,queue}`: objects in a binding's snapshot.
pub const KUBE_SNAPSHOT_OBJECTS: &str = "kube_snapshot_objects";
/// Gauge `{module,hook,binding,queue}`: JSON bytes kept for a binding's snapshot.
pub const KUBE_SNAPSHOT_BYTES: &str = "kube_snapshot_bytes";
/// Histogram `{module,hook,binding,queue,kind}`.
pub const KUBE_JQ_FILTER_DURATION_SECONDS: &str = "kube_jq_filter_duration_seconds";
/// Histogram `{module,hook,binding,queue,kind}`: handling one watch event in a binding.
pub const KUBE_EVENT_DURATION_SECONDS: &str = "kube_event_duration_seconds";
/// Counter: journal append calls (batches), durable or not.
pub const JOURNAL_APPENDS_TOTAL: &str = "bosun_journal_appends_total";
/// Counter: encoded event bytes appended to the journal.
pub const JOURNAL_APPEND_BYTES_TOTAL: &str = "bosun_journal_append_bytes_total";
/// Gauge: how long the replay at start took.
pub const JOURNAL_REPLAY_SECONDS: &str = "bosun_journal_replay_seconds";
/// Gauge `{actor}`: messages sent to an actor and not yet handled.
pub const MAILBOX_DEPTH: &str = "bosun_mailbox_depth";

/// Counters of seconds. The exporter's counters hold whole numbers, so these are recorded
/// on gauges that only grow, and `/metrics` declares them as counters.
pub const FLOAT_COUNTERS: [&str; 2] = [TASK_WAIT_IN_QUEUE_SECONDS_TOTAL, CONVERGENCE_SECONDS];

/// The first binding context's `binding` (tasks without contexts: the task type).
pub fn binding_of(task: &QueuedTask) -> String {
    match task.spec.kind.hook_run().and_then(|r| r.binding()) {
        Some(b) => b.to_string(),
        None => task.spec.kind.task_type().as_str().to_string(),
    }
}

/// What started a task: the converge or module run reason (`OperatorStartup`,
/// `ReloadAllModules`, `ModuleValuesChanged`, …) when it has one, else the kind of binding
/// (`Schedule`, `Kubernetes`, `OnStartup`, `BeforeAll`, `AfterAll`).
pub(crate) fn activation_of(task: &QueuedTask) -> String {
    if let Some(r) = task.spec.kind.reason() {
        return r.to_string();
    }
    task.spec
        .kind
        .contexts()
        .first()
        .map(activation_of_context)
        .unwrap_or_default()
}

/// The activation of one binding context (see [`activation_of`]).
pub(crate) fn activation_of_context(context: &ContextStub) -> String {
    match context {
        ContextStub::Schedule { .. } => "Schedule".into(),
        ContextStub::Event { .. } | ContextStub::Synchronization { .. } => "Kubernetes".into(),
        ContextStub::Named { binding, .. } => match binding.as_str() {
            "onStartup" => "OnStartup".into(),
            "beforeAll" => "BeforeAll".into(),
            "afterAll" => "AfterAll".into(),
            b => {
                let mut c = b.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            }
        },
    }
}

/// The steps of a module's Helm run, as `helm_operation_seconds{operation}` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HelmOperation {
    /// Rendering the chart with the module's values.
    Template,
    /// Deciding whether an upgrade is needed: release status, checksum, absent or
    /// changed objects.
    CheckUpgrade,
    /// Installing or upgrading the release.
    Upgrade,
    /// Deleting the release (`ModuleDelete`).
    Uninstall,
}

impl HelmOperation {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            HelmOperation::Template => "template",
            HelmOperation::CheckUpgrade => "check-upgrade",
            HelmOperation::Upgrade => "upgrade",
            HelmOperation::Uninstall => "uninstall",
        }
    }

    /// Records how long this step took for `module`.
    pub fn record(self, module: &str, activation: &str, took: Duration) {
        metrics::histogram!(
            HELM_OPERATION_SECONDS,
            "module" => module.to_string(),
            "activation" => activation.to_string(),
            "operation" => self.as_str()
        )
        .record(took.as_secs_f64());
    }
}

/// One more module discovery failure (see [`MODULE_DISCOVER_ERRORS_TOTAL`]).
pub(crate) fn module_discover_error() {
    metrics::counter!(MODULE_DISCOVER_ERRORS_TOTAL).increment(1);
}

/// One more rejected ConfigMap (see [`CONFIG_VALUES_ERRORS_TOTAL`]).
pub fn config_values_error() {
    metrics::counter!(CONFIG_VALUES_ERRORS_TOTAL).increment(1);
}

/// How a hook run ended, for its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// It ran and its output was applied.
    Success,
    /// It failed (or its output was rejected) without `allowFailure`.
    Error,
    /// It failed with `allowFailure`.
    AllowedError,
}

/// The labels of one hook run.
#[derive(Clone, Debug)]
pub struct HookRunLabels {
    /// `None` for global hooks.
    pub module: Option<String>,
    /// Hook name.
    pub hook: String,
    /// Binding name.
    pub binding: String,
    /// Queue name.
    pub queue: String,
    /// What started it.
    pub activation: String,
}

impl HookRunLabels {
    fn labels(&self) -> Vec<Label> {
        let mut l = Vec::with_capacity(5);
        if let Some(m) = &self.module {
            l.push(Label::new("module", m.clone()));
        }
        l.push(Label::new("hook", self.hook.clone()));
        l.push(Label::new("binding", self.binding.clone()));
        l.push(Label::new("queue", self.queue.clone()));
        l.push(Label::new("activation", self.activation.clone()));
        l
    }

    /// Records a finished run: its time, its outcome and, when known, its resource usage.
    pub fn record(&self, outcome: RunOutcome, took: Duration, usage: Option<&ResourceUsage>) {
        let labels = self.labels();
        let global = self.module.is_none();
        let pick = |g: &'static str, m: &'static str| if global { g } else { m };
        metrics::histogram!(
            pick(GLOBAL_HOOK_RUN_SECONDS, MODULE_HOOK_RUN_SECONDS),
            labels.clone()
        )
        .record(took.as_secs_f64());
        let counter = match outcome {
            RunOutcome::Success => {
                pick(GLOBAL_HOOK_RUN_SUCCESS_TOTAL, MODULE_HOOK_RUN_SUCCESS_TOTAL)
            }
            RunOutcome::Error => pick(GLOBAL_HOOK_RUN_ERRORS_TOTAL, MODULE_HOOK_RUN_ERRORS_TOTAL),
            RunOutcome::AllowedError => pick(
                GLOBAL_HOOK_RUN_ALLOWED_ERRORS_TOTAL,
                MODULE_HOOK_RUN_ALLOWED_ERRORS_TOTAL,
            ),
        };
        metrics::counter!(counter, labels.clone()).increment(1);
        if let Some(u) = usage {
            metrics::histogram!(
                pick(
                    GLOBAL_HOOK_RUN_SYS_CPU_SECONDS,
                    MODULE_HOOK_RUN_SYS_CPU_SECONDS
                ),
                labels.clone()
            )
            .record(u.sys_cpu.as_secs_f64());
            metrics::histogram!(
                pick(
                    GLOBAL_HOOK_RUN_USER_CPU_SECONDS,
                    MODULE_HOOK_RUN_USER_CPU_SECONDS
                ),
                labels.clone()
            )
            .record(u.user_cpu.as_secs_f64());
            metrics::gauge!(
                pick(GLOBAL_HOOK_RUN_MAX_RSS_BYTES, MODULE_HOOK_RUN_MAX_RSS_BYTES),
                labels
            )
            .set(u.max_rss_bytes as f64);
        }
    }
}

/// `binding_count{module,hook}` of a hook (`module` empty for global hooks).
pub(crate) fn binding_count(
    module: Option<&str>,
    hook: &str,
    config: &crate::hook_config::HookConfig,
) {
    let orders = [
        config.on_startup,
        config.before_all,
        config.after_all,
        config.before_helm,
        config.after_helm,
        config.before_delete_helm,
        config.after_delete_helm,
    ];
    let count = orders.iter().filter(|o| o.is_some()).count()
        + config.schedule.len()
        + config.kubernetes.len();
    metrics::gauge!(
        BINDING_COUNT,
        "module" => module.unwrap_or_default().to_string(),
        "hook" => hook.to_string()
    )
    .set(count as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook_config::WatchEvent;

    #[test]
    fn activation_names_a_small_set() {
        let ctx = activation_of_context;
        assert_eq!(
            ctx(&ContextStub::Schedule {
                binding: "every-min".into(),
                index: None,
                group: None,
            }),
            "Schedule"
        );
        assert_eq!(
            ctx(&ContextStub::event("pods", 0, WatchEvent::Added)),
            "Kubernetes"
        );
        assert_eq!(
            ctx(&ContextStub::Synchronization {
                binding: "pods".into(),
                index: 0,
                group: None,
            }),
            "Kubernetes"
        );
        assert_eq!(ctx(&ContextStub::named("onStartup")), "OnStartup");
        assert_eq!(ctx(&ContextStub::named("beforeHelm")), "BeforeHelm");
        let no_contexts = QueuedTask {
            spec: bosun_runtime::TaskSpec {
                id: bosun_runtime::TaskId(1),
                queue: "main".into(),
                description: String::new(),
                kind: crate::task::AddonTask::GlobalHookWaitKubernetesSynchronization,
            },
            attempts: 0,
            failures: 0,
            last_error: String::new(),
            next_retry_at_ms: None,
        };
        assert_eq!(activation_of(&no_contexts), "");
    }
}
