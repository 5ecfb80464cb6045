//! The accept loop: plain HTTP or TLS, HTTP/1.1 through hyper, and a shutdown that does
//! not wait. On stop the listener closes, every open watch ends its stream (they watch the
//! same signal, see `api::App::stopping`), and each connection finishes the response it is
//! writing and closes, so a sandbox with watches open stops at once.
//!
//! ```text
//!  TcpListener ─accept─► (TLS handshake) ─► hyper http1 ─► axum router
//!        ▲                                      ▲
//!   stop signal ─────────────────────────── graceful_shutdown
//! ```

use std::sync::Arc;
use std::time::Duration;

use bosun_platform::Limits;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long a client may take for its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may take to send each whole request head, by default
/// (kube-apiserver's `ReadHeaderTimeout`): from its opening, then from the first byte of
/// each later request. Connections that never do (partial headers held open) would
/// otherwise pile up. Between requests a kept-alive connection may stay idle 90 s
/// (kube-apiserver's `IdleTimeout`): clients pool them.
pub const HEADER_READ_TIMEOUT: Duration = bosun_platform::HEADER_READ_TIMEOUT;

/// Serves `router` on `listener` until `stop` turns true, then waits for the connections
/// to finish what they are writing.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    header_read_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = stopped(&mut stop) => break,
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(error = %e, "sandbox accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let stop = stop.clone();
        match &acceptor {
            None => {
                connections.spawn(connection(stream, router, header_read_timeout, stop));
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                connections.spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => connection(tls, router, header_read_timeout, stop).await,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Resolves once `stop` is true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`: drop it here.
    let _ = stop.wait_for(|s| *s).await;
}

/// One connection: served until the client closes it, passes a limit, or until stop, when
/// the response in progress (a watch ends on stop too) is finished and the connection
/// closed.
async fn connection<I>(
    io: I,
    router: axum::Router,
    header_read_timeout: Duration,
    stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = Limits {
        header_read: header_read_timeout,
        ..Limits::default()
    };
    bosun_platform::connection(io, router, limits, Some(stop)).await;
}
