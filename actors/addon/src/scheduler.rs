//! Timers for `schedule` bindings.
//!
//! Like addon-operator, identical crontab strings share one timer: when it fires, every binding
//! with that crontab is delivered in one call, so their tasks are queued together.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use tokio::task::AbortHandle;

use crate::hook_config::ScheduleBinding;
use crate::schedule::Crontab;

/// One schedule binding of one hook, owned by the global hook set ("global") or a module (`module/<name>`).
#[derive(Clone, Debug)]
pub struct ScheduleEntry {
    /// `global` or `module/<name>`.
    pub owner: String,
    /// The hook's name.
    pub hook: String,
    /// The binding.
    pub binding: ScheduleBinding,
}

/// Called with every entry whose crontab fired.
pub(crate) type OnFire = Arc<dyn Fn(Vec<ScheduleEntry>) + Send + Sync>;

/// Timers for schedule bindings, one per distinct crontab source. Cheap to clone; the timers
/// stop when the last clone is dropped.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

struct Inner {
    on_fire: OnFire,
    timers: Mutex<Timers>,
}

#[derive(Default)]
struct Timers {
    by_source: BTreeMap<String, Timer>,
    next_id: u64,
}

struct Timer {
    /// Tells a replaced timer's task, still finishing a wake-up, that it is no longer current.
    id: u64,
    entries: Vec<ScheduleEntry>,
    task: AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for timer in lock(&self.timers).by_source.values() {
            timer.task.abort();
        }
    }
}

/// The map stays consistent even if a holder panicked (every update is a single insert/remove).
fn lock(m: &Mutex<Timers>) -> MutexGuard<'_, Timers> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Firings missed by at most this much (a slow callback, a busy runtime) are still delivered;
/// older ones (a suspended machine, a clock jump) are skipped rather than delivered in a burst.
const CATCH_UP: Duration = Duration::from_secs(10);

/// Longest single sleep, so a wall-clock change is noticed within this time.
const MAX_SLEEP: Duration = Duration::from_secs(60);

impl Scheduler {
    /// `on_fire` gets every entry whose crontab fired (all entries sharing that crontab source, in insertion order).
    /// It runs on the timer's task, so it must be cheap (enqueue, don't run hooks).
    pub fn new(on_fire: OnFire) -> Scheduler {
        Scheduler {
            inner: Arc::new(Inner {
                on_fire,
                timers: Mutex::new(Timers::default()),
            }),
        }
    }

    /// Adds entries (an owner's hooks); starts a timer (tokio task) per new distinct crontab source.
    ///
    /// # Panics
    /// Outside a Tokio runtime, when a timer has to be started.
    pub fn add(&self, entries: Vec<ScheduleEntry>) {
        let mut timers = lock(&self.inner.timers);
        for entry in entries {
            let source = entry.binding.crontab.source.clone();
            if let Some(timer) = timers.by_source.get_mut(&source) {
                timer.entries.push(entry);
                continue;
            }
            timers.next_id += 1;
            let id = timers.next_id;
            let task = tokio::spawn(run_timer(
                Arc::downgrade(&self.inner),
                entry.binding.crontab.clone(),
                id,
            ))
            .abort_handle();
            timers.by_source.insert(
                source,
                Timer {
                    id,
                    entries: vec![entry],
                    task,
                },
            );
        }
    }

    /// Removes every entry of an owner; stops timers no entry uses any more.
    pub fn remove_owner(&self, owner: &str) {
        lock(&self.inner.timers).by_source.retain(|_, timer| {
            timer.entries.retain(|e| e.owner != owner);
            if timer.entries.is_empty() {
                timer.task.abort();
            }
            !timer.entries.is_empty()
        });
    }

    /// Crontab sources with their entry counts (for debugging/metrics).
    pub fn crontabs(&self) -> Vec<(String, usize)> {
        lock(&self.inner.timers)
            .by_source
            .iter()
            .map(|(source, timer)| (source.clone(), timer.entries.len()))
            .collect()
    }
}

