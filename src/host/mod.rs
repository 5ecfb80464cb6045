//! The host: what the three subsystems share and start from. It owns the Kubernetes
//! client, the shared watches, the metrics, the actors' mailboxes and, on an HA leader, the
//! journal stream, and the `Views` the subsystems register as they start, which the
//! endpoints (`crate::endpoints`) serve. It depends on no subsystem.
//!
//! ```text
//!  Host::connect ── client, watches, metrics, mailboxes, journal stream (HA leader)
//!     ├─► modules  Subsystem::start(&host)  (BOSUN_MODULES)  ──► Views ─► endpoints::serve:
//!     ├─► lambda   Subsystem::start(&host)  (BOSUN_LAMBDA)   ──► Views    /healthz, /readyz,
//!     └─► deployer Subsystem::start(&host)  (BOSUN_DEPLOYER) ──► Views    /metrics, debug
//! ```
//!
//! Each subsystem is one [`Subsystem`] (`subsystem.rs`); the host starts whatever is
//! registered. [`Parts`] keeps each one's [`SubsystemView`] by its name: the endpoints
//! every subsystem adds to (`/actors`, `/explain`) loop over them, and an endpoint of one
//! subsystem finds that one's own view by its type.
//!
//! A subsystem switched off is not started at all; one that fails to start is named by
//! `/readyz` (the others run on). The endpoints are served once the modules have started
//! (at once when they are off); `/readyz` says which subsystem is still starting.

pub mod process;
mod subsystem;

use std::sync::Arc;

use anyhow::Context as _;
use bosun_journal::Journal;
use bosun_runtime::mailbox::Mailboxes;
use futures::future::BoxFuture;

use crate::explanation::{Explanation, Subject};
use crate::journal_sink::JournalSink;
use bosun_kube::WatchManager;
use bosun_kube::in_cluster::ClientSource;

pub use process::ProcessConfig;
pub use subsystem::{Handle, Subsystem};

/// What the host is made from: the process's configuration and the run's runtime
/// parameters.
#[derive(Clone, Debug, Default)]
pub struct HostConfig {
    /// The process's configuration (the client's, the listeners', the folders').
    pub process: ProcessConfig,
    /// The run's runtime parameters (`bosun config list|set`).
    pub runtime_config: Arc<crate::runtime_config::RuntimeConfig>,
    /// The run's work gate (a graceful stop or a fence closes it).
    pub gate: bosun_runtime::lifecycle::WorkGate,
}

/// What every subsystem starts from.
pub struct Host {
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
    /// The work gate every subsystem's queues are on: a graceful stop or a fence stops
    /// them all at once and waits for what runs.
    pub gate: bosun_runtime::lifecycle::WorkGate,
    /// On an HA leader: serves each journal to standbys as it is opened.
    pub stream: Option<crate::ha::JournalStream>,
    /// The runtime parameters: the subsystems register theirs, the debug endpoints list
    /// and set them.
    pub runtime_config: Arc<crate::runtime_config::RuntimeConfig>,
    /// The process's configuration it was made from (folders, listeners, the client's).
    pub process: ProcessConfig,
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
    /// `metrics` is the installed recorder (installed first, so that everything started
    /// after records into it).
    pub async fn connect(
        cfg: &HostConfig,
        stream: Option<crate::ha::JournalStream>,
        metrics: crate::prometheus::Metrics,
    ) -> anyhow::Result<Host> {
        let (config, source) = kube_config(
            cfg.process.kubeconfig.as_deref(),
            cfg.process.kube_context.as_deref(),
        )
        .await?;
        let resource_cluster = (
            config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_string(),
            config.root_cert.as_deref().map(pem_base64),
        );
        let limits = cfg.process.client_limits;
        let client = bosun_kube::measured_client(config.clone(), "shared", limits)
            .context("cannot build a Kubernetes client")?;
        tracing::info!(limit = %limits, "Kubernetes client (KUBE_CLIENT_QPS, KUBE_CLIENT_BURST)");
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
        limits: bosun_kube::ClientLimits,
    ) -> anyhow::Result<kube::Client> {
        let Some(config) = &self.config else {
            return Ok(self.client.clone());
        };
        tracing::info!(client, limit = %limits, "Kubernetes client");
        bosun_kube::measured_client(config.clone(), client, limits)
            .with_context(|| format!("cannot build the {client} Kubernetes client"))
    }

