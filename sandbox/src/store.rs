//! Object storage: an in-memory index of every object, written through to sled, with a
//! global resourceVersion counter and a bounded, persisted history of changes that
//! watches resume from.
//!
//! ```text
//!  write ─► Inner (BTreeMaps, rv+1) ─► sled batch (object + history record)
//!                 └─► broadcast ─► watch streams
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use super::resources::{ResourceInfo, builtin_resources};
use super::status::ApiError;

/// Identifies a stored resource independently of its version: (group, plural).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResKey {
    /// API group ("" for core).
    pub group: String,
    /// Plural name.
    pub plural: String,
}

impl ResKey {
    /// The key of a served resource.
    pub fn of(info: &ResourceInfo) -> Self {
        Self {
            group: info.group.clone(),
            plural: info.plural.clone(),
        }
    }
}

/// Watch event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeType {
    /// `ADDED`
    Added,
    /// `MODIFIED`
    Modified,
    /// `DELETED`
    Deleted,
}

impl ChangeType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed change, as watches see it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Change {
    /// resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub kind: ChangeType,
    /// Which resource.
    pub res: ResKey,
    /// Namespace ("" for cluster scope).
    pub namespace: String,
    /// The object after the change (the last state for deletes).
    pub object: Arc<Value>,
    /// The object before the change (modifications only).
    pub old: Option<Arc<Value>>,
}

/// How many changes the history keeps for watch resumption, by default (a watch resumed
/// from an older resourceVersion gets 410 Gone and lists again, as from kube-apiserver
/// after a compaction).
pub const DEFAULT_HISTORY: usize = 5_000;

/// sled's page cache for the store.
const SLED_CACHE_BYTES: u64 = 8 * 1024 * 1024;

type Objects = BTreeMap<(String, String), Arc<Value>>;

/// Where an object lives: its resource, namespace ("" for cluster scope) and name.
pub type ObjectKey = (ResKey, String, String);

/// The owner index, kept with every put and remove so that the garbage collector's work is
/// proportional to what is being deleted, not to the size of the store (kube-controller-
/// manager's collector keeps the same graph).
#[derive(Default)]
pub struct OwnerIndex {
    /// Where each object lives, by uid.
    by_uid: HashMap<String, ObjectKey>,
    /// The objects that name each uid in their owner references.
    dependents: HashMap<String, BTreeSet<ObjectKey>>,
    /// Owner uids that dependents name but no stored object carries.
    missing: HashSet<String>,
    /// Objects with a deletionTimestamp.
    deleting: BTreeSet<ObjectKey>,
}

impl OwnerIndex {
    fn owner_uids(obj: &Value) -> impl Iterator<Item = &str> {
        obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str())
    }

    fn uid(obj: &Value) -> Option<&str> {
        obj["metadata"]["uid"].as_str()
    }

    /// Forgets what `obj`, stored at `key`, contributed.
    fn forget(&mut self, key: &ObjectKey, obj: &Value) {
        if let Some(uid) = Self::uid(obj)
            && self.by_uid.get(uid) == Some(key)
        {
            self.by_uid.remove(uid);
            if self.dependents.contains_key(uid) {
                self.missing.insert(uid.to_string());
            }
        }
        for owner in Self::owner_uids(obj) {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(owner);
                    self.missing.remove(owner);
                }
            }
        }
        self.deleting.remove(key);
    }

    /// Records what `obj`, stored at `key`, contributes.
    fn learn(&mut self, key: &ObjectKey, obj: &Value) {
        if let Some(uid) = Self::uid(obj) {
            self.by_uid.insert(uid.to_string(), key.clone());
            self.missing.remove(uid);
        }
        for owner in Self::owner_uids(obj) {
            self.dependents
                .entry(owner.to_string())
                .or_default()
                .insert(key.clone());
            if !self.by_uid.contains_key(owner) {
                self.missing.insert(owner.to_string());
            }
        }
        if !obj["metadata"]["deletionTimestamp"].is_null() {
            self.deleting.insert(key.clone());
        }
    }

    /// Where the object with `uid` lives.
    pub fn locate(&self, uid: &str) -> Option<&ObjectKey> {
        self.by_uid.get(uid)
    }

    /// Whether any stored object names `uid` as an owner.
    pub fn has_dependents(&self, uid: &str) -> bool {
        self.dependents.get(uid).is_some_and(|s| !s.is_empty())
    }

    /// The objects that name `uid` as an owner.
    pub fn dependents_of(&self, uid: &str) -> impl Iterator<Item = &ObjectKey> {
        self.dependents.get(uid).into_iter().flatten()
    }

    /// Owner uids that dependents name but no stored object carries.
    pub fn missing_owners(&self) -> impl Iterator<Item = &str> {
        self.missing.iter().map(String::as_str)
    }

    /// The objects being deleted.
    pub fn deleting(&self) -> impl Iterator<Item = &ObjectKey> {
        self.deleting.iter()
    }
}

