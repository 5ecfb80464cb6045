//! The object patcher: executes the operations a hook wrote to `KUBERNETES_PATCH_PATH`
//! (a JSON stream of operation objects, else multi-document YAML).
//!
//! Every operation is parsed and validated before any is executed, so a typo in the last
//! one does not leave the first ones applied. Execution is sequential; a failing
//! operation does not stop the later ones (as in shell-operator) but fails the call, with
//! every failure listed.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use bosun_addon::ports::{BoxFut, ObjectPatcher, PortError};
use bosun_runtime::ErrorClass;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Map, Value};

use crate::jq::JqFilter;
use bosun_kube::resolve::{KindResolver, Resolved};

/// How long `Delete` waits for the object to be gone (foreground deletion).
const DELETE_WAIT: Duration = Duration::from_secs(20);
/// Longest pause between two GETs while waiting for a deletion.
const DELETE_POLL_MAX: Duration = Duration::from_secs(1);
/// Attempts of a read-modify-write that meets `409 Conflict` (client-go's DefaultBackoff
/// makes 4; one more costs little).
const CONFLICT_ATTEMPTS: u32 = 5;

/// The fields an operation may have.
const FIELDS: &[&str] = &[
    "operation",
    "apiVersion",
    "kind",
    "namespace",
    "name",
    "subresource",
    "object",
    "jqFilter",
    "mergePatch",
    "jsonPatch",
    "ignoreMissingObject",
    "ignoreHookError",
];

/// Executes object patcher operations with a Kubernetes client.
#[derive(Clone)]
pub struct KubePatcher {
    client: kube::Client,
    resolver: KindResolver,
    field_manager: Option<String>,
}

impl fmt::Debug for KubePatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubePatcher")
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

/// Why object patcher operations failed.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The text is neither a JSON stream nor YAML.
    #[error(
        "cannot parse the object patcher operations: not a JSON stream ({json}) and not YAML ({yaml})"
    )]
    Parse {
        /// The JSON parser's complaint.
        json: String,
        /// The YAML parser's complaint.
        yaml: String,
    },
    /// Some operations are malformed; none was executed.
    #[error("invalid object patcher operations, none executed: {}", join(.0))]
    Invalid(Vec<OperationError>),
    /// Some operations failed against the API server (the others were executed).
    #[error("{} of {total} object patcher operations failed: {}", .failed.len(), join(.failed))]
    Failed {
        /// How many operations there were.
        total: usize,
        /// The failures, in order.
        failed: Vec<OperationError>,
    },
}

/// One operation's problem, naming the operation by its 1-based position and target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("operation {index} ({target}): {problem}")]
pub struct OperationError {
    /// 1-based position in the text.
    pub index: usize,
    /// `Operation Kind namespace/name`, as far as known.
    pub target: String,
    /// What is wrong.
    pub problem: String,
}

