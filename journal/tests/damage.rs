//! Damage to the segment files themselves, on real files: flipped bytes, truncations,
//! corrupt snapshot files, and disk reclaimed by compaction. What a user sees: which file,
//! offset and record is damaged; a writer that refuses to start on lost records; a repair
//! that drops exactly the damaged record and keeps every other; a torn tail cut off with
//! everything before it intact.

use std::path::{Path, PathBuf};

use bosun_journal::{Backend, Journal, JournalError, Retention, SegmentOptions, Versioned};
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

fn ev(i: u64) -> Ev {
    Ev(format!("e{i}"))
}

/// A segment journal holding `e1..=en`, one record per append.
fn fill(dir: &Path, n: u64, options: SegmentOptions) {
    let j: Journal<Ev> = Journal::open_segments(dir, options).expect("open");
    for i in 1..=n {
        assert_eq!(j.append_blocking(&[ev(i)]).expect("append"), i);
    }
    j.close();
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(dir.join("segments"))
        .expect("segments")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    all.sort();
    all
}

/// `(offset, size)` of every frame of a segment (a frame starts with its record's length;
/// zeros after the last one are room made ahead of it).
fn frames(path: &Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(path).expect("segment");
    let mut all = Vec::new();
    let mut off = 0usize;
    while off + 16 <= bytes.len() && bytes[off..off + 16].iter().any(|b| *b != 0) {
        let len = u32::from_le_bytes(bytes[off..off + 4].try_into().expect("4 bytes")) as usize;
        all.push((off as u64, (16 + len) as u64));
        off += 16 + len;
    }
    all
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

fn flip(path: &Path, at: u64, mask: u8) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at as usize] ^= mask;
    std::fs::write(path, bytes).expect("write");
}

/// Every record of a journal as `(seq, value)`, stopping at the first error.
fn records(j: &Journal<Ev>) -> (Vec<(u64, String)>, Option<JournalError>) {
    let mut all = Vec::new();
    for r in j.read_from(0) {
        match r {
            Ok(r) => all.push((r.seq, r.event.0)),
            Err(e) => return (all, Some(e)),
        }
    }
    (all, None)
}

fn expected(seqs: impl IntoIterator<Item = u64>) -> Vec<(u64, String)> {
    seqs.into_iter().map(|i| (i, format!("e{i}"))).collect()
}

#[test]
fn a_flipped_byte_in_the_middle_is_named_refused_and_repaired_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 50, SegmentOptions::default());
    let segment = segments(dir.path()).remove(0);
    let (offset, _) = frames(&segment)[19];
    flip(&segment, offset + 16 + 5, 0x10);

    // `bosun run` opens for writing: refused, naming the file, the offset and the record.
    let err = match Journal::<Ev>::open(dir.path()) {
        Err(e) => e,
        Ok(_) => panic!("a journal with a damaged record in the middle was opened for writing"),
    };
    match &err {
        JournalError::Damaged {
            file,
            offset: at,
            records,
            ..
        } => assert_eq!((file, *at, *records), (&segment, offset, Some((20, 20)))),
        other => panic!("expected the damage to be named, got: {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&segment.display().to_string())
            && message.contains(&format!("offset {offset}"))
            && message.contains("record 20")
            && message.contains("bosun journal repair"),
        "{message}"
    );

    // `verify` names it and counts the rest; reading stops at it with the same error.
    let read_only: Journal<Ev> = Journal::open_read_only(dir.path()).expect("read-only");
    let report = read_only.verify().expect("verify");
    assert_eq!((report.checked, report.gaps.clone()), (49, vec![]));
    assert_eq!(report.corrupt.len(), 1, "{report:?}");
    assert_eq!(report.corrupt[0].0, 20);
    assert!(
        report.corrupt[0].1.contains(&segment.display().to_string())
            && report.corrupt[0].1.contains(&format!("offset {offset}")),
        "{report:?}"
    );
    let (before, error) = records(&read_only);
    assert_eq!(before, expected(1..=19), "records before the damage read");
    assert!(
        matches!(error, Some(JournalError::Damaged { .. })),
        "{error:?}"
    );
    drop(read_only);

    // `repair` drops record 20 and nothing else.
    assert_eq!(bosun_journal::repair(dir.path()).expect("repair"), [20]);
    let j: Journal<Ev> = Journal::open(dir.path()).expect("opens after repair");
    let (all, error) = records(&j);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(all, expected((1..=19).chain(21..=50)));
    let report = j.verify().expect("verify");
    assert_eq!(
        (
            report.checked,
            report.corrupt.len(),
            report.gaps.clone(),
            report.lost.clone()
        ),
        (49, 0, vec![], vec![(20, 20)]),
        "the dropped record is named as lost, not a gap"
    );
    assert_eq!(j.append_blocking(&[ev(51)]).expect("append"), 51);
}

