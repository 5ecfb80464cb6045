//! Journal benchmark, for both storage backends (segment files, the default, and sled):
//! durable append throughput and p99 latency with 1, 8 and 64 concurrent appenders against
//! the raw limit of the same backend measured in the same run (segments: `write` +
//! `fdatasync` of the same bytes per group; sled: inserts + one flush per group) and
//! against sled used directly by as many writers (each inserting and flushing), replay
//! speed for a million events with and without a snapshot, and bytes on disk per event.
//! The appends run in five paired rounds (the journal, then both limits), and each ratio
//! printed is the median of the rounds' ratios.
//!
//! `cargo bench --bench journal`; `BENCH_EVENTS` (default 1,000,000) and `BENCH_APPENDS`
//! (default 40,000, over all rounds) scale it down; `BENCH_BACKENDS` (default `segments,sled`) picks.

/// bosun's allocator, as in the binary.
#[global_allocator]
static ALLOCATOR: bosun::memory::Allocator = bosun::memory::Allocator;

#[path = "support/env.rs"]
mod support_env;
use support_env::env;

#[path = "support/stats.rs"]
mod stats;
use stats::{joined, median};

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_addon::{Event, State};
use bosun_journal::{Backend, Journal};

#[path = "support/journal_events.rs"]
mod journal_events;
use journal_events::event;

/// Paired rounds per concurrency; the ratios printed are the medians of the rounds'.
const ROUNDS: usize = 5;

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v.get(((v.len() as f64 - 1.0) * p) as usize)
        .copied()
        .unwrap_or_default()
}

/// What one backend measured.
#[derive(Default)]
struct Figures {
    appends: Vec<(usize, f64, f64)>,
    open: Duration,
    replay: Duration,
    bytes_per_event: f64,
}

/// Raw limit for `per` groups of the payloads: the same bytes (with the framing the segment
/// backend adds) written and fdatasync'd per group, into a file sized ahead.
fn raw_segments(payloads: &[Vec<u8>], rounds: usize) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut file = std::fs::File::create(dir.path().join("raw.log")).expect("file");
    let mut group = Vec::new();
    for p in payloads {
        // frame header (16) + record header (16) + payload
        group.extend_from_slice(&[0u8; 32]);
        group.extend_from_slice(p);
    }
    // Room made ahead, as the journal makes it: an fdatasync that need not record a new
    // file size is cheaper, and the limit is the best the disk does.
    file.set_len((rounds * group.len()) as u64).expect("room");
    let started = Instant::now();
    for _ in 0..rounds {
        file.write_all(&group).expect("write");
        file.sync_data().expect("fdatasync");
    }
    (rounds * payloads.len()) as f64 / started.elapsed().as_secs_f64()
}

/// Raw sled: inserts and one flush per group.
fn raw_sled(payloads: &[Vec<u8>], rounds: usize) -> f64 {
    let raw_dir = tempfile::tempdir().expect("tempdir");
    let db = sled::Config::new()
        .path(raw_dir.path())
        .mode(sled::Mode::HighThroughput)
        .open()
        .expect("sled");
    let tree = db.open_tree("events").expect("tree");
    let started = Instant::now();
    let mut seq = 0u64;
    for _ in 0..rounds {
        for p in payloads {
            seq += 1;
            tree.insert(seq.to_be_bytes(), p.as_slice())
                .expect("insert");
        }
        db.flush().expect("flush");
    }
    (rounds * payloads.len()) as f64 / started.elapsed().as_secs_f64()
}

/// Raw sled as `n` writers use it: each its own thread, each event inserted and flushed
/// before the next (sled coalesces flushes that overlap). Events per second.
fn raw_sled_writers(payload: &[u8], n: usize, per: usize) -> f64 {
    let raw_dir = tempfile::tempdir().expect("tempdir");
    let db = sled::Config::new()
        .path(raw_dir.path())
        .mode(sled::Mode::HighThroughput)
        .open()
        .expect("sled");
    let tree = db.open_tree("events").expect("tree");
    let started = Instant::now();
    std::thread::scope(|scope| {
        for w in 0..n {
            let (db, tree) = (&db, &tree);
            scope.spawn(move || {
                for i in 0..per {
                    tree.insert(((w * per + i) as u64).to_be_bytes(), payload)
                        .expect("insert");
                    db.flush().expect("flush");
                }
            });
        }
    });
    (n * per) as f64 / started.elapsed().as_secs_f64()
}

