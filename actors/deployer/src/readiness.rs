//! What the manifest type checks and reads on the objects it applied, all pure: the
//! update strategies (`update`, `patch`, `merge`, `mergeOverwrite`), simple JSONPaths, the
//! default readiness checks per kind, custom readiness requirements, and exports.

use serde_json::{Map, Value};

use crate::status::DeployError;

fn config_error(message: String) -> DeployError {
    DeployError::config("Reconcile", "InvalidProviderConfiguration", message)
}

/// `updateStrategy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpdateStrategy {
    /// The whole object is written as rendered.
    #[default]
    Update,
    /// The JSON merge patch (RFC 7386) from the live object to the rendered one, as
    /// landscaper's `client.MergeFrom(live)`: what the rendered object leaves out (fields
    /// added on the cluster) is removed, and its `null`s remove fields.
    Patch,
    /// The rendered object deep-merged into the live one; fields set live are kept.
    Merge,
    /// Deep-merged; rendered values that are not empty overwrite live ones.
    MergeOverwrite,
}

impl UpdateStrategy {
    /// Reads `spec.config.updateStrategy`.
    pub fn parse(v: &Value) -> Result<UpdateStrategy, DeployError> {
        match v {
            Value::Null => Ok(UpdateStrategy::Update),
            Value::String(s) => match s.as_str() {
                "update" | "" => Ok(UpdateStrategy::Update),
                "patch" => Ok(UpdateStrategy::Patch),
                "merge" => Ok(UpdateStrategy::Merge),
                "mergeOverwrite" => Ok(UpdateStrategy::MergeOverwrite),
                other => Err(config_error(format!(
                    "spec.config.updateStrategy: unknown strategy {other:?} (expected update, patch, merge or mergeOverwrite)"
                ))),
            },
            other => Err(config_error(format!(
                "spec.config.updateStrategy: expected a string, got {other}"
            ))),
        }
    }

    /// The object to write over `live` for `rendered` (metadata bookkeeping aside).
    pub fn updated(self, live: &Value, rendered: &Value) -> Value {
        match self {
            UpdateStrategy::Update => rendered.clone(),
            UpdateStrategy::Patch => {
                // live + (live → rendered) is the rendered object without its nulls; the
                // API server keeps the system fields and the status, as for an update.
                let mut out = Value::Object(Map::new());
                merge_patch(&mut out, rendered);
                out
            }
            UpdateStrategy::Merge => {
                let mut out = live.clone();
                deep_merge(&mut out, rendered, false);
                out
            }
            UpdateStrategy::MergeOverwrite => {
                let mut out = live.clone();
                deep_merge(&mut out, rendered, true);
                out
            }
        }
    }
}

/// RFC 7386: `null` removes, objects merge, anything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Deep merge of `from` into `into`: objects merge key by key; elsewhere `into` keeps its
/// value unless it has none, or `overwrite` is set and `from`'s value is not empty.
pub(crate) fn deep_merge(into: &mut Value, from: &Value, overwrite: bool) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => deep_merge(existing, v, overwrite),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (slot, v) => {
            if is_empty(slot) || (overwrite && !is_empty(v)) {
                *slot = v.clone();
            }
        }
    }
}

/// Whether every field of `want` has the same value in `have` (objects compared key by
/// key, anything else whole): applying `want` would change nothing.
pub(crate) fn contained(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| contained(v, hv))),
        _ => want == have,
    }
}

/// One step of a path.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    /// `[*]` or `.*`: every element or value.
    Wildcard,
    /// `[?(@.a.b == 'x')]`, or `[?(@.a)]` (the field exists): the elements that match.
    Filter {
        path: Vec<Step>,
        compare: Option<(Compare, Value)>,
    },
}

/// A filter's comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Compare {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A JSONPath that cannot be read, naming the path and what is wrong at which place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path:?}: {problem}")]
pub struct PathError {
    /// The path as written.
    pub path: String,
    /// What is wrong with it.
    pub problem: PathProblem,
}

/// What is wrong with a JSONPath.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathProblem {
    /// `[?…]` that is not `[?(…)]`.
    #[error("[{0}] is not a filter like [?(@.type == 'Ready')]")]
    NotAFilter(String),
    /// An operator other than `==`, `!=`, `<`, `<=`, `>`, `>=`.
    #[error("unknown comparison in [{0}]")]
    UnknownComparison(String),
    /// A filter's right side that is not a literal.
    #[error("{0:?} is not a quoted string, a number, true, false or null")]
    NotALiteral(String),
    /// A filter's left side that is not `@…`.
    #[error("a filter compares a field of the element (@.field), got {0:?}")]
    NotOfTheElement(String),
    /// `..` or a trailing `.`.
    #[error("empty field name at {0}")]
    EmptyField(usize),
    /// A character that needs the bracket notation.
    #[error("{c:?} in the field name {key:?} (a key with such characters is written ['{key}'])")]
    FieldCharacter {
        /// The character.
        c: char,
        /// The field name.
        key: String,
    },
    /// `[?(` without `)]`.
    #[error("unclosed filter '[?('")]
    UnclosedFilter,
    /// `[` without `]`.
    #[error("unclosed '['")]
    UnclosedBracket,
    /// `[…]` holding neither a number nor a quoted key.
    #[error("[{0}] is not an index or a quoted key")]
    NotAnIndex(String),
    /// A character where a step should begin.
    #[error("unexpected {c:?} at {at}")]
    Unexpected {
        /// The character.
        c: char,
        /// Its position.
        at: usize,
    },
}

