//! The helm type's port (`bosun_deployer::helm::HelmPort`) on the Helm engine the modules
//! use (library or binary): charts fetched over HTTP(S) or decoded from the item and
//! read (`Chart.yaml`, `values.yaml`) from their gzipped tar, kept by digest under the
//! deployer's directory; releases in the target cluster through a kubeconfig file per
//! target (mode 0600, rewritten when the target changes); pending revisions removed
//! through the target's client.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bosun_deployer::helm::{
    CACHED_CHART_TTL, Chart, ChartAccess, ChartSource, HelmPort, HelmRun, ReleaseState,
    RepoCredential,
};
use bosun_deployer::item::ErrorCode;
use bosun_deployer::oci::{Login, OciRef};
use bosun_deployer::ocm::{self, ResourceKey};
use bosun_deployer::ports::BoxFut;
use bosun_deployer::status::DeployError;
use bosun_deployer::target::{ResolvedTarget, kubeconfig_of};
use http_body_util::BodyExt as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;

use super::targets::TargetClients;
use crate::helm::{ClusterOptions, EngineSettings, HelmEngine, HelmError, InstallOptions};

/// How long a downloaded chart or repository index is used before it is fetched again
/// (a chart of an item with `cache-helm-charts: "true"`: [`CACHED_CHART_TTL`]).
const FETCH_TTL: Duration = Duration::from_secs(60);
/// The most bytes of downloads kept in memory (landscaper's chart cache holds 100 MB);
/// the oldest go first.
const MAX_CACHED_BYTES: usize = 100 * 1024 * 1024;
/// The largest chart archive or index accepted.
const MAX_DOWNLOAD: usize = 20 * 1024 * 1024;
/// Redirects followed by a download.
const MAX_REDIRECTS: usize = 5;
/// Charts kept read in memory.
const MAX_CHARTS: usize = 64;

type HttpClient = hyper_util::client::legacy::Client<
    crate::http_client::CloseIsEnd<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    >,
    http_body_util::Full<bytes::Bytes>,
>;

/// Download clients with a credential's own CA kept at once.
const MAX_CA_CLIENTS: usize = 16;

/// A download client trusting `roots`.
fn client_with(roots: rustls::RootCertStore) -> Result<HttpClient, DeployError> {
    let tls = crate::http_client::tls_config(Arc::new(roots), None)
        .map_err(|e| fetch_error(format!("TLS settings for chart downloads: {e}")))?;
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.set_connect_timeout(Some(Duration::from_secs(10)));
    tcp.enforce_http(false);
    let connector = crate::http_client::CloseIsEnd(crate::http_client::https_connector(tls, tcp));
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector),
    )
}

/// Downloaded bytes and when they were fetched.
type Download = (Instant, Arc<Vec<u8>>);

/// A release client and the digest of the target content its kubeconfig came from.
type BuiltClient = ([u8; 16], crate::helm::ReleaseClient);

/// Charts and releases for the helm type.
pub struct HelmCharts {
    settings: EngineSettings,
    engine: tokio::sync::OnceCell<Result<HelmEngine, String>>,
    dir: PathBuf,
    targets: Arc<TargetClients>,
    /// The system's CA certificates, loaded on the first download.
    system_roots: crate::http_client::SystemRoots,
    /// The download client trusting the system's CAs.
    http: tokio::sync::OnceCell<HttpClient>,
    /// Download clients that also trust a credential's `customCAData`, by its PEM.
    ca_clients: Mutex<HashMap<String, HttpClient>>,
    /// Read charts by archive digest.
    charts: Mutex<HashMap<String, Arc<Chart>>>,
    /// Downloads by URL and the credentials they were made with: the bytes and when they
    /// were fetched.
    downloads: Mutex<HashMap<String, Download>>,
    /// Release clients by (target namespace, target name, release namespace).
    clients: Mutex<HashMap<(String, String, String), BuiltClient>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn chart_error(message: String) -> DeployError {
    DeployError::config("Reconcile", "InvalidChart", message)
}

fn fetch_error(message: String) -> DeployError {
    DeployError::new("Reconcile", "FetchChart", message, &[])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest(bytes: &[u8]) -> [u8; 16] {
    use md5::Digest as _;
    md5::Md5::digest(bytes).into()
}

/// Reads `Chart.yaml` and `values.yaml` at the top of a chart archive (`<chart>/…`).
pub fn read_chart(archive: Arc<Vec<u8>>, what: &str) -> Result<Chart, DeployError> {
    let gz = flate2::read::GzDecoder::new(archive.as_slice());
    let mut tar = tar::Archive::new(gz);
    let entries = tar
        .entries()
        .map_err(|e| chart_error(format!("{what}: not a gzipped tar: {e}")))?;
    let (mut metadata, mut values) = (None, None);
    for entry in entries {
        let entry = entry.map_err(|e| chart_error(format!("{what}: not a gzipped tar: {e}")))?;
        let path = entry
            .path()
            .map(|p| p.to_path_buf())
            .map_err(|e| chart_error(format!("{what}: {e}")))?;
        let parts: Vec<_> = path.components().collect();
        let file = match parts.as_slice() {
            [_, f] => f.as_os_str().to_string_lossy().into_owned(),
            _ => continue,
        };
        if file != "Chart.yaml" && file != "values.yaml" {
            continue;
        }
        let mut text = String::new();
        entry
            .take(MAX_DOWNLOAD as u64)
            .read_to_string(&mut text)
            .map_err(|e| chart_error(format!("{what}: {}: {e}", path.display())))?;
        let v: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_saphyr::from_str(&text)
                .map_err(|e| chart_error(format!("{what}: {}: {e}", path.display())))?
        };
        if file == "Chart.yaml" {
            metadata = Some(v);
        } else {
            values = Some(v);
        }
    }
    let Some(metadata) = metadata else {
        return Err(chart_error(format!(
            "{what}: the archive holds no <chart>/Chart.yaml"
        )));
    };
    Ok(Chart {
        digest: hex(&digest(&archive)),
        archive,
        metadata,
        default_values: match values {
            Some(v @ Value::Object(_)) => v,
            _ => Value::Object(Default::default()),
        },
    })
}

/// Checks that `bytes` are the blob `digest` (`sha256:…`) names.
fn check_digest(bytes: &[u8], digest: &str, field: &str) -> Result<(), DeployError> {
    let got = format!(
        "sha256:{}",
        hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
    );
    if got != digest {
        return Err(fetch_error(format!(
            "{field}: its content is {got}, not {digest}"
        )));
    }
    Ok(())
}

/// The file `name` of a tar (gzipped when `gz`), at its top or under `./`.
fn tar_file(bytes: &[u8], gz: bool, name: &str) -> Result<Vec<u8>, String> {
    let reader: Box<dyn Read + '_> = if gz {
        Box::new(flate2::read::GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    };
    let mut tar = tar::Archive::new(reader);
    let entries = tar.entries().map_err(|e| format!("not a tar: {e}"))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("not a tar: {e}"))?;
        let path = entry
            .path()
            .map(|p| p.to_string_lossy().trim_start_matches("./").to_string())
            .map_err(|e| e.to_string())?;
        if path == name {
            let mut out = Vec::new();
            entry
                .take(MAX_DOWNLOAD as u64)
                .read_to_end(&mut out)
                .map_err(|e| format!("{name}: {e}"))?;
            return Ok(out);
        }
    }
    Err(format!("no {name} in it"))
}

