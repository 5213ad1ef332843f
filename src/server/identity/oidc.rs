//! OpenID Connect ID tokens as bearer tokens (mirrors kube-apiserver's `--oidc-*` flags and its `oidc` token authenticator): issuer, client ID, username and groups claims with their prefixes, required claims; keys from a JWKS file or URL.
//!
//! A token is the issuer's when its (unverified) `iss` is `--oidc-issuer-url`; then its
//! signature (an algorithm of `--oidc-signing-algs`, a key of the JWKS: by `kid`, or every
//! key of the algorithm's type when the token names none), `aud` (must contain
//! `--oidc-client-id`), `exp` (no leeway) and `nbf` (5 minutes of clock skew, as go-oidc) are
//! checked. The JWKS is read at start and again, at most every 10 seconds, when a token names
//! a `kid` it does not hold (the issuer rotated its keys); a URL is fetched over HTTPS, with
//! `--oidc-ca-file` as its trust roots when given.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::IdentityError;
use crate::api::Caller;

/// Shortest time between two JWKS refreshes caused by an unknown `kid`.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(10);
/// Largest JWKS document read from a URL.
const MAX_JWKS_BYTES: usize = 1 << 20;
/// Clock skew allowed on `nbf` (go-oidc's).
const NBF_SKEW_SECONDS: i64 = 300;

/// The `--oidc-*` flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcConfig {
    /// `--oidc-issuer-url`: the `iss` of accepted tokens; must be `https://`.
    pub issuer_url: String,
    /// `--oidc-client-id`: the audience a token must name.
    pub client_id: String,
    /// `--oidc-username-claim` (default `sub`).
    pub username_claim: String,
    /// `--oidc-username-prefix`: `None` → kube's default (`<issuer>#` unless the claim is
    /// `email`), `Some("-")` → none.
    pub username_prefix: Option<String>,
    /// `--oidc-groups-claim`: a string or list of strings; `None` → no groups.
    pub groups_claim: Option<String>,
    /// `--oidc-groups-prefix`.
    pub groups_prefix: String,
    /// `--oidc-signing-algs` (default `RS256`).
    pub signing_algs: Vec<String>,
    /// `--oidc-required-claim key=value` (repeatable): each claim must be this string.
    pub required_claims: Vec<(String, String)>,
    /// `--oidc-jwks`: a JWKS file, or an `https://` URL serving one.
    pub jwks: String,
    /// `--oidc-ca-file`: PEM trust roots for a JWKS URL (default: the public web roots).
    pub ca_file: Option<PathBuf>,
}

impl OidcConfig {
    /// A configuration with kube-apiserver's defaults for the optional flags.
    pub fn new(issuer_url: &str, client_id: &str, jwks: &str) -> OidcConfig {
        OidcConfig {
            issuer_url: issuer_url.into(),
            client_id: client_id.into(),
            username_claim: "sub".into(),
            username_prefix: None,
            groups_claim: None,
            groups_prefix: String::new(),
            signing_algs: vec!["RS256".into()],
            required_claims: Vec::new(),
            jwks: jwks.into(),
            ca_file: None,
        }
    }

    /// The prefix user names get: kube-apiserver's rule (see [`OidcConfig::username_prefix`]).
    pub fn effective_username_prefix(&self) -> String {
        match self.username_prefix.as_deref() {
            Some("-") => String::new(),
            Some(p) => p.to_string(),
            None if self.username_claim == "email" => String::new(),
            None => format!("{}#", self.issuer_url),
        }
    }
}

/// One key of the JWKS.
struct Key {
    kid: Option<String>,
    key: DecodingKey,
}

struct Keys {
    keys: Vec<Key>,
    /// When the keys were last (re)loaded.
    loaded: Option<Instant>,
}

/// The OIDC token authenticator of one issuer.
pub struct OidcAuthenticator {
    config: OidcConfig,
    algs: Vec<Algorithm>,
    prefix: String,
    keys: Mutex<Keys>,
    /// Serializes refreshes.
    refresh: tokio::sync::Mutex<()>,
    http: Option<reqwest::Client>,
}

