//! The last outcome of each key a subsystem reconciles, for its debug views and
//! `bosun explain`: when it ended, whether it failed and why, how many failures in a row,
//! when the key comes back, and what the subsystem keeps of it (`D`: a lambda sync's hook
//! and children, a DeployItem's phase).
//!
//! ```text
//!   runner ─► Reconciler::finished(key, Outcome) ─► LastOutcomes::record ─► debug views
//! ```
//!
//! A plain map, locked by its owner: the owner also decides what an outcome is (a lambda
//! sync, a DeployItem status written) and keeps what hangs off it (the deployer's phase
//! gauge) beside it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::clock::now_ms;

/// The last outcome of one key.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastOutcome<D> {
    /// When it was recorded, in unix milliseconds.
    pub at_ms: u64,
    /// Whether it ended without an error.
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Outcomes with an error in a row, this one included (0 after one without).
    #[serde(skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// When the key is reconciled again (a retry, a resync), if it is.
    #[serde(
        rename = "retryInMs",
        serialize_with = "as_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_in: Option<Duration>,
    /// What the subsystem keeps of it.
    #[serde(flatten)]
    pub detail: D,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn as_ms<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        None => s.serialize_none(),
    }
}

/// The last outcome of every key, in key order; serialized as a map of key to outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct LastOutcomes<K, D> {
    // Boxed: a map of many keys moves small nodes.
    entries: BTreeMap<K, Box<LastOutcome<D>>>,
}

impl<K, D> Default for LastOutcomes<K, D> {
    fn default() -> Self {
        LastOutcomes {
            entries: BTreeMap::new(),
        }
    }
}

impl<K: Ord, D> LastOutcomes<K, D> {
    /// No outcome yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an outcome of `key` now: `error` for a failed one, which counts on from
    /// the failures before it. Returns the outcome it replaces.
    pub fn record(
        &mut self,
        key: K,
        error: Option<String>,
        retry_in: Option<Duration>,
        detail: D,
    ) -> Option<LastOutcome<D>> {
        let failures_before = self.entries.get(&key).map_or(0, |l| l.failures);
        let outcome = LastOutcome {
            at_ms: now_ms(),
            ok: error.is_none(),
            failures: match error {
                Some(_) => failures_before.saturating_add(1),
                None => 0,
            },
            error,
            retry_in,
            detail,
        };
        match self.entries.entry(key) {
            std::collections::btree_map::Entry::Occupied(mut e) => {
                Some(std::mem::replace(e.get_mut().as_mut(), outcome))
            }
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(Box::new(outcome));
                None
            }
        }
    }

    /// Forgets `key` (its object is gone, or there was nothing to do).
    pub fn remove(&mut self, key: &K) -> Option<LastOutcome<D>> {
        self.entries.remove(key).map(|b| *b)
    }

    /// The last outcome of `key`.
    pub fn get(&self, key: &K) -> Option<&LastOutcome<D>> {
        self.entries.get(key).map(AsRef::as_ref)
    }

    /// Whether `key` has an outcome.
    pub fn contains_key(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// Every key's last outcome, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &LastOutcome<D>)> {
        self.entries.iter().map(|(k, v)| (k, v.as_ref()))
    }

    /// How many keys have an outcome.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key has an outcome.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Serialize, D: Serialize> Serialize for LastOutcomes<K, D> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(&self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Clone, Debug, Default, PartialEq, Serialize)]
    struct Detail {
        phase: Option<&'static str>,
    }

    #[test]
    fn failures_count_in_a_row_and_a_success_resets_them() {
        let mut last = LastOutcomes::new();
        let fail = |last: &mut LastOutcomes<&str, Detail>| {
            last.record(
                "a",
                Some("boom".into()),
                Some(Duration::from_millis(5)),
                Detail::default(),
            );
            last.get(&"a").map(|l| l.failures)
        };
        assert_eq!(fail(&mut last), Some(1));
        assert_eq!(fail(&mut last), Some(2));
        let before = last.record(
            "a",
            None,
            None,
            Detail {
                phase: Some("Succeeded"),
            },
        );
        assert_eq!(before.map(|b| (b.ok, b.failures)), Some((false, 2)));
        let now = last.get(&"a").expect("recorded");
        assert!(now.ok && now.failures == 0 && now.error.is_none());
        assert_eq!(fail(&mut last), Some(1));
        assert!(last.remove(&"a").is_some() && last.is_empty());
    }

    #[test]
    fn an_outcome_serializes_its_shared_parts_beside_the_detail() {
        let mut last = LastOutcomes::new();
        last.record(
            "ok",
            None,
            None,
            Detail {
                phase: Some("Init"),
            },
        );
        last.record(
            "failed",
            Some("boom".into()),
            Some(Duration::from_secs(2)),
            Detail::default(),
        );
        let mut v = serde_json::to_value(&last).expect("JSON");
        for key in ["ok", "failed"] {
            assert!(v[key]["atMs"].as_u64().is_some_and(|ms| ms > 0));
            v[key].as_object_mut().map(|o| o.remove("atMs"));
        }
        assert_eq!(
            v,
            json!({
                "ok": {"ok": true, "phase": "Init"},
                "failed": {"ok": false, "error": "boom", "failures": 1, "retryInMs": 2000, "phase": null},
            })
        );
    }
}