/// The archive URL of `name` at `version` (empty: the newest) in a repository index.
pub fn chart_url(index: &Value, repo: &str, name: &str, version: &str) -> Result<String, String> {
    let entries = index["entries"][name]
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("{repo}: the index has no chart {name:?}"))?;
    let stable = |e: &&Value| !e["version"].as_str().unwrap_or_default().contains('-');
    let entry = if version.is_empty() {
        // The newest stable version, as `helm install` without `--devel`.
        let any_stable = entries.iter().any(|e| stable(&e));
        entries
            .iter()
            .filter(|e| !any_stable || stable(e))
            .max_by(|a, b| {
                compare_versions(
                    a["version"].as_str().unwrap_or_default(),
                    b["version"].as_str().unwrap_or_default(),
                )
            })
    } else {
        entries.iter().find(|e| {
            e["version"].as_str().map(|v| v.trim_start_matches('v'))
                == Some(version.trim_start_matches('v'))
        })
    }
    .ok_or_else(|| format!("{repo}: chart {name:?} has no version {version:?}"))?;
    let url = entry["urls"][0]
        .as_str()
        .ok_or_else(|| format!("{repo}: chart {name:?} {version}: no urls in the index"))?;
    Ok(if url.contains("://") {
        url.to_string()
    } else {
        format!(
            "{}/{}",
            repo.trim_end_matches('/'),
            url.trim_start_matches('/')
        )
    })
}

/// Orders `1.2.10` after `1.2.9` (numeric parts), a pre-release before its release.
fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let key = |v: &str| {
        let v = v.trim_start_matches('v');
        let (core, pre) = v.split_once('-').unwrap_or((v, ""));
        let nums: Vec<u64> = core.split('.').map(|p| p.parse().unwrap_or(0)).collect();
        (nums, pre.is_empty(), pre.to_string())
    };
    key(a).cmp(&key(b))
}

fn helm_error(target: &ResolvedTarget, what: &str, e: &HelmError) -> DeployError {
    let codes: &[ErrorCode] = match e {
        HelmError::InvalidInput(_) => &[ErrorCode::ConfigurationProblem],
        _ => &[],
    };
    DeployError::new(
        "Reconcile",
        "Helm",
        format!("{}: {what}: {e}", target.target.describe()),
        codes,
    )
}

fn state(r: &crate::helm::Release, namespace: &str) -> ReleaseState {
    ReleaseState {
        namespace: r.0["namespace"].as_str().unwrap_or(namespace).to_string(),
        revision: r.revision(),
        status: r.status(),
        manifest: r.manifest().to_string(),
    }
}

impl HelmCharts {
    /// Charts under `dir`; the engine is chosen at the first helm item.
    pub fn new(settings: EngineSettings, dir: PathBuf, targets: Arc<TargetClients>) -> HelmCharts {
        HelmCharts {
            settings,
            engine: tokio::sync::OnceCell::new(),
            dir,
            targets,
            system_roots: Default::default(),
            http: tokio::sync::OnceCell::new(),
            ca_clients: Mutex::default(),
            charts: Mutex::default(),
            downloads: Mutex::default(),
            clients: Mutex::default(),
        }
    }

    async fn engine(&self) -> Result<&HelmEngine, DeployError> {
        let chosen = self
            .engine
            .get_or_init(|| async {
                let r = HelmEngine::select(&self.settings)
                    .await
                    .map_err(|e| e.to_string());
                match &r {
                    Ok(e) => tracing::info!(engine = e.kind(), version = %e.version(), "the deployer's Helm engine"),
                    Err(e) => tracing::error!(error = %e, "helm DeployItems cannot run: no Helm engine"),
                }
                r
            })
            .await;
        chosen.as_ref().map_err(|e| {
            DeployError::new(
                "Reconcile",
                "HelmEngine",
                format!("Helm is not available to this bosun: {e}"),
                &[],
            )
        })
    }

