//! The registry: watches CompositeController and DecoratorController objects and keeps
//! one running controller per object — started when one appears, restarted when its spec
//! changes, stopped when it is deleted or no longer selected by `--target-label-selector`.
//! Upstream's events (`Started`, `Stopped`, `SyncError`, `CreateError`) are raised on
//! the controller objects.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bosun_runtime::ports::{BoxFut, PortError};
use bosun_runtime::runner::{self, Action, Outcome};
use bosun_runtime::work_queue::{QueueSnapshot, WorkQueue};
use serde::Serialize;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::children::{ApplyStrategy, ChildType};
use crate::composite::Composite;
use crate::controller::{Context, LastSyncs, Running, start};
use crate::decorator::{Decorator, Target};
use crate::events::LambdaEvent;
use crate::ports::{Change, ClusterError, EventNote, HookFactory, HookSpec, HookType, Resource};
use crate::reconcile::Reconcile;
use crate::related::Customizer;
use crate::selector::Selector;
use crate::steps::BoundHook;
use crate::types::{
    ControllerKind, EndpointConfig, GROUP, Hook, Hooks, parse_composite, parse_decorator,
};

/// How the registry runs.
#[derive(Clone)]
pub struct Settings {
    /// `--target-label-selector`, matched against the controller objects' labels.
    pub target: Selector,
    pub strategy: ApplyStrategy,
}

type Key = (ControllerKind, String);

/// The running controllers, and those refused, for the debug views.
#[derive(Clone, Default)]
pub struct Controllers {
    running: Arc<Mutex<BTreeMap<Key, Running>>>,
    /// Controller objects that could not start, and why (retried with backoff).
    refused: Arc<Mutex<BTreeMap<Key, String>>>,
}

/// One controller in the debug view.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerView {
    pub kind: ControllerKind,
    pub name: String,
    pub queue: Value,
    pub last_syncs: LastSyncs,
    /// A CompositeController's parent kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_kind: Option<String>,
    /// Why the controller object could not start (it is retried with backoff).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl Controllers {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, String>> {
        self.refused.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Each running controller with its queue and the last sync of each parent, then
    /// each refused one with the reason.
    pub fn views(&self) -> Vec<ControllerView> {
        let mut views: Vec<ControllerView> = self
            .lock()
            .values()
            .map(|r| ControllerView {
                kind: r.kind,
                name: r.name.clone(),
                queue: queue_view(&r.snapshot()),
                last_syncs: r.last.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                parent_kind: r.parent_kind.clone(),
                refused: None,
            })
            .collect();
        let empty = serde_json::json!({"waiting": [], "delayed": [], "inFlight": []});
        views.extend(
            self.refused()
                .iter()
                .map(|((kind, name), why)| ControllerView {
                    kind: *kind,
                    name: name.clone(),
                    queue: empty.clone(),
                    last_syncs: LastSyncs::new(),
                    parent_kind: None,
                    refused: Some(why.clone()),
                }),
        );
        views
    }

    /// Names of the running controllers.
    pub fn names(&self) -> Vec<(ControllerKind, String)> {
        self.lock().keys().cloned().collect()
    }

    /// Stops every controller.
    pub fn stop_all(&self) {
        let all = std::mem::take(&mut *self.lock());
        for (_, r) in all {
            r.stop();
        }
    }
}

/// The work queue of a controller as JSON: waiting, delayed (with the time left) and in
/// flight (with the time it has run), each with its consecutive failures.
pub(crate) fn queue_view<K: std::fmt::Display>(s: &QueueSnapshot<K>) -> Value {
    serde_json::json!({
        "waiting": s.waiting.iter().map(|w| serde_json::json!({"key": w.key.to_string(), "failures": w.failures})).collect::<Vec<_>>(),
        "delayed": s.delayed.iter().map(|d| serde_json::json!({
            "key": d.key.to_string(), "dueInMs": u64::try_from(d.due_in.as_millis()).unwrap_or(u64::MAX), "failures": d.failures,
        })).collect::<Vec<_>>(),
        "inFlight": s.in_flight.iter().map(|f| serde_json::json!({
            "key": f.key.to_string(), "runningForMs": u64::try_from(f.running_for.as_millis()).unwrap_or(u64::MAX),
            "dirty": f.dirty, "failures": f.failures,
        })).collect::<Vec<_>>(),
    })
}

