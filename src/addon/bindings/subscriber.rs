//! What listens to shared watches: a binding's subscriber (filter, checksum, snapshot,
//! events held until Synchronization) and the follower of a binding's namespaces when they
//! are chosen by labels.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bosun_addon::bindings::{BindingEvent, HookRef};
use bosun_addon::context_stub::SharedJson;
use bosun_addon::hook_config::{KubernetesBinding, WatchEvent};
use bosun_addon::ports::BindingEvents;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use bosun_kube::watch::{AttachError, Change, Listener, ObjectKey, SharedWatch, Stored};

use super::{BindingWatches, lock};
use crate::jq::JqFilter;

struct Entry {
    object: Option<Stored>,
    /// The filter's result as the text its checksum was taken of.
    filter_result: Option<SharedJson>,
    checksum: [u8; 16],
    /// JSON bytes kept: the object (when kept) and the filter result.
    size: usize,
}

#[derive(Default)]
struct SubState {
    cache: BTreeMap<ObjectKey, Entry>,
    /// Sum of the entries' sizes.
    bytes: usize,
    released: bool,
    held: Vec<BindingEvent>,
}

impl SubState {
    fn insert(&mut self, key: ObjectKey, entry: Entry) {
        self.bytes += entry.size;
        if let Some(old) = self.cache.insert(key, entry) {
            self.bytes -= old.size;
        }
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<Entry> {
        let old = self.cache.remove(key)?;
        self.bytes -= old.size;
        Some(old)
    }
}

/// A binding's metrics, registered once.
struct BindingMetrics {
    objects: metrics::Gauge,
    bytes: metrics::Gauge,
    jq: metrics::Histogram,
    event: metrics::Histogram,
}

impl BindingMetrics {
    fn new(hook: &HookRef, b: &KubernetesBinding) -> BindingMetrics {
        use bosun_addon::telemetry as names;
        let module = hook
            .owner
            .strip_prefix("module/")
            .unwrap_or_default()
            .to_string();
        let labels = vec![
            metrics::Label::new("module", module),
            metrics::Label::new("hook", hook.hook.to_string()),
            metrics::Label::new("binding", b.name.clone()),
            metrics::Label::new("queue", b.queue.clone()),
        ];
        let mut with_kind = labels.clone();
        with_kind.push(metrics::Label::new("kind", b.kind.clone()));
        BindingMetrics {
            objects: metrics::gauge!(names::KUBE_SNAPSHOT_OBJECTS, labels.clone()),
            bytes: metrics::gauge!(names::KUBE_SNAPSHOT_BYTES, labels),
            jq: metrics::histogram!(names::KUBE_JQ_FILTER_DURATION_SECONDS, with_kind.clone()),
            event: metrics::histogram!(names::KUBE_EVENT_DURATION_SECONDS, with_kind),
        }
    }

    fn snapshot(&self, st: &SubState) {
        self.objects.set(st.cache.len() as f64);
        self.bytes.set(st.bytes as f64);
    }
}

/// One kubernetes binding of one hook.
pub(crate) struct Subscriber {
    hook: HookRef,
    index: usize,
    binding: String,
    filter: Option<Arc<JqFilter>>,
    keep_objects: bool,
    on_events: Vec<WatchEvent>,
    names: Vec<String>,
    events: BindingEvents,
    st: Mutex<SubState>,
    watches: Mutex<Vec<Arc<SharedWatch>>>,
    /// Set once the binding has started: objects arriving later are events, not the
    /// initial snapshot.
    live: AtomicBool,
    metrics: BindingMetrics,
}

impl Subscriber {
    pub(crate) fn new(
        hook: HookRef,
        index: usize,
        b: &KubernetesBinding,
        filter: Option<Arc<JqFilter>>,
        events: BindingEvents,
    ) -> Subscriber {
        let metrics = BindingMetrics::new(&hook, b);
        Subscriber {
            hook,
            index,
            binding: b.name.clone(),
            filter,
            keep_objects: b.keep_full_objects_in_memory,
            on_events: b.execute_hook_on_event.clone(),
            names: b.name_selector.clone(),
            events,
            st: Mutex::new(SubState::default()),
            watches: Mutex::new(Vec::new()),
            live: AtomicBool::new(false),
            metrics,
        }
    }

    pub(crate) fn attached(&self, w: Arc<SharedWatch>) {
        lock(&self.watches).push(w);
    }

    /// The binding's name.
    pub(crate) fn binding(&self) -> &str {
        &self.binding
    }

    pub(crate) fn go_live(&self) {
        self.live.store(true, Ordering::SeqCst);
    }

