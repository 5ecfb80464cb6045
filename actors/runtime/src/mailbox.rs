//! Mailbox tracking. ractor has no mailbox-length API, so every message goes through a
//! [`Tracked`] handle that records a one-line summary when it is sent; the actor marks it
//! in progress when it starts handling it and done when it finishes. Work an actor starts
//! in the background (a task run, a hook process) is tracked as a job until it reports
//! back. The [`Mailboxes`] registry shows, per actor: pending messages, the one in
//! progress and since when, running jobs, the last handled messages and jobs, and
//! counters.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::clock::now_ms;

use ractor::{ActorRef, Message, MessagingErr};
use serde::Serialize;

/// A message that can describe itself in one line for mailbox dumps.
pub trait Describe {
    /// One line, e.g. `Enqueue GlobalHookRun:main:onStartup:hooks/a.sh`.
    fn summary(&self) -> String;
}

/// A message with the sequence number its mailbox entry is tracked under.
#[derive(Debug)]
pub struct Envelope<M> {
    /// Tracking number within the mailbox.
    pub seq: u64,
    /// The message.
    pub msg: M,
}

/// One pending message.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    /// Tracking number.
    pub seq: u64,
    /// What it is.
    pub summary: String,
    /// When it was sent (unix ms).
    pub sent_at_ms: u64,
}

/// The message being handled.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InProgress {
    /// What it is.
    pub summary: String,
    /// When handling started (unix ms).
    pub since_ms: u64,
    #[serde(skip)]
    started: Option<Instant>,
}

/// Background work started by an actor and not finished yet.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    /// Tracking number.
    pub id: u64,
    /// What it is.
    pub summary: String,
    /// When it started (unix ms).
    pub since_ms: u64,
    #[serde(skip)]
    started: Option<Instant>,
}

/// A message handled or a job finished, for the recent history.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Handled {
    /// What it was.
    pub summary: String,
    /// When it finished (unix ms).
    pub finished_at_ms: u64,
    /// How long it took, in milliseconds.
    pub duration_ms: u64,
    /// `handled` for messages; the job's outcome for jobs.
    pub outcome: String,
}

/// How many handled messages and finished jobs are remembered.
pub(crate) const RECENT: usize = 20;

/// What one actor's mailbox looks like now.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MailboxStats {
    /// Messages sent and not yet handled, oldest first.
    pub pending: VecDeque<Pending>,
    /// The message being handled.
    pub in_progress: Option<InProgress>,
    /// Messages received in total.
    pub received: u64,
    /// Messages handled in total.
    pub handled: u64,
    /// Longest handling time seen, in milliseconds.
    pub max_handling_ms: u64,
    /// Background work in progress, oldest first.
    pub jobs: Vec<Job>,
    /// Jobs finished in total.
    pub jobs_finished: u64,
    /// The last [`RECENT`] handled messages and finished jobs, newest last.
    pub recent: VecDeque<Handled>,
}

impl MailboxStats {
    pub(crate) fn remember(&mut self, done: Handled) {
        if self.recent.len() >= RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(done);
    }
}

/// Shared view of one mailbox.
#[derive(Clone, Debug, Default)]
pub struct MailboxHandle {
    stats: Arc<Mutex<MailboxStats>>,
    next: Arc<AtomicU64>,
}

impl MailboxHandle {
    fn lock(&self) -> MutexGuard<'_, MailboxStats> {
        // A panic while holding this lock only loses counters; keep going.
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a sent message and returns its tracking number.
    pub fn sent(&self, summary: String) -> u64 {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let mut s = self.lock();
        s.received += 1;
        s.pending.push_back(Pending {
            seq,
            summary,
            sent_at_ms: now_ms(),
        });
        seq
    }

    /// Forgets a message that could not be delivered.
    fn undeliverable(&self, seq: u64) {
        let mut s = self.lock();
        s.pending.retain(|p| p.seq != seq);
        s.received = s.received.saturating_sub(1);
    }

