//! A small HTTPS client for the federation API used by the CLIs (`join`, `unjoin`, `token`): JSON in, JSON or Status errors out.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::pki::kubeconfig::{Kubeconfig, KubeconfigError};
use crate::pki::PkiError;

/// Bound on one request (connect + answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of API calls.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig could not be read or lacks what is needed.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] KubeconfigError),
    /// The kubeconfig has no usable credentials or CA.
    #[error("kubeconfig {path}: {what}")]
    Incomplete {
        /// The kubeconfig.
        path: String,
        /// What is missing.
        what: &'static str,
    },
    /// TLS material could not be used.
    #[error("tls: {0}")]
    Pki(#[from] PkiError),
    /// The server could not be reached or the exchange failed.
    #[error("{method} {url}: {source}")]
    Http {
        /// Request method.
        method: String,
        /// Request URL.
        url: String,
        /// The transport error.
        source: reqwest::Error,
    },
    /// The server answered with an error Status.
    #[error("{method} {path}: the server answered {code} {reason}: {message}")]
    Status {
        /// Request method.
        method: String,
        /// Request path.
        path: String,
        /// HTTP code (e.g. 401, 403, 404, 409).
        code: u16,
        /// Status reason (`Unauthorized`, `Forbidden`, …).
        reason: String,
        /// Status message.
        message: String,
    },
    /// The answer was not the JSON expected.
    #[error("{path}: unexpected answer: {detail}")]
    Decode {
        /// Request path.
        path: String,
        /// What was wrong.
        detail: String,
    },
}

impl ClientError {
    /// The HTTP code of a Status error.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClientError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether this is a 404.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }
}

/// How a [`Client`] authenticates.
#[derive(Clone)]
pub enum Credentials {
    /// No credentials.
    None,
    /// A bearer token (secret).
    Bearer(String),
    /// A client certificate and key (PEM; the key is secret).
    ClientCert {
        /// Certificate PEM.
        cert_pem: String,
        /// Key PEM.
        key_pem: String,
    },
}

