//! The webhook client of the lambda controllers, as metacontroller's `pkg/hooks`: one
//! [`WebhookClient`] per controller hook, built by [`Webhooks`] when the controller starts.
//!
//! ```text
//!   HookSpec ──► resolve_url ──► select_security (webhook's own | first endpointConfigs match)
//!                                     │
//!            Secrets / ConfigMaps ◄───┘ read once: token, basic auth, CA, client cert
//!                                     │
//!   call(body, key) ──► POST (hyper-util + rustls, timeout over the whole exchange)
//!        │                ├─ 200 ──► body (cached with its ETag when enabled)
//!        │                ├─ 304/412 after If-None-Match ──► the cached body
//!        │                ├─ 429 ──► TooManyRequests(Retry-After)
//!        │                └─ other ──► Status(code, body)
//!        └──► metacontroller_<hook>_{requests_total, request_duration_histogram_seconds,
//!                  in_flight_requests, dns_duration_histogram_seconds (trace.rs),
//!                  tls_duration_histogram_seconds (trace.rs)}
//! ```
//!
//! Credentials are read once, as upstream: a changed Secret takes effect when the
//! controller object is re-created. The ETag cache drops expired entries lazily (on lookup,
//! and in a sweep on insert at most every `cacheCleanupSeconds`), so no background task is
//! needed and an unset `cacheCleanupSeconds` is harmless.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use bosun_lambda::ports::{BoxFut, HookClient, HookError, HookFactory, HookSpec, HookType};
use bosun_lambda::types::{
    Authorization, BasicAuth, CaBundle, ClientTls, ControllerKind, EndpointConfig, KeyRef,
    Security, Webhook,
};
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, ETAG, IF_NONE_MATCH, RETRY_AFTER};
use http::{HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use bosun_kube::http_client::{CloseIsEnd, SystemRoots, https_connector, tls_config};

mod trace;

/// The connector of a hook client: TCP (with timed DNS lookups), then TLS for https.
type Connector = CloseIsEnd<
    trace::TlsDone<HttpsConnector<trace::TcpThenTls<HttpConnector<trace::TimedResolver>>>>,
>;

/// The timeout when the webhook sets none, or one ≤ 0.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a rejected response's body goes into the error.
const MAX_ERROR_BODY: usize = 4096;
const DEFAULT_CA_KEY: &str = "ca.crt";
const DEFAULT_CERT_KEY: &str = "tls.crt";
const DEFAULT_PRIVATE_KEY_KEY: &str = "tls.key";
const DEFAULT_USERNAME_KEY: &str = "username";
const DEFAULT_PASSWORD_KEY: &str = "password";

/// Builds the hook clients of the lambda controllers; credentials come from the cluster
/// through `client`.
pub struct Webhooks {
    client: kube::Client,
    /// The system roots, loaded on first use by a webhook without a caBundle.
    system_roots: SystemRoots,
}

impl Webhooks {
    /// A factory reading Secrets and ConfigMaps through `client`.
    pub fn new(client: kube::Client) -> Webhooks {
        Webhooks {
            client,
            system_roots: SystemRoots::default(),
        }
    }

    async fn build(&self, spec: HookSpec) -> Result<WebhookClient, HookError> {
        let hook = spec.hook_type;
        let config = |message: String| HookError::Config { hook, message };
        let webhook = spec
            .hook
            .webhook
            .as_ref()
            .ok_or_else(|| config("the hook has no webhook".into()))?;
        let url = resolve_url(webhook).map_err(config)?;
        let uri: Uri = url
            .parse()
            .map_err(|e| config(format!("webhook url {url:?}: {e}")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(config(format!(
                    "webhook url {url:?}: not an absolute http or https URL"
                )));
            }
        };
        if uri.host().is_none() {
            return Err(config(format!("webhook url {url:?}: no host")));
        }
        let timeout = hook_timeout(webhook.timeout.as_deref()).map_err(config)?;
        let none = Security::default();
        let (source, security) = select_security(webhook, &uri, &spec.endpoint_configs)
            .unwrap_or((SecuritySource::Webhook, &none));
        let field = source.to_string();
        let authorization = self.authorization(&field, security).await.map_err(config)?;
        let tls = self
            .tls_config(&field, security, https)
            .await
            .map_err(config)?;
        let mut tcp = HttpConnector::new_with_resolver(trace::TimedResolver::new());
        // https URLs go through the TLS connector, which hands them to this one.
        tcp.enforce_http(false);
        let connector = https_connector(tls, trace::TcpThenTls(tcp));
        let http =
            Client::builder(TokioExecutor::new()).build(CloseIsEnd(trace::TlsDone(connector)));
        let etag = webhook
            .etag
            .as_ref()
            .filter(|e| e.enabled == Some(true))
            .map(|e| {
                EtagCache::new(
                    seconds(e.cache_timeout_seconds),
                    seconds(e.cache_cleanup_seconds),
                )
            });
        tracing::info!(
            controller = %spec.controller,
            kind = %spec.controller_kind,
            hook = %hook,
            url = %url,
            timeout = ?timeout,
            security = %field,
            etag = etag.is_some(),
            "webhook client ready"
        );
        Ok(WebhookClient {
            metrics: HookMetrics::new(hook, &url, &spec.controller, spec.controller_kind),
            hook,
            url,
            uri,
            http,
            timeout,
            authorization,
            etag,
        })
    }

    /// The `Authorization` header value, if the settings ask for one.
    async fn authorization(
        &self,
        field: &str,
        security: &Security,
    ) -> Result<Option<HeaderValue>, String> {
        let value = match (&security.authorization, &security.basic_auth) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{field}: authorization and basicAuth are mutually exclusive"
                ));
            }
            (Some(auth), None) => self.bearer(field, auth).await?,
            (None, Some(basic)) => self.basic(field, basic).await?,
            (None, None) => return Ok(None),
        };
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| format!("{field}: the credentials are not a valid header value"))?;
        value.set_sensitive(true);
        Ok(Some(value))
    }

    async fn bearer(&self, field: &str, auth: &Authorization) -> Result<String, String> {
        let field = format!("{field}.authorization");
        let type_ = auth.type_.as_deref().unwrap_or("").trim();
        let type_ = if type_.is_empty() { "Bearer" } else { type_ };
        if type_.eq_ignore_ascii_case("basic") {
            return Err(format!(
                "{field}.type: {type_:?} is not supported, use basicAuth for Basic credentials"
            ));
        }
        let r = &auth.secret_ref;
        let key = r
            .key
            .as_deref()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("{field}.secretRef.key is required"))?;
        let data = self.secret(&format!("{field}.secretRef"), r).await?;
        let token = text(&data, key, &format!("{field}.secretRef"), r, "Secret")?;
        Ok(format!("{type_} {}", token.trim()))
    }

    async fn basic(&self, field: &str, basic: &BasicAuth) -> Result<String, String> {
        let field = format!("{field}.basicAuth");
        let r = &basic.secret_ref;
        let data = self.secret(&format!("{field}.secretRef"), r).await?;
        let user_key = non_empty(basic.username_key.as_deref(), DEFAULT_USERNAME_KEY);
        let pass_key = non_empty(basic.password_key.as_deref(), DEFAULT_PASSWORD_KEY);
        let user = text(
            &data,
            user_key,
            &format!("{field}.usernameKey"),
            r,
            "Secret",
        )?;
        let pass = text(
            &data,
            pass_key,
            &format!("{field}.passwordKey"),
            r,
            "Secret",
        )?;
        let (user, pass) = (user.trim(), pass.trim());
        if user.contains(':') {
            return Err(format!(
                "{field}.usernameKey: the username in Secret {}/{} key {user_key:?} contains ':'",
                r.namespace, r.name
            ));
        }
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        Ok(format!("Basic {encoded}"))
    }

    /// The rustls settings: the caBundle (or the system roots) and the client certificate.
    async fn tls_config(
        &self,
        field: &str,
        security: &Security,
        https: bool,
    ) -> Result<ClientConfig, String> {
        let roots = match &security.ca_bundle {
            Some(ca) => Arc::new(self.ca_bundle(&format!("{field}.caBundle"), ca).await?),
            // Plain HTTP needs no roots: do not read the system's for nothing.
            None if !https => Arc::new(RootCertStore::empty()),
            None => self.system_roots.get().await,
        };
        let client_cert = match &security.client_tls {
            Some(tls) => Some(
                self.client_certificate(&format!("{field}.clientTLS"), tls)
                    .await?,
            ),
            None => None,
        };
        let client_tls = client_cert.is_some();
        tls_config(roots, client_cert).map_err(|e| {
            if client_tls {
                format!("{field}.clientTLS: {e}")
            } else {
                format!("{field}: TLS settings: {e}")
            }
        })
    }

    async fn ca_bundle(&self, field: &str, ca: &CaBundle) -> Result<RootCertStore, String> {
        let (pem, source) = match (&ca.inline, &ca.secret_ref, &ca.config_map_ref) {
            (Some(inline), None, None) => (inline.as_bytes().to_vec(), "inline".to_string()),
            (None, Some(r), None) => {
                let f = format!("{field}.secretRef");
                let data = self.secret(&f, r).await?;
                let key = non_empty(r.key.as_deref(), DEFAULT_CA_KEY);
                let pem = bytes_of(&data, key, &f, r, "Secret")?.to_vec();
                (
                    pem,
                    format!("Secret {}/{} key {key:?}", r.namespace, r.name),
                )
            }
            (None, None, Some(r)) => {
                let f = format!("{field}.configMapRef");
                let data = self.config_map(&f, r).await?;
                let key = non_empty(r.key.as_deref(), DEFAULT_CA_KEY);
                let pem = bytes_of(&data, key, &f, r, "ConfigMap")?.to_vec();
                (
                    pem,
                    format!("ConfigMap {}/{} key {key:?}", r.namespace, r.name),
                )
            }
            _ => {
                return Err(format!(
                    "{field}: set exactly one of inline, secretRef and configMapRef"
                ));
            }
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| format!("{field} ({source}): not PEM: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("{field} ({source}): {e}"))?;
        }
        if roots.is_empty() {
            return Err(format!("{field} ({source}): no PEM certificate"));
        }
        Ok(roots)
    }

    async fn client_certificate(
        &self,
        field: &str,
        tls: &ClientTls,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
        let r = &tls.secret_ref;
        let data = self.secret(&format!("{field}.secretRef"), r).await?;
        let cert_key = non_empty(tls.cert_key.as_deref(), DEFAULT_CERT_KEY);
        let key_key = non_empty(tls.private_key_key.as_deref(), DEFAULT_PRIVATE_KEY_KEY);
        let where_ = |key: &str| format!("Secret {}/{} key {key:?}", r.namespace, r.name);
        let cert_pem = bytes_of(&data, cert_key, &format!("{field}.certKey"), r, "Secret")?;
        let certs = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{field}.certKey ({}): not PEM: {e}", where_(cert_key)))?;
        if certs.is_empty() {
            return Err(format!(
                "{field}.certKey ({}): no PEM certificate",
                where_(cert_key)
            ));
        }
        let key_pem = bytes_of(
            &data,
            key_key,
            &format!("{field}.privateKeyKey"),
            r,
            "Secret",
        )?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
            format!(
                "{field}.privateKeyKey ({}): no PEM private key: {e}",
                where_(key_key)
            )
        })?;
        Ok((certs, key))
    }

    async fn secret(&self, field: &str, r: &KeyRef) -> Result<BTreeMap<String, Vec<u8>>, String> {
        check_ref(field, r)?;
        let api: kube::Api<Secret> = kube::Api::namespaced(self.client.clone(), &r.namespace);
        let secret = api
            .get(&r.name)
            .await
            .map_err(|e| read_error(field, "Secret", r, &e))?;
        Ok(secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect())
    }

    async fn config_map(
        &self,
        field: &str,
        r: &KeyRef,
    ) -> Result<BTreeMap<String, Vec<u8>>, String> {
        check_ref(field, r)?;
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(self.client.clone(), &r.namespace);
        let cm = api
            .get(&r.name)
            .await
            .map_err(|e| read_error(field, "ConfigMap", r, &e))?;
        let mut data: BTreeMap<String, Vec<u8>> = cm
            .binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        data.extend(
            cm.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes())),
        );
        Ok(data)
    }
}

