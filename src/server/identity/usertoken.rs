//! Personal bearer tokens made by `fedctl token create --user`: a Secret in `kube-system` holding only the SHA-256 of the token's secret part, with the user, groups and expiry it authenticates as; deleting the Secret revokes the token.
//!
//! A token is `fedctl_<id>_<secret>` (`id` 8 and `secret` 40 characters of `[a-z0-9]`); its
//! Secret is `kube-system/user-token-<id>`, type `fedctl.io/user-token`, with data `token-id`,
//! `token-secret-sha256` (hex), `user`, `groups` (comma-separated), optionally `expiration`
//! (RFC 3339) and `description`. The server reads the Secret on every request that presents
//! such a token and compares the hash in constant time. Writing such a Secret mints a
//! credential for its user and groups, so an admission hook lets only callers who may
//! `impersonate` that user and every group write one.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use rand::Rng;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api::request::ResourceRequest;
use crate::api::{AdmissionHook, AdmissionRequest, ApiError, ApiResult, ApiServer, Caller, Cause, ResourceInfo};

/// Namespace of user token Secrets.
pub const NAMESPACE: &str = "kube-system";
/// Secret type of a user token.
pub const SECRET_TYPE: &str = "fedctl.io/user-token";
/// Name prefix of a user token Secret: `user-token-<id>`.
pub const SECRET_PREFIX: &str = "user-token-";
/// Prefix of the token string.
pub const TOKEN_PREFIX: &str = "fedctl_";
const ID_LEN: usize = 8;
const SECRET_LEN: usize = 40;
const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A user token as stored (no secret, only its hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserToken {
    /// Public id (`[a-z0-9]{8}`).
    pub id: String,
    /// Hex SHA-256 of the secret part.
    pub secret_sha256: String,
    /// User name it authenticates as.
    pub user: String,
    /// Groups it authenticates with (besides `system:authenticated`).
    pub groups: Vec<String>,
    /// Instant from which it is refused; `None` never expires.
    pub expiration: Option<DateTime<Utc>>,
    /// Free text.
    pub description: Option<String>,
}

fn random(n: usize) -> String {
    let mut rng = rand::rng();
    (0..n).map(|_| CHARS[rng.random_range(0..CHARS.len())] as char).collect()
}

fn well_formed(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Splits `fedctl_<id>_<secret>` into `(id, secret)` if it has that format.
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.strip_prefix(TOKEN_PREFIX)?.split_once('_')?;
    (well_formed(id, ID_LEN) && well_formed(secret, SECRET_LEN)).then_some((id, secret))
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

impl UserToken {
    /// A new token for `user`/`groups`, expiring `ttl` after `now` (whole seconds, as stored;
    /// `None`: never). Returns
    /// the stored form and the bearer token (secret; shown once).
    pub fn generate(user: &str, groups: &[String], ttl: Option<chrono::Duration>, now: DateTime<Utc>) -> (UserToken, String) {
        let (id, secret) = (random(ID_LEN), random(SECRET_LEN));
        let t = UserToken {
            id: id.clone(),
            secret_sha256: sha256_hex(&secret),
            user: user.into(),
            groups: groups.to_vec(),
            expiration: ttl.and_then(|d| DateTime::from_timestamp((now + d).timestamp(), 0)),
            description: None,
        };
        (t, format!("{TOKEN_PREFIX}{id}_{secret}"))
    }

    /// Name of its Secret: `user-token-<id>`.
    pub fn secret_name(&self) -> String {
        format!("{SECRET_PREFIX}{}", self.id)
    }

    /// The Secret storing it (`data` base64).
    pub fn to_secret(&self) -> Value {
        let mut data = BTreeMap::new();
        data.insert("token-id", self.id.clone());
        data.insert("token-secret-sha256", self.secret_sha256.clone());
        data.insert("user", self.user.clone());
        data.insert("groups", self.groups.join(","));
        if let Some(e) = self.expiration {
            data.insert("expiration", e.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        }
        if let Some(d) = &self.description {
            data.insert("description", d.clone());
        }
        let data: serde_json::Map<String, Value> = data.into_iter().map(|(k, v)| (k.to_string(), json!(base64::engine::general_purpose::STANDARD.encode(v)))).collect();
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": self.secret_name(), "namespace": NAMESPACE}, "type": SECRET_TYPE, "data": data})
    }

    /// The token stored in a Secret (`data` base64, or `stringData`). Errors: a message
    /// naming what is wrong (type, name, missing or malformed field).
    pub fn from_secret(secret: &Value) -> Result<UserToken, String> {
        if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE) {
            return Err(format!("type is not {SECRET_TYPE}"));
        }
        let mut data: BTreeMap<String, String> = BTreeMap::new();
        if let Some(d) = secret.get("data").and_then(Value::as_object) {
            for (k, v) in d {
                let raw = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or("")).map_err(|_| format!("data.{k} is not base64"))?;
                data.insert(k.clone(), String::from_utf8(raw).map_err(|_| format!("data.{k} is not UTF-8"))?);
            }
        }
        if let Some(d) = secret.get("stringData").and_then(Value::as_object) {
            for (k, v) in d {
                data.insert(k.clone(), v.as_str().unwrap_or("").to_string());
            }
        }
        let get = |k: &str| data.get(k).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let id = get("token-id").ok_or("data.token-id is required")?;
        if !well_formed(&id, ID_LEN) {
            return Err("data.token-id must be 8 characters of [a-z0-9]".into());
        }
        let name = secret.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        if name != format!("{SECRET_PREFIX}{id}") {
            return Err(format!("the name must be {SECRET_PREFIX}<token-id> ({SECRET_PREFIX}{id})"));
        }
        let secret_sha256 = get("token-secret-sha256").ok_or("data.token-secret-sha256 is required")?.to_ascii_lowercase();
        if secret_sha256.len() != 64 || !secret_sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("data.token-secret-sha256 must be 64 hex digits".into());
        }
        let user = get("user").ok_or("data.user is required")?;
        let groups = get("groups").map(|g| g.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()).unwrap_or_default();
        let expiration = match get("expiration") {
            Some(e) => Some(DateTime::parse_from_rfc3339(&e).map_err(|err| format!("data.expiration {e:?}: {err}"))?.with_timezone(&Utc)),
            None => None,
        };
        Ok(UserToken { id, secret_sha256, user, groups, expiration, description: get("description") })
    }

    /// Whether `secret` (the part after the id) is this token's and it is not expired at `now`.
    pub fn accepts(&self, secret: &str, now: DateTime<Utc>) -> bool {
        let ok = crate::pki::auth::constant_time_eq(sha256_hex(secret).as_bytes(), self.secret_sha256.as_bytes());
        ok && !self.expiration.is_some_and(|e| now >= e)
    }

    /// The caller it authenticates as: its user, its groups and `system:authenticated`.
    pub fn caller(&self) -> Caller {
        let mut groups = self.groups.clone();
        if !groups.iter().any(|g| g == crate::pki::auth::AUTHENTICATED_GROUP) {
            groups.push(crate::pki::auth::AUTHENTICATED_GROUP.to_string());
        }
        Caller { user: self.user.clone(), groups }
    }
}

