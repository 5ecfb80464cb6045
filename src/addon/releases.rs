//! Helm releases of modules through either Helm engine (the library or the binary, see
//! `crate::helm::HelmEngine`), plus the Kubernetes reads Helm does not do for us: drift of
//! rendered objects, recovery of releases stuck in `pending-*`, and server-side apply of
//! module CRDs. Checksums, drift and recovery are the same whichever engine runs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bosun_addon::ports::{BoxFut, ObjectPreview, PortError, ReleaseInfo, Releases, Rendered};
use bosun_kube::port_error;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::{ApiResource, Scope};
use serde_json::Value;

use crate::helm::{HelmEngine, HelmError, InstallOptions, Release, ReleaseClient};

/// Label holding the checksum of the rendered chart on each release revision.
pub const CHECKSUM_LABEL: &str = "moduleChecksum";

/// The field manager of bosun's own server-side applies (module CRDs, diff previews).
pub const FIELD_MANAGER: &str = "bosun";

/// [`Releases`] with a Helm engine.
pub struct HelmReleases {
    engine: HelmEngine,
    client: ReleaseClient,
    kube: kube::Client,
    namespace: String,
    options: InstallOptions,
    resources: Mutex<HashMap<(String, String), (ApiResource, bool)>>,
    /// The last status read of each release, which the upgrade that follows it reuses
    /// instead of asking Helm again (a whole process with the binary).
    recent: Mutex<HashMap<String, (std::time::Instant, Option<Release>)>>,
    /// Revisions Helm reported installed or upgraded whose record could not be marked
    /// `deployed` yet ([`HelmReleases::settle_record`]), by release.
    unsettled: Mutex<HashMap<String, u64>>,
    /// The private folder the modules' charts are copied into (the temp folder): checked
    /// down to the chart before each render and upgrade, as hook runs check it.
    private_root: Option<PathBuf>,
    /// The releases whose status is read from Helm's storage: those it held when the
    /// first status was asked, and each one that list answered since (`None`: the list
    /// failed, every status is read), see [`HelmReleases::absent_at_start`].
    listed: tokio::sync::OnceCell<Option<Mutex<HashSet<String>>>>,
}

/// How long a status read stands in for a new one before an upgrade.
const RECENT_STATUS: std::time::Duration = std::time::Duration::from_secs(2);

impl HelmReleases {
    /// Releases in `namespace`; `options` carries `HELM_HISTORY_MAX` and `HELM_TIMEOUT`.
    pub fn new(
        engine: HelmEngine,
        client: ReleaseClient,
        kube: kube::Client,
        namespace: &str,
        options: InstallOptions,
    ) -> HelmReleases {
        HelmReleases {
            engine,
            client,
            kube,
            namespace: namespace.to_string(),
            options,
            resources: Mutex::new(HashMap::new()),
            recent: Mutex::new(HashMap::new()),
            unsettled: Mutex::new(HashMap::new()),
            private_root: None,
            listed: tokio::sync::OnceCell::new(),
        }
    }

    /// Whether `release` did not exist when the first status of any release was asked,
    /// answered once per release: the first status of each release (the module's first
    /// run after the start) comes from one list of the release Secrets' names instead of a
    /// read of its own, and every later one reads Helm's storage. On a cluster without the
    /// releases yet (a first start), that saves one read of Helm's storage per module; the
    /// list is of the Secrets' metadata alone (names and labels, no release records), so
    /// where the releases exist it costs little. Helm keeps releases in Secrets labelled
    /// `owner=helm` (the only storage bosun runs Helm with); the list failing, every
    /// status reads as before. A release another client installed between that list and
    /// the module's first run is found by the install, which then fails (the name is in
    /// use) and is retried after a read.
    async fn absent_at_start(&self, release: &str) -> bool {
        let listed = self
            .listed
            .get_or_init(|| async {
                let api: Api<k8s_openapi::api::core::v1::Secret> =
                    Api::namespaced(self.kube.clone(), &self.namespace);
                match api
                    .list_metadata(&ListParams::default().labels("owner=helm"))
                    .await
                {
                    Ok(list) => Some(Mutex::new(
                        list.items
                            .into_iter()
                            .filter_map(|s| s.metadata.labels?.remove("name"))
                            .collect(),
                    )),
                    Err(e) => {
                        tracing::debug!(
                            "cannot list the release Secrets; every status is read: {e}"
                        );
                        None
                    }
                }
            })
            .await;
        let Some(names) = listed else {
            return false;
        };
        // Not listed: absent, this once; from now on it is read.
        names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(release.to_string())
    }