impl HookFactory for Webhooks {
    fn client(&self, spec: HookSpec) -> BoxFut<'_, Result<Arc<dyn HookClient>, HookError>> {
        Box::pin(async move {
            let client = self.build(spec).await?;
            Ok(Arc::new(client) as Arc<dyn HookClient>)
        })
    }
}

fn check_ref(field: &str, r: &KeyRef) -> Result<(), String> {
    if r.name.is_empty() {
        return Err(format!("{field}.name is required"));
    }
    if r.namespace.is_empty() {
        return Err(format!("{field}.namespace is required"));
    }
    Ok(())
}

fn read_error(field: &str, kind: &str, r: &KeyRef, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.is_not_found() => {
            format!("{field}: {kind} {}/{} not found", r.namespace, r.name)
        }
        e => format!(
            "{field}: cannot read {kind} {}/{}: {}",
            r.namespace,
            r.name,
            chain(e)
        ),
    }
}

fn non_empty<'a>(value: Option<&'a str>, default: &'a str) -> &'a str {
    value.filter(|v| !v.is_empty()).unwrap_or(default)
}

fn bytes_of<'a>(
    data: &'a BTreeMap<String, Vec<u8>>,
    key: &str,
    field: &str,
    r: &KeyRef,
    kind: &str,
) -> Result<&'a [u8], String> {
    data.get(key).map(Vec::as_slice).ok_or_else(|| {
        format!(
            "{field}: {kind} {}/{} has no key {key:?}",
            r.namespace, r.name
        )
    })
}

