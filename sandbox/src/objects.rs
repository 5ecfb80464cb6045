//! Object semantics applied under the store lock: create, replace, delete with
//! finalizers and propagation, and the names, generation and status rules of
//! kube-apiserver.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::resources::ResourceInfo;
use super::status::ApiError;
use super::store::{Inner, ResKey};

/// Finalizer kube-apiserver adds for foreground deletion.
pub(crate) const FOREGROUND: &str = "foregroundDeletion";
/// Finalizer kube-apiserver adds for orphaning deletion.
pub(crate) const ORPHAN: &str = "orphan";

/// The current time as RFC 3339 with seconds, as Kubernetes writes it.
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Built-in resources whose objects carry `metadata.generation`.
const GENERATION_TRACKED: &[&str] = &[
    "pods",
    "deployments",
    "statefulsets",
    "daemonsets",
    "replicasets",
    "jobs",
    "cronjobs",
    "ingresses",
    "networkpolicies",
    "poddisruptionbudgets",
    "horizontalpodautoscalers",
    "customresourcedefinitions",
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
];

fn is_builtin(info: &ResourceInfo) -> bool {
    super::resources::builtin_resources()
        .iter()
        .any(|b| b.group == info.group && b.plural == info.plural)
}

fn tracks_generation(info: &ResourceInfo) -> bool {
    !is_builtin(info) || GENERATION_TRACKED.contains(&info.plural.as_str())
}

/// Who writes: `fieldManager`, else the user agent's product name.
#[derive(Clone, Debug)]
pub struct Writer {
    /// Field manager name.
    pub manager: String,
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// managedFields operation: `Update`, or `Apply` (whose fields the apply logic records).
    pub operation: &'static str,
}

fn meta_mut(obj: &mut Value) -> Result<&mut Map<String, Value>, ApiError> {
    let map = obj
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the body must be a JSON object"))?;
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    meta.as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Kubernetes' `IsDNS1123Subdomain`: at most 253 characters in all, dot-separated parts
/// of lowercase alphanumerics and '-' that start and end alphanumeric (a part may be
/// longer than a label's 63 characters).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// Validates an object name for a resource; returns the reason when invalid.
pub(crate) fn name_problem(info: &ResourceInfo, name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("Required value: name or generateName is required".into());
    }
    if info.group == "rbac.authorization.k8s.io" {
        // RBAC names are only path segments (they may contain ':').
        if name == "." || name == ".." || name.contains('/') || name.contains('%') {
            return Some(format!(
                "Invalid value: \"{name}\": may not contain '/' or '%' and may not be '.' or '..'"
            ));
        }
        return None;
    }
    if info.plural == "services" && info.group.is_empty() && name.contains('.') {
        return Some(format!("Invalid value: \"{name}\": must not contain dots"));
    }
    if info.plural == "namespaces" || info.plural == "services" {
        if !is_dns_label(name) {
            return Some(format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ));
        }
        return None;
    }
    if name.len() > 253 {
        return Some(format!(
            "Invalid value: \"{name}\": must be no more than 253 characters"
        ));
    }
    if !is_dns_subdomain(name) {
        return Some(format!(
            "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        ));
    }
    None
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Checks `apiVersion`/`kind` of a body against the endpoint and fills them in when absent.
pub(crate) fn check_type(info: &ResourceInfo, obj: &mut Value) -> Result<(), ApiError> {
    let map = obj
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the body must be a JSON object"))?;
    let want_av = info.api_version();
    match map.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("apiVersion".into(), json!(want_av));
        }
        Some(av) if av == want_av => {}
        Some(av) => {
            // Another served version of the same group is acceptable; anything else is not.
            let group_of = |s: &str| {
                s.rsplit_once('/')
                    .map(|(g, _)| g.to_string())
                    .unwrap_or_default()
            };
            if group_of(av) != info.group {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({want_av})"
                )));
            }
            map.insert("apiVersion".into(), json!(want_av));
        }
    }
    match map.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("kind".into(), json!(info.kind));
        }
        Some(k) if k == info.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({}) of {}",
                info.kind, info.plural
            )));
        }
    }
    check_string_maps(info, obj)?;
    check_labels(info, obj)?;
    check_embedded(info, obj)
}