    /// Charts are read from copies under `root`, bosun's private temp folder: each render
    /// and upgrade first checks that every folder from `root` to the chart is still
    /// bosun's own and private (one swapped for another user's since the start is refused).
    pub fn with_private_root(mut self, root: PathBuf) -> HelmReleases {
        self.private_root = Some(root);
        self
    }

    /// Refuses a chart copy whose folders are no longer bosun's own.
    fn chart_is_ours(&self, release: &str, chart: &Path) -> Result<(), PortError> {
        let Some(root) = &self.private_root else {
            return Ok(());
        };
        crate::private_dir::check_within(root, chart).map_err(|e| {
            PortError::permanent(format!(
                "not running Helm for release {release}: its chart copy {} is not in bosun's private folder any more: {e}",
                chart.display()
            ))
        })
    }

    /// The API resource of an apiVersion/kind and whether it is namespaced (cached).
    async fn resource(&self, api_version: &str, kind: &str) -> Result<(ApiResource, bool), String> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(r) = self
            .resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(r.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = kube::discovery::pinned_kind(&self.kube, &gvk)
            .await
            .map_err(|e| format!("{kind} ({api_version}) is not served by the cluster: {e}"))?;
        let found = (ar, caps.scope == Scope::Namespaced);
        self.resources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, found.clone());
        Ok(found)
    }

    async fn api_for(&self, obj: &Value) -> Result<(Api<DynamicObject>, String, String), String> {
        let (api, name, what, _) = self.locate(obj).await?;
        Ok((api, name, what))
    }

    /// The API of an object, its name, `Kind/[ns/]name` for messages, and the namespace it
    /// lives in (the release namespace when it names none; `None` when cluster-scoped).
    async fn locate(
        &self,
        obj: &Value,
    ) -> Result<(Api<DynamicObject>, String, String, Option<String>), String> {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        let kind = obj["kind"].as_str().unwrap_or_default();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let (ar, namespaced) = self.resource(api_version, kind).await?;
        if namespaced {
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(&self.namespace)
                .to_string();
            let what = format!("{kind}/{ns}/{name}");
            Ok((
                Api::namespaced_with(self.kube.clone(), &ns, &ar),
                name,
                what,
                Some(ns),
            ))
        } else {
            let what = format!("{kind}/{name}");
            Ok((Api::all_with(self.kube.clone(), &ar), name, what, None))
        }
    }

    /// Deletes the storage Secret of a revision stuck in `pending-*`, as the reference does,
    /// so the next upgrade starts from the last settled revision.
    async fn recover_pending(&self, release: &Release) -> Result<(), PortError> {
        let secret = format!(
            "sh.helm.release.v1.{}.v{}",
            release.name(),
            release.revision()
        );
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.kube.clone(), &self.namespace);
        tracing::warn!(release = %release.name(), revision = release.revision(), status = %release.status(), "release stuck; deleting its pending revision {secret}");
        match api.delete(&secret, &Default::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(port_error(format!("cannot delete {secret}: {e}"), e)),
        }
    }

    /// Marks revision `revision` of `release` `deployed` in its storage Secret when it still
    /// says `pending-*` although Helm reported the install or upgrade done: Helm logs a
    /// failed last write of the release record and returns success, and the record left
    /// pending would look like an interrupted operation, which the next check recovers by
    /// installing again (chart hooks and all). `Ok(true)` when the record was fixed.
    async fn settle_record(&self, release: &str, revision: u64) -> Result<bool, String> {
        let name = format!("sh.helm.release.v1.{release}.v{revision}");
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.kube.clone(), &self.namespace);
        let Some(mut secret) = api
            .get_opt(&name)
            .await
            .map_err(|e| format!("cannot read {name}: {e}"))?
        else {
            return Ok(false);
        };
        let labels = secret.metadata.labels.get_or_insert_with(Default::default);
        if !labels
            .get("status")
            .is_some_and(|s| s.starts_with("pending"))
        {
            return Ok(false);
        }
        labels.insert("status".into(), "deployed".into());
        let data = secret.data.get_or_insert_with(Default::default);
        let Some(encoded) = data.get("release") else {
            return Err(format!("{name} holds no release record"));
        };
        let settled = deployed_record(&encoded.0).map_err(|e| format!("{name}: {e}"))?;
        data.insert("release".into(), k8s_openapi::ByteString(settled));
        // The resourceVersion read above: a concurrent writer makes this fail, not vanish.
        api.replace(&name, &Default::default(), &secret)
            .await
            .map_err(|e| format!("cannot update {name}: {e}"))?;
        tracing::warn!(release = %release, revision, "Helm reported the release done but left its record pending; marked it deployed");
        Ok(true)
    }

    /// Settles `r` if it is the pending record of a revision Helm reported done
    /// ([`HelmReleases::settle_record`]); `true` when `r` is now to be read as deployed.
    async fn settle_if_ours(&self, r: &Release) -> bool {
        let ours = self
            .unsettled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(r.name())
            .is_some_and(|rev| *rev == r.revision());
        if !ours || !r.status().starts_with("pending") {
            return false;
        }
        match self.settle_record(r.name(), r.revision()).await {
            Ok(_) => {
                self.unsettled
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(r.name());
                true
            }
            Err(e) => {
                tracing::warn!(release = %r.name(), "cannot mark the release deployed yet: {e}");
                false
            }
        }
    }

    /// The status `status` read for `release` moments ago, taken (used once).
    fn take_recent(&self, release: &str) -> Option<Option<Release>> {
        let (at, r) = self
            .recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(release)?;
        (at.elapsed() < RECENT_STATUS).then_some(r)
    }

    async fn latest(&self, release: &str) -> Result<Option<Release>, PortError> {
        match self.client.status(release).await {
            Ok(r) => Ok(Some(r)),
            Err(HelmError::NotFound(_)) => Ok(None),
            Err(e) => Err(helm_failure(e)),
        }
    }

    /// The checksum label of a revision: on the release record, else on its Secret.
    async fn checksum_of(&self, release: &Release) -> Option<String> {
        if let Some(c) = release.0["labels"][CHECKSUM_LABEL].as_str() {
            return Some(c.to_string());
        }
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.kube.clone(), &self.namespace);
        let secret = format!(
            "sh.helm.release.v1.{}.v{}",
            release.name(),
            release.revision()
        );
        api.get_opt(&secret)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.metadata.labels?.get(CHECKSUM_LABEL).cloned())
    }
}