    /// A host on a client made elsewhere (benchmarks and in-process tests: the sandbox's
    /// client). `resource_cluster` is what `selfConfig` targets reach.
    pub fn with_client(
        cfg: &HostConfig,
        client: kube::Client,
        source: ClientSource,
        resource_cluster: (String, Option<String>),
        metrics: crate::prometheus::Metrics,
    ) -> Host {
        let namespace = if cfg.process.namespace.is_empty() {
            client.default_namespace().to_string()
        } else {
            cfg.process.namespace.clone()
        };
        let tasks = vec![
            metrics.tick(),
            tokio::spawn(cfg.runtime_config.clone().expire_forever()),
        ];
        Host {
            watches: WatchManager::new(client.clone()),
            client,
            source,
            namespace,
            resource_cluster,
            mailboxes: Mailboxes::default(),
            gate: cfg.gate.clone(),
            stream: None,
            runtime_config: cfg.runtime_config.clone(),
            process: cfg.process.clone(),
            metrics,
            config: None,
            tasks,
        }
    }

    /// The installed metrics recorder.
    pub fn metrics(&self) -> &crate::prometheus::Metrics {
        &self.metrics
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
    /// Each subsystem's view by its name, in the order of `cli::subsystems` (the order
    /// the views every subsystem adds to list them in).
    subsystems: Vec<(&'static str, Option<Arc<dyn SubsystemView>>)>,
    /// The health of every journal written, by subsystem.
    pub journals: Vec<(&'static str, bosun_journal::Health)>,
    /// Subsystems switched on and still starting.
    pub starting: Vec<&'static str>,
    /// Subsystems that did not start, and why (`/readyz` fails naming them).
    pub failed: Vec<(&'static str, String)>,
    /// With high availability, this replica's state (role, lease holder, each journal's
    /// standbys); `None` for a single replica.
    pub ha: Option<HaStatus>,
}

impl Parts {
    /// Shows `view` as subsystem `name`'s (`None`: nothing yet), in place of what it
    /// showed; a subsystem shown for the first time goes last.
    pub fn show(&mut self, name: &'static str, view: Option<Arc<dyn SubsystemView>>) {
        match self.subsystems.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = view,
            None => self.subsystems.push((name, view)),
        }
    }

    /// The subsystems' views, in order.
    pub fn views(&self) -> impl Iterator<Item = &Arc<dyn SubsystemView>> {
        self.subsystems.iter().filter_map(|(_, v)| v.as_ref())
    }

    /// The view of type `T` (an endpoint of one subsystem asks for its own view).
    pub fn view<T: 'static>(&self) -> Option<&T> {
        self.views().find_map(|v| v.as_any().downcast_ref::<T>())
    }
}

/// What one subsystem shows on the endpoints: its part of the views every subsystem adds
/// to (`/actors`, `/explain`), and itself for the endpoints that are its own alone.
pub trait SubsystemView: Send + Sync {
    /// Its part of `/actors` (`None`: it adds nothing).
    fn actors(&self) -> Option<ActorsPart> {
        None
    }

    /// The path of its own debug page (`/lambda/controllers`), answered in JSON, YAML or
    /// text with its [`Self::actors`] part alone; `None`: it has none.
    fn page(&self) -> Option<&'static str> {
        None
    }

    /// The kinds of its actors, by the first segment of their mailboxes' names
    /// (`("lambda", "lambda-controller")`), which `/actors` shows.
    fn actor_kinds(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// What its journal says of `subject` (reads the journal: called off the async
    /// threads); `Err`: why its journal could not be read.
    fn explain(&self, _subject: &Subject, _e: &mut Explanation) -> Result<(), String> {
        Ok(())
    }

    /// What it knows now of `subject`, at once.
    fn now(&self, _subject: &Subject, _e: &mut Explanation) {}

    /// What it asks its actors about `subject`, after every subsystem's [`Self::now`].
    fn ask<'a>(&'a self, _subject: &'a Subject, _e: &'a mut Explanation) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// Itself, for [`Parts::view`].
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A subsystem's part of `/actors`.
pub struct ActorsPart {
    /// The field of the answer its data goes into.
    pub key: &'static str,
    /// Its data.
    pub data: serde_json::Value,
    /// Its text, after the actors'.
    pub text: String,
}

/// This replica's high-availability state, read when asked.
pub type HaStatus = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

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

/// The Kubernetes client configuration and where it came from: `kubeconfig`, else the
/// pod's service account, else `KUBECONFIG` or `~/.kube/config` (`context` picks the
/// kubeconfig's context). Refused credentials stop the start with a message that says so.
pub async fn kube_config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> anyhow::Result<(kube::Config, ClientSource)> {
    let (config, source) = bosun_kube::in_cluster::client_config(kubeconfig, context).await?;
    bosun_kube::in_cluster::check_credentials(&config, &source).await?;
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
