//! A durable, checksummed event journal, generic over the event type.
//!
//! ```text
//!   append(events) ──► committer thread: assign seqs, write batch, ONE flush ──► ack (seq)
//!                             (everything queued during a flush shares the next one)
//!   replay(fold)   ──► latest snapshot ≤ target  +  events after it, checksums verified
//! ```
//!
//! Record layout (stored under its big-endian seq): `crc32 | time_ms u64 | version u32 |
//! payload (JSON)`, all little-endian; the checksum covers the seq and everything after
//! the checksum. A torn or corrupt record at the tail is truncated on open (with a
//! warning); a corrupt record followed by good ones is refused, naming its sequence, until
//! [`repair`] drops it.
//!
//! Storage ([`Storage`]): append-only segment files ([`SegmentStorage`], the default for new
//! journals; frames with their own checksums, so damage to the files themselves is found
//! and named by file and offset) or sled ([`SledStorage`], journals written before).
//! [`Backend::found_in`] tells them apart by their files; `BOSUN_JOURNAL_BACKEND` picks the
//! backend of a new journal.
//!
//! Files: `codec.rs` the record format, `error.rs` the errors, `writer.rs` the committer
//! thread and the write health, `segment.rs` / `storage.rs` the storage, `replica.rs` what
//! a standby writes; this file the [`Journal`] facade (open, append, replay, snapshots,
//! compaction, verify, repair).

mod codec;
mod error;
mod replica;
mod reset;
mod segment;
mod storage;
mod writer;

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{oneshot, watch};

pub use replica::{FollowFrom, stored_checksum};
pub use segment::{EXTEND_BY, SegmentOptions, SegmentStorage};
pub use storage::{Damage, SledStorage, Storage};

pub use codec::{RawRecord, Record, Versioned};
use codec::{decode, encode, now_ms, raw_record};
pub use error::JournalError;
use error::describe_records;
pub use writer::Health;
use writer::{AppendFailure, AppendRequest, Body, commit_loop};

const FORMAT: &[u8] = b"bosun-journal/1";
/// How many records at the tail are checked on open.
const TAIL_CHECK: usize = 1024;
/// Records handed from the reading thread to the folding one at a time.
const REPLAY_CHUNK: usize = 1024;

/// A journal's storage backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Append-only segment files ([`SegmentStorage`]); the default for new journals.
    Segments,
    /// sled 0.34 ([`SledStorage`]); journals written before the segment files.
    Sled,
}

impl Backend {
    /// The backend for a new journal: `BOSUN_JOURNAL_BACKEND` (`segments` or `sled`), or
    /// segments.
    pub fn for_new_journals() -> Result<Backend, JournalError> {
        match std::env::var("BOSUN_JOURNAL_BACKEND") {
            Err(_) => Ok(Backend::Segments),
            Ok(v) => v.parse(),
        }
    }

