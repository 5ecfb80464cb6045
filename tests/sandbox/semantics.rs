//! Object semantics of the sandbox API server, over real HTTP: conflicts, generation,
//! finalizers, owner-reference cascades, status subresource, CRD lifecycle, persistence
//! and bad input.

use crate::common;

use std::time::Duration;

use crate::common::{Sandbox, wait_for};
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOY: &str = "/apis/apps/v1/namespaces/default/deployments";

fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    })
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("resourceVersion")
}

#[test]
fn create_fills_system_fields_and_stale_update_conflicts() {
    let sb = Sandbox::start();
    let (code, created) = sb.post(CM, &json!({"metadata": {"name": "a"}, "data": {"k": "v"}}));
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["kind"], "ConfigMap");
    assert_eq!(created["apiVersion"], "v1");
    assert!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| u.len() == 36)
    );
    assert!(
        created["metadata"]["creationTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    let first_rv = rv(&created);

    let (code, dup) = sb.post(CM, &json!({"metadata": {"name": "a"}}));
    assert_eq!(
        (code, dup["reason"].as_str()),
        (409, Some("AlreadyExists")),
        "{dup}"
    );

    let mut update = created.clone();
    update["data"]["k"] = json!("v2");
    let (code, updated) = sb.put(&format!("{CM}/a"), &update);
    assert_eq!(code, 200, "{updated}");
    assert!(rv(&updated) > first_rv, "resourceVersion grows");
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);

    // The same body again carries the old resourceVersion: conflict.
    update["data"]["k"] = json!("v3");
    let (code, conflict) = sb.put(&format!("{CM}/a"), &update);
    assert_eq!(code, 409, "{conflict}");
    assert_eq!(conflict["kind"], "Status");
    assert_eq!(conflict["reason"], "Conflict");
    assert!(
        conflict["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the object has been modified")
    );

    // generateName.
    let (code, generated) = sb.post(CM, &json!({"metadata": {"generateName": "gen-"}}));
    assert_eq!(code, 201);
    let name = generated["metadata"]["name"].as_str().unwrap_or_default();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
}

#[test]
fn generation_moves_only_with_spec_and_status_is_isolated() {
    let sb = Sandbox::start();
    let (code, d) = sb.post(DEPLOY, &deployment("web", 1));
    assert_eq!(code, 201, "{d}");
    assert_eq!(d["metadata"]["generation"], 1);

    // A label change does not bump generation.
    let mut body = d.clone();
    body["metadata"]["labels"]["extra"] = json!("yes");
    let (_, d2) = sb.put(&format!("{DEPLOY}/web"), &body);
    assert_eq!(d2["metadata"]["generation"], 1, "{d2}");

    // A spec change does.
    let mut body = d2.clone();
    body["spec"]["replicas"] = json!(3);
    let (_, d3) = sb.put(&format!("{DEPLOY}/web"), &body);
    assert_eq!(d3["metadata"]["generation"], 2);

    // Status written through the main endpoint is ignored.
    let mut body = d3.clone();
    body["status"] = json!({"replicas": 3});
    let (_, d4) = sb.put(&format!("{DEPLOY}/web"), &body);
    assert!(d4["status"]["replicas"].is_null(), "{d4}");

    // Through /status it lands, spec changes there are ignored, generation stays.
    let mut body = d4.clone();
    body["status"] = json!({"replicas": 3, "readyReplicas": 2});
    body["spec"]["replicas"] = json!(9);
    let (code, d5) = sb.put(&format!("{DEPLOY}/web/status"), &body);
    assert_eq!(code, 200, "{d5}");
    assert_eq!(d5["status"]["readyReplicas"], 2);
    assert_eq!(d5["spec"]["replicas"], 3);
    assert_eq!(d5["metadata"]["generation"], 2);

    // A no-op update writes nothing.
    let (_, d6) = sb.put(&format!("{DEPLOY}/web"), &d5);
    assert_eq!(rv(&d6), rv(&d5));

    // Scale subresource.
    let (code, scale) = sb.get(&format!("{DEPLOY}/web/scale"));
    assert_eq!(
        (code, scale["spec"]["replicas"].as_i64()),
        (200, Some(3)),
        "{scale}"
    );
    let (code, _) = sb.request(
        "PATCH",
        &format!("{DEPLOY}/web/scale"),
        "application/merge-patch+json",
        r#"{"spec":{"replicas":5}}"#,
    );
    assert_eq!(code, 200);
    let (_, d7) = sb.get(&format!("{DEPLOY}/web"));
    assert_eq!(d7["spec"]["replicas"], 5);
}

