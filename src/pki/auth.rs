//! Authentication primitives: identities, static bearer tokens and kubeadm-style bootstrap tokens.
//!
//! No HTTP here: the API layer extracts a bearer token or a verified client certificate and
//! asks this module who it belongs to. Validation is pure (`now` is a parameter) and token
//! secrets are compared in constant time; no secret appears in `Debug` output.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Group that makes a user a superuser (Kubernetes `system:masters`); `pki::Ca::sign_csr` never
/// grants it.
pub const MASTERS_GROUP: &str = "system:masters";
/// Group kube-apiserver adds to every authenticated identity.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// User-name prefix of member-cluster agents: `system:fedctl:agent:<cluster>`.
pub const AGENT_USER_PREFIX: &str = "system:fedctl:agent:";
/// Group of all member-cluster agents.
pub const AGENTS_GROUP: &str = "system:fedctl:agents";
/// User-name prefix of bootstrap-token identities: `system:bootstrap:<token-id>`.
pub const BOOTSTRAP_USER_PREFIX: &str = "system:bootstrap:";
/// Group of all bootstrap-token identities (extra groups must start with `system:bootstrappers:`).
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
/// Secret type of a persisted bootstrap token (mirrors Kubernetes `bootstrap.kubernetes.io/token`).
pub const BOOTSTRAP_TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Name prefix of a bootstrap token Secret: `bootstrap-token-<token-id>`.
pub const BOOTSTRAP_TOKEN_SECRET_PREFIX: &str = "bootstrap-token-";
/// Bootstrap token usage that lets the token authenticate API requests.
pub const USAGE_AUTHENTICATION: &str = "authentication";
/// Bootstrap token usage that lets the token sign the cluster-info ConfigMap.
pub const USAGE_SIGNING: &str = "signing";
/// User name given to the generated admin token.
pub const ADMIN_USER: &str = "admin";

const TOKEN_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// Errors of the authentication layer.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Reading or writing the token file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A line of the static token file is malformed (1-based `line`).
    #[error("{}:{line}: {reason}", path.display())]
    TokenFile {
        /// The token file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A string is not a bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`.
    #[error("invalid bootstrap token format (want [a-z0-9]{{6}}.[a-z0-9]{{16}})")]
    InvalidBootstrapToken,
    /// Bootstrap token Secret data lacks a field or has an invalid value.
    #[error("invalid bootstrap token secret: {0}")]
    InvalidSecret(String),
}

/// An authenticated user as RBAC sees it (mirrors Kubernetes `user.Info`, without UID/extra).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UserInfo {
    /// User name, e.g. `admin` or `system:fedctl:agent:east`.
    pub name: String,
    /// Groups, e.g. `["system:masters"]`.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A user with the given name and groups.
    pub fn new(name: impl Into<String>, groups: impl IntoIterator<Item = impl Into<String>>) -> Self {
        UserInfo { name: name.into(), groups: groups.into_iter().map(Into::into).collect() }
    }
}

/// Who a request comes from, after authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A member of `system:masters`: may do anything.
    Admin(UserInfo),
    /// The agent of member cluster `cluster` (user `system:fedctl:agent:<cluster>`).
    Agent {
        /// Member cluster name.
        cluster: String,
    },
    /// A holder of bootstrap token `token_id` (may only join: request its agent certificate).
    Bootstrap {
        /// The public 6-character token id.
        token_id: String,
        /// The token's `auth-extra-groups`.
        extra_groups: Vec<String>,
    },
    /// Any other authenticated user; RBAC decides.
    User(UserInfo),
}

impl Identity {
    /// Classifies an authenticated user (client-certificate CN/O or static token entry).
    ///
    /// A name `system:fedctl:agent:<cluster>` with a non-empty cluster of `[a-z0-9.-]` maps to
    /// [`Identity::Agent`] (checked first: it is the narrower identity); otherwise a member of
    /// `system:masters` is [`Identity::Admin`]; anyone else [`Identity::User`].
    pub fn from_user(user: UserInfo) -> Identity {
        if let Some(cluster) = user.name.strip_prefix(AGENT_USER_PREFIX) {
            let valid = !cluster.is_empty() && cluster.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
            if valid {
                return Identity::Agent { cluster: cluster.to_string() };
            }
        }
        if user.groups.iter().any(|g| g == MASTERS_GROUP) {
            Identity::Admin(user)
        } else {
            Identity::User(user)
        }
    }

