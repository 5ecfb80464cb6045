//! The lambda controllers in-process when the world misbehaves: webhooks that answer
//! garbage, fail, refuse connections or hang past their timeout, and an API server that
//! refuses writes (errors, conflicts, RBAC, size) or drops a watch. Each scenario checks
//! what a metacontroller user sees: a `SyncError` Event on the parent naming what failed,
//! every failure journaled and counted, the other parents converging meanwhile, and the
//! parent converging once the fault passes, with nothing done twice.
//!
//! Run: `cargo test -p bosun-lambda --test faults`.

mod world;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bosun_lambda::events::LambdaEvent;
use bosun_lambda::fakes::{Fault, HookFault, Verb};
use bosun_lambda::ports::HookError;
use bosun_lambda::ports::HookType::Sync;
use serde_json::{Value, json};
use world::{Crd, World, str_of};

/// A world with Probe parents and a CompositeController `probes` whose sync hook asks
/// for one ConfigMap `<parent>-ok` labelled as the parent's selector wants.
async fn probes() -> World {
    let w = World::start(&[Crd("Probe", "probes", true)]).await;
    w.answer("probes", Sync, |req| {
        let name = str_of(&req["parent"]["metadata"]["name"]);
        let n = req["parent"]["spec"]["n"].clone();
        Ok(json!({"status": {"n": n},
                  "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": format!("{name}-ok"), "labels": {"app": "fine"}},
                                "data": {"n": n.to_string()}}]}))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "probes"},
        "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": "probes"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/probes"}}}
        }
    }));
    w
}

fn probe(name: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Probe", "metadata": {"name": name},
           "spec": {"n": 1, "selector": {"matchLabels": {"app": "fine"}}}})
}

/// The messages of the `SyncError` Warnings on Probe `default/<name>`.
fn sync_errors(w: &World, name: &str) -> Vec<String> {
    w.events_on(&format!("Probe default/{name}"))
        .into_iter()
        .filter(|e| e.note.type_ == "Warning" && e.note.reason == "SyncError")
        .map(|e| e.note.message)
        .collect()
}

/// The journaled failures of `default/<name>`: (failures in a row, retry delay in ms).
fn failures(w: &World, name: &str) -> Vec<(u32, u64)> {
    let key = format!("default/{name}");
    w.journal
        .events()
        .iter()
        .filter_map(|e| match e {
            LambdaEvent::SyncFailed {
                key: k,
                failures,
                retry_in_ms,
                ..
            } if *k == key => Some((*failures, *retry_in_ms)),
            _ => None,
        })
        .collect()
}

fn child(w: &World, parent: &str) -> Option<Value> {
    w.get("configmaps", "default", &format!("{parent}-ok"))
}

/// Bad answers are `SyncError` Events on their parent naming what was wrong (metacontroller's
/// messages), retried; the other parents converge meanwhile, and nothing of a refused
/// answer is applied.
#[tokio::test]
async fn bad_hook_answers_are_events_on_the_parent_and_the_others_converge() {
    let w = probes().await;
    w.answer("probes", Sync, |req| {
        let name = str_of(&req["parent"]["metadata"]["name"]);
        Ok(match name {
            "server-error" => {
                return Err(HookError::Status {
                    hook: Sync,
                    url: "http://hooks.test/probes".into(),
                    code: 500,
                    body: "internal trouble".into(),
                });
            }
            "no-kind" => json!({"children": [{"apiVersion": "v1", "metadata": {"name": "x"}}]}),
            "bad-labels" => json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": "bl", "labels": {"app": "other"}}}]}),
            _ => json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"name": format!("{name}-ok"), "labels": {"app": "fine"}}}]}),
        })
    });
    // The first answer to `not-json` is garbage (the next ones are good).
    w.hooks.fail(
        "probes",
        Sync,
        1,
        HookFault::Garbage("<html>oops</html>".into()),
    );
    w.put("probes", probe("not-json"));
    w.until("the garbage met", || w.hooks.faults_left() == 0)
        .await;
    for name in ["server-error", "no-kind", "bad-labels", "good"] {
        w.put("probes", probe(name));
    }
    for (name, says) in [
        ("not-json", "not valid JSON"),
        ("no-kind", "Object 'Kind' is missing"),
        ("server-error", "unsupported status code: 500"),
        ("bad-labels", "don't match parent selector"),
    ] {
        w.until(
            &format!("a SyncError event on {name} naming {says:?}"),
            || sync_errors(&w, name).iter().any(|m| m.contains(says)),
        )
        .await;
    }
    // Retried, each failure journaled and counted, slower each time.
    w.until("three failures of server-error journaled", || {
        failures(&w, "server-error").len() >= 3
    })
    .await;
    let counted = failures(&w, "server-error");
    assert!(
        counted
            .windows(2)
            .all(|p| p[1].0 == p[0].0 + 1 && p[1].1 > p[0].1),
        "{counted:?}"
    );
    // The good parent converged meanwhile; the refused answer made nothing.
    w.until("the good parent's child", || child(&w, "good").is_some())
        .await;
    assert!(w.get("configmaps", "default", "bl").is_none());
    assert!(w.get("configmaps", "default", "x").is_none());
}

