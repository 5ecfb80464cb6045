//! The deployer end to end in-process while its ports fail: the items' API server refusing
//! reads and writes (conflict, server error, forbidden), target clusters refusing calls,
//! registries that do not answer and Helm operations that fail. Each scenario asserts what
//! a landscaper user sees: the item's phase, lastError with its codes, Events, finalizers,
//! the objects on the target and the release's revisions; and that a transient fault is
//! retried without any user action and without deploying twice.
//!
//! Run: `cargo test -p bosun-deployer --test faults`.

mod world;

use bosun_deployer::fakes::{ClusterCall, Fault, HelmCall, TargetCall, TargetWrite};
use bosun_deployer::item::{FINALIZER, Phase};
use serde_json::{Value, json};
use world::{
    World, config_map, helm_item, inline_chart, key, manifest_item, message_has, mock_item, target,
    until,
};

fn no_codes(error: &Value) -> bool {
    error["codes"].as_array().is_none_or(Vec::is_empty)
}

/// (revision, status) of each revision of release `apps/web`.
fn history(w: &World) -> Vec<(u64, String)> {
    w.helm
        .history(&target(), "apps", "web")
        .into_iter()
        .map(|r| (r.revision, r.status))
        .collect()
}

fn deploys(w: &World) -> usize {
    w.helm
        .calls()
        .iter()
        .filter(|c| matches!(c, HelmCall::Install { .. } | HelmCall::Upgrade { .. }))
        .count()
}

#[tokio::test(start_paused = true)]
async fn status_writes_the_api_server_refuses_are_retried_and_the_item_deploys_once() {
    let w = World::start().await;
    w.cluster
        .fail(ClusterCall::WriteStatus, Fault::ServerError, Some(2));
    w.cluster
        .put_item(manifest_item("web", &[config_map("apps", "a", json!({}))]));
    let done = w.settled("web", 1, Phase::Succeeded).await;
    assert_eq!(w.writes(TargetWrite::Create), ["ConfigMap apps/a"]);
    assert!(
        w.writes(TargetWrite::Replace).is_empty(),
        "applied once: {:?}",
        w.targets.ops()
    );
    // Each refused attempt at starting the run is journaled; the run itself went once.
    let phases = w.journaled_phases("web");
    assert!(
        phases.ends_with(&[Phase::Init, Phase::Progressing, Phase::Succeeded])
            && phases.iter().filter(|p| **p != Phase::Init).count() == 2,
        "{phases:?}"
    );
    assert!(done["status"]["lastError"].is_null(), "{done}");
    assert_eq!(done["metadata"]["finalizers"], json!([FINALIZER]));
}

/// landscaper keeps writing the item while a run is on its way: each result goes onto the
/// item as it is now, and the release is not installed a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_that_keep_conflicting_land_on_the_item_as_it_is_now() {
    let w = World::start().await;
    w.helm
        .set_rendered("web", vec![config_map("", "web-config", json!({}))]);
    w.cluster
        .fail(ClusterCall::WriteStatus, Fault::Conflict, Some(3));
    w.cluster
        .put_item(helm_item("web", inline_chart(), json!({})));
    w.settled("web", 1, Phase::Succeeded).await;
    assert_eq!(deploys(&w), 1, "{:?}", w.helm.calls());
    assert_eq!(history(&w), [(1, "deployed".to_string())]);
    assert_eq!(
        w.journaled_phases("web"),
        [Phase::Init, Phase::Progressing, Phase::Succeeded]
    );
}

#[tokio::test(start_paused = true)]
async fn a_finalizer_write_that_conflicts_is_retried_and_the_item_keeps_its_finalizer() {
    let w = World::start().await;
    w.cluster
        .fail(ClusterCall::WriteItem, Fault::Conflict, Some(1));
    w.cluster
        .put_item(manifest_item("web", &[config_map("apps", "a", json!({}))]));
    let done = w.settled("web", 1, Phase::Succeeded).await;
    assert_eq!(done["metadata"]["finalizers"], json!([FINALIZER]));
    assert!(w.config_map("apps", "a").is_some());
    assert_eq!(w.writes(TargetWrite::Create), ["ConfigMap apps/a"]);
}

#[tokio::test(start_paused = true)]
async fn an_item_the_api_server_cannot_read_now_is_read_again_and_runs_once() {
    let w = World::start().await;
    w.cluster
        .fail(ClusterCall::ReadItem, Fault::ServerError, Some(3));
    w.cluster
        .put_item(mock_item("m", json!({"export": {"k": "v"}}), json!({})));
    w.settled("m", 1, Phase::Succeeded).await;
    assert_eq!(
        w.journaled_phases("m"),
        [Phase::Init, Phase::Progressing, Phase::Succeeded]
    );
    let run = w.deployer.view().last_runs();
    assert!(run.get(&key("m")).is_some_and(|r| r.ok), "{run:?}");
}

