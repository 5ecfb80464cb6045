//! The lambda controllers' cluster port on kube: discovery through the shared kind
//! resolver, informers that listen on the shared watches (one per resource, shared with
//! the modules' bindings), writes through the API server, and rate-limited Events.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use bosun_lambda::ports::{BoxFut, Change, Cluster, ClusterError, EventNote, Resource, Watches};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::discovery::ApiResource;
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::kubernetes::cluster_error as error;
use crate::kubernetes::events::{EventLimits, EventRecorder, Note};
use crate::watches::{
    Change as WatchChange, Listener, ObjectKey, SharedWatch, Stored, WatchManager,
    resource_version, supersedes,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One resource's objects, parsed once per change, and the controllers listening.
#[derive(Default)]
struct Informer {
    state: Mutex<InformerState>,
    /// Bumped (under the state's lock) by every change to the cache: a sync that finds
    /// the same count as when it last settled knows it would read the same objects.
    changes: std::sync::atomic::AtomicU64,
}

impl Informer {
    /// The state, locked for a change: the change count moves with it.
    fn change(&self) -> MutexGuard<'_, InformerState> {
        let st = lock(&self.state);
        self.changes
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        st
    }
}

#[derive(Default)]
struct InformerState {
    objects: BTreeMap<ObjectKey, Arc<Value>>,
    /// Objects we wrote into the cache before their watch event came, with the state
    /// before our write (`None`: we created it).
    unseen: HashMap<ObjectKey, Option<Arc<Value>>>,
    subscribers: Vec<UnboundedSender<Change>>,
    /// Objects by the uid of their controller (the index a claim pass reads).
    owned: HashMap<String, BTreeSet<ObjectKey>>,
    /// Objects without a controller.
    orphans: BTreeSet<ObjectKey>,
}

impl InformerState {
    /// Puts an object into the cache and the owner index.
    fn put(&mut self, key: ObjectKey, object: Arc<Value>) -> Option<Arc<Value>> {
        let before = self.objects.insert(key.clone(), Arc::clone(&object));
        if let Some(b) = &before {
            self.unindex(&key, b);
        }
        match bosun_lambda::claim::controller_uid(&object) {
            Some(uid) => {
                self.owned.entry(uid.to_string()).or_default().insert(key);
            }
            None => {
                self.orphans.insert(key);
            }
        }
        before
    }

    /// Takes an object out of the cache and the owner index.
    fn take(&mut self, key: &ObjectKey) -> Option<Arc<Value>> {
        let before = self.objects.remove(key);
        if let Some(b) = &before {
            self.unindex(key, b);
        }
        before
    }

    fn unindex(&mut self, key: &ObjectKey, object: &Value) {
        match bosun_lambda::claim::controller_uid(object) {
            Some(uid) => {
                if let Some(set) = self.owned.get_mut(uid) {
                    set.remove(key);
                    if set.is_empty() {
                        self.owned.remove(uid);
                    }
                }
            }
            None => {
                self.orphans.remove(key);
            }
        }
    }

    /// Objects controlled by `uid` or by nobody, in `namespace` (or all).
    fn candidates(&self, namespace: Option<&str>, uid: &str) -> Vec<Arc<Value>> {
        let in_ns = |k: &&ObjectKey| namespace.is_none_or(|ns| k.0 == ns);
        let owned = self.owned.get(uid).into_iter().flatten().filter(in_ns);
        let orphans: Box<dyn Iterator<Item = &ObjectKey>> = match namespace {
            Some(ns) => Box::new(
                self.orphans
                    .range((ns.to_string(), String::new())..)
                    .take_while(move |k| k.0 == ns),
            ),
            None => Box::new(self.orphans.iter()),
        };
        owned
            .chain(orphans)
            .filter_map(|k| self.objects.get(k).cloned())
            .collect()
    }

    fn send(&mut self, change: Change) {
        self.subscribers.retain(|s| s.send(change.clone()).is_ok());
    }

