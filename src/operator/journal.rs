//! The journal as the engine's event sink, and replay at start.

use std::path::Path;
use std::sync::Arc;

use bosun_actors::ports::{BoxFut, EventSink, PortError};
use bosun_actors::{Event, State};
use bosun_journal::{Journal, Retention};

/// Events after the latest snapshot that make a start take a new one.
const SNAPSHOT_EVERY: u64 = 10_000;

/// Appends engine events to the journal.
pub struct JournalSink {
    journal: Journal<Event>,
}

impl EventSink for JournalSink {
    fn append(&self, events: Vec<Event>) -> BoxFut<'_, Result<u64, PortError>> {
        Box::pin(async move {
            self.journal
                .append_batch(&events)
                .await
                .map_err(|e| PortError(e.to_string()))
        })
    }
}

/// Opens the journal in `dir` and rebuilds the state from it (latest snapshot + the
/// events after it). When many events followed the latest snapshot, a new snapshot is
/// saved and events older than the oldest kept snapshot are dropped, so restarts stay fast.
pub fn open(dir: &Path) -> anyhow::Result<(Arc<dyn EventSink>, State)> {
    let journal: Journal<Event> = Journal::open(dir)?;
    let (state, last) = journal.replay::<State, _>(None, true, |s, r| s.apply(&r.event))?;
    let latest = journal.snapshots()?.last().map(|s| s.seq).unwrap_or(0);
    if last.saturating_sub(latest) >= SNAPSHOT_EVERY {
        journal.save_snapshot(last, &state)?;
        let dropped = journal.compact(&Retention::default())?;
        tracing::info!(seq = last, dropped, "journal snapshot saved");
    }
    Ok((Arc::new(JournalSink { journal }), state))
}
