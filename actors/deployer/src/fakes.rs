//! In-memory versions of every port of the deployer, for tests that run it end to end
//! in-process:
//!
//! ```text
//!   MemoryCluster  Cluster         DeployItems, Targets, Secrets and Contexts with
//!                                  resourceVersions, generations, finalizers and the status
//!                                  subresource, and a watch that reports every write (ours
//!                                  included, as a real watch does)
//!   MemoryTargets  TargetClusters  the objects of each target cluster, with discovery of
//!                                  built-in kinds and CRDs, finalizers, and every write
//!                                  recorded
//!   MemoryHelm     HelmPort        charts, rendered objects set by the test, releases with
//!                                  their revisions, and every install, upgrade and
//!                                  uninstall recorded
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::helm::{Chart, ChartAccess, ChartSource, HelmPort, HelmRun, MAX_HISTORY, ReleaseState};
use crate::item::{DEPLOYER_TYPE_ANNOTATION, ErrorCode, ItemKey, ObjectRef, WithStatus};
use crate::manifest::{ResourceRef, TargetClusters};
use crate::ports::{BoxFut, Change, Cluster, ClusterError, EventNote, SecretData};
use crate::status::DeployError;
use crate::target::ResolvedTarget;

#[derive(Default)]
struct Inner {
    items: BTreeMap<ItemKey, Value>,
    targets: BTreeMap<ItemKey, Value>,
    secrets: BTreeMap<ItemKey, SecretData>,
    contexts: BTreeMap<ItemKey, Value>,
    version: u64,
    events: Vec<(ItemKey, EventNote)>,
    /// Every item write: (key, what was written: `metadata` or `status`).
    writes: Vec<(ItemKey, &'static str)>,
    watchers: Vec<UnboundedSender<Change>>,
    /// SyncObject holders by name (every holder counts as alive).
    locks: BTreeMap<String, String>,
    /// Status writes to let through before another writer's lands first (see
    /// [`MemoryCluster::write_status_before`]), and what that writer sets.
    interfere: Option<(usize, Edit)>,
}

/// What another writer does to an item.
type Edit = fn(&mut Value);

/// The in-memory cluster; clones share it.
#[derive(Clone, Default)]
pub struct MemoryCluster {
    inner: Arc<Mutex<Inner>>,
}

fn type_of(o: &Value) -> String {
    o["metadata"]["annotations"][DEPLOYER_TYPE_ANNOTATION]
        .as_str()
        .or_else(|| o["spec"]["type"].as_str())
        .unwrap_or_default()
        .to_string()
}

impl Inner {
    fn next_version(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    fn notify(&mut self, change: Change) {
        self.watchers.retain(|w| w.send(change.clone()).is_ok());
    }

    fn notify_item(&mut self, o: &Value) {
        let change = Change::Item {
            key: ItemKey::of(o),
            type_: type_of(o),
            resource_version: o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        };
        self.notify(change);
    }
}

impl MemoryCluster {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates or replaces an item as a user would (spec changes bump the generation).
    pub fn put_item(&self, mut o: Value) {
        let mut st = self.lock();
        let key = ItemKey::of(&o);
        let old = st.items.get(&key).cloned();
        let generation = match &old {
            Some(old) if old["spec"] == o["spec"] => {
                old["metadata"]["generation"].as_i64().unwrap_or(1)
            }
            Some(old) => old["metadata"]["generation"].as_i64().unwrap_or(1) + 1,
            None => 1,
        };
        o["metadata"]["generation"] = json!(generation);
        o["metadata"]["uid"] = json!(format!("uid-{}", key.name));
        o["metadata"]["resourceVersion"] = json!(st.next_version());
        if let Some(old) = &old
            && o["status"].is_null()
        {
            o["status"] = old["status"].clone();
        }
        st.items.insert(key, o.clone());
        st.notify_item(&o);
    }

    /// Deletes an item: with finalizers it gets a deletionTimestamp, without it is gone.
    pub fn delete_item(&self, key: &ItemKey) {
        let mut st = self.lock();
        let Some(mut o) = st.items.get(key).cloned() else {
            return;
        };
        if o["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
        {
            o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            o["metadata"]["resourceVersion"] = json!(st.next_version());
            st.items.insert(key.clone(), o.clone());
        } else {
            st.items.remove(key);
        }
        st.notify_item(&o);
    }

    /// Creates or replaces a Target.
    pub fn put_target(&self, mut o: Value) {
        let mut st = self.lock();
        let key = ItemKey::of(&o);
        o["metadata"]["resourceVersion"] = json!(st.next_version());
        st.targets.insert(key.clone(), o);
        st.notify(Change::Target {
            namespace: key.namespace,
            name: key.name,
        });
    }

    /// An item as stored.
    pub fn item(&self, key: &ItemKey) -> Option<Value> {
        self.lock().items.get(key).cloned()
    }

    /// A Secret's data.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<SecretData> {
        self.lock()
            .secrets
            .get(&ItemKey {
                namespace: namespace.into(),
                name: name.into(),
            })
            .cloned()
    }

    /// Events recorded so far.
    pub fn events(&self) -> Vec<(ItemKey, EventNote)> {
        self.lock().events.clone()
    }

    /// Writes to items so far.
    pub fn writes(&self) -> Vec<(ItemKey, &'static str)> {
        self.lock().writes.clone()
    }

