//! metacontroller's examples and integration cases end to end: a real sandbox API server,
//! `bosun run` with no modules, and webhooks served on 127.0.0.1: the examples' hooks are
//! the ports in `bosun_lambda::fakes::examples` (the in-process tests in
//! `actors/lambda/tests/examples.rs` answer with them too), the integration cases' are
//! written here. Each test plays one scenario users of metacontroller rely on and checks
//! what they would notice.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::webhooks::{Hooks, get, post_ok};
use crate::common::{Operator, Sandbox, wait_for, workdir};
use bosun_lambda::fakes::examples::{self, ordinal, running_and_ready};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// A CRD `<plural>.example.com` (version v1) with the status subresource.
fn crd(kind: &str, plural: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

fn delete(sb: &Sandbox, path: &str) {
    let (code, answer) = sb.request("DELETE", path, "", "");
    assert!(code == 200 || code == 202, "DELETE {path}: {code} {answer}");
}

/// GET, change, PUT; again on a conflict.
fn update(sb: &Sandbox, path: &str, change: impl Fn(&mut Value)) -> Value {
    for _ in 0..20 {
        let mut object = get(sb, path).unwrap_or_else(|| panic!("{path} not found"));
        change(&mut object);
        let (code, answer) = sb.put(path, &object);
        match code {
            200 => return answer,
            409 => continue,
            _ => panic!("PUT {path}: {code} {answer}"),
        }
    }
    panic!("PUT {path}: conflicts all along");
}

/// Starts bosun with no modules and no global hooks: only the lambda controllers work.
fn bosun(sb: &Sandbox, work: &std::path::Path, extra: &[(&str, &str)]) -> Operator {
    let hooks = work.join("global-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    std::fs::create_dir_all(work.join("modules")).expect("modules dir");
    Operator::start_with(sb, &hooks, work, extra)
}

fn wait_served(sb: &Sandbox, path: &str) {
    wait_for(&format!("{path} served"), WAIT, || sb.get(path).0 == 200);
}

/// Creates the CRD and waits until its resource is served.
fn install_crd(sb: &Sandbox, kind: &str, plural: &str, scope: &str) {
    post_ok(
        sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd(kind, plural, scope),
    );
    wait_served(sb, &format!("/apis/example.com/v1/{plural}"));
}

/// Creates a CompositeController once bosun has installed its CRDs.
fn composite_controller(sb: &Sandbox, object: Value) {
    wait_served(
        sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    post_ok(
        sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &object,
    );
}

/// Creates a DecoratorController once bosun has installed its CRDs.
fn decorator_controller(sb: &Sandbox, object: Value) {
    wait_served(
        sb,
        "/apis/metacontroller.k8s.io/v1alpha1/decoratorcontrollers",
    );
    post_ok(
        sb,
        "/apis/metacontroller.k8s.io/v1alpha1/decoratorcontrollers",
        &object,
    );
}

fn namespace(sb: &Sandbox, name: &str, labels: Value) {
    post_ok(
        sb,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
    );
}

fn configmap(sb: &Sandbox, ns: &str, name: &str, labels: Value, data: Value) {
    post_ok(
        sb,
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": data}),
    );
}

fn cm_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/configmaps/{name}")
}

fn keys(map: &Value) -> Vec<String> {
    map.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn owned_by(object: &Value, owner: &Value) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == owner["metadata"]["uid"] && r["controller"] == true)
        })
}

// ---------------------------------------------------------------------------------------
// Examples
// ---------------------------------------------------------------------------------------

/// Webhooks answering `/customize` with an example's customize hook and every other path
/// with its sync hook.
fn serve_example(sync: fn(&Value) -> Value, customize: fn(&Value) -> Value) -> Hooks {
    Hooks::serve(move |path, req| {
        let answer = if path == "/customize" {
            customize(req)
        } else {
            sync(req)
        };
        (200, answer)
    })
}

/// configmappropagation: a cluster-scoped parent copies one ConfigMap (a related object
/// named by the customize hook) into the namespaces it lists. Parents outside the
/// controller's `parentResource.labelSelector` are left alone; a change of the source
/// reaches the copies; once the source is gone the copies go too.
#[test]
fn configmappropagation_copies_a_configmap_into_listed_namespaces() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = serve_example(
        examples::configmappropagation_sync,
        examples::configmappropagation_customize,
    );
    for ns in ["original", "one", "two", "three", "four"] {
        namespace(&sb, ns, json!({}));
    }
    configmap(
        &sb,
        "original",
        "settings",
        json!({}),
        json!({"some": "value", "other": "value"}),
    );
    install_crd(
        &sb,
        "ConfigMapPropagation",
        "configmappropagations",
        "Cluster",
    );
    let op = bosun(&sb, work.path(), &[]);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "configmap-propagation-controller"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "configmappropagations",
                                   "labelSelector": {"matchLabels": {"version": "v1"}}},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "sync": {"webhook": {"url": format!("{}/sync", hooks.url)}},
                    "customize": {"webhook": {"url": format!("{}/customize", hooks.url)}}
                }
            }
        }),
    );
    let parents = "/apis/example.com/v1/configmappropagations";
    post_ok(
        &sb,
        parents,
        &json!({"apiVersion": "example.com/v1", "kind": "ConfigMapPropagation",
                "metadata": {"name": "settings-propagation", "labels": {"version": "v1"}},
                "spec": {"sourceName": "settings", "sourceNamespace": "original",
                         "targetNamespaces": ["one", "two", "three"]}}),
    );
    post_ok(
        &sb,
        parents,
        &json!({"apiVersion": "example.com/v1", "kind": "ConfigMapPropagation",
                "metadata": {"name": "settings-propagation-unmanaged", "labels": {"version": "v2"}},
                "spec": {"sourceName": "settings", "sourceNamespace": "original",
                         "targetNamespaces": ["four"]}}),
    );
    op.wait("copies in one, two and three", WAIT, || {
        ["one", "two", "three"].iter().all(|ns| {
            get(&sb, &cm_path(ns, "settings")).is_some_and(|c| c["data"]["some"] == "value")
        })
    });
    let parent_path = format!("{parents}/settings-propagation");
    op.wait("status.actual_copies = 3", WAIT, || {
        get(&sb, &parent_path).is_some_and(|p| {
            p["status"]["actual_copies"] == 3 && p["status"]["expected_copies"] == 3
        })
    });
    let parent = get(&sb, &parent_path).expect("parent");
    let copy = get(&sb, &cm_path("two", "settings")).expect("copy");
    assert!(owned_by(&copy, &parent), "{copy}");
    // The customize hook saw the parent; the sync hook saw the source under `ns/name`.
    let customize = hooks.calls_for("/customize", "settings-propagation");
    assert!(!customize.is_empty());
    assert_eq!(customize[0]["controller"]["kind"], "CompositeController");
    // The parent outside parentResource.labelSelector is not touched.
    assert!(
        hooks
            .calls_for("/sync", "settings-propagation-unmanaged")
            .is_empty()
            && hooks
                .calls_for("/customize", "settings-propagation-unmanaged")
                .is_empty(),
        "the unselected parent was synced"
    );
    assert!(get(&sb, &cm_path("four", "settings")).is_none());
    // Labelled into the selector later: now it is managed.
    update(
        &sb,
        &format!("{parents}/settings-propagation-unmanaged"),
        |p| p["metadata"]["labels"]["version"] = json!("v1"),
    );
    op.wait("the copy in four once the parent is selected", WAIT, || {
        get(&sb, &cm_path("four", "settings")).is_some()
    });

    // A change of the source (a related object) reaches every copy.
    update(&sb, &cm_path("original", "settings"), |c| {
        c["data"]["some"] = json!("changed")
    });
    op.wait("the copies follow the source", WAIT, || {
        ["one", "two", "three"].iter().all(|ns| {
            get(&sb, &cm_path(ns, "settings")).is_some_and(|c| c["data"]["some"] == "changed")
        })
    });
    // Someone edits a copy: the propagated key is put back, their own key stays (the
    // 3-way apply leaves fields it never set alone).
    update(&sb, &cm_path("one", "settings"), |c| {
        c["data"]["some"] = json!("edited");
        c["data"]["mine"] = json!("kept");
    });
    op.wait("the edited copy put back, the extra key kept", WAIT, || {
        get(&sb, &cm_path("one", "settings"))
            .is_some_and(|c| c["data"]["some"] == "changed" && c["data"]["mine"] == "kept")
    });
    // A namespace taken off the list loses its copy.
    update(&sb, &parent_path, |p| {
        p["spec"]["targetNamespaces"] = json!(["one", "two"])
    });
    op.wait("the copy in three removed", WAIT, || {
        get(&sb, &cm_path("three", "settings")).is_none()
    });
    op.wait("status.expected_copies = 2", WAIT, || {
        get(&sb, &parent_path).is_some_and(|p| {
            p["status"]["actual_copies"] == 2 && p["status"]["expected_copies"] == 2
        })
    });
    // The source deleted: the copies are cleaned up.
    delete(&sb, &cm_path("original", "settings"));
    op.wait("the copies removed", WAIT, || {
        ["one", "two", "three", "four"]
            .iter()
            .all(|ns| get(&sb, &cm_path(ns, "settings")).is_none())
    });
}

