//! Lambda controllers benchmark. Prints, measured in one run on this machine:
//! - converge: 1,000 parents (`BENCH_PARENTS`) with 3 child ConfigMaps each created at once
//!   → every child exists and every status is written; wall time and syncs per second;
//! - resync throughput: every parent synced again with nothing to change (the periodic
//!   resync of `resyncPeriodSeconds`), in syncs per second, against the limit: the same
//!   number of raw HTTP round trips with the same request bodies to the same webhook from
//!   this process, with the same concurrency (`--workers`, 5), one round half a period
//!   after each sweep began (while the controller waits for its next period: each then
//!   follows the same idle time). Both rates are taken the
//!   same way, from the times the webhook received the first and the last call of the
//!   sweep. The first sweep of the controller restarted by the spec change that sets the
//!   period (a fresh controller, which knows nothing of earlier syncs) is printed too;
//! - memory: the heap held per parent once converged (informer caches of parents and
//!   children, queue, last syncs), from a counting allocator.
//!
//! Run: `cargo bench --bench lambda`. `BENCH_PERF_RESTART=FILE` records a `perf` profile
//! (`--call-graph dwarf`) of this process during the restart's first syncs into FILE,
//! `BENCH_PERF_SWEEPS=FILE` one of the resync sweeps and their raw rounds.

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

#[path = "support/stats.rs"]
mod stats;
use stats::{joined, median};

#[path = "support/cluster.rs"]
mod cluster;

#[path = "support/idle.rs"]
mod idle;

#[path = "support/perf.rs"]
mod perf;
use perf::{perf_start, perf_stop};

#[path = "support/cpu.rs"]
mod cpu;
use cpu::process_cpu;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bosun_lambda::children::ApplyStrategy;
use cluster::{create, resource, wait};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: cluster::Counting = cluster::Counting;

const WORKERS: usize = 5;
/// Periodic resync sweeps measured, and raw rounds against them.
const SWEEPS: usize = 9;

fn sync_answer(req: &Value) -> Value {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let children: Vec<Value> = (0..3)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("{name}-{i}")},
                   "data": {"n": i.to_string()}})
        })
        .collect();
    json!({"status": {"children": 3}, "children": children})
}

/// The times the webhook received each call, in order.
type Arrivals = Arc<std::sync::Mutex<Vec<Instant>>>;

fn arrivals_of(a: &Arrivals) -> std::sync::MutexGuard<'_, Vec<Instant>> {
    a.lock().unwrap_or_else(|p| p.into_inner())
}

/// Calls per second over the calls `first..first + n` as the webhook received them: `n - 1`
/// intervals between the first arrival and the last.
fn rate(arrivals: &Arrivals, first: usize, n: usize) -> anyhow::Result<(f64, f64)> {
    let a = arrivals_of(arrivals);
    let (Some(start), Some(end)) = (a.get(first), a.get(first + n - 1)) else {
        anyhow::bail!("fewer than {} calls", first + n);
    };
    let span = end.duration_since(*start).as_secs_f64();
    Ok((span, (n - 1) as f64 / span))
}

