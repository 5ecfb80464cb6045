//! Shared watches: one kube watcher per distinct (resource, namespace, label and field
//! selectors), whose objects every listener shares — the addon's kubernetes bindings, and
//! the lambda controllers' and the deployer's [`crate::informer::Informer`]s.
//!
//! ```text
//!   listener (binding subscriber, informer) ──attached to──► SharedWatch (resource,
//!                                                 namespace, selectors) ◄── kube watcher
//!                                                 one per distinct key, shared
//! ```
//!
//! A shared watch keeps the objects it has seen; on a relist (after an error or `410 Gone`)
//! it compares the new list with them, so listeners get exactly the Added, Modified and
//! Deleted events that happened, never a lost or phantom object.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

use crate::compact::Compact;
use crate::resolve::KindResolver;

/// How long a listener may wait for the first list of its objects.
const INITIAL_LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// Something attached to shared watches.
pub trait Listener: Send + Sync {
    /// The watch's objects when the listener attaches (of `namespace`, if the watch is
    /// limited to one).
    fn init(&self, namespace: &Option<String>, objects: &BTreeMap<ObjectKey, Stored>);
    /// One change: the object, and its stored form to keep.
    fn on(&self, change: Change, key: &ObjectKey, object: &Arc<Value>, stored: &Stored);
    /// Forgets the watches it is attached to (all, or those of one namespace) and returns
    /// them, so the manager can detach it.
    fn detached(&self, namespace: Option<&str>) -> Vec<Arc<SharedWatch>>;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What makes two listeners share a watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WatchKey {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    labels: String,
    fields: String,
}

impl WatchKey {
    /// The key of a watch of `resource`, in `namespace` (all namespaces: `None`), with
    /// these label and field selector strings.
    pub fn new(
        resource: &ApiResource,
        namespace: Option<String>,
        labels: String,
        fields: String,
    ) -> WatchKey {
        WatchKey {
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
            namespace,
            labels,
            fields,
        }
    }
}

impl std::fmt::Display for WatchKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gv = if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        write!(f, "{gv} {}", self.plural)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if !self.labels.is_empty() {
            write!(f, " labels {:?}", self.labels)?;
        }
        if !self.fields.is_empty() {
            write!(f, " fields {:?}", self.fields)?;
        }
        Ok(())
    }
}

/// An object's place: namespace (empty when cluster-scoped) and name.
pub type ObjectKey = (Arc<str>, Arc<str>);

/// The key of `name` in `namespace` (empty when cluster-scoped).
pub fn key_of(namespace: &str, name: &str) -> ObjectKey {
    (namespace.into(), name.into())
}

/// `key` with the parts `objects` holds already: the key itself when the object is there,
/// else its namespace from a neighbour in the same namespace. Every listener keeps the
/// key it is given, so an object's key is one pair of allocations however many keep it,
/// and a namespace's name one for all its objects.
fn shared_key<V>(objects: &BTreeMap<ObjectKey, V>, key: ObjectKey) -> ObjectKey {
    if let Some((k, _)) = objects.get_key_value(&key) {
        return k.clone();
    }
    let near = objects
        .range(..&key)
        .next_back()
        .into_iter()
        .chain(objects.range(&key..).next())
        .find(|(k, _)| k.0 == key.0);
    match near {
        Some((k, _)) => (Arc::clone(&k.0), key.1),
        None => key,
    }
}

/// The first key of `namespace` (for a range of its objects).
pub fn namespace_start(namespace: &str) -> ObjectKey {
    (namespace.into(), "".into())
}

/// A watched object as the watch keeps it, shared by the watch cache and every listener
/// that keeps full objects (the informers of lambda and the deployer share the same text):
/// compact JSON text, about its JSON size in memory, where a parsed `Value` takes ten
/// times that for a typical object (each small map of `managedFields` is a B-tree node).
/// It is parsed when it is read: a hook's snapshot, a sync's parent and children.
#[derive(Clone, Debug)]
pub struct Stored {
    text: Arc<str>,
    /// Where the object's resourceVersion is in `text` (the characters between its
    /// quotes, as the text writes them), so that it takes no allocation of its own: a
    /// cached object is its text and these two numbers. `(0, 0)`: it has none.
    version: (u32, u32),
}

