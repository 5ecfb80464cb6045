//! Rolling updates of a CompositeController in-process: the parent `Rollout` wants three
//! `Replica` children carrying its `spec.version`, updated `RollingInPlace` or
//! `RollingRecreate` and gated by `statusChecks` on a `Ready` condition. The test plays
//! the kubelet: it writes each child's status, and the rollout may only move the next
//! child once it has. `RollingInPlace` in both apply modes and across a kill -9 runs end
//! to end (`tests/lambda/rollout.rs`).
//!
//! Run: `cargo test -p bosun-lambda --test rollout`.

mod world;

use bosun_lambda::ports::HookType::{Finalize, Sync};
use serde_json::{Value, json};

use world::{Crd, World};

/// The replicas' `spec.version`, web-0 to web-2 (`-` for a missing one).
fn versions(w: &World) -> Vec<String> {
    (0..3)
        .map(|i| {
            w.get("replicas", "default", &format!("web-{i}"))
                .map_or("-".into(), |r| {
                    r["spec"]["version"].as_str().unwrap_or("?").into()
                })
        })
        .collect()
}

/// The parent's `Updated` condition (Null when absent).
fn updated(w: &World) -> Value {
    w.get("rollouts", "default", "web")
        .and_then(|p| {
            p["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Updated").cloned())
        })
        .unwrap_or(Value::Null)
}

/// The ControllerRevisions of the `rollouts` parents.
fn revisions(w: &World) -> Vec<Value> {
    w.list("controllerrevisions")
        .into_iter()
        .filter(|r| r["metadata"]["labels"]["metacontroller.k8s.io/resource"] == "rollouts")
        .collect()
}

fn uids(w: &World) -> Vec<Value> {
    (0..3)
        .map(|i| {
            w.get("replicas", "default", &format!("web-{i}"))
                .expect("replica")["metadata"]["uid"]
                .clone()
        })
        .collect()
}

/// Plays the kubelet for replica `i`: once it carries `version`, reports its generation as
/// observed and Ready.
async fn report_ready(w: &World, i: usize, version: &str) {
    let name = format!("web-{i}");
    w.until(&format!("{name} at {version}"), || {
        w.get("replicas", "default", &name)
            .is_some_and(|r| r["spec"]["version"] == version)
    })
    .await;
    w.edit("replicas", "default", &name, |r| {
        r["status"] = json!({
            "observedGeneration": r["metadata"]["generation"],
            "conditions": [{"type": "Ready", "status": "True"}]
        });
    });
}

/// Waits until the rollout waits on replica `i`, which already carries `v2`.
async fn wait_waiting_on(w: &World, i: usize) {
    let needle = format!("default/web-{i} ");
    w.until(&format!("the rollout waiting on web-{i} at v2"), || {
        let u = updated(w);
        u["status"] == "False"
            && u["reason"] == "RolloutWaiting"
            && u["message"].as_str().is_some_and(|m| m.contains(&needle))
            && w.get("replicas", "default", &format!("web-{i}"))
                .is_some_and(|r| r["spec"]["version"] == "v2")
    })
    .await;
}

/// The controller (children updated by `method`, a finalize hook when `finalize`) and a
/// parent at `v1` rolled out, every replica Ready.
async fn setup(method: &str, finalize: bool) -> World {
    let w = World::start(&[
        Crd("Rollout", "rollouts", true),
        Crd("Replica", "replicas", true),
    ])
    .await;
    // Three replicas carrying the parent's version; the status echoes the version.
    w.answer("rollouts", Sync, |req| {
        let parent = &req["parent"];
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let version = parent["spec"]["version"].clone();
        let children: Vec<Value> = (0..3)
            .map(|i| {
                json!({"apiVersion": "example.com/v1", "kind": "Replica",
                       "metadata": {"name": format!("{name}-{i}")},
                       "spec": {"version": version}})
            })
            .collect();
        Ok(json!({"status": {"version": version}, "children": children}))
    });
    // No children; finalized once none is left.
    w.answer("rollouts", Finalize, |req| {
        let left = req["children"]["Replica.example.com/v1"]
            .as_object()
            .map_or(0, |m| m.len());
        Ok(json!({"status": {"finalizing": true}, "children": [], "finalized": left == 0}))
    });
    let mut hooks = json!({"sync": {"webhook": {"url": "http://hooks.test/rollouts/sync"}}});
    if finalize {
        hooks["finalize"] = json!({"webhook": {"url": "http://hooks.test/rollouts/finalize"}});
    }
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "rollouts"},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": "example.com/v1", "resource": "rollouts"},
            "childResources": [{
                "apiVersion": "example.com/v1", "resource": "replicas",
                "updateStrategy": {"method": method,
                                   "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}}
            }],
            "hooks": hooks
        }
    }));
    w.put(
        "rollouts",
        json!({"apiVersion": "example.com/v1", "kind": "Rollout", "metadata": {"name": "web"},
               "spec": {"version": "v1"}}),
    );
    w.until("three v1 replicas, on the latest revision", || {
        versions(&w) == ["v1", "v1", "v1"]
            && updated(&w)["reason"] == "OnLatestRevision"
            && revisions(&w).len() == 1
    })
    .await;
    for i in 0..3 {
        report_ready(&w, i, "v1").await;
    }
    w
}

