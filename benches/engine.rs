//! Engine benchmark: no-op hook throughput through one queue (every task journaled, the
//! hook run with its temp files) against spawning the same executable with the same
//! files from a tight loop, measured in the same run; and bosun's overhead per task.
//!
//! `cargo bench --bench engine`; `BENCH_TASKS` (default 2,000) scales it.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun::hooks::HookProcess;
use bosun_actors::State;
use bosun_actors::engine::{Engine, EngineArgs};
use bosun_actors::global_hooks::GlobalHook;
use bosun_actors::hook_config::{HookKind, parse};
use bosun_actors::mailbox::Mailboxes;
use bosun_actors::ports::{BoxFut, ConfigStore, PortError};
use serde_json::json;

struct NoConfigMap;

impl ConfigStore for NoConfigMap {
    fn load(&self) -> BoxFut<'_, Result<Option<BTreeMap<String, String>>, PortError>> {
        Box::pin(async { Ok(None) })
    }
    fn save(&self, _key: String, _yaml: String) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(async { Ok(()) })
    }
}

fn main() {
    let tasks: usize = std::env::var("BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = dir.path().join("noop.sh");
    std::fs::write(&hook, "#!/bin/sh\nexit 0\n").expect("hook");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    // Raw: spawn the hook with the same temp files and environment, one after another.
    let files: Vec<(&str, std::path::PathBuf)> = [
        "BINDING_CONTEXT_PATH",
        "VALUES_PATH",
        "CONFIG_VALUES_PATH",
        "VALUES_JSON_PATCH_PATH",
        "CONFIG_VALUES_JSON_PATCH_PATH",
        "METRICS_PATH",
        "KUBERNETES_PATCH_PATH",
    ]
    .into_iter()
    .map(|v| (v, dir.path().join(v.to_lowercase())))
    .collect();
    let started = Instant::now();
    for _ in 0..tasks {
        for (_, p) in &files {
            std::fs::write(p, "{}").expect("temp file");
        }
        let status = Command::new(&hook)
            .envs(files.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .status()
            .expect("spawn");
        assert!(status.success());
        for (_, p) in &files {
            let _ = std::fs::read_to_string(p);
            let _ = std::fs::remove_file(p);
        }
    }
    let raw = tasks as f64 / started.elapsed().as_secs_f64();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let bosun_rate = rt.block_on(async {
        let journal_dir = dir.path().join("journal");
        let (sink, restored): (_, State) =
            bosun::operator::journal::open(&journal_dir).expect("journal");
        let runner = HookProcess {
            tmp_dir: dir.path().join("tmp"),
            keep_tmp_files: false,
            timeout: Duration::from_secs(60),
            working_dir: None,
        };
        let config = parse(
            "configVersion: v1\nschedule: [{crontab: '@daily'}]",
            HookKind::Global,
            "noop.sh",
        )
        .expect("config");
        let engine = Engine::start(EngineArgs {
            // Two names for the same executable, alternated, so adjacent tasks never merge.
            global_hooks: vec![
                GlobalHook {
                    name: "noop-a.sh".into(),
                    path: hook.clone(),
                    config: config.clone(),
                },
                GlobalHook {
                    name: "noop-b.sh".into(),
                    path: hook.clone(),
                    config,
                },
            ],
            static_global: json!({}),
            global_schemas: Default::default(),
            initial_config: None,
            restored,
            sink,
            executor: Arc::new(runner),
            config_store: Arc::new(NoConfigMap),
            max_attempts: None,
            mailboxes: Mailboxes::default(),
            modules: Vec::new(),
            releases: Arc::new(bosun::operator::releases::NoHelm("no charts".into())),
            monitor_interval: Duration::from_secs(270),
            ignore_releases: Vec::new(),
            bindings: Arc::new(bosun_actors::ports::NoKubernetes(
                "no Kubernetes API".into(),
            )),
            patcher: Arc::new(bosun_actors::ports::NoKubernetes(
                "no Kubernetes API".into(),
            )),
        })
        .await
        .expect("engine");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !engine.converged() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let batch: Vec<_> = (0..tasks)
            .map(|i| {
                engine.global_hook_task(
                    if i % 2 == 0 { "noop-a.sh" } else { "noop-b.sh" },
                    "bench",
                    "schedule",
                    json!([{"binding": "schedule", "type": "Schedule"}]),
                )
            })
            .collect();
        let started = Instant::now();
        engine.enqueue(batch);
        loop {
            let queues = engine.queues().await;
            let busy = queues
                .iter()
                .any(|q| q.name == "bench" && (!q.tasks.is_empty() || q.running.is_some()));
            let seen = queues.iter().any(|q| q.name == "bench");
            if seen && !busy {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tasks as f64 / started.elapsed().as_secs_f64()
    });
    println!(
        "no-op hook tasks through one queue: bosun {bosun_rate:.0}/s, raw spawn {raw:.0}/s, ratio {:.2} (goal >= 0.80); bosun overhead per task {:.0} µs",
        bosun_rate / raw,
        (1.0 / bosun_rate - 1.0 / raw) * 1e6
    );
}
