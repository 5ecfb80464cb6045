//! The DeployItem deployer end to end: a real sandbox API server, `bosun run` with the
//! modules off, and mock DeployItems (`landscaper.gardener.cloud/mock`) walked through
//! the deployer contract of seed 002.

mod common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bosun_deployer::events::DeployerEvent;
use bosun_deployer::item::Phase;
use common::webhooks::post_ok;
use common::{Operator, Sandbox, wait_for, workdir};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const ITEMS: &str = "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/deployitems";
const TARGETS: &str = "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/targets";
const MOCK: &str = "landscaper.gardener.cloud/mock";
const MANIFEST: &str = "landscaper.gardener.cloud/kubernetes-manifest";

/// Starts bosun with the modules switched off.
fn bosun(sb: &Sandbox, work: &std::path::Path, extra: &[(&str, &str)]) -> Operator {
    let mut env = vec![("BOSUN_MODULES", "false"), ("BOSUN_LAMBDA", "false")];
    env.extend_from_slice(extra);
    let op = Operator::start_with(sb, &work.join("global-hooks"), work, &env);
    // Every landscaper CRD bosun installs (tests create Contexts too), not only the first.
    op.wait(
        "the DeployItem, Target and Context CRDs served",
        WAIT,
        || {
            sb.get(ITEMS).0 == 200
                && sb.get(TARGETS).0 == 200
                && sb
                    .get("/apis/landscaper.gardener.cloud/v1alpha1/contexts")
                    .0
                    == 200
        },
    );
    op
}

fn mock_config(extra: Value) -> Value {
    let mut c = json!({"apiVersion": "mock.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderConfiguration"});
    if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
        c.extend(extra);
    }
    c
}

fn create_item(sb: &Sandbox, name: &str, spec: Value) -> Value {
    let body = json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    });
    let (code, answer) = sb.post(ITEMS, &body);
    assert!(
        code == 201 || code == 200,
        "POST DeployItem {name}: {code} {answer}"
    );
    answer
}

fn item(sb: &Sandbox, name: &str) -> Option<Value> {
    let (code, v) = sb.get(&format!("{ITEMS}/{name}"));
    (code == 200).then_some(v)
}

fn phase(sb: &Sandbox, name: &str) -> Option<String> {
    item(sb, name).and_then(|i| i["status"]["phase"].as_str().map(String::from))
}

fn wait_phase(op: &Operator, sb: &Sandbox, name: &str, want: &str) -> Value {
    op.wait(&format!("DeployItem {name} in phase {want}"), WAIT, || {
        phase(sb, name).as_deref() == Some(want)
    });
    item(sb, name).expect("item")
}

/// Edits the item's metadata with a read-modify-write, retried on conflicts.
fn edit_item(sb: &Sandbox, name: &str, edit: impl Fn(&mut Value)) {
    wait_for(&format!("an update of DeployItem {name}"), WAIT, || {
        let Some(mut o) = item(sb, name) else {
            return false;
        };
        edit(&mut o);
        let (code, answer) = sb.put(&format!("{ITEMS}/{name}"), &o);
        assert!(
            code == 200 || code == 409,
            "PUT DeployItem {name}: {code} {answer}"
        );
        code == 200
    });
}

/// How an error message names its field.
enum Naming {
    Starts,
    Contains,
}

/// Waits for `name` to fail with `ERR_CONFIGURATION_PROBLEM` and a message naming `field`.
fn fails_naming(op: &Operator, sb: &Sandbox, name: &str, field: &str, how: Naming) {
    let failed = wait_phase(op, sb, name, "Failed");
    let e = &failed["status"]["lastError"];
    assert_eq!(e["codes"], json!(["ERR_CONFIGURATION_PROBLEM"]), "{e}");
    let message = e["message"].as_str().unwrap_or_default();
    let named = match how {
        Naming::Starts => message.starts_with(field),
        Naming::Contains => message.contains(field),
    };
    assert!(named, "{name}'s error names {field}: {e}");
}

/// Deletes the item `name` and waits until it is gone (its finalizer removed).
fn delete_and_wait(op: &Operator, sb: &Sandbox, name: &str) {
    let (code, answer) = sb.request("DELETE", &format!("{ITEMS}/{name}"), "", "");
    assert!(code == 200 || code == 202, "DELETE: {code} {answer}");
    op.wait("the item gone", WAIT, || item(sb, name).is_none());
}

/// The deployer's journal: each item's phase changes, errors and finalizations.
fn journal(work: &std::path::Path) -> Vec<DeployerEvent> {
    let Ok(j) = bosun_journal::Journal::<DeployerEvent>::open_read_only(
        &work.join("journal").join("deployer"),
    ) else {
        return Vec::new();
    };
    j.read_from(1)
        .filter_map(Result::ok)
        .map(|r| r.event)
        .collect()
}

fn phases_of(events: &[DeployerEvent], name: &str) -> Vec<Phase> {
    let id = format!("deployitem/default/{name}");
    events
        .iter()
        .filter_map(|e| match e {
            DeployerEvent::DeployItemPhase { item, to, .. } if *item == id => Some(*to),
            _ => None,
        })
        .collect()
}

fn secret_config(sb: &Sandbox, name: &str) -> Option<Value> {
    let (code, s) = sb.get(&format!("/api/v1/namespaces/default/secrets/{name}"));
    if code != 200 {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(s["data"]["config"].as_str().unwrap_or_default())
        .expect("base64");
    serde_json::from_slice(&raw).ok()
}

#[test]
fn a_mock_item_succeeds_with_its_exports_and_runs_again_on_reconcile() {
    let sb = Sandbox::start();
    let work = workdir();
    let op = bosun(
        &sb,
        work.path(),
        &[("BOSUN_DEPLOYER_IDENTITY", "bosun-test")],
    );
    // An item of another type, created first: it must never be touched.
    let other_type = create_item(
        &sb,
        "container-item",
        json!({"type": "landscaper.gardener.cloud/container", "config": {"apiVersion": "container.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderConfiguration"}}),
    );
    create_item(
        &sb,
        "mock-item",
        json!({"type": MOCK, "config": mock_config(json!({
            "providerStatus": {"apiVersion": "mock.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderStatus", "key1": "val1"},
            "export": {"key2": "val2"},
        }))}),
    );
    let done = wait_phase(&op, &sb, "mock-item", "Succeeded");
    let status = &done["status"];
    assert_eq!(status["observedGeneration"], done["metadata"]["generation"]);
    assert_eq!(status["providerStatus"]["key1"], "val1", "{status}");
    assert_eq!(status["deployer"]["identity"], "bosun-test");
    assert_eq!(status["deployer"]["name"], "bosun");
    assert!(status["lastReconcileTime"].is_string(), "{status}");
    assert!(status["lastError"].is_null(), "{status}");
    assert_eq!(
        done["metadata"]["finalizers"],
        json!(["finalizer.landscaper.gardener.cloud"])
    );
    let export = status["exportRef"]["name"]
        .as_str()
        .expect("exportRef")
        .to_string();
    assert_eq!(
        export, "mock-item-export",
        "landscaper's name: <item>-export"
    );
    assert_eq!(secret_config(&sb, &export), Some(json!({"key2": "val2"})));
    op.wait("the journal's phase history", WAIT, || {
        phases_of(&journal(work.path()), "mock-item")
            == vec![Phase::Init, Phase::Progressing, Phase::Succeeded]
    });

    // operation: reconcile runs it again and is removed.
    edit_item(&sb, "mock-item", |o| {
        o["metadata"]["annotations"] = json!({"landscaper.gardener.cloud/operation": "reconcile"});
    });
    op.wait("a second run after operation: reconcile", WAIT, || {
        let phases = phases_of(&journal(work.path()), "mock-item");
        phases.len() == 6 && phases[3..] == [Phase::Init, Phase::Progressing, Phase::Succeeded]
    });
    // The journal records a phase before its status write: the item follows.
    op.wait(
        "the item Succeeded again without its operation annotation",
        WAIT,
        || {
            item(&sb, "mock-item").is_some_and(|o| {
                o["status"]["phase"] == "Succeeded"
                    && o["metadata"]["annotations"]["landscaper.gardener.cloud/operation"].is_null()
            })
        },
    );
    let again = item(&sb, "mock-item").expect("item");
    assert_eq!(
        again["status"]["exportRef"]["name"],
        export.as_str(),
        "the export Secret is reused"
    );

    // One reconcile per run: the watch events of a run's own writes (the finalizer, the
    // annotation's removal, each step's status) wake nothing. A later item is the
    // barrier: the watch brings every item's events in order, so once it is done the
    // events of mock-item's writes were seen before it.
    let addr = op.http_address().expect("the HTTP address");
    let reconciles = || -> f64 {
        let (_, body) = common::http_raw(&addr, "GET", "/metrics", "", b"");
        String::from_utf8_lossy(&body)
            .lines()
            .find_map(|l| l.strip_prefix("bosun_deployer_reconciles_total{result=\"ok\"} "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    create_item(
        &sb,
        "barrier",
        json!({"type": MOCK, "config": mock_config(json!({}))}),
    );
    wait_phase(&op, &sb, "barrier", "Succeeded");
    op.wait("the barrier's run counted", WAIT, || reconciles() >= 3.0);
    assert_eq!(
        reconciles(),
        3.0,
        "two runs of mock-item and one of the barrier, one reconcile each"
    );

    // The other type's item: no status, no finalizer, never written.
    let other = item(&sb, "container-item").expect("container item");
    assert!(other["status"].is_null(), "{other}");
    assert!(other["metadata"]["finalizers"].is_null(), "{other}");
    assert_eq!(
        other["metadata"]["resourceVersion"],
        other_type["metadata"]["resourceVersion"]
    );

    // /actors shows the deployer's queue and the last run of each item.
    let socket = work.path().join("debug.socket");
    let text = common::run_ok(&mut common::debug_cli(&socket, &["raw", "/actors.json"]));
    let actors: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(
        actors["deployer"]["types"],
        json!([MOCK, MANIFEST, HELM]),
        "{actors}"
    );
    assert_eq!(
        actors["deployer"]["items"]["default/mock-item"]["phase"], "Succeeded",
        "{actors}"
    );

    // Metrics of the reconciles and the items by phase (mock-item and the barrier),
    // unprefixed as bosun's own.
    op.wait("the deployer's metrics", WAIT, || {
        let (code, body) = common::http_raw(&addr, "GET", "/metrics", "", b"");
        let text = String::from_utf8_lossy(&body);
        code == 200
            && text.contains("bosun_deployer_reconciles_total{result=\"ok\"}")
            && text.contains("bosun_deployer_items{phase=\"Succeeded\"} 2")
    });
}

#[test]
fn failed_timed_out_and_misconfigured_items_fail_with_their_codes() {
    let sb = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    create_item(
        &sb,
        "fails",
        json!({"type": MOCK, "config": mock_config(json!({"phase": "Failed"}))}),
    );
    create_item(
        &sb,
        "stuck",
        json!({"type": MOCK, "timeout": "2s", "config": mock_config(json!({"phase": "Progressing"}))}),
    );
    create_item(
        &sb,
        "bad-timeout",
        json!({"type": MOCK, "timeout": "ten minutes", "config": mock_config(json!({}))}),
    );
    create_item(
        &sb,
        "bad-config",
        json!({"type": MOCK, "config": mock_config(json!({"phase": "Sleeping"}))}),
    );
    create_item(
        &sb,
        "fine",
        json!({"type": MOCK, "config": mock_config(json!({}))}),
    );

    let failed = wait_phase(&op, &sb, "fails", "Failed");
    let e = &failed["status"]["lastError"];
    assert_eq!(e["reason"], "Failed", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("reported phase Failed"),
        "{e}"
    );

    let stuck = wait_phase(&op, &sb, "stuck", "Failed");
    let e = &stuck["status"]["lastError"];
    assert_eq!(e["codes"], json!(["ERR_TIMEOUT"]), "{e}");
    assert_eq!(e["reason"], "ProgressingTimeout", "{e}");

    fails_naming(&op, &sb, "bad-timeout", "spec.timeout", Naming::Contains);

    fails_naming(&op, &sb, "bad-config", "spec.config", Naming::Contains);
    // As landscaper's mock: the configuration it cannot read is a False validation.
    let bad = item(&sb, "bad-config").unwrap_or_default();
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
    assert!(
        validation["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.config")),
        "{validation}"
    );

    // `bosun journal deployer --item` tells why an item is not Succeeded.
    let why = common::run_ok(
        std::process::Command::new(common::bosun_bin())
            .arg("journal")
            .arg("--journal-dir")
            .arg(work.path().join("journal"))
            .args(["deployer", "--item", "default/stuck"])
            .env("LOG_LEVEL", "error"),
    );
    assert!(
        why.starts_with("deployitem/default/stuck: NOT Succeeded: phase Failed")
            && why.contains("ProgressingTimeout")
            && why.contains("[ERR_TIMEOUT]"),
        "{why}"
    );
    // The deployer's own journal folder works as the journal folder too.
    let same = common::run_ok(
        std::process::Command::new(common::bosun_bin())
            .arg("journal")
            .arg("--journal-dir")
            .arg(work.path().join("journal").join("deployer"))
            .args(["deployer", "--item", "default/stuck"])
            .env("LOG_LEVEL", "error"),
    );
    assert_eq!(same, why);

    // The others did not stop bosun serving the good one.
    wait_phase(&op, &sb, "fine", "Succeeded");
    let events = common::http(
        sb.addr(),
        "GET",
        "/api/v1/namespaces/default/events",
        "",
        "",
    )
    .1;
    let warned = events["items"].as_array().into_iter().flatten().any(|e| {
        e["involvedObject"]["name"] == "stuck"
            && e["type"] == "Warning"
            && e["reason"] == "ProgressingTimeout"
    });
    assert!(warned, "a Warning Event for the timeout: {events}");
}

#[test]
fn items_whose_target_is_not_ours_are_not_touched() {
    let sb = Sandbox::start();
    let work = workdir();
    let selector = r#"[{"labels": [{"key": "deployer", "operator": "=", "values": ["bosun"]}]}]"#;
    let op = bosun(
        &sb,
        work.path(),
        &[("BOSUN_DEPLOYER_TARGET_SELECTOR", selector)],
    );
    for (name, who) in [("ours", "bosun"), ("theirs", "fenced")] {
        post_ok(
            &sb,
            TARGETS,
            &json!({
                "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
                "metadata": {"name": name, "namespace": "default", "labels": {"deployer": who}},
                "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": "apiVersion: v1\nkind: Config\n"}},
            }),
        );
    }
    // Targets from Secrets (with and without `key`), and kubeconfigs refused as upstream.
    let good = "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: abc\n";
    let exec =
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    exec:\n      command: aws\n";
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    post_ok(
        &sb,
        "/api/v1/namespaces/default/secrets",
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kubeconfigs"},
                "data": {"kubeconfig": b64(good), "target": b64(&format!("kubeconfig: {}", serde_json::to_string(exec).expect("json")))}}),
    );
    for (name, spec) in [
        ("from-secret", json!({"secretRef": {"name": "kubeconfigs"}})),
        (
            "from-secret-key",
            json!({"secretRef": {"name": "kubeconfigs", "key": "target"}}),
        ),
        ("inline-exec", json!({"config": {"kubeconfig": exec}})),
    ] {
        let mut spec = spec;
        spec["type"] = json!("landscaper.gardener.cloud/kubernetes-cluster");
        post_ok(
            &sb,
            TARGETS,
            &json!({
                "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
                "metadata": {"name": name, "namespace": "default", "labels": {"deployer": "bosun"}},
                "spec": spec,
            }),
        );
        create_item(
            &sb,
            &format!("via-{name}"),
            json!({"type": MOCK, "target": {"name": name}, "config": mock_config(json!({}))}),
        );
    }
    wait_phase(&op, &sb, "via-from-secret", "Succeeded");
    for name in ["via-from-secret-key", "via-inline-exec"] {
        let failed = wait_phase(&op, &sb, name, "Failed");
        let e = &failed["status"]["lastError"];
        assert_eq!(
            e["codes"],
            json!(["ERR_CONFIGURATION_PROBLEM"]),
            "{name}: {e}"
        );
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("spec.config.kubeconfig") && message.contains("exec is not allowed"),
            "{name}: {message}"
        );
    }

    let theirs = create_item(
        &sb,
        "for-them",
        json!({"type": MOCK, "target": {"name": "theirs", "namespace": "default"}, "config": mock_config(json!({}))}),
    );
    create_item(
        &sb,
        "for-us",
        json!({"type": MOCK, "target": {"name": "ours", "namespace": "default"}, "config": mock_config(json!({}))}),
    );
    create_item(
        &sb,
        "no-target",
        json!({"type": MOCK, "target": {"name": "gone", "namespace": "default"}, "config": mock_config(json!({}))}),
    );
    wait_phase(&op, &sb, "for-us", "Succeeded");
    let missing = wait_phase(&op, &sb, "no-target", "Failed");
    assert_eq!(
        missing["status"]["lastError"]["reason"], "NoTargetFound",
        "{}",
        missing["status"]
    );
    // The annotation names the target before spec does: an item whose annotation points
    // at their target is theirs.
    let (code, annotated) = sb.post(
        ITEMS,
        &json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
            "metadata": {"name": "annotated", "namespace": "default",
                         "annotations": {"landscaper.gardener.cloud/deployer-target-name": "theirs"}},
            "spec": {"type": MOCK, "target": {"name": "ours", "namespace": "default"}, "config": mock_config(json!({}))},
        }),
    );
    assert_eq!(code, 201, "{annotated}");
    // A later item of ours proves the deployer has seen both by then.
    create_item(
        &sb,
        "for-us-2",
        json!({"type": MOCK, "target": {"name": "ours", "namespace": "default"}, "config": mock_config(json!({}))}),
    );
    wait_phase(&op, &sb, "for-us-2", "Succeeded");
    for (name, created) in [("for-them", &theirs), ("annotated", &annotated)] {
        let other = item(&sb, name).expect("item");
        assert!(other["status"].is_null(), "{other}");
        assert!(other["metadata"]["finalizers"].is_null(), "{other}");
        assert_eq!(
            other["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
            "{name}"
        );
    }
}