fn join(errors: &[OperationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl KubePatcher {
    /// A patcher with its own discovery cache; `field_manager` is sent with writes
    /// (`KubeClientFieldManager`).
    pub fn new(client: kube::Client, field_manager: Option<String>) -> KubePatcher {
        let resolver = KindResolver::new(client.clone());
        KubePatcher::with_resolver(client, resolver, field_manager)
    }

    /// A patcher sharing a discovery cache with other users of `resolver`.
    pub fn with_resolver(
        client: kube::Client,
        resolver: KindResolver,
        field_manager: Option<String>,
    ) -> KubePatcher {
        KubePatcher {
            client,
            resolver,
            field_manager,
        }
    }

    /// Parses, validates, then executes every operation in `text` in order. Empty text
    /// does nothing.
    pub async fn execute(&self, text: &str) -> Result<(), PatchError> {
        let ops = parse(text)?;
        let total = ops.len();
        let mut failed = Vec::new();
        for op in &ops {
            if let Err(problem) = self.run(op).await {
                failed.push(OperationError {
                    index: op.index,
                    target: op.target(),
                    problem,
                });
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(PatchError::Failed { total, failed })
        }
    }

    fn post_params(&self) -> PostParams {
        PostParams {
            dry_run: false,
            field_manager: self.field_manager.clone(),
        }
    }

    fn patch_params(&self) -> PatchParams {
        PatchParams {
            field_manager: self.field_manager.clone(),
            ..PatchParams::default()
        }
    }

    async fn run(&self, op: &Operation) -> Result<(), String> {
        match &op.action {
            Action::Create { object, mode } => self.create(op, object, *mode).await,
            Action::Delete(how) => self.delete(op, *how).await,
            Action::JqPatch(filter) => self.jq_patch(op, filter).await,
            Action::MergePatch(patch) => self.patch(op, &Patch::Merge(patch)).await,
            Action::JsonPatch(patch) => self.patch(op, &Patch::<()>::Json(patch.clone())).await,
        }
    }

    /// A merge or JSON patch of the object (or its subresource).
    async fn patch<P: serde::Serialize + std::fmt::Debug>(
        &self,
        op: &Operation,
        patch: &Patch<P>,
    ) -> Result<(), String> {
        let api = self.api(op, &self.resolve(op).await?, &op.namespace)?;
        let result = match &op.subresource {
            Some(sub) => {
                api.patch_subresource(sub, &op.name, &self.patch_params(), patch)
                    .await
            }
            None => api.patch(&op.name, &self.patch_params(), patch).await,
        };
        self.missing_ok(op, result)
    }

    /// NotFound is fine for patches with `ignoreMissingObject`.
    fn missing_ok<T>(&self, op: &Operation, result: kube::Result<T>) -> Result<(), String> {
        match result {
            Ok(_) => Ok(()),
            Err(e) if op.ignore_missing && is_not_found(&e) => {
                tracing::debug!(target = %op.target(), "object is missing; ignoreMissingObject");
                Ok(())
            }
            Err(e) => Err(api_error(&e)),
        }
    }

    async fn resolve(&self, op: &Operation) -> Result<Resolved, String> {
        self.resolver
            .resolve(op.api_version.as_deref(), &op.kind)
            .await
            .map_err(|e| e.to_string())
    }

    fn api(
        &self,
        op: &Operation,
        resolved: &Resolved,
        namespace: &str,
    ) -> Result<Api<DynamicObject>, String> {
        if !resolved.namespaced {
            return Ok(Api::all_with(self.client.clone(), &resolved.resource));
        }
        if namespace.is_empty() {
            let whose = if op.is_create() {
                "the object has no metadata.namespace"
            } else {
                "field \"namespace\" is empty"
            };
            return Err(format!(
                "{} ({}) is namespaced but {whose}",
                resolved.resource.kind, resolved.resource.api_version
            ));
        }
        Ok(Api::namespaced_with(
            self.client.clone(),
            namespace,
            &resolved.resource,
        ))
    }

    async fn create(&self, op: &Operation, object: &Value, mode: CreateMode) -> Result<(), String> {
        let resolved = self.resolve(op).await?;
        let mut body = object.clone();
        body["apiVersion"] = Value::from(resolved.resource.api_version.clone());
        body["kind"] = Value::from(resolved.resource.kind.clone());
        let obj: DynamicObject =
            serde_json::from_value(body).map_err(|e| format!("invalid object: {e}"))?;
        let api = self.api(op, &resolved, &op.namespace)?;
        let pp = self.post_params();
        let created = match &op.subresource {
            Some(sub) => {
                api.create_subresource::<_, DynamicObject>(sub, &op.name, &pp, &obj)
                    .await
            }
            None => api.create(&pp, &obj).await,
        };
        match created {
            Ok(_) => Ok(()),
            Err(e) if is_already_exists(&e) => match mode {
                CreateMode::Create => Err(api_error(&e)),
                CreateMode::IfNotExists => Ok(()),
                CreateMode::OrUpdate => {
                    let (api, obj, pp) = (&api, &obj, &pp);
                    retry_on_conflict(|| async move {
                        let current = api.get(&op.name).await?;
                        let mut update = obj.clone();
                        update.metadata.resource_version = current.metadata.resource_version;
                        match &op.subresource {
                            Some(sub) => api.replace_subresource(sub, &op.name, pp, &update).await,
                            None => api.replace(&op.name, pp, &update).await,
                        }
                        .map(|_| ())
                    })
                    .await
                    .map_err(|e| api_error(&e))
                }
            },
            Err(e) => Err(api_error(&e)),
        }
    }

    async fn delete(&self, op: &Operation, how: DeleteMode) -> Result<(), String> {
        let api = self.api(op, &self.resolve(op).await?, &op.namespace)?;
        let dp = match how {
            DeleteMode::Foreground => DeleteParams::foreground(),
            DeleteMode::Background => DeleteParams::background(),
            DeleteMode::Orphan => DeleteParams::orphan(),
        };
        match api.delete(&op.name, &dp).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(api_error(&e)),
        }
        if how != DeleteMode::Foreground {
            return Ok(());
        }
        let deadline = Instant::now() + DELETE_WAIT;
        let mut pause = Duration::from_millis(50);
        loop {
            match api.get_opt(&op.name).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) => {}
                Err(e) => return Err(format!("waiting for the deletion: {}", api_error(&e))),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "still present {}s after a foreground deletion (dependents may still be deleting)",
                    DELETE_WAIT.as_secs()
                ));
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(DELETE_POLL_MAX);
        }
    }

    async fn jq_patch(&self, op: &Operation, filter: &JqFilter) -> Result<(), String> {
        let api = &self.api(op, &self.resolve(op).await?, &op.namespace)?;
        let pp = &self.post_params();
        // Ok(Some(problem)) is a failure of the filter itself: not retried.
        let result = retry_on_conflict(|| async move {
            let current = api.get(&op.name).await?;
            let before = serde_json::to_value(&current).map_err(kube::Error::SerdeError)?;
            let after = match filter.run(&before) {
                Ok(v @ Value::Object(_)) => v,
                Ok(other) => {
                    return Ok(Some(format!(
                        "jqFilter produced {}, not an object",
                        short(&other)
                    )));
                }
                Err(e) => return Ok(Some(e.to_string())),
            };
            if after == before {
                return Ok(None);
            }
            let update: DynamicObject =
                serde_json::from_value(after).map_err(kube::Error::SerdeError)?;
            match &op.subresource {
                Some(sub) => api.replace_subresource(sub, &op.name, pp, &update).await,
                None => api.replace(&op.name, pp, &update).await,
            }
            .map(|_| None)
        })
        .await;
        match result {
            Ok(Some(problem)) => Err(problem),
            other => self.missing_ok(op, other),
        }
    }
}

