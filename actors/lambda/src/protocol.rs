//! Hook requests and responses.
//!
//! Responses are decoded case-sensitively. In strict mode (v2 hooks by default) unknown
//! and duplicate fields are errors; in loose mode they are reported as warnings and
//! ignored, as upstream does (so `{"Children": […]}` yields no children). Syntax and
//! type errors are always errors. Children must carry `apiVersion`, `kind` and a name.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::keys::{GroupMap, HookMap, Places};
use crate::ports::HookType;
use crate::types::{HookVersion, UnmarshalMode};

/// A hook answer that cannot be used.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ResponseError {
    #[error("{hook} hook: the response is not valid JSON for a {hook} response: {message}")]
    Decode { hook: HookType, message: String },
    #[error("{hook} hook: strict validation failed for {version} webhookResponse: {message}")]
    Strict {
        hook: HookType,
        version: &'static str,
        message: String,
    },
    #[error("{hook} hook: {what}[{index}]: {message}")]
    Object {
        hook: HookType,
        what: &'static str,
        index: usize,
        message: String,
    },
}

/// A sync or finalize answer of a CompositeController hook.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositeResponse {
    #[serde(default)]
    pub status: Option<Value>,
    #[serde(default)]
    pub children: Option<Vec<Value>>,
    #[serde(default)]
    pub resync_after_seconds: f64,
    #[serde(default)]
    pub finalized: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StrictComposite {
    #[serde(default)]
    status: Option<Value>,
    #[serde(default)]
    children: Option<Vec<Value>>,
    #[serde(default)]
    resync_after_seconds: f64,
    #[serde(default)]
    finalized: bool,
}

/// A sync or finalize answer of a DecoratorController hook.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecoratorResponse {
    #[serde(default)]
    pub labels: Option<BTreeMap<String, Option<String>>>,
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, Option<String>>>,
    #[serde(default)]
    pub status: Option<Value>,
    #[serde(default)]
    pub attachments: Option<Vec<Value>>,
    #[serde(default)]
    pub resync_after_seconds: f64,
    #[serde(default)]
    pub finalized: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StrictDecorator {
    #[serde(default)]
    labels: Option<BTreeMap<String, Option<String>>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, Option<String>>>,
    #[serde(default)]
    status: Option<Value>,
    #[serde(default)]
    attachments: Option<Vec<Value>>,
    #[serde(default)]
    resync_after_seconds: f64,
    #[serde(default)]
    finalized: bool,
}

impl From<StrictComposite> for CompositeResponse {
    fn from(s: StrictComposite) -> Self {
        CompositeResponse {
            status: s.status,
            children: s.children,
            resync_after_seconds: s.resync_after_seconds,
            finalized: s.finalized,
        }
    }
}

impl From<StrictDecorator> for DecoratorResponse {
    fn from(s: StrictDecorator) -> Self {
        DecoratorResponse {
            labels: s.labels,
            annotations: s.annotations,
            status: s.status,
            attachments: s.attachments,
            resync_after_seconds: s.resync_after_seconds,
            finalized: s.finalized,
        }
    }
}

/// One rule of a customize answer: which related objects a parent sees.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedRule {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub label_selector: Option<Value>,
    #[serde(default)]
    pub namespace_selector: Option<Value>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub names: Vec<String>,
}

/// A customize answer.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomizeResponse {
    #[serde(default)]
    pub related_resources: Vec<RelatedRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StrictCustomize {
    #[serde(default)]
    related_resources: Vec<StrictRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StrictRule {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    label_selector: Option<Value>,
    #[serde(default)]
    namespace_selector: Option<Value>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    names: Vec<String>,
}

impl From<StrictCustomize> for CustomizeResponse {
    fn from(s: StrictCustomize) -> Self {
        CustomizeResponse {
            related_resources: s
                .related_resources
                .into_iter()
                .map(|r| RelatedRule {
                    api_version: r.api_version,
                    resource: r.resource,
                    label_selector: r.label_selector,
                    namespace_selector: r.namespace_selector,
                    namespace: r.namespace,
                    names: r.names,
                })
                .collect(),
        }
    }
}

/// A decoded answer and the strict-mode complaints that loose mode let through.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded<T> {
    pub response: T,
    pub warnings: Vec<String>,
}

fn version_name(version: HookVersion) -> &'static str {
    match version {
        HookVersion::V1 => "v1",
        HookVersion::V2 => "v2",
    }
}

