//! A CompositeController's parents over their life, in-process: the finalizer and the
//! finalize hook's `finalized` answer, a parent deleted while its syncs fail, a status
//! someone else overwrites, and the operator restarted on the same cluster and journal.
//!
//! Run: `cargo test -p bosun-lambda --test parents`.

mod world;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bosun_lambda::events::LambdaEvent;
use bosun_lambda::ports::HookError;
use bosun_lambda::ports::HookType::{Finalize, Sync};
use serde_json::{Value, json};

use world::{Crd, World, str_of};

const FINALIZER: &str = "metacontroller.io/compositecontroller-jobs";

/// The CompositeController `jobs` over `Job` parents with ConfigMap children, its sync
/// hook and (when `finalize`) its finalize hook; `extra` spec fields merged in.
fn jobs_controller(finalize: bool, extra: Value) -> Value {
    let mut hooks = json!({"sync": {"webhook": {"url": "http://hooks.test/jobs/sync"}}});
    if finalize {
        hooks["finalize"] = json!({"webhook": {"url": "http://hooks.test/jobs/finalize"}});
    }
    let mut spec = json!({
        "generateSelector": true,
        "parentResource": {"apiVersion": "example.com/v1", "resource": "jobs"},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                            "updateStrategy": {"method": "InPlace"}}],
        "hooks": hooks
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
           "metadata": {"name": "jobs"}, "spec": spec})
}

/// A world with `Job` parents (`example.com/v1 jobs`) whose sync hook asks for one
/// ConfigMap `<parent>-cm` carrying `spec.n`, the status echoing it.
async fn jobs() -> World {
    let w = World::start(&[Crd("Job", "jobs", true)]).await;
    w.answer("jobs", Sync, answer_one_child);
    w
}

fn answer_one_child(req: &Value) -> Result<Value, HookError> {
    let parent = &req["parent"];
    let name = str_of(&parent["metadata"]["name"]);
    let n = parent["spec"]["n"].clone();
    Ok(json!({"status": {"n": n},
              "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": format!("{name}-cm")},
                            "data": {"n": n.to_string()}}]}))
}

fn job(name: &str, n: i64) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Job", "metadata": {"name": name},
           "spec": {"n": n}})
}

fn parent(w: &World, name: &str) -> Option<Value> {
    w.get("jobs", "default", name)
}

fn has_finalizer(object: &Value) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

fn cm(w: &World, name: &str) -> Option<Value> {
    w.get("configmaps", "default", name)
}

/// A finalize hook answering `finalized: false` keeps the parent (marked deleted, our
/// finalizer on it) and is called again; once it answers `finalized: true` the
/// finalizer is removed and the parent goes.
#[tokio::test(start_paused = true)]
async fn a_finalize_hook_answering_not_finalized_keeps_the_parent_and_is_called_again() {
    let w = jobs().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (counted, finalized) = (Arc::clone(&calls), Arc::clone(&done));
    w.answer("jobs", Finalize, move |_| {
        let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(json!({"status": {"finalizing": n > 0}, "children": [],
                  "finalized": finalized.load(Ordering::SeqCst)}))
    });
    w.controller(jobs_controller(true, json!({"resyncPeriodSeconds": 1})));
    w.put("jobs", job("j", 1));
    w.until("the child and our finalizer", || {
        cm(&w, "j-cm").is_some() && parent(&w, "j").is_some_and(|p| has_finalizer(&p))
    })
    .await;
    w.delete("jobs", "default", "j");
    w.until("two finalize calls answered not finalized", || {
        calls.load(Ordering::SeqCst) >= 2
    })
    .await;
    let kept = parent(&w, "j").expect("the parent kept while not finalized");
    assert!(has_finalizer(&kept), "{kept}");
    assert!(!kept["metadata"]["deletionTimestamp"].is_null());
    done.store(true, Ordering::SeqCst);
    w.until("the parent gone once finalized", || {
        parent(&w, "j").is_none()
    })
    .await;
    assert!(
        cm(&w, "j-cm").is_none(),
        "the finalize answer emptied the children"
    );
    assert!(
        w.journal.events().iter().any(
            |e| matches!(e, LambdaEvent::Synced { hook, finalized: true, .. } if hook == "finalize")
        ),
        "{:#?}",
        w.journal.events()
    );
}