    /// [`Identity::from_user`] for a client certificate's `(CN, O values)`, as returned by
    /// `pki::peer_identity`.
    pub fn from_client_cert((name, groups): (String, Vec<String>)) -> Identity {
        Identity::from_user(UserInfo { name, groups })
    }

    /// The user RBAC and audit see, with `system:authenticated` appended (as kube-apiserver).
    ///
    /// Agents get groups `system:fedctl:agents`; bootstrap tokens get user
    /// `system:bootstrap:<id>` and groups `system:bootstrappers` plus their extra groups.
    pub fn user_info(&self) -> UserInfo {
        let mut info = match self {
            Identity::Admin(u) | Identity::User(u) => u.clone(),
            Identity::Agent { cluster } => UserInfo::new(format!("{AGENT_USER_PREFIX}{cluster}"), [AGENTS_GROUP]),
            Identity::Bootstrap { token_id, extra_groups } => {
                let mut groups = vec![BOOTSTRAPPERS_GROUP.to_string()];
                groups.extend(extra_groups.iter().cloned());
                UserInfo { name: format!("{BOOTSTRAP_USER_PREFIX}{token_id}"), groups }
            }
        };
        if !info.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            info.groups.push(AUTHENTICATED_GROUP.to_string());
        }
        info
    }

    /// Whether this identity is a superuser.
    pub fn is_admin(&self) -> bool {
        matches!(self, Identity::Admin(_))
    }
}

/// Compares two secrets in time independent of where they differ: both are hashed with
/// SHA-256 first, so neither length nor content leaks through timing.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (ha, hb) = (Sha256::digest(a), Sha256::digest(b));
    let diff = ha.iter().zip(hb.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// One entry of the static token file. `Debug` hides the token.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticToken {
    /// The bearer token (secret).
    pub token: String,
    /// The user it authenticates as.
    pub user: UserInfo,
    /// The UID column of the token file.
    pub uid: String,
}

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticToken").field("user", &self.user).field("uid", &self.uid).finish_non_exhaustive()
    }
}

/// A bootstrap token (mirrors kubeadm's `BootstrapToken` and the fields of its
/// `bootstrap.kubernetes.io/token` Secret). `Debug` hides the secret half.
///
/// Serializes (serde) with camelCase keys and `expiration` as RFC 3339; see
/// [`BootstrapToken::to_secret_data`] for the Secret form.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapToken {
    /// Public id, `[a-z0-9]{6}`.
    pub id: String,
    /// Secret, `[a-z0-9]{16}`.
    pub secret: String,
    /// Instant after which the token is invalid; `None` never expires.
    #[serde(default, with = "rfc3339_opt", skip_serializing_if = "Option::is_none")]
    pub expiration: Option<DateTime<Utc>>,
    /// Allowed usages: [`USAGE_AUTHENTICATION`], [`USAGE_SIGNING`].
    #[serde(default)]
    pub usages: Vec<String>,
    /// Extra groups for authentication; each must start with `system:bootstrappers:`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Human description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl std::fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapToken")
            .field("id", &self.id)
            .field("expiration", &self.expiration)
            .field("usages", &self.usages)
            .field("groups", &self.groups)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

