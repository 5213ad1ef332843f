//! Operations on real processes: two `fedctl server` replicas on one etcd (leader-elected controllers, hand-over on SIGKILL and SIGTERM, no Work rewritten) and `/metrics` (counters move, access limited to admins and `system:monitoring`).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::server::{ApiClient, FedServer};

const WORKS: &str = "/apis/work.fedctl.io/v1alpha1";
const CLUSTERS: &str = "/apis/cluster.fedctl.io/v1alpha1/clusters";
const POLICY: &str = "/apis/policy.fedctl.io/v1alpha1";
const LEADER_METRIC: &str = r#"leader_election_master_status{name="fedctl-controllers"}"#;
/// Flags of both replicas: Clusters without an agent stay Ready for the whole test.
const ARGS: &[&str] = &["--cluster-grace-period", "10m", "--bookmark-interval-seconds", "1"];

/// The value of the sample `series` (name and labels exactly as exposed), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
}

async fn scrape(c: &ApiClient) -> String {
    let r = c.get("/metrics").await;
    assert_eq!(r.status, 200, "GET /metrics: {}", r.text);
    assert!(r.content_type.starts_with("text/plain; version=0.0.4"), "content type {}", r.content_type);
    r.text
}

async fn is_leader(c: &ApiClient) -> bool {
    sample(&scrape(c).await, LEADER_METRIC) == Some(1.0)
}

