//! Bearer-token authentication of the federation API (kube-apiserver's union of token authenticators): static and bootstrap tokens, ServiceAccount tokens, OIDC ID tokens and personal user tokens; uses `api`, `pki` and the server's `bootstrap` and `rbac`.
//!
//! A token is tried, in this order, as a static token, a bootstrap token (its Secret read
//! when not yet synced), a user token (`fedctl_<id>_<secret>`, [`usertoken`]), and as a JWT,
//! by its unverified `iss`: the service account issuer's ([`serviceaccount`]) or the OIDC
//! issuer's ([`oidc`]). Every refusal is a 401 `Unauthorized` to the client (as
//! kube-apiserver, which never says why); the reason is logged.

pub mod oidc;
pub mod serviceaccount;
pub mod usertoken;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::api::{ApiServer, Caller};
use crate::pki::auth::TokenAuthenticator;

/// Errors setting the authenticators up (they stop the server from starting).
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The service account signing key is unusable.
    #[error("service account signing key: {0}")]
    Key(String),
    /// The `--oidc-*` flags are unusable.
    #[error("oidc: {0}")]
    Oidc(String),
    /// The `--service-account-issuer` / `--api-audiences` flags are unusable.
    #[error("{0}")]
    Flags(String),
}

/// The identity flags of `fedctl server`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `--service-account-issuer`: `iss` of the ServiceAccount tokens (default
    /// [`serviceaccount::DEFAULT_ISSUER`]).
    pub service_account_issuer: String,
    /// `--api-audiences`: what a token presented to the API must be meant for (default: the
    /// issuer), and the default audiences of a TokenRequest.
    pub api_audiences: Vec<String>,
    /// The `--oidc-*` flags; `None` without `--oidc-issuer-url`.
    pub oidc: Option<oidc::OidcConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config { service_account_issuer: serviceaccount::DEFAULT_ISSUER.into(), api_audiences: Vec::new(), oidc: None }
    }
}

/// Who a token authenticates as.
#[derive(Clone, Debug)]
pub struct Authenticated {
    /// User and groups (with `system:authenticated`).
    pub caller: Caller,
    /// The uid of the identity, when it has one (a ServiceAccount's uid).
    pub uid: Option<String>,
    /// The audiences asked for that the token is valid for (kube's TokenReview
    /// `status.audiences`).
    pub audiences: Vec<String>,
}

/// Every bearer-token authenticator of the server.
#[derive(Debug)]
pub struct Authenticators {
    /// Static and bootstrap tokens.
    pub tokens: Arc<TokenAuthenticator>,
    /// ServiceAccount tokens (issued by the TokenRequest subresource).
    pub service_accounts: Arc<serviceaccount::ServiceAccountTokens>,
    /// OIDC ID tokens, when an issuer is configured.
    pub oidc: Option<oidc::OidcAuthenticator>,
}

/// The unverified `iss` of a JWT, if `token` is one.
fn jwt_issuer(token: &str) -> Option<String> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else { return None };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Value = serde_json::from_slice(&raw).ok()?;
    claims.get("iss")?.as_str().map(str::to_string)
}

impl Authenticators {
    /// The authenticators of a server with data directory `data_dir` (the signing key is
    /// created there at first start). Errors: [`IdentityError`].
    pub fn new(data_dir: &Path, config: &Config, tokens: Arc<TokenAuthenticator>) -> Result<Authenticators, IdentityError> {
        if config.service_account_issuer.is_empty() {
            return Err(IdentityError::Flags("--service-account-issuer must not be empty".into()));
        }
        let key = serviceaccount::SigningKey::load_or_create(data_dir)?;
        let api_audiences = if config.api_audiences.is_empty() { vec![config.service_account_issuer.clone()] } else { config.api_audiences.clone() };
        let service_accounts = Arc::new(serviceaccount::ServiceAccountTokens { key, issuer: config.service_account_issuer.clone(), api_audiences });
        let oidc = config.oidc.clone().map(oidc::OidcAuthenticator::new).transpose()?;
        if let Some(o) = &oidc {
            if o.issuer() == config.service_account_issuer {
                return Err(IdentityError::Flags("--oidc-issuer-url must differ from --service-account-issuer".into()));
            }
        }
        Ok(Authenticators { tokens, service_accounts, oidc })
    }