fn secrets(api: &ApiServer, name: &str) -> Option<ResourceRequest> {
    Some(ResourceRequest { info: api.registry.lookup("", "v1", "secrets")?, namespace: Some(NAMESPACE.into()), name: Some(name.into()), subresource: None, watch_path: false })
}

/// Authenticates a `fedctl_…` token: its Secret is read (one store read) and must be a valid
/// user token whose hash matches and which has not expired. Returns the caller and token id.
pub async fn authenticate(api: &ApiServer, token: &str) -> Result<(Caller, String), String> {
    let (id, secret) = parse_token(token).ok_or("not a user token")?;
    let r = secrets(api, &format!("{SECRET_PREFIX}{id}")).ok_or("secrets are not served")?;
    let stored = match api.get(&r).await {
        Ok(s) => s,
        Err(ApiError::NotFound { .. }) => return Err(format!("user token {id} does not exist (revoked)")),
        Err(e) => return Err(format!("reading user token {id}: {e}")),
    };
    let t = UserToken::from_secret(&stored).map_err(|e| format!("user token {id}: {e}"))?;
    if !t.accepts(secret, Utc::now()) {
        return Err(format!("user token {id}: wrong secret or expired"));
    }
    Ok((t.caller(), id.to_string()))
}

/// Admission of user token Secrets: a create or update of a Secret of type
/// `fedctl.io/user-token` (or one that was) must be a valid token (422 otherwise) and its
/// writer must be allowed to `impersonate` the user and each group (403 otherwise, with
/// kube-apiserver's RBAC wording) — minting a credential for someone is acting as them.
pub struct UserTokenAdmission {
    /// The authorizer asked.
    pub rbac: Arc<crate::server::rbac::Rbac>,
}

