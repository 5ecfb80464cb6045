//! The one reconcile runner of level-triggered subsystems (the lambda controllers, their
//! registry, the deployer), modelled on kube-runtime's `Controller`: workers take keys from
//! a [`WorkQueue`], reconcile them, and the queue is told what comes next — nothing until a
//! change ([`Action::AwaitChange`]), again after a while ([`Action::Requeue`]), or, after a
//! failure, what the error policy says ([`Retry`]).
//!
//! ```text
//!   WorkQueue<K> ─get─► worker × n ─► Reconciler::reconcile(key)
//!        ▲                               │ Ok(report): requeue(report) → forget (+ add_after)
//!        │                               │ Err(e):     retry(e) → add_rate_limited | add_after
//!        └──────────── done(key) ◄─── Reconciler::finished(key, Outcome) (journal, views)
//! ```
//!
//! The queue ops happen before `finished`, so what `finished` records (a retry's delay)
//! is what the queue will do; `done` comes last, so a change that arrives meanwhile is
//! reconciled after `finished`, never beside it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::ports::{BoxFut, Classified, ErrorClass};
use crate::work_queue::{QueueKey, WorkQueue};

/// What a successful reconcile asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the key is queued again by a change.
    AwaitChange,
    /// Reconcile again after this long (a resync), unless a change comes first.
    Requeue(Duration),
}

impl Action {
    /// `Requeue(d)` for `Some(d)`, else `AwaitChange`.
    pub fn requeue_after(after: Option<Duration>) -> Action {
        after.map_or(Action::AwaitChange, Action::Requeue)
    }
}

/// How a failed reconcile is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// After the queue's per-key exponential backoff (client-go's rate limiter).
    Backoff,
    /// After this long, as the failure asked (a `Retry-After`), the backoff unchanged.
    After(Duration),
}

impl Retry {
    /// The default error policy, read from the error's class: a delay the failure asked
    /// for wins; otherwise every class backs off per key, as kube-runtime's does (a
    /// conflict is read again on the next try; a permanent failure is tried again, slower
    /// each time, in case what it depends on is fixed meanwhile).
    pub fn of(error: &impl Classified) -> Retry {
        if let Some(after) = error.retry_after() {
            return Retry::After(after);
        }
        match error.class() {
            ErrorClass::Transient | ErrorClass::Conflict | ErrorClass::Permanent => Retry::Backoff,
        }
    }
}

/// How one reconcile went, for [`Reconciler::finished`].
#[derive(Debug)]
pub struct Outcome<R, E> {
    /// The reconcile's report or error.
    pub result: Result<R, E>,
    /// For a failure: when the key is tried again.
    pub retry_in: Option<Duration>,
    /// How long the reconcile took.
    pub took: Duration,
}

/// A subsystem's reconcile of one key.
pub trait Reconciler<K>: Send + Sync + 'static {
    /// What a successful reconcile reports.
    type Report: Send;
    /// Why a reconcile failed, with its class for the error policy.
    type Error: Classified + Send;

    /// Brings the world in line for `key`.
    fn reconcile<'a>(&'a self, key: &'a K) -> BoxFut<'a, Result<Self::Report, Self::Error>>;

    /// What comes after a success.
    fn requeue(&self, report: &Self::Report) -> Action;

    /// The error policy: how a failure is retried ([`Retry::of`] its class unless
    /// overridden).
    fn retry(&self, error: &Self::Error) -> Retry {
        Retry::of(error)
    }

    /// Records the outcome (journal, views, Events) once the queue knows what comes next.
    fn finished<'a>(
        &'a self,
        key: &'a K,
        outcome: Outcome<Self::Report, Self::Error>,
    ) -> BoxFut<'a, ()>;
}

/// Starts `workers` workers (at least one) reconciling the keys of `queue`; they end when
/// the queue is shut down (or its work gate stops starting work).
pub fn run<K, R>(queue: &WorkQueue<K>, workers: usize, reconciler: Arc<R>) -> Vec<JoinHandle<()>>
where
    K: QueueKey + Sync,
    R: Reconciler<K>,
{
    (0..workers.max(1))
        .map(|_| {
            let (queue, reconciler) = (queue.clone(), Arc::clone(&reconciler));
            tokio::spawn(async move {
                while let Some(key) = queue.get().await {
                    let outcome = once(&queue, reconciler.as_ref(), &key).await;
                    reconciler.finished(&key, outcome).await;
                    queue.done(&key);
                }
            })
        })
        .collect()
}

