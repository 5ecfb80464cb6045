//! The DeployItem as the deployer reads it: metadata, spec and the typed status, read
//! from the object's JSON with errors naming the field, and written back into it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::timeout::Timeout;

/// `apiVersion` of DeployItems, Targets and Contexts.
pub const API_VERSION: &str = "landscaper.gardener.cloud/v1alpha1";
/// The finalizer a deployer puts on the items it works on.
pub const FINALIZER: &str = "finalizer.landscaper.gardener.cloud";
/// What a human or the landscaper asks for: `reconcile`, `force-reconcile`, `abort`, `test-reconcile`.
pub(crate) const OPERATION_ANNOTATION: &str = "landscaper.gardener.cloud/operation";
/// Set by the landscaper when it writes an item; a deployer removes it when it picks the item up.
pub(crate) const RECONCILE_TIME_ANNOTATION: &str = "landscaper.gardener.cloud/reconcile-time";
/// Set by the landscaper together with `operation: abort`.
pub(crate) const ABORT_TIME_ANNOTATION: &str = "landscaper.gardener.cloud/abort-time";
/// The item's type, readable from metadata alone.
pub const DEPLOYER_TYPE_ANNOTATION: &str = "landscaper.gardener.cloud/deployer-type";
/// The item's target name, readable from metadata alone (`.noTargetName` when none).
pub(crate) const DEPLOYER_TARGET_NAME_ANNOTATION: &str =
    "landscaper.gardener.cloud/deployer-target-name";
/// `"true"`: remove the finalizer on deletion without uninstalling.
pub(crate) const DELETE_WITHOUT_UNINSTALL_ANNOTATION: &str =
    "landscaper.gardener.cloud/delete-without-uninstall";
/// The value of `deployer-target-name` for an item without a target.
pub(crate) const NO_TARGET_NAME: &str = ".noTargetName";

/// A DeployItem's phase (`status.phase`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Phase {
    Init,
    Progressing,
    Completing,
    Succeeded,
    Failed,
    InitDelete,
    Deleting,
    DeleteFailed,
}

impl Phase {
    /// The phases a deployer leaves alone until it is triggered again.
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed | Phase::DeleteFailed)
    }

    /// The phases of a deletion.
    pub fn is_deletion(self) -> bool {
        matches!(
            self,
            Phase::InitDelete | Phase::Deleting | Phase::DeleteFailed
        )
    }

    /// The phase's name as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Init => "Init",
            Phase::Progressing => "Progressing",
            Phase::Completing => "Completing",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::InitDelete => "InitDelete",
            Phase::Deleting => "Deleting",
            Phase::DeleteFailed => "DeleteFailed",
        }
    }

    /// Parses a phase name.
    pub fn parse(s: &str) -> Option<Phase> {
        serde_json::from_value(Value::String(s.to_string())).ok()
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error code of `lastError.codes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    #[serde(rename = "ERR_UNAUTHORIZED")]
    Unauthorized,
    #[serde(rename = "ERR_CLEANUP")]
    Cleanup,
    #[serde(rename = "ERR_CONFIGURATION_PROBLEM")]
    ConfigurationProblem,
    #[serde(rename = "ERR_INTERNAL_PROBLEM")]
    InternalProblem,
    #[serde(rename = "ERR_TIMEOUT")]
    Timeout,
    #[serde(rename = "ERR_CYCLIC_DEPENDENCIES")]
    CyclicDependencies,
    #[serde(rename = "ERR_WEBHOOK")]
    Webhook,
    #[serde(rename = "ERR_UNFINISHED")]
    Unfinished,
    #[serde(rename = "ERR_FOR_INFO_ONLY")]
    ForInfoOnly,
    #[serde(rename = "ERR_NO_RETRY")]
    NoRetry,
}

impl ErrorCode {
    /// Codes that make an item fail at once instead of being retried.
    pub fn is_unrecoverable(self) -> bool {
        matches!(
            self,
            ErrorCode::ConfigurationProblem
                | ErrorCode::InternalProblem
                | ErrorCode::Timeout
                | ErrorCode::Unauthorized
                | ErrorCode::CyclicDependencies
        )
    }

    /// The code as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "ERR_UNAUTHORIZED",
            ErrorCode::Cleanup => "ERR_CLEANUP",
            ErrorCode::ConfigurationProblem => "ERR_CONFIGURATION_PROBLEM",
            ErrorCode::InternalProblem => "ERR_INTERNAL_PROBLEM",
            ErrorCode::Timeout => "ERR_TIMEOUT",
            ErrorCode::CyclicDependencies => "ERR_CYCLIC_DEPENDENCIES",
            ErrorCode::Webhook => "ERR_WEBHOOK",
            ErrorCode::Unfinished => "ERR_UNFINISHED",
            ErrorCode::ForInfoOnly => "ERR_FOR_INFO_ONLY",
            ErrorCode::NoRetry => "ERR_NO_RETRY",
        }
    }
}

/// One error of the status (`lastError`, `firstError`, `lastErrors[]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemError {
    pub operation: String,
    pub reason: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codes: Vec<ErrorCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
}

/// The `status.transitionTimes` of the jobID contract.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransitionTimes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_time: Option<String>,
}