#[test]
fn deletion_goes_through_init_delete_and_removes_the_finalizer() {
    let sb = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    create_item(
        &sb,
        "doomed",
        json!({"type": MOCK, "config": mock_config(json!({"export": {"a": 1}}))}),
    );
    let done = wait_phase(&op, &sb, "doomed", "Succeeded");
    let export = done["status"]["exportRef"]["name"]
        .as_str()
        .expect("exportRef")
        .to_string();
    delete_and_wait(&op, &sb, "doomed");
    assert!(
        secret_config(&sb, &export).is_none(),
        "the export Secret is removed"
    );
    let events = journal(work.path());
    assert_eq!(
        phases_of(&events, "doomed"),
        vec![
            Phase::Init,
            Phase::Progressing,
            Phase::Succeeded,
            Phase::InitDelete,
            Phase::Deleting
        ]
    );
    assert!(events.iter().any(|e| matches!(e, DeployerEvent::DeployItemFinalized { item } if item == "deployitem/default/doomed")));

    // The jobID contract: a new jobID is processed and finished in the same write.
    create_item(
        &sb,
        "job",
        json!({"type": MOCK, "config": mock_config(json!({}))}),
    );
    let first = wait_phase(&op, &sb, "job", "Succeeded");
    let mut with_job = first.clone();
    with_job["status"]["jobID"] = json!("job-1");
    let (code, answer) = sb.put(&format!("{ITEMS}/job/status"), &with_job);
    assert_eq!(code, 200, "{answer}");
    op.wait("jobIDFinished = jobID", WAIT, || {
        item(&sb, "job").is_some_and(|i| i["status"]["jobIDFinished"] == "job-1")
    });
    let finished = item(&sb, "job").expect("item");
    assert_eq!(finished["status"]["phase"], "Succeeded");
    assert!(
        finished["status"]["transitionTimes"]["finishedTime"].is_string(),
        "{}",
        finished["status"]
    );
}

#[test]
fn a_progressing_item_continues_after_kill_9_without_duplicates() {
    let sb = Sandbox::start();
    let work = workdir();
    let mut op = bosun(&sb, work.path(), &[]);
    create_item(
        &sb,
        "survivor",
        json!({"type": MOCK, "timeout": "1h", "config": mock_config(json!({"phase": "Progressing", "export": {"n": 1}}))}),
    );
    let progressing = wait_phase(&op, &sb, "survivor", "Progressing");
    op.wait("the export written", WAIT, || {
        item(&sb, "survivor").is_some_and(|i| i["status"]["exportRef"]["name"].is_string())
    });
    let export = item(&sb, "survivor").expect("item")["status"]["exportRef"]["name"]
        .as_str()
        .expect("exportRef")
        .to_string();
    op.kill9();
    // While bosun is down the item is told to finish: a spec change.
    edit_item(&sb, "survivor", |o| {
        o["spec"]["config"]["phase"] = json!("Succeeded");
    });
    op.spawn();
    let done = wait_phase(&op, &sb, "survivor", "Succeeded");
    assert_ne!(
        done["metadata"]["generation"],
        progressing["metadata"]["generation"]
    );
    assert_eq!(
        done["status"]["observedGeneration"],
        done["metadata"]["generation"]
    );
    assert_eq!(
        done["status"]["exportRef"]["name"],
        export.as_str(),
        "the export Secret is reused"
    );
    let (_, secrets) = sb.get("/api/v1/namespaces/default/secrets");
    let exports = secrets["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| {
            s["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-export"))
        })
        .count();
    assert_eq!(exports, 1, "no duplicate export Secrets: {secrets}");
    assert_eq!(
        done["metadata"]["finalizers"],
        json!(["finalizer.landscaper.gardener.cloud"]),
        "one finalizer, not two"
    );
}

fn annotation(o: &Value, key: &str) -> Option<String> {
    o["metadata"]["annotations"][key].as_str().map(String::from)
}

const OPERATION: &str = "landscaper.gardener.cloud/operation";

#[test]
fn abort_force_reconcile_test_reconcile_and_a_generation_bump_during_progressing() {
    let sb = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    let progressing = || mock_config(json!({"phase": "Progressing"}));

    // A generation bump during Progressing starts a new run with the new spec.
    post_ok(
        &sb,
        ITEMS,
        &json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
            "metadata": {"name": "bumped", "namespace": "default",
                         "annotations": {"landscaper.gardener.cloud/reconcile-time": rfc3339_ago(10)}},
            "spec": {"type": MOCK, "timeout": "1h", "config": progressing()},
        }),
    );
    let stuck = wait_phase(&op, &sb, "bumped", "Progressing");
    assert_eq!(
        annotation(&stuck, "landscaper.gardener.cloud/reconcile-time"),
        None,
        "removed on pickup"
    );
    edit_item(&sb, "bumped", |o| {
        o["spec"]["config"] = mock_config(json!({}))
    });
    let done = wait_phase(&op, &sb, "bumped", "Succeeded");
    assert_eq!(done["status"]["observedGeneration"], 2);

    // abort fails a progressing item; the annotation stays for whoever set it.
    create_item(
        &sb,
        "aborted",
        json!({"type": MOCK, "timeout": "1h", "config": progressing()}),
    );
    wait_phase(&op, &sb, "aborted", "Progressing");
    edit_item(&sb, "aborted", |o| {
        o["metadata"]["annotations"] = json!({OPERATION: "abort"});
    });
    let failed = wait_phase(&op, &sb, "aborted", "Failed");
    assert_eq!(
        failed["status"]["lastError"]["reason"], "Aborted",
        "{}",
        failed["status"]
    );
    assert_eq!(annotation(&failed, OPERATION).as_deref(), Some("abort"));

    // An abort asked for longer ago than the abort timeout (5m) ends as landscaper's
    // timeout controller would have ended it.
    create_item(
        &sb,
        "abort-timed-out",
        json!({"type": MOCK, "timeout": "1h", "config": progressing()}),
    );
    wait_phase(&op, &sb, "abort-timed-out", "Progressing");
    edit_item(&sb, "abort-timed-out", |o| {
        o["metadata"]["annotations"] =
            json!({OPERATION: "abort", "landscaper.gardener.cloud/abort-time": rfc3339_ago(600)});
    });
    let failed = wait_phase(&op, &sb, "abort-timed-out", "Failed");
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

    // A reconcile-time marker older than the pickup timeout (5m): the item was not
    // picked up in time (bosun was down, say) and fails as landscaper fails it.
    post_ok(
        &sb,
        ITEMS,
        &json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
            "metadata": {"name": "late", "namespace": "default",
                         "annotations": {"landscaper.gardener.cloud/reconcile-time": rfc3339_ago(600)}},
            "spec": {"type": MOCK, "config": mock_config(json!({}))},
        }),
    );
    let late = wait_phase(&op, &sb, "late", "Failed");
    let e = &late["status"]["lastError"];
    assert_eq!(
        (&e["reason"], &e["codes"]),
        (&json!("PickupTimeout"), &json!(["ERR_TIMEOUT"])),
        "{e}"
    );
    assert_eq!(
        annotation(&late, "landscaper.gardener.cloud/reconcile-time"),
        None
    );

    // force-reconcile restarts the failed item: Progressing again, the error of the last
    // run gone, the annotation removed.
    edit_item(&sb, "aborted", |o| {
        o["metadata"]["annotations"] = json!({OPERATION: "force-reconcile"});
    });
    op.wait("the forced run", WAIT, || {
        item(&sb, "aborted").is_some_and(|o| {
            o["status"]["phase"] == "Progressing"
                && o["status"]["lastError"].is_null()
                && annotation(&o, OPERATION).is_none()
        })
    });

    // test-reconcile: bosun makes a jobID itself and finishes it in the same write.
    edit_item(&sb, "bumped", |o| {
        o["metadata"]["annotations"] = json!({OPERATION: "test-reconcile"});
    });
    op.wait("the test job finished", WAIT, || {
        item(&sb, "bumped").is_some_and(|o| {
            let s = &o["status"];
            s["jobID"].is_string() && s["jobID"] == s["jobIDFinished"] && s["phase"] == "Succeeded"
        })
    });
    assert_eq!(
        annotation(&item(&sb, "bumped").expect("item"), OPERATION),
        None
    );
}

/// The RFC 3339 time `secs` seconds ago.
fn rfc3339_ago(secs: u64) -> String {
    let t = std::time::SystemTime::now() - Duration::from_secs(secs);
    humantime::format_rfc3339_seconds(t).to_string()
}

fn cm(namespace: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data})
}

fn manifest_config(manifests: Value) -> Value {
    json!({"apiVersion": "manifest.deployer.landscaper.gardener.cloud/v1alpha2", "kind": "ProviderConfiguration", "manifests": manifests})
}

#[test]
fn manifests_are_applied_in_the_target_cluster_updated_pruned_and_removed() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}});
    create_item(
        &sb,
        "manifests",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": manifest_config(json!([
            {"policy": "manage", "manifest": cm("app", "one", json!({"v": "1"}))},
            {"policy": "manage", "manifest": cm("app", "two", json!({"v": "1"}))},
            {"policy": "keep", "manifest": cm("default", "kept", json!({"v": "1"}))},
            {"policy": "manage", "manifest": namespace},
        ]))}),
    );
    let done = wait_phase(&op, &sb, "manifests", "Succeeded");
    let managed = done["status"]["providerStatus"]["managedResources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let kinds: Vec<&str> = managed
        .iter()
        .filter_map(|m| m["resource"]["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        ["Namespace", "ConfigMap", "ConfigMap", "ConfigMap"],
        "cluster-scoped first: {managed:?}"
    );
    let in_target = |path: &str| {
        let (code, v) = target_cluster.get(path);
        (code == 200).then_some(v)
    };
    let one =
        in_target("/api/v1/namespaces/app/configmaps/one").expect("one in the target cluster");
    assert_eq!(
        one["metadata"]["labels"]["manifest.deployer.landscaper.gardener.cloud/deployitem"],
        "manifests"
    );
    assert!(
        sb.get("/api/v1/namespaces/app/configmaps/one").0 == 404,
        "not in the items' cluster"
    );

    // Update: `one` and `kept` leave the list, `two` changes.
    edit_item(&sb, "manifests", |o| {
        o["spec"]["config"] = manifest_config(json!([
            {"manifest": cm("app", "two", json!({"v": "2"}))},
            {"manifest": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}},
        ]));
    });
    op.wait("the second run", WAIT, || {
        item(&sb, "manifests").is_some_and(|o| {
            o["status"]["observedGeneration"] == 2 && o["status"]["phase"] == "Succeeded"
        })
    });
    assert!(
        in_target("/api/v1/namespaces/app/configmaps/one").is_none(),
        "an orphan is deleted"
    );
    assert_eq!(
        in_target("/api/v1/namespaces/app/configmaps/two").expect("two")["data"]["v"],
        "2"
    );
    assert!(
        in_target("/api/v1/namespaces/default/configmaps/kept").is_some(),
        "keep is never deleted"
    );

    // A manifest with an unknown policy fails at once, naming the field.
    create_item(
        &sb,
        "bad-policy",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": manifest_config(json!([
            {"policy": "sometimes", "manifest": cm("app", "x", json!({}))},
        ]))}),
    );
    fails_naming(
        &op,
        &sb,
        "bad-policy",
        "spec.config.manifests[0].policy",
        Naming::Starts,
    );

    // Deletion removes what the item manages (namespaced first), then the finalizer.
    delete_and_wait(&op, &sb, "manifests");
    assert!(in_target("/api/v1/namespaces/app/configmaps/two").is_none());
    assert!(
        in_target("/api/v1/namespaces/app")
            .is_none_or(|n| n["metadata"]["deletionTimestamp"].is_string()),
        "the namespace is deleted"
    );
    assert!(in_target("/api/v1/namespaces/default/configmaps/kept").is_some());
}

