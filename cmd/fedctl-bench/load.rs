//! Load benchmark: many concurrent clients mixing GET, LIST, WATCH and writes against a `fedctl server` whose global view caches the pods of several fedsim members; throughput, p99 per verb, errors by code.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};

use super::median_p99;
use super::procs::{client_from_kubeconfig, cpu_time, register_member, sibling_binary, wait_ready, EtcdProcess, FedsimProcess, ServerProcess};

const V: &str = "/apis/search.fedctl.io/v1alpha1";
/// Pods per simulated node.
const PODS_PER_NODE: usize = 50;
/// Namespace of the clients' ConfigMaps on the federation.
const NS: &str = "load";

/// Flags of `fedctl-bench load`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Concurrent clients (each runs one request at a time).
    #[arg(long, default_value_t = 200)]
    pub clients: usize,
    /// Length of the load phase in seconds.
    #[arg(long, default_value_t = 300)]
    pub seconds: u64,
    /// Member clusters (fedsim processes).
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Pods over all members (rounded up to whole nodes of 50 pods).
    #[arg(long, default_value_t = 100_000)]
    pub pods: usize,
    /// Pod churn per member during the load (events/s asked of fedsim), seen by the watches.
    #[arg(long, default_value_t = 20)]
    pub churn: u32,
    /// Seconds each WATCH stays open (its `timeoutSeconds`).
    #[arg(long, default_value_t = 5)]
    pub watch_seconds: u64,
    /// etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: String,
}

/// What one request was, for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    /// GET one pod through the global view (`clusters/<member>`).
    GetPod,
    /// GET one ConfigMap of the federation.
    GetConfigMap,
    /// LIST the pods of one namespace across all members (global view).
    ListNamespacePods,
    /// LIST the first page (limit 500) of every pod (global view).
    ListAllPodsPage,
    /// LIST the federation's ConfigMaps of the load namespace.
    ListConfigMaps,
    /// WATCH the pods of one namespace (global view): time to the response head.
    Watch,
    /// CREATE a ConfigMap.
    Create,
    /// PATCH (merge) a ConfigMap.
    Patch,
    /// DELETE a ConfigMap.
    Delete,
}

impl Op {
    fn verb(self) -> &'static str {
        match self {
            Op::GetPod | Op::GetConfigMap => "GET",
            Op::ListNamespacePods | Op::ListAllPodsPage | Op::ListConfigMaps => "LIST",
            Op::Watch => "WATCH",
            Op::Create => "CREATE",
            Op::Patch => "PATCH",
            Op::Delete => "DELETE",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Op::GetPod => "pod (global view, one member)",
            Op::GetConfigMap => "ConfigMap (federation, etcd)",
            Op::ListNamespacePods => "pods of one namespace, all members, first page of 500 (global view)",
            Op::ListAllPodsPage => "all pods, first page of 500 (global view)",
            Op::ListConfigMaps => "ConfigMaps of the load namespace (etcd)",
            Op::Watch => "pods of one namespace from the current resourceVersion (global view), to the response head",
            Op::Create => "ConfigMap",
            Op::Patch => "ConfigMap, merge patch",
            Op::Delete => "ConfigMap",
        }
    }
}

/// One client's tallies: latencies (ms) per op, answers by `(verb, code)` (`0`: transport
/// error), watch events received.
#[derive(Default)]
struct Tally {
    lat: BTreeMap<Op, Vec<f64>>,
    codes: BTreeMap<(&'static str, u16), u64>,
    watch_events: u64,
}

/// A pod to GET: `(member, namespace, name)`.
type PodRef = (String, String, String);

struct Client {
    http: reqwest::Client,
    base: String,
    pods: std::sync::Arc<Vec<PodRef>>,
    namespaces: std::sync::Arc<Vec<String>>,
    id: usize,
    watch_seconds: u64,
}

impl Client {
    async fn send(&self, t: &mut Tally, op: Op, method: Method, path: &str, body: Option<(&str, Vec<u8>)>) -> Option<u16> {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).timeout(Duration::from_secs(60));
        if let Some((ct, b)) = body {
            req = req.header("content-type", ct).body(b);
        }
        let start = Instant::now();
        let code = match req.send().await {
            Ok(r) => {
                let code = r.status().as_u16();
                let ok = r.bytes().await.is_ok();
                ok.then_some(code)
            }
            Err(_) => None,
        };
        t.lat.entry(op).or_default().push(start.elapsed().as_secs_f64() * 1e3);
        *t.codes.entry((op.verb(), code.unwrap_or(0))).or_default() += 1;
        code
    }

