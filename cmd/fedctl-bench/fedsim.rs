//! fedsim benchmark: memory and load time of a 200k-pod member, LIST of all pods, and watch fan-out under high churn.
//!
//! Starts a `fedsim` (sibling binary) with `nodes × pods_per_node` pods and measures:
//! - time from spawn until the kubeconfig is written (PKI + population loaded);
//! - RSS after load (`VmRSS` from `/proc/<pid>/status`), next to the raw JSON size of all
//!   pods (the bytes of one unfiltered LIST's items: compact JSON, as stored);
//! - one streamed LIST of every pod (time, bytes) and the RSS after it;
//! - with `--pin-cpu C`, fedsim is then re-pinned to CPU `C` (`taskset -a -p -c`), and `N`
//!   raw watchers follow all pods while churn runs at `--churn`: events produced (store
//!   revisions) and events delivered to all watchers per second, and fedsim's CPU use.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::Method;
use serde_json::Value;

use super::procs::{client_from_kubeconfig, rss_kib, sibling_binary, FedsimProcess};

/// Flags of `fedctl-bench fedsim`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Nodes of the simulated member.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    /// Pods per node.
    #[arg(long, default_value_t = 40)]
    pub pods_per_node: usize,
    /// Namespaces.
    #[arg(long, default_value_t = 200)]
    pub namespaces: usize,
    /// Watch history kept by fedsim (events).
    #[arg(long, default_value_t = 50_000)]
    pub watch_history: usize,
    /// Raw watchers in the fan-out phase.
    #[arg(long, default_value_t = 10)]
    pub watchers: usize,
    /// Churn rate asked for in the fan-out phase (events/s); fedsim does what it can.
    #[arg(long, default_value_t = 5000.0)]
    pub churn: f64,
    /// Seconds of the fan-out phase.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Pin fedsim to this CPU (with `taskset`) after loading; none = not pinned.
    #[arg(long)]
    pub pin_cpu: Option<usize>,
}

