//! ServiceAccount tokens: the ES256 signing key, the TokenRequest subresource, verification of the tokens it issues and the issuer discovery documents (mirrors kube-apiserver's `pkg/serviceaccount` and `registry/core/serviceaccount/storage/token.go`).
//!
//! The key is an ECDSA P-256 key, generated at first start as `DATA_DIR/tls/service-account.key`
//! (PKCS#8 PEM, mode 0600) next to the CA key; like the CA, replicas of a federation share it
//! by sharing `DATA_DIR/tls`. Its key id is kube-apiserver's: the unpadded base64url SHA-256 of
//! the DER SubjectPublicKeyInfo. Tokens carry kube-apiserver's bound-token claims.

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use http::StatusCode;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::IdentityError;
use crate::api::handler::{SubresourceHandler, SubresourceRequest};
use crate::api::request::ResourceRequest;
use crate::api::{object, ApiError, ApiResult, ApiServer, Caller, Cause};

/// File of the signing key in `DATA_DIR/tls`.
pub const SIGNING_KEY_FILE: &str = "service-account.key";
/// Default `--service-account-issuer` (kube-apiserver's in-cluster issuer URL).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc";
/// Default `spec.expirationSeconds` of a TokenRequest (kube-apiserver's defaulting: 1 h).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// Smallest `spec.expirationSeconds` (10 minutes, kube-apiserver's validation).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// Largest `spec.expirationSeconds` (2^32 s, kube-apiserver's validation).
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

/// The claims of a service-account token (kube-apiserver's `privateClaims` plus the
/// registered ones). Times are Unix seconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaClaims {
    /// Audiences.
    pub aud: Vec<String>,
    /// Expiry.
    pub exp: i64,
    /// Issued at.
    pub iat: i64,
    /// Issuer (`--service-account-issuer`).
    pub iss: String,
    /// Unique token id.
    pub jti: String,
    /// Kubernetes' private claims: namespace and ServiceAccount.
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: K8sClaims,
    /// Not before.
    pub nbf: i64,
    /// `system:serviceaccount:<ns>:<name>`.
    pub sub: String,
}

/// The `kubernetes.io` claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct K8sClaims {
    /// Namespace of the ServiceAccount.
    pub namespace: String,
    /// The ServiceAccount.
    pub serviceaccount: Ref,
}

/// A name and uid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ref {
    /// Object name.
    pub name: String,
    /// Object uid.
    pub uid: String,
}

/// The ES256 key that signs and verifies service-account tokens. `Debug` hides the key.
pub struct SigningKey {
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// Key id (`kid`): base64url SHA-256 of the public key's DER SubjectPublicKeyInfo.
    pub kid: String,
    /// The public key as a JWK (`kty` EC, `crv` P-256, `use` sig, `alg` ES256, `kid`).
    pub jwk: Value,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

fn b64url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

impl SigningKey {
    /// Loads `DATA_DIR/tls/service-account.key`, generating it (mode 0600) at first start.
    /// Errors: [`IdentityError::Io`] when it cannot be read or written,
    /// [`IdentityError::Key`] when it is not a P-256 PKCS#8 key.
    pub fn load_or_create(data_dir: &Path) -> Result<SigningKey, IdentityError> {
        let tls = data_dir.join("tls");
        let path = tls.join(SIGNING_KEY_FILE);
        let io = |source| IdentityError::Io { path: path.clone(), source };
        match std::fs::read_to_string(&path) {
            Ok(pem) => SigningKey::from_pem(&pem).map_err(|e| IdentityError::Key(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| IdentityError::Key(e.to_string()))?;
                let pem = pair.serialize_pem();
                if !tls.is_dir() {
                    std::fs::create_dir_all(&tls).map_err(io)?;
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&tls, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
                }
                crate::pki::write_private_file(&path, pem.as_bytes()).map_err(io)?;
                tracing::info!(path = %path.display(), "generated the service account signing key");
                SigningKey::from_pem(&pem).map_err(|e| IdentityError::Key(e.to_string()))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// A key from its PKCS#8 PEM (an ECDSA P-256 private key). Errors: a message naming why.
    pub fn from_pem(pem: &str) -> Result<SigningKey, String> {
        let pair = rcgen::KeyPair::from_pem(pem).map_err(|e| e.to_string())?;
        if !pair.is_compatible(&rcgen::PKCS_ECDSA_P256_SHA256) {
            return Err("not an ECDSA P-256 key".into());
        }
        // the uncompressed point 0x04 || X || Y
        let raw = pair.public_key_raw();
        if raw.len() != 65 || raw[0] != 4 {
            return Err("unexpected public key encoding".into());
        }
        let (x, y) = (b64url(&raw[1..33]), b64url(&raw[33..]));
        let kid = b64url(&Sha256::digest(rcgen::PublicKeyData::subject_public_key_info(&pair)));
        let encoding = EncodingKey::from_ec_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
        let decoding = DecodingKey::from_ec_components(&x, &y).map_err(|e| e.to_string())?;
        let jwk = json!({"use": "sig", "kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256", "x": x, "y": y});
        Ok(SigningKey { encoding, decoding, kid, jwk })
    }

    /// Signs `claims` (ES256, header `kid`). Errors: the JWT library's, as a message.
    pub fn sign(&self, claims: &SaClaims) -> Result<String, String> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).map_err(|e| e.to_string())
    }

    /// Verifies the signature, `iss` (= `issuer`), `aud` (one of `audiences`), `exp` and `nbf`
    /// at `now`, and returns the claims. Errors: why, in kube-apiserver's words where it has
    /// them (`service account token has expired`).
    pub fn verify(&self, token: &str, issuer: &str, audiences: &[String], now: DateTime<Utc>) -> Result<SaClaims, String> {
        let mut v = Validation::new(Algorithm::ES256);
        // times are checked below against `now` (the library would read the clock)
        v.validate_exp = false;
        v.validate_nbf = false;
        v.set_issuer(&[issuer]);
        v.set_audience(audiences);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<SaClaims>(token, &self.decoding, &v).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidAudience => "token audiences do not match the API audiences".to_string(),
            jsonwebtoken::errors::ErrorKind::InvalidIssuer => "token issuer is not the service account issuer".to_string(),
            jsonwebtoken::errors::ErrorKind::InvalidSignature => "invalid signature".to_string(),
            _ => format!("invalid service account token: {e}"),
        })?;
        let c = data.claims;
        let t = now.timestamp();
        if t >= c.exp {
            return Err("service account token has expired".into());
        }
        // kube-apiserver allows a minute of clock skew on nbf and iat
        if t + 60 < c.nbf || t + 60 < c.iat {
            return Err("service account token is not valid yet".into());
        }
        let want_sub = format!("{}{}:{}", crate::server::rbac::SA_USER_PREFIX, c.kubernetes.namespace, c.kubernetes.serviceaccount.name);
        if c.sub != want_sub {
            return Err("service account token's subject does not match its kubernetes.io claim".into());
        }
        Ok(c)
    }
}