    /// A watch from the current resourceVersion (read with an uncounted `limit=1` LIST), as
    /// an informer's after its list: events only, no initial state.
    async fn watch(&self, t: &mut Tally, ns: &str) {
        let list = format!("{}{V}/global/api/v1/namespaces/{ns}/pods?limit=1", self.base);
        let rv = match get_json(&self.http, &list).await {
            Ok(v) => v["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string(),
            Err(_) => {
                *t.codes.entry(("LIST", 0)).or_default() += 1;
                return;
            }
        };
        let url = format!("{}{V}/global/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}&timeoutSeconds={}", self.base, self.watch_seconds);
        let start = Instant::now();
        match self.http.get(url).timeout(Duration::from_secs(self.watch_seconds + 30)).send().await {
            Ok(r) => {
                t.lat.entry(Op::Watch).or_default().push(start.elapsed().as_secs_f64() * 1e3);
                *t.codes.entry(("WATCH", r.status().as_u16())).or_default() += 1;
                let mut s = r.bytes_stream();
                while let Some(Ok(chunk)) = s.next().await {
                    t.watch_events += chunk.iter().filter(|b| **b == b'\n').count() as u64;
                }
            }
            Err(_) => *t.codes.entry(("WATCH", 0)).or_default() += 1,
        }
    }

    /// Runs until `until`: each iteration one request picked by weight (GET 40 %, LIST 15 %,
    /// WATCH 5 %, writes 40 %).
    async fn run(self, until: Instant) -> Tally {
        let mut t = Tally::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.id as u64);
        let mut mine: Vec<String> = Vec::new();
        let mut next = 0usize;
        while Instant::now() < until {
            let roll = rng.random_range(0..100);
            let ns = &self.namespaces[rng.random_range(0..self.namespaces.len())];
            match roll {
                0..25 => {
                    let (m, pns, name) = &self.pods[rng.random_range(0..self.pods.len())];
                    self.send(&mut t, Op::GetPod, Method::GET, &format!("{V}/clusters/{m}/api/v1/namespaces/{pns}/pods/{name}"), None).await;
                }
                25..40 if !mine.is_empty() => {
                    let name = &mine[rng.random_range(0..mine.len())];
                    self.send(&mut t, Op::GetConfigMap, Method::GET, &format!("/api/v1/namespaces/{NS}/configmaps/{name}"), None).await;
                }
                25..40 => {
                    let (m, pns, name) = &self.pods[rng.random_range(0..self.pods.len())];
                    self.send(&mut t, Op::GetPod, Method::GET, &format!("{V}/clusters/{m}/api/v1/namespaces/{pns}/pods/{name}"), None).await;
                }
                40..50 => {
                    self.send(&mut t, Op::ListNamespacePods, Method::GET, &format!("{V}/global/api/v1/namespaces/{ns}/pods?limit=500"), None).await;
                }
                50..53 => {
                    self.send(&mut t, Op::ListAllPodsPage, Method::GET, &format!("{V}/global/api/v1/pods?limit=500"), None).await;
                }
                53..55 => {
                    self.send(&mut t, Op::ListConfigMaps, Method::GET, &format!("/api/v1/namespaces/{NS}/configmaps?limit=500"), None).await;
                }
                55..60 => self.watch(&mut t, ns).await,
                _ => {
                    // writes: keep a handful of own ConfigMaps, created, patched and deleted
                    let w = rng.random_range(0..3);
                    if mine.is_empty() || (w == 0 && mine.len() < 5) {
                        let name = format!("c{}-{next}", self.id);
                        next += 1;
                        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"client": self.id.to_string()}}, "data": {"v": "0".repeat(512)}});
                        if self.send(&mut t, Op::Create, Method::POST, &format!("/api/v1/namespaces/{NS}/configmaps"), Some(("application/json", body.to_string().into_bytes()))).await == Some(201) {
                            mine.push(name);
                        }
                    } else if w == 2 {
                        let name = mine.remove(0);
                        self.send(&mut t, Op::Delete, Method::DELETE, &format!("/api/v1/namespaces/{NS}/configmaps/{name}"), None).await;
                    } else {
                        let name = &mine[rng.random_range(0..mine.len())];
                        let body = json!({"data": {"v": rng.random::<u64>().to_string()}});
                        self.send(&mut t, Op::Patch, Method::PATCH, &format!("/api/v1/namespaces/{NS}/configmaps/{name}"), Some(("application/merge-patch+json", body.to_string().into_bytes()))).await;
                    }
                }
            }
        }
        t
    }
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, String> {
    let r = http.get(url).send().await.map_err(|e| e.to_string())?;
    let code = r.status();
    let v: Value = r.json().await.map_err(|e| e.to_string())?;
    if !code.is_success() {
        return Err(format!("GET {url}: {code}: {v}"));
    }
    Ok(v)
}

