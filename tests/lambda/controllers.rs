//! Lambda controllers end to end: a real sandbox API server, `bosun run`, and webhooks
//! served by this test on 127.0.0.1. Each test plays one of metacontroller's example or
//! integration scenarios with hooks written here.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::webhooks::{Hooks, get, post_ok};
use crate::common::{Operator, Sandbox, wait_for, workdir};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// A namespaced CRD `<plural>.example.com` with (or without) the status subresource.
fn crd(kind: &str, plural: &str, status: bool, scope: &str) -> Value {
    let mut version = json!({
        "name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
    });
    if status {
        version["subresources"] = json!({"status": {}});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "versions": [version]
        }
    })
}

/// Starts bosun with the modules switched off: only the lambda controllers work.
fn bosun(sb: &Sandbox, work: &std::path::Path, extra: &[(&str, &str)]) -> Operator {
    let mut env = vec![("BOSUN_MODULES", "false")];
    env.extend_from_slice(extra);
    Operator::start_with(sb, &work.join("global-hooks"), work, &env)
}

fn events_for(sb: &Sandbox, ns: &str, name: &str) -> Vec<Value> {
    let (_, list) = sb.get(&format!("/api/v1/namespaces/{ns}/events"));
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .collect()
}

fn wait_crd_served(sb: &Sandbox, path: &str) {
    wait_for(&format!("{path} served"), WAIT, || sb.get(path).0 == 200);
}

#[test]
fn composite_controller_creates_children_writes_status_and_follows_changes() {
    let sb = Sandbox::start();
    let work = workdir();
    // The hook: one ConfigMap per parent, carrying spec.message; status counts children.
    let hooks = Hooks::serve(|_, req| {
        let parent = &req["parent"];
        let name = parent["metadata"]["name"].as_str().unwrap_or_default();
        let children = req["children"]["ConfigMap.v1"]
            .as_object()
            .map_or(0, |m| m.len());
        (
            200,
            json!({
                "status": {"children": children},
                "children": [{
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{name}-cm")},
                    "data": {"message": parent["spec"]["message"]}
                }]
            }),
        )
    });
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("Greeting", "greetings", true, "Namespaced"),
    );
    wait_crd_served(&sb, "/apis/example.com/v1/greetings");
    let _op = bosun(&sb, work.path(), &[]);
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "greetings"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "greetings"},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/greetings",
        &json!({"apiVersion": "example.com/v1", "kind": "Greeting", "metadata": {"name": "hello"}, "spec": {"message": "hi"}}),
    );
    let cm_path = "/api/v1/namespaces/default/configmaps/hello-cm";
    wait_for("the child ConfigMap", WAIT, || get(&sb, cm_path).is_some());
    let cm = get(&sb, cm_path).expect("child");
    assert_eq!(cm["data"]["message"], "hi");
    let parent = get(
        &sb,
        "/apis/example.com/v1/namespaces/default/greetings/hello",
    )
    .expect("parent");
    let owner = &cm["metadata"]["ownerReferences"][0];
    assert_eq!(owner["uid"], parent["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    assert_eq!(
        cm["metadata"]["labels"]["controller-uid"],
        parent["metadata"]["uid"]
    );
    assert!(
        cm["metadata"]["annotations"]["metacontroller.k8s.io/last-applied-configuration"]
            .is_string(),
        "{cm}"
    );
    wait_for(
        "status with observedGeneration and the hook's count",
        WAIT,
        || {
            let p = get(
                &sb,
                "/apis/example.com/v1/namespaces/default/greetings/hello",
            )
            .unwrap_or_default();
            p["status"]["observedGeneration"] == p["metadata"]["generation"]
                && p["status"]["children"] == 1
        },
    );

    // The debug view shows the last sync: request and answer digests, what was planned.
    wait_for("the last sync in /lambda/controllers", WAIT, || {
        let view = common::run_ok(&mut common::debug_cli(
            &work.path().join("debug.socket"),
            &["raw", "/lambda/controllers.json"],
        ));
        let view: Value = serde_json::from_str(&view).unwrap_or(Value::Null);
        let last = &view["controllers"][0]["lastSyncs"]["default/hello"];
        last["planned"] == json!(["ConfigMap.v1 default/hello-cm"])
            && last["request"].is_string()
            && last["answer"].is_string()
    });

    // The controller and the deployer are actors: `bosun actors` shows their mailboxes
    // (parents and items waiting, syncs in flight, the last syncs).
    // The deployer registers once it has started, after the lambda controllers.
    let mut actors = String::new();
    wait_for(
        "the controller and the deployer in bosun actors",
        WAIT,
        || {
            actors = common::run_ok(&mut common::debug_cli(
                &work.path().join("debug.socket"),
                &["actors"],
            ));
            actors.contains("Actor 'lambda/CompositeController/greetings' (lambda-controller)")
                && actors.contains("Actor 'deployer' (deployer)")
        },
    );
    // With the modules switched off, no modules' engine runs: no queue, no global hooks
    // actor, no modules' journal, and their endpoints say why.
    assert!(
        !actors.contains("Actor 'queue/") && !actors.contains("Actor 'global-hooks"),
        "{actors}"
    );
    let off = common::run_err(&mut common::debug_cli(
        &work.path().join("debug.socket"),
        &["queue", "list"],
    ));
    assert!(
        off.contains("the modules are switched off (BOSUN_MODULES=false)"),
        "{off}"
    );
    let journal: Vec<String> = std::fs::read_dir(work.path().join("journal"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        journal.iter().all(|f| f == "lambda" || f == "deployer"),
        "only the lambda and deployer journals: {journal:?}"
    );
    let actor = common::run_ok(&mut common::debug_cli(
        &work.path().join("debug.socket"),
        &["raw", "/actors/lambda/CompositeController/greetings.json"],
    ));
    let actor: Value = serde_json::from_str(&actor).unwrap_or(Value::Null);
    assert!(actor["counters"]["handled"].as_u64() >= Some(1), "{actor}");
    assert!(
        actor["recent"]
            .as_array()
            .is_some_and(|r| r.iter().any(|h| h["summary"] == "sync default/hello")),
        "{actor}"
    );

    // A changed spec reaches the child in place.
    let mut parent = get(
        &sb,
        "/apis/example.com/v1/namespaces/default/greetings/hello",
    )
    .expect("parent");
    parent["spec"]["message"] = json!("hello again");
    let (code, answer) = sb.put(
        "/apis/example.com/v1/namespaces/default/greetings/hello",
        &parent,
    );
    assert_eq!(code, 200, "{answer}");
    wait_for("the child updated in place", WAIT, || {
        get(&sb, cm_path).is_some_and(|c| c["data"]["message"] == "hello again")
    });

    // A child deleted by someone else comes back.
    let (code, _) = sb.request("DELETE", cm_path, "", "");
    assert_eq!(code, 200);
    wait_for("the child recreated", WAIT, || {
        get(&sb, cm_path).is_some_and(|c| c["metadata"]["uid"] != cm["metadata"]["uid"])
    });

    // Deleting the parent removes the child (garbage collection, background).
    let (code, _) = sb.request(
        "DELETE",
        "/apis/example.com/v1/namespaces/default/greetings/hello",
        "",
        "",
    );
    assert_eq!(code, 200);
    wait_for("the child garbage-collected", WAIT, || {
        get(&sb, cm_path).is_none()
    });
}

#[test]
fn finalize_hook_runs_before_the_parent_goes() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|path, req| {
        if path == "/finalize" {
            assert_eq!(req["finalizing"], true);
            // Done once the child is gone.
            let left = req["children"]["ConfigMap.v1"]
                .as_object()
                .map_or(0, |m| m.len());
            return (200, json!({"children": [], "finalized": left == 0}));
        }
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        (
            200,
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-f")}}]}),
        )
    });
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("Job2", "job2s", true, "Namespaced"),
    );
    wait_crd_served(&sb, "/apis/example.com/v1/job2s");
    let op = bosun(&sb, work.path(), &[]);
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "job2s"},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "job2s"},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "hooks": {
                    "sync": {"webhook": {"url": format!("{}/sync", hooks.url)}},
                    "finalize": {"webhook": {"url": format!("{}/finalize", hooks.url)}}
                }
            }
        }),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/job2s",
        &json!({"apiVersion": "example.com/v1", "kind": "Job2", "metadata": {"name": "j"}}),
    );
    let parent_path = "/apis/example.com/v1/namespaces/default/job2s/j";
    op.wait("the finalizer and the child", WAIT, || {
        let p = get(&sb, parent_path).unwrap_or_default();
        p["metadata"]["finalizers"].as_array().is_some_and(|f| {
            f.iter()
                .any(|f| f == "metacontroller.io/compositecontroller-job2s")
        }) && get(&sb, "/api/v1/namespaces/default/configmaps/j-f").is_some()
    });
    let (code, _) = sb.request("DELETE", parent_path, "", "");
    assert_eq!(code, 200);
    wait_for("the parent gone after finalize", WAIT, || {
        get(&sb, parent_path).is_none()
    });
    assert!(
        get(&sb, "/api/v1/namespaces/default/configmaps/j-f").is_none(),
        "the finalize hook's empty children were applied"
    );
    assert!(!hooks.calls("/finalize").is_empty());
}

