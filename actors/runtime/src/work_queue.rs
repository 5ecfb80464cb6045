//! Keyed, rate-limited work queue for reconcile loops (like client-go's rate-limited
//! workqueue and kube-runtime's scheduler), with at most one sync per key in flight.
//!
//! ```text
//!  add(k) ─────────────────────────────────────┐
//!  add_after(k, d) ───────┐                    ▼
//!  add_rate_limited(k) ───┴─► delayed ─due─► ready ─get()─► in flight ─done(k)─► idle
//!   (RateLimiter picks d)     (earliest      (FIFO,            │
//!                              due wins)      no dups)         │ added again meanwhile:
//!                                              ▲               │ marked dirty
//!                                              └─── done(k) ───┘
//! ```
//!
//! [`QueueState`] holds the scheduling rules and takes `now` as an argument, so it is
//! tested without a runtime; [`WorkQueue`] is the cloneable async handle that workers
//! share, waking them through a [`Notify`] and `tokio::time` timers.
//!
//! Shutdown: after [`WorkQueue::shut_down`], `get()` returns `None` at once, even if keys
//! are still waiting. Syncs are level-triggered, so dropped keys are re-listed by whoever
//! runs next, and an operator that lost its leader lease must stop starting syncs
//! immediately. Syncs already in flight finish; their `done()` no longer requeues.
#![forbid(unsafe_code)]

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt::{self, Debug};
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::lifecycle::WorkGate;

use crate::clock::now_ms;
use crate::mailbox::{Handled, MailboxSource, MailboxStats, job_since, pending_since};

/// Bounds every queue key satisfies (`Ord` gives deterministic timer ties and snapshots).
pub trait QueueKey: Clone + Eq + Hash + Ord + Debug + Send + 'static {}

impl<T: Clone + Eq + Hash + Ord + Debug + Send + 'static> QueueKey for T {}

/// First per-key retry delay (client-go `DefaultControllerRateLimiter`).
pub(crate) const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(5);
/// Cap on the per-key retry delay.
pub(crate) const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(1000);
/// Sustained rate of rate-limited requeues across all keys, per second.
pub const DEFAULT_QPS: u32 = 10;
/// Rate-limited requeues allowed at once before `DEFAULT_QPS` applies.
pub const DEFAULT_BURST: u32 = 100;

// ---------------------------------------------------------------------------
// Rate limiter
// ---------------------------------------------------------------------------

/// Requeue delay = max(per-key exponential backoff, overall token bucket).
///
/// Same as client-go's `MaxOf(ItemExponentialFailureRateLimiter, BucketRateLimiter)`:
/// backoff protects a single broken object from hot-looping, the bucket protects the
/// API server when many objects fail at once.
#[derive(Debug, Clone)]
pub struct RateLimiter<K> {
    base_delay: Duration,
    max_delay: Duration,
    failures: HashMap<K, u32>,
    bucket: TokenBucket,
}

impl<K: QueueKey> Default for RateLimiter<K> {
    fn default() -> Self {
        Self::new(
            DEFAULT_BASE_DELAY,
            DEFAULT_MAX_DELAY,
            DEFAULT_QPS,
            DEFAULT_BURST,
        )
    }
}

impl<K: QueueKey> RateLimiter<K> {
    /// Backoff `base_delay * 2^failures` capped at `max_delay`, and a bucket of `qps`/`burst`
    /// (a `qps` or `burst` of 0 is treated as 1 so the queue can never stall for good).
    pub fn new(base_delay: Duration, max_delay: Duration, qps: u32, burst: u32) -> Self {
        Self {
            base_delay,
            max_delay,
            failures: HashMap::new(),
            bucket: TokenBucket::new(qps, burst),
        }
    }

    /// Records one more failure of `key` and returns how long to wait before retrying it.
    pub fn when(&mut self, key: &K, now: Instant) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let backoff = exponential_backoff(self.base_delay, self.max_delay, *failures);
        *failures = failures.saturating_add(1);
        // The token is taken even when the backoff is longer, as client-go's MaxOf does:
        // the bucket counts requeues, not how soon they run.
        backoff.max(self.bucket.reserve(now))
    }

    /// Clears `key`'s failure count; call after a successful sync or when the object is gone.
    pub fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    /// Consecutive failures recorded for `key` since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

/// `base * 2^exp`, saturating at `max` instead of overflowing.
fn exponential_backoff(base: Duration, max: Duration, exp: u32) -> Duration {
    2u32.checked_pow(exp)
        .and_then(|factor| base.checked_mul(factor))
        .map_or(max, |delay| delay.min(max))
}

/// Token bucket in reservation form (like `golang.org/x/time/rate`'s `Reserve`): every
/// call is granted, and the answer is how long the caller must wait for its token.
///
/// Kept as a "theoretical arrival time" (GCRA) instead of a fractional token count so it
/// is exact integer `Duration` arithmetic with no floating point drift.
#[derive(Debug, Clone)]
struct TokenBucket {
    /// Time to earn one token (1 s / qps).
    interval: Duration,
    /// Time to refill a full bucket (interval * burst).
    burst_window: Duration,
    /// When the tokens handed out so far would all have been earned; `None` = full bucket.
    tat: Option<Instant>,
}

