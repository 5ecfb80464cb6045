//! The deployer's controller: watch changes become keys of one keyed `WorkQueue` (one
//! reconcile per item in flight), workers reconcile items through [`decide`] and the
//! item's type, and every phase change and error is journaled before it is written.
//!
//! ```text
//!  Cluster::watch ─► Change::Item (type filter) ─┐
//!                    Change::Target ─► its items ─┴► WorkQueue<ItemKey> ─► workers
//!  worker: GET item ─► target check ─► decide ─► remove annotations ─► status (Init)
//!          ─► Run: finalizer, Progressing, type.reconcile ─► status (final or retry in 5 s)
//!          ─► Run delete: Deleting, type.delete, export removed, finalizer removed
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bosun_runtime::last_outcome::LastOutcomes;
use bosun_runtime::ports::{BoxFut, EventSink};
use bosun_runtime::runner::{self, Action, Outcome};
use bosun_runtime::versions::{OwnWrites, Seen};
use bosun_runtime::work_queue::{QueueSnapshot, WorkQueue};
use serde::Serialize;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::decide::{self, Inputs, Next, Plan, RETRY_INTERVAL, Skip, TargetCheck};
use crate::events::DeployerEvent;
use crate::item::{
    DELETE_WITHOUT_UNINSTALL_ANNOTATION, DeployItem, DeployerInfo, FINALIZER, ItemKey, Phase,
    Status,
};
use crate::ports::{Change, Cluster, ClusterError, DeployerType, EventNote, Job};
use crate::status::{DeployError, handle_error, set_phase};
use crate::target::{self, ResolvedTarget, TargetSelector};

/// Why a reconcile could not finish its writes (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReconcileError {
    #[error("{0}")]
    Cluster(#[from] ClusterError),
    #[error("journal: {0}")]
    Journal(String),
}

impl bosun_runtime::Classified for ReconcileError {
    fn class(&self) -> bosun_runtime::ErrorClass {
        match self {
            ReconcileError::Cluster(e) => e.class(),
            ReconcileError::Journal(_) => bosun_runtime::ErrorClass::Transient,
        }
    }
}

impl ReconcileError {
    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Cluster(ClusterError::Conflict(_)) => "conflict",
            ReconcileError::Cluster(ClusterError::NotFound(_)) => "not_found",
            ReconcileError::Cluster(ClusterError::AlreadyExists(_)) => "already_exists",
            ReconcileError::Cluster(ClusterError::TooLarge { .. }) => "too_large",
            ReconcileError::Cluster(ClusterError::Other { .. }) => "cluster",
            ReconcileError::Journal(_) => "journal",
        }
    }
}

/// Reconciles by result (`ok`, `error`).
pub const RECONCILES_TOTAL: &str = "bosun_deployer_reconciles_total";
/// Reconcile durations in seconds.
pub(crate) const RECONCILE_SECONDS: &str = "bosun_deployer_reconcile_duration_seconds";
/// Errors recorded on items, by type and code (`none` without a code).
pub(crate) const ERRORS_TOTAL: &str = "bosun_deployer_item_errors_total";
/// Items by phase, as of their last reconcile.
pub const ITEMS: &str = "bosun_deployer_items";

/// The last run of every item, with the number of items in each phase kept as runs
/// change (the phase gauge is set for the phases a change touches, not by a scan).
#[derive(Default)]
struct LastRuns {
    runs: LastOutcomes<ItemKey, RunDetail>,
    phases: BTreeMap<Phase, usize>,
}

impl LastRuns {
    fn count(&mut self, phase: Option<Phase>, up: bool) {
        let Some(p) = phase else { return };
        let n = self.phases.entry(p).or_default();
        *n = if up { *n + 1 } else { n.saturating_sub(1) };
        metrics::gauge!(ITEMS, "phase" => p.as_str()).set(*n as f64);
    }

    /// Records a run of the item: `error` is the item's (or the reconcile's) error.
    fn record(
        &mut self,
        key: ItemKey,
        error: Option<String>,
        retry_in: Option<Duration>,
        detail: RunDetail,
    ) {
        let phase = detail.phase;
        let old = self
            .runs
            .record(key, error, retry_in, detail)
            .and_then(|r| r.detail.phase);
        if old != phase {
            self.count(old, false);
            self.count(phase, true);
        }
    }

    fn remove(&mut self, key: &ItemKey) {
        if let Some(old) = self.runs.remove(key) {
            self.count(old.detail.phase, false);
        }
    }

    /// Records a failed reconcile on the item's last run (its phase unchanged).
    fn failed(&mut self, key: &ItemKey, error: String, retry: Duration) {
        let detail = self
            .runs
            .get(key)
            .map(|r| r.detail.clone())
            .unwrap_or_default();
        self.record(key.clone(), Some(error), Some(retry), detail);
    }
}

