//! metacontroller's integration cases in-process: resyncs, settled parents, claiming and
//! releasing, customize hooks, v2 keys, `--target-label-selector`, `ignoreStatusChanges`,
//! a webhook's 429, and controller objects refused with upstream's messages.
//!
//! The scenarios whose behaviour is a delay run on tokio's paused clock: the runtime's
//! timers jump ahead whenever every task waits, so a delay is measured exactly, with no
//! slack for a loaded machine and no time spent waiting for it.
//!
//! Run: `cargo test -p bosun-lambda --test integration`.

mod world;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_lambda::children::ApplyStrategy;
use bosun_lambda::events::LambdaEvent;
use bosun_lambda::ports::HookError;
use bosun_lambda::ports::HookType::{Customize, Sync};
use serde_json::{Value, json};
use tokio::time::Instant;

use world::{Crd, World, keys, owned_by, str_of};

/// A CompositeController `plural` over `example.com/v1 <plural>` with `child` children
/// updated in place, its sync hook, and `extra` spec fields (hooks merged).
fn simple_controller(plural: &str, child: (&str, &str), extra: Value) -> Value {
    let mut spec = json!({
        "parentResource": {"apiVersion": "example.com/v1", "resource": plural},
        "childResources": [{"apiVersion": child.0, "resource": child.1,
                            "updateStrategy": {"method": "InPlace"}}],
        "hooks": {"sync": {"webhook": {"url": format!("http://hooks.test/{plural}/sync")}}}
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        if k == "hooks" {
            for (h, def) in v.as_object().into_iter().flatten() {
                spec["hooks"][h] = def.clone();
            }
        } else {
            spec[k] = v.clone();
        }
    }
    json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
           "metadata": {"name": plural}, "spec": spec})
}

/// Resyncs the hook asks for in [`resync_after_case`].
const RESYNCS: u32 = 10;

/// resyncAfterSeconds: the hook asks to be called again in 0.1 s, ten times in a row, and
/// is, with nothing changed in between and no periodic resync configured: ten resyncs take
/// a second on the runtime's clock, not ten (a fraction rounded up to a whole second) nor
/// nothing (rounded down to zero: never called again).
#[tokio::test(start_paused = true)]
async fn resync_after_seconds_calls_the_hook_again_soon() {
    resync_after_case("CompositeController").await;
}

/// resyncAfterSeconds of a DecoratorController's hook.
#[tokio::test(start_paused = true)]
async fn decorator_resync_after_seconds_calls_the_hook_again_soon() {
    resync_after_case("DecoratorController").await;
}

async fn resync_after_case(kind: &str) {
    let w = World::start(&[Crd("Resync", "resyncs", true)]).await;
    // (when the first resync was asked for, resyncs so far, the time they all took)
    type ResyncState = (Option<Instant>, u32, Option<Duration>);
    let state: Arc<Mutex<ResyncState>> = Arc::new(Mutex::new((None, 0, None)));
    let hook_state = Arc::clone(&state);
    w.answer("resyncs", Sync, move |req| {
        let mut st = hook_state.lock().expect("state");
        let parent = if req["parent"].is_null() {
            &req["object"]
        } else {
            &req["parent"]
        };
        if parent["status"].is_null() {
            // The first sync: status written, then the parent quiesces.
            return Ok(json!({"status": {}}));
        }
        let again = json!({"status": parent["status"], "resyncAfterSeconds": 0.1});
        Ok(match *st {
            (None, _, _) => {
                st.0 = Some(Instant::now());
                again
            }
            (Some(_), n, None) if n + 1 < RESYNCS => {
                st.1 = n + 1;
                again
            }
            (Some(asked), _, None) => {
                let elapsed = asked.elapsed();
                st.1 = RESYNCS;
                st.2 = Some(elapsed);
                json!({"status": {"elapsedSeconds": elapsed.as_secs_f64()}})
            }
            (Some(_), _, Some(_)) => json!({"status": parent["status"]}),
        })
    });
    let hook = json!({"sync": {"webhook": {"url": "http://hooks.test/resyncs"}}});
    let spec = if kind == "CompositeController" {
        json!({"parentResource": {"apiVersion": "example.com/v1", "resource": "resyncs"}, "hooks": hook})
    } else {
        json!({"resources": [{"apiVersion": "example.com/v1", "resource": "resyncs"}], "hooks": hook})
    };
    w.controller(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": kind,
                        "metadata": {"name": "resyncs"}, "spec": spec}),
    );
    w.put(
        "resyncs",
        json!({"apiVersion": "example.com/v1", "kind": "Resync", "metadata": {"name": "r"},
               "spec": {"selector": {"matchLabels": {"test": "resync-after"}}}}),
    );
    w.until("elapsedSeconds in the status", || {
        w.get("resyncs", "default", "r")
            .is_some_and(|p| p["status"]["elapsedSeconds"].is_number())
    })
    .await;
    let elapsed = state.lock().expect("state").2.expect("measured");
    let asked = Duration::from_millis(100) * RESYNCS;
    assert!(
        elapsed >= asked && elapsed < asked * 2,
        "{RESYNCS} resyncs asked for 0.1 s after each other took {elapsed:?}"
    );
}

