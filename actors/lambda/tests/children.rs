//! How a CompositeController's children are written, in-process: the apply semantics a
//! metacontroller user relies on (fields of other clients kept, nothing written when
//! nothing changes), the `Recreate` and `OnDelete` update strategies, children of several
//! kinds in one answer, adoption by a selector with `matchExpressions`, and a
//! DecoratorController's annotations, attachments and resync period.
//!
//! Most scenarios use an "echo" controller: each `Owner` parent lists its desired
//! children in `spec.children`, and the sync hook answers them with `spec.status` as the
//! status, so a test changes what the hook desires by editing the parent.
//!
//! Run: `cargo test -p bosun-lambda --test children`.

mod world;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_lambda::children::ApplyStrategy;
use bosun_lambda::fakes::Verb;
use bosun_lambda::ports::HookType::Sync;
use serde_json::{Value, json};
use tokio::time::Instant;

use world::{Crd, World, keys, owned_by, str_of};

/// A world with `Owner` parents and a CompositeController `owners` whose children are
/// `types` (apiVersion, plural, update method), answering each parent's
/// `spec.children` and `spec.status`.
async fn echo(types: &[(&str, &str, &str)], generate_selector: bool) -> World {
    let w = World::start(&[Crd("Owner", "owners", true)]).await;
    w.answer("owners", Sync, |req| {
        let spec = &req["parent"]["spec"];
        Ok(json!({"status": spec["status"].clone(),
                  "children": spec["children"].as_array().cloned().unwrap_or_default()}))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "owners"},
        "spec": {
            "generateSelector": generate_selector,
            "parentResource": {"apiVersion": "example.com/v1", "resource": "owners"},
            "childResources": types.iter().map(|(api_version, plural, method)| json!({
                "apiVersion": api_version, "resource": plural,
                "updateStrategy": {"method": method}
            })).collect::<Vec<_>>(),
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/owners"}}}
        }
    }));
    w
}

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
           "data": {"value": value}})
}

/// An `Owner` in `default` desiring `children`, with `status` as its hook's status.
fn owner(name: &str, children: Value, status: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Owner", "metadata": {"name": name},
           "spec": {"children": children, "status": status}})
}

fn cm(w: &World, name: &str) -> Option<Value> {
    w.get("configmaps", "default", name)
}

/// The parent's status (Null while it has none).
fn status_of(w: &World, name: &str) -> Value {
    w.get("owners", "default", name)
        .map(|p| p["status"].clone())
        .unwrap_or_default()
}

/// The 3-way apply leaves what another client added to a child: a label, an annotation
/// and a data key someone else set survive an update the parent asks for, which keeps
/// the child's identity.
#[tokio::test]
async fn fields_another_client_set_on_a_child_are_kept_when_the_child_is_updated() {
    let w = echo(&[("v1", "configmaps", "InPlace")], true).await;
    w.put(
        "owners",
        owner("p", json!([configmap("p-cm", "1")]), json!({})),
    );
    w.until("the child", || {
        cm(&w, "p-cm").is_some_and(|c| c["data"]["value"] == "1")
    })
    .await;
    w.edit("configmaps", "default", "p-cm", |c| {
        c["metadata"]["labels"]["team"] = json!("ops");
        c["metadata"]["annotations"]["note"] = json!("by hand");
        c["data"]["theirs"] = json!("kept");
    });
    let uid = cm(&w, "p-cm").expect("child")["metadata"]["uid"].clone();
    w.edit("owners", "default", "p", |p| {
        p["spec"]["children"] = json!([configmap("p-cm", "2")])
    });
    w.until("the child updated", || {
        cm(&w, "p-cm").is_some_and(|c| c["data"]["value"] == "2")
    })
    .await;
    let child = cm(&w, "p-cm").expect("child");
    assert_eq!(child["metadata"]["labels"]["team"], "ops", "{child}");
    assert_eq!(
        child["metadata"]["annotations"]["note"], "by hand",
        "{child}"
    );
    assert_eq!(child["data"]["theirs"], "kept", "{child}");
    assert_eq!(child["metadata"]["uid"], uid, "the child was recreated");
}

