//! What a CompositeController sync writes, decided from what it read and the hook's
//! answer (pure), and the step that writes it.
//!
//! ```text
//!   parent, selector, observed children, answer
//!     ─► decide: desired children (the parent's namespace by default, `controller-uid`
//!        with generateSelector, checked against the selector, grouped by type)
//!        ─► ManageChildren's actions (none while the parent's children are left alone)
//!        ─► the status (with observedGeneration)
//!     ─► apply: the actions, then the status (written when it differs)
//! ```

use std::sync::Arc;

use serde_json::{Value, json};

use super::Composite;
use crate::children::{self, ChildAction};
use crate::claim::Owner;
use crate::keys::{GroupMap, has_finalizer, key_of, manages_children, namespace_of, uid_of};
use crate::ports::Cluster;
use crate::protocol::CompositeResponse;
use crate::selector::Selector;
use crate::steps::{SyncError, SyncReport, write_status};

/// What one sync writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The desired children as `Kind.version key` (the debug view's "planned").
    pub planned: Arc<[String]>,
    /// ManageChildren's actions, in order; `None` while the parent's children are left
    /// alone (it is being deleted without our finalizer to honour).
    pub children: Option<Vec<ChildAction>>,
    /// The status to write (with `observedGeneration`), when it differs from the live one.
    pub status: Value,
    /// Whether applying it writes nothing: no child action, and the status the parent
    /// already holds.
    pub settles: bool,
}

/// Why an answer cannot be planned.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum PlanError {
    /// A desired child the parent's selector would not select.
    #[error("labels on desired child {kind} {key} don't match parent selector")]
    SelectorMismatch { kind: String, key: String },
    /// A desired child of a type the controller does not declare.
    #[error("{0}")]
    UndeclaredChild(#[from] children::UndeclaredChild),
}

impl From<PlanError> for SyncError {
    fn from(e: PlanError) -> Self {
        SyncError::permanent(e.to_string())
    }
}

/// Decides what a sync of `parent` writes for the hook's `response`, given the children
/// it observed (claimed) and its child selector.
pub fn decide(
    c: &Composite,
    parent: &Value,
    selector: &Selector,
    observed: &GroupMap,
    response: CompositeResponse,
) -> Result<Plan, PlanError> {
    // The desired children: the parent's namespace by default, the selector's labels.
    let mut desired = Vec::new();
    for mut child in response.children.unwrap_or_default() {
        if namespace_of(&child).is_empty() && !namespace_of(parent).is_empty() {
            child["metadata"]["namespace"] = json!(namespace_of(parent));
        }
        if c.spec.generate_selector == Some(true)
            && child["metadata"]["labels"]["controller-uid"].is_null()
        {
            child["metadata"]["labels"]["controller-uid"] = json!(uid_of(parent));
        }
        if !selector.matches_labels(&child) {
            return Err(PlanError::SelectorMismatch {
                kind: child["kind"].as_str().unwrap_or_default().to_string(),
                key: key_of(&child),
            });
        }
        desired.push(child);
    }
    let desired =
        children::group_desired(desired, &c.children).map_err(PlanError::UndeclaredChild)?;
    let planned = children::planned(&desired);
    let actions = manages_children(parent, &c.finalizer(), c.finalize.is_some()).then(|| {
        children::plan(
            &Owner::of(parent),
            &c.children,
            observed,
            &desired,
            c.strategy,
        )
    });
    let mut status = response.status.unwrap_or_else(|| json!({}));
    status["observedGeneration"] = parent["metadata"]["generation"].clone();
    if status["observedGeneration"].is_null() {
        status["observedGeneration"] = json!(0);
    }
    let settles = parent["status"] == status && actions.as_ref().is_none_or(Vec::is_empty);
    Ok(Plan {
        planned,
        children: actions,
        status,
        settles,
    })
}

impl Composite {
    /// Writes a plan: ManageChildren's actions, then the status. A child that could not
    /// be written fails the sync after the status is written.
    pub(super) async fn apply_plan(
        &self,
        cluster: &dyn Cluster,
        parent: &Value,
        plan: Plan,
        mut report: SyncReport,
    ) -> Result<SyncReport, SyncError> {
        report.planned = plan.planned;
        if let Some(actions) = plan.children {
            report.applied = children::apply(cluster, actions).await;
            report.resync_after = report.applied.resync(report.resync_after);
        }
        report.status_written = write_status(cluster, &self.parent, parent, plan.status).await?;
        if !report.applied.errors.is_empty() {
            return Err(SyncError::transient(report.applied.errors.join("; ")));
        }
        Ok(report)
    }

    /// The finalize step after the answer: our finalizer dropped once the finalize hook
    /// answered `finalized`. Returns the parent as it now is and whether it dropped it.
    pub(super) async fn finalized_step(
        &self,
        cluster: &dyn Cluster,
        parent: Arc<Value>,
        finalized: bool,
    ) -> Result<(Arc<Value>, bool), SyncError> {
        let finalizer = self.finalizer();
        if !(finalized && has_finalizer(&parent, &finalizer)) {
            return Ok((parent, false));
        }
        let parent =
            crate::steps::set_finalizer(cluster, &self.parent, &parent, &finalizer, false).await?;
        Ok((Arc::new(parent), true))
    }
}
