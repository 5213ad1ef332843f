//! Propagation benchmark: template apply → Works written latency and the server's CPU time per 1,000 templates.
//!
//! Starts its own etcd and `fedctl server`, registers simulated members (Ready Clusters with
//! exec namespaces), creates one PropagationPolicy (Divided, equal static weights) and then
//! N Deployments at a fixed rate. A client-side watch on Works records when each template's
//! last Work appears; latency = that moment − the moment its create request was sent. The
//! server's CPU time (user + system from `/proc/<pid>/stat`) is read before and after,
//! for the propagated run and for a baseline run of as many Deployments no policy selects
//! (API serving + a no-op reconcile), so the difference is the cost of propagating.
//! Anchor: Karmada's published pull-mode distribution p99 ≈ 989 ms.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use super::median_p99;
use super::procs::{client_from_kubeconfig, cpu_time, sibling_binary, EtcdProcess, ServerProcess};

/// Flags of `fedctl-bench propagation`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Deployments propagated (and created again, unselected, for the baseline).
    #[arg(long, default_value_t = 1000)]
    pub templates: usize,
    /// Simulated member clusters.
    #[arg(long, default_value_t = 3)]
    pub clusters: usize,
    /// Template creations per second (open loop).
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Most create requests in flight.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Replicas of each Deployment (divided over the clusters).
    #[arg(long, default_value_t = 3)]
    pub replicas: i64,
    /// etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: String,
}

/// Errors of the benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A child process could not be started.
    #[error("start {what}: {source}")]
    Start { what: &'static str, source: std::io::Error },
    /// A request failed or was refused.
    #[error("{0}")]
    Request(String),
    /// Not every template was propagated in time.
    #[error("timed out: {done} of {want} templates propagated")]
    Timeout { done: usize, want: usize },
}

fn req(e: impl std::fmt::Display) -> BenchError {
    BenchError::Request(e.to_string())
}

struct Track {
    sent: HashMap<String, Instant>,
    works: HashMap<String, usize>,
    done: HashMap<String, Instant>,
}

async fn post(http: &reqwest::Client, url: String, body: &Value) -> Result<Value, BenchError> {
    let r = http.post(url).json(body).send().await.map_err(req)?;
    let code = r.status().as_u16();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    if code >= 300 && code != 409 {
        return Err(BenchError::Request(format!("POST: {code} {v}")));
    }
    Ok(v)
}

/// Creates `n` Deployments named `web-NNNNNN` in `ns` at `rate`/s, calling `sent` just
/// before each request leaves.
async fn create_all(http: &reqwest::Client, base: &str, ns: &str, a: &Args, sent: impl Fn(&str) + Send + Sync + 'static) -> Result<Duration, BenchError> {
    let tpl = {
        let mut t = super::server::template();
        t["spec"]["replicas"] = json!(a.replicas);
        t
    };
    let sem = Arc::new(tokio::sync::Semaphore::new(a.concurrency.max(1)));
    let sent = Arc::new(sent);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..a.templates {
        let at = t0 + Duration::from_secs_f64(i as f64 / a.rate.max(0.001));
        tokio::time::sleep_until(at.into()).await;
        let permit = sem.clone().acquire_owned().await.map_err(req)?;
        let (http, url, sent) = (http.clone(), format!("{base}/apis/apps/v1/namespaces/{ns}/deployments"), sent.clone());
        let mut obj = tpl.clone();
        let name = format!("web-{i:06}");
        obj["metadata"]["name"] = json!(name);
        tasks.push(tokio::spawn(async move {
            sent(&name);
            let r = post(&http, url, &obj).await;
            drop(permit);
            r
        }));
    }
    for t in tasks {
        t.await.map_err(req)??;
    }
    Ok(t0.elapsed())
}

/// Waits until the server's CPU time stops growing (two 500 ms samples within 20 ms).
async fn quiesce(pid: u32) -> Option<Duration> {
    let mut last = cpu_time(pid)?;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = cpu_time(pid)?;
        if now.saturating_sub(last) <= Duration::from_millis(20) {
            return Some(now);
        }
        last = now;
    }
    cpu_time(pid)
}

