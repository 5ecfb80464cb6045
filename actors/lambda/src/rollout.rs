//! Rolling updates of a CompositeController's children through ControllerRevisions
//! (pure planning; metacontroller's `controller_revision.go` and `rolling_update.go`).
//!
//! ```text
//!   parent + claimed ControllerRevisions ──parent_revisions──► [latest, virtual parents…]
//!   caller: one sync hook call per parent revision (in parallel) ──► RevisionAnswer each
//!   plan(answers, observed children, update strategies)
//!     ──► RolloutPlan { children to manage, status with the `Updated` condition,
//!                       revisions to delete / update / create, resync, finalized }
//! ```
//!
//! A ControllerRevision records one state of the parent (`parentPatch`: the parent's
//! `revisionHistory.fieldPaths`, default `spec`) and the children still managed as that
//! state wants (`children[].names`). Every sync moves at most one child of a rolling kind
//! to the latest revision, and only when every child already there is observed, up to date
//! (the apply would be a no-op) and passes its kind's `statusChecks`.
//!
//! What the caller does around [`plan`]:
//! 1. Claims the ControllerRevisions in the parent's namespace (parent selector plus the
//!    `metacontroller.k8s.io/apiGroup` and `…/resource` labels), as for children.
//! 2. Calls [`parent_revisions`], then the sync hook (or the finalize hook) for each
//!    returned parent, with that parent's own related objects and the same observed
//!    children; any failed call aborts the sync.
//! 3. Calls [`plan`] and **persists the revisions before touching any child**: delete
//!    [`RolloutPlan::delete`] (uid precondition), update [`RolloutPlan::update`] (the
//!    objects carry the observed `resourceVersion`), create [`RolloutPlan::create`]. If
//!    that fails, stop: a rollout step is only taken once it is recorded, so a crash between
//!    the two leaves nothing moved without a revision saying so.
//! 4. Manages [`RolloutPlan::children`] as the desired children (rolling kinds updated as
//!    `RollingRecreate` = Recreate, `RollingInPlace` = InPlace) and writes
//!    [`RolloutPlan::status`].
//!
//! The rollout is used only when some child kind has a rolling method, and not for a
//! parent being deleted without our finalizer to honour.
//!
//! Differences from metacontroller, on purpose:
//! - **One key inside, metacontroller's names outside**: children are keyed
//!   `namespace/name` (namespaced) or `name` (cluster-scoped) in the desired maps and the
//!   observed children. metacontroller stores bare names for a namespaced parent and looks
//!   them up in a map keyed `namespace/name`, so its rollouts of namespaced children wait
//!   forever on "missing child". bosun reads a bare name as the parent's namespace and
//!   writes revisions as metacontroller does (a child in the parent's namespace by its
//!   bare name), so either can take over from the other mid-rollout; revisions an earlier
//!   bosun wrote with `namespace/name` are read too and rewritten once.
//! - **The `Updated` condition is written**: replaced by type, appended otherwise; a `null`
//!   hook status counts as `{}`.
//! - **Claims dropped from a revision are written back** (metacontroller only drops whole
//!   kinds), so a revision is pruned as soon as it no longer claims a child.
//! - **The "is it updated" check sees what is applied**: desired children get the parent's
//!   namespace and (with `generateSelector`) the `controller-uid` label before the check,
//!   as they do before the apply.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::apply::{already_applied, apply_update, canonical_json};
use crate::children::ApplyStrategy;
use crate::types::{GROUP, UpdateMethod, UpdateStrategy};

/// Label naming the parent's API group on a ControllerRevision.
pub(crate) const LABEL_API_GROUP: &str = "metacontroller.k8s.io/apiGroup";
/// Label naming the parent's resource (plural) on a ControllerRevision.
pub(crate) const LABEL_RESOURCE: &str = "metacontroller.k8s.io/resource";
/// The label `generateSelector` puts on children and revisions.
pub(crate) const LABEL_CONTROLLER_UID: &str = "controller-uid";
/// The parent status condition reporting the rollout.
pub(crate) const UPDATED_CONDITION: &str = "Updated";

