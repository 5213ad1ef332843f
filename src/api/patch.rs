//! Patch engines over `serde_json::Value`: JSON merge patch, JSON patch and strategic merge patch.

use serde_json::{Map, Value};

/// A patch that could not be applied.
///
/// [`PatchError::code`] gives the HTTP status the API handler should answer with: 400 for a
/// malformed patch document, 422 when a well-formed patch cannot be applied to this object
/// (kube-apiserver answers 422 for a failed JSON patch `test` or a missing path).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PatchError {
    /// The patch document is malformed: not the expected JSON shape, a bad JSON pointer, an
    /// unknown operation or directive, a list element without its merge key (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// A JSON patch `test` operation found a different value (HTTP 422).
    #[error("testing value {path} failed: test failed")]
    TestFailed {
        /// The JSON pointer that was tested.
        path: String,
    },
    /// A JSON patch operation names a location that does not exist (HTTP 422).
    #[error("{op} operation does not apply: doc is missing path: \"{path}\": missing value")]
    MissingPath {
        /// The operation (`add`, `remove`, `replace`, `move`, `copy`, `test`).
        op: String,
        /// The JSON pointer (`path`, or `from` for move/copy) that could not be resolved.
        path: String,
    },
    /// The patch is well-formed but cannot be applied to this object, e.g. an array index
    /// out of range, or a strategic merge over list elements of different types (HTTP 422).
    #[error("{0}")]
    Unprocessable(String),
}

impl PatchError {
    /// HTTP status code for this error: 400 (BadRequest) or 422 (Invalid).
    pub fn code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            _ => 422,
        }
    }
}

type Result<T> = std::result::Result<T, PatchError>;

fn bad(msg: impl Into<String>) -> PatchError {
    PatchError::BadRequest(msg.into())
}

fn unprocessable(msg: impl Into<String>) -> PatchError {
    PatchError::Unprocessable(msg.into())
}

// ---------------------------------------------------------------------------------------
// Shared helpers

/// JSON equality where numbers compare by value (`1` equals `1.0`), as RFC 6902 `test`
/// requires. Object key order is irrelevant.
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b)),
        (Value::Object(x), Value::Object(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w))),
        _ => a == b,
    }
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// RFC 7386 JSON merge patch

/// Applies an RFC 7386 JSON merge patch: objects merge recursively, `null` deletes a key,
/// anything else (arrays included) replaces the target value. A non-object patch replaces
/// the whole target. Never fails.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let Value::Object(p) = patch else {
        return patch.clone();
    };
    let mut out = match target {
        Value::Object(t) => t.clone(),
        _ => Map::new(),
    };
    for (k, pv) in p {
        if pv.is_null() {
            out.shift_remove(k);
            continue;
        }
        let merged = merge_patch(out.get(k).unwrap_or(&Value::Null), pv);
        out.insert(k.clone(), merged);
    }
    Value::Object(out)
}

// ---------------------------------------------------------------------------------------
// RFC 6902 JSON patch

/// Applies an RFC 6902 JSON patch (`ops` must be an array of operation objects).
///
/// Supports `add`, `remove`, `replace`, `move`, `copy` and `test`; JSON pointers with `~0`
/// (`~`) and `~1` (`/`) escapes; `-` to append to an array. The patch is atomic: the
/// operations run on a copy and the first failure returns an error with nothing applied.
///
/// Errors: [`PatchError::BadRequest`] for a malformed document (not an array, unknown `op`,
/// missing `path`/`from`/`value`, bad pointer syntax); [`PatchError::TestFailed`],
/// [`PatchError::MissingPath`] or [`PatchError::Unprocessable`] when an operation does not
/// apply to the document (messages follow the evanphx/json-patch library kube-apiserver uses).
pub fn json_patch(target: &Value, ops: &Value) -> Result<Value> {
    let Value::Array(ops) = ops else {
        return Err(bad(format!("json patch must be a JSON array of operations, got: {}", type_name(ops))));
    };
    let mut doc = target.clone();
    for (i, op) in ops.iter().enumerate() {
        apply_op(&mut doc, op, i)?;
    }
    Ok(doc)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn apply_op(doc: &mut Value, op: &Value, index: usize) -> Result<()> {
    let Value::Object(o) = op else {
        return Err(bad(format!("json patch operation {index} must be a JSON object")));
    };
    let name = match o.get("op") {
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(bad(format!("json patch operation {index}: \"op\" must be a string"))),
        None => return Err(bad(format!("json patch operation {index}: missing \"op\""))),
    };
    let string_field = |field: &str| -> Result<&str> {
        match o.get(field) {
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(_) => Err(bad(format!("{name} operation: \"{field}\" must be a string"))),
            None => Err(bad(format!("{name} operation: missing \"{field}\""))),
        }
    };
    let value_field = || -> Result<&Value> { o.get("value").ok_or_else(|| bad(format!("{name} operation: missing \"value\""))) };
    match name {
        "add" => {
            let path = string_field("path")?;
            let tokens = parse_pointer(path)?;
            add(doc, &tokens, value_field()?.clone(), "add", path)
        }
        "remove" => {
            let path = string_field("path")?;
            let tokens = parse_pointer(path)?;
            remove(doc, &tokens, "remove", path).map(|_| ())
        }
        "replace" => {
            let path = string_field("path")?;
            let tokens = parse_pointer(path)?;
            let value = value_field()?.clone();
            let slot = resolve_mut(doc, &tokens).ok_or_else(|| missing("replace", path))?;
            *slot = value;
            Ok(())
        }
        "move" => {
            let from = string_field("from")?;
            let path = string_field("path")?;
            let from_t = parse_pointer(from)?;
            let path_t = parse_pointer(path)?;
            if from_t == path_t {
                // RFC 6902 §4.4: moving onto itself is a no-op, but `from` must exist.
                return resolve(doc, &from_t).map(|_| ()).ok_or_else(|| missing("move", from));
            }
            if path_t.len() > from_t.len() && path_t[..from_t.len()] == from_t[..] {
                return Err(unprocessable(format!("move operation does not apply: \"from\" {from:?} is a proper prefix of \"path\" {path:?}")));
            }
            let value = remove(doc, &from_t, "move", from)?;
            add(doc, &path_t, value, "move", path)
        }
        "copy" => {
            let from = string_field("from")?;
            let path = string_field("path")?;
            let from_t = parse_pointer(from)?;
            let path_t = parse_pointer(path)?;
            let value = resolve(doc, &from_t).ok_or_else(|| missing("copy", from))?.clone();
            add(doc, &path_t, value, "copy", path)
        }
        "test" => {
            let path = string_field("path")?;
            let tokens = parse_pointer(path)?;
            let expected = value_field()?;
            match resolve(doc, &tokens) {
                Some(actual) if json_equal(actual, expected) => Ok(()),
                // A missing location only equals an explicit null (evanphx/json-patch).
                None if expected.is_null() => Ok(()),
                _ => Err(PatchError::TestFailed { path: path.to_string() }),
            }
        }
        other => Err(bad(format!("Unexpected kind: {other}: json patch operation {index} has an unsupported \"op\""))),
    }
}

fn missing(op: &str, path: &str) -> PatchError {
    PatchError::MissingPath { op: op.to_string(), path: path.to_string() }
}

/// Splits a JSON pointer into unescaped reference tokens (RFC 6901).
fn parse_pointer(p: &str) -> Result<Vec<String>> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(bad(format!("invalid JSON pointer {p:?}: must be empty or start with \"/\"")));
    };
    rest.split('/')
        .map(|tok| {
            let mut out = String::with_capacity(tok.len());
            let mut chars = tok.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => out.push('~'),
                    Some('1') => out.push('/'),
                    _ => return Err(bad(format!("invalid JSON pointer {p:?}: \"~\" must be followed by \"0\" or \"1\""))),
                }
            }
            Ok(out)
        })
        .collect()
}