/// globalconfigmap: a cluster-scoped parent copies a ConfigMap into every namespace (all
/// Namespaces are related objects, `labelSelector: {}`); a namespace created later gets
/// its copy too.
#[test]
fn globalconfigmap_copies_a_configmap_into_every_namespace() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = serve_example(
        examples::globalconfigmap_sync,
        examples::globalconfigmap_customize,
    );
    for ns in ["global", "first", "second"] {
        namespace(&sb, ns, json!({}));
    }
    configmap(
        &sb,
        "global",
        "globalsettings",
        json!({}),
        json!({"some": "value"}),
    );
    install_crd(&sb, "GlobalConfigMap", "globalconfigmaps", "Cluster");
    let op = bosun(&sb, work.path(), &[]);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "globalconfigmap-controller"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "globalconfigmaps"},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "sync": {"webhook": {"url": format!("{}/sync", hooks.url)}},
                    "customize": {"webhook": {"url": format!("{}/customize", hooks.url)}}
                }
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/globalconfigmaps",
        &json!({"apiVersion": "example.com/v1", "kind": "GlobalConfigMap",
                "metadata": {"name": "globalsettings"},
                "spec": {"sourceName": "globalsettings", "sourceNamespace": "global"}}),
    );
    op.wait("copies in first, second and default", WAIT, || {
        ["first", "second", "default"]
            .iter()
            .all(|ns| get(&sb, &cm_path(ns, "globalsettings")).is_some())
    });
    op.wait("the parent's status", WAIT, || {
        get(&sb, "/apis/example.com/v1/globalconfigmaps/globalsettings")
            .is_some_and(|p| p["status"]["working"] == "fine")
    });
    // v1 keys of a cluster-scoped parent: `ns/name` for namespaced objects, the name for
    // cluster-scoped ones.
    let last = hooks.calls_for("/sync", "globalsettings");
    let related = &last.last().expect("a sync")["related"];
    assert!(
        keys(&related["ConfigMap.v1"]) == ["global/globalsettings"],
        "{related}"
    );
    assert!(keys(&related["Namespace.v1"]).contains(&"first".to_string()));
    // A namespace created later gets its copy (a related object appeared).
    namespace(&sb, "third", json!({}));
    op.wait("a copy in the new namespace", WAIT, || {
        get(&sb, &cm_path("third", "globalsettings")).is_some_and(|c| c["data"]["some"] == "value")
    });
    assert!(
        get(&sb, &cm_path("global", "globalsettings"))
            .is_some_and(|c| c["metadata"]["ownerReferences"].is_null())
    );
}

/// secretpropagation with v2 hooks: the Secrets to share are chosen by label in the
/// namespaces a namespaceSelector picks; the targets are the namespaces a label selector
/// picks. Labelling a namespace adds a target; unlabelling removes its copies.
#[test]
fn secretpropagation_shares_selected_secrets_into_selected_namespaces() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = serve_example(
        examples::secretpropagation_sync,
        examples::secretpropagation_customize,
    );
    namespace(&sb, "omega", json!({"secrets": "source"}));
    namespace(&sb, "elsewhere", json!({}));
    namespace(&sb, "alpha", json!({"propagate": "true"}));
    namespace(&sb, "beta", json!({"propagate": "true"}));
    namespace(&sb, "gamma", json!({}));
    let secret = |ns: &str, name: &str| {
        post_ok(
            &sb,
            &format!("/api/v1/namespaces/{ns}/secrets"),
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "namespace": ns, "labels": {"share": "yes"}},
                    "data": {"some": "dmFsdWUK"}}),
        );
    };
    secret("omega", "shareable");
    // The same label in a namespace the namespaceSelector does not pick.
    secret("elsewhere", "private");
    install_crd(&sb, "SecretPropagation", "secretpropagations", "Cluster");
    let op = bosun(&sb, work.path(), &[]);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "secret-propagation-controller"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "secretpropagations"},
                "childResources": [{"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "sync": {"version": "v2", "webhook": {"url": format!("{}/sync", hooks.url)}},
                    "customize": {"version": "v2", "webhook": {"url": format!("{}/customize", hooks.url)}}
                }
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/secretpropagations",
        &json!({"apiVersion": "example.com/v1", "kind": "SecretPropagation",
                "metadata": {"name": "secret-propagation"},
                "spec": {"secretSelector": {"matchLabels": {"share": "yes"}},
                         "sourceNamespaceSelector": {"matchLabels": {"secrets": "source"}},
                         "targetNamespaceLabelSelector": {"matchLabels": {"propagate": "true"}}}}),
    );
    let secret_path = |ns: &str, name: &str| format!("/api/v1/namespaces/{ns}/secrets/{name}");
    op.wait("the secret in alpha and beta", WAIT, || {
        ["alpha", "beta"]
            .iter()
            .all(|ns| get(&sb, &secret_path(ns, "shareable")).is_some())
    });
    let parent_path = "/apis/example.com/v1/secretpropagations/secret-propagation";
    op.wait("status working: fine", WAIT, || {
        get(&sb, parent_path).is_some_and(|p| p["status"]["working"] == "fine")
    });
    let parent = get(&sb, parent_path).expect("parent");
    // v2 keys: `namespace/name`; the secret outside the selected namespaces is not related.
    assert_eq!(parent["status"]["secrets"], json!(["omega/shareable"]));
    assert!(get(&sb, &secret_path("gamma", "shareable")).is_none());
    assert!(get(&sb, &secret_path("alpha", "private")).is_none());

    // gamma labelled: a target more. beta unlabelled: its copy goes.
    update(&sb, "/api/v1/namespaces/gamma", |n| {
        n["metadata"]["labels"] = json!({"propagate": "true"})
    });
    op.wait("the secret in gamma", WAIT, || {
        get(&sb, &secret_path("gamma", "shareable")).is_some()
    });
    update(&sb, "/api/v1/namespaces/beta", |n| {
        n["metadata"]["labels"] = json!({})
    });
    op.wait("the copy in beta removed", WAIT, || {
        get(&sb, &secret_path("beta", "shareable")).is_none()
    });
    assert!(get(&sb, &secret_path("alpha", "shareable")).is_some());
}

/// secretpropagation as upstream runs it (v1 hooks): one Secret named in the parent is
/// copied into the namespaces its label selector picks; v1 keys of a cluster-scoped
/// parent are `namespace/name`.
#[test]
fn secretpropagation_v1_copies_a_secret_into_labelled_namespaces() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = serve_example(
        examples::secretpropagation_v1_sync,
        examples::secretpropagation_v1_customize,
    );
    namespace(&sb, "omega", json!({}));
    namespace(&sb, "alpha", json!({"propagate": "true"}));
    namespace(&sb, "beta", json!({"propagate": "true"}));
    namespace(&sb, "gamma", json!({}));
    post_ok(
        &sb,
        "/api/v1/namespaces/omega/secrets",
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "shareable", "namespace": "omega"},
                "data": {"some": "dmFsdWUK", "other": "dmFsdWUK"}}),
    );
    install_crd(&sb, "SecretPropagation", "secretpropagations", "Cluster");
    let op = bosun(&sb, work.path(), &[]);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "secret-propagation-controller"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "secretpropagations"},
                "childResources": [{"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "sync": {"webhook": {"url": format!("{}/sync", hooks.url)}},
                    "customize": {"webhook": {"url": format!("{}/customize", hooks.url)}}
                }
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/secretpropagations",
        &json!({"apiVersion": "example.com/v1", "kind": "SecretPropagation",
                "metadata": {"name": "secret-propagation"},
                "spec": {"sourceName": "shareable", "sourceNamespace": "omega",
                         "targetNamespaceLabelSelector": {"matchLabels": {"propagate": "true"}}}}),
    );
    let secret_path = |ns: &str| format!("/api/v1/namespaces/{ns}/secrets/shareable");
    op.wait("the secret in alpha and beta", WAIT, || {
        ["alpha", "beta"]
            .iter()
            .all(|ns| get(&sb, &secret_path(ns)).is_some_and(|s| s["data"]["some"] == "dmFsdWUK"))
    });
    op.wait("status working: fine", WAIT, || {
        get(
            &sb,
            "/apis/example.com/v1/secretpropagations/secret-propagation",
        )
        .is_some_and(|p| p["status"]["working"] == "fine")
    });
    assert!(get(&sb, &secret_path("gamma")).is_none());
    // Deleting the parent takes the copies with it; the source stays.
    delete(
        &sb,
        "/apis/example.com/v1/secretpropagations/secret-propagation",
    );
    op.wait("the copies gone with the parent", WAIT, || {
        ["alpha", "beta"]
            .iter()
            .all(|ns| get(&sb, &secret_path(ns)).is_none())
    });
    assert!(get(&sb, &secret_path("omega")).is_some());
}

