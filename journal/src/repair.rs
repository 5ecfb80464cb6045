//! Repair (bosun stopped): corrupt records and damaged bytes dropped so the journal opens
//! again, every valid record kept and the lost ones recorded for `verify`.

use std::path::Path;

use crate::check_directory;
use crate::codec::raw_record;
use crate::error::describe_records;
use crate::{Backend, FORMAT, JournalError, SegmentOptions, SegmentStorage, SledStorage, Storage};

/// Drops corrupt records so the journal opens again; returns the sequences dropped.
///
/// On segment files this also drops damaged bytes in the files themselves (keeping every
/// valid record after them, each drop logged with its file and offset) and unreadable
/// snapshot files, and rewrites a damaged format marker. Stop bosun first.
pub fn repair(dir: &Path) -> Result<Vec<u64>, JournalError> {
    check_directory(dir, false)?;
    if Backend::found_in(dir) == Some(Backend::Segments) {
        return repair_segments(dir);
    }
    let storage = SledStorage::open(dir)?;
    let mut dropped = Vec::new();
    for r in storage.events_from(0) {
        let (seq, bytes) = r?;
        if raw_record(seq, &bytes).is_err() {
            dropped.push(seq);
        }
    }
    for seq in &dropped {
        storage.remove_events(*seq, *seq)?;
    }
    storage.flush()?;
    Ok(dropped)
}

fn repair_segments(dir: &Path) -> Result<Vec<u64>, JournalError> {
    let storage = SegmentStorage::open_for_writing(dir, SegmentOptions::default())?;
    let mut dropped = Vec::new();
    for d in storage.repair_damage()? {
        tracing::warn!(
            file = %d.file.display(),
            offset = d.offset,
            "dropped damaged bytes {}..{} ({}: {})",
            d.offset,
            d.end,
            describe_records(&d.records),
            d.reason
        );
        if let Some((a, b)) = d.records {
            dropped.extend(a..=b);
        }
    }
    let mut bad = Vec::new();
    for r in storage.events_from(0) {
        let (seq, bytes) = r?;
        if raw_record(seq, &bytes).is_err() {
            bad.push(seq);
        }
    }
    for seq in &bad {
        storage.remove_events(*seq, *seq)?;
    }
    dropped.extend(bad);
    dropped.sort_unstable();
    dropped.dedup();
    // Gone for good: the journal opens again, and `verify` names them as lost.
    storage.accept_lost(&dropped)?;
    for (seq, problem) in storage.snapshot_problems()? {
        tracing::warn!("dropped snapshot {seq}: {problem}");
        storage.remove_snapshot(seq)?;
    }
    if let Err(e @ JournalError::Damaged { .. }) = storage.meta("format") {
        tracing::warn!("rewrote the journal's format marker: {e}");
        storage.set_meta("format", FORMAT)?;
    }
    storage.flush()?;
    dropped.sort_unstable();
    dropped.dedup();
    Ok(dropped)
}
