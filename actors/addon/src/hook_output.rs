//! What a hook wrote, turned into effects: one pipeline for global and module hooks.
//!
//! ```text
//!   HookResult ──parse (pure)──► patches, metric operations, object patches
//!        │                          │ any syntax or scope error rejects the whole output
//!        ├──► METRICS_PATH operations ──► HookMetrics
//!        ├──► KUBERNETES_PATCH_PATH   ──► ObjectPatcher
//!        └──plan_values (pure)──► ValuesPatched events (+ the new config values)
//!                                   ──► ConfigMap section ──► journal (durable)
//!   a global hook's config patch of /<module>Enabled ──► the ConfigMap's <module>Enabled
//!   key (the ConfigMap watch then journals the flags and converges, as for a user's edit)
//! ```
//!
//! The order is the reference's: metrics, then object patches, then values patches.
//! Everything the values patches lead to is validated before any of it is journaled, so
//! a rejected output leaves the values as they were. The ConfigMap is written before the
//! journal, as the reference saves it before taking the values: a write that fails leaves
//! nothing journaled, and the retried run writes it again (journaled first, the retry's
//! patch would change nothing and the ConfigMap would never get the values).

use json_patch::PatchOperation;
use serde_json::{Value, json};

use crate::events::{Event, Scope, ValuesLayer};
use crate::hook_config::HookKind;
use crate::hook_metrics::{HookMetrics, MetricOp};
use crate::ports::{ConfigStore, EventSink, HookResult, ObjectPatcher, PortError};
use crate::schema::ValuesSchemas;
use crate::values::{PatchStreamError, apply_memory, check_scope, parse_patch_stream};

/// Whose output it is and which values it may patch.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    /// The hook's name.
    pub hook: &'a str,
    /// Its module; `None` for a global hook.
    pub module: Option<&'a str>,
}

impl Origin<'_> {
    fn scope(&self) -> Scope {
        match self.module {
            Some(m) => Scope::Module(m.to_string()),
            None => Scope::Global,
        }
    }

    fn kind(&self) -> HookKind {
        match self.module {
            Some(_) => HookKind::Module,
            None => HookKind::Global,
        }
    }
}

impl std::fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.module {
            Some(m) => write!(f, "module {m}: hook {:?}", self.hook),
            None => write!(f, "hook {:?}", self.hook),
        }
    }
}

/// Why a hook's output was not (wholly) taken.
#[derive(Debug, thiserror::Error)]
pub enum OutputProblem {
    /// A values patch file is not a valid patch stream, or patches another scope.
    #[error("{0}")]
    Patch(#[from] PatchStreamError),
    /// `METRICS_PATH` is invalid or its operations clash with registered metrics.
    #[error("METRICS_PATH {0}")]
    Metrics(crate::hook_metrics::MetricsError),
    /// An object patcher operation failed.
    #[error("KUBERNETES_PATCH_PATH: {0}")]
    ObjectPatch(PortError),
    /// A config values operation does not apply to the current config values.
    #[error("CONFIG_VALUES_JSON_PATCH_PATH operation {index} cannot be applied: {message}")]
    ConfigOperation {
        /// Index of the operation.
        index: usize,
        /// Why.
        message: String,
    },
    /// The patched config values break the config schema.
    #[error("config values patch rejected: {0}")]
    ConfigSchema(crate::schema::SchemaError),
    /// A config patch of `/<module>Enabled` that does not set a boolean or remove it.
    #[error("CONFIG_VALUES_JSON_PATCH_PATH operation on {path}: {message}")]
    EnabledFlag {
        /// The operation's path.
        path: String,
        /// What was expected.
        message: String,
    },
    /// A values operation does not apply to the current values.
    #[error("VALUES_JSON_PATCH_PATH operation {index} cannot be applied: {message}")]
    ValuesOperation {
        /// Index of the operation.
        index: usize,
        /// Why.
        message: String,
    },
    /// The patched values break the values schema.
    #[error("values patch rejected: {0}")]
    ValuesSchema(crate::schema::SchemaError),
    /// The journal refused the values change.
    #[error("cannot journal values change: {0}")]
    Journal(PortError),
    /// The new config values cannot be written as YAML.
    #[error("cannot write config values as YAML: {0}")]
    Yaml(String),
    /// The ConfigMap was not written (nothing was journaled).
    #[error("config values patch not taken: the ConfigMap write failed: {0}")]
    ConfigMap(PortError),
}

impl OutputProblem {
    /// A short label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            OutputProblem::Patch(_) | OutputProblem::EnabledFlag { .. } => "patch_syntax",
            OutputProblem::Metrics(_) => "metrics",
            OutputProblem::ObjectPatch(_) => "object_patch",
            OutputProblem::ConfigOperation { .. } | OutputProblem::ValuesOperation { .. } => {
                "patch_apply"
            }
            OutputProblem::ConfigSchema(_) | OutputProblem::ValuesSchema(_) => "schema",
            OutputProblem::Journal(_) => "journal",
            OutputProblem::Yaml(_) | OutputProblem::ConfigMap(_) => "configmap",
        }
    }
}

