//! The deployer contract as one pure function: given a DeployItem, whether bosun is
//! responsible, and the time, what to do next. Seed 002's steps in order:
//!
//! ```text
//!  1 type     not ours ───────────────────────────────► Ignore (never written)
//!  2 target   not ours ───────────────────────────────► Ignore
//!  ── jobID contract (status.jobID set, or operation: test-reconcile) ──
//!  3 job      jobID == jobIDFinished ─────────────────► Idle
//!             not picked up within the pickup timeout ► Failed, PickupTimeout
//!             phase final or empty ───────────────────► start the run (Init / InitDelete)
//!  ── annotation contract ──
//!  3 annotations  operation: abort ───────────────────► Abort (→ Failed / DeleteFailed;
//!                                                       AbortingTimeout after abort-time
//!                                                       + the abort timeout)
//!                 reconcile-time older than pickup ───► Failed, PickupTimeout
//!                 operation: reconcile / force-reconcile ► remove it, start the run
//!                 reconcile-time ─────────────────────► remove it
//!  4 generation   observedGeneration ≠ generation ────► start the run
//!     deletion    deletionTimestamp, not yet deleting ► start the run (InitDelete)
//!  5 final phase ─────────────────────────────────────► Idle
//!  ── both ──
//!     target missing ─────────────────────────────────► Failed, NoTargetFound
//!     spec.timeout passed ────────────────────────────► Failed, ERR_TIMEOUT
//!  6 otherwise ───────────────────────────────────────► Run (reconcile or delete)
//! ```

use std::time::{Duration, SystemTime};

use crate::item::{
    ABORT_TIME_ANNOTATION, DeployItem, DeployerInfo, ErrorCode, FINALIZER, OPERATION_ANNOTATION,
    Phase, RECONCILE_TIME_ANNOTATION, Status, TransitionTimes, format_time, parse_time, since,
};
use crate::status::{DeployError, fail, start_run};
use crate::timeout::Timeout;

/// `operation: reconcile`.
pub(crate) const OP_RECONCILE: &str = "reconcile";
/// `operation: force-reconcile`.
pub(crate) const OP_FORCE_RECONCILE: &str = "force-reconcile";
/// `operation: abort`.
pub(crate) const OP_ABORT: &str = "abort";
/// `operation: test-reconcile` (the jobID contract without a landscaper).
pub(crate) const OP_TEST_RECONCILE: &str = "test-reconcile";

/// How long a run that is not final waits before it is looked at again.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// What the target check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetCheck {
    /// No target, or a target this deployer serves.
    Ours,
    /// A target another deployer serves (target selectors).
    NotOurs,
    /// The named target does not exist: the item is ours and fails.
    Missing,
}

/// Why an item is left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Of a type this deployer does not serve.
    OtherType(String),
    /// Its target is served by another deployer.
    OtherTarget(String),
    /// Nothing to do: the reason.
    Idle(&'static str),
}

/// What to run after the writes of the plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// Leave the item alone.
    Skip(Skip),
    /// The status of the plan is final: nothing more.
    Done,
    /// Abort gracefully (the type's abort), then write `status`.
    Abort { status: Box<Status> },
    /// The type's work: reconcile, or delete when `delete`.
    Run {
        delete: bool,
        /// `force-reconcile`: the type skips its up-to-date checks.
        force: bool,
        /// Time left before `spec.timeout` (`None`: no timeout).
        remaining: Option<Duration>,
    },
}

/// The decision: writes to do first (annotations removed, a status), then `next`.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Annotations to remove, in one metadata update.
    pub remove_annotations: Vec<String>,
    /// A new `status.jobID` to write (test-reconcile).
    pub status: Option<Status>,
    pub next: Next,
}

impl Plan {
    fn skip(s: Skip) -> Plan {
        Plan {
            remove_annotations: Vec::new(),
            status: None,
            next: Next::Skip(s),
        }
    }
}

/// The checks landscaper itself makes on items (`deployItemTimeouts`), made by bosun for
/// the items it serves so that an item does not wait forever when no landscaper runs, and
/// ends as landscaper would have ended it when bosun comes back after an outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LandscaperTimeouts {
    /// `deployItemTimeouts.pickup` (`None`: off): a job or a `reconcile-time` marker not
    /// picked up within it fails with `PickupTimeout`.
    pub pickup: Option<Duration>,
    /// `deployItemTimeouts.abort` (`None`: off): an `abort` whose `abort-time` is older
    /// fails with `AbortingTimeout`.
    pub abort: Option<Duration>,
    /// `deployItemTimeouts.progressingDefault`: the timeout of an item without
    /// `spec.timeout`.
    pub progressing: crate::timeout::Timeout,
}

impl Default for LandscaperTimeouts {
    fn default() -> Self {
        LandscaperTimeouts {
            pickup: Some(Duration::from_secs(300)),
            abort: Some(Duration::from_secs(300)),
            progressing: crate::timeout::Timeout::default(),
        }
    }
}

