//! The target clusters of the manifest and helm types ([`TargetClusters`]) in memory.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};

use super::faults::{Armed, Fault};
use crate::item::{ErrorCode, ItemKey};
use crate::manifest::{ResourceRef, TargetClusters};
use crate::ports::BoxFut;
use crate::status::DeployError;
use crate::target::ResolvedTarget;

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
pub(super) type ObjectKey = (String, String, String, String);

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
    /// Calls told to fail ([`MemoryTargets::fail`]).
    faults: Armed<TargetCall>,
    /// Targets that answer nothing ([`MemoryTargets::unreachable`]).
    unreachable: BTreeSet<ItemKey>,
    /// The contents (kubeconfigs) each Target was reached with, distinct, in order.
    contents: BTreeMap<ItemKey, Vec<String>>,
}

/// A call of the deployer to a target cluster that a test can make fail
/// ([`MemoryTargets::fail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TargetCall {
    /// Discovery of a kind's scope.
    Discover,
    /// GET of an object.
    Read,
    /// LIST of a kind.
    List,
    /// POST of an object.
    Create,
    /// PUT of an object.
    Replace,
    /// DELETE of an object.
    Delete,
}

impl TargetsInner {
    /// The fault `call` to `target` meets now: none answers an unreachable target, else
    /// an armed fault, worded and coded as the real port's errors.
    fn fault(
        &mut self,
        target: &ResolvedTarget,
        call: TargetCall,
        verb: &str,
        what: &str,
    ) -> Result<(), DeployError> {
        let seen = self.contents.entry(target_key(target)).or_default();
        if !seen.contains(&target.content) {
            seen.push(target.content.clone());
        }
        let fault = if self.unreachable.contains(&target_key(target)) {
            Some(Fault::Unreachable)
        } else {
            self.faults.take(call)
        };
        match fault {
            None => Ok(()),
            Some(f) => Err(target_error(
                target,
                what,
                &f.message(verb, what),
                f.target_codes(),
            )),
        }
    }

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

    /// A create of `object` (`r`) in `target`, refused by an armed fault; `Ok(None)` when
    /// it exists.
    fn post_faulted(
        &self,
        target: &ResolvedTarget,
        r: &ResourceRef,
        object: Value,
    ) -> Result<Option<Value>, DeployError> {
        let mut st = self.lock();
        st.fault(
            target,
            TargetCall::Create,
            "create",
            &format!("creating {r}"),
        )?;
        st.post(target, object)
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

    /// The next `times` calls of `call` to any target fail with `fault` (`None`: every
    /// call until [`MemoryTargets::heal`]).
    pub fn fail(&self, call: TargetCall, fault: Fault, times: Option<usize>) {
        self.lock().faults.arm(call, fault, times);
    }

    /// `call` answers again.
    pub fn heal(&self, call: TargetCall) {
        self.lock().faults.heal(call);
    }

    /// Whether the cluster of `target` answers nothing (every call refused at the
    /// connection, as a cluster that is down or a wrong address).
    pub fn unreachable(&self, target: &ItemKey, unreachable: bool) {
        let mut st = self.lock();
        if unreachable {
            st.unreachable.insert(target.clone());
        } else {
            st.unreachable.remove(target);
        }
    }

    /// What the deployer reached `target`'s cluster with (its kubeconfig, or the one made
    /// with a service account's token), each distinct one in order.
    pub fn contents(&self, target: &ItemKey) -> Vec<String> {
        self.lock()
            .contents
            .get(target)
            .cloned()
            .unwrap_or_default()
    }

    /// The deployer's writes so far, in order.
    pub fn ops(&self) -> Vec<TargetOp> {
        self.lock().ops.clone()
    }

    /// Writes a release's objects into `target` (a namespaced one without a namespace in
    /// `namespace`) and removes those of `before` it no longer has: what Helm does.
    pub(super) fn apply_release(
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
    pub(super) fn remove_release(&self, target: &ItemKey, objects: &[ObjectKey]) {
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
        let mut st = self.lock();
        let what = format!("discovery of {api_version} {kind}");
        let found = st
            .fault(target, TargetCall::Discover, "get", &what)
            .and_then(|()| st.scope_in(target, api_version, kind));
        Box::pin(async move { found })
    }

    fn get<'a>(
        &'a self,
        target: &'a ResolvedTarget,
        r: &'a ResourceRef,
    ) -> BoxFut<'a, Result<Option<Value>, DeployError>> {
        let mut st = self.lock();
        let found = st
            .fault(target, TargetCall::Read, "get", &format!("reading {r}"))
            .and_then(|()| st.scope_in(target, &r.api_version, &r.kind))
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
        let created = self.post_faulted(target, &r, object);
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
        let r = ResourceRef::of(&object);
        let created = self.post_faulted(target, &r, object);
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
            let what = format!("updating {r}");
            st.fault(target, TargetCall::Replace, "update", &what)?;
            let namespaced = st.scope_in(target, &r.api_version, &r.kind)?;
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
        let mut st = self.lock();
        let what = format!("listing {api_version} {kind}");
        let found = st
            .fault(target, TargetCall::List, "list", &what)
            .and_then(|()| st.scope_in(target, api_version, kind))
            .map(|_| {
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
            .fault(
                target,
                TargetCall::Delete,
                "delete",
                &format!("deleting {r}"),
            )
            .and_then(|()| st.scope_in(target, &r.api_version, &r.kind))
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
}
