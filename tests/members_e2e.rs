//! Two members end to end, with real processes: etcd, `fedctl server`, two fedsim members
//! joined with `fedctl join` and their two `fedctl agent`s; the Cluster list read with a
//! real kubectl.
//!
//! Covers issue-level behaviour that needs two live members side by side: both Ready in
//! `kubectl get clusters` with versions and node counts, a member's node count change flowing
//! into its status, and one agent killed (its Cluster goes `Ready=False`/`HeartbeatMissed`
//! within the grace period while the other stays Ready) and restarted (Ready again) without
//! any object on its member deleted. Token, CA-hash and authorization refusals are in
//! `tests/members.rs`; Works, Borg's rule and certificate rotation with one member in
//! `tests/agent.rs`.

mod common;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::agent::AgentProcess;
use common::cli::fedctl;
use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::procs::{client_from_kubeconfig, FedsimProcess};
use common::server::{ApiClient, FedServer};
use fedctl::agent::config::AgentConfig;
use serde_json::{json, Value};

const CLUSTERS: &str = "/apis/cluster.fedctl.io/v1alpha1/clusters";
/// The server's heartbeat grace period in this test (`--cluster-grace-period`).
const GRACE: Duration = Duration::from_secs(4);

/// One joined member: its fedsim, its agent and a client on the member. Fields drop in
/// order: the agent before the fedsim.
struct Member {
    name: &'static str,
    agent: AgentProcess,
    sim: FedsimProcess,
    http: reqwest::Client,
    url: String,
}

impl Member {
    /// Starts a fedsim `name` with `nodes` nodes, joins it with `fedctl join` (zone `zone`),
    /// sets a 1 s heartbeat in the written `agent.yaml` and starts its agent.
    fn start(fed: &FedServer, dir: &Path, name: &'static str, nodes: usize, zone: &str) -> Member {
        let sim =
            FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), name, &["--nodes", &nodes.to_string(), "--pods-per-node", "2", "--namespaces", "3", "--seed", "7"], Duration::from_secs(60))
                .expect("start fedsim");
        let config_dir = dir.join(name);
        let (server, token, hash) = join_command(fed);
        let out = fedctl(&[
            "join",
            name,
            "--server",
            &server,
            "--token",
            &token,
            "--ca-cert-hash",
            &hash,
            "--kubeconfig",
            sim.kubeconfig.to_str().unwrap(),
            "--config-dir",
            config_dir.to_str().unwrap(),
            "--zone",
            zone,
            "--timeout",
            "30s",
        ])
        .ok()
        .to_string();
        assert!(out.contains(&format!("joined as cluster \"{name}\"")), "{out}");
        let mut config = AgentConfig::load(&config_dir).expect("agent.yaml");
        config.heartbeat_interval_seconds = 1;
        config.write(&config_dir).expect("write agent.yaml");
        let agent = AgentProcess::start(&config_dir, &dir.join(format!("{name}.log")));
        let (http, url) = client_from_kubeconfig(&sim.kubeconfig).expect("member client");
        Member { name, agent, sim, http, url }
    }

    /// GET on the member as its admin: `(status, body)`.
    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(format!("{}{path}", self.url)).timeout(Duration::from_secs(10)).send().await.expect("member GET");
        let code = r.status().as_u16();
        (code, r.json().await.unwrap_or(Value::Null))
    }

    /// `(kind, namespace/name, uid)` of every object of the kinds the federation places or
    /// the member runs: what "nothing deleted on the member" is checked against.
    async fn objects(&self) -> BTreeSet<(String, String, String)> {
        let mut all = BTreeSet::new();
        for (kind, path) in [
            ("Namespace", "/api/v1/namespaces"),
            ("Node", "/api/v1/nodes"),
            ("Pod", "/api/v1/pods"),
            ("Service", "/api/v1/services"),
            ("ConfigMap", "/api/v1/configmaps"),
            ("Secret", "/api/v1/secrets"),
            ("ServiceAccount", "/api/v1/serviceaccounts"),
            ("Deployment", "/apis/apps/v1/deployments"),
            ("ReplicaSet", "/apis/apps/v1/replicasets"),
        ] {
            let (code, list) = self.get(path).await;
            assert_eq!(code, 200, "list {path} on {}: {list}", self.name);
            for o in list["items"].as_array().expect("items") {
                let m = &o["metadata"];
                let key = format!("{}/{}", m["namespace"].as_str().unwrap_or(""), m["name"].as_str().unwrap_or(""));
                all.insert((kind.to_string(), key, m["uid"].as_str().unwrap_or("").to_string()));
            }
        }
        all
    }
}

/// `(server, token, hash)` from the join command the server wrote at first start.
fn join_command(fed: &FedServer) -> (String, String, String) {
    let path = fed.kubeconfig().parent().expect("data dir").join("join-command");
    let text = std::fs::read_to_string(&path).expect("join-command written at first start");
    let words: Vec<&str> = text.split_whitespace().collect();
    let arg = |flag: &str| words[words.iter().position(|w| *w == flag).unwrap_or_else(|| panic!("{flag} in {text}")) + 1].to_string();
    (arg("--server"), arg("--token"), arg("--ca-cert-hash"))
}