/// How the deployer runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Items reconciled at once.
    pub workers: usize,
    /// `status.deployer`.
    pub deployer: DeployerInfo,
    /// Target selectors (none: every target).
    pub target_selectors: Vec<TargetSelector>,
    /// Landscaper's pickup and abort timeouts.
    pub timeouts: crate::decide::LandscaperTimeouts,
    /// Lock each item with a SyncObject while it is in flight, held by this pod name
    /// (several replicas serving the same targets); `None`: no locks.
    pub lock_holder: Option<String>,
    /// Which deployer contract runs items without a jobID.
    pub contract: crate::decide::Contract,
    /// The host's work gate: the workers take no item once it stops.
    pub gate: bosun_runtime::lifecycle::WorkGate,
}

/// The prefix of this deployer's SyncObjects (landscaper uses the deployer's name).
pub(crate) const LOCK_PREFIX: &str = "bosun";
/// How long an item locked by another replica waits before it is looked at again.
pub(crate) const LOCKED_RETRY: Duration = Duration::from_secs(60);

/// What the debug view keeps of an item's last run, beside its time, error, failures in
/// a row and next look ([`LastOutcome`](bosun_runtime::last_outcome::LastOutcome)).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunDetail {
    pub phase: Option<Phase>,
    /// For an item not final yet: the condition it waits on (`ManifestsReady=False: …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

/// The last run of each item.
pub(crate) type LastItemRuns = LastOutcomes<ItemKey, RunDetail>;

/// What the workers share.
struct Shared {
    cluster: Arc<dyn Cluster>,
    journal: Arc<dyn EventSink<DeployerEvent>>,
    types: BTreeMap<String, Arc<dyn DeployerType>>,
    type_names: Vec<String>,
    settings: Settings,
    queue: WorkQueue<ItemKey>,
    last: Mutex<LastRuns>,
    /// The resourceVersions this deployer's writes gave each item, until their watch
    /// events come: the event of an own write changes nothing it does not know, and does
    /// not queue the item again (a run writes an item up to four times).
    own_writes: Mutex<OwnWrites<ItemKey>>,
    /// Items found locked by another replica, by the holder's pod: taken over as soon as
    /// that pod is deleted ([`Change::PodGone`]).
    held_by: Mutex<BTreeMap<String, std::collections::BTreeSet<ItemKey>>>,
    /// Targets whose kubeconfig was checked already.
    checked: target::CheckedKubeconfigs,
}