    /// The actor starts handling message `seq`.
    pub fn begin(&self, seq: u64) {
        let mut s = self.lock();
        let summary = match s.pending.iter().position(|p| p.seq == seq) {
            Some(i) => s.pending.remove(i).map(|p| p.summary).unwrap_or_default(),
            None => String::from("(untracked)"),
        };
        s.in_progress = Some(InProgress {
            summary,
            since_ms: now_ms(),
            started: Some(Instant::now()),
        });
    }

    /// The actor finished the message in progress.
    pub fn end(&self) {
        let mut s = self.lock();
        if let Some(p) = s.in_progress.take() {
            let took = p
                .started
                .map(|t| t.elapsed().as_millis() as u64)
                .unwrap_or(0);
            s.max_handling_ms = s.max_handling_ms.max(took);
            s.remember(Handled {
                summary: p.summary,
                finished_at_ms: now_ms(),
                duration_ms: took,
                outcome: "handled".into(),
            });
        }
        s.handled += 1;
    }

    /// The actor started background work; returns its tracking number.
    pub fn job_started(&self, summary: String) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().jobs.push(Job {
            id,
            summary,
            since_ms: now_ms(),
            started: Some(Instant::now()),
        });
        id
    }

    /// Background work `id` finished with `outcome` (e.g. `success`, `fail: …`).
    pub fn job_finished(&self, id: u64, outcome: String) {
        let mut s = self.lock();
        let Some(i) = s.jobs.iter().position(|j| j.id == id) else {
            return;
        };
        let job = s.jobs.remove(i);
        s.jobs_finished += 1;
        s.remember(Handled {
            summary: job.summary,
            finished_at_ms: now_ms(),
            duration_ms: job
                .started
                .map(|t| t.elapsed().as_millis() as u64)
                .unwrap_or(0),
            outcome,
        });
    }

    /// A copy of the current stats.
    pub fn stats(&self) -> MailboxStats {
        self.lock().clone()
    }
}

/// An actor reference whose sends are tracked.
#[derive(Debug)]
pub struct Tracked<M: Message + Describe> {
    actor: ActorRef<Envelope<M>>,
    mailbox: MailboxHandle,
}

impl<M: Message + Describe> Clone for Tracked<M> {
    fn clone(&self) -> Self {
        Tracked {
            actor: self.actor.clone(),
            mailbox: self.mailbox.clone(),
        }
    }
}

impl<M: Message + Describe> Tracked<M> {
    /// Wraps an actor and the mailbox handle it reports to.
    pub fn new(actor: ActorRef<Envelope<M>>, mailbox: MailboxHandle) -> Self {
        Tracked { actor, mailbox }
    }

    /// Sends a message.
    pub fn cast(&self, msg: M) -> Result<(), MessagingErr<Envelope<M>>> {
        let seq = self.mailbox.sent(msg.summary());
        self.actor
            .cast(Envelope { seq, msg })
            .inspect_err(|_| self.mailbox.undeliverable(seq))
    }

    /// The underlying actor.
    pub fn actor(&self) -> &ActorRef<Envelope<M>> {
        &self.actor
    }
}

/// A mailbox whose stats are read from elsewhere when asked: a reconcile loop's work
/// queue, whose waiting keys are its pending messages and whose syncs in flight its jobs.
pub trait MailboxSource: Send + Sync {
    /// What the mailbox looks like now.
    fn stats(&self) -> MailboxStats;
    /// Messages waiting (cheaper than [`MailboxSource::stats`]).
    fn depth(&self) -> usize;
}

#[derive(Clone)]
enum Entry {
    Tracked(MailboxHandle),
    Source(Arc<dyn MailboxSource>),
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entry::Tracked(h) => h.fmt(f),
            Entry::Source(_) => f.write_str("Source"),
        }
    }
}

impl Entry {
    fn stats(&self) -> MailboxStats {
        match self {
            Entry::Tracked(h) => h.stats(),
            Entry::Source(s) => s.stats(),
        }
    }

    fn depth(&self) -> usize {
        match self {
            Entry::Tracked(h) => h.lock().pending.len(),
            Entry::Source(s) => s.depth(),
        }
    }
}

