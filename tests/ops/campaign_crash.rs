//! Reliability campaigns (`docs/reliability.md`): kill -9 at random points, and API
//! faults. The full campaigns run for minutes and are ignored by the test command:
//!
//! ```text
//! CAMPAIGN_POINTS=200 cargo test --test ops campaign_crash -- --ignored --nocapture
//! ```
//!
//! `CAMPAIGN_SEED` replays a run (the seed is printed first). The small variants that are
//! not ignored keep the harness itself working.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Operator, Sandbox, workdir};
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";

/// A seeded xorshift generator: the campaign's every random choice comes from it.
struct Rng(u64);

impl Rng {
    fn from_env() -> (Rng, u64) {
        let seed = std::env::var("CAMPAIGN_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(7, |d| d.as_nanos() as u64)
            });
        (Rng(seed | 1), seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn sized(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The modules, the global hook and `values.yaml` of both campaigns, in `work`.
///
/// - `alpha` and `beta`: a chart each (one ConfigMap, static, so that a new Helm revision
///   means a release applied twice), `beta` toggled through `betaEnabled`;
/// - the global hook `follow.sh`: bound to ConfigMaps labelled `campaign=mark`, it sets
///   `global.seen` to its snapshot (name → `data.v`) and counts its runs in
///   `global.runs`, one memory values patch per run; it logs every Event it is given
///   (name, type, resourceVersion) to `out/events.log`.
fn layout(work: &Path) -> PathBuf {
    let modules = work.join("modules");
    for (dir, name) in [("010-alpha", "alpha-out"), ("020-beta", "beta-out")] {
        std::fs::create_dir_all(modules.join(dir).join("templates")).expect("module");
        std::fs::write(
            modules.join(dir).join("templates/cm.yaml"),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  from: {dir}\n"
            ),
        )
        .expect("template");
    }
    std::fs::write(
        modules.join("values.yaml"),
        "global:\n  seen: {}\n  runs: 0\nalphaEnabled: true\nbetaEnabled: true\n",
    )
    .expect("values.yaml");
    let hooks = common::global_hooks_dir(work);
    common::config_hook(
        &hooks.join("follow.sh"),
        "configVersion: v1\nkubernetes:\n- name: marks\n  kind: ConfigMap\n  labelSelector: {matchLabels: {campaign: mark}}\n  includeSnapshotsFrom: [marks]",
        r#"set -euo pipefail
runs=$(jq '.global.runs // 0' "$VALUES_PATH")
jq -c '.[] | select(.type == "Event") | [.object.metadata.name, .watchEvent, .object.metadata.resourceVersion] | @tsv' -r "$BINDING_CONTEXT_PATH" >> "$OUT_DIR/events.log" || true
jq -c --argjson runs "$runs" '[
  {op: "add", path: "/global/seen", value: ([(.[-1].snapshots.marks // .[-1].objects // [])[] | {key: .object.metadata.name, value: (.object.data.v // "")}] | from_entries)},
  {op: "add", path: "/global/runs", value: ($runs + 1)}
]' "$BINDING_CONTEXT_PATH" > "$VALUES_JSON_PATCH_PATH""#,
    );
    hooks
}

/// Kills bosun as a node failure kills a pod: bosun and its hook processes, at once.
fn kill_pod(op: &mut Operator) {
    let Some(pid) = op.pid() else { return };
    let signal = |sig: &str, target: &str| {
        let _ = std::process::Command::new("kill")
            .args([sig, "--", target])
            .status();
    };
    signal("-STOP", &pid.to_string());
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
        if fields.get(1) == Some(&pid.to_string().as_str())
            && let Some(pgrp) = fields.get(2)
            && *pgrp != pid.to_string().as_str()
        {
            signal("-KILL", &format!("-{pgrp}"));
        }
    }
    op.kill9();
}

/// Sends a request, again while the sandbox refuses it with an injected 429/500 (refused
/// before anything is done, so a retry is safe) or cannot be reached (restarting).
fn send(sb: &Sandbox, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            sb.request(method, path, "application/json", &body)
        }));
        match attempt {
            Ok((code, answer)) if code != 429 && code != 500 => return (code, answer),
            _ if Instant::now() > deadline => panic!("{method} {path}: no answer for 60s"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn mark(name: &str, v: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": {"campaign": "mark"}},
           "data": {"v": v.to_string()}})
}

/// Creates or replaces a mark (again on a conflict: a retried create that had been done).
fn put_mark(sb: &Sandbox, name: &str, v: u64) {
    for _ in 0..10 {
        let (code, old) = send(sb, "GET", &format!("{CM}/{name}"), &Value::Null);
        let (code, body) = if code == 404 {
            send(sb, "POST", CM, &mark(name, v))
        } else {
            let mut m = mark(name, v);
            m["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            send(sb, "PUT", &format!("{CM}/{name}"), &m)
        };
        if code == 200 || code == 201 {
            return;
        }
        assert_eq!(code, 409, "{body}");
    }
    panic!("cannot write {name}");
}

fn delete_mark(sb: &Sandbox, name: &str) {
    let (code, body) = send(sb, "DELETE", &format!("{CM}/{name}"), &Value::Null);
    assert!(code == 200 || code == 404, "{code} {body}");
}

/// Sets `betaEnabled` in the operator's ConfigMap.
fn set_beta(sb: &Sandbox, enabled: bool) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "addon-operator"},
                    "data": {"betaEnabled": enabled.to_string()}});
    for _ in 0..10 {
        let (code, old) = send(sb, "GET", &format!("{CM}/addon-operator"), &Value::Null);
        let (code, body) = if code == 404 {
            send(sb, "POST", CM, &cm)
        } else {
            let mut cm = cm.clone();
            cm["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            send(sb, "PUT", &format!("{CM}/addon-operator"), &cm)
        };
        if code == 200 || code == 201 {
            return;
        }
        assert_eq!(code, 409, "{body}");
    }
    panic!("cannot write the addon-operator ConfigMap");
}

