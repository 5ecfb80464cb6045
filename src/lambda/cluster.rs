//! The lambda controllers' cluster port on kube: discovery through the shared kind
//! resolver, informers that listen on the shared watches (one per resource, shared with
//! the modules' bindings), writes through the API server, and rate-limited Events.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use bosun_lambda::ports::{BoxFut, Change, Cluster, ClusterError, EventNote, Resource, Watches};
use kube::api::{DeleteParams, PatchParams, Preconditions};
use kube::discovery::ApiResource;
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use bosun_kube::WatchManager;
use bosun_kube::cluster_error as error;
use bosun_kube::events::{EventLimits, EventRecorder, Note};
use bosun_kube::informer::{Cache, Event, Index};
use bosun_kube::raw::RawApi;
use bosun_kube::watch::{Listener, ObjectKey};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The informers' index: objects by the uid of their controller, and those without one
/// (what a claim pass reads).
#[derive(Default)]
struct Owners {
    /// By the controller's uid (shared with each object's [`Index::Meta`]).
    owned: HashMap<Arc<str>, Owned>,
    orphans: BTreeSet<ObjectKey>,
}

/// The keys of the objects one controller owns: a short list for the usual few (a
/// B-tree set's node is half a kilobyte), a set past [`Owned::FEW`].
enum Owned {
    Few(Vec<ObjectKey>),
    Many(BTreeSet<ObjectKey>),
}

impl Owned {
    const FEW: usize = 16;

    fn insert(&mut self, key: &ObjectKey) {
        match self {
            Owned::Few(keys) if keys.contains(key) => {}
            Owned::Few(keys) if keys.len() < Self::FEW => keys.push(key.clone()),
            Owned::Few(keys) => {
                let mut set: BTreeSet<ObjectKey> = std::mem::take(keys).into_iter().collect();
                set.insert(key.clone());
                *self = Owned::Many(set);
            }
            Owned::Many(set) => {
                set.insert(key.clone());
            }
        }
    }

