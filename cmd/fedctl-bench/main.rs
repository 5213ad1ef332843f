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
    /// fedsim at scale: RSS and load time of 200k pods, LIST of all pods, watch fan-out under churn.
    Fedsim(fedctl::bench::fedsim::Args),
}

#[tokio::main]
async fn main() {
    fedctl::logging::init(fedctl::logging::LogFormat::Text);
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Server(a) => fedctl::bench::server::run(a).await,
        Cmd::Fedsim(a) => fedctl::bench::fedsim::run(a).await,
    };
    if let Err(e) = res {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
