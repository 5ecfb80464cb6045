//! Fault injection for reliability tests, off by default: every request first waits
//! `delay`, then a share `rate` of them is refused with `429 TooManyRequests` or
//! `500 InternalError` (alternately) before anything is done, so a refused write changed
//! nothing and a client may simply retry it. `/healthz`, `/readyz` and `/livez` are
//! never refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::status::ApiError;

/// What to inject.
#[derive(Debug, Default)]
pub struct Faults {
    /// Waited before every request is handled.
    pub delay: Duration,
    /// The share of requests refused, from 0 (none) to 1 (all).
    pub rate: f64,
    /// The generator's state (xorshift), seeded by [`Faults::new`].
    state: AtomicU64,
}

/// Why a fault setting is refused.
#[derive(Debug, thiserror::Error)]
#[error("--fault-rate must be a number from 0 to 1, got {0}")]
pub struct BadRate(pub String);

impl Faults {
    /// Faults with this delay and rate, drawn from `seed`.
    pub fn new(delay: Duration, rate: f64, seed: u64) -> Result<Faults, BadRate> {
        if !(0.0..=1.0).contains(&rate) {
            return Err(BadRate(rate.to_string()));
        }
        Ok(Faults {
            delay,
            rate,
            state: AtomicU64::new(seed | 1),
        })
    }

    /// Whether any fault is injected.
    pub fn active(&self) -> bool {
        !self.delay.is_zero() || self.rate > 0.0
    }

    fn draw(&self) -> u64 {
        let mut x = self.state.load(Ordering::Relaxed);
        loop {
            let mut next = x;
            next ^= next << 13;
            next ^= next >> 7;
            next ^= next << 17;
            match self
                .state
                .compare_exchange_weak(x, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => x = seen,
            }
        }
    }

    /// Waits the delay, then answers the error this request gets, if any.
    pub async fn before(&self, path: &str) -> Option<ApiError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if self.rate <= 0.0 || matches!(path, "/healthz" | "/readyz" | "/livez") {
            return None;
        }
        let draw = self.draw();
        if (draw >> 11) as f64 / (1u64 << 53) as f64 >= self.rate {
            return None;
        }
        Some(if draw & 1 == 0 {
            ApiError::too_many_requests("injected fault (--fault-rate)")
        } else {
            ApiError::internal("injected fault (--fault-rate)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_rate_is_the_share_refused() {
        let f = Faults::new(Duration::ZERO, 0.25, 42).expect("faults");
        let mut refused = 0;
        for _ in 0..4000 {
            if f.before("/api/v1/configmaps").await.is_some() {
                refused += 1;
            }
        }
        assert!((800..1200).contains(&refused), "{refused}");
        assert!(f.before("/healthz").await.is_none());
        assert!(Faults::new(Duration::ZERO, 1.5, 1).is_err());
        assert!(!Faults::default().active());
    }
}