/// A Helm release record as its Secret stores it (base64 of gzipped JSON) with
/// `info.status` set to `deployed`.
fn deployed_record(encoded: &[u8]) -> Result<Vec<u8>, String> {
    use base64::Engine as _;
    use std::io::{Read as _, Write as _};
    let b64 = &base64::engine::general_purpose::STANDARD;
    let gzipped = b64
        .decode(encoded)
        .map_err(|e| format!("the release record is not base64: {e}"))?;
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(gzipped.as_slice())
        .read_to_end(&mut text)
        .map_err(|e| format!("the release record is not gzip: {e}"))?;
    let mut record: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("the release record is not JSON: {e}"))?;
    record["info"]["status"] = Value::String("deployed".into());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(record.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    Ok(b64
        .encode(gz.finish().map_err(|e| e.to_string())?)
        .into_bytes())
}

/// md5 over every rendered file (name and content, sorted by name), chart hooks included.
pub fn rendered_checksum(files: &BTreeMap<String, String>) -> String {
    let mut ctx = md5::Md5::default();
    use md5::Digest;
    for (name, content) in files {
        ctx.update(name.as_bytes());
        ctx.update([0u8]);
        ctx.update(content.as_bytes());
        ctx.update([0u8]);
    }
    format!("{:x}", ctx.finalize())
}

