//! `fedctl`: one binary, four modes (server, agent, cache, join) plus `unjoin` and `token`, k3s-style.

use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "fedctl", version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("FEDCTL_GIT_COMMIT"), ")"), about = "Kubernetes multi-cluster federation control plane")]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: fedctl::telemetry::logging::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the federation control plane (API server over etcd, controllers, cache).
    Server {
        /// YAML file of flags (keys = flag names, e.g. `etcd-servers: [http://127.0.0.1:2379]`);
        /// flags on the command line and `FEDCTL_*` variables win over it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// etcd client URLs, comma-separated.
        #[arg(long, default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
        etcd_servers: Vec<String>,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        bind_address: String,
        /// HTTPS port.
        #[arg(long, default_value_t = 6443)]
        secure_port: u16,
        /// Directory for certificates, tokens and the admin kubeconfig.
        #[arg(long, default_value = "/var/lib/fedctl/server")]
        data_dir: PathBuf,
        /// Extra SANs for the serving certificate, comma-separated.
        #[arg(long, value_delimiter = ',')]
        tls_san: Vec<String>,
        /// Extra static bearer tokens, in kube-apiserver's `--token-auth-file` CSV format
        /// (`token,user,uid[,"group1,group2"]`), read at start besides `DATA_DIR/tokens`.
        #[arg(long)]
        token_auth_file: Option<PathBuf>,
        /// Seconds between watch bookmarks.
        #[arg(long, default_value_t = 60)]
        bookmark_interval_seconds: u64,
        /// URL members reach this server at (cluster-info, join command); default: the listen URL.
        #[arg(long)]
        advertise_url: Option<String>,
        /// Validity of the agent client certificates the server signs.
        #[arg(long, default_value = "8760h", value_parser = fedctl::config::duration::parse)]
        agent_cert_lifetime: Duration,
        /// A member whose heartbeat is older than this is marked not Ready.
        #[arg(long, default_value = "40s", value_parser = fedctl::config::duration::parse)]
        cluster_grace_period: Duration,
        /// How often etcd's history is compacted, keeping at least this long of it (as
        /// kube-apiserver's flag); 0 never compacts.
        #[arg(long, default_value = "5m", value_parser = fedctl::config::duration::parse)]
        etcd_compaction_interval: Duration,
        /// Lifetime of the bootstrap token created at first start (0: never expires).
        #[arg(long, default_value = "24h", value_parser = fedctl::config::duration::parse)]
        bootstrap_token_ttl: Duration,
        /// Most member clusters whose workloads may be failed over per failover window.
        #[arg(long, default_value_t = 2)]
        failover_eviction_limit: usize,
        /// Length of the failover rate-limit window, in seconds.
        #[arg(long, default_value_t = 60)]
        failover_eviction_window_seconds: u64,
        /// Concurrent reconcile workers of the propagation controller.
        #[arg(long, default_value_t = 4)]
        propagation_workers: usize,
        /// Member kinds the global view caches (plural resource names), comma-separated.
        #[arg(long, default_value = fedctl::cache::DEFAULT_RESOURCES, value_delimiter = ',')]
        cache_resources: Vec<String>,
        /// Most events the global cache keeps per kind for watch resumption.
        #[arg(long, default_value_t = 102_400)]
        cache_max_events: usize,
        /// Seconds of events the global cache keeps (while under --cache-max-events).
        #[arg(long, default_value_t = 75)]
        cache_window_seconds: u64,
        /// In-process shards of the global cache (per kind; namespaces balanced over them).
        #[arg(long, default_value_t = 4)]
        cache_shards: usize,
        /// Seconds between shard map checks (re-read from etcd, rebalanced when skewed).
        #[arg(long, default_value_t = 10)]
        cache_rebalance_seconds: u64,
        /// `fedctl cache` processes serving the cached kinds (https://host:port, comma-separated;
        /// together they must hold every shard); default: shards in this process.
        #[arg(long, value_delimiter = ',')]
        cache_endpoints: Vec<String>,
        /// This replica's identity in the controllers' leader election (default: hostname and listen address).
        #[arg(long)]
        leader_elect_identity: Option<String>,
        /// Leader lease duration: a crashed leader's controllers move to another replica within it.
        #[arg(long, default_value = "15s", value_parser = fedctl::config::duration::parse)]
        leader_elect_lease_duration: Duration,
        /// Largest request body in bytes; larger → 413.
        #[arg(long, default_value_t = 3 * 1024 * 1024)]
        max_request_body_bytes: usize,
        /// Most open watches per user; one more → 429 (0: unbounded).
        #[arg(long, default_value_t = 1000)]
        max_watches_per_user: usize,
        /// Largest LIST page; a larger `limit` is lowered to it (0: unbounded).
        #[arg(long, default_value_t = 10_000)]
        max_list_limit: i64,
        /// Events buffered per watcher.
        #[arg(long, default_value_t = 256)]
        watch_buffer_events: usize,
        /// A watcher whose buffer stays full this long is dropped.
        #[arg(long, default_value = "2s", value_parser = fedctl::config::duration::parse)]
        watch_send_timeout: Duration,
        /// Events kept per resource by the watch cache, which serves every watch of a
        /// resource from one etcd watch and LISTs with resourceVersion=0 or NotOlderThan from
        /// memory (0: no watch cache, each watch its own etcd watch, every LIST from etcd).
        #[arg(long, default_value_t = 4096)]
        watch_cache_events: usize,
        /// Issuer (`iss`) of the ServiceAccount tokens the server issues and accepts.
        #[arg(long, default_value = fedctl::server::identity::serviceaccount::DEFAULT_ISSUER)]
        service_account_issuer: String,
        /// Audiences a token presented to the API must name one of, comma-separated (default: the issuer).
        #[arg(long, value_delimiter = ',')]
        api_audiences: Vec<String>,
        /// OpenID Connect issuer whose ID tokens authenticate (https; its tokens' `iss`).
        #[arg(long)]
        oidc_issuer_url: Option<String>,
        /// The audience OIDC tokens must name (required with --oidc-issuer-url).
        #[arg(long)]
        oidc_client_id: Option<String>,
        /// The OIDC issuer's keys: a JWKS file, or an https URL serving one (required with --oidc-issuer-url).
        #[arg(long)]
        oidc_jwks: Option<String>,
        /// PEM trust roots for an https --oidc-jwks.
        #[arg(long)]
        oidc_ca_file: Option<PathBuf>,
        /// The claim giving the user name.
        #[arg(long, default_value = "sub")]
        oidc_username_claim: String,
        /// Prefix of OIDC user names (default: `<issuer>#` unless the claim is `email`; `-`: none).
        #[arg(long)]
        oidc_username_prefix: Option<String>,
        /// The claim giving the groups (a string or a list of strings).
        #[arg(long)]
        oidc_groups_claim: Option<String>,
        /// Prefix of OIDC group names.
        #[arg(long, default_value = "")]
        oidc_groups_prefix: String,
        /// Accepted signing algorithms of OIDC tokens, comma-separated.
        #[arg(long, default_value = "RS256", value_delimiter = ',')]
        oidc_signing_algs: Vec<String>,
        /// A claim OIDC tokens must carry with this value, key=value; repeatable.
        #[arg(long, value_parser = fedctl::server::identity::oidc::parse_required_claim)]
        oidc_required_claim: Vec<(String, String)>,
        /// Audit log file: one audit.k8s.io/v1 Event per request as a JSON line (`-`: standard
        /// output); no audit log when unset.
        #[arg(long)]
        audit_log_path: Option<PathBuf>,
        /// What the audit log records: None, Metadata, or Request (also the bodies of writes,
        /// never those of Secrets, TokenRequests and TokenReviews).
        #[arg(long, default_value = "Metadata", value_parser = fedctl::server::audit::parse_level)]
        audit_level: fedctl::server::audit::Level,
        /// Megabytes an audit log file may reach before it is rotated (0: 100).
        #[arg(long, default_value_t = 0)]
        audit_log_maxsize: u64,
        /// Rotated audit log files to keep (0: all).
        #[arg(long, default_value_t = 0)]
        audit_log_maxbackup: usize,
        /// Audit events queued for the writer; beyond it events are dropped (and counted).
        #[arg(long, default_value_t = fedctl::server::audit::DEFAULT_BUFFER_SIZE)]
        audit_log_batch_buffer_size: usize,
    },
    /// Run the work-agent of one member cluster.
    Agent {
        /// YAML file of flags (keys = flag names, e.g. `metrics-bind-address: 127.0.0.1:9464`);
        /// flags on the command line and `FEDCTL_*` variables win over it.
        #[arg(long)]
        config_file: Option<PathBuf>,
        /// Agent configuration directory (written by `fedctl join`).
        #[arg(long, default_value = fedctl::cli::join::DEFAULT_CONFIG_DIR)]
        config: PathBuf,
        /// Serve Prometheus metrics over HTTPS at this address (e.g. 127.0.0.1:9464); off when empty.
        #[arg(long, default_value = "")]
        metrics_bind_address: String,
        /// PEM serving certificate of the metrics listener (default: self-signed at start-up).
        #[arg(long, requires = "metrics_key_file")]
        metrics_cert_file: Option<PathBuf>,
        /// PEM private key of --metrics-cert-file.
        #[arg(long, requires = "metrics_cert_file")]
        metrics_key_file: Option<PathBuf>,
    },
    /// Run global-view cache shards as a separate process (for `fedctl server --cache-endpoints`).
    Cache {
        /// YAML file of flags (keys = flag names, e.g. `etcd-servers: [http://127.0.0.1:2379]`);
        /// flags on the command line and `FEDCTL_*` variables win over it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The shards this process holds, comma-separated (e.g. 0,1); default with --zone: all.
        #[arg(long, value_delimiter = ',', required_unless_present = "zone")]
        shards: Vec<usize>,
        /// Cache only the members whose Cluster has this `spec.zone` (one process per zone).
        #[arg(long)]
        zone: Option<String>,
        /// Member LISTs run at once (each holds one member's state of one kind until stored).
        #[arg(long, default_value_t = 16)]
        list_concurrency: usize,
        /// Number of shards of the whole view (every cache process and the server agree).
        #[arg(long, default_value_t = 4)]
        shard_count: usize,
        /// host:port to serve HTTPS on.
        #[arg(long, default_value = "127.0.0.1:6444")]
        listen: String,
        /// etcd client URLs, comma-separated.
        #[arg(long, default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
        etcd_servers: Vec<String>,
        /// The server's data directory (or a copy of its tls/ part): the federation CA is read from it.
        #[arg(long, default_value = "/var/lib/fedctl/server")]
        data_dir: PathBuf,
        /// Extra SANs for the serving certificate, comma-separated.
        #[arg(long, value_delimiter = ',')]
        tls_san: Vec<String>,
        /// Seconds between watch bookmarks.
        #[arg(long, default_value_t = 60)]
        bookmark_interval_seconds: u64,
        /// Member kinds to cache (plural resource names), comma-separated; as the server's.
        #[arg(long, default_value = fedctl::cache::DEFAULT_RESOURCES, value_delimiter = ',')]
        cache_resources: Vec<String>,
        /// Most events kept per kind for watch resumption.
        #[arg(long, default_value_t = 102_400)]
        cache_max_events: usize,
        /// Seconds of events kept (while under --cache-max-events).
        #[arg(long, default_value_t = 75)]
        cache_window_seconds: u64,
        /// Seconds between shard map checks (re-read from etcd).
        #[arg(long, default_value_t = 10)]
        cache_rebalance_seconds: u64,
    },
    /// Register a member cluster with a federation (bootstrap token → agent certificate).
    Join {
        /// YAML file of flags (keys = flag names, e.g. `etcd-servers: [http://127.0.0.1:2379]`);
        /// flags on the command line and `FEDCTL_*` variables win over it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Member cluster name.
        name: String,
        /// Federation API URL, e.g. https://10.0.0.1:6443.
        #[arg(long)]
        server: String,
        /// Bootstrap token (from the server's join command or `fedctl token create`).
        #[arg(long, env = "FEDCTL_TOKEN", hide_env_values = true)]
        token: String,
        /// Expected sha256 hash of the federation CA's public key (sha256:<hex>); repeatable.
        #[arg(long, value_delimiter = ',', required = true)]
        ca_cert_hash: Vec<String>,
        /// The member cluster's kubeconfig (the agent uses it).
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Labels for the Cluster object: k=v,k2=v2.
        #[arg(long, value_parser = fedctl::cli::join::parse_labels)]
        labels: Option<std::collections::BTreeMap<String, String>>,
        /// Availability zone of the member.
        #[arg(long)]
        zone: Option<String>,
        /// Region of the member.
        #[arg(long)]
        region: Option<String>,
        /// Where to write the agent configuration.
        #[arg(long, default_value = fedctl::cli::join::DEFAULT_CONFIG_DIR)]
        config_dir: PathBuf,
        /// Also write a systemd unit running the agent to this path.
        #[arg(long)]
        systemd_unit: Option<PathBuf>,
        /// How long to wait for the certificate.
        #[arg(long, default_value = "60s", value_parser = fedctl::config::duration::parse)]
        timeout: Duration,
        /// Overwrite an existing agent configuration.
        #[arg(long)]
        force: bool,
    },
    /// Remove a member cluster from the federation (its Works, exec namespace and Cluster).
    Unjoin {
        /// Member cluster name.
        name: String,
        /// Also delete the workloads the federation placed on the member (done by its agent).
        #[arg(long)]
        delete_workloads: bool,
        /// Admin kubeconfig of the federation.
        #[arg(long, env = "KUBECONFIG", default_value = DEFAULT_ADMIN_KUBECONFIG)]
        kubeconfig: PathBuf,
        /// How long to wait for the teardown.
        #[arg(long, default_value = "2m", value_parser = fedctl::config::duration::parse)]
        timeout: Duration,
    },
    /// Manage bootstrap tokens for joining members and bearer tokens for people.
    Token {
        #[command(subcommand)]
        cmd: TokenCmd,
    },
}

