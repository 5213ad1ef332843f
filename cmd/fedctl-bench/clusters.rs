//! Clusters benchmark: what the server spends on N agent-less Clusters, from their creation until the federation is quiet, and what a client waits for meanwhile.
//!
//! Starts its own etcd and `fedctl server` (a short cluster grace period, so the
//! cluster-controller's NotReady verdicts fall inside the run), creates N Clusters with no
//! agent (`spec.apiEndpoint` on a closed loopback port, no credential Secret) and waits until
//! the federation is quiet: every new Cluster carries the cluster-controller's verdict
//! (`Ready=False`, no heartbeat within the grace period) and the controllers' work queues
//! are empty (`workqueue_depth` 0 on `/metrics`), for `--quiet-for` seconds. (A list's
//! resourceVersion is etcd's revision, which the leader Lease moves every few seconds: it
//! cannot tell quiet.) Meanwhile a prober times, once per `--probe-interval`, a GET
//! of the console's `/ui/members.js` (a static asset: a pure measure of how loaded the
//! server is) and a `LIST clusters?limit=500` (what the console's members page reads first).
//! Reports the server's CPU time (user + system from `/proc/<pid>/stat`) and wall time per
//! phase (create, settle, and `--after` seconds of quiet), the prober's latencies per phase,
//! and the reconciles and work-queue adds per controller from `/metrics`, which attribute
//! the CPU.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use super::median_p99;
use super::procs::{client_from_kubeconfig, cpu_time, sibling_binary, wait_ready, EtcdProcess, ServerProcess};

/// Flags of `fedctl-bench clusters`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Clusters created (none has an agent).
    #[arg(long, default_value_t = 1000)]
    pub members: usize,
    /// Most create requests in flight.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// The server's `--cluster-grace-period` (the console test uses 10s).
    #[arg(long, default_value = "10s")]
    pub grace_period: String,
    /// The federation counts as quiet once it stayed settled (every Cluster NotReady, empty
    /// work queues) this many seconds.
    #[arg(long, default_value_t = 3)]
    pub quiet_for: u64,
    /// Longest wait for quiet, in seconds.
    #[arg(long, default_value_t = 400)]
    pub settle_timeout: u64,
    /// Seconds measured after quiet (the steady cost of N idle members).
    #[arg(long, default_value_t = 20)]
    pub after: u64,
    /// Milliseconds between two probes (one asset GET and one LIST each).
    #[arg(long, default_value_t = 1000)]
    pub probe_interval: u64,
    /// etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: String,
    /// The `fedctl` binary; default: the one beside `fedctl-bench`.
    #[arg(long)]
    pub fedctl_bin: Option<std::path::PathBuf>,
}

const PHASES: [&str; 4] = ["idle", "create", "settle", "quiet"];

/// Sampled latencies (ms) per phase: (asset GET, LIST of 500).
type Samples = Arc<Mutex<BTreeMap<usize, (Vec<f64>, Vec<f64>)>>>;

/// Counters of `/metrics` that attribute the server's work: reconciles per controller and
/// work-queue adds per queue (`series → value`).
async fn counters(http: &reqwest::Client, base: &str) -> BTreeMap<String, f64> {
    let Ok(r) = http.get(format!("{base}/metrics")).send().await else { return BTreeMap::new() };
    let text = r.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("fedctl_controller_reconciles") || l.starts_with("workqueue_adds") || l.starts_with("apiserver_request_total"))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            Some((series.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// How many Clusters carry `Ready=False` (read in pages of 500).
async fn not_ready(http: &reqwest::Client, url: &str) -> usize {
    let mut n = 0;
    let mut cont = String::new();
    loop {
        let Ok(r) = http.get(format!("{url}?limit=500&continue={cont}")).send().await else { return n };
        let Ok(v) = r.json::<Value>().await else { return n };
        let items = v["items"].as_array().cloned().unwrap_or_default();
        n += items.iter().filter(|c| c.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "False"))).count();
        match v["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => cont = c.to_string(),
            _ => return n,
        }
    }
}

