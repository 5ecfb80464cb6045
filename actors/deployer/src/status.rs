//! Status bookkeeping shared by every step: starting a run, recording an error as
//! landscaper does (`lastError`, `firstError`, the last five in `lastErrors`), and
//! finishing a run (final phase, `jobIDFinished`, `finishedTime`) in one status write.

use std::time::SystemTime;

use crate::item::{
    DeployerInfo, ErrorCode, ItemError, Phase, Status, TransitionTimes, format_time,
};

/// How many errors `lastErrors` keeps.
pub(crate) const LAST_ERRORS: usize = 5;

/// An error a step of the deployer or a type reports: what was being done, why, and codes.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{operation}: {reason}: {message}")]
pub struct DeployError {
    pub operation: String,
    pub reason: String,
    pub message: String,
    pub codes: Vec<ErrorCode>,
    /// Conditions the type sets with the error (the mock's `DeployItemValidation=False`
    /// on a configuration it cannot read, as landscaper's).
    pub conditions: Vec<serde_json::Value>,
}

impl DeployError {
    pub fn new(
        operation: &str,
        reason: &str,
        message: impl Into<String>,
        codes: &[ErrorCode],
    ) -> DeployError {
        DeployError {
            operation: operation.to_string(),
            reason: reason.to_string(),
            message: message.into(),
            codes: codes.to_vec(),
            conditions: Vec::new(),
        }
    }

    /// The error with `conditions` for the item's status.
    pub fn with_conditions(mut self, conditions: Vec<serde_json::Value>) -> DeployError {
        self.conditions = conditions;
        self
    }

    /// A configuration the deployer cannot use: fails at once.
    pub fn config(operation: &str, reason: &str, message: impl Into<String>) -> DeployError {
        DeployError::new(
            operation,
            reason,
            message,
            &[ErrorCode::ConfigurationProblem],
        )
    }

    /// Whether the item fails at once instead of being retried.
    pub fn is_unrecoverable(&self) -> bool {
        self.codes.iter().any(|c| c.is_unrecoverable())
    }

    /// The first code, for metric labels and logs (`""` when none).
    pub fn code_label(&self) -> &'static str {
        self.codes.first().map_or("", |c| c.as_str())
    }
}

/// Starts a run: phase `Init` (`InitDelete` when deleting), the generation observed,
/// `lastReconcileTime` and `initTime` now, the deployer named, errors of the last run gone.
pub(crate) fn start_run(
    status: &mut Status,
    generation: i64,
    deleting: bool,
    deployer: &DeployerInfo,
    now: SystemTime,
) {
    let now_s = format_time(now);
    status.phase = Some(if deleting {
        Phase::InitDelete
    } else {
        Phase::Init
    });
    status.observed_generation = generation;
    status.last_reconcile_time = Some(now_s.clone());
    let mut times = status.transition_times.take().unwrap_or_default();
    times.init_time = Some(now_s);
    times.finished_time = None;
    status.transition_times = Some(times);
    status.deployer = Some(deployer.clone());
    status.last_error = None;
    status.first_error = None;
    status.last_errors.clear();
}

/// Records `error` as landscaper's `UpdatedError` does: the transition time is kept while
/// the operation stays the same; the update time moves only when something changed.
pub(crate) fn record_error(status: &mut Status, error: &DeployError, now: SystemTime) {
    let now_s = format_time(now);
    let mut new = ItemError {
        operation: error.operation.clone(),
        reason: error.reason.clone(),
        message: error.message.clone(),
        codes: error.codes.clone(),
        last_transition_time: Some(now_s.clone()),
        last_update_time: Some(now_s),
    };
    if let Some(prev) = &status.last_error {
        if prev.operation == new.operation {
            new.last_transition_time = prev.last_transition_time.clone();
        }
        let same = prev.operation == new.operation
            && prev.reason == new.reason
            && prev.message == new.message
            && prev.codes == new.codes;
        if same {
            new.last_update_time = prev.last_update_time.clone();
        }
    }
    if status.first_error.is_none() {
        status.first_error = Some(new.clone());
    }
    if status.last_error.as_ref() != Some(&new) {
        status.last_errors.push(new.clone());
        if status.last_errors.len() > LAST_ERRORS {
            let extra = status.last_errors.len() - LAST_ERRORS;
            status.last_errors.drain(..extra);
        }
    }
    status.last_error = Some(new);
}

