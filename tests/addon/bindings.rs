//! Kubernetes bindings end to end: real hook processes, the sandbox over HTTP, shared
//! watches, jq filters, Synchronization and Event contexts, snapshots, groups, module
//! bindings, watch resilience across a sandbox restart and bad binding configurations.

use crate::common;

use std::path::Path;
use std::time::Duration;

use crate::common::{Operator, Sandbox, wait_for, workdir};
use serde_json::{Value, json};

/// Writes an executable hook that prints `config` for `--config` and appends each binding
/// context array to `$OUT_DIR/<log>` as one line, in one write (runs of the hook in
/// different queues may append at the same time).
fn hook(path: &Path, config: &str, log: &str) {
    common::config_hook(
        path,
        config,
        &format!(
            "line=$(cat \"$BINDING_CONTEXT_PATH\")\nprintf '%s\\n' \"$line\" >> \"$OUT_DIR/{log}\""
        ),
    );
}

/// Every binding context array a hook received, in order.
fn runs(out: &Path, log: &str) -> Vec<Value> {
    std::fs::read_to_string(out.join(log))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Objects without the fields the server generates, so contexts compare exactly.
fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(meta)) = m.get_mut("metadata") {
                for k in [
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "managedFields",
                    "generation",
                ] {
                    meta.remove(k);
                }
            }
            for (_, x) in m.iter_mut() {
                normalize(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn contexts(out: &Path, log: &str) -> Vec<Value> {
    let mut all: Vec<Value> = runs(out, log)
        .into_iter()
        .flat_map(|r| r.as_array().cloned().unwrap_or_default())
        .collect();
    all.iter_mut().for_each(normalize);
    all
}

fn pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

fn create(sb: &Sandbox, path: &str, body: &Value) {
    let (code, resp) = sb.post(path, body);
    assert_eq!(code, 201, "create {path}: {resp}");
}

/// The seed's hook with four kubernetes bindings (the in-process bindings tests use it too).
const SEED_CONFIG: &str = include_str!("../fixtures/seed-bindings.yaml");

#[test]
fn global_hook_synchronization_events_and_snapshots_follow_the_seed() {
    let sb = Sandbox::start();
    let work = workdir();
    let out = work.path().join("out");
    create(
        &sb,
        "/api/v1/namespaces/default/pods",
        &pod("p1", json!({"app": "one"})),
    );
    create(
        &sb,
        "/api/v1/nodes",
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}}),
    );
    create(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "labels": {"watched": "yes"}}}),
    );
    let hooks = work.path().join("global");
    hook(&hooks.join("monitor.sh"), SEED_CONFIG, "monitor.jsonl");
    let op = Operator::start(&sb, &hooks, work.path());
    op.wait(
        "Synchronization runs and beforeAll",
        Duration::from_secs(60),
        || {
            let c = contexts(&out, "monitor.jsonl");
            c.iter().any(|c| c["binding"] == "beforeAll")
                && c.iter().any(|c| c["binding"] == "monitor-cms")
        },
    );
    let all = contexts(&out, "monitor.jsonl");
    let p1 = {
        let (_, mut p) = sb.get("/api/v1/namespaces/default/pods/p1");
        normalize(&mut p);
        p
    };
    // monitor-pods: main queue, before beforeAll.
    let sync_pods = all
        .iter()
        .position(|c| c["binding"] == "monitor-pods")
        .expect("monitor-pods ran");
    let before_all = all
        .iter()
        .position(|c| c["binding"] == "beforeAll")
        .expect("beforeAll ran");
    assert!(
        sync_pods < before_all,
        "Synchronization of monitor-pods runs before beforeAll: {all:#?}"
    );
    assert_eq!(
        all[sync_pods],
        json!({"binding": "monitor-pods", "type": "Synchronization",
               "objects": [{"object": p1, "filterResult": {"app": "one"}}]})
    );
    // monitor-nodes and monitor-secrets: snapshot only, no Synchronization run.
    assert!(
        !all.iter()
            .any(|c| c["binding"] == "monitor-nodes" || c["binding"] == "monitor-secrets")
    );
    let cms = all
        .iter()
        .find(|c| c["binding"] == "monitor-cms")
        .expect("monitor-cms ran");
    assert_eq!(cms["type"], "Synchronization");
    assert_eq!(cms["objects"][0]["filterResult"], json!({"watched": "yes"}));
    // beforeAll carries every binding's snapshot.
    let ba = &all[before_all];
    assert_eq!(
        ba["snapshots"]["monitor-pods"],
        json!([{"object": p1, "filterResult": {"app": "one"}}])
    );
    assert_eq!(
        ba["snapshots"]["monitor-nodes"][0]["filterResult"],
        json!({"zone": "a"})
    );
    assert_eq!(ba["snapshots"]["monitor-secrets"], json!([]));

    // Events: Added, Modified only when the filter result changes, Deleted.
    let seen = all.len();
    create(
        &sb,
        "/api/v1/namespaces/default/pods",
        &pod("p2", json!({"app": "two"})),
    );
    op.wait("Added p2", Duration::from_secs(30), || {
        contexts(&out, "monitor.jsonl").len() > seen
    });
    let (code, _) = common::http(
        sb.addr(),
        "PATCH",
        "/api/v1/namespaces/default/pods/p2",
        "application/merge-patch+json",
        &json!({"metadata": {"annotations": {"ignored": "by the filter"}}}).to_string(),
    );
    assert_eq!(code, 200);
    let (code, _) = common::http(
        sb.addr(),
        "PATCH",
        "/api/v1/namespaces/default/pods/p2",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"app": "three"}}}).to_string(),
    );
    assert_eq!(code, 200);
    op.wait("Modified p2", Duration::from_secs(30), || {
        contexts(&out, "monitor.jsonl").len() > seen + 1
    });
    let (code, _) = common::http(
        sb.addr(),
        "DELETE",
        "/api/v1/namespaces/default/pods/p2",
        "",
        "",
    );
    assert_eq!(code, 200);
    op.wait("Deleted p2", Duration::from_secs(30), || {
        contexts(&out, "monitor.jsonl").len() > seen + 2
    });
    let events: Vec<(String, String, Value)> = contexts(&out, "monitor.jsonl")[seen..]
        .iter()
        .map(|c| {
            assert_eq!(c["type"], "Event", "{c}");
            assert_eq!(c["binding"], "monitor-pods", "{c}");
            assert_eq!(c["object"]["metadata"]["name"], "p2", "{c}");
            (
                c["watchEvent"].as_str().unwrap_or_default().to_string(),
                c["object"]["kind"].as_str().unwrap_or_default().to_string(),
                c["filterResult"].clone(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            (
                "Added".to_string(),
                "Pod".to_string(),
                json!({"app": "two"})
            ),
            (
                "Modified".to_string(),
                "Pod".to_string(),
                json!({"app": "three"})
            ),
            (
                "Deleted".to_string(),
                "Pod".to_string(),
                json!({"app": "three"})
            ),
        ]
    );

    // Bindings with executeHookOnSynchronization: false still run on events, in their queue.
    create(
        &sb,
        "/api/v1/namespaces/default/secrets",
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1", "labels": {"watched": "yes"}}}),
    );
    op.wait("Added s1", Duration::from_secs(30), || {
        contexts(&out, "monitor.jsonl")
            .iter()
            .any(|c| c["binding"] == "monitor-secrets")
    });
    let s = contexts(&out, "monitor.jsonl")
        .into_iter()
        .find(|c| c["binding"] == "monitor-secrets")
        .expect("secret event");
    assert_eq!(s["watchEvent"], "Added");
    assert_eq!(s["filterResult"], json!({"watched": "yes"}));

    // The snapshots through the debug socket, as `bosun global snapshots` shows them.
    let cli = std::process::Command::new(common::bosun_bin())
        .args(["global", "snapshots", "-o", "json", "--debug-unix-socket"])
        .arg(work.path().join("debug.socket"))
        .output()
        .expect("bosun global snapshots");
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let dump: Value = serde_json::from_slice(&cli.stdout).expect("json");
    let filter_results = |binding: &str| -> Vec<Value> {
        dump["monitor.sh"][binding]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| o["filterResult"].clone())
            .collect()
    };
    assert_eq!(filter_results("monitor-pods"), [json!({"app": "one"})]);
    assert_eq!(
        filter_results("monitor-secrets"),
        [json!({"watched": "yes"})]
    );
    assert_eq!(filter_results("monitor-nodes"), [json!({"zone": "a"})]);
}

