//! The process's half of the configuration: what bosun as a whole listens on, writes to
//! and connects with, whichever subsystems run. The host is made from it and keeps it;
//! each subsystem reads its own settings elsewhere (the modules' in
//! `addon::OperatorConfig`, the lambda controllers' and the deployer's in their flags).
//!
//! ```text
//!   environment + addon-operator's `start` flags (Given) ──► ProcessConfig ──► Host
//!     KUBE_CONFIG, KUBE_CONTEXT, ADDON_OPERATOR_NAMESPACE, KUBE_CLIENT_QPS/BURST
//!     ADDON_OPERATOR_LISTEN_ADDRESS/PORT, DEBUG_UNIX_SOCKET, DEBUG_HTTP_SERVER_ADDR
//!     ADDON_OPERATOR_PROMETHEUS_METRICS_PREFIX, BOSUN_JOURNAL_DIR, ADDON_OPERATOR_TMP_DIR
//!     BOSUN_MODULES
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use bosun_kube::ClientLimits;

/// The reference's default debug socket.
pub const DEFAULT_SOCKET: &str = "/var/run/addon-operator/debug.socket";

/// What the process as a whole listens on, writes to and connects with.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessConfig {
    /// Kubeconfig to use instead of the usual discovery (`KUBE_CONFIG`).
    pub kubeconfig: Option<PathBuf>,
    /// `KUBE_CONTEXT`: the kubeconfig's context bosun and Helm use (default: its current
    /// one; not used in a pod without a kubeconfig).
    pub kube_context: Option<String>,
    /// `ADDON_OPERATOR_NAMESPACE`; empty: the client's default namespace.
    pub namespace: String,
    /// `KUBE_CLIENT_QPS`/`KUBE_CLIENT_BURST`: the shared client's limit (its watches, the
    /// modules' ConfigMap and discovery, the deployer's requests).
    pub client_limits: ClientLimits,
    /// `ADDON_OPERATOR_LISTEN_ADDRESS:ADDON_OPERATOR_LISTEN_PORT` (`/healthz`, `/readyz`).
    pub listen: SocketAddr,
    /// `DEBUG_UNIX_SOCKET` (or `ADDON_OPERATOR_DEBUG_UNIX_SOCKET`): the debug endpoints.
    pub debug_socket: PathBuf,
    /// `DEBUG_HTTP_SERVER_ADDR`: the debug endpoints on TCP too (loopback unless
    /// `BOSUN_DEBUG_ALLOW_REMOTE=true`).
    pub debug_http: Option<SocketAddr>,
    /// `ADDON_OPERATOR_PROMETHEUS_METRICS_PREFIX`: put before every operator metric name
    /// (bosun's own `bosun_…` metrics and the hooks' metrics keep theirs).
    pub metrics_prefix: String,
    /// `BOSUN_JOURNAL_DIR`: the modules' journal, and each other subsystem's in a folder
    /// of its name.
    pub journal_dir: PathBuf,
    /// `ADDON_OPERATOR_TMP_DIR`: bosun's own temp folder (hooks' files, Helm's, charts).
    pub tmp_dir: PathBuf,
    /// `BOSUN_MODULES=false` switches the modules off: no engine, no modules' journal, no
    /// global hooks (the HTTP and debug endpoints and the other subsystems keep running).
    pub modules: bool,
    /// How hooks' output is logged (`LOG_NO_TIME`, `LOG_PROXY_HOOK_JSON`,
    /// `BOSUN_HOOK_LOG_LIMIT` and the flags over them).
    pub hook_logging: crate::logging::HookLogging,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig::in_cluster()
    }
}

impl ProcessConfig {
    /// In-cluster defaults.
    pub fn in_cluster() -> ProcessConfig {
        ProcessConfig {
            kubeconfig: None,
            kube_context: None,
            namespace: String::new(),
            // No limit unless asked (addon-operator's clients default to client-go's 5/10;
            // docs/deploy.md says why bosun's do not).
            client_limits: ClientLimits::UNLIMITED,
            listen: SocketAddr::from(([0, 0, 0, 0], 9650)),
            debug_socket: PathBuf::from(DEFAULT_SOCKET),
            debug_http: None,
            metrics_prefix: crate::prometheus::DEFAULT_PREFIX.into(),
            journal_dir: PathBuf::from("/var/lib/bosun/journal"),
            tmp_dir: PathBuf::from("/tmp/addon-operator"),
            modules: true,
            hook_logging: crate::logging::HookLogging::default(),
        }
    }

