//! The lambda controllers in-process: the registry, its controllers and the runner against
//! the in-memory cluster and scripted webhooks of `bosun_lambda::fakes` (`world/`), from a
//! controller object to children, status, finalizers, attachments and Events.
//!
//! Run: `cargo test -p bosun-lambda --test scenarios`.

mod world;

use std::sync::Arc;

use bosun_lambda::events::LambdaEvent;
use bosun_lambda::ports::{HookError, HookType};
use bosun_lambda::registry;
use serde_json::{Value, json};
use world::{Crd, World};

async fn world() -> World {
    World::start(&[Crd("Thing", "things", true)]).await
}

/// A CompositeController of Things with ConfigMap children (and a finalize hook).
fn composite(name: &str, finalize: bool) -> Value {
    let mut hooks = json!({"sync": {"webhook": {"url": "http://hooks.test/sync"}}});
    if finalize {
        hooks["finalize"] = json!({"webhook": {"url": "http://hooks.test/finalize"}});
    }
    json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": name},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
            "hooks": hooks
        }
    })
}

fn thing(name: &str, message: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Thing",
           "metadata": {"name": name, "namespace": "ns"}, "spec": {"message": message}})
}

/// Answers each Thing with one ConfigMap carrying its message (and `extra` ones named in
/// `spec.extra`), and counts its children in the status.
fn one_child_per_thing(request: &Value) -> Result<Value, HookError> {
    let parent = &request["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let mut children = vec![json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-cm")},
        "data": {"message": parent["spec"]["message"]}})];
    for extra in parent["spec"]["extra"].as_array().into_iter().flatten() {
        children.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": extra}, "data": {}}));
    }
    let seen = request["children"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |m| m.len());
    Ok(json!({"status": {"children": seen}, "children": children}))
}

fn child(w: &World, name: &str) -> Option<Value> {
    w.get("configmaps", "ns", name)
}

fn parent(w: &World, name: &str) -> Option<Value> {
    w.get("things", "ns", name)
}

#[tokio::test]
async fn a_composite_controller_creates_children_and_writes_status() {
    let w = world().await;
    w.hooks
        .answer("greetings", HookType::Sync, one_child_per_thing);
    w.controller(composite("greetings", false));
    w.put("things", thing("hello", "hi"));
    w.until("the child", || child(&w, "hello-cm").is_some())
        .await;
    let cm = child(&w, "hello-cm").expect("child");
    assert_eq!(cm["data"]["message"], "hi");
    let owner = &cm["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["controller"].as_bool()),
        (Some("Thing"), Some(true))
    );
    w.until("the status counting the child", || {
        parent(&w, "hello").is_some_and(|p| p["status"]["children"] == 1)
    })
    .await;
    let p = parent(&w, "hello").expect("parent");
    assert_eq!(
        p["status"]["observedGeneration"],
        p["metadata"]["generation"]
    );
    // The sync is journaled with what it created.
    w.until("the sync journaled", || {
        w.journal.events().iter().any(|e| {
            matches!(e, LambdaEvent::Synced { created, .. } if created.iter().any(|c| c == "ConfigMap ns/hello-cm"))
        })
    })
    .await;
}

#[tokio::test]
async fn a_changed_parent_updates_its_child_in_place() {
    let w = world().await;
    w.hooks
        .answer("greetings", HookType::Sync, one_child_per_thing);
    w.controller(composite("greetings", false));
    w.put("things", thing("hello", "hi"));
    w.until("the child", || child(&w, "hello-cm").is_some())
        .await;
    let uid = child(&w, "hello-cm").expect("child")["metadata"]["uid"].clone();
    let mut changed = parent(&w, "hello").expect("parent");
    changed["spec"]["message"] = json!("hi again");
    w.put("things", changed);
    w.until("the child updated", || {
        child(&w, "hello-cm").is_some_and(|c| c["data"]["message"] == "hi again")
    })
    .await;
    assert_eq!(
        child(&w, "hello-cm").expect("child")["metadata"]["uid"],
        uid,
        "in place, not recreated"
    );
}

#[tokio::test]
async fn a_child_no_longer_desired_is_deleted_and_one_deleted_by_someone_comes_back() {
    let w = world().await;
    w.hooks
        .answer("greetings", HookType::Sync, one_child_per_thing);
    w.controller(composite("greetings", false));
    let mut p = thing("hello", "hi");
    p["spec"]["extra"] = json!(["extra-cm"]);
    w.put("things", p);
    w.until("both children", || child(&w, "extra-cm").is_some())
        .await;
    let mut fewer = parent(&w, "hello").expect("parent");
    fewer["spec"]["extra"] = json!([]);
    w.put("things", fewer);
    w.until("the extra child deleted", || {
        child(&w, "extra-cm").is_none()
    })
    .await;
    assert!(child(&w, "hello-cm").is_some());
    w.delete("configmaps", "ns", "hello-cm");
    w.until("the child back", || child(&w, "hello-cm").is_some())
        .await;
}