#[test]
fn groups_included_snapshots_and_objects_left_out_of_memory() {
    let sb = Sandbox::start();
    let work = workdir();
    let out = work.path().join("out");
    create(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1"}}),
    );
    let hooks = work.path().join("global");
    hook(
        &hooks.join("grouped.sh"),
        "configVersion: v1
kubernetes:
- name: cms
  kind: configmap
  nameSelector: {matchNames: [a, b]}
  jqFilter: '.data'
  keepFullObjectsInMemory: false
  group: g
- name: secrets
  kind: secret
  executeHookOnEvent: []
  group: g
- name: pods
  kind: po
  jqFilter: '.metadata.name'
  keepFullObjectsInMemory: false
  includeSnapshotsFrom: [cms]",
        "grouped.jsonl",
    );
    let op = Operator::start(&sb, &hooks, work.path());
    op.wait(
        "the group's Synchronization",
        Duration::from_secs(60),
        || !contexts(&out, "grouped.jsonl").is_empty(),
    );
    let first = contexts(&out, "grouped.jsonl");
    assert_eq!(
        first[0],
        json!({"binding": "secrets", "type": "Group", "groupName": "g",
               "snapshots": {"cms": [{"filterResult": {"k": "1"}}], "secrets": []}})
    );
    // nameSelector: a ConfigMap with another name is not seen.
    create(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}, "data": {"k": "x"}}),
    );
    create(&sb, "/api/v1/namespaces/default/pods", &pod("p", json!({})));
    op.wait("the pod event", Duration::from_secs(30), || {
        contexts(&out, "grouped.jsonl")
            .iter()
            .any(|c| c["binding"] == "pods" && c["type"] == "Event")
    });
    let ev = contexts(&out, "grouped.jsonl")
        .into_iter()
        .find(|c| c["binding"] == "pods" && c["type"] == "Event")
        .expect("event");
    assert_eq!(
        ev,
        json!({"binding": "pods", "type": "Event", "watchEvent": "Added", "filterResult": "p",
               "snapshots": {"cms": [{"filterResult": {"k": "1"}}]}})
    );
    assert!(
        !contexts(&out, "grouped.jsonl")
            .iter()
            .any(|c| c.to_string().contains("\"x\"")),
        "the ConfigMap outside nameSelector never reaches the hook"
    );
}