/// configmap-list-v2: a namespaced parent lists ConfigMaps of another namespace (or of all
/// namespaces) by label; v2 keys them `namespace/name`.
#[test]
fn configmap_list_v2_sees_configmaps_of_other_namespaces() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = serve_example(
        examples::configmap_list_sync,
        examples::configmap_list_customize,
    );
    for ns in ["source-ns", "other-source-ns", "target-ns"] {
        namespace(&sb, ns, json!({}));
    }
    let mine = json!({"app": "my-app"});
    configmap(
        &sb,
        "source-ns",
        "cm-1",
        mine.clone(),
        json!({"key": "value1"}),
    );
    configmap(
        &sb,
        "source-ns",
        "cm-2",
        mine.clone(),
        json!({"key": "value2"}),
    );
    configmap(
        &sb,
        "source-ns",
        "other-cm",
        json!({"app": "other-app"}),
        json!({"key": "value3"}),
    );
    configmap(
        &sb,
        "other-source-ns",
        "cm-3",
        mine,
        json!({"key": "value4"}),
    );
    install_crd(&sb, "ConfigMapList", "configmaplists", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "configmap-list-controller"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "configmaplists"},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "sync": {"version": "v2", "webhook": {"url": format!("{}/sync", hooks.url)}},
                    "customize": {"version": "v2", "webhook": {"url": format!("{}/customize", hooks.url)}}
                }
            }
        }),
    );
    let parents = "/apis/example.com/v1/namespaces/target-ns/configmaplists";
    post_ok(
        &sb,
        parents,
        &json!({"apiVersion": "example.com/v1", "kind": "ConfigMapList",
                "metadata": {"name": "my-config-list", "namespace": "target-ns"},
                "spec": {"sourceNamespace": "source-ns", "sourceLabels": {"app": "my-app"}}}),
    );
    post_ok(
        &sb,
        parents,
        &json!({"apiVersion": "example.com/v1", "kind": "ConfigMapList",
                "metadata": {"name": "all-configs-list", "namespace": "target-ns"},
                "spec": {"sourceLabels": {"app": "my-app"}}}),
    );
    op.wait("the list of source-ns", WAIT, || {
        get(&sb, &cm_path("target-ns", "my-config-list-list"))
            .is_some_and(|c| c["data"]["configmaps"] == "source-ns/cm-1\nsource-ns/cm-2")
    });
    op.wait("the list of every namespace", WAIT, || {
        get(&sb, &cm_path("target-ns", "all-configs-list-list")).is_some_and(|c| {
            c["data"]["configmaps"] == "other-source-ns/cm-3\nsource-ns/cm-1\nsource-ns/cm-2"
        })
    });
    op.wait("status.count = 2", WAIT, || {
        get(&sb, &format!("{parents}/my-config-list")).is_some_and(|p| p["status"]["count"] == 2)
    });
    // v2 children are keyed `namespace/name` too.
    op.wait("a sync that saw its child", WAIT, || {
        hooks
            .calls_for("/sync", "my-config-list")
            .iter()
            .any(|r| keys(&r["children"]["ConfigMap.v1"]) == ["target-ns/my-config-list-list"])
    });
    // A new matching ConfigMap joins the list.
    configmap(
        &sb,
        "source-ns",
        "cm-0",
        json!({"app": "my-app"}),
        json!({}),
    );
    op.wait("the list updated", WAIT, || {
        get(&sb, &cm_path("target-ns", "my-config-list-list")).is_some_and(|c| {
            c["data"]["configmaps"] == "source-ns/cm-0\nsource-ns/cm-1\nsource-ns/cm-2"
        })
    });
}

/// namespace-list-v2: a namespaced parent lists cluster-scoped Namespaces by label.
#[test]
fn namespace_list_v2_sees_cluster_scoped_namespaces() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = serve_example(
        examples::namespace_list_sync,
        examples::namespace_list_customize,
    );
    namespace(
        &sb,
        "test-ns",
        json!({"example-controller": "namespace-list"}),
    );
    namespace(&sb, "unlisted", json!({}));
    install_crd(&sb, "NamespaceList", "namespacelists", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "namespace-list-controller"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "namespacelists"},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "sync": {"version": "v2", "webhook": {"url": format!("{}/sync", hooks.url)}},
                    "customize": {"version": "v2", "webhook": {"url": format!("{}/customize", hooks.url)}}
                }
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/test-ns/namespacelists",
        &json!({"apiVersion": "example.com/v1", "kind": "NamespaceList",
                "metadata": {"name": "filtered-namespaces", "namespace": "test-ns"},
                "spec": {"labelSelector": {"matchLabels": {"example-controller": "namespace-list"}}}}),
    );
    let list = cm_path("test-ns", "filtered-namespaces-list");
    op.wait("the namespace list", WAIT, || {
        get(&sb, &list).is_some_and(|c| c["data"]["namespaces"] == "test-ns")
    });
    op.wait("status.count = 1", WAIT, || {
        get(
            &sb,
            "/apis/example.com/v1/namespaces/test-ns/namespacelists/filtered-namespaces",
        )
        .is_some_and(|p| p["status"]["count"] == 1)
    });
    // A namespace labelled later joins the list.
    update(&sb, "/api/v1/namespaces/unlisted", |n| {
        n["metadata"]["labels"] = json!({"example-controller": "namespace-list"})
    });
    op.wait("the list updated", WAIT, || {
        get(&sb, &list).is_some_and(|c| c["data"]["namespaces"] == "test-ns\nunlisted")
    });
}

/// clusteredparent: a DecoratorController on cluster-scoped ClusterRoles (chosen by an
/// annotation) keeps a namespaced RoleBinding for each: recreated when deleted, gone with
/// its ClusterRole.
#[test]
fn clusteredparent_keeps_a_rolebinding_per_annotated_clusterrole() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| (200, examples::clusteredparent_sync(req)));
    let op = bosun(&sb, work.path(), &[]);
    decorator_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "cluster-parent"},
            "spec": {
                "resources": [{"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "clusterroles",
                               "annotationSelector": {"matchExpressions": [
                                   {"key": "default-service-account-binding", "operator": "Exists"}]}}],
                "attachments": [{"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "rolebindings"}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}
            }
        }),
    );
    let roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
    let role = |name: &str, annotations: Value| {
        post_ok(
            &sb,
            roles,
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": name, "annotations": annotations},
                    "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "watch", "list"]}]}),
        )
    };
    let cr = role(
        "my-clusterrole",
        json!({"default-service-account-binding": "default"}),
    );
    role("plain-clusterrole", json!({}));
    let binding =
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/my-clusterrole";
    op.wait("the RoleBinding", WAIT, || get(&sb, binding).is_some());
    let rb = get(&sb, binding).expect("binding");
    assert!(owned_by(&rb, &cr), "{rb}");
    assert_eq!(
        rb["metadata"]["annotations"]["metacontroller.k8s.io/decorator-controller"],
        "cluster-parent"
    );
    // v1 keys of a cluster-scoped parent: the namespaced attachment as `ns/name`.
    op.wait("a sync that saw the attachment", WAIT, || {
        hooks.calls_for("/sync", "my-clusterrole").iter().any(|r| {
            keys(&r["attachments"]["RoleBinding.rbac.authorization.k8s.io/v1"])
                == ["default/my-clusterrole"]
        })
    });
    assert!(hooks.calls_for("/sync", "plain-clusterrole").is_empty());

    delete(&sb, binding);
    op.wait("the RoleBinding recreated", WAIT, || {
        get(&sb, binding).is_some_and(|b| b["metadata"]["uid"] != rb["metadata"]["uid"])
    });
    delete(&sb, &format!("{roles}/my-clusterrole"));
    op.wait("the RoleBinding gone with its ClusterRole", WAIT, || {
        get(&sb, binding).is_none()
    });
}

/// A CompositeController with a cluster-scoped parent and cluster-scoped children
/// (ClusterRoles): created, kept in place, deleted when no longer desired.
#[test]
fn cluster_scoped_parent_owns_cluster_scoped_children() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| (200, examples::rolesets_sync(req)));
    install_crd(&sb, "RoleSet", "rolesets", "Cluster");
    let op = bosun(&sb, work.path(), &[]);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "rolesets"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "rolesets"},
                "childResources": [{"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "clusterroles",
                                    "updateStrategy": {"method": "InPlace"}}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}
            }
        }),
    );
    let parent_path = "/apis/example.com/v1/rolesets/readers";
    post_ok(
        &sb,
        "/apis/example.com/v1/rolesets",
        &json!({"apiVersion": "example.com/v1", "kind": "RoleSet", "metadata": {"name": "readers"},
                "spec": {"readers": ["pods", "secrets"]}}),
    );
    let roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
    op.wait("both ClusterRoles and the status", WAIT, || {
        get(&sb, &format!("{roles}/readers-pods")).is_some()
            && get(&sb, &format!("{roles}/readers-secrets")).is_some()
            && get(&sb, parent_path)
                .is_some_and(|p| p["status"]["roles"] == json!(["readers-pods", "readers-secrets"]))
    });
    let parent = get(&sb, parent_path).expect("parent");
    assert!(owned_by(
        &get(&sb, &format!("{roles}/readers-pods")).expect("role"),
        &parent
    ));
    update(&sb, parent_path, |p| p["spec"]["readers"] = json!(["pods"]));
    op.wait("the ClusterRole no longer desired deleted", WAIT, || {
        get(&sb, &format!("{roles}/readers-secrets")).is_none()
    });
    assert!(get(&sb, &format!("{roles}/readers-pods")).is_some());
    delete(&sb, parent_path);
    op.wait("the ClusterRoles gone with the parent", WAIT, || {
        get(&sb, &format!("{roles}/readers-pods")).is_none()
    });
}

