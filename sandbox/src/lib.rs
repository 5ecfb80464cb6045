//! The sandbox: bosun's own single-process Kubernetes API server, persisted in sled.
//!
//! ```text
//!  serve (HTTP or TLS) ─► api (routing, verbs, watch) ─► objects (semantics) ─► store (memory + sled)
//!                                                      gc (owner references, namespaces) ◄─┘
//! ```
//! It serves discovery, OpenAPI, built-in resources stored schemaless, CRDs, and the
//! object semantics clients rely on. `docs/sandbox.md` lists known differences from
//! kube-apiserver.

pub mod api;
pub mod apply;
pub mod defaults;
pub mod discovery;
pub mod faults;
pub mod gc;
pub mod lock;
pub mod objects;
pub mod openapi;
pub mod protobuf;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod serve;
pub mod status;
pub mod store;
pub mod strategic;
pub mod table;
pub mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde_json::json;
use tokio::sync::{Notify, watch};

use store::{ResKey, Store};

/// How to start the sandbox.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// Listen address (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Storage folder.
    pub data: PathBuf,
    /// Kubeconfig to write, if any.
    pub kubeconfig: Option<PathBuf>,
    /// Optional static bearer token.
    pub token: Option<String>,
    /// How many changes are kept for watches to resume from (older ones answer 410).
    pub watch_history: usize,
    /// Serve a non-loopback address without a token (refused otherwise).
    pub allow_unauthenticated: bool,
}

/// Why the sandbox refuses to start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// A non-loopback address without a token and without consent.
    #[error(
        "refusing to serve {listen} without a token: it is not a loopback address, and anyone \
         who can reach it could read and change every object, Secrets included; set --token \
         (or BOSUN_SANDBOX_TOKEN), listen on 127.0.0.1, or pass --allow-unauthenticated if you \
         really mean it"
    )]
    Unauthenticated {
        /// The address asked for.
        listen: SocketAddr,
    },
}

/// How the sandbox serves, beyond [`SandboxConfig`].
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Serve HTTPS with a CA made at start, written to `<data>/ca.crt` and into the
    /// kubeconfig.
    pub tls: bool,
    /// How long to wait for the storage lock a previous sandbox still holds.
    pub lock_wait: std::time::Duration,
    /// How long a new connection may take to send its first whole request head.
    pub header_read_timeout: std::time::Duration,
    /// Injected delays and refusals (reliability tests; off by default).
    pub faults: Arc<faults::Faults>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            tls: false,
            lock_wait: lock::DEFAULT_LOCK_WAIT,
            header_read_timeout: serve::HEADER_READ_TIMEOUT,
            faults: Arc::default(),
        }
    }
}

/// The file the CA certificate of a TLS sandbox is written to, in its data folder.
pub(crate) const CA_FILE: &str = "ca.crt";

impl SandboxConfig {
    /// A sandbox storing in `data`, on a free loopback port, without a token or kubeconfig.
    pub fn loopback(data: PathBuf) -> SandboxConfig {
        SandboxConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data,
            kubeconfig: None,
            token: None,
            watch_history: store::DEFAULT_HISTORY,
            allow_unauthenticated: false,
        }
    }
}

/// A running sandbox; dropping it does not stop it, [`RunningSandbox::shutdown`] does.
pub struct RunningSandbox {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// `http://addr`, or `https://addr` with TLS.
    pub url: String,
    /// The CA certificate (PEM) clients trust, with TLS.
    pub ca_pem: Option<String>,
    /// Where it was written (`<data>/ca.crt`), with TLS.
    pub ca_file: Option<PathBuf>,
    store: Arc<Store>,
    stop: Arc<watch::Sender<bool>>,
    server: tokio::task::JoinHandle<()>,
    gc: tokio::task::JoinHandle<()>,
    flusher: tokio::task::JoinHandle<()>,
}

const BOOT_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Starts the sandbox (plain HTTP) and returns once it accepts connections.
pub async fn start(config: SandboxConfig) -> anyhow::Result<RunningSandbox> {
    start_with(config, ServeOptions::default()).await
}

