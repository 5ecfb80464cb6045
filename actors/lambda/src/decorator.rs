//! One sync of one object of a DecoratorController: the hook sees the object and its
//! attachments and answers labels, annotations, status and attachments.

use serde_json::{Value, json};

use crate::children::{self, ApplyStrategy, ChildType};
use crate::claim::{self, Owner};
use crate::keys::{GroupMap, ParentKey, has_finalizer, is_deleting, key_of, namespace_of, uid_of};
use std::time::Duration;

use crate::ports::{BoxFut, Cluster, ClusterError, HookType, Resource};
use crate::protocol::{DecoratorResponse, decode_decorator, decorator_request};
use crate::reconcile::{Reconcile, resync_period};
use crate::related::Customizer;
use crate::selector::Selector;
use crate::steps::{
    BoundHook, FinalizerChange, SyncError, SyncReport, call_hook, digest, related_of, resync_after,
};
use crate::types::{ControllerKind, DECORATOR_ANNOTATION, DecoratorSpec};

/// One `spec.resources` rule, resolved.
pub struct Target {
    pub resource: Resource,
    pub labels: Selector,
    pub annotations: Selector,
    pub ignore_status_changes: bool,
}

/// A running DecoratorController's configuration.
pub(crate) struct Decorator {
    pub name: String,
    pub object: Value,
    pub spec: DecoratorSpec,
    pub targets: Vec<Target>,
    pub attachments: Vec<ChildType>,
    pub sync: Option<BoundHook>,
    pub finalize: Option<BoundHook>,
    pub customizer: Option<Customizer>,
    pub strategy: ApplyStrategy,
}

/// Applies a hook's label or annotation answer: `null` deletes, others set.
fn apply_map(
    current: &Value,
    answer: &Option<std::collections::BTreeMap<String, Option<String>>>,
) -> Value {
    let mut map = current.as_object().cloned().unwrap_or_default();
    for (k, v) in answer.iter().flatten() {
        match v {
            Some(v) => {
                map.insert(k.clone(), json!(v));
            }
            None => {
                map.remove(k);
            }
        }
    }
    Value::Object(map)
}

impl Decorator {
    pub fn finalizer(&self) -> String {
        crate::types::ControllerKind::DecoratorController.finalizer(&self.name)
    }

    /// The rule for an object's group and kind.
    pub fn target_of(&self, object: &Value) -> Option<&Target> {
        self.target_of_type(
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
        )
    }

    /// The rule for the group of `api_version` and `kind`.
    pub fn target_of_type(&self, api_version: &str, kind: &str) -> Option<&Target> {
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        self.targets
            .iter()
            .find(|t| t.resource.group == group && t.resource.kind == kind)
    }

    /// The rule for the object a queue key names.
    pub fn target_of_key(&self, key: &ParentKey) -> Option<&Target> {
        let t = key.type_.as_ref()?;
        self.target_of_type(&t.api_version, &t.kind)
    }

    /// Whether the object matches its rule's label and annotation selectors.
    pub fn matches(&self, object: &Value) -> bool {
        self.target_of(object).is_some_and(|t| {
            t.labels.matches_labels(object) && t.annotations.matches_annotations(object)
        })
    }

    /// Whether events of `object` concern this controller.
    pub fn wants(&self, object: &Value) -> bool {
        self.matches(object) || has_finalizer(object, &self.finalizer())
    }

    /// The queue key of the decorated object an attachment belongs to.
    pub async fn parent_of_attachment(
        &self,
        cluster: &dyn Cluster,
        attachment: &Value,
    ) -> Result<Option<ParentKey>, ClusterError> {
        if attachment["metadata"]["annotations"][DECORATOR_ANNOTATION].as_str()
            != Some(self.name.as_str())
        {
            return Ok(None);
        }
        let Some(r) = claim::controller_ref(attachment) else {
            return Ok(None);
        };
        let Some(t) = self.target_of_type(
            r["apiVersion"].as_str().unwrap_or_default(),
            r["kind"].as_str().unwrap_or_default(),
        ) else {
            return Ok(None);
        };
        let ns = if t.resource.namespaced {
            namespace_of(attachment)
        } else {
            ""
        };
        let name = r["name"].as_str().unwrap_or_default();
        let Some(parent) = cluster.cached(&t.resource, ns, name).await? else {
            return Ok(None);
        };
        if Some(uid_of(&parent)) != r["uid"].as_str() || !self.wants(&parent) {
            return Ok(None);
        }
        Ok(Some(ParentKey::typed(&parent)))
    }

