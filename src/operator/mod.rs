//! `bosun run`: configuration from the environment, loading global hooks, replaying the
//! journal, and starting the engine against a Kubernetes API.

pub mod adapters;
pub mod http;
pub mod journal;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bosun_actors::engine::{Engine, EngineArgs};
use bosun_actors::global_hooks::GlobalHook;
use bosun_actors::hook_config::{self, HookKind};
use bosun_actors::mailbox::Mailboxes;
use serde_json::Value;

use crate::hooks::{HookProcess, discover};

/// Operator settings, from the environment (addon-operator's names, with bosun's
/// additions prefixed `BOSUN_`).
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// `GLOBAL_HOOKS_DIR` (or `ADDON_OPERATOR_GLOBAL_HOOKS_DIR`).
    pub global_hooks_dir: PathBuf,
    /// `MODULES_DIR` (or `ADDON_OPERATOR_MODULES_DIR`), colon-separated.
    pub modules_dirs: Vec<PathBuf>,
    /// `ADDON_OPERATOR_NAMESPACE`.
    pub namespace: String,
    /// `ADDON_OPERATOR_CONFIG_MAP`.
    pub config_map: String,
    /// `ADDON_OPERATOR_TMP_DIR`.
    pub tmp_dir: PathBuf,
    /// `DEBUG_KEEP_TMP_FILES`.
    pub keep_tmp_files: bool,
    /// `BOSUN_HOOK_TIMEOUT`: a hook running longer is killed (Go duration).
    pub hook_timeout: Duration,
    /// `BOSUN_TASK_MAX_ATTEMPTS`: park a task after this many failures (0 = never).
    pub max_attempts: Option<u32>,
    /// `BOSUN_JOURNAL_DIR`.
    pub journal_dir: PathBuf,
    /// Kubeconfig to use instead of the usual discovery (`KUBE_CONFIG`).
    pub kubeconfig: Option<PathBuf>,
    /// `ADDON_OPERATOR_LISTEN_ADDRESS:ADDON_OPERATOR_LISTEN_PORT` (`/healthz`, `/readyz`).
    pub listen: std::net::SocketAddr,
}

fn env(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
}

impl OperatorConfig {
    /// Reads the environment; `defaults` supplies what the embedded default sets.
    pub fn from_env(defaults: &OperatorConfig) -> anyhow::Result<OperatorConfig> {
        let hook_timeout = match env(&["BOSUN_HOOK_TIMEOUT"]) {
            Some(v) => bosun_actors::schedule::parse_go_duration(&v)
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
        Ok(OperatorConfig {
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
            namespace: env(&["ADDON_OPERATOR_NAMESPACE"])
                .unwrap_or_else(|| defaults.namespace.clone()),
            config_map: env(&["ADDON_OPERATOR_CONFIG_MAP"])
                .unwrap_or_else(|| defaults.config_map.clone()),
            tmp_dir: env(&["ADDON_OPERATOR_TMP_DIR"])
                .map(PathBuf::from)
                .unwrap_or_else(|| defaults.tmp_dir.clone()),
            keep_tmp_files: env(&["DEBUG_KEEP_TMP_FILES"])
                .map(|v| v == "true" || v == "yes")
                .unwrap_or(defaults.keep_tmp_files),
            hook_timeout,
            max_attempts,
            journal_dir: env(&["BOSUN_JOURNAL_DIR"])
                .map(PathBuf::from)
                .unwrap_or_else(|| defaults.journal_dir.clone()),
            kubeconfig: env(&["KUBE_CONFIG"])
                .map(PathBuf::from)
                .or_else(|| defaults.kubeconfig.clone()),
            listen: {
                let ip = env(&["ADDON_OPERATOR_LISTEN_ADDRESS"])
                    .unwrap_or_else(|| defaults.listen.ip().to_string());
                let port = env(&["ADDON_OPERATOR_LISTEN_PORT"])
                    .unwrap_or_else(|| defaults.listen.port().to_string());
                format!("{ip}:{port}")
                    .parse()
                    .or_else(|_| format!("[{ip}]:{port}").parse())
                    .map_err(|_| {
                        anyhow::anyhow!(
                            "ADDON_OPERATOR_LISTEN_ADDRESS/PORT: {ip}:{port} is not an address"
                        )
                    })?
            },
        })
    }

    /// In-cluster defaults.
    pub fn in_cluster() -> OperatorConfig {
        OperatorConfig {
            global_hooks_dir: PathBuf::from("global-hooks"),
            modules_dirs: vec![PathBuf::from("modules")],
            namespace: String::new(),
            config_map: "addon-operator".into(),
            tmp_dir: PathBuf::from("/tmp/addon-operator"),
            keep_tmp_files: false,
            hook_timeout: Duration::from_secs(30 * 60),
            max_attempts: None,
            journal_dir: PathBuf::from("/var/lib/bosun/journal"),
            kubeconfig: None,
            listen: std::net::SocketAddr::from(([0, 0, 0, 0], 9650)),
        }
    }
}

/// Loads global hooks: discovery, then `--config` of each. A hook whose configuration is
/// missing or invalid stops the start, as in the reference.
pub async fn load_global_hooks(
    dir: &Path,
    runner: &HookProcess,
) -> anyhow::Result<Vec<GlobalHook>> {
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
    let mut hooks = Vec::new();
    for h in found {
        let text = runner
            .config(&h.name, &h.path)
            .await
            .with_context(|| format!("global hook {:?}: --config failed", h.name))?;
        let config = hook_config::parse(&text, HookKind::Global, &h.name)?;
        tracing::info!(hook = %h.name, "global hook loaded");
        hooks.push(GlobalHook {
            name: h.name,
            path: h.path,
            config,
        });
    }
    Ok(hooks)
}

/// Parses the ConfigMap's `global` section; an invalid one is reported and ignored.
fn global_section(
    data: Option<&std::collections::BTreeMap<String, String>>,
    config_map: &str,
) -> Option<Value> {
    let data = data?;
    let Some(text) = data.get("global") else {
        return Some(Value::Object(Default::default()));
    };
    match serde_saphyr::from_str::<Value>(text) {
        Ok(Value::Null) => Some(Value::Object(Default::default())),
        Ok(v @ Value::Object(_)) => Some(v),
        Ok(other) => {
            tracing::error!(configmap = %config_map, key = "global", "expected a YAML mapping, got {other}; keeping the last good config values");
            None
        }
        Err(e) => {
            tracing::error!(configmap = %config_map, key = "global", "invalid YAML: {e}; keeping the last good config values");
            None
        }
    }
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
    Ok(bosun_actors::values::layered(layers.iter()))
}

/// A running operator.
pub struct Operator {
    /// The engine.
    pub engine: Arc<Engine>,
    watcher: tokio::task::JoinHandle<()>,
    http: tokio::task::JoinHandle<()>,
    /// Where `/healthz` and `/readyz` are served.
    pub listen: std::net::SocketAddr,
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.watcher.abort();
        self.http.abort();
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
    loop {
        match stream.next().await {
            Some(Ok(watcher::Event::InitApply(cm))) => data = Some(cm.data.unwrap_or_default()),
            Some(Ok(watcher::Event::InitDone)) => return Ok((data, stream)),
            Some(Ok(_)) => {}
            Some(Err(e)) => anyhow::bail!("cannot read ConfigMap {namespace}/{name}: {e}"),
            None => anyhow::bail!("cannot read ConfigMap {namespace}/{name}: the watch ended"),
        }
    }
}

/// Follows the ConfigMap: a changed `global` section is journaled and reloads everything;
/// our own writes come back unchanged and are ignored; invalid YAML is reported and the
/// last good values stay in place.
async fn follow_config_map(engine: Arc<Engine>, mut stream: ConfigMapEvents, name: String) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    while let Some(event) = stream.next().await {
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
        let Some(global) = global_section(Some(&data), &name) else {
            continue;
        };
        match engine.global_config_changed(global).await {
            Ok(true) => {
                tracing::info!(configmap = %name, "global config values changed; reloading")
            }
            Ok(false) => {}
            Err(e) => tracing::error!(configmap = %name, "cannot apply global config values: {e}"),
        }
    }
}