/// Starts the sandbox as `options` say and returns once it accepts connections.
pub async fn start_with(
    mut config: SandboxConfig,
    options: ServeOptions,
) -> anyhow::Result<RunningSandbox> {
    // An empty token is no token (`--token ''` must not open the server to everyone).
    if config.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
        config.token = None;
    }
    let loopback = config.listen.ip().is_loopback();
    if !loopback && config.token.is_none() {
        if !config.allow_unauthenticated {
            return Err(StartError::Unauthenticated {
                listen: config.listen,
            }
            .into());
        }
        tracing::warn!(listen = %config.listen, "the sandbox serves a non-loopback address without a token (--allow-unauthenticated)");
    } else if !loopback {
        tracing::warn!(listen = %config.listen, "the sandbox listens on a non-loopback address");
    }
    lock::wait_for_store(&config.data, options.lock_wait).await?;
    let store = Store::open(&config.data, config.watch_history)
        .map_err(|e| anyhow::anyhow!("{}", e.message))
        .with_context(|| format!("opening sandbox storage in {}", config.data.display()))?;
    bootstrap(&store).map_err(|e| anyhow::anyhow!("bootstrapping namespaces: {}", e.message))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    let tls = if options.tls {
        Some(tls::generate_server_tls(addr.ip())?)
    } else {
        None
    };
    let url = format!("{}://{addr}", if tls.is_some() { "https" } else { "http" });
    let ca_pem = tls.as_ref().map(|t| t.ca_pem.clone());
    let ca_file = match &ca_pem {
        Some(pem) => {
            let path = config.data.join(CA_FILE);
            bosun_platform::write_private_file(&path, pem.as_bytes())
                .with_context(|| format!("writing the CA certificate {}", path.display()))?;
            Some(path)
        }
        None => None,
    };
    if let Some(path) = &config.kubeconfig {
        write_kubeconfig_with_ca(path, &url, config.token.as_deref(), ca_pem.as_deref())
            .with_context(|| format!("writing kubeconfig {}", path.display()))?;
    }
    let stop = Arc::new(watch::Sender::new(false));
    let wake = Arc::new(Notify::new());
    let app = Arc::new(api::App {
        store: store.clone(),
        gc: wake.clone(),
        token: config.token.clone(),
        issued: Default::default(),
        server_address: addr.to_string(),
        loopback_hosts_only: loopback,
        stopping: stop.clone(),
        faults: options.faults.clone(),
    });
    let gc = tokio::spawn(gc::run(store.clone(), wake.clone()));
    let flusher = tokio::spawn(store.clone().run_flusher());
    // Objects may be left half-deleted by an earlier run: collect once at start.
    wake.notify_one();
    let router = api::router(app);
    let server = tokio::spawn(serve::serve(
        listener,
        router,
        tls.map(|t| t.config),
        options.header_read_timeout,
        stop.subscribe(),
    ));
    tracing::info!(%url, data = %config.data.display(), tls = ca_pem.is_some(), "sandbox API server listening");
    Ok(RunningSandbox {
        addr,
        url,
        ca_pem,
        ca_file,
        store,
        stop,
        server,
        gc,
        flusher,
    })
}

impl RunningSandbox {
    /// Stops serving and flushes storage.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        // Open watches end on this signal and their connections close after the response,
        // so the server stops at once; the timeout only guards against a client that
        // stops reading in the middle of a response.
        self.stop.send_replace(true);
        if tokio::time::timeout(std::time::Duration::from_secs(5), &mut self.server)
            .await
            .is_err()
        {
            tracing::warn!("a sandbox connection did not finish its response in 5s; cut");
        }
        self.server.abort();
        self.gc.abort();
        self.store.wait_durable().await;
        self.flusher.abort();
        self.store
            .flush()
            .await
            .map_err(|e| anyhow::anyhow!("flushing sandbox storage: {}", e.message))?;
        Ok(())
    }
}

fn bootstrap(store: &Store) -> Result<(), status::ApiError> {
    let res = ResKey {
        group: String::new(),
        plural: "namespaces".into(),
    };
    let info = resources::builtin_resources()
        .into_iter()
        .find(|r| r.plural == "namespaces")
        .ok_or_else(|| {
            status::ApiError::internal("namespaces missing from the built-in resources")
        })?;
    let writer = objects::Writer {
        manager: "bosun-sandbox".into(),
        dry_run: false,
        operation: "Update",
    };
    let mut inner = store.lock();
    for ns in BOOT_NAMESPACES {
        if inner.get(&res, "", ns).is_none() {
            objects::create(
                &mut inner,
                &info,
                None,
                json!({"metadata": {"name": ns}}),
                &writer,
            )?;
        }
    }
    store.commit(inner)
}

/// Writes a kubeconfig with one cluster, user and context named `bosun-sandbox`, `0600`
/// (it may carry the token), creating missing folders `0700`, trusting the CA certificate
/// `ca_pem` (PEM) when given.
pub(crate) fn write_kubeconfig_with_ca(
    path: &Path,
    url: &str,
    token: Option<&str>,
    ca_pem: Option<&str>,
) -> std::io::Result<()> {
    use base64::Engine as _;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        bosun_platform::create_private_dir(dir)?;
    }
    let user = match token {
        Some(t) => format!("    token: {t}\n"),
        None => "    {}\n".to_string(),
    };
    let ca = match ca_pem {
        Some(pem) => format!(
            "    certificate-authority-data: {}\n",
            base64::engine::general_purpose::STANDARD.encode(pem)
        ),
        None => String::new(),
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: bosun-sandbox\n  cluster:\n    server: {url}\n{ca}contexts:\n- name: bosun-sandbox\n  context:\n    cluster: bosun-sandbox\n    user: bosun-sandbox\n    namespace: default\ncurrent-context: bosun-sandbox\nusers:\n- name: bosun-sandbox\n  user:\n{user}"
    );
    bosun_platform::write_private_file(path, text.as_bytes())
}

/// Serves as `options` say until SIGINT/SIGTERM, then shuts down cleanly.
pub async fn serve_forever_with(
    config: SandboxConfig,
    options: ServeOptions,
) -> anyhow::Result<()> {
    let kubeconfig = config.kubeconfig.clone();
    let running = start_with(config, options).await?;
    // The first stdout line tells scripts and tests where to connect.
    println!("listening on {}", running.url);
    if let Some(path) = &running.ca_file {
        println!("CA certificate written to {}", path.display());
    }
    if let Some(path) = kubeconfig {
        println!("kubeconfig written to {}", path.display());
        println!(
            "try: kubectl --kubeconfig {} get namespaces",
            path.display()
        );
    }
    bosun_platform::shutdown_signal().await;
    tracing::info!("shutting down the sandbox");
    running.shutdown().await
}
