//! Where records live. The journal talks to storage through [`Storage`] only, so the
//! backend can change: [`crate::SegmentStorage`] (append-only files bosun owns, the
//! default for new journals) or [`SledStorage`] (sled 0.34: durable only after an explicit
//! flush, which the journal's group commit does before acknowledging; journals written
//! before the segment files keep it).

use std::path::{Path, PathBuf};

use crate::JournalError;

/// Stored records in sequence order.
pub(crate) type RecordIter<'a> =
    Box<dyn Iterator<Item = Result<(u64, Vec<u8>), JournalError>> + 'a>;

/// Bytes in a backend's file that are not a valid record, with valid records after them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The file.
    pub file: PathBuf,
    /// Where the damaged bytes start.
    pub offset: u64,
    /// Where the next valid record starts (or the file ends).
    pub end: u64,
    /// Sequence numbers of the records lost in it `(first, last)`, where known.
    pub records: Option<(u64, u64)>,
    /// What is wrong with the first damaged byte range.
    pub reason: String,
    /// The sequence of the first valid record after it.
    pub(crate) next_seq: Option<u64>,
}

impl Damage {
    /// The error a reader gets when it reaches this damage.
    pub fn to_error(&self) -> JournalError {
        JournalError::Damaged {
            file: self.file.clone(),
            offset: self.offset,
            records: self.records,
            reason: self.reason.clone(),
        }
    }
}

/// A key/value backend for events, snapshots and metadata, ordered by sequence number.
pub trait Storage: Send + Sync + 'static {
    /// Writes event records (not yet durable).
    fn put_events(&self, records: &[(u64, Vec<u8>)]) -> Result<(), JournalError>;
    /// Makes everything written so far durable.
    fn flush(&self) -> Result<(), JournalError>;
    /// Event records with sequence ≥ `from`, in order.
    fn events_from(&self, from: u64) -> RecordIter<'_>;
    /// The last event record.
    fn last_event(&self) -> Result<Option<(u64, Vec<u8>)>, JournalError>;
    /// The last `n` event records, newest first.
    fn last_events(&self, n: usize) -> Result<Vec<(u64, Vec<u8>)>, JournalError>;
    /// Removes event records with sequence in `from..=to`.
    fn remove_events(&self, from: u64, to: u64) -> Result<(), JournalError>;
    /// Writes a snapshot record.
    fn put_snapshot(&self, seq: u64, record: Vec<u8>) -> Result<(), JournalError>;
    /// Snapshot records, oldest first.
    fn snapshots(&self) -> Result<Vec<(u64, Vec<u8>)>, JournalError>;
    /// Removes a snapshot.
    fn remove_snapshot(&self, seq: u64) -> Result<(), JournalError>;
    /// Reads a metadata value.
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, JournalError>;
    /// Writes a metadata value.
    fn set_meta(&self, key: &str, value: &[u8]) -> Result<(), JournalError>;
    /// Bytes used on disk.
    fn size_on_disk(&self) -> Result<u64, JournalError>;
    /// Makes the backend usable again after a failed write (a full disk that has room
    /// again): a backend that stays failed after an IO error reopens itself here. Nothing
    /// unflushed survives; the journal acknowledged none of it.
    fn recover(&self) -> Result<(), JournalError> {
        Ok(())
    }
    /// Damage found in the backend's own files when it was opened (readers get it as an
    /// error when they reach it).
    fn damage(&self) -> Vec<Damage> {
        Vec::new()
    }
    /// Snapshots stored but unreadable, `(seq, what is wrong)`; [`Storage::snapshots`]
    /// leaves them out.
    /// Whether a write of a batch's size would land now (after a failed write, to learn
    /// that the disk has room again). By default a flush.
    fn probe(&self) -> Result<(), JournalError> {
        self.flush()
    }

    /// What is wrong with the set of files rather than inside one (stray files, records
    /// no file holds); already part of [`Storage::damage`].
    fn structure_problems(&self) -> Vec<Damage> {
        Vec::new()
    }

    /// Sequence ranges `repair` declared lost: not gaps any more.
    fn accepted_gaps(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }

    /// Declares records lost for good (`repair`), so that their absence stops nothing.
    fn accept_lost(&self, _seqs: &[u64]) -> Result<(), JournalError> {
        Ok(())
    }

    fn snapshot_problems(&self) -> Result<Vec<(u64, String)>, JournalError> {
        Ok(Vec::new())
    }
    /// Drops every damaged byte range, keeping the valid records around it; returns what
    /// was dropped.
    fn repair_damage(&self) -> Result<Vec<Damage>, JournalError> {
        Ok(Vec::new())
    }
}

/// sled-backed storage: trees `events`, `snapshots`, `meta`. sled refuses every write
/// after an IO error (a full disk) until it is reopened, so the handle can be swapped by
/// [`Storage::recover`].
pub struct SledStorage {
    trees: std::sync::RwLock<Option<Trees>>,
    path: PathBuf,
}

/// One open sled database and its trees (cheap to clone: handles).
#[derive(Clone)]
struct Trees {
    db: sled::Db,
    events: sled::Tree,
    snapshots: sled::Tree,
    meta: sled::Tree,
}

