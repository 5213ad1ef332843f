//! The global view under member faults and greedy clients: a member cut off for 2 minutes (its
//! fedsim paused with SIGSTOP) is reported stale on every read — a `Warning` header per stale member,
//! also through `--cache-endpoints` and kubectl — while its objects stay, and the view catches
//! up once it is back; global-view watches count against `--max-watches-per-user` and a
//! watcher that does not read is dropped after the send timeout.
//!
//! Members join with `fedctl join` and run their agent (1 s heartbeat), so the Cluster's
//! `Ready` condition follows the agent's probe of the member; the watch tests register a member
//! as the agent would (credential Secret + Cluster).

mod common;

use std::collections::BTreeMap;
use std::ops::AsyncFnMut;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::member::register;
use common::member::{JoinOptions, Member};
use common::procs::{client_from_kubeconfig, FedsimProcess};
use common::server::{free_port, FedServer};
use fedctl::pki::kubeconfig::Kubeconfig;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const V: &str = "/apis/search.fedctl.io/v1alpha1";

/// How long the paused member stays cut off (issue: "a member cut off for 2 minutes").
const CUT_OFF: Duration = Duration::from_secs(120);
const STALE_A: &str = "299 - \"member-a: cluster is not Ready; its objects in this view may be stale\"";

/// (cluster, uid) → member resourceVersion.
type State = BTreeMap<(String, String), String>;

/// SIGSTOPs a process this test started (by its pid); SIGCONT on [`Paused::resume`] or drop.
struct Paused(Option<u32>);

impl Paused {
    fn pause(pid: u32) -> Paused {
        let st = Command::new("kill").args(["-STOP", &pid.to_string()]).status().expect("kill -STOP");
        assert!(st.success(), "kill -STOP {pid}");
        Paused(Some(pid))
    }

    fn resume(&mut self) {
        if let Some(pid) = self.0.take() {
            let st = Command::new("kill").args(["-CONT", &pid.to_string()]).status().expect("kill -CONT");
            assert!(st.success(), "kill -CONT {pid}");
        }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = Command::new("kill").args(["-CONT", &pid.to_string()]).status();
        }
    }
}

/// One read of the view: `(status, Warning header values, body)`.
async fn view_get(http: &reqwest::Client, base: &str, path: &str) -> (u16, Vec<String>, Value) {
    let r = http.get(format!("{base}{path}")).timeout(Duration::from_secs(20)).send().await.unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let code = r.status().as_u16();
    let warnings = r.headers().get_all("warning").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    (code, warnings, r.json().await.unwrap_or(Value::Null))
}

