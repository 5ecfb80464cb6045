//! Real Helm (v4), through one of two engines behind one interface ([`HelmEngine`]):
//!
//! ```text
//!   HelmEngine ─┬─ Library: libhelm_c.so (Helm built as a C shared library, from the
//!               │           helm-python-sdk wheel) loaded in-process (ffi.rs)
//!               └─ Cli:     the `helm` binary (HELM_BIN_PATH), one process per call (cli.rs)
//! ```
//!
//! `scripts/setup-helm.sh` puts both in `.tools/helm/`. Which one runs is decided once at
//! start (engine.rs). Library calls run on a blocking thread (`spawn_blocking`); the
//! library is thread safe for different releases, and callers serialize writes per
//! release (one module actor per release).

pub mod cli;
mod engine;
mod ffi;

pub use cli::{CliClient, HelmCli};
pub use engine::{EngineChoice, EngineSettings, HelmEngine, ReleaseClient};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

/// A Helm failure, with Helm's own message.
#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    /// The library could not be found or loaded.
    #[error(
        "Helm library {path}: {message} (run scripts/setup-helm.sh, or set BOSUN_HELM_LIBRARY)"
    )]
    Library {
        /// The path tried.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// No library in any of the places searched.
    #[error(
        "Helm library libhelm_c.so not found; searched: {searched} (run scripts/setup-helm.sh, or set BOSUN_HELM_LIBRARY)"
    )]
    NotInstalled {
        /// Paths searched.
        searched: String,
    },
    /// The release (or revision) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A Helm action failed.
    #[error("helm {action} failed: {message}")]
    Helm {
        /// `install`, `upgrade`, `render`, …
        action: String,
        /// `helm_error_code`.
        code: i32,
        /// Helm's message.
        message: String,
    },
    /// Arguments that cannot be passed to the library.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The library returned something that is not the expected JSON.
    #[error("unexpected output from helm {action}: {message}")]
    Output {
        /// The action.
        action: String,
        /// What was wrong.
        message: String,
    },
    /// The blocking task was cancelled.
    #[error("helm call interrupted")]
    Interrupted,
    /// The `helm` binary could not be found or started.
    #[error("helm binary {path}: {message} (set HELM_BIN_PATH, or run scripts/setup-helm.sh)")]
    Binary {
        /// The path tried.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The `helm` binary failed.
    #[error("{}`{command}` failed ({status}): {stderr}", of_release(release))]
    Command {
        /// The release.
        release: String,
        /// The command line.
        command: String,
        /// `exit N`, or killed by a signal.
        status: String,
        /// Helm's message (its stderr, on one line).
        stderr: String,
    },
    /// The `helm` binary ran past its deadline and was killed (with its process group).
    #[error(
        "{}`{command}` did not finish within {after:?} and was killed",
        of_release(release)
    )]
    TimedOut {
        /// The release.
        release: String,
        /// The command line.
        command: String,
        /// The deadline.
        after: std::time::Duration,
    },
    /// No engine could be found.
    #[error(
        "no Helm engine: {0} (run scripts/setup-helm.sh, or set HELM_BIN_PATH or HELM_LIB_PATH)"
    )]
    NoEngine(String),
}

/// `release NAME: `, the start of a binary's error about one release.
fn of_release(release: &str) -> String {
    if release.is_empty() {
        String::new()
    } else {
        format!("release {release}: ")
    }
}

impl HelmError {
    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            HelmError::Library { .. } | HelmError::NotInstalled { .. } => "library",
            HelmError::Binary { .. } => "binary",
            HelmError::NoEngine(_) => "no_engine",
            HelmError::NotFound(_) => "not_found",
            HelmError::Helm { .. } | HelmError::Command { .. } => "helm",
            HelmError::TimedOut { .. } => "timeout",
            HelmError::InvalidInput(_) => "input",
            HelmError::Output { .. } => "output",
            HelmError::Interrupted => "interrupted",
        }
    }

    /// Whether trying the same action again at once may succeed: the API server was
    /// unreachable, slow or overloaded (connection refused or reset, timeouts, 5xx, 429),
    /// or a write conflicted with another. A rejected manifest, an unknown API version, a
    /// template error or a missing library fail the same way every time.
    pub fn is_transient(&self) -> bool {
        match self {
            HelmError::Helm { message, .. } => transient_message(message),
            HelmError::Command { stderr, .. } => transient_message(stderr),
            // As a Helm "timed out" message: the API server was too slow this time.
            HelmError::TimedOut { .. } => true,
            HelmError::Library { .. }
            | HelmError::Binary { .. }
            | HelmError::NoEngine(_)
            | HelmError::NotInstalled { .. }
            | HelmError::NotFound(_)
            | HelmError::InvalidInput(_)
            | HelmError::Output { .. }
            | HelmError::Interrupted => false,
        }
    }
}

