//! The cert-rotation controller: renews the agent's client certificate for the federation
//! before it expires (mirrors client-go's certificate manager as kubelet uses it for
//! `kubernetes.io/kube-apiserver-client-kubelet`).
//!
//! When at most 20% of the certificate's lifetime (`notAfter - notBefore`, counted from when
//! the agent obtained it if that is later: see [`lifetime_start`]) is left, the controller
//! generates a new key and CSR (CN `system:fedctl:agent:<cluster>`, O
//! `system:fedctl:agents`), creates a `certificates.k8s.io/v1` `CertificateSigningRequest`
//! (signer [`AGENT_SIGNER`], usages `client auth`, `digital signature`) with its current
//! certificate, polls until `status.certificate` is set (bounded by [`CSR_WAIT`]; denied,
//! failed or timed-out requests are retried with exponential backoff), checks the new
//! certificate against the federation, writes certificate and key atomically (temporary
//! file, then rename; mode 0600) and swaps the federation clients of every controller
//! (watches resume from their last resourceVersion).
//!
//! It also picks up a certificate replaced on disk by someone else (e.g. `fedctl join` run
//! again after the old one expired).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::client::{federation_clients_from_pem, ClientError};
use super::config::{AgentConfig, AGENTS_GROUP, AGENT_SIGNER, AGENT_USER_PREFIX};
use super::{Backoff, Shared};
use crate::pki;

/// Fraction of the lifetime left at which the certificate is renewed.
pub const RENEW_FRACTION: f64 = 0.2;
/// How long one CSR is polled for a certificate before it is given up (and retried).
pub const CSR_WAIT: Duration = Duration::from_secs(300);
/// First interval of polling a CSR; grows by half per poll up to [`MAX_POLL`].
const POLL: Duration = Duration::from_millis(500);
/// Longest interval of polling a CSR.
const MAX_POLL: Duration = Duration::from_secs(5);
/// Longest sleep between checks of the certificate file.
const CHECK: Duration = Duration::from_secs(30);
/// Shortest time between two rotations (guards against a signer issuing certificates that
/// are already due for renewal).
const MIN_GAP: Duration = Duration::from_secs(2);

/// Errors of one rotation attempt (logged, then retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The certificate or key file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A certificate, key or CSR could not be generated or parsed.
    #[error("pki: {0}")]
    Pki(#[from] pki::PkiError),
    /// New federation clients could not be built.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// The federation refused or failed a request (401 when the current certificate has
    /// already expired: the member must be joined again).
    #[error("federation API: {0}")]
    Federation(kube::Error),
    /// The CSR was denied or failed.
    #[error("CSR {name} was {condition}: {message}")]
    Refused {
        /// CSR name.
        name: String,
        /// `Denied` or `Failed`.
        condition: String,
        /// Its message.
        message: String,
    },
    /// The CSR got no certificate within [`CSR_WAIT`].
    #[error("CSR {0} got no certificate within {CSR_WAIT:?}")]
    Timeout(String),
    /// The issued certificate is not for this agent.
    #[error("issued certificate is for {got:?}, not {expected:?}")]
    WrongIdentity {
        /// The CN asked for.
        expected: String,
        /// The CN issued.
        got: String,
    },
}

/// Where a certificate's lifetime starts for renewal: its `notBefore`, or when it was
/// obtained (written to disk) if that is later. Signers backdate `notBefore` to tolerate
/// clock skew (kube-controller-manager and fedctl by 5 minutes), which would otherwise make a
/// short-lived certificate look due for renewal the moment it arrives.
pub fn lifetime_start(not_before: DateTime<Utc>, obtained: Option<DateTime<Utc>>) -> DateTime<Utc> {
    obtained.map_or(not_before, |o| o.max(not_before))
}

/// When a certificate whose lifetime runs from `start` to `not_after` is due for renewal:
/// when [`RENEW_FRACTION`] of it is left.
pub fn renew_at(start: DateTime<Utc>, not_after: DateTime<Utc>) -> DateTime<Utc> {
    let lifetime = (not_after - start).num_milliseconds().max(0) as f64;
    not_after - chrono::Duration::milliseconds((lifetime * RENEW_FRACTION) as i64)
}

