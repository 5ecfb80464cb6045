//! ManageChildren: makes the observed children of a parent what its hook desired.
//!
//! Deletes first, then creates and updates, each in sorted group order; errors are
//! collected and the rest goes on. Every delete carries the child's uid as a
//! precondition and propagates in the background. An update is computed with the 3-way
//! apply (`apply.rs`) and skipped when it changes nothing, so an unchanged answer costs
//! no write.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::apply::{self, contains};
use crate::claim::{Owner, has_owner};
use crate::keys::{GroupMap, group_key, name_of, namespace_of, uid_of};
use crate::ports::{Cluster, ClusterError, Resource};
use crate::types::UpdateMethod;

/// How children are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApplyStrategy {
    /// metacontroller's 3-way merge with the last-applied annotation (the default).
    #[default]
    DynamicApply,
    /// Server-side apply with a field manager.
    ServerSideApply,
}

/// A child or attachment type a controller manages.
#[derive(Clone, Debug)]
pub struct ChildType {
    pub resource: Resource,
    pub method: UpdateMethod,
}

impl ChildType {
    /// The group key of this type (`Kind.apiVersion` as written in the rule).
    pub fn group_key(&self) -> String {
        group_key(&self.resource.api_version, &self.resource.kind)
    }
}

/// What one ManageChildren pass did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Applied {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub deleted: Vec<String>,
    /// `Kind name: error` for each child that could not be written.
    pub errors: Vec<String>,
    /// Children that were to change but were not written: an `OnDelete` child that
    /// differs, an update that met a conflict or a deleted child, a create that found
    /// the name taken.
    pub not_written: usize,
    /// Of those, the ones another writer got to first (a conflict, a deleted child, a
    /// name taken): written by the next sync, which comes soon ([`RACED_RESYNC`]).
    pub raced: Vec<String>,
}

/// When a sync whose children's writes met another writer runs again: upstream retries
/// such a write within the sync; here the next sync, reading the child afresh, does.
pub const RACED_RESYNC: std::time::Duration = std::time::Duration::from_secs(1);

impl Applied {
    /// When the parent is synced again for children another writer got to first:
    /// `resync`, made no later than [`RACED_RESYNC`] when there are some.
    pub fn resync(&self, resync: Option<std::time::Duration>) -> Option<std::time::Duration> {
        if self.raced.is_empty() {
            return resync;
        }
        Some(resync.map_or(RACED_RESYNC, |r| r.min(RACED_RESYNC)))
    }

    /// Whether anything was written.
    pub fn changed(&self) -> bool {
        !(self.created.is_empty() && self.updated.is_empty() && self.deleted.is_empty())
    }
}

fn describe(kind: &str, object: &Value) -> String {
    let ns = namespace_of(object);
    if ns.is_empty() {
        format!("{kind} {}", name_of(object))
    } else {
        format!("{kind} {ns}/{}", name_of(object))
    }
}

/// A desired object whose type the controller does not declare.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name} ({api_version}) is not one of the controller's child resources")]
pub struct UndeclaredChild {
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its apiVersion.
    pub api_version: String,
}

/// Sorts desired objects into a group map by their own `apiVersion`/`kind`, matched to
/// the declared types (by group and kind when the version differs). An object of an
/// undeclared type is an error naming it.
pub(crate) fn group_desired(
    desired: Vec<Value>,
    types: &[ChildType],
) -> Result<GroupMap, UndeclaredChild> {
    let mut out = GroupMap::new();
    for t in types {
        out.entry(t.group_key()).or_default();
    }
    for object in desired {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let Some(t) = types
            .iter()
            .find(|t| t.resource.api_version == api_version && t.resource.kind == kind)
            .or_else(|| {
                types
                    .iter()
                    .find(|t| t.resource.group == group && t.resource.kind == kind)
            })
        else {
            return Err(UndeclaredChild {
                kind: kind.to_string(),
                name: name_of(&object).to_string(),
                api_version: api_version.to_string(),
            });
        };
        let key = crate::keys::key_of(&object);
        out.entry(t.group_key())
            .or_default()
            .insert(key, Arc::new(object));
    }
    Ok(out)
}

/// The desired objects as `Kind.version key` lines (the debug view's "planned").
pub fn planned(desired: &GroupMap) -> Arc<[String]> {
    desired
        .iter()
        .flat_map(|(group, objects)| objects.keys().map(move |k| format!("{group} {k}")))
        .collect()
}