fn path_error(path: &str, problem: PathProblem) -> PathError {
    PathError {
        path: path.to_string(),
        problem,
    }
}

/// Parses `?(@.path op literal)` (the inside of `[…]`).
fn parse_filter(path: &str, inner: &str) -> Result<Step, PathError> {
    let body = inner
        .strip_prefix('?')
        .map(str::trim)
        .and_then(|b| b.strip_prefix('('))
        .and_then(|b| b.strip_suffix(')'))
        .map(str::trim)
        .ok_or_else(|| path_error(path, PathProblem::NotAFilter(inner.to_string())))?;
    // The operator: the first one outside quotes.
    let mut quote = None;
    let mut found = None;
    let chars: Vec<char> = body.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        match (quote, c) {
            (Some(q), c) if *c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(*c),
            (None, '=' | '!' | '<' | '>') => {
                let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
                found = Some(match two.as_str() {
                    "==" => (i, 2, Compare::Eq),
                    "!=" => (i, 2, Compare::Ne),
                    "<=" => (i, 2, Compare::Le),
                    ">=" => (i, 2, Compare::Ge),
                    _ if *c == '<' => (i, 1, Compare::Lt),
                    _ if *c == '>' => (i, 1, Compare::Gt),
                    _ => {
                        return Err(path_error(
                            path,
                            PathProblem::UnknownComparison(inner.to_string()),
                        ));
                    }
                });
                break;
            }
            _ => {}
        }
    }
    let (left, compare) = match found {
        None => (body.to_string(), None),
        Some((at, len, op)) => {
            let left: String = chars[..at].iter().collect();
            let right: String = chars[at + len..].iter().collect();
            (left, Some((op, literal(path, right.trim())?)))
        }
    };
    let left = left.trim();
    let rest = left
        .strip_prefix('@')
        .ok_or_else(|| path_error(path, PathProblem::NotOfTheElement(left.to_string())))?;
    let path_steps = if rest.is_empty() {
        Vec::new()
    } else {
        parse_path(rest)?
    };
    Ok(Step::Filter {
        path: path_steps,
        compare,
    })
}

/// A filter's literal: a quoted string, a number, `true`, `false` or `null`.
fn literal(path: &str, text: &str) -> Result<Value, PathError> {
    if let Some(s) = text
        .strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
    {
        return Ok(Value::String(s.to_string()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::Null)) => Ok(v),
        _ => Err(path_error(path, PathProblem::NotALiteral(text.to_string()))),
    }
}

/// JSON values equal as landscaper compares them: numbers by value (`1` is `1.0`).
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn compares(have: &Value, compare: Compare, want: &Value) -> bool {
    let order = match (have, want) {
        (Value::Number(a), Value::Number(b)) => a
            .as_f64()
            .zip(b.as_f64())
            .and_then(|(a, b)| a.partial_cmp(&b)),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    };
    match compare {
        Compare::Eq => json_eq(have, want),
        Compare::Ne => !json_eq(have, want),
        Compare::Lt => order == Some(std::cmp::Ordering::Less),
        Compare::Le => matches!(
            order,
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
        ),
        Compare::Gt => order == Some(std::cmp::Ordering::Greater),
        Compare::Ge => matches!(
            order,
            Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
        ),
    }
}

