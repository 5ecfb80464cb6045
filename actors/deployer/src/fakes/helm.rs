//! Charts and Helm releases ([`HelmPort`]) in memory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};

use super::targets::{MemoryTargets, ObjectKey, target_key};
use crate::helm::{Chart, ChartAccess, ChartSource, HelmPort, HelmRun, MAX_HISTORY, ReleaseState};
use crate::item::ItemKey;
use crate::ports::BoxFut;
use crate::status::DeployError;
use crate::target::ResolvedTarget;

/// What [`MemoryHelm`] was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub enum HelmCall {
    /// A render (`helmDeployment: false`).
    Render {
        namespace: String,
        release: String,
        values: Value,
    },
    /// An install of a new release.
    Install {
        target: ItemKey,
        namespace: String,
        release: String,
        values: Value,
    },
    /// An upgrade of an existing release.
    Upgrade {
        target: ItemKey,
        namespace: String,
        release: String,
        values: Value,
    },
    /// An uninstall (of a release that may not exist).
    Uninstall {
        target: ItemKey,
        namespace: String,
        release: String,
    },
    /// Pending revisions removed.
    Unblock {
        target: ItemKey,
        namespace: String,
        release: String,
        removed: usize,
    },
}

/// A release: its Target, namespace and name.
type ReleaseKey = (ItemKey, String, String);

struct HelmInner {
    chart_metadata: Value,
    default_values: Value,
    /// The objects a release's chart renders to, by release name.
    rendered: BTreeMap<String, Vec<Value>>,
    /// Each release's revisions, oldest first (at most [`MAX_HISTORY`]).
    releases: BTreeMap<ReleaseKey, Vec<ReleaseState>>,
    /// The objects each release wrote into its target (with [`MemoryHelm::applying_to`]).
    owned: BTreeMap<ReleaseKey, Vec<ObjectKey>>,
    /// Installs and upgrades fail with this message.
    failing: Option<String>,
    /// Uninstalls fail with this message.
    failing_uninstalls: Option<String>,
    /// Chart downloads fail with this message.
    failing_pulls: Option<String>,
    /// Renders fail with this message.
    failing_renders: Option<String>,
    charts: Vec<ChartSource>,
    calls: Vec<HelmCall>,
}

impl Default for HelmInner {
    fn default() -> Self {
        HelmInner {
            chart_metadata: json!({"name": "chart", "version": "0.1.0", "appVersion": "1.0.0"}),
            default_values: json!({}),
            rendered: BTreeMap::new(),
            releases: BTreeMap::new(),
            owned: BTreeMap::new(),
            failing: None,
            failing_uninstalls: None,
            failing_pulls: None,
            failing_renders: None,
            charts: Vec::new(),
            calls: Vec::new(),
        }
    }
}

/// Charts and Helm releases in memory: every chart source gives the chart the test set
/// ([`MemoryHelm::set_chart`]), rendering gives the objects the test set for the release
/// ([`MemoryHelm::set_rendered`]), and releases keep their revisions (`deployed`,
/// `superseded`, `failed`, pending ones) per Target, namespace and name as Helm does.
/// With [`MemoryHelm::applying_to`] a release's objects are also written into (and
/// removed from) the target clusters. Every call is recorded ([`HelmCall`]). Clones share
/// it.
#[derive(Clone, Default)]
pub struct MemoryHelm {
    inner: Arc<Mutex<HelmInner>>,
    targets: Option<MemoryTargets>,
}

/// A release's manifest: its objects as YAML documents (JSON is YAML).
fn manifest_text(objects: &[Value]) -> String {
    objects.iter().map(|o| format!("---\n{o}\n")).collect()
}

