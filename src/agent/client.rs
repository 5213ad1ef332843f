//! kube-rs clients of the agent: the member cluster (from its kubeconfig) and the federation
//! (built by hand from the config directory's URL, CA and client certificate/key PEMs).
//!
//! The federation clients are published on a [`tokio::sync::watch`] channel ([`FedHandle`])
//! so that the cert-rotation controller can swap them for every controller at once.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::json;

use super::config::AgentConfig;
use crate::pki;

/// Bound on connecting to either API server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on reading a unary response (watches use a client without it).
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors building a client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A file of the config directory could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A certificate or key does not parse.
    #[error("pki: {0}")]
    Pki(#[from] pki::PkiError),
    /// The member kubeconfig is unusable.
    #[error("member kubeconfig {}: {detail}", path.display())]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The client identity could not be handed to kube-rs.
    #[error("client identity: {0}")]
    Identity(String),
    /// The federation URL is not a valid URI.
    #[error("federation server URL {0:?} is invalid")]
    Url(String),
    /// kube-rs refused the configuration (bad identity PEM, TLS setup, …).
    #[error("kube client: {0}")]
    Kube(#[from] kube::Error),
}

/// The agent's clients for the federation API, authenticated with one client certificate.
#[derive(Clone)]
pub struct FedClients {
    /// For unary requests (reads bounded by [`READ_TIMEOUT`]).
    pub api: kube::Client,
    /// For watch streams (no read timeout; watches are bounded by `timeoutSeconds` and an
    /// idle timer instead).
    pub watch: kube::Client,
    /// Increases by one on every swap (0 = the clients built at start).
    pub generation: u64,
}

/// Receiver side of the current federation clients; `borrow().clone()` before each request,
/// `changed()` to learn about a swap (watchers then resume from their last resourceVersion).
pub type FedHandle = tokio::sync::watch::Receiver<FedClients>;

/// The member cluster as the agent sees it.
#[derive(Clone)]
pub struct MemberClient {
    /// Client for unary requests to the member API (reads bounded by [`READ_TIMEOUT`]).
    pub client: kube::Client,
    /// Client for watches on the member API (no read timeout: a watch may be idle for
    /// minutes; kube-runtime's watcher bounds each one by `timeoutSeconds`).
    pub watch: kube::Client,
    /// The member API server URL (from the kubeconfig), e.g. `https://10.0.0.1:6443`.
    pub server: String,
    /// The CA bundle PEM that verifies the member API server (empty when the kubeconfig
    /// names none and the system roots are used).
    pub ca_pem: String,
}

/// Builds the federation clients from `DIR`: `config.federation_server`, `federation-ca.crt`,
/// `agent.crt` and `agent.key`. Errors: unreadable files, unparsable PEMs, bad URL.
pub fn federation_clients(dir: &Path, config: &AgentConfig, generation: u64) -> Result<FedClients, ClientError> {
    let read = |p: PathBuf| std::fs::read_to_string(&p).map_err(|source| ClientError::Read { path: p, source });
    let ca = read(AgentConfig::ca_path(dir))?;
    let cert = read(AgentConfig::cert_path(dir))?;
    let key = read(AgentConfig::key_path(dir))?;
    federation_clients_from_pem(&config.federation_server, &ca, &cert, &key, generation)
}

/// Builds the federation clients from PEMs held in memory (the CA bundle, the client
/// certificate and its key). The key never leaves the kube-rs identity.
pub fn federation_clients_from_pem(server: &str, ca_pem: &str, cert_pem: &str, key_pem: &str, generation: u64) -> Result<FedClients, ClientError> {
    // fail early, with our own errors, on PEMs kube-rs would reject less clearly
    pki::parse_certs(cert_pem)?;
    pki::parse_private_key(key_pem)?;
    let roots: Vec<Vec<u8>> = pki::parse_certs(ca_pem)?.into_iter().map(|c| c.to_vec()).collect();
    let url: http::Uri = server.parse().map_err(|_| ClientError::Url(server.to_string()))?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    // AuthInfo holds the key as a secret string; its serde form is the kubeconfig's
    let auth: kube::config::AuthInfo = serde_json::from_value(json!({
        "client-certificate-data": b64(cert_pem),
        "client-key-data": b64(key_pem),
    }))
    .map_err(|e| ClientError::Identity(e.to_string()))?;
    let mut config = kube::Config::new(url);
    config.root_cert = Some(roots);
    config.auth_info = auth;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let watch = kube::Client::try_from(config.clone())?;
    config.read_timeout = Some(READ_TIMEOUT);
    let api = kube::Client::try_from(config)?;
    Ok(FedClients { api, watch, generation })
}

/// Builds the member client from a kubeconfig file (its current context; every auth form
/// kube-rs supports), with [`CONNECT_TIMEOUT`], and [`READ_TIMEOUT`] on the unary client.
pub async fn member_client(path: &Path) -> Result<MemberClient, ClientError> {
    let bad = |detail: String| ClientError::Kubeconfig { path: path.to_path_buf(), detail };
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.map_err(|e| bad(e.to_string()))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let watch = kube::Client::try_from(config.clone())?;
    config.read_timeout = Some(READ_TIMEOUT);
    let server = config.cluster_url.to_string().trim_end_matches('/').to_string();
    let ca_pem = config.root_cert.as_ref().map(|ders| ders.iter().map(|d| der_to_pem(d)).collect::<String>()).unwrap_or_default();
    let client = kube::Client::try_from(config)?;
    Ok(MemberClient { client, watch, server, ca_pem })
}

/// PEM-encodes one DER certificate.
fn der_to_pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_to_pem_round_trips() {
        let ca = pki::Ca::generate("test").unwrap();
        let pem = der_to_pem(ca.cert_der());
        assert_eq!(pki::parse_certs(&pem).unwrap()[0].as_ref(), ca.cert_der().as_ref());
    }

    #[tokio::test]
    async fn federation_clients_reject_bad_pems() {
        let ca = pki::Ca::generate("test").unwrap();
        let (cert, key) = ca.issue_client("system:fedctl:agent:a", &["system:fedctl:agents"], Duration::from_secs(60)).unwrap();
        assert!(federation_clients_from_pem("https://127.0.0.1:1", ca.cert_pem(), &cert, &key, 0).is_ok());
        assert!(matches!(federation_clients_from_pem("https://127.0.0.1:1", ca.cert_pem(), "junk", &key, 0), Err(ClientError::Pki(_))));
        assert!(matches!(federation_clients_from_pem("not a url", ca.cert_pem(), &cert, &key, 0), Err(ClientError::Url(_))));
    }
}