    /// Runs the filter, timed.
    /// Runs the filter on the object (parsed already for an event, or its text: a list's
    /// objects are read straight into the filter's values), timed.
    fn run_filter(
        &self,
        f: &JqFilter,
        object: Option<&Arc<Value>>,
        text: &str,
    ) -> Result<Value, crate::jq::JqError> {
        let started = std::time::Instant::now();
        let r = match object {
            Some(object) => f.run_shared(object),
            None => f.run_text(text),
        };
        self.metrics.jq.record(started.elapsed().as_secs_f64());
        r
    }

    /// The filter result (when there is a filter) as its compact text, the checksum that
    /// decides whether a change is an event (of that text, or of the object's `text`) and
    /// the result's JSON size; `None` when the filter fails on this object.
    fn evaluate(
        &self,
        key: &ObjectKey,
        object: Option<&Arc<Value>>,
        text: &str,
    ) -> Option<(Option<SharedJson>, [u8; 16], usize)> {
        use md5::Digest;
        let result = match &self.filter {
            Some(f) => match self.run_filter(f, object, text) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(hook = %self.hook.hook, binding = %self.binding, "jqFilter failed on {}/{}: {e}",
                        key.0, key.1);
                    return None;
                }
            },
            None => None,
        };
        Some(match result {
            Some(r) => {
                let result: Arc<str> = Arc::from(r.to_string());
                let sum = md5::Md5::digest(result.as_bytes()).into();
                let size = result.len();
                (Some(SharedJson::from_text(result)), sum, size)
            }
            None => (None, md5::Md5::digest(text.as_bytes()).into(), 0),
        })
    }

    /// An event of this binding, queued or held until its Synchronization ran. `object`
    /// gives the object's text, taken only when the binding keeps objects.
    fn emit(
        &self,
        st: &mut SubState,
        change: Change,
        object: impl FnOnce() -> SharedJson,
        filter_result: Option<SharedJson>,
    ) {
        let kind = match change {
            Change::Added => WatchEvent::Added,
            Change::Modified => WatchEvent::Modified,
            Change::Deleted => WatchEvent::Deleted,
        };
        if !self.on_events.contains(&kind) {
            return;
        }
        let event = BindingEvent {
            hook: self.hook.clone(),
            index: self.index,
            watch_event: kind,
            object: self.keep_objects.then(object),
            filter_result: self
                .filter
                .is_some()
                .then(|| filter_result.unwrap_or_else(|| SharedJson::new(&Value::Null))),
        };
        if st.released {
            (self.events)(event);
        } else {
            st.held.push(event);
        }
    }

    /// Delivers the events held back until the binding's Synchronization ran.
    pub(crate) fn release(&self) {
        let mut st = lock(&self.st);
        st.released = true;
        for event in std::mem::take(&mut st.held) {
            (self.events)(event);
        }
    }

    /// `[{object?, filterResult?}]`, sorted by namespace then name.
    pub(crate) fn snapshot(&self) -> Vec<Value> {
        lock(&self.st)
            .cache
            .values()
            .map(|e| {
                let mut item = json!({});
                if let Some(o) = &e.object {
                    item["object"] = o.parse();
                }
                if self.filter.is_some() {
                    item["filterResult"] = e
                        .filter_result
                        .as_ref()
                        .map_or(Value::Null, SharedJson::to_value);
                }
                item
            })
            .collect()
    }

    fn upsert(
        &self,
        st: &mut SubState,
        change: Change,
        key: &ObjectKey,
        value: Option<&Arc<Value>>,
        stored: &Stored,
        announce: bool,
    ) {
        if !self.names.is_empty() && !self.names.iter().any(|n| **n == *key.1) {
            return;
        }
        let Some((result, sum, result_size)) = self.evaluate(key, value, &stored.text()) else {
            return;
        };
        let unchanged = st.cache.get(key).is_some_and(|e| e.checksum == sum);
        let object = self.keep_objects.then(|| stored.clone());
        let entry = Entry {
            size: result_size + object.as_ref().map_or(0, Stored::json_len),
            object,
            filter_result: result.clone(),
            checksum: sum,
        };
        st.insert(key.clone(), entry);
        if announce && !unchanged {
            self.emit(st, change, || SharedJson::from_text(stored.text()), result);
        }
    }
}

impl Listener for Subscriber {
    fn init(&self, _namespace: &Option<String>, objects: &BTreeMap<ObjectKey, Stored>) {
        let announce = self.live.load(Ordering::SeqCst);
        let mut st = lock(&self.st);
        for (k, o) in objects {
            if !self.names.is_empty() && !self.names.iter().any(|n| **n == *k.1) {
                continue;
            }
            self.upsert(&mut st, Change::Added, k, None, o, announce);
        }
        self.metrics.snapshot(&st);
    }

