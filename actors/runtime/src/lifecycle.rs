//! The work gate, for a graceful stop and for fencing: once [`WorkGate::stop_starting`]
//! is called, no queue on the gate starts another task and no work queue on it hands out
//! another key, while the tasks already running finish ([`WorkGate::wait_idle`] waits for
//! them).
//!
//! One gate per host: a stop (SIGTERM, a lost lease) concerns every subsystem the host
//! runs at once, so the host hands the same gate to all of them; a queue made without one
//! has a gate of its own that nothing stops.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Whether new work may start, and how much runs; cheap to clone (one gate, shared).
#[derive(Clone, Debug, Default)]
pub struct WorkGate {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    stopping: AtomicBool,
    in_flight: AtomicUsize,
    changed: Notify,
}

impl WorkGate {
    /// Stops every queue and work queue on the gate from starting new work. Cannot be
    /// undone: a host that stopped starting work is on its way out.
    pub fn stop_starting(&self) {
        if !self.inner.stopping.swap(true, Ordering::SeqCst) {
            tracing::info!(running = self.in_flight(), "no new tasks start from now on");
        }
        self.inner.changed.notify_waiters();
    }

    /// Whether [`Self::stop_starting`] was called.
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::SeqCst)
    }

    /// Tasks running now (started and not yet recorded as finished).
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// Counts a task as running until the returned guard is dropped.
    pub fn task_started(&self) -> InFlight {
        self.inner.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(&self.inner))
    }

    /// Waits until no task runs, at most `grace`; returns how many still run.
    pub async fn wait_idle(&self, grace: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let running = self.in_flight();
            if running == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.in_flight();
            }
        }
    }
}

/// A running task; the count drops when it is dropped (after the task's end is journaled).
#[derive(Debug)]
pub struct InFlight(Arc<Inner>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_running_tasks_then_reports_the_rest() {
        let gate = WorkGate::default();
        let a = gate.task_started();
        let b = gate.task_started();
        let waiter = tokio::spawn({
            let gate = gate.clone();
            async move { gate.wait_idle(Duration::from_secs(30)).await }
        });
        drop(a);
        drop(b);
        assert_eq!(waiter.await.ok(), Some(0));
        let c = gate.task_started();
        assert_eq!(gate.wait_idle(Duration::from_millis(10)).await, 1);
        drop(c);
        assert_eq!(gate.in_flight(), 0);
    }

    #[test]
    fn a_stopped_gate_stays_stopped_and_others_are_not() {
        let gate = WorkGate::default();
        let same = gate.clone();
        gate.stop_starting();
        gate.stop_starting();
        assert!(same.is_stopping());
        assert!(!WorkGate::default().is_stopping());
    }
}