/// Whether `body` is a JSON list (serde reads a struct from one, field by field).
fn is_list(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// Decodes `body`; an error names the field it is about (`resyncAfterSeconds: invalid
/// type: …`), as serde's own message says only what was expected and where in the text.
fn from_slice_at<T: DeserializeOwned>(body: &[u8]) -> Result<T, BodyError> {
    // serde reads a struct from a list too, field by field in order: `[{…}]` would be an
    // answer whose status is the intended answer. Upstream refuses it; so do we.
    if is_list(body) {
        return Err(BodyError::List);
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize::<_, T>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." || path.is_empty() {
            BodyError::Json(e.into_inner())
        } else {
            BodyError::Field {
                path,
                source: e.into_inner(),
            }
        }
    })?;
    de.end()?;
    Ok(value)
}

/// Why a hook's body does not decode, naming the field where it can.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// A list where an object belongs.
    #[error("expected a JSON object, got a list")]
    List,
    /// A field whose value does not fit.
    #[error("{path}: {source}")]
    Field {
        /// Where (`children[2].kind`).
        path: String,
        /// serde's reason.
        source: serde_json::Error,
    },
    /// Not JSON, or not the shape as a whole.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

fn decode<T: DeserializeOwned + From<S>, S: DeserializeOwned>(
    hook: HookType,
    version: HookVersion,
    mode: UnmarshalMode,
    body: &[u8],
) -> Result<Decoded<T>, ResponseError> {
    // The strict form first: an answer it accepts has only known fields, each once, so it
    // is also the loose answer, and one parse is enough (the common case).
    if !is_list(body)
        && let Ok(strict) = serde_json::from_slice::<S>(body)
    {
        return Ok(Decoded {
            response: strict.into(),
            warnings: Vec::new(),
        });
    }
    let response = from_slice_at::<T>(body).map_err(|e| ResponseError::Decode {
        hook,
        message: e.to_string(),
    })?;
    let mut warnings = Vec::new();
    if let Err(e) = from_slice_at::<S>(body) {
        let message = e.to_string();
        match mode {
            UnmarshalMode::Strict => {
                return Err(ResponseError::Strict {
                    hook,
                    version: version_name(version),
                    message,
                });
            }
            UnmarshalMode::Loose => warnings.push(message),
        }
    }
    Ok(Decoded { response, warnings })
}

/// Checks that each object of a hook's list is a usable object: `apiVersion`, `kind`
/// and `metadata.name`; `null` entries are dropped.
fn check_objects(
    hook: HookType,
    what: &'static str,
    objects: Option<Vec<Value>>,
) -> Result<Vec<Value>, ResponseError> {
    let mut out = Vec::new();
    for (index, object) in objects.unwrap_or_default().into_iter().enumerate() {
        if object.is_null() {
            continue;
        }
        let err = |message: &str| ResponseError::Object {
            hook,
            what,
            index,
            message: message.to_string(),
        };
        if !object.is_object() {
            return Err(err("expected an object"));
        }
        if object["kind"].as_str().is_none_or(str::is_empty) {
            return Err(err("Object 'Kind' is missing"));
        }
        if object["apiVersion"].as_str().is_none_or(str::is_empty) {
            return Err(err("Object 'apiVersion' is missing"));
        }
        if object["metadata"]["name"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            return Err(err("metadata.name is missing"));
        }
        if !object["metadata"]["labels"].is_null()
            && !object["metadata"]["labels"]
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string))
        {
            return Err(err("metadata.labels must map strings to strings"));
        }
        out.push(object);
    }
    Ok(out)
}

/// Decodes a CompositeController sync or finalize answer.
pub fn decode_composite(
    hook: HookType,
    version: HookVersion,
    mode: UnmarshalMode,
    body: &[u8],
) -> Result<Decoded<CompositeResponse>, ResponseError> {
    let mut d = decode::<CompositeResponse, StrictComposite>(hook, version, mode, body)?;
    d.response.children = Some(check_objects(hook, "children", d.response.children.take())?);
    if d.response.status.as_ref().is_some_and(|s| !s.is_object()) {
        return Err(ResponseError::Decode {
            hook,
            message: "status: expected an object or null".into(),
        });
    }
    Ok(d)
}

