//! The committer thread (group commit: every queued append shares one flush) and the
//! journal's write health.

use std::sync::Arc;

use tokio::sync::{oneshot, watch};

use crate::Storage;
use crate::codec::{encode, now_ms};

pub(crate) struct AppendRequest {
    pub(crate) body: Body,
    pub(crate) reply: oneshot::Sender<Result<u64, AppendFailure>>,
    /// When it was handed to the committer: tells the appenders a batch's acknowledgement
    /// woke (they come back) from the ones that were already waiting.
    pub(crate) sent: std::time::Instant,
}

/// Why the committer did not acknowledge an append.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum AppendFailure {
    /// Records a standby received that do not follow this journal's last one.
    #[error(transparent)]
    Refused(#[from] crate::replica::StoredError),
    /// The batch could not be written or flushed (shared by every append of the batch).
    #[error(transparent)]
    Write(Arc<crate::JournalError>),
}

impl AppendFailure {
    /// The journal's error for the appender: a storage error naming the journal.
    pub(crate) fn at(self, path: std::path::PathBuf) -> crate::JournalError {
        crate::JournalError::Storage {
            path,
            message: self.to_string(),
        }
    }
}

impl AppendRequest {
    /// Whether somebody waits for its acknowledgement (not an `append_later`, nor an
    /// append whose caller gave up).
    fn waited_for(&self) -> bool {
        !self.reply.is_closed()
    }
}

/// What an append writes.
pub(crate) enum Body {
    /// New events `(version, payload)`: the committer numbers and stamps them.
    Events(Vec<(u32, Vec<u8>)>),
    /// Records as another journal stored them (a standby following its leader): written
    /// byte for byte, each numbered right after the last.
    Stored(Vec<(u64, Vec<u8>)>),
}

/// The longest a batch waits for the appenders the last acknowledgement woke.
const MAX_COHORT_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// The longest the committer polls for a next request after an acknowledgement before it
/// parks (never longer than the flush took).
const MAX_LINGER: std::time::Duration = std::time::Duration::from_micros(200);

/// After a poll that caught nothing, every how many acknowledgements the committer polls
/// again.
const LINGER_PROBE: u32 = 32;

/// The longest appends nobody waits for ([`crate::Journal::append_later`]) wait for a
/// flush they can share: they were never promised durable on their own, and a flush per
/// progress marker would load the disk (and whatever else writes to it) for nothing.
const LATER_WINDOW: std::time::Duration = std::time::Duration::from_millis(5);

/// The committer: drains every queued request, writes them as one batch, flushes once,
/// then acknowledges them all (group commit).
///
/// Appenders that append again as soon as they are acknowledged would otherwise settle into
/// two cohorts taking turns (one flushing while the other queues), each flush carrying half
/// of them. So a batch formed right after an acknowledgement waits briefly for the
/// appenders that acknowledgement woke: until as many requests as it acknowledged have come
/// back, or for at most half the last flush's duration. Requests arriving after that
/// window never wait.
/// How often a journal that cannot write tries its disk while nobody appends.
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) fn commit_loop(
    storage: Arc<dyn Storage>,
    rx: std::sync::mpsc::Receiver<AppendRequest>,
    mut last: u64,
    durable: watch::Sender<u64>,
    health: Health,
) {
    // (when the last batch was acknowledged, how many requests it held, until when to
    // wait for them)
    let mut woken: Option<(std::time::Instant, usize, std::time::Instant)> = None;
    // Until when to poll for the next request before parking: an appender that was just
    // acknowledged often sends its next event within microseconds, and catching it
    // without a wake-up saves a context switch per append. Only while that pays off: where
    // appends come far apart (a task's start, then its end a hook run later), polling
    // would take a core from the hooks; then it is tried again every `LINGER_PROBE` acks.
    let mut linger: Option<std::time::Instant> = None;
    let mut lingering = true;
    let mut acks_since_probe = 0u32;
    loop {
        let caught = linger.take().map(|until| poll_until(&rx, until));
        if let Some(caught) = &caught {
            lingering = caught.is_some();
        }
        let first = match caught.flatten() {
            Some(first) => first,
            // While writes fail, callers that refuse to start work on a failing journal
            // (`Journal::submit`) append nothing: the committer tries the disk itself.
            None if health.failing().is_some() => match rx.recv_timeout(PROBE_EVERY) {
                Ok(first) => first,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    match storage.recover().and_then(|()| storage.probe()) {
                        Ok(()) => health.wrote(),
                        Err(e) => tracing::debug!("the journal still cannot write: {e}"),
                    }
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(first) => first,
                Err(_) => break,
            },
        };
        // After a failed write the backend may refuse everything until it is reopened
        // (sled does, even once the disk has room again).
        if health.failing().is_some()
            && let Err(e) = storage.recover()
        {
            tracing::warn!("journal storage cannot be reopened yet: {e}");
        }
        let mut requests = vec![first];
        while let Ok(more) = rx.try_recv() {
            requests.push(more);
        }
        if let Some((acked_at, acked, until)) = woken.take() {
            let mut back = requests.iter().filter(|r| r.sent >= acked_at).count();
            // Polled, not parked: a parked committer would have every returning appender
            // wake it (a system call and a context switch each), which costs more than the
            // wait itself.
            while back < acked
                && let Some(more) = poll_until(&rx, until)
            {
                back += usize::from(more.sent >= acked_at);
                requests.push(more);
            }
        }
        if !requests.iter().any(AppendRequest::waited_for) {
            share_a_flush(&rx, &mut requests);
        }
        let time = now_ms();
        let mut records = Vec::new();
        let mut acks = Vec::with_capacity(requests.len());
        let mut seq = last;
        for req in requests {
            match req.body {
                Body::Events(payloads) => {
                    for (version, payload) in &payloads {
                        seq += 1;
                        records.push((seq, encode(seq, time, *version, payload)));
                    }
                }
                Body::Stored(stored) => {
                    if let Err(e) = crate::replica::check_stored(seq, &stored) {
                        let _ = req.reply.send(Err(e.into()));
                        continue;
                    }
                    seq += stored.len() as u64;
                    records.extend(stored);
                }
            }
            acks.push((req.reply, seq));
        }
        let flushing = std::time::Instant::now();
        let result = storage.put_events(&records).and_then(|_| storage.flush());
        match result {
            Ok(()) => {
                last = seq;
                health.wrote();
                let _ = durable.send(last);
                // Only appenders that wait are woken and may come back: the cohort (and the
                // linger after the flush) is theirs.
                let acked = acks.iter().filter(|(reply, _)| !reply.is_closed()).count();
                let window = flushing.elapsed().min(MAX_COHORT_WAIT) / 2;
                for (reply, s) in acks {
                    let _ = reply.send(Ok(s));
                }
                let now = std::time::Instant::now();
                woken = (acked > 1).then(|| (now, acked, now + window));
                acks_since_probe = (acks_since_probe + 1) % LINGER_PROBE;
                if acked > 0 && (lingering || acks_since_probe == 0) {
                    linger = Some(now + flushing.elapsed().min(MAX_LINGER));
                }
            }
            Err(e) => {
                // Nothing was acknowledged; remove what may have reached the tree so the
                // sequence stays gapless for the next batch.
                let _ = storage.remove_events(last + 1, seq);
                metrics::counter!("bosun_journal_write_errors_total").increment(1);
                health.failed(e.to_string());
                let e = Arc::new(e);
                for (reply, _) in acks {
                    let _ = reply.send(Err(AppendFailure::Write(e.clone())));
                }
            }
        }
    }
}