impl TokenBucket {
    fn new(qps: u32, burst: u32) -> Self {
        let interval = Duration::from_secs(1) / qps.max(1);
        Self {
            interval,
            burst_window: interval.saturating_mul(burst.max(1)),
            tat: None,
        }
    }

    /// Takes one token and returns the wait until it is actually available.
    fn reserve(&mut self, now: Instant) -> Duration {
        // An idle bucket refills: arrival time never lags behind `now`.
        let start = self.tat.map_or(now, |tat| tat.max(now));
        let tat = start + self.interval;
        self.tat = Some(tat);
        tat.saturating_duration_since(now)
            .saturating_sub(self.burst_window)
    }
}

// ---------------------------------------------------------------------------
// Scheduling state (no runtime needed)
// ---------------------------------------------------------------------------

/// A key currently handed to a worker.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    since: Instant,
    /// Added again while processing: goes back to `ready` on `done`.
    dirty: bool,
}

/// The queue's scheduling rules as plain data; every method takes the current time.
///
/// Invariants: a key is in at most one of `ready`/`delayed`; an in-flight key is never
/// in `ready` (a new add marks it dirty instead); a dirty key is never in `delayed`.
#[derive(Debug)]
pub struct QueueState<K> {
    ready: VecDeque<K>,
    /// Membership of `ready`, for O(1) dedup, with when each key became ready.
    queued: HashMap<K, Instant>,
    /// Ordered by due time, then key, so equal deadlines pop deterministically.
    delayed: BTreeSet<(Instant, K)>,
    /// Due time of each key in `delayed`, to find and replace its entry.
    due_at: HashMap<K, Instant>,
    in_flight: HashMap<K, InFlight>,
    limiter: RateLimiter<K>,
    shut_down: bool,
}

impl<K: QueueKey> Default for QueueState<K> {
    fn default() -> Self {
        Self::new(RateLimiter::default())
    }
}

impl<K: QueueKey> QueueState<K> {
    /// Empty queue using `limiter` for `add_rate_limited`.
    pub fn new(limiter: RateLimiter<K>) -> Self {
        Self {
            ready: VecDeque::new(),
            queued: HashMap::new(),
            delayed: BTreeSet::new(),
            due_at: HashMap::new(),
            in_flight: HashMap::new(),
            limiter,
            shut_down: false,
        }
    }

    /// Queues `key` now; no-op if already waiting, marks it dirty if in flight.
    pub fn add(&mut self, key: K, now: Instant) {
        self.promote_due(now);
        if self.shut_down {
            return;
        }
        // "Now" is earlier than any pending delay, so it replaces it (earliest wins).
        self.unschedule(&key);
        self.enqueue(key, now);
    }

    /// Queues `key` once `delay` has passed; an earlier pending schedule wins.
    pub fn add_after(&mut self, key: K, delay: Duration, now: Instant) {
        if delay.is_zero() {
            return self.add(key, now);
        }
        self.promote_due(now);
        let already_sooner =
            self.queued.contains_key(&key) || self.in_flight.get(&key).is_some_and(|f| f.dirty);
        if self.shut_down || already_sooner {
            return;
        }
        // A delay past the end of representable time is never due.
        let Some(due) = now.checked_add(delay) else {
            return;
        };
        match self.due_at.get(&key) {
            Some(&current) if current <= due => return,
            Some(&current) => {
                self.delayed.remove(&(current, key.clone()));
            }
            None => {}
        }
        self.due_at.insert(key.clone(), due);
        self.delayed.insert((due, key));
    }

    /// Records a failure of `key` and queues it after the rate limiter's delay (returned).
    pub fn add_rate_limited(&mut self, key: K, now: Instant) -> Duration {
        if self.shut_down {
            return Duration::ZERO;
        }
        let delay = self.limiter.when(&key, now);
        self.add_after(key, delay, now);
        delay
    }

    /// Clears `key`'s failure count (does not unqueue it).
    pub fn forget(&mut self, key: &K) {
        self.limiter.forget(key);
    }