#[test]
fn module_hook_bindings_start_with_the_module_and_stop_when_it_is_disabled() {
    let sb = Sandbox::start();
    let work = workdir();
    let out = work.path().join("out");
    let module = work.path().join("modules/010-watcher");
    std::fs::create_dir_all(&module).expect("module dir");
    std::fs::write(
        work.path().join("modules/values.yaml"),
        "watcherEnabled: true\n",
    )
    .expect("values.yaml");
    hook(
        &module.join("hooks/pods.sh"),
        "configVersion: v1
beforeHelm: 1
kubernetes:
- name: pods
  kind: Pod
  namespace: {nameSelector: {matchNames: [default]}}
  jqFilter: '.metadata.name'",
        "watcher.jsonl",
    );
    create(
        &sb,
        "/api/v1/namespaces/default/pods",
        &pod("before", json!({})),
    );
    // A global hook on the same watch, later in the same queue: the canary for absence.
    let global = work.path().join("global");
    hook(
        &global.join("canary.sh"),
        "configVersion: v1\nkubernetes:\n- name: pods\n  kind: Pod\n  namespace: {nameSelector: {matchNames: [default]}}\n  jqFilter: '.metadata.name'",
        "canary.jsonl",
    );
    let op = Operator::start(&sb, &global, work.path());
    op.wait(
        "Synchronization then beforeHelm",
        Duration::from_secs(60),
        || {
            contexts(&out, "watcher.jsonl")
                .iter()
                .any(|c| c["binding"] == "beforeHelm")
        },
    );
    let c = contexts(&out, "watcher.jsonl");
    assert_eq!(c[0]["type"], "Synchronization");
    assert_eq!(c[0]["objects"][0]["filterResult"], "before");
    assert_eq!(c[1]["binding"], "beforeHelm");
    assert_eq!(c[1]["snapshots"]["pods"][0]["filterResult"], "before");
    create(
        &sb,
        "/api/v1/namespaces/default/pods",
        &pod("after", json!({})),
    );
    op.wait("the module hook's event", Duration::from_secs(30), || {
        contexts(&out, "watcher.jsonl")
            .iter()
            .any(|c| c["type"] == "Event" && c["filterResult"] == "after")
    });
    // Disable the module: its bindings stop.
    let (code, body) = sb.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "addon-operator"}, "data": {"watcherEnabled": "false"}}),
    );
    if code == 409 {
        let (code, body) = common::http(
            sb.addr(),
            "PATCH",
            "/api/v1/namespaces/default/configmaps/addon-operator",
            "application/merge-patch+json",
            &json!({"data": {"watcherEnabled": "false"}}).to_string(),
        );
        assert_eq!(code, 200, "{body}");
    } else {
        assert_eq!(code, 201, "{body}");
    }
    op.wait("the module is disabled", Duration::from_secs(60), || {
        common::try_journal_state(&work.path().join("journal")).is_some_and(|(s, _)| {
            s.modules
                .get("watcher")
                .is_some_and(|m| !m.enabled && m.phase == bosun_addon::ModulePhase::Disabled)
        })
    });
    let seen = contexts(&out, "watcher.jsonl").len();
    create(
        &sb,
        "/api/v1/namespaces/default/pods",
        &pod("ignored", json!({})),
    );
    wait_for("the canary saw the pod", Duration::from_secs(30), || {
        contexts(&out, "canary.jsonl")
            .iter()
            .any(|c| c["filterResult"] == "ignored")
    });
    assert_eq!(
        contexts(&out, "watcher.jsonl").len(),
        seen,
        "a disabled module's hook gets no events"
    );
}

