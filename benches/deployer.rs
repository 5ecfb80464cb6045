//! DeployItem deployer benchmark. Prints, measured in one run on this machine:
//! - the limit: 200 items' worth (`BENCH_ITEMS`) of 5 ConfigMaps each created straight in
//!   the target cluster with a kube-rs client, 5 items at a time (`BENCH_WORKERS`: the
//!   deployer's workers in part 2);
//! - the fair limit: a minimal client making the requests the deployer contract requires
//!   of each item — the list and watch of the items, the status write that takes the job
//!   (Init), the finalizer, the Progressing status, the 5 creates, the final status — each
//!   write starting from the object the previous one returned, 5 items at a time, in an
//!   items cluster of its own; three rounds before bosun's run and two after, taken at
//!   their median (the machine's speed drifts within minutes);
//! - bosun: 200 kubernetes-manifest DeployItems of the same 5 ConfigMaps each, created in
//!   the items' cluster (with a Target pointing at the target cluster) before the deployer
//!   starts; from its start until every item is `Succeeded`: items/s and objects/s, and
//!   the ratios against both limits (the goal is ≥ 0.9 of the fair one);
//! - memory: the heap the deployer holds per item once they are done (informer caches,
//!   queue, last runs, target clients), from a counting allocator.
//!
//! Both API servers are sandboxes in their own processes. Run: `cargo bench --bench deployer`.
//! `BENCH_PERF_RUN=FILE` records a `perf` profile of the whole machine during bosun's run
//! into FILE, `BENCH_PERF_FAIR=FILE` one of the fair limit's second round.

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

#[path = "support/stats.rs"]
mod stats;
use stats::{joined, median};

#[path = "support/cluster.rs"]
mod cluster;

#[path = "support/perf.rs"]
mod perf;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bosun_deployer::item::Phase;
use cluster::{create, resource};
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: cluster::Counting = cluster::Counting;

const OBJECTS: usize = 5;

/// DeployItem `item-<n>`: a kubernetes-manifest item of [`OBJECTS`] ConfigMaps in the
/// Target `target`.
fn deploy_item(n: usize) -> Value {
    let manifests: Vec<Value> = (0..OBJECTS)
        .map(|k| json!({"policy": "manage", "manifest": config_map("bench", n, k)}))
        .collect();
    json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
           "metadata": {"name": format!("item-{n}"), "namespace": "default"},
           "spec": {"type": "landscaper.gardener.cloud/kubernetes-manifest",
                    "target": {"name": "target"},
                    "config": {"apiVersion": "manifest.deployer.landscaper.gardener.cloud/v1alpha2",
                               "kind": "ProviderConfiguration", "manifests": manifests}}})
}

