//! Service-account tokens (the TokenRequest subresource) and a small RBAC evaluator for fedsim.
//!
//! Tokens are JWTs signed with HMAC-SHA256 under a per-simulator key (kube-apiserver signs
//! with RS256/ES256; clients never verify the signature, so the algorithm does not show).
//! Claims follow kube-apiserver's bound tokens: `iss`, `sub` =
//! `system:serviceaccount:<ns>:<name>`, `aud`, `iat`, `nbf`, `exp` and
//! `kubernetes.io: {namespace, serviceaccount: {name, uid}}`. A token authenticates only
//! while it has not expired and its ServiceAccount still exists with the same uid.
//!
//! Authorization (mirrors kube-apiserver's RBAC authorizer, without aggregation or
//! non-resource rules): a request is allowed when a ClusterRoleBinding (granting a
//! ClusterRole) or a RoleBinding in the request's namespace (granting a Role of that
//! namespace or a ClusterRole) names the user, one of its groups, or its ServiceAccount,
//! and one rule of the role matches the API group, resource (or `resource/subresource`),
//! verb and, when the rule lists them, the object name. `*` matches anything.
//!
//! Impersonation (mirrors kube-apiserver's impersonation filter): a request with
//! `Impersonate-User` (and optionally `Impersonate-Group`) acts as that user when the
//! authenticated caller may `impersonate` the user (`users`, or `serviceaccounts` in its
//! namespace for `system:serviceaccount:<ns>:<name>`) and every group (`groups`); see
//! [`impersonate`].

use std::sync::Arc;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use http::StatusCode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api::handler::{SubresourceHandler, SubresourceRequest};
use crate::api::request::{ResourceRequest, Target, Verb};
use crate::api::{object, ApiError, ApiResult, ApiServer, Caller};
use crate::storage::Storage;

/// Prefix of service-account user names.
pub const SA_USER_PREFIX: &str = "system:serviceaccount:";
/// Group of every service account.
pub const SA_GROUP: &str = "system:serviceaccounts";
/// Issuer written into tokens (kube-apiserver's default `--service-account-issuer`).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Default and smallest token lifetimes of a TokenRequest, in seconds (as kube-apiserver).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// Smallest accepted `spec.expirationSeconds`.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;

/// Errors of token verification.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Not three base64url parts with JSON header and claims.
    #[error("malformed token")]
    Malformed,
    /// The signature does not verify under this simulator's key.
    #[error("bad signature")]
    Signature,
    /// `exp` has passed.
    #[error("token expired")]
    Expired,
}

/// What a valid service-account token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenClaims {
    /// Namespace of the ServiceAccount.
    pub namespace: String,
    /// Name of the ServiceAccount.
    pub name: String,
    /// uid of the ServiceAccount at issuance.
    pub uid: String,
    /// Expiry, Unix seconds.
    pub exp: i64,
}

/// Signs and verifies service-account tokens with one HMAC-SHA256 key. `Debug` hides the key.
pub struct TokenSigner {
    key: [u8; 32],
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSigner").finish_non_exhaustive()
    }
}

fn hmac_sha256(key: &[u8; 32], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    k[..32].copy_from_slice(key);
    let mut inner = Sha256::new();
    inner.update(k.iter().map(|b| b ^ 0x36).collect::<Vec<u8>>());
    inner.update(msg);
    let ih = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.iter().map(|b| b ^ 0x5c).collect::<Vec<u8>>());
    outer.update(ih);
    outer.finalize().into()
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

impl TokenSigner {
    /// A signer with a fresh random key.
    pub fn random() -> Self {
        TokenSigner { key: rand::random() }
    }

    /// A signer with the given key.
    pub fn with_key(key: [u8; 32]) -> Self {
        TokenSigner { key }
    }