fn view_state(list: &Value) -> State {
    list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let a = &p["metadata"]["annotations"];
            (
                (a["fedctl.io/cluster"].as_str().unwrap_or("").to_string(), p["metadata"]["uid"].as_str().unwrap_or("").to_string()),
                a["fedctl.io/member-resource-version"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The pods of `members` from fresh LISTs of each member.
async fn members_state(members: &[&Member]) -> State {
    let mut out = State::new();
    for m in members {
        let (code, list) = m.get("/api/v1/pods").await;
        assert_eq!(code, 200, "{} LIST: {list}", m.name);
        for p in list["items"].as_array().unwrap() {
            out.insert((m.name.clone(), p["metadata"]["uid"].as_str().unwrap().to_string()), p["metadata"]["resourceVersion"].as_str().unwrap().to_string());
        }
    }
    out
}

fn only(state: &State, cluster: &str) -> State {
    state.iter().filter(|((c, _), _)| c == cluster).map(|(k, v)| (k.clone(), v.clone())).collect()
}

async fn wait_for(what: &str, secs: u64, mut f: impl AsyncFnMut() -> Result<(), String>) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match f().await {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("timed out waiting for {what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn ready(api: &common::server::ApiClient, name: &str) -> Option<String> {
    let c = api.get(&format!("/apis/cluster.fedctl.io/v1alpha1/clusters/{name}")).await.json;
    c["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready").and_then(|c| c["status"].as_str()).map(str::to_string)
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
}

fn pod(name: &str, extra: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "annotations": {"test/extra": extra}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

/// Creates `name` in `default` on member `m` (its own API, as its admin).
async fn member_create(m: &Member, name: &str) {
    let r = m.http.post(format!("{}/api/v1/namespaces/default/pods", m.url)).json(&pod(name, "")).timeout(Duration::from_secs(10)).send().await.expect("member POST");
    assert!(r.status().is_success(), "create {name} on {}: {}", m.name, r.status());
}

/// Deletes one pod of member `m` (not one this test made); returns its name.
async fn member_delete_one(m: &Member) -> String {
    let (_, list) = m.get("/api/v1/pods").await;
    let p = list["items"].as_array().unwrap().iter().find(|p| !p["metadata"]["name"].as_str().unwrap_or("made-").starts_with("made-")).expect("a pod").clone();
    let (ns, victim) = (p["metadata"]["namespace"].as_str().unwrap().to_string(), p["metadata"]["name"].as_str().unwrap().to_string());
    let r = m.http.delete(format!("{}/api/v1/namespaces/{ns}/pods/{victim}?gracePeriodSeconds=0", m.url)).timeout(Duration::from_secs(10)).send().await.expect("member DELETE");
    assert!(r.status().is_success(), "delete {victim} on {}: {}", m.name, r.status());
    victim
}

fn sim_args(seed: &'static str) -> Vec<&'static str> {
    vec!["--nodes", "3", "--pods-per-node", "6", "--namespaces", "3", "--seed", seed]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paused_member_is_stale_in_the_view_and_caught_up_after() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--cluster-grace-period", "10s"]);
    let api = server.client();
    let opts = JoinOptions { labels: "", zone: "z", region: "r", heartbeat: 1 };
    let a = Member::start(&server, "member-a", &sim_args("1"), &opts);
    let b = Member::start(&server, "member-b", &sim_args("2"), &opts);
    let (http, base) = client_from_kubeconfig(&server.kubeconfig()).expect("admin client");
    let global = format!("{V}/global/api/v1/pods");

    // both Ready, the view equals the members' union, no warning
    for m in [&a, &b] {
        wait_for(&format!("{} Ready", m.name), 60, async || match ready(&api, &m.name).await.as_deref() {
            Some("True") => Ok(()),
            other => Err(format!("{other:?}")),
        })
        .await;
    }
    wait_for("the view equals the members", 60, async || {
        let want = members_state(&[&a, &b]).await;
        let (code, w, list) = view_get(&http, &base, &global).await;
        let got = view_state(&list);
        if code == 200 && w.is_empty() && got == want {
            Ok(())
        } else {
            Err(format!("{code} warnings {w:?}; {} vs {} objects", got.len(), want.len()))
        }
    })
    .await;
    let metrics = api.get("/metrics").await.text;
    assert_eq!(sample(&metrics, "fedctl_cache_member_stale{cluster=\"member-a\"}"), Some(0.0), "{metrics}");

    // member-a is cut off: Ready flips (the agent's probe fails) and every read warns
    let a_before = only(&members_state(&[&a]).await, "member-a");
    let a_pid = a.sim.pid();
    let mut paused = Paused::pause(a_pid);
    let t = Instant::now();
    wait_for("the stale warning for member-a", 40, async || {
        let (code, w, _) = view_get(&http, &base, &global).await;
        if code == 200 && w == [STALE_A] {
            Ok(())
        } else {
            Err(format!("{code} {w:?}"))
        }
    })
    .await;
    let flagged_after = t.elapsed();
    assert_eq!(ready(&api, "member-a").await.as_deref(), Some("False"));
    // the member's own path and GET by name carry it; member-b's path does not
    let (_, w, _) = view_get(&http, &base, &format!("{V}/clusters/member-a/api/v1/pods")).await;
    assert_eq!(w, [STALE_A], "clusters/member-a LIST");
    let (_, w, _) = view_get(&http, &base, &format!("{V}/clusters/member-b/api/v1/pods")).await;
    assert!(w.is_empty(), "clusters/member-b LIST warns: {w:?}");
    let some_a = view_state(&view_get(&http, &base, &format!("{V}/clusters/member-a/api/v1/pods")).await.2).len();
    assert!(some_a > 0);
    let (_, _, list) = view_get(&http, &base, &format!("{V}/clusters/member-a/api/v1/pods?limit=1")).await;
    let (ns, name) = (list["items"][0]["metadata"]["namespace"].as_str().unwrap().to_string(), list["items"][0]["metadata"]["name"].as_str().unwrap().to_string());
    let (code, w, _) = view_get(&http, &base, &format!("{V}/global/api/v1/namespaces/{ns}/pods/{name}")).await;
    assert_eq!((code, w.as_slice()), (200, [STALE_A.to_string()].as_slice()), "GET by name");
    let metrics = api.get("/metrics").await.text;
    assert_eq!(sample(&metrics, "fedctl_cache_member_stale{cluster=\"member-a\"}"), Some(1.0));
    assert_eq!(sample(&metrics, "fedctl_cache_member_stale{cluster=\"member-b\"}"), Some(0.0));
    // kubectl prints the warning on stderr
    let kdir = tempfile::tempdir().unwrap();
    let bin = find_kubectl("1.33").or_else(|| find_kubectl("1.27")).expect("a kubectl");
    let k = Kubectl::new(bin, "1.33", &server.kubeconfig(), kdir.path());
    wait_for("kubectl's global context", 20, async || {
        let r = k.run(&["--context", "global", "get", "pods", "-A"]);
        if r.code == Some(0) && r.stderr.contains("member-a: cluster is not Ready; its objects in this view may be stale") {
            Ok(())
        } else {
            Err(format!("{:?} {}", r.code, r.stderr))
        }
    })
    .await;

    // meanwhile member-b changes; the view follows it and keeps all of member-a's objects
    member_create(&b, "made-while-a-paused").await;
    member_delete_one(&b).await;
    wait_for("member-b's changes in the view while member-a is paused", 30, async || {
        let want_b = members_state(&[&b]).await;
        let (_, w, list) = view_get(&http, &base, &global).await;
        let got = view_state(&list);
        if w != [STALE_A] {
            return Err(format!("warnings {w:?}"));
        }
        if only(&got, "member-a") != a_before {
            panic!("member-a's objects changed in the view while it was paused: {} of {}", only(&got, "member-a").len(), a_before.len());
        }
        if only(&got, "member-b") == want_b {
            Ok(())
        } else {
            Err(format!("member-b: {} vs {}", only(&got, "member-b").len(), want_b.len()))
        }
    })
    .await;
    assert!(!view_state(&view_get(&http, &base, &global).await.2).is_empty());

    // cut off for 2 minutes in all: the view keeps warning and keeps every object of member-a
    while t.elapsed() < CUT_OFF {
        let (code, w, list) = view_get(&http, &base, &global).await;
        assert_eq!((code, w.as_slice()), (200, [STALE_A.to_string()].as_slice()), "{:?} into the pause", t.elapsed());
        assert_eq!(only(&view_state(&list), "member-a"), a_before, "member-a's objects in the view {:?} into the pause", t.elapsed());
        assert_eq!(ready(&api, "member-a").await.as_deref(), Some("False"));
        tokio::time::sleep(Duration::from_secs(5).min(CUT_OFF.saturating_sub(t.elapsed()))).await;
    }

    // back: the warning goes, nothing of member-a was deleted, and the view catches up with
    // changes on both members
    paused.resume();
    wait_for("member-a Ready again and no warning", 40, async || {
        let (_, w, _) = view_get(&http, &base, &global).await;
        match (ready(&api, "member-a").await.as_deref(), w.is_empty()) {
            (Some("True"), true) => Ok(()),
            other => Err(format!("{other:?} {w:?}")),
        }
    })
    .await;
    assert_eq!(only(&members_state(&[&a]).await, "member-a"), a_before, "nothing was deleted on member-a");
    member_create(&a, "made-after-resume").await;
    member_delete_one(&a).await;
    member_create(&b, "made-after-resume-b").await;
    wait_for("the view equals the members after the pause", 30, async || {
        let want = members_state(&[&a, &b]).await;
        let (code, w, list) = view_get(&http, &base, &global).await;
        let got = view_state(&list);
        if code == 200 && w.is_empty() && got == want {
            Ok(())
        } else {
            Err(format!("{code} {w:?}: {} vs {} objects", got.len(), want.len()))
        }
    })
    .await;
    let got = view_get(&http, &base, &global).await.2;
    let names: Vec<(String, String)> = got["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["metadata"]["annotations"]["fedctl.io/cluster"].as_str().unwrap_or("").to_string(), p["metadata"]["name"].as_str().unwrap_or("").to_string()))
        .collect();
    let has = |c: &str, n: &str| names.iter().any(|(c2, n2)| c2 == c && n2 == n);
    assert!(has("member-b", "made-while-a-paused") && has("member-a", "made-after-resume") && has("member-b", "made-after-resume-b"), "{names:?}");
    let metrics = api.get("/metrics").await.text;
    assert_eq!(sample(&metrics, "fedctl_cache_member_stale{cluster=\"member-a\"}"), Some(0.0));
    eprintln!("member-a flagged stale {flagged_after:?} after its pause");
}

/// A `fedctl cache` process (killed by its own pid when dropped).
struct CacheProc(Child);

impl CacheProc {
    fn start(etcd: &str, data_dir: &Path, port: u16, shards: &str, log: PathBuf) -> CacheProc {
        let out = std::fs::File::create(log).unwrap();
        let err = out.try_clone().unwrap();
        let listen = format!("127.0.0.1:{port}");
        let args = ["cache", "--shards", shards, "--shard-count", "4", "--listen", &listen, "--etcd-servers", etcd, "--data-dir", data_dir.to_str().unwrap(), "--bookmark-interval-seconds", "1"];
        CacheProc(Command::new(env!("CARGO_BIN_EXE_fedctl")).args(args).stdout(Stdio::from(out)).stderr(Stdio::from(err)).spawn().expect("start fedctl cache"))
    }
}

impl Drop for CacheProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_warnings_pass_through_cache_endpoints_once() {
    let etcd = EtcdServer::start_new();
    let (p1, p2) = (free_port(), free_port());
    let endpoints = format!("https://127.0.0.1:{p1},https://127.0.0.1:{p2}");
    // (a long grace period: member-c below has no agent, so no heartbeat)
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--cache-rebalance-seconds", "3600", "--cluster-grace-period", "300s", "--cache-endpoints", &endpoints]);
    let logs = tempfile::tempdir().unwrap();
    let _c1 = CacheProc::start(&etcd.endpoint(), &server.data_path(), p1, "0,1", logs.path().join("cache-1.log"));
    let _c2 = CacheProc::start(&etcd.endpoint(), &server.data_path(), p2, "2,3", logs.path().join("cache-2.log"));
    let api = server.client();
    let opts = JoinOptions { labels: "", zone: "z", region: "r", heartbeat: 1 };
    let a = Member::start(&server, "member-a", &sim_args("3"), &opts);
    let b = Member::start(&server, "member-b", &sim_args("4"), &opts);
    let (http, base) = client_from_kubeconfig(&server.kubeconfig()).expect("admin client");
    let global = format!("{V}/global/api/v1/pods");
    wait_for("the view equals the members, no warning", 90, async || {
        let want = members_state(&[&a, &b]).await;
        let (code, w, list) = view_get(&http, &base, &global).await;
        let got = if code == 200 { view_state(&list) } else { State::new() };
        match (ready(&api, "member-a").await.as_deref(), code, w.is_empty(), got == want) {
            (Some("True"), 200, true, true) => Ok(()),
            other => Err(format!("{other:?} {w:?}")),
        }
    })
    .await;
    let a_before = only(&members_state(&[&a]).await, "member-a");

    let mut paused = Paused::pause(a.sim.pid());
    // every endpoint and the server itself know member-a is not Ready: one warning, paged or not
    for path in [global.clone(), format!("{global}?limit=5"), format!("{V}/clusters/member-a/api/v1/pods")] {
        wait_for(&format!("one stale warning on {path}"), 40, async || {
            let (code, w, _) = view_get(&http, &base, &path).await;
            if code == 200 && w == [STALE_A] {
                Ok(())
            } else {
                Err(format!("{code} {w:?}"))
            }
        })
        .await;
    }
    let (_, _, list) = view_get(&http, &base, &format!("{V}/clusters/member-a/api/v1/pods?limit=1")).await;
    let (ns, name) = (list["items"][0]["metadata"]["namespace"].as_str().unwrap().to_string(), list["items"][0]["metadata"]["name"].as_str().unwrap().to_string());
    let (code, w, _) = view_get(&http, &base, &format!("{V}/global/api/v1/namespaces/{ns}/pods/{name}")).await;
    assert_eq!((code, w), (200, vec![STALE_A.to_string()]), "GET by name");
    let (_, _, list) = view_get(&http, &base, &global).await;
    assert_eq!(only(&view_state(&list), "member-a"), a_before, "member-a's objects stay while it is stale");

    paused.resume();
    wait_for("no warning once member-a is back", 40, async || {
        let (code, w, list) = view_get(&http, &base, &global).await;
        let want = members_state(&[&a, &b]).await;
        if code == 200 && w.is_empty() && view_state(&list) == want {
            Ok(())
        } else {
            Err(format!("{code} {w:?}"))
        }
    })
    .await;

    // a member whose ingest fails (its API is gone) while its Cluster has no verdict: only the
    // cache processes know; their warnings are forwarded, once
    let c = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), "member-c", &["--nodes", "1", "--pods-per-node", "3", "--seed", "7"], Duration::from_secs(60)).expect("start fedsim");
    register(&server, &c).await;
    let c_path = format!("{V}/clusters/member-c/api/v1/pods");
    let mut c_objects = 0;
    wait_for("member-c in the view, no warning", 40, async || {
        let (code, w, list) = view_get(&http, &base, &c_path).await;
        c_objects = view_state(&list).len();
        if code == 200 && w.is_empty() && c_objects > 0 {
            Ok(())
        } else {
            Err(format!("{code} {w:?} {c_objects}"))
        }
    })
    .await;
    drop(c);
    let stale_c = "299 - \"member-c: the cache's list/watch of pods is not connected; its objects in this view may be stale\"";
    wait_for("the forwarded ingest warning for member-c", 40, async || {
        let (code, w, _) = view_get(&http, &base, &global).await;
        if code == 200 && w == [stale_c] {
            Ok(())
        } else {
            Err(format!("{code} {w:?}"))
        }
    })
    .await;
    let (_, w, list) = view_get(&http, &base, &c_path).await;
    assert_eq!(w, [stale_c]);
    assert_eq!(view_state(&list).len(), c_objects, "member-c's objects stay while it is stale");
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A raw HTTP/1.1 connection over TLS with the admin client certificate (a reader that never
/// reads, response heads).
async fn raw_conn(server: &FedServer) -> Tls {
    let kc = Kubeconfig::load(&server.kubeconfig()).expect("kubeconfig");
    let ca = kc.current_cluster().unwrap().ca_pem().unwrap().unwrap();
    let user = kc.current_user().unwrap();
    let (cert, key) = (user.client_cert_pem().unwrap().unwrap(), user.client_key_pem().unwrap().unwrap());
    let tls: Arc<rustls::ClientConfig> = fedctl::pki::client_tls_config(&ca, Some((cert.as_str(), key.as_str()))).expect("tls");
    let port = server.url().rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.expect("TLS handshake")
}

/// Sends `GET path` and reads the response head (and what came with it).
async fn open(server: &FedServer, path: &str) -> (Tls, String) {
    let mut conn = raw_conn(server).await;
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await.expect("response head").unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).to_string();
    (conn, head)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn global_view_watches_are_bounded_per_user() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--max-watches-per-user", "2"]);
    let sim = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), "member-a", &["--nodes", "2", "--pods-per-node", "3", "--seed", "5"], Duration::from_secs(60)).expect("start fedsim");
    register(&server, &sim).await;
    let api = server.client();
    wait_for("the member's pods in the view", 30, async || {
        let n = api.get(&format!("{V}/global/api/v1/pods")).await.json["items"].as_array().map_or(0, Vec::len);
        if n > 0 {
            Ok(())
        } else {
            Err(format!("{n} pods"))
        }
    })
    .await;
    let view_watch = format!("{V}/global/api/v1/pods?watch=1");
    // one watch of the federation store and one of the view take the user's two slots
    let fed_watch = api.watch("/api/v1/namespaces?watch=1").await;
    let (first, head) = open(&server, &view_watch).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // a third (of the view, or of the store): 429 with Retry-After, as the store's watches
    for path in [view_watch.clone(), format!("{V}/clusters/member-a/api/v1/pods?watch=1"), "/api/v1/configmaps?watch=1".to_string()] {
        let (_c, head) = open(&server, &path).await;
        assert!(head.starts_with("HTTP/1.1 429"), "{path}: {head}");
        assert!(head.to_ascii_lowercase().contains("\r\nretry-after: 1"), "{path}: {head}");
    }
    // reads are not limited by watches
    assert_eq!(api.get(&format!("{V}/global/api/v1/pods")).await.status, 200);
    // closing the view watch frees its slot
    drop(first);
    wait_for("the closed view watch's slot released", 10, async || {
        let (_c, head) = open(&server, &view_watch).await;
        if head.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(head)
        }
    })
    .await;
    drop(fed_watch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn global_view_slow_watcher_is_dropped() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--watch-buffer-events", "8", "--watch-send-timeout", "1s", "--max-watches-per-user", "1"]);
    let sim = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), "member-a", &["--nodes", "1", "--pods-per-node", "1", "--seed", "6"], Duration::from_secs(60)).expect("start fedsim");
    register(&server, &sim).await;
    let api = server.client();
    wait_for("the member's pods in the view", 30, async || {
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        if r.status == 200 && r.json["items"].as_array().is_some_and(|i| !i.is_empty()) {
            Ok(())
        } else {
            Err(r.text)
        }
    })
    .await;
    let watch = format!("{V}/global/api/v1/pods?watch=1");
    // the slow watcher opens its watch and never reads again
    let (mut slow, head) = open(&server, &watch).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let big = "z".repeat(200 * 1024);
    let mut dropped_after = None;
    for i in 0..150 {
        let r = api.post(&format!("{V}/clusters/member-a/api/v1/namespaces/default/pods"), &pod(&format!("big-{i:03}"), &big)).await;
        assert!(r.status == 201, "create big-{i:03}: {} {}", r.status, &r.text[..r.text.len().min(300)]);
        let m = api.get("/metrics").await.text;
        if sample(&m, "apiserver_terminated_watchers_total").unwrap_or(0.0) >= 1.0 {
            dropped_after = Some(i + 1);
            break;
        }
    }
    let dropped_after: usize = dropped_after.unwrap_or_else(|| panic!("the slow global-view watcher was not dropped; log:\n{}", server.log_tail()));
    eprintln!("the slow watcher was dropped after {dropped_after} big pods");
    assert!(server.log().contains("global view: dropping a watcher that does not read its events"), "{}", server.log_tail());
    // its slot (the user's only one) is free again
    wait_for("the dropped watcher's slot released", 10, async || {
        let (_c, head) = open(&server, &watch).await;
        if head.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(head)
        }
    })
    .await;
    // a pod made after the drop reaches the view, not the dropped watcher
    let r = api.post(&format!("{V}/clusters/member-a/api/v1/namespaces/default/pods"), &pod("after-drop", "")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    wait_for("after-drop in the view", 20, async || {
        let r = api.get(&format!("{V}/global/api/v1/namespaces/default/pods/after-drop")).await;
        if r.status == 200 {
            Ok(())
        } else {
            Err(r.text)
        }
    })
    .await;
    // reading now, the slow watcher's stream ends without the later events
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
        }
        if raw.ends_with(b"\r\n0\r\n\r\n") || Instant::now() > deadline {
            break;
        }
    }
    assert!(raw.ends_with(b"\r\n0\r\n\r\n"), "the dropped watch's stream did not end ({} bytes read)", raw.len());
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains("\"after-drop\""), "the dropped watcher got an event from after its drop");
}