/// A webhook nobody listens on, then one that answers: `SyncError` Events naming the
/// connection failure, then the child, made once.
#[tokio::test]
async fn an_unreachable_webhook_is_retried_until_it_answers() {
    let w = probes().await;
    w.hooks.fail("probes", Sync, 3, HookFault::Unreachable);
    w.put("probes", probe("p"));
    w.until("the child once the webhook answers", || {
        child(&w, "p").is_some()
    })
    .await;
    assert!(
        sync_errors(&w, "p")
            .iter()
            .any(|m| m.contains("http error") && m.contains("http://hooks.test/")),
        "{:?}",
        sync_errors(&w, "p")
    );
    assert_eq!(
        failures(&w, "p").iter().map(|f| f.0).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(w.created("configmaps", "default", "p-ok"), 1);
    // The unreachable calls never reached the webhook; the answered one did.
    assert!(!w.requests("probes", Sync).is_empty());
}

/// A webhook that answers after its timeout fails at the timeout (10 s when the controller
/// names none, on the runtime's clock), an Event says so, and the next call converges.
#[tokio::test(start_paused = true)]
async fn a_webhook_slower_than_its_timeout_fails_at_the_timeout() {
    let w = probes().await;
    w.hooks
        .fail("probes", Sync, 1, HookFault::Slow(Duration::from_secs(60)));
    let start = tokio::time::Instant::now();
    w.put("probes", probe("p"));
    w.until("a SyncError event on the slow call", || {
        !sync_errors(&w, "p").is_empty()
    })
    .await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(11),
        "the call failed after {waited:?}"
    );
    w.until("the child after the retry", || child(&w, "p").is_some())
        .await;
}

/// Creates refused by the API server (a 500, then a 413): the parent's Event names the
/// error, the create is tried again, and the child is made once.
#[tokio::test]
async fn a_refused_child_create_is_an_event_and_is_tried_again() {
    let w = probes().await;
    let configmaps = w.resource("configmaps").clone();
    w.cluster
        .refuse(Verb::Create, &configmaps, 2, Fault::ServerError);
    w.cluster
        .refuse(Verb::Create, &configmaps, 1, Fault::TooLarge);
    w.put("probes", probe("p"));
    w.until("the child once the API server takes it", || {
        child(&w, "p").is_some()
    })
    .await;
    let errors = sync_errors(&w, "p");
    assert!(
        errors
            .iter()
            .any(|m| m.contains("etcdserver: leader changed"))
            && errors
                .iter()
                .any(|m| m.contains("too large for the API server")),
        "{errors:?}"
    );
    assert_eq!(w.cluster.faults_left(), 0);
    assert_eq!(failures(&w, "p").len(), 3);
    assert_eq!(w.created("configmaps", "default", "p-ok"), 1);
    // The status is written once the child is made.
    w.until("the status", || {
        w.get("probes", "default", "p")
            .is_some_and(|p| p["status"]["n"] == 1)
    })
    .await;
}

/// RBAC refuses the update of a child: the Event names the verb and the resource, and the
/// update is tried again until it goes through (the child updated, not recreated).
#[tokio::test]
async fn a_forbidden_child_update_names_verb_and_resource_and_is_tried_again() {
    let w = probes().await;
    w.put("probes", probe("p"));
    w.until("the child", || {
        child(&w, "p").is_some_and(|c| c["data"]["n"] == "1")
    })
    .await;
    let configmaps = w.resource("configmaps").clone();
    w.cluster
        .refuse(Verb::Replace, &configmaps, 2, Fault::Forbidden);
    w.edit("probes", "default", "p", |p| p["spec"]["n"] = json!(2));
    w.until("a SyncError naming the verb and the resource", || {
        sync_errors(&w, "p")
            .iter()
            .any(|m| m.contains("cannot update resource \"configmaps\""))
    })
    .await;
    w.until("the child updated once allowed", || {
        child(&w, "p").is_some_and(|c| c["data"]["n"] == "2")
    })
    .await;
    assert_eq!(w.cluster.faults_left(), 0);
    assert_eq!(w.created("configmaps", "default", "p-ok"), 1, "recreated");
}