/// What the decision needs beside the item.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// The types this deployer serves.
    pub types: &'a [String],
    pub target: TargetCheck,
    pub now: SystemTime,
    /// Written to `status.deployer` when a run starts.
    pub deployer: &'a DeployerInfo,
    /// A fresh jobID, used for `operation: test-reconcile`.
    pub new_job_id: &'a str,
    pub timeouts: LandscaperTimeouts,
    /// Which deployer contract runs items without a jobID.
    pub contract: Contract,
}

/// Which of landscaper's deployer contracts this deployer follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Contract {
    /// The seed's: an item with a jobID follows the jobID contract, one without it the
    /// reconcile annotation and `generation` (landscaper before jobIDs, or no landscaper).
    #[default]
    Annotations,
    /// Current landscaper releases': only a jobID runs an item. landscaper creates the
    /// items of an execution first and sets their jobIDs in `dependsOn` order, and its
    /// deployer library leaves alone an item whose `jobID` and `jobIDFinished` are empty.
    JobId,
}

/// A contract name that is neither `annotations` nor `jobid`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: expected annotations or jobid")]
pub struct UnknownContract(pub String);

impl std::str::FromStr for Contract {
    type Err = UnknownContract;
    fn from_str(s: &str) -> Result<Contract, UnknownContract> {
        match s {
            "annotations" => Ok(Contract::Annotations),
            "jobid" | "jobID" => Ok(Contract::JobId),
            other => Err(UnknownContract(other.to_string())),
        }
    }
}

/// The error of a pickup timeout (landscaper's wording).
fn pickup_error(limit: Duration, target_missing: bool) -> DeployError {
    DeployError::new(
        "WaitingForPickup",
        "PickupTimeout",
        format!(
            "no deployer has reconciled this deployitem within {} seconds{}",
            limit.as_secs(),
            if target_missing {
                ", probably because the referenced Target does not exist"
            } else {
                ""
            }
        ),
        &[ErrorCode::Timeout],
    )
}

/// Whether `marker` (an RFC 3339 time) is older than `limit` at `now`.
fn older_than(marker: Option<&str>, limit: Option<Duration>, now: SystemTime) -> Option<Duration> {
    let limit = limit?;
    let at = parse_time(marker?)?;
    (since(at, now) > limit).then_some(limit)
}

/// Step 1 on metadata alone: whether the item is of one of `types`. Items of other types
/// are never read further, let alone written.
pub(crate) fn is_our_type(item: &DeployItem, types: &[String]) -> bool {
    types.iter().any(|t| t == item.deployer_type())
}

/// Decides what to do with `item`.
pub fn decide(item: &DeployItem, inp: &Inputs<'_>) -> Plan {
    if !is_our_type(item, inp.types) {
        return Plan::skip(Skip::OtherType(item.deployer_type().to_string()));
    }
    if inp.target == TargetCheck::NotOurs {
        return Plan::skip(Skip::OtherTarget(
            item.target_name().unwrap_or_default().to_string(),
        ));
    }
    if item.deleting && !item.finalizers.iter().any(|f| f == FINALIZER) {
        return Plan::skip(Skip::Idle("being deleted without our finalizer"));
    }
    let op = item.operation();
    if item.status.has_job() || op == Some(OP_TEST_RECONCILE) {
        decide_job(item, inp)
    } else if inp.contract == Contract::JobId {
        Plan::skip(Skip::Idle("no jobID: landscaper has not triggered it"))
    } else {
        decide_annotations(item, inp)
    }
}

/// The jobID contract (spec §3.2–3.3).
fn decide_job(item: &DeployItem, inp: &Inputs<'_>) -> Plan {
    let mut remove = Vec::new();
    let mut status = item.status.clone();
    let mut changed = false;
    if item.operation() == Some(OP_TEST_RECONCILE) {
        remove.push(OPERATION_ANNOTATION.to_string());
        status.job_id = Some(inp.new_job_id.to_string());
        status.transition_times = Some(TransitionTimes {
            trigger_time: Some(format_time(inp.now)),
            ..TransitionTimes::default()
        });
        changed = true;
    }
    if item.annotations.contains_key(RECONCILE_TIME_ANNOTATION) {
        remove.push(RECONCILE_TIME_ANNOTATION.to_string());
    }
    if status.job_finished() {
        return Plan {
            remove_annotations: remove,
            status: None,
            next: Next::Skip(Skip::Idle("the job is finished")),
        };
    }
    let picked_up = match (
        status.last_reconcile_time.as_deref().and_then(parse_time),
        status
            .job_id_generation_time
            .as_deref()
            .and_then(parse_time),
    ) {
        (Some(last), Some(generated)) => last >= generated,
        (_, None) => true,
        (None, Some(_)) => false,
    };
    if !picked_up
        && let Some(limit) = older_than(
            status.job_id_generation_time.as_deref(),
            inp.timeouts.pickup,
            inp.now,
        )
    {
        status.observed_generation = item.generation;
        fail(
            &mut status,
            item.deleting,
            &pickup_error(limit, inp.target == TargetCheck::Missing),
            inp.now,
        );
        return Plan {
            remove_annotations: remove,
            status: Some(status),
            next: Next::Done,
        };
    }
    let phase = status.phase;
    if phase.is_none_or(Phase::is_final) {
        if !item.deleting
            && item.update_on_change_only
            && item.generation == status.observed_generation
            && phase == Some(Phase::Succeeded)
        {
            // Nothing changed since the last success: finish the job as it is.
            crate::status::set_phase(&mut status, Phase::Succeeded, inp.now);
            return Plan {
                remove_annotations: remove,
                status: Some(status),
                next: Next::Done,
            };
        }
        start_run(
            &mut status,
            item.generation,
            item.deleting,
            inp.deployer,
            inp.now,
        );
        changed = true;
    }
    finish_plan(item, inp, remove, status, changed, false)
}