    /// Consecutive failures recorded for `key`.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.limiter.num_requeues(key)
    }

    /// Hands out the oldest due key and marks it in flight; `None` if nothing is due.
    pub fn pop_due(&mut self, now: Instant) -> Option<K> {
        self.promote_due(now);
        if self.shut_down {
            return None;
        }
        let key = self.ready.pop_front()?;
        self.queued.remove(&key);
        self.in_flight.insert(
            key.clone(),
            InFlight {
                since: now,
                dirty: false,
            },
        );
        Some(key)
    }

    /// Ends processing of `key`; returns whether it was requeued because it was added meanwhile.
    pub fn done(&mut self, key: &K, now: Instant) -> bool {
        // Promote first so keys that fell due earlier stay ahead of the requeued one.
        self.promote_due(now);
        match self.in_flight.remove(key) {
            Some(InFlight { dirty: true, .. }) if !self.shut_down => {
                self.enqueue(key.clone(), now);
                true
            }
            _ => false,
        }
    }

    /// Earliest pending due time, for a worker's timer.
    pub fn next_due(&self) -> Option<Instant> {
        self.delayed.first().map(|(due, _)| *due)
    }

    /// Number of keys ready to be handed out at `now`.
    pub fn len(&mut self, now: Instant) -> usize {
        self.promote_due(now);
        self.ready.len()
    }

    /// Whether no key is ready at `now`.
    pub fn is_empty(&mut self, now: Instant) -> bool {
        self.len(now) == 0
    }

    /// Drops waiting and delayed keys and refuses new ones; in-flight keys may still finish.
    pub fn shut_down(&mut self) {
        self.shut_down = true;
        self.ready.clear();
        self.queued.clear();
        self.delayed.clear();
        self.due_at.clear();
        for flight in self.in_flight.values_mut() {
            flight.dirty = false;
        }
    }

    /// Whether `shut_down` was called.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// Debug view of every queued and in-flight key as of `now`.
    pub fn snapshot(&mut self, now: Instant) -> QueueSnapshot<K> {
        self.promote_due(now);
        let failures = |key: &K| self.limiter.num_requeues(key);
        let waiting = self
            .ready
            .iter()
            .map(|key| WaitingKey {
                key: key.clone(),
                waiting_for: self
                    .queued
                    .get(key)
                    .map_or(Duration::ZERO, |at| now.saturating_duration_since(*at)),
                failures: failures(key),
            })
            .collect();
        let delayed = self
            .delayed
            .iter()
            .map(|(due, key)| DelayedKey {
                key: key.clone(),
                due: *due,
                due_in: due.saturating_duration_since(now),
                failures: failures(key),
            })
            .collect();
        let mut in_flight: Vec<_> = self
            .in_flight
            .iter()
            .map(|(key, flight)| InFlightKey {
                key: key.clone(),
                running_for: now.saturating_duration_since(flight.since),
                dirty: flight.dirty,
                failures: failures(key),
            })
            .collect();
        // HashMap order is random; sort so repeated HTTP views are comparable.
        in_flight.sort_by(|a, b| a.key.cmp(&b.key));
        QueueSnapshot {
            waiting,
            delayed,
            in_flight,
            shut_down: self.shut_down,
        }
    }

    /// Moves every delayed key due at `now` to `ready` (or marks it dirty if in flight).
    fn promote_due(&mut self, now: Instant) {
        while self.delayed.first().is_some_and(|(due, _)| *due <= now) {
            if let Some((due, key)) = self.delayed.pop_first() {
                self.due_at.remove(&key);
                self.enqueue(key, due);
            }
        }
    }

    /// Removes `key`'s pending delayed entry, if any.
    fn unschedule(&mut self, key: &K) {
        if let Some(due) = self.due_at.remove(key) {
            self.delayed.remove(&(due, key.clone()));
        }
    }

    /// Makes `key` ready, or dirty if a worker holds it (never two workers on one key).
    fn enqueue(&mut self, key: K, now: Instant) {
        if let Some(flight) = self.in_flight.get_mut(&key) {
            flight.dirty = true;
        } else if let std::collections::hash_map::Entry::Vacant(e) = self.queued.entry(key.clone())
        {
            e.insert(now);
            self.ready.push_back(key);
        }
    }
}

/// Point-in-time view of a queue, for debugging endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSnapshot<K> {
    /// Keys ready now, in the order workers will get them.
    pub waiting: Vec<WaitingKey<K>>,
    /// Keys scheduled for later, soonest first.
    pub delayed: Vec<DelayedKey<K>>,
    /// Keys a worker is processing, sorted by key.
    pub in_flight: Vec<InFlightKey<K>>,
    /// Whether the queue was shut down.
    pub shut_down: bool,
}

/// A key ready to be handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingKey<K> {
    /// The key.
    pub key: K,
    /// How long it has been ready.
    pub waiting_for: Duration,
    /// Consecutive failures recorded by `add_rate_limited`.
    pub failures: u32,
}

/// A key waiting for its due time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayedKey<K> {
    /// The key.
    pub key: K,
    /// When it becomes ready.
    pub due: Instant,
    /// Time left until `due` (zero if overdue).
    pub due_in: Duration,
    /// Consecutive failures recorded by `add_rate_limited`.
    pub failures: u32,
}

/// A key a worker is processing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightKey<K> {
    /// The key.
    pub key: K,
    /// Time since a worker got it; a large value points at a stuck sync.
    pub running_for: Duration,
    /// Added again meanwhile, so it is requeued on `done`.
    pub dirty: bool,
    /// Consecutive failures recorded by `add_rate_limited`.
    pub failures: u32,
}

// ---------------------------------------------------------------------------
// Async handle
// ---------------------------------------------------------------------------

/// Cloneable handle to a queue shared by a controller's event sources and its workers.
pub struct WorkQueue<K> {
    shared: Arc<Shared<K>>,
}

struct Shared<K> {
    state: Mutex<QueueState<K>>,
    /// Once it stops starting work, `get` hands out no more keys.
    gate: WorkGate,
    /// Woken on every change that may let a waiting worker proceed or move its deadline.
    changed: Notify,
    /// Syncs finished, for the queue's mailbox view.
    history: Mutex<History<K>>,
}

/// What a queue's mailbox view remembers of finished syncs.
#[derive(Debug)]
struct History<K> {
    handled: u64,
    max_handling_ms: u64,
    /// The last syncs: key, and how it ended.
    recent: VecDeque<(K, Handled)>,
}

