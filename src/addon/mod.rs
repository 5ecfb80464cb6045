//! The addon subsystem's wiring (addon-operator's modules): configuration from the
//! environment, module and global hook discovery, replaying the journal, and starting the
//! engine of `bosun_addon` against a Kubernetes API with the real ports.

pub mod adapters;
pub mod bindings;
pub mod discovery;
pub mod http;
pub mod journal;
pub mod patcher;
pub mod releases;
pub mod start_flags;
mod subsystem;
pub use subsystem::{JOURNAL, Modules};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bosun_addon::engine::{Engine, EngineArgs};
use bosun_addon::global_hooks::GlobalHook;
use bosun_addon::hook_config::{self, HookKind};
use bosun_addon::modules::{ModuleDef, parse_config_map};
use serde_json::Value;

use bosun_kube::ClientLimits;

use start_flags::Given;

use crate::hooks::{HookProcess, discover};

/// The modules' settings, from the environment (addon-operator's names, with bosun's
/// additions prefixed `BOSUN_`); the process's (listeners, folders, the client, which
/// subsystems run) are [`crate::host::ProcessConfig`].
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// `GLOBAL_HOOKS_DIR` (or `ADDON_OPERATOR_GLOBAL_HOOKS_DIR`).
    pub global_hooks_dir: PathBuf,
    /// `MODULES_DIR` (or `ADDON_OPERATOR_MODULES_DIR`), colon-separated.
    pub modules_dirs: Vec<PathBuf>,
    /// `ADDON_OPERATOR_CONFIG_MAP`.
    pub config_map: String,
    /// `DEBUG_KEEP_TMP_FILES`.
    pub keep_tmp_files: bool,
    /// `BOSUN_HOOK_TIMEOUT`: a hook running longer is killed (Go duration).
    pub hook_timeout: Duration,
    /// `BOSUN_TASK_MAX_ATTEMPTS`: park a task after this many failures (0 = never).
    pub max_attempts: Option<u32>,
    /// `UNNUMBERED_MODULES_ORDER`.
    pub unnumbered_order: u32,
    /// `HELM_HISTORY_MAX`.
    pub helm_history_max: u32,
    /// `HELM_TIMEOUT`.
    pub helm_timeout: Duration,
    /// `HELM_IGNORE_RELEASE` (comma-separated).
    pub ignore_releases: Vec<String>,
    /// `HELM_LIB_PATH`: `libhelm_c.so` (default: the set-up location).
    pub helm_library: Option<PathBuf>,
    /// `HELM_BIN_PATH`: the `helm` binary; setting it chooses the binary over the library
    /// (unless `BOSUN_HELM_ENGINE=library`).
    pub helm_binary: Option<PathBuf>,
    /// `BOSUN_HELM_ENGINE`: `auto` (default), `library` or `cli`.
    pub helm_engine: crate::helm::EngineChoice,
    /// `ADDON_OPERATOR_CRD_FILTER_PREFIXES`.
    pub crd_filter_prefixes: Vec<String>,
    /// `ADDON_OPERATOR_CRD_EXTRA_LABELS` (`k=v,k2=v2`).
    pub crd_extra_labels: std::collections::BTreeMap<String, String>,
    /// `BOSUN_RESOURCE_MONITOR_INTERVAL`: how often releases are checked for absent or
    /// drifted objects (default 4m30s, plus up to 59 s of jitter).
    pub monitor_interval: Duration,
    /// `QUEUE_ACTIONS_METRICS`: `no` switches `tasks_queue_action_duration_seconds` off.
    pub queue_action_metrics: bool,
    /// `OBJECT_PATCHER_KUBE_CLIENT_QPS`/`_BURST`: the object patcher's client.
    pub patcher_limits: ClientLimits,
    /// `HELM_MONITOR_KUBE_CLIENT_QPS`/`_BURST`: the client that checks releases' objects.
    pub helm_monitor_limits: ClientLimits,
}

