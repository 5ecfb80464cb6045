//! Related objects: the customize hook's rules, cached per parent uid and generation, and
//! the objects they select from the informer caches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::keys::{GroupMap, group_key, key_of, name_of, namespace_of, uid_of};
use crate::ports::{Cluster, HookClient};
use crate::protocol::{RelatedRule, customize_request, decode_customize};
use crate::selector::Selector;
use crate::types::{Hook, HookVersion};

/// How long a customize answer is kept (upstream: 20 minutes).
const CACHE_TTL: Duration = Duration::from_secs(20 * 60);

/// Why related objects could not be read.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RelatedError {
    #[error("customize hook: {0}")]
    Hook(#[from] crate::ports::HookError),
    #[error(transparent)]
    Response(#[from] crate::protocol::ResponseError),
    #[error("related rule {index} ({api_version} {resource}): {message}")]
    Rule {
        index: usize,
        api_version: String,
        resource: String,
        message: String,
    },
}

/// A customize answer and when it was received.
type Cached = (Instant, Arc<Vec<RelatedRule>>);

/// The customize hook of one controller and its answers.
pub struct Customizer {
    hook: Hook,
    client: Arc<dyn HookClient>,
    cache: Mutex<HashMap<(String, i64), Cached>>,
}

impl Customizer {
    pub fn new(hook: Hook, client: Arc<dyn HookClient>) -> Customizer {
        Customizer {
            hook,
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The rules for `parent`: cached by uid and generation (a label-only change does
    /// not call the hook again).
    pub async fn rules(
        &self,
        controller: &Value,
        parent: &Value,
    ) -> Result<Arc<Vec<RelatedRule>>, RelatedError> {
        let key = (
            uid_of(parent).to_string(),
            parent["metadata"]["generation"].as_i64().unwrap_or(0),
        );
        {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            cache.retain(|_, (at, _)| now.duration_since(*at) < CACHE_TTL);
            if let Some((_, rules)) = cache.get(&key) {
                return Ok(Arc::clone(rules));
            }
        }
        let body = customize_request(controller, parent)
            .to_string()
            .into_bytes();
        let answer = self
            .client
            .call(bytes::Bytes::from(body), cache_key(parent))
            .await?;
        let decoded = decode_customize(self.hook.version, self.hook.unmarshal_mode(), &answer)?;
        for w in &decoded.warnings {
            tracing::warn!(parent = %key_of(parent), "customize hook answer: {w}");
        }
        let rules = Arc::new(decoded.response.related_resources);
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (Instant::now(), Arc::clone(&rules)));
        Ok(rules)
    }

    /// The cached rules of `parent`, if its current generation was asked already.
    pub fn cached_rules(&self, parent: &Value) -> Option<Arc<Vec<RelatedRule>>> {
        let key = (
            uid_of(parent).to_string(),
            parent["metadata"]["generation"].as_i64().unwrap_or(0),
        );
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .map(|(_, r)| Arc::clone(r))
    }

    pub fn version(&self) -> HookVersion {
        self.hook.version
    }
}

/// The ETag cache key of a root object: kind/namespace/name.
pub fn cache_key(object: &Value) -> String {
    format!(
        "{}/{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        namespace_of(object),
        name_of(object)
    )
}

enum Selection {
    NamespaceSelector,
    NamespaceAndLabels,
    NamespaceAndNames,
    Labels,
}

/// A related rule selecting its objects in two ways at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum SelectionError {
    #[error("names cannot be combined with labelSelector or namespaceSelector")]
    NamesAndSelector,
    #[error("namespace cannot be combined with namespaceSelector")]
    NamespaceAndSelector,
}

fn selection(rule: &RelatedRule) -> Result<Selection, SelectionError> {
    let has_labels = rule.label_selector.as_ref().is_some_and(|v| !v.is_null());
    let has_ns_sel = rule
        .namespace_selector
        .as_ref()
        .is_some_and(|v| !v.is_null());
    let has_ns = rule.namespace.as_deref().is_some_and(|n| !n.is_empty());
    if !rule.names.is_empty() && (has_labels || has_ns_sel) {
        return Err(SelectionError::NamesAndSelector);
    }
    if has_ns && has_ns_sel {
        return Err(SelectionError::NamespaceAndSelector);
    }
    Ok(if has_ns_sel {
        Selection::NamespaceSelector
    } else if has_labels && has_ns {
        Selection::NamespaceAndLabels
    } else if has_ns || !rule.names.is_empty() {
        Selection::NamespaceAndNames
    } else {
        Selection::Labels
    })
}

/// Whether `object` (of `api_version`/`kind`) is selected by `rule` for a parent in
/// `parent_namespace` (used to route related-object events to parents).
pub(crate) fn rule_matches(
    rule: &RelatedRule,
    version: HookVersion,
    parent_namespace: &str,
    object: &Value,
    namespace_labels: impl Fn(&str) -> Option<Value>,
) -> bool {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let group = |av: &str| {
        av.rsplit_once('/')
            .map(|(g, _)| g.to_string())
            .unwrap_or_default()
    };
    if group(api_version) != group(&rule.api_version) {
        return false;
    }
    let ns = namespace_of(object);
    let v1_local = version == HookVersion::V1 && !parent_namespace.is_empty() && !ns.is_empty();
    let labels = || {
        rule.label_selector
            .as_ref()
            .map(Selector::labels)
            .unwrap_or_else(|| Ok(Selector::default()))
            .is_ok_and(|s| s.matches_labels(object))
    };
    match selection(rule) {
        Err(_) => false,
        Ok(Selection::Labels) => (!v1_local || ns == parent_namespace) && labels(),
        Ok(Selection::NamespaceAndLabels) => rule.namespace.as_deref() == Some(ns) && labels(),
        Ok(Selection::NamespaceAndNames) => {
            let ns_ok = match rule.namespace.as_deref() {
                Some(n) if !n.is_empty() => n == ns,
                _ => !v1_local || ns == parent_namespace,
            };
            ns_ok && (rule.names.is_empty() || rule.names.iter().any(|n| n == name_of(object)))
        }
        Ok(Selection::NamespaceSelector) => {
            let Some(ns_labels) = namespace_labels(ns) else {
                return false;
            };
            let ns_sel = rule
                .namespace_selector
                .as_ref()
                .map(Selector::labels)
                .unwrap_or_else(|| Ok(Selector::default()));
            ns_sel.is_ok_and(|s| s.matches_labels(&ns_labels)) && labels()
        }
    }
}

/// Whether some rule for `plural` selects one of `states`: the states of one changed
/// related object (before and after an update), so a parent whose rules selected the old
/// state hears of the change too — a Namespace that loses the label a parent selects by
/// is news to that parent as much as one that gains it.
pub(crate) fn selects_any(
    rules: &[RelatedRule],
    plural: &str,
    version: HookVersion,
    parent_namespace: &str,
    states: &[&Value],
    namespace_labels: impl Fn(&str) -> Option<Value>,
) -> bool {
    rules
        .iter()
        .filter(|rule| rule.resource == plural)
        .any(|rule| {
            states.iter().any(|object| {
                rule_matches(rule, version, parent_namespace, object, &namespace_labels)
            })
        })
}

/// The related objects `rules` select for `parent`, keyed like children.
pub(crate) async fn related_objects(
    cluster: &dyn Cluster,
    rules: &[RelatedRule],
    version: HookVersion,
    parent: &Value,
) -> Result<GroupMap, RelatedError> {
    let mut out = GroupMap::new();
    let parent_ns = namespace_of(parent);
    for (index, rule) in rules.iter().enumerate() {
        let err = |message: String| RelatedError::Rule {
            index,
            api_version: rule.api_version.clone(),
            resource: rule.resource.clone(),
            message,
        };
        let resource = cluster
            .resolve(&rule.api_version, &rule.resource)
            .await
            .map_err(|e| err(e.to_string()))?;
        let group = out
            .entry(group_key(&rule.api_version, &resource.kind))
            .or_default();
        let sel = selection(rule).map_err(|e| err(e.to_string()))?;
        let labels = rule
            .label_selector
            .as_ref()
            .map(Selector::labels)
            .transpose()
            .map_err(|e| err(e.to_string()))?
            .unwrap_or_default();
        let v1_local = version == HookVersion::V1 && !parent_ns.is_empty() && resource.namespaced;
        let objects = match sel {
            Selection::Labels => {
                let ns = v1_local.then_some(parent_ns);
                cluster
                    .list(&resource, ns)
                    .await
                    .map_err(|e| err(e.to_string()))?
                    .into_iter()
                    .filter(|o| labels.matches_labels(o))
                    .collect::<Vec<_>>()
            }
            Selection::NamespaceAndLabels => {
                let ns = rule.namespace.as_deref().unwrap_or_default();
                if v1_local && ns != parent_ns {
                    return Err(err(format!(
                        "requested related object namespace {ns} differs from parent object namespace {parent_ns}"
                    )));
                }
                cluster
                    .list(&resource, Some(ns))
                    .await
                    .map_err(|e| err(e.to_string()))?
                    .into_iter()
                    .filter(|o| labels.matches_labels(o))
                    .collect()
            }
            Selection::NamespaceAndNames => {
                let ns = rule.namespace.as_deref().filter(|n| !n.is_empty());
                if v1_local && ns.is_some_and(|n| n != parent_ns) {
                    return Err(err(format!(
                        "requested related object namespace {} differs from parent object namespace {parent_ns}",
                        ns.unwrap_or_default()
                    )));
                }
                let ns = if v1_local {
                    Some(ns.unwrap_or(parent_ns))
                } else {
                    ns
                };
                let ns = if resource.namespaced { ns } else { None };
                cluster
                    .list(&resource, ns)
                    .await
                    .map_err(|e| err(e.to_string()))?
                    .into_iter()
                    .filter(|o| rule.names.is_empty() || rule.names.iter().any(|n| n == name_of(o)))
                    .collect()
            }
            Selection::NamespaceSelector => {
                if v1_local {
                    return Err(err(
                        "namespaceSelector needs a v2 hook for a namespaced parent".into(),
                    ));
                }
                if !resource.namespaced {
                    return Err(err(
                        "namespaceSelector cannot select a cluster-scoped resource".into(),
                    ));
                }
                let ns_sel = rule
                    .namespace_selector
                    .as_ref()
                    .map(Selector::labels)
                    .transpose()
                    .map_err(|e| err(e.to_string()))?
                    .unwrap_or_default();
                let namespaces = cluster
                    .resolve("v1", "namespaces")
                    .await
                    .map_err(|e| err(e.to_string()))?;
                let mut objects = Vec::new();
                for ns in cluster
                    .list(&namespaces, None)
                    .await
                    .map_err(|e| err(e.to_string()))?
                    .into_iter()
                    .filter(|n| ns_sel.matches_labels(n))
                {
                    objects.extend(
                        cluster
                            .list(&resource, Some(name_of(&ns)))
                            .await
                            .map_err(|e| err(e.to_string()))?
                            .into_iter()
                            .filter(|o| labels.matches_labels(o)),
                    );
                }
                objects
            }
        };
        for o in objects {
            group.insert(key_of(&o), o);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn namespace(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    }

    #[test]
    fn a_related_object_that_stops_matching_still_concerns_the_parent() {
        let rules = vec![RelatedRule {
            api_version: "v1".into(),
            resource: "namespaces".into(),
            label_selector: Some(json!({"matchLabels": {"propagate": "true"}})),
            ..RelatedRule::default()
        }];
        let before = namespace("beta", json!({"propagate": "true"}));
        let after = namespace("beta", json!({}));
        let none = |_: &str| None;
        assert!(!selects_any(
            &rules,
            "namespaces",
            HookVersion::V2,
            "",
            &[&after],
            none
        ));
        assert!(selects_any(
            &rules,
            "namespaces",
            HookVersion::V2,
            "",
            &[&before, &after],
            none
        ));
        // Rules of another resource do not count.
        assert!(!selects_any(
            &rules,
            "secrets",
            HookVersion::V2,
            "",
            &[&before],
            none
        ));
    }
}
