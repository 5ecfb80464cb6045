//! The items' cluster ([`Cluster`]) in memory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::faults::{Armed, Fault};
use crate::item::{DEPLOYER_TYPE_ANNOTATION, ItemKey, ObjectRef, WithStatus};
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
    /// Status writes to let through before another writer's lands first (see
    /// [`MemoryCluster::write_status_before`]), and what that writer sets.
    interfere: Option<(usize, Edit)>,
    /// Calls told to fail ([`MemoryCluster::fail`]).
    faults: Armed<ClusterCall>,
    /// Tokens of service accounts by namespace and name ([`MemoryCluster::issue_tokens`]).
    service_accounts: BTreeMap<ItemKey, String>,
    /// The items' cluster's address, for `selfConfig` targets.
    address: Option<(String, Option<String>)>,
    /// The token requests answered: (namespace, service account, audiences).
    token_requests: Vec<(String, String, Vec<String>)>,
}

/// A call of the deployer to the items' cluster that a test can make fail
/// ([`MemoryCluster::fail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClusterCall {
    /// GET of a DeployItem (cache or API server).
    ReadItem,
    /// PUT of a DeployItem (annotations, finalizers).
    WriteItem,
    /// PUT of a DeployItem's `/status`.
    WriteStatus,
    /// GET of a Target.
    ReadTarget,
    /// GET of a Secret (a Target's `secretRef`).
    ReadSecret,
    /// GET of a Context.
    ReadContext,
    /// Create or replace of the export Secret.
    WriteExport,
    /// DELETE of the export Secret.
    DeleteSecret,
    /// A TokenRequest for a service account.
    RequestToken,
    /// Taking or freeing an item's SyncObject.
    Lock,
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

    /// The next `times` calls of `call` fail with `fault` (`None`: every call until
    /// [`MemoryCluster::heal`]).
    pub fn fail(&self, call: ClusterCall, fault: Fault, times: Option<usize>) {
        self.lock().faults.arm(call, fault, times);
    }

    /// `call` answers again.
    pub fn heal(&self, call: ClusterCall) {
        self.lock().faults.heal(call);
    }

    /// Makes the service account `namespace/name` exist, its TokenRequests answered with
    /// `token`, and the items' cluster reachable at `server` (for `selfConfig` targets).
    pub fn issue_tokens(&self, namespace: &str, name: &str, token: &str, server: &str) {
        let mut st = self.lock();
        st.service_accounts.insert(
            ItemKey {
                namespace: namespace.into(),
                name: name.into(),
            },
            token.to_string(),
        );
        st.address = Some((server.to_string(), None));
    }

    /// The TokenRequests answered so far: (namespace, service account, audiences).
    pub fn token_requests(&self) -> Vec<(String, String, Vec<String>)> {
        self.lock().token_requests.clone()
    }

    /// Creates or replaces a Secret.
    pub fn put_secret(&self, namespace: &str, name: &str, data: SecretData) {
        self.lock().secrets.insert(
            ItemKey {
                namespace: namespace.into(),
                name: name.into(),
            },
            data,
        );
    }

    /// Creates or replaces a Context.
    pub fn put_context(&self, mut o: Value) {
        let mut st = self.lock();
        o["metadata"]["resourceVersion"] = json!(st.next_version());
        st.contexts.insert(ItemKey::of(&o), o);
    }

    /// Writes the item's `/status` as another client would (landscaper setting a jobID),
    /// its watch told.
    pub fn edit_status(&self, key: &ItemKey, edit: impl FnOnce(&mut Value)) {
        let mut st = self.lock();
        let version = st.next_version();
        let Some(o) = st.items.get_mut(key) else {
            return;
        };
        let mut status = o["status"].take();
        if status.is_null() {
            status = json!({});
        }
        edit(&mut status);
        o["status"] = status;
        o["metadata"]["resourceVersion"] = json!(version);
        let o = o.clone();
        st.notify_item(&o);
    }

    /// After `passed` more status writes, another writer (landscaper setting a jobID, say)
    /// changes the item with `edit` just before the next one, which then conflicts.
    pub fn write_status_before(&self, passed: usize, edit: Edit) {
        self.lock().interfere = Some((passed, edit));
    }
}

