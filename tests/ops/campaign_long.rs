//! The long-run campaign (`docs/reliability.md`): binding events at a steady rate for a
//! long time, a global hook bound to them. Every 10 s it samples bosun's resident memory
//! and the journal's size on disk; every event's latency is measured on the test's own
//! clock, from just before its write to when the test sees the hook's line for it (the
//! hook's log is read every 2 ms). At the end: the memory slope, the journal's size over
//! time, and p50/p99 latency per window (drift). The full run asserts that memory does not
//! grow and latency does not drift (bounds below); it is ignored by the test command:
//!
//! ```text
//! CAMPAIGN_MINUTES=60 CAMPAIGN_EVENTS_PER_MINUTE=10000 \
//!   cargo test --release --test ops campaign_long -- --ignored --nocapture
//! ```
//!
//! The small variant that is not ignored keeps the harness working: every event reaches
//! the hook; it is too short for a slope or a drift.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{Operator, Sandbox, workdir};
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";
/// ConfigMaps the events go to, round robin.
const OBJECTS: usize = 100;
/// How often memory and disk are sampled.
const SAMPLE: Duration = Duration::from_secs(10);

fn env_f64(var: &str, default: f64) -> f64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The global hook `follow.sh`: bound to the ConfigMaps labelled `campaign=long`, it logs,
/// for each Event it is given, the object's `data.seq`.
fn layout(work: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(work.join("modules")).expect("modules");
    std::fs::create_dir_all(work.join("out")).expect("out");
    let hooks = common::global_hooks_dir(work);
    common::config_hook(
        &hooks.join("follow.sh"),
        "configVersion: v1\nkubernetes:\n- name: long\n  kind: ConfigMap\n  executeHookOnSynchronization: false\n  labelSelector: {matchLabels: {campaign: long}}",
        r#"jq -r '.[] | select(.type == "Event") | "\(.object.data.seq // "-")"' "$BINDING_CONTEXT_PATH" >> "$OUT_DIR/events.log""#,
    );
    hooks
}

fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        total += if meta.is_dir() {
            dir_size(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// The least-squares slope of `points` (x, y).
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let num: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    if den == 0.0 { 0.0 } else { num / den }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A sample: seconds since the start, RSS in KB, journal bytes.
type Sample = (f64, u64, u64);

/// What a long run must show besides every event reaching the hook.
struct Bounds {
    /// Resident memory after the warm-up grows by at most this much a minute (least
    /// squares over the samples).
    rss_slope_kb_per_min: f64,
    /// The last window's p99 latency is at most this many times the first's.
    p99_drift: f64,
}

/// Reads the hook's log every 2 ms from a thread of its own and notes, on this process's
/// clock, when each `seq` was first seen.
fn follow(
    log: std::path::PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<HashMap<u64, Instant>> {
    std::thread::spawn(move || {
        use std::io::{Read, Seek, SeekFrom};
        let mut seen = HashMap::new();
        let (mut offset, mut partial) = (0u64, String::new());
        loop {
            let stopping = stop.load(Ordering::SeqCst);
            if let Ok(mut f) = std::fs::File::open(&log)
                && f.seek(SeekFrom::Start(offset)).is_ok()
            {
                let mut text = String::new();
                if let Ok(n) = f.read_to_string(&mut text) {
                    offset += n as u64;
                    let at = Instant::now();
                    partial.push_str(&text);
                    while let Some(end) = partial.find('\n') {
                        let line: String = partial.drain(..=end).collect();
                        if let Ok(seq) = line.trim().parse::<u64>() {
                            seen.entry(seq).or_insert(at);
                        }
                    }
                }
            }
            if stopping {
                return seen;
            }
            std::thread::park_timeout(Duration::from_millis(2));
        }
    })
}

/// Runs the campaign for `minutes` at `per_minute` events; prints the figures, and asserts
/// that every event reached the hook and, with `bounds`, that memory and latency held.
fn long_run(minutes: f64, per_minute: f64, bounds: Option<Bounds>) {
    let sb = Sandbox::start();
    let work = workdir();
    let w = work.path();
    let hooks = layout(w);
    let op = Operator::start_with(&sb, &hooks, w, &[("LOG_LEVEL", "info")]);
    let journal = w.join("journal");
    op.wait("the first converge", Duration::from_secs(60), || {
        common::try_journal_state(&journal).is_some_and(|(s, _)| s.converge.completed >= 1)
    });
    for i in 0..OBJECTS {
        let (code, body) = sb.post(
            CM,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("long-{i}"), "labels": {"campaign": "long"}},
                    "data": {"seq": "-"}}),
        );
        assert_eq!(code, 201, "{body}");
    }
    let log = w.join("out/events.log");
    let pid = op.pid().expect("bosun runs");
    let stop_following = Arc::new(AtomicBool::new(false));
    let follower = follow(log.clone(), stop_following.clone());

    // The sampler.
    let stop = Arc::new(AtomicBool::new(false));
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let started = Instant::now();
    let sampler = {
        let (stop, samples, journal) = (stop.clone(), samples.clone(), journal.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Some(rss) = rss_kb(pid) {
                    samples.lock().unwrap_or_else(|p| p.into_inner()).push((
                        started.elapsed().as_secs_f64(),
                        rss,
                        dir_size(&journal),
                    ));
                }
                let until = Instant::now() + SAMPLE;
                while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                    std::thread::park_timeout(Duration::from_millis(200));
                }
            }
        })
    };

    // The writer: one event every 60/per_minute s, paced against the clock.
    let total = (minutes * per_minute).round() as u64;
    let interval = Duration::from_secs_f64(60.0 / per_minute);
    let mut sent: Vec<Instant> = Vec::with_capacity(total as usize);
    let mut refused = 0u64;
    for seq in 0..total {
        let due = started + interval.mul_f64(seq as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let name = format!("long-{}", seq as usize % OBJECTS);
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": name, "labels": {"campaign": "long"}},
                          "data": {"seq": seq.to_string()}});
        sent.push(Instant::now());
        let (code, _) = sb.put(&format!("{CM}/{name}"), &body);
        if code != 200 {
            refused += 1;
        }
    }
    let wrote_for = started.elapsed();
    // Every event reaches the hook.
    let logged = |log: &Path| -> usize {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let seqs: std::collections::HashSet<&str> = text.lines().filter(|l| *l != "-").collect();
        seqs.len()
    };
    op.wait("every event at the hook", Duration::from_secs(300), || {
        logged(&log) as u64 + refused >= total
    });
    stop.store(true, Ordering::SeqCst);
    sampler.thread().unpark();
    let _ = sampler.join();
    stop_following.store(true, Ordering::SeqCst);
    follower.thread().unpark();
    let seen = follower.join().expect("the log follower");
    assert_eq!(refused, 0, "the API server refused {refused} writes");
    let missing: Vec<u64> = (0..total).filter(|s| !seen.contains_key(s)).collect();
    assert!(
        missing.is_empty(),
        "{} events never reached the hook, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );

    // Latency by window.
    let windows = 6usize;
    let per_window = (total as usize).div_ceil(windows).max(1);
    println!(
        "long run: {total} events in {:.0} s ({:.0}/min) to {OBJECTS} ConfigMaps, one global hook bound to them",
        wrote_for.as_secs_f64(),
        total as f64 / wrote_for.as_secs_f64() * 60.0
    );
    println!("window  events  p50 ms  p99 ms  (write → the hook's line seen by the test)");
    let mut p99s = Vec::new();
    for (k, chunk) in (0..total)
        .collect::<Vec<_>>()
        .chunks(per_window)
        .enumerate()
    {
        let mut lat: Vec<f64> = chunk
            .iter()
            .map(|&s| {
                seen[&s]
                    .saturating_duration_since(sent[s as usize])
                    .as_secs_f64()
                    * 1e3
            })
            .collect();
        lat.sort_by(f64::total_cmp);
        let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
        p99s.push(p99);
        println!("{k:>6}  {:>6}  {p50:>6.1}  {p99:>6.1}", lat.len());
    }
    let samples = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    // Memory after the first tenth (warm-up: caches and the journal's first segment).
    let warm: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(t, _, _)| *t >= wrote_for.as_secs_f64() / 10.0)
        .map(|(t, rss, _)| (*t / 60.0, *rss as f64))
        .collect();
    let rss_slope = slope(&warm);
    let (first_rss, last_rss) = (
        samples.first().map_or(0, |s| s.1),
        samples.last().map_or(0, |s| s.1),
    );
    let max_journal = samples.iter().map(|s| s.2).max().unwrap_or(0);
    let half = samples.len() / 2;
    let max_first_half = samples[..half].iter().map(|s| s.2).max().unwrap_or(0);
    let max_second_half = samples[half..].iter().map(|s| s.2).max().unwrap_or(0);
    println!(
        "memory: RSS {first_rss} KB → {last_rss} KB over {} samples; slope after warm-up {rss_slope:+.1} KB/min",
        samples.len()
    );
    println!(
        "journal on disk: max {:.1} MB (first half {:.1} MB, second half {:.1} MB), {:.1} MB at the end",
        max_journal as f64 / 1e6,
        max_first_half as f64 / 1e6,
        max_second_half as f64 / 1e6,
        samples.last().map_or(0, |s| s.2) as f64 / 1e6
    );
    let (first_p99, last_p99) = (
        p99s.first().copied().unwrap_or(0.0),
        p99s.last().copied().unwrap_or(0.0),
    );
    let drift = last_p99 / first_p99.max(0.001);
    println!("p99 drift: first window {first_p99:.1} ms, last {last_p99:.1} ms ({drift:.2}×)");
    drop(op);
    if let Some(bounds) = bounds {
        // Enough samples for a slope: the bounds are never passed untried.
        assert!(
            warm.len() >= 6,
            "{} memory samples after the warm-up: too few for a slope (run at least 2 minutes)",
            warm.len()
        );
        assert!(
            rss_slope <= bounds.rss_slope_kb_per_min,
            "memory grows {rss_slope:+.1} KB/min after the warm-up (at most {:+.1})",
            bounds.rss_slope_kb_per_min
        );
        assert!(
            drift <= bounds.p99_drift,
            "p99 drifted from {first_p99:.1} ms to {last_p99:.1} ms ({drift:.2}×, at most {:.2}×)",
            bounds.p99_drift
        );
    }
}

#[test]
#[ignore = "a campaign of an hour: CAMPAIGN_MINUTES=60 cargo test --release --test ops campaign_long -- --ignored --nocapture"]
fn long_run_campaign() {
    long_run(
        env_f64("CAMPAIGN_MINUTES", 60.0),
        env_f64("CAMPAIGN_EVENTS_PER_MINUTE", 10_000.0),
        Some(Bounds {
            // An hour at 10,000 events/min measured +1.3 to +1.8 KB/min
            // (docs/reliability.md); a leak of a few bytes an event is far above.
            rss_slope_kb_per_min: env_f64("CAMPAIGN_MAX_RSS_SLOPE_KB_PER_MIN", 64.0),
            p99_drift: env_f64("CAMPAIGN_MAX_P99_DRIFT", 2.0),
        }),
    );
}

/// Every event of 15 s at 1,200 events/min reaches the hook (too short for a slope or a
/// drift: those are the full campaign's).
#[test]
fn long_run_smoke() {
    long_run(0.25, 1_200.0, None);
}