#[test]
fn random_flips_are_detected_or_harmless_and_never_panic() {
    let pristine = tempfile::tempdir().expect("tempdir");
    fill(pristine.path(), 24, SegmentOptions::default());
    let segment_name = segments(pristine.path())[0]
        .file_name()
        .map(|n| n.to_owned())
        .expect("name");
    let layout = frames(&segments(pristine.path())[0]);
    let (last_offset, _) = *layout.last().expect("frames");
    let size: u64 = layout.iter().map(|(_, s)| s).sum();
    let work = tempfile::tempdir().expect("tempdir");
    let (mut refused, mut torn) = (0, 0);
    for (round, at) in (0..size).enumerate() {
        let dir = work.path().join(format!("j{round}"));
        copy_dir(pristine.path(), &dir);
        let segment = dir.join("segments").join(&segment_name);
        flip(&segment, at, 1 << (round % 8));
        match Journal::<Ev>::open(&dir) {
            Err(JournalError::Damaged {
                offset,
                records: lost,
                ..
            }) => {
                refused += 1;
                // Named where the damaged record starts; repair keeps every other record.
                let hit = layout
                    .iter()
                    .position(|(o, s)| (*o..o + s).contains(&at))
                    .expect("in a frame") as u64;
                assert_eq!(offset, layout[hit as usize].0, "flip at {at}");
                assert_eq!(lost, Some((hit + 1, hit + 1)), "flip at {at}");
                assert_eq!(
                    bosun_journal::repair(&dir).expect("repair"),
                    [hit + 1],
                    "flip at {at}"
                );
                let j: Journal<Ev> = Journal::open(&dir).expect("open after repair");
                let (all, error) = records(&j);
                assert!(error.is_none(), "flip at {at}: {error:?}");
                assert_eq!(
                    all,
                    expected((1..=24).filter(|s| *s != hit + 1)),
                    "flip at {at}"
                );
            }
            Err(other) => panic!("flip at {at}: unexpected error {other}"),
            Ok(j) => {
                // Only a flip in the last record may pass: it is a torn tail, cut off.
                let (all, error) = records(&j);
                assert!(error.is_none(), "flip at {at}: {error:?}");
                assert!(at >= last_offset, "flip at {at} went unnoticed");
                assert_eq!(all, expected(1..=23), "flip at {at}");
                torn += 1;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(refused > 0 && torn > 0, "{refused} refused, {torn} torn");
}

#[test]
fn a_truncation_anywhere_in_the_last_record_is_a_torn_tail() {
    let pristine = tempfile::tempdir().expect("tempdir");
    fill(pristine.path(), 10, SegmentOptions::default());
    let segment_name = segments(pristine.path())[0]
        .file_name()
        .map(|n| n.to_owned())
        .expect("name");
    let (last_offset, last_size) = *frames(&segments(pristine.path())[0])
        .last()
        .expect("frames");
    let work = tempfile::tempdir().expect("tempdir");
    for cut in last_offset..last_offset + last_size {
        let dir = work.path().join(format!("cut{cut}"));
        copy_dir(pristine.path(), &dir);
        let segment = dir.join("segments").join(&segment_name);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&segment)
            .and_then(|f| f.set_len(cut))
            .expect("truncate");
        let j: Journal<Ev> = Journal::open(&dir).expect("a torn tail opens");
        assert_eq!(j.last_seq(), 9, "cut at {cut}");
        let (all, error) = records(&j);
        assert!(error.is_none(), "cut at {cut}: {error:?}");
        assert_eq!(all, expected(1..=9), "cut at {cut}");
        assert_eq!(
            std::fs::metadata(&segment).expect("segment").len(),
            last_offset,
            "the torn bytes are cut off"
        );
        assert_eq!(j.append_blocking(&[ev(10)]).expect("append"), 10);
        drop(j);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn room_made_ahead_of_the_frames_is_neither_damage_nor_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 10, SegmentOptions::default());
    let segment = segments(dir.path()).remove(0);
    let size = |p: &Path| std::fs::metadata(p).expect("segment").len();
    let end = |p: &Path| frames(p).last().map_or(0, |(o, s)| o + s);
    let (end10, size10) = (end(&segment), size(&segment));
    assert!(
        size10 >= bosun_journal::EXTEND_BY && size10 > end10,
        "the newest segment is extended ahead of its frames ({end10} bytes of frames, {size10} in the file)"
    );

    // Read-only (`bosun journal verify`): every record, no damage, nothing written.
    let reader: Journal<Ev> = Journal::open_read_only(dir.path()).expect("read-only");
    let report = reader.verify().expect("verify");
    assert!(report.ok() && report.checked == 10, "{report:?}");
    let (all, error) = records(&reader);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(all, expected(1..=10));
    drop(reader);
    assert_eq!(size(&segment), size10, "a reader changed the file");

    // A writer opening it cuts nothing and appends right after the last frame.
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
    assert_eq!(j.append_blocking(&[ev(11)]).expect("append"), 11);
    drop(j);
    assert_eq!(frames(&segment).len(), 11);
    assert_eq!(frames(&segment)[10].0, end10);
    assert_eq!(size(&segment), size10);

    // A write cut short inside the room (half a frame header, zeros after it) is a torn
    // tail: cut off, everything before it kept.
    let end11 = end(&segment);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .and_then(|f| std::os::unix::fs::FileExt::write_all_at(&f, &[7u8; 9], end11))
        .expect("torn write");
    let j: Journal<Ev> = Journal::open(dir.path()).expect("a torn tail opens");
    assert_eq!(records(&j).0, expected(1..=11));
    assert_eq!(size(&segment), end11, "the torn bytes are cut off");
    assert_eq!(j.append_blocking(&[ev(12)]).expect("append"), 12);
    drop(j);
    let j: Journal<Ev> = Journal::open(dir.path()).expect("reopen");
    assert_eq!(records(&j).0, expected(1..=12));
}

#[test]
fn a_truncated_older_segment_is_refused_named_and_repaired_keeping_later_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Small segments: about ten records each.
    fill(dir.path(), 40, SegmentOptions { segment_bytes: 300 });
    let files = segments(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    let older = &files[1];
    let layout = frames(older);
    let first_seq: u64 = older
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("named by its first sequence");
    let next_first: u64 = files[2]
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("named by its first sequence");
    // Cut inside its third record: that one and the rest of the file are gone.
    let cut = layout[2].0 + 7;
    std::fs::OpenOptions::new()
        .write(true)
        .open(older)
        .and_then(|f| f.set_len(cut))
        .expect("truncate");

    match Journal::<Ev>::open(dir.path()) {
        Err(JournalError::Damaged {
            file,
            offset,
            records,
            ..
        }) => assert_eq!(
            (&file, offset, records),
            (older, layout[2].0, Some((first_seq + 2, next_first - 1)))
        ),
        Err(other) => panic!("expected the lost records to be named, got: {other}"),
        Ok(_) => panic!("a journal missing records in the middle was opened for writing"),
    }
    let dropped = bosun_journal::repair(dir.path()).expect("repair");
    assert_eq!(dropped, (first_seq + 2..next_first).collect::<Vec<_>>());
    let j: Journal<Ev> = Journal::open(dir.path()).expect("opens after repair");
    let (all, error) = records(&j);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        all,
        expected((1..first_seq + 2).chain(next_first..=40)),
        "every record outside the cut survives"
    );
    assert_eq!(j.append_blocking(&[ev(41)]).expect("append"), 41);
}

#[test]
fn a_truncation_in_the_middle_of_the_newest_segment_keeps_everything_before_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 30, SegmentOptions::default());
    let segment = segments(dir.path()).remove(0);
    let layout = frames(&segment);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .and_then(|f| f.set_len(layout[12].0 + 3))
        .expect("truncate");
    // Nothing after the cut is left to tell it from a crash: the tail is cut, the rest kept.
    let j: Journal<Ev> = Journal::open(dir.path()).expect("opens");
    let (all, error) = records(&j);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(all, expected(1..=12));
    assert_eq!(j.append_blocking(&[ev(13)]).expect("append"), 13);
}

