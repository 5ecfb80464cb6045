//! High availability: several replicas, one leader on a `coordination.k8s.io/v1` Lease,
//! standbys that follow the leader's journals, and a graceful stop.
//!
//! ```text
//!  every replica: Elector (lease.rs) ── holder identity ──► leader's journal URL
//!  standby: followers (replication.rs) copy the leader's journals into their own;
//!           /healthz, /readyz (ready while following), /ha/status
//!  takeover: followers close the journals → every subsystem starts from them (replay)
//!  leader:  Replication serves its journals to standbys; Elector::hold fences: no renewal
//!           for the renew deadline, or another holder → all work stops, the process exits
//!  SIGTERM: no new tasks, running ones get the grace period, journals flushed, lease released
//! ```

pub mod auth;
pub mod lease;
pub mod replication;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::json;
use tokio::sync::watch;

use self::lease::{Elector, Timings};
use self::replication::{FollowArgs, LeaderAt, Replication, Source, Statuses};

/// Leader election and journal following (addon-operator's and metacontroller's settings).
#[derive(Debug, Clone, clap::Args)]
pub struct HaArgs {
    /// Run with leader election: only the replica holding the Lease runs hooks, syncs and
    /// deploys; the others follow its journal (`ADDON_OPERATOR_HA`).
    #[arg(
        long = "leader-election",
        env = "ADDON_OPERATOR_HA",
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub leader_election: bool,
    /// The Lease's namespace (default: `ADDON_OPERATOR_NAMESPACE`).
    #[arg(long, env = "BOSUN_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// The Lease's name.
    #[arg(
        long,
        env = "BOSUN_LEADER_ELECTION_ID",
        default_value = "addon-operator-leader-election"
    )]
    pub leader_election_id: String,
    /// The lock kind; only `leases` (metacontroller's default) is supported.
    #[arg(long, default_value = "leases")]
    pub leader_election_resource_lock: String,
    /// How long a lease is valid after its last renewal.
    #[arg(long, env = "BOSUN_HA_LEASE_DURATION", default_value = "35s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops all work (fencing).
    #[arg(long, env = "BOSUN_HA_RENEW_DEADLINE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby tries.
    #[arg(long, env = "BOSUN_HA_RETRY_PERIOD", default_value = "10s", value_parser = humantime::parse_duration)]
    pub retry_period: Duration,
    /// Where the journal stream for standbys listens (pod network).
    #[arg(long, env = "BOSUN_HA_LISTEN", default_value = "0.0.0.0:9651")]
    pub ha_listen: SocketAddr,
    /// The journal stream's token, shared by all replicas (from a Secret); it never crosses
    /// the wire. Without it, standbys do not follow the journal (leader election still
    /// works).
    #[arg(long, env = "BOSUN_HA_TOKEN", hide_env_values = true)]
    pub ha_token: Option<String>,
    /// The leader acknowledges a journal record only once a standby holds it too.
    #[arg(
        long,
        env = "BOSUN_HA_SYNC_ACK",
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub ha_sync_ack: bool,
    /// The headless Service of the StatefulSet: the leader is reached at
    /// `<pod>.<service>.<namespace>.svc` (default: the pod IP in its identity).
    #[arg(long, env = "BOSUN_HA_SERVICE")]
    pub ha_service: Option<String>,
    /// On SIGTERM, how long running hooks and Helm operations may go on before they are
    /// killed.
    #[arg(long, env = "BOSUN_SHUTDOWN_GRACE", default_value = "25s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
}

/// The settings of a replica in HA mode.
#[derive(Clone, Debug)]
pub struct HaConfig {
    /// The Lease.
    pub lease: String,
    /// Its namespace.
    pub namespace: String,
    /// `<pod>.<ip-dashed>.<namespace>.pod`, as addon-operator names itself.
    pub identity: String,
    /// Lease timings.
    pub timings: Timings,
    /// The journal stream's listener.
    pub listen: SocketAddr,
    /// The journal stream's token.
    pub token: Option<String>,
    /// The ack mode.
    pub sync_ack: bool,
    /// The headless Service, if the leader is reached through it.
    pub service: Option<String>,
}

