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

use crate::apply;
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
}

impl Applied {
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

/// Sorts desired objects into a group map by their own `apiVersion`/`kind`, matched to
/// the declared types (by group and kind when the version differs). An object of an
/// undeclared type is an error naming it.
pub fn group_desired(desired: Vec<Value>, types: &[ChildType]) -> Result<GroupMap, String> {
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
            return Err(format!(
                "{kind} {} ({api_version}) is not one of the controller's child resources",
                name_of(&object)
            ));
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

/// Runs ManageChildren for one parent.
pub async fn manage(
    cluster: &dyn Cluster,
    owner: &Owner,
    types: &[ChildType],
    observed: &GroupMap,
    desired: &GroupMap,
    strategy: ApplyStrategy,
) -> Applied {
    let mut applied = Applied::default();
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
            let what = describe(&t.resource.kind, object);
            match cluster
                .delete(
                    &t.resource,
                    namespace_of(object),
                    name_of(object),
                    uid_of(object),
                )
                .await
            {
                Ok(()) => applied.deleted.push(what),
                Err(e) => applied.errors.push(format!("deleting {what}: {e}")),
            }
        }
    }
    // Then creates and updates.
    for t in &sorted {
        let key = t.group_key();
        let have = observed.get(&key).unwrap_or(&empty);
        for (k, want) in desired.get(&key).unwrap_or(&empty) {
            let what = describe(&t.resource.kind, want);
            let result = match have.get(k) {
                None => create(cluster, &t.resource, owner, want, strategy).await,
                Some(current) => update(cluster, t, owner, current, want, strategy).await,
            };
            match result {
                Ok(Outcome::Created) => applied.created.push(what),
                Ok(Outcome::Updated) => applied.updated.push(what),
                Ok(Outcome::Deleted) => applied.deleted.push(what),
                Ok(Outcome::Unchanged) => {}
                Ok(Outcome::NotWritten) => applied.not_written += 1,
                Err(e) => applied.errors.push(format!("{what}: {e}")),
            }
        }
    }
    applied
}

enum Outcome {
    Created,
    Updated,
    Deleted,
    /// The child already is what the hook asked for.
    Unchanged,
    /// The child differs but was left as it is (see [`Applied::not_written`]).
    NotWritten,
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

async fn create(
    cluster: &dyn Cluster,
    resource: &Resource,
    owner: &Owner,
    desired: &Value,
    strategy: ApplyStrategy,
) -> Result<Outcome, ClusterError> {
    let result = match strategy {
        ApplyStrategy::DynamicApply => {
            let object = with_owner(&apply::with_last_applied(desired), owner);
            cluster.create(resource, object).await
        }
        ApplyStrategy::ServerSideApply => {
            cluster
                .apply(resource, for_ssa(desired, owner), false)
                .await
        }
    };
    match result {
        Ok(_) => Ok(Outcome::Created),
        Err(ClusterError::AlreadyExists(_)) => Ok(Outcome::NotWritten),
        Err(e) => Err(e),
    }
}

async fn update(
    cluster: &dyn Cluster,
    t: &ChildType,
    owner: &Owner,
    observed: &Value,
    desired: &Value,
    strategy: ApplyStrategy,
) -> Result<Outcome, ClusterError> {
    if !observed["metadata"]["deletionTimestamp"].is_null() {
        return Ok(Outcome::NotWritten);
    }
    if strategy == ApplyStrategy::ServerSideApply {
        return update_ssa(cluster, t, owner, observed, desired).await;
    }
    let merged = apply::apply_update(observed, desired).map_err(|e| ClusterError::Other {
        what: describe(&t.resource.kind, observed),
        message: e.to_string(),
    })?;
    if merged == *observed {
        return Ok(Outcome::Unchanged);
    }
    match t.method {
        UpdateMethod::OnDelete => Ok(Outcome::NotWritten),
        UpdateMethod::Recreate | UpdateMethod::RollingRecreate => {
            delete(cluster, &t.resource, observed).await
        }
        UpdateMethod::InPlace | UpdateMethod::RollingInPlace => {
            match cluster.replace(&t.resource, merged).await {
                Ok(_) => Ok(Outcome::Updated),
                Err(ClusterError::NotFound(_) | ClusterError::Conflict(_)) => {
                    Ok(Outcome::NotWritten)
                }
                Err(e) => Err(e),
            }
        }
    }
}

async fn delete(
    cluster: &dyn Cluster,
    resource: &Resource,
    observed: &Value,
) -> Result<Outcome, ClusterError> {
    cluster
        .delete(
            resource,
            namespace_of(observed),
            name_of(observed),
            uid_of(observed),
        )
        .await?;
    Ok(Outcome::Deleted)
}

/// Whether a child written with server-side apply is what `desired` asks for: every field
/// we would apply already holds in `observed` (the test that makes an apply a no-op). A
/// rolling update reads this in that mode: such children carry no last-applied
/// annotation for the 3-way check to compare with.
pub fn ssa_applied(observed: &Value, desired: &Value) -> bool {
    contains(observed, &ssa_fields(desired))
}

/// Whether the fields we apply already hold in `observed` (server-side apply's no-op).
fn contains(observed: &Value, wanted: &Value) -> bool {
    match (observed, wanted) {
        (Value::Object(o), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| o.get(k).is_some_and(|ov| contains(ov, v))),
        (o, w) => o == w,
    }
}

async fn update_ssa(
    cluster: &dyn Cluster,
    t: &ChildType,
    owner: &Owner,
    observed: &Value,
    desired: &Value,
) -> Result<Outcome, ClusterError> {
    let object = for_ssa(desired, owner);
    if contains(observed, &object) {
        return Ok(Outcome::Unchanged);
    }
    match t.method {
        UpdateMethod::OnDelete => Ok(Outcome::NotWritten),
        UpdateMethod::Recreate | UpdateMethod::RollingRecreate => {
            delete(cluster, &t.resource, observed).await
        }
        UpdateMethod::InPlace | UpdateMethod::RollingInPlace => {
            match cluster.apply(&t.resource, object, false).await {
                Ok(_) => Ok(Outcome::Updated),
                Err(ClusterError::Conflict(_)) => Ok(Outcome::NotWritten),
                Err(e) => Err(e),
            }
        }
    }
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