    /// The API audiences (see [`Config::api_audiences`]).
    pub fn api_audiences(&self) -> &[String] {
        &self.service_accounts.api_audiences
    }

    /// Who `token` authenticates as when presented for `audiences` (`None`: the API
    /// audiences, i.e. a request to this server; TokenReview passes its `spec.audiences`).
    /// ServiceAccount tokens must name one of them; the other kinds are not meant for an
    /// audience and authenticate only for the API audiences (kube's audience-agnostic
    /// authenticators). `None` → 401; the reason is logged at debug level.
    pub async fn authenticate(&self, api: &ApiServer, token: &str, audiences: Option<&[String]>) -> Option<Authenticated> {
        if token.is_empty() {
            return None;
        }
        let wanted: Vec<String> = audiences.map(<[String]>::to_vec).unwrap_or_else(|| self.api_audiences().to_vec());
        let agnostic: Vec<String> = wanted.iter().filter(|a| self.api_audiences().contains(a)).cloned().collect();
        let plain = |caller: Caller, uid: Option<String>| (!agnostic.is_empty()).then(|| Authenticated { caller, uid, audiences: agnostic.clone() });
        let now = chrono::Utc::now();
        if let Some(id) = self.tokens.validate(token, now) {
            let u = id.user_info();
            return plain(Caller { user: u.name, groups: u.groups }, None);
        }
        if let Some((token_id, _)) = crate::pki::auth::parse_bootstrap_token(token) {
            // created a moment ago by `fedctl token create`: not synced yet
            let stored = crate::server::bootstrap::load_token(api, token_id).await?;
            let id = stored.validate(token, now)?;
            self.tokens.upsert_bootstrap_token(stored);
            let u = id.user_info();
            return plain(Caller { user: u.name, groups: u.groups }, None);
        }
        let refused = |kind: &str, why: String| -> Option<Authenticated> {
            tracing::debug!(kind, reason = %why, "Unable to authenticate the request");
            None
        };
        if usertoken::parse_token(token).is_some() {
            return match usertoken::authenticate(api, token).await {
                Ok((caller, _id)) => plain(caller, None),
                Err(e) => refused("user token", e),
            };
        }
        let iss = jwt_issuer(token)?;
        if iss == self.service_accounts.issuer {
            return match self.service_accounts.authenticate(api, token, &wanted).await {
                Ok((caller, uid, matched)) => Some(Authenticated { caller, uid: Some(uid), audiences: matched }),
                Err(e) => refused("service account token", e),
            };
        }
        if let Some(o) = self.oidc.as_ref().filter(|o| o.issuer() == iss) {
            return match o.authenticate(token).await {
                Ok(caller) => plain(caller, None),
                Err(e) => refused("oidc token", e),
            };
        }
        refused("jwt", format!("no authenticator for issuer {iss:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuer_peek() {
        use base64::Engine as _;
        let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let t = format!("{}.{}.sig", b("{\"alg\":\"ES256\"}"), b("{\"iss\":\"https://x\"}"));
        assert_eq!(jwt_issuer(&t).as_deref(), Some("https://x"));
        assert_eq!(jwt_issuer("abcdef.0123456789abcdef"), None);
        assert_eq!(jwt_issuer(&format!("{t}.extra")), None);
    }

    #[test]
    fn flags_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Arc::new(TokenAuthenticator::new(vec![]));
        let a = Authenticators::new(dir.path(), &Config::default(), tokens.clone()).unwrap();
        assert_eq!(a.api_audiences(), [serviceaccount::DEFAULT_ISSUER]);
        let empty = Config { service_account_issuer: String::new(), ..Config::default() };
        assert!(matches!(Authenticators::new(dir.path(), &empty, tokens.clone()), Err(IdentityError::Flags(_))));
        let jwks = dir.path().join("jwks.json");
        std::fs::write(&jwks, "{\"keys\": []}").unwrap();
        let same = Config { oidc: Some(oidc::OidcConfig::new(serviceaccount::DEFAULT_ISSUER, "c", jwks.to_str().unwrap())), ..Config::default() };
        assert!(matches!(Authenticators::new(dir.path(), &same, tokens), Err(IdentityError::Flags(_))));
    }
}