/// A parent whose sync hook keeps failing still gets our finalizer, and once deleted is
/// finalized through the finalize hook (not the failing sync) and goes.
#[tokio::test]
async fn a_parent_deleted_while_its_sync_keeps_failing_is_finalized_and_goes() {
    let w = jobs().await;
    w.answer("jobs", Sync, |_| {
        Err(HookError::Status {
            hook: Sync,
            url: "http://hooks.test/jobs/sync".into(),
            code: 500,
            body: "broken".into(),
        })
    });
    w.answer("jobs", Finalize, |_| {
        Ok(json!({"children": [], "finalized": true}))
    });
    w.controller(jobs_controller(true, json!({})));
    w.put("jobs", job("j", 1));
    w.until("a failed sync with our finalizer on the parent", || {
        parent(&w, "j").is_some_and(|p| has_finalizer(&p))
            && w.events_on("Job default/j")
                .iter()
                .any(|e| e.note.reason == "SyncError" && e.note.message.contains("broken"))
    })
    .await;
    w.delete("jobs", "default", "j");
    w.until("the parent gone", || parent(&w, "j").is_none())
        .await;
    let finalize = w.requests("jobs", Finalize);
    assert!(!finalize.is_empty(), "the finalize hook was not called");
    assert!(finalize.iter().all(|r| r["finalizing"] == true));
}

/// The finalize hook taken off the controller: the finalizer it had put on its parents
/// is removed, so that deleting one no longer waits for a hook nobody answers.
#[tokio::test]
async fn a_controller_without_its_finalize_hook_takes_its_finalizer_off_the_parents() {
    let w = jobs().await;
    w.answer("jobs", Finalize, |_| {
        Ok(json!({"children": [], "finalized": true}))
    });
    w.controller(jobs_controller(true, json!({})));
    w.put("jobs", job("j", 1));
    w.until("our finalizer on the parent", || {
        parent(&w, "j").is_some_and(|p| has_finalizer(&p))
    })
    .await;
    w.controller(jobs_controller(false, json!({})));
    w.until("the finalizer removed", || {
        parent(&w, "j").is_some_and(|p| !has_finalizer(&p))
    })
    .await;
    let finalize_calls = w.requests("jobs", Finalize).len();
    w.delete("jobs", "default", "j");
    w.until("the parent gone at once", || parent(&w, "j").is_none())
        .await;
    assert_eq!(w.requests("jobs", Finalize).len(), finalize_calls);
}

/// Another client overwrites the parent's status: the controller syncs again and writes
/// the hook's status back, `observedGeneration` with it.
#[tokio::test]
async fn a_status_overwritten_by_another_client_is_written_back() {
    let w = jobs().await;
    w.controller(jobs_controller(false, json!({})));
    w.put("jobs", job("j", 7));
    w.until("the status", || {
        parent(&w, "j").is_some_and(|p| p["status"]["n"] == 7)
    })
    .await;
    w.edit("jobs", "default", "j", |p| {
        p["status"] = json!({"n": "tampered"})
    });
    w.until("the status written back", || {
        parent(&w, "j").is_some_and(|p| {
            p["status"]["n"] == 7
                && p["status"]["observedGeneration"] == p["metadata"]["generation"]
        })
    })
    .await;
    assert_eq!(w.created("configmaps", "default", "j-cm"), 1);
}