/// utime + stime of `pid` in seconds (from `/proc/<pid>/stat`, 100 ticks/s).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / 100.0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Runs the benchmark and prints its figures.
pub async fn run(a: Args) -> Result<(), String> {
    let pods = a.nodes * a.pods_per_node;
    println!(
        "fedctl-bench fedsim: nodes={} pods_per_node={} pods={} namespaces={} watch_history={} watchers={} churn={}/s seconds={} pin_cpu={:?}",
        a.nodes, a.pods_per_node, pods, a.namespaces, a.watch_history, a.watchers, a.churn, a.seconds, a.pin_cpu
    );
    let (n, p, ns, wh) = (a.nodes.to_string(), a.pods_per_node.to_string(), a.namespaces.to_string(), a.watch_history.to_string());
    let t0 = Instant::now();
    let sim = FedsimProcess::start(
        &sibling_binary("fedsim"),
        "bench-member",
        &["--nodes", &n, "--pods-per-node", &p, "--namespaces", &ns, "--namespace-skew", "1.1", "--seed", "7", "--churn", "0", "--watch-history", &wh],
        Duration::from_secs(900),
    )
    .map_err(|e| format!("start fedsim: {e}"))?;
    let load = t0.elapsed();
    let pid = sim.pid();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_loaded = rss_kib(pid).unwrap_or(0);
    println!("load: {:.1} s to serve {} pods + {} nodes (spawn → kubeconfig written, {} cores)", load.as_secs_f64(), pods, a.nodes, std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    println!("rss after load: {:.0} MiB ({:.0} bytes/pod)", mib(rss_loaded), rss_loaded as f64 * 1024.0 / pods as f64);

    // one LIST of every pod, streamed; its item bytes are the raw JSON size
    let (http, base) = client_from_kubeconfig(&sim.kubeconfig)?;
    let t = Instant::now();
    let resp = http.get(format!("{base}/api/v1/pods")).send().await.map_err(|e| e.to_string())?;
    let mut body = resp.bytes_stream();
    let mut bytes = 0u64;
    let mut head: Vec<u8> = Vec::new();
    while let Some(chunk) = body.next().await {
        let c = chunk.map_err(|e| e.to_string())?;
        if head.len() < 256 {
            head.extend_from_slice(&c[..c.len().min(256 - head.len())]);
        }
        bytes += c.len() as u64;
    }
    let list_time = t.elapsed();
    let rss_after_list = rss_kib(pid).unwrap_or(0);
    println!(
        "list all pods: {:.2} s, {:.0} MiB of JSON ({:.0} bytes/pod raw); rss after: {:.0} MiB",
        list_time.as_secs_f64(),
        bytes as f64 / 1048576.0,
        bytes as f64 / pods as f64,
        mib(rss_after_list)
    );
    println!("memory vs raw JSON: rss {:.0} MiB / raw {:.0} MiB = {:.2}", mib(rss_loaded), bytes as f64 / 1048576.0, rss_loaded as f64 * 1024.0 / bytes as f64);
    let _ = head;

    if let Some(cpu) = a.pin_cpu {
        let out = Command::new("taskset").args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()]).output();
        match out {
            Ok(o) if o.status.success() => println!("fedsim pinned to cpu {cpu} (taskset -a -p -c {cpu} {pid})"),
            _ => println!("taskset unavailable: fedsim not pinned"),
        }
        // keep the benchmark's own client work off that CPU when there is another one
        let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let others: Vec<String> = (0..ncpu).filter(|c| *c != cpu).map(|c| c.to_string()).collect();
        if !others.is_empty() {
            let me = std::process::id().to_string();
            if Command::new("taskset").args(["-a", "-p", "-c", &others.join(","), &me]).output().is_ok_and(|o| o.status.success()) {
                println!("benchmark client pinned to cpu {}", others.join(","));
            }
        }
    }

    // watch fan-out under churn
    let status: Value = sim.admin(Method::GET, "/fedsim/status").await?;
    let rv = status["revision"].as_i64().unwrap_or(0);
    let delivered = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..a.watchers {
        let http = http.clone();
        let url = format!("{base}/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=600");
        let delivered = delivered.clone();
        tasks.push(tokio::spawn(async move {
            let Ok(resp) = http.get(url).send().await else { return };
            let mut s = resp.bytes_stream();
            while let Some(Ok(c)) = s.next().await {
                delivered.fetch_add(c.iter().filter(|b| **b == b'\n').count() as u64, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rev0 = sim.admin(Method::GET, "/fedsim/status").await?["revision"].as_i64().unwrap_or(0);
    let d0 = delivered.load(Ordering::Relaxed);
    let cpu0 = cpu_seconds(pid).unwrap_or(0.0);
    let t = Instant::now();
    sim.admin(Method::POST, &format!("/fedsim/churn?rate={}", a.churn)).await?;
    tokio::time::sleep(Duration::from_secs(a.seconds)).await;
    sim.admin(Method::POST, "/fedsim/churn?rate=0").await?;
    let rev1 = sim.admin(Method::GET, "/fedsim/status").await?["revision"].as_i64().unwrap_or(0);
    let churn_time = t.elapsed();
    let cpu1 = cpu_seconds(pid).unwrap_or(0.0);
    // let the watchers drain what was produced (bounded)
    let want = (rev1 - rev0) as u64 * a.watchers as u64;
    let drain_start = Instant::now();
    while delivered.load(Ordering::Relaxed) - d0 < want && drain_start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drained = drain_start.elapsed();
    let got = delivered.load(Ordering::Relaxed) - d0;
    let total_time = churn_time + drained;
    let rss_after_churn = rss_kib(pid).unwrap_or(0);
    let produced = (rev1 - rev0) as f64;
    println!(
        "churn: {:.0} events/s produced (asked {}/s) over {:.1} s; fedsim cpu {:.2} cores",
        produced / churn_time.as_secs_f64(),
        a.churn,
        churn_time.as_secs_f64(),
        (cpu1 - cpu0) / churn_time.as_secs_f64()
    );
    println!(
        "watch fan-out: {} watchers, {} of {} events delivered ({:.1} %), {:.0} events/s delivered in total ({:.0}/s per watcher), drain after churn stop {:.1} s",
        a.watchers,
        got,
        want,
        if want > 0 { got as f64 * 100.0 / want as f64 } else { 100.0 },
        got as f64 / total_time.as_secs_f64(),
        got as f64 / total_time.as_secs_f64() / a.watchers.max(1) as f64,
        drained.as_secs_f64()
    );
    println!("rss after churn: {:.0} MiB", mib(rss_after_churn));
    for t in tasks {
        t.abort();
    }
    Ok(())
}