/// One write ManageChildren makes for one child, or why it makes none: what [`plan`]
/// decides and [`apply`] carries out.
#[derive(Clone, Debug, PartialEq)]
pub enum ChildAction {
    /// An observed child no longer desired: deleted with its uid as precondition.
    Delete {
        resource: Resource,
        /// `Kind namespace/name`, as the journal names it.
        what: String,
        namespace: String,
        name: String,
        uid: String,
    },
    /// A desired child not observed: created (or applied with server-side apply).
    Create {
        resource: Resource,
        what: String,
        object: Value,
        server_side: bool,
    },
    /// A child that differs from its desired state, updated in place: the merged object
    /// replaced (or the desired fields applied with server-side apply).
    Update {
        resource: Resource,
        what: String,
        object: Value,
        server_side: bool,
    },
    /// A child that differs and whose method recreates it: deleted now, created again by
    /// a later sync.
    Recreate {
        resource: Resource,
        what: String,
        namespace: String,
        name: String,
        uid: String,
    },
    /// A child that differs but is left as it is: `OnDelete`, or being deleted.
    Hold,
    /// A child whose update could not be computed: the error, naming it.
    Invalid(String),
}

/// ManageChildren's decision for one parent (pure): deletes first, then creates and
/// updates, each in sorted group order; a child already as desired needs no action.
pub fn plan(
    owner: &Owner,
    types: &[ChildType],
    observed: &GroupMap,
    desired: &GroupMap,
    strategy: ApplyStrategy,
) -> Vec<ChildAction> {
    let mut actions = Vec::new();
    let mut sorted: Vec<&ChildType> = types.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.resource.group, &a.resource.version, &a.resource.kind).cmp(&(
            &b.resource.group,
            &b.resource.version,
            &b.resource.kind,
        ))
    });
    let empty = BTreeMap::new();
    // Deletes first.
    for t in &sorted {
        let key = t.group_key();
        let want = desired.get(&key).unwrap_or(&empty);
        for (k, object) in observed.get(&key).unwrap_or(&empty) {
            if want.contains_key(k) || !object["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            actions.push(ChildAction::Delete {
                resource: t.resource.clone(),
                what: describe(&t.resource.kind, object),
                namespace: namespace_of(object).to_string(),
                name: name_of(object).to_string(),
                uid: uid_of(object).to_string(),
            });
        }
    }
    // Then creates and updates.
    for t in &sorted {
        let key = t.group_key();
        let have = observed.get(&key).unwrap_or(&empty);
        for (k, want) in desired.get(&key).unwrap_or(&empty) {
            let what = describe(&t.resource.kind, want);
            let action = match have.get(k) {
                None => Some(create(&t.resource, owner, want, strategy, what)),
                Some(current) => update(t, owner, current, want, strategy, what),
            };
            actions.extend(action);
        }
    }
    actions
}

/// Carries out ManageChildren's actions in order; errors are collected and the rest
/// goes on.
pub async fn apply(cluster: &dyn Cluster, actions: Vec<ChildAction>) -> Applied {
    let mut applied = Applied::default();
    for action in actions {
        match action {
            ChildAction::Delete {
                resource,
                what,
                namespace,
                name,
                uid,
            } => match cluster.delete(&resource, &namespace, &name, &uid).await {
                Ok(()) => applied.deleted.push(what),
                Err(e) => applied.errors.push(format!("deleting {what}: {e}")),
            },
            ChildAction::Create {
                resource,
                what,
                object,
                server_side,
            } => {
                let result = if server_side {
                    cluster.apply(&resource, object, false).await
                } else {
                    cluster.create(&resource, object).await
                };
                match result {
                    Ok(_) => applied.created.push(what),
                    Err(ClusterError::AlreadyExists(_)) => {
                        applied.not_written += 1;
                        applied.raced.push(what);
                    }
                    Err(e) => applied.errors.push(format!("{what}: {e}")),
                }
            }
            ChildAction::Update {
                resource,
                what,
                object,
                server_side,
            } => {
                let result = if server_side {
                    cluster.apply(&resource, object, false).await
                } else {
                    cluster.replace(&resource, object).await
                };
                match result {
                    Ok(_) => applied.updated.push(what),
                    Err(ClusterError::Conflict(_)) => {
                        applied.not_written += 1;
                        applied.raced.push(what);
                    }
                    Err(ClusterError::NotFound(_)) if !server_side => {
                        applied.not_written += 1;
                        applied.raced.push(what);
                    }
                    Err(e) => applied.errors.push(format!("{what}: {e}")),
                }
            }
            ChildAction::Recreate {
                resource,
                what,
                namespace,
                name,
                uid,
            } => match cluster.delete(&resource, &namespace, &name, &uid).await {
                Ok(()) => applied.deleted.push(what),
                Err(e) => applied.errors.push(format!("{what}: {e}")),
            },
            ChildAction::Hold => applied.not_written += 1,
            ChildAction::Invalid(error) => applied.errors.push(error),
        }
    }
    applied
}