impl ObjectPatcher for KubePatcher {
    fn apply(&self, hook: String, text: String) -> BoxFut<'_, Result<(), PortError>> {
        Box::pin(async move {
            self.execute(&text).await.map_err(|e| {
                tracing::warn!(%hook, "object patcher: {e}");
                // Malformed operations fail the same way again; the API server may not.
                let class = match e {
                    PatchError::Failed { .. } => ErrorClass::Transient,
                    _ => ErrorClass::Permanent,
                };
                PortError::new(class, e.to_string())
            })
        })
    }
}

/// Runs a read-modify-write again when it meets `409 Conflict`, with a short backoff.
async fn retry_on_conflict<T, F, Fut>(mut attempt: F) -> kube::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    let mut pause = Duration::from_millis(10);
    let mut left = CONFLICT_ATTEMPTS;
    loop {
        match attempt().await {
            Err(e) if is_conflict(&e) && left > 1 => {
                left -= 1;
                tokio::time::sleep(pause).await;
                pause *= 5;
            }
            other => return other,
        }
    }
}

fn status(e: &kube::Error) -> Option<&kube::core::Status> {
    match e {
        kube::Error::Api(s) => Some(s),
        _ => None,
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    status(e).is_some_and(|s| s.code == 404)
}

fn is_already_exists(e: &kube::Error) -> bool {
    status(e).is_some_and(|s| s.reason == "AlreadyExists")
}

fn is_conflict(e: &kube::Error) -> bool {
    status(e).is_some_and(|s| s.reason == "Conflict" || (s.code == 409 && s.reason.is_empty()))
}

/// The API server's message with code and reason, or the client error.
fn api_error(e: &kube::Error) -> String {
    match status(e) {
        Some(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        None => e.to_string(),
    }
}

/// A value quoted briefly for messages.
fn short(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 80 {
        format!("{}…", text.chars().take(80).collect::<String>())
    } else {
        text
    }
}

/// The nine operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OperationKind {
    Create,
    CreateIfNotExists,
    CreateOrUpdate,
    Delete,
    DeleteInBackground,
    DeleteNonCascading,
    JqPatch,
    MergePatch,
    JsonPatch,
}

impl OperationKind {
    const ALL: [OperationKind; 9] = [
        OperationKind::Create,
        OperationKind::CreateIfNotExists,
        OperationKind::CreateOrUpdate,
        OperationKind::Delete,
        OperationKind::DeleteInBackground,
        OperationKind::DeleteNonCascading,
        OperationKind::JqPatch,
        OperationKind::MergePatch,
        OperationKind::JsonPatch,
    ];

    fn name(self) -> &'static str {
        match self {
            OperationKind::Create => "Create",
            OperationKind::CreateIfNotExists => "CreateIfNotExists",
            OperationKind::CreateOrUpdate => "CreateOrUpdate",
            OperationKind::Delete => "Delete",
            OperationKind::DeleteInBackground => "DeleteInBackground",
            OperationKind::DeleteNonCascading => "DeleteNonCascading",
            OperationKind::JqPatch => "JQPatch",
            OperationKind::MergePatch => "MergePatch",
            OperationKind::JsonPatch => "JSONPatch",
        }
    }

    fn parse(s: &str) -> Option<OperationKind> {
        OperationKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CreateMode {
    Create,
    IfNotExists,
    OrUpdate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DeleteMode {
    Foreground,
    Background,
    Orphan,
}

/// What an operation does, with its payload checked.
#[derive(Debug)]
enum Action {
    Create { object: Value, mode: CreateMode },
    Delete(DeleteMode),
    JqPatch(JqFilter),
    MergePatch(Value),
    JsonPatch(json_patch::Patch),
}

/// A validated operation. For the Create operations `api_version`, `kind`, `namespace`
/// and `name` come from the object.
#[derive(Debug)]
struct Operation {
    index: usize,
    /// `Operation Kind namespace/name` for messages.
    target: String,
    api_version: Option<String>,
    kind: String,
    namespace: String,
    name: String,
    subresource: Option<String>,
    ignore_missing: bool,
    action: Action,
}

impl Operation {
    fn is_create(&self) -> bool {
        matches!(self.action, Action::Create { .. })
    }

    fn target(&self) -> String {
        self.target.clone()
    }
}

fn describe(op: &str, kind: &str, namespace: &str, name: &str) -> String {
    let kind = if kind.is_empty() { "?" } else { kind };
    let name = if name.is_empty() { "?" } else { name };
    if namespace.is_empty() {
        format!("{op} {kind} {name}")
    } else {
        format!("{op} {kind} {namespace}/{name}")
    }
}

/// Parses and validates the operations in `text` without executing any: how many there
/// are, or the error [`KubePatcher::execute`] gives before it touches the cluster.
pub fn check_operations(text: &str) -> Result<usize, PatchError> {
    parse(text).map(|ops| ops.len())
}

/// Splits the text into documents (JSON stream first, else YAML) and validates each.
fn parse(text: &str) -> Result<Vec<Operation>, PatchError> {
    let docs = documents(text)?;
    let mut ops = Vec::new();
    let mut invalid = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        match validate(i + 1, doc) {
            Ok(op) => ops.push(op),
            Err(e) => invalid.push(e),
        }
    }
    if invalid.is_empty() {
        Ok(ops)
    } else {
        Err(PatchError::Invalid(invalid))
    }
}

fn documents(text: &str) -> Result<Vec<Value>, PatchError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let json = serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .collect::<Result<Vec<Value>, _>>();
    match json {
        Ok(docs) => Ok(docs),
        Err(json_err) => match serde_saphyr::from_multiple::<Value>(text) {
            Ok(docs) => Ok(docs.into_iter().filter(|d| !d.is_null()).collect()),
            Err(yaml_err) => Err(PatchError::Parse {
                json: json_err.to_string(),
                yaml: yaml_err.to_string(),
            }),
        },
    }
}

/// Reads the fields of one operation, collecting every problem.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    problems: Vec<String>,
}

