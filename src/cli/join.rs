//! `fedctl join`: registers a member with a federation — pinned-CA discovery, bootstrap token, CSR — and writes the agent's config directory.
//!
//! Mirrors `kubeadm join` with token discovery:
//! 1. fetch `kube-public/cluster-info` without trusting the server certificate, take the CA
//!    from it and refuse unless its `sha256:` SubjectPublicKeyInfo hash is one of
//!    `--ca-cert-hash` (kubeadm's `--discovery-token-ca-cert-hash`);
//! 2. over TLS verified with that CA, authenticated with the bootstrap token, create a
//!    CertificateSigningRequest for a fresh key (CN `system:fedctl:agent:<name>`, O
//!    `system:fedctl:agents`, signer [`AGENT_SIGNER`]) and wait for its certificate (the
//!    server's CSR controller approves joins by token);
//! 3. write the config directory ([`AgentConfig`], CA, certificate, key 0600) and,
//!    optionally, a systemd unit running `fedctl agent --config DIR`.
//!
//! Nothing is written before the certificate is in hand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::agent::config::{AgentConfig, ConfigError, AGENTS_GROUP, AGENT_SIGNER, AGENT_USER_PREFIX, CONFIG_FILE};
use crate::api::federation::{valid_cluster_name, CLUSTER_INFO_PATH, MAX_CLUSTER_NAME_LEN};
use crate::cli::client::{Client, ClientError, Credentials};
use crate::pki::kubeconfig::Kubeconfig;