fn text<'a>(
    data: &'a BTreeMap<String, Vec<u8>>,
    key: &str,
    field: &str,
    r: &KeyRef,
    kind: &str,
) -> Result<&'a str, String> {
    std::str::from_utf8(bytes_of(data, key, field, r, kind)?).map_err(|_| {
        format!(
            "{field}: {kind} {}/{} key {key:?} is not UTF-8",
            r.namespace, r.name
        )
    })
}

/// A positive number of seconds, or none.
fn seconds(value: Option<i64>) -> Option<Duration> {
    value
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s.unsigned_abs()))
}

/// The webhook's URL: `url`, else `<protocol|http>://<name>.<namespace>:<port|80><path>`.
pub fn resolve_url(webhook: &Webhook) -> Result<String, String> {
    if let Some(url) = webhook.url.as_deref().filter(|u| !u.is_empty()) {
        return Ok(url.to_string());
    }
    let (Some(service), Some(path)) = (&webhook.service, &webhook.path) else {
        return Err("must specify either a full 'url', or both 'service' and 'path'".into());
    };
    if service.name.is_empty() {
        return Err("webhook service.name is required".into());
    }
    if service.namespace.is_empty() {
        return Err("webhook service.namespace is required".into());
    }
    let protocol = non_empty(service.protocol.as_deref(), "http");
    let port = service.port.unwrap_or(80);
    Ok(format!(
        "{protocol}://{}.{}:{port}{path}",
        service.name, service.namespace
    ))
}