/// Pods in the global view, counted page by page.
async fn view_pods(http: &reqwest::Client, base: &str) -> Result<usize, String> {
    let (mut n, mut cont) = (0, String::new());
    loop {
        let v = get_json(http, &format!("{base}{V}/global/api/v1/pods?limit=5000&continue={cont}")).await?;
        n += v["items"].as_array().map(Vec::len).unwrap_or(0);
        cont = v["metadata"]["continue"].as_str().unwrap_or("").to_string();
        if cont.is_empty() {
            return Ok(n);
        }
    }
}

/// Runs the benchmark and prints its figures.
pub async fn run(a: Args) -> Result<(), String> {
    let etcd = EtcdProcess::start(&a.etcd_bin).map_err(|e| format!("start etcd: {e}"))?;
    let server = ServerProcess::start(&sibling_binary("fedctl"), &etcd.endpoint, &["--cache-resources", "pods"]).map_err(|e| format!("start fedctl: {e}"))?;
    let (http, base) = client_from_kubeconfig(&server.kubeconfig())?;
    wait_ready(&http, &base, Duration::from_millis(600 * 50)).await?;
    let members_n = a.members.max(1);
    let nodes = a.pods.div_ceil(members_n).div_ceil(PODS_PER_NODE).max(1);
    let fedsim = sibling_binary("fedsim");
    let mut members = Vec::new();
    for i in 0..members_n {
        let name = format!("member-{i}");
        let (n, p, s) = (nodes.to_string(), PODS_PER_NODE.to_string(), (i + 1).to_string());
        let m =
            FedsimProcess::start(&fedsim, &name, &["--nodes", &n, "--pods-per-node", &p, "--namespaces", "20", "--seed", &s], Duration::from_secs(300)).map_err(|e| format!("start fedsim: {e}"))?;
        members.push(m);
    }
    let mut want = 0usize;
    for m in &members {
        want += m.admin(Method::GET, "/fedsim/status").await?["pods"].as_u64().unwrap_or(0) as usize;
    }
    // register the members with the view (as `fedctl join` and the agent would)
    for m in &members {
        register_member(&http, &base, m).await?;
    }
    http.post(format!("{base}/api/v1/namespaces")).json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).send().await.map_err(|e| e.to_string())?;
    let t_sync = Instant::now();
    loop {
        let n = view_pods(&http, &base).await.unwrap_or(0);
        if n >= want {
            break;
        }
        if t_sync.elapsed() > Duration::from_secs(600) {
            return Err(format!("view has {n} of {want} pods after 600 s"));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let sync = t_sync.elapsed();
    // pods to GET and namespaces to LIST/WATCH: a sample from each member
    let mut pods = Vec::new();
    let mut namespaces = std::collections::BTreeSet::new();
    for m in &members {
        let v = get_json(&http, &format!("{base}{V}/clusters/{}/api/v1/pods?limit=2000", m.name)).await?;
        for p in v["items"].as_array().into_iter().flatten() {
            let (ns, name) = (p["metadata"]["namespace"].as_str().unwrap_or(""), p["metadata"]["name"].as_str().unwrap_or(""));
            namespaces.insert(ns.to_string());
            pods.push((m.name.clone(), ns.to_string(), name.to_string()));
        }
    }
    if pods.is_empty() {
        return Err("no pods sampled".into());
    }
    println!(
        "fedctl-bench load: clients={} seconds={} members={} pods={want} (synced in {:.1} s) churn/member={}/s watch={} s",
        a.clients,
        a.seconds,
        members_n,
        sync.as_secs_f64(),
        a.churn,
        a.watch_seconds
    );
    for m in &members {
        m.admin(Method::POST, &format!("/fedsim/churn?rate={}", a.churn)).await?;
    }
    let (pods, namespaces) = (std::sync::Arc::new(pods), std::sync::Arc::new(namespaces.into_iter().collect::<Vec<_>>()));
    let cpu0 = cpu_time(server.pid()).unwrap_or_default();
    let rss0 = server.rss_kib().unwrap_or(0);
    let start = Instant::now();
    let until = start + Duration::from_secs(a.seconds);
    let mut tasks = Vec::new();
    for id in 0..a.clients {
        let c = Client { http: http.clone(), base: base.clone(), pods: pods.clone(), namespaces: namespaces.clone(), id, watch_seconds: a.watch_seconds.max(1) };
        tasks.push(tokio::spawn(c.run(until)));
    }
    let mut all = Tally::default();
    let mut peak_rss = rss0;
    let mut tasks = futures::future::join_all(tasks);
    loop {
        tokio::select! {
            res = &mut tasks => {
                for t in res.into_iter().flatten() {
                    for (op, v) in t.lat {
                        all.lat.entry(op).or_default().extend(v);
                    }
                    for (k, n) in t.codes {
                        *all.codes.entry(k).or_default() += n;
                    }
                    all.watch_events += t.watch_events;
                }
                break;
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => peak_rss = peak_rss.max(server.rss_kib().unwrap_or(0)),
        }
    }
    let el = start.elapsed().as_secs_f64();
    let cpu = cpu_time(server.pid()).unwrap_or_default().saturating_sub(cpu0).as_secs_f64();
    for m in &members {
        let _ = m.admin(Method::POST, "/fedsim/churn?rate=0").await;
    }
    let total: u64 = all.codes.values().sum();
    println!();
    println!("| verb | request | count | p50 | p99 |");
    println!("|---|---|---|---|---|");
    let mut by_verb: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (op, v) in &all.lat {
        by_verb.entry(op.verb()).or_default().extend(v.iter().copied());
        let (p50, p99) = median_p99(v.clone());
        println!("| {} | {} | {} | {p50:.1} ms | {p99:.1} ms |", op.verb(), op.what(), v.len());
    }
    for (verb, v) in by_verb {
        let n = v.len();
        let (p50, p99) = median_p99(v);
        println!("| **{verb}** | all | {n} | {p50:.1} ms | {p99:.1} ms |");
    }
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| requests | {total} in {el:.1} s = {:.0}/s |", total as f64 / el);
    let codes: Vec<String> = {
        let mut c: BTreeMap<u16, u64> = BTreeMap::new();
        for ((_, code), n) in &all.codes {
            *c.entry(*code).or_default() += n;
        }
        c.iter().map(|(k, n)| if *k == 0 { format!("transport error: {n}") } else { format!("{k}: {n}") }).collect()
    };
    println!("| answers by code | {} |", codes.join(", "));
    let errors: Vec<String> = all.codes.iter().filter(|((_, c), _)| *c == 0 || *c >= 400).map(|((v, c), n)| format!("{v} {c}: {n}")).collect();
    println!("| errors by verb and code | {} |", if errors.is_empty() { "none".into() } else { errors.join(", ") });
    println!("| watch events received | {} |", all.watch_events);
    println!("| server CPU | {:.0} % of one core |", cpu / el * 100.0);
    println!("| server RSS before / peak | {:.0} MiB / {:.0} MiB |", rss0 as f64 / 1024.0, peak_rss as f64 / 1024.0);
    drop(members);
    drop(server);
    drop(etcd);
    Ok(())
}