#[test]
fn watches_survive_a_sandbox_restart_and_compacted_history_without_lost_or_phantom_objects() {
    // The real control plane: its API server restarts with etcd compacted.
    let mut sb = if common::controlplane::server() == common::controlplane::Server::Real {
        Sandbox::start()
    } else {
        Sandbox::start_with(&["--watch-history", "50"])
    };
    let work = workdir();
    let out = work.path().join("out");
    let hooks = work.path().join("global");
    hook(
        &hooks.join("mirror.sh"),
        "configVersion: v1
kubernetes:
- name: cms
  kind: ConfigMap
  namespace: {nameSelector: {matchNames: [default]}}
  labelSelector: {matchLabels: {stream: \"yes\"}}
  jqFilter: '.data.v'
  keepFullObjectsInMemory: false
  includeSnapshotsFrom: [cms]",
        "mirror.jsonl",
    );
    let op = Operator::start(&sb, &hooks, work.path());
    op.wait("Synchronization", Duration::from_secs(60), || {
        !runs(&out, "mirror.jsonl").is_empty()
    });
    let addr = sb.addr().to_string();
    let cm = |i: usize, v: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i}"), "labels": {"stream": "yes"}}, "data": {"v": v.to_string()}})
    };
    for round in 0..1000usize {
        let i = round % 37;
        let path = format!("/api/v1/namespaces/default/configmaps/cm-{i}");
        match round % 3 {
            0 => {
                let _ = common::http(
                    &addr,
                    "POST",
                    "/api/v1/namespaces/default/configmaps",
                    "application/json",
                    &cm(i, round).to_string(),
                );
            }
            1 => {
                let _ = common::http(
                    &addr,
                    "PATCH",
                    &path,
                    "application/merge-patch+json",
                    &json!({"data": {"v": round.to_string()}}).to_string(),
                );
            }
            _ => {
                if round % 7 == 0 {
                    let _ = common::http(&addr, "DELETE", &path, "", "");
                }
            }
        }
        if round == 500 {
            sb.restart();
        }
    }
    // A marker object: the context that reports it carries the binding's snapshot, which
    // must equal what the API server holds.
    let (code, body) = sb.post("/api/v1/namespaces/default/configmaps", &cm(999, 999));
    assert_eq!(code, 201, "{body}");
    let expected = || -> Vec<Value> {
        let (_, list) = sb.get("/api/v1/namespaces/default/configmaps?labelSelector=stream%3Dyes");
        let mut items: Vec<(String, Value)> = list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|o| {
                (
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    json!({"filterResult": o["data"]["v"]}),
                )
            })
            .collect();
        items.sort_by(|a, b| a.0.cmp(&b.0));
        items.into_iter().map(|(_, v)| v).collect()
    };
    let want = expected();
    op.wait(
        "the hook's snapshot matches the API server",
        Duration::from_secs(90),
        || {
            runs(&out, "mirror.jsonl")
                .last()
                .and_then(|r| r.as_array().and_then(|a| a.last()).cloned())
                .is_some_and(|c| c["snapshots"]["cms"].as_array().is_some_and(|s| *s == want))
        },
    );
    // The snapshot held through a relist: the binding's watch resumed from a compacted
    // resourceVersion and was answered 410 Gone (`Expired`).
    assert!(
        op.logs()
            .lines()
            .any(|l| l.contains("too old resource version")
                && l.contains("Expired")
                && l.contains("configmaps in default labels")),
        "the binding's watch was never answered 410 Gone: the test did not compact"
    );
}

#[test]
fn bad_bindings_fail_their_task_with_the_hook_and_binding_named_and_the_operator_keeps_running() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = work.path().join("global");
    hook(
        &hooks.join("unknown-kind.sh"),
        "configVersion: v1\nkubernetes:\n- name: widgets\n  kind: Widget",
        "unknown.jsonl",
    );
    hook(
        &hooks.join("ok.sh"),
        "configVersion: v1\nonStartup: 1",
        "ok.jsonl",
    );
    // A hook every second on a queue of its own: the failing task holds only its queue.
    hook(
        &hooks.join("tick.sh"),
        "configVersion: v1\nschedule:\n- name: tick\n  crontab: '*/1 * * * * *'\n  queue: ticks",
        "tick.jsonl",
    );
    let mut op = Operator::start(&sb, &hooks, work.path());
    let out = work.path().join("out");
    op.wait("the other hook ran", Duration::from_secs(60), || {
        !runs(&out, "ok.jsonl").is_empty()
    });
    op.wait(
        "the failure is recorded with its cause",
        Duration::from_secs(60),
        || {
            common::try_journal_state(&work.path().join("journal")).is_some_and(|(s, _)| {
                s.tasks.queues.get("main").into_iter().flatten().any(|t| {
                    t.failures > 0
                        && t.last_error.contains("unknown-kind.sh")
                        && t.last_error.contains("\"widgets\"")
                        && t.last_error.contains("Widget")
                })
            })
        },
    );
    // It keeps running: alive, healthy, and hooks still run after the failure.
    let ticks = runs(&out, "tick.jsonl").len();
    op.wait(
        "a hook run after the failure",
        Duration::from_secs(60),
        || runs(&out, "tick.jsonl").len() > ticks,
    );
    assert!(!op.exited(), "bosun exited:\n{}", op.logs());
    let addr = op.http_address().expect("the HTTP address");
    assert_eq!(
        common::http_raw(&addr, "GET", "/healthz", "", b"").0,
        200,
        "{}",
        op.logs()
    );
}