/// Conflicts on the status write (another writer got there first): read again and
/// written, the status the hook answered in the end.
#[tokio::test]
async fn a_status_write_conflict_is_read_again_and_written() {
    let w = probes().await;
    let probes = w.resource("probes").clone();
    w.cluster
        .refuse(Verb::ReplaceStatus, &probes, 2, Fault::Conflict);
    w.put("probes", probe("p"));
    w.until("the status in the end", || {
        w.get("probes", "default", "p")
            .is_some_and(|p| p["status"]["n"] == 1)
    })
    .await;
    assert_eq!(w.cluster.faults_left(), 0, "the status write was not tried");
    assert!(
        w.cluster.calls(Verb::ReplaceStatus, &probes) >= 3,
        "written without the conflicts met"
    );
}

/// A dropped watch of the parents misses a change; the informer's relist when it comes
/// back tells it, and the child follows.
#[tokio::test]
async fn a_change_missed_by_an_interrupted_watch_is_caught_up_by_the_relist() {
    let w = probes().await;
    w.put("probes", probe("p"));
    w.until("the child", || {
        child(&w, "p").is_some_and(|c| c["data"]["n"] == "1")
    })
    .await;
    let probes = w.resource("probes").clone();
    w.cluster.interrupt_watches(&probes);
    let syncs = w.requests("probes", Sync).len();
    w.edit("probes", "default", "p", |p| p["spec"]["n"] = json!(2));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        w.requests("probes", Sync).len(),
        syncs,
        "a sync without the watch"
    );
    w.cluster.resume_watches(&probes);
    w.until("the child follows the change the relist told", || {
        child(&w, "p").is_some_and(|c| c["data"]["n"] == "2")
    })
    .await;
}

/// The parents' informer cannot list when a controller starts: each try is a `Starting`
/// Event, and a `StartError` Warning naming why, journaled as the controller refused; the
/// start is tried again until the list succeeds, and the controller then runs, `Started`
/// once.
#[tokio::test]
async fn a_controller_whose_parents_cannot_be_listed_starts_once_they_can() {
    let w = World::start(&[Crd("Probe", "probes", true)]).await;
    let probes = w.resource("probes").clone();
    w.cluster.refuse(Verb::List, &probes, 2, Fault::Unavailable);
    w.put("probes", probe("p"));
    w.answer("probes", Sync, |req| {
        let name = str_of(&req["parent"]["metadata"]["name"]);
        Ok(json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": format!("{name}-ok"), "labels": {"app": "fine"}}}]}))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "probes"},
        "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": "probes"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/probes"}}}
        }
    }));
    w.until("the child once the parents can be listed", || {
        child(&w, "p").is_some()
    })
    .await;
    assert_eq!(w.cluster.faults_left(), 0, "the list was not tried again");
    let reasons: Vec<String> = w
        .events_on("CompositeController /probes")
        .into_iter()
        .map(|e| e.note.reason)
        .collect();
    assert_eq!(
        reasons,
        [
            "Starting",
            "StartError",
            "Starting",
            "StartError",
            "Starting",
            "Started"
        ]
    );
    let warning = w
        .events_on("CompositeController /probes")
        .into_iter()
        .find(|e| e.note.reason == "StartError")
        .expect("a StartError");
    assert_eq!(warning.note.type_, "Warning");
    assert!(
        warning
            .note
            .message
            .starts_with("Cannot start controller: "),
        "{}",
        warning.note.message
    );
    let refused = w
        .journal
        .events()
        .iter()
        .filter(|e| matches!(e, LambdaEvent::ControllerRefused { .. }))
        .count();
    assert_eq!(refused, 2);
    let started = w
        .journal
        .events()
        .iter()
        .filter(|e| matches!(e, LambdaEvent::ControllerStarted { .. }))
        .count();
    assert_eq!(started, 1);
}

