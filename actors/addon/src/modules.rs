//! Modules: what a module is, how its enabled state is decided, how the ConfigMap maps onto
//! modules, and one actor per module that owns the module's values, runs its hooks and its
//! Helm release, and watches the release for drift.
//!
//! ```text
//!   conductor ── ModuleMsg::Run(ModuleRun | ModuleDelete | ModuleEnsureCRDs) ──► ModuleActor
//!                                                     │   hooks (HookExecutor)
//!                                                     │   Helm  (Releases)
//!                                                     └── resource monitor ─► Router (ModuleRun)
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};

use bosun_runtime::TaskIds;
use bosun_runtime::mailbox::{Describe, Envelope, MailboxHandle, Tracked};
use bosun_runtime::queue_actor::Router;

use crate::bindings::{HookRef, binding_events, owner_of};
use crate::context_stub::ContextStub;
use crate::events::{Event, Scope, TaskId, ValuesLayer};
use crate::hook_config::{HookConfig, HookKind};
use crate::hook_metrics::HookMetrics;
use crate::hook_output::{Effects, Origin, OutputError, ScopeValues};
use crate::ports::{EnabledRun, HookResult, HookRun, LogFields, Ports, Rendered};
use crate::state::{QueuedTask, State};
use crate::task::{AddonTask, ModulePhase, TaskOutcome, module_run_task};
use crate::telemetry::{self, HelmOperation, HookRunLabels, RunOutcome};
use crate::values::{GlobalDocs, apply_memory, checksum, kebab_name, values_key};

pub use crate::module_error::{HookRunError, ModuleError};

/// A module found in `MODULES_DIR`.
#[derive(Clone, Debug, Default)]
pub struct ModuleDef {
    /// Name (kebab case, without the order prefix); also the Helm release name.
    pub name: String,
    /// Order (the numeric prefix, or `UNNUMBERED_MODULES_ORDER`).
    pub order: u32,
    /// Its directory.
    pub dir: PathBuf,
    /// The chart to install, when the module has one.
    pub chart: Option<PathBuf>,
    /// The `enabled` script, when present and executable.
    pub enabled_script: Option<PathBuf>,
    /// Static values of the module's key (`$MODULES_DIR/values.yaml`, then the module's).
    pub static_values: Value,
    /// `<key>Enabled` from the values.yaml files (the module's wins).
    pub static_enabled: Option<bool>,
    /// CRDs from `crds/`, filtered and labelled.
    pub crds: Vec<Value>,
    /// Hook executables: (name, path). Their configurations are read on the first run.
    pub hooks: Vec<(String, PathBuf)>,
    /// `openapi/config-values.yaml` and `openapi/values.yaml`.
    pub schemas: Arc<crate::schema::ValuesSchemas>,
}

impl ModuleDef {
    /// The values key (`someModule`).
    pub fn key(&self) -> String {
        values_key(&self.name)
    }
}

/// The ConfigMap split into what bosun uses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigSections {
    /// The `global` section.
    pub global: Value,
    /// Module sections, by module name (kebab).
    pub modules: BTreeMap<String, Value>,
    /// `<key>Enabled` flags, by module name.
    pub flags: BTreeMap<String, bool>,
}

/// A ConfigMap key that cannot be taken, naming the ConfigMap and the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigMapError {
    /// A section that is not YAML.
    #[error("ConfigMap {config_map}: key {key:?} is not valid YAML: {message}")]
    NotYaml {
        /// The ConfigMap.
        config_map: String,
        /// The key.
        key: String,
        /// The parser's reason.
        message: String,
    },
    /// A section that is a scalar or a list.
    #[error("ConfigMap {config_map}: key {key:?} must be a YAML mapping of values, got {got}")]
    NotAMapping {
        /// The ConfigMap.
        config_map: String,
        /// The key.
        key: String,
        /// `a list` or `the scalar …`.
        got: String,
    },
    /// A key that names no module the way module keys are written.
    #[error(
        "ConfigMap {config_map}: key {key:?} is not a module key (expected the camelCase of a kebab-case module name, e.g. someModule or someModuleEnabled)"
    )]
    NotAModuleKey {
        /// The ConfigMap.
        config_map: String,
        /// The key.
        key: String,
    },
    /// A `<key>Enabled` that is neither `true` nor `false`.
    #[error("ConfigMap {config_map}: key {key:?} must be \"true\" or \"false\", got {got:?}")]
    NotABool {
        /// The ConfigMap.
        config_map: String,
        /// The key.
        key: String,
        /// The value given.
        got: String,
    },
}

/// Parses the ConfigMap's data: every value is YAML text; `<key>Enabled` must be exactly
/// `"true"` or `"false"`; `<key>Maintenance` is accepted and ignored. A module section of
/// `"true"` or `"false"` is its enabled flag, as the seed's own example writes it
/// (`anotherModule: "false"`; addon-operator's code since its explicit `<key>Enabled`
/// refuses it); an explicit `<key>Enabled` wins. Keys of modules that are not loaded are
/// reported in the returned warnings, not fatal.
pub fn parse_config_map(
    data: &BTreeMap<String, String>,
    modules: &[ModuleDef],
    config_map: &str,
) -> Result<(ConfigSections, Vec<String>), ConfigMapError> {
    let mut out = ConfigSections {
        global: json!({}),
        ..ConfigSections::default()
    };
    let mut warnings = Vec::new();
    // A section is a mapping (or empty): a scalar or a list has no keys for the
    // module's or the global values, and taking it would hide the typo behind defaults.
    let yaml = |key: &str, text: &str| {
        let v: Value = serde_saphyr::from_str(text).map_err(|e| ConfigMapError::NotYaml {
            config_map: config_map.to_string(),
            key: key.to_string(),
            message: e.to_string(),
        })?;
        match v {
            Value::Null => Ok(json!({})),
            Value::Object(_) => Ok(v),
            other => Err(ConfigMapError::NotAMapping {
                config_map: config_map.to_string(),
                key: key.to_string(),
                got: match other {
                    Value::Array(_) => "a list".to_string(),
                    scalar => format!("the scalar {scalar}"),
                },
            }),
        }
    };
    for (key, text) in data {
        if key == "global" {
            out.global = yaml(key, text)?;
            continue;
        }
        if key.ends_with("Maintenance") {
            continue;
        }
        let (base, is_flag) = match key.strip_suffix("Enabled") {
            Some(base) if !base.is_empty() => (base, true),
            _ => (key.as_str(), false),
        };
        let name = kebab_name(base);
        if values_key(&name) != base {
            return Err(ConfigMapError::NotAModuleKey {
                config_map: config_map.to_string(),
                key: key.clone(),
            });
        }
        if !modules.iter().any(|m| m.name == name) {
            warnings.push(format!(
                "ConfigMap {config_map}: key {key:?} names module {name:?}, which is not loaded"
            ));
        }
        if !is_flag && let Some(flag) = section_flag(text) {
            if !data.contains_key(&format!("{base}Enabled")) {
                out.flags.insert(name, flag);
            }
            continue;
        }
        if is_flag {
            let flag = match text.trim() {
                "true" => true,
                "false" => false,
                other => {
                    return Err(ConfigMapError::NotABool {
                        config_map: config_map.to_string(),
                        key: key.clone(),
                        got: other.to_string(),
                    });
                }
            };
            out.flags.insert(name, flag);
        } else {
            out.modules.insert(name, yaml(key, text)?);
        }
    }
    Ok((out, warnings))
}