/// The place of `version` in `text`, an object's JSON: the first `"resourceVersion":`
/// followed by that version as a JSON string. Any place found holds the same characters,
/// so which one does not matter. A version the text writes with escapes (no API server
/// makes such; Kubernetes calls versions opaque) is found once the text is rewritten as
/// `serde_json` writes it, and is then read as written, escapes included: equal versions
/// still read equal, and such a version is no number (see [`supersedes`]) either way.
fn version_in(text: &str, version: &str) -> Option<(u32, u32)> {
    const KEY: &str = "\"resourceVersion\":";
    if version.is_empty() {
        return Some((0, 0));
    }
    // As a JSON string: the same characters unless some need escapes.
    let plain = version
        .bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    let escaped;
    let inner = if plain {
        version
    } else {
        escaped = serde_json::to_string(version).ok()?;
        escaped.get(1..escaped.len() - 1)?
    };
    let mut from = 0;
    while let Some(at) = text.get(from..)?.find(KEY) {
        let start = from + at + KEY.len();
        let rest = text.get(start..)?.as_bytes();
        if rest.first() == Some(&b'"')
            && rest.get(1..=inner.len()) == Some(inner.as_bytes())
            && rest.get(inner.len() + 1) == Some(&b'"')
        {
            return Some((
                u32::try_from(start + 1).ok()?,
                u32::try_from(inner.len()).ok()?,
            ));
        }
        from = start;
    }
    None
}

impl Stored {
    /// `object` stored as text; also returns the object shared, for the listeners.
    pub fn new(object: Value) -> (Stored, Arc<Value>) {
        let stored = Stored::of(&object);
        (stored, Arc::new(object))
    }

    /// `object` stored as text.
    pub fn of(object: &Value) -> Stored {
        Stored::from_text(resource_version(object), object.to_string())
    }

    /// `text`, an object's compact JSON as `Value` prints it, stored.
    fn from_text(resource_version: &str, text: String) -> Stored {
        if let Some(version) = version_in(&text, resource_version) {
            return Stored {
                text: text.into(),
                version,
            };
        }
        // Written with escapes of its own: as `serde_json` writes it, where it is found.
        let text = serde_json::from_str::<Value>(&text).map_or(text, |v| v.to_string());
        Stored {
            version: version_in(&text, resource_version).unwrap_or((0, 0)),
            text: text.into(),
        }
    }

    /// The object (text was serialized from a `Value`, so it parses).
    pub fn parse(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    /// The object, parsed, to share.
    pub fn shared(&self) -> Arc<Value> {
        Arc::new(self.parse())
    }

    /// The object's head, parsed: its `apiVersion`, `kind` and `metadata` without
    /// `managedFields`, the rest skipped (read, not built). What a key and a label or
    /// annotation selector need, at a fraction of [`Stored::parse`]'s cost.
    pub fn head(&self) -> Value {
        serde_json::from_str::<Head>(&self.text)
            .map(|h| h.0)
            .unwrap_or(Value::Null)
    }

    /// The object's compact JSON, shared.
    pub fn text(&self) -> Arc<str> {
        Arc::clone(&self.text)
    }

    /// The size of the object's compact JSON.
    pub fn json_len(&self) -> usize {
        self.text.len()
    }

    /// Its resourceVersion.
    pub fn resource_version(&self) -> &str {
        let (start, len) = (self.version.0 as usize, self.version.1 as usize);
        self.text.get(start..start + len).unwrap_or_default()
    }
}

/// An object's head ([`Stored::head`]).
struct Head(Value);

impl<'de> serde::Deserialize<'de> for Head {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Head, D::Error> {
        d.deserialize_map(HeadVisitor { metadata: false })
            .map(|m| Head(Value::Object(m)))
    }
}

/// Keeps `apiVersion`, `kind` and `metadata` of an object (`metadata: false`), or every
/// field of its metadata but `managedFields` (`metadata: true`).
struct HeadVisitor {
    metadata: bool,
}

impl<'de> serde::de::Visitor<'de> for HeadVisitor {
    type Value = serde_json::Map<String, Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let value = match (self.metadata, key.as_ref()) {
                (true, "managedFields") => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
                (true, _) | (false, "apiVersion" | "kind") => map.next_value::<Value>()?,
                (false, "metadata") => Value::Object(map.next_value_seed(MetadataSeed)?),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
            };
            out.insert(key.into_owned(), value);
        }
        Ok(out)
    }
}

