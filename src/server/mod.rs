//! `fedctl server`: the federation control plane — the Kubernetes-compatible API over etcd.

mod app;
pub mod authz;
pub mod bootstrap;
pub mod cluster;
pub mod controller;
pub mod csr;
pub mod lazy;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::api::{ApiConfig, ApiServer, Caller, Ctx, Registry};
use crate::auth::TokenAuthenticator;
use crate::kubeconfig::{AuthInfo, Kubeconfig};
use crate::pki;
use crate::storage::Storage;

pub use app::FederationApp;

/// Errors that stop the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The data directory or a file in it could not be used.
    #[error("data dir {path}: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    /// Certificates could not be created or loaded.
    #[error("pki: {0}")]
    Pki(#[from] pki::PkiError),
    /// Tokens could not be created or loaded.
    #[error("auth: {0}")]
    Auth(#[from] crate::auth::AuthError),
    /// The admin kubeconfig could not be written.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] crate::kubeconfig::KubeconfigError),
    /// The listen address could not be bound.
    #[error("listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
}

/// Configuration of `fedctl server` (from flags; see `cmd/fedctl`).
#[derive(Clone, Debug)]
pub struct Config {
    /// etcd client URLs, e.g. `http://127.0.0.1:2379`.
    pub etcd_servers: Vec<String>,
    /// Address to listen on, e.g. `127.0.0.1`.
    pub bind_address: String,
    /// HTTPS port (0 picks a free one).
    pub secure_port: u16,
    /// Where certificates, tokens and the admin kubeconfig live.
    pub data_dir: PathBuf,
    /// Extra serving-certificate SANs.
    pub tls_sans: Vec<String>,
    /// Interval between watch bookmarks.
    pub bookmark_interval: Duration,
    /// URL members use to reach this server (published in cluster-info and the join
    /// command); `None`: the listen URL.
    pub advertise_url: Option<String>,
    /// Validity of the agent client certificates the CSR controller signs (default 1 year);
    /// a CSR's `spec.expirationSeconds` may shorten it.
    pub agent_cert_lifetime: Duration,
    /// A Cluster whose heartbeat Lease is older than this is marked not Ready (default 40 s).
    pub cluster_grace_period: Duration,
    /// Lifetime of the bootstrap token created at first start (default 24 h, as kubeadm's);
    /// `None` never expires.
    pub bootstrap_token_ttl: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            etcd_servers: vec!["http://127.0.0.1:2379".into()],
            bind_address: "127.0.0.1".into(),
            secure_port: 6443,
            data_dir: PathBuf::from("/var/lib/fedctl/server"),
            tls_sans: vec![],
            bookmark_interval: Duration::from_secs(60),
            advertise_url: None,
            agent_cert_lifetime: crate::pki::LEAF_VALIDITY,
            cluster_grace_period: Duration::from_secs(40),
            bootstrap_token_ttl: Some(Duration::from_secs(24 * 3600)),
        }
    }
}

