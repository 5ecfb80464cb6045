//! Crash safety with real processes and real files: `kill -9` during appends (both
//! backends), torn tails, mid-log corruption and bit flips in sled's files.
//!
//! Child roles run in a re-executed copy of this test binary, selected by environment
//! variables, so the crash is a real process death.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_journal::{Backend, Journal, JournalError, Versioned};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Ev(String);

impl Versioned for Ev {
    const VERSION: u32 = 1;
    type Error = serde_json::Error;
    fn decode(_version: u32, raw: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(raw)
    }
}

/// Deterministic pseudo-random numbers (xorshift), seeded per round.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn child(test: &str, envs: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    cmd
}

/// Child: appends forever from 8 concurrent tasks, printing each acknowledged record.
fn appender(dir: &str, round: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let journal: Arc<Journal<Ev>> = Arc::new(Journal::open(Path::new(dir)).expect("open"));
        let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
        let mut tasks = Vec::new();
        for t in 0..8 {
            let (journal, out, round) = (journal.clone(), out.clone(), round.to_string());
            tasks.push(tokio::spawn(async move {
                for i in 0.. {
                    let value = format!("{round}-{t}-{i}");
                    {
                        let mut o = out.lock().expect("stdout");
                        let _ = writeln!(o, "try {value}");
                        let _ = o.flush();
                    }
                    let seq = journal.append(&Ev(value.clone())).await.expect("append");
                    let mut o = out.lock().expect("stdout");
                    let _ = writeln!(o, "ack {seq} {value}");
                    let _ = o.flush();
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}

#[test]
fn acknowledged_events_survive_kill_9() {
    kill_9_rounds("acknowledged_events_survive_kill_9", "segments");
}

#[test]
fn acknowledged_events_survive_kill_9_on_sled() {
    kill_9_rounds("acknowledged_events_survive_kill_9_on_sled", "sled");
}

fn kill_9_rounds(test: &str, backend: &str) {
    if let (Ok(dir), Ok(round)) = (
        std::env::var("CRASH_CHILD_DIR"),
        std::env::var("CRASH_CHILD_ROUND"),
    ) {
        appender(&dir, &round);
        return;
    }
    let rounds: u64 = std::env::var("CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut tried: std::collections::HashSet<String> = Default::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..rounds {
        let mut proc = child(
            test,
            &[
                ("CRASH_CHILD_DIR", dir.path().display().to_string()),
                ("CRASH_CHILD_ROUND", round.to_string()),
                ("BOSUN_JOURNAL_BACKEND", backend.to_string()),
            ],
        )
        .spawn()
        .expect("spawn child");
        let stdout = proc.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Kill after a random number of acknowledgements (1–40).
        let wanted = 1 + rng.below(40);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = 0;
        let mut lines = Vec::new();
        while seen < wanted {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("round {round}: child acknowledged nothing in time"));
            seen += u64::from(line.starts_with("ack "));
            lines.push(line);
        }
        proc.kill().expect("kill -9");
        let _ = proc.wait();
        let _ = reader.join();
        lines.extend(rx.try_iter());
        for line in lines {
            // The test harness may print its own prefix on the child's first line.
            let Some(start) = ["try ", "ack "].iter().filter_map(|p| line.find(p)).min() else {
                continue;
            };
            let mut parts = line[start..].splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("try"), Some(v), None) => {
                    tried.insert(v.to_string());
                }
                (Some("ack"), Some(seq), Some(v)) => {
                    let seq: u64 = seq.parse().expect("seq");
                    assert!(
                        acked.insert(seq, v.to_string()).is_none(),
                        "seq {seq} acknowledged twice"
                    );
                }
                _ => {}
            }
        }
        // Reopen: every acknowledged event is there, in order, and nothing untried.
        let journal: Journal<Ev> = Journal::open(dir.path()).expect("reopen after kill -9");
        let stored: Vec<(u64, String)> = journal
            .read_from(0)
            .map(|r| r.map(|r| (r.seq, r.event.0)).expect("record"))
            .collect();
        for (i, (seq, _)) in stored.iter().enumerate() {
            assert_eq!(
                *seq,
                i as u64 + 1,
                "round {round}: sequence numbers are gapless"
            );
        }
        for (seq, value) in &acked {
            let found = stored.get((*seq - 1) as usize).map(|(_, v)| v);
            assert_eq!(
                found,
                Some(value),
                "round {round}: acknowledged record {seq} lost or changed"
            );
        }
        for (_, value) in &stored {
            assert!(
                tried.contains(value),
                "round {round}: journal holds {value:?}, which was never appended"
            );
        }
        journal.close();
    }
    assert_eq!(
        Backend::found_in(dir.path()),
        backend.parse().ok(),
        "the journal was written with the backend asked for"
    );
    assert!(
        acked.len() as u64 >= rounds,
        "every round acknowledged something"
    );
}

fn fill(dir: &Path, n: u64) {
    fill_with(dir, n, Backend::Segments);
}

fn fill_with(dir: &Path, n: u64, backend: Backend) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let j: Journal<Ev> = Journal::open_with(dir, backend).expect("open");
        for i in 1..=n {
            j.append(&Ev(format!("e{i}"))).await.expect("append");
        }
        j.close();
    });
}

