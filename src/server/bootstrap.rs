//! Join bootstrap on the server: bootstrap tokens stored as Secrets, their sync into the authenticator, cluster-info discovery and the first-start join command.
//!
//! Mirrors kubeadm: a token `<id>.<secret>` lives in the Secret `kube-system/bootstrap-token-<id>`
//! (type `bootstrap.kubernetes.io/token`, data keys `token-id`, `token-secret`, `expiration`,
//! `usage-bootstrap-authentication`, …); kube-controller-manager's `tokencleaner` deletes
//! expired ones (here: the sync task); `kube-public/cluster-info` carries a credential-less
//! kubeconfig (server URL + CA) that anyone may read, which a joiner trusts only after
//! checking the CA against the `sha256:` hash it was given.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use super::controller::{named_queue, spawn_watch, spawn_workers, KeyMapper};
use crate::api::federation::{CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE};
use crate::api::request::ResourceRequest;
use crate::api::{ApiError, ApiResult, ApiServer, Caller, Ctx};
use crate::pki::auth::{BootstrapToken, TokenAuthenticator, BOOTSTRAP_TOKEN_SECRET_PREFIX, BOOTSTRAP_TOKEN_SECRET_TYPE};
use crate::pki::kubeconfig::Kubeconfig;

/// Namespace of bootstrap token Secrets.
pub const TOKEN_NAMESPACE: &str = "kube-system";
/// File in the data directory holding the join command printed at first start (mode 0600).
pub const JOIN_COMMAND_FILE: &str = "join-command";
/// Placeholder for the member kubeconfig in the printed join command.
pub const MEMBER_KUBECONFIG_PLACEHOLDER: &str = "<member-kubeconfig>";
/// Placeholder for the cluster name in the printed join command.
pub const CLUSTER_NAME_PLACEHOLDER: &str = "<cluster-name>";

/// Errors turning Secrets into tokens and writing the join command.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The Secret is not a bootstrap token Secret (type, name or data).
    #[error("secret {name}: {reason}")]
    NotAToken {
        /// Secret name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Writing the join command file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

fn server_ctx(manager: &str) -> Ctx {
    Ctx { caller: Caller { user: "system:apiserver".into(), groups: vec![] }, dry_run: false, manager: manager.into(), apply: false }
}

/// The Secret storing `token` (kubeadm's layout; `data` base64-encoded).
pub fn token_secret(token: &BootstrapToken) -> Value {
    let data: serde_json::Map<String, Value> = token.to_secret_data().into_iter().map(|(k, v)| (k, json!(base64::engine::general_purpose::STANDARD.encode(v)))).collect();
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": token.secret_name(), "namespace": TOKEN_NAMESPACE},
        "type": BOOTSTRAP_TOKEN_SECRET_TYPE,
        "data": data,
    })
}

/// The token stored in a bootstrap token Secret: type `bootstrap.kubernetes.io/token`, name
/// `bootstrap-token-<id>` matching `data.token-id`; `data` is base64, `stringData` (as
/// written by hand) is accepted too. Errors: [`BootstrapError::NotAToken`].
pub fn token_from_secret(secret: &Value) -> Result<BootstrapToken, BootstrapError> {
    let name = secret.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let err = |reason: &str| BootstrapError::NotAToken { name: name.clone(), reason: reason.to_string() };
    if secret.get("type").and_then(Value::as_str) != Some(BOOTSTRAP_TOKEN_SECRET_TYPE) {
        return Err(err("type is not bootstrap.kubernetes.io/token"));
    }
    let mut data = BTreeMap::new();
    if let Some(d) = secret.get("data").and_then(Value::as_object) {
        for (k, v) in d {
            let raw = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or("")).map_err(|_| err("data is not base64"))?;
            data.insert(k.clone(), String::from_utf8(raw).map_err(|_| err("data is not UTF-8"))?);
        }
    }
    if let Some(d) = secret.get("stringData").and_then(Value::as_object) {
        for (k, v) in d {
            data.insert(k.clone(), v.as_str().unwrap_or("").to_string());
        }
    }
    let token = BootstrapToken::from_secret_data(&data).map_err(|e| err(&e.to_string()))?;
    if name != token.secret_name() {
        return Err(err("name is not bootstrap-token-<token-id>"));
    }
    Ok(token)
}

fn secrets_request(api: &ApiServer, name: Option<&str>) -> Option<ResourceRequest> {
    Some(ResourceRequest { info: api.registry.lookup("", "v1", "secrets")?, namespace: Some(TOKEN_NAMESPACE.into()), name: name.map(str::to_string), subresource: None, watch_path: false })
}

/// The token stored under id `token_id`, if its Secret exists and is valid (expired or not).
pub async fn load_token(api: &ApiServer, token_id: &str) -> Option<BootstrapToken> {
    let name = format!("{BOOTSTRAP_TOKEN_SECRET_PREFIX}{token_id}");
    let r = secrets_request(api, Some(&name))?;
    token_from_secret(&api.get(&r).await.ok()?).ok()
}