/// A child kind regardless of version: revisions and update strategies ignore versions.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKind {
    /// The API group, empty for the core group.
    pub group: String,
    pub kind: String,
}

impl GroupKind {
    pub fn new(group: impl Into<String>, kind: impl Into<String>) -> GroupKind {
        GroupKind {
            group: group.into(),
            kind: kind.into(),
        }
    }

    /// The group and kind of an object, from its `apiVersion` and `kind`.
    pub fn of(object: &Value) -> GroupKind {
        let api_version = object["apiVersion"].as_str().unwrap_or("");
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        GroupKind::new(group, object["kind"].as_str().unwrap_or(""))
    }
}

/// The uniform key of an object: `namespace/name`, or `name` when it has no namespace.
pub fn object_key(object: &Value) -> String {
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    match object["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// A rollout that cannot be planned.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RolloutError {
    /// A stored ControllerRevision cannot be read.
    #[error("ControllerRevision {revision}: {message}")]
    Revision { revision: String, message: String },
    /// The caller passed a different number of hook answers than parent revisions.
    #[error("{parent}: {answers} hook answers for {revisions} parent revisions")]
    AnswerCount {
        parent: String,
        answers: usize,
        revisions: usize,
    },
    /// The parent's `spec.template.metadata.labels` (copied onto a new revision) is not
    /// a map of strings.
    #[error("{parent}: invalid labels in spec.template.metadata.labels: {message}")]
    TemplateLabels { parent: String, message: String },
    /// The latest hook answer's status cannot carry the `Updated` condition.
    #[error("{parent}: sync hook status: {message}")]
    Status { parent: String, message: String },
}

impl RolloutError {
    /// A short stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            RolloutError::Revision { .. } => "revision",
            RolloutError::AnswerCount { .. } => "answer_count",
            RolloutError::TemplateLabels { .. } => "template_labels",
            RolloutError::Status { .. } => "status",
        }
    }
}

/// `kind namespace/name` of an object, for messages.
fn describe(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or("object");
    format!("{kind} {}", object_key(object))
}

fn field_paths_or_spec(field_paths: &[String]) -> Vec<Vec<&str>> {
    if field_paths.is_empty() {
        vec![vec!["spec"]]
    } else {
        field_paths.iter().map(|p| p.split('.').collect()).collect()
    }
}

fn get_path<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, key| v.as_object()?.get(*key))
}