/// Issues, verifies and publishes service-account tokens (`--service-account-issuer`,
/// `--api-audiences`).
#[derive(Debug)]
pub struct ServiceAccountTokens {
    /// The signing key.
    pub key: SigningKey,
    /// `iss` of issued tokens, and the only one accepted.
    pub issuer: String,
    /// The API audiences: the default audiences of a TokenRequest, and what a token
    /// presented to the API must name one of.
    pub api_audiences: Vec<String>,
}

impl ServiceAccountTokens {
    /// Issues a token for ServiceAccount `ns/name` with uid `uid`, valid from `now` for
    /// `seconds`, for `audiences`.
    pub fn issue(&self, ns: &str, name: &str, uid: &str, audiences: &[String], now: DateTime<Utc>, seconds: i64) -> Result<String, String> {
        let iat = now.timestamp();
        let (sub, _) = crate::server::rbac::service_account_user(ns, name);
        self.key.sign(&SaClaims {
            aud: audiences.to_vec(),
            exp: iat + seconds,
            iat,
            iss: self.issuer.clone(),
            jti: object::new_uid(),
            kubernetes: K8sClaims { namespace: ns.into(), serviceaccount: Ref { name: name.into(), uid: uid.into() } },
            nbf: iat,
            sub,
        })
    }

    /// Authenticates a token presented for `audiences` (one must be in its `aud`): its
    /// signature and claims (see [`SigningKey::verify`]), then the ServiceAccount, read once
    /// from the store, must still exist with the uid the token names and not be being deleted.
    /// Returns the caller (kube's service account user: `system:serviceaccount:<ns>:<name>`,
    /// groups `system:serviceaccounts`, `system:serviceaccounts:<ns>`,
    /// `system:authenticated`), the SA's uid and the audiences matched.
    pub async fn authenticate(&self, api: &ApiServer, token: &str, audiences: &[String]) -> Result<(Caller, String, Vec<String>), String> {
        let c = self.key.verify(token, &self.issuer, audiences, Utc::now())?;
        let (ns, name) = (&c.kubernetes.namespace, &c.kubernetes.serviceaccount.name);
        let info = api.registry.lookup("", "v1", "serviceaccounts").ok_or("serviceaccounts are not served")?;
        let r = ResourceRequest { info, namespace: Some(ns.clone()), name: Some(name.clone()), subresource: None, watch_path: false };
        let sa = match api.get(&r).await {
            Ok(sa) => sa,
            Err(ApiError::NotFound { .. }) => return Err(format!("service account {ns}/{name} has been deleted")),
            Err(e) => return Err(format!("reading service account {ns}/{name}: {e}")),
        };
        let uid = object::meta_str(&sa, "uid").unwrap_or("");
        if uid != c.kubernetes.serviceaccount.uid {
            return Err(format!("service account UID ({}) does not match claim ({uid})", c.kubernetes.serviceaccount.uid));
        }
        if sa.pointer("/metadata/deletionTimestamp").is_some_and(|d| !d.is_null()) {
            return Err(format!("service account {ns}/{name} is being deleted"));
        }
        let (user, mut groups) = crate::server::rbac::service_account_user(ns, name);
        groups.push(crate::pki::auth::AUTHENTICATED_GROUP.to_string());
        let matched = c.aud.iter().filter(|a| audiences.contains(a)).cloned().collect();
        Ok((Caller { user, groups }, uid.to_string(), matched))
    }

