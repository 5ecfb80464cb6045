//! Kubernetes bindings benchmark. Prints, measured in one run on this machine:
//! - the event path with 100 bindings on one shared watch: write sent to the API server → the
//!   100th binding event handed to the engine, p50/p99, against the limit: the same write →
//!   event received by one raw kube-rs watcher on the same resource;
//! - memory per cached object with and without `keepFullObjectsInMemory`, against the
//!   object's JSON size (a counting allocator measures the heap), and the time the first
//!   binding takes to start (list, filter, snapshot) against one list of the same objects
//!   by a plain client.
//!
//! Run: `cargo bench --bench bindings` (`BENCH_OBJECTS=50000` for the memory figure at
//! scale; 2,000 unless set); `BENCH_SERVER=real` runs it against kube-apiserver (the real
//! control plane of `tests/controlplane`) instead of the sandbox, which runs in its own
//! process either way. `BENCH_PERF_FIRST=FILE` records a `perf` profile of this process
//! during the plain lists and the first bindings' starts into FILE.

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

#[path = "support/stats.rs"]
mod stats;
use stats::{joined, median};

#[path = "support/perf.rs"]
mod perf;

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun::addon::bindings::BindingWatches;
use bosun_addon::bindings::{BindingEvent, HookRef};
use bosun_addon::hook_config::{HookKind, parse};
use bosun_addon::ports::KubeBindings;
use bosun_kube::WatchManager;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[global_allocator]
static GLOBAL: cluster::Counting = cluster::Counting;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn config_map(name: &str, n: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"bench": "yes", "n": n.to_string()}},
        "data": {"payload": "x".repeat(512)},
    }))
    .expect("config map")
}