mod rfc3339_opt {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(t) => s.serialize_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => DateTime::parse_from_rfc3339(&s).map(|t| Some(t.with_timezone(&Utc))).map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

fn random_chars(n: usize) -> String {
    let mut rng = rand::rng();
    (0..n).map(|_| TOKEN_CHARS[rng.random_range(0..TOKEN_CHARS.len())] as char).collect()
}

/// A fresh bootstrap token string `[a-z0-9]{6}.[a-z0-9]{16}` (kubeadm's `token generate`).
pub fn generate_bootstrap_token() -> String {
    format!("{}.{}", random_chars(6), random_chars(16))
}

/// Splits `id.secret` if it has the bootstrap token format `[a-z0-9]{6}.[a-z0-9]{16}`.
pub fn parse_bootstrap_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

impl BootstrapToken {
    /// A token from its `id.secret` string with both usages (kubeadm's default).
    /// Errors: [`AuthError::InvalidBootstrapToken`] on a malformed string.
    pub fn new(token: &str, expiration: Option<DateTime<Utc>>) -> Result<Self, AuthError> {
        let (id, secret) = parse_bootstrap_token(token).ok_or(AuthError::InvalidBootstrapToken)?;
        Ok(BootstrapToken {
            id: id.to_string(),
            secret: secret.to_string(),
            expiration,
            usages: vec![USAGE_AUTHENTICATION.to_string(), USAGE_SIGNING.to_string()],
            groups: Vec::new(),
            description: None,
        })
    }

    /// A freshly generated token expiring `ttl` after `now` (`None`: never; kubeadm's
    /// default TTL is 24 h).
    pub fn generate(ttl: Option<chrono::Duration>, now: DateTime<Utc>) -> Self {
        Self::new(&generate_bootstrap_token(), ttl.map(|d| now + d)).expect("generated token is well-formed")
    }

    /// The full `id.secret` bearer token (secret).
    pub fn token_string(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    /// Whether the token is expired at `now` (expired from the `expiration` instant on).
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.expiration.is_some_and(|e| now >= e)
    }

    /// Name of the Secret that stores this token: `bootstrap-token-<id>`.
    pub fn secret_name(&self) -> String {
        format!("{BOOTSTRAP_TOKEN_SECRET_PREFIX}{}", self.id)
    }

    /// The Secret `data` (plain strings; base64 them for a Secret's `data` field, or use
    /// `stringData`), with the keys of Kubernetes bootstrap token Secrets: `token-id`,
    /// `token-secret`, `expiration`, `usage-bootstrap-<usage>`, `auth-extra-groups`,
    /// `description`.
    pub fn to_secret_data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::new();
        data.insert("token-id".to_string(), self.id.clone());
        data.insert("token-secret".to_string(), self.secret.clone());
        if let Some(e) = self.expiration {
            data.insert("expiration".to_string(), e.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        }
        for usage in &self.usages {
            data.insert(format!("usage-bootstrap-{usage}"), "true".to_string());
        }
        if !self.groups.is_empty() {
            data.insert("auth-extra-groups".to_string(), self.groups.join(","));
        }
        if let Some(d) = &self.description {
            data.insert("description".to_string(), d.clone());
        }
        data
    }

    /// Parses Secret `data` (already base64-decoded) as written by
    /// [`BootstrapToken::to_secret_data`] or by kubeadm. Errors: [`AuthError::InvalidSecret`].
    pub fn from_secret_data(data: &BTreeMap<String, String>) -> Result<Self, AuthError> {
        let get = |k: &str| data.get(k).map(|s| s.trim()).filter(|s| !s.is_empty());
        let id = get("token-id").ok_or_else(|| AuthError::InvalidSecret("missing token-id".into()))?;
        let secret = get("token-secret").ok_or_else(|| AuthError::InvalidSecret("missing token-secret".into()))?;
        let mut token = BootstrapToken::new(&format!("{id}.{secret}"), None).map_err(|_| AuthError::InvalidSecret("token-id or token-secret malformed".into()))?;
        if let Some(e) = get("expiration") {
            let t = DateTime::parse_from_rfc3339(e).map_err(|err| AuthError::InvalidSecret(format!("expiration {e:?}: {err}")))?;
            token.expiration = Some(t.with_timezone(&Utc));
        }
        token.usages = data.iter().filter_map(|(k, v)| Some((k.strip_prefix("usage-bootstrap-")?, v))).filter(|(_, v)| v.trim() == "true").map(|(u, _)| u.to_string()).collect();
        token.groups = get("auth-extra-groups").map(|g| g.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()).unwrap_or_default();
        token.description = get("description").map(str::to_string);
        Ok(token)
    }