    /// Issues a token for ServiceAccount `namespace/name` (uid `uid`) valid from `now` for
    /// `seconds`, for `audiences` (default: the issuer).
    pub fn issue(&self, namespace: &str, name: &str, uid: &str, audiences: &[String], now: DateTime<Utc>, seconds: i64) -> String {
        let iat = now.timestamp();
        let aud: Vec<String> = if audiences.is_empty() { vec![ISSUER.to_string()] } else { audiences.to_vec() };
        let header = json!({"alg": "HS256", "kid": "fedsim", "typ": "JWT"});
        let claims = json!({
            "aud": aud,
            "exp": iat + seconds,
            "iat": iat,
            "iss": ISSUER,
            "jti": object::new_uid(),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
            "nbf": iat,
            "sub": format!("{SA_USER_PREFIX}{namespace}:{name}"),
        });
        let signing_input = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
        let sig = hmac_sha256(&self.key, signing_input.as_bytes());
        format!("{signing_input}.{}", b64(&sig))
    }

    /// Verifies a token's signature and expiry at `now`.
    pub fn verify(&self, token: &str, now: DateTime<Utc>) -> Result<TokenClaims, TokenError> {
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(TokenError::Malformed);
        };
        let dec = |p: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p).map_err(|_| TokenError::Malformed);
        let sig = dec(s)?;
        let want = hmac_sha256(&self.key, format!("{h}.{c}").as_bytes());
        if !crate::pki::auth::constant_time_eq(&sig, &want) {
            return Err(TokenError::Signature);
        }
        let claims: Value = serde_json::from_slice(&dec(c)?).map_err(|_| TokenError::Malformed)?;
        let exp = claims.get("exp").and_then(Value::as_i64).ok_or(TokenError::Malformed)?;
        if exp <= now.timestamp() {
            return Err(TokenError::Expired);
        }
        let k = claims.get("kubernetes.io").ok_or(TokenError::Malformed)?;
        let s = |p: &str| k.pointer(p).and_then(Value::as_str).map(str::to_string).ok_or(TokenError::Malformed);
        Ok(TokenClaims { namespace: s("/namespace")?, name: s("/serviceaccount/name")?, uid: s("/serviceaccount/uid")?, exp })
    }

    /// The caller a token authenticates as, or `None`: the token must verify and its
    /// ServiceAccount must still exist in `store` with the uid it was issued for.
    pub async fn authenticate(&self, store: &dyn Storage, token: &str) -> Option<Caller> {
        let claims = self.verify(token, Utc::now()).ok()?;
        let key = format!("/registry/core/serviceaccounts/{}/{}", claims.namespace, claims.name);
        let kv = store.get(&key).await.ok()??;
        let sa: Value = serde_json::from_slice(&kv.value).ok()?;
        if object::meta_str(&sa, "uid") != Some(claims.uid.as_str()) {
            return None;
        }
        Some(sa_caller(&claims.namespace, &claims.name))
    }
}

/// The caller of service account `ns/name`, with kube-apiserver's groups.
pub fn sa_caller(ns: &str, name: &str) -> Caller {
    Caller { user: format!("{SA_USER_PREFIX}{ns}:{name}"), groups: vec![SA_GROUP.to_string(), format!("{SA_GROUP}:{ns}"), crate::pki::auth::AUTHENTICATED_GROUP.to_string()] }
}

/// `POST …/serviceaccounts/<name>/token`: returns an `authentication.k8s.io/v1 TokenRequest`
/// with `status.token` and `status.expirationTimestamp` (mirrors kube-apiserver's
/// TokenREST). Errors: 404 when the ServiceAccount does not exist, 405 for other methods,
/// 422 for `expirationSeconds` below 600.
pub struct TokenRequestHandler {
    /// The signer shared with authentication.
    pub signer: Arc<TokenSigner>,
}