/// `updateStrategy: patch` sends what changes from the live object to the rendered one,
/// as landscaper does: a field added on the cluster is gone after the next change.
#[test]
fn the_patch_strategy_removes_fields_added_on_the_cluster_at_the_next_change() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    let config = |v: &str| {
        let mut c =
            manifest_config(json!([{"manifest": cm("default", "patched", json!({"a": v}))}]));
        c["updateStrategy"] = json!("patch");
        c
    };
    create_item(
        &sb,
        "patching",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": config("1")}),
    );
    wait_phase(&op, &sb, "patching", "Succeeded");
    let path = "/api/v1/namespaces/default/configmaps/patched";
    let (code, body) = target_cluster.request(
        "PATCH",
        path,
        "application/merge-patch+json",
        &json!({"data": {"added": "on the cluster"}}).to_string(),
    );
    assert_eq!(code, 200, "{body}");
    edit_item(&sb, "patching", |o| o["spec"]["config"] = config("2"));
    op.wait("the second run", WAIT, || {
        item(&sb, "patching").is_some_and(|o| {
            o["status"]["observedGeneration"] == 2 && o["status"]["phase"] == "Succeeded"
        })
    });
    let (code, live) = target_cluster.get(path);
    assert_eq!(code, 200);
    assert_eq!(
        live["data"],
        json!({"a": "2"}),
        "the field added on the cluster is gone"
    );
}

/// An item whose `managedResources` could never be written (etcd behind the API server
/// takes 1.5 MiB for an object) fails at once naming the limit, before it writes anything to the target,
/// instead of applying everything again and again.
#[test]
fn manifests_too_many_for_the_item_s_status_fail_before_anything_is_applied() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    let manifests: Vec<Value> = (0..7_000)
        .map(|i| json!({"manifest": cm("default", &format!("c{i}"), json!({}))}))
        .collect();
    create_item(
        &sb,
        "huge",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": manifest_config(json!(manifests))}),
    );
    let failed = wait_phase(&op, &sb, "huge", "Failed");
    let error = &failed["status"]["lastError"];
    assert_eq!(
        error["codes"],
        json!(["ERR_CONFIGURATION_PROBLEM"]),
        "{error}"
    );
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("7000 objects would be listed in status.providerStatus.managedResources")
            && message.contains("1536 KiB")
            && message.contains("split the manifests over several DeployItems"),
        "{message}"
    );
    let (code, list) = target_cluster.get("/api/v1/namespaces/default/configmaps");
    assert_eq!(code, 200);
    assert!(
        list["items"]
            .as_array()
            .is_none_or(|items| items.iter().all(|o| !o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with('c') && n[1..].parse::<u32>().is_ok()))),
        "nothing was applied"
    );
}

/// A Target object in the items' cluster pointing at `target_cluster`.
fn target_for(sb: &Sandbox, target_cluster: &Sandbox, name: &str) {
    let kubeconfig = std::fs::read_to_string(&target_cluster.kubeconfig).expect("kubeconfig");
    post_ok(
        sb,
        TARGETS,
        &json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": kubeconfig}},
        }),
    );
}

#[test]
fn an_unreachable_target_is_retried_naming_it_until_the_target_is_fixed() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    // A port nothing listens on: the target's API server is down.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let kubeconfig = std::fs::read_to_string(&target_cluster.kubeconfig).expect("kubeconfig");
    let down: String = kubeconfig
        .lines()
        .map(|l| match l.split_once("server:") {
            Some((indent, _)) => format!("{indent}server: http://127.0.0.1:{closed}\n"),
            None => format!("{l}\n"),
        })
        .collect();
    let target = |config: &str| {
        json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
            "metadata": {"name": "flaky", "namespace": "default"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": config}},
        })
    };
    post_ok(&sb, TARGETS, &target(&down));
    create_item(
        &sb,
        "waits-for-target",
        json!({"type": MANIFEST, "target": {"name": "flaky"}, "config": manifest_config(json!([
            {"policy": "manage", "manifest": cm("default", "arrives", json!({"v": "1"}))},
        ]))}),
    );
    // Retried (every 5 s), not failed: attempts (the first two a status write apart, the
    // third after the 5 s) log the error naming the target and when it is tried again, the
    // journal holds it, and the item is still in progress.
    op.wait(
        "three attempts against the unreachable target",
        WAIT,
        || {
            op.logs()
                .lines()
                .filter(|l| {
                    l.contains("item=default/waits-for-target")
                        && l.contains("Target default/flaky")
                        && l.contains("retry_in=Some(5s)")
                })
                .count()
                >= 3
        },
    );
    let id = "deployitem/default/waits-for-target";
    assert!(
        journal(work.path()).iter().any(|e| matches!(e,
            DeployerEvent::DeployItemError { item, message, codes, retry_in_ms, .. }
                if item == id && message.contains("Target default/flaky")
                    && codes.is_empty() && retry_in_ms.is_some())),
        "the journal says why the item waits and when it is tried again"
    );
    let waiting = item(&sb, "waits-for-target").expect("item");
    assert_eq!(waiting["status"]["phase"], "Progressing", "{waiting}");
    let e = &waiting["status"]["lastError"];
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("Target default/flaky")),
        "the error names the target: {e}"
    );
    // The target comes back (its kubeconfig fixed): the next attempt deploys.
    wait_for("the Target fixed", WAIT, || {
        let path = format!("{TARGETS}/flaky");
        let (_, mut current) = sb.get(&path);
        current["spec"]["config"]["kubeconfig"] = json!(kubeconfig);
        sb.put(&path, &current).0 == 200
    });
    wait_phase(&op, &sb, "waits-for-target", "Succeeded");
    assert_eq!(
        target_cluster
            .get("/api/v1/namespaces/default/configmaps/arrives")
            .0,
        200,
        "deployed once the target is reachable"
    );
}

#[test]
fn manifests_wait_for_readiness_then_export_and_merge_with_live_objects() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    let mut config = manifest_config(json!([
        {"manifest": deployment},
        {"manifest": cm("default", "state", json!({"phase": "starting"})),
         "annotateBeforeCreate": {"example.com/note": "created-by-bosun"},
         "patchAfterDeployment": {"data": {"deployed": "yes"}}},
    ]));
    // `merge`: what others write into the live objects stays.
    config["updateStrategy"] = json!("merge");
    config["manifests"][1]["manifest"]["metadata"]["labels"] = json!({"tier": "state"});
    config["readinessChecks"] = json!({"custom": [{"name": "state-done",
        "resourceSelector": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "state", "namespace": "default"}],
        "requirements": [{"jsonPath": ".data.phase", "operator": "==", "values": [{"value": "done"}]}]},
        {"name": "labelled-done",
        "labelSelector": {"apiVersion": "v1", "kind": "ConfigMap", "matchLabels": {"tier": "state"}},
        "requirements": [{"jsonPath": ".data.phase", "operator": "in", "values": [{"value": "done"}, {"value": "finished"}]}]}]});
    config["exports"] = json!({"exports": [
        {"key": "web.replicas", "jsonPath": ".spec.replicas",
         "fromResource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "default"}},
        {"key": "state.phase", "jsonPath": ".data.phase",
         "fromResource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "state", "namespace": "default"}},
    ]});
    create_item(
        &sb,
        "ready",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": config}),
    );
    let sbr = &sb;
    let waiting = |what: &'static str| {
        move || {
            item(sbr, "ready").is_some_and(|o| {
                o["status"]["phase"] == "Progressing"
                    && o["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter().any(|c| {
                            c["type"] == "ManifestsReady"
                                && c["status"] == "False"
                                && c["message"].as_str().is_some_and(|m| m.contains(what))
                        })
                    })
            })
        }
    };
    op.wait(
        "the item waits for the Deployment",
        WAIT,
        waiting("Deployment default/web"),
    );
    // Where a user looks, the item says what it waits for.
    let socket = work.path().join("debug.socket");
    op.wait("/deployer/items.text names the Deployment", WAIT, || {
        common::run_ok(&mut common::debug_cli(
            &socket,
            &["raw", "/deployer/items.text"],
        ))
        .lines()
        .any(|l| {
            l.contains("default/ready: Progressing, waiting for ManifestsReady=False")
                && l.contains("Deployment default/web")
        })
    });
    // `bosun explain` names the wait too, with the item's history, live.
    let explain = |args: &[&str]| {
        common::run_ok(
            std::process::Command::new(common::bosun_bin())
                .arg("explain")
                .args(args)
                .env("LOG_LEVEL", "error"),
        )
    };
    let live = explain(&[
        "DeployItem/ready",
        "-n",
        "default",
        "--debug-unix-socket",
        &socket.display().to_string(),
    ]);
    assert!(
        live.starts_with("DeployItem default/ready\n")
            && live.contains("made by: the deployer")
            && live.contains("deployitem/default/ready: - → Init")
            && live.contains("now: (live) phase Progressing, waiting for ManifestsReady=False")
            && live.contains("Deployment default/web"),
        "{live}"
    );
    let in_target = |path: &str| {
        let (code, v) = target_cluster.get(path);
        (code == 200).then_some(v)
    };
    let state = in_target("/api/v1/namespaces/default/configmaps/state").expect("state");
    assert_eq!(
        state["metadata"]["annotations"]["example.com/note"], "created-by-bosun",
        "annotateBeforeCreate"
    );

    // The Deployment's controller reports it rolled out.
    let mut web = in_target("/apis/apps/v1/namespaces/default/deployments/web").expect("web");
    let generation = web["metadata"]["generation"].clone();
    web["status"] = json!({"observedGeneration": generation, "replicas": 1,
                           "updatedReplicas": 1, "availableReplicas": 1, "readyReplicas": 1});
    let (code, answer) = target_cluster.put(
        "/apis/apps/v1/namespaces/default/deployments/web/status",
        &web,
    );
    assert_eq!(code, 200, "{answer}");
    op.wait(
        "the item waits for the custom check",
        WAIT,
        waiting("state-done"),
    );
    op.wait(
        "the item waits for the objects the label selector finds",
        WAIT,
        waiting("\"labelled-done\": ConfigMap with labels tier=state: state: "),
    );
    // Someone else finishes the state: `merge` keeps their value, the check passes.
    let mut state = in_target("/api/v1/namespaces/default/configmaps/state").expect("state");
    state["data"]["phase"] = json!("done");
    let (code, answer) = target_cluster.put("/api/v1/namespaces/default/configmaps/state", &state);
    assert_eq!(code, 200, "{answer}");
    let done = wait_phase(&op, &sb, "ready", "Succeeded");
    let secret = done["status"]["exportRef"]["name"]
        .as_str()
        .expect("an export Secret")
        .to_string();
    assert_eq!(
        secret_config(&sb, &secret),
        Some(json!({"web": {"replicas": 1}, "state": {"phase": "done"}}))
    );
    let state = in_target("/api/v1/namespaces/default/configmaps/state").expect("state");
    assert_eq!(state["data"]["phase"], "done", "merge kept the live value");
    assert_eq!(state["data"]["deployed"], "yes", "patchAfterDeployment");
    // Offline, from the journal folder: the object names the item that deploys it.
    let journal_dir = work.path().join("journal").display().to_string();
    let offline: Value = serde_json::from_str(&explain(&[
        "configmap/state",
        "-n",
        "default",
        "--journal-dir",
        &journal_dir,
        "-o",
        "json",
    ]))
    .expect("explain -o json");
    assert_eq!(
        offline["madeBy"],
        json!(["deployitem/default/ready, which deploys it"]),
        "{offline:#}"
    );
    assert!(
        offline["history"][0]["what"]
            .as_str()
            .is_some_and(|w| w.starts_with("applied by deployitem/default/ready's run")),
        "{offline:#}"
    );
    assert_eq!(
        offline["now"],
        json!(["managed by deployitem/default/ready"]),
        "{offline:#}"
    );
    let item_now = explain(&["DeployItem/ready", "--journal-dir", &journal_dir]);
    assert!(item_now.contains("now: Succeeded"), "{item_now}");
    // The deployer's journal replayed: the item's state at the end, and at its first record.
    let replay = |until: Option<&str>| -> Value {
        let mut cmd = std::process::Command::new(common::bosun_bin());
        cmd.args([
            "journal",
            "--journal-dir",
            &journal_dir,
            "replay",
            "--journal",
            "deployer",
            "-o",
            "json",
        ]);
        if let Some(u) = until {
            cmd.args(["--until", u]);
        }
        serde_json::from_str(&common::run_ok(cmd.env("LOG_LEVEL", "error")))
            .expect("replay -o json")
    };
    let end = replay(None);
    let ready = &end["deployitem/default/ready"];
    assert_eq!(ready["phase"], "Succeeded", "{end:#}");
    assert!(
        ready["managed"]
            .as_array()
            .is_some_and(|m| m.contains(&json!("ConfigMap default/state"))
                && m.contains(&json!("Deployment default/web"))),
        "{end:#}"
    );
    let first = replay(Some("1"));
    assert_eq!(
        first["deployitem/default/ready"]["phase"], "Init",
        "{first:#}"
    );

    // A bad check fails at once, naming the field.
    let mut bad = manifest_config(json!([{"manifest": cm("default", "x", json!({}))}]));
    bad["readinessChecks"] = json!({"custom": [{"name": "c",
        "resourceSelector": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}],
        "requirements": [{"jsonPath": ".data.y", "operator": "about"}]}]});
    create_item(
        &sb,
        "bad-check",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": bad}),
    );
    fails_naming(
        &op,
        &sb,
        "bad-check",
        "readinessChecks.custom[0].requirements[0].operator",
        Naming::Contains,
    );
}