    /// The identity `presented` (an `id.secret` string) authenticates as at `now`, if any:
    /// the id and (in constant time) the secret must match, the token must not be expired,
    /// must have usage `authentication`, and its extra groups must all start with
    /// `system:bootstrappers:` (mirrors kube-apiserver's bootstrap token authenticator).
    pub fn validate(&self, presented: &str, now: DateTime<Utc>) -> Option<Identity> {
        let (id, secret) = parse_bootstrap_token(presented)?;
        let secret_ok = constant_time_eq(self.secret.as_bytes(), secret.as_bytes());
        if id != self.id || !secret_ok || self.is_expired(now) {
            return None;
        }
        if !self.usages.iter().any(|u| u == USAGE_AUTHENTICATION) {
            return None;
        }
        let groups_ok = self.groups.iter().all(|g| g.starts_with("system:bootstrappers:"));
        groups_ok.then(|| Identity::Bootstrap { token_id: self.id.clone(), extra_groups: self.groups.clone() })
    }
}

/// Validates `presented` against a set of bootstrap tokens (looked up by the public id).
pub fn validate_bootstrap_token<'a>(tokens: impl IntoIterator<Item = &'a BootstrapToken>, presented: &str, now: DateTime<Utc>) -> Option<Identity> {
    let (id, _) = parse_bootstrap_token(presented)?;
    tokens.into_iter().find(|t| t.id == id)?.validate(presented, now)
}

/// Bearer token authenticator: static tokens (token file) plus bootstrap tokens.
///
/// Share it behind an `Arc`; the bootstrap token set may be replaced at runtime (e.g. from a
/// watch on Secrets of type `bootstrap.kubernetes.io/token`). `Debug` hides all secrets.
pub struct TokenAuthenticator {
    static_tokens: Vec<StaticToken>,
    bootstrap: RwLock<BTreeMap<String, BootstrapToken>>,
}

impl std::fmt::Debug for TokenAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAuthenticator").field("static_tokens", &self.static_tokens.len()).field("bootstrap_tokens", &self.bootstrap.read().map(|b| b.len()).unwrap_or(0)).finish()
    }
}

impl TokenAuthenticator {
    /// An authenticator with the given static tokens and no bootstrap tokens.
    pub fn new(static_tokens: Vec<StaticToken>) -> Self {
        TokenAuthenticator { static_tokens, bootstrap: RwLock::new(BTreeMap::new()) }
    }

