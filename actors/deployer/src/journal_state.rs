//! The deployer journal folded into what it says each DeployItem was: the state
//! `bosun journal replay` and `bosun journal diff --journal` show. Nothing is replayed
//! into the deployer (the items' status is its state); this is the journal's view.
//!
//! ```text
//!   Record<DeployerEvent> ──► fold ──► BTreeMap<deployitem/ns/name, ItemState>
//! ```

use std::collections::BTreeMap;

use bosun_journal::Record;
use serde::Serialize;

use crate::events::DeployerEvent;
use crate::item::Phase;

/// One DeployItem as the deployer's journal left it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemState {
    /// Its phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The generation of the last phase change.
    pub generation: i64,
    /// The job of the last phase change.
    #[serde(rename = "jobID", skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The last error recorded, until the item Succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The objects it manages (as of the last run that changed them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub managed: Vec<String>,
    /// Cleaned up and its finalizer removed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// The last record about it.
    pub seq: u64,
}

/// Folds one record into the deployer journal's state: items by `deployitem/ns/name`.
pub fn fold(state: &mut BTreeMap<String, ItemState>, r: &Record<DeployerEvent>) {
    let item = r.event.item().to_string();
    let s = state.entry(item).or_default();
    s.seq = r.seq;
    match &r.event {
        DeployerEvent::DeployItemPhase {
            to,
            generation,
            job_id,
            managed,
            ..
        } => {
            s.phase = Some(to.as_str().to_string());
            s.generation = *generation;
            s.job_id = job_id.clone();
            if let Some(m) = managed {
                s.managed = m.clone();
            }
            if *to == Phase::Succeeded {
                s.last_error = None;
            }
            s.deleted = false;
        }
        DeployerEvent::DeployItemError { .. } => {
            s.last_error = Some(r.event.line());
        }
        DeployerEvent::DeployItemFinalized { .. } => {
            s.deleted = true;
            s.managed.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<E>(seq: u64, event: E) -> Record<E> {
        Record {
            seq,
            time_ms: 1_000 * seq,
            version: 1,
            event,
        }
    }

    #[test]
    fn an_item_keeps_its_managed_objects_until_it_is_deleted() {
        let mut s = BTreeMap::new();
        let phase = |seq, to, managed: Option<Vec<String>>| {
            record(
                seq,
                DeployerEvent::DeployItemPhase {
                    item: "deployitem/default/a".into(),
                    from: None,
                    to,
                    generation: 1,
                    job_id: Some("j".into()),
                    managed,
                },
            )
        };
        fold(
            &mut s,
            &phase(
                1,
                Phase::Progressing,
                Some(vec!["ConfigMap default/x".into()]),
            ),
        );
        fold(&mut s, &phase(2, Phase::Succeeded, None));
        let a = &s["deployitem/default/a"];
        assert_eq!(a.phase.as_deref(), Some("Succeeded"));
        assert_eq!(a.managed, ["ConfigMap default/x"]);
        fold(
            &mut s,
            &record(
                3,
                DeployerEvent::DeployItemFinalized {
                    item: "deployitem/default/a".into(),
                },
            ),
        );
        let a = &s["deployitem/default/a"];
        assert!(a.deleted && a.managed.is_empty());
    }
}