/// The newest kubectl available (1.27–1.33), else `kubectl` from `PATH`.
fn kubectl(fed: &FedServer, dir: &Path) -> Kubectl {
    let cache = dir.join("kubectl-cache");
    std::fs::create_dir_all(&cache).unwrap();
    for v in ["1.33", "1.32", "1.31", "1.30", "1.29", "1.28", "1.27"] {
        if let Some(bin) = find_kubectl(v) {
            return Kubectl::new(bin, v, &fed.kubeconfig(), &cache);
        }
    }
    Kubectl::new(PathBuf::from("kubectl"), "path", &fed.kubeconfig(), &cache)
}

/// Polls `f` every 200 ms until it returns `Ok` or `timeout` passes; then panics with the
/// last error and the agents' logs. Panics at once if an agent that should run has exited.
async fn eventually<T, F, Fut>(members: &mut [&mut Member], what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        for m in members.iter_mut() {
            m.agent.assert_alive();
        }
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => {
                let logs: Vec<String> = members.iter().map(|m| format!("--- {} agent log:\n{}", m.name, m.agent.log_tail(40))).collect();
                panic!("{what}: not within {timeout:?}: {e}\n{}", logs.join("\n"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The Cluster `name` as the admin reads it.
async fn cluster(admin: &ApiClient, name: &str) -> Result<Value, String> {
    let r = admin.get(&format!("{CLUSTERS}/{name}")).await;
    if r.status == 200 {
        Ok(r.json)
    } else {
        Err(format!("HTTP {}: {}", r.status, r.text))
    }
}

/// `(status, reason)` of the Cluster's Ready condition.
fn ready(c: &Value) -> Option<(String, String)> {
    let r = c.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == "Ready")?;
    Some((r["status"].as_str()?.to_string(), r["reason"].as_str().unwrap_or("").to_string()))
}

/// `kubectl get clusters` rows: NAME → (READY, VERSION, ZONE, NODES).
fn kubectl_clusters(k: &Kubectl) -> std::collections::BTreeMap<String, (String, String, String, String)> {
    let out = k.run(&["get", "clusters"]).ok().to_string();
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "VERSION", "ZONE", "NODES", "AGE"], "{out}");
    lines
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 6, "{out}");
            (w[0].to_string(), (w[1].to_string(), w[2].to_string(), w[3].to_string(), w[4].to_string()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_join_report_and_survive_an_agent_outage() {
    let etcd = EtcdServer::start_new();
    let grace = format!("{}s", GRACE.as_secs());
    let fed = FedServer::start_with_args(&etcd.endpoint(), &["--cluster-grace-period", &grace]);
    let dir = tempfile::Builder::new().prefix("fedctl-members-e2e-").tempdir().expect("temp dir");
    let mut a = Member::start(&fed, dir.path(), "member-a", 2, "zone-a");
    let mut b = Member::start(&fed, dir.path(), "member-b", 3, "zone-b");
    let admin = fed.client();
    let k = kubectl(&fed, dir.path());

    // --- both join and report: Ready, version and node counts, in kubectl too
    for (m, nodes) in [(&a, 2), (&b, 3)] {
        let (_, version) = m.get("/version").await;
        let want_version = version["gitVersion"].as_str().expect("member gitVersion").to_string();
        let name = m.name;
        let admin = admin.clone();
        let c = eventually(&mut [], &format!("{name} Ready with status"), Duration::from_secs(30), || async {
            let c = cluster(&admin, name).await?;
            let ok = ready(&c).is_some_and(|(s, _)| s == "True") && c.pointer("/status/nodeSummary/totalNum") == Some(&json!(nodes));
            if ok {
                Ok(c)
            } else {
                Err(format!("status: {}", c["status"]))
            }
        })
        .await;
        assert_eq!(c["status"]["kubernetesVersion"], want_version.as_str());
        assert_eq!(c["status"]["nodeSummary"], json!({"totalNum": nodes, "readyNum": nodes}));
        let (_, ks) = m.get("/api/v1/namespaces/kube-system").await;
        assert_eq!(c["spec"]["id"], ks["metadata"]["uid"], "identity is the member's kube-system uid");
    }
    let rows = kubectl_clusters(&k);
    assert_eq!(rows.keys().collect::<Vec<_>>(), ["member-a", "member-b"], "{rows:?}");
    let (_, va) = a.get("/version").await;
    let version = va["gitVersion"].as_str().unwrap().to_string();
    assert_eq!(rows["member-a"], ("True".to_string(), version.clone(), "zone-a".to_string(), "2/2".to_string()));
    let (_, vb) = b.get("/version").await;
    assert_eq!(rows["member-b"], ("True".to_string(), vb["gitVersion"].as_str().unwrap().to_string(), "zone-b".to_string(), "3/3".to_string()));

    // --- a node count change on member-a reaches its Cluster status (and kubectl)
    a.sim.admin(reqwest::Method::POST, "/fedsim/nodes?count=5").await.expect("add nodes");
    let admin2 = admin.clone();
    eventually(&mut [&mut a, &mut b], "member-a nodeSummary 5/5", Duration::from_secs(20), || async {
        let c = cluster(&admin2, "member-a").await?;
        let s = &c["status"]["nodeSummary"];
        if *s == json!({"totalNum": 5, "readyNum": 5}) {
            Ok(())
        } else {
            Err(format!("nodeSummary {s}"))
        }
    })
    .await;
    a.sim.admin(reqwest::Method::POST, "/fedsim/nodes?count=4").await.expect("remove a node");
    eventually(&mut [&mut a, &mut b], "member-a nodeSummary 4/4", Duration::from_secs(20), || async {
        let c = cluster(&admin2, "member-a").await?;
        let s = &c["status"]["nodeSummary"];
        if *s == json!({"totalNum": 4, "readyNum": 4}) {
            Ok(())
        } else {
            Err(format!("nodeSummary {s}"))
        }
    })
    .await;
    assert_eq!(kubectl_clusters(&k)["member-a"].3, "4/4");
    let b_nodes = cluster(&admin, "member-b").await.unwrap()["status"]["nodeSummary"].clone();
    assert_eq!(b_nodes, json!({"totalNum": 3, "readyNum": 3}), "member-b untouched");

    // --- a Work placed on member-a, so the outage below has federation-placed objects to keep
    let works = "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-member-a/works";
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "placed", "namespace": "shop"}, "data": {"k": "v"}});
    let r = admin.post(works, &json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": "placed"}, "spec": {"manifests": [cm]}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let http = a.http.clone();
    let url = a.url.clone();
    eventually(&mut [&mut a, &mut b], "Work applied on member-a", Duration::from_secs(20), || async {
        let code = http.get(format!("{url}/api/v1/namespaces/shop/configmaps/placed")).send().await.map_err(|e| e.to_string())?.status().as_u16();
        if code == 200 {
            Ok(())
        } else {
            Err(format!("HTTP {code}"))
        }
    })
    .await;

    // --- agent A killed: member-a goes Ready=False (HeartbeatMissed) within the grace period,
    // member-b stays Ready all along
    let before = a.objects().await;
    assert!(before.iter().any(|(k, n, _)| k == "ConfigMap" && n == "shop/placed"));
    let b_ready_since = cluster(&admin, "member-b").await.unwrap()["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap()["lastTransitionTime"].clone();
    a.agent.kill();
    let killed = Instant::now();
    let down = loop {
        let ca = cluster(&admin, "member-a").await.unwrap();
        let cb = cluster(&admin, "member-b").await.unwrap();
        assert_eq!(ready(&cb).map(|r| r.0), Some("True".to_string()), "member-b stays Ready while member-a's agent is down: {}", cb["status"]);
        b.agent.assert_alive();
        if let Some((s, reason)) = ready(&ca) {
            if s == "False" {
                break (reason, killed.elapsed());
            }
        }
        // heartbeat renewal 1 s; a lease at most ~1 s old when killed; then the grace period
        assert!(killed.elapsed() < GRACE + Duration::from_secs(8), "member-a still Ready {:?} after its agent was killed: {}", killed.elapsed(), ca["status"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(down.0, "HeartbeatMissed");
    assert!(down.1 >= GRACE - Duration::from_secs(2), "not Ready only after the grace period: {:?}", down.1);
    // …and it stays so while the agent is down; member-b's Ready never flipped
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(ready(&cluster(&admin, "member-a").await.unwrap()), Some(("False".to_string(), "HeartbeatMissed".to_string())));
    let cb = cluster(&admin, "member-b").await.unwrap();
    assert_eq!(ready(&cb).map(|r| r.0), Some("True".to_string()));
    let b_cond = cb["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert_eq!(b_cond["lastTransitionTime"], b_ready_since, "member-b's Ready did not transition: {b_cond}");
    assert_eq!(kubectl_clusters(&k)["member-a"].0, "False");

    // --- restarted: Ready=True again, nothing on member-a deleted
    a.agent.restart();
    let admin3 = admin.clone();
    eventually(&mut [&mut a, &mut b], "member-a Ready=True after the restart", Duration::from_secs(20), || async {
        let c = cluster(&admin3, "member-a").await?;
        match ready(&c) {
            Some((s, _)) if s == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // let the restarted agent resync its Works and the member before looking
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = a.objects().await;
    let gone: Vec<_> = before.difference(&after).collect();
    assert!(gone.is_empty(), "objects deleted from member-a across the outage: {gone:?}");
    let rows = kubectl_clusters(&k);
    assert_eq!(rows["member-a"], ("True".to_string(), version, "zone-a".to_string(), "4/4".to_string()));
    assert_eq!(rows["member-b"].0, "True");
    for m in [&a, &b] {
        assert!(!m.agent.log().contains("panicked"), "{} agent log:\n{}", m.name, m.agent.log());
    }
}