#[test]
fn a_parent_without_the_status_subresource_is_refused_with_the_upstream_message() {
    let sb = Sandbox::start();
    let work = workdir();
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("Plain", "plains", false, "Namespaced"),
    );
    wait_crd_served(&sb, "/apis/example.com/v1/plains");
    let op = bosun(&sb, work.path(), &[]);
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "plains"},
            "spec": {
                "parentResource": {"apiVersion": "example.com/v1", "resource": "plains"},
                "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:9/sync"}}}
            }
        }),
    );
    op.wait("a SyncError event on the controller", WAIT, || {
        events_for(&sb, "default", "plains").iter().any(|e| {
            e["reason"] == "SyncError"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("does not have subresource 'Status' enabled"))
        })
    });
    // A controller without hooks is refused too, naming the field; bosun keeps running.
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "hookless"},
            "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "plains"}}
        }),
    );
    op.wait("a SyncError event naming the missing hooks", WAIT, || {
        events_for(&sb, "default", "hookless").iter().any(|e| {
            e["message"].as_str()
                == Some("CompositeController hookless: spec: hooks: no hooks defined")
        })
    });
    // The journal's append and the Event are made apart: the Event may be seen first.
    let journal = || {
        common::run_ok(
            std::process::Command::new(common::bosun_bin())
                .args(["journal", "--journal-dir"])
                .arg(work.path().join("journal"))
                .arg("lambda"),
        )
    };
    op.wait("the refusal in the lambda journal", WAIT, || {
        journal().contains("CompositeController hookless refused")
    });
}