    /// `/.well-known/openid-configuration` (kube-apiserver's service account issuer
    /// discovery): issuer, `jwks_uri` (`<issuer>/openid/v1/jwks`), `response_types_supported`
    /// `["id_token"]`, `subject_types_supported` `["public"]`,
    /// `id_token_signing_alg_values_supported` `["ES256"]`.
    pub fn openid_configuration(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("{}/openid/v1/jwks", self.issuer.trim_end_matches('/')),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }

    /// `/openid/v1/jwks`: `{"keys": [<the public key as a JWK>]}`.
    pub fn jwks(&self) -> Value {
        json!({"keys": [self.key.jwk]})
    }
}

/// `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`: an `authentication.k8s.io/v1`
/// TokenRequest in, the same with `status.token` and `status.expirationTimestamp` out, 201
/// (mirrors kube-apiserver's TokenREST, so `kubectl create token` works). `spec.audiences`
/// defaults to the API audiences, `spec.expirationSeconds` to 3600 (600 … 2^32, else 422).
/// Errors: 404 when the ServiceAccount does not exist, 405 for other methods, 400 for a body
/// that is not a TokenRequest or that names a `boundObjectRef` (bound tokens are not supported).
pub struct TokenRequestHandler {
    /// Issues the tokens.
    pub tokens: Arc<ServiceAccountTokens>,
}