/// An object's metadata without `managedFields`.
struct MetadataSeed;

impl<'de> serde::de::DeserializeSeed<'de> for MetadataSeed {
    type Value = serde_json::Map<String, Value>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(HeadVisitor { metadata: true })
    }
}

/// Watch event kinds as subscribers see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

struct WatchState {
    objects: BTreeMap<ObjectKey, Stored>,
    listeners: Vec<Arc<dyn Listener>>,
    ready: bool,
    last_error: Option<String>,
}

/// One watch shared by every binding with the same key.
pub struct SharedWatch {
    key: WatchKey,
    state: Mutex<WatchState>,
    ready: tokio::sync::watch::Sender<bool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl SharedWatch {
    /// The namespace the watch is limited to, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.key.namespace.as_deref()
    }

    fn dispatch(&self, change: Change, key: &ObjectKey, object: &Arc<Value>, stored: &Stored) {
        let st = lock(&self.state);
        for l in &st.listeners {
            l.on(change, key, object, stored);
        }
    }

    /// Folds one watcher event into the object set and tells the listeners.
    fn apply(&self, relist: &mut Option<BTreeMap<ObjectKey, Stored>>, ev: watcher::Event<Item>) {
        match ev {
            watcher::Event::Init => *relist = Some(BTreeMap::new()),
            watcher::Event::InitApply(Item { key, stored }) => {
                if let Some(r) = relist.as_mut() {
                    let key = shared_key(r, key);
                    r.insert(key, stored);
                }
            }
            watcher::Event::InitDone => {
                let fresh = relist.take().unwrap_or_default();
                let mut st = lock(&self.state);
                let old = std::mem::take(&mut st.objects);
                for (k, o) in &old {
                    if !fresh.contains_key(k) {
                        let v = o.shared();
                        for l in &st.listeners {
                            l.on(Change::Deleted, k, &v, o);
                        }
                    }
                }
                for (k, o) in &fresh {
                    let change = match old.get(k) {
                        None => Some(Change::Added),
                        Some(prev) if prev.resource_version() != o.resource_version() => {
                            Some(Change::Modified)
                        }
                        Some(_) => None,
                    };
                    if let Some(c) = change
                        && !st.listeners.is_empty()
                    {
                        let v = o.shared();
                        for l in &st.listeners {
                            l.on(c, k, &v, o);
                        }
                    }
                }
                st.objects = fresh;
                st.ready = true;
                st.last_error = None;
                drop(st);
                self.ready.send_replace(true);
            }
            watcher::Event::Apply(Item { key, stored }) => {
                let object = stored.shared();
                let (key, change) = {
                    let mut st = lock(&self.state);
                    let key = shared_key(&st.objects, key);
                    match st.objects.insert(key.clone(), stored.clone()) {
                        Some(_) => (key, Change::Modified),
                        None => (key, Change::Added),
                    }
                };
                self.dispatch(change, &key, &object, &stored);
            }
            watcher::Event::Delete(Item { key, stored }) => {
                let object = stored.shared();
                lock(&self.state).objects.remove(&key);
                self.dispatch(Change::Deleted, &key, &object, &stored);
            }
        }
    }

    fn stop(&self) {
        if let Some(t) = lock(&self.task).take() {
            t.abort();
        }
    }
}

/// A watched object as the watch folds it in: its key and its stored form.
struct Item {
    key: ObjectKey,
    stored: Stored,
}

#[cfg(test)]
fn object_key(o: &Value) -> ObjectKey {
    let m = &o["metadata"];
    key_of(
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
    )
}

pub fn resource_version(o: &Value) -> &str {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
}

pub use bosun_runtime::versions::supersedes;

/// `metav1.LabelSelector` as a selector string (`a=b,c in (d,e),!f`).
pub fn label_selector_string(sel: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or_default()));
        }
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match e["operator"].as_str().unwrap_or_default() {
            "In" => parts.push(format!("{key} in ({})", values.join(","))),
            "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
            "Exists" => parts.push(key.to_string()),
            "DoesNotExist" => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    parts.join(",")
}

struct Inner {
    client: kube::Client,
    resolver: KindResolver,
    /// Watches started from now on list again this often (metacontroller's
    /// `--cache-flush-interval`); `None`: only after an error or `410 Gone`.
    relist_every: Mutex<Option<std::time::Duration>>,
    watches: Mutex<HashMap<WatchKey, Arc<SharedWatch>>>,
}