    fn on(&self, change: Change, key: &ObjectKey, object: &Arc<Value>, stored: &Stored) {
        let started = std::time::Instant::now();
        let mut st = lock(&self.st);
        match change {
            Change::Deleted => {
                if !self.names.is_empty() && !self.names.iter().any(|n| **n == *key.1) {
                    return;
                }
                let prev = st.remove(key);
                let result = match prev {
                    Some(e) => e.filter_result,
                    None => self
                        .evaluate(key, Some(object), &stored.text())
                        .and_then(|(r, ..)| r),
                };
                self.emit(
                    &mut st,
                    Change::Deleted,
                    || SharedJson::from_text(stored.text()),
                    result,
                );
            }
            c => self.upsert(&mut st, c, key, Some(object), stored, true),
        }
        self.metrics.snapshot(&st);
        drop(st);
        self.metrics.event.record(started.elapsed().as_secs_f64());
    }

    fn detached(&self, namespace: Option<&str>) -> Vec<Arc<SharedWatch>> {
        let mut watches = lock(&self.watches);
        let (gone, kept): (Vec<_>, Vec<_>) = watches
            .drain(..)
            .partition(|w| namespace.is_none() || w.namespace() == namespace);
        *watches = kept;
        if let Some(ns) = namespace {
            // The namespace left the selection: its objects leave the snapshot.
            let mut st = lock(&self.st);
            let keys: Vec<ObjectKey> = st.cache.keys().filter(|k| *k.0 == *ns).cloned().collect();
            for k in keys {
                if let Some(e) = st.remove(&k) {
                    let object = || match &e.object {
                        Some(o) => SharedJson::from_text(o.text()),
                        None => {
                            SharedJson::new(&json!({"metadata": {"namespace": k.0, "name": k.1}}))
                        }
                    };
                    self.emit(&mut st, Change::Deleted, object, e.filter_result.clone());
                }
            }
            self.metrics.snapshot(&st);
        }
        gone
    }
}

/// Follows the namespaces a binding's `namespace.labelSelector` selects: each one that
/// starts matching gets a watch of the bound kind, each one that stops loses it.
pub(crate) struct NamespaceFollower {
    manager: BindingWatches,
    sub: Arc<Subscriber>,
    resource: ApiResource,
    labels: String,
    fields: String,
    namespaces: Mutex<BTreeSet<String>>,
    watches: Mutex<Vec<Arc<SharedWatch>>>,
    live: AtomicBool,
    stopped: Arc<AtomicBool>,
}

impl NamespaceFollower {
    pub(crate) fn new(
        manager: BindingWatches,
        sub: Arc<Subscriber>,
        resource: ApiResource,
        labels: String,
        fields: String,
    ) -> NamespaceFollower {
        NamespaceFollower {
            manager,
            sub,
            resource,
            labels,
            fields,
            namespaces: Mutex::new(BTreeSet::new()),
            watches: Mutex::new(Vec::new()),
            live: AtomicBool::new(false),
            stopped: Arc::new(AtomicBool::new(false)),
        }
    }

    pub(crate) fn attached(&self, w: Arc<SharedWatch>) {
        lock(&self.watches).push(w);
    }

    /// Watches the namespaces matching now; later ones are followed as they come.
    pub(crate) async fn initial_namespaces(&self) -> Result<(), AttachError> {
        let names: Vec<String> = lock(&self.namespaces).iter().cloned().collect();
        for ns in names {
            self.manager
                .attach_namespace(&self.sub, &self.resource, &ns, &self.labels, &self.fields)
                .await?;
        }
        self.live.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl Listener for NamespaceFollower {
    fn init(&self, _namespace: &Option<String>, objects: &BTreeMap<ObjectKey, Stored>) {
        lock(&self.namespaces).extend(objects.keys().map(|k| k.1.to_string()));
    }

    fn on(&self, change: Change, key: &ObjectKey, _object: &Arc<Value>, _stored: &Stored) {
        let ns = key.1.to_string();
        match change {
            Change::Added | Change::Modified => {
                if !lock(&self.namespaces).insert(ns.clone()) || !self.live.load(Ordering::SeqCst) {
                    return;
                }
                let (manager, sub, resource) = (
                    self.manager.clone(),
                    self.sub.clone(),
                    self.resource.clone(),
                );
                let (labels, fields, stopped) = (
                    self.labels.clone(),
                    self.fields.clone(),
                    self.stopped.clone(),
                );
                tokio::spawn(async move {
                    if stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Err(e) = manager
                        .attach_namespace(&sub, &resource, &ns, &labels, &fields)
                        .await
                    {
                        tracing::warn!(namespace = %ns, "cannot watch a newly selected namespace: {e}");
                    }
                });
            }
            Change::Deleted => {
                if lock(&self.namespaces).remove(&ns) {
                    self.manager.detach_namespace(&self.sub, &ns);
                }
            }
        }
    }

    fn detached(&self, namespace: Option<&str>) -> Vec<Arc<SharedWatch>> {
        if namespace.is_none() {
            self.stopped.store(true, Ordering::SeqCst);
        }
        std::mem::take(&mut *lock(&self.watches))
    }
}