/// Helm's message of a failure that another attempt may not meet (see
/// [`HelmError::is_transient`]).
fn transient_message(message: &str) -> bool {
    const TRANSIENT: &[&str] = &[
        "connection refused",
        "connection reset",
        "broken pipe",
        "no route to host",
        "i/o timeout",
        "timed out",
        "timeout",
        "deadline exceeded",
        "unexpected eof",
        "server sent goaway",
        // Go's HTTP/2 client when the server resets a stream (an API server shutting down:
        // `stream error: stream ID 3; INTERNAL_ERROR; received from peer`).
        "stream error",
        "internal_error",
        "cluster unreachable",
        "too many requests",
        "the server is currently unable to handle the request",
        "internal error",
        "service unavailable",
        "bad gateway",
        "internal server error",
        // client-go's words for a 5xx without a Status body.
        "has prevented the request from succeeding",
        "the object has been modified",
        "conflict",
        "another operation (install/upgrade/rollback) is in progress",
    ];
    let lower = message.to_ascii_lowercase();
    TRANSIENT.iter().any(|t| lower.contains(t))
}

/// Where to look for the library: `BOSUN_HELM_LIBRARY`, then `.tools/helm/libhelm_c.so`
/// in the current directory and in the ancestors of the executable.
fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(p) = std::env::var("BOSUN_HELM_LIBRARY") {
        out.push(PathBuf::from(p));
    }
    if let Ok(dir) = std::env::var("BOSUN_TOOLS_DIR") {
        out.push(Path::new(&dir).join("helm/libhelm_c.so"));
    }
    if let Ok(cwd) = std::env::current_dir() {
        out.push(cwd.join(".tools/helm/libhelm_c.so"));
    }
    if let Ok(exe) = std::env::current_exe() {
        out.extend(
            exe.ancestors()
                .skip(1)
                .map(|d| d.join(".tools/helm/libhelm_c.so")),
        );
    }
    out.push(PathBuf::from("/usr/local/lib/libhelm_c.so"));
    out
}

/// The loaded Helm library.
#[derive(Clone)]
pub struct HelmLibrary {
    ffi: Arc<ffi::Ffi>,
    path: PathBuf,
}

impl std::fmt::Debug for HelmLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelmLibrary")
            .field("path", &self.path)
            .finish()
    }
}

/// How to reach the cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterOptions {
    /// Kubeconfig file (default resolution: `KUBECONFIG`, `~/.kube/config`, in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// Context within the kubeconfig.
    pub context: Option<String>,
    /// Namespace of releases.
    pub namespace: String,
    /// Requests per second of Helm's Kubernetes client (client-go's default of 5 makes
    /// every install wait on its rate limiter; bosun defaults to [`HELM_QPS`]).
    pub qps: Option<f32>,
    /// Burst of Helm's Kubernetes client.
    pub burst: Option<u32>,
}

/// Default requests per second of Helm's Kubernetes client.
pub const HELM_QPS: f32 = 100.0;
/// Default burst of Helm's Kubernetes client.
pub const HELM_BURST: u32 = 200;

/// A release as the library reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Release(pub Value);

impl Release {
    /// Revision number (`helm list -o json` prints it as a string).
    pub fn revision(&self) -> u64 {
        ["version", "revision"]
            .iter()
            .find_map(|k| match &self.0[*k] {
                Value::Number(n) => n.as_u64(),
                Value::String(s) => s.parse().ok(),
                _ => None,
            })
            .unwrap_or(0)
    }
    /// Status (`deployed`, `failed`, `pending-upgrade`, …).
    pub fn status(&self) -> String {
        self.0["status"]
            .as_str()
            .or_else(|| self.0["info"]["status"].as_str())
            .unwrap_or_default()
            .to_string()
    }
    /// The rendered manifest.
    pub fn manifest(&self) -> &str {
        self.0["manifest"].as_str().unwrap_or_default()
    }
    /// Release name.
    pub fn name(&self) -> &str {
        self.0["name"].as_str().unwrap_or_default()
    }
}

