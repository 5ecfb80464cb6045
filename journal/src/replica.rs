//! Journal following: what a standby needs to keep a byte-for-byte copy of its leader's
//! journal, and what the leader needs to tell a standby where to continue.
//!
//! ```text
//!   standby: (after, checksum of its record `after`) ──► leader: Journal::follow_from
//!        ◄── Continue(seq) then stored records          (the copies agree up to `after`)
//!        ◄── Reset(snapshot or empty) then records      (behind the leader's compaction,
//!                                                        ahead of it, or diverged)
//!   standby: Journal::append_stored (checked, durable) / Journal::replace (on a reset)
//! ```

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::codec::RecordError;
use crate::{Body, Journal, JournalError, Versioned, check_directory, decode};

/// Where a standby continues, as the leader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowFrom {
    /// The two journals agree up to the standby's last record: send records from this
    /// sequence on.
    Continue(u64),
    /// The standby must start over from this snapshot `(seq, stored bytes)` (or from an
    /// empty journal, `None`), then take records after it.
    Reset(Option<(u64, Vec<u8>)>),
}

/// A record's checksum as stored (its first four bytes), which covers its sequence number,
/// time, version and payload: two journals whose records at a sequence have the same
/// checksum hold the same record there.
pub fn stored_checksum(bytes: &[u8]) -> Option<u32> {
    let head: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
    Some(u32::from_le_bytes(head))
}

/// Checks records a standby received before the committer writes them: numbered right
/// after `last`, without gaps, each with a valid checksum.
pub(crate) fn check_stored(last: u64, records: &[(u64, Vec<u8>)]) -> Result<(), StoredError> {
    for (expected, (seq, bytes)) in (last + 1..).zip(records) {
        if *seq != expected {
            return Err(StoredError::Gap {
                seq: *seq,
                last: expected - 1,
            });
        }
        decode(*seq, bytes).map_err(|reason| StoredError::Unreadable { seq: *seq, reason })?;
    }
    Ok(())
}

/// Why records a standby received are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StoredError {
    /// Not numbered right after this journal's last record.
    #[error("replicated record {seq} does not follow record {last} of this journal")]
    Gap {
        /// The record received.
        seq: u64,
        /// The record it should follow.
        last: u64,
    },
    /// Its header or checksum is wrong.
    #[error("replicated record {seq}: {reason}")]
    Unreadable {
        /// The record received.
        seq: u64,
        /// What is wrong with it.
        reason: RecordError,
    },
}