    /// After `passed` more status writes, another writer (landscaper setting a jobID, say)
    /// changes the item with `edit` just before the next one, which then conflicts.
    pub fn write_status_before(&self, passed: usize, edit: Edit) {
        self.lock().interfere = Some((passed, edit));
    }
}

fn conflict_check(stored: Option<&Value>, o: &Value, what: &str) -> Result<(), ClusterError> {
    let Some(stored) = stored else {
        return Err(ClusterError::NotFound(what.to_string()));
    };
    if stored["metadata"]["resourceVersion"] != o["metadata"]["resourceVersion"] {
        return Err(ClusterError::Conflict(what.to_string()));
    }
    Ok(())
}

impl Cluster for MemoryCluster {
    fn watch(&self) -> BoxFut<'_, Result<UnboundedReceiver<Change>, ClusterError>> {
        Box::pin(async move {
            let (tx, rx) = unbounded_channel();
            let mut st = self.lock();
            for o in st.items.values() {
                let _ = tx.send(Change::Item {
                    key: ItemKey::of(o),
                    type_: type_of(o),
                    resource_version: String::new(),
                });
            }
            st.watchers.push(tx);
            Ok(rx)
        })
    }

    fn cached_items(&self, namespace: &str) -> Vec<Arc<Value>> {
        self.lock()
            .items
            .iter()
            .filter(|(k, _)| k.namespace == namespace)
            .map(|(_, o)| Arc::new(o.clone()))
            .collect()
    }

    fn get_item(&self, key: &ItemKey) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        let o = self.lock().items.get(key).cloned();
        Box::pin(async move { Ok(o) })
    }

    fn read_item(&self, key: &ItemKey) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        self.get_item(key)
    }

    fn update_item(&self, mut object: Value) -> BoxFut<'_, Result<Value, ClusterError>> {
        Box::pin(async move {
            let mut st = self.lock();
            let key = ItemKey::of(&object);
            let what = format!("DeployItem {key}");
            conflict_check(st.items.get(&key), &object, &what)?;
            let stored = st.items.get(&key).cloned().unwrap_or_default();
            // The main resource ignores status changes.
            object["status"] = stored["status"].clone();
            if object["spec"] != stored["spec"] {
                object["metadata"]["generation"] =
                    json!(stored["metadata"]["generation"].as_i64().unwrap_or(1) + 1);
            }
            st.writes.push((key.clone(), "metadata"));
            let deleting = !object["metadata"]["deletionTimestamp"].is_null();
            if deleting
                && object["metadata"]["finalizers"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
            {
                st.items.remove(&key);
                st.notify_item(&object);
                return Ok(object);
            }
            object["metadata"]["resourceVersion"] = json!(st.next_version());
            st.items.insert(key, object.clone());
            st.notify_item(&object);
            Ok(object)
        })
    }

    fn update_status<'a>(
        &'a self,
        item: WithStatus<'a>,
    ) -> BoxFut<'a, Result<Value, ClusterError>> {
        let object = item.to_value();
        Box::pin(async move {
            let mut st = self.lock();
            let key = ItemKey::of(&object);
            let what = format!("DeployItem {key} status");
            match st.interfere.take() {
                Some((0, edit)) => {
                    let version = st.next_version();
                    if let Some(stored) = st.items.get_mut(&key) {
                        edit(stored);
                        stored["metadata"]["resourceVersion"] = json!(version);
                    }
                }
                Some((n, edit)) => st.interfere = Some((n - 1, edit)),
                None => {}
            }
            conflict_check(st.items.get(&key), &object, &what)?;
            let mut stored = st.items.get(&key).cloned().unwrap_or_default();
            stored["status"] = object["status"].clone();
            stored["metadata"]["resourceVersion"] = json!(st.next_version());
            st.writes.push((key.clone(), "status"));
            st.items.insert(key, stored.clone());
            st.notify_item(&stored);
            Ok(stored)
        })
    }

    fn get_target(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        let key = ItemKey {
            namespace: namespace.into(),
            name: name.into(),
        };
        let o = self.lock().targets.get(&key).cloned();
        Box::pin(async move { Ok(o) })
    }

    fn get_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<SecretData>, ClusterError>> {
        let o = self.secret(namespace, name);
        Box::pin(async move { Ok(o) })
    }

    fn get_context(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        let key = ItemKey {
            namespace: namespace.into(),
            name: name.into(),
        };
        let o = self.lock().contexts.get(&key).cloned();
        Box::pin(async move { Ok(o) })
    }

    fn write_export(
        &self,
        item: &Value,
        existing: Option<ObjectRef>,
        exports: &Value,
    ) -> BoxFut<'_, Result<ObjectRef, ClusterError>> {
        let key = ItemKey::of(item);
        let exports = exports.to_string();
        Box::pin(async move {
            let mut st = self.lock();
            let name = match existing {
                Some(r) => r.name,
                None => crate::ports::export_secret_name(&key.name),
            };
            let mut data = SecretData::new();
            data.insert("config".into(), exports.into_bytes());
            st.secrets.insert(
                ItemKey {
                    namespace: key.namespace.clone(),
                    name: name.clone(),
                },
                data,
            );
            Ok(ObjectRef {
                name,
                namespace: key.namespace,
            })
        })
    }

    fn delete_secret(&self, namespace: &str, name: &str) -> BoxFut<'_, Result<(), ClusterError>> {
        self.lock().secrets.remove(&ItemKey {
            namespace: namespace.into(),
            name: name.into(),
        });
        Box::pin(async { Ok(()) })
    }

    fn event(&self, item: &Value, note: EventNote) -> BoxFut<'_, ()> {
        self.lock().events.push((ItemKey::of(item), note));
        Box::pin(async {})
    }

    fn lock_item<'a>(
        &'a self,
        item: &'a Value,
        prefix: &'a str,
        holder: &'a str,
    ) -> BoxFut<'a, Result<crate::lock::Found, ClusterError>> {
        let name = crate::lock::name(prefix, item["metadata"]["uid"].as_str().unwrap_or_default());
        let mut inner = self.lock();
        let held = inner
            .locks
            .entry(name)
            .or_insert_with(|| holder.to_string());
        let found = if held.is_empty() || held == holder {
            *held = holder.to_string();
            crate::lock::Found::Ours
        } else {
            crate::lock::Found::Held(held.clone())
        };
        Box::pin(async move { Ok(found) })
    }

    fn unlock_item<'a>(
        &'a self,
        item: &'a Value,
        prefix: &'a str,
        holder: &'a str,
    ) -> BoxFut<'a, Result<(), ClusterError>> {
        let name = crate::lock::name(prefix, item["metadata"]["uid"].as_str().unwrap_or_default());
        if let Some(held) = self.lock().locks.get_mut(&name)
            && held == holder
        {
            held.clear();
        }
        Box::pin(async { Ok(()) })
    }
}