/// The shared watches of the process: started when a first listener needs one, stopped
/// when its last listener detaches.
#[derive(Clone)]
pub struct WatchManager {
    inner: Arc<Inner>,
}

impl WatchManager {
    /// A manager on `client`.
    pub fn new(client: kube::Client) -> WatchManager {
        WatchManager {
            inner: Arc::new(Inner {
                resolver: KindResolver::new(client.clone()),
                relist_every: Mutex::new(None),
                client,
                watches: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Watches started from now on list again every `every` (the cache flush of
    /// metacontroller's informers); a relist reports only what changed.
    pub fn relist_every(&self, every: std::time::Duration) {
        *lock(&self.inner.relist_every) = Some(every);
    }

    /// Fetches discovery again every `every` until the manager is dropped.
    pub fn rediscover_every(&self, every: std::time::Duration) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                if let Err(e) = inner.resolver.rediscover().await {
                    tracing::warn!("periodic discovery (--discovery-interval): {e}");
                }
            }
        });
    }

    /// Stops every shared watch (bosun is stopping: nothing reads them any more, and the
    /// API server may go next, as the embedded sandbox does).
    pub fn stop_all(&self) {
        let watches: Vec<Arc<SharedWatch>> =
            lock(&self.inner.watches).drain().map(|(_, w)| w).collect();
        for w in watches {
            w.stop();
        }
    }

    /// Distinct watches running now, with their listener counts (for the debug views).
    pub fn watches(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = lock(&self.inner.watches)
            .iter()
            .map(|(k, w)| (k.to_string(), lock(&w.state).listeners.len()))
            .collect();
        out.sort();
        out
    }

    /// The shared watch for `key`, started if needed.
    pub fn watch(&self, key: WatchKey, resource: &ApiResource) -> Arc<SharedWatch> {
        let mut watches = lock(&self.inner.watches);
        if let Some(w) = watches.get(&key) {
            return w.clone();
        }
        let (ready, _) = tokio::sync::watch::channel(false);
        let w = Arc::new(SharedWatch {
            key: key.clone(),
            state: Mutex::new(WatchState {
                objects: BTreeMap::new(),
                listeners: Vec::new(),
                ready: false,
                last_error: None,
            }),
            ready,
            task: Mutex::new(None),
        });
        let api: Api<WatchedObject> = match &key.namespace {
            Some(ns) => Api::namespaced_with(self.inner.client.clone(), ns, resource),
            None => Api::all_with(self.inner.client.clone(), resource),
        };
        let mut config = watcher::Config::default();
        if !key.labels.is_empty() {
            config = config.labels(&key.labels);
        }
        if !key.fields.is_empty() {
            config = config.fields(&key.fields);
        }
        let weak = Arc::downgrade(&w);
        let (api_version, kind) = (resource.api_version.clone(), resource.kind.clone());
        let relist_every = *lock(&self.inner.relist_every);
        let task = tokio::spawn(async move {
            // A new watcher lists again; at the flush interval the current one is dropped
            // for a new one (the relist reports only what changed).
            loop {
                let stream = watcher(api.clone(), config.clone()).default_backoff();
                futures::pin_mut!(stream);
                let flush = async {
                    match relist_every {
                        Some(every) => tokio::time::sleep(every).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::pin!(flush);
                let mut relist = None;
                loop {
                    let item = tokio::select! {
                        item = stream.next() => item,
                        () = &mut flush => break,
                    };
                    let Some(item) = item else { return };
                    let Some(w) = weak.upgrade() else { return };
                    match item {
                        Ok(ev) => {
                            let v = |o: WatchedObject| o.into_item(&api_version, &kind);
                            let ev = match ev {
                                watcher::Event::Init => watcher::Event::Init,
                                watcher::Event::InitApply(o) => watcher::Event::InitApply(v(o)),
                                watcher::Event::InitDone => watcher::Event::InitDone,
                                watcher::Event::Apply(o) => watcher::Event::Apply(v(o)),
                                watcher::Event::Delete(o) => watcher::Event::Delete(v(o)),
                            };
                            w.apply(&mut relist, ev);
                        }
                        Err(e) => {
                            tracing::warn!(watch = %w.key, "watch error (retrying): {e}");
                            lock(&w.state).last_error = Some(e.to_string());
                        }
                    }
                }
                if weak.strong_count() == 0 {
                    return;
                }
                tracing::debug!("watch relisted at the cache flush interval");
            }
        });
        *lock(&w.task) = Some(task);
        watches.insert(key, w.clone());
        w
    }

    /// Attaches a listener to a watch once it holds its first list.
    pub async fn attach(
        &self,
        w: &Arc<SharedWatch>,
        l: Arc<dyn Listener>,
    ) -> Result<(), AttachError> {
        let mut rx = w.ready.subscribe();
        let waited = tokio::time::timeout(INITIAL_LIST_TIMEOUT, rx.wait_for(|r| *r)).await;
        if !matches!(waited, Ok(Ok(_))) {
            return Err(AttachError {
                watch: w.key.to_string(),
                within: INITIAL_LIST_TIMEOUT,
                last_error: lock(&w.state).last_error.clone().unwrap_or_default(),
            });
        }
        let mut st = lock(&w.state);
        l.init(&w.key.namespace, &st.objects);
        st.listeners.push(l);
        Ok(())
    }

    /// Detaches a listener; a watch nobody listens to stops.
    pub fn detach(&self, w: &Arc<SharedWatch>, l: &Arc<dyn Listener>) {
        let empty = {
            let mut st = lock(&w.state);
            st.listeners.retain(|x| !Arc::ptr_eq(x, l));
            st.listeners.is_empty()
        };
        if empty {
            let mut watches = lock(&self.inner.watches);
            if watches.get(&w.key).is_some_and(|x| Arc::ptr_eq(x, w))
                && lock(&w.state).listeners.is_empty()
            {
                watches.remove(&w.key);
                w.stop();
            }
        }
    }

    /// Attaches `listener` to the cluster-wide watch of `resource` (shared with every
    /// binding that watches it the same way) once that watch holds its first list. The
    /// informers of lambda and the deployer listen this way.
    pub async fn listen(
        &self,
        resource: &ApiResource,
        listener: Arc<dyn Listener>,
    ) -> Result<(), AttachError> {
        let w = self.watch(
            WatchKey::new(resource, None, String::new(), String::new()),
            resource,
        );
        self.attach(&w, listener).await
    }

    /// The resolver of kinds this manager uses.
    pub fn resolver(&self) -> &KindResolver {
        &self.inner.resolver
    }

    /// The Kubernetes client.
    pub fn client(&self) -> &kube::Client {
        &self.inner.client
    }
}

/// A watch whose first list did not complete in time: the listener was not attached.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the first list of {watch} did not complete within {}s{}",
    .within.as_secs(),
    after_colon(.last_error)
)]
pub struct AttachError {
    /// The watch (resource, namespace, selectors).
    pub watch: String,
    /// How long the first list was waited for.
    pub within: std::time::Duration,
    /// The watch's last error, if it had one (empty otherwise).
    pub last_error: String,
}

/// `: why`, or nothing when there is no why.
fn after_colon(why: &str) -> String {
    if why.is_empty() {
        String::new()
    } else {
        format!(": {why}")
    }
}

impl bosun_runtime::ports::Classified for AttachError {
    /// The API server may yet answer: the next attempt waits again.
    fn class(&self) -> bosun_runtime::ports::ErrorClass {
        bosun_runtime::ports::ErrorClass::Transient
    }
}

/// A watched object as the watcher reads it: read once, straight into the compact JSON
/// the watch stores (see [`crate::compact`]), with the metadata the watch needs. kube's
/// `DynamicObject` is a flattened serde struct, read through serde's buffering (every
/// node built twice) with its metadata typed; a `Value` would be built only to be printed
/// and dropped. The watcher reads only the resourceVersion of the typed metadata.
#[derive(Clone, Debug)]
pub(crate) struct WatchedObject {
    metadata: ObjectMeta,
    object: Compact,
}

impl<'de> serde::Deserialize<'de> for WatchedObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let object = Compact::read(d)?;
        let metadata = ObjectMeta {
            resource_version: object.resource_version.clone(),
            ..ObjectMeta::default()
        };
        Ok(WatchedObject { metadata, object })
    }
}

