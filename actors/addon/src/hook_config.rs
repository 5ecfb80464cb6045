//! Hook configuration (`hook --config`), configVersion v1 and legacy v0, validated as
//! strictly as shell-operator's schema: unknown keys, wrong types and broken references are
//! errors that name the hook, the field and what was expected.

use std::time::Duration;

use serde_json::{Map, Value};

use bosun_runtime::clock::parse_go_duration;

use crate::schedule::Crontab;

/// Whether a hook is global or belongs to a module: they accept different bindings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// A global hook (`beforeAll`, `afterAll`).
    Global,
    /// A module hook (`beforeHelm`, `afterHelm`, `beforeDeleteHelm`, `afterDeleteHelm`).
    Module,
}

/// A configuration that was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("hook {hook:?}: config{}: {message}", if field.is_empty() { String::new() } else { format!(" field {field:?}") })]
pub struct HookConfigError {
    /// The hook's name.
    pub hook: String,
    /// The offending field, e.g. `kubernetes[0].kind`; empty for the whole document.
    pub field: String,
    /// What was expected.
    pub message: String,
}

/// Events a kubernetes binding reacts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WatchEvent {
    /// Object added (or entered the selection).
    Added,
    /// Object changed.
    Modified,
    /// Object deleted (or left the selection).
    Deleted,
}

impl WatchEvent {
    /// The name a binding context's `watchEvent` gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEvent::Added => "Added",
            WatchEvent::Modified => "Modified",
            WatchEvent::Deleted => "Deleted",
        }
    }

    /// The event of that name (`Added`, `Modified`, `Deleted`).
    pub fn named(name: &str) -> Option<WatchEvent> {
        [WatchEvent::Added, WatchEvent::Modified, WatchEvent::Deleted]
            .into_iter()
            .find(|e| e.as_str() == name)
    }
}

/// A `schedule` binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleBinding {
    /// Binding name (default `schedule`).
    pub name: String,
    /// The crontab.
    pub crontab: Crontab,
    /// Failures count as success.
    pub allow_failure: bool,
    /// Queue (default `main`).
    pub queue: String,
    /// Snapshots of these kubernetes bindings are included.
    pub include_snapshots_from: Vec<String>,
    /// Group name.
    pub group: Option<String>,
}

/// One `matchExpressions` item of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// Field path, e.g. `metadata.name`.
    pub field: String,
    /// Equality (`=`, `==`, `Equals`) or inequality.
    pub equal: bool,
    /// Value.
    pub value: String,
}

/// Namespaces a kubernetes binding watches.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NamespaceSelector {
    /// Fixed namespace names.
    pub match_names: Vec<String>,
    /// Namespaces selected by labels (`metav1.LabelSelector`).
    pub label_selector: Option<Value>,
}

/// A `kubernetes` binding.
#[derive(Clone, Debug, PartialEq)]
pub struct KubernetesBinding {
    /// Binding name (default `kubernetes`).
    pub name: String,
    /// `apiVersion`, if given.
    pub api_version: Option<String>,
    /// Kind, plural or short name.
    pub kind: String,
    /// Events that run the hook; empty = snapshot only.
    pub execute_hook_on_event: Vec<WatchEvent>,
    /// Run on Synchronization.
    pub execute_hook_on_synchronization: bool,
    /// Startup waits for the Synchronization run.
    pub wait_for_synchronization: bool,
    /// Keep objects (false = only filter results).
    pub keep_full_objects_in_memory: bool,
    /// `nameSelector.matchNames`.
    pub name_selector: Vec<String>,
    /// `labelSelector` (`metav1.LabelSelector`).
    pub label_selector: Option<Value>,
    /// `fieldSelector.matchExpressions`.
    pub field_selector: Vec<FieldRequirement>,
    /// `namespace`; `None` = all namespaces.
    pub namespace: Option<NamespaceSelector>,
    /// jq filter.
    pub jq_filter: Option<String>,
    /// Snapshots of these bindings are included.
    pub include_snapshots_from: Vec<String>,
    /// Failures count as success.
    pub allow_failure: bool,
    /// Queue (default `main`).
    pub queue: String,
    /// Group name.
    pub group: Option<String>,
}

/// `settings`: the per-hook execution rate limit.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Settings {
    /// Minimum interval between runs.
    pub execution_min_interval: Option<Duration>,
    /// Burst (default 1).
    pub execution_burst: u32,
}