/// The fault `call` meets now, as the port's error about `verb` of `what`.
impl MemoryCluster {
    /// A `get` of the `kind` object `namespace/name`, refused by an armed fault of `call`,
    /// else what `pick` finds of it.
    fn read(
        &self,
        call: ClusterCall,
        kind: &str,
        namespace: &str,
        name: &str,
        pick: impl FnOnce(&Inner, &ItemKey) -> Option<Value>,
    ) -> Result<Option<Value>, ClusterError> {
        let key = ItemKey {
            namespace: namespace.into(),
            name: name.into(),
        };
        let mut st = self.lock();
        fault(&mut st, call, "get", &format!("{kind} {key}"))?;
        Ok(pick(&st, &key))
    }
}

fn fault(st: &mut Inner, call: ClusterCall, verb: &str, what: &str) -> Result<(), ClusterError> {
    match st.faults.take(call) {
        Some(f) => Err(f.cluster_error(verb, what)),
        None => Ok(()),
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
        let mut st = self.lock();
        let o = fault(
            &mut st,
            ClusterCall::ReadItem,
            "get",
            &format!("DeployItem {key}"),
        )
        .map(|()| st.items.get(key).cloned());
        Box::pin(async move { o })
    }

    fn read_item(&self, key: &ItemKey) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        self.get_item(key)
    }

    fn update_item(&self, mut object: Value) -> BoxFut<'_, Result<Value, ClusterError>> {
        Box::pin(async move {
            let mut st = self.lock();
            let key = ItemKey::of(&object);
            let what = format!("DeployItem {key}");
            fault(&mut st, ClusterCall::WriteItem, "update", &what)?;
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
            fault(&mut st, ClusterCall::WriteStatus, "update", &what)?;
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
        let o = self.read(
            ClusterCall::ReadTarget,
            "Target",
            namespace,
            name,
            |st, key| st.targets.get(key).cloned(),
        );
        Box::pin(async move { o })
    }

    fn get_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<SecretData>, ClusterError>> {
        let what = format!("Secret {namespace}/{name}");
        let refused = fault(&mut self.lock(), ClusterCall::ReadSecret, "get", &what);
        let o = refused.map(|()| self.secret(namespace, name));
        Box::pin(async move { o })
    }

    fn get_context(
        &self,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Option<Value>, ClusterError>> {
        let o = self.read(
            ClusterCall::ReadContext,
            "Context",
            namespace,
            name,
            |st, key| st.contexts.get(key).cloned(),
        );
        Box::pin(async move { o })
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
            let what = format!("Secret {}/{name}", key.namespace);
            fault(&mut st, ClusterCall::WriteExport, "update", &what)?;
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
        let mut st = self.lock();
        let what = format!("Secret {namespace}/{name}");
        let result = fault(&mut st, ClusterCall::DeleteSecret, "delete", &what).map(|()| {
            st.secrets.remove(&ItemKey {
                namespace: namespace.into(),
                name: name.into(),
            });
        });
        Box::pin(async move { result })
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
        if let Err(e) = fault(
            &mut inner,
            ClusterCall::Lock,
            "update",
            &format!("SyncObject {name}"),
        ) {
            return Box::pin(async move { Err(e) });
        }
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

    fn service_account_token<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        audiences: &'a [String],
        _expiration_seconds: u64,
    ) -> BoxFut<'a, Result<String, ClusterError>> {
        let mut st = self.lock();
        let what = format!("ServiceAccount {namespace}/{name}");
        let result = fault(&mut st, ClusterCall::RequestToken, "create", &what).and_then(|()| {
            let key = ItemKey {
                namespace: namespace.into(),
                name: name.into(),
            };
            let token = st
                .service_accounts
                .get(&key)
                .cloned()
                .ok_or_else(|| ClusterError::NotFound(what.clone()))?;
            st.token_requests
                .push((namespace.into(), name.into(), audiences.to_vec()));
            Ok(token)
        });
        Box::pin(async move { result })
    }

    fn resource_cluster(&self) -> Option<(String, Option<String>)> {
        self.lock().address.clone()
    }
}