fn read(path: &Path) -> Result<String, CertError> {
    std::fs::read_to_string(path).map_err(|source| CertError::Io { path: path.to_path_buf(), source })
}

/// Runs the controller (never returns).
pub async fn run(shared: Arc<Shared>) {
    let cert_path = AgentConfig::cert_path(&shared.dir);
    let mut in_use = read(&cert_path).unwrap_or_default();
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        let delay = match check(&shared, &mut in_use).await {
            Ok(d) => {
                backoff.reset();
                d
            }
            Err(e) => {
                let d = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?d, "certificate rotation failed");
                d
            }
        };
        tokio::time::sleep(delay).await;
    }
}

/// One check: reload a certificate replaced on disk, rotate a certificate that is due.
/// Returns how long to sleep.
async fn check(shared: &Shared, in_use: &mut String) -> Result<Duration, CertError> {
    let cert_path = AgentConfig::cert_path(&shared.dir);
    let on_disk = read(&cert_path)?;
    if on_disk != *in_use {
        let key = read(&AgentConfig::key_path(&shared.dir))?;
        let ca = read(&AgentConfig::ca_path(&shared.dir))?;
        swap_clients(shared, &ca, &on_disk, &key)?;
        tracing::info!(file = %cert_path.display(), "certificate replaced on disk; federation clients reloaded");
        *in_use = on_disk.clone();
    }
    let info = pki::cert_info(&on_disk)?;
    let obtained = std::fs::metadata(&cert_path).and_then(|m| m.modified()).ok().map(DateTime::<Utc>::from);
    let due = renew_at(lifetime_start(info.not_before, obtained), info.not_after);
    let now = Utc::now();
    if now < due {
        let wait = (due - now).to_std().unwrap_or_default();
        return Ok(wait.min(CHECK));
    }
    if now >= info.not_after {
        tracing::error!(not_after = %info.not_after, "the agent certificate has expired; the federation will refuse it — join this member again if renewal keeps failing");
    }
    let (cert, not_after) = rotate(shared).await?;
    *in_use = cert;
    tracing::info!(not_after = %not_after, "agent certificate renewed");
    Ok(MIN_GAP)
}

/// Replaces the federation clients of every controller with ones using `cert`/`key`.
fn swap_clients(shared: &Shared, ca: &str, cert: &str, key: &str) -> Result<(), CertError> {
    let generation = shared.fed.borrow().generation + 1;
    let clients = federation_clients_from_pem(&shared.config.federation_server, ca, cert, key, generation)?;
    shared.fed_tx.send_replace(clients);
    Ok(())
}