impl<K> Default for History<K> {
    fn default() -> Self {
        History {
            handled: 0,
            max_handling_ms: 0,
            recent: VecDeque::new(),
        }
    }
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// A work queue seen as a mailbox ([`WorkQueue::mailbox`]).
struct QueueMailbox<K> {
    queue: WorkQueue<K>,
    describe: fn(&K) -> String,
}

impl<K: QueueKey + Sync> MailboxSource for QueueMailbox<K> {
    fn stats(&self) -> MailboxStats {
        let describe = self.describe;
        let snap = self.queue.snapshot();
        let now = now_ms();
        let ago = |d: Duration| now.saturating_sub(u64::try_from(d.as_millis()).unwrap_or(0));
        let failed = |n: u32| {
            if n == 0 {
                String::new()
            } else {
                format!(", {n} failures in a row")
            }
        };
        let mut seq = 0u64;
        let mut next = || {
            seq += 1;
            seq
        };
        let mut pending: VecDeque<_> = snap
            .waiting
            .iter()
            .map(|w| {
                pending_since(
                    next(),
                    format!("sync {}{}", describe(&w.key), failed(w.failures)),
                    ago(w.waiting_for),
                )
            })
            .collect();
        pending.extend(snap.delayed.iter().map(|d| {
            pending_since(
                next(),
                format!(
                    "sync {} in {} ms{}",
                    describe(&d.key),
                    d.due_in.as_millis(),
                    failed(d.failures)
                ),
                now,
            )
        }));
        let jobs = snap
            .in_flight
            .iter()
            .map(|f| {
                job_since(
                    next(),
                    format!("sync {}", describe(&f.key)),
                    ago(f.running_for),
                )
            })
            .collect::<Vec<_>>();
        let h = self
            .queue
            .shared
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        MailboxStats {
            received: h.handled + (pending.len() + jobs.len()) as u64,
            handled: h.handled,
            max_handling_ms: h.max_handling_ms,
            jobs_finished: h.handled,
            recent: h
                .recent
                .iter()
                .map(|(key, done)| Handled {
                    summary: format!("sync {}", describe(key)),
                    ..done.clone()
                })
                .collect(),
            pending,
            jobs,
            in_progress: None,
        }
    }

    fn depth(&self) -> usize {
        let mut state = self.queue.lock();
        state.len(Instant::now()) + state.delayed.len()
    }
}

impl<K> Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue").finish_non_exhaustive()
    }
}

impl<K: QueueKey> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: QueueKey> WorkQueue<K> {
    /// Queue with client-go's default controller rate limiter.
    pub fn new() -> Self {
        Self::with_rate_limiter(RateLimiter::default())
    }

    /// Queue with client-go's default controller rate limiter on `gate` (the host's:
    /// its stop ends the workers' `get`).
    pub fn gated(gate: WorkGate) -> Self {
        Self::with_rate_limiter_on(RateLimiter::default(), gate)
    }

    /// Queue using `limiter` for `add_rate_limited`, on a gate of its own.
    pub fn with_rate_limiter(limiter: RateLimiter<K>) -> Self {
        Self::with_rate_limiter_on(limiter, WorkGate::default())
    }