#[test]
fn a_six_field_schedule_fires_every_second_with_schedule_contexts() {
    let sb = Sandbox::start();
    let work = workdir();
    let out = work.path().join("out");
    let hooks = work.path().join("global");
    hook(
        &hooks.join("tick.sh"),
        "configVersion: v1\nschedule:\n- name: tick\n  crontab: '*/1 * * * * *'\n  queue: ticks",
        "tick.jsonl",
    );
    // Both ends of the window are read from this process's clock: the firings inside it
    // cannot outnumber the seconds it spans (a loaded machine only makes them late).
    let started = std::time::Instant::now();
    let op = Operator::start(&sb, &hooks, work.path());
    op.wait("four firings", Duration::from_secs(30), || {
        runs(&out, "tick.jsonl").len() >= 4
    });
    let runs = runs(&out, "tick.jsonl");
    let window = started.elapsed();
    let mut firings = 0;
    for ctx in &runs {
        for c in ctx.as_array().expect("array") {
            assert_eq!(*c, json!({"binding": "tick", "type": "Schedule"}));
            firings += 1;
        }
    }
    // Once per second: never more firings than second boundaries in the window (merged
    // firings arrive in one run with several contexts, and count once each).
    assert!(
        firings <= window.as_secs() + 1,
        "{firings} firings in {window:?}: {runs:?}"
    );
}

#[test]
fn object_patcher_operations_from_hooks_apply_and_a_failing_one_fails_the_task() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = work.path().join("global");
    common::config_hook(
        &hooks.join("patcher.sh"),
        "configVersion: v1\nonStartup: 1",
        r#"cat > "$KUBERNETES_PATCH_PATH" <<'EOF'
{"operation":"CreateOrUpdate","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"from-hook","namespace":"default"},"data":{"a":"1"}}}
{"operation":"MergePatch","kind":"ConfigMap","namespace":"default","name":"from-hook","mergePatch":{"data":{"b":"2"}}}
{"operation":"JQPatch","kind":"ConfigMap","namespace":"default","name":"from-hook","jqFilter":".metadata.labels.patched = \"yes\""}
EOF"#,
    );
    common::config_hook(
        &hooks.join("broken.sh"),
        "configVersion: v1\nonStartup: 2",
        r#"echo '{"operation":"MergePatch","kind":"ConfigMap","namespace":"default","name":"absent","mergePatch":{"data":{"x":"y"}}}' > "$KUBERNETES_PATCH_PATH""#,
    );
    let op = Operator::start(&sb, &hooks, work.path());
    op.wait(
        "the ConfigMap made by the hook",
        Duration::from_secs(60),
        || {
            let (code, cm) = sb.get("/api/v1/namespaces/default/configmaps/from-hook");
            code == 200
                && cm["data"] == json!({"a": "1", "b": "2"})
                && cm["metadata"]["labels"]["patched"] == "yes"
        },
    );
    op.wait(
        "the failing operation fails its task",
        Duration::from_secs(60),
        || {
            common::try_journal_state(&work.path().join("journal")).is_some_and(|(s, _)| {
                s.tasks.queues.get("main").into_iter().flatten().any(|t| {
                    t.failures > 0
                        && t.last_error.contains("broken.sh")
                        && t.last_error.contains("KUBERNETES_PATCH_PATH")
                        && t.last_error.contains("absent")
                })
            })
        },
    );
}

#[test]
fn an_invalid_jq_filter_is_a_config_error_naming_the_hook_and_binding() {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = work.path().join("global");
    hook(
        &hooks.join("bad-jq.sh"),
        "configVersion: v1\nkubernetes:\n- name: pods\n  kind: Pod\n  jqFilter: '.metadata | {'",
        "bad.jsonl",
    );
    let mut op = Operator::start(&sb, &hooks, work.path());
    op.wait(
        "bosun refuses the configuration",
        Duration::from_secs(30),
        || {
            let logs = op.logs();
            logs.contains("bad-jq.sh")
                && logs.contains("kubernetes[0].jqFilter")
                && logs.contains("\"pods\"")
        },
    );
    assert!(
        op.wait_exit(Duration::from_secs(30)).is_some_and(|ok| !ok),
        "bosun stops on an invalid global hook configuration"
    );
}