/// RollingRecreate: each replica is deleted and created again at the new version, one
/// Ready replica per sync; the end state has every replica a new object at v2, controlled
/// by the parent alone, on the latest revision, the old revision pruned.
#[tokio::test]
async fn rolling_recreate_replaces_one_ready_child_per_sync() {
    let w = setup("RollingRecreate", false).await;
    let before = uids(&w);
    w.edit("rollouts", "default", "web", |p| {
        p["spec"]["version"] = json!("v2")
    });
    wait_waiting_on(&w, 0).await;
    assert_eq!(versions(&w), ["v2", "v1", "v1"]);
    let now = uids(&w);
    assert_eq!(
        w.created("replicas", "default", "web-0"),
        2,
        "web-0 was updated, not recreated"
    );
    assert_eq!(now[1..], before[1..]);
    report_ready(&w, 0, "v2").await;
    wait_waiting_on(&w, 1).await;
    assert_eq!(versions(&w), ["v2", "v2", "v1"]);
    assert_eq!(uids(&w)[2], before[2]);
    report_ready(&w, 1, "v2").await;
    w.until(
        "OnLatestRevision with every replica at v2, the old revision pruned",
        || {
            updated(&w)["reason"] == "OnLatestRevision"
                && versions(&w) == ["v2", "v2", "v2"]
                && revisions(&w).len() == 1
        },
    )
    .await;
    let latest = revisions(&w).remove(0);
    let name = latest["metadata"]["name"].as_str().expect("name");
    assert!(name.starts_with("rollouts.example.com-"), "{name}");
    assert_eq!(
        updated(&w)["message"],
        format!("latest ControllerRevision: {name}")
    );
    assert_eq!(latest["parentPatch"], json!({"spec": {"version": "v2"}}));
    for i in 0..3 {
        assert_eq!(
            w.created("replicas", "default", &format!("web-{i}")),
            2,
            "web-{i}"
        );
    }
    let parent = w.get("rollouts", "default", "web").expect("parent");
    assert_eq!(parent["status"]["version"], "v2");
    for r in w.list("replicas") {
        let refs = r["metadata"]["ownerReferences"].as_array().expect("owners");
        assert_eq!(refs.len(), 1, "{r}");
        assert_eq!(refs[0]["uid"], parent["metadata"]["uid"], "{r}");
        assert_eq!(refs[0]["controller"], true, "{r}");
    }
}

/// A parent deleted mid-rollout, while an old revision still claims two replicas, is
/// finalized through every revision (the old revision's virtual parent too, each call
/// with `finalizing: true`) and leaves no replica and no revision behind.
#[tokio::test]
async fn a_rolling_parent_is_finalized_through_every_revision_and_leaves_nothing_behind() {
    let w = setup("RollingInPlace", true).await;
    let finalizer = "metacontroller.io/compositecontroller-rollouts";
    assert!(
        w.get("rollouts", "default", "web").expect("parent")["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == finalizer)),
        "no finalizer on the parent"
    );
    w.edit("rollouts", "default", "web", |p| {
        p["spec"]["version"] = json!("v2")
    });
    wait_waiting_on(&w, 0).await;
    assert_eq!(revisions(&w).len(), 2);
    w.delete("rollouts", "default", "web");
    w.until(
        "the parent finalized and gone, no replica and no revision left",
        || {
            w.get("rollouts", "default", "web").is_none()
                && w.list("replicas").is_empty()
                && revisions(&w).is_empty()
        },
    )
    .await;
    let finalize = w.requests("rollouts", Finalize);
    assert!(
        finalize.iter().all(|c| c["finalizing"] == true),
        "a finalize call without finalizing: true"
    );
    assert!(
        finalize
            .iter()
            .any(|c| c["parent"]["spec"]["version"] == "v1"),
        "the old revision's virtual parent was not finalized"
    );
}