/// A module section that is a YAML boolean (`false`, `"false"`, `true`): the module's
/// enabled flag.
fn section_flag(text: &str) -> Option<bool> {
    match serde_saphyr::from_str::<Value>(text) {
        Ok(Value::Bool(b)) => Some(b),
        Ok(Value::String(s)) => match s.as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A values document with `global.enabledModules` set to `enabled`.
fn with_enabled_modules(mut values: Value, enabled: &[String]) -> Value {
    if !values["global"].is_object() {
        values["global"] = json!({});
    }
    values["global"]["enabledModules"] = json!(enabled);
    values
}

/// Where a module's enabled state came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EnabledBy {
    /// No source enabled it.
    Default,
    /// The values.yaml files.
    Static,
    /// A global hook's `/<key>Enabled` patch.
    Dynamic,
    /// The ConfigMap's `<key>Enabled`.
    ConfigMap,
}

impl EnabledBy {
    /// Lower-case name, as journaled.
    pub fn as_str(self) -> &'static str {
        match self {
            EnabledBy::Default => "default",
            EnabledBy::Static => "static",
            EnabledBy::Dynamic => "dynamic",
            EnabledBy::ConfigMap => "configmap",
        }
    }
}

/// The flag chain before the `enabled` script: static → dynamic → ConfigMap, a later
/// defined flag overriding earlier ones; disabled by default.
pub(crate) fn flag_chain(
    static_flag: Option<bool>,
    dynamic: Option<bool>,
    config_map: Option<bool>,
) -> (bool, EnabledBy) {
    let mut result = (false, EnabledBy::Default);
    for (flag, by) in [
        (static_flag, EnabledBy::Static),
        (dynamic, EnabledBy::Dynamic),
        (config_map, EnabledBy::ConfigMap),
    ] {
        if let Some(f) = flag {
            result = (f, by);
        }
    }
    result
}

/// Messages of a module actor.
#[derive(Debug)]
pub(crate) enum ModuleMsg {
    /// Run a `ModuleRun`, `ModuleDelete` or `ModuleEnsureCRDs` task.
    Run(Box<QueuedTask>, GlobalDocs, RpcReplyPort<TaskOutcome>),
    /// Run the `enabled` script with `global.enabledModules` = the given list.
    Enabled(
        GlobalDocs,
        Vec<String>,
        RpcReplyPort<Result<bool, ModuleError>>,
    ),
    /// The ConfigMap section changed; replies whether the config values changed.
    ConfigChanged(Value, RpcReplyPort<Result<bool, ModuleError>>),
    /// Reply with the module's values document (given the global one).
    Values(GlobalDocs, RpcReplyPort<Value>),
    /// Reply with the module's config values document (given the global one).
    Config(GlobalDocs, RpcReplyPort<Value>),
    /// Render the chart with the current values (what a run would install), without
    /// installing it: the rendered objects.
    Render(GlobalDocs, RpcReplyPort<Result<Vec<Value>, ModuleError>>),
    /// The resource monitor found the release unhealthy.
    Unhealthy(String),
}

impl Describe for ModuleMsg {
    fn summary(&self) -> String {
        match self {
            ModuleMsg::Run(t, ..) => format!("Run {}", crate::queue::describe(t)),
            ModuleMsg::Enabled(..) => "Enabled".into(),
            ModuleMsg::ConfigChanged(..) => "ConfigChanged".into(),
            ModuleMsg::Values(..) => "Values".into(),
            ModuleMsg::Config(..) => "Config".into(),
            ModuleMsg::Render(..) => "Render".into(),
            ModuleMsg::Unhealthy(why) => format!("Unhealthy {why}"),
        }
    }
}

/// Start-up arguments of a module actor.
pub struct ModuleArgs {
    /// The module.
    pub def: ModuleDef,
    /// State restored from the journal (the module's values and phase are used).
    pub restored: State,
    /// The journal, hook processes, the ConfigMap, Helm, bindings and the object patcher.
    pub ports: Ports,
    /// Where the monitor's ModuleRun tasks go.
    pub router: Arc<dyn Router<AddonTask>>,
    /// Task ids.
    pub ids: TaskIds,
    /// How often the resource monitor checks the release.
    pub monitor_interval: Duration,
    /// Mailbox tracking.
    pub mailbox: MailboxHandle,
    /// Timers of the hooks' schedule bindings.
    pub scheduler: crate::scheduler::Scheduler,
    /// Where the hooks' `METRICS_PATH` operations go.
    pub hook_metrics: HookMetrics,
    /// What each module's resource monitor watches (`module resource-monitor`).
    pub monitored: Monitored,
    /// Where the hooks' rate limits are published for the queue handler.
    pub limits: crate::rate::Limits,
}