/// The webhook: a trivial local server answering three children per parent.
async fn serve_hook(calls: Arc<AtomicUsize>, arrivals: Arrivals) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/sync", listener.local_addr()?);
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let (calls, arrivals) = (calls.clone(), arrivals.clone());
        async move {
            arrivals_of(&arrivals).push(Instant::now());
            calls.fetch_add(1, Ordering::Relaxed);
            let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            (
                [("content-type", "application/json")],
                sync_answer(&req).to_string(),
            )
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let parents: usize = env("BENCH_PARENTS", 1000);
    let dir = tempfile::tempdir()?;
    // The API server in its own process, as in a cluster: the heap measured below is the
    // lambda controllers' alone.
    let sandbox = cluster::sandbox(dir.path()).await?;
    println!(
        "API server: {} (BENCH_SERVER=real for the real control plane)",
        cluster::server_name()
    );
    let client = sandbox.client.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let arrivals: Arrivals = Arc::default();
    let url = serve_hook(calls.clone(), arrivals.clone()).await?;

    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    create(
        &crds,
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "benchparents.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"kind": "BenchParent", "plural": "benchparents", "singular": "benchparent", "listKind": "BenchParentList"},
                     "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
        }),
    )
    .await?;
    let host = bosun::host::Host::with_client(
        &bosun::host::HostConfig {
            process: bosun::host::ProcessConfig {
                namespace: "default".into(),
                ..Default::default()
            },
            ..Default::default()
        },
        client.clone(),
        bosun_kube::in_cluster::ClientSource::Inferred,
        (String::new(), None),
        bosun::prometheus::install(""),
    );
    let hooks = Arc::new(bosun::lambda::webhook::Webhooks::new(client.clone()));
    let cfg = bosun::lambda::LambdaConfig {
        workers: WORKERS,
        apply_strategy: ApplyStrategy::DynamicApply,
        field_manager: "metacontroller".into(),
        target_label_selector: String::new(),
        events: bosun_kube::EventLimits::default(),
        install_crds: true,
        journal_dir: dir.path().join("journal"),
        client_limits: bosun_kube::ClientLimits::UNLIMITED,
        discovery_interval: None,
        cache_flush_interval: None,
    };
    let lambda = bosun::lambda::start(&host, client.clone(), hooks, &cfg).await?;
    let ccs: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "metacontroller.k8s.io",
            "v1alpha1",
            "CompositeController",
            "compositecontrollers",
        ),
    );
    // The resync period of the measured sweep: longer than the restart's own sweep.
    let period = (parents / 400).max(3);
    let cc = |generation_marker: u32, resync: usize| {
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "bench"},
            "spec": {
                "generateSelector": true,
                "resyncPeriodSeconds": resync,
                "parentResource": {"apiVersion": "example.com/v1", "resource": "benchparents"},
                "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
                "hooks": {"sync": {"webhook": {"url": url, "timeout": format!("{}s", 10 + generation_marker)}}}
            }
        })
    };
    create(&ccs, cc(0, 0)).await?;
    let parents_api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("example.com", "v1", "BenchParent", "benchparents"),
    );
    let cms: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("", "v1", "ConfigMap", "configmaps"),
    );

    // 1. Converge.
    let heap_before = cluster::settled_live().await;
    let started = Instant::now();
    for n in 0..parents {
        create(
            &parents_api,
            json!({"apiVersion": "example.com/v1", "kind": "BenchParent", "metadata": {"name": format!("p{n}")}}),
        )
        .await?;
    }
    let created = started.elapsed();
    wait(
        "every child and status",
        Duration::from_secs(600),
        async || {
            let Ok(children) = cms.list(&Default::default()).await else {
                return false;
            };
            if children.items.len() < 3 * parents {
                return false;
            }
            let Ok(list) = parents_api.list(&Default::default()).await else {
                return false;
            };
            list.items.iter().all(|p| p.data["status"]["children"] == 3)
        },
    )
    .await?;
    let converged = started.elapsed();
    let converge_calls = calls.load(Ordering::SeqCst);
    println!(
        "converge: {parents} parents × 3 children: created in {:.2} s, all children and statuses after {:.2} s ({:.0} parents/s; {converge_calls} hook calls)",
        created.as_secs_f64(),
        converged.as_secs_f64(),
        parents as f64 / converged.as_secs_f64()
    );
    // Let the last status writes' own watch events settle before measuring memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let heap_after = cluster::settled_live().await;
    // The objects' own size: their compact JSON as the API server serves them.
    let json_of = |items: &[DynamicObject]| -> usize {
        items
            .iter()
            .map(|o| serde_json::to_vec(o).map_or(0, |v| v.len()))
            .sum()
    };
    let json_bytes = json_of(&parents_api.list(&Default::default()).await?.items)
        + json_of(&cms.list(&Default::default()).await?.items);
    let per_parent = (heap_after - heap_before) as f64 / parents as f64;
    let json_per_parent = json_bytes as f64 / parents as f64;
    println!(
        "memory: {per_parent:.0} B of heap per parent (parent + 3 children in the shared watch and the informer cache, queue, last sync; the API server runs in its own process); their JSON {json_per_parent:.0} B: heap ÷ JSON {:.2}× (goal ≤ 2×)",
        per_parent / json_per_parent
    );
    // For a heap profile of what is held at this point (`heaptrack`, leaks at exit).
    if std::env::var_os("BENCH_EXIT_AFTER_MEMORY").is_some() {
        // The sandbox process goes with its handle; nothing else is dropped.
        drop(sandbox);
        std::process::exit(0);
    }

    // 2. Resync throughput. A changed spec (a resync period) restarts the controller,
    //    which syncs every parent once; then the period's resync syncs every parent again.
    //    Nothing changes, so each sync is a hook call and no write.
    let before = calls.load(Ordering::SeqCst);
    let restart_cpu = process_cpu();
    let perf = perf_start("BENCH_PERF_RESTART", false);
    let mut current = ccs.get("bench").await?;
    current.data["spec"] = cc(1, period)["spec"].clone();
    let current = ccs
        .replace("bench", &PostParams::default(), &current)
        .await?;
    wait(
        "every parent synced by the restarted controller",
        Duration::from_secs(600),
        async || calls.load(Ordering::SeqCst) >= before + parents,
    )
    .await?;
    perf_stop(perf);
    let (restart, restart_rate) = rate(&arrivals, before, parents)?;
    // The controller's start, its first syncs and the webhook's answers.
    let restart_cpu =
        process_cpu().saturating_sub(restart_cpu).as_secs_f64() * 1e6 / parents as f64;
    // The limit: the same requests straight to the webhook, WORKERS at a time.
    // The same request bodies bosun sends: the controller, the parent, its observed children.
    let list = parents_api.list(&Default::default()).await?;
    let all_children = cms.list(&Default::default()).await?;
    let controller = serde_json::to_value(&current)?;
    let bodies: Vec<Vec<u8>> = list
        .items
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let children: serde_json::Map<String, Value> = all_children
                .items
                .iter()
                .filter(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with(&format!("{name}-"))))
                .map(|c| {
                    let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
                    v["apiVersion"] = json!("v1");
                    v["kind"] = json!("ConfigMap");
                    (c.metadata.name.clone().unwrap_or_default(), v)
                })
                .collect();
            json!({"controller": controller, "parent": p, "children": {"ConfigMap.v1": children}, "related": {}, "finalizing": false})
                .to_string()
                .into_bytes()
        })
        .collect();
    let raw_client: hyper_util::client::legacy::Client<_, http_body_util::Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let bodies = Arc::new(bodies);

    // Several periodic sweeps: one sweep of 1,000 syncs lasts tens of milliseconds, too
    // short for one figure on a shared machine. After each sweep, while the controller
    // waits for its next period, one round of the limit: each pair sees the same machine,
    // and the medians are compared.
    let mut ours_rates = Vec::new();
    let mut raw_rates = Vec::new();
    let mut raw_calls = 0;
    let (mut cpu_ours, mut cpu_raw) = (Duration::ZERO, Duration::ZERO);
    // What each sweep and each raw round follow of idle time (see below).
    let half_period = Duration::from_secs(period as u64) / 2;
    let perf = perf_start("BENCH_PERF_SWEEPS", false);
    for k in 1..=SWEEPS {
        let first = before + k * parents + raw_calls;
        let cpu_before = process_cpu();
        wait(
            "every parent resynced",
            Duration::from_secs(600 + period as u64),
            async || calls.load(Ordering::SeqCst) >= first + parents,
        )
        .await?;
        ours_rates.push(rate(&arrivals, first, parents)?.1);
        cpu_ours += process_cpu().saturating_sub(cpu_before);
        // The raw round starts half a period after the sweep did, so that both follow the
        // same idle time: on this kind of VM, memory left untouched for a second or more
        // costs microseconds per page to touch again (invisible to the guest: no page
        // fault is counted; docs/performance.md), and a raw round run right after the
        // sweep found the webhook, the runtime and the allocator warm where the sweep had
        // found them cold. Each side's own data (bosun's caches, the raw bodies) was last
        // touched a period before, by its own previous round.
        let sweep_start = arrivals_of(&arrivals).get(first).copied();
        if let Some(start) = sweep_start {
            tokio::time::sleep_until((start + half_period).into()).await;
        }
        let cpu_between = process_cpu();
        let next = Arc::new(AtomicUsize::new(0));
        let raw_first = calls.load(Ordering::SeqCst);
        let mut tasks = Vec::new();
        for _ in 0..WORKERS {
            let (client, bodies, next, url) = (
                raw_client.clone(),
                bodies.clone(),
                next.clone(),
                url.clone(),
            );
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else { return };
                    let req = http::Request::post(&url)
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from(body.clone())))
                        .expect("request");
                    if let Ok(resp) = client.request(req).await {
                        let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
                    }
                }
            }));
        }
        for t in tasks {
            t.await?;
        }
        if calls.load(Ordering::SeqCst) != raw_first + bodies.len() {
            anyhow::bail!("the webhook received other calls during the raw round trips");
        }
        raw_rates.push(rate(&arrivals, raw_first, bodies.len())?.1);
        raw_calls += bodies.len();
        cpu_raw += process_cpu().saturating_sub(cpu_between);
    }
    perf_stop(perf);
    let ours_rate = median(&ours_rates);
    let raw_rate = median(&raw_rates);
    let (ours, raw) = (parents as f64 / ours_rate, parents as f64 / raw_rate);
    println!(
        "resync sweeps (syncs/s): [{}]; raw round trips (/s): [{}]",
        joined(&ours_rates, 0),
        joined(&raw_rates, 0)
    );
    println!(
        "restart: {parents} first syncs of the restarted controller in {restart:.3} s = {restart_rate:.0} syncs/s; CPU per sync (the whole process, the controller's start and the webhook included) {restart_cpu:.1} µs"
    );
    println!(
        "resync (median of {SWEEPS} sweeps): {parents} unchanged syncs in {ours:.3} s = {ours_rate:.0} syncs/s; limit (median of {SWEEPS}): raw HTTP round trips to the same webhook, {WORKERS} at a time: {raw:.3} s = {raw_rate:.0} /s"
    );
    // CPU of this process (controller, webhook and the raw client alike) per call: about
    // the same on both sides means the gap is waiting, not work.
    let calls_measured = (SWEEPS * parents) as f64;
    println!(
        "CPU per call (the whole process, webhook included): resync {:.1} µs, raw {:.1} µs",
        cpu_ours.as_secs_f64() * 1e6 / calls_measured,
        cpu_raw.as_secs_f64() * 1e6 / calls_measured
    );
    // Each sweep against the round right after it (the same machine state), and the
    // median of those pairs.
    let pairs: Vec<f64> = ours_rates
        .iter()
        .zip(&raw_rates)
        .map(|(o, r)| o / r)
        .collect();
    println!(
        "pairs (sweep ÷ the raw round after it): [{}]",
        joined(&pairs, 2)
    );
    println!(
        "resync ratio {:.2} (syncs/s ÷ raw round trips/s, median of the pairs; of the medians {:.2}; goal ≥ 0.9)",
        median(&pairs),
        ours_rate / raw_rate,
    );
    println!(
        "restart ratio {:.2} (first syncs/s of the restarted controller ÷ raw round trips/s; goal ≥ 0.7)",
        restart_rate / raw_rate
    );
    let (warm, cold) =
        tokio::task::spawn_blocking(move || idle::page_touch_cost(half_period)).await?;
    println!(
        "this machine: touching a page costs {warm:.2} µs warm, {cold:.2} µs after {:.1} s untouched",
        half_period.as_secs_f64()
    );
    drop(lambda);
    drop(sandbox);
    Ok(())
}
