//! The journal as the engine's event sink, and replay at start.

use std::path::Path;
use std::sync::Arc;

use bosun_actors::ports::{BoxFut, EventSink, PortError};
use bosun_actors::{Event, State};
use bosun_journal::Journal;

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

/// Opens the journal in `dir` and rebuilds the state from it (snapshot + events).
pub fn open(dir: &Path) -> anyhow::Result<(Arc<dyn EventSink>, State)> {
    let journal: Journal<Event> = Journal::open(dir)?;
    let (state, _) = journal.replay::<State, _>(None, true, |s, r| s.apply(&r.event))?;
    Ok((Arc::new(JournalSink { journal }), state))
}