/// Runs the benchmark and prints its figures as a Markdown table.
pub async fn run(a: Args) -> Result<(), BenchError> {
    let etcd = EtcdProcess::start(&a.etcd_bin).map_err(|e| BenchError::Start { what: "etcd", source: e })?;
    let server = ServerProcess::start(&sibling_binary("fedctl"), &etcd.endpoint, &[]).map_err(|e| BenchError::Start { what: "fedctl server", source: e })?;
    let (http, base) = client_from_kubeconfig(&server.kubeconfig()).map_err(BenchError::Request)?;
    for _ in 0..400 {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = server.pid();
    let members: Vec<String> = (0..a.clusters).map(|i| format!("member-{i}")).collect();
    for ns in ["bench", "baseline"].iter().map(|s| s.to_string()).chain(members.iter().map(|m| format!("fed-exec-{m}"))) {
        post(&http, format!("{base}/api/v1/namespaces"), &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await?;
    }
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    for m in &members {
        let mut c = post(&http, format!("{base}/apis/cluster.fedctl.io/v1alpha1/clusters"), &json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": m}, "spec": {"syncMode": "Pull", "zone": "zone-1"}}))
        .await?;
        c["status"] = json!({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now, "lastHeartbeatTime": now}],
            "resourceSummary": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1100"}, "allocated": {"cpu": "8", "memory": "32Gi", "pods": "100"}}});
        let r = http.put(format!("{base}/apis/cluster.fedctl.io/v1alpha1/clusters/{m}/status")).json(&c).send().await.map_err(req)?;
        if !r.status().is_success() {
            return Err(BenchError::Request(format!("cluster status: {}", r.status())));
        }
    }
    let weights: Vec<Value> = members.iter().map(|m| json!({"cluster": m, "weight": 1})).collect();
    post(&http, format!("{base}/apis/policy.fedctl.io/v1alpha1/namespaces/bench/propagationpolicies"), &json!({
        "apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "all", "namespace": "bench"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "placement": {"replicaScheduling": {"type": "Divided", "weights": weights}}}})).await?;
    println!(
        "fedctl-bench propagation: templates={} clusters={} rate={}/s concurrency={} replicas={} object_bytes={}",
        a.templates,
        a.clusters,
        a.rate,
        a.concurrency,
        a.replicas,
        serde_json::to_vec(&super::server::template()).map(|v| v.len()).unwrap_or(0)
    );

    // baseline: the same creates, selected by no policy
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu0 = quiesce(pid).await.unwrap_or_default();
    let base_elapsed = create_all(&http, &base, "baseline", &a, |_| {}).await?;
    let cpu1 = quiesce(pid).await.unwrap_or_default();

    // the watch that observes Works being written
    let rv = {
        let v: Value = http.get(format!("{base}/apis/work.fedctl.io/v1alpha1/works?limit=1")).send().await.map_err(req)?.json().await.map_err(req)?;
        v["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string()
    };
    let track = Arc::new(Mutex::new(Track { sent: HashMap::new(), works: HashMap::new(), done: HashMap::new() }));
    let resp = http
        .get(format!("{base}/apis/work.fedctl.io/v1alpha1/works?watch=1&resourceVersion={rv}&timeoutSeconds=600"))
        .send()
        .await
        .map_err(req)?;
    let clusters = a.clusters;
    let want = a.templates;
    let tw = track.clone();
    let watcher = tokio::spawn(async move {
        let mut s = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(Ok(chunk)) = s.next().await {
            let at = Instant::now();
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let Ok(ev) = serde_json::from_slice::<Value>(&line) else { continue };
                if ev["type"] != "ADDED" {
                    continue;
                }
                let Some(name) = ev["object"]["metadata"]["labels"]["propagation.fedctl.io/name"].as_str() else { continue };
                let mut t = tw.lock().unwrap_or_else(|e| e.into_inner());
                let n = t.works.entry(name.to_string()).or_insert(0);
                *n += 1;
                if *n == clusters {
                    t.done.insert(name.to_string(), at);
                }
                if t.done.len() >= want {
                    return;
                }
            }
        }
    });

    let cpu2 = quiesce(pid).await.unwrap_or_default();
    let ts = track.clone();
    let t_start = Instant::now();
    let prop_elapsed = create_all(&http, &base, "bench", &a, move |name| {
        ts.lock().unwrap_or_else(|e| e.into_inner()).sent.insert(name.to_string(), Instant::now());
    })
    .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !watcher.is_finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_done = t_start.elapsed();
    let cpu3 = quiesce(pid).await.unwrap_or_default();
    let t = track.lock().unwrap_or_else(|e| e.into_inner());
    if t.done.len() < want {
        return Err(BenchError::Timeout { done: t.done.len(), want });
    }
    let lat: Vec<f64> = t.done.iter().filter_map(|(n, d)| Some(d.duration_since(*t.sent.get(n)?).as_secs_f64() * 1e3)).collect();
    let max = lat.iter().cloned().fold(0.0, f64::max);
    let (p50, p99) = median_p99(lat);
    let per_k = |d: Duration| d.as_secs_f64() * 1000.0 / a.templates as f64;
    let (base_cpu, prop_cpu) = (cpu1.saturating_sub(cpu0), cpu3.saturating_sub(cpu2));
    println!();
    println!("| measure | value |");
    println!("|---|---:|");
    println!("| templates created (baseline, unselected) | {} in {:.1} s |", a.templates, base_elapsed.as_secs_f64());
    println!("| templates created (propagated) | {} in {:.1} s; all {} Works seen after {:.1} s |", a.templates, prop_elapsed.as_secs_f64(), a.templates * a.clusters, all_done.as_secs_f64());
    println!("| apply → all Works written, p50 | {p50:.1} ms |");
    println!("| apply → all Works written, p99 | {p99:.1} ms (Karmada pull mode: ≈ 989 ms) |");
    println!("| apply → all Works written, max | {max:.1} ms |");
    println!("| server CPU, propagated run | {:.2} s ({:.2} s per 1,000 templates) |", prop_cpu.as_secs_f64(), per_k(prop_cpu));
    println!("| server CPU, baseline run | {:.2} s ({:.2} s per 1,000 templates) |", base_cpu.as_secs_f64(), per_k(base_cpu));
    println!(
        "| propagation CPU (difference) | {:.2} s per 1,000 templates ({} Works each {} clusters) |",
        per_k(prop_cpu.saturating_sub(base_cpu)),
        a.templates * a.clusters,
        a.clusters
    );
    Ok(())
}
