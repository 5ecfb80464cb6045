use super::*;
use crate::apply::with_last_applied;
use crate::types::{StatusChecks, StatusCondition};
use serde_json::json;

fn parent(version: &str) -> Value {
    json!({
        "apiVersion": "ctl.example.com/v1",
        "kind": "Fleet",
        "metadata": {"name": "f", "namespace": "ns", "uid": "p-uid", "generation": 1},
        "spec": {"version": version, "template": {"metadata": {"labels": {"app": "f"}}}},
    })
}

fn pod_gk() -> GroupKind {
    GroupKind::new("", "Pod")
}

fn strategies(method: UpdateMethod) -> BTreeMap<GroupKind, UpdateStrategy> {
    BTreeMap::from([
        (
            pod_gk(),
            UpdateStrategy {
                method,
                status_checks: Some(StatusChecks {
                    conditions: vec![StatusCondition {
                        type_: "Ready".into(),
                        status: Some("True".into()),
                        reason: None,
                    }],
                }),
            },
        ),
        (
            GroupKind::new("", "ConfigMap"),
            UpdateStrategy {
                method: UpdateMethod::InPlace,
                status_checks: None,
            },
        ),
    ])
}

/// The hook: three pods at the parent's version (no namespace: the rollout defaults it)
/// and a ConfigMap of a non-rolling kind.
fn hook(parent: &Value) -> RevisionAnswer {
    let version = parent["spec"]["version"].clone();
    let mut children: Vec<Value> = ["p1", "p2", "p3"]
        .iter()
        .map(|name| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                   "spec": {"version": version}})
        })
        .collect();
    children.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "cfg"}, "data": {"v": version}}));
    RevisionAnswer {
        status: json!({"ready": 3}),
        children,
        resync_after_seconds: 0.0,
        finalized: false,
    }
}

/// A tiny cluster: stored revisions and children, changed only as a caller of `plan`
/// would change them.
struct World {
    revisions: Vec<Value>,
    children: BTreeMap<(GroupKind, String), Value>,
    next_uid: u32,
}

impl World {
    fn new() -> Self {
        World {
            revisions: Vec::new(),
            children: BTreeMap::new(),
            next_uid: 0,
        }
    }

    fn observed(&self) -> ObservedChildren {
        ObservedChildren::from_objects(self.children.values())
    }

    fn plan(&self, parent: &Value, method: UpdateMethod) -> RolloutPlan {
        let field_paths = vec!["spec".to_string()];
        let revisions =
            parent_revisions(parent, &self.revisions, &field_paths).expect("parent revisions");
        let answers: Vec<RevisionAnswer> =
            revisions.items.iter().map(|r| hook(&r.parent)).collect();
        let observed = self.observed();
        let strategies = strategies(method);
        plan(&RolloutInput {
            parent,
            parent_group: "ctl.example.com",
            parent_plural: "fleets",
            generate_selector: false,
            revisions: &revisions,
            answers: &answers,
            observed: &observed,
            strategies: &strategies,
            apply_strategy: ApplyStrategy::DynamicApply,
        })
        .expect("plan")
    }

    /// Persists the revisions, then applies the children (InPlace); `ready` says which
    /// pods report Ready afterwards (the kubelet's part).
    fn execute(&mut self, plan: &RolloutPlan, ready: &dyn Fn(&str) -> bool) {
        let deleted: BTreeSet<&str> = plan.delete.iter().map(|r| r.name.as_str()).collect();
        self.revisions
            .retain(|r| !deleted.contains(r["metadata"]["name"].as_str().unwrap_or("")));
        for updated in &plan.update {
            let slot = self
                .revisions
                .iter_mut()
                .find(|r| r["metadata"]["name"] == updated["metadata"]["name"])
                .expect("updated revision exists");
            *slot = updated.clone();
        }
        for created in &plan.create {
            let mut created = created.clone();
            self.next_uid += 1;
            created["metadata"]["uid"] = json!(format!("r-{}", self.next_uid));
            self.revisions.push(created);
        }
        for desired in &plan.children {
            let id = (GroupKind::of(desired), object_key(desired));
            let next = match self.children.get(&id) {
                Some(observed) => apply_update(observed, desired).expect("apply"),
                None => with_last_applied(desired),
            };
            let mut next = next;
            if id.0.kind == "Pod" {
                let status = if ready(&id.1) { "True" } else { "False" };
                next["status"] = json!({"conditions": [{"type": "Ready", "status": status}]});
            }
            self.children.insert(id, next);
        }
    }

