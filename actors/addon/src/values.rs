//! Values: keys, layering, and the JSON patch streams hooks write.
//!
//! A hook sees `{"global": …}` (global hooks) or `{"global": …, "<moduleKey>": …}` (module
//! hooks) and answers with RFC 6902 operations whose paths are relative to that document.
//! Memory patches are kept as a compacted list of operations and replayed on top of the
//! config values whenever values are recalculated, as addon-operator does.

use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use md5::Digest;
use serde_json::{Map, Value};

use crate::hook_config::HookKind;

/// A patch stream that was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatchStreamError {
    /// Not a stream of JSON patch operations.
    #[error("{file}: not a JSON patch stream at item {index}: {message}")]
    Syntax {
        /// Which file (e.g. `VALUES_JSON_PATCH_PATH`).
        file: String,
        /// Zero-based index of the offending item.
        index: usize,
        /// What was wrong.
        message: String,
    },
    /// An operation the reference rejects (`replace`, `move`, …).
    #[error(
        "{file}: operation {index} ({op} {path}) is not allowed; values patches may only use add and remove"
    )]
    Operation {
        /// Which file.
        file: String,
        /// Zero-based index of the operation.
        index: usize,
        /// The op.
        op: String,
        /// Its path.
        path: String,
    },
    /// A path outside what the hook may change.
    #[error("{file}: operation {index} changes {path}, outside this hook's values ({allowed})")]
    Scope {
        /// Which file.
        file: String,
        /// Zero-based index of the operation.
        index: usize,
        /// Its path.
        path: String,
        /// What the hook may change.
        allowed: String,
    },
}

