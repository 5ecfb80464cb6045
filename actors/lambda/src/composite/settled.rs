//! The settled parents of a CompositeController: a memo around its sync.
//!
//! ```text
//!   sync(key) ─► open: the parent's entry taken out (one sync per parent at a time)
//!     ├─ caches unchanged since it settled (change counts)? its request sent again
//!     │    └─ the same answer? ─► recall ─► close: the entry put back, its report
//!     └─ the steps ─► hook step: the same objects? the settled request sent again
//!          ├─ the same answer? ─► recall ─► close: the entry put back, its report
//!          └─ the plan applied ─► close: remembered when it wrote nothing
//! ```
//!
//! A sync that left nothing to do (every child as desired, nothing written, the status
//! as answered) is remembered per parent ([`Settled`]): which objects it saw (by uid and
//! resourceVersion, no copy of them), fingerprints of its request and answer, and the
//! request body as framing around the cache's own texts. The next sync of that parent
//! still calls the hook; when it sees the same objects and gets the same answer,
//! ManageChildren and the status write would do the same nothing, so they are skipped.
//! [`Memo::recall`] is the one place that decides to skip, [`Memo::close`] the one that
//! records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::shared_body::SharedBody;
use crate::keys::{GroupMap, ParentKey, uid_of};
use crate::ports::HookType;
use crate::steps::{SyncReport, digest_text};

/// The largest answer remembered by [`Settled`]; a parent with a larger answer always
/// takes the full path.
pub(super) const SETTLED_ANSWER_MAX: usize = 64 * 1024;

/// What the last sync of one parent saw and got, when it left nothing to do.
pub(super) struct Settled {
    /// The objects the request was made of: a fingerprint of [`seen`].
    seen: u128,
    /// The change counts of the caches the sync read ([`Composite::stamp`]), taken before
    /// it read them.
    stamp: Option<Vec<u64>>,
    /// The hook that answered.
    hook: HookType,
    /// The request body those objects made: sent again as it is while they stay the same
    /// (kept as framing around the cache's own texts of the objects).
    request: SharedBody,
    /// A fingerprint of the answer (the answer itself is not kept).
    answer: u128,
    /// The [`digest`]s of the request and the answer, as numbers.
    request_digest: u64,
    answer_digest: u64,
    resync_after: Option<Duration>,
    planned: Arc<[String]>,
    warnings: Vec<String>,
}

/// The settled parents of one controller, by parent key: one entry per parent at most,
/// dropped when its parent is gone (or no longer ours) and with the controller.
#[derive(Default)]
pub struct SettledParents(Mutex<HashMap<ParentKey, Box<Settled>>>);

impl Settled {
    /// The report of a sync that found this parent as it left it.
    fn report(&self) -> SyncReport {
        SyncReport {
            hook: Some(self.hook),
            resync_after: self.resync_after,
            request_digest: Some(digest_text(self.request_digest)),
            answer_digest: Some(digest_text(self.answer_digest)),
            planned: self.planned.clone(),
            warnings: self.warnings.clone(),
            ..SyncReport::default()
        }
    }
}

impl SettledParents {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ParentKey, Box<Settled>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, key: &ParentKey) -> Option<Box<Settled>> {
        self.lock().remove(key)
    }

    fn put(&self, key: &ParentKey, settled: Box<Settled>) {
        self.lock().insert(key.clone(), settled);
    }

    /// How many parents are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no parent is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a request is made of, as text: `finalizing`, then the parent, each observed child
/// and each related object by group, key, uid and resourceVersion (each part prefixed by
/// its length). The same text means the same request body: an object is the same at the
/// same uid and resourceVersion. `None` when some object has no uid or resourceVersion.
pub(super) fn seen(
    parent: &Value,
    observed: &GroupMap,
    related: &GroupMap,
    finalizing: bool,
) -> Option<String> {
    fn part(out: &mut String, s: &str) {
        use std::fmt::Write;
        let _ = write!(out, "{}:{s}", s.len());
    }
    fn object(out: &mut String, key: &str, o: &Value) -> Option<()> {
        let version = o["metadata"]["resourceVersion"]
            .as_str()
            .filter(|v| !v.is_empty())?;
        let uid = Some(uid_of(o)).filter(|u| !u.is_empty())?;
        part(out, key);
        part(out, uid);
        part(out, version);
        Some(())
    }
    let mut out = String::with_capacity(256);
    object(&mut out, if finalizing { "finalizing" } else { "" }, parent)?;
    for map in [observed, related] {
        for (group, objects) in map {
            part(&mut out, group);
            part(&mut out, &objects.len().to_string());
            for (key, o) in objects {
                object(&mut out, key, o)?;
            }
        }
        out.push('|');
    }
    Some(out)
}

/// How a sync ended, as the memo sees it.
pub(super) enum Synced {
    /// The parent found as it settled: the same request answered the same.
    Recalled(Box<Settled>),
    /// The parent is gone or not ours.
    Gone,
    /// The steps ran to the end; `settles`: the plan wrote nothing (its status write is
    /// checked here).
    Done {
        report: Box<SyncReport>,
        settles: bool,
    },
}

