//! X.509 PKI: certificate authorities, serving and client certificates, CSR signing, rustls
//! configs; with [`auth`] (authentication primitives) and [`kubeconfig`]. Uses no fedctl module
//! outside `pki` but `config::yaml`'s nesting check.
//!
//! Keys are ECDSA P-256 (PKCS#8 PEM, `-----BEGIN PRIVATE KEY-----`), which kubectl, client-go
//! and rustls all accept. Client certificates follow the Kubernetes convention: the subject
//! CN is the user name and each subject O is a group. Private keys are written with mode
//! 0600 and never appear in `Debug` output or logs.

use std::collections::BTreeSet;
use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use chrono::{DateTime, Utc};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber, SigningKey,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateSigningRequestDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use sha2::{Digest, Sha256};
use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;
use x509_parser::x509::X509Name;

pub mod auth;
mod files;
pub mod kubeconfig;

pub use files::{write_private_file, write_public_file};

use auth::{ADMIN_USER, MASTERS_GROUP};

/// Validity of a generated CA certificate: 10 years (as kubeadm's CAs).
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Default validity of leaf certificates: 1 year (as kubeadm's leaf certificates).
pub const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A stored leaf certificate closer than this to expiry is re-issued at startup (as k3s: 90 days).
pub const RENEW_BEFORE: Duration = Duration::from_secs(90 * 24 * 3600);
/// `notBefore` is set this far in the past to tolerate clock skew between machines.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// `name` of the server CA for [`Ca::load_or_create`]: files `DIR/tls/server-ca.{crt,key}`.
pub const SERVER_CA_NAME: &str = "server";

/// Errors of the PKI layer.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Key or certificate generation failed inside rcgen.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// Input is not the PEM (or DER) object expected; `what` names it.
    #[error("cannot parse {what}: {detail}")]
    Parse {
        /// What was being parsed, e.g. `certificate`, `CSR`, `private key`.
        what: &'static str,
        /// Why it failed.
        detail: String,
    },
    /// The CSR's self-signature does not verify against its own public key.
    #[error("CSR signature does not verify")]
    CsrSignature,
    /// The CSR's subject CN is not the one required by the caller.
    #[error("CSR common name {found:?} does not match the required {expected:?}")]
    CommonNameMismatch {
        /// The CN the caller required.
        expected: String,
        /// The CN found in the CSR.
        found: String,
    },
    /// The CSR's subject has no (or an empty) CN.
    #[error("CSR subject has no common name")]
    MissingCommonName,
    /// The CSR asks for a group that is never granted through CSR signing ([`MASTERS_GROUP`]).
    #[error("CSR requests forbidden group {0:?}")]
    ForbiddenGroup(String),
    /// A private key does not belong to the certificate it is paired with.
    #[error("private key does not match certificate {0}")]
    KeyMismatch(String),
    /// Only one of a certificate/key file pair exists; refusing to guess.
    #[error("{} exists but {} is missing", present.display(), missing.display())]
    IncompletePair {
        /// The file that exists.
        present: PathBuf,
        /// The file that is missing.
        missing: PathBuf,
    },
    /// A subject alternative name is neither an IP address nor a valid DNS name.
    #[error("invalid subject alternative name {0:?}")]
    InvalidSan(String),
    /// rustls refused the configuration (bad key, no usable CA, …).
    #[error("TLS configuration: {0}")]
    Tls(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::Io { path: path.to_path_buf(), source }
}

fn parse_err(what: &'static str, detail: impl ToString) -> PkiError {
    PkiError::Parse { what, detail: detail.to_string() }
}

/// A certificate authority: its certificate and the key that signs with it.
///
/// `Debug` shows the subject only, never the key.
pub struct Ca {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let subject = cert_info_der(&self.cert_der).map(|i| i.common_name).unwrap_or_default();
        f.debug_struct("Ca").field("subject_cn", &subject).finish_non_exhaustive()
    }
}