impl kube::Resource for WatchedObject {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl WatchedObject {
    /// The object's key and stored form, with the `apiVersion` and `kind` that list items
    /// may lack.
    fn into_item(self, api_version: &str, kind: &str) -> Item {
        let o = self.object;
        let key = key_of(
            o.namespace.as_deref().unwrap_or_default(),
            o.name.as_deref().unwrap_or_default(),
        );
        let resource_version = o.resource_version.clone().unwrap_or_default();
        let stored = Stored::from_text(&resource_version, o.into_text(api_version, kind));
        Item { key, stored }
    }

    /// The object's JSON as the watch stores it.
    #[cfg(test)]
    fn into_value(self, api_version: &str, kind: &str) -> Value {
        self.into_item(api_version, kind).stored.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_objects_head_is_its_kind_and_metadata_without_managed_fields() {
        let object = json!({"apiVersion": "example.com/v1", "kind": "Thing",
            "metadata": {"name": "a\"b", "namespace": "ns", "resourceVersion": "7",
                         "labels": {"app": "x"}, "annotations": {"k\u{e9}y": "v"},
                         "finalizers": ["f"], "deletionTimestamp": "2026-01-01T00:00:00Z",
                         "managedFields": [{"manager": "m", "fieldsV1": {"f:data": {}}}]},
            "spec": {"big": [1, 2, {"x": "y"}]}, "status": {"ready": true}});
        let mut expected = object.clone();
        let Some(map) = expected.as_object_mut() else {
            panic!("an object")
        };
        map.remove("spec");
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        assert_eq!(Stored::of(&object).head(), expected);
        // An object without metadata has a head all the same; text that is no object none.
        let bare = json!({"kind": "Thing", "data": {"a": "b"}});
        assert_eq!(Stored::of(&bare).head(), json!({"kind": "Thing"}));
        // Escaped keys are read as what they stand for.
        let escaped = Stored::from_text(
            "1",
            r#"{"kind":"T","metadata":{"name":"n","l\u0061bels":{"a":"b"},"m\u0061nagedFields":[]},"spec":1}"#.into(),
        );
        assert_eq!(
            escaped.head(),
            json!({"kind": "T", "metadata": {"name": "n", "labels": {"a": "b"}}})
        );
        let odd = Stored::from_text("1", "[1]".into());
        assert_eq!(odd.head(), Value::Null);
    }

    #[test]
    fn a_stored_object_reads_its_resource_version_from_its_text() {
        let rv = |o: Value| Stored::of(&o).resource_version().to_string();
        assert_eq!(
            rv(json!({"metadata": {"name": "a", "resourceVersion": "42"}})),
            "42"
        );
        // An object of its own with that key, written before the metadata (keys sorted),
        // does not mislead it.
        let nested = json!({"data": {"resourceVersion": "7"}, "involvedObject":
            {"resourceVersion": "4"}, "metadata": {"resourceVersion": "42"}});
        assert_eq!(rv(nested), "42");
        assert_eq!(rv(json!({"metadata": {"name": "a"}})), "");
        // A version with characters JSON escapes reads as written, and equal ones equal.
        let odd = json!({"metadata": {"resourceVersion": "4\"2\\"}});
        assert_eq!(rv(odd.clone()), r#"4\"2\\"#);
        assert_eq!(rv(odd.clone()), rv(odd));
        // The server's own escapes of plain characters: the text is rewritten to find it.
        let sent = r#"{"metadata":{"resourceVersion":"\u0034\u0032"}}"#;
        let o: WatchedObject = serde_json::from_str(sent).expect("object");
        let stored = o.into_item("v1", "ConfigMap").stored;
        assert_eq!(stored.resource_version(), "42");
        assert_eq!(stored.parse()["metadata"]["resourceVersion"], "42");
    }

    #[test]
    fn watched_objects_become_the_json_the_api_server_sent_with_their_kind() {
        let sent = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                         "labels": {"x": "y"}, "uid": "u-1"},
            "data": {"k": "v"}, "immutable": false});
        let o: WatchedObject = serde_json::from_str(&sent.to_string()).expect("object");
        assert_eq!(
            kube::ResourceExt::resource_version(&o).as_deref(),
            Some("7")
        );
        assert_eq!(o.into_value("v1", "ConfigMap"), sent);
        // A list's items name neither: the watch's resource gives them.
        let mut bare = sent.clone();
        let m = bare.as_object_mut().expect("object");
        m.remove("apiVersion");
        m.remove("kind");
        let o: WatchedObject = serde_json::from_str(&bare.to_string()).expect("object");
        assert_eq!(o.into_value("v1", "ConfigMap"), sent);
        // As the watcher reads them: a watch event (either order of its keys) and a list.
        for line in [
            format!(r#"{{"type":"MODIFIED","object":{sent}}}"#),
            format!(r#"{{"object":{sent},"type":"MODIFIED"}}"#),
        ] {
            let ev: kube::core::WatchEvent<WatchedObject> =
                serde_json::from_str(&line).expect("event");
            let kube::core::WatchEvent::Modified(o) = ev else {
                panic!("{line}: not read as a change")
            };
            assert_eq!(o.into_value("v1", "ConfigMap"), sent);
        }
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMapList","metadata":{{"resourceVersion":"9"}},"items":[{bare}]}}"#
        );
        let list: kube::core::ObjectList<WatchedObject> =
            serde_json::from_str(&list).expect("list");
        let items: Vec<Value> = list
            .items
            .into_iter()
            .map(|o| o.into_value("v1", "ConfigMap"))
            .collect();
        assert_eq!(items, [sent]);
    }

