//! The HTTP surface: path routing, content negotiation, and the REST verbs.
//!
//! ```text
//!  request ─► auth ─► route (discovery | openapi | resource)
//!                         resource ─► verb ─► objects::* under the store lock ─► commit
//!                                      └─► list / watch (store snapshot + live changes)
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bosun_platform::{loopback_host, single_host};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;

use super::objects::{self, Part, Propagation, Writer};
use super::resources::ResourceInfo;
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, success_status};
use super::store::{Change, ChangeType, Inner, ResKey, Store};
use super::table::{self, Include};
use super::{discovery, openapi};

/// Largest request body accepted (kube-apiserver's limit is 3 MiB).
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

/// How much of an oversized body is read and discarded before answering 413, so that the
/// client finishes sending and reads the answer instead of a connection reset.
const MAX_DRAIN: usize = 64 * 1024 * 1024;

/// Reads a request body of at most [`MAX_BODY`] bytes. A larger body is drained (up to
/// [`MAX_DRAIN`]) and answered with 413.
async fn read_body(body: axum::body::Body) -> Result<bytes::Bytes, ApiError> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut buf = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return Err(ApiError::bad_request("the request body could not be read"));
        };
        seen += chunk.len();
        if seen <= MAX_BODY {
            buf.extend_from_slice(&chunk);
        } else if seen > MAX_DRAIN {
            break;
        }
    }
    if seen > MAX_BODY {
        return Err(ApiError::too_large(MAX_BODY));
    }
    Ok(buf.freeze())
}

/// Shared state of the HTTP handlers.
pub struct App {
    /// The object store.
    pub store: Arc<Store>,
    /// Wakes the garbage collector.
    pub gc: Arc<Notify>,
    /// Required bearer token, if any.
    pub token: Option<String>,
    /// Service account tokens issued by TokenRequests (`serviceaccounts/<name>/token`),
    /// accepted as well as `token` until they expire (unix seconds).
    pub issued: std::sync::Mutex<HashMap<String, u64>>,
    /// `host:port` clients reach the server at.
    pub server_address: String,
    /// Answer only requests whose `Host` is a loopback name (the server listens on
    /// loopback): a web page whose own name was made to resolve to 127.0.0.1 (DNS
    /// rebinding) would otherwise read every object through the browser.
    pub loopback_hosts_only: bool,
    /// Turns true when the server stops: open watches end their streams, so that the
    /// connections carrying them can close at once.
    pub stopping: Arc<tokio::sync::watch::Sender<bool>>,
    /// Injected delays and refusals (off by default).
    pub faults: Arc<crate::faults::Faults>,
}

/// Content types a browser sends cross-origin without asking first (a CORS "simple
/// request"): a write carrying one of them (or none) may come from any web page.
const SIMPLE_CONTENT_TYPES: &[&str] = &[
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
];

/// What writes may carry, for the refusal's message.
const ACCEPTED_CONTENT_TYPES: &str = "application/json, application/yaml, \
     application/vnd.kubernetes.protobuf, application/json-patch+json, \
     application/merge-patch+json, application/strategic-merge-patch+json, \
     application/apply-patch+yaml";

/// Refuses what a web page could send: a foreign `Host` on a loopback server, and writes
/// with a content type a browser sends cross-origin without a preflight (or with none,
/// when the request comes from a browser).
fn refuse_browser_requests(app: &App, req: &Request) -> Result<(), ApiError> {
    if app.loopback_hosts_only {
        let several = req.headers().get_all("host").iter().count() > 1;
        let host = single_host(req.headers())
            .or_else(|| req.uri().authority().map(|a| a.as_str()))
            .unwrap_or_default();
        if several || !loopback_host(host) {
            return Err(ApiError::forbidden(format!(
                "Host {host:?} is not a loopback name: the sandbox listens on loopback and \
                 answers only http://127.0.0.1:PORT, http://localhost:PORT or \
                 http://[::1]:PORT, so that a web page cannot reach it by rebinding its own name"
            )));
        }
    }
    if matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH) {
        let content_type = req
            .headers()
            .get("content-type")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let media = content_type
            .as_deref()
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        // A browser's fetch() of a Blob or an ArrayBuffer sends no content type, and an
        // Origin; clients that send no content type (the Python client does, on some
        // writes) send no Origin.
        let from_browser = req.headers().contains_key("origin");
        if SIMPLE_CONTENT_TYPES.contains(&media.as_str()) || (media.is_empty() && from_browser) {
            let what = match &content_type {
                Some(ct) => format!("Content-Type {ct:?}"),
                None => "no Content-Type".to_string(),
            };
            return Err(ApiError::unsupported_media_type(format!(
                "{} with {what} refused: any web page can send that cross-origin, so the \
                 sandbox does not accept it for writes; accepted content types: \
                 {ACCEPTED_CONTENT_TYPES}",
                req.method()
            )));
        }
    }
    Ok(())
}

/// The axum router of the sandbox.
pub fn router(app: Arc<App>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(app)
}

