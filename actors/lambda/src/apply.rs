//! metacontroller's dynamic apply: a 3-way merge of observed, last-applied and desired.
//!
//! ```text
//!   observed ──┐
//!   last-applied (annotation of observed) ──► merge ──► revert system metadata and .status
//!   desired (hook answer, annotation stripped) ─┘        └─► annotation := canonical JSON of desired
//! ```
//!
//! A hook answers with partial objects; the merge keeps every field set by someone else
//! (defaults, other controllers, users) and removes only what this controller applied
//! before and no longer wants. The result equals `observed` exactly when nothing needs
//! writing, so [`apply_update`]`(observed, desired)? == *observed` is the no-op test; that
//! is why [`canonical_json`] must be deterministic.
//!
//! The rules follow metacontroller (`pkg/dynamic/apply`, `common.ApplyUpdate`):
//! - objects merge key by key: keys that were last applied and are no longer desired are
//!   removed, desired keys are merged recursively, other keys are kept;
//! - a list whose items are all objects sharing a conventional key
//!   (`containerPort, port, mountPath, name, uid, ip, path`, first wins) merges as a map
//!   keyed by that key's string form (`80` and `"80"` are the same item); its order is the
//!   observed order, then new desired items in desired order;
//! - any other list, any scalar and any key new to the object take the desired value whole.
//!
//! Where metacontroller's behaviour is an accident of Go typing, bosun does the sane thing
//! instead (each has a test below):
//! - **`null` removes the key**, at any depth and also inside a value taken whole (as
//!   `kubectl apply` and a JSON merge patch treat it). metacontroller writes a literal
//!   `null` (which the API server drops, so a child whose hook sends e.g. Go's
//!   `creationTimestamp: null` in a pod template is rewritten on every sync), except
//!   where an object was observed, which it keeps minus the last-applied keys.
//! - **A type change replaces.** A desired scalar or list where an object was observed
//!   (or a non-list where a list was) takes the desired value; metacontroller kept the
//!   object minus the last-applied keys, or wrote `null` for a list.
//! - **A list-map key must identify items**: its value must be present (not null) on every
//!   item and unique within each of the three lists, else the next conventional key is
//!   tried, and with none the list is replaced. metacontroller picked `port` for a Service
//!   with `53/TCP` and `53/UDP` and then emitted the merged UDP entry twice.
//! - **Equal numbers keep their observed form**: `3.0` desired where `3` is observed keeps
//!   `3`, so a hook written in a language that prints floats is not rewritten every sync
//!   (metacontroller compares Go `int64` and `float64` as different).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::types::LAST_APPLIED_ANNOTATION;

/// The list-map keys, in order of preference.
pub(crate) const LIST_MAP_KEYS: [&str; 7] = [
    "containerPort",
    "port",
    "mountPath",
    "name",
    "uid",
    "ip",
    "path",
];

/// The read-only `metadata` fields the API server owns; a hook cannot change them.
pub(crate) const SYSTEM_METADATA_FIELDS: [&str; 8] = [
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
];

/// A child that cannot be applied.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ApplyError {
    /// The last-applied annotation is not a JSON object.
    #[error("cannot read the last-applied annotation of {object}: {message}")]
    LastApplied { object: String, message: String },
    /// The observed or desired child is not a JSON object.
    #[error("cannot apply {object}: the {which} object is not a JSON object")]
    NotAnObject { object: String, which: &'static str },
}

impl ApplyError {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ApplyError::LastApplied { .. } => "last_applied",
            ApplyError::NotAnObject { .. } => "not_an_object",
        }
    }
}

/// `merge(observed, lastApplied, desired)`: `observed` changed as `desired` asks, keeping
/// what others set and removing what was last applied and is no longer desired.
/// `last_applied` may be `null` (nothing applied yet).
pub fn merge(observed: &Value, last_applied: &Value, desired: &Value) -> Value {
    if desired.is_null() {
        // Nothing desired at the top: there is no key to remove, keep the object.
        return observed.clone();
    }
    merge_value(observed.clone(), last_applied, desired)
}

fn merge_value(dest: Value, last: &Value, desired: &Value) -> Value {
    match (dest, desired) {
        (Value::Object(dest), Value::Object(desired)) => {
            Value::Object(merge_object(dest, last.as_object(), desired))
        }
        (Value::Array(dest), Value::Array(desired)) => {
            let no_items = Vec::new();
            let last = last.as_array().unwrap_or(&no_items);
            Value::Array(merge_array(dest, last, desired))
        }
        (Value::Number(d), Value::Number(w)) if same_number(&d, w) => Value::Number(d),
        (_, desired) => without_nulls(desired),
    }
}

/// `v` with every `null`-valued key removed at any depth: a value taken whole follows the
/// same "null means absent" rule as a merged one.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