/// Parses an array index token: decimal digits without leading zeros.
fn parse_index(tok: &str) -> Option<usize> {
    if tok.is_empty() || !tok.bytes().all(|b| b.is_ascii_digit()) || (tok.len() > 1 && tok.starts_with('0')) {
        return None;
    }
    tok.parse().ok()
}

fn resolve<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    tokens.iter().try_fold(doc, |cur, tok| match cur {
        Value::Object(m) => m.get(tok),
        Value::Array(a) => parse_index(tok).and_then(|i| a.get(i)),
        _ => None,
    })
}

fn resolve_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    tokens.iter().try_fold(doc, |cur, tok| match cur {
        Value::Object(m) => m.get_mut(tok),
        Value::Array(a) => parse_index(tok).and_then(move |i| a.get_mut(i)),
        _ => None,
    })
}

fn add(doc: &mut Value, tokens: &[String], value: Value, op: &str, path: &str) -> Result<()> {
    let Some((last, parent)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    let parent = resolve_mut(doc, parent).ok_or_else(|| missing(op, path))?;
    match parent {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if last == "-" { a.len() } else { parse_index(last).ok_or_else(|| unprocessable(format!("{op} operation does not apply: invalid array index {last:?} in {path:?}")))? };
            if i > a.len() {
                return Err(unprocessable(format!("{op} operation does not apply: array index {i} out of bounds (length {}) in {path:?}", a.len())));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(missing(op, path)),
    }
}

fn remove(doc: &mut Value, tokens: &[String], op: &str, path: &str) -> Result<Value> {
    let Some((last, parent)) = tokens.split_last() else {
        return Err(unprocessable(format!("{op} operation does not apply: cannot remove the document root")));
    };
    let parent = resolve_mut(doc, parent).ok_or_else(|| missing(op, path))?;
    match parent {
        Value::Object(m) => m.shift_remove(last).ok_or_else(|| missing(op, path)),
        Value::Array(a) => match parse_index(last) {
            Some(i) if i < a.len() => Ok(a.remove(i)),
            _ => Err(missing(op, path)),
        },
        _ => Err(missing(op, path)),
    }
}

// ---------------------------------------------------------------------------------------
// Patch metadata: the merge-key table

/// One key field of an associative list; `default` is used when an element omits the
/// field (server-side apply: `protocol` defaults to `TCP` in port lists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListKey {
    pub name: &'static str,
    pub default: Option<&'static str>,
}

const fn key(name: &'static str) -> ListKey {
    ListKey { name, default: None }
}

const NAME: &[ListKey] = &[key("name")];
const TYPE: &[ListKey] = &[key("type")];
const IP: &[ListKey] = &[key("ip")];
const UID: &[ListKey] = &[key("uid")];
const MOUNT_PATH: &[ListKey] = &[key("mountPath")];
const DEVICE_PATH: &[ListKey] = &[key("devicePath")];
const CONTAINER_PORT: &[ListKey] = &[key("containerPort"), ListKey { name: "protocol", default: Some("TCP") }];
const SERVICE_PORT: &[ListKey] = &[key("port"), ListKey { name: "protocol", default: Some("TCP") }];
const TOPOLOGY: &[ListKey] = &[key("topologyKey"), key("whenUnsatisfiable")];

/// How a field's value merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Maps merge key by key; lists are replaced whole (SMP) / atomic (SSA).
    Plain,
    /// A map that SMP merges but server-side apply owns as one unit (`structType=atomic`,
    /// e.g. a `LabelSelector`).
    AtomicMap,
    /// A list of objects merged element-wise: SMP by `merge_key` (`patchMergeKey`), SSA as
    /// an associative list keyed by `keys` (`listMapKeys`).
    Keyed { merge_key: &'static str, keys: &'static [ListKey] },
    /// A list of scalars merged as a set (`patchStrategy:"merge"` without key; SSA
    /// `listType=set`), e.g. `metadata.finalizers`.
    Set,
}

const fn keyed(keys: &'static [ListKey]) -> Shape {
    Shape::Keyed { merge_key: keys[0].name, keys }
}

/// Kind families that share a schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    Pod,
    PodTemplate,
    /// Deployment, ReplicaSet, DaemonSet, Job, ReplicationController: `spec.template`.
    Workload,
    StatefulSet,
    CronJob,
    Service,
    Node,
    ServiceAccount,
    /// Mutating- and ValidatingWebhookConfiguration: `webhooks` merge by `name`.
    WebhookConfiguration,
    /// Everything else: maps merge, lists are atomic (what kube-apiserver does for types
    /// without patch tags; CRDs do not accept strategic merge patch at all).
    Other,
}

/// A schema node: which type a value has, so that its fields can be looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ty {
    /// No patch metadata below this point.
    Any,
    /// A top-level object of the family.
    Root(Family),
    ObjectMeta,
    Spec(Family),
    Status(Family),
    PodTemplateSpec,
    PodSpec,
    Container,
    JobTemplateSpec,
}