/// A sync whose answer leaves a child as it is makes no write of that child: a change
/// of the parent that does not change its children (here its status answer) costs a
/// status write and nothing else.
#[tokio::test]
async fn a_child_already_as_desired_is_not_written_again() {
    let w = echo(&[("v1", "configmaps", "InPlace")], true).await;
    w.put(
        "owners",
        owner("p", json!([configmap("p-cm", "1")]), json!({"round": 1})),
    );
    w.until("the child and the status", || {
        cm(&w, "p-cm").is_some() && status_of(&w, "p")["round"] == 1
    })
    .await;
    let configmaps = w.resource("configmaps").clone();
    let version = cm(&w, "p-cm").expect("child")["metadata"]["resourceVersion"].clone();
    let writes = (
        w.cluster.calls(Verb::Create, &configmaps),
        w.cluster.calls(Verb::Replace, &configmaps),
        w.cluster.calls(Verb::Delete, &configmaps),
    );
    for round in 2..=4 {
        w.edit("owners", "default", "p", |p| {
            p["spec"]["status"] = json!({"round": round})
        });
        // The status is written after the children: once it is, the sync is done.
        w.until(&format!("the status of round {round}"), || {
            status_of(&w, "p")["round"] == round
        })
        .await;
    }
    assert_eq!(
        (
            w.cluster.calls(Verb::Create, &configmaps),
            w.cluster.calls(Verb::Replace, &configmaps),
            w.cluster.calls(Verb::Delete, &configmaps),
        ),
        writes,
        "an unchanged child was written"
    );
    assert_eq!(
        cm(&w, "p-cm").expect("child")["metadata"]["resourceVersion"],
        version
    );
}

/// `updateStrategy.method: Recreate`: a child that differs from the answer is deleted
/// and created again with the new content (a new object), not updated in place.
#[tokio::test]
async fn recreate_replaces_a_changed_child_with_a_new_object() {
    let w = echo(&[("v1", "configmaps", "Recreate")], true).await;
    w.put(
        "owners",
        owner("p", json!([configmap("p-cm", "1")]), json!({})),
    );
    w.until("the child", || cm(&w, "p-cm").is_some()).await;
    let uid = cm(&w, "p-cm").expect("child")["metadata"]["uid"].clone();
    w.edit("owners", "default", "p", |p| {
        p["spec"]["children"] = json!([configmap("p-cm", "2")])
    });
    w.until("the child recreated with the new content", || {
        cm(&w, "p-cm").is_some_and(|c| c["data"]["value"] == "2")
    })
    .await;
    let child = cm(&w, "p-cm").expect("child");
    assert_ne!(child["metadata"]["uid"], uid, "updated in place");
    assert_eq!(w.created("configmaps", "default", "p-cm"), 2);
    let configmaps = w.resource("configmaps").clone();
    assert_eq!(w.cluster.calls(Verb::Replace, &configmaps), 0);
    let parent = w.get("owners", "default", "p").expect("parent");
    assert!(owned_by(&child, &parent));
}

/// `updateStrategy.method: OnDelete`: a child that differs from the answer is left as it
/// is (the sync still completes: its status is written); once someone deletes it, it
/// comes back as the answer says.
#[tokio::test]
async fn on_delete_leaves_a_changed_child_until_someone_deletes_it() {
    let w = echo(&[("v1", "configmaps", "OnDelete")], true).await;
    w.put(
        "owners",
        owner("p", json!([configmap("p-cm", "1")]), json!({"round": 1})),
    );
    w.until("the child", || {
        cm(&w, "p-cm").is_some() && status_of(&w, "p")["round"] == 1
    })
    .await;
    w.edit("owners", "default", "p", |p| {
        p["spec"]["children"] = json!([configmap("p-cm", "2")]);
        p["spec"]["status"] = json!({"round": 2});
    });
    w.until("the sync of the change done", || {
        status_of(&w, "p")["round"] == 2
    })
    .await;
    assert_eq!(cm(&w, "p-cm").expect("child")["data"]["value"], "1");
    let configmaps = w.resource("configmaps").clone();
    assert_eq!(w.cluster.calls(Verb::Replace, &configmaps), 0);
    w.delete("configmaps", "default", "p-cm");
    w.until("the child back with the new content", || {
        cm(&w, "p-cm").is_some_and(|c| c["data"]["value"] == "2")
    })
    .await;
    assert_eq!(w.created("configmaps", "default", "p-cm"), 2);
}

