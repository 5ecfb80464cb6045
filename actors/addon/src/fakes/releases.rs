//! Helm releases as a map: a render's checksum is the md5 of its values, an upgrade bumps
//! the revision. Every operation can fail as Helm's do, a release can be left in any
//! status, and rendered objects can drift (be deleted or edited in the cluster).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::{Faults, lock};
use crate::ports::{BoxFut, ObjectPreview, PortError, ReleaseInfo, Releases, Rendered};

#[derive(Default)]
struct Inner {
    releases: BTreeMap<String, ReleaseInfo>,
    values: BTreeMap<String, Value>,
    objects: BTreeMap<String, Vec<Value>>,
    drifted: BTreeSet<String>,
    rewritten: BTreeSet<String>,
    drift_checks: usize,
    log: Vec<String>,
    faults: Faults,
}

/// Helm releases as a map. Every operation is logged as `upgrade <release>`,
/// `uninstall <release>`, `apply <n> objects`.
#[derive(Clone, Default)]
pub struct MemoryReleases {
    inner: Arc<Mutex<Inner>>,
}

/// `Kind/namespace/name` (`Kind/name` when cluster-scoped), as the resource monitor says.
fn object_id(o: &Value) -> String {
    let m = &o["metadata"];
    let kind = o["kind"].as_str().unwrap_or_default();
    let name = m["name"].as_str().unwrap_or_default();
    match m["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{kind}/{ns}/{name}"),
        _ => format!("{kind}/{name}"),
    }
}

impl MemoryReleases {
    /// Operations so far, in order.
    pub fn log(&self) -> Vec<String> {
        lock(&self.inner).log.clone()
    }

    /// The releases that exist, with their revisions.
    pub fn revisions(&self) -> BTreeMap<String, u32> {
        lock(&self.inner)
            .releases
            .iter()
            .map(|(k, v)| (k.clone(), v.revision))
            .collect()
    }

    /// The values of the last upgrade of `release`.
    pub fn values(&self, release: &str) -> Option<Value> {
        lock(&self.inner).values.get(release).cloned()
    }

    /// A release that exists before bosun starts (deployed, revision 1, no checksum).
    pub fn existing(&self, release: &str) -> &Self {
        lock(&self.inner).releases.insert(
            release.to_string(),
            ReleaseInfo {
                revision: 1,
                status: "deployed".into(),
                checksum: None,
            },
        );
        self
    }

    /// Leaves `release` in `status` (`failed`, `pending-upgrade`, …).
    pub fn set_status(&self, release: &str, status: &str) -> &Self {
        if let Some(info) = lock(&self.inner).releases.get_mut(release) {
            info.status = status.to_string();
        }
        self
    }

    /// The objects `release`'s chart renders.
    pub fn renders(&self, release: &str, objects: Vec<Value>) -> &Self {
        lock(&self.inner)
            .objects
            .insert(release.to_string(), objects);
        self
    }

    /// The rendered object `id` (`Kind/namespace/name`) is gone from the cluster until the
    /// next upgrade of its release puts it back.
    pub fn delete_object(&self, id: &str) -> &Self {
        lock(&self.inner).drifted.insert(id.to_string());
        self
    }

    /// The API server rewrites a field of the rendered object `id` (a default it fills
    /// in): it differs from the render after every upgrade, which cannot change it.
    pub fn rewrite_object(&self, id: &str) -> &Self {
        lock(&self.inner).rewritten.insert(id.to_string());
        self
    }

    /// How many times rendered objects were compared with the cluster.
    pub fn drift_checks(&self) -> usize {
        lock(&self.inner).drift_checks
    }

    /// The next `times` upgrades (installs) of `release` fail with `error`; the release is
    /// left `failed`, as Helm leaves it.
    pub fn fail_upgrades(&self, release: &str, times: u32, error: PortError) -> &Self {
        lock(&self.inner)
            .faults
            .set(&format!("upgrade {release}"), times, error);
        self
    }

    /// The next `times` renders of `release` fail with `error` (a template error).
    pub fn fail_renders(&self, release: &str, times: u32, error: PortError) -> &Self {
        lock(&self.inner)
            .faults
            .set(&format!("render {release}"), times, error);
        self
    }

    /// The next `times` uninstalls of `release` fail with `error`.
    pub fn fail_uninstalls(&self, release: &str, times: u32, error: PortError) -> &Self {
        lock(&self.inner)
            .faults
            .set(&format!("uninstall {release}"), times, error);
        self
    }

