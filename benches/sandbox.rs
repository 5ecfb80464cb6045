//! Sandbox API server benchmark. Prints, measured in one run on this machine:
//! - durable create throughput over HTTP (kube-rs client, 8 concurrent writers) and the
//!   same number of raw sled inserts + flushes (8 concurrent, one flush each), and their ratio;
//! - watch fan-out latency (write acknowledged → event received) with 10 watchers, p50/p99;
//! - list latency for 10,000 objects, p50/p99;
//! - the write rate of rounds of owner-cascade work (parents, children, deletes the
//!   garbage collector finishes) in a store of 1,000 objects and in one of 50,000, taking
//!   turns: the median ratio of the pairs shows whether writes slow down as the store grows
//!   (goal ≥ 0.8).
//!
//! Run: `cargo bench --bench sandbox` (BOSUN_BENCH_OBJECTS overrides the 10,000,
//! BOSUN_BENCH_STORE the 50,000).

/// bosun's allocator, as in the binary.
#[global_allocator]
static ALLOCATOR: bosun::memory::Allocator = bosun::memory::Allocator;

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

#[path = "support/stats.rs"]
mod stats;
use stats::{joined, median};

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn now_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn payload() -> String {
    "x".repeat(1024)
}

/// Raw sled with the sandbox's flush policy: writers insert, one flusher flushes whatever
/// is pending, and each writer waits until a flush covers its insert (group commit).
async fn raw_sled_rate(n: usize, writers: usize) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(sled::Config::new().path(dir.path()).open().expect("sled"));
    let tree = Arc::new(db.open_tree("bench").expect("tree"));
    let body = Arc::new(json!({"metadata": {"name": "x"}, "data": {"p": payload()}}).to_string());
    let committed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let wanted = Arc::new(tokio::sync::Notify::new());
    let (flushed_tx, flushed_rx) = tokio::sync::watch::channel(0u64);
    let flusher = {
        let (db, committed, wanted) = (db.clone(), committed.clone(), wanted.clone());
        tokio::spawn(async move {
            loop {
                wanted.notified().await;
                let target = committed.load(std::sync::atomic::Ordering::SeqCst);
                let db = db.clone();
                if tokio::task::spawn_blocking(move || db.flush())
                    .await
                    .is_err()
                {
                    return;
                }
                flushed_tx.send_replace(target);
            }
        })
    };
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (tree, body, committed, wanted, mut flushed) = (
            tree.clone(),
            body.clone(),
            committed.clone(),
            wanted.clone(),
            flushed_rx.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(writers) {
                tree.insert(format!("k{i}"), body.as_bytes())
                    .expect("insert");
                let mine = committed.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                wanted.notify_one();
                let _ = flushed.wait_for(|f| *f >= mine).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    flusher.abort();
    rate
}

/// A sandbox on a fresh data folder (kept while the folder lives), and a ConfigMap client
/// of its `default` namespace.
async fn fresh_sandbox() -> anyhow::Result<(
    tempfile::TempDir,
    bosun_sandbox::RunningSandbox,
    Api<ConfigMap>,
)> {
    let dir = tempfile::tempdir()?;
    let sandbox = bosun_sandbox::start(bosun_sandbox::SandboxConfig::loopback(
        dir.path().join("data"),
    ))
    .await?;
    let client = kube::Client::try_from(kube::Config::new(sandbox.url.parse()?))?;
    Ok((dir, sandbox, Api::namespaced(client, "default")))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let objects: usize = env("BOSUN_BENCH_OBJECTS", 10_000);
    let (_dir, sandbox, api) = fresh_sandbox().await?;

    // 1. Durable creates over HTTP.
    let writers = 8;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..objects).step_by(writers) {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("bench-{i}"), "labels": {"bench": "yes"}}, "data": {"p": payload()}}))
                .expect("cm");
                api.create(&PostParams::default(), &cm).await.expect("create");
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let http_rate = objects as f64 / start.elapsed().as_secs_f64();
    let sled_rate = raw_sled_rate(objects, writers).await;
    println!(
        "writes: sandbox {http_rate:.0}/s over HTTP, raw sled insert+flush {sled_rate:.0}/s, ratio {:.2}",
        http_rate / sled_rate
    );

    // 2. List latency for all objects.
    let mut lats = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let list = api.list(&ListParams::default().labels("bench=yes")).await?;
        assert_eq!(list.items.len(), objects);
        lats.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lats.sort_by(|a, b| a.total_cmp(b));
    println!(
        "list of {objects} objects: p50 {:.1} ms, p99 {:.1} ms",
        percentile(&lats, 0.5),
        percentile(&lats, 0.99)
    );

    // 3. Watch fan-out: 10 watchers, 200 writes, latency from acknowledged write to event.
    let watchers = 10;
    let writes = 200;
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<f64>();
    let mut handles = Vec::new();
    for _ in 0..watchers {
        let api = api.clone();
        let tx = tx.clone();
        let rv = rv.clone();
        handles.push(tokio::spawn(async move {
            let mut stream = api
                .watch(&WatchParams::default().labels("fanout=yes"), &rv)
                .await
                .expect("watch")
                .boxed();
            while let Some(Ok(ev)) = stream.next().await {
                if let WatchEvent::Added(cm) = ev {
                    let sent: u128 = cm
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("t"))
                        .and_then(|t| t.parse().ok())
                        .unwrap_or(0);
                    let _ = tx.send((now_micros().saturating_sub(sent)) as f64 / 1000.0);
                }
            }
        }));
    }
    drop(tx);
    for i in 0..writes {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("fan-{i}"), "labels": {"fanout": "yes"}, "annotations": {"t": now_micros().to_string()}}}))?;
        api.create(&PostParams::default(), &cm).await?;
    }
    let mut lats = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while lats.len() < watchers * writes {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(ms)) => lats.push(ms),
            _ => break,
        }
    }
    lats.sort_by(|a, b| a.total_cmp(b));
    println!(
        "watch fan-out ({watchers} watchers, {writes} writes, {} events): p50 {:.2} ms, p99 {:.2} ms",
        lats.len(),
        percentile(&lats, 0.5),
        percentile(&lats, 0.99)
    );
    for h in handles {
        h.abort();
    }
    sandbox.shutdown().await?;

    // 4. Writes against the store's size: two stores, one of 1,000 objects and one of
    // `large`, taking turns round by round (the machine's speed drifts within minutes,
    // and a figure of the small store taken before the large one was filled would
    // compare two different machines).
    let large: usize = env("BOSUN_BENCH_STORE", 50_000);
    let (_small_dir, small_sandbox, small_api) = fresh_sandbox().await?;
    let (_large_dir, large_sandbox, large_api) = fresh_sandbox().await?;
    fill(&small_api, 0, 1_000, writers).await;
    fill(&large_api, 0, large, writers).await;
    cascade_round(&small_api, "warm-up", writers).await?;
    cascade_round(&large_api, "warm-up", writers).await?;
    const PAIRS: usize = 5;
    let (mut small_rates, mut large_rates, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..PAIRS {
        let small = cascade_round(&small_api, &format!("round{r}"), writers).await?;
        let large = cascade_round(&large_api, &format!("round{r}"), writers).await?;
        small_rates.push(small);
        large_rates.push(large);
        pairs.push(large / small);
    }
    let in_order = joined(&pairs, 2);
    let (small_rate, large_rate) = (median(&small_rates), median(&large_rates));
    println!(
        "store size: {small_rate:.0} writes/s with 1000 objects, {large_rate:.0} writes/s with {large} (medians of {PAIRS} rounds each, taking turns); ratio {:.2} (median of the pairs [{in_order}]; goal ≥ 0.8: writes do not slow down as the store grows)",
        median(&pairs)
    );
    small_sandbox.shutdown().await?;
    large_sandbox.shutdown().await?;
    Ok(())
}

