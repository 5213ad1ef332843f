//! `fedctl token create|list|delete`: bootstrap tokens for joining members (mirrors `kubeadm token`) and, with `--user`, personal bearer tokens and kubeconfigs for people; both kept as Secrets by the server.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::cli::client::{Client, ClientError};
use crate::pki::auth::{BootstrapToken, BOOTSTRAP_TOKEN_SECRET_TYPE};
use crate::pki::kubeconfig::Kubeconfig;
use crate::server::bootstrap::{join_command, token_from_secret, token_secret, TOKEN_NAMESPACE};

/// Default lifetime of a created token (kubeadm's: 24 h).
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

/// Errors of `fedctl token`.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// An API call failed.
    #[error("{0}")]
    Api(#[from] ClientError),
    /// The kubeconfig could not be read (for `--print-join-command`).
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] crate::pki::kubeconfig::KubeconfigError),
    /// The CA in the kubeconfig is unusable (for `--print-join-command`).
    #[error("kubeconfig CA: {0}")]
    Ca(String),
    /// A flag's value is unusable.
    #[error("{0}")]
    Invalid(String),
    /// No token has that id.
    #[error("no token with id {0:?}")]
    NotFound(String),
}

/// Configuration of `fedctl token create`.
#[derive(Clone, Debug)]
pub struct CreateConfig {
    /// Admin kubeconfig of the federation.
    pub kubeconfig: PathBuf,
    /// Lifetime; `None` (or zero on the command line) never expires.
    pub ttl: Option<Duration>,
    /// Free-text description stored with the token.
    pub description: Option<String>,
    /// Print the whole join command instead of the bare token.
    pub print_join_command: bool,
}

fn secrets_path() -> String {
    format!("/api/v1/namespaces/{TOKEN_NAMESPACE}/secrets")
}

/// Creates a token on the server and returns what to print: the token, or the join command.
pub async fn create(cfg: &CreateConfig) -> Result<String, TokenError> {
    let client = Client::from_kubeconfig(&cfg.kubeconfig)?;
    let ttl = cfg.ttl.filter(|d| !d.is_zero()).and_then(|d| chrono::Duration::from_std(d).ok());
    let mut token = BootstrapToken::generate(ttl, chrono::Utc::now());
    token.description = cfg.description.clone();
    client.post(&secrets_path(), &token_secret(&token)).await?;
    if !cfg.print_join_command {
        return Ok(token.token_string());
    }
    let kc = Kubeconfig::load(&cfg.kubeconfig)?;
    let cluster = kc.current_cluster()?;
    let ca = cluster.ca_pem()?.ok_or_else(|| TokenError::Ca("no certificate-authority".into()))?;
    let hash = crate::pki::ca_cert_hash(&ca).map_err(|e| TokenError::Ca(e.to_string()))?;
    Ok(join_command(&cluster.server, &token.token_string(), &hash))
}

/// Configuration of `fedctl token create --user`.
#[derive(Clone, Debug)]
pub struct UserTokenConfig {
    /// Kubeconfig of the creator (its current cluster's server URL and CA go into
    /// `kubeconfig_out`).
    pub kubeconfig: PathBuf,
    /// The user the token authenticates as.
    pub user: String,
    /// Its groups.
    pub groups: Vec<String>,
    /// Lifetime; `None` (or zero) never expires.
    pub ttl: Option<Duration>,
    /// Free-text description stored with the token.
    pub description: Option<String>,
    /// Write a kubeconfig with the token as its credential here (mode 0600).
    pub kubeconfig_out: Option<PathBuf>,
    /// Print only the bearer token (for a web console's sign-in).
    pub ui: bool,
}