/// Another client writes a child while a sync runs: the controller's update, made from
/// the child as it read it, meets a conflict; the other writer's change tells the
/// controller again, and the child converges in place with both changes, made once.
#[tokio::test]
async fn a_child_written_by_another_client_during_a_sync_converges_after_the_conflict() {
    let w = probes().await;
    w.put("probes", probe("p"));
    w.until("the child", || {
        child(&w, "p").is_some_and(|c| c["data"]["n"] == "1")
    })
    .await;
    let configmaps = w.resource("configmaps").clone();
    let uid = child(&w, "p").expect("child")["metadata"]["uid"].clone();
    let replaced = w.cluster.calls(Verb::Replace, &configmaps);
    // The sync of n = 2: while the hook answers, someone annotates the child.
    let (cluster, resource) = (Arc::clone(&w.cluster), configmaps.clone());
    let meddled = Arc::new(AtomicBool::new(false));
    w.answer("probes", Sync, move |req| {
        let n = req["parent"]["spec"]["n"].clone();
        if n == 2 && !meddled.swap(true, Ordering::SeqCst) {
            let mut c = (*cluster.object(&resource, "default", "p-ok").expect("child")).clone();
            c["metadata"]["annotations"]["meddler"] = json!("was here");
            cluster.put(&resource, c);
        }
        Ok(
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "p-ok", "labels": {"app": "fine"}},
                                "data": {"n": n.to_string()}}]}),
        )
    });
    w.edit("probes", "default", "p", |p| p["spec"]["n"] = json!(2));
    w.until("the child updated, the other writer's change kept", || {
        child(&w, "p").is_some_and(|c| {
            c["data"]["n"] == "2" && c["metadata"]["annotations"]["meddler"] == "was here"
        })
    })
    .await;
    assert!(
        w.cluster.calls(Verb::Replace, &configmaps) >= replaced + 2,
        "no update met the conflict"
    );
    assert_eq!(child(&w, "p").expect("child")["metadata"]["uid"], uid);
    assert_eq!(w.created("configmaps", "default", "p-ok"), 1);
    assert_eq!(w.list("configmaps").len(), 1);
}

/// RBAC refuses the create of a child: the parent's Event names the child, the verb and
/// the resource; once allowed, the child is made once.
#[tokio::test]
async fn a_forbidden_child_create_names_the_child_verb_and_resource_in_the_parents_event() {
    let w = probes().await;
    let configmaps = w.resource("configmaps").clone();
    w.cluster
        .refuse(Verb::Create, &configmaps, 1, Fault::Forbidden);
    w.put("probes", probe("p"));
    w.until("the child once allowed", || child(&w, "p").is_some())
        .await;
    let errors = sync_errors(&w, "p");
    assert!(
        errors.iter().any(|m| m.contains("ConfigMap default/p-ok")
            && m.contains("cannot create resource \"configmaps\"")),
        "{errors:?}"
    );
    assert_eq!(w.created("configmaps", "default", "p-ok"), 1);
}

