//! Compaction: old snapshots dropped by a [`Retention`], then the records the oldest kept
//! snapshot covers.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{Versioned, now_ms};
use crate::{Journal, JournalError};

/// What to keep when compacting.
#[derive(Clone, Debug)]
pub struct Retention {
    /// Snapshots kept (the newest ones); events before the oldest kept one are dropped.
    pub keep_snapshots: usize,
    /// Also drop snapshots older than this (milliseconds), keeping at least one.
    pub max_age_ms: Option<u64>,
    /// Drop old snapshots (keeping at least one) while the journal is larger than this.
    pub max_bytes: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_snapshots: 3,
            max_age_ms: None,
            max_bytes: None,
        }
    }
}

impl<E: Serialize + DeserializeOwned + Versioned> Journal<E> {
    /// Drops old snapshots per `policy`, then the events the oldest kept snapshot covers.
    pub fn compact(&self, policy: &Retention) -> Result<u64, JournalError> {
        let mut snaps = self.snapshots()?;
        let keep = policy.keep_snapshots.max(1);
        let now = now_ms();
        while snaps.len() > 1
            && (snaps.len() > keep
                || policy.max_age_ms.is_some_and(|age| {
                    snaps
                        .first()
                        .is_some_and(|s| now.saturating_sub(s.time_ms) > age)
                })
                || policy.max_bytes.is_some_and(|max| {
                    self.storage
                        .size_on_disk()
                        .map(|b| b > max)
                        .unwrap_or(false)
                        && snaps.len() > 1
                }))
        {
            let old = snaps.remove(0);
            self.storage.remove_snapshot(old.seq)?;
            if policy.max_bytes.is_some() && snaps.len() <= keep {
                break;
            }
        }
        let Some(oldest) = snaps.first() else {
            return Ok(0);
        };
        let first = self
            .storage
            .events_from(0)
            .next()
            .transpose()?
            .map(|(s, _)| s)
            .unwrap_or(oldest.seq + 1);
        if first > oldest.seq {
            return Ok(0);
        }
        self.storage.remove_events(first, oldest.seq)?;
        self.storage.flush()?;
        Ok(oldest.seq - first + 1)
    }
}