/// The annotation contract (seed 002, steps 3–5).
fn decide_annotations(item: &DeployItem, inp: &Inputs<'_>) -> Plan {
    let mut remove = Vec::new();
    let mut status = item.status.clone();
    let phase = status.phase;
    let op = item.operation();
    if op == Some(OP_ABORT) {
        // The annotation stays, as upstream: whoever asked removes it.
        if phase.is_some_and(Phase::is_final) {
            return Plan::skip(Skip::Idle("aborted"));
        }
        let deleting = item.deleting || phase.is_some_and(Phase::is_deletion);
        let error = match older_than(
            item.annotations
                .get(ABORT_TIME_ANNOTATION)
                .map(String::as_str),
            inp.timeouts.abort,
            inp.now,
        ) {
            Some(limit) => DeployError::new(
                "WaitingForAbort",
                "AbortingTimeout",
                format!(
                    "deployer has not aborted progressing this deploy item within {} seconds",
                    limit.as_secs()
                ),
                &[ErrorCode::Timeout],
            ),
            None => DeployError::new(
                "Abort",
                "Aborted",
                format!("{OPERATION_ANNOTATION}: {OP_ABORT}: the deployer stopped processing"),
                &[],
            ),
        };
        fail(&mut status, deleting, &error, inp.now);
        return Plan {
            remove_annotations: remove,
            status: None,
            next: Next::Abort {
                status: Box::new(status),
            },
        };
    }
    let mut start = false;
    let mut force = false;
    if let Some(op @ (OP_RECONCILE | OP_FORCE_RECONCILE)) = op {
        remove.push(OPERATION_ANNOTATION.to_string());
        force = op == OP_FORCE_RECONCILE;
        start = true;
    }
    if let Some(marker) = item.annotations.get(RECONCILE_TIME_ANNOTATION) {
        remove.push(RECONCILE_TIME_ANNOTATION.to_string());
        if let Some(limit) = older_than(Some(marker), inp.timeouts.pickup, inp.now) {
            let deleting = item.deleting || phase.is_some_and(Phase::is_deletion);
            status.observed_generation = item.generation;
            fail(
                &mut status,
                deleting,
                &pickup_error(limit, inp.target == TargetCheck::Missing),
                inp.now,
            );
            return Plan {
                remove_annotations: remove,
                status: Some(status),
                next: Next::Done,
            };
        }
    }
    if status.observed_generation != item.generation || phase.is_none() {
        start = true;
    }
    if item.deleting && !phase.is_some_and(Phase::is_deletion) {
        start = true;
    }
    if start {
        start_run(
            &mut status,
            item.generation,
            item.deleting,
            inp.deployer,
            inp.now,
        );
    } else if phase.is_some_and(Phase::is_final) {
        return Plan {
            remove_annotations: remove,
            status: None,
            next: Next::Skip(Skip::Idle("the phase is final")),
        };
    }
    finish_plan(item, inp, remove, status, start, force)
}