/// Creates a user token ([`crate::server::identity::usertoken`]): its Secret (only a hash of
/// the secret part) in `kube-system`, then, with `kubeconfig_out`, a kubeconfig using it.
/// Returns what to print: the bare token with `ui`, else a summary (with the token unless it
/// went into the kubeconfig). Errors: an empty user or group, the API's (403 when the
/// creator may not impersonate the user or a group), the kubeconfig's.
pub async fn create_user(cfg: &UserTokenConfig) -> Result<String, TokenError> {
    use crate::server::identity::usertoken::UserToken;
    if cfg.user.trim().is_empty() {
        return Err(TokenError::Invalid("--user must not be empty".into()));
    }
    if let Some(g) = cfg.groups.iter().find(|g| g.trim().is_empty() || g.contains(',')) {
        return Err(TokenError::Invalid(format!("--groups: invalid group {g:?}")));
    }
    let client = Client::from_kubeconfig(&cfg.kubeconfig)?;
    // the kubeconfig to write is checked before anything is created
    let target = match &cfg.kubeconfig_out {
        Some(_) => {
            let kc = Kubeconfig::load(&cfg.kubeconfig)?;
            let cluster = kc.current_cluster()?;
            let ca = cluster.ca_pem()?.ok_or_else(|| TokenError::Ca("no certificate-authority".into()))?;
            Some((cluster.server.clone(), ca))
        }
        None => None,
    };
    let ttl = cfg.ttl.filter(|d| !d.is_zero()).and_then(|d| chrono::Duration::from_std(d).ok());
    let (mut token, bearer) = UserToken::generate(cfg.user.trim(), &cfg.groups, ttl, chrono::Utc::now());
    token.description = cfg.description.clone();
    client.post(&secrets_path(), &token.to_secret()).await?;
    let expires = token.expiration.map(|e| e.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)).unwrap_or_else(|| "never".into());
    if let (Some(path), Some((server, ca))) = (&cfg.kubeconfig_out, target) {
        let kc = Kubeconfig::single(&format!("fedctl-{}", token.user), &server, &ca, crate::pki::kubeconfig::AuthInfo::bearer_token(&bearer));
        if let Err(e) = kc.write(path) {
            // nothing half-made: the token nobody holds is revoked again
            let _ = client.delete(&format!("{}/{}", secrets_path(), token.secret_name())).await;
            return Err(e.into());
        }
    }
    if cfg.ui {
        return Ok(bearer);
    }
    let mut out = String::new();
    match &cfg.kubeconfig_out {
        Some(p) => out.push_str(&format!("kubeconfig written to {}\n", p.display())),
        None => out.push_str(&format!("token: {bearer}\n")),
    }
    out.push_str(&format!("id: {}\nuser: {}\ngroups: {}\nexpires: {expires}\nrevoke with: fedctl token delete {}", token.id, token.user, token.groups.join(","), token.id));
    Ok(out)
}

/// Deletes the token with public id `id` (a user token's or a bootstrap token's; the whole
/// token is accepted too), which revokes it. Returns what to print. Errors:
/// [`TokenError::NotFound`], the API's.
pub async fn delete(kubeconfig: &std::path::Path, id: &str) -> Result<String, TokenError> {
    use crate::server::identity::usertoken;
    let id = match (usertoken::parse_token(id), crate::pki::auth::parse_bootstrap_token(id)) {
        (Some((i, _)), _) | (None, Some((i, _))) => i,
        _ => id,
    };
    let client = Client::from_kubeconfig(kubeconfig)?;
    for name in [format!("{}{id}", usertoken::SECRET_PREFIX), format!("{}{id}", crate::pki::auth::BOOTSTRAP_TOKEN_SECRET_PREFIX)] {
        match client.delete(&format!("{}/{name}", secrets_path())).await {
            Ok(Some(_)) => return Ok(format!("token {id:?} deleted")),
            Ok(None) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(TokenError::NotFound(id.to_string()))
}

/// The bootstrap tokens stored on the server, ordered by id.
pub async fn list_tokens(kubeconfig: &std::path::Path) -> Result<Vec<BootstrapToken>, TokenError> {
    let client = Client::from_kubeconfig(kubeconfig)?;
    let list = client.get(&secrets_path()).await?;
    let mut out: Vec<BootstrapToken> = list
        .get("items")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(|s| s.get("type").and_then(Value::as_str) == Some(BOOTSTRAP_TOKEN_SECRET_TYPE)).filter_map(|s| token_from_secret(s).ok()).collect())
        .unwrap_or_default();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// `kubeadm token list`'s table: TOKEN, TTL, EXPIRES, USAGES, DESCRIPTION.
pub fn format_table(tokens: &[BootstrapToken], now: chrono::DateTime<chrono::Utc>) -> String {
    let mut rows = vec![["TOKEN".to_string(), "TTL".into(), "EXPIRES".into(), "USAGES".into(), "DESCRIPTION".into()]];
    for t in tokens {
        let (ttl, expires) = match t.expiration {
            Some(e) if e <= now => ("<expired>".to_string(), e.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            Some(e) => (crate::config::duration::format_short((e - now).to_std().unwrap_or_default()), e.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            None => ("<forever>".to_string(), "<never>".to_string()),
        };
        rows.push([t.token_string(), ttl, expires, t.usages.join(","), t.description.clone().unwrap_or_else(|| "<none>".into())]);
    }
    let widths: Vec<usize> = (0..5).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r.iter().enumerate().map(|(i, c)| if i == 4 { c.clone() } else { format!("{c:<w$}", w = widths[i]) }).collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let now = chrono::Utc::now();
        let mut a = BootstrapToken::new("abcdef.0123456789abcdef", Some(now + chrono::Duration::hours(2) + chrono::Duration::seconds(5))).unwrap();
        a.description = Some("first".into());
        let b = BootstrapToken::new("zzzzzz.0123456789abcdef", None).unwrap();
        let t = format_table(&[a, b], now);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("TOKEN"));
        assert!(lines[1].starts_with("abcdef.0123456789abcdef   2h "), "{t}");
        assert!(lines[1].ends_with("authentication,signing   first"), "{t}");
        assert!(lines[2].contains("<forever>") && lines[2].contains("<never>"), "{t}");
    }
}
