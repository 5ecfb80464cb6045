//! Rolling updates of a CompositeController end to end: a real sandbox API server,
//! `bosun run`, and a sync hook served by this test on 127.0.0.1.
//!
//! The parent `Rollout` wants three `Replica` children (a custom resource with a status
//! subresource) carrying its `spec.version`, updated `RollingInPlace` (or
//! `RollingRecreate`) and gated by
//! `statusChecks` on a `Ready` condition. No kubelet runs here: the test writes each
//! child's status itself, and the rollout may only move the next child once it has.

use std::time::{Duration, Instant};

use crate::common::webhooks::{Hooks, get, post_ok};
use crate::common::{Operator, Sandbox, wait_for, workdir};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const NS: &str = "default";
const PARENT: &str = "/apis/example.com/v1/namespaces/default/rollouts/web";
const REPLICAS: &str = "/apis/example.com/v1/namespaces/default/replicas";
const REVISIONS: &str =
    "/apis/metacontroller.k8s.io/v1alpha1/namespaces/default/controllerrevisions";

/// A namespaced CRD `<plural>.example.com` with the status subresource.
fn crd(kind: &str, plural: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

fn items(sb: &Sandbox, path: &str) -> Vec<Value> {
    get(sb, path)
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

/// Starts bosun with no modules and no global hooks: only the lambda controllers work.
fn bosun(sb: &Sandbox, work: &std::path::Path, env: &[(&str, &str)]) -> Operator {
    let hooks = work.join("global-hooks");
    std::fs::create_dir_all(&hooks).expect("hooks dir");
    std::fs::create_dir_all(work.join("modules")).expect("modules dir");
    Operator::start_with(sb, &hooks, work, env)
}

fn wait_served(sb: &Sandbox, path: &str) {
    wait_for(&format!("{path} served"), WAIT, || sb.get(path).0 == 200);
}

fn replica_path(i: usize) -> String {
    format!("{REPLICAS}/web-{i}")
}

/// `spec.version` of web-0, web-1, web-2 (`-` for a missing one).
fn versions(sb: &Sandbox) -> Vec<String> {
    (0..3)
        .map(|i| {
            get(sb, &replica_path(i)).map_or("-".to_string(), |r| {
                r["spec"]["version"].as_str().unwrap_or("?").to_string()
            })
        })
        .collect()
}

/// The parent's `Updated` condition (Null when absent).
fn updated(sb: &Sandbox) -> Value {
    let parent = get(sb, PARENT).unwrap_or_default();
    parent["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Updated").cloned())
        .unwrap_or(Value::Null)
}

/// The ControllerRevisions of the `rollouts` parents.
fn revisions(sb: &Sandbox) -> Vec<Value> {
    items(sb, REVISIONS)
        .into_iter()
        .filter(|r| r["metadata"]["labels"]["metacontroller.k8s.io/resource"] == "rollouts")
        .collect()
}

/// The child keys a revision claims.
fn claimed_names(revision: &Value) -> Vec<String> {
    let mut names: Vec<String> = revision["children"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["names"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Plays the kubelet for replica `i`: once it carries `version`, reports its current
/// generation as observed with `Ready` = `ready`. Retries on conflicts.
fn report(sb: &Sandbox, i: usize, version: &str, ready: bool) {
    let path = replica_path(i);
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(
            Instant::now() < deadline,
            "could not report the status of web-{i}"
        );
        let Some(mut replica) = get(sb, &path) else {
            std::thread::sleep(Duration::from_millis(25));
            continue;
        };
        if replica["spec"]["version"] != version {
            std::thread::sleep(Duration::from_millis(25));
            continue;
        }
        replica["status"] = json!({
            "observedGeneration": replica["metadata"]["generation"],
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
        });
        let (code, answer) = sb.put(&format!("{path}/status"), &replica);
        match code {
            200 => return,
            409 => continue,
            _ => panic!("PUT status of web-{i}: {code} {answer}"),
        }
    }
}

/// Sets the parent's `spec.version`, retrying on conflicts with status writes.
fn set_version(sb: &Sandbox, version: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "could not update the parent");
        let mut parent = get(sb, PARENT).expect("parent");
        parent["spec"]["version"] = json!(version);
        let (code, answer) = sb.put(PARENT, &parent);
        match code {
            200 => return,
            409 => continue,
            _ => panic!("PUT parent: {code} {answer}"),
        }
    }
}

/// A sandbox, bosun and the hook, with the controller (children updated by `method`) and
/// a parent at `v1` rolled out and every replica Ready.
struct Setup {
    // Field order is drop order: bosun stops before its sandbox and work folder go.
    op: Operator,
    hooks: Hooks,
    sb: Sandbox,
    _work: tempfile::TempDir,
}

fn setup(method: &str) -> Setup {
    setup_with(method, false)
}

/// [`setup`], with a finalize hook when `finalize` (no children; finalized once none is
/// left).
fn setup_with(method: &str, finalize: bool) -> Setup {
    setup_in(method, finalize, &[])
}

/// [`setup_with`], bosun started with `env` as well.
fn setup_in(method: &str, finalize: bool, env: &[(&str, &str)]) -> Setup {
    let sb = Sandbox::start();
    let work = workdir();
    // Three replicas carrying the parent's version; the status echoes the version.
    let hooks = Hooks::serve(|path, req| {
        if path == "/finalize" {
            let left = req["children"]["Replica.example.com/v1"]
                .as_object()
                .map_or(0, |m| m.len());
            return (
                200,
                json!({"status": {"finalizing": true}, "children": [], "finalized": left == 0}),
            );
        }
        let parent = &req["parent"];
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let version = parent["spec"]["version"].clone();
        let children: Vec<Value> = (0..3)
            .map(|i| {
                json!({
                    "apiVersion": "example.com/v1", "kind": "Replica",
                    "metadata": {"name": format!("{name}-{i}")},
                    "spec": {"version": version}
                })
            })
            .collect();
        (
            200,
            json!({"status": {"version": version}, "children": children}),
        )
    });
    for (kind, plural) in [("Rollout", "rollouts"), ("Replica", "replicas")] {
        post_ok(
            &sb,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd(kind, plural),
        );
        wait_served(&sb, &format!("/apis/example.com/v1/{plural}"));
    }
    let mut hook_urls = json!({"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}});
    if finalize {
        hook_urls["finalize"] = json!({"webhook": {"url": format!("{}/finalize", hooks.url)}});
    }
    let op = bosun(&sb, work.path(), env);
    wait_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "rollouts"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "rollouts"},
                "childResources": [{
                    "apiVersion": "example.com/v1", "resource": "replicas",
                    "updateStrategy": {
                        "method": method,
                        "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}
                    }
                }],
                "hooks": hook_urls
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/rollouts",
        &json!({"apiVersion": "example.com/v1", "kind": "Rollout", "metadata": {"name": "web"},
                "spec": {"version": "v1"}}),
    );
    op.wait("three v1 replicas, on the latest revision", WAIT, || {
        versions(&sb) == ["v1", "v1", "v1"]
            && updated(&sb)["reason"] == "OnLatestRevision"
            && revisions(&sb).len() == 1
    });
    let first = revisions(&sb).remove(0);
    assert_eq!(
        claimed_names(&first),
        ["web-0", "web-1", "web-2"],
        "{first}"
    );
    for i in 0..3 {
        report(&sb, i, "v1", true);
    }
    Setup {
        op,
        hooks,
        sb,
        _work: work,
    }
}

/// Waits until the rollout waits on replica `i`, which already carries `v2`.
fn wait_waiting_on(s: &Setup, i: usize) {
    let needle = format!("default/web-{i} ");
    s.op.wait(
        &format!("the rollout waiting on web-{i} at v2"),
        WAIT,
        || {
            let u = updated(&s.sb);
            u["status"] == "False"
                && u["reason"] == "RolloutWaiting"
                && u["message"].as_str().is_some_and(|m| m.contains(&needle))
                && get(&s.sb, &replica_path(i)).is_some_and(|r| r["spec"]["version"] == "v2")
        },
    );
}

fn uids(sb: &Sandbox) -> Vec<Value> {
    (0..3)
        .map(|i| get(sb, &replica_path(i)).expect("replica")["metadata"]["uid"].clone())
        .collect()
}

/// How the replicas' objects relate to those before the rollout.
#[derive(Clone, Copy, PartialEq)]
enum Objects {
    /// Updated in place: the same objects.
    Same,
    /// Recreated: every one a new object.
    Replaced,
}

/// The end state: every replica at v2 (no extras, each controlled by the parent alone),
/// on the latest revision, the old revision pruned.
fn assert_rolled_out(s: &Setup, original_uids: &[Value], objects: Objects) {
    let sb = &s.sb;
    s.op.wait("OnLatestRevision with every replica at v2", WAIT, || {
        updated(sb)["reason"] == "OnLatestRevision" && versions(sb) == ["v2", "v2", "v2"]
    });
    let u = updated(sb);
    assert_eq!(u["status"], "True", "{u}");
    s.op.wait("the old ControllerRevision pruned", WAIT, || {
        revisions(sb).len() == 1
    });
    let latest = revisions(sb).remove(0);
    let name = latest["metadata"]["name"].as_str().expect("name");
    assert!(name.starts_with("rollouts.example.com-"), "{name}");
    assert_eq!(
        u["message"],
        format!("latest ControllerRevision: {name}"),
        "{u}"
    );
    assert_eq!(latest["parentPatch"], json!({"spec": {"version": "v2"}}));
    assert_eq!(
        claimed_names(&latest),
        ["web-0", "web-1", "web-2"],
        "{latest}"
    );
    let parent = get(sb, PARENT).expect("parent");
    let parent_uid = &parent["metadata"]["uid"];
    assert_eq!(
        latest["metadata"]["ownerReferences"][0]["uid"], *parent_uid,
        "{latest}"
    );
    assert_eq!(parent["status"]["version"], "v2");
    assert_eq!(
        parent["status"]["observedGeneration"],
        parent["metadata"]["generation"]
    );
    // No duplicates, nothing recreated, nothing orphaned.
    let all = items(sb, REPLICAS);
    let mut names: Vec<&str> = all
        .iter()
        .filter_map(|r| r["metadata"]["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    let now = uids(sb);
    match objects {
        Objects::Same => assert_eq!(now, original_uids, "replicas were recreated"),
        Objects::Replaced => {
            for (i, (new, old)) in now.iter().zip(original_uids).enumerate() {
                assert_ne!(new, old, "web-{i} was not recreated");
            }
        }
    }
    for r in &all {
        let refs = r["metadata"]["ownerReferences"].as_array().expect("owners");
        assert_eq!(refs.len(), 1, "{r}");
        assert_eq!(refs[0]["uid"], *parent_uid, "{r}");
        assert_eq!(refs[0]["controller"], true, "{r}");
    }
}

#[test]
fn rolling_in_place_moves_one_ready_child_per_sync_and_prunes_the_old_revision() {
    let s = setup("RollingInPlace");
    let sb = &s.sb;
    let before = uids(sb);
    set_version(sb, "v2");

    // web-0 moves at once (nothing on the new revision to wait for), then the rollout
    // waits until it reports the new generation.
    wait_waiting_on(&s, 0);
    assert_eq!(versions(sb), ["v2", "v1", "v1"]);
    assert_eq!(revisions(sb).len(), 2, "the old and the new revision");
    let u = updated(sb);
    assert!(
        u["message"]
            .as_str()
            .is_some_and(|m| m.contains("hasn't observed latest spec")),
        "{u}"
    );
    // Observed but not Ready: still waiting, now on the status check.
    report(sb, 0, "v2", false);
    s.op.wait(
        "the rollout waiting on web-0's Ready condition",
        WAIT,
        || {
            updated(sb)["message"]
                .as_str()
                .is_some_and(|m| m.contains("default/web-0 failed status check"))
        },
    );
    assert_eq!(versions(sb), ["v2", "v1", "v1"]);

    // Each Ready report lets exactly the next replica move.
    report(sb, 0, "v2", true);
    wait_waiting_on(&s, 1);
    assert_eq!(versions(sb), ["v2", "v2", "v1"]);
    // web-2 moves once web-1 is Ready; that is the last child to move, so the rollout is
    // on the latest revision at once (as metacontroller: `OnLatestRevision` says where
    // the children are, not that the last one is Ready) and the old revision, claiming
    // nothing any more, is pruned.
    report(sb, 1, "v2", true);
    assert_rolled_out(&s, &before, Objects::Same);

    // A revision orphaned by someone else is adopted again.
    let parent_uid = get(sb, PARENT).expect("parent")["metadata"]["uid"].clone();
    let mut latest = revisions(sb).remove(0);
    let name = latest["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    latest["metadata"]["ownerReferences"] = json!([]);
    let (code, answer) = sb.put(&format!("{REVISIONS}/{name}"), &latest);
    assert_eq!(code, 200, "{answer}");
    s.op.wait("the orphaned revision adopted again", WAIT, || {
        get(sb, &format!("{REVISIONS}/{name}")).is_some_and(|r| {
            r["metadata"]["ownerReferences"][0]["uid"] == parent_uid
                && r["metadata"]["ownerReferences"][0]["controller"] == true
        })
    });

    // What the hook saw: a virtual parent at v1 (one call per revision) during the
    // rollout, and the parent's status passing through RolloutProgressing for each
    // replica in turn, one per sync.
    let calls = s.hooks.calls("/sync");
    assert!(
        calls.iter().any(|c| c["parent"]["spec"]["version"] == "v1"
            && c["parent"]["metadata"]["generation"] == 2),
        "no hook call for the old revision's virtual parent"
    );
    let mut progressing: Vec<String> = Vec::new();
    for c in &calls {
        let conditions = c["parent"]["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for cond in conditions {
            if cond["type"] == "Updated" && cond["reason"] == "RolloutProgressing" {
                let m = cond["message"].as_str().unwrap_or_default().to_string();
                if progressing.last() != Some(&m) {
                    progressing.push(m);
                }
            }
        }
    }
    assert_eq!(
        progressing,
        [
            "updating Replica default/web-0",
            "updating Replica default/web-1",
            "updating Replica default/web-2"
        ]
    );
}

#[test]
fn a_rollout_survives_kill_9_and_ends_on_the_latest_revision_without_duplicates() {
    let mut s = setup("RollingInPlace");
    let before = uids(&s.sb);
    set_version(&s.sb, "v2");

    // Killed as soon as the new revision is recorded: the child writes of that step may
    // or may not have happened.
    wait_for("the new ControllerRevision", WAIT, || {
        revisions(&s.sb).len() == 2
    });
    s.op.kill9();
    s.op.spawn();
    wait_waiting_on(&s, 0);
    report(&s.sb, 0, "v2", true);
    wait_waiting_on(&s, 1);
    assert_eq!(versions(&s.sb), ["v2", "v2", "v1"]);

    // Killed while waiting; web-1 becomes Ready while bosun is down.
    s.op.kill9();
    report(&s.sb, 1, "v2", true);
    s.op.spawn();
    assert_rolled_out(&s, &before, Objects::Same);
}

#[test]
fn rolling_methods_are_refused_for_a_cluster_scoped_parent_naming_the_field() {
    let sb = Sandbox::start();
    let work = workdir();
    let mut parent_crd = crd("Fleet", "fleets");
    parent_crd["spec"]["scope"] = json!("Cluster");
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &parent_crd,
    );
    wait_served(&sb, "/apis/example.com/v1/fleets");
    let op = bosun(&sb, work.path(), &[]);
    wait_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "fleets"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "fleets"},
                "childResources": [
                    {"apiVersion": "v1", "resource": "configmaps"},
                    {"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "RollingRecreate"}}
                ],
                "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:9/sync"}}}
            }
        }),
    );
    op.wait("a SyncError event naming the field", WAIT, || {
        let (_, list) = sb.get(&format!("/api/v1/namespaces/{NS}/events"));
        list["items"].as_array().into_iter().flatten().any(|e| {
            e["involvedObject"]["name"] == "fleets"
                && e["reason"] == "SyncError"
                && e["message"].as_str().is_some_and(|m| {
                    m.contains("spec.childResources[1].updateStrategy.method: RollingRecreate")
                        && m.contains("cluster-scoped")
                })
        })
    });
}

