//! The debug interface, as addon-operator's: HTTP on a unix socket (`DEBUG_UNIX_SOCKET`,
//! default `/var/run/addon-operator/debug.socket`) and optionally on a loopback TCP address
//! (`DEBUG_HTTP_SERVER_ADDR`), read by the `bosun queue|global|module|actors|graph|raw` and
//! `bosun journal … --live` commands, and by a browser at `/ui`.
//!
//! ```text
//!   bosun queue list, bosun journal log --live ──► unix socket ─┐
//!   a browser at /ui (polls the JSON endpoints) ──► socket/TCP ─┴► router ─┬► Engine
//!                                                                          ├► the journal
//!                                                                          │  (journal_views)
//!                                                                          └► views (text, JSON, YAML)
//! ```
//!
//! What each subsystem shows is its `host::SubsystemView` (`modules_views.rs`,
//! `lambda_views.rs`, `deployer_views.rs`): `/actors` and `/explain` loop over them, and
//! a subsystem's own endpoints find its view by type.
//!
//! The endpoints show values, secrets included: the socket is created `0600` in a `0700`
//! folder, and the TCP listener refuses non-loopback addresses unless
//! `BOSUN_DEBUG_ALLOW_REMOTE=true`; on a loopback address it answers only requests whose
//! `Host` is a loopback name, so a web page cannot reach it by rebinding its own name. Any
//! local user can connect to a loopback port, so on TCP every route but the page `/ui`
//! asks for the token bosun makes at start ([`token`]). On TCP, `POST /config/set` is
//! refused with a content type a page can send cross-origin (form, multipart, text) unless
//! it carries bosun's client header `X-Bosun-Client`.

pub mod client;

pub mod commands;
pub mod deployer_views;
pub mod diff;
pub mod explain;
pub mod graph;
pub mod journal_views;
pub mod lambda_views;
pub mod last_outcome;
pub mod modules_views;
pub mod token;
pub mod views;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bosun_addon::Event;
use bosun_addon::engine::Engine;
use bosun_journal::Journal;
use bosun_platform::{loopback_host, single_host};
use bosun_runtime::mailbox::Mailboxes;
use serde_json::{Value, json};

use journal_views::{LogQuery, ViewError};
use token::DebugToken;
use views::{Format, View};

use crate::host::Views;
use crate::runtime_config::RuntimeConfig;
pub use modules_views::ModulesView;

/// The web view: one page, no external assets.
const UI_PAGE: &str = include_str!("ui.html");

/// Events `/journal/log` returns when no `limit` is given (the newest ones).
const LOG_LIMIT: usize = 200;

pub use crate::host::process::{DEFAULT_SOCKET, parse_http_addr};

/// How long an endpoint waits for an actor (a module actor is busy during its run).
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `module render --diff` may take: a render plus two API calls per object (the
/// CLI gives up after 30s).
pub(crate) const DIFF_TIMEOUT: Duration = Duration::from_secs(25);

/// What a debug route answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Endpoint {
    QueueList,
    QueueMain,
    GlobalList,
    GlobalValues,
    GlobalConfig,
    GlobalSnapshots,
    GlobalPatches,
    ModuleList,
    ModuleSnapshots,
    ModulePatches,
    ModuleRender,
    ResourceMonitor,
    ModuleValues,
    ModuleConfig,
    Actors,
    Actor,
    Ha,
    Explain,
    JournalLog,
    JournalState,
    JournalWhy,
    JournalStats,
    ConfigList,
    ConfigSet,
    Graph,
    Discovery,
    Ui,
}

/// A debug route, declared once: [`handle`] (and the router, for `POST`) dispatches on it,
/// `/discovery` lists it.
pub struct Route {
    /// As `/discovery` lists it: `[POST ]path[.{formats}][?query| (form: …)]`. The path's
    /// `{parameters}` stand for one segment each (an actor's name for the rest of the path).
    pub shown: &'static str,
    endpoint: Endpoint,
}

