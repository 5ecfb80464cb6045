//! A parent synced again and again against an in-memory cluster: what a settled parent's
//! resync writes, and that it still reverts and applies changes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::*;
use crate::claim::controller_uid;
use crate::ports::{BoxFut, EventNote, HookClient};
use crate::types::{Hook, parse_composite};

/// Objects by (plural, namespace, name); every write bumps a resourceVersion.
#[derive(Default)]
struct Memory {
    objects: Mutex<BTreeMap<(String, String, String), Arc<Value>>>,
    version: AtomicUsize,
    writes: AtomicUsize,
    /// Whether it counts changes as informer caches do (every write is one, whatever
    /// the resource): a sync can then tell that nothing it reads has changed.
    counts: bool,
    /// Cache reads (parents and candidates).
    reads: AtomicUsize,
}

fn place(resource: &Resource, object: &Value) -> (String, String, String) {
    (
        resource.plural.clone(),
        namespace_of(object).to_string(),
        name_of(object).to_string(),
    )
}

impl Memory {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String, String), Arc<Value>>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    /// Stores `object` under a new resourceVersion (a create when `expected` is None,
    /// else an update that must find that resourceVersion).
    fn store(
        &self,
        resource: &Resource,
        mut object: Value,
        create: bool,
    ) -> Result<Value, ClusterError> {
        let at = place(resource, &object);
        let mut objects = self.lock();
        match (objects.get(&at), create) {
            (Some(_), true) => return Err(ClusterError::AlreadyExists(at.2)),
            (None, false) => return Err(ClusterError::NotFound(at.2)),
            (Some(old), false)
                if old["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"] =>
            {
                return Err(ClusterError::Conflict(at.2));
            }
            (None, true) => {
                object["metadata"]["uid"] = json!(format!("uid-{}", at.2));
            }
            _ => {}
        }
        let version = self.version.fetch_add(1, Ordering::SeqCst) + 100;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        objects.insert(at, Arc::new(object.clone()));
        self.writes.fetch_add(1, Ordering::SeqCst);
        Ok(object)
    }

    fn object(&self, plural: &str, name: &str) -> Option<Arc<Value>> {
        self.lock()
            .get(&(plural.to_string(), "ns".to_string(), name.to_string()))
            .cloned()
    }
}

impl Cluster for Memory {
    fn changes(&self, _: &Resource) -> Option<u64> {
        self.counts.then(|| self.writes() as u64)
    }
    fn resolve(&self, api_version: &str, _: &str) -> BoxFut<'_, Result<Resource, ClusterError>> {
        let e = ClusterError::NotFound(api_version.to_string());
        Box::pin(async move { Err(e) })
    }
    fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
    ) -> BoxFut<'_, Result<Vec<Arc<Value>>, ClusterError>> {
        let out = self
            .lock()
            .iter()
            .filter(|((p, ns, _), _)| *p == resource.plural && namespace.is_none_or(|n| n == ns))
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
        let out = self
            .lock()
            .iter()
            .filter(|((p, ns, _), o)| {
                *p == resource.plural
                    && namespace.is_none_or(|n| n == ns)
                    && controller_uid(o).is_none_or(|u| u == owner_uid)
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
        let out = self
            .lock()
            .get(&(resource.plural.clone(), namespace.into(), name.into()))
            .cloned();
        Box::pin(async move { Ok(out) })
    }
    fn get(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let out = self
            .lock()
            .get(&(resource.plural.clone(), namespace.into(), name.into()))
            .map(|o| (**o).clone())
            .ok_or_else(|| ClusterError::NotFound(name.to_string()));
        Box::pin(async move { out })
    }
    fn create(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let out = self.store(resource, object, true);
        Box::pin(async move { out })
    }
    fn replace(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let out = self.store(resource, object, false);
        Box::pin(async move { out })
    }
    fn replace_status(
        &self,
        resource: &Resource,
        object: Value,
    ) -> BoxFut<'_, Result<Value, ClusterError>> {
        let out = self.store(resource, object, false);
        Box::pin(async move { out })
    }
    fn apply(&self, _: &Resource, _: Value, _: bool) -> BoxFut<'_, Result<Value, ClusterError>> {
        Box::pin(async { Err(ClusterError::NotFound("apply".into())) })
    }
    fn delete(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        _: &str,
    ) -> BoxFut<'_, Result<(), ClusterError>> {
        self.lock()
            .remove(&(resource.plural.clone(), namespace.into(), name.into()));
        self.writes.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    }
    fn event(&self, _: &Value, _: EventNote) -> BoxFut<'_, ()> {
        Box::pin(async {})
    }
}