#[test]
fn namespaces_chosen_by_labels_are_followed_as_they_start_and_stop_matching() {
    let sb = Sandbox::start();
    let work = workdir();
    let out = work.path().join("out");
    let ns = |name: &str, watched: bool| {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": if watched { json!({"watch": "yes"}) } else { json!({}) }}})
    };
    let cm =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    create(&sb, "/api/v1/namespaces", &ns("alpha", true));
    create(&sb, "/api/v1/namespaces", &ns("beta", false));
    create(&sb, "/api/v1/namespaces/alpha/configmaps", &cm("in-alpha"));
    create(&sb, "/api/v1/namespaces/beta/configmaps", &cm("in-beta"));
    let hooks = work.path().join("global");
    hook(
        &hooks.join("ns.sh"),
        "configVersion: v1
kubernetes:
- name: cms
  kind: ConfigMap
  namespace: {labelSelector: {matchLabels: {watch: \"yes\"}}}
  jqFilter: '.metadata.namespace + \"/\" + .metadata.name'",
        "ns.jsonl",
    );
    let op = Operator::start(&sb, &hooks, work.path());
    op.wait("Synchronization", Duration::from_secs(60), || {
        !contexts(&out, "ns.jsonl").is_empty()
    });
    let sync = contexts(&out, "ns.jsonl")[0].clone();
    assert_eq!(sync["type"], "Synchronization");
    let names: Vec<&Value> = sync["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .map(|o| &o["filterResult"])
        // kube-controller-manager puts its CA in every namespace.
        .filter(|name| {
            !name
                .as_str()
                .is_some_and(|n| n.ends_with("/kube-root-ca.crt"))
        })
        .collect();
    assert_eq!(names, [&json!("alpha/in-alpha")]);
    // beta starts matching: its ConfigMap arrives as Added.
    let (code, body) = common::http(
        sb.addr(),
        "PATCH",
        "/api/v1/namespaces/beta",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"watch": "yes"}}}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    op.wait("beta's ConfigMap added", Duration::from_secs(30), || {
        contexts(&out, "ns.jsonl")
            .iter()
            .any(|c| c["watchEvent"] == "Added" && c["filterResult"] == "beta/in-beta")
    });
    // alpha stops matching: its ConfigMap leaves the snapshot as Deleted.
    let (code, body) = common::http(
        sb.addr(),
        "PATCH",
        "/api/v1/namespaces/alpha",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"watch": null}}}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    op.wait("alpha's ConfigMap deleted", Duration::from_secs(30), || {
        contexts(&out, "ns.jsonl")
            .iter()
            .any(|c| c["watchEvent"] == "Deleted" && c["filterResult"] == "alpha/in-alpha")
    });
}

#[test]
fn values_changed_by_kubernetes_runs_converge_globally_and_rerun_their_module() {
    let sb = Sandbox::start();
    let work = workdir();
    let journal = work.path().join("journal");
    let patch_on_event = |path: &str| {
        format!(
            "if grep -q '\"type\":\"Event\"' \"$BINDING_CONTEXT_PATH\"; then\n  echo '[{{\"op\":\"add\",\"path\":\"{path}\",\"value\":\"yes\"}}]' > \"$VALUES_JSON_PATCH_PATH\"\nfi"
        )
    };
    let hooks = work.path().join("global");
    common::config_hook(
        &hooks.join("global-watch.sh"),
        "configVersion: v1\nkubernetes:\n- name: trigger\n  kind: ConfigMap\n  nameSelector: {matchNames: [global-trigger]}",
        &patch_on_event("/global/triggered"),
    );
    let module = work.path().join("modules/010-reactive");
    common::config_hook(
        &module.join("hooks/watch.sh"),
        "configVersion: v1\nkubernetes:\n- name: trigger\n  kind: ConfigMap\n  nameSelector: {matchNames: [module-trigger]}",
        &patch_on_event("/reactive/triggered"),
    );
    std::fs::write(
        work.path().join("modules/values.yaml"),
        "reactiveEnabled: true\nreactive: {}\n",
    )
    .expect("values.yaml");
    let op = Operator::start(&sb, &hooks, work.path());
    op.wait("the first converge", Duration::from_secs(60), || {
        common::converges(&journal) >= 1
    });
    let module_runs = || {
        common::try_journal_state(&journal)
            .map(|(_, events)| {
                events
                    .iter()
                    .filter(|e| matches!(e, bosun_addon::Event::Task(bosun_addon::TaskEvent::TaskEnqueued { task, .. })
                        if task.kind.task_type() == bosun_addon::TaskType::ModuleRun && task.description.contains("ModuleValuesChanged")))
                    .count()
            })
            .unwrap_or(0)
    };
    assert_eq!(module_runs(), 0);
    create(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "module-trigger"}}),
    );
    op.wait(
        "a ModuleRun for the module's changed values",
        Duration::from_secs(60),
        || module_runs() >= 1,
    );
    let converged = common::converges(&journal);
    create(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "global-trigger"}}),
    );
    op.wait(
        "a converge for the changed global values",
        Duration::from_secs(60),
        || common::converges(&journal) > converged,
    );
}

const RATE_LIMITED_CONFIG: &str = "configVersion: v1
kubernetes:
- name: limited
  apiVersion: v1
  kind: ConfigMap
  labelSelector: {matchLabels: {rate: limited}}
settings:
  executionMinInterval: 10s
  executionBurst: 1";