#[async_trait::async_trait]
impl SubresourceHandler for TokenRequestHandler {
    fn discovery(&self) -> Option<(&'static str, &'static str, &'static str, &'static [&'static str])> {
        Some(("authentication.k8s.io", "v1", "TokenRequest", &["create"]))
    }

    async fn handle(&self, api: &Arc<ApiServer>, req: SubresourceRequest<'_>) -> ApiResult<(StatusCode, Value)> {
        if req.method != http::Method::POST {
            return Err(ApiError::MethodNotAllowed);
        }
        let r = req.resource;
        let name = r.name.clone().unwrap_or_default();
        let ns = r.namespace.clone().unwrap_or_default();
        let get = ResourceRequest { subresource: None, ..r.clone() };
        let sa = api.get(&get).await?;
        let uid = object::meta_str(&sa, "uid").unwrap_or("").to_string();
        let body = req.body.unwrap_or_else(|| json!({}));
        if let Some(k) = body.get("kind").and_then(Value::as_str) {
            if k != "TokenRequest" {
                return Err(ApiError::BadRequest(format!("the kind in the data ({k}) does not match the expected kind (TokenRequest)")));
            }
        }
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let seconds = spec.get("expirationSeconds").and_then(Value::as_i64).unwrap_or(DEFAULT_EXPIRATION_SECONDS);
        if seconds < MIN_EXPIRATION_SECONDS {
            return Err(ApiError::Invalid {
                kind: "TokenRequest".into(),
                group: "authentication.k8s.io".into(),
                name,
                causes: vec![crate::api::Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!("Invalid value: {seconds}: may not specify a duration less than 10 minutes"),
                    field: "spec.expirationSeconds".into(),
                }],
            });
        }
        let audiences: Vec<String> = spec.get("audiences").and_then(Value::as_array).map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default();
        let now = Utc::now();
        let token = self.signer.issue(&ns, &name, &uid, &audiences, now, seconds);
        let exp = (now + chrono::Duration::seconds(seconds)).format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let aud = if audiences.is_empty() { vec![ISSUER.to_string()] } else { audiences };
        let mut out_spec = spec;
        out_spec["audiences"] = json!(aud);
        out_spec["expirationSeconds"] = json!(seconds);
        out_spec["boundObjectRef"] = out_spec.get("boundObjectRef").cloned().unwrap_or(Value::Null);
        Ok((
            StatusCode::CREATED,
            json!({
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": object::now_rfc3339()},
                "spec": out_spec,
                "status": {"token": token, "expirationTimestamp": exp},
            }),
        ))
    }
}

/// `POST …/pods/<name>/eviction` (policy/v1 Eviction): deletes the pod with the Eviction's
/// `deleteOptions` and answers 201 with a Success Status (mirrors kube-apiserver's
/// EvictionREST without PodDisruptionBudgets: fedsim has no disruption controller, so every
/// eviction is allowed). Errors: 404 for a missing pod, 405 for other methods, 400 for a body
/// that is not an Eviction.
pub struct EvictionHandler;

#[async_trait::async_trait]
impl SubresourceHandler for EvictionHandler {
    fn discovery(&self) -> Option<(&'static str, &'static str, &'static str, &'static [&'static str])> {
        Some(("policy", "v1", "Eviction", &["create"]))
    }

    async fn handle(&self, api: &Arc<ApiServer>, req: SubresourceRequest<'_>) -> ApiResult<(StatusCode, Value)> {
        if req.method != http::Method::POST {
            return Err(ApiError::MethodNotAllowed);
        }
        let body = req.body.unwrap_or_else(|| json!({}));
        if body.get("kind").and_then(Value::as_str).is_some_and(|k| k != "Eviction") {
            return Err(ApiError::BadRequest(format!("the kind in the data ({}) does not match the expected kind (Eviction)", body["kind"])));
        }
        let pod = ResourceRequest { subresource: None, ..req.resource.clone() };
        let opts = body.get("deleteOptions").cloned().unwrap_or_else(|| json!({}));
        let ctx = crate::api::handler::Ctx { caller: req.caller.clone(), dry_run: false, manager: "eviction".into(), apply: false };
        api.delete(&pod, &opts, &ctx).await?;
        Ok((StatusCode::CREATED, json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})))
    }
}

// ---------------------------------------------------------------------------------------------
// RBAC
// ---------------------------------------------------------------------------------------------

/// What is being asked, in RBAC's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// RBAC verb (`get`, `list`, `watch`, `create`, …).
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// Resource, with `/subresource` when one is addressed (`serviceaccounts/token`).
    pub resource: String,
    /// Namespace, `None` for cluster-scoped or all-namespaces requests.
    pub namespace: Option<String>,
    /// Object name, when the path names one.
    pub name: Option<String>,
}