#[test]
fn a_corrupt_snapshot_file_is_named_and_replay_falls_back_to_an_older_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 30, SegmentOptions::default());
    let fold = |s: &mut Vec<String>, r: &bosun_journal::Record<Ev>| s.push(r.event.0.clone());
    {
        let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
        for at in [10, 20] {
            let (state, _) = j
                .replay::<Vec<String>, _>(Some(at), false, fold)
                .expect("replay");
            j.save_snapshot(at, &state).expect("snapshot");
        }
    }
    let newest = dir
        .path()
        .join("snapshots")
        .join(format!("{:020}.snap", 20));
    let len = std::fs::metadata(&newest).expect("snapshot file").len();
    flip(&newest, len / 2, 0x04);

    let j: Journal<Ev> = Journal::open(dir.path()).expect("a bad snapshot does not stop a start");
    let listed: Vec<u64> = j
        .snapshots()
        .expect("snapshots")
        .iter()
        .map(|s| s.seq)
        .collect();
    assert_eq!(listed, [10], "the damaged snapshot is not used");
    let (state, last) = j
        .replay::<Vec<String>, _>(None, true, fold)
        .expect("replay");
    let values: Vec<String> = (1..=30).map(|i| format!("e{i}")).collect();
    assert_eq!(
        (state, last),
        (values.clone(), 30),
        "older snapshot + events"
    );
    let report = j.verify().expect("verify");
    assert_eq!(report.corrupt.len(), 1, "{report:?}");
    assert_eq!(report.corrupt[0].0, 20);
    assert!(
        report.corrupt[0].1.contains(&newest.display().to_string()),
        "the file is named: {report:?}"
    );
    drop(j);

    // Both damaged: a full replay.
    let older = dir
        .path()
        .join("snapshots")
        .join(format!("{:020}.snap", 10));
    flip(&older, 20, 0x01);
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
    let (state, _) = j
        .replay::<Vec<String>, _>(None, true, fold)
        .expect("replay");
    assert_eq!(state, values, "full replay");
    drop(j);
    assert_eq!(
        bosun_journal::repair(dir.path()).expect("repair"),
        Vec::<u64>::new(),
        "no record dropped"
    );
    assert!(!newest.exists() && !older.exists(), "repair removes them");
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
    assert!(j.verify().expect("verify").ok());
}

