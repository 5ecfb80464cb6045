//! The record format: `crc32 | time_ms u64 | version u32 | payload (JSON)`, all
//! little-endian, stored under its big-endian sequence; the checksum covers the sequence
//! and everything after the checksum.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::error::JournalError;

/// The bytes before the payload.
pub(crate) const HEADER: usize = 4 + 8 + 4;

/// An event type the journal stores, with its encoding version and upgrades from older
/// encodings.
pub trait Versioned: Sized {
    /// The version this build writes.
    const VERSION: u32;
    /// Why a stored event cannot be decoded (its display text goes into
    /// [`crate::JournalError::Decode`]).
    type Error: std::error::Error;
    /// Decodes an event stored with `version` (≤ [`Self::VERSION`]).
    fn decode(version: u32, raw: Value) -> Result<Self, Self::Error>;
}

/// One journal record.
#[derive(Clone, Debug, PartialEq)]
pub struct Record<E> {
    /// Sequence number (1-based, gapless).
    pub seq: u64,
    /// When it was appended (unix milliseconds).
    pub time_ms: u64,
    /// Its event encoding version.
    pub version: u32,
    /// The event.
    pub event: E,
}

impl<E> Record<E> {
    /// When it was appended, as RFC 3339 with milliseconds ([`time_text`]).
    pub fn time_text(&self) -> String {
        time_text(self.time_ms)
    }
}

/// A journal time (unix milliseconds) as RFC 3339 with milliseconds, UTC: the one form
/// every view of a journal prints (`bosun journal`, `bosun explain`, the debug views).
pub fn time_text(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + std::time::Duration::from_millis(ms)).to_string()
}

/// A record as stored, event still JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct RawRecord {
    /// Sequence number.
    pub seq: u64,
    /// Unix milliseconds.
    pub time_ms: u64,
    /// Event encoding version.
    pub version: u32,
    /// The event as JSON.
    pub event: Value,
    /// Stored size in bytes.
    pub size: usize,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(crate) fn encode(seq: u64, time_ms: u64, version: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + payload.len());
    v.extend_from_slice(&[0; 4]);
    v.extend_from_slice(&time_ms.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(payload);
    let crc = checksum(seq, &v[4..]);
    v[..4].copy_from_slice(&crc.to_le_bytes());
    v
}

pub(crate) fn checksum(seq: u64, body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_be_bytes());
    h.update(body);
    h.finalize()
}

/// Why a stored record cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RecordError {
    /// Shorter than its header.
    #[error("truncated: {len} bytes, header needs {HEADER}")]
    Truncated {
        /// Its length.
        len: usize,
    },
    /// The checksum does not match the sequence and body.
    #[error("checksum mismatch")]
    ChecksumMismatch,
}

/// Checks and splits a stored record: `(time_ms, version, payload)`.
pub(crate) fn decode(seq: u64, bytes: &[u8]) -> Result<(u64, u32, &[u8]), RecordError> {
    if bytes.len() < HEADER {
        return Err(RecordError::Truncated { len: bytes.len() });
    }
    let stored = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if stored != checksum(seq, &bytes[4..]) {
        return Err(RecordError::ChecksumMismatch);
    }
    let mut t = [0u8; 8];
    t.copy_from_slice(&bytes[4..12]);
    let mut v = [0u8; 4];
    v.copy_from_slice(&bytes[12..16]);
    Ok((
        u64::from_le_bytes(t),
        u32::from_le_bytes(v),
        &bytes[HEADER..],
    ))
}

pub(crate) fn raw_record(seq: u64, bytes: &[u8]) -> Result<RawRecord, JournalError> {
    let (time_ms, version, payload) = decode(seq, bytes).map_err(|e| JournalError::Corrupt {
        seq,
        reason: e.to_string(),
    })?;
    let event = serde_json::from_slice(payload).map_err(|e| JournalError::Corrupt {
        seq,
        reason: format!("payload is not JSON: {e}"),
    })?;
    Ok(RawRecord {
        seq,
        time_ms,
        version,
        event,
        size: bytes.len(),
    })
}
