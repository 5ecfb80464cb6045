//! Kubernetes bindings over objects the test puts and deletes, with the subscriber's rules
//! of the real adapter (`src/addon/bindings`): a binding selects objects by kind, name,
//! namespace (names or labels) and labels; keeps `{object?, filterResult?}` per object;
//! announces Added, Modified (only when the filter result, or the object without a filter,
//! changed) and Deleted; holds its events until its Synchronization ran.
//!
//! ```text
//!   put / delete / replace_all ──► objects by (kind, namespace, name)
//!        └──► every started binding recomputes its selection ──► diff with its cache
//!                  ──► Added / Modified / Deleted ──► held until released, then the hook
//! ```
//!
//! Filters: `.`, dotted paths (`.metadata.labels`) and programs registered with
//! [`MemoryBindings::filter`]; any other program is refused by `check_filter`. Faults: a
//! watch that fails to start, a watch that breaks (events stop) and resumes with a relist,
//! a restart of the API server whose relist shows a different world.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::{Faults, lock};
use crate::bindings::{BindingEvent, BindingEvents, HookRef};
use crate::context_stub::SharedJson;
use crate::hook_config::{InvalidFilter, KubernetesBinding, WatchEvent};
use crate::ports::{BoxFut, KubeBindings, PortError};

type Filter = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// Namespace and name of an object.
type Key = (String, String);

/// What a binding holds of one object.
#[derive(Clone)]
struct Entry {
    object: Value,
    filter_result: Option<Value>,
    checksum: String,
}

struct Binding {
    config: KubernetesBinding,
    cache: BTreeMap<Key, Entry>,
    released: bool,
    held: Vec<BindingEvent>,
}

/// One hook's kubernetes bindings.
struct Started {
    hook: HookRef,
    bindings: Vec<Binding>,
    events: BindingEvents,
}

#[derive(Default)]
struct Watched {
    /// Objects by kind (lower case), namespace and name.
    objects: BTreeMap<(String, String, String), Value>,
    started: Vec<Started>,
    filters: HashMap<String, Filter>,
    /// Kinds whose watch is broken: their bindings see nothing until it resumes.
    broken: BTreeSet<String>,
    start_faults: Faults,
}

/// Kubernetes bindings over objects the test adds, changes and deletes.
#[derive(Clone, Default)]
pub struct MemoryBindings {
    inner: Arc<Mutex<Watched>>,
}

/// The kind a binding's `kind` names: its kind, plural or short name, in lower case.
fn kind_of(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let short = match lower.as_str() {
        "po" | "pods" => "pod",
        "cm" | "configmaps" => "configmap",
        "ns" | "namespaces" => "namespace",
        "no" | "nodes" => "node",
        "svc" | "services" => "service",
        "deploy" | "deployments" => "deployment",
        "secrets" => "secret",
        other => other,
    };
    short.to_string()
}

/// Whether `labels` match a `metav1.LabelSelector` (`matchLabels`, `matchExpressions`).
fn labels_match(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels[k].as_str().map(String::from);
    let match_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k).as_deref() == v.as_str());
    let expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str().unwrap_or_default() {
                "In" => label(key).is_some_and(|v| values.contains(&v.as_str())),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v.as_str())),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                _ => false,
            }
        });
    match_labels && expressions
}

