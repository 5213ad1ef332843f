//! Out-of-process cache shards end to end: real etcd, a `fedctl server --cache-endpoints`,
//! two `fedctl cache` processes holding shards {0,1} and {2,3} of 4, two fedsim members with
//! churn. The global view through the server equals the members (paged and unpaged LISTs,
//! kubectl's CLUSTER column); a cache process killed with SIGKILL mid-churn and restarted
//! never makes a watcher miss or repeat an event silently; each process reports only its
//! shards.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::AsyncFnMut;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::member::{register, register_in_zone};
use common::procs::FedsimProcess;
use common::server::{free_port, ApiClient, Auth, FedServer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use reqwest::Method;
use serde_json::Value;

const V: &str = "/apis/search.fedctl.io/v1alpha1";

/// A `fedctl cache` process (killed by its own pid when dropped).
struct CacheProc {
    args: Vec<String>,
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl CacheProc {
    fn start(etcd: &str, data_dir: &Path, port: u16, shards: &str, log: PathBuf) -> CacheProc {
        Self::start_holding(etcd, data_dir, port, &["--shards", shards], log)
    }

    /// A process holding what `holding` says (`--shards 0,1` or `--zone z1`, and any other
    /// flags of `fedctl cache`).
    fn start_holding(etcd: &str, data_dir: &Path, port: u16, holding: &[&str], log: PathBuf) -> CacheProc {
        let args = ["cache"]
            .iter()
            .chain(holding)
            .chain(&[
                "--shard-count",
                "4",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--etcd-servers",
                etcd,
                "--data-dir",
                data_dir.to_str().unwrap(),
                "--bookmark-interval-seconds",
                "1",
                "--cache-rebalance-seconds",
                "1",
            ])
            .map(|s| s.to_string())
            .collect();
        let mut c = CacheProc { args, port, log, child: None };
        c.spawn();
        c
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let err = log.try_clone().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_fedctl")).args(&self.args).stdout(Stdio::from(log)).stderr(Stdio::from(err)).spawn().expect("start fedctl cache");
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

impl Drop for CacheProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn start_member(name: &str, nodes: usize, ppn: usize, seed: u64, churn: u32) -> FedsimProcess {
    start_skewed_member(name, nodes, ppn, seed, churn, "1.3")
}

fn start_skewed_member(name: &str, nodes: usize, ppn: usize, seed: u64, churn: u32, skew: &str) -> FedsimProcess {
    let (n, p, s, c) = (nodes.to_string(), ppn.to_string(), seed.to_string(), churn.to_string());
    FedsimProcess::start(
        Path::new(env!("CARGO_BIN_EXE_fedsim")),
        name,
        &["--nodes", &n, "--pods-per-node", &p, "--namespaces", "10", "--namespace-skew", skew, "--churn", &c, "--seed", &s],
        Duration::from_secs(60),
    )
    .expect("start fedsim")
}

type State = BTreeMap<(String, String), String>;

/// (cluster, uid) → member resourceVersion of every pod of the members, from fresh LISTs.
async fn members_state(members: &[&FedsimProcess]) -> State {
    let mut out = BTreeMap::new();
    for m in members {
        let kc = kube::config::Kubeconfig::read_from(&m.kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        let api: Api<Pod> = Api::all(kube::Client::try_from(cfg).unwrap());
        for p in api.list(&ListParams::default()).await.expect("member list").items {
            out.insert((m.name.clone(), p.metadata.uid.unwrap_or_default()), p.metadata.resource_version.unwrap_or_default());
        }
    }
    out
}

fn key_of(p: &Value) -> ((String, String), String) {
    let a = &p["metadata"]["annotations"];
    ((a["fedctl.io/cluster"].as_str().unwrap_or("").to_string(), p["metadata"]["uid"].as_str().unwrap_or("").to_string()), a["fedctl.io/member-resource-version"].as_str().unwrap_or("").to_string())
}

async fn set_churn(members: &[&FedsimProcess], rate: u32) {
    for m in members {
        m.admin(Method::POST, &format!("/fedsim/churn?rate={rate}")).await.expect("set churn");
    }
}

async fn wait_for(what: &str, secs: u64, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A paged global LIST: the objects (each at most once) and whether every page carried the
/// first page's resourceVersion.
async fn paged(api: &ApiClient, limit: usize) -> Result<State, String> {
    let mut out = BTreeMap::new();
    let mut cont = String::new();
    let mut rv = None;
    loop {
        let r = api.get(&format!("{V}/global/api/v1/pods?limit={limit}&continue={cont}")).await;
        if r.status != 200 {
            return Err(format!("{}: {}", r.status, r.text));
        }
        let got = r.json["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
        assert_eq!(rv.get_or_insert(got.clone()), &got, "every page carries the first page's RV");
        let items = r.json["items"].as_array().unwrap();
        assert!(items.len() <= limit);
        for p in items {
            let (k, v) = key_of(p);
            assert!(out.insert(k, v).is_none(), "an object listed twice");
        }
        cont = r.json["metadata"]["continue"].as_str().unwrap_or("").to_string();
        if cont.is_empty() {
            return Ok(out);
        }
    }
}

/// The watcher of part (c): list, then watch and resume from its last resourceVersion;
/// relists only after a 410. Counts events seen twice and objects that an event contradicts.
#[derive(Default)]
struct Watcher {
    state: State,
    relists: usize,
    resumes: usize,
    events: usize,
    duplicates: Vec<String>,
    /// Events that do not fit the state (ADDED of a known object, MODIFIED or DELETED of an
    /// unknown one): the trace of a missed event.
    contradictions: Vec<String>,
    last_rv: String,
    /// What the watcher did, for the failure report: LIST/WATCH/BM/EV lines with decoded
    /// resourceVersions.
    trace: Vec<String>,
}

/// A global resourceVersion in readable form (`member-a=12,member-b=7`), for failure reports.
fn readable_rv(rv: &str) -> String {
    use base64::Engine;
    rv.strip_prefix('g').and_then(|b| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(b).ok()).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_else(|| rv.to_string())
}

/// A reflector-like watcher of `global/api/v1/<scope>pods` (`scope` empty or
/// `namespaces/<ns>/`): LIST, then WATCH from the last resourceVersion, resuming after every
/// end and relisting after a 410; records its state, duplicates and contradictions.
async fn run_watcher(http: reqwest::Client, base: String, scope: String, shared: Arc<Mutex<Watcher>>, stop: Arc<std::sync::atomic::AtomicBool>) {
    run_watcher_with_timeout(http, base, scope, shared, stop, 20).await
}

/// [`run_watcher`] whose watches each last `watch_timeout` seconds (then resume).
async fn run_watcher_with_timeout(http: reqwest::Client, base: String, scope: String, shared: Arc<Mutex<Watcher>>, stop: Arc<std::sync::atomic::AtomicBool>, watch_timeout: u32) {
    let list = async |http: &reqwest::Client| -> Option<(State, String)> {
        let r = http.get(format!("{base}{V}/global/api/v1/{scope}pods")).send().await.ok()?;
        if r.status() != 200 {
            return None;
        }
        let v: Value = r.json().await.ok()?;
        Some((v["items"].as_array()?.iter().map(key_of).collect(), v["metadata"]["resourceVersion"].as_str()?.to_string()))
    };
    let mut need_list = true;
    let mut seen: BTreeSet<(String, String, String, String)> = BTreeSet::new();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        if need_list {
            let Some((state, rv)) = list(&http).await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let mut w = shared.lock().unwrap();
            w.state = state;
            w.trace.push(format!("LIST at {}", readable_rv(&rv)));
            w.last_rv = rv;
            w.relists += 1;
            seen.clear();
            need_list = false;
        }
        let rv = shared.lock().unwrap().last_rv.clone();
        let resp = http.get(format!("{base}{V}/global/api/v1/{scope}pods?watch=1&allowWatchBookmarks=true&timeoutSeconds={watch_timeout}&resourceVersion={rv}")).send().await;
        let resp = match resp {
            Ok(r) if r.status() == 200 => r,
            Ok(r) if r.status() == 410 => {
                need_list = true;
                continue;
            }
            other => {
                let t = match other {
                    Ok(r) => format!("WATCH refused: {}", r.status()),
                    Err(e) => format!("WATCH failed: {e}"),
                };
                shared.lock().unwrap().trace.push(t);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let opened = Instant::now();
        {
            let mut w = shared.lock().unwrap();
            w.resumes += 1;
            w.trace.push(format!("WATCH from {} at {:?}", readable_rv(&rv), opened));
        }
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        'stream: loop {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let chunk = match tokio::time::timeout(Duration::from_millis(500), body.next()).await {
                Err(_) => continue,
                Ok(Some(Ok(c))) => c,
                Ok(end) => {
                    let t = format!("END after {:?}: {}", opened.elapsed(), if end.is_some() { "error" } else { "closed" });
                    shared.lock().unwrap().trace.push(t);
                    break;
                }
            };
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let ev: Value = serde_json::from_slice(&line).expect("watch line parses");
                let ty = ev["type"].as_str().unwrap_or("").to_string();
                let obj = &ev["object"];
                let mut w = shared.lock().unwrap();
                match ty.as_str() {
                    "ERROR" => {
                        assert_eq!(obj["code"], 410, "only 410 ends a resumed watch with an error: {ev}");
                        need_list = true;
                        break 'stream;
                    }
                    "BOOKMARK" => {
                        w.last_rv = obj["metadata"]["resourceVersion"].as_str().unwrap().to_string();
                        let t = format!("BM {}", readable_rv(&w.last_rv));
                        w.trace.push(t);
                    }
                    _ => {
                        let (k, mrv) = key_of(obj);
                        if !seen.insert((ty.clone(), k.0.clone(), k.1.clone(), mrv.clone())) {
                            w.duplicates.push(format!("{ty} {k:?} {mrv}"));
                        }
                        w.events += 1;
                        let known = w.state.contains_key(&k);
                        if known == (ty == "ADDED") {
                            w.contradictions.push(format!("{ty} {k:?} {mrv} (known: {known})"));
                        }
                        if ty == "DELETED" {
                            w.state.remove(&k);
                        } else {
                            w.state.insert(k.clone(), mrv.clone());
                        }
                        w.last_rv = obj["metadata"]["resourceVersion"].as_str().unwrap().to_string();
                        let t = format!("EV {ty} {}/{} mrv {mrv} at {}", k.0, k.1, readable_rv(&w.last_rv));
                        w.trace.push(t);
                    }
                }
            }
        }
    }
}

fn http_client(kubeconfig: &Path) -> reqwest::Client {
    let kc = fedctl::pki::kubeconfig::Kubeconfig::load(kubeconfig).unwrap();
    let ca = kc.current_cluster().unwrap().ca_pem().unwrap().unwrap();
    let user = kc.current_user().unwrap();
    let (c, k) = (user.client_cert_pem().unwrap().unwrap(), user.client_key_pem().unwrap().unwrap());
    let tls = fedctl::pki::client_tls_config(&ca, Some((&c, &k))).unwrap();
    reqwest::Client::builder().use_preconfigured_tls((*tls).clone()).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cache_processes_serve_the_global_view() {
    let etcd = EtcdServer::start_new();
    let (p1, p2) = (free_port(), free_port());
    let endpoints = format!("https://127.0.0.1:{p1},https://127.0.0.1:{p2}");
    // (the server stores the first shard map at once and does not rebalance during this test)
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--bookmark-interval-seconds", "1", "--cache-rebalance-seconds", "3600", "--cache-endpoints", &endpoints]);
    let logs = tempfile::tempdir().unwrap();
    let mut c1 = CacheProc::start(&etcd.endpoint(), &server.data_path(), p1, "0,1", logs.path().join("cache-1.log"));
    let c2 = CacheProc::start(&etcd.endpoint(), &server.data_path(), p2, "2,3", logs.path().join("cache-2.log"));
    let dump_logs = || format!("cache 1:\n{}\ncache 2:\n{}", std::fs::read_to_string(c1_log(&logs)).unwrap_or_default(), std::fs::read_to_string(logs.path().join("cache-2.log")).unwrap_or_default());
    let a = start_member("member-a", 3, 8, 11, 10);
    let b = start_member("member-b", 2, 12, 12, 10);
    let members = [&a, &b];
    register(&server, &a).await;
    register(&server, &b).await;
    let api = server.client();
    let kubeconfig = server.kubeconfig();

    wait_for("both members in the view", 60, async || {
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        let clusters: BTreeSet<String> = r.json["items"].as_array().map(|i| i.iter().map(|p| key_of(p).0 .0).collect()).unwrap_or_default();
        clusters.len() == 2
    })
    .await;

    // (d) each process reports only its shards; together they hold the view
    let mut held = 0;
    for (c, want) in [(&c1, vec![0, 1]), (&c2, vec![2, 3])] {
        let cl = ApiClient::new(&kubeconfig, &c.url(), Auth::ClientCert);
        let s = cl.get(&format!("{V}/shards")).await;
        let ids: Vec<u64> = s.ok()["shards"].as_array().unwrap().iter().map(|x| x["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, want, "{}", s.text);
        held += s.json["shards"].as_array().unwrap().iter().map(|x| x["kinds"]["pods"]["objects"].as_u64().unwrap()).sum::<u64>();
        assert!(s.json["resourceVersions"]["pods"].as_str().is_some_and(|r| r.starts_with('g')));
        // its metrics: only its shards
        let m = cl.get("/metrics").await;
        assert_eq!(m.status, 200, "{}", m.text);
        for i in 0..4u64 {
            let series = format!(r#"fedctl_cache_objects{{shard="{i}",resource="pods"}}"#);
            assert_eq!(m.text.contains(&series), want.contains(&i), "shard {i} in the metrics of a process holding {want:?}");
        }
        // only callers with a client certificate of the federation CA
        let anon = ApiClient::new(&kubeconfig, &c.url(), Auth::None);
        assert_eq!(anon.get(&format!("{V}/shards")).await.status, 401);
    }
    assert!(held > 0);
    // the server's /shards: every endpoint's
    let all = api.get(&format!("{V}/shards")).await;
    let eps = all.ok()["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 2, "{}", all.text);
    assert_eq!(eps[1]["status"]["shards"].as_array().unwrap().len(), 2, "{}", all.text);

    // a new shard map moves namespaces between the processes: both adopt it (relisting what
    // they now hold) and the view stays whole (checked by (a) below)
    let (map_key, map_before) = {
        let mut etcd_c = etcd_client::Client::connect([etcd.endpoint()], None).await.unwrap();
        let key = fedctl::cache::shard::SHARD_MAP_KEY;
        let mut tries = 0;
        let cur = loop {
            let r = etcd_c.get(key, None).await.unwrap();
            if let Some(kv) = r.kvs().first() {
                break serde_json::from_slice::<fedctl::cache::shard::ShardMap>(kv.value()).unwrap();
            }
            tries += 1;
            assert!(tries < 50, "the server stores the first shard map");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let pods = api.get(&format!("{V}/global/api/v1/pods")).await;
        let namespaces: BTreeSet<String> = pods.ok()["items"].as_array().unwrap().iter().map(|p| p["metadata"]["namespace"].as_str().unwrap().to_string()).collect();
        let mut next = fedctl::cache::shard::ShardMap { version: cur.version + 1, shards: 4, namespaces: BTreeMap::new() };
        for (i, ns) in namespaces.iter().enumerate() {
            // each namespace on another shard than the hash placed it, the first split
            let hashed = cur.shard(ns, "", 4) as u32;
            let v = if i == 0 { vec![(hashed + 1) % 4, (hashed + 2) % 4] } else { vec![(hashed + 2) % 4] };
            next.namespaces.insert(ns.clone(), v);
        }
        etcd_c.put(key, serde_json::to_vec(&next).unwrap(), None).await.unwrap();
        (next.version, cur.version)
    };
    assert!(map_key > map_before);
    wait_for("both processes on the new shard map", 30, async || {
        let mut ok = true;
        for c in [&c1, &c2] {
            let s = ApiClient::new(&kubeconfig, &c.url(), Auth::ClientCert).get(&format!("{V}/shards")).await;
            ok &= s.json["mapVersion"].as_u64() == Some(map_key) && s.json["synced"] == true;
        }
        ok
    })
    .await;

    // (a) quiet: the global LIST, unpaged and paged, equals the members' pods
    set_churn(&members, 0).await;
    let mut last = String::new();
    let mut tries = 0;
    loop {
        let want = members_state(&members).await;
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        let unpaged: State = r.ok()["items"].as_array().unwrap().iter().map(key_of).collect();
        let pages = paged(&api, 50).await;
        if unpaged == want && pages.as_ref().is_ok_and(|p| *p == want) {
            break;
        }
        last = format!("members {} objects, unpaged {}, paged {:?}", want.len(), unpaged.len(), pages.map(|p| p.len()));
        tries += 1;
        assert!(tries < 60, "global LIST != members: {last}\n{}", dump_logs());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = last;
    // under churn: a paged LIST lists each object at most once (checked inside)
    set_churn(&members, 10).await;
    paged(&api, 50).await.expect("paged LIST under churn");

    // (b) kubectl: the CLUSTER column
    for v in ["1.27", "1.33"] {
        let Some(bin) = find_kubectl(v) else { continue };
        let cache = logs.path().join(format!("kubectl-{v}"));
        std::fs::create_dir_all(&cache).unwrap();
        let k = Kubectl::new(bin, v, &kubeconfig, &cache);
        let out = k.run(&["get", "pods", "-A", "--context", "global"]);
        let text = out.ok().to_string();
        assert!(text.lines().next().unwrap_or("").contains("CLUSTER"), "kubectl {v}: {text}");
        assert!(text.contains("member-a") && text.contains("member-b"), "kubectl {v}: both members");
        // a Table watch through the MUX: the initial list, then events of both members
        let w = k.spawn(&["get", "pods", "-A", "-w", "--context", "global"]);
        assert!(w.wait_for(Duration::from_secs(20), |out| out.contains("CLUSTER") && out.contains("member-a") && out.contains("member-b")), "kubectl {v} -w: {}\n{}", w.stdout(), w.stderr());
        let before = w.stdout().lines().count();
        assert!(w.wait_for(Duration::from_secs(20), |out| out.lines().count() > before + 3), "kubectl {v} -w: events under churn: {}", w.stdout());
    }

    // GET by name through the MUX, and a delete routed to the owning member
    let listed = api.get(&format!("{V}/clusters/member-b/api/v1/pods")).await;
    let victim =
        listed.ok()["items"].as_array().unwrap().iter().map(|p| (p["metadata"]["namespace"].as_str().unwrap().to_string(), p["metadata"]["name"].as_str().unwrap().to_string())).next().unwrap();
    let one = api.get(&format!("{V}/global/api/v1/namespaces/{}/pods/{}", victim.0, victim.1)).await;
    assert_eq!(one.ok()["metadata"]["annotations"]["fedctl.io/cluster"], "member-b", "{}", one.text);
    api.get(&format!("{V}/global/api/v1/namespaces/{}/pods/no-such-pod", victim.0)).await.assert_status(404, "NotFound");
    let del = api.delete(&format!("{V}/global/api/v1/namespaces/{}/pods/{}?gracePeriodSeconds=0", victim.0, victim.1)).await;
    assert!(del.status < 300, "delete through the global view: {} {}", del.status, del.text);
    wait_for("the pod gone from the view", 30, async || api.get(&format!("{V}/global/api/v1/namespaces/{}/pods/{}", victim.0, victim.1)).await.status == 404).await;

    // a resumed watch is exactly once through the MUX: w1 stays open; w2 reads some events
    // and is dropped; w3 resumes from w2's last global RV; w2 + w3 == w1
    let rv0 = api.get(&format!("{V}/global/api/v1/pods")).await.ok()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut w1 = api.watch(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion={rv0}")).await;
    let mut w2 = api.watch(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion={rv0}")).await;
    let mut seq2 = Vec::new();
    for _ in 0..15 {
        seq2.push(w2.expect_event(Duration::from_secs(10)).await);
    }
    drop(w2);
    let last = seq2.last().unwrap()["object"]["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut w3 = api.watch(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion={last}")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    set_churn(&members, 0).await;
    let ev_key = |e: &Value| {
        let m = &e["object"]["metadata"];
        (
            e["type"].as_str().unwrap_or("").to_string(),
            m["annotations"]["fedctl.io/cluster"].as_str().unwrap_or("").to_string(),
            m["uid"].as_str().unwrap_or("").to_string(),
            m["annotations"]["fedctl.io/member-resource-version"].as_str().unwrap_or("").to_string(),
        )
    };
    // (the merged resourceVersions other clusters carry depend on when each endpoint's
    // progress arrived, so events are compared by their member resourceVersion)
    let all1: Vec<_> = w1.drain_for(Duration::from_secs(2)).await.iter().map(ev_key).collect();
    let mut joined: Vec<_> = seq2.iter().map(ev_key).collect();
    joined.extend(w3.drain_for(Duration::from_secs(2)).await.iter().map(ev_key));
    assert!(all1.len() > 15, "churn produced events: {}", all1.len());
    let per_cluster = |v: &[(String, String, String, String)], c: &str| v.iter().filter(|e| e.1 == c).cloned().collect::<Vec<_>>();
    for c in ["member-a", "member-b"] {
        assert_eq!(per_cluster(&joined, c), per_cluster(&all1, c), "{c}: a resumed watch gets every later event exactly once, in order");
    }
    assert_eq!(joined.len(), all1.len());
    drop((w1, w3));
    set_churn(&members, 10).await;

    // (c) kill -9 one cache process mid-churn and restart it: the watcher resumes (or gets
    // a 410 and relists), never silently misses or repeats an event
    let shared = Arc::new(Mutex::new(Watcher::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let task = tokio::spawn(run_watcher(http_client(&kubeconfig), server.url(), String::new(), shared.clone(), stop.clone()));
    wait_for("watcher events", 30, async || shared.lock().unwrap().events > 20).await;
    c1.kill9();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // member-a holds every request for 6 s: the restarted process's first list of it waits
    a.admin(Method::POST, "/fedsim/faults/pause?seconds=6").await.expect("pause member-a");
    c1.spawn();
    // until the restarted process has ended its first list of the members, a LIST is refused
    // (503 while it does not answer, then 429 while it initializes), never answered with a
    // view missing whole members
    let t = Instant::now();
    let mut refused = BTreeMap::<u16, usize>::new();
    loop {
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        if r.status == 200 {
            let clusters: BTreeSet<String> = r.json["items"].as_array().unwrap().iter().map(|p| key_of(p).0 .0).collect();
            assert_eq!(clusters.len(), members.len(), "the first LIST after the restart holds every member (refused before: {refused:?})");
            break;
        }
        assert!(r.status == 429 || r.status == 503, "{}: {}", r.status, r.text);
        *refused.entry(r.status).or_default() += 1;
        assert!(t.elapsed() < Duration::from_secs(60), "no LIST answered after the restart: {refused:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("LISTs refused while the process restarted: {refused:?}");
    assert!(refused.get(&429).is_some_and(|n| *n > 0), "the restarted process was initializing for seconds, and said so: {refused:?}");
    wait_for("watcher resumed after the restart", 60, async || shared.lock().unwrap().relists >= 2 || shared.lock().unwrap().resumes >= 2).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    set_churn(&members, 0).await;
    let mut tries = 0;
    loop {
        let want = members_state(&members).await;
        let (got, dups) = {
            let w = shared.lock().unwrap();
            (w.state.clone(), w.duplicates.clone())
        };
        assert!(dups.is_empty(), "events delivered twice: {dups:?}");
        let contradictions = shared.lock().unwrap().contradictions.clone();
        assert!(contradictions.is_empty(), "events that contradict the watcher's state: {contradictions:?}");
        if got == want {
            break;
        }
        tries += 1;
        if tries > 60 {
            let missing = want.keys().filter(|k| !got.contains_key(*k)).count();
            let extra = got.keys().filter(|k| !want.contains_key(*k)).count();
            let stale = want.iter().filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v)).count();
            panic!("watcher state != members: missing {missing}, extra {extra}, stale {stale}\n{}", dump_logs());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    let w = shared.lock().unwrap();
    eprintln!("watcher: {} events, {} watches, {} lists", w.events, w.resumes, w.relists);
    assert!(w.events > 20 && w.resumes >= 2, "events {}, resumes {}, relists {}", w.events, w.resumes, w.relists);
    drop(c2);
}

/// One `fedctl cache --zone` process per zone behind the server: each follows only its zone's
/// members (and says so in `/shards`), the view through the MUX is every member's pods
/// (unpaged, paged, one member), a member that joins a zone later appears in it, and a
/// watcher resuming every 3 s under churn gets every event exactly once without a 410.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zone_cache_processes_serve_the_global_view() {
    let etcd = EtcdServer::start_new();
    let (p1, p2) = (free_port(), free_port());
    let endpoints = format!("https://127.0.0.1:{p1},https://127.0.0.1:{p2}");
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--bookmark-interval-seconds", "1", "--cache-rebalance-seconds", "3600", "--cache-endpoints", &endpoints]);
    let logs = tempfile::tempdir().unwrap();
    let z1 = CacheProc::start_holding(&etcd.endpoint(), &server.data_path(), p1, &["--zone", "z1"], logs.path().join("cache-z1.log"));
    // one member LIST at a time: z2's second member is listed only if the first one's LIST
    // gave its permit back (the permits bound LISTs, not watches)
    let z2 = CacheProc::start_holding(&etcd.endpoint(), &server.data_path(), p2, &["--zone", "z2", "--list-concurrency", "1"], logs.path().join("cache-z2.log"));
    let dump_logs =
        || format!("z1:\n{}\nz2:\n{}", std::fs::read_to_string(logs.path().join("cache-z1.log")).unwrap_or_default(), std::fs::read_to_string(logs.path().join("cache-z2.log")).unwrap_or_default());
    let a = start_member("member-a", 2, 8, 21, 0);
    let b = start_member("member-b", 2, 6, 22, 0);
    let c = start_member("member-c", 3, 5, 23, 0);
    register_in_zone(&server, &a, Some("z1")).await;
    register_in_zone(&server, &b, Some("z1")).await;
    register_in_zone(&server, &c, Some("z2")).await;
    let api = server.client();
    let kubeconfig = server.kubeconfig();
    let members = [&a, &b, &c];

    // quiet: the view through the MUX equals the members, unpaged and paged
    let mut tries = 0;
    let want = members_state(&members).await;
    loop {
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        let unpaged: State = r.json["items"].as_array().map(|i| i.iter().map(key_of).collect()).unwrap_or_default();
        let pages = paged(&api, 7).await;
        if unpaged == want && pages.as_ref().is_ok_and(|p| *p == want) {
            break;
        }
        tries += 1;
        assert!(
            tries < 120,
            "global LIST != members: {} vs {} ({}: {}); paged {:?}\n{}",
            unpaged.len(),
            want.len(),
            r.status,
            r.text.chars().take(300).collect::<String>(),
            pages.map(|p| p.len()),
            dump_logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // each process follows its own zone's members only, and holds every shard
    for (proc_, zone, clusters) in [(&z1, "z1", vec!["member-a", "member-b"]), (&z2, "z2", vec!["member-c"])] {
        let s = ApiClient::new(&kubeconfig, &proc_.url(), Auth::ClientCert).get(&format!("{V}/shards")).await;
        assert_eq!(s.ok()["zone"], zone, "{}", s.text);
        let held: Vec<String> = fedctl::cache::rv::GlobalRv::decode(s.json["resourceVersions"]["pods"].as_str().unwrap()).unwrap().0.into_keys().collect();
        assert_eq!(held, clusters, "zone {zone}: the members it follows");
        assert_eq!(s.json["shards"].as_array().unwrap().len(), 4, "zone {zone}: every shard by default");
        let pods: u64 = s.json["shards"].as_array().unwrap().iter().map(|x| x["kinds"]["pods"]["objects"].as_u64().unwrap()).sum();
        assert_eq!(pods as usize, want.keys().filter(|k| clusters.contains(&k.0.as_str())).count(), "zone {zone}: its members' pods");
    }
    // one member: only its pods, from its zone's process
    let r = api.get(&format!("{V}/clusters/member-c/api/v1/pods")).await;
    let got: State = r.ok()["items"].as_array().unwrap().iter().map(key_of).collect();
    assert_eq!(got, want.iter().filter(|(k, _)| k.0 == "member-c").map(|(k, v)| (k.clone(), v.clone())).collect::<State>());

    // a watcher resuming every 3 s while the members churn, and a member joining z2 meanwhile
    set_churn(&members, 10).await;
    let shared = Arc::new(Mutex::new(Watcher::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let task = tokio::spawn(run_watcher_with_timeout(http_client(&kubeconfig), server.url(), String::new(), shared.clone(), stop.clone(), 3));
    wait_for("watcher events", 30, async || shared.lock().unwrap().events > 20).await;
    let d = start_member("member-d", 2, 4, 24, 10);
    register_in_zone(&server, &d, Some("z2")).await;
    wait_for("member-d in the watcher's state", 60, async || shared.lock().unwrap().state.keys().any(|k| k.0 == "member-d")).await;
    let before = shared.lock().unwrap().resumes;
    wait_for("four more resumed watches under churn", 60, async || shared.lock().unwrap().resumes >= before + 4).await;
    let members = [&a, &b, &c, &d];
    set_churn(&members, 0).await;
    let mut tries = 0;
    loop {
        let want = members_state(&members).await;
        let w = shared.lock().unwrap();
        assert!(w.duplicates.is_empty(), "events delivered twice: {:?}", w.duplicates);
        assert!(w.contradictions.is_empty(), "events that contradict the watcher's state: {:?}\n{}", w.contradictions, w.trace.join("\n"));
        if w.state == want {
            break;
        }
        tries += 1;
        assert!(tries < 60, "watcher state != members: {} vs {}\n{}", w.state.len(), want.len(), dump_logs());
        drop(w);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    let w = shared.lock().unwrap();
    eprintln!("zone watcher: {} events, {} watches, {} lists", w.events, w.resumes, w.relists);
    assert!(w.resumes >= 4, "the watch resumed from its last resourceVersion: {} watches", w.resumes);
    assert_eq!(w.relists, 1, "no 410 while resuming: {}", w.trace.join("\n"));
}

fn c1_log(logs: &tempfile::TempDir) -> PathBuf {
    logs.path().join("cache-1.log")
}

/// `deploy/systemd/fedctl-cache@.service` passes `systemd-analyze verify` (as instance
/// `fedctl-cache@0.service`, with `ExecStart` pointing at the built binary).
#[test]
fn cache_unit_verifies() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        eprintln!("systemd-analyze not installed; skipped");
        return;
    }
    let unit = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd/fedctl-cache@.service")).unwrap();
    assert!(unit.contains("--config /etc/fedctl/cache-%i.yaml") && unit.contains("NoNewPrivileges=yes") && unit.contains("ProtectSystem=strict"));
    let dir = tempfile::tempdir().unwrap();
    let local = unit.replace("/usr/local/bin/fedctl", env!("CARGO_BIN_EXE_fedctl"));
    std::fs::write(dir.path().join("fedctl-cache@.service"), &local).unwrap();
    std::fs::write(dir.path().join("fedctl-cache@0.service"), &local).unwrap();
    let out = Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(dir.path().join("fedctl-cache@0.service")).current_dir(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.trim().is_empty(), "systemd-analyze verify: {stderr}");
}

/// With cache endpoints the server balances the shard map from the objects the processes
/// report per shard and namespace; both processes adopt the new map (relisting what they now
/// hold) and the view stays whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cache_endpoints_are_rebalanced() {
    let etcd = EtcdServer::start_new();
    let (p1, p2) = (free_port(), free_port());
    let endpoints = format!("https://127.0.0.1:{p1},https://127.0.0.1:{p2}");
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--cache-rebalance-seconds", "1", "--cache-endpoints", &endpoints]);
    let logs = tempfile::tempdir().unwrap();
    let _c1 = CacheProc::start(&etcd.endpoint(), &server.data_path(), p1, "0,1", logs.path().join("cache-1.log"));
    let _c2 = CacheProc::start(&etcd.endpoint(), &server.data_path(), p2, "2,3", logs.path().join("cache-2.log"));
    // one very hot namespace: the hash placement leaves one shard far above the average
    let a = start_skewed_member("member-a", 3, 20, 21, 0, "2.5");
    register(&server, &a).await;
    let api = server.client();
    let mut version = 0;
    wait_for("a rebalanced map adopted by both processes", 60, async || {
        let s = api.get(&format!("{V}/shards")).await;
        let Some(eps) = s.json["endpoints"].as_array() else { return false };
        let versions: BTreeSet<u64> = eps.iter().filter_map(|e| e["status"]["mapVersion"].as_u64()).collect();
        let synced = eps.iter().all(|e| e["status"]["synced"] == true);
        version = versions.iter().next().copied().unwrap_or(0);
        eps.len() == 2 && versions.len() == 1 && version >= 2 && synced
    })
    .await;
    let mut etcd_c = etcd_client::Client::connect([etcd.endpoint()], None).await.unwrap();
    let kv = etcd_c.get(fedctl::cache::shard::SHARD_MAP_KEY, None).await.unwrap();
    let map: fedctl::cache::shard::ShardMap = serde_json::from_slice(kv.kvs()[0].value()).unwrap();
    assert!(map.namespaces.values().any(|v| v.len() > 1), "the hot namespace is split: {map:?}");
    let want = members_state(&[&a]).await;
    let mut tries = 0;
    loop {
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        let got: State = r.json["items"].as_array().map(|i| i.iter().map(key_of).collect()).unwrap_or_default();
        if got == want {
            break;
        }
        tries += 1;
        assert!(tries < 60, "global LIST != member after the rebalance: {} vs {} ({})", got.len(), want.len(), r.status);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // each process holds objects of its own shards only, and together all of them
    let held: u64 = {
        let s = api.get(&format!("{V}/shards")).await;
        s.json["endpoints"].as_array().unwrap().iter().flat_map(|e| e["status"]["shards"].as_array().unwrap().iter().map(|x| x["kinds"]["pods"]["objects"].as_u64().unwrap())).sum()
    };
    assert_eq!(held as usize, want.len());
}

/// One cache process holding every shard behind the server: the MUX has nothing to merge and
/// passes each page's items through as one block. Unpaged, paged and Table LISTs and a LIST
/// under churn must equal the members' pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_cache_process_behind_the_server() {
    let etcd = EtcdServer::start_new();
    let p1 = free_port();
    let endpoint = format!("https://127.0.0.1:{p1}");
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--cache-rebalance-seconds", "3600", "--cache-endpoints", &endpoint]);
    let logs = tempfile::tempdir().unwrap();
    let _c1 = CacheProc::start(&etcd.endpoint(), &server.data_path(), p1, "0,1,2,3", logs.path().join("cache-1.log"));
    let a = start_member("member-a", 20, 40, 41, 0);
    let b = start_member("member-b", 15, 40, 42, 0);
    let members = [&a, &b];
    register(&server, &a).await;
    register(&server, &b).await;
    let api = server.client();
    let want = members_state(&members).await;
    assert!(want.len() > 1000, "more pods than one page of the MUX holds: {}", want.len());
    let mut tries = 0;
    loop {
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        let got: State = r.json["items"].as_array().map(|i| i.iter().map(key_of).collect()).unwrap_or_default();
        let n = r.json["items"].as_array().map_or(0, Vec::len);
        if got == want && n == want.len() {
            break;
        }
        tries += 1;
        assert!(tries < 60, "global LIST != members: {} ({n} items) vs {} ({}): {}", got.len(), want.len(), r.status, std::fs::read_to_string(logs.path().join("cache-1.log")).unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(paged(&api, 300).await.expect("paged LIST"), want);
    // kubectl's Table LISTs (objects decoded, not blocks), unpaged and in chunks, agree with it
    if let Some(bin) = find_kubectl("1.33") {
        let cache = logs.path().join("kubectl");
        std::fs::create_dir_all(&cache).unwrap();
        let k = Kubectl::new(bin, "1.33", &server.kubeconfig(), &cache);
        for chunks in ["--chunk-size=0", "--chunk-size=700"] {
            let out = k.run(&["get", "pods", "-A", "--context", "global", "--no-headers", chunks]);
            assert_eq!(out.ok().lines().count(), want.len(), "kubectl {chunks}: one row per pod");
        }
    }
    // under churn (pods changed, created and deleted) every streamed LIST is whole JSON with
    // each object once
    set_churn(&members, 20).await;
    for _ in 0..5 {
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        let items = r.ok()["items"].as_array().unwrap().clone();
        let keys: BTreeSet<(String, String)> = items.iter().map(|p| key_of(p).0).collect();
        assert_eq!(keys.len(), items.len(), "each object once");
        assert!(items.len() > want.len() / 2, "{} objects of about {}", items.len(), want.len());
    }
}

/// Namespace → (cluster, uid) → member resourceVersion of every pod of the members.
async fn members_state_by_namespace(members: &[&FedsimProcess]) -> BTreeMap<String, State> {
    let mut out: BTreeMap<String, State> = BTreeMap::new();
    for m in members {
        let kc = kube::config::Kubeconfig::read_from(&m.kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        let api: Api<Pod> = Api::all(kube::Client::try_from(cfg).unwrap());
        for p in api.list(&ListParams::default()).await.expect("member list").items {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            out.entry(ns).or_default().insert((m.name.clone(), p.metadata.uid.unwrap_or_default()), p.metadata.resource_version.unwrap_or_default());
        }
    }
    out
}

/// A cache process killed -9 under 1,000 watchers (each on one namespace, through the
/// server's MUX, under churn) and restarted, then every member watch stream dropped and the
/// members' histories compacted: every watcher resumes or gets a 410 and relists;
/// none sees an event twice or an event that contradicts its state, and afterwards each
/// watcher's state equals its namespace's pods on the members.
///
/// This once failed in every run: a watcher whose namespace lives on one process, resumed
/// after the churn stopped, got nothing more. The other process's leg replayed only events
/// outside the namespace and never reported the position they brought it to, so the MUX held
/// the first process's events back for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cache_process_killed_under_1000_watchers() {
    namespace_watchers(1000, false, true, 20).await;
}

/// 1,000 namespace-scoped watchers of the in-process view, each watch resumed every 3 s from
/// its last resourceVersion, under churn: every watcher must end equal to its namespace on the
/// members.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn namespace_watchers_resuming_in_process() {
    namespace_watchers(1000, true, false, 3).await;
}

/// 300 such namespace watchers through two cache processes (none killed), each watch resumed
/// every 3 s: every resume opens new legs on both processes from the watcher's
/// resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn namespace_watchers_resuming_through_cache_processes() {
    namespace_watchers(300, false, false, 3).await;
}

/// The scenario of the tests above: `watchers` namespace watchers under churn, the view in
/// process or over two cache processes (one killed -9 and restarted, and the members' watch
/// streams dropped, when `kill`), each watch
/// lasting `watch_timeout` seconds.
async fn namespace_watchers(watchers_n: usize, in_process: bool, kill: bool, watch_timeout: u32) {
    let etcd = EtcdServer::start_new();
    let (p1, p2) = (free_port(), free_port());
    let endpoints = format!("https://127.0.0.1:{p1},https://127.0.0.1:{p2}");
    let mut args = vec!["--bookmark-interval-seconds", "1", "--cache-rebalance-seconds", "3600", "--max-watches-per-user", "0"];
    if !in_process {
        args.extend(["--cache-endpoints", &endpoints]);
    }
    let server = FedServer::start_with_args(&etcd.endpoint(), &args);
    let logs = tempfile::tempdir().unwrap();
    let mut c1 = CacheProc::start(&etcd.endpoint(), &server.data_path(), p1, "0,1", logs.path().join("cache-1.log"));
    let _c2 = CacheProc::start(&etcd.endpoint(), &server.data_path(), p2, "2,3", logs.path().join("cache-2.log"));
    let a = start_member("member-a", 3, 8, 31, 0);
    let b = start_member("member-b", 2, 12, 32, 0);
    let members = [&a, &b];
    register(&server, &a).await;
    register(&server, &b).await;
    let api = server.client();
    let want0 = members_state(&members).await;
    wait_for("both members in the view", 60, async || {
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        r.json["items"].as_array().map_or(0, |i| i.len()) == want0.len()
    })
    .await;
    let namespaces: Vec<String> = members_state_by_namespace(&members).await.into_keys().collect();
    assert!(namespaces.len() >= 3, "pods in several namespaces: {namespaces:?}");

    let http = http_client(&server.kubeconfig());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut watchers = Vec::new();
    for i in 0..watchers_n {
        let ns = namespaces[i % namespaces.len()].clone();
        let shared = Arc::new(Mutex::new(Watcher::default()));
        let task = tokio::spawn(run_watcher_with_timeout(http.clone(), server.url(), format!("namespaces/{ns}/"), shared.clone(), stop.clone(), watch_timeout));
        watchers.push((ns, shared, task));
    }
    let total = |f: fn(&Watcher) -> usize| watchers.iter().map(|(_, w, _)| f(&w.lock().unwrap())).sum::<usize>();
    wait_for("every watcher listed and watching", 120, async || watchers.iter().all(|(_, w, _)| w.lock().unwrap().resumes >= 1)).await;
    if !in_process && !kill {
        // the watchers of one namespace follow one shared merge of the processes' legs, not
        // legs of their own: watchers that arrive together take turns to start one (one whose
        // snapshot is older than the merge's start may start another), and resumed ones
        // (every few seconds here) join the oldest that covers them
        let deadline = Instant::now() + Duration::from_secs(60);
        let shared = loop {
            let shared = api.get(&format!("{V}/shards")).await.json["watches"].clone();
            if shared["watchers"].as_u64().unwrap_or(0) >= watchers_n as u64 / 2 && shared["shared"].as_u64().is_some_and(|n| n <= namespaces.len() as u64) {
                break shared;
            }
            assert!(Instant::now() < deadline, "{watchers_n} watchers of {} namespaces do not share one watch per namespace: {shared}", namespaces.len());
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        eprintln!("{watchers_n} watchers of {} namespaces: {shared}", namespaces.len());
    }
    set_churn(&members, 10).await;
    wait_for("events reach the watchers", 90, async || total(|w| w.events) > watchers_n).await;
    let restarts = |w: &Mutex<Watcher>| {
        let w = w.lock().unwrap();
        w.resumes + w.relists
    };
    let before: Vec<usize> = watchers.iter().map(|(_, w, _)| restarts(w)).collect();

    if kill {
        c1.kill9();
        tokio::time::sleep(Duration::from_secs(1)).await;
        c1.spawn();
        // and the members end every watch stream (the cache processes' ingests too) and
        // compact their history: the ingests resume, or relist after a 410
        tokio::time::sleep(Duration::from_secs(2)).await;
        for m in members {
            m.admin(Method::POST, "/fedsim/faults/drop-watches").await.expect("drop the member's watches");
            m.admin(Method::POST, "/fedsim/faults/compact").await.expect("compact the member's history");
        }
    }
    // every watch has a leg on the killed process: each one ends and is resumed (or answered
    // 410 and relisted)
    if kill {
        wait_for("every watcher resumed after the restart", 120, async || watchers.iter().zip(&before).all(|((_, w, _), b)| restarts(w) > *b)).await;
    } else {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    set_churn(&members, 0).await;

    let mut tries = 0;
    loop {
        let want = members_state_by_namespace(&members).await;
        let mut wrong = 0;
        for (ns, w, _) in &watchers {
            let w = w.lock().unwrap();
            assert!(w.duplicates.is_empty(), "{ns}: events delivered twice: {:?}", w.duplicates);
            assert!(w.contradictions.is_empty(), "{ns}: events that contradict the watcher's state: {:?}", w.contradictions);
            if w.state != want.get(ns).cloned().unwrap_or_default() {
                wrong += 1;
            }
        }
        if wrong == 0 {
            break;
        }
        tries += 1;
        if tries >= 120 {
            let mut report = Vec::new();
            for (ns, w, _) in &watchers {
                let w = w.lock().unwrap();
                let want = want.get(ns).cloned().unwrap_or_default();
                if w.state != want {
                    let missing = want.keys().filter(|k| !w.state.contains_key(*k)).count();
                    let extra = w.state.keys().filter(|k| !want.contains_key(*k)).count();
                    let stale = want.iter().filter(|(k, v)| w.state.get(*k).is_some_and(|g| g != *v)).count();
                    report.push(format!("{ns}: missing {missing} extra {extra} stale {stale}; {} events {} watches {} lists", w.events, w.resumes, w.relists));
                }
            }
            report.sort();
            report.dedup_by(|a, b| a.split(':').next() == b.split(':').next());
            // the view itself (LIST per namespace) against the members: tells a cache that
            // missed an event from a watcher that did
            let mut view_report = Vec::new();
            for (ns, want) in &want {
                let r = api.get(&format!("{V}/global/api/v1/namespaces/{ns}/pods")).await;
                let got: State = r.json["items"].as_array().map(|i| i.iter().map(key_of).collect()).unwrap_or_default();
                if &got != want {
                    view_report.push(format!("{ns}: the view's LIST differs from the members ({} vs {})", got.len(), want.len()));
                }
            }
            let mut traces = Vec::new();
            for (ns, w, _) in watchers.iter().filter(|(ns, w, _)| w.lock().unwrap().state != want.get(ns).cloned().unwrap_or_default()).take(3) {
                let w = w.lock().unwrap();
                let want = want.get(ns).cloned().unwrap_or_default();
                let keys: BTreeSet<_> = want.keys().chain(w.state.keys()).filter(|k| want.get(*k) != w.state.get(*k)).cloned().collect();
                let mut t = format!("watcher of {ns}:\n");
                for k in &keys {
                    t += &format!("  {}/{}: members {:?}, watcher {:?}\n", k.0, k.1, want.get(k), w.state.get(k));
                }
                for line in &w.trace {
                    if !line.starts_with("EV") || keys.iter().any(|k| line.contains(&k.1)) {
                        t += &format!("    {line}\n");
                    }
                }
                traces.push(t);
            }
            panic!("{wrong} of {watchers_n} watchers differ from the members:\n{}\n{}\n{}", report.join("\n"), view_report.join("\n"), traces.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (events, resumes, relists) = (total(|w| w.events), total(|w| w.resumes), total(|w| w.relists));
    eprintln!("{watchers_n} watchers: {events} events, {resumes} watches, {relists} lists");
    for (_, _, t) in watchers {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
}