impl<E: Serialize + DeserializeOwned + Versioned> Journal<E> {
    /// Stored records from `from` on, byte for byte (checksums verified).
    pub fn stored_from(
        &self,
        from: u64,
    ) -> impl Iterator<Item = Result<(u64, Vec<u8>), JournalError>> + '_ {
        self.storage.events_from(from).map(|r| {
            r.and_then(|(seq, bytes)| match decode(seq, &bytes) {
                Ok(_) => Ok((seq, bytes)),
                Err(e) => Err(JournalError::Corrupt {
                    seq,
                    reason: e.to_string(),
                }),
            })
        })
    }

    /// The last durable sequence number, as it changes.
    pub fn durable_watch(&self) -> watch::Receiver<u64> {
        self.durable.clone()
    }

    /// The checksum of the record stored at `seq`: the event, or else the snapshot taken
    /// at it (a journal whose events before it were compacted away).
    pub fn checksum_at(&self, seq: u64) -> Result<Option<u32>, JournalError> {
        if seq == 0 {
            return Ok(None);
        }
        if let Some(first) = self.storage.events_from(seq).next() {
            let (s, bytes) = first?;
            if s == seq {
                return Ok(stored_checksum(&bytes));
            }
        }
        Ok(self
            .storage
            .snapshots()?
            .into_iter()
            .find(|(s, _)| *s == seq)
            .and_then(|(_, bytes)| stored_checksum(&bytes)))
    }

    /// The newest snapshot as stored `(seq, bytes)`.
    pub fn latest_stored_snapshot(&self) -> Result<Option<(u64, Vec<u8>)>, JournalError> {
        Ok(self
            .storage
            .snapshots()?
            .into_iter()
            .rev()
            .find(|(seq, bytes)| decode(*seq, bytes).is_ok()))
    }

    /// Where a standby whose journal ends at `after` (with `checksum` there) continues.
    pub fn follow_from(
        &self,
        after: u64,
        checksum: Option<u32>,
    ) -> Result<FollowFrom, JournalError> {
        let last = self.last_seq();
        let first = match self.storage.events_from(0).next() {
            Some(r) => Some(r?.0),
            None => None,
        };
        // Records after `after` are all still stored here.
        let complete_after = |after: u64| first.map_or(last == after, |f| f <= after + 1);
        if after <= last && complete_after(after) {
            let agrees = after == 0 || (checksum.is_some() && self.checksum_at(after)? == checksum);
            if agrees {
                return Ok(FollowFrom::Continue(after + 1));
            }
        }
        // Behind what compaction kept, ahead of this journal, or holding other records.
        match self.latest_stored_snapshot()? {
            Some((seq, bytes)) if complete_after(seq) => Ok(FollowFrom::Reset(Some((seq, bytes)))),
            _ if complete_after(0) => Ok(FollowFrom::Reset(None)),
            _ => Err(JournalError::Storage {
                path: self.path.clone(),
                message: "no snapshot covers the records compaction dropped".into(),
            }),
        }
    }

    /// Durably appends records exactly as another journal stored them (a standby copying
    /// its leader). They must continue this journal without a gap; returns the last
    /// sequence number.
    pub async fn append_stored(&self, records: Vec<(u64, Vec<u8>)>) -> Result<u64, JournalError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let tx = self.tx.as_ref().ok_or_else(|| JournalError::Storage {
            path: self.path.clone(),
            message: "opened read-only".into(),
        })?;
        tx.send(crate::AppendRequest {
            body: Body::Stored(records),
            reply,
            sent: std::time::Instant::now(),
        })
        .map_err(|_| JournalError::Closed)?;
        let path = self.path.clone();
        rx.await
            .map_err(|_| JournalError::Closed)?
            .map_err(|failure| failure.at(path))
    }

    /// Starts the (closed) journal in `dir` over from a snapshot as its leader stored it,
    /// or empty. The new journal is built beside the old one and put in its place in
    /// steps a crash cannot leave half done ([`crate::reset`]); the previous contents are
    /// kept in `<dir>.replaced` (replacing an older copy) for inspection; other
    /// subsystems' journals inside `dir` are left alone, and may be reset at the same time.
    /// Returns where the old contents went, if there were any.
    pub fn replace(
        dir: &Path,
        snapshot: Option<(u64, Vec<u8>)>,
    ) -> Result<Option<PathBuf>, JournalError> {
        check_directory(dir, true)?;
        if let Some((seq, bytes)) = &snapshot {
            decode(*seq, bytes).map_err(|e| JournalError::Corrupt {
                seq: *seq,
                reason: e.to_string(),
            })?;
        }
        let staging = crate::reset::staging(dir)?;
        let journal = Journal::<E>::open(&staging)?;
        if let Some((seq, bytes)) = snapshot {
            journal.storage.put_snapshot(seq, bytes)?;
            journal.storage.flush()?;
        }
        journal.close();
        crate::reset::install(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Retention;

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Ev(u64);

    impl Versioned for Ev {
        const VERSION: u32 = 1;
        type Error = serde_json::Error;
        fn decode(_: u32, raw: serde_json::Value) -> Result<Self, serde_json::Error> {
            serde_json::from_value(raw)
        }
    }

    fn journal(dir: &Path) -> Journal<Ev> {
        Journal::open(dir).expect("journal opens")
    }

    async fn copy(from: &Journal<Ev>, to: &Journal<Ev>, first: u64) {
        let records: Vec<_> = from.stored_from(first).map(|r| r.expect("valid")).collect();
        to.append_stored(records).await.expect("appended");
    }

    #[tokio::test]
    async fn a_standby_continues_where_both_agree_and_resets_when_not() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (l, s) = (tmp.path().join("leader"), tmp.path().join("standby"));
        let leader = journal(&l);
        let standby = journal(&s);
        for i in 0..5 {
            leader.append(&Ev(i)).await.expect("append");
        }
        assert_eq!(
            leader.follow_from(0, None).ok(),
            Some(FollowFrom::Continue(1))
        );
        copy(&leader, &standby, 1).await;
        let at = standby.last_seq();
        assert_eq!(at, 5);
        assert_eq!(
            leader
                .follow_from(at, standby.checksum_at(at).ok().flatten())
                .ok(),
            Some(FollowFrom::Continue(6))
        );
        // A gap or a bad checksum is refused, and nothing is written.
        let bad = leader.stored_from(2).map(|r| r.expect("valid")).collect();
        assert!(standby.append_stored(bad).await.is_err());
        assert_eq!(standby.last_seq(), 5);
        // The standby led for a while: its record 5 is not the leader's.
        standby.append(&Ev(99)).await.expect("append");
        assert!(matches!(
            leader.follow_from(6, standby.checksum_at(6).ok().flatten()),
            Ok(FollowFrom::Reset(None))
        ));
        // Behind the leader's compaction: the snapshot.
        leader.save_snapshot(5, &5u64).expect("snapshot");
        leader.append(&Ev(6)).await.expect("append");
        leader
            .compact(&Retention {
                keep_snapshots: 1,
                max_age_ms: None,
                max_bytes: None,
            })
            .expect("compact");
        let Ok(FollowFrom::Reset(Some((seq, bytes)))) = leader.follow_from(2, Some(0)) else {
            panic!("a standby behind compaction starts from the snapshot");
        };
        assert_eq!(seq, 5);
        standby.close();
        let aside = Journal::<Ev>::replace(&s, Some((seq, bytes))).expect("replaced");
        assert!(aside.is_some_and(|a| a.exists()));
        let standby = journal(&s);
        assert_eq!(standby.last_seq(), 5);
        copy(&leader, &standby, 6).await;
        assert_eq!(standby.last_seq(), 6);
        assert_eq!(
            leader
                .follow_from(6, standby.checksum_at(6).ok().flatten())
                .ok(),
            Some(FollowFrom::Continue(7))
        );
        let (state, last) = standby
            .replay::<u64, _>(None, true, |s, r| *s += r.event.0)
            .expect("replay");
        assert_eq!((state, last), (5 + 6, 6));
    }
}