/// One answer with children of three kinds makes all of them, each owned by the parent;
/// an answer without one kind deletes that kind's child and leaves the others untouched.
#[tokio::test]
async fn children_of_several_kinds_come_from_one_answer_and_a_dropped_kind_is_deleted() {
    let w = echo(
        &[
            ("v1", "configmaps", "InPlace"),
            ("v1", "secrets", "InPlace"),
            ("v1", "services", "InPlace"),
        ],
        true,
    )
    .await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "p-secret"},
                        "stringData": {"password": "x"}});
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "p-svc"},
                         "spec": {"ports": [{"port": 80}]}});
    let all = json!([configmap("p-cm", "1"), secret, service.clone()]);
    w.put("owners", owner("p", all, json!({})));
    let present = || {
        (
            cm(&w, "p-cm").is_some(),
            w.get("secrets", "default", "p-secret").is_some(),
            w.get("services", "default", "p-svc").is_some(),
        )
    };
    w.until("the three children", || present() == (true, true, true))
        .await;
    let parent = w.get("owners", "default", "p").expect("parent");
    let children = [
        cm(&w, "p-cm"),
        w.get("secrets", "default", "p-secret"),
        w.get("services", "default", "p-svc"),
    ]
    .map(|c| c.expect("child"));
    assert!(children.iter().all(|c| owned_by(c, &parent)));
    w.edit("owners", "default", "p", |p| {
        p["spec"]["children"] = json!([configmap("p-cm", "1"), service])
    });
    w.until("the Secret deleted", || present() == (true, false, true))
        .await;
    assert_eq!(
        cm(&w, "p-cm").expect("child")["metadata"]["uid"],
        children[0]["metadata"]["uid"]
    );
    assert_eq!(
        w.get("services", "default", "p-svc").expect("child")["metadata"]["uid"],
        children[2]["metadata"]["uid"]
    );
    // The next request shows the two kinds left.
    w.edit("owners", "default", "p", |p| {
        p["spec"]["status"] = json!({"again": true})
    });
    w.until("a request after the delete", || {
        w.requests("owners", Sync).last().is_some_and(|r| {
            r["parent"]["spec"]["status"]["again"] == true
                && keys(&r["children"]["Secret.v1"]).is_empty()
                && keys(&r["children"]["Service.v1"]) == ["p-svc"]
        })
    })
    .await;
}

/// A parent's own `spec.selector` with `matchExpressions` (no generateSelector): orphans
/// whose labels satisfy it are adopted and shown to the hook, one created later too;
/// an orphan whose label is outside the listed values is left alone.
#[tokio::test]
async fn a_selector_with_match_expressions_adopts_only_the_orphans_it_matches() {
    let w = World::start(&[Crd("Owner", "owners", true)]).await;
    // The hook keeps whatever children it observes, as they are.
    w.answer("owners", Sync, |req| {
        let children: Vec<Value> = req["children"]["ConfigMap.v1"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values().cloned())
            .collect();
        Ok(json!({"status": {"children": children.len()}, "children": children}))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "owners"},
        "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": "owners"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/owners"}}}
        }
    }));
    for (name, tier) in [("orphan-a", "a"), ("orphan-c", "c")] {
        w.configmap("default", name, json!({"tier": tier}), json!({}));
    }
    w.configmap("default", "unlabelled", json!({}), json!({}));
    w.put(
        "owners",
        json!({"apiVersion": "example.com/v1", "kind": "Owner", "metadata": {"name": "p"},
               "spec": {"selector": {"matchExpressions": [
                   {"key": "tier", "operator": "In", "values": ["a", "b"]}]}}}),
    );
    let parent = w.get("owners", "default", "p").expect("parent");
    let adopted = |name: &str| cm(&w, name).is_some_and(|c| owned_by(&c, &parent));
    w.until("orphan-a adopted", || {
        adopted("orphan-a") && status_of(&w, "p")["children"] == 1
    })
    .await;
    w.configmap("default", "late-b", json!({"tier": "b"}), json!({}));
    w.until("late-b adopted", || {
        adopted("late-b") && status_of(&w, "p")["children"] == 2
    })
    .await;
    assert!(!adopted("orphan-c") && !adopted("unlabelled"));
    assert!(cm(&w, "orphan-c").is_some_and(|c| c["metadata"]["ownerReferences"].is_null()));
    let seen =
        keys(&w.requests("owners", Sync).last().expect("a sync")["children"]["ConfigMap.v1"]);
    assert_eq!(seen, ["late-b", "orphan-a"]);
}