#[test]
fn bad_hook_answers_are_events_on_the_parent_and_bosun_keeps_going() {
    let sb = Sandbox::start();
    let work = workdir();
    // The answer depends on the parent's name.
    let hooks = Hooks::serve(|_, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        match name {
            "not-json" => (200, Value::String("<html>oops</html>".into())),
            "no-kind" => (
                200,
                json!({"children": [{"apiVersion": "v1", "metadata": {"name": "x"}}]}),
            ),
            "server-error" => (500, Value::String("internal trouble".into())),
            "bad-labels" => (
                200,
                json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bl", "labels": {"app": "other"}}}]}),
            ),
            _ => (
                200,
                json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-ok"), "labels": {"app": "fine"}}}]}),
            ),
        }
    });
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("Probe", "probes", true, "Namespaced"),
    );
    wait_crd_served(&sb, "/apis/example.com/v1/probes");
    let op = bosun(&sb, work.path(), &[]);
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "probes"},
            "spec": {
                "parentResource": {"apiVersion": "example.com/v1", "resource": "probes"},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}
            }
        }),
    );
    let expected = [
        ("not-json", "not valid JSON"),
        ("no-kind", "Object 'Kind' is missing"),
        ("server-error", "unsupported status code: 500"),
        ("bad-labels", "don't match parent selector"),
    ];
    for (name, _) in expected.iter().chain([("good", "")].iter()) {
        post_ok(
            &sb,
            "/apis/example.com/v1/namespaces/default/probes",
            &json!({"apiVersion": "example.com/v1", "kind": "Probe", "metadata": {"name": name},
                    "spec": {"selector": {"matchLabels": {"app": "fine"}}}}),
        );
    }
    for (name, message) in expected {
        op.wait(
            &format!("a SyncError event on {name} naming {message:?}"),
            WAIT,
            || {
                events_for(&sb, "default", name).iter().any(|e| {
                    e["reason"] == "SyncError"
                        && e["type"] == "Warning"
                        && e["message"].as_str().is_some_and(|m| m.contains(message))
                })
            },
        );
    }
    // The failing parents are retried, and each retry fails alike: as with metacontroller
    // (client-go's recorder), that is one Event whose count rises, not an Event per retry.
    let sync_errors = || -> Vec<Value> {
        events_for(&sb, "default", "server-error")
            .into_iter()
            .filter(|e| e["reason"] == "SyncError")
            .collect()
    };
    op.wait("the SyncError event counted three times", WAIT, || {
        sync_errors().iter().any(|e| e["count"].as_u64() >= Some(3))
    });
    let events = sync_errors();
    assert_eq!(
        events.len(),
        1,
        "one Event for identical failures: {events:#?}"
    );
    assert_ne!(events[0]["firstTimestamp"], Value::Null, "{events:#?}");
    // The journal keeps every failure, counted, and the real next retry.
    let journal_of = |parent: &str| {
        common::run_ok(
            std::process::Command::new(common::bosun_bin())
                .args(["journal", "--journal-dir"])
                .arg(work.path().join("journal"))
                .args(["lambda", "--parent", parent]),
        )
    };
    op.wait("three failures of server-error journaled", WAIT, || {
        journal_of("default/server-error")
            .lines()
            .filter(|l| l.contains("sync failed") && l.contains("unsupported status code: 500"))
            .count()
            >= 3
    });
    let journal = journal_of("default/server-error");
    let head = journal.lines().next().unwrap_or_default();
    assert!(
        head.starts_with("default/server-error: NOT converged: the last sync failed:")
            && head.contains("failures in a row; the next retry ")
            && head.contains(" ms after it)"),
        "{journal}"
    );
    // The good parent converged meanwhile.
    op.wait("the good parent's child", WAIT, || {
        get(&sb, "/api/v1/namespaces/default/configmaps/good-ok").is_some()
    });
    assert!(get(&sb, "/api/v1/namespaces/default/configmaps/bl").is_none());

    // `bosun explain`: the failing parent, live, says it is not converged and when the
    // next retry comes; the good parent's child, offline, names its controller and parent.
    let explain = |args: &[&str]| {
        common::run_ok(
            std::process::Command::new(common::bosun_bin())
                .arg("explain")
                .args(args)
                .env("LOG_LEVEL", "error"),
        )
    };
    let socket = work.path().join("debug.socket").display().to_string();
    let parent = explain(&[
        "Probe/server-error",
        "-n",
        "default",
        "--debug-unix-socket",
        &socket,
    ]);
    assert!(
        parent.starts_with("Probe default/server-error\n")
            && parent.contains("made by: parent of lambda controller probes")
            && parent.contains("now: NOT converged: its last sync failed (")
            && parent.contains("unsupported status code: 500")
            && parent.contains("(live) CompositeController probes: the last sync failed:"),
        "{parent}"
    );
    let journal_dir = work.path().join("journal").display().to_string();
    let child: Value = serde_json::from_str(&explain(&[
        "ConfigMap/good-ok",
        "--journal-dir",
        &journal_dir,
        "-o",
        "json",
    ]))
    .expect("explain -o json");
    assert_eq!(
        child["madeBy"],
        json!(["lambda controller probes, as a child of parent default/good"]),
        "{child:#}"
    );
    assert!(
        child["history"][0]["what"].as_str().is_some_and(|w| w
            .starts_with("created by probes: the sync hook's answer ")
            && w.ends_with(" for parent default/good asked for it")),
        "{child:#}"
    );
    assert!(
        child["now"][0].as_str().is_some_and(
            |n| n.starts_with("converged: its parent default/good's last sync applied")
        ),
        "{child:#}"
    );
    // Another kind of the same name as a parent is not that parent, offline or live.
    let namesake = explain(&[
        "ConfigMap/good",
        "-n",
        "default",
        "--journal-dir",
        &journal_dir,
    ]);
    assert!(
        !namesake.contains("parent of lambda controller"),
        "ConfigMap default/good is not Probe default/good: {namesake}"
    );
    let namesake = explain(&[
        "ConfigMap/good",
        "-n",
        "default",
        "--debug-unix-socket",
        &socket,
    ]);
    assert!(
        !namesake.contains("CompositeController probes"),
        "ConfigMap default/good is not Probe default/good: {namesake}"
    );
    let good = explain(&["Probe/good", "-n", "default", "--journal-dir", &journal_dir]);
    assert!(
        good.contains("made by: parent of lambda controller probes"),
        "{good}"
    );
    // The lambda journal replayed: the failing parent's state, counted.
    let replayed: Value = serde_json::from_str(&common::run_ok(
        std::process::Command::new(common::bosun_bin())
            .args([
                "journal",
                "--journal-dir",
                &journal_dir,
                "replay",
                "--journal",
                "lambda",
                "-o",
                "json",
            ])
            .env("LOG_LEVEL", "error"),
    ))
    .expect("replay -o json");
    let failing = &replayed["probes"]["parents"]["default/server-error"];
    assert!(
        failing["converged"] == false
            && failing["failures"].as_u64() >= Some(3)
            && failing["error"]
                .as_str()
                .is_some_and(|e| e.contains("unsupported status code: 500")),
        "{replayed:#}"
    );
    assert_eq!(replayed["probes"]["state"], "running", "{replayed:#}");
    let refused = common::run_err(
        std::process::Command::new(common::bosun_bin())
            .args([
                "journal",
                "--journal-dir",
                &journal_dir,
                "replay",
                "--until",
                "3",
            ])
            .env("LOG_LEVEL", "error"),
    );
    assert!(
        refused.contains("a sequence number belongs to one journal"),
        "{refused}"
    );
    let unknown = explain(&["Secret/nothing", "--journal-dir", &journal_dir]);
    assert!(unknown.contains("nothing journaled about it"), "{unknown}");
}