fn invalid(name: &str, field: &str, message: String) -> ApiError {
    ApiError::Invalid {
        kind: "TokenRequest".into(),
        group: "authentication.k8s.io".into(),
        name: name.into(),
        causes: vec![Cause { reason: "FieldValueInvalid".into(), message, field: field.into() }],
    }
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
        let body = req.body.unwrap_or_else(|| json!({}));
        if let Some(k) = body.get("kind").and_then(Value::as_str) {
            if k != "TokenRequest" {
                return Err(ApiError::BadRequest(format!("the kind in the data ({k}) does not match the expected kind (TokenRequest)")));
            }
        }
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        if spec.get("boundObjectRef").is_some_and(|b| !b.is_null()) {
            return Err(ApiError::BadRequest("spec.boundObjectRef: tokens bound to an object are not supported by the federation; request an unbound token".into()));
        }
        let seconds = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
            Some(v) => v.as_i64().ok_or_else(|| ApiError::BadRequest(format!("spec.expirationSeconds: expected an integer, got {v}")))?,
        };
        if seconds < MIN_EXPIRATION_SECONDS {
            return Err(invalid(&name, "spec.expirationSeconds", format!("Invalid value: {seconds}: may not specify a duration less than 10 minutes")));
        }
        if seconds > MAX_EXPIRATION_SECONDS {
            return Err(invalid(&name, "spec.expirationSeconds", format!("Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds")));
        }
        let mut audiences: Vec<String> = match spec.get("audiences") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => {
                a.iter().map(|s| s.as_str().map(str::to_string).ok_or_else(|| ApiError::BadRequest("spec.audiences: expected a list of strings".into()))).collect::<ApiResult<_>>()?
            }
            Some(_) => return Err(ApiError::BadRequest("spec.audiences: expected a list of strings".into())),
        };
        if audiences.is_empty() {
            audiences = self.tokens.api_audiences.clone();
        }
        let sa = api.get(&ResourceRequest { subresource: None, ..r.clone() }).await?;
        let uid = object::meta_str(&sa, "uid").unwrap_or("").to_string();
        let now = Utc::now();
        let token = self.tokens.issue(&ns, &name, &uid, &audiences, now, seconds).map_err(ApiError::Internal)?;
        let exp = (now + chrono::Duration::seconds(seconds)).format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let mut out_spec = spec;
        out_spec["audiences"] = json!(audiences);
        out_spec["expirationSeconds"] = json!(seconds);
        out_spec["boundObjectRef"] = Value::Null;
        let mut meta = body.get("metadata").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
        meta["name"] = json!(name);
        meta["namespace"] = json!(ns);
        meta["creationTimestamp"] = json!(object::now_rfc3339());
        Ok((
            StatusCode::CREATED,
            json!({
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": meta,
                "spec": out_spec,
                "status": {"token": token, "expirationTimestamp": exp},
            }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(dir: &Path) -> ServiceAccountTokens {
        ServiceAccountTokens { key: SigningKey::load_or_create(dir).unwrap(), issuer: DEFAULT_ISSUER.into(), api_audiences: vec![DEFAULT_ISSUER.into()] }
    }

    #[test]
    fn key_is_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = SigningKey::load_or_create(dir.path()).unwrap();
        let path = dir.path().join("tls").join(SIGNING_KEY_FILE);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let b = SigningKey::load_or_create(dir.path()).unwrap();
        assert_eq!(a.kid, b.kid);
        assert_eq!(a.jwk, b.jwk);
        assert!(!format!("{a:?}").contains("PRIVATE"));
        // another data dir: another key, whose tokens the first does not accept
        let other = tempfile::tempdir().unwrap();
        assert_ne!(SigningKey::load_or_create(other.path()).unwrap().kid, a.kid);
        std::fs::write(&path, "not a key").unwrap();
        assert!(matches!(SigningKey::load_or_create(dir.path()), Err(IdentityError::Key(_))));
    }

    #[test]
    fn issued_tokens_verify_with_kube_claims() {
        let dir = tempfile::tempdir().unwrap();
        let t = tokens(dir.path());
        let now = Utc::now();
        let tok = t.issue("team-a", "bot", "uid-1", &t.api_audiences, now, 600).unwrap();
        let header = jsonwebtoken::decode_header(&tok).unwrap();
        assert_eq!(header.alg, Algorithm::ES256);
        assert_eq!(header.kid.as_deref(), Some(t.key.kid.as_str()));
        let c = t.key.verify(&tok, DEFAULT_ISSUER, &t.api_audiences, now).unwrap();
        assert_eq!(c.sub, "system:serviceaccount:team-a:bot");
        assert_eq!((c.kubernetes.namespace.as_str(), c.kubernetes.serviceaccount.name.as_str(), c.kubernetes.serviceaccount.uid.as_str()), ("team-a", "bot", "uid-1"));
        assert_eq!((c.exp - c.iat, c.nbf), (600, c.iat));
        assert_eq!(c.jti.len(), 36);
        // the claims' JSON has kube's key for the private claims
        let payload: Value = serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(tok.split('.').nth(1).unwrap()).unwrap()).unwrap();
        assert_eq!(payload["kubernetes.io"]["serviceaccount"]["name"], "bot");
        assert_eq!(payload["aud"], json!([DEFAULT_ISSUER]));

        let e = t.key.verify(&tok, DEFAULT_ISSUER, &t.api_audiences, now + chrono::Duration::seconds(600)).unwrap_err();
        assert_eq!(e, "service account token has expired");
        assert!(t.key.verify(&tok, "https://other", &t.api_audiences, now).unwrap_err().contains("issuer"));
        assert!(t.key.verify(&tok, DEFAULT_ISSUER, &["vault".to_string()], now).unwrap_err().contains("audiences"));
        let other = tempfile::tempdir().unwrap();
        assert_eq!(tokens(other.path()).key.verify(&tok, DEFAULT_ISSUER, &t.api_audiences, now).unwrap_err(), "invalid signature");
        // a token for another audience is accepted for that audience only
        let vault = t.issue("team-a", "bot", "uid-1", &["vault".to_string()], now, 600).unwrap();
        assert!(t.key.verify(&vault, DEFAULT_ISSUER, &t.api_audiences, now).is_err());
        assert!(t.key.verify(&vault, DEFAULT_ISSUER, &["vault".to_string()], now).is_ok());
    }

    #[test]
    fn discovery_documents() {
        let dir = tempfile::tempdir().unwrap();
        let t = tokens(dir.path());
        let d = t.openid_configuration();
        assert_eq!(d["issuer"], DEFAULT_ISSUER);
        assert_eq!(d["jwks_uri"], format!("{DEFAULT_ISSUER}/openid/v1/jwks"));
        let jwks = t.jwks();
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(jwks["keys"][0].clone()).unwrap();
        // a verifier that only has the published JWKS accepts the tokens
        let key = DecodingKey::from_jwk(&jwk).unwrap();
        let tok = t.issue("ns", "sa", "u", &t.api_audiences, Utc::now(), 600).unwrap();
        let mut v = Validation::new(Algorithm::ES256);
        v.set_audience(&[DEFAULT_ISSUER]);
        assert!(jsonwebtoken::decode::<Value>(&tok, &key, &v).is_ok());
    }
}