/// `status.deployer`: who worked on the item.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeployerInfo {
    pub identity: String,
    pub name: String,
    pub version: String,
}

/// A `{name, namespace}` reference.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// `status` of a DeployItem. Fields bosun does not know are kept as they were.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_phase_is_none"
    )]
    pub phase: Option<Phase>,
    #[serde(default)]
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<ItemError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<ItemError>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_errors: Vec<ItemError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconcile_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployer: Option<DeployerInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_status: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_ref: Option<ObjectRef>,
    #[serde(default, rename = "jobID", skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(
        default,
        rename = "jobIDFinished",
        skip_serializing_if = "Option::is_none"
    )]
    pub job_id_finished: Option<String>,
    #[serde(
        default,
        rename = "jobIDGenerationTime",
        skip_serializing_if = "Option::is_none"
    )]
    pub job_id_generation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition_times: Option<TransitionTimes>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `phase: ""` (written by some landscaper versions) is no phase.
fn empty_phase_is_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Phase>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if s.is_empty() => Ok(None),
        Some(s) => Phase::parse(&s).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown phase {s:?} (expected Init, Progressing, Succeeded, Failed, InitDelete, Deleting or DeleteFailed)"
            ))
        }),
    }
}

impl Status {
    /// Whether the item speaks the jobID contract.
    pub fn has_job(&self) -> bool {
        self.job_id.as_deref().is_some_and(|j| !j.is_empty())
    }

    /// The jobID contract's "nothing to do": the current job is finished.
    pub fn job_finished(&self) -> bool {
        self.job_id == self.job_id_finished
    }

    /// When the current run started: `transitionTimes.initTime`, else `lastReconcileTime`.
    pub fn started_at(&self) -> Option<SystemTime> {
        self.transition_times
            .as_ref()
            .and_then(|t| t.init_time.as_deref())
            .or(self.last_reconcile_time.as_deref())
            .and_then(parse_time)
    }
}

/// A malformed DeployItem or Target: the field and what was expected.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[error("{object}: {field}: {message}")]
pub struct FieldError {
    pub object: String,
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(object: &str, field: &str, message: impl Into<String>) -> FieldError {
        FieldError {
            object: object.to_string(),
            field: field.to_string(),
            message: message.into(),
        }
    }
}

/// A DeployItem's namespace and name: the work queue's key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ItemKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ItemKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl ItemKey {
    /// The key of an object's JSON.
    pub fn of(object: &Value) -> ItemKey {
        ItemKey {
            namespace: str_at(object, &["metadata", "namespace"]).to_string(),
            name: str_at(object, &["metadata", "name"]).to_string(),
        }
    }
}

/// A DeployItem read from its JSON. `object` is the whole object as read, so writes keep
/// what bosun does not model.
#[derive(Clone, Debug, PartialEq)]
pub struct DeployItem {
    pub key: ItemKey,
    pub uid: String,
    pub generation: i64,
    pub deleting: bool,
    pub annotations: BTreeMap<String, String>,
    pub finalizers: Vec<String>,
    pub type_: String,
    /// `spec.target.name`.
    pub target: Option<String>,
    /// `spec.context` (`None`: the default Context).
    pub context: Option<String>,
    /// `spec.timeout` as written (parsed by [`DeployItem::timeout`]).
    pub timeout: Option<String>,
    pub update_on_change_only: bool,
    pub status: Status,
    pub object: Value,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_str()
        .unwrap_or_default()
}