fn set_path(v: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for key in parents {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        cur = &mut cur[*key];
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    cur[*last] = value;
}

/// The revision-relevant part of `parent`: only the dotted `field_paths` (default `spec`)
/// copied into an empty object. A path through a non-object counts as absent.
pub(crate) fn make_patch(parent: &Value, field_paths: &[String]) -> Value {
    let mut patch = Value::Object(Map::new());
    for path in field_paths_or_spec(field_paths) {
        if let Some(v) = get_path(parent, &path) {
            set_path(&mut patch, &path, v.clone());
        }
    }
    patch
}

/// `parent` as a revision saw it: the patch's values written over the field paths (paths
/// the patch lacks keep the current value, as upstream).
fn apply_patch(parent: &Value, patch: &Value, field_paths: &[String]) -> Value {
    let mut out = parent.clone();
    for path in field_paths_or_spec(field_paths) {
        if let Some(v) = get_path(patch, &path) {
            set_path(&mut out, &path, v.clone());
        }
    }
    out
}

/// The name of a parent state's revision:
/// `<plural>.<group or "core">-<hex sha1(parent uid ++ patch JSON)>`, the prefix cut to
/// 212 characters so the name fits in 253. Same as metacontroller for the same patch.
pub(crate) fn revision_name(
    plural: &str,
    group: &str,
    parent_uid: &str,
    patch_json: &str,
) -> String {
    let group = if group.is_empty() { "core" } else { group };
    let mut prefix = format!("{plural}.{group}");
    if prefix.len() > 253 - 41 {
        let mut cut = 253 - 41;
        while !prefix.is_char_boundary(cut) {
            cut -= 1;
        }
        prefix.truncate(cut);
    }
    let mut data = Vec::with_capacity(parent_uid.len() + patch_json.len());
    data.extend_from_slice(parent_uid.as_bytes());
    data.extend_from_slice(patch_json.as_bytes());
    let hex: String = sha1(&data).iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{hex}")
}

/// SHA-1 (FIPS 180-4), used only to name revisions as metacontroller does; not for
/// security.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut message = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&bit_len.to_be_bytes());
    for block in message.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (chunk, word) in out.chunks_exact_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// One state of the parent to call the hook with.
#[derive(Clone, Debug, PartialEq)]
pub struct ParentRevision {
    /// The parent as this revision saw it: the current parent for the latest, else the
    /// current parent with the revision's `parentPatch` written over the field paths.
    pub parent: Value,
    /// The stored ControllerRevision; `None` for a latest state not stored yet.
    pub revision: Option<Value>,
}

/// The parent revisions of one sync: `items[0]` is the latest.
#[derive(Clone, Debug, PartialEq)]
pub struct ParentRevisions {
    /// [`make_patch`] of the current parent.
    pub latest_patch: Value,
    pub items: Vec<ParentRevision>,
}

/// The latest parent first, then one virtual parent per claimed revision whose
/// `parentPatch` differs from the current parent's. The first revision matching the
/// current parent becomes the latest's; another one that also matches (a duplicate) is a
/// virtual parent equal to the latest, emptied and pruned by the rollout.
pub(crate) fn parent_revisions(
    parent: &Value,
    revisions: &[Value],
    field_paths: &[String],
) -> Result<ParentRevisions, RolloutError> {
    let latest_patch = make_patch(parent, field_paths);
    let mut latest = ParentRevision {
        parent: parent.clone(),
        revision: None,
    };
    let mut others = Vec::new();
    for revision in revisions {
        let patch = &revision["parentPatch"];
        if !patch.is_object() {
            return Err(RolloutError::Revision {
                revision: revision_label(revision),
                message: "parentPatch is not a JSON object".into(),
            });
        }
        if *patch == latest_patch && latest.revision.is_none() {
            latest.revision = Some(revision.clone());
            continue;
        }
        others.push(ParentRevision {
            parent: apply_patch(parent, patch, field_paths),
            revision: Some(revision.clone()),
        });
    }
    let mut items = vec![latest];
    items.extend(others);
    Ok(ParentRevisions {
        latest_patch,
        items,
    })
}

fn revision_label(revision: &Value) -> String {
    object_key(revision)
}

/// A hook's answer for one parent revision.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RevisionAnswer {
    /// `status` as answered (`null` counts as `{}`).
    pub status: Value,
    /// The desired children, in the order the hook returned them.
    pub children: Vec<Value>,
    /// `resyncAfterSeconds` (0 or less: none).
    pub resync_after_seconds: f64,
    pub finalized: bool,
}

/// The observed children of the parent, by group/kind and uniform key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedChildren(BTreeMap<(GroupKind, String), Value>);

impl ObservedChildren {
    /// Indexes `objects` by [`GroupKind::of`] and [`object_key`].
    pub fn from_objects<V: Borrow<Value>>(objects: impl IntoIterator<Item = V>) -> Self {
        ObservedChildren(
            objects
                .into_iter()
                .map(|o| {
                    let o = o.borrow();
                    ((GroupKind::of(o), object_key(o)), o.clone())
                })
                .collect(),
        )
    }

    /// One child.
    pub fn get(&self, gk: &GroupKind, key: &str) -> Option<&Value> {
        self.0.get(&(gk.clone(), key.to_string()))
    }
}