/// A settled parent on a periodic resync (resent without reading the caches while
/// nothing changed): a child edited by someone else is reverted, and a new answer of the
/// hook to the unchanged request is applied.
#[tokio::test(start_paused = true)]
async fn a_settled_parent_reverts_an_edited_child_and_applies_a_new_answer_on_resync() {
    let w = World::start(&[Crd("Settle", "settles", true)]).await;
    let value = Arc::new(Mutex::new("1".to_string()));
    let hook_value = Arc::clone(&value);
    w.answer("settles", Sync, move |req| {
        let v = hook_value.lock().expect("value").clone();
        let name = str_of(&req["parent"]["metadata"]["name"]).to_string();
        Ok(json!({"status": {"value": v},
                  "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": format!("{name}-cm")},
                                "data": {"value": v}}]}))
    });
    w.controller(simple_controller(
        "settles",
        ("v1", "configmaps"),
        json!({"generateSelector": true, "resyncPeriodSeconds": 1}),
    ));
    w.put(
        "settles",
        json!({"apiVersion": "example.com/v1", "kind": "Settle", "metadata": {"name": "s"}}),
    );
    let child = || w.get("configmaps", "default", "s-cm");
    let status = || {
        w.get("settles", "default", "s")
            .map(|p| p["status"]["value"].clone())
    };
    w.until("the child and the status", || {
        child().is_some_and(|c| c["data"]["value"] == "1") && status() == Some(json!("1"))
    })
    .await;
    // Settled: two more periodic resyncs with nothing to do, neither reading the caches
    // (the request sent again) nor writing.
    let settled = w.requests("settles", Sync).len();
    let (reads, writes) = (w.cluster.reads(), w.cluster.writes());
    w.until("two periodic resyncs", || {
        w.requests("settles", Sync).len() >= settled + 2
    })
    .await;
    assert_eq!(
        (w.cluster.reads(), w.cluster.writes()),
        (reads, writes),
        "a settled resync read or wrote"
    );

    w.edit("configmaps", "default", "s-cm", |c| {
        c["data"]["value"] = json!("edited")
    });
    w.until("the edited child reverted", || {
        child().is_some_and(|c| c["data"]["value"] == "1")
    })
    .await;

    *value.lock().expect("value") = "2".to_string();
    w.until("the new answer applied by a resync", || {
        child().is_some_and(|c| c["data"]["value"] == "2") && status() == Some(json!("2"))
    })
    .await;
}