impl std::fmt::Debug for OidcAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcAuthenticator").field("issuer", &self.config.issuer_url).finish_non_exhaustive()
    }
}

fn oidc_err(m: impl Into<String>) -> IdentityError {
    IdentityError::Oidc(m.into())
}

/// Parses a JWKS document into the keys it holds; keys of unsupported types are skipped.
fn parse_jwks(text: &[u8]) -> Result<Vec<Key>, String> {
    let set: JwkSet = serde_json::from_slice(text).map_err(|e| format!("not a JWKS document: {e}"))?;
    let mut out = Vec::new();
    for jwk in &set.keys {
        match DecodingKey::from_jwk(jwk) {
            Ok(key) => out.push(Key { kid: jwk.common.key_id.clone(), key }),
            Err(e) => tracing::warn!(kid = ?jwk.common.key_id, error = %e, "skipping an unusable key of the OIDC JWKS"),
        }
    }
    Ok(out)
}

fn family(alg: Algorithm) -> jsonwebtoken::AlgorithmFamily {
    use jsonwebtoken::AlgorithmFamily as F;
    match alg {
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => F::Hmac,
        Algorithm::ES256 | Algorithm::ES384 => F::Ec,
        Algorithm::EdDSA => F::Ed,
        _ => F::Rsa,
    }
}

