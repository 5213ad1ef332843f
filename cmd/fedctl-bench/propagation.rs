//! Propagation benchmark: template apply → Works written (and, with real members, → applied on the member) latency and the server's CPU time per 1,000 templates.
//!
//! Starts its own etcd and `fedctl server`, registers members, creates one
//! PropagationPolicy (Divided, equal static weights) and then N Deployments at a fixed rate.
//! Members are either simulated (Ready Clusters with exec namespaces, nothing applies the
//! Works) or, with `--agents`, real: one fedsim per member, joined with `fedctl join`, with
//! its `fedctl agent` running. Client-side watches record, per template, when its last Work
//! appears (Work `ADDED` on the federation) and, with agents, when its last member object
//! appears (Deployment `ADDED` on each fedsim) and when its last Work reports `Applied=True`
//! (Work `MODIFIED` on the federation); latency = that moment − the moment its create
//! request was sent. The
//! server's CPU time (user + system from `/proc/<pid>/stat`) is read before and after,
//! for the propagated run and for a baseline run of as many Deployments no policy selects
//! (API serving + a no-op reconcile), so the difference is the cost of propagating.
//! Anchor: Karmada's published pull-mode distribution p99 ≈ 989 ms.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::median_p99;
use super::procs::{client_from_kubeconfig, cpu_time, sibling_binary, AgentProcess, EtcdProcess, FedsimProcess, ServerProcess};

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
    /// Real members: one fedsim per cluster, joined with `fedctl join`, each with its
    /// `fedctl agent`; latency is measured until the Deployment exists on every member.
    #[arg(long)]
    pub agents: bool,
    /// Nodes of each fedsim member (with `--agents`).
    #[arg(long, default_value_t = 10)]
    pub fedsim_nodes: usize,
    /// Works each agent reconciles at once (`concurrentWorkSyncs` in agent.yaml; with
    /// `--agents`); 0 keeps the agent's default (5). 1 is the serial agent, for comparison.
    #[arg(long, default_value_t = 0)]
    pub work_syncs: usize,
    /// Measure only the rendering of Works in process (no etcd, no server): every template
    /// rendered for every cluster with `--override-rules` rules applying to each member, side
    /// by side with no overrides; prints CPU time per Work.
    #[arg(long)]
    pub render: bool,
    /// Override rules per template (with `--render`; 3 by default): image registry, labels,
    /// a plaintext replace, cycling.
    #[arg(long, default_value_t = 3)]
    pub override_rules: usize,
    /// Rounds of rendering per variant (with `--render`); the median round is reported.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
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

/// Per measured event: which clusters have reported each template, and when the last did.
struct Track {
    /// Per template: clusters seen so far.
    seen: HashMap<String, HashSet<String>>,
    /// Per template: when the last cluster was seen.
    done: HashMap<String, Instant>,
}

impl Track {
    fn new() -> Arc<Mutex<Track>> {
        Arc::new(Mutex::new(Track { seen: HashMap::new(), done: HashMap::new() }))
    }

    /// Records template `name` seen on `cluster` at `at`; true once `want` templates are
    /// done on `clusters` clusters.
    fn record(&mut self, name: &str, cluster: &str, at: Instant, clusters: usize, want: usize) -> bool {
        let s = self.seen.entry(name.to_string()).or_default();
        if s.insert(cluster.to_string()) && s.len() == clusters {
            self.done.insert(name.to_string(), at);
        }
        self.done.len() >= want
    }

    /// Latencies (ms) from send to done of every done template.
    fn latencies(&self, sent: &HashMap<String, Instant>) -> Vec<f64> {
        self.done.iter().filter_map(|(n, d)| Some(d.duration_since(*sent.get(n)?).as_secs_f64() * 1e3)).collect()
    }
}

/// Watches `url` (a `?watch=1` URL with a resourceVersion, so nothing is missed while the
/// request is on its way) and hands every event to `pick`, which names the (template,
/// cluster) it reports; records them in `track` until `want` templates are done on
/// `clusters` clusters or the stream ends. A failed request is reported on stderr.
fn watch_into(
    http: &reqwest::Client,
    url: String,
    track: Arc<Mutex<Track>>,
    clusters: usize,
    want: usize,
    pick: impl Fn(&Value) -> Option<(String, String)> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let http = http.clone();
    tokio::spawn(async move {
        // a server may send the response head only with the first event: not awaited
        // before the creates start
        let resp = match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => return eprintln!("watch {url}: {}", r.status()),
            Err(e) => return eprintln!("watch {url}: {e}"),
        };
        super::read_watch_events(resp, move |ev, at| match pick(ev) {
            Some((name, cluster)) => track.lock().unwrap_or_else(|e| e.into_inner()).record(&name, &cluster, at, clusters, want),
            None => false,
        })
        .await;
    })
}