/// Default agent configuration directory.
pub const DEFAULT_CONFIG_DIR: &str = "/etc/fedctl/agent";
/// Default bound on waiting for the certificate.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// API path of the CSR collection.
pub const CSR_PATH: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// Errors of `fedctl join`; each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The cluster name is not usable.
    #[error("invalid cluster name {0:?}: want a lowercase DNS label of at most {max} characters ([a-z0-9-], alphanumeric at both ends)", max = MAX_CLUSTER_NAME_LEN)]
    InvalidName(String),
    /// The token is not `[a-z0-9]{6}.[a-z0-9]{16}`.
    #[error("invalid token: want the form abcdef.0123456789abcdef (from the server's join command or `fedctl token create`)")]
    InvalidToken,
    /// A `--ca-cert-hash` is not `sha256:<64 hex>`.
    #[error("invalid --ca-cert-hash {0:?}: want sha256:<64 hex digits>")]
    InvalidHash(String),
    /// No `--ca-cert-hash` given.
    #[error("--ca-cert-hash is required: joining without pinning the federation's CA would trust any server")]
    MissingHash,
    /// A label is not `key=value`.
    #[error("invalid label {0:?}: want key=value")]
    InvalidLabel(String),
    /// The member kubeconfig is not a readable file.
    #[error("member kubeconfig {}: {source}", path.display())]
    MemberKubeconfig {
        /// The path given.
        path: PathBuf,
        /// Why it cannot be used.
        source: std::io::Error,
    },
    /// The config directory already holds an agent configuration.
    #[error("{} already exists: this machine already joined; remove it or pass --force to join again", .0.display())]
    AlreadyJoined(PathBuf),
    /// cluster-info could not be fetched.
    #[error("discovery: fetching cluster-info from {server}: {source}")]
    Discovery {
        /// The server URL.
        server: String,
        /// The failure.
        source: Box<ClientError>,
    },
    /// cluster-info holds no usable kubeconfig/CA.
    #[error("discovery: cluster-info from {server} is malformed: {detail}")]
    ClusterInfo {
        /// The server URL.
        server: String,
        /// What is wrong.
        detail: String,
    },
    /// The CA the server presented does not match any pinned hash.
    #[error(
        "refusing to join: the federation CA's public key hash is {actual}, which does not match --ca-cert-hash {expected}; the server may not be the federation you meant (or the hash is wrong)"
    )]
    CaHashMismatch {
        /// The hashes given.
        expected: String,
        /// The hash of the CA fetched.
        actual: String,
    },
    /// The server refused the bootstrap token (401).
    #[error("the federation refused the bootstrap token ({code} {reason}: {message}); it is expired, deleted or mistyped — create a new one on the server with `fedctl token create`")]
    TokenRejected {
        /// HTTP code.
        code: u16,
        /// Status reason.
        reason: String,
        /// Status message.
        message: String,
    },
    /// Another API failure.
    #[error("{0}")]
    Api(Box<ClientError>),
    /// An admin denied the request, or the signer could not sign it.
    #[error("certificate request {name} was {what}: {message}")]
    NotIssued {
        /// CSR name.
        name: String,
        /// `denied` or `failed`.
        what: &'static str,
        /// Condition message.
        message: String,
    },
    /// No certificate within the timeout (the request stays pending: an admin may approve it
    /// with `kubectl certificate approve`).
    #[error("no certificate for request {name} after {}s; it is pending approval (kubectl certificate approve {name}), then run join again", .timeout.as_secs())]
    Timeout {
        /// CSR name.
        name: String,
        /// The bound.
        timeout: Duration,
    },
    /// The issued certificate is not what was asked for.
    #[error("the issued certificate is unusable: {0}")]
    BadCertificate(String),
    /// Key or CSR generation failed.
    #[error("pki: {0}")]
    Pki(#[from] crate::pki::PkiError),
    /// Writing the config directory failed.
    #[error("writing the agent configuration: {0}")]
    Config(#[from] ConfigError),
    /// Writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}

impl From<ClientError> for JoinError {
    fn from(e: ClientError) -> Self {
        JoinError::Api(Box::new(e))
    }
}

/// Configuration of `fedctl join` (from flags; see `cmd/fedctl`).
#[derive(Clone, Debug)]
pub struct Config {
    /// Member cluster name (the Cluster object's name).
    pub cluster_name: String,
    /// Federation API URL, e.g. `https://10.0.0.1:6443`.
    pub server: String,
    /// Bootstrap token `id.secret` (secret).
    pub token: String,
    /// Accepted CA hashes `sha256:<hex>` (at least one).
    pub ca_cert_hashes: Vec<String>,
    /// The member cluster's kubeconfig (only its path is recorded).
    pub member_kubeconfig: PathBuf,
    /// Labels for the Cluster object.
    pub labels: BTreeMap<String, String>,
    /// Availability zone.
    pub zone: Option<String>,
    /// Region.
    pub region: Option<String>,
    /// Where to write the agent configuration.
    pub config_dir: PathBuf,
    /// Where to write a systemd unit, if anywhere.
    pub systemd_unit: Option<PathBuf>,
    /// Bound on waiting for the certificate.
    pub timeout: Duration,
    /// Overwrite an existing configuration.
    pub force: bool,
}

/// What `join` did.
#[derive(Debug)]
pub struct JoinOutcome {
    /// The config directory written.
    pub config_dir: PathBuf,
    /// The CSR that produced the certificate.
    pub csr: String,
    /// End of the certificate's validity.
    pub not_after: chrono::DateTime<chrono::Utc>,
    /// The systemd unit written, if any.
    pub systemd_unit: Option<PathBuf>,
}

/// Parses `k=v,k2=v2` into labels. Errors: [`JoinError::InvalidLabel`].
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, JoinError> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                out.insert(k.trim().to_string(), v.trim().to_string());
            }
            _ => return Err(JoinError::InvalidLabel(part.to_string())),
        }
    }
    Ok(out)
}

/// Parses a `--ca-cert-hash` value `sha256:<64 hex digits>` (surrounding whitespace
/// ignored) into its canonical lowercase form, as [`crate::pki::ca_cert_hash`] prints it.
/// Errors: [`JoinError::InvalidHash`].
pub fn parse_ca_cert_hash(h: &str) -> Result<String, JoinError> {
    let h = h.trim();
    let hex = h.strip_prefix("sha256:").ok_or_else(|| JoinError::InvalidHash(h.to_string()))?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(JoinError::InvalidHash(h.to_string()));
    }
    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
}