#[test]
fn a_damaged_format_marker_is_named_and_repaired() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 5, SegmentOptions::default());
    let marker = dir.path().join("meta").join("format");
    flip(&marker, 18, 0x01);
    let err = Journal::<Ev>::open(dir.path())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains(&marker.display().to_string()), "{err}");
    assert_eq!(
        bosun_journal::repair(dir.path()).expect("repair"),
        Vec::<u64>::new()
    );
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open after repair");
    assert_eq!(records(&j).0, expected(1..=5));
}

fn disk_bytes(j: &Journal<Ev>) -> u64 {
    j.stats().expect("stats").disk_bytes
}

#[test]
fn compaction_deletes_whole_segments_and_reclaims_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let j: Journal<Ev> = Journal::open_segments(
        dir.path(),
        SegmentOptions {
            segment_bytes: 4096,
        },
    )
    .expect("open");
    let payload = "x".repeat(200);
    for i in 1..=1000u64 {
        j.append_blocking(&[Ev(format!("{i}:{payload}"))])
            .expect("append");
    }
    let full = disk_bytes(&j);
    let files = segments(dir.path()).len();
    j.save_snapshot(950, &950u64).expect("snapshot");
    assert_eq!(
        j.compact(&Retention {
            keep_snapshots: 1,
            ..Retention::default()
        })
        .expect("compact"),
        950
    );
    let compacted = disk_bytes(&j);
    assert!(
        compacted * 10 < full,
        "disk reclaimed: {full} bytes before, {compacted} after"
    );
    assert!(segments(dir.path()).len() < files / 10);
    // The partly covered segment's older records are not read back, now or after a restart.
    let first = |j: &Journal<Ev>| j.read_from(0).next().map(|r| r.expect("record").seq);
    assert_eq!(first(&j), Some(951));
    drop(j);
    let j: Journal<Ev> = Journal::open(dir.path()).expect("reopen");
    assert_eq!(first(&j), Some(951));
    assert_eq!(j.last_seq(), 1000);
    assert_eq!(j.read_from(0).count(), 50);
}