/// The running registry; dropping it stops every controller.
pub struct Registry {
    pub controllers: Controllers,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.controllers.stop_all();
    }
}

/// The name the registry's work queue (controller objects to start, change or stop)
/// goes by among the actors.
pub const REGISTRY_ACTOR: &str = "lambda/controllers";

/// Starts the registry.
pub async fn run(
    ctx: Context,
    hooks: Arc<dyn HookFactory>,
    settings: Settings,
) -> Result<Registry, ClusterError> {
    let controllers = Controllers::default();
    let queue: WorkQueue<Key> = WorkQueue::gated(ctx.gate.clone());
    ctx.mailboxes.register(
        REGISTRY_ACTOR,
        queue.mailbox(|(kind, name)| format!("{kind} {name}")),
    );
    let mut tasks = Vec::new();
    let mut resources = BTreeMap::new();
    for kind in [
        ControllerKind::CompositeController,
        ControllerKind::DecoratorController,
    ] {
        let resource = ctx
            .cluster
            .resolve(&format!("{GROUP}/v1alpha1"), kind.plural())
            .await?;
        let mut rx = ctx.watches.watch(&resource).await?;
        let q = queue.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(change) = rx.recv().await {
                let object = match change {
                    Change::Applied { new, .. } => new,
                    Change::Deleted(old) => old,
                };
                q.add((kind, crate::keys::name_of(&object).to_string()));
            }
        }));
        for object in ctx.cluster.list(&resource, None).await? {
            queue.add((kind, crate::keys::name_of(&object).to_string()));
        }
        resources.insert(kind, resource);
    }
    let worker = Worker {
        ctx,
        hooks,
        settings,
        controllers: controllers.clone(),
        resources,
    };
    // One worker: controller objects are started and stopped one at a time.
    tasks.extend(runner::run(&queue, 1, Arc::new(worker)));
    Ok(Registry { controllers, tasks })
}

struct Worker {
    ctx: Context,
    hooks: Arc<dyn HookFactory>,
    settings: Settings,
    controllers: Controllers,
    resources: BTreeMap<ControllerKind, Resource>,
}

fn note(type_: &'static str, reason: &str, message: String) -> EventNote {
    EventNote {
        type_,
        reason: reason.into(),
        message,
    }
}

impl runner::Reconciler<Key> for Worker {
    type Report = ();
    type Error = PortError;

    fn reconcile<'a>(&'a self, key: &'a Key) -> BoxFut<'a, Result<(), PortError>> {
        Box::pin(Worker::reconcile(self, key))
    }

    fn requeue(&self, _: &()) -> Action {
        Action::AwaitChange
    }

    fn finished<'a>(&'a self, key: &'a Key, outcome: Outcome<(), PortError>) -> BoxFut<'a, ()> {
        if let Err(e) = &outcome.result {
            tracing::warn!(kind = %key.0, name = %key.1, retry_in = ?outcome.retry_in, "controller: {e}");
        }
        Box::pin(std::future::ready(()))
    }
}

impl Worker {
    fn journal(&self, event: LambdaEvent) {
        if let Err(e) = self.ctx.journal.append_later(vec![event]) {
            tracing::warn!("cannot journal a controller change: {e}");
        }
    }

