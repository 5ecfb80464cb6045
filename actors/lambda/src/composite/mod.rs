//! One sync of one parent of a CompositeController (metacontroller's syncParentObject),
//! as named steps:
//!
//! ```text
//!  sync(key) = settled memo around the steps (settled.rs)
//!    finalizer_step   parent from cache, finalizer added/removed
//!    claim_children   children adopted / released / kept: the observed map
//!    hook_step        related objects (customize), the sync or finalize hook
//!                     (a rolling child type: rolling.rs, one call per parent revision)
//!    finalized_step   `finalized` answered? our finalizer dropped
//!    plan::decide     desired children checked, ManageChildren's actions, the status (pure)
//!    apply_plan       the actions, then the status
//! ```

pub mod plan;
pub mod rolling;
mod settled;
mod shared_body;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use crate::children::{self, ApplyStrategy, ChildType};
use crate::claim::{self, Claim, Owner};
use crate::keys::{
    GroupMap, ParentKey, has_finalizer, is_deleting, key_of, name_of, namespace_of, uid_of,
};
use crate::ports::{BoxFut, Cluster, ClusterError, HookType, Resource};
use crate::protocol::{CompositeResponse, RequestPlaces, composite_request_with, decode_composite};
use crate::reconcile::{Reconcile, resync_period};
use crate::related::{Customizer, cache_key};
use crate::selector::{Selector, SelectorError};
use crate::steps::{
    BoundHook, FinalizerChange, SyncError, SyncReport, digest_text, fnv, related_of, resync_after,
};
use crate::types::{CompositeSpec, ControllerKind};
pub use settled::SettledParents;
use settled::{Memo, Remember, SETTLED_ANSWER_MAX, Settled, Synced, fingerprint, seen};
use shared_body::SharedBody;

/// A running CompositeController's configuration.
pub struct Composite {
    pub name: String,
    /// The CompositeController object (sent to hooks as `controller`).
    pub object: Value,
    pub spec: CompositeSpec,
    pub parent: Resource,
    pub children: Vec<ChildType>,
    /// `parentResource.labelSelector`.
    pub parent_selector: Selector,
    pub sync: Option<BoundHook>,
    pub finalize: Option<BoundHook>,
    pub customizer: Option<Customizer>,
    pub strategy: ApplyStrategy,
    /// The ControllerRevision resource, resolved when some child type rolls
    /// (`rolling.rs`); watched beside the children so that revision changes wake parents.
    pub revisions: Option<Resource>,
    /// The parents whose last sync left nothing to do.
    pub settled: SettledParents,
    /// What every request body of this controller shares.
    pub requests: RequestParts,
}

/// What every request body of a controller shares: the controller object as JSON
/// (written once) and the size of the last body (the next one's buffer).
#[derive(Default)]
pub struct RequestParts {
    controller: std::sync::OnceLock<Arc<str>>,
    size: std::sync::atomic::AtomicUsize,
}

/// Why a parent has no child selector.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ChildSelectorError {
    #[error(".spec.selector must have either matchLabels, matchExpressions, or both")]
    Empty,
    #[error(".spec.selector: {0}")]
    Invalid(SelectorError),
}

impl From<ChildSelectorError> for SyncError {
    fn from(e: ChildSelectorError) -> Self {
        SyncError::permanent(e.to_string())
    }
}

/// What the hook step ends with.
enum Hooked {
    /// The parent found as it settled (see `settled.rs`).
    Recalled(Box<Settled>),
    Answered(Answer),
}

/// A hook's answer, decoded, with what the report tells of it.
struct Answer {
    hook: HookType,
    response: CompositeResponse,
    /// None on the rolling path (several calls).
    request_digest: Option<String>,
    answer_digest: String,
    warnings: Vec<String>,
}

impl Composite {
    /// The body of a sync or finalize request about `parent`.
    pub(crate) fn request(
        &self,
        parent: &Value,
        observed: &GroupMap,
        related: &GroupMap,
        version: crate::types::HookVersion,
        finalizing: bool,
    ) -> (Vec<u8>, RequestPlaces) {
        use std::sync::atomic::Ordering;
        let controller = self.requests.controller.get_or_init(|| {
            // Serializing a `Value` into memory cannot fail.
            self.object.to_string().into()
        });
        let (body, places) = composite_request_with(
            controller.as_bytes(),
            parent,
            observed,
            related,
            version,
            finalizing,
            self.requests.size.load(Ordering::Relaxed),
        );
        self.requests.size.store(body.len(), Ordering::Relaxed);
        (body, places)
    }