/// What [`plan`] needs.
#[derive(Clone, Copy, Debug)]
pub struct RolloutInput<'a> {
    /// The current parent.
    pub parent: &'a Value,
    /// The parent resource's API group (empty for core) and plural.
    pub parent_group: &'a str,
    pub parent_plural: &'a str,
    /// `spec.generateSelector`: label children and revisions `controller-uid=<uid>`.
    pub generate_selector: bool,
    /// From [`parent_revisions`].
    pub revisions: &'a ParentRevisions,
    /// One answer per `revisions.items`, in the same order.
    pub answers: &'a [RevisionAnswer],
    pub observed: &'a ObservedChildren,
    /// Update strategy per child kind; kinds absent here are OnDelete.
    pub strategies: &'a BTreeMap<GroupKind, UpdateStrategy>,
    /// How children are written, which decides how "is this child updated" is read.
    pub apply_strategy: ApplyStrategy,
}

/// The `Updated` condition of the parent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdatedCondition {
    /// `"True"` or `"False"`.
    pub status: String,
    /// `RolloutWaiting`, `RolloutProgressing` or `OnLatestRevision`.
    pub reason: String,
    pub message: String,
}

impl UpdatedCondition {
    fn new(done: bool, reason: &str, message: String) -> Self {
        UpdatedCondition {
            status: if done { "True" } else { "False" }.into(),
            reason: reason.into(),
            message,
        }
    }

    /// As an entry of `status.conditions`.
    pub fn to_value(&self) -> Value {
        json!({"type": UPDATED_CONDITION, "status": self.status,
               "reason": self.reason, "message": self.message})
    }
}

/// A ControllerRevision to delete (with a uid precondition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevisionRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The outcome of one rollout step.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutPlan {
    /// The children to manage, in the latest answer's order: the latest revision's
    /// version, or an older revision's for a child it still claims. Namespaces defaulted
    /// and (`generateSelector`) the `controller-uid` label set.
    pub children: Vec<Value>,
    /// The latest answer's status with the `Updated` condition.
    pub status: Value,
    pub updated: UpdatedCondition,
    /// The name of the latest revision.
    pub latest_revision: String,
    /// Revisions to delete, update and create, in that order, before touching children.
    pub delete: Vec<RevisionRef>,
    pub update: Vec<Value>,
    pub create: Vec<Value>,
    /// The smallest positive `resyncAfterSeconds` of the remaining revisions, or 0.
    pub resync_after_seconds: f64,
    /// Whether every remaining revision's answer says finalized.
    pub finalized: bool,
}

/// `children[]` of a ControllerRevision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Claims {
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    names: Vec<String>,
}

/// One parent revision while planning.
struct Rev<'a> {
    observed: Option<&'a Value>,
    object: Value,
    name: String,
    claims: Vec<Claims>,
    /// Desired children by (kind, key); the latest answer's order is kept apart.
    desired: BTreeMap<(GroupKind, String), Value>,
    answer: &'a RevisionAnswer,
}

impl Rev<'_> {
    fn count(&self) -> usize {
        self.claims.iter().map(|c| c.names.len()).sum()
    }

    fn add(&mut self, gk: &GroupKind, key: &str) {
        let group = match self
            .claims
            .iter_mut()
            .position(|c| c.api_group == gk.group && c.kind == gk.kind)
        {
            Some(i) => &mut self.claims[i],
            None => {
                self.claims.push(Claims {
                    api_group: gk.group.clone(),
                    kind: gk.kind.clone(),
                    names: Vec::new(),
                });
                let last = self.claims.len() - 1;
                &mut self.claims[last]
            }
        };
        if !group.names.iter().any(|n| n == key) {
            group.names.push(key.to_string());
        }
    }

    fn remove(&mut self, gk: &GroupKind, key: &str) {
        for c in &mut self.claims {
            if c.api_group == gk.group && c.kind == gk.kind {
                c.names.retain(|n| n != key);
            }
        }
        self.claims.retain(|c| !c.names.is_empty());
    }
}

/// A desired child as it will be applied: the parent's namespace when it has none, and
/// the `controller-uid` label with `generateSelector`.
fn normalize_child(child: &Value, namespace: &str, controller_uid: Option<&str>) -> Value {
    let mut child = child.clone();
    let Some(object) = child.as_object_mut() else {
        return child;
    };
    let meta = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        return child;
    }
    let has_namespace = meta["namespace"].as_str().is_some_and(|n| !n.is_empty());
    if !has_namespace && !namespace.is_empty() {
        meta["namespace"] = json!(namespace);
    }
    if let Some(uid) = controller_uid {
        if !meta["labels"].is_object() {
            meta["labels"] = json!({});
        }
        if meta["labels"].get(LABEL_CONTROLLER_UID).is_none() {
            meta["labels"][LABEL_CONTROLLER_UID] = json!(uid);
        }
    }
    child
}