#[test]
fn finalizers_block_delete_until_removed() {
    let sb = Sandbox::start();
    let (_, cm) = sb.post(
        CM,
        &json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    );
    let (code, deleting) = sb.request("DELETE", &format!("{CM}/held"), "", "");
    assert_eq!(code, 200);
    assert!(
        deleting["metadata"]["deletionTimestamp"].is_string(),
        "{deleting}"
    );
    let (code, still) = sb.get(&format!("{CM}/held"));
    assert_eq!(code, 200, "a finalizer keeps the object");
    assert_eq!(still["metadata"]["uid"], cm["metadata"]["uid"]);

    // New finalizers cannot be added while terminating.
    let mut body = still.clone();
    body["metadata"]["finalizers"] = json!(["example.com/hold", "example.com/other"]);
    let (code, _) = sb.put(&format!("{CM}/held"), &body);
    assert_eq!(code, 422);

    let (code, _) = sb.request(
        "PATCH",
        &format!("{CM}/held"),
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":null}}"#,
    );
    assert_eq!(code, 200);
    let (code, _) = sb.get(&format!("{CM}/held"));
    assert_eq!(code, 404, "removing the last finalizer deletes the object");
}

fn owned_cm(sb: &Sandbox, name: &str, owner: &Value) {
    let (code, body) = sb.post(
        CM,
        &json!({"metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "Deployment", "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true}]}}),
    );
    assert_eq!(code, 201, "{body}");
}

