//! One running controller: its keyed work queue, its workers, the tasks that turn watch
//! events into queue keys, and its resync ticker.
//!
//! ```text
//!   parent watch ──┐                                   ┌─► worker 1 ─┐
//!   child watches ─┼─► keys ─► WorkQueue (one sync ────┼─► worker 2 ─┼─► sync(key)
//!   related ───────┤           in flight per key,      └─► worker N ─┘   │
//!   resync ticker ─┘           backoff, add_after)  ◄── requeue / forget ─┘
//! ```

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use bosun_runtime::last_outcome::LastOutcomes;
use bosun_runtime::mailbox::Mailboxes;
use bosun_runtime::ports::{BoxFut, EventSink};
use bosun_runtime::runner::{self, Action, Outcome};
use bosun_runtime::work_queue::{QueueSnapshot, WorkQueue};
use serde::Serialize;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::events::LambdaEvent;
use crate::keys::{ParentKey, namespace_of};
use crate::ports::{Change, Cluster, EventNote, HookType, Resource, Watches};
use crate::reconcile::Reconcile;
use crate::related::selects_any;
use crate::steps::{SyncError, SyncReport};
use crate::types::ControllerKind;

/// The parent keys a child or attachment event concerns; none (with a warning) when the
/// event cannot be mapped.
async fn parents_of_child(
    r: &dyn Reconcile,
    cluster: &dyn Cluster,
    child: &Value,
    deleted: bool,
) -> Vec<ParentKey> {
    r.parents_of_child(cluster, child, deleted)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(controller = %r.name(), "cannot map a child event to its parent: {e}");
            Vec::new()
        })
}

/// What a controller needs from the world.
#[derive(Clone)]
pub struct Context {
    pub cluster: Arc<dyn Cluster>,
    pub watches: Arc<dyn Watches>,
    pub journal: Arc<dyn EventSink<LambdaEvent>>,
    /// Workers per controller (`--workers`).
    pub workers: usize,
    /// Where each controller's work queue shows as an actor's mailbox (`bosun actors`).
    pub mailboxes: Mailboxes,
    /// The host's work gate: the workers take no key once it stops.
    pub gate: bosun_runtime::lifecycle::WorkGate,
}

/// What the debug view keeps of a parent's last sync, beside its time, error, failures
/// in a row and next try ([`LastOutcome`](bosun_runtime::last_outcome::LastOutcome)).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncDetail {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<&'static str>,
    /// Digests of the hook's request and answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The children the answer asked for.
    pub planned: Arc<[String]>,
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub deleted: Vec<String>,
    pub warnings: Vec<String>,
}

/// The last sync of each parent.
pub(crate) type LastSyncs = LastOutcomes<ParentKey, SyncDetail>;

/// A running controller.
pub struct Running {
    pub kind: ControllerKind,
    pub name: String,
    /// The spec it runs (to tell a changed controller object from a resync).
    pub spec: Value,
    /// A CompositeController's parent kind (its parents' keys do not carry it).
    pub parent_kind: Option<String>,
    pub queue: WorkQueue<ParentKey>,
    pub last: Arc<Mutex<LastSyncs>>,
    tasks: Vec<JoinHandle<()>>,
    /// Its entry in the actors' mailboxes, removed when it stops.
    mailbox: (Mailboxes, String),
}

/// The name a controller's work queue goes by among the actors:
/// `lambda/CompositeController/<name>`.
pub(crate) fn actor_name(kind: ControllerKind, name: &str) -> String {
    format!("lambda/{kind}/{name}")
}

impl Running {
    /// The work queue's view: waiting, delayed and in-flight parents.
    pub fn snapshot(&self) -> QueueSnapshot<ParentKey> {
        self.queue.snapshot()
    }