fn merge_object(
    mut dest: Map<String, Value>,
    last: Option<&Map<String, Value>>,
    desired: &Map<String, Value>,
) -> Map<String, Value> {
    if let Some(last) = last {
        for key in last.keys() {
            if !desired.contains_key(key) {
                dest.remove(key);
            }
        }
    }
    for (key, want) in desired {
        if want.is_null() {
            dest.remove(key);
            continue;
        }
        let last = last.and_then(|l| l.get(key)).unwrap_or(&Value::Null);
        match dest.get_mut(key) {
            Some(slot) => {
                let old = std::mem::take(slot);
                *slot = merge_value(old, last, want);
            }
            None => {
                dest.insert(key.clone(), without_nulls(want));
            }
        }
    }
    dest
}

fn merge_array(dest: Vec<Value>, last: &[Value], desired: &[Value]) -> Vec<Value> {
    let Some(key) = detect_list_map_key(&[&dest, last, desired]) else {
        return desired.iter().map(without_nulls).collect();
    };
    let dest_map = list_map(key, &dest);
    let last_map = list_map(key, last);
    let desired_map = list_map(key, desired);
    let merged = merge_object(dest_map, Some(&last_map), &desired_map);

    // Observed order first, then the new desired items in desired order.
    let mut out = Vec::with_capacity(merged.len());
    let mut emitted = BTreeSet::new();
    for item in dest.iter().chain(desired) {
        let k = merge_key(&item[key]);
        if let Some(v) = merged.get(&k)
            && emitted.insert(k)
        {
            out.push(v.clone());
        }
    }
    out
}

/// The conventional key that identifies the items of all `lists`, if any: every item is
/// an object holding the key with a non-null value, unique within its list.
fn detect_list_map_key(lists: &[&[Value]]) -> Option<&'static str> {
    if lists.iter().all(|l| l.is_empty()) {
        return None;
    }
    if lists.iter().any(|l| l.iter().any(|item| !item.is_object())) {
        return None;
    }
    LIST_MAP_KEYS.into_iter().find(|key| {
        lists.iter().all(|list| {
            let mut seen = BTreeSet::new();
            list.iter().all(|item| match item.get(*key) {
                None | Some(Value::Null) => false,
                Some(v) => seen.insert(merge_key(v)),
            })
        })
    })
}

fn list_map(key: &str, list: &[Value]) -> Map<String, Value> {
    list.iter()
        .map(|item| (merge_key(&item[key]), item.clone()))
        .collect()
}

/// The string form of a list-map key value: strings as they are, numbers as in JSON
/// (`80`, also for `80.0`), anything else as its canonical JSON.
fn merge_key(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => canonical_json(other),
    }
}

fn same_number(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x == y;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// `kind namespace/name` of an object, for messages.
fn describe(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or("object");
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    match object["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

/// The last-applied configuration recorded on `observed`; `null` when there is none.
pub(crate) fn last_applied(observed: &Value) -> Result<Value, ApplyError> {
    let raw = match &observed["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] {
        Value::Null => return Ok(Value::Null),
        Value::String(s) if s.is_empty() => return Ok(Value::Null),
        Value::String(s) => s,
        _ => {
            return Err(ApplyError::LastApplied {
                object: describe(observed),
                message: "the annotation is not a string".into(),
            });
        }
    };
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ (Value::Object(_) | Value::Null)) => Ok(v),
        Ok(_) => Err(ApplyError::LastApplied {
            object: describe(observed),
            message: "expected a JSON object".into(),
        }),
        Err(e) => Err(ApplyError::LastApplied {
            object: describe(observed),
            message: e.to_string(),
        }),
    }
}

/// `desired` without the last-applied annotation (an emptied annotations map stays, as
/// upstream).
fn strip_last_applied(desired: &Value) -> Value {
    let mut out = desired.clone();
    if let Some(annotations) = out
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
    out
}

/// The `metadata` object of `object`, created (or replaced, if it is not an object).
/// `object[key]` as an object, created (or replacing a non-object value).
fn object_mut<'a>(object: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = object
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("the slot was made an object above"),
    }
}

fn set_annotation(object: &mut Map<String, Value>, value: String) {
    object_mut(object_mut(object, "metadata"), "annotations")
        .insert(LAST_APPLIED_ANNOTATION.to_string(), Value::String(value));
}

