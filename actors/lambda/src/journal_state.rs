//! The lambda journal folded into what it says each controller and parent was: the state
//! `bosun journal replay` and `bosun journal diff --journal` show. Nothing is replayed
//! into the running controllers (the cluster is their state); this is the journal's view.
//!
//! ```text
//!   Record<LambdaEvent> ──► fold ──► BTreeMap<controller, ControllerState { parents }>
//! ```

use std::collections::BTreeMap;

use bosun_journal::Record;
use serde::Serialize;

use crate::events::LambdaEvent;

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

/// Folds one record into the lambda journal's state: controllers and their parents.
pub fn fold(state: &mut BTreeMap<String, ControllerState>, r: &Record<LambdaEvent>) {
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
                    time: r.time_text(),
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
                    time: r.time_text(),
                },
            );
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
        fold(&mut s, &failed(1));
        fold(&mut s, &failed(2));
        assert_eq!(
            s["c"].parents["default/p"].failures, 2,
            "counted even without the field"
        );
        fold(
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
}