    /// Stops taking keys and cancels the event tasks; a sync in flight is cancelled at its
    /// next await (its writes are idempotent and the next controller redoes it).
    pub fn stop(self) {
        self.queue.shut_down();
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.queue.shut_down();
        let (mailboxes, name) = &self.mailbox;
        mailboxes.remove(name);
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether an update only changed status (ignoreStatusChanges).
fn status_only(old: &Value, new: &Value) -> bool {
    old["metadata"]["generation"] == new["metadata"]["generation"]
        && old["metadata"]["labels"] == new["metadata"]["labels"]
        && old["metadata"]["annotations"] == new["metadata"]["annotations"]
        && new["metadata"]["deletionTimestamp"].is_null()
}

/// The keys of every parent of `resource` the controller wants, from the informer cache:
/// by the keys alone when it wants every parent, else by the objects' heads.
async fn wanted_parents(
    r: &dyn Reconcile,
    cluster: &dyn Cluster,
    resource: &Resource,
) -> Result<Vec<ParentKey>, crate::ports::ClusterError> {
    if r.wants_every_parent() {
        let keys = cluster.keys(resource, None).await?;
        return Ok(keys
            .into_iter()
            .map(|(namespace, name)| ParentKey::shared(namespace, name))
            .collect());
    }
    let heads = cluster.list_heads(resource, None).await?;
    Ok(heads
        .iter()
        .filter(|p| r.wants(p))
        .map(|p| r.parent_key(p))
        .collect())
}

/// Starts a controller: subscribes its watches, then runs its workers.
pub async fn start(
    reconciler: Box<dyn Reconcile>,
    spec: Value,
    ctx: Context,
) -> Result<Running, crate::ports::ClusterError> {
    let parent_kind = reconciler.parent_kind();
    let reconciler: Arc<dyn Reconcile> = Arc::from(reconciler);
    let queue: WorkQueue<ParentKey> = WorkQueue::gated(ctx.gate.clone());
    let last = Arc::new(Mutex::new(LastSyncs::new()));
    let mut tasks = Vec::new();
    let name = reconciler.name().to_string();
    let kind = reconciler.kind();
    let actor = actor_name(kind, &name);
    ctx.mailboxes
        .register(&actor, queue.mailbox(ParentKey::to_string));

    // Parents.
    for resource in reconciler.parent_resources() {
        let mut rx = ctx.watches.watch(&resource).await?;
        let (r, q) = (Arc::clone(&reconciler), queue.clone());
        tasks.push(tokio::spawn(async move {
            while let Some(change) = rx.recv().await {
                match change {
                    Change::Applied { old, new } => {
                        if let Some(old) = &old
                            && r.ignore_status_changes(&new)
                            && status_only(old, &new)
                        {
                            continue;
                        }
                        if r.wants(&new) {
                            q.add(r.parent_key(&new));
                        }
                    }
                    Change::Deleted(old) => {
                        if r.wants(&old) {
                            q.add(r.parent_key(&old));
                        }
                    }
                }
            }
        }));
        // The first list: every parent once.
        for key in wanted_parents(reconciler.as_ref(), ctx.cluster.as_ref(), &resource).await? {
            queue.add(key);
        }
    }
    // Children and attachments.
    let mut seen = HashSet::new();
    for resource in reconciler.child_resources() {
        if !seen.insert(resource.clone()) {
            continue;
        }
        let mut rx = ctx.watches.watch(&resource).await?;
        let (r, q, cluster) = (
            Arc::clone(&reconciler),
            queue.clone(),
            Arc::clone(&ctx.cluster),
        );
        tasks.push(tokio::spawn(async move {
            while let Some(change) = rx.recv().await {
                let (child, deleted) = match &change {
                    Change::Applied { old, new } => {
                        if old.as_ref().is_some_and(|o| {
                            o["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"]
                        }) {
                            continue;
                        }
                        let deleting = !new["metadata"]["deletionTimestamp"].is_null();
                        (Arc::clone(new), deleting)
                    }
                    Change::Deleted(old) => (Arc::clone(old), true),
                };
                for key in parents_of_child(r.as_ref(), cluster.as_ref(), &child, deleted).await {
                    q.add(key);
                }
            }
        }));
    }
    // Resync ticker.
    if let Some(period) = reconciler.resync_period() {
        let (r, q, cluster) = (
            Arc::clone(&reconciler),
            queue.clone(),
            Arc::clone(&ctx.cluster),
        );
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            loop {
                tick.tick().await;
                for resource in r.parent_resources() {
                    let wanted = wanted_parents(r.as_ref(), cluster.as_ref(), &resource).await;
                    for key in wanted.unwrap_or_default() {
                        q.add(key);
                    }
                }
            }
        }));
    }
    // Related objects: watched once some customize answer names their resource.
    let related = Arc::new(Mutex::new(HashSet::<(String, String)>::new()));
    let related_tasks = Arc::new(Mutex::new(Vec::<JoinHandle<()>>::new()));
    // Workers.
    let parents = Arc::new(Parents {
        r: Arc::clone(&reconciler),
        ctx: ctx.clone(),
        queue: queue.clone(),
        last: Arc::clone(&last),
        related: Arc::clone(&related),
        related_tasks: Arc::clone(&related_tasks),
    });
    tasks.extend(runner::run(&queue, ctx.workers, parents));
    // Cancelled with the controller.
    let rt = Arc::clone(&related_tasks);
    tasks.push(tokio::spawn(async move {
        struct AbortAll(Arc<Mutex<Vec<JoinHandle<()>>>>);
        impl Drop for AbortAll {
            fn drop(&mut self) {
                for t in lock(&self.0).iter() {
                    t.abort();
                }
            }
        }
        let _guard = AbortAll(rt);
        std::future::pending::<()>().await;
    }));
    tracing::info!(controller = %name, kind = %kind, "controller started");
    Ok(Running {
        kind,
        name,
        spec,
        parent_kind,
        queue,
        last,
        tasks,
        mailbox: (ctx.mailboxes.clone(), actor),
    })
}

