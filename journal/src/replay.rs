//! Reading and replaying: records from a sequence on, decoded on worker threads and folded
//! in order on the caller's, after the newest snapshot at or before the target; and a
//! [`Subscription`] that follows new durable records.
//!
//! ```text
//!   storage ──► reader thread ──chunks──► decoders (≤ 4) ──in order──► fold(state, record)
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::watch;

use crate::codec::{RawRecord, Record, Versioned, decode, raw_record};
use crate::{Journal, JournalError};

/// Records handed from the reading thread to the folding one at a time.
const REPLAY_CHUNK: usize = 1024;

impl<E: Serialize + DeserializeOwned + Versioned> Journal<E> {
    /// Raw records from `from` on (checksums verified).
    pub fn raw_from(
        &self,
        from: u64,
    ) -> impl Iterator<Item = Result<RawRecord, JournalError>> + '_ {
        self.storage
            .events_from(from)
            .map(|r| r.and_then(|(seq, bytes)| raw_record(seq, &bytes)))
    }

    /// Decoded records from `from` on.
    pub fn read_from(
        &self,
        from: u64,
    ) -> impl Iterator<Item = Result<Record<E>, JournalError>> + '_ {
        self.storage
            .events_from(from)
            .map(|r| r.and_then(|(seq, bytes)| decode_event::<E>(seq, &bytes)))
    }

    /// Decoded records appended at or after `time_ms`.
    pub fn read_since(
        &self,
        time_ms: u64,
    ) -> impl Iterator<Item = Result<Record<E>, JournalError>> + '_ {
        self.read_from(0)
            .filter(move |r| r.as_ref().map_or(true, |r| r.time_ms >= time_ms))
    }

    /// A follower: records after `after`, then new ones as they become durable.
    pub fn subscribe(&self, after: u64) -> Subscription<'_, E> {
        Subscription {
            journal: self,
            next: after + 1,
            durable: self.durable.clone(),
            ahead: std::collections::VecDeque::new(),
        }
    }

    /// Rebuilds state up to `until` (inclusive; `None` = everything): the newest snapshot at
    /// or before it, then the events after it. Returns the state and the last sequence
    /// folded.
    pub fn replay<S, F>(
        &self,
        until: Option<u64>,
        use_snapshot: bool,
        mut fold: F,
    ) -> Result<(S, u64), JournalError>
    where
        S: Default + DeserializeOwned,
        F: FnMut(&mut S, &Record<E>),
        E: Send,
    {
        let until = until.unwrap_or(u64::MAX);
        let (mut state, mut last) = match use_snapshot
            .then(|| self.latest_snapshot::<S>(until))
            .transpose()?
            .flatten()
        {
            Some((seq, s)) => (s, seq),
            None => (S::default(), 0),
        };
        // Reading runs on one thread, decoding on `workers` more (chunks dealt round-robin
        // and collected in the same order), folding on this one: decoding is most of a
        // replay's work.
        let from = last + 1;
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 4);
        type Raw = Vec<(u64, Vec<u8>)>;
        type Decoded<E> = Result<Vec<Record<E>>, JournalError>;
        let result = std::thread::scope(|scope| -> Result<u64, JournalError> {
            let mut inputs = Vec::new();
            let mut outputs = Vec::new();
            for _ in 0..workers {
                let (in_tx, in_rx) = std::sync::mpsc::sync_channel::<Result<Raw, JournalError>>(4);
                let (out_tx, out_rx) = std::sync::mpsc::sync_channel::<Decoded<E>>(4);
                scope.spawn(move || {
                    for chunk in in_rx {
                        let decoded = chunk.and_then(|raw| {
                            raw.iter()
                                .map(|(seq, bytes)| decode_event::<E>(*seq, bytes))
                                .collect::<Result<Vec<_>, _>>()
                        });
                        if out_tx.send(decoded).is_err() {
                            return;
                        }
                    }
                });
                inputs.push(in_tx);
                outputs.push(out_rx);
            }
            scope.spawn(move || {
                let mut chunk: Raw = Vec::with_capacity(REPLAY_CHUNK);
                let mut next = 0usize;
                let mut deal = |item: Result<Raw, JournalError>| {
                    let ok = inputs[next % inputs.len()].send(item).is_ok();
                    next += 1;
                    ok
                };
                for r in self.storage.events_from(from) {
                    match r {
                        Ok((seq, _)) if seq > until => break,
                        Ok(raw) => {
                            chunk.push(raw);
                            if chunk.len() == REPLAY_CHUNK
                                && !deal(Ok(std::mem::replace(
                                    &mut chunk,
                                    Vec::with_capacity(REPLAY_CHUNK),
                                )))
                            {
                                return;
                            }
                        }
                        Err(e) => {
                            if deal(Ok(std::mem::take(&mut chunk))) {
                                deal(Err(e));
                            }
                            return;
                        }
                    }
                }
                deal(Ok(chunk));
            });
            // Chunk i comes back from worker i % workers; a closed channel ends the replay.
            for i in 0.. {
                let Ok(decoded) = outputs[i % workers].recv() else {
                    break;
                };
                for r in decoded? {
                    fold(&mut state, &r);
                    last = r.seq;
                }
            }
            Ok(last)
        });
        let last = result?;
        Ok((state, last))
    }
}