#[tokio::test(start_paused = true)]
async fn an_export_secret_that_cannot_be_written_keeps_the_item_progressing_until_it_can() {
    let w = World::start().await;
    w.cluster
        .fail(ClusterCall::WriteExport, Fault::Forbidden, None);
    w.cluster
        .put_item(mock_item("m", json!({"export": {"k": "v"}}), json!({})));
    let waiting = w
        .waiting_with("m", Phase::Progressing, "Secret ns/m-export")
        .await;
    let e = &waiting["status"]["lastError"];
    assert_eq!(e["reason"], "ExportFailed", "{e}");
    assert!(message_has(e, &["forbidden"]), "{e}");
    assert!(no_codes(e), "{e}");
    assert!(w.warned("m", "ExportFailed"));
    assert!(w.cluster.secret("ns", "m-export").is_none());

    w.cluster.heal(ClusterCall::WriteExport);
    let done = w.settled("m", 1, Phase::Succeeded).await;
    assert_eq!(done["status"]["exportRef"]["name"], "m-export");
    assert_eq!(
        w.cluster
            .secret("ns", "m-export")
            .and_then(|d| d.get("config").cloned()),
        Some(br#"{"k":"v"}"#.to_vec())
    );
}

#[tokio::test(start_paused = true)]
async fn an_export_secret_that_cannot_be_deleted_keeps_the_item_and_its_finalizer() {
    let w = World::start().await;
    w.cluster
        .put_item(mock_item("m", json!({"export": {"k": "v"}}), json!({})));
    w.settled("m", 1, Phase::Succeeded).await;
    w.cluster
        .fail(ClusterCall::DeleteSecret, Fault::ServerError, None);
    w.cluster.delete_item(&key("m"));
    let waiting = w.waiting_with("m", Phase::Deleting, "Internal error").await;
    assert_eq!(
        waiting["status"]["lastError"]["reason"],
        "DeleteExportFailed"
    );
    assert_eq!(waiting["metadata"]["finalizers"], json!([FINALIZER]));
    assert!(w.cluster.secret("ns", "m-export").is_some());

    w.cluster.heal(ClusterCall::DeleteSecret);
    w.gone("m").await;
    assert!(w.cluster.secret("ns", "m-export").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_chart_pull_that_fails_is_retried_until_the_registry_answers() {
    let w = World::start().await;
    w.helm
        .set_rendered("web", vec![config_map("", "web-config", json!({}))]);
    w.helm
        .fail_pulls(Some("503 Service Unavailable from registry.example"));
    w.cluster.put_item(helm_item(
        "web",
        json!({"ref": "registry.example/charts/web:1.0.0"}),
        json!({}),
    ));
    let waiting = w
        .waiting_with("web", Phase::Progressing, "503 Service Unavailable")
        .await;
    let e = &waiting["status"]["lastError"];
    assert_eq!(e["reason"], "FetchChart", "{e}");
    assert!(no_codes(e), "{e}");
    assert!(w.warned("web", "FetchChart"));
    assert_eq!(deploys(&w), 0, "nothing installed without a chart");

    w.helm.fail_pulls(None);
    w.settled("web", 1, Phase::Succeeded).await;
    assert_eq!(history(&w), [(1, "deployed".to_string())]);
    assert!(w.config_map("apps", "web-config").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_failed_helm_install_is_tried_again_and_upgraded_once_helm_succeeds() {
    let w = World::start().await;
    w.helm
        .set_rendered("web", vec![config_map("", "web-config", json!({}))]);
    w.helm
        .fail_deploys(Some("timed out waiting for the condition"));
    w.cluster
        .put_item(helm_item("web", inline_chart(), json!({})));
    let waiting = w
        .waiting_with("web", Phase::Progressing, "install of release web")
        .await;
    let e = &waiting["status"]["lastError"];
    assert_eq!(e["reason"], "Helm", "{e}");
    assert!(message_has(e, &["Target ns/cluster", "timed out"]), "{e}");
    assert!(no_codes(e), "{e}");
    assert!(w.warned("web", "Helm"));
    assert_eq!(history(&w)[0], (1, "failed".to_string()));

    w.helm.fail_deploys(None);
    let done = w.settled("web", 1, Phase::Succeeded).await;
    let h = history(&w);
    assert_eq!(
        h.last(),
        Some(&(h.len() as u64, "deployed".to_string())),
        "the release is deployed by an upgrade over the failed revision: {h:?}"
    );
    assert!(
        w.helm
            .calls()
            .iter()
            .any(|c| matches!(c, HelmCall::Upgrade { .. }))
    );
    assert_eq!(
        done["status"]["providerStatus"]["release"]["revision"],
        h.len() as u64
    );
    assert!(w.config_map("apps", "web-config").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_failed_upgrade_leaves_the_deployed_revision_serving_until_an_upgrade_succeeds() {
    let w = World::start().await;
    w.helm
        .set_rendered("web", vec![config_map("", "web-config", json!({"v": "1"}))]);
    w.cluster
        .put_item(helm_item("web", inline_chart(), json!({})));
    w.settled("web", 1, Phase::Succeeded).await;

    w.helm
        .fail_deploys(Some("UPGRADE FAILED: an error occurred"));
    w.helm
        .set_rendered("web", vec![config_map("", "web-config", json!({"v": "2"}))]);
    w.edit("web", |o| {
        o["spec"]["config"]["values"] = json!({"replicas": 2})
    });
    let waiting = w
        .waiting_with("web", Phase::Progressing, "upgrade of release web")
        .await;
    assert_eq!(waiting["status"]["observedGeneration"], 2);
    let h = history(&w);
    assert!(
        h.contains(&(1, "deployed".to_string())) && h.contains(&(2, "failed".to_string())),
        "{h:?}"
    );
    assert_eq!(
        w.config_map("apps", "web-config").expect("web-config")["data"]["v"],
        "1",
        "what revision 1 deployed stays"
    );

    w.helm.fail_deploys(None);
    w.settled("web", 2, Phase::Succeeded).await;
    assert_eq!(
        w.config_map("apps", "web-config").expect("web-config")["data"]["v"],
        "2"
    );
    let h = history(&w);
    assert_eq!(h.last().map(|(_, s)| s.as_str()), Some("deployed"), "{h:?}");
    assert_eq!(
        h.iter().filter(|(_, s)| s == "deployed").count(),
        1,
        "one deployed revision: {h:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_helm_uninstall_that_fails_keeps_the_item_deleting_until_helm_succeeds() {
    let w = World::start().await;
    w.helm
        .set_rendered("web", vec![config_map("", "web-config", json!({}))]);
    w.cluster
        .put_item(helm_item("web", inline_chart(), json!({})));
    w.settled("web", 1, Phase::Succeeded).await;

    w.helm
        .fail_uninstalls(Some("uninstallation completed with 1 error(s)"));
    w.cluster.delete_item(&key("web"));
    let waiting = w
        .waiting_with("web", Phase::Deleting, "uninstall of release web")
        .await;
    let e = &waiting["status"]["lastError"];
    assert_eq!(e["reason"], "Helm", "{e}");
    assert!(no_codes(e), "{e}");
    assert_eq!(waiting["metadata"]["finalizers"], json!([FINALIZER]));
    assert!(!waiting["metadata"]["deletionTimestamp"].is_null());
    assert!(w.helm.release_state(&target(), "apps", "web").is_some());
    assert!(w.warned("web", "Helm"));

    w.helm.fail_uninstalls(None);
    w.gone("web").await;
    assert!(w.helm.release_state(&target(), "apps", "web").is_none());
    assert!(w.config_map("apps", "web-config").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_that_does_not_render_fails_the_item_as_a_configuration_problem() {
    let w = World::start().await;
    w.helm.fail_renders(Some(
        "template: web/templates/cm.yaml:3:10: executing \"web/templates/cm.yaml\": nil pointer",
    ));
    w.cluster.put_item(helm_item(
        "web",
        inline_chart(),
        json!({"helmDeployment": false}),
    ));
    let failed = w.in_phase("web", Phase::Failed).await;
    let e = &failed["status"]["lastError"];
    assert_eq!(e["codes"], json!(["ERR_CONFIGURATION_PROBLEM"]), "{e}");
    assert_eq!(e["reason"], "InvalidChart", "{e}");
    assert!(message_has(e, &["spec.config.chart", "nil pointer"]), "{e}");
    assert!(w.targets.ops().is_empty(), "nothing applied");
}

#[tokio::test(start_paused = true)]
async fn an_update_the_target_refuses_with_a_conflict_is_retried_and_lands() {
    let w = World::start().await;
    w.cluster.put_item(manifest_item(
        "web",
        &[config_map("apps", "a", json!({"v": "1"}))],
    ));
    w.settled("web", 1, Phase::Succeeded).await;
    let uid = w.config_map("apps", "a").expect("a")["metadata"]["uid"].clone();

    w.targets
        .fail(TargetCall::Replace, Fault::Conflict, Some(1));
    w.edit("web", |o| {
        o["spec"]["config"]["manifests"][0]["manifest"]["data"]["v"] = json!("2");
    });
    let done = w.settled("web", 2, Phase::Succeeded).await;
    let a = w.config_map("apps", "a").expect("a");
    assert_eq!(a["data"]["v"], "2");
    assert_eq!(a["metadata"]["uid"], uid, "updated in place");
    assert!(
        w.journaled_errors("web")
            .iter()
            .any(|(_, m, retried)| m.contains("modified") && *retried),
        "{:?}",
        w.journaled_errors("web")
    );
    assert!(done["status"]["phase"] == "Succeeded");
}

#[tokio::test(start_paused = true)]
async fn an_object_the_target_cannot_delete_now_keeps_the_item_deleting_until_it_can() {
    let w = World::start().await;
    w.cluster
        .put_item(manifest_item("web", &[config_map("apps", "a", json!({}))]));
    w.settled("web", 1, Phase::Succeeded).await;
    w.targets.fail(TargetCall::Delete, Fault::ServerError, None);
    w.cluster.delete_item(&key("web"));
    let waiting = w
        .waiting_with("web", Phase::Deleting, "deleting ConfigMap apps/a")
        .await;
    assert!(no_codes(&waiting["status"]["lastError"]), "{waiting}");
    assert_eq!(waiting["metadata"]["finalizers"], json!([FINALIZER]));
    assert!(w.config_map("apps", "a").is_some());

    w.targets.heal(TargetCall::Delete);
    w.gone("web").await;
    assert!(w.config_map("apps", "a").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_the_target_forbids_fails_the_deletion_and_keeps_the_item() {
    let w = World::start().await;
    w.cluster
        .put_item(manifest_item("web", &[config_map("apps", "a", json!({}))]));
    w.settled("web", 1, Phase::Succeeded).await;
    w.targets.fail(TargetCall::Delete, Fault::Forbidden, None);
    w.cluster.delete_item(&key("web"));
    let failed = w.in_phase("web", Phase::DeleteFailed).await;
    let e = &failed["status"]["lastError"];
    assert_eq!(e["codes"], json!(["ERR_UNAUTHORIZED"]), "{e}");
    assert!(message_has(e, &["deleting ConfigMap apps/a"]), "{e}");
    assert_eq!(failed["metadata"]["finalizers"], json!([FINALIZER]));
    assert!(w.config_map("apps", "a").is_some());
    w.idle().await;
    assert!(
        w.cluster.item(&key("web")).is_some(),
        "a failed deletion waits for the user"
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_context_keeps_the_item_waiting_until_it_exists() {
    let w = World::start().await;
    w.cluster
        .put_item(mock_item("m", json!({}), json!({"context": "ctx"})));
    let waiting = w
        .waiting_with(
            "m",
            Phase::Progressing,
            "spec.context: Context ns/ctx not found",
        )
        .await;
    assert_eq!(waiting["status"]["lastError"]["reason"], "ContextNotFound");
    assert!(w.warned("m", "ContextNotFound"));
    w.cluster.put_context(json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Context",
        "metadata": {"name": "ctx", "namespace": "ns"},
    }));
    w.settled("m", 1, Phase::Succeeded).await;
}

/// The deployer's ServiceAccount lost its right to write items' status: nothing can be
/// written on the item, so bosun's debug view names the refusal, and the item deploys
/// once the right is back.
#[tokio::test(start_paused = true)]
async fn a_status_write_rbac_forbids_is_named_in_the_debug_view_until_it_is_allowed() {
    let w = World::start().await;
    w.cluster
        .fail(ClusterCall::WriteStatus, Fault::Forbidden, None);
    w.cluster
        .put_item(manifest_item("web", &[config_map("apps", "a", json!({}))]));
    until("the refusal in the debug view", || {
        w.last_run_error("web")
            .is_some_and(|e| e.contains("DeployItem ns/web status") && e.contains("forbidden"))
    })
    .await;
    assert!(
        w.item("web")["status"].is_null(),
        "nothing could be written"
    );
    assert!(
        w.targets.ops().is_empty(),
        "nothing deployed before Init is written"
    );

    w.cluster.heal(ClusterCall::WriteStatus);
    let done = w.settled("web", 1, Phase::Succeeded).await;
    assert!(done["status"]["lastError"].is_null(), "{done}");
    assert!(w.config_map("apps", "a").is_some());
    let run = w.deployer.view().last_runs();
    assert!(run.get(&key("web")).is_some_and(|r| r.ok), "{run:?}");
}
