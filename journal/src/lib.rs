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
//! a standby writes, `replay.rs` reading, replay and following, `snapshots.rs`,
//! `compaction.rs`, `verify.rs` (and the journal's figures), `repair.rs`; this file the
//! [`Journal`] facade (open, append, close).

mod codec;
mod compaction;
mod error;
mod repair;
mod replay;
mod replica;
mod reset;
mod segment;
mod snapshots;
mod storage;
mod verify;
mod writer;

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{oneshot, watch};

pub use replica::{FollowFrom, stored_checksum};
pub use segment::{EXTEND_BY, SegmentOptions, SegmentStorage};
pub use storage::{Damage, SledStorage, Storage};

pub use codec::{RawRecord, Record, Versioned, time_text};
use codec::{decode, encode, now_ms, raw_record};
pub use compaction::Retention;
pub use error::JournalError;
pub use repair::repair;
pub use replay::Subscription;
pub use snapshots::SnapshotInfo;
pub use verify::{Stats, VerifyReport};
pub use writer::Health;
use writer::{AppendFailure, AppendRequest, Body, commit_loop};

const FORMAT: &[u8] = b"bosun-journal/1";
/// How many records at the tail are checked on open.
const TAIL_CHECK: usize = 1024;
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

    /// A new private folder `<temp dir>/<stem>-<n>`, the first `n` nobody has taken (its
    /// creation is the claim: two readers never share one).
    pub fn claim(stem: &str) -> std::io::Result<std::path::PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        for n in 0u32.. {
            let path = std::env::temp_dir().join(format!("{stem}-{n}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("no free name for a journal copy"))
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
pub(crate) const SUBSYSTEM_DIRS: &[&str] = &["lambda", "deployer"];

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
                let io = |source| JournalError::Io {
                    path: dir.to_path_buf(),
                    source,
                };
                let copy = tempfile_dir::claim(&format!(
                    "bosun-journal-{}-{}",
                    std::process::id(),
                    now_ms()
                ))
                .map_err(io)?;
                tempfile_dir::copy_dir(dir, &copy).map_err(io)?;
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

    /// Whether the journal can write (see [`Health`]).
    pub fn health(&self) -> Health {
        self.health.clone()
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

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
