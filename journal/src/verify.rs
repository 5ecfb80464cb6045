//! Verification and figures: every record's checksum and the numbering checked, damage
//! named by file and offset, and what the journal holds.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{Versioned, decode, raw_record};
use crate::error::describe_records;
use crate::{Journal, JournalError};

/// Result of [`Journal::verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// Records checked.
    pub checked: u64,
    /// Corrupt records: `(seq, reason)`.
    pub corrupt: Vec<(u64, String)>,
    /// Missing sequence numbers: `(after, before)` of each gap.
    pub gaps: Vec<(u64, u64)>,
    /// Records an earlier `repair` declared lost, `(first, last)`: named, not a failure.
    pub lost: Vec<(u64, u64)>,
}

impl VerifyReport {
    /// No problems.
    pub fn ok(&self) -> bool {
        self.corrupt.is_empty() && self.gaps.is_empty()
    }
}

/// Figures about a journal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Records stored.
    pub events: u64,
    /// Oldest and newest sequence.
    pub first_seq: Option<u64>,
    /// Newest sequence.
    pub last_seq: Option<u64>,
    /// Oldest record time (unix ms).
    pub first_time_ms: Option<u64>,
    /// Newest record time.
    pub last_time_ms: Option<u64>,
    /// Bytes of stored records.
    pub record_bytes: u64,
    /// Bytes on disk.
    pub disk_bytes: u64,
    /// Snapshots.
    pub snapshots: Vec<u64>,
}

impl<E: Serialize + DeserializeOwned + Versioned> Journal<E> {
    /// Checks every record and the sequence numbering.
    pub fn verify(&self) -> Result<VerifyReport, JournalError> {
        let mut report = VerifyReport::default();
        let mut prev: Option<u64> = None;
        for r in self.storage.events_from(0) {
            let (seq, bytes) = match r {
                Err(JournalError::Damaged {
                    file,
                    offset,
                    records,
                    reason,
                }) => {
                    let seq = records.map(|(a, _)| a).or(prev.map(|p| p + 1)).unwrap_or(0);
                    report.corrupt.push((
                        seq,
                        format!(
                            "damaged bytes at offset {offset} of {} ({}: {reason})",
                            file.display(),
                            describe_records(&records)
                        ),
                    ));
                    // The records lost there are reported here, not again as a gap.
                    if let Some((_, last)) = records {
                        prev = Some(last);
                    }
                    continue;
                }
                other => other?,
            };
            report.checked += 1;
            if let Err(JournalError::Corrupt { reason, .. }) = raw_record(seq, &bytes) {
                report.corrupt.push((seq, reason));
            }
            if let Some(p) = prev
                && seq != p + 1
            {
                report.gaps.push((p, seq));
            }
            prev = Some(seq);
        }
        report.lost = self.storage.accepted_gaps();
        let lost = report.lost.clone();
        report
            .gaps
            .retain(|(p, n)| !lost.iter().any(|(a, b)| *a <= p + 1 && n - 1 <= *b));
        for d in self.storage.structure_problems() {
            if let Some((a, b)) = d.records {
                // Named here with its cause, not again as a bare gap.
                report.gaps.retain(|(p, n)| !(*p + 1 == a && *n == b + 1));
            }
            report.corrupt.push((
                d.records.map_or(0, |(a, _)| a),
                format!(
                    "{}: {} ({}); `bosun journal repair` (with bosun stopped) declares them lost and keeps every valid record",
                    d.file.display(),
                    d.reason,
                    describe_records(&d.records)
                ),
            ));
        }
        for (seq, problem) in self.storage.snapshot_problems()? {
            report.corrupt.push((
                seq,
                format!("{problem}; replay uses an older snapshot or the events"),
            ));
        }
        for (seq, bytes) in self.storage.snapshots()? {
            if let Err(reason) = decode(seq, &bytes) {
                report.corrupt.push((
                    seq,
                    format!(
                        "snapshot {seq}: {reason}; replay uses an older snapshot or the events"
                    ),
                ));
            }
        }
        Ok(report)
    }

    /// Figures about the journal.
    pub fn stats(&self) -> Result<Stats, JournalError> {
        let mut stats = Stats {
            disk_bytes: self.storage.size_on_disk()?,
            snapshots: self.snapshots()?.iter().map(|s| s.seq).collect(),
            ..Stats::default()
        };
        for r in self.storage.events_from(0) {
            let (seq, bytes) = r?;
            stats.events += 1;
            stats.record_bytes += bytes.len() as u64;
            let time = decode(seq, &bytes).ok().map(|(t, _, _)| t);
            if stats.first_seq.is_none() {
                stats.first_seq = Some(seq);
                stats.first_time_ms = time;
            }
            stats.last_seq = Some(seq);
            stats.last_time_ms = time.or(stats.last_time_ms);
        }
        Ok(stats)
    }
}