    /// The backend whose files `dir` holds (`segments/` or sled's `db`), if any.
    pub fn found_in(dir: &Path) -> Option<Backend> {
        if SegmentStorage::is_in(dir) {
            Some(Backend::Segments)
        } else if dir.join("db").exists() || dir.join("conf").exists() {
            Some(Backend::Sled)
        } else {
            None
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = JournalError;

    fn from_str(s: &str) -> Result<Backend, JournalError> {
        match s.trim() {
            "segments" | "" => Ok(Backend::Segments),
            "sled" => Ok(Backend::Sled),
            other => Err(JournalError::UnknownBackend {
                value: other.to_string(),
            }),
        }
    }
}

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

/// An open journal of events `E`.
pub struct Journal<E> {
    storage: Arc<dyn Storage>,
    health: Health,
    path: PathBuf,
    tx: Option<std::sync::mpsc::Sender<AppendRequest>>,
    durable: watch::Receiver<u64>,
    committer: Option<std::thread::JoinHandle<()>>,
    _temp: Option<tempfile_dir::TempCopy>,
    _event: PhantomData<fn() -> E>,
}

mod tempfile_dir {
    use std::path::{Path, PathBuf};

    /// A private copy of a locked journal, removed on drop.
    pub struct TempCopy(pub PathBuf);

    impl Drop for TempCopy {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
        // The copy holds the same values as the journal: private too.
        bosun_platform::create_private_dir(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            let target = to.join(entry.file_name());
            // Other subsystems' journals are not part of this one.
            if crate::reset::is_neighbour(&entry.file_name().to_string_lossy()) {
                continue;
            }
            if entry.file_type()?.is_dir() {
                copy_dir(&entry.path(), &target)?;
            } else {
                std::fs::copy(entry.path(), target)?;
            }
        }
        Ok(())
    }
}

/// Folders inside a journal directory that hold other subsystems' journals (the lambda
/// controllers' next to the modules', on the same volume).
pub const SUBSYSTEM_DIRS: &[&str] = &["lambda", "deployer"];

fn check_directory(dir: &Path, create: bool) -> Result<(), JournalError> {
    if !dir.exists() {
        if create {
            return bosun_platform::create_private_dir(dir).map_err(|source| JournalError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
        return Err(JournalError::Missing {
            path: dir.to_path_buf(),
        });
    }
    if !dir.is_dir() {
        return Err(JournalError::NotAJournal {
            path: dir.to_path_buf(),
        });
    }
    let names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| JournalError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    // The backends' own files, and the journals of other subsystems in their own folders
    // (`lambda/`); anything else means this is somebody else's directory.
    let journal_files = |n: &String| {
        let sled = n == "db" || n == "conf" || n == "blobs" || n.starts_with("snap.");
        let segments = matches!(
            n.as_str(),
            "segments"
                | "snapshots"
                | "meta"
                | "lock"
                | "low-water"
                | "low-water.tmp"
                | "gaps"
                | "gaps.tmp"
                | "stray"
                | "probe.tmp"
        );
        sled || segments || reset::is_neighbour(n)
    };
    if !names.is_empty() && !names.iter().all(journal_files) {
        return Err(JournalError::NotAJournal {
            path: dir.to_path_buf(),
        });
    }
    Ok(())
}

impl<E: Serialize + DeserializeOwned + Versioned> Journal<E> {
    /// Opens a journal for writing, creating the directory if needed. The tail is checked:
    /// a torn or corrupt tail is truncated with a warning; corruption followed by valid
    /// records is refused with [`JournalError::Corrupt`].
    ///
    /// An existing journal opens with the backend it holds; a new one gets
    /// [`Backend::for_new_journals`].
    pub fn open(dir: &Path) -> Result<Journal<E>, JournalError> {
        let wanted = Backend::for_new_journals()?;
        let backend = match Backend::found_in(dir) {
            Some(found) => {
                if found != wanted && std::env::var_os("BOSUN_JOURNAL_BACKEND").is_some() {
                    tracing::warn!(
                        journal = %dir.display(),
                        "BOSUN_JOURNAL_BACKEND asks for {wanted:?} but this journal holds {found:?}; opening it as {found:?} (the setting applies to new journals)"
                    );
                }
                found
            }
            None => wanted,
        };
        Self::open_storage(dir, backend, SegmentOptions::default())
    }

    /// Opens (creating if needed) a journal with a given backend; refuses a journal that
    /// holds the other one.
    pub fn open_with(dir: &Path, backend: Backend) -> Result<Journal<E>, JournalError> {
        Self::open_storage(dir, backend, SegmentOptions::default())
    }

    /// Opens (creating if needed) a segment journal with other segment settings.
    pub fn open_segments(dir: &Path, options: SegmentOptions) -> Result<Journal<E>, JournalError> {
        Self::open_storage(dir, Backend::Segments, options)
    }

    fn open_storage(
        dir: &Path,
        backend: Backend,
        options: SegmentOptions,
    ) -> Result<Journal<E>, JournalError> {
        check_directory(dir, true)?;
        if let Some(aside) = reset::finish(dir)? {
            tracing::warn!(journal = %dir.display(), kept = %aside.display(), "finished a reset a crash interrupted: the journal is the leader's, its previous contents are kept for inspection");
        }
        if let Some(found) = Backend::found_in(dir)
            && found != backend
        {
            return Err(JournalError::Storage {
                path: dir.to_path_buf(),
                message: format!("this journal is stored with {found:?}, not {backend:?}"),
            });
        }
        let tighten = || {
            let mut changed = Vec::new();
            bosun_platform::tighten_tree(dir, &mut changed).map_err(|source| JournalError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
            Ok::<_, JournalError>(changed)
        };
        // A journal written by an older bosun was readable by other users.
        bosun_platform::log_tightened("journal", dir, &tighten()?);
        let storage: Arc<dyn Storage> = match backend {
            Backend::Segments => Arc::new(SegmentStorage::open_for_writing(dir, options)?),
            Backend::Sled => Arc::new(SledStorage::open_for_writing(dir)?),
        };
        // The files sled has just created follow the umask.
        tighten()?;
        Self::with_storage(storage, dir, true, None)
    }

    /// Opens a journal for reading only; works while a running bosun holds it, by reading
    /// a private copy.
    pub fn open_read_only(dir: &Path) -> Result<Journal<E>, JournalError> {
        check_directory(dir, false)?;
        // Reading never creates a journal: a read racing bosun's first start would leave
        // sled files where bosun is about to create segment files.
        let Some(found) = Backend::found_in(dir) else {
            return Err(JournalError::Empty {
                path: dir.to_path_buf(),
            });
        };
        if found == Backend::Segments {
            // Read in place: the files are only appended to, and the segments this reader
            // holds open stay readable even if compaction deletes them.
            let storage = Arc::new(SegmentStorage::open_read_only(dir)?);
            return Self::with_storage(storage, dir, false, None);
        }
        match SledStorage::open(dir) {
            Ok(s) => Self::with_storage(Arc::new(s), dir, false, None),
            Err(JournalError::Locked { .. }) => {
                static COPIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let copy = std::env::temp_dir().join(format!(
                    "bosun-journal-{}-{}-{}",
                    std::process::id(),
                    now_ms(),
                    COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                ));
                tempfile_dir::copy_dir(dir, &copy).map_err(|source| JournalError::Io {
                    path: dir.to_path_buf(),
                    source,
                })?;
                let guard = tempfile_dir::TempCopy(copy.clone());
                let storage = Arc::new(SledStorage::open(&copy)?);
                Self::with_storage(storage, dir, false, Some(guard))
            }
            Err(e) => Err(e),
        }
    }

    /// Opens a journal on any storage.
    pub fn with_storage(
        storage: Arc<dyn Storage>,
        dir: &Path,
        writable: bool,
        temp: Option<tempfile_dir::TempCopy>,
    ) -> Result<Journal<E>, JournalError> {
        match storage.meta("format")? {
            Some(f) if f == FORMAT => {}
            Some(other) => {
                return Err(JournalError::Storage {
                    path: dir.to_path_buf(),
                    message: format!(
                        "unknown journal format {:?}",
                        String::from_utf8_lossy(&other)
                    ),
                });
            }
            None => {
                if storage.last_event()?.is_some() || !storage.snapshots()?.is_empty() {
                    return Err(JournalError::NotAJournal {
                        path: dir.to_path_buf(),
                    });
                }
                if writable {
                    storage.set_meta("format", FORMAT)?;
                    storage.flush()?;
                }
            }
        }
        // Damage in the files themselves: a writer must not append after lost records.
        if writable && let Some(damage) = storage.damage().first() {
            return Err(damage.to_error());
        }
        let last = Self::check_tail(storage.as_ref(), writable)?;
        // Compaction may have dropped every event: numbering goes on after the newest
        // snapshot, which covers them.
        let last = last.max(storage.snapshots()?.last().map_or(0, |(s, _)| *s));
        let (durable_tx, durable) = watch::channel(last);
        let health = Health::default();
        let (tx, committer) = if writable {
            let (tx, rx) = std::sync::mpsc::channel::<AppendRequest>();
            let s = storage.clone();
            let h = health.clone();
            let handle = std::thread::Builder::new()
                .name("journal-commit".into())
                .spawn(move || commit_loop(s, rx, last, durable_tx, h))
                .map_err(|source| JournalError::Io {
                    path: dir.to_path_buf(),
                    source,
                })?;
            (Some(tx), Some(handle))
        } else {
            (None, None)
        };
        Ok(Journal {
            storage,
            health,
            path: dir.to_path_buf(),
            tx,
            durable,
            committer,
            _temp: temp,
            _event: PhantomData,
        })
    }

    /// Checks the last records; truncates a corrupt tail, refuses mid-log corruption.
    fn check_tail(storage: &dyn Storage, writable: bool) -> Result<u64, JournalError> {
        let tail = storage.last_events(TAIL_CHECK)?;
        let mut bad: Vec<u64> = Vec::new();
        let mut last_good = None;
        for (seq, bytes) in &tail {
            match raw_record(*seq, bytes) {
                Ok(_) => {
                    last_good = Some(*seq);
                    break;
                }
                Err(_) => bad.push(*seq),
            }
        }
        if let Some(good) = last_good
            && writable
        {
            // Anything bad before the last good record in the checked window is mid-log
            // (a reader meets it as an error when it gets there; `verify` lists it).
            for (seq, bytes) in tail.iter().filter(|(s, _)| *s < good) {
                if let Err(JournalError::Corrupt { reason, .. }) = raw_record(*seq, bytes) {
                    return Err(JournalError::Corrupt { seq: *seq, reason });
                }
            }
        }
        if let (Some(&from), Some(&to)) = (bad.last(), bad.first()) {
            tracing::warn!(
                from,
                to,
                "journal tail is torn or corrupt; truncating {} record(s); everything before survives",
                bad.len()
            );
            if writable {
                storage.remove_events(from, to)?;
                storage.flush()?;
            }
        }
        Ok(match last_good {
            Some(s) => s,
            // The whole window is bad or empty: the previous record (if any) is the end.
            None => bad.last().map(|s| s.saturating_sub(1)).unwrap_or(0),
        })
    }

    /// Durably appends events; returns the sequence number of the last one. While the
    /// journal cannot write, each call is one more attempt (the one that finds the disk
    /// writable again recovers the journal).
    pub async fn append_batch(&self, events: &[E]) -> Result<u64, JournalError> {
        self.acknowledged(self.send(events)?).await
    }

    /// Hands events to the committer now, in order with every other append, and returns a
    /// future that resolves (with the last sequence number) once they are durable. For a
    /// caller that starts work while its events are being flushed; so while the journal
    /// cannot write it refuses at once, and no such work starts until a write succeeds.
    pub fn submit(
        &self,
        events: &[E],
    ) -> Result<
        impl std::future::Future<Output = Result<u64, JournalError>> + Send + 'static,
        JournalError,
    > {
        if let Some((_, error)) = self.health.failing() {
            return Err(JournalError::Storage {
                path: self.path.clone(),
                message: format!("the journal cannot write: {error}"),
            });
        }
        Ok(self.acknowledged(self.send(events)?))
    }

    fn acknowledged(
        &self,
        rx: oneshot::Receiver<Result<u64, AppendFailure>>,
    ) -> impl std::future::Future<Output = Result<u64, JournalError>> + Send + 'static {
        let path = self.path.clone();
        async move {
            rx.await
                .map_err(|_| JournalError::Closed)?
                .map_err(|failure| failure.at(path))
        }
    }

    /// Durably appends one event; returns its sequence number.
    pub async fn append(&self, event: &E) -> Result<u64, JournalError> {
        self.append_batch(std::slice::from_ref(event)).await
    }

    /// Queues events for the next group commit without waiting for it. They are written
    /// in order with every other append, so they are durable once any later acknowledged
    /// append is; for facts whose loss in a crash is harmless (progress markers).
    pub fn append_later(&self, events: &[E]) -> Result<(), JournalError> {
        self.send(events).map(|_| ())
    }

    /// Blocking variant of [`Journal::append_batch`] for synchronous callers.
    pub fn append_blocking(&self, events: &[E]) -> Result<u64, JournalError> {
        let rx = self.send(events)?;
        rx.blocking_recv()
            .map_err(|_| JournalError::Closed)?
            .map_err(|failure| failure.at(self.path.clone()))
    }

    fn send(
        &self,
        events: &[E],
    ) -> Result<oneshot::Receiver<Result<u64, AppendFailure>>, JournalError> {
        let payloads = events
            .iter()
            .map(|e| serde_json::to_vec(e).map(|p| (E::VERSION, p)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| JournalError::Encode {
                what: "event",
                message: e.to_string(),
            })?;
        let (reply, rx) = oneshot::channel();
        let tx = self.tx.as_ref().ok_or_else(|| JournalError::Storage {
            path: self.path.clone(),
            message: "opened read-only".into(),
        })?;
        let bytes: usize = payloads.iter().map(|(_, p)| p.len()).sum();
        tx.send(AppendRequest {
            body: Body::Events(payloads),
            reply,
            sent: std::time::Instant::now(),
        })
        .map_err(|_| JournalError::Closed)?;
        // The `metrics` facade: a no-op unless the process installed a recorder.
        metrics::counter!("bosun_journal_appends_total").increment(1);
        metrics::counter!("bosun_journal_append_bytes_total").increment(bytes as u64);
        Ok(rx)
    }

    /// The last durable sequence number (0 when empty).
    pub fn last_seq(&self) -> u64 {
        *self.durable.borrow()
    }

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

    /// Whether the journal can write (see [`Health`]).
    pub fn health(&self) -> Health {
        self.health.clone()
    }

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

    /// Writes raw bytes as a record (for corruption tests and tools).
    #[doc(hidden)]
    pub fn raw_put(&self, seq: u64, bytes: Vec<u8>) -> Result<(), JournalError> {
        self.storage.put_events(&[(seq, bytes)])?;
        self.storage.flush()
    }

    /// Encodes a valid record (for tests and tools).
    #[doc(hidden)]
    pub fn encode_record(seq: u64, event: &E) -> Vec<u8> {
        encode(
            seq,
            now_ms(),
            E::VERSION,
            &serde_json::to_vec(event).unwrap_or_default(),
        )
    }

    /// Closes the journal: waits until every queued append is durable.
    pub fn close(mut self) {
        self.tx.take();
        if let Some(h) = self.committer.take() {
            let _ = h.join();
        }
    }
}

impl<E> Journal<E> {
    /// The journal's folder.
    pub fn dir(&self) -> &Path {
        &self.path
    }
}

impl<E> Drop for Journal<E> {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.committer.take() {
            let _ = h.join();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
    struct Ev(u64);

    /// Why a test event cannot be decoded.
    #[derive(Debug, thiserror::Error)]
    enum EvError {
        #[error("missing n")]
        MissingN,
        #[error(transparent)]
        Json(#[from] serde_json::Error),
    }

    impl Versioned for Ev {
        const VERSION: u32 = 2;
        type Error = EvError;
        fn decode(version: u32, raw: Value) -> Result<Self, EvError> {
            match version {
                // Version 1 stored {"n": …}.
                1 => raw["n"].as_u64().map(Ev).ok_or(EvError::MissingN),
                _ => Ok(serde_json::from_value(raw)?),
            }
        }
    }

    #[test]
    fn reading_a_folder_without_a_journal_creates_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A folder bosun has just made, with its lock file and nothing else yet.
        std::fs::write(dir.path().join("lock"), b"").expect("lock");
        let err = Journal::<Ev>::open_read_only(dir.path())
            .err()
            .expect("no journal to read");
        assert!(matches!(err, JournalError::Empty { .. }), "{err}");
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("read_dir").count(),
            1,
            "nothing written"
        );
        // bosun then creates its journal there, with segment files.
        let j: Journal<Ev> = Journal::open(dir.path()).expect("open for writing");
        drop(j);
        assert!(Journal::<Ev>::open_read_only(dir.path()).is_ok());
    }

    /// The modes of `dir` and everything under it, as `(path, mode & 0o777)`.
    fn modes(dir: &Path) -> Vec<(PathBuf, u32)> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::symlink_metadata(dir).expect("metadata");
        let mut all = vec![(dir.to_path_buf(), meta.permissions().mode() & 0o777)];
        if meta.is_dir() {
            for entry in std::fs::read_dir(dir).expect("read_dir") {
                all.extend(modes(&entry.expect("entry").path()));
            }
        }
        all
    }

    fn assert_private(dir: &Path) {
        let all = modes(dir);
        assert!(all.len() > 2, "{all:?}");
        for (path, mode) in &all {
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        }
        assert_eq!(all[0].1, 0o700, "{all:?}");
    }

    #[tokio::test]
    async fn a_new_journal_is_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state").join("journal");
        let j: Journal<Ev> = Journal::open(&path).expect("open");
        j.append(&Ev(1)).await.expect("append");
        assert_private(&path);
        assert_eq!(modes(&path.join("..")).first().map(|m| m.1), Some(0o700));
    }

    #[tokio::test]
    async fn a_journal_readable_by_others_is_tightened_when_opened() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal");
        {
            let j: Journal<Ev> = Journal::open(&path).expect("open");
            j.append(&Ev(7)).await.expect("append");
        }
        // As an older bosun left it: 0755 folders, 0644 files.
        for (p, _) in modes(&path) {
            let mode = if p.is_dir() { 0o755 } else { 0o644 };
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        assert!(modes(&path).iter().all(|(_, m)| m & 0o044 == 0o044));
        let j: Journal<Ev> = Journal::open(&path).expect("reopen");
        assert_private(&path);
        let all: Vec<u64> = j.read_from(0).map(|r| r.expect("read").event.0).collect();
        assert_eq!(all, [7]);
    }

    #[tokio::test]
    async fn append_read_replay_and_snapshots() {
        let dir = tempfile::tempdir().expect("tempdir");
        let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
        assert_eq!(j.append(&Ev(1)).await.expect("append"), 1);
        assert_eq!(j.append_batch(&[Ev(2), Ev(3)]).await.expect("append"), 3);
        let all: Vec<u64> = j.read_from(0).map(|r| r.expect("read").event.0).collect();
        assert_eq!(all, [1, 2, 3]);
        j.save_snapshot(2, &3u64).expect("snapshot");
        let (sum, last) = j
            .replay::<u64, _>(None, true, |s, r| *s += r.event.0)
            .expect("replay");
        assert_eq!((sum, last), (6, 3));
        let (at2, _) = j
            .replay::<u64, _>(Some(2), false, |s, r| *s += r.event.0)
            .expect("replay");
        assert_eq!(at2, 3);
        assert_eq!(
            j.compact(&Retention {
                keep_snapshots: 1,
                ..Retention::default()
            })
            .expect("compact"),
            2
        );
        let (sum, _) = j
            .replay::<u64, _>(None, true, |s, r| *s += r.event.0)
            .expect("replay");
        assert_eq!(sum, 6, "snapshot + suffix after compaction");
    }

    #[tokio::test]
    async fn older_versions_upgrade_and_newer_ones_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
        j.raw_put(1, encode(1, 0, 1, br#"{"n":7}"#)).expect("put");
        j.raw_put(2, encode(2, 0, 9, b"1")).expect("put");
        let mut it = j.read_from(0);
        assert_eq!(it.next().and_then(Result::ok).map(|r| r.event), Some(Ev(7)));
        let err = it
            .next()
            .and_then(Result::err)
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("version 9") && err.contains("record 2"),
            "{err}"
        );
    }

    /// Appends nobody waits for share the flush of the next one somebody waits for, in
    /// order; alone, they are durable within the window all the same.
    #[tokio::test]
    async fn appends_nobody_waits_for_go_with_the_next_flush_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let j: Journal<Ev> = Journal::open(dir.path()).expect("open");
        j.append_later(&[Ev(1)]).expect("handed over");
        j.append_later(&[Ev(2)]).expect("handed over");
        let seq = j.append(&Ev(3)).await.expect("append");
        assert_eq!(seq, 3, "the later ones are numbered first");
        let events: Vec<Ev> = j.read_from(0).map(|r| r.expect("read").event).collect();
        assert_eq!(events, [Ev(1), Ev(2), Ev(3)]);

        j.append_later(&[Ev(4)]).expect("handed over");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while j.last_seq() < 4 {
            assert!(
                std::time::Instant::now() < deadline,
                "an append nobody waits for is durable within its window"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn subscribers_see_new_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let j: Arc<Journal<Ev>> = Arc::new(Journal::open(dir.path()).expect("open"));
        j.append(&Ev(1)).await.expect("append");
        let mut sub = j.subscribe(0);
        assert_eq!(sub.next().await.expect("first").event, Ev(1));
        let writer = j.clone();
        let w = tokio::spawn(async move { writer.append(&Ev(2)).await });
        let r = tokio::time::timeout(std::time::Duration::from_secs(10), sub.next())
            .await
            .expect("in time")
            .expect("record");
        assert_eq!((r.seq, r.event), (2, Ev(2)));
        let _ = w.await;
    }

    #[test]
    fn directories_that_are_not_journals_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("notes.txt"), "hello").expect("write");
        let err = Journal::<Ev>::open(dir.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("not a bosun journal"), "{err}");
        let err = Journal::<Ev>::open_read_only(&dir.path().join("nope"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("does not exist"), "{err}");
    }
}