/// Whether every work queue on `/metrics` is empty.
async fn queues_empty(http: &reqwest::Client, base: &str) -> bool {
    let Ok(r) = http.get(format!("{base}/metrics")).send().await else { return false };
    let text = r.text().await.unwrap_or_default();
    text.lines().filter(|l| l.starts_with("workqueue_depth")).all(|l| l.rsplit_once(' ').is_some_and(|(_, v)| v.trim() == "0"))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs the benchmark and prints its figures as Markdown tables.
pub async fn run(a: Args) -> Result<(), String> {
    let etcd = EtcdProcess::start(&a.etcd_bin).map_err(|e| format!("start etcd: {e}"))?;
    let bin = a.fedctl_bin.clone().unwrap_or_else(|| sibling_binary("fedctl"));
    let server = ServerProcess::start(&bin, &etcd.endpoint, &["--cluster-grace-period", &a.grace_period, "--bookmark-interval-seconds", "1"]).map_err(|e| format!("start fedctl server: {e}"))?;
    let (http, base) = client_from_kubeconfig(&server.kubeconfig())?;
    wait_ready(&http, &base, Duration::from_secs(60)).await?;
    let pid = server.pid();
    let cpu = || cpu_time(pid).unwrap_or_default();
    println!("fedctl-bench clusters: members={} concurrency={} grace_period={} server={} (pid {pid})", a.members, a.concurrency, a.grace_period, bin.display());
    // the server's own start (bootstrap, first lists) settles before anything is measured
    tokio::time::sleep(Duration::from_secs(3)).await;

    let phase = Arc::new(AtomicUsize::new(0));
    let samples: Samples = Arc::default();
    let prober = {
        let (http, base, phase, samples) = (http.clone(), base.clone(), phase.clone(), samples.clone());
        let every = Duration::from_millis(a.probe_interval.max(50));
        tokio::spawn(async move {
            loop {
                let p = phase.load(Ordering::SeqCst);
                let t = Instant::now();
                let asset = http.get(format!("{base}/ui/members.js")).send().await.map(|r| r.status().is_success());
                let asset_ms = ms(t.elapsed());
                let t = Instant::now();
                let list = match http.get(format!("{base}/apis/cluster.fedctl.io/v1alpha1/clusters?limit=500")).send().await {
                    Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
                    _ => false,
                };
                let list_ms = ms(t.elapsed());
                if matches!(asset, Ok(true)) && list {
                    let mut s = samples.lock().unwrap_or_else(|e| e.into_inner());
                    let e = s.entry(p).or_default();
                    e.0.push(asset_ms);
                    e.1.push(list_ms);
                }
                tokio::time::sleep(every).await;
            }
        })
    };

    let mut rows: Vec<(&str, Duration, Duration)> = Vec::new();
    let c0 = counters(&http, &base).await;
    let (t, c) = (Instant::now(), cpu());
    tokio::time::sleep(Duration::from_secs(5)).await;
    rows.push(("idle (before)", t.elapsed(), cpu().saturating_sub(c)));

    phase.store(1, Ordering::SeqCst);
    let (t, c) = (Instant::now(), cpu());
    let url = format!("{base}/apis/cluster.fedctl.io/v1alpha1/clusters");
    let failed = futures::stream::iter(0..a.members)
        .map(|i| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let body = json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": format!("sim-{i:04}"), "labels": {"env": if i % 3 == 0 { "prod" } else { "test" }}},
                    "spec": {"apiEndpoint": "https://127.0.0.1:1", "syncMode": "Pull", "zone": format!("zone-{}", 1 + i % 4)}});
                match http.post(&url).json(&body).send().await {
                    Ok(r) if r.status().as_u16() == 201 => 0,
                    _ => 1,
                }
            }
        })
        .buffer_unordered(a.concurrency.max(1))
        .fold(0usize, |n, f| async move { n + f })
        .await;
    if failed > 0 {
        return Err(format!("{failed} of {} Cluster creates failed", a.members));
    }
    rows.push(("create", t.elapsed(), cpu().saturating_sub(c)));

    phase.store(2, Ordering::SeqCst);
    let (t, c) = (Instant::now(), cpu());
    let mut quiet_since: Option<Instant> = None;
    let quiet_for = Duration::from_secs(a.quiet_for);
    let mut marked = 0;
    let mut timed_out = false;
    while quiet_since.is_none_or(|q| q.elapsed() < quiet_for) {
        if t.elapsed() > Duration::from_secs(a.settle_timeout) {
            // reported as such, with the figures so far
            println!("NOT QUIET within {} s: {marked} of {} Clusters NotReady", a.settle_timeout, a.members);
            timed_out = true;
            break;
        }
        // once every Cluster is marked it stays so: only the queues are read then
        if marked < a.members {
            marked = not_ready(&http, &url).await;
        }
        let settled = marked >= a.members && queues_empty(&http, &base).await;
        quiet_since = match (settled, quiet_since) {
            (false, _) => None,
            (true, None) => Some(Instant::now()),
            (true, q) => q,
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // the quiet stretch itself is not settling
    let t_settle = t.elapsed();
    let settle_wall = t_settle.saturating_sub(quiet_for);
    rows.push(("settle (until quiet, incl. the quiet stretch)", t.elapsed(), cpu().saturating_sub(c)));
    let c1 = counters(&http, &base).await;

    phase.store(3, Ordering::SeqCst);
    let (t, c) = (Instant::now(), cpu());
    tokio::time::sleep(Duration::from_secs(a.after)).await;
    rows.push(("quiet (after)", t.elapsed(), cpu().saturating_sub(c)));
    let c2 = counters(&http, &base).await;
    prober.abort();

    if timed_out {
        println!("\nfederation NOT quiet {:.1} s after the last create (the settle row ends there)\n", t_settle.as_secs_f64());
    } else {
        println!("\nfederation quiet {:.1} s after the last create (every Cluster NotReady, queues empty; the {} s it then stayed so not counted)\n", settle_wall.as_secs_f64(), a.quiet_for);
    }
    println!("| phase | wall s | server CPU s | cores |");
    println!("|---|---:|---:|---:|");
    for (name, wall, cpu) in &rows {
        println!("| {name} | {:.1} | {:.2} | {:.2} |", wall.as_secs_f64(), cpu.as_secs_f64(), cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9));
    }
    println!("\n| phase | probes | GET /ui/members.js median / p99 / max ms | LIST clusters?limit=500 median / p99 / max ms |");
    println!("|---|---:|---:|---:|");
    let s = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (p, (asset, list)) in &s {
        let mx = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let (am, ap) = median_p99(asset.clone());
        let (lm, lp) = median_p99(list.clone());
        println!("| {} | {} | {am:.0} / {ap:.0} / {:.0} | {lm:.0} / {lp:.0} / {:.0} |", PHASES[*p], asset.len(), mx(asset), mx(list));
    }
    let delta = |from: &BTreeMap<String, f64>, to: &BTreeMap<String, f64>| -> Vec<(String, f64)> {
        to.iter().map(|(k, v)| (k.clone(), v - from.get(k).copied().unwrap_or(0.0))).filter(|(_, d)| *d > 0.0).collect()
    };
    println!("\n| counter | create + settle | quiet ({} s) |", a.after);
    println!("|---|---:|---:|");
    let during = delta(&c0, &c1);
    let after: BTreeMap<String, f64> = delta(&c1, &c2).into_iter().collect();
    let mut keys: Vec<String> = during.iter().map(|(k, _)| k.clone()).chain(after.keys().cloned()).collect();
    keys.sort();
    keys.dedup();
    let during: BTreeMap<String, f64> = during.into_iter().collect();
    for k in keys {
        let (d, q) = (during.get(&k).copied().unwrap_or(0.0), after.get(&k).copied().unwrap_or(0.0));
        // request counts only where they are large: the rest is noise
        if k.starts_with("apiserver_request_total") && d + q < 50.0 {
            continue;
        }
        println!("| `{k}` | {d:.0} | {q:.0} |");
    }
    Ok(())
}