/// The running deployer; dropping it stops the watch and the workers.
pub struct Deployer {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Deployer {
    fn drop(&mut self) {
        self.shared.queue.shut_down();
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A handle on the running deployer for the debug views.
#[derive(Clone)]
pub struct DeployerView {
    shared: Arc<Shared>,
}

impl DeployerView {
    /// The work queue now.
    pub fn queue(&self) -> QueueSnapshot<ItemKey> {
        self.shared.queue.snapshot()
    }
    /// The last reconcile of each item.
    pub fn last_runs(&self) -> LastItemRuns {
        lock(&self.shared.last).runs.clone()
    }
    /// How many items are in `phase` as of their last reconcile.
    pub fn in_phase(&self, phase: Phase) -> usize {
        lock(&self.shared.last)
            .phases
            .get(&phase)
            .copied()
            .unwrap_or(0)
    }
    /// The types served.
    pub fn types(&self) -> Vec<String> {
        self.shared.type_names.clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Deployer {
    /// Starts watching and the workers.
    pub async fn start(
        cluster: Arc<dyn Cluster>,
        journal: Arc<dyn EventSink<DeployerEvent>>,
        types: Vec<Arc<dyn DeployerType>>,
        settings: Settings,
    ) -> Result<Deployer, ClusterError> {
        let type_names: Vec<String> = types.iter().map(|t| t.name().to_string()).collect();
        let shared = Arc::new(Shared {
            types: types
                .into_iter()
                .map(|t| (t.name().to_string(), t))
                .collect(),
            type_names,
            cluster,
            journal,
            queue: WorkQueue::gated(settings.gate.clone()),
            last: Mutex::new(LastRuns::default()),
            own_writes: Mutex::new(OwnWrites::default()),
            held_by: Mutex::new(BTreeMap::new()),
            checked: Default::default(),
            settings,
        });
        let mut rx = shared.cluster.watch().await?;
        let mut tasks = Vec::new();
        let s = Arc::clone(&shared);
        tasks.push(tokio::spawn(async move {
            while let Some(change) = rx.recv().await {
                match change {
                    Change::Item {
                        key,
                        type_,
                        resource_version,
                    } => {
                        // Step 1 on metadata alone: other types are never even read.
                        if !s.type_names.contains(&type_) {
                            continue;
                        }
                        let seen = lock(&s.own_writes).seen(&key, &resource_version);
                        if seen == Seen::Other {
                            s.queue.add(key);
                        }
                    }
                    Change::PodGone { name } => {
                        let waiting = lock(&s.held_by).remove(&name).unwrap_or_default();
                        if !waiting.is_empty() {
                            tracing::info!(pod = %name, items = waiting.len(), "the pod holding these items' locks is gone: taking them over");
                        }
                        for key in waiting {
                            s.queue.add(key);
                        }
                    }
                    Change::Target { namespace, name } => {
                        for o in s.cluster.cached_items(&namespace) {
                            if let Ok(item) = DeployItem::parse(&o)
                                && item.target_name() == Some(name.as_str())
                                && s.type_names.iter().any(|t| t == item.deployer_type())
                            {
                                s.queue.add(item.key);
                            }
                        }
                    }
                }
            }
        }));
        tasks.extend(runner::run(
            &shared.queue,
            shared.settings.workers,
            Arc::clone(&shared),
        ));
        Ok(Deployer { shared, tasks })
    }

    /// A handle for the debug views.
    pub fn view(&self) -> DeployerView {
        DeployerView {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The work queue as an actor's mailbox (`bosun actors`): items waiting, scheduled
    /// and in flight, and the last runs.
    pub fn mailbox(&self) -> Arc<dyn bosun_runtime::mailbox::MailboxSource> {
        self.shared.queue.mailbox(ItemKey::to_string)
    }
}

/// Items as the runner reconciles them: `Ok(Some(d))` looks again in `d`; a failure
/// backs off.
impl runner::Reconciler<ItemKey> for Shared {
    type Report = Option<Duration>;
    type Error = ReconcileError;

    fn reconcile<'a>(
        &'a self,
        key: &'a ItemKey,
    ) -> BoxFut<'a, Result<Option<Duration>, ReconcileError>> {
        Box::pin(reconcile(self, key))
    }

    fn requeue(&self, report: &Option<Duration>) -> Action {
        Action::requeue_after(*report)
    }

    fn finished<'a>(
        &'a self,
        key: &'a ItemKey,
        outcome: Outcome<Option<Duration>, ReconcileError>,
    ) -> BoxFut<'a, ()> {
        metrics::histogram!(RECONCILE_SECONDS).record(outcome.took.as_secs_f64());
        let result = if outcome.result.is_ok() {
            "ok"
        } else {
            "error"
        };
        metrics::counter!(RECONCILES_TOTAL, "result" => result).increment(1);
        if let Err(e) = &outcome.result {
            let delay = outcome.retry_in.unwrap_or_default();
            tracing::warn!(item = %key, retry_in = ?delay, kind = e.metric_label(), "deploy item reconcile failed: {e}");
            lock(&self.last).failed(key, e.to_string(), delay);
        }
        Box::pin(std::future::ready(()))
    }
}

fn item_name(key: &ItemKey) -> String {
    format!("deployitem/{key}")
}

/// One reconcile of one item. `Ok(Some(d))`: look again in `d`.
async fn reconcile(s: &Shared, key: &ItemKey) -> Result<Option<Duration>, ReconcileError> {
    let Some(object) = s.cluster.get_item(key).await? else {
        lock(&s.last).remove(key);
        return Ok(None);
    };
    let item = match DeployItem::from_value(object) {
        Ok(i) => i,
        Err(e) => {
            // Not readable: its type may not even be ours. Said once, not written.
            tracing::warn!(item = %key, "cannot read the deploy item: {e}");
            lock(&s.last).record(key.clone(), Some(e.to_string()), None, RunDetail::default());
            return Ok(None);
        }
    };
    if !decide::is_our_type(&item, &s.type_names) {
        return Ok(None);
    }
    let (check, target) = check_target(s, &item).await?;
    let job_id = new_job_id();
    let (plan, now) = plan_now(s, &item, check, &job_id);
    tracing::debug!(item = %key, next = ?plan.next, "deploy item decision");
    let Some(holder) = s.settings.lock_holder.as_deref() else {
        return apply_plan(s, item, target, plan, now).await;
    };
    if matches!(plan.next, decide::Next::Skip(_)) {
        return apply_plan(s, item, target, plan, now).await;
    }
    // Several replicas serve these targets: only the holder of the item's SyncObject
    // works on it; the others look again in a minute, as landscaper's deployers do, or as
    // soon as the holder's pod is deleted.
    let found = s
        .cluster
        .lock_item(&item.object, LOCK_PREFIX, holder)
        .await?;
    lock(&s.held_by).retain(|_, keys| {
        keys.remove(key);
        !keys.is_empty()
    });
    match found {
        crate::lock::Found::Ours => {}
        crate::lock::Found::Take => return Ok(Some(LOCKED_RETRY)),
        crate::lock::Found::Held(pod) => {
            tracing::debug!(item = %key, holder = %pod, "the item is locked by another replica");
            lock(&s.held_by)
                .entry(pod.clone())
                .or_default()
                .insert(key.clone());
            lock(&s.last).record(
                key.clone(),
                Some(format!("locked by {pod} (SyncObject {LOCK_PREFIX}-…)")),
                Some(LOCKED_RETRY),
                RunDetail {
                    phase: item.status.phase,
                    waiting_for: None,
                },
            );
            return Ok(Some(LOCKED_RETRY));
        }
    }
    // What the item is now that the lock is ours: the replica that held it may have
    // finished it meanwhile.
    let result = match s.cluster.read_item(key).await? {
        None => Ok(None),
        Some(object) => match DeployItem::from_value(object) {
            Err(_) => Ok(None),
            Ok(item) => {
                let (check, target) = check_target(s, &item).await?;
                let (plan, now) = plan_now(s, &item, check, &job_id);
                apply_plan(s, item, target, plan, now).await
            }
        },
    };
    if matches!(result, Ok(None))
        && let Err(e) = s
            .cluster
            .unlock_item(&item.object, LOCK_PREFIX, holder)
            .await
    {
        tracing::warn!(item = %key, "cannot free the item's lock: {e}");
    }
    result
}

/// The decision for `item` now.
fn plan_now(s: &Shared, item: &DeployItem, check: TargetCheck, job_id: &str) -> (Plan, SystemTime) {
    let now = SystemTime::now();
    let plan = decide::decide(
        item,
        &Inputs {
            types: &s.type_names,
            target: check,
            now,
            deployer: &s.settings.deployer,
            new_job_id: job_id,
            timeouts: s.settings.timeouts,
            contract: s.settings.contract,
        },
    );
    (plan, now)
}

/// Step 2: the target, and whether it is ours. A Target that cannot be read is ours and
/// fails the run later with the reason.
async fn check_target(
    s: &Shared,
    item: &DeployItem,
) -> Result<(TargetCheck, Option<Result<ResolvedTarget, DeployError>>), ReconcileError> {
    let Some(name) = item.target_name() else {
        return Ok((TargetCheck::Ours, None));
    };
    let ns = &item.key.namespace;
    let Some(raw) = s.cluster.get_target(ns, name).await? else {
        return Ok((TargetCheck::Missing, None));
    };
    let t = match target::Target::parse(&raw) {
        Ok(t) => t,
        Err(e) => {
            let err = DeployError::config("ValidateTarget", "InvalidTarget", e.to_string());
            return Ok((TargetCheck::Ours, Some(Err(err))));
        }
    };
    if !target::serves(&s.settings.target_selectors, &t) {
        return Ok((TargetCheck::NotOurs, None));
    }
    let resolved = resolve_target(&*s.cluster, &t, &s.checked).await?;
    Ok((TargetCheck::Ours, Some(resolved)))
}

/// `t` with its content (a `secretRef`'s Secret read), validated as upstream's library
/// validates every target: a cluster target's kubeconfig may not run commands or read
/// files.
async fn resolve_target(
    cluster: &dyn Cluster,
    t: &target::Target,
    checked: &target::CheckedKubeconfigs,
) -> Result<Result<ResolvedTarget, DeployError>, ClusterError> {
    let secret = match &t.source {
        target::TargetSource::Secret { name, .. } => cluster.get_secret(&t.namespace, name).await?,
        _ => None,
    };
    let resolved = match target::resolve(t, secret.as_ref()) {
        Ok(r) => r,
        Err(e) => {
            return Ok(Err(DeployError::config(
                "ResolveTarget",
                "InvalidTarget",
                e.to_string(),
            )));
        }
    };
    let resolved = match target::token_access(&resolved) {
        Ok(None) => resolved,
        Ok(Some(access)) => match with_service_account_token(cluster, &resolved, &access).await {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        },
        Err(e) => {
            return Ok(Err(DeployError::config(
                "ValidateTarget",
                "InvalidTarget",
                e.to_string(),
            )));
        }
    };
    if resolved.target.type_ == target::KUBERNETES_CLUSTER
        && let Err(e) = checked.check(&resolved)
    {
        return Ok(Err(DeployError::config(
            "ValidateTarget",
            "InvalidTarget",
            e.to_string(),
        )));
    }
    Ok(Ok(resolved))
}

/// `resolved` (a `selfConfig` or `oidcConfig` target) as a kubeconfig with a token of its
/// service account, requested in the items' cluster. A token that cannot be had now (the
/// service account missing, the API server refusing) is retried, naming both.
async fn with_service_account_token(
    cluster: &dyn Cluster,
    resolved: &ResolvedTarget,
    access: &target::TokenAccess,
) -> Result<ResolvedTarget, DeployError> {
    let what = resolved.target.describe();
    let (server, ca) = match &access.server {
        Some((server, ca)) => (server.clone(), ca.clone()),
        None => cluster.resource_cluster().ok_or_else(|| {
            DeployError::config(
                "ResolveTarget",
                "InvalidTarget",
                format!(
                    "{what}: spec.config.selfConfig: the address of the items' cluster is not known to this deployer"
                ),
            )
        })?,
    };
    let token = cluster
        .service_account_token(
            &resolved.target.namespace,
            &access.service_account,
            &access.audiences,
            access.expiration_seconds,
        )
        .await
        .map_err(|e| {
            DeployError::new(
                "ResolveTarget",
                "ServiceAccountToken",
                format!(
                    "{what}: a token of ServiceAccount {}/{}: {e}",
                    resolved.target.namespace, access.service_account
                ),
                &[],
            )
        })?;
    Ok(target::with_token(resolved, &server, ca.as_deref(), &token))
}

/// The Target `name` of `namespace` that `field` (a check's or an export's `targetName`)
/// names, resolved. Missing or invalid: a configuration problem naming the field; not
/// readable now: retried.
pub(crate) async fn named_target(
    cluster: &dyn Cluster,
    namespace: &str,
    name: &str,
    field: &str,
) -> Result<ResolvedTarget, DeployError> {
    let unreadable = |e: ClusterError| {
        DeployError::new(
            "Reconcile",
            "TargetCluster",
            format!("{field}: Target {namespace}/{name}: {e}"),
            &[],
        )
    };
    let Some(raw) = cluster
        .get_target(namespace, name)
        .await
        .map_err(unreadable)?
    else {
        return Err(DeployError::config(
            "ValidateTarget",
            "TargetNotFound",
            format!("{field}: Target {namespace}/{name} not found"),
        ));
    };
    let t = target::Target::parse(&raw).map_err(|e| {
        DeployError::config("ValidateTarget", "InvalidTarget", format!("{field}: {e}"))
    })?;
    // A check's or an export's other target: rare, checked each time.
    resolve_target(cluster, &t, &target::CheckedKubeconfigs::default())
        .await
        .map_err(unreadable)?
        .map_err(|mut e| {
            e.message = format!("{field}: {}", e.message);
            e
        })
}

fn new_job_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("bosun-{nanos:x}")
}

/// The objects a status's `providerStatus.managedResources` lists, as `Kind ns/name` (the
/// form the journal and `bosun explain` use).
fn managed_names(status: &Status) -> Vec<String> {
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    status
        .provider_status
        .as_ref()
        .and_then(|p| p["managedResources"].as_array())
        .into_iter()
        .flatten()
        .map(|m| {
            let r = &m["resource"];
            match s(&r["namespace"]) {
                ns if ns.is_empty() => format!("{} {}", s(&r["kind"]), s(&r["name"])),
                ns => format!("{} {ns}/{}", s(&r["kind"]), s(&r["name"])),
            }
        })
        .collect()
}

/// Journals the phase change and the new error of `new` against `old`, then writes it.
async fn write_status(
    s: &Shared,
    item: &DeployItem,
    old: &Status,
    new: &Status,
    retry: Option<Duration>,
) -> Result<DeployItem, ReconcileError> {
    if old == new {
        // Nothing new: no write, so no watch event that would wake this item again.
        return Ok(item.clone());
    }
    let mut events = Vec::new();
    let managed = Some(managed_names(new)).filter(|now| *now != managed_names(old));
    if let Some(to) = new.phase
        && (old.phase != new.phase
            || new.last_reconcile_time != old.last_reconcile_time
            || managed.is_some())
    {
        events.push(DeployerEvent::DeployItemPhase {
            item: item_name(&item.key),
            from: old.phase,
            to,
            generation: item.generation,
            job_id: new.job_id.clone(),
            managed,
        });
    }
    // An error this write records for the first time (journalled, counted, an Event).
    let new_error = new
        .last_error
        .as_ref()
        .filter(|e| old.last_error.as_ref() != Some(*e));
    if let Some(e) = new_error {
        events.push(DeployerEvent::DeployItemError {
            item: item_name(&item.key),
            operation: e.operation.clone(),
            reason: e.reason.clone(),
            message: e.message.clone(),
            codes: e.codes.clone(),
            retry_in_ms: retry.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        });
    }
    // Handed to the journal before the write and made durable while the API server works:
    // the journal keeps the order of decisions, and a run waits for one round trip, not two.
    // A run's result (a final phase) and every error wait until the journal holds them
    // (with a standby, until it acknowledged them too); the steps before (Init,
    // Progressing) are handed over in order and become durable with the result, as the
    // lambda controllers' syncs do. A crash between them loses no decision: the item's
    // status says the run is not finished, and the next leader runs it again.
    let wait = new.phase.is_some_and(Phase::is_final) || new_error.is_some();
    let durable = if events.is_empty() {
        None
    } else if wait {
        Some(
            s.journal
                .submit(events)
                .map_err(|e| ReconcileError::Journal(e.to_string()))?,
        )
    } else {
        s.journal
            .append_later(events)
            .map_err(|e| ReconcileError::Journal(e.to_string()))?;
        None
    };
    if let Some(e) = new_error {
        let code = e.codes.first().map_or("none", |c| c.as_str());
        metrics::counter!(ERRORS_TOTAL, "type" => item.type_.clone(), "code" => code).increment(1);
        s.cluster
            .event(
                &item.object,
                EventNote {
                    type_: "Warning",
                    reason: e.reason.clone(),
                    message: e.message.clone(),
                },
            )
            .await;
    }
    let write = s.cluster.update_status(item.writing(new));
    let (written, journaled) = tokio::join!(own_write(s, &item.key, write), async {
        match durable {
            Some(d) => d.await.map(|_| ()),
            None => Ok(()),
        }
    });
    journaled.map_err(|e| ReconcileError::Journal(e.to_string()))?;
    let written = match written {
        Err(ClusterError::TooLarge { message, .. }) if !new.phase.is_some_and(Phase::is_final) => {
            // Retrying the same status would be refused again and again: fail the run,
            // keeping what the last written status recorded (what to delete later).
            let deleting = item.deleting;
            let mut reduced = new.clone();
            reduced.provider_status = old.provider_status.clone();
            let e = DeployError::config(
                "Reconcile",
                "StatusTooLarge",
                format!(
                    "the item's status is larger than the API server stores ({message}): split what it deploys over several DeployItems"
                ),
            );
            crate::status::fail(&mut reduced, deleting, &e, SystemTime::now());
            tracing::warn!(item = %item.key, "deploy item: {e}");
            return Box::pin(write_status(s, item, old, &reduced, None)).await;
        }
        // Someone else wrote the item since it was read (landscaper setting the jobID):
        // the run's result goes onto what is there now. Running it again would deploy
        // again (an extra Helm revision for one install).
        Err(ClusterError::Conflict(_)) => rebase_status(s, item, old, new).await?,
        other => other?,
    };
    lock(&s.last).record(
        item.key.clone(),
        new.last_error
            .as_ref()
            .map(|e| format!("{}: {}", e.reason, e.message)),
        retry,
        RunDetail {
            phase: new.phase,
            waiting_for: crate::status::waiting_for(new),
        },
    );
    DeployItem::from_value(written).map_err(|e| {
        ReconcileError::Cluster(ClusterError::Other {
            what: item_name(&item.key),
            message: e.to_string(),
        })
    })
}

/// Writes `new` (computed from `old`) onto the item as it is now, keeping what others
/// changed meanwhile in the status they own (`jobID`, the trigger time); retried while
/// writes keep crossing.
async fn rebase_status(
    s: &Shared,
    item: &DeployItem,
    old: &Status,
    new: &Status,
) -> Result<Value, ReconcileError> {
    let mut last = ClusterError::Conflict(item_name(&item.key));
    for _ in 0..5 {
        let fresh = s
            .cluster
            .get_item(&item.key)
            .await?
            .ok_or_else(|| ClusterError::NotFound(item_name(&item.key)))?;
        let fresh = DeployItem::from_value(fresh).map_err(|e| {
            ReconcileError::Cluster(ClusterError::Other {
                what: item_name(&item.key),
                message: e.to_string(),
            })
        })?;
        if fresh.uid != item.uid {
            // Deleted and made again: this run's result is not its.
            return Err(ReconcileError::Cluster(last));
        }
        let mut merged = new.clone();
        if fresh.status.job_id != old.job_id {
            merged.job_id = fresh.status.job_id.clone();
        }
        let trigger = |st: &Status| {
            st.transition_times
                .as_ref()
                .and_then(|t| t.trigger_time.clone())
        };
        if trigger(&fresh.status) != trigger(old) {
            merged
                .transition_times
                .get_or_insert_with(Default::default)
                .trigger_time = trigger(&fresh.status);
        }
        tracing::debug!(item = %item.key, "the item changed during the run: its result is written onto the new version");
        match own_write(
            s,
            &item.key,
            s.cluster.update_status(fresh.writing(&merged)),
        )
        .await
        {
            Ok(written) => return Ok(written),
            Err(e @ ClusterError::Conflict(_)) => last = e,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ReconcileError::Cluster(last))
}

/// `write` of the item `key` by this deployer, with the resourceVersion it gave the item
/// remembered as soon as it is answered: its watch event, whenever it comes, wakes
/// nothing. An event that came while the write was on its way and was someone else's
/// queues the item now.
async fn own_write<E>(
    s: &Shared,
    key: &ItemKey,
    write: impl Future<Output = Result<Value, E>>,
) -> Result<Value, E> {
    /// Ends the write's bookkeeping however the write ends (a run that is dropped too).
    struct InFlight<'a> {
        s: &'a Shared,
        key: &'a ItemKey,
        version: Option<String>,
    }
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            let wake = lock(&self.s.own_writes).finish(self.key, self.version.as_deref());
            if wake {
                self.s.queue.add(self.key.clone());
            }
        }
    }
    lock(&s.own_writes).begin(key);
    let mut in_flight = InFlight {
        s,
        key,
        version: None,
    };
    let written = write.await;
    if let Ok(w) = &written {
        in_flight.version = w["metadata"]["resourceVersion"].as_str().map(str::to_owned);
    }
    drop(in_flight);
    written
}