/// A hook's validated configuration.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HookConfig {
    /// `v0` (legacy) or `v1`.
    pub version: String,
    /// `onStartup` order.
    pub on_startup: Option<i64>,
    /// `beforeAll` order (global hooks).
    pub before_all: Option<i64>,
    /// `afterAll` order (global hooks).
    pub after_all: Option<i64>,
    /// `beforeHelm` order (module hooks).
    pub before_helm: Option<i64>,
    /// `afterHelm` order (module hooks).
    pub after_helm: Option<i64>,
    /// `beforeDeleteHelm` order (module hooks).
    pub before_delete_helm: Option<i64>,
    /// `afterDeleteHelm` order (module hooks).
    pub after_delete_helm: Option<i64>,
    /// `schedule` bindings.
    pub schedule: Vec<ScheduleBinding>,
    /// `kubernetes` bindings.
    pub kubernetes: Vec<KubernetesBinding>,
    /// `settings`.
    pub settings: Settings,
}

/// A `jqFilter` program the filter language refused, with its reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidFilter(pub String);

/// Checks every `jqFilter` of a configuration with `check` (the filter language lives
/// with the bindings); an error names the hook and the binding's field.
pub fn check_filters(
    config: &HookConfig,
    hook: &str,
    check: impl Fn(&str) -> Result<(), InvalidFilter>,
) -> Result<(), HookConfigError> {
    for (i, b) in config.kubernetes.iter().enumerate() {
        if let Some(p) = &b.jq_filter {
            check(p).map_err(|message| HookConfigError {
                hook: hook.to_string(),
                field: format!("kubernetes[{i}].jqFilter"),
                message: format!("binding {:?}: invalid jq program: {message}", b.name),
            })?;
        }
    }
    Ok(())
}

struct Ctx<'a> {
    hook: &'a str,
}

impl Ctx<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> HookConfigError {
        HookConfigError {
            hook: self.hook.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }

    fn object<'v>(
        &self,
        v: &'v Value,
        field: &str,
    ) -> Result<&'v Map<String, Value>, HookConfigError> {
        v.as_object()
            .ok_or_else(|| self.err(field, format!("expected an object, got {}", kind_of(v))))
    }

    fn only_keys(
        &self,
        m: &Map<String, Value>,
        field: &str,
        allowed: &[&str],
    ) -> Result<(), HookConfigError> {
        for k in m.keys() {
            if !allowed.contains(&k.as_str()) {
                let at = if field.is_empty() {
                    k.clone()
                } else {
                    format!("{field}.{k}")
                };
                return Err(self.err(
                    at,
                    format!("unknown field; expected one of: {}", allowed.join(", ")),
                ));
            }
        }
        Ok(())
    }

    fn string(
        &self,
        m: &Map<String, Value>,
        key: &str,
        field: &str,
    ) -> Result<Option<String>, HookConfigError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.err(
                join(field, key),
                format!("expected a string, got {}", kind_of(other)),
            )),
        }
    }

    fn boolean(
        &self,
        m: &Map<String, Value>,
        key: &str,
        field: &str,
        default: bool,
    ) -> Result<bool, HookConfigError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            // Go declares some of these as strings compared with "false".
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
            Some(other) => Err(self.err(
                join(field, key),
                format!("expected true or false, got {other}"),
            )),
        }
    }

    fn order(&self, m: &Map<String, Value>, key: &str) -> Result<Option<i64>, HookConfigError> {
        match m.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => match n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            {
                Some(i) => Ok(Some(i)),
                None => Err(self.err(key, format!("expected an integer order, got {n}"))),
            },
            Some(other) => Err(self.err(
                key,
                format!("expected an integer order, got {}", kind_of(other)),
            )),
        }
    }

    fn strings(
        &self,
        m: &Map<String, Value>,
        key: &str,
        field: &str,
        min: usize,
    ) -> Result<Option<Vec<String>>, HookConfigError> {
        let at = join(field, key);
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => {
                if items.len() < min {
                    return Err(self.err(at, format!("expected at least {min} item(s)")));
                }
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        v.as_str().map(String::from).ok_or_else(|| {
                            self.err(
                                format!("{at}[{i}]"),
                                format!("expected a string, got {}", kind_of(v)),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
            Some(other) => Err(self.err(
                at,
                format!("expected a list of strings, got {}", kind_of(other)),
            )),
        }
    }

    fn array<'v>(
        &self,
        m: &'v Map<String, Value>,
        key: &str,
    ) -> Result<Option<&'v Vec<Value>>, HookConfigError> {
        match m.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) if a.is_empty() => {
                Err(self.err(key, "expected at least 1 binding"))
            }
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(other) => Err(self.err(
                key,
                format!("expected a list of bindings, got {}", kind_of(other)),
            )),
        }
    }
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

const COMMON_KEYS: &[&str] = &[
    "configVersion",
    "onStartup",
    "schedule",
    "kubernetes",
    "settings",
];
const SHELL_ONLY_KEYS: &[&str] = &[
    "kubernetesValidating",
    "kubernetesMutating",
    "kubernetesCustomResourceConversion",
];
const GLOBAL_KEYS: &[&str] = &["beforeAll", "afterAll"];
const MODULE_KEYS: &[&str] = &[
    "beforeHelm",
    "afterHelm",
    "beforeDeleteHelm",
    "afterDeleteHelm",
];

