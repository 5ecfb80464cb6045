//! The journal as the runtime's actors see it, and an in-memory journal for tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A boxed future, so the port traits stay object safe.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a failure should be met: the runner's error policy reads it, never the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// May pass by itself (an unreachable server, a timeout, a failing hook): retry.
    Transient,
    /// The object changed under us (409): read again, then retry.
    Conflict,
    /// Retrying the same input fails the same way (bad input, too large, not found).
    Permanent,
}

impl ErrorClass {
    /// A short lowercase name, for metric labels and logs.
    pub fn label(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Conflict => "conflict",
            ErrorClass::Permanent => "permanent",
        }
    }

    /// Whether trying again may succeed (transient failures and conflicts).
    pub fn is_retryable(self) -> bool {
        !matches!(self, ErrorClass::Permanent)
    }
}

/// An error that says how it should be met, so an error policy reads no message.
pub trait Classified {
    /// Its class.
    fn class(&self) -> ErrorClass;

    /// A delay the failure itself asked for (an HTTP `Retry-After`), if any.
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}

/// A failure reported by an adapter: its class and its full message (the display text).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{message}")]
pub struct PortError {
    class: ErrorClass,
    message: String,
}

impl PortError {
    /// A failure of the given class.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> PortError {
        PortError {
            class,
            message: message.into(),
        }
    }

    /// A failure that may pass by itself.
    pub fn transient(message: impl Into<String>) -> PortError {
        PortError::new(ErrorClass::Transient, message)
    }

    /// A write refused because the object changed.
    pub fn conflict(message: impl Into<String>) -> PortError {
        PortError::new(ErrorClass::Conflict, message)
    }

    /// A failure that retrying the same input repeats.
    pub fn permanent(message: impl Into<String>) -> PortError {
        PortError::new(ErrorClass::Permanent, message)
    }

    /// How the failure should be met.
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// Whether it may pass by itself.
    pub fn is_transient(&self) -> bool {
        self.class == ErrorClass::Transient
    }

    /// The message (the same as the display text).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same failure with `prefix` before its message (same class).
    pub fn context(self, prefix: impl std::fmt::Display) -> PortError {
        PortError {
            class: self.class,
            message: format!("{prefix}: {}", self.message),
        }
    }
}

impl Classified for PortError {
    fn class(&self) -> ErrorClass {
        self.class
    }
}

impl From<ClusterError> for PortError {
    fn from(e: ClusterError) -> PortError {
        PortError::new(e.class(), e.to_string())
    }
}

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

    /// How a controller meets it: a changed object or a create that lost a race is a
    /// conflict (read again); a missing or oversized object repeats on retry; anything
    /// else (unreachable, timeouts, 5xx) may pass.
    pub fn class(&self) -> ErrorClass {
        match self {
            ClusterError::Conflict(_) | ClusterError::AlreadyExists(_) => ErrorClass::Conflict,
            ClusterError::NotFound(_) | ClusterError::TooLarge { .. } => ErrorClass::Permanent,
            ClusterError::Other { .. } => ErrorClass::Transient,
        }
    }
}

impl Classified for ClusterError {
    fn class(&self) -> ErrorClass {
        ClusterError::class(self)
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
            return Err(PortError::transient(m.clone()));
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
        assert_eq!(
            j.append(vec![4]).await,
            Err(PortError::transient("disk full"))
        );
        j.fail_with(None);
        let ack = j.submit(vec![5]).expect("accepted");
        assert_eq!(ack.await, Ok(4));
        assert_eq!(j.events(), [1, 2, 3, 5]);
    }

    #[test]
    fn cluster_errors_keep_their_text_and_get_a_class() {
        let cases = [
            (
                ClusterError::NotFound("pods/a".into()),
                ErrorClass::Permanent,
            ),
            (
                ClusterError::Conflict("pods/a".into()),
                ErrorClass::Conflict,
            ),
            (
                ClusterError::AlreadyExists("pods/a".into()),
                ErrorClass::Conflict,
            ),
            (
                ClusterError::TooLarge {
                    what: "pods/a".into(),
                    message: "too big".into(),
                },
                ErrorClass::Permanent,
            ),
            (
                ClusterError::Other {
                    what: "pods/a".into(),
                    message: "connection refused".into(),
                },
                ErrorClass::Transient,
            ),
        ];
        for (e, class) in cases {
            let p = PortError::from(e.clone());
            assert_eq!(p.class(), class, "{e}");
            assert_eq!(p.to_string(), e.to_string());
        }
        let p = PortError::permanent("bad").context("hook a");
        assert_eq!(
            (p.to_string().as_str(), p.class()),
            ("hook a: bad", ErrorClass::Permanent)
        );
    }
}
