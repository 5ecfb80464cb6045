//! The rolling-update part of a CompositeController sync: the IO around the pure
//! planning of `rollout.rs`.
//!
//! ```text
//!  parent ─► claim its ControllerRevisions (adopt / release, as children)
//!    ─► parent_revisions: [latest, virtual parents…]
//!    ─► one sync (or finalize) hook call per parent revision, concurrently, each with its
//!       own related objects and the same observed children
//!    ─► plan ─► desired children checked ─► revisions persisted (delete, update, create)
//!    ─► the plan's children, status (with `Updated`), resync and finalized handed back to
//!       the composite sync, which manages the children and writes the status
//! ```
//!
//! Used when some child type's method is `RollingRecreate` or `RollingInPlace`, unless the
//! parent is being deleted without our finalizer to honour ([`uses_rollout`]).
//!
//! **Cluster-scoped parents.** A ControllerRevision is namespaced and records one parent,
//! in the parent's namespace; a cluster-scoped parent has none. metacontroller tries to
//! write such revisions without a namespace, which a namespaced resource does not accept,
//! so its rollouts of cluster-scoped parents fail on every sync. bosun refuses the combination up front: the
//! registry does not start such a controller and raises a `SyncError` event on the
//! CompositeController naming `spec.childResources[i].updateStrategy.method`; this module
//! refuses it again, per parent, should it ever be asked.

use std::collections::BTreeMap;

use bosun_runtime::PortError;
use futures::future::try_join_all;
use serde_json::Value;

use super::Composite;
use crate::children;
use crate::claim::{self, Claim, Owner};
use crate::keys::{GroupMap, is_deleting, key_of, name_of, namespace_of, uid_of};
use crate::ports::{Cluster, ClusterError, HookType, Resource};
use crate::protocol::{CompositeResponse, decode_composite};
use crate::rollout::{
    GroupKind, LABEL_API_GROUP, LABEL_RESOURCE, ObservedChildren, RevisionAnswer, RolloutInput,
    parent_revisions, plan,
};
use crate::selector::Selector;
use crate::steps::{self, BoundHook, SyncError, digest};
use crate::types::UpdateStrategy;

/// The merged outcome of a rolling sync's hook calls, ready for the composite sync to
/// apply as it applies a single answer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RolloutSync {
    /// The children to manage, the status with the `Updated` condition, the smallest
    /// positive `resyncAfterSeconds` and `finalized` over every remaining revision.
    pub response: CompositeResponse,
    /// A digest of every answer, in parent-revision order.
    pub answer_digest: String,
    /// Loose-mode complaints of every answer.
    pub warnings: Vec<String>,
}

/// Whether the sync of `parent` goes through the rollout: some child type rolls, and the
/// parent is not being deleted, or is with our finalizer still to honour (metacontroller's
/// `ShouldFinalize`: not while a garbage-collector finalizer is pending).
pub(crate) fn uses_rollout(c: &Composite, parent: &Value) -> bool {
    if !c.children.iter().any(|t| t.method.is_rolling()) {
        return false;
    }
    crate::keys::manages_children(parent, &c.finalizer(), c.finalize.is_some())
}

/// The error refusing rolling methods for a cluster-scoped parent, naming the field.
/// `None` when the combination is fine.
pub(crate) fn cluster_scoped_refusal(c: &Composite) -> Option<String> {
    if c.parent.namespaced {
        return None;
    }
    let (i, child) = c
        .spec
        .child_resources
        .iter()
        .enumerate()
        .find(|(_, r)| r.update_strategy.method.is_rolling())?;
    Some(format!(
        "spec.childResources[{i}].updateStrategy.method: {:?} needs a namespaced parent \
         resource (ControllerRevisions are namespaced), and {}.{} is cluster-scoped",
        child.update_strategy.method, c.parent.plural, c.parent.group
    ))
}

/// Update strategies by child group and kind, as `plan` wants them.
fn strategies(c: &Composite) -> BTreeMap<GroupKind, UpdateStrategy> {
    c.children
        .iter()
        .zip(&c.spec.child_resources)
        .map(|(t, spec)| {
            (
                GroupKind::new(&t.resource.group, &t.resource.kind),
                spec.update_strategy.clone(),
            )
        })
        .collect()
}