impl DeployItem {
    /// `spec.config`, the provider configuration (read from the object, not copied).
    pub fn config(&self) -> Option<&Value> {
        Some(&self.object["spec"]["config"]).filter(|v| !v.is_null())
    }

    /// Reads a DeployItem; a field of the wrong shape is an error naming it.
    pub fn parse(object: &Value) -> Result<DeployItem, FieldError> {
        DeployItem::from_value(object.clone())
    }

    /// [`DeployItem::parse`] of an object the caller gives away (not copied).
    pub fn from_value(object: Value) -> Result<DeployItem, FieldError> {
        let key = ItemKey::of(&object);
        let what = format!("DeployItem {key}");
        let meta = &object["metadata"];
        let annotations = match &meta["annotations"] {
            Value::Null => BTreeMap::new(),
            v => BTreeMap::<String, String>::deserialize(v).map_err(|e| {
                FieldError::new(
                    &what,
                    "metadata.annotations",
                    format!("expected strings: {e}"),
                )
            })?,
        };
        let finalizers = match &meta["finalizers"] {
            Value::Null => Vec::new(),
            v => Vec::<String>::deserialize(v).map_err(|e| {
                FieldError::new(
                    &what,
                    "metadata.finalizers",
                    format!("expected strings: {e}"),
                )
            })?,
        };
        let spec = &object["spec"];
        let type_ = match &spec["type"] {
            Value::String(s) if !s.is_empty() => s.clone(),
            Value::Null | Value::String(_) => {
                return Err(FieldError::new(&what, "spec.type", "missing"));
            }
            other => {
                return Err(FieldError::new(
                    &what,
                    "spec.type",
                    format!("expected a string, got {other}"),
                ));
            }
        };
        let opt_str = |field: &str, v: &Value| -> Result<Option<String>, FieldError> {
            match v {
                Value::Null => Ok(None),
                Value::String(s) if s.is_empty() => Ok(None),
                Value::String(s) => Ok(Some(s.clone())),
                other => Err(FieldError::new(
                    &what,
                    field,
                    format!("expected a string, got {other}"),
                )),
            }
        };
        if !matches!(spec["target"], Value::Null | Value::Object(_)) {
            return Err(FieldError::new(
                &what,
                "spec.target",
                format!("expected an object with a name, got {}", spec["target"]),
            ));
        }
        let target = opt_str("spec.target.name", &spec["target"]["name"])?;
        let context = opt_str("spec.context", &spec["context"])?;
        let timeout = opt_str("spec.timeout", &spec["timeout"])?;
        let update_on_change_only = match &spec["updateOnChangeOnly"] {
            Value::Null => false,
            Value::Bool(b) => *b,
            other => {
                return Err(FieldError::new(
                    &what,
                    "spec.updateOnChangeOnly",
                    format!("expected true or false, got {other}"),
                ));
            }
        };
        let status = match &object["status"] {
            Value::Null => Status::default(),
            // serde would read a struct from a list, field by field in order.
            v @ Value::Object(_) => serde_path_to_error::deserialize(v).map_err(|e| {
                let field = match e.path().to_string() {
                    p if p == "." || p.is_empty() => "status".to_string(),
                    p => format!("status.{p}"),
                };
                FieldError::new(&what, &field, e.into_inner().to_string())
            })?,
            other => {
                return Err(FieldError::new(
                    &what,
                    "status",
                    format!("expected an object, got {other}"),
                ));
            }
        };
        Ok(DeployItem {
            uid: str_at(&object, &["metadata", "uid"]).to_string(),
            generation: meta["generation"].as_i64().unwrap_or(0),
            deleting: !meta["deletionTimestamp"].is_null(),
            annotations,
            finalizers,
            type_,
            target,
            context,
            timeout,
            update_on_change_only,
            status,
            key,
            object,
        })
    }

    /// The type as the metadata tells it (`deployer-type`), else `spec.type`.
    pub fn deployer_type(&self) -> &str {
        self.annotations
            .get(DEPLOYER_TYPE_ANNOTATION)
            .map(String::as_str)
            .unwrap_or(&self.type_)
    }

