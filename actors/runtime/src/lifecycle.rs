//! The process's work gate, for a graceful stop and for fencing: once [`stop_starting`]
//! is called, no queue starts another task and no work queue hands out another key, while
//! the tasks already running finish ([`wait_idle`] waits for them).
//!
//! It is process-wide on purpose: a stop (SIGTERM, a lost lease) concerns every
//! subsystem hosted by the process at once, and a subsystem started later must see it too.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

// A stop signal, like SIGTERM's flag: global on purpose (see above).
static STOPPING: AtomicBool = AtomicBool::new(false);
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static CHANGED: Notify = Notify::const_new();

/// Stops every queue and work queue from starting new work. Cannot be undone: a process
/// that stopped starting work is on its way out.
pub fn stop_starting() {
    if !STOPPING.swap(true, Ordering::SeqCst) {
        tracing::info!(
            running = IN_FLIGHT.load(Ordering::SeqCst),
            "no new tasks start from now on"
        );
    }
    CHANGED.notify_waiters();
}

/// Whether [`stop_starting`] was called.
pub fn is_stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Tasks running now (started and not yet recorded as finished).
pub fn in_flight() -> usize {
    IN_FLIGHT.load(Ordering::SeqCst)
}

/// A running task; the count drops when it is dropped (after the task's end is journaled).
#[derive(Debug)]
pub struct InFlight(());

/// Counts a task as running until the returned guard is dropped.
pub fn task_started() -> InFlight {
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    InFlight(())
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        CHANGED.notify_waiters();
    }
}

/// Waits until no task runs, at most `grace`; returns how many still run.
pub async fn wait_idle(grace: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let notified = CHANGED.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let running = in_flight();
        if running == 0 {
            return 0;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return in_flight();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_running_tasks_then_reports_the_rest() {
        let a = task_started();
        let b = task_started();
        let waiter = tokio::spawn(wait_idle(Duration::from_secs(30)));
        drop(a);
        drop(b);
        assert_eq!(waiter.await.ok(), Some(0));
        let c = task_started();
        // Other tests of this crate may run queue tasks at the same time.
        assert!(wait_idle(Duration::from_millis(10)).await >= 1);
        drop(c);
    }
}