/// The current resourceVersion of a list (for starting a watch after it).
async fn list_rv(http: &reqwest::Client, url: String) -> Result<String, BenchError> {
    let v: Value = http.get(url).send().await.map_err(req)?.json().await.map_err(req)?;
    Ok(v["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string())
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

/// Real members: each fedsim with its joined agent.
struct RealMember {
    agent: AgentProcess,
    sim: FedsimProcess,
}

/// Registers `members` as simulated clusters: Ready `Cluster`s with capacity, and their exec
/// namespaces.
async fn register_simulated(http: &reqwest::Client, base: &str, members: &[String]) -> Result<(), BenchError> {
    for m in members {
        post(http, format!("{base}/api/v1/namespaces"), &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("fed-exec-{m}")}})).await?;
    }
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    for m in members {
        let url = format!("{base}/apis/cluster.fedctl.io/v1alpha1/clusters");
        post(
            http,
            url.clone(),
            &json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": m}, "spec": {"syncMode": "Pull", "zone": "zone-1"}}),
        )
        .await?;
        // the cluster-controller writes the new Cluster too: read, modify, retry on conflict
        for attempt in 0.. {
            let mut c: Value = http.get(format!("{url}/{m}")).send().await.map_err(req)?.json().await.map_err(req)?;
            c["status"] = json!({"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now, "lastHeartbeatTime": now}],
                "resourceSummary": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1100"}, "allocated": {"cpu": "8", "memory": "32Gi", "pods": "100"}}});
            let r = http.put(format!("{url}/{m}/status")).json(&c).send().await.map_err(req)?;
            match r.status().as_u16() {
                200..=299 => break,
                409 if attempt < 20 => tokio::time::sleep(Duration::from_millis(100)).await,
                code => return Err(BenchError::Request(format!("cluster status: {code}"))),
            }
        }
    }
    Ok(())
}

/// Starts one fedsim per member, joins it and starts its agent; waits (≤ 60 s) until every
/// `Cluster` is Ready and its exec namespace exists.
async fn start_real(http: &reqwest::Client, base: &str, server: &ServerProcess, members: &[String], nodes: usize, work_syncs: usize) -> Result<Vec<RealMember>, BenchError> {
    let fedsim = sibling_binary("fedsim");
    let fedctl = sibling_binary("fedctl");
    let nodes = nodes.max(1).to_string();
    let mut out = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let seed = (i + 1).to_string();
        let sim = FedsimProcess::start(&fedsim, m, &["--nodes", &nodes, "--pods-per-node", "5", "--namespaces", "5", "--seed", &seed], Duration::from_secs(60))
            .map_err(|e| BenchError::Start { what: "fedsim", source: e })?;
        let agent = AgentProcess::join_and_start(&fedctl, &server.data_dir, m, &sim.kubeconfig, "", work_syncs).map_err(|e| BenchError::Start { what: "fedctl agent", source: e })?;
        out.push(RealMember { agent, sim });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for m in members {
        loop {
            let c: Value = http.get(format!("{base}/apis/cluster.fedctl.io/v1alpha1/clusters/{m}")).send().await.map_err(req)?.json().await.unwrap_or(Value::Null);
            let ready = c.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
            let ns = http.get(format!("{base}/api/v1/namespaces/fed-exec-{m}")).send().await.map_err(req)?.status().is_success();
            if ready && ns {
                break;
            }
            if Instant::now() > deadline {
                return Err(BenchError::Request(format!("member {m} not Ready within 60 s")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(out)
}

/// Summed CPU time of the agents.
fn agents_cpu(real: &[RealMember]) -> Duration {
    real.iter().filter_map(|m| cpu_time(m.agent.pid())).sum()
}

/// Runs the benchmark and prints its figures as a Markdown table.
pub async fn run(a: Args) -> Result<(), BenchError> {
    if a.render {
        run_render(&a);
        return Ok(());
    }
    let etcd = EtcdProcess::start(&a.etcd_bin).map_err(|e| BenchError::Start { what: "etcd", source: e })?;
    // simulated members send no heartbeats: without a long grace period the server marks
    // them NotReady after 40 s, and templates created later are placed nowhere
    let grace: &[&str] = if a.agents { &[] } else { &["--cluster-grace-period", "24h"] };
    let server = ServerProcess::start(&sibling_binary("fedctl"), &etcd.endpoint, grace).map_err(|e| BenchError::Start { what: "fedctl server", source: e })?;
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
    for ns in ["bench", "baseline"] {
        post(&http, format!("{base}/api/v1/namespaces"), &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await?;
    }
    let real = if a.agents {
        start_real(&http, &base, &server, &members, a.fedsim_nodes, a.work_syncs).await?
    } else {
        register_simulated(&http, &base, &members).await?;
        Vec::new()
    };
    let weights: Vec<Value> = members.iter().map(|m| json!({"cluster": m, "weight": 1})).collect();
    post(
        &http,
        format!("{base}/apis/policy.fedctl.io/v1alpha1/namespaces/bench/propagationpolicies"),
        &json!({
        "apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "all", "namespace": "bench"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "placement": {"replicaScheduling": {"type": "Divided", "weights": weights}}}}),
    )
    .await?;
    println!(
        "fedctl-bench propagation: templates={} clusters={} members={} work_syncs={} rate={}/s concurrency={} replicas={} object_bytes={}",
        a.templates,
        a.clusters,
        if a.agents { "fedsim + fedctl agent" } else { "simulated (no agents)" },
        if a.work_syncs == 0 { "default".to_string() } else { a.work_syncs.to_string() },
        a.rate,
        a.concurrency,
        a.replicas,
        serde_json::to_vec(&super::server::template()).map(|v| v.len()).unwrap_or(0)
    );

    // baseline: the same creates, selected by no policy
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu0 = quiesce(pid).await.unwrap_or_default();
    let acpu0 = agents_cpu(&real);
    let base_elapsed = create_all(&http, &base, "baseline", &a, |_| {}).await?;
    let cpu1 = quiesce(pid).await.unwrap_or_default();
    let acpu1 = agents_cpu(&real);

    // the watches that observe Works written, Works applied and member objects
    let (clusters, want) = (a.clusters, a.templates);
    let works_url = format!("{base}/apis/work.fedctl.io/v1alpha1/works");
    let rv = list_rv(&http, format!("{works_url}?limit=1")).await?;
    let watch_url = format!("{works_url}?watch=1&resourceVersion={rv}&timeoutSeconds=900");
    let template_of = |ev: &Value| -> Option<(String, String)> {
        let o = &ev["object"];
        Some((o["metadata"]["labels"]["propagation.fedctl.io/name"].as_str()?.to_string(), o["metadata"]["namespace"].as_str()?.to_string()))
    };
    let written = Track::new();
    let mut watchers = vec![watch_into(&http, watch_url.clone(), written.clone(), clusters, want, move |ev| if ev["type"] == "ADDED" { template_of(ev) } else { None })];
    let applied = Track::new();
    let on_member = Track::new();
    if a.agents {
        watchers.push(watch_into(&http, watch_url, applied.clone(), clusters, want, move |ev| {
            let ok = ev["object"].pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Applied" && c["status"] == "True"));
            if ev["type"] == "MODIFIED" && ok {
                template_of(ev)
            } else {
                None
            }
        }));
        for m in &real {
            let (mhttp, mbase) = client_from_kubeconfig(&m.sim.kubeconfig).map_err(BenchError::Request)?;
            let url = format!("{mbase}/apis/apps/v1/deployments");
            let rv = list_rv(&mhttp, format!("{url}?limit=1")).await?;
            let name = m.sim.name.clone();
            watchers.push(watch_into(&mhttp, format!("{url}?watch=1&resourceVersion={rv}&timeoutSeconds=900"), on_member.clone(), clusters, want, move |ev| {
                let md = &ev["object"]["metadata"];
                if ev["type"] == "ADDED" && md["namespace"] == "bench" {
                    Some((md["name"].as_str()?.to_string(), name.clone()))
                } else {
                    None
                }
            }));
        }
    }

    let cpu2 = quiesce(pid).await.unwrap_or_default();
    let acpu2 = agents_cpu(&real);
    let sent = Arc::new(Mutex::new(HashMap::new()));
    let ts = sent.clone();
    let t_start = Instant::now();
    let prop_elapsed = create_all(&http, &base, "bench", &a, move |name| {
        ts.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), Instant::now());
    })
    .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let tracks: Vec<&Arc<Mutex<Track>>> = if a.agents { vec![&written, &on_member, &applied] } else { vec![&written] };
    let finished = || tracks.iter().all(|t| t.lock().unwrap_or_else(|e| e.into_inner()).done.len() >= want);
    while !finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_done = t_start.elapsed();
    let cpu3 = quiesce(pid).await.unwrap_or_default();
    let acpu3 = agents_cpu(&real);
    for w in &watchers {
        w.abort();
    }
    let sent = sent.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let lock = |t: &Arc<Mutex<Track>>| t.lock().unwrap_or_else(|e| e.into_inner()).latencies(&sent);
    let mut rows = vec![("all Works written (Work `ADDED`)", lock(&written))];
    if a.agents {
        rows.push(("on every member (member Deployment `ADDED`)", lock(&on_member)));
        rows.push(("every Work reports `Applied=True`", lock(&applied)));
    }
    let incomplete = rows.iter().find(|(_, l)| l.len() < want).map(|(_, l)| l.len());
    let per_k = |d: Duration| d.as_secs_f64() * 1000.0 / a.templates as f64;
    let (base_cpu, prop_cpu) = (cpu1.saturating_sub(cpu0), cpu3.saturating_sub(cpu2));
    println!();
    println!("| measure | value |");
    println!("|---|---:|");
    println!("| templates created (baseline, unselected) | {} in {:.1} s |", a.templates, base_elapsed.as_secs_f64());
    println!("| templates created (propagated) | {} in {:.1} s; watches done after {:.1} s |", a.templates, prop_elapsed.as_secs_f64(), all_done.as_secs_f64());
    for (what, lat) in rows {
        let n = lat.len();
        let max = lat.iter().cloned().fold(0.0, f64::max);
        let (p50, p99) = median_p99(lat);
        println!("| apply → {what}, p50 | {p50:.1} ms |");
        println!("| apply → {what}, p99 | {p99:.1} ms (Karmada pull mode: ≈ 989 ms) |");
        println!("| apply → {what}, max | {max:.1} ms ({n} templates) |");
    }
    println!("| server CPU, propagated run | {:.2} s ({:.2} s per 1,000 templates) |", prop_cpu.as_secs_f64(), per_k(prop_cpu));
    println!("| server CPU, baseline run | {:.2} s ({:.2} s per 1,000 templates) |", base_cpu.as_secs_f64(), per_k(base_cpu));
    println!("| propagation CPU (difference) | {:.2} s per 1,000 templates ({} Works each {} clusters) |", per_k(prop_cpu.saturating_sub(base_cpu)), a.templates * a.clusters, a.clusters);
    if a.agents {
        let (ab, ap) = (acpu1.saturating_sub(acpu0), acpu3.saturating_sub(acpu2));
        println!("| agents' CPU ({} agents summed), propagated run | {:.2} s per 1,000 templates |", a.clusters, per_k(ap));
        println!("| agents' CPU, baseline run | {:.2} s per 1,000 templates |", per_k(ab));
    }
    if let Some(done) = incomplete {
        return Err(BenchError::Timeout { done, want });
    }
    Ok(())
}

/// A ClusterOverridePolicy with `rules` rules, each for every member: a registry
/// replacement, a label, a plaintext replace of `spec.revisionHistoryLimit`, cycling.
pub fn override_policy(rules: usize) -> Value {
    let rule = |i: usize| match i % 3 {
        0 => json!({"overriders": {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": format!("mirror-{i}.example.com")}]}}),
        1 => json!({"overriders": {"labelsOverrider": [{"operator": "add", "value": {format!("rule-{i}"): "on"}}]}}),
        _ => json!({"overriders": {"plaintext": [{"path": "/spec/revisionHistoryLimit", "operator": "replace", "value": i}]}}),
    };
    json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "ClusterOverridePolicy", "metadata": {"name": "bench"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}], "overrideRules": (0..rules).map(rule).collect::<Vec<_>>()}})
}

/// Renders every template's Work for every cluster as the controller's reconcile does —
/// parse the override policies, pick those selecting the template, render the Work with
/// the cluster's share, apply the overrides, compare with the stored Work — and returns the
/// process CPU time of the median round and a checksum of what was rendered.
fn render_round(templates: &[Value], clusters: &[fedctl::controllers::propagation::placement::ClusterView], policies: &[Value], stored: &mut Vec<Option<Value>>) -> (Duration, usize) {
    use fedctl::controllers::propagation::{overrides, work};
    let pid = std::process::id();
    let c0 = cpu_time(pid).unwrap_or_default();
    let mut sum = 0;
    let mut slot = 0;
    for t in templates {
        let parsed: Vec<overrides::OverridePolicy> = policies.iter().filter_map(|p| overrides::parse(p, true).ok()).collect();
        let key = work::TemplateKey::of(t).expect("template key");
        let labels = t.pointer("/metadata/labels").and_then(Value::as_object);
        let tr = fedctl::controllers::propagation::policy::TemplateRef { api_version: "apps/v1", kind: "Deployment", namespace: key.ns(), name: &key.name, labels };
        let applicable = overrides::applicable(&parsed, &tr);
        for c in clusters {
            let mut d = work::desired_work(t, &key, &c.name, Some(work::Share { replicas: 1, completions: None }));
            if !applicable.is_empty() {
                if let Some(m) = d.pointer_mut("/spec/manifests/0") {
                    let member = overrides::Member { name: &c.name, labels: &c.labels, zone: c.zone.as_deref() };
                    let out = overrides::apply(&applicable, m, &member);
                    work::set_override_annotations(&mut d, &out);
                }
            }
            let differs = stored[slot].as_ref().is_none_or(|w| work::work_differs(w, &d));
            if differs {
                sum += d["spec"]["manifests"][0]["spec"]["template"]["spec"]["containers"][0]["image"].as_str().map_or(0, str::len);
                stored[slot] = Some(d);
            }
            slot += 1;
        }
    }
    (cpu_time(pid).unwrap_or_default().saturating_sub(c0), sum)
}

/// `fedctl-bench propagation --render`: CPU per rendered Work with and without overrides.
fn run_render(a: &Args) {
    use fedctl::controllers::propagation::placement::ClusterView;
    let clusters: Vec<ClusterView> =
        (0..a.clusters).map(|i| ClusterView::from_object(&json!({"metadata": {"name": format!("member-{i}"), "labels": {"env": "prod"}}, "spec": {"zone": format!("zone-{i}")}}))).collect();
    let templates: Vec<Value> = (0..a.templates)
        .map(|i| {
            let mut t = super::server::template();
            t["metadata"]["name"] = json!(format!("web-{i:06}"));
            t["metadata"]["namespace"] = json!("bench");
            t["spec"]["replicas"] = json!(a.replicas);
            t["spec"]["revisionHistoryLimit"] = json!(10);
            t
        })
        .collect();
    println!(
        "fedctl-bench propagation --render: templates={} clusters={} override_rules={} rounds={} object_bytes={} build={}",
        a.templates,
        a.clusters,
        a.override_rules,
        a.rounds,
        serde_json::to_vec(&templates[0]).map(|v| v.len()).unwrap_or(0),
        if cfg!(debug_assertions) { "dev (unoptimized)" } else { "release" }
    );
    let works = (a.templates * a.clusters).max(1);
    for (label, policies) in [("no overrides", vec![]), ("with overrides", vec![override_policy(a.override_rules)])] {
        // first render (every Work new), then re-renders of unchanged templates (every Work compared)
        let mut stored = vec![None; works];
        let (first, _) = render_round(&templates, &clusters, &policies, &mut stored);
        let mut again: Vec<Duration> = (0..a.rounds.max(1)).map(|_| render_round(&templates, &clusters, &policies, &mut stored).0).collect();
        again.sort();
        let median = again[again.len() / 2];
        let per = |d: Duration| d.as_secs_f64() * 1e6 / works as f64;
        println!("  {label:<15} first render: {:>8.1} µs CPU per Work   re-render (unchanged, median of {}): {:>8.1} µs CPU per Work", per(first), again.len(), per(median));
    }
}
