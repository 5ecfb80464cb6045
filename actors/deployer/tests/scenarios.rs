//! The deployer end to end in-process, on fakes of every port: the items' cluster
//! (`MemoryCluster`), the target clusters (`MemoryTargets`) and Helm (`MemoryHelm`), with
//! the real kubernetes-manifest and helm types between them. Each scenario asserts what a
//! user would see: the item's phase and status, the objects in the target, the release.
//! No sleeps as synchronisation: every wait polls a condition with a deadline.
//!
//! Run: `cargo test -p bosun-deployer --test scenarios`.

use bosun_deployer::events::DeployerEvent;
use bosun_deployer::fakes::{HelmCall, TargetWrite};
use bosun_deployer::helm::{HELM_DEPLOYITEM_LABEL, HELM_TYPE, ReleaseState};
use bosun_deployer::item::{FINALIZER, Phase};
use bosun_deployer::manifest::DEPLOYITEM_LABEL;
use serde_json::{Value, json};

mod world;

use world::{HELM_API, World, key, manifest_item, target, until};

/// The items' cluster with one Target, the target clusters, Helm, and the deployer running
/// on them ([`World::start`]).
async fn world() -> World {
    World::start().await
}

fn config_map(name: &str, namespace: Option<&str>, data: Value) -> Value {
    let mut o =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data});
    if let Some(ns) = namespace {
        o["metadata"]["namespace"] = json!(ns);
    }
    o
}

/// A helm item on the Target: release `web` in `apps`, from an inline chart.
fn helm_item(name: &str, values: Value, extra_config: Value) -> Value {
    let mut config = json!({
        "apiVersion": HELM_API, "kind": "ProviderConfiguration",
        "name": "web", "namespace": "apps", "createNamespace": true,
        "chart": {"archive": {"raw": "H4sI"}},
        "values": values,
    });
    if let (Some(c), Value::Object(extra)) = (config.as_object_mut(), extra_config) {
        c.extend(extra);
    }
    json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"type": HELM_TYPE, "target": {"name": "cluster"}, "config": config},
    })
}

fn managed(item: &Value) -> Vec<(String, String, String)> {
    item["status"]["providerStatus"]["managedResources"]
        .as_array()
        .expect("managedResources is a list")
        .iter()
        .map(|m| {
            let r = &m["resource"];
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (s(&r["kind"]), s(&r["namespace"]), s(&r["name"]))
        })
        .collect()
}