/// The marks in the API server: name → `data.v`.
fn marks(sb: &Sandbox) -> BTreeMap<String, String> {
    let (code, list) = send(
        sb,
        "GET",
        &format!("{CM}?labelSelector=campaign%3Dmark"),
        &Value::Null,
    );
    assert_eq!(code, 200, "{list}");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|cm| {
            (
                cm["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                cm["data"]["v"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Helm revisions per release (`sh.helm.release.v1.<release>.v<n>` Secrets).
fn revisions(sb: &Sandbox) -> BTreeMap<String, usize> {
    let (code, list) = send(
        sb,
        "GET",
        "/api/v1/namespaces/default/secrets",
        &Value::Null,
    );
    assert_eq!(code, 200, "{list}");
    let mut out = BTreeMap::new();
    for s in list["items"].as_array().into_iter().flatten() {
        let name = s["metadata"]["name"].as_str().unwrap_or_default();
        if let Some(rest) = name.strip_prefix("sh.helm.release.v1.")
            && let Some((release, _)) = rest.rsplit_once(".v")
        {
            *out.entry(release.to_string()).or_default() += 1;
        }
    }
    out
}

/// How many times bosun's log says `release` was installed or upgraded.
fn applied(logs: &str, release: &str) -> usize {
    let installed = format!("release installed release={release} ");
    let upgraded = format!("release upgraded release={release} ");
    logs.lines()
        .filter(|l| l.contains(&installed) || l.contains(&upgraded))
        .count()
}

/// The objects the charts made: name → data.
fn chart_objects(sb: &Sandbox) -> BTreeMap<String, Value> {
    ["alpha-out", "beta-out"]
        .into_iter()
        .filter_map(|name| {
            let (code, cm) = send(sb, "GET", &format!("{CM}/{name}"), &Value::Null);
            (code == 200).then(|| (name.to_string(), cm["data"].clone()))
        })
        .collect()
}

/// The global values through the debug socket, or `None` while bosun does not answer.
fn global_values(socket: &Path) -> Option<Value> {
    let out = common::debug_cli(socket, &["global", "values", "-o", "json"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(if v["global"].is_object() {
        v["global"].clone()
    } else {
        v
    })
}

/// `bosun journal verify`: panics with its output unless the journal is sound.
fn verify(journal: &Path, context: &str) {
    let out = std::process::Command::new(common::bosun_bin())
        .args(["journal", "verify", "--journal-dir"])
        .arg(journal)
        .env("LOG_LEVEL", "error")
        .output()
        .expect("bosun journal verify");
    assert!(
        out.status.success(),
        "{context}: journal verify failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The highest `global.runs` a journaled memory patch set: in the events the journal
/// still holds, or in the memory patches of the state it replays (a snapshot keeps them
/// after compaction dropped the events).
fn journaled_runs(journal: &Path) -> u64 {
    fn walk(v: &Value, max: &mut u64) {
        match v {
            Value::Object(o) => {
                if o.get("path")
                    .and_then(Value::as_str)
                    .is_some_and(|p| p.ends_with("/runs"))
                {
                    *max = (*max).max(o.get("value").and_then(Value::as_u64).unwrap_or(0));
                }
                o.values().for_each(|v| walk(v, max));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, max)),
            _ => {}
        }
    }
    let (state, events) = common::journal_state(journal);
    let mut max = 0;
    walk(
        &serde_json::to_value(&state.values).unwrap_or_default(),
        &mut max,
    );
    for e in &events {
        if let bosun_addon::Event::ValuesPatched { patch, .. } = e {
            walk(&serde_json::to_value(patch).unwrap_or_default(), &mut max);
        }
    }
    max
}

/// What a settled bosun ended with: seen values, enabled modules, chart objects, Helm
/// revisions.
#[derive(Debug, PartialEq)]
struct Outcome {
    seen: Value,
    enabled: Vec<String>,
    objects: BTreeMap<String, Value>,
    revisions: BTreeMap<String, usize>,
}

/// Waits until bosun settled on the API server's marks and modules, and returns what it
/// ended with.
fn settle(sb: &Sandbox, op: &Operator, work: &Path, beta: bool, what: &str) -> Outcome {
    let journal = work.join("journal");
    let socket = work.join("debug.socket");
    let want: Value = marks(sb)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let state = common::try_journal_state(&journal).map(|(s, _)| s);
        let idle = state.as_ref().is_some_and(|state| {
            !state.converge.in_progress
                && state.converge.completed >= 1
                && state
                    .tasks
                    .queues
                    .values()
                    .all(std::collections::VecDeque::is_empty)
        });
        let values = global_values(&socket).unwrap_or_default();
        let objects = chart_objects(sb);
        if idle
            && values["seen"] == want
            && objects.contains_key("alpha-out")
            && objects.contains_key("beta-out") == beta
        {
            break;
        }
        if Instant::now() > deadline {
            let logs = op.logs();
            let tail: Vec<&str> = logs.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "timed out waiting for {what}: idle {idle}, seen {} (want {want}), objects {:?} (beta {beta}); operator log ends with:\n{}",
                values["seen"],
                objects.keys().collect::<Vec<_>>(),
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (state, _) = common::journal_state(&journal);
    assert!(state.anomalies.is_empty(), "{:?}", state.anomalies);
    Outcome {
        seen: global_values(&socket).unwrap_or_default()["seen"].clone(),
        enabled: state
            .modules
            .iter()
            .filter(|(_, m)| m.enabled)
            .map(|(n, _)| n.clone())
            .collect(),
        objects: chart_objects(sb),
        revisions: revisions(sb),
    }
}

/// The same final ConfigMaps on a fresh sandbox and a bosun never disturbed.
fn reference(final_marks: &BTreeMap<String, String>, beta: bool) -> Outcome {
    let sb = Sandbox::start();
    let work = workdir();
    let hooks = layout(work.path());
    for (name, v) in final_marks {
        put_mark(&sb, name, v.parse().unwrap_or(0));
    }
    set_beta(&sb, beta);
    let op = Operator::start_with(&sb, &hooks, work.path(), &[("LOG_LEVEL", "info")]);
    settle(&sb, &op, work.path(), beta, "the reference run settled")
}

/// One crash campaign of `n` points, bosun saving a journal snapshot (and compacting)
/// every `snapshot_every` events.
fn crash_campaign(n: usize, snapshot_every: &str) {
    let (mut rng, seed) = Rng::from_env();
    println!("crash campaign: {n} points, seed {seed} (CAMPAIGN_SEED={seed} replays it)");
    let started = Instant::now();
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let hooks = layout(w);
    let journal = w.join("journal");
    let socket = w.join("debug.socket");
    let mut beta = true;
    let mut next_mark = 0u64;
    let mut live: Vec<String> = Vec::new();
    let mut act =
        |rng: &mut Rng, sb: &Sandbox, beta: &mut bool, live: &mut Vec<String>| match rng.below(6) {
            0 => {
                *beta = !*beta;
                set_beta(sb, *beta);
            }
            1 | 2 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                delete_mark(sb, &live.swap_remove(i));
            }
            3 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                put_mark(sb, &live[i], rng.below(1000));
            }
            _ => {
                next_mark += 1;
                let name = format!("mark-{next_mark}");
                put_mark(sb, &name, rng.below(1000));
                live.push(name);
            }
        };
    let mut op = Operator::start_with(
        &sb,
        &hooks,
        w,
        &[
            ("LOG_LEVEL", "info"),
            ("BOSUN_JOURNAL_SNAPSHOT_EVERY", snapshot_every),
        ],
    );
    let mut acknowledged_checks = 0;
    for point in 0..n {
        // The first converge, then everything later: delays from 50 ms to 3 s after start.
        let delay = Duration::from_millis(50 + rng.below(3000));
        let split = Duration::from_millis(rng.below(delay.as_millis() as u64 + 1));
        let t0 = Instant::now();
        std::thread::sleep(split);
        act(&mut rng, &sb, &mut beta, &mut live);
        std::thread::sleep(delay.saturating_sub(t0.elapsed()));
        // Acknowledged: what the debug socket shows just before the kill.
        let shown = global_values(&socket);
        kill_pod(&mut op);
        let context = format!("point {point} (seed {seed}, delay {delay:?})");
        verify(&journal, &context);
        if let Some(shown) = shown
            && let Some(runs) = shown["runs"].as_u64()
        {
            let journaled = journaled_runs(&journal);
            assert!(
                journaled >= runs,
                "{context}: the debug socket showed runs = {runs}, the journal has only {journaled}"
            );
            acknowledged_checks += 1;
        }
        // Bindings events while bosun is down.
        if rng.below(2) == 0 {
            act(&mut rng, &sb, &mut beta, &mut live);
        }
        op.spawn();
    }
    let final_marks = marks(&sb);
    let outcome = settle(&sb, &op, w, beta, "the final converge after the campaign");
    kill_pod(&mut op);
    verify(&journal, "after the campaign");
    let crashed_for = started.elapsed();
    let expected = reference(&final_marks, beta);
    println!(
        "crash campaign: {n} points, {n} restarts, {acknowledged_checks} acknowledged-values checks, {} journal snapshots saved, {} marks left, beta {beta}, {:.0?} (seed {seed})",
        op.logs().matches("journal snapshot saved").count(),
        final_marks.len(),
        crashed_for
    );
    assert_eq!(
        outcome.revisions.get("alpha"),
        Some(&1),
        "no extra Helm revision for the unchanged module (seed {seed}): {:?}",
        outcome.revisions
    );
    assert!(
        applied(&op.logs(), "alpha") <= 1,
        "the unchanged module was applied again after a restart (seed {seed})"
    );
    if outcome != expected {
        let log = std::process::Command::new(common::bosun_bin())
            .args(["journal", "log", "--journal-dir"])
            .arg(&journal)
            .env("LOG_LEVEL", "error")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let modules: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("moduleEnabled") || l.contains("moduleDisabled"))
            .collect();
        let logs = op.logs();
        let decisions: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("module enabled") || l.contains("module disabled"))
            .collect();
        panic!(
            "the campaign's end differs from a run without crashes (seed {seed}):\n  got {outcome:?}\n want {expected:?}\njournal:\n{}\nbosun:\n{}",
            modules.join("\n"),
            decisions.join("\n")
        );
    }
}

#[test]
#[ignore = "a campaign of minutes: cargo test --test ops campaign_crash -- --ignored --nocapture"]
fn crash_campaign_kill_9_at_random_points() {
    crash_campaign(sized("CAMPAIGN_POINTS", 200), "500");
}

#[test]
fn crash_campaign_smoke() {
    crash_campaign(3, "40");
}

/// The API-faults campaign: a sandbox that delays every request and refuses a share of
/// them, restarted twice, while bosun converges and its hook follows `changes` ConfigMap
/// changes.
fn fault_campaign(changes: usize, delay: &str, rate: &str) {
    let (mut rng, seed) = Rng::from_env();
    println!(
        "fault campaign: {changes} changes, delay {delay}, rate {rate}, seed {seed} (CAMPAIGN_SEED={seed} replays it)"
    );
    let started = Instant::now();
    let fault_seed = seed.to_string();
    let mut sb = Sandbox::start_with(&[
        "--fault-delay",
        delay,
        "--fault-rate",
        rate,
        "--fault-seed",
        &fault_seed,
    ]);
    let work = workdir();
    let w = work.path();
    let hooks = layout(w);
    let op = Operator::start_with(&sb, &hooks, w, &[("LOG_LEVEL", "info")]);
    let mut live: Vec<String> = Vec::new();
    let restarts = [changes / 3, 2 * changes / 3];
    for i in 0..changes {
        if restarts.contains(&i) {
            sb.restart();
        }
        match rng.below(4) {
            0 if !live.is_empty() => {
                let k = rng.below(live.len() as u64) as usize;
                delete_mark(&sb, &live.swap_remove(k));
            }
            1 if !live.is_empty() => {
                let k = rng.below(live.len() as u64) as usize;
                put_mark(&sb, &live[k], rng.below(1_000_000));
            }
            _ => {
                let name = format!("mark-{i}");
                put_mark(&sb, &name, rng.below(1_000_000));
                live.push(name);
            }
        }
    }
    let outcome = settle(&sb, &op, w, true, "bosun caught up with every change");
    // Nothing applied twice: every Event the hook was given is newer than the last one
    // it was given for the same object.
    let log = std::fs::read_to_string(w.join("out/events.log")).unwrap_or_default();
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    let mut events = 0;
    for line in log.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let [name, kind, rv] = fields[..] else {
            panic!("bad events.log line {line:?}")
        };
        let rv: u64 = rv.parse().unwrap_or(0);
        if let Some(prev) = last.get(name) {
            assert!(
                rv > *prev,
                "{name}: {kind} at resourceVersion {rv} after {prev} (seed {seed})"
            );
        }
        last.insert(name.to_string(), rv);
        events += 1;
    }
    // Nothing applied twice: each release was installed or upgraded successfully once
    // (an install the faults broke half-way leaves a failed revision, and Helm's next
    // upgrade makes revision 2 of it, as `helm upgrade --install` does: that is one apply).
    let logs = op.logs();
    for release in ["alpha", "beta"] {
        let releases: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains(&format!("release={release}")))
            .collect();
        assert_eq!(
            applied(&logs, release),
            1,
            "{release} applied more than once (seed {seed}), revisions {:?}; its log lines:\n{}",
            outcome.revisions,
            releases.join("\n")
        );
    }
    verify(&w.join("journal"), "after the fault campaign");
    let faults = logs.matches("injected fault").count()
        + logs.matches("too many requests").count()
        + logs.matches("an error on the server").count();
    println!(
        "fault campaign: {changes} changes, 2 sandbox restarts, {events} events seen by the hook, {} marks at the end, {faults} refusals named in bosun's log, {:.0?} (seed {seed})",
        outcome.seen.as_object().map_or(0, |o| o.len()),
        started.elapsed()
    );
}

#[test]
#[ignore = "a campaign of minutes: cargo test --test ops campaign_crash -- --ignored --nocapture"]
fn fault_campaign_1000_changes() {
    let delay = std::env::var("CAMPAIGN_FAULT_DELAY").unwrap_or_else(|_| "50ms".into());
    let rate = std::env::var("CAMPAIGN_FAULT_RATE").unwrap_or_else(|_| "0.1".into());
    fault_campaign(sized("CAMPAIGN_CHANGES", 1000), &delay, &rate);
}

#[test]
fn fault_campaign_smoke() {
    fault_campaign(30, "5ms", "0.02");
}