/// Reconciles `key` once and tells the queue what comes next.
async fn once<K, R>(queue: &WorkQueue<K>, reconciler: &R, key: &K) -> Outcome<R::Report, R::Error>
where
    K: QueueKey + Sync,
    R: Reconciler<K>,
{
    let started = Instant::now();
    let result = reconciler.reconcile(key).await;
    let took = started.elapsed();
    let retry_in = match &result {
        Ok(report) => {
            queue.forget(key);
            if let Action::Requeue(after) = reconciler.requeue(report) {
                queue.add_after(key.clone(), after);
            }
            None
        }
        Err(e) => Some(match reconciler.retry(e) {
            Retry::Backoff => queue.add_rate_limited(key.clone()),
            Retry::After(after) => {
                queue.add_after(key.clone(), after);
                after
            }
        }),
    };
    Outcome {
        result,
        retry_in,
        took,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Fails `a` twice (backoff), asks `b` to come back in a second, leaves `c` alone.
    #[derive(Default)]
    struct Script {
        tries: Mutex<Vec<(&'static str, Result<Action, Retry>)>>,
        finished: Mutex<Vec<(&'static str, bool, Option<Duration>)>>,
    }

    /// The scripted failures: a backoff is a transient failure, a delay one that asked.
    impl Classified for Retry {
        fn class(&self) -> ErrorClass {
            ErrorClass::Transient
        }

        fn retry_after(&self) -> Option<Duration> {
            match self {
                Retry::Backoff => None,
                Retry::After(after) => Some(*after),
            }
        }
    }

    #[test]
    fn the_default_policy_backs_off_for_every_class_unless_a_delay_was_asked() {
        for class in [
            ErrorClass::Transient,
            ErrorClass::Conflict,
            ErrorClass::Permanent,
        ] {
            assert_eq!(
                Retry::of(&crate::PortError::new(class, "x")),
                Retry::Backoff
            );
        }
        let asked = Retry::After(Duration::from_secs(3));
        assert_eq!(Retry::of(&asked), asked);
    }

    impl Reconciler<&'static str> for Script {
        type Report = Action;
        type Error = Retry;

        fn reconcile<'a>(&'a self, key: &'a &'static str) -> BoxFut<'a, Result<Action, Retry>> {
            Box::pin(async move {
                let mut tries = self.tries.lock().unwrap_or_else(|p| p.into_inner());
                let before = tries.iter().filter(|(k, _)| k == key).count();
                let result = match (*key, before) {
                    ("a", 0 | 1) => Err(Retry::Backoff),
                    ("b", 0) => Ok(Action::Requeue(Duration::from_secs(1))),
                    ("d", 0) => Err(Retry::After(Duration::from_secs(3))),
                    _ => Ok(Action::AwaitChange),
                };
                tries.push((key, result));
                result
            })
        }

        fn requeue(&self, report: &Action) -> Action {
            *report
        }

        fn finished<'a>(
            &'a self,
            key: &'a &'static str,
            outcome: Outcome<Action, Retry>,
        ) -> BoxFut<'a, ()> {
            Box::pin(async move {
                self.finished
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((key, outcome.result.is_ok(), outcome.retry_in));
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_outcome_tells_the_queue_what_comes_next() {
        let queue: WorkQueue<&'static str> = WorkQueue::new();
        let script = Arc::new(Script::default());
        let workers = run(&queue, 2, Arc::clone(&script));
        for k in ["a", "b", "c", "d"] {
            queue.add(k);
        }
        // Paused time jumps ahead whenever every task waits: past the backoffs, the
        // resync and the Retry-After.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while script.finished.lock().map_or(0, |f| f.len()) < 8 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{:?}",
                script.finished
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        queue.shut_down();
        for w in workers {
            let _ = w.await;
        }
        let finished = script
            .finished
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default();
        let of = |k: &str| -> Vec<(bool, Option<Duration>)> {
            finished
                .iter()
                .filter(|(key, ..)| *key == k)
                .map(|(_, ok, retry)| (*ok, *retry))
                .collect()
        };
        let ms = Duration::from_millis;
        assert_eq!(
            of("a"),
            [(false, Some(ms(5))), (false, Some(ms(10))), (true, None)]
        );
        assert_eq!(of("b"), [(true, None), (true, None)], "resynced once");
        assert_eq!(of("c"), [(true, None)]);
        assert_eq!(of("d"), [(false, Some(ms(3000))), (true, None)]);
        // The Retry-After left the backoff alone, and a success forgets it.
        assert_eq!(queue.num_requeues(&"a"), 0);
        assert_eq!(queue.num_requeues(&"d"), 0);
    }
}