/// Objects a CRD embeds (`x-kubernetes-embedded-resource`) name their `apiVersion` and
/// `kind`, as kube-apiserver requires (422).
fn check_embedded(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    fn visit(v: &Value, path: &[String], at: String, causes: &mut Vec<(String, String)>) {
        let Some((step, rest)) = path.split_first() else {
            if v.is_object() {
                for field in ["apiVersion", "kind"] {
                    if v[field].as_str().is_none_or(str::is_empty) {
                        causes.push((format!("{at}.{field}"), "Required value".into()));
                    }
                }
            }
            return;
        };
        match step.as_str() {
            "[]" => {
                for (i, item) in v.as_array().into_iter().flatten().enumerate() {
                    visit(item, rest, format!("{at}[{i}]"), causes);
                }
            }
            "{}" => {
                for (k, item) in v.as_object().into_iter().flatten() {
                    visit(item, rest, format!("{at}[{k}]"), causes);
                }
            }
            name => {
                if let Some(next) = v.get(name) {
                    let at = if at.is_empty() {
                        name.to_string()
                    } else {
                        format!("{at}.{name}")
                    };
                    visit(next, rest, at, causes);
                }
            }
        }
    }
    let mut causes = Vec::new();
    for path in &info.embedded {
        visit(obj, path, String::new(), &mut causes);
    }
    if causes.is_empty() {
        return Ok(());
    }
    let causes: Vec<(&str, String)> = causes
        .iter()
        .map(|(f, m)| (f.as_str(), m.clone()))
        .collect();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    Err(ApiError::invalid_in(&info.group, &info.kind, name, &causes))
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?` of at most 63 characters: a label value
/// (or empty), and the name part of a qualified key.
fn is_label_text(s: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric();
    s.len() <= 63
        && s.bytes()
            .all(|b| ok(b) || b == b'-' || b == b'_' || b == b'.')
        && s.bytes().next().is_some_and(ok)
        && s.bytes().last().is_some_and(ok)
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain.
fn key_problem(key: &str) -> Option<String> {
    if key.matches('/').count() > 1 {
        return Some(format!(
            "Invalid value: \"{key}\": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
    }
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && (p.is_empty() || !is_dns_subdomain(p))
    {
        return Some(format!(
            "Invalid value: \"{key}\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
        ));
    }
    if name.len() > 63 {
        return Some(format!(
            "Invalid value: \"{key}\": name part must be no more than 63 characters"
        ));
    }
    if !is_label_text(name) {
        return Some(format!(
            "Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        ));
    }
    None
}

/// Label keys and values, and annotation keys, as kube-apiserver validates them (422).
fn check_labels(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let mut causes: Vec<(&str, String)> = Vec::new();
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (key, value) in labels {
            if let Some(p) = key_problem(key) {
                causes.push(("metadata.labels", p));
            }
            let value = value.as_str().unwrap_or_default();
            if value.len() > 63 {
                causes.push((
                    "metadata.labels",
                    format!("Invalid value: \"{value}\": must be no more than 63 characters"),
                ));
            } else if !value.is_empty() && !is_label_text(value) {
                causes.push((
                    "metadata.labels",
                    format!(
                        "Invalid value: \"{value}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
                    ),
                ));
            }
        }
    }
    if let Some(annotations) = obj["metadata"]["annotations"].as_object() {
        for key in annotations.keys() {
            if let Some(p) = key_problem(key) {
                causes.push(("metadata.annotations", p));
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    Err(ApiError::invalid_in(&info.group, &info.kind, name, &causes))
}

/// Maps of strings stay maps of strings, as kube-apiserver decodes them into Go's
/// `map[string]string`: labels and annotations, a ConfigMap's `data` and `binaryData`, a
/// Secret's `data` and `stringData`. A number, a boolean, a list or an object is a 400
/// naming the field, as the API server's decoding error does (null reads as "").
fn check_string_maps(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let mut fields: Vec<(&str, &str, &Value)> = vec![
        ("ObjectMeta", "metadata.labels", &obj["metadata"]["labels"]),
        (
            "ObjectMeta",
            "metadata.annotations",
            &obj["metadata"]["annotations"],
        ),
    ];
    if info.group.is_empty() && info.kind == "ConfigMap" {
        fields.push(("ConfigMap", "data", &obj["data"]));
        fields.push(("ConfigMap", "binaryData", &obj["binaryData"]));
    }
    if info.group.is_empty() && info.kind == "Secret" {
        fields.push(("Secret", "data", &obj["data"]));
        fields.push(("Secret", "stringData", &obj["stringData"]));
    }
    for (owner, field, map) in fields {
        let what = |v: &Value| match v {
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            Value::String(_) | Value::Null => "string",
        };
        match map {
            Value::Null => {}
            Value::Object(m) => {
                if let Some((key, v)) = m
                    .iter()
                    .find(|(_, v)| !matches!(v, Value::String(_) | Value::Null))
                {
                    return Err(ApiError::bad_request(format!(
                        "json: cannot unmarshal {} into Go struct field {owner}.{field} of type string (key {key:?})",
                        what(v)
                    )));
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "json: cannot unmarshal {} into Go struct field {owner}.{field} of type map[string]string",
                    what(other)
                )));
            }
        }
    }
    Ok(())
}

fn spec_like(info: &ResourceInfo, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("metadata");
        map.remove("apiVersion");
        map.remove("kind");
        if info.status_subresource {
            map.remove("status");
        }
    }
    v
}

fn without_volatile(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    v
}

/// `managedFields` without their times: who owns what.
fn managers(fields: &Value) -> Vec<Value> {
    fields
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut e = e.clone();
            if let Some(m) = e.as_object_mut() {
                m.remove("time");
            }
            e
        })
        .collect()
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The namespace an object is created in, after checking it against the URL.
fn resolve_namespace(
    info: &ResourceInfo,
    url_ns: Option<&str>,
    obj: &mut Value,
) -> Result<String, ApiError> {
    let meta = meta_mut(obj)?;
    if !info.namespaced {
        meta.remove("namespace");
        return Ok(String::new());
    }
    let body_ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let ns = match url_ns {
        Some(u) if !body_ns.is_empty() && body_ns != u => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        Some(u) => u.to_string(),
        None if !body_ns.is_empty() => body_ns,
        None => {
            return Err(ApiError::bad_request(
                "a namespace is required to create a namespaced object",
            ));
        }
    };
    meta.insert("namespace".into(), json!(ns));
    Ok(ns)
}

/// Creates an object. `body` is the request body already decoded.
pub fn create(
    inner: &mut Inner,
    info: &ResourceInfo,
    url_ns: Option<&str>,
    mut obj: Value,
    writer: &Writer,
) -> Result<Arc<Value>, ApiError> {
    check_type(info, &mut obj)?;
    let ns = resolve_namespace(info, url_ns, &mut obj)?;
    let now = now_rfc3339();
    let res = ResKey::of(info);
    let meta = meta_mut(&mut obj)?;
    let mut name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut generated = false;
    if name.is_empty()
        && let Some(prefix) = meta.get("generateName").and_then(Value::as_str)
    {
        name = format!("{prefix}{}", random_suffix());
        generated = true;
    }
    if let Some(problem) = name_problem(info, &name) {
        return Err(ApiError::invalid_in(
            &info.group,
            &info.kind,
            &name,
            &[("metadata.name", problem)],
        ));
    }
    if info.namespaced {
        match inner.namespace_state(&ns) {
            None => return Err(ApiError::not_found("namespaces", "", &ns)),
            Some(false) => {
                return Err(ApiError::forbidden(format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    info.plural
                )));
            }
            Some(true) => {}
        }
    }
    if inner.get(&res, &ns, &name).is_some() {
        return Err(ApiError::already_exists(&info.plural, &info.group, &name));
    }
    let meta = meta_mut(&mut obj)?;
    meta.insert("name".into(), json!(name));
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(now));
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    if writer.operation != "Apply" {
        meta.remove("managedFields");
    }
    if tracks_generation(info) {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if let Some(map) = obj.as_object_mut()
        && info.status_subresource
        && !is_builtin(info)
    {
        map.remove("status");
    }
    admit_custom(info, &name, &mut obj, Part::Main)?;
    // A namespace whose name is generated gets its name label after the request was
    // read: kube-apiserver does not count it as the creator's field.
    let late_defaults = generated && info.group.is_empty() && info.plural == "namespaces";
    if !late_defaults {
        super::defaults::apply(info, &mut obj);
    }
    if writer.operation != "Apply" {
        super::apply::record_update(
            None,
            &mut obj,
            &writer.manager,
            writer.operation,
            None,
            &now,
        );
    }
    if late_defaults {
        super::defaults::apply(info, &mut obj);
    }
    // What the server itself sets is nobody's field.
    if let Some(map) = obj.as_object_mut()
        && info.plural == "namespaces"
        && info.group.is_empty()
    {
        map.insert("status".into(), json!({"phase": "Active"}));
        let spec = map.entry("spec").or_insert_with(|| json!({}));
        if spec.get("finalizers").is_none() {
            spec["finalizers"] = json!(["kubernetes"]);
        }
    }
    if info.plural == "customresourcedefinitions" {
        crd_status(&mut obj);
    }
    commit_put(inner, &res, obj, writer)
}

/// A custom resource pruned, defaulted and validated with its CRD version's schema.
fn admit_custom(
    info: &ResourceInfo,
    name: &str,
    obj: &mut Value,
    part: Part,
) -> Result<(), ApiError> {
    let Some(schema) = &info.schema else {
        return Ok(());
    };
    let mut problems = super::schema::admit(schema, obj, part == Part::Status);
    if let Some(scale) = &info.scale {
        problems.extend(super::schema::scale_problems(
            obj,
            &scale.status_replicas_path,
        ));
    }
    if problems.is_empty() {
        return Ok(());
    }
    let causes: Vec<(&str, String)> = problems
        .iter()
        .map(|(f, m)| (f.as_str(), m.clone()))
        .collect();
    Err(ApiError::invalid_in(&info.group, &info.kind, name, &causes))
}

fn commit_put(
    inner: &mut Inner,
    res: &ResKey,
    mut obj: Value,
    writer: &Writer,
) -> Result<Arc<Value>, ApiError> {
    if writer.dry_run {
        return Ok(Arc::new(obj));
    }
    let rv = inner.next_rv();
    meta_mut(&mut obj)?.insert("resourceVersion".into(), json!(rv.to_string()));
    inner.put(res, obj, rv)
}

/// The CRD's status as kube-apiserver reports it once it serves the CRD.
fn crd_status(obj: &mut Value) {
    let names = obj["spec"]["names"].clone();
    let stored: Vec<Value> = obj["spec"]["versions"]
        .as_array()
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let now = now_rfc3339();
    obj["status"] = json!({
        "acceptedNames": names,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    });
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The main endpoint: everything but status (for resources with the subresource).
    Main,
    /// The `/status` subresource: only status.
    Status,
}

/// Replaces an existing object with `new` (PUT, or the result of a patch).
pub fn replace(
    inner: &mut Inner,
    info: &ResourceInfo,
    old: &Arc<Value>,
    mut new: Value,
    part: Part,
    writer: &Writer,
) -> Result<Arc<Value>, ApiError> {
    check_type(info, &mut new)?;
    let (ns, name) = super::store::ns_name(old);
    let res = ResKey::of(info);
    {
        let meta = meta_mut(&mut new)?;
        let body_name = meta.get("name").and_then(Value::as_str).unwrap_or_default();
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = meta
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if info.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let current_rv = old["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        if let Some(rv) = meta.get("resourceVersion").and_then(Value::as_str)
            && !rv.is_empty()
            && rv != current_rv
        {
            return Err(ApiError::conflict(
                &info.plural,
                &info.group,
                &name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if let Some(uid) = meta.get("uid").and_then(Value::as_str) {
            let current = old["metadata"]["uid"].as_str().unwrap_or_default();
            if !uid.is_empty() && uid != current {
                return Err(ApiError::conflict(
                    &info.plural,
                    &info.group,
                    &name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {current}"
                    ),
                ));
            }
        }
    }
    // The result starts from the body (main) or from the old object (status).
    let mut result = match part {
        Part::Main => {
            let mut r = new.clone();
            if info.status_subresource {
                match old.get("status") {
                    Some(s) => r["status"] = s.clone(),
                    None => {
                        if let Some(m) = r.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            r
        }
        Part::Status => {
            let mut r = (**old).clone();
            match new.get("status") {
                Some(s) => r["status"] = s.clone(),
                None => {
                    if let Some(m) = r.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            r
        }
    };
    {
        let old_meta = &old["metadata"];
        let meta = meta_mut(&mut result)?;
        meta.insert("name".into(), json!(name));
        if info.namespaced {
            meta.insert("namespace".into(), json!(ns));
        }
        for system in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_meta.get(system) {
                Some(v) => meta.insert(system.into(), v.clone()),
                None => meta.remove(system),
            };
        }
        meta.insert(
            "resourceVersion".into(),
            old_meta["resourceVersion"].clone(),
        );
        if !meta.contains_key("managedFields")
            && let Some(mf) = old_meta.get("managedFields")
        {
            meta.insert("managedFields".into(), mf.clone());
        }
    }
    if info.plural == "customresourcedefinitions" && part == Part::Main {
        crd_status(&mut result);
    }
    admit_custom(info, &name, &mut result, part)?;
    super::defaults::apply(info, &mut result);
    // Terminating objects may only lose finalizers, never gain new ones.
    if !old["metadata"]["deletionTimestamp"].is_null() {
        let before = finalizers(old);
        let added: Vec<String> = finalizers(&result)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            return Err(ApiError::invalid_in(
                &info.group,
                &info.kind,
                &name,
                &[(
                    "metadata.finalizers",
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        added
                            .iter()
                            .map(|f| format!("{f:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )],
            ));
        }
    }
    let same_owners = writer.operation != "Apply"
        || managers(&result["metadata"]["managedFields"])
            == managers(&old["metadata"]["managedFields"]);
    if same_owners && without_volatile(&result) == without_volatile(old) {
        // kube-apiserver does not write (nor bump resourceVersion) for a no-op update.
        return Ok(old.clone());
    }
    let annotations_changed = info.group == "apps"
        && info.plural == "deployments"
        && result["metadata"]["annotations"] != old["metadata"]["annotations"];
    if tracks_generation(info)
        && (spec_like(info, &result) != spec_like(info, old) || annotations_changed)
    {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        meta_mut(&mut result)?.insert("generation".into(), json!(generation));
    }
    let now = now_rfc3339();
    if writer.operation != "Apply" {
        super::apply::record_update(
            Some(old),
            &mut result,
            &writer.manager,
            writer.operation,
            (part == Part::Status).then_some("status"),
            &now,
        );
    }
    if !result["metadata"]["deletionTimestamp"].is_null() && finalizers(&result).is_empty() {
        if writer.dry_run {
            return Ok(Arc::new(result));
        }
        let rv = inner.next_rv();
        meta_mut(&mut result)?.insert("resourceVersion".into(), json!(rv.to_string()));
        // Watchers see it deleted as it was last stored (with its finalizers), as
        // kube-apiserver reports an etcd deletion; the writer is answered the update.
        let mut last = (**old).clone();
        meta_mut(&mut last)?.insert("resourceVersion".into(), json!(rv.to_string()));
        remove_object(inner, &res, last, rv)?;
        return Ok(Arc::new(result));
    }
    commit_put(inner, &res, result, writer)
}

/// `propagationPolicy` of a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are deleted after the owner, in the background.
    Background,
    /// Dependents are deleted first; the owner waits with `foregroundDeletion`.
    Foreground,
    /// Dependents lose their owner reference and stay.
    Orphan,
}

impl Propagation {
    /// Parses the wire value.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        match s {
            "Background" => Ok(Self::Background),
            "Foreground" => Ok(Self::Foreground),
            "Orphan" => Ok(Self::Orphan),
            other => Err(ApiError::invalid_in(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                &[(
                    "propagationPolicy",
                    format!(
                        "Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                    ),
                )],
            )),
        }
    }
}

/// Deletes an object: marks it terminating while finalizers remain, otherwise removes it.
/// Returns the object as last seen and whether it is gone.
pub fn delete(
    inner: &mut Inner,
    res: &ResKey,
    obj: &Arc<Value>,
    propagation: Propagation,
    dry_run: bool,
) -> Result<(Arc<Value>, bool), ApiError> {
    let mut o = (**obj).clone();
    let mut fins = finalizers(&o);
    let first = o["metadata"]["deletionTimestamp"].is_null();
    if first {
        match propagation {
            Propagation::Foreground if !fins.iter().any(|f| f == FOREGROUND) => {
                fins.push(FOREGROUND.into())
            }
            Propagation::Orphan if !fins.iter().any(|f| f == ORPHAN) => fins.push(ORPHAN.into()),
            _ => {}
        }
    }
    let is_namespace = res.group.is_empty() && res.plural == "namespaces";
    if fins.is_empty() && !is_namespace {
        if dry_run {
            return Ok((obj.clone(), true));
        }
        let rv = inner.next_rv();
        meta_mut(&mut o)?.insert("resourceVersion".into(), json!(rv.to_string()));
        return Ok((remove_object(inner, res, o, rv)?, true));
    }
    if !first {
        return Ok((obj.clone(), false));
    }
    let meta = meta_mut(&mut o)?;
    meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    if !fins.is_empty() {
        meta.insert("finalizers".into(), json!(fins));
    }
    if is_namespace {
        o["status"] = json!({"phase": "Terminating"});
    }
    if dry_run {
        return Ok((Arc::new(o), false));
    }
    let rv = inner.next_rv();
    meta_mut(&mut o)?.insert("resourceVersion".into(), json!(rv.to_string()));
    Ok((inner.put(res, o, rv)?, false))
}

/// Removes an object for good; a CRD takes its custom resources with it.
fn remove_object(
    inner: &mut Inner,
    res: &ResKey,
    last: Value,
    rv: u64,
) -> Result<Arc<Value>, ApiError> {
    if res.group == "apiextensions.k8s.io" && res.plural == "customresourcedefinitions" {
        let cr = ResKey {
            group: last["spec"]["group"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            plural: last["spec"]["names"]["plural"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        };
        for obj in inner.list(&cr, None) {
            let mut o = (*obj).clone();
            let crv = inner.next_rv();
            meta_mut(&mut o)?.insert("resourceVersion".into(), json!(crv.to_string()));
            inner.remove(&cr, o, crv)?;
        }
        let crd_rv = inner.next_rv();
        let mut last = last;
        meta_mut(&mut last)?.insert("resourceVersion".into(), json!(crd_rv.to_string()));
        return inner.remove(res, last, crd_rv);
    }
    inner.remove(res, last, rv)
}

/// Drops one finalizer from a terminating object (removing the object when none remain).
pub(crate) fn drop_finalizer(
    inner: &mut Inner,
    res: &ResKey,
    obj: &Arc<Value>,
    finalizer: &str,
) -> Result<(), ApiError> {
    let mut o = (**obj).clone();
    let fins: Vec<String> = finalizers(&o)
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    let rv = inner.next_rv();
    let meta = meta_mut(&mut o)?;
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    if fins.is_empty() {
        meta.remove("finalizers");
        let is_namespace = res.group.is_empty() && res.plural == "namespaces";
        if !is_namespace || !o["metadata"]["deletionTimestamp"].is_null() {
            remove_object(inner, res, o, rv)?;
            return Ok(());
        }
    } else {
        meta.insert("finalizers".into(), json!(fins));
    }
    inner.put(res, o, rv)?;
    Ok(())
}

/// Removes a terminating namespace whose content is gone (no finalizers left on it).
pub(crate) fn remove_namespace(inner: &mut Inner, obj: &Arc<Value>) -> Result<(), ApiError> {
    let res = ResKey {
        group: String::new(),
        plural: "namespaces".into(),
    };
    let mut o = (**obj).clone();
    let rv = inner.next_rv();
    meta_mut(&mut o)?.insert("resourceVersion".into(), json!(rv.to_string()));
    inner.remove(&res, o, rv)?;
    Ok(())
}

/// Rewrites an object with new owner references (used by orphaning).
pub(crate) fn set_owner_references(
    inner: &mut Inner,
    res: &ResKey,
    obj: &Arc<Value>,
    refs: Vec<Value>,
) -> Result<(), ApiError> {
    let mut o = (**obj).clone();
    let rv = inner.next_rv();
    let meta = meta_mut(&mut o)?;
    if refs.is_empty() {
        meta.remove("ownerReferences");
    } else {
        meta.insert("ownerReferences".into(), json!(refs));
    }
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    inner.put(res, o, rv)?;
    Ok(())
}

/// Returns a stored object in the requested version's shape.
pub fn present(obj: &Arc<Value>, info: &ResourceInfo) -> Arc<Value> {
    let want = info.api_version();
    if obj["apiVersion"].as_str() == Some(want.as_str()) {
        return obj.clone();
    }
    let mut o = (**obj).clone();
    o["apiVersion"] = json!(want);
    Arc::new(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc1123() {
        let cm = super::super::resources::builtin_resources()
            .into_iter()
            .find(|r| r.plural == "configmaps")
            .unwrap();
        assert!(name_problem(&cm, "a.b-c").is_none());
        assert!(name_problem(&cm, "Upper").is_some());
        assert!(name_problem(&cm, "-x").is_some());
        assert!(name_problem(&cm, &"a".repeat(254)).is_some());
        let longest = format!(
            "{}{}",
            format!("{}.", "a".repeat(63)).repeat(3),
            "a".repeat(61)
        );
        assert_eq!(longest.len(), 253);
        assert!(name_problem(&cm, &longest).is_none());
        // Labels and annotation keys as kube-apiserver checks them.
        let labelled = |labels: Value| {
            let mut o = json!({"metadata": {"name": "x", "labels": labels}});
            check_type(&cm, &mut o)
        };
        assert!(
            labelled(json!({"app": "web", "example.com/tier": "", "a_b.c": "X-1_y.z"})).is_ok()
        );
        let e = labelled(json!({"app": "v".repeat(64)})).expect_err("too long");
        assert_eq!(e.code, 422);
        assert!(
            e.message.contains("must be no more than 63 characters"),
            "{}",
            e.message
        );
        assert!(labelled(json!({"app": "-web"})).is_err());
        assert!(labelled(json!({"Bad Key": "v"})).is_err());
        assert!(labelled(json!({"Example.com/x": "v"})).is_err());
        assert!(labelled(json!({"/x": "v"})).is_err());
        let role = super::super::resources::builtin_resources()
            .into_iter()
            .find(|r| r.plural == "roles")
            .unwrap();
        assert!(name_problem(&role, "system:controller:x").is_none());
    }
}
