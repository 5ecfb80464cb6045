//! An item's life in-process after its first run: updates (a generation bump, the
//! operation annotations, jobs of the jobID contract), timeouts landscaper would have
//! enforced, and deletion (through InitDelete and Deleting, with or without uninstalling,
//! against a target that does not answer). Each scenario asserts what a landscaper user
//! sees: phase, lastError with its codes, observedGeneration, annotations, finalizers,
//! jobIDFinished and the objects on the target.
//!
//! Run: `cargo test -p bosun-deployer --test lifecycle`.

mod world;

use std::time::{Duration, SystemTime};

use bosun_deployer::decide::Contract;
use bosun_deployer::events::DeployerEvent;
use bosun_deployer::item::{FINALIZER, Phase};
use bosun_deployer::manifest::DEPLOYITEM_LABEL;
use serde_json::{Value, json};
use world::{
    World, config_map, key, manifest_item, message_has, mock_item, settings, target, until,
};

const OPERATION: &str = "landscaper.gardener.cloud/operation";
const RECONCILE_TIME: &str = "landscaper.gardener.cloud/reconcile-time";

/// The RFC 3339 time `secs` seconds ago.
fn rfc3339_ago(secs: u64) -> String {
    let t = SystemTime::now() - Duration::from_secs(secs);
    humantime::format_rfc3339_seconds(t).to_string()
}

fn annotation<'a>(o: &'a Value, name: &str) -> Option<&'a str> {
    o["metadata"]["annotations"][name].as_str()
}