/// A DecoratorController's answer sets annotations on its object beside the labels; an
/// attachment it stops answering is deleted, the others kept.
#[tokio::test]
async fn a_decorator_annotates_its_object_and_deletes_attachments_it_no_longer_answers() {
    let w = World::start(&[Crd("Owner", "owners", true)]).await;
    w.answer("decorate", Sync, |req| {
        let object = &req["object"];
        let name = str_of(&object["metadata"]["name"]);
        let attachments: Vec<Value> = object["spec"]["attach"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|suffix| configmap(&format!("{name}-{}", str_of(suffix)), "x"))
            .collect();
        Ok(json!({"labels": {"decorated": "yes"},
                  "annotations": {"example.com/attachments": attachments.len().to_string()},
                  "attachments": attachments}))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "decorate"},
        "spec": {
            "resources": [{"apiVersion": "example.com/v1", "resource": "owners"}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/decorate"}}}
        }
    }));
    w.put(
        "owners",
        json!({"apiVersion": "example.com/v1", "kind": "Owner", "metadata": {"name": "d"},
               "spec": {"attach": ["one", "two"]}}),
    );
    let annotation = || {
        w.get("owners", "default", "d")
            .map(|o| o["metadata"]["annotations"]["example.com/attachments"].clone())
            .unwrap_or_default()
    };
    w.until("both attachments and the annotation", || {
        cm(&w, "d-one").is_some() && cm(&w, "d-two").is_some() && annotation() == "2"
    })
    .await;
    let one = cm(&w, "d-one").expect("attachment")["metadata"]["uid"].clone();
    w.edit("owners", "default", "d", |o| {
        o["spec"]["attach"] = json!(["one"])
    });
    w.until("d-two deleted, the annotation following", || {
        cm(&w, "d-two").is_none() && annotation() == "1"
    })
    .await;
    assert_eq!(cm(&w, "d-one").expect("kept")["metadata"]["uid"], one);
    let object = w.get("owners", "default", "d").expect("object");
    assert_eq!(object["metadata"]["labels"]["decorated"], "yes");
}

/// A DecoratorController's `resyncPeriodSeconds`: with nothing changing, its hook is
/// called again every period (on the runtime's clock), no sooner.
#[tokio::test(start_paused = true)]
async fn a_decorator_resync_period_calls_its_hook_again_every_period() {
    let w = World::start(&[Crd("Owner", "owners", true)]).await;
    let calls = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let seen = Arc::clone(&calls);
    w.answer("periodic", Sync, move |_| {
        seen.lock().expect("calls").push(Instant::now());
        Ok(json!({"labels": {"seen": "yes"}}))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "periodic"},
        "spec": {
            "resyncPeriodSeconds": 5,
            "resources": [{"apiVersion": "example.com/v1", "resource": "owners"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/periodic"}}}
        }
    }));
    w.put(
        "owners",
        json!({"apiVersion": "example.com/v1", "kind": "Owner", "metadata": {"name": "d"}}),
    );
    w.until("the label", || {
        w.get("owners", "default", "d")
            .is_some_and(|o| o["metadata"]["labels"]["seen"] == "yes")
    })
    .await;
    // The label's own write may start one more sync; the periodic ones follow it.
    let settled = calls.lock().expect("calls").len();
    w.until("four more calls", || {
        calls.lock().expect("calls").len() >= settled + 4
    })
    .await;
    let calls = calls.lock().expect("calls").clone();
    let period = Duration::from_secs(5);
    for pair in calls[calls.len() - 3..].windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= period && gap < period * 2,
            "a resync {gap:?} after the previous call, the period is {period:?}"
        );
    }
}