#[test]
fn owner_reference_cascades_follow_the_propagation_policy() {
    let sb = Sandbox::start();
    let gone = |path: &str| sb.get(path).0 == 404;

    // Background: the owner goes at once, dependents follow.
    let (_, owner) = sb.post(DEPLOY, &deployment("bg", 1));
    owned_cm(&sb, "bg-child", &owner);
    let (code, _) = sb.request(
        "DELETE",
        &format!("{DEPLOY}/bg"),
        "application/json",
        r#"{"propagationPolicy":"Background"}"#,
    );
    assert_eq!(code, 200);
    assert!(gone(&format!("{DEPLOY}/bg")));
    wait_for("background cascade", Duration::from_secs(10), || {
        gone(&format!("{CM}/bg-child"))
    });

    // Foreground: the owner waits (with the foregroundDeletion finalizer) for its dependents.
    let (_, owner) = sb.post(DEPLOY, &deployment("fg", 1));
    let (_, _) = sb.post(
        CM,
        &json!({"metadata": {"name": "fg-child", "finalizers": ["example.com/slow"], "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "Deployment", "name": "fg", "uid": owner["metadata"]["uid"]}]}}),
    );
    let (_, deleting) = sb.request(
        "DELETE",
        &format!("{DEPLOY}/fg"),
        "application/json",
        r#"{"propagationPolicy":"Foreground"}"#,
    );
    assert!(
        deleting["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("foregroundDeletion")))
    );
    wait_for(
        "dependent marked for deletion",
        Duration::from_secs(10),
        || sb.get(&format!("{CM}/fg-child")).1["metadata"]["deletionTimestamp"].is_string(),
    );
    assert_eq!(
        sb.get(&format!("{DEPLOY}/fg")).0,
        200,
        "owner waits for its dependent"
    );
    sb.request(
        "PATCH",
        &format!("{CM}/fg-child"),
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":null}}"#,
    );
    wait_for("foreground owner deleted", Duration::from_secs(10), || {
        gone(&format!("{DEPLOY}/fg"))
    });

    // Orphan: dependents stay, without the owner reference.
    let (_, owner) = sb.post(DEPLOY, &deployment("or", 1));
    owned_cm(&sb, "or-child", &owner);
    sb.request(
        "DELETE",
        &format!("{DEPLOY}/or?propagationPolicy=Orphan"),
        "",
        "",
    );
    wait_for("orphaning owner deleted", Duration::from_secs(10), || {
        gone(&format!("{DEPLOY}/or"))
    });
    let (code, child) = sb.get(&format!("{CM}/or-child"));
    assert_eq!(code, 200);
    assert!(child["metadata"]["ownerReferences"].is_null(), "{child}");

    // preconditions.uid.
    let (_, owner) = sb.post(DEPLOY, &deployment("pre", 1));
    let (code, status) = sb.request(
        "DELETE",
        &format!("{DEPLOY}/pre"),
        "application/json",
        r#"{"preconditions":{"uid":"nope"}}"#,
    );
    assert_eq!(code, 409, "{status}");
    let body = json!({"preconditions": {"uid": owner["metadata"]["uid"]}}).to_string();
    let (code, _) = sb.request(
        "DELETE",
        &format!("{DEPLOY}/pre"),
        "application/json",
        &body,
    );
    assert_eq!(code, 200);
}

#[test]
fn names_with_escaped_characters_are_found_as_the_python_client_asks_for_them() {
    let sb = Sandbox::start();
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                      "metadata": {"name": "system:probe"}, "rules": []});
    let (code, created) = sb.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", &role);
    assert_eq!(code, 201, "{created}");
    // The Python client escapes ':' in names; kubectl does not. Both find the object.
    for path in [
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aprobe",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:probe",
    ] {
        let (code, got) = sb.get(path);
        assert_eq!(
            (code, got["metadata"]["name"].as_str()),
            (200, Some("system:probe")),
            "{path}"
        );
    }
}

#[test]
fn namespace_deletion_removes_its_content() {
    let sb = Sandbox::start();
    let (code, _) = sb.post("/api/v1/namespaces", &json!({"metadata": {"name": "tmp"}}));
    assert_eq!(code, 201);
    for i in 0..3 {
        sb.post(
            "/api/v1/namespaces/tmp/configmaps",
            &json!({"metadata": {"name": format!("c{i}")}}),
        );
    }
    let (code, ns) = sb.request("DELETE", "/api/v1/namespaces/tmp", "", "");
    assert_eq!(code, 200);
    assert_eq!(ns["status"]["phase"], "Terminating");
    wait_for("namespace gone", Duration::from_secs(10), || {
        sb.get("/api/v1/namespaces/tmp").0 == 404
    });
    let (_, list) = sb.get("/api/v1/namespaces/tmp/configmaps");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0));
    let (code, status) = sb.post(
        "/api/v1/namespaces/missing/configmaps",
        &json!({"metadata": {"name": "x"}}),
    );
    assert_eq!(
        (code, status["reason"].as_str()),
        (404, Some("NotFound")),
        "{status}"
    );
}

#[test]
fn crd_lifecycle_serves_and_removes_the_resource() {
    let sb = Sandbox::start();
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    assert_eq!(sb.get(widgets).0, 404);
    let (code, created) = sb.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &common::widget_crd(),
    );
    assert_eq!(code, 201, "{created}");
    assert!(
        created["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Established"))
    );
    let (_, disc) = sb.get("/apis/example.com/v1");
    assert_eq!(disc["resources"][0]["name"], "widgets");
    assert_eq!(disc["resources"][0]["shortNames"][0], "wg");
    assert_eq!(disc["resources"][1]["name"], "widgets/status");
    let (_, groups) = sb.get("/apis");
    assert!(
        groups["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["name"] == "example.com"))
    );

    let (code, w) = sb.post(
        widgets,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 1}, "status": {"ignored": true}}),
    );
    assert_eq!(code, 201, "{w}");
    assert_eq!(w["metadata"]["generation"], 1);
    assert!(
        w["status"].is_null(),
        "status is ignored on create with a status subresource"
    );
    let (code, _) = sb.request(
        "PATCH",
        &format!("{widgets}/w1"),
        "application/strategic-merge-patch+json",
        "{}",
    );
    assert_eq!(
        code, 415,
        "strategic merge patch is not for custom resources"
    );

    let (code, _) = sb.request(
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
        "",
        "",
    );
    assert_eq!(code, 200);
    wait_for("resource unserved", Duration::from_secs(10), || {
        sb.get(widgets).0 == 404
    });
    assert_eq!(sb.get("/apis/example.com/v1").0, 404);
}

