//! A cluster in memory ([`MemoryCluster`]: `Cluster` and `Watches`): it keeps objects,
//! versions them, honours finalizers and tells watchers of each change; armed faults
//! ([`Fault`]) refuse the next calls of a verb as an API server would, and a watch can be
//! interrupted and resumed with the relist an informer makes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::faults::{Fault, Faults, Verb};
use super::lock;
use crate::keys::{name_of, namespace_of};
use crate::ports::{BoxFut, Change, Cluster, ClusterError, EventNote, Resource, Watches};

/// Where an object lives: `group/plural`, namespace, name.
type Place = (String, String, String);

fn group_of(resource: &Resource) -> String {
    format!("{}/{}", resource.group, resource.plural)
}

/// `Kind namespace/name`, as errors name an object.
fn describe(resource: &Resource, object: &Value) -> String {
    format!(
        "{} {}/{}",
        resource.kind,
        namespace_of(object),
        name_of(object)
    )
}

fn place(resource: &Resource, namespace: &str, name: &str) -> Place {
    (
        format!("{}/{}", resource.group, resource.plural),
        namespace.to_string(),
        name.to_string(),
    )
}

/// `patch` over `target` (a JSON merge patch: objects merged, the rest replaced).
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// A resource of the fake cluster.
pub fn resource(api_version: &str, plural: &str, kind: &str, namespaced: bool) -> Resource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Resource {
        api_version: api_version.into(),
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        kind: kind.into(),
        namespaced,
        status_subresource: true,
    }
}

/// An Event recorded on an object: its kind, namespace/name, and the note.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedEvent {
    /// `Kind namespace/name`.
    pub on: String,
    /// What was said.
    pub note: EventNote,
}

/// A cluster in memory (see the module docs). Every write takes a new resourceVersion;
/// an update must name the current one; a delete of an object with finalizers marks it
/// deleted and the last finalizer's removal deletes it, as the API server does.
pub struct MemoryCluster {
    resources: Vec<Resource>,
    objects: Mutex<BTreeMap<Place, Arc<Value>>>,
    version: AtomicU64,
    writes: AtomicUsize,
    reads: AtomicUsize,
    counts: bool,
    watchers: Mutex<Vec<(String, UnboundedSender<Change>)>>,
    events: Mutex<Vec<RecordedEvent>>,
    faults: Mutex<Faults>,
    /// Calls by verb and `group/plural`.
    calls: Mutex<HashMap<(Verb, String), usize>>,
    /// Successful creates by place.
    creates: Mutex<HashMap<Place, usize>>,
    /// Interrupted watches by `group/plural`: what their watchers last saw.
    interrupted: Mutex<HashMap<String, BTreeMap<Place, Arc<Value>>>>,
}

impl MemoryCluster {
    /// A cluster serving `resources`.
    pub fn new(resources: Vec<Resource>) -> MemoryCluster {
        MemoryCluster {
            resources,
            objects: Mutex::default(),
            version: AtomicU64::new(100),
            writes: AtomicUsize::new(0),
            reads: AtomicUsize::new(0),
            counts: false,
            watchers: Mutex::default(),
            events: Mutex::default(),
            faults: Mutex::default(),
            calls: Mutex::default(),
            creates: Mutex::default(),
            interrupted: Mutex::default(),
        }
    }

    /// Counts changes as informer caches do (every write is one, whatever the resource),
    /// so that a sync can tell nothing it reads has changed.
    pub fn with_change_counts(mut self) -> MemoryCluster {
        self.counts = true;
        self
    }

