//! Object metadata helpers: names, validation, timestamps and the stored form of objects.

use serde_json::{json, Map, Value};

use super::error::{ApiError, Cause};
use super::registry::ResourceInfo;

/// Current time as kube-apiserver writes it: RFC 3339, seconds, `Z` (`2026-11-30T16:39:19Z`).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A fresh UUID v4 string for `metadata.uid`.
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A DNS-1123 label: ≤ 63 chars of `[a-z0-9-]`, alphanumeric at both ends.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// A DNS-1123 subdomain: ≤ 253 chars, dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// A DNS-1035 label (Service names): a DNS-1123 label starting with a letter.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// `metadata` of an object, if it is a JSON object.
pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// Mutable `metadata`, created when missing.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().expect("metadata is an object")
}

/// A string field of `metadata`.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(field)).and_then(Value::as_str)
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj).and_then(|m| m.get("finalizers")).and_then(Value::as_array).map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Why `name` is not a valid path segment name (apimachinery `IsValidPathSegmentName`):
/// `.` and `..` are refused, and so are names containing `/` or `%`.
fn path_segment_problem(name: &str) -> Option<&'static str> {
    match name {
        "." => Some("may not be '.'"),
        ".." => Some("may not be '..'"),
        _ if name.contains('/') => Some("may not contain '/'"),
        _ if name.contains('%') => Some("may not contain '%'"),
        _ => None,
    }
}