#[test]
fn with_default_segments_compaction_rolls_the_segment_and_the_disk_stops_growing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
    let payload = "x".repeat(1000);
    let keep1 = Retention {
        keep_snapshots: 1,
        ..Retention::default()
    };
    // Rounds of ~1.2 MB of events, each followed by a snapshot and a compaction.
    let mut after_first = 0;
    let mut seq = 0;
    for round in 0..5 {
        for _ in 0..1200 {
            seq = j.append_blocking(&[Ev(payload.clone())]).expect("append");
        }
        j.save_snapshot(seq, &seq).expect("snapshot");
        j.compact(&keep1).expect("compact");
        let bytes = disk_bytes(&j);
        if round == 0 {
            after_first = bytes;
        }
        assert_eq!(
            segments(dir.path()).len(),
            1,
            "round {round}: the compacted segments are deleted"
        );
        assert!(
            bytes < after_first + after_first / 10,
            "round {round}: {bytes} bytes on disk, {after_first} after the first round"
        );
    }
    assert_eq!(j.read_from(0).count(), 0);
    assert_eq!(j.append_blocking(&[ev(1)]).expect("append"), seq + 1);
    // Every event compacted away: numbering still goes on after the newest snapshot.
    j.save_snapshot(seq + 1, &(seq + 1)).expect("snapshot");
    j.compact(&keep1).expect("compact");
    drop(j);
    let j: Journal<Ev> = Journal::open(dir.path()).expect("reopen");
    assert_eq!(j.append_blocking(&[ev(2)]).expect("append"), seq + 2);
}

#[test]
fn new_journals_use_segments_and_sled_journals_keep_sled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sled = dir.path().join("sled");
    let j: Journal<Ev> = Journal::open_with(&sled, Backend::Sled).expect("sled");
    j.append_blocking(&[ev(1)]).expect("append");
    drop(j);
    assert_eq!(Backend::found_in(&sled), Some(Backend::Sled));
    // Opened without saying which: still sled, and readable.
    let j: Journal<Ev> = Journal::open(&sled).expect("reopen");
    assert_eq!(records(&j).0, expected([1]));
    drop(j);
    assert!(!sled.join("segments").exists());
    let err = Journal::<Ev>::open_with(&sled, Backend::Segments)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("Sled"), "{err}");

    let fresh = dir.path().join("fresh");
    if std::env::var_os("BOSUN_JOURNAL_BACKEND").is_none() {
        drop(Journal::<Ev>::open(&fresh).expect("new"));
        assert_eq!(Backend::found_in(&fresh), Some(Backend::Segments));
    }
}

/// A compacted journal in small segments: events 1..=300, a snapshot at 150, events
/// 151..=300 kept (low-water 151).
fn compacted(dir: &Path) {
    let j: Journal<Ev> =
        Journal::open_segments(dir, SegmentOptions { segment_bytes: 400 }).expect("open");
    for i in 1..=300 {
        j.append_blocking(&[ev(i)]).expect("append");
    }
    j.save_snapshot(150, &150u64).expect("snapshot");
    j.compact(&Retention {
        keep_snapshots: 1,
        ..Retention::default()
    })
    .expect("compact");
    j.close();
}

fn first_seq_of(path: &Path) -> u64 {
    path.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok())
        .expect("named by its first sequence")
}

/// Opening for writing is refused, naming `file` and the records; `verify` names them;
/// `repair` declares exactly `lost` gone and leaves a journal that verifies and opens.
fn refused_named_and_repaired(dir: &Path, file: &Path, lost: Option<(u64, u64)>) {
    match Journal::<Ev>::open(dir) {
        Err(JournalError::Damaged {
            file: named,
            records,
            ..
        }) => assert_eq!((named.as_path(), records), (file, lost)),
        Err(other) => panic!("expected {} to be named, got: {other}", file.display()),
        Ok(_) => panic!("a journal missing records was opened for writing"),
    }
    let j = Journal::<Ev>::open_read_only(dir).expect("read-only");
    let report = j.verify().expect("verify");
    assert!(!report.ok(), "{report:?}");
    assert!(
        report
            .corrupt
            .iter()
            .any(|(_, m)| m.contains(&file.display().to_string())),
        "verify names the file: {report:?}"
    );
    drop(j);
    let dropped = bosun_journal::repair(dir).expect("repair");
    let want: Vec<u64> = lost.map(|(a, b)| (a..=b).collect()).unwrap_or_default();
    assert_eq!(
        dropped, want,
        "exactly the missing records are declared lost"
    );
    let j: Journal<Ev> = Journal::open(dir).expect("opens after repair");
    assert!(j.verify().expect("verify").ok(), "verifies after repair");
    let last = j.last_seq();
    assert_eq!(
        j.append_blocking(&[ev(last + 1)]).expect("append"),
        last + 1
    );
}