/// Parses and validates the output of `hook --config` (YAML or JSON).
pub fn parse(text: &str, kind: HookKind, hook: &str) -> Result<HookConfig, HookConfigError> {
    let ctx = Ctx { hook };
    if text.trim().is_empty() {
        return Err(ctx.err(
            "",
            "--config printed nothing; expected a YAML or JSON configuration",
        ));
    }
    let doc: Value = serde_saphyr::from_str(text).map_err(|e| {
        ctx.err(
            "",
            format!("--config output is not valid YAML or JSON: {e}"),
        )
    })?;
    let root = ctx.object(&doc, "")?;
    match root.get("configVersion") {
        None => parse_v0(&ctx, root),
        Some(Value::String(v)) if v == "v1" => parse_v1(&ctx, root, kind),
        Some(other) => Err(ctx.err("configVersion", format!("unsupported value {other}: expected \"v1\" (or no configVersion for the legacy v0 format)"))),
    }
}

fn parse_v1(
    ctx: &Ctx,
    root: &Map<String, Value>,
    kind: HookKind,
) -> Result<HookConfig, HookConfigError> {
    let (own, other) = match kind {
        HookKind::Global => (GLOBAL_KEYS, MODULE_KEYS),
        HookKind::Module => (MODULE_KEYS, GLOBAL_KEYS),
    };
    for k in root.keys() {
        if other.contains(&k.as_str()) {
            let which = if kind == HookKind::Global {
                "global"
            } else {
                "module"
            };
            return Err(ctx.err(
                k.as_str(),
                format!(
                    "not allowed in a {which} hook; allowed bindings: {}",
                    [COMMON_KEYS, own].concat().join(", ")
                ),
            ));
        }
        if SHELL_ONLY_KEYS.contains(&k.as_str()) {
            return Err(ctx.err(
                k.as_str(),
                "admission and conversion webhooks are not supported for addon hooks",
            ));
        }
    }
    ctx.only_keys(root, "", &[COMMON_KEYS, own].concat())?;
    if root.len() < 2 {
        return Err(ctx.err(
            "",
            "configVersion v1 needs at least one binding (onStartup, schedule, kubernetes, …)",
        ));
    }
    let mut cfg = HookConfig {
        version: "v1".into(),
        ..HookConfig::default()
    };
    cfg.on_startup = ctx.order(root, "onStartup")?;
    cfg.before_all = ctx.order(root, "beforeAll")?;
    cfg.after_all = ctx.order(root, "afterAll")?;
    cfg.before_helm = ctx.order(root, "beforeHelm")?;
    cfg.after_helm = ctx.order(root, "afterHelm")?;
    cfg.before_delete_helm = ctx.order(root, "beforeDeleteHelm")?;
    cfg.after_delete_helm = ctx.order(root, "afterDeleteHelm")?;
    if let Some(items) = ctx.array(root, "kubernetes")? {
        for (i, item) in items.iter().enumerate() {
            cfg.kubernetes
                .push(kubernetes_binding(ctx, item, &format!("kubernetes[{i}]"))?);
        }
    }
    if let Some(items) = ctx.array(root, "schedule")? {
        for (i, item) in items.iter().enumerate() {
            cfg.schedule
                .push(schedule_binding(ctx, item, &format!("schedule[{i}]"))?);
        }
    }
    if let Some(s) = root.get("settings") {
        cfg.settings = settings(ctx, s)?;
    } else {
        cfg.settings.execution_burst = 1;
    }
    check_snapshot_references(ctx, &cfg)?;
    Ok(cfg)
}

fn settings(ctx: &Ctx, v: &Value) -> Result<Settings, HookConfigError> {
    let m = ctx.object(v, "settings")?;
    ctx.only_keys(
        m,
        "settings",
        &[
            "executionMinInterval",
            "executionMinPeriod",
            "executionBurst",
        ],
    )?;
    // addon-operator's documentation spells it executionMinPeriod; both are accepted.
    if m.contains_key("executionMinInterval") && m.contains_key("executionMinPeriod") {
        return Err(ctx.err(
            "settings.executionMinPeriod",
            "give executionMinInterval or its alias executionMinPeriod, not both",
        ));
    }
    let key = if m.contains_key("executionMinPeriod") {
        "executionMinPeriod"
    } else {
        "executionMinInterval"
    };
    let interval = match ctx.string(m, key, "settings")? {
        Some(s) => Some(
            parse_go_duration(&s).map_err(|e| ctx.err(format!("settings.{key}"), e.to_string()))?,
        ),
        None => None,
    };
    let burst = match m.get("executionBurst") {
        None => 1,
        Some(v) => v
            .as_u64()
            .filter(|b| *b >= 1)
            .and_then(|b| u32::try_from(b).ok())
            .ok_or_else(|| {
                ctx.err(
                    "settings.executionBurst",
                    format!("expected a positive integer, got {v}"),
                )
            })?,
    };
    Ok(Settings {
        execution_min_interval: interval,
        execution_burst: burst,
    })
}