/// The security settings of a webhook at `uri`: its own when it sets any, else the first
/// `endpointConfigs` entry whose host matches. Hosts compare case-insensitively, a missing
/// port being the scheme's default; a service-form webhook is matched on
/// `name.namespace[:port]`.
pub fn select_security<'a>(
    webhook: &'a Webhook,
    uri: &Uri,
    endpoint_configs: &'a [EndpointConfig],
) -> Option<(SecuritySource, &'a Security)> {
    if !webhook.security.is_empty() {
        return Some((SecuritySource::Webhook, &webhook.security));
    }
    let https = uri.scheme_str() == Some("https");
    let has_url = webhook.url.as_deref().is_some_and(|u| !u.is_empty());
    let target = match &webhook.service {
        Some(service) if !has_url => {
            let host = format!("{}.{}", service.name, service.namespace);
            match service.port {
                Some(port) => (host.to_ascii_lowercase(), u16::try_from(port).ok()?),
                None => host_port(&host, https)?,
            }
        }
        _ => host_port(uri.authority()?.as_str(), https)?,
    };
    endpoint_configs
        .iter()
        .enumerate()
        .find(|(_, e)| host_port(&e.host, https).as_ref() == Some(&target))
        .map(|(i, e)| (SecuritySource::EndpointConfig(i), &e.security))
}

/// Where a webhook's security settings come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecuritySource {
    /// The webhook's own fields.
    Webhook,
    /// `endpointConfigs[i]`.
    EndpointConfig(usize),
}

impl std::fmt::Display for SecuritySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecuritySource::Webhook => f.write_str("webhook"),
            SecuritySource::EndpointConfig(i) => write!(f, "endpointConfigs[{i}]"),
        }
    }
}

/// `host[:port]` (or a URL) as lowercase host and port, the port defaulting to 443 or 80.
fn host_port(text: &str, https: bool) -> Option<(String, u16)> {
    let text = text.trim();
    let authority: http::uri::Authority = match text.split_once("://") {
        Some(_) => text.parse::<Uri>().ok()?.authority()?.clone(),
        None => text.parse().ok()?,
    };
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    Some((authority.host().to_ascii_lowercase(), port))
}