    async fn system_roots(&self) -> Arc<rustls::RootCertStore> {
        self.system_roots.get().await
    }

    /// The download client for `url`: one that also trusts the `customCAData` of the
    /// credential for `url`, else the one trusting the system's CAs.
    async fn http(
        &self,
        credentials: &[RepoCredential],
        url: &str,
    ) -> Result<HttpClient, DeployError> {
        let Some((credential, pem)) = RepoCredential::for_url(credentials, url)
            .and_then(|c| c.custom_ca.as_ref().map(|pem| (c, pem)))
        else {
            let roots = self.system_roots().await;
            return self
                .http
                .get_or_try_init(|| async { client_with((*roots).clone()) })
                .await
                .cloned();
        };
        if let Some(c) = lock(&self.ca_clients).get(pem) {
            return Ok(c.clone());
        }
        let field = format!("{}.customCAData", credential.field);
        let bad = |e: String| {
            DeployError::config(
                "Reconcile",
                "HelmChartRepoCredentials",
                format!("{field}: {e}"),
            )
        };
        let mut roots = (*self.system_roots().await).clone();
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| bad(format!("not PEM: {e}")))?;
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(bad("no PEM certificate".into()));
        }
        let client = client_with(roots)?;
        let mut clients = lock(&self.ca_clients);
        if clients.len() >= MAX_CA_CLIENTS {
            clients.clear();
        }
        clients.insert(pem.clone(), client.clone());
        Ok(client)
    }

    /// The key of a download of `url` made with `credentials`: reused only by a download
    /// with the same credentials (they decide every request, redirects included), so an
    /// item whose Context has no (or other) credentials never gets what one with them
    /// fetched.
    fn download_key(url: &str, credentials: &[RepoCredential]) -> String {
        if credentials.is_empty() {
            return url.to_string();
        }
        let mut all = String::new();
        for c in credentials {
            all.push_str(&format!(
                "{}\n{}\n{}\n",
                c.url,
                c.auth_header,
                c.custom_ca.as_deref().unwrap_or_default()
            ));
        }
        format!("{url} {}", hex(&digest(all.as_bytes())))
    }

    /// A download of `key` younger than `ttl`.
    fn cached_download(&self, key: &str, ttl: Duration) -> Option<Arc<Vec<u8>>> {
        lock(&self.downloads)
            .get(key)
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, bytes)| bytes.clone())
    }

    /// The download kept under `key` when younger than `ttl`, else what `fetch` gives, then
    /// kept.
    async fn cached(
        &self,
        key: String,
        ttl: Duration,
        fetch: impl std::future::Future<Output = Result<Arc<Vec<u8>>, DeployError>>,
    ) -> Result<Arc<Vec<u8>>, DeployError> {
        if let Some(bytes) = self.cached_download(&key, ttl) {
            return Ok(bytes);
        }
        let bytes = fetch.await?;
        self.remember(key, bytes.clone());
        Ok(bytes)
    }

    /// Keeps a download: kept up to [`CACHED_CHART_TTL`] (an item that asks for cached
    /// charts reuses it that long), at most [`MAX_CACHED_BYTES`] in all, oldest out first.
    fn remember(&self, key: String, bytes: Arc<Vec<u8>>) {
        self.remember_within(key, bytes, MAX_CACHED_BYTES);
    }

    fn remember_within(&self, key: String, bytes: Arc<Vec<u8>>, limit: usize) {
        let mut downloads = lock(&self.downloads);
        downloads.retain(|_, (at, _)| at.elapsed() < CACHED_CHART_TTL);
        downloads.insert(key, (Instant::now(), bytes));
        let mut total: usize = downloads.values().map(|(_, b)| b.len()).sum();
        while total > limit && downloads.len() > 1 {
            let Some(oldest) = downloads
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((_, b)) = downloads.remove(&oldest) {
                total -= b.len();
            }
        }
    }

    /// GET `url` (redirects followed), reused for `ttl`; with the `Authorization` header of
    /// the credential whose URL it starts with.
    async fn download(
        &self,
        url: &str,
        field: &str,
        credentials: &[RepoCredential],
        ttl: Duration,
    ) -> Result<Arc<Vec<u8>>, DeployError> {
        let key = Self::download_key(url, credentials);
        self.cached(key, ttl, async {
            let (status, _, body, at) = self.get(url, field, credentials, None, None).await?;
            if !status.is_success() {
                return Err(fetch_error(format!("{field}: GET {at}: {status}")));
            }
            Ok(Arc::new(body))
        })
        .await
    }

    /// One GET of `url`, redirects followed: the final status, its `WWW-Authenticate`, body
    /// and URL. `Authorization`: the header of the credential whose URL the request's
    /// starts with, else `authorization` while the request stays on `url`'s host.
    async fn get(
        &self,
        url: &str,
        field: &str,
        credentials: &[RepoCredential],
        accept: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<(http::StatusCode, Option<String>, Vec<u8>, String), DeployError> {
        let authority = |u: &str| {
            u.parse::<http::Uri>()
                .ok()
                .and_then(|u| u.authority().map(|a| a.as_str().to_string()))
        };
        let host = authority(url);
        let mut current = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let uri: http::Uri = current
                .parse()
                .map_err(|e| chart_error(format!("{field}: {current:?} is not a URL: {e}")))?;
            let mut request = http::Request::get(uri);
            if let Some(h) = RepoCredential::header_for(credentials, &current) {
                request = request.header(http::header::AUTHORIZATION, h);
            } else if let Some(value) = authorization
                && authority(&current) == host
            {
                request = request.header(http::header::AUTHORIZATION, value);
            }
            if let Some(a) = accept {
                request = request.header(http::header::ACCEPT, a);
            }
            let request = request
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .map_err(|e| chart_error(format!("{field}: {e}")))?;
            let client = self.http(credentials, &current).await?;
            let response = tokio::time::timeout(Duration::from_secs(60), client.request(request))
                .await
                .map_err(|_| fetch_error(format!("{field}: GET {current}: no answer in 60s")))?
                .map_err(|e| fetch_error(format!("{field}: GET {current}: {e}")))?;
            let status = response.status();
            if status.is_redirection()
                && let Some(next) = response
                    .headers()
                    .get(http::header::LOCATION)
                    .and_then(|l| l.to_str().ok())
            {
                current = if next.contains("://") {
                    next.to_string()
                } else {
                    let base: http::Uri = current
                        .parse()
                        .map_err(|e| chart_error(format!("{field}: {e}")))?;
                    format!(
                        "{}://{}{}",
                        base.scheme_str().unwrap_or("http"),
                        base.authority().map(|a| a.as_str()).unwrap_or_default(),
                        next
                    )
                };
                continue;
            }
            let challenge = response
                .headers()
                .get(http::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(String::from);
            let body = http_body_util::Limited::new(response.into_body(), MAX_DOWNLOAD)
                .collect()
                .await
                .map_err(|e| fetch_error(format!("{field}: GET {current}: {e}")))?
                .to_bytes();
            return Ok((status, challenge, body.to_vec(), current));
        }
        Err(fetch_error(format!(
            "{field}: GET {url}: more than {MAX_REDIRECTS} redirects"
        )))
    }

    /// A chart in an OCI registry: its manifest, then the chart layer, checked against its
    /// digest; cached like downloads (and by the registry login).
    async fn oci_chart(
        &self,
        r: &OciRef,
        field: &str,
        credentials: &[RepoCredential],
        login: Option<&Login>,
        ttl: Duration,
    ) -> Result<Arc<Vec<u8>>, DeployError> {
        let login_digest = login
            .map(|l| match l {
                Login::Basic(b) => hex(&digest(format!("basic {b}").as_bytes())),
                Login::IdentityToken(t) => hex(&digest(format!("identity {t}").as_bytes())),
            })
            .unwrap_or_default();
        let key = Self::download_key(&format!("oci://{r} {login_digest}"), credentials);
        self.cached(key, ttl, async {
            let base = r.base_url();
            let mut token = None;
            let manifest = self
                .registry_get(
                    &format!("{base}/manifests/{}", r.reference),
                    field,
                    Some(bosun_deployer::oci::MANIFEST_TYPES),
                    credentials,
                    login,
                    &mut token,
                )
                .await?;
            let manifest: Value = serde_json::from_slice(&manifest)
                .map_err(|e| fetch_error(format!("{field}: {r}: the manifest is not JSON: {e}")))?;
            let layer = bosun_deployer::oci::chart_layer(&manifest)
                .map_err(|e| chart_error(format!("{field}: {r}: {e}")))?;
            let blob = self
                .registry_get(
                    &format!("{base}/blobs/{layer}"),
                    field,
                    None,
                    credentials,
                    login,
                    &mut token,
                )
                .await?;
            check_digest(&blob, &layer, &format!("{field}: {r}: the chart layer"))?;
            Ok(Arc::new(blob))
        })
        .await
    }

    /// A chart of a Helm chart repository: its archive and the archive's URL.
    async fn repo_chart(
        &self,
        url: &str,
        name: &str,
        version: &str,
        field: &str,
        credentials: &[RepoCredential],
        ttl: Duration,
    ) -> Result<(Arc<Vec<u8>>, String), DeployError> {
        let index_url = format!("{}/index.yaml", url.trim_end_matches('/'));
        // The index is what names new versions: never kept longer.
        let text = self
            .download(&index_url, field, credentials, FETCH_TTL)
            .await?;
        let index: Value = serde_saphyr::from_slice(&text).map_err(|e| {
            fetch_error(format!(
                "{field}: {index_url}: not a chart repository index: {e}"
            ))
        })?;
        let archive = chart_url(&index, url, name, version)
            .map_err(|m| chart_error(format!("{field}: {m}")))?;
        let bytes = self.download(&archive, field, credentials, ttl).await?;
        Ok((bytes, archive))
    }

    /// The chart a resource of an OCM component version holds (`chart.resourceRef`): the
    /// component version's manifest in the Context's repository, its descriptor, then the
    /// resource by its access (docs/deployer.md). Cached like downloads.
    async fn component_chart(
        &self,
        key: &ResourceKey,
        access: &ChartAccess,
        ttl: Duration,
    ) -> Result<Arc<Vec<u8>>, DeployError> {
        // By the component's repository, the resource and the pull Secrets.
        let cache_key = Self::download_key(
            &format!(
                "ocm://{:?} {} {}",
                access.resolvers,
                key.encode(),
                hex(&digest(format!("{:?}", access.pull_configs).as_bytes()))
            ),
            &access.repos,
        );
        self.cached(cache_key, ttl, self.fetch_component_chart(key, access, ttl))
            .await
    }

    async fn fetch_component_chart(
        &self,
        key: &ResourceKey,
        access: &ChartAccess,
        ttl: Duration,
    ) -> Result<Arc<Vec<u8>>, DeployError> {
        const F: &str = "spec.config.chart.resourceRef";
        let credentials = access.repos.as_slice();
        // The first repository that has the component version (a 404 moves on).
        let mut found = None;
        let mut looked = Vec::new();
        for repository in ocm::lookup_order(&access.resolvers, &key.component) {
            let cv = repository.component(&key.component, &key.version);
            let login = access.login(&cv.registry);
            let base = cv.base_url();
            let mut token = None;
            let field = format!("{F} ({key}) in {cv}");
            let (status, body, at) = self
                .registry_request(
                    &format!("{base}/manifests/{}", cv.reference),
                    &field,
                    Some(bosun_deployer::oci::MANIFEST_TYPES),
                    credentials,
                    login.as_ref(),
                    &mut token,
                )
                .await?;
            if status == http::StatusCode::NOT_FOUND {
                looked.push(cv.to_string());
                continue;
            }
            if !status.is_success() {
                return Err(fetch_error(format!("{field}: GET {at}: {status}")));
            }
            found = Some((body, field, base, login, token));
            break;
        }
        let Some((manifest, field, base, login, mut token)) = found else {
            return Err(fetch_error(format!(
                "{F} ({key}): the component version is not in the Context's repositories (looked in {})",
                if looked.is_empty() {
                    "none: no resolver's prefix matches".to_string()
                } else {
                    looked.join(", ")
                }
            )));
        };
        let manifest: Value = serde_json::from_slice(&manifest)
            .map_err(|e| fetch_error(format!("{field}: the manifest is not JSON: {e}")))?;
        let config = match manifest["config"]["digest"].as_str() {
            Some(d) => {
                let bytes = self
                    .registry_get(
                        &format!("{base}/blobs/{d}"),
                        &field,
                        None,
                        credentials,
                        login.as_ref(),
                        &mut token,
                    )
                    .await?;
                serde_json::from_slice(&bytes).unwrap_or(Value::Null)
            }
            None => Value::Null,
        };
        let (layer, media_type) = ocm::descriptor_layer(&manifest, &config)
            .map_err(|e| chart_error(format!("{field}: {e}")))?;
        let blob = self
            .registry_get(
                &format!("{base}/blobs/{layer}"),
                &field,
                None,
                credentials,
                login.as_ref(),
                &mut token,
            )
            .await?;
        check_digest(&blob, &layer, &format!("{field}: the descriptor layer"))?;
        let text = if ocm::descriptor_in_tar(&media_type) {
            tar_file(&blob, false, "component-descriptor.yaml")
                .map_err(|e| chart_error(format!("{field}: the descriptor layer: {e}")))?
        } else {
            blob
        };
        let cd = ocm::descriptor(&text, key).map_err(|e| chart_error(format!("{field}: {e}")))?;
        match ocm::resource_access(&cd, key).map_err(|e| chart_error(format!("{field}: {e}")))? {
            ocm::Access::Oci(r) => {
                let login = access.login(&r.registry);
                self.oci_chart(&r, &field, credentials, login.as_ref(), ttl)
                    .await
            }
            ocm::Access::HelmRepo { url, name, version } => self
                .repo_chart(&url, &name, &version, &field, credentials, ttl)
                .await
                .map(|(bytes, _)| bytes),
            ocm::Access::LocalBlob { digest, media_type } => {
                let blob = self
                    .registry_get(
                        &format!("{base}/blobs/{digest}"),
                        &field,
                        None,
                        credentials,
                        login.as_ref(),
                        &mut token,
                    )
                    .await?;
                check_digest(&blob, &digest, &format!("{field}: the local blob"))?;
                if !ocm::is_artifact_set(&media_type) {
                    return Ok(Arc::new(blob));
                }
                // An OCI artifact in artifact-set format: index.json names the manifest,
                // whose chart layer is a blob of the set.
                let gz = media_type.ends_with("+gzip");
                let from_set = |name: &str| {
                    tar_file(&blob, gz, name).map_err(|e| {
                        chart_error(format!("{field}: the artifact set {digest}: {e}"))
                    })
                };
                let json = |bytes: Vec<u8>, what: &str| {
                    serde_json::from_slice::<Value>(&bytes).map_err(|e| {
                        chart_error(format!(
                            "{field}: the artifact set {digest}: {what} is not JSON: {e}"
                        ))
                    })
                };
                let index = json(from_set("index.json")?, "index.json")?;
                let manifest_digest = ocm::artifact_set_manifest(&index)
                    .map_err(|e| chart_error(format!("{field}: {e}")))?;
                let manifest = json(
                    from_set(&ocm::artifact_set_blob(&manifest_digest))?,
                    "its manifest",
                )?;
                let chart_layer = bosun_deployer::oci::chart_layer(&manifest)
                    .map_err(|e| chart_error(format!("{field}: the artifact set: {e}")))?;
                let chart = from_set(&ocm::artifact_set_blob(&chart_layer))?;
                check_digest(&chart, &chart_layer, &format!("{field}: the chart layer"))?;
                Ok(Arc::new(chart))
            }
        }
    }

    /// One `POST` of a form to `url` (a token service): the status and the body.
    async fn post_form(
        &self,
        url: &str,
        field: &str,
        credentials: &[RepoCredential],
        form: String,
    ) -> Result<(http::StatusCode, Vec<u8>), DeployError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| chart_error(format!("{field}: {url:?} is not a URL: {e}")))?;
        let request = http::Request::post(uri)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(form)))
            .map_err(|e| chart_error(format!("{field}: {e}")))?;
        let client = self.http(credentials, url).await?;
        let response = tokio::time::timeout(Duration::from_secs(60), client.request(request))
            .await
            .map_err(|_| fetch_error(format!("{field}: POST {url}: no answer in 60s")))?
            .map_err(|e| fetch_error(format!("{field}: POST {url}: {e}")))?;
        let status = response.status();
        let body = http_body_util::Limited::new(response.into_body(), MAX_DOWNLOAD)
            .collect()
            .await
            .map_err(|e| fetch_error(format!("{field}: POST {url}: {e}")))?
            .to_bytes()
            .to_vec();
        Ok((status, body))
    }

    /// GET from a registry, with its `login` (`Basic …`) until a token is known: on a
    /// first 401 with a Bearer challenge, a token from the registry's token service (with
    /// the login, else anonymous, or with the credential for its URL; an identity token is
    /// exchanged with a `POST` instead), kept in `token` for the next requests.
    async fn registry_get(
        &self,
        url: &str,
        field: &str,
        accept: Option<&str>,
        credentials: &[RepoCredential],
        login: Option<&Login>,
        token: &mut Option<String>,
    ) -> Result<Vec<u8>, DeployError> {
        let (status, body, at) = self
            .registry_request(url, field, accept, credentials, login, token)
            .await?;
        if !status.is_success() {
            return Err(fetch_error(format!("{field}: GET {at}: {status}")));
        }
        Ok(body)
    }

    /// [`HelmCharts::registry_get`] with the final status, body and URL, whatever the
    /// status.
    async fn registry_request(
        &self,
        url: &str,
        field: &str,
        accept: Option<&str>,
        credentials: &[RepoCredential],
        login: Option<&Login>,
        token: &mut Option<String>,
    ) -> Result<(http::StatusCode, Vec<u8>, String), DeployError> {
        let basic = match login {
            Some(Login::Basic(b)) => Some(b.as_str()),
            _ => None,
        };
        loop {
            let authorization = token.as_ref().map(|t| format!("Bearer {t}"));
            let (status, challenge, body, at) = self
                .get(
                    url,
                    field,
                    credentials,
                    accept,
                    authorization.as_deref().or(basic),
                )
                .await?;
            if status == http::StatusCode::UNAUTHORIZED
                && token.is_none()
                && let Some(challenge) = challenge.as_deref()
            {
                // An identity token is exchanged with a POST; a login (or none) goes with a
                // GET of the token URL.
                let asked = match login {
                    Some(Login::IdentityToken(refresh)) => {
                        match bosun_deployer::oci::refresh_form(challenge, refresh) {
                            Some((realm, form)) => Some((
                                self.post_form(&realm, field, credentials, form).await?,
                                realm,
                            )),
                            None => None,
                        }
                    }
                    _ => match bosun_deployer::oci::token_url(challenge) {
                        Some(token_url) => {
                            let (st, _, answer, _) = self
                                .get(
                                    &token_url,
                                    field,
                                    credentials,
                                    Some("application/json"),
                                    basic,
                                )
                                .await?;
                            Some(((st, answer), token_url))
                        }
                        None => None,
                    },
                };
                if let Some(((st, answer), service)) = asked {
                    if !st.is_success() {
                        return Err(fetch_error(format!(
                            "{field}: the registry's token service {service}: {st}"
                        )));
                    }
                    let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
                    let t = bosun_deployer::oci::token_of(&answer).ok_or_else(|| {
                        fetch_error(format!(
                            "{field}: the registry's token service {service} answered no token"
                        ))
                    })?;
                    *token = Some(t.to_string());
                    continue;
                }
            }
            return Ok((status, body, at));
        }
    }

    /// Reads an archive (once per digest) and keeps it on disk for the engine.
    async fn read(&self, archive: Arc<Vec<u8>>, what: &str) -> Result<Arc<Chart>, DeployError> {
        let key = hex(&digest(&archive));
        if let Some(c) = lock(&self.charts).get(&key) {
            return Ok(c.clone());
        }
        let what = what.to_string();
        let chart = tokio::task::spawn_blocking(move || read_chart(archive, &what))
            .await
            .map_err(|e| fetch_error(format!("reading the chart: {e}")))??;
        let path = self.chart_path(&chart);
        if !path.exists() {
            write_private(&path, &chart.archive).map_err(|e| {
                fetch_error(format!("cannot keep the chart at {}: {e}", path.display()))
            })?;
        }
        let chart = Arc::new(chart);
        let mut charts = lock(&self.charts);
        if charts.len() >= MAX_CHARTS {
            charts.clear();
        }
        charts.insert(key, chart.clone());
        Ok(chart)
    }

    fn chart_path(&self, chart: &Chart) -> PathBuf {
        self.dir
            .join("charts")
            .join(format!("{}.tgz", chart.digest))
    }

    /// The release client of `target` for releases in `namespace`.
    async fn client(
        &self,
        target: &ResolvedTarget,
        namespace: &str,
    ) -> Result<crate::helm::ReleaseClient, DeployError> {
        let engine = self.engine().await?;
        let id = (
            target.target.namespace.clone(),
            target.target.name.clone(),
            namespace.to_string(),
        );
        let d = digest(target.content.as_bytes());
        if let Some((built, c)) = lock(&self.clients).get(&id)
            && *built == d
        {
            return Ok(c.clone());
        }
        let text = kubeconfig_of(target)
            .map_err(|e| DeployError::config("ValidateTarget", "InvalidTarget", e.to_string()))?;
        // Checked as the manifest type's client is (no exec, no files).
        self.targets.client(target).await?;
        let path = self.dir.join("kubeconfigs").join(format!(
            "{}_{}_{}.yaml",
            target.target.namespace,
            target.target.name,
            hex(&d)
        ));
        write_private(&path, text.as_bytes()).map_err(|e| {
            fetch_error(format!(
                "cannot write the kubeconfig of {} to {}: {e}",
                target.target.describe(),
                path.display()
            ))
        })?;
        let client = engine
            .client(&ClusterOptions {
                kubeconfig: Some(path),
                namespace: namespace.to_string(),
                ..Default::default()
            })
            .map_err(|e| helm_error(target, "configuring Helm for the target", &e))?;
        lock(&self.clients).insert(id, (d, client.clone()));
        Ok(client)
    }
}

