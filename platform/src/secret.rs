//! A Secret as kube-apiserver stores it. Kubernetes knowledge, kept here because the
//! sandbox, which applies it on every write, stands on this crate alone; the binary reaches
//! it through the Kubernetes layer (`bosun_kube::fold_string_data`).

use base64::Engine;
use serde_json::{Map, Value};

/// A Secret's `stringData` folded into `data` (base64, overriding keys of `data`) and
/// dropped, as kube-apiserver stores it.
pub fn fold_string_data(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if let Some(string_data) = map.remove("stringData")
        && let Value::Object(entries) = string_data
        && !entries.is_empty()
    {
        let data = map
            .entry("data")
            .or_insert_with(|| Value::Object(Map::new()));
        if !data.is_object() {
            *data = Value::Object(Map::new());
        }
        if let Some(data) = data.as_object_mut() {
            for (k, v) in entries {
                let text = match v {
                    Value::String(s) => s,
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(k, Value::String(encoded));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_data_is_folded_over_data_and_dropped() {
        let mut s = json!({"data": {"a": "eA==", "b": "eQ=="},
            "stringData": {"b": "hello", "c": "", "d": null, "e": 1}});
        fold_string_data(&mut s);
        assert_eq!(
            s,
            json!({"data": {"a": "eA==", "b": "aGVsbG8=", "c": "", "d": "", "e": "MQ=="}})
        );
        let mut empty = json!({"stringData": {}});
        fold_string_data(&mut empty);
        assert_eq!(empty, json!({}));
    }
}