    async fn observed_attachments(
        &self,
        cluster: &dyn Cluster,
        object: &Value,
    ) -> Result<GroupMap, ClusterError> {
        let ns = (!namespace_of(object).is_empty()).then(|| namespace_of(object));
        let mut out = GroupMap::new();
        for (t, objects) in
            children::candidates(cluster, &self.attachments, ns, uid_of(object)).await?
        {
            let group = out.entry(t.group_key()).or_default();
            for a in objects {
                if claim::controller_uid(&a) == Some(uid_of(object))
                    && a["metadata"]["annotations"][DECORATOR_ANNOTATION].as_str()
                        == Some(self.name.as_str())
                {
                    group.insert(key_of(&a), std::sync::Arc::clone(&a));
                }
            }
        }
        Ok(out)
    }

    /// One sync of the object named by `key`, as named steps: finalizer → attachments
    /// observed → hook → write back → attachments managed.
    pub async fn sync(
        &self,
        cluster: &dyn Cluster,
        key: &ParentKey,
    ) -> Result<SyncReport, SyncError> {
        let Some(decorated) = self.finalizer_step(cluster, key).await? else {
            return Ok(SyncReport::default());
        };
        let observed = self
            .observed_attachments(cluster, &decorated.object)
            .await?;
        let (response, mut report) = self.hook_step(cluster, &decorated, &observed).await?;
        let write = WriteBack::decide(&decorated.object, &response, &self.finalizer());
        let Some(object) = write
            .apply(cluster, &decorated.resource, decorated.object, &mut report)
            .await?
        else {
            return Ok(report);
        };
        let desired = self.desired_attachments(&object, response.attachments)?;
        report.planned = children::planned(&desired);
        if crate::keys::manages_children(&object, &self.finalizer(), self.finalize.is_some()) {
            report.applied = children::manage(
                cluster,
                &Owner::of(&object),
                &self.attachments,
                &observed,
                &desired,
                self.strategy,
            )
            .await;
            report.resync_after = report.applied.resync(report.resync_after);
        }
        if !report.applied.errors.is_empty() {
            return Err(SyncError::transient(report.applied.errors.join("; ")));
        }
        Ok(report)
    }

    /// The finalizer step: the cached object with our finalizer added while a finalize
    /// hook is configured and it matches its rule, removed without a finalize hook.
    /// `None` when it is gone or not ours.
    async fn finalizer_step(
        &self,
        cluster: &dyn Cluster,
        key: &ParentKey,
    ) -> Result<Option<Decorated>, SyncError> {
        let Some(target) = self.target_of_key(key) else {
            return Ok(None);
        };
        let resource = target.resource.clone();
        let Some(object) = cluster.cached(&resource, &key.namespace, &key.name).await? else {
            return Ok(None);
        };
        let mut object = (*object).clone();
        let finalizer = self.finalizer();
        if !self.wants(&object) {
            return Ok(None);
        }
        let matches = self.matches(&object);
        let change = FinalizerChange::decide(&object, &finalizer, self.finalize.is_some(), matches);
        if let Some(change) = change {
            object = change
                .apply(cluster, &resource, &object, &finalizer)
                .await?;
        }
        Ok(self.wants(&object).then_some(Decorated {
            resource,
            object,
            matches,
        }))
    }

