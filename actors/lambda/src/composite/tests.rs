//! A parent synced again and again against an in-memory cluster: what a settled parent's
//! resync writes, and that it still reverts and applies changes.

use std::sync::atomic::{AtomicUsize, Ordering};

use std::sync::Mutex;

use bytes::Bytes;
use serde_json::{Value, json};

use super::*;
use crate::fakes::MemoryCluster;
use crate::ports::{BoxFut, HookClient, HookError};
use crate::types::{Hook, parse_composite};

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

fn data_of(cluster: &MemoryCluster, c: &Composite) -> Value {
    cluster
        .object(&c.children[0].resource, "ns", "p-cm")
        .expect("the child")["data"]
        .clone()
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
    let cluster = if counts {
        MemoryCluster::new(Vec::new()).with_change_counts()
    } else {
        MemoryCluster::new(Vec::new())
    };
    cluster.put(
        &c.parent,
        json!({"apiVersion": "example.com/v1", "kind": "Thing",
               "metadata": {"name": "p", "namespace": "ns"}}),
    );

    let key = crate::keys::ParentKey::new("ns", "p");
    // The first sync creates the child and writes the status; the second finds nothing
    // to do and settles the parent.
    let first = c.sync(&cluster, &key).await.expect("first sync");
    assert_eq!(first.applied.created, vec!["ConfigMap ns/p-cm"]);
    assert!(first.status_written);
    let second = c.sync(&cluster, &key).await.expect("second sync");
    assert!(
        !second.applied.changed() && !second.status_written,
        "{second:?}"
    );
    assert_eq!(c.settled.len(), 1);

    // An unchanged resync calls the hook, writes nothing and reports what a full sync
    // reports.
    let (writes, calls) = (cluster.writes(), hook.calls.load(Ordering::SeqCst));
    let reads = cluster.reads();
    let resync = c.sync(&cluster, &key).await.expect("resync");
    assert_eq!(hook.calls.load(Ordering::SeqCst), calls + 1);
    assert_eq!(cluster.writes(), writes);
    // With change counts it read nothing: nothing had changed.
    assert_eq!(cluster.reads() == reads, counts);
    assert_eq!(resync, second);
    // The request a settled parent sends again is the one a full sync builds.
    let resent = hook.last_request();
    assert_eq!(resent["parent"]["metadata"]["name"], json!("p"));
    assert_eq!(
        resent["children"]["ConfigMap.v1"]["p-cm"]["data"],
        json!({"a": "1"})
    );

    // A child changed by someone else is reverted.
    let mut edited = (*cluster
        .object(&c.children[0].resource, "ns", "p-cm")
        .expect("child"))
    .clone();
    edited["data"]["a"] = json!("edited");
    cluster.put(&c.children[0].resource, edited);
    let reverted = c.sync(&cluster, &key).await.expect("revert");
    // The hook saw the edited child, not the request remembered from before.
    assert_eq!(
        hook.last_request()["children"]["ConfigMap.v1"]["p-cm"]["data"],
        json!({"a": "edited"})
    );
    assert_eq!(reverted.applied.updated, vec!["ConfigMap ns/p-cm"]);
    assert_eq!(data_of(&cluster, &c), json!({"a": "1"}));
    c.sync(&cluster, &key).await.expect("settle again");
    assert_eq!(c.settled.len(), 1);

    // A changed answer is applied, its new status written.
    let mut changed = answer("2");
    changed["status"]["ready"] = json!(false);
    hook.set(changed);
    let calls = hook.calls.load(Ordering::SeqCst);
    let applied = c.sync(&cluster, &key).await.expect("changed answer");
    // One call: the new answer to the unchanged request is the one applied.
    assert_eq!(hook.calls.load(Ordering::SeqCst), calls + 1);
    assert_eq!(applied.applied.updated, vec!["ConfigMap ns/p-cm"]);
    assert!(applied.status_written);
    assert_eq!(data_of(&cluster, &c), json!({"a": "2"}));
    let parent = cluster.object(&c.parent, "ns", "p").expect("parent");
    assert_eq!(parent["status"]["ready"], json!(false));

    // A deleted child is created again.
    c.sync(&cluster, &key).await.expect("settle again");
    assert_eq!(c.settled.len(), 1);
    cluster.remove(&c.children[0].resource, "ns", "p-cm");
    let recreated = c.sync(&cluster, &key).await.expect("recreate");
    assert_eq!(recreated.applied.created, vec!["ConfigMap ns/p-cm"]);

    // A parent that is gone is forgotten.
    cluster.remove(&c.parent, "ns", "p");
    c.sync(&cluster, &key).await.expect("gone");
    assert!(c.settled.is_empty());
}
