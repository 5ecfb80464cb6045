//! Engine benchmark: no-op hook throughput through one queue (every task journaled, the
//! hook run with its temp files) against spawning the same executable with the same
//! files from a tight loop, measured in the same run; and bosun's overhead per task.
//!
//! The machine's speed drifts (a VM's spawns vary by ±20% from minute to minute), so the
//! three are measured in paired rounds, again and again, each round in another order (the
//! one measured last would otherwise always run on the filesystem the others just churned),
//! and the medians of the per-round ratios are reported. A round ends when its temp files
//! are gone, so removals left to a background thread count.
//!
//! The three write their temp files on one filesystem: a fresh folder in `BENCH_TMP`, by
//! default `/dev/shm` (tmpfs). On an ext4 without a journal, as this VM's disk is, every
//! create scans the inodes deleted in the last minute (`recently_deleted`), thousands here,
//! and that kernel cost, paid by all three, swamps what is being measured;
//! `BENCH_TMP=/var/tmp cargo bench --bench engine` shows it.
//!
//! The journal is on disk, in a temporary folder, as in production; `BENCH_JOURNAL_DIR`
//! puts it elsewhere: `BENCH_JOURNAL_DIR=/dev/shm` (fsync is free on tmpfs) shows what the
//! one `fdatasync` per task costs on this machine's disk (docs/actors.md).
//!
//! `cargo bench --bench engine`; `BENCH_TASKS` (default 16,000) and `BENCH_ROUNDS` (default
//! 48: single rounds of this VM range from 0.6 to 1.2 — a spread of ±0.12 that shorter
//! rounds do not widen, measured down to 83 tasks — so the median of six moved by ±0.06
//! from run to run, of twelve by ±0.04, of 24 by ±0.03) scale it, `BENCH_WORKERS` (default
//! 2) sizes the runtime (one worker measured no different on this machine; `0`: a
//! current-thread runtime, see docs/actors.md). `BENCH_PERF_ENGINE=FILE` records one more
//! engine round with `perf record` into FILE.

/// bosun's allocator, as in the binary.
#[global_allocator]
static ALLOCATOR: bosun::memory::Allocator = bosun::memory::Allocator;

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

#[path = "support/stats.rs"]
mod stats;
use stats::median;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[path = "support/cpu.rs"]
mod cpu;
use cpu::process_cpu;

#[path = "support/perf.rs"]
mod perf;

#[path = "support/noop_engine.rs"]
mod noop_engine;
use noop_engine::round;

fn main() {
    let rounds = env("BENCH_ROUNDS", 48).max(1);
    let tasks = env("BENCH_TASKS", 16_000).max(1) / rounds;
    let dir = tempfile::tempdir().expect("tempdir");
    let journals = match std::env::var_os("BENCH_JOURNAL_DIR") {
        Some(base) => tempfile::tempdir_in(base).expect("BENCH_JOURNAL_DIR: a writable folder"),
        None => tempfile::tempdir().expect("tempdir"),
    };
    let tmp_base = std::env::var_os("BENCH_TMP")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"));
    let tmp = tempfile::tempdir_in(&tmp_base)
        .or_else(|_| tempfile::tempdir())
        .expect("temp folder");
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
    .map(|v| (v, tmp.path().join("raw").join(v.to_lowercase())))
    .collect();
    let rt = if std::env::var("BENCH_WORKERS").as_deref() == Ok("0") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(env("BENCH_WORKERS", 2).max(1))
            .enable_all()
            .build()
            .expect("runtime")
    };
    let (mut raws, mut runners, mut engines) = (Vec::new(), Vec::new(), Vec::new());
    // This process's own CPU (every thread, the hooks not included) per phase.
    let mut cpu = [std::time::Duration::ZERO; 3];
    std::fs::create_dir_all(tmp.path().join("raw")).expect("raw folder");
    for r in 0..rounds {
        let (mut raw, mut runner, mut engine) = (0.0, 0.0, 0.0);
        for step in 0..3 {
            let before = process_cpu();
            let phase = (r + step) % 3;
            match phase {
                0 => raw = raw_spawns(&hook, &files, tasks),
                1 => {
                    // On a worker, as the engine's hook runs are (a future driven by
                    // `block_on` is woken through one more thread at every exit).
                    let (dir, hook) = (tmp.path().join(format!("runner{r}")), hook.clone());
                    runner = rt
                        .block_on(rt.spawn(async move { runner_alone(&dir, &hook, tasks).await }))
                        .expect("runner round")
                }
                _ => {
                    engine = rt.block_on(round(
                        &journals.path().join(format!("engine{r}")),
                        &tmp.path().join(format!("engine{r}")),
                        &hook,
                        tasks,
                    ))
                }
            }
            cpu[phase] += process_cpu().saturating_sub(before);
        }
        raws.push(raw);
        runners.push((raw, runner));
        engines.push((raw, engine));
    }
    // `BENCH_PERF_ENGINE=FILE`: one more engine round, of 2,000 tasks, under `perf record`
    // of this process (the hooks' processes not recorded), after the measured ones.
    if std::env::var_os("BENCH_PERF_ENGINE").is_some() {
        let profile = perf::perf_start("BENCH_PERF_ENGINE", false);
        rt.block_on(round(
            &journals.path().join("engine-profiled"),
            &tmp.path().join("engine-profiled"),
            &hook,
            2_000,
        ));
        perf::perf_stop(profile);
    }
    let over = |pairs: &[(f64, f64)]| {
        median(
            &pairs
                .iter()
                .map(|(raw, x)| (1.0 / x - 1.0 / raw) * 1e6)
                .collect::<Vec<_>>(),
        )
    };
    let ratio =
        |pairs: &[(f64, f64)]| median(&pairs.iter().map(|(raw, x)| x / raw).collect::<Vec<_>>());
    println!(
        "{rounds} paired rounds of {tasks} tasks, temp files in {}, medians; raw spawn {:.0}/s",
        tmp_base.display(),
        median(&raws)
    );
    println!(
        "the hook runner alone (temp files, process, output, rusage): ratio {:.2}, {:.0} µs per run over raw spawn",
        ratio(&runners),
        over(&runners)
    );
    println!(
        "no-op hook tasks through one queue: ratio {:.2} (goal >= 0.95, overhead <= 60 µs) [rounds: {}]; bosun overhead per task {:.0} µs",
        ratio(&engines),
        engines
            .iter()
            .map(|(raw, e)| format!("{:.2}", e / raw))
            .collect::<Vec<_>>()
            .join(" "),
        over(&engines)
    );
    let per_task = |c: std::time::Duration| c.as_secs_f64() / (rounds * tasks) as f64 * 1e6;
    println!(
        "bosun's own CPU per task (every thread of this process, the hooks not counted): raw loop {:.0} µs, runner alone {:.0} µs, engine {:.0} µs",
        per_task(cpu[0]),
        per_task(cpu[1]),
        per_task(cpu[2])
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
async fn runner_alone(tmp: &Path, hook: &Path, tasks: usize) -> f64 {
    let runner = bosun::hooks::HookProcess {
        tmp_dir: tmp.to_path_buf(),
        keep_tmp_files: false,
        timeout: std::time::Duration::from_secs(60),
        working_dir: None,
        logging: Default::default(),
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
    let ran = started.elapsed();
    let took = noop_engine::temp_files_gone(tmp, started)
        .await
        .unwrap_or(ran);
    tasks as f64 / took.as_secs_f64()
}