impl Ty {
    /// The schema root for `apiVersion`/`kind`.
    pub(crate) fn root(api_version: &str, kind: &str) -> Ty {
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let family = match (group, kind) {
            ("", "Pod") => Family::Pod,
            ("", "PodTemplate") => Family::PodTemplate,
            ("", "ReplicationController") | ("apps" | "extensions", "Deployment" | "ReplicaSet" | "DaemonSet") | ("batch", "Job") => Family::Workload,
            ("apps", "StatefulSet") => Family::StatefulSet,
            ("batch", "CronJob") => Family::CronJob,
            ("", "Service") => Family::Service,
            ("", "Node") => Family::Node,
            ("", "ServiceAccount") => Family::ServiceAccount,
            ("admissionregistration.k8s.io", "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration") => Family::WebhookConfiguration,
            _ => Family::Other,
        };
        Ty::Root(family)
    }

    /// The type and merge shape of field `name` of a value of this type. For lists the
    /// returned type is the element type.
    pub(crate) fn child(self, name: &str) -> (Ty, Shape) {
        use Shape::*;
        let any = (Ty::Any, Plain);
        match self {
            Ty::Any => any,
            Ty::Root(f) => match (f, name) {
                (_, "metadata") => (Ty::ObjectMeta, Plain),
                (_, "spec") => (Ty::Spec(f), Plain),
                (_, "status") => (Ty::Status(f), Plain),
                (Family::PodTemplate, "template") => (Ty::PodTemplateSpec, Plain),
                (Family::ServiceAccount, "secrets") => (Ty::Any, keyed(NAME)),
                // `patchMergeKey=name, patchStrategy=merge` (SSA: `listType=map`, key
                // `name`); a webhook's `rules` and other lists stay atomic
                (Family::WebhookConfiguration, "webhooks") => (Ty::Any, keyed(NAME)),
                _ => any,
            },
            Ty::ObjectMeta => match name {
                "finalizers" => (Ty::Any, Set),
                "ownerReferences" => (Ty::Any, keyed(UID)),
                _ => any,
            },
            Ty::Spec(f) => match (f, name) {
                (Family::Pod, _) => Ty::PodSpec.child(name),
                (Family::Workload | Family::StatefulSet, "template") => (Ty::PodTemplateSpec, Plain),
                (Family::Workload | Family::StatefulSet, "selector") => (Ty::Any, AtomicMap),
                // volumeClaimTemplates has no patch strategy: replaced whole.
                (Family::CronJob, "jobTemplate") => (Ty::JobTemplateSpec, Plain),
                (Family::Service, "ports") => (Ty::Any, keyed(SERVICE_PORT)),
                (Family::Node, "podCIDRs") => (Ty::Any, Set),
                _ => any,
            },
            Ty::Status(f) => match (f, name) {
                (_, "conditions") => (Ty::Any, keyed(TYPE)),
                (Family::Pod, "podIPs" | "hostIPs") => (Ty::Any, keyed(IP)),
                (Family::Node, "addresses") => (Ty::Any, keyed(TYPE)),
                _ => any,
            },
            Ty::JobTemplateSpec => match name {
                "metadata" => (Ty::ObjectMeta, Plain),
                "spec" => (Ty::Spec(Family::Workload), Plain),
                _ => any,
            },
            Ty::PodTemplateSpec => match name {
                "metadata" => (Ty::ObjectMeta, Plain),
                "spec" => (Ty::PodSpec, Plain),
                _ => any,
            },
            Ty::PodSpec => match name {
                "containers" | "initContainers" | "ephemeralContainers" => (Ty::Container, keyed(NAME)),
                "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates" => (Ty::Any, keyed(NAME)),
                "hostAliases" => (Ty::Any, keyed(IP)),
                "topologySpreadConstraints" => (Ty::Any, keyed(TOPOLOGY)),
                // tolerations, readinessGates: no patch strategy, replaced whole.
                _ => any,
            },
            Ty::Container => match name {
                "ports" => (Ty::Any, keyed(CONTAINER_PORT)),
                "env" => (Ty::Any, keyed(NAME)),
                "volumeMounts" => (Ty::Any, keyed(MOUNT_PATH)),
                "volumeDevices" => (Ty::Any, keyed(DEVICE_PATH)),
                // envFrom, resizePolicy: replaced whole.
                _ => any,
            },
        }
    }
}

// ---------------------------------------------------------------------------------------
// Strategic merge patch

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER_PREFIX: &str = "$setElementOrder/";
const DELETE_PRIMITIVE_PREFIX: &str = "$deleteFromPrimitiveList/";

const ERR_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_SET_ORDER: &str = "invalid patch format of setElementOrder list";

/// Applies a Kubernetes strategic merge patch to an object of `apiVersion`/`kind`
/// (mirrors apimachinery `strategicpatch.StrategicMergePatch` with the server's options:
/// parallel deletion lists merged, unmatched nulls ignored). Patch metadata comes from a
/// table of merge keys per field path standing in for the `patchStrategy`/`patchMergeKey`
/// struct tags apimachinery reads by reflection; server-side apply reuses it for its
/// associative lists. Map key order is kept (keys are removed with `shift_remove`).
///
/// * Maps merge recursively; `null` deletes a key.
/// * Lists with a patch merge key (containers by `name`, ports by `containerPort`, …; see
///   the table in `Ty::child`) merge element-wise by that key; primitive lists with
///   `patchStrategy: merge` (`metadata.finalizers`) merge as sets; all other lists are
///   replaced. Elements new to a merged list come first unless `$setElementOrder` says
///   otherwise, exactly as apimachinery orders them.
/// * Directives: `$patch: replace | delete` on a map (`merge` is accepted as a no-op);
///   `{$patch: delete, <key>: v}` / `{$patch: replace}` inside a merged list;
///   `$deleteFromPrimitiveList/<field>`; `$setElementOrder/<field>` (the listed elements
///   take that relative order, other live elements keep their live position relative to
///   them); `$retainKeys` (live keys not listed are cleared).
/// * Directives never end up in the result, not even inside values added to the object.
///
/// Errors: [`PatchError::BadRequest`] for a malformed patch (not an object, an unknown
/// `$patch` value, a merged-list element without its merge key, a malformed directive);
/// [`PatchError::Unprocessable`] when the live object cannot be merged (mixed or nested
/// lists, a list of objects without merge key, non-object `target`).
pub fn strategic_merge_patch(target: &Value, patch: &Value, api_version: &str, kind: &str) -> Result<Value> {
    let Value::Object(p) = patch else {
        return Err(bad(format!("invalid JSON document: a strategic merge patch must be a JSON object, got {}", type_name(patch))));
    };
    let t = match target {
        Value::Object(t) => t.clone(),
        Value::Null => Map::new(),
        other => return Err(unprocessable(format!("cannot patch a {} with a strategic merge patch", type_name(other)))),
    };
    smp_map(t, p, Ty::root(api_version, kind)).map(Value::Object)
}

fn no_merge_key(m: &Value, key: &str) -> PatchError {
    bad(format!("map: {} does not contain declared merge key: {key}", compact(m)))
}