async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    if app.faults.active()
        && let Some(err) = app.faults.before(&path).await
    {
        tracing::debug!(%method, %path, code = err.code, "sandbox injected a fault");
        return err.into_response();
    }
    let response = match dispatch(&app, req).await {
        Ok(response) => response,
        Err(err) => {
            tracing::debug!(%method, %path, code = err.code, message = %err.message, "sandbox request failed");
            err.into_response()
        }
    };
    tracing::trace!(%method, %path, status = response.status().as_u16(), "sandbox request");
    response
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    (
        code,
        [("content-type", "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// The plain-text 404 kube-apiserver answers for a path outside every API it serves.
fn page_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [("content-type", "text/plain; charset=utf-8")],
        "404 page not found\n",
    )
        .into_response()
}

fn ok(value: &Value) -> Response {
    json_response(StatusCode::OK, value)
}

/// A parsed resource path.
struct ResourcePath {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    sub: Option<String>,
}

enum Route {
    Health,
    Version,
    CoreVersions,
    Groups,
    Group(String),
    GroupVersion(String, String),
    OpenApiV2,
    OpenApiV3Index,
    OpenApiV3(String, String),
    Resource(ResourcePath),
}

/// A path segment with its `%XX` escapes decoded, as kube-apiserver reads names
/// (`system%3Aprobe` is `system:probe`); a segment that does not decode to UTF-8 is kept.
fn percent_decode(segment: &str) -> std::borrow::Cow<'_, str> {
    if !segment.contains('%') {
        return segment.into();
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    match String::from_utf8(out) {
        Ok(decoded) => decoded.into(),
        Err(_) => segment.into(),
    }
}

fn route(path: &str) -> Option<Route> {
    let decoded: Vec<std::borrow::Cow<'_, str>> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = decoded.iter().map(|s| s.as_ref()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["healthz" | "livez" | "readyz", ..] => return Some(Route::Health),
        ["version"] => return Some(Route::Version),
        ["api"] => return Some(Route::CoreVersions),
        ["apis"] => return Some(Route::Groups),
        ["apis", g] => return Some(Route::Group(g.to_string())),
        ["openapi", "v2"] => return Some(Route::OpenApiV2),
        ["openapi", "v3"] => return Some(Route::OpenApiV3Index),
        ["openapi", "v3", "api", v] => return Some(Route::OpenApiV3(String::new(), v.to_string())),
        ["openapi", "v3", "apis", g, v] => {
            return Some(Route::OpenApiV3(g.to_string(), v.to_string()));
        }
        ["api", v] => return Some(Route::GroupVersion(String::new(), v.to_string())),
        ["apis", g, v] => return Some(Route::GroupVersion(g.to_string(), v.to_string())),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let owned = |s: &&str| s.to_string();
    let (namespace, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !matches!(*plural, "status" | "finalize") => (
            Some(ns.to_string()),
            plural.to_string(),
            tail.first().map(owned),
            tail.get(1).map(owned),
        ),
        [plural, tail @ ..] => (
            None,
            plural.to_string(),
            tail.first().map(owned),
            tail.get(1).map(owned),
        ),
        [] => return None,
    };
    if rest.len() > 5 {
        return None;
    }
    Some(Route::Resource(ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        namespace,
        plural,
        name,
        sub,
    }))
}

async fn dispatch(app: &Arc<App>, req: Request) -> Result<Response, ApiError> {
    refuse_browser_requests(app, &req)?;
    if let Some(token) = &app.token {
        let presented = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let issued = presented
            .strip_prefix("Bearer ")
            .is_some_and(|t| app.issued_token_valid(t));
        if presented != format!("Bearer {token}") && !issued && req.uri().path() != "/healthz" {
            let why = if presented.is_empty() {
                "Unauthorized: the request carries no bearer token, and this API server \
                 requires one (Authorization: Bearer <token>)"
            } else {
                "Unauthorized: the bearer token was refused (it is not the token this API \
                 server was started with)"
            };
            return Err(ApiError::unauthorized(why));
        }
    }
    let query: HashMap<String, String> = Query::<HashMap<String, String>>::try_from_uri(req.uri())
        .map(|q| q.0)
        .unwrap_or_default();
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let headers = req.headers().clone();
    let Some(route) = route(&path) else {
        return Ok(page_not_found());
    };
    let body = read_body(req.into_body()).await?;
    let resources = || app.store.lock().resources.clone();
    match route {
        Route::Health => Ok((StatusCode::OK, "ok").into_response()),
        Route::Version => Ok(ok(&discovery::version())),
        Route::CoreVersions => Ok(ok(&discovery::core_versions(&app.server_address))),
        Route::Groups => Ok(ok(&discovery::group_list(&resources()))),
        Route::Group(g) => Ok(discovery::group(&resources(), &g)
            .map(|d| ok(&d))
            .unwrap_or_else(page_not_found)),
        Route::GroupVersion(g, v) => Ok(discovery::resource_list(&resources(), &g, &v)
            .map(|d| ok(&d))
            .unwrap_or_else(page_not_found)),
        Route::OpenApiV2 => {
            let accept = header(&headers, "accept");
            if accept.contains("protobuf") {
                Ok((
                    StatusCode::OK,
                    [(
                        "content-type",
                        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                    )],
                    openapi::v2_protobuf(&resources()),
                )
                    .into_response())
            } else {
                Ok(ok(&openapi::v2_json(&resources())))
            }
        }
        Route::OpenApiV3Index => Ok(ok(&openapi::v3_index(&resources()))),
        Route::OpenApiV3(g, v) => openapi::v3_group_version(&resources(), &g, &v)
            .map(|d| ok(&d))
            .ok_or_else(|| ApiError::no_route(&path)),
        Route::Resource(rp) => {
            let all = resources();
            let builtin_group = super::resources::builtin_resources()
                .iter()
                .any(|r| r.group == rp.group);
            // A custom group's handler knows only its resources: anything else there is
            // the plain 404 too.
            let served = all.iter().any(|r| {
                r.group == rp.group
                    && r.version == rp.version
                    && (builtin_group || r.plural == rp.plural)
            });
            if !served {
                // kube-apiserver has no handler for a group version it does not serve.
                return Ok(page_not_found());
            }
            let write = method != Method::GET;
            let response = resource(app, method, rp, &query, &headers, body).await;
            if write {
                // Acknowledge a write only once it is durable.
                app.store.wait_durable().await;
            }
            response
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn flag(query: &HashMap<String, String>, name: &str) -> bool {
    query.get(name).is_some_and(|v| v == "true" || v == "1")
}

fn writer(query: &HashMap<String, String>, headers: &HeaderMap) -> Writer {
    let manager = query
        .get("fieldManager")
        .cloned()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| {
            let agent = header(headers, "user-agent");
            let product = agent.split('/').next().unwrap_or_default();
            if product.is_empty() {
                "unknown".to_string()
            } else {
                product.to_string()
            }
        });
    Writer {
        manager,
        dry_run: query.get("dryRun").is_some_and(|v| v == "All"),
        operation: "Update",
    }
}

/// Decodes a request body: JSON, or YAML where the content type says so.
fn decode(content_type: &str, body: &[u8]) -> Result<Value, ApiError> {
    let ct = content_type.split(';').next().unwrap_or_default().trim();
    if ct == "application/vnd.kubernetes.protobuf" {
        return super::protobuf::decode_body(body)
            .map_err(|e| ApiError::unsupported_media_type(e.to_string()));
    }
    if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({ct})"
        )));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the request body is empty; expected a JSON object",
        ));
    }
    let value: Value = if ct.ends_with("yaml") {
        let text = std::str::from_utf8(body)
            .map_err(|_| ApiError::bad_request("the YAML body is not valid UTF-8"))?;
        serde_saphyr::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("couldn't decode the body as JSON: {e}")))?
    };
    Ok(value)
}