    /// The hook step: related objects, then the sync hook, or the finalize hook while the
    /// object is deleted or no longer matches. Returns the answer and the report of it.
    async fn hook_step(
        &self,
        cluster: &dyn Cluster,
        decorated: &Decorated,
        observed: &GroupMap,
    ) -> Result<(DecoratorResponse, SyncReport), SyncError> {
        let object = &decorated.object;
        let related = related_of(cluster, self.customizer.as_ref(), &self.object, object).await?;
        let finalizing = self.finalize.is_some() && (is_deleting(object) || !decorated.matches);
        let (hook_type, bound) = match (finalizing, &self.finalize, &self.sync) {
            (true, Some(f), _) => (HookType::Finalize, f),
            (false, _, Some(s)) => (HookType::Sync, s),
            _ => return Err(SyncError::permanent("no enabled hooks found")),
        };
        let body = decorator_request(
            &self.object,
            object,
            observed,
            &related,
            bound.hook.version,
            finalizing,
        );
        let (answer, request_digest) = call_hook(bound, body, object).await?;
        let decoded = decode_decorator(
            hook_type,
            bound.hook.version,
            bound.hook.unmarshal_mode(),
            &answer,
        )
        .map_err(|e| SyncError::permanent(e.to_string()))?;
        let report = SyncReport {
            hook: Some(hook_type),
            resync_after: resync_after(decoded.response.resync_after_seconds),
            request_digest: Some(request_digest),
            answer_digest: Some(digest(&answer)),
            warnings: decoded.warnings,
            ..SyncReport::default()
        };
        Ok((decoded.response, report))
    }

    /// The attachments the answer asks for: the object's namespace by default, each
    /// marked as this controller's.
    fn desired_attachments(
        &self,
        object: &Value,
        attachments: Option<Vec<Value>>,
    ) -> Result<GroupMap, SyncError> {
        let mut desired = Vec::new();
        for mut a in attachments.unwrap_or_default() {
            if namespace_of(&a).is_empty() && !namespace_of(object).is_empty() {
                a["metadata"]["namespace"] = json!(namespace_of(object));
            }
            a["metadata"]["annotations"][DECORATOR_ANNOTATION] = json!(self.name);
            desired.push(a);
        }
        children::group_desired(desired, &self.attachments)
            .map_err(|e| SyncError::permanent(e.to_string()))
    }
}

/// The decorated object of a sync, after the finalizer step.
struct Decorated {
    resource: Resource,
    object: Value,
    /// Whether it matched its rule's selectors when read (before the finalizer step).
    matches: bool,
}

/// What an answer changes on the decorated object (pure): each part only when it differs.
#[derive(Clone, Debug, Default, PartialEq)]
struct WriteBack {
    labels: Option<Value>,
    annotations: Option<Value>,
    status: Option<Value>,
    /// Our finalizer, to drop: the finalize hook answered `finalized`.
    finalize: Option<String>,
}

impl WriteBack {
    fn decide(object: &Value, response: &DecoratorResponse, finalizer: &str) -> WriteBack {
        let changed = |current: &Value, answer| {
            let map = apply_map(current, answer);
            (map != *current && !(map == json!({}) && current.is_null())).then_some(map)
        };
        WriteBack {
            labels: changed(&object["metadata"]["labels"], &response.labels),
            annotations: changed(&object["metadata"]["annotations"], &response.annotations),
            status: response.status.clone().filter(|s| *s != object["status"]),
            finalize: (response.finalized && has_finalizer(object, finalizer))
                .then(|| finalizer.to_string()),
        }
    }

