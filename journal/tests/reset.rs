//! A standby's Reset (its journal started over from the leader's) of journals nested in
//! each other's folder, as bosun lays them out: the modules journal in `journal/`, the
//! lambda controllers' in `journal/lambda/`, the deployer's in `journal/deployer/`. What a
//! user sees: all three reset at the same moment, each journal is whole and the leader's,
//! and each one's previous contents are kept beside it for inspection.

use std::path::{Path, PathBuf};

use bosun_journal::{Journal, Versioned};
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

fn events(dir: &Path) -> Vec<String> {
    let j = Journal::<Ev>::open_read_only(dir).expect("read-only");
    let all = j.read_from(0).map(|r| r.expect("record").event.0).collect();
    drop(j);
    all
}

fn fill(dir: &Path, what: &str, n: usize) {
    let j: Journal<Ev> = Journal::open(dir).expect("open");
    let batch: Vec<Ev> = (0..n).map(|i| Ev(format!("{what}-{i}"))).collect();
    j.append_blocking(&batch).expect("append");
    j.close();
}

fn replaced(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(".replaced");
    PathBuf::from(name)
}

#[test]
fn resets_of_nested_journals_at_the_same_moment_leave_each_sound_and_keep_the_replaced() {
    let top = tempfile::tempdir().expect("tempdir");
    let modules = top.path().join("journal");
    let journals = [
        modules.clone(),
        modules.join("lambda"),
        modules.join("deployer"),
    ];
    for round in 0..20 {
        for (i, dir) in journals.iter().enumerate() {
            fill(dir, &format!("round{round}-journal{i}"), 10 + i);
        }
        // The leader's snapshot each standby starts from: a sequence and its stored bytes,
        // taken from a leader journal of the same kind.
        let leader = top.path().join(format!("leader{round}"));
        let l: Journal<Ev> = Journal::open(&leader).expect("leader");
        l.append_blocking(&[Ev("leader".into())]).expect("append");
        l.save_snapshot(1, &format!("state-{round}"))
            .expect("snapshot");
        let snapshot = l.latest_stored_snapshot().expect("snapshot").expect("one");
        l.close();

        let start = std::sync::Barrier::new(journals.len());
        std::thread::scope(|s| {
            let handles: Vec<_> = journals
                .iter()
                .map(|dir| {
                    let (start, snapshot) = (&start, snapshot.clone());
                    s.spawn(move || {
                        start.wait();
                        Journal::<Ev>::replace(dir, Some(snapshot))
                    })
                })
                .collect();
            for (dir, h) in journals.iter().zip(handles) {
                let aside = h
                    .join()
                    .expect("no panic")
                    .unwrap_or_else(|e| panic!("round {round}: reset of {}: {e}", dir.display()));
                assert_eq!(aside, Some(replaced(dir)), "round {round}");
            }
        });
        for (i, dir) in journals.iter().enumerate() {
            let j: Journal<Ev> = Journal::open(dir)
                .unwrap_or_else(|e| panic!("round {round}: {} opens: {e}", dir.display()));
            assert!(
                j.verify().expect("verify").ok(),
                "round {round}: {}",
                dir.display()
            );
            let state: Option<(u64, String)> = j.latest_snapshot(u64::MAX).expect("snapshot");
            assert_eq!(
                state,
                Some((1, format!("state-{round}"))),
                "round {round}: {} starts from the leader's snapshot",
                dir.display()
            );
            j.close();
            assert_eq!(
                events(&replaced(dir)),
                (0..10 + i)
                    .map(|k| format!("round{round}-journal{i}-{k}"))
                    .collect::<Vec<_>>(),
                "round {round}: what {} held before is kept",
                dir.display()
            );
        }
    }
}
