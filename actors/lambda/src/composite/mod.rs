//! One sync of one parent of a CompositeController (metacontroller's syncParentObject).
//!
//! ```text
//!  parent from cache ─► finalizer added/removed ─► claim children (adopt / release)
//!    ─► related objects (customize) ─► sync or finalize hook ─► finalized? drop finalizer
//!       (with a rolling child type: `rolling.rs`, one hook call per parent revision)
//!    ─► desired children checked against the selector ─► ManageChildren ─► status
//! ```
//!
//! A sync that left nothing to do (every child as desired, nothing written, the status
//! as answered) is remembered per parent ([`Settled`]): which objects it saw (by uid and
//! resourceVersion, no copy of them), fingerprints of its request and answer, and the
//! request body as framing around the cache's own texts. The next sync of that parent
//! still calls the hook; when it sees the same objects and gets the same answer,
//! ManageChildren and the status write would do the same nothing, so they are skipped.

pub mod rolling;
mod shared_body;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::children::{self, ApplyStrategy, ChildType};
use crate::claim::{self, Claim, Owner};
use crate::keys::{GroupMap, ParentKey, key_of, name_of, namespace_of, uid_of};
use crate::ports::{BoxFut, Cluster, ClusterError, HookType, Resource};
use crate::protocol::{composite_request_with, decode_composite};
use crate::reconcile::{Reconcile, resync_period};
use crate::related::{Customizer, cache_key};
use crate::selector::Selector;
use crate::steps::{
    BoundHook, SyncError, SyncReport, digest_text, fnv, related_of, set_finalizer, write_status,
};
use crate::types::{CompositeSpec, ControllerKind};
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

/// The largest answer remembered by [`Settled`]; a parent with a larger answer always
/// takes the full path.
const SETTLED_ANSWER_MAX: usize = 64 * 1024;

/// What the last sync of one parent saw and got, when it left nothing to do.
struct Settled {
    /// The objects the request was made of: a fingerprint of [`seen`].
    seen: u128,
    /// The change counts of the caches the sync read ([`Composite::stamp`]), taken before
    /// it read them.
    stamp: Option<Vec<u64>>,
    /// The hook that answered.
    hook: HookType,
    /// The request body those objects made: sent again as it is while they stay the same
    /// (kept as framing around the cache's own texts of the objects).
    request: SharedBody,
    /// A fingerprint of the answer (the answer itself is not kept).
    answer: u128,
    /// The [`digest`]s of the request and the answer, as numbers.
    request_digest: u64,
    answer_digest: u64,
    resync_after: Option<Duration>,
    planned: Arc<[String]>,
    warnings: Vec<String>,
}

/// The settled parents of one controller, by parent key: one entry per parent at most,
/// dropped when its parent is gone (or no longer ours) and with the controller.
#[derive(Default)]
pub struct SettledParents(Mutex<HashMap<ParentKey, Box<Settled>>>);

impl Settled {
    /// The report of a sync that found this parent as it left it.
    fn report(&self) -> SyncReport {
        SyncReport {
            hook: Some(self.hook),
            resync_after: self.resync_after,
            request_digest: Some(digest_text(self.request_digest)),
            answer_digest: Some(digest_text(self.answer_digest)),
            planned: self.planned.clone(),
            warnings: self.warnings.clone(),
            ..SyncReport::default()
        }
    }
}

impl SettledParents {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ParentKey, Box<Settled>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, key: &ParentKey) -> Option<Box<Settled>> {
        self.lock().remove(key)
    }

    fn put(&self, key: &ParentKey, settled: Box<Settled>) {
        self.lock().insert(key.clone(), settled);
    }

    /// How many parents are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no parent is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a request is made of, as text: `finalizing`, then the parent, each observed child