    /// Writes it: the status through its subresource first (when the resource has one),
    /// then labels, annotations, a status without subresource and the finalizer in one
    /// replace. Returns the object as written; `None` when it changed or went under us
    /// (a later sync sees it again).
    async fn apply(
        self,
        cluster: &dyn Cluster,
        resource: &Resource,
        object: Value,
        report: &mut SyncReport,
    ) -> Result<Option<Value>, SyncError> {
        if self == WriteBack::default() {
            return Ok(Some(object));
        }
        let mut updated = object.clone();
        let status_changed = self.status.is_some();
        if let Some(status) = self.status {
            if resource.status_subresource {
                let mut with_status = object;
                with_status["status"] = status;
                match cluster.replace_status(resource, with_status).await {
                    Ok(written) => {
                        updated["metadata"]["resourceVersion"] =
                            written["metadata"]["resourceVersion"].clone();
                        updated["status"] = written["status"].clone();
                        report.status_written = true;
                    }
                    Err(ClusterError::NotFound(_) | ClusterError::Conflict(_)) => {
                        return Ok(None);
                    }
                    Err(e) => return Err(e.into()),
                }
            } else {
                updated["status"] = status;
                report.status_written = true;
            }
        }
        let replace = self.labels.is_some()
            || self.annotations.is_some()
            || self.finalize.is_some()
            || (status_changed && !resource.status_subresource);
        if let Some(labels) = self.labels {
            updated["metadata"]["labels"] = labels;
        }
        if let Some(annotations) = self.annotations {
            updated["metadata"]["annotations"] = annotations;
        }
        if let Some(finalizer) = &self.finalize {
            if let Some(list) = updated["metadata"]["finalizers"].as_array_mut() {
                list.retain(|f| f.as_str() != Some(finalizer.as_str()));
            }
            report.finalized = true;
        }
        if !replace {
            return Ok(Some(updated));
        }
        match cluster.replace(resource, updated).await {
            Ok(written) => Ok(Some(written)),
            Err(ClusterError::NotFound(_) | ClusterError::Conflict(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

impl Reconcile for Decorator {
    fn kind(&self) -> ControllerKind {
        ControllerKind::DecoratorController
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn object(&self) -> &Value {
        &self.object
    }

    fn parent_kind(&self) -> Option<String> {
        None
    }

    fn parent_resources(&self) -> Vec<Resource> {
        self.targets.iter().map(|t| t.resource.clone()).collect()
    }

    fn child_resources(&self) -> Vec<Resource> {
        self.attachments
            .iter()
            .map(|t| t.resource.clone())
            .collect()
    }

    fn resync_period(&self) -> Option<Duration> {
        resync_period(self.spec.resync_period_seconds)
    }

    fn parent_key(&self, parent: &Value) -> ParentKey {
        ParentKey::typed(parent)
    }

    fn resource_of(&self, key: &ParentKey) -> Option<&Resource> {
        self.target_of_key(key).map(|t| &t.resource)
    }

    fn wants(&self, parent: &Value) -> bool {
        Decorator::wants(self, parent)
    }

    fn ignore_status_changes(&self, parent: &Value) -> bool {
        self.target_of(parent)
            .is_some_and(|t| t.ignore_status_changes)
    }

    fn customizer(&self) -> Option<&Customizer> {
        self.customizer.as_ref()
    }

    fn sync<'a>(
        &'a self,
        cluster: &'a dyn Cluster,
        key: &'a ParentKey,
    ) -> BoxFut<'a, Result<SyncReport, SyncError>> {
        Box::pin(Decorator::sync(self, cluster, key))
    }

    fn parents_of_child<'a>(
        &'a self,
        cluster: &'a dyn Cluster,
        child: &'a Value,
        _deleted: bool,
    ) -> BoxFut<'a, Result<Vec<ParentKey>, ClusterError>> {
        Box::pin(async move {
            Ok(self
                .parent_of_attachment(cluster, child)
                .await?
                .into_iter()
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "o", "labels": {"a": "1"}, "finalizers": ["f"]},
               "status": {"phase": "Running"}})
    }

    fn response(answer: Value) -> DecoratorResponse {
        serde_json::from_value(answer).expect("an answer")
    }

    #[test]
    fn an_answer_as_the_object_is_writes_nothing() {
        let answer = response(json!({"labels": {"a": "1"}, "annotations": {},
                                     "status": {"phase": "Running"}}));
        assert_eq!(
            WriteBack::decide(&object(), &answer, "f"),
            WriteBack::default()
        );
    }

    #[test]
    fn labels_set_and_removed_status_and_finalizer_are_written_back() {
        let answer = response(json!({"labels": {"a": null, "b": "2"},
                                     "annotations": {"n": "v"},
                                     "status": {"phase": "Done"}, "finalized": true}));
        assert_eq!(
            WriteBack::decide(&object(), &answer, "f"),
            WriteBack {
                labels: Some(json!({"b": "2"})),
                annotations: Some(json!({"n": "v"})),
                status: Some(json!({"phase": "Done"})),
                finalize: Some("f".into()),
            }
        );
        // `finalized` without our finalizer on the object: nothing to drop.
        assert_eq!(WriteBack::decide(&object(), &answer, "g").finalize, None);
    }
}
