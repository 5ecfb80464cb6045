//! The controller in-process on the in-memory cluster: the mock type through the whole
//! contract, with the journal in memory. No sleeps as synchronisation: every wait polls a
//! condition with a deadline.

use std::sync::Arc;
use std::time::Duration;

use bosun_deployer::controller::Deployer;
use bosun_deployer::events::DeployerEvent;
use bosun_deployer::fakes::MemoryCluster;
use bosun_deployer::item::{ItemKey, Phase};
use bosun_deployer::mock::Mock;
use bosun_runtime::ports::MemoryJournal;
use serde_json::{Value, json};

mod world;

const WAIT: Duration = Duration::from_secs(20);

fn key(name: &str) -> ItemKey {
    ItemKey {
        namespace: "ns".into(),
        name: name.into(),
    }
}

fn mock_item(name: &str, config: Value, extra_spec: Value) -> Value {
    let mut c = json!({"apiVersion": "mock.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderConfiguration"});
    c.as_object_mut()
        .expect("object")
        .extend(config.as_object().cloned().unwrap_or_default());
    let mut spec = json!({"type": "landscaper.gardener.cloud/mock", "config": c});
    spec.as_object_mut()
        .expect("object")
        .extend(extra_spec.as_object().cloned().unwrap_or_default());
    json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
    })
}

async fn start(cluster: &MemoryCluster, journal: &MemoryJournal<DeployerEvent>) -> Deployer {
    Deployer::start(
        Arc::new(cluster.clone()),
        Arc::new(journal.clone()),
        vec![Arc::new(Mock)],
        world::settings(),
    )
    .await
    .expect("deployer")
}

async fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn phase(c: &MemoryCluster, name: &str) -> Option<Phase> {
    c.item(&key(name))
        .and_then(|o| o["status"]["phase"].as_str().and_then(Phase::parse))
}

