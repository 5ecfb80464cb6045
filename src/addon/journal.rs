//! The journal as the engine's event sink, and replay at start.

use std::path::Path;
use std::sync::Arc;

use bosun_addon::ports::EventSink;
use bosun_addon::{Event, State};
use bosun_journal::{Journal, Retention};

/// Events after the latest snapshot that make a start, or the running compactor, take a
/// new one (`BOSUN_JOURNAL_SNAPSHOT_EVERY` sets another number).
const SNAPSHOT_EVERY: u64 = 10_000;

/// `BOSUN_JOURNAL_SNAPSHOT_EVERY`, or the default.
pub fn snapshot_every() -> u64 {
    std::env::var("BOSUN_JOURNAL_SNAPSHOT_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(SNAPSHOT_EVERY)
}

pub use crate::journal_sink::JournalSink;

/// How long a start waits for a journal held by another process (an inspection with
/// `bosun journal …`, or a previous bosun still shutting down).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Opens the journal, waiting up to `wait` while another process holds its lock.
fn open_waiting(dir: &Path, wait: std::time::Duration) -> anyhow::Result<Journal<Event>> {
    let deadline = std::time::Instant::now() + wait;
    let mut warned = false;
    loop {
        match Journal::open(dir) {
            Err(bosun_journal::JournalError::Locked { .. })
                if std::time::Instant::now() < deadline =>
            {
                if !warned {
                    tracing::warn!(journal = %dir.display(), "the journal is held by another process; waiting for it");
                    warned = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            other => return Ok(other?),
        }
    }
}

/// An opened journal: the engine's sink, the state rebuilt from it, and the journal itself
/// for readers in this process (the debug server's `/journal/…` views).
pub struct Opened {
    /// Where the engine appends.
    pub sink: Arc<dyn EventSink<Event>>,
    /// The state at the end of the journal.
    pub state: State,
    /// The journal, for reading.
    pub journal: Arc<Journal<Event>>,
    /// The sequence number `state` includes.
    pub last: u64,
}

/// Keeps the journal compact while bosun runs: every `every` events it rebuilds the state
/// at the newest durable record (the newest snapshot and the events after it, read back
/// from the journal), saves it as a snapshot and drops the events older than the oldest
/// kept snapshot. Without it, compaction ran only at start, so a long-running bosun's
/// journal (and the next start's replay, in time and memory) grew without bound.
///
/// Between snapshots it holds nothing but a sequence number: a copy of the state folded
/// record by record would double the memory of what is queued during a burst of events.
pub fn spawn_compactor(
    journal: Arc<Journal<Event>>,
    last: u64,
    every: u64,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut snapshot_at = last;
        let mut durable = journal.durable_watch();
        loop {
            let at = *durable.borrow_and_update();
            if at.saturating_sub(snapshot_at) < every {
                if durable.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let j = journal.clone();
            let done = tokio::task::spawn_blocking(move || {
                let (state, last) =
                    j.replay::<State, _>(Some(at), true, |s, r| s.apply(&r.event))?;
                j.save_snapshot(last, &state)?;
                j.compact(&Retention::default())
                    .map(|dropped| (last, dropped))
            })
            .await;
            // Whatever the outcome, the next attempt is `every` events later.
            snapshot_at = at;
            match done {
                Ok(Ok((seq, dropped))) => tracing::info!(seq, dropped, "journal snapshot saved"),
                Ok(Err(e)) => tracing::warn!(seq = at, "cannot compact the journal: {e}"),
                Err(e) => tracing::warn!(seq = at, "journal compaction stopped: {e}"),
            }
        }
    })
}

/// Opens the journal in `dir` and rebuilds the state from it (latest snapshot + the
/// events after it). When many events followed the latest snapshot, a new snapshot is
/// saved and events older than the oldest kept snapshot are dropped, so restarts stay fast.
pub fn open(dir: &Path) -> anyhow::Result<(Arc<dyn EventSink<Event>>, State)> {
    let opened = open_shared(dir, None)?;
    Ok((opened.sink, opened.state))
}

/// Like [`open`], keeping the journal for readers in this process; on an HA leader it is
/// served to standbys on `stream`.
pub fn open_shared(
    dir: &Path,
    stream: Option<&crate::ha::JournalStream>,
) -> anyhow::Result<Opened> {
    let journal = open_waiting(dir, LOCK_WAIT)?;
    let started = std::time::Instant::now();
    let (state, last) = journal.replay::<State, _>(None, true, |s, r| s.apply(&r.event))?;
    metrics::gauge!(bosun_addon::telemetry::JOURNAL_REPLAY_SECONDS)
        .set(started.elapsed().as_secs_f64());
    let latest = journal.snapshots()?.last().map(|s| s.seq).unwrap_or(0);
    if last.saturating_sub(latest) >= snapshot_every() {
        journal.save_snapshot(last, &state)?;
        let dropped = journal.compact(&Retention::default())?;
        tracing::info!(seq = last, dropped, "journal snapshot saved");
    }
    let journal = Arc::new(journal);
    let sink = Arc::new(JournalSink::new(journal.clone(), stream));
    Ok(Opened {
        sink,
        state,
        journal,
        last,
    })
}
