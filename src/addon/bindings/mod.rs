//! The addon's kubernetes bindings on the shared watches: each binding of a hook is a
//! [`Subscriber`] (jq filter, checksum, snapshot, events held until its Synchronization
//! ran) attached to the host's shared watches (`bosun_kube::watch`), and, for namespaces
//! chosen by labels, a [`NamespaceFollower`] that attaches it to each matching namespace.
//!
//! ```text
//!   binding (hook, index) ──► Subscriber ──attached to──► SharedWatch (resource, namespace,
//!        ▲  jq filter, checksum, cache                     label/field selectors)
//!        └── snapshot() when a hook starts                  shared with lambda, deployer
//! ```
//!
//! A subscriber turns each watch event into a binding context: Modified (and Added for an
//! object it already holds) only when the checksum of the filter result (or of the object,
//! without a filter) changed. Events are held back until the binding's Synchronization ran
//! (`release`).

mod subscriber;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use bosun_addon::bindings::HookRef;
use bosun_addon::hook_config::{self, KubernetesBinding};
use bosun_addon::ports::{BindingEvents, BoxFut, KubeBindings, PortError};
use bosun_kube::watch::{AttachError, Listener, WatchKey, WatchManager, label_selector_string};
use kube::discovery::ApiResource;
use serde_json::Value;

use subscriber::{NamespaceFollower, Subscriber};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Inner {
    hooks: Mutex<BTreeMap<HookRef, Vec<Arc<dyn Listener>>>>,
    subscribers: Mutex<BTreeMap<(HookRef, usize), Arc<Subscriber>>>,
}

/// The kubernetes bindings of every hook (the actors' [`KubeBindings`] port), on the
/// host's shared watches.
#[derive(Clone)]
pub struct BindingWatches {
    watches: WatchManager,
    inner: Arc<Inner>,
}