/// The routes, in the order `/discovery` lists them.
pub const ROUTES: &[Route] = &[
    route(
        "/queue/list.{json|yaml|text}?showEmpty=bool",
        Endpoint::QueueList,
    ),
    route("/queue/main.{json|yaml|text}", Endpoint::QueueMain),
    route("/global/list.{json|yaml|text}", Endpoint::GlobalList),
    route("/global/values.{json|yaml|text}", Endpoint::GlobalValues),
    route("/global/config.{json|yaml|text}", Endpoint::GlobalConfig),
    route(
        "/global/snapshots.{json|yaml|text}",
        Endpoint::GlobalSnapshots,
    ),
    route("/global/patches.{json|yaml}", Endpoint::GlobalPatches),
    route("/module/list.{json|yaml|text}", Endpoint::ModuleList),
    route(
        "/module/{name}/snapshots.{json|yaml|text}",
        Endpoint::ModuleSnapshots,
    ),
    route(
        "/module/{name}/patches.{json|yaml}",
        Endpoint::ModulePatches,
    ),
    route(
        "/module/{name}/render.{text|json|yaml}?diff=bool&debug=bool",
        Endpoint::ModuleRender,
    ),
    route(
        "/module/resource-monitor.{json|yaml|text}",
        Endpoint::ResourceMonitor,
    ),
    route(
        "/module/{name}/values.{json|yaml|text}?global=bool",
        Endpoint::ModuleValues,
    ),
    route(
        "/module/{name}/config.{json|yaml|text}?global=bool",
        Endpoint::ModuleConfig,
    ),
    route("/actors.{json|yaml|text}", Endpoint::Actors),
    route("/actors/{name}.{json|yaml|text}", Endpoint::Actor),
    route("/ha.{json|yaml|text}", Endpoint::Ha),
    route(
        "/explain.{json|yaml|text}?subject=KIND/NAME|values PATH&namespace=",
        Endpoint::Explain,
    ),
    route(
        "/journal/log.{json|text}?since=&until=&module=&queue=&limit=",
        Endpoint::JournalLog,
    ),
    route("/journal/state.{json|yaml}?at=", Endpoint::JournalState),
    route("/journal/why/{task}.{json|text}", Endpoint::JournalWhy),
    route("/journal/stats.{json|text}", Endpoint::JournalStats),
    route("/config/list.{json|yaml|text}", Endpoint::ConfigList),
    route(
        "POST /config/set (form: name, value, duration)",
        Endpoint::ConfigSet,
    ),
    route("/graph?format=text|png", Endpoint::Graph),
    route("/discovery.{json|yaml|text}", Endpoint::Discovery),
    route("/ui", Endpoint::Ui),
];

const fn route(shown: &'static str, endpoint: Endpoint) -> Route {
    Route { shown, endpoint }
}

impl Route {
    /// Served on `POST` by its own handler (the others answer `GET`).
    fn post(&self) -> bool {
        self.shown.starts_with("POST ")
    }

    /// The path pattern, and whether an extension picks the format (`.{json|text}`).
    fn pattern(&self) -> (&'static str, bool) {
        let rest = self.shown.strip_prefix("POST ").unwrap_or(self.shown);
        let end = rest.find(['.', '?', ' ']).unwrap_or(rest.len());
        (&rest[..end], rest[end..].starts_with('.'))
    }

    /// The parameters of `segments` (a path without its extension, split at `/`), when
    /// this route matches them.
    fn matches(&self, segments: &[&str]) -> Option<Vec<String>> {
        let (path, _) = self.pattern();
        let pattern: Vec<&str> = path.trim_matches('/').split('/').collect();
        // An actor's name has slashes (`queue/main`): the last parameter takes the rest.
        let rest = self.endpoint == Endpoint::Actor;
        let fits = if rest {
            segments.len() >= pattern.len()
        } else {
            segments.len() == pattern.len()
        };
        if !fits {
            return None;
        }
        let mut params = Vec::new();
        for (i, p) in pattern.iter().enumerate() {
            if p.starts_with('{') {
                if rest && i == pattern.len() - 1 {
                    params.push(segments[i..].join("/"));
                } else {
                    params.push(segments[i].to_string());
                }
            } else if *p != segments[i] {
                return None;
            }
        }
        Some(params)
    }
}

/// The `GET` route `path` asks for, with its parameters and the format its extension
/// picks. Routes without formats (`/ui`, `/graph`) take the path as it is (a trailing `/`
/// allowed).
fn find_route(path: &str) -> Option<(&'static Route, Vec<String>, Format)> {
    let gets = || ROUTES.iter().filter(|r| !r.post());
    for r in gets().filter(|r| !r.pattern().1) {
        let (p, _) = r.pattern();
        if path == p || path.strip_suffix('/') == Some(p) {
            return Some((r, Vec::new(), Format::Text));
        }
    }
    let (route, format) = Format::split(path);
    let segments: Vec<&str> = route.trim_matches('/').split('/').collect();
    gets()
        .filter(|r| r.pattern().1)
        .find_map(|r| r.matches(&segments).map(|params| (r, params, format)))
}

/// Where the debug endpoints are served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugConfig {
    /// The unix socket.
    pub socket: PathBuf,
    /// The optional TCP address (loopback unless remote access is allowed).
    pub http: Option<SocketAddr>,
}

impl DebugConfig {
    /// The listeners the process's configuration names.
    pub fn of(process: &crate::host::ProcessConfig) -> DebugConfig {
        DebugConfig {
            socket: process.debug_socket.clone(),
            http: process.debug_http,
        }
    }
}