/// claim and orphan: a ConfigMap that exists before its parent and matches the parent's
/// selector is adopted (another owner's plain reference kept); one controlled by someone
/// else is never adopted nor shown to the hook; once the adopted child's labels stop
/// matching it is released (our ownerReference removed, the object kept).
#[tokio::test]
async fn matching_orphans_are_adopted_and_children_that_stop_matching_released() {
    let w = World::start(&[Crd("Claimer", "claimers", true)]).await;
    // The hook always desires the child: once released it is no longer observed, and a
    // create of an object that exists changes nothing.
    w.answer("claimers", Sync, |_| {
        Ok(json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "pre-existing-child", "labels": {"test": "claim"}},
                                "data": {"from": "hook"}}]}))
    });
    // An unrelated owner keeps a reference that adoption and release must leave alone.
    w.configmap("default", "plain-owner", json!({}), json!({}));
    let plain = w
        .get("configmaps", "default", "plain-owner")
        .expect("owner");
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "plain-owner",
                       "uid": plain["metadata"]["uid"]});
    w.put(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "pre-existing-child", "labels": {"test": "claim"},
                            "ownerReferences": [other]},
               "data": {"from": "before"}}),
    );
    // A ConfigMap owned by another controller is never adopted.
    w.configmap("default", "foreign-owner", json!({}), json!({}));
    let foreign_owner = w
        .get("configmaps", "default", "foreign-owner")
        .expect("owner");
    w.put(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "someone-elses", "labels": {"test": "claim"},
                            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                 "name": "foreign-owner", "controller": true,
                                                 "uid": foreign_owner["metadata"]["uid"]}]}}),
    );
    w.controller(simple_controller(
        "claimers",
        ("v1", "configmaps"),
        json!({}),
    ));
    w.put(
        "claimers",
        json!({"apiVersion": "example.com/v1", "kind": "Claimer", "metadata": {"name": "claimer"},
               "spec": {"selector": {"matchLabels": {"test": "claim"}}}}),
    );
    let parent = w.get("claimers", "default", "claimer").expect("parent");
    let child = || w.get("configmaps", "default", "pre-existing-child");
    w.until("the orphan adopted and updated in place", || {
        child().is_some_and(|c| owned_by(&c, &parent) && c["data"]["from"] == "hook")
    })
    .await;
    let adopted = child().expect("child");
    assert_eq!(
        adopted["metadata"]["ownerReferences"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{adopted}"
    );
    assert!(
        w.requests("claimers", Sync).iter().all(|r| {
            !keys(&r["children"]["ConfigMap.v1"]).contains(&"someone-elses".to_string())
        }),
        "a ConfigMap of another controller was shown as a child"
    );
    assert!(!owned_by(
        &w.get("configmaps", "default", "someone-elses")
            .expect("foreign"),
        &parent
    ));

    // Its labels stop matching: released, not deleted.
    w.edit("configmaps", "default", "pre-existing-child", |c| {
        c["metadata"]["labels"] = json!({"test": "no-match"})
    });
    w.until("the child released", || {
        child().is_some_and(|c| !owned_by(&c, &parent))
    })
    .await;
    let released = child().expect("released child kept");
    assert_eq!(
        released["metadata"]["ownerReferences"],
        json!([other]),
        "only our reference is removed"
    );
    assert_eq!(released["metadata"]["labels"]["test"], "no-match");
}