fn bad_patch_type(t: &Value, m: &Map<String, Value>) -> PatchError {
    bad(format!("unknown patch type: {} in map: {}", t.as_str().map(str::to_string).unwrap_or_else(|| compact(t)), compact(&Value::Object(m.clone()))))
}

/// Merges `patch` into `original` (a map of type `ty`).
fn smp_map(mut original: Map<String, Value>, patch: &Map<String, Value>, ty: Ty) -> Result<Map<String, Value>> {
    if let Some(d) = patch.get(DIRECTIVE) {
        match d.as_str() {
            Some("replace") => {
                let mut rest = patch.clone();
                rest.shift_remove(DIRECTIVE);
                return smp_map(Map::new(), &rest, ty);
            }
            Some("delete") => return Ok(Map::new()),
            // apimachinery rejects `merge` on maps; it is the default, so we accept it.
            Some("merge") => {}
            _ => return Err(bad_patch_type(d, patch)),
        }
    }

    // $retainKeys: clear live keys that are not listed; the patch may only set listed keys.
    if let Some(rk) = patch.get(RETAIN_KEYS) {
        let Value::Array(list) = rk else {
            return Err(bad(ERR_RETAIN_KEYS));
        };
        let keys: Vec<&str> = list.iter().map(|v| v.as_str().ok_or_else(|| bad(ERR_RETAIN_KEYS))).collect::<Result<_>>()?;
        for (k, v) in patch {
            if v.is_null() || k.starts_with('$') {
                continue;
            }
            if !keys.contains(&k.as_str()) {
                return Err(bad(ERR_RETAIN_KEYS));
            }
        }
        original.retain(|k, _| keys.contains(&k.as_str()));
    }

    // $setElementOrder/<field>: merge the list and its order together.
    let mut ordered: Vec<&str> = Vec::new();
    for (k, order) in patch {
        let Some(field) = k.strip_prefix(SET_ORDER_PREFIX) else { continue };
        if field.is_empty() {
            return Err(bad(ERR_SET_ORDER));
        }
        let Value::Array(order) = order else {
            return Err(bad(ERR_SET_ORDER));
        };
        ordered.push(field);
        let (ety, shape) = ty.child(field);
        let orig_list = match original.get(field) {
            None => None,
            Some(Value::Array(a)) => Some(a.as_slice()),
            Some(other) => return Err(unprocessable(format!("expected a slice at {field:?}, but the object has a {}", type_name(other)))),
        };
        let patch_list = match patch.get(field) {
            None => None,
            Some(Value::Array(a)) => Some(a.as_slice()),
            Some(_) => return Err(bad(ERR_SET_ORDER)),
        };
        let merge_key = match shape {
            Shape::Keyed { merge_key, .. } => Some(merge_key),
            _ => None,
        };
        if let Some(pl) = patch_list {
            validate_set_order(pl, order, merge_key)?;
        }
        let merged = match (orig_list, patch_list) {
            (None, None) => continue,
            (Some(o), None) => o.to_vec(),
            (o, Some(p)) => smp_list(o.unwrap_or(&[]), p, ety, shape)?,
        };
        let merged = if matches!(shape, Shape::Keyed { .. } | Shape::Set) {
            let key = if merged.iter().chain(order).any(Value::is_object) { merge_key } else { None };
            normalize_order(merged, order, orig_list.unwrap_or(&[]), key)
        } else {
            merged
        };
        original.insert(field.to_string(), Value::Array(merged));
    }

    for (k, pv) in patch {
        if k == DIRECTIVE || k == RETAIN_KEYS || k.starts_with(SET_ORDER_PREFIX) || ordered.contains(&k.as_str()) {
            continue;
        }
        if let Some(field) = k.strip_prefix(DELETE_PRIMITIVE_PREFIX) {
            let Value::Array(del) = pv else {
                return Err(bad(ERR_PRIMITIVE_LIST));
            };
            if field.is_empty() || del.iter().any(|v| v.is_object() || v.is_array()) {
                return Err(bad(ERR_PRIMITIVE_LIST));
            }
            match original.get_mut(field) {
                None => {}
                Some(Value::Array(a)) => a.retain(|x| !del.iter().any(|d| json_equal(d, x))),
                Some(other) => return Err(unprocessable(format!("{k}: expected a list of primitives at {field:?}, but the object has a {}", type_name(other)))),
            }
            continue;
        }
        if pv.is_null() {
            original.shift_remove(k);
            continue;
        }
        let (cty, shape) = ty.child(k);
        let merged = match (original.get_mut(k), pv) {
            (Some(Value::Object(o)), Value::Object(p)) => Some(Value::Object(smp_map(std::mem::take(o), p, cty)?)),
            (Some(Value::Array(o)), Value::Array(p)) => Some(Value::Array(smp_list(o, p, cty, shape)?)),
            _ => smp_new(pv, cty, shape)?,
        };
        match merged {
            Some(v) => {
                original.insert(k.clone(), v);
            }
            None => {
                original.shift_remove(k);
            }
        }
    }
    Ok(original)
}

/// A patch value for a key the object does not have (or has with another type): the value
/// with its directives processed and nulls dropped; `None` when it should not be stored
/// (a map carrying `$patch: delete`).
fn smp_new(pv: &Value, ty: Ty, shape: Shape) -> Result<Option<Value>> {
    Ok(match pv {
        Value::Object(p) => {
            if p.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                None
            } else {
                Some(Value::Object(smp_map(Map::new(), p, ty)?))
            }
        }
        Value::Array(p) => Some(Value::Array(smp_list(&[], p, ty, shape)?)),
        other => Some(other.clone()),
    })
}

/// The JSON type of list elements, rejecting mixed and nested lists like apimachinery's
/// `sliceElementType`. `None` for no elements.
fn element_type(lists: &[&[Value]]) -> Result<Option<&'static str>> {
    let mut seen: Option<&'static str> = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let t = type_name(v);
        if t == "array" {
            return Err(unprocessable("lists of lists are not supported"));
        }
        match seen {
            None => seen = Some(t),
            Some(s) if s != t => {
                return Err(unprocessable(format!("list element types are not identical: {}", lists.iter().map(|l| compact(&Value::Array(l.to_vec()))).collect::<Vec<_>>().join(" "))))
            }
            _ => {}
        }
    }
    Ok(seen)
}

