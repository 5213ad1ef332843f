//! Join benchmark: registration time (`fedctl join` → `Cluster` Ready) and Work → member apply latency.
//!
//! Starts its own etcd, `fedctl server` and N small fedsim members. Registration: members
//! join one after the other; for each, the clock starts when the `fedctl join` process is
//! spawned (bootstrap token and CA hash from the server's join command), the agent is
//! started as soon as `join` exits, and the clock stops when the admin first reads the
//! member's `Cluster` with `Ready=True` (polled every 20 ms). Apply latency: Works, each with
//! one ConfigMap, are created round-robin in the members' `fed-exec-<name>` namespaces at a
//! fixed rate; a watch on every member's ConfigMaps records when each object is `ADDED` on
//! its member, and a watch on the federation's Works when each first reports
//! `Applied=True`. Latency = that moment − the moment the Work's create request was sent.
//! Anchors: Karmada's published registration < 2 s (without resource modelling) and
//! distribution p99 ≈ 1 s.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::median_p99;
use super::procs::{client_from_kubeconfig, sibling_binary, AgentProcess, EtcdProcess, FedsimProcess, ServerProcess};

/// Flags of `fedctl-bench join`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Members joined (one registration sample each); Works are spread over all of them.
    #[arg(long, default_value_t = 5)]
    pub members: usize,
    /// Nodes of each fedsim member (4 pods per node).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Works created (one ConfigMap each).
    #[arg(long, default_value_t = 1000)]
    pub works: usize,
    /// Work creations per second (open loop).
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Most create requests in flight.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: String,
    /// Keep the agents' logs (`<member>-agent.log`) and configs in this directory; default:
    /// a temporary directory removed at the end.
    #[arg(long)]
    pub log_dir: Option<std::path::PathBuf>,
}

/// Errors of the benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum JoinBenchError {
    /// A child process could not be started.
    #[error("start {what}: {source}")]
    Start { what: String, source: std::io::Error },
    /// A request failed or was refused.
    #[error("{0}")]
    Request(String),
    /// `fedctl join` failed.
    #[error("fedctl join {member}: {message}")]
    Join { member: String, message: String },
    /// Something did not happen in time.
    #[error("timed out: {0}")]
    Timeout(String),
}

fn req(e: impl std::fmt::Display) -> JoinBenchError {
    JoinBenchError::Request(e.to_string())
}

/// Name of Work / ConfigMap `i`.
fn item_name(i: usize) -> String {
    format!("work-{i:06}")
}

/// `(token, ca-cert-hash)` from the join command `fedctl server` writes at first start.
fn join_command(data_dir: &Path) -> Result<(String, String), JoinBenchError> {
    let path = data_dir.join("join-command");
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        match std::fs::read_to_string(&path) {
            Ok(t) if !t.trim().is_empty() => break t,
            _ if Instant::now() > deadline => return Err(JoinBenchError::Timeout("join-command not written".into())),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    let arg = |flag: &str| words.iter().position(|w| *w == flag).and_then(|i| words.get(i + 1)).map(|s| s.to_string());
    match (arg("--token"), arg("--ca-cert-hash")) {
        (Some(t), Some(h)) => Ok((t, h)),
        _ => Err(JoinBenchError::Request(format!("unexpected join command: {text}"))),
    }
}

/// One registration sample.
struct Registration {
    /// `fedctl join` spawned → exited (CSR signed, config written).
    join: Duration,
    /// `fedctl join` spawned → the agent's `Cluster` first read (registered).
    created: Duration,
    /// `fedctl join` spawned → `Cluster` read with `Ready=True`.
    ready: Duration,
    /// Reason of that first `Ready=True`.
    reason: String,
}

/// `Ready` condition `(status, reason)` of a Cluster.
fn ready(c: &Value) -> Option<(String, String)> {
    let r = c.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == "Ready")?;
    Some((r["status"].as_str()?.to_string(), r["reason"].as_str().unwrap_or("").to_string()))
}