impl Attributes {
    /// Attributes of a parsed API request; `None` for discovery paths (always allowed).
    pub fn of(verb: Verb, target: &Target) -> Option<Attributes> {
        let Target::Resource(r) = target else { return None };
        let resource = match &r.subresource {
            Some(s) => format!("{}/{s}", r.info.resource),
            None => r.info.resource.to_string(),
        };
        Some(Attributes { verb: verb.as_str().to_string(), group: r.info.group.to_string(), resource, namespace: if r.info.namespaced { r.namespace.clone() } else { None }, name: r.name.clone() })
    }

    /// kube-apiserver's Forbidden message for `user`.
    pub fn forbidden(&self, user: &str) -> ApiError {
        let (res, sub) = match self.resource.split_once('/') {
            Some((r, s)) => (r.to_string(), Some(s)),
            None => (self.resource.clone(), None),
        };
        let what = match &self.name {
            Some(n) => format!("{res} \"{n}\""),
            None => res.clone(),
        };
        let resource_desc = match sub {
            Some(s) => format!("resource \"{res}/{s}\""),
            None => format!("resource \"{res}\""),
        };
        let scope = match &self.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        ApiError::Forbidden(format!("{what} is forbidden: User \"{user}\" cannot {} {resource_desc} in API group \"{}\" {scope}", self.verb, self.group))
    }
}

fn strs(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

fn subject_matches(binding: &Value, caller: &Caller) -> bool {
    let ns_of_binding = object::meta_str(binding, "namespace");
    binding.get("subjects").and_then(Value::as_array).is_some_and(|subs| {
        subs.iter().any(|s| {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("");
            match s.get("kind").and_then(Value::as_str) {
                Some("User") => name == caller.user,
                Some("Group") => caller.groups.iter().any(|g| g == name),
                Some("ServiceAccount") => {
                    let ns = s.get("namespace").and_then(Value::as_str).or(ns_of_binding).unwrap_or("");
                    caller.user == format!("{SA_USER_PREFIX}{ns}:{name}")
                }
                _ => false,
            }
        })
    })
}

fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let any = |list: &[&str], want: &str| list.iter().any(|x| *x == "*" || *x == want);
    let verbs = strs(rule.get("verbs"));
    let groups = strs(rule.get("apiGroups"));
    let resources = strs(rule.get("resources"));
    let names = strs(rule.get("resourceNames"));
    let res_ok = resources.iter().any(|r| {
        *r == "*" || *r == a.resource || (r.ends_with("/*") && a.resource.starts_with(&r[..r.len() - 1])) || (r.starts_with("*/") && a.resource.split_once('/').is_some_and(|(_, s)| s == &r[2..]))
    });
    let names_ok = names.is_empty() || a.name.as_deref().is_some_and(|n| names.contains(&n));
    any(&verbs, &a.verb) && any(&groups, &a.group) && res_ok && names_ok
}

async fn role_rules(store: &dyn Storage, role_ref: &Value, binding_ns: Option<&str>) -> Vec<Value> {
    let kind = role_ref.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = role_ref.get("name").and_then(Value::as_str).unwrap_or("");
    let key = match (kind, binding_ns) {
        ("ClusterRole", _) => format!("/registry/rbac.authorization.k8s.io/clusterroles/{name}"),
        ("Role", Some(ns)) => format!("/registry/rbac.authorization.k8s.io/roles/{ns}/{name}"),
        _ => return vec![],
    };
    let Ok(Some(kv)) = store.get(&key).await else { return vec![] };
    serde_json::from_slice::<Value>(&kv.value).ok().and_then(|r| r.get("rules").and_then(Value::as_array).cloned()).unwrap_or_default()
}

async fn list_values(store: &dyn Storage, prefix: &str) -> Vec<Value> {
    match store.list(prefix, "", 0, 0).await {
        Ok(res) => res.kvs.iter().filter_map(|kv| serde_json::from_slice(&kv.value).ok()).collect(),
        Err(_) => vec![],
    }
}