fn config_map(namespace: &str, item: usize, k: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("i{item}-{k}"), "namespace": namespace},
           "data": {"item": item.to_string(), "k": k.to_string()}})
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let items: usize = env("BENCH_ITEMS", 200);
    // Items reconciled at once by the deployer, and objects created at once by the limit.
    let workers: usize = env("BENCH_WORKERS", 5);
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("items"))?;
    std::fs::create_dir_all(dir.path().join("target"))?;
    let items_cluster = cluster::sandbox(&dir.path().join("items")).await?;
    println!(
        "API server: {} (BENCH_SERVER=real for the real control plane)",
        cluster::server_name()
    );
    let target_cluster = cluster::sandbox(&dir.path().join("target")).await?;
    let namespaces: Api<DynamicObject> = Api::all_with(
        target_cluster.client.clone(),
        &resource("", "v1", "Namespace", "namespaces"),
    );
    // The limit is a fraction of a second: measured in LIMIT_ROUNDS rounds (each in a
    // namespace of its own) and taken at its median, as a single shot moved it by half.
    const LIMIT_ROUNDS: usize = 5;
    let namespaces_made: Vec<String> = (0..LIMIT_ROUNDS)
        .map(|r| format!("raw{r}"))
        .chain(["bench".to_string()])
        .collect();
    for ns in &namespaces_made {
        create(
            &namespaces,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await?;
    }

    // 1. The limit: the objects created straight in the target, WORKERS items at a time.
    let mut rounds = Vec::new();
    for ns in namespaces_made.iter().take(LIMIT_ROUNDS) {
        let raw_api: Api<DynamicObject> = Api::namespaced_with(
            target_cluster.client.clone(),
            ns,
            &resource("", "v1", "ConfigMap", "configmaps"),
        );
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..workers {
            let (api, next, ns) = (raw_api.clone(), next.clone(), ns.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= items {
                        return Ok::<(), anyhow::Error>(());
                    }
                    for k in 0..OBJECTS {
                        create(&api, config_map(&ns, n, k)).await?;
                    }
                }
            }));
        }
        for t in tasks {
            t.await??;
        }
        rounds.push(started.elapsed().as_secs_f64());
    }
    rounds.sort_by(f64::total_cmp);
    let raw = rounds[rounds.len() / 2];
    println!(
        "limit: {items} items × {OBJECTS} ConfigMaps created straight in the target, {workers} at a time: {raw:.2} s, median of {LIMIT_ROUNDS} rounds {:.2}–{:.2} s ({:.0} items/s, {:.0} objects/s)",
        rounds[0],
        rounds[rounds.len() - 1],
        items as f64 / raw,
        (items * OBJECTS) as f64 / raw
    );

    // 1b. The fair limit: the contract's requests, made by a minimal client.
    // Three rounds now and two after bosun's run: the machine's speed drifts within
    // minutes, and the limit's median brackets the run it is compared with.
    let mut fair_rounds = fair_limit(
        &dir.path().join("limit"),
        &target_cluster.client,
        items,
        workers,
        0..3,
    )
    .await?;

    // 2. bosun: the same objects as DeployItems, all there when the deployer starts.
    bosun_kube::crds::install_crds(&items_cluster.client, bosun::deployer::CRDS).await?;
    let targets: Api<DynamicObject> = Api::namespaced_with(
        items_cluster.client.clone(),
        "default",
        &resource("landscaper.gardener.cloud", "v1alpha1", "Target", "targets"),
    );
    let kubeconfig = std::fs::read_to_string(&target_cluster.kubeconfig)?;
    let item_api: Api<DynamicObject> = Api::namespaced_with(
        items_cluster.client.clone(),
        "default",
        &resource(
            "landscaper.gardener.cloud",
            "v1alpha1",
            "DeployItem",
            "deployitems",
        ),
    );
    cluster::wait("the CRDs served", Duration::from_secs(60), async || {
        targets.list(&Default::default()).await.is_ok()
            && item_api.list(&Default::default()).await.is_ok()
    })
    .await?;
    create(
        &targets,
        json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "Target",
               "metadata": {"name": "target", "namespace": "default"},
               "spec": {"type": "landscaper.gardener.cloud/kubernetes-cluster", "config": {"kubeconfig": kubeconfig}}}),
    )
    .await?;
    for n in 0..items {
        create(&item_api, deploy_item(n)).await?;
    }
    let heap_before = cluster::settled_live().await;
    let perf = perf::perf_start("BENCH_PERF_RUN", true);
    let started = Instant::now();
    let metrics = bosun::prometheus::install("");
    // The deployer's client is measured as in `bosun run`: its requests are counted below.
    let measured = bosun_kube::measured_client(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&items_cluster.kubeconfig)?,
            &Default::default(),
        )
        .await?,
        "shared",
        bosun_kube::ClientLimits::UNLIMITED,
    )?;
    let host = bosun::host::Host::with_client(
        &bosun::host::HostConfig {
            process: bosun::host::ProcessConfig {
                namespace: "default".into(),
                ..Default::default()
            },
            ..Default::default()
        },
        measured,
        bosun_kube::in_cluster::ClientSource::Inferred,
        (String::new(), None),
        metrics.clone(),
    );
    let cfg = bosun::deployer::DeployerConfig {
        workers,
        identity: "bench".into(),
        target_selectors: Vec::new(),
        install_crds: false,
        // BENCH_JOURNAL_DIR: the journal elsewhere (on tmpfs, to see what its flushes cost).
        journal_dir: std::env::var_os("BENCH_JOURNAL_DIR")
            .map_or_else(|| dir.path().join("journal"), std::path::PathBuf::from),
        resource_cluster: None,
        helm: Default::default(),
        work_dir: dir.path().join("work"),
        timeouts: Default::default(),
        lock_holder: None,
        pod_namespace: "default".into(),
        contract: Default::default(),
        only_type: None,
        registry_configs: Vec::new(),
    };
    let deployer = bosun::deployer::start(&host, &cfg).await?;
    // Watched through the deployer's own view: listing 1,000 items every few milliseconds
    // would load both this process and the items' API server with the measurement.
    let view = deployer.deployer.view();
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut first_done: Option<f64> = None;
    while view.in_phase(Phase::Succeeded) < items {
        if first_done.is_none() && view.in_phase(Phase::Succeeded) > 0 {
            first_done = Some(started.elapsed().as_secs_f64());
        }
        if view.in_phase(Phase::Failed) > 0 {
            let list = item_api.list(&Default::default()).await?;
            if let Some(failed) = list
                .items
                .iter()
                .find(|i| i.data["status"]["phase"] == "Failed")
            {
                anyhow::bail!("an item failed: {}", failed.data["status"]["lastError"]);
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {items} items Succeeded after 900 s",
            view.in_phase(Phase::Succeeded)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ours = started.elapsed().as_secs_f64();
    perf::perf_stop(perf);
    println!(
        "bosun: the first item Succeeded {:.3} s after the deployer started (its start: CRDs checked, the items listed, the journal opened)",
        first_done.unwrap_or(ours)
    );
    let done = item_api
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|i| i.data["status"]["phase"] == "Succeeded")
        .count();
    anyhow::ensure!(
        done == items,
        "the deployer counts {items} items Succeeded, the API server {done}"
    );
    println!(
        "bosun: {items} manifest DeployItems × {OBJECTS} ConfigMaps: all Succeeded {ours:.2} s after the deployer started ({:.0} items/s, {:.0} objects/s)",
        items as f64 / ours,
        (items * OBJECTS) as f64 / ours
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let heap_after = cluster::settled_live().await;
    // The list is this process's heap too: gone before the next measurement.
    let json_per_item = item_api
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(|o| serde_json::to_vec(o).map_or(0, |v| v.len()))
        .sum::<usize>() as f64
        / items as f64;

    let per_item = (heap_after - heap_before) as f64 / items as f64;
    println!(
        "memory: {per_item:.0} B of heap per item, the deployer's fixed heap included (the item in the informer cache, queue, last run; the API servers run in their own processes); the item's JSON {json_per_item:.0} B: heap ÷ JSON {:.2}×",
        per_item / json_per_item
    );
    // What one more item costs: as many more items again, run to Succeeded after the rest;
    // the heap they add, per item (the fixed heap of the deployer, its clients and
    // runtime, is in the figure above and not in this one). Doubling the count doubles
    // every table kept per item exactly once, so each table's growth is in the figure at
    // its amortized share; with a quarter more items the figure held a table's whole
    // growth or none of it, and read 1.20× and 2.13× of the JSON in two runs of one code.
    let more = items.max(10);
    for n in items..items + more {
        create(&item_api, deploy_item(n)).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while view.in_phase(Phase::Succeeded) < items + more {
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {} items Succeeded after 300 s",
            view.in_phase(Phase::Succeeded),
            items + more
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let marginal = (cluster::settled_live().await - heap_after) as f64 / more as f64;
    println!(
        "memory: {marginal:.0} B of heap for each further item ({more} more items, run after the rest): heap ÷ JSON {:.2}× (goal ≤ 1.5×)",
        marginal / json_per_item
    );
    // For a heap profile of what is held at this point (`heaptrack`, leaks at exit).
    if std::env::var_os("BENCH_EXIT_AFTER_MEMORY").is_some() {
        // The sandbox processes go with their handles; nothing else is dropped.
        drop((items_cluster, target_cluster));
        std::process::exit(0);
    }
    drop(deployer);
    print_requests(&metrics.render(&Default::default()), items + more);
    fair_rounds.extend(
        fair_limit(
            &dir.path().join("limit-after"),
            &target_cluster.client,
            items,
            workers,
            3..5,
        )
        .await?,
    );
    let (in_order, fair) = (joined(&fair_rounds, 2), median(&fair_rounds));
    println!(
        "fair limit: {items} items listed and watched, through the contract's 9 requests each (3 status writes, the finalizer, {OBJECTS} creates), {workers} at a time: {fair:.2} s ({:.0} items/s), the median of 3 rounds before bosun's run and 2 after: [{in_order}] s",
        items as f64 / fair
    );
    println!(
        "ratio {:.2} (bosun items/s ÷ the fair limit's; goal ≥ 0.9); {:.2} against the straight creates",
        fair / ours,
        raw / ours
    );
    Ok(())
}

/// Prints the deployer's requests per item by verb and path template, with their mean
/// time to the response headers, from its clients' `kubernetes_client_request_latency_seconds`
/// (the items' client and the target's).
fn print_requests(metrics: &str, items: usize) {
    let series = |suffix: &str| -> std::collections::BTreeMap<String, f64> {
        let prefix = format!("kubernetes_client_request_latency_seconds_{suffix}{{");
        metrics
            .lines()
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .filter_map(|l| {
                let (labels, value) = l.rsplit_once("} ")?;
                Some((labels.to_string(), value.parse::<f64>().ok()?))
            })
            .collect()
    };
    let (counts, sums) = (series("count"), series("sum"));
    let mut rows: Vec<(f64, f64, &String)> = counts
        .iter()
        .filter(|(_, n)| **n > 0.0)
        .map(|(labels, n)| {
            let mean_ms = sums.get(labels).copied().unwrap_or(0.0) / n * 1e3;
            (n / items as f64, mean_ms, labels)
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    let total: f64 = rows.iter().map(|r| r.0).sum();
    let waited: f64 = rows.iter().map(|r| r.0 * r.1).sum();
    println!(
        "requests per item: {total:.2} in all (the fair limit makes 9), {waited:.1} ms of round trips per item"
    );
    let reconciles: f64 = metrics
        .lines()
        .filter(|l| l.starts_with(bosun_deployer::controller::RECONCILES_TOTAL))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    println!(
        "reconciles per item: {:.2} (a run takes one; more are watch events that woke an item again)",
        reconciles / items as f64
    );
    for (per_item, mean_ms, labels) in rows.iter().filter(|r| r.0 >= 0.01) {
        println!("  {per_item:6.2} × {mean_ms:5.2} ms  {labels}");
    }
}

/// `item` with the status the contract asks of a deployer at `phase` (the fields landscaper's
/// deployers write, as bosun does): the deployer, the times, the observed generation and,
/// once done, the objects it manages and its readiness condition.
fn with_status(mut item: DynamicObject, phase: &str, managed: Option<Vec<Value>>) -> DynamicObject {
    let now = "2026-01-01T00:00:00Z";
    let mut status = json!({
        "phase": phase,
        "deployer": {"identity": "bench", "name": "bosun", "version": "0.1.0"},
        "lastReconcileTime": now,
        "observedGeneration": 1,
        "transitionTimes": {"initTime": now},
    });
    if let Some(managed) = managed {
        status["providerStatus"] = json!({
            "apiVersion": "manifest.deployer.landscaper.gardener.cloud/v1alpha2",
            "kind": "ProviderStatus",
            "managedResources": managed,
        });
        status["conditions"] = json!([{"type": "ManifestsReady", "status": "True",
            "reason": "Ready", "message": "every readiness check passed"}]);
        status["transitionTimes"]["finishedTime"] = json!(now);
    }
    item.data["status"] = status;
    item
}

/// The fair limit's times of `rounds` (each in a namespace of its own): `items`
/// DeployItems in an items cluster of its own (so that bosun's informers never see them),
/// each taken through the contract's writes by one of `workers` tasks.
async fn fair_limit(
    dir: &std::path::Path,
    target: &kube::Client,
    items: usize,
    workers: usize,
    rounds_of: std::ops::Range<usize>,
) -> anyhow::Result<Vec<f64>> {
    std::fs::create_dir_all(dir)?;
    let items_cluster = cluster::sandbox(dir).await?;
    bosun_kube::crds::install_crds(&items_cluster.client, bosun::deployer::CRDS).await?;
    let namespaces_of = |client: &kube::Client| -> Api<DynamicObject> {
        Api::all_with(
            client.clone(),
            &resource("", "v1", "Namespace", "namespaces"),
        )
    };
    let item_resource = resource(
        "landscaper.gardener.cloud",
        "v1alpha1",
        "DeployItem",
        "deployitems",
    );
    let mut rounds = Vec::new();
    for round in rounds_of {
        let ns = format!("fair{round}");
        for client in [&items_cluster.client, target] {
            create(
                &namespaces_of(client),
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .await?;
        }
        let item_api: Api<DynamicObject> =
            Api::namespaced_with(items_cluster.client.clone(), &ns, &item_resource);
        cluster::wait("the CRDs served", Duration::from_secs(60), async || {
            item_api.list(&Default::default()).await.is_ok()
        })
        .await?;
        for n in 0..items {
            let manifests: Vec<Value> = (0..OBJECTS)
                .map(|k| json!({"policy": "manage", "manifest": config_map(&ns, n, k)}))
                .collect();
            create(
                &item_api,
                json!({"apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
                       "metadata": {"name": format!("item-{n}"), "namespace": ns},
                       "spec": {"type": "landscaper.gardener.cloud/kubernetes-manifest",
                                "config": {"apiVersion": "manifest.deployer.landscaper.gardener.cloud/v1alpha2",
                                           "kind": "ProviderConfiguration", "manifests": manifests}}}),
            )
            .await?;
        }
        let config_maps: Api<DynamicObject> = Api::namespaced_with(
            target.clone(),
            &ns,
            &resource("", "v1", "ConfigMap", "configmaps"),
        );
        // The second round's profile beside bosun's run's (BENCH_PERF_FAIR).
        let perf = if round == 1 {
            perf::perf_start("BENCH_PERF_FAIR", true)
        } else {
            None
        };
        let started = Instant::now();
        // The deployer's list and its watch (every write comes back as an event the API
        // server sends, as to the deployer), then the items as a queue.
        let list = item_api.list(&Default::default()).await?;
        let version = list.metadata.resource_version.clone().unwrap_or_default();
        let watch = {
            let item_api = item_api.clone();
            let stream = item_api
                .watch(&kube::api::WatchParams::default(), &version)
                .await?;
            tokio::spawn(async move {
                futures::pin_mut!(stream);
                while let Some(event) = futures::StreamExt::next(&mut stream).await {
                    if event.is_err() {
                        return;
                    }
                }
            })
        };
        let listed = Arc::new(std::sync::Mutex::new(list.items));
        let mut tasks = Vec::new();
        for _ in 0..workers {
            let (item_api, config_maps, listed) =
                (item_api.clone(), config_maps.clone(), listed.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let Some(item) = listed
                        .lock()
                        .map_err(|_| anyhow::anyhow!("poisoned"))?
                        .pop()
                    else {
                        return Ok::<(), anyhow::Error>(());
                    };
                    let name = item.metadata.name.clone().unwrap_or_default();
                    let item: DynamicObject = item_api
                        .replace_status(
                            &name,
                            &Default::default(),
                            &with_status(item, "Init", None),
                        )
                        .await?;
                    let mut item = item;
                    item.metadata.finalizers =
                        Some(vec!["finalizer.landscaper.gardener.cloud".into()]);
                    let item = item_api.replace(&name, &Default::default(), &item).await?;
                    let item: DynamicObject = item_api
                        .replace_status(
                            &name,
                            &Default::default(),
                            &with_status(item, "Progressing", None),
                        )
                        .await?;
                    let n: usize = name.trim_start_matches("item-").parse()?;
                    let mut managed = Vec::new();
                    for k in 0..OBJECTS {
                        let made = config_maps
                            .create(
                                &Default::default(),
                                &serde_json::from_value(config_map(
                                    config_maps.namespace().unwrap_or_default(),
                                    n,
                                    k,
                                ))?,
                            )
                            .await?;
                        managed.push(json!({"policy": "manage", "resource": {
                            "apiVersion": "v1", "kind": "ConfigMap",
                            "name": made.metadata.name, "namespace": made.metadata.namespace,
                            "uid": made.metadata.uid}}));
                    }
                    let _: DynamicObject = item_api
                        .replace_status(
                            &name,
                            &Default::default(),
                            &with_status(item, "Succeeded", Some(managed)),
                        )
                        .await?;
                }
            }));
        }
        for t in tasks {
            t.await??;
        }
        rounds.push(started.elapsed().as_secs_f64());
        perf::perf_stop(perf);
        watch.abort();
    }
    Ok(rounds)
}
