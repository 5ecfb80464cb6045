//! The world the in-process scenarios run in (`mod world;` in each test binary): the
//! registry of lambda controllers on the in-memory
//! cluster and scripted webhooks of `bosun_lambda::fakes`, with what a user of
//! metacontroller would look at (objects, statuses, Events, the hooks' requests) and the
//! parts of a cluster that are not the API server's storage: the namespaces an API server
//! starts with, and the garbage collector (kube-controller-manager's), which deletes what
//! a deleted object owned.
//!
//! ```text
//!   test ──put/edit/delete──► MemoryCluster ◄──reads, writes── controllers ──► ScriptedHooks
//!                                  │ watches                     (registry)        ▲
//!                                  └──► garbage collector                          │
//!   test ◄──objects, Events, journal, requests──────────────────────────────────────┘
//! ```
//!
//! Every wait polls a condition with a deadline on tokio's clock: a scenario whose
//! behaviour is a delay runs on paused time, which jumps ahead whenever every task waits.

// Each test binary uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bosun_lambda::children::ApplyStrategy;
use bosun_lambda::controller::Context;
use bosun_lambda::events::LambdaEvent;
use bosun_lambda::fakes::{MemoryCluster, RecordedEvent, ScriptedFactory, ScriptedHooks, resource};
use bosun_lambda::ports::{Change, HookError, HookType, Resource, Watches};
use bosun_lambda::registry::{self, Registry, Settings};
use bosun_lambda::selector::Selector;
use bosun_runtime::MemoryJournal;
use bosun_runtime::mailbox::Mailboxes;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// How long a scenario waits for a condition before it fails naming it. The fakes answer
/// at once: anything near this is a hang, not a slow machine.
const WAIT: Duration = Duration::from_secs(20);

/// A resource without the `/status` subresource (ConfigMaps, Secrets, RBAC objects).
fn plain(mut r: Resource) -> Resource {
    r.status_subresource = false;
    r
}

/// The resources every world serves, as a cluster's API server does before any CRD.
fn builtins() -> Vec<Resource> {
    vec![
        resource("v1", "namespaces", "Namespace", false),
        plain(resource("v1", "configmaps", "ConfigMap", true)),
        plain(resource("v1", "secrets", "Secret", true)),
        resource("v1", "pods", "Pod", true),
        resource("v1", "services", "Service", true),
        resource(
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
        ),
        resource("apps/v1", "daemonsets", "DaemonSet", true),
        resource("apps/v1", "replicasets", "ReplicaSet", true),
        resource("apps/v1", "statefulsets", "StatefulSet", true),
        resource("batch/v1", "jobs", "Job", true),
        plain(resource(
            "rbac.authorization.k8s.io/v1",
            "clusterroles",
            "ClusterRole",
            false,
        )),
        plain(resource(
            "rbac.authorization.k8s.io/v1",
            "rolebindings",
            "RoleBinding",
            true,
        )),
        resource(
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        ),
        resource(
            "metacontroller.k8s.io/v1alpha1",
            "compositecontrollers",
            "CompositeController",
            false,
        ),
        resource(
            "metacontroller.k8s.io/v1alpha1",
            "decoratorcontrollers",
            "DecoratorController",
            false,
        ),
        plain(resource(
            "metacontroller.k8s.io/v1alpha1",
            "controllerrevisions",
            "ControllerRevision",
            true,
        )),
    ]
}

/// A custom resource `<plural>.example.com` (version v1, with the status subresource):
/// its kind, plural and whether it is namespaced.
#[derive(Clone, Copy)]
pub struct Crd(pub &'static str, pub &'static str, pub bool);

/// The CustomResourceDefinition object of `crd`.
fn crd_object(Crd(kind, plural, namespaced): Crd) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {
            "group": "example.com",
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "subresources": {"status": {}}}]
        }
    })
}

/// A running registry of lambda controllers on a fake cluster, with what the scenarios
/// look at.
pub struct World {
    pub cluster: Arc<MemoryCluster>,
    pub hooks: Arc<ScriptedHooks>,
    pub journal: MemoryJournal<LambdaEvent>,
    pub mailboxes: Mailboxes,
    pub registry: Registry,
    resources: BTreeMap<String, Resource>,
    /// `--target-label-selector` and `--apply-strategy`, for a restart.
    flags: (String, ApplyStrategy),
    garbage_collector: JoinHandle<()>,
}

impl Drop for World {
    fn drop(&mut self) {
        self.garbage_collector.abort();
    }
}