/// Sets `phase`; a final phase finishes the run: `finishedTime` now and, under the jobID
/// contract, `jobIDFinished = jobID` in the same write.
pub(crate) fn set_phase(status: &mut Status, phase: Phase, now: SystemTime) {
    status.phase = Some(phase);
    if phase.is_final() {
        let times = status
            .transition_times
            .get_or_insert_with(TransitionTimes::default);
        times.finished_time = Some(format_time(now));
        if status.has_job() {
            status.job_id_finished = status.job_id.clone();
        }
    }
}

/// The failed phase of a run: `DeleteFailed` while deleting, else `Failed`.
pub(crate) fn failed_phase(deleting: bool) -> Phase {
    if deleting {
        Phase::DeleteFailed
    } else {
        Phase::Failed
    }
}

/// Records `error` and fails the run at once.
pub fn fail(status: &mut Status, deleting: bool, error: &DeployError, now: SystemTime) {
    record_error(status, error, now);
    set_phase(status, failed_phase(deleting), now);
}

/// What a failed step does to the status: an unrecoverable error fails the run, any
/// other keeps the phase (the run is retried). Returns whether the run failed.
pub(crate) fn handle_error(
    status: &mut Status,
    deleting: bool,
    error: &DeployError,
    now: SystemTime,
) -> bool {
    if error.is_unrecoverable() {
        fail(status, deleting, error, now);
        true
    } else {
        record_error(status, error, now);
        false
    }
}

/// The new conditions, each keeping the times of the old one of its type when its
/// status, reason and message did not change (so an unchanged condition is no write).
pub(crate) fn merge_conditions(
    old: &[serde_json::Value],
    new: Vec<serde_json::Value>,
) -> Vec<serde_json::Value> {
    new.into_iter()
        .map(|mut c| {
            let same = old.iter().find(|o| {
                o["type"] == c["type"]
                    && o["status"] == c["status"]
                    && o["reason"] == c["reason"]
                    && o["message"] == c["message"]
            });
            if let (Some(o), Some(map)) = (same, c.as_object_mut()) {
                for k in ["lastTransitionTime", "lastUpdateTime"] {
                    if let Some(t) = o.get(k) {
                        map.insert(k.to_string(), t.clone());
                    }
                }
            }
            c
        })
        .collect()
}

