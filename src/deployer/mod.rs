//! The DeployItem deployer's wiring: landscaper's deployer contract (`bosun_deployer`) on
//! the cluster (`cluster.rs`: informers on the shared watches, writes, export Secrets,
//! Events), the clients of target clusters (`targets.rs`), its journal, and the CRDs.

pub mod cluster;
pub mod helm;
pub mod journal_log;
pub mod landscaper_config;
mod subsystem;
pub mod targets;
pub use subsystem::{DeployItems, JOURNAL};

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use bosun_deployer::controller::{Deployer, Settings};
use bosun_deployer::events::DeployerEvent;
use bosun_deployer::item::DeployerInfo;
use bosun_deployer::ports::DeployerType;
use bosun_deployer::target::TargetSelector;

use bosun_kube::crds::install_crds;

/// The CRDs of `landscaper.gardener.cloud` a deployer uses.
pub const CRDS: &str = include_str!("../../deploy/crds/landscaper.yaml");

/// How the deployer runs.
#[derive(Clone, Debug)]
pub struct DeployerConfig {
    /// Items reconciled at once.
    pub workers: usize,
    /// `status.deployer.identity`.
    pub identity: String,
    /// Target selectors (none: every target).
    pub target_selectors: Vec<TargetSelector>,
    /// Install missing CRDs at start.
    pub install_crds: bool,
    /// Landscaper's pickup and abort timeouts.
    pub timeouts: bosun_deployer::decide::LandscaperTimeouts,
    /// Lock items with SyncObjects held by this pod name (several replicas serving the
    /// same targets); `None`: no locks.
    pub lock_holder: Option<String>,
    /// The namespace of this bosun's pod and its peers (a lock's holder is alive while
    /// its pod exists there).
    pub pod_namespace: String,
    /// Where the deployer's journal lives.
    pub journal_dir: PathBuf,
    /// The items' cluster as `selfConfig` targets reach it (URL, CA as base64 of PEM).
    pub resource_cluster: Option<(String, Option<String>)>,
    /// The Helm engine of the helm type (the modules' settings).
    pub helm: crate::helm::EngineSettings,
    /// Where the helm type keeps charts and the targets' kubeconfigs.
    pub work_dir: PathBuf,
    /// `--deployer-contract`: which contract runs items without a jobID.
    pub contract: bosun_deployer::decide::Contract,
    /// Serve only this type (a landscaper Configuration file names one); `None`: all.
    pub only_type: Option<&'static str>,
    /// The helm type's own registry logins (docker configs: the `oci.configFiles` of a
    /// landscaper Configuration), tried after an item's Context's.
    pub registry_configs: Vec<serde_json::Value>,
}

/// The running deployer.
pub struct DeployerHandle {
    pub deployer: Deployer,
    pub cluster: Arc<cluster::KubeCluster>,
    pub journal: Arc<bosun_journal::Journal<DeployerEvent>>,
    mailboxes: bosun_runtime::mailbox::Mailboxes,
}

/// The name the deployer's work queue goes by among the actors.
pub const ACTOR: &str = "deployer";

impl Drop for DeployerHandle {
    fn drop(&mut self) {
        self.mailboxes.remove(ACTOR);
    }
}

/// The types this bosun serves.
pub fn types(
    clients: Arc<targets::TargetClients>,
    helm: Arc<helm::HelmCharts>,
    registry_configs: &[serde_json::Value],
) -> Vec<Arc<dyn DeployerType>> {
    let manifests = || bosun_deployer::manifest::ManifestType {
        targets: Arc::new(targets::KubeTargets::new(clients.clone())),
    };
    vec![
        Arc::new(bosun_deployer::mock::Mock),
        Arc::new(manifests()),
        Arc::new(bosun_deployer::helm::HelmType {
            helm,
            manifests: manifests(),
            registry_configs: Arc::from(registry_configs),
        }),
    ]
}

/// A default identity: `bosun-<host>-<unix seconds>`, as landscaper's `<name>-<seconds>`.
pub fn default_identity() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "bosun".into());
    format!("bosun-{host}-{secs}")
}

/// Starts the deployer on the shared watches.
pub async fn start(
    host: &crate::host::Host,
    cfg: &DeployerConfig,
) -> anyhow::Result<DeployerHandle> {
    let watches = host.watches.clone();
    if cfg.install_crds {
        let created = install_crds(watches.client(), CRDS).await?;
        if !created.is_empty() {
            tracing::info!(crds = ?created, "installed the deployer's CRDs");
        }
    }
    let journal = Arc::new(
        bosun_journal::Journal::<DeployerEvent>::open(&cfg.journal_dir).with_context(|| {
            format!(
                "cannot open the deployer journal {}",
                cfg.journal_dir.display()
            )
        })?,
    );
    let cluster = Arc::new(
        cluster::KubeCluster::new(watches, &cfg.pod_namespace)
            .with_pod_watch(cfg.lock_holder.is_some())
            .with_resource_cluster(cfg.resource_cluster.clone()),
    );
    let deployer = Deployer::start(
        cluster.clone(),
        Arc::new(host.sink(journal.clone())),
        {
            let clients = Arc::new(targets::TargetClients::default());
            let helm = Arc::new(helm::HelmCharts::new(
                cfg.helm.clone(),
                cfg.work_dir.clone(),
                clients.clone(),
            ));
            types(clients, helm, &cfg.registry_configs)
                .into_iter()
                .filter(|t| cfg.only_type.is_none_or(|only| t.name() == only))
                .collect()
        },
        Settings {
            workers: cfg.workers,
            deployer: DeployerInfo {
                identity: cfg.identity.clone(),
                name: "bosun".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            target_selectors: cfg.target_selectors.clone(),
            timeouts: cfg.timeouts,
            lock_holder: cfg.lock_holder.clone(),
            contract: cfg.contract,
            gate: host.gate.clone(),
        },
    )
    .await
    .context("cannot start the deployer")?;
    host.mailboxes.register(ACTOR, deployer.mailbox());
    Ok(DeployerHandle {
        deployer,
        cluster,
        journal,
        mailboxes: host.mailboxes.clone(),
    })
}
