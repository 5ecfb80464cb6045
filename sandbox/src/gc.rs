//! The garbage collector: owner-reference cascades (background, foreground, orphan) and
//! namespace termination. Runs as a background task woken after deletes, and like
//! kube-controller-manager's collector it is asynchronous: clients wait for conditions.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Notify;

use super::objects::{self, FOREGROUND, ORPHAN, Propagation};
use super::status::ApiError;
use super::store::{Inner, ResKey, Store};

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

/// One collection pass; returns whether anything changed.
pub fn pass(inner: &mut Inner) -> Result<bool, ApiError> {
    let all: Vec<(ResKey, Arc<Value>)> = inner
        .objects
        .iter()
        .flat_map(|(k, m)| m.values().map(move |o| (k.clone(), o.clone())))
        .collect();
    let by_uid: HashMap<&str, &Arc<Value>> = all
        .iter()
        .filter_map(|(_, o)| o["metadata"]["uid"].as_str().map(|u| (u, o)))
        .collect();
    let mut changed = false;
    let mut has_dependents: HashSet<String> = HashSet::new();

    for (res, obj) in &all {
        let Some(refs) = obj["metadata"]["ownerReferences"].as_array() else {
            continue;
        };
        if refs.is_empty() {
            continue;
        }
        let mut keep = Vec::new();
        let mut foreground_owner = false;
        let mut orphaned = false;
        for r in refs {
            let uid = r["uid"].as_str().unwrap_or_default();
            match by_uid.get(uid) {
                None => orphaned = true, // dangling: the owner is gone
                Some(owner) if deleting(owner) && has_finalizer(owner, ORPHAN) => orphaned = true,
                Some(owner) => {
                    if deleting(owner) && has_finalizer(owner, FOREGROUND) {
                        foreground_owner = true;
                    }
                    has_dependents.insert(uid.to_string());
                    keep.push(r.clone());
                }
            }
        }
        let dangling_all = keep.is_empty()
            && refs
                .iter()
                .all(|r| !by_uid.contains_key(r["uid"].as_str().unwrap_or_default()));
        if dangling_all || foreground_owner {
            if !deleting(obj) {
                let policy = if foreground_owner {
                    Propagation::Foreground
                } else {
                    Propagation::Background
                };
                objects::delete(inner, res, obj, policy, false)?;
                changed = true;
            }
        } else if orphaned {
            // Drop references to orphaning or vanished owners, keep the others.
            objects::set_owner_references(inner, res, obj, keep)?;
            changed = true;
        }
    }

    for (res, obj) in &all {
        if !deleting(obj) {
            continue;
        }
        let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
        if has_finalizer(obj, ORPHAN) {
            // Dependents were released above (or in an earlier pass).
            if (!has_dependents.contains(uid) || !any_dependent(&all, uid))
                && let Some(current) = inner.get(res, &ns(obj), &name(obj))
            {
                objects::drop_finalizer(inner, res, &current, ORPHAN)?;
                changed = true;
            }
        } else if has_finalizer(obj, FOREGROUND)
            && !any_dependent(&all, uid)
            && let Some(current) = inner.get(res, &ns(obj), &name(obj))
        {
            objects::drop_finalizer(inner, res, &current, FOREGROUND)?;
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

fn any_dependent(all: &[(ResKey, Arc<Value>)], uid: &str) -> bool {
    all.iter().any(|(_, o)| {
        o["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
    })
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
