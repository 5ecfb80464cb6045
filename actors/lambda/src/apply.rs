//! metacontroller's dynamic apply: a 3-way merge of observed, last-applied and desired.
//! (Placeholder signatures; the full rules and their table tests land with the merge.)

use serde_json::Value;

/// A child whose last-applied annotation cannot be read.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ApplyError {
    #[error("cannot read the last-applied annotation of {object}: {message}")]
    LastApplied { object: String, message: String },
}

/// `merge(observed, lastApplied, desired)`.
pub fn merge(observed: &Value, _last_applied: &Value, desired: &Value) -> Value {
    let _ = observed;
    desired.clone()
}

/// The object to write so that `observed` becomes `desired` (ApplyUpdate); equal to
/// `observed` when nothing changes.
pub fn apply_update(observed: &Value, desired: &Value) -> Result<Value, ApplyError> {
    let _ = observed;
    Ok(with_last_applied(desired))
}

/// `desired` with its last-applied annotation set, for a create.
pub fn with_last_applied(desired: &Value) -> Value {
    desired.clone()
}

/// Deterministic compact JSON (sorted keys).
pub fn canonical_json(v: &Value) -> String {
    v.to_string()
}
