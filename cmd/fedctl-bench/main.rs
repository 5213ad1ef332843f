//! `fedctl-bench`: benchmarks that put fedctl side by side with its anchors, in one run.

use clap::{Parser, Subcommand};

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "fedctl-bench", about = "fedctl benchmarks (figures go to BENCHMARKS.md)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// API server vs raw etcd: create, get, list, watch fan-out (starts its own etcd and server).
    Server(fedctl::bench::server::Args),
    /// Cache memory per pod (fedctl's store vs a kube-rs reflector Store vs raw JSON, each in
    /// its own child process), LIST of every pod streamed, paged LIST latency.
    Cache(fedctl::bench::cache::Args),
    /// Global view: memory per cached pod, whole-view LIST, watch events/s (starts etcd,
    /// a server and fedsim members).
    Global(fedctl::bench::global::Args),
    /// fedsim at scale: RSS and load time of 200k pods, LIST of all pods, watch fan-out under churn.
    Fedsim(fedctl::bench::fedsim::Args),
    /// Propagation: template apply → Works written latency and server CPU per 1,000
    /// templates over simulated members (starts its own etcd and server).
    Propagation(fedctl::bench::propagation::Args),
    /// Members joining: `fedctl join` → Cluster Ready time, and Work → member apply latency
    /// p50/p99 (starts its own etcd, server, fedsim members and agents).
    Join(fedctl::bench::join::Args),
    /// Load: concurrent clients mixing GET, LIST, WATCH and writes for a duration against a
    /// server whose global view holds the pods of fedsim members; throughput, p99 per verb,
    /// errors by code (starts its own etcd, server and fedsim members).
    Load(fedctl::bench::load::Args),
    /// Restart: a `fedctl cache` process holding the whole view of N pods (default 1M, over
    /// fedsim members) killed with SIGKILL and restarted; time until the view's LIST is
    /// consistent again, member LIST ingest, RSS, whole-view LIST throughput.
    Restart(fedctl::bench::restart::Args),
}

#[tokio::main]
async fn main() {
    fedctl::logging::init(fedctl::logging::LogFormat::Text);
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Server(a) => fedctl::bench::server::run(a).await,
        Cmd::Cache(a) => fedctl::bench::cache::run(a).await,
        Cmd::Global(a) => fedctl::bench::global::run(a).await,
        Cmd::Fedsim(a) => fedctl::bench::fedsim::run(a).await,
        Cmd::Propagation(a) => fedctl::bench::propagation::run(a).await.map_err(|e| e.to_string()),
        Cmd::Join(a) => fedctl::bench::join::run(a).await.map_err(|e| e.to_string()),
        Cmd::Load(a) => fedctl::bench::load::run(a).await,
        Cmd::Restart(a) => fedctl::bench::restart::run(a).await,
    };
    if let Err(e) = res {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