/// Stores `token` as its Secret. Errors: the API's (409 if the id exists).
pub async fn create_token(api: &Arc<ApiServer>, token: &BootstrapToken) -> ApiResult<Value> {
    let r = secrets_request(api, None).ok_or(ApiError::NoSuchResource)?;
    api.create(&r, token_secret(token), &server_ctx("fedctl")).await
}

/// Keeps `tokens`' bootstrap set equal to the valid token Secrets in `kube-system` (watching
/// them); while `leading` is true it also deletes expired ones (mirrors `tokencleaner`, which
/// runs in the leader-elected kube-controller-manager). Runs for the life of the process.
pub fn spawn_token_sync(api: Arc<ApiServer>, tokens: Arc<TokenAuthenticator>, leading: Arc<std::sync::atomic::AtomicBool>) {
    let Some(r) = secrets_request(&api, None) else { return };
    let prefix = r.info.ns_prefix(Some(TOKEN_NAMESPACE));
    let queue = named_queue("bootstrap-token");
    let p2 = prefix.clone();
    let map: KeyMapper = Arc::new(move |k: &str| k.strip_prefix(&p2).filter(|n| n.starts_with(BOOTSTRAP_TOKEN_SECRET_PREFIX)).map(str::to_string));
    spawn_watch(api.store.clone(), prefix, map, queue.clone());
    spawn_workers(queue, 1, move |name| {
        let (api, tokens, leading) = (api.clone(), tokens.clone(), leading.clone());
        async move { sync_token(&api, &tokens, &leading, &name).await }
    });
}

async fn sync_token(api: &Arc<ApiServer>, tokens: &TokenAuthenticator, leading: &std::sync::atomic::AtomicBool, name: &str) -> Option<Duration> {
    let id = name.strip_prefix(BOOTSTRAP_TOKEN_SECRET_PREFIX).unwrap_or(name);
    let r = secrets_request(api, Some(name))?;
    let secret = match api.get(&r).await {
        Ok(s) => s,
        Err(ApiError::NotFound { .. }) => {
            tokens.remove_bootstrap_token(id);
            return None;
        }
        Err(e) => {
            tracing::warn!(secret = name, error = %e, "reading bootstrap token secret; retrying");
            return Some(Duration::from_secs(2));
        }
    };
    let token = match token_from_secret(&secret) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "ignoring invalid bootstrap token secret");
            tokens.remove_bootstrap_token(id);
            return None;
        }
    };
    let now = chrono::Utc::now();
    if token.is_expired(now) {
        tokens.remove_bootstrap_token(&token.id);
        if !leading.load(std::sync::atomic::Ordering::SeqCst) {
            // the leader deletes it; look again in case this replica becomes the leader
            return Some(Duration::from_secs(10));
        }
        return match api.delete(&r, &json!({}), &server_ctx("tokencleaner")).await {
            Ok(_) | Err(ApiError::NotFound { .. }) => {
                tracing::info!(token_id = %token.id, "deleted expired bootstrap token");
                None
            }
            Err(e) => {
                tracing::warn!(token_id = %token.id, error = %e, "deleting expired bootstrap token; retrying");
                Some(Duration::from_secs(5))
            }
        };
    }
    let expires_in = token.expiration.map(|e| (e - now).to_std().unwrap_or_default() + Duration::from_millis(100));
    tokens.upsert_bootstrap_token(token);
    expires_in
}

/// The kubeconfig published in cluster-info: cluster `""` with `server_url` and the CA, no
/// users or contexts (kubeadm's shape).
pub fn cluster_info_kubeconfig(server_url: &str, ca_pem: &str) -> Kubeconfig {
    let mut kc = Kubeconfig::default();
    kc.add_cluster("", server_url, ca_pem);
    kc
}

