//! One sync of one object of a DecoratorController: the hook sees the object and its
//! attachments and answers labels, annotations, status and attachments.

use serde_json::{Value, json};

use crate::children::{self, ApplyStrategy, ChildType};
use crate::claim::{self, Owner};
use crate::keys::{GroupMap, ParentKey, has_finalizer, is_deleting, key_of, namespace_of, uid_of};
use std::time::Duration;

use crate::ports::{BoxFut, Cluster, ClusterError, HookType, Resource};
use crate::protocol::{decode_decorator, decorator_request};
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
pub struct Decorator {
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

    /// One sync of the object named by `key`.
    pub async fn sync(
        &self,
        cluster: &dyn Cluster,
        key: &ParentKey,
    ) -> Result<SyncReport, SyncError> {
        let Some(target) = self.target_of_key(key) else {
            return Ok(SyncReport::default());
        };
        let resource = target.resource.clone();
        let Some(object) = cluster.cached(&resource, &key.namespace, &key.name).await? else {
            return Ok(SyncReport::default());
        };
        let mut object = (*object).clone();
        let finalizer = self.finalizer();
        if !self.wants(&object) {
            return Ok(SyncReport::default());
        }
        let matches = self.matches(&object);
        let change = FinalizerChange::decide(&object, &finalizer, self.finalize.is_some(), matches);
        if let Some(change) = change {
            object = change
                .apply(cluster, &resource, &object, &finalizer)
                .await?;
        }
        if !self.wants(&object) {
            return Ok(SyncReport::default());
        }
        let observed = self.observed_attachments(cluster, &object).await?;
        let related = related_of(cluster, self.customizer.as_ref(), &self.object, &object).await?;
        let finalizing = self.finalize.is_some() && (is_deleting(&object) || !matches);
        let (hook_type, bound) = match (finalizing, &self.finalize, &self.sync) {
            (true, Some(f), _) => (HookType::Finalize, f),
            (false, _, Some(s)) => (HookType::Sync, s),
            _ => return Err(SyncError::Failed("no enabled hooks found".into())),
        };
        let body = decorator_request(
            &self.object,
            &object,
            &observed,
            &related,
            bound.hook.version,
            finalizing,
        );
        let (answer, request_digest) = call_hook(bound, body, &object).await?;
        let decoded = decode_decorator(
            hook_type,
            bound.hook.version,
            bound.hook.unmarshal_mode(),
            &answer,
        )
        .map_err(|e| SyncError::Failed(e.to_string()))?;
        let mut report = SyncReport {
            hook: Some(hook_type),
            request_digest: Some(request_digest),
            answer_digest: Some(digest(&answer)),
            warnings: decoded.warnings,
            ..SyncReport::default()
        };
        let response = decoded.response;
        report.resync_after = resync_after(response.resync_after_seconds);
        // Write back labels, annotations and status.
        let labels = apply_map(&object["metadata"]["labels"], &response.labels);
        let annotations = apply_map(&object["metadata"]["annotations"], &response.annotations);
        let labels_changed = labels != object["metadata"]["labels"]
            && !(labels == json!({}) && object["metadata"]["labels"].is_null());
        let annotations_changed = annotations != object["metadata"]["annotations"]
            && !(annotations == json!({}) && object["metadata"]["annotations"].is_null());
        let status_changed = response
            .status
            .as_ref()
            .is_some_and(|s| *s != object["status"]);
        let finalize_now = response.finalized && has_finalizer(&object, &finalizer);
        if labels_changed || annotations_changed || status_changed || finalize_now {
            let mut updated = object.clone();
            if status_changed && resource.status_subresource {
                let mut with_status = object.clone();
                with_status["status"] = response.status.clone().unwrap_or(Value::Null);
                match cluster.replace_status(&resource, with_status).await {
                    Ok(written) => {
                        updated["metadata"]["resourceVersion"] =
                            written["metadata"]["resourceVersion"].clone();
                        updated["status"] = written["status"].clone();
                        report.status_written = true;
                    }
                    Err(ClusterError::NotFound(_) | ClusterError::Conflict(_)) => {
                        return Ok(report);
                    }
                    Err(e) => return Err(e.into()),
                }
            } else if status_changed {
                updated["status"] = response.status.clone().unwrap_or(Value::Null);
                report.status_written = true;
            }
            if labels_changed {
                updated["metadata"]["labels"] = labels;
            }
            if annotations_changed {
                updated["metadata"]["annotations"] = annotations;
            }
            if finalize_now {
                if let Some(list) = updated["metadata"]["finalizers"].as_array_mut() {
                    list.retain(|f| f.as_str() != Some(finalizer.as_str()));
                }
                report.finalized = true;
            }
            if labels_changed
                || annotations_changed
                || finalize_now
                || (status_changed && !resource.status_subresource)
            {
                match cluster.replace(&resource, updated.clone()).await {
                    Ok(written) => object = written,
                    Err(ClusterError::NotFound(_) | ClusterError::Conflict(_)) => {
                        return Ok(report);
                    }
                    Err(e) => return Err(e.into()),
                }
            } else {
                object = updated;
            }
        }
        // Attachments.
        let mut desired = Vec::new();
        for mut a in response.attachments.unwrap_or_default() {
            if namespace_of(&a).is_empty() && !namespace_of(&object).is_empty() {
                a["metadata"]["namespace"] = json!(namespace_of(&object));
            }
            a["metadata"]["annotations"][DECORATOR_ANNOTATION] = json!(self.name);
            desired.push(a);
        }
        let desired =
            children::group_desired(desired, &self.attachments).map_err(SyncError::Failed)?;
        report.planned = children::planned(&desired);
        if crate::keys::manages_children(&object, &finalizer, self.finalize.is_some()) {
            report.applied = children::manage(
                cluster,
                &Owner::of(&object),
                &self.attachments,
                &observed,
                &desired,
                self.strategy,
            )
            .await;
        }
        if !report.applied.errors.is_empty() {
            return Err(SyncError::Failed(report.applied.errors.join("; ")));
        }
        Ok(report)
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
