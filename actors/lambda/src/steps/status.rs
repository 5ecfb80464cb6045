//! The status step: the status an answer asked for, written when it differs.

use serde_json::Value;

use crate::keys::{name_of, namespace_of, uid_of};
use crate::ports::{Cluster, ClusterError, Resource};

/// Writes `status` (with `observedGeneration`) when it differs from the live object's.
/// Returns whether it wrote.
pub async fn write_status(
    cluster: &dyn Cluster,
    resource: &Resource,
    object: &Value,
    status: Value,
) -> Result<bool, ClusterError> {
    let (ns, name, uid) = (namespace_of(object), name_of(object), uid_of(object));
    // The informer's copy first: an unchanged status costs no request at all. (If the
    // cache is behind, the watch event that brings it up to date syncs the parent again.)
    // A changed status is written on the cached copy first (its resourceVersion guards the
    // write); only a conflict costs a read of the live object.
    let mut first = match cluster.cached(resource, ns, name).await {
        Ok(Some(cached)) if uid_of(&cached) == uid => {
            if cached["status"] == status {
                return Ok(false);
            }
            Some((*cached).clone())
        }
        _ => None,
    };
    for _ in 0..4 {
        let read = match first.take() {
            Some(cached) => Ok(cached),
            None => cluster.get(resource, ns, name).await,
        };
        let mut live = match read {
            Ok(live) => live,
            Err(ClusterError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        if uid_of(&live) != uid {
            return Ok(false);
        }
        if live["status"] == status {
            return Ok(false);
        }
        live["status"] = status.clone();
        let result = if resource.status_subresource {
            cluster.replace_status(resource, live).await
        } else {
            cluster.replace(resource, live).await
        };
        match result {
            Ok(_) => return Ok(true),
            Err(ClusterError::Conflict(_)) => continue,
            Err(ClusterError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}
