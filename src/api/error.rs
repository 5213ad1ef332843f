//! API errors and their Kubernetes `Status` form (mirrors apimachinery `pkg/api/errors`).

use serde_json::{json, Value};

use crate::storage::StorageError;

/// One cause of an Invalid (422) error: `{reason, message, field}`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// Machine reason, e.g. `FieldValueInvalid`, `FieldValueRequired`.
    pub reason: String,
    /// Human message, e.g. `Invalid value: "Foo": a lowercase RFC 1123 subdomain …`.
    pub message: String,
    /// JSON path of the field, e.g. `metadata.name`.
    pub field: String,
}

/// A failed API request. `status()` renders the `Status` object kube-apiserver would send.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 BadRequest.
    #[error("{0}")]
    BadRequest(String),
    /// 401 Unauthorized.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403 Forbidden: message as kube-apiserver's RBAC denial.
    #[error("{0}")]
    Forbidden(String),
    /// 404 NotFound for `resource` (plural, with `.group` when the group is not core) and `name`.
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String },
    /// 404 for a path that names no known resource.
    #[error("the server could not find the requested resource")]
    NoSuchResource,
    /// 405 MethodNotAllowed.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 409 AlreadyExists.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String },
    /// 409 Conflict on a stale resourceVersion or a precondition.
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    Conflict { resource: String, name: String, message: String },
    /// 409 Conflict with a free-form message (e.g. server-side apply field conflicts).
    #[error("{message}")]
    ConflictMessage { message: String, causes: Vec<Cause> },
    /// 410 Gone / Expired: the requested resourceVersion is too old.
    #[error("{0}")]
    Expired(String),
    /// 410 Expired for a continue token whose revision was compacted; the Status carries
    /// `token` in `metadata.continue` (continues at the latest revision).
    #[error("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")]
    ContinueExpired { token: String },
    /// 413 RequestEntityTooLarge.
    #[error("{0}")]
    TooLarge(String),
    /// 415 UnsupportedMediaType.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 429 TooManyRequests with `details.retryAfterSeconds` and a `Retry-After` header
    /// (mirrors kube-apiserver's max-requests-inflight refusal).
    #[error("{message}")]
    TooManyRequests { message: String, retry_after_seconds: u64 },
    /// 422 Invalid: `kind` is the Kind (e.g. `Deployment`).
    #[error("{kind} \"{name}\" is invalid: {}", causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect::<Vec<_>>().join(", "))]
    Invalid { kind: String, group: String, name: String, causes: Vec<Cause> },
    /// 500 InternalError.
    #[error("Internal error occurred: {0}")]
    Internal(String),
    /// 503 ServiceUnavailable (storage unreachable and the like).
    #[error("{0}")]
    Unavailable(String),
    /// 504 Timeout with cause ResourceVersionTooLarge (mirrors kube-apiserver's watch cache).
    #[error("Too large resource version: {requested}, current: {current}")]
    ResourceVersionTooLarge { requested: i64, current: i64 },
}

impl ApiError {
    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) => 400,
            ApiError::Unauthorized => 401,
            ApiError::Forbidden(_) => 403,
            ApiError::NotFound { .. } | ApiError::NoSuchResource => 404,
            ApiError::MethodNotAllowed => 405,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } | ApiError::ConflictMessage { .. } => 409,
            ApiError::Expired(_) | ApiError::ContinueExpired { .. } => 410,
            ApiError::TooLarge(_) => 413,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::TooManyRequests { .. } => 429,
            ApiError::Invalid { .. } => 422,
            ApiError::Internal(_) => 500,
            ApiError::Unavailable(_) => 503,
            ApiError::ResourceVersionTooLarge { .. } => 504,
        }
    }

    /// `Status.reason` as kube-apiserver spells it.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::NotFound { .. } | ApiError::NoSuchResource => "NotFound",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ConflictMessage { .. } => "Conflict",
            ApiError::Expired(_) | ApiError::ContinueExpired { .. } => "Expired",
            ApiError::TooLarge(_) => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::TooManyRequests { .. } => "TooManyRequests",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::Internal(_) => "InternalError",
            ApiError::Unavailable(_) => "ServiceUnavailable",
            ApiError::ResourceVersionTooLarge { .. } => "Timeout",
        }
    }

    /// The `Status` object (`kind: Status, apiVersion: v1`) for this error.
    pub fn status(&self) -> Value {
        let mut st = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let details = match self {
            ApiError::NotFound { resource, name } | ApiError::AlreadyExists { resource, name } | ApiError::Conflict { resource, name, .. } => Some(resource_details(resource, name)),
            ApiError::Invalid { kind, group, name, causes } => {
                let mut d = json!({"name": name, "kind": kind});
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                d["causes"] = causes_json(causes);
                Some(d)
            }
            ApiError::TooManyRequests { retry_after_seconds, .. } => Some(json!({"retryAfterSeconds": retry_after_seconds})),
            ApiError::ConflictMessage { causes, .. } if !causes.is_empty() => Some(json!({"causes": causes_json(causes)})),
            ApiError::ResourceVersionTooLarge { .. } => Some(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1
            })),
            _ => None,
        };
        if let Some(d) = details {
            st["details"] = d;
        }
        if let ApiError::ContinueExpired { token } = self {
            st["metadata"] = json!({"continue": token});
        }
        st
    }
}

fn causes_json(causes: &[Cause]) -> Value {
    Value::Array(causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect())
}

/// `details` for a resource error: `resource` may be `deployments.apps`; split the group out.
fn resource_details(resource: &str, name: &str) -> Value {
    match resource.split_once('.') {
        Some((res, group)) => json!({"name": name, "group": group, "kind": res}),
        None => json!({"name": name, "kind": resource}),
    }
}

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Compacted { requested, compacted } => ApiError::Expired(format!("too old resource version: {requested} ({compacted})")),
            StorageError::FutureRevision { requested, current } => ApiError::ResourceVersionTooLarge { requested, current },
            StorageError::QuotaExceeded(m) => ApiError::Internal(format!("etcdserver: {m}")),
            StorageError::TooLarge(m) => ApiError::TooLarge(format!("Request entity too large: {m}")),
            StorageError::Unavailable(m) => ApiError::Unavailable(format!("storage unavailable: {m}")),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// Result alias of the API layer.
pub type ApiResult<T> = Result<T, ApiError>;