/// crd-roles: a DecoratorController on CustomResourceDefinitions (chosen by annotation)
/// attaches a reader ClusterRole to each.
#[test]
fn crd_roles_attach_a_clusterrole_to_annotated_crds() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| (200, examples::crd_roles_sync(req)));
    let op = bosun(&sb, work.path(), &[]);
    decorator_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "crd-role-controller"},
            "spec": {
                "resources": [{"apiVersion": "apiextensions.k8s.io/v1", "resource": "customresourcedefinitions",
                               "annotationSelector": {"matchExpressions": [{"key": "enable-default-roles", "operator": "Exists"}]}}],
                "attachments": [{"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "clusterroles"}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync-crd-role", hooks.url), "timeout": "10s"}}}
            }
        }),
    );
    let mut annotated = crd("MyTest", "my-tests", "Cluster");
    annotated["metadata"]["annotations"] = json!({"enable-default-roles": "yes"});
    let annotated = post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &annotated,
    );
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("Other", "others", "Namespaced"),
    );
    let role = "/apis/rbac.authorization.k8s.io/v1/clusterroles/my-tests.example.com-reader";
    op.wait("the reader ClusterRole", WAIT, || get(&sb, role).is_some());
    let cr = get(&sb, role).expect("role");
    assert!(owned_by(&cr, &annotated), "{cr}");
    assert_eq!(cr["rules"][0]["resources"], json!(["my-tests"]));
    assert!(
        get(
            &sb,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/others.example.com-reader"
        )
        .is_none()
    );
    assert!(
        hooks
            .calls_for("/sync-crd-role", "others.example.com")
            .is_empty()
    );
    delete(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/my-tests.example.com",
    );
    op.wait("the ClusterRole gone with its CRD", WAIT, || {
        get(&sb, role).is_none()
    });
}

/// A DecoratorController on Namespaces (cluster-scoped) puts a ConfigMap into each
/// selected namespace as an attachment.
#[test]
fn decorator_on_namespaces_puts_a_configmap_in_each() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| (200, examples::global_settings_sync(req)));
    namespace(&sb, "team-a", json!({"settings": "global"}));
    namespace(&sb, "team-b", json!({}));
    let op = bosun(&sb, work.path(), &[]);
    decorator_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "global-settings"},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "namespaces",
                               "labelSelector": {"matchLabels": {"settings": "global"}}}],
                "attachments": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}
            }
        }),
    );
    op.wait("the ConfigMap in team-a", WAIT, || {
        get(&sb, &cm_path("team-a", "global-settings"))
            .is_some_and(|c| c["data"]["namespace"] == "team-a")
    });
    assert!(get(&sb, &cm_path("team-b", "global-settings")).is_none());
    update(&sb, "/api/v1/namespaces/team-b", |n| {
        n["metadata"]["labels"] = json!({"settings": "global"})
    });
    op.wait("the ConfigMap in team-b once selected", WAIT, || {
        get(&sb, &cm_path("team-b", "global-settings")).is_some()
    });
    // Deleted by someone else: put back.
    let old = get(&sb, &cm_path("team-a", "global-settings")).expect("attachment");
    delete(&sb, &cm_path("team-a", "global-settings"));
    op.wait("the ConfigMap recreated", WAIT, || {
        get(&sb, &cm_path("team-a", "global-settings"))
            .is_some_and(|c| c["metadata"]["uid"] != old["metadata"]["uid"])
    });
}

/// indexedjob: Pods with stable indexes, `parallelism` at a time, until `completions`
/// succeeded. No kubelet here: the test marks each Pod Succeeded.
#[test]
fn indexedjob_runs_pods_by_index_until_all_succeeded() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| (200, examples::indexedjob_sync(req)));
    install_crd(&sb, "IndexedJob", "indexedjobs", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "indexedjob-controller"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "indexedjobs"},
                "childResources": [{"apiVersion": "v1", "resource": "pods"}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/indexedjobs",
        &json!({"apiVersion": "example.com/v1", "kind": "IndexedJob",
                "metadata": {"name": "print-index"},
                "spec": {"completions": 4, "parallelism": 2,
                         "template": {"metadata": {"labels": {"app": "print-index"}},
                                      "spec": {"restartPolicy": "OnFailure",
                                               "containers": [{"name": "print-index", "image": "busybox",
                                                               "command": ["sh", "-c", "echo ${JOB_INDEX}"]}]}}}}),
    );
    let job_path = "/apis/example.com/v1/namespaces/default/indexedjobs/print-index";
    let mut most_running = 0;
    op.wait("4 successful completions", WAIT, || {
        // Play the kubelet: every running Pod of the job succeeds.
        let (_, pods) = sb.get("/api/v1/namespaces/default/pods");
        let pods = pods["items"].as_array().cloned().unwrap_or_default();
        let running: Vec<&Value> = pods
            .iter()
            .filter(|p| p["status"]["phase"] != "Succeeded")
            .collect();
        most_running = most_running.max(running.len());
        for pod in running {
            let name = str_of(&pod["metadata"]["name"]);
            let mut done = pod.clone();
            done["status"] = json!({"phase": "Succeeded"});
            let _ = sb.put(
                &format!("/api/v1/namespaces/default/pods/{name}/status"),
                &done,
            );
        }
        get(&sb, job_path).is_some_and(|j| j["status"]["succeeded"] == 4)
    });
    assert!(most_running <= 2, "parallelism exceeded: {most_running}");
    let job = get(&sb, job_path).expect("job");
    assert_eq!(job["status"]["conditions"][0]["status"], "True", "{job}");
    let pod = get(&sb, "/api/v1/namespaces/default/pods/print-index-3").expect("pod 3");
    assert_eq!(pod["spec"]["containers"][0]["env"][0]["value"], "3");
    assert_eq!(pod["metadata"]["labels"]["app"], "print-index");
    assert_eq!(
        pod["metadata"]["labels"]["controller-uid"],
        job["metadata"]["uid"]
    );
    assert!(get(&sb, "/api/v1/namespaces/default/pods/print-index-4").is_none());
}