/// The webhook's `timeout` (a Go duration): 10 s when unset or ≤ 0.
pub fn hook_timeout(text: Option<&str>) -> Result<Duration, String> {
    let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let d = bosun_runtime::clock::parse_go_duration(magnitude)
        .map_err(|e| format!("webhook timeout: {e}"))?;
    if negative || d.is_zero() {
        tracing::info!(
            timeout = text,
            "webhook timeout is not positive, using the default 10s"
        );
        return Ok(DEFAULT_TIMEOUT);
    }
    Ok(d)
}

/// The delay a 429's `Retry-After` asks for: integer seconds or an HTTP date (rounded up
/// from `now`); missing or unparseable → zero.
pub fn retry_after(value: Option<&str>, now: SystemTime) -> Duration {
    let Some(value) = value.map(str::trim) else {
        return Duration::ZERO;
    };
    if let Ok(secs) = value.parse::<u64>() {
        return Duration::from_secs(secs);
    }
    match httpdate::parse_http_date(value) {
        Ok(at) => match at.duration_since(now) {
            Ok(d) => Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0)),
            Err(_) => Duration::ZERO,
        },
        Err(_) => Duration::ZERO,
    }
}

/// An error and its sources, `: `-separated (hyper's own text is only the outer layer).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// At most [`MAX_ERROR_BODY`] bytes of a body, as text.
fn truncated(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if text.len() <= MAX_ERROR_BODY {
        return text.into_owned();
    }
    let mut end = MAX_ERROR_BODY;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], body.len())
}

/// One cached answer.
#[derive(Clone, Debug)]
struct EtagEntry {
    etag: HeaderValue,
    body: Bytes,
    stored: Instant,
}

/// The ETag cache of one hook, keyed by the root object (kind/namespace/name).
#[derive(Debug)]
struct EtagCache {
    /// `cacheTimeoutSeconds`; none: entries never expire.
    ttl: Option<Duration>,
    /// `cacheCleanupSeconds`; none: the sweep runs at most every `ttl`.
    cleanup: Option<Duration>,
    state: Mutex<EtagState>,
}

#[derive(Debug)]
struct EtagState {
    entries: HashMap<String, EtagEntry>,
    last_sweep: Instant,
}

impl EtagCache {
    fn new(ttl: Option<Duration>, cleanup: Option<Duration>) -> EtagCache {
        EtagCache {
            ttl,
            cleanup,
            state: Mutex::new(EtagState {
                entries: HashMap::new(),
                last_sweep: Instant::now(),
            }),
        }
    }

