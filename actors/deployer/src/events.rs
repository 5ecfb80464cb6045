//! The deployer's journal: every phase an item goes through and every error recorded on
//! it, so `bosun journal` can tell why an item is not `Succeeded`. The cluster stays the
//! source of truth; nothing is replayed into the deployer at start.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::item::{ErrorCode, Phase};

/// The encoding version this build writes.
pub const EVENT_VERSION: u32 = 1;

/// One journaled deployer event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DeployerEvent {
    /// An item's phase changed.
    #[serde(rename_all = "camelCase")]
    DeployItemPhase {
        item: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<Phase>,
        to: Phase,
        generation: i64,
        #[serde(default, rename = "jobID", skip_serializing_if = "Option::is_none")]
        job_id: Option<String>,
        /// The objects the item manages (`Kind namespace/name`), when this run changed
        /// the list (`bosun explain` follows an object to its item through it). Absent in
        /// journals written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        managed: Option<Vec<String>>,
    },
    /// An error was recorded on an item (`lastError`).
    #[serde(rename_all = "camelCase")]
    DeployItemError {
        item: String,
        operation: String,
        reason: String,
        message: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        codes: Vec<ErrorCode>,
        /// When it is tried again (ms); `None`: the run failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_in_ms: Option<u64>,
    },
    /// The finalizer was removed after cleanup: the item can go.
    #[serde(rename_all = "camelCase")]
    DeployItemFinalized { item: String },
}

impl DeployerEvent {
    /// The item it is about (`deployitem/ns/name`).
    pub fn item(&self) -> &str {
        match self {
            DeployerEvent::DeployItemPhase { item, .. }
            | DeployerEvent::DeployItemError { item, .. }
            | DeployerEvent::DeployItemFinalized { item } => item,
        }
    }

    /// One readable line for the event, as `bosun journal deployer` and `bosun explain`
    /// print it.
    pub fn line(&self) -> String {
        match self {
            DeployerEvent::DeployItemPhase {
                item,
                from,
                to,
                generation,
                job_id,
                managed,
            } => {
                let from = from.map_or("-", |p| p.as_str());
                let job = job_id
                    .as_deref()
                    .map(|j| format!(", job {j}"))
                    .unwrap_or_default();
                let managed = match managed.as_deref() {
                    None => String::new(),
                    Some([]) => "; manages nothing now".into(),
                    Some(list) => format!("; manages {}", list.join(", ")),
                };
                format!("{item}: {from} → {to} (generation {generation}{job}){managed}")
            }
            DeployerEvent::DeployItemError {
                item,
                operation,
                reason,
                message,
                codes,
                retry_in_ms,
            } => {
                let codes: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
                let codes = if codes.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", codes.join(", "))
                };
                let retry = retry_in_ms.map_or(String::new(), |ms| format!(" (retry in {ms} ms)"));
                format!("{item}: error in {operation}: {reason}: {message}{codes}{retry}")
            }
            DeployerEvent::DeployItemFinalized { item } => {
                format!("{item}: cleaned up, finalizer removed")
            }
        }
    }
}

impl bosun_journal::Versioned for DeployerEvent {
    const VERSION: u32 = EVENT_VERSION;
    type Error = EventDecodeError;

    fn decode(version: u32, raw: Value) -> Result<Self, EventDecodeError> {
        if version > EVENT_VERSION {
            return Err(EventDecodeError::TooNew { version });
        }
        Ok(serde_json::from_value(raw)?)
    }
}

/// A stored deployer event this build cannot read.
#[derive(Debug, thiserror::Error)]
pub enum EventDecodeError {
    /// Written by a newer bosun.
    #[error("deployer event version {version} is newer than this bosun ({EVENT_VERSION})")]
    TooNew {
        /// Its version.
        version: u32,
    },
    /// Not an event of this version (the field that is wrong is named).
    #[error(transparent)]
    Invalid(#[from] serde_json::Error),
}
