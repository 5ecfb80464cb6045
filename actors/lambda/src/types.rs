//! The `metacontroller.k8s.io/v1alpha1` controller objects, as users write them.
//!
//! Unknown fields are ignored (the API server already validated the object against the
//! CRD schema); fields bosun needs and cannot default are checked by [`parse_composite`]
//! and [`parse_decorator`], whose errors name the field.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// API group of the controller objects.
pub(crate) const GROUP: &str = "metacontroller.k8s.io";
/// The annotation holding the last applied configuration of a child.
pub(crate) const LAST_APPLIED_ANNOTATION: &str = "metacontroller.k8s.io/last-applied-configuration";
/// The annotation naming the DecoratorController that owns an attachment.
pub(crate) const DECORATOR_ANNOTATION: &str = "metacontroller.k8s.io/decorator-controller";

/// Which kind of controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ControllerKind {
    CompositeController,
    DecoratorController,
}

impl ControllerKind {
    /// The kind's name, as in `metacontroller_*{controller_type=…}`.
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerKind::CompositeController => "CompositeController",
            ControllerKind::DecoratorController => "DecoratorController",
        }
    }

    /// The resource's plural.
    pub fn plural(self) -> &'static str {
        match self {
            ControllerKind::CompositeController => "compositecontrollers",
            ControllerKind::DecoratorController => "decoratorcontrollers",
        }
    }

    /// The finalizer this kind of controller puts on its parents.
    pub fn finalizer(self, name: &str) -> String {
        match self {
            ControllerKind::CompositeController => {
                format!("metacontroller.io/compositecontroller-{name}")
            }
            ControllerKind::DecoratorController => {
                format!("metacontroller.io/decoratorcontroller-{name}")
            }
        }
    }
}

impl std::fmt::Display for ControllerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resource named by `apiVersion` and lowercase plural `resource`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    pub api_version: String,
    pub resource: String,
}

impl ResourceRef {
    /// The group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }

    /// The version.
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(_, v)| v)
            .unwrap_or(&self.api_version)
    }
}

impl std::fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.api_version, self.resource)
    }
}

/// `spec.parentResource` of a CompositeController.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentResource {
    #[serde(flatten)]
    pub resource: ResourceRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history: Option<RevisionHistory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_status_changes: Option<bool>,
}

/// `revisionHistory` of a parent resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionHistory {
    #[serde(default)]
    pub field_paths: Vec<String>,
}

/// How changed children are brought up to date.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpdateMethod {
    #[default]
    OnDelete,
    Recreate,
    InPlace,
    RollingRecreate,
    RollingInPlace,
}

impl UpdateMethod {
    /// Whether children of this kind move one per sync through ControllerRevisions.
    pub fn is_rolling(self) -> bool {
        matches!(
            self,
            UpdateMethod::RollingRecreate | UpdateMethod::RollingInPlace
        )
    }
}

fn method_or_default<'de, D: serde::Deserializer<'de>>(d: D) -> Result<UpdateMethod, D::Error> {
    // An empty method counts as OnDelete.
    let s = Option::<String>::deserialize(d)?.unwrap_or_default();
    match s.as_str() {
        "" | "OnDelete" => Ok(UpdateMethod::OnDelete),
        "Recreate" => Ok(UpdateMethod::Recreate),
        "InPlace" => Ok(UpdateMethod::InPlace),
        "RollingRecreate" => Ok(UpdateMethod::RollingRecreate),
        "RollingInPlace" => Ok(UpdateMethod::RollingInPlace),
        other => Err(serde::de::Error::custom(format!(
            "unknown update method {other:?}: expected OnDelete, Recreate, InPlace, RollingRecreate or RollingInPlace"
        ))),
    }
}

/// `updateStrategy` of a child or attachment resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    #[serde(default, deserialize_with = "method_or_default")]
    pub method: UpdateMethod,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_checks: Option<StatusChecks>,
}

/// `statusChecks` of a rolling update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusChecks {
    #[serde(default)]
    pub conditions: Vec<StatusCondition>,
}