fn parse(action: &str, text: &str) -> Result<Value, HelmError> {
    serde_json::from_str(text).map_err(|e| HelmError::Output {
        action: action.into(),
        message: format!("{e}: {text}"),
    })
}

impl HelmLibrary {
    /// Loads the library from `path`, or from the usual places.
    pub fn load(path: Option<&Path>) -> Result<HelmLibrary, HelmError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => {
                let all = candidates();
                match all.iter().find(|p| p.is_file()) {
                    Some(p) => p.clone(),
                    None => {
                        let searched = all
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ");
                        return Err(HelmError::NotInstalled { searched });
                    }
                }
            }
        };
        Ok(HelmLibrary {
            ffi: Arc::new(ffi::Ffi::load(&path)?),
            path,
        })
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The library's version.
    pub fn version(&self) -> String {
        self.ffi.version()
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ffi::Ffi) -> Result<T, HelmError> + Send + 'static,
    ) -> Result<T, HelmError> {
        let ffi = self.ffi.clone();
        tokio::task::spawn_blocking(move || f(&ffi))
            .await
            .map_err(|_| HelmError::Interrupted)?
    }

    /// Renders a chart offline (no cluster): template path → manifest.
    pub async fn render(
        &self,
        chart: &Path,
        values: &Value,
        release: &str,
        namespace: &str,
        is_upgrade: bool,
    ) -> Result<BTreeMap<String, String>, HelmError> {
        let chart = chart.to_path_buf();
        let values = values.to_string();
        let opts = json!({"name": release, "namespace": namespace, "is_install": !is_upgrade, "is_upgrade": is_upgrade}).to_string();
        let text = self
            .blocking(move |f| f.render(&chart, &values, &opts))
            .await?;
        let map: BTreeMap<String, String> =
            serde_json::from_str(&text).map_err(|e| HelmError::Output {
                action: "render".into(),
                message: e.to_string(),
            })?;
        Ok(map)
    }

    /// A client for releases in one namespace of one cluster.
    pub fn client(&self, options: &ClusterOptions) -> Result<HelmClient, HelmError> {
        let mut opts = json!({"namespace": options.namespace});
        if let Some(k) = &options.kubeconfig {
            opts["kubeconfig_path"] = json!(k.display().to_string());
        }
        if let Some(c) = &options.context {
            opts["kube_context"] = json!(c);
        }
        opts["qps"] = json!(options.qps.unwrap_or(HELM_QPS));
        opts["burst_limit"] = json!(options.burst.unwrap_or(HELM_BURST));
        let handle = self.ffi.config_new(&opts.to_string())?;
        Ok(HelmClient {
            lib: self.clone(),
            handle: Arc::new(ConfigHandle {
                ffi: self.ffi.clone(),
                handle,
            }),
            namespace: options.namespace.clone(),
        })
    }
}

struct ConfigHandle {
    ffi: Arc<ffi::Ffi>,
    handle: u64,
}

impl Drop for ConfigHandle {
    fn drop(&mut self) {
        self.ffi.config_free(self.handle);
    }
}

/// Options of an install or upgrade.
#[derive(Clone, Debug, Default)]
pub struct InstallOptions {
    /// Labels stored on the release (Helm v4 release labels).
    pub labels: BTreeMap<String, String>,
    /// Seconds to wait for the operation.
    pub timeout_seconds: Option<u64>,
    /// Revisions kept (upgrade).
    pub max_history: Option<u32>,
    /// Take fields other managers changed (upgrade with server-side apply), so that a
    /// hand edit of a rendered object is reverted instead of failing the upgrade.
    pub force_conflicts: bool,
    /// Adopt existing objects that have no release annotations.
    pub take_ownership: bool,
    /// Leave the chart's `crds/` alone (bosun applies module CRDs itself).
    pub skip_crds: bool,
    /// Create the release namespace when it is missing (install).
    pub create_namespace: bool,
    /// Wait until the release's resources are ready (Helm's `watcher` strategy).
    pub wait: bool,
    /// Undo a failed operation (an install is uninstalled, an upgrade rolled back).
    pub rollback_on_failure: bool,
    /// Replace objects that cannot be updated in place.
    pub force_replace: bool,
    /// Do not check the values against the chart's `values.schema.json`.
    pub skip_schema_validation: bool,
}