/// customize: the related objects the customize hook selects are in the sync request (v1
/// keys of a namespaced parent: the bare name; only the selected object), a change of a
/// related object syncs the parent again, and its deletion takes the child away.
#[tokio::test]
async fn customize_related_objects_reach_the_hook_and_their_changes_resync() {
    let w = World::start(&[Crd("Customized", "customizeds", true)]).await;
    w.answer("customizeds", Customize, |req| {
        Ok(
            json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps",
                                        "namespace": req["parent"]["metadata"]["namespace"],
                                        "names": ["related-config-map"]}]}),
        )
    });
    w.answer("customizeds", Sync, |req| {
        let parent = &req["parent"];
        let children: Vec<Value> = req["related"]["ConfigMap.v1"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
            .map(|r| {
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": format!("{}-{}", str_of(&parent["metadata"]["name"]), str_of(&r["metadata"]["name"])),
                                    "labels": {"test": "customize"}},
                       "stringData": {"copied": r["data"]["value"]}})
            })
            .collect();
        Ok(json!({"children": children}))
    });
    w.configmap(
        "default",
        "related-config-map",
        json!({}),
        json!({"value": "one"}),
    );
    w.configmap("default", "unrelated", json!({}), json!({"value": "x"}));
    w.controller(simple_controller(
        "customizeds",
        ("v1", "secrets"),
        json!({"hooks": {"customize": {"webhook": {"url": "http://hooks.test/customize"}}}}),
    ));
    w.put(
        "customizeds",
        json!({"apiVersion": "example.com/v1", "kind": "Customized", "metadata": {"name": "test-customize-webhook"},
               "spec": {"selector": {"matchLabels": {"test": "customize"}}}}),
    );
    let copied = || {
        w.get(
            "secrets",
            "default",
            "test-customize-webhook-related-config-map",
        )
        .map(|s| str_of(&s["stringData"]["copied"]).to_string())
    };
    w.until("the child named after the related object", || {
        copied().as_deref() == Some("one")
    })
    .await;
    let request = w
        .requests("customizeds", Sync)
        .pop()
        .expect("a sync request");
    assert_eq!(
        keys(&request["related"]["ConfigMap.v1"]),
        ["related-config-map"],
        "{}",
        request["related"]
    );
    assert_eq!(
        w.requests("customizeds", Customize)[0]["parent"]["metadata"]["name"],
        "test-customize-webhook"
    );
    // A change of the related object: the parent syncs again without any change of its own.
    w.edit("configmaps", "default", "related-config-map", |c| {
        c["data"]["value"] = json!("two")
    });
    w.until("the child follows the related object", || {
        copied().as_deref() == Some("two")
    })
    .await;
    w.delete("configmaps", "default", "related-config-map");
    w.until("the child removed with the related object", || {
        copied().is_none()
    })
    .await;
}

/// customize for a DecoratorController: the related objects are in the request, and a
/// change of one syncs the decorated object again.
#[tokio::test]
async fn decorator_customize_related_objects_reach_the_hook_and_their_changes_resync() {
    let w = World::start(&[Crd("Decorated", "decorateds", true)]).await;
    w.answer("dc", Customize, |req| {
        assert_eq!(req["controller"]["kind"], "DecoratorController");
        Ok(
            json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps",
                                        "namespace": req["parent"]["metadata"]["namespace"],
                                        "names": ["related-config-map"]}]}),
        )
    });
    w.answer("dc", Sync, |req| {
        let object = &req["object"];
        let attachments: Vec<Value> = req["related"]["ConfigMap.v1"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
            .map(|r| {
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": format!("{}-{}", str_of(&object["metadata"]["name"]), str_of(&r["metadata"]["name"]))},
                       "stringData": {"copied": r["data"]["value"]}})
            })
            .collect();
        Ok(json!({"attachments": attachments}))
    });
    w.configmap(
        "default",
        "related-config-map",
        json!({}),
        json!({"value": "one"}),
    );
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "dc"},
        "spec": {
            "resources": [{"apiVersion": "example.com/v1", "resource": "decorateds"}],
            "attachments": [{"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {
                "sync": {"webhook": {"url": "http://hooks.test/dc/sync"}},
                "customize": {"webhook": {"url": "http://hooks.test/dc/customize"}}
            }
        }
    }));
    w.put(
        "decorateds",
        json!({"apiVersion": "example.com/v1", "kind": "Decorated", "metadata": {"name": "test-customize-webhook"}}),
    );
    let copied = || {
        w.get(
            "secrets",
            "default",
            "test-customize-webhook-related-config-map",
        )
        .map(|s| str_of(&s["stringData"]["copied"]).to_string())
    };
    w.until("the attachment named after the related object", || {
        copied().as_deref() == Some("one")
    })
    .await;
    w.edit("configmaps", "default", "related-config-map", |c| {
        c["data"]["value"] = json!("two")
    });
    w.until("the attachment follows the related object", || {
        copied().as_deref() == Some("two")
    })
    .await;
}

