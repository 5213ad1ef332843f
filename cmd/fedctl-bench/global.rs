//! Global view benchmark: `fedctl server` caching pods of several fedsim members — memory per
//! cached pod (server RSS growth / pods), LIST time of the whole view, watch events/s.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::Method;
use serde_json::Value;

use super::median_p99;
use super::procs::{client_from_kubeconfig, register_member, sibling_binary, wait_ready, EtcdProcess, FedsimProcess, ServerProcess};

const V: &str = "/apis/search.fedctl.io/v1alpha1";

/// Flags of `fedctl-bench global`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Member clusters (fedsim processes).
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Nodes per member.
    #[arg(long, default_value_t = 20)]
    pub nodes: usize,
    /// Pods per node.
    #[arg(long, default_value_t = 50)]
    pub pods_per_node: usize,
    /// Repetitions of the whole-view LIST (median and p99 reported).
    #[arg(long, default_value_t = 5)]
    pub list_repeats: usize,
    /// Concurrent global watchers in the watch phase.
    #[arg(long, default_value_t = 10)]
    pub watchers: usize,
    /// Churn per member during the watch phase (events/s asked of fedsim).
    #[arg(long, default_value_t = 200)]
    pub churn: u32,
    /// Length of the watch phase in seconds.
    #[arg(long, default_value_t = 10)]
    pub watch_seconds: u64,
    /// etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: String,
    /// In-process cache shards of the server (`fedctl server --cache-shards`).
    #[arg(long, default_value_t = 4)]
    pub cache_shards: usize,
}

async fn pod_count(http: &reqwest::Client, base: &str) -> Result<(usize, usize), String> {
    let v: Value = http.get(format!("{base}{V}/global/api/v1/pods")).send().await.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
    let items = v["items"].as_array().map(Vec::len).unwrap_or(0);
    let bytes = serde_json::to_vec(&v["items"]).map(|b| b.len()).unwrap_or(0);
    Ok((items, bytes))
}

