//! The deployer's cluster port on kube: informers on the shared watches of DeployItems
//! and Targets (the same `WatchManager::listen` the lambda controllers use), uncached
//! reads of items as the contract asks, writes through the API server, export Secrets
//! and Warning Events.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine as _;
use bosun_deployer::item::{DeployItem, ItemKey, ObjectRef, WithStatus};
use bosun_deployer::lock::Found;
use bosun_deployer::ports::{BoxFut, Change, Cluster, ClusterError, EventNote, SecretData};
use kube::api::DeleteParams;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use bosun_kube::WatchManager;
use bosun_kube::cluster_error as error;
use bosun_kube::events::{EventLimits, EventRecorder, Note};
use bosun_kube::informer::Event;
use bosun_kube::raw::RawApi;
use bosun_kube::watch::{Listener, ObjectKey};

/// A deployer informer: the shared informer, no index.
type Informer = bosun_kube::informer::Informer;

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

fn object_key(key: &ItemKey) -> ObjectKey {
    bosun_kube::watch::key_of(&key.namespace, &key.name)
}

/// The change to report for `object` of `watched`; `deleted` ones carry no
/// resourceVersion.
fn change_of(watched: Watched, object: &Value, deleted: bool) -> Change {
    match watched {
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

/// The newest copy of `key` this process knows: its own last write (until the watch
/// brings it), else the watch's.
fn latest(informer: &Informer, key: &ItemKey) -> Option<Value> {
    let cached = informer.read().get(&object_key(key));
    cached.map(Arc::unwrap_or_clone)
}

/// The cluster as the deployer sees it.
pub struct KubeCluster {
    watches: WatchManager,
    /// Warning Events on items, counted when repeated (client-go's defaults).
    events: EventRecorder,
    /// Where this bosun's pod and its peers run (whether a lock's holder is alive).
    pod_namespace: String,
    items: Arc<Informer>,
    targets: Arc<Informer>,
    started: tokio::sync::Mutex<bool>,
    /// The items' cluster as `selfConfig` targets reach it (URL, CA as base64 of PEM).
    resource_cluster: Option<(String, Option<String>)>,
    /// Service account tokens by what was asked, with when to ask again.
    tokens: Mutex<std::collections::HashMap<TokenKey, (String, std::time::Instant)>>,
    /// Whether the pods of `pod_namespace` are watched (per-item locks: a deleted holder's
    /// items are taken over at once), and the watch.
    watch_pods: bool,
    pod_watch: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        if let Some(w) = lock(&self.pod_watch).take() {
            w.abort();
        }
    }
}

/// Sends [`Change::PodGone`] for every pod of `namespace` deleted from now on.
fn watch_pod_deletions(
    client: kube::Client,
    namespace: &str,
    tx: UnboundedSender<Change>,
) -> tokio::task::AbortHandle {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, namespace);
    let namespace = namespace.to_string();
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Delete(pod)) => {
                    if let Some(name) = pod.metadata.name
                        && tx.send(Change::PodGone { name }).is_err()
                    {
                        return;
                    }
                }
                Ok(_) => {}
                // Retried with backoff; meanwhile a lock is looked at again every minute.
                Err(e) => tracing::debug!(namespace = %namespace, "watch of pods: {e}"),
            }
        }
    })
    .abort_handle()
}

/// A token asked for: namespace, service account, audiences, lifetime.
type TokenKey = (String, String, Vec<String>, u64);

impl KubeCluster {
    pub fn new(watches: WatchManager, pod_namespace: &str) -> KubeCluster {
        KubeCluster {
            events: EventRecorder::new(
                watches.client().clone(),
                "bosun-deployer",
                EventLimits::default(),
            ),
            watches,
            pod_namespace: pod_namespace.to_string(),
            items: Arc::new(Informer::default()),
            targets: Arc::new(Informer::default()),
            started: tokio::sync::Mutex::new(false),
            resource_cluster: None,
            tokens: Mutex::default(),
            watch_pods: false,
            pod_watch: Mutex::new(None),
        }
    }

    /// Watches the pods of its namespace (for per-item locks).
    pub fn with_pod_watch(mut self, on: bool) -> Self {
        self.watch_pods = on;
        self
    }

    /// Sets how `selfConfig` targets reach the items' cluster.
    pub fn with_resource_cluster(mut self, cluster: Option<(String, Option<String>)>) -> Self {
        self.resource_cluster = cluster;
        self
    }

    fn client(&self) -> kube::Client {
        self.watches.client().clone()
    }