/// The operator restarted on the same cluster and journal: the controllers start again
/// and sync every parent, and no child is created again or twice.
#[tokio::test]
async fn a_restarted_operator_neither_recreates_nor_duplicates_children() {
    let mut w = jobs().await;
    w.controller(jobs_controller(false, json!({})));
    for (name, n) in [("a", 1), ("b", 2), ("c", 3)] {
        w.put("jobs", job(name, n));
    }
    let converged = |w: &World| {
        ["a", "b", "c"].iter().all(|name| {
            cm(w, &format!("{name}-cm")).is_some()
                && parent(w, name).is_some_and(|p| !p["status"]["n"].is_null())
        })
    };
    w.until("every child and status", || converged(&w)).await;
    let uids: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|n| cm(&w, &format!("{n}-cm")).expect("child")["metadata"]["uid"].clone())
        .collect();
    let before = w.requests("jobs", Sync).len();
    let journaled = w.journal.events().len();
    w.restart(|_| {}).await;
    w.until("every parent synced by the new controller", || {
        let seen: Vec<String> = w.requests("jobs", Sync)[before..]
            .iter()
            .map(|r| str_of(&r["parent"]["metadata"]["name"]).to_string())
            .collect();
        ["a", "b", "c"].iter().all(|n| seen.iter().any(|s| s == n))
    })
    .await;
    let after: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|n| cm(&w, &format!("{n}-cm")).expect("child")["metadata"]["uid"].clone())
        .collect();
    assert_eq!(after, uids, "a child was recreated");
    for name in ["a", "b", "c"] {
        assert_eq!(w.created("configmaps", "default", &format!("{name}-cm")), 1);
    }
    assert_eq!(w.list("configmaps").len(), 3);
    let since: Vec<String> = w.journal.events()[journaled..]
        .iter()
        .map(LambdaEvent::line)
        .collect();
    assert!(
        since
            .iter()
            .any(|l| l.starts_with("CompositeController jobs started")),
        "{since:#?}"
    );
    assert!(
        !w.journal.events()[journaled..]
            .iter()
            .any(|e| matches!(e, LambdaEvent::Synced { created, .. } if !created.is_empty())),
        "{since:#?}"
    );
}

/// What changed while the operator was down (a new parent, a deleted child, a changed
/// parent) is synced once it is back.
#[tokio::test]
async fn changes_made_while_the_operator_was_down_are_synced_after_the_restart() {
    let mut w = jobs().await;
    w.controller(jobs_controller(false, json!({})));
    w.put("jobs", job("a", 1));
    w.put("jobs", job("b", 1));
    w.until("the children", || {
        cm(&w, "a-cm").is_some() && cm(&w, "b-cm").is_some()
    })
    .await;
    w.restart(|w| {
        w.put("jobs", job("c", 1));
        w.delete("configmaps", "default", "a-cm");
        w.edit("jobs", "default", "b", |p| p["spec"]["n"] = json!(2));
        assert!(cm(w, "c-cm").is_none(), "a controller ran while down");
    })
    .await;
    w.until(
        "the new parent's child, the deleted child back, the change applied",
        || {
            cm(&w, "c-cm").is_some()
                && cm(&w, "a-cm").is_some()
                && cm(&w, "b-cm").is_some_and(|c| c["data"]["n"] == "2")
        },
    )
    .await;
    assert_eq!(w.created("configmaps", "default", "b-cm"), 1);
    assert_eq!(w.created("configmaps", "default", "a-cm"), 2);
}

/// A parent deleted while the operator is down keeps our finalizer until the operator is
/// back: then its finalize hook runs and the parent goes.
#[tokio::test]
async fn a_parent_deleted_while_the_operator_is_down_is_finalized_after_the_restart() {
    let mut w = jobs().await;
    w.answer("jobs", Finalize, |_| {
        Ok(json!({"children": [], "finalized": true}))
    });
    w.controller(jobs_controller(true, json!({})));
    w.put("jobs", job("j", 1));
    w.until("the child and our finalizer", || {
        cm(&w, "j-cm").is_some() && parent(&w, "j").is_some_and(|p| has_finalizer(&p))
    })
    .await;
    w.restart(|w| {
        w.delete("jobs", "default", "j");
        let waiting = parent(w, "j").expect("the parent waits for its finalizer");
        assert!(!waiting["metadata"]["deletionTimestamp"].is_null());
    })
    .await;
    w.until("the parent finalized and gone", || {
        parent(&w, "j").is_none()
    })
    .await;
    assert!(cm(&w, "j-cm").is_none());
    assert!(!w.requests("jobs", Finalize).is_empty());
}
