//! The journal as a subsystem's actors see it: the runtime's `EventSink` port implemented
//! by `bosun_journal::Journal`, for any subsystem's event type.

use std::sync::Arc;

use bosun_journal::Journal;
use bosun_runtime::ports::{BoxFut, EventSink, PortError};

/// Appends a subsystem's events to its journal.
pub struct JournalSink<E> {
    journal: Arc<Journal<E>>,
}

impl<E> JournalSink<E> {
    /// The sink of `journal`.
    pub fn new(journal: Arc<Journal<E>>) -> JournalSink<E> {
        JournalSink { journal }
    }
}

impl<E> EventSink<E> for JournalSink<E>
where
    E: serde::Serialize
        + serde::de::DeserializeOwned
        + bosun_journal::Versioned
        + Send
        + Sync
        + 'static,
{
    fn append(&self, events: Vec<E>) -> BoxFut<'_, Result<u64, PortError>> {
        Box::pin(async move {
            self.journal
                .append_batch(&events)
                .await
                .map_err(|e| PortError(e.to_string()))
        })
    }

    fn append_later(&self, events: Vec<E>) -> Result<(), PortError> {
        self.journal
            .append_later(&events)
            .map_err(|e| PortError(e.to_string()))
    }

    fn submit(&self, events: Vec<E>) -> Result<BoxFut<'static, Result<u64, PortError>>, PortError> {
        let durable = self
            .journal
            .submit(&events)
            .map_err(|e| PortError(e.to_string()))?;
        Ok(Box::pin(async move {
            durable.await.map_err(|e| PortError(e.to_string()))
        }))
    }
}
