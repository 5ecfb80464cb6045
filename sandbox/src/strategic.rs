//! Strategic merge patch for built-in kinds.
//!
//! Maps merge recursively and `null` deletes a key, as in a JSON merge patch. Lists whose
//! Go field carries `patchStrategy:"merge"` merge element-wise by their merge key
//! (`containers` by `name`, `volumeMounts` by `mountPath`, …) or, for lists of scalars
//! (`finalizers`), as a set union; all other lists are replaced. The directives
//! `$patch: replace|delete|merge`, `$retainKeys`, `$deleteFromPrimitiveList/<field>` and
//! `$setElementOrder/<field>` are honoured.

use serde_json::{Map, Value};

/// A patch that is not a valid strategic merge patch.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatchError {
    /// The patch is not a JSON object.
    #[error("a strategic merge patch must be a JSON object, got {0}")]
    NotAnObject(&'static str),
    /// An unknown `$patch` directive.
    #[error("unknown patch directive {directive:?} at {path}: expected replace, delete or merge")]
    UnknownDirective {
        /// Where it appeared.
        path: String,
        /// The directive.
        directive: String,
    },
    /// A merge-list element without its merge key.
    #[error("{path}: every element must have the merge key {key:?}")]
    MissingMergeKey {
        /// The list.
        path: String,
        /// The merge key.
        key: String,
    },
    /// A directive whose value has the wrong shape.
    #[error("{path}: {message}")]
    Malformed {
        /// Where.
        path: String,
        /// What was expected.
        message: String,
    },
}