/// Starts the operator.
pub async fn start(cfg: &OperatorConfig) -> anyhow::Result<Operator> {
    let client = match &cfg.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .context("invalid kubeconfig")?;
            kube::Client::try_from(config).context("cannot build a Kubernetes client")?
        }
        None => kube::Client::try_default()
            .await
            .context("cannot configure a Kubernetes client (in-cluster or KUBECONFIG)")?,
    };
    let namespace = if cfg.namespace.is_empty() {
        client.default_namespace().to_string()
    } else {
        cfg.namespace.clone()
    };
    let runner = HookProcess {
        tmp_dir: cfg.tmp_dir.clone(),
        keep_tmp_files: cfg.keep_tmp_files,
        timeout: cfg.hook_timeout,
        working_dir: None,
    };
    let (sink, restored) = journal::open(&cfg.journal_dir)?;
    tracing::info!(journal = %cfg.journal_dir.display(), events = restored.events, "journal replayed");
    let global_hooks = load_global_hooks(&cfg.global_hooks_dir, &runner).await?;
    let store = adapters::KubeConfigStore::new(client.clone(), &namespace, &cfg.config_map);
    let (data, events) = config_map_at_start(client.clone(), &namespace, &cfg.config_map).await?;
    let initial_config = match &data {
        None => Some(Value::Object(Default::default())),
        Some(d) => global_section(Some(d), &cfg.config_map),
    };
    let engine = Engine::start(EngineArgs {
        global_hooks,
        static_global: static_values(&cfg.modules_dirs, "global")?,
        initial_config,
        restored,
        sink,
        executor: Arc::new(runner),
        config_store: Arc::new(store),
        max_attempts: cfg.max_attempts,
        mailboxes: Mailboxes::default(),
    })
    .await?;
    let engine = Arc::new(engine);
    let watcher = tokio::spawn(follow_config_map(
        engine.clone(),
        events,
        cfg.config_map.clone(),
    ));
    let (listen, http) = http::serve(cfg.listen, engine.clone()).await?;
    println!("bosun HTTP endpoints listening on http://{listen}");
    tracing::info!(%listen, "serving /healthz and /readyz");
    Ok(Operator {
        engine,
        watcher,
        http,
        listen,
    })
}
