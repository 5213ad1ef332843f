//! `fedctl-bench`: benchmarks that put fedctl side by side with its anchors, in one run; uses
//! the `fedctl` library and starts the `fedctl`, `fedsim` and `etcd` binaries.

mod agents;
mod authz;
mod cache;
mod clusters;
mod compare;
mod fedsim;
mod global;
mod join;
mod kinds;
mod load;
mod members;
mod procs;
mod propagation;
mod restart;
mod seed;
mod server;

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
    Server(server::Args),
    /// Cache memory per pod (fedctl's store vs a kube-rs reflector Store vs raw JSON, each in
    /// its own child process), LIST of every pod streamed, paged LIST latency.
    Cache(cache::Args),
    /// Memory per cached object of each kind the global view caches by default (one child
    /// process per kind, objects shaped as kube-apiserver serves them).
    Kinds(kinds::Args),
    /// Global view: memory per cached pod, whole-view LIST, watch events/s (starts etcd,
    /// a server and fedsim members).
    Global(global::Args),
    /// fedsim at scale: RSS and load time of 200k pods, LIST of all pods, watch fan-out under churn.
    Fedsim(fedsim::Args),
    /// Virtual members: RSS of one `fedsim --members N` process (default 200 × 50k pods) and
    /// a full paged LIST of one member's pods.
    Members(members::Args),
    /// Propagation: template apply → Works written latency and server CPU per 1,000
    /// templates over simulated members (starts its own etcd and server).
    Propagation(propagation::Args),
    /// Members joining: `fedctl join` → Cluster Ready time, and Work → member apply latency
    /// p50/p99 (starts its own etcd, server, fedsim members and agents).
    Join(join::Args),
    /// Clusters: N agent-less Clusters created; the server's CPU time and wall time until the
    /// federation is quiet, and the latency of a console asset and a LIST of 500 Clusters
    /// meanwhile and after (starts its own etcd and server).
    Clusters(clusters::Args),
    /// Load: concurrent clients mixing GET, LIST, WATCH and writes for a duration against a
    /// server whose global view holds the pods of fedsim members; throughput, p99 per verb,
    /// errors by code (starts its own etcd, server and fedsim members).
    Load(load::Args),
    /// Restart: a `fedctl cache` process holding the whole view of N pods (default 1M, over
    /// fedsim members) killed with SIGKILL and restarted; time until the view's LIST is
    /// consistent again, member LIST ingest, RSS, whole-view LIST throughput.
    Restart(restart::Args),
    /// Authorization cost per request: the fixed rules and RBAC over 1,000 RoleBindings for
    /// 10,000 users, and the global view's namespace grants (in process).
    Authz(authz::Args),
    /// Many agents in one process: the members of a `members.json` joined with `fedctl join`
    /// and their agents run on this process's runtime until Ctrl-C.
    Agents(agents::Args),
    /// The design's scale times `--scale`: members, zone caches, LISTs through the MUX, watch
    /// ingest, registration, heartbeats and Works, in one table (starts everything it needs).
    Seed(seed::Args),
    /// Compare: one benchmark run alternately with a baseline build's binaries and with this
    /// build's (`--baseline DIR --rounds N -- <bench> <args>`); medians side by side.
    Compare(compare::Args),
}

#[tokio::main]
async fn main() {
    fedctl::telemetry::logging::init(fedctl::telemetry::logging::LogFormat::Text);
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Server(a) => server::run(a).await,
        Cmd::Cache(a) => cache::run(a).await,
        Cmd::Kinds(a) => kinds::run(a).await,
        Cmd::Global(a) => global::run(a).await,
        Cmd::Fedsim(a) => fedsim::run(a).await,
        Cmd::Members(a) => members::run(a).await,
        Cmd::Propagation(a) => propagation::run(a).await.map_err(|e| e.to_string()),
        Cmd::Join(a) => join::run(a).await.map_err(|e| e.to_string()),
        Cmd::Load(a) => load::run(a).await,
        Cmd::Clusters(a) => clusters::run(a).await,
        Cmd::Restart(a) => restart::run(a).await,
        Cmd::Compare(a) => compare::run(a).await,
        Cmd::Authz(a) => authz::run(a).await,
        Cmd::Agents(a) => agents::run(a).await,
        Cmd::Seed(a) => seed::run(a).await,
    };
    if let Err(e) = res {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Median and p99 of a sample, in the sample's unit; `(0, 0)` when empty.
pub fn median_p99(mut v: Vec<f64>) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

/// A watch read on a thread and runtime of its own ([`watch_on_own_thread`]); ends when dropped.
pub struct WatchThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WatchThread {
    /// Whether its watch ended (the server closed it, or it failed).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl Drop for WatchThread {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Opens `url` (a watch) with a client of its own made from `kubeconfig` and reads it with
/// [`read_watch_events`] on a thread with its own runtime, so that event arrival times are not
/// held back by this process's other tasks (the in-process agents fill its runtime when a
/// burst of Works arrives, and a reader among them records the burst late). Returns once the
/// watch is open. Errors: the client could not be made, the request failed or was refused.
pub async fn watch_on_own_thread(kubeconfig: std::path::PathBuf, url: String, on_event: impl FnMut(&serde_json::Value, std::time::Instant) -> bool + Send + 'static) -> Result<WatchThread, String> {
    let (opened_tx, opened) = tokio::sync::oneshot::channel::<Result<(), String>>();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("bench-watch".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return drop(opened_tx.send(Err(e.to_string()))),
            };
            rt.block_on(async move {
                let resp = async {
                    let (http, _) = procs::client_from_kubeconfig(&kubeconfig)?;
                    match http.get(&url).send().await {
                        Ok(r) if r.status().is_success() => Ok(r),
                        Ok(r) => Err(format!("watch {url}: {}", r.status())),
                        Err(e) => Err(e.to_string()),
                    }
                };
                match resp.await {
                    Ok(r) => {
                        let _ = opened_tx.send(Ok(()));
                        tokio::select! {
                            _ = read_watch_events(r, on_event) => {}
                            _ = stopped => {}
                        }
                    }
                    Err(e) => drop(opened_tx.send(Err(e))),
                }
            })
        })
        .map_err(|e| e.to_string())?;
    let w = WatchThread { stop: Some(stop), thread: Some(thread) };
    match opened.await {
        Ok(Ok(())) => Ok(w),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("the watch thread ended".into()),
    }
}

/// Reads a watch response line by line: calls `on_event(event, arrival)` for each JSON event
/// (lines that do not parse are skipped) until it returns `true` or the stream ends. `arrival`
/// is when the chunk holding the event was received.
pub async fn read_watch_events(resp: reqwest::Response, mut on_event: impl FnMut(&serde_json::Value, std::time::Instant) -> bool) {
    use futures::StreamExt;
    let mut s = resp.bytes_stream();
    let mut buf = Vec::new();
    while let Some(Ok(chunk)) = s.next().await {
        let at = std::time::Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let Ok(ev) = serde_json::from_slice::<serde_json::Value>(&line) else { continue };
            if on_event(&ev, at) {
                return;
            }
        }
    }
}