#[test]
fn a_deleted_oldest_segment_is_refused_named_and_declared_lost_by_repair() {
    let dir = tempfile::tempdir().expect("tempdir");
    compacted(dir.path());
    let files = segments(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    let next = first_seq_of(&files[1]);
    std::fs::remove_file(&files[0]).expect("delete");
    refused_named_and_repaired(dir.path(), &files[1], Some((151, next - 1)));
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
    let (all, error) = records(&j);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        all,
        expected(next..=301),
        "every record after the gap survives"
    );
}

#[test]
fn a_deleted_middle_segment_is_refused_named_and_declared_lost_by_repair() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 60, SegmentOptions { segment_bytes: 300 });
    let files = segments(dir.path());
    assert!(files.len() >= 4, "{files:?}");
    let (gone, after) = (first_seq_of(&files[1]), first_seq_of(&files[2]));
    std::fs::remove_file(&files[1]).expect("delete");
    refused_named_and_repaired(dir.path(), &files[2], Some((gone, after - 1)));
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
    let (all, _) = records(&j);
    assert_eq!(all, expected((1..gone).chain(after..=61)));
}

#[test]
fn a_copied_segment_and_a_stray_file_are_refused_and_put_aside_by_repair() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 40, SegmentOptions { segment_bytes: 300 });
    let files = segments(dir.path());
    // A copy of an older segment under a later name: its records are out of order.
    let copy = dir.path().join("segments").join(format!("{:020}.log", 999));
    std::fs::copy(&files[0], &copy).expect("copy");
    refused_named_and_repaired(dir.path(), &copy, None);
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
    assert_eq!(
        records(&j).0,
        expected(1..=41),
        "nothing duplicated, nothing lost"
    );
    drop(j);

    let stray = dir.path().join("segments").join("notes.txt");
    std::fs::write(&stray, b"not a segment").expect("stray");
    refused_named_and_repaired(dir.path(), &stray, None);
    assert!(
        dir.path().join("stray").join("notes.txt").exists(),
        "kept for inspection"
    );
}

#[test]
fn a_damaged_low_water_mark_is_named_and_rewritten_by_repair() {
    let dir = tempfile::tempdir().expect("tempdir");
    compacted(dir.path());
    let mark = dir.path().join("low-water");
    flip(&mark, 5, 0x10);
    refused_named_and_repaired(dir.path(), &mark, None);
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
    let (all, _) = records(&j);
    assert_eq!(
        all.first().map(|r| r.0),
        Some(151),
        "compacted events stay gone"
    );
}

#[test]
fn compacted_events_whose_every_snapshot_is_unreadable_are_refused_and_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    compacted(dir.path());
    let snap = dir
        .path()
        .join("snapshots")
        .join(format!("{:020}.snap", 150));
    flip(&snap, 10, 0x01);
    refused_named_and_repaired(dir.path(), &dir.path().join("snapshots"), Some((1, 150)));
    assert!(!snap.exists(), "the unreadable snapshot is removed");
}