    fn pod_version(&self, name: &str) -> Value {
        self.children[&(pod_gk(), format!("ns/{name}"))]["spec"]["version"].clone()
    }

    fn claims(&self) -> Vec<(String, Value)> {
        self.revisions
            .iter()
            .map(|r| {
                (
                    r["parentPatch"]["spec"]["version"].to_string(),
                    r["children"].clone(),
                )
            })
            .collect()
    }
}

fn all_ready(_: &str) -> bool {
    true
}

#[test]
fn a_new_parent_gets_one_revision_claiming_every_rolling_child() {
    let world = World::new();
    let plan = world.plan(&parent("v1"), UpdateMethod::RollingInPlace);
    assert_eq!(plan.create.len(), 1);
    let rev = &plan.create[0];
    assert_eq!(
        rev["children"],
        json!([{"apiGroup": "", "kind": "Pod", "names": ["p1", "p2", "p3"]}]),
        "bare names, as metacontroller writes them"
    );
    assert_eq!(rev["metadata"]["namespace"], json!("ns"));
    assert_eq!(
        rev["metadata"]["labels"],
        json!({"app": "f", LABEL_API_GROUP: "ctl.example.com", LABEL_RESOURCE: "fleets"})
    );
    assert_eq!(rev["metadata"]["ownerReferences"][0]["uid"], json!("p-uid"));
    assert_eq!(
        rev["metadata"]["ownerReferences"][0]["controller"],
        json!(true)
    );
    assert_eq!(rev["parentPatch"], json!({"spec": parent("v1")["spec"]}));
    assert_eq!(
        rev["metadata"]["name"],
        json!(revision_name(
            "fleets",
            "ctl.example.com",
            "p-uid",
            &canonical_json(&rev["parentPatch"])
        ))
    );
    assert_eq!(plan.updated.reason, "OnLatestRevision");
    assert_eq!(plan.updated.status, "True");
    assert_eq!(plan.children.len(), 4);
    assert!(
        plan.children
            .iter()
            .all(|c| c["metadata"]["namespace"] == json!("ns"))
    );
    assert_eq!(
        plan.status["conditions"],
        json!([{"type": "Updated", "status": "True", "reason": "OnLatestRevision",
                "message": format!("latest ControllerRevision: {}", plan.latest_revision)}])
    );
    assert_eq!(plan.status["ready"], json!(3));
}

#[test]
fn namespaced_children_roll_one_per_sync_gated_by_status_checks() {
    let mut world = World::new();
    let v1 = parent("v1");
    let plan = world.plan(&v1, UpdateMethod::RollingInPlace);
    world.execute(&plan, &all_ready);
    // Steady state: nothing to do, the same revision, no writes.
    let plan = world.plan(&v1, UpdateMethod::RollingInPlace);
    assert!(plan.create.is_empty() && plan.update.is_empty() && plan.delete.is_empty());
    assert_eq!(plan.updated.reason, "OnLatestRevision");

    let v2 = parent("v2");
    let mut progress = Vec::new();
    // p1 never becomes ready at first: the rollout waits on it.
    let mut p1_ready = false;
    for step in 0..10 {
        let plan = world.plan(&v2, UpdateMethod::RollingInPlace);
        progress.push((plan.updated.reason.clone(), plan.updated.message.clone()));
        if plan.updated.reason == "OnLatestRevision" {
            assert_eq!(world.revisions.len(), 1, "old revision pruned");
            break;
        }
        // The ConfigMap (InPlace, not rolling) follows the latest at once.
        let cfg = plan
            .children
            .iter()
            .find(|c| c["kind"] == "ConfigMap")
            .expect("cfg");
        assert_eq!(cfg["data"]["v"], json!("v2"));
        world.execute(&plan, &|name: &str| name != "ns/p1" || p1_ready);
        if step == 1 {
            p1_ready = true;
        }
    }
    let reasons: Vec<&str> = progress.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "RolloutProgressing", // p1 moves
            "RolloutWaiting",     // p1 updated but not Ready
            "RolloutWaiting",
            "RolloutProgressing", // p2
            "RolloutProgressing", // p3
            "OnLatestRevision",
        ]
    );
    assert_eq!(progress[0].1, "updating Pod ns/p1");
    assert_eq!(
        progress[1].1,
        r#"child Pod ns/p1 failed status check: "Ready" condition status is "False" (want "True")"#
    );
    assert_eq!(progress[3].1, "updating Pod ns/p2");
    assert_eq!(progress[4].1, "updating Pod ns/p3");
    for name in ["p1", "p2", "p3"] {
        assert_eq!(world.pod_version(name), json!("v2"));
    }
}