#[test]
fn a_torn_tail_is_truncated_and_the_rest_survives() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 10);
    {
        let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
        let mut torn = Journal::<Ev>::encode_record(11, &Ev("e11".into()));
        torn.truncate(torn.len() - 3);
        j.raw_put(11, torn).expect("torn write");
        let mut flipped = Journal::<Ev>::encode_record(12, &Ev("e12".into()));
        let last = flipped.len() - 1;
        flipped[last] ^= 0x20;
        j.raw_put(12, flipped).expect("bad write");
        j.close();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let j: Journal<Ev> = Journal::open(dir.path()).expect("reopen");
        assert_eq!(j.last_seq(), 10);
        let values: Vec<String> = j.read_from(0).map(|r| r.expect("record").event.0).collect();
        assert_eq!(values.len(), 10);
        assert_eq!(values.last().map(String::as_str), Some("e10"));
        assert_eq!(
            j.append(&Ev("after".into())).await.expect("append"),
            11,
            "numbering continues after the truncation"
        );
        j.close();
    });
}

#[test]
fn corruption_in_the_middle_is_refused_then_repaired() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 10);
    {
        let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
        let mut bad = Journal::<Ev>::encode_record(5, &Ev("e5".into()));
        bad[6] ^= 0x01;
        j.raw_put(5, bad).expect("flip");
        j.close();
    }
    match Journal::<Ev>::open(dir.path()) {
        Err(JournalError::Corrupt { seq, .. }) => assert_eq!(seq, 5),
        Err(other) => panic!("expected a corruption error naming record 5, got: {other}"),
        Ok(_) => panic!("a journal with a corrupt record in the middle was opened"),
    }
    let dropped = bosun_journal::repair(dir.path()).expect("repair");
    assert_eq!(dropped, [5]);
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open after repair");
    let report = j.verify().expect("verify");
    assert_eq!(
        (
            report.checked,
            report.corrupt.len(),
            report.gaps.clone(),
            report.lost.clone()
        ),
        (9, 0, vec![], vec![(5, 5)])
    );
}

/// Child: opens a (damaged) journal read-only and prints every record it returns, between
/// a `reading` line and an `end` line (`end error …` when reading stopped at an error).
fn reader(dir: &str) {
    // On a line of its own: the test harness has printed the test's name without one.
    println!("\nreading");
    match Journal::<Ev>::open_read_only(Path::new(dir)) {
        Ok(j) => {
            for r in j.read_from(0) {
                match r {
                    Ok(r) => println!("record {} {}", r.seq, r.event.0),
                    Err(e) => {
                        println!("end error {e}");
                        return;
                    }
                }
            }
            println!("end");
        }
        Err(e) => println!("end error {e}"),
    }
}