/// Mutable state behind the store's lock.
pub struct Inner {
    /// Last issued resourceVersion.
    pub rv: u64,
    /// Objects per resource, keyed by (namespace, name).
    pub objects: HashMap<ResKey, Objects>,
    /// Recent changes, oldest first.
    pub history: VecDeque<Arc<Change>>,
    /// Served resources: built-ins then CRD-defined ones.
    pub resources: Vec<ResourceInfo>,
    /// How many changes `history` keeps.
    pub history_limit: usize,
    /// Owners, dependents and objects being deleted, for the garbage collector.
    pub owners: OwnerIndex,
    /// Changes a caller produced under this lock, published when it is released.
    pending: Vec<Arc<Change>>,
    batch: sled::Batch,
}

/// The store. Cheap to share behind an `Arc`.
///
/// Writes are acknowledged only once durable: a committed batch is flushed by one
/// background flusher shared by all writers (group commit), and watches see a change only
/// after its flush, so no client ever observes a write a crash could take back.
pub struct Store {
    db: sled::Db,
    tree: sled::Tree,
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Change>>,
    /// Committed to sled but not yet flushed nor published.
    unflushed: Mutex<Vec<Arc<Change>>>,
    committed: std::sync::atomic::AtomicU64,
    flush_wanted: tokio::sync::Notify,
    flushed: tokio::sync::watch::Sender<u64>,
}

const OBJ: u8 = b'o';
const HIST: u8 = b'h';
const META_RV: &[u8] = b"m/rv";

fn object_key(res: &ResKey, ns: &str, name: &str) -> Vec<u8> {
    let mut k = vec![OBJ];
    for part in [res.group.as_str(), res.plural.as_str(), ns, name] {
        k.extend_from_slice(part.as_bytes());
        k.push(0);
    }
    k
}

fn history_key(rv: u64) -> Vec<u8> {
    let mut k = vec![HIST];
    k.extend_from_slice(&rv.to_be_bytes());
    k
}