/// Fetches cluster-info from `server` without verifying the server, and returns the CA PEM
/// it publishes if its hash is one of `hashes`. Errors: [`JoinError::Discovery`],
/// [`JoinError::ClusterInfo`], [`JoinError::CaHashMismatch`].
pub async fn discover_ca(server: &str, hashes: &[String]) -> Result<String, JoinError> {
    let cm = Client::unverified(server).get(CLUSTER_INFO_PATH).await.map_err(|source| JoinError::Discovery { server: server.to_string(), source: Box::new(source) })?;
    ca_from_cluster_info(server, &cm, hashes)
}

/// The CA PEM that the `kube-public/cluster-info` ConfigMap `cm` (as fetched, unverified,
/// from `server`) publishes in `data.kubeconfig`, if the SubjectPublicKeyInfo hash of its
/// first certificate is one of `hashes` (canonical `sha256:<hex>`, see
/// [`parse_ca_cert_hash`]). Errors: [`JoinError::ClusterInfo`] for a missing or unusable
/// kubeconfig or CA, [`JoinError::CaHashMismatch`].
pub fn ca_from_cluster_info(server: &str, cm: &Value, hashes: &[String]) -> Result<String, JoinError> {
    let malformed = |detail: &str| JoinError::ClusterInfo { server: server.to_string(), detail: detail.to_string() };
    let text = cm.pointer("/data/kubeconfig").and_then(Value::as_str).ok_or_else(|| malformed("no data.kubeconfig"))?;
    let kc = Kubeconfig::from_yaml(text).map_err(|e| malformed(&e.to_string()))?;
    let ca = kc.clusters.first().and_then(|c| c.cluster.certificate_authority_data.clone()).ok_or_else(|| malformed("no certificate-authority-data"))?;
    let actual = crate::pki::ca_cert_hash(&ca).map_err(|e| malformed(&e.to_string()))?;
    if !hashes.contains(&actual) {
        return Err(JoinError::CaHashMismatch { expected: hashes.join(","), actual });
    }
    Ok(ca)
}

fn surface_token_error(e: ClientError) -> JoinError {
    match e {
        ClientError::Status { code: 401, reason, message, .. } => JoinError::TokenRejected { code: 401, reason, message },
        other => other.into(),
    }
}

