//! The host: what the three subsystems share and start from. It owns the Kubernetes
//! client, the shared watches, the metrics, the actors' mailboxes and, on an HA leader, the
//! journal stream; once the subsystems are up it serves the HTTP endpoints and the debug
//! endpoints on what they registered.
//!
//! ```text
//!  Host::connect ── client, watches, metrics, mailboxes, journal stream (HA leader)
//!     ├─► addon::start(&host)     (BOSUN_MODULES)   ──► Views ─► host.serve(): /healthz,
//!     ├─► lambda::start(&host)    (BOSUN_LAMBDA)    ──► Views     /readyz, /metrics, debug
//!     └─► deployer::start(&host)  (BOSUN_DEPLOYER)  ──► Views
//! ```
//!
//! A subsystem switched off is not started at all; one that fails to start is named by
//! `/readyz` (the others run on). The endpoints are served once the modules have started
//! (at once when they are off); `/readyz` says which subsystem is still starting.

pub mod http;

use std::sync::Arc;

use anyhow::Context as _;
use bosun_journal::Journal;
use bosun_runtime::mailbox::Mailboxes;

use crate::addon::OperatorConfig;
use crate::journal_sink::JournalSink;
use crate::kubernetes::in_cluster::ClientSource;
use crate::watches::WatchManager;

