//! `fedctl server`: the federation control plane — the Kubernetes-compatible API over etcd; the
//! top of the layering, it may use every module but `cli` and `fedsim`.

mod app;
pub mod audit;
pub mod authz;
pub mod bootstrap;
pub mod cluster;
pub mod console;
pub mod controller;
pub mod csr;
pub mod identity;
pub mod leader;
pub mod rbac;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::api::{ApiConfig, ApiServer, Caller, Ctx, Registry};
use crate::pki;
use crate::pki::auth::TokenAuthenticator;
use crate::pki::kubeconfig::{AuthInfo, Kubeconfig};
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
    Auth(#[from] crate::pki::auth::AuthError),
    /// The admin kubeconfig could not be written.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] crate::pki::kubeconfig::KubeconfigError),
    /// The global cache configuration is invalid.
    #[error("cache: {0}")]
    Cache(#[from] crate::cache::CacheError),
    /// The cache endpoints cannot be used.
    #[error("{0}")]
    CacheEndpoints(#[from] crate::search::remote::RemoteError),
    /// The listen address could not be bound.
    #[error("listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    /// The audit log could not be opened.
    #[error("{0}")]
    Audit(#[from] audit::AuditError),
    /// etcd already serves a federation whose CA (published in `kube-public/cluster-info`)
    /// is not this server's: replicas must share one PKI (copy the first server's
    /// `DATA_DIR/tls` before starting another replica).
    #[error("the federation in etcd has a different CA than {data_dir}/tls: copy the PKI of the first server to every replica")]
    ForeignCa { data_dir: PathBuf },
    /// The service account key or the `--oidc-*` flags are unusable.
    #[error("{0}")]
    Identity(#[from] identity::IdentityError),
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
    /// Extra static token file (kube-apiserver's `--token-auth-file` CSV), read at start.
    pub token_auth_file: Option<PathBuf>,
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
    /// The propagation controller (templates + policies → Works).
    pub propagation: crate::controllers::propagation::Config,
    /// The global view's cache (kinds, window).
    pub cache: crate::cache::CacheConfig,
    /// `https://host:port` of `fedctl cache` processes serving the cached kinds (together
    /// every shard); empty: the shards run in this process.
    pub cache_endpoints: Vec<String>,
    /// Leader election of the controllers (several replicas against one etcd).
    pub leader: LeaderConfig,
    /// Per-client bounds of the API (body size, watches per user, LIST page, slow watchers).
    pub limits: crate::api::Limits,
    /// Events the watch cache keeps per resource ([`crate::storage::cacher`]: every watch of a
    /// resource, or of one of its namespaces, shares one etcd watch, and LISTs with
    /// `resourceVersion=0` or `NotOlderThan` are answered from the cached state, which holds
    /// every object of each watched or so-listed resource); 0: no watch cache.
    pub watch_cache_events: usize,
    /// ServiceAccount token issuer, API audiences and OIDC ([`identity::Config`]).
    pub identity: identity::Config,
    /// The audit log (`--audit-log-*`, `--audit-level`; off without a path).
    pub audit: audit::AuditConfig,
    /// How often etcd's history is compacted, keeping at least this long of it (mirrors
    /// kube-apiserver's `--etcd-compaction-interval`, default 5 min; zero: never, as when
    /// etcd compacts itself). See [`crate::storage::compactor`].
    pub etcd_compaction_interval: Duration,
}

/// Leader election settings (mirrors kube-controller-manager's `--leader-elect-*` flags).
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// This replica's identity in the election; `None`: `<hostname>_<listen address>`,
    /// stable across restarts, so a restarted replica takes over its own stale lease at once.
    pub identity: Option<String>,
    /// Lease time to live (default 15 s): a crashed leader is replaced after at most this
    /// long. The leader renews every third of it and stops its controllers when no renewal
    /// succeeded for two thirds of it.
    pub lease_duration: Duration,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        LeaderConfig { identity: None, lease_duration: Duration::from_secs(15) }
    }
}

/// The etcd election name (key prefix) the controllers' leader is elected under.
pub const LEADER_ELECTION_NAME: &str = "/fedctl/leader/controllers";

impl Default for Config {
    fn default() -> Self {
        Config {
            etcd_servers: vec!["http://127.0.0.1:2379".into()],
            bind_address: "127.0.0.1".into(),
            secure_port: 6443,
            data_dir: PathBuf::from("/var/lib/fedctl/server"),
            tls_sans: vec![],
            token_auth_file: None,
            bookmark_interval: Duration::from_secs(60),
            advertise_url: None,
            agent_cert_lifetime: crate::pki::LEAF_VALIDITY,
            cluster_grace_period: Duration::from_secs(40),
            bootstrap_token_ttl: Some(Duration::from_secs(24 * 3600)),
            propagation: crate::controllers::propagation::Config::default(),
            cache: crate::cache::CacheConfig::default(),
            cache_endpoints: vec![],
            leader: LeaderConfig::default(),
            limits: crate::api::Limits::default(),
            watch_cache_events: 4096,
            identity: identity::Config::default(),
            audit: audit::AuditConfig::default(),
            etcd_compaction_interval: Duration::from_secs(300),
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
/// sync and campaigns for leadership (etcd election [`LEADER_ELECTION_NAME`]): while leader
/// it runs the CSR controller, the cluster-controller and the propagation controller (see
/// [`leader`]). Every replica serves the API.
///
/// When `shutdown` resolves it steps down first (controllers stopped, lease revoked, so
/// another replica takes over at once), then ends watches and closes connections (≤ 5 s).
/// Errors: at start (audit log, data dir, PKI, listen), or [`ServerError::ForeignCa`] once etcd is
/// found to serve a federation with another CA (the server stops).
pub async fn run(config: Config, shutdown: impl std::future::Future<Output = ()>) -> Result<(), ServerError> {
    // a bad audit log path stops the server before anything is written
    let auditor = audit::Auditor::start(&config.audit, config.limits.max_body_bytes)?;
    std::fs::create_dir_all(&config.data_dir).map_err(|e| ServerError::DataDir { path: config.data_dir.clone(), source: e })?;
    let pki = pki::load_or_create_server_pki(&config.data_dir, &config.bind_address, &config.tls_sans)?;
    let mut tokens = TokenAuthenticator::load_or_create(&config.data_dir)?;
    if let Some(path) = &config.token_auth_file {
        tokens.add_token_file(path)?;
    }
    let tokens = Arc::new(tokens);
    let authenticators = Arc::new(identity::Authenticators::new(&config.data_dir, &config.identity, tokens.clone())?);
    let addr = format!("{}:{}", config.bind_address, config.secure_port);
    let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|e| ServerError::Listen { addr: addr.clone(), source: e })?;
    let local: SocketAddr = listener.local_addr().map_err(|e| ServerError::Listen { addr: addr.clone(), source: e })?;
    let host = if local.ip().is_unspecified() { "127.0.0.1".to_string() } else { local.ip().to_string() };
    let host = if host.contains(':') { format!("[{host}]") } else { host };
    let url = format!("https://{host}:{}", local.port());

    let mut kc = Kubeconfig::single("fedctl", &url, pki.ca.cert_pem(), AuthInfo::client_cert(&pki.admin_cert_pem, &pki.admin_key_pem));
    kc.add_context("fedctl", "fedctl", "fedctl");
    let kc_path = config.data_dir.join("admin.kubeconfig");
    let base_kc = kc.clone();
    write_admin_kubeconfig(&base_kc, &url, &[], &kc_path)?;

    let store = crate::storage::lazy::LazyStorage::connect_etcd(config.etcd_servers.clone());
    let api_config = ApiConfig { bookmark_interval: config.bookmark_interval, server_address: format!("{host}:{}", local.port()), limits: config.limits.clone(), ..ApiConfig::default() };
    let rbac = rbac::Rbac::new();
    let hooks: Vec<Arc<dyn crate::api::AdmissionHook>> = vec![
        Arc::new(csr::CsrAdmission),
        Arc::new(cluster::ClusterAdmission),
        Arc::new(rbac::escalation::EscalationCheck { rbac: rbac.clone() }),
        Arc::new(identity::usertoken::UserTokenAdmission { rbac: rbac.clone() }),
    ];
    // the API (and the controllers over it) watch through the watch cache: one etcd watch per
    // resource, however many agents watch their exec namespaces
    let api_store: Arc<dyn Storage> = match config.watch_cache_events {
        0 => store.clone(),
        events => {
            // progress at least every second: a NotOlderThan list waits for the cache to see
            // its revision, which progress reports when the resource itself did not change
            let progress_interval = config.bookmark_interval.min(Duration::from_secs(1));
            let cc = crate::storage::cacher::CacherConfig { events, progress_interval, ..Default::default() };
            Arc::new(crate::storage::cacher::Cacher::new(store.clone(), cc))
        }
    };
    let api = ApiServer::with_admission(Registry::federation(), api_store.clone(), api_config, hooks);
    api.register_subresource("", "serviceaccounts", "token", Arc::new(identity::serviceaccount::TokenRequestHandler { tokens: authenticators.service_accounts.clone() }));
    let compactor_task = (!config.etcd_compaction_interval.is_zero()).then(|| tokio::spawn(crate::storage::compactor::run(store.clone(), config.etcd_compaction_interval)));
    let rbac_task = tokio::spawn(rbac.clone().run(api_store));
    let namespaces_task = tokio::spawn(api.clone().follow_namespaces());
    let crds_task = tokio::spawn(api.clone().follow_crds());
    let bootstrapped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let advertise = config.advertise_url.clone().unwrap_or_else(|| url.clone());
    let ca_pem = pki.ca.cert_pem().to_string();
    let remote =
        if config.cache_endpoints.is_empty() { None } else { Some(Arc::new(crate::search::remote::RemoteMux::new(config.cache_endpoints.clone(), &ca_pem, &pki.admin_cert_pem, &pki.admin_key_pem)?)) };
    let ca_hash = pki.ca.hash();
    let tls = pki.server_tls_config()?;
    let ca = Arc::new(pki.ca);
    let leading = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let identity = config.leader.identity.clone().unwrap_or_else(|| format!("{}_{local}", gethostname::gethostname().to_string_lossy()));
    let (stop_election, stop_rx) = tokio::sync::watch::channel(false);
    let (fatal_tx, fatal_rx) = tokio::sync::oneshot::channel::<ServerError>();
    let rbac_for_app = rbac.clone();
    let election_task = {
        let api = api.clone();
        let store = store.clone();
        let bootstrapped = bootstrapped.clone();
        let tokens = tokens.clone();
        let config = config.clone();
        let leading = leading.clone();
        tokio::spawn(async move {
            store.ready().await;
            bootstrap_namespaces(&api).await;
            // a replica with another CA must neither publish it nor lead (its CSR signer
            // would hand out certificates the members do not trust)
            let mut delay = Duration::from_millis(100);
            loop {
                match bootstrap::check_cluster_ca(&api, &ca_pem).await {
                    Ok(true) => break,
                    Ok(false) => {
                        tracing::error!("etcd already serves a federation with a different CA; replicas must share the first server's PKI");
                        let _ = fatal_tx.send(ServerError::ForeignCa { data_dir: config.data_dir.clone() });
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading cluster-info; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            }
            retry("publish cluster-info", || bootstrap::ensure_cluster_info(&api, &advertise, &ca_pem)).await;
            retry("default RBAC roles", || rbac::policy::ensure_defaults(&api)).await;
            retry("aggregated ClusterRoles", || rbac::aggregation::settle_from_store(&api)).await;
            // two first starts at once: the loser of the create race sees the winner's CA now
            if let Ok(false) = bootstrap::check_cluster_ca(&api, &ca_pem).await {
                tracing::error!("another server published a different CA at the same time; replicas must share the first server's PKI");
                let _ = fatal_tx.send(ServerError::ForeignCa { data_dir: config.data_dir.clone() });
                return;
            }
            match bootstrap::first_start_join_command(&api, &config.data_dir, &advertise, &ca_hash, config.bootstrap_token_ttl).await {
                Ok(Some(cmd)) => {
                    let ttl = match config.bootstrap_token_ttl {
                        Some(d) => format!("expires in {}", crate::config::duration::format_short(d)),
                        None => "never expires".into(),
                    };
                    let path = config.data_dir.join(bootstrap::JOIN_COMMAND_FILE);
                    // the command holds a secret: shown on a terminal, never written to a log
                    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                        println!("To join a member cluster, run on a machine that can reach it (the token {ttl}; `fedctl token create` makes more):");
                        println!("  {cmd}");
                        println!("(also written to {})", path.display());
                    } else {
                        println!("To join a member cluster, run the command in {} on a machine that can reach it (its token {ttl}; `fedctl token create` makes more)", path.display());
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "writing the join command"),
            }
            // every replica keeps its authenticator in sync; only the leader deletes
            bootstrap::spawn_token_sync(api.clone(), tokens, leading.clone());
            // ready once requests are authorized from the stored RBAC objects
            let mut gen = rbac.subscribe();
            let _ = gen.wait_for(|g| *g > 0).await;
            bootstrapped.store(true, std::sync::atomic::Ordering::Release);
            api.resume_namespace_finalization().await;
            let election = leader::Election { endpoints: config.etcd_servers.clone(), name: LEADER_ELECTION_NAME.into(), identity, ttl: config.leader.lease_duration };
            let controllers = Controllers { api, ca, identity: election.identity.clone(), config, leading, rbac };
            leader::run(election, || controllers.clone().lead(), stop_rx).await;
        })
    };
    tracing::info!(%url, kubeconfig = %kc_path.display(), "fedctl server listening");
    println!("fedctl server listening on {url}");
    println!("admin kubeconfig: {}", kc_path.display());
    // with cache endpoints, members are only tracked here (credentials for proxying)
    let mut cache_config = config.cache.clone();
    cache_config.ingest = remote.is_none();
    cache_config.propose_maps = remote.is_none();
    let cache = crate::cache::GlobalCache::new(&cache_config)?;
    let search = Arc::new(crate::search::SearchApi {
        cache: cache.clone(),
        version: api.config.version.clone(),
        server_address: api.config.server_address.clone(),
        bookmark_interval: config.bookmark_interval,
        remote,
        api: Some(api.clone()),
        authorizer: Arc::new(authz::ViewAuthz { api: api.clone(), rbac: rbac_for_app.clone() }),
    });
    {
        let api = api.clone();
        let cache = cache.clone();
        let cfg = cache_config.clone();
        let store = store.clone();
        let remote = search.remote.clone();
        tokio::spawn(async move {
            store.ready().await;
            if let Some(mux) = remote {
                // the cache processes hold the objects: balance from what they report
                tokio::spawn(mux.run_shard_map(store.clone() as Arc<dyn Storage>, cfg.shards, cfg.rebalance_interval));
            }
            cache.run(api, cfg).await;
        });
    }
    {
        // a context per member cluster, rewritten whenever the member set changes
        let cache = cache.clone();
        let (url, kc_path, base_kc) = (url.clone(), kc_path.clone(), base_kc.clone());
        let mut gen = cache.generation.subscribe();
        tokio::spawn(async move {
            while gen.changed().await.is_ok() {
                let names = cache.member_names();
                if let Err(e) = write_admin_kubeconfig(&base_kc, &url, &names, &kc_path) {
                    tracing::warn!(error = %e, "rewriting the admin kubeconfig");
                }
            }
        });
    }
    let app = Arc::new(FederationApp { api: api.clone(), tokens, store, bootstrapped, search, rbac: rbac_for_app, identity: authenticators, audit: auditor.clone() });
    let fatal = Arc::new(std::sync::Mutex::new(None));
    let fatal_slot = fatal.clone();
    let shutdown = async move {
        tokio::select! {
            _ = shutdown => {}
            Ok(e) = fatal_rx => *fatal_slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(e),
        }
        // step down first (controllers stop, the lease is revoked: another replica takes over
        // at once), then end watches so that connections can close gracefully
        stop_election.send_replace(true);
        let mut election_task = election_task;
        if tokio::time::timeout(Duration::from_secs(3), &mut election_task).await.is_err() {
            // etcd unreachable: the lease expires by itself
            tracing::warn!("stepping down took too long");
            election_task.abort();
        }
        api.shutdown();
        namespaces_task.abort();
        crds_task.abort();
        rbac_task.abort();
        if let Some(t) = &compactor_task {
            t.abort();
        }
    };
    crate::http::serve(listener, tls, app::router(app), shutdown, Duration::from_secs(5)).await;
    // the events of the requests the stop ended, then everything written out
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = tokio::task::spawn_blocking(move || auditor.flush(Duration::from_secs(2))).await;
    tracing::info!("fedctl server stopped");
    let failed = fatal.lock().unwrap_or_else(|e| e.into_inner()).take();
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The leader-only controllers: CSR approver/signer, cluster-controller and propagation
/// controller. Started when this replica becomes leader, aborted when it stops leading.
#[derive(Clone)]
struct Controllers {
    api: Arc<ApiServer>,
    ca: Arc<pki::Ca>,
    identity: String,
    config: Config,
    leading: Arc<std::sync::atomic::AtomicBool>,
    rbac: Arc<rbac::Rbac>,
}

/// Aborts the leader's tasks when its term ends (the term's future is dropped).
struct Term {
    group: crate::controllers::tasks::TaskGroup,
    leading: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Term {
    fn drop(&mut self) {
        self.leading.store(false, std::sync::atomic::Ordering::SeqCst);
        self.group.abort();
        crate::telemetry::metrics::server().leader.set(0);
        tracing::info!("stopped leading: controllers stopped");
    }
}

impl Controllers {
    /// One term as leader: starts every controller in a fresh task group and runs until the
    /// future is dropped (lease lost, shutdown), which aborts them all.
    async fn lead(self) {
        let _term = Term { group: crate::controllers::tasks::TaskGroup::new(), leading: self.leading.clone() };
        self.leading.store(true, std::sync::atomic::Ordering::SeqCst);
        crate::telemetry::metrics::server().leader.set(1);
        crate::telemetry::metrics::server().leader_terms.inc();
        _term.group.sync_scope(|| self.start());
        tracing::info!("leading: controllers started");
        futures::future::pending::<()>().await;
    }

    fn start(&self) {
        let api = &self.api;
        match csr::CsrController::new(api.clone(), self.ca.clone(), self.config.agent_cert_lifetime) {
            Some(c) => c.spawn(),
            None => tracing::error!("CSR controller: certificatesigningrequests not served"),
        }
        let cc = cluster::ClusterControllerConfig { grace_period: self.config.cluster_grace_period, ..Default::default() };
        match cluster::ClusterController::new(api.clone(), cc) {
            Ok(c) => c.spawn(),
            Err(e) => tracing::error!(error = %e, "cluster-controller"),
        }
        crate::controllers::tasks::spawn(rbac::aggregation::run(api.clone(), self.rbac.clone()));
        if let Err(e) = crate::controllers::propagation::start(api.clone(), self.config.propagation.clone()) {
            tracing::error!(error = %e, "propagation controller not started");
        }
        let (api, identity, ttl) = (api.clone(), self.identity.clone(), self.config.leader.lease_duration);
        crate::controllers::tasks::spawn(async move {
            let period = (ttl / 3).max(Duration::from_secs(1));
            loop {
                if let Err(e) = publish_leader_lease(&api, &identity, ttl).await {
                    tracing::debug!(error = %e, "updating the leader Lease");
                }
                tokio::time::sleep(period).await;
            }
        });
    }
}

/// Name of the Lease in `kube-system` that shows the controllers' leader.
pub const LEADER_LEASE_NAME: &str = "fedctl-controllers";

/// Writes the Lease `kube-system/fedctl-controllers` as client-go's leader election does
/// (`holderIdentity`, `leaseDurationSeconds`, `acquireTime`, `renewTime`, `leaseTransitions`),
/// so `kubectl -n kube-system get lease fedctl-controllers` shows the leader. Informational:
/// the etcd election decides who leads; only the leader writes it.
async fn publish_leader_lease(api: &Arc<ApiServer>, identity: &str, ttl: Duration) -> crate::api::ApiResult<()> {
    let info = api.registry.lookup("coordination.k8s.io", "v1", "leases").ok_or(crate::api::ApiError::NoSuchResource)?;
    let r = crate::api::request::ResourceRequest { info, namespace: Some("kube-system".into()), name: Some(LEADER_LEASE_NAME.into()), subresource: None, watch_path: false };
    let ctx = Ctx { caller: Caller { user: "system:fedctl:leader-election".into(), groups: vec![] }, dry_run: false, manager: "fedctl-leader-election".into(), apply: false };
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let spec = |acquire: &str, transitions: i64| json!({"holderIdentity": identity, "leaseDurationSeconds": ttl.as_secs(), "acquireTime": acquire, "renewTime": now, "leaseTransitions": transitions});
    match api.get(&r).await {
        Ok(_) => {
            api.guaranteed_update(&r, LEADER_LEASE_NAME, None, &ctx, |cur| {
                let held = cur.pointer("/spec/holderIdentity").and_then(serde_json::Value::as_str) == Some(identity);
                let transitions = cur.pointer("/spec/leaseTransitions").and_then(serde_json::Value::as_i64).unwrap_or(0);
                let mut n = cur.clone();
                n["spec"] = if held { spec(cur.pointer("/spec/acquireTime").and_then(serde_json::Value::as_str).unwrap_or(&now), transitions) } else { spec(&now, transitions + 1) };
                Ok(n)
            })
            .await?;
            Ok(())
        }
        Err(crate::api::ApiError::NotFound { .. }) => {
            let coll = crate::api::request::ResourceRequest { name: None, ..r };
            let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEADER_LEASE_NAME, "namespace": "kube-system"}, "spec": spec(&now, 0)});
            match api.create(&coll, lease, &ctx).await {
                Ok(_) | Err(crate::api::ApiError::AlreadyExists { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
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

/// Writes the admin kubeconfig: context `fedctl` (current; the federation API), `global`
/// (the global view) and `cluster-<name>` per member (that member through the view).
fn write_admin_kubeconfig(base: &Kubeconfig, url: &str, members: &[String], path: &std::path::Path) -> Result<(), ServerError> {
    let mut kc = base.clone();
    kc.add_server_context("global", &format!("{url}{}/global", crate::search::PREFIX), "fedctl")?;
    for m in members {
        kc.add_server_context(&format!("cluster-{m}"), &format!("{url}{}/clusters/{m}", crate::search::PREFIX), "fedctl")?;
    }
    kc.write(path)?;
    Ok(())
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