const DEFAULT_ADMIN_KUBECONFIG: &str = "/var/lib/fedctl/server/admin.kubeconfig";

#[derive(Subcommand)]
enum TokenCmd {
    /// Create a bootstrap token and print it; with --user, a person's bearer token.
    Create {
        /// Lifetime of the token (0: never expires).
        #[arg(long, default_value = "24h", value_parser = fedctl::config::duration::parse)]
        ttl: Duration,
        /// Description stored with the token.
        #[arg(long)]
        description: Option<String>,
        /// Print the whole `fedctl join` command instead of the bare token.
        #[arg(long, conflicts_with = "user")]
        print_join_command: bool,
        /// Make a bearer token authenticating as this user (RBAC decides what it may do).
        #[arg(long)]
        user: Option<String>,
        /// Groups of the --user token, comma-separated.
        #[arg(long, value_delimiter = ',', requires = "user")]
        groups: Vec<String>,
        /// Write a kubeconfig using the --user token (server and CA from --kubeconfig) to this file.
        #[arg(long, requires = "user")]
        kubeconfig_out: Option<PathBuf>,
        /// Print only the --user token (for a web console's sign-in).
        #[arg(long, requires = "user")]
        ui: bool,
        /// Admin kubeconfig of the federation.
        #[arg(long, env = "KUBECONFIG", default_value = DEFAULT_ADMIN_KUBECONFIG)]
        kubeconfig: PathBuf,
    },
    /// Delete (revoke) a user or bootstrap token by its id.
    Delete {
        /// The token id (or the whole token).
        id: String,
        /// Admin kubeconfig of the federation.
        #[arg(long, env = "KUBECONFIG", default_value = DEFAULT_ADMIN_KUBECONFIG)]
        kubeconfig: PathBuf,
    },
    /// List bootstrap tokens.
    List {
        /// Admin kubeconfig of the federation.
        #[arg(long, env = "KUBECONFIG", default_value = DEFAULT_ADMIN_KUBECONFIG)]
        kubeconfig: PathBuf,
    },
}