/// What every subsystem starts from.
pub struct Host {
    /// The settings the subsystems share (listen addresses, debug socket, journal folder,
    /// kubeconfig, namespace, metrics prefix).
    pub cfg: OperatorConfig,
    /// One client for everything bosun asks the API server, so that all of it shows in
    /// the `kubernetes_client_request_*` metrics (Helm's requests go through its own).
    pub client: kube::Client,
    /// Where the client's credentials came from.
    pub source: ClientSource,
    /// `ADDON_OPERATOR_NAMESPACE`, else the client's default namespace.
    pub namespace: String,
    /// The API server as a kubeconfig names it: its URL and its CA (base64 of PEM; `None`:
    /// the system's CAs or plain HTTP). The deployer's `selfConfig` targets reach it with a
    /// service account's token.
    pub resource_cluster: (String, Option<String>),
    /// The shared watches: the modules' bindings and the informers of lambda and the
    /// deployer listen on them.
    pub watches: WatchManager,
    /// Every actor's mailbox, for `bosun actors` and the mailbox-depth metric.
    pub mailboxes: Mailboxes,
    /// On an HA leader: serves each journal to standbys as it is opened.
    pub stream: Option<crate::ha::JournalStream>,
    metrics: crate::prometheus::Metrics,
    /// The client's configuration, to make clients of other limits from.
    config: Option<kube::Config>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Host {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Host {
    /// Installs the metrics recorder and connects to the API server (refused credentials
    /// stop the start with a message that says so).
    pub async fn connect(
        cfg: &OperatorConfig,
        stream: Option<crate::ha::JournalStream>,
    ) -> anyhow::Result<Host> {
        // First, so that everything started below records into it.
        let metrics = crate::prometheus::install(&cfg.metrics_prefix);
        let (config, source) = kube_config(cfg).await?;
        let resource_cluster = (
            config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_string(),
            config.root_cert.as_deref().map(pem_base64),
        );
        let client =
            crate::kubernetes::measured_client(config.clone(), "shared", cfg.client_limits)
                .context("cannot build a Kubernetes client")?;
        tracing::info!(limit = %cfg.client_limits, "Kubernetes client (KUBE_CLIENT_QPS, KUBE_CLIENT_BURST)");
        let mut host = Host::with_client(cfg, client, source, resource_cluster, metrics);
        host.stream = stream;
        host.config = Some(config);
        Ok(host)
    }

    /// A client of its own for one purpose (`client` names it in the limiter's metric),
    /// with its own limit and connections; a host made on a given client shares that one.
    pub fn client_for(
        &self,
        client: &'static str,
        limits: crate::kubernetes::ClientLimits,
    ) -> anyhow::Result<kube::Client> {
        let Some(config) = &self.config else {
            return Ok(self.client.clone());
        };
        tracing::info!(client, limit = %limits, "Kubernetes client");
        crate::kubernetes::measured_client(config.clone(), client, limits)
            .with_context(|| format!("cannot build the {client} Kubernetes client"))
    }

    /// A host on a client made elsewhere (benchmarks and in-process tests: the sandbox's
    /// client). `resource_cluster` is what `selfConfig` targets reach.
    pub fn with_client(
        cfg: &OperatorConfig,
        client: kube::Client,
        source: ClientSource,
        resource_cluster: (String, Option<String>),
        metrics: crate::prometheus::Metrics,
    ) -> Host {
        let namespace = if cfg.namespace.is_empty() {
            client.default_namespace().to_string()
        } else {
            cfg.namespace.clone()
        };
        let tasks = vec![
            metrics.tick(),
            tokio::spawn(crate::runtime_config::global().clone().expire_forever()),
        ];
        Host {
            cfg: cfg.clone(),
            watches: WatchManager::new(client.clone()),
            client,
            source,
            namespace,
            resource_cluster,
            mailboxes: Mailboxes::default(),
            stream: None,
            metrics,
            config: None,
            tasks,
        }
    }

    /// The event sink of a subsystem's journal: on an HA leader served to standbys, and
    /// in the ack mode waiting for a standby's ack.
    pub fn sink<E>(&self, journal: Arc<Journal<E>>) -> JournalSink<E>
    where
        E: serde::Serialize
            + serde::de::DeserializeOwned
            + bosun_journal::Versioned
            + Send
            + Sync
            + 'static,
    {
        JournalSink::new(journal, self.stream.as_ref())
    }

    /// Serves `/healthz`, `/readyz`, `/metrics` (and the modules' routes), the extra
    /// listeners asked for, and the debug endpoints, on what the subsystems registered.
    pub async fn serve(&self, views: &Views, extra: &Listeners) -> anyhow::Result<Served> {
        let mut tasks = Vec::new();
        let routes = http::Routes::new(views.clone(), self.metrics.clone(), self.mailboxes.clone());
        let (listen, task) = http::serve(self.cfg.listen, routes.all()).await?;
        tasks.push(task);
        println!("bosun HTTP endpoints listening on http://{listen}");
        tracing::info!(%listen, "serving /healthz, /readyz, /metrics and /metrics/hooks");
        if let Some(addr) = extra.metrics {
            let (bound, task) = http::serve(addr, routes.metrics())
                .await
                .map_err(|e| anyhow::anyhow!("--metrics-address: {e}"))?;
            tasks.push(task);
            println!("bosun /metrics also on http://{bound} (--metrics-address)");
            tracing::info!(listen = %bound, "serving /metrics (--metrics-address)");
        }
        if let Some(addr) = extra.probes {
            let (bound, task) = http::serve(addr, routes.probes())
                .await
                .map_err(|e| anyhow::anyhow!("--health-probe-bind-address: {e}"))?;
            tasks.push(task);
            println!(
                "bosun /healthz and /readyz also on http://{bound} (--health-probe-bind-address)"
            );
            tracing::info!(listen = %bound, "serving /healthz and /readyz (--health-probe-bind-address)");
        }
        let debug = crate::debug::serve(
            &crate::debug::DebugConfig {
                socket: self.cfg.debug_socket.clone(),
                http: self.cfg.debug_http,
            },
            views.clone(),
            self.mailboxes.clone(),
        )
        .await;
        if let Some(socket) = &debug.socket {
            println!("bosun debug endpoints on unix socket {}", socket.display());
        }
        if let Some(addr) = debug.http {
            println!("bosun debug endpoints on http://{addr}");
        }
        Ok(Served {
            listen,
            http: tasks,
            debug,
        })
    }
}

/// Listeners besides the operator's (metacontroller's `--metrics-address` and
/// `--health-probe-bind-address`).
#[derive(Clone, Debug, Default)]
pub struct Listeners {
    /// `/metrics` only.
    pub metrics: Option<std::net::SocketAddr>,
    /// `/healthz` and `/readyz` only.
    pub probes: Option<std::net::SocketAddr>,
}

/// The HTTP and debug listeners (stopped when dropped).
pub struct Served {
    /// Where `/healthz`, `/readyz` and `/metrics` are served.
    pub listen: std::net::SocketAddr,
    http: Vec<tokio::task::JoinHandle<()>>,
    /// The debug endpoints (the socket is removed when dropped).
    pub debug: crate::debug::DebugServer,
}

impl Drop for Served {
    fn drop(&mut self) {
        for t in &self.http {
            t.abort();
        }
    }
}

/// The modules as the endpoints read them.
#[derive(Clone)]
pub struct ModulesView {
    /// The engine.
    pub engine: Arc<bosun_addon::engine::Engine>,
    /// The modules' journal.
    pub journal: Arc<Journal<bosun_addon::Event>>,
}

/// What the subsystems show on the HTTP and debug endpoints. The endpoints are served
/// once the modules have started (before them nothing could answer about modules); lambda
/// and the deployer register as they start, and `/readyz` waits for them.
#[derive(Clone, Default)]
pub struct Views {
    inner: Arc<std::sync::RwLock<Parts>>,
}

/// The parts of [`Views`] at one moment.
#[derive(Clone, Default)]
pub struct Parts {
    /// The modules, unless switched off.
    pub modules: Option<ModulesView>,
    /// The lambda controllers, once started.
    pub lambda: Option<bosun_lambda::registry::Controllers>,
    /// The deployer, once started.
    pub deployer: Option<bosun_deployer::controller::DeployerView>,
    /// The health of every journal written, by subsystem.
    pub journals: Vec<(&'static str, bosun_journal::Health)>,
    /// Subsystems switched on and still starting.
    pub starting: Vec<&'static str>,
    /// Subsystems that did not start, and why (`/readyz` fails naming them).
    pub failed: Vec<(&'static str, String)>,
}

impl Views {
    /// What the endpoints show now.
    pub fn get(&self) -> Parts {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes what they show.
    pub fn update(&self, change: impl FnOnce(&mut Parts)) {
        change(&mut self.inner.write().unwrap_or_else(|p| p.into_inner()));
    }

    /// `name` started (or failed to): it leaves the starting list.
    pub fn started(&self, name: &'static str, outcome: Result<(), String>) {
        self.update(|p| {
            p.starting.retain(|s| *s != name);
            if let Err(e) = outcome {
                p.failed.push((name, e));
            }
        });
    }
}

/// The Kubernetes client configuration and where it came from: `KUBE_CONFIG`, else the
/// pod's service account, else `KUBECONFIG` or `~/.kube/config`. Refused credentials stop
/// the start with a message that says so.
pub async fn kube_config(cfg: &OperatorConfig) -> anyhow::Result<(kube::Config, ClientSource)> {
    let (config, source) = crate::kubernetes::in_cluster::client_config(
        cfg.kubeconfig.as_deref(),
        cfg.kube_context.as_deref(),
    )
    .await?;
    crate::kubernetes::in_cluster::check_credentials(&config, &source).await?;
    Ok((config, source))
}

/// DER certificates as a kubeconfig's `certificate-authority-data`: base64 of their PEM.
fn pem_base64(certs: &[Vec<u8>]) -> String {
    use base64::Engine as _;
    let b64 = &base64::engine::general_purpose::STANDARD;
    let mut pem = String::new();
    for der in certs {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = b64.encode(der);
        for line in body.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    b64.encode(pem)
}

#[cfg(test)]
mod tests {
    #[test]
    fn certificates_become_a_kubeconfig_ca_of_pem_blocks() {
        use base64::Engine as _;
        let der = vec![7u8; 100];
        let text = base64::engine::general_purpose::STANDARD
            .decode(super::pem_base64(&[der.clone(), der]))
            .map(String::from_utf8);
        let Ok(Ok(pem)) = text else {
            panic!("not base64 of text: {text:?}")
        };
        assert_eq!(pem.matches("-----BEGIN CERTIFICATE-----\n").count(), 2);
        assert_eq!(pem.matches("-----END CERTIFICATE-----\n").count(), 2);
        assert!(pem.lines().all(|l| l.len() <= 64), "{pem}");
    }
}
