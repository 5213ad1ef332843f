//! `fedctl agent` end to end, with real processes: etcd, `fedctl server`, a fedsim member and
//! the agent. Registration, heartbeat, status, the member credential, Works applied and
//! deleted, Borg's rule across agent and server restarts, certificate rotation, and a
//! `Cluster` owned by another member.
//!
//! Each member joins with `fedctl join` (bootstrap token from the server's join command);
//! certificate renewals go through the server's CSR controller.

mod common;

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::agent::AgentProcess;
use common::etcd::EtcdServer;
use common::member::JoinOptions;
use common::procs::{client_from_kubeconfig, FedsimProcess};
use common::server::{ApiClient, FedServer};
use fedctl::agent::config::{AgentConfig, AGENTS_GROUP, AGENT_SIGNER, AGENT_USER_PREFIX};
use fedctl::api::federation::{DELETION_ORPHAN, WORKLOAD_DELETION_ANNOTATION};
use serde_json::{json, Value};

const NS: &str = "fed-exec-member-a";
const CLUSTER: &str = "/apis/cluster.fedctl.io/v1alpha1/clusters/member-a";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/fed-exec-member-a/leases/cluster-heartbeat";
const SECRET: &str = "/api/v1/namespaces/fed-exec-member-a/secrets/member-credential";
const WORKS: &str = "/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-member-a/works";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// One federation with one member and its agent. Fields drop in order: agent first.
struct Env {
    agent: AgentProcess,
    sim: FedsimProcess,
    fed: FedServer,
    _etcd: EtcdServer,
    dir: tempfile::TempDir,
    admin: ApiClient,
    member: reqwest::Client,
    member_url: String,
}

impl Env {
    /// Starts etcd, the server, a fedsim `member-a` (3 nodes × 4 pods), creates the exec
    /// namespace, writes the agent's config (certificate valid `validity`, heartbeat
    /// `heartbeat` s) and starts the agent after `before_agent` ran.
    async fn start(heartbeat: u64) -> Env {
        Self::start_with(heartbeat, &[], |_| async {}).await
    }

    /// [`Env::start`] with extra `fedctl server` flags.
    async fn start_with<F, Fut>(heartbeat: u64, server_args: &[&str], before_agent: F) -> Env
    where
        F: FnOnce(ApiClient) -> Fut,
        Fut: Future<Output = ()>,
    {
        let etcd = EtcdServer::start_new();
        let fed = FedServer::start_with_args(&etcd.endpoint(), server_args);
        let sim = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), "member-a", &["--nodes", "3", "--pods-per-node", "4", "--namespaces", "4", "--seed", "3"], Duration::from_secs(60))
            .expect("start fedsim");
        let admin = fed.client();
        // the cluster-controller creates it once the Cluster exists; Works made before that
        // need it now
        let r = admin.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
        assert!(r.status == 201 || r.status == 409, "create {NS}: {}", r.text);
        before_agent(admin.clone()).await;
        let dir = tempfile::Builder::new().prefix("fedctl-agent-").tempdir().expect("temp dir");
        let config_dir = dir.path().join("agent");
        join(&fed, &sim.kubeconfig, &config_dir, heartbeat);
        let agent = AgentProcess::start(&config_dir, &dir.path().join("agent.log"));
        let (member, member_url) = client_from_kubeconfig(&sim.kubeconfig).expect("member client");
        Env { agent, sim, fed, _etcd: etcd, dir, admin, member, member_url }
    }

    fn config_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("agent")
    }

    /// GET on the member as its admin: `(status, body)`.
    async fn member_get(&self, path: &str) -> (u16, Value) {
        let r = self.member.get(format!("{}{path}", self.member_url)).timeout(Duration::from_secs(10)).send().await.expect("member GET");
        let code = r.status().as_u16();
        (code, r.json().await.unwrap_or(Value::Null))
    }
}

/// `fedctl join member-a` with the server's printed join command (labels, zone, region),
/// then the heartbeat interval set to `heartbeat` s in the `agent.yaml` it wrote.
fn join(fed: &FedServer, member_kubeconfig: &Path, config_dir: &Path, heartbeat: u64) {
    let o = JoinOptions { labels: "env=test,tier=gold", zone: "zone-a", region: "region-1", heartbeat };
    common::member::join(fed, "member-a", member_kubeconfig, config_dir, &o);
}

