//! What a running controller reconciles: the one interface the CompositeController
//! (`composite/`) and the DecoratorController (`decorator.rs`) present to the runner of
//! `controller.rs` — the resources to watch, which objects concern them, the queue key of
//! a parent, and one sync.

use std::time::Duration;

use serde_json::Value;

use crate::keys::ParentKey;
use crate::ports::{BoxFut, Cluster, ClusterError, Resource};
use crate::related::Customizer;
use crate::steps::{SyncError, SyncReport};
use crate::types::ControllerKind;

/// A controller's reconcile logic, as `controller::start` runs it.
pub trait Reconcile: Send + Sync + 'static {
    fn kind(&self) -> ControllerKind;

    fn name(&self) -> &str;

    /// The controller object (sent to hooks as `controller`).
    fn object(&self) -> &Value;

    /// A CompositeController's parent kind; `None` for a decorator (its keys carry it).
    fn parent_kind(&self) -> Option<String>;

    /// The resources whose objects are parents (a decorator's targets).
    fn parent_resources(&self) -> Vec<Resource>;

    /// The resources whose changes wake a parent: children, attachments, revisions.
    fn child_resources(&self) -> Vec<Resource>;

    /// `spec.resyncPeriodSeconds` as a period (none when not positive).
    fn resync_period(&self) -> Option<Duration>;

    /// The queue key of a parent.
    fn parent_key(&self, parent: &Value) -> ParentKey;

    /// The resource of the parent `key` names.
    fn resource_of(&self, key: &ParentKey) -> Option<&Resource>;

    /// Whether events of `parent` concern this controller.
    fn wants(&self, parent: &Value) -> bool;

    /// Whether [`Reconcile::wants`] is true of every object of the parent resources (a
    /// CompositeController without a parent selector, whose keys are untyped,
    /// [`crate::keys::ParentKey::of`]): its parents are then enqueued by their keys alone, without
    /// reading the objects.
    fn wants_every_parent(&self) -> bool {
        false
    }

    /// Whether status-only updates of `parent` are ignored (`ignoreStatusChanges`).
    fn ignore_status_changes(&self, parent: &Value) -> bool;

    /// The customize hook, when configured.
    fn customizer(&self) -> Option<&Customizer>;

    /// One sync of the parent `key`.
    fn sync<'a>(
        &'a self,
        cluster: &'a dyn Cluster,
        key: &'a ParentKey,
    ) -> BoxFut<'a, Result<SyncReport, SyncError>>;

    /// The parent keys a child or attachment event concerns (`deleted`: the child is
    /// gone or going).
    fn parents_of_child<'a>(
        &'a self,
        cluster: &'a dyn Cluster,
        child: &'a Value,
        deleted: bool,
    ) -> BoxFut<'a, Result<Vec<ParentKey>, ClusterError>>;
}

/// A `resyncPeriodSeconds` as a period: none when unset or not positive.
pub(crate) fn resync_period(seconds: Option<i32>) -> Option<Duration> {
    let s = seconds?;
    (s > 0).then(|| Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1)))
}
