//! The lambda controllers' wiring: metacontroller's CompositeController and
//! DecoratorController (`bosun_lambda`) on the cluster (`cluster.rs`: informers on the
//! shared watches, writes, Events), the webhooks (`webhook.rs`), their journal, and the
//! CRDs they need.

pub mod cluster;
pub mod flags;
mod subsystem;
pub mod webhook;
pub use subsystem::{JOURNAL, LambdaControllers};

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use bosun_lambda::children::ApplyStrategy;
use bosun_lambda::controller::Context;
use bosun_lambda::events::LambdaEvent;
use bosun_lambda::ports::HookFactory;
use bosun_lambda::registry::{self, Controllers, Registry, Settings};
use bosun_lambda::selector::Selector;

pub use bosun_kube::crds::install_crds;

/// The CRDs of `metacontroller.k8s.io`.
pub const CRDS: &str = include_str!("../../deploy/crds/metacontroller.yaml");

/// How the lambda controllers run (metacontroller's flags).
#[derive(Clone, Debug)]
pub struct LambdaConfig {
    /// Workers per controller (`--workers`).
    pub workers: usize,
    /// `--apply-strategy`.
    pub apply_strategy: ApplyStrategy,
    /// `--apply-strategy-ssa-field-manager`.
    pub field_manager: String,
    /// `--target-label-selector`.
    pub target_label_selector: String,
    /// `--events-qps`, `--events-burst`.
    pub events: bosun_kube::EventLimits,
    /// Install missing CRDs at start.
    pub install_crds: bool,
    /// Where the lambda journal lives.
    pub journal_dir: PathBuf,
    /// `--client-go-qps`, `--client-go-burst`: the limit of the client the controllers
    /// write with.
    pub client_limits: bosun_kube::ClientLimits,
    /// `--discovery-interval`: discovery fetched again this often (`None`: on a miss only).
    pub discovery_interval: Option<std::time::Duration>,
    /// `--cache-flush-interval`: the informers list again this often (`None`: after a
    /// watch error only).
    pub cache_flush_interval: Option<std::time::Duration>,
}

/// The running lambda controllers.
pub struct Lambda {
    pub controllers: Controllers,
    pub cluster: Arc<cluster::KubeCluster>,
    pub journal: Arc<bosun_journal::Journal<LambdaEvent>>,
    _registry: Registry,
}

/// Starts the registry of lambda controllers.
/// `client` is the one the controllers write with (`--client-go-qps`); they read through
/// the host's shared watches.
pub async fn start(
    host: &crate::host::Host,
    client: kube::Client,
    hooks: Arc<dyn HookFactory>,
    cfg: &LambdaConfig,
) -> anyhow::Result<Lambda> {
    let watches = host.watches.clone();
    webhook::describe_metrics();
    // Before the informers start: they take the interval when they do.
    if let Some(every) = cfg.cache_flush_interval {
        watches.relist_every(every);
    }
    if let Some(every) = cfg.discovery_interval {
        watches.rediscover_every(every);
    }
    if cfg.install_crds {
        let created = install_crds(&client, CRDS).await?;
        if !created.is_empty() {
            tracing::info!(crds = ?created, "installed the lambda controllers' CRDs");
        }
    }
    let target = Selector::parse(&cfg.target_label_selector).map_err(|e| {
        anyhow::anyhow!(
            "--target-label-selector {:?}: {e}",
            cfg.target_label_selector
        )
    })?;
    let journal = Arc::new(
        bosun_journal::Journal::<LambdaEvent>::open(&cfg.journal_dir).with_context(|| {
            format!(
                "cannot open the lambda journal {}",
                cfg.journal_dir.display()
            )
        })?,
    );
    let cluster = Arc::new(cluster::KubeCluster::new(
        watches,
        client,
        cfg.field_manager.clone(),
        cfg.events,
    ));
    let ctx = Context {
        cluster: cluster.clone(),
        watches: cluster.clone(),
        journal: Arc::new(host.sink(journal.clone())),
        workers: cfg.workers,
        mailboxes: host.mailboxes.clone(),
        gate: host.gate.clone(),
    };
    let registry = registry::run(
        ctx,
        hooks,
        Settings {
            target,
            strategy: cfg.apply_strategy,
        },
    )
    .await
    .context("cannot start the lambda controllers")?;
    Ok(Lambda {
        controllers: registry.controllers.clone(),
        cluster,
        journal,
        _registry: registry,
    })
}
