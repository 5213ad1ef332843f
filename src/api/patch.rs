//! Patch engines (placeholder until the full implementation lands).
use serde_json::Value;
/// Patch failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PatchError(pub String);
/// RFC 7386.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let mut t = target.clone();
    fn m(t: &mut Value, p: &Value) {
        if let Value::Object(po) = p {
            if !t.is_object() { *t = Value::Object(Default::default()); }
            let to = t.as_object_mut().unwrap();
            for (k, v) in po {
                if v.is_null() { to.remove(k); } else { m(to.entry(k.clone()).or_insert(Value::Null), v); }
            }
        } else { *t = p.clone(); }
    }
    m(&mut t, patch);
    t
}
/// RFC 6902.
pub fn json_patch(_target: &Value, _ops: &Value) -> Result<Value, PatchError> { Err(PatchError("json patch not implemented".into())) }
/// Strategic merge patch.
pub fn strategic_merge_patch(target: &Value, patch: &Value, _api_version: &str, _kind: &str) -> Result<Value, PatchError> { Ok(merge_patch(target, patch)) }
