//! Connection timings of a webhook request, as Prometheus' Go client traces them for
//! metacontroller: when the DNS lookup and the TLS handshake start and end, in seconds since
//! the request started.
//!
//! ```text
//!   WebhookClient::post ── traced(Trace) ──► Client ──► TlsDone ──► HttpsConnector ──► TcpThenTls ──► HttpConnector ──► TimedResolver
//!                                                       tls_handshake_done              tls_handshake_start            dns_start, dns_done
//! ```
//!
//! The request's [`Trace`] travels in a task-local: the connectors see it when the
//! connection is made inside the request's task (a fresh connection). A connection that
//! hyper finishes in the background, or a pooled one, records nothing, as no DNS lookup or
//! handshake belongs to that request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::Uri;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use tower::Service;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The four histograms of one hook client.
pub(super) struct TraceMetrics {
    pub dns_start: metrics::Histogram,
    pub dns_done: metrics::Histogram,
    pub tls_start: metrics::Histogram,
    pub tls_done: metrics::Histogram,
}

/// One request: when it started and where its timings go.
#[derive(Clone)]
pub(super) struct Trace {
    pub started: Instant,
    pub metrics: Arc<TraceMetrics>,
}

tokio::task_local! {
    static REQUEST: Trace;
}

/// Runs `request` with `trace` visible to the connectors.
pub(super) async fn traced<F: Future>(trace: Trace, request: F) -> F::Output {
    REQUEST.scope(trace, request).await
}

fn mark(which: fn(&TraceMetrics) -> &metrics::Histogram) {
    // Outside a traced request (a background connection): nothing to record.
    let _ = REQUEST.try_with(|t| which(&t.metrics).record(t.started.elapsed().as_secs_f64()));
}

/// `getaddrinfo` in the blocking pool, timed.
#[derive(Clone, Debug)]
pub(super) struct TimedResolver(GaiResolver);

impl TimedResolver {
    pub fn new() -> TimedResolver {
        TimedResolver(GaiResolver::new())
    }
}

impl Service<Name> for TimedResolver {
    type Response = <GaiResolver as Service<Name>>::Response;
    type Error = <GaiResolver as Service<Name>>::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let lookup = self.0.call(name);
        Box::pin(async move {
            mark(|m| &m.dns_start);
            let addrs = lookup.await;
            mark(|m| &m.dns_done);
            addrs
        })
    }
}

/// The TCP connector under TLS: its end is the handshake's start for https.
#[derive(Clone, Debug)]
pub(super) struct TcpThenTls<C>(pub C);

impl<C> Service<Uri> for TcpThenTls<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = C::Error;
    type Future = BoxFuture<Result<C::Response, C::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let https = uri.scheme_str() == Some("https");
        let connect = self.0.call(uri);
        Box::pin(async move {
            let stream = connect.await;
            if https && stream.is_ok() {
                mark(|m| &m.tls_start);
            }
            stream
        })
    }
}

/// The TLS connector: its end is the handshake's end for https.
#[derive(Clone, Debug)]
pub(super) struct TlsDone<C>(pub C);

impl<C> Service<Uri> for TlsDone<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = C::Error;
    type Future = BoxFuture<Result<C::Response, C::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let https = uri.scheme_str() == Some("https");
        let connect = self.0.call(uri);
        Box::pin(async move {
            let stream = connect.await;
            if https && stream.is_ok() {
                mark(|m| &m.tls_done);
            }
            stream
        })
    }
}