// ---------------------------------------------------------------------------------------
// Target clusters
// ---------------------------------------------------------------------------------------

/// The key of a Target in the fakes: its namespace and name.
pub fn target_key(target: &ResolvedTarget) -> ItemKey {
    ItemKey {
        namespace: target.target.namespace.clone(),
        name: target.target.name.clone(),
    }
}

/// Built-in kinds every fake target cluster serves, cluster-scoped (in any group).
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "APIService",
    "CSIDriver",
];

/// Built-in kinds every fake target cluster serves, namespaced (in any group).
const NAMESPACED: &[&str] = &[
    "ConfigMap",
    "Secret",
    "Service",
    "ServiceAccount",
    "Endpoints",
    "Event",
    "Pod",
    "PodTemplate",
    "ReplicationController",
    "PersistentVolumeClaim",
    "LimitRange",
    "ResourceQuota",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
    "Role",
    "RoleBinding",
    "Ingress",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "Lease",
];

/// An object in a target cluster: group, kind, namespace (empty when cluster-scoped),
/// name. The version is not part of it: an object is one whatever version it is read in.
type ObjectKey = (String, String, String, String);

/// The group of an `apiVersion` (empty: the core group).
fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// The key of an object; a namespaced object that names no namespace is in `default`.
fn object_key(
    api_version: &str,
    kind: &str,
    namespaced: bool,
    namespace: &str,
    name: &str,
) -> ObjectKey {
    let namespace = match (namespaced, namespace) {
        (false, _) => "",
        (true, "") => "default",
        (true, ns) => ns,
    };
    (
        group_of(api_version).to_string(),
        kind.to_string(),
        namespace.to_string(),
        name.to_string(),
    )
}

/// An error of a target cluster, worded as the real port words it.
fn target_error(
    target: &ResolvedTarget,
    what: &str,
    message: &str,
    codes: &[ErrorCode],
) -> DeployError {
    DeployError::new(
        "Reconcile",
        "TargetCluster",
        format!("{}: {what}: {message}", target.target.describe()),
        codes,
    )
}

/// Discovery does not know the kind (retried, as the real port's discovery error is).
fn unknown_kind(target: &ResolvedTarget, api_version: &str, kind: &str) -> DeployError {
    target_error(
        target,
        &format!("discovery of {api_version} {kind}"),
        "the server could not find the requested resource",
        &[],
    )
}

/// Refuses what is not Kubernetes object metadata (labels that are not strings, …) before
/// the target sees it, as the real port does.
fn check_metadata(object: &Value, r: &ResourceRef) -> Result<(), DeployError> {
    let meta = &object["metadata"];
    let problem = if !meta.is_object() {
        Some(format!("expected an object, got {meta}"))
    } else {
        let maps = ["labels", "annotations"]
            .into_iter()
            .find_map(|f| match &meta[f] {
                Value::Null => None,
                Value::Object(m) if m.values().all(Value::is_string) => None,
                other => Some(format!("{f}: expected a map of strings, got {other}")),
            });
        maps.or_else(|| match &meta["finalizers"] {
            Value::Null => None,
            Value::Array(a) if a.iter().all(Value::is_string) => None,
            other => Some(format!(
                "finalizers: expected a list of strings, got {other}"
            )),
        })
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(DeployError::config(
            "Reconcile",
            "InvalidManifest",
            format!("{r}: metadata: not Kubernetes object metadata: {p}"),
        )),
    }
}

/// Whether `o`'s labels match a selector of `k=v`, `k==v`, `k!=v`, `k` and `!k`, comma
/// separated (empty: everything).
fn labels_match(o: &Value, selector: &str) -> bool {
    let labels = &o["metadata"]["labels"];
    selector
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .all(|req| {
            if let Some((k, v)) = req.split_once("!=") {
                labels[k.trim()].as_str() != Some(v.trim())
            } else if let Some((k, v)) = req.split_once('=') {
                labels[k.trim()].as_str() == Some(v.trim_start_matches('=').trim())
            } else if let Some(k) = req.strip_prefix('!') {
                labels[k.trim()].is_null()
            } else {
                !labels[req].is_null()
            }
        })
}