/// Runs ManageChildren for one parent: [`plan`], then [`apply`].
pub async fn manage(
    cluster: &dyn Cluster,
    owner: &Owner,
    types: &[ChildType],
    observed: &GroupMap,
    desired: &GroupMap,
    strategy: ApplyStrategy,
) -> Applied {
    apply(cluster, plan(owner, types, observed, desired, strategy)).await
}

fn with_owner(object: &Value, owner: &Owner) -> Value {
    let mut out = object.clone();
    if !has_owner(&out, &owner.uid) {
        let refs = &mut out["metadata"]["ownerReferences"];
        let mut list = refs.as_array().cloned().unwrap_or_default();
        list.push(owner.controller_ref());
        *refs = Value::Array(list);
    }
    out
}

/// The object sent by server-side apply: ours, without system fields, status and the
/// last-applied annotation.
fn for_ssa(object: &Value, owner: &Owner) -> Value {
    ssa_fields(&with_owner(object, owner))
}

/// `object` without system fields, status and the last-applied annotation.
fn ssa_fields(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(meta) = out["metadata"].as_object_mut() {
        for f in [
            "selfLink",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ] {
            meta.remove(f);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(crate::types::LAST_APPLIED_ANNOTATION);
        }
    }
    if let Some(o) = out.as_object_mut() {
        o.remove("status");
    }
    out
}

fn create(
    resource: &Resource,
    owner: &Owner,
    desired: &Value,
    strategy: ApplyStrategy,
    what: String,
) -> ChildAction {
    let (object, server_side) = match strategy {
        ApplyStrategy::DynamicApply => {
            (with_owner(&apply::with_last_applied(desired), owner), false)
        }
        ApplyStrategy::ServerSideApply => (for_ssa(desired, owner), true),
    };
    ChildAction::Create {
        resource: resource.clone(),
        what,
        object,
        server_side,
    }
}

/// The action that makes `observed` what `desired` asks for; `None` when it already is.
fn update(
    t: &ChildType,
    owner: &Owner,
    observed: &Value,
    desired: &Value,
    strategy: ApplyStrategy,
    what: String,
) -> Option<ChildAction> {
    if !observed["metadata"]["deletionTimestamp"].is_null() {
        return Some(ChildAction::Hold);
    }
    let server_side = strategy == ApplyStrategy::ServerSideApply;
    let object = if server_side {
        let object = for_ssa(desired, owner);
        if contains(observed, &object) {
            return None;
        }
        object
    } else {
        if apply::already_applied(observed, desired) {
            return None;
        }
        let merged = match apply::apply_update(observed, desired) {
            Ok(merged) => merged,
            Err(e) => {
                let e = ClusterError::Other {
                    what: describe(&t.resource.kind, observed),
                    message: e.to_string(),
                };
                return Some(ChildAction::Invalid(format!("{what}: {e}")));
            }
        };
        if merged == *observed {
            return None;
        }
        merged
    };
    Some(match t.method {
        UpdateMethod::OnDelete => ChildAction::Hold,
        UpdateMethod::Recreate | UpdateMethod::RollingRecreate => ChildAction::Recreate {
            resource: t.resource.clone(),
            what,
            namespace: namespace_of(observed).to_string(),
            name: name_of(observed).to_string(),
            uid: uid_of(observed).to_string(),
        },
        UpdateMethod::InPlace | UpdateMethod::RollingInPlace => ChildAction::Update {
            resource: t.resource.clone(),
            what,
            object,
            server_side,
        },
    })
}

/// Whether a child written with server-side apply is what `desired` asks for: every field
/// we would apply already holds in `observed` (the test that makes an apply a no-op). A
/// rolling update reads this in that mode: such children carry no last-applied
/// annotation for the 3-way check to compare with.
pub(crate) fn ssa_applied(observed: &Value, desired: &Value) -> bool {
    contains(observed, &ssa_fields(desired))
}

/// Children of the given types that `owner` controls or that are orphans, from the
/// informer caches: the candidates of a claim pass.
pub async fn candidates(
    cluster: &dyn Cluster,
    types: &[ChildType],
    namespace: Option<&str>,
    owner_uid: &str,
) -> Result<Vec<(ChildType, Vec<Arc<Value>>)>, ClusterError> {
    let mut out = Vec::new();
    for t in types {
        let ns = if t.resource.namespaced {
            namespace
        } else {
            None
        };
        let objects = cluster.candidates(&t.resource, ns, owner_uid).await?;
        out.push((t.clone(), objects));
    }
    Ok(out)
}