/// The debug listeners; dropping it stops them and removes the socket and the token file.
pub struct DebugServer {
    /// The unix socket, when it could be created.
    pub socket: Option<PathBuf>,
    /// The TCP address, when one is served.
    pub http: Option<SocketAddr>,
    /// The token the TCP listener asks for, when one is served.
    pub token: Option<DebugToken>,
    /// Where the token was written (`0600`), when it could be.
    pub token_file: Option<PathBuf>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl DebugServer {
    /// The address of the web view, with the token: what a user opens.
    pub fn ui_url(&self) -> Option<String> {
        let addr = self.http?;
        let token = self.token.as_ref()?;
        Some(format!("http://{addr}/ui?token={}", token.as_str()))
    }
}

impl Drop for DebugServer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(path) = &self.socket {
            let _ = std::fs::remove_file(path);
        }
        if let Some(path) = &self.token_file {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Starts the listeners on what the running subsystems show. A socket or address that
/// cannot be used is logged as an error and left out: the operator keeps running without it.
pub async fn serve(
    cfg: &DebugConfig,
    views: Views,
    mailboxes: Mailboxes,
    config: Arc<RuntimeConfig>,
) -> DebugServer {
    let app = router(views, mailboxes, config);
    let mut server = DebugServer {
        socket: None,
        http: None,
        token: None,
        token_file: None,
        tasks: Vec::new(),
    };
    match bind_socket(&cfg.socket) {
        Ok(listener) => {
            let app = app.clone();
            server.tasks.push(tokio::spawn(bosun_platform::serve(
                listener,
                app,
                bosun_platform::Limits::from_env(),
            )));
            tracing::info!(socket = %cfg.socket.display(), "debug endpoints listening on the unix socket");
            server.socket = Some(cfg.socket.clone());
        }
        Err(e) => tracing::error!("debug endpoints not served: {e:#}"),
    }
    if let Some(addr) = cfg.http {
        let token = match DebugToken::generate() {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("debug endpoints not served on {addr}: no random token: {e}");
                return server;
            }
        };
        let file = token::token_file(&cfg.socket);
        let written = match token::write_token_file(&file, &token) {
            Ok(()) => Some(file),
            Err(e) => {
                tracing::error!(
                    file = %file.display(),
                    "the debug token was not written (the TCP listener asks for it; it is in \
                     the address bosun printed): {e}"
                );
                None
            }
        };
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let bound = listener.local_addr().unwrap_or(addr);
                let guard = TokenGuard {
                    token: token.clone(),
                    file: written.clone(),
                };
                let app = app
                    .layer(axum::middleware::from_fn(no_cross_origin_posts))
                    .layer(axum::middleware::from_fn_with_state(guard, require_token));
                let app = if bound.ip().is_loopback() {
                    app.layer(axum::middleware::from_fn(loopback_host_only))
                } else {
                    app
                };
                server.tasks.push(tokio::spawn(bosun_platform::serve(
                    listener,
                    app,
                    bosun_platform::Limits::from_env(),
                )));
                tracing::info!(
                    listen = %bound,
                    token_file = ?written,
                    "debug endpoints listening on TCP (with a token)"
                );
                server.http = Some(bound);
                server.token = Some(token);
                server.token_file = written;
            }
            Err(e) => {
                tracing::error!("debug endpoints not served on {addr}: cannot listen: {e}");
                if let Some(f) = &written {
                    let _ = std::fs::remove_file(f);
                }
            }
        }
    }
    server
}

/// What [`require_token`] checks against.
#[derive(Clone)]
struct TokenGuard {
    token: DebugToken,
    file: Option<PathBuf>,
}

/// On the TCP listener: answers only requests with the token (`Authorization: Bearer` or
/// `?token=`); the page `/ui`, which holds no data, is served without it.
async fn require_token(State(guard): State<TokenGuard>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if request.method() == Method::GET && (path == "/ui" || path == "/ui/") {
        return next.run(request).await;
    }
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let given = DebugToken::of_request(authorization, request.uri().query());
    if given.is_some_and(|g| guard.token.matches(&g)) {
        return next.run(request).await;
    }
    let whence = match &guard.file {
        Some(f) => format!("in {} or ", f.display()),
        None => String::new(),
    };
    let mut answer = Failure(
        StatusCode::UNAUTHORIZED,
        format!(
            "the debug endpoints on TCP need the token bosun made at start ({whence}in the \
             web view's address it printed, /ui?token=…): send Authorization: Bearer <token> \
             or add ?token=<token>; the unix socket needs none"
        ),
    )
    .into_response();
    answer.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer realm=\"bosun debug\""),
    );
    answer
}