/// Polls `f` until it returns `Ok` or `timeout` passes; then panics with the last error and
/// the agent's log. Panics at once if the agent has exited.
async fn eventually<T, F, Fut>(agent: &mut AgentProcess, what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        agent.assert_alive();
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => {
                panic!("{what}: not within {timeout:?}: {e}\nagent log:\n{}", agent.log_tail(60))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The status code of a GET on the member (`url` + `path`).
async fn get_dyn(member: &reqwest::Client, url: &str, path: &str) -> Result<u16, String> {
    member.get(format!("{url}{path}")).send().await.map(|r| r.status().as_u16()).map_err(|e| e.to_string())
}

/// Waits until the federation answers 404 for Work `name` (its finalizer done).
async fn until_work_gone(agent: &mut AgentProcess, admin: &ApiClient, name: &str, what: &str) {
    eventually(agent, what, Duration::from_secs(20), || async {
        match admin.get(&format!("{WORKS}/{name}")).await.status {
            404 => Ok(()),
            c => Err(format!("work still answers {c}")),
        }
    })
    .await;
}

/// Waits until the member answers 404 at `path`.
async fn until_gone_on_member(agent: &mut AgentProcess, member: &reqwest::Client, url: &str, path: &str, what: &str, timeout: Duration) {
    eventually(agent, what, timeout, || async {
        match get_dyn(member, url, path).await? {
            404 => Ok(()),
            c => Err(format!("{path} still answers {c}")),
        }
    })
    .await;
}

/// POSTs `object` to the member's `collection`, then waits until the member answers 200 at
/// `probe` (a CRD's resources served).
async fn create_on_member(agent: &mut AgentProcess, member: &reqwest::Client, url: &str, collection: &str, object: &Value, probe: &str) {
    let r = member.post(format!("{url}{collection}")).json(object).send().await.expect("member POST");
    assert_eq!(r.status(), 201, "creating {} on the member", object["metadata"]["name"]);
    eventually(agent, probe, Duration::from_secs(20), || async {
        match get_dyn(member, url, probe).await? {
            200 => Ok(()),
            c => Err(format!("{probe} answers {c}")),
        }
    })
    .await;
}

fn ok_json(r: &common::server::Reply) -> Result<Value, String> {
    if (200..300).contains(&r.status) {
        Ok(r.json.clone())
    } else {
        Err(format!("HTTP {}: {}", r.status, r.text))
    }
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.27", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
            }
        }
    })
}

fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}
    })
}

fn work(name: &str, manifests: Vec<Value>) -> Value {
    json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": name, "namespace": NS}, "spec": {"manifests": manifests}})
}

/// The manifest status of `kind`/`name` in a Work.
fn manifest_status<'a>(w: &'a Value, kind: &str, name: &str) -> Option<&'a Value> {
    w.pointer("/status/manifestStatuses")?.as_array()?.iter().find(|s| s["identifier"]["kind"] == kind && s["identifier"]["name"] == name)
}

fn condition<'a>(obj: &'a Value, ty: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == ty)
}

