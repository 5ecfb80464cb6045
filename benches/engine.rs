//! Engine benchmark: no-op hook throughput through one queue (every task journaled, the
//! hook run with its temp files) against spawning the same executable with the same
//! files from a tight loop, measured in the same run; and bosun's overhead per task.
//!
//! The machine's speed drifts (a VM's spawns vary by ±20% from minute to minute), so the
//! three are measured in paired rounds — raw, runner, engine, again and again — and the
//! medians of the per-round ratios are reported.
//!
//! `cargo bench --bench engine`; `BENCH_TASKS` (default 2,000) and `BENCH_ROUNDS` (default
//! 5) scale it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[path = "support/noop_engine.rs"]
mod noop_engine;
use noop_engine::round;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
        .max(1)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn main() {
    let rounds = env("BENCH_ROUNDS", 5);
    let tasks = env("BENCH_TASKS", 2_000) / rounds;
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = dir.path().join("noop.sh");
    std::fs::write(&hook, "#!/bin/sh\nexit 0\n").expect("hook");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let files: Vec<(&str, PathBuf)> = [
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (mut raws, mut runners, mut engines) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let raw = raw_spawns(&hook, &files, tasks);
        let runner = rt.block_on(runner_alone(
            &dir.path().join(format!("runner{r}")),
            &hook,
            tasks,
        ));
        let engine = rt.block_on(round(&dir.path().join(format!("engine{r}")), &hook, tasks));
        raws.push(raw);
        runners.push((raw, runner));
        engines.push((raw, engine));
    }
    let over = |pairs: &[(f64, f64)]| {
        median(
            pairs
                .iter()
                .map(|(raw, x)| (1.0 / x - 1.0 / raw) * 1e6)
                .collect(),
        )
    };
    let ratio = |pairs: &[(f64, f64)]| median(pairs.iter().map(|(raw, x)| x / raw).collect());
    println!(
        "{rounds} paired rounds of {tasks} tasks, medians; raw spawn {:.0}/s",
        median(raws)
    );
    println!(
        "the hook runner alone (temp files, process, output, rusage): ratio {:.2}, {:.0} µs per run over raw spawn",
        ratio(&runners),
        over(&runners)
    );
    println!(
        "no-op hook tasks through one queue: ratio {:.2} (goal >= 0.9, overhead <= 150 µs) [rounds: {}]; bosun overhead per task {:.0} µs",
        ratio(&engines),
        engines
            .iter()
            .map(|(raw, e)| format!("{:.2}", e / raw))
            .collect::<Vec<_>>()
            .join(" "),
        over(&engines)
    );
}

/// Raw spawns per second: the hook with the same temp files and environment, one after
/// another, from a plain loop.
fn raw_spawns(hook: &Path, files: &[(&str, PathBuf)], tasks: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..tasks {
        for (_, p) in files {
            std::fs::write(p, "{}").expect("temp file");
        }
        let status = Command::new(hook)
            .envs(files.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .status()
            .expect("spawn");
        assert!(status.success());
        for (_, p) in files {
            let _ = std::fs::read_to_string(p);
            let _ = std::fs::remove_file(p);
        }
    }
    tasks as f64 / started.elapsed().as_secs_f64()
}

/// Runs per second of `HookProcess::run` on its own, one after another: the process side of
/// a task without the queue, the actors and the journal.
async fn runner_alone(dir: &Path, hook: &Path, tasks: usize) -> f64 {
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