impl OidcAuthenticator {
    /// Checks the flags and, for a JWKS file, reads it. Errors: [`IdentityError::Oidc`] for
    /// an issuer that is not https, an empty client id, an unknown or HMAC signing
    /// algorithm, a JWKS that is neither a readable file nor an https URL, or an unreadable
    /// CA file.
    pub fn new(config: OidcConfig) -> Result<OidcAuthenticator, IdentityError> {
        if !config.issuer_url.starts_with("https://") {
            return Err(oidc_err(format!("--oidc-issuer-url {:?} must use the https scheme", config.issuer_url)));
        }
        if config.client_id.is_empty() {
            return Err(oidc_err("--oidc-client-id is required with --oidc-issuer-url"));
        }
        if config.jwks.is_empty() {
            return Err(oidc_err("--oidc-jwks (a JWKS file or https URL) is required with --oidc-issuer-url"));
        }
        if config.username_claim.is_empty() {
            return Err(oidc_err("--oidc-username-claim must not be empty"));
        }
        let mut algs = Vec::new();
        for a in &config.signing_algs {
            let alg: Algorithm = a.parse().map_err(|_| oidc_err(format!("--oidc-signing-algs: unsupported algorithm {a:?}")))?;
            if family(alg) == jsonwebtoken::AlgorithmFamily::Hmac {
                return Err(oidc_err(format!("--oidc-signing-algs: {a} is not an asymmetric algorithm")));
            }
            algs.push(alg);
        }
        if algs.is_empty() {
            return Err(oidc_err("--oidc-signing-algs must name an algorithm"));
        }
        let http = if config.jwks.starts_with("https://") {
            let mut b = reqwest::Client::builder().timeout(Duration::from_secs(10));
            if let Some(ca) = &config.ca_file {
                let pem = std::fs::read(ca).map_err(|source| IdentityError::Io { path: ca.clone(), source })?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| oidc_err(format!("--oidc-ca-file {}: {e}", ca.display())))?;
                for c in certs {
                    b = b.add_root_certificate(c);
                }
            }
            Some(b.build().map_err(|e| oidc_err(format!("JWKS client: {e}")))?)
        } else if config.jwks.contains("://") {
            return Err(oidc_err(format!("--oidc-jwks {:?}: a URL must use the https scheme", config.jwks)));
        } else {
            None
        };
        let mut keys = Keys { keys: Vec::new(), loaded: None };
        if http.is_none() {
            let path = PathBuf::from(&config.jwks);
            let text = std::fs::read(&path).map_err(|source| IdentityError::Io { path: path.clone(), source })?;
            keys.keys = parse_jwks(&text).map_err(|e| oidc_err(format!("--oidc-jwks {}: {e}", path.display())))?;
            keys.loaded = Some(Instant::now());
        }
        let prefix = config.effective_username_prefix();
        Ok(OidcAuthenticator { config, algs, prefix, keys: Mutex::new(keys), refresh: tokio::sync::Mutex::new(()), http })
    }

    /// The issuer whose tokens this authenticator checks.
    pub fn issuer(&self) -> &str {
        &self.config.issuer_url
    }

    async fn fetch(&self) -> Result<Vec<Key>, String> {
        match &self.http {
            Some(client) => {
                let resp = client.get(&self.config.jwks).send().await.map_err(|e| format!("fetching {}: {e}", self.config.jwks))?;
                if !resp.status().is_success() {
                    return Err(format!("fetching {}: {}", self.config.jwks, resp.status()));
                }
                let body = resp.bytes().await.map_err(|e| format!("reading {}: {e}", self.config.jwks))?;
                if body.len() > MAX_JWKS_BYTES {
                    return Err(format!("{}: JWKS larger than {MAX_JWKS_BYTES} bytes", self.config.jwks));
                }
                parse_jwks(&body)
            }
            None => {
                let text = tokio::fs::read(&self.config.jwks).await.map_err(|e| format!("{}: {e}", self.config.jwks))?;
                parse_jwks(&text)
            }
        }
    }

    /// Re-reads the JWKS unless it was read less than [`REFRESH_INTERVAL`] ago (a failed
    /// read keeps the old keys).
    async fn refresh(&self) {
        let _one = self.refresh.lock().await;
        let recent = self.keys.lock().unwrap_or_else(|e| e.into_inner()).loaded.is_some_and(|t| t.elapsed() < REFRESH_INTERVAL);
        if recent {
            return;
        }
        let fetched = self.fetch().await;
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.loaded = Some(Instant::now());
        match fetched {
            Ok(k) => keys.keys = k,
            Err(e) => tracing::warn!(error = %e, "refreshing the OIDC JWKS"),
        }
    }

    /// Tries the keys that may have signed a token with `kid`, `Ok(None)` when there is none.
    fn try_keys(&self, token: &str, kid: Option<&str>, alg: Algorithm, v: &Validation) -> Option<Result<Value, jsonwebtoken::errors::Error>> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut last = None;
        for k in keys.keys.iter().filter(|k| k.key.family() == family(alg)) {
            if kid.is_some() && k.kid.as_deref() != kid {
                continue;
            }
            match jsonwebtoken::decode::<Value>(token, &k.key, v) {
                Ok(d) => return Some(Ok(d.claims)),
                Err(e) => last = Some(Err(e)),
            }
        }
        last
    }

    /// Authenticates an ID token of this issuer. Errors: why it is refused, in go-oidc's and
    /// kube-apiserver's words (`oidc: token is expired`, `oidc: email not verified`, …); the
    /// client only ever sees 401 Unauthorized.
    pub async fn authenticate(&self, token: &str) -> Result<Caller, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("oidc: malformed jwt: {e}"))?;
        if !self.algs.contains(&header.alg) {
            return Err(format!("oidc: id token signed with unsupported algorithm, expected {:?} got {:?}", self.config.signing_algs, header.alg));
        }
        let mut v = Validation::new(header.alg);
        v.algorithms = self.algs.clone();
        v.leeway = 0;
        v.validate_exp = false;
        v.validate_nbf = false;
        v.set_issuer(&[&self.config.issuer_url]);
        v.set_audience(&[&self.config.client_id]);
        v.set_required_spec_claims(&["iss", "aud"]);
        let kid = header.kid.as_deref();
        let mut result = self.try_keys(token, kid, header.alg, &v);
        if result.is_none() {
            // a key this server has not seen: the issuer may have rotated
            self.refresh().await;
            result = self.try_keys(token, kid, header.alg, &v);
        }
        let claims = match result {
            None => return Err(format!("oidc: verify token: failed to verify signature: no key for kid {kid:?}")),
            Some(Err(e)) => {
                use jsonwebtoken::errors::ErrorKind as K;
                return Err(match e.kind() {
                    K::InvalidSignature => "oidc: verify token: failed to verify signature".to_string(),
                    K::InvalidAudience => format!("oidc: expected audience {:?} not in the token's audiences", self.config.client_id),
                    K::InvalidIssuer => format!("oidc: id token issued by a different provider, expected {:?}", self.config.issuer_url),
                    _ => format!("oidc: verify token: {e}"),
                });
            }
            Some(Ok(c)) => c,
        };
        let now = chrono::Utc::now().timestamp();
        match claims.get("exp").and_then(Value::as_f64) {
            Some(exp) if (now as f64) < exp => {}
            Some(_) => return Err("oidc: verify token: oidc: token is expired".into()),
            None => return Err("oidc: verify token: oidc: token has no expiry".into()),
        }
        if let Some(nbf) = claims.get("nbf").and_then(Value::as_f64) {
            if ((now + NBF_SKEW_SECONDS) as f64) < nbf {
                return Err("oidc: verify token: oidc: current time before the nbf (not before) time".into());
            }
        }
        self.user_of(&claims)
    }

    /// The caller `claims` name (after verification): username, groups and required claims.
    fn user_of(&self, claims: &Value) -> Result<Caller, String> {
        let c = &self.config;
        let name = match claims.get(&c.username_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => return Err(format!("oidc: parse username claims {:?}: not a non-empty string", c.username_claim)),
            None => return Err(format!("oidc: parse username claims {:?}: claim not present", c.username_claim)),
        };
        if c.username_claim == "email" {
            match claims.get("email_verified") {
                None | Some(Value::Bool(true)) => {}
                Some(Value::Bool(false)) => return Err("oidc: email not verified".into()),
                Some(_) => return Err("oidc: parse 'email_verified' claim: not a boolean".into()),
            }
        }
        let mut groups = Vec::new();
        if let Some(gc) = &c.groups_claim {
            match claims.get(gc) {
                None => {}
                Some(Value::String(s)) => groups.push(format!("{}{s}", c.groups_prefix)),
                Some(Value::Array(a)) => {
                    for g in a {
                        let g = g.as_str().ok_or_else(|| format!("oidc: parse groups claim {gc:?}: not a string or a list of strings"))?;
                        groups.push(format!("{}{g}", c.groups_prefix));
                    }
                }
                Some(_) => return Err(format!("oidc: parse groups claim {gc:?}: not a string or a list of strings")),
            }
        }
        for (k, want) in &c.required_claims {
            match claims.get(k) {
                Some(Value::String(got)) if got == want => {}
                Some(Value::String(got)) => return Err(format!("oidc: required claim {k} value does not match. Got = {got}, want = {want}")),
                Some(_) => return Err(format!("oidc: parse claim {k}: not a string")),
                None => return Err(format!("oidc: required claim {k} not present in ID token")),
            }
        }
        groups.push(crate::pki::auth::AUTHENTICATED_GROUP.to_string());
        Ok(Caller { user: format!("{}{name}", self.prefix), groups })
    }
}