    /// Loads the static token file `DIR/tokens`, creating it (mode 0600) with a random admin
    /// token on first start, or appending one if no `system:masters` entry is present.
    ///
    /// The file format is kube-apiserver's `--token-auth-file` CSV:
    /// `token,user,uid[,"group1,group2"]`; blank lines and `#` comments are skipped.
    pub fn load_or_create(data_dir: &Path) -> Result<Self, AuthError> {
        let path = data_dir.join("tokens");
        let io = |source| AuthError::Io { path: path.clone(), source };
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io(e)),
        };
        let mut tokens = parse_token_file(&text, &path)?;
        if !tokens.iter().any(|t| t.user.groups.iter().any(|g| g == MASTERS_GROUP)) {
            let admin = StaticToken { token: hex::encode(rand::random::<[u8; 32]>()), user: UserInfo::new(ADMIN_USER, [MASTERS_GROUP]), uid: ADMIN_USER.to_string() };
            let mut text = text;
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format_token_line(&admin));
            crate::pki::files::write_private_file(&path, text.as_bytes()).map_err(io)?;
            tokens.push(admin);
        } else {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).map_err(io)?;
        }
        Ok(Self::new(tokens))
    }

    /// Adds the entries of a static token file (kube-apiserver's `--token-auth-file` CSV:
    /// `token,user,uid[,"group1,group2"]`, blank lines and `#` comments skipped). Errors:
    /// [`AuthError::Io`] when it cannot be read, [`AuthError::TokenFile`] for a malformed line.
    pub fn add_token_file(&mut self, path: &Path) -> Result<(), AuthError> {
        let text = fs::read_to_string(path).map_err(|source| AuthError::Io { path: path.to_path_buf(), source })?;
        self.static_tokens.extend(parse_token_file(&text, path)?);
        Ok(())
    }

    /// The first static token of a `system:masters` member (the admin token written by
    /// [`TokenAuthenticator::load_or_create`]). Secret.
    pub fn admin_token(&self) -> Option<&str> {
        self.static_tokens.iter().find(|t| t.user.groups.iter().any(|g| g == MASTERS_GROUP)).map(|t| t.token.as_str())
    }

    /// The static token entries.
    pub fn static_tokens(&self) -> &[StaticToken] {
        &self.static_tokens
    }

    /// Adds or replaces (by id) a bootstrap token.
    pub fn upsert_bootstrap_token(&self, token: BootstrapToken) {
        self.bootstrap.write().unwrap_or_else(|e| e.into_inner()).insert(token.id.clone(), token);
    }

    /// Removes the bootstrap token with public id `id`; returns whether it existed.
    pub fn remove_bootstrap_token(&self, id: &str) -> bool {
        self.bootstrap.write().unwrap_or_else(|e| e.into_inner()).remove(id).is_some()
    }

    /// Replaces the whole bootstrap token set (e.g. after a re-list).
    pub fn set_bootstrap_tokens(&self, tokens: impl IntoIterator<Item = BootstrapToken>) {
        let map = tokens.into_iter().map(|t| (t.id.clone(), t)).collect();
        *self.bootstrap.write().unwrap_or_else(|e| e.into_inner()) = map;
    }

    /// A snapshot of the bootstrap tokens, ordered by id.
    pub fn bootstrap_tokens(&self) -> Vec<BootstrapToken> {
        self.bootstrap.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    /// The identity a bearer token authenticates as at `now`, or `None` (→ 401).
    ///
    /// Static tokens are all compared in constant time (no early exit); a string in bootstrap
    /// format that matches no static token is then checked with
    /// [`validate_bootstrap_token`].
    pub fn validate(&self, token: &str, now: DateTime<Utc>) -> Option<Identity> {
        if token.is_empty() {
            return None;
        }
        let mut found: Option<&StaticToken> = None;
        for t in &self.static_tokens {
            if constant_time_eq(t.token.as_bytes(), token.as_bytes()) && found.is_none() {
                found = Some(t);
            }
        }
        if let Some(t) = found {
            return Some(Identity::from_user(t.user.clone()));
        }
        let bootstrap = self.bootstrap.read().unwrap_or_else(|e| e.into_inner());
        validate_bootstrap_token(bootstrap.values(), token, now)
    }
}

fn format_token_line(t: &StaticToken) -> String {
    if t.user.groups.is_empty() {
        format!("{},{},{}\n", t.token, t.user.name, t.uid)
    } else {
        format!("{},{},{},\"{}\"\n", t.token, t.user.name, t.uid, t.user.groups.join(","))
    }
}