/// The names of the objects in one run's binding contexts.
fn object_names(run: &Value) -> Vec<String> {
    run.as_array()
        .map(|ctxs| {
            ctxs.iter()
                .filter_map(|c| c["object"]["metadata"]["name"].as_str())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The names of the objects each run of a [`hook`] received, in the order of the runs.
fn logged_runs(out: &Path, log: &str) -> Vec<Vec<String>> {
    runs(out, log).iter().map(object_names).collect()
}

/// The journal's account of one round of [`rate_limited_runs_merge`], in the queue's own
/// order (positions in the journal, never clocks).
#[derive(Debug)]
struct Round {
    /// Where `b` was queued.
    b_queued: usize,
    /// Where the run that carried `a` started.
    a_run_started: usize,
    /// Whether that run carried `b` as well.
    b_in_a_run: bool,
    /// Tasks of another kind queued after `a` and still queued when its run started: they
    /// stand between `a` and `b`, and a run only takes the events of its hook queued right
    /// behind it (as shell-operator, which stops combining at a task for something else).
    between: Vec<String>,
}

/// The journal's task events, a line each with its position, for a failure message.
fn task_events(journal: &Path) -> String {
    let Some((_, events)) = common::try_journal_state(journal) else {
        return "(the journal cannot be read)".into();
    };
    events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            bosun_addon::Event::Task(t) => {
                let mut line = serde_json::to_string(t).unwrap_or_default();
                line.truncate(300);
                Some(format!("{i:4} {line}"))
            }
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn journal_round(journal: &Path, a: &str, b: &str) -> Option<Round> {
    use bosun_addon::{Event, TaskEvent};
    let (_, events) = common::try_journal_state(journal)?;
    let queued = |name: &str| {
        events.iter().enumerate().find_map(|(i, e)| match e {
            Event::Task(TaskEvent::TaskEnqueued { task, .. })
                if task.kind.hook_run().is_some_and(|r| {
                    object_names(&serde_json::to_value(&r.binding_contexts).unwrap_or_default())
                        .iter()
                        .any(|n| n == name)
                }) =>
            {
                Some((i, task.id))
            }
            _ => None,
        })
    };
    let merged_into = |merged| {
        events.iter().find_map(|e| match e {
            Event::Task(TaskEvent::TaskMerged { id, into }) if *id == merged => Some(*into),
            _ => None,
        })
    };
    let (a_queued, a_task) = queued(a)?;
    let (b_queued, b_task) = queued(b)?;
    // `a` ran in its own task's run or in the run of the task it was merged into.
    let run = merged_into(a_task).unwrap_or(a_task);
    let a_run_started = events
        .iter()
        .position(|e| matches!(e, Event::Task(TaskEvent::TaskStarted { id, .. }) if *id == run))?;
    let b_in_a_run = b_task == run || merged_into(b_task) == Some(run);
    let before_start = &events[..a_run_started];
    let ended = |task| {
        before_start.iter().any(|e| {
            matches!(e, Event::Task(
                TaskEvent::TaskSucceeded { id }
                | TaskEvent::TaskDropped { id, .. }
                | TaskEvent::TaskMerged { id, .. }
                | TaskEvent::TaskParked { id, .. }) if *id == task)
        })
    };
    let between = before_start[a_queued + 1..]
        .iter()
        .filter_map(|e| match e {
            Event::Task(TaskEvent::TaskEnqueued { task, .. })
                if task.id != b_task && task.kind.hook_run().is_none() && !ended(task.id) =>
            {
                Some(task.description.clone())
            }
            _ => None,
        })
        .collect();
    Some(Round {
        b_queued,
        a_run_started,
        b_in_a_run,
        between,
    })
}

/// Drives a hook limited to one run per interval: an event `a` is queued while the hook
/// waits for its token, then an event `b`; the run that starts when the token is there
/// must carry both. A loaded machine can take longer than the interval to queue `a`, so
/// that `a` finds a fresh token and runs alone, or slow the startup so that its converge
/// queues other work between `a` and `b` (a run takes the events of its hook queued right
/// behind it, as shell-operator's): such a round proves nothing and another is played
/// (`b`'s run has just taken the token again). All of it is read from the journal, the
/// queue's own order (never from clocks): a run that started after `b` was queued right
/// behind it and lacks it fails the test.
fn rate_limited_runs_merge(
    sb: &Sandbox,
    op: &Operator,
    out: &Path,
    journal: &Path,
    enqueued: impl Fn() -> usize,
) {
    let cm = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "labels": {"rate": "limited"}}})
    };
    let run_of = |name: &str| {
        logged_runs(out, "limited.jsonl")
            .into_iter()
            .find(|names| names.iter().any(|n| n == name))
    };
    for round in 0..6 {
        let (a, b) = (format!("a{round}"), format!("b{round}"));
        let before = enqueued();
        create(sb, "/api/v1/namespaces/default/configmaps", &cm(&a));
        op.wait(&format!("{a} queued"), Duration::from_secs(60), || {
            enqueued() > before
        });
        let before = enqueued();
        create(sb, "/api/v1/namespaces/default/configmaps", &cm(&b));
        op.wait(&format!("{b} queued"), Duration::from_secs(60), || {
            enqueued() > before
        });
        op.wait(&format!("a run with {b}"), Duration::from_secs(120), || {
            run_of(&b).is_some()
        });
        let Some(names) = run_of(&a) else {
            panic!(
                "no run carried {a}: {:?}",
                logged_runs(out, "limited.jsonl")
            );
        };
        let order = journal_round(journal, &a, &b)
            .unwrap_or_else(|| panic!("the journal shows no start of the run with {a}"));
        if order.b_in_a_run {
            assert_eq!(names, [a, b], "the waiting run carries both events");
            return;
        }
        if !order.between.is_empty() {
            // Another task stood between them (a loaded machine slowed the startup, and
            // its converge queued work behind `a`): this round proves nothing.
            continue;
        }
        assert!(
            order.a_run_started < order.b_queued,
            "the run with {a} started after {b} was queued and lacks it: {order:?}, runs {:?}\n\
             the journal's task events:\n{}",
            logged_runs(out, "limited.jsonl"),
            task_events(journal)
        );
        assert_eq!(names, [a], "the run that started before {b} was queued");
    }
    panic!(
        "in six rounds the machine never queued two events inside the interval: {:?}",
        logged_runs(out, "limited.jsonl")
    );
}