impl Ca {
    /// Generates a new self-signed CA with subject CN `common_name`, valid for [`CA_VALIDITY`].
    ///
    /// The certificate has `basicConstraints cA=TRUE` and key usages keyCertSign, cRLSign and
    /// digitalSignature, like kubeadm's `ca.crt`.
    pub fn generate(common_name: &str) -> Result<Ca, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(common_name, None);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.serial_number = Some(random_serial());
        set_validity(&mut params, CA_VALIDITY);
        let cert = params.self_signed(&key)?;
        Ok(Ca { cert_pem: cert.pem(), cert_der: cert.der().clone(), issuer: Issuer::new(params, key) })
    }

    /// Loads a CA from its certificate PEM and PKCS#8 (or SEC1/PKCS#1) private key PEM.
    ///
    /// Errors: [`PkiError::Parse`] on unparsable input, [`PkiError::KeyMismatch`] when the key
    /// is not the certificate's.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca, PkiError> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| parse_err("private key", e))?;
        let cert_der = first_cert_der(cert_pem)?;
        let (_, x509) = X509Certificate::from_der(&cert_der).map_err(|e| parse_err("certificate", e))?;
        if x509.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(PkiError::KeyMismatch(common_name_of(x509.subject())));
        }
        let issuer = Issuer::from_ca_cert_der(&cert_der, key).map_err(|e| parse_err("CA certificate", e))?;
        Ok(Ca { cert_pem: pem_encode("CERTIFICATE", &cert_der), cert_der, issuer })
    }

    /// Loads `DIR/tls/<name>-ca.crt` and `DIR/tls/<name>-ca.key`, or generates them (CN
    /// `fedctl-<name>-ca`) when neither exists, so a restart reuses the same CA.
    ///
    /// The `tls` directory is created with mode 0700 and the key file is (re)set to mode 0600.
    /// Errors: [`PkiError::IncompletePair`] when only one of the two files exists; I/O and
    /// parse errors otherwise.
    pub fn load_or_create(dir: &Path, name: &str) -> Result<Ca, PkiError> {
        let tls = tls_dir(dir)?;
        let crt = tls.join(format!("{name}-ca.crt"));
        let key = tls.join(format!("{name}-ca.key"));
        if let Some((cert_pem, key_pem)) = read_pair(&crt, &key)? {
            return Ca::from_pem(&cert_pem, &key_pem);
        }
        let ca = Ca::generate(&format!("fedctl-{name}-ca"))?;
        write_private_file(&key, ca.key_pem().as_bytes()).map_err(io_err(&key))?;
        write_public_file(&crt, ca.cert_pem.as_bytes()).map_err(io_err(&crt))?;
        tracing::info!(path = %crt.display(), "generated CA");
        Ok(ca)
    }

    /// The CA certificate as PEM (what clients put in `certificate-authority-data`).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate as DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The CA private key as PKCS#8 PEM. Secret: write it only to 0600 files.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// `"sha256:<64 hex>"`: SHA-256 of the CA certificate's DER SubjectPublicKeyInfo.
    ///
    /// Mirrors kubeadm's `--discovery-token-ca-cert-hash`, so an agent can pin the CA it
    /// fetched over an unauthenticated channel.
    pub fn hash(&self) -> String {
        spki_hash_der(&self.cert_der).expect("own CA certificate parses")
    }

    /// Issues a TLS server certificate for `sans` (IP literals become IP SANs, optionally in
    /// `[v6]` brackets; anything else a DNS SAN, lower-cased). Returns `(cert_pem, key_pem)`.
    ///
    /// The certificate has extendedKeyUsage serverAuth, a fresh P-256 key, a random serial,
    /// `notBefore` 5 minutes in the past and `notAfter` `validity` from now.
    /// Errors: [`PkiError::InvalidSan`] for an unusable name.
    pub fn issue_serving(&self, sans: &[String], validity: Duration) -> Result<(String, String), PkiError> {
        let key = KeyPair::generate()?;
        let mut params = leaf_params(validity);
        params.distinguished_name = distinguished_name("fedctl", None);
        params.subject_alt_names = parse_sans(sans)?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Issues a client certificate: CN = `common_name` (the user), one O per entry of
    /// `organizations` (the groups), extendedKeyUsage clientAuth. Returns `(cert_pem, key_pem)`.
    pub fn issue_client(&self, common_name: &str, organizations: &[&str], validity: Duration) -> Result<(String, String), PkiError> {
        let key = KeyPair::generate()?;
        let orgs: Vec<String> = organizations.iter().map(|s| s.to_string()).collect();
        let cert = self.sign_client(common_name, &orgs, &key, validity)?;
        Ok((cert, key.serialize_pem()))
    }

    /// Signs a PKCS#10 CSR (PEM `CERTIFICATE REQUEST` or DER) as a client certificate.
    ///
    /// The CSR's self-signature is verified; its subject CN and O values are copied (user and
    /// groups), everything else it requests (SANs, CA flag, key usages) is ignored: the result
    /// always has extendedKeyUsage clientAuth only, like kube-controller-manager's
    /// `kube-apiserver-client` signer. When `common_name_must_be` is set the CN must equal it.
    /// Errors: [`PkiError::CsrSignature`], [`PkiError::CommonNameMismatch`],
    /// [`PkiError::MissingCommonName`], [`PkiError::ForbiddenGroup`] (O `system:masters`),
    /// [`PkiError::Parse`] for malformed input or unsupported requested extensions.
    pub fn sign_csr(&self, csr_pem_or_der: &[u8], common_name_must_be: Option<&str>, validity: Duration) -> Result<String, PkiError> {
        let der = csr_der(csr_pem_or_der)?;
        let requested = CertificateSigningRequestParams::from_der(&der).map_err(|e| match e {
            rcgen::Error::InvalidCertificationRequestSignature => PkiError::CsrSignature,
            other => parse_err("CSR", other),
        })?;
        let (common_name, orgs) = csr_subject_der(&der)?;
        if common_name.is_empty() {
            return Err(PkiError::MissingCommonName);
        }
        if let Some(expected) = common_name_must_be {
            if expected != common_name {
                return Err(PkiError::CommonNameMismatch { expected: expected.to_string(), found: common_name });
            }
        }
        if let Some(g) = orgs.iter().find(|g| g.as_str() == MASTERS_GROUP) {
            return Err(PkiError::ForbiddenGroup(g.clone()));
        }
        self.sign_client(&common_name, &orgs, &requested.public_key, validity)
    }

    fn sign_client(&self, common_name: &str, orgs: &[String], public_key: &impl rcgen::PublicKeyData, validity: Duration) -> Result<String, PkiError> {
        let mut params = leaf_params(validity);
        params.distinguished_name = distinguished_name(common_name, orgs.first());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(public_key, &self.issuer)?;
        let der = if orgs.len() > 1 {
            // rcgen holds one value per attribute type; groups need one O per group.
            resign_with_subject(cert.der(), &encode_name(common_name, orgs), self.issuer.key())?
        } else {
            cert.der().to_vec()
        };
        Ok(pem_encode("CERTIFICATE", &der))
    }

    /// Whether `cert_pem`'s first certificate carries a signature by this CA.
    pub fn signed(&self, cert_pem: &str) -> bool {
        let Ok(der) = first_cert_der(cert_pem) else {
            return false;
        };
        let (Ok((_, cert)), Ok((_, ca))) = (X509Certificate::from_der(&der), X509Certificate::from_der(&self.cert_der)) else {
            return false;
        };
        cert.verify_signature(Some(ca.public_key())).is_ok()
    }
}

/// Generates a key and a PKCS#10 CSR for it with subject CN = `common_name` and one O per
/// organization (the agent side of [`Ca::sign_csr`]). Returns `(csr_pem, key_pem)`.
pub fn generate_csr(common_name: &str, organizations: &[&str]) -> Result<(String, String), PkiError> {
    let key = KeyPair::generate()?;
    let orgs: Vec<String> = organizations.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(common_name, orgs.first());
    let csr = params.serialize_request(&key)?;
    let der = if orgs.len() > 1 { resign_with_subject(csr.der(), &encode_name(common_name, &orgs), &key)? } else { csr.der().to_vec() };
    Ok((pem_encode("CERTIFICATE REQUEST", &der), key.serialize_pem()))
}