fn progressing() -> Value {
    json!({"phase": "Progressing"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_bump_during_progressing_starts_a_new_run_with_the_new_spec() {
    let w = World::start().await;
    let mut item = mock_item("bumped", progressing(), json!({"timeout": "1h"}));
    item["metadata"]["annotations"] = json!({RECONCILE_TIME: rfc3339_ago(10)});
    w.cluster.put_item(item);
    let stuck = w.in_phase("bumped", Phase::Progressing).await;
    assert_eq!(
        annotation(&stuck, RECONCILE_TIME),
        None,
        "removed on pickup"
    );
    w.edit("bumped", |o| {
        o["spec"]["config"]["phase"] = json!("Succeeded")
    });
    let done = w.settled("bumped", 2, Phase::Succeeded).await;
    assert!(done["status"]["lastError"].is_null(), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_fails_a_progressing_item_and_force_reconcile_runs_it_again() {
    let w = World::start().await;
    w.cluster.put_item(mock_item(
        "aborted",
        progressing(),
        json!({"timeout": "1h"}),
    ));
    w.in_phase("aborted", Phase::Progressing).await;
    w.operate("aborted", "abort");
    let failed = w.in_phase("aborted", Phase::Failed).await;
    assert_eq!(failed["status"]["lastError"]["reason"], "Aborted");
    assert_eq!(
        annotation(&failed, OPERATION),
        Some("abort"),
        "the annotation stays for whoever set it"
    );

    // force-reconcile restarts it: Progressing again, the last run's error gone, the
    // annotation removed.
    w.operate("aborted", "force-reconcile");
    until("the forced run", || {
        w.cluster.item(&key("aborted")).is_some_and(|o| {
            o["status"]["phase"] == "Progressing"
                && o["status"]["lastError"].is_null()
                && annotation(&o, OPERATION).is_none()
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_older_than_the_abort_timeout_ends_as_landscaper_s_timeout_would() {
    let w = World::start().await;
    w.cluster.put_item(mock_item(
        "abort-timed-out",
        progressing(),
        json!({"timeout": "1h"}),
    ));
    w.in_phase("abort-timed-out", Phase::Progressing).await;
    w.edit("abort-timed-out", |o| {
        o["metadata"]["annotations"] = json!({
            OPERATION: "abort",
            "landscaper.gardener.cloud/abort-time": rfc3339_ago(600),
        });
    });
    let failed = w.in_phase("abort-timed-out", Phase::Failed).await;
    let e = &failed["status"]["lastError"];
    assert_eq!(
        (&e["operation"], &e["reason"], &e["codes"]),
        (
            &json!("WaitingForAbort"),
            &json!("AbortingTimeout"),
            &json!(["ERR_TIMEOUT"])
        ),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_marker_older_than_the_pickup_timeout_fails_the_item() {
    let w = World::start().await;
    let mut late = mock_item("late", json!({}), json!({}));
    late["metadata"]["annotations"] = json!({RECONCILE_TIME: rfc3339_ago(600)});
    w.cluster.put_item(late);
    let failed = w.in_phase("late", Phase::Failed).await;
    let e = &failed["status"]["lastError"];
    assert_eq!(
        (&e["reason"], &e["codes"]),
        (&json!("PickupTimeout"), &json!(["ERR_TIMEOUT"])),
        "{e}"
    );
    assert_eq!(annotation(&failed, RECONCILE_TIME), None);
    assert!(w.warned("late", "PickupTimeout"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_reconcile_makes_a_job_and_finishes_it_in_the_same_write() {
    let w = World::start().await;
    w.cluster.put_item(mock_item("t", json!({}), json!({})));
    w.settled("t", 1, Phase::Succeeded).await;
    w.operate("t", "test-reconcile");
    until("the test job finished", || {
        w.cluster.item(&key("t")).is_some_and(|o| {
            let s = &o["status"];
            s["jobID"].is_string() && s["jobID"] == s["jobIDFinished"] && s["phase"] == "Succeeded"
        })
    })
    .await;
    assert_eq!(annotation(&w.item("t"), OPERATION), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_jobid_contract_an_item_runs_only_once_it_has_a_job() {
    let mut s = settings();
    s.contract = Contract::JobId;
    let w = World::with(s).await;
    for name in ["waits", "first"] {
        w.cluster.put_item(mock_item(name, json!({}), json!({})));
    }
    w.cluster
        .edit_status(&key("first"), |s| s["jobID"] = json!("job-1"));
    until("first finished job-1", || {
        w.cluster.item(&key("first")).is_some_and(|i| {
            i["status"]["jobIDFinished"] == "job-1" && i["status"]["phase"] == "Succeeded"
        })
    })
    .await;
    let first = w.item("first");
    assert!(
        first["status"]["transitionTimes"]["finishedTime"].is_string(),
        "{first}"
    );
    assert_eq!(first["status"]["deployer"]["name"], "bosun");
    w.idle().await;
    // Created before it, never triggered: untouched (no phase, no finalizer).
    let waits = w.item("waits");
    assert!(waits["status"]["phase"].is_null(), "{waits}");
    assert!(waits["metadata"]["finalizers"].is_null(), "{waits}");
    assert!(w.cluster.writes().iter().all(|(k, _)| k.name != "waits"));

    w.cluster
        .edit_status(&key("waits"), |s| s["jobID"] = json!("job-2"));
    until("waits finished job-2", || {
        w.cluster.item(&key("waits")).is_some_and(|i| {
            i["status"]["jobIDFinished"] == "job-2" && i["status"]["phase"] == "Succeeded"
        })
    })
    .await;
    // A new job on the finished item runs it again.
    w.cluster
        .edit_status(&key("first"), |s| s["jobID"] = json!("job-3"));
    until("first finished job-3", || {
        w.cluster
            .item(&key("first"))
            .is_some_and(|i| i["status"]["jobIDFinished"] == "job-3")
    })
    .await;
    assert_eq!(
        w.journaled_phases("first"),
        [
            Phase::Init,
            Phase::Progressing,
            Phase::Succeeded,
            Phase::Init,
            Phase::Progressing,
            Phase::Succeeded
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_that_fail_say_why_with_their_codes_and_the_others_still_deploy() {
    let w = World::start().await;
    w.cluster
        .put_item(mock_item("fails", json!({"phase": "Failed"}), json!({})));
    w.cluster.put_item(mock_item(
        "bad-timeout",
        json!({}),
        json!({"timeout": "ten minutes"}),
    ));
    w.cluster.put_item(mock_item(
        "bad-config",
        json!({"phase": "Sleeping"}),
        json!({}),
    ));
    w.cluster.put_item(mock_item("fine", json!({}), json!({})));

    let failed = w.in_phase("fails", Phase::Failed).await;
    let e = &failed["status"]["lastError"];
    assert_eq!(e["reason"], "Failed", "{e}");
    assert!(message_has(e, &["reported phase Failed"]), "{e}");
    assert!(w.warned("fails", "Failed"));

    for (name, field) in [
        ("bad-timeout", "spec.timeout"),
        ("bad-config", "spec.config"),
    ] {
        let failed = w.in_phase(name, Phase::Failed).await;
        let e = &failed["status"]["lastError"];
        assert_eq!(
            e["codes"],
            json!(["ERR_CONFIGURATION_PROBLEM"]),
            "{name}: {e}"
        );
        assert!(
            e["message"].as_str().is_some_and(|m| m.contains(field)),
            "{name}'s error names {field}: {e}"
        );
    }
    // As landscaper's mock: the configuration it cannot read is a False validation.
    let bad = w.item("bad-config");
    let validation = bad["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DeployItemValidation"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&validation["status"], &validation["reason"]),
        (&json!("False"), &json!("FailedUnmarshal")),
        "{bad}"
    );
    w.settled("fine", 1, Phase::Succeeded).await;
    let errors: Vec<String> = w
        .journal
        .events()
        .into_iter()
        .filter_map(|e| match e {
            DeployerEvent::DeployItemError {
                item,
                retry_in_ms: None,
                ..
            } => Some(item),
            _ => None,
        })
        .collect();
    for name in ["fails", "bad-timeout", "bad-config"] {
        assert!(
            errors.contains(&format!("deployitem/ns/{name}")),
            "the journal holds {name}'s failure: {errors:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_with_delete_without_uninstall_leaves_the_objects_on_the_target() {
    let w = World::start().await;
    w.cluster.put_item(manifest_item(
        "web",
        &[config_map("apps", "kept", json!({}))],
    ));
    w.settled("web", 1, Phase::Succeeded).await;
    w.edit("web", |o| {
        o["metadata"]["annotations"]["landscaper.gardener.cloud/delete-without-uninstall"] =
            json!("true");
    });
    w.cluster.delete_item(&key("web"));
    w.gone("web").await;
    assert!(
        w.config_map("apps", "kept").is_some(),
        "the objects stay on the target"
    );
    assert!(
        w.writes(bosun_deployer::fakes::TargetWrite::Delete)
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn deleting_an_item_whose_target_does_not_answer_waits_naming_it() {
    let w = World::start().await;
    w.cluster
        .put_item(manifest_item("web", &[config_map("apps", "a", json!({}))]));
    w.settled("web", 1, Phase::Succeeded).await;
    w.targets.unreachable(&target(), true);
    w.cluster.delete_item(&key("web"));
    let waiting = w
        .waiting_with("web", Phase::Deleting, "Target ns/cluster")
        .await;
    assert_eq!(waiting["metadata"]["finalizers"], json!([FINALIZER]));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(w.phase("web"), Some(Phase::Deleting), "retried, not failed");

    w.targets.unreachable(&target(), false);
    w.gone("web").await;
    assert!(w.config_map("apps", "a").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_deleted_before_its_first_run_finishes_leaves_nothing_behind() {
    let w = World::start().await;
    w.cluster
        .put_item(mock_item("brief", progressing(), json!({"timeout": "1h"})));
    w.in_phase("brief", Phase::Progressing).await;
    w.cluster.delete_item(&key("brief"));
    w.gone("brief").await;
    let phases = w.journaled_phases("brief");
    assert!(
        phases.ends_with(&[Phase::InitDelete, Phase::Deleting]),
        "{phases:?}"
    );
}

/// `policy: fallback` manages only what carries this item's label, as landscaper's object
/// applier: an existing object nobody labelled is left as it is, and one relabelled to
/// another item is not deleted when the item stops listing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_touches_only_objects_the_item_owns() {
    let w = World::start().await;
    w.targets.put_object(
        &target(),
        config_map("default", "theirs", json!({"v": "theirs"})),
    );
    let manifests = |with_fresh: bool| {
        let mut list = vec![
            json!({"policy": "fallback", "manifest": config_map("default", "theirs", json!({"v": "ours"}))}),
        ];
        if with_fresh {
            list.push(json!({"policy": "fallback", "manifest": config_map("default", "fresh", json!({"v": "ours"}))}));
        }
        json!(list)
    };
    let mut item = manifest_item("falls-back", &[]);
    item["spec"]["config"]["manifests"] = manifests(true);
    w.cluster.put_item(item);
    w.settled("falls-back", 1, Phase::Succeeded).await;
    let theirs = w.config_map("default", "theirs").expect("theirs");
    assert_eq!(
        theirs["data"]["v"], "theirs",
        "an object nobody labelled is not taken over"
    );
    assert!(
        theirs["metadata"]["labels"][DEPLOYITEM_LABEL].is_null(),
        "{theirs}"
    );
    let fresh = w.config_map("default", "fresh").expect("fresh");
    assert_eq!(fresh["metadata"]["labels"][DEPLOYITEM_LABEL], "falls-back");

    // Another item takes `fresh` over; this item stops listing it: it stays.
    let mut relabelled = fresh.clone();
    relabelled["metadata"]["labels"][DEPLOYITEM_LABEL] = json!("another-item");
    w.targets.put_object(&target(), relabelled);
    w.edit("falls-back", |o| {
        o["spec"]["config"]["manifests"] = manifests(false)
    });
    w.settled("falls-back", 2, Phase::Succeeded).await;
    assert!(
        w.config_map("default", "fresh").is_some(),
        "relabelled to another item: not this item's orphan"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_patch_strategy_removes_fields_added_on_the_cluster_at_the_next_change() {
    let w = World::start().await;
    let config = |v: &str| {
        let mut item = manifest_item(
            "patching",
            &[config_map("default", "patched", json!({"a": v}))],
        );
        item["spec"]["config"]["updateStrategy"] = json!("patch");
        item["spec"]["config"].clone()
    };
    let mut item = manifest_item("patching", &[]);
    item["spec"]["config"] = config("1");
    w.cluster.put_item(item);
    w.settled("patching", 1, Phase::Succeeded).await;
    // Someone adds a field on the cluster.
    let mut live = w.config_map("default", "patched").expect("patched");
    live["data"]["added"] = json!("on the cluster");
    w.targets.put_object(&target(), live);

    w.edit("patching", |o| o["spec"]["config"] = config("2"));
    w.settled("patching", 2, Phase::Succeeded).await;
    assert_eq!(
        w.config_map("default", "patched").expect("patched")["data"],
        json!({"a": "2"}),
        "the field added on the cluster is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_groups_keep_what_they_do_not_select() {
    let w = World::start().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}
    });
    for (name, groups, cm_kept) in [
        (
            "skips-crds",
            json!([
                {"predefinedResourceGroup": {"type": "namespaced-resources"}},
                {"predefinedResourceGroup": {"type": "cluster-scoped-resources"}},
            ]),
            false,
        ),
        (
            "keeps-all",
            json!([{"predefinedResourceGroup": {"type": "empty"}}]),
            true,
        ),
    ] {
        let mut item = manifest_item(
            name,
            &[crd.clone(), config_map("default", name, json!({"v": "1"}))],
        );
        item["spec"]["config"]["deletionGroups"] = groups;
        w.cluster.put_item(item);
        w.settled(name, 1, Phase::Succeeded).await;
        w.cluster.delete_item(&key(name));
        w.gone(name).await;
        assert!(
            w.targets
                .object(
                    &target(),
                    "CustomResourceDefinition",
                    "",
                    "widgets.example.com"
                )
                .is_some(),
            "{name}: the CRD no group selects is kept"
        );
        assert_eq!(w.config_map("default", name).is_some(), cm_kept, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_progressing_default_times_out_items_without_their_own_timeout() {
    let mut s = settings();
    s.timeouts.progressing = bosun_deployer::timeout::Timeout::After(Duration::from_secs(1));
    let w = World::with(s).await;
    w.cluster
        .put_item(mock_item("slow", progressing(), json!({})));
    let failed = w.in_phase("slow", Phase::Failed).await;
    let e = &failed["status"]["lastError"];
    assert_eq!(e["codes"], json!(["ERR_TIMEOUT"]), "{e}");
    assert_eq!(e["reason"], "ProgressingTimeout", "{e}");
    assert!(w.warned("slow", "ProgressingTimeout"));
}

/// Two replicas serve the same targets with per-item locks: each item runs on one of
/// them, once, and the other leaves it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_serving_the_same_targets_run_each_item_once_on_the_holder_of_its_lock() {
    let replica = |holder: &str| {
        let mut s = settings();
        s.lock_holder = Some(holder.to_string());
        s
    };
    let a = World::with(replica("bosun-a")).await;
    let b = World::on(a.cluster.clone(), replica("bosun-b")).await;
    let names: Vec<String> = (0..6).map(|i| format!("item-{i}")).collect();
    for name in &names {
        a.cluster
            .put_item(manifest_item(name, &[config_map("apps", name, json!({}))]));
    }
    for name in &names {
        a.settled(name, 1, Phase::Succeeded).await;
    }
    a.idle().await;
    b.idle().await;
    for name in &names {
        let runs: Vec<usize> = [&a, &b]
            .iter()
            .map(|w| {
                w.journaled_phases(name)
                    .iter()
                    .filter(|p| **p == Phase::Succeeded)
                    .count()
            })
            .collect();
        assert_eq!(runs.iter().sum::<usize>(), 1, "{name} ran once: {runs:?}");
        let created = [&a, &b]
            .iter()
            .map(|w| {
                w.writes(bosun_deployer::fakes::TargetWrite::Create)
                    .into_iter()
                    .filter(|r| r == &format!("ConfigMap apps/{name}"))
                    .count()
            })
            .sum::<usize>();
        assert_eq!(created, 1, "{name}'s object created once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_all_group_with_a_target_name_deletes_in_that_target_only() {
    let w = World::start().await;
    w.cluster
        .put_target(world::cluster_target("ns", "other", json!({})));
    let other = key("other");
    for (namespace, name) in [("leftovers", "a"), ("leftovers", "b"), ("default", "kept")] {
        w.targets
            .put_object(&other, config_map(namespace, name, json!({})));
    }
    let mut item = manifest_item(
        "cleans-elsewhere",
        &[config_map("default", "app", json!({}))],
    );
    item["spec"]["config"]["deletionGroups"] = json!([
        {"customResourceGroup": {"deleteAllResources": true, "targetName": "other",
         "resources": [{"apiVersion": "v1", "kind": "ConfigMap", "namespaces": ["leftovers"]}]}},
        {"predefinedResourceGroup": {"type": "namespaced-resources"}},
    ]);
    w.cluster.put_item(item);
    w.settled("cleans-elsewhere", 1, Phase::Succeeded).await;
    assert!(
        w.targets
            .object(&other, "ConfigMap", "leftovers", "a")
            .is_some(),
        "nothing is deleted before the item is"
    );
    w.cluster.delete_item(&key("cleans-elsewhere"));
    w.gone("cleans-elsewhere").await;
    for name in ["a", "b"] {
        assert!(
            w.targets
                .object(&other, "ConfigMap", "leftovers", name)
                .is_none(),
            "{name}: the group deleted it in the other target"
        );
    }
    assert!(
        w.targets
            .object(&other, "ConfigMap", "default", "kept")
            .is_some(),
        "outside the group's namespaces"
    );
    assert!(
        w.config_map("default", "app").is_none(),
        "the item's own object deleted in its target"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_groups_go_in_order_and_force_delete_strips_finalizers() {
    let w = World::start().await;
    let mut held = config_map("default", "held", json!({"v": "1"}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let mut item = manifest_item("grouped", &[]);
    item["spec"]["config"]["manifests"] = json!([
        {"manifest": held},
        {"manifest": config_map("default", "plain", json!({"v": "1"})),
         "annotateBeforeDelete": {"example.com/going": "yes"}},
    ]);
    item["spec"]["config"]["deletionGroups"] = json!([
        {"customResourceGroup": {"resources": [{"apiVersion": "v1", "kind": "ConfigMap", "names": ["held"]}], "forceDelete": true}},
        {"predefinedResourceGroup": {"type": "namespaced-resources"}},
        // Every Secret of `default` in the target, whoever made it.
        {"customResourceGroup": {"deleteAllResources": true,
            "resources": [{"apiVersion": "v1", "kind": "Secret", "namespaces": ["default"]}]}},
    ]);
    w.cluster.put_item(item);
    w.settled("grouped", 1, Phase::Succeeded).await;
    assert!(w.config_map("default", "held").is_some());
    for (ns, name) in [("default", "stray"), ("other", "elsewhere")] {
        w.targets.put_object(
            &target(),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}}),
        );
    }
    w.cluster.delete_item(&key("grouped"));
    w.gone("grouped").await;
    assert!(
        w.config_map("default", "held").is_none(),
        "forceDelete removed the finalizer that held it"
    );
    assert!(w.config_map("default", "plain").is_none());
    let secret = |ns: &str, name: &str| w.targets.object(&target(), "Secret", ns, name);
    assert!(
        secret("default", "stray").is_none(),
        "deleteAllResources takes objects the item never made"
    );
    assert!(
        secret("other", "elsewhere").is_some(),
        "only in the namespaces the group names"
    );
    // In order: the forced group before the namespaced one, the annotation before the
    // delete, the Secrets last.
    let deletes = w.writes(bosun_deployer::fakes::TargetWrite::Delete);
    let at = |what: &str| deletes.iter().position(|d| d == what);
    assert!(
        at("ConfigMap default/held") < at("ConfigMap default/plain")
            && at("ConfigMap default/plain") < at("Secret default/stray"),
        "{deletes:?}"
    );
    let ops = w.targets.ops();
    let annotated = ops.iter().position(|o| {
        o.write == bosun_deployer::fakes::TargetWrite::Replace
            && o.resource.to_string() == "ConfigMap default/plain"
    });
    let deleted = ops.iter().position(|o| {
        o.write == bosun_deployer::fakes::TargetWrite::Delete
            && o.resource.to_string() == "ConfigMap default/plain"
    });
    assert!(annotated.is_some() && annotated < deleted, "{ops:?}");

    // A bad group fails the item at once, naming the field.
    let mut bad = manifest_item("bad-group", &[config_map("default", "x", json!({}))]);
    bad["spec"]["config"]["deletionGroups"] =
        json!([{"predefinedResourceGroup": {"type": "pods"}}]);
    w.cluster.put_item(bad);
    let failed = w.in_phase("bad-group", Phase::Failed).await;
    assert!(
        failed["status"]["lastError"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("deletionGroups[0].predefinedResourceGroup.type"),
        "{}",
        failed["status"]["lastError"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mock_item_succeeds_with_its_exports_and_runs_again_on_reconcile() {
    let w = World::start().await;
    // An item of another type, created first: it must never be touched.
    w.cluster.put_item(json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
        "metadata": {"name": "container-item", "namespace": "ns"},
        "spec": {"type": "landscaper.gardener.cloud/container", "config": {"apiVersion": "container.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderConfiguration"}},
    }));
    let other_version = w.item("container-item")["metadata"]["resourceVersion"].clone();
    w.cluster.put_item(mock_item(
        "mock-item",
        json!({
            "providerStatus": {"apiVersion": "mock.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderStatus", "key1": "val1"},
            "export": {"key2": "val2"},
        }),
        json!({}),
    ));
    let done = w.settled("mock-item", 1, Phase::Succeeded).await;
    let status = &done["status"];
    assert_eq!(status["providerStatus"]["key1"], "val1", "{status}");
    assert_eq!(status["deployer"]["identity"], "test");
    assert_eq!(status["deployer"]["name"], "bosun");
    assert!(status["lastReconcileTime"].is_string(), "{status}");
    assert!(status["lastError"].is_null(), "{status}");
    assert_eq!(done["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(
        status["exportRef"]["name"], "mock-item-export",
        "landscaper's name: <item>-export"
    );
    let exported = |w: &World| {
        w.cluster
            .secret("ns", "mock-item-export")
            .and_then(|d| d.get("config").cloned())
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    };
    assert_eq!(exported(&w), Some(json!({"key2": "val2"})));
    assert_eq!(
        w.journaled_phases("mock-item"),
        [Phase::Init, Phase::Progressing, Phase::Succeeded]
    );

    // operation: reconcile runs it again and is removed.
    w.operate("mock-item", "reconcile");
    until("a second run after operation: reconcile", || {
        let phases = w.journaled_phases("mock-item");
        phases.len() == 6
            && phases[3..] == [Phase::Init, Phase::Progressing, Phase::Succeeded]
            && w.cluster.item(&key("mock-item")).is_some_and(|o| {
                o["status"]["phase"] == "Succeeded" && annotation(&o, OPERATION).is_none()
            })
    })
    .await;
    let again = w.item("mock-item");
    assert_eq!(
        again["status"]["exportRef"]["name"], "mock-item-export",
        "the export Secret is reused"
    );
    assert_eq!(exported(&w), Some(json!({"key2": "val2"})));

    // The other type's item: no status, no finalizer, never written.
    w.idle().await;
    let other = w.item("container-item");
    assert!(other["status"].is_null(), "{other}");
    assert!(other["metadata"]["finalizers"].is_null(), "{other}");
    assert_eq!(other["metadata"]["resourceVersion"], other_version);
    assert_eq!(
        w.deployer.view().types(),
        [
            "landscaper.gardener.cloud/mock",
            "landscaper.gardener.cloud/kubernetes-manifest",
            "landscaper.gardener.cloud/helm"
        ]
    );
    assert_eq!(w.deployer.view().in_phase(Phase::Succeeded), 1);
}