/// How many tasks of `hook` the journal shows enqueued so far.
fn enqueued_runs(journal: &Path, hook: &str) -> usize {
    common::try_journal_state(journal)
        .map(|(_, events)| {
            events
                .iter()
                .filter(|e| {
                    matches!(e, bosun_addon::Event::Task(bosun_addon::TaskEvent::TaskEnqueued { task, .. })
                        if task.kind.hook() == Some(hook))
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_rate_limited_hook_run_carries_every_event_up_to_the_moment_it_starts() {
    let sb = Sandbox::start();
    let work = workdir();
    let out = work.path().join("out");
    let journal = work.path().join("journal");
    let hooks = work.path().join("global");
    hook(
        &hooks.join("limited.sh"),
        RATE_LIMITED_CONFIG,
        "limited.jsonl",
    );
    let op = Operator::start(&sb, &hooks, work.path());
    // The Synchronization run takes the only token; the startup's converge is over.
    op.wait("the Synchronization run", Duration::from_secs(60), || {
        !logged_runs(&out, "limited.jsonl").is_empty()
    });
    op.wait("the first converge", Duration::from_secs(60), || {
        common::converges(&journal) >= 1
    });
    rate_limited_runs_merge(&sb, &op, &out, &journal, || {
        enqueued_runs(&journal, "limited.sh")
    });
}

/// How many `ModuleHookRun` tasks of `module` the journal shows enqueued so far.
fn enqueued_module_hook_runs(journal: &Path, module: &str) -> usize {
    common::try_journal_state(journal)
        .map(|(_, events)| {
            events
                .iter()
                .filter(|e| {
                    matches!(e, bosun_addon::Event::Task(bosun_addon::TaskEvent::TaskEnqueued { task, .. })
                        if task.kind.module() == Some(module)
                            && task.kind.task_type() == bosun_addon::TaskType::ModuleHookRun)
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_rate_limited_module_hook_run_carries_every_event_up_to_the_moment_it_starts() {
    let sb = Sandbox::start();
    let work = workdir();
    let out = work.path().join("out");
    let journal = work.path().join("journal");
    let module = work.path().join("modules/010-limited");
    std::fs::create_dir_all(&module).expect("module dir");
    std::fs::write(
        work.path().join("modules/values.yaml"),
        "limitedEnabled: true\n",
    )
    .expect("values.yaml");
    hook(
        &module.join("hooks/limited.sh"),
        "configVersion: v1
kubernetes:
- name: limited
  apiVersion: v1
  kind: ConfigMap
  labelSelector: {matchLabels: {rate: limited}}
  executeHookOnSynchronization: false
settings:
  executionMinInterval: 10s
  executionBurst: 1",
        "limited.jsonl",
    );
    let op = Operator::start(&sb, &work.path().join("no-global-hooks"), work.path());
    op.wait("the first converge", Duration::from_secs(60), || {
        common::converges(&journal) >= 1
    });
    // The first event's run takes the only token.
    let before = enqueued_module_hook_runs(&journal, "limited");
    create(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "first", "namespace": "default", "labels": {"rate": "limited"}}}),
    );
    op.wait(
        "the run of the first event",
        Duration::from_secs(60),
        || {
            enqueued_module_hook_runs(&journal, "limited") > before
                && !logged_runs(&out, "limited.jsonl").is_empty()
        },
    );
    rate_limited_runs_merge(&sb, &op, &out, &journal, || {
        enqueued_module_hook_runs(&journal, "limited")
    });
}