/// Decides a request by the RBAC objects in `store` (see the module docs). Members of
/// `system:masters` may do everything. Error: 403 Forbidden with kube-apiserver's message.
pub async fn authorize(store: &dyn Storage, caller: &Caller, a: &Attributes) -> ApiResult<()> {
    if caller.groups.iter().any(|g| g == crate::pki::auth::MASTERS_GROUP) {
        return Ok(());
    }
    for b in list_values(store, "/registry/rbac.authorization.k8s.io/clusterrolebindings/").await {
        if subject_matches(&b, caller) {
            let rules = role_rules(store, b.get("roleRef").unwrap_or(&Value::Null), None).await;
            if rules.iter().any(|r| rule_allows(r, a)) {
                return Ok(());
            }
        }
    }
    if let Some(ns) = &a.namespace {
        for b in list_values(store, &format!("/registry/rbac.authorization.k8s.io/rolebindings/{ns}/")).await {
            if subject_matches(&b, caller) {
                let rules = role_rules(store, b.get("roleRef").unwrap_or(&Value::Null), Some(ns)).await;
                if rules.iter().any(|r| rule_allows(r, a)) {
                    return Ok(());
                }
            }
        }
    }
    Err(a.forbidden(&caller.user))
}

/// Header naming the user to act as (kube-apiserver's `Impersonate-User`).
pub const IMPERSONATE_USER: &str = "impersonate-user";
/// Header naming one group to act with; repeated for several (`Impersonate-Group`).
pub const IMPERSONATE_GROUP: &str = "impersonate-group";