/// v2 hooks: children and attachments are keyed `namespace/name` for a namespaced parent
/// (v1 would say the bare name).
#[tokio::test]
async fn v2_hooks_key_children_and_attachments_by_namespace_and_name() {
    let w = World::start(&[Crd("V2Parent", "v2parents", true)]).await;
    w.answer("v2-decorator", Sync, |req| {
        let name = str_of(&req["object"]["metadata"]["name"]);
        Ok(
            json!({"attachments": [{"apiVersion": "v1", "kind": "Secret",
                                   "metadata": {"name": format!("{name}-attached")}}]}),
        )
    });
    w.answer("v2parents", Sync, |req| {
        let name = str_of(&req["parent"]["metadata"]["name"]);
        Ok(
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": name, "labels": {"test": "v2"}}}]}),
        )
    });
    w.namespace("test-v2", json!({}));
    w.controller(simple_controller(
        "v2parents",
        ("v1", "configmaps"),
        json!({"hooks": {"sync": {"version": "v2", "webhook": {"url": "http://hooks.test/v2/sync"}}}}),
    ));
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "v2-decorator"},
        "spec": {
            "resources": [{"apiVersion": "example.com/v1", "resource": "v2parents"}],
            "attachments": [{"apiVersion": "v1", "resource": "secrets"}],
            "hooks": {"sync": {"version": "v2", "webhook": {"url": "http://hooks.test/decorate"}}}
        }
    }));
    w.put(
        "v2parents",
        json!({"apiVersion": "example.com/v1", "kind": "V2Parent",
               "metadata": {"name": "p", "namespace": "test-v2"},
               "spec": {"selector": {"matchLabels": {"test": "v2"}}}}),
    );
    w.until("the child and the attachment", || {
        w.get("configmaps", "test-v2", "p").is_some()
            && w.get("secrets", "test-v2", "p-attached").is_some()
    })
    .await;
    w.until("requests keyed namespace/name", || {
        w.requests("v2parents", Sync)
            .iter()
            .any(|r| keys(&r["children"]["ConfigMap.v1"]) == ["test-v2/p"])
            && w.requests("v2-decorator", Sync)
                .iter()
                .any(|r| keys(&r["attachments"]["Secret.v1"]) == ["test-v2/p-attached"])
    })
    .await;
    assert!(
        w.requests("v2parents", Sync)
            .iter()
            .all(|r| !keys(&r["children"]["ConfigMap.v1"]).contains(&"p".to_string())),
        "a v2 request used a v1 key"
    );
}