impl<'a> Fields<'a> {
    /// An optional string field; null counts as absent.
    fn string(&mut self, name: &str) -> Option<&'a str> {
        match self.map.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                self.problems.push(format!(
                    "field {name:?} must be a string, not {}",
                    type_name(other)
                ));
                None
            }
        }
    }

    /// A string field that must be present and non-empty.
    fn required_string(&mut self, name: &str) -> &'a str {
        match self.string(name) {
            Some(s) if !s.is_empty() => s,
            Some(_) => {
                self.problems.push(format!("field {name:?} is empty"));
                ""
            }
            None if self.map.get(name).is_some_and(|v| !v.is_null()) => "",
            None => {
                self.problems.push(format!("field {name:?} is required"));
                ""
            }
        }
    }

    fn boolean(&mut self, name: &str) -> bool {
        match self.map.get(name) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.problems.push(format!(
                    "field {name:?} must be a boolean, not {}",
                    type_name(other)
                ));
                false
            }
        }
    }

    /// A field holding a map, or a JSON/YAML string of one.
    fn map_or_text(&mut self, name: &str) -> Option<Value> {
        let v = self.present(name)?;
        match v {
            Value::Object(_) => Some(v.clone()),
            Value::String(s) => match decode_text(s) {
                Ok(parsed @ Value::Object(_)) => Some(parsed),
                Ok(other) => {
                    self.problems.push(format!(
                        "field {name:?} must hold a map, but its text is {}",
                        type_name(&other)
                    ));
                    None
                }
                Err(e) => {
                    self.problems
                        .push(format!("field {name:?} is neither JSON nor YAML: {e}"));
                    None
                }
            },
            other => {
                self.problems.push(format!(
                    "field {name:?} must be a map or a JSON/YAML string, not {}",
                    type_name(other)
                ));
                None
            }
        }
    }

    /// A required field, or a problem.
    fn present(&mut self, name: &str) -> Option<&'a Value> {
        match self.map.get(name) {
            None | Some(Value::Null) => {
                self.problems.push(format!("field {name:?} is required"));
                None
            }
            Some(v) => Some(v),
        }
    }
}