/// A new ControllerRevision for the latest parent state.
fn new_revision(input: &RolloutInput<'_>, patch: &Value) -> Result<Value, RolloutError> {
    let parent = input.parent;
    let uid = parent["metadata"]["uid"].as_str().unwrap_or("");
    let mut labels = Map::new();
    if input.generate_selector {
        labels.insert(LABEL_CONTROLLER_UID.into(), json!(uid));
    } else {
        // As upstream (metacontroller#194): the template's labels, not the selector.
        match &parent["spec"]["template"]["metadata"]["labels"] {
            Value::Null => {}
            Value::Object(m) => {
                for (k, v) in m {
                    if !v.is_string() {
                        return Err(RolloutError::TemplateLabels {
                            parent: describe(parent),
                            message: format!("label {k:?} is not a string"),
                        });
                    }
                    labels.insert(k.clone(), v.clone());
                }
            }
            _ => {
                return Err(RolloutError::TemplateLabels {
                    parent: describe(parent),
                    message: "not a map".into(),
                });
            }
        }
    }
    labels.insert(LABEL_API_GROUP.into(), json!(input.parent_group));
    labels.insert(LABEL_RESOURCE.into(), json!(input.parent_plural));
    let name = revision_name(
        input.parent_plural,
        input.parent_group,
        uid,
        &canonical_json(patch),
    );
    let mut metadata = json!({
        "name": name,
        "labels": labels,
        "ownerReferences": [{
            "apiVersion": parent["apiVersion"],
            "kind": parent["kind"],
            "name": parent["metadata"]["name"],
            "uid": uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }],
    });
    if let Some(ns) = parent["metadata"]["namespace"].as_str() {
        metadata["namespace"] = json!(ns);
    }
    Ok(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": "ControllerRevision",
        "metadata": metadata,
        "parentPatch": patch,
    }))
}

fn read_claims(revision: &Value) -> Result<Vec<Claims>, RolloutError> {
    match &revision["children"] {
        Value::Null => Ok(Vec::new()),
        children => serde_json::from_value(children.clone()).map_err(|e| RolloutError::Revision {
            revision: revision_label(revision),
            message: format!("children: {e}"),
        }),
    }
}

/// Writes `claims` into `revision` as metacontroller names them: a child in the parent's
/// `namespace` by its bare name.
fn write_claims(revision: &mut Value, claims: &[Claims], namespace: &str) {
    let Some(object) = revision.as_object_mut() else {
        return;
    };
    if claims.is_empty() {
        object.remove("children");
        return;
    }
    let prefix = format!("{namespace}/");
    let written: Vec<Claims> = claims
        .iter()
        .map(|c| Claims {
            names: c
                .names
                .iter()
                .map(|n| match n.strip_prefix(&prefix) {
                    Some(bare) if !namespace.is_empty() => bare.to_string(),
                    _ => n.clone(),
                })
                .collect(),
            ..c.clone()
        })
        .collect();
    object.insert(
        "children".into(),
        serde_json::to_value(written).unwrap_or(Value::Null),
    );
}

