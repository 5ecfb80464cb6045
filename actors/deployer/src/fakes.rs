//! An in-memory cluster for the controller's tests: DeployItems, Targets, Secrets and
//! Contexts with resourceVersions, generations, finalizers and the status subresource,
//! and a watch that reports every write (ours included, as a real watch does).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::item::{DEPLOYER_TYPE_ANNOTATION, ItemKey, ObjectRef};
use crate::ports::{BoxFut, Change, Cluster, ClusterError, EventNote, SecretData};

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
}

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

    fn update_status(&self, object: Value) -> BoxFut<'_, Result<Value, ClusterError>> {
        Box::pin(async move {
            let mut st = self.lock();
            let key = ItemKey::of(&object);
            let what = format!("DeployItem {key} status");
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
        prefix: &str,
        exports: &Value,
    ) -> BoxFut<'_, Result<ObjectRef, ClusterError>> {
        let key = ItemKey::of(item);
        let (prefix, exports) = (prefix.to_string(), exports.to_string());
        Box::pin(async move {
            let mut st = self.lock();
            let name = match existing {
                Some(r) => r.name,
                None => format!("{prefix}{}", st.next_version()),
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