#[test]
fn decorator_controller_sets_labels_and_attachments_and_finalizes_when_unselected() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|path, req| {
        let name = req["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        if path == "/finalize" {
            return (
                200,
                json!({"labels": {"decorated": null}, "attachments": [], "finalized": true}),
            );
        }
        (
            200,
            json!({
                "labels": {"decorated": "yes"},
                "annotations": {"note": "seen"},
                "attachments": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{name}-secret")},
                                 "stringData": {"k": "v"}}]
            }),
        )
    });
    let op = bosun(&sb, work.path(), &[]);
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/decoratorcontrollers",
    );
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/decoratorcontrollers",
        &json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "decorate"},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "configmaps",
                               "labelSelector": {"matchLabels": {"decorate": "please"}}}],
                "attachments": [{"apiVersion": "v1", "resource": "secrets"}],
                "hooks": {
                    "sync": {"webhook": {"url": format!("{}/sync", hooks.url)}},
                    "finalize": {"webhook": {"url": format!("{}/finalize", hooks.url)}}
                }
            }
        }),
    );
    post_ok(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target", "labels": {"decorate": "please"}}}),
    );
    post_ok(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bystander"}}),
    );
    let target = "/api/v1/namespaces/default/configmaps/target";
    wait_for(
        "labels, annotations, finalizer and the attachment",
        WAIT,
        || {
            let t = get(&sb, target).unwrap_or_default();
            t["metadata"]["labels"]["decorated"] == "yes"
                && t["metadata"]["annotations"]["note"] == "seen"
                && get(&sb, "/api/v1/namespaces/default/secrets/target-secret").is_some()
        },
    );
    let secret = get(&sb, "/api/v1/namespaces/default/secrets/target-secret").expect("attachment");
    assert_eq!(
        secret["metadata"]["annotations"]["metacontroller.k8s.io/decorator-controller"],
        "decorate"
    );
    let t = get(&sb, target).expect("target");
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["uid"],
        t["metadata"]["uid"]
    );
    assert!(
        t["metadata"]["finalizers"].as_array().is_some_and(|f| f
            .iter()
            .any(|f| f == "metacontroller.io/decoratorcontroller-decorate")),
        "{t}"
    );
    assert!(
        get(&sb, "/api/v1/namespaces/default/configmaps/bystander").expect("bystander")["metadata"]
            ["labels"]
            .is_null()
    );

    // No longer selected: the finalize hook removes the label and the finalizer goes.
    let mut t = t;
    t["metadata"]["labels"]["decorate"] = json!("no-thanks");
    let (code, answer) = sb.put(target, &t);
    assert_eq!(code, 200, "{answer}");
    wait_for("the finalize hook's answer applied", WAIT, || {
        let t = get(&sb, target).unwrap_or_default();
        t["metadata"]["labels"]["decorated"].is_null()
            && !t["metadata"]["finalizers"].as_array().is_some_and(|f| {
                f.iter()
                    .any(|f| f == "metacontroller.io/decoratorcontroller-decorate")
            })
    });
    op.wait("the attachment removed", WAIT, || {
        get(&sb, "/api/v1/namespaces/default/secrets/target-secret").is_none()
    });
}

/// Registers a CompositeController `name` over `<plural>.example.com` with ConfigMap
/// children (`method`) and the given hooks.
fn composite(sb: &Sandbox, name: &str, plural: &str, method: &str, hooks: Value) {
    post_ok(
        sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": name},
            "spec": {
                "generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": plural},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": method}}],
                "hooks": hooks
            }
        }),
    );
}