/// Flags of every mode come, in this order of precedence, from the command line, from
/// `FEDCTL_<FLAG>` environment variables (`--etcd-servers` → `FEDCTL_ETCD_SERVERS`; flags that
/// name another variable, `--token` and `--kubeconfig`, keep it), from the mode's YAML config
/// file (`--config FILE`, for the agent `--config-file FILE`, whose `--config` is its
/// directory; or `FEDCTL_CONFIG` / `FEDCTL_CONFIG_FILE`), and from their defaults, as k3s
/// reads its flags.
fn parse_cli() -> Cli {
    let cmd = with_env(Cli::command());
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let mode = words.iter().skip(1).find(|w| ["server", "agent", "cache", "join"].contains(&w.as_str()));
    if let Some(mode) = mode {
        let flag = if mode == "agent" { "config-file" } else { "config" };
        let env = format!("FEDCTL_{}", flag.replace('-', "_").to_ascii_uppercase());
        let given = |key: &str| words.iter().any(|w| w == &format!("--{key}") || w.starts_with(&format!("--{key}=")));
        let value_of = |key: &str| {
            words.iter().enumerate().find_map(|(i, w)| match w.strip_prefix(&format!("--{key}=")) {
                Some(v) => Some(v.to_string()),
                None if w == &format!("--{key}") => words.get(i + 1).cloned(),
                None => None,
            })
        };
        if let Some(path) = value_of(flag).or_else(|| std::env::var(&env).ok()).filter(|p| !p.is_empty()) {
            let entries = fedctl::config::file::load(std::path::Path::new(&path)).unwrap_or_else(|e| {
                eprintln!("error: {e}");
                std::process::exit(2);
            });
            let set = |key: &str| given(key) || std::env::var_os(env_name(&key.replace('-', "_"))).is_some();
            args.extend(fedctl::config::file::to_args(&entries, set).into_iter().map(Into::into));
        }
    }
    let matches = cmd.get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// `FEDCTL_` and the flag's id upper-cased.
fn env_name(id: &str) -> String {
    format!("FEDCTL_{}", id.to_ascii_uppercase())
}

/// Gives every long flag of `cmd` and its subcommands its `FEDCTL_*` variable (see [`parse_cli`]).
fn with_env(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        if a.is_positional() || a.get_env().is_some() || a.get_long().is_none() || matches!(a.get_id().as_str(), "help" | "version") {
            return a;
        }
        let name: &'static str = Box::leak(env_name(a.get_id().as_str()).into_boxed_str());
        a.env(name)
    })
    .mut_subcommands(with_env)
}