/// Runs the join (see the module docs). Prints progress to stdout.
pub async fn run(cfg: Config) -> Result<JoinOutcome, JoinError> {
    // ---- checks that need no network
    if !valid_cluster_name(&cfg.cluster_name) {
        return Err(JoinError::InvalidName(cfg.cluster_name.clone()));
    }
    if crate::pki::auth::parse_bootstrap_token(&cfg.token).is_none() {
        return Err(JoinError::InvalidToken);
    }
    if cfg.ca_cert_hashes.is_empty() {
        return Err(JoinError::MissingHash);
    }
    let hashes = cfg.ca_cert_hashes.iter().map(|h| parse_ca_cert_hash(h)).collect::<Result<Vec<_>, _>>()?;
    let member_kubeconfig = std::fs::canonicalize(&cfg.member_kubeconfig)
        .and_then(|p| if p.is_file() { Ok(p) } else { Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file")) })
        .map_err(|source| JoinError::MemberKubeconfig { path: cfg.member_kubeconfig.clone(), source })?;
    let existing = cfg.config_dir.join(CONFIG_FILE);
    if existing.exists() && !cfg.force {
        return Err(JoinError::AlreadyJoined(existing));
    }

    // ---- discovery: pin the CA
    let ca_pem = discover_ca(&cfg.server, &hashes).await?;
    println!("[discovery] federation CA at {} matches {}", cfg.server, hashes.iter().find(|h| crate::pki::ca_cert_hash(&ca_pem).ok().as_ref() == Some(*h)).map(String::as_str).unwrap_or(""));

    // ---- CSR with the bootstrap token
    let client = Client::new(&cfg.server, &ca_pem, Credentials::Bearer(cfg.token.clone()))?;
    let cn = format!("{AGENT_USER_PREFIX}{}", cfg.cluster_name);
    let (csr_pem, key_pem) = crate::pki::generate_csr(&cn, &[AGENTS_GROUP])?;
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": format!("agent-{}-", cfg.cluster_name)},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(&csr_pem),
            "signerName": AGENT_SIGNER,
            "usages": ["digital signature", "client auth"],
        },
    });
    let created = client.post(CSR_PATH, &body).await.map_err(surface_token_error)?;
    let name = created.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    println!("[csr] created certificate request {name} for {cn}");
    let cert_pem = wait_for_certificate(&client, &name, cfg.timeout).await?;
    let info = crate::pki::cert_info(&cert_pem).map_err(|e| JoinError::BadCertificate(e.to_string()))?;
    if info.common_name != cn {
        return Err(JoinError::BadCertificate(format!("CN is {:?}, asked for {cn:?}", info.common_name)));
    }
    if info.not_after <= chrono::Utc::now() {
        return Err(JoinError::BadCertificate(format!("already expired at {}", info.not_after)));
    }
    // the certificate must be usable with our key against this CA
    crate::pki::client_tls_config(&ca_pem, Some((&cert_pem, &key_pem)))?;
    println!("[csr] certificate issued, valid until {}", info.not_after.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));

    // ---- write the config directory
    let agent = AgentConfig {
        cluster_name: cfg.cluster_name.clone(),
        federation_server: cfg.server.clone(),
        member_kubeconfig,
        labels: cfg.labels.clone(),
        zone: cfg.zone.clone(),
        region: cfg.region.clone(),
        heartbeat_interval_seconds: 10,
        cluster_status_update_seconds: None,
        concurrent_work_syncs: 5,
    };
    agent.write(&cfg.config_dir)?;
    let dir = &cfg.config_dir;
    let io = |path: PathBuf| move |source| JoinError::Io { path, source };
    crate::pki::write_public_file(&AgentConfig::ca_path(dir), ca_pem.as_bytes()).map_err(io(AgentConfig::ca_path(dir)))?;
    crate::pki::write_private_file(&AgentConfig::key_path(dir), key_pem.as_bytes()).map_err(io(AgentConfig::key_path(dir)))?;
    crate::pki::write_public_file(&AgentConfig::cert_path(dir), cert_pem.as_bytes()).map_err(io(AgentConfig::cert_path(dir)))?;
    println!("[config] wrote {}", dir.display());
    let unit = match &cfg.systemd_unit {
        Some(path) => {
            let exe = std::env::current_exe().map_err(io(PathBuf::from("fedctl")))?;
            let dir_abs = std::path::absolute(dir).map_err(io(dir.clone()))?;
            let text = systemd_unit(&cfg.cluster_name, &exe, &dir_abs);
            crate::pki::write_public_file(path, text.as_bytes()).map_err(io(path.clone()))?;
            println!("[systemd] wrote {} (systemctl daemon-reload && systemctl enable --now {})", path.display(), path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default());
            Some(path.clone())
        }
        None => None,
    };
    println!("This member joined as cluster {:?}. Start its agent with: fedctl agent --config {}", cfg.cluster_name, dir.display());
    Ok(JoinOutcome { config_dir: dir.clone(), csr: name, not_after: info.not_after, systemd_unit: unit })
}