    fn expired(&self, entry: &EtagEntry, now: Instant) -> bool {
        self.ttl
            .is_some_and(|ttl| now.saturating_duration_since(entry.stored) >= ttl)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EtagState> {
        // A panic while holding the lock leaves a map that is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, key: &str, now: Instant) -> Option<EtagEntry> {
        let mut state = self.lock();
        let entry = state.entries.get(key)?;
        if self.expired(entry, now) {
            state.entries.remove(key);
            return None;
        }
        Some(entry.clone())
    }

    fn put(&self, key: String, etag: HeaderValue, body: Bytes, now: Instant) {
        let mut state = self.lock();
        state.entries.insert(
            key,
            EtagEntry {
                etag,
                body,
                stored: now,
            },
        );
        if let Some(every) = self.cleanup.or(self.ttl)
            && now.saturating_duration_since(state.last_sweep) >= every
        {
            state.last_sweep = now;
            state.entries.retain(|_, e| !self.expired(e, now));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

/// The metric names of a hook type.
fn metric_names(hook: HookType) -> [String; 5] {
    [
        format!("metacontroller_{hook}_requests_total"),
        format!("metacontroller_{hook}_request_duration_histogram_seconds"),
        format!("metacontroller_{hook}_in_flight_requests"),
        format!("metacontroller_{hook}_dns_duration_histogram_seconds"),
        format!("metacontroller_{hook}_tls_duration_histogram_seconds"),
    ]
}

/// `# HELP` lines of the webhook metrics (called where the binary describes the others).
pub fn describe_metrics() {
    for hook in [HookType::Sync, HookType::Finalize, HookType::Customize] {
        let [requests, duration, in_flight, dns, tls] = metric_names(hook);
        metrics::describe_counter!(
            requests,
            "Requests to the webhook by status code and method."
        );
        metrics::describe_histogram!(
            duration,
            metrics::Unit::Seconds,
            "Time to the webhook's response headers."
        );
        metrics::describe_gauge!(in_flight, "Requests to the webhook waiting for an answer.");
        metrics::describe_histogram!(
            dns,
            metrics::Unit::Seconds,
            "When a new connection's DNS lookup started and ended (event dns_start, dns_done), since the request started."
        );
        metrics::describe_histogram!(
            tls,
            metrics::Unit::Seconds,
            "When a new connection's TLS handshake started and ended (event tls_handshake_start, tls_handshake_done), since the request started."
        );
    }
}

/// The metrics of one hook client, labelled as metacontroller's.
struct HookMetrics {
    requests: String,
    labels: Vec<metrics::Label>,
    /// The duration of a POST, registered once (a handle records without the registry's
    /// lookup of its name and labels).
    duration: metrics::Histogram,
    /// The request counter of each status code answered so far, registered at the first.
    by_code: std::sync::Mutex<Vec<(u16, metrics::Counter)>>,
    in_flight: metrics::Gauge,
    trace: Arc<trace::TraceMetrics>,
}

impl HookMetrics {
    fn new(hook: HookType, url: &str, controller: &str, kind: ControllerKind) -> HookMetrics {
        let [requests, duration, in_flight, dns, tls] = metric_names(hook);
        let labels = vec![
            metrics::Label::new("url", url.to_string()),
            metrics::Label::new("controller_name", controller.to_string()),
            metrics::Label::new("controller_type", kind.as_str()),
        ];
        let in_flight = metrics::gauge!(in_flight, labels.clone());
        let event = |name: &str, event: &'static str| {
            let mut labels = labels.clone();
            labels.push(metrics::Label::new("event", event));
            metrics::histogram!(name.to_string(), labels)
        };
        let trace = Arc::new(trace::TraceMetrics {
            dns_start: event(&dns, "dns_start"),
            dns_done: event(&dns, "dns_done"),
            tls_start: event(&tls, "tls_handshake_start"),
            tls_done: event(&tls, "tls_handshake_done"),
        });
        let mut post = labels.clone();
        post.push(metrics::Label::new("method", "post"));
        HookMetrics {
            requests,
            duration: metrics::histogram!(duration, post.clone()),
            labels: post,
            by_code: std::sync::Mutex::new(Vec::new()),
            in_flight,
            trace,
        }
    }

    fn answered(&self, code: u16, elapsed: Duration) {
        self.duration.record(elapsed.as_secs_f64());
        let mut by_code = self
            .by_code
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, counter)) = by_code.iter().find(|(c, _)| *c == code) {
            counter.increment(1);
            return;
        }
        let mut labels = self.labels.clone();
        labels.push(metrics::Label::new("code", code.to_string()));
        let counter = metrics::counter!(self.requests.clone(), labels);
        counter.increment(1);
        by_code.push((code, counter));
    }
}

/// Decrements the in-flight gauge when the request ends, however it ends.
struct InFlight<'a>(&'a metrics::Gauge);

