//! The operator's HTTP endpoints: `/healthz` and `/readyz` (ready after the first
//! converge), on `ADDON_OPERATOR_LISTEN_ADDRESS:ADDON_OPERATOR_LISTEN_PORT`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use bosun_actors::engine::Engine;

/// Binds the listener (an error names the address) and serves in the background.
pub async fn serve(
    addr: SocketAddr,
    engine: Arc<Engine>,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(|| async { (StatusCode::OK, "ok") }))
        .route(
            "/readyz",
            get(move || {
                let engine = engine.clone();
                async move {
                    if engine.converged() {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "startup converge not done")
                    }
                }
            }),
        );
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("HTTP server stopped: {e}");
        }
    });
    Ok((bound, handle))
}