fn duration_env(given: &Given, names: &[&str], default: Duration) -> anyhow::Result<Duration> {
    match given.var(names) {
        Some(v) => bosun_runtime::clock::parse_go_duration(&v)
            .map_err(|e| anyhow::anyhow!("{}: {e}", names[0])),
        None => Ok(default),
    }
}

fn list_env(given: &Given, names: &[&str], default: &[String]) -> Vec<String> {
    match given.var(names) {
        Some(v) => v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        None => default.to_vec(),
    }
}

impl OperatorConfig {
    /// Reads the environment; `defaults` supplies what the embedded default sets.
    pub fn from_env(defaults: &OperatorConfig) -> anyhow::Result<OperatorConfig> {
        Self::from_env_and(defaults, &Given::default())
    }

    /// Reads the variables `given` on the command line (addon-operator's `start` flags),
    /// then the environment.
    pub fn from_env_and(
        defaults: &OperatorConfig,
        given: &Given,
    ) -> anyhow::Result<OperatorConfig> {
        let env = |names: &[&str]| given.var(names);
        let hook_timeout = match env(&["BOSUN_HOOK_TIMEOUT"]) {
            Some(v) => bosun_runtime::clock::parse_go_duration(&v)
                .map_err(|e| anyhow::anyhow!("BOSUN_HOOK_TIMEOUT: {e}"))?,
            None => defaults.hook_timeout,
        };
        let max_attempts = match env(&["BOSUN_TASK_MAX_ATTEMPTS"]) {
            Some(v) => {
                let n: u32 = v.parse().map_err(|_| {
                    anyhow::anyhow!("BOSUN_TASK_MAX_ATTEMPTS: {v:?} is not a whole number")
                })?;
                (n > 0).then_some(n)
            }
            None => defaults.max_attempts,
        };
        let unnumbered_order = match env(&[
            "ADDON_OPERATOR_UNNUMBERED_MODULES_ORDER",
            "UNNUMBERED_MODULES_ORDER",
            // The seed's spelling (addon-operator's code reads the one above).
            "UNNUMBERED_MODULE_ORDER",
        ]) {
            Some(v) => v.parse().map_err(|_| {
                anyhow::anyhow!("UNNUMBERED_MODULES_ORDER: {v:?} is not a whole number")
            })?,
            None => defaults.unnumbered_order,
        };
        let helm_history_max = match env(&["HELM_HISTORY_MAX"]) {
            Some(v) => v
                .parse()
                .map_err(|_| anyhow::anyhow!("HELM_HISTORY_MAX: {v:?} is not a whole number"))?,
            None => defaults.helm_history_max,
        };
        let crd_extra_labels = match env(&["ADDON_OPERATOR_CRD_EXTRA_LABELS"]) {
            Some(v) => v
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "ADDON_OPERATOR_CRD_EXTRA_LABELS: {kv:?} is not key=value"
                            )
                        })
                })
                .collect::<anyhow::Result<_>>()?,
            None => defaults.crd_extra_labels.clone(),
        };
        Ok(OperatorConfig {
            patcher_limits: crate::host::process::limits_env(
                given,
                "OBJECT_PATCHER_KUBE_CLIENT_QPS",
                "OBJECT_PATCHER_KUBE_CLIENT_BURST",
                defaults.patcher_limits,
            )?,
            helm_monitor_limits: crate::host::process::limits_env(
                given,
                "HELM_MONITOR_KUBE_CLIENT_QPS",
                "HELM_MONITOR_KUBE_CLIENT_BURST",
                defaults.helm_monitor_limits,
            )?,
            queue_action_metrics: match env(&["QUEUE_ACTIONS_METRICS"]) {
                Some(v) => v != "no",
                None => defaults.queue_action_metrics,
            },
            unnumbered_order,
            helm_history_max,
            helm_timeout: duration_env(given, &["HELM_TIMEOUT"], defaults.helm_timeout)?,
            ignore_releases: list_env(given, &["HELM_IGNORE_RELEASE"], &defaults.ignore_releases),
            helm_library: env(&["HELM_LIB_PATH"])
                .map(PathBuf::from)
                .or_else(|| defaults.helm_library.clone()),
            helm_binary: env(&["HELM_BIN_PATH"])
                .map(PathBuf::from)
                .or_else(|| defaults.helm_binary.clone()),
            helm_engine: match env(&["BOSUN_HELM_ENGINE"]) {
                Some(v) => v
                    .parse()
                    .map_err(|e| anyhow::anyhow!("BOSUN_HELM_ENGINE: {e}"))?,
                None => defaults.helm_engine,
            },
            crd_filter_prefixes: list_env(
                given,
                &["ADDON_OPERATOR_CRD_FILTER_PREFIXES"],
                &defaults.crd_filter_prefixes,
            ),
            crd_extra_labels,
            monitor_interval: duration_env(
                given,
                &["BOSUN_RESOURCE_MONITOR_INTERVAL"],
                defaults.monitor_interval,
            )?,
            global_hooks_dir: env(&["ADDON_OPERATOR_GLOBAL_HOOKS_DIR", "GLOBAL_HOOKS_DIR"])
                .map(PathBuf::from)
                .unwrap_or_else(|| defaults.global_hooks_dir.clone()),
            modules_dirs: env(&["ADDON_OPERATOR_MODULES_DIR", "MODULES_DIR"])
                .map(|v| {
                    v.split(':')
                        .filter(|s| !s.is_empty())
                        .map(PathBuf::from)
                        .collect()
                })
                .unwrap_or_else(|| defaults.modules_dirs.clone()),
            config_map: env(&["ADDON_OPERATOR_CONFIG_MAP"])
                .unwrap_or_else(|| defaults.config_map.clone()),
            keep_tmp_files: env(&["DEBUG_KEEP_TMP_FILES"])
                .map(|v| v == "true" || v == "yes")
                .unwrap_or(defaults.keep_tmp_files),
            hook_timeout,
            max_attempts,
        })
    }

    /// In-cluster defaults.
    pub fn in_cluster() -> OperatorConfig {
        OperatorConfig {
            global_hooks_dir: PathBuf::from("global-hooks"),
            modules_dirs: vec![PathBuf::from("modules")],
            config_map: "addon-operator".into(),
            keep_tmp_files: false,
            hook_timeout: Duration::from_secs(30 * 60),
            max_attempts: None,
            unnumbered_order: 1,
            helm_history_max: 10,
            helm_timeout: Duration::from_secs(20 * 60),
            ignore_releases: Vec::new(),
            helm_library: None,
            helm_binary: None,
            helm_engine: crate::helm::EngineChoice::Auto,
            crd_filter_prefixes: vec!["doc-".into(), "_".into()],
            crd_extra_labels: [("heritage".to_string(), "addon-operator".to_string())].into(),
            monitor_interval: Duration::from_secs(270),
            queue_action_metrics: true,
            // No limit unless asked (addon-operator's clients default to client-go's 5/10;
            // docs/deploy.md says why bosun's do not).
            patcher_limits: ClientLimits::UNLIMITED,
            helm_monitor_limits: ClientLimits::UNLIMITED,
        }
    }
}