    /// Takes `key` out; whether none is left.
    fn remove(&mut self, key: &ObjectKey) -> bool {
        match self {
            Owned::Few(keys) => {
                keys.retain(|k| k != key);
                keys.is_empty()
            }
            Owned::Many(set) => {
                set.remove(key);
                set.is_empty()
            }
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_> {
        match self {
            Owned::Few(keys) => Box::new(keys.iter()),
            Owned::Many(set) => Box::new(set.iter()),
        }
    }
}

impl Index for Owners {
    /// The uid of the object's controller.
    type Meta = Option<Arc<str>>;

    fn meta(object: &Value) -> Self::Meta {
        bosun_lambda::claim::controller_uid(object).map(Arc::from)
    }

    fn insert(&mut self, key: &ObjectKey, uid: &Self::Meta) {
        match uid {
            Some(uid) => {
                self.owned
                    .entry(Arc::clone(uid))
                    .or_insert_with(|| Owned::Few(Vec::with_capacity(1)))
                    .insert(key);
            }
            None => {
                self.orphans.insert(key.clone());
            }
        }
    }

    fn remove(&mut self, key: &ObjectKey, uid: &Self::Meta) {
        match uid {
            Some(uid) => {
                if let Some(owned) = self.owned.get_mut(uid.as_ref())
                    && owned.remove(key)
                {
                    self.owned.remove(uid.as_ref());
                }
            }
            None => {
                self.orphans.remove(key);
            }
        }
    }
}

/// Objects controlled by `uid` or by nobody, in `namespace` (or all).
fn candidates(cache: &Cache<Owners>, namespace: Option<&str>, uid: &str) -> Vec<Arc<Value>> {
    let owners = &cache.index;
    let in_ns = |k: &&ObjectKey| namespace.is_none_or(|ns| *k.0 == *ns);
    let owned = owners
        .owned
        .get(uid)
        .into_iter()
        .flat_map(Owned::iter)
        .filter(in_ns);
    let orphans: Box<dyn Iterator<Item = &ObjectKey>> = match namespace {
        Some(ns) => Box::new(
            owners
                .orphans
                .range(bosun_kube::watch::namespace_start(ns)..)
                .take_while(move |k| *k.0 == *ns),
        ),
        None => Box::new(owners.orphans.iter()),
    };
    owned.chain(orphans).filter_map(|k| cache.get(k)).collect()
}

/// A lambda informer: the shared informer with the owner index.
type Informer = bosun_kube::informer::Informer<Owners>;

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

    fn api(&self, r: &Resource, namespace: &str) -> RawApi {
        let ar = api_resource(r);
        RawApi::new(
            self.client(),
            &ar,
            (r.namespaced && !namespace.is_empty()).then_some(namespace),
        )
    }

    /// The running informer of `r`, found without allocating (there are few).
    fn running(&self, r: &Resource) -> Option<Arc<Informer>> {
        lock(&self.informers)
            .iter()
            .find(|((g, v, p), _)| *g == r.group && *v == r.version && *p == r.plural)
            .map(|(_, i)| Arc::clone(i))
    }

    /// What `read` takes from the informer cache of `resource` (started on first use).
    fn read_cache<'a, T: Send + 'a>(
        &'a self,
        resource: &Resource,
        read: impl FnOnce(&bosun_kube::informer::Cache<Owners>) -> T + Send + 'a,
    ) -> BoxFut<'a, Result<T, ClusterError>> {
        let resource = resource.clone();
        Box::pin(async move {
            let informer = self.informer(&resource).await?;
            let cache = informer.read();
            Ok(read(&cache))
        })
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
            .map_err(|e| ClusterError::Other {
                what: format!("watch of {r}"),
                message: e.to_string(),
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
        let key = bosun_kube::watch::key_of(
            bosun_lambda::keys::namespace_of(object),
            bosun_lambda::keys::name_of(object),
        );
        informer.change().remember(key, object);
    }

    /// Our own delete, taken out of the informer cache at once.
    fn forget(&self, r: &Resource, namespace: &str, name: &str, uid: &str) {
        let Some(informer) = self.running(r) else {
            return;
        };
        let key = bosun_kube::watch::key_of(namespace, name);
        informer.change().removed(&key, uid);
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
                (format!("{gv} {p}"), i.read().len())
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
        let namespace = namespace.map(str::to_string);
        self.read_cache(resource, move |c| c.list(namespace.as_deref()))
    }

    fn keys(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> BoxFut<'_, Result<Vec<bosun_lambda::ports::ObjectKey>, ClusterError>> {
        let namespace = namespace.map(str::to_string);
        self.read_cache(resource, move |c| c.keys(namespace.as_deref()))
    }

    fn list_heads(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>> {
        let namespace = namespace.map(str::to_string);
        self.read_cache(resource, move |c| c.list_heads(namespace.as_deref()))
    }

    fn candidates(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        owner_uid: &str,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>> {
        let (namespace, uid) = (namespace.map(str::to_string), owner_uid.to_string());
        self.read_cache(resource, move |c| candidates(c, namespace.as_deref(), &uid))
    }

    fn changes(&self, resource: &Resource) -> Option<u64> {
        self.running(resource).map(|i| i.changes())
    }

    fn cached_text(&self, resource: &Resource, namespace: &str, name: &str) -> Option<Arc<str>> {
        let key = bosun_kube::watch::key_of(namespace, name);
        self.running(resource)?.read().text(&key)
    }

    fn cached(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Arc<Value>>, ClusterError>> {
        let (resource, key) = (resource.clone(), bosun_kube::watch::key_of(namespace, name));
        Box::pin(async move {
            let informer = self.informer(&resource).await?;
            let cached = informer.read().get(&key);
            Ok(cached)
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
            self.api(&resource, &ns)
                .create(&object)
                .await
                .inspect(|v| self.remember(&resource, v))
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
            self.api(&resource, &ns)
                .replace(&name, &object)
                .await
                .inspect(|v| self.remember(&resource, v))
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
            self.api(&resource, &ns)
                .replace_status(&name, &object)
                .await
                .inspect(|v| self.remember(&resource, v))
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
                .apply(&name, &params, &object)
                .await
                .inspect(|v| {
                    if !dry_run {
                        self.remember(&resource, v);
                    }
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
                Ok(answer) => {
                    // Gone now (a Status), or terminating (finalizers): then the object
                    // says so.
                    if answer["kind"] != "Status"
                        && !answer["metadata"]["deletionTimestamp"].is_null()
                    {
                        self.remember(&resource, &answer);
                    } else {
                        self.forget(&resource, &namespace, &name, &uid);
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
            informer.subscribe(Box::new(move |event| {
                tx.send(match event {
                    Event::Applied { old, new } => Change::Applied {
                        old: old.as_ref().map(bosun_kube::watch::Stored::shared),
                        new: Arc::clone(new),
                    },
                    Event::Deleted(old) => Change::Deleted(Arc::clone(old)),
                })
                .is_ok()
            }));
            Ok(rx)
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(ns: &str, name: &str, version: u32, owners: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}"),
                         "resourceVersion": version.to_string(), "ownerReferences": owners}
        })
    }

    fn controller(uid: &str) -> Value {
        json!([{"apiVersion": "example.com/v1", "kind": "Thing", "name": "p", "uid": uid,
                "controller": true}])
    }

    fn key(ns: &str, name: &str) -> ObjectKey {
        (ns.into(), name.into())
    }

    fn names(objects: &[Arc<Value>]) -> Vec<&str> {
        let mut names: Vec<&str> = objects
            .iter()
            .map(|o| bosun_lambda::keys::name_of(o))
            .collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn candidates_are_the_controllers_own_and_the_orphans_of_its_namespace() {
        let informer = Informer::default();
        {
            let mut cache = informer.change();
            cache.remember(
                key("ns", "ours"),
                &object("ns", "ours", 1, controller("p1")),
            );
            cache.remember(
                key("ns", "theirs"),
                &object("ns", "theirs", 1, controller("p2")),
            );
            cache.remember(key("ns", "orphan"), &object("ns", "orphan", 1, json!([])));
            // An owner that is not the controller leaves the object an orphan.
            let mut owned = controller("p2");
            owned[0]["controller"] = json!(false);
            cache.remember(key("ns", "gc-owned"), &object("ns", "gc-owned", 1, owned));
            cache.remember(key("other", "far"), &object("other", "far", 1, json!([])));
            cache.remember(
                key("other", "ours-far"),
                &object("other", "ours-far", 1, controller("p1")),
            );
        }
        let cache = informer.read();
        assert_eq!(
            names(&candidates(&cache, Some("ns"), "p1")),
            vec!["gc-owned", "orphan", "ours"]
        );
        assert_eq!(
            names(&candidates(&cache, Some("ns"), "p2")),
            vec!["gc-owned", "orphan", "theirs"]
        );
        // Cluster-wide: every namespace.
        assert_eq!(
            names(&candidates(&cache, None, "p1")),
            vec!["far", "gc-owned", "orphan", "ours", "ours-far"]
        );
        assert_eq!(cache.index.orphans.len(), 3);
    }

    #[test]
    fn adoption_and_release_move_an_object_between_orphans_and_its_controller() {
        let informer = Informer::default();
        informer
            .change()
            .remember(key("ns", "c"), &object("ns", "c", 1, json!([])));
        assert_eq!(
            names(&candidates(&informer.read(), Some("ns"), "p1")),
            vec!["c"]
        );

        // Adopted by p1: no longer a candidate of p2, one of p1's own.
        informer
            .change()
            .remember(key("ns", "c"), &object("ns", "c", 2, controller("p1")));
        {
            let cache = informer.read();
            assert!(cache.index.orphans.is_empty());
            assert!(cache.index.owned.contains_key("p1"));
            assert!(candidates(&cache, Some("ns"), "p2").is_empty());
            assert_eq!(names(&candidates(&cache, Some("ns"), "p1")), vec!["c"]);
        }

        // Released: an orphan again, and p1 keeps no empty entry.
        informer
            .change()
            .remember(key("ns", "c"), &object("ns", "c", 3, json!([])));
        let cache = informer.read();
        assert!(cache.index.owned.is_empty());
        assert_eq!(names(&candidates(&cache, Some("ns"), "p2")), vec!["c"]);
    }

    #[test]
    fn a_controller_with_many_children_keeps_them_all() {
        let informer = Informer::default();
        let count = Owned::FEW + 4;
        for i in 0..count {
            let name = format!("c{i:02}");
            informer
                .change()
                .remember(key("ns", &name), &object("ns", &name, 1, controller("p1")));
        }
        assert!(matches!(
            informer.read().index.owned.get("p1"),
            Some(Owned::Many(_))
        ));
        assert_eq!(candidates(&informer.read(), Some("ns"), "p1").len(), count);
        // Deleted one by one: the controller's entry goes with the last.
        for i in 0..count {
            let name = format!("c{i:02}");
            informer
                .change()
                .removed(&key("ns", &name), &format!("uid-{name}"));
        }
        assert!(informer.read().index.owned.is_empty());
    }
}