#[tokio::main]
async fn main() {
    let cli = parse_cli();
    fedctl::telemetry::logging::init(cli.log_format);
    let result: Result<(), String> = match cli.cmd {
        Cmd::Server {
            config: _,
            etcd_servers,
            bind_address,
            secure_port,
            data_dir,
            tls_san,
            token_auth_file,
            bookmark_interval_seconds,
            advertise_url,
            agent_cert_lifetime,
            cluster_grace_period,
            etcd_compaction_interval,
            bootstrap_token_ttl,
            failover_eviction_limit,
            failover_eviction_window_seconds,
            propagation_workers,
            cache_resources,
            cache_max_events,
            cache_window_seconds,
            cache_shards,
            cache_rebalance_seconds,
            cache_endpoints,
            leader_elect_identity,
            leader_elect_lease_duration,
            max_request_body_bytes,
            max_watches_per_user,
            max_list_limit,
            watch_buffer_events,
            watch_send_timeout,
            watch_cache_events,
            service_account_issuer,
            api_audiences,
            oidc_issuer_url,
            oidc_client_id,
            oidc_jwks,
            oidc_ca_file,
            oidc_username_claim,
            oidc_username_prefix,
            oidc_groups_claim,
            oidc_groups_prefix,
            oidc_signing_algs,
            oidc_required_claim,
            audit_log_path,
            audit_level,
            audit_log_maxsize,
            audit_log_maxbackup,
            audit_log_batch_buffer_size,
        } => {
            let oidc = oidc_issuer_url.map(|issuer| fedctl::server::identity::oidc::OidcConfig {
                issuer_url: issuer,
                client_id: oidc_client_id.unwrap_or_default(),
                username_claim: oidc_username_claim,
                username_prefix: oidc_username_prefix,
                groups_claim: oidc_groups_claim,
                groups_prefix: oidc_groups_prefix,
                signing_algs: oidc_signing_algs,
                required_claims: oidc_required_claim,
                jwks: oidc_jwks.unwrap_or_default(),
                ca_file: oidc_ca_file,
            });
            let config = fedctl::server::Config {
                etcd_servers,
                bind_address,
                secure_port,
                data_dir,
                tls_sans: tls_san,
                token_auth_file,
                bookmark_interval: Duration::from_secs(bookmark_interval_seconds.max(1)),
                advertise_url,
                agent_cert_lifetime,
                cluster_grace_period,
                etcd_compaction_interval,
                bootstrap_token_ttl: (!bootstrap_token_ttl.is_zero()).then_some(bootstrap_token_ttl),
                propagation: fedctl::controllers::propagation::Config {
                    workers: propagation_workers.max(1),
                    failover_limit: failover_eviction_limit,
                    failover_window: Duration::from_secs(failover_eviction_window_seconds.max(1)),
                    ..Default::default()
                },
                cache: fedctl::cache::CacheConfig {
                    resources: cache_resources,
                    max_events: cache_max_events.max(1),
                    window: Duration::from_secs(cache_window_seconds),
                    shards: cache_shards.max(1),
                    rebalance_interval: Duration::from_secs(cache_rebalance_seconds.max(1)),
                    ..Default::default()
                },
                cache_endpoints,
                leader: fedctl::server::LeaderConfig { identity: leader_elect_identity, lease_duration: leader_elect_lease_duration.max(Duration::from_secs(3)) },
                limits: fedctl::api::Limits {
                    max_body_bytes: max_request_body_bytes.max(1),
                    max_watches_per_user,
                    max_list_limit: max_list_limit.max(0),
                    watch_buffer_events: watch_buffer_events.max(1),
                    watch_send_timeout,
                },
                watch_cache_events,
                identity: fedctl::server::identity::Config { service_account_issuer, api_audiences, oidc },
                audit: fedctl::server::audit::AuditConfig {
                    path: audit_log_path,
                    level: audit_level,
                    max_size_mb: audit_log_maxsize,
                    max_backups: audit_log_maxbackup,
                    buffer_size: audit_log_batch_buffer_size.max(1),
                },
            };
            fedctl::server::run(config, fedctl::telemetry::logging::shutdown_signal()).await.map_err(|e| e.to_string())
        }
        Cmd::Agent { config_file: _, config, metrics_bind_address, metrics_cert_file, metrics_key_file } => {
            let cert = match (metrics_cert_file, metrics_key_file) {
                (Some(cert), Some(key)) => fedctl::agent::metrics::MetricsCert::Files { cert, key },
                _ => fedctl::agent::metrics::MetricsCert::SelfSigned,
            };
            let metrics = fedctl::agent::MetricsOptions { bind_address: metrics_bind_address, cert };
            fedctl::agent::run(&config, Some(&metrics), fedctl::telemetry::logging::shutdown_signal()).await.map_err(|e| e.to_string())
        }
        Cmd::Cache {
            config: _,
            shards,
            zone,
            list_concurrency,
            shard_count,
            listen,
            etcd_servers,
            data_dir,
            tls_san,
            bookmark_interval_seconds,
            cache_resources,
            cache_max_events,
            cache_window_seconds,
            cache_rebalance_seconds,
        } => {
            let config = fedctl::search::process::Config {
                etcd_servers,
                data_dir,
                listen,
                tls_sans: tls_san,
                shards,
                bookmark_interval: Duration::from_secs(bookmark_interval_seconds.max(1)),
                cache: fedctl::cache::CacheConfig {
                    resources: cache_resources,
                    max_events: cache_max_events.max(1),
                    window: Duration::from_secs(cache_window_seconds),
                    shards: shard_count.max(1),
                    rebalance_interval: Duration::from_secs(cache_rebalance_seconds.max(1)),
                    zone,
                    list_concurrency,
                    ..Default::default()
                },
            };
            fedctl::search::process::run(config, fedctl::telemetry::logging::shutdown_signal()).await.map_err(|e| e.to_string())
        }
        Cmd::Join { config: _, name, server, token, ca_cert_hash, kubeconfig, labels, zone, region, config_dir, systemd_unit, timeout, force } => {
            let config = fedctl::cli::join::Config {
                cluster_name: name,
                server,
                token,
                ca_cert_hashes: ca_cert_hash,
                member_kubeconfig: kubeconfig,
                labels: labels.unwrap_or_default(),
                zone,
                region,
                config_dir,
                systemd_unit,
                timeout,
                force,
            };
            fedctl::cli::join::run(config).await.map(|_| ()).map_err(|e| e.to_string())
        }
        Cmd::Unjoin { name, delete_workloads, kubeconfig, timeout } => {
            let config = fedctl::cli::unjoin::Config { cluster_name: name, kubeconfig, delete_workloads, timeout };
            fedctl::cli::unjoin::run(config).await.map_err(|e| e.to_string())
        }
        Cmd::Token { cmd: TokenCmd::Create { ttl, description, user: Some(user), groups, kubeconfig_out, ui, kubeconfig, .. } } => {
            let config = fedctl::cli::token::UserTokenConfig { kubeconfig, user, groups, ttl: Some(ttl), description, kubeconfig_out, ui };
            fedctl::cli::token::create_user(&config).await.map(|out| println!("{out}")).map_err(|e| e.to_string())
        }
        Cmd::Token { cmd: TokenCmd::Delete { id, kubeconfig } } => fedctl::cli::token::delete(&kubeconfig, &id).await.map(|out| println!("{out}")).map_err(|e| e.to_string()),
        Cmd::Token { cmd: TokenCmd::Create { ttl, description, print_join_command, kubeconfig, .. } } => {
            let config = fedctl::cli::token::CreateConfig { kubeconfig, ttl: Some(ttl), description, print_join_command };
            fedctl::cli::token::create(&config).await.map(|out| println!("{out}")).map_err(|e| e.to_string())
        }
        Cmd::Token { cmd: TokenCmd::List { kubeconfig } } => {
            fedctl::cli::token::list_tokens(&kubeconfig).await.map(|tokens| print!("{}", fedctl::cli::token::format_table(&tokens, chrono::Utc::now()))).map_err(|e| e.to_string())
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