/// daemonjob: a DaemonSet runs until every node reports ready, then the job completes and
/// the DaemonSet is removed. The test writes the DaemonSet's status (no nodes here).
#[test]
fn daemonjob_completes_when_its_daemonset_is_ready_and_cleans_up() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| (200, examples::daemonjob_sync(req)));
    install_crd(&sb, "DaemonJob", "daemonjobs", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "daemonjob-controller"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "daemonjobs"},
                "childResources": [{"apiVersion": "apps/v1", "resource": "daemonsets"}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/daemonjobs",
        &json!({"apiVersion": "example.com/v1", "kind": "DaemonJob", "metadata": {"name": "hello-world"},
                "spec": {"template": {"metadata": {"labels": {"app": "hello-world"}},
                                      "spec": {"terminationGracePeriodSeconds": 10,
                                               "containers": [{"name": "hello-world", "image": "busybox",
                                                               "command": ["sh", "-c", "echo 'Hello world' && sleep 30"]}]}}}}),
    );
    let ds_path = "/apis/apps/v1/namespaces/default/daemonsets/hello-world-dj";
    let job_path = "/apis/example.com/v1/namespaces/default/daemonjobs/hello-world";
    op.wait("the DaemonSet and a job not complete yet", WAIT, || {
        get(&sb, ds_path).is_some()
            && get(&sb, job_path).is_some_and(|j| j["status"]["conditions"][0]["status"] == "False")
    });
    let ds = get(&sb, ds_path).expect("daemonset");
    assert_eq!(
        ds["spec"]["template"]["spec"]["initContainers"][0]["name"],
        "hello-world"
    );
    // Play the DaemonSet controller: the pod on the only node is ready.
    update(&sb, &format!("{ds_path}/status"), |d| {
        d["status"] = json!({"desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                             "numberReady": 1, "numberMisscheduled": 0});
    });
    op.wait("the job complete", WAIT, || {
        get(&sb, job_path).is_some_and(|j| j["status"]["conditions"][0]["status"] == "True")
    });
    op.wait("the DaemonSet cleaned up", WAIT, || {
        get(&sb, ds_path).is_none()
    });
    let job = get(&sb, job_path).expect("job");
    assert_eq!(job["status"]["numberReady"], 1, "{job}");
}

/// target-label-selector: bosun runs only the controllers whose labels match
/// `--target-label-selector` (here through `BOSUN_TARGET_LABEL_SELECTOR`); a controller
/// relabelled to match starts, one relabelled away stops.
#[test]
fn target_label_selector_runs_only_matching_controllers() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|path, req| {
        if path.starts_with("/dec-") {
            // DecoratorControllers: a Secret attached to the object.
            let name = str_of(&req["object"]["metadata"]["name"]);
            return (
                200,
                json!({"attachments": [{"apiVersion": "v1", "kind": "Secret",
                                        "metadata": {"name": format!("{name}{}", path.replace('/', "-"))}}]}),
            );
        }
        let name = str_of(&req["parent"]["metadata"]["name"]);
        (
            200,
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": format!("{name}{}", path.replace('/', "-"))}}]}),
        )
    });
    install_crd(&sb, "Selected", "selecteds", "Namespaced");
    install_crd(&sb, "Ignored", "ignoreds", "Namespaced");
    let op = bosun(
        &sb,
        work.path(),
        &[("BOSUN_TARGET_LABEL_SELECTOR", "controller-group=cicd")],
    );
    let controller = |name: &str, labels: Value| {
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": name},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/{name}", hooks.url)}}}
            }
        })
    };
    composite_controller(
        &sb,
        controller("ignoreds", json!({"controller-group": "other"})),
    );
    composite_controller(
        &sb,
        controller("selecteds", json!({"controller-group": "cicd"})),
    );
    for (name, group) in [("dec-ignored", "other"), ("dec-selected", "cicd")] {
        decorator_controller(
            &sb,
            json!({
                "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
                "metadata": {"name": name, "labels": {"controller-group": group}},
                "spec": {
                    "resources": [{"apiVersion": "example.com/v1", "resource": "selecteds"}],
                    "attachments": [{"apiVersion": "v1", "resource": "secrets"}],
                    "hooks": {"sync": {"webhook": {"url": format!("{}/{name}", hooks.url)}}}
                }
            }),
        );
    }
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/ignoreds",
        &json!({"apiVersion": "example.com/v1", "kind": "Ignored", "metadata": {"name": "i"}}),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/selecteds",
        &json!({"apiVersion": "example.com/v1", "kind": "Selected", "metadata": {"name": "s"}}),
    );
    op.wait("the selected controller's child", WAIT, || {
        get(&sb, &cm_path("default", "s-selecteds")).is_some()
    });
    // Both controllers were created before both parents; the selected one has synced its
    // parent, the other has never called its hook.
    op.wait("the selected decorator's attachment", WAIT, || {
        get(&sb, "/api/v1/namespaces/default/secrets/s-dec-selected").is_some()
    });
    assert!(hooks.calls("/ignoreds").is_empty());
    assert!(get(&sb, &cm_path("default", "i-ignoreds")).is_none());
    assert!(hooks.calls("/dec-ignored").is_empty());
    assert!(get(&sb, "/api/v1/namespaces/default/secrets/s-dec-ignored").is_none());

    // Relabelled to match: it starts. Relabelled away: it stops.
    let cc = "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers";
    update(&sb, &format!("{cc}/ignoreds"), |c| {
        c["metadata"]["labels"]["controller-group"] = json!("cicd")
    });
    op.wait("the relabelled controller's child", WAIT, || {
        get(&sb, &cm_path("default", "i-ignoreds")).is_some()
    });
    update(&sb, &format!("{cc}/selecteds"), |c| {
        c["metadata"]["labels"]["controller-group"] = json!("other")
    });
    op.wait("a Stopped event on the unselected controller", WAIT, || {
        let (_, list) = sb.get("/api/v1/namespaces/default/events");
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["involvedObject"]["name"] == "selecteds" && e["reason"] == "Stopped")
    });
    let before = hooks.calls("/selecteds").len();
    delete(&sb, &cm_path("default", "s-selecteds"));
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/selecteds",
        &json!({"apiVersion": "example.com/v1", "kind": "Selected", "metadata": {"name": "s2"}}),
    );
    // The running controller meanwhile still answers: its new parent gets a child.
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/ignoreds",
        &json!({"apiVersion": "example.com/v1", "kind": "Ignored", "metadata": {"name": "i2"}}),
    );
    op.wait("the running controller's new child", WAIT, || {
        get(&sb, &cm_path("default", "i2-ignoreds")).is_some()
    });
    assert_eq!(hooks.calls("/selecteds").len(), before);
    assert!(get(&sb, &cm_path("default", "s2-selecteds")).is_none());
    assert!(get(&sb, &cm_path("default", "s-selecteds")).is_none());
}

// ---------------------------------------------------------------------------------------
// Integration cases
// ---------------------------------------------------------------------------------------

/// A namespaced parent kind `<plural>` with a CompositeController whose sync hook is
/// `hooks.url/sync` (and customize `hooks.url/customize` when asked).
fn simple_controller(sb: &Sandbox, plural: &str, child: (&str, &str), hooks: &Hooks, extra: Value) {
    let mut spec = json!({
        "parentResource": {"apiVersion": "example.com/v1", "resource": plural},
        "childResources": [{"apiVersion": child.0, "resource": child.1, "updateStrategy": {"method": "InPlace"}}],
        "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            if k == "hooks" {
                for (h, def) in v.as_object().into_iter().flatten() {
                    s["hooks"][h] = def.clone();
                }
            } else {
                s.insert(k.clone(), v.clone());
            }
        }
    }
    composite_controller(
        sb,
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
               "metadata": {"name": plural}, "spec": spec}),
    );
}

/// resyncAfterSeconds: the hook asks to be called again in 0.1 s, ten times in a row, and
/// is, with nothing changed in between and no periodic resync configured. The ten delays
/// are measured by this process alone and bounded loosely, so that a loaded machine does
/// not fail the test, yet a fraction rounded up to a whole second (ten seconds at least)
/// or down to zero (never called again) does.
#[test]
fn resync_after_seconds_calls_the_hook_again_soon() {
    resync_after_case("CompositeController");
}

/// resyncAfterSeconds of a DecoratorController's hook.
#[test]
fn decorator_resync_after_seconds_calls_the_hook_again_soon() {
    resync_after_case("DecoratorController");
}

/// Resyncs the hook asks for in [`resync_after_case`].
const RESYNCS: u32 = 10;

fn resync_after_case(kind: &str) {
    let sb = Sandbox::start();
    let work = workdir();
    // (when the first resync was asked for, resyncs so far, the time they all took)
    type ResyncState = (Option<Instant>, u32, Option<f64>);
    let state: Arc<Mutex<ResyncState>> = Arc::new(Mutex::new((None, 0, None)));
    let hook_state = state.clone();
    let hooks = Hooks::serve(move |_, req| {
        let mut st = hook_state.lock().expect("state");
        let parent = if req["parent"].is_null() {
            &req["object"]
        } else {
            &req["parent"]
        };
        if parent["status"].is_null() {
            // The first sync: status written, then the parent quiesces.
            return (200, json!({"status": {}}));
        }
        let again = json!({"status": parent["status"], "resyncAfterSeconds": 0.1});
        match *st {
            (None, _, _) => {
                st.0 = Some(Instant::now());
                (200, again)
            }
            (Some(_), n, None) if n + 1 < RESYNCS => {
                st.1 = n + 1;
                (200, again)
            }
            (Some(asked), _, None) => {
                let elapsed = asked.elapsed().as_secs_f64();
                st.1 = RESYNCS;
                st.2 = Some(elapsed);
                (200, json!({"status": {"elapsedSeconds": elapsed}}))
            }
            (Some(_), _, Some(_)) => (200, json!({"status": parent["status"]})),
        }
    });
    install_crd(&sb, "Resync", "resyncs", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    let hook = json!({"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}});
    if kind == "CompositeController" {
        composite_controller(
            &sb,
            json!({
                "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": kind,
                "metadata": {"name": "resyncs"},
                "spec": {
                    "parentResource": {"apiVersion": "example.com/v1", "resource": "resyncs"},
                    "hooks": hook
                }
            }),
        );
    } else {
        decorator_controller(
            &sb,
            json!({
                "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": kind,
                "metadata": {"name": "resyncs"},
                "spec": {
                    "resources": [{"apiVersion": "example.com/v1", "resource": "resyncs"}],
                    "hooks": hook
                }
            }),
        );
    }
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/resyncs",
        &json!({"apiVersion": "example.com/v1", "kind": "Resync", "metadata": {"name": "r"},
                "spec": {"selector": {"matchLabels": {"test": "resync-after"}}}}),
    );
    op.wait("elapsedSeconds in the status", WAIT, || {
        get(&sb, "/apis/example.com/v1/namespaces/default/resyncs/r")
            .is_some_and(|p| p["status"]["elapsedSeconds"].is_number())
    });
    let elapsed = state.lock().expect("state").2.expect("measured");
    assert!(
        elapsed < f64::from(RESYNCS),
        "{RESYNCS} resyncs asked for 0.1 s after each other took {elapsed:.3} s"
    );
}

/// A settled parent on a periodic resync (resent without reading the caches while
/// nothing changed): a child edited by someone else is reverted, and a new answer of the
/// hook to the unchanged request is applied.
#[test]
fn a_settled_parent_reverts_an_edited_child_and_applies_a_new_answer_on_resync() {
    let sb = Sandbox::start();
    let work = workdir();
    let value = Arc::new(Mutex::new("1".to_string()));
    let hook_value = value.clone();
    let hooks = Hooks::serve(move |_, req| {
        let v = hook_value.lock().expect("value").clone();
        let name = str_of(&req["parent"]["metadata"]["name"]).to_string();
        (
            200,
            json!({"status": {"value": v},
                   "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": format!("{name}-cm")},
                                 "data": {"value": v}}]}),
        )
    });
    install_crd(&sb, "Settle", "settles", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    simple_controller(
        &sb,
        "settles",
        ("v1", "configmaps"),
        &hooks,
        json!({"generateSelector": true, "resyncPeriodSeconds": 1}),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/settles",
        &json!({"apiVersion": "example.com/v1", "kind": "Settle", "metadata": {"name": "s"}}),
    );
    let child = cm_path("default", "s-cm");
    op.wait("the child and the status", WAIT, || {
        get(&sb, &child).is_some_and(|c| c["data"]["value"] == "1")
            && get(&sb, "/apis/example.com/v1/namespaces/default/settles/s")
                .is_some_and(|p| p["status"]["value"] == "1")
    });
    // Settled: two more periodic resyncs with nothing to do.
    let settled = hooks.calls("/sync").len();
    op.wait("two periodic resyncs", WAIT, || {
        hooks.calls("/sync").len() >= settled + 2
    });

    update(&sb, &child, |c| c["data"]["value"] = json!("edited"));
    op.wait("the edited child reverted", WAIT, || {
        get(&sb, &child).is_some_and(|c| c["data"]["value"] == "1")
    });

    *value.lock().expect("value") = "2".to_string();
    op.wait("the new answer applied by a resync", WAIT, || {
        get(&sb, &child).is_some_and(|c| c["data"]["value"] == "2")
            && get(&sb, "/apis/example.com/v1/namespaces/default/settles/s")
                .is_some_and(|p| p["status"]["value"] == "2")
    });
}

