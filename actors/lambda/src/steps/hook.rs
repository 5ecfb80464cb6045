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

/// FNV-1a over 8-byte words (the bytes left over one at a time), its end mixed: stable
/// and cheap, a request body of a few kilobytes in a fraction of the byte-wise loop's
/// time. It identifies a request or an answer in the views and the journal; it protects
/// nothing. Each step is a bijection of the state, so texts that differ in one word
/// always differ.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(PRIME);
    }
    for b in words.remainder() {
        h = (h ^ u64::from(*b)).wrapping_mul(PRIME);
    }
    // The multiplications carry a change only upwards: the end spreads it down too.
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ (h >> 32)
}

/// A [`digest`] as the journal and the views show it.
pub(crate) fn digest_text(h: u64) -> String {
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::fnv;

    #[test]
    fn texts_that_differ_in_one_byte_have_different_digests() {
        let text = br#"{"parent":{"metadata":{"name":"a","resourceVersion":"12"}}}"#;
        let base = fnv(text);
        assert_eq!(fnv(text), base, "the same text, the same digest");
        let mut seen = std::collections::HashSet::from([base]);
        for i in 0..text.len() {
            let mut changed = text.to_vec();
            changed[i] ^= 1;
            assert!(seen.insert(fnv(&changed)), "byte {i}");
        }
        // A text one byte longer or shorter, or empty.
        assert!(seen.insert(fnv(&text[..text.len() - 1])));
        assert!(seen.insert(fnv(&[text.as_slice(), b" "].concat())));
        assert!(seen.insert(fnv(b"")));
    }
}