/// and each related object by group, key, uid and resourceVersion (each part prefixed by
/// its length). The same text means the same request body: an object is the same at the
/// same uid and resourceVersion. `None` when some object has no uid or resourceVersion.
fn seen(
    parent: &Value,
    observed: &GroupMap,
    related: &GroupMap,
    finalizing: bool,
) -> Option<String> {
    fn part(out: &mut String, s: &str) {
        use std::fmt::Write;
        let _ = write!(out, "{}:{s}", s.len());
    }
    fn object(out: &mut String, key: &str, o: &Value) -> Option<()> {
        let version = o["metadata"]["resourceVersion"]
            .as_str()
            .filter(|v| !v.is_empty())?;
        let uid = Some(uid_of(o)).filter(|u| !u.is_empty())?;
        part(out, key);
        part(out, uid);
        part(out, version);
        Some(())
    }
    let mut out = String::with_capacity(256);
    object(&mut out, if finalizing { "finalizing" } else { "" }, parent)?;
    for map in [observed, related] {
        for (group, objects) in map {
            part(&mut out, group);
            part(&mut out, &objects.len().to_string());
            for (key, o) in objects {
                object(&mut out, key, o)?;
            }
        }
        out.push('|');
    }
    Some(out)
}

/// Whether ManageChildren had nothing to do for `desired`: each desired child observed
/// and each observed child desired (or already being deleted), so that it neither
/// created nor deleted; the caller checks that it updated nothing.
fn children_match(observed: &GroupMap, desired: &GroupMap) -> bool {
    let empty = crate::keys::ObjectMap::new();
    desired.iter().all(|(group, want)| {
        let have = observed.get(group).unwrap_or(&empty);
        want.keys().all(|k| have.contains_key(k))
    }) && observed.iter().all(|(group, have)| {
        let want = desired.get(group).unwrap_or(&empty);
        have.iter()
            .all(|(k, o)| want.contains_key(k) || is_deleting(o))
    })
}

pub(crate) use crate::keys::{has_finalizer, is_deleting};