fn bench_backend(
    backend: Backend,
    rt: &tokio::runtime::Runtime,
    appends: usize,
    events: u64,
) -> Figures {
    let mut figures = Figures::default();
    let raw_name = match backend {
        Backend::Segments => "raw write+fdatasync",
        Backend::Sled => "raw sled insert+flush",
    };
    println!(
        "== {backend:?}: durable appends ({appends} events) vs {raw_name} per group of the same size"
    );
    for concurrency in [1usize, 8, 64] {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal: Arc<Journal<Event>> =
            Arc::new(Journal::open_with(dir.path(), backend).expect("journal"));
        let per = (appends / concurrency / ROUNDS).max(1);
        let payloads: Vec<Vec<u8>> = (0..concurrency as u64)
            .map(|i| serde_json::to_vec(&event(i)).unwrap_or_default())
            .collect();
        // Paired rounds: the journal, then both limits, again and again, so that each
        // ratio compares measurements a moment apart (a VM's fdatasync drifts by tens of
        // percent from minute to minute).
        let (mut journal_rates, mut raw_ratios, mut writers_ratios) =
            (Vec::new(), Vec::new(), Vec::new());
        let mut latencies = Vec::new();
        for round in 0..ROUNDS {
            let started = Instant::now();
            latencies.extend(rt.block_on(async {
                let mut tasks = Vec::new();
                for c in 0..concurrency {
                    let j = journal.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut lat = Vec::with_capacity(per);
                        for i in 0..per {
                            let t = Instant::now();
                            j.append(&event(((round * concurrency + c) * per + i) as u64))
                                .await
                                .expect("append");
                            lat.push(t.elapsed());
                        }
                        lat
                    }));
                }
                let mut all = Vec::new();
                for t in tasks {
                    all.extend(t.await.expect("task"));
                }
                all
            }));
            let journal_rate = (per * concurrency) as f64 / started.elapsed().as_secs_f64();
            let raw_rate = match backend {
                Backend::Segments => raw_segments(&payloads, per),
                Backend::Sled => raw_sled(&payloads, per),
            };
            // The limit the goal was first set against: sled used directly by as many
            // writers.
            let writers_rate = raw_sled_writers(
                payloads.first().map(Vec::as_slice).unwrap_or_default(),
                concurrency,
                per.min(2_000),
            );
            journal_rates.push(journal_rate);
            raw_ratios.push(journal_rate / raw_rate);
            writers_ratios.push(journal_rate / writers_rate);
        }
        let journal_rate = median(&journal_rates);
        let (raw_ratio, writers_ratio) = (median(&raw_ratios), median(&writers_ratios));
        println!(
            "appenders {concurrency:>3}: journal {journal_rate:>9.0} events/s (median of {ROUNDS} rounds); ratio to {raw_name} {raw_ratio:.2} [{}] (goal >= 0.90); ratio to raw sled insert+flush by {concurrency} writers {writers_ratio:.2} [{}] (goal >= 0.80); append p50 {:?} p99 {:?}",
            joined(&raw_ratios, 2),
            joined(&writers_ratios, 2),
            percentile(latencies.clone(), 0.5),
            percentile(latencies, 0.99)
        );
        figures.appends.push((concurrency, journal_rate, raw_ratio));
    }

    println!("== {backend:?}: replay of {events} events");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut serialized = 0usize;
    {
        let journal: Journal<Event> = Journal::open_with(dir.path(), backend).expect("journal");
        rt.block_on(async {
            let mut batch = Vec::with_capacity(10_000);
            for i in 0..events {
                let e = event(i);
                serialized += serde_json::to_vec(&e).map(|v| v.len()).unwrap_or(0);
                batch.push(e);
                if batch.len() == 10_000 {
                    journal.append_batch(&batch).await.expect("append");
                    batch.clear();
                }
            }
            if !batch.is_empty() {
                journal.append_batch(&batch).await.expect("append");
            }
        });
    }
    // What a start does: open (the segment backend scans and checks every frame) and replay.
    let started = Instant::now();
    let journal: Journal<Event> = Journal::open_with(dir.path(), backend).expect("journal");
    figures.open = started.elapsed();
    println!("open (index + tail check): {:?}", figures.open);
    let started = Instant::now();
    let scanned = journal.stats().map(|s| s.events).unwrap_or(0);
    println!(
        "scan (storage iteration + checksums): {scanned} records in {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let decoded = journal.read_from(0).filter(|r| r.is_ok()).count();
    println!("decode only: {decoded} events in {:?}", started.elapsed());
    let started = Instant::now();
    let (state, last) = journal
        .replay::<State, _>(None, false, |s, r| s.apply(&r.event))
        .expect("replay");
    let full = started.elapsed();
    figures.replay = full;
    println!(
        "full replay: {last} events in {full:?} = {:.0} events/s (goal: 1,000,000 in < 2 s); state folded {} events",
        last as f64 / full.as_secs_f64(),
        state.events
    );
    let snap_at = last.saturating_sub(1_000);
    let (snap_state, _) = journal
        .replay::<State, _>(Some(snap_at), false, |s, r| s.apply(&r.event))
        .expect("replay");
    journal
        .save_snapshot(snap_at, &snap_state)
        .expect("snapshot");
    let started = Instant::now();
    let (with_snap, _) = journal
        .replay::<State, _>(None, true, |s, r| s.apply(&r.event))
        .expect("replay");
    let snap_time = started.elapsed();
    assert_eq!(with_snap, state, "snapshot + suffix equals full replay");
    println!(
        "replay from a snapshot at {snap_at} (+1,000 events): {snap_time:?} ({:.1}x faster)",
        full.as_secs_f64() / snap_time.as_secs_f64()
    );
    let stats = journal.stats().expect("stats");
    figures.bytes_per_event = stats.disk_bytes as f64 / events as f64;
    println!(
        "bytes per event: {:.0} on disk, {:.0} in records, {:.0} serialized (on-disk/serialized {:.2})",
        figures.bytes_per_event,
        stats.record_bytes as f64 / events as f64,
        serialized as f64 / events as f64,
        stats.disk_bytes as f64 / serialized as f64
    );
    figures
}