#[test]
fn data_persists_across_restart() {
    let mut sb = Sandbox::start();
    sb.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &common::widget_crd(),
    );
    sb.post(
        "/apis/example.com/v1/namespaces/default/widgets",
        &json!({"metadata": {"name": "kept"}, "spec": {"a": 1}}),
    );
    let (_, cm) = sb.post(
        CM,
        &json!({"metadata": {"name": "kept"}, "data": {"x": "1"}}),
    );
    sb.kill9();
    sb.restart();
    let (code, again) = sb.get(&format!("{CM}/kept"));
    assert_eq!(code, 200);
    assert_eq!(again["metadata"]["uid"], cm["metadata"]["uid"]);
    assert_eq!(again["data"]["x"], "1");
    let (code, w) = sb.get("/apis/example.com/v1/namespaces/default/widgets/kept");
    assert_eq!(code, 200, "CRDs and their objects survive: {w}");
    let (_, next) = sb.post(CM, &json!({"metadata": {"name": "after"}}));
    assert!(
        rv(&next) > rv(&cm),
        "resourceVersion keeps growing after a restart"
    );
}

#[test]
fn bad_input_gets_a_status_and_the_server_keeps_serving() {
    let sb = Sandbox::start();
    let cases: Vec<(&str, &str, &str, &str, u16)> = vec![
        ("POST", CM, "application/json", "{not json", 400),
        ("POST", CM, "application/yaml", "a: [unclosed", 400),
        ("POST", CM, "application/json", "", 400),
        (
            "POST",
            CM,
            "application/json",
            r#"{"metadata":{"name":"Bad_Name"}}"#,
            422,
        ),
        (
            "POST",
            CM,
            "application/json",
            r#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
            400,
        ),
        (
            "POST",
            CM,
            "application/json",
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#,
            400,
        ),
        (
            "POST",
            CM,
            "application/vnd.kubernetes.protobuf",
            "\x00",
            415,
        ),
        ("POST", CM, "application/cbor", "\x00", 415),
        ("GET", "/api/v1/namespaces/default/nothings", "", "", 404),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(",
            "",
            "",
            400,
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?fieldSelector=spec.foo%3Dbar",
            "",
            "",
            400,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/configmaps/none",
            "application/merge-patch+json",
            "{}",
            404,
        ),
        (
            "DELETE",
            "/api/v1/namespaces/default/configmaps/none",
            "",
            "",
            404,
        ),
    ];
    for (method, path, ct, body, want) in cases {
        let (code, status) = sb.request(method, path, ct, body);
        assert_eq!(code, want, "{method} {path} {body:?} → {status}");
        assert_eq!(status["kind"], "Status", "{method} {path}: {status}");
        assert_eq!(status["code"], want);
        assert!(status["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    // A group the server does not serve has no handler at all: kube-apiserver's plain 404.
    let (code, bytes) = common::http_raw(sb.addr(), "GET", "/apis/nope.example.com/v1", "", b"");
    assert_eq!(code, 404);
    assert_eq!(String::from_utf8_lossy(&bytes).trim(), "404 page not found");
    let big = format!(
        r#"{{"metadata":{{"name":"big"}},"data":{{"x":"{}"}}}}"#,
        "a".repeat(4 * 1024 * 1024)
    );
    let (code, _) = sb.request("POST", CM, "application/json", &big);
    assert_eq!(code, 413);
    let (code, _) = sb.post(CM, &json!({"metadata": {"name": "fine"}}));
    assert_eq!(code, 201, "the server still serves");
}

#[test]
fn list_paginates_and_filters_by_labels_and_fields() {
    let sb = Sandbox::start();
    for i in 0..7 {
        sb.post(CM, &json!({"metadata": {"name": format!("p{i}"), "labels": {"tier": if i % 2 == 0 { "even" } else { "odd" }}}}));
    }
    let (_, page1) = sb.get(&format!("{CM}?limit=3"));
    assert_eq!(page1["items"].as_array().map(Vec::len), Some(3));
    let token = page1["metadata"]["continue"]
        .as_str()
        .expect("continue")
        .to_string();
    let (_, page2) = sb.get(&format!("{CM}?limit=10&continue={token}"));
    let names: Vec<&str> = page2["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, vec!["p3", "p4", "p5", "p6"]);
    assert_eq!(
        page1["metadata"]["remainingItemCount"], 4,
        "without selectors the rest is counted"
    );
    assert!(page2["metadata"]["continue"].is_null(), "the last page");
    // With a selector, pages hold matches only; kube-apiserver does not count the rest.
    let (_, even1) = sb.get(&format!("{CM}?limit=2&labelSelector=tier%3Deven"));
    let token = even1["metadata"]["continue"].as_str().expect("continue");
    assert!(even1["metadata"]["remainingItemCount"].is_null(), "{even1}");
    let (_, even2) = sb.get(&format!(
        "{CM}?limit=2&labelSelector=tier%3Deven&continue={token}"
    ));
    let names = |page: &serde_json::Value| -> Vec<String> {
        page["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["metadata"]["name"].as_str().map(String::from))
            .collect()
    };
    assert_eq!(names(&even1), ["p0", "p2"]);
    assert_eq!(names(&even2), ["p4", "p6"]);
    assert!(even2["metadata"]["continue"].is_null(), "{even2}");
    // Across namespaces, a page continues in the next namespace.
    sb.post("/api/v1/namespaces", &json!({"metadata": {"name": "zz"}}));
    sb.post(
        "/api/v1/namespaces/zz/configmaps",
        &json!({"metadata": {"name": "a"}}),
    );
    let (_, first) = sb.get("/api/v1/configmaps?limit=7");
    let token = first["metadata"]["continue"].as_str().expect("continue");
    let (_, rest) = sb.get(&format!("/api/v1/configmaps?limit=7&continue={token}"));
    assert_eq!(names(&rest), ["a"]);
    assert_eq!(rest["items"][0]["metadata"]["namespace"], "zz");
    let (_, even) = sb.get(&format!("{CM}?labelSelector=tier%3Deven"));
    assert_eq!(even["items"].as_array().map(Vec::len), Some(4));
    let (_, notin) = sb.get(&format!("{CM}?labelSelector=tier%20notin%20(even)"));
    assert_eq!(notin["items"].as_array().map(Vec::len), Some(3));
    let (_, one) = sb.get(&format!("{CM}?fieldSelector=metadata.name%3Dp5"));
    assert_eq!(one["items"][0]["metadata"]["name"], "p5");
    let (_, all) = sb.get("/api/v1/configmaps?fieldSelector=metadata.namespace%3Ddefault");
    assert_eq!(all["items"].as_array().map(Vec::len), Some(7));
}

#[test]
fn bearer_token_is_required_when_configured() {
    let sb = Sandbox::start_with(&["--token", "s3cret"]);
    let (code, body) = common::http_full(sb.addr(), "GET", "/api/v1/namespaces", &[], b"");
    assert_eq!(code, 401, "{}", String::from_utf8_lossy(&body));
    let status: serde_json::Value = serde_json::from_slice(&body).expect("a Status");
    assert_eq!(status["reason"], "Unauthorized", "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains("carries no bearer token"), "{status}");
    let (code, body) = common::http_full(
        sb.addr(),
        "GET",
        "/api/v1/namespaces",
        &[("Authorization", "Bearer wrong")],
        b"",
    );
    assert_eq!(code, 401);
    let status: serde_json::Value = serde_json::from_slice(&body).expect("a Status");
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["code"], 401, "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains("the bearer token was refused"), "{status}");
    let (code, body) = common::http_full(
        sb.addr(),
        "GET",
        "/api/v1/namespaces",
        &[("Authorization", "Bearer s3cret")],
        b"",
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let kubeconfig = std::fs::read_to_string(&sb.kubeconfig).expect("kubeconfig");
    assert!(
        kubeconfig.contains("token: s3cret"),
        "the written kubeconfig carries the token"
    );
}

#[test]
fn dry_run_apply_answers_the_merged_object_and_stores_nothing() {
    let sb = Sandbox::start();
    let (code, created) = sb.post(
        CM,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "dry", "labels": {"team": "a"}}, "data": {"color": "green"}}),
    );
    assert_eq!(code, 201, "{created}");
    let apply = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dry\ndata:\n  color: blue\n";
    let path = format!("{CM}/dry?fieldManager=differ&force=true&dryRun=All");
    let (code, merged) = sb.request("PATCH", &path, "application/apply-patch+yaml", apply);
    assert_eq!(code, 200, "{merged}");
    assert_eq!(merged["data"]["color"], "blue", "{merged}");
    assert_eq!(
        merged["metadata"]["labels"]["team"], "a",
        "another manager's field stays"
    );
    let (_, live) = sb.get(&format!("{CM}/dry"));
    assert_eq!(live["data"]["color"], "green", "{live}");
    assert_eq!(rv(&live), rv(&created));
    // A dry-run apply of an object that does not exist creates nothing.
    let (code, _) = sb.request(
        "PATCH",
        &format!("{CM}/ghost?fieldManager=differ&dryRun=All"),
        "application/apply-patch+yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ghost\n",
    );
    assert_eq!(code, 201);
    assert_eq!(sb.get(&format!("{CM}/ghost")).0, 404);
}

const SECRETS: &str = "/api/v1/namespaces/default/secrets";

#[test]
fn secret_string_data_is_folded_into_data_on_every_write() {
    let sb = Sandbox::start();
    let (code, created) = sb.post(
        SECRETS,
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"kept": "a2VwdA==", "over": "b2xk"}, "stringData": {"over": "new", "plain": "hello"}}),
    );
    assert_eq!(code, 201, "{created}");
    let (_, live) = sb.get(&format!("{SECRETS}/s"));
    assert_eq!(
        live["data"],
        json!({"kept": "a2VwdA==", "over": "bmV3", "plain": "aGVsbG8="}),
        "{live}"
    );
    assert!(live.get("stringData").is_none(), "{live}");
    assert_eq!(live["type"], "Opaque", "{live}");

    // PUT.
    let mut update = live.clone();
    update["stringData"] = json!({"plain": "bye"});
    let (code, updated) = sb.put(&format!("{SECRETS}/s"), &update);
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["data"]["plain"], "Ynll", "{updated}");
    assert!(updated.get("stringData").is_none(), "{updated}");

    // Every patch type.
    let patches = [
        (
            "application/merge-patch+json",
            r#"{"stringData": {"plain": "merge"}}"#,
            "bWVyZ2U=",
        ),
        (
            "application/strategic-merge-patch+json",
            r#"{"stringData": {"plain": "smp"}}"#,
            "c21w",
        ),
        (
            "application/json-patch+json",
            r#"[{"op": "add", "path": "/stringData", "value": {"plain": "json"}}]"#,
            "anNvbg==",
        ),
    ];
    for (content_type, body, want) in patches {
        let (code, patched) = sb.request("PATCH", &format!("{SECRETS}/s"), content_type, body);
        assert_eq!(code, 200, "{content_type}: {patched}");
        let (_, live) = sb.get(&format!("{SECRETS}/s"));
        assert_eq!(live["data"]["plain"], want, "{content_type}: {live}");
        assert!(live.get("stringData").is_none(), "{content_type}: {live}");
    }
    let apply =
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  plain: applied\n";
    let (code, applied) = sb.request(
        "PATCH",
        &format!("{SECRETS}/s?fieldManager=me&force=true"),
        "application/apply-patch+yaml",
        apply,
    );
    assert_eq!(code, 200, "{applied}");
    let (_, live) = sb.get(&format!("{SECRETS}/s"));
    assert_eq!(live["data"]["plain"], "YXBwbGllZA==", "{live}");
    assert!(live.get("stringData").is_none(), "{live}");
}