#[test]
fn rolling_recreate_replaces_one_ready_child_per_sync() {
    let s = setup("RollingRecreate");
    let sb = &s.sb;
    let before = uids(sb);
    set_version(sb, "v2");
    // web-0 is deleted and created again at v2; the rollout waits for it to be Ready.
    wait_waiting_on(&s, 0);
    assert_eq!(versions(sb), ["v2", "v1", "v1"]);
    let now = uids(sb);
    assert_ne!(now[0], before[0], "web-0 was updated, not recreated");
    assert_eq!(now[1..], before[1..]);
    report(sb, 0, "v2", true);
    wait_waiting_on(&s, 1);
    assert_eq!(versions(sb), ["v2", "v2", "v1"]);
    assert_eq!(uids(sb)[2], before[2]);
    report(sb, 1, "v2", true);
    assert_rolled_out(&s, &before, Objects::Replaced);
}

/// The rolling update goes on past the first child when children are written with
/// server-side apply, as with the default 3-way merge: whether a child is updated is read
/// the same way in both modes.
#[test]
fn rolling_in_place_with_server_side_apply_moves_every_child() {
    let s = setup_in(
        "RollingInPlace",
        false,
        &[("BOSUN_APPLY_STRATEGY", "server-side-apply")],
    );
    let sb = &s.sb;
    let before = uids(sb);
    set_version(sb, "v2");
    wait_waiting_on(&s, 0);
    assert_eq!(versions(sb), ["v2", "v1", "v1"]);
    report(sb, 0, "v2", true);
    wait_waiting_on(&s, 1);
    assert_eq!(versions(sb), ["v2", "v2", "v1"]);
    report(sb, 1, "v2", true);
    assert_rolled_out(&s, &before, Objects::Same);
}

#[test]
fn a_rolling_parent_is_finalized_through_every_revision_and_leaves_nothing_behind() {
    let s = setup_with("RollingInPlace", true);
    let sb = &s.sb;
    let finalizer = "metacontroller.io/compositecontroller-rollouts";
    assert!(
        get(sb, PARENT).expect("parent")["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == finalizer)),
        "no finalizer on the parent"
    );
    // Deleted mid-rollout: an old revision still claims web-1 and web-2.
    set_version(sb, "v2");
    wait_waiting_on(&s, 0);
    assert_eq!(revisions(sb).len(), 2);
    let (code, answer) = sb.request("DELETE", PARENT, "", "");
    assert_eq!(code, 200, "{answer}");
    s.op.wait("the parent finalized and gone", WAIT, || {
        get(sb, PARENT).is_none()
    });
    s.op.wait("no replica and no revision left", WAIT, || {
        items(sb, REPLICAS).is_empty() && revisions(sb).is_empty()
    });
    let finalize = s.hooks.calls("/finalize");
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