fn main() {
    let appends = env("BENCH_APPENDS", 40_000);
    let events = env("BENCH_EVENTS", 1_000_000) as u64;
    let backends: Vec<Backend> = std::env::var("BENCH_BACKENDS")
        .unwrap_or_else(|_| "segments,sled".into())
        .split(',')
        .filter_map(|b| b.parse().ok())
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let results: Vec<(Backend, Figures)> = backends
        .iter()
        .map(|b| (*b, bench_backend(*b, &rt, appends, events)))
        .collect();
    if let [(_, seg), (_, sled)] = results.as_slice() {
        println!("== segments vs sled");
        for ((c, s, sr), (_, l, lr)) in seg.appends.iter().zip(&sled.appends) {
            println!(
                "appenders {c:>3}: segments {s:>9.0} events/s ({sr:.2} of raw), sled {l:>9.0} events/s ({lr:.2} of raw): segments/sled {:.2}",
                s / l
            );
        }
        println!(
            "open: segments {:?}, sled {:?}; full replay: segments {:?}, sled {:?} (sled/segments {:.2})",
            seg.open,
            sled.open,
            seg.replay,
            sled.replay,
            sled.replay.as_secs_f64() / seg.replay.as_secs_f64()
        );
        println!(
            "bytes on disk per event: segments {:.0}, sled {:.0} (sled/segments {:.2})",
            seg.bytes_per_event,
            sled.bytes_per_event,
            sled.bytes_per_event / seg.bytes_per_event
        );
    }
}