/// JSON first, else YAML.
fn decode_text(s: &str) -> Result<Value, String> {
    serde_json::from_str(s).or_else(|json| {
        serde_saphyr::from_str::<Value>(s).map_err(|yaml| format!("JSON: {json}; YAML: {yaml}"))
    })
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a map",
    }
}

fn validate(index: usize, doc: &Value) -> Result<Operation, OperationError> {
    let Value::Object(map) = doc else {
        return Err(OperationError {
            index,
            target: "?".into(),
            problem: format!("an operation must be a map, not {}", type_name(doc)),
        });
    };
    let mut f = Fields {
        map,
        problems: Vec::new(),
    };
    for key in map.keys() {
        if !FIELDS.contains(&key.as_str()) {
            f.problems.push(format!("unknown field {key:?}"));
        }
    }
    let op_name = f.required_string("operation");
    let kind_of_op = OperationKind::parse(op_name);
    if kind_of_op.is_none() && !op_name.is_empty() {
        let names: Vec<&str> = OperationKind::ALL.iter().map(|k| k.name()).collect();
        f.problems.push(format!(
            "unknown operation {op_name:?} (expected one of {})",
            names.join(", ")
        ));
    }
    let mut api_version = f.string("apiVersion").map(str::to_string);
    let mut namespace = f.string("namespace").unwrap_or_default().to_string();
    let subresource = f
        .string("subresource")
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let ignore_missing = f.boolean("ignoreMissingObject");
    f.boolean("ignoreHookError");

    // Read leniently first, so even an operation with problems is named in messages.
    let loose = |field: &str| map.get(field).and_then(Value::as_str).unwrap_or_default();
    let mut kind = loose("kind").to_string();
    let mut name = loose("name").to_string();
    // The name in messages: `generateName*` when the object has only that.
    let mut shown_name = String::new();
    let action = match kind_of_op {
        None => None,
        Some(
            k @ (OperationKind::Create
            | OperationKind::CreateIfNotExists
            | OperationKind::CreateOrUpdate),
        ) => {
            let mode = match k {
                OperationKind::CreateIfNotExists => CreateMode::IfNotExists,
                OperationKind::CreateOrUpdate => CreateMode::OrUpdate,
                _ => CreateMode::Create,
            };
            f.map_or_text("object").and_then(|object| {
                let meta = &object["metadata"];
                kind = object["kind"].as_str().unwrap_or_default().to_string();
                name = meta["name"].as_str().unwrap_or_default().to_string();
                if name.is_empty()
                    && let Some(g) = meta["generateName"].as_str().filter(|g| !g.is_empty())
                {
                    shown_name = format!("{g}*");
                }
                if let Some(ns) = meta["namespace"].as_str().filter(|s| !s.is_empty()) {
                    namespace = ns.to_string();
                }
                api_version = object["apiVersion"].as_str().map(str::to_string);
                let before = f.problems.len();
                if kind.is_empty() {
                    f.problems.push("object.kind is required".into());
                }
                if name.is_empty() && shown_name.is_empty() {
                    f.problems
                        .push("object.metadata.name (or generateName) is required".into());
                }
                if let Err(e) = serde_json::from_value::<DynamicObject>(object.clone()) {
                    f.problems.push(format!("object is malformed: {e}"));
                }
                (f.problems.len() == before).then_some(Action::Create { object, mode })
            })
        }
        Some(
            k @ (OperationKind::Delete
            | OperationKind::DeleteInBackground
            | OperationKind::DeleteNonCascading),
        ) => {
            kind = f.required_string("kind").to_string();
            name = f.required_string("name").to_string();
            if subresource.is_some() {
                f.problems
                    .push(format!("field \"subresource\" is not supported by {k}"));
            }
            Some(Action::Delete(match k {
                OperationKind::DeleteInBackground => DeleteMode::Background,
                OperationKind::DeleteNonCascading => DeleteMode::Orphan,
                _ => DeleteMode::Foreground,
            }))
        }
        Some(k) => {
            kind = f.required_string("kind").to_string();
            name = f.required_string("name").to_string();
            match k {
                OperationKind::JqPatch => {
                    let program = f.required_string("jqFilter");
                    if program.is_empty() {
                        None
                    } else {
                        match JqFilter::compile(program) {
                            Ok(filter) => Some(Action::JqPatch(filter)),
                            Err(e) => {
                                f.problems.push(format!("field \"jqFilter\": {e}"));
                                None
                            }
                        }
                    }
                }
                OperationKind::MergePatch => f.map_or_text("mergePatch").map(Action::MergePatch),
                _ => json_patch_field(&mut f).map(Action::JsonPatch),
            }
        }
    };
    let target = describe(
        kind_of_op.map_or(if op_name.is_empty() { "?" } else { op_name }, |k| k.name()),
        &kind,
        &namespace,
        if name.is_empty() { &shown_name } else { &name },
    );
    match (action, kind_of_op) {
        (Some(action), Some(_)) if f.problems.is_empty() => Ok(Operation {
            index,
            target,
            api_version: api_version.filter(|v| !v.is_empty()),
            kind,
            namespace,
            name,
            subresource,
            ignore_missing,
            action,
        }),
        _ => Err(OperationError {
            index,
            target,
            problem: f.problems.join("; "),
        }),
    }
}

