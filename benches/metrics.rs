//! Metrics overhead: no-op hook throughput through one queue (as `benches/engine.rs`) with
//! the Prometheus recorder switched off and on, alternating, a fresh engine each round;
//! and what one hook run's metrics and one actor message's mailbox tracking cost alone.
//!
//! A no-op task costs a process spawn (milliseconds, with a spread of several percent on a
//! busy machine), so the rounds are paired (off and on back to back, the order alternating)
//! and the median of the pairs' ratios is reported.
//!
//! `cargo bench --bench metrics`; `BENCH_TASKS` (default 500 per round), `BENCH_ROUNDS`
//! (default 12 pairs) scale it; `BENCH_VERBOSE` prints every round;
//! `QUEUE_ACTIONS_METRICS=no` leaves the queue operations untimed, as in `bosun run`.

/// bosun's allocator, as in the binary.
#[global_allocator]
static ALLOCATOR: bosun::memory::Allocator = bosun::memory::Allocator;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bosun_addon::mailbox::MailboxHandle;
use bosun_addon::ports::ResourceUsage;
use bosun_addon::telemetry::{HookRunLabels, RunOutcome};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

#[path = "support/noop_engine.rs"]
mod noop_engine;
use noop_engine::round;

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

#[path = "support/stats.rs"]
mod stats;
use stats::median;

/// The operator's recorder, or nothing while switched off (metrics registered then stay
/// no-ops, so each round starts a fresh engine).
struct Switch<R> {
    on: Arc<AtomicBool>,
    inner: R,
}

impl<R: Recorder> Recorder for Switch<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description)
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description)
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description)
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_counter(key, metadata)
        } else {
            Counter::noop()
        }
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_gauge(key, metadata)
        } else {
            Gauge::noop()
        }
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_histogram(key, metadata)
        } else {
            Histogram::noop()
        }
    }
}

fn main() {
    let tasks = env("BENCH_TASKS", 500);
    let rounds = env("BENCH_ROUNDS", 12);
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = dir.path().join("noop.sh");
    std::fs::write(&hook, "#!/bin/sh\nexit 0\n").expect("hook");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    let on = Arc::new(AtomicBool::new(false));
    let (recorder, handle) = bosun::prometheus::recorder(bosun::prometheus::DEFAULT_PREFIX);
    metrics::set_global_recorder(Switch {
        on: on.clone(),
        inner: recorder,
    })
    .expect("recorder");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (mut off_rates, mut on_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        // Alternate which setting goes first, so drift favours neither.
        let order = if r % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for setting in order {
            on.store(setting, Ordering::SeqCst);
            let round_dir = dir.path().join(format!("round-{r}-{setting}"));
            let rate = rt.block_on(round(&round_dir, &round_dir.join("tmp"), &hook, tasks));
            if setting {
                on_rates.push(rate);
            } else {
                off_rates.push(rate);
            }
        }
        ratios.push(on_rates[r] / off_rates[r]);
        if std::env::var_os("BENCH_VERBOSE").is_some() {
            println!(
                "round {r}: off {:.0}/s, on {:.0}/s",
                off_rates[r], on_rates[r]
            );
        }
    }
    let rendered = handle.render();
    let success = rendered
        .lines()
        .filter(|l| l.starts_with("addon_operator_global_hook_run_success_total{"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum::<f64>();
    assert!(
        success >= (tasks * rounds) as f64,
        "the recorder saw the runs: {rendered}"
    );
    let (off, with, ratio) = (median(&off_rates), median(&on_rates), median(&ratios));

    // The parts alone: one hook run's metrics, one message's mailbox tracking.
    on.store(true, Ordering::SeqCst);
    let labels = HookRunLabels {
        module: None,
        hook: "noop-a.sh".into(),
        binding: "schedule".into(),
        queue: "bench".into(),
        activation: "Schedule".into(),
    };
    let usage = ResourceUsage {
        user_cpu: Duration::from_millis(1),
        sys_cpu: Duration::from_millis(1),
        max_rss_bytes: 4 << 20,
    };
    let n = 100_000;
    let started = Instant::now();
    for _ in 0..n {
        labels.record(RunOutcome::Success, Duration::from_millis(2), Some(&usage));
    }
    let per_run = started.elapsed().as_secs_f64() / f64::from(n) * 1e6;
    let mailbox = MailboxHandle::default();
    let started = Instant::now();
    for _ in 0..n {
        let seq = mailbox.sent("Enqueue GlobalHookRun".into());
        mailbox.begin(seq);
        mailbox.end();
    }
    let per_message = started.elapsed().as_secs_f64() / f64::from(n) * 1e6;
    println!(
        "no-op hook tasks through one queue ({rounds} paired rounds of {tasks}, medians): metrics off {off:.0}/s, on {with:.0}/s; paired ratio on/off {ratio:.3} (overhead {:.1}%, goal < 5%)",
        (1.0 - ratio) * 100.0
    );
    println!(
        "alone: one hook run's metrics {per_run:.2} µs, one message's mailbox tracking {per_message:.2} µs, against {:.0} µs per no-op task ({:.2}% for the hook run's metrics)",
        1e6 / with,
        per_run * with / 1e4
    );
}
