//! Modules benchmark: a cold converge of generated modules (2 hooks each, a one-object
//! chart) on a sandbox API server process, against the intrinsic work of the same modules done
//! directly in the same run — the hook processes (`--config`, then the run with its temp
//! files), a Helm render and a Helm install per module. The difference is bosun's orchestration (queues, journal,
//! values, checksums, status and drift reads).
//!
//! `cargo bench --bench modules`; `BENCH_MODULES` (default 100) scales it;
//! `BENCH_HELM_ENGINE=cli` runs Helm as the `helm` binary (direct work and bosun alike)
//! instead of the library. Needs both (`scripts/setup-helm.sh`): the render of the other
//! engine is measured too. `BENCH_PERF_DIRECT=FILE` and `BENCH_PERF_CONVERGE=FILE` record
//! `perf` profiles of the whole machine during the direct work and during bosun's converge;
//! `BENCH_LOG=1` writes bosun's log to stderr (`LOG_LEVEL=debug` shows each module's steps).

/// bosun's allocator, as in the binary.
#[global_allocator]
static ALLOCATOR: bosun::memory::Allocator = bosun::memory::Allocator;

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

#[path = "support/perf.rs"]
mod perf;

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

fn main() {
    let modules: usize = env("BENCH_MODULES", 100);
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
        // The API server in its own process, as it is in a cluster.
        let kubeconfig = dir.path().join("kubeconfig");
        let mut sandbox = std::process::Command::new(env!("CARGO_BIN_EXE_bosun"))
            .args(["sandbox", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("sandbox"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("LOG_LEVEL", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("bosun sandbox");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !kubeconfig.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let modules_dir = dir.path().join("modules");
        generate(&modules_dir, modules);

        // Intrinsic work, done directly: both hooks, a render and an install per module,
        // into another namespace so the converge below starts cold.
        let (choice, other) = match std::env::var("BENCH_HELM_ENGINE").as_deref() {
            Ok("cli") => (EngineChoice::Cli, EngineChoice::Library),
            _ => (EngineChoice::Library, EngineChoice::Cli),
        };
        let lib = HelmEngine::select(&settings(choice, &dir.path().join("tmp-helm")))
            .await
            .expect("Helm (scripts/setup-helm.sh)");
        let client = lib
            .client(&ClusterOptions {
                kubeconfig: Some(kubeconfig.clone()),
                context: None,
                namespace: "kube-public".into(),
                ..Default::default()
            })
            .expect("helm client");
        let runner = HookProcess {
            tmp_dir: dir.path().join("tmp-direct"),
            keep_tmp_files: false,
            timeout: Duration::from_secs(60),
            working_dir: None,
            logging: Default::default(),
        };
        let (mut hooks, mut render, mut install) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        let perf = perf::perf_start("BENCH_PERF_DIRECT", true);
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
                .deploy(bosun::helm::Action::Install, &m, &name, &values, &Default::default())
                .await
                .expect("install");
            install += t.elapsed();
        }
        let intrinsic = hooks + render + install;
        perf::perf_stop(perf);

        // The same modules through bosun: a cold start to the end of the first converge.
        let cfg = bosun::addon::OperatorConfig {
            global_hooks_dir: dir.path().join("no-global-hooks"),
            modules_dirs: vec![modules_dir.clone()],
            helm_library: Some(tools().join("helm/libhelm_c.so")),
            helm_binary: Some(tools().join("helm/helm")),
            helm_engine: choice,
            ..bosun::addon::OperatorConfig::in_cluster()
        };
        let process = bosun::host::ProcessConfig {
            namespace: "default".into(),
            tmp_dir: dir.path().join("tmp"),
            journal_dir: dir.path().join("journal"),
            debug_socket: dir.path().join("debug.socket"),
            kubeconfig: Some(kubeconfig.clone()),
            listen: "127.0.0.1:0".parse().expect("addr"),
            ..bosun::host::ProcessConfig::in_cluster()
        };
        let perf = perf::perf_start("BENCH_PERF_CONVERGE", true);
        let started = Instant::now();
        let metrics = bosun::prometheus::install("");
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
        let total = started.elapsed();
        perf::perf_stop(perf);
        let ratio = total.as_secs_f64() / intrinsic.as_secs_f64();
        println!("modules: {modules} (2 hooks and a one-object chart each)");
        println!(
            "intrinsic work, done directly: {:.2} s (hooks {:.2} s, helm render {:.2} s, helm install {:.2} s)",
            intrinsic.as_secs_f64(),
            hooks.as_secs_f64(),
            render.as_secs_f64(),
            install.as_secs_f64()
        );
        println!(
            "cold converge through bosun: {:.2} s = {ratio:.2}x the intrinsic work (orchestration overhead {:.0}%; goal ≤ 1.1x)",
            total.as_secs_f64(),
            (ratio - 1.0) * 100.0
        );
        println!(
            "helm render per module through the {}: {:.1} ms",
            lib.kind(),
            render.as_secs_f64() * 1000.0 / modules as f64
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
        drop(operator);
        let _ = sandbox.kill();
        let _ = sandbox.wait();
    });
}