/// A client for one API server.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client for `server` (`https://host:port`) trusting only `ca_pem`.
    pub fn new(server: &str, ca_pem: &str, creds: Credentials) -> Result<Client, ClientError> {
        let cert = match &creds {
            Credentials::ClientCert { cert_pem, key_pem } => Some((cert_pem.as_str(), key_pem.as_str())),
            _ => None,
        };
        let tls = crate::pki::client_tls_config(ca_pem, cert)?;
        Ok(Self::with_tls(server, (*tls).clone(), creds))
    }

    /// A client for `server` that does NOT verify the server's certificate and sends no
    /// credentials. Only for fetching data the caller verifies by other means (join fetches
    /// cluster-info and pins its CA by hash, as kubeadm's token discovery).
    pub fn unverified(server: &str) -> Client {
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert))
            .with_no_client_auth();
        Self::with_tls(server, config, Credentials::None)
    }

    fn with_tls(server: &str, tls: rustls::ClientConfig, creds: Credentials) -> Client {
        let http = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .connect_timeout(Duration::from_secs(10))
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("fedctl/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("HTTP client builds");
        let token = match creds {
            Credentials::Bearer(t) => Some(t),
            _ => None,
        };
        Client { http, base: server.trim_end_matches('/').to_string(), token }
    }

    /// A client from a kubeconfig's current context (server, CA, client certificate or token).
    pub fn from_kubeconfig(path: &Path) -> Result<Client, ClientError> {
        let kc = Kubeconfig::load(path)?;
        let cluster = kc.current_cluster()?;
        let ca = cluster.ca_pem()?.ok_or_else(|| ClientError::Incomplete { path: path.display().to_string(), what: "no certificate-authority" })?;
        let user = kc.current_user()?;
        let creds = match (user.client_cert_pem()?, user.client_key_pem()?, user.resolved_token()?) {
            (Some(cert_pem), Some(key_pem), _) => Credentials::ClientCert { cert_pem, key_pem },
            (_, _, Some(t)) => Credentials::Bearer(t),
            _ => return Err(ClientError::Incomplete { path: path.display().to_string(), what: "no client certificate or token" }),
        };
        Client::new(&cluster.server, &ca, creds)
    }

    /// The server base URL.
    pub fn server(&self) -> &str {
        &self.base
    }

    /// A request to `url` asking for JSON, with the bearer token when there is one.
    fn builder(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let b = self.http.request(method, url).header("accept", "application/json");
        match &self.token {
            Some(t) => b.bearer_auth(t),
            None => b,
        }
    }

    /// Sends one request; a non-2xx answer becomes [`ClientError::Status`].
    pub async fn request(&self, method: reqwest::Method, path: &str, content_type: Option<&str>, body: Option<&Value>) -> Result<Value, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut b = self.builder(method.clone(), &url);
        if let Some(body) = body {
            b = b.header("content-type", content_type.unwrap_or("application/json")).body(serde_json::to_vec(body).expect("JSON serializes"));
        }
        let http_err = |source| ClientError::Http { method: method.to_string(), url: url.clone(), source };
        let resp = b.send().await.map_err(http_err)?;
        let code = resp.status().as_u16();
        let text = resp.text().await.map_err(http_err)?;
        if !(200..300).contains(&code) {
            return Err(status_error(method.as_str(), path, code, &text));
        }
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if json.is_null() {
            return Err(ClientError::Decode { path: path.to_string(), detail: "body is not JSON".into() });
        }
        Ok(json)
    }

    /// `GET path` of a watch (`?watch=1&…`, with a `timeoutSeconds` under
    /// [`REQUEST_TIMEOUT`]): calls `on_event(type, object)` for each event line until it
    /// returns `Some`, which is returned; `Ok(None)` when the server ended the stream first.
    /// A non-2xx answer becomes [`ClientError::Status`].
    pub async fn watch<T>(&self, path: &str, mut on_event: impl FnMut(&str, &Value) -> Option<T>) -> Result<Option<T>, ClientError> {
        let url = format!("{}{path}", self.base);
        let b = self.builder(reqwest::Method::GET, &url);
        let http_err = |source| ClientError::Http { method: "GET".into(), url: url.clone(), source };
        let mut resp = b.send().await.map_err(http_err)?;
        let code = resp.status().as_u16();
        if !(200..300).contains(&code) {
            let text = resp.text().await.map_err(http_err)?;
            return Err(status_error("GET", path, code, &text));
        }
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(http_err)? {
            buf.extend_from_slice(&chunk);
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let Ok(ev) = serde_json::from_slice::<Value>(&line) else { continue };
                if let Some(t) = on_event(ev.get("type").and_then(Value::as_str).unwrap_or(""), ev.get("object").unwrap_or(&Value::Null)) {
                    return Ok(Some(t));
                }
            }
        }
        Ok(None)
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.request(reqwest::Method::GET, path, None, None).await
    }

    /// `GET path`, `None` on 404.
    pub async fn get_opt(&self, path: &str) -> Result<Option<Value>, ClientError> {
        match self.get(path).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.request(reqwest::Method::POST, path, None, Some(body)).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.request(reqwest::Method::PUT, path, None, Some(body)).await
    }

    /// `PATCH path` with a JSON merge patch.
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> Result<Value, ClientError> {
        self.request(reqwest::Method::PATCH, path, Some("application/merge-patch+json"), Some(patch)).await
    }

    /// `DELETE path`; `Ok(None)` when it was already gone (404).
    pub async fn delete(&self, path: &str) -> Result<Option<Value>, ClientError> {
        match self.request(reqwest::Method::DELETE, path, None, None).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The [`ClientError::Status`] of a non-2xx answer: reason and message from its Status body,
/// else the body's text as the message.
fn status_error(method: &str, path: &str, code: u16, text: &str) -> ClientError {
    let json: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let reason = json.get("reason").and_then(Value::as_str).unwrap_or("").to_string();
    let message = json.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| text.trim().to_string());
    ClientError::Status { method: method.to_string(), path: path.to_string(), code, reason, message }
}

/// Accepts any server certificate (handshake signatures are still checked, so the peer holds
/// the key of the certificate it sent). See [`Client::unverified`].
#[derive(Debug)]
struct AcceptAnyServerCert;

impl rustls::client::danger::ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &rustls::crypto::ring::default_provider().signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &rustls::crypto::ring::default_provider().signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider().signature_verification_algorithms.supported_schemes()
    }
}