/// claim and orphan: a ConfigMap that exists before its parent and matches the parent's
/// selector is adopted; once its labels stop matching it is released (our
/// ownerReference removed, the object kept).
#[test]
fn matching_orphans_are_adopted_and_children_that_stop_matching_released() {
    let sb = Sandbox::start();
    let work = workdir();
    // The hook always desires the child: once released it is no longer observed, and a
    // create of an object that exists changes nothing.
    let hooks = Hooks::serve(|_, _| {
        (
            200,
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "pre-existing-child", "labels": {"test": "claim"}},
                                 "data": {"from": "hook"}}]}),
        )
    });
    install_crd(&sb, "Claimer", "claimers", "Namespaced");
    // An unrelated owner keeps a reference that adoption and release must leave alone.
    let other = configmap_owner(&sb);
    post_ok(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "pre-existing-child", "labels": {"test": "claim"},
                             "ownerReferences": [other]},
                "data": {"from": "before"}}),
    );
    // A ConfigMap owned by another controller is never adopted.
    let foreign_owner = post_ok(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "foreign-owner"}}),
    );
    let foreign = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "foreign-owner",
                         "uid": foreign_owner["metadata"]["uid"], "controller": true});
    post_ok(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "someone-elses", "labels": {"test": "claim"},
                             "ownerReferences": [foreign]}}),
    );
    let op = bosun(&sb, work.path(), &[]);
    simple_controller(&sb, "claimers", ("v1", "configmaps"), &hooks, json!({}));
    let parent = post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/claimers",
        &json!({"apiVersion": "example.com/v1", "kind": "Claimer", "metadata": {"name": "claimer"},
                "spec": {"selector": {"matchLabels": {"test": "claim"}}}}),
    );
    let child = cm_path("default", "pre-existing-child");
    op.wait("the orphan adopted and updated in place", WAIT, || {
        get(&sb, &child).is_some_and(|c| owned_by(&c, &parent) && c["data"]["from"] == "hook")
    });
    let adopted = get(&sb, &child).expect("child");
    let refs = adopted["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(refs.len(), 2, "{adopted}");
    let seen = hooks.calls("/sync");
    assert!(
        seen.iter()
            .all(|r| !keys(&r["children"]["ConfigMap.v1"]).contains(&"someone-elses".to_string())),
        "a ConfigMap of another controller was shown as a child"
    );
    assert!(!owned_by(
        &get(&sb, &cm_path("default", "someone-elses")).expect("foreign"),
        &parent
    ));

    // Its labels stop matching: released, not deleted.
    update(&sb, &child, |c| {
        c["metadata"]["labels"] = json!({"test": "no-match"})
    });
    op.wait("the child released", WAIT, || {
        get(&sb, &child).is_some_and(|c| !owned_by(&c, &parent))
    });
    let released = get(&sb, &child).expect("released child kept");
    assert_eq!(
        released["metadata"]["ownerReferences"],
        json!([other]),
        "only our reference is removed"
    );
    assert_eq!(released["metadata"]["labels"]["test"], "no-match");
}

/// A plain ownerReference (not a controller) to some object, for the claim test.
fn configmap_owner(sb: &Sandbox) -> Value {
    let owner = post_ok(
        sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain-owner"}}),
    );
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "plain-owner",
           "uid": owner["metadata"]["uid"]})
}

/// customize: the related objects the customize hook selects are in the sync request, and
/// a change of a related object syncs the parent again.
#[test]
fn customize_related_objects_reach_the_hook_and_their_changes_resync() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|path, req| {
        let parent = &req["parent"];
        if path == "/customize" {
            return (
                200,
                json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps",
                                              "namespace": parent["metadata"]["namespace"],
                                              "names": ["related-config-map"]}]}),
            );
        }
        let related: Vec<&Value> = req["related"]["ConfigMap.v1"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
            .collect();
        let children: Vec<Value> = related
            .iter()
            .map(|r| {
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": format!("{}-{}", str_of(&parent["metadata"]["name"]), str_of(&r["metadata"]["name"])),
                                    "labels": {"test": "customize"}},
                       "stringData": {"copied": r["data"]["value"]}})
            })
            .collect();
        (200, json!({"children": children}))
    });
    install_crd(&sb, "Customized", "customizeds", "Namespaced");
    configmap(
        &sb,
        "default",
        "related-config-map",
        json!({}),
        json!({"value": "one"}),
    );
    configmap(
        &sb,
        "default",
        "unrelated",
        json!({}),
        json!({"value": "x"}),
    );
    let op = bosun(&sb, work.path(), &[]);
    simple_controller(
        &sb,
        "customizeds",
        ("v1", "secrets"),
        &hooks,
        json!({"hooks": {"customize": {"webhook": {"url": format!("{}/customize", hooks.url)}}}}),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/customizeds",
        &json!({"apiVersion": "example.com/v1", "kind": "Customized", "metadata": {"name": "test-customize-webhook"},
                "spec": {"selector": {"matchLabels": {"test": "customize"}}}}),
    );
    let secret = "/api/v1/namespaces/default/secrets/test-customize-webhook-related-config-map";
    let copied = |sb: &Sandbox| {
        get(sb, secret).map(|s| s["data"]["copied"].as_str().unwrap_or_default().to_string())
    };
    // "one" and "two" in base64.
    op.wait("the child named after the related object", WAIT, || {
        copied(&sb).as_deref() == Some("b25l")
    });
    let request = hooks
        .calls("/sync")
        .last()
        .cloned()
        .expect("a sync request");
    // v1 keys for a namespaced parent: the bare name; only the selected object.
    assert_eq!(
        keys(&request["related"]["ConfigMap.v1"]),
        ["related-config-map"],
        "{}",
        request["related"]
    );
    let customize = hooks.calls("/customize");
    assert_eq!(
        customize[0]["parent"]["metadata"]["name"],
        "test-customize-webhook"
    );

    // A change of the related object: the parent syncs again without any change of its own.
    update(&sb, &cm_path("default", "related-config-map"), |c| {
        c["data"]["value"] = json!("two")
    });
    op.wait("the child follows the related object", WAIT, || {
        copied(&sb).as_deref() == Some("dHdv")
    });
    // The related object deleted: the child goes.
    delete(&sb, &cm_path("default", "related-config-map"));
    op.wait("the child removed with the related object", WAIT, || {
        get(&sb, secret).is_none()
    });
}