impl HaArgs {
    /// The HA settings, or `None` without leader election. `listen` is the operator's
    /// HTTP address, whose IP names the pod when it is not a wildcard.
    pub fn config(&self, namespace: &str, listen: SocketAddr) -> anyhow::Result<Option<HaConfig>> {
        if !self.leader_election {
            return Ok(None);
        }
        if self.leader_election_resource_lock != "leases" {
            anyhow::bail!(
                "--leader-election-resource-lock={}: only \"leases\" is supported",
                self.leader_election_resource_lock
            );
        }
        let timings = Timings {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        };
        timings
            .check()
            .map_err(|e| anyhow::anyhow!("leader election timings: {e}"))?;
        // A pod's host name is its name: metacontroller's manifests set no variable for it.
        let pod = std::env::var("ADDON_OPERATOR_POD")
            .ok()
            .filter(|p| !p.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .filter(|p| !p.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .filter(|p| !p.is_empty())
            .context(
                "leader election needs the pod's name in ADDON_OPERATOR_POD (or a host name)",
            )?;
        let ip = Some(listen.ip())
            .filter(|ip| !ip.is_unspecified())
            .or_else(|| std::env::var("POD_IP").ok().and_then(|v| v.parse().ok()))
            .unwrap_or(listen.ip());
        let namespace = self
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| namespace.to_string());
        let token = self.ha_token.clone().filter(|t| !t.is_empty());
        if token
            .as_deref()
            .is_some_and(|t| t.starts_with("REPLACE-ME"))
        {
            anyhow::bail!(
                "BOSUN_HA_TOKEN is the placeholder of deploy/secret.yaml: put a random token into the Secret bosun-journal-token (docs/deploy.md)"
            );
        }
        if token.is_none() {
            tracing::warn!(
                "BOSUN_HA_TOKEN is not set: standbys will not follow the leader's journal, so a failover loses memory values and queued tasks as addon-operator's does"
            );
        }
        if self.ha_sync_ack && token.is_none() {
            anyhow::bail!("BOSUN_HA_SYNC_ACK needs BOSUN_HA_TOKEN (the standbys' journal stream)");
        }
        Ok(Some(HaConfig {
            lease: self.leader_election_id.clone(),
            identity: identity(&pod, ip, &namespace),
            namespace,
            timings,
            listen: self.ha_listen,
            token,
            sync_ack: self.ha_sync_ack,
            service: self.ha_service.clone().filter(|s| !s.is_empty()),
        }))
    }
}

/// addon-operator's identity: `<pod>.<ip with dashes>.<namespace>.pod`.
fn identity(pod: &str, ip: IpAddr, namespace: &str) -> String {
    let dashed = ip.to_string().replace(['.', ':'], "-");
    format!("{pod}.{dashed}.{namespace}.pod")
}

/// Where the holder `identity` serves its journals.
fn journal_url(identity: &str, cfg: &HaConfig) -> Option<String> {
    let mut labels = identity.split('.');
    let pod = labels.next()?;
    let port = cfg.listen.port();
    if let Some(service) = &cfg.service {
        return Some(format!(
            "http://{pod}.{service}.{}.svc:{port}",
            cfg.namespace
        ));
    }
    let dashed = labels.next()?;
    let ip: IpAddr = dashed.replace('-', ".").parse().ok().or_else(|| {
        // IPv6: dashes were colons.
        dashed.replace('-', ":").parse().ok()
    })?;
    Some(match ip {
        IpAddr::V4(v4) => format!("http://{v4}:{port}"),
        IpAddr::V6(v6) => format!("http://[{v6}]:{port}"),
    })
}

/// The replica's journal stream and which journal folder goes by which name on it: handed
/// to the leader's start, which hands it to each journal it opens.
#[derive(Clone)]
pub struct JournalStream {
    replication: Replication,
    names: Arc<BTreeMap<PathBuf, &'static str>>,
    sync_ack: bool,
    shared: Arc<Shared>,
    identity: String,
}

impl JournalStream {
    /// This replica's high-availability state as the web view and `/ha` show it: role,
    /// identity, the lease's holder, and for each journal how many standbys stream it now
    /// and (in the ack mode) the highest record a standby has made durable.
    pub fn status(&self) -> Arc<dyn Fn() -> serde_json::Value + Send + Sync> {
        let stream = self.clone();
        Arc::new(move || {
            let mut status = status_json(&stream.shared);
            status["identity"] = serde_json::json!(stream.identity);
            status["ackMode"] = serde_json::json!(stream.sync_ack);
            status["journals"] = stream
                .names
                .values()
                .map(|name| {
                    let mut j = serde_json::json!({
                        "journal": name,
                        "standbys": *stream.replication.standbys(name).borrow(),
                    });
                    if stream.sync_ack {
                        j["acked"] = serde_json::json!(*stream.replication.acked(name).borrow());
                    }
                    j
                })
                .collect();
            status
        })
    }