/// PUT of `item` with its metadata edited: the item is taken, not copied, as the write
/// answers with the item that replaces it.
async fn update_metadata(
    s: &Shared,
    item: DeployItem,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> Result<DeployItem, ReconcileError> {
    let DeployItem {
        key, mut object, ..
    } = item;
    if let Some(meta) = object["metadata"].as_object_mut() {
        edit(meta);
    }
    let written = own_write(s, &key, s.cluster.update_item(object)).await?;
    DeployItem::from_value(written).map_err(|e| {
        ReconcileError::Cluster(ClusterError::Other {
            what: item_name(&key),
            message: e.to_string(),
        })
    })
}

async fn apply_plan(
    s: &Shared,
    mut item: DeployItem,
    target: Option<Result<ResolvedTarget, DeployError>>,
    plan: Plan,
    now: SystemTime,
) -> Result<Option<Duration>, ReconcileError> {
    if let Next::Skip(Skip::OtherType(_) | Skip::OtherTarget(_)) = &plan.next {
        // Never touched.
        return Ok(None);
    }
    if !plan.remove_annotations.is_empty() {
        let remove = plan.remove_annotations.clone();
        item = update_metadata(s, item, |meta| {
            if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                for k in &remove {
                    a.remove(k);
                }
            }
        })
        .await?;
    }
    if let Some(status) = &plan.status {
        let old = item.status.clone();
        item = write_status(s, &item, &old, status, None).await?;
    }
    match plan.next {
        Next::Skip(_) | Next::Done => Ok(None),
        Next::Abort { status } => {
            if let Some(ty) = s.types.get(item.deployer_type()) {
                let resolved = target.as_ref().and_then(|t| t.as_ref().ok());
                ty.abort(Job {
                    item: &item,
                    target: resolved,
                    force: false,
                    remaining: None,
                    cluster: s.cluster.as_ref(),
                })
                .await;
            }
            let old = item.status.clone();
            write_status(s, &item, &old, &status, None).await?;
            Ok(None)
        }
        Next::Run {
            delete,
            force,
            remaining,
        } => {
            let Some(ty) = s.types.get(item.deployer_type()).cloned() else {
                return Ok(None);
            };
            if delete {
                run_delete(s, item, ty.as_ref(), target, remaining, now).await
            } else {
                run_reconcile(s, item, ty.as_ref(), target, force, remaining, now).await
            }
        }
    }
}