/// customize for a DecoratorController: the related objects are in the request, and a
/// change of one syncs the decorated object again.
#[test]
fn decorator_customize_related_objects_reach_the_hook_and_their_changes_resync() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|path, req| {
        if path == "/customize" {
            assert_eq!(req["controller"]["kind"], "DecoratorController");
            return (
                200,
                json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps",
                                              "namespace": req["parent"]["metadata"]["namespace"],
                                              "names": ["related-config-map"]}]}),
            );
        }
        let object = &req["object"];
        let attachments: Vec<Value> = req["related"]["ConfigMap.v1"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
            .map(|r| {
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": format!("{}-{}", str_of(&object["metadata"]["name"]), str_of(&r["metadata"]["name"]))},
                       "stringData": {"copied": r["data"]["value"]}})
            })
            .collect();
        (200, json!({"attachments": attachments}))
    });
    install_crd(&sb, "Decorated", "decorateds", "Namespaced");
    configmap(
        &sb,
        "default",
        "related-config-map",
        json!({}),
        json!({"value": "one"}),
    );
    let op = bosun(&sb, work.path(), &[]);
    decorator_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "dc"},
            "spec": {
                "resources": [{"apiVersion": "example.com/v1", "resource": "decorateds"}],
                "attachments": [{"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "sync": {"webhook": {"url": format!("{}/sync", hooks.url)}},
                    "customize": {"webhook": {"url": format!("{}/customize", hooks.url)}}
                }
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/decorateds",
        &json!({"apiVersion": "example.com/v1", "kind": "Decorated", "metadata": {"name": "test-customize-webhook"}}),
    );
    let secret = "/api/v1/namespaces/default/secrets/test-customize-webhook-related-config-map";
    let copied = |sb: &Sandbox| {
        get(sb, secret).map(|s| s["data"]["copied"].as_str().unwrap_or_default().to_string())
    };
    op.wait(
        "the attachment named after the related object",
        WAIT,
        || copied(&sb).as_deref() == Some("b25l"),
    );
    update(&sb, &cm_path("default", "related-config-map"), |c| {
        c["data"]["value"] = json!("two")
    });
    op.wait("the attachment follows the related object", WAIT, || {
        copied(&sb).as_deref() == Some("dHdv")
    });
}

/// cascading delete: a child no longer desired is deleted with background propagation,
/// so what it owns (a Job's Pods) goes too.
#[test]
fn children_no_longer_desired_are_deleted_with_what_they_own() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| {
        let replicas = req["parent"]["spec"]["replicas"].as_i64().unwrap_or(0);
        let children: Vec<Value> = (0..replicas.min(1))
            .map(|_| {
                json!({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": "test-cascading-delete", "labels": {"test": "cascading-delete"}},
                       "spec": {"template": {"spec": {"restartPolicy": "Never",
                                                      "containers": [{"name": "pi", "image": "perl"}]}}}})
            })
            .collect();
        (200, json!({"children": children}))
    });
    install_crd(&sb, "Cascader", "cascaders", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    simple_controller(&sb, "cascaders", ("batch/v1", "jobs"), &hooks, json!({}));
    let parent_path = "/apis/example.com/v1/namespaces/default/cascaders/test-cascading-delete";
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/cascaders",
        &json!({"apiVersion": "example.com/v1", "kind": "Cascader", "metadata": {"name": "test-cascading-delete"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"test": "cascading-delete"}}}}),
    );
    let job_path = "/apis/batch/v1/namespaces/default/jobs/test-cascading-delete";
    op.wait("the Job", WAIT, || get(&sb, job_path).is_some());
    let job = get(&sb, job_path).expect("job");
    // Play the Job controller: one Pod owned by the Job.
    post_ok(
        &sb,
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "test-cascading-delete-pod",
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                                  "name": "test-cascading-delete", "uid": job["metadata"]["uid"],
                                                  "controller": true, "blockOwnerDeletion": true}]},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "pi", "image": "perl"}]}}),
    );
    update(&sb, parent_path, |p| p["spec"]["replicas"] = json!(0));
    op.wait("the Job deleted", WAIT, || get(&sb, job_path).is_none());
    op.wait("the Job's Pod deleted too", WAIT, || {
        get(
            &sb,
            "/api/v1/namespaces/default/pods/test-cascading-delete-pod",
        )
        .is_none()
    });
}

/// v2 hooks: children and attachments are keyed `namespace/name` for a namespaced parent
/// (v1 would say the bare name); the answer is read strictly.
#[test]
fn v2_hooks_key_children_and_attachments_by_namespace_and_name() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|path, req| {
        if path == "/decorate" {
            let name = str_of(&req["object"]["metadata"]["name"]);
            return (
                200,
                json!({"attachments": [{"apiVersion": "v1", "kind": "Secret",
                                        "metadata": {"name": format!("{name}-attached")}}]}),
            );
        }
        let name = str_of(&req["parent"]["metadata"]["name"]);
        (
            200,
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": name, "labels": {"test": "v2"}}}]}),
        )
    });
    install_crd(&sb, "V2Parent", "v2parents", "Namespaced");
    namespace(&sb, "test-v2", json!({}));
    let op = bosun(&sb, work.path(), &[]);
    simple_controller(
        &sb,
        "v2parents",
        ("v1", "configmaps"),
        &hooks,
        json!({"hooks": {"sync": {"version": "v2", "webhook": {"url": format!("{}/sync", hooks.url)}}}}),
    );
    decorator_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "v2-decorator"},
            "spec": {
                "resources": [{"apiVersion": "example.com/v1", "resource": "v2parents"}],
                "attachments": [{"apiVersion": "v1", "resource": "secrets"}],
                "hooks": {"sync": {"version": "v2", "webhook": {"url": format!("{}/decorate", hooks.url)}}}
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/test-v2/v2parents",
        &json!({"apiVersion": "example.com/v1", "kind": "V2Parent", "metadata": {"name": "p"},
                "spec": {"selector": {"matchLabels": {"test": "v2"}}}}),
    );
    op.wait("the child and the attachment", WAIT, || {
        get(&sb, &cm_path("test-v2", "p")).is_some()
            && get(&sb, "/api/v1/namespaces/test-v2/secrets/p-attached").is_some()
    });
    op.wait("a sync request keyed namespace/name", WAIT, || {
        hooks
            .calls("/sync")
            .iter()
            .any(|r| keys(&r["children"]["ConfigMap.v1"]) == ["test-v2/p"])
    });
    op.wait("a decorator request keyed namespace/name", WAIT, || {
        hooks
            .calls("/decorate")
            .iter()
            .any(|r| keys(&r["attachments"]["Secret.v1"]) == ["test-v2/p-attached"])
    });
    assert!(
        hooks
            .calls("/sync")
            .iter()
            .all(|r| !keys(&r["children"]["ConfigMap.v1"]).contains(&"p".to_string())),
        "a v2 request used a v1 key"
    );
}

// ---------------------------------------------------------------------------------------
// The patterns of metacontroller's examples/catset and examples/service-per-pod (bluegreen
// runs in-process: actors/lambda/tests/examples.rs). Their hooks (JavaScript and Jsonnet
// there) are ported in bosun_lambda::fakes::examples; the tests play the kubelet and the
// StatefulSet controller, which the sandbox does not run.
// ---------------------------------------------------------------------------------------