#[test]
fn deletion_groups_go_in_order_and_force_delete_strips_finalizers() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    let mut held = cm("default", "held", json!({"v": "1"}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let mut config = manifest_config(json!([
        {"manifest": held},
        {"manifest": cm("default", "plain", json!({"v": "1"})),
         "annotateBeforeDelete": {"example.com/going": "yes"}},
    ]));
    config["deletionGroups"] = json!([
        {"customResourceGroup": {"resources": [{"apiVersion": "v1", "kind": "ConfigMap", "names": ["held"]}], "forceDelete": true}},
        {"predefinedResourceGroup": {"type": "namespaced-resources"}},
        // Every Secret of `default` in the target, whoever made it.
        {"customResourceGroup": {"deleteAllResources": true,
            "resources": [{"apiVersion": "v1", "kind": "Secret", "namespaces": ["default"]}]}},
    ]);
    create_item(
        &sb,
        "grouped",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": config}),
    );
    wait_phase(&op, &sb, "grouped", "Succeeded");
    let in_target = |path: &str| {
        let (code, v) = target_cluster.get(path);
        (code == 200).then_some(v)
    };
    assert!(in_target("/api/v1/namespaces/default/configmaps/held").is_some());
    post_ok(
        &target_cluster,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}),
    );
    for (ns, name) in [("default", "stray"), ("other", "elsewhere")] {
        post_ok(
            &target_cluster,
            &format!("/api/v1/namespaces/{ns}/secrets"),
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}}),
        );
    }
    delete_and_wait(&op, &sb, "grouped");
    assert!(
        in_target("/api/v1/namespaces/default/configmaps/held").is_none(),
        "forceDelete removed the finalizer that held it"
    );
    assert!(in_target("/api/v1/namespaces/default/configmaps/plain").is_none());
    assert!(
        in_target("/api/v1/namespaces/default/secrets/stray").is_none(),
        "deleteAllResources takes objects the item never made"
    );
    assert!(
        in_target("/api/v1/namespaces/other/secrets/elsewhere").is_some(),
        "only in the namespaces the group names"
    );

    // A bad group fails the item at once, naming the field.
    let mut bad = manifest_config(json!([{"manifest": cm("default", "x", json!({}))}]));
    bad["deletionGroups"] = json!([{"predefinedResourceGroup": {"type": "pods"}}]);
    create_item(
        &sb,
        "bad-group",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": bad}),
    );
    let failed = wait_phase(&op, &sb, "bad-group", "Failed");
    assert!(
        failed["status"]["lastError"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("deletionGroups[0].predefinedResourceGroup.type"),
        "{}",
        failed["status"]["lastError"]
    );
}

const HELM: &str = "landscaper.gardener.cloud/helm";

/// A chart `web` as a gzipped tar: a ConfigMap `<release>-cm` whose `color` is the value
/// `color`, with defaults `color: blue`, `port: 80`.
fn web_chart(version: &str) -> Vec<u8> {
    let files = [
        (
            "web/Chart.yaml",
            format!("apiVersion: v2\nname: web\nversion: {version}\nappVersion: \"{version}\"\n"),
        ),
        ("web/values.yaml", "color: blue\nport: 80\n".to_string()),
        (
            "web/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\ndata:\n  color: {{ .Values.color | quote }}\n  chart: {{ .Chart.Version | quote }}\n".to_string(),
        ),
    ];
    let files: Vec<(&str, Vec<u8>)> = files
        .into_iter()
        .map(|(path, text)| (path, text.into_bytes()))
        .collect();
    tar_of(&files, true)
}

fn helm_config(chart: Value, extra: Value) -> Value {
    let mut c = json!({
        "apiVersion": "helm.deployer.landscaper.gardener.cloud/v1alpha1",
        "kind": "ProviderConfiguration",
        "name": "web", "namespace": "apps", "chart": chart,
    });
    if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
        c.extend(extra);
    }
    c
}

/// The Helm release Secrets (`sh.helm.release.v1.<name>.v<n>`) of `namespace`.
fn release_secrets(cluster: &Sandbox, namespace: &str) -> Vec<String> {
    let (_, list) = cluster.get(&format!(
        "/api/v1/namespaces/{namespace}/secrets?labelSelector=owner%3Dhelm"
    ));
    let mut names: Vec<String> = list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|s| s["metadata"]["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Leaves a revision `version + 1` of release `name` pending, as an upgrade that died with
/// its process does: a copy of revision `version` marked `pending-upgrade` (in its labels and
/// in the release record, base64 of gzip of JSON, as Helm's Secret driver stores it).
fn leave_pending(cluster: &Sandbox, namespace: &str, name: &str, version: u64) {
    use base64::engine::general_purpose::STANDARD;
    use std::io::{Read as _, Write as _};
    let (code, mut secret) = cluster.get(&format!(
        "/api/v1/namespaces/{namespace}/secrets/sh.helm.release.v1.{name}.v{version}"
    ));
    assert_eq!(code, 200, "revision {version}: {secret}");
    let stored = STANDARD
        .decode(secret["data"]["release"].as_str().expect("data.release"))
        .expect("base64");
    let gz = STANDARD.decode(stored).expect("Helm's base64");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .expect("gzip");
    let mut release: Value = serde_json::from_str(&text).expect("the release record");
    let next = version + 1;
    release["version"] = json!(next);
    release["info"]["status"] = json!("pending-upgrade");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(release.to_string().as_bytes()).expect("gzip");
    let record = STANDARD.encode(gz.finish().expect("gzip"));
    secret["data"]["release"] = json!(STANDARD.encode(record));
    secret["metadata"] = json!({
        "name": format!("sh.helm.release.v1.{name}.v{next}"),
        "namespace": namespace,
        "labels": {"name": name, "owner": "helm", "status": "pending-upgrade", "version": next.to_string()},
    });
    post_ok(
        cluster,
        &format!("/api/v1/namespaces/{namespace}/secrets"),
        &secret,
    );
}

#[test]
fn a_helm_item_installs_upgrades_exports_and_uninstalls_a_release_through_the_library() {
    helm_release_lifecycle(common::HelmEngine::Library);
}

#[test]
fn a_helm_item_installs_upgrades_exports_and_uninstalls_a_release_through_the_binary() {
    helm_release_lifecycle(common::HelmEngine::Cli);
}

/// A helm item with a real release in the target cluster, through one Helm engine.
fn helm_release_lifecycle(engine: common::HelmEngine) {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let env = engine.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let op = bosun(&sb, work.path(), &env);
    target_for(&sb, &target_cluster, "cluster-2");
    let raw = base64::engine::general_purpose::STANDARD.encode(web_chart("1.0.0"));
    let config = |color: &str| {
        helm_config(
            json!({"archive": {"raw": raw}}),
            json!({
                "createNamespace": true,
                "values": {"color": color},
                "exports": {"exports": [
                    {"key": "port", "jsonPath": ".Values.port"},
                    {"key": "live.color", "jsonPath": ".data.color",
                     "fromResource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "web-cm", "namespace": "apps"}},
                ]},
            }),
        )
    };
    create_item(
        &sb,
        "web",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "config": config("green")}),
    );
    let done = wait_phase(&op, &sb, "web", "Succeeded");
    let in_target = |path: &str| {
        let (code, v) = target_cluster.get(path);
        (code == 200).then_some(v)
    };
    let cm = in_target("/api/v1/namespaces/apps/configmaps/web-cm")
        .expect("the chart's object in the target");
    assert_eq!(
        cm["data"]["color"], "green",
        "the item's values over the defaults"
    );
    assert_eq!(
        release_secrets(&target_cluster, "apps"),
        ["sh.helm.release.v1.web.v1"],
        "a real release, in the target cluster"
    );
    assert!(
        release_secrets(&sb, "apps").is_empty(),
        "nothing in the items' cluster"
    );
    assert_eq!(done["status"]["providerStatus"]["release"]["revision"], 1);
    let export = done["status"]["exportRef"]["name"]
        .as_str()
        .expect("exportRef")
        .to_string();
    assert_eq!(
        secret_config(&sb, &export),
        Some(json!({"port": 80, "live": {"color": "green"}})),
        "exports from the values root and from the release's object"
    );

    // New values: one upgrade, one new revision.
    edit_item(&sb, "web", |o| o["spec"]["config"] = config("red"));
    op.wait("the upgrade", WAIT, || {
        item(&sb, "web").is_some_and(|o| {
            o["status"]["observedGeneration"] == 2 && o["status"]["phase"] == "Succeeded"
        })
    });
    assert_eq!(
        in_target("/api/v1/namespaces/apps/configmaps/web-cm").expect("cm")["data"]["color"],
        "red"
    );
    assert_eq!(
        release_secrets(&target_cluster, "apps"),
        ["sh.helm.release.v1.web.v1", "sh.helm.release.v1.web.v2"]
    );

    // An upgrade that died with its process left revision 3 pending, which would refuse
    // every later operation: the next run removes it first and upgrades without an error.
    leave_pending(&target_cluster, "apps", "web", 2);
    edit_item(&sb, "web", |o| o["spec"]["config"] = config("yellow"));
    op.wait("the upgrade past the pending revision", WAIT, || {
        item(&sb, "web").is_some_and(|o| {
            o["status"]["observedGeneration"] == 3 && o["status"]["phase"] == "Succeeded"
        })
    });
    let upgraded = item(&sb, "web").expect("the item");
    assert!(
        upgraded["status"]["lastError"].is_null(),
        "no failed try first: {}",
        upgraded["status"]["lastError"]
    );
    assert_eq!(
        upgraded["status"]["providerStatus"]["release"]["revision"],
        3
    );
    assert_eq!(
        in_target("/api/v1/namespaces/apps/configmaps/web-cm").expect("cm")["data"]["color"],
        "yellow"
    );
    let v3 =
        in_target("/api/v1/namespaces/apps/secrets/sh.helm.release.v1.web.v3").expect("revision 3");
    assert_eq!(v3["metadata"]["labels"]["status"], "deployed");

    // A bad chart fails at once, naming the field; the deployer goes on.
    create_item(
        &sb,
        "not-a-chart",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "config": helm_config(
            json!({"archive": {"raw": base64::engine::general_purpose::STANDARD.encode(b"plain text")}}),
            json!({}),
        )}),
    );
    fails_naming(
        &op,
        &sb,
        "not-a-chart",
        "spec.config.chart.archive.raw",
        Naming::Starts,
    );

    // Deletion uninstalls the release.
    delete_and_wait(&op, &sb, "web");
    assert!(in_target("/api/v1/namespaces/apps/configmaps/web-cm").is_none());
    assert!(
        release_secrets(&target_cluster, "apps").is_empty(),
        "the release is uninstalled"
    );
}

/// Serves `files` (path → body) over HTTP on 127.0.0.1 until the test ends, to requests
/// that carry `authorization` (401 to the others); its URL.
fn serve_files(files: Vec<(String, Vec<u8>)>, authorization: &'static str) -> String {
    serve_files_over(files, Some(authorization), None)
}

/// Serves `files` (path → body) on 127.0.0.1 until the test ends, over HTTPS with `tls`,
/// else HTTP; with `authorization`, only to requests that carry it (401 to the others).
/// Its URL.
fn serve_files_over(
    files: Vec<(String, Vec<u8>)>,
    authorization: Option<&'static str>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> String {
    serve(tls, move |path, header| {
        let found = files.iter().find(|(p, _)| p == path);
        match found {
            _ if authorization.is_some() && header != authorization => {
                ("401 Unauthorized", String::new(), b"who are you".to_vec())
            }
            Some((_, b)) => ("200 OK", String::new(), b.clone()),
            None => ("404 Not Found", String::new(), b"not found".to_vec()),
        }
    })
}

/// An answer of [`serve`]: a status, extra header lines, a body.
type Reply = (&'static str, String, Vec<u8>);

/// Serves HTTP (HTTPS with `tls`) on 127.0.0.1 until the test ends: `answer` maps a
/// request's path and `Authorization` header to a status, extra header lines and a body.
/// Its URL.
fn serve(
    tls: Option<Arc<rustls::ServerConfig>>,
    answer: impl Fn(&str, Option<&str>) -> Reply + Send + 'static,
) -> String {
    serve_requests(tls, move |_, path, authorization, _| {
        answer(path, authorization)
    })
}

/// [`serve`] with each request's method and body too.
fn serve_requests(
    tls: Option<Arc<rustls::ServerConfig>>,
    answer: impl Fn(&str, &str, Option<&str>, &[u8]) -> Reply + Send + 'static,
) -> String {
    use std::io::{BufRead as _, BufReader, Read, Write};
    type Answer<'a> = &'a dyn Fn(&str, &str, Option<&str>, &[u8]) -> Reply;
    fn one<S: Read + Write>(stream: S, answer: Answer<'_>) -> Option<S> {
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        // A client that gives up in the TLS handshake fails here.
        reader.read_line(&mut line).ok()?;
        // The rest of the head.
        let (mut header, mut authorization, mut length) = (String::new(), None, 0usize);
        while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
            let (name, value) = header.split_once(':').unwrap_or_default();
            if name.eq_ignore_ascii_case("authorization") {
                authorization = Some(value.trim().to_string());
            } else if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
            header.clear();
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        let mut words = line.split_whitespace();
        let method = words.next().unwrap_or_default();
        let path = words.next().unwrap_or_default();
        let mut stream = reader.into_inner();
        let (status, headers, reply) = answer(method, path, authorization.as_deref(), &body);
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n",
            reply.len()
        );
        let _ = stream.write_all(&reply);
        let _ = stream.flush();
        Some(stream)
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            match &tls {
                None => {
                    one(stream, &answer);
                }
                Some(config) => {
                    let Ok(conn) = rustls::ServerConnection::new(Arc::clone(config)) else {
                        continue;
                    };
                    if let Some(mut s) = one(rustls::StreamOwned::new(conn, stream), &answer) {
                        s.conn.send_close_notify();
                        let _ = s.flush();
                    }
                }
            }
        }
    });
    url
}