/// Creates filler objects `from..to` with `writers` concurrent writers.
async fn fill(api: &Api<ConfigMap>, from: usize, to: usize, writers: usize) {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in (from + w..to).step_by(writers) {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("fill-{i}")}, "data": {"p": "x".repeat(200)}}))
                .expect("cm");
                api.create(&PostParams::default(), &cm)
                    .await
                    .expect("create");
            }
        }));
    }
    for t in tasks {
        t.await.expect("fill writer");
    }
}

/// One round of owner-cascade work: 200 parents with 3 children each, then the parents'
/// deletes, until the garbage collector has taken the children. Returns writes per second,
/// counting the collector's deletes.
async fn cascade_round(api: &Api<ConfigMap>, round: &str, writers: usize) -> anyhow::Result<f64> {
    const PARENTS: usize = 200;
    const CHILDREN: usize = 3;
    // The collector's deletes are counted on a watch: a list of the whole store to see
    // what is left would load the server with the measurement.
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut deletes = api
        .watch(
            &WatchParams::default().labels(&format!("round={round}")),
            &rv,
        )
        .await?
        .boxed();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let api = api.clone();
        let round = round.to_string();
        tasks.push(tokio::spawn(async move {
            for p in (w..PARENTS).step_by(writers) {
                let parent: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("{round}-parent-{p}")}}))
                .expect("parent");
                let parent = api
                    .create(&PostParams::default(), &parent)
                    .await
                    .expect("create");
                let uid = parent.metadata.uid.clone().unwrap_or_default();
                for c in 0..CHILDREN {
                    let child: ConfigMap = serde_json::from_value(json!({
                        "metadata": {"name": format!("{round}-child-{p}-{c}"),
                            "labels": {"round": round},
                            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "name": format!("{round}-parent-{p}"), "uid": uid}]}}))
                    .expect("child");
                    api.create(&PostParams::default(), &child)
                        .await
                        .expect("create");
                }
                api.delete(&format!("{round}-parent-{p}"), &Default::default())
                    .await
                    .expect("delete");
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    let mut collected = 0;
    while collected < PARENTS * CHILDREN {
        match tokio::time::timeout_at(deadline, deletes.next()).await {
            Ok(Some(Ok(WatchEvent::Deleted(_)))) => collected += 1,
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => anyhow::bail!("the watch of round {round} failed: {e}"),
            Ok(None) => anyhow::bail!("the watch of round {round} ended"),
            Err(_) => anyhow::bail!(
                "{} children of round {round} were never collected",
                PARENTS * CHILDREN - collected
            ),
        }
    }
    let writes = PARENTS * (1 + CHILDREN) * 2;
    Ok(writes as f64 / start.elapsed().as_secs_f64())
}