/// A hook answering what the test last set, counting its calls.
#[derive(Default)]
struct Answer {
    body: Mutex<Vec<u8>>,
    calls: AtomicUsize,
    /// The body of the last request.
    request: Mutex<Vec<u8>>,
}

impl Answer {
    fn last_request(&self) -> Value {
        let body = self.request.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::from_slice(&body).expect("a JSON request")
    }

    fn set(&self, answer: Value) {
        *self.body.lock().unwrap_or_else(|p| p.into_inner()) = answer.to_string().into_bytes();
    }
}

impl HookClient for Answer {
    fn url(&self) -> &str {
        "http://127.0.0.1:9/sync"
    }
    fn call(&self, request: Bytes, _: String) -> BoxFut<'_, Result<Bytes, HookError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        *self.request.lock().unwrap_or_else(|p| p.into_inner()) = request.to_vec();
        let body = self.body.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Box::pin(async move { Ok(Bytes::from(body)) })
    }
}

fn resource(group: &str, plural: &str, kind: &str) -> Resource {
    let api_version = if group.is_empty() {
        "v1".to_string()
    } else {
        format!("{group}/v1")
    };
    Resource {
        api_version,
        group: group.into(),
        version: "v1".into(),
        plural: plural.into(),
        kind: kind.into(),
        namespaced: true,
        status_subresource: true,
    }
}

fn composite(hook: Arc<Answer>) -> Composite {
    let object = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "things"},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:9/sync"}}}
        }
    });
    let (name, spec) = parse_composite(&object).expect("spec");
    Composite {
        name,
        object,
        spec,
        parent: resource("example.com", "things", "Thing"),
        children: vec![ChildType {
            resource: resource("", "configmaps", "ConfigMap"),
            method: crate::types::UpdateMethod::InPlace,
        }],
        parent_selector: Selector::default(),
        sync: Some(BoundHook {
            hook: Hook::default(),
            client: hook,
        }),
        finalize: None,
        customizer: None,
        strategy: ApplyStrategy::DynamicApply,
        revisions: None,
        settled: SettledParents::default(),
        requests: RequestParts::default(),
    }
}

fn answer(data: &str) -> Value {
    json!({
        "status": {"ready": true},
        "children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p-cm"}, "data": {"a": data}}]
    })
}

fn data_of(cluster: &Memory) -> Value {
    cluster.object("configmaps", "p-cm").expect("the child")["data"].clone()
}

#[tokio::test]
async fn a_settled_parent_is_resynced_without_writes_and_changes_still_apply() {
    settled_parent(false).await;
}

/// With change counts, an unchanged parent is resynced without reading the caches again;
/// what it sends, gets and reports is the same.
#[tokio::test]
async fn an_unchanged_settled_parent_is_resynced_from_its_change_counts() {
    settled_parent(true).await;
}