/// All tracked mailboxes, by actor name.
#[derive(Clone, Debug, Default)]
pub struct Mailboxes {
    inner: Arc<Mutex<BTreeMap<String, Entry>>>,
}

impl Mailboxes {
    fn entries(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The handle for actor `name`, created on first use (a detached one when `name` is
    /// a registered source).
    pub fn handle(&self, name: &str) -> MailboxHandle {
        match self
            .entries()
            .entry(name.to_string())
            .or_insert_with(|| Entry::Tracked(MailboxHandle::default()))
        {
            Entry::Tracked(h) => h.clone(),
            Entry::Source(_) => MailboxHandle::default(),
        }
    }

    /// Shows `source` as actor `name` (replacing what was there).
    pub fn register(&self, name: &str, source: Arc<dyn MailboxSource>) {
        self.entries()
            .insert(name.to_string(), Entry::Source(source));
    }

    /// Stops tracking an actor.
    pub fn remove(&self, name: &str) {
        self.entries().remove(name);
    }

    /// Messages waiting in each mailbox (cheaper than a snapshot).
    pub fn depths(&self) -> Vec<(String, usize)> {
        let entries: Vec<(String, Entry)> = self
            .entries()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        entries.into_iter().map(|(k, v)| (k, v.depth())).collect()
    }

    /// Snapshot of every mailbox.
    pub fn snapshot(&self) -> BTreeMap<String, MailboxStats> {
        // Sources are read outside the registry's lock: they take locks of their own.
        let entries: Vec<(String, Entry)> = self
            .entries()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        entries.into_iter().map(|(k, v)| (k, v.stats())).collect()
    }
}

/// A job or message summary as a work queue reports it (pending and running entries are
/// built from its snapshot, not tracked one by one).
pub(crate) fn pending_since(seq: u64, summary: String, sent_at_ms: u64) -> Pending {
    Pending {
        seq,
        summary,
        sent_at_ms,
    }
}

/// A job running since `since_ms`.
pub(crate) fn job_since(id: u64, summary: String, since_ms: u64) -> Job {
    Job {
        id,
        summary,
        since_ms,
        started: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_in_progress_and_counters() {
        let h = MailboxHandle::default();
        let a = h.sent("first".into());
        let b = h.sent("second".into());
        assert_eq!(h.stats().pending.len(), 2);
        h.begin(b);
        let s = h.stats();
        assert_eq!(
            s.in_progress.as_ref().map(|p| p.summary.as_str()),
            Some("second")
        );
        assert_eq!(s.pending.iter().map(|p| p.seq).collect::<Vec<_>>(), [a]);
        h.end();
        h.begin(a);
        h.end();
        let s = h.stats();
        assert_eq!((s.received, s.handled, s.pending.len()), (2, 2, 0));
        assert!(s.in_progress.is_none());
        let recent: Vec<&str> = s.recent.iter().map(|r| r.summary.as_str()).collect();
        assert_eq!(recent, ["second", "first"]);
    }

    #[test]
    fn jobs_run_until_they_report_and_history_is_bounded() {
        let h = MailboxHandle::default();
        let job = h.job_started("task GlobalHookRun:main:onStartup:a.sh".into());
        let s = h.stats();
        assert_eq!(s.jobs.len(), 1);
        assert_eq!(s.jobs[0].summary, "task GlobalHookRun:main:onStartup:a.sh");
        h.job_finished(job, "fail: exit status 1".into());
        h.job_finished(job, "again".into());
        let s = h.stats();
        assert!(s.jobs.is_empty());
        assert_eq!(s.jobs_finished, 1);
        assert_eq!(
            s.recent.back().map(|r| r.outcome.as_str()),
            Some("fail: exit status 1")
        );
        for i in 0..(RECENT + 5) {
            let seq = h.sent(format!("m{i}"));
            h.begin(seq);
            h.end();
        }
        let s = h.stats();
        assert_eq!(s.recent.len(), RECENT);
        assert_eq!(
            s.recent.back().map(|r| r.summary.clone()),
            Some(format!("m{}", RECENT + 4))
        );
    }
}
