//! The helm type's port (`bosun_deployer::helm::HelmPort`) on the Helm engine the modules
//! use (library or binary): releases in the target cluster through a kubeconfig file per
//! target (mode 0600, rewritten when the target changes); pending revisions removed
//! through the target's client. Where charts come from (decoded from the item, fetched
//! over HTTP(S) from repositories, OCI registries and OCM components, read and kept by
//! digest under the deployer's directory) is `charts.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_deployer::helm::{
    CACHED_CHART_TTL, Chart, ChartAccess, ChartSource, HelmPort, HelmRun, ReleaseState,
};
use bosun_deployer::item::ErrorCode;
use bosun_deployer::ports::BoxFut;
use bosun_deployer::status::DeployError;
use bosun_deployer::target::{ResolvedTarget, kubeconfig_of};
use serde_json::Value;

mod charts;

use super::targets::TargetClients;
use crate::helm::{ClusterOptions, EngineSettings, HelmEngine, HelmError, InstallOptions};
use charts::{Download, FETCH_TTL, HttpClient, chart_error, digest, fetch_error, hex, lock};

/// A release client and the digest of the target content its kubeconfig came from.
type BuiltClient = ([u8; 16], crate::helm::ReleaseClient);

/// Charts and releases for the helm type.
pub struct HelmCharts {
    settings: EngineSettings,
    engine: tokio::sync::OnceCell<Result<HelmEngine, String>>,
    dir: PathBuf,
    targets: Arc<TargetClients>,
    /// The system's CA certificates, loaded on the first download.
    system_roots: bosun_kube::http_client::SystemRoots,
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

/// Writes `bytes` to `path` readable by this user only, through a temporary file (missing
/// folders are created `0700`).
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(dir) = path.parent() {
        bosun_platform::create_private_dir(dir)?;
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
    use std::time::Instant;

    use serde_json::json;

    use super::charts::{chart_url, read_chart};
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