impl Composite {
    /// The body of a sync or finalize request about `parent`.
    pub(crate) fn request(
        &self,
        parent: &Value,
        observed: &GroupMap,
        related: &GroupMap,
        version: crate::types::HookVersion,
        finalizing: bool,
    ) -> Vec<u8> {
        use std::sync::atomic::Ordering;
        let controller = self.requests.controller.get_or_init(|| {
            // Serializing a `Value` into memory cannot fail.
            self.object.to_string().into()
        });
        let body = composite_request_with(
            controller.as_bytes(),
            parent,
            observed,
            related,
            version,
            finalizing,
            self.requests.size.load(Ordering::Relaxed),
        );
        self.requests.size.store(body.len(), Ordering::Relaxed);
        body
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
    pub fn child_selector(&self, parent: &Value) -> Result<Selector, String> {
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
            return Err(
                ".spec.selector must have either matchLabels, matchExpressions, or both".into(),
            );
        }
        Selector::labels(sel).map_err(|e| format!(".spec.selector: {e}"))
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
            return Err(SyncError::Failed(errors.join("; ")));
        }
        Ok(observed)
    }

    /// One sync of the parent `key`.
    pub async fn sync(
        &self,
        cluster: &dyn Cluster,
        key: &ParentKey,
    ) -> Result<SyncReport, SyncError> {
        let (ns, name) = (&*key.namespace, &*key.name);
        // Taken out for this sync (one sync per parent runs at a time); put back only
        // by a sync that leaves nothing to do.
        let mut settled = self.settled.take(key);
        let stamp = self.stamp(cluster);
        // Nothing this sync reads has changed since the parent settled: its request, sent
        // again as it is, without reading the caches again.
        let mut answered: Option<(Bytes, Bytes)> = None;
        let unchanged = settled
            .as_ref()
            .filter(|s| stamp.is_some() && s.stamp == stamp)
            .and_then(|s| Some((self.hook(s.hook)?, s.request.bytes(), self.cache_key(key))));
        if let Some((bound, request, cache_key)) = unchanged {
            let answer = bound.client.call(request.clone(), cache_key).await?;
            if let Some(s) = settled.take_if(|s| s.answer == fingerprint(&answer)) {
                let report = s.report();
                self.settled.put(key, s);
                return Ok(report);
            }
            // A new answer to the same request: the full path takes it from here.
            answered = Some((request, answer));
        }
        // The cached parent, shared: copied only when a finalizer write replaces it.
        let Some(mut parent) = cluster.cached(&self.parent, ns, name).await? else {
            return Ok(SyncReport::default());
        };
        if !self.wants(&parent) {
            return Ok(SyncReport::default());
        }
        let finalizer = self.finalizer();
        let deleting = is_deleting(&parent);
        if self.finalize.is_some() && !has_finalizer(&parent, &finalizer) && !deleting {
            parent =
                Arc::new(set_finalizer(cluster, &self.parent, &parent, &finalizer, true).await?);
        } else if self.finalize.is_none() && has_finalizer(&parent, &finalizer) {
            parent =
                Arc::new(set_finalizer(cluster, &self.parent, &parent, &finalizer, false).await?);
        }
        if !self.wants(&parent) {
            return Ok(SyncReport::default());
        }
        let selector = self.child_selector(&parent).map_err(SyncError::Failed)?;
        let observed = self.claim_children(cluster, &parent, &selector).await?;
        let finalizing = self.finalize.is_some()
            && (is_deleting(&parent) || !self.parent_selector.matches_labels(&parent));
        let (hook_type, bound) = match (finalizing, &self.finalize, &self.sync) {
            (true, Some(f), _) => (HookType::Finalize, f),
            (_, _, Some(s)) => (HookType::Sync, s),
            _ => return Err(SyncError::Failed("sync hook nil//not defined".into())),
        };
        // Set on the single-call path: what to remember if this sync leaves nothing to do.
        let mut remember: Option<Box<Settled>> = None;
        let (response, request_digest, answer_digest, warnings) =
            if rolling::uses_rollout(self, &parent) {
                // Rolling updates: one hook call per parent revision, revisions persisted.
                let rolled = rolling::sync_revisions(
                    self, cluster, &parent, &selector, &observed, hook_type, bound, finalizing,
                )
                .await?;
                (rolled.response, None, rolled.answer_digest, rolled.warnings)
            } else {
                let related =
                    related_of(cluster, self.customizer.as_ref(), &self.object, &parent).await?;
                // The same objects make the same request: the settled one, sent as it is.
                let seen = seen(&parent, &observed, &related, finalizing)
                    .map(|s| fingerprint(s.as_bytes()));
                let settled = settled.filter(|s| seen == Some(s.seen));
                let (body, request_digest) = match &settled {
                    Some(s) => (s.request.bytes(), s.request_digest),
                    None => {
                        let body = self.request(
                            &parent,
                            &observed,
                            &related,
                            bound.hook.version,
                            finalizing,
                        );
                        let d = fnv(&body);
                        (Bytes::from(body), d)
                    }
                };
                // Kept to be remembered if this sync settles the parent.
                let request = seen.as_ref().map(|_| body.clone());
                let answer_key = cache_key(&parent);
                let answer = match answered.take().filter(|(r, _)| *r == body) {
                    Some((_, answer)) => answer,
                    None => bound.client.call(body, answer_key.clone()).await?,
                };
                if let Some(s) = settled
                    && s.answer == fingerprint(&answer)
                    && s.hook == hook_type
                {
                    // The same request answered the same: ManageChildren and the status
                    // write would find nothing to do, as they did last time.
                    let report = s.report();
                    self.settled.put(key, s);
                    return Ok(report);
                }
                let decoded = decode_composite(
                    hook_type,
                    bound.hook.version,
                    bound.hook.unmarshal_mode(),
                    &answer,
                )
                .map_err(|e| SyncError::Failed(e.to_string()))?;
                let answer_digest = fnv(&answer);
                if let (Some(seen), Some(request)) = (seen, request)
                    && answer.len() <= SETTLED_ANSWER_MAX
                {
                    let request =
                        SharedBody::new(&request, self.texts(cluster, &parent, &observed));
                    remember = Some(Box::new(Settled {
                        seen,
                        stamp,
                        hook: hook_type,
                        request,
                        answer: fingerprint(&answer),
                        request_digest,
                        answer_digest,
                        resync_after: None,
                        planned: Arc::default(),
                        warnings: decoded.warnings.clone(),
                    }));
                }
                (
                    decoded.response,
                    Some(digest_text(request_digest)),
                    digest_text(answer_digest),
                    decoded.warnings,
                )
            };
        let mut report = SyncReport {
            hook: Some(hook_type),
            request_digest,
            answer_digest: Some(answer_digest),
            warnings,
            ..SyncReport::default()
        };
        if response.resync_after_seconds > 0.0 {
            report.resync_after = Some(Duration::from_secs_f64(response.resync_after_seconds));
        }
        if response.finalized {
            remember = None;
        }
        if response.finalized && has_finalizer(&parent, &finalizer) {
            parent =
                Arc::new(set_finalizer(cluster, &self.parent, &parent, &finalizer, false).await?);
            report.finalized = true;
        }
        // The desired children: the parent's namespace by default, the selector's labels.
        let mut desired = Vec::new();
        for mut child in response.children.unwrap_or_default() {
            if namespace_of(&child).is_empty() && !namespace_of(&parent).is_empty() {
                child["metadata"]["namespace"] = json!(namespace_of(&parent));
            }
            if self.spec.generate_selector == Some(true)
                && child["metadata"]["labels"]["controller-uid"].is_null()
            {
                child["metadata"]["labels"]["controller-uid"] = json!(uid_of(&parent));
            }
            if !selector.matches_labels(&child) {
                return Err(SyncError::Failed(format!(
                    "labels on desired child {} {} don't match parent selector",
                    child["kind"].as_str().unwrap_or_default(),
                    key_of(&child)
                )));
            }
            desired.push(child);
        }
        let desired =
            children::group_desired(desired, &self.children).map_err(SyncError::Failed)?;
        report.planned = children::planned(&desired);
        let manages = crate::keys::manages_children(&parent, &finalizer, self.finalize.is_some());
        if manages {
            report.applied = children::manage(
                cluster,
                &Owner::of(&parent),
                &self.children,
                &observed,
                &desired,
                self.strategy,
            )
            .await;
        }
        let mut status = response.status.unwrap_or_else(|| json!({}));
        status["observedGeneration"] = parent["metadata"]["generation"].clone();
        if status["observedGeneration"].is_null() {
            status["observedGeneration"] = json!(0);
        }
        // Nothing left to do: the children as desired and the status the parent holds.
        let settles = parent["status"] == status
            && !report.applied.changed()
            && report.applied.errors.is_empty()
            && report.applied.not_written == 0
            && (!manages || children_match(&observed, &desired));
        report.status_written = write_status(cluster, &self.parent, &parent, status).await?;
        if !report.applied.errors.is_empty() {
            return Err(SyncError::Failed(report.applied.errors.join("; ")));
        }
        if let Some(mut s) = remember
            && settles
            && !report.status_written
        {
            s.resync_after = report.resync_after;
            s.planned = report.planned.clone();
            self.settled.put(key, s);
        }
        Ok(report)
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

/// A 128-bit fingerprint of `bytes` (two keyed SipHash runs), to tell whether a request or
/// an answer is the one seen before without keeping it: within one process, two
/// different texts have the same fingerprint with a chance of about 2⁻¹²⁸.
fn fingerprint(bytes: &[u8]) -> u128 {
    use std::hash::Hasher;
    let run = |key: u8| {
        let mut h = std::hash::DefaultHasher::new();
        h.write_u8(key);
        h.write(bytes);
        h.finish()
    };
    (u128::from(run(1)) << 64) | u128::from(run(2))
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