/// The identity token [`serve_registry`]'s token service exchanges for an access token.
const REFRESH_TOKEN: &str = "refresh-123";

/// An OCI registry on 127.0.0.1 holding `chart` as `charts/web:1.0.0`, as `helm push`
/// stores it, that wants a token from its token service for every read; the token
/// service wants `login`, or exchanges [`REFRESH_TOKEN`] (a `POST`). Its `host:port`.
fn serve_registry(chart: Vec<u8>, login: &'static str) -> String {
    let layer = sha256(&chart);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": "sha256:00", "size": 2},
        "layers": [{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "digest": layer, "size": chart.len()}],
    })
    .to_string()
    .into_bytes();
    let port = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let realm = std::sync::Arc::clone(&port);
    let url = serve_requests(None, move |method, path, authorization, body| {
        let base = realm.get().cloned().unwrap_or_default();
        // An identity token (docker config `identitytoken`) is exchanged by a POST.
        if method == "POST" && path == "/token" {
            let form = String::from_utf8_lossy(body);
            let fields: Vec<&str> = form.split('&').collect();
            if !fields.contains(&"grant_type=refresh_token")
                || !fields.contains(&format!("refresh_token={REFRESH_TOKEN}").as_str())
                || !fields.contains(&"scope=repository:charts/web:pull")
            {
                return ("401 Unauthorized", String::new(), b"bad refresh".to_vec());
            }
            return (
                "200 OK",
                String::new(),
                br#"{"access_token": "pull-token"}"#.to_vec(),
            );
        }
        if path.starts_with("/token?") {
            if authorization != Some(login) {
                return ("401 Unauthorized", String::new(), b"log in".to_vec());
            }
            return (
                "200 OK",
                String::new(),
                br#"{"token": "pull-token"}"#.to_vec(),
            );
        }
        if authorization != Some("Bearer pull-token") {
            let challenge = format!(
                "www-authenticate: Bearer realm=\"{base}/token\",service=\"registry\",scope=\"repository:charts/web:pull\"\r\n"
            );
            return ("401 Unauthorized", challenge, b"token please".to_vec());
        }
        if path == "/v2/charts/web/manifests/1.0.0" {
            ("200 OK", String::new(), manifest.clone())
        } else if path == format!("/v2/charts/web/blobs/{layer}") {
            ("200 OK", String::new(), chart.clone())
        } else {
            ("404 Not Found", String::new(), b"not found".to_vec())
        }
    });
    let _ = port.set(url.clone());
    url.trim_start_matches("http://").to_string()
}

/// A docker config Secret `name` in `default` holding `docker_config`.
fn pull_secret(sb: &Sandbox, name: &str, docker_config: Value) {
    post_ok(
        sb,
        "/api/v1/namespaces/default/secrets",
        &json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                "metadata": {"name": name, "namespace": "default"},
                "stringData": {".dockerconfigjson": docker_config.to_string()}}),
    );
}

/// A Context `name` in `default` whose `registryPullSecrets` names `secret`.
fn pull_context(sb: &Sandbox, name: &str, secret: &str) {
    post_ok(
        sb,
        "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/contexts",
        &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Context",
                "metadata": {"name": name, "namespace": "default"},
                "registryPullSecrets": [{"name": secret}]}),
    );
}

#[test]
fn a_helm_item_installs_a_chart_from_an_oci_registry() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    // user "u", password "p"
    let registry = serve_registry(web_chart("1.0.0"), "Basic dTpw");
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    create_item(
        &sb,
        "from-oci",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "config": helm_config(
            json!({"ref": format!("{registry}/charts/web:1.0.0")}),
            json!({"name": "oci", "namespace": "default", "values": {"color": "teal"}}),
        )}),
    );
    // Without a login the registry's token service refuses: reported and retried.
    op.wait("the refused token reported", WAIT, || {
        item(&sb, "from-oci").is_some_and(|o| {
            o["status"]["lastError"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("token service") && m.contains("401"))
        })
    });
    // The login, as landscaper reads it: a docker config Secret named in the Context's
    // registryPullSecrets.
    pull_secret(
        &sb,
        "pull",
        json!({"auths": {registry.clone(): {"username": "u", "password": "p"}}}),
    );
    pull_context(&sb, "default", "pull");
    let done = wait_phase(&op, &sb, "from-oci", "Succeeded");
    let (code, cm) = target_cluster.get("/api/v1/namespaces/default/configmaps/oci-cm");
    assert_eq!(code, 200, "the chart from the registry, released: {cm}");
    assert_eq!(cm["data"], json!({"color": "teal", "chart": "1.0.0"}));
    assert_eq!(done["status"]["providerStatus"]["release"]["revision"], 1);
    assert_eq!(
        release_secrets(&target_cluster, "default"),
        ["sh.helm.release.v1.oci.v1"]
    );

    // A docker config with an identity token (as `az acr login --expose-token` gives):
    // exchanged at the token service for an access token.
    pull_secret(
        &sb,
        "pull-identity",
        json!({"auths": {registry.clone(): {"identitytoken": REFRESH_TOKEN}}}),
    );
    pull_context(&sb, "identity", "pull-identity");
    create_item(
        &sb,
        "from-oci-identity",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "context": "identity", "config": helm_config(
            json!({"ref": format!("{registry}/charts/web:1.0.0")}),
            json!({"name": "oci-id", "namespace": "default", "values": {"color": "plum"}}),
        )}),
    );
    wait_phase(&op, &sb, "from-oci-identity", "Succeeded");
    let (code, cm) = target_cluster.get("/api/v1/namespaces/default/configmaps/oci-id-cm");
    assert_eq!(code, 200, "pulled with the exchanged token: {cm}");
    assert_eq!(cm["data"]["color"], "plum");

    // A tag the registry does not have: reported with the reference and retried.
    create_item(
        &sb,
        "missing-tag",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "config": helm_config(
            json!({"ref": format!("{registry}/charts/web:9.9.9")}),
            json!({"name": "missing", "namespace": "default"}),
        )}),
    );
    op.wait("the missing tag reported", WAIT, || {
        item(&sb, "missing-tag").is_some_and(|o| {
            o["status"]["phase"] == "Progressing"
                && o["status"]["lastError"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("spec.config.chart.ref") && m.contains("404"))
        })
    });
    // A reference that is a URL fails at once, naming the field.
    create_item(
        &sb,
        "url-ref",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "config": helm_config(
            json!({"ref": format!("http://{registry}/charts/web:1.0.0")}),
            json!({"name": "url", "namespace": "default"}),
        )}),
    );
    fails_naming(&op, &sb, "url-ref", "spec.config.chart.ref", Naming::Starts);
    // A pull Secret that does not exist fails at once, naming it.
    pull_context(&sb, "no-pull-secret", "nope");
    create_item(
        &sb,
        "no-pull-secret",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "context": "no-pull-secret",
        "config": helm_config(
            json!({"ref": format!("{registry}/charts/web:1.0.0")}),
            json!({"name": "nope", "namespace": "default"}),
        )}),
    );
    fails_naming(
        &op,
        &sb,
        "no-pull-secret",
        "Context default/no-pull-secret: registryPullSecrets[0]: Secret default/nope not found",
        Naming::Starts,
    );
    delete_and_wait(&op, &sb, "from-oci");
    delete_and_wait(&op, &sb, "from-oci-identity");
    assert!(release_secrets(&target_cluster, "default").is_empty());
}

/// `sha256:<hex>` of `bytes`.
fn sha256(bytes: &[u8]) -> String {
    let hex: String = ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// A tar (gzipped when `gz`) of `files`.
fn tar_of(files: &[(&str, Vec<u8>)], gz: bool) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, bytes) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, path, bytes.as_slice())
            .expect("tar entry");
    }
    let tar = b.into_inner().expect("tar");
    if !gz {
        return tar;
    }
    use std::io::Write as _;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(&tar).expect("gzip");
    z.finish().expect("gzip")
}

/// The key landscaper's `getResourceKey` gives a resource of `example.com/app:1.0.0+1`.
fn resource_key(identity: Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(
        json!({"component": {"name": "example.com/app", "version": "1.0.0+1"}, "resource": identity})
            .to_string(),
    )
}

/// An OCI registry on 127.0.0.1 that wants `Basic dTpw` (u:p) for every read, holding the
/// OCM component version `example.com/app:1.0.0+1` under `ocm/` (as `ocm transfer` stores
/// one: a manifest, its config, the descriptor in a tar layer and local blobs) and the chart
/// `charts/web:1.0.0`. The component's resources: `chart` (ociArtifact → charts/web:1.0.0),
/// `chart` with extra identity `flavour: local` (a local blob: the chart 2.0.0's tgz) and
/// `packed` (a local blob in artifact-set format holding the chart 3.0.0). Its host:port.
fn serve_component_registry() -> String {
    const LOGIN: &str = "Basic dTpw";
    let port = Arc::new(std::sync::OnceLock::<String>::new());
    let host = Arc::clone(&port);
    let chart_manifest = |chart: &[u8]| {
        json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
               "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": "sha256:00", "size": 2},
               "layers": [{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "digest": sha256(chart), "size": chart.len()}]})
        .to_string()
        .into_bytes()
    };
    let (v1, v2, v3) = (web_chart("1.0.0"), web_chart("2.0.0"), web_chart("3.0.0"));
    let v1_manifest = chart_manifest(&v1);
    let set_manifest = chart_manifest(&v3);
    let artifact_set = tar_of(
        &[
            (
                "index.json",
                json!({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha256(&set_manifest)}]})
                    .to_string()
                    .into_bytes(),
            ),
            (
                &format!("blobs/{}", sha256(&set_manifest).replace(':', ".")),
                set_manifest.clone(),
            ),
            (&format!("blobs/{}", sha256(&v3).replace(':', ".")), v3.clone()),
        ],
        true,
    );
    let (local_digest, set_digest) = (sha256(&v2), sha256(&artifact_set));
    let files = move || {
        let registry = host.get().cloned().unwrap_or_default();
        let descriptor = format!(
            "meta:\n  schemaVersion: v2\ncomponent:\n  name: example.com/app\n  version: 1.0.0+1\n  provider: acme\n  repositoryContexts: []\n  sources: []\n  componentReferences: []\n  resources:\n  - name: chart\n    version: 1.0.0\n    type: helmChart\n    relation: external\n    access:\n      type: ociArtifact\n      imageReference: {registry}/charts/web:1.0.0\n  - name: chart\n    version: 2.0.0\n    type: helmChart\n    relation: local\n    extraIdentity:\n      flavour: local\n    access:\n      type: localBlob\n      localReference: {local_digest}\n      mediaType: application/vnd.cncf.helm.chart.content.v1.tar+gzip\n  - name: packed\n    version: 3.0.0\n    type: helmChart\n    relation: local\n    access:\n      type: localBlob\n      localReference: {set_digest}\n      mediaType: application/vnd.oci.image.manifest.v1+tar+gzip\n"
        );
        let layer = tar_of(
            &[("component-descriptor.yaml", descriptor.into_bytes())],
            false,
        );
        let config = json!({"componentDescriptorLayer": {"mediaType": "application/vnd.ocm.software.component-descriptor.v2+yaml+tar", "digest": sha256(&layer), "size": layer.len()}})
            .to_string()
            .into_bytes();
        let manifest = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.ocm.software.component.config.v1+json", "digest": sha256(&config), "size": config.len()},
            "layers": [
                {"mediaType": "application/vnd.ocm.software.component-descriptor.v2+yaml+tar", "digest": sha256(&layer), "size": layer.len()},
                {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "digest": local_digest, "size": v2.len()},
                {"mediaType": "application/vnd.oci.image.manifest.v1+tar+gzip", "digest": set_digest, "size": artifact_set.len()},
            ]})
        .to_string()
        .into_bytes();
        let cv = "/v2/ocm/component-descriptors/example.com/app";
        vec![
            (format!("{cv}/manifests/1.0.0.build-1"), manifest),
            (format!("{cv}/blobs/{}", sha256(&config)), config),
            (format!("{cv}/blobs/{}", sha256(&layer)), layer),
            (format!("{cv}/blobs/{local_digest}"), v2.clone()),
            (format!("{cv}/blobs/{set_digest}"), artifact_set.clone()),
            ("/v2/charts/web/manifests/1.0.0".into(), v1_manifest.clone()),
            (format!("/v2/charts/web/blobs/{}", sha256(&v1)), v1.clone()),
        ]
    };
    let url = serve(None, move |path, authorization| {
        if authorization != Some(LOGIN) {
            return ("401 Unauthorized", String::new(), b"log in".to_vec());
        }
        match files().into_iter().find(|(p, _)| p == path) {
            Some((_, body)) => ("200 OK", String::new(), body),
            None => ("404 Not Found", String::new(), b"not found".to_vec()),
        }
    });
    let host = url.trim_start_matches("http://").to_string();
    let _ = port.set(host.clone());
    host
}