    /// metacontroller's Event on a controller object as its controller starts or stops:
    /// `Starting`, `Started`, `Stopping`, `Stopped` ("Started controller: NAME").
    async fn lifecycle_event(&self, object: &Value, reason: &str, key: &Key) {
        let message = format!("{reason} controller: {}", key.1);
        self.ctx
            .cluster
            .event(object, note("Normal", reason, message))
            .await;
    }

    async fn stop(&self, key: &Key, object: Option<&Value>, reason: &str) {
        let Some(running) = self.controllers.lock().remove(key) else {
            return;
        };
        // metacontroller's events: `Stopping` as the controller's loop ends, `Stopped`
        // once it is gone.
        if let Some(object) = object {
            self.lifecycle_event(object, "Stopping", key).await;
        }
        running.stop();
        tracing::info!(kind = %key.0, name = %key.1, "controller stopped: {reason}");
        self.journal(LambdaEvent::ControllerStopped {
            kind: key.0,
            name: key.1.clone(),
            reason: reason.to_string(),
        });
        if let Some(object) = object {
            self.lifecycle_event(object, "Stopped", key).await;
        }
    }

    async fn reconcile(&self, key: &Key) -> Result<(), PortError> {
        let resource = &self.resources[&key.0];
        let object = self.ctx.cluster.cached(resource, "", &key.1).await?;
        let Some(object) = object else {
            self.controllers.refused().remove(key);
            self.stop(key, None, "deleted").await;
            return Ok(());
        };
        if !self.settings.target.matches_labels(&object) {
            self.controllers.refused().remove(key);
            self.stop(
                key,
                Some(&object),
                "not selected by --target-label-selector",
            )
            .await;
            return Ok(());
        }
        let spec = object["spec"].clone();
        if self
            .controllers
            .lock()
            .get(key)
            .is_some_and(|r| r.spec == spec)
        {
            return Ok(());
        }
        self.stop(key, Some(&object), "spec changed").await;
        let reconciler = match self.build(key.0, &object).await {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(Build::Refused(message)) => {
                // Retried with backoff, as metacontroller does: what refused it (a parent
                // CRD without the status subresource) may be fixed without a change here.
                self.refuse(key, &object, "SyncError", message.clone())
                    .await;
                return Err(PortError::permanent(message));
            }
            Err(Build::Retry(message)) => return Err(PortError::transient(message)),
            Err(Build::Create(message)) => {
                self.refuse(
                    key,
                    &object,
                    "CreateError",
                    format!("Cannot create new controller: {message}"),
                )
                .await;
                return Err(PortError::permanent(message));
            }
        };
        // metacontroller's events: `Starting` as the controller's loop begins, `Started`
        // once it runs.
        self.lifecycle_event(&object, "Starting", key).await;
        let running = match start(reconciler, spec, self.ctx.clone()).await {
            Ok(running) => running,
            Err(e) => {
                // Retried with backoff; meanwhile the controller's Events, its journal and
                // `/lambda/controllers` say why it does not run.
                self.refuse(
                    key,
                    &object,
                    "StartError",
                    format!("Cannot start controller: {e}"),
                )
                .await;
                return Err(e.into());
            }
        };
        let parent_kind = running.parent_kind.clone();
        self.controllers.lock().insert(key.clone(), running);
        self.controllers.refused().remove(key);
        self.journal(LambdaEvent::ControllerStarted {
            kind: key.0,
            name: key.1.clone(),
            generation: object["metadata"]["generation"].as_i64().unwrap_or(0),
            parent_kind,
        });
        self.lifecycle_event(&object, "Started", key).await;
        Ok(())
    }

    async fn refuse(&self, key: &Key, object: &Value, reason: &str, message: String) {
        tracing::warn!(kind = %key.0, name = %key.1, "{message}");
        self.controllers
            .refused()
            .insert(key.clone(), message.clone());
        self.journal(LambdaEvent::ControllerRefused {
            kind: key.0,
            name: key.1.clone(),
            error: message.clone(),
        });
        self.ctx
            .cluster
            .event(object, note("Warning", reason, message))
            .await;
    }