/// What an item that is not final waits on: its first condition whose status is not
/// `True` (`ManifestsReady=False: Deployment … is not ready`), as the item's status says.
pub fn waiting_for(status: &crate::item::Status) -> Option<String> {
    if status.phase.is_some_and(|p| p.is_final()) {
        return None;
    }
    status.conditions.iter().find_map(|c| {
        let st = c["status"].as_str()?;
        (st != "True").then(|| {
            format!(
                "{}={st}: {}",
                c["type"].as_str().unwrap_or("?"),
                c["message"].as_str().unwrap_or_default()
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn err(op: &str, msg: &str, codes: &[ErrorCode]) -> DeployError {
        DeployError::new(op, "Reason", msg, codes)
    }

    #[test]
    fn repeated_errors_keep_their_times_and_history_is_bounded() {
        let mut s = Status::default();
        record_error(&mut s, &err("Reconcile", "a", &[]), at(0));
        record_error(&mut s, &err("Reconcile", "a", &[]), at(5));
        let last = s.last_error.clone().expect("last");
        assert_eq!(
            last.last_transition_time.as_deref(),
            Some(format_time(at(0)).as_str())
        );
        assert_eq!(
            last.last_update_time.as_deref(),
            Some(format_time(at(0)).as_str())
        );
        assert_eq!(s.last_errors.len(), 1, "an unchanged error is not history");
        // Same operation, new message: transition kept, update moves.
        record_error(&mut s, &err("Reconcile", "b", &[]), at(10));
        let last = s.last_error.clone().expect("last");
        assert_eq!(
            last.last_transition_time.as_deref(),
            Some(format_time(at(0)).as_str())
        );
        assert_eq!(
            last.last_update_time.as_deref(),
            Some(format_time(at(10)).as_str())
        );
        // Another operation: a new transition.
        record_error(&mut s, &err("Delete", "c", &[]), at(20));
        assert_eq!(
            s.last_error
                .as_ref()
                .and_then(|e| e.last_transition_time.clone()),
            Some(format_time(at(20)))
        );
        for i in 0..10 {
            record_error(&mut s, &err("Reconcile", &format!("m{i}"), &[]), at(30 + i));
        }
        assert_eq!(s.last_errors.len(), LAST_ERRORS);
        assert_eq!(s.last_errors[LAST_ERRORS - 1].message, "m9");
        assert_eq!(
            s.first_error.as_ref().map(|e| e.message.as_str()),
            Some("a")
        );
    }

    #[test]
    fn unrecoverable_codes_fail_at_once_others_keep_the_phase() {
        let cases = [
            (ErrorCode::ConfigurationProblem, true),
            (ErrorCode::InternalProblem, true),
            (ErrorCode::Timeout, true),
            (ErrorCode::Unauthorized, true),
            (ErrorCode::CyclicDependencies, true),
            (ErrorCode::Cleanup, false),
            (ErrorCode::Webhook, false),
            (ErrorCode::Unfinished, false),
            (ErrorCode::ForInfoOnly, false),
            (ErrorCode::NoRetry, false),
        ];
        for (code, fails) in cases {
            for deleting in [false, true] {
                let mut s = Status {
                    phase: Some(if deleting {
                        Phase::Deleting
                    } else {
                        Phase::Progressing
                    }),
                    ..Status::default()
                };
                let failed = handle_error(&mut s, deleting, &err("Reconcile", "x", &[code]), at(1));
                assert_eq!(failed, fails, "{code:?}");
                let want = match (fails, deleting) {
                    (true, true) => Phase::DeleteFailed,
                    (true, false) => Phase::Failed,
                    (false, true) => Phase::Deleting,
                    (false, false) => Phase::Progressing,
                };
                assert_eq!(s.phase, Some(want), "{code:?} deleting={deleting}");
                assert_eq!(
                    s.last_error.as_ref().map(|e| e.codes.clone()),
                    Some(vec![code])
                );
            }
        }
    }

    #[test]
    fn unchanged_conditions_keep_their_times() {
        use serde_json::json;
        let old = vec![
            json!({"type": "V", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "t0", "lastUpdateTime": "t0"}),
        ];
        let same = merge_conditions(
            &old,
            vec![
                json!({"type": "V", "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "t1", "lastUpdateTime": "t1"}),
            ],
        );
        assert_eq!(same, old);
        let changed = merge_conditions(
            &old,
            vec![
                json!({"type": "V", "status": "False", "reason": "R", "message": "m", "lastTransitionTime": "t1", "lastUpdateTime": "t1"}),
            ],
        );
        assert_eq!(changed[0]["lastTransitionTime"], "t1");
    }

    #[test]
    fn a_final_phase_finishes_the_job_in_the_same_status() {
        let mut s = Status {
            job_id: Some("j2".into()),
            job_id_finished: Some("j1".into()),
            ..Status::default()
        };
        set_phase(&mut s, Phase::Progressing, at(0));
        assert_eq!(s.job_id_finished.as_deref(), Some("j1"));
        set_phase(&mut s, Phase::Succeeded, at(1));
        assert_eq!(s.job_id_finished.as_deref(), Some("j2"));
        assert!(s.transition_times.and_then(|t| t.finished_time).is_some());
    }
}