/// `jsonPatch`: an array of RFC 6902 operations, or a JSON/YAML string of one.
fn json_patch_field(f: &mut Fields<'_>) -> Option<json_patch::Patch> {
    let v = f.present("jsonPatch")?;
    let array = match v {
        Value::Array(_) => v.clone(),
        Value::String(s) => match decode_text(s) {
            Ok(parsed @ Value::Array(_)) => parsed,
            Ok(other) => {
                f.problems.push(format!(
                    "field \"jsonPatch\" must hold an array, but its text is {}",
                    type_name(&other)
                ));
                return None;
            }
            Err(e) => {
                f.problems
                    .push(format!("field \"jsonPatch\" is neither JSON nor YAML: {e}"));
                return None;
            }
        },
        other => {
            f.problems.push(format!(
                "field \"jsonPatch\" must be an array or a JSON/YAML string, not {}",
                type_name(other)
            ));
            return None;
        }
    };
    match serde_json::from_value::<json_patch::Patch>(array) {
        Ok(p) => Some(p),
        Err(e) => {
            f.problems
                .push(format!("field \"jsonPatch\" is not a JSON patch: {e}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(text: &str) -> Vec<OperationError> {
        match parse(text) {
            Err(PatchError::Invalid(errs)) => errs,
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn empty_text_is_no_operation() {
        assert!(parse("").expect("empty").is_empty());
        assert!(parse("  \n").expect("blank").is_empty());
        assert!(parse("---\n").expect("empty yaml").is_empty());
    }

    #[test]
    fn json_stream_and_yaml_give_the_same_operations() {
        let json = r#"{"operation":"CreateOrUpdate","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"d"},"data":{}}}
{"operation":"MergePatch","kind":"Deployment","namespace":"default","name":"nginx","mergePatch":{"spec":{"replicas":1}},"ignoreMissingObject":true}
{"operation":"JSONPatch","kind":"Deployment","namespace":"default","name":"nginx","jsonPatch":[{"op":"replace","path":"/spec/replicas","value":1}]}
{"operation":"Delete","kind":"Pod","namespace":"default","name":"nginx"}"#;
        let yaml = r#"
operation: CreateOrUpdate
object:
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: x, namespace: d}
  data: {}
---
operation: MergePatch
kind: Deployment
namespace: default
name: nginx
mergePatch: |
  spec:
    replicas: 1
ignoreMissingObject: true
---
operation: JSONPatch
kind: Deployment
namespace: default
name: nginx
jsonPatch: '[{"op":"replace","path":"/spec/replicas","value":1}]'
---
operation: Delete
kind: Pod
namespace: default
name: nginx
"#;
        for text in [json, yaml] {
            let ops = parse(text).expect("valid");
            let targets: Vec<String> = ops.iter().map(Operation::target).collect();
            assert_eq!(
                targets,
                [
                    "CreateOrUpdate ConfigMap d/x",
                    "MergePatch Deployment default/nginx",
                    "JSONPatch Deployment default/nginx",
                    "Delete Pod default/nginx"
                ]
            );
            assert!(ops[1].ignore_missing);
            let Action::MergePatch(p) = &ops[1].action else {
                panic!("merge patch");
            };
            assert_eq!(p["spec"]["replicas"], 1);
        }
    }

    #[test]
    fn problems_name_the_operation() {
        let errs = invalid(
            r#"{"operation":"Delete","kind":"Pod","namespace":"default","name":"a"}
{"operation":"MergePatch","kind":"Deployment","namespace":"default","name":"nginx"}
{"operation":"Frobnicate","kind":"Pod","name":"b"}
{"operation":"Delete","kind":"Pod","nmae":"c"}
{"kind":"Pod","name":"d"}
{"operation":"JQPatch","kind":"Pod","namespace":"x","name":"e","jqFilter":".a |"}
{"operation":"JSONPatch","kind":"Pod","name":"f","jsonPatch":[{"op":"frob","path":"/a"}]}
{"operation":"Create","object":{"kind":"Pod","metadata":{}}}
[1]"#,
        );
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            text[0],
            "operation 2 (MergePatch Deployment default/nginx): field \"mergePatch\" is required"
        );
        assert!(
            text[1].starts_with("operation 3 (Frobnicate Pod b): unknown operation \"Frobnicate\""),
            "{}",
            text[1]
        );
        assert_eq!(
            text[2],
            "operation 4 (Delete Pod ?): unknown field \"nmae\"; field \"name\" is required"
        );
        assert_eq!(
            text[3],
            "operation 5 (? Pod d): field \"operation\" is required"
        );
        assert!(
            text[4]
                .contains("operation 6 (JQPatch Pod x/e): field \"jqFilter\": invalid jq program"),
            "{}",
            text[4]
        );
        assert!(
            text[5]
                .contains("operation 7 (JSONPatch Pod f): field \"jsonPatch\" is not a JSON patch"),
            "{}",
            text[5]
        );
        assert_eq!(
            text[6],
            "operation 8 (Create Pod ?): object.metadata.name (or generateName) is required"
        );
        assert_eq!(
            text[7],
            "operation 9 (?): an operation must be a map, not an array"
        );
        assert_eq!(errs.len(), 8);
    }

    #[test]
    fn wrong_types_are_reported() {
        let errs = invalid(
            r#"{"operation":"MergePatch","kind":"Pod","namespace":"d","name":"a","mergePatch":[1],"ignoreMissingObject":"yes"}"#,
        );
        assert_eq!(
            errs[0].problem,
            "field \"ignoreMissingObject\" must be a boolean, not a string; field \"mergePatch\" must be a map or a JSON/YAML string, not an array"
        );
        let errs = invalid(
            r#"{"operation":"Delete","kind":"Pod","namespace":"d","name":"a","subresource":"status"}"#,
        );
        assert_eq!(
            errs[0].problem,
            "field \"subresource\" is not supported by Delete"
        );
    }

    #[test]
    fn object_as_string_and_generate_name() {
        let ops = parse(
            r#"{"operation":"Create","object":"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"generateName\":\"cm-\",\"namespace\":\"d\"}}"}"#,
        )
        .expect("valid");
        assert_eq!(ops[0].target(), "Create ConfigMap d/cm-*");
        assert_eq!(ops[0].api_version.as_deref(), Some("v1"));
    }

    #[test]
    fn neither_json_nor_yaml() {
        let err = parse("{\"operation\": \"Create\"\n: : :\n  - [").expect_err("malformed");
        assert!(
            matches!(err, PatchError::Parse { .. }),
            "unexpected {err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("cannot parse the object patcher operations")
        );
    }
}