/// The checks of a run that goes on: the target exists, the timeout has not passed.
fn finish_plan(
    item: &DeployItem,
    inp: &Inputs<'_>,
    remove: Vec<String>,
    status: Status,
    changed: bool,
    force: bool,
) -> Plan {
    let deleting = item.deleting || status.phase.is_some_and(Phase::is_deletion);
    let failed = |mut status: Status, error: DeployError| {
        fail(&mut status, deleting, &error, inp.now);
        Plan {
            remove_annotations: remove.clone(),
            status: Some(status),
            next: Next::Done,
        }
    };
    if inp.target == TargetCheck::Missing {
        let name = item.target_name().unwrap_or_default();
        let error = DeployError::new(
            "Reconcile",
            "NoTargetFound",
            format!(
                "setting deploy item to failed due to missing target: Target {}/{name} not found",
                item.key.namespace
            ),
            &[ErrorCode::ConfigurationProblem],
        );
        return failed(status, error);
    }
    let timeout = match item.timeout_or(inp.timeouts.progressing) {
        Ok(t) => t,
        Err(e) => {
            let error = DeployError::config("Reconcile", "InvalidTimeout", e.to_string());
            return failed(status, error);
        }
    };
    let elapsed = status
        .started_at()
        .map_or(Duration::ZERO, |t| since(t, inp.now));
    let remaining = timeout.remaining(elapsed);
    if remaining == Some(Duration::ZERO) {
        let limit = match timeout {
            Timeout::After(d) => d,
            Timeout::None => Duration::ZERO,
        };
        // What kept the item from finishing: the object it was waiting for (a condition
        // not True), else the error of its last attempt (an unreachable target).
        let kept_failing = crate::status::waiting_for(&status)
            .map(|w| format!("; it was waiting for {w}"))
            .or_else(|| {
                status
                    .last_error
                    .as_ref()
                    .filter(|e| e.reason != "ProgressingTimeout")
                    .map(|e| format!("; its last attempt failed: {}", e.message))
            })
            .unwrap_or_default();
        let error = DeployError::new(
            if deleting { "Delete" } else { "Reconcile" },
            "ProgressingTimeout",
            format!(
                "the deploy item did not finish within its timeout of {}s (spec.timeout){kept_failing}",
                limit.as_secs()
            ),
            &[ErrorCode::Timeout],
        );
        return failed(status, error);
    }
    Plan {
        remove_annotations: remove,
        status: if changed { Some(status) } else { None },
        next: Next::Run {
            delete: deleting,
            force,
            remaining,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::item::{DEPLOYER_TARGET_NAME_ANNOTATION, DEPLOYER_TYPE_ANNOTATION};

    const MOCK: &str = "landscaper.gardener.cloud/mock";

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn ago(secs: u64) -> String {
        format_time(now() - Duration::from_secs(secs))
    }

    /// A mock item with `generation` 2; `patch` is merged into it.
    fn item(patch: Value) -> DeployItem {
        let mut o = json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
            "metadata": {"name": "di", "namespace": "ns", "uid": "u1", "generation": 2},
            "spec": {"type": MOCK, "config": {"apiVersion": "mock.deployer.landscaper.gardener.cloud/v1alpha1", "kind": "ProviderConfiguration"}},
        });
        merge(&mut o, patch);
        DeployItem::parse(&o).expect("item")
    }

    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn plan(item: &DeployItem, target: TargetCheck) -> Plan {
        let types = vec![MOCK.to_string()];
        let deployer = DeployerInfo {
            identity: "bosun-1".into(),
            name: "bosun".into(),
            version: "0.1.0".into(),
        };
        decide(
            item,
            &Inputs {
                types: &types,
                target,
                now: now(),
                deployer: &deployer,
                new_job_id: "job-new",
                contract: Contract::Annotations,
                timeouts: LandscaperTimeouts::default(),
            },
        )
    }

    #[test]
    fn a_marker_or_a_job_not_picked_up_in_time_fails_with_pickup_timeout() {
        // The annotation contract: reconcile-time older than 5 minutes.
        let stale = item(
            json!({"metadata": {"annotations": {RECONCILE_TIME_ANNOTATION: ago(301)}},
            "status": {"phase": "Succeeded", "observedGeneration": 1}}),
        );
        let p = plan(&stale, TargetCheck::Ours);
        assert_eq!(p.remove_annotations, [RECONCILE_TIME_ANNOTATION]);
        let status = p.status.expect("a status");
        assert_eq!(status.phase, Some(Phase::Failed));
        assert_eq!(status.observed_generation, 2);
        let e = status.last_error.expect("lastError");
        assert_eq!(
            (e.operation.as_str(), e.reason.as_str(), e.codes.as_slice()),
            (
                "WaitingForPickup",
                "PickupTimeout",
                &[ErrorCode::Timeout][..]
            )
        );
        assert_eq!(
            e.message,
            "no deployer has reconciled this deployitem within 300 seconds"
        );
        // A fresh marker is just removed and the run starts.
        let fresh = item(
            json!({"metadata": {"annotations": {RECONCILE_TIME_ANNOTATION: ago(10)}},
            "status": {"phase": "Succeeded", "observedGeneration": 1}}),
        );
        assert_eq!(
            plan(&fresh, TargetCheck::Ours).status.and_then(|s| s.phase),
            Some(Phase::Init)
        );

        // The jobID contract: a job generated 6 minutes ago and never picked up.
        let job = |last_reconcile: String| {
            item(
                json!({"status": {"jobID": "j2", "jobIDFinished": "j1", "jobIDGenerationTime": ago(360),
                "lastReconcileTime": last_reconcile, "phase": "Succeeded", "observedGeneration": 1}}),
            )
        };
        let p = plan(&job(ago(3600)), TargetCheck::Missing);
        let status = p.status.expect("a status");
        assert_eq!(
            (status.phase, status.job_id_finished.as_deref()),
            (Some(Phase::Failed), Some("j2")),
            "failed and finished in one write"
        );
        assert!(status.last_error.is_some_and(|e| {
            e.message
                .ends_with("probably because the referenced Target does not exist")
        }),);
        // Picked up (lastReconcileTime after the job was generated): the run goes on.
        let p = plan(&job(ago(300)), TargetCheck::Ours);
        assert!(matches!(p.next, Next::Run { .. }), "{p:?}");

        // Switched off.
        let off = decide(
            &stale,
            &Inputs {
                types: &[MOCK.to_string()],
                target: TargetCheck::Ours,
                now: now(),
                deployer: &DeployerInfo::default(),
                new_job_id: "job-new",
                contract: Contract::Annotations,
                timeouts: LandscaperTimeouts {
                    pickup: None,
                    abort: None,
                    ..LandscaperTimeouts::default()
                },
            },
        );
        assert_eq!(off.status.and_then(|s| s.phase), Some(Phase::Init));
    }

    #[test]
    fn an_abort_older_than_the_abort_timeout_fails_with_aborting_timeout() {
        let aborted = |at: String| {
            item(
                json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "abort", ABORT_TIME_ANNOTATION: at}},
                "status": {"phase": "Progressing", "observedGeneration": 2}}),
            )
        };
        let Next::Abort { status } = plan(&aborted(ago(301)), TargetCheck::Ours).next else {
            panic!("an abort");
        };
        let e = status.last_error.expect("lastError");
        assert_eq!(
            (e.operation.as_str(), e.reason.as_str(), e.codes.as_slice()),
            (
                "WaitingForAbort",
                "AbortingTimeout",
                &[ErrorCode::Timeout][..]
            )
        );
        assert_eq!(
            e.message,
            "deployer has not aborted progressing this deploy item within 300 seconds"
        );
        let Next::Abort { status } = plan(&aborted(ago(10)), TargetCheck::Ours).next else {
            panic!("an abort");
        };
        assert_eq!(status.last_error.map(|e| e.reason), Some("Aborted".into()));
    }

    /// What a test expects, in few words.
    #[derive(Debug, PartialEq)]
    enum Want {
        OtherType,
        OtherTarget,
        Idle,
        /// A run starts: the phase written first, then the work.
        StartRun(Phase, bool),
        /// A run goes on without a status write.
        Continue(bool),
        Abort(Phase),
        Fail(Phase, &'static str, Option<ErrorCode>),
        Finished,
    }

    fn summarize(p: &Plan) -> Want {
        match &p.next {
            Next::Skip(Skip::OtherType(_)) => Want::OtherType,
            Next::Skip(Skip::OtherTarget(_)) => Want::OtherTarget,
            Next::Skip(Skip::Idle(_)) => Want::Idle,
            Next::Abort { status } => Want::Abort(status.phase.expect("phase")),
            Next::Done => {
                let s = p.status.as_ref().expect("status");
                match &s.last_error {
                    Some(e)
                        if s.phase.is_some_and(Phase::is_final)
                            && s.phase != Some(Phase::Succeeded) =>
                    {
                        let reason: &'static str = match e.reason.as_str() {
                            "NoTargetFound" => "NoTargetFound",
                            "ProgressingTimeout" => "ProgressingTimeout",
                            "InvalidTimeout" => "InvalidTimeout",
                            _ => "other",
                        };
                        Want::Fail(s.phase.expect("phase"), reason, e.codes.first().copied())
                    }
                    _ => Want::Finished,
                }
            }
            Next::Run { delete, .. } => match &p.status {
                Some(s) => Want::StartRun(s.phase.expect("phase"), *delete),
                None => Want::Continue(*delete),
            },
        }
    }

    #[test]
    fn the_contract_step_by_step() {
        let deleting =
            json!({"metadata": {"deletionTimestamp": ago(1), "finalizers": [FINALIZER]}});
        let cases: Vec<(&str, Value, TargetCheck, Want)> = vec![
            (
                "1 another type",
                json!({"spec": {"type": "landscaper.gardener.cloud/helm"}}),
                TargetCheck::Ours,
                Want::OtherType,
            ),
            (
                "1 the type annotation wins over spec.type",
                json!({"metadata": {"annotations": {DEPLOYER_TYPE_ANNOTATION: "landscaper.gardener.cloud/helm"}}}),
                TargetCheck::Ours,
                Want::OtherType,
            ),
            (
                "1 another type, even with a reconcile annotation",
                json!({"spec": {"type": "x"}, "metadata": {"annotations": {OPERATION_ANNOTATION: "reconcile"}}}),
                TargetCheck::Ours,
                Want::OtherType,
            ),
            (
                "2 a target of another deployer",
                json!({"spec": {"target": {"name": "t"}}}),
                TargetCheck::NotOurs,
                Want::OtherTarget,
            ),
            (
                "4 a new item starts",
                json!({}),
                TargetCheck::Ours,
                Want::StartRun(Phase::Init, false),
            ),
            (
                "4 a generation bump during Progressing restarts",
                json!({"status": {"phase": "Progressing", "observedGeneration": 1, "lastReconcileTime": ago(10)}}),
                TargetCheck::Ours,
                Want::StartRun(Phase::Init, false),
            ),
            (
                "4 a generation bump after Succeeded restarts",
                json!({"status": {"phase": "Succeeded", "observedGeneration": 1}}),
                TargetCheck::Ours,
                Want::StartRun(Phase::Init, false),
            ),
            (
                "5 Succeeded and observed: nothing",
                json!({"status": {"phase": "Succeeded", "observedGeneration": 2}}),
                TargetCheck::Ours,
                Want::Idle,
            ),
            (
                "5 Failed and observed: nothing",
                json!({"status": {"phase": "Failed", "observedGeneration": 2}}),
                TargetCheck::Ours,
                Want::Idle,
            ),
            (
                "5 a final phase is not failed again by a missing target",
                json!({"status": {"phase": "Failed", "observedGeneration": 2}}),
                TargetCheck::Missing,
                Want::Idle,
            ),
            (
                "3 reconcile restarts a final item",
                json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "reconcile"}}, "status": {"phase": "Succeeded", "observedGeneration": 2}}),
                TargetCheck::Ours,
                Want::StartRun(Phase::Init, false),
            ),
            (
                "3 force-reconcile restarts a failed item",
                json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "force-reconcile"}}, "status": {"phase": "Failed", "observedGeneration": 2}}),
                TargetCheck::Ours,
                Want::StartRun(Phase::Init, false),
            ),
            (
                "3 abort fails a progressing item",
                json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "abort"}}, "status": {"phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(1)}}),
                TargetCheck::Ours,
                Want::Abort(Phase::Failed),
            ),
            (
                "3 abort during a deletion ends in DeleteFailed",
                json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "abort"}, "deletionTimestamp": ago(1), "finalizers": [FINALIZER]}, "status": {"phase": "Deleting", "observedGeneration": 2}}),
                TargetCheck::Ours,
                Want::Abort(Phase::DeleteFailed),
            ),
            (
                "3 abort of a final item does nothing",
                json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "abort"}}, "status": {"phase": "Succeeded", "observedGeneration": 2}}),
                TargetCheck::Ours,
                Want::Idle,
            ),
            (
                "6 Progressing goes on",
                json!({"status": {"phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(1)}}),
                TargetCheck::Ours,
                Want::Continue(false),
            ),
            (
                "6 Init goes on",
                json!({"status": {"phase": "Init", "observedGeneration": 2, "lastReconcileTime": ago(1)}}),
                TargetCheck::Ours,
                Want::Continue(false),
            ),
            (
                "timeout: the default 10m passed",
                json!({"status": {"phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(601)}}),
                TargetCheck::Ours,
                Want::Fail(
                    Phase::Failed,
                    "ProgressingTimeout",
                    Some(ErrorCode::Timeout),
                ),
            ),
            (
                "timeout: spec.timeout 1h not yet",
                json!({"spec": {"timeout": "1h"}, "status": {"phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(601)}}),
                TargetCheck::Ours,
                Want::Continue(false),
            ),
            (
                "timeout: none never times out",
                json!({"spec": {"timeout": "none"}, "status": {"phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(100_000)}}),
                TargetCheck::Ours,
                Want::Continue(false),
            ),
            (
                "timeout: measured from transitionTimes.initTime",
                json!({"spec": {"timeout": "30s"}, "status": {"phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(1), "transitionTimes": {"initTime": ago(31)}}}),
                TargetCheck::Ours,
                Want::Fail(
                    Phase::Failed,
                    "ProgressingTimeout",
                    Some(ErrorCode::Timeout),
                ),
            ),
            (
                "timeout: while deleting ends in DeleteFailed",
                json!({"spec": {"timeout": "30s"}, "metadata": {"deletionTimestamp": ago(1), "finalizers": [FINALIZER]}, "status": {"phase": "Deleting", "observedGeneration": 2, "lastReconcileTime": ago(31)}}),
                TargetCheck::Ours,
                Want::Fail(
                    Phase::DeleteFailed,
                    "ProgressingTimeout",
                    Some(ErrorCode::Timeout),
                ),
            ),
            (
                "an unparsable timeout fails with a configuration problem",
                json!({"spec": {"timeout": "ten minutes"}}),
                TargetCheck::Ours,
                Want::Fail(
                    Phase::Failed,
                    "InvalidTimeout",
                    Some(ErrorCode::ConfigurationProblem),
                ),
            ),
            (
                "a missing target fails the run",
                json!({"spec": {"target": {"name": "gone"}}}),
                TargetCheck::Missing,
                Want::Fail(
                    Phase::Failed,
                    "NoTargetFound",
                    Some(ErrorCode::ConfigurationProblem),
                ),
            ),
            (
                "deletion of a Succeeded item starts InitDelete",
                merge_all(
                    deleting.clone(),
                    json!({"status": {"phase": "Succeeded", "observedGeneration": 2}}),
                ),
                TargetCheck::Ours,
                Want::StartRun(Phase::InitDelete, true),
            ),
            (
                "deletion goes on in Deleting",
                merge_all(
                    deleting.clone(),
                    json!({"status": {"phase": "Deleting", "observedGeneration": 2, "lastReconcileTime": ago(1)}}),
                ),
                TargetCheck::Ours,
                Want::Continue(true),
            ),
            (
                "DeleteFailed is final",
                merge_all(
                    deleting.clone(),
                    json!({"status": {"phase": "DeleteFailed", "observedGeneration": 2}}),
                ),
                TargetCheck::Ours,
                Want::Idle,
            ),
            (
                "a deletion whose target is gone ends in DeleteFailed",
                merge_all(
                    deleting.clone(),
                    json!({"spec": {"target": {"name": "gone"}}, "status": {"phase": "Succeeded", "observedGeneration": 2}}),
                ),
                TargetCheck::Missing,
                Want::Fail(
                    Phase::DeleteFailed,
                    "NoTargetFound",
                    Some(ErrorCode::ConfigurationProblem),
                ),
            ),
            (
                "being deleted without our finalizer",
                json!({"metadata": {"deletionTimestamp": ago(1), "finalizers": ["other"]}}),
                TargetCheck::Ours,
                Want::Idle,
            ),
            (
                "jobID: a new job starts",
                json!({"status": {"jobID": "j2", "jobIDFinished": "j1", "phase": "Succeeded", "observedGeneration": 2}}),
                TargetCheck::Ours,
                Want::StartRun(Phase::Init, false),
            ),
            (
                "jobID: a finished job is left alone even if the generation moved",
                json!({"status": {"jobID": "j1", "jobIDFinished": "j1", "phase": "Succeeded", "observedGeneration": 1}}),
                TargetCheck::Ours,
                Want::Idle,
            ),
            (
                "jobID: a running job goes on",
                json!({"status": {"jobID": "j2", "jobIDFinished": "j1", "phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(1)}}),
                TargetCheck::Ours,
                Want::Continue(false),
            ),
            (
                "jobID: updateOnChangeOnly finishes an unchanged success at once",
                json!({"spec": {"updateOnChangeOnly": true}, "status": {"jobID": "j2", "jobIDFinished": "j1", "phase": "Succeeded", "observedGeneration": 2}}),
                TargetCheck::Ours,
                Want::Finished,
            ),
            (
                "jobID: a deletion starts InitDelete",
                merge_all(
                    deleting.clone(),
                    json!({"status": {"jobID": "j2", "jobIDFinished": "j1", "phase": "Succeeded", "observedGeneration": 2}}),
                ),
                TargetCheck::Ours,
                Want::StartRun(Phase::InitDelete, true),
            ),
            (
                "jobID: a missing target fails and finishes the job",
                json!({"spec": {"target": {"name": "gone"}}, "status": {"jobID": "j2", "jobIDFinished": "j1", "phase": "Succeeded"}}),
                TargetCheck::Missing,
                Want::Fail(
                    Phase::Failed,
                    "NoTargetFound",
                    Some(ErrorCode::ConfigurationProblem),
                ),
            ),
            (
                "test-reconcile creates a job and starts it",
                json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "test-reconcile"}}, "status": {"phase": "Succeeded", "observedGeneration": 2}}),
                TargetCheck::Ours,
                Want::StartRun(Phase::Init, false),
            ),
        ];
        for (name, patch, target, want) in cases {
            let it = item(patch);
            let p = plan(&it, target);
            assert_eq!(summarize(&p), want, "{name}: {p:#?}");
        }
    }

    /// The error a plan for `it` (past its timeout) writes.
    fn timeout_error(it: &DeployItem) -> crate::item::ItemError {
        let p = plan(it, TargetCheck::Ours);
        p.status.and_then(|s| s.last_error).expect("a last error")
    }

    #[test]
    fn a_timeout_keeps_what_the_last_attempt_failed_with() {
        let it = item(json!({
            "status": {"phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(601),
                       "lastError": {"operation": "Reconcile", "reason": "TargetUnreachable",
                                     "message": "client error (Connect) on Target default/dead"}}
        }));
        let error = timeout_error(&it);
        assert_eq!(error.reason, "ProgressingTimeout");
        assert_eq!(
            error.message,
            "the deploy item did not finish within its timeout of 600s (spec.timeout); its last \
             attempt failed: client error (Connect) on Target default/dead"
        );
    }

    #[test]
    fn a_timeout_names_the_object_it_was_waiting_for() {
        let it = item(json!({
            "status": {"phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(601),
                       "conditions": [{"type": "ManifestsReady", "status": "False",
                                       "message": "Deployment default/web: observedGeneration 0 is behind generation 1"}]}
        }));
        let error = timeout_error(&it);
        assert!(
            error.message.ends_with(
                "; it was waiting for ManifestsReady=False: Deployment default/web: \
                 observedGeneration 0 is behind generation 1"
            ),
            "{}",
            error.message
        );
    }

    /// The item after the plan's writes.
    fn after(item: &DeployItem, p: &Plan) -> DeployItem {
        let mut o = item.object.clone();
        if let Some(a) = o["metadata"]["annotations"].as_object_mut() {
            for k in &p.remove_annotations {
                a.remove(k);
            }
        }
        if let Some(s) = &p.status {
            o = DeployItem {
                object: o,
                ..item.clone()
            }
            .with_status(s);
        }
        DeployItem::parse(&o).expect("item")
    }

    #[test]
    fn a_started_run_is_not_started_again_and_a_final_decision_is_stable() {
        // Deciding again after the writes of a plan must not restart the run (no hot
        // loop of Init writes), and a final status must be left alone.
        let cases = [
            json!({}),
            json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "reconcile", RECONCILE_TIME_ANNOTATION: ago(1)}}, "status": {"phase": "Succeeded", "observedGeneration": 2}}),
            json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "force-reconcile"}}, "status": {"phase": "Failed", "observedGeneration": 2}}),
            json!({"status": {"phase": "Progressing", "observedGeneration": 1}}),
            json!({"metadata": {"deletionTimestamp": ago(1), "finalizers": [FINALIZER]}, "status": {"phase": "Succeeded", "observedGeneration": 2}}),
            json!({"status": {"jobID": "j2", "jobIDFinished": "j1", "phase": "Succeeded", "observedGeneration": 2}}),
            json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "test-reconcile"}}}),
            json!({"spec": {"timeout": "bad"}}),
            json!({"spec": {"target": {"name": "gone"}}}),
        ];
        for patch in cases {
            let it = item(patch.clone());
            let target = if it.target.is_some() {
                TargetCheck::Missing
            } else {
                TargetCheck::Ours
            };
            let first = plan(&it, target);
            let second = plan(&after(&it, &first), target);
            match (&first.next, &second.next) {
                (Next::Run { .. }, Next::Run { .. }) => {
                    assert!(second.status.is_none(), "{patch}: restarted: {second:?}");
                    assert!(second.remove_annotations.is_empty(), "{patch}: {second:?}");
                }
                (Next::Done, Next::Skip(Skip::Idle(_))) => {}
                other => panic!("{patch}: {other:?}"),
            }
        }
    }

    fn merge_all(mut a: Value, b: Value) -> Value {
        merge(&mut a, b);
        a
    }

    #[test]
    fn reconcile_removes_its_annotation_and_the_reconcile_time_and_resets_the_run() {
        let it = item(json!({
            "metadata": {"annotations": {OPERATION_ANNOTATION: "reconcile", RECONCILE_TIME_ANNOTATION: ago(3), "keep": "me"}},
            "status": {"phase": "Failed", "observedGeneration": 2,
                       "lastError": {"operation": "x", "reason": "y", "message": "z"}}
        }));
        let p = plan(&it, TargetCheck::Ours);
        assert_eq!(
            p.remove_annotations,
            vec![
                OPERATION_ANNOTATION.to_string(),
                RECONCILE_TIME_ANNOTATION.to_string()
            ]
        );
        let s = p.status.expect("status");
        assert_eq!(s.phase, Some(Phase::Init));
        assert_eq!(s.observed_generation, 2);
        assert_eq!(s.last_reconcile_time, Some(format_time(now())));
        assert_eq!(s.last_error, None);
        assert_eq!(s.deployer.map(|d| d.identity), Some("bosun-1".to_string()));
        assert_eq!(
            p.next,
            Next::Run {
                delete: false,
                force: false,
                remaining: Some(Duration::from_secs(600))
            }
        );
    }

    #[test]
    fn force_reconcile_is_passed_to_the_type() {
        let it =
            item(json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "force-reconcile"}}}));
        assert!(matches!(
            plan(&it, TargetCheck::Ours).next,
            Next::Run { force: true, .. }
        ));
    }

    #[test]
    fn the_abort_annotation_is_kept_and_the_error_says_why() {
        let it = item(
            json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "abort"}},
                             "status": {"phase": "Progressing", "observedGeneration": 2}}),
        );
        let p = plan(&it, TargetCheck::Ours);
        assert!(p.remove_annotations.is_empty());
        let Next::Abort { status } = p.next else {
            panic!("{p:?}")
        };
        let e = status.last_error.expect("error");
        assert_eq!(
            (e.operation.as_str(), e.reason.as_str()),
            ("Abort", "Aborted")
        );
    }

    #[test]
    fn an_empty_phase_is_no_phase_and_an_unknown_one_names_the_field() {
        let it = item(json!({"status": {"phase": "", "observedGeneration": 2}}));
        assert_eq!(it.status.phase, None);
        assert!(matches!(
            plan(&it, TargetCheck::Ours).next,
            Next::Run { .. }
        ));
        let mut o = it.object.clone();
        o["status"]["phase"] = json!("Processing");
        let e = DeployItem::parse(&o).unwrap_err();
        assert_eq!(e.field, "status.phase");
        assert!(e.message.contains("unknown phase \"Processing\""), "{e}");
    }

    #[test]
    fn the_target_is_found_from_the_annotation_first() {
        let it = item(
            json!({"metadata": {"annotations": {DEPLOYER_TARGET_NAME_ANNOTATION: "a"}}, "spec": {"target": {"name": "b"}}}),
        );
        assert_eq!(it.target_name(), Some("a"));
        let it = item(
            json!({"metadata": {"annotations": {DEPLOYER_TARGET_NAME_ANNOTATION: ".noTargetName"}}, "spec": {"target": {"name": "b"}}}),
        );
        assert_eq!(it.target_name(), None);
        let it = item(json!({"spec": {"target": {"name": "b"}}}));
        assert_eq!(it.target_name(), Some("b"));
    }

    #[test]
    fn test_reconcile_writes_a_new_job_and_removes_the_annotation() {
        let it =
            item(json!({"metadata": {"annotations": {OPERATION_ANNOTATION: "test-reconcile"}}}));
        let p = plan(&it, TargetCheck::Ours);
        assert_eq!(p.remove_annotations, vec![OPERATION_ANNOTATION.to_string()]);
        let s = p.status.expect("status");
        assert_eq!(s.job_id.as_deref(), Some("job-new"));
        assert!(s.transition_times.and_then(|t| t.trigger_time).is_some());
    }

    #[test]
    fn the_remaining_time_is_handed_to_the_run() {
        let it = item(
            json!({"spec": {"timeout": "60s"}, "status": {"phase": "Progressing", "observedGeneration": 2, "lastReconcileTime": ago(20)}}),
        );
        assert_eq!(
            plan(&it, TargetCheck::Ours).next,
            Next::Run {
                delete: false,
                force: false,
                remaining: Some(Duration::from_secs(40))
            }
        );
    }
}