/// The value at a dotted field path (`metadata.name`), as text.
fn field(object: &Value, path: &str) -> String {
    let v = path
        .split('.')
        .filter(|s| !s.is_empty())
        .fold(object, |v, k| &v[k]);
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A dotted path program (`.`, `.a.b`), if it is one.
fn path_program(program: &str) -> Option<Vec<String>> {
    let p = program.trim();
    if p == "." {
        return Some(Vec::new());
    }
    let rest = p.strip_prefix('.')?;
    let parts: Vec<String> = rest.split('.').map(String::from).collect();
    parts
        .iter()
        .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(parts)
}

impl Watched {
    fn filter(&self, program: &str) -> Option<Filter> {
        if let Some(f) = self.filters.get(program) {
            return Some(f.clone());
        }
        let parts = path_program(program)?;
        Some(Arc::new(move |o: &Value| {
            parts.iter().fold(o, |v, k| &v[k.as_str()]).clone()
        }))
    }

    fn namespace_selected(&self, b: &KubernetesBinding, namespace: &str) -> bool {
        let Some(sel) = &b.namespace else {
            return true;
        };
        if !sel.match_names.is_empty() && !sel.match_names.iter().any(|n| n == namespace) {
            return false;
        }
        match &sel.label_selector {
            None => true,
            Some(selector) => self
                .objects
                .get(&("namespace".into(), String::new(), namespace.to_string()))
                .is_some_and(|ns| labels_match(selector, &ns["metadata"]["labels"])),
        }
    }

    /// The objects `b` selects now, with what it keeps of each.
    fn select(&self, b: &KubernetesBinding) -> BTreeMap<Key, Entry> {
        let kind = kind_of(&b.kind);
        let filter = b.jq_filter.as_deref().and_then(|p| self.filter(p));
        self.objects
            .iter()
            .filter(|((k, ns, name), o)| {
                *k == kind
                    && (b.name_selector.is_empty() || b.name_selector.iter().any(|n| n == name))
                    && self.namespace_selected(b, ns)
                    && b.label_selector
                        .as_ref()
                        .is_none_or(|s| labels_match(s, &o["metadata"]["labels"]))
                    && b.field_selector
                        .iter()
                        .all(|r| (field(o, &r.field) == r.value) == r.equal)
            })
            .map(|((_, ns, name), o)| {
                let filter_result = filter.as_ref().map(|f| f(o));
                let checksum = match &filter_result {
                    Some(r) => r.to_string(),
                    None => o.to_string(),
                };
                (
                    (ns.clone(), name.clone()),
                    Entry {
                        object: o.clone(),
                        filter_result,
                        checksum,
                    },
                )
            })
            .collect()
    }

    /// Recomputes every binding (of kinds whose watch is not broken) and returns the
    /// events to deliver now; events of bindings not yet released are held.
    fn refresh(&mut self) -> Vec<(BindingEvents, BindingEvent)> {
        let mut out = Vec::new();
        let mut started = std::mem::take(&mut self.started);
        for s in &mut started {
            for (index, b) in s.bindings.iter_mut().enumerate() {
                if self.broken.contains(&kind_of(&b.config.kind)) {
                    continue;
                }
                let now = self.select(&b.config);
                let mut changes = Vec::new();
                for (key, old) in &b.cache {
                    if !now.contains_key(key) {
                        changes.push((WatchEvent::Deleted, old.clone()));
                    }
                }
                for (key, new) in &now {
                    match b.cache.get(key) {
                        None => changes.push((WatchEvent::Added, new.clone())),
                        Some(old) if old.checksum != new.checksum => {
                            changes.push((WatchEvent::Modified, new.clone()))
                        }
                        Some(_) => {}
                    }
                }
                b.cache = now;
                for (event, entry) in changes {
                    if !b.config.execute_hook_on_event.contains(&event) {
                        continue;
                    }
                    let e = BindingEvent {
                        hook: s.hook.clone(),
                        index,
                        watch_event: event,
                        object: b
                            .config
                            .keep_full_objects_in_memory
                            .then(|| SharedJson::new(&entry.object)),
                        filter_result: b.config.jq_filter.is_some().then(|| {
                            SharedJson::new(entry.filter_result.as_ref().unwrap_or(&Value::Null))
                        }),
                    };
                    if b.released {
                        out.push((Arc::clone(&s.events), e));
                    } else {
                        b.held.push(e);
                    }
                }
            }
        }
        self.started = started;
        out
    }
}

impl MemoryBindings {
    /// Adds or changes an object of `kind`.
    pub fn put(&self, kind: &str, object: Value) {
        let key = (
            kind_of(kind),
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        self.change(|w| {
            w.objects.insert(key, object);
        });
    }

    /// Deletes an object of `kind`.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) {
        let key = (kind_of(kind), namespace.to_string(), name.to_string());
        self.change(|w| {
            w.objects.remove(&key);
        });
    }

    /// What a relist after an API server restart shows: the objects of `kind` are exactly
    /// `objects` (those gone are Deleted, new ones Added, changed ones Modified).
    pub fn replace_all(&self, kind: &str, objects: Vec<Value>) {
        let kind = kind_of(kind);
        self.change(|w| {
            w.objects.retain(|(k, _, _), _| *k != kind);
            for o in objects {
                let key = (
                    kind.clone(),
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
                w.objects.insert(key, o);
            }
        });
    }

    /// The watch of `kind` breaks: changes to its objects reach no binding (nor their
    /// snapshots) until [`MemoryBindings::resume_watch`].
    pub fn break_watch(&self, kind: &str) {
        lock(&self.inner).broken.insert(kind_of(kind));
    }

    /// The watch of `kind` is back: a relist brings every binding up to date, as events.
    pub fn resume_watch(&self, kind: &str) {
        let kind = kind_of(kind);
        self.change(|w| {
            w.broken.remove(&kind);
        });
    }

    /// The next `times` starts of bindings watching `kind` fail with `error` (a kind the
    /// API server does not serve, a forbidden list).
    pub fn fail_start(&self, kind: &str, times: u32, error: PortError) {
        lock(&self.inner)
            .start_faults
            .set(&kind_of(kind), times, error);
    }

    /// `program` evaluates to what `f` returns (for filters beyond dotted paths).
    pub fn filter(&self, program: &str, f: impl Fn(&Value) -> Value + Send + Sync + 'static) {
        lock(&self.inner)
            .filters
            .insert(program.to_string(), Arc::new(f));
    }

    /// Hooks whose bindings run now (`owner/hook`).
    pub fn started(&self) -> Vec<String> {
        lock(&self.inner)
            .started
            .iter()
            .map(|s| format!("{}/{}", s.hook.owner, s.hook.hook))
            .collect()
    }

    fn change(&self, f: impl FnOnce(&mut Watched)) {
        // Computed under the lock, delivered after it: the engine may ask for snapshots.
        let deliveries = {
            let mut w = lock(&self.inner);
            f(&mut w);
            w.refresh()
        };
        for (events, e) in deliveries {
            events(e);
        }
    }
}

impl KubeBindings for MemoryBindings {
    fn start(
        &self,
        hook: HookRef,
        bindings: Vec<KubernetesBinding>,
        events: BindingEvents,
    ) -> BoxFut<'_, Result<(), PortError>> {
        let result = {
            let mut w = lock(&self.inner);
            let fault = bindings.iter().find_map(|b| {
                w.start_faults
                    .take(&kind_of(&b.kind))
                    .map(|e| e.context(format_args!("binding {:?}", b.name)))
            });
            match fault {
                Some(e) => Err(e),
                None => {
                    w.started.retain(|s| s.hook != hook);
                    let bindings = bindings
                        .into_iter()
                        .map(|config| Binding {
                            cache: w.select(&config),
                            config,
                            released: false,
                            held: Vec::new(),
                        })
                        .collect();
                    w.started.push(Started {
                        hook,
                        bindings,
                        events,
                    });
                    Ok(())
                }
            }
        };
        Box::pin(async move { result })
    }

    fn release(&self, hook: &HookRef, index: usize) {
        let deliveries: Vec<(BindingEvents, BindingEvent)> = {
            let mut w = lock(&self.inner);
            let Some(s) = w.started.iter_mut().find(|s| s.hook == *hook) else {
                return;
            };
            let events = Arc::clone(&s.events);
            s.bindings
                .iter_mut()
                .skip(index)
                .take(1)
                .flat_map(|b| {
                    b.released = true;
                    std::mem::take(&mut b.held)
                })
                .map(|e| (Arc::clone(&events), e))
                .collect()
        };
        for (events, e) in deliveries {
            events(e);
        }
    }

    fn snapshot(&self, hook: &HookRef, index: usize) -> Vec<Value> {
        let w = lock(&self.inner);
        let Some(b) = w
            .started
            .iter()
            .find(|s| s.hook == *hook)
            .and_then(|s| s.bindings.get(index))
        else {
            return Vec::new();
        };
        snapshot_of(b)
    }

    fn stop_owner(&self, owner: &str) {
        lock(&self.inner)
            .started
            .retain(|s| *s.hook.owner != *owner);
    }

    fn check_filter(&self, program: &str) -> Result<(), InvalidFilter> {
        match lock(&self.inner).filter(program) {
            Some(_) => Ok(()),
            None => Err(InvalidFilter(format!(
                "cannot compile {program:?}: the in-memory bindings know dotted paths and \
                 programs registered with MemoryBindings::filter"
            ))),
        }
    }

    fn snapshots(&self, owner: &str) -> Value {
        let w = lock(&self.inner);
        let mut out = serde_json::Map::new();
        for s in w.started.iter().filter(|s| *s.hook.owner == *owner) {
            let mut hook = serde_json::Map::new();
            for b in &s.bindings {
                hook.insert(b.config.name.clone(), Value::Array(snapshot_of(b)));
            }
            out.insert(s.hook.hook.to_string(), Value::Object(hook));
        }
        Value::Object(out)
    }
}

/// `[{object?, filterResult?}]`, sorted by namespace then name.
fn snapshot_of(b: &Binding) -> Vec<Value> {
    b.cache
        .values()
        .map(|e| {
            let mut item = json!({});
            if b.config.keep_full_objects_in_memory {
                item["object"] = e.object.clone();
            }
            if b.config.jq_filter.is_some() {
                item["filterResult"] = e.filter_result.clone().unwrap_or(Value::Null);
            }
            item
        })
        .collect()
}