#[test]
fn each_step_moves_exactly_one_child_and_keeps_the_others_on_their_revision() {
    let mut world = World::new();
    let plan = world.plan(&parent("v1"), UpdateMethod::RollingRecreate);
    world.execute(&plan, &all_ready);

    let plan = world.plan(&parent("v2"), UpdateMethod::RollingRecreate);
    assert_eq!(plan.updated.message, "updating Pod ns/p1");
    let versions: Vec<&Value> = plan
        .children
        .iter()
        .filter(|c| c["kind"] == "Pod")
        .map(|c| &c["spec"]["version"])
        .collect();
    assert_eq!(versions, [&json!("v2"), &json!("v1"), &json!("v1")]);
    // The new revision claims p1; the old one keeps p2 and p3.
    assert_eq!(plan.create.len(), 1);
    assert_eq!(plan.create[0]["children"][0]["names"], json!(["p1"]));
    assert_eq!(plan.update.len(), 1);
    assert_eq!(plan.update[0]["children"][0]["names"], json!(["p2", "p3"]));
    assert!(plan.delete.is_empty());
    world.execute(&plan, &all_ready);
    assert_eq!(world.pod_version("p1"), json!("v2"));
    assert_eq!(world.pod_version("p2"), json!("v1"));
    assert_eq!(world.claims().len(), 2);
}

#[test]
fn a_missing_child_holds_the_rollout() {
    let mut world = World::new();
    world.execute(
        &world.plan(&parent("v1"), UpdateMethod::RollingRecreate),
        &all_ready,
    );
    let plan = world.plan(&parent("v2"), UpdateMethod::RollingRecreate);
    world.execute(&plan, &all_ready);
    // Recreate: p1 was deleted and is not back yet.
    world.children.remove(&(pod_gk(), "ns/p1".to_string()));
    let plan = world.plan(&parent("v2"), UpdateMethod::RollingRecreate);
    assert_eq!(plan.updated.reason, "RolloutWaiting");
    assert_eq!(plan.updated.message, "missing child Pod ns/p1");
    assert!(plan.update.is_empty() && plan.create.is_empty());
}

#[test]
fn a_child_not_yet_updated_holds_the_rollout() {
    let mut world = World::new();
    world.execute(
        &world.plan(&parent("v1"), UpdateMethod::RollingInPlace),
        &all_ready,
    );
    let plan = world.plan(&parent("v2"), UpdateMethod::RollingInPlace);
    // The revisions are persisted but the child write did not happen.
    let mut revisions_only = plan.clone();
    revisions_only.children.clear();
    world.execute(&revisions_only, &all_ready);
    let plan = world.plan(&parent("v2"), UpdateMethod::RollingInPlace);
    assert_eq!(plan.updated.reason, "RolloutWaiting");
    assert_eq!(plan.updated.message, "child Pod ns/p1 is not updated yet");
}

#[test]
fn rolling_in_place_waits_for_the_observed_generation() {
    let mut world = World::new();
    world.execute(
        &world.plan(&parent("v1"), UpdateMethod::RollingInPlace),
        &all_ready,
    );
    world.execute(
        &world.plan(&parent("v2"), UpdateMethod::RollingInPlace),
        &all_ready,
    );
    let p1 = world
        .children
        .get_mut(&(pod_gk(), "ns/p1".to_string()))
        .expect("p1");
    p1["metadata"]["generation"] = json!(2);
    p1["status"]["observedGeneration"] = json!(1);
    let plan = world.plan(&parent("v2"), UpdateMethod::RollingInPlace);
    assert_eq!(
        plan.updated.message,
        "child Pod ns/p1 with RollingInPlace update strategy hasn't observed latest spec"
    );
    // RollingRecreate does not look at it.
    let plan = world.plan(&parent("v2"), UpdateMethod::RollingRecreate);
    assert_eq!(plan.updated.reason, "RolloutProgressing");
}

