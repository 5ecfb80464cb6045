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

/// `plan::decide`, the pure part of a sync: what it writes for an answer.
mod decide {
    use super::*;
    use crate::children::ChildAction;
    use crate::composite::plan::{Plan, PlanError, decide};
    use crate::keys::GroupMap;
    use crate::protocol::CompositeResponse;
    use crate::types::UpdateMethod;

    fn parent() -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Thing",
               "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "generation": 3},
               "status": {"ready": true, "observedGeneration": 3}})
    }

    fn response(children: Vec<Value>) -> CompositeResponse {
        CompositeResponse {
            status: Some(json!({"ready": true})),
            children: Some(children),
            ..CompositeResponse::default()
        }
    }

    fn config_map(name: &str, data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
               "data": {"a": data}})
    }

    fn plan_for(c: &Composite, parent: &Value, observed: &GroupMap, answer: Vec<Value>) -> Plan {
        let selector = c.child_selector(parent).expect("selector");
        decide(c, parent, &selector, observed, response(answer)).expect("a plan")
    }

    /// The observed map of children as a first sync created them.
    fn created(c: &Composite, parent: &Value, answer: Vec<Value>) -> GroupMap {
        let plan = plan_for(c, parent, &GroupMap::new(), answer);
        let mut observed = GroupMap::new();
        for (i, action) in plan.children.expect("managed").into_iter().enumerate() {
            let ChildAction::Create { mut object, .. } = action else {
                panic!("a create: {action:?}");
            };
            object["metadata"]["uid"] = json!(format!("c{i}"));
            object["metadata"]["resourceVersion"] = json!("1");
            observed
                .entry(c.children[0].group_key())
                .or_default()
                .insert(crate::keys::key_of(&object), Arc::new(object));
        }
        observed
    }

    fn composite() -> Composite {
        super::composite(Arc::new(Answer::default()))
    }

    #[test]
    fn missing_children_are_created_owned_by_the_parent() {
        let c = composite();
        let plan = plan_for(&c, &parent(), &GroupMap::new(), vec![config_map("a", "1")]);
        let [
            ChildAction::Create {
                what,
                object,
                server_side,
                ..
            },
        ] = plan.children.as_deref().expect("managed")
        else {
            panic!("one create: {plan:?}");
        };
        assert_eq!(what, "ConfigMap ns/a");
        assert!(!server_side);
        // The parent's namespace, the generated selector's label, one controller reference
        // and the last-applied annotation.
        assert_eq!(object["metadata"]["namespace"], json!("ns"));
        assert_eq!(object["metadata"]["labels"]["controller-uid"], json!("u1"));
        assert_eq!(crate::claim::controller_uid(object), Some("u1"));
        assert_eq!(
            object["metadata"]["ownerReferences"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
        assert!(
            object["metadata"]["annotations"][crate::types::LAST_APPLIED_ANNOTATION].is_string()
        );
        assert_eq!(&*plan.planned, ["ConfigMap.v1 ns/a".to_string()]);
        assert!(!plan.settles);
    }

    #[test]
    fn children_as_desired_need_nothing_and_a_held_status_settles() {
        let c = composite();
        let observed = created(&c, &parent(), vec![config_map("a", "1")]);
        let plan = plan_for(&c, &parent(), &observed, vec![config_map("a", "1")]);
        assert_eq!(plan.children, Some(Vec::new()));
        assert_eq!(plan.status, json!({"ready": true, "observedGeneration": 3}));
        assert!(plan.settles);
    }

    #[test]
    fn changed_children_are_updated_in_place() {
        let c = composite();
        let observed = created(&c, &parent(), vec![config_map("a", "1")]);
        let plan = plan_for(&c, &parent(), &observed, vec![config_map("a", "2")]);
        let [
            ChildAction::Update {
                what,
                object,
                server_side: false,
                ..
            },
        ] = plan.children.as_deref().expect("managed")
        else {
            panic!("one update: {plan:?}");
        };
        assert_eq!(what, "ConfigMap ns/a");
        assert_eq!(object["data"], json!({"a": "2"}));
        // The observed object merged: its uid and resourceVersion guard the write.
        assert_eq!(object["metadata"]["uid"], json!("c0"));
        assert_eq!(object["metadata"]["resourceVersion"], json!("1"));
        assert!(!plan.settles);
    }

    #[test]
    fn changed_children_of_a_recreate_type_are_deleted_and_on_delete_ones_held() {
        let mut c = composite();
        let observed = created(&c, &parent(), vec![config_map("a", "1")]);
        c.children[0].method = UpdateMethod::Recreate;
        let plan = plan_for(&c, &parent(), &observed, vec![config_map("a", "2")]);
        assert!(matches!(
            plan.children.as_deref(),
            Some([ChildAction::Recreate { name, uid, .. }]) if name == "a" && uid == "c0"
        ));
        c.children[0].method = UpdateMethod::OnDelete;
        let plan = plan_for(&c, &parent(), &observed, vec![config_map("a", "2")]);
        assert_eq!(plan.children, Some(vec![ChildAction::Hold]));
        assert!(!plan.settles);
    }

    #[test]
    fn children_no_longer_desired_are_deleted_first() {
        let c = composite();
        let observed = created(
            &c,
            &parent(),
            vec![config_map("a", "1"), config_map("b", "1")],
        );
        let plan = plan_for(&c, &parent(), &observed, vec![config_map("c", "1")]);
        let actions = plan.children.expect("managed");
        let kinds: Vec<(&str, &str)> = actions
            .iter()
            .map(|a| match a {
                ChildAction::Delete { uid, .. } => ("delete", uid.as_str()),
                ChildAction::Create { what, .. } => ("create", what.as_str()),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("delete", "c0"),
                ("delete", "c1"),
                ("create", "ConfigMap ns/c")
            ]
        );
        // A child already being deleted is left to go.
        let mut going = observed.clone();
        for objects in going.values_mut() {
            for o in objects.values_mut() {
                let mut deleting = (**o).clone();
                deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                *o = Arc::new(deleting);
            }
        }
        let plan = plan_for(&c, &parent(), &going, Vec::new());
        assert_eq!(plan.children, Some(Vec::new()));
    }

    #[test]
    fn the_answered_status_is_written_with_the_observed_generation() {
        let c = composite();
        let mut p = parent();
        p["status"] = json!({"ready": false});
        let plan = plan_for(&c, &p, &GroupMap::new(), Vec::new());
        assert_eq!(plan.status, json!({"ready": true, "observedGeneration": 3}));
        assert_eq!(plan.children, Some(Vec::new()));
        assert!(!plan.settles);
        // No status answered: an empty one, still with the generation (0 without one).
        p["metadata"]["generation"] = Value::Null;
        let selector = c.child_selector(&p).expect("selector");
        let plan = decide(
            &c,
            &p,
            &selector,
            &GroupMap::new(),
            CompositeResponse::default(),
        )
        .expect("a plan");
        assert_eq!(plan.status, json!({"observedGeneration": 0}));
    }

    #[test]
    fn a_parent_deleted_without_our_finalizer_leaves_its_children_alone() {
        let c = composite();
        let observed = created(&c, &parent(), vec![config_map("a", "1")]);
        let mut p = parent();
        p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let plan = plan_for(&c, &p, &observed, Vec::new());
        assert_eq!(plan.children, None);
        assert_eq!(plan.planned.len(), 0);
    }

    #[test]
    fn a_child_the_selector_would_not_select_is_refused() {
        let c = composite();
        let mut child = config_map("a", "1");
        child["metadata"]["labels"] = json!({"controller-uid": "someone-else"});
        let selector = c.child_selector(&parent()).expect("selector");
        let err = decide(
            &c,
            &parent(),
            &selector,
            &GroupMap::new(),
            response(vec![child]),
        )
        .expect_err("refused");
        assert_eq!(
            err,
            PlanError::SelectorMismatch {
                kind: "ConfigMap".into(),
                key: "ns/a".into()
            }
        );
        let sync = SyncError::from(err);
        assert_eq!(
            sync.to_string(),
            "labels on desired child ConfigMap ns/a don't match parent selector"
        );
        // The same answer is refused the same way again.
        assert_eq!(
            bosun_runtime::Classified::class(&sync),
            bosun_runtime::ErrorClass::Permanent
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        assert!(matches!(
            decide(
                &c,
                &parent(),
                &selector,
                &GroupMap::new(),
                response(vec![secret])
            ),
            Err(PlanError::UndeclaredChild(_))
        ));
    }

    #[test]
    fn a_parent_without_a_selector_has_no_child_selector() {
        let mut c = composite();
        c.spec.generate_selector = None;
        let err = c.child_selector(&parent()).expect_err("no selector");
        assert_eq!(err, ChildSelectorError::Empty);
        assert_eq!(
            SyncError::from(err).to_string(),
            ".spec.selector must have either matchLabels, matchExpressions, or both"
        );
        let mut p = parent();
        p["spec"]["selector"] = json!({"matchLabels": {"app": "x"}});
        assert!(c.child_selector(&p).is_ok());
    }
}
