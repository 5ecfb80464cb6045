//! `settings.executionMinInterval` / `executionBurst`: a token bucket per hook, as
//! shell-operator's `rate.NewLimiter(rate.Every(interval), burst)`. A hook task waits for a
//! token before its hook runs.

use std::time::Duration;

use tokio::time::Instant;

use crate::hook_config::Settings;

/// The execution rate limit of one hook.
#[derive(Debug)]
pub struct Limiter {
    interval: Duration,
    burst: f64,
    state: tokio::sync::Mutex<(f64, Instant)>,
}

impl Limiter {
    /// A limiter for `settings`, or `None` when the hook has no limit.
    pub fn for_settings(settings: &Settings) -> Option<Limiter> {
        let interval = settings.execution_min_interval.filter(|d| !d.is_zero())?;
        let burst = f64::from(settings.execution_burst.max(1));
        Some(Limiter {
            interval,
            burst,
            state: tokio::sync::Mutex::new((burst, Instant::now())),
        })
    }

    /// Waits until the hook may run again, then takes the token.
    pub async fn wait(&self) {
        let mut st = self.state.lock().await;
        let now = Instant::now();
        let refill = now.duration_since(st.1).as_secs_f64() / self.interval.as_secs_f64();
        st.0 = (st.0 + refill).min(self.burst);
        st.1 = now;
        if st.0 >= 1.0 {
            st.0 -= 1.0;
            return;
        }
        let missing = 1.0 - st.0;
        tokio::time::sleep(self.interval.mul_f64(missing)).await;
        st.0 = 0.0;
        st.1 = Instant::now();
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
}
