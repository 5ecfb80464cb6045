//! The small traits through which actors reach the outside world; `src/` implements them
//! with the journal, real hook processes and a Kubernetes client.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::events::Event;

pub use bosun_runtime::ports::{BoxFut, EventSink, MemoryJournal, PortError};

/// The journal as the addon's actors write to it.
pub type Journal = std::sync::Arc<dyn EventSink<Event>>;

/// Every port the addon's actors reach the world through, handed around as one value.
#[derive(Clone)]
pub struct Ports {
    /// The journal.
    pub journal: Journal,
    /// Hook processes.
    pub executor: std::sync::Arc<dyn HookExecutor>,
    /// The operator's ConfigMap.
    pub config_store: std::sync::Arc<dyn ConfigStore>,
    /// Helm releases.
    pub releases: std::sync::Arc<dyn Releases>,
    /// Kubernetes bindings.
    pub bindings: std::sync::Arc<dyn KubeBindings>,
    /// The hooks' object patcher operations.
    pub patcher: std::sync::Arc<dyn ObjectPatcher>,
}

/// One hook run.
#[derive(Clone, Debug)]
pub struct HookRun {
    /// Hook name.
    pub name: String,
    /// Executable.
    pub path: PathBuf,
    /// The binding context array.
    pub binding_context: Value,
    /// `VALUES_PATH` content.
    pub values: Value,
    /// `CONFIG_VALUES_PATH` content.
    pub config_values: Value,
    /// Where the run comes from, for the log lines of its output.
    pub log_fields: LogFields,
}

/// The fields a hook's output lines are logged with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogFields {
    /// The module, for module hooks and `enabled` scripts.
    pub module: Option<String>,
    /// The binding that triggered the run.
    pub binding: Option<String>,
    /// The queue it runs in.
    pub queue: Option<String>,
}

/// What a successful hook run wrote.
#[derive(Clone, Debug, Default)]
pub struct HookResult {
    /// `VALUES_JSON_PATCH_PATH` content.
    pub values_patch: String,
    /// `CONFIG_VALUES_JSON_PATCH_PATH` content.
    pub config_values_patch: String,
    /// `METRICS_PATH` content.
    pub metrics: String,
    /// `KUBERNETES_PATCH_PATH` content.
    pub kubernetes_patch: String,
    /// How long it ran.
    pub duration: Duration,
    /// CPU time and peak memory of the hook process (and the children it waited for).
    pub usage: Option<ResourceUsage>,
}

/// Resources a finished process used (its `rusage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceUsage {
    /// User CPU time.
    pub user_cpu: Duration,
    /// System CPU time.
    pub sys_cpu: Duration,
    /// Peak resident set size, in bytes.
    pub max_rss_bytes: u64,
}

/// Runs hook executables.
pub trait HookExecutor: Send + Sync + 'static {
    /// `hook --config`: its stdout.
    fn config(&self, name: &str, path: &std::path::Path) -> BoxFut<'_, Result<String, PortError>>;
    /// A run with the file contract. The run starts when this is called (its input files
    /// written, its process started), not when the future is first polled: a caller that
    /// hands the future to a task of its own starts the hook without waiting for that task
    /// to be scheduled. The future borrows nothing; it waits for the end and reads the output
    /// (and reports a run that could not start).
    fn run(&self, run: HookRun) -> BoxFut<'static, Result<HookResult, PortError>>;
    /// A module's `enabled` script: what it wrote to `MODULE_ENABLED_RESULT`.
    fn enabled(&self, run: EnabledRun) -> BoxFut<'_, Result<bool, PortError>>;
}

/// A ConfigMap's `data`: each key's text.
pub(crate) type ConfigMapData = BTreeMap<String, String>;

/// The operator's ConfigMap (`ADDON_OPERATOR_CONFIG_MAP`).
pub trait ConfigStore: Send + Sync + 'static {
    /// Its `data`, or `None` when it does not exist.
    fn load(&self) -> BoxFut<'_, Result<Option<ConfigMapData>, PortError>>;
    /// Writes one key (`global`, a module key) as YAML text, creating the ConfigMap if needed.
    fn save(&self, key: String, yaml: String) -> BoxFut<'_, Result<(), PortError>>;
    /// Removes one key (a `<module>Enabled` flag); nothing to do when it is absent.
    fn remove(&self, key: String) -> BoxFut<'_, Result<(), PortError>>;
}

/// A module's `enabled` script run.
#[derive(Clone, Debug)]
pub struct EnabledRun {
    /// Module name (for logs and errors).
    pub module: String,
    /// The script.
    pub path: PathBuf,
    /// `VALUES_PATH` content (with `global.enabledModules`).
    pub values: Value,
    /// `CONFIG_VALUES_PATH` content.
    pub config_values: Value,
}

/// A chart rendered with a module's values.
#[derive(Clone, Debug, Default)]
pub struct Rendered {
    /// md5 of every rendered file, chart hooks included (they are part of what the
    /// module deploys, so a change in them must upgrade the release).
    pub checksum: String,
    /// The rendered objects (chart hooks excluded), as the auto-healing monitor checks them.
    pub objects: Vec<Value>,
}

/// A rendered object as it is in the cluster and as the server would have it after applying
/// the rendered one (`module render --diff`).
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectPreview {
    /// `apiVersion/kind namespace/name` (`apiVersion/kind name` when cluster-scoped).
    pub id: String,
    /// The object in the cluster; `None` when it does not exist.
    pub live: Option<Value>,
    /// The server's answer to a dry-run server-side apply of the rendered object.
    pub merged: Value,
}