/// What an install-or-upgrade call does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `helm install`.
    Install,
    /// `helm upgrade`.
    Upgrade,
    /// `helm upgrade --install`: installs when there is no release yet.
    UpgradeInstall,
}

impl Action {
    /// Upgrade when the release exists, else install.
    pub fn of(exists: bool) -> Action {
        if exists {
            Action::Upgrade
        } else {
            Action::Install
        }
    }

    /// The helm subcommand.
    pub fn command(self) -> &'static str {
        match self {
            Action::Install => "install",
            Action::Upgrade => "upgrade",
            Action::UpgradeInstall => "upgrade --install",
        }
    }
}

/// Releases in one namespace.
#[derive(Clone)]
pub struct HelmClient {
    lib: HelmLibrary,
    handle: Arc<ConfigHandle>,
    namespace: String,
}

impl HelmClient {
    fn options(&self, o: &InstallOptions, upgrade: bool) -> String {
        let mut opts = json!({"namespace": self.namespace});
        if !o.labels.is_empty() {
            opts["labels"] = json!(o.labels);
        }
        if let Some(t) = o.timeout_seconds {
            opts["timeout_seconds"] = json!(t);
        }
        if let Some(m) = o.max_history.filter(|_| upgrade) {
            opts["max_history"] = json!(m);
        }
        if o.force_conflicts && upgrade {
            opts["force_conflicts"] = json!(true);
        }
        if o.take_ownership {
            opts["take_ownership"] = json!(true);
        }
        if o.skip_crds {
            opts["skip_crds"] = json!(true);
        }
        if o.create_namespace && !upgrade {
            opts["create_namespace"] = json!(true);
        }
        if o.wait {
            opts["wait"] = json!("watcher");
        }
        if o.rollback_on_failure {
            opts["rollback_on_failure"] = json!(true);
        }
        if o.force_replace {
            opts["force_replace"] = json!(true);
        }
        if o.skip_schema_validation {
            opts["skip_schema_validation"] = json!(true);
        }
        opts.to_string()
    }

    async fn install_or_upgrade(
        &self,
        upgrade: bool,
        chart: &Path,
        release: &str,
        values: &Value,
        o: &InstallOptions,
    ) -> Result<Release, HelmError> {
        let (chart, release, values, opts, handle) = (
            chart.to_path_buf(),
            release.to_string(),
            values.to_string(),
            self.options(o, upgrade),
            self.handle.clone(),
        );
        let action = if upgrade { "upgrade" } else { "install" };
        let text = self
            .lib
            .blocking(move |f| {
                f.install_or_upgrade(upgrade, handle.handle, &chart, &release, &values, &opts)
            })
            .await?;
        parse(action, &text).map(Release)
    }

    /// Installs or upgrades `release` as `action` says.
    pub async fn deploy(
        &self,
        action: Action,
        chart: &Path,
        release: &str,
        values: &Value,
        o: &InstallOptions,
    ) -> Result<Release, HelmError> {
        let upgrade = match action {
            Action::Install => false,
            Action::Upgrade => true,
            Action::UpgradeInstall => match self.status(release).await {
                Ok(_) => true,
                Err(HelmError::NotFound(_)) => false,
                Err(e) => return Err(e),
            },
        };
        self.install_or_upgrade(upgrade, chart, release, values, o)
            .await
    }

    async fn call(
        &self,
        which: ffi::ReleaseCall,
        release: &str,
        options: String,
    ) -> Result<Value, HelmError> {
        let (release, handle) = (release.to_string(), self.handle.clone());
        let action = match which {
            ffi::ReleaseCall::Uninstall => "uninstall",
            ffi::ReleaseCall::Status => "status",
            ffi::ReleaseCall::History => "history",
        };
        let text = self
            .lib
            .blocking(move |f| f.release_call(which, handle.handle, &release, &options))
            .await?;
        parse(action, &text)
    }

    /// `helm uninstall`, waiting (Helm's watcher) until the release's objects are gone
    /// when `wait`; at most `timeout_seconds` for that and the hooks.
    pub async fn uninstall(
        &self,
        release: &str,
        wait: bool,
        timeout_seconds: Option<u64>,
    ) -> Result<(), HelmError> {
        let mut opts = serde_json::Map::new();
        if wait {
            opts.insert("wait".into(), json!("watcher"));
        }
        if let Some(t) = timeout_seconds {
            opts.insert("timeout_seconds".into(), json!(t));
        }
        let options = if opts.is_empty() {
            String::new()
        } else {
            Value::Object(opts).to_string()
        };
        self.call(ffi::ReleaseCall::Uninstall, release, options)
            .await
            .map(|_| ())
    }