#[async_trait::async_trait]
impl AdmissionHook for UserTokenAdmission {
    fn handles(&self, info: &ResourceInfo) -> bool {
        info.group.is_empty() && info.resource == "secrets"
    }

    async fn admit(&self, api: &ApiServer, req: &AdmissionRequest<'_>, obj: &mut Value) -> ApiResult<()> {
        let typed = |v: &Value| v.get("type").and_then(Value::as_str) == Some(SECRET_TYPE);
        if !typed(obj) && !req.old.is_some_and(typed) {
            return Ok(());
        }
        let t = UserToken::from_secret(obj).map_err(|m| ApiError::Invalid {
            kind: "Secret".into(),
            group: String::new(),
            name: req.name.into(),
            causes: vec![Cause { reason: "FieldValueInvalid".into(), message: format!("Invalid value: a {SECRET_TYPE} Secret: {m}"), field: "data".into() }],
        })?;
        let caller = &req.ctx.caller;
        let mut checks = vec![("users", t.user.clone())];
        checks.extend(t.groups.iter().map(|g| ("groups", g.clone())));
        for (resource, name) in checks {
            let a = crate::server::rbac::Attributes { verb: "impersonate", target: crate::server::rbac::Target::Resource { group: "", resource, subresource: "", namespace: "", name: &name } };
            if !crate::server::authz::can(api, &self.rbac, caller, &a).await {
                return Err(ApiError::Forbidden(format!(
                    "secrets \"{}\" is forbidden: User \"{}\" cannot impersonate resource \"{resource}\" in API group \"\" at the cluster scope: a user token for {resource} {name:?} needs it",
                    req.name, caller.user
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_format_and_secret_round_trip() {
        let now = Utc::now();
        let (mut t, token) = UserToken::generate("alice", &["team-a-devs".to_string(), "qa".to_string()], Some(chrono::Duration::hours(24)), now);
        t.description = Some("for alice".into());
        let (id, secret) = parse_token(&token).unwrap();
        assert_eq!((id, secret.len()), (t.id.as_str(), 40));
        assert!(crate::pki::auth::parse_bootstrap_token(&token).is_none(), "not mistaken for a bootstrap token");
        let s = t.to_secret();
        assert_eq!(s["metadata"]["name"], format!("user-token-{id}"));
        assert!(!s.to_string().contains(secret), "the secret part is not stored");
        let back = UserToken::from_secret(&s).unwrap();
        assert_eq!(back, t);
        assert!(back.accepts(secret, now));
        assert!(!back.accepts(&"0".repeat(40), now));
        assert!(!back.accepts(secret, now + chrono::Duration::hours(24)), "expired at its expiration");
        let c = back.caller();
        assert_eq!((c.user.as_str(), c.groups), ("alice", vec!["team-a-devs".to_string(), "qa".to_string(), "system:authenticated".to_string()]));

        for bad in ["fedctl_abc_def", "fedctl_abcdefgh", "bootstr.0123456789abcdef", "fedctl_ABCDEFGH_0123456789012345678901234567890123456789"] {
            assert!(parse_token(bad).is_none(), "{bad}");
        }
        let mut wrong = s.clone();
        wrong["metadata"]["name"] = json!("user-token-other");
        assert!(UserToken::from_secret(&wrong).unwrap_err().contains("name"));
        let mut nouser = s.clone();
        nouser["data"].as_object_mut().unwrap().remove("user");
        assert!(UserToken::from_secret(&nouser).unwrap_err().contains("user"));
        let by_hand = json!({"type": SECRET_TYPE, "metadata": {"name": "user-token-abcdefgh"}, "stringData": {"token-id": "abcdefgh", "token-secret-sha256": "A".repeat(64), "user": "bob"}});
        let t = UserToken::from_secret(&by_hand).unwrap();
        assert_eq!((t.user.as_str(), t.groups.len(), t.expiration), ("bob", 0, None));
    }
}