    async fn bind(
        &self,
        kind: ControllerKind,
        name: &str,
        hooks: &Hooks,
        endpoint_configs: &[EndpointConfig],
        hook_type: HookType,
    ) -> Result<Option<BoundHook>, Build> {
        let hook: Option<&Hook> = match hook_type {
            HookType::Sync => hooks.sync.as_ref(),
            HookType::Finalize => hooks.finalize.as_ref(),
            HookType::Customize => hooks.customize.as_ref(),
        };
        let Some(hook) = hook else {
            return Ok(None);
        };
        let client = self
            .hooks
            .client(HookSpec {
                controller: name.to_string(),
                controller_kind: kind,
                hook_type,
                hook: hook.clone(),
                endpoint_configs: endpoint_configs.to_vec(),
            })
            .await
            .map_err(|e| Build::Create(e.to_string()))?;
        Ok(Some(BoundHook {
            hook: hook.clone(),
            client,
        }))
    }

    async fn child_types(
        &self,
        children: &[crate::types::ChildResource],
    ) -> Result<Vec<ChildType>, Build> {
        let mut out = Vec::new();
        for c in children {
            let resource = self
                .ctx
                .cluster
                .resolve(&c.resource.api_version, &c.resource.resource)
                .await
                .map_err(|e| Build::Retry(e.to_string()))?;
            out.push(ChildType {
                resource,
                method: c.update_strategy.method,
            });
        }
        Ok(out)
    }

    async fn build(
        &self,
        kind: ControllerKind,
        object: &Value,
    ) -> Result<Option<Box<dyn Reconcile>>, Build> {
        match kind {
            ControllerKind::CompositeController => {
                let (name, spec) =
                    parse_composite(object).map_err(|e| Build::Refused(e.to_string()))?;
                let pr = &spec.parent_resource.resource;
                let parent = self
                    .ctx
                    .cluster
                    .resolve(&pr.api_version, &pr.resource)
                    .await
                    .map_err(|e| Build::Retry(e.to_string()))?;
                self.check_status_subresource(&parent).await?;
                let hooks = spec.hooks.clone().unwrap_or_default();
                let sync = self
                    .bind(kind, &name, &hooks, &spec.endpoint_configs, HookType::Sync)
                    .await?;
                let finalize = self
                    .bind(
                        kind,
                        &name,
                        &hooks,
                        &spec.endpoint_configs,
                        HookType::Finalize,
                    )
                    .await?;
                let customize = self
                    .bind(
                        kind,
                        &name,
                        &hooks,
                        &spec.endpoint_configs,
                        HookType::Customize,
                    )
                    .await?;
                let parent_selector = match &spec.parent_resource.label_selector {
                    Some(s) => Selector::labels(s).map_err(|e| {
                        Build::Refused(format!(
                            "CompositeController {name}: spec.parentResource.labelSelector: {e}"
                        ))
                    })?,
                    None => Selector::default(),
                };
                let children = self.child_types(&spec.child_resources).await?;
                // Rolling updates keep ControllerRevisions (watched with the children).
                let revisions = if children.iter().any(|t| t.method.is_rolling()) {
                    let resource = self
                        .ctx
                        .cluster
                        .resolve(&format!("{GROUP}/v1alpha1"), "controllerrevisions")
                        .await
                        .map_err(|e| Build::Retry(e.to_string()))?;
                    Some(resource)
                } else {
                    None
                };
                let composite = Composite {
                    name,
                    object: object.clone(),
                    spec,
                    parent,
                    children,
                    parent_selector,
                    sync,
                    finalize,
                    customizer: customize.map(|b| Customizer::new(b.hook, b.client)),
                    strategy: self.settings.strategy,
                    revisions,
                    settled: Default::default(),
                    requests: Default::default(),
                };
                if let Some(refusal) = crate::composite::rolling::cluster_scoped_refusal(&composite)
                {
                    return Err(Build::Refused(format!(
                        "CompositeController {}: {refusal}",
                        composite.name
                    )));
                }
                Ok(Some(Box::new(composite)))
            }
            ControllerKind::DecoratorController => {
                let (name, spec) =
                    parse_decorator(object).map_err(|e| Build::Refused(e.to_string()))?;
                let mut targets = Vec::new();
                for (i, r) in spec.resources.iter().enumerate() {
                    let resource = self
                        .ctx
                        .cluster
                        .resolve(&r.resource.api_version, &r.resource.resource)
                        .await
                        .map_err(|e| Build::Retry(e.to_string()))?;
                    let refuse = |field: &str, e: String| {
                        Build::Refused(format!(
                            "DecoratorController {name}: spec.resources[{i}].{field}: {e}"
                        ))
                    };
                    let labels = match &r.label_selector {
                        Some(s) => Selector::labels(s)
                            .map_err(|e| refuse("labelSelector", e.to_string()))?,
                        None => Selector::default(),
                    };
                    let annotations = Selector::annotations(r.annotation_selector.as_ref())
                        .map_err(|e| refuse("annotationSelector", e.to_string()))?;
                    targets.push(Target {
                        resource,
                        labels,
                        annotations,
                        ignore_status_changes: r.ignore_status_changes == Some(true),
                    });
                }
                let hooks = spec.hooks.clone().unwrap_or_default();
                let sync = self
                    .bind(kind, &name, &hooks, &spec.endpoint_configs, HookType::Sync)
                    .await?;
                let finalize = self
                    .bind(
                        kind,
                        &name,
                        &hooks,
                        &spec.endpoint_configs,
                        HookType::Finalize,
                    )
                    .await?;
                let customize = self
                    .bind(
                        kind,
                        &name,
                        &hooks,
                        &spec.endpoint_configs,
                        HookType::Customize,
                    )
                    .await?;
                let attachments = self.child_types(&spec.attachments).await?;
                Ok(Some(Box::new(Decorator {
                    name,
                    object: object.clone(),
                    spec,
                    targets,
                    attachments,
                    sync,
                    finalize,
                    customizer: customize.map(|b| Customizer::new(b.hook, b.client)),
                    strategy: self.settings.strategy,
                })))
            }
        }
    }

