//! The hook step: a hook bound to its client, one call, and the related objects the
//! customize hook selects for the request.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::SyncError;
use crate::keys::GroupMap;
use crate::ports::{Cluster, HookClient};
use crate::related::{Customizer, RelatedError, cache_key, related_objects};
use crate::types::Hook;

/// A hook ready to call.
#[derive(Clone)]
pub struct BoundHook {
    pub hook: Hook,
    pub client: Arc<dyn HookClient>,
}

/// The related objects the controller's customize hook selects for `parent` (none without
/// a customize hook). A 429 from the hook is retried after its delay, as for any hook.
pub(crate) async fn related_of(
    cluster: &dyn Cluster,
    customizer: Option<&Customizer>,
    controller: &Value,
    parent: &Value,
) -> Result<GroupMap, SyncError> {
    let Some(c) = customizer else {
        return Ok(GroupMap::new());
    };
    let rules = c.rules(controller, parent).await.map_err(|e| match e {
        RelatedError::Hook(h) => SyncError::from(h),
        other => SyncError::transient(other.to_string()),
    })?;
    related_objects(cluster, &rules, c.version(), parent)
        .await
        .map_err(|e| SyncError::transient(e.to_string()))
}

/// POSTs a hook request (JSON bytes) about `root`; returns the answer and the request's
/// digest.
pub(crate) async fn call_hook(
    bound: &BoundHook,
    body: Vec<u8>,
    root: &Value,
) -> Result<(Bytes, String), SyncError> {
    let request_digest = digest(&body);
    let answer = bound
        .client
        .call(Bytes::from(body), cache_key(root))
        .await?;
    Ok((answer, request_digest))
}

/// A short digest of a hook answer for the journal and debug views.
pub fn digest(bytes: &[u8]) -> String {
    digest_text(fnv(bytes))
}

/// FNV-1a: stable and cheap; it identifies an answer, it protects nothing.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A [`digest`] as the journal and the views show it.
pub(crate) fn digest_text(h: u64) -> String {
    format!("{h:016x}")
}
