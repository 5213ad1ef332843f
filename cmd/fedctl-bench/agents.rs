//! Many agents in one process: each member joined with a real `fedctl join` (its own CSR,
//! client certificate and config directory), then the real agent code
//! ([`fedctl::agent::run`]) started once per member on this process's tokio runtime, so the
//! federation sees N agents with their own certificates, heartbeats, credential Secrets and
//! Work watches at the memory of one process. For benchmarks only.
//!
//! `fedctl-bench agents --members-json FILE --server-data-dir DIR` joins the members listed
//! in FILE (the `members.json` fedsim writes, or the seed bench's) and runs their agents
//! until interrupted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use fedctl::agent::config::AgentConfig;
use fedctl::api::federation::{cluster_of_exec_namespace, CLUSTER_LABEL, HEARTBEAT_LEASE};

use super::median_p99;
use super::procs::{client_from_kubeconfig, join_member, sibling_binary, tempfile_dir, JoinCommand};

/// One simulated member, as fedsim's `members.json` lists it (fedsim's own entry type).
pub use fedctl::fedsim::members::MemberEntry as MemberInfo;

/// Reads a `members.json` (`[{"name","zone","server","kubeconfig","nodes","pods"}]`).
pub fn load_members_json(path: &Path) -> Result<Vec<MemberInfo>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Flags of `fedctl-bench agents`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The members to join (`[{"name","zone","server","kubeconfig","nodes","pods"}]`).
    #[arg(long)]
    pub members_json: PathBuf,
    /// The federation server's data dir (its `join-command` and `admin.kubeconfig` are read).
    #[arg(long)]
    pub server_data_dir: PathBuf,
    /// `fedctl join` processes run at once.
    #[arg(long, default_value_t = 8)]
    pub join_concurrency: usize,
    /// `clusterStatusUpdateSeconds` of every agent (seconds between status reports of its
    /// member; unset: the agent's default, its heartbeat interval).
    #[arg(long)]
    pub cluster_status_update_seconds: Option<u64>,
    /// Keep the agents' config directories here (default: a temporary directory removed at
    /// the end).
    #[arg(long)]
    pub config_dir: Option<PathBuf>,
}

/// Registration of one member: from `fedctl join` spawned.
#[derive(Clone, Debug)]
pub struct Registration {
    /// Member name.
    pub name: String,
    /// `fedctl join` exited (CSR signed, config written).
    pub joined: Duration,
    /// Its `Cluster` first seen (created by its agent); `None` when not within the wait.
    pub created: Option<Duration>,
    /// Its exec namespace first seen (created by the federation).
    pub namespace: Option<Duration>,
    /// Its heartbeat Lease first seen (its agent's first heartbeat).
    pub heartbeat: Option<Duration>,
    /// Its `Cluster` first read with `Ready=True`; `None` when it was not within the wait.
    pub ready: Option<Duration>,
}

/// Indices of the registration stages the watches of [`InProcessAgents::join_all`] see.
const CREATED: usize = 0;
const NAMESPACE: usize = 1;
const HEARTBEAT: usize = 2;
const READY: usize = 3;
const STAGES: usize = 4;

/// The watch URL of the collection `url` (with `query`, e.g. a selector) from its current
/// resourceVersion (a LIST of one item gives it).
async fn watch_url(http: &reqwest::Client, url: &str, query: &str) -> Result<String, String> {
    let sep = if query.is_empty() { "" } else { "&" };
    let rv = match http.get(format!("{url}?limit=1{sep}{query}")).send().await {
        Ok(r) => r.json::<Value>().await.ok().and_then(|v| v["metadata"]["resourceVersion"].as_str().map(str::to_string)).unwrap_or_default(),
        Err(e) => return Err(format!("list {url}: {e}")),
    };
    Ok(format!("{url}?watch=1&resourceVersion={rv}&allowWatchBookmarks=false&timeoutSeconds=3600{sep}{query}"))
}

/// N agents running in this process; stopped (each `agent::run` told to shut down, then its
/// task aborted) by [`InProcessAgents::stop`] or on drop. Their config directories are
/// removed on drop unless they were given.
pub struct InProcessAgents {
    stop_tx: tokio::sync::watch::Sender<bool>,
    informers_tx: tokio::sync::watch::Sender<bool>,
    tasks: Vec<(String, tokio::task::JoinHandle<Result<(), fedctl::agent::AgentError>>)>,
    /// Registration figures, in the order of the members given.
    pub registrations: Vec<Registration>,
    /// Members whose join or agent start failed, with why.
    pub failures: Vec<(String, String)>,
    _dir: Option<tempfile_dir::Dir>,
}

