//! `fedsim`: simulated Kubernetes member clusters over HTTPS, one or many per process (see `fedctl::fedsim`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "fedsim", version, about = "A kwok-like Kubernetes member-cluster simulator")]
struct Cli {
    /// Cluster name.
    #[arg(long, default_value = "member-1")]
    name: String,
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Number of nodes.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Pods per node in the initial population.
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// Number of namespaces (default and kube-system included).
    #[arg(long, default_value_t = 20)]
    namespaces: usize,
    /// Zipf exponent of pods per namespace (0 = uniform).
    #[arg(long, default_value_t = 1.1)]
    namespace_skew: f64,
    /// Churn events per second (pod creates, updates, deletes).
    #[arg(long, default_value_t = 0.0)]
    churn: f64,
    /// Seed of everything generated.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the admin kubeconfig here.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Zone label of the nodes.
    #[arg(long, default_value = "us-east-1a")]
    zone: String,
    /// Region label of the nodes.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Keep CA, admin token and token-signing key in this directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Changes kept for watch resumption, per member (default 50000; 10000 with --members
    /// or --config).
    #[arg(long)]
    watch_history: Option<usize>,
    /// Milliseconds a Job pod runs before it succeeds.
    #[arg(long, default_value_t = 2000)]
    job_duration_ms: u64,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 60)]
    bookmark_interval_seconds: u64,
    /// Serve generated nodes and pods virtually: rendered on read from (seed, index), only
    /// changes stored (always on with --members and --config).
    #[arg(long = "virtual")]
    virtual_objects: bool,
    /// Run this many members in one process, named <name-prefix>0001…, each with its own
    /// listener, CA, kubeconfig and kube-system uid.
    #[arg(long, conflicts_with = "config")]
    members: Option<usize>,
    /// Name prefix of the members of --members.
    #[arg(long, default_value = "m-")]
    name_prefix: String,
    /// Zones given to the members of --members in turn (member i gets zones[i % len]);
    /// default: --zone.
    #[arg(long, value_delimiter = ',')]
    zones: Vec<String>,
    /// Run the members listed in this YAML or JSON file (name, zone, region, nodes,
    /// podsPerNode, namespaces, skew, churn, seed; missing fields come from the flags).
    #[arg(long)]
    config: Option<PathBuf>,
    /// With --members or --config: write <name>.kubeconfig per member and, once all listen,
    /// members.json here.
    #[arg(long)]
    kubeconfig_dir: Option<PathBuf>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: fedctl::telemetry::logging::LogFormat,
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    fedctl::telemetry::logging::init(cli.log_format);
    let many = cli.members.is_some() || cli.config.is_some();
    let config = fedctl::fedsim::Config {
        name: cli.name,
        listen: cli.listen,
        nodes: cli.nodes,
        pods_per_node: cli.pods_per_node,
        namespaces: cli.namespaces,
        namespace_skew: cli.namespace_skew,
        churn: cli.churn,
        seed: cli.seed,
        kubeconfig_out: cli.kubeconfig_out,
        zone: cli.zone,
        region: cli.region,
        data_dir: cli.data_dir,
        watch_history: cli.watch_history.unwrap_or(if many { 10_000 } else { 50_000 }),
        job_duration: Duration::from_millis(cli.job_duration_ms),
        bookmark_interval: Duration::from_secs(cli.bookmark_interval_seconds.max(1)),
        virtual_objects: cli.virtual_objects,
    };
    if many {
        let Some(dir) = cli.kubeconfig_dir else {
            eprintln!("error: --members and --config need --kubeconfig-dir");
            std::process::exit(2);
        };
        // every member listens on its own port of the --listen host
        let mut template = config;
        let host = template.listen.rsplit_once(':').map_or(template.listen.as_str(), |(h, _)| h).to_string();
        template.listen = format!("{host}:0");
        let configs = match (&cli.config, cli.members) {
            (Some(path), _) => match fedctl::fedsim::members::from_file(path, &template) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(2);
                }
            },
            (None, n) => fedctl::fedsim::members::numbered(n.unwrap_or(0), &cli.name_prefix, &cli.zones, &template),
        };
        if let Err(e) = fedctl::fedsim::members::run(configs, &dir, fedctl::telemetry::logging::shutdown_signal()).await {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(e) = fedctl::fedsim::run(config, fedctl::telemetry::logging::shutdown_signal()).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