fn io(path: &Path, e: sled::Error) -> JournalError {
    JournalError::Storage {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

fn key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

fn seq_of(k: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = k.len().min(8);
    b[8 - n..].copy_from_slice(&k[..n]);
    u64::from_be_bytes(b)
}

impl SledStorage {
    /// Opens (creating if needed) sled storage in `dir`.
    pub fn open(dir: &Path) -> Result<SledStorage, JournalError> {
        Self::open_once(dir)
    }

    /// Like [`SledStorage::open`], retrying for a second while the lock is held: a handle
    /// closed a moment ago (in this process) may still be releasing it.
    pub fn open_for_writing(dir: &Path) -> Result<SledStorage, JournalError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match Self::open_once(dir) {
                Err(JournalError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    fn open_once(dir: &Path) -> Result<SledStorage, JournalError> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            // Every write is flushed explicitly (group commit); no background flusher.
            .flush_every_ms(None)
            // sled caches up to 1 GiB by default, which a pod's memory limit does not allow
            // for; the journal reads mostly at start, sequentially.
            .cache_capacity(64 * 1024 * 1024)
            .open()
            .map_err(|e| {
                let message = e.to_string();
                if message.contains("lock")
                    || message.contains("WouldBlock")
                    || message.contains("Resource temporarily unavailable")
                {
                    JournalError::Locked {
                        path: dir.to_path_buf(),
                    }
                } else {
                    JournalError::Storage {
                        path: dir.to_path_buf(),
                        message,
                    }
                }
            })?;
        let tree = |name: &str| db.open_tree(name).map_err(|e| io(dir, e));
        let trees = Trees {
            events: tree("events")?,
            snapshots: tree("snapshots")?,
            meta: tree("meta")?,
            db,
        };
        Ok(SledStorage {
            trees: std::sync::RwLock::new(Some(trees)),
            path: dir.to_path_buf(),
        })
    }

    /// The open trees, or an error while a reopen has not succeeded yet.
    fn t(&self) -> Result<Trees, JournalError> {
        self.trees
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| JournalError::Storage {
                path: self.path.clone(),
                message: "the storage is closed after a write error and could not be reopened yet"
                    .into(),
            })
    }
}

impl Storage for SledStorage {
    fn put_events(&self, records: &[(u64, Vec<u8>)]) -> Result<(), JournalError> {
        // Plain inserts: a batch's atomicity is not needed (nothing is acknowledged before
        // the flush, and a partly written group is a torn tail), and they flush cheaper.
        let t = self.t()?;
        for (seq, rec) in records {
            t.events
                .insert(key(*seq), rec.as_slice())
                .map_err(|e| io(&self.path, e))?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), JournalError> {
        self.t()?
            .db
            .flush()
            .map(|_| ())
            .map_err(|e| io(&self.path, e))
    }

    fn events_from(&self, from: u64) -> RecordIter<'_> {
        let t = match self.t() {
            Ok(t) => t,
            Err(e) => return Box::new(std::iter::once(Err(e))),
        };
        Box::new(t.events.range(key(from)..).map(move |r| {
            r.map(|(k, v)| (seq_of(&k), v.to_vec()))
                .map_err(|e| io(&self.path, e))
        }))
    }

    fn last_event(&self) -> Result<Option<(u64, Vec<u8>)>, JournalError> {
        self.t()?
            .events
            .last()
            .map(|o| o.map(|(k, v)| (seq_of(&k), v.to_vec())))
            .map_err(|e| io(&self.path, e))
    }

    fn last_events(&self, n: usize) -> Result<Vec<(u64, Vec<u8>)>, JournalError> {
        self.t()?
            .events
            .iter()
            .rev()
            .take(n)
            .map(|r| {
                r.map(|(k, v)| (seq_of(&k), v.to_vec()))
                    .map_err(|e| io(&self.path, e))
            })
            .collect()
    }

    fn remove_events(&self, from: u64, to: u64) -> Result<(), JournalError> {
        let t = self.t()?;
        let mut batch = sled::Batch::default();
        for r in t.events.range(key(from)..=key(to)) {
            let (k, _) = r.map_err(|e| io(&self.path, e))?;
            batch.remove(k);
        }
        t.events.apply_batch(batch).map_err(|e| io(&self.path, e))
    }

    fn put_snapshot(&self, seq: u64, record: Vec<u8>) -> Result<(), JournalError> {
        self.t()?
            .snapshots
            .insert(key(seq), record)
            .map(|_| ())
            .map_err(|e| io(&self.path, e))
    }

    fn snapshots(&self) -> Result<Vec<(u64, Vec<u8>)>, JournalError> {
        self.t()?
            .snapshots
            .iter()
            .map(|r| {
                r.map(|(k, v)| (seq_of(&k), v.to_vec()))
                    .map_err(|e| io(&self.path, e))
            })
            .collect()
    }

    fn remove_snapshot(&self, seq: u64) -> Result<(), JournalError> {
        self.t()?
            .snapshots
            .remove(key(seq))
            .map(|_| ())
            .map_err(|e| io(&self.path, e))
    }

    fn meta(&self, k: &str) -> Result<Option<Vec<u8>>, JournalError> {
        self.t()?
            .meta
            .get(k)
            .map(|o| o.map(|v| v.to_vec()))
            .map_err(|e| io(&self.path, e))
    }

    fn set_meta(&self, k: &str, value: &[u8]) -> Result<(), JournalError> {
        self.t()?
            .meta
            .insert(k, value)
            .map(|_| ())
            .map_err(|e| io(&self.path, e))
    }

    fn size_on_disk(&self) -> Result<u64, JournalError> {
        self.t()?.db.size_on_disk().map_err(|e| io(&self.path, e))
    }

    fn recover(&self) -> Result<(), JournalError> {
        let mut trees = self.trees.write().unwrap_or_else(|p| p.into_inner());
        // The old database must be gone (its file lock released) before it is reopened.
        drop(trees.take());
        let fresh = SledStorage::open_for_writing(&self.path)?;
        let reopened = fresh.trees.into_inner().unwrap_or_else(|p| p.into_inner());
        *trees = reopened;
        tracing::info!(path = %self.path.display(), "journal storage reopened after a write error");
        Ok(())
    }
}
