//! API errors and their wire form: `meta.k8s.io/v1` `Status` objects.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An error answered to a client as a `Status` object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Kubernetes `StatusReason` (`NotFound`, `Conflict`…).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` of the Status (name, group, kind, causes).
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized, saying what was wrong with the credentials.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "Unauthorized", message)
    }

    /// 403 Forbidden.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 404 NotFound for a named object of a resource.
    pub fn not_found(plural: &str, group: &str, name: &str) -> Self {
        let what = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        Self::new(404, "NotFound", format!("{what} \"{name}\" not found"))
            .with_details(details(name, group, plural))
    }

    /// 404 for a resource the server does not serve (in a group and version it serves),
    /// worded as kube-apiserver words it; `what` goes to the log only.
    pub fn no_route(what: &str) -> Self {
        tracing::debug!(%what, "sandbox: no such resource");
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str, what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource: {method} {what}"
            ),
        )
    }

    /// 409 AlreadyExists.
    pub fn already_exists(plural: &str, group: &str, name: &str) -> Self {
        let what = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        Self::new(
            409,
            "AlreadyExists",
            format!("{what} \"{name}\" already exists"),
        )
        .with_details(details(name, group, plural))
    }

    /// 409 Conflict for a stale resourceVersion or failed precondition.
    pub fn conflict(plural: &str, group: &str, name: &str, why: &str) -> Self {
        let what = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {what} \"{name}\": {why}"),
        )
        .with_details(details(name, group, plural))
    }

    /// 410 Gone for a compacted resourceVersion.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 422 Invalid, with one cause per field, of a kind of the core group.
    pub fn invalid(kind: &str, name: &str, causes: &[(&str, String)]) -> Self {
        Self::invalid_in("", kind, name, causes)
    }

    /// 422 Invalid, with one cause per field, as kube-apiserver words it: the kind
    /// qualified by its group (`Gizmo.example.com "x" is invalid: …`), several causes in
    /// brackets, and each cause's reason read from its message (`Required value` is
    /// `FieldValueRequired`, …).
    pub fn invalid_in(group: &str, kind: &str, name: &str, causes: &[(&str, String)]) -> Self {
        let text: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let listed = match text.as_slice() {
            [one] => one.clone(),
            all => format!("[{}]", all.join(", ")),
        };
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|(f, m)| json!({"reason": cause_reason(m), "message": m, "field": f}))
            .collect();
        let mut details = json!({"kind": kind, "causes": causes});
        if !name.is_empty() {
            details["name"] = json!(name);
        }
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {listed}"),
        )
        .with_details(details)
    }

    /// 409 Conflict of a server-side apply: one `FieldManagerConflict` cause per field.
    pub fn apply_conflict(message: String, causes: &[(String, String)]) -> Self {
        let causes: Vec<Value> = causes
            .iter()
            .map(|(field, manager)| {
                json!({"reason": "FieldManagerConflict", "message": format!("conflict with {manager}"), "field": field})
            })
            .collect();
        Self::new(409, "Conflict", message).with_details(json!({"causes": causes}))
    }

    /// 429 TooManyRequests.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// Adds `details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

impl From<sled::Error> for ApiError {
    fn from(err: sled::Error) -> Self {
        ApiError::internal(format!("storage: {err}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        (code, [("content-type", "application/json")], body).into_response()
    }
}

/// `details` naming an object: the group only when there is one, as kube-apiserver
/// leaves an empty one out.
fn details(name: &str, group: &str, plural: &str) -> Value {
    let mut d = json!({"name": name, "kind": plural});
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

/// The `reason` of a field's cause, from how its message starts (the wording of
/// kube-apiserver's field errors).
fn cause_reason(message: &str) -> &'static str {
    const REASONS: &[(&str, &str)] = &[
        ("Required value", "FieldValueRequired"),
        ("Forbidden", "FieldValueForbidden"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Not found", "FieldValueNotFound"),
    ];
    if let Some((_, reason)) = REASONS.iter().find(|(p, _)| message.starts_with(p)) {
        return reason;
    }
    if message.contains(" in body must be of type ") {
        return "FieldValueTypeInvalid";
    }
    "FieldValueInvalid"
}

/// A successful `Status` (as answered by some deletes).
pub(crate) fn success_status(details: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}