#[test]
fn namespaces_carry_their_name_label_and_selectors_match_it() {
    let sb = Sandbox::start();
    let (code, created) = sb.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "spoofed"}}}),
    );
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a",
        "{created}"
    );
    let (code, list) =
        sb.get("/api/v1/namespaces?labelSelector=kubernetes.io%2Fmetadata.name%3Dteam-a");
    assert_eq!(code, 200, "{list}");
    let names: Vec<&str> = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, ["team-a"], "{list}");
    // The namespaces the sandbox creates itself carry it too.
    let (_, default) = sb.get("/api/v1/namespaces/default");
    assert_eq!(
        default["metadata"]["labels"]["kubernetes.io/metadata.name"], "default",
        "{default}"
    );
    // An update cannot remove or change it.
    let (code, patched) = sb.request(
        "PATCH",
        "/api/v1/namespaces/team-a",
        "application/merge-patch+json",
        r#"{"metadata": {"labels": {"kubernetes.io/metadata.name": null, "x": "y"}}}"#,
    );
    assert_eq!(code, 200, "{patched}");
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team-a", "x": "y"}),
        "{patched}"
    );
}

#[test]
fn built_in_kinds_get_kube_apiserver_field_defaults() {
    let sb = Sandbox::start();
    let (code, svc) = sb.post(
        "/api/v1/namespaces/default/services",
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    );
    assert_eq!(code, 201, "{svc}");
    assert_eq!(svc["spec"]["type"], "ClusterIP", "{svc}");
    assert_eq!(svc["spec"]["sessionAffinity"], "None", "{svc}");
    assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP", "{svc}");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80, "{svc}");

    let mut d = deployment("d", 2);
    d["spec"].as_object_mut().map(|s| s.remove("replicas"));
    let (code, dep) = sb.post(DEPLOY, &d);
    assert_eq!(code, 201, "{dep}");
    assert_eq!(dep["spec"]["replicas"], 1, "{dep}");
    assert_eq!(dep["spec"]["revisionHistoryLimit"], 10, "{dep}");
    assert_eq!(dep["spec"]["progressDeadlineSeconds"], 600, "{dep}");
    assert_eq!(
        dep["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
        "{dep}"
    );
}

/// Query parameters kube-apiserver refuses are refused, with its codes and reasons.
#[test]
fn list_and_delete_options_kube_apiserver_refuses_are_refused() {
    let sb = Sandbox::start();
    let (code, _) = sb.post(CM, &json!({"metadata": {"name": "kept"}}));
    assert_eq!(code, 201);
    for (query, want, reason) in [
        ("resourceVersion=abc", 400, "BadRequest"),
        ("resourceVersionMatch=Bogus", 422, "Invalid"),
        (
            "resourceVersion=1&resourceVersionMatch=Bogus",
            422,
            "Invalid",
        ),
        ("resourceVersionMatch=Exact", 422, "Invalid"),
        (
            "fieldSelector=metadata.name%3D%3D%3Dkept",
            400,
            "BadRequest",
        ),
    ] {
        let (code, status) = sb.get(&format!("{CM}?{query}"));
        assert_eq!(
            (code, status["reason"].as_str()),
            (want, Some(reason)),
            "{query}: {status}"
        );
    }
    // What kube-rs and client-go send is served.
    for query in [
        "resourceVersion=0&resourceVersionMatch=NotOlderThan",
        "fieldSelector=metadata.name%3Dkept",
        "fieldSelector=metadata.name%3D%3Dkept",
    ] {
        let (code, list) = sb.get(&format!("{CM}?{query}"));
        assert_eq!(code, 200, "{query}: {list}");
    }
    let (code, status) = sb.request(
        "DELETE",
        &format!("{CM}/kept?gracePeriodSeconds=abc"),
        "",
        "",
    );
    assert_eq!(
        (code, status["reason"].as_str()),
        (400, Some("BadRequest")),
        "{status}"
    );
    let (code, _) = sb.get(&format!("{CM}/kept"));
    assert_eq!(code, 200, "a refused delete deletes nothing");
    let (code, _) = sb.request("DELETE", &format!("{CM}/kept?gracePeriodSeconds=0"), "", "");
    assert_eq!(code, 200);
}

/// Labels, annotations and a ConfigMap's or Secret's data are maps of strings, as
/// kube-apiserver decodes them: anything else is a 400 naming the field.
#[test]
fn string_maps_refuse_other_values_as_kube_apiserver_does() {
    let sb = Sandbox::start();
    for (path, body, field) in [
        (
            CM,
            json!({"metadata": {"name": "a", "labels": {"n": 1}}}),
            "ObjectMeta.metadata.labels",
        ),
        (
            CM,
            json!({"metadata": {"name": "b", "annotations": {"on": true}}}),
            "ObjectMeta.metadata.annotations",
        ),
        (
            CM,
            json!({"metadata": {"name": "c"}, "data": {"n": 3}}),
            "ConfigMap.data",
        ),
        (
            CM,
            json!({"metadata": {"name": "d"}, "data": ["x"]}),
            "ConfigMap.data",
        ),
        (
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": "e"}, "stringData": {"k": {"nested": "x"}}}),
            "Secret.stringData",
        ),
    ] {
        let (code, status) = sb.post(path, &body);
        assert_eq!(code, 400, "{body}: {status}");
        assert!(
            status["message"]
                .as_str()
                .is_some_and(|m| m.contains(field)),
            "{body}: {status}"
        );
    }
    // Strings, and a null read as "", are served.
    let (code, cm) = sb.post(
        CM,
        &json!({"metadata": {"name": "fine", "labels": {"n": "1"}}, "data": {"n": "3"}}),
    );
    assert_eq!(code, 201, "{cm}");
    // A merge patch that makes a label a number is refused too, and changes nothing.
    let (code, status) = sb.request(
        "PATCH",
        &format!("{CM}/fine"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"n":2}}}"#,
    );
    assert_eq!(code, 400, "{status}");
    let (_, now) = sb.get(&format!("{CM}/fine"));
    assert_eq!(now["metadata"]["labels"]["n"], "1");
}

