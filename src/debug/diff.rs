//! `module render --diff`: each rendered object as it is live against what a server-side
//! apply of it would leave, as unified diffs of YAML, the way `kubectl diff` prints them.
//!
//! ```text
//!   rendered objects ─► Releases::preview (GET + dry-run apply) ─► ObjectPreview{live, merged}
//!                                                                     │
//!                                   "--- LIVE …\n+++ MERGED …\n@@ …" ◄─┘ (here: no IO)
//! ```

use bosun_addon::ports::ObjectPreview;
use serde_json::{Map, Value, json};

use super::views::View;

/// The answer when every object is as the chart says.
pub const NO_DIFF: &str = "No diff found";

/// Lines of context around each change, as `diff -u`.
const CONTEXT: usize = 3;

/// Maps with their keys sorted at every level, so both sides print in the same order.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&m[k])))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// What is compared: the object without `metadata.managedFields` (as `kubectl diff`), and
/// with `metadata.generation` and `metadata.resourceVersion` taken from `base` — a dry run
/// may bump them, which is no drift.
fn comparable(obj: &Value, base: Option<&Value>) -> Value {
    let mut out = obj.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        for volatile in ["generation", "resourceVersion"] {
            match base.and_then(|b| b["metadata"].get(volatile)) {
                Some(v) => meta.insert(volatile.into(), v.clone()),
                None => meta.remove(volatile),
            };
        }
    }
    sorted(&out)
}

fn yaml(obj: &Value, id: &str) -> Result<String, String> {
    serde_saphyr::to_string(obj).map_err(|e| format!("cannot write {id} as YAML: {e}"))
}

/// The unified diff of one object, `None` when live and merged agree. An object that is
/// not in the cluster is all added.
pub fn object_diff(preview: &ObjectPreview) -> Result<Option<String>, String> {
    let id = &preview.id;
    let live = match &preview.live {
        Some(l) => yaml(&comparable(l, Some(l)), id)?,
        None => String::new(),
    };
    let merged = yaml(&comparable(&preview.merged, preview.live.as_ref()), id)?;
    if live == merged {
        return Ok(None);
    }
    let diff = similar::TextDiff::from_lines(&live, &merged);
    let text = diff
        .unified_diff()
        .context_radius(CONTEXT)
        .header(&format!("LIVE {id}"), &format!("MERGED {id}"))
        .to_string();
    Ok(Some(text))
}

/// `/module/<name>/render?diff=true`: the diffs of the objects that differ (text), or
/// [`NO_DIFF`]; as data, `[{"object", "diff"}]` of those objects.
pub fn diff_view(previews: &[ObjectPreview]) -> Result<View, String> {
    let mut text = String::new();
    let mut data = Vec::new();
    for p in previews {
        if let Some(d) = object_diff(p)? {
            text.push_str(&d);
            if !d.ends_with('\n') {
                text.push('\n');
            }
            data.push(json!({"object": p.id, "diff": d}));
        }
    }
    if data.is_empty() {
        text = format!("{NO_DIFF}\n");
    }
    Ok(View {
        data: Value::Array(data),
        text: Some(text),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(data: Value, rv: &str, generation: Option<i64>) -> Value {
        let mut o = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "demo",
                "namespace": "default",
                "resourceVersion": rv,
                "managedFields": [{"manager": "helm", "operation": "Update"}],
            },
            "data": data,
        });
        if let Some(g) = generation {
            o["metadata"]["generation"] = json!(g);
        }
        o
    }

    fn preview(live: Option<Value>, merged: Value) -> ObjectPreview {
        ObjectPreview {
            id: "v1/ConfigMap default/demo".into(),
            live,
            merged,
        }
    }

    #[test]
    fn a_changed_field_is_a_minus_and_a_plus_line() {
        let live = cm(json!({"color": "blue", "size": "L"}), "7", None);
        let mut merged = cm(json!({"size": "L", "color": "red"}), "8", Some(2));
        merged["metadata"]["managedFields"] = json!([{"manager": "bosun"}]);
        let d = object_diff(&preview(Some(live), merged))
            .expect("diff")
            .expect("a difference");
        assert!(
            d.starts_with(
                "--- LIVE v1/ConfigMap default/demo\n+++ MERGED v1/ConfigMap default/demo\n@@ "
            ),
            "{d}"
        );
        let changed: Vec<&str> = d
            .lines()
            .skip(2)
            .filter(|l| l.starts_with('-') || l.starts_with('+'))
            .collect();
        assert_eq!(changed, ["-  color: blue", "+  color: red"], "{d}");
        assert!(!d.contains("managedFields") && !d.contains("resourceVersion"));
    }

    #[test]
    fn dry_run_bookkeeping_and_key_order_are_no_drift() {
        let live = cm(json!({"a": "1", "b": "2"}), "7", Some(1));
        let mut merged = cm(json!({"b": "2", "a": "1"}), "9", Some(3));
        merged["metadata"]["managedFields"] = json!([]);
        assert_eq!(object_diff(&preview(Some(live.clone()), merged)), Ok(None));
        let view = diff_view(&[preview(Some(live.clone()), live)]).expect("view");
        assert_eq!(view.text.as_deref(), Some("No diff found\n"));
        assert_eq!(view.data, json!([]));
    }

    #[test]
    fn a_missing_object_is_all_added() {
        let merged = cm(json!({"a": "1"}), "", None);
        let view = diff_view(&[preview(None, merged)]).expect("view");
        let text = view.text.unwrap_or_default();
        assert!(text.contains("@@ -0,0 +1,"), "{text}");
        let body: Vec<&str> = text.lines().skip(3).collect();
        assert!(
            !body.is_empty() && body.iter().all(|l| l.starts_with('+')),
            "{text}"
        );
        assert!(text.contains("+kind: ConfigMap"), "{text}");
        assert_eq!(view.data[0]["object"], "v1/ConfigMap default/demo");
    }
}