fn has_finalizers(o: &Value) -> bool {
    o["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

/// A write of the deployer to a target cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetWrite {
    /// A POST that created the object.
    Create,
    /// A PUT.
    Replace,
    /// A DELETE of an object that was there (with finalizers it stays, deleting).
    Delete,
}

/// One write recorded by [`MemoryTargets`].
#[derive(Clone, Debug, PartialEq)]
pub struct TargetOp {
    /// The Target written to (its namespace and name).
    pub target: ItemKey,
    /// What the write was.
    pub write: TargetWrite,
    /// The object as written (with its uid).
    pub resource: ResourceRef,
}

/// An object a target refuses, as an API server refuses an invalid object (422).
struct Refusal {
    kind: String,
    name: String,
    message: String,
}

#[derive(Default)]
struct TargetsInner {
    /// The objects of each Target.
    objects: BTreeMap<ItemKey, BTreeMap<ObjectKey, Value>>,
    /// Kinds defined by CRDs or the test: (group, kind) → namespaced.
    kinds: BTreeMap<(String, String), bool>,
    refusals: Vec<Refusal>,
    ops: Vec<TargetOp>,
    version: u64,
}

impl TargetsInner {
    fn next_version(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    /// Whether a kind is namespaced; `None`: the cluster does not serve it.
    fn scope(&self, api_version: &str, kind: &str) -> Option<bool> {
        let defined = self
            .kinds
            .get(&(group_of(api_version).to_string(), kind.to_string()));
        if let Some(namespaced) = defined {
            Some(*namespaced)
        } else if CLUSTER_SCOPED.contains(&kind) {
            Some(false)
        } else if NAMESPACED.contains(&kind) {
            Some(true)
        } else {
            None
        }
    }

    fn scope_in(
        &self,
        target: &ResolvedTarget,
        api_version: &str,
        kind: &str,
    ) -> Result<bool, DeployError> {
        self.scope(api_version, kind)
            .ok_or_else(|| unknown_kind(target, api_version, kind))
    }

    fn refusal(&self, r: &ResourceRef) -> Option<String> {
        self.refusals
            .iter()
            .find(|x| x.kind == r.kind && x.name == r.name)
            .map(|x| x.message.clone())
    }

    fn stored(&self, target: &ItemKey, key: &ObjectKey) -> Option<&Value> {
        self.objects.get(target).and_then(|o| o.get(key))
    }

    /// Creates or replaces `object` at `key` as the API server stores it: the namespace
    /// of its key, a uid and creation time kept from the stored one, a new
    /// resourceVersion, the generation bumped when anything but metadata and status
    /// changed, the stored status kept when none is given; an object being deleted
    /// whose finalizers are gone is removed. The object stored (or last seen).
    fn store(&mut self, target: &ItemKey, key: ObjectKey, mut object: Value) -> Value {
        let old = self.stored(target, &key).cloned();
        if key.2.is_empty() {
            if let Some(meta) = object["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
        } else {
            object["metadata"]["namespace"] = json!(key.2);
        }
        let version = self.next_version();
        match &old {
            Some(old) => {
                for f in ["uid", "creationTimestamp", "deletionTimestamp"] {
                    match &old["metadata"][f] {
                        Value::Null => {
                            if let Some(meta) = object["metadata"].as_object_mut() {
                                meta.remove(f);
                            }
                        }
                        v => object["metadata"][f] = v.clone(),
                    }
                }
                if object["status"].is_null() && !old["status"].is_null() {
                    object["status"] = old["status"].clone();
                }
                let body = |o: &Value| {
                    let mut o = o.clone();
                    if let Some(m) = o.as_object_mut() {
                        m.remove("metadata");
                        m.remove("status");
                    }
                    o
                };
                let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
                object["metadata"]["generation"] = json!(if body(old) == body(&object) {
                    generation
                } else {
                    generation + 1
                });
            }
            None => {
                object["metadata"]["uid"] = json!(format!("uid-{version}"));
                object["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
                object["metadata"]["generation"] = json!(1);
                if let Some(meta) = object["metadata"].as_object_mut() {
                    meta.remove("deletionTimestamp");
                }
            }
        }
        object["metadata"]["resourceVersion"] = json!(version);
        if object["kind"] == "CustomResourceDefinition" {
            self.define_crd(&object);
        }
        let objects = self.objects.entry(target.clone()).or_default();
        if !object["metadata"]["deletionTimestamp"].is_null() && !has_finalizers(&object) {
            objects.remove(&key);
        } else {
            objects.insert(key, object.clone());
        }
        object
    }

    /// A CRD makes its kind known.
    fn define_crd(&mut self, crd: &Value) {
        let spec = &crd["spec"];
        if let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str())
        {
            self.kinds.insert(
                (group.to_string(), kind.to_string()),
                spec["scope"] != "Cluster",
            );
        }
    }

    /// Deletes as the API server does: an object with finalizers gets a
    /// deletionTimestamp and stays; `None` when there was nothing to delete.
    fn delete(&mut self, target: &ItemKey, key: &ObjectKey) -> Option<Value> {
        let stored = self.stored(target, key).cloned()?;
        if has_finalizers(&stored) {
            if stored["metadata"]["deletionTimestamp"].is_null() {
                let mut o = stored.clone();
                o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                o["metadata"]["resourceVersion"] = json!(self.next_version());
                self.objects
                    .entry(target.clone())
                    .or_default()
                    .insert(key.clone(), o);
            }
        } else if let Some(objects) = self.objects.get_mut(target) {
            objects.remove(key);
        }
        Some(stored)
    }

    /// A POST: `Ok(None)` when the object exists.
    fn post(
        &mut self,
        target: &ResolvedTarget,
        object: Value,
    ) -> Result<Option<Value>, DeployError> {
        let r = ResourceRef::of(&object);
        check_metadata(&object, &r)?;
        let namespaced = self.scope_in(target, &r.api_version, &r.kind)?;
        if let Some(m) = self.refusal(&r) {
            return Err(target_error(
                target,
                &format!("creating {r}"),
                &m,
                &[ErrorCode::ConfigurationProblem],
            ));
        }
        let key = object_key(&r.api_version, &r.kind, namespaced, &r.namespace, &r.name);
        let tk = target_key(target);
        if self.stored(&tk, &key).is_some() {
            return Ok(None);
        }
        let stored = self.store(&tk, key, object);
        self.ops.push(TargetOp {
            target: tk,
            write: TargetWrite::Create,
            resource: ResourceRef::of(&stored),
        });
        Ok(Some(stored))
    }
}

/// The target clusters of the manifest and helm types in memory, one per Target
/// (namespace and name): objects with uids, resourceVersions, generations, finalizers and
/// deletionTimestamps; discovery that knows the common built-in kinds and every kind a CRD
/// written to the target defines; every write of the deployer recorded ([`TargetOp`]).
/// Clones share it.
#[derive(Clone, Default)]
pub struct MemoryTargets {
    inner: Arc<Mutex<TargetsInner>>,
}

impl MemoryTargets {
    fn lock(&self) -> MutexGuard<'_, TargetsInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every object in `target`, ordered by group, kind, namespace and name.
    pub fn objects(&self, target: &ItemKey) -> Vec<Value> {
        self.lock()
            .objects
            .get(target)
            .map(|o| o.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The `kind` object `name` in `namespace` (empty: cluster-scoped) of `target`.
    pub fn object(
        &self,
        target: &ItemKey,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        self.lock().objects.get(target).and_then(|o| {
            o.iter()
                .find(|((_, k, ns, n), _)| k == kind && ns == namespace && n == name)
                .map(|(_, v)| v.clone())
        })
    }

    /// Writes `object` into `target` as another client would (a controller setting its
    /// status or removing its finalizers, a user's own object); not recorded. A kind the
    /// cluster does not know is taken as namespaced.
    pub fn put_object(&self, target: &ItemKey, object: Value) {
        let mut st = self.lock();
        let r = ResourceRef::of(&object);
        let namespaced = st.scope(&r.api_version, &r.kind).unwrap_or(true);
        let key = object_key(&r.api_version, &r.kind, namespaced, &r.namespace, &r.name);
        st.store(target, key, object);
    }

    /// Makes `kind` of `api_version`'s group known to every target, as a CRD would.
    pub fn define_kind(&self, api_version: &str, kind: &str, namespaced: bool) {
        self.lock().kinds.insert(
            (group_of(api_version).to_string(), kind.to_string()),
            namespaced,
        );
    }

    /// Refuses every create and update of the `kind` object `name` with `message`, as an
    /// API server refuses an invalid object (422: a configuration problem).
    pub fn refuse(&self, kind: &str, name: &str, message: &str) {
        self.lock().refusals.push(Refusal {
            kind: kind.to_string(),
            name: name.to_string(),
            message: message.to_string(),
        });
    }

    /// The deployer's writes so far, in order.
    pub fn ops(&self) -> Vec<TargetOp> {
        self.lock().ops.clone()
    }

    /// Writes a release's objects into `target` (a namespaced one without a namespace in
    /// `namespace`) and removes those of `before` it no longer has: what Helm does.
    fn apply_release(
        &self,
        target: &ItemKey,
        namespace: &str,
        create_namespace: bool,
        objects: &[Value],
        before: &[ObjectKey],
    ) -> Vec<ObjectKey> {
        let mut st = self.lock();
        if create_namespace {
            let key = object_key("v1", "Namespace", false, "", namespace);
            if st.stored(target, &key).is_none() {
                let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
                st.store(target, key, ns);
            }
        }
        let mut now = Vec::new();
        for o in objects {
            let r = ResourceRef::of(o);
            let namespaced = st.scope(&r.api_version, &r.kind).unwrap_or(true);
            let ns = if r.namespace.is_empty() {
                namespace
            } else {
                &r.namespace
            };
            let key = object_key(&r.api_version, &r.kind, namespaced, ns, &r.name);
            st.store(target, key.clone(), o.clone());
            now.push(key);
        }
        for gone in before.iter().filter(|k| !now.contains(k)) {
            st.delete(target, gone);
        }
        now
    }

    /// Removes a release's objects from `target`.
    fn remove_release(&self, target: &ItemKey, objects: &[ObjectKey]) {
        let mut st = self.lock();
        for key in objects {
            st.delete(target, key);
        }
    }
}

impl TargetClusters for MemoryTargets {
    fn namespaced<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFut<'a, Result<bool, DeployError>> {
        let found = self.lock().scope_in(target, api_version, kind);
        Box::pin(async move { found })
    }

    fn get<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        r: &'a ResourceRef,
    ) -> BoxFut<'a, Result<Option<Value>, DeployError>> {
        let st = self.lock();
        let found = st
            .scope_in(target, &r.api_version, &r.kind)
            .map(|namespaced| {
                let key = object_key(&r.api_version, &r.kind, namespaced, &r.namespace, &r.name);
                st.stored(&target_key(target), &key).cloned()
            });
        Box::pin(async move { found })
    }

    fn create<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        object: Value,
    ) -> BoxFut<'a, Result<Value, DeployError>> {
        let r = ResourceRef::of(&object);
        let created = self.lock().post(target, object);
        Box::pin(async move {
            created?.ok_or_else(|| {
                target_error(
                    target,
                    &format!("creating {r}"),
                    &format!("{} {:?} already exists", r.kind, r.name),
                    &[],
                )
            })
        })
    }

    fn create_if_absent<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        object: Value,
    ) -> BoxFut<'a, Result<Option<Value>, DeployError>> {
        let created = self.lock().post(target, object);
        Box::pin(async move { created })
    }

    fn replace<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        object: Value,
    ) -> BoxFut<'a, Result<Value, DeployError>> {
        let result = (|| {
            let r = ResourceRef::of(&object);
            check_metadata(&object, &r)?;
            let mut st = self.lock();
            let namespaced = st.scope_in(target, &r.api_version, &r.kind)?;
            let what = format!("updating {r}");
            if let Some(m) = st.refusal(&r) {
                return Err(target_error(
                    target,
                    &what,
                    &m,
                    &[ErrorCode::ConfigurationProblem],
                ));
            }
            let key = object_key(&r.api_version, &r.kind, namespaced, &r.namespace, &r.name);
            let tk = target_key(target);
            let Some(stored) = st.stored(&tk, &key) else {
                return Err(target_error(
                    target,
                    &what,
                    &format!("{} {:?} not found", r.kind, r.name),
                    &[],
                ));
            };
            let version = object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            if !version.is_empty() && stored["metadata"]["resourceVersion"] != version {
                return Err(target_error(
                    target,
                    &what,
                    "the object has been modified; please apply your changes to the latest version and try again",
                    &[],
                ));
            }
            let written = st.store(&tk, key, object);
            st.ops.push(TargetOp {
                target: tk,
                write: TargetWrite::Replace,
                resource: ResourceRef::of(&written),
            });
            Ok(written)
        })();
        Box::pin(async move { result })
    }

    fn list<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        api_version: &'a str,
        kind: &'a str,
        labels: &'a str,
    ) -> BoxFut<'a, Result<Vec<Value>, DeployError>> {
        let st = self.lock();
        let found = st.scope_in(target, api_version, kind).map(|_| {
            let group = group_of(api_version);
            st.objects
                .get(&target_key(target))
                .map(|o| {
                    o.iter()
                        .filter(|((g, k, _, _), v)| {
                            g == group && k == kind && labels_match(v, labels)
                        })
                        .map(|(_, v)| v.clone())
                        .collect()
                })
                .unwrap_or_default()
        });
        Box::pin(async move { found })
    }

    fn delete<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        r: &'a ResourceRef,
    ) -> BoxFut<'a, Result<(), DeployError>> {
        let mut st = self.lock();
        let result = st
            .scope_in(target, &r.api_version, &r.kind)
            .map(|namespaced| {
                let key = object_key(&r.api_version, &r.kind, namespaced, &r.namespace, &r.name);
                let tk = target_key(target);
                // Not found is success.
                if let Some(deleted) = st.delete(&tk, &key) {
                    st.ops.push(TargetOp {
                        target: tk,
                        write: TargetWrite::Delete,
                        resource: ResourceRef::of(&deleted),
                    });
                }
            });
        Box::pin(async move { result })
    }
}