    /// Reads the variables `given` on the command line (addon-operator's `start` flags),
    /// then the environment; `defaults` supplies what is not set.
    pub fn from_env_and(defaults: &ProcessConfig, given: &Given) -> anyhow::Result<ProcessConfig> {
        let env = |names: &[&str]| given.var(names);
        let debug_http = match env(&["DEBUG_HTTP_SERVER_ADDR"]) {
            Some(v) => Some(parse_http_addr(
                &v,
                env(&["BOSUN_DEBUG_ALLOW_REMOTE"]).is_some_and(|v| v == "true"),
            )?),
            None => defaults.debug_http,
        };
        Ok(ProcessConfig {
            debug_http,
            // The logging flags (`cli::RunArgs::logging`) over the environment's.
            hook_logging: defaults.hook_logging.clone(),
            client_limits: limits_env(
                given,
                "KUBE_CLIENT_QPS",
                "KUBE_CLIENT_BURST",
                defaults.client_limits,
            )?,
            modules: match env(&["BOSUN_MODULES"]) {
                Some(v) => go_bool_true(&v),
                None => defaults.modules,
            },
            // Set but empty means no prefix.
            metrics_prefix: given
                .raw("ADDON_OPERATOR_PROMETHEUS_METRICS_PREFIX")
                .unwrap_or_else(|| defaults.metrics_prefix.clone()),
            debug_socket: given
                .var(&["ADDON_OPERATOR_DEBUG_UNIX_SOCKET", "DEBUG_UNIX_SOCKET"])
                .map(PathBuf::from)
                .unwrap_or_else(|| defaults.debug_socket.clone()),
            namespace: env(&["ADDON_OPERATOR_NAMESPACE"])
                .unwrap_or_else(|| defaults.namespace.clone()),
            tmp_dir: env(&["ADDON_OPERATOR_TMP_DIR"])
                .map(PathBuf::from)
                .unwrap_or_else(|| defaults.tmp_dir.clone()),
            journal_dir: env(&["BOSUN_JOURNAL_DIR"])
                .map(PathBuf::from)
                .unwrap_or_else(|| defaults.journal_dir.clone()),
            kubeconfig: env(&["KUBE_CONFIG"])
                .map(PathBuf::from)
                .or_else(|| defaults.kubeconfig.clone()),
            kube_context: env(&["KUBE_CONTEXT"]).or_else(|| defaults.kube_context.clone()),
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
}

/// The variables the command line gave, read before the environment's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Given(BTreeMap<&'static str, String>);

impl Given {
    /// The variables of `vars`, as the command line gave them.
    pub fn new(vars: BTreeMap<&'static str, String>) -> Given {
        Given(vars)
    }

    /// The first of `names` given on the command line, else the first set (non-empty) in
    /// the environment.
    pub fn var(&self, names: &[&str]) -> Option<String> {
        names
            .iter()
            .find_map(|n| self.0.get(n).cloned())
            .or_else(|| {
                names
                    .iter()
                    .find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
            })
    }

    /// `name` as given, set-but-empty included (a metrics prefix may be empty).
    pub fn raw(&self, name: &str) -> Option<String> {
        self.0
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    }
}

/// A client's limits from its two variables (client-go's meaning: `0` is client-go's
/// default, 5 and 10; a negative QPS no limit), or `default` when neither is set.
pub fn limits_env(
    given: &Given,
    qps: &str,
    burst: &str,
    default: ClientLimits,
) -> anyhow::Result<ClientLimits> {
    let (q, b) = (given.raw(qps), given.raw(burst));
    if q.as_deref().is_none_or(str::is_empty) && b.as_deref().is_none_or(str::is_empty) {
        return Ok(default);
    }
    Ok(ClientLimits::parse(
        (qps, q.as_deref()),
        (burst, b.as_deref()),
    )?)
}

/// Whether `value` is true as Go's `strconv.ParseBool` reads it.
pub(crate) fn go_bool_true(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// Reads `DEBUG_HTTP_SERVER_ADDR` (`host:port`, `:port` meaning every interface) and checks
/// it is loopback unless `allow_remote`.
pub fn parse_http_addr(value: &str, allow_remote: bool) -> anyhow::Result<SocketAddr> {
    let text = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.replacen("localhost:", "127.0.0.1:", 1),
    };
    let addr: SocketAddr = text.parse().map_err(|_| {
        anyhow::anyhow!("DEBUG_HTTP_SERVER_ADDR: {value:?} is not an address like 127.0.0.1:9652")
    })?;
    if !addr.ip().is_loopback() && !allow_remote {
        anyhow::bail!(
            "DEBUG_HTTP_SERVER_ADDR: {addr} is not a loopback address; the debug endpoints show \
             every value, secrets included, so bosun serves them on loopback only (set \
             BOSUN_DEBUG_ALLOW_REMOTE=true to serve them on {addr} anyway)"
        );
    }
    Ok(addr)
}