/// Validates an object's name and metadata for `info`; returns 422 causes when invalid.
/// Mirrors apimachinery `ValidateObjectMeta` (name format per kind, label syntax).
pub fn validate_meta(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    let name = meta_str(obj, "name").unwrap_or("");
    // RBAC and API priority-and-fairness objects (and IPAddresses, named by their address)
    // take any path segment name, as kube-apiserver's `path.IsValidPathSegmentName`
    let path_segment = matches!(info.group, "rbac.authorization.k8s.io" | "flowcontrol.apiserver.k8s.io") || (info.group == "networking.k8s.io" && info.kind == "IPAddress");
    let ok = match info.kind {
        _ if path_segment => path_segment_problem(name).is_none(),
        "Namespace" | "Service" => {
            if info.kind == "Service" {
                is_dns1035_label(name)
            } else {
                is_dns1123_label(name)
            }
        }
        _ => is_dns1123_subdomain(name),
    };
    if name.is_empty() {
        causes.push(Cause { reason: "FieldValueRequired".into(), message: "Required value: name or generateName is required".into(), field: "metadata.name".into() });
    } else if !ok {
        // apimachinery's messages, with the example/regex suffix of its `RegexError`
        let what = match info.kind {
            _ if path_segment => path_segment_problem(name).unwrap_or_default().to_string(),
            "Namespace" => regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ),
            "Service" => regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
                "[a-z]([-a-z0-9]*[a-z0-9])?",
                &["my-name", "abc-123"],
            ),
            _ => regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                &format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*"),
                &["example.com"],
            ),
        };
        causes.push(Cause { reason: "FieldValueInvalid".into(), message: format!("Invalid value: \"{name}\": {what}"), field: "metadata.name".into() });
    }
    if let Some(labels) = meta(obj).and_then(|m| m.get("labels")) {
        match labels.as_object() {
            Some(m) => {
                for (k, v) in m {
                    let vs = v.as_str();
                    if vs.is_none() || !super::selector::valid_label_value(vs.unwrap_or("")) {
                        causes.push(Cause {
                            reason: "FieldValueInvalid".into(),
                            message: format!("Invalid value: {v}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
                            field: format!("metadata.labels"),
                        });
                    }
                    if k.is_empty() || k.len() > 317 {
                        causes.push(Cause { reason: "FieldValueInvalid".into(), message: format!("Invalid value: \"{k}\": invalid label key"), field: "metadata.labels".into() });
                    }
                }
            }
            None if !labels.is_null() => causes.push(Cause { reason: "FieldValueInvalid".into(), message: "Invalid value: labels must be a map of strings".into(), field: "metadata.labels".into() }),
            None => {}
        }
    }
    if let Some(ann) = meta(obj).and_then(|m| m.get("annotations")) {
        if !ann.is_null() && !ann.as_object().is_some_and(|m| m.values().all(Value::is_string)) {
            causes.push(Cause { reason: "FieldValueInvalid".into(), message: "Invalid value: annotations must be a map of strings".into(), field: "metadata.annotations".into() });
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(invalid(info, name, causes))
    }
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

/// apimachinery's `validation.RegexError`: `msg (e.g. 'a',  or 'b', regex used for validation is 'fmt')`
/// (the double space before `or` included, as kube-apiserver sends it).
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

/// Builds a 422 Invalid error for `info`'s kind.
pub fn invalid(info: &ResourceInfo, name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::Invalid { kind: info.kind.into(), group: info.group.into(), name: name.into(), causes }
}

/// One required-field cause.
pub fn required(field: &str) -> Cause {
    Cause { reason: "FieldValueRequired".into(), message: "Required value".into(), field: field.into() }
}

/// Sets `metadata.resourceVersion` to `rv`.
pub fn set_rv(obj: &mut Value, rv: i64) {
    meta_mut(obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
}

/// The stored form: the object with `apiVersion`, `kind` and `metadata` first and without
/// `metadata.resourceVersion` (the store's mod revision is the resourceVersion; mirrors
/// kube-apiserver's etcd3 store, which never persists it).
pub fn to_stored(info: &ResourceInfo, obj: &Value) -> Vec<u8> {
    if info.conversion.is_some() {
        let mut c = obj.clone();
        info.to_storage(&mut c);
        return into_stored_plain(info, c);
    }
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(info.storage_api_version()));
    out.insert("kind".into(), Value::String(info.kind.into()));
    let mut m = meta(obj).cloned().unwrap_or_default();
    m.remove("resourceVersion");
    out.insert("metadata".into(), Value::Object(m));
    if let Some(o) = obj.as_object() {
        for (k, v) in o {
            if k != "apiVersion" && k != "kind" && k != "metadata" {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    serde_json::to_vec(&Value::Object(out)).expect("serializable")
}

/// True when `a` and `b` store the same content: every field but `apiVersion`, `kind` and
/// `metadata.resourceVersion` equal, whatever the order of their keys (an object created by
/// a server-side apply orders its metadata differently from one updated by it).
pub fn same_content(a: &Value, b: &Value) -> bool {
    fn same_map(x: &Map<String, Value>, y: &Map<String, Value>, skip: &[&str]) -> bool {
        let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
        kept(x) == kept(y) && x.iter().filter(|(k, _)| !skip.contains(&k.as_str())).all(|(k, v)| y.get(k) == Some(v))
    }
    let (Some(x), Some(y)) = (a.as_object(), b.as_object()) else { return a == b };
    let empty = Map::new();
    same_map(x, y, &["apiVersion", "kind", "metadata"]) && same_map(meta(a).unwrap_or(&empty), meta(b).unwrap_or(&empty), &["resourceVersion"])
}

/// [`to_stored`] for an object the caller gives up: fields are moved, not cloned (the
/// cheaper path for bulk and high-rate writers).
pub fn into_stored(info: &ResourceInfo, mut obj: Value) -> Vec<u8> {
    info.to_storage(&mut obj);
    into_stored_plain(info, obj)
}

/// [`into_stored`] of an object already in the storage version.
fn into_stored_plain(info: &ResourceInfo, obj: Value) -> Vec<u8> {
    let Value::Object(mut o) = obj else { return serde_json::to_vec(&obj).expect("serializable") };
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(info.storage_api_version()));
    out.insert("kind".into(), Value::String(info.kind.into()));
    let mut m = match o.remove("metadata") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    m.remove("resourceVersion");
    out.insert("metadata".into(), Value::Object(m));
    for (k, v) in o {
        if k != "apiVersion" && k != "kind" {
            out.insert(k, v);
        }
    }
    serde_json::to_vec(&Value::Object(out)).expect("serializable")
}

/// Decodes a stored value and sets its resourceVersion to the store revision.
pub fn from_stored(bytes: &[u8], rv: i64) -> Result<Value, ApiError> {
    let mut v: Value = serde_json::from_slice(bytes).map_err(|e| ApiError::Internal(format!("stored object is corrupt: {e}")))?;
    set_rv(&mut v, rv);
    Ok(v)
}

/// Writes the stored form `stored` (as [`to_stored`] wrote it: `apiVersion`, `kind`, then
/// `metadata` first) with `metadata.resourceVersion` set to `rv` into `out`, without parsing
/// it: the version is spliced in right after `"metadata":{`. Returns false (writing nothing)
/// when the bytes do not have that shape; callers then fall back to [`from_stored`].
/// This is what lets a watch or list serve an object without decoding it.
pub fn write_stored_with_rv(out: &mut Vec<u8>, stored: &[u8], rv: i64) -> bool {
    const META: &[u8] = b",\"metadata\":{";
    if !stored.starts_with(b"{\"apiVersion\":\"") {
        return false;
    }
    // apiVersion and kind are short; metadata follows them within the first bytes.
    let window = &stored[..stored.len().min(256)];
    let Some(pos) = window.windows(META.len()).position(|w| w == META) else {
        return false;
    };
    let split = pos + META.len();
    out.reserve(stored.len() + 40);
    out.extend_from_slice(&stored[..split]);
    out.extend_from_slice(b"\"resourceVersion\":\"");
    out.extend_from_slice(rv.to_string().as_bytes());
    out.push(b'"');
    if stored.get(split) != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(&stored[split..]);
    true
}

#[cfg(test)]
mod splice_tests {
    use super::*;

    #[test]
    fn splice_matches_decode() {
        let info = crate::api::registry::configmap();
        for obj in [json!({"metadata": {"name": "a", "namespace": "n"}, "data": {"k": "v"}}), json!({"metadata": {}}), json!({"metadata": {"name": "x", "labels": {"metadata": "{"}}})] {
            let stored = to_stored(&info, &obj);
            assert_eq!(stored, into_stored(&info, obj.clone()));
            let mut out = Vec::new();
            assert!(write_stored_with_rv(&mut out, &stored, 42));
            let a: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(a, from_stored(&stored, 42).unwrap());
        }
        let mut out = Vec::new();
        assert!(!write_stored_with_rv(&mut out, b"{\"kind\":\"X\"}", 1));
        assert!(out.is_empty());
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    /// RBAC names such as `system:metrics-server` (metrics-server's manifests) are path
    /// segments, not DNS subdomains; a ConfigMap of that name is still refused.
    #[test]
    fn names_per_kind() {
        let named = |n: &str| json!({"metadata": {"name": n}});
        let cr = crate::api::registry::clusterrole();
        assert!(validate_meta(&cr, &named("system:metrics-server")).is_ok());
        assert!(validate_meta(&cr, &named("metrics-server:system:auth-delegator")).is_ok());
        let err = validate_meta(&cr, &named("a/b")).unwrap_err().to_string();
        assert!(err.contains("may not contain '/'"), "{err}");
        assert!(validate_meta(&cr, &named("..")).is_err());
        let cm = crate::api::registry::configmap();
        assert!(validate_meta(&cm, &named("system:metrics-server")).is_err());
        assert!(validate_meta(&cm, &named("ok.name")).is_ok());
    }
}

#[cfg(test)]
mod same_content_tests {
    use super::*;

    /// A server-side apply that changes nothing must not write: the created object orders
    /// its metadata keys differently from the re-applied one.
    #[test]
    fn key_order_and_resource_version_ignored() {
        let created = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s", "managedFields": [{"manager": "kubectl"}], "uid": "u", "resourceVersion": "78"}, "data": {"a": "b"}});
        let applied = json!({"metadata": {"uid": "u", "name": "s", "managedFields": [{"manager": "kubectl"}]}, "data": {"a": "b"}});
        assert!(same_content(&created, &applied));
        let changed = json!({"metadata": {"uid": "u", "name": "s", "managedFields": [{"manager": "kubectl"}]}, "data": {"a": "c"}});
        assert!(!same_content(&created, &changed));
        let relabeled = json!({"metadata": {"uid": "u", "name": "s", "managedFields": [{"manager": "kubectl"}], "labels": {}}, "data": {"a": "b"}});
        assert!(!same_content(&created, &relabeled));
    }
}