/// How a list field is merged.
pub(crate) enum ListStrategy {
    /// The list is atomic and replaced as a whole.
    Replace,
    /// Elements are merged by this key field.
    MergeByKey(&'static str),
    /// A set of scalars.
    Union,
}

/// The patch strategy of a list field, from the built-in Go types' struct tags.
pub(crate) fn list_strategy(kind: &str, field: &str) -> ListStrategy {
    use ListStrategy::*;
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "secrets" => MergeByKey("name"),
        "volumeMounts" => MergeByKey("mountPath"),
        "volumeDevices" => MergeByKey("devicePath"),
        "ports" if kind == "Service" => MergeByKey("port"),
        "ports" => MergeByKey("containerPort"),
        "hostAliases" => MergeByKey("ip"),
        "topologySpreadConstraints" => MergeByKey("topologyKey"),
        "readinessGates" => MergeByKey("conditionType"),
        "conditions" | "addresses" => MergeByKey("type"),
        "ownerReferences" => MergeByKey("uid"),
        "finalizers" => Union,
        _ => Replace,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Applies `patch` to `original` for an object of the given built-in group and kind.
pub(crate) fn strategic_merge_patch(
    original: &Value,
    patch: &Value,
    _group: &str,
    kind: &str,
) -> Result<Value, PatchError> {
    if !patch.is_object() {
        return Err(PatchError::NotAnObject(type_name(patch)));
    }
    let base = if original.is_object() {
        original.clone()
    } else {
        Value::Object(Map::new())
    };
    Ok(merge_map(base, patch, kind, "")?.unwrap_or(Value::Object(Map::new())))
}

/// Merges a patch map into `original`; `None` means "delete this map".
fn merge_map(
    original: Value,
    patch: &Value,
    kind: &str,
    path: &str,
) -> Result<Option<Value>, PatchError> {
    let Some(pmap) = patch.as_object() else {
        return Ok(Some(patch.clone()));
    };
    let mut out = match original {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    match pmap.get("$patch").map(|d| d.as_str().unwrap_or_default()) {
        None | Some("merge") => {}
        Some("delete") => return Ok(None),
        Some("replace") => {
            let mut replaced = pmap.clone();
            replaced.remove("$patch");
            return Ok(Some(strip_directives(Value::Object(replaced))));
        }
        Some(other) => {
            return Err(PatchError::UnknownDirective {
                path: display(path),
                directive: other.to_string(),
            });
        }
    }
    for (key, pv) in pmap {
        let here = format!("{path}.{key}");
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let Some(remove) = pv.as_array() else {
                return Err(PatchError::Malformed {
                    path: display(&here),
                    message: "expected a list of values".into(),
                });
            };
            if let Some(Value::Array(list)) = out.get_mut(field) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        if pv.is_null() {
            out.remove(key);
            continue;
        }
        let current = out.remove(key);
        let merged = match (current, pv) {
            (Some(cur @ Value::Object(_)), Value::Object(_)) => merge_map(cur, pv, kind, &here)?,
            (Some(Value::Array(cur)), Value::Array(items)) => {
                Some(merge_list(cur, items, kind, key, &here)?)
            }
            (None, Value::Array(items)) => Some(merge_list(Vec::new(), items, kind, key, &here)?),
            (None, Value::Object(_)) => merge_map(Value::Object(Map::new()), pv, kind, &here)?,
            (_, other) => Some(strip_directives(other.clone())),
        };
        if let Some(v) = merged {
            out.insert(key.clone(), v);
        }
    }
    if let Some(retain) = pmap.get("$retainKeys") {
        let Some(keys) = retain.as_array() else {
            return Err(PatchError::Malformed {
                path: display(path),
                message: "$retainKeys must be a list of field names".into(),
            });
        };
        out.retain(|k, _| keys.iter().any(|r| r.as_str() == Some(k)));
    }
    Ok(Some(Value::Object(out)))
}

fn merge_list(
    current: Vec<Value>,
    items: &[Value],
    kind: &str,
    field: &str,
    path: &str,
) -> Result<Value, PatchError> {
    let replace_all = items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace_all {
        let kept = items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .map(strip_directives)
            .collect();
        return Ok(Value::Array(kept));
    }
    match list_strategy(kind, field) {
        ListStrategy::Replace => Ok(strip_directives(Value::Array(items.to_vec()))),
        ListStrategy::Union => {
            let mut out = current;
            for item in items {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(Value::Array(out))
        }
        ListStrategy::MergeByKey(key) => {
            let original_ids: Vec<Value> = current
                .iter()
                .map(|e| e.get(key).cloned().unwrap_or(Value::Null))
                .collect();
            let mut out = current;
            for item in items {
                if !item.is_object() {
                    // A list of scalars under a merge strategy: union.
                    if !out.contains(item) {
                        out.push(item.clone());
                    }
                    continue;
                }
                let Some(id) = item.get(key) else {
                    return Err(PatchError::MissingMergeKey {
                        path: display(path),
                        key: key.to_string(),
                    });
                };
                let position = out.iter().position(|e| e.get(key) == Some(id));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => {
                        let existing = std::mem::take(&mut out[i]);
                        match merge_map(existing, item, kind, path)? {
                            Some(v) => out[i] = v,
                            None => {
                                out.remove(i);
                            }
                        }
                    }
                    (None, false) => out.push(strip_directives(item.clone())),
                }
            }
            Ok(Value::Array(patch_order(out, &original_ids, items, key)))
        }
    }
}

/// The order kube-apiserver gives a merged list: the elements the patch names, in the
/// patch's order, merged with the others, in the original order, by their place in the
/// original list (an element new to it goes before the original ones it meets).
fn patch_order(merged: Vec<Value>, original: &[Value], patch: &[Value], key: &str) -> Vec<Value> {
    let id = |v: &Value| v.get(key).cloned().unwrap_or(Value::Null);
    let in_patch = |v: &Value| {
        patch
            .iter()
            .any(|p| p.is_object() && p.get(key) == v.get(key))
    };
    let place = |v: &Value| original.iter().position(|o| *o == id(v));
    let (named, others): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| v.is_object() && in_patch(v));
    let mut named: Vec<(usize, Value)> = named
        .into_iter()
        .map(|v| {
            let at = patch
                .iter()
                .position(|p| p.get(key) == v.get(key))
                .unwrap_or(usize::MAX);
            (at, v)
        })
        .collect();
    named.sort_by_key(|(at, _)| *at);
    let mut out = Vec::new();
    let mut named = named.into_iter().map(|(_, v)| v).peekable();
    let mut others = others.into_iter().peekable();
    loop {
        let take_named = match (named.peek(), others.peek()) {
            (Some(n), Some(o)) => {
                place(n).map_or(-1, |i| i as i64) < place(o).map_or(-1, |i| i as i64)
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_named {
            named.next()
        } else {
            others.next()
        };
        out.extend(next);
    }
    out
}

/// Removes `$…` directive keys from a value that is inserted as is.
fn strip_directives(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k, strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_directives).collect()),
        other => other,
    }
}

fn display(path: &str) -> String {
    if path.is_empty() {
        ".".into()
    } else {
        path.trim_start_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(orig: Value, patch: Value) -> Value {
        strategic_merge_patch(&orig, &patch, "apps", "Deployment").unwrap()
    }

    #[test]
    fn containers_merge_by_name() {
        let orig = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}
        ]}}}});
        let out = smp(
            orig,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "c:1"}
            ]}}}}),
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([
                // An element new to a list goes before the original ones, as kube-apiserver
                // orders it.
                {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}]},
                {"name": "c", "image": "c:1"}
            ])
        );
    }

    #[test]
    fn scalars_lists_and_directives() {
        let orig = json!({"metadata": {"finalizers": ["a"], "labels": {"x": "1", "y": "2"}}, "spec": {"args": ["1", "2"]}});
        let out = smp(
            orig,
            json!({"metadata": {"finalizers": ["b"], "labels": {"x": null}}, "spec": {"args": ["3"]}}),
        );
        assert_eq!(
            out,
            json!({"metadata": {"finalizers": ["a", "b"], "labels": {"y": "2"}}, "spec": {"args": ["3"]}})
        );
        let out = smp(
            out,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        let out = smp(
            out,
            json!({"metadata": {"labels": {"$patch": "replace", "z": "3"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"z": "3"}));
        let out = smp(
            json!({"spec": {"a": 1, "b": 2}}),
            json!({"spec": {"$retainKeys": ["b", "c"], "c": 3}}),
        );
        assert_eq!(out, json!({"spec": {"b": 2, "c": 3}}));
    }

    #[test]
    fn errors() {
        assert!(strategic_merge_patch(&json!({}), &json!([1]), "", "ConfigMap").is_err());
        let err = strategic_merge_patch(
            &json!({}),
            &json!({"spec": {"$patch": "explode"}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert!(err.to_string().contains("explode"));
        let err = strategic_merge_patch(
            &json!({}),
            &json!({"spec": {"containers": [{"image": "x"}]}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert!(err.to_string().contains("name"), "{err}");
    }
}