/// The caller a request acts as: `caller` itself without impersonation headers, else the
/// impersonated user with the requested groups plus `system:authenticated` (a service
/// account without requested groups gets its service-account groups), as kube-apiserver's
/// impersonation filter builds it. Errors: 400 when groups (or `Impersonate-Extra-*` or
/// `Impersonate-Uid`) come without a user; 403 with kube-apiserver's message when `caller`
/// may not `impersonate` the user or one of the groups. Nothing of the request is served then.
pub async fn impersonate(store: &dyn Storage, caller: &Caller, headers: &http::HeaderMap) -> ApiResult<Caller> {
    let user = headers.get(IMPERSONATE_USER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let groups: Vec<String> = headers.get_all(IMPERSONATE_GROUP).iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect();
    let others = headers.keys().any(|k| k.as_str().starts_with("impersonate-extra-") || k.as_str() == "impersonate-uid");
    let Some(user) = user else {
        if !groups.is_empty() || others {
            return Err(ApiError::BadRequest("requested impersonation of groups or extra fields without impersonating a user".into()));
        }
        return Ok(caller.clone());
    };
    let sa = user.strip_prefix(SA_USER_PREFIX).and_then(|r| r.split_once(':'));
    let target = match sa {
        Some((ns, name)) => Attributes { verb: "impersonate".into(), group: "".into(), resource: "serviceaccounts".into(), namespace: Some(ns.to_string()), name: Some(name.to_string()) },
        None => Attributes { verb: "impersonate".into(), group: "".into(), resource: "users".into(), namespace: None, name: Some(user.clone()) },
    };
    authorize(store, caller, &target).await?;
    for g in &groups {
        let a = Attributes { verb: "impersonate".into(), group: "".into(), resource: "groups".into(), namespace: None, name: Some(g.clone()) };
        authorize(store, caller, &a).await?;
    }
    let mut out = match sa {
        Some((ns, name)) if groups.is_empty() => sa_caller(ns, name),
        _ => Caller { user: user.clone(), groups },
    };
    if user != "system:anonymous" && !out.groups.iter().any(|g| g == crate::pki::auth::AUTHENTICATED_GROUP) {
        out.groups.push(crate::pki::auth::AUTHENTICATED_GROUP.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_and_expire() {
        let s = TokenSigner::random();
        let now = Utc::now();
        let t = s.issue("ns", "sa", "u-1", &[], now, 600);
        let c = s.verify(&t, now).unwrap();
        assert_eq!((c.namespace.as_str(), c.name.as_str(), c.uid.as_str()), ("ns", "sa", "u-1"));
        assert_eq!(s.verify(&t, now + chrono::Duration::seconds(601)), Err(TokenError::Expired));
        assert_eq!(TokenSigner::random().verify(&t, now), Err(TokenError::Signature));
        assert_eq!(s.verify("a.b", now), Err(TokenError::Malformed));
        let mut bad = t.clone();
        bad.insert(t.find('.').unwrap() + 3, 'x');
        assert!(s.verify(&bad, now).is_err());
    }

    #[test]
    fn rules_match() {
        let a = Attributes { verb: "list".into(), group: "".into(), resource: "pods".into(), namespace: None, name: None };
        assert!(rule_allows(&json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}), &a));
        assert!(rule_allows(&json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}), &a));
        assert!(!rule_allows(&json!({"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["list"]}), &a));
        assert!(!rule_allows(&json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}), &a));
        assert!(!rule_allows(&json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"], "resourceNames": ["x"]}), &a));
        let sub = Attributes { resource: "serviceaccounts/token".into(), verb: "create".into(), ..a.clone() };
        assert!(rule_allows(&json!({"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]}), &sub));
        assert!(!rule_allows(&json!({"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create"]}), &sub));
        let msg = a.forbidden("system:serviceaccount:x:y").to_string();
        assert_eq!(msg, "pods is forbidden: User \"system:serviceaccount:x:y\" cannot list resource \"pods\" in API group \"\" at the cluster scope");
    }

    /// Impersonation needs `impersonate` on the user and on every group; the impersonated
    /// caller gets the groups asked for plus `system:authenticated`.
    #[tokio::test]
    async fn impersonation_is_authorized_per_user_and_group() {
        let store = crate::storage::memory::MemoryStorage::new();
        let put = |k: &str, v: Value| {
            let store = &store;
            let (k, v) = (k.to_string(), v.to_string());
            async move { store.create(&k, bytes::Bytes::from(v)).await.unwrap() }
        };
        put(
            "/registry/rbac.authorization.k8s.io/clusterroles/imp",
            json!({"rules": [
                {"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["jane"]},
                {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"], "resourceNames": ["dev"]},
            ]}),
        )
        .await;
        put(
            "/registry/rbac.authorization.k8s.io/clusterrolebindings/imp",
            json!({"roleRef": {"kind": "ClusterRole", "name": "imp"},
            "subjects": [{"kind": "ServiceAccount", "name": "proxy", "namespace": "sys"}]}),
        )
        .await;
        let proxy = sa_caller("sys", "proxy");
        let headers = |user: Option<&str>, groups: &[&str]| {
            let mut h = http::HeaderMap::new();
            if let Some(u) = user {
                h.insert(IMPERSONATE_USER, u.parse().unwrap());
            }
            for g in groups {
                h.append(IMPERSONATE_GROUP, g.parse().unwrap());
            }
            h
        };
        // no headers: the caller itself
        let same = impersonate(&store, &proxy, &headers(None, &[])).await.unwrap();
        assert_eq!((same.user, same.groups), (proxy.user.clone(), proxy.groups.clone()));
        let c = impersonate(&store, &proxy, &headers(Some("jane"), &["dev"])).await.unwrap();
        assert_eq!((c.user.as_str(), c.groups), ("jane", vec!["dev".to_string(), "system:authenticated".to_string()]));
        let e = impersonate(&store, &proxy, &headers(Some("bob"), &[])).await.unwrap_err();
        assert_eq!(e.to_string(), "users \"bob\" is forbidden: User \"system:serviceaccount:sys:proxy\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope");
        let e = impersonate(&store, &proxy, &headers(Some("jane"), &["system:masters"])).await.unwrap_err();
        assert!(e.to_string().starts_with("groups \"system:masters\" is forbidden"), "{e}");
        assert!(matches!(impersonate(&store, &proxy, &headers(None, &["dev"])).await, Err(ApiError::BadRequest(_))));
        // a service account may be impersonated only with `serviceaccounts` in its namespace
        let e = impersonate(&store, &proxy, &headers(Some("system:serviceaccount:shop:web"), &[])).await.unwrap_err();
        assert!(e.to_string().contains("cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"shop\""), "{e}");
    }

    #[test]
    fn hmac_known_vector() {
        // RFC 4231 test case 2 uses a short key; ours is zero-padded to 32 bytes, which is
        // the same HMAC key (keys shorter than the block are zero-padded).
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mac = hmac_sha256(&key, b"what do ya want for nothing?");
        assert_eq!(hex::encode(mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }
}