/// Creates the socket's folder (`0700`), removes a stale socket, binds, and makes the
/// socket `0600`. A socket another process still answers on is left alone.
pub fn bind_socket(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    let shown = path.display();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                anyhow::anyhow!("cannot create the folder of the debug socket {shown}: {e}")
            })?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                anyhow::bail!("debug socket {shown} is in use by another process");
            }
            std::fs::remove_file(path).map_err(|e| {
                anyhow::anyhow!("cannot remove the stale debug socket {shown}: {e}")
            })?;
        }
        Ok(_) => anyhow::bail!("{shown} exists and is not a socket; not replacing it"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => anyhow::bail!("cannot inspect the debug socket {shown}: {e}"),
    }
    let listener = tokio::net::UnixListener::bind(path)
        .map_err(|e| anyhow::anyhow!("cannot listen on the debug socket {shown}: {e}"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| anyhow::anyhow!("cannot make the debug socket {shown} private: {e}"))?;
    Ok(listener)
}

/// What the endpoints read.
#[derive(Clone)]
struct Shared {
    views: Views,
    mailboxes: Mailboxes,
    config: Arc<RuntimeConfig>,
}

/// The debug endpoints, on what the running subsystems show and every actor's mailbox.
pub fn router(views: Views, mailboxes: Mailboxes, config: Arc<RuntimeConfig>) -> Router {
    let mut router = Router::new();
    for route in ROUTES.iter().filter(|r| r.post()) {
        if route.endpoint == Endpoint::ConfigSet {
            router = router.route(route.pattern().0, axum::routing::post(config_set));
        }
    }
    router.fallback(handle).with_state(Shared {
        views,
        mailboxes,
        config,
    })
}

/// On a loopback TCP listener: refuses requests for other host names (a page whose name
/// was made to point at 127.0.0.1 would otherwise read every value through the browser).
async fn loopback_host_only(headers: HeaderMap, request: Request, next: Next) -> Response {
    // One Host, strictly a loopback name (two Host headers are refused).
    let host = single_host(&headers).unwrap_or_default();
    if !loopback_host(host) {
        return Failure(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "Host {host:?} is not a loopback name; the debug endpoints answer \
                 http://127.0.0.1:PORT, http://localhost:PORT or http://[::1]:PORT"
            ),
        )
        .into_response();
    }
    next.run(request).await
}

/// The header bosun's own client sends with its POSTs. A browser sends a custom header
/// cross-origin only after a CORS preflight, which the debug endpoints never grant.
pub const CLIENT_HEADER: &str = "x-bosun-client";

/// Content types a browser POSTs cross-origin without a preflight (a CORS "simple request").
const SIMPLE_CONTENT_TYPES: &[&str] = &[
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
];

/// On a TCP listener: refuses a POST (`/config/set`) that any web page could send — one
/// with a simple content type (or none) and without [`CLIENT_HEADER`]. The unix socket,
/// which browsers cannot reach, takes addon-operator's plain form POSTs.
async fn no_cross_origin_posts(headers: HeaderMap, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let post_route = ROUTES.iter().any(|r| r.post() && r.pattern().0 == path);
    if request.method() == Method::POST && post_route && !headers.contains_key(CLIENT_HEADER) {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let media = content_type
            .as_deref()
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if media.is_empty() || SIMPLE_CONTENT_TYPES.contains(&media.as_str()) {
            let what = match &content_type {
                Some(ct) => format!("Content-Type {ct:?}"),
                None => "no Content-Type".to_string(),
            };
            return Failure(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "POST {} with {what} refused on the TCP listener: any web page can send \
                     that cross-origin; use `bosun config set` (the unix socket), or send the \
                     form with the header X-Bosun-Client: cli",
                    request.uri().path()
                ),
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// An answer that is not a view.
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (
            self.0,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("Error: {}\n", self.1),
        )
            .into_response()
    }
}

fn flag(query: &HashMap<String, String>, name: &str) -> bool {
    query
        .get(name)
        .is_some_and(|v| matches!(v.as_str(), "true" | "1" | "yes" | "on" | ""))
}

async fn ask<T>(what: &str, fut: impl Future<Output = T>) -> Result<T, Failure> {
    ask_within(what, ASK_TIMEOUT, fut).await
}

async fn ask_within<T>(
    what: &str,
    timeout: Duration,
    fut: impl Future<Output = T>,
) -> Result<T, Failure> {
    tokio::time::timeout(timeout, fut).await.map_err(|_| {
        Failure(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{what} did not answer within {}s (busy with a long run? see /actors)",
                timeout.as_secs()
            ),
        )
    })
}

fn not_found(e: bosun_addon::engine::RequestError) -> Failure {
    let status = if e.is_not_found() {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    Failure(status, e.to_string())
}

/// The page at `/ui`: inline script and styles only, talking to this origin only.
fn ui_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        UI_PAGE,
    )
        .into_response()
}

