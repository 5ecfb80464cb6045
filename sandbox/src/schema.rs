//! The structural schema of a CRD version (`openAPIV3Schema`), applied to its custom
//! resources on every write as kube-apiserver applies it: unknown fields are pruned,
//! `default`s filled in (and `null`s of fields that may not be null dropped or defaulted),
//! then the object is validated (types, `enum`, bounds, lengths, item counts, `required`).
//! `pattern`, `format`, CEL rules and `x-kubernetes-validations` are not checked.

use serde_json::{Map, Value};

/// Fields an object keeps at its root (and an embedded resource keeps), whatever its
/// schema says.
const OBJECT_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

fn flag(schema: &Value, name: &str) -> bool {
    schema[name].as_bool() == Some(true)
}

/// Removes the fields the schema does not know (unless it preserves unknown fields there).
pub fn prune(schema: &Value, obj: &mut Value) {
    prune_node(schema, obj, true);
}

fn prune_node(schema: &Value, v: &mut Value, keep_object_fields: bool) {
    if !schema.is_object() {
        return;
    }
    match v {
        Value::Object(map) => {
            let props = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields")
                || additional.as_bool() == Some(true);
            let keep_meta = keep_object_fields || flag(schema, "x-kubernetes-embedded-resource");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let sub = props.and_then(|p| p.get(&key));
                if keep_meta && OBJECT_FIELDS.contains(&key.as_str()) && sub.is_none() {
                    continue;
                }
                if keep_object_fields && key == "metadata" {
                    continue;
                }
                match (sub, additional.is_object()) {
                    (Some(sub), _) => {
                        if let Some(child) = map.get_mut(&key) {
                            prune_node(sub, child, false);
                        }
                    }
                    (None, true) => {
                        if let Some(child) = map.get_mut(&key) {
                            prune_node(additional, child, false);
                        }
                    }
                    (None, false) if preserve => {}
                    (None, false) => {
                        map.remove(&key);
                    }
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for item in items {
                prune_node(&schema["items"], item, false);
            }
        }
        _ => {}
    }
}

/// Fills in the schema's defaults where a field is absent (or `null` and not nullable),
/// and drops the other `null`s of fields that are not nullable.
pub fn default(schema: &Value, v: &mut Value) {
    if !schema.is_object() {
        return;
    }
    match v {
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                for (key, sub) in props {
                    let absent = map
                        .get(key)
                        .is_none_or(|x| x.is_null() && !flag(sub, "nullable"));
                    if absent {
                        match sub.get("default") {
                            Some(d) => {
                                map.insert(key.clone(), d.clone());
                            }
                            None if map.get(key).is_some_and(Value::is_null) => {
                                map.remove(key);
                            }
                            None => {}
                        }
                    }
                    if let Some(child) = map.get_mut(key) {
                        default(sub, child);
                    }
                }
            }
            let additional = &schema["additionalProperties"];
            if additional.is_object() {
                let known = schema["properties"].as_object();
                for (key, child) in map.iter_mut() {
                    if known.is_none_or(|p| !p.contains_key(key)) {
                        default(additional, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                default(&schema["items"], item);
            }
        }
        _ => {}
    }
}

/// The JSON type of a value as kube-apiserver's validator names it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(want: &str, v: &Value) -> bool {
    match (want, v) {
        ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        (want, v) => want == type_name(v),
    }
}

/// A number as Go's validator prints it (`10`, `2.5`).
fn number_text(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        Some(f) => format!("{f}"),
        None => v.to_string(),
    }
}

/// The problems of `v` against `schema`: `(field, message)`, the field written as
/// kube-apiserver writes it (`spec.tags[1]`).
pub fn validate(schema: &Value, v: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let (Some(props), Some(map)) = (schema["properties"].as_object(), v.as_object()) {
        // The root's metadata is ObjectMeta's, checked elsewhere.
        for (key, sub) in props {
            if key == "metadata" {
                continue;
            }
            if let Some(child) = map.get(key) {
                check(sub, child, key.clone(), &mut out);
            }
        }
        required(schema, map, "", &mut out);
    }
    out
}

fn required(schema: &Value, map: &Map<String, Value>, at: &str, out: &mut Vec<(String, String)>) {
    for name in schema["required"].as_array().into_iter().flatten() {
        let Some(name) = name.as_str() else { continue };
        if map.get(name).is_none() {
            let field = if at.is_empty() {
                name.to_string()
            } else {
                format!("{at}.{name}")
            };
            out.push((field, "Required value".into()));
        }
    }
}