    /// A CompositeController's parent must be a custom resource with the status
    /// subresource (else every status write bumps the generation: a hot loop).
    async fn check_status_subresource(&self, parent: &Resource) -> Result<(), Build> {
        let crds = self
            .ctx
            .cluster
            .resolve("apiextensions.k8s.io/v1", "customresourcedefinitions")
            .await
            .map_err(|e| Build::Retry(e.to_string()))?;
        let crd_name = format!("{}.{}", parent.plural, parent.group);
        let crd = match self.ctx.cluster.get(&crds, "", &crd_name).await {
            Ok(crd) => crd,
            Err(e) => {
                return Err(Build::Retry(format!(
                    "CustomResourceDefinition {crd_name} not found: {e}"
                )));
            }
        };
        let version = crd["spec"]["versions"].as_array().and_then(|vs| {
            vs.iter()
                .find(|v| v["name"].as_str() == Some(&parent.version))
        });
        let has_status = version.is_some_and(|v| v["subresources"]["status"].is_object());
        if !has_status {
            return Err(Build::Refused(format!(
                "CustomResourceDefinition {crd_name}, version {} does not have subresource 'Status' enabled",
                parent.version
            )));
        }
        Ok(())
    }
}

/// Why a controller could not be built.
enum Build {
    /// The object itself is wrong: say so, wait for it to change.
    Refused(String),
    /// Something it needs is not there yet: retry with backoff.
    Retry(String),
    /// Its hooks cannot be prepared (credentials, CA, URL).
    Create(String),
}
