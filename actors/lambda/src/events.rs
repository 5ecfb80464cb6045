//! The lambda controllers' journal: each controller's lifecycle and each sync's outcome
//! (not every unchanged resync), so `bosun journal` explains why a parent is not
//! converged: the last hook answer or error, the children it could not apply, the next
//! retry. The cluster stays the source of truth; nothing is replayed into the
//! controllers at start.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::ControllerKind;

/// The encoding version this build writes.
pub const EVENT_VERSION: u32 = 1;

/// One journaled lambda event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum LambdaEvent {
    /// A controller started (or restarted with a changed spec).
    #[serde(rename_all = "camelCase")]
    ControllerStarted {
        kind: ControllerKind,
        name: String,
        generation: i64,
        /// A CompositeController's parent kind (journals written before it have none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_kind: Option<String>,
    },
    /// A controller stopped (deleted, changed or no longer selected).
    #[serde(rename_all = "camelCase")]
    ControllerStopped {
        kind: ControllerKind,
        name: String,
        reason: String,
    },
    /// A controller object could not be used.
    #[serde(rename_all = "camelCase")]
    ControllerRefused {
        kind: ControllerKind,
        name: String,
        error: String,
    },
    /// A sync changed something, or succeeded after failing.
    #[serde(rename_all = "camelCase")]
    Synced {
        controller: String,
        key: String,
        hook: String,
        answer: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        created: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        updated: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        deleted: Vec<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        status_written: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        finalized: bool,
    },
    /// A sync failed; it is retried after `retry_in_ms`. Every failure is journaled, with
    /// how many in a row this one makes (0 in journals written before it was counted).
    #[serde(rename_all = "camelCase")]
    SyncFailed {
        controller: String,
        key: String,
        error: String,
        retry_in_ms: u64,
        #[serde(default, skip_serializing_if = "is_zero")]
        failures: u32,
    },
}

/// For `skip_serializing_if`: a count that is zero.
pub(crate) fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl LambdaEvent {
    /// The parent key an event is about, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            LambdaEvent::Synced { key, .. } | LambdaEvent::SyncFailed { key, .. } => Some(key),
            _ => None,
        }
    }
}

impl LambdaEvent {
    /// One readable line for the event, as `bosun journal lambda` and `bosun explain`
    /// print it.
    pub fn line(&self) -> String {
        match self {
            LambdaEvent::ControllerStarted {
                kind,
                name,
                generation,
                ..
            } => {
                format!("{kind} {name} started (generation {generation})")
            }
            LambdaEvent::ControllerStopped { kind, name, reason } => {
                format!("{kind} {name} stopped: {reason}")
            }
            LambdaEvent::ControllerRefused { kind, name, error } => {
                format!("{kind} {name} refused: {error}")
            }
            LambdaEvent::Synced {
                controller,
                key,
                hook,
                answer,
                created,
                updated,
                deleted,
                status_written,
                finalized,
            } => {
                let mut parts = Vec::new();
                for (what, list) in [
                    ("created", created),
                    ("updated", updated),
                    ("deleted", deleted),
                ] {
                    if !list.is_empty() {
                        parts.push(format!("{what} {}", list.join(", ")));
                    }
                }
                if *status_written {
                    parts.push("status written".into());
                }
                if *finalized {
                    parts.push("finalized".into());
                }
                format!(
                    "{controller} {key}: {hook} hook answer {answer} applied: {}",
                    if parts.is_empty() {
                        "no change".to_string()
                    } else {
                        parts.join("; ")
                    }
                )
            }
            LambdaEvent::SyncFailed {
                controller,
                key,
                error,
                retry_in_ms,
                failures,
            } => {
                let nth = if *failures > 1 {
                    format!(" (failure {failures} in a row)")
                } else {
                    String::new()
                };
                format!("{controller} {key}: sync failed{nth}: {error} (retry in {retry_in_ms} ms)")
            }
        }
    }
}

impl bosun_journal::Versioned for LambdaEvent {
    const VERSION: u32 = EVENT_VERSION;

    type Error = EventDecodeError;

    fn decode(version: u32, raw: Value) -> Result<LambdaEvent, EventDecodeError> {
        if version > EVENT_VERSION {
            return Err(EventDecodeError::TooNew { version });
        }
        Ok(serde_json::from_value(raw)?)
    }
}

/// A stored lambda event this build cannot read.
#[derive(Debug, thiserror::Error)]
pub enum EventDecodeError {
    /// Written by a newer bosun.
    #[error("lambda event version {version} is newer than this bosun ({EVENT_VERSION})")]
    TooNew {
        /// Its version.
        version: u32,
    },
    /// Not an event of this version (the field that is wrong is named).
    #[error(transparent)]
    Invalid(#[from] serde_json::Error),
}