/// The subject CN and O values of a CSR (PEM or DER), without verifying its signature.
pub fn csr_subject(csr_pem_or_der: &[u8]) -> Result<(String, Vec<String>), PkiError> {
    csr_subject_der(&csr_der(csr_pem_or_der)?)
}

/// What [`cert_info`] reports about a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// Subject CN (empty when absent); the user name of a client certificate.
    pub common_name: String,
    /// Subject O values in order; the groups of a client certificate.
    pub organizations: Vec<String>,
    /// Start of validity (second precision).
    pub not_before: DateTime<Utc>,
    /// End of validity (second precision).
    pub not_after: DateTime<Utc>,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP subject alternative names.
    pub ip_addresses: Vec<IpAddr>,
}

/// Parses the first certificate of `pem` and reports subject, validity and SANs.
pub fn cert_info(pem: &str) -> Result<CertInfo, PkiError> {
    cert_info_der(&first_cert_der(pem)?)
}

fn cert_info_der(der: &[u8]) -> Result<CertInfo, PkiError> {
    let (_, x509) = X509Certificate::from_der(der).map_err(|e| parse_err("certificate", e))?;
    let ts = |t: i64| DateTime::from_timestamp(t, 0).unwrap_or_default();
    let mut dns_names = Vec::new();
    let mut ip_addresses = Vec::new();
    if let Ok(Some(san)) = x509.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => dns_names.push(d.to_string()),
                GeneralName::IPAddress(b) => {
                    if let Ok(a) = <[u8; 4]>::try_from(*b) {
                        ip_addresses.push(IpAddr::from(a));
                    } else if let Ok(a) = <[u8; 16]>::try_from(*b) {
                        ip_addresses.push(IpAddr::from(a));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        common_name: common_name_of(x509.subject()),
        organizations: organizations_of(x509.subject()),
        not_before: ts(x509.validity().not_before.timestamp()),
        not_after: ts(x509.validity().not_after.timestamp()),
        dns_names,
        ip_addresses,
    })
}

/// `"sha256:<hex>"` of the SubjectPublicKeyInfo of the first certificate in `cert_pem`;
/// the agent side of [`Ca::hash`] (mirrors kubeadm's `--discovery-token-ca-cert-hash`).
pub fn ca_cert_hash(cert_pem: &str) -> Result<String, PkiError> {
    spki_hash_der(&first_cert_der(cert_pem)?)
}

/// Generates a self-signed TLS server certificate for `sans` (as [`Ca::issue_serving`]
/// parses them) with subject CN `common_name`, extendedKeyUsage serverAuth, a fresh P-256
/// key, `notBefore` 5 minutes in the past and `notAfter` `validity` from now. Returns
/// `(cert_pem, key_pem)`.
///
/// Mirrors the serving certificate kubelet generates for itself at start-up when it is given
/// none (`--tls-cert-file` unset): clients verify it by pinning (see [`cert_sha256`]).
/// Errors: [`PkiError::InvalidSan`] for an unusable name.
pub fn self_signed_serving(common_name: &str, sans: &[String], validity: Duration) -> Result<(String, String), PkiError> {
    let key = KeyPair::generate()?;
    let mut params = leaf_params(validity);
    params.use_authority_key_identifier_extension = false;
    params.distinguished_name = distinguished_name(common_name, None);
    params.subject_alt_names = parse_sans(sans)?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// `"sha256:<64 hex>"`: SHA-256 of the DER of the first certificate in `cert_pem` (the
/// certificate fingerprint a client pins, as `openssl x509 -fingerprint -sha256` prints it
/// without colons). Errors: [`PkiError::Parse`] when `cert_pem` holds no certificate.
pub fn cert_sha256(cert_pem: &str) -> Result<String, PkiError> {
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(first_cert_der(cert_pem)?))))
}

fn spki_hash_der(der: &[u8]) -> Result<String, PkiError> {
    let (_, x509) = X509Certificate::from_der(der).map_err(|e| parse_err("certificate", e))?;
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(x509.public_key().raw))))
}

/// The server's PKI as kept in `DIR/tls/`: CA, serving certificate and admin client certificate.
///
/// Files: `server-ca.{crt,key}`, `serving-apiserver.{crt,key}`, `client-admin.{crt,key}`;
/// keys mode 0600. `Debug` never shows keys.
pub struct ServerPki {
    /// The server CA (`server-ca`): signs the serving, admin and agent certificates and
    /// verifies client certificates.
    pub ca: Ca,
    /// Serving certificate PEM.
    pub serving_cert_pem: String,
    /// Serving key PEM (secret).
    pub serving_key_pem: String,
    /// Admin client certificate PEM (CN `admin`, O `system:masters`).
    pub admin_cert_pem: String,
    /// Admin client key PEM (secret).
    pub admin_key_pem: String,
    /// The SANs the serving certificate was checked (or issued) for, normalized.
    pub serving_sans: Vec<String>,
}

impl std::fmt::Debug for ServerPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerPki").field("ca", &self.ca).field("serving_sans", &self.serving_sans).finish_non_exhaustive()
    }
}

impl ServerPki {
    /// rustls server config for the API server: serving cert, optional client certs from the CA.
    pub fn server_tls_config(&self) -> Result<Arc<ServerConfig>, PkiError> {
        server_tls_config(&self.serving_cert_pem, &self.serving_key_pem, self.ca.cert_pem())
    }
}

