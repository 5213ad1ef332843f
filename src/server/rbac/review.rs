//! The access reviews (`authorization.k8s.io/v1` SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectRulesReview) and `authentication.k8s.io/v1` SelfSubjectReview and TokenReview, answered from the authorizer chain and never stored (mirrors kube-apiserver's `registry/authorization` and `registry/authentication/selfsubjectreview`); uses `api` and the server's authorizer.
//!
//! These back `kubectl auth can-i`, `kubectl auth can-i --list` and `kubectl auth whoami`.
//! Only `POST` is served (405 otherwise); the answer is the posted object with `status`
//! filled in, 201 Created, as kube-apiserver answers. A rules review lists the RBAC rules;
//! it is `incomplete` for agents and bootstrap tokens, whose fixed rules it does not list.

use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::{json, Value};

use super::rules::{Attributes, Target};
use super::Rbac;
use crate::api::handler::{decode_body, error_response, json_response, Response};
use crate::api::request::{Query, Target as ApiTarget};
use crate::api::{ApiError, ApiResult, ApiServer, Caller};
use crate::server::authz::Principal;
use crate::server::identity::Authenticators;

/// A TokenReview: who `spec.token` authenticates as, by every bearer-token authenticator
/// of the server (static, bootstrap, ServiceAccount, OIDC and user tokens), for
/// `spec.audiences` (default: the API audiences); `status.audiences` lists those the token is
/// valid for (mirrors kube-apiserver's `tokenreviews`). The token is not echoed back.
async fn token_review(api: &ApiServer, identity: &Authenticators, obj: Value) -> Value {
    let token = obj.pointer("/spec/token").and_then(Value::as_str).unwrap_or("").to_string();
    let audiences = strs(obj.pointer("/spec/audiences"));
    let asked = (!audiences.is_empty()).then_some(audiences.as_slice());
    let status = match identity.authenticate(api, &token, asked).await {
        Some(a) => {
            let mut user = json!({"username": a.caller.user, "groups": a.caller.groups});
            if let Some(uid) = a.uid {
                user["uid"] = json!(uid);
            }
            json!({"authenticated": true, "user": user, "audiences": a.audiences})
        }
        None => json!({"authenticated": false}),
    };
    let mut out = with_status(obj, "TokenReview", "authentication.k8s.io/v1", status);
    if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("token");
    }
    out
}

/// Whether `method path` addresses a review resource ([`crate::api::ResourceInfo::create_only`]).
pub fn is_review(api: &ApiServer, method: &http::Method, path: &str) -> bool {
    matches!(api.classify(method, path, &Query::default()), Ok((_, ApiTarget::Resource(r))) if r.info.create_only())
}

/// Answers a request [`is_review`] accepted. `uid` is the caller's uid, when known
/// (impersonation), for SelfSubjectReview. Errors become Status responses (405 for anything
/// but a POST to the collection, 400 for a malformed review).
/// `identity` answers TokenReviews (every kind of token the server accepts).
pub async fn handle(api: &ApiServer, rbac: &Rbac, identity: &Authenticators, req: crate::http::Request, caller: &Caller, uid: Option<&str>) -> Response {
    let query = Query::parse(req.uri().query());
    let r = match api.classify(req.method(), req.uri().path(), &query) {
        Ok((_, ApiTarget::Resource(r))) if r.info.create_only() => r,
        _ => return error_response(&ApiError::NoSuchResource),
    };
    if req.method() != http::Method::POST || r.name.is_some() {
        return error_response(&ApiError::MethodNotAllowed);
    }
    let ct = req.headers().get("content-type").and_then(|v| v.to_str().ok()).map(|s| s.split(';').next().unwrap_or("").trim().to_ascii_lowercase()).unwrap_or_default();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return error_response(&ApiError::BadRequest(format!("reading the request body: {e}"))),
    };
    let result = async {
        let obj = decode_body(&ct, &body)?;
        if obj.get("kind").and_then(Value::as_str).is_some_and(|k| k != r.info.kind) {
            return Err(ApiError::BadRequest(format!("expected a {} object", r.info.kind)));
        }
        if r.info.resource == "tokenreviews" {
            return Ok(token_review(api, identity, obj).await);
        }
        answer(api, rbac, &r.info.api_version(), r.info.resource, r.namespace.as_deref(), obj, caller, uid).await
    }
    .await;
    match result {
        Ok(v) => json_response(StatusCode::CREATED, &v),
        Err(e) => error_response(&e),
    }
}

fn invalid(kind: &str, field: &str, msg: &str) -> ApiError {
    ApiError::BadRequest(format!("{kind}.authorization.k8s.io is invalid: {field}: {msg}"))
}