    /// A subsystem opened its journal (leader): serve it to standbys at once, before the
    /// subsystem's start (which appends, and in the ack mode waits for a standby) finishes.
    pub fn opened<E>(&self, journal: &Arc<bosun_journal::Journal<E>>)
    where
        E: serde::Serialize
            + serde::de::DeserializeOwned
            + bosun_journal::Versioned
            + Send
            + Sync
            + 'static,
    {
        if let Some(name) = self.names.get(journal.dir()) {
            self.replication.publish(name, journal.clone());
        }
    }

    /// In the ack mode, the ack gate of the journal in `dir`.
    pub fn ack_gate(&self, dir: &Path) -> Option<AckGate> {
        if !self.sync_ack {
            return None;
        }
        let name = self.names.get(dir)?;
        Some(AckGate {
            acked: self.replication.acked(name),
            standbys: self.replication.standbys(name),
            timeout: ACK_TIMEOUT,
            behind: Arc::default(),
        })
    }
}

/// In the ack mode: what standbys acknowledged of one journal, and how many stream it.
#[derive(Clone)]
pub struct AckGate {
    acked: watch::Receiver<u64>,
    standbys: watch::Receiver<usize>,
    timeout: Duration,
    /// The record whose ack timed out (0: none): until the standby holds it, appends do
    /// not wait for it again, so a stalled standby costs one timeout, not one per record.
    behind: Arc<std::sync::atomic::AtomicU64>,
}

/// How long an append waits for a connected standby's ack before the leader goes on
/// without it (and says so), as semi-synchronous replication does.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

impl AckGate {
    /// Waits until a standby holds `seq`: at once when no standby is connected (after a
    /// failover, until the other replica is back), at most the ack timeout otherwise.
    /// A standby that let one ack time out is not waited for again until it has caught up
    /// with that record.
    pub async fn wait(&self, seq: u64) {
        use std::sync::atomic::Ordering;
        let mut acked = self.acked.clone();
        let mut standbys = self.standbys.clone();
        let behind = self.behind.load(Ordering::Acquire);
        if behind != 0 {
            if *acked.borrow() < behind {
                metrics::counter!("bosun_ha_unacknowledged_appends_total").increment(1);
                return;
            }
            // Caught up: waited for again.
            let _ = self
                .behind
                .compare_exchange(behind, 0, Ordering::AcqRel, Ordering::Acquire);
            tracing::info!(
                seq = behind,
                "the standby caught up; appends wait for its acks again"
            );
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            if *acked.borrow_and_update() >= seq {
                return;
            }
            if *standbys.borrow_and_update() == 0 {
                metrics::counter!("bosun_ha_unacknowledged_appends_total").increment(1);
                return;
            }
            tokio::select! {
                r = acked.changed() => if r.is_err() { return },
                r = standbys.changed() => if r.is_err() { return },
                () = tokio::time::sleep_until(deadline) => {
                    metrics::counter!("bosun_ha_unacknowledged_appends_total").increment(1);
                    self.behind.store(seq, Ordering::Release);
                    tracing::warn!(seq, timeout = ?self.timeout, "no standby confirmed a journal record in time; going on without it until it has caught up (BOSUN_HA_SYNC_ACK)");
                    return;
                }
            }
        }
    }
}

/// One journal this process keeps: its name on the stream, its folder, and how to follow
/// it with its event type.
pub struct JournalSpec {
    /// `modules`, `lambda` or `deployer`.
    pub name: &'static str,
    /// Its folder.
    pub dir: PathBuf,
    follow: fn(FollowArgs) -> futures::future::BoxFuture<'static, anyhow::Result<()>>,
}

impl JournalSpec {
    /// A journal of events `E`.
    pub fn of<E>(name: &'static str, dir: PathBuf) -> JournalSpec
    where
        E: serde::Serialize
            + serde::de::DeserializeOwned
            + bosun_journal::Versioned
            + Send
            + Sync
            + 'static,
    {
        JournalSpec {
            name,
            dir,
            follow: |args| Box::pin(replication::follow::<E>(args)),
        }
    }
}

/// What the leader's start hands back: the journals to serve, and what keeps the
/// subsystems running.
pub struct Started {
    /// Journals by name.
    pub journals: Vec<(&'static str, Arc<dyn Source>)>,
    /// Dropped at the end.
    pub keep: Box<dyn std::any::Any + Send>,
}

/// How a replica ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// SIGTERM or Ctrl-C.
    Signal,
    /// It led and lost the lease (fenced).
    Fenced,
}

/// What this replica does now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Role {
    /// Follows the holder's journals.
    #[default]
    Standby,
    /// Holds the lease and runs the subsystems.
    Leader,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Standby => "standby",
            Role::Leader => "leader",
        }
    }
}