/// Runs the server until `shutdown` resolves. Creates the PKI and admin kubeconfig on first
/// start (`DATA_DIR/admin.kubeconfig`), connects to etcd in the background (retrying; `/readyz`
/// fails until connected) and serves HTTPS.
///
/// Once etcd answers it creates the bootstrap namespaces, publishes `kube-public/cluster-info`,
/// and at first start creates a bootstrap token and prints the join command (also written to
/// `DATA_DIR/join-command`); `/readyz` succeeds after that. It then runs the bootstrap token
/// sync, the CSR controller and the cluster-controller.
pub async fn run(config: Config, shutdown: impl std::future::Future<Output = ()>) -> Result<(), ServerError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| ServerError::DataDir { path: config.data_dir.clone(), source: e })?;
    let pki = pki::load_or_create_server_pki(&config.data_dir, &config.bind_address, &config.tls_sans)?;
    let tokens = Arc::new(TokenAuthenticator::load_or_create(&config.data_dir)?);
    let addr = format!("{}:{}", config.bind_address, config.secure_port);
    let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|e| ServerError::Listen { addr: addr.clone(), source: e })?;
    let local: SocketAddr = listener.local_addr().map_err(|e| ServerError::Listen { addr: addr.clone(), source: e })?;
    let host = if local.ip().is_unspecified() { "127.0.0.1".to_string() } else { local.ip().to_string() };
    let host = if host.contains(':') { format!("[{host}]") } else { host };
    let url = format!("https://{host}:{}", local.port());

    let mut kc = Kubeconfig::single("fedctl", &url, pki.ca.cert_pem(), AuthInfo::client_cert(&pki.admin_cert_pem, &pki.admin_key_pem));
    kc.add_context("fedctl", "fedctl", "fedctl");
    let kc_path = config.data_dir.join("admin.kubeconfig");
    kc.write(&kc_path)?;

    let store = lazy::LazyStorage::connect_etcd(config.etcd_servers.clone());
    let api_config = ApiConfig {
        bookmark_interval: config.bookmark_interval,
        server_address: format!("{host}:{}", local.port()),
        ..ApiConfig::default()
    };
    let hooks: Vec<Arc<dyn crate::api::AdmissionHook>> = vec![Arc::new(csr::CsrAdmission), Arc::new(cluster::ClusterAdmission)];
    let api = ApiServer::with_admission(Registry::federation(), store.clone() as Arc<dyn Storage>, api_config, hooks);
    let bootstrapped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let advertise = config.advertise_url.clone().unwrap_or_else(|| url.clone());
    let ca_pem = pki.ca.cert_pem().to_string();
    let ca_hash = pki.ca.hash();
    let tls = pki.server_tls_config()?;
    let ca = Arc::new(pki.ca);
    {
        let api = api.clone();
        let store = store.clone();
        let bootstrapped = bootstrapped.clone();
        let tokens = tokens.clone();
        let config = config.clone();
        tokio::spawn(async move {
            store.ready().await;
            bootstrap_namespaces(&api).await;
            retry("publish cluster-info", || bootstrap::ensure_cluster_info(&api, &advertise, &ca_pem)).await;
            match bootstrap::first_start_join_command(&api, &config.data_dir, &advertise, &ca_hash, config.bootstrap_token_ttl).await {
                Ok(Some(cmd)) => {
                    let ttl = match config.bootstrap_token_ttl {
                        Some(d) => format!("expires in {}", crate::duration::format_short(d)),
                        None => "never expires".into(),
                    };
                    println!("To join a member cluster, run on a machine that can reach it (the token {ttl}; `fedctl token create` makes more):");
                    println!("  {cmd}");
                    println!("(also written to {})", config.data_dir.join(bootstrap::JOIN_COMMAND_FILE).display());
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "writing the join command"),
            }
            bootstrap::spawn_token_sync(api.clone(), tokens);
            match csr::CsrController::new(api.clone(), ca, config.agent_cert_lifetime) {
                Some(c) => c.spawn(),
                None => tracing::error!("CSR controller: certificatesigningrequests not served"),
            }
            let cc = cluster::ClusterControllerConfig { grace_period: config.cluster_grace_period, ..Default::default() };
            match cluster::ClusterController::new(api.clone(), cc) {
                Ok(c) => c.spawn(),
                Err(e) => tracing::error!(error = %e, "cluster-controller"),
            }
            bootstrapped.store(true, std::sync::atomic::Ordering::Release);
            api.resume_namespace_finalization().await;
        });
    }
    tracing::info!(%url, kubeconfig = %kc_path.display(), "fedctl server listening");
    println!("fedctl server listening on {url}");
    println!("admin kubeconfig: {}", kc_path.display());
    let app = Arc::new(FederationApp { api, tokens, store, bootstrapped });
    crate::http::serve(listener, tls, app, shutdown, Duration::from_secs(5)).await;
    tracing::info!("fedctl server stopped");
    Ok(())
}

/// Runs `f` until it succeeds, backing off (≤ 5 s) and logging failures as `what`.
async fn retry<F, Fut>(what: &str, f: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = crate::api::ApiResult<()>>,
{
    let mut delay = Duration::from_millis(100);
    while let Err(e) = f().await {
        tracing::warn!(error = %e, "{what}; retrying");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// Creates `default`, `kube-system` and `kube-public` if missing (as kube-apiserver's
/// bootstrap controller does), retrying until the store answers. `/readyz` fails until this
/// returns.
pub async fn bootstrap_namespaces(api: &Arc<ApiServer>) {
    let ctx = Ctx { caller: Caller { user: "system:apiserver".into(), groups: vec![] }, dry_run: false, manager: "fedctl".into(), apply: false };
    let Some(info) = api.registry.lookup("", "v1", "namespaces") else { return };
    for ns in ["default", "kube-system", "kube-public"] {
        let mut delay = Duration::from_millis(100);
        loop {
            // a read first: an existing namespace needs no write (etcd refuses every write
            // while its NOSPACE alarm is raised, even one that would fail its compare)
            let named = crate::api::request::ResourceRequest { info: info.clone(), namespace: None, name: Some(ns.into()), subresource: None, watch_path: false };
            if api.get(&named).await.is_ok() {
                break;
            }
            let r = crate::api::request::ResourceRequest { info: info.clone(), namespace: None, name: None, subresource: None, watch_path: false };
            match api.create(&r, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}), &ctx).await {
                Ok(_) | Err(crate::api::ApiError::AlreadyExists { .. }) => break,
                Err(e) => {
                    tracing::warn!(namespace = ns, error = %e, "bootstrap namespace; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}