/// Runs the benchmark and prints its figures.
pub async fn run(a: Args) -> Result<(), String> {
    let etcd = EtcdProcess::start(&a.etcd_bin).map_err(|e| format!("start etcd: {e}"))?;
    let server =
        ServerProcess::start(&sibling_binary("fedctl"), &etcd.endpoint, &["--cache-resources", "pods", "--cache-shards", &a.cache_shards.to_string()]).map_err(|e| format!("start fedctl: {e}"))?;
    let (http, base) = client_from_kubeconfig(&server.kubeconfig())?;
    wait_ready(&http, &base, Duration::from_millis(400 * 50)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss0 = server.rss_kib().unwrap_or(0);
    let fedsim = sibling_binary("fedsim");
    let mut members = Vec::new();
    for i in 0..a.members {
        let name = format!("member-{i}");
        let (n, p, s) = (a.nodes.to_string(), a.pods_per_node.to_string(), (i + 1).to_string());
        let m =
            FedsimProcess::start(&fedsim, &name, &["--nodes", &n, "--pods-per-node", &p, "--namespaces", "20", "--seed", &s], Duration::from_secs(120)).map_err(|e| format!("start fedsim: {e}"))?;
        members.push(m);
    }
    let mut want = 0usize;
    for m in &members {
        let st = m.admin(Method::GET, "/fedsim/status").await?;
        want += st["pods"].as_u64().unwrap_or(0) as usize;
    }
    println!("fedctl-bench global: members={} nodes/member={} pods/node={} pods={} watchers={} churn/member={}/s", a.members, a.nodes, a.pods_per_node, want, a.watchers, a.churn);
    let t_sync = Instant::now();
    for m in &members {
        register_member(&http, &base, m).await?;
    }
    loop {
        let (n, _) = pod_count(&http, &base).await?;
        if n >= want {
            break;
        }
        if t_sync.elapsed() > Duration::from_secs(300) {
            return Err(format!("view has {n} of {want} pods after 300 s"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sync = t_sync.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = server.rss_kib().unwrap_or(0);
    // LIST of the whole view
    let mut lat = Vec::new();
    let mut bytes = 0;
    for _ in 0..a.list_repeats.max(1) {
        let t = Instant::now();
        let r = http.get(format!("{base}{V}/global/api/v1/pods")).send().await.map_err(|e| e.to_string())?;
        bytes = r.bytes().await.map_err(|e| e.to_string())?.len();
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (list_med, list_p99) = median_p99(lat);
    // paged LIST (limit 500, every page from the first page's snapshot)
    let mut lat = Vec::new();
    let mut pages = 0;
    for _ in 0..a.list_repeats.max(1) {
        let t = Instant::now();
        let (mut cont, mut n) = (String::new(), 0);
        loop {
            let v: Value = http.get(format!("{base}{V}/global/api/v1/pods?limit=500&continue={cont}")).send().await.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
            n += 1;
            cont = v["metadata"]["continue"].as_str().unwrap_or("").to_string();
            if cont.is_empty() {
                break;
            }
        }
        pages = n;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (paged_med, paged_p99) = median_p99(lat);
    // watch fan-out under churn
    let rv: Value = http.get(format!("{base}{V}/global/api/v1/pods?limit=1")).send().await.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
    let rv = rv["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    let received = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..a.watchers {
        let (http, url, received) = (http.clone(), format!("{base}{V}/global/api/v1/pods?watch=1&resourceVersion={rv}"), received.clone());
        tasks.push(tokio::spawn(async move {
            let Ok(r) = http.get(url).send().await else { return };
            let mut s = r.bytes_stream();
            while let Some(Ok(chunk)) = s.next().await {
                received.fetch_add(chunk.iter().filter(|b| **b == b'\n').count(), Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut rev0 = 0u64;
    for m in &members {
        rev0 += m.admin(Method::GET, "/fedsim/status").await?["revision"].as_u64().unwrap_or(0);
        m.admin(Method::POST, &format!("/fedsim/churn?rate={}", a.churn)).await?;
    }
    let start_count = received.load(Ordering::Relaxed);
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(a.watch_seconds)).await;
    let mut rev1 = 0u64;
    for m in &members {
        m.admin(Method::POST, "/fedsim/churn?rate=0").await?;
        rev1 += m.admin(Method::GET, "/fedsim/status").await?["revision"].as_u64().unwrap_or(0);
    }
    let el = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let delivered = received.load(Ordering::Relaxed) - start_count;
    for t in tasks {
        t.abort();
    }
    let member_events = rev1.saturating_sub(rev0);
    let per_pod = (rss1.saturating_sub(rss0) as f64 * 1024.0) / want.max(1) as f64;
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| pods cached | {want} ({} members, {} cache shards) |", a.members, a.cache_shards);
    println!("| initial sync (register → all pods in the view) | {:.2} s |", sync.as_secs_f64());
    println!("| server RSS before members / after sync | {:.1} MiB / {:.1} MiB |", rss0 as f64 / 1024.0, rss1 as f64 / 1024.0);
    println!("| memory per cached pod (RSS growth / pods) | {:.0} B |", per_pod);
    println!("| LIST whole view (JSON, {:.1} MiB) median / p99 | {list_med:.1} ms / {list_p99:.1} ms |", bytes as f64 / 1048576.0);
    println!("| paged LIST whole view (limit 500, {pages} pages) median / p99 | {paged_med:.1} ms / {paged_p99:.1} ms |");
    println!("| member changes during watch phase (all kinds, incl. node/status) | {member_events} in {el:.1} s |");
    println!("| watch events delivered ({} watchers) | {delivered} total, {:.0}/s total, {:.0}/s per watcher |", a.watchers, delivered as f64 / el, delivered as f64 / el / a.watchers.max(1) as f64);
    drop(members);
    drop(server);
    drop(etcd);
    Ok(())
}