impl<'a> InFlight<'a> {
    fn start(gauge: &'a metrics::Gauge) -> InFlight<'a> {
        gauge.increment(1.0);
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// One controller hook, ready to call.
pub struct WebhookClient {
    hook: HookType,
    url: String,
    uri: Uri,
    http: Client<Connector, Full<Bytes>>,
    timeout: Duration,
    authorization: Option<HeaderValue>,
    etag: Option<EtagCache>,
    metrics: HookMetrics,
}

impl WebhookClient {
    fn transport(&self, message: String) -> HookError {
        HookError::Transport {
            hook: self.hook,
            url: self.url.clone(),
            message,
        }
    }

    async fn post(&self, body: Bytes, cache_key: String) -> Result<Bytes, HookError> {
        let cached = self
            .etag
            .as_ref()
            .and_then(|c| c.get(&cache_key, Instant::now()));
        let mut request = Request::post(self.uri.clone()).header(CONTENT_TYPE, "application/json");
        if let Some(auth) = &self.authorization {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        if let Some(entry) = &cached {
            request = request.header(IF_NONE_MATCH, entry.etag.clone());
        }
        // metacontroller's troubleshooting: at --zap-log-level 5 and above the hooks'
        // requests and answers are logged whole (the fields are made only at that level).
        tracing::trace!(hook = %self.hook, url = %self.url, request = %String::from_utf8_lossy(&body), "webhook request");
        let request = request
            .body(Full::new(body))
            .map_err(|e| self.transport(format!("cannot build the request: {e}")))?;

        let _in_flight = InFlight::start(&self.metrics.in_flight);
        let started = Instant::now();
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| self.transport(chain(&e)))?;
            self.metrics
                .answered(response.status().as_u16(), started.elapsed());
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| self.transport(format!("reading the response: {}", chain(&e))))?
                .to_bytes();
            Ok::<_, HookError>((parts, body))
        };
        let trace = trace::Trace {
            started,
            metrics: self.metrics.trace.clone(),
        };
        let (parts, answer) = tokio::time::timeout(self.timeout, trace::traced(trace, exchange))
            .await
            .map_err(|_| {
                self.transport(format!(
                    "timeout: no complete answer within {:?} (Client.Timeout exceeded)",
                    self.timeout
                ))
            })??;
        let code = parts.status.as_u16();
        tracing::debug!(hook = %self.hook, url = %self.url, code, elapsed = ?started.elapsed(), "webhook answered");
        tracing::trace!(hook = %self.hook, url = %self.url, code, response = %String::from_utf8_lossy(&answer), "webhook response");
        match (code, cached) {
            (200, _) => {
                if let Some(cache) = &self.etag
                    && let Some(etag) = parts.headers.get(ETAG)
                {
                    cache.put(cache_key, etag.clone(), answer.clone(), Instant::now());
                }
                Ok(answer)
            }
            // Only after If-None-Match: the cached answer is still current.
            (304 | 412, Some(entry)) => {
                tracing::debug!(hook = %self.hook, url = %self.url, key = %cache_key, code, "webhook answer unchanged, reusing the cached one");
                Ok(entry.body.clone())
            }
            (429, _) => {
                let header = parts.headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok());
                let retry_after = retry_after(header, SystemTime::now());
                tracing::info!(hook = %self.hook, url = %self.url, ?retry_after, "webhook asks to retry later (429)");
                Err(HookError::TooManyRequests {
                    hook: self.hook,
                    url: self.url.clone(),
                    retry_after,
                })
            }
            _ => Err(HookError::Status {
                hook: self.hook,
                url: self.url.clone(),
                code,
                body: truncated(&answer),
            }),
        }
    }
}

impl HookClient for WebhookClient {
    fn url(&self) -> &str {
        &self.url
    }

    fn call(&self, body: Bytes, cache_key: String) -> BoxFut<'_, Result<Bytes, HookError>> {
        Box::pin(self.post(body, cache_key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bosun_lambda::types::ServiceRef;

    fn service(name: &str, ns: &str, port: Option<i32>, protocol: Option<&str>) -> Webhook {
        Webhook {
            service: Some(ServiceRef {
                name: name.into(),
                namespace: ns.into(),
                port,
                protocol: protocol.map(Into::into),
            }),
            path: Some("/sync".into()),
            ..Webhook::default()
        }
    }

    #[test]
    fn urls_come_from_url_or_service_and_path() {
        let w = Webhook {
            url: Some("http://x/y".into()),
            ..Webhook::default()
        };
        assert_eq!(resolve_url(&w).as_deref(), Ok("http://x/y"));
        assert_eq!(
            resolve_url(&service("hooks", "ops", None, None)).as_deref(),
            Ok("http://hooks.ops:80/sync")
        );
        assert_eq!(
            resolve_url(&service("hooks", "ops", Some(8443), Some("https"))).as_deref(),
            Ok("https://hooks.ops:8443/sync")
        );
        let mut no_path = service("hooks", "ops", None, None);
        no_path.path = None;
        assert_eq!(
            resolve_url(&no_path),
            Err("must specify either a full 'url', or both 'service' and 'path'".into())
        );
        assert!(resolve_url(&service("", "ops", None, None)).is_err());
        assert!(resolve_url(&service("hooks", "", None, None)).is_err());
    }

    #[test]
    fn timeouts_are_go_durations_with_a_default() {
        assert_eq!(hook_timeout(None), Ok(DEFAULT_TIMEOUT));
        assert_eq!(hook_timeout(Some("")), Ok(DEFAULT_TIMEOUT));
        assert_eq!(hook_timeout(Some("500ms")), Ok(Duration::from_millis(500)));
        assert_eq!(hook_timeout(Some("1m30s")), Ok(Duration::from_secs(90)));
        assert_eq!(hook_timeout(Some("0s")), Ok(DEFAULT_TIMEOUT));
        assert_eq!(hook_timeout(Some("-5s")), Ok(DEFAULT_TIMEOUT));
        assert!(hook_timeout(Some("ten seconds")).is_err());
    }

    #[test]
    fn retry_after_takes_seconds_or_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(Some("3"), now), Duration::from_secs(3));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(retry_after(Some(&later), now), Duration::from_secs(7));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(retry_after(Some(&past), now), Duration::ZERO);
        // Rounded up: half a second before the date is one second.
        let now_half = now + Duration::from_millis(6_500);
        assert_eq!(retry_after(Some(&later), now_half), Duration::from_secs(1));
        assert_eq!(retry_after(Some("soon"), now), Duration::ZERO);
        assert_eq!(retry_after(None, now), Duration::ZERO);
    }

