//! HTTP/1 connections served under the limits of kube-apiserver's Go server
//! (`ReadHeaderTimeout` 32 s, `IdleTimeout` 90 s), on every request of a connection:
//!
//! ```text
//!   opened ──► head ──(whole head read)──► busy ──(response sent)──► idle ──(a byte)──► head …
//!              │ longer than header_read: closed                      │ longer than idle: closed
//! ```
//!
//! A client that opens connections and never finishes a request head (slow headers, or a
//! half-sent second request on a kept-alive connection) cannot hold them, nor the memory
//! behind them; a pooled client's idle connection stays usable until the idle limit.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// kube-apiserver's `ReadHeaderTimeout`.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
/// kube-apiserver's `IdleTimeout` (Go's default transport keeps idle connections as long).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How long a connection may take for each request head, and stay idle between requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// From a connection's opening, or from the first byte of each later request, to the
    /// end of that request's head.
    pub header_read: Duration,
    /// From the end of a response to the first byte of the next request.
    pub idle: Duration,
}

impl Limits {
    /// The defaults, or the durations in `BOSUN_HTTP_HEADER_READ_TIMEOUT` and
    /// `BOSUN_HTTP_IDLE_TIMEOUT` (`10s`, `2m`); a value that is not a duration is named in
    /// a warning and the default kept.
    pub fn from_env() -> Limits {
        let read = |name: &str, default: Duration| match std::env::var(name) {
            Err(_) => default,
            Ok(v) => match humantime::parse_duration(v.trim()) {
                Ok(d) if !d.is_zero() => d,
                _ => {
                    tracing::warn!(
                        "{name}={v:?} is not a duration above zero (such as 10s or 2m); using {}",
                        humantime::format_duration(default)
                    );
                    default
                }
            },
        };
        Limits {
            header_read: read("BOSUN_HTTP_HEADER_READ_TIMEOUT", HEADER_READ_TIMEOUT),
            idle: read("BOSUN_HTTP_IDLE_TIMEOUT", IDLE_TIMEOUT),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read: HEADER_READ_TIMEOUT,
            idle: IDLE_TIMEOUT,
        }
    }
}

/// Where a connection is in its request cycle.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Reading a request head, since then.
    Head(Instant),
    /// Requests in the router or responses being sent (more than one when pipelined).
    Busy(usize),
    /// Waiting for the next request, since then.
    Idle(Instant),
}

struct Clock {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Clock {
    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request's head was read: it is in the router until its response is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            _ => Phase::Busy(1),
        };
        drop(phase);
        self.changed.notify_one();
        Busy(self.clone())
    }

    fn bytes_read(&self) {
        let mut phase = self.phase();
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now());
            drop(phase);
            self.changed.notify_one();
        }
    }
}

/// One request in progress; dropped with its response body (sent, or abandoned).
struct Busy(Arc<Clock>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut phase = self.0.phase();
        *phase = match *phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now()),
        };
        drop(phase);
        self.0.changed.notify_one();
    }
}

/// A response body that ends its request's busy phase when hyper is done with it.
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The connection's stream, noting when bytes arrive while it is idle.
struct Watched<I> {
    io: I,
    clock: Arc<Clock>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.bytes_read();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Serves `router` on one connection until the client closes it, a limit is passed, or
/// `stop` turns true (then the response in progress is finished and the connection
/// closed).
pub async fn connection<I>(
    io: I,
    router: axum::Router,
    limits: Limits,
    mut stop: Option<watch::Receiver<bool>>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let clock = Arc::new(Clock {
        phase: Mutex::new(Phase::Head(Instant::now())),
        changed: Notify::new(),
    });
    let inner = TowerToHyperService::new(router);
    let on_request = clock.clone();
    let service = hyper::service::service_fn(move |request| {
        let busy = on_request.begin();
        let response = hyper::service::Service::call(&inner, request);
        async move {
            let response = response.await?;
            Ok::<_, std::convert::Infallible>(
                response.map(|body| Body::new(Tracked { body, _busy: busy })),
            )
        }
    });
    let watched = Watched {
        io,
        clock: clock.clone(),
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(watched), service)
        .with_upgrades();
    tokio::pin!(conn);
    // When the connection is closed unless something happens first, and whether for a
    // head (else for idleness).
    let deadline = |phase: Phase| match phase {
        Phase::Head(since) => Some((since + limits.header_read, true)),
        Phase::Idle(since) => Some((since + limits.idle, false)),
        Phase::Busy(_) => None,
    };
    loop {
        let next = deadline(*clock.phase());
        let expired = async {
            match next {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::trace!(error = %e, "connection ended");
                }
                return;
            }
            () = stopped(&mut stop) => break,
            () = clock.changed.notified() => {}
            () = expired => {
                // The phase may have moved on meanwhile: its own deadline decides.
                match deadline(*clock.phase()) {
                    Some((at, true)) if at <= Instant::now() => {
                        tracing::debug!(after = ?limits.header_read, "closing a connection that sent no whole request head in time");
                        return;
                    }
                    Some((at, false)) if at <= Instant::now() => {
                        tracing::trace!(after = ?limits.idle, "closing an idle connection");
                        return;
                    }
                    _ => {}
                }
            }
        }
    }
    conn.as_mut().graceful_shutdown();
    if let Err(e) = conn.await {
        tracing::trace!(error = %e, "connection ended at shutdown");
    }
}