/// Parses the JSONPath subset the deployer configurations use: `.a.b[0].c`, optionally in
/// `{…}` and after `$`, with `['key.with.dots']` for keys holding dots, `[*]` and `.*`, and
/// filters `[?(@.type == 'Ready')]` (`==`, `!=`, `<`, `<=`, `>`, `>=`, or a field alone for
/// "exists"), as client-go's JSONPath, which landscaper uses. A dot escaped with a
/// backslash (`app\.kubernetes\.io`, `['a\.b']`) is part of the key, as client-go's
/// JSONPath reads it (upstream's own examples write it so). Recursive descent (`..`),
/// slices and unions are refused, naming the path.
fn parse_path(path: &str) -> Result<Vec<Step>, PathError> {
    let mut p = path.trim();
    if let Some(inner) = p.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        p = inner.trim();
    }
    p = p.strip_prefix('$').unwrap_or(p);
    // A path without the leading dot (`status.x`) is the same path.
    let bytes: Vec<char> = if p.starts_with(['.', '[']) || p.is_empty() {
        p.chars().collect()
    } else {
        std::iter::once('.').chain(p.chars()).collect()
    };
    let mut steps = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            '.' => {
                let start = i + 1;
                let mut end = start;
                let mut key = String::new();
                while end < bytes.len() && bytes[end] != '.' && bytes[end] != '[' {
                    if bytes[end] == '\\' && bytes.get(end + 1) == Some(&'.') {
                        key.push('.');
                        end += 2;
                        continue;
                    }
                    key.push(bytes[end]);
                    end += 1;
                }
                if end == start {
                    return Err(path_error(path, PathProblem::EmptyField(start)));
                }
                if let Some(c) = key
                    .chars()
                    .find(|c| "{}()?@'\"=!<> ".contains(*c) || (*c == '*' && key.len() > 1))
                {
                    return Err(path_error(path, PathProblem::FieldCharacter { c, key }));
                }
                steps.push(if key == "*" {
                    Step::Wildcard
                } else {
                    Step::Field(key)
                });
                i = end;
            }
            '[' if bytes.get(i + 1) == Some(&'?') => {
                // A filter may hold ']' (`@.a[0]`): it ends at ")]".
                let close = (i + 1..bytes.len().saturating_sub(1))
                    .find(|j| bytes[*j] == ')' && bytes[j + 1] == ']')
                    .ok_or_else(|| path_error(path, PathProblem::UnclosedFilter))?;
                let inner: String = bytes[i + 1..=close].iter().collect();
                steps.push(parse_filter(path, inner.trim())?);
                i = close + 2;
            }
            '[' => {
                let close = bytes[i..]
                    .iter()
                    .position(|c| *c == ']')
                    .map(|o| i + o)
                    .ok_or_else(|| path_error(path, PathProblem::UnclosedBracket))?;
                let inner: String = bytes[i + 1..close].iter().collect();
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::Wildcard);
                } else if let Some(key) = inner
                    .strip_prefix('\'')
                    .and_then(|s| s.strip_suffix('\''))
                    .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
                {
                    steps.push(Step::Field(key.replace("\\.", ".")));
                } else {
                    let n = inner.parse().map_err(|_| {
                        path_error(path, PathProblem::NotAnIndex(inner.to_string()))
                    })?;
                    steps.push(Step::Index(n));
                }
                i = close + 1;
            }
            c => return Err(path_error(path, PathProblem::Unexpected { c, at: i })),
        }
    }
    Ok(steps)
}

/// Checks a JSONPath's syntax.
pub(crate) fn check_path(path: &str) -> Result<(), PathError> {
    parse_path(path).map(|_| ())
}

/// Every value `steps` lead to from `v`, in order.
fn walk<'a>(v: &'a Value, steps: &[Step], out: &mut Vec<&'a Value>) {
    let Some((step, rest)) = steps.split_first() else {
        out.push(v);
        return;
    };
    match (step, v) {
        (Step::Field(f), Value::Object(o)) => {
            if let Some(n) = o.get(f) {
                walk(n, rest, out);
            }
        }
        (Step::Index(n), Value::Array(a)) => {
            if let Some(n) = a.get(*n) {
                walk(n, rest, out);
            }
        }
        (Step::Wildcard, Value::Array(a)) => a.iter().for_each(|n| walk(n, rest, out)),
        (Step::Wildcard, Value::Object(o)) => o.values().for_each(|n| walk(n, rest, out)),
        (Step::Filter { path, compare }, Value::Array(a)) => {
            for element in a {
                let mut found = Vec::new();
                walk(element, path, &mut found);
                let keep = match compare {
                    None => !found.is_empty(),
                    Some((op, want)) => found.iter().any(|have| compares(have, *op, want)),
                };
                if keep {
                    walk(element, rest, out);
                }
            }
        }
        _ => {}
    }
}

/// Every value at `path` in `v` (none: not there); a path with `[*]` or a filter may
/// find several.
pub(crate) fn all_at<'a>(v: &'a Value, path: &str) -> Result<Vec<&'a Value>, PathError> {
    let steps = parse_path(path)?;
    let mut out = Vec::new();
    walk(v, &steps, &mut out);
    Ok(out)
}

/// The (first) value at `path` in `v` (`None`: not there).
pub fn at<'a>(v: &'a Value, path: &str) -> Result<Option<&'a Value>, PathError> {
    Ok(all_at(v, path)?.into_iter().next())
}

fn int(v: &Value, path: &str) -> Option<i64> {
    at(v, path).ok().flatten().and_then(Value::as_i64)
}

/// Why an object is not ready by the default checks (`None`: ready, or a kind without a
/// default check).
/// The kinds the default readiness check looks at; any other object is ready as it is.
pub(crate) const CHECKED_KINDS: &[&str] = &[
    "Pod",
    "Deployment",
    "ReplicaSet",
    "ReplicationController",
    "StatefulSet",
    "DaemonSet",
];