/// Adds what Helm sets on every object it installs (the release's ownership label and
/// annotations), so a rendered object compares with what Helm applies.
pub fn helm_owned(obj: &mut Value, release: &str, namespace: &str) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut set = |field: &str, key: &str, value: &str| {
        let map = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Default::default()));
        if !map.is_object() {
            *map = Value::Object(Default::default());
        }
        if let Some(m) = map.as_object_mut() {
            m.insert(key.to_string(), Value::String(value.to_string()));
        }
    };
    set("labels", "app.kubernetes.io/managed-by", "Helm");
    set("annotations", "meta.helm.sh/release-name", release);
    set("annotations", "meta.helm.sh/release-namespace", namespace);
}

/// The objects of the rendered files, without chart hooks and empty documents.
pub fn rendered_objects(files: &BTreeMap<String, String>) -> Result<Vec<Value>, String> {
    let mut objects = Vec::new();
    for (name, content) in files {
        if !(name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json")) {
            continue;
        }
        let docs: Vec<Value> = serde_saphyr::from_multiple(content)
            .map_err(|e| format!("{name}: rendered YAML does not parse: {e}"))?;
        for doc in docs {
            if !doc.is_object() || doc["kind"].is_null() {
                continue;
            }
            if doc["metadata"]["annotations"]["helm.sh/hook"].is_string() {
                continue;
            }
            objects.push(doc);
        }
    }
    Ok(objects)
}

/// [`first_difference`] of a rendered object, compared as the API server stores it: a
/// Secret's `stringData` is folded into `data` there, so it is never "missing".
pub fn drift_of(rendered: &Value, live: &Value) -> Option<String> {
    if rendered["kind"] == "Secret" && rendered.get("stringData").is_some() {
        let mut stored = rendered.clone();
        bosun_kube::fold_string_data(&mut stored);
        return first_difference(&stored, live, "");
    }
    first_difference(rendered, live, "")
}

/// The first place where `live` does not carry what `rendered` says (a subset check:
/// fields the server or controllers add are fine).
pub fn first_difference(rendered: &Value, live: &Value, path: &str) -> Option<String> {
    match (rendered, live) {
        (Value::Object(r), Value::Object(l)) => r.iter().find_map(|(k, v)| {
            if path.is_empty() && k == "status" {
                return None;
            }
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match l.get(k) {
                Some(lv) => first_difference(v, lv, &p),
                None if v.is_null() => None,
                None => Some(format!("{p} is missing")),
            }
        }),
        (Value::Array(r), Value::Array(l)) => {
            if r.len() != l.len() {
                return Some(format!(
                    "{path} has {} items, rendered {}",
                    l.len(),
                    r.len()
                ));
            }
            r.iter()
                .zip(l)
                .enumerate()
                .find_map(|(i, (rv, lv))| first_difference(rv, lv, &format!("{path}[{i}]")))
        }
        (Value::Number(r), Value::Number(l)) if r.as_f64() == l.as_f64() => None,
        (r, l) if r == l => None,
        (r, l) => Some(format!("{path} is {l}, rendered {r}")),
    }
}