/// Damage anywhere in a compacted journal, older segments below the low-water mark
/// included (16 bit flips spread over every segment file, then 4 KiB zeroed): `repair`
/// always leaves a journal that verifies (what it dropped named as lost) and opens, and
/// every record it did not name survives.
#[test]
fn after_any_damage_repair_leaves_a_journal_that_verifies_and_opens() {
    let pristine = tempfile::tempdir().expect("tempdir");
    compacted(pristine.path());
    let work = tempfile::tempdir().expect("tempdir");
    // A fixed xorshift sequence: the same damage on every run.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut refused, mut repaired_records) = (0, 0);
    for round in 0..24 {
        let dir = work.path().join(format!("j{round}"));
        copy_dir(pristine.path(), &dir);
        let files = segments(&dir);
        for _ in 0..16 {
            let file = &files[(next() % files.len() as u64) as usize];
            let len = std::fs::metadata(file).expect("segment").len();
            if len > 0 {
                flip(file, next() % len, 1 << (next() % 8));
            }
        }
        if round % 2 == 1 {
            // 4 KiB zeroed in an older segment (less where it is shorter).
            let file = &files[(next() % (files.len() as u64 - 1)) as usize];
            let mut bytes = std::fs::read(file).expect("read");
            let at = (next() % bytes.len() as u64) as usize;
            let end = (at + 4096).min(bytes.len());
            bytes[at..end].fill(0);
            std::fs::write(file, bytes).expect("write");
        }
        if Journal::<Ev>::open(&dir).is_err() {
            refused += 1;
        }
        let dropped = bosun_journal::repair(&dir).expect("repair");
        repaired_records += dropped.len();
        let j: Journal<Ev> = Journal::open(&dir).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let report = j.verify().expect("verify");
        assert!(report.ok(), "round {round}: {report:?}");
        let (all, error) = records(&j);
        assert!(error.is_none(), "round {round}: {error:?}");
        // Every record repair did not drop reads back as written.
        for (seq, value) in &all {
            assert_eq!(value, &format!("e{seq}"), "round {round}");
        }
        let kept: Vec<u64> = all.iter().map(|(s, _)| *s).collect();
        for seq in 151..=300 {
            assert!(
                kept.contains(&seq) || dropped.contains(&seq) || seq == 300,
                "round {round}: record {seq} neither kept nor named as dropped"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!(
        "refused {refused} of 24 damaged journals; repair dropped {repaired_records} records in all"
    );
    assert!(refused > 0);
}

/// A copy of a live segment under a name below the low-water mark: opening it as a
/// compacted segment would delete it unread, reading it would duplicate records.
#[test]
fn a_copy_of_a_segment_under_a_compacted_name_is_refused_and_put_aside() {
    let dir = tempfile::tempdir().expect("tempdir");
    compacted(dir.path());
    let files = segments(dir.path());
    let copy = dir.path().join("segments").join(format!("{:020}.log", 2));
    std::fs::copy(&files[1], &copy).expect("copy");
    refused_named_and_repaired(dir.path(), &copy, None);
    let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
    assert_eq!(
        records(&j).0,
        expected(151..=301),
        "nothing duplicated, nothing lost"
    );
    assert_eq!(
        std::fs::read(dir.path().join("stray").join(format!("{:020}.log", 2))).expect("kept"),
        std::fs::read(&files[1]).expect("segment"),
        "the copy is kept for inspection, unchanged"
    );
}

/// Garbage, or an empty file, named like a segment far ahead of the records: not a torn
/// tail to cut and write into (it would never roll or be compacted, and the next segment
/// would sort before it), but a file the journal did not write.
#[test]
fn a_file_named_like_a_future_segment_is_refused_and_put_aside_not_written_into() {
    for (case, bytes) in [("garbage", vec![0x55u8; 5000]), ("empty", Vec::new())] {
        let dir = tempfile::tempdir().expect("tempdir");
        fill(dir.path(), 5, SegmentOptions::default());
        let name = "09999999999999999999.log";
        let future = dir.path().join("segments").join(name);
        std::fs::write(&future, &bytes).expect("future segment");
        refused_named_and_repaired(dir.path(), &future, None);
        assert!(!future.exists(), "{case}: put aside");
        assert_eq!(
            std::fs::read(dir.path().join("stray").join(name)).expect("kept"),
            bytes,
            "{case}: kept unchanged for inspection"
        );
        let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
        assert_eq!(records(&j).0, expected(1..=6), "{case}");
    }
}

/// A folder where a segment file would be: named by `verify` and put aside by `repair`,
/// like a stray file.
#[test]
fn a_folder_named_like_a_segment_is_refused_named_and_put_aside_by_repair() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), 5, SegmentOptions::default());
    let folder = dir.path().join("segments").join(format!("{:020}.log", 500));
    std::fs::create_dir(&folder).expect("folder");
    std::fs::write(folder.join("inside"), b"kept").expect("file inside");
    refused_named_and_repaired(dir.path(), &folder, None);
    assert_eq!(
        std::fs::read(
            dir.path()
                .join("stray")
                .join(format!("{:020}.log", 500))
                .join("inside")
        )
        .expect("kept"),
        b"kept"
    );
}