/// Fields a CRD marks `x-kubernetes-embedded-resource` hold objects that name their
/// `apiVersion` and `kind`, as kube-apiserver requires: a custom resource that leaves them
/// out is refused (422), naming each field, in lists too.
#[test]
fn embedded_resources_without_apiversion_or_kind_are_refused() {
    let sb = Sandbox::start();
    let embedded = json!({"type": "object", "x-kubernetes-embedded-resource": true,
                          "x-kubernetes-preserve-unknown-fields": true});
    let (code, created) = sb.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "carriers.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Carrier", "plural": "carriers", "singular": "carrier", "listKind": "CarrierList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "template": embedded,
                            "items": {"type": "array", "items": embedded}
                        }}}}}}]}
        }),
    );
    assert_eq!(code, 201, "{created}");
    let carriers = "/apis/example.com/v1/namespaces/default/carriers";
    wait_for("carriers served", Duration::from_secs(30), || {
        sb.get(carriers).0 == 200
    });
    let carrier = |name: &str, spec: Value| {
        sb.post(
            carriers,
            &json!({"apiVersion": "example.com/v1", "kind": "Carrier",
                    "metadata": {"name": name}, "spec": spec}),
        )
    };
    let good = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    let (code, body) = carrier("good", json!({"template": good, "items": [good]}));
    assert_eq!(code, 201, "{body}");
    let (code, body) = carrier(
        "bad",
        json!({"template": {"metadata": {"name": "x"}}, "items": [good, {"kind": "Secret"}]}),
    );
    assert_eq!(code, 422, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    for field in [
        "spec.template.apiVersion",
        "spec.template.kind",
        "spec.items[1].apiVersion",
    ] {
        assert!(
            message.contains(&format!("{field}: Required value")),
            "{message}"
        );
    }
    assert!(!message.contains("spec.items[0]"), "{message}");
    assert_eq!(sb.get(&format!("{carriers}/bad")).0, 404, "nothing stored");
}