#[test]
fn server_side_apply_writes_children_with_the_field_manager_and_keeps_others_fields() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = Hooks::serve(|_, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let v = req["parent"]["spec"]["v"].clone();
        (
            200,
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": format!("{name}-ssa")}, "data": {"v": v}}]}),
        )
    });
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("Ssa", "ssas", true, "Namespaced"),
    );
    wait_crd_served(&sb, "/apis/example.com/v1/ssas");
    let op = bosun(
        &sb,
        work.path(),
        &[
            ("BOSUN_APPLY_STRATEGY", "server-side-apply"),
            ("BOSUN_APPLY_STRATEGY_SSA_FIELD_MANAGER", "lambda-test"),
        ],
    );
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    composite(
        &sb,
        "ssas",
        "ssas",
        "InPlace",
        json!({"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/ssas",
        &json!({"apiVersion": "example.com/v1", "kind": "Ssa", "metadata": {"name": "s"}, "spec": {"v": "1"}}),
    );
    let cm_path = "/api/v1/namespaces/default/configmaps/s-ssa";
    op.wait("the child applied", WAIT, || {
        get(&sb, cm_path).is_some_and(|c| c["data"]["v"] == "1")
    });
    let cm = get(&sb, cm_path).expect("child");
    assert!(
        cm["metadata"]["managedFields"].as_array().is_some_and(|m| m
            .iter()
            .any(|f| f["manager"] == "lambda-test" && f["operation"] == "Apply")),
        "{cm}"
    );
    assert!(
        cm["metadata"]["annotations"]["metacontroller.k8s.io/last-applied-configuration"].is_null()
    );
    // Another writer's field stays; ours follows the parent.
    let mut cm = cm;
    cm["data"]["other"] = json!("kept");
    let (code, answer) = sb.put(cm_path, &cm);
    assert_eq!(code, 200, "{answer}");
    let mut parent = get(&sb, "/apis/example.com/v1/namespaces/default/ssas/s").expect("parent");
    parent["spec"]["v"] = json!("2");
    let (code, answer) = sb.put("/apis/example.com/v1/namespaces/default/ssas/s", &parent);
    assert_eq!(code, 200, "{answer}");
    op.wait("the child updated by apply", WAIT, || {
        get(&sb, cm_path).is_some_and(|c| c["data"]["v"] == "2" && c["data"]["other"] == "kept")
    });
}

#[test]
fn a_webhook_answering_429_is_retried_after_retry_after_without_a_sync_error() {
    let sb = Sandbox::start();
    let work = workdir();
    // When each sync request arrived, on this process's clock (the fake's own).
    let arrivals = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let seen = arrivals.clone();
    let retry_after = Duration::from_secs(2);
    let hooks = Hooks::serve_with_headers(move |_, req| {
        let mut seen = seen.lock().expect("arrivals");
        seen.push(Instant::now());
        // The first answer is 429 with Retry-After: 2; then a child.
        if seen.len() == 1 {
            return (
                429,
                vec![("retry-after", retry_after.as_secs().to_string())],
                json!({"message": "slow down"}),
            );
        }
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        (
            200,
            vec![],
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-later")}}]}),
        )
    });
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("Busy", "busies", true, "Namespaced"),
    );
    wait_crd_served(&sb, "/apis/example.com/v1/busies");
    let op = bosun(&sb, work.path(), &[]);
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    composite(
        &sb,
        "busies",
        "busies",
        "OnDelete",
        json!({"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/busies",
        &json!({"apiVersion": "example.com/v1", "kind": "Busy", "metadata": {"name": "b"}}),
    );
    op.wait("the child after the retry", WAIT, || {
        get(&sb, "/api/v1/namespaces/default/configmaps/b-later").is_some()
    });
    // The retry came no sooner than Retry-After asked: both instants are the fake's.
    let arrivals = arrivals.lock().expect("arrivals").clone();
    assert!(arrivals.len() >= 2, "{arrivals:?}");
    let waited = arrivals[1] - arrivals[0];
    assert!(
        waited >= retry_after,
        "the retry came {waited:?} after the 429, before its Retry-After of {retry_after:?}"
    );
    assert!(
        events_for(&sb, "default", "b")
            .iter()
            .all(|e| e["reason"] != "SyncError"),
        "a 429 is not an error: {:?}",
        events_for(&sb, "default", "b")
    );
}

#[test]
fn a_finalize_interrupted_by_kill_9_completes_after_restart() {
    let sb = Sandbox::start();
    let work = workdir();
    // The finalize hook says "not yet" until the test opens the gate.
    let gate = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let open = gate.clone();
    let hooks = Hooks::serve(move |path, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        if path == "/finalize" {
            let done = open.load(std::sync::atomic::Ordering::SeqCst);
            return (
                200,
                json!({"children": [], "finalized": done, "resyncAfterSeconds": 0.2}),
            );
        }
        (
            200,
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-k")}}]}),
        )
    });
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("Kill", "kills", true, "Namespaced"),
    );
    wait_crd_served(&sb, "/apis/example.com/v1/kills");
    let mut op = bosun(&sb, work.path(), &[]);
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    composite(
        &sb,
        "kills",
        "kills",
        "InPlace",
        json!({"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}},
               "finalize": {"webhook": {"url": format!("{}/finalize", hooks.url)}}}),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/kills",
        &json!({"apiVersion": "example.com/v1", "kind": "Kill", "metadata": {"name": "k"}}),
    );
    let parent_path = "/apis/example.com/v1/namespaces/default/kills/k";
    op.wait("the child", WAIT, || {
        get(&sb, "/api/v1/namespaces/default/configmaps/k-k").is_some()
    });
    let (code, _) = sb.request("DELETE", parent_path, "", "");
    assert_eq!(code, 200);
    op.wait(
        "finalizing under way: the child removed, the parent still held",
        WAIT,
        || {
            get(&sb, "/api/v1/namespaces/default/configmaps/k-k").is_none()
                && hooks.calls("/finalize").len() >= 2
        },
    );
    op.kill9();
    assert!(
        get(&sb, parent_path).is_some(),
        "the finalizer holds the parent while bosun is down"
    );
    gate.store(true, std::sync::atomic::Ordering::SeqCst);
    op.spawn();
    op.wait("the parent gone after the restart", WAIT, || {
        get(&sb, parent_path).is_none()
    });
    assert!(
        get(&sb, "/api/v1/namespaces/default/configmaps/k-k").is_none(),
        "nothing recreated"
    );
}