/// Resolves once `stop` is true (or its sender is gone); never without one.
async fn stopped(stop: &mut Option<watch::Receiver<bool>>) {
    match stop {
        // The guard `wait_for` returns is not `Send`: drop it here.
        Some(stop) => {
            let _ = stop.wait_for(|s| *s).await;
        }
        None => std::future::pending().await,
    }
}

/// Serves `router` on every connection `listener` accepts (TCP or Unix socket), each under
/// `limits`, until the task is dropped.
pub async fn serve<L>(mut listener: L, router: axum::Router, limits: Limits)
where
    L: axum::serve::Listener,
{
    loop {
        let (io, _) = listener.accept().await;
        tokio::spawn(connection(io, router.clone(), limits, None));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn started(limits: Limits) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve(listener, router, limits));
        addr
    }

    async fn ask(s: &mut tokio::net::TcpStream) -> String {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("request");
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).await.expect("answer");
        String::from_utf8_lossy(&buf[..n]).to_string()
    }

    /// Whether the server closed the connection (end of stream or a reset).
    async fn closed(s: &mut tokio::net::TcpStream) -> bool {
        let mut buf = [0u8; 64];
        matches!(s.read(&mut buf).await, Ok(0) | Err(_))
    }

    // Real time: the connections are real sockets.
    const LIMITS: Limits = Limits {
        header_read: Duration::from_secs(1),
        idle: Duration::from_secs(6),
    };

    #[tokio::test]
    async fn a_connection_that_never_finishes_its_first_head_is_closed() {
        let addr = started(LIMITS).await;
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .expect("partial head");
        assert!(closed(&mut s).await);
    }

    #[tokio::test]
    async fn a_half_sent_second_head_is_closed_and_an_idle_connection_kept_until_the_idle_limit() {
        let addr = started(LIMITS).await;
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        assert!(ask(&mut s).await.starts_with("HTTP/1.1 200"));
        // Idle past the head limit, within the idle one (an input, not a wait): still served.
        tokio::time::sleep(LIMITS.header_read * 3).await;
        assert!(ask(&mut s).await.starts_with("HTTP/1.1 200"));
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .expect("partial second head");
        let waited = Instant::now();
        assert!(closed(&mut s).await);
        assert!(waited.elapsed() < LIMITS.idle, "closed at the head limit");

        let mut idle = tokio::net::TcpStream::connect(addr).await.expect("connect");
        assert!(ask(&mut idle).await.starts_with("HTTP/1.1 200"));
        let waited = Instant::now();
        assert!(closed(&mut idle).await);
        assert!(waited.elapsed() >= LIMITS.idle, "kept until the idle limit");
    }

    #[tokio::test]
    async fn a_slow_response_is_not_cut_by_the_limits() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = axum::Router::new().route(
            "/",
            axum::routing::get(|| async {
                tokio::time::sleep(LIMITS.header_read * 3).await;
                "late"
            }),
        );
        tokio::spawn(serve(listener, router, LIMITS));
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let answer = ask(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}