/// The objects each module's resource monitor checks, `Kind/[namespace/]name`, shared with
/// the debug views so they never wait for a busy module actor.
pub(crate) type Monitored = Arc<std::sync::Mutex<BTreeMap<String, Vec<String>>>>;

/// A module hook with its configuration.
#[derive(Clone, Debug)]
struct ModuleHook {
    name: String,
    path: PathBuf,
    config: HookConfig,
    limiter: Option<Arc<crate::rate::Limiter>>,
}

/// The actor.
pub(crate) struct ModuleActor;

/// Its state.
pub(crate) struct ModuleState {
    def: ModuleDef,
    /// What the journal holds (this actor reads its module's values and record from it).
    journaled: State,
    /// The journal, hook processes, the ConfigMap, Helm, bindings and the object patcher.
    ports: Ports,
    router: Arc<dyn Router<AddonTask>>,
    ids: TaskIds,
    monitor_interval: Duration,
    mailbox: MailboxHandle,
    me: Option<Tracked<ModuleMsg>>,
    hooks: Option<Vec<ModuleHook>>,
    monitor: Option<tokio::task::JoinHandle<()>>,
    busy: Arc<AtomicBool>,
    heal_pending: bool,
    /// Differences an upgrade did not remove (e.g. a field the API server rewrites): not
    /// drift, or every check would upgrade again.
    settled_drift: Vec<String>,
    scheduler: crate::scheduler::Scheduler,
    monitored: Monitored,
    limits: crate::rate::Limits,
    /// Whether this process started the hooks' bindings (they stop when it is disabled).
    bindings_started: bool,
    hook_metrics: HookMetrics,
    /// The `activation` label of the task being run.
    activation: String,
}

impl ModuleState {
    fn name(&self) -> &str {
        &self.def.name
    }

    fn config(&self) -> Value {
        self.journaled
            .values
            .get(&self.def.name)
            .map(|v| v.config.clone())
            .filter(|c| !c.is_null())
            .unwrap_or(json!({}))
    }

    fn config_document(&self, docs: &GlobalDocs) -> Value {
        json!({"global": docs.config["global"].clone(), self.def.key(): self.config()})
    }

    /// `VALUES_PATH` of the module's hooks: the global values and the module's (static,
    /// then config, then memory patches).
    fn values_document(&self, docs: &GlobalDocs) -> Value {
        self.values_with(docs, &self.config())
    }

    /// The values document with `config` as the module's config values.
    fn values_with(&self, docs: &GlobalDocs, config: &Value) -> Value {
        let key = self.def.key();
        let mut doc = json!({
            "global": docs.values["global"].clone(),
            key.clone(): self.def.schemas.layer(&self.def.static_values, config),
        });
        if let Some(v) = self.journaled.values.get(&self.def.name) {
            let _ = apply_memory(&mut doc, &v.memory);
        }
        if !doc[&key].is_object() {
            doc[&key] = json!({});
        }
        doc
    }

    async fn journal(&mut self, events: Vec<Event>) -> Result<(), ModuleError> {
        self.ports
            .journal
            .append(events.clone())
            .await
            .map_err(|source| ModuleError::Journal {
                module: self.def.name.clone(),
                source,
            })?;
        self.journaled.apply_all(&events);
        Ok(())
    }

    /// Journals a phase transition without waiting for the flush: the next durable write
    /// (a values patch, the release, the task's end) carries it. Losing it in a crash only
    /// makes the retried task redo a phase.
    async fn phase(&mut self, phase: ModulePhase, task: TaskId) -> Result<(), ModuleError> {
        let events = vec![Event::ModulePhase {
            module: self.def.name.clone(),
            phase,
            task: Some(task),
        }];
        self.ports
            .journal
            .append_later(events.clone())
            .map_err(|source| ModuleError::Journal {
                module: self.def.name.clone(),
                source,
            })?;
        self.journaled.apply_all(&events);
        Ok(())
    }

    /// Runs `--config` of every hook once; an error names the hook and counts as a module
    /// discovery error.
    async fn load_hooks(&mut self) -> Result<(), ModuleError> {
        if self.hooks.is_some() {
            return Ok(());
        }
        let loaded = self.read_hook_configs().await;
        if loaded.is_err() {
            telemetry::module_discover_error();
        }
        self.hooks = Some(loaded?);
        Ok(())
    }

    async fn read_hook_configs(&self) -> Result<Vec<ModuleHook>, ModuleError> {
        let module = || self.def.name.clone();
        let invalid = |source| ModuleError::HookConfig {
            module: module(),
            source,
        };
        let mut hooks = Vec::new();
        for (name, path) in &self.def.hooks {
            let text = self
                .ports
                .executor
                .config(name, path)
                .await
                .map_err(|source| ModuleError::HookConfigRun {
                    module: module(),
                    source,
                })?;
            let config =
                crate::hook_config::parse(&text, HookKind::Module, name).map_err(invalid)?;
            crate::hook_config::check_filters(&config, name, |p| {
                self.ports.bindings.check_filter(p)
            })
            .map_err(invalid)?;
            telemetry::binding_count(Some(&self.def.name), name, &config);
            let limiter = crate::rate::Limiter::for_settings(&config.settings).map(Arc::new);
            self.limits.set(&self.def.name, name, limiter.clone());
            hooks.push(ModuleHook {
                name: name.clone(),
                path: path.clone(),
                limiter,
                config,
            });
        }
        Ok(hooks)
    }

    fn hooks_for(&self, order: impl Fn(&HookConfig) -> Option<i64>) -> Vec<ModuleHook> {
        let mut with: Vec<(i64, ModuleHook)> = self
            .hooks
            .iter()
            .flatten()
            .filter_map(|h| order(&h.config).map(|o| (o, h.clone())))
            .collect();
        with.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        with.into_iter().map(|(_, h)| h).collect()
    }