fn strs(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Decides one access review `spec` for `subject`.
async fn decide(api: &ApiServer, rbac: &Rbac, kind: &str, spec: &Value, subject: &Caller) -> ApiResult<bool> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    if let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        let (verb, group, resource, sub, ns, name) = (s(ra, "verb"), s(ra, "group"), s(ra, "resource"), s(ra, "subresource"), s(ra, "namespace"), s(ra, "name"));
        let a = Attributes { verb: &verb, target: Target::Resource { group: &group, resource: &resource, subresource: &sub, namespace: &ns, name: &name } };
        return Ok(crate::server::authz::can(api, rbac, subject, &a).await);
    }
    if let Some(nra) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        let (verb, path) = (s(nra, "verb"), s(nra, "path"));
        let a = Attributes { verb: &verb, target: Target::NonResource { path: &path } };
        return Ok(crate::server::authz::can(api, rbac, subject, &a).await);
    }
    Err(invalid(kind, "spec", "Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified"))
}

fn with_status(mut obj: Value, kind: &str, api_version: &str, status: Value) -> Value {
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]["creationTimestamp"] = Value::Null;
    obj["status"] = status;
    obj
}

fn access_status(allowed: bool) -> Value {
    if allowed {
        json!({"allowed": true})
    } else {
        json!({"allowed": false})
    }
}

#[allow(clippy::too_many_arguments)]
async fn answer(api: &ApiServer, rbac: &Rbac, api_version: &str, resource: &str, path_ns: Option<&str>, mut obj: Value, caller: &Caller, uid: Option<&str>) -> ApiResult<Value> {
    const AUTHZ: &str = "authorization.k8s.io/v1";
    let spec = obj.get("spec").cloned().unwrap_or(json!({}));
    match resource {
        "selfsubjectaccessreviews" => {
            let allowed = decide(api, rbac, "SelfSubjectAccessReview", &spec, caller).await?;
            Ok(with_status(obj, "SelfSubjectAccessReview", AUTHZ, access_status(allowed)))
        }
        "subjectaccessreviews" | "localsubjectaccessreviews" => {
            let kind = if resource == "subjectaccessreviews" { "SubjectAccessReview" } else { "LocalSubjectAccessReview" };
            let user = spec.get("user").and_then(Value::as_str).unwrap_or("").to_string();
            let groups = strs(spec.get("groups"));
            if user.is_empty() && groups.is_empty() {
                return Err(invalid(kind, "spec.user", "Invalid value: \"\": at least one of user or group must be specified"));
            }
            let mut spec = spec;
            if let Some(ns) = path_ns {
                let given = spec.pointer("/resourceAttributes/namespace").and_then(Value::as_str).unwrap_or("");
                if spec.get("resourceAttributes").is_none() || (!given.is_empty() && given != ns) {
                    return Err(invalid(kind, "spec.resourceAttributes.namespace", &format!("Invalid value: {given:?}: must match metadata.namespace")));
                }
                spec["resourceAttributes"]["namespace"] = json!(ns);
                obj["spec"] = spec.clone();
            }
            let allowed = decide(api, rbac, kind, &spec, &Caller { user, groups }).await?;
            Ok(with_status(obj, kind, AUTHZ, access_status(allowed)))
        }
        "selfsubjectrulesreviews" => {
            let ns = spec.get("namespace").and_then(Value::as_str).unwrap_or("");
            let rules = rbac.rules_for(&caller.user, &caller.groups, ns);
            let (mut res, mut urls) = (Vec::new(), Vec::new());
            for r in &rules {
                if !r.resources.is_empty() {
                    let mut o = json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources});
                    if !r.resource_names.is_empty() {
                        o["resourceNames"] = json!(r.resource_names);
                    }
                    res.push(o);
                }
                if !r.non_resource_urls.is_empty() {
                    urls.push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
                }
            }
            let fixed = matches!(Principal::of(caller), Principal::Agent(_) | Principal::Bootstrap);
            let mut status = json!({"resourceRules": res, "nonResourceRules": urls, "incomplete": fixed});
            if fixed {
                status["evaluationError"] = json!("the federation's fixed rules for agents and bootstrap tokens are not listed");
            }
            Ok(with_status(obj, "SelfSubjectRulesReview", AUTHZ, status))
        }
        "selfsubjectreviews" => {
            let mut info = json!({"username": caller.user, "groups": caller.groups});
            if let Some(u) = uid {
                info["uid"] = json!(u);
            }
            Ok(with_status(obj, "SelfSubjectReview", api_version, json!({"userInfo": info})))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}