#[test]
fn a_helm_item_takes_its_chart_from_a_component_version_by_resource_key() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let registry = serve_component_registry();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    pull_secret(
        &sb,
        "ocm-pull",
        json!({"auths": {registry.clone(): {"username": "u", "password": "p"}}}),
    );
    // The Context landscaper gives an installation's items: the component repository.
    post_ok(
        &sb,
        "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/contexts",
        &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Context",
                "metadata": {"name": "ocm", "namespace": "default"},
                "repositoryContext": {"type": "OCIRegistry", "baseUrl": format!("{registry}/ocm")},
                "registryPullSecrets": [{"name": "ocm-pull"}]}),
    );
    let chart_item = |name: &str, key: String| {
        create_item(
            &sb,
            name,
            json!({"type": HELM, "target": {"name": "cluster-2"}, "context": "ocm", "config": helm_config(
                json!({"resourceRef": key}),
                json!({"name": name, "namespace": "default", "helmDeployment": false}),
            )}),
        );
    };
    // By access: an OCI artifact the descriptor points at, a local blob of the component
    // version, and a local blob in artifact-set format.
    for (name, identity, version) in [
        ("by-oci", json!({"name": "chart"}), "1.0.0"),
        (
            "by-local-blob",
            json!({"name": "chart", "flavour": "local"}),
            "2.0.0",
        ),
        ("by-artifact-set", json!({"name": "packed"}), "3.0.0"),
    ] {
        chart_item(name, resource_key(identity));
        wait_phase(&op, &sb, name, "Succeeded");
        let (code, cm) =
            target_cluster.get(&format!("/api/v1/namespaces/default/configmaps/{name}-cm"));
        assert_eq!(code, 200, "{name}: the component's chart rendered: {cm}");
        assert_eq!(cm["data"]["chart"], version, "{name}: {cm}");
    }
    // The repositories an .ocmconfig's resolvers name, in a ConfigMap the Context's
    // ocmConfig names: the one of higher priority lacks the component, the next has it;
    // the registry's login is the .ocmconfig's too (the Context has no pull Secrets).
    let port = registry.rsplit_once(':').map_or("", |(_, p)| p);
    post_ok(
        &sb,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ocm-config", "namespace": "default"},
                "data": {".ocmconfig": format!("type: generic.config.ocm.software/v1\nconfigurations:\n- type: credentials.config.ocm.software\n  consumers:\n  - identity: {{type: OCIRegistry, hostname: 127.0.0.1, port: '{port}'}}\n    credentials:\n    - type: Credentials\n      properties: {{username: u, password: p}}\n- type: ocm.config.ocm.software\n  resolvers:\n  - repository: {{type: OCIRegistry, baseUrl: {registry}, subPath: ocm}}\n    prefix: example.com\n    priority: 10\n  - repository: {{type: OCIRegistry, baseUrl: {registry}/elsewhere}}\n    prefix: example.com/app\n    priority: 20\n")}}),
    );
    post_ok(
        &sb,
        "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/contexts",
        &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Context",
                "metadata": {"name": "ocm-resolvers", "namespace": "default"},
                "ocmConfig": {"name": "ocm-config"}}),
    );
    create_item(
        &sb,
        "by-resolver",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "context": "ocm-resolvers", "config": helm_config(
            json!({"resourceRef": resource_key(json!({"name": "chart"}))}),
            json!({"name": "by-resolver", "namespace": "default", "helmDeployment": false}),
        )}),
    );
    wait_phase(&op, &sb, "by-resolver", "Succeeded");
    let (code, cm) = target_cluster.get("/api/v1/namespaces/default/configmaps/by-resolver-cm");
    assert_eq!(code, 200, "found through the second resolver: {cm}");
    assert_eq!(cm["data"]["chart"], "1.0.0");
    // The login from an .ocmconfig's credential repositories instead: a docker config
    // given inline, and one in a file on bosun's file system.
    let docker_file = work.path().join("docker-config.json");
    std::fs::write(
        &docker_file,
        json!({"auths": {format!("http://{registry}"): {"username": "u", "password": "p"}}})
            .to_string(),
    )
    .expect("docker config file");
    for (name, repository) in [
        (
            "by-docker-config",
            json!({"type": "DockerConfig/v1", "dockerConfig": {"auths": {registry.clone(): {"auth": "dTpw"}}}}),
        ),
        (
            "by-docker-config-file",
            json!({"type": "DockerConfig/v1", "dockerConfigFile": docker_file}),
        ),
    ] {
        let ocmconfig = json!({"type": "generic.config.ocm.software/v1", "configurations": [
            {"type": "credentials.config.ocm.software", "repositories": [{"repository": repository}]},
            {"type": "ocm.config.ocm.software", "resolvers": [
                {"repository": {"type": "OCIRegistry", "baseUrl": registry, "subPath": "ocm"}}]}]});
        post_ok(
            &sb,
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
                    "data": {".ocmconfig": ocmconfig.to_string()}}),
        );
        post_ok(
            &sb,
            "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/contexts",
            &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Context",
                    "metadata": {"name": name, "namespace": "default"},
                    "ocmConfig": {"name": name}}),
        );
        create_item(
            &sb,
            name,
            json!({"type": HELM, "target": {"name": "cluster-2"}, "context": name, "config": helm_config(
                json!({"resourceRef": resource_key(json!({"name": "chart"}))}),
                json!({"name": name, "namespace": "default", "helmDeployment": false}),
            )}),
        );
    }
    for name in ["by-docker-config", "by-docker-config-file"] {
        wait_phase(&op, &sb, name, "Succeeded");
        let (code, cm) =
            target_cluster.get(&format!("/api/v1/namespaces/default/configmaps/{name}-cm"));
        assert_eq!(code, 200, "{name}: logged in with the docker config: {cm}");
    }

    // A resource the component does not have: the error names the field and what it has.
    chart_item("no-such-resource", resource_key(json!({"name": "nope"})));
    fails_naming(
        &op,
        &sb,
        "no-such-resource",
        "spec.config.chart.resourceRef (resource \"nope\" of example.com/app:1.0.0+1)",
        Naming::Starts,
    );
    let failed = item(&sb, "no-such-resource").unwrap_or_default();
    assert!(
        failed["status"]["lastError"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no such resource") && m.contains("packed")),
        "{failed}"
    );
    // A key that is not one, and a Context without a repository: failed, naming the field.
    chart_item("bad-key", "cd://resources/chart".into());
    fails_naming(
        &op,
        &sb,
        "bad-key",
        "spec.config.chart.resourceRef: not a resource key",
        Naming::Starts,
    );
    create_item(
        &sb,
        "no-repository",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "config": helm_config(
            json!({"resourceRef": resource_key(json!({"name": "chart"}))}),
            json!({"name": "no-repository", "namespace": "default", "helmDeployment": false}),
        )}),
    );
    fails_naming(
        &op,
        &sb,
        "no-repository",
        "spec.context: Context default/default not found",
        Naming::Starts,
    );
    delete_and_wait(&op, &sb, "by-oci");
    let (code, _) = target_cluster.get("/api/v1/namespaces/default/configmaps/by-oci-cm");
    assert_eq!(code, 404, "deleting the item removes what it applied");
}

#[test]
fn a_helm_item_from_a_chart_repository_without_helm_deployment_applies_the_rendered_objects() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let index = "apiVersion: v1\nentries:\n  web:\n  - name: web\n    version: 1.0.0\n    urls: [charts/web-1.0.0.tgz]\n  - name: web\n    version: 2.0.0\n    urls: [charts/web-2.0.0.tgz]\n";
    let repo = serve_files(
        vec![
            ("/index.yaml".into(), index.as_bytes().to_vec()),
            ("/charts/web-1.0.0.tgz".into(), web_chart("1.0.0")),
            ("/charts/web-2.0.0.tgz".into(), web_chart("2.0.0")),
        ],
        "Bearer s3cret",
    );
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");

    create_item(
        &sb,
        "rendered",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "config": helm_config(
            json!({"helmChartRepo": {"helmChartRepoUrl": repo, "helmChartName": "web", "helmChartVersion": "1.0.0"}}),
            json!({
                "namespace": "default",
                "helmDeployment": false,
                "values": {"color": "amber"},
                "exports": {"exports": [{"key": "chart", "jsonPath": ".Chart.Version"}, {"key": "color", "jsonPath": ".Values.color"}]},
            }),
        )}),
    );
    // Without the repository's credentials the download is refused and retried.
    op.wait("the refused download reported", WAIT, || {
        item(&sb, "rendered").is_some_and(|o| {
            o["status"]["lastError"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("helmChartRepo") && m.contains("401"))
        })
    });
    // The repository's credentials, as landscaper reads them: the Context's
    // helmChartRepoCredentials, the header in a Secret.
    post_ok(
        &sb,
        "/api/v1/namespaces/default/secrets",
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "repo-auth", "namespace": "default"},
                "stringData": {"authHeader": "Bearer s3cret"}}),
    );
    post_ok(
        &sb,
        "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/contexts",
        &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Context",
                "metadata": {"name": "default", "namespace": "default"},
                "configurations": {"helmChartRepoCredentials": {"auths": [
                    {"url": repo, "secretRef": {"name": "repo-auth"}}]}}}),
    );
    let done = wait_phase(&op, &sb, "rendered", "Succeeded");
    let (code, cm) = target_cluster.get("/api/v1/namespaces/default/configmaps/web-cm");
    assert_eq!(
        code, 200,
        "the rendered object is applied in the target: {cm}"
    );
    assert_eq!(cm["data"], json!({"color": "amber", "chart": "1.0.0"}));
    assert_eq!(
        cm["metadata"]["labels"]["helm.deployer.landscaper.gardener.cloud/deployitem"],
        "rendered"
    );
    assert!(
        release_secrets(&target_cluster, "default").is_empty(),
        "no release without helmDeployment"
    );
    let managed = &done["status"]["providerStatus"]["managedResources"];
    assert_eq!(managed[0]["resource"]["name"], "web-cm", "{managed}");
    let export = done["status"]["exportRef"]["name"]
        .as_str()
        .expect("exportRef")
        .to_string();
    assert_eq!(
        secret_config(&sb, &export),
        Some(json!({"chart": "1.0.0", "color": "amber"}))
    );

    // Deletion removes the rendered objects.
    delete_and_wait(&op, &sb, "rendered");
    assert_eq!(
        target_cluster
            .get("/api/v1/namespaces/default/configmaps/web-cm")
            .0,
        404
    );
}

#[test]
fn a_chart_repository_over_https_is_trusted_through_the_custom_ca_of_its_credentials() {
    let pki = common::tls::pki();
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let repo = serve_files_over(
        vec![("/web-1.0.0.tgz".into(), web_chart("1.0.0"))],
        None,
        Some(common::tls::server_config(&pki, false)),
    );
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    let ca = String::from_utf8(pki.read("ca.crt")).expect("PEM is text");
    // Three Contexts: the repository's CA as customCAData (no header: a credential may
    // bring only its CA), none at all, and text that is no certificate.
    for (name, auths) in [
        ("with-ca", json!([{"url": repo, "customCAData": ca}])),
        ("without-ca", json!([])),
        (
            "bad-ca",
            json!([{"url": repo, "customCAData": "a certificate, trust me"}]),
        ),
    ] {
        post_ok(
            &sb,
            "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/contexts",
            &json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Context",
                    "metadata": {"name": name, "namespace": "default"},
                    "configurations": {"helmChartRepoCredentials": {"auths": auths}}}),
        );
    }
    let helm_item = |name: &str, context: &str| {
        create_item(
            &sb,
            name,
            json!({"type": HELM, "target": {"name": "cluster-2"}, "context": context,
            "config": helm_config(
                json!({"archive": {"remote": {"url": format!("{repo}/web-1.0.0.tgz")}}}),
                json!({"name": name, "namespace": "default", "helmDeployment": false}),
            )}),
        );
    };
    helm_item("trusted", "with-ca");
    helm_item("untrusted", "without-ca");
    helm_item("bad-ca", "bad-ca");

    wait_phase(&op, &sb, "trusted", "Succeeded");
    let (code, cm) = target_cluster.get("/api/v1/namespaces/default/configmaps/trusted-cm");
    assert_eq!(code, 200, "the chart from the HTTPS repository: {cm}");
    // Without the CA the server's certificate is refused, reported and retried.
    op.wait("the untrusted certificate reported", WAIT, || {
        item(&sb, "untrusted").is_some_and(|o| {
            o["status"]["phase"] == "Progressing"
                && o["status"]["lastError"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&repo))
        })
    });
    fails_naming(
        &op,
        &sb,
        "bad-ca",
        "Context default/bad-ca: configurations.helmChartRepoCredentials.auths[0].customCAData",
        Naming::Contains,
    );
}

/// Two replicas on the same items: each item is worked on by one replica only, the one
/// holding its SyncObject (which of the two gets which item is first come, first served:
/// the locks exclude, they do not balance).
#[test]
fn replicas_serving_the_same_targets_run_each_item_only_on_the_holder_of_its_sync_object() {
    let sb = Sandbox::start();
    let (work_a, work_b) = (workdir(), workdir());
    // The replicas' pods: a lock's holder is alive while its pod exists.
    for pod in ["bosun-a", "bosun-b"] {
        post_ok(
            &sb,
            "/api/v1/namespaces/default/pods",
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "default"},
                    "spec": {"containers": [{"name": "bosun", "image": "bosun"}]}}),
        );
    }
    let replica = |work: &std::path::Path, pod: &'static str| {
        bosun(
            &sb,
            work,
            &[
                ("BOSUN_DEPLOYER_SYNC_OBJECTS", "true"),
                ("ADDON_OPERATOR_POD", pod),
                ("BOSUN_DEPLOYER_IDENTITY", pod),
            ],
        )
    };
    let a = replica(work_a.path(), "bosun-a");
    let _b = replica(work_b.path(), "bosun-b");
    let names: Vec<String> = (0..6).map(|i| format!("shared-{i}")).collect();
    for name in &names {
        create_item(
            &sb,
            name,
            json!({"type": MOCK, "timeout": "1h", "config": mock_config(json!({"phase": "Progressing"}))}),
        );
    }
    let lock_of = |name: &str| {
        let uid = item(&sb, name).expect("item")["metadata"]["uid"]
            .as_str()
            .expect("uid")
            .to_string();
        let (code, lock) = sb.get(&format!(
            "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/syncobjects/bosun-{uid}"
        ));
        assert_eq!(code, 200, "{name}'s SyncObject: {lock}");
        assert_eq!(lock["spec"]["name"], name, "{lock}");
        assert_eq!(lock["metadata"]["ownerReferences"][0]["uid"], uid.as_str());
        lock["spec"]["podName"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // In flight: each item is held by the replica that works on it, and only by it.
    let mut holders = Vec::new();
    for name in &names {
        let progressing = wait_phase(&a, &sb, name, "Progressing");
        let holder = lock_of(name);
        assert!(
            holder == "bosun-a" || holder == "bosun-b",
            "{name} is held while in flight: {holder:?}"
        );
        assert_eq!(
            progressing["status"]["deployer"]["identity"], holder,
            "{name} is worked on by the holder of its lock"
        );
        holders.push(holder);
    }
    // Done: the holder finishes the item and frees the lock; the other never ran it.
    for name in &names {
        edit_item(&sb, name, |o| o["spec"]["config"] = mock_config(json!({})));
    }
    for (name, holder) in names.iter().zip(&holders) {
        a.wait(&format!("{name} done and its lock freed"), WAIT, || {
            phase(&sb, name).as_deref() == Some("Succeeded") && lock_of(name).is_empty()
        });
        let other = if holder == "bosun-a" {
            &work_b
        } else {
            &work_a
        };
        assert!(
            phases_of(&journal(other.path()), name).is_empty(),
            "{name}: only its holder {holder} ran it"
        );
    }
}

/// A pod `name` in `default`, as a bosun replica's.
fn replica_pod(sb: &Sandbox, name: &str) {
    post_ok(
        sb,
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [{"name": "bosun", "image": "bosun"}]}}),
    );
}