/// Whether the rollout may move another child: every child the latest revision claims
/// is observed, up to date and healthy. The error says what it waits for.
fn should_continue(
    latest: &Rev<'_>,
    observed: &ObservedChildren,
    strategies: &BTreeMap<GroupKind, UpdateStrategy>,
    apply_strategy: ApplyStrategy,
) -> Result<(), Box<Waiting>> {
    for claims in &latest.claims {
        let gk = GroupKind::new(&claims.api_group, &claims.kind);
        let Some(strategy) = strategies.get(&gk).filter(|s| s.method.is_rolling()) else {
            continue;
        };
        let kind = &claims.kind;
        for name in &claims.names {
            let child_of = || (kind.clone(), name.clone());
            let Some(child) = observed.get(&gk, name) else {
                let (kind, name) = child_of();
                return Err(Box::new(Waiting::Missing { kind, name }));
            };
            let Some(desired) = latest.desired.get(&(gk.clone(), name.clone())) else {
                continue;
            };
            // metacontroller reads the 3-way apply in both modes, but its server-side
            // apply strips the last-applied annotation that check compares with, so its
            // rollouts stall after the first child there; a child written with
            // server-side apply is updated when every field we apply holds.
            let up_to_date = match apply_strategy {
                ApplyStrategy::DynamicApply if already_applied(child, desired) => true,
                ApplyStrategy::DynamicApply => {
                    apply_update(child, desired).map_err(|source| {
                        let (kind, name) = child_of();
                        Box::new(Waiting::Uncheckable { kind, name, source })
                    })? == *child
                }
                ApplyStrategy::ServerSideApply => crate::children::ssa_applied(child, desired),
            };
            if !up_to_date {
                let (kind, name) = child_of();
                return Err(Box::new(Waiting::NotUpdated { kind, name }));
            }
            if strategy.method == UpdateMethod::RollingInPlace {
                let seen = child["status"]["observedGeneration"].as_i64().unwrap_or(0);
                let generation = child["metadata"]["generation"].as_i64().unwrap_or(0);
                if seen > 0 && seen < generation {
                    let (kind, name) = child_of();
                    return Err(Box::new(Waiting::NotObserved { kind, name }));
                }
            }
            if let Some(checks) = &strategy.status_checks {
                status_check(checks, child).map_err(|source| {
                    let (kind, name) = child_of();
                    Box::new(Waiting::StatusCheck { kind, name, source })
                })?;
            }
        }
    }
    Ok(())
}

/// What a rolling update waits for before it moves another child (the `RolloutWaiting`
/// condition's message).
#[derive(Debug, thiserror::Error)]
enum Waiting {
    #[error("missing child {kind} {name}")]
    Missing { kind: String, name: String },
    #[error("can't check if child {kind} {name} is updated: {source}")]
    Uncheckable {
        kind: String,
        name: String,
        source: crate::apply::ApplyError,
    },
    #[error("child {kind} {name} is not updated yet")]
    NotUpdated { kind: String, name: String },
    #[error("child {kind} {name} with RollingInPlace update strategy hasn't observed latest spec")]
    NotObserved { kind: String, name: String },
    #[error("child {kind} {name} failed status check: {source}")]
    StatusCheck {
        kind: String,
        name: String,
        source: StatusCheckError,
    },
}

/// A child's condition that a status check wants and does not find.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum StatusCheckError {
    #[error("required condition type missing: {type_:?}")]
    Missing { type_: String },
    #[error("{type_:?} condition status is {got:?} (want {want:?})")]
    Status {
        type_: String,
        got: String,
        want: String,
    },
    #[error("{type_:?} condition reason is {got:?} (want {want:?})")]
    Reason {
        type_: String,
        got: String,
        want: String,
    },
}

fn status_check(
    checks: &crate::types::StatusChecks,
    child: &Value,
) -> Result<(), StatusCheckError> {
    let conditions = child["status"]["conditions"].as_array();
    for check in &checks.conditions {
        let found = conditions.and_then(|cs| {
            cs.iter()
                .find(|c| c["type"].as_str() == Some(check.type_.as_str()))
        });
        let Some(cond) = found else {
            return Err(StatusCheckError::Missing {
                type_: check.type_.clone(),
            });
        };
        let field = |f: &str| cond[f].as_str().unwrap_or("").to_string();
        if let Some(want) = &check.status
            && field("status") != *want
        {
            return Err(StatusCheckError::Status {
                type_: check.type_.clone(),
                got: field("status"),
                want: want.clone(),
            });
        }
        if let Some(want) = &check.reason
            && field("reason") != *want
        {
            return Err(StatusCheckError::Reason {
                type_: check.type_.clone(),
                got: field("reason"),
                want: want.clone(),
            });
        }
    }
    Ok(())
}