/// What the default readiness check still waits for in `o` (`None`: ready).
pub(crate) fn default_not_ready(o: &Value) -> Option<String> {
    let kind = o["kind"].as_str().unwrap_or_default();
    let generation = int(o, ".metadata.generation").unwrap_or(0);
    let observed = int(o, ".status.observedGeneration").unwrap_or(0);
    let desired = int(o, ".spec.replicas").unwrap_or(1);
    let stale = || {
        (observed < generation)
            .then(|| format!("observedGeneration {observed} is behind generation {generation}"))
    };
    match kind {
        "Pod" => {
            if o["status"]["phase"] == "Succeeded" {
                return None;
            }
            let ready = o["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            (!ready).then(|| "the pod is not Ready".to_string())
        }
        "Deployment" => stale().or_else(|| {
            let updated = int(o, ".status.updatedReplicas").unwrap_or(0);
            let available = int(o, ".status.availableReplicas").unwrap_or(0);
            (updated < desired || available < desired)
                .then(|| format!("{updated} of {desired} replicas updated, {available} available"))
        }),
        "ReplicaSet" | "ReplicationController" => stale().or_else(|| {
            let ready = int(o, ".status.readyReplicas").unwrap_or(0);
            (ready < desired).then(|| format!("{ready} of {desired} replicas ready"))
        }),
        "StatefulSet" => stale().or_else(|| {
            let current = o["status"]["currentRevision"].as_str().unwrap_or_default();
            let update = o["status"]["updateRevision"].as_str().unwrap_or_default();
            if !update.is_empty() && current != update {
                return Some(format!("revision {update} is still rolling out"));
            }
            let ready = int(o, ".status.readyReplicas").unwrap_or(0);
            (ready < desired).then(|| format!("{ready} of {desired} replicas ready"))
        }),
        "DaemonSet" => stale().or_else(|| {
            let want = int(o, ".status.desiredNumberScheduled").unwrap_or(0);
            let updated = int(o, ".status.updatedNumberScheduled").unwrap_or(0);
            let ready = int(o, ".status.numberReady").unwrap_or(0);
            (updated < want || ready < want)
                .then(|| format!("{updated} of {want} pods updated, {ready} ready"))
        }),
        _ => None,
    }
}

/// An object named in a configuration: `{apiVersion, kind, name, namespace}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectName {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

impl ObjectName {
    fn parse(v: &Value, field: &str) -> Result<ObjectName, DeployError> {
        let s = |k: &str| -> Result<String, DeployError> {
            match &v[k] {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                Value::Null if k == "namespace" => Ok(String::new()),
                Value::Null => Err(config_error(format!("{field}.{k}: missing"))),
                other => Err(config_error(format!(
                    "{field}.{k}: expected a string, got {other}"
                ))),
            }
        };
        Ok(ObjectName {
            api_version: s("apiVersion")?,
            kind: s("kind")?,
            name: s("name")?,
            namespace: s("namespace")?,
        })
    }
}

/// The operator of a requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    Exists,
    NotExists,
    Equals,
    NotEquals,
    In,
    NotIn,
}

/// One requirement of a custom check.
#[derive(Clone, Debug, PartialEq)]
pub struct Requirement {
    pub json_path: String,
    pub operator: Operator,
    pub values: Vec<Value>,
}

impl Requirement {
    /// Why `o` does not meet it (`None`: it does).
    /// As landscaper's custom check: a field that is not there meets only "does not
    /// exist"; otherwise every value found (a filter or `[*]` may find several) must meet
    /// the operator, numbers compared by value.
    pub fn unmet(&self, o: &Value) -> Option<String> {
        let found = all_at(o, &self.json_path).unwrap_or_default();
        let matches = |v: &Value| self.values.iter().any(|w| json_eq(w, v));
        let ok = match (self.operator, found.is_empty()) {
            (Operator::NotExists, missing) => missing,
            (_, true) => false,
            (Operator::Exists, false) => true,
            (Operator::Equals | Operator::In, false) => found.iter().all(|v| matches(v)),
            (Operator::NotEquals | Operator::NotIn, false) => found.iter().all(|v| !matches(v)),
        };
        (!ok).then(|| {
            let shown = match found.as_slice() {
                [] => "missing".to_string(),
                [one] => one.to_string(),
                many => format!(
                    "[{}]",
                    many.iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            format!(
                "{} is {} ({:?} {:?})",
                self.json_path, shown, self.operator, self.values
            )
        })
    }
}

/// One custom readiness check.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomCheck {
    pub name: String,
    pub resources: Vec<ObjectName>,
    /// `labelSelector`: every object of a type with these labels, in any namespace.
    pub label_selector: Option<LabelSelection>,
    pub requirements: Vec<Requirement>,
    /// `targetName`: the objects are read in this Target (of the item's namespace), not in
    /// the item's.
    pub target_name: Option<String>,
}

/// `labelSelector: {apiVersion, kind, matchLabels}` of a custom readiness check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSelection {
    pub api_version: String,
    pub kind: String,
    pub match_labels: std::collections::BTreeMap<String, String>,
}

