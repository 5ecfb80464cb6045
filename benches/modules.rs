//! Modules benchmark: a cold converge of generated modules (2 hooks each, a one-object
//! chart) on a sandbox API server process, against the intrinsic work of the same modules done
//! directly in the same run — the hook processes (`--config`, then the run with its temp
//! files), a Helm render and a Helm install per module. The difference is bosun's orchestration (queues, journal,
//! values, checksums, status and drift reads).
//!
//! Both are measured in paired rounds (`BENCH_ROUNDS`, default 4), each on a fresh API
//! server and each in the other order, and the median of the rounds' ratios is printed.
//! The temp files of both go to one tmpfs, `BENCH_TMP` (default `/dev/shm`).
//!
//! `cargo bench --bench modules`; `BENCH_MODULES` (default 100) scales it;
//! `BENCH_HELM_ENGINE=cli` runs Helm as the `helm` binary (direct work and bosun alike)
//! instead of the library. Needs both (`scripts/setup-helm.sh`): the render of the other
//! engine is measured too. `BENCH_PERF_DIRECT=FILE` and `BENCH_PERF_CONVERGE=FILE` record
//! `perf` profiles of the whole machine during the first round's direct work and converge;
//! `BENCH_LOG=1` writes bosun's log to stderr (`LOG_LEVEL=debug` shows each module's steps).

/// bosun's allocator, as in the binary.
#[global_allocator]
static ALLOCATOR: bosun::memory::Allocator = bosun::memory::Allocator;

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

#[path = "support/perf.rs"]
mod perf;

#[path = "support/cluster.rs"]
mod cluster;

#[path = "support/stats.rs"]
mod stats;
use stats::{joined, median};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bosun::helm::{ClusterOptions, EngineChoice, EngineSettings, HelmEngine};
use bosun::hooks::{HookInput, HookProcess};
use serde_json::json;

fn generate(dir: &Path, modules: usize) {
    let mut flags = String::new();
    for i in 0..modules {
        let name = format!("bench{i}");
        flags.push_str(&format!("{name}Enabled: true\n"));
        let m = dir.join(format!("{:03}-{name}", i + 1));
        std::fs::create_dir_all(m.join("templates")).expect("module dir");
        std::fs::create_dir_all(m.join("hooks")).expect("hooks dir");
        std::fs::write(
            m.join("Chart.yaml"),
            format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
        )
        .expect("chart");
        std::fs::write(
            m.join("templates/cm.yaml"),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  n: \"{i}\"\n"
            ),
        )
        .expect("template");
        for (hook, binding) in [("a.sh", "beforeHelm"), ("b.sh", "afterHelm")] {
            let p = m.join("hooks").join(hook);
            std::fs::write(
                &p,
                format!(
                    "#!/bin/sh\nif [ \"$1\" = \"--config\" ]; then echo '{{\"configVersion\":\"v1\",\"{binding}\":1}}'; exit 0; fi\nexit 0\n"
                ),
            )
            .expect("hook");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }
    std::fs::write(dir.join("values.yaml"), flags).expect("values.yaml");
}

fn tools() -> PathBuf {
    std::env::var_os("BOSUN_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools"))
}

fn settings(choice: EngineChoice, tmp: &Path) -> EngineSettings {
    EngineSettings {
        choice,
        binary: Some(tools().join("helm/helm")),
        library: Some(tools().join("helm/libhelm_c.so")),
        tmp_dir: tmp.to_path_buf(),
    }
}

