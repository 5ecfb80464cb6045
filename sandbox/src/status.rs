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
            .with_details(json!({"name": name, "group": group, "kind": plural}))
    }

    /// 404 for a path the server does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
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
        .with_details(json!({"name": name, "group": group, "kind": plural}))
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
        .with_details(json!({"name": name, "group": group, "kind": plural}))
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

    /// 422 Invalid, with one cause per field.
    pub fn invalid(kind: &str, name: &str, causes: &[(&str, String)]) -> Self {
        let text: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let causes: Vec<Value> = causes
            .iter()
            .map(|(f, m)| json!({"reason": "FieldValueInvalid", "message": m, "field": f}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {}", text.join(", ")),
        )
        .with_details(json!({"name": name, "kind": kind, "causes": causes}))
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

/// A successful `Status` (as answered by some deletes).
pub fn success_status(details: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}