impl Releases for HelmReleases {
    fn render(
        &self,
        release: String,
        chart: PathBuf,
        values: Value,
    ) -> BoxFut<'_, Result<Rendered, PortError>> {
        Box::pin(async move {
            tracing::debug!(release = %release, "helm render");
            self.chart_is_ours(&release, &chart)?;
            let files = self
                .engine
                .render(&chart, &values, &release, &self.namespace, true)
                .await
                .map_err(helm_failure)?;
            Ok(Rendered {
                checksum: rendered_checksum(&files),
                objects: rendered_objects(&files).map_err(PortError::permanent)?,
            })
        })
    }

    fn status(&self, release: String) -> BoxFut<'_, Result<Option<ReleaseInfo>, PortError>> {
        Box::pin(async move {
            tracing::debug!(release = %release, "helm status");
            let mut latest = if self.absent_at_start(&release).await {
                None
            } else {
                self.latest(&release).await?
            };
            if let Some(r) = &latest
                && self.settle_if_ours(r).await
            {
                latest = self.latest(&release).await?;
            }
            self.recent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(release.clone(), (std::time::Instant::now(), latest.clone()));
            let Some(r) = latest else {
                return Ok(None);
            };
            Ok(Some(ReleaseInfo {
                revision: u32::try_from(r.revision()).unwrap_or(u32::MAX),
                status: r.status(),
                checksum: self.checksum_of(&r).await,
            }))
        })
    }

    fn upgrade(
        &self,
        release: String,
        chart: PathBuf,
        values: Value,
        checksum: String,
    ) -> BoxFut<'_, Result<u32, PortError>> {
        Box::pin(async move {
            self.chart_is_ours(&release, &chart)?;
            // The module's check before the upgrade has just read the status (one module
            // actor per release, so nothing of ours changed the release since).
            let mut latest = match self.take_recent(&release) {
                Some(latest) => latest,
                None => self.latest(&release).await?,
            };
            if let Some(r) = &latest
                && r.status().starts_with("pending")
            {
                if !self.settle_if_ours(r).await {
                    self.recover_pending(r).await?;
                }
                latest = self.latest(&release).await?;
            }
            let mut options = self.options.clone();
            options.labels.insert(CHECKSUM_LABEL.to_string(), checksum);
            let attempt = |exists: bool| {
                let (chart, release, values, options) = (&chart, &release, &values, &options);
                async move {
                    let action = crate::helm::Action::of(exists);
                    self.client
                        .deploy(action, chart, release, values, options)
                        .await
                }
            };
            let started = std::time::Instant::now();
            let mut exists = latest.is_some();
            let result = match attempt(exists).await {
                Ok(r) => Ok(r),
                // Once more at once only when the error may not come back (the API server
                // was unreachable or busy, a write conflicted); a rejected manifest fails
                // the task, which is retried with backoff.
                Err(first) if first.is_transient() => {
                    tracing::warn!(release = %release, "helm upgrade failed, retrying once: {first}");
                    exists = self.latest(&release).await?.is_some();
                    attempt(exists).await
                }
                Err(first) => Err(first),
            };
            let r = result.map_err(helm_failure)?;
            // Helm may have failed to record the revision deployed (it only logs that):
            // checked now, and again at the next status read if the check fails.
            self.unsettled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(release.clone(), r.revision());
            match self.settle_record(&release, r.revision()).await {
                Ok(_) => {
                    self.unsettled
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&release);
                }
                Err(e) => {
                    tracing::warn!(release = %release, "cannot check the release record yet: {e}")
                }
            }
            let revision = u32::try_from(r.revision()).unwrap_or(u32::MAX);
            let took = started.elapsed();
            if exists {
                tracing::info!(release = %release, revision, duration = ?took, "release upgraded");
            } else {
                tracing::info!(release = %release, revision, duration = ?took, "release installed");
            }
            Ok(revision)
        })
    }

    fn uninstall(&self, release: String) -> BoxFut<'_, Result<bool, PortError>> {
        Box::pin(async move {
            let started = std::time::Instant::now();
            match self
                .client
                .uninstall(&release, false, self.options.timeout_seconds)
                .await
            {
                Ok(()) => {
                    tracing::info!(release = %release, duration = ?started.elapsed(), "release uninstalled");
                    Ok(true)
                }
                Err(HelmError::NotFound(_)) => Ok(false),
                Err(e) => Err(helm_failure(e)),
            }
        })
    }

    fn list(&self) -> BoxFut<'_, Result<Vec<String>, PortError>> {
        Box::pin(async move {
            let all = self.client.list_all().await.map_err(helm_failure)?;
            Ok(all.iter().map(|r| r.name().to_string()).collect())
        })
    }

    fn drift(&self, objects: Vec<Value>) -> BoxFut<'_, Result<Vec<String>, PortError>> {
        Box::pin(async move {
            tracing::debug!(objects = objects.len(), "checking rendered objects");
            let mut found = Vec::new();
            for obj in &objects {
                let (api, name, what) = self.api_for(obj).await.map_err(PortError::transient)?;
                match api.get_opt(&name).await {
                    Ok(None) => found.push(format!("{what} is absent")),
                    Ok(Some(live)) => {
                        let live = serde_json::to_value(&live).unwrap_or(Value::Null);
                        if let Some(d) = drift_of(obj, &live) {
                            found.push(format!("{what}: {d}"));
                        }
                    }
                    Err(e) => return Err(port_error(format!("cannot read {what}: {e}"), e)),
                }
            }
            Ok(found)
        })
    }

    fn apply(&self, objects: Vec<Value>) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(async move {
            for obj in objects {
                let (api, name, what) = self.api_for(&obj).await.map_err(PortError::transient)?;
                let params = PatchParams::apply(FIELD_MANAGER).force();
                api.patch(&name, &params, &Patch::Apply(&obj))
                    .await
                    .map_err(|e| port_error(format!("cannot apply {what}: {e}"), e))?;
            }
            Ok(())
        })
    }

    fn preview(
        &self,
        release: String,
        objects: Vec<Value>,
    ) -> BoxFut<'_, Result<Vec<ObjectPreview>, PortError>> {
        Box::pin(async move {
            // Helm's server-side applies use the name of the program Helm runs in: bosun
            // for the library, `helm` for the binary.
            let manager = self.engine.field_manager();
            let mut out = Vec::with_capacity(objects.len());
            for mut obj in objects {
                helm_owned(&mut obj, &release, &self.namespace);
                let (api, name, what, ns) =
                    self.locate(&obj).await.map_err(PortError::transient)?;
                if name.is_empty() {
                    return Err(PortError::permanent(format!(
                        "{what}: the rendered object has no name"
                    )));
                }
                let live = api
                    .get_opt(&name)
                    .await
                    .map_err(|e| port_error(format!("cannot read {what}: {e}"), e))?;
                // As `kubectl diff --server-side --force-conflicts`, as Helm's manager: the
                // server merges (dropping what the chart no longer sets), the dry run writes
                // nothing.
                let params = PatchParams::apply(&manager).force().dry_run();
                let merged = api
                    .patch(&name, &params, &Patch::Apply(&obj))
                    .await
                    .map_err(|e| port_error(format!("dry-run apply of {what} failed: {e}"), e))?;
                let api_version = obj["apiVersion"].as_str().unwrap_or_default();
                let kind = obj["kind"].as_str().unwrap_or_default();
                let id = match ns {
                    Some(ns) => format!("{api_version}/{kind} {ns}/{name}"),
                    None => format!("{api_version}/{kind} {name}"),
                };
                let json = |o: &DynamicObject| {
                    serde_json::to_value(o)
                        .map_err(|e| PortError::permanent(format!("cannot encode {what}: {e}")))
                };
                out.push(ObjectPreview {
                    id,
                    live: live.as_ref().map(json).transpose()?,
                    merged: json(&merged)?,
                });
            }
            Ok(out)
        })
    }
}