/// A refused delete of a child the hook no longer asks for: an Event names the delete,
/// and the delete is tried again until the child is gone.
#[tokio::test]
async fn a_refused_delete_of_an_unwanted_child_is_an_event_and_is_tried_again() {
    let w = probes().await;
    w.answer("probes", Sync, |req| {
        let name = str_of(&req["parent"]["metadata"]["name"]);
        let children = if req["parent"]["spec"]["n"] == 0 {
            json!([])
        } else {
            json!([{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{name}-ok"), "labels": {"app": "fine"}}}])
        };
        Ok(json!({"children": children}))
    });
    w.put("probes", probe("p"));
    w.until("the child", || child(&w, "p").is_some()).await;
    let configmaps = w.resource("configmaps").clone();
    w.cluster
        .refuse(Verb::Delete, &configmaps, 2, Fault::Unavailable);
    w.edit("probes", "default", "p", |p| p["spec"]["n"] = json!(0));
    w.until("the child deleted in the end", || child(&w, "p").is_none())
        .await;
    assert_eq!(w.cluster.faults_left(), 0);
    let errors = sync_errors(&w, "p");
    assert!(
        errors
            .iter()
            .any(|m| m.contains("deleting ConfigMap default/p-ok") && m.contains("503")),
        "{errors:?}"
    );
}

/// A child deleted while the watch of the children is down is not seen at once; the
/// informer's relist when the watch comes back tells it, and the child is made again.
#[tokio::test]
async fn a_child_deleted_while_the_childrens_watch_is_down_comes_back_after_the_relist() {
    let w = probes().await;
    w.put("probes", probe("p"));
    w.until("the child", || child(&w, "p").is_some()).await;
    let configmaps = w.resource("configmaps").clone();
    w.cluster.interrupt_watches(&configmaps);
    w.delete("configmaps", "default", "p-ok");
    assert!(child(&w, "p").is_none());
    w.cluster.resume_watches(&configmaps);
    w.until("the child made again", || child(&w, "p").is_some())
        .await;
    assert_eq!(w.created("configmaps", "default", "p-ok"), 2);
}

/// A webhook that hangs on one parent's call holds one worker until its timeout; the
/// other parents converge meanwhile, well before it, and the hung parent converges after.
#[tokio::test(start_paused = true)]
async fn a_webhook_hanging_on_one_parent_does_not_stall_the_others() {
    let w = probes().await;
    w.hooks
        .fail("probes", Sync, 1, HookFault::Slow(Duration::from_secs(60)));
    let start = tokio::time::Instant::now();
    w.put("probes", probe("hung"));
    w.until("the hung call in flight", || w.hooks.faults_left() == 0)
        .await;
    let others = ["a", "b", "c", "d", "e"];
    for name in others {
        w.put("probes", probe(name));
    }
    w.until("every other parent's child", || {
        others.iter().all(|n| child(&w, n).is_some())
    })
    .await;
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the others waited for the hung call: {:?}",
        start.elapsed()
    );
    assert!(child(&w, "hung").is_none());
    w.until("the hung parent's child after its timeout", || {
        child(&w, "hung").is_some()
    })
    .await;
    assert!(start.elapsed() >= Duration::from_secs(10));
    assert_eq!(sync_errors(&w, "hung").len(), 1);
}

/// One failed call of the hook: one `SyncError` Event, then the child; the syncs after
/// it add none. The journal tells it in order: the failure, then the sync that made the
/// child.
#[tokio::test]
async fn a_hook_failing_once_is_one_warning_event_and_none_after_it_converges() {
    let w = probes().await;
    w.hooks.fail(
        "probes",
        Sync,
        1,
        HookFault::Status(500, "try later".into()),
    );
    w.put("probes", probe("p"));
    w.until("the child", || child(&w, "p").is_some()).await;
    w.edit("probes", "default", "p", |p| p["spec"]["n"] = json!(2));
    w.until("the change applied", || {
        child(&w, "p").is_some_and(|c| c["data"]["n"] == "2")
    })
    .await;
    let errors = sync_errors(&w, "p");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("500"), "{errors:?}");
    let story: Vec<&str> = w
        .journal
        .events()
        .iter()
        .filter(|e| e.key() == Some("default/p"))
        .map(|e| match e {
            LambdaEvent::SyncFailed { .. } => "failed",
            LambdaEvent::Synced { created, .. } if !created.is_empty() => "created",
            _ => "synced",
        })
        .collect();
    assert_eq!(story[..2], ["failed", "created"], "{story:?}");
    assert!(!story[2..].contains(&"failed"), "{story:?}");
}

/// A child's update refused with a conflict and nothing changing afterwards (no watch
/// event will come, the parent's status is as it was): the parent is synced again soon and
/// the child is written, with no Warning (upstream retries such a write within the sync).
#[tokio::test(start_paused = true)]
async fn a_child_update_lost_to_a_conflict_is_written_by_the_next_sync_without_an_event() {
    let w = probes().await;
    // The hook's answer follows `wanted`, not the parent: a change of it reaches the
    // cluster only through a sync that something else brings.
    let wanted = Arc::new(std::sync::atomic::AtomicU64::new(1));
    let answer = Arc::clone(&wanted);
    w.answer("probes", Sync, move |_| {
        let n = answer.load(Ordering::SeqCst);
        Ok(json!({"status": {"ok": true},
                  "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "p-ok", "labels": {"app": "fine"}},
                                "data": {"n": n.to_string()}}]}))
    });
    w.put("probes", probe("p"));
    w.until("the child", || {
        child(&w, "p").is_some_and(|c| c["data"]["n"] == "1")
    })
    .await;
    let configmaps = w.resource("configmaps").clone();
    w.cluster
        .refuse(Verb::Replace, &configmaps, 1, Fault::Conflict);
    wanted.store(2, Ordering::SeqCst);
    // Someone labels the child: its event brings the sync whose update meets the conflict.
    let mut c = child(&w, "p").expect("child");
    c["metadata"]["annotations"]["seen-by"] = json!("someone");
    w.cluster.put(&configmaps, c);
    w.until("the child written after the conflict", || {
        child(&w, "p").is_some_and(|c| c["data"]["n"] == "2")
    })
    .await;
    assert_eq!(
        w.cluster.faults_met(),
        1,
        "the update did not meet the conflict"
    );
    assert!(
        sync_errors(&w, "p").is_empty(),
        "{:?}",
        sync_errors(&w, "p")
    );
    assert_eq!(w.created("configmaps", "default", "p-ok"), 1);
}