/// A free loopback port (bound, then released for bosun to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Invoked as `/usr/bin/metacontroller` (the image's link to bosun) with the arguments of
/// metacontroller's production manifest and no subcommand, bosun runs the lambda controllers
/// alone, as metacontroller would; a flag repeated (a chart's own, then the user's) takes
/// the last value.
#[test]
fn invoked_as_metacontroller_with_its_manifest_s_arguments_bosun_is_metacontroller() {
    let sb = Sandbox::start();
    let work = workdir();
    let link = work.path().join("metacontroller");
    std::os::unix::fs::symlink(common::bosun_bin(), &link).expect("link");
    let (metrics, probes) = (free_port(), free_port());
    let hooks = Hooks::serve(|_, _| (200, json!({"status": {"seen": true}, "children": []})));
    sb.create_crd(&crd("Greeting", "greetings", true, "Namespaced"));
    // Leader election in a namespace of its own, as metacontroller's flags ask for it.
    post_ok(
        &sb,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elections"}}),
    );
    let log = std::fs::File::create(work.path().join("metacontroller.log")).expect("log");
    let child = std::process::Command::new(&link)
        .args([
            "--leader-election",
            "--leader-election-namespace=elections",
            "--zap-log-level=4",
            // Troubleshooting as metacontroller's docs advise: 6 logs the hooks' bodies.
            "--zap-log-level=6",
            "--discovery-interval=20s",
            "--discovery-interval=25s",
            &format!("--metrics-address=127.0.0.1:{metrics}"),
            &format!("--health-probe-bind-address=127.0.0.1:{probes}"),
        ])
        .arg(format!("--kubeconfig={}", sb.kubeconfig.display()))
        .env("BOSUN_JOURNAL_DIR", work.path().join("journal"))
        .env("ADDON_OPERATOR_TMP_DIR", work.path().join("tmp"))
        .env("DEBUG_UNIX_SOCKET", work.path().join("debug.socket"))
        .env("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1")
        .env("ADDON_OPERATOR_LISTEN_PORT", "0")
        .env("BOSUN_HA_LISTEN", "127.0.0.1:0")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start bosun as metacontroller");
    let _child = common::Killed(child);
    let logs =
        || std::fs::read_to_string(work.path().join("metacontroller.log")).unwrap_or_default();
    let at = |port: u16| format!("127.0.0.1:{port}");
    wait_for("the probe listener", WAIT, || {
        logs().contains("(--health-probe-bind-address)")
    });
    wait_for("/readyz on the probe address", WAIT, || {
        common::http_raw(&at(probes), "GET", "/readyz", "", b"").0 == 200
    });
    assert_eq!(
        common::http_raw(&at(metrics), "GET", "/metrics", "", b"").0,
        200
    );
    wait_for("the lambda controllers running", WAIT, || {
        logs().contains("lambda controllers running")
    });
    // The Lease is metacontroller's, in the namespace the flag names, held by this replica.
    let lease = get(
        &sb,
        "/apis/coordination.k8s.io/v1/namespaces/elections/leases/metacontroller",
    )
    .expect("the Lease metacontroller in the namespace elections");
    assert!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| !h.is_empty()),
        "{lease}"
    );
    assert!(
        get(
            &sb,
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/metacontroller"
        )
        .is_none(),
        "no Lease in the default namespace"
    );
    let logs_now = logs();
    assert!(logs_now.contains("modules switched off"), "{logs_now}");
    assert!(
        !logs_now.contains("deployer running"),
        "the deployer is off: {logs_now}"
    );
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    post_ok(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
        &json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "greetings"},
            "spec": {"generateSelector": true,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "greetings"},
                "hooks": {"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}}}),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/greetings",
        &json!({"apiVersion": "example.com/v1", "kind": "Greeting", "metadata": {"name": "traced"}}),
    );
    wait_for("the hook's request and answer in the log", WAIT, || {
        let logs = logs();
        logs.lines()
            .any(|l| l.contains("webhook request") && l.contains("traced"))
            && logs
                .lines()
                .any(|l| l.contains("webhook response") && l.contains("seen"))
    });
}