fn b64d(v: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or("")).expect("base64")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_registers_applies_works_and_obeys_borgs_rule() {
    let mut env = Env::start(1).await;
    let admin = env.admin.clone();

    // --- registration: Cluster with spec and status matching the member
    let (_, ks) = env.member_get("/api/v1/namespaces/kube-system").await;
    let member_id = ks["metadata"]["uid"].as_str().expect("kube-system uid").to_string();
    let (_, nodes) = env.member_get("/api/v1/nodes").await;
    let node_count = nodes["items"].as_array().unwrap().len();
    let (_, version) = env.member_get("/version").await;
    let cluster = eventually(&mut env.agent, "Cluster registered with status", Duration::from_secs(30), || async {
        let c = ok_json(&admin.get(CLUSTER).await)?;
        if c.pointer("/status/nodeSummary").is_none() || c.pointer("/status/resourceSummary").is_none() || condition(&c, "Ready").is_none() {
            return Err(format!("no status yet: {c}"));
        }
        Ok(c)
    })
    .await;
    assert_eq!(cluster["spec"]["id"], member_id.as_str());
    assert_eq!(cluster["spec"]["apiEndpoint"], env.member_url.trim_end_matches('/'));
    assert_eq!(cluster["spec"]["syncMode"], "Pull");
    assert_eq!(cluster["spec"]["zone"], "zone-a");
    assert_eq!(cluster["spec"]["region"], "region-1");
    assert_eq!(cluster["spec"]["secretRef"], json!({"namespace": NS, "name": "member-credential"}));
    assert_eq!(cluster["metadata"]["labels"]["env"], "test");
    assert_eq!(cluster["status"]["kubernetesVersion"], version["gitVersion"]);
    assert_eq!(cluster["status"]["nodeSummary"], json!({"totalNum": node_count, "readyNum": node_count}));
    let ready = condition(&cluster, "Ready").unwrap();
    assert_eq!(ready["status"], "True", "{ready}");
    assert!(ready["lastHeartbeatTime"].is_string());
    let want_pods: i128 = nodes["items"].as_array().unwrap().iter().map(|n| fedctl::agent::quantity::parse_milli(n["status"]["allocatable"]["pods"].as_str().unwrap()).unwrap()).sum();
    assert_eq!(cluster["status"]["resourceSummary"]["allocatable"]["pods"], fedctl::agent::quantity::format_count(want_pods));
    assert!(cluster["status"]["resourceSummary"]["allocated"]["cpu"].is_string());
    let gvs: Vec<&str> = cluster["status"]["apiEnablements"].as_array().unwrap().iter().filter_map(|g| g["groupVersion"].as_str()).collect();
    assert!(gvs.contains(&"v1") && gvs.contains(&"apps/v1"), "{gvs:?}");

    // --- heartbeat: the Lease is renewed (MicroTime renewTime advances)
    let lease = eventually(&mut env.agent, "heartbeat Lease", Duration::from_secs(20), || async { ok_json(&admin.get(LEASE).await) }).await;
    assert_eq!(lease["spec"]["holderIdentity"], "member-a");
    let t1 = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    assert_eq!(t1.split('.').nth(1).map(str::len), Some(7), "MicroTime with 6 digits + Z: {t1}");
    eventually(&mut env.agent, "Lease renewed", Duration::from_secs(10), || async {
        let l = ok_json(&admin.get(LEASE).await)?;
        let t2 = l["spec"]["renewTime"].as_str().unwrap_or("").to_string();
        if t2 > t1 {
            Ok(())
        } else {
            Err(format!("renewTime still {t2}"))
        }
    })
    .await;

    // --- member credential: a working read-only token for the member
    let secret = eventually(&mut env.agent, "member credential Secret", Duration::from_secs(20), || async { ok_json(&admin.get(SECRET).await) }).await;
    let token = String::from_utf8(b64d(&secret["data"]["token"])).unwrap();
    let ca = String::from_utf8(b64d(&secret["data"]["ca.crt"])).unwrap();
    let server = String::from_utf8(b64d(&secret["data"]["server"])).unwrap();
    assert_eq!(server, env.member_url.trim_end_matches('/'));
    let reader = reqwest::Client::builder().use_rustls_tls().add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("member CA")).build().unwrap();
    let pods = reader.get(format!("{server}/api/v1/pods")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(pods.status(), 200, "LIST pods with the synced token");
    let pods: Value = pods.json().await.unwrap();
    assert_eq!(pods["items"].as_array().unwrap().len(), 12);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "written-by-the-reader"}});
    let write = reader.post(format!("{server}/api/v1/namespaces/default/configmaps")).bearer_auth(&token).json(&cm).send().await.unwrap();
    assert_eq!(write.status(), 403, "the synced token is read-only");
    assert_eq!(env.member_get("/api/v1/namespaces/default/configmaps/written-by-the-reader").await.0, 404);
    // deleted in the federation → written again
    admin.delete(SECRET).await.ok();
    eventually(&mut env.agent, "member credential re-synced after deletion", Duration::from_secs(15), || async { ok_json(&admin.get(SECRET).await).map(|_| ()) }).await;

    // --- a Work with a Deployment and a Service is applied; status flows back
    let r = admin.post(WORKS, &work("web", vec![deployment("web", 2), service("web")])).await;
    r.ok();
    let w = eventually(&mut env.agent, "Deployment readyReplicas in Work status", Duration::from_secs(40), || async {
        let w = ok_json(&admin.get(&format!("{WORKS}/web")).await)?;
        let ready = manifest_status(&w, "Deployment", "web").and_then(|s| s.pointer("/status/readyReplicas")).and_then(Value::as_i64);
        if ready == Some(2) {
            Ok(w)
        } else {
            Err(format!("status: {}", w["status"]))
        }
    })
    .await;
    assert_eq!(w["metadata"]["finalizers"], json!(["fedctl.io/exec-cleanup"]));
    assert_eq!(condition(&w, "Applied").unwrap()["status"], "True");
    let svc_status = manifest_status(&w, "Service", "web").expect("service status");
    assert_eq!(svc_status["applied"], true);
    assert_eq!(svc_status["identifier"], json!({"group": "", "version": "v1", "kind": "Service", "namespace": "shop", "name": "web"}));
    let (code, dep) = env.member_get("/apis/apps/v1/namespaces/shop/deployments/web").await;
    assert_eq!(code, 200);
    assert_eq!(dep["spec"]["replicas"], 2);
    assert_eq!(dep["metadata"]["annotations"]["work.fedctl.io/work"], "fed-exec-member-a/web");
    assert!(dep["metadata"]["managedFields"].as_array().unwrap().iter().any(|m| m["manager"] == "fedctl" && m["operation"] == "Apply"));
    assert_eq!(env.member_get("/api/v1/namespaces/shop/services/web").await.0, 200);

    // --- the resource summary follows the member's pods as they change (the agent's pod
    // informer, no relisting): the Deployment's two pods add 2 × (100m, 64Mi)
    let allocated = |c: &Value, k: &str| fedctl::agent::quantity::parse_milli(c["status"]["resourceSummary"]["allocated"][k].as_str().unwrap_or("")).unwrap_or(-1);
    let (cpu0, mem0, pods0) = (allocated(&cluster, "cpu"), allocated(&cluster, "memory"), allocated(&cluster, "pods"));
    eventually(&mut env.agent, "resourceSummary.allocated counts the Deployment's pods", Duration::from_secs(30), || async {
        let c = ok_json(&admin.get(CLUSTER).await)?;
        let got = (allocated(&c, "cpu") - cpu0, allocated(&c, "memory") - mem0, allocated(&c, "pods") - pods0);
        if got == (200, 2 * 64 * (1 << 20) * 1000, 2000) {
            Ok(())
        } else {
            Err(format!("allocated grew by {got:?}: {}", c["status"]["resourceSummary"]))
        }
    })
    .await;

    // --- the agent's /metrics counts what it did
    // (HTTPS only, with the self-signed serving certificate whose fingerprint it printed)
    let url = env.agent.metrics_url().expect("agent logged its metrics URL");
    let pin = env.agent.metrics_cert_sha256().expect("agent logged its metrics certificate");
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let scraper = reqwest::Client::builder().danger_accept_invalid_certs(true).tls_info(true).build().unwrap();
    let resp = scraper.get(&url).send().await.unwrap();
    let der = resp.extensions().get::<reqwest::tls::TlsInfo>().and_then(|i| i.peer_certificate()).expect("peer certificate").to_vec();
    assert_eq!(format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&der))), pin, "served certificate");
    let text = resp.text().await.unwrap();
    match reqwest::get(url.replacen("https://", "http://", 1)).await {
        Ok(r) => {
            let body = r.text().await.unwrap_or_default();
            assert!(!body.contains("fedctl_agent"), "plain HTTP got metrics: {body}");
        }
        Err(_) => {} // the listener speaks TLS only: the plaintext request fails
    }
    let sample = |series: &str| text.lines().find_map(|l| l.strip_prefix(series).and_then(|r| r.trim().parse::<f64>().ok())).unwrap_or(0.0);
    assert!(sample(r#"fedctl_agent_work_applies_total{result="success"}"#) >= 2.0, "{text}");
    assert!(sample(r#"fedctl_agent_reconciles_total{name="exec"}"#) >= 1.0, "{text}");
    assert!(sample(r#"fedctl_agent_reconciles_total{name="cluster-status"}"#) >= 1.0, "{text}");

    // --- invalid manifests: error status, the agent carries on
    admin.post(WORKS, &work("broken", vec![json!({"apiVersion": "v1", "kind": "NoSuchKind", "metadata": {"name": "x"}}), json!({"kind": "ConfigMap"}), json!(42)])).await.ok();
    let broken = eventually(&mut env.agent, "invalid manifests reported", Duration::from_secs(20), || async {
        let w = ok_json(&admin.get(&format!("{WORKS}/broken")).await)?;
        let n = w.pointer("/status/manifestStatuses").and_then(Value::as_array).map_or(0, Vec::len);
        if n == 3 {
            Ok(w)
        } else {
            Err(format!("status: {}", w["status"]))
        }
    })
    .await;
    let statuses = broken["status"]["manifestStatuses"].as_array().unwrap();
    assert!(statuses.iter().all(|s| s["applied"] == false && !s["message"].as_str().unwrap().is_empty()), "{statuses:?}");
    assert_eq!(condition(&broken, "Applied").unwrap()["status"], "False");
    // … and such a Work can still be deleted (nothing of it was applied)
    admin.delete(&format!("{WORKS}/broken")).await.ok();
    until_work_gone(&mut env.agent, &admin, "broken", "invalid Work deleted").await;

    // --- removing the Service from the Work deletes it from the member, not the Deployment
    let mut w = ok_json(&admin.get(&format!("{WORKS}/web")).await).unwrap();
    w["spec"]["manifests"] = json!([deployment("web", 2)]);
    admin.put(&format!("{WORKS}/web"), &w).await.ok();
    let member = env.member.clone();
    let url = env.member_url.clone();
    let get = |p: &'static str| {
        let (member, url) = (member.clone(), url.clone());
        async move { member.get(format!("{url}{p}")).send().await.map(|r| r.status().as_u16()).map_err(|e| e.to_string()) }
    };
    until_gone_on_member(&mut env.agent, &member, &url, "/api/v1/namespaces/shop/services/web", "Service deleted from the member", Duration::from_secs(20)).await;
    assert_eq!(env.member_get("/apis/apps/v1/namespaces/shop/deployments/web").await.0, 200);

    // --- drift on the member is undone at the next resync (Karmada's objectwatcher): a label
    // removed by hand (a metadata change: the generation stays), then the Deployment scaled
    // (a new generation)
    const DEP: &str = "/apis/apps/v1/namespaces/shop/deployments/web";
    let merge = |path: &'static str, patch: Value| {
        let (member, url) = (member.clone(), url.clone());
        async move {
            let r = member.patch(format!("{url}{path}")).header("content-type", "application/merge-patch+json").json(&patch).send().await.expect("member PATCH");
            assert_eq!(r.status(), 200, "PATCH {path} on the member");
            r.json::<Value>().await.expect("patched object")
        }
    };
    let generation = env.member_get(DEP).await.1["metadata"]["generation"].clone();
    let edited = merge(DEP, json!({"metadata": {"labels": {"app": null}}})).await;
    assert_eq!((edited["metadata"]["labels"]["app"].clone(), edited["metadata"]["generation"].clone()), (Value::Null, generation));
    let dep_state = |v: &Value| (v["metadata"]["labels"]["app"].clone(), v["spec"]["replicas"].clone());
    let restored = || async {
        let r = member.get(format!("{url}{DEP}")).send().await.map_err(|e| e.to_string())?;
        let d: Value = r.json().await.map_err(|e| e.to_string())?;
        if dep_state(&d) == (json!("web"), json!(2)) {
            Ok(())
        } else {
            Err(format!("member Deployment: {}", d["metadata"]))
        }
    };
    eventually(&mut env.agent, "label removed on the member restored", Duration::from_secs(70), restored).await;
    assert!(env.agent.log().contains("has other labels or annotations of its manifest than the agent applied"), "agent log:\n{}", env.agent.log());
    // deleted and made again by hand from a copy with other replicas: the same generation
    // (1, as the agent recorded it: nothing moved it yet), another uid
    let mut copy = env.member_get(DEP).await.1;
    for k in ["uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"] {
        copy["metadata"].as_object_mut().unwrap().remove(k);
    }
    copy.as_object_mut().unwrap().remove("status");
    copy["spec"]["replicas"] = json!(7);
    let deps = "/apis/apps/v1/namespaces/shop/deployments";
    let made = loop {
        let del = member.delete(format!("{url}{DEP}")).send().await.expect("member DELETE");
        assert!(del.status().is_success(), "deleting the Deployment on the member: {}", del.status());
        let r = member.post(format!("{url}{deps}")).json(&copy).send().await.expect("member POST");
        match r.status().as_u16() {
            201 => break r.json::<Value>().await.unwrap(),
            // the agent re-created it in between: again
            409 => continue,
            c => panic!("re-creating the Deployment on the member: {c}"),
        }
    };
    assert_eq!((made["metadata"]["generation"].clone(), dep_state(&made)), (json!(1), (json!("web"), json!(7))));
    eventually(&mut env.agent, "Deployment made again by hand restored", Duration::from_secs(70), restored).await;
    assert!(env.agent.log().contains("was deleted and made again since the agent applied it"), "agent log:\n{}", env.agent.log());
    let scaled = merge(DEP, json!({"spec": {"replicas": 1}})).await;
    assert_eq!(dep_state(&scaled), (json!("web"), json!(1)));
    eventually(&mut env.agent, "Deployment scaled on the member scaled back", Duration::from_secs(70), restored).await;
    assert!(env.agent.log().contains("changed since the agent applied it"), "agent log:\n{}", env.agent.log());
    // --- a namespace the agent created, deleted on the member afterwards: the next Work into
    // it creates it again (the agent remembers namespaces it saw; the apply's 404 corrects it)
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "scratch"}, "data": {"k": "v"}});
    admin.post(WORKS, &work("scratch-a", vec![cm("a")])).await.ok();
    eventually(&mut env.agent, "ConfigMap a applied in a new namespace", Duration::from_secs(20), || async {
        match get_dyn(&member, &url, "/api/v1/namespaces/scratch/configmaps/a").await? {
            200 => Ok(()),
            c => Err(format!("configmap answers {c}")),
        }
    })
    .await;
    let del = member.delete(format!("{url}/api/v1/namespaces/scratch")).send().await.expect("member DELETE namespace");
    assert!(del.status().is_success(), "deleting the namespace on the member: {}", del.status());
    until_gone_on_member(&mut env.agent, &member, &url, "/api/v1/namespaces/scratch", "namespace gone from the member", Duration::from_secs(30)).await;
    admin.post(WORKS, &work("scratch-b", vec![cm("b")])).await.ok();
    let b = eventually(&mut env.agent, "Work into the deleted namespace applied", Duration::from_secs(20), || async {
        let w = ok_json(&admin.get(&format!("{WORKS}/scratch-b")).await)?;
        match condition(&w, "Applied") {
            Some(c) if c["status"] == "True" => Ok(w),
            _ => Err(format!("status: {}", w["status"])),
        }
    })
    .await;
    assert_eq!(manifest_status(&b, "ConfigMap", "b").map(|s| s["applied"].clone()), Some(json!(true)));
    assert_eq!(env.member_get("/api/v1/namespaces/scratch/configmaps/b").await.0, 200);
    assert!(env.agent.log().contains("the namespace is gone from the member; creating it again"), "agent log:\n{}", env.agent.log());
    // a kind without a generation: its data edited on the member is written back
    let edited = merge("/api/v1/namespaces/scratch/configmaps/b", json!({"data": {"k": "edited"}})).await;
    assert_eq!(edited["data"]["k"], "edited");
    eventually(&mut env.agent, "ConfigMap edited on the member restored", Duration::from_secs(70), || async {
        let r = member.get(format!("{url}/api/v1/namespaces/scratch/configmaps/b")).send().await.map_err(|e| e.to_string())?;
        let code = r.status().as_u16();
        let cm: Value = r.json().await.unwrap_or(Value::Null);
        if code == 200 && cm["data"]["k"] == "v" {
            Ok(())
        } else {
            Err(format!("{code}: {}", cm["data"]))
        }
    })
    .await;

    // --- a custom resource whose CRD is deleted on the member: the Work reports the kind as
    // not served (discovery asked again), and is applied once the CRD is back
    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.test.fedctl.io"},
        "spec": {"group": "test.fedctl.io", "scope": "Namespaced", "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let gadgets = "/apis/test.fedctl.io/v1/namespaces/shop/gadgets";
    create_on_member(&mut env.agent, &member, &url, CRDS, &crd, gadgets).await;
    let gadget = json!({"apiVersion": "test.fedctl.io/v1", "kind": "Gadget", "metadata": {"name": "g", "namespace": "shop"}, "spec": {"size": 3}});
    admin.post(WORKS, &work("gadget", vec![gadget])).await.ok();
    let applied_reason = || async {
        let w = ok_json(&admin.get(&format!("{WORKS}/gadget")).await)?;
        condition(&w, "Applied").map(|c| (c["status"].clone(), c["reason"].clone())).ok_or(format!("status: {}", w["status"]))
    };
    let wait_reason = |want: (Value, Value)| async move {
        let got = applied_reason().await?;
        if got == want {
            Ok(())
        } else {
            Err(format!("Applied condition {got:?}"))
        }
    };
    eventually(&mut env.agent, "Gadget applied", Duration::from_secs(20), || wait_reason((json!("True"), json!("AppliedSuccessful")))).await;
    let del = member.delete(format!("{url}{CRDS}/gadgets.test.fedctl.io")).send().await.expect("member DELETE CRD");
    assert!(del.status().is_success(), "deleting the CRD on the member: {}", del.status());
    eventually(&mut env.agent, "Gadget's kind reported not served", Duration::from_secs(70), || wait_reason((json!("False"), json!("KindNotServed")))).await;
    create_on_member(&mut env.agent, &member, &url, CRDS, &crd, gadgets).await;
    eventually(&mut env.agent, "Gadget applied again once its CRD is back", Duration::from_secs(70), || wait_reason((json!("True"), json!("AppliedSuccessful")))).await;
    assert_eq!(env.member_get("/apis/test.fedctl.io/v1/namespaces/shop/gadgets/g").await.0, 200);
    // its version switched to `served: false`: the Gadget stays on the member, out of reach,
    // so deleting the Work waits until it can be deleted
    let serve = |served: bool| {
        let (member, url) = (member.clone(), url.clone());
        async move {
            let patch = json!([{"op": "replace", "path": "/spec/versions/0/served", "value": served}]);
            let r = member.patch(format!("{url}{CRDS}/gadgets.test.fedctl.io")).header("content-type", "application/json-patch+json").json(&patch).send().await.expect("member PATCH CRD");
            assert_eq!(r.status(), 200, "serving the CRD's version: {served}");
        }
    };
    // a manifest naming a version the CRD does not define: nothing of it can exist, so its
    // Work is deleted at once (a second CRD claiming the same kind, refused by the member and
    // listed first, changes nothing)
    let mut rival = crd.clone();
    rival["metadata"]["name"] = json!("agadgets.test.fedctl.io");
    rival["spec"]["names"] = json!({"plural": "agadgets", "singular": "agadget", "kind": "Gadget"});
    let r = member.post(format!("{url}{CRDS}")).json(&rival).send().await.expect("member POST CRD");
    assert_eq!(r.status(), 201, "creating the rival CRD on the member");
    let typo = json!({"apiVersion": "test.fedctl.io/v9", "kind": "Gadget", "metadata": {"name": "t", "namespace": "shop"}});
    admin.post(WORKS, &work("typo", vec![typo])).await.ok();
    eventually(&mut env.agent, "Gadget v9 reported not served", Duration::from_secs(20), || async {
        let w = ok_json(&admin.get(&format!("{WORKS}/typo")).await)?;
        match condition(&w, "Applied") {
            Some(c) if c["reason"] == "KindNotServed" => Ok(()),
            _ => Err(format!("status: {}", w["status"])),
        }
    })
    .await;
    admin.delete(&format!("{WORKS}/typo")).await.ok();
    until_work_gone(&mut env.agent, &admin, "typo", "the v9 Work deleted").await;
    let del = member.delete(format!("{url}{CRDS}/agadgets.test.fedctl.io")).send().await.expect("member DELETE CRD");
    assert!(del.status().is_success(), "deleting the rival CRD: {}", del.status());
    // unserved, and the Work deleted at once (the agent's discovery cache still says served)
    serve(false).await;
    admin.delete(&format!("{WORKS}/gadget")).await.ok();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = ok_json(&admin.get(&format!("{WORKS}/gadget")).await).expect("the Work waits for its Gadget");
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    serve(true).await;
    until_gone_on_member(&mut env.agent, &member, &url, "/apis/test.fedctl.io/v1/namespaces/shop/gadgets/g", "Gadget deleted once served again", Duration::from_secs(70)).await;
    until_work_gone(&mut env.agent, &admin, "gadget", "Gadget's Work gone").await;

    // --- a member object found without its Work annotation (as a namespace another Work's
    // object had created bare) is applied again: its labels and annotation come back
    let labelled = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "labelled", "labels": {"team": "blue"}}});
    admin.post(WORKS, &work("labelled", vec![labelled])).await.ok();
    let ns_state = |v: &Value| (v["metadata"]["labels"]["team"].clone(), v["metadata"]["annotations"]["work.fedctl.io/work"].clone());
    let want = (json!("blue"), json!("fed-exec-member-a/labelled"));
    // the member's namespace carries the Work's label and annotation
    let as_applied = || async {
        let r = member.get(format!("{url}/api/v1/namespaces/labelled")).send().await.map_err(|e| e.to_string())?;
        let code = r.status().as_u16();
        let ns: Value = r.json().await.unwrap_or(Value::Null);
        if code == 200 && ns_state(&ns) == want {
            Ok(())
        } else {
            Err(format!("{code}: {ns}"))
        }
    };
    eventually(&mut env.agent, "labelled Namespace applied", Duration::from_secs(20), as_applied).await;
    let strip = json!({"metadata": {"labels": {"team": null}, "annotations": {"work.fedctl.io/work": null}}});
    let r = member.patch(format!("{url}/api/v1/namespaces/labelled")).header("content-type", "application/merge-patch+json").json(&strip).send().await.expect("member PATCH");
    assert_eq!(r.status(), 200, "stripping the namespace on the member");
    assert_eq!(ns_state(&env.member_get("/api/v1/namespaces/labelled").await.1), (Value::Null, Value::Null));
    eventually(&mut env.agent, "labelled Namespace claimed back", Duration::from_secs(40), as_applied).await;

    // --- Borg's rule: the agent killed, the server restarted → nothing deleted on the member
    env.agent.kill();
    env.fed.stop();
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.fed.restart();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (code, dep) = env.member_get("/apis/apps/v1/namespaces/shop/deployments/web").await;
    assert_eq!(code, 200, "the Deployment survives the agent and the server");
    assert_eq!(dep["status"]["readyReplicas"], 2);
    // a Work created while the agent is down is applied once it is back
    let late_cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late", "namespace": "shop"}, "data": {"k": "v"}});
    env.fed.client().post(WORKS, &work("late", vec![late_cm])).await.ok();
    env.agent.restart();
    let t_restart = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let admin = env.fed.client();
    eventually(&mut env.agent, "Lease renewed after the agent restarted", Duration::from_secs(20), || async {
        let l = ok_json(&admin.get(LEASE).await)?;
        let t = l["spec"]["renewTime"].as_str().unwrap_or("").to_string();
        if t > t_restart {
            Ok(())
        } else {
            Err(format!("renewTime {t}"))
        }
    })
    .await;
    eventually(&mut env.agent, "Work created during the outage applied", Duration::from_secs(20), || async {
        match get("/api/v1/namespaces/shop/configmaps/late").await? {
            200 => Ok(()),
            c => Err(format!("configmap answers {c}")),
        }
    })
    .await;
    // a server restart while the agent runs: the agent resumes its watch
    env.fed.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    env.fed.restart();
    let mut w = eventually(&mut env.agent, "Work readable again", Duration::from_secs(20), || async { ok_json(&admin.get(&format!("{WORKS}/web")).await) }).await;
    w["spec"]["manifests"] = json!([deployment("web", 3)]);
    admin.put(&format!("{WORKS}/web"), &w).await.ok();
    eventually(&mut env.agent, "scaled Deployment ready after the restarts", Duration::from_secs(40), || async {
        let w = ok_json(&admin.get(&format!("{WORKS}/web")).await)?;
        let ready = manifest_status(&w, "Deployment", "web").and_then(|s| s.pointer("/status/readyReplicas")).and_then(Value::as_i64);
        if ready == Some(3) {
            Ok(())
        } else {
            Err(format!("status: {}", w["status"]))
        }
    })
    .await;

    // --- deleting the Work deletes its objects from the member, then the Work goes
    admin.delete(&format!("{WORKS}/web")).await.ok();
    until_gone_on_member(&mut env.agent, &member, &url, "/apis/apps/v1/namespaces/shop/deployments/web", "Deployment deleted from the member", Duration::from_secs(20)).await;
    until_work_gone(&mut env.agent, &admin, "web", "Work gone after its finalizer").await;
    assert_eq!(env.member_get("/api/v1/namespaces/shop").await.0, 200, "the namespace the agent created stays");
    assert!(!env.agent.log().contains("panicked"), "agent log:\n{}", env.agent.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_rotates_its_certificate_without_missing_works() {
    // 20 s certificates from the server's CSR controller (at join, then for renewals):
    // renewals are due 16 s after each is obtained
    let mut env = Env::start_with(2, &["--agent-cert-lifetime", "20s"], |_| async {}).await;
    let admin = env.admin.clone();
    let cert_path = AgentConfig::cert_path(&env.config_dir());
    eventually(&mut env.agent, "Cluster registered", Duration::from_secs(30), || async { ok_json(&admin.get(CLUSTER).await).map(|_| ()) }).await;

    // create a Work every 2 s while certificates rotate; every one must reach the member
    let mut certs_seen = vec![std::fs::read_to_string(&cert_path).unwrap()];
    let mut created = Vec::new();
    let started = Instant::now();
    let mut i = 0;
    while certs_seen.len() < 4 {
        assert!(started.elapsed() < Duration::from_secs(100), "only {} certificate(s) in 100 s; agent log:\n{}", certs_seen.len(), env.agent.log_tail(60));
        let name = format!("cm-{i}");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "rot"}, "data": {"i": i.to_string()}});
        admin.post(WORKS, &work(&name, vec![cm])).await.ok();
        created.push(name);
        i += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = std::fs::read_to_string(&cert_path).unwrap();
        if certs_seen.last() != Some(&now) {
            certs_seen.push(now);
        }
        env.agent.assert_alive();
    }
    let rotations = certs_seen.len() - 1;
    assert!(rotations >= 3, "rotations: {rotations}");
    for name in &created {
        let path = format!("/api/v1/namespaces/rot/configmaps/{name}");
        let member = env.member.clone();
        let url = env.member_url.clone();
        eventually(&mut env.agent, &format!("ConfigMap {name} on the member"), Duration::from_secs(30), || {
            let (member, url, path) = (member.clone(), url.clone(), path.clone());
            async move {
                let code = member.get(format!("{url}{path}")).send().await.map_err(|e| e.to_string())?.status().as_u16();
                if code == 200 {
                    Ok(())
                } else {
                    Err(format!("HTTP {code}"))
                }
            }
        })
        .await;
        eventually(&mut env.agent, &format!("Work {name} status"), Duration::from_secs(30), || async {
            let w = ok_json(&admin.get(&format!("{WORKS}/{name}")).await)?;
            if condition(&w, "Applied").is_some_and(|c| c["status"] == "True") {
                Ok(())
            } else {
                Err(w["status"].to_string())
            }
        })
        .await;
    }
    // what the agent asked for, and what it holds now
    let csrs = ok_json(&admin.get(CSRS).await).unwrap();
    let mine: Vec<&Value> = csrs["items"].as_array().unwrap().iter().filter(|c| c["spec"]["username"] == format!("{AGENT_USER_PREFIX}member-a")).collect();
    assert!(mine.len() >= rotations, "{csrs}");
    for csr in mine {
        assert_eq!(csr["spec"]["signerName"], AGENT_SIGNER);
        let usages: Vec<&str> = csr["spec"]["usages"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(usages, ["client auth", "digital signature"]);
        let (cn, groups) = fedctl::pki::csr_subject(&b64d(&csr["spec"]["request"])).expect("CSR subject");
        assert_eq!((cn.as_str(), groups.as_slice()), (format!("{AGENT_USER_PREFIX}member-a").as_str(), [AGENTS_GROUP.to_string()].as_slice()));
    }
    let info = fedctl::pki::cert_info(certs_seen.last().unwrap()).unwrap();
    assert_eq!(info.common_name, format!("{AGENT_USER_PREFIX}member-a"));
    assert_eq!(info.organizations, [AGENTS_GROUP]);
    assert!(info.not_after > chrono::Utc::now());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(AgentConfig::key_path(&env.config_dir())).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let log = env.agent.log();
    assert!(log.contains("agent certificate renewed"), "{log}");
    assert!(log.contains("federation client swapped; resuming watch"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_refuses_a_cluster_owned_by_another_member_and_reports_an_unreachable_member() {
    let mut env = Env::start_with(1, &[], |admin| async move {
        let other =
            json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "member-a"}, "spec": {"id": "another-members-uid", "apiEndpoint": "https://10.9.9.9:6443"}});
        admin.post("/apis/cluster.fedctl.io/v1alpha1/clusters", &other).await.ok();
        admin.post(WORKS, &work("early", vec![service("early")])).await.ok();
    })
    .await;
    let admin = env.admin.clone();
    let log_path = env.agent.log_path().to_path_buf();
    eventually(&mut env.agent, "refusal logged", Duration::from_secs(20), || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        async move {
            if log.contains("belongs to another member") {
                Ok(())
            } else {
                Err("not yet".to_string())
            }
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c = ok_json(&admin.get(CLUSTER).await).unwrap();
    assert_eq!(c["spec"]["id"], "another-members-uid", "the other member's Cluster is untouched");
    assert!(c.get("status").is_none_or(|s| s.get("kubernetesVersion").is_none()), "{c}");
    assert_eq!(admin.get(LEASE).await.status, 404, "no heartbeat for a Cluster that is not ours");
    assert_eq!(env.member_get("/api/v1/namespaces/shop/services/early").await.0, 404, "no Work applied");

    // the other member is unjoined (its Works and exec namespace go); this agent registers
    admin.delete(CLUSTER).await.ok();
    let id = eventually(&mut env.agent, "registered after the unjoin", Duration::from_secs(40), || async {
        let c = ok_json(&admin.get(CLUSTER).await)?;
        match c["spec"]["id"].as_str() {
            Some(id) if id != "another-members-uid" && c.pointer("/status/kubernetesVersion").is_some() => Ok(id.to_string()),
            other => Err(format!("spec.id {other:?}")),
        }
    })
    .await;
    let (_, ks) = env.member_get("/api/v1/namespaces/kube-system").await;
    assert_eq!(ks["metadata"]["uid"], id.as_str());
    eventually(&mut env.agent, "Work created after registration", Duration::from_secs(20), || async {
        let r = admin.post(WORKS, &work("after", vec![service("after")])).await;
        if r.status == 201 {
            Ok(())
        } else {
            Err(format!("HTTP {}: {}", r.status, r.text))
        }
    })
    .await;
    let member = env.member.clone();
    let url = env.member_url.clone();
    let get = |p: &'static str| {
        let (member, url) = (member.clone(), url.clone());
        async move { member.get(format!("{url}{p}")).send().await.map(|r| r.status().as_u16()).map_err(|e| e.to_string()) }
    };
    eventually(&mut env.agent, "Work applied", Duration::from_secs(30), || async {
        match get("/api/v1/namespaces/shop/services/after").await? {
            200 => Ok(()),
            c => Err(format!("HTTP {c}")),
        }
    })
    .await;
    assert_eq!(env.member_get("/api/v1/namespaces/shop/services/early").await.0, 404, "the unjoined member's Work never ran here");
    let ready = |want: &'static str| {
        let admin = admin.clone();
        async move {
            let c = ok_json(&admin.get(CLUSTER).await)?;
            match condition(&c, "Ready") {
                Some(r) if r["status"] == want => Ok(r.clone()),
                other => Err(format!("{other:?}")),
            }
        }
    };
    eventually(&mut env.agent, "Ready=True", Duration::from_secs(20), || ready("True")).await;

    // the member stops answering: Ready=False (MemberUnreachable) although heartbeats go on,
    // then True again
    env.sim.admin(reqwest::Method::POST, "/fedsim/faults/pause?seconds=14").await.expect("pause fedsim");
    let down = eventually(&mut env.agent, "Ready=False while the member is paused", Duration::from_secs(14), || ready("False")).await;
    assert_eq!(down["reason"], "MemberUnreachable");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = ready("False").await.expect("the federation leaves the agent's verdict while heartbeats arrive");
    assert_eq!(still["reason"], "MemberUnreachable");
    let up = eventually(&mut env.agent, "Ready=True after the pause", Duration::from_secs(30), || ready("True")).await;
    assert_eq!(up["reason"], "MemberReady");
    assert_eq!(env.member_get("/api/v1/namespaces/shop/services/after").await.0, 200, "nothing deleted on the member");

    // a Work deleted with the Orphan policy (as unjoin does) leaves its objects running
    admin.merge_patch(&format!("{WORKS}/after"), &json!({"metadata": {"annotations": {WORKLOAD_DELETION_ANNOTATION: DELETION_ORPHAN}}})).await.ok();
    admin.delete(&format!("{WORKS}/after")).await.ok();
    until_work_gone(&mut env.agent, &admin, "after", "orphaned Work gone").await;
    assert_eq!(env.member_get("/api/v1/namespaces/shop/services/after").await.0, 200, "orphaned objects keep running");
}
