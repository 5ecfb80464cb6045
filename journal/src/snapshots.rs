//! Snapshots: a folded state saved at a sequence, so that a replay starts from it
//! instead of the first record.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{Versioned, decode, encode, now_ms};
use crate::{Journal, JournalError};

/// A snapshot stored in the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The state includes every event up to this sequence.
    pub seq: u64,
    /// When it was taken (unix ms).
    pub time_ms: u64,
    /// Stored size in bytes.
    pub size: usize,
}

impl<E: Serialize + DeserializeOwned + Versioned> Journal<E> {
    /// Saves a snapshot of an application state that includes events up to `seq`.
    pub fn save_snapshot<S: Serialize>(&self, seq: u64, state: &S) -> Result<(), JournalError> {
        let payload = serde_json::to_vec(state).map_err(|e| JournalError::Encode {
            what: "snapshot",
            message: e.to_string(),
        })?;
        self.storage
            .put_snapshot(seq, encode(seq, now_ms(), 0, &payload))?;
        self.storage.flush()
    }

    /// Snapshots, oldest first.
    pub fn snapshots(&self) -> Result<Vec<SnapshotInfo>, JournalError> {
        Ok(self
            .storage
            .snapshots()?
            .into_iter()
            .filter_map(|(seq, bytes)| {
                decode(seq, &bytes)
                    .ok()
                    .map(|(time_ms, _, _)| SnapshotInfo {
                        seq,
                        time_ms,
                        size: bytes.len(),
                    })
            })
            .collect())
    }

    /// The newest valid snapshot at or before `at`.
    pub fn latest_snapshot<S: DeserializeOwned>(
        &self,
        at: u64,
    ) -> Result<Option<(u64, S)>, JournalError> {
        for (seq, bytes) in self
            .storage
            .snapshots()?
            .into_iter()
            .rev()
            .filter(|(s, _)| *s <= at)
        {
            match decode(seq, &bytes)
                .map_err(|e| e.to_string())
                .and_then(|(_, _, p)| serde_json::from_slice::<S>(p).map_err(|e| e.to_string()))
            {
                Ok(state) => return Ok(Some((seq, state))),
                Err(e) => tracing::warn!(seq, "ignoring unreadable snapshot: {e}"),
            }
        }
        Ok(None)
    }
}