/// Decodes a DecoratorController sync or finalize answer.
pub fn decode_decorator(
    hook: HookType,
    version: HookVersion,
    mode: UnmarshalMode,
    body: &[u8],
) -> Result<Decoded<DecoratorResponse>, ResponseError> {
    let mut d = decode::<DecoratorResponse, StrictDecorator>(hook, version, mode, body)?;
    d.response.attachments = Some(check_objects(
        hook,
        "attachments",
        d.response.attachments.take(),
    )?);
    if d.response.status.as_ref().is_some_and(|s| !s.is_object()) {
        return Err(ResponseError::Decode {
            hook,
            message: "status: expected an object or null".into(),
        });
    }
    Ok(d)
}

/// Decodes a customize answer.
pub fn decode_customize(
    version: HookVersion,
    mode: UnmarshalMode,
    body: &[u8],
) -> Result<Decoded<CustomizeResponse>, ResponseError> {
    decode::<CustomizeResponse, StrictCustomize>(HookType::Customize, version, mode, body)
}

/// The body of a DecoratorController sync or finalize request. Fields in the order a
/// JSON object (sorted keys) has them; written straight from the borrowed objects.
#[derive(serde::Serialize)]
struct DecoratorRequest<'a> {
    attachments: HookMap<'a>,
    controller: &'a Value,
    finalizing: bool,
    object: &'a Value,
    related: HookMap<'a>,
}

fn to_body<T: serde::Serialize>(request: &T) -> Vec<u8> {
    // Serializing `Value`s and string-keyed maps into memory cannot fail.
    serde_json::to_vec(request).unwrap_or_default()
}

/// [`composite_request_with`], the controller serialized here.
#[cfg(test)]
pub(crate) fn composite_request(
    controller: &Value,
    parent: &Value,
    children: &GroupMap,
    related: &GroupMap,
    version: HookVersion,
    finalizing: bool,
) -> Vec<u8> {
    composite_request_with(
        &to_body(controller),
        parent,
        children,
        related,
        version,
        finalizing,
        0,
    )
    .0
}

/// Where a composite request body holds its objects' texts, as byte ranges.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RequestPlaces {
    pub controller: Range<usize>,
    pub parent: Range<usize>,
    /// Each observed child's, by group and key in the order of the children's group map;
    /// `None` for a child the body leaves out.
    pub children: Places,
}

/// The body of a CompositeController sync or finalize request, as JSON bytes, with the
/// controller already serialized (it is the same for every request of a controller),
/// written into a buffer of `capacity` bytes (the size of an earlier request spares the
/// buffer's regrowth); and where in it the controller, the parent and each child are.
/// The fields in the order a JSON object (sorted keys) has them, compact; the objects
/// written straight from the borrowed values.
pub(crate) fn composite_request_with(
    controller_json: &[u8],
    parent: &Value,
    children: &GroupMap,
    related: &GroupMap,
    version: HookVersion,
    finalizing: bool,
    capacity: usize,
) -> (Vec<u8>, RequestPlaces) {
    let parent_namespace = crate::keys::namespace_of(parent);
    let mut out = Vec::with_capacity(capacity.max(controller_json.len() + 256));
    let map = |map| HookMap {
        map,
        version,
        parent_namespace,
    };
    // Writing into memory cannot fail (nor can serializing `Value`s and string maps).
    out.extend_from_slice(b"{\"children\":");
    let children = map(children).write(&mut out);
    out.extend_from_slice(b",\"controller\":");
    let controller = out.len()..out.len() + controller_json.len();
    out.extend_from_slice(controller_json);
    out.extend_from_slice(if finalizing {
        b",\"finalizing\":true,\"parent\":"
    } else {
        b",\"finalizing\":false,\"parent\":"
    });
    let start = out.len();
    let _ = serde_json::to_writer(&mut out, parent);
    let parent = start..out.len();
    out.extend_from_slice(b",\"related\":");
    let _ = serde_json::to_writer(&mut out, &map(related));
    out.push(b'}');
    (
        out,
        RequestPlaces {
            controller,
            parent,
            children,
        },
    )
}

/// The body of a DecoratorController sync or finalize request, as JSON bytes.
pub(crate) fn decorator_request(
    controller: &Value,
    object: &Value,
    attachments: &GroupMap,
    related: &GroupMap,
    version: HookVersion,
    finalizing: bool,
) -> Vec<u8> {
    let parent_namespace = crate::keys::namespace_of(object);
    to_body(&DecoratorRequest {
        attachments: HookMap {
            map: attachments,
            version,
            parent_namespace,
        },
        controller,
        finalizing,
        object,
        related: HookMap {
            map: related,
            version,
            parent_namespace,
        },
    })
}