#[test]
fn status_check_messages_name_the_condition() {
    let checks = StatusChecks {
        conditions: vec![StatusCondition {
            type_: "Ready".into(),
            status: Some("True".into()),
            reason: Some("Fine".into()),
        }],
    };
    let child = |conditions: Value| json!({"status": {"conditions": conditions}});
    assert_eq!(
        status_check(&checks, &json!({})).map_err(|e| e.to_string()),
        Err(r#"required condition type missing: "Ready""#.into())
    );
    assert_eq!(
        status_check(
            &checks,
            &child(json!([{"type": "Ready", "status": "True"}]))
        )
        .map_err(|e| e.to_string()),
        Err(r#""Ready" condition reason is "" (want "Fine")"#.into())
    );
    assert_eq!(
        status_check(
            &checks,
            &child(
                json!([{"type": "Other"}, {"type": "Ready", "status": "True", "reason": "Fine"}])
            )
        ),
        Ok(())
    );
}

#[test]
fn revisions_with_no_claims_are_pruned() {
    let mut world = World::new();
    world.execute(
        &world.plan(&parent("v1"), UpdateMethod::RollingInPlace),
        &all_ready,
    );
    let old = world.revisions[0].clone();
    // The parent goes back and forth: v2's revision exists but claims nothing useful.
    for _ in 0..5 {
        let plan = world.plan(&parent("v2"), UpdateMethod::RollingInPlace);
        world.execute(&plan, &all_ready);
    }
    assert_eq!(world.revisions.len(), 1);
    assert_ne!(
        world.revisions[0]["metadata"]["name"],
        old["metadata"]["name"]
    );
    // The step that emptied the old revision deleted it with its uid.
    let mut world = World::new();
    world.execute(
        &world.plan(&parent("v1"), UpdateMethod::RollingInPlace),
        &all_ready,
    );
    let mut deleted = Vec::new();
    for _ in 0..5 {
        let plan = world.plan(&parent("v2"), UpdateMethod::RollingInPlace);
        deleted.extend(plan.delete.clone());
        world.execute(&plan, &all_ready);
    }
    assert_eq!(
        deleted,
        [RevisionRef {
            namespace: "ns".into(),
            name: old["metadata"]["name"].as_str().expect("name").into(),
            uid: "r-1".into(),
        }]
    );
}

#[test]
fn children_already_matching_the_latest_move_at_once() {
    let mut world = World::new();
    world.execute(
        &world.plan(&parent("v1"), UpdateMethod::RollingInPlace),
        &all_ready,
    );
    // Someone already updated p2 and p3 by hand to what v2 wants.
    let wanted = hook(&parent("v2"));
    for child in &wanted.children[1..3] {
        let desired = normalize_child(child, "ns", None);
        let id = (GroupKind::of(&desired), object_key(&desired));
        let next = apply_update(&world.children[&id], &desired).expect("apply");
        world.children.insert(id, next);
    }
    let plan = world.plan(&parent("v2"), UpdateMethod::RollingInPlace);
    assert_eq!(plan.updated.message, "updating Pod ns/p1");
    assert_eq!(
        plan.create[0]["children"][0]["names"],
        json!(["p2", "p3", "p1"])
    );
    assert_eq!(
        plan.delete.len(),
        1,
        "the old revision claims nothing any more"
    );
}

#[test]
fn bare_names_written_by_metacontroller_are_read_in_the_parent_namespace() {
    let mut world = World::new();
    world.execute(
        &world.plan(&parent("v1"), UpdateMethod::RollingInPlace),
        &all_ready,
    );
    world.revisions[0]["children"] =
        json!([{"apiGroup": "", "kind": "Pod", "names": ["p1", "p2", "p3"]}]);
    let plan = world.plan(&parent("v1"), UpdateMethod::RollingInPlace);
    assert_eq!(plan.updated.reason, "OnLatestRevision");
    // Already as bosun writes them: nothing to rewrite.
    assert!(plan.update.is_empty(), "{:?}", plan.update);
    // An earlier bosun's `namespace/name` is read too, and written as metacontroller's.
    world.revisions[0]["children"] =
        json!([{"apiGroup": "", "kind": "Pod", "names": ["ns/p1", "ns/p2", "ns/p3"]}]);
    let plan = world.plan(&parent("v1"), UpdateMethod::RollingInPlace);
    assert_eq!(plan.updated.reason, "OnLatestRevision");
    assert_eq!(
        plan.update[0]["children"][0]["names"],
        json!(["p1", "p2", "p3"])
    );
}

#[test]
fn non_rolling_kinds_are_never_claimed() {
    let world = World::new();
    let plan = world.plan(&parent("v1"), UpdateMethod::OnDelete);
    assert_eq!(plan.updated.reason, "OnLatestRevision");
    assert!(plan.create[0].get("children").is_none());
}

#[test]
fn the_updated_condition_is_replaced_by_type_and_a_null_status_is_an_object() {
    let cond = UpdatedCondition::new(false, "RolloutWaiting", "x".into());
    let p = parent("v1");
    assert_eq!(
        with_condition(&Value::Null, &cond, &p).expect("status"),
        json!({"conditions": [cond.to_value()]})
    );
    let status = json!({"conditions": [
        {"type": "Other", "status": "True"},
        {"type": "Updated", "status": "True", "reason": "OnLatestRevision"}
    ]});
    assert_eq!(
        with_condition(&status, &cond, &p).expect("status")["conditions"],
        json!([{"type": "Other", "status": "True"}, cond.to_value()])
    );
    let err = with_condition(&json!({"conditions": "no"}), &cond, &p).expect_err("bad");
    assert_eq!(err.metric_label(), "status");
    assert!(with_condition(&json!("no"), &cond, &p).is_err());
}

#[test]
fn resync_takes_the_smallest_positive_value_and_finalized_needs_every_revision() {
    let mut world = World::new();
    world.execute(
        &world.plan(&parent("v1"), UpdateMethod::RollingInPlace),
        &all_ready,
    );
    let p = parent("v2");
    let field_paths = vec![];
    let revisions = parent_revisions(&p, &world.revisions, &field_paths).expect("revisions");
    assert_eq!(revisions.items.len(), 2);
    assert_eq!(revisions.items[1].parent["spec"]["version"], json!("v1"));
    let mut answers: Vec<RevisionAnswer> =
        revisions.items.iter().map(|r| hook(&r.parent)).collect();
    answers[0].resync_after_seconds = 0.0;
    answers[0].finalized = true;
    answers[1].resync_after_seconds = 2.5;
    answers[1].finalized = false;
    let observed = world.observed();
    let strategies = strategies(UpdateMethod::RollingInPlace);
    let input = RolloutInput {
        parent: &p,
        parent_group: "ctl.example.com",
        parent_plural: "fleets",
        generate_selector: true,
        revisions: &revisions,
        answers: &answers,
        observed: &observed,
        strategies: &strategies,
        apply_strategy: ApplyStrategy::DynamicApply,
    };
    let plan = plan(&input).expect("plan");
    assert_eq!(plan.resync_after_seconds, 2.5);
    assert!(!plan.finalized);
    // generateSelector: children and the new revision carry controller-uid.
    assert!(
        plan.children
            .iter()
            .all(|c| c["metadata"]["labels"][LABEL_CONTROLLER_UID] == "p-uid")
    );
    assert_eq!(
        plan.create[0]["metadata"]["labels"][LABEL_CONTROLLER_UID],
        json!("p-uid")
    );

    let short = RolloutInput {
        answers: &answers[..1],
        ..input
    };
    let err = super::plan(&short).expect_err("count");
    assert_eq!(err.metric_label(), "answer_count");
}

#[test]
fn a_broken_revision_is_named() {
    let bad = json!({"metadata": {"name": "r", "namespace": "ns"}, "parentPatch": "x"});
    let err = parent_revisions(&parent("v1"), &[bad], &[]).expect_err("bad patch");
    assert_eq!(
        err.to_string(),
        "ControllerRevision ns/r: parentPatch is not a JSON object"
    );
}

#[test]
fn patches_copy_only_the_field_paths() {
    let p = json!({"spec": {"a": {"b": 1, "c": 2}, "d": 3}, "status": {"x": 1}});
    assert_eq!(
        make_patch(
            &p,
            &["spec.a.b".into(), "spec.d".into(), "spec.none".into()]
        ),
        json!({"spec": {"a": {"b": 1}, "d": 3}})
    );
    assert_eq!(make_patch(&p, &[]), json!({"spec": p["spec"]}));
    assert_eq!(make_patch(&p, &["spec.d.deeper".into()]), json!({}));
    let virtual_parent = apply_patch(
        &p,
        &json!({"spec": {"a": {"b": 9}}}),
        &["spec.a.b".into(), "spec.d".into()],
    );
    assert_eq!(
        virtual_parent["spec"],
        json!({"a": {"b": 9, "c": 2}, "d": 3})
    );
}

#[test]
fn revision_names_use_core_for_the_core_group_and_fit_in_253() {
    let name = revision_name("pods", "", "uid", "{}");
    assert!(name.starts_with("pods.core-"), "{name}");
    assert_eq!(name.len(), "pods.core-".len() + 40);
    let long = revision_name(&"x".repeat(300), "g", "uid", "{}");
    assert_eq!(long.len(), 253);
    // Go: hex(sha1("uid" + "{}")).
    assert_eq!(name, format!("pods.core-{}", hex(&sha1(b"uid{}"))));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn sha1_matches_the_standard_test_vectors() {
    assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    assert_eq!(
        hex(&sha1(b"abc")),
        "a9993e364706816aba3e25717850c26c9cd0d89d"
    );
    assert_eq!(
        hex(&sha1(
            b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
        )),
        "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
    );
    assert_eq!(
        hex(&sha1(&vec![b'a'; 1_000_000])),
        "34aa973cd4c4daa4f61eeb2bdbad27316534016f"
    );
    // 55 and 56 bytes: the padding boundary.
    assert_eq!(
        hex(&sha1(&[b'a'; 55])),
        "c1c8bbdc22796e28c0e15163d20899b65621d65a"
    );
    assert_eq!(
        hex(&sha1(&[b'a'; 56])),
        "c2db330f6083854c99d4b5bfb6e8f29f201be699"
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the pods' readiness and wherever a sync stops between persisting the
        /// revisions and writing the children, each sync moves at most one pod to the
        /// latest revision, a pod is only ever desired at the version of the revision
        /// claiming it, and once the pods stay ready the rollout ends on the latest.
        #[test]
        fn a_rollout_survives_flaky_pods_and_interrupted_syncs(
            method in prop_oneof![Just(UpdateMethod::RollingInPlace), Just(UpdateMethod::RollingRecreate)],
            steps in prop::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 0..12),
        ) {
            let mut world = World::new();
            world.execute(&world.plan(&parent("v1"), method), &all_ready);
            let v2 = parent("v2");
            let on_latest = |world: &World| -> usize {
                world.revisions.iter()
                    .filter(|r| r["parentPatch"]["spec"]["version"] == "v2")
                    .map(|r| r["children"][0]["names"].as_array().map_or(0, Vec::len))
                    .sum()
            };
            // Flaky phase: readiness of p1/p2 and interruptions chosen by the test case.
            for (p1_ready, p2_ready, interrupted) in steps {
                let before = on_latest(&world);
                let plan = world.plan(&v2, method);
                for child in plan.children.iter().filter(|c| c["kind"] == "Pod") {
                    let key = object_key(child);
                    // Revisions name a child of the parent's namespace by its bare name.
                    let bare = key.rsplit('/').next().unwrap_or_default();
                    let claimed_by_v2 = plan.create.iter().chain(&plan.update)
                        .chain(world.revisions.iter())
                        .filter(|r| r["parentPatch"]["spec"]["version"] == "v2")
                        .any(|r| r["children"][0]["names"].as_array()
                            .is_some_and(|n| n.contains(&json!(bare))));
                    let want = if claimed_by_v2 { "v2" } else { "v1" };
                    prop_assert_eq!(&child["spec"]["version"], want, "{}", key);
                }
                let mut plan = plan;
                if interrupted {
                    plan.children.clear();
                }
                world.execute(&plan, &|name: &str| match name {
                    "ns/p1" => p1_ready,
                    "ns/p2" => p2_ready,
                    _ => true,
                });
                prop_assert!(on_latest(&world) <= before + 1, "more than one pod moved");
            }
            // Then everything is ready and nothing is interrupted.
            let mut done = false;
            for _ in 0..10 {
                let plan = world.plan(&v2, method);
                // As upstream, the rollout is on the latest revision once every pod is
                // claimed by it; the last one is written in that same sync.
                world.execute(&plan, &all_ready);
                if plan.updated.reason == "OnLatestRevision" {
                    done = true;
                    break;
                }
            }
            prop_assert!(done, "the rollout did not finish");
            prop_assert_eq!(world.revisions.len(), 1);
            for name in ["p1", "p2", "p3"] {
                prop_assert_eq!(world.pod_version(name), json!("v2"));
            }
        }
    }
}
