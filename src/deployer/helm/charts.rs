//! The helm type's chart sources: archives decoded from the item, chart repositories
//! (their index), OCI registries and OCM component versions, fetched over HTTP(S) with
//! the system's CAs or a credential's own, cached by URL and credentials (`FETCH_TTL`,
//! a size bound) and read (`Chart.yaml`, `values.yaml`) by digest.

use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bosun_deployer::helm::{CACHED_CHART_TTL, Chart, ChartAccess, RepoCredential};
use bosun_deployer::oci::{Login, OciRef};
use bosun_deployer::ocm::{self, ResourceKey};
use bosun_deployer::status::DeployError;
use http_body_util::BodyExt as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;

use super::{HelmCharts, write_private};

/// How long a downloaded chart or repository index is used before it is fetched again
/// (a chart of an item with `cache-helm-charts: "true"`: [`CACHED_CHART_TTL`]).
pub(super) const FETCH_TTL: Duration = Duration::from_secs(60);
/// The most bytes of downloads kept in memory (landscaper's chart cache holds 100 MB);
/// the oldest go first.
pub(super) const MAX_CACHED_BYTES: usize = 100 * 1024 * 1024;
/// The largest chart archive or index accepted.
pub(super) const MAX_DOWNLOAD: usize = 20 * 1024 * 1024;
/// Redirects followed by a download.
pub(super) const MAX_REDIRECTS: usize = 5;
/// Charts kept read in memory.
pub(super) const MAX_CHARTS: usize = 64;

pub(super) type HttpClient = hyper_util::client::legacy::Client<
    bosun_kube::http_client::CloseIsEnd<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    >,
    http_body_util::Full<bytes::Bytes>,
>;

/// Download clients with a credential's own CA kept at once.
pub(super) const MAX_CA_CLIENTS: usize = 16;

/// A download client trusting `roots`.
pub(super) fn client_with(roots: rustls::RootCertStore) -> Result<HttpClient, DeployError> {
    let tls = bosun_kube::http_client::tls_config(Arc::new(roots), None)
        .map_err(|e| fetch_error(format!("TLS settings for chart downloads: {e}")))?;
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.set_connect_timeout(Some(Duration::from_secs(10)));
    tcp.enforce_http(false);
    let connector =
        bosun_kube::http_client::CloseIsEnd(bosun_kube::http_client::https_connector(tls, tcp));
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector),
    )
}

/// Downloaded bytes and when they were fetched.
pub(super) type Download = (Instant, Arc<Vec<u8>>);

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn chart_error(message: String) -> DeployError {
    DeployError::config("Reconcile", "InvalidChart", message)
}

pub(super) fn fetch_error(message: String) -> DeployError {
    DeployError::new("Reconcile", "FetchChart", message, &[])
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn digest(bytes: &[u8]) -> [u8; 16] {
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
pub(super) fn check_digest(bytes: &[u8], digest: &str, field: &str) -> Result<(), DeployError> {
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
pub(super) fn tar_file(bytes: &[u8], gz: bool, name: &str) -> Result<Vec<u8>, String> {
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
pub(super) fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let key = |v: &str| {
        let v = v.trim_start_matches('v');
        let (core, pre) = v.split_once('-').unwrap_or((v, ""));
        let nums: Vec<u64> = core.split('.').map(|p| p.parse().unwrap_or(0)).collect();
        (nums, pre.is_empty(), pre.to_string())
    };
    key(a).cmp(&key(b))
}

impl HelmCharts {
    pub(super) async fn system_roots(&self) -> Arc<rustls::RootCertStore> {
        self.system_roots.get().await
    }

    /// The download client for `url`: one that also trusts the `customCAData` of the
    /// credential for `url`, else the one trusting the system's CAs.
    pub(super) async fn http(
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
    pub(super) fn download_key(url: &str, credentials: &[RepoCredential]) -> String {
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
    pub(super) fn cached_download(&self, key: &str, ttl: Duration) -> Option<Arc<Vec<u8>>> {
        lock(&self.downloads)
            .get(key)
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, bytes)| bytes.clone())
    }

    /// The download kept under `key` when younger than `ttl`, else what `fetch` gives, then
    /// kept.
    pub(super) async fn cached(
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
    pub(super) fn remember(&self, key: String, bytes: Arc<Vec<u8>>) {
        self.remember_within(key, bytes, MAX_CACHED_BYTES);
    }

    pub(super) fn remember_within(&self, key: String, bytes: Arc<Vec<u8>>, limit: usize) {
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
    pub(super) async fn download(
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
    pub(super) async fn get(
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
    pub(super) async fn oci_chart(
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
    pub(super) async fn repo_chart(
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
    pub(super) async fn component_chart(
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

    pub(super) async fn fetch_component_chart(
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
    pub(super) async fn post_form(
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
    pub(super) async fn registry_get(
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
    pub(super) async fn registry_request(
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
    pub(super) async fn read(
        &self,
        archive: Arc<Vec<u8>>,
        what: &str,
    ) -> Result<Arc<Chart>, DeployError> {
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

    pub(super) fn chart_path(&self, chart: &Chart) -> PathBuf {
        self.dir
            .join("charts")
            .join(format!("{}.tgz", chart.digest))
    }
}
