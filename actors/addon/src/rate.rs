//! `settings.executionMinInterval` / `executionBurst`: a token bucket per hook, as
//! shell-operator's `rate.NewLimiter(rate.Every(interval), burst)`. A hook task waits for a
//! token before it starts: the queue keeps it at its head, unmerged, while
//! [`Limiter::ready_in`] says to wait, so the events that arrive meanwhile are merged into
//! it and the run carries every context up to the moment it starts (as shell-operator,
//! which waits first and combines the binding contexts after).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::hook_config::Settings;

/// The execution rate limit of one hook.
#[derive(Debug)]
pub struct Limiter {
    interval: Duration,
    burst: f64,
    /// Tokens, and when they were counted.
    state: Mutex<(f64, Instant)>,
}

impl Limiter {
    /// A limiter for `settings`, or `None` when the hook has no limit.
    pub fn for_settings(settings: &Settings) -> Option<Limiter> {
        let interval = settings.execution_min_interval.filter(|d| !d.is_zero())?;
        let burst = f64::from(settings.execution_burst.max(1));
        Some(Limiter {
            interval,
            burst,
            state: Mutex::new((burst, Instant::now())),
        })
    }

    /// Takes a token if one is there; else how long until one is.
    pub fn try_take(&self) -> Result<(), Duration> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let refill = now.duration_since(st.1).as_secs_f64() / self.interval.as_secs_f64();
        st.0 = (st.0 + refill).min(self.burst);
        st.1 = now;
        if st.0 >= 1.0 {
            st.0 -= 1.0;
            return Ok(());
        }
        Err(self.interval.mul_f64(1.0 - st.0))
    }

    /// How long until a token is there, `None` when one is there now (nothing is taken).
    pub fn ready_in(&self) -> Option<Duration> {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let refill =
            Instant::now().duration_since(st.1).as_secs_f64() / self.interval.as_secs_f64();
        let tokens = (st.0 + refill).min(self.burst);
        (tokens < 1.0).then(|| self.interval.mul_f64(1.0 - tokens))
    }

    /// Waits until the hook may run again, then takes the token.
    pub async fn wait(&self) {
        while let Err(delay) = self.try_take() {
            tokio::time::sleep(delay).await;
        }
    }
}

/// The limiters of the module hooks, shared between the module actors (which load the
/// hooks) and the queue handler (which holds a limited hook's task before it starts).
#[derive(Clone, Debug, Default)]
pub struct Limits(Arc<Mutex<HashMap<HookKey, Arc<Limiter>>>>);

/// A module hook: `(module, hook)`.
type HookKey = (String, String);

impl Limits {
    /// Sets (or clears) the limiter of `module`'s `hook`.
    pub fn set(&self, module: &str, hook: &str, limiter: Option<Arc<Limiter>>) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (module.to_string(), hook.to_string());
        match limiter {
            Some(l) => map.insert(key, l),
            None => map.remove(&key),
        };
    }

    /// [`Limiter::ready_in`] of `module`'s `hook`; `None` when it has no limit.
    pub fn ready_in(&self, module: &str, hook: &str) -> Option<Duration> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&(module.to_string(), hook.to_string()))?.ready_in()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_then_one_run_per_interval() {
        let l = Limiter::for_settings(&Settings {
            execution_min_interval: Some(Duration::from_secs(2)),
            execution_burst: 2,
        })
        .expect("limited");
        let start = Instant::now();
        l.wait().await;
        l.wait().await;
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst runs at once");
        l.wait().await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        l.wait().await;
        assert_eq!(start.elapsed(), Duration::from_secs(4));
        assert!(Limiter::for_settings(&Settings::default()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn ready_in_says_how_long_to_wait_and_takes_nothing() {
        let l = Limiter::for_settings(&Settings {
            execution_min_interval: Some(Duration::from_secs(4)),
            execution_burst: 1,
        })
        .expect("limited");
        assert_eq!(l.ready_in(), None);
        assert_eq!(l.ready_in(), None, "asking takes no token");
        l.wait().await;
        assert_eq!(l.ready_in(), Some(Duration::from_secs(4)));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(l.ready_in(), Some(Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(l.ready_in(), None);
    }
}