impl LabelSelection {
    fn parse(v: &Value, field: &str) -> Result<LabelSelection, DeployError> {
        let s = |k: &str| -> Result<String, DeployError> {
            match &v[k] {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                other => Err(config_error(format!(
                    "{field}.{k}: expected a non-empty string, got {other}"
                ))),
            }
        };
        let (api_version, kind) = (s("apiVersion")?, s("kind")?);
        let match_labels = match &v["matchLabels"] {
            Value::Object(m) if !m.is_empty() => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(config_error(format!(
                        "{field}.matchLabels.{k}: expected a string, got {other}"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            other => {
                return Err(config_error(format!(
                    "{field}.matchLabels: expected a non-empty map of labels, got {other}"
                )));
            }
        };
        Ok(LabelSelection {
            api_version,
            kind,
            match_labels,
        })
    }

    /// `k=v,…` for a list call.
    pub fn selector(&self) -> String {
        self.match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `spec.config.readinessChecks`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadinessChecks {
    pub disable_default: bool,
    pub custom: Vec<CustomCheck>,
}

impl ReadinessChecks {
    /// Reads `spec.config.readinessChecks`; every error names the field.
    pub fn parse(v: &Value) -> Result<ReadinessChecks, DeployError> {
        const F: &str = "spec.config.readinessChecks";
        if v.is_null() {
            return Ok(ReadinessChecks::default());
        }
        if !v.is_object() {
            return Err(config_error(format!("{F}: expected an object, got {v}")));
        }
        let disable_default = match &v["disableDefault"] {
            Value::Null => false,
            Value::Bool(b) => *b,
            other => {
                return Err(config_error(format!(
                    "{F}.disableDefault: expected true or false, got {other}"
                )));
            }
        };
        let mut custom = Vec::new();
        let list = match &v["custom"] {
            Value::Null => Vec::new(),
            Value::Array(a) => a.clone(),
            other => {
                return Err(config_error(format!(
                    "{F}.custom: expected a list, got {other}"
                )));
            }
        };
        for (i, c) in list.iter().enumerate() {
            let field = format!("{F}.custom[{i}]");
            if c["disabled"] == Value::Bool(true) {
                continue;
            }
            let name = c["name"].as_str().unwrap_or_default().to_string();
            let label_selector = match &c["labelSelector"] {
                Value::Null => None,
                v => Some(LabelSelection::parse(v, &format!("{field}.labelSelector"))?),
            };
            let resources = match &c["resourceSelector"] {
                Value::Array(a) => a
                    .iter()
                    .enumerate()
                    .map(|(j, r)| ObjectName::parse(r, &format!("{field}.resourceSelector[{j}]")))
                    .collect::<Result<Vec<_>, _>>()?,
                Value::Null => Vec::new(),
                other => {
                    return Err(config_error(format!(
                        "{field}.resourceSelector: expected a list of objects, got {other}"
                    )));
                }
            };
            if resources.is_empty() && label_selector.is_none() {
                return Err(config_error(format!(
                    "{field}.resourceSelector: expected a non-empty list of objects to check, or a labelSelector"
                )));
            }
            let reqs = match &c["requirements"] {
                Value::Array(a) if !a.is_empty() => a.clone(),
                other => {
                    return Err(config_error(format!(
                        "{field}.requirements: expected a non-empty list, got {other}"
                    )));
                }
            };
            let mut requirements = Vec::new();
            for (j, r) in reqs.iter().enumerate() {
                let rf = format!("{field}.requirements[{j}]");
                let json_path = r["jsonPath"].as_str().unwrap_or_default().to_string();
                if json_path.is_empty() {
                    return Err(config_error(format!("{rf}.jsonPath: missing")));
                }
                check_path(&json_path).map_err(|e| config_error(format!("{rf}.jsonPath: {e}")))?;
                let operator = match r["operator"].as_str() {
                    Some("exists") => Operator::Exists,
                    Some("!") => Operator::NotExists,
                    Some("=") | Some("==") => Operator::Equals,
                    Some("!=") => Operator::NotEquals,
                    Some("in") => Operator::In,
                    Some("notin") => Operator::NotIn,
                    other => {
                        return Err(config_error(format!(
                            "{rf}.operator: expected exists, !, =, ==, !=, in or notin, got {other:?}"
                        )));
                    }
                };
                let values: Vec<Value> = match &r["values"] {
                    Value::Null => Vec::new(),
                    Value::Array(a) => a.iter().map(|v| v["value"].clone()).collect(),
                    other => {
                        return Err(config_error(format!(
                            "{rf}.values: expected a list of {{value: …}}, got {other}"
                        )));
                    }
                };
                if values.is_empty() && !matches!(operator, Operator::Exists | Operator::NotExists)
                {
                    return Err(config_error(format!(
                        "{rf}.values: the operator {:?} needs at least one value",
                        r["operator"].as_str().unwrap_or_default()
                    )));
                }
                requirements.push(Requirement {
                    json_path,
                    operator,
                    values,
                });
            }
            custom.push(CustomCheck {
                name,
                resources,
                label_selector,
                requirements,
                target_name: target_name(&c["targetName"], &field)?,
            });
        }
        Ok(ReadinessChecks {
            disable_default,
            custom,
        })
    }
}

/// One export: a value read from an object into the export Secret under `key`.
#[derive(Clone, Debug, PartialEq)]
pub struct Export {
    pub key: String,
    pub json_path: String,
    /// The object read; `None` (the helm type only): the chart's values root
    /// (`.Values`, `.Release`, `.Chart`).
    pub from: Option<ObjectName>,
    /// The value at `json_path` is a reference `{name, namespace}` to an object of this
    /// `(apiVersion, kind)`, read at the second path.
    pub through: Option<(String, String, String)>,
    /// `targetName`: the object is read in this Target (of the item's namespace), not in
    /// the item's.
    pub target_name: Option<String>,
}

/// Reads `spec.config.exports` (each export reads an object: `fromResource` is required).
pub(crate) fn parse_exports(v: &Value) -> Result<Vec<Export>, DeployError> {
    parse_export_list(&v["exports"], "spec.config.exports.exports", false)
}

/// Reads a list of exports at `field`; with `values_allowed`, an export without
/// `fromResource` reads the chart's values root.
pub(crate) fn parse_export_list(
    list: &Value,
    field_base: &str,
    values_allowed: bool,
) -> Result<Vec<Export>, DeployError> {
    let list = match list {
        Value::Null => return Ok(Vec::new()),
        Value::Array(a) => a,
        other => {
            return Err(config_error(format!(
                "{field_base}: expected a list, got {other}"
            )));
        }
    };
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let field = format!("{field_base}[{i}]");
        let key = e["key"].as_str().unwrap_or_default().to_string();
        if key.is_empty() {
            return Err(config_error(format!("{field}.key: missing")));
        }
        let json_path = e["jsonPath"].as_str().unwrap_or_default().to_string();
        if json_path.is_empty() {
            return Err(config_error(format!("{field}.jsonPath: missing")));
        }
        check_path(&json_path).map_err(|m| config_error(format!("{field}.jsonPath: {m}")))?;
        let from = match &e["fromResource"] {
            Value::Null if values_allowed => None,
            Value::Null => {
                return Err(config_error(format!(
                    "{field}.fromResource: missing (the object to read {json_path} from)"
                )));
            }
            r => Some(ObjectName::parse(r, &format!("{field}.fromResource"))?),
        };
        let through = match &e["fromObjectRef"] {
            Value::Null => None,
            _ if from.is_none() => {
                return Err(config_error(format!(
                    "{field}.fromObjectRef: needs fromResource (the object holding the reference)"
                )));
            }
            r => {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                let (api, kind, path) = (s("apiVersion"), s("kind"), s("jsonPath"));
                for (k, val) in [("apiVersion", &api), ("kind", &kind), ("jsonPath", &path)] {
                    if val.is_empty() {
                        return Err(config_error(format!("{field}.fromObjectRef.{k}: missing")));
                    }
                }
                check_path(&path)
                    .map_err(|m| config_error(format!("{field}.fromObjectRef.jsonPath: {m}")))?;
                Some((api, kind, path))
            }
        };
        let target_name = target_name(&e["targetName"], &field)?;
        if target_name.is_some() && from.is_none() {
            return Err(config_error(format!(
                "{field}.targetName: needs fromResource (the chart's values are not in a target)"
            )));
        }
        out.push(Export {
            key,
            json_path,
            from,
            through,
            target_name,
        });
    }
    Ok(out)
}

/// `targetName` of a check or an export at `field`: the name of another Target.
fn target_name(v: &Value, field: &str) -> Result<Option<String>, DeployError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if !s.is_empty() => Ok(Some(s.clone())),
        other => Err(config_error(format!(
            "{field}.targetName: expected the name of a Target in the item's namespace, got {other}"
        ))),
    }
}

/// Puts `value` at the dotted `key` of `into` (`a.b` → `{a: {b: value}}`), merging.
pub(crate) fn put_export(into: &mut Value, key: &str, value: Value) {
    let mut nested = value;
    for part in key.rsplit('.') {
        let mut m = Map::new();
        m.insert(part.to_string(), nested);
        nested = Value::Object(m);
    }
    deep_merge(into, &nested, true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filters_and_wildcards_find_what_client_go_s_jsonpath_finds() {
        let o = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "n": 1},
            {"type": "Healthy", "status": "False", "n": 2},
            {"type": "Ready2", "status": "True", "n": 3}
        ]}});
        let found = |p: &str| all_at(&o, p).expect(p);
        assert_eq!(
            found(".status.conditions[?(@.type == 'Ready')].status"),
            [&json!("True")]
        );
        assert_eq!(
            found(r#"{.status.conditions[?(@.type=="Healthy")].status}"#),
            [&json!("False")]
        );
        assert_eq!(found(".status.conditions[*].n").len(), 3);
        assert_eq!(found(".status.conditions[?(@.n > 1)].type").len(), 2);
        assert_eq!(
            found(".status.conditions[?(@.n >= 3)].type"),
            [&json!("Ready2")]
        );
        assert_eq!(
            found(".status.conditions[?(@.status != 'True')].type"),
            [&json!("Healthy")]
        );
        assert_eq!(found(".status.conditions[?(@.missing)].type").len(), 0);
        assert_eq!(found(".status.conditions[?(@.n)].type").len(), 3);
        assert!(found(".status.conditions[?(@.type == 'Nope')].status").is_empty());
        // As landscaper: every value found must meet the requirement; missing meets only
        // "does not exist".
        let req = |path: &str, operator, values: Vec<Value>| Requirement {
            json_path: path.into(),
            operator,
            values,
        };
        let ready = ".status.conditions[?(@.type == 'Ready')].status";
        assert!(
            req(ready, Operator::Equals, vec![json!("True")])
                .unmet(&o)
                .is_none()
        );
        assert!(
            req(
                ".status.conditions[*].status",
                Operator::Equals,
                vec![json!("True")]
            )
            .unmet(&o)
            .is_some()
        );
        assert!(
            req(".status.nope", Operator::NotEquals, vec![json!("x")])
                .unmet(&o)
                .is_some()
        );
        assert!(
            req(".status.nope", Operator::NotExists, vec![])
                .unmet(&o)
                .is_none()
        );
        assert!(
            req(
                ".status.conditions[0].n",
                Operator::Equals,
                vec![json!(1.0)]
            )
            .unmet(&o)
            .is_none()
        );
    }

    #[test]
    fn malformed_paths_are_refused() {
        for bad in [
            ".status.conditions[?(@.type=~'x')].status",
            ".status.conditions[?(type == 'x')].status",
            ".status.conditions[?(@.type == Ready)].status",
            ".status[",
            ".status[abc]",
            ".status..x",
            "{.status}}",
            "{.status",
            ".a[-1]",
        ] {
            assert!(check_path(bad).is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn strategies_merge_as_documented() {
        let live =
            json!({"data": {"a": "live", "b": "live"}, "metadata": {"resourceVersion": "7"}});
        let rendered = json!({"data": {"a": "new", "c": "new", "b": ""}});
        assert_eq!(UpdateStrategy::Update.updated(&live, &rendered), rendered);
        assert_eq!(
            UpdateStrategy::Patch.updated(&live, &json!({"data": {"a": "new", "b": null}})),
            json!({"data": {"a": "new"}}),
            "what the rendered object leaves out goes, as upstream's patch from the live object"
        );
        assert_eq!(
            UpdateStrategy::Merge.updated(&live, &rendered)["data"],
            json!({"a": "live", "b": "live", "c": "new"})
        );
        assert_eq!(
            UpdateStrategy::MergeOverwrite.updated(&live, &rendered)["data"],
            json!({"a": "new", "b": "live", "c": "new"})
        );
        assert!(
            UpdateStrategy::parse(&json!("replace"))
                .is_err_and(|e| e.message.contains("spec.config.updateStrategy"))
        );
        assert!(contained(&json!({"data": {"a": "live"}}), &live));
        assert!(!contained(&json!({"data": {"a": "new"}}), &live));
    }

    #[test]
    fn paths_read_fields_indices_and_quoted_keys() {
        let o = json!({"status": {"conditions": [{"type": "Ready"}], "a.b": 1}});
        assert_eq!(
            at(&o, ".status.conditions[0].type").ok().flatten(),
            Some(&json!("Ready"))
        );
        assert_eq!(at(&o, "{.status['a.b']}").ok().flatten(), Some(&json!(1)));
        // Escaped dots, as upstream's examples write keys of annotations and labels.
        assert_eq!(at(&o, r"{.status['a\.b']}").ok().flatten(), Some(&json!(1)));
        assert_eq!(at(&o, r"{.status.a\.b}").ok().flatten(), Some(&json!(1)));
        assert_eq!(at(&o, "status.conditions[3]").ok().flatten(), None);
        assert!(at(&o, ".status..x").is_err());
        assert!(at(&o, ".status[x]").is_err());
    }

    #[test]
    fn a_label_selector_check_reads_its_type_and_labels_and_bad_ones_name_the_field() {
        let checks = ReadinessChecks::parse(&json!({"custom": [{"name": "pods",
            "labelSelector": {"apiVersion": "v1", "kind": "Pod", "matchLabels": {"app": "web", "tier": "front"}},
            "requirements": [{"jsonPath": ".status.phase", "operator": "==", "values": [{"value": "Running"}]}]}]}))
        .expect("parses");
        let sel = checks.custom[0]
            .label_selector
            .as_ref()
            .expect("a selector");
        assert_eq!(
            (sel.kind.as_str(), sel.selector().as_str()),
            ("Pod", "app=web,tier=front")
        );
        assert!(checks.custom[0].resources.is_empty());
        for (check, field) in [
            (
                json!({"labelSelector": {"apiVersion": "v1", "kind": "Pod"}}),
                "custom[0].labelSelector.matchLabels",
            ),
            (
                json!({"labelSelector": {"kind": "Pod", "matchLabels": {"a": "b"}}}),
                "custom[0].labelSelector.apiVersion",
            ),
            (
                json!({"labelSelector": {"apiVersion": "v1", "kind": "Pod", "matchLabels": {"a": 1}}}),
                "custom[0].labelSelector.matchLabels.a",
            ),
            (
                json!({}),
                "custom[0].resourceSelector: expected a non-empty list",
            ),
        ] {
            let mut c = check;
            c["requirements"] = json!([{"jsonPath": ".a", "operator": "exists"}]);
            let e = ReadinessChecks::parse(&json!({"custom": [c]})).expect_err("refused");
            assert!(e.message.contains(field), "{} names {field}", e.message);
        }
    }

    #[test]
    fn default_checks_per_kind() {
        let dep = |observed: i64, updated: i64, available: i64| {
            json!({"kind": "Deployment", "metadata": {"generation": 2}, "spec": {"replicas": 2},
                   "status": {"observedGeneration": observed, "updatedReplicas": updated, "availableReplicas": available}})
        };
        assert!(default_not_ready(&dep(1, 2, 2)).is_some_and(|r| r.contains("observedGeneration")));
        assert!(default_not_ready(&dep(2, 1, 2)).is_some());
        assert_eq!(default_not_ready(&dep(2, 2, 2)), None);
        let pod =
            json!({"kind": "Pod", "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(default_not_ready(&pod), None);
        assert!(default_not_ready(&json!({"kind": "Pod", "status": {}})).is_some());
        assert_eq!(default_not_ready(&json!({"kind": "ConfigMap"})), None);
        let ss = json!({"kind": "StatefulSet", "spec": {"replicas": 1},
                        "status": {"currentRevision": "a", "updateRevision": "b", "readyReplicas": 1}});
        assert!(default_not_ready(&ss).is_some_and(|r| r.contains("rolling out")));
    }

    #[test]
    fn custom_checks_and_exports_parse_with_named_errors() {
        let checks = ReadinessChecks::parse(&json!({"custom": [{"name": "ready",
            "resourceSelector": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": "d"}],
            "requirements": [{"jsonPath": ".data.state", "operator": "in", "values": [{"value": "ok"}, {"value": "done"}]}]}]}));
        let Ok(checks) = checks else {
            panic!("{checks:?}")
        };
        let req = &checks.custom[0].requirements[0];
        assert_eq!(req.unmet(&json!({"data": {"state": "done"}})), None);
        assert!(req.unmet(&json!({"data": {"state": "no"}})).is_some());
        let bad = ReadinessChecks::parse(
            &json!({"custom": [{"resourceSelector": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c"}],
            "requirements": [{"jsonPath": ".x", "operator": "~"}]}]}),
        );
        assert!(bad.is_err_and(|e| e.message.contains("custom[0].requirements[0].operator")));
        let exports = parse_exports(&json!({"exports": [{"key": "a.b", "jsonPath": ".data.x",
            "fromResource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": "d"}}]}));
        assert!(exports.is_ok_and(|e| e.len() == 1));
        let bad = parse_exports(&json!({"exports": [{"key": "a", "jsonPath": ".x"}]}));
        assert!(bad.is_err_and(|e| e.message.contains("exports[0].fromResource")));
        // targetName: another Target's name, read as given; anything else names the field.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": "d"});
        let other = parse_exports(&json!({"exports": [{"key": "a", "jsonPath": ".x",
            "fromResource": cm, "targetName": "cluster-3"}]}));
        assert!(other.is_ok_and(|e| e[0].target_name.as_deref() == Some("cluster-3")));
        let bad = parse_exports(&json!({"exports": [{"key": "a", "jsonPath": ".x",
            "fromResource": cm, "targetName": 3}]}));
        assert!(bad.is_err_and(|e| {
            e.message
                .starts_with("spec.config.exports.exports[0].targetName")
        }));
        let values = parse_export_list(
            &json!([{"key": "a", "jsonPath": ".Values.x", "targetName": "cluster-3"}]),
            "spec.config.exports",
            true,
        );
        assert!(values.is_err_and(|e| e.message.contains("needs fromResource")));
        let checks = ReadinessChecks::parse(&json!({"custom": [{"name": "gate", "targetName": "",
            "resourceSelector": [cm], "requirements": [{"jsonPath": ".data", "operator": "exists"}]}]}));
        assert!(checks.is_err_and(|e| e.message.contains("custom[0].targetName")));
        let mut out = json!({});
        put_export(&mut out, "a.b", json!(1));
        put_export(&mut out, "a.c", json!(2));
        assert_eq!(out, json!({"a": {"b": 1, "c": 2}}));
    }
}