async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if method != Method::GET {
        return Failure(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} is not supported; the debug endpoints answer GET"),
        )
        .into_response();
    }
    let (route, _) = Format::split(uri.path());
    let Some((found, params, format)) = find_route(uri.path()) else {
        return match subsystem_page(&shared.views.get(), uri.path()) {
            Some((view, format)) => rendered(&view, format),
            None => no_endpoint(route).into_response(),
        };
    };
    let view = match found.endpoint {
        Endpoint::Ui => return ui_page(),
        Endpoint::Graph => match shared.views.get().view::<ModulesView>() {
            Some(m) => return graph_answer(&m.engine, &query).await,
            None => Err(modules_off()),
        },
        endpoint => answer(&shared, endpoint, &params, route, &query).await,
    };
    let view = match view {
        Ok(v) => v,
        Err(f) => return f.into_response(),
    };
    rendered(&view, format)
}

/// `view` in `format`, answered.
fn rendered(view: &View, format: Format) -> Response {
    match view.render(format) {
        Ok((body, content_type)) => ([(header::CONTENT_TYPE, content_type)], body).into_response(),
        Err(e) => Failure(StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}

/// The routes as `/discovery` lists them: the debug endpoints' own, with each
/// subsystem's page after the actors'.
fn discovered(parts: &crate::host::Parts) -> Vec<String> {
    let mut routes = Vec::new();
    for r in ROUTES {
        routes.push(r.shown.to_string());
        if r.endpoint == Endpoint::Actor {
            routes.extend(
                parts
                    .views()
                    .filter_map(|v| v.page())
                    .map(|p| format!("{p}.{{json|yaml|text}}")),
            );
        }
    }
    routes
}

/// The kinds of actors the subsystems declare.
fn actor_kinds(parts: &crate::host::Parts) -> Vec<(&'static str, &'static str)> {
    parts
        .views()
        .flat_map(|v| v.actor_kinds().iter().copied())
        .collect()
}

/// A subsystem's own page at `path` (its part of `/actors` alone), with the format its
/// extension picks.
fn subsystem_page(parts: &crate::host::Parts, path: &str) -> Option<(View, Format)> {
    let (route, format) = Format::split(path);
    let part = parts.views().find(|v| v.page() == Some(route))?.actors()?;
    let mut data = serde_json::Map::new();
    data.insert(part.key.to_string(), part.data);
    Some((
        View {
            data: Value::Object(data),
            text: Some(part.text),
        },
        format,
    ))
}

/// `/ha`: this replica's high-availability state, or that it runs alone.
fn ha_view(status: Option<&crate::host::HaStatus>) -> View {
    let Some(status) = status else {
        return View {
            data: serde_json::json!({"role": "single"}),
            text: Some("High availability: off (a single replica)\n".into()),
        };
    };
    let data = status();
    let mut text = format!(
        "High availability: {} as {}; the lease is held by {}\n",
        data["role"].as_str().unwrap_or("?"),
        data["identity"].as_str().unwrap_or("?"),
        data["holder"].as_str().unwrap_or("nobody"),
    );
    for j in data["journals"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "  journal {}: {} standby(s) streaming",
            j["journal"].as_str().unwrap_or("?"),
            j["standbys"].as_u64().unwrap_or(0)
        ));
        if let Some(acked) = j["acked"].as_u64() {
            text.push_str(&format!(", durable on a standby up to seq {acked}"));
        }
        text.push('\n');
    }
    View {
        data,
        text: Some(text),
    }
}

fn no_endpoint(route: &str) -> Failure {
    Failure(
        StatusCode::NOT_FOUND,
        format!("no debug endpoint {route}; see /discovery"),
    )
}