/// A controller's parents as the runner reconciles them: one sync per key, then what the
/// outcome asks (a resync, a backoff, a `Retry-After`), then [`record`].
struct Parents {
    r: Arc<dyn Reconcile>,
    ctx: Context,
    queue: WorkQueue<ParentKey>,
    last: Arc<Mutex<LastSyncs>>,
    related: Arc<Mutex<HashSet<(String, String)>>>,
    related_tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl runner::Reconciler<ParentKey> for Parents {
    type Report = SyncReport;
    type Error = SyncError;

    fn reconcile<'a>(&'a self, key: &'a ParentKey) -> BoxFut<'a, Result<SyncReport, SyncError>> {
        Box::pin(self.r.sync(self.ctx.cluster.as_ref(), key))
    }

    fn requeue(&self, report: &SyncReport) -> Action {
        Action::requeue_after(report.resync_after)
    }

    fn finished<'a>(
        &'a self,
        key: &'a ParentKey,
        outcome: Outcome<SyncReport, SyncError>,
    ) -> BoxFut<'a, ()> {
        Box::pin(async move {
            record(self.r.as_ref(), &self.ctx, &self.last, key, outcome).await;
            watch_related(
                &self.r,
                &self.ctx,
                &self.queue,
                &self.related,
                &self.related_tasks,
                key,
            )
            .await;
        })
    }
}

/// Journals what a sync changed, keeps it for the debug view, raises an Event on failure.
async fn record(
    r: &dyn Reconcile,
    ctx: &Context,
    last: &Mutex<LastSyncs>,
    key: &ParentKey,
    outcome: Outcome<SyncReport, SyncError>,
) {
    let controller = r.name().to_string();
    match outcome.result {
        Ok(report) => {
            tracing::debug!(%controller, %key, hook = ?report.hook, created = ?report.applied.created,
                updated = ?report.applied.updated, deleted = ?report.applied.deleted,
                status_written = report.status_written, finalized = report.finalized, "synced");
            let failed_before = lock(last).get(key).is_some_and(|l| !l.ok);
            if report.hook.is_none() {
                lock(last).remove(key);
                return;
            }
            if report.applied.changed()
                || report.status_written
                || report.finalized
                || failed_before
            {
                let event = LambdaEvent::Synced {
                    controller: controller.clone(),
                    key: key.to_string(),
                    hook: report.hook.map(|h| h.to_string()).unwrap_or_default(),
                    answer: report.answer_digest.clone().unwrap_or_default(),
                    created: report.applied.created.clone(),
                    updated: report.applied.updated.clone(),
                    deleted: report.applied.deleted.clone(),
                    status_written: report.status_written,
                    finalized: report.finalized,
                };
                if let Err(e) = ctx.journal.append_later(vec![event]) {
                    tracing::warn!(%controller, %key, "cannot journal a sync: {e}");
                }
            }
            for w in &report.warnings {
                tracing::warn!(%controller, %key, "hook answer: {w}");
            }
            lock(last).record(
                key.clone(),
                None,
                report.resync_after,
                SyncDetail {
                    hook: report.hook.map(HookType::as_str),
                    request: report.request_digest,
                    answer: report.answer_digest,
                    planned: report.planned,
                    created: report.applied.created,
                    updated: report.applied.updated,
                    deleted: report.applied.deleted,
                    warnings: report.warnings,
                },
            );
        }
        Err(err) => {
            let delay = outcome.retry_in.unwrap_or_default();
            // A `Retry-After` is the hook asking for time, not a failure to report.
            let event = matches!(err, SyncError::Failed(_));
            let message = err.to_string();
            tracing::warn!(%controller, %key, retry_in = ?delay, "sync failed: {message}");
            if event && let Some(parent) = parent_object(r, ctx.cluster.as_ref(), key).await {
                {
                    ctx.cluster
                        .event(
                            &parent,
                            EventNote {
                                type_: "Warning",
                                reason: "SyncError".into(),
                                message: format!("Sync error: {message}"),
                            },
                        )
                        .await;
                }
            }
            // Every failure is journaled, counted: the backoff bounds how often (at most
            // one per retry), and `bosun journal lambda --parent` tells how many and when
            // the next retry comes.
            let failures = {
                let mut last = lock(last);
                last.record(
                    key.clone(),
                    Some(message.clone()),
                    Some(delay),
                    SyncDetail::default(),
                );
                last.get(key).map_or(1, |l| l.failures)
            };
            let retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
            if let Err(e) = ctx.journal.append_later(vec![LambdaEvent::SyncFailed {
                controller: controller.clone(),
                key: key.to_string(),
                error: message.clone(),
                retry_in_ms,
                failures,
            }]) {
                tracing::warn!(%controller, %key, "cannot journal a sync: {e}");
            }
        }
    }
}