impl InProcessAgents {
    /// Joins every member of `members` to the server of `server_data_dir` (at most
    /// `concurrency` `fedctl join` processes at once, each with `--zone` from the member),
    /// starts its agent in this process as soon as its join exits, and waits (at most
    /// `ready_timeout` after the last join) until every joined member's `Cluster` is
    /// `Ready=True`, as a watch of Clusters started before the first join reports it. With
    /// `status_update` it sets `clusterStatusUpdateSeconds` in each agent.yaml before its agent
    /// starts. With `hold_informers` the agents' member informers wait for
    /// [`InProcessAgents::start_informers`] (see `fedctl::agent::RunOptions::informers_after`).
    /// Members that fail are listed in [`InProcessAgents::failures`] rather than failing the
    /// rest. Errors: the join command or the admin kubeconfig cannot be read, the Cluster
    /// watch cannot be opened, or the temporary directory not created.
    pub async fn join_all(
        server_data_dir: &Path,
        members: &[MemberInfo],
        concurrency: usize,
        config_root: Option<&Path>,
        status_update: Option<u64>,
        hold_informers: bool,
        ready_timeout: Duration,
    ) -> Result<Self, String> {
        let jc = JoinCommand::read(server_data_dir).map_err(|e| format!("join command: {e}"))?;
        let (http, base) = client_from_kubeconfig(&server_data_dir.join("admin.kubeconfig"))?;
        let dir = match config_root {
            Some(_) => None,
            None => Some(tempfile_dir::Dir::new("fedctl-bench-agents").map_err(|e| format!("temp dir: {e}"))?),
        };
        let root = config_root.map(Path::to_path_buf).unwrap_or_else(|| dir.as_ref().expect("set above").path().to_path_buf());
        let (stop_tx, _) = tokio::sync::watch::channel(false);
        let (informers_tx, _) = tokio::sync::watch::channel(!hold_informers);
        // the stages as they happen: watches of Clusters, exec namespaces and heartbeat Leases
        // from before the first join (a LIST of every Cluster per poll would cost the server
        // O(members) per round)
        let stages: Arc<std::sync::Mutex<std::collections::HashMap<String, [Option<Instant>; STAGES]>>> = Arc::default();
        let mark = |stages: &Arc<std::sync::Mutex<std::collections::HashMap<String, [Option<Instant>; STAGES]>>>, name: &str, stage: usize, at: Instant| {
            let mut s = stages.lock().unwrap_or_else(|e| e.into_inner());
            s.entry(name.to_string()).or_default()[stage].get_or_insert(at);
        };
        // each watch is read on a thread and runtime of its own (see `watch_on_own_thread`):
        // read among the agents, a stage would be recorded when the agents' runtime got to it
        let admin = server_data_dir.join("admin.kubeconfig");
        let clusters = watch_url(&http, &format!("{base}/apis/cluster.fedctl.io/v1alpha1/clusters"), "").await?;
        let namespaces = watch_url(&http, &format!("{base}/api/v1/namespaces"), &format!("labelSelector={CLUSTER_LABEL}")).await?;
        let leases = watch_url(&http, &format!("{base}/apis/coordination.k8s.io/v1/leases"), &format!("fieldSelector=metadata.name%3D{HEARTBEAT_LEASE}")).await?;
        let s = stages.clone();
        let watch = super::watch_on_own_thread(admin.clone(), clusters, move |ev, at| {
            let c = &ev["object"];
            let Some(n) = c["metadata"]["name"].as_str() else { return false };
            mark(&s, n, CREATED, at);
            let ok = c.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
            if ok {
                mark(&s, n, READY, at);
            }
            false
        })
        .await?;
        let s = stages.clone();
        let ns_watch = super::watch_on_own_thread(admin.clone(), namespaces, move |ev, at| {
            if let Some(n) = ev["object"]["metadata"]["labels"][CLUSTER_LABEL].as_str() {
                mark(&s, n, NAMESPACE, at);
            }
            false
        })
        .await?;
        let s = stages.clone();
        let lease_watch = super::watch_on_own_thread(admin, leases, move |ev, at| {
            if let Some(n) = ev["object"]["metadata"]["namespace"].as_str().and_then(cluster_of_exec_namespace) {
                mark(&s, n, HEARTBEAT, at);
            }
            false
        })
        .await?;
        let fedctl = sibling_binary("fedctl");
        let sem = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
        // every member's join, side by side up to `concurrency`; its agent starts as soon as
        // its join exits
        let mut joins = Vec::new();
        for m in members {
            let (sem, jc, fedctl, m, cdir, stop, gate) = (sem.clone(), jc.clone(), fedctl.clone(), m.clone(), root.join(&m.name), stop_tx.subscribe(), informers_tx.subscribe());
            joins.push(tokio::spawn(async move {
                let _permit = sem.acquire_owned().await.map_err(|e| e.to_string())?;
                let start = Instant::now();
                let name = m.name.clone();
                let cdir = tokio::task::spawn_blocking(move || {
                    join_member(&fedctl, &jc, &m.name, &m.kubeconfig, "", Some(&m.zone), &cdir).map_err(|e| e.to_string())?;
                    if let Some(secs) = status_update {
                        let mut c = AgentConfig::load(&cdir).map_err(|e| e.to_string())?;
                        c.cluster_status_update_seconds = Some(secs);
                        c.write(&cdir).map_err(|e| e.to_string())?;
                    }
                    Ok::<_, String>(cdir)
                })
                .await
                .map_err(|e| e.to_string())??;
                let joined = start.elapsed();
                Ok::<_, String>((name, start, joined, start_agent(cdir, stop, gate)))
            }));
        }
        let mut me = InProcessAgents { stop_tx, informers_tx, tasks: Vec::new(), registrations: Vec::new(), failures: Vec::new(), _dir: dir };
        let mut started = Vec::new();
        for (m, j) in members.iter().zip(joins) {
            match j.await.map_err(|e| e.to_string()).and_then(|r| r) {
                Ok((name, start, joined, task)) => {
                    me.tasks.push((name.clone(), task));
                    started.push((name, start, joined));
                }
                Err(e) => me.failures.push((m.name.clone(), e)),
            }
        }
        let deadline = Instant::now() + ready_timeout;
        loop {
            let all = {
                let s = stages.lock().unwrap_or_else(|e| e.into_inner());
                started.iter().all(|(n, _, _)| s.get(n).is_some_and(|st| st[READY].is_some()))
            };
            if all || Instant::now() >= deadline || watch.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop((watch, ns_watch, lease_watch));
        let stages = stages.lock().unwrap_or_else(|e| e.into_inner());
        me.registrations = started
            .into_iter()
            .map(|(name, start, joined)| {
                let since = |i: usize| stages.get(&name).and_then(|s| s[i]).map(|at| at.saturating_duration_since(start));
                Registration { joined, created: since(CREATED), namespace: since(NAMESPACE), heartbeat: since(HEARTBEAT), ready: since(READY), name }
            })
            .collect();
        Ok(me)
    }

    /// Lets the agents' member informers start (when [`InProcessAgents::join_all`] held them).
    pub fn start_informers(&self) {
        let _ = self.informers_tx.send(true);
    }

    /// Agents running.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Agents whose `agent::run` returned (an error at start, or a panic), with why.
    pub fn exited(&self) -> Vec<String> {
        self.tasks.iter().filter(|(_, t)| t.is_finished()).map(|(n, _)| n.clone()).collect()
    }

    /// p50 and p99 (ms) of one stage (`Registration` field) over the members that reached it.
    pub fn stage_p50_p99(&self, stage: impl Fn(&Registration) -> Option<Duration>) -> (f64, f64) {
        median_p99(self.registrations.iter().filter_map(stage).map(|d| d.as_secs_f64() * 1e3).collect())
    }

    /// Registration p50 and p99 (ms) over the members that became Ready, and how many did not.
    pub fn registration_p50_p99(&self) -> (f64, f64, usize) {
        let v: Vec<f64> = self.registrations.iter().filter_map(|r| r.ready).map(|d| d.as_secs_f64() * 1e3).collect();
        let missing = self.registrations.len() - v.len();
        let (p50, p99) = median_p99(v);
        (p50, p99, missing)
    }

    /// Tells every agent to shut down and waits (at most 10 s) for them; the rest are aborted.
    pub async fn stop(mut self) {
        let _ = self.stop_tx.send(true);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        for (_, t) in self.tasks.iter_mut() {
            let _ = tokio::time::timeout_at(deadline, t).await;
        }
    }
}

/// Starts the agent for the config directory `dir` as a task of this runtime, until `stop`
/// turns true; its member informers start once `informers` reads true.
fn start_agent(dir: PathBuf, mut stop: tokio::sync::watch::Receiver<bool>, informers: tokio::sync::watch::Receiver<bool>) -> tokio::task::JoinHandle<Result<(), fedctl::agent::AgentError>> {
    tokio::spawn(async move {
        let options = fedctl::agent::RunOptions { metrics: None, informers_after: Some(informers) };
        fedctl::agent::run_with(&dir, options, async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
    })
}

impl Drop for InProcessAgents {
    fn drop(&mut self) {
        let _ = self.stop_tx.send(true);
        for (_, t) in &self.tasks {
            t.abort();
        }
    }
}

/// Runs `fedctl-bench agents`: joins the members, prints their registration figures, and
/// runs their agents until Ctrl-C.
pub async fn run(a: Args) -> Result<(), String> {
    let members = load_members_json(&a.members_json)?;
    let agents = InProcessAgents::join_all(&a.server_data_dir, &members, a.join_concurrency, a.config_dir.as_deref(), a.cluster_status_update_seconds, false, Duration::from_secs(120)).await?;
    for (m, e) in &agents.failures {
        eprintln!("{m}: {e}");
    }
    for r in &agents.registrations {
        println!("  {}: join {:.0} ms, Ready {}", r.name, r.joined.as_secs_f64() * 1e3, r.ready.map_or("—".into(), |d| format!("{:.0} ms", d.as_secs_f64() * 1e3)));
    }
    let (p50, p99, missing) = agents.registration_p50_p99();
    println!(
        "{} agents running in this process (pid {}); registration (join spawned → Ready=True) p50 {p50:.0} ms, p99 {p99:.0} ms; {missing} not Ready; {} failed",
        agents.len(),
        std::process::id(),
        agents.failures.len()
    );
    let _ = tokio::signal::ctrl_c().await;
    agents.stop().await;
    Ok(())
}