/// Merges list `patch` into `original` (elements of type `ety`) according to `shape`.
fn smp_list(original: &[Value], patch: &[Value], ety: Ty, shape: Shape) -> Result<Vec<Value>> {
    let merge_key = match shape {
        Shape::Keyed { merge_key, .. } => Some(merge_key),
        Shape::Set => None,
        Shape::Plain | Shape::AtomicMap => {
            // Replaced whole; directives are still stripped from the new value.
            let mut out = Vec::with_capacity(patch.len());
            for v in patch {
                if let Some(v) = smp_new(v, Ty::Any, Shape::Plain)? {
                    out.push(v);
                }
            }
            return Ok(out);
        }
    };
    if original.is_empty() && patch.is_empty() {
        return Ok(Vec::new());
    }
    if element_type(&[original, patch])? != Some("object") {
        // Scalars: set union, then ordering.
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch) {
            if !merged.iter().any(|m| json_equal(m, v)) {
                merged.push(v.clone());
            }
        }
        return Ok(normalize_order(merged, patch, original, None));
    }
    let Some(key) = merge_key else {
        return Err(unprocessable("cannot merge lists without merge key for type map"));
    };

    // Special elements first: `$patch: delete` removes live elements, `$patch: replace`
    // replaces the whole list with the other patch elements.
    let mut live: Vec<Value> = original.to_vec();
    let mut plain: Vec<&Map<String, Value>> = Vec::new();
    let mut replace = false;
    for v in patch {
        let m = v.as_object().expect("element_type checked objects");
        match m.get(DIRECTIVE) {
            None => plain.push(m),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let kv = m.get(key).ok_or_else(|| no_merge_key(v, key))?;
                    live.retain(|e| !e.get(key).is_some_and(|ev| json_equal(ev, kv)));
                }
                Some("replace") => replace = true,
                Some("merge") => return Err(bad("merging lists cannot yet be specified in the patch")),
                _ => return Err(bad_patch_type(d, m)),
            },
        }
    }
    if replace {
        let mut out = Vec::with_capacity(plain.len());
        for m in plain {
            out.push(Value::Object(smp_map(Map::new(), m, ety)?));
        }
        return Ok(out);
    }

    let server_order = live.clone();
    let mut merged = live;
    let mut patch_order: Vec<Value> = Vec::with_capacity(plain.len());
    for m in plain {
        let kv = m.get(key).ok_or_else(|| no_merge_key(&Value::Object(m.clone()), key))?;
        patch_order.push(Value::Object(m.clone()));
        match merged.iter().position(|e| e.get(key).is_some_and(|ev| json_equal(ev, kv))) {
            Some(i) => {
                let Value::Object(o) = &mut merged[i] else { unreachable!("element_type checked objects") };
                let o = std::mem::take(o);
                merged[i] = Value::Object(smp_map(o, m, ety)?);
            }
            None => merged.push(Value::Object(smp_map(Map::new(), m, ety)?)),
        }
    }
    Ok(normalize_order(merged, &patch_order, &server_order, Some(key)))
}

/// Checks that the (non-deleting) patch elements appear in the `$setElementOrder` list in
/// the same relative order (apimachinery `validatePatchWithSetOrderList`).
fn validate_set_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<()> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let ident = |v: &Value| -> Result<Value> {
        match (key, v) {
            (Some(k), Value::Object(m)) => m.get(k).cloned().ok_or_else(|| no_merge_key(v, k)),
            _ => Ok(v.clone()),
        }
    };
    let order_ids: Vec<Value> = order.iter().map(ident).collect::<Result<_>>()?;
    let mut j = 0;
    for v in patch {
        if v.get(DIRECTIVE).is_some() {
            continue;
        }
        let id = ident(v)?;
        while j < order_ids.len() && !json_equal(&order_ids[j], &id) {
            j += 1;
        }
        if j == order_ids.len() {
            return Err(bad(format!("The order in patch list:\n{}\n doesn't match $setElementOrder list:\n{}\n", compact(&Value::Array(patch.to_vec())), compact(&Value::Array(order.to_vec())))));
        }
        j += 1;
    }
    Ok(())
}

