//! `fedctl`: one binary, four modes (server, agent, cache, join), k3s-style.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Default agent configuration directory (where `fedctl join` writes it).
const DEFAULT_AGENT_CONFIG: &str = "/var/lib/fedctl/agent";

#[derive(Parser)]
#[command(name = "fedctl", version, about = "Kubernetes multi-cluster federation control plane")]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: fedctl::logging::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the federation control plane (API server over etcd, controllers, cache).
    Server {
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
        /// Seconds between watch bookmarks.
        #[arg(long, default_value_t = 60)]
        bookmark_interval_seconds: u64,
    },
    /// Run the work-agent of one member cluster.
    Agent {
        /// Agent configuration directory (written by `fedctl join`); default
        /// `/var/lib/fedctl/agent`.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run cache shards as a separate process.
    Cache {
        /// Number of shards.
        #[arg(long, default_value_t = 1)]
        shards: usize,
    },
    /// Register a member cluster with a federation.
    Join {
        /// Member cluster name.
        name: String,
    },
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    fedctl::logging::init(cli.log_format);
    let result: Result<(), String> = match cli.cmd {
        Cmd::Server { etcd_servers, bind_address, secure_port, data_dir, tls_san, bookmark_interval_seconds } => {
            let config = fedctl::server::Config {
                etcd_servers,
                bind_address,
                secure_port,
                data_dir,
                tls_sans: tls_san,
                bookmark_interval: Duration::from_secs(bookmark_interval_seconds.max(1)),
            };
            fedctl::server::run(config, fedctl::logging::shutdown_signal()).await.map_err(|e| e.to_string())
        }
        Cmd::Agent { config } => {
            let dir = config.unwrap_or_else(|| PathBuf::from(DEFAULT_AGENT_CONFIG));
            fedctl::agent::run(&dir, fedctl::logging::shutdown_signal()).await.map_err(|e| e.to_string())
        }
        Cmd::Cache { .. } => Err("fedctl cache: not implemented yet".into()),
        Cmd::Join { .. } => Err("fedctl join: not implemented yet".into()),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