fn hex_md5(bytes: &[u8]) -> String {
    use md5::Digest as _;
    md5::Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl MemoryHelm {
    fn lock(&self) -> MutexGuard<'_, HelmInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases whose objects are written into `targets`, as real releases are.
    pub fn applying_to(targets: &MemoryTargets) -> MemoryHelm {
        MemoryHelm {
            inner: Arc::default(),
            targets: Some(targets.clone()),
        }
    }

    /// The chart every source gives: `Chart.yaml` and `values.yaml`.
    pub fn set_chart(&self, metadata: Value, default_values: Value) {
        let mut st = self.lock();
        st.chart_metadata = metadata;
        st.default_values = default_values;
    }

    /// The objects the chart renders to for `release` (none until set).
    pub fn set_rendered(&self, release: &str, objects: Vec<Value>) {
        self.lock().rendered.insert(release.to_string(), objects);
    }

    /// Installs and upgrades fail with `message` (leaving a `failed` revision), until
    /// called with `None`.
    pub fn fail_deploys(&self, message: Option<&str>) {
        self.lock().failing = message.map(str::to_string);
    }

    /// Uninstalls fail with `message` (the release stays), until called with `None`.
    pub fn fail_uninstalls(&self, message: Option<&str>) {
        self.lock().failing_uninstalls = message.map(str::to_string);
    }

    /// Chart downloads (a repository, a registry, a component) fail with `message`, as
    /// the real port's `FetchChart` errors (retried), until called with `None`.
    pub fn fail_pulls(&self, message: Option<&str>) {
        self.lock().failing_pulls = message.map(str::to_string);
    }

    /// Renders fail with `message`, as a template error (`InvalidChart`, a configuration
    /// problem), until called with `None`.
    pub fn fail_renders(&self, message: Option<&str>) {
        self.lock().failing_renders = message.map(str::to_string);
    }

    /// Adds a revision to a release as another Helm client would (a pending one left by a
    /// crash, …).
    pub fn put_release(&self, target: &ItemKey, name: &str, state: ReleaseState) {
        let key = (target.clone(), state.namespace.clone(), name.to_string());
        self.lock().releases.entry(key).or_default().push(state);
    }

    /// The release's last revision.
    pub fn release_state(
        &self,
        target: &ItemKey,
        namespace: &str,
        name: &str,
    ) -> Option<ReleaseState> {
        self.history(target, namespace, name).pop()
    }

    /// The release's revisions, oldest first.
    pub fn history(&self, target: &ItemKey, namespace: &str, name: &str) -> Vec<ReleaseState> {
        let key = (target.clone(), namespace.to_string(), name.to_string());
        self.lock().releases.get(&key).cloned().unwrap_or_default()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<HelmCall> {
        self.lock().calls.clone()
    }

    /// The chart sources fetched so far, in order.
    pub fn charts(&self) -> Vec<ChartSource> {
        self.lock().charts.clone()
    }
}

impl HelmPort for MemoryHelm {
    fn chart<'a>(
        &'a self,
        source: &'a ChartSource,
        _access: &'a ChartAccess,
    ) -> BoxFut<'a, Result<Arc<Chart>, DeployError>> {
        let mut st = self.lock();
        st.charts.push(source.clone());
        if let Some(m) = st.failing_pulls.clone()
            && !matches!(source, ChartSource::Archive(_))
        {
            let e = DeployError::new(
                "Reconcile",
                "FetchChart",
                format!("spec.config.chart {source:?}: {m}"),
                &[],
            );
            return Box::pin(async move { Err(e) });
        }
        let (archive, digest) = match source {
            ChartSource::Archive(bytes) => (bytes.clone(), hex_md5(bytes)),
            other => (Arc::default(), hex_md5(format!("{other:?}").as_bytes())),
        };
        let chart = Chart {
            archive,
            digest,
            metadata: st.chart_metadata.clone(),
            default_values: st.default_values.clone(),
        };
        Box::pin(async move { Ok(Arc::new(chart)) })
    }

    fn render<'a>(&'a self, run: HelmRun<'a>) -> BoxFut<'a, Result<Vec<Value>, DeployError>> {
        let mut st = self.lock();
        st.calls.push(HelmCall::Render {
            namespace: run.namespace.to_string(),
            release: run.release.to_string(),
            values: run.values.clone(),
        });
        if let Some(m) = st.failing_renders.clone() {
            let e = DeployError::config(
                "Reconcile",
                "InvalidChart",
                format!("spec.config.chart: rendering release {}: {m}", run.release),
            );
            return Box::pin(async move { Err(e) });
        }
        let objects = st.rendered.get(run.release).cloned().unwrap_or_default();
        Box::pin(async move { Ok(objects) })
    }

    fn release<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<Option<ReleaseState>, DeployError>> {
        let found = self.release_state(&target_key(target), namespace, name);
        Box::pin(async move { Ok(found) })
    }

    fn deploy<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        run: HelmRun<'a>,
        upgrade: bool,
    ) -> BoxFut<'a, Result<ReleaseState, DeployError>> {
        Box::pin(async move {
            let tk = target_key(target);
            let key = (
                tk.clone(),
                run.namespace.to_string(),
                run.release.to_string(),
            );
            let action = if upgrade { "upgrade" } else { "install" };
            let fail = |m: &str| {
                DeployError::new(
                    "Reconcile",
                    "Helm",
                    format!(
                        "{}: {action} of release {}: {m}",
                        target.target.describe(),
                        run.release
                    ),
                    &[],
                )
            };
            let (state, objects, before) = {
                let mut st = self.lock();
                let (target, namespace, release, values) = (
                    tk.clone(),
                    run.namespace.to_string(),
                    run.release.to_string(),
                    run.values.clone(),
                );
                st.calls.push(if upgrade {
                    HelmCall::Upgrade {
                        target,
                        namespace,
                        release,
                        values,
                    }
                } else {
                    HelmCall::Install {
                        target,
                        namespace,
                        release,
                        values,
                    }
                });
                let history = st.releases.get(&key).cloned().unwrap_or_default();
                let last = history.last();
                if last.is_some_and(|l| l.status.starts_with("pending-")) {
                    return Err(fail(
                        "another operation (install/upgrade/rollback) is in progress",
                    ));
                }
                // Helm 3 upgrades a release with no deployed revision when its last one
                // failed or was superseded (`prepareUpgrade`), and refuses others.
                let upgradable = history.iter().any(|r| r.status == "deployed")
                    || last.is_some_and(|l| l.status == "failed" || l.status == "superseded");
                if !upgrade && last.is_some() {
                    return Err(fail("cannot re-use a name that is still in use"));
                }
                if upgrade && !upgradable {
                    return Err(fail("has no deployed releases"));
                }
                let objects = st.rendered.get(run.release).cloned().unwrap_or_default();
                let failing = st.failing.clone();
                let state = ReleaseState {
                    namespace: run.namespace.to_string(),
                    revision: last.map_or(1, |l| l.revision + 1),
                    status: if failing.is_some() {
                        "failed"
                    } else {
                        "deployed"
                    }
                    .to_string(),
                    manifest: manifest_text(&objects),
                };
                let revisions = st.releases.entry(key.clone()).or_default();
                if failing.is_none() {
                    for r in revisions.iter_mut().filter(|r| r.status == "deployed") {
                        r.status = "superseded".to_string();
                    }
                }
                revisions.push(state.clone());
                let extra = revisions.len().saturating_sub(MAX_HISTORY as usize);
                revisions.drain(..extra);
                if let Some(m) = failing {
                    return Err(fail(&m));
                }
                let before = st.owned.get(&key).cloned().unwrap_or_default();
                (state, objects, before)
            };
            if let Some(targets) = &self.targets {
                let now = targets.apply_release(
                    &tk,
                    run.namespace,
                    run.create_namespace,
                    &objects,
                    &before,
                );
                self.lock().owned.insert(key, now);
            }
            Ok(state)
        })
    }

    fn uninstall<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
        _wait: bool,
        _timeout: Option<Duration>,
    ) -> BoxFut<'a, Result<(), DeployError>> {
        let tk = target_key(target);
        let key = (tk.clone(), namespace.to_string(), name.to_string());
        let owned = {
            let mut st = self.lock();
            st.calls.push(HelmCall::Uninstall {
                target: tk.clone(),
                namespace: namespace.to_string(),
                release: name.to_string(),
            });
            if let Some(m) = st.failing_uninstalls.clone() {
                let e = DeployError::new(
                    "Reconcile",
                    "Helm",
                    format!(
                        "{}: uninstall of release {name}: {m}",
                        target.target.describe()
                    ),
                    &[],
                );
                return Box::pin(async move { Err(e) });
            }
            // A missing release is success.
            st.releases.remove(&key);
            st.owned.remove(&key).unwrap_or_default()
        };
        if let Some(targets) = &self.targets {
            targets.remove_release(&tk, &owned);
        }
        Box::pin(async { Ok(()) })
    }

    fn unblock<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<usize, DeployError>> {
        let tk = target_key(target);
        let key = (tk.clone(), namespace.to_string(), name.to_string());
        let mut st = self.lock();
        let mut removed = 0;
        if let Some(revisions) = st.releases.get_mut(&key) {
            let before = revisions.len();
            revisions.retain(|r| !r.status.starts_with("pending-"));
            removed = before - revisions.len();
            if revisions.is_empty() {
                st.releases.remove(&key);
            }
        }
        st.calls.push(HelmCall::Unblock {
            target: tk,
            namespace: namespace.to_string(),
            release: name.to_string(),
            removed,
        });
        Box::pin(async move { Ok(removed) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "a"}})
    }

    #[test]
    fn a_release_manifest_is_read_as_helm_s() {
        let deployment =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let objects = crate::helm::release_objects(&manifest_text(&[cm("x"), deployment]), "apps");
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].to_string(), "Deployment apps/web");
    }
}