    /// Queue using `limiter` for `add_rate_limited`, on `gate`.
    pub fn with_rate_limiter_on(limiter: RateLimiter<K>, gate: WorkGate) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(QueueState::new(limiter)),
                gate,
                changed: Notify::new(),
                history: Mutex::default(),
            }),
        }
    }

    /// Queues `key` now (deduplicated; requeued after `done` if currently in flight).
    pub fn add(&self, key: K) {
        self.lock().add(key, Instant::now());
        self.wake_workers();
    }

    /// Queues `key` after `delay`; an earlier pending schedule wins.
    pub fn add_after(&self, key: K, delay: Duration) {
        self.lock().add_after(key, delay, Instant::now());
        // Even a delayed key may move the earliest deadline workers sleep until.
        self.wake_workers();
    }

    /// Requeues `key` after its backoff / the global bucket allow; returns the delay chosen.
    pub fn add_rate_limited(&self, key: K) -> Duration {
        let delay = self.lock().add_rate_limited(key.clone(), Instant::now());
        tracing::trace!(?key, ?delay, "work queue: rate-limited requeue");
        self.wake_workers();
        delay
    }

    /// Clears `key`'s failure count; call after a successful sync.
    pub fn forget(&self, key: &K) {
        self.lock().forget(key);
    }

    /// Consecutive failures recorded for `key`.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().num_requeues(key)
    }

    /// Waits for the next due key and marks it in flight; `None` once shut down, or once
    /// its gate stops starting work ([`WorkGate::stop_starting`]).
    ///
    /// Cancel-safe: a key is taken only in the same poll that returns it.
    pub async fn get(&self) -> Option<K> {
        loop {
            if self.shared.gate.is_stopping() {
                return None;
            }
            // Register for wake-ups before looking at the state, so a change made between
            // the look and the wait is not missed (`notify_waiters` stores no permit).
            let mut changed = pin!(self.shared.changed.notified());
            changed.as_mut().enable();
            let next_due = {
                let mut state = self.lock();
                if let Some(key) = state.pop_due(Instant::now()) {
                    let more_ready = !state.ready.is_empty();
                    drop(state);
                    // Several keys can fall due on one timer; pass the baton so idle
                    // workers pick up the rest instead of waiting for the next add.
                    if more_ready {
                        self.wake_workers();
                    }
                    return Some(key);
                }
                if state.is_shut_down() {
                    return None;
                }
                state.next_due()
            };
            match next_due {
                Some(due) => {
                    tokio::select! {
                        () = changed.as_mut() => {}
                        () = tokio::time::sleep_until(due) => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// Marks `key` processed; requeues it if it was added while in flight.
    pub fn done(&self, key: &K) {
        let now = Instant::now();
        let (requeued, ran_for, outcome) = {
            let mut state = self.lock();
            let ran_for = state
                .in_flight
                .get(key)
                .map(|f| now.saturating_duration_since(f.since));
            let requeued = state.done(key, now);
            let failures = state.limiter.num_requeues(key);
            let outcome = match state.due_at.get(key) {
                Some(due) if failures > 0 => format!(
                    "failed ({failures} in a row); retry in {} ms",
                    due.saturating_duration_since(now).as_millis()
                ),
                Some(due) => format!(
                    "done; again in {} ms",
                    due.saturating_duration_since(now).as_millis()
                ),
                None if requeued => "done; changed meanwhile, queued again".to_string(),
                None => "done".to_string(),
            };
            (requeued, ran_for, outcome)
        };
        if let Some(took) = ran_for {
            let took = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
            let mut h = self
                .shared
                .history
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            h.handled += 1;
            h.max_handling_ms = h.max_handling_ms.max(took);
            if h.recent.len() >= crate::mailbox::RECENT {
                h.recent.pop_front();
            }
            h.recent.push_back((
                key.clone(),
                Handled {
                    summary: String::new(),
                    finished_at_ms: now_ms(),
                    duration_ms: took,
                    outcome,
                },
            ));
        }
        if requeued {
            self.wake_workers();
        }
    }

    /// The queue as an actor's mailbox (`bosun actors`): keys waiting and scheduled are
    /// its pending messages, syncs in flight its jobs, finished syncs its recent history;
    /// `describe` names a key there.
    pub fn mailbox(&self, describe: fn(&K) -> String) -> Arc<dyn MailboxSource>
    where
        K: Sync,
    {
        Arc::new(QueueMailbox {
            queue: self.clone(),
            describe,
        })
    }

    /// Stops handing out keys: blocked and future `get()` calls return `None`.
    pub fn shut_down(&self) {
        self.lock().shut_down();
        tracing::debug!("work queue: shut down");
        self.wake_workers();
    }

    /// Whether `shut_down` was called.
    pub fn is_shut_down(&self) -> bool {
        self.lock().is_shut_down()
    }

    /// Number of keys ready to be handed out now (not counting delayed or in-flight keys).
    pub fn len(&self) -> usize {
        self.lock().len(Instant::now())
    }

    /// Whether no key is ready now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Debug view of waiting, delayed and in-flight keys with their failure counts.
    pub fn snapshot(&self) -> QueueSnapshot<K> {
        self.lock().snapshot(Instant::now())
    }

    fn lock(&self) -> MutexGuard<'_, QueueState<K>> {
        // The lock is only held inside this module's methods, none of which panics halfway
        // through a mutation, so the state behind a poisoned lock is still consistent.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn wake_workers(&self) {
        // Wake all: workers are few, and each re-checks state and recomputes its timer.
        self.shared.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const MS: Duration = Duration::from_millis(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn state() -> (QueueState<&'static str>, Instant) {
        (QueueState::default(), Instant::now())
    }

    /// Pops everything due at `now` without finishing it.
    fn drain(q: &mut QueueState<&'static str>, now: Instant) -> Vec<&'static str> {
        std::iter::from_fn(|| q.pop_due(now)).collect()
    }

    // --- QueueState -------------------------------------------------------

    #[test]
    fn add_dedups_keys_already_waiting() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["a"], &["a"]),
            (&["a", "a", "a"], &["a"]),
            (&["a", "b", "a", "c", "b"], &["a", "b", "c"]),
            (&[], &[]),
        ];
        for (adds, want) in cases {
            let (mut q, t0) = state();
            for key in *adds {
                q.add(key, t0);
            }
            assert_eq!(q.len(t0), want.len(), "adds {adds:?}");
            assert_eq!(drain(&mut q, t0), *want, "adds {adds:?}");
        }
    }

    #[test]
    fn key_added_while_in_flight_is_requeued_once_after_done() {
        let (mut q, t0) = state();
        q.add("a", t0);
        assert_eq!(q.pop_due(t0), Some("a"));

        q.add("a", t0);
        q.add("a", t0);
        assert_eq!(
            q.pop_due(t0),
            None,
            "second worker must not get an in-flight key"
        );
        assert_eq!(q.len(t0), 0);

        assert!(q.done(&"a", t0 + MS), "dirty key goes back");
        assert_eq!(q.pop_due(t0 + MS), Some("a"));
        assert!(!q.done(&"a", t0 + MS), "no add meanwhile, no requeue");
        assert_eq!(q.pop_due(t0 + MS), None);
    }

    #[test]
    fn done_of_unknown_key_is_ignored() {
        let (mut q, t0) = state();
        assert!(!q.done(&"never-got", t0));
        q.add("a", t0);
        assert!(
            !q.done(&"a", t0),
            "done before get must not drop or duplicate"
        );
        assert_eq!(drain(&mut q, t0), ["a"]);
    }

    #[test]
    fn add_after_earliest_due_wins() {
        // (first delay, second delay, when the key becomes ready)
        let cases = [
            (ms(10), ms(50), ms(10)),
            (ms(50), ms(10), ms(10)),
            (ms(20), ms(20), ms(20)),
            (ms(30), Duration::ZERO, Duration::ZERO),
        ];
        for (first, second, due) in cases {
            let (mut q, t0) = state();
            q.add_after("a", first, t0);
            q.add_after("a", second, t0);
            if !due.is_zero() {
                assert_eq!(q.pop_due(t0 + due - MS), None, "{first:?} then {second:?}");
            }
            assert_eq!(q.pop_due(t0 + due), Some("a"), "{first:?} then {second:?}");
            q.done(&"a", t0 + due);
            assert_eq!(
                q.pop_due(t0 + ms(100)),
                None,
                "{first:?} then {second:?}: the later schedule must be dropped"
            );
        }
    }

    #[test]
    fn add_after_is_a_no_op_for_a_key_already_waiting() {
        let (mut q, t0) = state();
        q.add("a", t0);
        q.add_after("a", ms(10), t0);
        assert_eq!(drain(&mut q, t0), ["a"]);
        q.done(&"a", t0);
        assert_eq!(q.pop_due(t0 + ms(10)), None);
        assert!(q.snapshot(t0).delayed.is_empty());
    }

    #[test]
    fn keys_become_ready_in_due_order_then_add_order() {
        let (mut q, t0) = state();
        q.add_after("late", ms(30), t0);
        q.add_after("early", ms(10), t0);
        q.add_after("tie-b", ms(20), t0);
        q.add_after("tie-a", ms(20), t0);
        // Promoted at t0+25 (as a side effect of this add), so ahead of "now".
        q.add("now", t0 + ms(25));
        assert_eq!(
            drain(&mut q, t0 + ms(40)),
            ["early", "tie-a", "tie-b", "now", "late"]
        );
    }

    #[test]
    fn delayed_key_falling_due_while_in_flight_waits_for_done() {
        let (mut q, t0) = state();
        q.add("a", t0);
        assert_eq!(q.pop_due(t0), Some("a"));
        q.add_after("a", ms(5), t0);
        assert_eq!(q.pop_due(t0 + ms(10)), None, "still in flight");
        assert!(q.snapshot(t0 + ms(10)).in_flight[0].dirty);
        assert!(q.done(&"a", t0 + ms(12)));
        assert_eq!(q.pop_due(t0 + ms(12)), Some("a"));
    }

    #[test]
    fn rate_limited_requeue_while_in_flight_runs_after_done() {
        // client-go pattern: on error, AddRateLimited(key) then Done(key).
        let (mut q, t0) = state();
        q.add("a", t0);
        assert_eq!(q.pop_due(t0), Some("a"));
        assert_eq!(q.add_rate_limited("a", t0), ms(5));
        assert!(!q.done(&"a", t0));
        assert_eq!(q.pop_due(t0 + ms(4)), None);
        assert_eq!(q.pop_due(t0 + ms(5)), Some("a"));
        assert_eq!(q.num_requeues(&"a"), 1);
    }

    #[test]
    fn shut_down_drops_waiting_keys_and_ignores_new_ones() {
        let (mut q, t0) = state();
        q.add("waiting", t0);
        q.add_after("delayed", ms(5), t0);
        q.add("busy", t0);
        assert_eq!(q.pop_due(t0), Some("waiting"));
        q.add("waiting", t0); // dirty

        q.shut_down();
        q.add("new", t0);
        q.add_after("new-later", ms(1), t0);
        assert_eq!(q.add_rate_limited("new-failed", t0), Duration::ZERO);

        assert!(q.is_shut_down());
        assert_eq!(q.pop_due(t0 + ms(10)), None);
        assert!(
            !q.done(&"waiting", t0),
            "dirty key is not requeued after shutdown"
        );
        assert_eq!(q.next_due(), None);
        let snap = q.snapshot(t0 + ms(10));
        assert!(snap.waiting.is_empty() && snap.delayed.is_empty() && snap.in_flight.is_empty());
        assert!(snap.shut_down);
    }

    #[test]
    fn snapshot_shows_waiting_delayed_and_in_flight_with_failures() {
        let (mut q, t0) = state();
        q.add("running", t0);
        assert_eq!(q.pop_due(t0), Some("running"));
        q.add_rate_limited("failing", t0);
        q.add_rate_limited("failing", t0); // 2 failures; earliest (5 ms) wins
        q.add("waiting", t0);
        q.add("running", t0);

        let snap = q.snapshot(t0 + ms(2));
        assert_eq!(
            snap,
            QueueSnapshot {
                waiting: vec![WaitingKey {
                    key: "waiting",
                    waiting_for: ms(2),
                    failures: 0
                }],
                delayed: vec![DelayedKey {
                    key: "failing",
                    due: t0 + ms(5),
                    due_in: ms(3),
                    failures: 2,
                }],
                in_flight: vec![InFlightKey {
                    key: "running",
                    running_for: ms(2),
                    dirty: true,
                    failures: 0,
                }],
                shut_down: false,
            }
        );
    }

    // --- RateLimiter ------------------------------------------------------

    #[test]
    fn backoff_doubles_from_5ms_and_caps_at_1000s() {
        let cases = [
            (0, ms(5)),
            (1, ms(10)),
            (2, ms(20)),
            (3, ms(40)),
            (10, ms(5 * 1024)),
            (17, ms(5 * 131_072)), // 655.36 s, last uncapped step
            (18, Duration::from_secs(1000)),
            (31, Duration::from_secs(1000)),
            (32, Duration::from_secs(1000)), // 2^32 overflows u32
            (u32::MAX, Duration::from_secs(1000)),
        ];
        for (failures, want) in cases {
            assert_eq!(
                exponential_backoff(DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY, failures),
                want,
                "after {failures} failures"
            );
        }

        // Through the limiter, one failure per second so the bucket never interferes.
        let mut limiter = RateLimiter::default();
        let t0 = Instant::now();
        let got: Vec<_> = (0..20u32)
            .map(|i| limiter.when(&"k", t0 + Duration::from_secs(u64::from(i))))
            .collect();
        assert_eq!(&got[..4], [ms(5), ms(10), ms(20), ms(40)]);
        assert_eq!(got[17], ms(655_360));
        assert_eq!(got[18..], [Duration::from_secs(1000); 2]);
        assert_eq!(limiter.num_requeues(&"k"), 20);
    }

    #[test]
    fn forget_resets_backoff_for_that_key_only() {
        let mut limiter = RateLimiter::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            limiter.when(&"a", t0);
            limiter.when(&"b", t0);
        }
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.num_requeues(&"b"), 3);
        assert_eq!(limiter.when(&"a", t0), ms(5));
        assert_eq!(limiter.when(&"b", t0), ms(40));
    }

    #[test]
    fn bucket_allows_burst_of_100_then_10_per_second() {
        let mut bucket = TokenBucket::new(DEFAULT_QPS, DEFAULT_BURST);
        let t0 = Instant::now();
        let waits: Vec<_> = (0..150).map(|_| bucket.reserve(t0)).collect();
        assert!(waits[..100].iter().all(Duration::is_zero), "{waits:?}");
        for (i, wait) in waits[100..].iter().enumerate() {
            assert_eq!(*wait, ms(100) * (i as u32 + 1), "request {}", 101 + i);
        }
    }

    #[test]
    fn bucket_refills_while_idle() {
        let mut bucket = TokenBucket::new(10, 100);
        let t0 = Instant::now();
        for _ in 0..100 {
            bucket.reserve(t0);
        }
        // 1 s idle earns 10 tokens back, no more.
        let t1 = t0 + Duration::from_secs(1);
        let waits: Vec<_> = (0..11).map(|_| bucket.reserve(t1)).collect();
        assert!(waits[..10].iter().all(Duration::is_zero), "{waits:?}");
        assert_eq!(waits[10], ms(100));
        // A long idle refills to the burst, not beyond.
        let t2 = t1 + Duration::from_secs(3600);
        let waits: Vec<_> = (0..101).map(|_| bucket.reserve(t2)).collect();
        assert!(waits[..100].iter().all(Duration::is_zero));
        assert_eq!(waits[100], ms(100));
    }

    #[test]
    fn rate_limited_delay_is_max_of_backoff_and_bucket() {
        // Small bucket so both sides show: 1 qps, burst 1.
        let mut limiter = RateLimiter::new(ms(5), Duration::from_secs(1000), 1, 1);
        let t0 = Instant::now();
        let cases = [
            ("a", ms(5)),                  // backoff 5 ms > bucket 0
            ("b", Duration::from_secs(1)), // bucket 1 s > backoff 5 ms
            ("c", Duration::from_secs(2)), // bucket 2 s
            ("a", Duration::from_secs(3)), // bucket 3 s > backoff 10 ms
        ];
        for (key, want) in cases {
            assert_eq!(limiter.when(&key, t0), want, "{key}");
        }
        let t1 = t0 + Duration::from_secs(10);
        for _ in 0..10 {
            limiter.when(&"a", t1 + Duration::from_secs(60));
        }
        // 12 failures of "a": backoff 5 ms * 2^12 = 20.48 s beats a full bucket.
        assert_eq!(
            limiter.when(&"a", t1 + Duration::from_secs(120)),
            ms(20_480)
        );
    }

    // --- WorkQueue (paused tokio time) --------------------------------------

    #[tokio::test(start_paused = true)]
    async fn get_waits_until_a_delayed_key_is_due() {
        let q = WorkQueue::new();
        let t0 = Instant::now();
        q.add_after("a", ms(250));
        q.add_after("b", ms(100));
        assert_eq!(q.len(), 0);
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(t0.elapsed(), ms(100));
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(t0.elapsed(), ms(250));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_worker_wakes_for_an_earlier_add() {
        let q = WorkQueue::new();
        q.add_after("slow", Duration::from_secs(60));
        let worker = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::time::sleep(ms(10)).await;
        q.add("fast");
        let t0 = Instant::now();
        assert_eq!(worker.await.expect("worker panicked"), Some("fast"));
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_burst_of_150_is_spread_at_10_per_second() {
        let q = WorkQueue::new();
        let t0 = Instant::now();
        for key in 0..150u32 {
            q.add_rate_limited(key);
        }
        assert_eq!(
            q.len(),
            0,
            "even the burst waits the 5 ms first-failure backoff"
        );
        tokio::time::advance(ms(5)).await;
        assert_eq!(q.len(), 100);
        tokio::time::advance(ms(995)).await;
        assert_eq!(q.len(), 110, "then 10 per second");
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(q.len(), 150);

        let mut got = Vec::new();
        while let Some(key) = q.snapshot().waiting.first().map(|w| w.key) {
            assert_eq!(q.get().await, Some(key));
            q.done(&key);
            got.push(key);
        }
        assert_eq!(got, (0..150).collect::<Vec<_>>(), "FIFO in due order");
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn failing_key_backs_off_and_forget_resets() {
        let q = WorkQueue::new();
        q.add("obj");
        let mut gaps = Vec::new();
        for attempt in 0..6 {
            let key = q.get().await.expect("queue is open");
            let started = Instant::now();
            if attempt == 3 {
                // A success in the middle: the next failure starts over at 5 ms.
                q.forget(&key);
            }
            q.add_rate_limited(key);
            q.done(&key);
            gaps.push(started);
        }
        let gaps: Vec<_> = gaps.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps, [ms(5), ms(10), ms(20), ms(5), ms(10)]);
        assert_eq!(q.num_requeues(&"obj"), 3, "failures since the forget");
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_workers_never_share_a_key_and_see_every_add() {
        // More workers than keys: an idle worker is always there to grab a key that is
        // wrongly handed out twice.
        const WORKERS: usize = 8;
        const KEYS: u32 = 6;
        const ROUNDS: u32 = 30;

        use std::collections::HashSet;

        #[derive(Default)]
        struct Log {
            busy: HashSet<u32>,
            max_parallel: usize,
            last_add: HashMap<u32, Instant>,
            last_start: HashMap<u32, Instant>,
        }
        let log = Arc::new(Mutex::new(Log::default()));
        let syncs = Arc::new(AtomicUsize::new(0));
        let q = WorkQueue::<u32>::new();

        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                let (q, log, syncs) = (q.clone(), Arc::clone(&log), Arc::clone(&syncs));
                tokio::spawn(async move {
                    while let Some(key) = q.get().await {
                        {
                            let mut log = log.lock().expect("log lock");
                            assert!(log.busy.insert(key), "two workers on key {key}");
                            log.max_parallel = log.max_parallel.max(log.busy.len());
                            log.last_start.insert(key, Instant::now());
                        }
                        // Uneven sync times so adds land while keys are in flight.
                        tokio::time::sleep(ms(4 + u64::from(key % 3) * 3)).await;
                        log.lock().expect("log lock").busy.remove(&key);
                        syncs.fetch_add(1, Ordering::Relaxed);
                        q.done(&key);
                    }
                })
            })
            .collect();

        let mut adds = 0;
        for round in 0..ROUNDS {
            for key in (0..KEYS).filter(|key| (round + key) % 2 == 0) {
                log.lock()
                    .expect("log lock")
                    .last_add
                    .insert(key, Instant::now());
                q.add(key);
                adds += 1;
            }
            tokio::time::sleep(ms(3)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;

        let snap = q.snapshot();
        assert!(snap.waiting.is_empty() && snap.delayed.is_empty() && snap.in_flight.is_empty());
        {
            let log = log.lock().expect("log lock");
            assert!(log.max_parallel > 1, "test must exercise concurrency");
            for (key, added) in &log.last_add {
                assert!(
                    log.last_start[key] >= *added,
                    "key {key}: last add at {added:?} never got a sync after it"
                );
            }
        }
        let syncs = syncs.load(Ordering::Relaxed);
        assert!(
            syncs < adds,
            "adds while queued coalesce: {syncs} syncs for {adds} adds"
        );

        q.shut_down();
        for worker in workers {
            worker.await.expect("worker panicked");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_wakes_idle_workers_and_get_returns_none() {
        let q = WorkQueue::<&str>::new();
        q.add_after("later", Duration::from_secs(60));
        let idle: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect();
        tokio::time::sleep(ms(10)).await;
        let t0 = Instant::now();
        q.shut_down();
        for worker in idle {
            assert_eq!(worker.await.expect("worker panicked"), None);
        }
        assert_eq!(
            t0.elapsed(),
            Duration::ZERO,
            "no waiting for the 60 s timer"
        );
        assert!(q.is_shut_down());
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_returns_none_at_once_even_with_keys_waiting() {
        let q = WorkQueue::new();
        q.add("busy");
        assert_eq!(q.get().await, Some("busy"));
        q.add("waiting");
        q.add("busy"); // dirty

        q.shut_down();
        assert_eq!(q.get().await, None, "waiting keys are dropped, not drained");
        q.add("new");
        assert_eq!(q.get().await, None, "adds after shutdown are ignored");
        assert_eq!(
            q.snapshot().in_flight.len(),
            1,
            "the running sync may finish"
        );
        q.done(&"busy");
        assert_eq!(
            q.get().await,
            None,
            "a dirty key is not requeued after shutdown"
        );
        assert!(q.is_empty());
    }
}