/// When a run that is not final is looked at again: in 5 s, or at its timeout if sooner.
fn retry_after(remaining: Option<Duration>) -> Duration {
    remaining
        .map_or(RETRY_INTERVAL, |r| r.min(RETRY_INTERVAL))
        .max(Duration::from_millis(50))
}

/// Ends a run's step: a failed step records its error (an unrecoverable one fails the run).
async fn finish_step(
    s: &Shared,
    item: &DeployItem,
    mut status: Status,
    deleting: bool,
    error: Option<DeployError>,
    remaining: Option<Duration>,
    now: SystemTime,
) -> Result<Option<Duration>, ReconcileError> {
    let old = item.status.clone();
    if let Some(e) = &error {
        handle_error(&mut status, deleting, e, now);
        if !e.conditions.is_empty() {
            status.conditions =
                crate::status::merge_conditions(&status.conditions, e.conditions.clone());
        }
    }
    let final_ = status.phase.is_some_and(Phase::is_final);
    let retry = (!final_).then(|| retry_after(remaining));
    if let Some(e) = &error {
        tracing::warn!(item = %item.key, code = e.code_label(), retry_in = ?retry, "deploy item: {e}");
    }
    write_status(s, item, &old, &status, retry).await?;
    Ok(retry)
}

async fn run_reconcile(
    s: &Shared,
    mut item: DeployItem,
    ty: &dyn DeployerType,
    target: Option<Result<ResolvedTarget, DeployError>>,
    force: bool,
    remaining: Option<Duration>,
    now: SystemTime,
) -> Result<Option<Duration>, ReconcileError> {
    if !item.finalizers.iter().any(|f| f == FINALIZER) {
        item = update_metadata(s, item, |meta| {
            let list = meta
                .entry("finalizers")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Some(a) = list.as_array_mut() {
                a.push(Value::String(FINALIZER.to_string()));
            }
        })
        .await?;
    }
    if item.status.phase != Some(Phase::Progressing) {
        let old = item.status.clone();
        let mut status = old.clone();
        set_phase(&mut status, Phase::Progressing, now);
        item = write_status(s, &item, &old, &status, None).await?;
    }
    let mut status = item.status.clone();
    let resolved = match target.transpose() {
        Ok(t) => t,
        Err(e) => return finish_step(s, &item, status, false, Some(e), remaining, now).await,
    };
    if let Some(ctx) = &item.context
        && s.cluster
            .get_context(&item.key.namespace, ctx)
            .await?
            .is_none()
    {
        let e = DeployError::new(
            "GetLandscaperContext",
            "ContextNotFound",
            format!(
                "spec.context: Context {}/{ctx} not found",
                item.key.namespace
            ),
            &[],
        );
        return finish_step(s, &item, status, false, Some(e), remaining, now).await;
    }
    if item
        .config()
        .is_none_or(|c| c.as_object().is_none_or(serde_json::Map::is_empty))
    {
        let e = DeployError::config(
            "Reconcile",
            "ProviderConfigurationMissing",
            "spec.config: the provider configuration is missing",
        );
        return finish_step(s, &item, status, false, Some(e), remaining, now).await;
    }
    let job = Job {
        item: &item,
        target: resolved.as_ref(),
        force,
        remaining,
        cluster: s.cluster.as_ref(),
    };
    let outcome = match ty.reconcile(job).await {
        Ok(o) => o,
        Err(e) => return finish_step(s, &item, status, false, Some(e), remaining, now).await,
    };
    if let Some(ps) = outcome.provider_status {
        status.provider_status = Some(ps);
    }
    if !outcome.conditions.is_empty() {
        status.conditions = crate::status::merge_conditions(&status.conditions, outcome.conditions);
    }
    if let Some(export) = &outcome.export {
        match s
            .cluster
            .write_export(&item.object, status.export_ref.clone(), export)
            .await
        {
            Ok(r) => status.export_ref = Some(r),
            Err(e) => {
                let e = DeployError::new("WriteExport", "ExportFailed", e.to_string(), &[]);
                return finish_step(s, &item, status, false, Some(e), remaining, now).await;
            }
        }
    }
    if outcome.phase == Phase::Failed {
        // A type that gives up without an error still leaves a reason on the item.
        let e = DeployError::new(
            "Reconcile",
            "Failed",
            format!("the {} deployer reported phase Failed", ty.name()),
            &[],
        );
        crate::status::record_error(&mut status, &e, now);
    }
    set_phase(&mut status, outcome.phase, now);
    finish_step(s, &item, status, false, None, remaining, now).await
}