// ---------------------------------------------------------------------------------------
// Helm
// ---------------------------------------------------------------------------------------

/// What [`MemoryHelm`] was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub enum HelmCall {
    /// A render (`helmDeployment: false`).
    Render {
        namespace: String,
        release: String,
        values: Value,
    },
    /// An install of a new release.
    Install {
        target: ItemKey,
        namespace: String,
        release: String,
        values: Value,
    },
    /// An upgrade of an existing release.
    Upgrade {
        target: ItemKey,
        namespace: String,
        release: String,
        values: Value,
    },
    /// An uninstall (of a release that may not exist).
    Uninstall {
        target: ItemKey,
        namespace: String,
        release: String,
    },
    /// Pending revisions removed.
    Unblock {
        target: ItemKey,
        namespace: String,
        release: String,
        removed: usize,
    },
}

/// A release: its Target, namespace and name.
type ReleaseKey = (ItemKey, String, String);

struct HelmInner {
    chart_metadata: Value,
    default_values: Value,
    /// The objects a release's chart renders to, by release name.
    rendered: BTreeMap<String, Vec<Value>>,
    /// Each release's revisions, oldest first (at most [`MAX_HISTORY`]).
    releases: BTreeMap<ReleaseKey, Vec<ReleaseState>>,
    /// The objects each release wrote into its target (with [`MemoryHelm::applying_to`]).
    owned: BTreeMap<ReleaseKey, Vec<ObjectKey>>,
    /// Installs and upgrades fail with this message.
    failing: Option<String>,
    charts: Vec<ChartSource>,
    calls: Vec<HelmCall>,
}