/// Hooks' `--config` runs at once while loading.
const CONFIG_RUNS_AT_ONCE: usize = 4;

/// Loads global hooks: discovery, then `--config` of each. A hook whose configuration is
/// missing or invalid stops the start, as in the reference.
pub async fn load_global_hooks(
    dir: &Path,
    runner: &HookProcess,
) -> anyhow::Result<Vec<GlobalHook>> {
    use futures::{StreamExt as _, TryStreamExt as _};
    if !dir.exists() {
        tracing::info!(dir = %dir.display(), "no global hooks directory");
        return Ok(Vec::new());
    }
    let hooks_dir = if dir.join("hooks").is_dir() {
        dir.join("hooks")
    } else {
        dir.to_path_buf()
    };
    let (found, warnings) = discover(&hooks_dir, false)
        .with_context(|| format!("cannot read global hooks directory {}", hooks_dir.display()))?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    // Their `--config` runs are independent processes: a few at a time, the hooks kept in
    // their order (50 global hooks one after the other were a tenth of a warm start).
    let hooks: Vec<GlobalHook> = futures::stream::iter(found)
        .map(|h| async move {
            let text = runner
                .config(&h.name, &h.path)
                .await
                .with_context(|| format!("global hook {:?}: --config failed", h.name))?;
            let config = hook_config::parse(&text, HookKind::Global, &h.name)?;
            hook_config::check_filters(&config, &h.name, |p| {
                crate::jq::JqFilter::compile(p)
                    .map(|_| ())
                    .map_err(|e| hook_config::InvalidFilter(e.to_string()))
            })?;
            tracing::info!(hook = %h.name, "global hook loaded");
            anyhow::Ok(GlobalHook {
                name: h.name,
                path: h.path,
                config,
            })
        })
        .buffered(CONFIG_RUNS_AT_ONCE)
        .try_collect()
        .await?;
    Ok(hooks)
}