#[derive(Default)]
struct Shared {
    role: Mutex<Role>,
    statuses: Statuses,
    holder: Mutex<Option<String>>,
}

/// Runs one replica: standby until it holds the Lease, then `start` and lead until a
/// signal (graceful stop) or until fenced.
pub async fn run<F, Fut>(
    cfg: HaConfig,
    client: kube::Client,
    http_listen: SocketAddr,
    journals: Vec<JournalSpec>,
    grace: Duration,
    gate: bosun_runtime::lifecycle::WorkGate,
    start: F,
) -> anyhow::Result<Ending>
where
    F: FnOnce(JournalStream) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Started>>,
{
    let replication = Replication::new(cfg.token.as_deref(), &cfg.identity);
    let shared = Arc::new(Shared {
        role: Mutex::new(Role::Standby),
        ..Default::default()
    });
    let stream = JournalStream {
        replication: replication.clone(),
        names: Arc::new(journals.iter().map(|j| (j.dir.clone(), j.name)).collect()),
        sync_ack: cfg.sync_ack,
        shared: Arc::clone(&shared),
        identity: cfg.identity.clone(),
    };
    let ha_server = serve(
        cfg.listen,
        status_router(&cfg, &shared).merge(replication.router()),
    )
    .await
    .context("the journal stream's listener (BOSUN_HA_LISTEN)")?;
    tracing::info!(listen = %ha_server.0, identity = %cfg.identity, lease = %cfg.lease, "high availability: waiting for the lease");
    println!("bosun HA endpoints listening on http://{}", ha_server.0);
    let elector = Elector::new(
        client,
        &cfg.namespace,
        &cfg.lease,
        &cfg.identity,
        cfg.timings,
    );

    // Standby: follow the holder's journals.
    let (leader_tx, leader_rx) = watch::channel(None::<LeaderAt>);
    let holder_task = {
        let mut holder = elector.holder();
        let cfg = cfg.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            loop {
                let current = holder.borrow_and_update().current().map(str::to_string);
                *shared.holder.lock().unwrap_or_else(|p| p.into_inner()) = current.clone();
                let leader = current
                    .filter(|h| *h != cfg.identity)
                    .and_then(|h| journal_url(&h, &cfg).map(|url| LeaderAt { identity: h, url }));
                leader_tx.send_if_modified(|old| {
                    let changed = *old != leader;
                    *old = leader.clone();
                    changed
                });
                if holder.changed().await.is_err() {
                    return;
                }
            }
        })
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let followers: Vec<_> = match &cfg.token {
        Some(token) => journals
            .iter()
            .map(|j| {
                tokio::spawn((j.follow)(FollowArgs {
                    name: j.name.to_string(),
                    dir: j.dir.clone(),
                    identity: cfg.identity.clone(),
                    leader: leader_rx.clone(),
                    token: token.clone(),
                    ack: cfg.sync_ack,
                    statuses: shared.statuses.clone(),
                    stop: stop_rx.clone(),
                }))
            })
            .collect(),
        None => Vec::new(),
    };
    let standby_http = serve(http_listen, standby_router(&shared))
        .await
        .context("the standby's HTTP endpoints")?;
    println!(
        "bosun HTTP endpoints listening on http://{} (standby)",
        standby_http.0
    );
    let signal = bosun_platform::shutdown_signal();
    tokio::pin!(signal);
    let leads = tokio::select! {
        () = elector.acquire() => true,
        () = &mut signal => false,
    };
    let _ = stop_tx.send(true);
    for f in followers {
        match f.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("journal follower: {e:#}"),
            Err(e) => tracing::warn!("journal follower: {e}"),
        }
    }
    holder_task.abort();
    standby_http.1.abort();
    let _ = standby_http.1.await;
    if !leads {
        tracing::info!("shutting down (standby)");
        return Ok(Ending::Signal);
    }

    // Leader.
    *shared.role.lock().unwrap_or_else(|p| p.into_inner()) = Role::Leader;
    replication.lead();
    let started = tokio::select! {
        s = start(stream) => s?,
        lost = elector.hold() => {
            replication.step_down();
            fence(&lost, &gate);
            return Ok(Ending::Fenced);
        }
    };
    for (name, source) in &started.journals {
        replication.publish(name, source.clone());
    }
    let ending = tokio::select! {
        lost = elector.hold() => {
            replication.step_down();
            fence(&lost, &gate);
            Ending::Fenced
        }
        () = &mut signal => {
            graceful_stop(grace, &gate, &started.journals).await;
            replication.step_down();
            elector.release().await;
            Ending::Signal
        }
    };
    drop(started);
    ha_server.1.abort();
    Ok(ending)
}

