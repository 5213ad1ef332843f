//! Several agents in one process (as `fedctl-bench agents` runs them): each `agent::run`
//! with its own `fedctl join` identity registers, heartbeats and applies its own Works only,
//! and the process-wide agent metrics add up over them — real etcd, server and fedsim.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::member::{join, JoinOptions};
use common::procs::{client_from_kubeconfig, FedsimProcess};
use common::server::FedServer;

const CLUSTERS: &str = "/apis/cluster.fedctl.io/v1alpha1/clusters";

fn ready(c: &Value) -> bool {
    c.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

fn ready_applied(w: &Value) -> bool {
    w.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Applied" && c["status"] == "True"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_share_one_process_with_their_own_identities() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let dir = tempfile::tempdir().unwrap();
    let names = ["member-a", "member-b", "member-c"];
    let works0 = fedctl::telemetry::metrics::agent().works.get();
    let (stop_tx, _) = tokio::sync::watch::channel(false);
    let mut sims = Vec::new();
    let mut tasks = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let seed = (i + 1).to_string();
        let sim = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), name, &["--nodes", "2", "--pods-per-node", "2", "--seed", &seed], Duration::from_secs(60)).unwrap();
        let config_dir = dir.path().join(name);
        join(&server, name, &sim.kubeconfig, &config_dir, &JoinOptions { labels: "", zone: "z1", region: "r1", heartbeat: 2 });
        let mut stop = stop_tx.subscribe();
        tasks.push(tokio::spawn(async move {
            fedctl::agent::run(&config_dir, None, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
        }));
        sims.push(sim);
    }
    let api = server.client();
    // every member registers as itself and heartbeats its own Lease
    let deadline = Instant::now() + Duration::from_secs(60);
    for (name, sim) in names.iter().zip(&sims) {
        loop {
            let c = api.get(&format!("{CLUSTERS}/{name}")).await;
            let lease = api.get(&format!("/apis/coordination.k8s.io/v1/namespaces/fed-exec-{name}/leases/cluster-heartbeat")).await;
            if c.status == 200 && ready(&c.json) && lease.status == 200 {
                assert_eq!(c.json["spec"]["apiEndpoint"].as_str().map(|s| s.trim_end_matches('/')), Some(sim.url.trim_end_matches('/')), "{name} registered its own member");
                assert_eq!(lease.json["spec"]["holderIdentity"], *name, "{name}'s Lease: {}", lease.text);
                break;
            }
            assert!(Instant::now() < deadline, "{name} not Ready with a heartbeat within 60 s: {} / {}", c.text, lease.text);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // each agent applies the Work of its own exec namespace, and only that one
    for name in names {
        let ns = format!("fed-exec-{name}");
        let work = json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": "cfg", "namespace": ns},
            "spec": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("for-{name}"), "namespace": "default"}, "data": {"k": "v"}}]}});
        let r = api.post(&format!("/apis/work.fedctl.io/v1alpha1/namespaces/{ns}/works"), &work).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    for (name, sim) in names.iter().zip(&sims) {
        let (http, base) = client_from_kubeconfig(&sim.kubeconfig).unwrap();
        loop {
            let v: Value = http.get(format!("{base}/api/v1/namespaces/default/configmaps")).send().await.unwrap().json().await.unwrap();
            let mine: Vec<&str> = v["items"].as_array().unwrap().iter().filter_map(|c| c["metadata"]["name"].as_str()).filter(|n| n.starts_with("for-")).collect();
            if !mine.is_empty() {
                assert_eq!(mine, [format!("for-{name}")], "{name} holds its own Work's ConfigMap only");
                break;
            }
            assert!(Instant::now() < deadline + Duration::from_secs(30), "{name}: ConfigMap not applied");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        loop {
            let w = api.get(&format!("/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-{name}/works/cfg")).await;
            if ready_applied(&w.json) {
                break;
            }
            assert!(Instant::now() < deadline + Duration::from_secs(30), "{name}: Work not Applied: {}", w.text);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // its credential Secret names its own member (the credential controller writes it
        // after the registration, on its own schedule: it may come after the Work)
        loop {
            let sec = api.get(&format!("/api/v1/namespaces/fed-exec-{name}/secrets/member-credential")).await;
            if sec.status == 404 && Instant::now() < deadline + Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            use base64::Engine as _;
            let server =
                sec.json["data"]["server"].as_str().and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok()).map(|b| String::from_utf8_lossy(&b).trim_end_matches('/').to_string());
            assert_eq!(server.as_deref(), Some(sim.url.trim_end_matches('/')), "{name}'s credential Secret: {}", sec.text);
            break;
        }
    }
    // the process-wide gauge counts every agent's Work (it was the last agent's count)
    let until = Instant::now() + Duration::from_secs(30);
    while fedctl::telemetry::metrics::agent().works.get() - works0 != names.len() as i64 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(fedctl::telemetry::metrics::agent().works.get() - works0, names.len() as i64, "fedctl_agent_works sums the agents of the process");
    // shutdown ends every agent, and their controllers give their share back
    stop_tx.send(true).unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(10), t).await.expect("agent stops").unwrap().unwrap();
    }
    assert_eq!(fedctl::telemetry::metrics::agent().works.get(), works0);
}