/// The object to write so that `observed` becomes `desired` (ApplyUpdate); equal to
/// `observed` when nothing changes.
pub(crate) fn apply_update(observed: &Value, desired: &Value) -> Result<Value, ApplyError> {
    let Some(observed_object) = observed.as_object() else {
        return Err(ApplyError::NotAnObject {
            object: describe(desired),
            which: "observed",
        });
    };
    let desired = strip_last_applied(desired);
    let Some(desired_object) = desired.as_object() else {
        return Err(ApplyError::NotAnObject {
            object: describe(observed),
            which: "desired",
        });
    };
    let last = last_applied(observed)?;
    let mut out = merge_object(observed_object.clone(), last.as_object(), desired_object);

    // The API server owns these: a hook's values must not count as a change.
    let observed_meta = observed_object.get("metadata").and_then(Value::as_object);
    for field in SYSTEM_METADATA_FIELDS {
        match observed_meta.and_then(|m| m.get(field)) {
            Some(v) => {
                object_mut(&mut out, "metadata").insert(field.to_string(), v.clone());
            }
            None => {
                if let Some(m) = out.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove(field);
                }
            }
        }
    }
    // A parent never writes its children's status.
    match observed_object.get("status") {
        Some(v) => {
            out.insert("status".into(), v.clone());
        }
        None => {
            out.remove("status");
        }
    }
    set_annotation(&mut out, canonical_json(&desired));
    Ok(Value::Object(out))
}

/// Whether `observed` is sure to be applied as `desired` already, decided without a
/// merge: when this holds, [`apply_update`]`(observed, desired)` is `Ok(observed)`. It
/// holds when the last-applied annotation is exactly the canonical JSON of `desired`
/// (its own annotation stripped), `observed` holds every desired value (objects key by
/// key, lists exactly) and `desired` has no `null` and no fractional number anywhere
/// (so the annotation reads back as `desired` itself). When it does not hold, only the
/// full merge can tell.
///
/// Why that suffices: with the annotation reading back as `desired`, no key was last
/// applied that is not desired, so the merge removes nothing; every desired value is
/// merged into an equal observed one and stays as observed (a list, whether replaced or
/// merged as a list-map, comes out as the equal observed list); the system fields and
/// `.status` are observed's, and the annotation is set to the text it already holds.
pub(crate) fn already_applied(observed: &Value, desired: &Value) -> bool {
    let recorded = match &observed["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] {
        Value::String(s) => s,
        _ => return false,
    };
    if !observed.is_object() || !desired.is_object() {
        return false;
    }
    let stripped;
    let desired = if desired["metadata"]["annotations"]
        .get(LAST_APPLIED_ANNOTATION)
        .is_some()
    {
        stripped = strip_last_applied(desired);
        &stripped
    } else {
        desired
    };
    plain(desired) && contains(observed, desired) && canonical_json(desired) == *recorded
}

/// Whether `v` holds no `null` and no number but integers, at any depth.
fn plain(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        Value::Bool(_) | Value::String(_) => true,
        Value::Array(items) => items.iter().all(plain),
        Value::Object(m) => m.values().all(plain),
    }
}

/// Whether every value of `wanted` holds in `observed`: objects key by key (`observed`
/// may hold more keys), anything else (lists too) equal.
pub(crate) fn contains(observed: &Value, wanted: &Value) -> bool {
    match (observed, wanted) {
        (Value::Object(o), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| o.get(k).is_some_and(|ov| contains(ov, v))),
        (o, w) => o == w,
    }
}

/// `desired` with its last-applied annotation set, for a create.
pub(crate) fn with_last_applied(desired: &Value) -> Value {
    let mut out = strip_last_applied(desired);
    let json = canonical_json(&out);
    if let Value::Object(object) = &mut out {
        set_annotation(object, json);
    }
    out
}

/// Deterministic compact JSON: keys sorted, and the same bytes Go's `json.Marshal` writes
/// (`<`, `>`, `&`, U+2028 and U+2029 escaped; floats without a needless `.0`), so an
/// annotation written by metacontroller for the same object compares equal.
pub(crate) fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sorted explicitly: the map's own order depends on serde_json's features.
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    // Most strings need no escape at all: written as they are.
    let plain = |b: &u8| !matches!(b, b'"' | b'\\' | 0..=0x1f | b'<' | b'>' | b'&' | 0xe2);
    if s.as_bytes().iter().all(plain) {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    // serde_json's escaping of quotes, backslashes and control characters is Go's.
    let quoted = Value::String(s.to_owned()).to_string();
    for c in quoted.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
}

fn write_number(n: &serde_json::Number, out: &mut String) {
    if n.is_i64() || n.is_u64() {
        out.push_str(&n.to_string());
        return;
    }
    let Some(f) = n.as_f64() else {
        out.push_str(&n.to_string());
        return;
    };
    // Go: plain decimal for 1e-6 <= |f| < 1e21, else exponent form with a signed exponent.
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        out.push_str(&format!("{f}"));
    } else {
        let e = format!("{f:e}");
        match e.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => {
                out.push_str(mantissa);
                out.push_str("e+");
                out.push_str(exp);
            }
            _ => out.push_str(&e),
        }
    }
}

#[cfg(test)]
mod tests;