    /// The texts a request body of `parent` and `observed` is made of: the controller,
    /// the children and the parent (related objects stay inline).
    fn texts(&self, cluster: &dyn Cluster, parent: &Value, observed: &GroupMap) -> Vec<Arc<str>> {
        let mut texts: Vec<Arc<str>> = self
            .requests
            .controller
            .get()
            .cloned()
            .into_iter()
            .collect();
        for (group, objects) in observed {
            let Some(t) = self.children.iter().find(|t| t.group_key() == *group) else {
                continue;
            };
            texts.extend(
                objects
                    .values()
                    .filter_map(|o| cluster.cached_text(&t.resource, namespace_of(o), name_of(o))),
            );
        }
        texts.extend(cluster.cached_text(&self.parent, namespace_of(parent), name_of(parent)));
        texts
    }

    /// The texts a request body of `parent` and `observed` is made of, each with its
    /// place in the body (`places`, as the body was written): the controller, the
    /// children and the parent (related objects stay inline).
    fn placed_texts(
        &self,
        cluster: &dyn Cluster,
        parent: &Value,
        observed: &GroupMap,
        places: &RequestPlaces,
    ) -> Vec<(Range<usize>, Arc<str>)> {
        let mut texts: Vec<(Range<usize>, Arc<str>)> = self
            .requests
            .controller
            .get()
            .map(|t| (places.controller.clone(), Arc::clone(t)))
            .into_iter()
            .collect();
        for ((group, objects), at) in observed.iter().zip(&places.children) {
            let Some(t) = self.children.iter().find(|t| t.group_key() == *group) else {
                continue;
            };
            texts.extend(objects.values().zip(at).filter_map(|(o, at)| {
                let text = cluster.cached_text(&t.resource, namespace_of(o), name_of(o))?;
                Some((at.clone()?, text))
            }));
        }
        texts.extend(
            cluster
                .cached_text(&self.parent, namespace_of(parent), name_of(parent))
                .map(|t| (places.parent.clone(), t)),
        );
        texts
    }

    /// The key of the answer cache for the parent `key`, as [`cache_key`] makes it from
    /// the parent object.
    fn cache_key(&self, key: &ParentKey) -> String {
        format!("{}/{}/{}", self.parent.kind, key.namespace, key.name)
    }

    /// The change counts of the caches a sync reads (the parent's and each child type's),
    /// to be taken before it reads them: the same counts later mean the same objects.
    /// `None` when some cache has no count, or with a customize hook (whose answer may
    /// name other objects).
    fn stamp(&self, cluster: &dyn Cluster) -> Option<Vec<u64>> {
        if self.customizer.is_some() {
            return None;
        }
        std::iter::once(&self.parent)
            .chain(self.children.iter().map(|t| &t.resource))
            .map(|r| cluster.changes(r))
            .collect()
    }

    /// The bound hook of a hook type.
    fn hook(&self, hook: HookType) -> Option<&BoundHook> {
        match hook {
            HookType::Sync => self.sync.as_ref(),
            HookType::Finalize => self.finalize.as_ref(),
            HookType::Customize => None,
        }
    }

    /// The finalizer of this controller.
    pub fn finalizer(&self) -> String {
        crate::types::ControllerKind::CompositeController.finalizer(&self.name)
    }

    /// The parent's child selector: `controller-uid=<uid>` with `generateSelector`, else
    /// `spec.selector`, which must not be empty.
    pub fn child_selector(&self, parent: &Value) -> Result<Selector, ChildSelectorError> {
        if self.spec.generate_selector == Some(true) {
            return Ok(Selector::from_map(
                &[("controller-uid".to_string(), uid_of(parent).to_string())].into(),
            ));
        }
        let sel = &parent["spec"]["selector"];
        let empty = sel.is_null()
            || (sel["matchLabels"].as_object().is_none_or(|m| m.is_empty())
                && sel["matchExpressions"]
                    .as_array()
                    .is_none_or(|l| l.is_empty()));
        if empty {
            return Err(ChildSelectorError::Empty);
        }
        Selector::labels(sel).map_err(ChildSelectorError::Invalid)
    }

    /// Whether events of `parent` concern this controller.
    pub fn wants(&self, parent: &Value) -> bool {
        has_finalizer(parent, &self.finalizer()) || self.parent_selector.matches_labels(parent)
    }