impl World {
    /// A world serving the built-in resources and `crds`, the namespace `default`, and the
    /// registry with metacontroller's default flags.
    pub async fn start(crds: &[Crd]) -> World {
        World::start_with(crds, "", ApplyStrategy::DynamicApply).await
    }

    /// [`World::start`] with `--target-label-selector` and `--apply-strategy`.
    pub async fn start_with(crds: &[Crd], target: &str, strategy: ApplyStrategy) -> World {
        let mut served = builtins();
        served.extend(crds.iter().map(|&Crd(kind, plural, namespaced)| {
            resource("example.com/v1", plural, kind, namespaced)
        }));
        let resources: BTreeMap<String, Resource> = served
            .iter()
            .map(|r| (r.plural.clone(), r.clone()))
            .collect();
        // Change counts as informer caches keep them: a settled parent is resent without reads.
        let cluster = Arc::new(MemoryCluster::new(served).with_change_counts());
        cluster.put(
            &resources["namespaces"],
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}),
        );
        for &crd in crds {
            cluster.put(&resources["customresourcedefinitions"], crd_object(crd));
        }
        let garbage_collector = garbage_collector(&cluster, &resources).await;
        let hooks = Arc::new(ScriptedHooks::default());
        let journal = MemoryJournal::default();
        let mailboxes = Mailboxes::default();
        let flags = (target.to_string(), strategy);
        let registry = start_registry(&cluster, &hooks, &journal, &mailboxes, &flags).await;
        World {
            cluster,
            hooks,
            journal,
            mailboxes,
            registry,
            resources,
            flags,
            garbage_collector,
        }
    }

    /// Restarts the operator: every controller stops (a sync in flight is cancelled),
    /// `while_down` changes the world meanwhile, and a new registry starts on the same
    /// cluster, webhooks and journal. Nothing in memory survives but what they hold.
    pub async fn restart(&mut self, while_down: impl FnOnce(&World)) {
        self.registry.controllers.stop_all();
        while_down(self);
        let registry = start_registry(
            &self.cluster,
            &self.hooks,
            &self.journal,
            &self.mailboxes,
            &self.flags,
        )
        .await;
        // The old registry's own tasks end as it is dropped.
        drop(std::mem::replace(&mut self.registry, registry));
    }

    /// The served resource of `plural`.
    pub fn resource(&self, plural: &str) -> &Resource {
        self.resources
            .get(plural)
            .unwrap_or_else(|| panic!("the world serves no {plural}"))
    }

    /// Creates (or replaces, as another client would) an object of `plural`; a namespaced
    /// object that names no namespace goes to `default`. Returns it as stored.
    pub fn put(&self, plural: &str, mut object: Value) -> Value {
        let resource = self.resource(plural).clone();
        if resource.namespaced && object["metadata"]["namespace"].is_null() {
            object["metadata"]["namespace"] = json!("default");
        }
        self.cluster.put(&resource, object)
    }

    /// Creates a Namespace with `labels`.
    pub fn namespace(&self, name: &str, labels: Value) {
        self.put(
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "labels": labels}}),
        );
    }

    /// Creates a ConfigMap `ns/name` with `labels` and `data`.
    pub fn configmap(&self, ns: &str, name: &str, labels: Value, data: Value) {
        self.put(
            "configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": ns, "labels": labels},
                   "data": data}),
        );
    }

    /// Creates a CompositeController or a DecoratorController object.
    pub fn controller(&self, object: Value) {
        let plural = match object["kind"].as_str() {
            Some("CompositeController") => "compositecontrollers",
            Some("DecoratorController") => "decoratorcontrollers",
            other => panic!("not a controller object: {other:?}"),
        };
        self.put(plural, object);
    }

    /// An object of `plural` (`ns` empty for a cluster-scoped one).
    pub fn get(&self, plural: &str, ns: &str, name: &str) -> Option<Value> {
        self.cluster
            .object(self.resource(plural), ns, name)
            .map(|o| (*o).clone())
    }

    /// Every object of `plural`.
    pub fn list(&self, plural: &str) -> Vec<Value> {
        self.cluster
            .objects(self.resource(plural))
            .iter()
            .map(|o| (**o).clone())
            .collect()
    }

    /// Changes an object as another client would (a GET, then a PUT of the whole object).
    pub fn edit(&self, plural: &str, ns: &str, name: &str, change: impl FnOnce(&mut Value)) {
        let mut object = self
            .get(plural, ns, name)
            .unwrap_or_else(|| panic!("{plural} {ns}/{name} to edit"));
        change(&mut object);
        self.cluster.put(self.resource(plural), object);
    }

    /// Deletes an object as another client would (finalizers honoured; what it owned goes
    /// with it through the garbage collector).
    pub fn delete(&self, plural: &str, ns: &str, name: &str) {
        self.cluster.remove(self.resource(plural), ns, name);
    }

    /// How many times `ns/name` of `plural` was created (a recreated object counts twice).
    pub fn created(&self, plural: &str, ns: &str, name: &str) -> usize {
        self.cluster.created(self.resource(plural), ns, name)
    }

    /// Answers `controller`'s `hook` with `answer`.
    pub fn answer(
        &self,
        controller: &str,
        hook: HookType,
        answer: impl Fn(&Value) -> Result<Value, HookError> + Send + Sync + 'static,
    ) {
        self.hooks.answer(controller, hook, answer);
    }

    /// The requests `controller`'s `hook` got, oldest first.
    pub fn requests(&self, controller: &str, hook: HookType) -> Vec<Value> {
        self.hooks.requests(controller, hook)
    }

    /// Events recorded on `Kind namespace/name` (`Kind /name` for a cluster-scoped one).
    pub fn events_on(&self, on: &str) -> Vec<RecordedEvent> {
        self.cluster
            .events()
            .into_iter()
            .filter(|e| e.on == on)
            .collect()
    }

    /// Waits for `cond`, failing after a deadline naming `what`.
    pub async fn until(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !cond() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// The registry of lambda controllers on `cluster` with `flags`.
async fn start_registry(
    cluster: &Arc<MemoryCluster>,
    hooks: &Arc<ScriptedHooks>,
    journal: &MemoryJournal<LambdaEvent>,
    mailboxes: &Mailboxes,
    (target, strategy): &(String, ApplyStrategy),
) -> Registry {
    let ctx = Context {
        cluster: cluster.clone(),
        watches: cluster.clone(),
        journal: Arc::new(journal.clone()),
        workers: 2,
        mailboxes: mailboxes.clone(),
        gate: Default::default(),
    };
    registry::run(
        ctx,
        Arc::new(ScriptedFactory(Arc::clone(hooks))),
        Settings {
            target: Selector::parse(target).expect("a target label selector"),
            strategy: *strategy,
        },
    )
    .await
    .expect("the registry starts")
}

/// kube-controller-manager's garbage collector, in the background: once an object is
/// gone, each object it owned whose owners are all gone is deleted (background
/// propagation), finalizers honoured.
async fn garbage_collector(
    cluster: &Arc<MemoryCluster>,
    resources: &BTreeMap<String, Resource>,
) -> JoinHandle<()> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Arc<Value>>();
    let mut feeds = Vec::new();
    for resource in resources.values() {
        let mut changes = cluster.watch(resource).await.expect("a watch");
        let tx = tx.clone();
        feeds.push(tokio::spawn(async move {
            while let Some(change) = changes.recv().await {
                if let Change::Deleted(gone) = change
                    && tx.send(gone).is_err()
                {
                    return;
                }
            }
        }));
    }
    let (cluster, resources) = (Arc::clone(cluster), resources.clone());
    tokio::spawn(async move {
        struct Feeds(Vec<JoinHandle<()>>);
        impl Drop for Feeds {
            fn drop(&mut self) {
                self.0.iter().for_each(JoinHandle::abort);
            }
        }
        let _feeds = Feeds(feeds);
        while let Some(gone) = rx.recv().await {
            let Some(uid) = gone["metadata"]["uid"].as_str() else {
                continue;
            };
            let everything: Vec<(Resource, Arc<Value>)> = resources
                .values()
                .flat_map(|r| cluster.objects(r).into_iter().map(move |o| (r.clone(), o)))
                .collect();
            let alive = |owner: &Value| {
                everything
                    .iter()
                    .any(|(_, o)| o["metadata"]["uid"] == owner["uid"])
            };
            for (resource, object) in &everything {
                let owners = object["metadata"]["ownerReferences"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if owners.iter().any(|o| o["uid"] == uid) && !owners.iter().any(alive) {
                    let meta = &object["metadata"];
                    cluster.remove(
                        resource,
                        meta["namespace"].as_str().unwrap_or_default(),
                        meta["name"].as_str().unwrap_or_default(),
                    );
                }
            }
        }
    })
}

/// The text of a JSON string, or "".
pub fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// The keys of a JSON object (a hook request's map of objects), in order.
pub fn keys(map: &Value) -> Vec<String> {
    map.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Whether `object` is controlled by `owner` (its ownerReference with `controller: true`).
pub fn owned_by(object: &Value, owner: &Value) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == owner["metadata"]["uid"] && r["controller"] == true)
        })
}