async fn settled_parent(counts: bool) {
    let hook = Arc::new(Answer::default());
    hook.set(answer("1"));
    let c = composite(Arc::clone(&hook));
    let cluster = Memory {
        counts,
        ..Memory::default()
    };
    cluster
        .store(
            &c.parent,
            json!({"apiVersion": "example.com/v1", "kind": "Thing",
                   "metadata": {"name": "p", "namespace": "ns", "generation": 1}}),
            true,
        )
        .expect("parent");

    // The first sync creates the child and writes the status; the second finds nothing
    // to do and settles the parent.
    let first = c.sync(&cluster, "ns/p").await.expect("first sync");
    assert_eq!(first.applied.created, vec!["ConfigMap ns/p-cm"]);
    assert!(first.status_written);
    let second = c.sync(&cluster, "ns/p").await.expect("second sync");
    assert!(
        !second.applied.changed() && !second.status_written,
        "{second:?}"
    );
    assert_eq!(c.settled.len(), 1);

    // An unchanged resync calls the hook, writes nothing and reports what a full sync
    // reports.
    let (writes, calls) = (cluster.writes(), hook.calls.load(Ordering::SeqCst));
    let reads = cluster.reads.load(Ordering::SeqCst);
    let resync = c.sync(&cluster, "ns/p").await.expect("resync");
    assert_eq!(hook.calls.load(Ordering::SeqCst), calls + 1);
    assert_eq!(cluster.writes(), writes);
    // With change counts it read nothing: nothing had changed.
    assert_eq!(cluster.reads.load(Ordering::SeqCst) == reads, counts);
    assert_eq!(resync, second);
    // The request a settled parent sends again is the one a full sync builds.
    let resent = hook.last_request();
    assert_eq!(resent["parent"]["metadata"]["name"], json!("p"));
    assert_eq!(
        resent["children"]["ConfigMap.v1"]["p-cm"]["data"],
        json!({"a": "1"})
    );

    // A child changed by someone else is reverted.
    let mut edited = (*cluster.object("configmaps", "p-cm").expect("child")).clone();
    edited["data"]["a"] = json!("edited");
    cluster
        .store(&c.children[0].resource, edited, false)
        .expect("edit");
    let reverted = c.sync(&cluster, "ns/p").await.expect("revert");
    // The hook saw the edited child, not the request remembered from before.
    assert_eq!(
        hook.last_request()["children"]["ConfigMap.v1"]["p-cm"]["data"],
        json!({"a": "edited"})
    );
    assert_eq!(reverted.applied.updated, vec!["ConfigMap ns/p-cm"]);
    assert_eq!(data_of(&cluster), json!({"a": "1"}));
    c.sync(&cluster, "ns/p").await.expect("settle again");
    assert_eq!(c.settled.len(), 1);

    // A changed answer is applied, its new status written.
    let mut changed = answer("2");
    changed["status"]["ready"] = json!(false);
    hook.set(changed);
    let calls = hook.calls.load(Ordering::SeqCst);
    let applied = c.sync(&cluster, "ns/p").await.expect("changed answer");
    // One call: the new answer to the unchanged request is the one applied.
    assert_eq!(hook.calls.load(Ordering::SeqCst), calls + 1);
    assert_eq!(applied.applied.updated, vec!["ConfigMap ns/p-cm"]);
    assert!(applied.status_written);
    assert_eq!(data_of(&cluster), json!({"a": "2"}));
    let parent = cluster.object("things", "p").expect("parent");
    assert_eq!(parent["status"]["ready"], json!(false));

    // A deleted child is created again.
    c.sync(&cluster, "ns/p").await.expect("settle again");
    assert_eq!(c.settled.len(), 1);
    cluster
        .delete(&c.children[0].resource, "ns", "p-cm", "")
        .await
        .expect("delete");
    let recreated = c.sync(&cluster, "ns/p").await.expect("recreate");
    assert_eq!(recreated.applied.created, vec!["ConfigMap ns/p-cm"]);

    // A parent that is gone is forgotten.
    cluster
        .lock()
        .remove(&("things".to_string(), "ns".to_string(), "p".to_string()));
    cluster.writes.fetch_add(1, Ordering::SeqCst);
    c.sync(&cluster, "ns/p").await.expect("gone");
    assert!(c.settled.is_empty());
}