    /// Claims the candidate children of `parent`: keeps ours, adopts matching orphans,
    /// releases ours that stopped matching. Returns the observed children map.
    pub async fn claim_children(
        &self,
        cluster: &dyn Cluster,
        parent: &Value,
        selector: &Selector,
    ) -> Result<GroupMap, SyncError> {
        let parent_uid = uid_of(parent);
        let deleting = is_deleting(parent);
        let owner = Owner::of(parent);
        let ns = (!namespace_of(parent).is_empty()).then(|| namespace_of(parent));
        let mut observed = GroupMap::new();
        let mut can_adopt: Option<bool> = None;
        let mut errors = Vec::new();
        for (t, objects) in children::candidates(cluster, &self.children, ns, parent_uid).await? {
            let group = observed.entry(t.group_key()).or_default();
            for child in objects {
                let matches = selector.matches_labels(&child);
                match claim::decide(parent_uid, deleting, &child, matches) {
                    Claim::Ignore => {}
                    Claim::Keep => {
                        group.insert(key_of(&child), Arc::clone(&child));
                    }
                    Claim::Release => {
                        let released = claim::release(&child, parent_uid);
                        match cluster.replace(&t.resource, released).await {
                            Ok(_) | Err(ClusterError::NotFound(_)) => {}
                            Err(e) => errors.push(format!("releasing {}: {e}", key_of(&child))),
                        }
                    }
                    Claim::Adopt => {
                        if can_adopt.is_none() {
                            // An uncached read: the parent must still be this one and alive.
                            let fresh = cluster
                                .get(&self.parent, namespace_of(parent), name_of(parent))
                                .await;
                            can_adopt = Some(
                                fresh.is_ok_and(|p| uid_of(&p) == parent_uid && !is_deleting(&p)),
                            );
                        }
                        if can_adopt != Some(true) {
                            continue;
                        }
                        let adopted = claim::adopt(&child, &owner);
                        match cluster.replace(&t.resource, adopted).await {
                            Ok(updated) => {
                                group.insert(key_of(&updated), Arc::new(updated));
                            }
                            Err(ClusterError::NotFound(_)) => {}
                            Err(e) => errors.push(format!("adopting {}: {e}", key_of(&child))),
                        }
                    }
                }
            }
        }
        if !errors.is_empty() {
            return Err(SyncError::transient(errors.join("; ")));
        }
        Ok(observed)
    }

    /// One sync of the parent `key`: the steps inside the settled memo, which may find
    /// the parent as it settled and skip them, and remembers a sync that wrote nothing.
    pub async fn sync(
        &self,
        cluster: &dyn Cluster,
        key: &ParentKey,
    ) -> Result<SyncReport, SyncError> {
        let mut memo = self.settled.open(key, self.stamp(cluster));
        let synced = match self.replay(&mut memo, key).await? {
            Some(settled) => Synced::Recalled(settled),
            None => self.sync_steps(cluster, key, &mut memo).await?,
        };
        Ok(memo.close(synced))
    }

    /// The steps of a sync (metacontroller's syncParentObject): finalizer → claim → hook
    /// → finalized → plan → apply.
    async fn sync_steps(
        &self,
        cluster: &dyn Cluster,
        key: &ParentKey,
        memo: &mut Memo<'_>,
    ) -> Result<Synced, SyncError> {
        let Some(parent) = self.finalizer_step(cluster, key).await? else {
            return Ok(Synced::Gone);
        };
        let selector = self.child_selector(&parent)?;
        let observed = self.claim_children(cluster, &parent, &selector).await?;
        let answer = match self
            .hook_step(cluster, &parent, &selector, &observed, memo)
            .await?
        {
            Hooked::Recalled(settled) => return Ok(Synced::Recalled(settled)),
            Hooked::Answered(answer) => answer,
        };
        let (parent, finalized) = self
            .finalized_step(cluster, parent, answer.response.finalized)
            .await?;
        let report = SyncReport {
            hook: Some(answer.hook),
            resync_after: resync_after(answer.response.resync_after_seconds),
            finalized,
            request_digest: answer.request_digest,
            answer_digest: Some(answer.answer_digest),
            warnings: answer.warnings,
            ..SyncReport::default()
        };
        let plan = plan::decide(self, &parent, &selector, &observed, answer.response)?;
        let settles = plan.settles;
        let report = self.apply_plan(cluster, &parent, plan, report).await?;
        Ok(Synced::Done {
            report: Box::new(report),
            settles,
        })
    }