/// The SyncObject of item `name` (prefix `bosun`), held by the replica of pod `holder`
/// since long ago. Its path.
fn held_lock(sb: &Sandbox, name: &str, holder: &str) -> String {
    let uid = item(sb, name).expect("item")["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    post_ok(
        sb,
        "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/syncobjects",
        &json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "SyncObject",
            "metadata": {"name": format!("bosun-{uid}"), "namespace": "default"},
            "spec": {"podName": holder, "kind": "DeployItem", "name": name,
                     "lastUpdateTime": "2026-01-01T00:00:00Z", "prefix": "bosun"},
        }),
    );
    format!("/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/syncobjects/bosun-{uid}")
}

#[test]
fn a_lock_whose_holder_pod_is_gone_is_taken_over_and_freed_when_done() {
    let sb = Sandbox::start();
    let work = workdir();
    replica_pod(&sb, "bosun-a");
    // The CRDs first (bosun installs them), then bosun stops: the item and its lock are
    // written while no replica runs, the lock by a replica whose pod is gone.
    let installing = bosun(&sb, work.path(), &[]);
    installing.wait("the SyncObject CRD served", WAIT, || {
        sb.get("/apis/landscaper.gardener.cloud/v1alpha1/namespaces/default/syncobjects")
            .0
            == 200
    });
    drop(installing);
    create_item(
        &sb,
        "orphaned-lock",
        json!({"type": MOCK, "config": mock_config(json!({}))}),
    );
    let lock_path = held_lock(&sb, "orphaned-lock", "bosun-gone");
    // And an item whose lock is held by a replica whose pod exists.
    replica_pod(&sb, "bosun-b");
    create_item(
        &sb,
        "held-lock",
        json!({"type": MOCK, "config": mock_config(json!({}))}),
    );
    held_lock(&sb, "held-lock", "bosun-b");
    let op = bosun(
        &sb,
        work.path(),
        &[
            ("BOSUN_DEPLOYER_SYNC_OBJECTS", "true"),
            ("ADDON_OPERATOR_POD", "bosun-a"),
            ("BOSUN_DEPLOYER_IDENTITY", "bosun-a"),
        ],
    );
    let done = wait_phase(&op, &sb, "orphaned-lock", "Succeeded");
    assert_eq!(
        done["status"]["deployer"]["identity"], "bosun-a",
        "worked on by the replica that took the lock over: {done}"
    );
    op.wait("the lock freed after the run", WAIT, || {
        let (code, lock) = sb.get(&lock_path);
        code == 200
            && lock["spec"]["podName"] == ""
            && lock["spec"]["lastUpdateTime"] != "2026-01-01T00:00:00Z"
    });

    // The item whose lock a replica with a pod holds waits, and is taken over as soon as
    // that pod is deleted (not at the next look, a minute later).
    let socket = work.path().join("debug.socket");
    op.wait("the item seen locked by bosun-b", WAIT, || {
        let text = common::run_ok(&mut common::debug_cli(&socket, &["raw", "/actors.json"]));
        let actors: Value = serde_json::from_str(&text).unwrap_or_default();
        actors["deployer"]["items"]["default/held-lock"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("locked by bosun-b"))
    });
    assert_eq!(
        item(&sb, "held-lock").expect("item")["status"]["phase"],
        Value::Null,
        "not worked on while another replica holds its lock"
    );
    let (code, _) = sb.request("DELETE", "/api/v1/namespaces/default/pods/bosun-b", "", "");
    assert_eq!(code, 200);
    // Well within the minute after which the lock would be looked at again anyway.
    op.wait(
        "the item taken over after its holder's pod was deleted",
        Duration::from_secs(20),
        || item(&sb, "held-lock").is_some_and(|o| o["status"]["phase"] == "Succeeded"),
    );
}

#[test]
fn checks_and_exports_with_a_target_name_read_another_target() {
    let sb = Sandbox::start();
    let (deployed_to, watched) = (Sandbox::start(), Sandbox::start());
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &deployed_to, "cluster-2");
    target_for(&sb, &watched, "cluster-3");
    let gate =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "gate", "namespace": "default"});
    let mut config = manifest_config(json!([
        {"manifest": cm("default", "app", json!({"v": "1"}))},
    ]));
    config["readinessChecks"] = json!({"custom": [{"name": "gate-open", "targetName": "cluster-3",
        "resourceSelector": [gate],
        "requirements": [{"jsonPath": ".data.open", "operator": "==", "values": [{"value": "yes"}]}]}]});
    config["exports"] = json!({"exports": [
        {"key": "gate.owner", "jsonPath": ".data.owner", "fromResource": gate, "targetName": "cluster-3"},
        {"key": "app.v", "jsonPath": ".data.v",
         "fromResource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "app", "namespace": "default"}},
    ]});
    create_item(
        &sb,
        "gated",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": config}),
    );
    // The objects go to cluster-2; the item waits for the gate in cluster-3, saying where.
    op.wait("the item waiting for the gate in cluster-3", WAIT, || {
        item(&sb, "gated").is_some_and(|o| {
            o["status"]["phase"] == "Progressing"
                && o["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter().any(|c| {
                        c["message"].as_str().is_some_and(|m| {
                            m.contains("ConfigMap gate in Target default/cluster-3: not found")
                        })
                    })
                })
        })
    });
    assert_eq!(
        deployed_to
            .get("/api/v1/namespaces/default/configmaps/app")
            .0,
        200
    );
    assert_eq!(
        watched.get("/api/v1/namespaces/default/configmaps/app").0,
        404,
        "only read in the other target, nothing written there"
    );
    post_ok(
        &watched,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gate", "namespace": "default"},
                "data": {"open": "yes", "owner": "team-b"}}),
    );
    let done = wait_phase(&op, &sb, "gated", "Succeeded");
    let secret = done["status"]["exportRef"]["name"]
        .as_str()
        .expect("an export Secret")
        .to_string();
    assert_eq!(
        secret_config(&sb, &secret),
        Some(json!({"gate": {"owner": "team-b"}, "app": {"v": "1"}})),
        "one export from each target"
    );

    // A targetName naming no Target fails the item at once, naming the field.
    create_item(
        &sb,
        "no-such-target",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": {
            "apiVersion": "manifest.deployer.landscaper.gardener.cloud/v1alpha2", "kind": "ProviderConfiguration",
            "manifests": [{"manifest": cm("default", "other", json!({}))}],
            "exports": {"exports": [{"key": "x", "jsonPath": ".data", "fromResource": gate, "targetName": "cluster-9"}]}}}),
    );
    fails_naming(
        &op,
        &sb,
        "no-such-target",
        "spec.config.exports.exports[0].targetName: Target default/cluster-9 not found",
        Naming::Contains,
    );
}

#[test]
fn self_and_oidc_targets_deploy_with_a_service_account_token() {
    // The items' cluster asks every request for a token: a selfConfig target gets through
    // only with the token bosun requested for its service account.
    // The other cluster is a sandbox too: it takes any token, as an OIDC-federated cluster
    // takes the items' cluster's ServiceAccount tokens.
    let sb = Sandbox::start_with(&["--token", "items-admin"]);
    let other = Sandbox::sandbox();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    post_ok(
        &sb,
        "/api/v1/namespaces/default/serviceaccounts",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer", "namespace": "default"}}),
    );
    let other_server = std::fs::read_to_string(&other.kubeconfig)
        .expect("kubeconfig")
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("server:")
                .map(|s| s.trim().to_string())
        })
        .expect("the other sandbox's server");
    let target = |name: &str, config: Value| {
        post_ok(
            &sb,
            TARGETS,
            &json!({
                "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": config},
            }),
        )
    };
    target(
        "self",
        json!({"selfConfig": {"serviceAccount": {"name": "deployer"}, "expirationSeconds": 3600}}),
    );
    target(
        "oidc",
        json!({"oidcConfig": {"server": other_server, "serviceAccount": {"name": "deployer"}, "audience": ["other-cluster"]}}),
    );
    target(
        "nobody",
        json!({"selfConfig": {"serviceAccount": {"name": "nobody"}}}),
    );
    for (item_name, target_name) in [
        ("to-self", "self"),
        ("to-oidc", "oidc"),
        ("as-nobody", "nobody"),
    ] {
        create_item(
            &sb,
            item_name,
            json!({"type": MANIFEST, "target": {"name": target_name}, "config": manifest_config(json!([
                {"manifest": cm("default", item_name, json!({"via": target_name}))},
            ]))}),
        );
    }
    wait_phase(&op, &sb, "to-self", "Succeeded");
    assert_eq!(
        sb.get("/api/v1/namespaces/default/configmaps/to-self").0,
        200,
        "selfConfig deploys into the items' cluster"
    );
    wait_phase(&op, &sb, "to-oidc", "Succeeded");
    assert_eq!(
        other.get("/api/v1/namespaces/default/configmaps/to-oidc").0,
        200,
        "oidcConfig deploys into its server"
    );
    // No such service account: retried (it may be created), the error naming it.
    op.wait("the missing service account named", WAIT, || {
        item(&sb, "as-nobody").is_some_and(|o| {
            o["status"]["phase"] == "Progressing"
                && o["status"]["lastError"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("a token of ServiceAccount default/nobody"))
        })
    });
}

#[test]
fn a_delete_all_group_with_a_target_name_deletes_in_that_target_only() {
    let sb = Sandbox::start();
    let (deployed_to, other) = (Sandbox::start(), Sandbox::start());
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &deployed_to, "cluster-2");
    target_for(&sb, &other, "cluster-3");
    post_ok(
        &other,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "leftovers"}}),
    );
    for (namespace, name) in [("leftovers", "a"), ("leftovers", "b"), ("default", "kept")] {
        post_ok(
            &other,
            &format!("/api/v1/namespaces/{namespace}/configmaps"),
            &cm(namespace, name, json!({})),
        );
    }
    let mut config = manifest_config(json!([{"manifest": cm("default", "app", json!({}))}]));
    config["deletionGroups"] = json!([
        {"customResourceGroup": {"deleteAllResources": true, "targetName": "cluster-3",
         "resources": [{"apiVersion": "v1", "kind": "ConfigMap", "namespaces": ["leftovers"]}]}},
        {"predefinedResourceGroup": {"type": "namespaced-resources"}},
    ]);
    create_item(
        &sb,
        "cleans-elsewhere",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": config}),
    );
    wait_phase(&op, &sb, "cleans-elsewhere", "Succeeded");
    assert_eq!(
        other.get("/api/v1/namespaces/leftovers/configmaps/a").0,
        200,
        "nothing is deleted before the item is"
    );
    delete_and_wait(&op, &sb, "cleans-elsewhere");
    for name in ["a", "b"] {
        assert_eq!(
            other
                .get(&format!("/api/v1/namespaces/leftovers/configmaps/{name}"))
                .0,
            404,
            "{name}: the group deleted it in cluster-3"
        );
    }
    assert_eq!(
        other.get("/api/v1/namespaces/default/configmaps/kept").0,
        200,
        "outside the group's namespaces"
    );
    assert_eq!(
        deployed_to
            .get("/api/v1/namespaces/default/configmaps/app")
            .0,
        404,
        "the item's own object deleted in its target"
    );
}

/// Deletion groups delete only what they select (landscaper's `deletionmanager.go`): the
/// documented "skip deletion of CRDs" leaves the CRD (and every object of its kind), and
/// `type: empty` keeps everything.
#[test]
fn deletion_groups_keep_what_they_do_not_select() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let in_target = |path: &str| target_cluster.get(path).0 == 200;
    for (item, groups, cm_kept) in [
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
        let mut config = manifest_config(json!([
            {"manifest": crd},
            {"manifest": cm("default", item, json!({"v": "1"}))},
        ]));
        config["deletionGroups"] = groups;
        create_item(
            &sb,
            item,
            json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": config}),
        );
        wait_phase(&op, &sb, item, "Succeeded");
        delete_and_wait(&op, &sb, item);
        assert!(
            in_target(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
            ),
            "{item}: the CRD no group selects is kept"
        );
        assert_eq!(
            in_target(&format!("/api/v1/namespaces/default/configmaps/{item}")),
            cm_kept,
            "{item}"
        );
    }
}

/// With `--deployer-contract=jobid` (beside a current landscaper) only a jobID runs an
/// item: one landscaper has not triggered yet is left alone, in the order landscaper sets
/// the jobIDs.
#[test]
fn with_the_jobid_contract_an_item_runs_only_once_it_has_a_job() {
    let sb = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[("BOSUN_DEPLOYER_CONTRACT", "jobid")]);
    for name in ["waits", "first"] {
        create_item(
            &sb,
            name,
            json!({"type": MOCK, "config": mock_config(json!({}))}),
        );
    }
    let trigger = |name: &str, job: &str| {
        let mut with_job = item(&sb, name).expect("item");
        with_job["status"]["jobID"] = json!(job);
        let (code, answer) = sb.put(&format!("{ITEMS}/{name}/status"), &with_job);
        assert_eq!(code, 200, "{answer}");
    };
    trigger("first", "job-1");
    op.wait("the triggered item finished", WAIT, || {
        item(&sb, "first").is_some_and(|i| {
            i["status"]["jobIDFinished"] == "job-1" && i["status"]["phase"] == "Succeeded"
        })
    });
    // Created before it, never triggered: untouched (no phase, no finalizer).
    let waits = item(&sb, "waits").expect("item");
    assert!(waits["status"]["phase"].is_null(), "{}", waits["status"]);
    assert!(
        waits["metadata"]["finalizers"].is_null(),
        "{}",
        waits["metadata"]
    );
    trigger("waits", "job-2");
    op.wait("the item runs once triggered", WAIT, || {
        item(&sb, "waits").is_some_and(|i| {
            i["status"]["jobIDFinished"] == "job-2" && i["status"]["phase"] == "Succeeded"
        })
    });
}

