//! `deploy/crds/metacontroller.yaml` declares the three metacontroller CRDs as users'
//! existing objects and tools expect them: names, scopes, short names, the status
//! subresource, defaults, and a schema that accepts every field of a full controller.

use std::collections::BTreeMap;

use serde_json::{Value, json};

fn crds() -> BTreeMap<String, Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crds/metacontroller.yaml"
    );
    let text = std::fs::read_to_string(path).expect("read the CRD file");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("valid YAML");
    docs.into_iter()
        .filter(|d| !d.is_null())
        .map(|d| {
            let name = d["metadata"]["name"].as_str().expect("a name").to_string();
            (name, d)
        })
        .collect()
}

fn schema(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

/// Every field of `value` is declared by `schema` with a matching type, and every
/// required field is present. Returns the problems, each with its path.
fn undeclared(schema: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
    // The API server validates `metadata` itself; unknown fields elsewhere are pruned.
    if schema["x-kubernetes-preserve-unknown-fields"] == json!(true) || path == ".metadata" {
        return;
    }
    let ty = schema["type"].as_str().unwrap_or("");
    match (ty, value) {
        ("object", Value::Object(fields)) => {
            for required in schema["required"].as_array().into_iter().flatten() {
                let required = required.as_str().unwrap_or("");
                if !fields.contains_key(required) {
                    problems.push(format!("{path}.{required}: required but missing"));
                }
            }
            for (key, v) in fields {
                let sub = match schema["properties"].get(key) {
                    Some(s) => s,
                    None if schema["additionalProperties"].is_object() => {
                        &schema["additionalProperties"]
                    }
                    None => {
                        problems.push(format!("{path}.{key}: not declared"));
                        continue;
                    }
                };
                undeclared(sub, v, &format!("{path}.{key}"), problems);
            }
        }
        ("array", Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                undeclared(&schema["items"], item, &format!("{path}[{i}]"), problems);
            }
        }
        ("string", Value::String(s)) => {
            if let Some(allowed) = schema["enum"].as_array()
                && !allowed.contains(&json!(s))
            {
                problems.push(format!("{path}: {s:?} not in {allowed:?}"));
            }
        }
        ("integer", v) if v.is_i64() => {}
        ("boolean", Value::Bool(_)) => {}
        (ty, v) => problems.push(format!("{path}: expected {ty}, got {v}")),
    }
}