/// The latest revision of a release.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseInfo {
    /// Revision number.
    pub revision: u32,
    /// `deployed`, `failed`, `pending-upgrade`, …
    pub status: String,
    /// The `moduleChecksum` label, if recorded.
    pub checksum: Option<String>,
}

/// Helm releases and the objects they own, in `ADDON_OPERATOR_NAMESPACE`.
pub trait Releases: Send + Sync + 'static {
    /// Renders `chart` as an upgrade of `release` with `values`.
    fn render(
        &self,
        release: String,
        chart: PathBuf,
        values: Value,
    ) -> BoxFut<'_, Result<Rendered, PortError>>;
    /// The latest revision, or `None` when there is no release.
    fn status(&self, release: String) -> BoxFut<'_, Result<Option<ReleaseInfo>, PortError>>;
    /// Installs or upgrades (recovering a release stuck in `pending-*` first) and records
    /// `checksum` on the release; returns the new revision.
    fn upgrade(
        &self,
        release: String,
        chart: PathBuf,
        values: Value,
        checksum: String,
    ) -> BoxFut<'_, Result<u32, PortError>>;
    /// Uninstalls; `false` when there was no release.
    fn uninstall(&self, release: String) -> BoxFut<'_, Result<bool, PortError>>;
    /// Names of every release in the namespace, in any state.
    fn list(&self) -> BoxFut<'_, Result<Vec<String>, PortError>>;
    /// Rendered objects that are absent from the cluster or differ from what was rendered,
    /// one readable line each (`Deployment/ns/name is absent`, `… field spec.replicas …`).
    fn drift(&self, objects: Vec<Value>) -> BoxFut<'_, Result<Vec<String>, PortError>>;
    /// Applies objects (a module's CRDs) with server-side apply.
    fn apply(&self, objects: Vec<Value>) -> BoxFut<'_, Result<(), PortError>>;
    /// Each rendered object of `release` as it is live and as the release's next upgrade
    /// would leave it: a forced server-side apply as Helm sends it, run dry (nothing is
    /// written).
    fn preview(
        &self,
        release: String,
        objects: Vec<Value>,
    ) -> BoxFut<'_, Result<Vec<ObjectPreview>, PortError>>;
}

/// Executes the object patcher operations a hook wrote to `KUBERNETES_PATCH_PATH`
/// (a JSON stream of operations, or multi-document YAML).
pub trait ObjectPatcher: Send + Sync + 'static {
    /// Runs every operation in order; any failure (parse, validation, API) fails the whole
    /// call with a message naming the operation's index, kind and name.
    fn apply(&self, hook: String, text: String) -> BoxFut<'_, Result<(), PortError>>;
}

pub use crate::bindings::BindingEvents;

/// Kubernetes bindings: shared watches, jq filters and the snapshots hooks receive.
pub trait KubeBindings: Send + Sync + 'static {
    /// Starts the watches of a hook's kubernetes bindings (replacing earlier ones of the
    /// same hook); resolves once every binding holds its initial objects. Events are held
    /// back until [`KubeBindings::release`] (the binding's Synchronization ran).
    fn start(
        &self,
        hook: crate::bindings::HookRef,
        bindings: Vec<crate::hook_config::KubernetesBinding>,
        events: BindingEvents,
    ) -> BoxFut<'_, Result<(), PortError>>;
    /// Delivers the events held back for binding `index` and every later one.
    fn release(&self, hook: &crate::bindings::HookRef, index: usize);
    /// The current snapshot of binding `index`: `[{object?, filterResult?}]` sorted by
    /// namespace, then name; empty for a binding that is not started.
    fn snapshot(&self, hook: &crate::bindings::HookRef, index: usize) -> Vec<Value>;
    /// Stops every binding of an owner (`global`, `module/<name>`).
    fn stop_owner(&self, owner: &str);
    /// Checks a `jqFilter` program when a hook's configuration is loaded.
    fn check_filter(&self, _program: &str) -> Result<(), crate::hook_config::InvalidFilter> {
        Ok(())
    }
    /// Every snapshot of an owner's hooks: `{hook: {binding: [{object?, filterResult?}]}}`.
    fn snapshots(&self, _owner: &str) -> Value {
        Value::Object(Default::default())
    }
}

/// Stands in for Kubernetes where there is none (benchmarks, hooks-only tools): bindings
/// and object patches fail with `why`.
#[derive(Clone, Debug)]
pub struct NoKubernetes(pub String);

impl KubeBindings for NoKubernetes {
    fn start(
        &self,
        _hook: crate::bindings::HookRef,
        _bindings: Vec<crate::hook_config::KubernetesBinding>,
        _events: BindingEvents,
    ) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(async move { Err(PortError::permanent(self.0.clone())) })
    }
    fn release(&self, _hook: &crate::bindings::HookRef, _index: usize) {}
    fn snapshot(&self, _hook: &crate::bindings::HookRef, _index: usize) -> Vec<Value> {
        Vec::new()
    }
    fn stop_owner(&self, _owner: &str) {}
}

impl ObjectPatcher for NoKubernetes {
    fn apply(&self, _hook: String, _text: String) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(async move { Err(PortError::permanent(self.0.clone())) })
    }
}