/// The values key of a module: lowerCamel of its kebab name (`my-module` → `myModule`).
pub fn values_key(module: &str) -> String {
    let mut out = String::with_capacity(module.len());
    let mut upper = false;
    for c in module.chars() {
        if c == '-' || c == '_' {
            upper = !out.is_empty();
            continue;
        }
        if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else if out.is_empty() {
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Kebab name of a values key (`myModule` → `my-module`).
pub(crate) fn kebab_name(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for (i, c) in key.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a module name survives the kebab → camel → kebab round trip the reference
/// requires (`my-module` does; `my_module` and `myModule` do not).
pub fn name_round_trips(module: &str) -> bool {
    !module.is_empty() && kebab_name(&values_key(module)) == module
}

/// Parses a values patch file: a JSON stream of operation arrays and/or single operations.
pub fn parse_patch_stream(file: &str, text: &str) -> Result<Vec<PatchOperation>, PatchStreamError> {
    let mut ops = Vec::new();
    let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    for (index, item) in stream.enumerate() {
        let syntax = |message: String| PatchStreamError::Syntax {
            file: file.to_string(),
            index,
            message,
        };
        let item = item.map_err(|e| syntax(e.to_string()))?;
        let items = match item {
            Value::Array(a) => a,
            obj @ Value::Object(_) => vec![obj],
            other => {
                return Err(syntax(format!(
                    "expected an operation object or a list of them, got {other}"
                )));
            }
        };
        for raw in items {
            let index = ops.len();
            let op_name = raw["op"].as_str().unwrap_or_default().to_string();
            let path = raw["path"].as_str().unwrap_or_default().to_string();
            if !matches!(op_name.as_str(), "add" | "remove") {
                if op_name.is_empty() {
                    return Err(PatchStreamError::Syntax {
                        file: file.to_string(),
                        index,
                        message: format!("operation {raw} has no \"op\""),
                    });
                }
                return Err(PatchStreamError::Operation {
                    file: file.to_string(),
                    index,
                    op: op_name,
                    path,
                });
            }
            let op: PatchOperation =
                serde_json::from_value(raw.clone()).map_err(|e| PatchStreamError::Syntax {
                    file: file.to_string(),
                    index,
                    message: format!("{raw}: {e}"),
                })?;
            ops.push(op);
        }
    }
    Ok(ops)
}

fn op_path(op: &PatchOperation) -> String {
    match op {
        PatchOperation::Add(o) => o.path.to_string(),
        PatchOperation::Remove(o) => o.path.to_string(),
        PatchOperation::Replace(o) => o.path.to_string(),
        PatchOperation::Move(o) => o.path.to_string(),
        PatchOperation::Copy(o) => o.path.to_string(),
        PatchOperation::Test(o) => o.path.to_string(),
    }
}

/// Checks that every operation stays within what the hook may change: global hooks
/// `/global/…` and `/<module>Enabled`; module hooks `/<moduleKey>/…`.
pub(crate) fn check_scope(
    file: &str,
    ops: &[PatchOperation],
    kind: HookKind,
    module_key: Option<&str>,
) -> Result<(), PatchStreamError> {
    for (index, op) in ops.iter().enumerate() {
        let path = op_path(op);
        let first = path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let depth = path.trim_start_matches('/').split('/').count();
        let (ok, allowed) = match (kind, module_key) {
            (HookKind::Global, _) => (
                first == "global"
                    || (depth == 1 && first.ends_with("Enabled") && first.len() > "Enabled".len()),
                "/global/… and /<module>Enabled".to_string(),
            ),
            (HookKind::Module, Some(key)) => (first == key, format!("/{key}/…")),
            (HookKind::Module, None) => (false, "nothing".to_string()),
        };
        if !ok || !path.starts_with('/') {
            return Err(PatchStreamError::Scope {
                file: file.to_string(),
                index,
                path,
                allowed,
            });
        }
    }
    Ok(())
}

/// Appends new memory operations to the accumulated list, dropping earlier operations
/// they make irrelevant (any earlier operation on the same path or below it).
pub(crate) fn compact_into(acc: &mut Vec<PatchOperation>, new: &[PatchOperation]) {
    for op in new {
        let path = op_path(op);
        let below = format!("{path}/");
        acc.retain(|old| {
            let p = op_path(old);
            p != path && !p.starts_with(&below)
        });
        acc.push(op.clone());
    }
}

/// Applies memory operations the way addon-operator does: `remove` of a missing path is
/// ignored; `add` creates missing parent objects. Returns the first error, by index.
pub fn apply_memory(doc: &mut Value, ops: &[PatchOperation]) -> Result<(), (usize, String)> {
    for (i, op) in ops.iter().enumerate() {
        match op {
            PatchOperation::Remove(RemoveOperation { path }) => {
                if doc.pointer(path.as_str()).is_some() {
                    json_patch::patch(doc, &Patch(vec![op.clone()]))
                        .map_err(|e| (i, e.to_string()))?;
                }
            }
            PatchOperation::Add(AddOperation { path, .. }) => {
                ensure_parents(doc, path.as_str());
                json_patch::patch(doc, &Patch(vec![op.clone()])).map_err(|e| (i, e.to_string()))?;
            }
            other => json_patch::patch(doc, &Patch(vec![other.clone()]))
                .map_err(|e| (i, e.to_string()))?,
        }
    }
    Ok(())
}

fn ensure_parents(doc: &mut Value, path: &str) {
    let segments: Vec<String> = path
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((_, parents)) = segments.split_last() else {
        return;
    };
    let mut cur = doc;
    for seg in parents {
        let Value::Object(map) = cur else { return };
        cur = map
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Deep-merges `top` into `base`: objects merge key by key, everything else is replaced.
pub(crate) fn merge_into(base: &mut Value, top: &Value) {
    match (base, top) {
        (Value::Object(b), Value::Object(t)) => {
            for (k, v) in t {
                match b.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_into(existing, v)
                    }
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (base, top) => *base = top.clone(),
    }
}

/// Merges layers lowest first into one object.
pub fn layered<'a>(layers: impl IntoIterator<Item = &'a Value>) -> Value {
    let mut out = Value::Object(Map::new());
    for layer in layers {
        if !layer.is_null() {
            merge_into(&mut out, layer);
        }
    }
    out
}

/// md5 hex of the canonical JSON (sorted keys), the reference's values checksum.
pub fn checksum(v: &Value) -> String {
    // serde_json's Map is ordered by key, so to_string is canonical.
    format!("{:x}", md5::Md5::digest(v.to_string().as_bytes()))
}

/// The global documents a module run needs: `VALUES_PATH` and `CONFIG_VALUES_PATH` of the
/// global scope (each `{"global": …}`).
#[derive(Clone, Debug, Default)]
pub(crate) struct GlobalDocs {
    /// Global values document (may also hold root `<key>Enabled` flags).
    pub values: Value,
    /// Global config values document.
    pub config: Value,
    /// The enabled modules in run order: `global.enabledModules` of module hooks'
    /// `VALUES_PATH` (not of Helm's values or any checksum).
    pub enabled_modules: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_and_round_trips() {
        assert_eq!(values_key("my-module"), "myModule");
        assert_eq!(values_key("simple"), "simple");
        assert_eq!(kebab_name("myModule"), "my-module");
        assert!(name_round_trips("my-module"));
        assert!(!name_round_trips("my_module"));
        assert!(!name_round_trips("myModule"));
    }

    #[test]
    fn patch_streams() {
        let text = r#"[{"op":"add","path":"/global/a","value":1}]
{"op":"remove","path":"/global/b"}"#;
        let ops = parse_patch_stream("VALUES_JSON_PATCH_PATH", text).unwrap_or_default();
        assert_eq!(ops.len(), 2);
        assert!(parse_patch_stream("f", "").unwrap_or_default().is_empty());
        let err = parse_patch_stream("f", r#"[{"op":"replace","path":"/global/a","value":1}]"#)
            .unwrap_err();
        assert!(err.to_string().contains("only use add and remove"), "{err}");
        let err = parse_patch_stream("f", "not json").unwrap_err();
        assert!(matches!(err, PatchStreamError::Syntax { .. }), "{err}");
        let err = parse_patch_stream("f", "42").unwrap_err();
        assert!(err.to_string().contains("item 0"), "{err}");
    }

    #[test]
    fn scopes() {
        let ops = |p: &str| {
            parse_patch_stream("f", &format!(r#"{{"op":"add","path":"{p}","value":1}}"#))
                .unwrap_or_default()
        };
        assert!(check_scope("f", &ops("/global/x"), HookKind::Global, None).is_ok());
        assert!(check_scope("f", &ops("/fooEnabled"), HookKind::Global, None).is_ok());
        assert!(check_scope("f", &ops("/foo/x"), HookKind::Global, None).is_err());
        assert!(check_scope("f", &ops("/myMod/x"), HookKind::Module, Some("myMod")).is_ok());
        let err = check_scope("f", &ops("/global/x"), HookKind::Module, Some("myMod")).unwrap_err();
        assert!(err.to_string().contains("/myMod/"), "{err}");
    }

    #[test]
    fn memory_patches_compact_and_apply_leniently() {
        let first = parse_patch_stream("f", r#"[{"op":"add","path":"/global/a/b","value":1},{"op":"add","path":"/global/c","value":2}]"#).unwrap_or_default();
        let second = parse_patch_stream("f", r#"[{"op":"add","path":"/global/a","value":{"z":0}},{"op":"remove","path":"/global/missing"}]"#).unwrap_or_default();
        let mut acc = Vec::new();
        compact_into(&mut acc, &first);
        compact_into(&mut acc, &second);
        assert_eq!(acc.len(), 3, "the add under /global/a was superseded");
        let mut doc = json!({"global": {"keep": true}});
        assert_eq!(apply_memory(&mut doc, &acc), Ok(()));
        assert_eq!(
            doc,
            json!({"global": {"keep": true, "a": {"z": 0}, "c": 2}})
        );
    }

    #[test]
    fn layering_and_checksum() {
        let v = layered([
            &json!({"a": {"b": 1, "c": [1]}}),
            &Value::Null,
            &json!({"a": {"c": [2], "d": 3}}),
        ]);
        assert_eq!(v, json!({"a": {"b": 1, "c": [2], "d": 3}}));
        assert_eq!(checksum(&json!({})), "99914b932bd37a50b983c5e7c90ae93b");
    }
}