/// One condition a child must report before the rollout moves on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusCondition {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A child resource of a CompositeController or an attachment of a DecoratorController.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildResource {
    #[serde(flatten)]
    pub resource: ResourceRef,
    #[serde(default)]
    pub update_strategy: UpdateStrategy,
}

/// A webhook's `caBundle`, `clientTLS`, `authorization` and `basicAuth` (also the fields
/// of an `endpointConfigs` entry).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Security {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    #[serde(default, rename = "clientTLS", skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<ClientTls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
}

impl Security {
    /// Whether none of the fields is set (then `endpointConfigs` apply).
    pub fn is_empty(&self) -> bool {
        self.ca_bundle.is_none()
            && self.client_tls.is_none()
            && self.authorization.is_none()
            && self.basic_auth.is_none()
    }
}

/// A reference to a key of a Secret or ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRef {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `caBundle`: exactly one source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaBundle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<KeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<KeyRef>,
}

/// `clientTLS`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientTls {
    pub secret_ref: KeyRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_key: Option<String>,
}

/// `authorization`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    pub secret_ref: KeyRef,
}

/// `basicAuth`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    pub secret_ref: KeyRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_key: Option<String>,
}

/// `service` of a webhook.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRef {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// `etag` of a webhook.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Etag {
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    pub cache_timeout_seconds: Option<i64>,
    #[serde(default)]
    pub cache_cleanup_seconds: Option<i64>,
}

/// A webhook.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<Etag>,
    #[serde(
        default,
        rename = "responseUnMarshallMode",
        skip_serializing_if = "Option::is_none"
    )]
    pub response_unmarshall_mode: Option<String>,
    #[serde(flatten)]
    pub security: Security,
}

/// Hook protocol version: how objects are keyed in the hook's maps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookVersion {
    #[default]
    V1,
    V2,
}

/// One hook: a version and a webhook.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    #[serde(default)]
    pub version: HookVersion,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
}

/// Response decoding: unknown and duplicate fields are errors in strict mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnmarshalMode {
    Loose,
    Strict,
}

impl Hook {
    /// The response decoding mode: the webhook's, else loose for v1 and strict for v2.
    pub fn unmarshal_mode(&self) -> UnmarshalMode {
        match self
            .webhook
            .as_ref()
            .and_then(|w| w.response_unmarshall_mode.as_deref())
        {
            Some("strict") => UnmarshalMode::Strict,
            Some("loose") => UnmarshalMode::Loose,
            _ => match self.version {
                HookVersion::V1 => UnmarshalMode::Loose,
                HookVersion::V2 => UnmarshalMode::Strict,
            },
        }
    }
}

/// `spec.hooks`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hooks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<Hook>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalize: Option<Hook>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customize: Option<Hook>,
}

/// One `endpointConfigs` entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointConfig {
    pub host: String,
    #[serde(flatten)]
    pub security: Security,
}

/// `spec` of a CompositeController.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeSpec {
    pub parent_resource: ParentResource,
    #[serde(default)]
    pub child_resources: Vec<ChildResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Hooks>,
    #[serde(default)]
    pub endpoint_configs: Vec<EndpointConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_period_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_selector: Option<bool>,
}

/// `annotationSelector` of a decorator resource rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Value>,
}

/// One `spec.resources` rule of a DecoratorController.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecoratorResource {
    #[serde(flatten)]
    pub resource: ResourceRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<AnnotationSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_status_changes: Option<bool>,
}

/// `spec` of a DecoratorController.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecoratorSpec {
    pub resources: Vec<DecoratorResource>,
    #[serde(default)]
    pub attachments: Vec<ChildResource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Hooks>,
    #[serde(default)]
    pub endpoint_configs: Vec<EndpointConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_period_seconds: Option<i32>,
}

/// A controller object that does not describe a usable controller.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub(crate) enum SpecError {
    #[error("{kind} {name}: spec: {message}")]
    Invalid {
        kind: ControllerKind,
        name: String,
        message: String,
    },
}