    /// The settled request sent again when nothing the sync reads has changed since the
    /// parent settled; the settled entry when the answer is the same too. A new answer is
    /// kept for the steps.
    async fn replay(
        &self,
        memo: &mut Memo<'_>,
        key: &ParentKey,
    ) -> Result<Option<Box<Settled>>, SyncError> {
        let Some((hook, request)) = memo.unchanged_request() else {
            return Ok(None);
        };
        let Some(bound) = self.hook(hook) else {
            return Ok(None);
        };
        let answer = bound
            .client
            .call(request.clone(), self.cache_key(key))
            .await?;
        let recalled = memo.recall(hook, &answer);
        if recalled.is_none() {
            memo.keep_answer(request, answer);
        }
        Ok(recalled)
    }

    /// The finalizer step: the cached parent (shared: copied only when a finalizer write
    /// replaces it) with our finalizer added while a finalize hook is configured, removed
    /// otherwise. `None` when the parent is gone or not ours.
    async fn finalizer_step(
        &self,
        cluster: &dyn Cluster,
        key: &ParentKey,
    ) -> Result<Option<Arc<Value>>, SyncError> {
        let Some(mut parent) = cluster
            .cached(&self.parent, &key.namespace, &key.name)
            .await?
        else {
            return Ok(None);
        };
        if !self.wants(&parent) {
            return Ok(None);
        }
        let finalizer = self.finalizer();
        if let Some(change) =
            FinalizerChange::decide(&parent, &finalizer, self.finalize.is_some(), true)
        {
            parent = Arc::new(
                change
                    .apply(cluster, &self.parent, &parent, &finalizer)
                    .await?,
            );
        }
        Ok(self.wants(&parent).then_some(parent))
    }

    /// The hook step: the sync hook, or the finalize hook while the parent is deleted or
    /// no longer selected; with a rolling child type one call per parent revision
    /// (`rolling.rs`), else one call, whose request the memo may have settled on.
    async fn hook_step(
        &self,
        cluster: &dyn Cluster,
        parent: &Value,
        selector: &Selector,
        observed: &GroupMap,
        memo: &mut Memo<'_>,
    ) -> Result<Hooked, SyncError> {
        let finalizing = self.finalize.is_some()
            && (is_deleting(parent) || !self.parent_selector.matches_labels(parent));
        let (hook, bound) = match (finalizing, &self.finalize, &self.sync) {
            (true, Some(f), _) => (HookType::Finalize, f),
            (_, _, Some(s)) => (HookType::Sync, s),
            _ => return Err(SyncError::permanent("sync hook nil//not defined")),
        };
        if rolling::uses_rollout(self, parent) {
            let rolled = rolling::sync_revisions(
                self, cluster, parent, selector, observed, hook, bound, finalizing,
            )
            .await?;
            return Ok(Hooked::Answered(Answer {
                hook,
                response: rolled.response,
                request_digest: None,
                answer_digest: rolled.answer_digest,
                warnings: rolled.warnings,
            }));
        }
        let related = related_of(cluster, self.customizer.as_ref(), &self.object, parent).await?;
        // The same objects make the same request: the settled one, sent as it is.
        let seen = seen(parent, observed, &related, finalizing).map(|s| fingerprint(s.as_bytes()));
        let (body, request_digest, places) = match memo.request_for(seen) {
            Some((body, digest)) => (body, digest, None),
            None => {
                let (body, places) =
                    self.request(parent, observed, &related, bound.hook.version, finalizing);
                let d = fnv(&body);
                (Bytes::from(body), d, Some(places))
            }
        };
        // Kept to be remembered if this sync settles the parent.
        let request = seen.as_ref().map(|_| body.clone());
        let answer = match memo.answer_to(&body) {
            Some(answer) => answer,
            None => bound.client.call(body, cache_key(parent)).await?,
        };
        if let Some(settled) = memo.recall(hook, &answer) {
            return Ok(Hooked::Recalled(settled));
        }
        let decoded = decode_composite(
            hook,
            bound.hook.version,
            bound.hook.unmarshal_mode(),
            &answer,
        )
        .map_err(|e| SyncError::permanent(e.to_string()))?;
        let answer_digest = fnv(&answer);
        if let (Some(seen), Some(request)) = (seen, request)
            && answer.len() <= SETTLED_ANSWER_MAX
            && !decoded.response.finalized
        {
            let request = match places {
                Some(places) => SharedBody::placed(
                    &request,
                    self.placed_texts(cluster, parent, observed, &places),
                ),
                None => SharedBody::new(&request, self.texts(cluster, parent, observed)),
            };
            memo.remember(Remember {
                seen,
                hook,
                request,
                answer: fingerprint(&answer),
                request_digest,
                answer_digest,
                warnings: decoded.warnings.clone(),
            });
        }
        Ok(Hooked::Answered(Answer {
            hook,
            response: decoded.response,
            request_digest: Some(digest_text(request_digest)),
            answer_digest: digest_text(answer_digest),
            warnings: decoded.warnings,
        }))
    }

