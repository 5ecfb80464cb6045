//! Readiness checks and exports of the kubernetes-manifest type in-process: the item waits,
//! saying what for, until the objects on the target are ready, then exports from them.
//! Paused time skips the deployer's 5 s looks.
//!
//! Run: `cargo test -p bosun-deployer --test readiness`.

mod world;

use bosun_deployer::item::Phase;
use serde_json::{Value, json};
use world::{World, config_map, manifest_item, target, until};

/// Whether the item waits (Progressing) with a `ManifestsReady=False` condition saying `what`.
fn waits_for(item: &Value, what: &str) -> bool {
    item["status"]["phase"] == "Progressing"
        && item["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter().any(|c| {
                c["type"] == "ManifestsReady"
                    && c["status"] == "False"
                    && c["message"].as_str().is_some_and(|m| m.contains(what))
            })
        })
}

#[tokio::test(start_paused = true)]
async fn manifests_wait_for_readiness_then_export_and_merge_with_live_objects() {
    let w = World::start().await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    let mut item = manifest_item("ready", &[]);
    let config = &mut item["spec"]["config"];
    let mut state = config_map("default", "state", json!({"phase": "starting"}));
    state["metadata"]["labels"] = json!({"tier": "state"});
    config["manifests"] = json!([
        {"manifest": deployment},
        {"manifest": state,
         "annotateBeforeCreate": {"example.com/note": "created-by-bosun"},
         "patchAfterDeployment": {"data": {"deployed": "yes"}}},
    ]);
    // `merge`: what others write into the live objects stays.
    config["updateStrategy"] = json!("merge");
    config["readinessChecks"] = json!({"custom": [{"name": "state-done",
        "resourceSelector": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "state", "namespace": "default"}],
        "requirements": [{"jsonPath": ".data.phase", "operator": "==", "values": [{"value": "done"}]}]}]});
    config["exports"] = json!({"exports": [
        {"key": "web.replicas", "jsonPath": ".spec.replicas",
         "fromResource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "default"}},
        {"key": "state.phase", "jsonPath": ".data.phase",
         "fromResource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "state", "namespace": "default"}},
    ]});
    w.cluster.put_item(item);
    until("the item waits for the Deployment", || {
        w.cluster
            .item(&world::key("ready"))
            .is_some_and(|o| waits_for(&o, "Deployment default/web"))
    })
    .await;
    // Where a user looks (bosun's debug view), the item says what it waits for.
    let runs = w.deployer.view().last_runs();
    let waiting = runs
        .get(&world::key("ready"))
        .and_then(|r| r.detail.waiting_for.clone())
        .unwrap_or_default();
    assert!(
        waiting.starts_with("ManifestsReady=False") && waiting.contains("Deployment default/web"),
        "{waiting}"
    );
    let live_state = w.config_map("default", "state").expect("state");
    assert_eq!(
        live_state["metadata"]["annotations"]["example.com/note"], "created-by-bosun",
        "annotateBeforeCreate"
    );

    // The Deployment's controller reports it rolled out.
    let mut web = w
        .targets
        .object(&target(), "Deployment", "default", "web")
        .expect("web");
    let generation = web["metadata"]["generation"].clone();
    web["status"] = json!({"observedGeneration": generation, "replicas": 1,
                           "updatedReplicas": 1, "availableReplicas": 1, "readyReplicas": 1});
    w.targets.put_object(&target(), web);
    until("the item waits for the custom check", || {
        w.cluster
            .item(&world::key("ready"))
            .is_some_and(|o| waits_for(&o, "state-done"))
    })
    .await;

    // Someone else finishes the state: `merge` keeps their value, the check passes.
    let mut state = w.config_map("default", "state").expect("state");
    state["data"]["phase"] = json!("done");
    w.targets.put_object(&target(), state);
    let done = w.settled("ready", 1, Phase::Succeeded).await;
    let secret = done["status"]["exportRef"]["name"]
        .as_str()
        .expect("an export Secret")
        .to_string();
    let exported: Value = w
        .cluster
        .secret("ns", &secret)
        .and_then(|d| d.get("config").cloned())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .expect("the export");
    assert_eq!(
        exported,
        json!({"web": {"replicas": 1}, "state": {"phase": "done"}})
    );
    let state = w.config_map("default", "state").expect("state");
    assert_eq!(state["data"]["phase"], "done", "merge kept the live value");
    assert_eq!(state["data"]["deployed"], "yes", "patchAfterDeployment");
}

#[tokio::test(start_paused = true)]
async fn checks_and_exports_with_a_target_name_read_another_target() {
    let w = World::start().await;
    w.cluster
        .put_target(world::cluster_target("ns", "watched", json!({})));
    let watched = world::key("watched");
    let gate =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "gate", "namespace": "default"});
    let mut item = manifest_item("gated", &[config_map("default", "app", json!({"v": "1"}))]);
    let config = &mut item["spec"]["config"];
    config["readinessChecks"] = json!({"custom": [{"name": "gate-open", "targetName": "watched",
        "resourceSelector": [gate],
        "requirements": [{"jsonPath": ".data.open", "operator": "==", "values": [{"value": "yes"}]}]}]});
    config["exports"] = json!({"exports": [
        {"key": "gate.owner", "jsonPath": ".data.owner", "fromResource": gate, "targetName": "watched"},
        {"key": "app.v", "jsonPath": ".data.v",
         "fromResource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "app", "namespace": "default"}},
    ]});
    w.cluster.put_item(item);
    // The objects go to the item's target; it waits for the gate in the other, saying where.
    until("the item waiting for the gate in the other target", || {
        w.cluster
            .item(&world::key("gated"))
            .is_some_and(|o| waits_for(&o, "ConfigMap gate in Target ns/watched: not found"))
    })
    .await;
    assert!(w.config_map("default", "app").is_some());
    assert!(
        w.targets.objects(&watched).is_empty(),
        "only read in the other target, nothing written there"
    );
    w.targets.put_object(
        &watched,
        config_map("default", "gate", json!({"open": "yes", "owner": "team-b"})),
    );
    let done = w.settled("gated", 1, Phase::Succeeded).await;
    let secret = done["status"]["exportRef"]["name"]
        .as_str()
        .expect("an export Secret")
        .to_string();
    let exported: Option<Value> = w
        .cluster
        .secret("ns", &secret)
        .and_then(|d| d.get("config").cloned())
        .and_then(|b| serde_json::from_slice(&b).ok());
    assert_eq!(
        exported,
        Some(json!({"gate": {"owner": "team-b"}, "app": {"v": "1"}})),
        "one export from each target"
    );

    // A targetName naming no Target fails the item at once, naming the field.
    let mut bad = manifest_item(
        "no-such-target",
        &[config_map("default", "other", json!({}))],
    );
    bad["spec"]["config"]["exports"] = json!({"exports": [
        {"key": "x", "jsonPath": ".data", "fromResource": gate, "targetName": "cluster-9"}]});
    w.cluster.put_item(bad);
    let failed = w.in_phase("no-such-target", Phase::Failed).await;
    let e = &failed["status"]["lastError"];
    assert_eq!(e["codes"], json!(["ERR_CONFIGURATION_PROBLEM"]), "{e}");
    assert!(
        e["message"].as_str().is_some_and(|m| m
            .contains("spec.config.exports.exports[0].targetName: Target ns/cluster-9 not found")),
        "{e}"
    );
}
