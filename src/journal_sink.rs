//! The journal as a subsystem's actors see it: the runtime's `EventSink` port implemented
//! by `bosun_journal::Journal`, for any subsystem's event type.

use std::sync::Arc;

use bosun_journal::Journal;
use bosun_runtime::ports::{BoxFut, EventSink, PortError};

/// Appends a subsystem's events to its journal.
pub struct JournalSink<E> {
    journal: Arc<Journal<E>>,
    /// In the HA ack mode: what a standby has made durable; an append is acknowledged
    /// only once a standby holds it too.
    acks: Option<crate::ha::AckGate>,
}

impl<E> JournalSink<E>
where
    E: serde::Serialize
        + serde::de::DeserializeOwned
        + bosun_journal::Versioned
        + Send
        + Sync
        + 'static,
{
    /// The sink of `journal`; with a journal stream (the HA leader) served to standbys,
    /// and waiting for a standby's ack when the ack mode is on.
    pub fn new(
        journal: Arc<Journal<E>>,
        stream: Option<&crate::ha::JournalStream>,
    ) -> JournalSink<E> {
        let acks = stream.and_then(|s| {
            s.opened(&journal);
            s.ack_gate(journal.dir())
        });
        JournalSink { journal, acks }
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
            let seq = self
                .journal
                .append_batch(&events)
                .await
                .map_err(|e| PortError::transient(e.to_string()))?;
            if let Some(acks) = &self.acks {
                acks.wait(seq).await;
            }
            Ok(seq)
        })
    }

    fn append_later(&self, events: Vec<E>) -> Result<(), PortError> {
        self.journal
            .append_later(&events)
            .map_err(|e| PortError::transient(e.to_string()))
    }

    fn submit(&self, events: Vec<E>) -> Result<BoxFut<'static, Result<u64, PortError>>, PortError> {
        let durable = self
            .journal
            .submit(&events)
            .map_err(|e| PortError::transient(e.to_string()))?;
        let acks = self.acks.clone();
        Ok(Box::pin(async move {
            let seq = durable
                .await
                .map_err(|e| PortError::transient(e.to_string()))?;
            if let Some(acks) = &acks {
                acks.wait(seq).await;
            }
            Ok(seq)
        }))
    }
}