/// Creates the server PKI under `DIR/tls/` on first start and reuses it afterwards.
///
/// The serving certificate covers `localhost`, `127.0.0.1`, `::1`, this machine's hostname,
/// `bind_address` (skipped when it is an unspecified address such as `0.0.0.0`) and
/// `extra_sans`. A stored serving or admin certificate is re-issued (the CA never is) when it
/// is not signed by the current CA, does not match its key, expires within [`RENEW_BEFORE`],
/// or — for the serving certificate — lacks one of the wanted SANs.
pub fn load_or_create_server_pki(data_dir: &Path, bind_address: &str, extra_sans: &[String]) -> Result<ServerPki, PkiError> {
    let ca = Ca::load_or_create(data_dir, SERVER_CA_NAME)?;
    let tls = tls_dir(data_dir)?;

    let mut wanted: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if let Some(host) = hostname() {
        wanted.push(host);
    }
    let bind = bind_address.trim().trim_start_matches('[').trim_end_matches(']');
    if !bind.is_empty() && !bind.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()) {
        wanted.push(bind.to_string());
    }
    wanted.extend(extra_sans.iter().cloned());
    let wanted = normalize_sans(&wanted)?;

    let (serving_cert_pem, serving_key_pem) = load_or_issue(
        &ca,
        &tls.join("serving-apiserver.crt"),
        &tls.join("serving-apiserver.key"),
        |info| {
            let have: BTreeSet<String> = info.dns_names.iter().map(|d| d.to_ascii_lowercase()).chain(info.ip_addresses.iter().map(|ip| ip.to_string())).collect();
            wanted.iter().all(|w| have.contains(w))
        },
        || ca.issue_serving(&wanted, LEAF_VALIDITY),
    )?;
    let (admin_cert_pem, admin_key_pem) = load_or_issue(
        &ca,
        &tls.join("client-admin.crt"),
        &tls.join("client-admin.key"),
        |info| info.common_name == ADMIN_USER && info.organizations == [MASTERS_GROUP],
        || ca.issue_client(ADMIN_USER, &[MASTERS_GROUP], LEAF_VALIDITY),
    )?;
    Ok(ServerPki { ca, serving_cert_pem, serving_key_pem, admin_cert_pem, admin_key_pem, serving_sans: wanted })
}

fn load_or_issue(ca: &Ca, crt: &Path, key: &Path, fits: impl Fn(&CertInfo) -> bool, issue: impl FnOnce() -> Result<(String, String), PkiError>) -> Result<(String, String), PkiError> {
    let existing = match read_pair(crt, key) {
        Ok(pair) => pair,
        Err(PkiError::IncompletePair { .. }) => None,
        Err(e) => return Err(e),
    };
    if let Some((cert_pem, key_pem)) = existing {
        if leaf_reusable(ca, &cert_pem, &key_pem, &fits) {
            return Ok((cert_pem, key_pem));
        }
        tracing::info!(path = %crt.display(), "re-issuing certificate");
    }
    let (cert_pem, key_pem) = issue()?;
    write_private_file(key, key_pem.as_bytes()).map_err(io_err(key))?;
    write_public_file(crt, cert_pem.as_bytes()).map_err(io_err(crt))?;
    Ok((cert_pem, key_pem))
}

fn leaf_reusable(ca: &Ca, cert_pem: &str, key_pem: &str, fits: &impl Fn(&CertInfo) -> bool) -> bool {
    let Ok(info) = cert_info(cert_pem) else {
        return false;
    };
    let renew_at = Utc::now() + chrono::Duration::from_std(RENEW_BEFORE).unwrap_or_default();
    ca.signed(cert_pem) && info.not_after > renew_at && key_matches(cert_pem, key_pem) && fits(&info)
}

fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    let (Ok(der), Ok(key)) = (first_cert_der(cert_pem), KeyPair::from_pem(key_pem)) else {
        return false;
    };
    X509Certificate::from_der(&der).is_ok_and(|(_, c)| c.public_key().subject_public_key.data.as_ref() == key.public_key_raw())
}

fn hostname() -> Option<String> {
    let h = gethostname::gethostname().into_string().ok()?.to_ascii_lowercase();
    valid_dns_name(&h).then_some(h)
}

// ---------------------------------------------------------------------------------------------
// TLS configurations
// ---------------------------------------------------------------------------------------------

fn ring_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// All certificates in a PEM string, in order (leaf first for a chain).
pub fn parse_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes()).collect::<Result<Vec<_>, _>>().map_err(|e| parse_err("certificate", e))?;
    if certs.is_empty() {
        return Err(parse_err("certificate", "no CERTIFICATE block"));
    }
    Ok(certs)
}

/// The first private key (PKCS#8, SEC1 or PKCS#1) in a PEM string.
pub fn parse_private_key(pem: &str) -> Result<PrivateKeyDer<'static>, PkiError> {
    // The error text of the PEM parser never contains key material.
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| parse_err("private key", e))
}

fn root_store(ca_pem: &str) -> Result<Arc<RootCertStore>, PkiError> {
    let mut roots = RootCertStore::empty();
    for cert in parse_certs(ca_pem)? {
        roots.add(cert).map_err(|e| PkiError::Tls(e.to_string()))?;
    }
    Ok(Arc::new(roots))
}