/// The body of a customize request.
pub(crate) fn customize_request(controller: &Value, parent: &Value) -> Value {
    json!({"controller": controller, "parent": parent})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn composite(
        mode: UnmarshalMode,
        body: &str,
    ) -> Result<Decoded<CompositeResponse>, ResponseError> {
        decode_composite(HookType::Sync, HookVersion::V1, mode, body.as_bytes())
    }

    #[test]
    fn a_full_answer_decodes() {
        let d = composite(
            UnmarshalMode::Strict,
            r#"{"status": {"a": 1}, "children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, null], "resyncAfterSeconds": 1.5, "finalized": true}"#,
        )
        .expect("decodes");
        assert_eq!(d.response.children.as_ref().map(Vec::len), Some(1));
        assert_eq!(d.response.resync_after_seconds, 1.5);
        assert!(d.response.finalized);
        assert!(d.warnings.is_empty());
    }

    #[test]
    fn loose_mode_ignores_miscapitalised_fields_with_a_warning() {
        let d =
            composite(UnmarshalMode::Loose, r#"{"Children": [{"kind": "Pod"}]}"#).expect("loose");
        assert_eq!(d.response.children, Some(vec![]));
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    }

    #[test]
    fn strict_mode_refuses_unknown_and_duplicate_fields() {
        let err = composite(UnmarshalMode::Strict, r#"{"Children": []}"#).expect_err("unknown");
        assert!(
            err.to_string().contains("strict validation failed for v1"),
            "{err}"
        );
        let err = composite(
            UnmarshalMode::Strict,
            r#"{"finalized": true, "finalized": false}"#,
        )
        .expect_err("duplicate");
        assert!(err.to_string().contains("duplicate field"), "{err}");
    }

    #[test]
    fn non_json_and_a_child_without_kind_are_named() {
        let err = composite(UnmarshalMode::Loose, "<html>").expect_err("not json");
        assert!(
            err.to_string()
                .starts_with("sync hook: the response is not valid JSON"),
            "{err}"
        );
        let err = composite(
            UnmarshalMode::Loose,
            r#"{"children": [{"apiVersion": "v1", "metadata": {"name": "x"}}]}"#,
        )
        .expect_err("no kind");
        assert_eq!(
            err.to_string(),
            "sync hook: children[0]: Object 'Kind' is missing"
        );
    }

    #[test]
    fn decorator_labels_can_delete_with_null() {
        let d = decode_decorator(
            HookType::Sync,
            HookVersion::V1,
            UnmarshalMode::Strict,
            br#"{"labels": {"a": "1", "b": null}}"#,
        )
        .expect("decodes");
        let labels = d.response.labels.expect("labels");
        assert_eq!(labels.get("a"), Some(&Some("1".to_string())));
        assert_eq!(labels.get("b"), Some(&None));
    }

    #[test]
    fn request_bodies_are_the_json_of_their_parts() {
        let mut children = GroupMap::new();
        children.entry("ConfigMap.v1".into()).or_default().extend([
            (
                "ns/b".to_string(),
                std::sync::Arc::new(json!({"metadata": {"name": "b", "namespace": "ns"}})),
            ),
            (
                "other/a".to_string(),
                std::sync::Arc::new(json!({"metadata": {"name": "a", "namespace": "other"}})),
            ),
        ]);
        let related = GroupMap::new();
        let controller = json!({"kind": "CompositeController", "spec": {"z": 1, "a": [1, 2]}});
        let parent = json!({"metadata": {"name": "p", "namespace": "ns"}});
        for version in [HookVersion::V1, HookVersion::V2] {
            let body = composite_request(&controller, &parent, &children, &related, version, true);
            let expected = json!({
                "controller": controller,
                "parent": parent,
                "children": crate::keys::for_hook(&children, version, "ns"),
                "related": {},
                "finalizing": true,
            });
            assert_eq!(
                String::from_utf8(body).expect("utf-8"),
                expected.to_string()
            );
            let body = decorator_request(&controller, &parent, &children, &related, version, false);
            let expected = json!({
                "controller": controller,
                "object": parent,
                "attachments": crate::keys::for_hook(&children, version, "ns"),
                "related": {},
                "finalizing": false,
            });
            assert_eq!(
                String::from_utf8(body).expect("utf-8"),
                expected.to_string()
            );
        }
    }
}