    /// Runs the hooks of one binding in order; the first failure fails the task.
    async fn run_binding(
        &mut self,
        binding: &'static str,
        order: impl Fn(&HookConfig) -> Option<i64>,
        docs: &GlobalDocs,
        queue: &str,
    ) -> Result<(), ModuleError> {
        for hook in self.hooks_for(order) {
            self.run_hook(&hook, vec![ContextStub::named(binding)], docs, queue, false)
                .await
                .map_err(|source| ModuleError::BindingHook {
                    module: self.def.name.clone(),
                    binding,
                    source,
                })?;
        }
        Ok(())
    }

    fn hook_ref(&self, hook: &str) -> HookRef {
        HookRef {
            owner: owner_of(Some(&self.def.name)).into(),
            hook: hook.into(),
        }
    }

    /// Runs one hook with context stubs rendered against the current snapshots and applies
    /// its output; releases the events of the bindings it synchronized. The run is recorded
    /// as an allowed error when it fails with `allow_failure` (the caller goes on).
    async fn run_hook(
        &mut self,
        hook: &ModuleHook,
        stubs: Vec<ContextStub>,
        docs: &GlobalDocs,
        queue: &str,
        allow_failure: bool,
    ) -> Result<(), HookRunError> {
        let href = self.hook_ref(&hook.name);
        let synced = crate::bindings::synchronized(&stubs);
        let (contexts, binding) = crate::bindings::contexts_for_run(&hook.config, stubs, &|i| {
            self.ports.bindings.snapshot(&href, i)
        });
        let run = HookRun {
            name: hook.name.clone(),
            path: hook.path.clone(),
            binding_context: contexts,
            values: with_enabled_modules(self.values_document(docs), &docs.enabled_modules),
            config_values: self.config_document(docs),
            log_fields: LogFields {
                module: Some(self.def.name.clone()),
                binding: Some(binding.to_string()),
                queue: Some(queue.to_string()),
            },
        };
        let labels = HookRunLabels {
            module: Some(self.def.name.clone()),
            hook: hook.name.clone(),
            binding,
            queue: queue.to_string(),
            activation: self.activation.clone(),
        };
        let failed = if allow_failure {
            RunOutcome::AllowedError
        } else {
            RunOutcome::Error
        };
        let started = std::time::Instant::now();
        let out = match self.ports.executor.run(run).await {
            Ok(out) => out,
            Err(e) => {
                labels.record(failed, started.elapsed(), None);
                return Err(HookRunError::Run(e));
            }
        };
        let took = started.elapsed();
        let applied = self.apply_output(&hook.name, &out, docs).await;
        let outcome = if applied.is_ok() {
            RunOutcome::Success
        } else {
            failed
        };
        labels.record(outcome, took, out.usage.as_ref());
        applied.map_err(|e| HookRunError::Output(Box::new(e)))?;
        for i in synced {
            self.ports.bindings.release(&href, i);
        }
        Ok(())
    }

    /// Takes what a hook wrote (see [`crate::hook_output`]) and folds the journaled events.
    async fn apply_output(
        &mut self,
        hook: &str,
        out: &HookResult,
        docs: &GlobalDocs,
    ) -> Result<(), OutputError> {
        let values_with = |config: &Value| self.values_with(docs, config);
        let memory = self
            .journaled
            .values
            .get(&self.def.name)
            .map(|v| v.memory.as_slice())
            .unwrap_or_default();
        let scope = ScopeValues {
            config: self.config(),
            memory,
            static_values: &self.def.static_values,
            schemas: &self.def.schemas,
            values_with: &values_with,
        };
        let effects = Effects {
            journal: self.ports.journal.as_ref(),
            patcher: self.ports.patcher.as_ref(),
            config_store: self.ports.config_store.as_ref(),
            hook_metrics: &self.hook_metrics,
        };
        let origin = Origin {
            hook,
            module: Some(&self.def.name),
        };
        let events = crate::hook_output::apply(origin, out, &scope, &effects).await?;
        self.journaled.apply_all(&events);
        Ok(())
    }

    /// The Helm values file: global values and the module's.
    fn helm_values(&self, docs: &GlobalDocs) -> Value {
        let doc = self.values_document(docs);
        let key = self.def.key();
        json!({"global": doc["global"].clone(), key.clone(): doc[&key].clone()})
    }

    /// The chart rendered with the values a run would use (`module render`).
    async fn render(&self, docs: &GlobalDocs) -> Result<Vec<Value>, ModuleError> {
        let name = self.def.name.clone();
        let Some(chart) = self.def.chart.clone() else {
            return Err(ModuleError::NoChart { module: name });
        };
        let values = self.helm_values(docs);
        self.def
            .schemas
            .validate_helm(&values[&self.def.key()])
            .map_err(|source| ModuleError::HelmValues {
                module: name.clone(),
                source,
            })?;
        self.ports
            .releases
            .render(name.clone(), chart, values)
            .await
            .map(|r| r.objects)
            .map_err(|source| ModuleError::Render {
                module: name,
                source,
            })
    }