    /// The next `times` status reads of `release` fail with `error`.
    pub fn fail_status(&self, release: &str, times: u32, error: PortError) -> &Self {
        lock(&self.inner)
            .faults
            .set(&format!("status {release}"), times, error);
        self
    }

    /// The next `times` release listings fail with `error`.
    pub fn fail_list(&self, times: u32, error: PortError) -> &Self {
        lock(&self.inner).faults.set("list", times, error);
        self
    }

    /// The next `times` CRD applies fail with `error`.
    pub fn fail_apply(&self, times: u32, error: PortError) -> &Self {
        lock(&self.inner).faults.set("apply", times, error);
        self
    }

    fn fault(&self, key: &str) -> Option<PortError> {
        lock(&self.inner).faults.take(key)
    }
}

impl Releases for MemoryReleases {
    fn render(
        &self,
        release: String,
        _chart: PathBuf,
        values: Value,
    ) -> BoxFut<'_, Result<Rendered, PortError>> {
        let result = match self.fault(&format!("render {release}")) {
            Some(e) => Err(e),
            None => Ok(Rendered {
                checksum: crate::values::checksum(&values),
                objects: lock(&self.inner)
                    .objects
                    .get(&release)
                    .cloned()
                    .unwrap_or_default(),
            }),
        };
        Box::pin(async move { result })
    }

    fn status(&self, release: String) -> BoxFut<'_, Result<Option<ReleaseInfo>, PortError>> {
        let result = match self.fault(&format!("status {release}")) {
            Some(e) => Err(e),
            None => Ok(lock(&self.inner).releases.get(&release).cloned()),
        };
        Box::pin(async move { result })
    }

    fn upgrade(
        &self,
        release: String,
        _chart: PathBuf,
        values: Value,
        checksum: String,
    ) -> BoxFut<'_, Result<u32, PortError>> {
        let fault = self.fault(&format!("upgrade {release}"));
        let mut inner = lock(&self.inner);
        inner.log.push(format!("upgrade {release}"));
        let result = match fault {
            Some(e) => {
                let info = inner.releases.entry(release).or_default();
                info.revision += 1;
                info.status = "failed".into();
                Err(e)
            }
            None => {
                let ids: Vec<String> = inner
                    .objects
                    .get(&release)
                    .into_iter()
                    .flatten()
                    .map(object_id)
                    .collect();
                for id in ids {
                    inner.drifted.remove(&id);
                }
                inner.values.insert(release.clone(), values);
                let info = inner.releases.entry(release).or_default();
                info.revision += 1;
                info.status = "deployed".into();
                info.checksum = Some(checksum);
                Ok(info.revision)
            }
        };
        Box::pin(async move { result })
    }

    fn uninstall(&self, release: String) -> BoxFut<'_, Result<bool, PortError>> {
        let fault = self.fault(&format!("uninstall {release}"));
        let mut inner = lock(&self.inner);
        inner.log.push(format!("uninstall {release}"));
        let result = match fault {
            Some(e) => Err(e),
            None => Ok(inner.releases.remove(&release).is_some()),
        };
        Box::pin(async move { result })
    }

    fn list(&self) -> BoxFut<'_, Result<Vec<String>, PortError>> {
        let result = match self.fault("list") {
            Some(e) => Err(e),
            None => Ok(lock(&self.inner).releases.keys().cloned().collect()),
        };
        Box::pin(async move { result })
    }

    fn drift(&self, objects: Vec<Value>) -> BoxFut<'_, Result<Vec<String>, PortError>> {
        let (drifted, rewritten) = {
            let mut inner = lock(&self.inner);
            inner.drift_checks += 1;
            (inner.drifted.clone(), inner.rewritten.clone())
        };
        let found = objects
            .iter()
            .map(object_id)
            .filter_map(|id| {
                if drifted.contains(&id) {
                    Some(format!("{id} is absent"))
                } else if rewritten.contains(&id) {
                    Some(format!("{id}: field spec.template differs"))
                } else {
                    None
                }
            })
            .collect();
        Box::pin(async move { Ok(found) })
    }

    fn apply(&self, objects: Vec<Value>) -> BoxFut<'_, Result<(), PortError>> {
        let fault = self.fault("apply");
        let mut inner = lock(&self.inner);
        inner.log.push(format!("apply {} objects", objects.len()));
        let result = match fault {
            Some(e) => Err(e),
            None => Ok(()),
        };
        Box::pin(async move { result })
    }

    fn preview(
        &self,
        _release: String,
        _objects: Vec<Value>,
    ) -> BoxFut<'_, Result<Vec<ObjectPreview>, PortError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}
