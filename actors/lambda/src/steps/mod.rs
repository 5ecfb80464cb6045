//! The steps every lambda sync is made of, shared by the CompositeController
//! (`composite/`) and the DecoratorController (`decorator.rs`) syncs, and what a sync
//! answers.
//!
//! ```text
//!   finalizer.rs  the controller's finalizer added or removed (GET + PUT, retried on conflict)
//!   hook.rs       a bound hook, its call, the related objects of the customize hook, digests
//!   status.rs     the status written when it differs from the cached one
//! ```

mod finalizer;
mod hook;
mod status;

use std::sync::Arc;
use std::time::Duration;

use crate::children::Applied;
use bosun_runtime::ports::{Classified, ErrorClass, PortError};

use crate::ports::{ClusterError, HookError, HookType};

pub use finalizer::{FinalizerChange, set_finalizer};
pub use hook::{BoundHook, digest};
pub(crate) use hook::{call_hook, digest_text, fnv, related_of};
pub use status::write_status;

/// Why a sync did not complete.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum SyncError {
    /// The hook answered 429: requeue after this delay, no backoff, no event.
    #[error("{0}")]
    RetryAfter(HookError, Duration),
    /// Anything else: an event on the parent, then a rate-limited requeue.
    #[error("{0}")]
    Failed(PortError),
}

impl SyncError {
    /// A failure that may pass by itself (a hook or the API server failing).
    pub fn transient(message: impl Into<String>) -> SyncError {
        SyncError::Failed(PortError::transient(message))
    }

    /// A failure that the same parent and answers repeat (a refused answer or spec).
    pub fn permanent(message: impl Into<String>) -> SyncError {
        SyncError::Failed(PortError::permanent(message))
    }
}

impl Classified for SyncError {
    fn class(&self) -> ErrorClass {
        match self {
            SyncError::RetryAfter(..) => ErrorClass::Transient,
            SyncError::Failed(e) => e.class(),
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            SyncError::RetryAfter(_, after) => Some(*after),
            SyncError::Failed(_) => None,
        }
    }
}

impl From<HookError> for SyncError {
    fn from(e: HookError) -> Self {
        match e {
            HookError::TooManyRequests { retry_after, .. } => SyncError::RetryAfter(e, retry_after),
            other => SyncError::transient(other.to_string()),
        }
    }
}

impl From<ClusterError> for SyncError {
    fn from(e: ClusterError) -> Self {
        SyncError::Failed(PortError::from(e))
    }
}

/// What a completed sync did (for the journal and the debug view).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncReport {
    /// Which hook answered (none when the parent is gone or not ours).
    pub hook: Option<HookType>,
    pub resync_after: Option<Duration>,
    pub applied: Applied,
    pub status_written: bool,
    pub finalized: bool,
    /// A digest of the hook's request (the single-call path; rollouts make several).
    pub request_digest: Option<String>,
    /// A digest of the hook's answer.
    pub answer_digest: Option<String>,
    /// The children (or attachments) the answer asked for: `Kind.version key`.
    pub planned: Arc<[String]>,
    /// Strict-mode complaints tolerated in loose mode.
    pub warnings: Vec<String>,
}

/// `resyncAfterSeconds` of an answer as a delay (none when not positive).
pub(crate) fn resync_after(seconds: f64) -> Option<Duration> {
    (seconds > 0.0).then(|| Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_failure_keeps_its_text_and_class() {
        let cases = [
            (
                ClusterError::Conflict("ConfigMap ns/a".into()),
                ErrorClass::Conflict,
            ),
            (
                ClusterError::NotFound("ConfigMap ns/a".into()),
                ErrorClass::Permanent,
            ),
            (
                ClusterError::Other {
                    what: "ConfigMap ns/a".into(),
                    message: "connection refused".into(),
                },
                ErrorClass::Transient,
            ),
        ];
        for (e, class) in cases {
            let sync = SyncError::from(e.clone());
            assert_eq!(sync.to_string(), e.to_string());
            assert_eq!((sync.class(), sync.retry_after()), (class, None));
        }
    }
}