fn binding(jq: &str, keep: bool) -> bosun_addon::hook_config::KubernetesBinding {
    let text = format!(
        "configVersion: v1\nkubernetes:\n- name: cms\n  kind: ConfigMap\n  namespace: {{nameSelector: {{matchNames: [default]}}}}\n  labelSelector: {{matchLabels: {{bench: \"yes\"}}}}\n  jqFilter: '{jq}'\n  keepFullObjectsInMemory: {keep}"
    );
    parse(&text, HookKind::Global, "bench.sh")
        .expect("config")
        .kubernetes
        .remove(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // The API server in its own process (the sandbox, or kube-apiserver with
    // BENCH_SERVER=real): its work is not this process's, and the heap measured is bosun's.
    let server = cluster::sandbox(dir.path()).await?;
    println!("API server: {}", cluster::server_name());
    let client = server.client.clone();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // 1. Event path: 100 bindings on one shared watch.
    let shared = WatchManager::new(client.clone());
    let manager = BindingWatches::new(shared.clone());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let events: bosun_addon::ports::BindingEvents = Arc::new(move |_ev: BindingEvent| {
        let _ = tx.send(Instant::now());
    });
    let bindings = 100;
    for i in 0..bindings {
        let hook = HookRef {
            owner: "global".into(),
            hook: format!("hook-{i}.sh").into(),
        };
        manager
            .start(
                hook.clone(),
                vec![binding(".metadata.labels", true)],
                events.clone(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        manager.release(&hook, 0);
    }
    println!(
        "shared watches for {bindings} bindings: {}",
        shared.watches().len()
    );
    let raw = {
        let api = api.clone();
        let (rtx, rrx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
        let params = WatchParams::default().labels("bench=yes");
        tokio::spawn(async move {
            let Ok(stream) = api.watch(&params, "0").await else {
                return;
            };
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                if matches!(ev, Ok(WatchEvent::Added(_))) {
                    let _ = rtx.send(Instant::now());
                }
            }
        });
        rrx
    };
    let mut raw = raw;
    let writes = 200;
    let (mut ours, mut limit) = (Vec::new(), Vec::new());
    for n in 0..writes {
        // From the write's start: the sandbox sends the watch event as it acknowledges.
        let sent = Instant::now();
        api.create(&PostParams::default(), &config_map(&format!("e-{n}"), n))
            .await?;
        let mut last = sent;
        for _ in 0..bindings {
            last = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await?
                .ok_or_else(|| anyhow::anyhow!("binding events stopped"))?;
        }
        let r = tokio::time::timeout(Duration::from_secs(30), raw.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("raw watch stopped"))?;
        ours.push(last.saturating_duration_since(sent).as_secs_f64() * 1000.0);
        limit.push(r.saturating_duration_since(sent).as_secs_f64() * 1000.0);
    }
    ours.sort_by(f64::total_cmp);
    limit.sort_by(f64::total_cmp);
    println!(
        "event path, write sent → all {bindings} binding events queued: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&ours, 0.5),
        percentile(&ours, 0.99)
    );
    println!(
        "limit, write sent → one raw kube-rs watch event: p50 {:.2} ms, p99 {:.2} ms (p50 ratio {:.2}x)",
        percentile(&limit, 0.5),
        percentile(&limit, 0.99),
        percentile(&ours, 0.5) / percentile(&limit, 0.5).max(1e-6)
    );
    manager.stop_owner("global");

    // 2. Memory per cached object.
    // `BENCH_OBJECTS` more ConfigMaps (2,000 unless set; 50,000 for the scale figure),
    // created 8 at a time.
    let objects: usize = env("BENCH_OBJECTS", 2000);
    let creates = futures::stream::iter(writes..writes + objects)
        .map(|n| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &config_map(&format!("m-{n}"), n))
                    .await
            }
        })
        .buffer_unordered(8);
    futures::pin_mut!(creates);
    while let Some(created) = creates.next().await {
        created?;
    }
    let json_size = serde_json::to_string(&api.get("m-300").await?)?.len();
    let total = writes + objects;
    // The limit of a binding's start: a list of the same objects by a plain client. Each
    // is a fraction of a second: both are taken at the median of START_ROUNDS rounds, a
    // plain list and a fresh binding's start in turn, so that the machine's drift within
    // the run moves both alike.
    const START_ROUNDS: usize = 5;
    let mut listed = 0;
    let profile = perf::perf_start("BENCH_PERF_FIRST", false);
    for keep in [true, false] {
        let (mut lists, mut starts) = (Vec::new(), Vec::new());
        for round in 0..START_ROUNDS {
            let listing = Instant::now();
            listed = api.list(&Default::default()).await?.items.len();
            lists.push(listing.elapsed().as_secs_f64());
            let fresh = BindingWatches::new(WatchManager::new(client.clone()));
            let noop: bosun_addon::ports::BindingEvents = Arc::new(|_ev: BindingEvent| {});
            let hook = |name: &str| HookRef {
                owner: "global".into(),
                hook: name.into(),
            };
            // The first binding brings the shared watch and its cache; a second identical
            // binding of another hook shares that watch and adds only its own entries.
            let before = cluster::live();
            let starting = Instant::now();
            fresh
                .start(
                    hook("a.sh"),
                    vec![binding(".metadata.name", keep)],
                    noop.clone(),
                )
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            starts.push(starting.elapsed().as_secs_f64());
            if round == 0 {
                let mid = cluster::live();
                fresh
                    .start(hook("b.sh"), vec![binding(".metadata.name", keep)], noop)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let after = cluster::live();
                let snapshot = fresh.snapshot(&hook("b.sh"), 0).len();
                let per = |bytes: isize| bytes as f64 / total as f64;
                println!(
                    "keepFullObjectsInMemory: {keep}: {snapshot} objects of {json_size} JSON bytes: watch cache + first binding {:.0} B/object ({:.2}x JSON), each further binding {:.0} B/object ({:.2}x JSON)",
                    per(mid - before),
                    per(mid - before) / json_size as f64,
                    per(after - mid),
                    per(after - mid) / json_size as f64
                );
            }
            fresh.stop_owner("global");
        }
        let (list_limit, started) = (median(&lists), median(&starts));
        println!(
            "keepFullObjectsInMemory: {keep}: the first binding started (list, filter, snapshot of {total} objects) in {started:.3} s; a plain client lists the {listed} objects in {list_limit:.3} s (medians of {START_ROUNDS} rounds, starts {}, lists {}): ratio {:.2}",
            joined(&starts, 3),
            joined(&lists, 3),
            list_limit / started.max(1e-6)
        );
    }
    perf::perf_stop(profile);
    drop(server);
    Ok(())
}