fn find_info(app: &App, rp: &ResourcePath) -> Result<ResourceInfo, ApiError> {
    let inner = app.store.lock();
    let info = inner
        .resource(&rp.group, &rp.version, &rp.plural)
        .cloned()
        .ok_or_else(|| ApiError::no_route(&format!("{}/{} {}", rp.group, rp.version, rp.plural)))?;
    if !info.namespaced && rp.namespace.is_some() {
        return Err(ApiError::no_route(&format!(
            "{} is not namespaced",
            rp.plural
        )));
    }
    Ok(info)
}

async fn resource(
    app: &Arc<App>,
    method: Method,
    rp: ResourcePath,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let info = find_info(app, &rp)?;
    let ns = rp.namespace.as_deref();
    let accept = header(headers, "accept");
    let content_type = header(headers, "content-type");
    match (&method, rp.name.as_deref(), rp.sub.as_deref()) {
        (&Method::GET, None, None) => {
            if flag(query, "watch") {
                watch(app, &info, ns, query, accept)
            } else {
                list(app, &info, ns, query, accept)
            }
        }
        (&Method::GET, Some(name), sub) => get(app, &info, ns, name, sub, query, accept),
        (&Method::POST, Some(name), Some("token")) if info.plural == "serviceaccounts" => {
            let request = decode(content_type, &body)?;
            token_request(app, &info, ns, name, &request)
        }
        (&Method::POST, None, None) => {
            let obj = decode(content_type, &body)?;
            let w = writer(query, headers);
            let mut inner = app.store.lock();
            let created = objects::create(&mut inner, &info, ns, obj, &w)?;
            app.store.commit(inner)?;
            wake_gc(app, &created);
            Ok(json_response(
                StatusCode::CREATED,
                &objects::present(&created, &info),
            ))
        }
        (&Method::PUT, Some(name), sub) => {
            let new = decode(content_type, &body)?;
            let part = part_of(&info, sub)?;
            if sub == Some("scale") {
                return write_scale(
                    app,
                    &info,
                    ns,
                    name,
                    ScaleWrite::Replace(new),
                    query,
                    headers,
                );
            }
            let w = writer(query, headers);
            let mut inner = app.store.lock();
            let old = inner.get(&ResKey::of(&info), ns.unwrap_or_default(), name);
            let Some(old) = old else {
                return Err(ApiError::not_found(&info.plural, &info.group, name));
            };
            // Custom resources are never updated unconditionally.
            if info.schema.is_some()
                && new["metadata"]["resourceVersion"]
                    .as_str()
                    .is_none_or(str::is_empty)
            {
                return Err(ApiError::invalid_in(
                    &info.group,
                    &info.plural,
                    name,
                    &[(
                        "metadata.resourceVersion",
                        "Invalid value: 0: must be specified for an update".into(),
                    )],
                ));
            }
            let updated = objects::replace(&mut inner, &info, &old, new, part, &w)?;
            app.store.commit(inner)?;
            wake_gc(app, &updated);
            Ok(ok(&objects::present(&updated, &info)))
        }
        (&Method::PATCH, Some(name), sub) => {
            patch(app, &info, ns, name, sub, query, headers, &body)
        }
        (&Method::DELETE, Some(name), None) => delete(app, &info, ns, name, query, &body),
        (&Method::DELETE, None, None)
            if !super::discovery::verbs(&info).contains(&"deletecollection") =>
        {
            Err(ApiError::method_not_allowed("DELETE", &info.plural))
        }
        (&Method::DELETE, None, None) => delete_collection(app, &info, ns, query, &body),
        _ => Err(ApiError::method_not_allowed(method.as_str(), &info.plural)),
    }
}

impl App {
    /// Whether `token` was issued by a TokenRequest and has not expired.
    fn issued_token_valid(&self, token: &str) -> bool {
        let now = unix_now();
        let issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        issued.get(token).is_some_and(|until| *until > now)
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `POST serviceaccounts/<name>/token` (authentication.k8s.io/v1 TokenRequest): a token
/// of the service account, valid for `spec.expirationSeconds` (default 1h, at least 10
/// minutes) on this server.
fn token_request(
    app: &App,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    request: &Value,
) -> Result<Response, ApiError> {
    let namespace = ns.unwrap_or_default();
    if app
        .store
        .lock()
        .get(&ResKey::of(info), namespace, name)
        .is_none()
    {
        return Err(ApiError::not_found(&info.plural, &info.group, name));
    }
    let seconds = match &request["spec"]["expirationSeconds"] {
        Value::Null => 3600,
        v => match v.as_u64() {
            Some(s) if s >= 600 => s,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "spec.expirationSeconds: may not specify a duration less than 10 minutes, got {v}"
                )));
            }
        },
    };
    let token = format!(
        "sandbox.{namespace}.{name}.{}",
        uuid::Uuid::new_v4().simple()
    );
    let until = unix_now() + seconds;
    app.issued
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(token.clone(), until);
    let expires =
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(until))
            .to_string();
    Ok(json_response(
        StatusCode::CREATED,
        &json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": objects::now_rfc3339()},
            "spec": {"audiences": request["spec"]["audiences"].clone(), "expirationSeconds": seconds},
            "status": {"token": token, "expirationTimestamp": expires},
        }),
    ))
}