/// The view of a `GET` route found in `route` (its path without the extension), with the
/// route's parameters.
async fn answer(
    shared: &Shared,
    endpoint: Endpoint,
    params: &[String],
    route: &str,
    query: &HashMap<String, String>,
) -> Result<View, Failure> {
    let name = params.first().map(String::as_str).unwrap_or_default();
    let views = shared.views.get();
    match endpoint {
        Endpoint::ConfigList => {
            let config = &shared.config;
            Ok(View {
                data: config.list(),
                text: Some(config.text()),
            })
        }
        Endpoint::Discovery => {
            let routes = discovered(&views);
            Ok(View {
                text: Some(routes.iter().map(|r| format!("GET {r}\n")).collect()),
                data: json!({ "routes": routes }),
            })
        }
        Endpoint::Actors => {
            let mut view = views::actors(&shared.mailboxes.snapshot(), &actor_kinds(&views));
            for part in views.views().filter_map(|v| v.actors()) {
                view.data[part.key] = part.data;
                if let Some(text) = view.text.as_mut() {
                    text.push_str(&part.text);
                }
            }
            Ok(view)
        }
        Endpoint::Ha => Ok(ha_view(views.ha.as_ref())),
        Endpoint::Explain => {
            let words: Vec<String> = param(query, "subject")
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect();
            let subject = explain::Subject::parse(&words, param(query, "namespace").as_deref())
                .map_err(|e| Failure(StatusCode::BAD_REQUEST, format!("subject: {e}")))?;
            let e = explain::explain_running(&subject, &views).await;
            Ok(View {
                text: Some(e.text()),
                data: serde_json::to_value(&e).unwrap_or_default(),
            })
        }
        Endpoint::Actor => {
            let snapshot = shared.mailboxes.snapshot();
            match snapshot.get(name) {
                Some(stats) => Ok(views::actor(name, stats, &actor_kinds(&views))),
                None => Err(Failure(
                    StatusCode::NOT_FOUND,
                    format!(
                        "no actor named {name:?}; actors: {}",
                        snapshot.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )),
            }
        }
        // Answered before (`/ui`, `/graph`) or by their own handler (`POST /config/set`).
        Endpoint::Ui | Endpoint::Graph | Endpoint::ConfigSet => Err(no_endpoint(route)),
        endpoint => match views.view::<ModulesView>() {
            Some(modules) => modules_answer(modules, endpoint, params, route, query).await,
            None => Err(modules_off()),
        },
    }
}

/// The answer of an endpoint about modules while they are switched off.
fn modules_off() -> Failure {
    Failure(
        StatusCode::NOT_FOUND,
        "the modules are switched off (BOSUN_MODULES=false)".into(),
    )
}

/// The view of an endpoint about the modules, their queues or their journal.
async fn modules_answer(
    modules: &ModulesView,
    endpoint: Endpoint,
    params: &[String],
    route: &str,
    query: &HashMap<String, String>,
) -> Result<View, Failure> {
    let engine = &modules.engine;
    let shared = modules;
    let name = params.first().map(String::as_str).unwrap_or_default();
    let loaded = |name: &str| engine.modules().iter().any(|(m, _)| m == name);
    match endpoint {
        Endpoint::QueueList => {
            let dumps = ask("the queues", engine.queues()).await?;
            Ok(views::queue_list(&dumps, flag(query, "showEmpty")))
        }
        Endpoint::QueueMain => {
            let dumps = ask("the queues", engine.queues()).await?;
            Ok(views::queue_main(dumps.iter().find(|q| q.name == "main")))
        }
        Endpoint::GlobalList => Ok(View::data(
            json!({"globalHooks": engine.global_hook_names()}),
        )),
        Endpoint::GlobalValues => {
            let doc = ask("the global hooks actor", engine.global_values())
                .await?
                .ok_or_else(|| {
                    Failure(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "the global hooks actor is not running".into(),
                    )
                })?;
            Ok(View::data(doc["global"].clone()))
        }
        Endpoint::GlobalConfig => {
            let doc = ask("the global hooks actor", engine.global_config())
                .await?
                .map_err(not_found)?;
            Ok(View::data(doc["global"].clone()))
        }
        Endpoint::GlobalSnapshots => Ok(View::data(engine.snapshots(None))),
        // Patches are read from the journal, where every accepted patch is.
        Endpoint::GlobalPatches => journal_patches(shared, "global").await,
        Endpoint::ModulePatches if loaded(name) => journal_patches(shared, name).await,
        Endpoint::ModulePatches => Err(no_endpoint(route)),
        Endpoint::ResourceMonitor => Ok(View::data(engine.resource_monitors())),
        Endpoint::ModuleRender if flag(query, "diff") => {
            let what = format!("module {name}");
            let previews = ask_within(&what, DIFF_TIMEOUT, engine.module_preview(name))
                .await?
                .map_err(not_found)?;
            diff::diff_view(&previews).map_err(|e| {
                Failure(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("module {name}: {e}"),
                )
            })
        }
        Endpoint::ModuleRender => {
            let objects = ask(&format!("module {name}"), engine.module_render(name))
                .await?
                .map_err(not_found)?;
            let mut text = String::new();
            for o in &objects {
                let doc = serde_saphyr::to_string(o).map_err(|e| {
                    Failure(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("cannot write YAML: {e}"),
                    )
                })?;
                text.push_str("---\n");
                text.push_str(&doc);
            }
            Ok(View {
                data: Value::Array(objects),
                text: Some(text),
            })
        }
        Endpoint::ModuleSnapshots => {
            if !loaded(name) {
                return Err(Failure(
                    StatusCode::NOT_FOUND,
                    format!("module {name} is not loaded"),
                ));
            }
            Ok(View::data(engine.snapshots(Some(name))))
        }
        Endpoint::ModuleList => {
            // addon-operator's answer (`enabledModules`, sorted), and every module with its
            // state in run order, as the seed describes the command.
            let modules = engine.modules();
            let mut enabled: Vec<String> = modules
                .iter()
                .filter(|(_, on)| *on)
                .map(|(n, _)| n.clone())
                .collect();
            enabled.sort();
            let all: Vec<Value> = modules
                .iter()
                .map(|(n, on)| json!({"name": n, "enabled": on}))
                .collect();
            Ok(View::data(
                json!({"enabledModules": enabled, "modules": all}),
            ))
        }
        Endpoint::ModuleValues | Endpoint::ModuleConfig => {
            let doc = if endpoint == Endpoint::ModuleValues {
                ask(&format!("module {name}"), engine.module_values(name)).await?
            } else {
                ask(&format!("module {name}"), engine.module_config(name)).await?
            }
            .map_err(not_found)?;
            if flag(query, "global") {
                return Ok(View::data(doc));
            }
            let key = bosun_addon::values::values_key(name);
            Ok(View::data(doc.get(&key).cloned().unwrap_or(json!({}))))
        }
        Endpoint::JournalLog => {
            let limit = match param(query, "limit") {
                None => LOG_LIMIT,
                Some(v) => v.parse().map_err(|_| {
                    Failure(
                        StatusCode::BAD_REQUEST,
                        format!("limit {v:?} is not a whole number (0: every event)"),
                    )
                })?,
            };
            let q = LogQuery {
                since: param(query, "since"),
                until: param(query, "until"),
                module: param(query, "module"),
                queue: param(query, "queue"),
                limit: Some(limit),
            };
            journal_answer(shared, Box::new(move |j| journal_views::log_view(j, &q))).await
        }
        Endpoint::JournalState => {
            let at = param(query, "at");
            journal_answer(
                shared,
                Box::new(move |j| journal_views::state_view(j, at.as_deref())),
            )
            .await
        }
        Endpoint::JournalWhy => {
            let id = name
                .parse()
                .map_err(|e: bosun_runtime::task::InvalidTaskId| {
                    Failure(StatusCode::BAD_REQUEST, e.to_string())
                })?;
            journal_answer(shared, Box::new(move |j| journal_views::why_view(j, id))).await
        }
        Endpoint::JournalStats => journal_answer(shared, Box::new(journal_views::stats_view)).await,
        // Answered by `answer`.
        Endpoint::ConfigList
        | Endpoint::Discovery
        | Endpoint::Actors
        | Endpoint::Actor
        | Endpoint::Ha
        | Endpoint::Explain
        | Endpoint::Ui
        | Endpoint::Graph
        | Endpoint::ConfigSet => Err(no_endpoint(route)),
    }
}

/// The form of `POST /config/set`.
#[derive(serde::Deserialize)]
struct ConfigSet {
    #[serde(default)]
    name: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    duration: String,
}

/// `POST /config/set`: changes a runtime parameter, for `duration` when one is given.
async fn config_set(
    State(shared): State<Shared>,
    axum::Form(form): axum::Form<ConfigSet>,
) -> Response {
    let bad = |m: String| Failure(StatusCode::BAD_REQUEST, m).into_response();
    if form.name.is_empty() {
        return bad("'name' parameter is required".into());
    }
    if form.value.is_empty() {
        return bad("'value' parameter is required".into());
    }
    let duration = match form.duration.as_str() {
        "" => None,
        text => match crate::runtime_config::parse_duration(text) {
            Ok(d) => Some(d),
            Err(e) => return bad(format!("parse duration failed: {e}")),
        },
    };
    use crate::runtime_config::SetError;
    match shared.config.set(&form.name, &form.value, duration) {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e @ (SetError::Unknown(_) | SetError::Invalid { .. })) => bad(e.to_string()),
        Err(e @ SetError::Apply { .. }) => {
            Failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
        }
    }
}