/// `policy: fallback` manages only what carries this item's label, as landscaper's object
/// applier: an existing object nobody labelled is left as it is, and one relabelled to
/// another item is not deleted when the item stops listing it.
#[test]
fn fallback_touches_only_objects_the_item_owns() {
    const LABEL: &str = "manifest.deployer.landscaper.gardener.cloud/deployitem";
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    let cms = "/api/v1/namespaces/default/configmaps";
    post_ok(
        &target_cluster,
        cms,
        &cm("default", "theirs", json!({"v": "theirs"})),
    );
    let manifests = |with_fresh: bool| {
        let mut list = vec![
            json!({"policy": "fallback", "manifest": cm("default", "theirs", json!({"v": "ours"}))}),
        ];
        if with_fresh {
            list.push(json!({"policy": "fallback", "manifest": cm("default", "fresh", json!({"v": "ours"}))}));
        }
        manifest_config(json!(list))
    };
    create_item(
        &sb,
        "falls-back",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": manifests(true)}),
    );
    wait_phase(&op, &sb, "falls-back", "Succeeded");
    let (_, theirs) = target_cluster.get(&format!("{cms}/theirs"));
    assert_eq!(
        theirs["data"]["v"], "theirs",
        "an object nobody labelled is not taken over"
    );
    assert!(theirs["metadata"]["labels"][LABEL].is_null(), "{theirs}");
    let (code, fresh) = target_cluster.get(&format!("{cms}/fresh"));
    assert_eq!(code, 200);
    assert_eq!(fresh["metadata"]["labels"][LABEL], "falls-back");
    // Another item takes `fresh` over; this item stops listing it: it stays.
    let mut relabelled = fresh.clone();
    relabelled["metadata"]["labels"][LABEL] = json!("another-item");
    let (code, answer) = target_cluster.put(&format!("{cms}/fresh"), &relabelled);
    assert_eq!(code, 200, "{answer}");
    edit_item(&sb, "falls-back", |o| {
        o["spec"]["config"] = manifests(false);
    });
    op.wait("the update applied", WAIT, || {
        item(&sb, "falls-back").is_some_and(|i| {
            i["status"]["phase"] == "Succeeded"
                && i["status"]["observedGeneration"] == i["metadata"]["generation"]
        })
    });
    assert_eq!(
        target_cluster.get(&format!("{cms}/fresh")).0,
        200,
        "relabelled to another item: not this item's orphan"
    );
}

/// `--deployer-progressing-timeout` (landscaper's `deployItemTimeouts.progressingDefault`)
/// is the timeout of an item without `spec.timeout`.
#[test]
fn the_progressing_default_times_out_items_without_their_own_timeout() {
    let sb = Sandbox::start();
    let work = workdir();
    let op = bosun(
        &sb,
        work.path(),
        &[("BOSUN_DEPLOYER_PROGRESSING_TIMEOUT", "1s")],
    );
    create_item(
        &sb,
        "slow",
        json!({"type": MOCK, "config": mock_config(json!({"phase": "Progressing"}))}),
    );
    let failed = wait_phase(&op, &sb, "slow", "Failed");
    let e = &failed["status"]["lastError"];
    assert_eq!(e["codes"], json!(["ERR_TIMEOUT"]), "{e}");
    assert_eq!(e["reason"], "ProgressingTimeout", "{e}");
}

/// Starts bosun as landscaper's deployer charts start their image: no command,
/// `--config=<file>` holding `config` (the chart's Configuration), the items' cluster by
/// `--landscaper-kubeconfig`, and `-v`.
fn as_landscaper_deployer(
    sb: &Sandbox,
    work: &std::path::Path,
    name: &str,
    config: &str,
) -> common::Killed {
    let dir = work.join(name);
    std::fs::create_dir_all(&dir).expect("folder");
    let file = dir.join("config.yaml");
    std::fs::write(&file, config).expect("config.yaml");
    let log = std::fs::File::create(dir.join("bosun.log")).expect("log");
    let mut cmd = std::process::Command::new(common::bosun_bin());
    cmd.arg(format!("--config={}", file.display()))
        .arg(format!(
            "--landscaper-kubeconfig={}",
            sb.kubeconfig.display()
        ))
        .arg("-v=debug")
        .env_remove("KUBE_CONFIG")
        .env("BOSUN_JOURNAL_DIR", dir.join("journal"))
        .env("ADDON_OPERATOR_TMP_DIR", dir.join("tmp"))
        .env("DEBUG_UNIX_SOCKET", dir.join("debug.socket"))
        .env("ADDON_OPERATOR_LISTEN_ADDRESS", "127.0.0.1")
        .env("ADDON_OPERATOR_LISTEN_PORT", "0");
    for (k, v) in common::HelmEngine::Library.env() {
        cmd.env(k, v);
    }
    common::Killed(
        cmd.stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start bosun as a landscaper deployer"),
    )
}

/// Sets a new jobID on the item, as landscaper does to have its deployer run it.
fn start_job(sb: &Sandbox, name: &str, job: &str) {
    wait_for(&format!("jobID {job} on {name}"), WAIT, || {
        let Some(mut o) = item(sb, name) else {
            return false;
        };
        o["status"]["jobID"] = json!(job);
        let (code, answer) = sb.put(&format!("{ITEMS}/{name}/status"), &o);
        assert!(code == 200 || code == 409, "{code} {answer}");
        code == 200
    });
}

/// landscaper's CRDs (deploy/crds/landscaper.yaml), created as landscaper installs them:
/// its deployers install none (their ClusterRole cannot).
fn landscaper_crds(sb: &Sandbox) {
    let crds: Vec<Value> = serde_saphyr::from_multiple(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds/landscaper.yaml"),
        )
        .expect("CRDs"),
    )
    .expect("CRD YAML");
    for crd in crds.iter().filter(|c| c.is_object()) {
        sb.create_crd(crd);
    }
}

/// landscaper's helm-deployer and manifest-deployer charts run bosun unchanged: each
/// process reads its chart's Configuration (identity, namespace, oci, hpa, controller as
/// the charts write them), serves its one type only, in the cluster that
/// `--landscaper-kubeconfig` names, under the jobID contract.
#[test]
fn landscaper_s_deployer_charts_arguments_and_configuration_run_each_type() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    landscaper_crds(&sb);
    target_for(&sb, &target_cluster, "cluster-2");
    // charts/helm-deployer's config-secret with its default values (release namespace
    // ls-system) and an identity; charts/manifest-deployer's likewise.
    let _helm = as_landscaper_deployer(
        &sb,
        work.path(),
        "helm-deployer",
        "apiVersion: helm.deployer.landscaper.gardener.cloud/v1alpha1\nkind: Configuration\n\
         identity: helm-deployer-1\nnamespace: ls-system\noci:\n  allowPlainHttp: false\n  \
         insecureSkipVerify: false\nhpa:\n  maxReplicas: 1\n  averageCpuUtilization: 80\n  \
         averageMemoryUtilization: 80\ncontroller:\n  workers: 30\n",
    );
    let _manifest = as_landscaper_deployer(
        &sb,
        work.path(),
        "manifest-deployer",
        "apiVersion: manifest.deployer.landscaper.gardener.cloud/v1alpha2\nkind: Configuration\n\
         identity: manifest-deployer-1\nnamespace: ls-system\nhpa:\n  maxReplicas: 1\n  \
         averageCpuUtilization: 80\n  averageMemoryUtilization: 80\ncontroller:\n  workers: 30\n",
    );
    // A mock item, neither's type, first: by the time the others are done, both have seen
    // it and left it alone.
    create_item(
        &sb,
        "mocked",
        json!({"type": MOCK, "config": mock_config(json!({}))}),
    );
    start_job(&sb, "mocked", "job-1");
    let raw = base64::engine::general_purpose::STANDARD.encode(web_chart("1.0.0"));
    create_item(
        &sb,
        "web",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "config": helm_config(
            json!({"archive": {"raw": raw}}), json!({"createNamespace": true}))}),
    );
    create_item(
        &sb,
        "manifests",
        json!({"type": MANIFEST, "target": {"name": "cluster-2"}, "config": manifest_config(json!([
            {"policy": "manage", "manifest": cm("default", "from-manifest-deployer", json!({"v": "1"}))},
        ]))}),
    );
    start_job(&sb, "web", "job-1");
    start_job(&sb, "manifests", "job-1");
    for (name, identity) in [
        ("web", "helm-deployer-1"),
        ("manifests", "manifest-deployer-1"),
    ] {
        wait_for(&format!("{name} finished job-1"), WAIT, || {
            item(&sb, name).is_some_and(|i| i["status"]["jobIDFinished"] == "job-1")
        });
        let done = item(&sb, name).expect("item");
        assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
        assert_eq!(
            done["status"]["deployer"]["identity"], identity,
            "each type by its own deployer: {}",
            done["status"]
        );
    }
    assert_eq!(
        target_cluster
            .get("/api/v1/namespaces/apps/configmaps/web-cm")
            .0,
        200
    );
    assert_eq!(
        target_cluster
            .get("/api/v1/namespaces/default/configmaps/from-manifest-deployer")
            .0,
        200
    );
    let mocked = item(&sb, "mocked").expect("item");
    assert!(
        mocked["status"]["jobIDFinished"].is_null() && mocked["status"]["phase"].is_null(),
        "{}",
        mocked["status"]
    );
    // A setting bosun cannot honour stops the start, naming the file and the field.
    let bad = work.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: helm.deployer.landscaper.gardener.cloud/v1alpha1\nkind: Configuration\n\
         oci:\n  allowPlainHttp: true\n",
    )
    .expect("bad.yaml");
    let out = std::process::Command::new(common::bosun_bin())
        .arg(format!("--config={}", bad.display()))
        .arg(format!(
            "--landscaper-kubeconfig={}",
            sb.kubeconfig.display()
        ))
        .env("BOSUN_JOURNAL_DIR", work.path().join("bad-journal"))
        .env("ADDON_OPERATOR_TMP_DIR", work.path().join("bad-tmp"))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("{}: oci.allowPlainHttp: true", bad.display())),
        "{err}"
    );
}

/// landscaper's helm deployer with `oci.configFiles` (docker configs the helm-deployer
/// chart mounts from its registry Secret): an item whose chart is in a registry that wants
/// a login, with no Context at all, is pulled with the login from those files.
#[test]
fn a_landscaper_helm_deployer_pulls_with_the_logins_of_its_oci_config_files() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let work = workdir();
    landscaper_crds(&sb);
    target_for(&sb, &target_cluster, "cluster-2");
    // user "u", password "p"
    let registry = serve_registry(web_chart("1.0.0"), "Basic dTpw");
    let secrets = work.path().join("registry-secrets");
    std::fs::create_dir_all(&secrets).expect("folder");
    let login = secrets.join("config.json");
    std::fs::write(
        &login,
        json!({"auths": {registry.clone(): {"auth": "dTpw"}}}).to_string(),
    )
    .expect("docker config");
    let _helm = as_landscaper_deployer(
        &sb,
        work.path(),
        "helm-deployer",
        &format!(
            "apiVersion: helm.deployer.landscaper.gardener.cloud/v1alpha1\nkind: Configuration\n\
             identity: helm-deployer-1\noci:\n  allowPlainHttp: false\n  configFiles:\n  - {}\n",
            login.display()
        ),
    );
    create_item(
        &sb,
        "from-oci",
        json!({"type": HELM, "target": {"name": "cluster-2"}, "config": helm_config(
            json!({"ref": format!("{registry}/charts/web:1.0.0")}),
            json!({"name": "oci", "namespace": "default", "values": {"color": "teal"}}),
        )}),
    );
    start_job(&sb, "from-oci", "job-1");
    wait_for("from-oci finished job-1", WAIT, || {
        item(&sb, "from-oci").is_some_and(|i| i["status"]["jobIDFinished"] == "job-1")
    });
    let done = item(&sb, "from-oci").expect("item");
    assert_eq!(done["status"]["phase"], "Succeeded", "{}", done["status"]);
    let (code, cm) = target_cluster.get("/api/v1/namespaces/default/configmaps/oci-cm");
    assert_eq!(code, 200, "the chart from the registry, released: {cm}");
    assert_eq!(cm["data"]["color"], "teal");
}

/// landscaper looks an item's Target up in the item's own namespace whatever
/// `spec.target.namespace` says (`CheckResponsibility` reads `spec.target.name` only), and
/// so does bosun: the Target of that name in another namespace is never used.
#[test]
fn spec_target_namespace_is_ignored_as_landscaper_ignores_it() {
    let sb = Sandbox::start();
    let target_cluster = Sandbox::start();
    let elsewhere_cluster = Sandbox::start();
    let work = workdir();
    let op = bosun(&sb, work.path(), &[]);
    target_for(&sb, &target_cluster, "cluster-2");
    create_namespace(&sb, "elsewhere");
    let kubeconfig = std::fs::read_to_string(&elsewhere_cluster.kubeconfig).expect("kubeconfig");
    post_ok(
        &sb,
        "/apis/landscaper.gardener.cloud/v1alpha1/namespaces/elsewhere/targets",
        &json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
            "metadata": {"name": "cluster-2", "namespace": "elsewhere"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": kubeconfig}},
        }),
    );
    create_item(
        &sb,
        "namespaced-target",
        json!({"type": MANIFEST, "target": {"name": "cluster-2", "namespace": "elsewhere"},
        "config": manifest_config(json!([
            {"policy": "manage", "manifest": cm("default", "where-did-it-go", json!({"v": "1"}))},
        ]))}),
    );
    wait_phase(&op, &sb, "namespaced-target", "Succeeded");
    assert_eq!(
        target_cluster
            .get("/api/v1/namespaces/default/configmaps/where-did-it-go")
            .0,
        200,
        "the item's namespace's Target"
    );
    assert_eq!(
        elsewhere_cluster
            .get("/api/v1/namespaces/default/configmaps/where-did-it-go")
            .0,
        404,
        "not the Target spec.target.namespace names"
    );
}

fn create_namespace(sb: &Sandbox, name: &str) {
    let (code, answer) = sb.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    );
    assert!(code == 201 || code == 409, "{code} {answer}");
}