/// A hook's output that was refused, naming the hook (and module) and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {problem}")]
pub struct OutputError {
    /// `hook "x"` or `module m: hook "x"`.
    pub origin: String,
    /// What was wrong (nothing of the output was journaled).
    pub problem: OutputProblem,
}

/// Everything a hook wrote, parsed and checked against its scope.
#[derive(Debug, Default)]
pub struct ParsedOutput {
    /// `CONFIG_VALUES_JSON_PATCH_PATH` operations.
    pub config_ops: Vec<PatchOperation>,
    /// `VALUES_JSON_PATCH_PATH` operations.
    pub memory_ops: Vec<PatchOperation>,
    /// `METRICS_PATH` operations.
    pub metrics: Vec<MetricOp>,
    /// `KUBERNETES_PATCH_PATH`, when the hook wrote anything there.
    pub kubernetes_patch: Option<String>,
    /// A global hook's config patches of `/<module>Enabled`.
    pub enabled_flags: Vec<EnabledFlag>,
}

/// A ConfigMap `<module>Enabled` key and its new value (`None`: remove the key).
pub(crate) type EnabledFlag = (String, Option<bool>);

/// Takes a global hook's `/<module>Enabled` operations out of its config patch: they are
/// ConfigMap keys of their own, not global config values.
fn split_enabled_flags(
    ops: Vec<PatchOperation>,
) -> Result<(Vec<PatchOperation>, Vec<EnabledFlag>), OutputProblem> {
    let mut rest = Vec::new();
    let mut flags = Vec::new();
    for op in ops {
        let path = match &op {
            PatchOperation::Add(o) => o.path.to_string(),
            PatchOperation::Remove(o) => o.path.to_string(),
            _ => {
                rest.push(op);
                continue;
            }
        };
        let key = path.trim_start_matches('/');
        if key.contains('/') || !key.ends_with("Enabled") {
            rest.push(op);
            continue;
        }
        let value = match &op {
            PatchOperation::Add(o) => match o.value.as_bool() {
                Some(b) => Some(b),
                None => {
                    return Err(OutputProblem::EnabledFlag {
                        path,
                        message: format!("expected true or false, got {}", o.value),
                    });
                }
            },
            _ => None,
        };
        flags.push((key.to_string(), value));
    }
    Ok((rest, flags))
}

/// Parses every output file; the first error rejects the whole output.
pub fn parse(origin: Origin<'_>, out: &HookResult) -> Result<ParsedOutput, OutputProblem> {
    const CONFIG: &str = "CONFIG_VALUES_JSON_PATCH_PATH";
    const VALUES: &str = "VALUES_JSON_PATCH_PATH";
    let config_ops = parse_patch_stream(CONFIG, &out.config_values_patch)?;
    let memory_ops = parse_patch_stream(VALUES, &out.values_patch)?;
    let key = origin.module.map(crate::values::values_key);
    check_scope(CONFIG, &config_ops, origin.kind(), key.as_deref())?;
    let (config_ops, enabled_flags) = match origin.module {
        None => split_enabled_flags(config_ops)?,
        Some(_) => (config_ops, Vec::new()),
    };
    check_scope(VALUES, &memory_ops, origin.kind(), key.as_deref())?;
    let metrics = crate::hook_metrics::parse(&out.metrics).map_err(OutputProblem::Metrics)?;
    let kubernetes_patch =
        (!out.kubernetes_patch.trim().is_empty()).then(|| out.kubernetes_patch.clone());
    Ok(ParsedOutput {
        config_ops,
        memory_ops,
        metrics,
        kubernetes_patch,
        enabled_flags,
    })
}