impl Default for HelmInner {
    fn default() -> Self {
        HelmInner {
            chart_metadata: json!({"name": "chart", "version": "0.1.0", "appVersion": "1.0.0"}),
            default_values: json!({}),
            rendered: BTreeMap::new(),
            releases: BTreeMap::new(),
            owned: BTreeMap::new(),
            failing: None,
            charts: Vec::new(),
            calls: Vec::new(),
        }
    }
}

/// Charts and Helm releases in memory: every chart source gives the chart the test set
/// ([`MemoryHelm::set_chart`]), rendering gives the objects the test set for the release
/// ([`MemoryHelm::set_rendered`]), and releases keep their revisions (`deployed`,
/// `superseded`, `failed`, pending ones) per Target, namespace and name as Helm does.
/// With [`MemoryHelm::applying_to`] a release's objects are also written into (and
/// removed from) the target clusters. Every call is recorded ([`HelmCall`]). Clones share
/// it.
#[derive(Clone, Default)]
pub struct MemoryHelm {
    inner: Arc<Mutex<HelmInner>>,
    targets: Option<MemoryTargets>,
}

/// A release's manifest: its objects as YAML documents (JSON is YAML).
fn manifest_text(objects: &[Value]) -> String {
    objects.iter().map(|o| format!("---\n{o}\n")).collect()
}