    fn endpoint(host: &str, token_secret: &str) -> EndpointConfig {
        EndpointConfig {
            host: host.into(),
            security: Security {
                authorization: Some(Authorization {
                    type_: None,
                    secret_ref: KeyRef {
                        name: token_secret.into(),
                        namespace: "ns".into(),
                        key: Some("token".into()),
                    },
                }),
                ..Security::default()
            },
        }
    }

    fn matched(w: &Webhook, configs: &[EndpointConfig]) -> Option<usize> {
        let uri: Uri = resolve_url(w).ok()?.parse().ok()?;
        match select_security(w, &uri, configs)? {
            (SecuritySource::EndpointConfig(i), _) => Some(i),
            (SecuritySource::Webhook, _) => Some(usize::MAX),
        }
    }

    #[test]
    fn endpoint_configs_match_by_host_and_default_port() {
        let configs = [
            endpoint("other.example", "a"),
            endpoint("HOOKS.example.com", "b"),
            endpoint("hooks.example.com:443", "c"),
            endpoint("hooks.ops:8080", "d"),
            endpoint("hooks.ops", "e"),
        ];
        let url = |u: &str| Webhook {
            url: Some(u.into()),
            ..Webhook::default()
        };
        assert_eq!(
            matched(&url("http://hooks.example.com/x"), &configs),
            Some(1)
        );
        assert_eq!(
            matched(&url("http://hooks.example.com:80/x"), &configs),
            Some(1)
        );
        assert_eq!(
            matched(&url("https://hooks.example.com/x"), &configs),
            Some(1),
            "first match wins; no port on either side is 443 for https"
        );
        assert_eq!(
            matched(&url("https://hooks.example.com:8443/x"), &configs),
            None
        );
        assert_eq!(
            matched(&service("hooks", "ops", Some(8080), None), &configs),
            Some(3)
        );
        assert_eq!(
            matched(&service("hooks", "ops", None, None), &configs),
            Some(4)
        );
        let mut own = url("http://hooks.example.com/x");
        own.security.basic_auth = Some(BasicAuth::default());
        assert_eq!(matched(&own, &configs), Some(usize::MAX));
    }

    #[test]
    fn etag_entries_expire_lazily() {
        let t0 = Instant::now();
        let cache = EtagCache::new(Some(Duration::from_secs(10)), None);
        let etag = HeaderValue::from_static("\"v1\"");
        cache.put("a".into(), etag.clone(), Bytes::from_static(b"A"), t0);
        assert!(cache.get("a", t0 + Duration::from_secs(9)).is_some());
        assert!(cache.get("a", t0 + Duration::from_secs(10)).is_none());
        assert_eq!(cache.len(), 0, "the expired entry was dropped on lookup");

        cache.put("b".into(), etag.clone(), Bytes::from_static(b"B"), t0);
        cache.put(
            "c".into(),
            etag.clone(),
            Bytes::from_static(b"C"),
            t0 + Duration::from_secs(20),
        );
        assert_eq!(cache.len(), 1, "the sweep on insert dropped b");

        let forever = EtagCache::new(None, None);
        forever.put("a".into(), etag, Bytes::from_static(b"A"), t0);
        assert!(
            forever
                .get("a", t0 + Duration::from_secs(1_000_000))
                .is_some()
        );
    }

    #[test]
    fn long_bodies_are_cut() {
        let body = "é".repeat(5000);
        let cut = truncated(body.as_bytes());
        assert!(cut.len() < 4200, "{}", cut.len());
        assert!(cut.ends_with("(10000 bytes)"));
        assert_eq!(truncated(b"short"), "short");
    }
}
