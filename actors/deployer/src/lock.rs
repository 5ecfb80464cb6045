//! landscaper's per-item lock between deployer replicas that serve the same targets: a
//! `SyncObject` (`landscaper.gardener.cloud/v1alpha1`) named `<prefix>-<item uid>` in the
//! item's namespace, `spec: {podName, kind: DeployItem, name, lastUpdateTime, prefix}`.
//! Whoever creates it holds it; the holder keeps it while the item is in flight and frees
//! it (`podName: ""`) when the item is done; a free lock, or one whose holder pod is gone,
//! is taken over with an update (a conflict means another replica was faster). Pure: what
//! the lock object says; the cluster port creates, reads and updates it.

use serde_json::{Value, json};

/// The kind the SyncObjects of this deployer lock.
pub const KIND: &str = "DeployItem";

/// The SyncObject's name for an item.
pub fn name(prefix: &str, uid: &str) -> String {
    format!("{prefix}-{uid}")
}

/// A SyncObject held by `holder` for the item `item_name` in `namespace`.
pub fn sync_object(
    namespace: &str,
    item_name: &str,
    uid: &str,
    prefix: &str,
    holder: &str,
    now: &str,
) -> Value {
    json!({
        "apiVersion": "landscaper.gardener.cloud/v1alpha1",
        "kind": "SyncObject",
        "metadata": {"name": name(prefix, uid), "namespace": namespace},
        "spec": {"podName": holder, "kind": KIND, "name": item_name, "lastUpdateTime": now, "prefix": prefix},
    })
}

/// What an existing SyncObject means for `holder`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// `holder` holds it.
    Ours,
    /// Free, or its holder pod is gone: take it over.
    Take,
    /// Another live replica holds it.
    Held(String),
}

/// Reads `existing` for `holder`; `alive` says whether a pod of that name exists.
pub fn found(existing: &Value, holder: &str, alive: impl FnOnce(&str) -> bool) -> Found {
    let pod = existing["spec"]["podName"].as_str().unwrap_or_default();
    if pod == holder {
        Found::Ours
    } else if pod.is_empty() || !alive(pod) {
        Found::Take
    } else {
        Found::Held(pod.to_string())
    }
}

/// `existing` handed to `holder` (or freed with an empty `holder`) at `now`.
pub fn held_by(existing: &Value, holder: &str, now: &str) -> Value {
    let mut o = existing.clone();
    o["spec"]["podName"] = json!(holder);
    o["spec"]["lastUpdateTime"] = json!(now);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_ours_free_taken_from_a_gone_pod_or_held() {
        let o = sync_object("ns", "di", "u1", "bosun", "pod-a", "t");
        assert_eq!(o["metadata"]["name"], "bosun-u1");
        assert_eq!(found(&o, "pod-a", |_| true), Found::Ours);
        assert_eq!(found(&o, "pod-b", |_| true), Found::Held("pod-a".into()));
        assert_eq!(
            found(&o, "pod-b", |p| p != "pod-a"),
            Found::Take,
            "its holder pod is gone"
        );
        let freed = held_by(&o, "", "t2");
        assert_eq!(found(&freed, "pod-b", |_| true), Found::Take);
        assert_eq!(freed["spec"]["lastUpdateTime"], "t2");
    }
}
