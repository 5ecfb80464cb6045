//! Engine benchmark: no-op hook throughput through one queue (every task journaled, the
//! hook run with its temp files) against spawning the same executable with the same
//! files from a tight loop, measured in the same run; and bosun's overhead per task.
//!
//! `cargo bench --bench engine`; `BENCH_TASKS` (default 2,000) scales it.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Instant;

#[path = "support/noop_engine.rs"]
mod noop_engine;
use noop_engine::round;

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
    let runner_rate = rt.block_on(runner_alone(&dir.path().join("runner"), &hook, tasks));
    let bosun_rate = rt.block_on(round(&dir.path().join("engine"), &hook, tasks));
    println!(
        "the hook runner alone (temp files, process, output, rusage): {runner_rate:.0}/s, {:.0} µs per run over raw spawn",
        (1.0 / runner_rate - 1.0 / raw) * 1e6
    );
    println!(
        "no-op hook tasks through one queue: bosun {bosun_rate:.0}/s, raw spawn {raw:.0}/s, ratio {:.2} (goal >= 0.80); bosun overhead per task {:.0} µs",
        bosun_rate / raw,
        (1.0 / bosun_rate - 1.0 / raw) * 1e6
    );
}

/// Runs per second of `HookProcess::run` on its own, one after another: the process side of
/// a task without the queue, the actors and the journal.
async fn runner_alone(dir: &std::path::Path, hook: &std::path::Path, tasks: usize) -> f64 {
    let runner = bosun::hooks::HookProcess {
        tmp_dir: dir.join("tmp"),
        keep_tmp_files: false,
        timeout: std::time::Duration::from_secs(60),
        working_dir: None,
    };
    let context = serde_json::json!([{"binding": "schedule", "type": "Schedule"}]);
    let values = serde_json::json!({"global": {}});
    let started = Instant::now();
    for _ in 0..tasks {
        let input = bosun::hooks::HookInput {
            name: "noop.sh",
            path: hook,
            binding_context: &context,
            values: Some(&values),
            config_values: Some(&values),
            env: Vec::new(),
            log_fields: Default::default(),
        };
        runner.run(&input).await.expect("hook run");
    }
    tasks as f64 / started.elapsed().as_secs_f64()
}