fn assert_declared(crd: &Value, object: &Value) {
    let mut problems = Vec::new();
    undeclared(schema(crd), object, "", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A webhook using every field.
fn webhook() -> Value {
    json!({
        "url": "https://hooks.example.com/sync",
        "timeout": "10s",
        "path": "/sync",
        "service": {"name": "hooks", "namespace": "ops", "port": 8443, "protocol": "https"},
        "etag": {"enabled": true, "cacheTimeoutSeconds": 60, "cacheCleanupSeconds": 300},
        "responseUnMarshallMode": "strict",
        "caBundle": {"inline": "PEM",
                     "secretRef": {"name": "ca", "namespace": "ops", "key": "ca.crt"},
                     "configMapRef": {"name": "ca", "namespace": "ops", "key": "ca.crt"}},
        "clientTLS": {"secretRef": {"name": "tls", "namespace": "ops"},
                      "certKey": "tls.crt", "privateKeyKey": "tls.key"},
        "authorization": {"type": "Bearer",
                          "secretRef": {"name": "token", "namespace": "ops", "key": "token"}},
        "basicAuth": {"secretRef": {"name": "basic", "namespace": "ops"},
                      "usernameKey": "username", "passwordKey": "password"},
    })
}

fn endpoint_config() -> Value {
    let mut c = webhook();
    let c = c.as_object_mut().expect("object");
    for key in [
        "url",
        "timeout",
        "path",
        "service",
        "etag",
        "responseUnMarshallMode",
    ] {
        c.remove(key);
    }
    c.insert("host".into(), json!("hooks.example.com:443"));
    Value::Object(c.clone())
}

fn selector() -> Value {
    json!({"matchLabels": {"app": "x"},
           "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]})
}

#[test]
fn the_three_crds_have_metacontrollers_names_and_scopes() {
    let crds = crds();
    let expected = [
        (
            "compositecontrollers.metacontroller.k8s.io",
            "CompositeController",
            "compositecontroller",
            "Cluster",
            json!(["cc", "cctl"]),
        ),
        (
            "decoratorcontrollers.metacontroller.k8s.io",
            "DecoratorController",
            "decoratorcontroller",
            "Cluster",
            json!(["dec", "decorators"]),
        ),
        (
            "controllerrevisions.metacontroller.k8s.io",
            "ControllerRevision",
            "controllerrevision",
            "Namespaced",
            Value::Null,
        ),
    ];
    assert_eq!(crds.len(), expected.len());
    for (name, kind, singular, scope, short_names) in expected {
        let crd = crds.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1", "{name}");
        assert_eq!(crd["kind"], "CustomResourceDefinition", "{name}");
        assert_eq!(
            crd["metadata"]["annotations"]["api-approved.kubernetes.io"],
            "unapproved, request not yet submitted",
            "{name}"
        );
        let spec = &crd["spec"];
        assert_eq!(spec["group"], "metacontroller.k8s.io");
        assert_eq!(spec["scope"], scope, "{name}");
        assert_eq!(spec["names"]["kind"], kind);
        assert_eq!(spec["names"]["listKind"], format!("{kind}List"));
        assert_eq!(spec["names"]["singular"], singular);
        assert_eq!(
            format!(
                "{}.metacontroller.k8s.io",
                spec["names"]["plural"].as_str().expect("plural")
            ),
            name
        );
        assert_eq!(spec["names"]["shortNames"], short_names, "{name}");
        let versions = spec["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 1, "{name}");
        let v = &versions[0];
        assert_eq!(v["name"], "v1alpha1");
        assert_eq!(v["served"], true);
        assert_eq!(v["storage"], true);
        assert_eq!(v["subresources"], json!({"status": {}}), "{name}");
        assert_eq!(schema(crd)["type"], "object");
    }
}

#[test]
fn a_full_composite_controller_is_declared_by_the_schema() {
    let crds = crds();
    let crd = &crds["compositecontrollers.metacontroller.k8s.io"];
    let hook = json!({"version": "v2", "webhook": webhook()});
    let cc = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": "bluegreen"},
        "spec": {
            "parentResource": {
                "apiVersion": "ctl.enisoc.com/v1",
                "resource": "bluegreendeployments",
                "revisionHistory": {"fieldPaths": ["spec.template"]},
                "labelSelector": selector(),
                "ignoreStatusChanges": true,
            },
            "childResources": [
                {"apiVersion": "v1", "resource": "services",
                 "updateStrategy": {"method": "InPlace"}},
                {"apiVersion": "apps/v1", "resource": "replicasets",
                 "updateStrategy": {"method": "RollingRecreate",
                                    "statusChecks": {"conditions": [
                                        {"type": "Ready", "status": "True", "reason": "Fine"}]}}},
            ],
            "hooks": {"sync": hook, "finalize": hook, "customize": hook,
                      "preUpdateChild": hook, "postUpdateChild": hook},
            "endpointConfigs": [endpoint_config()],
            "resyncPeriodSeconds": 30,
            "generateSelector": true,
        },
        "status": {},
    });
    assert_declared(crd, &cc);

    // A field the schema does not know is reported with its path.
    let mut wrong = cc.clone();
    wrong["spec"]["hooks"]["sync"]["webhook"]["responseUnmarshallMode"] = json!("strict");
    let mut problems = Vec::new();
    undeclared(schema(crd), &wrong, "", &mut problems);
    assert_eq!(
        problems,
        [".spec.hooks.sync.webhook.responseUnmarshallMode: not declared"]
    );
}

#[test]
fn a_full_decorator_controller_is_declared_by_the_schema() {
    let crds = crds();
    let crd = &crds["decoratorcontrollers.metacontroller.k8s.io"];
    let hook = json!({"version": "v1", "webhook": webhook()});
    let dc = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "DecoratorController",
        "metadata": {"name": "service-per-pod"},
        "spec": {
            "resources": [{
                "apiVersion": "apps/v1", "resource": "statefulsets",
                "labelSelector": selector(),
                "annotationSelector": {"matchAnnotations": {"a": "b"},
                                       "matchExpressions": [{"key": "k", "operator": "Exists"}]},
                "ignoreStatusChanges": false,
            }],
            "attachments": [{"apiVersion": "v1", "resource": "services",
                             "updateStrategy": {"method": "Recreate"}}],
            "hooks": {"sync": hook, "finalize": hook, "customize": hook},
            "endpointConfigs": [endpoint_config()],
            "resyncPeriodSeconds": 5,
        },
    });
    assert_declared(crd, &dc);
}

#[test]
fn a_controller_revision_is_declared_by_the_schema() {
    let crds = crds();
    let crd = &crds["controllerrevisions.metacontroller.k8s.io"];
    let revision = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "ControllerRevision",
        "metadata": {"name": "bluegreendeployments.ctl.enisoc.com-0123", "namespace": "ns"},
        "parentPatch": {"spec": {"anything": {"goes": [1, 2]}}},
        "children": [{"apiGroup": "apps", "kind": "ReplicaSet", "names": ["ns/a"]}],
    });
    assert_declared(crd, &revision);
}

#[test]
fn defaults_match_metacontroller() {
    let crds = crds();
    let spec = &schema(&crds["compositecontrollers.metacontroller.k8s.io"])["properties"]["spec"];
    for hook in [
        "sync",
        "finalize",
        "customize",
        "preUpdateChild",
        "postUpdateChild",
    ] {
        let hook = &spec["properties"]["hooks"]["properties"][hook];
        assert_eq!(hook["properties"]["version"]["default"], "v1");
        assert_eq!(hook["properties"]["version"]["enum"], json!(["v1", "v2"]));
        let webhook = &hook["properties"]["webhook"]["properties"];
        assert_eq!(
            webhook["authorization"]["properties"]["type"]["default"],
            "Bearer"
        );
        assert_eq!(
            webhook["basicAuth"]["properties"]["usernameKey"]["default"],
            "username"
        );
        assert_eq!(
            webhook["basicAuth"]["properties"]["passwordKey"]["default"],
            "password"
        );
        assert_eq!(
            webhook["clientTLS"]["properties"]["certKey"]["default"],
            "tls.crt"
        );
        assert_eq!(
            webhook["clientTLS"]["properties"]["privateKeyKey"]["default"],
            "tls.key"
        );
        for source in ["secretRef", "configMapRef"] {
            assert_eq!(
                webhook["caBundle"]["properties"][source]["properties"]["key"]["default"],
                "ca.crt"
            );
        }
        assert_eq!(webhook["timeout"]["format"], "duration");
    }
    let decorator = &crds["decoratorcontrollers.metacontroller.k8s.io"];
    assert_eq!(
        schema(decorator)["properties"]["spec"]["required"],
        json!(["resources"])
    );
    assert_eq!(spec["required"], json!(["parentResource"]));
}