/// The `key` section of `values.yaml` in the modules directories, merged in order.
pub fn static_values(dirs: &[PathBuf], key: &str) -> anyhow::Result<Value> {
    let mut layers = Vec::new();
    for dir in dirs {
        let path = dir.join("values.yaml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let doc: Value = serde_saphyr::from_str(&text)
            .with_context(|| format!("{}: invalid YAML", path.display()))?;
        match &doc[key] {
            Value::Null => {}
            v @ Value::Object(_) => layers.push(v.clone()),
            other => anyhow::bail!(
                "{}: key {key:?} must be a mapping, got {other}",
                path.display()
            ),
        }
    }
    Ok(bosun_addon::values::layered(layers.iter()))
}

/// A running operator.
pub struct Operator {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The modules' journal (served to standbys in HA mode).
    pub journal: Arc<bosun_journal::Journal<bosun_addon::Event>>,
    watcher: tokio::task::JoinHandle<()>,
    compactor: tokio::task::JoinHandle<()>,
}

impl Operator {
    /// What the HTTP and debug endpoints read.
    pub fn view(&self) -> crate::debug::ModulesView {
        crate::debug::ModulesView {
            engine: self.engine.clone(),
            journal: self.journal.clone(),
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.watcher.abort();
        self.compactor.abort();
    }
}

type ConfigMapEvents = std::pin::Pin<
    Box<
        dyn futures::Stream<
                Item = Result<
                    kube::runtime::watcher::Event<k8s_openapi::api::core::v1::ConfigMap>,
                    kube::runtime::watcher::Error,
                >,
            > + Send,
    >,
>;

/// Starts watching the ConfigMap and reads its state at start (the watch's initial list),
/// so that every later event is newer than what the engine starts with.
async fn config_map_at_start(
    client: kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<(
    Option<std::collections::BTreeMap<String, String>>,
    ConfigMapEvents,
)> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream: ConfigMapEvents = Box::pin(watcher::watcher(api, config));
    let mut data = None;
    let mut backoff = std::time::Duration::from_millis(100);
    loop {
        match stream.next().await {
            Some(Ok(watcher::Event::InitApply(cm))) => data = Some(cm.data.unwrap_or_default()),
            Some(Ok(watcher::Event::InitDone)) => return Ok((data, stream)),
            Some(Ok(_)) => {}
            // A busy or restarting API server: the watch lists again after a pause, as
            // every other read of bosun's retries.
            Some(Err(e)) if transient_watch_error(&e) => {
                tracing::warn!(retry_in = ?backoff, "cannot read ConfigMap {namespace}/{name} yet: {e}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
            }
            Some(Err(e)) => anyhow::bail!("cannot read ConfigMap {namespace}/{name}: {e}"),
            None => anyhow::bail!("cannot read ConfigMap {namespace}/{name}: the watch ended"),
        }
    }
}

/// Whether a watch error may go away by itself: the API server unreachable, busy (429) or
/// failing (5xx). A refusal (401, 403) or a bad request stays.
fn transient_watch_error(e: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error as W;
    let api = match e {
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => e,
        W::WatchError(s) => return s.code == 429 || s.code >= 500 || s.code == 410,
        _ => return false,
    };
    match api {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Follows the ConfigMap: changed sections are journaled and queue a converge or module
/// runs; our own writes come back unchanged and are ignored; an invalid ConfigMap is
/// reported and the last good values stay in place.
async fn follow_config_map(
    runtime_config: Arc<crate::runtime_config::RuntimeConfig>,
    engine: Arc<Engine>,
    mut stream: ConfigMapEvents,
    name: String,
    modules: Vec<ModuleDef>,
) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let log_events = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let set_log_events = log_events.clone();
    runtime_config.register(crate::runtime_config::Param {
        name: "log.configmap.events",
        description: format!("Set to true to log every event of the ConfigMap {name}"),
        default: "false".into(),
        validate: |v| match v {
            "true" | "false" => Ok(()),
            _ => Err(format!("{v:?} is not true or false")),
        },
        forced_duration: |_| None,
        on_change: Box::new(move |v| {
            set_log_events.store(v == "true", std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }),
    });
    while let Some(event) = stream.next().await {
        if log_events.load(std::sync::atomic::Ordering::Relaxed) {
            log_config_map_event(&name, &event);
        }
        let data = match event {
            Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                Some(cm.data.unwrap_or_default())
            }
            Ok(watcher::Event::Delete(_)) => Some(Default::default()),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(configmap = %name, "watch interrupted, retrying: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                None
            }
        };
        let Some(data) = data else { continue };
        let sections = match parse_config_map(&data, &modules, &name) {
            Ok((sections, warnings)) => {
                for w in warnings {
                    tracing::warn!("{w}");
                }
                sections
            }
            Err(e) => {
                bosun_addon::telemetry::config_values_error();
                tracing::error!(configmap = %name, "{e}; keeping the last good config values");
                continue;
            }
        };
        match engine.config_changed(sections).await {
            Ok(queued) if queued.is_empty() => {}
            Ok(queued) => {
                tracing::info!(configmap = %name, "config values changed; queued {}", queued.join(", "))
            }
            Err(e) => tracing::error!(configmap = %name, "cannot apply config values: {e}"),
        }
    }
}

/// `log.configmap.events`: one line per ConfigMap event, with the keys it carries.
fn log_config_map_event(
    name: &str,
    event: &Result<
        kube::runtime::watcher::Event<k8s_openapi::api::core::v1::ConfigMap>,
        kube::runtime::watcher::Error,
    >,
) {
    use kube::runtime::watcher::Event;
    let (kind, cm) = match event {
        Ok(Event::Apply(cm)) => ("Apply", Some(cm)),
        Ok(Event::InitApply(cm)) => ("InitApply", Some(cm)),
        Ok(Event::Delete(cm)) => ("Delete", Some(cm)),
        Ok(Event::Init) => ("Init", None),
        Ok(Event::InitDone) => ("InitDone", None),
        Err(e) => {
            tracing::info!(configmap = %name, "ConfigMap event: watch error: {e}");
            return;
        }
    };
    let keys = cm
        .and_then(|c| c.data.as_ref())
        .map(|d| d.keys().cloned().collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    let version = cm
        .and_then(|c| c.metadata.resource_version.clone())
        .unwrap_or_default();
    tracing::info!(configmap = %name, event = kind, resource_version = %version, keys = %keys, "ConfigMap event");
}

impl OperatorConfig {
    /// Which Helm engine (`BOSUN_HELM_ENGINE`, `HELM_BIN_PATH`, `HELM_LIB_PATH`).
    pub fn helm_settings(&self, tmp_dir: &Path) -> crate::helm::EngineSettings {
        crate::helm::EngineSettings {
            choice: self.helm_engine,
            binary: self.helm_binary.clone(),
            library: self.helm_library.clone(),
            tmp_dir: tmp_dir.join("helm"),
        }
    }
}

/// Writes the kubeconfig Helm uses in-cluster (the pod's service account) into `dir` and
/// returns its path.
fn write_helm_kubeconfig(
    sa: &bosun_kube::in_cluster::ServiceAccount,
    url: &str,
    namespace: &str,
    dir: &std::path::Path,
) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join("helm-kubeconfig");
    let write = || -> std::io::Result<()> {
        bosun_platform::create_private_dir(dir)?;
        bosun_platform::write_private_file(&path, sa.kubeconfig_text(url, namespace).as_bytes())
    };
    write().with_context(|| format!("cannot write the kubeconfig for Helm {}", path.display()))?;
    Ok(path)
}

/// How Helm reaches the cluster: a kubeconfig and its context (`None`: Helm's own
/// discovery).
struct HelmCluster {
    kubeconfig: Option<PathBuf>,
    kube_context: Option<String>,
}

/// Chooses the Helm engine (`BOSUN_HELM_ENGINE`, `HELM_BIN_PATH`, `HELM_LIB_PATH`); none is
/// needed when no module has a chart.
async fn releases(
    cfg: &OperatorConfig,
    cluster: HelmCluster,
    tmp_dir: &Path,
    modules: &[ModuleDef],
    kube: kube::Client,
    namespace: &str,
) -> anyhow::Result<Arc<dyn bosun_addon::ports::Releases>> {
    let settings = cfg.helm_settings(tmp_dir);
    let engine = match crate::helm::HelmEngine::select(&settings).await {
        Ok(engine) => engine,
        Err(e) => {
            if let Some(m) = modules.iter().find(|m| m.chart.is_some()) {
                anyhow::bail!(
                    "module {} has a chart but Helm is not available: {e}",
                    m.name
                );
            }
            tracing::info!("no module has a chart; Helm not loaded ({e})");
            return Ok(Arc::new(releases::NoHelm(e.to_string())));
        }
    };
    if matches!(engine, crate::helm::HelmEngine::Library(_)) && cfg.helm_binary.is_some() {
        tracing::info!(
            "HELM_BIN_PATH is set but BOSUN_HELM_ENGINE=library: the binary is not used"
        );
    }
    tracing::info!(engine = engine.kind(), version = %engine.version(), path = %engine.path().display(), "Helm engine chosen");
    let client = engine
        .client(&crate::helm::ClusterOptions {
            kubeconfig: cluster.kubeconfig,
            context: cluster.kube_context,
            namespace: namespace.to_string(),
            ..Default::default()
        })
        .context("cannot configure Helm for the cluster")?;
    let options = crate::helm::InstallOptions {
        labels: Default::default(),
        timeout_seconds: Some(cfg.helm_timeout.as_secs()),
        max_history: Some(cfg.helm_history_max),
        force_conflicts: true,
        take_ownership: true,
        skip_crds: true,
        ..Default::default()
    };
    Ok(Arc::new(
        releases::HelmReleases::new(engine, client, kube, namespace, options)
            .with_private_root(tmp_dir.to_path_buf()),
    ))
}

/// Starts the modules (global hooks, modules, their queues) on the host, their journal
/// in `journal_dir`.
pub async fn start(
    host: &crate::host::Host,
    cfg: &OperatorConfig,
    journal_dir: &Path,
) -> anyhow::Result<Operator> {
    let client = host.client.clone();
    let namespace = host.namespace.clone();
    let tmp_dir = &host.process.tmp_dir;
    let runner = HookProcess {
        tmp_dir: tmp_dir.clone(),
        keep_tmp_files: cfg.keep_tmp_files,
        timeout: cfg.hook_timeout,
        working_dir: None,
        logging: host.process.hook_logging.clone(),
    };
    // The replay takes one core for a while (a second per million events): the hooks'
    // `--config` runs, the modules' discovery and Helm's start go on meanwhile.
    let replay = {
        let (dir, stream) = (journal_dir.to_path_buf(), host.stream.clone());
        tokio::task::spawn_blocking(move || journal::open_shared(&dir, stream.as_ref()))
    };
    let global_hooks = load_global_hooks(&cfg.global_hooks_dir, &runner).await?;
    let modules_dirs: &[PathBuf] = &cfg.modules_dirs;
    let (modules, warnings) = crate::addon::discovery::discover_modules(
        modules_dirs,
        &crate::addon::discovery::DiscoveryOptions {
            unnumbered_order: cfg.unnumbered_order,
            crd_filter_prefixes: cfg.crd_filter_prefixes.clone(),
            crd_extra_labels: cfg.crd_extra_labels.clone(),
            charts_dir: tmp_dir.join("charts"),
        },
    )
    .context("cannot load modules")?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    for m in &modules {
        tracing::info!(module = %m.name, order = m.order, chart = m.chart.is_some(), hooks = m.hooks.len(), "module loaded");
    }
    let store = adapters::KubeConfigStore::new(client.clone(), &namespace, &cfg.config_map);
    let (data, events) = config_map_at_start(client.clone(), &namespace, &cfg.config_map).await?;
    let (initial_config, warnings) =
        parse_config_map(&data.unwrap_or_default(), &modules, &cfg.config_map)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    // In-cluster, Helm reads the same service account through a kubeconfig of its own.
    let helm_cluster = match &host.source {
        bosun_kube::in_cluster::ClientSource::ServiceAccount(sa) => HelmCluster {
            kubeconfig: Some(write_helm_kubeconfig(
                sa,
                &host.resource_cluster.0,
                &namespace,
                tmp_dir,
            )?),
            // That kubeconfig has one context.
            kube_context: None,
        },
        _ => HelmCluster {
            kubeconfig: host.process.kubeconfig.clone(),
            kube_context: host.process.kube_context.clone(),
        },
    };
    let monitor = host.client_for("helmMonitor", cfg.helm_monitor_limits)?;
    let releases = releases(cfg, helm_cluster, tmp_dir, &modules, monitor, &namespace).await?;
    let journal::Opened {
        sink,
        state: restored,
        journal,
        last,
    } = replay.await.context("the journal replay stopped")??;
    tracing::info!(journal = %journal_dir.display(), events = restored.events, "journal replayed");
    let watches = bindings::BindingWatches::new(host.watches.clone());
    let engine = Engine::start(EngineArgs {
        global_hooks,
        static_global: static_values(modules_dirs, "global")?,
        global_schemas: Arc::new(
            crate::addon::discovery::load_schemas(&cfg.global_hooks_dir, "global")
                .context("invalid global values schema")?,
        ),
        initial_config: Some(initial_config),
        modules: modules.clone(),
        ports: bosun_addon::ports::Ports {
            journal: sink,
            executor: Arc::new(runner),
            config_store: Arc::new(store),
            releases,
            bindings: Arc::new(watches.clone()),
            patcher: Arc::new(crate::addon::patcher::KubePatcher::new(
                host.client_for("objectPatcher", cfg.patcher_limits)?,
                std::env::var("KUBE_CLIENT_FIELD_MANAGER")
                    .ok()
                    .filter(|v| !v.is_empty()),
            )),
        },
        monitor_interval: cfg.monitor_interval,
        ignore_releases: cfg.ignore_releases.clone(),
        restored,
        max_attempts: cfg.max_attempts,
        queue_action_metrics: cfg.queue_action_metrics,
        mailboxes: host.mailboxes.clone(),
        gate: host.gate.clone(),
    })
    .await?;
    let engine = Arc::new(engine);
    let watcher = tokio::spawn(follow_config_map(
        host.runtime_config.clone(),
        engine.clone(),
        events,
        cfg.config_map.clone(),
        modules,
    ));
    let compactor = journal::spawn_compactor(journal.clone(), last, journal::snapshot_every());
    Ok(Operator {
        engine,
        journal,
        watcher,
        compactor,
    })
}