fn hex_md5(bytes: &[u8]) -> String {
    use md5::Digest as _;
    md5::Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl MemoryHelm {
    fn lock(&self) -> MutexGuard<'_, HelmInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases whose objects are written into `targets`, as real releases are.
    pub fn applying_to(targets: &MemoryTargets) -> MemoryHelm {
        MemoryHelm {
            inner: Arc::default(),
            targets: Some(targets.clone()),
        }
    }

    /// The chart every source gives: `Chart.yaml` and `values.yaml`.
    pub fn set_chart(&self, metadata: Value, default_values: Value) {
        let mut st = self.lock();
        st.chart_metadata = metadata;
        st.default_values = default_values;
    }

    /// The objects the chart renders to for `release` (none until set).
    pub fn set_rendered(&self, release: &str, objects: Vec<Value>) {
        self.lock().rendered.insert(release.to_string(), objects);
    }

    /// Installs and upgrades fail with `message` (leaving a `failed` revision), until
    /// called with `None`.
    pub fn fail_deploys(&self, message: Option<&str>) {
        self.lock().failing = message.map(str::to_string);
    }

    /// Adds a revision to a release as another Helm client would (a pending one left by a
    /// crash, …).
    pub fn put_release(&self, target: &ItemKey, name: &str, state: ReleaseState) {
        let key = (target.clone(), state.namespace.clone(), name.to_string());
        self.lock().releases.entry(key).or_default().push(state);
    }

    /// The release's last revision.
    pub fn release_state(
        &self,
        target: &ItemKey,
        namespace: &str,
        name: &str,
    ) -> Option<ReleaseState> {
        self.history(target, namespace, name).pop()
    }

    /// The release's revisions, oldest first.
    pub fn history(&self, target: &ItemKey, namespace: &str, name: &str) -> Vec<ReleaseState> {
        let key = (target.clone(), namespace.to_string(), name.to_string());
        self.lock().releases.get(&key).cloned().unwrap_or_default()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<HelmCall> {
        self.lock().calls.clone()
    }

    /// The chart sources fetched so far, in order.
    pub fn charts(&self) -> Vec<ChartSource> {
        self.lock().charts.clone()
    }
}

impl HelmPort for MemoryHelm {
    fn chart<'a>(
        &'a self,
        source: &'a ChartSource,
        _access: &'a ChartAccess,
    ) -> BoxFut<'a, Result<Arc<Chart>, DeployError>> {
        let mut st = self.lock();
        st.charts.push(source.clone());
        let (archive, digest) = match source {
            ChartSource::Archive(bytes) => (bytes.clone(), hex_md5(bytes)),
            other => (Arc::default(), hex_md5(format!("{other:?}").as_bytes())),
        };
        let chart = Chart {
            archive,
            digest,
            metadata: st.chart_metadata.clone(),
            default_values: st.default_values.clone(),
        };
        Box::pin(async move { Ok(Arc::new(chart)) })
    }

    fn render<'a>(&'a self, run: HelmRun<'a>) -> BoxFut<'a, Result<Vec<Value>, DeployError>> {
        let mut st = self.lock();
        st.calls.push(HelmCall::Render {
            namespace: run.namespace.to_string(),
            release: run.release.to_string(),
            values: run.values.clone(),
        });
        let objects = st.rendered.get(run.release).cloned().unwrap_or_default();
        Box::pin(async move { Ok(objects) })
    }

    fn release<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<Option<ReleaseState>, DeployError>> {
        let found = self.release_state(&target_key(target), namespace, name);
        Box::pin(async move { Ok(found) })
    }

    fn deploy<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        run: HelmRun<'a>,
        upgrade: bool,
    ) -> BoxFut<'a, Result<ReleaseState, DeployError>> {
        Box::pin(async move {
            let tk = target_key(target);
            let key = (
                tk.clone(),
                run.namespace.to_string(),
                run.release.to_string(),
            );
            let action = if upgrade { "upgrade" } else { "install" };
            let fail = |m: &str| {
                DeployError::new(
                    "Reconcile",
                    "Helm",
                    format!(
                        "{}: {action} of release {}: {m}",
                        target.target.describe(),
                        run.release
                    ),
                    &[],
                )
            };
            let (state, objects, before) = {
                let mut st = self.lock();
                let (target, namespace, release, values) = (
                    tk.clone(),
                    run.namespace.to_string(),
                    run.release.to_string(),
                    run.values.clone(),
                );
                st.calls.push(if upgrade {
                    HelmCall::Upgrade {
                        target,
                        namespace,
                        release,
                        values,
                    }
                } else {
                    HelmCall::Install {
                        target,
                        namespace,
                        release,
                        values,
                    }
                });
                let history = st.releases.get(&key).cloned().unwrap_or_default();
                let last = history.last();
                if last.is_some_and(|l| l.status.starts_with("pending-")) {
                    return Err(fail(
                        "another operation (install/upgrade/rollback) is in progress",
                    ));
                }
                let ever_deployed = history
                    .iter()
                    .any(|r| r.status == "deployed" || r.status == "superseded");
                if !upgrade && last.is_some() {
                    return Err(fail("cannot re-use a name that is still in use"));
                }
                if upgrade && !ever_deployed {
                    return Err(fail("has no deployed releases"));
                }
                let objects = st.rendered.get(run.release).cloned().unwrap_or_default();
                let failing = st.failing.clone();
                let state = ReleaseState {
                    namespace: run.namespace.to_string(),
                    revision: last.map_or(1, |l| l.revision + 1),
                    status: if failing.is_some() {
                        "failed"
                    } else {
                        "deployed"
                    }
                    .to_string(),
                    manifest: manifest_text(&objects),
                };
                let revisions = st.releases.entry(key.clone()).or_default();
                if failing.is_none() {
                    for r in revisions.iter_mut().filter(|r| r.status == "deployed") {
                        r.status = "superseded".to_string();
                    }
                }
                revisions.push(state.clone());
                let extra = revisions.len().saturating_sub(MAX_HISTORY as usize);
                revisions.drain(..extra);
                if let Some(m) = failing {
                    return Err(fail(&m));
                }
                let before = st.owned.get(&key).cloned().unwrap_or_default();
                (state, objects, before)
            };
            if let Some(targets) = &self.targets {
                let now = targets.apply_release(
                    &tk,
                    run.namespace,
                    run.create_namespace,
                    &objects,
                    &before,
                );
                self.lock().owned.insert(key, now);
            }
            Ok(state)
        })
    }

    fn uninstall<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
        _wait: bool,
        _timeout: Option<Duration>,
    ) -> BoxFut<'a, Result<(), DeployError>> {
        let tk = target_key(target);
        let key = (tk.clone(), namespace.to_string(), name.to_string());
        let owned = {
            let mut st = self.lock();
            st.calls.push(HelmCall::Uninstall {
                target: tk.clone(),
                namespace: namespace.to_string(),
                release: name.to_string(),
            });
            // A missing release is success.
            st.releases.remove(&key);
            st.owned.remove(&key).unwrap_or_default()
        };
        if let Some(targets) = &self.targets {
            targets.remove_release(&tk, &owned);
        }
        Box::pin(async { Ok(()) })
    }

    fn unblock<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFut<'a, Result<usize, DeployError>> {
        let tk = target_key(target);
        let key = (tk.clone(), namespace.to_string(), name.to_string());
        let mut st = self.lock();
        let mut removed = 0;
        if let Some(revisions) = st.releases.get_mut(&key) {
            let before = revisions.len();
            revisions.retain(|r| !r.status.starts_with("pending-"));
            removed = before - revisions.len();
            if revisions.is_empty() {
                st.releases.remove(&key);
            }
        }
        st.calls.push(HelmCall::Unblock {
            target: tk,
            namespace: namespace.to_string(),
            release: name.to_string(),
            removed,
        });
        Box::pin(async move { Ok(removed) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Target, resolve};

    fn resolved() -> ResolvedTarget {
        let t = Target::parse(&json!({"metadata": {"name": "t", "namespace": "ns"}, "spec": {"type": "x", "config": {}}}))
            .expect("target");
        resolve(&t, None).expect("resolved")
    }

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "a"}})
    }

    #[tokio::test]
    async fn target_objects_behave_as_an_api_server_keeps_them() {
        let (targets, t) = (MemoryTargets::default(), resolved());
        let created = targets.create(&t, cm("x")).await.expect("created");
        assert_eq!(created["metadata"]["generation"], 1);
        assert!(
            targets
                .create_if_absent(&t, cm("x"))
                .await
                .expect("409")
                .is_none(),
            "an existing object is not created again"
        );
        let e = targets.create(&t, cm("x")).await.expect_err("exists");
        assert!(
            !e.is_unrecoverable() && e.message.contains("already exists"),
            "{e}"
        );

        let mut stale = cm("x");
        stale["metadata"]["resourceVersion"] = json!("0");
        let e = targets.replace(&t, stale).await.expect_err("conflict");
        assert!(e.message.contains("modified"), "{e}");

        // A finalizer keeps a deleted object until it is removed.
        let mut held = created.clone();
        held["metadata"]["finalizers"] = json!(["x/y"]);
        let held = targets.replace(&t, held).await.expect("replaced");
        assert_eq!(held["metadata"]["uid"], created["metadata"]["uid"]);
        let r = ResourceRef::of(&held);
        targets.delete(&t, &r).await.expect("deleted");
        let deleting = targets
            .get(&t, &r)
            .await
            .expect("get")
            .expect("still there");
        assert!(!deleting["metadata"]["deletionTimestamp"].is_null());
        let mut released = deleting.clone();
        released["metadata"]["finalizers"] = json!([]);
        targets.put_object(&target_key(&t), released);
        assert!(targets.get(&t, &r).await.expect("get").is_none());
        targets
            .delete(&t, &r)
            .await
            .expect("a missing object is deleted already");

        let writes: Vec<TargetWrite> = targets.ops().into_iter().map(|o| o.write).collect();
        assert_eq!(
            writes,
            [
                TargetWrite::Create,
                TargetWrite::Replace,
                TargetWrite::Delete
            ]
        );
    }

    #[tokio::test]
    async fn discovery_knows_built_in_kinds_and_those_of_crds() {
        let (targets, t) = (MemoryTargets::default(), resolved());
        assert!(
            !targets
                .namespaced(&t, "v1", "Namespace")
                .await
                .expect("known")
        );
        assert!(
            targets
                .namespaced(&t, "example.com/v1", "Widget")
                .await
                .is_err()
        );
        targets
            .create(
                &t,
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com"},
                "spec": {"group": "example.com", "scope": "Cluster", "names": {"kind": "Widget"}}}),
            )
            .await
            .expect("crd");
        assert!(
            !targets
                .namespaced(&t, "example.com/v1", "Widget")
                .await
                .expect("defined")
        );
        let mut bad = cm("y");
        bad["metadata"]["labels"] = json!({"n": 1});
        let e = targets.create(&t, bad).await.expect_err("bad labels");
        assert!(e.is_unrecoverable() && e.message.contains("labels"), "{e}");
    }

    #[test]
    fn a_release_manifest_is_read_as_helm_s() {
        let deployment =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let objects = crate::helm::release_objects(&manifest_text(&[cm("x"), deployment]), "apps");
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].to_string(), "Deployment apps/web");
    }
}