async fn run_delete(
    s: &Shared,
    mut item: DeployItem,
    ty: &dyn DeployerType,
    target: Option<Result<ResolvedTarget, DeployError>>,
    remaining: Option<Duration>,
    now: SystemTime,
) -> Result<Option<Duration>, ReconcileError> {
    if item.status.phase != Some(Phase::Deleting) {
        let old = item.status.clone();
        let mut status = old.clone();
        set_phase(&mut status, Phase::Deleting, now);
        item = write_status(s, &item, &old, &status, None).await?;
    }
    let status = item.status.clone();
    let skip_uninstall = item
        .annotations
        .get(DELETE_WITHOUT_UNINSTALL_ANNOTATION)
        .is_some_and(|v| v == "true");
    if !skip_uninstall {
        let resolved = match target.transpose() {
            Ok(t) => t,
            Err(e) => return finish_step(s, &item, status, true, Some(e), remaining, now).await,
        };
        let job = Job {
            item: &item,
            target: resolved.as_ref(),
            force: false,
            remaining,
            cluster: s.cluster.as_ref(),
        };
        if let Err(e) = ty.delete(job).await {
            return finish_step(s, &item, status, true, Some(e), remaining, now).await;
        }
        if let Some(r) = &status.export_ref {
            let ns = if r.namespace.is_empty() {
                &item.key.namespace
            } else {
                &r.namespace
            };
            if let Err(e) = s.cluster.delete_secret(ns, &r.name).await {
                let e = DeployError::new("Delete", "DeleteExportFailed", e.to_string(), &[]);
                return finish_step(s, &item, status, true, Some(e), remaining, now).await;
            }
        }
    }
    s.journal
        .append(vec![DeployerEvent::DeployItemFinalized {
            item: item_name(&item.key),
        }])
        .await
        .map_err(|e| ReconcileError::Journal(e.to_string()))?;
    let key = item.key.clone();
    match update_metadata(s, item, |meta| {
        if let Some(a) = meta.get_mut("finalizers").and_then(Value::as_array_mut) {
            a.retain(|f| f != FINALIZER);
        }
    })
    .await
    {
        Ok(_) | Err(ReconcileError::Cluster(ClusterError::NotFound(_))) => {}
        Err(e) => return Err(e),
    }
    lock(&s.last).remove(&key);
    Ok(None)
}