/// What a settled parent is remembered by when a sync leaves nothing to do, but for
/// what only the sync's end knows (its resync and planned children).
pub(super) struct Remember {
    pub seen: u128,
    pub hook: HookType,
    pub request: SharedBody,
    pub answer: u128,
    pub request_digest: u64,
    pub answer_digest: u64,
    pub warnings: Vec<String>,
}

/// The memo of one sync of one parent: its settled entry, taken out for the sync.
pub(super) struct Memo<'a> {
    parents: &'a SettledParents,
    key: &'a ParentKey,
    entry: Option<Box<Settled>>,
    /// The caches' change counts, taken before the sync read them.
    stamp: Option<Vec<u64>>,
    /// A new answer to the settled request sent again: the full path takes it from here.
    answered: Option<(Bytes, Bytes)>,
    /// What to remember if the sync leaves nothing to do.
    remember: Option<Box<Settled>>,
}

impl SettledParents {
    /// The memo of a sync of `key`: its entry taken out (one sync per parent runs at a
    /// time); `stamp`: the change counts of the caches the sync reads, before it reads
    /// them.
    pub(super) fn open<'a>(&'a self, key: &'a ParentKey, stamp: Option<Vec<u64>>) -> Memo<'a> {
        Memo {
            parents: self,
            key,
            entry: self.take(key),
            stamp,
            answered: None,
            remember: None,
        }
    }
}

impl Memo<'_> {
    /// The settled request and the hook it went to, when nothing the sync reads has
    /// changed since the parent settled: to be sent again as it is, without reading the
    /// caches again.
    pub(super) fn unchanged_request(&self) -> Option<(HookType, Bytes)> {
        self.entry
            .as_ref()
            .filter(|s| self.stamp.is_some() && s.stamp == self.stamp)
            .map(|s| (s.hook, s.request.bytes()))
    }

    /// The settled request and its digest when the sync saw the same objects (`seen`);
    /// otherwise the entry is dropped: this sync cannot find the parent as it settled.
    pub(super) fn request_for(&mut self, seen: Option<u128>) -> Option<(Bytes, u64)> {
        self.entry = self.entry.take().filter(|s| seen == Some(s.seen));
        self.entry
            .as_ref()
            .map(|s| (s.request.bytes(), s.request_digest))
    }

    /// Keeps an answer to `request` (the settled request sent again) for the full path.
    pub(super) fn keep_answer(&mut self, request: Bytes, answer: Bytes) {
        self.answered = Some((request, answer));
    }

    /// The kept answer, when `body` is the request it answered.
    pub(super) fn answer_to(&mut self, body: &Bytes) -> Option<Bytes> {
        self.answered
            .take()
            .filter(|(r, _)| r == body)
            .map(|(_, a)| a)
    }

    /// The one decision to skip: the settled entry, when `hook` answered its request
    /// with the answer it settled on. ManageChildren and the status write would find
    /// nothing to do, as they did then.
    pub(super) fn recall(&mut self, hook: HookType, answer: &[u8]) -> Option<Box<Settled>> {
        self.entry
            .take_if(|s| s.hook == hook && s.answer == fingerprint(answer))
    }

    /// What to remember should this sync leave nothing to do.
    pub(super) fn remember(&mut self, r: Remember) {
        self.remember = Some(Box::new(Settled {
            seen: r.seen,
            stamp: self.stamp.clone(),
            hook: r.hook,
            request: r.request,
            answer: r.answer,
            request_digest: r.request_digest,
            answer_digest: r.answer_digest,
            resync_after: None,
            planned: Arc::default(),
            warnings: r.warnings,
        }));
    }

    /// The one place that records: a recalled entry is put back, a sync that wrote
    /// nothing is remembered, anything else leaves the parent unsettled.
    pub(super) fn close(self, synced: Synced) -> SyncReport {
        match synced {
            Synced::Recalled(s) => {
                let report = s.report();
                self.parents.put(self.key, s);
                report
            }
            Synced::Gone => SyncReport::default(),
            Synced::Done { report, settles } => {
                if let Some(mut s) = self.remember
                    && settles
                    && !report.status_written
                {
                    s.resync_after = report.resync_after;
                    s.planned = report.planned.clone();
                    self.parents.put(self.key, s);
                }
                *report
            }
        }
    }
}

/// A 128-bit fingerprint of `bytes` (two keyed SipHash runs), to tell whether a request or
/// an answer is the one seen before without keeping it: within one process, two
/// different texts have the same fingerprint with a chance of about 2⁻¹²⁸.
pub(super) fn fingerprint(bytes: &[u8]) -> u128 {
    use std::hash::Hasher;
    let run = |key: u8| {
        let mut h = std::hash::DefaultHasher::new();
        h.write_u8(key);
        h.write(bytes);
        h.finish()
    };
    (u128::from(run(1)) << 64) | u128::from(run(2))
}