    /// Records every change a watch tells its listeners, as `Added ns/name rv`.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Listener for Recorder {
        fn init(&self, _namespace: &Option<String>, _objects: &BTreeMap<ObjectKey, Stored>) {}
        fn on(&self, change: Change, key: &ObjectKey, object: &Arc<Value>, _stored: &Stored) {
            lock(&self.0).push(format!(
                "{change:?} {}/{} {}",
                key.0,
                key.1,
                resource_version(object)
            ));
        }
        fn detached(&self, _namespace: Option<&str>) -> Vec<Arc<SharedWatch>> {
            Vec::new()
        }
    }

    fn pod(name: &str, rv: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}})
    }

    #[test]
    fn a_relist_tells_listeners_only_what_changed_while_the_watch_was_down() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let watch = SharedWatch {
            key: WatchKey {
                group: String::new(),
                version: "v1".into(),
                plural: "pods".into(),
                namespace: None,
                labels: String::new(),
                fields: String::new(),
            },
            state: Mutex::new(WatchState {
                objects: BTreeMap::new(),
                listeners: Vec::new(),
                ready: false,
                last_error: None,
            }),
            ready: tokio::sync::watch::Sender::new(false),
            task: Mutex::new(None),
        };
        let recorder = Arc::new(Recorder::default());
        lock(&watch.state).listeners.push(recorder.clone());
        let mut relist = None;
        let script = [
            // The first list, then live events.
            Init,
            InitApply(pod("a", "1")),
            InitApply(pod("b", "2")),
            InitDone,
            Apply(pod("b", "3")),
            Apply(pod("c", "4")),
            // The watch broke (410 Gone): a relist in which `a` is unchanged, `b` changed,
            // `c` is gone and `d` is new.
            Init,
            InitApply(pod("a", "1")),
            InitApply(pod("b", "5")),
            InitApply(pod("d", "6")),
            InitDone,
            Delete(pod("d", "7")),
        ];
        for event in script {
            let item = |o: Value| Item {
                key: object_key(&o),
                stored: Stored::of(&o),
            };
            let event = match event {
                Init => Init,
                InitApply(o) => InitApply(item(o)),
                InitDone => InitDone,
                Apply(o) => Apply(item(o)),
                Delete(o) => Delete(item(o)),
            };
            watch.apply(&mut relist, event);
        }
        assert_eq!(
            *lock(&recorder.0),
            [
                "Added ns/a 1",
                "Added ns/b 2",
                "Modified ns/b 3",
                "Added ns/c 4",
                "Deleted ns/c 4",
                "Modified ns/b 5",
                "Added ns/d 6",
                "Deleted ns/d 7",
            ],
            "objects unchanged across the relist are not reported again"
        );
        let kept: Vec<String> = lock(&watch.state)
            .objects
            .keys()
            .map(|k| k.1.to_string())
            .collect();
        assert_eq!(kept, ["a", "b"]);
        assert!(
            *watch.ready.borrow(),
            "the watch is ready after its first list"
        );
    }

    #[test]
    fn label_selectors_become_selector_strings() {
        let sel = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "x", "operator": "Exists"},
                {"key": "y", "operator": "DoesNotExist"},
            ]
        });
        assert_eq!(
            label_selector_string(&sel),
            "app=web,tier in (a,b),env notin (prod),x,!y"
        );
    }
}