fn check(schema: &Value, v: &Value, at: String, out: &mut Vec<(String, String)>) {
    if !schema.is_object() {
        return;
    }
    if v.is_null() && flag(schema, "nullable") {
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !v.is_string() && !type_matches("integer", v) {
            let t = type_name(v);
            out.push((
                at.clone(),
                format!(
                    "Invalid value: \"{t}\": {at} in body must be of type integer,string: \"{t}\""
                ),
            ));
        }
        return;
    }
    if let Some(want) = schema["type"].as_str()
        && !type_matches(want, v)
    {
        let t = type_name(v);
        out.push((
            at.clone(),
            format!("Invalid value: \"{t}\": {at} in body must be of type {want}: \"{t}\""),
        ));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(v)
    {
        let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        out.push((
            at.clone(),
            format!(
                "Unsupported value: {v}: supported values: {}",
                listed.join(", ")
            ),
        ));
    }
    match v {
        Value::Number(_) => bounds(schema, v, &at, out),
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema["maxLength"].as_u64()
                && s.len() as u64 > max
            {
                out.push((
                    at.clone(),
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(min) = schema["minLength"].as_u64()
                && len < min
            {
                out.push((
                    at.clone(),
                    format!("Invalid value: {v}: {at} in body should be at least {min} chars long"),
                ));
            }
        }
        Value::Array(items) => {
            if let Some(max) = schema["maxItems"].as_u64()
                && items.len() as u64 > max
            {
                out.push((
                    at.clone(),
                    format!("Too many: {}: must have at most {max} items", items.len()),
                ));
            }
            if let Some(min) = schema["minItems"].as_u64()
                && (items.len() as u64) < min
            {
                out.push((
                    at.clone(),
                    format!(
                        "Invalid value: {}: {at} in body should have at least {min} items",
                        items.len()
                    ),
                ));
            }
            for (i, item) in items.iter().enumerate() {
                check(&schema["items"], item, format!("{at}[{i}]"), out);
            }
        }
        Value::Object(map) => {
            let props = schema["properties"].as_object();
            for (key, child) in map {
                match props.and_then(|p| p.get(key)) {
                    Some(sub) => check(sub, child, join(&at, key), out),
                    None if schema["additionalProperties"].is_object() => check(
                        &schema["additionalProperties"],
                        child,
                        format!("{at}[{key}]"),
                        out,
                    ),
                    None => {}
                }
            }
            required(schema, map, &at, out);
        }
        _ => {}
    }
}

fn bounds(schema: &Value, v: &Value, at: &str, out: &mut Vec<(String, String)>) {
    let Some(x) = v.as_f64() else { return };
    let shown = number_text(v);
    if let Some(max) = schema["maximum"].as_f64() {
        let exclusive = flag(schema, "exclusiveMaximum");
        if x > max || (exclusive && x == max) {
            let words = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            out.push((
                at.to_string(),
                format!(
                    "Invalid value: {shown}: {at} in body should be {words} {}",
                    number_text(&schema["maximum"])
                ),
            ));
        }
    }
    if let Some(min) = schema["minimum"].as_f64() {
        let exclusive = flag(schema, "exclusiveMinimum");
        if x < min || (exclusive && x == min) {
            let words = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            out.push((
                at.to_string(),
                format!(
                    "Invalid value: {shown}: {at} in body should be {words} {}",
                    number_text(&schema["minimum"])
                ),
            ));
        }
    }
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

/// Prunes, defaults and validates a custom resource against its version's schema. A
/// write of the status subresource validates the status alone, its fields named from
/// the status in the messages (`replicas in body …`), as kube-apiserver does.
pub(crate) fn admit(schema: &Value, obj: &mut Value, status_only: bool) -> Vec<(String, String)> {
    prune(schema, obj);
    default(schema, obj);
    if !status_only {
        return validate(schema, obj);
    }
    let mut out = Vec::new();
    if let Some(status) = obj.get("status") {
        check(
            &schema["properties"]["status"],
            status,
            String::new(),
            &mut out,
        );
    }
    out.into_iter()
        .map(|(field, message)| (join("status", &field), message))
        .collect()
}

/// The scale subresource's replicas read from `path` (`.status.replicas`) must be an
/// integer where present, as kube-apiserver checks it.
pub(crate) fn scale_problems(obj: &Value, path: &str) -> Vec<(String, String)> {
    let value = path
        .trim_start_matches('.')
        .split('.')
        .try_fold(obj, |v, seg| v.get(seg));
    let go_type = match value {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => return Vec::new(),
        Some(Value::Number(_)) => "float64",
        Some(Value::String(_)) => "string",
        Some(Value::Bool(_)) => "bool",
        Some(Value::Array(_)) => "[]interface {}",
        Some(Value::Object(_)) => "map[string]interface {}",
    };
    let shown = match value {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    };
    vec![(
        path.to_string(),
        format!(
            "Invalid value: 0: {path} accessor error: {shown} is of the type {go_type}, expected int64"
        ),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["color"], "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "color": {"type": "string", "enum": ["red", "blue"]},
                "label": {"type": "string", "maxLength": 5},
                "tags": {"type": "array", "items": {"type": "string"}},
                "nested": {"type": "object", "default": {}, "properties": {
                    "mode": {"type": "string", "default": "auto"}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
    }

    #[test]
    fn unknown_fields_are_pruned_and_defaults_filled() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "G", "metadata": {"name": "a"},
            "extra": 1, "spec": {"color": "red", "size": null, "label": null, "other": true,
                "free": {"any": {"thing": 1}}}});
        let problems = admit(&schema(), &mut obj, false);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            obj,
            json!({"apiVersion": "x/v1", "kind": "G", "metadata": {"name": "a"},
                "spec": {"color": "red", "size": 3, "nested": {"mode": "auto"},
                    "free": {"any": {"thing": 1}}}})
        );
    }

    #[test]
    fn problems_are_worded_as_kube_apiserver_words_them() {
        let mut obj =
            json!({"spec": {"color": "green", "size": 99, "label": "toolong", "tags": ["a", 2]}});
        let mut problems = admit(&schema(), &mut obj, false);
        problems.sort();
        assert_eq!(
            problems,
            vec![
                ("spec.color".to_string(), "Unsupported value: \"green\": supported values: \"red\", \"blue\"".to_string()),
                ("spec.label".to_string(), "Too long: may not be more than 5 bytes".to_string()),
                ("spec.size".to_string(), "Invalid value: 99: spec.size in body should be less than or equal to 10".to_string()),
                ("spec.tags[1]".to_string(), "Invalid value: \"integer\": spec.tags[1] in body must be of type string: \"integer\"".to_string()),
            ]
        );
        let mut missing = json!({"spec": {"size": 0}});
        let problems = admit(&schema(), &mut missing, false);
        assert!(
            problems.contains(&("spec.color".into(), "Required value".into())),
            "{problems:?}"
        );
    }
}