fn part_of(info: &ResourceInfo, sub: Option<&str>) -> Result<Part, ApiError> {
    match sub {
        None => Ok(Part::Main),
        Some("status") if info.status_subresource => Ok(Part::Status),
        Some("finalize") if info.plural == "namespaces" => Ok(Part::Main),
        Some("scale") if info.scale.is_some() => Ok(Part::Main),
        Some(other) => Err(ApiError::no_route(&format!("{}/{other}", info.plural))),
    }
}

/// Wakes the garbage collector when a write may have given it work: an object being
/// deleted, or a dependent with an owner that is gone or being deleted. A collection pass
/// reads every object, so a dependent written under live owners (each child a controller
/// creates or updates), which gives it nothing to do, does not wake it.
fn wake_gc(app: &App, obj: &Value) {
    let meta = &obj["metadata"];
    if !meta["deletionTimestamp"].is_null() {
        app.gc.notify_one();
        return;
    }
    let Some(refs) = meta["ownerReferences"].as_array().filter(|r| !r.is_empty()) else {
        return;
    };
    let owners_live = {
        let inner = app.store.lock();
        refs.iter().all(|r| owner_live(&inner, obj, r))
    };
    if !owners_live {
        app.gc.notify_one();
    }
}

/// Whether the owner `reference` of `dependent` names an object that exists with that
/// uid and is not being deleted (anything unclear counts as not live).
fn owner_live(inner: &Inner, dependent: &Value, reference: &Value) -> bool {
    let (Some(api_version), Some(kind), Some(name), Some(uid)) = (
        reference["apiVersion"].as_str(),
        reference["kind"].as_str(),
        reference["name"].as_str(),
        reference["uid"].as_str(),
    ) else {
        return false;
    };
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let Some(info) = inner
        .resources
        .iter()
        .find(|i| i.group == group && i.kind == kind)
    else {
        return false;
    };
    let ns = if info.namespaced {
        dependent["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
    } else {
        ""
    };
    inner.get(&ResKey::of(info), ns, name).is_some_and(|o| {
        o["metadata"]["uid"].as_str() == Some(uid) && o["metadata"]["deletionTimestamp"].is_null()
    })
}

fn get(
    app: &App,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Option<&str>,
    query: &HashMap<String, String>,
    accept: &str,
) -> Result<Response, ApiError> {
    part_of(info, sub)?;
    let obj = app
        .store
        .lock()
        .get(&ResKey::of(info), ns.unwrap_or_default(), name)
        .ok_or_else(|| ApiError::not_found(&info.plural, &info.group, name))?;
    if sub == Some("scale") {
        return Ok(ok(&scale_of(info, &obj)));
    }
    let obj = objects::present(&obj, info);
    if table::wants_table(accept) {
        let rv = obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let include = Include::parse(query.get("includeObject").map(String::as_str));
        return Ok(ok(&table::table(&[obj], info, include, &rv, None)));
    }
    Ok(ok(&obj))
}

struct Filter {
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn new(
        info: &ResourceInfo,
        ns: Option<&str>,
        query: &HashMap<String, String>,
    ) -> Result<Filter, ApiError> {
        let labels = LabelSelector::parse(
            query
                .get("labelSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(
            query
                .get("fieldSelector")
                .map(String::as_str)
                .unwrap_or_default(),
        )
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if let Some(known) = super::selector::kind_fields(&info.group, &info.kind)
            && let Some(unknown) = fields
                .paths()
                .find(|p| *p != "metadata.name" && *p != "metadata.namespace" && !known.contains(p))
        {
            let mut listed = vec![
                "\"metadata.name\"".to_string(),
                "\"metadata.namespace\"".to_string(),
            ];
            listed.extend(known.iter().map(|f| format!("{f:?}")));
            return Err(ApiError::bad_request(format!(
                "{unknown:?} is not a known field selector: only {}",
                listed.join(", ")
            )));
        }
        Ok(Filter {
            namespace: ns.map(String::from),
            labels,
            fields,
        })
    }

    /// Whether no label or field selector narrows the list.
    fn selects_everything(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj["metadata"]["namespace"].as_str().unwrap_or_default() != ns
        {
            return false;
        }
        self.labels.matches(obj["metadata"]["labels"].as_object()) && self.fields.matches(obj)
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse().map_err(|_| {
        ApiError::bad_request(format!("invalid resource version {s:?}: expected a number"))
    })
}

/// What kube-apiserver refuses in a list's options before reading anything: a
/// `resourceVersion` that is not a number (400), and a `resourceVersionMatch` other than
/// `Exact` or `NotOlderThan`, or one without a `resourceVersion` (422, as its
/// `ValidateListOptions`).
fn check_list_options(query: &HashMap<String, String>) -> Result<(), ApiError> {
    let rv = query.get("resourceVersion").filter(|s| !s.is_empty());
    if let Some(rv) = rv {
        parse_rv(rv)?;
    }
    let invalid = |message: String| {
        ApiError::invalid_in(
            "meta.k8s.io",
            "ListOptions",
            "",
            &[("resourceVersionMatch", message)],
        )
    };
    match query.get("resourceVersionMatch").map(String::as_str) {
        None | Some("") => Ok(()),
        Some("Exact" | "NotOlderThan") if rv.is_none() => Err(invalid(
            "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
                .into(),
        )),
        Some("Exact" | "NotOlderThan") => Ok(()),
        Some(other) => Err(invalid(format!(
            "Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
        ))),
    }
}

fn list(
    app: &App,
    info: &ResourceInfo,
    ns: Option<&str>,
    query: &HashMap<String, String>,
    accept: &str,
) -> Result<Response, ApiError> {
    check_list_options(query)?;
    let filter = Filter::new(info, ns, query)?;
    let limit: usize = match query.get("limit") {
        Some(l) => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        None => 0,
    };
    let start_after = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let key =
                unhex(token).ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
            let (ns, name) = key
                .split_once('\0')
                .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
            Some((ns.to_string(), name.to_string()))
        }
        None => None,
    };
    let (selected, more, last_key, rv) = {
        let inner = app.store.lock();
        if let (Some(rv), Some("Exact")) = (
            query.get("resourceVersion"),
            query.get("resourceVersionMatch").map(String::as_str),
        ) {
            let rv = parse_rv(rv)?;
            if rv != inner.rv {
                return Err(ApiError::gone(format!(
                    "too old resource version: {rv} ({}); only the latest is served for Exact lists",
                    inner.rv
                )));
            }
        }
        let mut objects = inner.list_after(&ResKey::of(info), ns, start_after);
        let mut selected: Vec<Arc<Value>> = Vec::new();
        let mut last_key = None;
        for (key, obj) in objects.by_ref() {
            if !filter.matches(obj) {
                continue;
            }
            selected.push(Arc::clone(obj));
            if limit > 0 && selected.len() == limit {
                last_key = Some(key);
                break;
            }
        }
        // What is left after a full page: kube-apiserver counts it only for a list
        // without selectors (from its store's count); with one, the page says only that
        // more may follow.
        let more = match last_key {
            None => 0,
            Some(_) if filter.selects_everything() => objects.count(),
            Some(_) => usize::from(objects.any(|(_, o)| filter.matches(o))),
        };
        let last_key = last_key.map(|(ns, name)| format!("{ns}\0{name}"));
        (selected, more, last_key, inner.rv)
    };
    let selected: Vec<Arc<Value>> = selected
        .into_iter()
        .map(|obj| objects::present(&obj, info))
        .collect();
    let cont = last_key.filter(|_| more > 0).map(|k| hex(&k));
    let rv = rv.to_string();
    if table::wants_table(accept) {
        let include = Include::parse(query.get("includeObject").map(String::as_str));
        return Ok(ok(&table::table(
            &selected,
            info,
            include,
            &rv,
            cont.as_deref(),
        )));
    }
    // Written by hand so that large lists are not copied into one big Value.
    let mut meta = json!({"resourceVersion": rv});
    let builtin = super::resources::builtin_resources()
        .iter()
        .any(|b| b.group == info.group && b.plural == info.plural);
    if !builtin {
        // Custom resources' lists (unstructured in kube-apiserver) always carry it.
        meta["continue"] = json!("");
    }
    if let Some(c) = &cont {
        meta["continue"] = json!(c);
        if filter.selects_everything() {
            meta["remainingItemCount"] = json!(more);
        }
    }
    let mut out = Vec::with_capacity(256 + selected.len() * 512);
    out.extend_from_slice(
        format!(
            r#"{{"kind":{},"apiVersion":{},"metadata":{},"items":["#,
            json!(info.list_kind),
            json!(info.api_version()),
            meta
        )
        .as_bytes(),
    );
    for (i, obj) in selected.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Built-in kinds' items leave apiVersion and kind to the list; custom resources
        // (unstructured in kube-apiserver) keep them.
        let written = if builtin {
            serde_json::to_writer(&mut out, &ListItem(obj))
        } else {
            serde_json::to_writer(&mut out, &**obj)
        };
        written.map_err(|e| ApiError::internal(e.to_string()))?;
    }
    out.extend_from_slice(b"]}");
    Ok((StatusCode::OK, [("content-type", "application/json")], out).into_response())
}