    /// Writes so far (creates, updates, deletes).
    pub fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    /// Cache reads so far (parents and claim candidates).
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }

    /// Events recorded so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        lock(&self.events).clone()
    }

    /// One object.
    pub fn object(&self, resource: &Resource, namespace: &str, name: &str) -> Option<Arc<Value>> {
        lock(&self.objects)
            .get(&place(resource, namespace, name))
            .cloned()
    }

    /// Every object of `resource`.
    pub fn objects(&self, resource: &Resource) -> Vec<Arc<Value>> {
        let group = format!("{}/{}", resource.group, resource.plural);
        lock(&self.objects)
            .iter()
            .filter(|((g, _, _), _)| *g == group)
            .map(|(_, o)| Arc::clone(o))
            .collect()
    }

    /// Creates or replaces an object as another client would (no resourceVersion check).
    pub fn put(&self, resource: &Resource, mut object: Value) -> Value {
        let at = place(resource, namespace_of(&object), name_of(&object));
        let old = lock(&self.objects).get(&at).cloned();
        if let Some(old) = &old {
            object["metadata"]["uid"] = old["metadata"]["uid"].clone();
            object["metadata"]["generation"] = old["metadata"]["generation"].clone();
            object["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            self.store(resource, object, false)
                .unwrap_or_else(|e| json!({"error": e.to_string()}))
        } else {
            self.store(resource, object, true)
                .unwrap_or_else(|e| json!({"error": e.to_string()}))
        }
    }

    /// Deletes an object as another client would (finalizers honoured).
    pub fn remove(&self, resource: &Resource, namespace: &str, name: &str) {
        self.delete_at(resource, namespace, name);
    }

    /// The next `times` calls of `verb` on `resource` fail with `fault` (after faults
    /// armed before, in order).
    pub fn refuse(&self, verb: Verb, resource: &Resource, times: usize, fault: Fault) {
        lock(&self.faults).arm(verb, Some(group_of(resource)), times, fault);
    }

    /// The next `times` calls of `verb` on any resource fail with `fault`.
    pub fn refuse_any(&self, verb: Verb, times: usize, fault: Fault) {
        lock(&self.faults).arm(verb, None, times, fault);
    }

    /// Calls refused by an armed fault so far.
    pub fn faults_met(&self) -> usize {
        lock(&self.faults).met()
    }

    /// Armed refusals not met yet.
    pub fn faults_left(&self) -> usize {
        lock(&self.faults).left()
    }

    /// Calls of `verb` on `resource` so far, refused ones included.
    pub fn calls(&self, verb: Verb, resource: &Resource) -> usize {
        lock(&self.calls)
            .get(&(verb, group_of(resource)))
            .copied()
            .unwrap_or(0)
    }

    /// How many times `namespace/name` of `resource` was created (by anyone).
    pub fn created(&self, resource: &Resource, namespace: &str, name: &str) -> usize {
        lock(&self.creates)
            .get(&place(resource, namespace, name))
            .copied()
            .unwrap_or(0)
    }

    /// The watches of `resource` stop telling changes (a dropped connection), until
    /// [`resume_watches`](Self::resume_watches).
    pub fn interrupt_watches(&self, resource: &Resource) {
        let group = group_of(resource);
        let seen: BTreeMap<Place, Arc<Value>> = lock(&self.objects)
            .iter()
            .filter(|((g, _, _), _)| *g == group)
            .map(|(p, o)| (p.clone(), Arc::clone(o)))
            .collect();
        lock(&self.interrupted).insert(group, seen);
    }

    /// The watches of `resource` come back with an informer's relist: what changed while
    /// they were interrupted is told (as an update or a delete), the rest is not.
    pub fn resume_watches(&self, resource: &Resource) {
        let group = group_of(resource);
        let Some(seen) = lock(&self.interrupted).remove(&group) else {
            return;
        };
        let now: BTreeMap<Place, Arc<Value>> = lock(&self.objects)
            .iter()
            .filter(|((g, _, _), _)| *g == group)
            .map(|(p, o)| (p.clone(), Arc::clone(o)))
            .collect();
        for (at, new) in &now {
            let old = seen.get(at).cloned();
            if old.as_ref().is_none_or(|o| {
                o["metadata"]["resourceVersion"] != new["metadata"]["resourceVersion"]
            }) {
                self.notify(
                    resource,
                    Change::Applied {
                        old,
                        new: Arc::clone(new),
                    },
                );
            }
        }
        for (at, old) in seen {
            if !now.contains_key(&at) {
                self.notify(resource, Change::Deleted(old));
            }
        }
    }

    /// Counts a call of `verb` on `resource`; the armed fault it meets, as an error.
    fn check(&self, verb: Verb, resource: &Resource, what: &str) -> Result<(), ClusterError> {
        let group = group_of(resource);
        *lock(&self.calls).entry((verb, group.clone())).or_default() += 1;
        match lock(&self.faults).meet(verb, &group) {
            Some(fault) => Err(fault.error(verb, resource, what)),
            None => Ok(()),
        }
    }

    fn notify(&self, resource: &Resource, change: Change) {
        let group = format!("{}/{}", resource.group, resource.plural);
        if lock(&self.interrupted).contains_key(&group) {
            return;
        }
        lock(&self.watchers).retain(|(g, tx)| *g != group || tx.send(change.clone()).is_ok());
    }

    /// Stores `object` under a new resourceVersion: a create, or an update that must name
    /// the current resourceVersion.
    fn store(
        &self,
        resource: &Resource,
        mut object: Value,
        create: bool,
    ) -> Result<Value, ClusterError> {
        let at = place(resource, namespace_of(&object), name_of(&object));
        let what = format!("{} {}/{}", resource.kind, at.1, at.2);
        let old = {
            let objects = lock(&self.objects);
            let old = objects.get(&at).cloned();
            match (&old, create) {
                (Some(_), true) => return Err(ClusterError::AlreadyExists(what)),
                (None, false) => return Err(ClusterError::NotFound(what)),
                (Some(old), false)
                    if old["metadata"]["resourceVersion"]
                        != object["metadata"]["resourceVersion"] =>
                {
                    return Err(ClusterError::Conflict(what));
                }
                _ => {}
            }
            old
        };
        if create {
            *lock(&self.creates).entry(at.clone()).or_default() += 1;
        }
        let version = self.version.fetch_add(1, Ordering::SeqCst);
        match &old {
            None => {
                // A new uid for each creation, as the API server gives.
                object["metadata"]["uid"] = json!(format!("uid-{}-{}-{version}", at.0, at.2));
                object["metadata"]["generation"] = json!(1);
            }
            Some(old) => {
                let spec_changed = |o: &Value| {
                    let mut o = o.clone();
                    if let Some(m) = o.as_object_mut() {
                        m.remove("metadata");
                        m.remove("status");
                    }
                    o
                };
                let generation = old["metadata"]["generation"].as_u64().unwrap_or(1);
                object["metadata"]["generation"] =
                    json!(if spec_changed(old) == spec_changed(&object) {
                        generation
                    } else {
                        generation + 1
                    });
                object["metadata"]["deletionTimestamp"] =
                    old["metadata"]["deletionTimestamp"].clone();
                if object["metadata"]["deletionTimestamp"].is_null()
                    && let Some(m) = object["metadata"].as_object_mut()
                {
                    m.remove("deletionTimestamp");
                }
            }
        }
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        self.writes.fetch_add(1, Ordering::SeqCst);
        let finalized = !object["metadata"]["deletionTimestamp"].is_null()
            && object["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty);
        let new = Arc::new(object.clone());
        if finalized {
            lock(&self.objects).remove(&at);
            self.notify(resource, Change::Deleted(new));
        } else {
            lock(&self.objects).insert(at, Arc::clone(&new));
            self.notify(resource, Change::Applied { old, new });
        }
        Ok(object)
    }

    fn delete_at(&self, resource: &Resource, namespace: &str, name: &str) {
        let at = place(resource, namespace, name);
        let Some(old) = lock(&self.objects).get(&at).cloned() else {
            return;
        };
        self.writes.fetch_add(1, Ordering::SeqCst);
        let finalizers = old["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if finalizers {
            if old["metadata"]["deletionTimestamp"].is_null() {
                let mut marked = (*old).clone();
                marked["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                let version = self.version.fetch_add(1, Ordering::SeqCst);
                marked["metadata"]["resourceVersion"] = json!(version.to_string());
                let new = Arc::new(marked);
                lock(&self.objects).insert(at, Arc::clone(&new));
                self.notify(
                    resource,
                    Change::Applied {
                        old: Some(old),
                        new,
                    },
                );
            }
        } else {
            lock(&self.objects).remove(&at);
            self.notify(resource, Change::Deleted(old));
        }
    }

    fn find(&self, api_version: &str, plural: &str) -> Option<Resource> {
        self.resources
            .iter()
            .find(|r| r.api_version == api_version && r.plural == plural)
            .cloned()
    }
}

impl Cluster for MemoryCluster {
    fn changes(&self, _: &Resource) -> Option<u64> {
        self.counts.then(|| self.writes() as u64)
    }

    fn resolve(
        &self,
        api_version: &str,
        plural: &str,
    ) -> BoxFut<'_, Result<Resource, ClusterError>> {
        let found = self
            .find(api_version, plural)
            .ok_or_else(|| ClusterError::NotFound(format!("{api_version} {plural}")));
        Box::pin(async move { found })
    }

    fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>> {
        if let Err(e) = self.check(Verb::List, resource, &resource.to_string()) {
            return Box::pin(async move { Err(e) });
        }
        let group = group_of(resource);
        let out = lock(&self.objects)
            .iter()
            .filter(|((g, ns, _), _)| *g == group && namespace.is_none_or(|n| n == ns))
            .map(|(_, o)| Arc::clone(o))
            .collect();
        Box::pin(async move { Ok(out) })
    }

    fn candidates(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        owner_uid: &str,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.check(Verb::List, resource, &resource.to_string()) {
            return Box::pin(async move { Err(e) });
        }
        let group = group_of(resource);
        let out = lock(&self.objects)
            .iter()
            .filter(|((g, ns, _), o)| {
                *g == group
                    && namespace.is_none_or(|n| n == ns)
                    && crate::claim::controller_uid(o).is_none_or(|u| u == owner_uid)
            })
            .map(|(_, o)| Arc::clone(o))
            .collect();
        Box::pin(async move { Ok(out) })
    }

    fn cached(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Arc<Value>>, ClusterError>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let out = self.object(resource, namespace, name);
        Box::pin(async move { Ok(out) })
    }

    fn get(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        if let Err(e) = self.check(
            Verb::Get,
            resource,
            &format!("{} {namespace}/{name}", resource.kind),
        ) {
            return Box::pin(async move { Err(e) });
        }
        let out = self
            .object(resource, namespace, name)
            .map(|o| (*o).clone())
            .ok_or_else(|| ClusterError::NotFound(format!("{} {namespace}/{name}", resource.kind)));
        Box::pin(async move { out })
    }

    fn create(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let out = self
            .check(Verb::Create, resource, &describe(resource, &object))
            .and_then(|()| self.store(resource, object, true));
        Box::pin(async move { out })
    }

    fn replace(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        // The main resource keeps its status when it has a status subresource.
        if let Err(e) = self.check(Verb::Replace, resource, &describe(resource, &object)) {
            return Box::pin(async move { Err(e) });
        }
        let out = match self.object(resource, namespace_of(&object), name_of(&object)) {
            Some(old) if resource.status_subresource => {
                let mut object = object;
                object["status"] = old["status"].clone();
                if object["status"].is_null()
                    && let Some(m) = object.as_object_mut()
                {
                    m.remove("status");
                }
                self.store(resource, object, false)
            }
            _ => self.store(resource, object, false),
        };
        Box::pin(async move { out })
    }

    fn replace_status(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        // Only the status changes.
        if let Err(e) = self.check(
            Verb::ReplaceStatus,
            resource,
            &format!("status of {}", describe(resource, &object)),
        ) {
            return Box::pin(async move { Err(e) });
        }
        let out = match self.object(resource, namespace_of(&object), name_of(&object)) {
            Some(old) => {
                let mut next = (*old).clone();
                next["status"] = object["status"].clone();
                next["metadata"]["resourceVersion"] = object["metadata"]["resourceVersion"].clone();
                self.store(resource, next, false)
            }
            None => Err(ClusterError::NotFound(name_of(&object).to_string())),
        };
        Box::pin(async move { out })
    }

    fn apply(
        &self,
        resource: &Resource,
        object: Value,
        dry_run: bool,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        // Server-side apply, simplified: the applied fields over the live object.
        if let Err(e) = self.check(Verb::Apply, resource, &describe(resource, &object)) {
            return Box::pin(async move { Err(e) });
        }
        let out = match self.object(resource, namespace_of(&object), name_of(&object)) {
            Some(old) => {
                let mut next = (*old).clone();
                merge(&mut next, &object);
                next["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                if dry_run {
                    Ok(next)
                } else {
                    self.store(resource, next, false)
                }
            }
            None if dry_run => Ok(object),
            None => self.store(resource, object, true),
        };
        Box::pin(async move { out })
    }

    fn delete(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> BoxFut<'_, Result<(), ClusterError>> {
        match self.check(
            Verb::Delete,
            resource,
            &format!("{} {namespace}/{name}", resource.kind),
        ) {
            Ok(()) | Err(ClusterError::NotFound(_)) => {}
            Err(e) => return Box::pin(async move { Err(e) }),
        }
        let matches = self
            .object(resource, namespace, name)
            .is_some_and(|o| o["metadata"]["uid"].as_str() == Some(uid));
        if matches {
            self.delete_at(resource, namespace, name);
        }
        Box::pin(async { Ok(()) })
    }

    fn event(&self, object: &Value, note: EventNote) -> BoxFut<'_, ()> {
        let on = format!(
            "{} {}/{}",
            object["kind"].as_str().unwrap_or_default(),
            namespace_of(object),
            name_of(object)
        );
        lock(&self.events).push(RecordedEvent { on, note });
        Box::pin(async {})
    }
}

impl Watches for MemoryCluster {
    fn watch(
        &self,
        resource: &Resource,
    ) -> BoxFut<'_, Result<UnboundedReceiver<Change>, ClusterError>> {
        if let Err(e) = self.check(Verb::Watch, resource, &resource.to_string()) {
            return Box::pin(async move { Err(e) });
        }
        let (tx, rx) = unbounded_channel();
        lock(&self.watchers).push((group_of(resource), tx));
        Box::pin(async move { Ok(rx) })
    }
}
