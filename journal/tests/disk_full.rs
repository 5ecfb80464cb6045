//! A full disk on a real (small) filesystem: appends stop being acknowledged and the
//! journal says why, and once there is room again it writes again by itself, with every
//! acknowledged event still there.
//!
//! The filesystem is a 8 MiB tmpfs mounted for the test, which needs root (as the test
//! command runs); where mounting is refused the test fails saying so: it never passes
//! untried.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bosun_journal::{Backend, Journal, Versioned};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Ev(String);

impl Versioned for Ev {
    const VERSION: u32 = 1;
    type Error = serde_json::Error;
    fn decode(_version: u32, raw: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(raw)
    }
}

/// A mounted tmpfs, unmounted on drop.
struct SmallFs(PathBuf);

impl SmallFs {
    /// Fails the test naming what is missing where mounting is refused.
    fn mount(dir: &Path) -> SmallFs {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
            .arg(dir)
            .output()
            .unwrap_or_else(|e| panic!("this test needs the `mount` command: {e}"));
        assert!(
            out.status.success(),
            "this test needs to mount a tmpfs, which needs root (as the test command runs): \
             mount: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        SmallFs(dir.to_path_buf())
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem with one file until it has no room left.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).expect("filler file");
    let chunk = vec![7u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

/// A journal on a small filesystem, appended to until the disk refuses an append (sled may
/// still have room in its own files). Fields drop in order: the journal before the mount.
struct Filled {
    journal: Journal<Ev>,
    fs: SmallFs,
    _base: tempfile::TempDir,
    /// Every sequence number acknowledged, the first append's included.
    acknowledged: Vec<u64>,
    /// Why the last append was refused.
    error: String,
}

/// Fails the test where mounting a tmpfs is refused.
fn filled(backend: Backend, payload: &str) -> Filled {
    let base = tempfile::tempdir().expect("temp dir");
    let fs = SmallFs::mount(base.path());
    let journal: Journal<Ev> =
        Journal::open_with(&fs.0.join("journal"), backend).expect("journal opens");
    let first = journal
        .append_blocking(&[Ev("before".into())])
        .expect("room at first");
    fill(&fs.0.join("filler"));
    let mut acknowledged = vec![first];
    let error = loop {
        match journal.append_blocking(&[Ev(payload.to_string())]) {
            Ok(seq) => acknowledged.push(seq),
            Err(e) => break e.to_string(),
        }
        assert!(acknowledged.len() < 2000, "the disk never filled");
    };
    Filled {
        journal,
        fs,
        _base: base,
        acknowledged,
        error,
    }
}

#[test]
fn a_full_disk_stops_acknowledging_and_room_again_resumes_by_itself() {
    full_disk(Backend::Segments);
}

#[test]
fn a_full_disk_stops_acknowledging_and_room_again_resumes_by_itself_on_sled() {
    full_disk(Backend::Sled);
}

fn full_disk(backend: Backend) {
    let payload = "x".repeat(16 * 1024);
    let Filled {
        journal,
        fs,
        _base,
        acknowledged,
        error,
    } = filled(backend, &payload);
    assert!(
        error.contains("No space left") || error.contains("os error 28"),
        "the error says why: {error}"
    );
    let (_, reported) = journal
        .health()
        .failing()
        .expect("the journal reports the failure");
    assert!(
        reported.contains("space") || reported.contains("28"),
        "{reported}"
    );
    // Still full: still refused, and still reported. (The same size: what a refused write
    // had partly written is cut off again, which may leave room for a small record.)
    assert!(journal.append_blocking(&[Ev(payload.clone())]).is_err());
    assert!(journal.health().failing().is_some());

    std::fs::remove_file(fs.0.join("filler")).expect("room again");
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        match journal.append_blocking(&[Ev("after".into())]) {
            Ok(seq) => break seq,
            Err(e) => {
                assert!(Instant::now() < deadline, "never wrote again: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert!(journal.health().failing().is_none(), "healthy again");
    let stored: Vec<(u64, Ev)> = journal
        .read_from(0)
        .map(|r| r.map(|rec| (rec.seq, rec.event)).expect("readable"))
        .collect();
    let seqs: Vec<u64> = stored.iter().map(|(s, _)| *s).collect();
    for seq in &acknowledged {
        assert!(seqs.contains(seq), "acknowledged event {seq} survived");
    }
    assert_eq!(
        stored.last().map(|(s, e)| (*s, e.0.as_str())),
        Some((after, "after"))
    );
    assert_eq!(
        seqs,
        (1..=after).collect::<Vec<_>>(),
        "sequence numbers stay gapless across the failure"
    );
    drop(journal);
}

/// A writer that starts nothing while the journal fails (`submit`) appends nothing: the
/// journal finds the room by itself and says so, on both backends.
#[test]
fn with_nobody_appending_a_failing_journal_finds_the_room_by_itself() {
    for backend in [Backend::Segments, Backend::Sled] {
        // `_base` is bound so that the folder lives as long as the mount.
        let Filled {
            journal, fs, _base, ..
        } = filled(backend, &"x".repeat(16 * 1024));
        assert!(journal.health().failing().is_some());
        let submitted = journal.submit(&[Ev("refused".into())]);
        assert!(
            submitted.is_err(),
            "work is refused while the journal fails"
        );

        std::fs::remove_file(fs.0.join("filler")).expect("room again");
        let deadline = Instant::now() + Duration::from_secs(30);
        while journal.health().failing().is_some() {
            assert!(
                Instant::now() < deadline,
                "{backend:?}: never found the room without an append"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let ack = journal
            .submit(&[Ev("accepted".into())])
            .expect("work is taken again");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert!(rt.block_on(ack).is_ok(), "{backend:?}");
        drop(journal);
    }
}
