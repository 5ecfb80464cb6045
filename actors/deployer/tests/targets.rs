//! Targets end to end in-process: which items are ours, where a Target's kubeconfig comes
//! from (inline, a Secret, a service account's token), and target clusters that do not
//! answer or refuse the deployer. Each scenario asserts what a landscaper user sees: the
//! item's phase and lastError with its codes, Events, the objects on the target.
//!
//! Run: `cargo test -p bosun-deployer --test targets`.

mod world;

use std::time::Duration;

use bosun_deployer::fakes::MemoryCluster;
use bosun_deployer::fakes::{ClusterCall, Fault, TargetCall, TargetWrite};
use bosun_deployer::item::{FINALIZER, ItemKey, Phase};
use bosun_deployer::target::parse_selectors;
use serde_json::{Value, json};
use world::{
    KUBECONFIG, World, cluster_target, config_map, key, manifest_item, manifest_item_on,
    message_has, mock_item, settings, target,
};

fn no_codes(error: &Value) -> bool {
    error["codes"].as_array().is_none_or(Vec::is_empty)
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_target_keeps_the_item_progressing_naming_it_until_it_answers() {
    let w = World::start().await;
    w.targets.unreachable(&target(), true);
    w.cluster.put_item(manifest_item(
        "web",
        &[config_map("apps", "arrives", json!({"v": "1"}))],
    ));
    let waiting = w
        .waiting_with("web", Phase::Progressing, "Target ns/cluster")
        .await;
    let e = &waiting["status"]["lastError"];
    assert_eq!(e["reason"], "TargetCluster", "{e}");
    assert!(message_has(e, &["Connection refused"]), "{e}");
    assert!(no_codes(e), "retried, not failed: {e}");
    assert!(
        w.warned("web", "TargetCluster"),
        "a Warning Event tells the user"
    );
    let errors = w.journaled_errors("web");
    assert!(
        errors
            .iter()
            .any(|(_, m, retried)| m.contains("Target ns/cluster") && *retried),
        "the journal says why the item waits and that it is tried again: {errors:?}"
    );

    // Several retries later (5 s apart) it still waits, not failed.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(w.phase("web"), Some(Phase::Progressing));
    assert!(w.config_map("apps", "arrives").is_none());

    // The target answers again: the next attempt deploys, with no user action.
    w.targets.unreachable(&target(), false);
    w.settled("web", 1, Phase::Succeeded).await;
    assert_eq!(
        w.config_map("apps", "arrives").expect("deployed")["data"]["v"],
        "1"
    );
    assert_eq!(w.writes(TargetWrite::Create), ["ConfigMap apps/arrives"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_forbids_the_deployer_fails_the_item_as_unauthorized() {
    let w = World::start().await;
    w.targets.fail(TargetCall::Create, Fault::Forbidden, None);
    w.cluster.put_item(manifest_item(
        "web",
        &[config_map("apps", "denied", json!({}))],
    ));
    let failed = w.in_phase("web", Phase::Failed).await;
    let e = &failed["status"]["lastError"];
    assert_eq!(e["codes"], json!(["ERR_UNAUTHORIZED"]), "{e}");
    assert_eq!(e["reason"], "TargetCluster", "{e}");
    let message = e["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Target ns/cluster")
            && message.contains("creating ConfigMap apps/denied")
            && message.contains("forbidden"),
        "{message}"
    );
    assert!(w.warned("web", "TargetCluster"));
    assert!(w.config_map("apps", "denied").is_none());
    assert_eq!(failed["status"]["observedGeneration"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_whose_target_no_selector_serves_are_never_written() {
    let selectors = r#"[{"labels": [{"key": "deployer", "operator": "=", "values": ["bosun"]}]}]"#;
    let mut s = settings();
    s.target_selectors = parse_selectors(selectors).expect("selectors");
    let w = World::with(s).await;
    w.cluster
        .put_target(cluster_target("ns", "ours", json!({"deployer": "bosun"})));
    w.cluster.put_target(cluster_target(
        "ns",
        "theirs",
        json!({"deployer": "fenced"}),
    ));
    w.cluster.put_item(mock_item(
        "for-them",
        json!({}),
        json!({"target": {"name": "theirs"}}),
    ));
    // The annotation names the target before spec does.
    let mut annotated = mock_item("annotated", json!({}), json!({"target": {"name": "ours"}}));
    annotated["metadata"]["annotations"] =
        json!({"landscaper.gardener.cloud/deployer-target-name": "theirs"});
    w.cluster.put_item(annotated);
    w.cluster.put_item(mock_item(
        "for-us",
        json!({}),
        json!({"target": {"name": "ours"}}),
    ));
    w.cluster.put_item(mock_item(
        "no-target",
        json!({}),
        json!({"target": {"name": "gone"}}),
    ));
    w.settled("for-us", 1, Phase::Succeeded).await;
    let missing = w.in_phase("no-target", Phase::Failed).await;
    assert_eq!(missing["status"]["lastError"]["reason"], "NoTargetFound");
    w.idle().await;

    for name in ["for-them", "annotated"] {
        let other = w.item(name);
        assert!(other["status"].is_null(), "{other}");
        assert!(other["metadata"]["finalizers"].is_null(), "{other}");
        assert!(
            w.cluster.writes().iter().all(|(k, _)| k.name != name),
            "{name} never written"
        );
        assert!(w.events_of(name).is_empty(), "{name}: no Events");
    }
    assert_eq!(
        w.item("for-us")["metadata"]["finalizers"],
        json!([FINALIZER])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_s_kubeconfig_comes_from_its_secret_and_one_that_runs_commands_is_refused() {
    let exec =
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    exec:\n      command: aws\n";
    let cluster = MemoryCluster::default();
    cluster.put_secret(
        "ns",
        "kubeconfigs",
        [
            ("kubeconfig".to_string(), KUBECONFIG.as_bytes().to_vec()),
            (
                "target".to_string(),
                format!("kubeconfig: {}", serde_json::to_string(exec).expect("json")).into_bytes(),
            ),
        ]
        .into(),
    );
    let w = World::on(cluster, settings()).await;
    for (name, config) in [
        ("from-secret", json!({"secretRef": {"name": "kubeconfigs"}})),
        (
            "from-secret-key",
            json!({"secretRef": {"name": "kubeconfigs", "key": "target"}}),
        ),
        ("inline-exec", json!({"config": {"kubeconfig": exec}})),
    ] {
        let mut spec = config;
        spec["type"] = json!("landscaper.gardener.cloud/kubernetes-cluster");
        w.cluster.put_target(json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": spec,
        }));
        w.cluster.put_item(manifest_item_on(
            &format!("via-{name}"),
            name,
            &[config_map("apps", name, json!({}))],
        ));
    }
    w.settled("via-from-secret", 1, Phase::Succeeded).await;
    assert!(
        w.targets
            .object(&key("from-secret"), "ConfigMap", "apps", "from-secret")
            .is_some(),
        "deployed with the Secret's kubeconfig"
    );
    assert_eq!(
        w.targets.contents(&key("from-secret")).len(),
        1,
        "one kubeconfig"
    );
    assert!(
        w.targets.contents(&key("from-secret"))[0].contains("\"token\":\"abc\""),
        "{:?}",
        w.targets.contents(&key("from-secret"))
    );
    for name in ["via-from-secret-key", "via-inline-exec"] {
        let failed = w.in_phase(name, Phase::Failed).await;
        let e = &failed["status"]["lastError"];
        assert_eq!(
            e["codes"],
            json!(["ERR_CONFIGURATION_PROBLEM"]),
            "{name}: {e}"
        );
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("spec.config.kubeconfig") && message.contains("exec is not allowed"),
            "{name}: {message}"
        );
    }
    assert!(
        w.targets.contents(&key("inline-exec")).is_empty(),
        "a refused kubeconfig never reaches its cluster"
    );
}

/// landscaper looks an item's Target up in the item's own namespace whatever
/// `spec.target.namespace` says (`CheckResponsibility` reads `spec.target.name` only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_target_namespace_is_ignored_as_landscaper_ignores_it() {
    let w = World::start().await;
    w.cluster
        .put_target(cluster_target("elsewhere", "cluster", json!({})));
    let mut item = manifest_item(
        "namespaced-target",
        &[config_map("default", "where-did-it-go", json!({}))],
    );
    item["spec"]["target"]["namespace"] = json!("elsewhere");
    w.cluster.put_item(item);
    w.settled("namespaced-target", 1, Phase::Succeeded).await;
    assert!(
        w.config_map("default", "where-did-it-go").is_some(),
        "the item's namespace's Target"
    );
    let elsewhere = ItemKey {
        namespace: "elsewhere".into(),
        name: "cluster".into(),
    };
    assert!(
        w.targets.objects(&elsewhere).is_empty() && w.targets.contents(&elsewhere).is_empty(),
        "not the Target spec.target.namespace names"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_and_oidc_targets_deploy_with_a_token_of_their_service_account() {
    let w = World::start().await;
    w.cluster
        .issue_tokens("ns", "deployer", "sa-token-1", "https://items.example:6443");
    for (name, config) in [
        (
            "self",
            json!({"selfConfig": {"serviceAccount": {"name": "deployer"}, "expirationSeconds": 3600}}),
        ),
        (
            "oidc",
            json!({"oidcConfig": {"server": "https://other.example:6443", "serviceAccount": {"name": "deployer"}, "audience": ["other-cluster"]}}),
        ),
        (
            "nobody",
            json!({"selfConfig": {"serviceAccount": {"name": "nobody"}}}),
        ),
    ] {
        w.cluster.put_target(json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": config},
        }));
        w.cluster.put_item(manifest_item_on(
            &format!("to-{name}"),
            name,
            &[config_map("default", name, json!({"via": name}))],
        ));
    }
    w.settled("to-self", 1, Phase::Succeeded).await;
    w.settled("to-oidc", 1, Phase::Succeeded).await;
    for (name, server) in [
        ("self", "https://items.example:6443"),
        ("oidc", "https://other.example:6443"),
    ] {
        assert!(
            w.targets
                .object(&key(name), "ConfigMap", "default", name)
                .is_some(),
            "{name}: deployed"
        );
        let used = w.targets.contents(&key(name));
        assert!(
            used.iter()
                .all(|c| c.contains("sa-token-1") && c.contains(server)),
            "{name}: reached {server} with the service account's token: {used:?}"
        );
    }
    let requests = w.cluster.token_requests();
    assert!(
        requests
            .iter()
            .any(|(ns, sa, aud)| ns == "ns" && sa == "deployer" && aud == &["other-cluster"]),
        "the OIDC token is for the other cluster's audience: {requests:?}"
    );
    // No such service account: retried (it may be created), the error naming it.
    let waiting = w
        .waiting_with(
            "to-nobody",
            Phase::Progressing,
            "a token of ServiceAccount ns/nobody",
        )
        .await;
    assert!(no_codes(&waiting["status"]["lastError"]), "{waiting}");
    w.cluster
        .issue_tokens("ns", "nobody", "sa-token-2", "https://items.example:6443");
    w.settled("to-nobody", 1, Phase::Succeeded).await;
}

#[tokio::test(start_paused = true)]
async fn a_target_the_api_server_cannot_read_now_is_read_again_and_the_item_deploys() {
    let w = World::start().await;
    w.cluster
        .fail(ClusterCall::ReadTarget, Fault::ServerError, Some(3));
    w.cluster
        .put_item(manifest_item("web", &[config_map("apps", "a", json!({}))]));
    w.settled("web", 1, Phase::Succeeded).await;
    assert_eq!(
        w.journaled_phases("web"),
        [Phase::Init, Phase::Progressing, Phase::Succeeded],
        "one run, started once the Target could be read"
    );
    assert!(w.config_map("apps", "a").is_some());
    let last = w.deployer.view().last_runs();
    let run = last.get(&key("web")).expect("a last run");
    assert!(run.ok && run.failures == 0, "{run:?}");
}