    /// Our own write, into the cache unless the watch brought something newer already.
    fn remember(&mut self, key: ObjectKey, object: &Value) {
        let newer = self
            .objects
            .get(&key)
            .is_none_or(|cached| !supersedes(resource_version(cached), resource_version(object)));
        if newer {
            let before = self.put(key.clone(), Arc::new(object.clone()));
            self.unseen.entry(key).or_insert(before);
        }
    }

    /// An added or modified object from the watch. When our write put it into the cache
    /// first, the change subscribers see is from the state before that write: an object
    /// we created is news (the parent of a child just created syncs again and sees it),
    /// not an update without a new resourceVersion.
    fn applied(&mut self, key: &ObjectKey, new: Arc<Value>) {
        let cached = self.put(key.clone(), Arc::clone(&new));
        let old = match self.unseen.remove(key) {
            Some(before) => before,
            None => cached,
        };
        self.send(Change::Applied { old, new });
    }

    /// A deleted object from the watch.
    fn deleted(&mut self, key: &ObjectKey, object: &Arc<Value>) {
        self.unseen.remove(key);
        let old = self.take(key).unwrap_or_else(|| Arc::clone(object));
        self.send(Change::Deleted(old));
    }
}

impl Listener for Informer {
    fn init(&self, _namespace: &Option<String>, objects: &BTreeMap<ObjectKey, Stored>) {
        let mut st = self.change();
        st.objects.clear();
        st.owned.clear();
        st.orphans.clear();
        for (k, o) in objects {
            st.put(k.clone(), o.shared());
        }
        st.unseen.clear();
    }

    fn on(&self, change: WatchChange, key: &ObjectKey, object: &Arc<Value>, _stored: &Stored) {
        let mut st = self.change();
        match change {
            WatchChange::Added | WatchChange::Modified => st.applied(key, Arc::clone(object)),
            WatchChange::Deleted => st.deleted(key, object),
        }
    }

    fn keeps_parsed(&self) -> bool {
        true
    }

    fn detached(&self, _namespace: Option<&str>) -> Vec<Arc<SharedWatch>> {
        // Informers live as long as bosun, like metacontroller's shared informers.
        Vec::new()
    }
}

/// The cluster as the lambda controllers see it.
pub struct KubeCluster {
    watches: WatchManager,
    /// What the controllers write with (`--client-go-qps`); reads go through the watches.
    client: kube::Client,
    informers: Mutex<HashMap<(String, String, String), Arc<Informer>>>,
    /// Serializes the first list of each informer.
    starting: tokio::sync::Mutex<()>,
    field_manager: String,
    events: EventRecorder,
}

fn api_resource(r: &Resource) -> ApiResource {
    ApiResource {
        group: r.group.clone(),
        version: r.version.clone(),
        api_version: if r.group.is_empty() {
            r.version.clone()
        } else {
            format!("{}/{}", r.group, r.version)
        },
        kind: r.kind.clone(),
        plural: r.plural.clone(),
    }
}

fn describe(r: &Resource, namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{} {name}", r.kind)
    } else {
        format!("{} {namespace}/{name}", r.kind)
    }
}

fn to_dynamic(object: Value, what: &str) -> Result<DynamicObject, ClusterError> {
    serde_json::from_value(object).map_err(|e| ClusterError::Other {
        what: what.to_string(),
        message: format!("not a Kubernetes object: {e}"),
    })
}