    /// The target name as the metadata tells it (`deployer-target-name`), else `spec.target.name`.
    pub fn target_name(&self) -> Option<&str> {
        match self.annotations.get(DEPLOYER_TARGET_NAME_ANNOTATION) {
            Some(n) if n == NO_TARGET_NAME || n.is_empty() => None,
            Some(n) => Some(n),
            None => self.target.as_deref(),
        }
    }

    /// `landscaper.gardener.cloud/operation`.
    pub fn operation(&self) -> Option<&str> {
        self.annotations
            .get(OPERATION_ANNOTATION)
            .map(String::as_str)
    }

    /// `spec.timeout`, defaulted to 10 minutes.
    pub fn timeout(&self) -> Result<Timeout, FieldError> {
        self.timeout_or(Timeout::default())
    }

    /// `spec.timeout`, else `default` (landscaper's `deployItemTimeouts.progressingDefault`).
    pub fn timeout_or(&self, default: Timeout) -> Result<Timeout, FieldError> {
        match &self.timeout {
            None => Ok(default),
            Some(t) => Timeout::parse(t).map_err(|e| {
                FieldError::new(
                    &format!("DeployItem {}", self.key),
                    "spec.timeout",
                    e.to_string(),
                )
            }),
        }
    }

    /// The object with `status` replaced by `status`.
    pub fn with_status(&self, status: &Status) -> Value {
        self.writing(status).to_value()
    }

    /// The object with `status` in place of its own, to serialize as it is written: the
    /// same JSON as [`DeployItem::with_status`], without a copy of the item.
    pub fn writing<'a>(&'a self, status: &'a Status) -> WithStatus<'a> {
        WithStatus {
            key: &self.key,
            object: &self.object,
            status,
        }
    }
}

/// An item with a new status, serialized without a copy of the item
/// ([`DeployItem::writing`]): a status write is made for every step of every run, and the
/// copy (and its drop) cost as much as the write's own serializing.
#[derive(Debug)]
pub struct WithStatus<'a> {
    key: &'a ItemKey,
    object: &'a Value,
    status: &'a Status,
}

impl WithStatus<'_> {
    /// The item's key.
    pub fn key(&self) -> &ItemKey {
        self.key
    }

    /// As JSON (a copy of the item; for tests and fakes).
    pub fn to_value(&self) -> Value {
        let mut o = self.object.clone();
        o["status"] = serde_json::to_value(self.status).unwrap_or(Value::Null);
        o
    }
}

impl serde::Serialize for WithStatus<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(fields) = self.object.as_object() else {
            return self.object.serialize(s);
        };
        let mut map = s.serialize_map(None)?;
        for (k, v) in fields.iter().filter(|(k, _)| *k != "status") {
            map.serialize_entry(k, v)?;
        }
        map.serialize_entry("status", self.status)?;
        map.end()
    }
}

/// RFC 3339 with seconds, as Kubernetes writes `metav1.Time`.
pub(crate) fn format_time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Parses an RFC 3339 time.
pub(crate) fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s.trim_end_matches('Z'))
        .ok()
        .or_else(|| humantime::parse_rfc3339(s).ok())
}

/// `b - a`, zero when `b` is earlier.
pub fn since(a: SystemTime, b: SystemTime) -> Duration {
    b.duration_since(a).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_write_sends_the_item_with_the_new_status_in_place_of_the_old() {
        let item = DeployItem::parse(&json!({
            "apiVersion": "landscaper.gardener.cloud/v1alpha1", "kind": "DeployItem",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"type": "landscaper.gardener.cloud/kubernetes-manifest"},
            "status": {"phase": "Init", "jobID": "j1", "kept": {"by": "someone"}}
        }))
        .expect("item");
        let mut status = item.status.clone();
        status.phase = Some(Phase::Succeeded);
        status.observed_generation = 3;
        let sent: Value =
            serde_json::from_slice(&serde_json::to_vec(&item.writing(&status)).expect("json"))
                .expect("json");
        assert_eq!(sent, item.with_status(&status));
        assert_eq!(sent["status"]["phase"], "Succeeded");
        assert_eq!(sent["status"]["jobID"], "j1");
        assert_eq!(sent["status"]["kept"], json!({"by": "someone"}));
        assert_eq!(sent["metadata"]["resourceVersion"], "7");
        assert_eq!(item.writing(&status).key(), &item.key);
    }
}