fn schedule_binding(ctx: &Ctx, v: &Value, at: &str) -> Result<ScheduleBinding, HookConfigError> {
    let m = ctx.object(v, at)?;
    ctx.only_keys(
        m,
        at,
        &[
            "name",
            "crontab",
            "allowFailure",
            "queue",
            "includeSnapshotsFrom",
            "group",
        ],
    )?;
    let crontab = ctx
        .string(m, "crontab", at)?
        .ok_or_else(|| ctx.err(join(at, "crontab"), "required field is missing"))?;
    let crontab =
        Crontab::parse(&crontab).map_err(|e| ctx.err(join(at, "crontab"), e.to_string()))?;
    Ok(ScheduleBinding {
        name: ctx
            .string(m, "name", at)?
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "schedule".into()),
        crontab,
        allow_failure: ctx.boolean(m, "allowFailure", at, false)?,
        queue: ctx
            .string(m, "queue", at)?
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "main".into()),
        include_snapshots_from: ctx
            .strings(m, "includeSnapshotsFrom", at, 1)?
            .unwrap_or_default(),
        group: ctx.string(m, "group", at)?,
    })
}

fn label_selector(ctx: &Ctx, v: &Value, at: &str) -> Result<Value, HookConfigError> {
    let m = ctx.object(v, at)?;
    ctx.only_keys(m, at, &["matchLabels", "matchExpressions"])?;
    if m.is_empty() {
        return Err(ctx.err(at, "expected matchLabels and/or matchExpressions"));
    }
    if let Some(labels) = m.get("matchLabels") {
        let labels = ctx.object(labels, &join(at, "matchLabels"))?;
        for (k, v) in labels {
            if !v.is_string() {
                return Err(ctx.err(
                    format!("{at}.matchLabels.{k}"),
                    format!("expected a string, got {}", kind_of(v)),
                ));
            }
        }
    }
    if let Some(exprs) = m.get("matchExpressions") {
        let items = exprs
            .as_array()
            .ok_or_else(|| ctx.err(join(at, "matchExpressions"), "expected a list"))?;
        for (i, e) in items.iter().enumerate() {
            let f = format!("{at}.matchExpressions[{i}]");
            let em = ctx.object(e, &f)?;
            ctx.only_keys(em, &f, &["key", "operator", "values"])?;
            ctx.string(em, "key", &f)?
                .ok_or_else(|| ctx.err(join(&f, "key"), "required field is missing"))?;
            let op = ctx
                .string(em, "operator", &f)?
                .ok_or_else(|| ctx.err(join(&f, "operator"), "required field is missing"))?;
            let values = ctx.strings(em, "values", &f, 0)?.unwrap_or_default();
            match op.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(ctx.err(
                        join(&f, "values"),
                        format!("operator {op} needs at least one value"),
                    ));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(
                        ctx.err(join(&f, "values"), format!("operator {op} takes no values"))
                    );
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => {
                    return Err(ctx.err(
                        join(&f, "operator"),
                        format!(
                            "unknown operator {other:?}; expected In, NotIn, Exists or DoesNotExist"
                        ),
                    ));
                }
            }
        }
    }
    Ok(v.clone())
}

fn name_list(ctx: &Ctx, v: &Value, at: &str) -> Result<Vec<String>, HookConfigError> {
    let m = ctx.object(v, at)?;
    ctx.only_keys(m, at, &["matchNames"])?;
    ctx.strings(m, "matchNames", at, 0)?
        .ok_or_else(|| ctx.err(join(at, "matchNames"), "required field is missing"))
}

