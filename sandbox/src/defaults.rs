//! Defaulting and normalisation kube-apiserver applies to built-in objects on every
//! write (create, update, and the result of every patch type): Secret `stringData`,
//! the namespace name label, and the cheap field defaults of Services, Deployments,
//! StatefulSets and DaemonSets. What is not defaulted is listed in `docs/sandbox.md`.

use bosun_platform::fold_string_data;
use serde_json::{Map, Value, json};

use super::resources::ResourceInfo;

/// The label kube-apiserver sets on every namespace (since 1.21) to its name.
pub(crate) const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Applies the defaults of `info`'s kind to `obj`, whose `metadata.name` is set.
pub fn apply(info: &ResourceInfo, obj: &mut Value) {
    if !obj.is_object() {
        return;
    }
    drop_empty(info, obj);
    if info.group == "apps"
        && matches!(
            info.plural.as_str(),
            "deployments" | "statefulsets" | "daemonsets"
        )
        && let Some(map) = obj.as_object_mut()
    {
        // Go's status struct is never absent.
        map.entry("status").or_insert_with(|| json!({}));
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "secrets") => secret(obj),
        ("", "namespaces") => namespace(obj),
        ("", "services") => service(obj),
        ("apps", "deployments") => deployment(obj),
        ("apps", "statefulsets") => stateful_set(obj),
        ("apps", "daemonsets") => daemon_set(obj),
        _ => {}
    }
}

/// Empty maps and lists of a built-in object's metadata and of a ConfigMap's or Secret's
/// data are dropped, as Go's `omitempty` drops them when kube-apiserver stores it.
fn drop_empty(info: &ResourceInfo, obj: &mut Value) {
    let builtin = super::resources::builtin_resources()
        .iter()
        .any(|b| b.group == info.group && b.plural == info.plural);
    if !builtin {
        return;
    }
    let empty = |v: &Value| match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Null => true,
        _ => false,
    };
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
            if meta.get(field).is_some_and(empty) {
                meta.remove(field);
            }
        }
    }
    if info.group.is_empty()
        && (info.plural == "configmaps" || info.plural == "secrets")
        && let Some(map) = obj.as_object_mut()
    {
        for field in ["data", "binaryData"] {
            if map.get(field).is_some_and(empty) {
                map.remove(field);
            }
        }
    }
}

/// `stringData` folded into `data` and `type` defaulted to `Opaque`.
fn secret(obj: &mut Value) {
    fold_string_data(obj);
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let missing_type = map
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if missing_type {
        map.insert("type".into(), json!("Opaque"));
    }
}

/// The `kubernetes.io/metadata.name` label, always the name (a user value is overridden).
fn namespace(obj: &mut Value) {
    let Some(name) = obj["metadata"]["name"].as_str().map(str::to_string) else {
        return;
    };
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(NAMESPACE_NAME_LABEL.into(), json!(name));
    }
}

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.into(), value);
    }
}

/// `type: ClusterIP`, `sessionAffinity: None`, and per port `protocol: TCP` and
/// `targetPort` = `port`. No cluster IP is allocated.
fn service(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(port, "protocol", json!("TCP"));
            if let Some(p) = port.get("port").cloned() {
                set_default(port, "targetPort", p);
            }
        }
    }
}

/// `replicas: 1`, `revisionHistoryLimit: 10`, `progressDeadlineSeconds: 600`, a
/// `RollingUpdate` strategy of 25%/25%. The pod template is not defaulted.
fn deployment(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "progressDeadlineSeconds", json!(600));
    rolling_update(
        spec,
        "strategy",
        json!({"maxUnavailable": "25%", "maxSurge": "25%"}),
    );
}

/// `replicas: 1`, `revisionHistoryLimit: 10`, `podManagementPolicy: OrderedReady`, a
/// `RollingUpdate` strategy with `partition: 0`, and the claim retention policy `Retain`
/// for both cases (`kubectl rollout status` refuses a StatefulSet without a strategy type).
fn stateful_set(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "podManagementPolicy", json!("OrderedReady"));
    set_default(
        spec,
        "persistentVolumeClaimRetentionPolicy",
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    );
    rolling_update(
        spec,
        "updateStrategy",
        json!({"partition": 0, "maxUnavailable": 1}),
    );
}

/// `revisionHistoryLimit: 10` and a `RollingUpdate` strategy of one unavailable, no surge.
fn daemon_set(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "revisionHistoryLimit", json!(10));
    rolling_update(
        spec,
        "updateStrategy",
        json!({"maxUnavailable": 1, "maxSurge": 0}),
    );
}

/// `field: {type: RollingUpdate, rollingUpdate: <rolling>}` where the type is missing or
/// `RollingUpdate` without its settings.
fn rolling_update(spec: &mut Map<String, Value>, field: &str, rolling: Value) {
    set_default(spec, field, json!({"type": "RollingUpdate"}));
    if let Some(strategy) = spec.get_mut(field).and_then(Value::as_object_mut) {
        set_default(strategy, "type", json!("RollingUpdate"));
        if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
            set_default(strategy, "rollingUpdate", rolling);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(group: &str, plural: &str) -> ResourceInfo {
        super::super::resources::builtin_resources()
            .into_iter()
            .find(|r| r.group == group && r.plural == plural)
            .expect("built-in resource")
    }

    #[test]
    fn secret_string_data_is_folded_over_data() {
        let mut s = json!({"metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eQ=="},
            "stringData": {"b": "hello", "c": ""}});
        apply(&info("", "secrets"), &mut s);
        assert_eq!(s["data"], json!({"a": "eA==", "b": "aGVsbG8=", "c": ""}));
        assert!(s.get("stringData").is_none());
        assert_eq!(s["type"], "Opaque");
    }

    #[test]
    fn namespace_label_overrides_the_user_value() {
        let mut ns =
            json!({"metadata": {"name": "n", "labels": {NAMESPACE_NAME_LABEL: "x", "a": "b"}}});
        apply(&info("", "namespaces"), &mut ns);
        assert_eq!(
            ns["metadata"]["labels"],
            json!({NAMESPACE_NAME_LABEL: "n", "a": "b"})
        );
    }

    #[test]
    fn workloads_get_kube_apiserver_s_strategies() {
        let mut sts = json!({"metadata": {"name": "s"}, "spec": {"serviceName": "s"}});
        apply(&info("apps", "statefulsets"), &mut sts);
        assert_eq!(
            sts["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 1}})
        );
        assert_eq!(sts["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(sts["spec"]["replicas"], 1);
        let mut on_delete =
            json!({"metadata": {"name": "s"}, "spec": {"updateStrategy": {"type": "OnDelete"}}});
        apply(&info("apps", "statefulsets"), &mut on_delete);
        assert_eq!(
            on_delete["spec"]["updateStrategy"],
            json!({"type": "OnDelete"})
        );
        let mut ds = json!({"metadata": {"name": "d"}, "spec": {}});
        apply(&info("apps", "daemonsets"), &mut ds);
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
    }
}
