//! `bosun journal replay` and `bosun journal diff --journal`: the state of any of the
//! three journals at a point. The modules' state is the engine's own fold
//! ([`bosun_addon::State`]); the lambda controllers' and the deployer's are folded here,
//! because nothing is replayed into those subsystems (the cluster is their state): what the
//! journal says each controller, parent and item was at that point.

use std::collections::BTreeMap;

use bosun_deployer::events::DeployerEvent;
use bosun_journal::{Journal, Record};
use bosun_lambda::events::LambdaEvent;
use serde::Serialize;

use crate::debug::journal_views::format_ms;

/// One lambda controller as the journal left it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerState {
    /// `CompositeController` or `DecoratorController`.
    pub kind: String,
    /// `running`, `stopped` or `refused`.
    pub state: String,
    /// The generation it last started with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Why it stopped or was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its parents' last outcomes, by key.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub parents: BTreeMap<String, ParentState>,
}

/// A parent's last journaled outcome.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentState {
    /// Whether the last sync was applied.
    pub converged: bool,
    /// The hook and the digest of its last applied answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_answer: Option<String>,
    /// The last failure, while not converged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Failures in a row.
    #[serde(skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// The record that said so.
    pub seq: u64,
    /// When.
    pub time: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The lambda journal's state: controllers and their parents.
pub fn fold_lambda(state: &mut BTreeMap<String, ControllerState>, r: &Record<LambdaEvent>) {
    match &r.event {
        LambdaEvent::ControllerStarted {
            kind,
            name,
            generation,
            ..
        } => {
            let c = state.entry(name.clone()).or_default();
            c.kind = kind.to_string();
            c.state = "running".into();
            c.generation = Some(*generation);
            c.reason = None;
        }
        LambdaEvent::ControllerStopped { kind, name, reason } => {
            let c = state.entry(name.clone()).or_default();
            c.kind = kind.to_string();
            c.state = "stopped".into();
            c.reason = Some(reason.clone());
        }
        LambdaEvent::ControllerRefused { kind, name, error } => {
            let c = state.entry(name.clone()).or_default();
            c.kind = kind.to_string();
            c.state = "refused".into();
            c.reason = Some(error.clone());
        }
        LambdaEvent::Synced {
            controller,
            key,
            hook,
            answer,
            ..
        } => {
            state.entry(controller.clone()).or_default().parents.insert(
                key.clone(),
                ParentState {
                    converged: true,
                    last_answer: Some(format!("{hook} {answer}")),
                    error: None,
                    failures: 0,
                    seq: r.seq,
                    time: format_ms(r.time_ms),
                },
            );
        }
        LambdaEvent::SyncFailed {
            controller,
            key,
            error,
            failures,
            ..
        } => {
            let parents = &mut state.entry(controller.clone()).or_default().parents;
            let previous = parents.remove(key).unwrap_or_default();
            parents.insert(
                key.clone(),
                ParentState {
                    converged: false,
                    last_answer: previous.last_answer,
                    error: Some(error.clone()),
                    failures: (*failures).max(previous.failures + 1),
                    seq: r.seq,
                    time: format_ms(r.time_ms),
                },
            );
        }
    }
}

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

/// The deployer journal's state: items.
pub fn fold_deployer(state: &mut BTreeMap<String, ItemState>, r: &Record<DeployerEvent>) {
    let item = crate::deployer::journal_log::item_of(&r.event).to_string();
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
            if *to == bosun_deployer::item::Phase::Succeeded {
                s.last_error = None;
            }
            s.deleted = false;
        }
        DeployerEvent::DeployItemError { .. } => {
            s.last_error = Some(crate::deployer::journal_log::line(&r.event));
        }
        DeployerEvent::DeployItemFinalized { .. } => {
            s.deleted = true;
            s.managed.clear();
        }
    }
}

/// Folds `journal` up to `until` (the end when `None`) with `fold`.
pub fn replay<E, S: Default>(
    journal: &Journal<E>,
    until: Option<u64>,
    mut fold: impl FnMut(&mut S, &Record<E>),
) -> Result<S, bosun_journal::JournalError>
where
    E: Serialize + serde::de::DeserializeOwned + bosun_journal::Versioned,
{
    let mut state = S::default();
    for r in journal.read_from(1) {
        let r = r?;
        if until.is_some_and(|u| r.seq > u) {
            break;
        }
        fold(&mut state, &r);
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bosun_deployer::item::Phase;

    fn record<E>(seq: u64, event: E) -> Record<E> {
        Record {
            seq,
            time_ms: 1_000 * seq,
            version: 1,
            event,
        }
    }

    #[test]
    fn a_parent_s_failures_count_and_a_success_clears_them() {
        let mut s = BTreeMap::new();
        let failed = |seq| {
            record(
                seq,
                LambdaEvent::SyncFailed {
                    controller: "c".into(),
                    key: "default/p".into(),
                    error: "500".into(),
                    retry_in_ms: 5,
                    failures: 0,
                },
            )
        };
        fold_lambda(&mut s, &failed(1));
        fold_lambda(&mut s, &failed(2));
        assert_eq!(
            s["c"].parents["default/p"].failures, 2,
            "counted even without the field"
        );
        fold_lambda(
            &mut s,
            &record(
                3,
                LambdaEvent::Synced {
                    controller: "c".into(),
                    key: "default/p".into(),
                    hook: "sync".into(),
                    answer: "abc".into(),
                    created: vec![],
                    updated: vec![],
                    deleted: vec![],
                    status_written: false,
                    finalized: false,
                },
            ),
        );
        let p = &s["c"].parents["default/p"];
        assert!(p.converged && p.error.is_none() && p.failures == 0 && p.seq == 3);
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
        fold_deployer(
            &mut s,
            &phase(
                1,
                Phase::Progressing,
                Some(vec!["ConfigMap default/x".into()]),
            ),
        );
        fold_deployer(&mut s, &phase(2, Phase::Succeeded, None));
        let a = &s["deployitem/default/a"];
        assert_eq!(a.phase.as_deref(), Some("Succeeded"));
        assert_eq!(a.managed, ["ConfigMap default/x"]);
        fold_deployer(
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