    /// Installs or upgrades the release when needed; returns the rendered objects. Each
    /// step that ends (well or not) is timed in `helm_operation_seconds`.
    async fn helm(&mut self, docs: &GlobalDocs) -> Result<Vec<Value>, ModuleError> {
        let Some(chart) = self.def.chart.clone() else {
            return Ok(Vec::new());
        };
        let name = self.def.name.clone();
        let activation = self.activation.clone();
        let values = self.helm_values(docs);
        self.def
            .schemas
            .validate_helm(&values[&self.def.key()])
            .map_err(|source| ModuleError::HelmValues {
                module: name.clone(),
                source,
            })?;
        let started = Instant::now();
        let rendered = self
            .ports
            .releases
            .render(name.clone(), chart.clone(), values.clone())
            .await;
        HelmOperation::Template.record(&name, &activation, started.elapsed());
        let rendered = rendered.map_err(|source| ModuleError::Render {
            module: name.clone(),
            source,
        })?;
        let started = Instant::now();
        let reason = self.upgrade_reason(&rendered).await;
        HelmOperation::CheckUpgrade.record(&name, &activation, started.elapsed());
        let (reason, drift_before) = reason?;
        match reason {
            None => {
                tracing::info!(module = %name, "release is up to date, upgrade skipped");
            }
            Some(why) => {
                tracing::info!(module = %name, "upgrading release: {why}");
                let started = Instant::now();
                let revision = self
                    .ports
                    .releases
                    .upgrade(name.clone(), chart, values, rendered.checksum.clone())
                    .await;
                HelmOperation::Upgrade.record(&name, &activation, started.elapsed());
                let revision = revision.map_err(|source| ModuleError::Upgrade {
                    module: name.clone(),
                    source,
                })?;
                self.journal(vec![Event::ReleaseApplied {
                    module: name.clone(),
                    revision,
                    checksum: rendered.checksum.clone(),
                }])
                .await?;
                // Differences left after an upgrade are settled (fields the API server rewrites),
                // except after an upgrade that repaired drift: there only differences seen before
                // it are, so an edit by hand made while it ran is still healed.
                let previously = std::mem::take(&mut self.settled_drift);
                let settled: Vec<String> = self
                    .drift(&rendered.objects)
                    .await?
                    .into_iter()
                    .filter(|d| {
                        drift_before.as_ref().is_none_or(|b| b.contains(d))
                            || previously.contains(d)
                    })
                    .collect();
                if !settled.is_empty() {
                    tracing::warn!(module = %name, "differences Helm does not reconcile, not treated as drift: {}", settled.join("; "));
                    self.settled_drift = settled;
                }
            }
        }
        Ok(rendered.objects)
    }

    /// Why the release needs an upgrade (`None`: it is up to date), from its status, the
    /// checksum of the last applied render and the live objects; with the differences seen
    /// when the objects were compared.
    async fn upgrade_reason(
        &self,
        rendered: &Rendered,
    ) -> Result<(Option<String>, Option<Vec<String>>), ModuleError> {
        let name = &self.def.name;
        let info = self
            .ports
            .releases
            .status(name.clone())
            .await
            .map_err(|source| ModuleError::ReleaseStatus {
                module: name.clone(),
                source,
            })?;
        let recorded = info.as_ref().and_then(|i| i.checksum.clone()).or_else(|| {
            self.journaled
                .modules
                .get(name)
                .map(|m| m.checksum.clone())
                .filter(|c| !c.is_empty())
        });
        Ok(match &info {
            None => (Some("no release yet".to_string()), None),
            Some(i) if i.status != "deployed" => {
                (Some(format!("release status is {}", i.status)), None)
            }
            Some(_) if recorded.as_deref() != Some(rendered.checksum.as_str()) => {
                (Some("rendered manifests changed".to_string()), None)
            }
            Some(_) => {
                let drift = self.drift(&rendered.objects).await?;
                let why = (!drift.is_empty()).then(|| drift.join("; "));
                (why, Some(drift))
            }
        })
    }

    /// Absent or changed rendered objects, minus the settled differences.
    async fn drift(&self, objects: &[Value]) -> Result<Vec<String>, ModuleError> {
        let found = self
            .ports
            .releases
            .drift(objects.to_vec())
            .await
            .map_err(|source| ModuleError::Drift {
                module: self.def.name.clone(),
                source,
            })?;
        Ok(found
            .into_iter()
            .filter(|d| !self.settled_drift.contains(d))
            .collect())
    }