/// target-label-selector: only the controllers whose labels match
/// `--target-label-selector` run; a controller relabelled to match starts, one relabelled
/// away stops (a `Stopped` Event on it) and syncs nothing more.
#[tokio::test]
async fn target_label_selector_runs_only_matching_controllers() {
    let w = World::start_with(
        &[
            Crd("Selected", "selecteds", true),
            Crd("Ignored", "ignoreds", true),
        ],
        "controller-group=cicd",
        ApplyStrategy::DynamicApply,
    )
    .await;
    for controller in ["ignoreds", "selecteds"] {
        w.answer(controller, Sync, move |req| {
            let name = str_of(&req["parent"]["metadata"]["name"]);
            Ok(
                json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": format!("{name}-{controller}")}}]}),
            )
        });
    }
    for decorator in ["dec-ignored", "dec-selected"] {
        w.answer(decorator, Sync, move |req| {
            let name = str_of(&req["object"]["metadata"]["name"]);
            Ok(
                json!({"attachments": [{"apiVersion": "v1", "kind": "Secret",
                                       "metadata": {"name": format!("{name}-{decorator}")}}]}),
            )
        });
    }
    let labelled = |mut controller: Value, group: &str| {
        controller["metadata"]["labels"] = json!({"controller-group": group});
        controller["spec"]["generateSelector"] = json!(true);
        controller
    };
    w.controller(labelled(
        simple_controller("ignoreds", ("v1", "configmaps"), json!({})),
        "other",
    ));
    w.controller(labelled(
        simple_controller("selecteds", ("v1", "configmaps"), json!({})),
        "cicd",
    ));
    for (name, group) in [("dec-ignored", "other"), ("dec-selected", "cicd")] {
        w.controller(json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": name, "labels": {"controller-group": group}},
            "spec": {
                "resources": [{"apiVersion": "example.com/v1", "resource": "selecteds"}],
                "attachments": [{"apiVersion": "v1", "resource": "secrets"}],
                "hooks": {"sync": {"webhook": {"url": format!("http://hooks.test/{name}")}}}
            }
        }));
    }
    w.put(
        "ignoreds",
        json!({"apiVersion": "example.com/v1", "kind": "Ignored", "metadata": {"name": "i"}}),
    );
    w.put(
        "selecteds",
        json!({"apiVersion": "example.com/v1", "kind": "Selected", "metadata": {"name": "s"}}),
    );
    let cm = |name: &str| w.get("configmaps", "default", name);
    w.until("the selected controllers' child and attachment", || {
        cm("s-selecteds").is_some() && w.get("secrets", "default", "s-dec-selected").is_some()
    })
    .await;
    // Both controllers were created before both parents; the selected ones have synced
    // their parent, the others have never called their hook.
    assert!(w.requests("ignoreds", Sync).is_empty() && cm("i-ignoreds").is_none());
    assert!(w.requests("dec-ignored", Sync).is_empty());
    assert!(w.get("secrets", "default", "s-dec-ignored").is_none());

    // Relabelled to match: it starts. Relabelled away: it stops.
    w.edit("compositecontrollers", "", "ignoreds", |c| {
        c["metadata"]["labels"]["controller-group"] = json!("cicd")
    });
    w.until("the relabelled controller's child", || {
        cm("i-ignoreds").is_some()
    })
    .await;
    w.edit("compositecontrollers", "", "selecteds", |c| {
        c["metadata"]["labels"]["controller-group"] = json!("other")
    });
    w.until("a Stopped event on the unselected controller", || {
        w.events_on("CompositeController /selecteds")
            .iter()
            .any(|e| e.note.reason == "Stopped")
    })
    .await;
    let before = w.requests("selecteds", Sync).len();
    w.delete("configmaps", "default", "s-selecteds");
    w.put(
        "selecteds",
        json!({"apiVersion": "example.com/v1", "kind": "Selected", "metadata": {"name": "s2"}}),
    );
    // The running controller meanwhile still answers: its new parent gets a child.
    w.put(
        "ignoreds",
        json!({"apiVersion": "example.com/v1", "kind": "Ignored", "metadata": {"name": "i2"}}),
    );
    w.until("the running controller's new child", || {
        cm("i2-ignoreds").is_some()
    })
    .await;
    assert_eq!(w.requests("selecteds", Sync).len(), before);
    assert!(cm("s2-selecteds").is_none() && cm("s-selecteds").is_none());
}

/// `parentResource.ignoreStatusChanges`: a change of the parent's status alone (another
/// writer's, or the controller's own status write) starts no sync; a spec change still
/// does. The hook's requests, in order, show which parents it saw.
#[tokio::test(start_paused = true)]
async fn ignore_status_changes_skips_syncs_for_status_only_updates_of_the_parent() {
    ignore_status_changes_case(false).await;
}

/// The same for a DecoratorController's `resources[].ignoreStatusChanges`.
#[tokio::test(start_paused = true)]
async fn ignore_status_changes_skips_syncs_for_status_only_updates_of_a_decorated_object() {
    ignore_status_changes_case(true).await;
}