/// metacontroller's own arguments start bosun unchanged (the production manifest's
/// `--discovery-interval=20s`, a `--zap-log-level`, and the rest of its flags), with the
/// listeners they name serving what metacontroller serves there.
#[test]
fn metacontroller_s_command_line_starts_bosun_and_its_listeners_answer() {
    let sb = Sandbox::start();
    let work = workdir();
    let (metrics, probes) = (free_port(), free_port());
    let metrics_flag = format!("--metrics-address=127.0.0.1:{metrics}");
    let probes_flag = format!("--health-probe-bind-address=127.0.0.1:{probes}");
    let kubeconfig = format!("--kubeconfig={}", sb.kubeconfig.display());
    // A debug address already taken: bosun logs an error about it, a line the log level
    // lets through and the encoder must write as JSON.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_addr = taken.local_addr().expect("addr").to_string();
    let op = Operator::start_with_args(
        &sb,
        &work.path().join("global-hooks"),
        work.path(),
        &[
            ("BOSUN_MODULES", "false"),
            ("DEBUG_HTTP_SERVER_ADDR", &taken_addr),
        ],
        &[
            "--zap-log-level=error",
            "--discovery-interval=20s",
            "--cache-flush-interval=30m",
            "--zap-devel",
            "--zap-encoder=json",
            "--zap-stacktrace-level=error",
            "--zap-time-encoding=rfc3339",
            "--client-go-qps=50",
            "--client-go-burst=100",
            "--workers=2",
            "--events-qps=0.0033",
            "--events-burst=25",
            "--pprof-address=0",
            "--leader-election-resource-lock=leases",
            "--target-label-selector=",
            "--apply-strategy=dynamic-apply",
            &metrics_flag,
            &probes_flag,
            &kubeconfig,
        ],
    );
    let at = |port: u16| format!("127.0.0.1:{port}");
    op.wait("the probe listener", WAIT, || {
        op.logs().contains("(--health-probe-bind-address)")
    });
    op.wait("/readyz on the probe address", WAIT, || {
        common::http_raw(&at(probes), "GET", "/readyz", "", b"").0 == 200
    });
    assert_eq!(
        common::http_raw(&at(probes), "GET", "/healthz", "", b"").0,
        200
    );
    let (code, body) = common::http_raw(&at(metrics), "GET", "/metrics", "", b"");
    assert_eq!(code, 200);
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("kubernetes_client_request"), "{text}");
    // `--zap-encoder=json` and `--zap-log-level=error` win over LOG_TYPE and LOG_LEVEL
    // (debug in the tests): the error about the debug address as a JSON line, and only
    // JSON lines, none below error, once bosun is ready.
    op.wait("the debug address's error, as JSON", WAIT, || {
        op.logs().lines().any(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| {
                v.to_string().contains("cannot listen") && l.contains("\"level\":\"ERROR\"")
            })
        })
    });
    let logs = op.logs();
    let lines: Vec<&str> = logs.lines().filter(|l| l.starts_with('{')).collect();
    assert!(
        lines
            .iter()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "{logs}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.contains("\"level\":\"ERROR\"") || l.contains("\"level\":\"WARN\"")),
        "{logs}"
    );
    assert!(
        !logs
            .lines()
            .any(|l| l.contains(" INFO ") || l.contains(" DEBUG ")),
        "no text lines: {logs}"
    );
}

/// A gzipped `profile.proto` as `go tool pprof` reads it: its sample types by name, and
/// its functions' names.
fn decode_profile(body: &[u8]) -> (Vec<(String, String)>, Vec<String>, pprof::protos::Profile) {
    use pprof::protos::Message as _;
    use std::io::Read as _;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut raw)
        .expect("a gzipped profile");
    let profile = pprof::protos::Profile::decode(raw.as_slice()).expect("profile.proto");
    let s = |i: i64| profile.string_table[i as usize].clone();
    let types = profile
        .sample_type
        .iter()
        .map(|t| (s(t.ty), s(t.unit)))
        .collect();
    let names = profile.function.iter().map(|f| s(f.name)).collect();
    (types, names, profile)
}

/// `--pprof-address` serves metacontroller's `/debug/pprof/` paths: the heap held now and
/// a CPU profile over the seconds asked for, as gzipped `profile.proto` naming bosun's own
/// functions, the heap as Go's text with `debug=1`, and a clear 404 for Go-only profiles.
#[test]
fn the_pprof_address_serves_cpu_and_heap_profiles_go_tool_pprof_reads() {
    let sb = Sandbox::start();
    let work = workdir();
    let port = free_port();
    let flag = format!("--pprof-address=127.0.0.1:{port}");
    let op = Operator::start_with_args(
        &sb,
        &work.path().join("global-hooks"),
        work.path(),
        &[("BOSUN_MODULES", "false")],
        &[&flag],
    );
    let at = format!("127.0.0.1:{port}");
    op.wait("the pprof listener", WAIT, || {
        op.logs().contains("(--pprof-address)")
    });
    let (code, index) = common::http_raw(&at, "GET", "/debug/pprof/", "", b"");
    let index = String::from_utf8_lossy(&index);
    assert_eq!(code, 200, "{index}");
    assert!(
        index.contains("heap") && index.contains("profile"),
        "{index}"
    );

    // Sampling draws about one allocation per 512 KiB: a process that just started may
    // hold no sampled block yet, so this waits for the samples of what it allocated.
    let heap_profile = || {
        let (code, body) = common::http_raw(&at, "GET", "/debug/pprof/heap", "", b"");
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        decode_profile(&body)
    };
    let sampled = |p: &pprof::protos::Profile| p.sample.iter().map(|s| s.value[1]).sum::<i64>();
    let mut profile = heap_profile();
    op.wait("allocations sampled", WAIT, || {
        profile = heap_profile();
        sampled(&profile.2) > 0 && profile.1.iter().any(|n| n.starts_with("bosun::"))
    });
    let (types, names, heap) = profile;
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        types,
        pairs(&[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ])
    );
    // What is held never exceeds what was allocated.
    let inuse: i64 = heap.sample.iter().map(|s| s.value[3]).sum();
    assert!(
        inuse <= sampled(&heap),
        "{inuse} held of {} allocated",
        sampled(&heap)
    );
    assert!(
        names.iter().any(|n| n.starts_with("bosun::")),
        "bosun's own functions are named: {names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("bosun::profiling::heap")),
        "the sampler's own frames are left out"
    );
    let (code, text) = common::http_raw(&at, "GET", "/debug/pprof/heap?debug=1", "", b"");
    let text = String::from_utf8_lossy(&text);
    assert_eq!(code, 200);
    assert!(text.starts_with("heap profile: "), "{text}");

    // A CPU profile of two seconds while the process works (each text heap profile
    // resolves its stacks).
    let cpu = std::thread::spawn({
        let at = at.clone();
        move || common::http_raw(&at, "GET", "/debug/pprof/profile?seconds=2", "", b"")
    });
    while !cpu.is_finished() {
        common::http_raw(&at, "GET", "/debug/pprof/allocs?debug=1", "", b"");
    }
    let (code, body) = cpu.join().expect("the CPU profile's request");
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let (types, names, cpu) = decode_profile(&body);
    assert_eq!(
        types,
        pairs(&[("samples", "count"), ("cpu", "nanoseconds")])
    );
    assert_eq!(cpu.period, 10_000_000, "100 samples a second");
    assert!(
        cpu.duration_nanos >= 2_000_000_000,
        "{}",
        cpu.duration_nanos
    );
    assert!(!cpu.sample.is_empty(), "a busy process was sampled");
    assert!(names.iter().any(|n| n.contains("bosun")), "{names:?}");

    let (code, missing) = common::http_raw(&at, "GET", "/debug/pprof/goroutine", "", b"");
    assert_eq!(code, 404);
    assert!(
        String::from_utf8_lossy(&missing).contains("bosun serves allocs, cmdline, heap, profile"),
        "{}",
        String::from_utf8_lossy(&missing)
    );
    let (code, _) = common::http_raw(&at, "GET", "/debug/pprof/profile?seconds=x", "", b"");
    assert_eq!(code, 400);
}

