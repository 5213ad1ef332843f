//! The agent's `/metrics` listener: HTTPS with a self-signed or given serving certificate; uses
//! `telemetry::metrics`, `pki` and `http`.

use crate::telemetry::metrics;

/// Errors of the agent's metrics listener.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The metrics listener could not be bound.
    #[error("metrics listener on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The metrics serving certificate or key file could not be read.
    #[error("metrics serving certificate: {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The metrics serving certificate could not be generated, or it and its key do not make
    /// a TLS configuration.
    #[error("metrics serving certificate: {0}")]
    Tls(#[from] crate::pki::PkiError),
}

/// Where the agent's metrics listener gets its serving certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MetricsCert {
    /// A self-signed certificate generated at start-up and kept in memory only (a new one per
    /// start), for `localhost`, `127.0.0.1`, `::1`, the host name and the bound address;
    /// scrapers pin its fingerprint or skip verification. Mirrors kubelet without
    /// `--tls-cert-file`.
    #[default]
    SelfSigned,
    /// PEM certificate (chain) and private key files, read once at start-up.
    Files {
        /// The certificate (leaf first).
        cert: std::path::PathBuf,
        /// Its private key.
        key: std::path::PathBuf,
    },
}

/// The agent's running metrics listener (see [`start_agent_metrics`]).
#[derive(Debug)]
pub struct AgentMetricsListener {
    /// The bound address.
    pub address: std::net::SocketAddr,
    /// `"sha256:<hex>"` of the serving certificate's DER (see [`crate::pki::cert_sha256`]).
    pub cert_sha256: String,
    /// The serving task; aborting it closes the listener.
    pub task: tokio::task::JoinHandle<()>,
}