/// The scope's values as the output's patches meet them.
pub struct ScopeValues<'a> {
    /// The current config values of the scope (`{}` when none).
    pub config: Value,
    /// The scope's memory patches so far (compacted, as the journal's state keeps them).
    pub memory: &'a [PatchOperation],
    /// Static values (config validation layers them under the config values).
    pub static_values: &'a Value,
    /// The scope's schemas.
    pub schemas: &'a ValuesSchemas,
    /// The hook's values document (`{"global": …, "<key>": …}`) with the given config
    /// values in place of the current ones.
    pub values_with: &'a (dyn Fn(&Value) -> Value + Sync),
}

/// The values events an output leads to.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ValuesPlan {
    /// `ValuesPatched` events, config first.
    pub events: Vec<Event>,
    /// The new config values, when they changed (for the ConfigMap).
    pub new_config: Option<Value>,
}

/// Applies the patches to a copy of the values and validates the result; nothing is
/// changed. The events are what to journal.
pub(crate) fn plan_values(
    origin: Origin<'_>,
    config_ops: Vec<PatchOperation>,
    memory_ops: Vec<PatchOperation>,
    scope: &ScopeValues<'_>,
) -> Result<ValuesPlan, OutputProblem> {
    let key = match origin.module {
        Some(m) => crate::values::values_key(m),
        None => "global".to_string(),
    };
    let mut new_config = scope.config.clone();
    if !config_ops.is_empty() {
        let mut doc = json!({ key.clone(): new_config });
        apply_memory(&mut doc, &config_ops)
            .map_err(|(index, message)| OutputProblem::ConfigOperation { index, message })?;
        new_config = doc[&key].clone();
        scope
            .schemas
            .validate_config(scope.static_values, &new_config)
            .map_err(OutputProblem::ConfigSchema)?;
    }
    let mut candidate = (scope.values_with)(&new_config);
    apply_memory(&mut candidate, &memory_ops)
        .map_err(|(index, message)| OutputProblem::ValuesOperation { index, message })?;
    if !config_ops.is_empty() || !memory_ops.is_empty() {
        scope
            .schemas
            .validate_values(&candidate[&key])
            .map_err(OutputProblem::ValuesSchema)?;
    }
    let mut plan = ValuesPlan::default();
    let source = origin.hook.to_string();
    // Patches that change nothing are not journaled: a hook that writes the same (maybe
    // large) patch on every run would otherwise grow the journal by it every time.
    let config_ops = if new_config == scope.config {
        Vec::new()
    } else {
        config_ops
    };
    let memory_ops = {
        let mut after = scope.memory.to_vec();
        crate::values::compact_into(&mut after, &memory_ops);
        if after.as_slice() == scope.memory {
            Vec::new()
        } else {
            memory_ops
        }
    };
    if !config_ops.is_empty() {
        plan.events.push(Event::ValuesPatched {
            scope: origin.scope(),
            layer: ValuesLayer::Config,
            patch: json_patch::Patch(config_ops),
            source: source.clone(),
        });
        plan.new_config = Some(new_config);
    }
    if !memory_ops.is_empty() {
        plan.events.push(Event::ValuesPatched {
            scope: origin.scope(),
            layer: ValuesLayer::Memory,
            patch: json_patch::Patch(memory_ops),
            source,
        });
    }
    Ok(plan)
}

/// Where an output's effects go.
pub struct Effects<'a> {
    /// The journal.
    pub journal: &'a dyn EventSink<Event>,
    /// `KUBERNETES_PATCH_PATH` operations.
    pub patcher: &'a dyn ObjectPatcher,
    /// The ConfigMap, for config values.
    pub config_store: &'a dyn ConfigStore,
    /// `METRICS_PATH` operations.
    pub hook_metrics: &'a HookMetrics,
}

