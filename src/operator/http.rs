//! The operator's public HTTP endpoints on
//! `ADDON_OPERATOR_LISTEN_ADDRESS:ADDON_OPERATOR_LISTEN_PORT`: `/healthz`, `/readyz` (ready
//! after the first converge), `/metrics` (the operator's metrics) and `/metrics/hooks`
//! (what hooks wrote to `METRICS_PATH`). Nothing here shows values or configuration.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use bosun_actors::engine::Engine;

use crate::telemetry::Metrics;

/// The content type of the Prometheus text format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Binds the listener (an error names the address) and serves in the background.
pub async fn serve(
    addr: SocketAddr,
    engine: Arc<Engine>,
    metrics: Metrics,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let ready = engine.clone();
    let operator = engine.clone();
    let hooks = engine;
    let app = Router::new()
        .route("/healthz", get(|| async { (StatusCode::OK, "ok") }))
        .route(
            "/readyz",
            get(move || {
                let engine = ready.clone();
                async move {
                    if engine.converged() {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "startup converge not done")
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let text = metrics.render(&operator.mailboxes);
                async move { ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response() }
            }),
        )
        .route(
            "/metrics/hooks",
            get(move || {
                let text = hooks.hook_metrics.render();
                async move { ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response() }
            }),
        );
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("HTTP server stopped: {e}");
        }
    });
    Ok((bound, handle))
}