    /// `helm status`: the last revision.
    pub async fn status(&self, release: &str) -> Result<Release, HelmError> {
        self.call(ffi::ReleaseCall::Status, release, String::new())
            .await
            .map(Release)
    }

    /// `helm history`, oldest first.
    pub async fn history(&self, release: &str) -> Result<Vec<Release>, HelmError> {
        let v = self
            .call(ffi::ReleaseCall::History, release, String::new())
            .await?;
        Ok(v.as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(Release)
            .collect())
    }

    /// `helm list --all`: releases in every state.
    pub async fn list_all(&self) -> Result<Vec<Release>, HelmError> {
        let handle = self.handle.clone();
        let text = self
            .lib
            .blocking(move |f| f.list(handle.handle, r#"{"all":true}"#))
            .await?;
        Ok(parse("list", &text)?
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(Release)
            .collect())
    }
}

#[cfg(test)]
mod transient_tests {
    use super::HelmError;

    fn helm(message: &str) -> HelmError {
        HelmError::Helm {
            action: "install".into(),
            code: 1,
            message: message.into(),
        }
    }

    #[test]
    fn only_errors_another_attempt_may_not_meet_are_transient() {
        for m in [
            "Kubernetes cluster unreachable: Get \"https://127.0.0.1:6443/version\": dial tcp 127.0.0.1:6443: connect: connection refused",
            "failed to create resource: Post \"https://x/api/v1/namespaces/d/configmaps\": net/http: TLS handshake timeout",
            "context deadline exceeded",
            "failed to create resource: the server is currently unable to handle the request (post configmaps)",
            "an error on the server (\"\") has prevented the request from succeeding (post configmaps)",
            "Operation cannot be fulfilled on configmaps \"x\": the object has been modified; please apply your changes to the latest version and try again",
            "failed to create resource: Internal error occurred: etcdserver: leader changed",
            "another operation (install/upgrade/rollback) is in progress",
            "query: failed to query with labels: Get \"https://127.0.0.1:42129/api/v1/namespaces/default/secrets?labelSelector=name%3Ddemo%2Cowner%3Dhelm\": stream error: stream ID 3; INTERNAL_ERROR; received from peer",
        ] {
            assert!(helm(m).is_transient(), "{m}");
        }
        for m in [
            "failed to create resource: ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\"",
            "unable to build kubernetes objects from release manifest: resource mapping not found for name: \"x\" namespace: \"\" from \"\": no matches for kind \"DaemonSet\" in version \"extensions/v1beta1\"",
            "template: c/templates/t.yaml:1:11: executing \"c/templates/t.yaml\" at <.Values.nope.missing>: nil pointer evaluating interface {}.missing",
            "admission webhook \"v.example.com\" denied the request: no",
        ] {
            assert!(!helm(m).is_transient(), "{m}");
        }
        assert!(!HelmError::InvalidInput("x".into()).is_transient());
    }

    #[test]
    fn binary_errors_name_the_release_the_command_and_helm_s_message() {
        let failed = |release: &str, command: &str, stderr: &str| HelmError::Command {
            release: release.into(),
            command: command.into(),
            status: "exit 1".into(),
            stderr: stderr.into(),
        };
        let e = failed("echo", "helm upgrade echo /c", "UPGRADE FAILED: boom");
        assert_eq!(
            e.to_string(),
            "release echo: `helm upgrade echo /c` failed (exit 1): UPGRADE FAILED: boom"
        );
        assert!(!e.is_transient());
        assert_eq!(
            failed("", "helm list", "boom").to_string(),
            "`helm list` failed (exit 1): boom"
        );
        assert!(
            failed(
                "echo",
                "helm status echo",
                "Kubernetes cluster unreachable: dial tcp: connection refused"
            )
            .is_transient()
        );
        let timed_out = HelmError::TimedOut {
            release: "echo".into(),
            command: "helm upgrade echo /c".into(),
            after: std::time::Duration::from_secs(61),
        };
        assert!(timed_out.is_transient());
        assert_eq!(timed_out.metric_label(), "timeout");
        assert!(
            timed_out
                .to_string()
                .starts_with("release echo: `helm upgrade echo /c` did not finish within 61s")
        );
    }
}
