//! The client's request limiter, as client-go's: a token bucket of `burst` tokens refilled
//! at `qps` per second, which every request (watches included) takes one token from
//! before it is sent. Requests wait in the order they came. addon-operator's
//! `KUBE_CLIENT_QPS`/`KUBE_CLIENT_BURST` and metacontroller's `--client-go-qps`/`-burst`
//! configure it; client-go's rules hold: `0` means the default (5 and 10), a negative QPS
//! means no limit.
//!
//! ```text
//!   kube::Client ─► Buffer (one worker) ─► ClientLimit::poll_ready ─ waits for a token ─►
//!                                           KubeMetrics ─► kube-rs stack ─► hyper
//! ```
//!
//! The limit sits in `poll_ready`: the client's buffer worker asks for readiness before it
//! hands a request on, so a request without a token holds the ones behind it, first come
//! first served, without a task per request.

use std::fmt;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// How long requests that found no token waited for one, by client (`modules`, `lambda`,
/// `objectPatcher`, `helmMonitor`): the histogram's count is how many waited.
pub(crate) const RATE_LIMITER_DURATION_SECONDS: &str =
    "bosun_kubernetes_client_rate_limiter_duration_seconds";

/// client-go's default QPS.
pub const DEFAULT_QPS: f64 = 5.0;
/// client-go's default burst.
pub const DEFAULT_BURST: u32 = 10;

/// How fast a client may send requests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientLimits {
    /// Requests per second after the burst; `None`: no limit.
    pub qps: Option<f64>,
    /// Requests sent at once before the rate applies.
    pub burst: u32,
}

impl Default for ClientLimits {
    fn default() -> ClientLimits {
        ClientLimits {
            qps: Some(DEFAULT_QPS),
            burst: DEFAULT_BURST,
        }
    }
}

impl fmt::Display for ClientLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.qps {
            Some(qps) => write!(f, "{qps} requests/s, burst {}", self.burst),
            None => f.write_str("no limit"),
        }
    }
}

/// A setting that is not a limit.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LimitError {
    /// Not a number.
    #[error("{setting}={value:?}: expected a number of requests per second (negative: no limit)")]
    Qps { setting: String, value: String },
    /// Not a whole number.
    #[error("{setting}={value:?}: expected a whole number of requests (0: the default, 10)")]
    Burst { setting: String, value: String },
}

impl ClientLimits {
    /// No limit.
    pub const UNLIMITED: ClientLimits = ClientLimits {
        qps: None,
        burst: DEFAULT_BURST,
    };

    /// Limits from client-go's numbers: QPS `0` is the default, negative is no limit;
    /// burst `0` is the default.
    pub fn from_client_go(qps: f64, burst: u32) -> ClientLimits {
        let burst = if burst == 0 { DEFAULT_BURST } else { burst };
        let qps = if qps == 0.0 {
            Some(DEFAULT_QPS)
        } else if qps < 0.0 {
            None
        } else {
            Some(qps)
        };
        ClientLimits { qps, burst }
    }

    /// Limits from two settings' texts (`None`: unset), named in errors.
    pub fn parse(
        (qps_name, qps): (&str, Option<&str>),
        (burst_name, burst): (&str, Option<&str>),
    ) -> Result<ClientLimits, LimitError> {
        let qps = match qps.map(str::trim).filter(|v| !v.is_empty()) {
            None => 0.0,
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|q| q.is_finite())
                .ok_or_else(|| LimitError::Qps {
                    setting: qps_name.into(),
                    value: v.into(),
                })?,
        };
        let burst = match burst.map(str::trim).filter(|v| !v.is_empty()) {
            None => 0,
            Some(v) => v.parse::<u32>().map_err(|_| LimitError::Burst {
                setting: burst_name.into(),
                value: v.into(),
            })?,
        };
        Ok(ClientLimits::from_client_go(qps, burst))
    }

    /// Limits from two environment variables.
    pub fn from_env(qps: &str, burst: &str) -> Result<ClientLimits, LimitError> {
        let q = std::env::var(qps).ok();
        let b = std::env::var(burst).ok();
        ClientLimits::parse((qps, q.as_deref()), (burst, b.as_deref()))
    }
}

/// A token bucket (golang.org/x/time/rate's reservations): a request takes a token and
/// waits until the bucket would have held it.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(qps: f64, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes a token: how long to wait before the request may go.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// Wraps a client's service in [`ClientLimit`].
#[derive(Clone, Debug)]
pub(crate) struct ClientLimitLayer {
    client: &'static str,
    bucket: Option<Arc<Mutex<TokenBucket>>>,
}