/// Reads a controller object's name and decodes its `spec`.
fn decode_spec<T: serde::de::DeserializeOwned>(
    kind: ControllerKind,
    object: &Value,
) -> Result<(String, T), SpecError> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let invalid = |message: String| SpecError::Invalid {
        kind,
        name: name.clone(),
        message,
    };
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    if !spec.is_object() {
        return Err(invalid("expected an object".into()));
    }
    let spec = serde_json::from_value::<T>(spec).map_err(|e| invalid(e.to_string()))?;
    Ok((name, spec))
}

/// A field of a controller's spec that is missing or wrong (the text of
/// [`SpecError::Invalid`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum FieldError {
    /// A required field is empty or absent.
    #[error("{path}: must be set")]
    Unset {
        /// The field's path in the spec.
        path: String,
    },
    /// A resource named by kind or group instead of its lowercase plural.
    #[error("{field}.resource: {resource:?} is not a lowercase plural resource name")]
    NotPlural {
        /// The resource rule's path in the spec.
        field: String,
        /// The name given.
        resource: String,
    },
    /// No `hooks` at all.
    #[error("hooks: no hooks defined")]
    NoHooks,
    /// A webhook with neither a URL nor a service and path.
    #[error("hooks.{hook}.webhook: must specify either a full 'url', or both 'service' and 'path'")]
    NoTarget {
        /// `sync`, `finalize` or `customize`.
        hook: &'static str,
    },
    /// An unknown `responseUnMarshallMode`.
    #[error(
        "hooks.{hook}.webhook.responseUnMarshallMode: {mode:?}: expected \"loose\" or \"strict\""
    )]
    UnmarshallMode {
        /// `sync`, `finalize` or `customize`.
        hook: &'static str,
        /// The mode given.
        mode: String,
    },
}

fn check_resource(r: &ResourceRef, field: &str) -> Result<(), FieldError> {
    if r.api_version.is_empty() {
        return Err(FieldError::Unset {
            path: format!("{field}.apiVersion"),
        });
    }
    if r.resource.is_empty() {
        return Err(FieldError::Unset {
            path: format!("{field}.resource"),
        });
    }
    if r.resource.contains('/') || r.resource.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(FieldError::NotPlural {
            field: field.to_string(),
            resource: r.resource.clone(),
        });
    }
    Ok(())
}

fn check_hooks(hooks: &Option<Hooks>) -> Result<(), FieldError> {
    let Some(hooks) = hooks else {
        return Err(FieldError::NoHooks);
    };
    for (name, hook) in [
        ("sync", &hooks.sync),
        ("finalize", &hooks.finalize),
        ("customize", &hooks.customize),
    ] {
        let Some(hook) = hook else { continue };
        let Some(w) = &hook.webhook else {
            return Err(FieldError::Unset {
                path: format!("hooks.{name}.webhook"),
            });
        };
        if w.url.is_none() && (w.service.is_none() || w.path.is_none()) {
            return Err(FieldError::NoTarget { hook: name });
        }
        if let Some(mode) = &w.response_unmarshall_mode
            && mode != "loose"
            && mode != "strict"
        {
            return Err(FieldError::UnmarshallMode {
                hook: name,
                mode: mode.clone(),
            });
        }
    }
    Ok(())
}

/// Decodes and checks a CompositeController object; returns its name and spec.
pub(crate) fn parse_composite(object: &Value) -> Result<(String, CompositeSpec), SpecError> {
    let kind = ControllerKind::CompositeController;
    let (name, spec) = decode_spec::<CompositeSpec>(kind, object)?;
    let invalid = |message: String| SpecError::Invalid {
        kind,
        name: name.clone(),
        message,
    };
    check_resource(&spec.parent_resource.resource, "parentResource")
        .map_err(|e| invalid(e.to_string()))?;
    for (i, c) in spec.child_resources.iter().enumerate() {
        check_resource(&c.resource, &format!("childResources[{i}]"))
            .map_err(|e| invalid(e.to_string()))?;
    }
    check_hooks(&spec.hooks).map_err(|e| invalid(e.to_string()))?;
    Ok((name, spec))
}