#[test]
fn bit_flips_in_sled_files_never_yield_wrong_data() {
    if let Ok(dir) = std::env::var("BITFLIP_CHILD_DIR") {
        reader(&dir);
        return;
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut records, mut clean) = (0, 0);
    for round in 0..12 {
        let dir = tempfile::tempdir().expect("tempdir");
        fill_with(dir.path(), 200, Backend::Sled);
        let db = dir.path().join("db");
        let mut bytes = std::fs::read(&db).expect("read db");
        for _ in 0..4 {
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        std::fs::write(&db, &bytes).expect("write db");
        let out = child(
            "bit_flips_in_sled_files_never_yield_wrong_data",
            &[("BITFLIP_CHILD_DIR", dir.path().display().to_string())],
        )
        .stderr(Stdio::piped())
        .output()
        .expect("run reader");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The child ran the reader (not, say, no test at all under a changed name).
        assert!(
            stdout.lines().any(|l| l == "reading"),
            "round {round}: the reader did not run: {stdout}{stderr}"
        );
        // It ended with a clean read or an error, or sled panicked on the damage; never
        // a crash of another kind.
        let ended = stdout
            .lines()
            .any(|l| l == "end" || l.starts_with("end error "));
        if ended {
            assert!(out.status.success(), "round {round}: {stdout}{stderr}");
        } else {
            assert!(
                stderr.contains("panicked"),
                "round {round}: the reader neither ended nor panicked ({}): {stdout}{stderr}",
                out.status
            );
        }
        // Whatever happens (an error, a panic inside sled, a clean read), every record that
        // was returned must be exactly what was written under that sequence number, once.
        let mut seen = std::collections::BTreeSet::new();
        for line in stdout.lines() {
            if let Some(rest) = line.strip_prefix("record ") {
                let (seq, value) = rest.split_once(' ').expect("record line");
                assert_eq!(
                    value,
                    format!("e{seq}"),
                    "round {round}: wrong data returned for record {seq}"
                );
                let seq: u64 = seq.parse().expect("a sequence number");
                assert!(
                    (1..=200).contains(&seq) && seen.insert(seq),
                    "round {round}: record {seq} returned twice or never written"
                );
            }
        }
        if stdout.lines().any(|l| l == "end") {
            clean += 1;
        }
        records += seen.len();
    }
    eprintln!("{records} records read back, {clean} clean reads of 12");
    // Damage does not make every read fail: the check above saw records returned.
    assert!(
        records > 0 && clean > 0,
        "no round read anything back ({records} records, {clean} clean reads)"
    );
}

#[test]
fn a_journal_held_by_a_running_process_can_still_be_inspected() {
    if let Ok(dir) = std::env::var("HOLDER_CHILD_DIR") {
        let _j: Journal<Ev> = Journal::open(Path::new(&dir)).expect("open");
        println!("holding");
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 5);
    let mut holder = child(
        "a_journal_held_by_a_running_process_can_still_be_inspected",
        &[("HOLDER_CHILD_DIR", dir.path().display().to_string())],
    )
    .spawn()
    .expect("spawn holder");
    let stdout = holder.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("holding") => break,
            Some(Ok(_)) => continue,
            _ => panic!("the holder process did not open the journal"),
        }
    }
    let err = Journal::<Ev>::open(dir.path())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let read_only: Journal<Ev> =
        Journal::open_read_only(dir.path()).expect("read-only while locked");
    let values: Vec<String> = read_only
        .read_from(0)
        .map(|r| r.expect("record").event.0)
        .collect();
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(err.contains("locked by a running bosun"), "{err}");
    assert_eq!(values, ["e1", "e2", "e3", "e4", "e5"]);
}