/// Parses `--oidc-required-claim key=value`.
pub fn parse_required_claim(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?}: want key=value")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    const ISS: &str = "https://issuer.example";

    struct TestKey {
        enc: EncodingKey,
        jwk: Value,
    }

    fn key(kid: &str) -> TestKey {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let raw = pair.public_key_raw();
        let b = |x: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(x);
        TestKey {
            enc: EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig", "x": b(&raw[1..33]), "y": b(&raw[33..])}),
        }
    }

    fn sign(k: &TestKey, kid: &str, claims: Value) -> String {
        let mut h = Header::new(Algorithm::ES256);
        h.kid = Some(kid.into());
        jsonwebtoken::encode(&h, &claims, &k.enc).unwrap()
    }

    fn setup(keys: &[&TestKey], f: impl FnOnce(&mut OidcConfig)) -> (tempfile::TempDir, OidcAuthenticator) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        std::fs::write(&path, json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()}).to_string()).unwrap();
        let mut c = OidcConfig::new(ISS, "fedctl", path.to_str().unwrap());
        c.signing_algs = vec!["ES256".into()];
        c.groups_claim = Some("groups".into());
        f(&mut c);
        (dir, OidcAuthenticator::new(c).unwrap())
    }

    fn claims(extra: Value) -> Value {
        let now = chrono::Utc::now().timestamp();
        let mut c = json!({"iss": ISS, "aud": "fedctl", "sub": "u-1", "email": "jane@example.com", "groups": ["dev", "ops"], "iat": now, "exp": now + 600});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    #[tokio::test]
    async fn valid_and_refused_tokens() {
        let k = key("k1");
        let (_d, a) = setup(&[&k], |c| c.groups_prefix = "oidc:".into());
        let caller = a.authenticate(&sign(&k, "k1", claims(json!({})))).await.unwrap();
        assert_eq!(caller.user, format!("{ISS}#u-1"));
        assert_eq!(caller.groups, ["oidc:dev", "oidc:ops", "system:authenticated"]);
        // an audience list that contains the client id
        assert!(a.authenticate(&sign(&k, "k1", claims(json!({"aud": ["x", "fedctl"]})))).await.is_ok());

        let now = chrono::Utc::now().timestamp();
        let e = a.authenticate(&sign(&k, "k1", claims(json!({"exp": now - 10})))).await.unwrap_err();
        assert!(e.contains("token is expired"), "{e}");
        let e = a.authenticate(&sign(&k, "k1", claims(json!({"nbf": now + 3600})))).await.unwrap_err();
        assert!(e.contains("nbf"), "{e}");
        let e = a.authenticate(&sign(&k, "k1", claims(json!({"aud": "other"})))).await.unwrap_err();
        assert!(e.contains("audience"), "{e}");
        let e = a.authenticate(&sign(&k, "k1", claims(json!({"iss": "https://evil.example"})))).await.unwrap_err();
        assert!(e.contains("different provider"), "{e}");
        // another key under the known kid, and under an unknown one
        let other = key("k1");
        let e = a.authenticate(&sign(&other, "k1", claims(json!({})))).await.unwrap_err();
        assert!(e.contains("failed to verify signature"), "{e}");
        let e = a.authenticate(&sign(&other, "k2", claims(json!({})))).await.unwrap_err();
        assert!(e.contains("no key"), "{e}");
        assert!(a.authenticate("not.a.jwt").await.is_err());
    }

    #[tokio::test]
    async fn claims_mapping() {
        let k = key("k1");
        let (_d, a) = setup(&[&k], |c| c.username_claim = "email".into());
        let ok = a.authenticate(&sign(&k, "k1", claims(json!({"email_verified": true, "groups": "solo"})))).await.unwrap();
        assert_eq!(ok.user, "jane@example.com", "no prefix for the email claim");
        assert_eq!(ok.groups, ["solo", "system:authenticated"]);
        let e = a.authenticate(&sign(&k, "k1", claims(json!({"email_verified": false})))).await.unwrap_err();
        assert_eq!(e, "oidc: email not verified");

        let (_d, a) = setup(&[&k], |c| {
            c.username_prefix = Some("-".into());
            c.required_claims = vec![("hd".into(), "example.com".into())];
        });
        let e = a.authenticate(&sign(&k, "k1", claims(json!({})))).await.unwrap_err();
        assert!(e.contains("required claim hd"), "{e}");
        let ok = a.authenticate(&sign(&k, "k1", claims(json!({"hd": "example.com"})))).await.unwrap();
        assert_eq!(ok.user, "u-1");
        let e = a.authenticate(&sign(&k, "k1", claims(json!({"sub": 5})))).await.unwrap_err();
        assert!(e.contains("username"), "{e}");

        // RS256 only (the default) refuses an ES256 token
        let (_d, a) = setup(&[&k], |c| c.signing_algs = vec!["RS256".into()]);
        assert!(a.authenticate(&sign(&k, "k1", claims(json!({})))).await.unwrap_err().contains("unsupported algorithm"));
    }

    #[tokio::test]
    async fn rotated_keys_are_picked_up_from_the_file() {
        let (k1, k2) = (key("k1"), key("k2"));
        let (dir, a) = setup(&[&k1], |_| {});
        std::fs::write(dir.path().join("jwks.json"), json!({"keys": [k1.jwk, k2.jwk]}).to_string()).unwrap();
        // read at start less than 10 s ago: not refreshed yet
        assert!(a.authenticate(&sign(&k2, "k2", claims(json!({})))).await.is_err());
        a.keys.lock().unwrap().loaded = Some(Instant::now() - REFRESH_INTERVAL);
        assert!(a.authenticate(&sign(&k2, "k2", claims(json!({})))).await.is_ok());
    }

    /// A JWKS served over HTTPS by a CA of the test: fetched on first use (trusting
    /// `--oidc-ca-file`), again for an unknown kid after the refresh interval; without the CA
    /// the fetch fails and the token is refused.
    #[tokio::test]
    async fn jwks_from_an_https_url() {
        let (k1, k2) = (key("k1"), key("k2"));
        let ca = crate::pki::Ca::generate("oidc-test").unwrap();
        let (cert, pem_key) = ca.issue_serving(&["127.0.0.1".to_string()], Duration::from_secs(3600)).unwrap();
        let tls = crate::pki::server_tls_config_without_client_auth(&cert, &pem_key).unwrap();
        let body = std::sync::Arc::new(Mutex::new(json!({"keys": [k1.jwk]}).to_string()));
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let app = {
            let (body, hits) = (body.clone(), hits.clone());
            axum::Router::new().route(
                "/jwks",
                axum::routing::get(move || {
                    hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let b = body.lock().unwrap().clone();
                    async move { b }
                }),
            )
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://127.0.0.1:{}/jwks", listener.local_addr().unwrap().port());
        tokio::spawn(crate::http::serve(listener, tls, app, std::future::pending(), Duration::from_secs(1)));
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, ca.cert_pem()).unwrap();

        let mut c = OidcConfig::new(ISS, "fedctl", &url);
        c.signing_algs = vec!["ES256".into()];
        c.ca_file = Some(ca_file);
        let a = OidcAuthenticator::new(c.clone()).unwrap();
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0, "fetched on first use");
        let ok = a.authenticate(&sign(&k1, "k1", claims(json!({})))).await.unwrap();
        assert_eq!(ok.user, format!("{ISS}#u-1"));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        // rotated: the new kid is fetched once the interval has passed, not before
        *body.lock().unwrap() = json!({"keys": [k1.jwk, k2.jwk]}).to_string();
        assert!(a.authenticate(&sign(&k2, "k2", claims(json!({})))).await.is_err());
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1, "rate-limited");
        a.keys.lock().unwrap().loaded = Some(Instant::now() - REFRESH_INTERVAL);
        assert!(a.authenticate(&sign(&k2, "k2", claims(json!({})))).await.is_ok());
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
        // without the CA the server is not trusted
        c.ca_file = None;
        let untrusted = OidcAuthenticator::new(c).unwrap();
        assert!(untrusted.authenticate(&sign(&k1, "k1", claims(json!({})))).await.is_err());
    }

    #[test]
    fn bad_flags() {
        let bad = |f: &dyn Fn(&mut OidcConfig)| {
            let mut c = OidcConfig::new(ISS, "fedctl", "/nonexistent/jwks.json");
            f(&mut c);
            OidcAuthenticator::new(c).unwrap_err().to_string()
        };
        assert!(bad(&|c| c.issuer_url = "http://issuer".into()).contains("https"));
        assert!(bad(&|c| c.client_id.clear()).contains("client-id"));
        assert!(bad(&|c| c.signing_algs = vec!["HS256".into()]).contains("asymmetric"));
        assert!(bad(&|c| c.signing_algs = vec!["XX1".into()]).contains("unsupported"));
        assert!(bad(&|c| c.jwks = "http://idp/jwks".into()).contains("https"));
        assert!(bad(&|_| {}).contains("/nonexistent/jwks.json"));
        assert_eq!(parse_required_claim("hd=example.com").unwrap(), ("hd".to_string(), "example.com".to_string()));
        assert!(parse_required_claim("nokey").is_err());
    }
}