/// Decodes a stored record straight from its bytes; current-version events skip the
/// intermediate JSON value.
fn decode_event<E: Versioned + DeserializeOwned>(
    seq: u64,
    bytes: &[u8],
) -> Result<Record<E>, JournalError> {
    let (time_ms, version, payload) = decode(seq, bytes).map_err(|e| JournalError::Corrupt {
        seq,
        reason: e.to_string(),
    })?;
    if version > E::VERSION {
        return Err(JournalError::UnknownVersion {
            seq,
            version,
            supported: E::VERSION,
        });
    }
    let event = if version == E::VERSION {
        serde_json::from_slice::<E>(payload).map_err(|e| JournalError::Decode {
            seq,
            message: e.to_string(),
        })?
    } else {
        let raw: Value = serde_json::from_slice(payload).map_err(|e| JournalError::Corrupt {
            seq,
            reason: format!("payload is not JSON: {e}"),
        })?;
        E::decode(version, raw).map_err(|e| JournalError::Decode {
            seq,
            message: e.to_string(),
        })?
    };
    Ok(Record {
        seq,
        time_ms,
        version,
        event,
    })
}

/// Follows a journal: yields stored records in order, then waits for new durable ones.
pub struct Subscription<'a, E> {
    journal: &'a Journal<E>,
    next: u64,
    durable: watch::Receiver<u64>,
    /// Records read ahead (up to the durable end), so a follower does not start a read of
    /// the storage per record.
    ahead: std::collections::VecDeque<Record<E>>,
}

/// Records a [`Subscription`] reads at a time.
const FOLLOW_CHUNK: usize = 256;

impl<E: Serialize + DeserializeOwned + Versioned> Subscription<'_, E> {
    /// The next record; waits for one to become durable.
    pub async fn next(&mut self) -> Result<Record<E>, JournalError> {
        loop {
            if let Some(r) = self.ahead.pop_front() {
                return Ok(r);
            }
            let durable = *self.durable.borrow_and_update();
            if durable >= self.next {
                for r in self.journal.read_from(self.next).take(FOLLOW_CHUNK) {
                    let r = r?;
                    if r.seq > durable {
                        break;
                    }
                    self.next = r.seq + 1;
                    self.ahead.push_back(r);
                }
                if !self.ahead.is_empty() {
                    continue;
                }
            }
            self.durable
                .changed()
                .await
                .map_err(|_| JournalError::Closed)?;
        }
    }
}