/// Sleeps until each fire time of `crontab` and delivers the entries it has then. Holds only a
/// weak reference so that dropping the scheduler ends it even between aborts.
async fn run_timer(inner: Weak<Inner>, crontab: Crontab, id: u64) {
    let Some(mut planned) = crontab.next_after(SystemTime::now()) else {
        tracing::warn!(crontab = %crontab.source, "crontab never fires within five years");
        return;
    };
    loop {
        // Sleep by wall clock: re-check after each bounded sleep in case the clock moved.
        loop {
            let now = SystemTime::now();
            match planned.duration_since(now) {
                Ok(left) if !left.is_zero() => tokio::time::sleep(left.min(MAX_SLEEP)).await,
                _ => break,
            }
        }
        let Some(inner) = inner.upgrade() else { return };
        let entries = match lock(&inner.timers).by_source.get(&crontab.source) {
            Some(timer) if timer.id == id => timer.entries.clone(),
            _ => return,
        };
        if !entries.is_empty() {
            (inner.on_fire)(entries);
        }
        drop(inner);
        // Continue from the planned time, not from now, so a slow callback loses no firing.
        let now = SystemTime::now();
        let from = match now.checked_sub(CATCH_UP) {
            Some(oldest) if oldest > planned => {
                tracing::warn!(crontab = %crontab.source, "timer fell behind; skipping missed firings");
                oldest
            }
            _ => planned,
        };
        match crontab.next_after(from) {
            Some(next) => planned = next,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::sync::mpsc;

    fn entry(owner: &str, hook: &str, crontab: &str) -> ScheduleEntry {
        ScheduleEntry {
            owner: owner.into(),
            hook: hook.into(),
            binding: ScheduleBinding {
                name: "schedule".into(),
                crontab: Crontab::parse(crontab).expect("valid crontab"),
                allow_failure: false,
                queue: "main".into(),
                include_snapshots_from: Vec::new(),
                group: None,
            },
        }
    }

    type Fired = mpsc::UnboundedReceiver<(Instant, Vec<(String, String)>)>;

    /// A scheduler whose firings arrive on a channel as (when, [(owner, hook)]).
    fn scheduler() -> (Scheduler, Fired) {
        let (tx, rx) = mpsc::unbounded_channel();
        let s = Scheduler::new(Arc::new(move |entries: Vec<ScheduleEntry>| {
            let names = entries.into_iter().map(|e| (e.owner, e.hook)).collect();
            let _ = tx.send((Instant::now(), names));
        }));
        (s, rx)
    }

    async fn recv(rx: &mut Fired, within: Duration) -> (Instant, Vec<(String, String)>) {
        tokio::time::timeout(within, rx.recv())
            .await
            .expect("a firing in time")
            .expect("scheduler alive")
    }

    #[tokio::test]
    async fn every_second_fires_repeatedly() {
        let (s, mut rx) = scheduler();
        s.add(vec![entry("global", "a", "*/1 * * * * *")]);
        let deadline = Instant::now() + Duration::from_millis(3500);
        let (t1, names) = recv(&mut rx, deadline.saturating_duration_since(Instant::now())).await;
        assert_eq!(names, [("global".to_string(), "a".to_string())]);
        let (t2, _) = recv(&mut rx, deadline.saturating_duration_since(Instant::now())).await;
        assert!(t2 - t1 >= Duration::from_millis(900), "{:?}", t2 - t1);
    }

    #[tokio::test]
    async fn same_crontab_shares_a_timer() {
        let (s, mut rx) = scheduler();
        s.add(vec![entry("global", "a", "*/1 * * * * *")]);
        s.add(vec![
            entry("module/m", "b", "*/1 * * * * *"),
            entry("module/m", "c", "0 0 1 1 *"),
        ]);
        assert_eq!(
            s.crontabs(),
            [
                ("*/1 * * * * *".to_string(), 2),
                ("0 0 1 1 *".to_string(), 1)
            ]
        );
        let (_, names) = recv(&mut rx, Duration::from_secs(3)).await;
        assert_eq!(
            names,
            [
                ("global".to_string(), "a".to_string()),
                ("module/m".to_string(), "b".to_string())
            ]
        );
        s.remove_owner("module/m");
        assert_eq!(s.crontabs(), [("*/1 * * * * *".to_string(), 1)]);
    }

    #[tokio::test]
    async fn removed_owner_stops_firing() {
        let (s, mut rx) = scheduler();
        s.add(vec![entry("module/m", "a", "*/1 * * * * *")]);
        recv(&mut rx, Duration::from_secs(3)).await;
        s.remove_owner("module/m");
        assert!(s.crontabs().is_empty());
        // A firing already sent before the removal may still be queued.
        while rx.try_recv().is_ok() {}
        let late = tokio::time::timeout(Duration::from_millis(2500), rx.recv()).await;
        assert!(late.is_err(), "fired after removal: {late:?}");
    }

    #[tokio::test]
    async fn dropping_the_scheduler_stops_its_timers() {
        let (s, mut rx) = scheduler();
        s.add(vec![entry("global", "a", "*/1 * * * * *")]);
        recv(&mut rx, Duration::from_secs(3)).await;
        drop(s);
        // The callback holds the only sender and goes with the scheduler, unless a timer task
        // kept it alive.
        let end = tokio::time::timeout(Duration::from_secs(3), async {
            while rx.recv().await.is_some() {}
        })
        .await;
        assert!(end.is_ok(), "timer still running");
    }
}