/// Orders a merged list like apimachinery `normalizeElementOrder`: the elements present in
/// `patch_order` take its relative order, the others keep their `server_order` order, and
/// the two runs interleave by live position (a server-only element goes before a patch
/// element only when both are live and it came first). Elements are identified by the
/// merge key for objects, by value for scalars.
fn normalize_order(merged: Vec<Value>, patch_order: &[Value], server_order: &[Value], key: Option<&str>) -> Vec<Value> {
    let ident = |v: &Value| -> Option<Value> {
        match key {
            Some(k) => v.get(k).cloned(),
            None => Some(v.clone()),
        }
    };
    let pos = |list: &[Value], v: &Value| -> Option<usize> {
        let id = ident(v)?;
        list.iter().position(|x| ident(x).is_some_and(|xi| json_equal(&xi, &id)))
    };
    let (mut in_patch, mut server_only): (Vec<Value>, Vec<Value>) = merged.into_iter().partition(|v| pos(patch_order, v).is_some());
    in_patch.sort_by_key(|v| pos(patch_order, v).unwrap_or(usize::MAX));
    server_only.sort_by_key(|v| pos(server_order, v).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(in_patch.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = in_patch.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => {
                let take_left = matches!((pos(server_order, l), pos(server_order, r)), (Some(li), Some(ri)) if li < ri);
                out.extend(if take_left { left.next() } else { right.next() });
            }
            (Some(_), None) => out.extend(left.next()),
            (None, Some(_)) => out.extend(right.next()),
            (None, None) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // ---- merge patch

    #[test]
    fn merge_patch_rfc7386_examples() {
        // The test vectors of RFC 7386 appendix A.
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (json!({"a":"b","b":"c"}), json!({"a":null}), json!({"b":"c"})),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (json!({"a":{"b":"c"}}), json!({"a":{"b":"d","c":null}}), json!({"a":{"b":"d"}})),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (json!({}), json!({"a":{"bb":{"ccc":null}}}), json!({"a":{"bb":{}}})),
        ];
        for (target, patch, want) in cases {
            assert_eq!(merge_patch(&target, &patch), want, "target {target} patch {patch}");
        }
    }

    #[test]
    fn merge_patch_keeps_key_order() {
        let target = json!({"a": 1, "b": 2, "c": 3});
        let out = merge_patch(&target, &json!({"a": null, "b": 5, "d": 4}));
        assert_eq!(compact(&out), r#"{"b":5,"c":3,"d":4}"#);
    }

    #[test]
    fn merge_patch_deployment_labels_and_replicas() {
        let target = json!({"metadata": {"name": "web", "labels": {"app": "web", "tier": "fe"}}, "spec": {"replicas": 1}});
        let patch = json!({"metadata": {"labels": {"tier": null, "env": "prod"}}, "spec": {"replicas": 3}});
        assert_eq!(merge_patch(&target, &patch), json!({"metadata": {"name": "web", "labels": {"app": "web", "env": "prod"}}, "spec": {"replicas": 3}}));
    }

    // ---- JSON patch

    #[test]
    fn json_patch_rfc6902_operations() {
        let doc = json!({"foo": ["bar", "baz"], "a": {"b": 1}});
        let ops = json!([
            {"op": "add", "path": "/foo/1", "value": "qux"},
            {"op": "add", "path": "/foo/-", "value": "end"},
            {"op": "remove", "path": "/foo/0"},
            {"op": "replace", "path": "/a/b", "value": 2},
            {"op": "copy", "from": "/a", "path": "/c"},
            {"op": "move", "from": "/a/b", "path": "/d"},
            {"op": "test", "path": "/d", "value": 2.0},
            {"op": "add", "path": "/e", "value": null},
        ]);
        let out = json_patch(&doc, &ops).unwrap();
        assert_eq!(out, json!({"foo": ["qux", "baz", "end"], "a": {}, "c": {"b": 2}, "d": 2, "e": null}));
    }

    #[test]
    fn json_patch_pointer_escaping() {
        let doc = json!({"metadata": {"annotations": {"a/b": "x", "m~n": "y"}}});
        let ops = json!([
            {"op": "replace", "path": "/metadata/annotations/a~1b", "value": "z"},
            {"op": "remove", "path": "/metadata/annotations/m~0n"},
            {"op": "add", "path": "/metadata/annotations/example.com~1team", "value": "infra"},
        ]);
        let out = json_patch(&doc, &ops).unwrap();
        assert_eq!(out, json!({"metadata": {"annotations": {"a/b": "z", "example.com/team": "infra"}}}));
        assert!(matches!(json_patch(&doc, &json!([{"op": "remove", "path": "/metadata/annotations/a~2b"}])), Err(PatchError::BadRequest(_))));
        assert!(matches!(json_patch(&doc, &json!([{"op": "remove", "path": "metadata"}])), Err(PatchError::BadRequest(_))));
    }

    #[test]
    fn json_patch_is_atomic_and_reports_failures() {
        let doc = json!({"spec": {"replicas": 1}});
        // The first op would succeed; the failing test must leave nothing applied.
        let ops = json!([
            {"op": "replace", "path": "/spec/replicas", "value": 5},
            {"op": "test", "path": "/spec/replicas", "value": 1},
        ]);
        let err = json_patch(&doc, &ops).unwrap_err();
        assert_eq!(err, PatchError::TestFailed { path: "/spec/replicas".into() });
        assert_eq!(err.to_string(), "testing value /spec/replicas failed: test failed");
        assert_eq!(err.code(), 422);
        assert_eq!(doc, json!({"spec": {"replicas": 1}}));

        let err = json_patch(&doc, &json!([{"op": "replace", "path": "/spec/paused", "value": true}])).unwrap_err();
        assert_eq!(err.to_string(), "replace operation does not apply: doc is missing path: \"/spec/paused\": missing value");
        let err = json_patch(&doc, &json!([{"op": "add", "path": "/status/x", "value": 1}])).unwrap_err();
        assert!(matches!(err, PatchError::MissingPath { .. }));
        assert!(json_patch(&doc, &json!([{"op": "remove", "path": "/spec/x"}])).is_err());
        assert!(json_patch(&json!({"a": [1]}), &json!([{"op": "add", "path": "/a/2", "value": 1}])).is_err());
        assert!(json_patch(&json!({"a": [1]}), &json!([{"op": "add", "path": "/a/01", "value": 1}])).is_err());
        assert!(json_patch(&json!({"a": [1]}), &json!([{"op": "remove", "path": "/a/-"}])).is_err());
        assert!(json_patch(&json!({"a": {"b": 1}}), &json!([{"op": "move", "from": "/a", "path": "/a/b/c"}])).is_err());
        assert!(json_patch(&doc, &json!([{"op": "copy", "from": "/nope", "path": "/x"}])).is_err());
    }

    #[test]
    fn json_patch_malformed_is_bad_request() {
        let doc = json!({});
        for ops in [
            json!({"op": "add"}),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"path": "/a", "value": 1}]),
            json!([{"op": "add", "path": "/a"}]),
            json!([{"op": "move", "path": "/a"}]),
            json!(["add"]),
        ] {
            let err = json_patch(&doc, &ops).unwrap_err();
            assert_eq!(err.code(), 400, "{ops}: {err}");
        }
    }

    #[test]
    fn json_patch_root_and_arrays() {
        assert_eq!(json_patch(&json!({"a": 1}), &json!([{"op": "replace", "path": "", "value": [1]}])).unwrap(), json!([1]));
        let doc = json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}});
        let out = json_patch(
            &doc,
            &json!([
                {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "b"},
                {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "x"},
            ]),
        );
        // replace of a missing member fails
        assert!(out.is_err());
        let out = json_patch(&doc, &json!([{"op": "add", "path": "/spec/template/spec/containers/0/image", "value": "x"}])).unwrap();
        assert_eq!(out["spec"]["template"]["spec"]["containers"][0], json!({"name": "a", "image": "x"}));
        // test of a missing path against null succeeds, against a value fails
        assert!(json_patch(&doc, &json!([{"op": "test", "path": "/nope", "value": null}])).is_ok());
        assert!(json_patch(&doc, &json!([{"op": "test", "path": "/nope", "value": 1}])).is_err());
    }

    // ---- strategic merge patch

    fn smp(target: &Value, patch: &Value, api_version: &str, kind: &str) -> Value {
        strategic_merge_patch(target, patch, api_version, kind).unwrap_or_else(|e| panic!("{e}"))
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "default",
                "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "finalizers": ["a", "b"]
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "web",
                                "image": "nginx:1.25",
                                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                                "terminationMessagePath": "/dev/termination-log"
                            },
                            {"name": "sidecar", "image": "busybox"}
                        ],
                        "tolerations": [{"key": "k1", "operator": "Exists"}]
                    }
                }
            }
        })
    }

    fn containers(v: &Value) -> &Vec<Value> {
        v["spec"]["template"]["spec"]["containers"].as_array().unwrap()
    }

    #[test]
    fn smp_webhooks_merge_by_name_and_rules_are_replaced() {
        // kubectl's client-side apply of a webhook configuration whose live rules carry the
        // defaulted scope: the patch holds only the webhook's name and its (atomic) rules
        let live = json!({"webhooks": [
            {"name": "a", "clientConfig": {"url": "https://a"}, "sideEffects": "None", "admissionReviewVersions": ["v1"],
             "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "*"}]},
            {"name": "b", "clientConfig": {"url": "https://b"}, "sideEffects": "None", "admissionReviewVersions": ["v1"]},
        ]});
        let patch = json!({
            "$setElementOrder/webhooks": [{"name": "a"}, {"name": "b"}],
            "webhooks": [{"name": "a", "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}],
        });
        for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
            let out = smp(&live, &patch, "admissionregistration.k8s.io/v1", kind);
            let ws = out["webhooks"].as_array().unwrap();
            assert_eq!(ws.len(), 2, "{kind}: {out}");
            assert_eq!(ws[0]["clientConfig"]["url"], "https://a", "{kind}: the webhook is merged, not replaced");
            assert_eq!(ws[0]["rules"], patch["webhooks"][0]["rules"], "{kind}: rules are atomic");
            assert_eq!(ws[1], live["webhooks"][1]);
        }
    }

    #[test]
    fn smp_kubectl_apply_image_and_replicas() {
        // The patch `kubectl apply` sends when the image and replica count change.
        let last = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{},"name":"web","namespace":"default"},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"image":"nginx:1.26","name":"web"}]}}}}"#;
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": last}},
            "spec": {"replicas": 3, "template": {"spec": {
                "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
                "containers": [{"image": "nginx:1.26", "name": "web"}]
            }}}
        });
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        assert_eq!(out["spec"]["replicas"], json!(3));
        assert_eq!(out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"], json!(last));
        let cs = containers(&out);
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0]["name"], "web");
        assert_eq!(cs[0]["image"], "nginx:1.26");
        // untouched fields of the merged element survive
        assert_eq!(cs[0]["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
        assert_eq!(cs[1], json!({"name": "sidecar", "image": "busybox"}));
        // no directive leaks into the object
        assert!(!compact(&out).contains('$'));
    }

    #[test]
    fn smp_set_element_order_with_single_container() {
        // The exact shape from a one-container Deployment.
        let mut target = deployment();
        target["spec"]["template"]["spec"]["containers"].as_array_mut().unwrap().truncate(1);
        let patch = json!({"spec": {"replicas": 3, "template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}],
            "containers": [{"image": "nginx:1.26", "name": "web"}]
        }}}});
        let out = smp(&target, &patch, "apps/v1", "Deployment");
        let cs = containers(&out);
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0]["image"], "nginx:1.26");
        assert_eq!(cs[0]["ports"], json!([{"containerPort": 80, "protocol": "TCP"}]));
        assert_eq!(out["spec"]["replicas"], 3);
    }

    #[test]
    fn smp_env_var_removal_and_addition() {
        // kubectl apply removing env B and adding C.
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
            "containers": [{
                "$setElementOrder/env": [{"name": "A"}, {"name": "C"}],
                "env": [{"name": "C", "value": "3"}, {"$patch": "delete", "name": "B"}],
                "name": "web"
            }]
        }}}});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        assert_eq!(containers(&out)[0]["env"], json!([{"name": "A", "value": "1"}, {"name": "C", "value": "3"}]));
        assert_eq!(containers(&out)[0]["image"], "nginx:1.25");
    }

    #[test]
    fn smp_env_value_to_value_from() {
        // Changing value → valueFrom: kubectl sends `value: null`.
        let patch = json!({"spec": {"template": {"spec": {"containers": [{
            "name": "web",
            "env": [{"name": "A", "value": null, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        }]}}}});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        assert_eq!(containers(&out)[0]["env"][0], json!({"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}));
    }

    #[test]
    fn smp_container_removed_with_patch_delete() {
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}],
            "containers": [{"$patch": "delete", "name": "sidecar"}]
        }}}});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        let cs = containers(&out);
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0]["name"], "web");
        assert_eq!(cs[0]["image"], "nginx:1.25");
    }

    #[test]
    fn smp_merge_key_list_keeps_untouched_elements_and_prepends_new() {
        // Without $setElementOrder apimachinery puts patch-only elements first.
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "logger", "image": "fluentbit"}]}}}});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        let names: Vec<_> = containers(&out).iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["logger", "web", "sidecar"]);
        assert_eq!(containers(&out)[1]["image"], "nginx:1.25");

        // With it, the new element lands where the order says.
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}, {"name": "logger"}],
            "containers": [{"name": "logger", "image": "fluentbit"}]
        }}}});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        let names: Vec<_> = containers(&out).iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["web", "sidecar", "logger"]);
    }

    #[test]
    fn smp_set_element_order_reorders_and_keeps_server_only_elements() {
        let target = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"}]}});
        // The order names only d and b, so they swap; a and c are server-only and go before
        // a listed element whenever they came before it live (apimachinery
        // `mergeSortedSlice`): a < d and c < d, so both precede the reordered pair.
        let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "d"}, {"name": "b"}]}});
        let out = smp(&target, &patch, "v1", "Pod");
        let names: Vec<_> = out["spec"]["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a", "c", "d", "b"]);
        // Naming every element sets the full order.
        let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "d"}, {"name": "c"}, {"name": "b"}, {"name": "a"}]}});
        let out = smp(&target, &patch, "v1", "Pod");
        let names: Vec<_> = out["spec"]["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["d", "c", "b", "a"]);

        // Patch order inconsistent with $setElementOrder is rejected.
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "b", "image": "x"}, {"name": "a", "image": "y"}]
        }});
        let err = strategic_merge_patch(&target, &patch, "v1", "Pod").unwrap_err();
        assert_eq!(err.code(), 400);
    }

    #[test]
    fn smp_finalizers_are_a_set_with_delete_list() {
        let patch = json!({"metadata": {
            "finalizers": ["b", "c"],
            "$deleteFromPrimitiveList/finalizers": ["a"]
        }});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "c"]));

        let patch = json!({"metadata": {"$setElementOrder/finalizers": ["c", "a", "b"], "finalizers": ["c"]}});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));

        // A plain primitive list without merge strategy is replaced.
        let target = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "args": ["a", "b"]}]}}}});
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "args": ["c"]}]}}}});
        let out = smp(&target, &patch, "apps/v1", "Deployment");
        assert_eq!(containers(&out)[0]["args"], json!(["c"]));
    }

    #[test]
    fn smp_lists_without_merge_key_are_replaced() {
        let patch = json!({"spec": {"template": {"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}}}});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        assert_eq!(out["spec"]["template"]["spec"]["tolerations"], json!([{"key": "k2", "operator": "Exists"}]));

        // Unknown kinds: every list is replaced, maps still merge.
        let target = json!({"spec": {"items": [{"name": "a"}], "m": {"x": 1}}});
        let out = smp(&target, &json!({"spec": {"items": [{"name": "b"}], "m": {"y": 2}}}), "example.com/v1", "Widget");
        assert_eq!(out, json!({"spec": {"items": [{"name": "b"}], "m": {"x": 1, "y": 2}}}));
    }

    #[test]
    fn smp_ports_merge_by_container_port() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{
            "name": "web",
            "ports": [{"containerPort": 443, "protocol": "TCP"}, {"containerPort": 80, "name": "http"}]
        }]}}}});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        assert_eq!(containers(&out)[0]["ports"], json!([{"containerPort": 443, "protocol": "TCP"}, {"containerPort": 80, "protocol": "TCP", "name": "http"}]));

        let svc = json!({"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let out = smp(&svc, &json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}), "v1", "Service");
        assert_eq!(out["spec"]["ports"], json!([{"port": 80, "targetPort": 9090}, {"port": 443}]));
    }

    #[test]
    fn smp_status_conditions_merge_by_type() {
        let node = json!({"status": {
            "conditions": [{"type": "Ready", "status": "False"}, {"type": "MemoryPressure", "status": "False"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
        }});
        let patch = json!({"status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "Hostname", "address": "n1"}]
        }});
        let out = smp(&node, &patch, "v1", "Node");
        assert_eq!(out["status"]["conditions"], json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}, {"type": "MemoryPressure", "status": "False"}]));
        assert_eq!(out["status"]["addresses"], json!([{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.1"}]));
    }

    #[test]
    fn smp_owner_references_by_uid() {
        let cm = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}});
        let out = smp(&cm, &json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}}), "v1", "ConfigMap");
        assert_eq!(out["metadata"]["ownerReferences"], json!([{"uid": "2", "name": "b"}, {"uid": "1", "name": "a"}]));
    }

    #[test]
    fn smp_map_directives() {
        let target = deployment();
        // $patch: replace on a map
        let patch = json!({"spec": {"selector": {"$patch": "replace", "matchLabels": {"app": "x"}}}});
        let out = smp(&target, &patch, "apps/v1", "Deployment");
        assert_eq!(out["spec"]["selector"], json!({"matchLabels": {"app": "x"}}));
        // $patch: delete on a map clears it
        let patch = json!({"metadata": {"labels": {"$patch": "delete"}}});
        let out = smp(&target, &patch, "apps/v1", "Deployment");
        assert_eq!(out["metadata"]["labels"], json!({}));
        // $patch: merge is the default
        let patch = json!({"metadata": {"labels": {"$patch": "merge", "tier": "fe"}}});
        let out = smp(&target, &patch, "apps/v1", "Deployment");
        assert_eq!(out["metadata"]["labels"], json!({"app": "web", "tier": "fe"}));
        // unknown directive
        let err = strategic_merge_patch(&target, &json!({"metadata": {"$patch": "explode"}}), "apps/v1", "Deployment").unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(err.to_string().starts_with("unknown patch type: explode in map"), "{err}");
    }

    #[test]
    fn smp_list_replace_directive() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "only", "image": "x"},
            {"$patch": "replace"}
        ]}}}});
        let out = smp(&deployment(), &patch, "apps/v1", "Deployment");
        assert_eq!(containers(&out), &vec![json!({"name": "only", "image": "x"})]);
        let err = strategic_merge_patch(&deployment(), &json!({"spec": {"template": {"spec": {"containers": [{"$patch": "merge"}]}}}}), "apps/v1", "Deployment").unwrap_err();
        assert_eq!(err.to_string(), "merging lists cannot yet be specified in the patch");
    }

    #[test]
    fn smp_retain_keys() {
        let target = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let out = smp(&target, &patch, "apps/v1", "Deployment");
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 2}}}});
        let err = strategic_merge_patch(&target, &patch, "apps/v1", "Deployment").unwrap_err();
        assert_eq!(err, PatchError::BadRequest("invalid patch format of retainKeys".into()));
    }

    #[test]
    fn smp_nulls_and_new_values_are_cleaned() {
        let target = json!({"metadata": {"name": "x", "labels": {"a": "1"}}});
        let patch = json!({"metadata": {
            "labels": {"a": null},
            "annotations": {"n": null, "k": "v"},
            "missing": null
        }, "spec": {"template": {"spec": {"containers": [
            {"name": "c", "env": [{"name": "X", "value": "1"}, {"$patch": "delete", "name": "Y"}], "$setElementOrder/env": [{"name": "X"}]}
        ]}}}});
        let out = smp(&target, &patch, "apps/v1", "Deployment");
        assert_eq!(
            out,
            json!({
                "metadata": {"name": "x", "labels": {}, "annotations": {"k": "v"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [{"name": "X", "value": "1"}]}]}}}
            })
        );
    }

    #[test]
    fn smp_errors() {
        let t = deployment();
        // merge key missing in a merged-list element
        let err = strategic_merge_patch(&t, &json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}), "apps/v1", "Deployment").unwrap_err();
        assert_eq!(err.code(), 400);
        assert!(err.to_string().contains("does not contain declared merge key: name"), "{err}");
        // patch not an object
        assert_eq!(strategic_merge_patch(&t, &json!([1]), "apps/v1", "Deployment").unwrap_err().code(), 400);
        // malformed directives
        for p in [json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}), json!({"metadata": {"$setElementOrder/finalizers": "a"}}), json!({"metadata": {"labels": {"$retainKeys": "a"}}})] {
            assert_eq!(strategic_merge_patch(&t, &p, "apps/v1", "Deployment").unwrap_err().code(), 400, "{p}");
        }
        // mixed element types on a merged list
        let err = strategic_merge_patch(&t, &json!({"metadata": {"finalizers": [1]}}), "apps/v1", "Deployment").unwrap_err();
        assert_eq!(err.code(), 422);
    }

    #[test]
    fn smp_secret_and_configmap_data_merge() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1", "b": "2"}});
        let out = smp(&cm, &json!({"data": {"b": null, "c": "3"}}), "v1", "ConfigMap");
        assert_eq!(out["data"], json!({"a": "1", "c": "3"}));
    }

    #[test]
    fn smp_real_deployment_round_trip() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/real-objects/deployment-portdocs-1.json")).unwrap();
        let live: Value = serde_json::from_str(&text).unwrap();
        // An empty patch is the identity.
        assert_eq!(smp(&live, &json!({}), "apps/v1", "Deployment"), live);
        // Scaling only touches replicas.
        let out = smp(&live, &json!({"spec": {"replicas": 7}}), "apps/v1", "Deployment");
        let mut want = live.clone();
        want["spec"]["replicas"] = json!(7);
        assert_eq!(out, want);
    }
}