/// Joins `sim` as its name with `fedctl join`, starts its agent and waits for `Ready=True`.
async fn register(fedctl_bin: &Path, server: &ServerProcess, http: &reqwest::Client, token: &str, hash: &str, sim: &FedsimProcess, dir: &Path) -> Result<(Registration, AgentProcess), JoinBenchError> {
    let name = sim.name.clone();
    let config_dir = dir.join(&name);
    let t0 = Instant::now();
    let out = tokio::process::Command::new(fedctl_bin)
        .args(["join", &name, "--server", &server.url, "--token", token, "--ca-cert-hash", hash])
        .arg("--kubeconfig")
        .arg(&sim.kubeconfig)
        .arg("--config-dir")
        .arg(&config_dir)
        .env("RUST_LOG", "warn")
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| JoinBenchError::Start { what: "fedctl join".into(), source: e })?;
    if !out.status.success() {
        return Err(JoinBenchError::Join { member: name, message: String::from_utf8_lossy(&out.stderr).trim().to_string() });
    }
    let join = t0.elapsed();
    let mut agent = AgentProcess::start(fedctl_bin, &config_dir, &dir.join(format!("{name}-agent.log"))).map_err(|e| JoinBenchError::Start { what: format!("agent of {name}"), source: e })?;
    let url = format!("{}/apis/cluster.fedctl.io/v1alpha1/clusters/{name}", server.url);
    let deadline = t0 + Duration::from_secs(60);
    let mut created = None;
    loop {
        if let Ok(r) = http.get(&url).send().await {
            if r.status().is_success() {
                let seen = t0.elapsed();
                let created = *created.get_or_insert(seen);
                let c: Value = r.json().await.unwrap_or(Value::Null);
                if let Some((s, reason)) = ready(&c) {
                    if s == "True" {
                        return Ok((Registration { join, created, ready: seen, reason }, agent));
                    }
                }
            }
        }
        if !agent.running() {
            return Err(JoinBenchError::Request(format!("agent of {name} exited; see {}", dir.join(format!("{name}-agent.log")).display())));
        }
        if Instant::now() > deadline {
            return Err(JoinBenchError::Timeout(format!("{name} not Ready 60 s after join")));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Opens a watch on `url` (a list URL; `watch=1` and the resourceVersion of a fresh list are
/// added) and calls `on_event(event, arrival)` for each event until it returns `true`.
async fn watch<F>(http: &reqwest::Client, list_url: &str, mut on_event: F) -> Result<tokio::task::JoinHandle<()>, JoinBenchError>
where
    F: FnMut(&Value, Instant) -> bool + Send + 'static,
{
    let sep = if list_url.contains('?') { '&' } else { '?' };
    let list: Value = http.get(format!("{list_url}{sep}limit=1")).send().await.map_err(req)?.json().await.map_err(req)?;
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string();
    let resp = http.get(format!("{list_url}{sep}watch=1&resourceVersion={rv}&allowWatchBookmarks=false&timeoutSeconds=900")).timeout(Duration::from_secs(900)).send().await.map_err(req)?;
    if !resp.status().is_success() {
        return Err(JoinBenchError::Request(format!("watch {list_url}: {}", resp.status())));
    }
    Ok(tokio::spawn(super::read_watch_events(resp, move |ev, at| on_event(ev, at))))
}

/// Send and arrival times of the Works.
#[derive(Default)]
struct Track {
    sent: HashMap<String, Instant>,
    on_member: HashMap<String, Instant>,
    applied: HashMap<String, Instant>,
}

/// Runs the benchmark and prints its figures as a Markdown table.
pub async fn run(a: Args) -> Result<(), JoinBenchError> {
    let n = a.members.max(1);
    let fedctl_bin = sibling_binary("fedctl");
    let fedsim_bin = sibling_binary("fedsim");
    let etcd = EtcdProcess::start(&a.etcd_bin).map_err(|e| JoinBenchError::Start { what: "etcd".into(), source: e })?;
    let server = ServerProcess::start(&fedctl_bin, &etcd.endpoint, &[]).map_err(|e| JoinBenchError::Start { what: "fedctl server".into(), source: e })?;
    let (http, base) = client_from_kubeconfig(&server.kubeconfig()).map_err(JoinBenchError::Request)?;
    let t_ready = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        if t_ready.elapsed() > Duration::from_secs(30) {
            return Err(JoinBenchError::Timeout("server /readyz".into()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (token, hash) = join_command(&server.data_dir)?;
    let tmp = super::procs::tempfile_dir::Dir::new("fedctl-bench-join").map_err(|e| JoinBenchError::Start { what: "temp dir".into(), source: e })?;
    let dir = match &a.log_dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| JoinBenchError::Start { what: format!("log dir {}", d.display()), source: e })?;
            d.clone()
        }
        None => tmp.path().to_path_buf(),
    };
    let mut sims = Vec::new();
    for i in 0..n {
        let name = format!("member-{i}");
        let sim = FedsimProcess::start(&fedsim_bin, &name, &["--nodes", &a.nodes.to_string(), "--pods-per-node", "4", "--namespaces", "4", "--seed", &(i + 1).to_string()], Duration::from_secs(60))
            .map_err(|e| JoinBenchError::Start { what: format!("fedsim {name}"), source: e })?;
        sims.push(sim);
    }
    println!("fedctl-bench join: members={n} nodes/member={} works={} rate={}/s concurrency={} (agents with the default 10 s heartbeat)", a.nodes, a.works, a.rate, a.concurrency);

    // --- registration, one member at a time
    let mut regs = Vec::new();
    let mut agents = Vec::new();
    for sim in &sims {
        let (reg, agent) = register(&fedctl_bin, &server, &http, &token, &hash, sim, &dir).await?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!("  {}: join exited after {:.0} ms, Cluster registered after {:.0} ms, Ready=True ({}) after {:.0} ms", sim.name, ms(reg.join), ms(reg.created), reg.reason, ms(reg.ready));
        regs.push(reg);
        agents.push(agent);
    }

    // --- Work → member apply latency
    let track = Arc::new(Mutex::new(Track::default()));
    let want = a.works;
    let mut watchers = Vec::new();
    for sim in &sims {
        let (mhttp, mbase) = client_from_kubeconfig(&sim.kubeconfig).map_err(JoinBenchError::Request)?;
        let t = track.clone();
        let expected = (0..want).filter(|i| sims.get(i % n).is_some_and(|s| s.name == sim.name)).count();
        let mut seen = 0;
        watchers.push(
            watch(&mhttp, &format!("{mbase}/api/v1/configmaps"), move |ev, at| {
                let name = ev["object"]["metadata"]["name"].as_str().unwrap_or("");
                if ev["type"] == "ADDED" && name.starts_with("work-") {
                    let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
                    if t.on_member.insert(name.to_string(), at).is_none() {
                        seen += 1;
                    }
                }
                seen >= expected
            })
            .await?,
        );
    }
    let t = track.clone();
    watchers.push(
        watch(&http, &format!("{base}/apis/work.fedctl.io/v1alpha1/works"), move |ev, at| {
            let obj = &ev["object"];
            let applied = obj.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Applied" && c["status"] == "True"));
            let name = obj["metadata"]["name"].as_str().unwrap_or("");
            let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
            if applied && name.starts_with("work-") {
                t.applied.entry(name.to_string()).or_insert(at);
            }
            t.applied.len() >= want
        })
        .await?,
    );

    let sem = Arc::new(tokio::sync::Semaphore::new(a.concurrency.max(1)));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..want {
        let at = t0 + Duration::from_secs_f64(i as f64 / a.rate.max(0.001));
        tokio::time::sleep_until(at.into()).await;
        let permit = sem.clone().acquire_owned().await.map_err(req)?;
        let name = item_name(i);
        let ns = format!("fed-exec-{}", sims[i % n].name);
        let body = json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": name, "namespace": ns},
            "spec": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "bench"}, "data": {"index": i.to_string()}}]}});
        let (http, url, t) = (http.clone(), format!("{base}/apis/work.fedctl.io/v1alpha1/namespaces/{ns}/works"), track.clone());
        tasks.push(tokio::spawn(async move {
            t.lock().unwrap_or_else(|e| e.into_inner()).sent.insert(name, Instant::now());
            let r = http.post(url).json(&body).send().await.map_err(req);
            drop(permit);
            match r {
                Ok(r) if r.status().is_success() => Ok(()),
                Ok(r) => Err(JoinBenchError::Request(format!("create Work: {}", r.status()))),
                Err(e) => Err(e),
            }
        }));
    }
    for task in tasks {
        task.await.map_err(req)??;
    }
    let created = t0.elapsed();
    let deadline = Instant::now() + Duration::from_secs(180);
    while !watchers.iter().all(|w| w.is_finished()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_done = t0.elapsed();
    let t = track.lock().unwrap_or_else(|e| e.into_inner());
    if t.on_member.len() < want || t.applied.len() < want {
        return Err(JoinBenchError::Timeout(format!("{} of {want} ConfigMaps on their members, {} Works Applied", t.on_member.len(), t.applied.len())));
    }
    let lat = |m: &HashMap<String, Instant>| -> Vec<f64> { m.iter().filter_map(|(k, d)| Some(d.saturating_duration_since(*t.sent.get(k)?).as_secs_f64() * 1e3)).collect() };
    let (member_lat, status_lat) = (lat(&t.on_member), lat(&t.applied));
    let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    let (m_max, s_max) = (max(&member_lat), max(&status_lat));
    let (m50, m99) = median_p99(member_lat);
    let (s50, s99) = median_p99(status_lat);
    let ready_ms: Vec<f64> = regs.iter().map(|r| r.ready.as_secs_f64() * 1e3).collect();
    let join_ms: Vec<f64> = regs.iter().map(|r| r.join.as_secs_f64() * 1e3).collect();
    let created_ms: Vec<f64> = regs.iter().map(|r| r.created.as_secs_f64() * 1e3).collect();
    let (r_max, j_max, c_max) = (max(&ready_ms), max(&join_ms), max(&created_ms));
    let (r50, _) = median_p99(ready_ms);
    let (j50, _) = median_p99(join_ms);
    let (c50, _) = median_p99(created_ms);
    println!();
    println!("| measure | fedctl | anchor |");
    println!("|---|---:|---:|");
    println!("| `fedctl join` → CSR signed, config written (median of {n}, max) | {j50:.0} ms, {j_max:.0} ms | |");
    println!("| `fedctl join` start → Cluster registered by the agent (median of {n}, max) | {c50:.0} ms, {c_max:.0} ms | |");
    println!("| `fedctl join` start → Cluster Ready=True (median of {n}, max) | {r50:.0} ms, {r_max:.0} ms | Karmada registration < 2 s |");
    println!("| Works created | {want} in {:.1} s over {n} members; all applied after {:.1} s | |", created.as_secs_f64(), all_done.as_secs_f64());
    println!("| Work create → object on the member, p50 | {m50:.1} ms | |");
    println!("| Work create → object on the member, p99 | {m99:.1} ms | Karmada distribution p99 ≈ 1 s |");
    println!("| Work create → object on the member, max | {m_max:.1} ms | |");
    println!("| Work create → Work status Applied=True, p50 / p99 / max | {s50:.1} / {s99:.1} / {s_max:.1} ms | |");
    drop(agents);
    Ok(())
}