/// Writes `bytes` to `path` readable by this user only, through a temporary file.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("part");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn install_options(run: &HelmRun<'_>, upgrade: bool) -> InstallOptions {
    InstallOptions {
        timeout_seconds: run.timeout.map(|t| t.as_secs().max(1)),
        max_history: upgrade.then_some(bosun_deployer::helm::MAX_HISTORY),
        take_ownership: run.options.take_ownership,
        create_namespace: run.create_namespace,
        wait: run.options.wait,
        rollback_on_failure: run.options.atomic,
        force_replace: run.options.force,
        skip_schema_validation: run.options.skip_schema_validation,
        ..Default::default()
    }
}

impl HelmPort for HelmCharts {
    fn chart<'a>(
        &'a self,
        source: &'a ChartSource,
        access: &'a ChartAccess,
    ) -> BoxFut<'a, Result<Arc<Chart>, DeployError>> {
        let credentials = access.repos.as_slice();
        let chart_ttl = if access.cache_charts {
            CACHED_CHART_TTL
        } else {
            FETCH_TTL
        };
        Box::pin(async move {
            match source {
                ChartSource::Archive(bytes) => {
                    self.read(bytes.clone(), "spec.config.chart.archive.raw")
                        .await
                }
                ChartSource::Remote(url) => {
                    const F: &str = "spec.config.chart.archive.remote.url";
                    let bytes = self.download(url, F, credentials, chart_ttl).await?;
                    self.read(bytes, &format!("{F} {url}")).await
                }
                ChartSource::Oci(r) => {
                    const F: &str = "spec.config.chart.ref";
                    let login = access.login(&r.registry);
                    let bytes = self
                        .oci_chart(r, F, credentials, login.as_ref(), chart_ttl)
                        .await?;
                    self.read(bytes, &format!("{F} {r}")).await
                }
                ChartSource::Repo { url, name, version } => {
                    const F: &str = "spec.config.chart.helmChartRepo";
                    let (bytes, archive) = self
                        .repo_chart(url, name, version, F, credentials, chart_ttl)
                        .await?;
                    self.read(bytes, &format!("{F} {archive}")).await
                }
                ChartSource::Component(key) => {
                    let bytes = self.component_chart(key, access, chart_ttl).await?;
                    self.read(bytes, &format!("spec.config.chart.resourceRef ({key})"))
                        .await
                }
            }
        })
    }

    fn render<'a>(&'a self, run: HelmRun<'a>) -> BoxFut<'a, Result<Vec<Value>, DeployError>> {
        Box::pin(async move {
            let engine = self.engine().await?;
            let files = engine
                .render(
                    &self.chart_path(run.chart),
                    run.values,
                    run.release,
                    run.namespace,
                    false,
                )
                .await
                .map_err(|e| {
                    chart_error(format!(
                        "spec.config.chart: rendering release {}: {e}",
                        run.release
                    ))
                })?;
            let mut objects = Vec::new();
            for (file, text) in files.iter().filter(|(f, _)| !f.ends_with("NOTES.txt")) {
                for doc in bosun_deployer::helm::split_documents(text) {
                    let v: Value = serde_saphyr::from_str(doc).map_err(|e| {
                        chart_error(format!("spec.config.chart: {file}: not YAML: {e}"))
                    })?;
                    if v.is_object() {
                        objects.push(v);
                    }
                }
            }
            Ok(objects)
        })
    }

    fn release<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<Option<ReleaseState>, DeployError>> {
        Box::pin(async move {
            let client = self.client(target, namespace).await?;
            match client.status(name).await {
                Ok(r) => Ok(Some(state(&r, namespace))),
                Err(HelmError::NotFound(_)) => Ok(None),
                Err(e) => Err(helm_error(target, &format!("status of release {name}"), &e)),
            }
        })
    }

    fn deploy<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        run: HelmRun<'a>,
        upgrade: bool,
    ) -> BoxFut<'a, Result<ReleaseState, DeployError>> {
        Box::pin(async move {
            let client = self.client(target, run.namespace).await?;
            let chart = self.chart_path(run.chart);
            let o = install_options(&run, upgrade);
            let action = crate::helm::Action::of(upgrade);
            client
                .deploy(action, &chart, run.release, run.values, &o)
                .await
                .map(|r| state(&r, run.namespace))
                .map_err(|e| {
                    let what = format!("{} of release {}", action.command(), run.release);
                    helm_error(target, &what, &e)
                })
        })
    }

    fn uninstall<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
        wait: bool,
        timeout: Option<Duration>,
    ) -> BoxFut<'a, Result<(), DeployError>> {
        Box::pin(async move {
            let client = self.client(target, namespace).await?;
            match client
                .uninstall(name, wait, timeout.map(|t| t.as_secs().max(1)))
                .await
            {
                Ok(()) | Err(HelmError::NotFound(_)) => Ok(()),
                Err(e) => Err(helm_error(
                    target,
                    &format!("uninstall of release {name}"),
                    &e,
                )),
            }
        })
    }

    fn unblock<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<usize, DeployError>> {
        Box::pin(async move {
            let kube = self.targets.client(target).await?;
            let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
                kube::Api::namespaced(kube, namespace);
            let what = |e: kube::Error| {
                DeployError::new(
                    "Reconcile",
                    "Helm",
                    format!(
                        "{}: removing the pending revisions of release {name}: {e}",
                        target.target.describe()
                    ),
                    &[],
                )
            };
            let list = secrets
                .list(&kube::api::ListParams::default().labels(&format!("owner=helm,name={name}")))
                .await
                .map_err(what)?;
            let mut removed = 0;
            for s in list.items {
                let pending = s
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("status"))
                    .is_some_and(|st| st.starts_with("pending-"));
                let Some(secret) = s.metadata.name.filter(|_| pending) else {
                    continue;
                };
                match secrets
                    .delete(&secret, &kube::api::DeleteParams::default())
                    .await
                {
                    Ok(_) => removed += 1,
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(what(e)),
                }
                tracing::warn!(release = %name, namespace = %namespace, secret = %secret, "removed a pending revision so that the next operation is not blocked");
            }
            Ok(removed)
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn downloads_are_reused_a_minute_or_a_day_and_the_oldest_go_over_the_limit() {
        let charts = HelmCharts::new(
            EngineSettings::default(),
            PathBuf::from("/nonexistent"),
            Arc::default(),
        );
        let two_minutes_ago = Instant::now().checked_sub(Duration::from_secs(120));
        let Some(at) = two_minutes_ago else {
            return; // a machine up for less than two minutes cannot date a download back
        };
        lock(&charts.downloads).insert("chart".into(), (at, Arc::new(vec![1])));
        assert!(
            charts.cached_download("chart", FETCH_TTL).is_none(),
            "without the annotation a chart is fetched again after a minute"
        );
        assert!(
            charts.cached_download("chart", CACHED_CHART_TTL).is_some(),
            "with cache-helm-charts it is reused for a day"
        );
        for key in ["a", "b", "c"] {
            charts.remember_within(key.into(), Arc::new(vec![0; 40]), 100);
        }
        let downloads = lock(&charts.downloads);
        assert!(
            !downloads.contains_key("chart") && !downloads.contains_key("a"),
            "the oldest went first"
        );
        assert!(downloads.contains_key("b") && downloads.contains_key("c"));
    }

    fn tgz(files: &[(&str, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for (path, text) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(text.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, path, text.as_bytes())
                .expect("append");
        }
        b.into_inner().expect("tar").finish().expect("gzip")
    }

    #[test]
    fn a_chart_archive_gives_its_metadata_and_default_values() {
        let archive = tgz(&[
            (
                "web/Chart.yaml",
                "apiVersion: v2\nname: web\nversion: 1.2.0\n",
            ),
            ("web/values.yaml", "port: 80\nimage: {tag: '1'}\n"),
            ("web/charts/sub/values.yaml", "ignored: true\n"),
        ]);
        let c = read_chart(Arc::new(archive), "chart").expect("reads");
        assert_eq!(c.metadata["version"], "1.2.0");
        assert_eq!(c.default_values, json!({"port": 80, "image": {"tag": "1"}}));
        let Err(e) = read_chart(
            Arc::new(b"not a tar".to_vec()),
            "spec.config.chart.archive.raw",
        ) else {
            panic!("garbage is refused");
        };
        assert!(
            e.is_unrecoverable() && e.message.starts_with("spec.config.chart.archive.raw"),
            "{e}"
        );
        let Err(e) = read_chart(Arc::new(tgz(&[("web/values.yaml", "a: 1\n")])), "chart") else {
            panic!("a chart needs Chart.yaml");
        };
        assert!(e.message.contains("Chart.yaml"), "{e}");
    }

    #[test]
    fn the_index_gives_the_asked_or_newest_version_with_relative_urls_resolved() {
        let index = json!({"entries": {"web": [
            {"version": "1.9.0", "urls": ["web-1.9.0.tgz"]},
            {"version": "1.10.0", "urls": ["https://cdn.example/web-1.10.0.tgz"]},
            {"version": "1.11.0-rc.1", "urls": ["web-1.11.0-rc.1.tgz"]},
        ]}});
        let repo = "http://127.0.0.1:1/charts/";
        assert_eq!(
            chart_url(&index, repo, "web", "1.9.0").as_deref(),
            Ok("http://127.0.0.1:1/charts/web-1.9.0.tgz")
        );
        assert_eq!(
            chart_url(&index, repo, "web", "").as_deref(),
            Ok("https://cdn.example/web-1.10.0.tgz"),
            "the highest stable version"
        );
        assert!(chart_url(&index, repo, "web", "2.0.0").is_err_and(|m| m.contains("2.0.0")));
        assert!(chart_url(&index, repo, "db", "").is_err_and(|m| m.contains("\"db\"")));
    }
}
