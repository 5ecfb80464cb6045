//! The garbage collector: owner-reference cascades (background, foreground, orphan) and
//! namespace termination. Runs as a background task woken after deletes, and like
//! kube-controller-manager's collector it is asynchronous: clients wait for conditions.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Notify;

use super::objects::{self, FOREGROUND, ORPHAN, Propagation};
use super::status::ApiError;
use super::store::{Inner, ObjectKey, ResKey, Store};

/// Runs collection passes whenever `wake` is notified, until the task is dropped.
pub async fn run(store: Arc<Store>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        // Collect until nothing changes: each pass may unblock the next.
        for _ in 0..64 {
            let mut inner = store.lock();
            let changed = match pass(&mut inner) {
                Ok(changed) => changed,
                Err(err) => {
                    tracing::error!(error = %err, "sandbox garbage collection pass failed");
                    false
                }
            };
            if let Err(err) = store.commit(inner) {
                tracing::error!(error = %err, "sandbox garbage collection commit failed");
            }
            if !changed {
                break;
            }
        }
    }
}

fn deleting(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

fn has_finalizer(obj: &Value, name: &str) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|v| v.as_str() == Some(name)))
}

/// What the first half of a pass decided for one dependent.
enum Verdict {
    /// Delete it with this propagation.
    Delete(Propagation),
    /// Keep only these owner references.
    Release(Vec<Value>),
}

/// One collection pass; returns whether anything changed. It reads only what the owner
/// index points at: objects being deleted, and the dependents of owners that are gone or
/// being deleted. Its cost does not grow with the store.
pub fn pass(inner: &mut Inner) -> Result<bool, ApiError> {
    let object = |inner: &Inner, (res, ns, name): &ObjectKey| inner.get(res, ns, name);
    let terminating: Vec<(ResKey, Arc<Value>)> = inner
        .owners
        .deleting()
        .filter_map(|key| object(inner, key).map(|o| (key.0.clone(), o)))
        .collect();
    let mut candidates: BTreeSet<ObjectKey> = BTreeSet::new();
    for uid in inner.owners.missing_owners() {
        candidates.extend(inner.owners.dependents_of(uid).cloned());
    }
    for (_, obj) in &terminating {
        if let Some(uid) = obj["metadata"]["uid"].as_str() {
            candidates.extend(inner.owners.dependents_of(uid).cloned());
        }
    }

    // Decide on the state the pass started from, then act.
    let owner_of = |uid: &str| inner.owners.locate(uid).and_then(|key| object(inner, key));
    let mut verdicts: Vec<(ResKey, Arc<Value>, Verdict)> = Vec::new();
    for key in &candidates {
        let Some(obj) = object(inner, key) else {
            continue;
        };
        let Some(refs) = obj["metadata"]["ownerReferences"]
            .as_array()
            .filter(|r| !r.is_empty())
        else {
            continue;
        };
        let mut keep = Vec::new();
        let mut foreground_owner = false;
        let mut orphaned = false;
        let mut any_present = false;
        for r in refs {
            match owner_of(r["uid"].as_str().unwrap_or_default()) {
                None => orphaned = true, // dangling: the owner is gone
                Some(owner) => {
                    any_present = true;
                    if deleting(&owner) && has_finalizer(&owner, ORPHAN) {
                        orphaned = true;
                    } else {
                        if deleting(&owner) && has_finalizer(&owner, FOREGROUND) {
                            foreground_owner = true;
                        }
                        keep.push(r.clone());
                    }
                }
            }
        }
        let dangling_all = keep.is_empty() && !any_present;
        let verdict = if dangling_all || foreground_owner {
            if deleting(&obj) {
                continue;
            }
            Verdict::Delete(if foreground_owner {
                Propagation::Foreground
            } else {
                Propagation::Background
            })
        } else if orphaned {
            // Drop references to orphaning or vanished owners, keep the others.
            Verdict::Release(keep)
        } else {
            continue;
        };
        verdicts.push((key.0.clone(), obj, verdict));
    }
    let mut changed = !verdicts.is_empty();
    for (res, obj, verdict) in verdicts {
        match verdict {
            Verdict::Delete(policy) => {
                objects::delete(inner, &res, &obj, policy, false)?;
            }
            Verdict::Release(keep) => objects::set_owner_references(inner, &res, &obj, keep)?,
        }
    }

    for (res, obj) in &terminating {
        let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
        // Orphaned dependents were released above (or in an earlier pass); a foreground
        // owner waits until its last dependent is gone.
        let waits_for = if has_finalizer(obj, ORPHAN) {
            Some(ORPHAN)
        } else if has_finalizer(obj, FOREGROUND) && !inner.owners.has_dependents(uid) {
            Some(FOREGROUND)
        } else {
            None
        };
        if let Some(finalizer) = waits_for
            && let Some(current) = inner.get(res, &ns(obj), &name(obj))
        {
            objects::drop_finalizer(inner, res, &current, finalizer)?;
            changed = true;
        }
        if res.group.is_empty() && res.plural == "namespaces" {
            changed |= terminate_namespace(inner, obj)?;
        }
    }
    Ok(changed)
}