/// Whether a ControllerRevision carries the labels naming this controller's parent type.
fn labelled_for(c: &Composite, revision: &Value) -> bool {
    let labels = &revision["metadata"]["labels"];
    labels[LABEL_API_GROUP].as_str() == Some(c.parent.group.as_str())
        && labels[LABEL_RESOURCE].as_str() == Some(c.parent.plural.as_str())
}

/// Claims the ControllerRevisions of `parent` in its namespace (selector: the parent's
/// child selector plus the apiGroup and resource labels): keeps ours, adopts matching
/// orphans, releases ours that stopped matching — the rules children follow.
async fn claim_revisions(
    c: &Composite,
    cluster: &dyn Cluster,
    revisions: &Resource,
    parent: &Value,
    selector: &Selector,
) -> Result<Vec<Value>, SyncError> {
    let parent_uid = uid_of(parent);
    let deleting = is_deleting(parent);
    let owner = Owner::of(parent);
    let mut claimed = Vec::new();
    let mut can_adopt: Option<bool> = None;
    let mut errors = Vec::new();
    for revision in cluster.list(revisions, Some(namespace_of(parent))).await? {
        let matches = selector.matches_labels(&revision) && labelled_for(c, &revision);
        match claim::decide(parent_uid, deleting, &revision, matches) {
            Claim::Ignore => {}
            Claim::Keep => claimed.push((*revision).clone()),
            Claim::Release => {
                tracing::debug!(parent = %key_of(parent), revision = %name_of(&revision),
                    "releasing a ControllerRevision that no longer matches");
                let released = claim::release(&revision, parent_uid);
                match cluster.replace(revisions, released).await {
                    Ok(_) | Err(ClusterError::NotFound(_)) => {}
                    Err(e) => errors.push(format!(
                        "releasing ControllerRevision {}: {e}",
                        key_of(&revision)
                    )),
                }
            }
            Claim::Adopt => {
                if can_adopt.is_none() {
                    // An uncached read: the parent must still be this one and alive.
                    let fresh = cluster
                        .get(&c.parent, namespace_of(parent), name_of(parent))
                        .await;
                    can_adopt =
                        Some(fresh.is_ok_and(|p| uid_of(&p) == parent_uid && !is_deleting(&p)));
                }
                if can_adopt != Some(true) {
                    continue;
                }
                tracing::debug!(parent = %key_of(parent), revision = %name_of(&revision),
                    "adopting an orphaned ControllerRevision");
                match cluster
                    .replace(revisions, claim::adopt(&revision, &owner))
                    .await
                {
                    Ok(adopted) => claimed.push(adopted),
                    Err(ClusterError::NotFound(_)) => {}
                    Err(e) => errors.push(format!(
                        "adopting ControllerRevision {}: {e}",
                        key_of(&revision)
                    )),
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(SyncError::transient(errors.join("; ")));
    }
    Ok(claimed)
}

/// One hook call for one parent revision: its own related objects, the shared observed
/// children. Returns the answer, its digest and its warnings.
async fn call_hook(
    c: &Composite,
    cluster: &dyn Cluster,
    parent: &Value,
    observed: &GroupMap,
    hook_type: HookType,
    bound: &BoundHook,
    finalizing: bool,
) -> Result<(RevisionAnswer, String, Vec<String>), SyncError> {
    let related = steps::related_of(cluster, c.customizer.as_ref(), &c.object, parent).await?;
    let (body, _) = c.request(parent, observed, &related, bound.hook.version, finalizing);
    let (answer, _) = steps::call_hook(bound, body, parent).await?;
    let decoded = decode_composite(
        hook_type,
        bound.hook.version,
        bound.hook.unmarshal_mode(),
        &answer,
    )
    .map_err(|e| SyncError::permanent(e.to_string()))?;
    let response = decoded.response;
    Ok((
        RevisionAnswer {
            status: response.status.unwrap_or(Value::Null),
            children: response.children.unwrap_or_default(),
            resync_after_seconds: response.resync_after_seconds,
            finalized: response.finalized,
        },
        digest(&answer),
        decoded.warnings,
    ))
}

/// The rolling sync of `parent` up to (not including) ManageChildren: claims revisions,
/// calls the hook once per parent revision concurrently, plans one rollout step and
/// persists the revisions (delete, update, create) before any child is touched. A failure
/// aborts the sync before any child is written; revision writes already done stand on
/// their own (the next sync plans again from the stored revisions).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn sync_revisions(
    c: &Composite,
    cluster: &dyn Cluster,
    parent: &Value,
    selector: &Selector,
    observed: &GroupMap,
    hook_type: HookType,
    bound: &BoundHook,
    finalizing: bool,
) -> Result<RolloutSync, SyncError> {
    if let Some(refusal) = cluster_scoped_refusal(c) {
        return Err(SyncError::permanent(refusal));
    }
    let Some(revisions) = &c.revisions else {
        return Err(SyncError::permanent(
            "rolling update without the ControllerRevision resource resolved",
        ));
    };
    let parent_key = key_of(parent);
    let claimed = claim_revisions(c, cluster, revisions, parent, selector).await?;
    let field_paths = c
        .spec
        .parent_resource
        .revision_history
        .as_ref()
        .map(|h| h.field_paths.as_slice())
        .unwrap_or_default();
    let parents = parent_revisions(parent, &claimed, field_paths)
        .map_err(|e| SyncError::permanent(e.to_string()))?;
    let calls = parents.items.iter().map(|item| {
        call_hook(
            c,
            cluster,
            &item.parent,
            observed,
            hook_type,
            bound,
            finalizing,
        )
    });
    let results = try_join_all(calls).await?;
    let mut answers = Vec::with_capacity(results.len());
    let mut digests = Vec::with_capacity(results.len());
    let mut warnings = Vec::new();
    for (answer, d, w) in results {
        answers.push(answer);
        digests.push(d);
        warnings.extend(w);
    }
    let observed_children = ObservedChildren::from_objects(
        observed
            .values()
            .flat_map(|m| m.values().map(std::sync::Arc::as_ref)),
    );
    let strategies = strategies(c);
    let step = plan(&RolloutInput {
        parent,
        parent_group: &c.parent.group,
        parent_plural: &c.parent.plural,
        generate_selector: c.spec.generate_selector == Some(true),
        revisions: &parents,
        answers: &answers,
        observed: &observed_children,
        strategies: &strategies,
        apply_strategy: c.strategy,
    })
    .map_err(|e| SyncError::permanent(e.to_string()))?;

    // Refuse children the composite sync would refuse before recording a step for them.
    for child in &step.children {
        if !selector.matches_labels(child) {
            return Err(SyncError::permanent(format!(
                "labels on desired child {} {} don't match parent selector",
                child["kind"].as_str().unwrap_or_default(),
                key_of(child)
            )));
        }
    }
    children::group_desired(step.children.clone(), &c.children)
        .map_err(|e| SyncError::permanent(e.to_string()))?;

    // Persist the revisions before touching any child.
    for r in &step.delete {
        cluster
            .delete(revisions, &r.namespace, &r.name, &r.uid)
            .await
            .map_err(|e| {
                SyncError::Failed(PortError::from(e).context("pruning ControllerRevision"))
            })?;
        tracing::debug!(parent = %parent_key, revision = %r.name, "ControllerRevision pruned");
    }
    for object in &step.update {
        cluster
            .replace(revisions, object.clone())
            .await
            .map_err(|e| {
                SyncError::Failed(PortError::from(e).context("updating ControllerRevision"))
            })?;
        tracing::debug!(parent = %parent_key, revision = %name_of(object), "ControllerRevision updated");
    }
    for object in &step.create {
        match cluster.create(revisions, object.clone()).await {
            Ok(_) => {}
            Err(e @ ClusterError::AlreadyExists(_)) => {
                return Err(SyncError::permanent(format!(
                    "creating ControllerRevision: {e} but is not claimed by this parent \
                     (do its labels match the parent's selector?)"
                )));
            }
            Err(e) => {
                return Err(SyncError::Failed(
                    PortError::from(e).context("creating ControllerRevision"),
                ));
            }
        }
        tracing::debug!(parent = %parent_key, revision = %name_of(object), "ControllerRevision created");
    }
    if step.updated.reason == "RolloutProgressing" {
        tracing::info!(parent = %parent_key, revision = %step.latest_revision,
            "rollout: {}", step.updated.message);
    } else {
        tracing::debug!(parent = %parent_key, revision = %step.latest_revision,
            reason = %step.updated.reason, "rollout: {}", step.updated.message);
    }
    Ok(RolloutSync {
        response: CompositeResponse {
            status: Some(step.status),
            children: Some(step.children),
            resync_after_seconds: step.resync_after_seconds,
            finalized: step.finalized,
        },
        answer_digest: digests.join("+"),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::children::{ApplyStrategy, ChildType};
    use crate::ports::{BoxFut, HookClient, HookError};
    use crate::types::{Hook, parse_composite};

    struct NoHook;

    impl HookClient for NoHook {
        fn url(&self) -> &str {
            "http://127.0.0.1:9/finalize"
        }
        fn call(&self, _: bytes::Bytes, _: String) -> BoxFut<'_, Result<bytes::Bytes, HookError>> {
            Box::pin(async { Ok(bytes::Bytes::from_static(b"{}")) })
        }
    }

    fn resource(group: &str, plural: &str, kind: &str, namespaced: bool) -> Resource {
        Resource {
            api_version: format!("{group}/v1"),
            group: group.into(),
            version: "v1".into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status_subresource: true,
        }
    }

    /// A composite with a ConfigMap child updated by `method` and a finalize hook.
    fn composite(method: &str, namespaced_parent: bool) -> Composite {
        let object = json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": {"name": "things"},
            "spec": {
                "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                "childResources": [
                    {"apiVersion": "v1", "resource": "secrets"},
                    {"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": method}}
                ],
                "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:9/sync"}}}
            }
        });
        let (name, spec) = parse_composite(&object).expect("spec");
        let children = spec
            .child_resources
            .iter()
            .map(|c| ChildType {
                resource: resource("", &c.resource.resource, "Thing", true),
                method: c.update_strategy.method,
            })
            .collect();
        Composite {
            name,
            object,
            spec,
            parent: resource("example.com", "things", "Thing", namespaced_parent),
            children,
            parent_selector: Selector::default(),
            sync: None,
            finalize: Some(BoundHook {
                hook: Hook::default(),
                client: Arc::new(NoHook),
            }),
            customizer: None,
            strategy: ApplyStrategy::DynamicApply,
            revisions: None,
            settled: Default::default(),
            requests: Default::default(),
        }
    }

    fn parent(finalizers: &[&str], deleting: bool) -> Value {
        let mut p = json!({"metadata": {"name": "p", "namespace": "ns", "finalizers": finalizers}});
        if deleting {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        p
    }

    #[test]
    fn the_rollout_is_used_for_rolling_kinds_unless_deleting_without_our_finalizer() {
        let ours = "metacontroller.io/compositecontroller-things";
        let rolling = composite("RollingInPlace", true);
        assert!(uses_rollout(&rolling, &parent(&[], false)));
        assert!(uses_rollout(&rolling, &parent(&[ours], true)));
        assert!(!uses_rollout(&rolling, &parent(&[], true)));
        assert!(!uses_rollout(
            &rolling,
            &parent(&[ours, "foregroundDeletion"], true)
        ));
        assert!(!uses_rollout(&rolling, &parent(&[ours, "orphan"], true)));
        let in_place = composite("InPlace", true);
        assert!(!uses_rollout(&in_place, &parent(&[], false)));
    }

    #[test]
    fn rolling_methods_need_a_namespaced_parent() {
        assert_eq!(
            cluster_scoped_refusal(&composite("RollingInPlace", true)),
            None
        );
        assert_eq!(cluster_scoped_refusal(&composite("Recreate", false)), None);
        let refusal = cluster_scoped_refusal(&composite("RollingRecreate", false));
        assert_eq!(
            refusal.as_deref(),
            Some(
                "spec.childResources[1].updateStrategy.method: RollingRecreate needs a \
                 namespaced parent resource (ControllerRevisions are namespaced), and \
                 things.example.com is cluster-scoped"
            )
        );
    }
}