/// `--apply-strategy=server-side-apply`: children are written by server-side apply; a
/// field another client set is kept when the parent changes the child, and a child that
/// is as desired is not applied again.
#[tokio::test]
async fn with_server_side_apply_children_keep_others_fields_and_are_not_applied_again() {
    let w = World::start_with(
        &[Crd("Owner", "owners", true)],
        "",
        ApplyStrategy::ServerSideApply,
    )
    .await;
    w.answer("owners", Sync, |req| {
        let spec = &req["parent"]["spec"];
        Ok(json!({"status": spec["status"].clone(), "children": spec["children"].clone()}))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "owners"},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": "example.com/v1", "resource": "owners"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/owners"}}}
        }
    }));
    w.put(
        "owners",
        owner("p", json!([configmap("p-cm", "1")]), json!({"round": 1})),
    );
    w.until("the child", || {
        cm(&w, "p-cm").is_some() && status_of(&w, "p")["round"] == 1
    })
    .await;
    let configmaps = w.resource("configmaps").clone();
    assert_eq!(
        (
            w.cluster.calls(Verb::Create, &configmaps),
            w.cluster.calls(Verb::Apply, &configmaps)
        ),
        (0, 1),
        "the child was not made by one server-side apply"
    );
    w.edit("configmaps", "default", "p-cm", |c| {
        c["data"]["theirs"] = json!("kept")
    });
    w.edit("owners", "default", "p", |p| {
        p["spec"]["children"] = json!([configmap("p-cm", "2")])
    });
    w.until("the child applied with the new value", || {
        cm(&w, "p-cm").is_some_and(|c| c["data"]["value"] == "2")
    })
    .await;
    assert_eq!(cm(&w, "p-cm").expect("child")["data"]["theirs"], "kept");
    let applied = w.cluster.calls(Verb::Apply, &configmaps);
    w.edit("owners", "default", "p", |p| {
        p["spec"]["status"] = json!({"round": 2})
    });
    w.until("the next sync done", || status_of(&w, "p")["round"] == 2)
        .await;
    assert_eq!(
        w.cluster.calls(Verb::Apply, &configmaps),
        applied,
        "a child as desired was applied again"
    );
    assert_eq!(w.created("configmaps", "default", "p-cm"), 1);
}

/// A DecoratorController answering a label or an annotation as `null` removes it from
/// its object; the object's other labels stay.
#[tokio::test]
async fn a_decorator_answering_null_removes_a_label_and_an_annotation() {
    let w = World::start(&[Crd("Owner", "owners", true)]).await;
    w.answer("decorate", Sync, |_| {
        Ok(json!({"labels": {"stale": null, "fresh": "yes"},
                  "annotations": {"example.com/stale": null}}))
    });
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "decorate"},
        "spec": {
            "resources": [{"apiVersion": "example.com/v1", "resource": "owners"}],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/decorate"}}}
        }
    }));
    w.put(
        "owners",
        json!({"apiVersion": "example.com/v1", "kind": "Owner",
               "metadata": {"name": "d", "labels": {"stale": "1", "mine": "kept"},
                            "annotations": {"example.com/stale": "1", "example.com/mine": "kept"}}}),
    );
    w.until("the labels and annotations answered", || {
        w.get("owners", "default", "d").is_some_and(|o| {
            let meta = &o["metadata"];
            meta["labels"] == json!({"fresh": "yes", "mine": "kept"})
                && meta["annotations"] == json!({"example.com/mine": "kept"})
        })
    })
    .await;
}