/// A Helm failure as a port failure: transient when Helm's error says trying again may
/// succeed, permanent otherwise (the module task is retried with backoff either way).
fn helm_failure(e: HelmError) -> PortError {
    if e.is_transient() {
        PortError::transient(e.to_string())
    } else {
        PortError::permanent(e.to_string())
    }
}

/// [`Releases`] when no module has a chart and no Helm engine is installed: there is
/// nothing to install, and nothing to purge.
pub struct NoHelm(pub String);

impl Releases for NoHelm {
    fn render(
        &self,
        release: String,
        _: PathBuf,
        _: Value,
    ) -> BoxFut<'_, Result<Rendered, PortError>> {
        Box::pin(async move {
            Err(PortError::permanent(format!(
                "cannot render {release}: {}",
                self.0
            )))
        })
    }
    fn status(&self, _: String) -> BoxFut<'_, Result<Option<ReleaseInfo>, PortError>> {
        Box::pin(async { Ok(None) })
    }
    fn upgrade(
        &self,
        release: String,
        _: PathBuf,
        _: Value,
        _: String,
    ) -> BoxFut<'_, Result<u32, PortError>> {
        Box::pin(async move {
            Err(PortError::permanent(format!(
                "cannot install {release}: {}",
                self.0
            )))
        })
    }
    fn uninstall(&self, _: String) -> BoxFut<'_, Result<bool, PortError>> {
        Box::pin(async { Ok(false) })
    }
    fn list(&self) -> BoxFut<'_, Result<Vec<String>, PortError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn drift(&self, _: Vec<Value>) -> BoxFut<'_, Result<Vec<String>, PortError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn apply(&self, _: Vec<Value>) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(async move {
            Err(PortError::permanent(format!(
                "cannot apply CRDs: {}",
                self.0
            )))
        })
    }
    fn preview(
        &self,
        _: String,
        _: Vec<Value>,
    ) -> BoxFut<'_, Result<Vec<ObjectPreview>, PortError>> {
        Box::pin(async move {
            Err(PortError::permanent(format!(
                "cannot compare objects: {}",
                self.0
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pending_release_record_is_rewritten_deployed_and_nothing_else_changes() {
        use base64::Engine as _;
        use std::io::{Read as _, Write as _};
        let record = json!({"name": "alpha", "version": 1, "info": {"status": "pending-install",
            "description": "Initial install underway"}, "manifest": "---\nkind: ConfigMap"});
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(record.to_string().as_bytes()).expect("gzip");
        let b64 = base64::engine::general_purpose::STANDARD;
        let stored = b64.encode(gz.finish().expect("gzip"));
        let settled = deployed_record(stored.as_bytes()).expect("settled");
        let mut text = String::new();
        flate2::read::GzDecoder::new(b64.decode(settled).expect("base64").as_slice())
            .read_to_string(&mut text)
            .expect("gunzip");
        let mut want = record;
        want["info"]["status"] = json!("deployed");
        assert_eq!(serde_json::from_str::<Value>(&text).ok(), Some(want));
        assert!(deployed_record(b"not base64!").is_err_and(|e| e.contains("not base64")));
    }

    #[test]
    fn rendered_objects_get_the_metadata_helm_sets() {
        let mut obj = json!({"kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "1"}, "annotations": null}});
        helm_owned(&mut obj, "demo", "apps");
        assert_eq!(
            obj["metadata"],
            json!({
                "name": "a",
                "labels": {"x": "1", "app.kubernetes.io/managed-by": "Helm"},
                "annotations": {"meta.helm.sh/release-name": "demo", "meta.helm.sh/release-namespace": "apps"},
            })
        );
    }

    #[test]
    fn drift_is_a_subset_check() {
        let rendered = json!({"kind": "Deployment", "metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80}]}});
        let mut live = rendered.clone();
        live["metadata"]["uid"] = json!("u");
        live["metadata"]["labels"]["added"] = json!("by-helm");
        live["status"] = json!({"ready": 1});
        assert_eq!(first_difference(&rendered, &live, ""), None);
        live["spec"]["replicas"] = json!(3);
        assert_eq!(
            first_difference(&rendered, &live, "").as_deref(),
            Some("spec.replicas is 3, rendered 1")
        );
        live["spec"]["replicas"] = json!(1.0);
        assert_eq!(first_difference(&rendered, &live, ""), None);
        live["spec"]["ports"] = json!([]);
        assert!(first_difference(&rendered, &live, "").is_some());
    }

    #[test]
    fn a_secret_s_string_data_is_compared_as_stored() {
        let rendered =
            json!({"kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "hello"}});
        let live = json!({"kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "aGVsbG8="}});
        assert_eq!(drift_of(&rendered, &live), None);
        let edited = json!({"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "Ynll"}});
        assert!(drift_of(&rendered, &edited).is_some());
    }

    #[test]
    fn hooks_count_in_the_checksum_but_not_as_objects() {
        let mut files = BTreeMap::new();
        files.insert(
            "c/templates/cm.yaml".to_string(),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n".to_string(),
        );
        files.insert(
            "c/templates/job.yaml".to_string(),
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\n  annotations:\n    helm.sh/hook: pre-install\n".to_string(),
        );
        files.insert("c/templates/NOTES.txt".to_string(), "hi".to_string());
        let objects = rendered_objects(&files).unwrap();
        assert_eq!(objects.len(), 1);
        let before = rendered_checksum(&files);
        files.insert(
            "c/templates/job.yaml".to_string(),
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j2\n  annotations:\n    helm.sh/hook: pre-install\n".to_string(),
        );
        assert_ne!(
            before,
            rendered_checksum(&files),
            "a changed chart hook upgrades the release"
        );
    }
}
