//! The journal's errors, each naming the path or sequence involved.

use std::path::PathBuf;

/// Errors of the journal, naming the path or sequence involved.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The directory does not exist (and was not to be created).
    #[error("{path}: no journal here (the directory does not exist)")]
    Missing {
        /// Directory.
        path: PathBuf,
    },
    /// The directory exists and holds no journal yet (bosun may be creating it).
    #[error("{path}: no journal here yet (the directory holds no journal files)")]
    Empty {
        /// Directory.
        path: PathBuf,
    },
    /// The directory has files but is not a journal.
    #[error("{path}: not a bosun journal (found other files and no journal marker)")]
    NotAJournal {
        /// Directory.
        path: PathBuf,
    },
    /// Another process holds the journal open.
    #[error("{path}: the journal is locked by a running bosun; use read-only inspection")]
    Locked {
        /// Directory.
        path: PathBuf,
    },
    /// The storage layer failed.
    #[error("{path}: storage error: {message}")]
    Storage {
        /// Directory.
        path: PathBuf,
        /// The backend's message.
        message: String,
    },
    /// A record failed its checksum or could not be decoded, with good records after it.
    #[error(
        "journal record {seq} is corrupt ({reason}) and is followed by valid records; run `bosun journal repair` to drop it"
    )]
    Corrupt {
        /// The bad record.
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// Bytes in one of the journal's files are not valid: in a segment, with valid records
    /// after them (damage, not a torn tail), or a damaged snapshot or metadata file.
    #[error(
        "{file}: damaged bytes at offset {offset} ({}: {reason}); not a torn tail, so nothing after them is dropped silently: `bosun journal repair` (with bosun stopped) drops them and keeps every valid record",
        describe_records(.records)
    )]
    Damaged {
        /// The file.
        file: PathBuf,
        /// Where the damaged bytes start.
        offset: u64,
        /// Sequence numbers of the records lost there `(first, last)`, where known.
        records: Option<(u64, u64)>,
        /// What is wrong.
        reason: String,
    },
    /// `BOSUN_JOURNAL_BACKEND` names no backend.
    #[error("BOSUN_JOURNAL_BACKEND={value:?}: unknown journal backend (use `segments` or `sled`)")]
    UnknownBackend {
        /// The value given.
        value: String,
    },
    /// A record's event version is newer than this program understands.
    #[error(
        "journal record {seq} has event version {version}; this bosun reads versions up to {supported}"
    )]
    UnknownVersion {
        /// The record.
        seq: u64,
        /// Its version.
        version: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// A record's event could not be decoded.
    #[error("journal record {seq}: cannot decode event: {message}")]
    Decode {
        /// The record.
        seq: u64,
        /// Why.
        message: String,
    },
    /// Serialization of an event or snapshot failed.
    #[error("cannot encode {what}: {message}")]
    Encode {
        /// What.
        what: &'static str,
        /// Why.
        message: String,
    },
    /// The committer is gone (journal closed).
    #[error("the journal is closed")]
    Closed,
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

/// "record 5", "records 5 to 9", or that they are unknown.
pub(crate) fn describe_records(records: &Option<(u64, u64)>) -> String {
    match records {
        Some((a, b)) if a == b => format!("record {a}"),
        Some((a, b)) => format!("records {a} to {b}"),
        None => "records unknown".into(),
    }
}