fn kubernetes_binding(
    ctx: &Ctx,
    v: &Value,
    at: &str,
) -> Result<KubernetesBinding, HookConfigError> {
    let m = ctx.object(v, at)?;
    ctx.only_keys(
        m,
        at,
        &[
            "name",
            "apiVersion",
            "kind",
            "executeHookOnEvent",
            "watchEvent",
            "executeHookOnSynchronization",
            "waitForSynchronization",
            "keepFullObjectsInMemory",
            "nameSelector",
            "labelSelector",
            "fieldSelector",
            "namespace",
            "jqFilter",
            "includeSnapshotsFrom",
            "allowFailure",
            "queue",
            "group",
            "resynchronizationPeriod",
        ],
    )?;
    let kind = ctx
        .string(m, "kind", at)?
        .filter(|k| !k.is_empty())
        .ok_or_else(|| ctx.err(join(at, "kind"), "required field is missing"))?;
    let api_version = ctx.string(m, "apiVersion", at)?;
    if let Some(av) = &api_version {
        let valid = match av.split_once('/') {
            Some((g, v)) => !g.is_empty() && !v.is_empty() && !v.contains('/'),
            None => !av.is_empty(),
        };
        if !valid {
            return Err(ctx.err(
                join(at, "apiVersion"),
                format!("{av:?} is not a group/version such as v1 or apps/v1"),
            ));
        }
    }
    let events_key = if m.contains_key("executeHookOnEvent") {
        "executeHookOnEvent"
    } else {
        "watchEvent"
    };
    let execute_hook_on_event = match ctx.strings(m, events_key, at, 0)? {
        None => vec![WatchEvent::Added, WatchEvent::Modified, WatchEvent::Deleted],
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, e)| {
                WatchEvent::named(e).ok_or_else(|| {
                    ctx.err(
                        format!("{at}.{events_key}[{i}]"),
                        format!("unknown event {e:?}; expected Added, Modified or Deleted"),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let name_selector = match m.get("nameSelector") {
        Some(v) => name_list(ctx, v, &join(at, "nameSelector"))?,
        None => Vec::new(),
    };
    let mut field_selector = Vec::new();
    if let Some(fs) = m.get("fieldSelector") {
        let f = join(at, "fieldSelector");
        let fm = ctx.object(fs, &f)?;
        ctx.only_keys(fm, &f, &["matchExpressions"])?;
        let items = fm
            .get("matchExpressions")
            .and_then(Value::as_array)
            .ok_or_else(|| ctx.err(join(&f, "matchExpressions"), "required list is missing"))?;
        for (i, e) in items.iter().enumerate() {
            let ef = format!("{f}.matchExpressions[{i}]");
            let em = ctx.object(e, &ef)?;
            ctx.only_keys(em, &ef, &["field", "operator", "value"])?;
            let field = ctx
                .string(em, "field", &ef)?
                .ok_or_else(|| ctx.err(join(&ef, "field"), "required field is missing"))?;
            let op = ctx
                .string(em, "operator", &ef)?
                .ok_or_else(|| ctx.err(join(&ef, "operator"), "required field is missing"))?;
            let value = ctx
                .string(em, "value", &ef)?
                .ok_or_else(|| ctx.err(join(&ef, "value"), "required field is missing"))?;
            let equal =
                match op.as_str() {
                    "=" | "==" | "Equals" => true,
                    "!=" | "NotEquals" => false,
                    other => return Err(ctx.err(
                        join(&ef, "operator"),
                        format!(
                            "unknown operator {other:?}; expected =, ==, Equals, != or NotEquals"
                        ),
                    )),
                };
            field_selector.push(FieldRequirement {
                field,
                equal,
                value,
            });
        }
        if !name_selector.is_empty() && field_selector.iter().any(|r| r.field == "metadata.name") {
            return Err(ctx.err(
                f,
                "nameSelector and a fieldSelector on metadata.name cannot be used together",
            ));
        }
    }
    let namespace = match m.get("namespace") {
        None => None,
        Some(ns) => {
            let f = join(at, "namespace");
            let nm = ctx.object(ns, &f)?;
            ctx.only_keys(nm, &f, &["nameSelector", "labelSelector"])?;
            let match_names = match nm.get("nameSelector") {
                Some(v) => name_list(ctx, v, &join(&f, "nameSelector"))?,
                None => Vec::new(),
            };
            let label_selector = match nm.get("labelSelector") {
                Some(v) => Some(label_selector(ctx, v, &join(&f, "labelSelector"))?),
                None => None,
            };
            Some(NamespaceSelector {
                match_names,
                label_selector,
            })
        }
    };
    let label_sel = match m.get("labelSelector") {
        Some(v) => Some(label_selector(ctx, v, &join(at, "labelSelector"))?),
        None => None,
    };
    let queue = ctx.string(m, "queue", at)?.filter(|s| !s.is_empty());
    // waitForSynchronization: false only counts with an explicit queue (the reference).
    let wait = ctx.boolean(m, "waitForSynchronization", at, true)? || queue.is_none();
    if let Some(p) = ctx.string(m, "resynchronizationPeriod", at)? {
        parse_go_duration(&p)
            .map_err(|e| ctx.err(join(at, "resynchronizationPeriod"), e.to_string()))?;
    }
    Ok(KubernetesBinding {
        name: ctx
            .string(m, "name", at)?
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "kubernetes".into()),
        api_version,
        kind,
        execute_hook_on_event,
        execute_hook_on_synchronization: ctx.boolean(
            m,
            "executeHookOnSynchronization",
            at,
            true,
        )?,
        wait_for_synchronization: wait,
        keep_full_objects_in_memory: ctx.boolean(m, "keepFullObjectsInMemory", at, true)?,
        name_selector,
        label_selector: label_sel,
        field_selector,
        namespace,
        jq_filter: ctx
            .string(m, "jqFilter", at)?
            .filter(|s| !s.trim().is_empty()),
        include_snapshots_from: ctx
            .strings(m, "includeSnapshotsFrom", at, 1)?
            .unwrap_or_default(),
        allow_failure: ctx.boolean(m, "allowFailure", at, false)?,
        queue: queue.unwrap_or_else(|| "main".into()),
        group: ctx.string(m, "group", at)?.filter(|s| !s.is_empty()),
    })
}

fn check_snapshot_references(ctx: &Ctx, cfg: &HookConfig) -> Result<(), HookConfigError> {
    let names: Vec<&str> = cfg.kubernetes.iter().map(|b| b.name.as_str()).collect();
    let refs = cfg
        .kubernetes
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                format!("kubernetes[{i}].includeSnapshotsFrom"),
                &b.include_snapshots_from,
            )
        })
        .chain(cfg.schedule.iter().enumerate().map(|(i, b)| {
            (
                format!("schedule[{i}].includeSnapshotsFrom"),
                &b.include_snapshots_from,
            )
        }));
    for (field, list) in refs {
        for name in list {
            match names.iter().filter(|n| *n == name).count() {
                1 => {}
                0 => return Err(ctx.err(
                    field,
                    format!(
                        "{name:?} is not the name of a kubernetes binding of this hook (have: {})",
                        names.join(", ")
                    ),
                )),
                n => return Err(ctx.err(
                    field,
                    format!(
                        "there are {n} kubernetes bindings named {name:?}; give them distinct names"
                    ),
                )),
            }
        }
    }
    Ok(())
}