/// A leader that lost its lease stops every task at once (what runs is killed when the
/// process exits) and exits, as addon-operator does.
fn fence(lost: &lease::Lost, gate: &bosun_runtime::lifecycle::WorkGate) {
    gate.stop_starting();
    tracing::error!(
        running = gate.in_flight(),
        "leadership lost ({lost}): stopping all work and exiting"
    );
}

/// SIGTERM: no new tasks, running ones get `grace`, then the journals are flushed.
pub async fn graceful_stop(
    grace: Duration,
    gate: &bosun_runtime::lifecycle::WorkGate,
    journals: &[(&'static str, Arc<dyn Source>)],
) {
    gate.stop_starting();
    let running = gate.in_flight();
    if running > 0 {
        tracing::info!(running, grace = ?grace, "waiting for running tasks to finish");
    }
    let left = gate.wait_idle(grace).await;
    if left > 0 {
        tracing::warn!(left, "grace period over: killing the tasks still running");
    }
    for (name, j) in journals {
        let j = j.clone();
        match tokio::task::spawn_blocking(move || j.sync()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(journal = name, "cannot flush the journal: {e}"),
            Err(e) => tracing::warn!(journal = name, "cannot flush the journal: {e}"),
        }
    }
}

async fn serve(
    addr: SocketAddr,
    app: Router,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(bosun_platform::serve(
        listener,
        app,
        bosun_platform::Limits::from_env(),
    ));
    Ok((bound, task))
}

fn status_json(shared: &Shared) -> serde_json::Value {
    let role = shared
        .role
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_str();
    let holder = shared
        .holder
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let followers: Vec<_> = shared
        .statuses
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect();
    json!({"role": role, "holder": holder, "following": followers})
}

fn status_router(cfg: &HaConfig, shared: &Arc<Shared>) -> Router {
    let shared = shared.clone();
    let identity = cfg.identity.clone();
    Router::new().route(
        "/ha/status",
        get(move || {
            let mut status = status_json(&shared);
            status["identity"] = json!(identity);
            async move { axum::Json(status) }
        }),
    )
}

fn standby_router(shared: &Arc<Shared>) -> Router {
    let ready = shared.clone();
    Router::new()
        .route("/healthz", get(|| async { "ok (standby)" }))
        .route(
            "/readyz",
            get(move || {
                let status = status_json(&ready);
                async move {
                    let following = status["following"].as_array().cloned().unwrap_or_default();
                    let connected =
                        !following.is_empty() && following.iter().all(|f| f["leader"].is_string());
                    if connected {
                        (
                            StatusCode::OK,
                            format!("standby following the leader: {status}"),
                        )
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("standby, not following a leader yet: {status}"),
                        )
                    }
                }
            }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stalled standby costs one ack timeout, not one per record; once it holds the
    /// record that timed out, appends wait for it again.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_standby_is_waited_for_once_until_it_catches_up() {
        let (acked_tx, acked) = watch::channel(0u64);
        let (_standbys_tx, standbys) = watch::channel(1usize);
        let gate = AckGate {
            acked,
            standbys,
            timeout: ACK_TIMEOUT,
            behind: Arc::default(),
        };
        let start = tokio::time::Instant::now();
        gate.wait(1).await;
        assert_eq!(
            start.elapsed(),
            ACK_TIMEOUT,
            "the first record waits the timeout"
        );
        let start = tokio::time::Instant::now();
        for seq in 2..100 {
            gate.wait(seq).await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the next ones do not wait");
        // It catches up: the next append waits for its ack again, and gets it.
        let _ = acked_tx.send(99);
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.wait(100).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "waits for the ack of 100 again");
        let _ = acked_tx.send(100);
        let start = tokio::time::Instant::now();
        let _ = waiting.await;
        assert!(start.elapsed() < ACK_TIMEOUT);
    }

    fn cfg(service: Option<&str>) -> HaConfig {
        HaConfig {
            lease: "l".into(),
            namespace: "ns".into(),
            identity: identity("bosun-0", "10.1.2.3".parse().expect("ip"), "ns"),
            timings: Timings {
                lease_duration: Duration::from_secs(35),
                renew_deadline: Duration::from_secs(30),
                retry_period: Duration::from_secs(10),
            },
            listen: "0.0.0.0:9651".parse().expect("addr"),
            token: None,
            sync_ack: false,
            service: service.map(str::to_string),
        }
    }

    #[test]
    fn the_leader_is_found_from_its_identity() {
        let c = cfg(None);
        assert_eq!(c.identity, "bosun-0.10-1-2-3.ns.pod");
        assert_eq!(
            journal_url(&c.identity, &c).as_deref(),
            Some("http://10.1.2.3:9651")
        );
        let c = cfg(Some("bosun-journal"));
        assert_eq!(
            journal_url(&c.identity, &c).as_deref(),
            Some("http://bosun-0.bosun-journal.ns.svc:9651")
        );
        let v6 = identity("p", "fd00::1".parse().expect("ip"), "ns");
        assert_eq!(
            journal_url(&v6, &cfg(None)).as_deref(),
            Some("http://[fd00::1]:9651")
        );
        assert_eq!(journal_url("not-an-identity", &cfg(None)), None);
    }
}