fn to_value(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

impl KubeCluster {
    pub fn new(
        watches: WatchManager,
        client: kube::Client,
        field_manager: String,
        event_limits: EventLimits,
    ) -> Self {
        KubeCluster {
            events: EventRecorder::new(client.clone(), "metacontroller", event_limits),
            client,
            watches,
            informers: Mutex::new(HashMap::new()),
            starting: tokio::sync::Mutex::new(()),
            field_manager,
        }
    }

    fn client(&self) -> kube::Client {
        self.client.clone()
    }

    fn api(&self, r: &Resource, namespace: &str) -> Api<DynamicObject> {
        let ar = api_resource(r);
        if r.namespaced && !namespace.is_empty() {
            Api::namespaced_with(self.client(), namespace, &ar)
        } else {
            Api::all_with(self.client(), &ar)
        }
    }

    /// The running informer of `r`, found without allocating (there are few).
    fn running(&self, r: &Resource) -> Option<Arc<Informer>> {
        lock(&self.informers)
            .iter()
            .find(|((g, v, p), _)| *g == r.group && *v == r.version && *p == r.plural)
            .map(|(_, i)| Arc::clone(i))
    }

    /// The informer of `r`, started (and its first list awaited) on first use.
    async fn informer(&self, r: &Resource) -> Result<Arc<Informer>, ClusterError> {
        if let Some(i) = self.running(r) {
            return Ok(i);
        }
        let _guard = self.starting.lock().await;
        if let Some(i) = self.running(r) {
            return Ok(i);
        }
        let id = (r.group.clone(), r.version.clone(), r.plural.clone());
        let informer = Arc::new(Informer::default());
        let listener: Arc<dyn Listener> = informer.clone();
        self.watches
            .listen(&api_resource(r), listener)
            .await
            .map_err(|message| ClusterError::Other {
                what: format!("watch of {r}"),
                message,
            })?;
        lock(&self.informers).insert(id, Arc::clone(&informer));
        Ok(informer)
    }

    /// Our own write, put into the informer cache at once (the watch event follows), so
    /// the next sync sees it even when the watch lags: a child created a moment ago is
    /// not created again, an attachment is not missed by a finalize that follows.
    fn remember(&self, r: &Resource, object: &Value) {
        let Some(informer) = self.running(r) else {
            return;
        };
        let key = (
            bosun_lambda::keys::namespace_of(object).to_string(),
            bosun_lambda::keys::name_of(object).to_string(),
        );
        informer.change().remember(key, object);
    }

    /// Our own delete, taken out of the informer cache at once.
    fn forget(&self, r: &Resource, namespace: &str, name: &str, uid: &str) {
        let Some(informer) = self.running(r) else {
            return;
        };
        let key = (namespace.to_string(), name.to_string());
        let mut st = informer.change();
        if st
            .objects
            .get(&key)
            .is_some_and(|o| bosun_lambda::keys::uid_of(o) == uid)
        {
            st.take(&key);
            st.unseen.remove(&key);
        }
    }

    /// Whether an Event on `uid` may be sent now (token bucket per object).
    /// Informers running now (resource, objects held), for the debug view.
    pub fn informers(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = lock(&self.informers)
            .iter()
            .map(|((g, v, p), i)| {
                let gv = if g.is_empty() {
                    v.clone()
                } else {
                    format!("{g}/{v}")
                };
                (format!("{gv} {p}"), lock(&i.state).objects.len())
            })
            .collect();
        out.sort();
        out
    }
}

impl Cluster for KubeCluster {
    fn resolve(
        &self,
        api_version: &str,
        plural: &str,
    ) -> BoxFut<'_, Result<Resource, ClusterError>> {
        let (api_version, plural) = (api_version.to_string(), plural.to_string());
        Box::pin(async move {
            let resolved = self
                .watches
                .resolver()
                .resolve(Some(&api_version), &plural)
                .await
                .map_err(|e| ClusterError::Other {
                    what: format!("{api_version} {plural}"),
                    message: e.to_string(),
                })?;
            let r = resolved.resource;
            Ok(Resource {
                api_version,
                group: r.group,
                version: r.version,
                plural: r.plural,
                kind: r.kind,
                namespaced: resolved.namespaced,
                status_subresource: resolved.subresources.iter().any(|s| s == "status"),
            })
        })
    }

    fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>> {
        let (resource, namespace) = (resource.clone(), namespace.map(str::to_string));
        Box::pin(async move {
            let informer = self.informer(&resource).await?;
            let st = lock(&informer.state);
            Ok(match namespace.as_deref() {
                Some(ns) => st
                    .objects
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, o)| Arc::clone(o))
                    .collect(),
                None => st.objects.values().cloned().collect(),
            })
        })
    }

    fn candidates(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        owner_uid: &str,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>> {
        let (resource, namespace, uid) = (
            resource.clone(),
            namespace.map(str::to_string),
            owner_uid.to_string(),
        );
        Box::pin(async move {
            let informer = self.informer(&resource).await?;
            let st = lock(&informer.state);
            Ok(st.candidates(namespace.as_deref(), &uid))
        })
    }

    fn changes(&self, resource: &Resource) -> Option<u64> {
        self.running(resource)
            .map(|i| i.changes.load(std::sync::atomic::Ordering::Acquire))
    }

    fn cached(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Arc<Value>>, ClusterError>> {
        let (resource, key) = (resource.clone(), (namespace.to_string(), name.to_string()));
        Box::pin(async move {
            let informer = self.informer(&resource).await?;
            let st = lock(&informer.state);
            Ok(st.objects.get(&key).cloned())
        })
    }

    fn get(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let (resource, namespace, name) =
            (resource.clone(), namespace.to_string(), name.to_string());
        Box::pin(async move {
            let what = describe(&resource, &namespace, &name);
            self.api(&resource, &namespace)
                .get(&name)
                .await
                .map(|o| to_value(&o))
                .map_err(|e| error(what, e))
        })
    }

    fn create(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let resource = resource.clone();
        Box::pin(async move {
            let ns = bosun_lambda::keys::namespace_of(&object).to_string();
            let what = describe(&resource, &ns, bosun_lambda::keys::name_of(&object));
            let o = to_dynamic(object, &what)?;
            self.api(&resource, &ns)
                .create(&PostParams::default(), &o)
                .await
                .map(|o| {
                    let v = to_value(&o);
                    self.remember(&resource, &v);
                    v
                })
                .map_err(|e| error(what, e))
        })
    }

    fn replace(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let resource = resource.clone();
        Box::pin(async move {
            let ns = bosun_lambda::keys::namespace_of(&object).to_string();
            let name = bosun_lambda::keys::name_of(&object).to_string();
            let what = describe(&resource, &ns, &name);
            let o = to_dynamic(object, &what)?;
            self.api(&resource, &ns)
                .replace(&name, &PostParams::default(), &o)
                .await
                .map(|o| {
                    let v = to_value(&o);
                    self.remember(&resource, &v);
                    v
                })
                .map_err(|e| error(what, e))
        })
    }

    fn replace_status(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let resource = resource.clone();
        Box::pin(async move {
            let ns = bosun_lambda::keys::namespace_of(&object).to_string();
            let name = bosun_lambda::keys::name_of(&object).to_string();
            let what = format!("status of {}", describe(&resource, &ns, &name));
            let o = to_dynamic(object, &what)?;
            self.api(&resource, &ns)
                .replace_status(&name, &PostParams::default(), &o)
                .await
                .map(|o| {
                    let v = to_value(&o);
                    self.remember(&resource, &v);
                    v
                })
                .map_err(|e| error(what, e))
        })
    }

    fn apply(
        &self,
        resource: &Resource,
        object: Value,
        dry_run: bool,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let resource = resource.clone();
        Box::pin(async move {
            let ns = bosun_lambda::keys::namespace_of(&object).to_string();
            let name = bosun_lambda::keys::name_of(&object).to_string();
            let what = describe(&resource, &ns, &name);
            let mut params = PatchParams::apply(&self.field_manager).force();
            params.dry_run = dry_run;
            self.api(&resource, &ns)
                .patch(&name, &params, &Patch::Apply(&object))
                .await
                .map(|o| {
                    let v = to_value(&o);
                    if !dry_run {
                        self.remember(&resource, &v);
                    }
                    v
                })
                .map_err(|e| error(what, e))
        })
    }

    fn delete(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> BoxFut<'_, Result<(), ClusterError>> {
        let (resource, namespace, name, uid) = (
            resource.clone(),
            namespace.to_string(),
            name.to_string(),
            uid.to_string(),
        );
        Box::pin(async move {
            let what = describe(&resource, &namespace, &name);
            let params = DeleteParams {
                propagation_policy: Some(kube::api::PropagationPolicy::Background),
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match self.api(&resource, &namespace).delete(&name, &params).await {
                Ok(either) => {
                    // Gone now, or terminating (finalizers): then the object says so.
                    match either.left().map(|o| to_value(&o)) {
                        Some(o) if !o["metadata"]["deletionTimestamp"].is_null() => {
                            self.remember(&resource, &o);
                        }
                        _ => self.forget(&resource, &namespace, &name, &uid),
                    }
                    Ok(())
                }
                Err(e) => match error(what, e) {
                    ClusterError::NotFound(_) => Ok(()),
                    other => Err(other),
                },
            }
        })
    }

    fn event(&self, object: &Value, note: EventNote) -> BoxFut<'_, ()> {
        let object = object.clone();
        Box::pin(async move {
            self.events
                .record(Note {
                    object: &object,
                    type_: note.type_,
                    reason: &note.reason,
                    message: &note.message,
                })
                .await
        })
    }
}

impl Watches for KubeCluster {
    fn watch(
        &self,
        resource: &Resource,
    ) -> BoxFut<'_, Result<UnboundedReceiver<Change>, ClusterError>> {
        let resource = resource.clone();
        Box::pin(async move {
            let informer = self.informer(&resource).await?;
            let (tx, rx) = unbounded_channel();
            lock(&informer.state).subscribers.push(tx);
            Ok(rx)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(name: &str, rv: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}})
    }

    fn key(name: &str) -> ObjectKey {
        ("ns".to_string(), name.to_string())
    }

    fn state() -> (InformerState, UnboundedReceiver<Change>) {
        let (tx, rx) = unbounded_channel();
        let st = InformerState {
            subscribers: vec![tx],
            ..InformerState::default()
        };
        (st, rx)
    }

    fn old_rv(change: Change) -> Option<String> {
        match change {
            Change::Applied { old, .. } => {
                old.map(|o| o["metadata"]["resourceVersion"].to_string())
            }
            Change::Deleted(_) => panic!("a delete"),
        }
    }

    #[test]
    fn an_object_we_created_is_still_news_when_its_watch_event_comes() {
        let (mut st, mut rx) = state();
        st.remember(key("a"), &object("a", "5"));
        assert!(st.objects.contains_key(&key("a")), "readable at once");
        st.applied(&key("a"), Arc::new(object("a", "5")));
        assert_eq!(old_rv(rx.try_recv().expect("a change")), None, "an add");
        // Later events compare with the cache as usual.
        st.applied(&key("a"), Arc::new(object("a", "6")));
        assert_eq!(
            old_rv(rx.try_recv().expect("a change")).as_deref(),
            Some("\"5\"")
        );
    }

    #[test]
    fn an_update_we_wrote_is_seen_as_from_the_state_before_it() {
        let (mut st, mut rx) = state();
        st.applied(&key("a"), Arc::new(object("a", "1")));
        let _ = rx.try_recv();
        st.remember(key("a"), &object("a", "2"));
        st.remember(key("a"), &object("a", "3"));
        st.applied(&key("a"), Arc::new(object("a", "2")));
        assert_eq!(
            old_rv(rx.try_recv().expect("a change")).as_deref(),
            Some("\"1\"")
        );
        st.applied(&key("a"), Arc::new(object("a", "3")));
        assert_eq!(
            old_rv(rx.try_recv().expect("a change")).as_deref(),
            Some("\"2\"")
        );
    }

    #[test]
    fn a_watch_event_before_our_write_is_not_doubled() {
        let (mut st, mut rx) = state();
        st.applied(&key("a"), Arc::new(object("a", "4")));
        let _ = rx.try_recv();
        st.remember(key("a"), &object("a", "4"));
        assert!(st.unseen.is_empty());
        st.deleted(&key("a"), &Arc::new(object("a", "4")));
        assert!(matches!(rx.try_recv(), Ok(Change::Deleted(_))));
    }
}