    /// The parents a child event concerns: its controller when that is a parent of ours,
    /// else (an orphan) every parent in its namespace whose selector matches it.
    pub async fn parents_of_child(
        &self,
        cluster: &dyn Cluster,
        child: &Value,
    ) -> Result<Vec<ParentKey>, ClusterError> {
        if let Some(r) = claim::controller_ref(child) {
            let api_version = r["apiVersion"].as_str().unwrap_or_default();
            let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
            if group != self.parent.group || r["kind"].as_str() != Some(self.parent.kind.as_str()) {
                return Ok(Vec::new());
            }
            let ns = if self.parent.namespaced {
                namespace_of(child)
            } else {
                ""
            };
            let name = r["name"].as_str().unwrap_or_default();
            let Some(parent) = cluster.cached(&self.parent, ns, name).await? else {
                return Ok(Vec::new());
            };
            if Some(uid_of(&parent)) != r["uid"].as_str() || !self.wants(&parent) {
                return Ok(Vec::new());
            }
            return Ok(vec![ParentKey::of(&parent)]);
        }
        let ns = (self.parent.namespaced).then(|| namespace_of(child));
        let mut out = Vec::new();
        for parent in cluster.list(&self.parent, ns).await? {
            if !self.wants(&parent) {
                continue;
            }
            if let Ok(sel) = self.child_selector(&parent)
                && sel.matches_labels(child)
            {
                out.push(ParentKey::of(&parent));
            }
        }
        Ok(out)
    }
}

impl Reconcile for Composite {
    fn kind(&self) -> ControllerKind {
        ControllerKind::CompositeController
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn object(&self) -> &Value {
        &self.object
    }

    fn parent_kind(&self) -> Option<String> {
        Some(self.parent.kind.clone())
    }

    fn parent_resources(&self) -> Vec<Resource> {
        vec![self.parent.clone()]
    }

    fn child_resources(&self) -> Vec<Resource> {
        self.children
            .iter()
            .map(|t| t.resource.clone())
            .chain(self.revisions.clone())
            .collect()
    }

    fn resync_period(&self) -> Option<Duration> {
        resync_period(self.spec.resync_period_seconds)
    }

    fn parent_key(&self, parent: &Value) -> ParentKey {
        ParentKey::of(parent)
    }

    fn resource_of(&self, _: &ParentKey) -> Option<&Resource> {
        Some(&self.parent)
    }

    fn wants(&self, parent: &Value) -> bool {
        Composite::wants(self, parent)
    }

    fn wants_every_parent(&self) -> bool {
        self.parent_selector.is_empty()
    }

    fn ignore_status_changes(&self, _: &Value) -> bool {
        self.spec.parent_resource.ignore_status_changes == Some(true)
    }

    fn customizer(&self) -> Option<&Customizer> {
        self.customizer.as_ref()
    }

    fn sync<'a>(
        &'a self,
        cluster: &'a dyn Cluster,
        key: &'a ParentKey,
    ) -> BoxFut<'a, Result<SyncReport, SyncError>> {
        Box::pin(Composite::sync(self, cluster, key))
    }

    fn parents_of_child<'a>(
        &'a self,
        cluster: &'a dyn Cluster,
        child: &'a Value,
        deleted: bool,
    ) -> BoxFut<'a, Result<Vec<ParentKey>, ClusterError>> {
        Box::pin(async move {
            // A deleted orphan concerned no parent.
            if deleted && claim::controller_ref(child).is_none() {
                return Ok(Vec::new());
            }
            Composite::parents_of_child(self, cluster, child).await
        })
    }
}

#[cfg(test)]
mod tests;