/// `status` (null = `{}`) with the `Updated` condition replaced by type or appended.
fn with_condition(
    status: &Value,
    condition: &UpdatedCondition,
    parent: &Value,
) -> Result<Value, RolloutError> {
    let invalid = |message: &str| RolloutError::Status {
        parent: describe(parent),
        message: message.into(),
    };
    let mut status = match status {
        Value::Null => Map::new(),
        Value::Object(m) => m.clone(),
        _ => return Err(invalid("not an object")),
    };
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if conditions.is_null() {
        *conditions = Value::Array(Vec::new());
    }
    let Some(list) = conditions.as_array_mut() else {
        return Err(invalid("conditions is not a list"));
    };
    let entry = condition.to_value();
    match list
        .iter_mut()
        .find(|c| c["type"].as_str() == Some(UPDATED_CONDITION))
    {
        Some(slot) => *slot = entry,
        None => list.push(entry),
    }
    Ok(Value::Object(status))
}

/// One rollout step (see the module doc for what the caller does with it).
pub fn plan(input: &RolloutInput<'_>) -> Result<RolloutPlan, RolloutError> {
    let parent = input.parent;
    let items = &input.revisions.items;
    if items.is_empty() || items.len() != input.answers.len() {
        return Err(RolloutError::AnswerCount {
            parent: describe(parent),
            answers: input.answers.len(),
            revisions: items.len(),
        });
    }
    let namespace = parent["metadata"]["namespace"].as_str().unwrap_or("");
    let uid = parent["metadata"]["uid"].as_str().unwrap_or("");
    let controller_uid = input.generate_selector.then_some(uid);
    let rolling = |gk: &GroupKind| {
        input
            .strategies
            .get(gk)
            .is_some_and(|s| s.method.is_rolling())
    };

    // The latest answer's children, in order, once each (a repeated key keeps its first
    // place and its last value, as a map would).
    let mut latest_order: Vec<(GroupKind, String)> = Vec::new();
    let mut revs: Vec<Rev<'_>> = Vec::with_capacity(items.len());
    for (i, (item, answer)) in items.iter().zip(input.answers).enumerate() {
        let (object, observed) = match &item.revision {
            Some(r) => (r.clone(), Some(r)),
            None => (new_revision(input, &input.revisions.latest_patch)?, None),
        };
        let mut desired = BTreeMap::new();
        for child in &answer.children {
            let child = normalize_child(child, namespace, controller_uid);
            let id = (GroupKind::of(&child), object_key(&child));
            if i == 0 && !desired.contains_key(&id) {
                latest_order.push(id.clone());
            }
            desired.insert(id, child);
        }
        revs.push(Rev {
            observed,
            name: object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            claims: read_claims(&object)?,
            object,
            desired,
            answer,
        });
    }

    // Reconcile the stored claims: rolling kinds only, children the latest still
    // desires, each claimed once (the latest first).
    let latest_desired: BTreeSet<(GroupKind, String)> = revs[0].desired.keys().cloned().collect();
    let resolve = |gk: &GroupKind, name: &str| -> String {
        let exact = (gk.clone(), name.to_string());
        if !latest_desired.contains(&exact) && !name.contains('/') && !namespace.is_empty() {
            // Written by metacontroller for a namespaced parent: a bare name.
            let qualified = format!("{namespace}/{name}");
            if latest_desired.contains(&(gk.clone(), qualified.clone())) {
                return qualified;
            }
        }
        name.to_string()
    };
    let mut claimed: BTreeMap<(GroupKind, String), usize> = BTreeMap::new();
    for (i, rev) in revs.iter_mut().enumerate() {
        let mut kept = Vec::new();
        for claims in std::mem::take(&mut rev.claims) {
            let gk = GroupKind::new(&claims.api_group, &claims.kind);
            if !rolling(&gk) {
                continue;
            }
            let mut names = Vec::new();
            for name in &claims.names {
                let id = (gk.clone(), resolve(&gk, name));
                if !latest_desired.contains(&id) || claimed.contains_key(&id) {
                    continue;
                }
                names.push(id.1.clone());
                claimed.insert(id, i);
            }
            if !names.is_empty() {
                kept.push(Claims { names, ..claims });
            }
        }
        rev.claims = kept;
    }

    // Give the latest every unclaimed child, and every child an older revision claims
    // that already looks as the latest wants.
    for id in &latest_order {
        let (gk, key) = id;
        if !rolling(gk) {
            continue;
        }
        match claimed.get(id).copied() {
            None => {
                revs[0].add(gk, key);
                claimed.insert(id.clone(), 0);
            }
            Some(0) => {}
            Some(owner) => {
                let up_to_date = input.observed.get(gk, key).is_some_and(|child| {
                    let desired = &revs[0].desired[id];
                    already_applied(child, desired)
                        || apply_update(child, desired).is_ok_and(|u| u == *child)
                });
                if up_to_date {
                    revs[0].add(gk, key);
                    revs[owner].remove(gk, key);
                    claimed.insert(id.clone(), 0);
                }
            }
        }
    }

    // Move at most one child, in the latest answer's order.
    let mut updated = None;
    for id in &latest_order {
        let (gk, key) = id;
        if !rolling(gk) || claimed.get(id) == Some(&0) {
            continue;
        }
        updated = Some(
            match should_continue(
                &revs[0],
                input.observed,
                input.strategies,
                input.apply_strategy,
            ) {
                Err(waiting) => UpdatedCondition::new(false, "RolloutWaiting", waiting.to_string()),
                Ok(()) => {
                    revs[0].add(gk, key);
                    for rev in &mut revs[1..] {
                        rev.remove(gk, key);
                    }
                    claimed.insert(id.clone(), 0);
                    UpdatedCondition::new(
                        false,
                        "RolloutProgressing",
                        format!("updating {} {key}", gk.kind),
                    )
                }
            },
        );
        break;
    }
    let updated = updated.unwrap_or_else(|| {
        UpdatedCondition::new(
            true,
            "OnLatestRevision",
            format!("latest ControllerRevision: {}", revs[0].name),
        )
    });

    // Prune revisions that claim nothing; persist the rest.
    let mut plan = RolloutPlan {
        children: Vec::new(),
        status: with_condition(&revs[0].answer.status, &updated, parent)?,
        updated,
        latest_revision: revs[0].name.clone(),
        delete: Vec::new(),
        update: Vec::new(),
        create: Vec::new(),
        resync_after_seconds: 0.0,
        finalized: true,
    };
    let mut kept = vec![false; revs.len()];
    for (i, rev) in revs.iter().enumerate() {
        if i > 0 && rev.count() == 0 {
            if let Some(observed) = rev.observed {
                plan.delete.push(RevisionRef {
                    namespace: observed["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .into(),
                    name: rev.name.clone(),
                    uid: observed["metadata"]["uid"].as_str().unwrap_or("").into(),
                });
            }
            continue;
        }
        kept[i] = true;
        let mut object = rev.object.clone();
        write_claims(&mut object, &rev.claims, namespace);
        match rev.observed {
            Some(observed) if *observed == object => {}
            Some(_) => plan.update.push(object),
            None => plan.create.push(object),
        }
        let resync = rev.answer.resync_after_seconds;
        if resync > 0.0 && (plan.resync_after_seconds == 0.0 || resync < plan.resync_after_seconds)
        {
            plan.resync_after_seconds = resync;
        }
        plan.finalized &= rev.answer.finalized;
    }

    // The latest's children, each still claimed by an older revision in that revision's
    // version (when it has one).
    for id in &latest_order {
        let owner = claimed.get(id).copied().filter(|&i| i > 0 && kept[i]);
        let child = owner
            .and_then(|i| revs[i].desired.get(id))
            .unwrap_or(&revs[0].desired[id]);
        plan.children.push(child.clone());
    }
    Ok(plan)
}

#[cfg(test)]
mod tests;