impl BindingWatches {
    /// Bindings on the shared watches of `watches`.
    pub fn new(watches: WatchManager) -> BindingWatches {
        BindingWatches {
            watches,
            inner: Arc::new(Inner {
                hooks: Mutex::new(BTreeMap::new()),
                subscribers: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    async fn start_binding(
        &self,
        hook: &HookRef,
        index: usize,
        b: &KubernetesBinding,
        events: BindingEvents,
    ) -> Result<Vec<Arc<dyn Listener>>, PortError> {
        let resolved = self
            .watches
            .resolver()
            .resolve(b.api_version.as_deref(), &b.kind)
            .await
            .map_err(|e| PortError::transient(format!("binding {:?}: {e}", b.name)))?;
        let filter = match &b.jq_filter {
            Some(p) => Some(Arc::new(crate::jq::JqFilter::compile(p).map_err(|e| {
                PortError::permanent(format!("binding {:?}: jqFilter: {e}", b.name))
            })?)),
            None => None,
        };
        let labels = b
            .label_selector
            .as_ref()
            .map(label_selector_string)
            .unwrap_or_default();
        let mut fields: Vec<String> = b
            .field_selector
            .iter()
            .map(|r| format!("{}{}{}", r.field, if r.equal { "=" } else { "!=" }, r.value))
            .collect();
        if b.name_selector.len() == 1 {
            fields.push(format!("metadata.name={}", b.name_selector[0]));
        }
        let fields = fields.join(",");
        let sub = Arc::new(Subscriber::new(hook.clone(), index, b, filter, events));
        let as_listener: Arc<dyn Listener> = sub.clone();
        let resource = resolved.resource;
        let namespaces: Option<Vec<String>> = match &b.namespace {
            Some(ns) if resolved.namespaced && !ns.match_names.is_empty() => {
                Some(ns.match_names.clone())
            }
            _ => None,
        };
        let mut listeners = vec![as_listener.clone()];
        match (
            namespaces,
            b.namespace.as_ref().and_then(|n| n.label_selector.clone()),
        ) {
            (Some(names), _) => {
                for ns in names {
                    let w = self.watches.watch(
                        WatchKey::new(&resource, Some(ns), labels.clone(), fields.clone()),
                        &resource,
                    );
                    sub.attached(w.clone());
                    self.watches
                        .attach(&w, as_listener.clone())
                        .await
                        .map_err(|e| PortError::transient(e.to_string()))?;
                }
            }
            (None, Some(ns_selector)) if resolved.namespaced => {
                // Namespaces chosen by labels: a watch of namespaces starts and stops a
                // watch of the bound kind in each namespace that matches.
                let ns_resource = self
                    .watches
                    .resolver()
                    .resolve(Some("v1"), "Namespace")
                    .await
                    .map_err(|e| PortError::transient(format!("binding {:?}: {e}", b.name)))?
                    .resource;
                let follower = Arc::new(NamespaceFollower::new(
                    self.clone(),
                    sub.clone(),
                    resource.clone(),
                    labels.clone(),
                    fields.clone(),
                ));
                let w = self.watches.watch(
                    WatchKey::new(
                        &ns_resource,
                        None,
                        label_selector_string(&ns_selector),
                        String::new(),
                    ),
                    &ns_resource,
                );
                let f: Arc<dyn Listener> = follower.clone();
                follower.attached(w.clone());
                self.watches
                    .attach(&w, f.clone())
                    .await
                    .map_err(|e| PortError::transient(e.to_string()))?;
                follower
                    .initial_namespaces()
                    .await
                    .map_err(|e| PortError::transient(e.to_string()))?;
                listeners.push(f);
            }
            _ => {
                let w = self
                    .watches
                    .watch(WatchKey::new(&resource, None, labels, fields), &resource);
                sub.attached(w.clone());
                self.watches
                    .attach(&w, as_listener.clone())
                    .await
                    .map_err(|e| PortError::transient(e.to_string()))?;
            }
        }
        sub.go_live();
        lock(&self.inner.subscribers).insert((hook.clone(), index), sub);
        Ok(listeners)
    }

    /// Attaches a binding's subscriber to the watch of one namespace (dynamic namespaces).
    pub(crate) async fn attach_namespace(
        &self,
        sub: &Arc<Subscriber>,
        resource: &ApiResource,
        namespace: &str,
        labels: &str,
        fields: &str,
    ) -> Result<(), AttachError> {
        let w = self.watches.watch(
            WatchKey::new(
                resource,
                Some(namespace.to_string()),
                labels.to_string(),
                fields.to_string(),
            ),
            resource,
        );
        sub.attached(w.clone());
        let l: Arc<dyn Listener> = sub.clone();
        self.watches.attach(&w, l).await
    }

    /// Detaches a binding's subscriber from the watch of one namespace.
    pub(crate) fn detach_namespace(&self, sub: &Arc<Subscriber>, namespace: &str) {
        let l: Arc<dyn Listener> = sub.clone();
        for w in sub.detached(Some(namespace)) {
            self.watches.detach(&w, &l);
        }
    }

    fn stop_hook(&self, hook: &HookRef) {
        let listeners = lock(&self.inner.hooks).remove(hook).unwrap_or_default();
        lock(&self.inner.subscribers).retain(|(h, _), _| h != hook);
        for l in listeners {
            for w in l.detached(None) {
                self.watches.detach(&w, &l);
            }
        }
    }
}

impl KubeBindings for BindingWatches {
    fn start(
        &self,
        hook: HookRef,
        bindings: Vec<KubernetesBinding>,
        events: BindingEvents,
    ) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(async move {
            self.stop_hook(&hook);
            let mut all: Vec<Arc<dyn Listener>> = Vec::new();
            for (i, b) in bindings.iter().enumerate() {
                match self.start_binding(&hook, i, b, events.clone()).await {
                    Ok(ls) => all.extend(ls),
                    Err(e) => {
                        lock(&self.inner.hooks).insert(hook.clone(), all);
                        self.stop_hook(&hook);
                        return Err(e);
                    }
                }
            }
            lock(&self.inner.hooks).insert(hook, all);
            Ok(())
        })
    }

    fn release(&self, hook: &HookRef, index: usize) {
        let sub = lock(&self.inner.subscribers)
            .get(&(hook.clone(), index))
            .cloned();
        if let Some(s) = sub {
            s.release();
        }
    }

    fn snapshot(&self, hook: &HookRef, index: usize) -> Vec<Value> {
        let sub = lock(&self.inner.subscribers)
            .get(&(hook.clone(), index))
            .cloned();
        sub.map(|s| s.snapshot()).unwrap_or_default()
    }

    fn snapshots(&self, owner: &str) -> Value {
        let subs: Vec<(HookRef, Arc<Subscriber>)> = lock(&self.inner.subscribers)
            .iter()
            .filter(|((h, _), _)| *h.owner == *owner)
            .map(|((h, _), s)| (h.clone(), s.clone()))
            .collect();
        let mut out = serde_json::Map::new();
        for (h, s) in subs {
            let hook = out
                .entry(h.hook.to_string())
                .or_insert_with(|| Value::Object(Default::default()));
            hook[s.binding()] = Value::Array(s.snapshot());
        }
        Value::Object(out)
    }

    fn check_filter(&self, program: &str) -> Result<(), hook_config::InvalidFilter> {
        crate::jq::JqFilter::compile(program)
            .map(|_| ())
            .map_err(|e| hook_config::InvalidFilter(e.to_string()))
    }

    fn stop_owner(&self, owner: &str) {
        let hooks: Vec<HookRef> = lock(&self.inner.hooks)
            .keys()
            .filter(|h| *h.owner == *owner)
            .cloned()
            .collect();
        for h in hooks {
            self.stop_hook(&h);
        }
    }
}
