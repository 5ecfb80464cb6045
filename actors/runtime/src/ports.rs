//! The journal as the runtime's actors see it, and an in-memory journal for tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// A boxed future, so the port traits stay object safe.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A failure reported by an adapter, with its full message.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct PortError(pub String);

/// A failed Kubernetes call, sorted the way a controller reacts to it. Every subsystem's
/// cluster port returns it; the binary maps the client's errors to it in one place
/// (`bosun::kubernetes::cluster_error`).
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ClusterError {
    /// 404: the object (or its namespace) does not exist.
    #[error("{0}: not found")]
    NotFound(String),
    /// 409 on a write: the object changed since it was read (resourceVersion, uid).
    #[error("{0}: conflict")]
    Conflict(String),
    /// 409 `AlreadyExists` on a create.
    #[error("{0}: already exists")]
    AlreadyExists(String),
    /// 413 `RequestEntityTooLarge`, or etcd's "request is too large": the object would
    /// exceed what the API server stores.
    #[error("{what}: too large for the API server: {message}")]
    TooLarge {
        /// The object or request it was about.
        what: String,
        /// The API server's message.
        message: String,
    },
    /// Anything else, with the API server's or the client's message.
    #[error("{what}: {message}")]
    Other {
        /// The object or request it was about.
        what: String,
        /// What went wrong.
        message: String,
    },
}

impl ClusterError {
    /// A 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClusterError::NotFound(_))
    }

    /// A write refused because the object changed.
    pub fn is_conflict(&self) -> bool {
        matches!(self, ClusterError::Conflict(_))
    }
}

/// Durable storage of events (the journal), for events of type `E`.
pub trait EventSink<E>: Send + Sync + 'static {
    /// Appends events; resolves only once they are durable, with the last sequence number.
    fn append(&self, events: Vec<E>) -> BoxFut<'_, Result<u64, PortError>>;
    /// Queues events without waiting for them to be durable: they become durable with the
    /// next acknowledged append (order is kept). For progress markers whose loss in a crash
    /// only makes a retried task redo a step.
    fn append_later(&self, events: Vec<E>) -> Result<(), PortError>;
    /// Hands events to the journal now, in order with every other append, and returns a
    /// future that resolves once they are durable (for work that may start meanwhile).
    fn submit(&self, events: Vec<E>) -> Result<BoxFut<'static, Result<u64, PortError>>, PortError>;
}

/// A journal in memory: every event in order, each "durable" at once. Tests read what was
/// journaled with [`MemoryJournal::events`], or refuse appends with
/// [`MemoryJournal::fail_with`] to see how actors cope.
pub struct MemoryJournal<E> {
    inner: Arc<Mutex<MemoryInner<E>>>,
}

struct MemoryInner<E> {
    events: Vec<E>,
    failing: Option<String>,
}

impl<E> Clone for MemoryJournal<E> {
    fn clone(&self) -> Self {
        MemoryJournal {
            inner: self.inner.clone(),
        }
    }
}

impl<E> Default for MemoryJournal<E> {
    fn default() -> Self {
        MemoryJournal {
            inner: Arc::new(Mutex::new(MemoryInner {
                events: Vec::new(),
                failing: None,
            })),
        }
    }
}

impl<E: Clone> MemoryJournal<E> {
    /// A journal that already holds `events` (a restart).
    pub fn with(events: Vec<E>) -> MemoryJournal<E> {
        let j = MemoryJournal::default();
        j.lock().events = events;
        j
    }

    /// Every event journaled so far, in order.
    pub fn events(&self) -> Vec<E> {
        self.lock().events.clone()
    }

    /// Refuses every append with `message` (`None`: accept again).
    pub fn fail_with(&self, message: Option<&str>) {
        self.lock().failing = message.map(String::from);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner<E>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, events: Vec<E>) -> Result<u64, PortError> {
        let mut inner = self.lock();
        if let Some(m) = &inner.failing {
            return Err(PortError(m.clone()));
        }
        inner.events.extend(events);
        Ok(inner.events.len() as u64)
    }
}

impl<E: Clone + Send + 'static> EventSink<E> for MemoryJournal<E> {
    fn append(&self, events: Vec<E>) -> BoxFut<'_, Result<u64, PortError>> {
        let r = self.push(events);
        Box::pin(async move { r })
    }

    fn append_later(&self, events: Vec<E>) -> Result<(), PortError> {
        self.push(events).map(|_| ())
    }

    fn submit(&self, events: Vec<E>) -> Result<BoxFut<'static, Result<u64, PortError>>, PortError> {
        let seq = self.push(events)?;
        Ok(Box::pin(async move { Ok(seq) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_memory_journal_keeps_order_and_can_refuse() {
        let j = MemoryJournal::default();
        assert_eq!(j.append(vec![1, 2]).await, Ok(2));
        j.append_later(vec![3]).expect("accepted");
        j.fail_with(Some("disk full"));
        assert_eq!(j.append(vec![4]).await, Err(PortError("disk full".into())));
        j.fail_with(None);
        let ack = j.submit(vec![5]).expect("accepted");
        assert_eq!(ack.await, Ok(4));
        assert_eq!(j.events(), [1, 2, 3, 5]);
    }
}