#[test]
fn a_bad_zap_flag_is_named() {
    let sb = Sandbox::start();
    let work = workdir();
    let mut op = Operator::start_with_args(
        &sb,
        &work.path().join("global-hooks"),
        work.path(),
        &[],
        &["--zap-log-level=loud"],
    );
    assert_eq!(op.wait_exit(WAIT), Some(false));
    let logs = op.logs();
    assert!(
        logs.contains("--zap-log-level=\"loud\": expected debug, info, error"),
        "{logs}"
    );
}

/// `--cache-flush-interval` lists the informers' watches again at that interval, and a
/// relist changes nothing that did not change: the controllers keep their parents, and a
/// parent's child stays as it was (not deleted, not rewritten).
#[test]
fn the_cache_flush_interval_relists_the_informers() {
    let sb = Sandbox::start();
    let work = workdir();
    // One child carrying the parent's spec.v.
    let hooks = Hooks::serve(|_, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let v = req["parent"]["spec"]["v"].as_str().unwrap_or("v");
        (
            200,
            json!({"children": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-kept")}, "data": {"k": v}}]}),
        )
    });
    post_ok(
        &sb,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd("Keep", "keeps", true, "Namespaced"),
    );
    wait_crd_served(&sb, "/apis/example.com/v1/keeps");
    let op = bosun(
        &sb,
        work.path(),
        &[
            ("BOSUN_CACHE_FLUSH_INTERVAL", "300ms"),
            ("BOSUN_DISCOVERY_INTERVAL", "300ms"),
        ],
    );
    wait_crd_served(
        &sb,
        "/apis/metacontroller.k8s.io/v1alpha1/compositecontrollers",
    );
    composite(
        &sb,
        "keeps",
        "keeps",
        "InPlace",
        json!({"sync": {"webhook": {"url": format!("{}/sync", hooks.url)}}}),
    );
    post_ok(
        &sb,
        "/apis/example.com/v1/namespaces/default/keeps",
        &json!({"apiVersion": "example.com/v1", "kind": "Keep", "metadata": {"name": "p"}}),
    );
    let child_path = "/api/v1/namespaces/default/configmaps/p-kept";
    op.wait("the parent's child", WAIT, || {
        get(&sb, child_path).is_some()
    });
    let child = get(&sb, child_path).expect("the child");
    let relists = || {
        op.logs()
            .matches("watch relisted at the cache flush interval")
            .count()
    };
    // Relists of the parent's and the child's informers, after the child was made.
    let before = relists();
    op.wait("relists at the cache flush interval", WAIT, || {
        relists() >= before + 4
    });
    let parent = get(&sb, "/apis/example.com/v1/namespaces/default/keeps/p").expect("parent");
    assert!(
        parent["metadata"]["deletionTimestamp"].is_null(),
        "{parent}"
    );
    let after = get(&sb, child_path).expect("the child is still there");
    assert_eq!(
        (
            &after["metadata"]["uid"],
            &after["metadata"]["resourceVersion"],
            &after["data"]
        ),
        (
            &child["metadata"]["uid"],
            &child["metadata"]["resourceVersion"],
            &child["data"]
        ),
        "a relist rewrote or replaced the child"
    );
    assert!(
        !op.logs()
            .contains("periodic discovery (--discovery-interval)"),
        "discovery fetched again without an error: {}",
        op.logs()
    );
    // The controller still follows its parent: a change after the relists reaches the
    // child.
    let mut parent = parent;
    parent["spec"] = json!({"v": "changed"});
    let (code, answer) = sb.put("/apis/example.com/v1/namespaces/default/keeps/p", &parent);
    assert_eq!(code, 200, "{answer}");
    op.wait("the parent's change in its child", WAIT, || {
        get(&sb, child_path).is_some_and(|c| c["data"]["k"] == "changed")
    });
    assert!(
        !op.logs().contains("controller stopped"),
        "a relist stopped a controller: {}",
        op.logs()
    );
    assert!(
        events_for(&sb, "default", "p")
            .iter()
            .all(|e| e["reason"] != "SyncError"),
        "{:?}",
        events_for(&sb, "default", "p")
    );
}