/// An object as a list's item: without `apiVersion` and `kind`, which kube-apiserver
/// leaves to the list (serialized in place, not copied).
struct ListItem<'a>(&'a Value);

impl serde::Serialize for ListItem<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(map) = self.0.as_object() else {
            return self.0.serialize(serializer);
        };
        let fields = map
            .iter()
            .filter(|(k, _)| k.as_str() != "apiVersion" && k.as_str() != "kind");
        let mut out = serializer.serialize_map(None)?;
        for (k, v) in fields {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

/// The watch event a change becomes for a filtered watcher, following kube-apiserver:
/// an object that starts matching is ADDED, one that stops matching is DELETED.
fn event_for(filter: &Filter, change: &Change) -> Option<&'static str> {
    let now = filter.matches(&change.object);
    match change.kind {
        ChangeType::Added => now.then_some("ADDED"),
        ChangeType::Deleted => now.then_some("DELETED"),
        ChangeType::Modified => {
            let before = change.old.as_ref().is_none_or(|o| filter.matches(o));
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

/// One watch event as kube-apiserver writes it: `type` first, then the object. Clients
/// that read the object as it comes (not buffered until the type is known) rely on the
/// order; the object is serialized in place, not copied into the event.
#[derive(serde::Serialize)]
struct EventLine<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a Value,
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&EventLine { kind, object }).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

fn watch(
    app: &App,
    info: &ResourceInfo,
    ns: Option<&str>,
    query: &HashMap<String, String>,
    accept: &str,
) -> Result<Response, ApiError> {
    let filter = Filter::new(info, ns, query)?;
    let res = ResKey::of(info);
    let timeout = match query.get("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?,
        ),
        None => Duration::from_secs(1800),
    };
    let bookmarks = flag(query, "allowWatchBookmarks");
    let send_initial = flag(query, "sendInitialEvents");
    if query.contains_key("sendInitialEvents")
        && query.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan")
    {
        return Err(ApiError::invalid_in(
            "meta.k8s.io",
            "ListOptions",
            "",
            &[(
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                    .into(),
            )],
        ));
    }
    let as_table = table::wants_table(accept);
    let include = Include::parse(query.get("includeObject").map(String::as_str));
    let requested = query
        .get("resourceVersion")
        .filter(|s| !s.is_empty())
        .map(|s| parse_rv(s))
        .transpose()?;

    // Subscribe and read history under one lock so nothing falls between them.
    let (mut rx, initial, mut last_rv, gone) = {
        let inner = app.store.lock();
        let rx = app.store.subscribe();
        let mut initial: Vec<(&'static str, Arc<Value>)> = Vec::new();
        let mut gone = None;
        match requested {
            Some(rv) if rv > 0 && !send_initial => match inner.changes_since(rv) {
                Some(changes) => {
                    for c in changes.iter().filter(|c| c.res == res) {
                        if let Some(kind) = event_for(&filter, c) {
                            let shown = match (&c.kind, kind, &c.old) {
                                (ChangeType::Modified, "DELETED", Some(old)) => old.clone(),
                                _ => c.object.clone(),
                            };
                            initial.push((kind, shown));
                        }
                    }
                }
                None => gone = Some(rv),
            },
            _ => {
                for obj in inner.list(&res, ns) {
                    if filter.matches(&obj) {
                        initial.push(("ADDED", obj));
                    }
                }
            }
        }
        (rx, initial, inner.rv, gone)
    };

    let kind_name = info.kind.clone();
    let api_version = info.api_version();
    let info = info.clone();
    let mut stopping = app.stopping.subscribe();
    let render = move |kind: &str, obj: &Arc<Value>| -> Bytes {
        let obj = objects::present(obj, &info);
        if as_table && kind != "BOOKMARK" && kind != "ERROR" {
            let rv = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            event_line(kind, &table::table(&[obj], &info, include, &rv, None))
        } else {
            event_line(kind, &obj)
        }
    };
    let stream = async_stream::stream! {
        if let Some(rv) = gone {
            let status = ApiError::gone(format!("too old resource version: {rv}")).to_status();
            yield Ok::<Bytes, Infallible>(event_line("ERROR", &status));
            return;
        }
        for (kind, obj) in &initial {
            yield Ok(render(kind, obj));
        }
        if send_initial && bookmarks {
            let bookmark = json!({"kind": kind_name, "apiVersion": api_version,
                "metadata": {"resourceVersion": last_rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
            yield Ok(event_line("BOOKMARK", &bookmark));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut tick = tokio::time::interval(Duration::from_secs(30));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                // The server stops: end the stream as a timeout would.
                _ = crate::serve::stopped(&mut stopping) => break,
                _ = tick.tick(), if bookmarks => {
                    let bookmark = json!({"kind": kind_name, "apiVersion": api_version,
                        "metadata": {"resourceVersion": last_rv.to_string()}});
                    yield Ok(event_line("BOOKMARK", &bookmark));
                }
                received = rx.recv() => match received {
                    Ok(change) => {
                        if change.rv <= last_rv {
                            continue;
                        }
                        last_rv = change.rv;
                        if change.res != res {
                            continue;
                        }
                        if let Some(kind) = event_for(&filter, &change) {
                            // An object that leaves the selection is DELETED as it was
                            // when it last matched.
                            let shown = match (&change.kind, kind, &change.old) {
                                (ChangeType::Modified, "DELETED", Some(old)) => old,
                                _ => &change.object,
                            };
                            yield Ok(render(kind, shown));
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let status = ApiError::gone("the watch fell behind; too old resource version").to_status();
                        yield Ok(event_line("ERROR", &status));
                        break;
                    }
                    Err(RecvError::Closed) => break,
                }
            }
        }
    };
    Ok((
        StatusCode::OK,
        [("content-type", "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}

enum ScaleWrite {
    Replace(Value),
    Patch(Value, String),
}

fn get_path<'a>(obj: &'a Value, path: &str) -> &'a Value {
    path.trim_start_matches('.')
        .split('.')
        .fold(obj, |v, seg| &v[seg])
}

fn set_path(obj: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = obj;
    for seg in &segs[..segs.len().saturating_sub(1)] {
        if !cur[*seg].is_object() {
            cur[*seg] = json!({});
        }
        cur = &mut cur[*seg];
    }
    if let Some(last) = segs.last() {
        cur[*last] = value;
    }
}

fn scale_of(info: &ResourceInfo, obj: &Value) -> Value {
    let Some(scale) = &info.scale else {
        return Value::Null;
    };
    let meta = &obj["metadata"];
    let mut status =
        json!({"replicas": get_path(obj, &scale.status_replicas_path).as_i64().unwrap_or(0)});
    if let Some(sel) = &scale.label_selector_path {
        let s = get_path(obj, sel);
        if !s.is_null() {
            status["selector"] = s.clone();
        } else if let Some(selector) = selector_text(&obj["spec"]["selector"]) {
            // A built-in workload's Scale shows its spec's selector.
            status["selector"] = json!(selector);
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"]},
        "spec": {"replicas": get_path(obj, &scale.spec_replicas_path).as_i64().unwrap_or(0)},
        "status": status,
    })
}

/// A `LabelSelector` as text (`app=web,tier in (a,b)`), the form kube-apiserver gives a
/// Scale; `None` when it is not a selector object.
fn selector_text(selector: &Value) -> Option<String> {
    let selector = selector.as_object()?;
    let mut terms: Vec<(String, String)> = Vec::new();
    for (k, v) in selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        terms.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
    }
    for e in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or_default();
        let mut values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let term = match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        terms.push((key.to_string(), term));
    }
    terms.sort();
    Some(
        terms
            .into_iter()
            .map(|(_, t)| t)
            .collect::<Vec<_>>()
            .join(","),
    )
}

fn write_scale(
    app: &App,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    write: ScaleWrite,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let Some(scale) = &info.scale else {
        return Err(ApiError::no_route("scale"));
    };
    let w = writer(query, headers);
    let mut inner = app.store.lock();
    let Some(old) = inner.get(&ResKey::of(info), ns.unwrap_or_default(), name) else {
        return Err(ApiError::not_found(&info.plural, &info.group, name));
    };
    let current = scale_of(info, &old);
    let desired = match write {
        ScaleWrite::Replace(v) => v,
        ScaleWrite::Patch(p, ct) => apply_patch_doc(&current, &p, &ct, "autoscaling", "Scale")?,
    };
    let replicas = desired["spec"]["replicas"].as_i64().ok_or_else(|| {
        ApiError::invalid(
            "Scale",
            name,
            &[("spec.replicas", "Required value: an integer".into())],
        )
    })?;
    let mut new = (*old).clone();
    set_path(&mut new, &scale.spec_replicas_path, json!(replicas));
    let updated = objects::replace(&mut inner, info, &old, new, Part::Main, &w)?;
    app.store.commit(inner)?;
    Ok(ok(&scale_of(info, &updated)))
}

/// Applies a JSON, merge or strategic merge patch document.
fn apply_patch_doc(
    original: &Value,
    patch: &Value,
    content_type: &str,
    group: &str,
    kind: &str,
) -> Result<Value, ApiError> {
    match content_type {
        "application/json-patch+json" => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            let mut doc = original.clone();
            // kube-apiserver answers 422 with empty details when an operation fails.
            json_patch::patch(&mut doc, &ops).map_err(|e| {
                ApiError {
                    code: 422,
                    reason: "Invalid",
                    message: format!("the JSON patch could not be applied to {kind}: {e}"),
                    details: None,
                }
                .with_details(json!({}))
            })?;
            Ok(doc)
        }
        "application/merge-patch+json" => {
            let mut doc = original.clone();
            json_patch::merge(&mut doc, patch);
            Ok(doc)
        }
        "application/strategic-merge-patch+json" => {
            super::strategic::strategic_merge_patch(original, patch, group, kind)
                .map_err(|e| ApiError::invalid(kind, "", &[("patch", e.to_string())]))
        }
        other => Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json ({other})"
        ))
        .with_details(json!({}))),
    }
}

#[allow(clippy::too_many_arguments)]
fn patch(
    app: &App,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    sub: Option<&str>,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let ct = header(headers, "content-type")
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let part = part_of(info, sub)?;
    let doc = decode(
        if ct == "application/apply-patch+yaml" {
            "application/yaml"
        } else {
            "application/json"
        },
        body,
    )?;
    if sub == Some("scale") {
        return write_scale(
            app,
            info,
            ns,
            name,
            ScaleWrite::Patch(doc, ct),
            query,
            headers,
        );
    }
    let builtin = super::resources::builtin_resources()
        .iter()
        .any(|b| b.group == info.group && b.plural == info.plural);
    if ct == "application/strategic-merge-patch+json" && !builtin {
        return Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - strategic merge patch is not supported for custom resources; accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let mut w = writer(query, headers);
    let mut inner = app.store.lock();
    let res = ResKey::of(info);
    let old = inner.get(&res, ns.unwrap_or_default(), name);
    if ct == "application/apply-patch+yaml" {
        if query.get("fieldManager").is_none_or(|m| m.is_empty()) {
            return Err(ApiError::invalid_in(
                "meta.k8s.io",
                "PatchOptions",
                "",
                &[(
                    "fieldManager",
                    "Required value: is required for apply patch".into(),
                )],
            ));
        }
        let mut applied = doc;
        if applied["apiVersion"].as_str().is_none_or(str::is_empty)
            || applied["kind"].as_str().is_none_or(str::is_empty)
        {
            return Err(ApiError::bad_request(format!(
                "invalid object type: {}, Kind={}",
                applied["apiVersion"].as_str().unwrap_or("/"),
                applied["kind"].as_str().unwrap_or_default()
            )));
        }
        objects::check_type(info, &mut applied)?;
        let body_name = applied["metadata"]["name"].as_str().unwrap_or_default();
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let force = flag(query, "force");
        let now = objects::now_rfc3339();
        let merged = super::apply::server_side_apply(
            old.as_deref(),
            &applied,
            &w.manager,
            force,
            &info.group,
            &info.kind,
            &now,
        )
        .map_err(|e| match e {
            super::apply::ApplyError::Conflict { ref conflicts } => {
                let causes: Vec<(String, String)> = conflicts
                    .iter()
                    .map(|(manager, field)| (field.clone(), manager.clone()))
                    .collect();
                ApiError::apply_conflict(e.to_string(), &causes)
            }
            other => ApiError::invalid(&info.kind, name, &[("patch", other.to_string())]),
        })?;
        w.operation = "Apply";
        let (result, code) = match &old {
            None => {
                let mut merged = merged;
                merged["metadata"]["name"] = json!(name);
                (
                    objects::create(&mut inner, info, ns, merged, &w)?,
                    StatusCode::CREATED,
                )
            }
            Some(old) => (
                objects::replace(&mut inner, info, old, merged, part, &w)?,
                StatusCode::OK,
            ),
        };
        app.store.commit(inner)?;
        wake_gc(app, &result);
        return Ok(json_response(code, &objects::present(&result, info)));
    }
    let Some(old) = old else {
        return Err(ApiError::not_found(&info.plural, &info.group, name));
    };
    let new = apply_patch_doc(&old, &doc, &ct, &info.group, &info.kind)?;
    let updated = objects::replace(&mut inner, info, &old, new, part, &w)?;
    app.store.commit(inner)?;
    wake_gc(app, &updated);
    Ok(ok(&objects::present(&updated, info)))
}

/// Reads `propagationPolicy` and `preconditions` from the query and the DeleteOptions body.
fn delete_options(
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<(Propagation, Value), ApiError> {
    let opts: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else if body.starts_with(b"k8s\0") {
        super::protobuf::decode_body(body)
            .map_err(|e| ApiError::bad_request(format!("couldn't decode DeleteOptions: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("couldn't decode DeleteOptions: {e}")))?
    };
    if let Some(g) = query.get("gracePeriodSeconds") {
        g.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid gracePeriodSeconds {g:?}: expected a whole number of seconds"
            ))
        })?;
    }
    let policy = match (
        query.get("propagationPolicy"),
        opts["propagationPolicy"].as_str(),
    ) {
        (Some(p), _) => Propagation::parse(p)?,
        (None, Some(p)) => Propagation::parse(p)?,
        (None, None) if opts["orphanDependents"].as_bool() == Some(true) => Propagation::Orphan,
        (None, None) => Propagation::Background,
    };
    Ok((policy, opts["preconditions"].clone()))
}

/// 409 of a delete whose preconditions do not hold, worded as kube-apiserver words it
/// (the kind, not the resource, is named).
fn precondition_failed(info: &ResourceInfo, name: &str, why: &str) -> ApiError {
    let mut details = json!({"name": name, "kind": info.kind});
    if !info.group.is_empty() {
        details["group"] = json!(info.group);
    }
    ApiError {
        code: 409,
        reason: "Conflict",
        message: format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            info.kind
        ),
        details: None,
    }
    .with_details(details)
}

/// Resources whose delete answers the object gone, as kube-apiserver's (the others
/// answer a `Success` Status naming it; an object kept by finalizers is answered itself).
const RETURN_DELETED: &[(&str, &str)] = &[
    ("", "pods"),
    ("", "services"),
    ("", "serviceaccounts"),
    ("", "namespaces"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
];

fn delete(
    app: &App,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let (policy, pre) = delete_options(query, body)?;
    let dry_run = query.get("dryRun").is_some_and(|v| v == "All");
    let res = ResKey::of(info);
    let mut inner = app.store.lock();
    let Some(obj) = inner.get(&res, ns.unwrap_or_default(), name) else {
        return Err(ApiError::not_found(&info.plural, &info.group, name));
    };
    if let Some(uid) = pre["uid"].as_str() {
        let current = obj["metadata"]["uid"].as_str().unwrap_or_default();
        if uid != current {
            return Err(precondition_failed(
                info,
                name,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({current}). The object might have been deleted and then recreated"
                ),
            ));
        }
    }
    if let Some(rv) = pre["resourceVersion"].as_str() {
        let current = obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        if rv != current {
            return Err(precondition_failed(
                info,
                name,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({current}). The object might have been modified"
                ),
            ));
        }
    }
    let (last, gone) = objects::delete(&mut inner, &res, &obj, policy, dry_run)?;
    app.store.commit(inner)?;
    app.gc.notify_one();
    if gone && !RETURN_DELETED.contains(&(info.group.as_str(), info.plural.as_str())) {
        let mut details = json!({"name": name, "kind": info.plural,
            "uid": last["metadata"]["uid"]});
        if !info.group.is_empty() {
            details["group"] = json!(info.group);
        }
        return Ok(ok(&success_status(details)));
    }
    Ok(ok(&objects::present(&last, info)))
}

fn delete_collection(
    app: &App,
    info: &ResourceInfo,
    ns: Option<&str>,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let (policy, _) = delete_options(query, body)?;
    let filter = Filter::new(info, ns, query)?;
    let dry_run = query.get("dryRun").is_some_and(|v| v == "All");
    let res = ResKey::of(info);
    let mut inner = app.store.lock();
    let mut deleted = Vec::new();
    for obj in inner.list(&res, ns) {
        if filter.matches(&obj) {
            let (last, _) = objects::delete(&mut inner, &res, &obj, policy, dry_run)?;
            deleted.push(objects::present(&last, info));
        }
    }
    let rv = inner.rv.to_string();
    app.store.commit(inner)?;
    app.gc.notify_one();
    let builtin = super::resources::builtin_resources()
        .iter()
        .any(|b| b.group == info.group && b.plural == info.plural);
    let list = if builtin {
        let items: Vec<ListItem> = deleted.iter().map(|o| ListItem(o)).collect();
        json!({"kind": info.list_kind, "apiVersion": info.api_version(),
            "metadata": {"resourceVersion": rv}, "items": items})
    } else {
        let items: Vec<&Value> = deleted.iter().map(|o| &**o).collect();
        json!({"kind": info.list_kind, "apiVersion": info.api_version(),
            "metadata": {"resourceVersion": rv, "continue": ""}, "items": items})
    };
    Ok(ok(&list))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_event_names_its_type_before_its_object() {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let line = event_line("MODIFIED", &object);
        let text = std::str::from_utf8(&line).expect("utf-8");
        assert!(
            text.starts_with(r#"{"type":"MODIFIED","object":{"#),
            "{text}"
        );
        assert!(text.ends_with("}\n"), "{text}");
        let back: Value = serde_json::from_str(text).expect("json");
        assert_eq!(back["object"], object);
    }

    #[test]
    fn escaped_names_are_decoded() {
        let Some(Route::Resource(r)) =
            route("/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aprobe")
        else {
            panic!("a resource path")
        };
        assert_eq!(r.name.as_deref(), Some("system:probe"));
        assert_eq!(
            percent_decode("a%zzb"),
            "a%zzb",
            "a bad escape is kept as written"
        );
        assert_eq!(
            percent_decode("%ff"),
            "%ff",
            "bytes that are not UTF-8 are kept"
        );
    }

    #[test]
    fn routes_resource_paths() {
        let Some(Route::Resource(r)) = route("/api/v1/namespaces/default/configmaps/x") else {
            panic!()
        };
        assert_eq!(
            (
                r.group.as_str(),
                r.namespace.as_deref(),
                r.plural.as_str(),
                r.name.as_deref()
            ),
            ("", Some("default"), "configmaps", Some("x"))
        );
        let Some(Route::Resource(r)) = route("/api/v1/namespaces/foo/status") else {
            panic!()
        };
        assert_eq!(
            (
                r.namespace,
                r.plural.as_str(),
                r.name.as_deref(),
                r.sub.as_deref()
            ),
            (None, "namespaces", Some("foo"), Some("status"))
        );
        let Some(Route::Resource(r)) = route("/apis/apps/v1/namespaces/a/deployments/d/scale")
        else {
            panic!()
        };
        assert_eq!(
            (r.group.as_str(), r.sub.as_deref()),
            ("apps", Some("scale"))
        );
        let Some(Route::Resource(r)) = route("/api/v1/namespaces/foo") else {
            panic!()
        };
        assert_eq!(
            (r.plural.as_str(), r.name.as_deref()),
            ("namespaces", Some("foo"))
        );
        assert!(route("/nope").is_none());
    }

    #[test]
    fn continue_tokens_round_trip() {
        assert_eq!(unhex(&hex("ns\0name")).as_deref(), Some("ns\0name"));
        assert_eq!(unhex("zz"), None);
    }
}