async fn ignore_status_changes_case(decorator: bool) {
    let w = World::start(&[Crd("Quiet", "quiets", true)]).await;
    let object_of = move |req: &Value| -> Value {
        if decorator {
            req["object"].clone()
        } else {
            req["parent"].clone()
        }
    };
    w.answer("quiets", Sync, move |req| {
        let n = object_of(req)["spec"]["n"].clone();
        Ok(if decorator {
            json!({"status": {"observed": n}, "attachments": []})
        } else {
            json!({"status": {"observed": n}, "children": []})
        })
    });
    let resource = json!({"apiVersion": "example.com/v1", "resource": "quiets",
                          "ignoreStatusChanges": true});
    let sync = json!({"sync": {"webhook": {"url": "http://hooks.test/quiets"}}});
    let (kind, spec) = if decorator {
        (
            "DecoratorController",
            json!({"resources": [resource], "hooks": sync}),
        )
    } else {
        (
            "CompositeController",
            json!({"generateSelector": true, "parentResource": resource, "hooks": sync}),
        )
    };
    w.controller(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": kind,
                        "metadata": {"name": "quiets"}, "spec": spec}),
    );
    w.put(
        "quiets",
        json!({"apiVersion": "example.com/v1", "kind": "Quiet", "metadata": {"name": "q"}, "spec": {"n": 1}}),
    );
    let observed = || {
        w.get("quiets", "default", "q")
            .map(|p| p["status"]["observed"].clone())
    };
    w.until("the first status written", || observed() == Some(json!(1)))
        .await;
    // Another writer changes the status alone, and a second passes on the runtime's clock
    // (whatever that started has run); then the spec: its sync is the next one the hook
    // sees.
    w.edit("quiets", "default", "q", |p| {
        p["status"]["note"] = json!("from elsewhere")
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.edit("quiets", "default", "q", |p| p["spec"]["n"] = json!(2));
    w.until("the spec change synced", || observed() == Some(json!(2)))
        .await;
    let seen: Vec<(Value, Value)> = w
        .requests("quiets", Sync)
        .iter()
        .map(|r| {
            let object = object_of(r);
            (
                object["spec"]["n"].clone(),
                object["status"]["note"].clone(),
            )
        })
        .collect();
    assert!(
        !seen.iter().any(|(n, note)| *n == 1 && !note.is_null()),
        "a status-only change started a sync: {seen:?}"
    );
    assert!(seen.iter().any(|(n, _)| *n == 2), "{seen:?}");
}

/// A webhook answering 429 with a Retry-After is called again no sooner than it asked
/// (on the runtime's clock), and that is not a sync error: no Event; the journal keeps the
/// wait and its real delay.
#[tokio::test(start_paused = true)]
async fn a_webhook_answering_429_is_retried_after_retry_after_without_a_sync_error() {
    let w = World::start(&[Crd("Busy", "busies", true)]).await;
    let retry_after = Duration::from_secs(2);
    // When each sync request arrived.
    let arrivals = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let seen = Arc::clone(&arrivals);
    w.answer("busies", Sync, move |req| {
        let mut seen = seen.lock().expect("arrivals");
        seen.push(Instant::now());
        if seen.len() == 1 {
            return Err(HookError::TooManyRequests {
                hook: Sync,
                url: "http://hooks.test/busies/sync".into(),
                retry_after,
            });
        }
        let name = str_of(&req["parent"]["metadata"]["name"]);
        Ok(
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": format!("{name}-later")}}]}),
        )
    });
    let mut controller = simple_controller(
        "busies",
        ("v1", "configmaps"),
        json!({"generateSelector": true}),
    );
    controller["spec"]["childResources"][0]["updateStrategy"]["method"] = json!("OnDelete");
    w.controller(controller);
    w.put(
        "busies",
        json!({"apiVersion": "example.com/v1", "kind": "Busy", "metadata": {"name": "b"}}),
    );
    w.until("the child after the retry", || {
        w.get("configmaps", "default", "b-later").is_some()
    })
    .await;
    let arrivals = arrivals.lock().expect("arrivals").clone();
    let waited = arrivals[1] - arrivals[0];
    assert!(
        waited >= retry_after && waited < retry_after * 2,
        "the retry came {waited:?} after the 429 asking for {retry_after:?}"
    );
    assert!(
        w.events_on("Busy default/b")
            .iter()
            .all(|e| e.note.reason != "SyncError"),
        "a 429 is not an error: {:?}",
        w.cluster.events()
    );
    // The journal tells why the parent waited, and the real delay of its retry.
    let waits: Vec<u64> = w
        .journal
        .events()
        .iter()
        .filter_map(|e| match e {
            LambdaEvent::SyncFailed {
                error, retry_in_ms, ..
            } if error.contains("too many requests") => Some(*retry_in_ms),
            _ => None,
        })
        .collect();
    assert_eq!(waits, [2000], "{:#?}", w.journal.events());
}

/// Controller objects the registry cannot run are refused with metacontroller's messages,
/// as a `SyncError` Event on the controller object and a journaled refusal naming it: a
/// parent CRD without the status subresource, a controller without hooks, rolling update
/// methods for a cluster-scoped parent. The registry keeps running the others.
#[tokio::test]
async fn controllers_that_cannot_run_are_refused_with_upstream_messages() {
    let w = World::start(&[Crd("Fleet", "fleets", false), Crd("Plain", "plains", true)]).await;
    // The parent's CRD without the status subresource.
    w.edit(
        "customresourcedefinitions",
        "",
        "plains.example.com",
        |crd| crd["spec"]["versions"][0]["subresources"] = json!({}),
    );
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "plains"},
        "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": "plains"},
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/plains"}}}
        }
    }));
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "hookless"},
        "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "fleets"}}
    }));
    w.controller(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "fleets"},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": "example.com/v1", "resource": "fleets"},
            "childResources": [
                {"apiVersion": "v1", "resource": "configmaps"},
                {"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "RollingRecreate"}}
            ],
            "hooks": {"sync": {"webhook": {"url": "http://hooks.test/fleets"}}}
        }
    }));
    let says = |controller: &str, says: &dyn Fn(&str) -> bool| {
        w.events_on(&format!("CompositeController /{controller}"))
            .iter()
            .any(|e| {
                e.note.type_ == "Warning" && e.note.reason == "SyncError" && says(&e.note.message)
            })
    };
    w.until("a SyncError event on each refused controller", || {
        says("plains", &|m| {
            m.contains("does not have subresource 'Status' enabled")
        }) && says("hookless", &|m| {
            m == "CompositeController hookless: spec: hooks: no hooks defined"
        }) && says("fleets", &|m| {
            m.contains("spec.childResources[1].updateStrategy.method: RollingRecreate")
                && m.contains("cluster-scoped")
        })
    })
    .await;
    let lines: Vec<String> = w.journal.events().iter().map(LambdaEvent::line).collect();
    for name in ["plains", "hookless", "fleets"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("CompositeController {name} refused: "))),
            "{lines:#?}"
        );
    }
    // The registry runs the controllers it can.
    w.answer("greetings", Sync, |req| {
        let name = str_of(&req["parent"]["metadata"]["name"]);
        Ok(json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": format!("{name}-cm"), "namespace": "default"}}]}))
    });
    let mut running = simple_controller(
        "fleets",
        ("v1", "configmaps"),
        json!({"generateSelector": true}),
    );
    running["metadata"]["name"] = json!("greetings");
    w.controller(running);
    w.put(
        "fleets",
        json!({"apiVersion": "example.com/v1", "kind": "Fleet", "metadata": {"name": "f"}}),
    );
    w.until("the running controller's child", || {
        w.get("configmaps", "default", "f-cm").is_some()
    })
    .await;
}