/// The agent's metrics router: `/metrics` (Prometheus text), `/healthz` 200, other paths 404.
/// No authentication: bind it to loopback or a scrape-only network.
fn router() -> axum::Router {
    use axum::routing::any;
    let answer = |code: http::StatusCode, ct: &'static str, body: String| {
        let mut resp = http::Response::new(axum::body::Body::from(body));
        *resp.status_mut() = code;
        resp.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(ct));
        resp
    };
    let router = axum::Router::new()
        .route("/metrics", any(move || async move { answer(http::StatusCode::OK, metrics::CONTENT_TYPE, metrics::agent().encode()) }))
        .route("/healthz", any(move || async move { answer(http::StatusCode::OK, "text/plain; charset=utf-8", "ok".to_string()) }))
        .fallback(move || async move { answer(http::StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n".to_string()) });
    crate::http::common_layers(router)
}

/// Binds the agent's metrics listener on `addr` (e.g. `127.0.0.1:9464`, port 0: any) and
/// serves `/metrics` there over HTTPS only (TLS 1.2+, HTTP/1.1 and HTTP/2; a plaintext
/// request fails the handshake and gets no answer), as Kubernetes components serve
/// `/metrics` on their secure port. The serving certificate comes from `cert`.
///
/// Errors: [`MetricsError::Listen`], [`MetricsError::Read`] (certificate files),
/// [`MetricsError::Tls`] (unusable certificate or key).
pub async fn start_agent_metrics(addr: &str, cert: &MetricsCert) -> Result<AgentMetricsListener, MetricsError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| MetricsError::Listen { addr: addr.to_string(), source })?;
    let local = listener.local_addr().map_err(|source| MetricsError::Listen { addr: addr.to_string(), source })?;
    let (cert_pem, key_pem) = match cert {
        MetricsCert::Files { cert, key } => {
            let read = |p: &std::path::Path| std::fs::read_to_string(p).map_err(|source| MetricsError::Read { path: p.to_path_buf(), source });
            (read(cert)?, read(key)?)
        }
        MetricsCert::SelfSigned => {
            let host = gethostname::gethostname().to_string_lossy().to_lowercase();
            let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
            // a host name that is no valid DNS name is left out rather than failing the start
            if !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.') {
                sans.push(host.clone());
            }
            if !local.ip().is_unspecified() {
                sans.push(local.ip().to_string());
            }
            sans.sort();
            sans.dedup();
            let cn = format!("{}@{}", if host.is_empty() { "fedctl-agent" } else { &host }, chrono::Utc::now().timestamp());
            crate::pki::self_signed_serving(&cn, &sans, crate::pki::LEAF_VALIDITY)?
        }
    };
    let tls = crate::pki::server_tls_config_without_client_auth(&cert_pem, &key_pem)?;
    let cert_sha256 = crate::pki::cert_sha256(&cert_pem)?;
    let task = tokio::spawn(crate::http::serve(listener, tls, router(), std::future::pending::<()>(), std::time::Duration::ZERO));
    Ok(AgentMetricsListener { address: local, cert_sha256, task })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest as _;

    /// A plaintext HTTP request to `addr`: the raw bytes answered (the connection is closed
    /// after the failed handshake).
    async fn plaintext_get(addr: std::net::SocketAddr) -> Vec<u8> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut raw = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), tcp.read_to_end(&mut raw)).await.expect("connection closed within 10 s");
        raw
    }

    #[tokio::test]
    async fn agent_metrics_are_served_over_https_only() {
        metrics::agent().reconciled("exec", true);
        // files issued by a CA: a client trusting that CA verifies the listener
        let ca = crate::pki::Ca::generate("metrics-test-ca").unwrap();
        let (cert, key) = ca.issue_serving(&["127.0.0.1".to_string()], std::time::Duration::from_secs(3600)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert_path, &cert).unwrap();
        std::fs::write(&key_path, &key).unwrap();
        let l = start_agent_metrics("127.0.0.1:0", &MetricsCert::Files { cert: cert_path.clone(), key: key_path }).await.unwrap();
        assert_eq!(l.cert_sha256, crate::pki::cert_sha256(&cert).unwrap());
        let http = reqwest::Client::builder().add_root_certificate(reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).unwrap()).build().unwrap();
        let r = http.get(format!("https://{}/metrics", l.address)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(text.contains(r#"fedctl_agent_reconciles_total{name="exec"}"#), "{text}");
        let raw = plaintext_get(l.address).await;
        let raw = String::from_utf8_lossy(&raw);
        assert!(!raw.starts_with("HTTP/") && !raw.contains("fedctl_agent"), "plaintext request answered: {raw:?}");
        l.task.abort();

        // self-signed: the served certificate is the one whose fingerprint is reported
        let l = start_agent_metrics("127.0.0.1:0", &MetricsCert::SelfSigned).await.unwrap();
        let http = reqwest::Client::builder().danger_accept_invalid_certs(true).tls_info(true).build().unwrap();
        let r = http.get(format!("https://{}/metrics", l.address)).send().await.unwrap();
        let der = r.extensions().get::<reqwest::tls::TlsInfo>().and_then(|i| i.peer_certificate()).expect("peer certificate").to_vec();
        assert_eq!(l.cert_sha256, format!("sha256:{}", hex::encode(sha2::Sha256::digest(&der))));
        assert!(r.text().await.unwrap().contains("fedctl_agent_reconciles_total"));
        let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
        let sans = x509.subject_alternative_name().unwrap().expect("SANs").value.general_names.len();
        assert!(sans >= 3, "localhost, 127.0.0.1, ::1 at least: {sans}");
        assert!(String::from_utf8_lossy(&plaintext_get(l.address).await).find("fedctl_agent").is_none());
        l.task.abort();

        // unreadable files: an error naming the file
        let e = start_agent_metrics("127.0.0.1:0", &MetricsCert::Files { cert: dir.path().join("missing.crt"), key: cert_path }).await.unwrap_err();
        assert!(matches!(&e, MetricsError::Read { path, .. } if path.ends_with("missing.crt")), "{e}");
    }
}