async fn parent_object(r: &dyn Reconcile, cluster: &dyn Cluster, key: &ParentKey) -> Option<Value> {
    cluster
        .cached(r.resource_of(key)?, &key.namespace, &key.name)
        .await
        .ok()
        .flatten()
        .map(|p| (*p).clone())
}

/// Starts watches for related resources the customize hook named for `key`, so their
/// changes reach the parents whose rules select them.
async fn watch_related(
    r: &Arc<dyn Reconcile>,
    ctx: &Context,
    q: &WorkQueue<ParentKey>,
    related: &Arc<Mutex<HashSet<(String, String)>>>,
    related_tasks: &Arc<Mutex<Vec<JoinHandle<()>>>>,
    key: &ParentKey,
) {
    let Some(customizer) = r.customizer() else {
        return;
    };
    let Some(parent) = parent_object(r.as_ref(), ctx.cluster.as_ref(), key).await else {
        return;
    };
    let Some(rules) = customizer.cached_rules(&parent) else {
        return;
    };
    for rule in rules.iter() {
        let id = (rule.api_version.clone(), rule.resource.clone());
        if !lock(related).insert(id.clone()) {
            continue;
        }
        let Ok(resource) = ctx.cluster.resolve(&id.0, &id.1).await else {
            lock(related).remove(&id);
            continue;
        };
        let Ok(mut rx) = ctx.watches.watch(&resource).await else {
            lock(related).remove(&id);
            continue;
        };
        let (r, q, cluster) = (Arc::clone(r), q.clone(), Arc::clone(&ctx.cluster));
        lock(related_tasks).push(tokio::spawn(async move {
            while let Some(change) = rx.recv().await {
                // The old state too: parents that selected it hear that it left them.
                let states: Vec<Arc<Value>> = match &change {
                    Change::Applied { old, new } => {
                        if old.as_ref().is_some_and(|o| {
                            o["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"]
                        }) {
                            continue;
                        }
                        old.iter().cloned().chain([Arc::clone(new)]).collect()
                    }
                    Change::Deleted(old) => vec![Arc::clone(old)],
                };
                enqueue_related(r.as_ref(), cluster.as_ref(), &q, &resource, &states).await;
            }
        }));
    }
}

/// Enqueues every parent whose cached customize rules select one of `states` (the old
/// and new state of one related object).
async fn enqueue_related(
    r: &dyn Reconcile,
    cluster: &dyn Cluster,
    q: &WorkQueue<ParentKey>,
    watched: &Resource,
    states: &[Arc<Value>],
) {
    let Some(customizer) = r.customizer() else {
        return;
    };
    let Some(object) = states.last() else {
        return;
    };
    let ns_labels = match cluster.resolve("v1", "namespaces").await {
        Ok(res) if !namespace_of(object).is_empty() => cluster
            .cached(&res, "", namespace_of(object))
            .await
            .ok()
            .flatten()
            .map(|n| (*n).clone()),
        _ => None,
    };
    let states: Vec<&Value> = states.iter().map(|s| s.as_ref()).collect();
    for resource in r.parent_resources() {
        for parent in cluster.list(&resource, None).await.unwrap_or_default() {
            if !r.wants(&parent) {
                continue;
            }
            let Some(rules) = customizer.cached_rules(&parent) else {
                continue;
            };
            if selects_any(
                &rules,
                &watched.plural,
                customizer.version(),
                namespace_of(&parent),
                &states,
                |_| ns_labels.clone(),
            ) {
                q.add(r.parent_key(&parent));
            }
        }
    }
}