/// Creates or updates `kube-public/cluster-info` to publish `server_url` and `ca_pem`.
pub async fn ensure_cluster_info(api: &Arc<ApiServer>, server_url: &str, ca_pem: &str) -> ApiResult<()> {
    let info = api.registry.lookup("", "v1", "configmaps").ok_or(ApiError::NoSuchResource)?;
    let kubeconfig = cluster_info_kubeconfig(server_url, ca_pem).to_yaml();
    let r = ResourceRequest { info, namespace: Some(CLUSTER_INFO_NAMESPACE.into()), name: Some(CLUSTER_INFO_NAME.into()), subresource: None, watch_path: false };
    let ctx = server_ctx("fedctl");
    match api.get(&r).await {
        Ok(cur) if cur.pointer("/data/kubeconfig").and_then(Value::as_str) == Some(kubeconfig.as_str()) => Ok(()),
        Ok(_) => {
            let kc = kubeconfig.clone();
            api.guaranteed_update(&r, CLUSTER_INFO_NAME, None, &ctx, move |cur| {
                let mut n = cur.clone();
                n["data"] = json!({"kubeconfig": kc});
                Ok(n)
            })
            .await
            .map(|_| ())
        }
        Err(ApiError::NotFound { .. }) => {
            let coll = ResourceRequest { name: None, ..r };
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CLUSTER_INFO_NAME, "namespace": CLUSTER_INFO_NAMESPACE}, "data": {"kubeconfig": kubeconfig}});
            match api.create(&coll, cm, &ctx).await {
                Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Whether `kube-public/cluster-info` is absent or publishes `ca_pem` (compared as
/// certificates, ignoring surrounding whitespace). `false`: another federation's CA.
/// Errors: the API's, other than NotFound.
pub async fn check_cluster_ca(api: &Arc<ApiServer>, ca_pem: &str) -> ApiResult<bool> {
    let info = api.registry.lookup("", "v1", "configmaps").ok_or(ApiError::NoSuchResource)?;
    let r = ResourceRequest { info, namespace: Some(CLUSTER_INFO_NAMESPACE.into()), name: Some(CLUSTER_INFO_NAME.into()), subresource: None, watch_path: false };
    let cm = match api.get(&r).await {
        Ok(cm) => cm,
        Err(ApiError::NotFound { .. }) => return Ok(true),
        Err(e) => return Err(e),
    };
    let published =
        cm.pointer("/data/kubeconfig").and_then(Value::as_str).and_then(|y| Kubeconfig::from_yaml(y).ok()).and_then(|kc| kc.clusters.first().and_then(|c| c.cluster.ca_pem().ok().flatten()));
    Ok(match published {
        Some(p) => p.trim() == ca_pem.trim(),
        // unreadable: ours replaces it
        None => true,
    })
}

/// The join command line for a token (placeholders for the cluster name and member kubeconfig).
pub fn join_command(server_url: &str, token: &str, ca_hash: &str) -> String {
    format!("fedctl join {CLUSTER_NAME_PLACEHOLDER} --server {server_url} --token {token} --ca-cert-hash {ca_hash} --kubeconfig {MEMBER_KUBECONFIG_PLACEHOLDER}")
}

/// At first start (no `DATA_DIR/join-command` yet): creates a bootstrap token valid for `ttl`
/// (`None`: never expires), writes the join command to `DATA_DIR/join-command` (0600) and
/// returns it. Later starts return `None` and create nothing.
pub async fn first_start_join_command(api: &Arc<ApiServer>, data_dir: &Path, server_url: &str, ca_hash: &str, ttl: Option<Duration>) -> Result<Option<String>, BootstrapError> {
    let path = data_dir.join(JOIN_COMMAND_FILE);
    if path.exists() {
        return Ok(None);
    }
    let ttl = ttl.and_then(|d| chrono::Duration::from_std(d).ok());
    let mut token = BootstrapToken::generate(ttl, chrono::Utc::now());
    token.description = Some("created by fedctl server at first start".into());
    let mut delay = Duration::from_millis(100);
    loop {
        match create_token(api, &token).await {
            Ok(_) => break,
            Err(ApiError::AlreadyExists { .. }) => {
                token = BootstrapToken { id: BootstrapToken::generate(None, chrono::Utc::now()).id, ..token };
            }
            Err(e) => {
                tracing::warn!(error = %e, "creating the first bootstrap token; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    let cmd = join_command(server_url, &token.token_string(), ca_hash);
    crate::pki::write_private_file(&path, format!("{cmd}\n").as_bytes()).map_err(|source| BootstrapError::Io { path: path.clone(), source })?;
    Ok(Some(cmd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_round_trip() {
        let mut t = BootstrapToken::generate(Some(chrono::Duration::hours(1)), chrono::Utc::now());
        t.description = Some("d".into());
        let s = token_secret(&t);
        assert_eq!(s["type"], BOOTSTRAP_TOKEN_SECRET_TYPE);
        assert_eq!(s["metadata"]["name"], format!("bootstrap-token-{}", t.id));
        // kube stores seconds; the round trip keeps them
        let back = token_from_secret(&s).unwrap();
        assert_eq!(back.id, t.id);
        assert_eq!(back.secret, t.secret);
        assert_eq!(back.description.as_deref(), Some("d"));

        let mut renamed = s.clone();
        renamed["metadata"]["name"] = json!("bootstrap-token-zzzzzz");
        assert!(token_from_secret(&renamed).is_err());
        let mut opaque = s.clone();
        opaque["type"] = json!("Opaque");
        assert!(token_from_secret(&opaque).is_err());
        let by_hand = json!({"metadata": {"name": "bootstrap-token-abcdef"}, "type": BOOTSTRAP_TOKEN_SECRET_TYPE,
            "stringData": {"token-id": "abcdef", "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true"}});
        assert_eq!(token_from_secret(&by_hand).unwrap().token_string(), "abcdef.0123456789abcdef");
    }

    #[test]
    fn join_command_shape() {
        assert_eq!(
            join_command("https://10.0.0.1:6443", "abcdef.0123456789abcdef", "sha256:00"),
            "fedctl join <cluster-name> --server https://10.0.0.1:6443 --token abcdef.0123456789abcdef --ca-cert-hash sha256:00 --kubeconfig <member-kubeconfig>"
        );
    }
}