/// `/graph`: the module graph as DOT text (`format=text`) or drawn as a PNG by graphviz
/// (otherwise; 501 when graphviz is not installed).
async fn graph_answer(engine: &Engine, query: &HashMap<String, String>) -> Response {
    let modules: Vec<graph::ModuleVertex> = engine
        .module_orders()
        .into_iter()
        .map(|(name, weight, enabled)| graph::ModuleVertex {
            name,
            weight,
            enabled,
        })
        .collect();
    let text = graph::dot(&modules);
    match query.get("format").map(String::as_str) {
        Some("text" | "dot") => {
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
        }
        None | Some("" | "png") => match graph::png(&graph::dot_program(), &text).await {
            Ok(png) => ([(header::CONTENT_TYPE, "image/png")], png).into_response(),
            Err(e @ graph::GraphError::NoGraphviz(..)) => {
                Failure(StatusCode::NOT_IMPLEMENTED, e.to_string()).into_response()
            }
            Err(e) => Failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
        Some(other) => Failure(
            StatusCode::BAD_REQUEST,
            format!(
                "format {other:?} is not known; /graph answers format=text (DOT) or format=png"
            ),
        )
        .into_response(),
    }
}

/// A query parameter, absent when empty.
fn param(query: &HashMap<String, String>, name: &str) -> Option<String> {
    query.get(name).filter(|v| !v.is_empty()).cloned()
}

/// A journal view to compute on a blocking thread.
type JournalView = Box<dyn FnOnce(&Journal<Event>) -> Result<View, ViewError> + Send>;

/// The memory values patches of a scope (`global` or a module), from the journal.
async fn journal_patches(shared: &ModulesView, scope: &str) -> Result<View, Failure> {
    let scope = scope.to_string();
    journal_answer(
        shared,
        Box::new(move |j| journal_views::patches_view(j, &scope)),
    )
    .await
}

/// A view of `bosun journal` on the journal this bosun writes (read on a blocking thread:
/// the storage is synchronous).
async fn journal_answer(shared: &ModulesView, compute: JournalView) -> Result<View, Failure> {
    let journal = shared.journal.clone();
    let result = tokio::task::spawn_blocking(move || compute(&journal))
        .await
        .map_err(|e| {
            Failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the journal failed: {e}"),
            )
        })?;
    result.map_err(|e| match e {
        ViewError::BadRequest(m) => Failure(StatusCode::BAD_REQUEST, m),
        ViewError::NotFound(m) => Failure(StatusCode::NOT_FOUND, m),
        ViewError::Failed(m) => Failure(StatusCode::INTERNAL_SERVER_ERROR, m),
    })
}