/// Decodes and checks a DecoratorController object; returns its name and spec.
pub(crate) fn parse_decorator(object: &Value) -> Result<(String, DecoratorSpec), SpecError> {
    let kind = ControllerKind::DecoratorController;
    let (name, spec) = decode_spec::<DecoratorSpec>(kind, object)?;
    let invalid = |message: String| SpecError::Invalid {
        kind,
        name: name.clone(),
        message,
    };
    if spec.resources.is_empty() {
        return Err(invalid(
            "resources: at least one resource rule is required".into(),
        ));
    }
    for (i, r) in spec.resources.iter().enumerate() {
        check_resource(&r.resource, &format!("resources[{i}]"))
            .map_err(|e| invalid(e.to_string()))?;
    }
    for (i, c) in spec.attachments.iter().enumerate() {
        check_resource(&c.resource, &format!("attachments[{i}]"))
            .map_err(|e| invalid(e.to_string()))?;
    }
    check_hooks(&spec.hooks).map_err(|e| invalid(e.to_string()))?;
    Ok((name, spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_composite_controller_decodes_with_defaults() {
        let cc = json!({
            "metadata": {"name": "bgd"},
            "spec": {
                "parentResource": {"apiVersion": "ctl.example.com/v1", "resource": "bluegreens"},
                "childResources": [
                    {"apiVersion": "v1", "resource": "services"},
                    {"apiVersion": "apps/v1", "resource": "replicasets",
                     "updateStrategy": {"method": "InPlace"}}
                ],
                "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:1/sync"}}}
            }
        });
        let (name, spec) = parse_composite(&cc).expect("valid");
        assert_eq!(name, "bgd");
        assert_eq!(spec.parent_resource.resource.group(), "ctl.example.com");
        assert_eq!(spec.child_resources[0].resource.group(), "");
        assert_eq!(spec.child_resources[0].resource.version(), "v1");
        assert_eq!(
            spec.child_resources[0].update_strategy.method,
            UpdateMethod::OnDelete
        );
        assert_eq!(
            spec.child_resources[1].update_strategy.method,
            UpdateMethod::InPlace
        );
        let sync = spec.hooks.and_then(|h| h.sync).expect("sync hook");
        assert_eq!(sync.version, HookVersion::V1);
        assert_eq!(sync.unmarshal_mode(), UnmarshalMode::Loose);
    }

    #[test]
    fn a_controller_without_hooks_is_refused_naming_the_field() {
        let cc = json!({
            "metadata": {"name": "x"},
            "spec": {"parentResource": {"apiVersion": "a/v1", "resource": "things"}}
        });
        let err = parse_composite(&cc).expect_err("no hooks");
        assert_eq!(
            err.to_string(),
            "CompositeController x: spec: hooks: no hooks defined"
        );
    }

    #[test]
    fn a_webhook_needs_a_url_or_service_and_path() {
        let cc = json!({
            "metadata": {"name": "x"},
            "spec": {"parentResource": {"apiVersion": "a/v1", "resource": "things"},
                     "hooks": {"sync": {"webhook": {"service": {"name": "s", "namespace": "n"}}}}}
        });
        let err = parse_composite(&cc).expect_err("no path");
        assert!(
            err.to_string().contains("both 'service' and 'path'"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_update_method_is_named() {
        let cc = json!({
            "metadata": {"name": "x"},
            "spec": {"parentResource": {"apiVersion": "a/v1", "resource": "things"},
                     "childResources": [{"apiVersion": "v1", "resource": "pods",
                                         "updateStrategy": {"method": "Sometimes"}}],
                     "hooks": {"sync": {"webhook": {"url": "http://h/s"}}}}
        });
        let err = parse_composite(&cc).expect_err("bad method");
        assert!(err.to_string().contains("\"Sometimes\""), "{err}");
    }

    #[test]
    fn v2_hooks_decode_strictly_unless_told_otherwise() {
        let hook: Hook = serde_json::from_value(json!({"version": "v2", "webhook": {"url": "u"}}))
            .expect("hook");
        assert_eq!(hook.unmarshal_mode(), UnmarshalMode::Strict);
        let hook: Hook = serde_json::from_value(
            json!({"version": "v2", "webhook": {"url": "u", "responseUnMarshallMode": "loose"}}),
        )
        .expect("hook");
        assert_eq!(hook.unmarshal_mode(), UnmarshalMode::Loose);
    }
}
