//! The finalizer step: the controller's finalizer on the object while a finalize hook
//! is configured, off it otherwise.

use serde_json::Value;

use crate::keys::{has_finalizer, is_deleting, key_of, name_of, namespace_of, uid_of};
use crate::ports::{Cluster, ClusterError, Resource};

/// What the finalizer step does to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerChange {
    Add,
    Remove,
}

impl FinalizerChange {
    /// The change an object needs: add the finalizer when a finalize hook is configured,
    /// the object is `eligible` (a decorator's object must match its rule) and not being
    /// deleted; remove it when no finalize hook is configured. `None`: as it is.
    pub fn decide(
        object: &Value,
        finalizer: &str,
        finalize_hook: bool,
        eligible: bool,
    ) -> Option<FinalizerChange> {
        let has = has_finalizer(object, finalizer);
        if finalize_hook && eligible && !has && !is_deleting(object) {
            Some(FinalizerChange::Add)
        } else if !finalize_hook && has {
            Some(FinalizerChange::Remove)
        } else {
            None
        }
    }

    /// Applies the change (see [`set_finalizer`]).
    pub async fn apply(
        self,
        cluster: &dyn Cluster,
        resource: &Resource,
        object: &Value,
        finalizer: &str,
    ) -> Result<Value, ClusterError> {
        let present = self == FinalizerChange::Add;
        set_finalizer(cluster, resource, object, finalizer, present).await
    }
}

/// Adds or removes `finalizer` with GET + PUT, retried on conflict; the uid must stay.
/// Returns the updated object (or the unchanged one when nothing was to do).
pub async fn set_finalizer(
    cluster: &dyn Cluster,
    resource: &Resource,
    object: &Value,
    finalizer: &str,
    present: bool,
) -> Result<Value, ClusterError> {
    let (ns, name, uid) = (namespace_of(object), name_of(object), uid_of(object));
    let mut last = None;
    for _ in 0..4 {
        let mut live = cluster.get(resource, ns, name).await?;
        if uid_of(&live) != uid {
            return Err(ClusterError::NotFound(format!(
                "{} {}",
                resource.kind,
                key_of(object)
            )));
        }
        if has_finalizer(&live, finalizer) == present {
            return Ok(live);
        }
        let mut list = live["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if present {
            list.push(Value::String(finalizer.to_string()));
        } else {
            list.retain(|f| f.as_str() != Some(finalizer));
        }
        live["metadata"]["finalizers"] = Value::Array(list);
        match cluster.replace(resource, live).await {
            Ok(updated) => return Ok(updated),
            Err(e @ ClusterError::Conflict(_)) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| ClusterError::Conflict(key_of(object))))
}