fn parse_v0(ctx: &Ctx, root: &Map<String, Value>) -> Result<HookConfig, HookConfigError> {
    ctx.only_keys(root, "", &["onStartup", "schedule", "onKubernetesEvent"])?;
    if root.is_empty() {
        return Err(ctx.err("", "the configuration has no bindings (set configVersion: v1 and add onStartup, schedule or kubernetes)"));
    }
    let mut cfg = HookConfig {
        version: "v0".into(),
        settings: Settings {
            execution_burst: 1,
            ..Settings::default()
        },
        ..HookConfig::default()
    };
    cfg.on_startup = ctx.order(root, "onStartup")?;
    if let Some(items) = ctx.array(root, "schedule")? {
        for (i, item) in items.iter().enumerate() {
            let at = format!("schedule[{i}]");
            let m = ctx.object(item, &at)?;
            ctx.only_keys(m, &at, &["name", "crontab", "allowFailure"])?;
            cfg.schedule.push(schedule_binding(ctx, item, &at)?);
        }
    }
    if let Some(items) = ctx.array(root, "onKubernetesEvent")? {
        for (i, item) in items.iter().enumerate() {
            let at = format!("onKubernetesEvent[{i}]");
            let m = ctx.object(item, &at)?;
            ctx.only_keys(
                m,
                &at,
                &[
                    "name",
                    "event",
                    "kind",
                    "selector",
                    "objectName",
                    "namespaceSelector",
                    "jqFilter",
                    "allowFailure",
                ],
            )?;
            let kind = ctx
                .string(m, "kind", &at)?
                .ok_or_else(|| ctx.err(join(&at, "kind"), "required field is missing"))?;
            let events = match ctx.strings(m, "event", &at, 0)? {
                None => vec![WatchEvent::Added, WatchEvent::Modified, WatchEvent::Deleted],
                Some(list) => list
                    .iter()
                    .map(|e| match e.as_str() {
                        "add" => Ok(WatchEvent::Added),
                        "update" => Ok(WatchEvent::Modified),
                        "delete" => Ok(WatchEvent::Deleted),
                        other => Err(ctx.err(
                            join(&at, "event"),
                            format!("unknown event {other:?}; expected add, update or delete"),
                        )),
                    })
                    .collect::<Result<_, _>>()?,
            };
            let namespace = match m.get("namespaceSelector") {
                None => None,
                Some(ns) => {
                    let nm = ctx.object(ns, &join(&at, "namespaceSelector"))?;
                    if nm.get("any") == Some(&Value::Bool(true)) {
                        None
                    } else {
                        Some(NamespaceSelector {
                            match_names: ctx
                                .strings(nm, "matchNames", &join(&at, "namespaceSelector"), 0)?
                                .unwrap_or_default(),
                            label_selector: None,
                        })
                    }
                }
            };
            cfg.kubernetes.push(KubernetesBinding {
                name: ctx
                    .string(m, "name", &at)?
                    .unwrap_or_else(|| "kubernetes".into()),
                api_version: None,
                kind,
                execute_hook_on_event: events,
                execute_hook_on_synchronization: false,
                wait_for_synchronization: false,
                keep_full_objects_in_memory: true,
                name_selector: ctx.string(m, "objectName", &at)?.into_iter().collect(),
                label_selector: match m.get("selector") {
                    Some(v) => Some(label_selector(ctx, v, &join(&at, "selector"))?),
                    None => None,
                },
                field_selector: Vec::new(),
                namespace,
                jq_filter: ctx.string(m, "jqFilter", &at)?,
                include_snapshots_from: Vec::new(),
                allow_failure: ctx.boolean(m, "allowFailure", &at, false)?,
                queue: "main".into(),
                group: None,
            });
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str, kind: HookKind) -> HookConfig {
        match parse(text, kind, "hooks/h.sh") {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn every_field_and_its_default() {
        let c = ok(
            r#"
configVersion: v1
onStartup: 10
afterAll: 5
settings: {executionMinInterval: 3s, executionBurst: 2}
schedule:
- crontab: "*/5 * * * *"
  includeSnapshotsFrom: [pods]
- name: nightly
  crontab: "@daily"
  allowFailure: true
  queue: slow
  group: g
kubernetes:
- name: pods
  apiVersion: v1
  kind: Pod
  executeHookOnEvent: [Added]
  executeHookOnSynchronization: "false"
  waitForSynchronization: false
  keepFullObjectsInMemory: false
  labelSelector: {matchLabels: {app: web}, matchExpressions: [{key: tier, operator: In, values: [a]}]}
  fieldSelector: {matchExpressions: [{field: status.phase, operator: NotEquals, value: Failed}]}
  namespace: {nameSelector: {matchNames: [default]}}
  jqFilter: .metadata.labels
  allowFailure: true
  group: g
- kind: ConfigMap
  nameSelector: {matchNames: [a, b]}
  queue: cms
  waitForSynchronization: false
"#,
            HookKind::Global,
        );
        assert_eq!(
            (c.on_startup, c.after_all, c.before_all),
            (Some(10), Some(5), None)
        );
        assert_eq!(
            c.settings,
            Settings {
                execution_min_interval: Some(Duration::from_secs(3)),
                execution_burst: 2
            }
        );
        assert_eq!(c.schedule[0].name, "schedule");
        assert_eq!(c.schedule[0].queue, "main");
        assert_eq!(c.schedule[1].queue, "slow");
        let pods = &c.kubernetes[0];
        assert_eq!(pods.execute_hook_on_event, [WatchEvent::Added]);
        assert!(!pods.execute_hook_on_synchronization);
        assert!(
            pods.wait_for_synchronization,
            "waitForSynchronization=false needs an explicit queue"
        );
        assert!(!pods.keep_full_objects_in_memory);
        assert_eq!(
            pods.field_selector[0],
            FieldRequirement {
                field: "status.phase".into(),
                equal: false,
                value: "Failed".into()
            }
        );
        let cms = &c.kubernetes[1];
        assert_eq!(cms.name, "kubernetes");
        assert_eq!(cms.execute_hook_on_event.len(), 3);
        assert!(!cms.wait_for_synchronization);
        assert_eq!(cms.name_selector, ["a", "b"]);
    }

    #[test]
    fn json_and_legacy_v0() {
        let c = ok(r#"{"configVersion":"v1","beforeHelm":1}"#, HookKind::Module);
        assert_eq!(c.before_helm, Some(1));
        let v0 = ok(
            r#"{"onStartup": 1, "onKubernetesEvent": [{"kind": "Pod", "event": ["add"]}]}"#,
            HookKind::Global,
        );
        assert_eq!(v0.version, "v0");
        assert_eq!(v0.kubernetes[0].execute_hook_on_event, [WatchEvent::Added]);
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let cases: &[(&str, HookKind, &str, &str)] = &[
            ("", HookKind::Global, "", "printed nothing"),
            ("not: [valid", HookKind::Global, "", "not valid YAML"),
            ("- a list", HookKind::Global, "", "expected an object"),
            (
                "configVersion: v2\nonStartup: 1",
                HookKind::Global,
                "configVersion",
                "unsupported",
            ),
            (
                "configVersion: v1",
                HookKind::Global,
                "",
                "at least one binding",
            ),
            (
                "configVersion: v1\nonStartup: 1\nfoo: 1",
                HookKind::Global,
                "foo",
                "unknown field",
            ),
            (
                "configVersion: v1\nbeforeHelm: 1",
                HookKind::Global,
                "beforeHelm",
                "not allowed in a global hook",
            ),
            (
                "configVersion: v1\nbeforeAll: 1",
                HookKind::Module,
                "beforeAll",
                "not allowed in a module hook",
            ),
            (
                "configVersion: v1\nonStartup: x",
                HookKind::Global,
                "onStartup",
                "integer",
            ),
            (
                "configVersion: v1\nonStartup: 1.5",
                HookKind::Global,
                "onStartup",
                "integer",
            ),
            (
                "configVersion: v1\nschedule: []",
                HookKind::Global,
                "schedule",
                "at least 1",
            ),
            (
                "configVersion: v1\nschedule: [{name: x}]",
                HookKind::Global,
                "schedule[0].crontab",
                "required",
            ),
            (
                "configVersion: v1\nschedule: [{crontab: '* *'}]",
                HookKind::Global,
                "schedule[0].crontab",
                "expected 5 fields",
            ),
            (
                "configVersion: v1\nschedule: [{crontab: '@daily', allowFailure: maybe}]",
                HookKind::Global,
                "schedule[0].allowFailure",
                "true or false",
            ),
            (
                "configVersion: v1\nschedule: [{crontab: '@daily', includeSnapshotsFrom: [nope]}]",
                HookKind::Global,
                "schedule[0].includeSnapshotsFrom",
                "not the name",
            ),
            (
                "configVersion: v1\nkubernetes: [{name: x}]",
                HookKind::Global,
                "kubernetes[0].kind",
                "required",
            ),
            (
                "configVersion: v1\nkubernetes: [{kind: Pod, executeHookOnEvent: [Created]}]",
                HookKind::Global,
                "kubernetes[0].executeHookOnEvent[0]",
                "unknown event",
            ),
            (
                "configVersion: v1\nkubernetes: [{kind: Pod, apiVersion: 'a/b/c'}]",
                HookKind::Global,
                "kubernetes[0].apiVersion",
                "group/version",
            ),
            (
                "configVersion: v1\nkubernetes: [{kind: Pod, labelSelector: {}}]",
                HookKind::Global,
                "kubernetes[0].labelSelector",
                "matchLabels",
            ),
            (
                "configVersion: v1\nkubernetes: [{kind: Pod, labelSelector: {matchExpressions: [{key: a, operator: Has}]}}]",
                HookKind::Global,
                "kubernetes[0].labelSelector.matchExpressions[0].operator",
                "unknown operator",
            ),
            (
                "configVersion: v1\nkubernetes: [{kind: Pod, fieldSelector: {matchExpressions: [{field: a, operator: '~', value: b}]}}]",
                HookKind::Global,
                "kubernetes[0].fieldSelector.matchExpressions[0].operator",
                "unknown operator",
            ),
            (
                "configVersion: v1\nkubernetes: [{kind: Pod, nameSelector: {matchNames: [a]}, fieldSelector: {matchExpressions: [{field: metadata.name, operator: '=', value: b}]}}]",
                HookKind::Global,
                "kubernetes[0].fieldSelector",
                "cannot be used together",
            ),
            (
                "configVersion: v1\nkubernetes: [{kind: Pod, nameSelector: {}}]",
                HookKind::Global,
                "kubernetes[0].nameSelector.matchNames",
                "required",
            ),
            (
                "configVersion: v1\nkubernetes: [{kind: Pod}, {kind: Pod}]\nschedule: [{crontab: '@daily', includeSnapshotsFrom: [kubernetes]}]",
                HookKind::Global,
                "schedule[0].includeSnapshotsFrom",
                "there are 2",
            ),
            (
                "configVersion: v1\nkubernetes: [{kind: Pod, namespace: {labels: {}}}]",
                HookKind::Global,
                "kubernetes[0].namespace.labels",
                "unknown field",
            ),
            (
                "configVersion: v1\nonStartup: 1\nsettings: {executionMinPeriod: 1s, executionMinInterval: 2s}",
                HookKind::Global,
                "settings.executionMinPeriod",
                "not both",
            ),
            (
                "configVersion: v1\nonStartup: 1\nsettings: {executionMinInterval: soon}",
                HookKind::Global,
                "settings.executionMinInterval",
                "not a duration",
            ),
            (
                "configVersion: v1\nonStartup: 1\nsettings: {executionBurst: 0}",
                HookKind::Global,
                "settings.executionBurst",
                "positive integer",
            ),
            (
                "configVersion: v1\nkubernetesValidating: []",
                HookKind::Global,
                "kubernetesValidating",
                "not supported",
            ),
        ];
        assert!(cases.len() >= 20);
        for (text, kind, field, message) in cases {
            let err = match parse(text, *kind, "hooks/h.sh") {
                Err(e) => e,
                Ok(c) => panic!("{text:?} was accepted: {c:?}"),
            };
            assert_eq!(&err.field, field, "{text:?}: {err}");
            assert!(err.message.contains(message), "{text:?}: {err}");
            assert!(err.to_string().contains("hooks/h.sh"), "{err}");
        }
    }

    #[test]
    fn execution_min_period_is_an_alias_of_execution_min_interval() {
        let c = parse(
            "configVersion: v1\nonStartup: 1\nsettings: {executionMinPeriod: 3s, executionBurst: 2}",
            HookKind::Global,
            "h",
        )
        .expect("the seed's spelling is accepted");
        assert_eq!(
            c.settings.execution_min_interval,
            Some(Duration::from_secs(3))
        );
        assert_eq!(c.settings.execution_burst, 2);
    }
}
