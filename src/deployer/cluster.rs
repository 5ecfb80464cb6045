//! The deployer's cluster port on kube: informers on the shared watches of DeployItems
//! and Targets (the same `WatchManager::listen` the lambda controllers use), uncached
//! reads of items as the contract asks, writes through the API server, export Secrets
//! and Warning Events.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine as _;
use bosun_deployer::item::{DeployItem, ItemKey, ObjectRef};
use bosun_deployer::lock::Found;
use bosun_deployer::ports::{BoxFut, Change, Cluster, ClusterError, EventNote, SecretData};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::watches::{
    Change as WatchChange, Listener, ObjectKey, SharedWatch, Stored, WatchManager,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn landscaper(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "landscaper.gardener.cloud".into(),
        version: "v1alpha1".into(),
        api_version: "landscaper.gardener.cloud/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// `deployitems.landscaper.gardener.cloud`.
pub fn deploy_items() -> ApiResource {
    landscaper("DeployItem", "deployitems")
}

/// `targets.landscaper.gardener.cloud`.
pub fn targets() -> ApiResource {
    landscaper("Target", "targets")
}

/// `syncobjects.landscaper.gardener.cloud`.
pub fn sync_objects() -> ApiResource {
    landscaper("SyncObject", "syncobjects")
}

/// `contexts.landscaper.gardener.cloud`.
pub fn contexts() -> ApiResource {
    landscaper("Context", "contexts")
}

fn core(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// What a watch of DeployItems or Targets tells the controller.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Watched {
    Items,
    Targets,
}

/// One informer: the objects it holds and where changes go.
struct Informer {
    watched: Watched,
    objects: Mutex<BTreeMap<ObjectKey, Arc<Value>>>,
    subscribers: Mutex<Vec<UnboundedSender<Change>>>,
}

impl Informer {
    fn new(watched: Watched) -> Informer {
        Informer {
            watched,
            objects: Mutex::new(BTreeMap::new()),
            subscribers: Mutex::new(Vec::new()),
        }
    }

    /// The change to report for `object`; `deleted` ones carry no resourceVersion.
    fn change_of(&self, object: &Value, deleted: bool) -> Change {
        match self.watched {
            Watched::Items => {
                let type_ = object["metadata"]["annotations"]
                    [bosun_deployer::item::DEPLOYER_TYPE_ANNOTATION]
                    .as_str()
                    .or_else(|| object["spec"]["type"].as_str())
                    .unwrap_or_default()
                    .to_string();
                Change::Item {
                    key: ItemKey::of(object),
                    type_,
                    resource_version: if deleted {
                        String::new()
                    } else {
                        object["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string()
                    },
                }
            }
            Watched::Targets => {
                let key = ItemKey::of(object);
                Change::Target {
                    namespace: key.namespace,
                    name: key.name,
                }
            }
        }
    }

    fn send(&self, change: Change) {
        lock(&self.subscribers).retain(|s| s.send(change.clone()).is_ok());
    }
}

impl Listener for Informer {
    fn init(&self, _namespace: &Option<String>, objects: &BTreeMap<ObjectKey, Stored>) {
        let parsed: BTreeMap<ObjectKey, Arc<Value>> = objects
            .iter()
            .map(|(k, o)| (k.clone(), o.shared()))
            .collect();
        *lock(&self.objects) = parsed;
    }

    fn on(&self, change: WatchChange, key: &ObjectKey, object: &Arc<Value>, _stored: &Stored) {
        match change {
            WatchChange::Added | WatchChange::Modified => {
                lock(&self.objects).insert(key.clone(), Arc::clone(object));
            }
            WatchChange::Deleted => {
                lock(&self.objects).remove(key);
            }
        }
        self.send(self.change_of(object, change == WatchChange::Deleted));
    }

    fn keeps_parsed(&self) -> bool {
        true
    }

    fn detached(&self, _namespace: Option<&str>) -> Vec<Arc<SharedWatch>> {
        Vec::new()
    }
}

/// The cluster as the deployer sees it.
pub struct KubeCluster {
    watches: WatchManager,
    /// Where this bosun's pod and its peers run (whether a lock's holder is alive).
    pod_namespace: String,
    items: Arc<Informer>,
    targets: Arc<Informer>,
    started: tokio::sync::Mutex<bool>,
}

fn error(what: String, e: kube::Error) -> ClusterError {
    match &e {
        kube::Error::Api(s) if s.code == 404 => ClusterError::NotFound(what),
        kube::Error::Api(s) if s.code == 409 => ClusterError::Conflict(what),
        _ => ClusterError::Other {
            what,
            message: e.to_string(),
        },
    }
}

fn to_value(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

fn to_dynamic(object: Value, what: &str) -> Result<DynamicObject, ClusterError> {
    serde_json::from_value(object).map_err(|e| ClusterError::Other {
        what: what.to_string(),
        message: format!("not a Kubernetes object: {e}"),
    })
}

impl KubeCluster {
    pub fn new(watches: WatchManager, pod_namespace: &str) -> KubeCluster {
        KubeCluster {
            watches,
            pod_namespace: pod_namespace.to_string(),
            items: Arc::new(Informer::new(Watched::Items)),
            targets: Arc::new(Informer::new(Watched::Targets)),
            started: tokio::sync::Mutex::new(false),
        }
    }

    fn client(&self) -> kube::Client {
        self.watches.client().clone()
    }

    fn api(&self, ar: &ApiResource, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(), namespace, ar)
    }

    async fn get_opt(
        &self,
        ar: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ClusterError> {
        self.api(ar, namespace)
            .get_opt(name)
            .await
            .map(|o| o.as_ref().map(to_value))
            .map_err(|e| error(format!("{} {namespace}/{name}", ar.kind), e))
    }

    /// Objects the informers hold (DeployItems, Targets), for the debug view.
    pub fn informers(&self) -> Vec<(String, usize)> {
        vec![
            (
                "landscaper.gardener.cloud/v1alpha1 deployitems".into(),
                lock(&self.items.objects).len(),
            ),
            (
                "landscaper.gardener.cloud/v1alpha1 targets".into(),
                lock(&self.targets.objects).len(),
            ),
        ]
    }
}

impl Cluster for KubeCluster {
    fn watch(&self) -> BoxFut<'_, Result<UnboundedReceiver<Change>, ClusterError>> {
        Box::pin(async move {
            let (tx, rx) = unbounded_channel();
            lock(&self.items.subscribers).push(tx.clone());
            lock(&self.targets.subscribers).push(tx.clone());
            let mut started = self.started.lock().await;
            if !*started {
                for (ar, informer) in [(deploy_items(), &self.items), (targets(), &self.targets)] {
                    let l: Arc<dyn Listener> = informer.clone();
                    self.watches
                        .listen(&ar, l)
                        .await
                        .map_err(|message| ClusterError::Other {
                            what: format!("watch of {}", ar.plural),
                            message,
                        })?;
                }
                *started = true;
            }
            // Every item the first list found, once.
            for o in lock(&self.items.objects).values() {
                let _ = tx.send(self.items.change_of(o, true));
            }
            Ok(rx)
        })
    }

    fn cached_items(&self, namespace: &str) -> Vec<Arc<Value>> {
        lock(&self.items.objects)
            .range((namespace.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == namespace)
            .map(|(_, o)| Arc::clone(o))
            .collect()
    }

    fn get_item(&self, key: &ItemKey) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        let key = key.clone();
        Box::pin(async move {
            self.get_opt(&deploy_items(), &key.namespace, &key.name)
                .await
        })
    }

    fn update_item(&self, object: Value) -> BoxFut<'_, Result<Value, ClusterError>> {
        Box::pin(async move {
            let key = ItemKey::of(&object);
            let what = format!("DeployItem {key}");
            let o = to_dynamic(object, &what)?;
            self.api(&deploy_items(), &key.namespace)
                .replace(&key.name, &PostParams::default(), &o)
                .await
                .map(|o| to_value(&o))
                .map_err(|e| error(what, e))
        })
    }

    fn update_status(&self, object: Value) -> BoxFut<'_, Result<Value, ClusterError>> {
        Box::pin(async move {
            let key = ItemKey::of(&object);
            let what = format!("DeployItem {key} status");
            let o = to_dynamic(object, &what)?;
            self.api(&deploy_items(), &key.namespace)
                .replace_status(&key.name, &PostParams::default(), &o)
                .await
                .map(|o| to_value(&o))
                .map_err(|e| error(what, e))
        })
    }

    fn get_target(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        Box::pin(async move { self.get_opt(&targets(), &namespace, &name).await })
    }

    fn get_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<SecretData>, ClusterError>> {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        Box::pin(async move {
            let Some(secret) = self
                .get_opt(&core("Secret", "secrets"), &namespace, &name)
                .await?
            else {
                return Ok(None);
            };
            let mut data = BTreeMap::new();
            for (k, v) in secret["data"].as_object().into_iter().flatten() {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str().unwrap_or_default())
                    .map_err(|e| ClusterError::Other {
                        what: format!("Secret {namespace}/{name}"),
                        message: format!("data.{k}: not base64: {e}"),
                    })?;
                data.insert(k.clone(), bytes);
            }
            Ok(Some(data))
        })
    }

    fn get_context(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        Box::pin(async move { self.get_opt(&contexts(), &namespace, &name).await })
    }

    fn write_export(
        &self,
        item: &Value,
        existing: Option<ObjectRef>,
        prefix: &str,
        exports: &Value,
    ) -> BoxFut<'_, Result<ObjectRef, ClusterError>> {
        let (item, prefix) = (item.clone(), prefix.to_string());
        let config = base64::engine::general_purpose::STANDARD.encode(exports.to_string());
        Box::pin(async move {
            let key = ItemKey::of(&item);
            let api = self.api(&core("Secret", "secrets"), &key.namespace);
            if let Some(r) = existing
                && let Some(mut secret) = self
                    .get_opt(&core("Secret", "secrets"), &key.namespace, &r.name)
                    .await?
            {
                if secret["data"]["config"] == config {
                    return Ok(r);
                }
                secret["data"] = json!({"config": config});
                let what = format!("Secret {}/{}", key.namespace, r.name);
                let o = to_dynamic(secret, &what)?;
                api.replace(&r.name, &PostParams::default(), &o)
                    .await
                    .map_err(|e| error(what, e))?;
                return Ok(r);
            }
            let parsed = DeployItem::parse(&item).map_err(|e| ClusterError::Other {
                what: format!("DeployItem {key}"),
                message: e.to_string(),
            })?;
            let secret = json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "generateName": prefix,
                    "namespace": key.namespace,
                    "ownerReferences": [{
                        "apiVersion": bosun_deployer::item::API_VERSION, "kind": "DeployItem",
                        "name": key.name, "uid": parsed.uid, "controller": true,
                    }],
                },
                "type": "Opaque",
                "data": {"config": config},
            });
            let what = format!("export Secret of DeployItem {key}");
            let o = to_dynamic(secret, &what)?;
            let created = api
                .create(&PostParams::default(), &o)
                .await
                .map_err(|e| error(what, e))?;
            Ok(ObjectRef {
                name: created.metadata.name.unwrap_or_default(),
                namespace: key.namespace,
            })
        })
    }

    fn delete_secret(&self, namespace: &str, name: &str) -> BoxFut<'_, Result<(), ClusterError>> {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        Box::pin(async move {
            match self
                .api(&core("Secret", "secrets"), &namespace)
                .delete(&name, &DeleteParams::default())
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(error(format!("Secret {namespace}/{name}"), e)),
            }
        })
    }

    fn event(&self, item: &Value, note: EventNote) -> BoxFut<'_, ()> {
        let item = item.clone();
        Box::pin(async move {
            let key = ItemKey::of(&item);
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
            let event = json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": format!("{}.", key.name), "namespace": key.namespace},
                "involvedObject": {
                    "apiVersion": item["apiVersion"], "kind": item["kind"],
                    "name": key.name, "namespace": key.namespace,
                    "uid": item["metadata"]["uid"], "resourceVersion": item["metadata"]["resourceVersion"],
                },
                "reason": note.reason, "message": note.message, "type": note.type_,
                "source": {"component": "bosun-deployer"},
                "reportingComponent": "bosun-deployer",
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            });
            let api = self.api(&core("Event", "events"), &key.namespace);
            let result = match serde_json::from_value::<DynamicObject>(event) {
                Ok(e) => api.create(&PostParams::default(), &e).await.map(|_| ()),
                Err(e) => {
                    tracing::warn!("cannot build an Event: {e}");
                    return;
                }
            };
            if let Err(e) = result {
                tracing::warn!(reason = %note.reason, "cannot record an Event: {e}");
            }
        })
    }

    fn lock_item<'a>(
        &'a self,
        item: &'a Value,
        prefix: &'a str,
        holder: &'a str,
    ) -> BoxFut<'a, Result<Found, ClusterError>> {
        Box::pin(async move {
            let key = ItemKey::of(item);
            let uid = item["metadata"]["uid"].as_str().unwrap_or_default();
            let name = bosun_deployer::lock::name(prefix, uid);
            let what = format!("SyncObject {}/{name}", key.namespace);
            let api = self.api(&sync_objects(), &key.namespace);
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
            let mut new = bosun_deployer::lock::sync_object(
                &key.namespace,
                &key.name,
                uid,
                prefix,
                holder,
                &now,
            );
            // Gone with the item.
            new["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
                "name": key.name, "uid": uid,
            }]);
            match api
                .create(&PostParams::default(), &to_dynamic(new, &what)?)
                .await
            {
                Ok(_) => return Ok(Found::Ours),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(error(what, e)),
            }
            let existing = api.get(&name).await.map_err(|e| error(what.clone(), e))?;
            let existing = to_value(&existing);
            let pod = existing["spec"]["podName"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let alive = if pod.is_empty() || pod == holder {
                true
            } else {
                let pods: Api<DynamicObject> =
                    Api::namespaced_with(self.client(), &self.pod_namespace, &core("Pod", "pods"));
                pods.get_opt(&pod)
                    .await
                    .map_err(|e| error(format!("Pod {}/{pod}", self.pod_namespace), e))?
                    .is_some()
            };
            match bosun_deployer::lock::found(&existing, holder, |_| alive) {
                Found::Take => {
                    let taken = bosun_deployer::lock::held_by(&existing, holder, &now);
                    match api
                        .replace(&name, &PostParams::default(), &to_dynamic(taken, &what)?)
                        .await
                    {
                        Ok(_) => {
                            if !pod.is_empty() {
                                tracing::info!(item = %key, from = %pod, "took over the lock of a pod that is gone");
                            }
                            Ok(Found::Ours)
                        }
                        Err(kube::Error::Api(s)) if s.code == 409 => {
                            Ok(Found::Held("another replica".into()))
                        }
                        Err(e) => Err(error(what, e)),
                    }
                }
                other => Ok(other),
            }
        })
    }

    fn unlock_item<'a>(
        &'a self,
        item: &'a Value,
        prefix: &'a str,
        holder: &'a str,
    ) -> BoxFut<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let key = ItemKey::of(item);
            let uid = item["metadata"]["uid"].as_str().unwrap_or_default();
            let name = bosun_deployer::lock::name(prefix, uid);
            let what = format!("SyncObject {}/{name}", key.namespace);
            let api = self.api(&sync_objects(), &key.namespace);
            let Some(existing) = api
                .get_opt(&name)
                .await
                .map_err(|e| error(what.clone(), e))?
            else {
                return Ok(());
            };
            let existing = to_value(&existing);
            if existing["spec"]["podName"].as_str() != Some(holder) {
                return Ok(());
            }
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
            let freed = bosun_deployer::lock::held_by(&existing, "", &now);
            match api
                .replace(&name, &PostParams::default(), &to_dynamic(freed, &what)?)
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(error(what, e)),
            }
        })
    }
}