/// The whole pipeline: parse, metrics, object patches, values (validated, journaled, the
/// config section written back). Returns the journaled events, for the caller to fold.
pub async fn apply(
    origin: Origin<'_>,
    out: &HookResult,
    scope: &ScopeValues<'_>,
    effects: &Effects<'_>,
) -> Result<Vec<Event>, OutputError> {
    let err = |problem: OutputProblem| OutputError {
        origin: origin.to_string(),
        problem,
    };
    let parsed = parse(origin, out).map_err(err)?;
    effects
        .hook_metrics
        .apply(origin.hook, origin.module, &parsed.metrics)
        .map_err(|e| err(OutputProblem::Metrics(e)))?;
    if let Some(text) = parsed.kubernetes_patch {
        effects
            .patcher
            .apply(origin.hook.to_string(), text)
            .await
            .map_err(|e| err(OutputProblem::ObjectPatch(e)))?;
    }
    let plan = plan_values(origin, parsed.config_ops, parsed.memory_ops, scope).map_err(err)?;
    for (key, value) in parsed.enabled_flags {
        let written = match value {
            Some(on) => effects.config_store.save(key, on.to_string()).await,
            None => effects.config_store.remove(key).await,
        };
        written.map_err(|e| err(OutputProblem::ConfigMap(e)))?;
    }
    if plan.events.is_empty() {
        return Ok(plan.events);
    }
    if let Some(config) = &plan.new_config {
        let key = match origin.module {
            Some(m) => crate::values::values_key(m),
            None => "global".to_string(),
        };
        let yaml =
            serde_saphyr::to_string(config).map_err(|e| err(OutputProblem::Yaml(e.to_string())))?;
        effects
            .config_store
            .save(key, yaml)
            .await
            .map_err(|e| err(OutputProblem::ConfigMap(e)))?;
    }
    effects
        .journal
        .append(plan.events.clone())
        .await
        .map_err(|e| err(OutputProblem::Journal(e)))?;
    Ok(plan.events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(values_patch: &str, config_patch: &str) -> HookResult {
        HookResult {
            values_patch: values_patch.into(),
            config_values_patch: config_patch.into(),
            ..HookResult::default()
        }
    }

    fn scope_values<'a>(
        schemas: &'a ValuesSchemas,
        static_values: &'a Value,
        values_with: &'a (dyn Fn(&Value) -> Value + Sync),
    ) -> ScopeValues<'a> {
        ScopeValues {
            config: json!({"replicas": 1}),
            memory: &[],
            static_values,
            schemas,
            values_with,
        }
    }

    const MODULE: Origin<'static> = Origin {
        hook: "hooks/a.sh",
        module: Some("my-module"),
    };

    #[test]
    fn a_module_hook_patches_its_own_values_config_first() {
        let out = output(
            r#"{"op": "add", "path": "/myModule/seen", "value": true}"#,
            r#"[{"op": "add", "path": "/myModule/replicas", "value": 2}]"#,
        );
        let parsed = parse(MODULE, &out).expect("valid output");
        let schemas = ValuesSchemas::default();
        let statics = json!({});
        let with = |c: &Value| json!({"global": {}, "myModule": c});
        let plan = plan_values(
            MODULE,
            parsed.config_ops,
            parsed.memory_ops,
            &scope_values(&schemas, &statics, &with),
        )
        .expect("the patches apply");
        assert_eq!(plan.new_config, Some(json!({"replicas": 2})));
        let layers: Vec<ValuesLayer> = plan
            .events
            .iter()
            .filter_map(|e| match e {
                Event::ValuesPatched {
                    layer,
                    scope,
                    source,
                    ..
                } => {
                    assert_eq!(scope, &Scope::Module("my-module".into()));
                    assert_eq!(source, "hooks/a.sh");
                    Some(*layer)
                }
                _ => None,
            })
            .collect();
        assert_eq!(layers, [ValuesLayer::Config, ValuesLayer::Memory]);
    }

    #[test]
    fn rejections_name_the_hook_the_file_and_the_operation() {
        // Another module's values: refused before anything is parsed further.
        let out = output(r#"{"op": "add", "path": "/otherModule/x", "value": 1}"#, "");
        let problem = parse(MODULE, &out).expect_err("out of scope");
        assert_eq!(problem.metric_label(), "patch_syntax");
        assert!(
            problem.to_string().contains("VALUES_JSON_PATCH_PATH"),
            "{problem}"
        );
        // An operation that does not apply names its index.
        let schemas = ValuesSchemas::default();
        let statics = json!({});
        let with = |c: &Value| json!({"global": {}, "myModule": c});
        let ops = parse(
            MODULE,
            &output(
                "",
                r#"{"op": "add", "path": "/myModule/replicas/deeper", "value": 1}"#,
            ),
        )
        .expect("valid syntax")
        .config_ops;
        let problem = plan_values(
            MODULE,
            ops,
            Vec::new(),
            &scope_values(&schemas, &statics, &with),
        )
        .expect_err("a scalar has no children");
        let error = OutputError {
            origin: MODULE.to_string(),
            problem,
        };
        assert!(
            error
                .to_string()
                .starts_with(r#"module my-module: hook "hooks/a.sh": CONFIG_VALUES_JSON_PATCH_PATH operation 0 cannot be applied"#),
            "{error}"
        );
        let global = Origin {
            hook: "001.sh",
            module: None,
        };
        assert_eq!(global.to_string(), r#"hook "001.sh""#);
    }

    #[test]
    fn patches_that_change_nothing_are_not_journaled_again() {
        let schemas = ValuesSchemas::default();
        let statics = json!({});
        let with = |c: &Value| json!({"global": {}, "myModule": c});
        let out = output(
            r#"{"op": "add", "path": "/myModule/big", "value": "x"}"#,
            r#"{"op": "add", "path": "/myModule/replicas", "value": 1}"#,
        );
        let plan = |memory: &[PatchOperation]| {
            let parsed = parse(MODULE, &out).expect("valid output");
            let scope = ScopeValues {
                memory,
                ..scope_values(&schemas, &statics, &with)
            };
            plan_values(MODULE, parsed.config_ops, parsed.memory_ops, &scope).expect("applies")
        };
        let first = plan(&[]);
        assert_eq!(
            first.events.len(),
            1,
            "the memory patch is new; replicas is already 1"
        );
        assert_eq!(first.new_config, None);
        let Event::ValuesPatched { patch, .. } = &first.events[0] else {
            panic!("a values patch: {:?}", first.events);
        };
        assert_eq!(
            plan(&patch.0),
            ValuesPlan::default(),
            "the same patch again: nothing"
        );
    }

    #[test]
    fn a_global_hooks_enabled_flags_become_config_map_keys_not_global_values() {
        let global = Origin {
            hook: "001.sh",
            module: None,
        };
        let out = output(
            "",
            r#"[{"op": "add", "path": "/optionalEnabled", "value": false},
                {"op": "remove", "path": "/auditEnabled"},
                {"op": "add", "path": "/global/greeting", "value": "hi"}]"#,
        );
        let parsed = parse(global, &out).expect("valid output");
        assert_eq!(
            parsed.enabled_flags,
            [
                ("optionalEnabled".to_string(), Some(false)),
                ("auditEnabled".to_string(), None)
            ]
        );
        assert_eq!(
            parsed.config_ops.len(),
            1,
            "only /global/greeting is a global value"
        );
        let bad = output(
            "",
            r#"{"op": "add", "path": "/optionalEnabled", "value": "no"}"#,
        );
        let problem = parse(global, &bad).expect_err("not a boolean");
        assert!(
            problem
                .to_string()
                .contains("/optionalEnabled: expected true or false"),
            "{problem}"
        );
    }

    #[test]
    fn empty_output_plans_nothing() {
        let parsed = parse(MODULE, &HookResult::default()).expect("empty is valid");
        assert!(parsed.kubernetes_patch.is_none() && parsed.metrics.is_empty());
        let schemas = ValuesSchemas::default();
        let statics = json!({});
        let with = |c: &Value| json!({"global": {}, "myModule": c});
        let plan = plan_values(
            MODULE,
            parsed.config_ops,
            parsed.memory_ops,
            &scope_values(&schemas, &statics, &with),
        )
        .expect("nothing to apply");
        assert_eq!(plan, ValuesPlan::default());
    }
}