fn ns(obj: &Value) -> String {
    obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Deletes everything in a terminating namespace; removes the namespace once it is empty.
fn terminate_namespace(inner: &mut Inner, ns_obj: &Arc<Value>) -> Result<bool, ApiError> {
    let ns_name = name(ns_obj);
    let namespaced: Vec<ResKey> = inner
        .resources
        .iter()
        .filter(|r| r.namespaced)
        .map(ResKey::of)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut changed = false;
    let mut remaining = 0usize;
    for res in namespaced {
        for obj in inner.list(&res, Some(&ns_name)) {
            remaining += 1;
            if !deleting(&obj) {
                objects::delete(inner, &res, &obj, Propagation::Background, false)?;
                changed = true;
            }
        }
    }
    let has_meta_finalizers = ns_obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if remaining == 0
        && !has_meta_finalizers
        && let Some(current) = inner.get(
            &ResKey {
                group: String::new(),
                plural: "namespaces".into(),
            },
            "",
            &ns_name,
        )
    {
        objects::remove_namespace(inner, &current)?;
        changed = true;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn configmaps() -> ResKey {
        ResKey {
            group: String::new(),
            plural: "configmaps".into(),
        }
    }

    fn put(inner: &mut Inner, name: &str, uid: &str, owners: &[&str]) {
        let refs: Vec<Value> = owners
            .iter()
            .map(|o| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o, "uid": o}))
            .collect();
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "uid": uid}});
        if !refs.is_empty() {
            obj["metadata"]["ownerReferences"] = json!(refs);
        }
        let rv = inner.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        inner.put(&configmaps(), obj, rv).expect("put");
    }

    fn names(inner: &Inner) -> Vec<String> {
        inner
            .list(&configmaps(), None)
            .iter()
            .map(|o| name(o))
            .collect()
    }

    #[test]
    fn a_pass_collects_what_the_index_points_at_and_the_index_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let store = Store::open(dir.path(), 100).expect("store");
            let mut inner = store.lock();
            put(&mut inner, "owner", "owner", &[]);
            put(&mut inner, "child", "child", &["owner"]);
            put(&mut inner, "shared", "shared", &["owner", "other"]);
            put(&mut inner, "other", "other", &[]);
            // Many unrelated objects: the pass has nothing to do with them.
            for i in 0..200 {
                put(&mut inner, &format!("bystander-{i}"), &format!("b{i}"), &[]);
            }
            assert!(
                !pass(&mut inner).expect("pass"),
                "live owners: nothing to do"
            );
            assert!(inner.owners.has_dependents("owner"));
            store.commit(inner).expect("commit");
        }
        // Reopened, the index is rebuilt from the stored objects.
        let store = Store::open(dir.path(), 100).expect("store");
        let mut inner = store.lock();
        assert_eq!(
            inner.owners.dependents_of("owner").count(),
            2,
            "child and shared name the owner"
        );
        let owner = inner.get(&configmaps(), "default", "owner").expect("owner");
        objects::delete(
            &mut inner,
            &configmaps(),
            &owner,
            Propagation::Background,
            false,
        )
        .expect("delete");
        assert_eq!(inner.owners.missing_owners().collect::<Vec<_>>(), ["owner"]);
        while pass(&mut inner).expect("pass") {}
        let left = names(&inner);
        assert!(!left.contains(&"child".to_string()), "{left:?}");
        assert!(
            left.contains(&"shared".to_string()),
            "another owner keeps it"
        );
        let shared = inner
            .get(&configmaps(), "default", "shared")
            .expect("shared");
        assert_eq!(
            shared["metadata"]["ownerReferences"][0]["uid"], "other",
            "the vanished owner's reference is dropped"
        );
        assert_eq!(inner.owners.missing_owners().count(), 0);
        assert_eq!(left.len(), 202);
    }

    #[test]
    fn a_foreground_owner_waits_for_its_dependents_and_an_orphaning_one_releases_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), 100).expect("store");
        let mut inner = store.lock();
        put(&mut inner, "fg", "fg", &[]);
        put(&mut inner, "fg-child", "fg-child", &["fg"]);
        put(&mut inner, "orphaner", "orphaner", &[]);
        put(&mut inner, "kept", "kept", &["orphaner"]);
        for (owner, policy) in [
            ("fg", Propagation::Foreground),
            ("orphaner", Propagation::Orphan),
        ] {
            let obj = inner.get(&configmaps(), "default", owner).expect(owner);
            objects::delete(&mut inner, &configmaps(), &obj, policy, false).expect("delete");
        }
        assert_eq!(inner.owners.deleting().count(), 2);
        while pass(&mut inner).expect("pass") {}
        assert_eq!(names(&inner), ["kept"]);
        let kept = inner.get(&configmaps(), "default", "kept").expect("kept");
        assert!(kept["metadata"]["ownerReferences"].is_null());
        assert_eq!(inner.owners.deleting().count(), 0);
    }
}
