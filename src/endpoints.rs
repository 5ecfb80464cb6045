//! The endpoints of a running bosun, on what the subsystems registered in the host's
//! [`Views`]: on `ADDON_OPERATOR_LISTEN_ADDRESS:ADDON_OPERATOR_LISTEN_PORT`, `/healthz`,
//! `/readyz` (ready once every subsystem switched on has started, the modules' first
//! converge is done and every journal writes), `/metrics`, and the modules' routes
//! (`crate::addon::http`); metacontroller's extra listeners; and the debug endpoints
//! (`crate::debug`). Nothing here shows values or configuration.

use std::net::SocketAddr;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use bosun_runtime::mailbox::Mailboxes;

use crate::addon::http::PROMETHEUS_TEXT;
use crate::host::{Host, Parts, Views};
use crate::prometheus::Metrics;

/// Listeners besides the operator's (metacontroller's `--metrics-address` and
/// `--health-probe-bind-address`).
#[derive(Clone, Debug, Default)]
pub struct Listeners {
    /// `/metrics` only.
    pub metrics: Option<std::net::SocketAddr>,
    /// `/healthz` and `/readyz` only.
    pub probes: Option<std::net::SocketAddr>,
    /// `/debug/pprof/` only (`--pprof-address`).
    pub pprof: Option<std::net::SocketAddr>,
}

/// The HTTP and debug listeners (stopped when dropped).
pub struct Served {
    /// Where `/healthz`, `/readyz` and `/metrics` are served.
    pub listen: std::net::SocketAddr,
    http: Vec<tokio::task::JoinHandle<()>>,
    /// The debug endpoints (the socket is removed when dropped).
    pub debug: crate::debug::DebugServer,
}

impl Drop for Served {
    fn drop(&mut self) {
        for t in &self.http {
            t.abort();
        }
    }
}

/// Serves `/healthz`, `/readyz`, `/metrics` (and the modules' routes) on `listen`, the
/// extra listeners asked for, and the debug endpoints, on what the subsystems registered.
pub async fn serve(
    host: &Host,
    listen: SocketAddr,
    debug: &crate::debug::DebugConfig,
    views: &Views,
    extra: &Listeners,
) -> anyhow::Result<Served> {
    let mut tasks = Vec::new();
    let routes = Routes::new(
        views.clone(),
        host.metrics().clone(),
        host.mailboxes.clone(),
    );
    let (listen, task) = serve_on(listen, routes.all()).await?;
    tasks.push(task);
    println!("bosun HTTP endpoints listening on http://{listen}");
    tracing::info!(%listen, "serving /healthz, /readyz, /metrics and /metrics/hooks");
    if let Some(addr) = extra.metrics {
        let (bound, task) = serve_on(addr, routes.metrics())
            .await
            .map_err(|e| anyhow::anyhow!("--metrics-address: {e}"))?;
        tasks.push(task);
        println!("bosun /metrics also on http://{bound} (--metrics-address)");
        tracing::info!(listen = %bound, "serving /metrics (--metrics-address)");
    }
    if let Some(addr) = extra.probes {
        let (bound, task) = serve_on(addr, routes.probes())
            .await
            .map_err(|e| anyhow::anyhow!("--health-probe-bind-address: {e}"))?;
        tasks.push(task);
        println!("bosun /healthz and /readyz also on http://{bound} (--health-probe-bind-address)");
        tracing::info!(listen = %bound, "serving /healthz and /readyz (--health-probe-bind-address)");
    }
    if let Some(addr) = extra.pprof {
        let (bound, task) = serve_on(addr, crate::profiling::routes())
            .await
            .map_err(|e| anyhow::anyhow!("--pprof-address: {e}"))?;
        tasks.push(task);
        println!("bosun /debug/pprof/ on http://{bound} (--pprof-address)");
        tracing::info!(listen = %bound, "serving /debug/pprof/ (--pprof-address)");
    }
    let debug = crate::debug::serve(
        debug,
        views.clone(),
        host.mailboxes.clone(),
        host.runtime_config.clone(),
    )
    .await;
    if let Some(socket) = &debug.socket {
        println!("bosun debug endpoints on unix socket {}", socket.display());
    }
    if let Some(addr) = debug.http {
        println!("bosun debug endpoints on http://{addr}");
        if let Some(url) = debug.ui_url() {
            // As notebook servers do: the address with the token, for this user's eyes.
            println!("bosun debug web view: {url}");
        }
        match &debug.token_file {
            Some(f) => println!(
                "bosun debug token in {} (send Authorization: Bearer <token> on TCP)",
                f.display()
            ),
            None => println!("bosun debug token not written; it is in the web view's address"),
        }
    }
    Ok(Served {
        listen,
        http: tasks,
        debug,
    })
}

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
    if let Some(m) = views.view::<crate::debug::ModulesView>()
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
        if let Some(modules) = self.views.get().view::<crate::debug::ModulesView>() {
            app = app.merge(crate::addon::http::routes(modules.clone()));
        }
        app
    }
}

/// Binds the listener (an error names the address) and serves `app` in the background.
pub async fn serve_on(
    addr: SocketAddr,
    app: Router,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let handle = tokio::spawn(bosun_platform::serve(
        listener,
        app,
        bosun_platform::Limits::from_env(),
    ));
    Ok((bound, handle))
}