/// examples/catset: a CatSet (a StatefulSet written as a lambda, with `RollingRecreate`
/// Pods and a revision history) brings its Pods up in ordinal order, one at a time as
/// each becomes Ready, with a PVC each; it scales up and down as a StatefulSet does; its
/// finalize hook scales it to zero before it goes. The test plays the kubelet: it makes
/// each Pod Running and Ready, and checks that no Pod ever starts before all below it are
/// Ready.
#[test]
fn catset_brings_pods_up_in_order_scales_and_finalizes_to_zero() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| (200, examples::catset_sync(req)));
    install_crd(&sb, "CatSet", "catsets", "Namespaced");
    let op = bosun(&sb, work.path(), &[]);
    let url = format!("{}/sync", hooks.url);
    composite_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "catset-controller"},
            "spec": {
                "parentResource": {"apiVersion": "example.com/v1", "resource": "catsets",
                                   "revisionHistory": {"fieldPaths": ["spec.template"]}},
                "childResources": [
                    {"apiVersion": "v1", "resource": "pods",
                     "updateStrategy": {"method": "RollingRecreate",
                                        "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}}},
                    {"apiVersion": "v1", "resource": "persistentvolumeclaims"}
                ],
                "hooks": {"sync": {"webhook": {"url": url}}, "finalize": {"webhook": {"url": url}}}
            }
        }),
    );
    let labels = json!({"app": "nginx", "component": "backend"});
    let catset = "/apis/example.com/v1/namespaces/default/catsets/nginx-backend";
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/catsets",
        &json!({"apiVersion": "example.com/v1", "kind": "CatSet", "metadata": {"name": "nginx-backend"},
                "spec": {"serviceName": "nginx-backend", "replicas": 3,
                         "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels},
                                      "spec": {"terminationGracePeriodSeconds": 1,
                                               "containers": [{"name": "nginx", "image": "gcr.io/google_containers/nginx-slim:0.8",
                                                               "ports": [{"containerPort": 80, "name": "web"}],
                                                               "volumeMounts": [{"name": "www", "mountPath": "/usr/share/nginx/html"}]}]}},
                         "volumeClaimTemplates": [{"metadata": {"name": "www", "labels": labels},
                                                   "spec": {"accessModes": ["ReadWriteOnce"],
                                                            "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    );
    let pods = || -> Vec<Value> {
        get(
            &sb,
            "/api/v1/namespaces/default/pods?labelSelector=app%3Dnginx",
        )
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
    };
    // The kubelet: the lowest Pod not Ready yet becomes Running and Ready. Every Pod above
    // it must not exist yet: the CatSet waits for each Pod before the next.
    let kubelet = || {
        // A deleted Pod stops at once (terminationGracePeriodSeconds is 1) and is gone.
        let (deleting, mut pods): (Vec<Value>, Vec<Value>) = pods()
            .into_iter()
            .partition(|p| !p["metadata"]["deletionTimestamp"].is_null());
        for pod in deleting {
            let path = format!(
                "/api/v1/namespaces/default/pods/{}?gracePeriodSeconds=0",
                str_of(&pod["metadata"]["name"])
            );
            sb.request("DELETE", &path, "", "");
        }
        pods.sort_by_key(|p| ordinal("nginx-backend", str_of(&p["metadata"]["name"])));
        if let Some(first) = pods.iter().position(|p| !running_and_ready(p)) {
            assert_eq!(
                first,
                pods.len() - 1,
                "a Pod started before the ones below it were Ready: {:?}",
                pods.iter()
                    .map(|p| (p["metadata"]["name"].clone(), running_and_ready(p)))
                    .collect::<Vec<_>>()
            );
            let path = format!(
                "/api/v1/namespaces/default/pods/{}/status",
                str_of(&pods[first]["metadata"]["name"])
            );
            update(&sb, &path, |p| {
                p["status"]["phase"] = json!("Running");
                p["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
            });
        }
    };
    let ready_replicas = |n: i64| {
        get(&sb, catset)
            .is_some_and(|c| c["status"]["readyReplicas"] == n && c["status"]["replicas"] == n)
    };
    op.wait("3 Pods Ready, brought up in order", WAIT, || {
        kubelet();
        ready_replicas(3)
    });
    for n in 0..3 {
        let pod = get(
            &sb,
            &format!("/api/v1/namespaces/default/pods/nginx-backend-{n}"),
        )
        .expect("pod");
        assert_eq!(pod["spec"]["hostname"], format!("nginx-backend-{n}"));
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            format!("www-nginx-backend-{n}")
        );
        let claim = get(
            &sb,
            &format!("/api/v1/namespaces/default/persistentvolumeclaims/www-nginx-backend-{n}"),
        )
        .expect("the Pod's claim");
        let parent = get(&sb, catset).expect("catset");
        assert!(owned_by(&claim, &parent), "{claim}");
    }
    update(&sb, catset, |c| c["spec"]["replicas"] = json!(4));
    op.wait("scaled up to 4 Ready", WAIT, || {
        kubelet();
        ready_replicas(4)
    });
    update(&sb, catset, |c| c["spec"]["replicas"] = json!(2));
    op.wait("scaled down to 2", WAIT, || {
        kubelet();
        ready_replicas(2) && pods().len() == 2
    });
    let names: BTreeSet<String> = pods()
        .iter()
        .map(|p| str_of(&p["metadata"]["name"]).to_string())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["nginx-backend-0".to_string(), "nginx-backend-1".to_string()])
    );
    for n in 2..4 {
        assert!(
            get(
                &sb,
                &format!("/api/v1/namespaces/default/persistentvolumeclaims/www-nginx-backend-{n}")
            )
            .is_some(),
            "the claim of a removed Pod is kept, as a StatefulSet keeps it"
        );
    }
    // Deleted with a finalizer of our own, to read the final state.
    update(&sb, catset, |c| {
        c["metadata"]["finalizers"]
            .as_array_mut()
            .expect("the controller's finalizer")
            .push(json!("metacontroller.io/catset-test"))
    });
    delete(&sb, catset);
    op.wait(
        "the finalize hook scaled the CatSet to zero and let it go",
        WAIT,
        || {
            kubelet();
            get(&sb, catset).is_some_and(|c| {
                c["status"]["replicas"] == 0
                    && c["metadata"]["finalizers"] == json!(["metacontroller.io/catset-test"])
            })
        },
    );
    assert!(pods().is_empty(), "{:?}", pods());
    update(&sb, catset, |c| c["metadata"]["finalizers"] = json!([]));
    op.wait("the CatSet gone", WAIT, || get(&sb, catset).is_none());
}

/// examples/service-per-pod: a DecoratorController gives each Pod of an annotated
/// StatefulSet a Service of its own (attachments), following its replicas, and takes them
/// away through its finalize hook once the StatefulSet stops matching; a second decorator
/// labels annotated Pods with their own name and, the label set, no longer matches them.
#[test]
fn service_per_pod_decorates_statefulsets_and_pods() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|path, req| match path {
        "/sync-service-per-pod" => (200, examples::service_per_pod_sync(req)),
        "/finalize-service-per-pod" => (200, examples::service_per_pod_finalize(req)),
        "/sync-pod-name-label" => (200, examples::pod_name_label_sync(req)),
        _ => (404, json!({})),
    });
    let op = bosun(&sb, work.path(), &[]);
    decorator_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "service-per-pod"},
            "spec": {
                "resources": [{"apiVersion": "apps/v1", "resource": "statefulsets",
                               "annotationSelector": {"matchExpressions": [
                                   {"key": "service-per-pod-label", "operator": "Exists"},
                                   {"key": "service-per-pod-ports", "operator": "Exists"}]}}],
                "attachments": [{"apiVersion": "v1", "resource": "services"}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync-service-per-pod", hooks.url)}},
                          "finalize": {"webhook": {"url": format!("{}/finalize-service-per-pod", hooks.url)}}}
            }
        }),
    );
    decorator_controller(
        &sb,
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "pod-name-label"},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "pods",
                               "labelSelector": {"matchExpressions": [{"key": "pod-name", "operator": "DoesNotExist"}]},
                               "annotationSelector": {"matchExpressions": [{"key": "pod-name-label", "operator": "Exists"}]}}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync-pod-name-label", hooks.url)}}}
            }
        }),
    );
    let labels = json!({"app": "nginx"});
    let sts = "/apis/apps/v1/namespaces/default/statefulsets/nginx";
    post_ok(
        &sb,
        "/apis/apps/v1/namespaces/default/statefulsets",
        &json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "nginx", "annotations": {"service-per-pod-label": "pod-name",
                                                              "service-per-pod-ports": "80:80"}},
                "spec": {"selector": {"matchLabels": labels}, "serviceName": "nginx", "replicas": 3,
                         "template": {"metadata": {"labels": labels, "annotations": {"pod-name-label": "pod-name"}},
                                      "spec": {"terminationGracePeriodSeconds": 1,
                                               "containers": [{"name": "nginx", "image": "gcr.io/google_containers/nginx-slim:0.8",
                                                               "ports": [{"containerPort": 80, "name": "web"}]}]}}}}),
    );
    let service = |n: i64| {
        get(
            &sb,
            &format!("/api/v1/namespaces/default/services/nginx-{n}"),
        )
    };
    op.wait("a Service per Pod, nginx-0 to nginx-2", WAIT, || {
        (0..3).all(|n| service(n).is_some())
    });
    let first = service(0).expect("nginx-0");
    assert_eq!(first["spec"]["selector"], json!({"pod-name": "nginx-0"}));
    assert_eq!(first["spec"]["ports"][0]["port"], 80);
    assert_eq!(first["spec"]["ports"][0]["targetPort"], 80);
    // A Pod as the StatefulSet controller makes it (the sandbox runs none): the second
    // decorator labels it with its name.
    let pod = "/api/v1/namespaces/default/pods/web-by-hand-0";
    post_ok(
        &sb,
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web-by-hand-0", "labels": labels, "annotations": {"pod-name-label": "pod-name"}},
                "spec": {"containers": [{"name": "nginx", "image": "gcr.io/google_containers/nginx-slim:0.8"}]}}),
    );
    op.wait("the Pod labelled with its name", WAIT, || {
        get(&sb, pod).is_some_and(|p| p["metadata"]["labels"]["pod-name"] == "web-by-hand-0")
    });
    update(&sb, sts, |s| s["spec"]["replicas"] = json!(2));
    op.wait(
        "the third Service gone with the third replica",
        WAIT,
        || service(2).is_none() && service(1).is_some(),
    );
    // The StatefulSet no longer matches: the finalize hook takes its Services away and
    // bosun lets the StatefulSet go.
    update(&sb, sts, |s| {
        s["metadata"]["annotations"]
            .as_object_mut()
            .expect("annotations")
            .remove("service-per-pod-label");
    });
    op.wait("the Services gone, the finalizer removed", WAIT, || {
        (0..3).all(|n| service(n).is_none())
            && get(&sb, sts).is_some_and(|s| {
                s["metadata"]["finalizers"]
                    .as_array()
                    .is_none_or(|f| f.is_empty())
            })
    });
    assert!(
        !hooks.calls("/finalize-service-per-pod").is_empty(),
        "the finalize hook was called"
    );
}
