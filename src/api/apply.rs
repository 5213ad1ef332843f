//! Server-side apply (placeholder until the full implementation lands).
use serde_json::Value;
/// Apply failure.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Field conflict.
    #[error("{message}")]
    Conflict { message: String },
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
}
/// Server-side apply.
pub fn server_side_apply(live: Option<&Value>, applied: &Value, _manager: &str, _force: bool, _api_version: &str, _kind: &str, _now: &str) -> Result<Value, ApplyError> {
    Ok(match live { Some(l) => super::patch::merge_patch(l, applied), None => applied.clone() })
}
/// Records an Update managedFields entry.
pub fn track_update(_old: Option<&Value>, _new: &mut Value, _manager: &str, _api_version: &str, _now: &str) {}