    fn api(&self, ar: &ApiResource, namespace: &str) -> RawApi {
        RawApi::new(self.client(), ar, Some(namespace))
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
            .map_err(|e| error(format!("{} {namespace}/{name}", ar.kind), e))
    }

    /// The error of a refused write of item `key`; a conflict also drops the copy of the
    /// item this process wrote last (someone else wrote after it).
    fn write_failed(&self, key: &ItemKey, what: String, e: kube::Error) -> ClusterError {
        let e = error(what, e);
        if matches!(e, ClusterError::Conflict(_) | ClusterError::NotFound(_)) {
            self.items.change().forget_write(&object_key(key));
        }
        e
    }

    /// Objects the informers hold (DeployItems, Targets), for the debug view.
    pub fn informers(&self) -> Vec<(String, usize)> {
        vec![
            (
                "landscaper.gardener.cloud/v1alpha1 deployitems".into(),
                self.items.read().len(),
            ),
            (
                "landscaper.gardener.cloud/v1alpha1 targets".into(),
                self.targets.read().len(),
            ),
        ]
    }
}

impl Cluster for KubeCluster {
    fn watch(&self) -> BoxFut<'_, Result<UnboundedReceiver<Change>, ClusterError>> {
        Box::pin(async move {
            let (tx, rx) = unbounded_channel();
            for (watched, informer) in [
                (Watched::Items, &self.items),
                (Watched::Targets, &self.targets),
            ] {
                let tx = tx.clone();
                informer.subscribe(Box::new(move |event| {
                    let change = match event {
                        Event::Applied { new, .. } => change_of(watched, new, false),
                        Event::Deleted(old) => change_of(watched, old, true),
                    };
                    tx.send(change).is_ok()
                }));
            }
            let mut started = self.started.lock().await;
            if !*started {
                for (ar, informer) in [(deploy_items(), &self.items), (targets(), &self.targets)] {
                    let l: Arc<dyn Listener> = informer.clone();
                    self.watches
                        .listen(&ar, l)
                        .await
                        .map_err(|e| ClusterError::Other {
                            what: format!("watch of {}", ar.plural),
                            message: e.to_string(),
                        })?;
                }
                if self.watch_pods {
                    *lock(&self.pod_watch) = Some(watch_pod_deletions(
                        self.client(),
                        &self.pod_namespace,
                        tx.clone(),
                    ));
                }
                *started = true;
            }
            // Every item the first list found, once.
            let items = self.items.read().list(None);
            for o in &items {
                let _ = tx.send(change_of(Watched::Items, o, true));
            }
            Ok(rx)
        })
    }

    fn cached_items(&self, namespace: &str) -> Vec<Arc<Value>> {
        self.items.read().list(Some(namespace))
    }

    fn get_item(&self, key: &ItemKey) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        let key = key.clone();
        Box::pin(async move {
            match latest(&self.items, &key) {
                Some(o) => Ok(Some(o)),
                // Not seen by the watch (yet): the API server knows.
                None => self.read_item(&key).await,
            }
        })
    }

    fn read_item(&self, key: &ItemKey) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
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
            let written = self
                .api(&deploy_items(), &key.namespace)
                .replace(&key.name, &object)
                .await
                .map_err(|e| self.write_failed(&key, what, e))?;
            self.items.change().remember(object_key(&key), &written);
            Ok(written)
        })
    }

    fn update_status<'a>(
        &'a self,
        item: WithStatus<'a>,
    ) -> BoxFut<'a, Result<Value, ClusterError>> {
        Box::pin(async move {
            let key = item.key();
            let what = format!("DeployItem {key} status");
            let written = self
                .api(&deploy_items(), &key.namespace)
                .replace_status(&key.name, &item)
                .await
                .map_err(|e| self.write_failed(key, what, e))?;
            self.items.change().remember(object_key(key), &written);
            Ok(written)
        })
    }

    fn get_target(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        let key = ItemKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        Box::pin(async move {
            match latest(&self.targets, &key) {
                Some(t) => Ok(Some(t)),
                // A Target created just before its item may not have reached the watch.
                None => self.get_opt(&targets(), &key.namespace, &key.name).await,
            }
        })
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

    fn get_config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<Option<Value>, ClusterError>> {
        Box::pin(async move {
            self.get_opt(&core("ConfigMap", "configmaps"), namespace, name)
                .await
        })
    }

    fn write_export(
        &self,
        item: &Value,
        existing: Option<ObjectRef>,
        exports: &Value,
    ) -> BoxFut<'_, Result<ObjectRef, ClusterError>> {
        let item = item.clone();
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
                api.replace(&r.name, &secret)
                    .await
                    .map_err(|e| error(what, e))?;
                return Ok(r);
            }
            let parsed = DeployItem::parse(&item).map_err(|e| ClusterError::Other {
                what: format!("DeployItem {key}"),
                message: e.to_string(),
            })?;
            // landscaper's name; one left by an earlier run (its exportRef lost) is taken.
            let name = bosun_deployer::ports::export_secret_name(&key.name);
            let secret = json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "name": name,
                    "namespace": key.namespace,
                    "ownerReferences": [{
                        "apiVersion": bosun_deployer::item::API_VERSION, "kind": "DeployItem",
                        "name": key.name, "uid": parsed.uid, "controller": true,
                    }],
                },
                "type": "Opaque",
                "data": {"config": config},
            });
            let what = format!("export Secret {}/{name} of DeployItem {key}", key.namespace);
            match api.create(&secret).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let mut live = self
                        .get_opt(&core("Secret", "secrets"), &key.namespace, &name)
                        .await?
                        .ok_or_else(|| ClusterError::Conflict(what.clone()))?;
                    live["data"] = json!({"config": config});
                    live["metadata"]["ownerReferences"] =
                        secret["metadata"]["ownerReferences"].clone();
                    api.replace(&name, &live)
                        .await
                        .map_err(|e| error(what, e))?;
                }
                Err(e) => return Err(error(what, e)),
            }
            Ok(ObjectRef {
                name,
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
            self.events
                .record(Note {
                    object: &item,
                    type_: note.type_,
                    reason: &note.reason,
                    message: &note.message,
                })
                .await
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
            match api.create(&new).await {
                Ok(_) => return Ok(Found::Ours),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(error(what, e)),
            }
            let existing = api
                .get_opt(&name)
                .await
                .map_err(|e| error(what.clone(), e))?
                .ok_or_else(|| ClusterError::NotFound(what.clone()))?;
            let pod = existing["spec"]["podName"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let alive = if pod.is_empty() || pod == holder {
                true
            } else {
                self.api(&core("Pod", "pods"), &self.pod_namespace)
                    .get_opt(&pod)
                    .await
                    .map_err(|e| error(format!("Pod {}/{pod}", self.pod_namespace), e))?
                    .is_some()
            };
            match bosun_deployer::lock::found(&existing, holder, |_| alive) {
                Found::Take => {
                    let taken = bosun_deployer::lock::held_by(&existing, holder, &now);
                    match api.replace(&name, &taken).await {
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
            if existing["spec"]["podName"].as_str() != Some(holder) {
                return Ok(());
            }
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
            let freed = bosun_deployer::lock::held_by(&existing, "", &now);
            match api.replace(&name, &freed).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(error(what, e)),
            }
        })
    }

    fn service_account_token<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        audiences: &'a [String],
        expiration_seconds: u64,
    ) -> BoxFut<'a, Result<String, ClusterError>> {
        Box::pin(async move {
            let key: TokenKey = (
                namespace.to_string(),
                name.to_string(),
                audiences.to_vec(),
                expiration_seconds,
            );
            let now = std::time::Instant::now();
            {
                let tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((token, renew_at)) = tokens.get(&key)
                    && *renew_at > now
                {
                    return Ok(token.clone());
                }
            }
            let what = format!("ServiceAccount {namespace}/{name}");
            let body = json!({
                "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": audiences, "expirationSeconds": expiration_seconds},
            });
            let request = http::Request::post(format!(
                "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
            ))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string().into_bytes())
            .map_err(|e| ClusterError::Other {
                what: what.clone(),
                message: e.to_string(),
            })?;
            let answer: Value = self
                .client()
                .request(request)
                .await
                .map_err(|e| error(what.clone(), e))?;
            let Some(token) = answer["status"]["token"].as_str().filter(|t| !t.is_empty()) else {
                return Err(ClusterError::Other {
                    what,
                    message: "the TokenRequest's answer holds no status.token".into(),
                });
            };
            // Asked again when four fifths of its life are over, as kubelet renews
            // projected tokens.
            let renew_at = now + std::time::Duration::from_secs(expiration_seconds * 4 / 5);
            self.tokens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, (token.to_string(), renew_at));
            Ok(token.to_string())
        })
    }

    fn resource_cluster(&self) -> Option<(String, Option<String>)> {
        self.resource_cluster.clone()
    }
}