/// Polls until `f` holds, panicking with `what` after `within`; returns the time it took.
async fn wait_until<F, Fut>(within: Duration, what: &str, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if f().await {
            return t0.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within {within:?}");
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A simulated member: Cluster with a Ready status written as admin (as its agent's heartbeat
/// would make the cluster-controller do).
async fn member(c: &ApiClient, name: &str) {
    c.post(
        CLUSTERS,
        &json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name, "labels": {"env": "prod"}},
        "spec": {"apiEndpoint": "https://127.0.0.1:1", "syncMode": "Pull"}}),
    )
    .await
    .ok();
    for _ in 0..50 {
        let mut cl = c.get(&format!("{CLUSTERS}/{name}")).await.ok().clone();
        cl["status"] = json!({"conditions": [{"type": "Ready", "status": "True", "reason": "Test", "lastTransitionTime": now(), "lastHeartbeatTime": now()}]});
        let r = c.put(&format!("{CLUSTERS}/{name}/status"), &cl).await;
        if r.status != 409 {
            r.ok();
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("status of cluster {name} kept conflicting");
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

/// `namespace/name → (resourceVersion, generation)` of the Works of Deployment `name`.
async fn works(c: &ApiClient, name: &str) -> BTreeMap<String, (String, i64)> {
    let r = c.get(&format!("{WORKS}/works?labelSelector=propagation.fedctl.io/kind=Deployment,propagation.fedctl.io/name={name}")).await;
    r.ok()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|w| {
            let m = &w["metadata"];
            (
                format!("{}/{}", m["namespace"].as_str().unwrap_or(""), m["name"].as_str().unwrap_or("")),
                (m["resourceVersion"].as_str().unwrap_or("").to_string(), m["generation"].as_i64().unwrap_or(0)),
            )
        })
        .collect()
}

async fn namespace_exists(c: &ApiClient, name: &str) -> bool {
    c.get(&format!("/api/v1/namespaces/{name}")).await.status == 200
}

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/fedctl-controllers";

async fn lease_holder(c: &ApiClient) -> Option<String> {
    let r = c.get(LEASE).await;
    (r.status == 200).then(|| r.json["spec"]["holderIdentity"].as_str().unwrap_or("").to_string())
}

/// The identity holding the controllers' election, read from etcd's election API.
async fn election_holder(endpoint: &str) -> Option<String> {
    let mut client = etcd_client::Client::connect([endpoint], None).await.ok()?;
    let r = client.leader("/fedctl/leader/controllers").await.ok()?;
    r.kv().map(|kv| String::from_utf8_lossy(kv.value()).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_elect_one_leader_and_hand_over_on_kill_and_term() {
    let etcd = EtcdServer::start_new();
    let a = FedServer::start_with_args(&etcd.endpoint(), ARGS);
    let (ca, cb);
    let b = FedServer::start_replica(&a, ARGS);
    ca = a.client();
    cb = b.client();

    // one CA: the replica reused the first server's PKI
    assert_eq!(std::fs::read(a.data_path().join("tls/server-ca.crt")).unwrap(), std::fs::read(b.data_path().join("tls/server-ca.crt")).unwrap());

    // exactly one leader; it is the one named in etcd's election
    wait_until(Duration::from_secs(20), "a leader", || async { is_leader(&ca).await || is_leader(&cb).await }).await;
    let (leader_a, leader_b) = (is_leader(&ca).await, is_leader(&cb).await);
    assert!(leader_a ^ leader_b, "leaders: a={leader_a} b={leader_b}");
    let (mut leader, mut follower, cl, cf) = if leader_a { (a, b, ca, cb) } else { (b, a, cb, ca) };
    let holder = election_holder(&etcd.endpoint()).await.expect("an election holder in etcd");
    let leader_port = leader.url().rsplit(':').next().unwrap().to_string();
    assert!(holder.ends_with(&format!(":{leader_port}")), "holder {holder}, leader {}", leader.url());
    // ... and in the Lease kube-system/fedctl-controllers, as kube-controller-manager shows its own
    wait_until(Duration::from_secs(10), "leader Lease", || async { lease_holder(&cf).await.as_deref() == Some(holder.as_str()) }).await;
    assert!(leader.log().contains("leading: controllers started"));
    assert!(!follower.log().contains("leading: controllers started"), "follower log:\n{}", follower.log_tail());

    // both serve the API: a write through one is read through the other
    let r = cf.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(namespace_exists(&cl, "web").await);

    // the leader's controllers act; the follower runs none
    member(&cf, "m1").await;
    wait_until(Duration::from_secs(15), "exec namespace of m1", || namespace_exists(&cf, "fed-exec-m1")).await;
    cf.post(
        &format!("{POLICY}/namespaces/web/propagationpolicies"),
        &json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "all", "namespace": "web"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "placement": {"clusterAffinity": {"labelSelector": {"matchLabels": {"env": "prod"}}}, "replicaScheduling": {"type": "Duplicated"}}}}),
    )
    .await
    .ok();
    cf.post("/apis/apps/v1/namespaces/web/deployments", &deployment("front")).await.ok();
    wait_until(Duration::from_secs(15), "Work of front", || async { works(&cf, "front").await.len() == 1 }).await;
    let reconciles = r#"fedctl_controller_reconciles_total{name="propagation"}"#;
    assert!(sample(&scrape(&cl).await, reconciles).unwrap_or(0.0) >= 1.0);
    assert_eq!(sample(&scrape(&cf).await, reconciles), None, "the follower reconciled");
    let adds = r#"workqueue_adds_total{name="propagation"}"#;
    assert!(sample(&scrape(&cl).await, adds).unwrap_or(0.0) >= 1.0);
    assert_eq!(sample(&scrape(&cf).await, adds), None, "the follower queued propagation work");
    assert_eq!(sample(&scrape(&cf).await, LEADER_METRIC), Some(0.0));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let front_before = works(&cf, "front").await;

    // SIGKILL the leader: its lease expires (15 s) and the follower takes over
    let killed = Instant::now();
    leader.stop();
    let took = wait_until(Duration::from_secs(25), "the follower taking over", || is_leader(&cf)).await;
    let took = took.max(killed.elapsed());
    eprintln!("hand-over after SIGKILL: {took:?}");
    assert!(took <= Duration::from_secs(20), "hand-over after SIGKILL took {took:?}");
    let new_holder = election_holder(&etcd.endpoint()).await.expect("an election holder in etcd");
    assert_ne!(new_holder, holder);
    wait_until(Duration::from_secs(10), "leader Lease moved", || async { lease_holder(&cf).await.as_deref() == Some(new_holder.as_str()) }).await;
    let lease = cf.get(LEASE).await.ok().clone();
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 15);
    // the new leader's controllers act on new objects ...
    member(&cf, "m2").await;
    wait_until(Duration::from_secs(15), "exec namespace of m2", || namespace_exists(&cf, "fed-exec-m2")).await;
    cf.post("/apis/apps/v1/namespaces/web/deployments", &deployment("back")).await.ok();
    wait_until(Duration::from_secs(15), "Works of back on m1 and m2", || async { works(&cf, "back").await.len() == 2 }).await;
    // ... and front now goes to m2 too, while its Work on m1 was left as it was
    wait_until(Duration::from_secs(15), "Works of front on m1 and m2", || async { works(&cf, "front").await.len() == 2 }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let front_after = works(&cf, "front").await;
    let k = "fed-exec-m1/deployment-web-front";
    assert_eq!(front_before.get(k), front_after.get(k), "the Work of an unchanged template was rewritten by the new leader");

    // the killed replica comes back (same address, so same identity) as a follower
    leader.restart();
    let cr = leader.client();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!is_leader(&cr).await, "the restarted replica leads while the other holds the lease");
    assert!(is_leader(&cf).await);

    // SIGTERM of the leader releases the lease: the other takes over at once, not after 15 s
    let termed = Instant::now();
    let st = follower.terminate(Duration::from_secs(10)).expect("leader exits on SIGTERM");
    assert!(st.success(), "exit status {st}; log:\n{}", follower.log_tail());
    let took = wait_until(Duration::from_secs(10), "the restarted replica taking over", || is_leader(&cr)).await;
    let took = took.max(termed.elapsed());
    eprintln!("hand-over after SIGTERM: {took:?}");
    assert!(took < Duration::from_secs(5), "hand-over after SIGTERM took {took:?}");
    assert!(follower.log().contains("stopped leading"), "log:\n{}", follower.log_tail());
    // and its controllers work
    cr.post("/apis/apps/v1/namespaces/web/deployments", &deployment("third")).await.ok();
    wait_until(Duration::from_secs(15), "Works of third", || async { works(&cr, "third").await.len() == 2 }).await;
    assert_eq!(works(&cr, "front").await.get(k), front_after.get(k), "a Work rewritten after the second hand-over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_and_are_for_admins_and_monitoring() {
    let etcd = EtcdServer::start_new();
    let mut s = FedServer::start_with_args(&etcd.endpoint(), &["--bookmark-interval-seconds", "1"]);
    // a monitoring identity and an ordinary one, as static tokens (read at start)
    s.stop();
    let tokens = s.data_path().join("tokens");
    let mut text = std::fs::read_to_string(&tokens).unwrap();
    text.push_str("monitoring-token-0123456789,prometheus,prometheus,\"system:monitoring\"\nplain-token-0123456789,someone,someone\n");
    std::fs::write(&tokens, text).unwrap();
    s.restart();
    let admin = s.client();

    let series = r#"apiserver_request_total{verb="LIST",group="",version="v1",resource="namespaces",subresource="",code="200"}"#;
    let hist = r#"apiserver_request_duration_seconds_count{verb="LIST",group="",version="v1",resource="namespaces",subresource=""}"#;
    let before = scrape(&admin).await;
    for _ in 0..3 {
        admin.get("/api/v1/namespaces").await.ok();
    }
    let nf = admin.get("/api/v1/namespaces/nope").await;
    assert_eq!(nf.status, 404);
    let after = scrape(&admin).await;
    let delta = |t: &str| sample(&after, t).unwrap_or(0.0) - sample(&before, t).unwrap_or(0.0);
    assert_eq!(delta(series), 3.0, "{after}");
    assert_eq!(delta(hist), 3.0);
    assert!(delta(r#"apiserver_request_total{verb="GET",group="",version="v1",resource="namespaces",subresource="",code="404"}"#) >= 1.0);
    // controllers run here (a single replica leads) and report
    assert_eq!(sample(&after, LEADER_METRIC), Some(1.0));
    // the token sync's queue saw the first bootstrap token
    assert!(sample(&after, r#"workqueue_adds_total{name="bootstrap-token"}"#).unwrap_or(0.0) >= 1.0, "{after}");
    assert!(sample(&after, r#"workqueue_depth{name="bootstrap-token"}"#).is_some());

    // an open watch is counted while it lasts
    let open = r#"apiserver_longrunning_requests{verb="WATCH",group="",version="v1",resource="configmaps"}"#;
    let w = admin.watch("/api/v1/configmaps?watch=true&allowWatchBookmarks=true").await;
    wait_until(Duration::from_secs(5), "watch counted", || async { sample(&scrape(&admin).await, open) == Some(1.0) }).await;
    drop(w);
    wait_until(Duration::from_secs(10), "watch no longer counted", || async { sample(&scrape(&admin).await, open) == Some(0.0) }).await;

    // members of system:monitoring may scrape; other identities may not; anonymous is 401
    let mon = s.token_client("monitoring-token-0123456789");
    assert!(sample(&scrape(&mon).await, LEADER_METRIC).is_some());
    let plain = s.token_client("plain-token-0123456789");
    plain.get("/metrics").await.assert_status(403, "Forbidden");
    s.anonymous_client().get("/metrics").await.assert_status(401, "Unauthorized");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_another_ca_refuses_to_join_the_federation() {
    let etcd = EtcdServer::start_new();
    let first = FedServer::start(&etcd.endpoint());
    // a second server that was not given the first one's PKI makes its own CA: it must stop
    // instead of publishing that CA or signing agent certificates with it
    let dir = tempfile::tempdir().unwrap();
    let port = common::server::free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_fedctl"))
        .args(["server", "--etcd-servers", &etcd.endpoint(), "--bind-address", "127.0.0.1", "--secure-port", &port.to_string()])
        .arg("--data-dir")
        .arg(dir.path().join("server"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a server with a foreign CA kept running");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("different CA"), "stderr: {err}");
    // the federation still publishes the first server's CA
    let cm = first.client().get("/api/v1/namespaces/kube-public/configmaps/cluster-info").await;
    let ca = std::fs::read_to_string(first.data_path().join("tls/server-ca.crt")).unwrap();
    let kc: fedctl::pki::kubeconfig::Kubeconfig = serde_yaml::from_str(cm.ok()["data"]["kubeconfig"].as_str().unwrap()).unwrap();
    assert_eq!(kc.clusters[0].cluster.ca_pem().unwrap().unwrap().trim(), ca.trim());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_etcd_stops_its_controllers_before_its_lease_can_expire() {
    let mut etcd = EtcdServer::start_new();
    let s = FedServer::start_with_args(&etcd.endpoint(), &["--leader-elect-lease-duration", "6s"]);
    let c = s.client();
    wait_until(Duration::from_secs(10), "leading", || is_leader(&c)).await;
    // etcd stops answering: renewals hang; the leader must step down within 2/3 of the
    // lease (4 s), i.e. before etcd could let anyone else in (6 s)
    etcd.pause();
    let paused = Instant::now();
    let took = wait_until(Duration::from_secs(10), "stepping down", || async { !is_leader(&c).await }).await.max(paused.elapsed());
    eprintln!("stepped down after {took:?}");
    assert!(took < Duration::from_secs(6), "stepped down after {took:?}");
    assert!(s.log().contains("stopped leading"));
    // etcd back: it leads again
    etcd.resume();
    wait_until(Duration::from_secs(30), "leading again", || is_leader(&c)).await;
}