    fn stop_monitor(&mut self) {
        if let Some(m) = self.monitor.take() {
            m.abort();
        }
        self.monitored
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.def.name);
    }

    fn start_monitor(&mut self, objects: Vec<Value>) {
        self.stop_monitor();
        let (Some(me), Some(_)) = (self.me.clone(), self.def.chart.as_ref()) else {
            return;
        };
        let ids = objects
            .iter()
            .map(|o| {
                let m = &o["metadata"];
                let kind = o["kind"].as_str().unwrap_or_default();
                let name = m["name"].as_str().unwrap_or_default();
                match m["namespace"].as_str() {
                    Some(ns) if !ns.is_empty() => format!("{kind}/{ns}/{name}"),
                    _ => format!("{kind}/{name}"),
                }
            })
            .collect();
        self.monitored
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.def.name.clone(), ids);
        let releases = self.ports.releases.clone();
        let busy = self.busy.clone();
        let interval = self.monitor_interval;
        let name = self.def.name.clone();
        let settled = self.settled_drift.clone();
        self.monitor = Some(tokio::spawn(async move {
            loop {
                let jitter = rand_jitter(interval);
                tokio::time::sleep(interval + jitter).await;
                if busy.load(Ordering::SeqCst) {
                    continue;
                }
                let problem = match releases.status(name.clone()).await {
                    Ok(None) => Some("HelmReleaseUnexpectedStatus: no release".to_string()),
                    Ok(Some(i)) if i.status != "deployed" => {
                        Some(format!("HelmReleaseUnexpectedStatus: {}", i.status))
                    }
                    Ok(Some(_)) => match releases.drift(objects.clone()).await {
                        Ok(d) => {
                            let d: Vec<String> =
                                d.into_iter().filter(|x| !settled.contains(x)).collect();
                            (!d.is_empty())
                                .then(|| format!("HelmResourcesDrifted: {}", d.join("; ")))
                        }
                        Err(e) => {
                            tracing::warn!(module = %name, "resource monitor: {e}");
                            None
                        }
                    },
                    Err(e) => {
                        tracing::warn!(module = %name, "resource monitor: {e}");
                        None
                    }
                };
                if let Some(p) = problem
                    && me.cast(ModuleMsg::Unhealthy(p)).is_err()
                {
                    return;
                }
            }
        }));
    }

    /// A failed `ModuleRun` step: counted by the kind of step, then the task fails.
    fn run_failed(&self, error_type: &'static str, error: ModuleError) -> TaskOutcome {
        metrics::counter!(
            telemetry::MODULE_RUN_ERRORS_TOTAL,
            "module" => self.def.name.clone(),
            "error_type" => error_type
        )
        .increment(1);
        TaskOutcome::Fail(error.to_string())
    }

    async fn module_run(&mut self, task: &QueuedTask, docs: &GlobalDocs) -> TaskOutcome {
        self.heal_pending = false;
        let id = task.spec.id;
        let do_startup = match &task.spec.kind {
            AddonTask::ModuleRun { run, .. } => run.do_startup,
            _ => false,
        };
        if let Err(e) = self.load_hooks().await {
            return self.run_failed("hooks_config", e);
        }
        let queue = task.spec.queue.clone();
        let resumed = self
            .journaled
            .modules
            .get(&self.def.name)
            .is_some_and(|m| m.phase_task == Some(id) && m.phase != ModulePhase::Startup);
        if do_startup && !resumed {
            let steps = async {
                self.phase(ModulePhase::Startup, id).await?;
                self.run_binding("onStartup", |c| c.on_startup, docs, &queue)
                    .await?;
                self.phase(ModulePhase::OnStartupDone, id).await
            };
            if let Err(e) = steps.await {
                return self.run_failed("onStartup", e);
            }
        }
        if !self.bindings_started
            && let Err(e) = self.start_bindings(docs, &queue).await
        {
            return self.run_failed("bindings", e);
        }
        let mut stage = "beforeHelm";
        let steps = async {
            self.phase(ModulePhase::CanRunHelm, id).await?;
            self.run_binding("beforeHelm", |c| c.before_helm, docs, &queue)
                .await?;
            stage = "helm";
            let started = std::time::Instant::now();
            let objects = self.helm(docs).await?;
            if self.def.chart.is_some() {
                metrics::histogram!(
                    telemetry::MODULE_HELM_SECONDS,
                    "module" => self.def.name.clone(),
                    "activation" => self.activation.clone()
                )
                .record(started.elapsed().as_secs_f64());
            }
            self.phase(ModulePhase::HelmDone, id).await?;
            stage = "afterHelm";
            let before = checksum(&self.values_document(docs)[&self.def.key()]);
            self.run_binding("afterHelm", |c| c.after_helm, docs, &queue)
                .await?;
            let after = checksum(&self.values_document(docs)[&self.def.key()]);
            self.phase(ModulePhase::Ready, id).await?;
            Ok::<_, ModuleError>((objects, before != after))
        };
        let result = steps.await;
        match result {
            Ok((objects, changed)) => {
                self.start_monitor(objects);
                let after = if changed {
                    vec![module_run_task(
                        self.ids.next(),
                        &self.def.name,
                        false,
                        "AfterHelmValuesChanged",
                        false,
                    )]
                } else {
                    Vec::new()
                };
                TaskOutcome::Success {
                    head: Vec::new(),
                    after,
                    tail: Vec::new(),
                }
            }
            Err(e) => self.run_failed(stage, e),
        }
    }

    /// Starts the kubernetes bindings of every hook and runs their Synchronization: in this
    /// run for bindings on the main queue or waited for, as a task in their named queue
    /// otherwise.
    async fn start_bindings(&mut self, docs: &GlobalDocs, queue: &str) -> Result<(), ModuleError> {
        let name = self.def.name.clone();
        let hooks: Vec<ModuleHook> = self
            .hooks
            .iter()
            .flatten()
            .filter(|h| !h.config.kubernetes.is_empty())
            .cloned()
            .collect();
        for hook in &hooks {
            let href = self.hook_ref(&hook.name);
            let events = binding_events(
                Some(&name),
                &hook.name,
                Arc::new(hook.config.clone()),
                self.router.clone(),
                self.ids.clone(),
            );
            self.ports
                .bindings
                .start(href, hook.config.kubernetes.clone(), events)
                .await
                .map_err(|source| ModuleError::Bindings {
                    module: name.clone(),
                    hook: hook.name.clone(),
                    source,
                })?;
        }
        self.bindings_started = true;
        let owner = owner_of(Some(&name));
        for hook in self.hooks.iter().flatten() {
            self.scheduler.add(crate::bindings::schedule_entries(
                &owner,
                &hook.name,
                &hook.config,
            ));
        }
        for hook in &hooks {
            let href = self.hook_ref(&hook.name);
            for (i, b) in hook.config.kubernetes.iter().enumerate() {
                if !b.execute_hook_on_synchronization {
                    self.ports.bindings.release(&href, i);
                } else if b.queue == "main" || b.wait_for_synchronization {
                    let stub = crate::bindings::sync_stub(&hook.config, i);
                    if let Err(e) = self
                        .run_hook(hook, vec![stub], docs, queue, b.allow_failure)
                        .await
                    {
                        if !b.allow_failure {
                            self.ports.bindings.stop_owner(&href.owner);
                            self.scheduler.remove_owner(&href.owner);
                            self.bindings_started = false;
                            return Err(ModuleError::Synchronization {
                                module: name,
                                binding: b.name.clone(),
                                hook: hook.name.clone(),
                                source: e,
                            });
                        }
                        tracing::warn!(module = %name, hook = %hook.name, "Synchronization failed, allowed by allowFailure: {e}");
                        self.ports.bindings.release(&href, i);
                    }
                } else {
                    let task = crate::bindings::sync_task(
                        self.ids.next(),
                        Some(&name),
                        &hook.name,
                        &hook.config,
                        i,
                    );
                    self.router.enqueue(&b.queue, vec![task]);
                }
            }
        }
        Ok(())
    }

    /// A `ModuleHookRun` task: a kubernetes, schedule or Synchronization run of one hook.
    /// Changed module values run the module again.
    async fn hook_run(&mut self, task: &QueuedTask, docs: &GlobalDocs) -> TaskOutcome {
        if let Err(e) = self.load_hooks().await {
            return TaskOutcome::Fail(e.to_string());
        }
        let name = task.spec.kind.hook().unwrap_or_default().to_string();
        let Some(hook) = self
            .hooks
            .iter()
            .flatten()
            .find(|h| h.name == name)
            .cloned()
        else {
            return TaskOutcome::Fail(format!(
                "module {}: hook {name:?} is not loaded",
                self.def.name
            ));
        };
        if let Some(l) = &hook.limiter {
            l.wait().await;
        }
        let allow_failure = task.spec.kind.hook_run().is_some_and(|r| r.allow_failure);
        let stubs = crate::queue::compact_groups(task.spec.kind.contexts().to_vec());
        let key = self.def.key();
        let before = checksum(&self.values_document(docs)[&key]);
        match self
            .run_hook(&hook, stubs.clone(), docs, &task.spec.queue, allow_failure)
            .await
        {
            Ok(()) => {}
            Err(e) if allow_failure => {
                tracing::warn!(module = %self.def.name, hook = %name, "hook failed, allowed by allowFailure: {e}");
                let href = self.hook_ref(&name);
                for i in crate::bindings::synchronized(&stubs) {
                    self.ports.bindings.release(&href, i);
                }
                return TaskOutcome::done();
            }
            Err(source) => {
                let e = ModuleError::Hook {
                    module: self.def.name.clone(),
                    source,
                };
                return TaskOutcome::Fail(e.to_string());
            }
        }
        if checksum(&self.values_document(docs)[&key]) == before {
            return TaskOutcome::done();
        }
        let run = module_run_task(
            self.ids.next(),
            &self.def.name,
            false,
            "ModuleValuesChanged",
            false,
        );
        self.router.enqueue("main", vec![run]);
        TaskOutcome::done()
    }

    /// Deletes the module: beforeDeleteHelm, the uninstall, afterDeleteHelm. Its
    /// kubernetes bindings and schedules stop only after afterDeleteHelm, so the delete
    /// hooks see their snapshots (as addon-operator's code does; a failure leaves them
    /// running for the retry).
    async fn module_delete(&mut self, task: &QueuedTask, docs: &GlobalDocs) -> TaskOutcome {
        self.stop_monitor();
        let queue = task.spec.queue.clone();
        let name = self.def.name.clone();
        let steps = async {
            self.load_hooks().await?;
            self.run_binding("beforeDeleteHelm", |c| c.before_delete_helm, docs, &queue)
                .await?;
            if self.def.chart.is_some() {
                let started = Instant::now();
                let existed = self.ports.releases.uninstall(name.clone()).await;
                HelmOperation::Uninstall.record(&name, &self.activation, started.elapsed());
                let existed = existed.map_err(|source| ModuleError::Uninstall {
                    module: name.clone(),
                    source,
                })?;
                if existed {
                    self.journal(vec![Event::ReleaseDeleted {
                        module: name.clone(),
                    }])
                    .await?;
                }
            }
            self.run_binding("afterDeleteHelm", |c| c.after_delete_helm, docs, &queue)
                .await?;
            let owner = owner_of(Some(&self.def.name));
            self.ports.bindings.stop_owner(&owner);
            self.scheduler.remove_owner(&owner);
            self.bindings_started = false;
            self.phase(ModulePhase::Disabled, task.spec.id).await
        };
        match steps.await {
            Ok(()) => TaskOutcome::done(),
            Err(e) => {
                metrics::counter!(telemetry::MODULE_DELETE_ERRORS_TOTAL, "module" => name)
                    .increment(1);
                TaskOutcome::Fail(e.to_string())
            }
        }
    }

    async fn enabled(&self, docs: &GlobalDocs, before: Vec<String>) -> Result<bool, ModuleError> {
        let Some(script) = self.def.enabled_script.clone() else {
            return Ok(true);
        };
        let values = with_enabled_modules(self.values_document(docs), &before);
        self.ports
            .executor
            .enabled(EnabledRun {
                module: self.def.name.clone(),
                path: script,
                values,
                config_values: self.config_document(docs),
            })
            .await
            .map_err(|source| {
                telemetry::module_discover_error();
                ModuleError::EnabledScript {
                    module: self.def.name.clone(),
                    source,
                }
            })
    }
}