/// The intrinsic work, done directly: both hooks (`--config` and the run), a render and
/// an install per module, into `kube-public`; the time of each part.
async fn direct(
    tmp: &Path,
    kubeconfig: &Path,
    modules_dir: &Path,
    modules: usize,
    choice: EngineChoice,
) -> [Duration; 3] {
    let lib = HelmEngine::select(&settings(choice, &tmp.join("helm")))
        .await
        .expect("Helm (scripts/setup-helm.sh)");
    let client = lib
        .client(&ClusterOptions {
            kubeconfig: Some(kubeconfig.to_path_buf()),
            context: None,
            namespace: "kube-public".into(),
            ..Default::default()
        })
        .expect("helm client");
    let runner = HookProcess {
        tmp_dir: tmp.join("direct"),
        keep_tmp_files: false,
        timeout: Duration::from_secs(60),
        working_dir: None,
        logging: Default::default(),
    };
    let (mut hooks, mut render, mut install) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for i in 0..modules {
        let name = format!("bench{i}");
        let m = modules_dir.join(format!("{:03}-{name}", i + 1));
        let values = json!({"global": {}, name.clone(): {}});
        for (hook, binding) in [("a.sh", "beforeHelm"), ("b.sh", "afterHelm")] {
            let context = json!([{"binding": binding, "snapshots": {}}]);
            let path = m.join("hooks").join(hook);
            let t = Instant::now();
            // `hook --config` is part of every hook's work (bosun reads it once).
            runner.config(hook, &path).await.expect("hook --config");
            runner
                .run(&HookInput {
                    name: hook,
                    path: &path,
                    binding_context: &context,
                    values: Some(&values),
                    config_values: Some(&values),
                    env: Vec::new(),
                    log_fields: Default::default(),
                })
                .await
                .expect("hook");
            hooks += t.elapsed();
        }
        let t = Instant::now();
        lib.render(&m, &values, &name, "kube-public", false)
            .await
            .expect("render");
        render += t.elapsed();
        let t = Instant::now();
        client
            .deploy(
                bosun::helm::Action::Install,
                &m,
                &name,
                &values,
                &Default::default(),
            )
            .await
            .expect("install");
        install += t.elapsed();
    }
    [hooks, render, install]
}

/// The same modules through bosun, into `default`: a cold start (a new journal) to the
/// end of the first converge.
async fn through_bosun(
    dir: &Path,
    tmp: &Path,
    kubeconfig: &Path,
    modules_dir: &Path,
    choice: EngineChoice,
    metrics: bosun::prometheus::Metrics,
) -> Duration {
    let cfg = bosun::addon::OperatorConfig {
        global_hooks_dir: dir.join("no-global-hooks"),
        modules_dirs: vec![modules_dir.to_path_buf()],
        helm_library: Some(tools().join("helm/libhelm_c.so")),
        helm_binary: Some(tools().join("helm/helm")),
        helm_engine: choice,
        ..bosun::addon::OperatorConfig::in_cluster()
    };
    let process = bosun::host::ProcessConfig {
        namespace: "default".into(),
        tmp_dir: tmp.join("bosun"),
        journal_dir: dir.join("journal"),
        debug_socket: dir.join("debug.socket"),
        kubeconfig: Some(kubeconfig.to_path_buf()),
        listen: "127.0.0.1:0".parse().expect("addr"),
        ..bosun::host::ProcessConfig::in_cluster()
    };
    let started = Instant::now();
    let host_config = bosun::host::HostConfig {
        process: process.clone(),
        ..Default::default()
    };
    let host = bosun::host::Host::connect(&host_config, None, metrics)
        .await
        .expect("host");
    let operator = bosun::addon::start(&host, &cfg, &process.journal_dir)
        .await
        .expect("operator");
    let deadline = Instant::now() + Duration::from_secs(1800);
    while !operator.engine.converged() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(operator.engine.converged(), "the converge did not finish");
    let took = started.elapsed();
    // As at a SIGTERM: no task starts any more, so that nothing of this round runs on
    // into the next one.
    host.gate.stop_starting();
    host.gate.wait_idle(Duration::from_secs(30)).await;
    took
}