fn phases(j: &MemoryJournal<DeployerEvent>, name: &str) -> Vec<Phase> {
    let id = format!("deployitem/ns/{name}");
    j.events()
        .into_iter()
        .filter_map(|e| match e {
            DeployerEvent::DeployItemPhase { item, to, .. } if item == id => Some(to),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mock_item_goes_through_the_contract() {
    let cluster = MemoryCluster::default();
    let journal = MemoryJournal::default();
    cluster.put_item(json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
        "metadata": {"name": "other", "namespace": "ns"},
        "spec": {"type": "landscaper.gardener.cloud/helm"},
    }));
    let _d = start(&cluster, &journal).await;
    cluster.put_item(mock_item("a", json!({"export": {"k": "v"}, "providerStatus": {"apiVersion": "x/v1", "kind": "ProviderStatus", "n": 1}}), json!({})));
    wait("a Succeeded", || {
        phase(&cluster, "a") == Some(Phase::Succeeded)
    })
    .await;
    assert_eq!(
        phases(&journal, "a"),
        [Phase::Init, Phase::Progressing, Phase::Succeeded]
    );
    let a = cluster.item(&key("a")).expect("a");
    assert_eq!(a["status"]["providerStatus"]["n"], 1);
    assert_eq!(a["status"]["observedGeneration"], 1);
    let export = a["status"]["exportRef"]["name"]
        .as_str()
        .expect("exportRef")
        .to_string();
    assert_eq!(
        cluster
            .secret("ns", &export)
            .and_then(|d| d.get("config").cloned()),
        Some(br#"{"k":"v"}"#.to_vec())
    );

    // A spec change runs it again (a generation bump), with the new config.
    let mut changed = cluster.item(&key("a")).expect("a");
    changed["spec"]["config"]["phase"] = json!("Failed");
    cluster.put_item(changed);
    wait("a Failed", || phase(&cluster, "a") == Some(Phase::Failed)).await;
    let a = cluster.item(&key("a")).expect("a");
    assert_eq!(a["status"]["observedGeneration"], 2);
    assert_eq!(a["status"]["lastError"]["reason"], "Failed");
    assert!(
        cluster
            .events()
            .iter()
            .any(|(k, e)| k.name == "a" && e.type_ == "Warning")
    );

    // abort on a stuck item fails it; the annotation stays.
    cluster.put_item(mock_item(
        "stuck",
        json!({"phase": "Progressing"}),
        json!({"timeout": "1h"}),
    ));
    wait("stuck Progressing", || {
        phase(&cluster, "stuck") == Some(Phase::Progressing)
    })
    .await;
    let mut abort = cluster.item(&key("stuck")).expect("stuck");
    abort["metadata"]["annotations"] = json!({"landscaper.gardener.cloud/operation": "abort"});
    cluster.put_item(abort);
    wait("stuck aborted", || {
        phase(&cluster, "stuck") == Some(Phase::Failed)
    })
    .await;
    let stuck = cluster.item(&key("stuck")).expect("stuck");
    assert_eq!(stuck["status"]["lastError"]["reason"], "Aborted");
    assert_eq!(
        stuck["metadata"]["annotations"]["landscaper.gardener.cloud/operation"],
        "abort"
    );

    // Deletion: InitDelete, Deleting, the export removed, the finalizer removed.
    cluster.put_item(mock_item("gone", json!({"export": {"x": 1}}), json!({})));
    wait("gone Succeeded", || {
        phase(&cluster, "gone") == Some(Phase::Succeeded)
    })
    .await;
    let export = cluster.item(&key("gone")).expect("gone")["status"]["exportRef"]["name"]
        .as_str()
        .expect("exportRef")
        .to_string();
    cluster.delete_item(&key("gone"));
    wait("gone removed", || cluster.item(&key("gone")).is_none()).await;
    assert!(cluster.secret("ns", &export).is_none());
    assert_eq!(
        phases(&journal, "gone"),
        [
            Phase::Init,
            Phase::Progressing,
            Phase::Succeeded,
            Phase::InitDelete,
            Phase::Deleting
        ]
    );

    // The item of another type was never written.
    assert!(cluster.writes().iter().all(|(k, _)| k.name != "other"));
    assert!(cluster.item(&key("other")).expect("other")["status"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_item_fails_on_time_and_a_missing_target_fails_until_reconciled() {
    let cluster = MemoryCluster::default();
    let journal = MemoryJournal::default();
    let _d = start(&cluster, &journal).await;
    cluster.put_item(mock_item(
        "slow",
        json!({"phase": "Progressing"}),
        json!({"timeout": "1s"}),
    ));
    wait("slow timed out", || {
        phase(&cluster, "slow") == Some(Phase::Failed)
    })
    .await;
    let slow = cluster.item(&key("slow")).expect("slow");
    assert_eq!(slow["status"]["lastError"]["codes"], json!(["ERR_TIMEOUT"]));

    // A missing target fails the item; once the target exists, reconcile succeeds.
    cluster.put_item(mock_item(
        "t",
        json!({}),
        json!({"target": {"name": "cluster", "namespace": "ns"}}),
    ));
    wait("t Failed", || phase(&cluster, "t") == Some(Phase::Failed)).await;
    assert_eq!(
        cluster.item(&key("t")).expect("t")["status"]["lastError"]["reason"],
        "NoTargetFound"
    );
    cluster.put_target(json!({
        "metadata": {"name": "cluster", "namespace": "ns"},
        "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": "apiVersion: v1\nkind: Config\n"}},
    }));
    let mut again = cluster.item(&key("t")).expect("t");
    again["metadata"]["annotations"] = json!({"landscaper.gardener.cloud/operation": "reconcile"});
    cluster.put_item(again);
    wait("t Succeeded", || {
        phase(&cluster, "t") == Some(Phase::Succeeded)
    })
    .await;
    assert!(cluster.item(&key("t")).expect("t")["status"]["lastError"].is_null());
}