/// Up to a quarter of `interval` (at most 59 s), so that modules do not all look at once.
fn rand_jitter(interval: Duration) -> Duration {
    bosun_runtime::clock::jitter_up_to((interval / 4).min(Duration::from_secs(59)))
}

impl Actor for ModuleActor {
    type Msg = Envelope<ModuleMsg>;
    type State = ModuleState;
    type Arguments = ModuleArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ModuleArgs,
    ) -> Result<ModuleState, ActorProcessingErr> {
        Ok(ModuleState {
            me: Some(Tracked::new(myself, args.mailbox.clone())),
            def: args.def,
            journaled: args.restored,
            ports: args.ports,
            router: args.router,
            ids: args.ids,
            monitor_interval: args.monitor_interval,
            mailbox: args.mailbox,
            hooks: None,
            monitor: None,
            busy: Arc::new(AtomicBool::new(false)),
            heal_pending: false,
            settled_drift: Vec::new(),
            scheduler: args.scheduler,
            monitored: args.monitored,
            limits: args.limits,
            bindings_started: false,
            hook_metrics: args.hook_metrics,
            activation: String::new(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        st: &mut ModuleState,
    ) -> Result<(), ActorProcessingErr> {
        st.stop_monitor();
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        envelope: Self::Msg,
        st: &mut ModuleState,
    ) -> Result<(), ActorProcessingErr> {
        st.mailbox.begin(envelope.seq);
        match envelope.msg {
            ModuleMsg::Run(task, docs, reply) => {
                st.busy.store(true, Ordering::SeqCst);
                st.activation = telemetry::activation_of(&task);
                let outcome = match &task.spec.kind {
                    AddonTask::ModuleRun { .. } => {
                        let started = std::time::Instant::now();
                        let outcome = st.module_run(&task, &docs).await;
                        metrics::histogram!(
                            telemetry::MODULE_RUN_SECONDS,
                            "module" => st.def.name.clone(),
                            "activation" => st.activation.clone()
                        )
                        .record(started.elapsed().as_secs_f64());
                        outcome
                    }
                    AddonTask::ModuleDelete { .. } => st.module_delete(&task, &docs).await,
                    AddonTask::ModuleHookRun { .. } => st.hook_run(&task, &docs).await,
                    AddonTask::ModuleEnsureCRDs { .. } => {
                        match st.ports.releases.apply(st.def.crds.clone()).await {
                            Ok(()) => TaskOutcome::done(),
                            Err(e) => TaskOutcome::Fail(format!(
                                "module {}: cannot apply CRDs: {e}",
                                st.name()
                            )),
                        }
                    }
                    other => TaskOutcome::Fail(format!(
                        "module {}: {} tasks are not run by module actors",
                        st.name(),
                        other.task_type().as_str()
                    )),
                };
                st.busy.store(false, Ordering::SeqCst);
                let _ = reply.send(outcome);
            }
            ModuleMsg::Enabled(docs, before, reply) => {
                let _ = reply.send(st.enabled(&docs, before).await);
            }
            ModuleMsg::ConfigChanged(config, reply) => {
                let result = if st.config() == config {
                    Ok(false)
                } else if let Err(e) = st
                    .def
                    .schemas
                    .validate_config(&st.def.static_values, &config)
                {
                    telemetry::config_values_error();
                    Err(ModuleError::Section {
                        key: st.def.key(),
                        source: e,
                    })
                } else {
                    let scope = Scope::Module(st.def.name.clone());
                    st.journal(vec![Event::ValuesSet {
                        scope,
                        layer: ValuesLayer::Config,
                        values: config,
                        source: "configmap".into(),
                    }])
                    .await
                    .map(|()| true)
                };
                let _ = reply.send(result);
            }
            ModuleMsg::Values(docs, reply) => {
                let _ = reply.send(st.values_document(&docs));
            }
            ModuleMsg::Config(docs, reply) => {
                let _ = reply.send(st.config_document(&docs));
            }
            ModuleMsg::Render(docs, reply) => {
                let _ = reply.send(st.render(&docs).await);
            }
            ModuleMsg::Unhealthy(why) => {
                if !st.heal_pending {
                    st.heal_pending = true;
                    tracing::warn!(module = %st.name(), "release needs repair: {why}");
                    let reason = why.split(':').next().unwrap_or("AutoHeal").to_string();
                    let task = module_run_task(st.ids.next(), &st.def.name, false, &reason, false);
                    st.router.enqueue("main", vec![task]);
                }
            }
        }
        st.mailbox.end();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(name: &str) -> ModuleDef {
        ModuleDef {
            name: name.into(),
            ..ModuleDef::default()
        }
    }

    #[test]
    fn later_flags_override_earlier_ones() {
        assert_eq!(flag_chain(None, None, None), (false, EnabledBy::Default));
        assert_eq!(
            flag_chain(Some(true), None, None),
            (true, EnabledBy::Static)
        );
        assert_eq!(
            flag_chain(Some(false), None, Some(true)),
            (true, EnabledBy::ConfigMap)
        );
        assert_eq!(
            flag_chain(Some(true), Some(false), None),
            (false, EnabledBy::Dynamic)
        );
    }

    #[test]
    fn config_map_sections_flags_and_errors() {
        let mods = [module("some-module")];
        let data: BTreeMap<String, String> = [
            ("global", "param1: 200\n"),
            ("someModule", "param1: x\n"),
            ("someModuleEnabled", "true"),
            ("someModuleMaintenance", "NoResourceReconciliation"),
            ("otherModuleEnabled", "false"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (sections, warnings) = parse_config_map(&data, &mods, "addon-operator").unwrap();
        assert_eq!(sections.global, json!({"param1": 200}));
        assert_eq!(sections.modules["some-module"], json!({"param1": "x"}));
        assert!(sections.flags["some-module"]);
        assert!(!sections.flags["other-module"]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("other-module"));

        // The seed's form: a module section of "false" (or "true") is its enabled flag; an
        // explicit `<key>Enabled` wins.
        let seed: BTreeMap<String, String> = [
            ("someModule".into(), "false".into()),
            ("otherModule".into(), "\"false\"".into()),
        ]
        .into();
        let (sections, _) = parse_config_map(&seed, &mods, "cm").unwrap();
        assert_eq!(sections.flags.get("some-module"), Some(&false));
        assert_eq!(sections.flags.get("other-module"), Some(&false));
        assert!(
            sections.modules.is_empty(),
            "no values section: {sections:?}"
        );
        let both: BTreeMap<String, String> = [
            ("someModule".into(), "false".into()),
            ("someModuleEnabled".into(), "true".into()),
        ]
        .into();
        let (sections, _) = parse_config_map(&both, &mods, "cm").unwrap();
        assert_eq!(sections.flags.get("some-module"), Some(&true));

        let bad: BTreeMap<String, String> = [("someModuleEnabled".into(), "yes".into())].into();
        let err = parse_config_map(&bad, &mods, "cm").unwrap_err().to_string();
        assert!(
            err.contains("someModuleEnabled") && err.contains("\"true\" or \"false\""),
            "{err}"
        );
        let bad: BTreeMap<String, String> = [("global".into(), "a: [".into())].into();
        let err = parse_config_map(&bad, &mods, "cm").unwrap_err().to_string();
        assert!(err.contains("\"global\" is not valid YAML"), "{err}");
        let bad: BTreeMap<String, String> = [("Some_Thing".into(), "{}".into())].into();
        assert!(parse_config_map(&bad, &mods, "cm").is_err());
        for (key, text, what) in [
            ("global", "42", "the scalar 42"),
            ("global", "just text", "the scalar \"just text\""),
            ("global", "false", "the scalar false"),
            ("someModule", "- a\n- b", "a list"),
            ("someModule", "42", "the scalar 42"),
        ] {
            let bad: BTreeMap<String, String> = [(key.into(), text.into())].into();
            let err = parse_config_map(&bad, &mods, "cm").unwrap_err().to_string();
            assert!(
                err.contains(&format!("{key:?} must be a YAML mapping")) && err.contains(what),
                "{err}"
            );
        }
    }
}