/// Picks the socket path: `ADDON_OPERATOR_DEBUG_UNIX_SOCKET`, `DEBUG_UNIX_SOCKET`, else
/// `default`.
pub fn socket_from_env(default: &Path) -> PathBuf {
    ["ADDON_OPERATOR_DEBUG_UNIX_SOCKET", "DEBUG_UNIX_SOCKET"]
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
        .map(PathBuf::from)
        .unwrap_or_else(|| default.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_reach_a_loopback_listener() {
        for ok in [
            "127.0.0.1:9652",
            "127.0.0.1",
            "localhost:9652",
            "LOCALHOST",
            "[::1]:9652",
            "[::1]",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for refused in [
            "evil.example:9652",
            "evil.example",
            "",
            "10.0.0.1:9652",
            "[::2]:1",
        ] {
            assert!(!loopback_host(refused), "{refused}");
        }
    }

    #[test]
    fn remote_addresses_need_consent() {
        assert!(parse_http_addr("127.0.0.1:9652", false).is_ok());
        assert!(parse_http_addr("localhost:9652", false).is_ok());
        assert!(parse_http_addr("[::1]:9652", false).is_ok());
        let err = parse_http_addr(":9652", false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("BOSUN_DEBUG_ALLOW_REMOTE=true"), "{err}");
        assert!(parse_http_addr("0.0.0.0:9652", true).is_ok());
        assert!(parse_http_addr("nonsense", true).is_err());
    }

    #[test]
    fn every_route_is_found_by_its_own_path() {
        for route in ROUTES.iter().filter(|r| !r.post()) {
            let (pattern, formats) = route.pattern();
            let path = pattern.replace("{name}", "demo").replace("{task}", "t1");
            let params: Vec<String> = match (pattern.contains("{name}"), pattern.contains("{task}"))
            {
                (true, _) => vec!["demo".into()],
                (_, true) => vec!["t1".into()],
                _ => Vec::new(),
            };
            let path = if formats {
                format!("{path}.json")
            } else {
                path
            };
            let found = find_route(&path).map(|(r, params, _)| (r.endpoint, params));
            assert_eq!(found, Some((route.endpoint, params)), "{path}");
        }
    }

    #[test]
    fn routes_take_their_parameters_and_formats() {
        let found = |p: &str| find_route(p).map(|(r, params, f)| (r.endpoint, params, f));
        assert_eq!(
            found("/actors/queue/main.yaml"),
            Some((Endpoint::Actor, vec!["queue/main".into()], Format::Yaml))
        );
        assert_eq!(
            found("/module/demo/values"),
            Some((Endpoint::ModuleValues, vec!["demo".into()], Format::Text))
        );
        assert_eq!(
            found("/queue/list/"),
            Some((Endpoint::QueueList, Vec::new(), Format::Text))
        );
        assert_eq!(
            found("/graph/"),
            Some((Endpoint::Graph, Vec::new(), Format::Text))
        );
        for unknown in [
            "/ui.json",
            "/config/set",
            "/journal/why/t1/more.json",
            "/journal/nope.json",
            "/",
        ] {
            assert_eq!(found(unknown), None, "{unknown}");
        }
    }

    #[tokio::test]
    async fn the_socket_is_private_and_replaces_a_stale_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("run/sub/debug.socket");
        let listener = bind_socket(&path).expect("bind");
        let mode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0)
        };
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().expect("parent")), 0o700);
        // In use: refused.
        let err = bind_socket(&path).err().map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains("in use"));
        // Stale (nobody listens): replaced.
        drop(listener);
        assert!(bind_socket(&path).is_ok());
        // Not a socket: left alone.
        let file = dir.path().join("file");
        std::fs::write(&file, "x").expect("write");
        assert!(bind_socket(&file).is_err());
        assert!(file.exists());
    }
}