fn main() {
    let modules: usize = env("BENCH_MODULES", 100);
    let rounds: usize = env("BENCH_ROUNDS", 4).max(1);
    // BENCH_LOG: bosun's log on stderr (LOG_LEVEL, LOG_TYPE), for the converge's timeline.
    if std::env::var_os("BENCH_LOG").is_some() {
        bosun::logging::init();
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let modules_dir = dir.path().join("modules");
        generate(&modules_dir, modules);
        let (choice, other) = match std::env::var("BENCH_HELM_ENGINE").as_deref() {
            Ok("cli") => (EngineChoice::Cli, EngineChoice::Library),
            _ => (EngineChoice::Library, EngineChoice::Cli),
        };
        let metrics = bosun::prometheus::install("");
        // The hooks' and Helm's temp files of both, on one tmpfs (`BENCH_TMP`, by default
        // `/dev/shm`): on this VM's disk, an ext4 without a journal, every create scans the
        // inodes deleted in the last minute, and the one measured after the other paid for
        // the other's files (a tenth of bosun's CPU in a profile; benches/engine.rs).
        let tmp_base = std::env::var_os("BENCH_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/dev/shm"));
        // Paired rounds, each on a fresh API server, the two in turn first: single pairs
        // read 1.02 to 1.25 within one hour on this machine.
        let (mut parts, mut ratios, mut totals) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds {
            let round = dir.path().join(format!("round{r}"));
            let tmp = tempfile::tempdir_in(&tmp_base)
                .or_else(|_| tempfile::tempdir())
                .expect("temp folder");
            let tmp = tmp.path().to_path_buf();
            // A fresh API server in its own process, as in a cluster (gone with its handle).
            let server = cluster::sandbox(&round).await.expect("bosun sandbox");
            let kubeconfig = server.kubeconfig.clone();
            let (mut part, mut total) = ([Duration::ZERO; 3], Duration::ZERO);
            for step in 0..2 {
                if (r + step) % 2 == 0 {
                    let perf = (r == 0).then(|| perf::perf_start("BENCH_PERF_DIRECT", true));
                    part = direct(&tmp, &kubeconfig, &modules_dir, modules, choice).await;
                    perf::perf_stop(perf.flatten());
                } else {
                    let perf = (r == 0).then(|| perf::perf_start("BENCH_PERF_CONVERGE", true));
                    total =
                        through_bosun(&round, &tmp, &kubeconfig, &modules_dir, choice, metrics.clone())
                            .await;
                    perf::perf_stop(perf.flatten());
                }
            }
            drop(server);
            let intrinsic: Duration = part.iter().sum();
            ratios.push(total.as_secs_f64() / intrinsic.as_secs_f64());
            totals.push(total.as_secs_f64());
            parts.push(part);
        }
        let ratio = median(&ratios);
        let part = |i: usize| median(&parts.iter().map(|p| p[i].as_secs_f64()).collect::<Vec<_>>());
        println!("modules: {modules} (2 hooks and a one-object chart each), {rounds} paired rounds, medians");
        println!(
            "intrinsic work, done directly: {:.2} s (hooks {:.2} s, helm render {:.2} s, helm install {:.2} s)",
            part(0) + part(1) + part(2),
            part(0),
            part(1),
            part(2)
        );
        println!(
            "cold converge through bosun: {:.2} s = {ratio:.2}x the intrinsic work [rounds: {}] (orchestration overhead {:.0}%; goal ≤ 1.1x)",
            median(&totals),
            joined(&ratios, 2),
            (ratio - 1.0) * 100.0
        );
        println!(
            "helm render per module through the {}: {:.1} ms",
            match choice {
                EngineChoice::Cli => "cli",
                _ => "library",
            },
            part(1) * 1000.0 / modules as f64
        );
        match HelmEngine::select(&settings(other, &dir.path().join("tmp-helm"))).await {
            Ok(engine) => {
                let t = Instant::now();
                for i in 0..modules {
                    let name = format!("bench{i}");
                    let m = modules_dir.join(format!("{:03}-{name}", i + 1));
                    let values = json!({"global": {}, name.clone(): {}});
                    engine
                        .render(&m, &values, &name, "kube-public", false)
                        .await
                        .expect("render");
                }
                println!(
                    "helm render per module through the {}: {:.1} ms",
                    engine.kind(),
                    t.elapsed().as_secs_f64() * 1000.0 / modules as f64
                );
            }
            Err(e) => println!("no render figure of the other Helm engine: {e}"),
        }
    });
}
