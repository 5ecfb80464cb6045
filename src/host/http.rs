//! The public HTTP endpoints on `ADDON_OPERATOR_LISTEN_ADDRESS:ADDON_OPERATOR_LISTEN_PORT`:
//! `/healthz`, `/readyz` (ready once every subsystem switched on has started, the modules'
//! first converge is done and every journal writes), `/metrics` (the operator's metrics),
//! and the modules' routes (`crate::addon::http`). Nothing here shows values or
//! configuration.

use std::net::SocketAddr;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use bosun_runtime::mailbox::Mailboxes;

use super::{Parts, Views};
use crate::addon::http::PROMETHEUS_TEXT;
use crate::prometheus::Metrics;

/// How long a journal may fail to write before `/healthz` fails too (so Kubernetes
/// restarts the pod); `/readyz` fails at once.
pub const JOURNAL_LIVENESS_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// The first journal that cannot write: its subsystem, for how long, and why.
fn journal_failing(views: &Parts) -> Option<(&'static str, std::time::Duration, String)> {
    views.journals.iter().find_map(|(name, health)| {
        let (since_ms, error) = health.failing()?;
        let took = bosun_runtime::clock::now_ms().saturating_sub(since_ms);
        Some((*name, std::time::Duration::from_millis(took), error))
    })
}

/// `/readyz`: `Ok` when ready, else what is missing.
fn readiness(views: &Parts) -> Result<(), String> {
    if let Some((name, took, error)) = journal_failing(views) {
        return Err(format!(
            "the {name} journal cannot write for {}s: {error}",
            took.as_secs()
        ));
    }
    if let Some((name, error)) = views.failed.first() {
        return Err(format!("the {name} did not start: {error}"));
    }
    if !views.starting.is_empty() {
        return Err(format!("starting: {}", views.starting.join(", ")));
    }
    if let Some(m) = &views.modules
        && !m.engine.converged()
    {
        return Err("startup converge not done".into());
    }
    Ok(())
}

/// The routes the listeners serve.
pub struct Routes {
    views: Views,
    metrics: Metrics,
    mailboxes: Mailboxes,
}

impl Routes {
    /// Routes on what the subsystems show.
    pub fn new(views: Views, metrics: Metrics, mailboxes: Mailboxes) -> Routes {
        Routes {
            views,
            metrics,
            mailboxes,
        }
    }

    /// `/healthz` and `/readyz`.
    pub fn probes(&self) -> Router {
        let live = self.views.clone();
        let ready = self.views.clone();
        Router::new()
            .route(
                "/healthz",
                get(move || {
                    let views = live.clone();
                    async move {
                        match journal_failing(&views.get()) {
                            Some((name, took, error)) if took >= JOURNAL_LIVENESS_GRACE => (
                                StatusCode::SERVICE_UNAVAILABLE,
                                format!(
                                    "the {name} journal cannot write for {}s (a restart may help): {error}",
                                    took.as_secs()
                                ),
                            ),
                            _ => (StatusCode::OK, "ok".to_string()),
                        }
                    }
                }),
            )
            .route(
                "/readyz",
                get(move || {
                    let views = ready.clone();
                    async move {
                        match readiness(&views.get()) {
                            Ok(()) => (StatusCode::OK, "ok".to_string()),
                            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                        }
                    }
                }),
            )
    }

    /// `/metrics`.
    pub fn metrics(&self) -> Router {
        let (metrics, mailboxes) = (self.metrics.clone(), self.mailboxes.clone());
        Router::new().route(
            "/metrics",
            get(move || {
                let text = metrics.render(&mailboxes);
                async move { ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response() }
            }),
        )
    }

    /// Everything: the probes, `/metrics`, and the modules' routes when they run.
    pub fn all(&self) -> Router {
        let mut app = self.probes().merge(self.metrics());
        if let Some(modules) = self.views.get().modules {
            app = app.merge(crate::addon::http::routes(modules));
        }
        app
    }
}

/// Binds the listener (an error names the address) and serves `app` in the background.
pub async fn serve(
    addr: SocketAddr,
    app: Router,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(%bound, "HTTP server stopped: {e}");
        }
    });
    Ok((bound, handle))
}