/// rustls server config: the serving chain from `cert_pem`/`key_pem`, ALPN `h2` and
/// `http/1.1`, client certificates optional.
///
/// A client certificate, when presented, must chain to `client_ca_pem` (and carry
/// clientAuth) or the handshake fails; clients without one are let through so that bearer
/// tokens can authenticate them instead — as kube-apiserver with `--client-ca-file`.
/// Uses the ring provider explicitly, independent of any process-wide default.
pub fn server_tls_config(cert_pem: &str, key_pem: &str, client_ca_pem: &str) -> Result<Arc<ServerConfig>, PkiError> {
    let provider = ring_provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(root_store(client_ca_pem)?, provider.clone()).allow_unauthenticated().build().map_err(|e| PkiError::Tls(e.to_string()))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PkiError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(parse_certs(cert_pem)?, parse_private_key(key_pem)?)
        .map_err(|e| PkiError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// rustls server config: the serving chain from `cert_pem`/`key_pem`, ALPN `h2` and
/// `http/1.1`, no client certificates asked for (a listener whose clients need no identity,
/// e.g. the agent's `/metrics`). Uses the ring provider explicitly.
pub fn server_tls_config_without_client_auth(cert_pem: &str, key_pem: &str) -> Result<Arc<ServerConfig>, PkiError> {
    let mut config = ServerConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| PkiError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(parse_certs(cert_pem)?, parse_private_key(key_pem)?)
        .map_err(|e| PkiError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// rustls client config trusting only `ca_pem`, presenting `client_cert` = `(cert_pem,
/// key_pem)` when given. No ALPN is offered (plain HTTP/1.1); clone the config and set
/// `alpn_protocols` for HTTP/2. Uses the ring provider explicitly.
pub fn client_tls_config(ca_pem: &str, client_cert: Option<(&str, &str)>) -> Result<Arc<ClientConfig>, PkiError> {
    let builder = ClientConfig::builder_with_provider(ring_provider()).with_safe_default_protocol_versions().map_err(|e| PkiError::Tls(e.to_string()))?.with_root_certificates(root_store(ca_pem)?);
    let config = match client_cert {
        Some((cert_pem, key_pem)) => builder.with_client_auth_cert(parse_certs(cert_pem)?, parse_private_key(key_pem)?).map_err(|e| PkiError::Tls(e.to_string()))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// `(user, groups)` = (CN, O values) of the end-entity certificate of a verified peer chain
/// (rustls `peer_certificates()`); `None` without certificates, or with no or an empty CN.
pub fn peer_identity(certs: &[CertificateDer<'_>]) -> Option<(String, Vec<String>)> {
    let (_, cert) = X509Certificate::from_der(certs.first()?).ok()?;
    let user = common_name_of(cert.subject());
    (!user.is_empty()).then(|| (user, organizations_of(cert.subject())))
}

// ---------------------------------------------------------------------------------------------
// Helpers: names, PEM, files, DER surgery
// ---------------------------------------------------------------------------------------------

fn distinguished_name(common_name: &str, organization: Option<&String>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o.as_str());
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

fn common_name_of(name: &X509Name<'_>) -> String {
    name.iter_common_name().next().and_then(|a| a.as_str().ok()).unwrap_or_default().to_string()
}

fn organizations_of(name: &X509Name<'_>) -> Vec<String> {
    name.iter_organization().filter_map(|a| a.as_str().ok()).map(str::to_string).collect()
}

fn csr_der(input: &[u8]) -> Result<CertificateSigningRequestDer<'static>, PkiError> {
    if input.trim_ascii_start().starts_with(b"-----BEGIN") {
        CertificateSigningRequestDer::from_pem_slice(input).map_err(|e| parse_err("CSR", e))
    } else {
        Ok(CertificateSigningRequestDer::from(input.to_vec()))
    }
}

fn csr_subject_der(der: &[u8]) -> Result<(String, Vec<String>), PkiError> {
    let (_, csr) = X509CertificationRequest::from_der(der).map_err(|e| parse_err("CSR", e))?;
    let subject = &csr.certification_request_info.subject;
    Ok((common_name_of(subject), organizations_of(subject)))
}

fn first_cert_der(pem: &str) -> Result<CertificateDer<'static>, PkiError> {
    Ok(parse_certs(pem)?.swap_remove(0))
}

fn leaf_params(validity: Duration) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial());
    set_validity(&mut params, validity);
    params
}

fn set_validity(params: &mut CertificateParams, validity: Duration) {
    let now = Duration::from_secs(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs());
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + now.saturating_sub(BACKDATE);
    params.not_after = epoch + now + validity;
}

/// 128-bit positive random serial (RFC 5280 allows up to 20 octets).
fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}

fn valid_dns_name(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| !label.is_empty() && label.len() <= 63 && !label.starts_with('-') && !label.ends_with('-') && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// Trims, lower-cases DNS names, canonicalizes IPs and drops empties and duplicates.
fn normalize_sans(sans: &[String]) -> Result<Vec<String>, PkiError> {
    let mut out: Vec<String> = Vec::new();
    for raw in sans {
        let s = raw.trim();
        if s.is_empty() {
            continue;
        }
        let unbracketed = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')).unwrap_or(s);
        let norm = if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            ip.to_string()
        } else if valid_dns_name(s) {
            s.to_ascii_lowercase()
        } else {
            return Err(PkiError::InvalidSan(raw.clone()));
        };
        if !out.contains(&norm) {
            out.push(norm);
        }
    }
    Ok(out)
}

fn parse_sans(sans: &[String]) -> Result<Vec<SanType>, PkiError> {
    normalize_sans(sans)?
        .into_iter()
        .map(|s| match s.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => s.clone().try_into().map(SanType::DnsName).map_err(|_| PkiError::InvalidSan(s)),
        })
        .collect()
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn tls_dir(data_dir: &Path) -> Result<PathBuf, PkiError> {
    let tls = data_dir.join("tls");
    if !tls.is_dir() {
        fs::create_dir_all(&tls).map_err(io_err(&tls))?;
        fs::set_permissions(&tls, fs::Permissions::from_mode(0o700)).map_err(io_err(&tls))?;
    }
    Ok(tls)
}

/// Reads a cert/key pair: `None` when neither exists, an error when only one does.
/// Re-applies mode 0600 to the key file.
fn read_pair(crt: &Path, key: &Path) -> Result<Option<(String, String)>, PkiError> {
    match (crt.exists(), key.exists()) {
        (false, false) => Ok(None),
        (true, false) => Err(PkiError::IncompletePair { present: crt.to_path_buf(), missing: key.to_path_buf() }),
        (false, true) => Err(PkiError::IncompletePair { present: key.to_path_buf(), missing: crt.to_path_buf() }),
        (true, true) => {
            let cert_pem = fs::read_to_string(crt).map_err(io_err(crt))?;
            let key_pem = fs::read_to_string(key).map_err(io_err(key))?;
            fs::set_permissions(key, fs::Permissions::from_mode(0o600)).map_err(io_err(key))?;
            Ok(Some((cert_pem, key_pem)))
        }
    }
}

const OID_COMMON_NAME: [u8; 3] = [0x55, 0x04, 0x03]; // 2.5.4.3
const OID_ORGANIZATION: [u8; 3] = [0x55, 0x04, 0x0a]; // 2.5.4.10

fn der_tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// Splits DER content into its complete top-level TLVs (definite lengths only, as DER).
fn der_elements(mut buf: &[u8]) -> Result<Vec<&[u8]>, PkiError> {
    let bad = || parse_err("DER", "truncated or indefinite-length element");
    let mut out = Vec::new();
    while !buf.is_empty() {
        let first_len = *buf.get(1).ok_or_else(bad)?;
        let (header, len) = if first_len < 0x80 {
            (2, first_len as usize)
        } else {
            let n = (first_len & 0x7f) as usize;
            if n == 0 || n > 4 {
                return Err(bad());
            }
            let len_bytes = buf.get(2..2 + n).ok_or_else(bad)?;
            (2 + n, len_bytes.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize))
        };
        let total = header.checked_add(len).filter(|t| *t <= buf.len()).ok_or_else(bad)?;
        out.push(&buf[..total]);
        buf = &buf[total..];
    }
    Ok(out)
}

/// DER `Name` with one RDN per organization (O) followed by the CN, all UTF8String.
fn encode_name(common_name: &str, orgs: &[String]) -> Vec<u8> {
    let rdn = |oid: &[u8], value: &str| {
        let atv = [der_tlv(0x06, oid), der_tlv(0x0c, value.as_bytes())].concat();
        der_tlv(0x31, &der_tlv(0x30, &atv))
    };
    let mut rdns: Vec<u8> = orgs.iter().flat_map(|o| rdn(&OID_ORGANIZATION, o)).collect();
    rdns.extend(rdn(&OID_COMMON_NAME, common_name));
    der_tlv(0x30, &rdns)
}

/// Replaces the subject `Name` in a signed certificate or CSR and signs it again with `key`.
///
/// Both structures are `SEQUENCE { toBeSigned, signatureAlgorithm, BIT STRING }`; the subject is
/// the 6th field of a v3 TBSCertificate and the 2nd of a CertificationRequestInfo.
fn resign_with_subject(signed_der: &[u8], subject: &[u8], key: &impl SigningKey) -> Result<Vec<u8>, PkiError> {
    let bad = || parse_err("DER", "unexpected structure");
    let outer = der_elements(signed_der)?;
    let outer = outer.first().filter(|o| o[0] == 0x30).ok_or_else(bad)?;
    let parts = der_elements(content_of(outer)?)?;
    let [tbs, alg, _sig] = parts.as_slice() else {
        return Err(bad());
    };
    let fields = der_elements(content_of(tbs)?)?;
    let subject_index = match fields.first().map(|f| f[0]) {
        Some(0xa0) => 5,                      // certificate: [0] version, serial, signature, issuer, validity, subject
        Some(0x02) if fields.len() == 4 => 1, // CSR: version, subject, spki, [0] attributes
        _ => return Err(bad()),
    };
    if fields.len() <= subject_index {
        return Err(bad());
    }
    let mut new_content = Vec::new();
    for (i, field) in fields.iter().enumerate() {
        new_content.extend_from_slice(if i == subject_index { subject } else { field });
    }
    let new_tbs = der_tlv(0x30, &new_content);
    let mut bits = vec![0u8];
    bits.extend(key.sign(&new_tbs)?);
    Ok(der_tlv(0x30, &[new_tbs, alg.to_vec(), der_tlv(0x03, &bits)].concat()))
}

fn content_of(tlv: &[u8]) -> Result<&[u8], PkiError> {
    let header = if tlv.get(1).is_some_and(|b| *b >= 0x80) { 2 + (tlv[1] & 0x7f) as usize } else { 2 };
    tlv.get(header..).ok_or_else(|| parse_err("DER", "truncated element"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    const HOUR: Duration = Duration::from_secs(3600);

    /// Server side of one connection: handshake, report (peer identity, ALPN), echo one byte.
    async fn serve_one(listener: &TcpListener, config: Arc<ServerConfig>) -> Result<(Option<(String, Vec<String>)>, Option<Vec<u8>>), std::io::Error> {
        let (tcp, _) = listener.accept().await?;
        let mut tls = TlsAcceptor::from(config).accept(tcp).await?;
        let (_, conn) = tls.get_ref();
        let identity = conn.peer_certificates().and_then(peer_identity);
        let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
        let mut b = [0u8; 1];
        tls.read_exact(&mut b).await?;
        tls.write_all(&b).await?;
        tls.shutdown().await?;
        Ok((identity, alpn))
    }

    async fn connect(addr: std::net::SocketAddr, config: Arc<ClientConfig>, server_name: &str) -> Result<u8, std::io::Error> {
        let tcp = TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string()).unwrap();
        let mut tls = TlsConnector::from(config).connect(name, tcp).await?;
        tls.write_all(b"x").await?;
        let mut b = [0u8; 1];
        tls.read_exact(&mut b).await?;
        Ok(b[0])
    }

    #[tokio::test]
    async fn tls_handshake_with_and_without_client_cert() {
        let ca = Ca::generate("test-ca").unwrap();
        let (cert, key) = ca.issue_serving(&["127.0.0.1".into(), "localhost".into(), "[::1]".into()], HOUR).unwrap();
        let server_cfg = server_tls_config(&cert, &key, ca.cert_pem()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();

        // Anonymous client, by IP SAN, offering h2.
        let mut anon = (*client_tls_config(ca.cert_pem(), None).unwrap()).clone();
        anon.alpn_protocols = vec![b"h2".to_vec()];
        let (server, client) = tokio::join!(serve_one(&listener, server_cfg.clone()), connect(addr, Arc::new(anon), "127.0.0.1"));
        assert_eq!(client.unwrap(), b'x');
        let (identity, alpn) = server.unwrap();
        assert_eq!(identity, None);
        assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));

        // Client certificate with two groups (two O attributes), by DNS SAN.
        let (ccert, ckey) = ca.issue_client("alice", &["dev", "ops"], HOUR).unwrap();
        let with_cert = client_tls_config(ca.cert_pem(), Some((&ccert, &ckey))).unwrap();
        let (server, client) = tokio::join!(serve_one(&listener, server_cfg.clone()), connect(addr, with_cert, "localhost"));
        assert_eq!(client.unwrap(), b'x');
        let (identity, alpn) = server.unwrap();
        assert_eq!(identity, Some(("alice".into(), vec!["dev".into(), "ops".into()])));
        assert_eq!(alpn, None);

        // A client certificate from a CSR signed by the CA works the same way.
        let (csr, csr_key) = generate_csr("system:fedctl:agent:east", &["system:fedctl:agents"]).unwrap();
        let agent_cert = ca.sign_csr(csr.as_bytes(), Some("system:fedctl:agent:east"), HOUR).unwrap();
        let agent = client_tls_config(ca.cert_pem(), Some((&agent_cert, &csr_key))).unwrap();
        let (server, client) = tokio::join!(serve_one(&listener, server_cfg.clone()), connect(addr, agent, "::1"));
        // "::1" is not what we dialed (127.0.0.1) but it is a SAN: name checks use SANs only.
        assert_eq!(client.unwrap(), b'x');
        assert_eq!(server.unwrap().0, Some(("system:fedctl:agent:east".into(), vec!["system:fedctl:agents".into()])));
    }

    #[tokio::test]
    async fn tls_handshake_rejects_foreign_ca_and_unknown_name() {
        let ca = Ca::generate("test-ca").unwrap();
        let other = Ca::generate("other-ca").unwrap();
        let (cert, key) = ca.issue_serving(&["localhost".into()], HOUR).unwrap();
        let server_cfg = server_tls_config(&cert, &key, ca.cert_pem()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();

        // Client trusting another CA refuses the server.
        let wrong_trust = client_tls_config(other.cert_pem(), None).unwrap();
        let (_, client) = tokio::join!(serve_one(&listener, server_cfg.clone()), connect(addr, wrong_trust, "localhost"));
        assert!(client.is_err());

        // Name not among the SANs.
        let trust = client_tls_config(ca.cert_pem(), None).unwrap();
        let (_, client) = tokio::join!(serve_one(&listener, server_cfg.clone()), connect(addr, trust, "example.com"));
        assert!(client.is_err());

        // Client certificate from a foreign CA is refused by the server.
        let (fcert, fkey) = other.issue_client("mallory", &[MASTERS_GROUP], HOUR).unwrap();
        let foreign = client_tls_config(ca.cert_pem(), Some((&fcert, &fkey))).unwrap();
        let (server, _) = tokio::join!(serve_one(&listener, server_cfg.clone()), connect(addr, foreign, "localhost"));
        assert!(server.is_err());
    }

    #[test]
    fn ca_hash_is_kubeadm_style_and_stable_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let first = Ca::load_or_create(dir.path(), "server").unwrap();
        let hash = first.hash();
        assert!(hash.starts_with("sha256:"));
        assert_eq!(hash.len(), "sha256:".len() + 64);
        assert!(hash[7..].bytes().all(|b| b.is_ascii_hexdigit()));

        // Independent computation: SHA-256 over the SPKI DER as rcgen encodes the key.
        let key = KeyPair::from_pem(&first.key_pem()).unwrap();
        let expected = format!("sha256:{}", hex::encode(Sha256::digest(key.subject_public_key_info())));
        assert_eq!(hash, expected);
        assert_eq!(ca_cert_hash(first.cert_pem()).unwrap(), hash);

        let key_path = dir.path().join("tls/server-ca.key");
        let mode = fs::metadata(&key_path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(dir.path().join("tls/server-ca.crt").is_file());

        let again = Ca::load_or_create(dir.path(), "server").unwrap();
        assert_eq!(again.hash(), hash);
        assert_eq!(again.cert_pem(), first.cert_pem());
        // The reloaded CA still signs certificates that chain to the same certificate.
        let (leaf, _) = again.issue_client("bob", &[], HOUR).unwrap();
        assert!(first.signed(&leaf));

        // Loosened key permissions are tightened again on load.
        fs::set_permissions(&key_path, fs::Permissions::from_mode(0o644)).unwrap();
        Ca::load_or_create(dir.path(), "server").unwrap();
        assert_eq!(fs::metadata(&key_path).unwrap().permissions().mode() & 0o777, 0o600);

        // Half a pair is an error, not a silent new CA.
        fs::remove_file(dir.path().join("tls/server-ca.crt")).unwrap();
        assert!(matches!(Ca::load_or_create(dir.path(), "server"), Err(PkiError::IncompletePair { .. })));
    }

    #[test]
    fn shareable_across_tasks() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Ca>();
        send_sync::<ServerPki>();
    }

    #[test]
    fn ca_debug_hides_key() {
        let ca = Ca::generate("dbg-ca").unwrap();
        let shown = format!("{ca:?}");
        assert!(shown.contains("dbg-ca"));
        assert!(!shown.contains("PRIVATE KEY"));
    }

    #[test]
    fn from_pem_rejects_foreign_key() {
        let a = Ca::generate("a").unwrap();
        let b = Ca::generate("b").unwrap();
        assert!(matches!(Ca::from_pem(a.cert_pem(), &b.key_pem()), Err(PkiError::KeyMismatch(_))));
    }

    #[test]
    fn serving_cert_sans_and_validity() {
        let ca = Ca::generate("c").unwrap();
        let sans: Vec<String> = ["10.0.0.7", "Fed.Example.com", "[fd00::1]", "", "localhost", "localhost"].map(String::from).to_vec();
        let (cert, _) = ca.issue_serving(&sans, LEAF_VALIDITY).unwrap();
        let info = cert_info(&cert).unwrap();
        assert_eq!(info.dns_names, ["fed.example.com", "localhost"]);
        assert_eq!(info.ip_addresses, ["10.0.0.7".parse::<IpAddr>().unwrap(), "fd00::1".parse().unwrap()]);
        let now = Utc::now();
        assert!(info.not_before <= now && info.not_before > now - chrono::Duration::minutes(10));
        let days = (info.not_after - now).num_days();
        assert!((364..=365).contains(&days), "{days}");
        assert!(matches!(ca.issue_serving(&["bad name".into()], HOUR), Err(PkiError::InvalidSan(_))));
    }

    #[test]
    fn csr_round_trip() {
        let ca = Ca::generate("c").unwrap();
        let (csr, key_pem) = generate_csr("system:fedctl:agent:west", &["system:fedctl:agents"]).unwrap();
        assert!(csr.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        assert_eq!(csr_subject(csr.as_bytes()).unwrap(), ("system:fedctl:agent:west".into(), vec!["system:fedctl:agents".into()]));
        let cert = ca.sign_csr(csr.as_bytes(), Some("system:fedctl:agent:west"), HOUR).unwrap();
        assert!(ca.signed(&cert));
        assert!(key_matches(&cert, &key_pem));
        let info = cert_info(&cert).unwrap();
        assert_eq!(info.common_name, "system:fedctl:agent:west");
        assert_eq!(info.organizations, ["system:fedctl:agents"]);

        // DER input, no CN constraint, several groups (re-signed subject).
        let (csr, key_pem) = generate_csr("carol", &["a", "b", "c"]).unwrap();
        let der = CertificateSigningRequestDer::from_pem_slice(csr.as_bytes()).unwrap();
        CertificateSigningRequestParams::from_der(&der).expect("re-signed CSR verifies");
        let cert = ca.sign_csr(&der, None, HOUR).unwrap();
        assert!(ca.signed(&cert));
        assert!(key_matches(&cert, &key_pem));
        let info = cert_info(&cert).unwrap();
        assert_eq!((info.common_name.as_str(), info.organizations.len()), ("carol", 3));
        assert_eq!(info.organizations, ["a", "b", "c"]);
    }

    #[test]
    fn csr_with_wrong_cn_or_bad_signature_or_masters_is_refused() {
        let ca = Ca::generate("c").unwrap();
        let (csr, _) = generate_csr("system:fedctl:agent:evil", &[]).unwrap();
        assert!(matches!(ca.sign_csr(csr.as_bytes(), Some("system:fedctl:agent:east"), HOUR), Err(PkiError::CommonNameMismatch { .. })));

        let (csr, _) = generate_csr("x", &[MASTERS_GROUP]).unwrap();
        assert!(matches!(ca.sign_csr(csr.as_bytes(), None, HOUR), Err(PkiError::ForbiddenGroup(_))));

        let (csr, _) = generate_csr("", &[]).unwrap();
        assert!(matches!(ca.sign_csr(csr.as_bytes(), None, HOUR), Err(PkiError::MissingCommonName)));

        // Flip one bit of the signature.
        let (csr, _) = generate_csr("dave", &[]).unwrap();
        let mut der = CertificateSigningRequestDer::from_pem_slice(csr.as_bytes()).unwrap().to_vec();
        let last = der.len() - 1;
        der[last] ^= 0x01;
        assert!(matches!(ca.sign_csr(&der, None, HOUR), Err(PkiError::CsrSignature)));

        // Swap in another key's subject public key: signature no longer verifies either.
        let (csr, _) = generate_csr("dave", &[]).unwrap();
        let der = CertificateSigningRequestDer::from_pem_slice(csr.as_bytes()).unwrap().to_vec();
        let other = KeyPair::generate().unwrap();
        let (_, parsed) = X509CertificationRequest::from_der(&der).unwrap();
        let spki = parsed.certification_request_info.subject_pki.raw.to_vec();
        let mut tampered = der.clone();
        let at = der.windows(spki.len()).position(|w| w == spki.as_slice()).unwrap();
        tampered[at..at + spki.len()].copy_from_slice(other.subject_public_key_info().as_slice());
        assert!(matches!(ca.sign_csr(&tampered, None, HOUR), Err(PkiError::CsrSignature)));

        assert!(matches!(ca.sign_csr(b"garbage", None, HOUR), Err(PkiError::Parse { .. })));
    }

    #[test]
    fn server_pki_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create_server_pki(dir.path(), "0.0.0.0", &["fed.example".into()]).unwrap();
        let info = cert_info(&first.serving_cert_pem).unwrap();
        assert!(info.dns_names.contains(&"localhost".to_string()));
        assert!(info.dns_names.contains(&"fed.example".to_string()));
        assert!(info.ip_addresses.contains(&"127.0.0.1".parse().unwrap()));
        assert!(info.ip_addresses.contains(&"::1".parse().unwrap()));
        assert!(!info.ip_addresses.contains(&"0.0.0.0".parse().unwrap()));
        if let Some(h) = hostname() {
            assert!(info.dns_names.contains(&h));
        }
        let admin = cert_info(&first.admin_cert_pem).unwrap();
        assert_eq!(admin.common_name, "admin");
        assert_eq!(admin.organizations, ["system:masters"]);
        for key in ["server-ca.key", "serving-apiserver.key", "client-admin.key"] {
            let mode = fs::metadata(dir.path().join("tls").join(key)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }
        assert!(!format!("{first:?}").contains("PRIVATE KEY"));
        first.server_tls_config().unwrap();

        let second = load_or_create_server_pki(dir.path(), "0.0.0.0", &["fed.example".into()]).unwrap();
        assert_eq!(second.ca.hash(), first.ca.hash());
        assert_eq!(second.serving_cert_pem, first.serving_cert_pem);
        assert_eq!(second.admin_cert_pem, first.admin_cert_pem);

        // A new bind address re-issues the serving certificate only.
        let third = load_or_create_server_pki(dir.path(), "192.0.2.10", &[]).unwrap();
        assert_eq!(third.ca.hash(), first.ca.hash());
        assert_ne!(third.serving_cert_pem, first.serving_cert_pem);
        assert_eq!(third.admin_cert_pem, first.admin_cert_pem);
        assert!(cert_info(&third.serving_cert_pem).unwrap().ip_addresses.contains(&"192.0.2.10".parse().unwrap()));
        assert!(third.ca.signed(&third.serving_cert_pem));
    }

    #[test]
    fn peer_identity_needs_a_common_name() {
        assert_eq!(peer_identity(&[]), None);
        let ca = Ca::generate("c").unwrap();
        let (cert, _) = ca.issue_client("u", &["g"], HOUR).unwrap();
        let certs = parse_certs(&cert).unwrap();
        assert_eq!(peer_identity(&certs), Some(("u".into(), vec!["g".into()])));
    }
}