/// Waits for CSR `name` to carry a certificate (PEM returned) or be Denied or Failed, at most
/// `timeout`: reads it, then watches it by name from that resourceVersion (as client-go's
/// `csr.WaitForCertificate`), reading it again whenever a watch ends (its `timeoutSeconds`,
/// a 410).
pub async fn wait_for_certificate(client: &Client, name: &str, timeout: Duration) -> Result<String, JoinError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let path = format!("{CSR_PATH}/{name}");
    let timed_out = || JoinError::Timeout { name: name.to_string(), timeout };
    loop {
        let csr = client.get(&path).await.map_err(surface_token_error)?;
        if let Some(done) = certificate_outcome(&csr, name) {
            return done;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        let rv = csr.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("");
        let secs = left.as_secs().clamp(1, super::client::REQUEST_TIMEOUT.as_secs() - 5);
        let watch = format!("{CSR_PATH}?watch=1&fieldSelector=metadata.name%3D{name}&resourceVersion={rv}&timeoutSeconds={secs}&allowWatchBookmarks=false");
        let seen = client.watch(&watch, |kind, obj| matches!(kind, "ADDED" | "MODIFIED").then(|| certificate_outcome(obj, name)).flatten());
        match tokio::time::timeout(left, seen).await {
            Ok(Ok(Some(done))) => return done,
            // the watch ended (its timeout, or an ERROR event such as a 410): read it again
            Ok(Ok(None)) => {}
            Ok(Err(e)) => return Err(surface_token_error(e)),
            Err(_) => return Err(timed_out()),
        }
    }
}

/// What CSR `csr` (named `name`) says of its certificate: `Some(Ok(pem))` once issued,
/// `Some(Err)` when Denied or Failed, `None` while pending.
fn certificate_outcome(csr: &Value, name: &str) -> Option<Result<String, JoinError>> {
    if let Some(b64) = csr.pointer("/status/certificate").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| JoinError::BadCertificate(e.to_string()))
            .and_then(|raw| String::from_utf8(raw).map_err(|e| JoinError::BadCertificate(e.to_string())));
        return Some(pem);
    }
    let conds = csr.pointer("/status/conditions").and_then(Value::as_array)?;
    conds.iter().find_map(|c| {
        let what = match c.get("type").and_then(Value::as_str) {
            Some("Denied") => "denied",
            Some("Failed") => "failed",
            _ => return None,
        };
        let message = c.get("message").and_then(Value::as_str).unwrap_or("").to_string();
        Some(Err(JoinError::NotIssued { name: name.to_string(), what, message }))
    })
}

fn quote_systemd(p: &Path) -> String {
    let s = p.display().to_string();
    if s.chars().any(|c| c.is_whitespace() || c == '"' || c == '\\') {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        s
    }
}

/// A systemd unit running `<exe> agent --config <dir>` for `cluster`, restarted on failure.
/// Stopping it stops only the agent: member workloads keep running.
pub fn systemd_unit(cluster: &str, exe: &Path, config_dir: &Path) -> String {
    format!(
        "[Unit]\n\
         Description=fedctl agent of member cluster {cluster}\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={} agent --config {}\n\
         Restart=always\n\
         RestartSec=5s\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        quote_systemd(exe),
        quote_systemd(config_dir)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        let l = parse_labels("env=prod, team=a,").unwrap();
        assert_eq!(l.get("env").map(String::as_str), Some("prod"));
        assert_eq!(l.get("team").map(String::as_str), Some("a"));
        assert!(parse_labels("").unwrap().is_empty());
        assert!(matches!(parse_labels("novalue"), Err(JoinError::InvalidLabel(_))));
        assert!(matches!(parse_labels("=x"), Err(JoinError::InvalidLabel(_))));
    }

    #[test]
    fn hashes() {
        let h = format!("sha256:{}", "AB".repeat(32));
        assert_eq!(parse_ca_cert_hash(&h).unwrap(), format!("sha256:{}", "ab".repeat(32)));
        assert!(parse_ca_cert_hash("sha256:abc").is_err());
        assert!(parse_ca_cert_hash(&"ab".repeat(32)).is_err());
    }

    #[test]
    fn unit_file() {
        let u = systemd_unit("east", Path::new("/usr/local/bin/fedctl"), Path::new("/etc/fedctl/agent"));
        assert!(u.contains("ExecStart=/usr/local/bin/fedctl agent --config /etc/fedctl/agent\n"));
        assert!(u.contains("Restart=always"));
        assert!(u.contains("WantedBy=multi-user.target"));
        let spaced = systemd_unit("east", Path::new("/opt/my tools/fedctl"), Path::new("/etc/fedctl/agent"));
        assert!(spaced.contains("ExecStart=\"/opt/my tools/fedctl\" agent"));
    }
}