fn triple(kind: &str, namespace: &str, name: &str) -> (String, String, String) {
    (kind.into(), namespace.into(), name.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_item_deploys_its_objects_and_succeeds() {
    let w = world().await;
    w.cluster.put_item(manifest_item(
        "web",
        &[
            config_map("settings", Some("apps"), json!({"mode": "fast"})),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}),
            config_map("defaults", None, json!({"a": "1"})),
        ],
    ));
    w.settled("web", 1, Phase::Succeeded).await;

    // The objects are in the target, labelled with the item, the Namespace first.
    let settings = w.config_map("apps", "settings").expect("apps/settings");
    assert_eq!(settings["data"]["mode"], "fast");
    assert_eq!(settings["metadata"]["labels"][DEPLOYITEM_LABEL], "web");
    assert!(
        w.config_map("default", "defaults").is_some(),
        "a namespaced object naming no namespace goes to default"
    );
    assert!(
        w.targets
            .object(&target(), "Namespace", "", "apps")
            .is_some()
    );
    assert_eq!(
        w.writes(TargetWrite::Create),
        [
            "Namespace apps",
            "ConfigMap apps/settings",
            "ConfigMap default/defaults"
        ],
        "cluster-scoped objects are applied before namespaced ones"
    );

    // The item lists what it manages, with the uids the target gave them.
    let item = w.item("web");
    assert_eq!(
        managed(&item),
        [
            triple("Namespace", "", "apps"),
            triple("ConfigMap", "apps", "settings"),
            triple("ConfigMap", "default", "defaults"),
        ]
    );
    assert_eq!(
        item["status"]["providerStatus"]["managedResources"][1]["resource"]["uid"],
        settings["metadata"]["uid"]
    );
    assert_eq!(item["metadata"]["finalizers"], json!([FINALIZER]));
    assert!(item["status"]["lastError"].is_null(), "{item}");
    assert_eq!(
        w.journaled_phases("web"),
        [Phase::Init, Phase::Progressing, Phase::Succeeded]
    );
    let view = w.deployer.view();
    assert_eq!(view.in_phase(Phase::Succeeded), 1);
    assert_eq!(
        view.last_runs()
            .get(&key("web"))
            .and_then(|r| r.detail.phase),
        Some(Phase::Succeeded)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_manifests_update_the_target_and_remove_what_is_no_longer_listed() {
    let w = world().await;
    w.cluster.put_item(manifest_item(
        "web",
        &[
            config_map("a", Some("apps"), json!({"v": "1"})),
            config_map("b", Some("apps"), json!({"v": "1"})),
        ],
    ));
    w.settled("web", 1, Phase::Succeeded).await;
    let uid_a = w.config_map("apps", "a").expect("a")["metadata"]["uid"].clone();

    // A new spec (the generation moves): a changed, b no longer listed, c new.
    let mut changed = w.item("web");
    changed["spec"] = manifest_item(
        "web",
        &[
            config_map("a", Some("apps"), json!({"v": "2"})),
            config_map("c", Some("apps"), json!({"v": "1"})),
        ],
    )["spec"]
        .clone();
    w.cluster.put_item(changed);
    w.settled("web", 2, Phase::Succeeded).await;

    let a = w.config_map("apps", "a").expect("a is still there");
    assert_eq!(a["data"]["v"], "2", "a is updated");
    assert_eq!(
        a["metadata"]["uid"], uid_a,
        "a is updated in place, not recreated"
    );
    assert!(w.config_map("apps", "c").is_some(), "c is created");
    assert!(
        w.config_map("apps", "b").is_none(),
        "b, managed and no longer listed, is deleted"
    );
    assert_eq!(w.writes(TargetWrite::Delete), ["ConfigMap apps/b"]);
    assert_eq!(w.writes(TargetWrite::Replace), ["ConfigMap apps/a"]);
    assert_eq!(
        managed(&w.item("web")),
        [
            triple("ConfigMap", "apps", "a"),
            triple("ConfigMap", "apps", "c")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_item_deletes_its_objects_and_lets_it_go() {
    let w = world().await;
    // Someone else's object in the same namespace is not the item's to delete.
    w.targets.put_object(
        &target(),
        config_map("someone-elses", Some("apps"), json!({})),
    );
    w.cluster.put_item(manifest_item(
        "web",
        &[
            config_map("a", Some("apps"), json!({})),
            config_map("b", Some("apps"), json!({})),
        ],
    ));
    w.settled("web", 1, Phase::Succeeded).await;
    assert!(w.config_map("apps", "a").is_some() && w.config_map("apps", "b").is_some());

    w.cluster.delete_item(&key("web"));
    until("web gone from the cluster", || {
        w.cluster.item(&key("web")).is_none()
    })
    .await;

    assert!(w.config_map("apps", "a").is_none() && w.config_map("apps", "b").is_none());
    assert!(
        w.config_map("apps", "someone-elses").is_some(),
        "what the item did not apply stays"
    );
    let mut deleted = w.writes(TargetWrite::Delete);
    deleted.sort();
    assert_eq!(deleted, ["ConfigMap apps/a", "ConfigMap apps/b"]);
    let phases = w.journaled_phases("web");
    assert!(
        phases.ends_with(&[Phase::InitDelete, Phase::Deleting]),
        "{phases:?}"
    );
    assert!(w.journal.events().iter().any(|e| matches!(
        e,
        DeployerEvent::DeployItemFinalized { item } if item == "deployitem/ns/web"
    )));
    until("web forgotten by the deployer", || {
        !w.deployer.view().last_runs().contains_key(&key("web"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_the_target_refuses_fails_the_item_with_the_error() {
    let w = world().await;
    w.targets.refuse(
        "ConfigMap",
        "bad",
        "ConfigMap \"bad\" is invalid: data[key]: Invalid value",
    );
    w.cluster.put_item(manifest_item(
        "web",
        &[
            config_map("good", Some("apps"), json!({})),
            config_map("bad", Some("apps"), json!({"key": "x"})),
        ],
    ));
    until("web Failed", || w.phase("web") == Some(Phase::Failed)).await;

    let item = w.item("web");
    let error = &item["status"]["lastError"];
    assert_eq!(error["reason"], "TargetCluster");
    let message = error["message"].as_str().expect("a message");
    assert!(
        message.contains("Target ns/cluster")
            && message.contains("creating ConfigMap apps/bad")
            && message.contains("Invalid value"),
        "{message}"
    );
    assert_eq!(error["codes"], json!(["ERR_CONFIGURATION_PROBLEM"]));
    assert!(
        w.cluster
            .events()
            .iter()
            .any(|(k, e)| k.name == "web" && e.type_ == "Warning" && e.reason == "TargetCluster"),
        "a Warning event tells the user"
    );
    assert!(w.config_map("apps", "bad").is_none());
    assert!(
        w.config_map("apps", "good").is_some(),
        "what came before the refused object is applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_item_installs_a_release_and_succeeds() {
    let w = world().await;
    w.helm.set_rendered(
        "web",
        vec![
            config_map("web-config", None, json!({"replicas": "2"})),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}),
        ],
    );
    w.cluster
        .put_item(helm_item("web", json!({"replicas": 2}), json!({})));
    w.settled("web", 1, Phase::Succeeded).await;

    let release = w
        .helm
        .release_state(&target(), "apps", "web")
        .expect("release apps/web");
    assert_eq!((release.revision, release.status.as_str()), (1, "deployed"));
    assert_eq!(
        w.helm.calls(),
        [HelmCall::Install {
            target: target(),
            namespace: "apps".into(),
            release: "web".into(),
            values: json!({"replicas": 2}),
        }]
    );
    // The release's objects are in the target, in its namespace, which it created.
    assert_eq!(
        w.config_map("apps", "web-config").expect("apps/web-config")["data"]["replicas"],
        "2"
    );
    assert!(
        w.targets
            .object(&target(), "Service", "apps", "web")
            .is_some()
    );
    assert!(
        w.targets
            .object(&target(), "Namespace", "", "apps")
            .is_some()
    );
    assert!(
        w.targets.ops().is_empty(),
        "Helm writes the objects, not the deployer"
    );

    let item = w.item("web");
    let status = &item["status"]["providerStatus"];
    assert_eq!(status["release"]["name"], "web");
    assert_eq!(status["release"]["revision"], 1);
    assert_eq!(item["metadata"]["finalizers"], json!([FINALIZER]));
}

/// landscaper's write lands while the install runs: the run's result is written onto the
/// item as it is now, not deployed again (no second Helm revision for one install).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_that_conflicts_mid_run_does_not_deploy_again() {
    let w = world().await;
    w.helm.set_rendered(
        "web",
        vec![config_map("web-config", None, json!({"a": "1"}))],
    );
    // The Init and Progressing writes pass; before the Succeeded one (the release is
    // installed by then) another writer changes the item's status.
    w.cluster.write_status_before(2, |item| {
        item["status"]["transitionTimes"]["triggerTime"] = json!("2026-11-27T00:00:00Z");
    });
    w.cluster
        .put_item(helm_item("web", json!({"replicas": 2}), json!({})));
    w.settled("web", 1, Phase::Succeeded).await;
    let installs = w
        .helm
        .calls()
        .iter()
        .filter(|c| matches!(c, HelmCall::Install { .. } | HelmCall::Upgrade { .. }))
        .count();
    assert_eq!(installs, 1, "{:?}", w.helm.calls());
    assert_eq!(
        w.journaled_phases("web"),
        [Phase::Init, Phase::Progressing, Phase::Succeeded],
        "one run"
    );
    let release = w
        .helm
        .release_state(&target(), "apps", "web")
        .expect("release apps/web");
    assert_eq!(release.revision, 1);
    assert_eq!(
        w.item("web")["status"]["transitionTimes"]["triggerTime"],
        "2026-11-27T00:00:00Z",
        "what the other writer set is kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_helm_values_upgrade_the_release() {
    let w = world().await;
    w.helm.set_rendered(
        "web",
        vec![
            config_map("web-config", None, json!({})),
            config_map("web-extra", None, json!({})),
        ],
    );
    w.cluster
        .put_item(helm_item("web", json!({"replicas": 2}), json!({})));
    w.settled("web", 1, Phase::Succeeded).await;

    // The chart now renders one object fewer for the new values.
    w.helm.set_rendered(
        "web",
        vec![config_map("web-config", None, json!({"replicas": "3"}))],
    );
    let mut changed = w.item("web");
    changed["spec"]["config"]["values"] = json!({"replicas": 3});
    w.cluster.put_item(changed);
    w.settled("web", 2, Phase::Succeeded).await;

    let history: Vec<(u64, String)> = w
        .helm
        .history(&target(), "apps", "web")
        .into_iter()
        .map(|r| (r.revision, r.status))
        .collect();
    assert_eq!(
        history,
        [(1, "superseded".to_string()), (2, "deployed".to_string())]
    );
    assert!(w.helm.calls().contains(&HelmCall::Upgrade {
        target: target(),
        namespace: "apps".into(),
        release: "web".into(),
        values: json!({"replicas": 3}),
    }));
    assert_eq!(
        w.config_map("apps", "web-config").expect("web-config")["data"]["replicas"],
        "3"
    );
    assert!(w.config_map("apps", "web-extra").is_none());
    assert_eq!(
        w.item("web")["status"]["providerStatus"]["release"]["revision"],
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_helm_item_uninstalls_its_release() {
    let w = world().await;
    w.helm
        .set_rendered("web", vec![config_map("web-config", None, json!({}))]);
    w.cluster.put_item(helm_item("web", json!({}), json!({})));
    w.settled("web", 1, Phase::Succeeded).await;
    assert!(w.config_map("apps", "web-config").is_some());

    w.cluster.delete_item(&key("web"));
    until("web gone from the cluster", || {
        w.cluster.item(&key("web")).is_none()
    })
    .await;

    assert!(w.helm.release_state(&target(), "apps", "web").is_none());
    assert!(w.helm.calls().contains(&HelmCall::Uninstall {
        target: target(),
        namespace: "apps".into(),
        release: "web".into(),
    }));
    assert!(w.config_map("apps", "web-config").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_left_pending_by_a_crash_is_unblocked_and_installed() {
    let w = world().await;
    w.helm
        .set_rendered("web", vec![config_map("web-config", None, json!({}))]);
    w.helm.put_release(
        &target(),
        "web",
        ReleaseState {
            namespace: "apps".into(),
            revision: 1,
            status: "pending-install".into(),
            manifest: String::new(),
        },
    );
    w.cluster.put_item(helm_item("web", json!({}), json!({})));
    w.settled("web", 1, Phase::Succeeded).await;

    let calls = w.helm.calls();
    assert!(
        calls.contains(&HelmCall::Unblock {
            target: target(),
            namespace: "apps".into(),
            release: "web".into(),
            removed: 1,
        }),
        "{calls:?}"
    );
    let release = w
        .helm
        .release_state(&target(), "apps", "web")
        .expect("release");
    assert_eq!((release.revision, release.status.as_str()), (1, "deployed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_item_without_a_release_applies_the_rendered_objects() {
    let w = world().await;
    w.helm.set_rendered(
        "web",
        vec![config_map("web-config", None, json!({"k": "v"}))],
    );
    w.cluster.put_item(helm_item(
        "web",
        json!({"k": "v"}),
        json!({"helmDeployment": false}),
    ));
    w.settled("web", 1, Phase::Succeeded).await;

    let cm = w
        .config_map("apps", "web-config")
        .expect("the rendered object in the release namespace");
    assert_eq!(cm["metadata"]["labels"][HELM_DEPLOYITEM_LABEL], "web");
    assert_eq!(w.writes(TargetWrite::Create), ["ConfigMap apps/web-config"]);
    assert!(w.helm.release_state(&target(), "apps", "web").is_none());
    assert!(
        w.helm
            .calls()
            .iter()
            .all(|c| matches!(c, HelmCall::Render { .. })),
        "rendered only: {:?}",
        w.helm.calls()
    );
    assert_eq!(
        managed(&w.item("web")),
        [triple("ConfigMap", "apps", "web-config")]
    );
}