impl ClientLimitLayer {
    /// A layer of `limits` for the client named `client` in the metric.
    pub fn new(client: &'static str, limits: ClientLimits) -> ClientLimitLayer {
        ClientLimitLayer {
            client,
            bucket: limits.qps.map(|qps| {
                Arc::new(Mutex::new(TokenBucket::new(
                    qps,
                    limits.burst,
                    Instant::now(),
                )))
            }),
        }
    }
}

impl<S> tower::Layer<S> for ClientLimitLayer {
    type Service = ClientLimit<S>;

    fn layer(&self, inner: S) -> ClientLimit<S> {
        ClientLimit {
            inner,
            client: self.client,
            bucket: self.bucket.clone(),
            state: State::Idle,
        }
    }
}

enum State {
    /// No token taken.
    Idle,
    /// A token taken; the request may go at the end of the sleep.
    Waiting(Pin<Box<Sleep>>),
    /// A token taken and its time come.
    Ready,
}

/// Waits for a token of the bucket before the service it wraps is ready.
pub(crate) struct ClientLimit<S> {
    inner: S,
    client: &'static str,
    bucket: Option<Arc<Mutex<TokenBucket>>>,
    state: State,
}

impl<S, R> tower::Service<R> for ClientLimit<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if let Some(bucket) = &self.bucket {
            if matches!(self.state, State::Idle) {
                let now = Instant::now();
                let wait = bucket
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .reserve(now);
                self.state = if wait.is_zero() {
                    State::Ready
                } else {
                    metrics::histogram!(RATE_LIMITER_DURATION_SECONDS, "client" => self.client)
                        .record(wait.as_secs_f64());
                    State::Waiting(Box::pin(tokio::time::sleep_until(now + wait)))
                };
            }
            if let State::Waiting(sleep) = &mut self.state {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.state = State::Ready;
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.state = State::Idle;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_go_numbers_mean_what_they_mean_there() {
        assert_eq!(
            ClientLimits::from_client_go(0.0, 0),
            ClientLimits::default()
        );
        assert_eq!(ClientLimits::from_client_go(-1.0, 0).qps, None);
        let l = ClientLimits::from_client_go(100.0, 200);
        assert_eq!((l.qps, l.burst), (Some(100.0), 200));
        let parsed =
            ClientLimits::parse(("KUBE_CLIENT_QPS", Some("20")), ("KUBE_CLIENT_BURST", None));
        assert_eq!(
            parsed,
            Ok(ClientLimits {
                qps: Some(20.0),
                burst: 10
            })
        );
        let bad = ClientLimits::parse(
            ("KUBE_CLIENT_QPS", Some("fast")),
            ("KUBE_CLIENT_BURST", None),
        );
        assert!(
            matches!(&bad, Err(e) if e.to_string().starts_with("KUBE_CLIENT_QPS=\"fast\": expected a number")),
            "{bad:?}"
        );
        let bad = ClientLimits::parse(("Q", None), ("KUBE_CLIENT_BURST", Some("-3")));
        assert!(matches!(bad, Err(LimitError::Burst { .. })), "{bad:?}");
    }

    #[test]
    fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(5.0, 10, start);
        let waits: Vec<Duration> = (0..12).map(|_| bucket.reserve(start)).collect();
        assert!(waits[..10].iter().all(|w| w.is_zero()), "{waits:?}");
        assert_eq!(waits[10], Duration::from_millis(200));
        assert_eq!(waits[11], Duration::from_millis(400));
        // A second later the bucket has refilled five tokens, two of which were owed.
        let later = start + Duration::from_secs(1);
        let waits: Vec<Duration> = (0..4).map(|_| bucket.reserve(later)).collect();
        assert_eq!(waits[..3], [Duration::ZERO; 3]);
        assert_eq!(waits[3], Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_past_the_burst_wait_for_their_token() {
        use tower::{Layer, Service, ServiceExt};
        let layer = ClientLimitLayer::new(
            "test",
            ClientLimits {
                qps: Some(2.0),
                burst: 2,
            },
        );
        let mut svc = layer.layer(tower::service_fn(|n: u32| async move {
            Ok::<_, std::convert::Infallible>(n)
        }));
        let start = Instant::now();
        let mut sent_at = Vec::new();
        for n in 0..4 {
            let r = svc.ready().await.map(|s| s.call(n));
            assert!(r.is_ok());
            sent_at.push(start.elapsed());
        }
        assert_eq!(
            sent_at,
            [0, 0, 500, 1000].map(Duration::from_millis).to_vec()
        );
        let unlimited = ClientLimitLayer::new("test", ClientLimits::UNLIMITED);
        let mut svc = unlimited.layer(tower::service_fn(|n: u32| async move {
            Ok::<_, std::convert::Infallible>(n)
        }));
        let start = Instant::now();
        for n in 0..50 {
            let r = svc.ready().await.map(|s| s.call(n));
            assert!(r.is_ok());
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
