//! The kind resolver and the object patcher against a real sandbox API server.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::Sandbox;
use bosun::addon::patcher::{KubePatcher, PatchError};
use bosun_addon::ports::ObjectPatcher;
use bosun_kube::{KindResolver, ResolveError};
use serde_json::{Value, json};

async fn client(sb: &Sandbox) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&sb.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// Polls an async condition until it holds; panics with `what` after `timeout`.
async fn eventually<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolver_finds_builtin_kinds_by_any_name() {
    let sb = Sandbox::start();
    let resolver = KindResolver::new(client(&sb).await);
    for name in ["Pod", "pods", "po", "POD"] {
        let r = resolver.resolve(None, name).await.expect(name);
        assert_eq!(
            (r.resource.api_version.as_str(), r.resource.kind.as_str()),
            ("v1", "Pod")
        );
        assert_eq!(r.resource.plural, "pods");
        assert!(r.namespaced);
        assert!(r.subresources.iter().any(|s| s == "status"), "{r:?}");
    }
    for (api_version, name) in [(None, "deploy"), (Some("apps/v1"), "Deployment")] {
        let r = resolver.resolve(api_version, name).await.expect(name);
        assert_eq!(r.resource.api_version, "apps/v1");
        assert_eq!(r.resource.kind, "Deployment");
        assert_eq!(r.resource.plural, "deployments");
    }
    let ns = resolver.resolve(Some("v1"), "ns").await.expect("ns");
    assert!(!ns.namespaced);
    assert_eq!(ns.resource.kind, "Namespace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolver_sees_a_crd_created_after_the_first_lookup() {
    let sb = Sandbox::start();
    let resolver = KindResolver::new(client(&sb).await);
    // Fills the discovery cache before the CRD exists.
    resolver.resolve(None, "Pod").await.expect("pod");
    // Once it is served (kube-apiserver serves a new CRD a moment after the create).
    sb.create_crd(&common::widget_crd());
    for (api_version, name) in [
        (None, "Widget"),
        (None, "widgets"),
        (None, "wg"),
        (Some("example.com/v1"), "widget"),
        (Some("example.com"), "WG"),
    ] {
        let r = resolver.resolve(api_version, name).await.expect(name);
        assert_eq!(r.resource.api_version, "example.com/v1");
        assert_eq!(r.resource.kind, "Widget");
        assert_eq!(r.resource.plural, "widgets");
        assert!(r.namespaced);
        assert_eq!(r.subresources, vec!["status".to_string()]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolver_reports_unknown_kinds() {
    let sb = Sandbox::start();
    let resolver = KindResolver::new(client(&sb).await);
    let err = resolver
        .resolve(None, "Gizmo")
        .await
        .expect_err("unknown kind");
    assert!(matches!(err, ResolveError::NotFound { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "kind \"Gizmo\" is not served by the cluster (looked in every served group, core first)"
    );
    let err = resolver
        .resolve(Some("apps/v1"), "Pod")
        .await
        .expect_err("pod is not in apps");
    assert!(
        err.to_string().contains("(apiVersion \"apps/v1\")"),
        "{err}"
    );
    let err = resolver
        .resolve(Some("nope.example.com/v1"), "Thing")
        .await
        .expect_err("unknown group");
    assert!(
        err.to_string()
            .contains("nope.example.com/v1, which the cluster does not serve"),
        "{err}"
    );
    let err = resolver
        .resolve(Some("a/b/c"), "Pod")
        .await
        .expect_err("invalid apiVersion");
    assert!(
        matches!(err, ResolveError::InvalidApiVersion { .. }),
        "{err:?}"
    );
}

const FIELD_MANAGER: &str = "bosun-test-hooks";

async fn patcher(sb: &Sandbox) -> KubePatcher {
    KubePatcher::new(client(sb).await, Some(FIELD_MANAGER.to_string()))
}

const CM: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOY: &str = "/apis/apps/v1/namespaces/default/deployments";

/// GET of an object path: `Some(object)` or `None` on 404.
fn get(sb: &Sandbox, path: &str) -> Option<Value> {
    match sb.get(path) {
        (200, v) => Some(v),
        (404, _) => None,
        (code, v) => panic!("GET {path}: {code} {v}"),
    }
}

fn must_get(sb: &Sandbox, path: &str) -> Value {
    get(sb, path).unwrap_or_else(|| panic!("{path} is missing"))
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default"}, "data": data})
}

fn deployment(name: &str, replicas: u32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

fn create(sb: &Sandbox, collection: &str, obj: &Value) -> Value {
    let (code, body) = sb.post(collection, obj);
    assert_eq!(code, 201, "{body}");
    body
}

/// JSON lines of operations.
fn stream(ops: &[Value]) -> String {
    ops.iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The error text, asserting the call failed.
async fn failure(p: &KubePatcher, text: &str) -> (PatchError, String) {
    let err = p.execute(text).await.expect_err("the operations must fail");
    let msg = err.to_string();
    (err, msg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_variants() {
    let sb = Sandbox::start();
    let p = patcher(&sb).await;

    p.execute(&stream(&[
        json!({"operation": "Create", "object": config_map("cm1", json!({"a": "1"}))}),
    ]))
    .await
    .expect("create");
    let cm = must_get(&sb, &format!("{CM}/cm1"));
    assert_eq!(cm["data"], json!({"a": "1"}));
    assert!(
        cm["metadata"]["managedFields"]
            .as_array()
            .is_some_and(|m| m.iter().any(|e| e["manager"] == FIELD_MANAGER)),
        "{cm}"
    );

    let (err, msg) = failure(
        &p,
        &stream(&[json!({"operation": "Create", "object": config_map("cm1", json!({"a": "2"}))})]),
    )
    .await;
    assert!(matches!(err, PatchError::Failed { .. }), "{err:?}");
    assert!(
        msg.contains("operation 1 (Create ConfigMap default/cm1): ")
            && msg.contains("already exists"),
        "{msg}"
    );

    // Exists: ignored and left alone; missing: created.
    p.execute(&stream(&[
        json!({"operation": "CreateIfNotExists", "object": config_map("cm1", json!({"a": "3"}))}),
        json!({"operation": "CreateIfNotExists", "object": config_map("cm2", json!({"b": "1"}))}),
    ]))
    .await
    .expect("create if not exists");
    assert_eq!(
        must_get(&sb, &format!("{CM}/cm1"))["data"],
        json!({"a": "1"})
    );
    assert_eq!(
        must_get(&sb, &format!("{CM}/cm2"))["data"],
        json!({"b": "1"})
    );

    // The object as a YAML string, without apiVersion, in another namespace; and a
    // cluster-scoped kind.
    let text = r#"
operation: Create
object: |
  apiVersion: v1
  kind: Namespace
  metadata:
    name: team-a
---
operation: Create
namespace: default
object: |
  kind: ConfigMap
  metadata:
    name: cm3
    namespace: team-a
  data:
    c: "1"
"#;
    p.execute(text).await.expect("yaml creates");
    assert!(get(&sb, "/api/v1/namespaces/team-a").is_some());
    assert_eq!(
        must_get(&sb, "/api/v1/namespaces/team-a/configmaps/cm3")["data"],
        json!({"c": "1"})
    );
    assert!(get(&sb, &format!("{CM}/cm3")).is_none());

    // generateName.
    p.execute(&stream(&[json!({"operation": "Create", "object": {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"generateName": "gen-", "namespace": "default"}}})]))
        .await
        .expect("generateName");
    let (_, list) = sb.get(CM);
    assert!(
        list["items"]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("gen-")))),
        "{list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_or_update_replaces_the_whole_object() {
    let sb = Sandbox::start();
    let p = patcher(&sb).await;
    let op = |data: Value| {
        stream(&[json!({"operation": "CreateOrUpdate", "object": config_map("cfg", data)})])
    };
    p.execute(&op(json!({"a": "1", "b": "2"})))
        .await
        .expect("create");
    let first = must_get(&sb, &format!("{CM}/cfg"));
    assert_eq!(first["data"], json!({"a": "1", "b": "2"}));
    p.execute(&op(json!({"a": "9"}))).await.expect("update");
    let second = must_get(&sb, &format!("{CM}/cfg"));
    assert_eq!(
        second["data"],
        json!({"a": "9"}),
        "a full update, not a merge"
    );
    assert_eq!(second["metadata"]["uid"], first["metadata"]["uid"]);
    assert_ne!(
        second["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_and_json_patches() {
    let sb = Sandbox::start();
    let p = patcher(&sb).await;
    create(&sb, DEPLOY, &deployment("nginx", 1));
    let path = format!("{DEPLOY}/nginx");

    // JSON stream: a map merge patch, then a JSON patch array.
    p.execute(&stream(&[
        json!({"operation": "MergePatch", "kind": "Deployment", "namespace": "default", "name": "nginx",
               "mergePatch": {"spec": {"replicas": 3}, "metadata": {"labels": {"patched": "merge"}}}}),
        json!({"operation": "JSONPatch", "kind": "deploy", "namespace": "default", "name": "nginx",
               "jsonPatch": [{"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}}]}),
    ]))
    .await
    .expect("patches");
    let d = must_get(&sb, &path);
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["labels"]["patched"], "merge");
    assert_eq!(d["metadata"]["annotations"]["x"], "y");

    // YAML documents, patches given as strings, apiVersion explicit.
    let text = r#"
operation: MergePatch
apiVersion: apps/v1
kind: deployments
namespace: default
name: nginx
mergePatch: |
  spec:
    replicas: 5
---
operation: JSONPatch
apiVersion: apps/v1
kind: Deployment
namespace: default
name: nginx
jsonPatch: '[{"op": "replace", "path": "/metadata/labels/patched", "value": "json"}]'
"#;
    p.execute(text).await.expect("yaml patches");
    let d = must_get(&sb, &path);
    assert_eq!(d["spec"]["replicas"], 5);
    assert_eq!(d["metadata"]["labels"]["patched"], "json");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_subresource_patches() {
    let sb = Sandbox::start();
    let p = patcher(&sb).await;
    sb.create_crd(&common::widget_crd());
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    create(
        &sb,
        widgets,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 1}}),
    );
    p.execute(&stream(&[
        // Without the subresource, status changes are ignored by the server.
        json!({"operation": "MergePatch", "kind": "Widget", "namespace": "default", "name": "w1",
               "mergePatch": {"status": {"phase": "main"}}}),
        json!({"operation": "MergePatch", "kind": "wg", "namespace": "default", "name": "w1",
               "subresource": "status", "mergePatch": {"status": {"ready": true}}}),
        json!({"operation": "JSONPatch", "kind": "widgets", "namespace": "default", "name": "w1",
               "subresource": "status", "jsonPatch": [{"op": "add", "path": "/status/count", "value": 2}]}),
        json!({"operation": "JQPatch", "kind": "Widget", "namespace": "default", "name": "w1",
               "subresource": "status", "jqFilter": ".status.jq = \"yes\""}),
    ]))
    .await
    .expect("status patches");
    let w = must_get(&sb, &format!("{widgets}/w1"));
    assert_eq!(
        w["status"],
        json!({"ready": true, "count": 2, "jq": "yes"}),
        "{w}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jq_patch_updates_only_on_change() {
    let sb = Sandbox::start();
    let p = patcher(&sb).await;
    create(&sb, CM, &config_map("jq", json!({"n": "1"})));
    let path = format!("{CM}/jq");
    let op = |filter: &str| {
        stream(&[
            json!({"operation": "JQPatch", "kind": "cm", "namespace": "default", "name": "jq",
                        "jqFilter": filter}),
        ])
    };
    p.execute(&op(".data.n = \"2\" | .metadata.labels.touched = \"yes\""))
        .await
        .expect("jq patch");
    let after = must_get(&sb, &path);
    assert_eq!(after["data"]["n"], "2");
    assert_eq!(after["metadata"]["labels"]["touched"], "yes");

    p.execute(&op(".data.n = \"2\""))
        .await
        .expect("no-op jq patch");
    let unchanged = must_get(&sb, &path);
    assert_eq!(
        unchanged["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"],
        "nothing to change: no update"
    );

    let (_, msg) = failure(&p, &op(".data.n | tonumber | error(\"boom\")")).await;
    assert!(
        msg.contains("operation 1 (JQPatch cm default/jq): jq program") && msg.contains("boom"),
        "{msg}"
    );
    let (_, msg) = failure(&p, &op(".data.n")).await;
    assert!(
        msg.contains("jqFilter produced \"2\", not an object"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions() {
    let sb = Sandbox::start();
    let p = patcher(&sb).await;
    let owned = |name: &str, owner: &Value| {
        let mut cm = config_map(name, json!({}));
        cm["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            "blockOwnerDeletion": true}]);
        cm
    };
    let fg = create(&sb, CM, &config_map("fg", json!({})));
    create(&sb, CM, &owned("fg-child", &fg));
    let bg = create(&sb, CM, &config_map("bg", json!({})));
    create(&sb, CM, &owned("bg-child", &bg));
    let orphan = create(&sb, CM, &config_map("orphan", json!({})));
    create(&sb, CM, &owned("orphan-child", &orphan));

    // Foreground: returns once the object (and so its dependents) are gone.
    p.execute(&stream(&[
        json!({"operation": "Delete", "kind": "ConfigMap", "namespace": "default", "name": "fg"}),
    ]))
    .await
    .expect("delete");
    assert!(get(&sb, &format!("{CM}/fg")).is_none());
    assert!(get(&sb, &format!("{CM}/fg-child")).is_none());

    p.execute(&stream(&[
        json!({"operation": "DeleteInBackground", "kind": "ConfigMap", "namespace": "default", "name": "bg"}),
        json!({"operation": "DeleteNonCascading", "kind": "ConfigMap", "namespace": "default", "name": "orphan"}),
        // Missing objects are fine for every delete.
        json!({"operation": "Delete", "kind": "ConfigMap", "namespace": "default", "name": "never-was"}),
    ]))
    .await
    .expect("deletes");
    eventually(
        "background deletion of bg and its dependent",
        Duration::from_secs(20),
        || async {
            get(&sb, &format!("{CM}/bg")).is_none() && get(&sb, &format!("{CM}/bg-child")).is_none()
        },
    )
    .await;
    eventually(
        "orphaning deletion of orphan",
        Duration::from_secs(20),
        || async { get(&sb, &format!("{CM}/orphan")).is_none() },
    )
    .await;
    let child = must_get(&sb, &format!("{CM}/orphan-child"));
    assert!(
        child["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(|r| r.is_empty()),
        "the dependent is released: {child}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_objects() {
    let sb = Sandbox::start();
    let p = patcher(&sb).await;
    let merge = |ignore: bool| {
        stream(&[
            json!({"operation": "MergePatch", "kind": "ConfigMap", "namespace": "default",
            "name": "nope", "mergePatch": {"data": {"a": "1"}}, "ignoreMissingObject": ignore}),
        ])
    };
    let (_, msg) = failure(&p, &merge(false)).await;
    assert!(
        msg.contains("operation 1 (MergePatch ConfigMap default/nope): ")
            && msg.contains("not found"),
        "{msg}"
    );
    p.execute(&merge(true)).await.expect("ignoreMissingObject");
    p.execute(&stream(&[
        json!({"operation": "JQPatch", "kind": "ConfigMap", "namespace": "default", "name": "nope",
               "jqFilter": ".data.a = \"1\"", "ignoreMissingObject": true}),
        json!({"operation": "JSONPatch", "kind": "ConfigMap", "namespace": "default", "name": "nope",
               "jsonPatch": [{"op": "add", "path": "/data", "value": {}}], "ignoreMissingObject": true}),
    ]))
    .await
    .expect("ignored for every patch");
    assert!(get(&sb, &format!("{CM}/nope")).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_name_the_operation() {
    let sb = Sandbox::start();
    let p = patcher(&sb).await;

    // Unknown kind: execution fails there, later operations still run.
    let (err, msg) = failure(
        &p,
        &stream(&[
            json!({"operation": "MergePatch", "kind": "Gizmo", "namespace": "default", "name": "x",
                   "mergePatch": {"a": 1}}),
            json!({"operation": "Create", "object": config_map("after", json!({}))}),
        ]),
    )
    .await;
    assert!(
        matches!(err, PatchError::Failed { total: 2, .. }),
        "{err:?}"
    );
    assert!(
        msg.contains("1 of 2 object patcher operations failed")
            && msg
                .contains("operation 1 (MergePatch Gizmo default/x): kind \"Gizmo\" is not served"),
        "{msg}"
    );
    assert!(get(&sb, &format!("{CM}/after")).is_some());

    // Validation problems: nothing runs, every problem is listed.
    let (err, msg) = failure(
        &p,
        &stream(&[
            json!({"operation": "Create", "object": config_map("not-created", json!({}))}),
            json!({"operation": "MergePatch", "kind": "Deployment", "namespace": "default", "name": "nginx"}),
            json!({"operation": "Upsert", "kind": "ConfigMap", "namespace": "default", "name": "y"}),
            json!({"operation": "Delete", "kind": "ConfigMap", "namespace": "default"}),
            json!({"operation": "Delete", "kind": "ConfigMap", "namespace": "default", "name": "z", "propagation": "x"}),
        ]),
    )
    .await;
    assert!(
        matches!(err, PatchError::Invalid(ref e) if e.len() == 4),
        "{err:?}"
    );
    assert!(
        msg.contains(
            "operation 2 (MergePatch Deployment default/nginx): field \"mergePatch\" is required"
        ),
        "{msg}"
    );
    assert!(
        msg.contains("operation 3 (Upsert ConfigMap default/y): unknown operation \"Upsert\""),
        "{msg}"
    );
    assert!(
        msg.contains("operation 4 (Delete ConfigMap default/?): field \"name\" is required"),
        "{msg}"
    );
    assert!(
        msg.contains("operation 5 (Delete ConfigMap default/z): unknown field \"propagation\""),
        "{msg}"
    );
    assert!(get(&sb, &format!("{CM}/not-created")).is_none());

    // Neither JSON nor YAML.
    let (err, msg) = failure(&p, "{\"operation\": \"Create\",\n  - : [\n").await;
    assert!(matches!(err, PatchError::Parse { .. }), "{err:?}");
    assert!(
        msg.starts_with("cannot parse the object patcher operations"),
        "{msg}"
    );

    // A namespaced kind needs a namespace.
    let (_, msg) = failure(
        &p,
        &stream(&[json!({"operation": "Delete", "kind": "Pod", "name": "p"})]),
    )
    .await;
    assert!(
        msg.contains(
            "operation 1 (Delete Pod p): Pod (v1) is namespaced but field \"namespace\" is empty"
        ),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_patcher_port() {
    let sb = Sandbox::start();
    let p: Box<dyn ObjectPatcher> = Box::new(patcher(&sb).await);
    p.apply("hook.sh".into(), String::new())
        .await
        .expect("empty text");
    p.apply(
        "hook.sh".into(),
        stream(&[
            json!({"operation": "CreateOrUpdate", "object": config_map("port", json!({"k": "v"}))}),
        ]),
    )
    .await
    .expect("create");
    assert_eq!(
        must_get(&sb, &format!("{CM}/port"))["data"],
        json!({"k": "v"})
    );
    let err = p
        .apply("hook.sh".into(), "operation: Bogus\n".into())
        .await
        .expect_err("invalid");
    assert!(
        err.message()
            .contains("operation 1 (Bogus ? ?): unknown operation"),
        "{err}"
    );
    assert!(
        !err.is_transient(),
        "malformed operations fail the same way again"
    );
}