#[tokio::test]
async fn a_finalize_hook_runs_before_the_parent_goes() {
    let w = world().await;
    w.hooks
        .answer("greetings", HookType::Sync, one_child_per_thing);
    w.hooks.answer("greetings", HookType::Finalize, |request| {
        // Done once the children are gone.
        let left = request["children"]["ConfigMap.v1"]
            .as_object()
            .map_or(0, |m| m.len());
        Ok(json!({"children": [], "finalized": left == 0}))
    });
    w.controller(composite("greetings", true));
    w.put("things", thing("hello", "hi"));
    w.until("the child and the finalizer", || {
        child(&w, "hello-cm").is_some()
            && parent(&w, "hello").is_some_and(|p| {
                p["metadata"]["finalizers"].as_array().is_some_and(|f| {
                    f.iter()
                        .any(|f| f == "metacontroller.io/compositecontroller-greetings")
                })
            })
    })
    .await;
    w.delete("things", "ns", "hello");
    w.until("the parent gone", || parent(&w, "hello").is_none())
        .await;
    assert!(
        child(&w, "hello-cm").is_none(),
        "the finalize hook's answer emptied the children"
    );
    assert!(
        w.hooks
            .requests("greetings", HookType::Finalize)
            .iter()
            .all(|r| r["finalizing"] == true),
        "finalize requests say so"
    );
}

#[tokio::test]
async fn a_decorator_controller_labels_matching_objects_and_attaches_children() {
    let w = world().await;
    w.hooks.answer("decorate", HookType::Sync, |request| {
        let name = request["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        Ok(json!({
            "labels": {"decorated": "yes"},
            "attachments": [{"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": format!("{name}-attachment")}, "data": {}}]
        }))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "decorate"},
        "spec": {
            "resources": [{"apiVersion": "example.com/v1", "resource": "things",
                           "labelSelector": {"matchLabels": {"decorate": "me"}}}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/decorate"}}}
        }
    }));
    let mut wanted = thing("wanted", "x");
    wanted["metadata"]["labels"] = json!({"decorate": "me"});
    w.put("things", wanted);
    w.put("things", thing("other", "y"));
    w.until("the attachment", || {
        child(&w, "wanted-attachment").is_some()
    })
    .await;
    w.until("the label", || {
        parent(&w, "wanted").is_some_and(|p| p["metadata"]["labels"]["decorated"] == "yes")
    })
    .await;
    assert!(child(&w, "other-attachment").is_none());
    assert!(
        w.hooks
            .requests("decorate", HookType::Sync)
            .iter()
            .all(|r| r["object"]["metadata"]["name"] == "wanted"),
        "only the selected object reaches the hook"
    );
}

#[tokio::test]
async fn a_failing_hook_is_a_warning_event_on_the_parent_and_the_sync_is_retried() {
    let w = world().await;
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    w.hooks.answer("greetings", HookType::Sync, move |request| {
        if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
            return Err(HookError::Status {
                hook: HookType::Sync,
                url: "http://hooks.test/sync".into(),
                code: 500,
                body: "not yet".into(),
            });
        }
        one_child_per_thing(request)
    });
    w.controller(composite("greetings", false));
    w.put("things", thing("hello", "hi"));
    w.until("the child after the retries", || {
        child(&w, "hello-cm").is_some()
    })
    .await;
    let events = w.cluster.events();
    assert!(
        events.iter().any(|e| e.on == "Thing ns/hello"
            && e.note.type_ == "Warning"
            && e.note.reason == "SyncError"
            && e.note.message.contains("not yet")),
        "{events:?}"
    );
    let failures: Vec<u32> = w
        .journal
        .events()
        .iter()
        .filter_map(|e| match e {
            LambdaEvent::SyncFailed { failures, .. } => Some(*failures),
            _ => None,
        })
        .collect();
    assert_eq!(failures, [1, 2], "each failure journaled, counted");
}

#[tokio::test]
async fn controllers_are_actors_and_a_deleted_controller_object_stops_its_controller() {
    let w = world().await;
    w.hooks
        .answer("greetings", HookType::Sync, one_child_per_thing);
    w.controller(composite("greetings", false));
    w.put("things", thing("hello", "hi"));
    w.until("the child", || child(&w, "hello-cm").is_some())
        .await;
    let actor = "lambda/CompositeController/greetings";
    w.until("the controller's mailbox with its syncs", || {
        w.mailboxes.snapshot().get(actor).is_some_and(|m| {
            m.handled >= 1 && m.recent.iter().any(|h| h.summary == "sync ns/hello")
        })
    })
    .await;
    assert!(
        w.mailboxes
            .snapshot()
            .contains_key(registry::REGISTRY_ACTOR)
    );
    w.delete("compositecontrollers", "", "greetings");
    w.until("the controller stopped", || {
        !w.mailboxes.snapshot().contains_key(actor)
    })
    .await;
}

#[tokio::test]
async fn a_refused_controller_shows_and_starts_once_its_parent_crd_is_fixed() {
    let w = world().await;
    w.hooks
        .answer("greetings", HookType::Sync, one_child_per_thing);
    // The parent's CRD loses its status subresource: the controller is refused.
    let crds = "customresourcedefinitions";
    let fixed = w.get(crds, "", "things.example.com").expect("the CRD");
    w.edit(crds, "", "things.example.com", |crd| {
        crd["spec"]["versions"][0]["subresources"] = json!({})
    });
    w.controller(composite("greetings", false));
    w.until("the refusal in the views", || {
        w.registry.controllers.views().iter().any(|c| {
            c.name == "greetings"
                && c.refused
                    .as_deref()
                    .is_some_and(|r| r.contains("does not have subresource 'Status' enabled"))
        })
    })
    .await;
    // Fixed without touching the controller object: the retry starts it.
    w.put(crds, fixed);
    w.put("things", thing("hello", "hi"));
    w.until("the child", || child(&w, "hello-cm").is_some())
        .await;
    assert!(
        w.registry
            .controllers
            .views()
            .iter()
            .all(|c| c.refused.is_none()),
        "no longer refused"
    );
}