/// Holds a batch in which nobody waits (only `append_later`s) until one that somebody
/// waits for comes, or until its oldest request is [`LATER_WINDOW`] old: they are flushed
/// together. Every request still goes in order; a journal being dropped flushes at once.
fn share_a_flush(rx: &std::sync::mpsc::Receiver<AppendRequest>, requests: &mut Vec<AppendRequest>) {
    let Some(oldest) = requests.iter().map(|r| r.sent).min() else {
        return;
    };
    let until = oldest + LATER_WINDOW;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(more) => {
                let waited_for = more.waited_for();
                requests.push(more);
                if waited_for {
                    while let Ok(more) = rx.try_recv() {
                        requests.push(more);
                    }
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

/// The first request to arrive before `until`, polled without parking; `None` when none
/// came (or the journal was dropped).
pub(crate) fn poll_until(
    rx: &std::sync::mpsc::Receiver<AppendRequest>,
    until: std::time::Instant,
) -> Option<AppendRequest> {
    loop {
        match rx.try_recv() {
            Ok(request) => return Some(request),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
            Err(std::sync::mpsc::TryRecvError::Empty) if std::time::Instant::now() >= until => {
                return None;
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
}

/// Whether the journal can write: shared by the committer (which records failures and
/// recoveries) and whoever reports health (`/readyz`, `/healthz`).
#[derive(Clone, Debug, Default)]
pub struct Health {
    /// Unix ms of the first failed write since the last good one; 0 while writes work.
    failing_since_ms: Arc<std::sync::atomic::AtomicU64>,
    last_error: Arc<std::sync::Mutex<String>>,
}

impl Health {
    /// `Some((since_ms, error))` while writes fail.
    pub fn failing(&self) -> Option<(u64, String)> {
        let since = self
            .failing_since_ms
            .load(std::sync::atomic::Ordering::SeqCst);
        (since != 0).then(|| {
            let error = self
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            (since, error)
        })
    }

    fn failed(&self, error: String) {
        // The reason first: a reader that sees the journal failing always reads why.
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = error.clone();
        let first = self
            .failing_since_ms
            .compare_exchange(
                0,
                now_ms().max(1),
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
            )
            .is_ok();
        if first {
            tracing::error!(
                error = %error,
                "the journal cannot write: nothing more is acknowledged and no task starts until it can"
            );
            metrics::gauge!("bosun_journal_failing").set(1.0);
        }
    }

    fn wrote(&self) {
        if self
            .failing_since_ms
            .swap(0, std::sync::atomic::Ordering::SeqCst)
            != 0
        {
            tracing::info!("the journal writes again");
            metrics::gauge!("bosun_journal_failing").set(0.0);
        }
    }
}