/// One rotation: CSR, wait for the certificate, verify, write, swap. Returns the new
/// certificate PEM and its expiry.
async fn rotate(shared: &Shared) -> Result<(String, DateTime<Utc>), CertError> {
    let user = format!("{AGENT_USER_PREFIX}{}", shared.config.cluster_name);
    let (csr_pem, key_pem) = pki::generate_csr(&user, &[AGENTS_GROUP])?;
    let name = format!("agent-{}-{}-{:04x}", shared.config.cluster_name, Utc::now().timestamp(), rand::random::<u16>());
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "labels": {"cluster.fedctl.io/name": shared.config.cluster_name}},
        "spec": {
            "request": ByteString(csr_pem.into_bytes()),
            "signerName": AGENT_SIGNER,
            "usages": ["client auth", "digital signature"],
        },
    }))
    .expect("valid CSR");
    let api: Api<CertificateSigningRequest> = Api::all(shared.fed.borrow().clone().api);
    api.create(&PostParams::default(), &csr).await.map_err(CertError::Federation)?;
    tracing::info!(csr = %name, "created CSR for a new agent certificate");
    let cert_pem = match wait_for_certificate(shared, &name).await {
        Ok(c) => c,
        Err(e) => {
            // best effort: do not leave abandoned requests behind (the agent may lack the
            // right to delete them; the federation's CSR cleaner then does)
            let api: Api<CertificateSigningRequest> = Api::all(shared.fed.borrow().clone().api);
            let _ = api.delete(&name, &Default::default()).await;
            return Err(e);
        }
    };
    let info = pki::cert_info(&cert_pem)?;
    if info.common_name != user {
        return Err(CertError::WrongIdentity { expected: user, got: info.common_name });
    }
    let ca = read(&AgentConfig::ca_path(&shared.dir))?;
    let generation = shared.fed.borrow().generation + 1;
    let clients = federation_clients_from_pem(&shared.config.federation_server, &ca, &cert_pem, &key_pem, generation)?;
    // prove the federation accepts the new identity before anything depends on it: any
    // answer but 401 on the agent's own Cluster (which it may read) shows it authenticates
    let probe = Api::<kube::core::DynamicObject>::all_with(clients.api.clone(), &super::cluster_resource());
    match probe.get_opt(&shared.config.cluster_name).await {
        Ok(_) => {}
        Err(e) if matches!(super::api_code(&e), Some(c) if c != 401) => {}
        Err(e) => return Err(CertError::Federation(e)),
    }
    write_atomic(&AgentConfig::key_path(&shared.dir), key_pem.as_bytes())?;
    write_atomic(&AgentConfig::cert_path(&shared.dir), cert_pem.as_bytes())?;
    shared.fed_tx.send_replace(clients);
    Ok((cert_pem, info.not_after))
}

/// Polls the CSR until it carries a certificate (the PEM), is denied or failed, or
/// [`CSR_WAIT`] passes. Transient read errors are retried (with the clients current at the
/// time of each poll).
async fn wait_for_certificate(shared: &Shared, name: &str) -> Result<String, CertError> {
    let deadline = tokio::time::Instant::now() + CSR_WAIT;
    let mut last_err: Option<kube::Error> = None;
    let mut poll = POLL;
    while tokio::time::Instant::now() < deadline {
        let api: Api<CertificateSigningRequest> = Api::all(shared.fed.borrow().clone().api);
        match api.get(name).await {
            Ok(csr) => {
                let status = csr.status.unwrap_or_default();
                for c in status.conditions.unwrap_or_default() {
                    if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
                        return Err(CertError::Refused { name: name.into(), condition: c.type_, message: c.message.unwrap_or_default() });
                    }
                }
                if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
                    return String::from_utf8(cert.0).map_err(|e| CertError::Pki(pki::PkiError::Parse { what: "certificate", detail: e.to_string() }));
                }
            }
            Err(e) => {
                tracing::debug!(csr = name, error = %e, "polling CSR failed");
                last_err = Some(e);
            }
        }
        tokio::time::sleep(poll).await;
        poll = (poll * 3 / 2).min(MAX_POLL);
    }
    match last_err {
        Some(e) if super::api_code(&e) == Some(404) => Err(CertError::Federation(e)),
        _ => Err(CertError::Timeout(name.into())),
    }
}

/// Writes `data` to `path` atomically: a temporary file beside it (mode 0600), fsync,
/// rename over `path`.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), CertError> {
    let io = |source| CertError::Io { path: path.to_path_buf(), source };
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp).map_err(io)?;
    f.write_all(data).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renews_at_eighty_percent() {
        let nb = DateTime::parse_from_rfc3339("2024-01-01T00:00:00Z").unwrap().with_timezone(&Utc);
        let na = nb + chrono::Duration::seconds(100);
        assert_eq!(renew_at(nb, na), nb + chrono::Duration::seconds(80));
        assert_eq!(renew_at(na, na), na);
        // a backdated notBefore does not count
        let got = nb + chrono::Duration::seconds(300);
        assert_eq!(lifetime_start(nb, Some(got)), got);
        assert_eq!(lifetime_start(got, Some(nb)), got);
        assert_eq!(lifetime_start(nb, None), nb);
    }

    #[test]
    fn atomic_write_replaces_with_0600() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("agent.key");
        std::fs::write(&p, "old").unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
    }
}