/// Namespace and name of an object.
pub(crate) fn ns_name(obj: &Value) -> (String, String) {
    let meta = &obj["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default().to_string(),
        meta["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// Opens the sled database in `dir`, retrying for two seconds while its lock is held: a
/// store closed a moment ago in this process (a restart) may still be releasing it from
/// sled's background threads. Another process holding it is reported once the time is up.
fn open_sled(dir: &Path) -> Result<sled::Db, sled::Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        // Objects are served from memory and read from sled only here, at start: a small
        // page cache (sled's default is 1 GiB) keeps sled from holding every value it wrote.
        match sled::Config::new()
            .path(dir)
            .cache_capacity(SLED_CACHE_BYTES)
            .open()
        {
            // sled reports a held lock as an I/O error whose text names it.
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

impl Store {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path, history_limit: usize) -> Result<Arc<Store>, ApiError> {
        bosun_platform::create_private_dir(dir)
            .map_err(|e| ApiError::internal(format!("creating {}: {e}", dir.display())))?;
        let tighten = || {
            tighten_store(dir)
                .map_err(|e| ApiError::internal(format!("making {} private: {e}", dir.display())))
        };
        // A store written by an older bosun was readable by other users.
        bosun_platform::log_tightened("sandbox store", dir, &tighten()?);
        let db = open_sled(dir)?;
        // The files sled has just created follow the umask.
        tighten()?;
        let tree = db.open_tree("sandbox")?;
        let mut inner = Inner {
            rv: 0,
            objects: HashMap::new(),
            history: VecDeque::new(),
            resources: builtin_resources(),
            history_limit: history_limit.max(1),
            owners: OwnerIndex::default(),
            pending: Vec::new(),
            batch: sled::Batch::default(),
        };
        if let Some(v) = tree.get(META_RV)? {
            let bytes: [u8; 8] = v
                .as_ref()
                .try_into()
                .map_err(|_| ApiError::internal("corrupt resourceVersion counter"))?;
            inner.rv = u64::from_be_bytes(bytes);
        }
        for item in tree.scan_prefix([OBJ]) {
            let (key, value) = item?;
            let mut parts = key[1..].split(|b| *b == 0);
            let group = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
            let plural = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
            let obj: Value = serde_json::from_slice(&value)
                .map_err(|e| ApiError::internal(format!("corrupt object {group}/{plural}: {e}")))?;
            let (ns, name) = ns_name(&obj);
            let res = ResKey { group, plural };
            inner
                .owners
                .learn(&(res.clone(), ns.clone(), name.clone()), &obj);
            inner
                .objects
                .entry(res)
                .or_default()
                .insert((ns, name), Arc::new(obj));
        }
        for item in tree.scan_prefix([HIST]) {
            let (_, value) = item?;
            let change: Change = serde_json::from_slice(&value)
                .map_err(|e| ApiError::internal(format!("corrupt history record: {e}")))?;
            inner.history.push_back(Arc::new(change));
        }
        let excess = inner.history.len().saturating_sub(inner.history_limit);
        for old in inner.history.drain(..excess) {
            tree.remove(history_key(old.rv))?;
        }
        let (tx, _) = broadcast::channel(16_384);
        let rv = inner.rv;
        let store = Arc::new(Store {
            db,
            tree,
            inner: Mutex::new(inner),
            tx,
            unflushed: Mutex::new(Vec::new()),
            committed: std::sync::atomic::AtomicU64::new(rv),
            flush_wanted: tokio::sync::Notify::new(),
            flushed: tokio::sync::watch::Sender::new(rv),
        });
        {
            let mut inner = store.lock();
            let crds: Vec<Arc<Value>> = inner
                .objects
                .get(&ResKey {
                    group: "apiextensions.k8s.io".into(),
                    plural: "customresourcedefinitions".into(),
                })
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default();
            for crd in crds {
                inner.register_crd(&crd);
            }
        }
        Ok(store)
    }

    /// Takes the lock. Changes recorded with [`Inner::put`]/[`Inner::remove`] are committed
    /// by [`Store::commit`].
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes the changes recorded under `guard` to sled; the flusher makes them durable
    /// and then publishes them to watches.
    pub fn commit(&self, mut guard: MutexGuard<'_, Inner>) -> Result<(), ApiError> {
        if guard.pending.is_empty() {
            return Ok(());
        }
        let mut batch = std::mem::take(&mut guard.batch);
        batch.insert(META_RV, &guard.rv.to_be_bytes());
        let pending = std::mem::take(&mut guard.pending);
        let excess = guard.history.len().saturating_sub(guard.history_limit);
        for old in guard.history.drain(..excess) {
            batch.remove(history_key(old.rv));
        }
        self.tree.apply_batch(batch)?;
        let rv = guard.rv;
        // Queue for publication in commit order, still under the store lock.
        self.unflushed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(pending);
        self.committed
            .store(rv, std::sync::atomic::Ordering::SeqCst);
        drop(guard);
        self.flush_wanted.notify_one();
        Ok(())
    }

    /// The flusher: flushes sled whenever something was committed, then publishes the
    /// flushed changes and moves the durable watermark. Run it as one background task.
    pub async fn run_flusher(self: Arc<Self>) {
        loop {
            self.flush_wanted.notified().await;
            let target = self.committed.load(std::sync::atomic::Ordering::SeqCst);
            if let Err(err) = self.db.flush_async().await {
                tracing::error!(error = %err, "sandbox storage flush failed; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                self.flush_wanted.notify_one();
                continue;
            }
            let ready: Vec<Arc<Change>> = {
                let mut queue = self.unflushed.lock().unwrap_or_else(|p| p.into_inner());
                let split = queue.partition_point(|c| c.rv <= target);
                queue.drain(..split).collect()
            };
            for change in ready {
                // No receivers is fine: nobody watches.
                let _ = self.tx.send(change);
            }
            self.flushed.send_replace(target);
        }
    }

    /// Waits until everything committed so far is durable.
    pub async fn wait_durable(&self) {
        let target = self.committed.load(std::sync::atomic::Ordering::SeqCst);
        let mut rx = self.flushed.subscribe();
        // The flusher lives as long as the server; if it is gone there is nothing to wait for.
        let _ = rx.wait_for(|flushed| *flushed >= target).await;
    }

    /// Subscribes to live changes. Take it under the lock to line up with history.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    /// Flushes sled to disk.
    pub async fn flush(&self) -> Result<(), ApiError> {
        self.db.flush_async().await?;
        Ok(())
    }
}

impl Inner {
    /// Issues the next resourceVersion.
    pub fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// The current object, if any.
    pub fn get(&self, res: &ResKey, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(res)
            .and_then(|m| m.get(&(ns.to_string(), name.to_string())))
            .cloned()
    }

    /// All objects of a resource, optionally in one namespace, ordered by namespace/name.
    /// The objects of `res` (in `ns`, or in every namespace) that come after `after`
    /// (namespace, name) in key order: where a list's page continues, found in the index
    /// instead of by a pass over every object before it.
    pub fn list_after<'a>(
        &'a self,
        res: &ResKey,
        ns: Option<&'a str>,
        after: Option<(String, String)>,
    ) -> impl Iterator<Item = (&'a (String, String), &'a Arc<Value>)> + 'a {
        use std::ops::Bound;
        let start = match (ns, after) {
            (Some(ns), Some(a)) if a.0.as_str() >= ns => Bound::Excluded(a),
            (Some(ns), _) => Bound::Included((ns.to_string(), String::new())),
            (None, Some(a)) => Bound::Excluded(a),
            (None, None) => Bound::Unbounded,
        };
        self.objects
            .get(res)
            .into_iter()
            .flat_map(move |map| map.range((start.clone(), Bound::Unbounded)))
            .take_while(move |((n, _), _)| ns.is_none_or(|ns| n == ns))
    }

    pub fn list(&self, res: &ResKey, ns: Option<&str>) -> Vec<Arc<Value>> {
        let Some(map) = self.objects.get(res) else {
            return Vec::new();
        };
        match ns {
            Some(ns) => map
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => map.values().cloned().collect(),
        }
    }

    /// Stores `obj` (already carrying its new resourceVersion) and records the change.
    pub fn put(&mut self, res: &ResKey, obj: Value, rv: u64) -> Result<Arc<Value>, ApiError> {
        let (ns, name) = ns_name(&obj);
        let bytes = serde_json::to_vec(&obj).map_err(|e| ApiError::internal(e.to_string()))?;
        self.batch.insert(object_key(res, &ns, &name), bytes);
        let obj = Arc::new(obj);
        let key = (res.clone(), ns.clone(), name.clone());
        let old = self
            .objects
            .entry(res.clone())
            .or_default()
            .insert((ns.clone(), name), obj.clone());
        if let Some(old) = &old {
            self.owners.forget(&key, old);
        }
        self.owners.learn(&key, &obj);
        let kind = if old.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.record(Change {
            rv,
            kind,
            res: res.clone(),
            namespace: ns,
            object: obj.clone(),
            old,
        })?;
        if res.group == "apiextensions.k8s.io" && res.plural == "customresourcedefinitions" {
            self.register_crd(&obj);
        }
        Ok(obj)
    }

    /// Removes an object; `last` is its final state (with a new resourceVersion).
    pub fn remove(&mut self, res: &ResKey, last: Value, rv: u64) -> Result<Arc<Value>, ApiError> {
        let (ns, name) = ns_name(&last);
        self.batch.remove(object_key(res, &ns, &name));
        if let Some(map) = self.objects.get_mut(res)
            && let Some(old) = map.remove(&(ns.clone(), name.clone()))
        {
            self.owners.forget(&(res.clone(), ns.clone(), name), &old);
        }
        let obj = Arc::new(last);
        self.record(Change {
            rv,
            kind: ChangeType::Deleted,
            res: res.clone(),
            namespace: ns,
            object: obj.clone(),
            old: None,
        })?;
        if res.group == "apiextensions.k8s.io" && res.plural == "customresourcedefinitions" {
            self.unregister_crd(&obj);
        }
        Ok(obj)
    }

    fn record(&mut self, change: Change) -> Result<(), ApiError> {
        let bytes = serde_json::to_vec(&change).map_err(|e| ApiError::internal(e.to_string()))?;
        self.batch.insert(history_key(change.rv), bytes);
        let change = Arc::new(change);
        self.history.push_back(change.clone());
        self.pending.push(change);
        Ok(())
    }

    /// The oldest resourceVersion a watch can resume from without a 410.
    pub fn oldest_resumable(&self) -> u64 {
        match self.history.front() {
            // Resuming at rv N needs every change after N.
            Some(first) => first.rv.saturating_sub(1),
            None => self.rv,
        }
    }

    /// Changes after `rv` (for watch resumption), or None when compacted.
    pub fn changes_since(&self, rv: u64) -> Option<Vec<Arc<Change>>> {
        if rv < self.oldest_resumable() {
            return None;
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Some(self.history.range(start..).cloned().collect())
    }

    /// Finds a served resource by group, version and plural.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// Whether a namespace exists and is not terminating: Ok(true) active, Ok(false) terminating.
    pub fn namespace_state(&self, ns: &str) -> Option<bool> {
        let key = ResKey {
            group: String::new(),
            plural: "namespaces".into(),
        };
        self.get(&key, "", ns)
            .map(|obj| obj["metadata"]["deletionTimestamp"].is_null())
    }

    /// Serves the versions a CRD declares.
    pub fn register_crd(&mut self, crd: &Value) {
        self.unregister_crd(crd);
        self.resources.extend(crd_resources(crd));
    }

    fn unregister_crd(&mut self, crd: &Value) {
        let group = crd["spec"]["group"].as_str().unwrap_or_default();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let builtin = builtin_resources();
        self.resources.retain(|r| {
            !(r.group == group && r.plural == plural)
                || builtin
                    .iter()
                    .any(|b| b.group == group && b.plural == plural)
        });
    }
}

/// The resources a CRD object declares (served versions only).
pub(crate) fn crd_resources(crd: &Value) -> Vec<ResourceInfo> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let str_list = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    let mut out = Vec::new();
    for version in spec["versions"].as_array().into_iter().flatten() {
        if version["served"].as_bool() == Some(false) {
            continue;
        }
        let sub = &version["subresources"];
        out.push(ResourceInfo {
            group: spec["group"].as_str().unwrap_or_default().to_string(),
            version: version["name"].as_str().unwrap_or_default().to_string(),
            kind: kind.clone(),
            list_kind: names["listKind"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| format!("{kind}List")),
            plural: names["plural"].as_str().unwrap_or_default().to_string(),
            singular: names["singular"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| kind.to_ascii_lowercase()),
            namespaced: spec["scope"].as_str() != Some("Cluster"),
            short_names: str_list(&names["shortNames"]),
            categories: str_list(&names["categories"]),
            status_subresource: sub.get("status").is_some(),
            scale: sub
                .get("scale")
                .map(|s| super::resources::ScaleSubresource {
                    spec_replicas_path: s["specReplicasPath"]
                        .as_str()
                        .unwrap_or(".spec.replicas")
                        .to_string(),
                    status_replicas_path: s["statusReplicasPath"]
                        .as_str()
                        .unwrap_or(".status.replicas")
                        .to_string(),
                    label_selector_path: s["labelSelectorPath"].as_str().map(String::from),
                }),
            storage: version["storage"].as_bool().unwrap_or(false),
            embedded: super::resources::embedded_paths(&version["schema"]["openAPIV3Schema"]),
            schema: Some(&version["schema"]["openAPIV3Schema"])
                .filter(|s| s.is_object())
                .map(|s| std::sync::Arc::new(s.clone())),
            printer_columns: version["additionalPrinterColumns"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    Some(super::resources::PrinterColumn {
                        name: c["name"].as_str()?.to_string(),
                        type_: c["type"].as_str().unwrap_or("string").to_string(),
                        format: c["format"].as_str().unwrap_or_default().to_string(),
                        description: c["description"].as_str().unwrap_or_default().to_string(),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        json_path: c["jsonPath"].as_str()?.to_string(),
                    })
                })
                .collect(),
        });
    }
    out
}

/// Whether `name` is one of sled's own files.
fn sled_file(name: &str) -> bool {
    name == "db" || name == "conf" || name == "blobs" || name.starts_with("snap.")
}

/// Removes group and other access from sled's files in `dir` (recursively; symbolic links
/// are not followed), and from `dir` itself when sled's files are all it holds (a shared
/// folder someone pointed the store at is left as it is). Returns what was changed.
fn tighten_store(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut changed = Vec::new();
    let mut only_sled = true;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // sled's files, and the CA certificate a TLS sandbox writes beside them.
        if sled_file(&name) || name == "ca.crt" || name == "ca.tmp" {
            bosun_platform::tighten_tree(&entry.path(), &mut changed)?;
        } else {
            only_sled = false;
        }
    }
    if only_sled {
        bosun_platform::tighten_one(dir, &mut changed)?;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    }

    #[test]
    fn a_shared_folder_keeps_its_mode_but_sled_files_are_tightened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(shared.join("notes.txt"), "x").expect("write");
        std::fs::write(shared.join("db"), "x").expect("write");
        std::fs::set_permissions(shared.join("db"), Permissions::from_mode(0o644)).expect("chmod");
        let changed = tighten_store(&shared).expect("tighten");
        assert_eq!(changed, vec![shared.join("db")]);
        assert_eq!(mode(&shared), 0o755);
        assert_eq!(mode(&shared.join("db")), 0o600);
    }
}