/// Parses kube-apiserver's token file CSV: `token,user,uid[,"g1,g2"]` per line.
fn parse_token_file(text: &str, path: &Path) -> Result<Vec<StaticToken>, AuthError> {
    let mut out: Vec<StaticToken> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |reason: &str| AuthError::TokenFile { path: path.to_path_buf(), line: i + 1, reason: reason.into() };
        let mut cols = line.splitn(4, ',');
        let token = cols.next().unwrap_or_default().trim();
        let user = cols.next().map(str::trim).ok_or_else(|| err("want token,user,uid[,groups]"))?;
        let uid = cols.next().map(str::trim).ok_or_else(|| err("want token,user,uid[,groups]"))?;
        if token.is_empty() || user.is_empty() {
            return Err(err("empty token or user"));
        }
        let groups = cols.next().map(|g| g.trim().trim_matches('"')).map(|g| g.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()).unwrap_or_default();
        if out.iter().any(|t| t.token == token) {
            return Err(err("duplicate token"));
        }
        out.push(StaticToken { token: token.into(), user: UserInfo { name: user.into(), groups }, uid: uid.into() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2025-06-01T12:00:00Z").unwrap().with_timezone(&Utc)
    }

    #[test]
    fn bootstrap_token_format() {
        for _ in 0..50 {
            let t = generate_bootstrap_token();
            assert_eq!(t.len(), 23);
            let (id, secret) = parse_bootstrap_token(&t).expect("well-formed");
            assert_eq!((id.len(), secret.len()), (6, 16));
            assert!(t.bytes().all(|b| b == b'.' || b.is_ascii_lowercase() || b.is_ascii_digit()));
        }
        assert_ne!(generate_bootstrap_token(), generate_bootstrap_token());
        for bad in ["abcdef0123456789abcdef", "abcde.0123456789abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcdeg!", "abcdef.0123456789abcdef.x", ""] {
            assert!(parse_bootstrap_token(bad).is_none(), "{bad}");
        }
        assert!(parse_bootstrap_token("abcdef.0123456789abcdef").is_some());
        assert!(matches!(BootstrapToken::new("nope", None), Err(AuthError::InvalidBootstrapToken)));
    }

    #[test]
    fn bootstrap_token_expiry_and_validation() {
        let tok = BootstrapToken::generate(Some(chrono::Duration::hours(24)), t0());
        let s = tok.token_string();
        let want = Identity::Bootstrap { token_id: tok.id.clone(), extra_groups: vec![] };
        assert_eq!(tok.validate(&s, t0()), Some(want.clone()));
        assert_eq!(tok.validate(&s, t0() + chrono::Duration::hours(23)), Some(want));
        assert_eq!(tok.validate(&s, t0() + chrono::Duration::hours(24)), None, "expired at expiration");
        assert_eq!(tok.validate(&s, t0() + chrono::Duration::days(2)), None);

        // Wrong secret, same id.
        let wrong = format!("{}.{}", tok.id, "0000000000000000");
        assert_eq!(tok.validate(&wrong, t0()), None);

        // No expiration: valid forever; without the authentication usage: never.
        let mut forever = BootstrapToken::generate(None, t0());
        assert!(forever.validate(&forever.token_string(), t0() + chrono::Duration::days(3650)).is_some());
        forever.usages = vec![USAGE_SIGNING.into()];
        assert!(forever.validate(&forever.token_string(), t0()).is_none());

        // Extra groups outside system:bootstrappers: make the token unusable.
        let mut grouped = BootstrapToken::generate(None, t0());
        grouped.groups = vec!["system:bootstrappers:fedctl:default-agent-token".into()];
        let id = grouped.validate(&grouped.token_string(), t0()).unwrap();
        assert_eq!(id.user_info(), UserInfo::new(format!("system:bootstrap:{}", grouped.id), ["system:bootstrappers", "system:bootstrappers:fedctl:default-agent-token", "system:authenticated"]));
        grouped.groups = vec![MASTERS_GROUP.into()];
        assert!(grouped.validate(&grouped.token_string(), t0()).is_none());
    }

    #[test]
    fn bootstrap_token_secret_and_serde_round_trip() {
        let mut tok = BootstrapToken::generate(Some(chrono::Duration::hours(1)), t0());
        tok.description = Some("join east".into());
        tok.groups = vec!["system:bootstrappers:fedctl:agents".into()];
        let data = tok.to_secret_data();
        assert_eq!(data["token-id"], tok.id);
        assert_eq!(data["expiration"], "2025-06-01T13:00:00Z");
        assert_eq!(data["usage-bootstrap-authentication"], "true");
        assert_eq!(data["usage-bootstrap-signing"], "true");
        assert_eq!(tok.secret_name(), format!("bootstrap-token-{}", tok.id));
        assert_eq!(BootstrapToken::from_secret_data(&data).unwrap(), tok);

        let json = serde_json::to_string(&tok).unwrap();
        assert!(json.contains("\"expiration\":\"2025-06-01T13:00:00Z\""));
        assert_eq!(serde_json::from_str::<BootstrapToken>(&json).unwrap(), tok);

        let shown = format!("{tok:?}");
        assert!(!shown.contains(&tok.secret));

        let mut missing = data.clone();
        missing.remove("token-secret");
        assert!(matches!(BootstrapToken::from_secret_data(&missing), Err(AuthError::InvalidSecret(_))));
    }

    #[test]
    fn identity_mapping() {
        let agent = Identity::from_client_cert(("system:fedctl:agent:east".into(), vec![AGENTS_GROUP.into()]));
        assert_eq!(agent, Identity::Agent { cluster: "east".into() });
        assert_eq!(agent.user_info().name, "system:fedctl:agent:east");
        assert!(agent.user_info().groups.contains(&AGENTS_GROUP.to_string()));

        let admin = Identity::from_client_cert(("admin".into(), vec![MASTERS_GROUP.into()]));
        assert!(admin.is_admin());
        assert_eq!(admin.user_info().groups, [MASTERS_GROUP, AUTHENTICATED_GROUP]);

        let user = Identity::from_user(UserInfo::new("jane", ["dev"]));
        assert_eq!(user, Identity::User(UserInfo::new("jane", ["dev"])));
        // An empty or odd cluster name is not an agent.
        assert!(matches!(Identity::from_user(UserInfo::new("system:fedctl:agent:", Vec::<String>::new())), Identity::User(_)));
        assert!(matches!(Identity::from_user(UserInfo::new("system:fedctl:agent:A/B", Vec::<String>::new())), Identity::User(_)));
    }

    #[test]
    fn constant_time_eq_semantics() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn admin_token_created_once_and_validated() {
        let dir = tempfile::tempdir().unwrap();
        let auth = TokenAuthenticator::load_or_create(dir.path()).unwrap();
        let token = auth.admin_token().unwrap().to_string();
        assert_eq!(token.len(), 64);
        let path = dir.path().join("tokens");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_to_string(&path).unwrap(), format!("{token},admin,admin,\"system:masters\"\n"));
        assert!(!format!("{auth:?}").contains(&token));

        let again = TokenAuthenticator::load_or_create(dir.path()).unwrap();
        assert_eq!(again.admin_token(), Some(token.as_str()));
        assert!(again.validate(&token, t0()).unwrap().is_admin());
        assert_eq!(again.validate("nope", t0()), None);
        assert_eq!(again.validate("", t0()), None);

        // Bootstrap tokens at runtime.
        let tok = BootstrapToken::generate(Some(chrono::Duration::hours(1)), t0());
        assert_eq!(again.validate(&tok.token_string(), t0()), None);
        again.upsert_bootstrap_token(tok.clone());
        assert!(matches!(again.validate(&tok.token_string(), t0()), Some(Identity::Bootstrap { .. })));
        assert_eq!(again.validate(&tok.token_string(), t0() + chrono::Duration::hours(2)), None);
        assert!(again.remove_bootstrap_token(&tok.id));
        assert_eq!(again.validate(&tok.token_string(), t0()), None);
        again.set_bootstrap_tokens([tok.clone()]);
        assert_eq!(again.bootstrap_tokens(), vec![tok]);
    }

    #[test]
    fn token_file_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        fs::write(&path, "# comment\n\nt-agent,system:fedctl:agent:west,u1,\"system:fedctl:agents\"\nt-jane,jane,u2\n").unwrap();
        let auth = TokenAuthenticator::load_or_create(dir.path()).unwrap();
        assert_eq!(auth.static_tokens().len(), 3, "admin appended");
        assert_eq!(auth.validate("t-agent", t0()), Some(Identity::Agent { cluster: "west".into() }));
        assert_eq!(auth.validate("t-jane", t0()), Some(Identity::User(UserInfo::new("jane", Vec::<String>::new()))));
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# comment\n"));
        assert_eq!(text.lines().count(), 5);

        fs::write(&path, "only-a-token\n").unwrap();
        assert!(matches!(TokenAuthenticator::load_or_create(dir.path()), Err(AuthError::TokenFile { line: 1, .. })));
    }
}
