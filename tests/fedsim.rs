//! fedsim as a real process: kube-rs reflectors under churn, kubectl, tokens and RBAC, faults.
//!
//! Every test starts its own small fedsim on a loopback port and kills it (by pid) at the end.
//! The behaviour tests run twice: against a member whose population is loaded into its
//! store, and against a virtual member (`--virtual`: generated objects rendered on read).

#[path = "../cmd/fedctl-bench/procs.rs"]
#[allow(dead_code)]
mod procs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams, ObjectList, PostParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use procs::{client_from_kubeconfig, FedsimProcess};
use reqwest::Method;
use serde_json::{json, Value};

fn fedsim_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fedsim"))
}

/// How the member holds its generated population.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Loaded into the store at start.
    Loaded,
    /// `--virtual`: rendered on read, only changes stored.
    Virtual,
}

fn start(name: &str, nodes: usize, pods_per_node: usize, churn: u32) -> FedsimProcess {
    start_in(Mode::Loaded, name, nodes, pods_per_node, churn)
}

fn start_in(mode: Mode, name: &str, nodes: usize, pods_per_node: usize, churn: u32) -> FedsimProcess {
    let (n, p, c) = (nodes.to_string(), pods_per_node.to_string(), churn.to_string());
    let mut args = vec!["--nodes", &n, "--pods-per-node", &p, "--namespaces", "12", "--namespace-skew", "1.1", "--churn", &c, "--seed", "7", "--job-duration-ms", "300"];
    if mode == Mode::Virtual {
        args.push("--virtual");
    }
    FedsimProcess::start(&fedsim_bin(), name, &args, Duration::from_secs(60)).expect("start fedsim")
}

/// A test body run in both modes: `$loaded` keeps the test's original name.
macro_rules! both_modes {
    ($body:ident, $loaded:ident, $virtual:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $loaded() {
            $body(Mode::Loaded).await
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $virtual() {
            $body(Mode::Virtual).await
        }
    };
}

async fn kube_client(kubeconfig: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.expect("kube config");
    Client::try_from(cfg).expect("kube client")
}

async fn token_client(kubeconfig: &Path, token: &str) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.expect("kube config");
    cfg.auth_info.token = Some(token.to_string().into());
    Client::try_from(cfg).expect("kube client")
}

/// uid → resourceVersion of every pod, from a fresh LIST.
async fn listed(api: &Api<Pod>) -> BTreeMap<String, String> {
    let list: ObjectList<Pod> = api.list(&ListParams::default()).await.expect("list pods");
    list.items.into_iter().map(|p| (p.metadata.uid.unwrap_or_default(), p.metadata.resource_version.unwrap_or_default())).collect()
}

fn cached(store: &reflector::Store<Pod>) -> BTreeMap<String, String> {
    store.state().iter().map(|p| (p.metadata.uid.clone().unwrap_or_default(), p.metadata.resource_version.clone().unwrap_or_default())).collect()
}

/// Waits (bounded) until the reflector's store equals a fresh LIST by uid and resourceVersion.
async fn assert_converges(api: &Api<Pod>, store: &reflector::Store<Pod>, within: Duration) {
    let t0 = Instant::now();
    loop {
        let want = listed(api).await;
        let have = cached(store);
        if want == have {
            assert!(!want.is_empty());
            return;
        }
        if t0.elapsed() > within {
            let missing = want.keys().filter(|k| !have.contains_key(*k)).count();
            let extra = have.keys().filter(|k| !want.contains_key(*k)).count();
            let stale = want.iter().filter(|(k, v)| have.get(*k).is_some_and(|h| h != *v)).count();
            panic!("reflector differs from LIST: {} vs {} pods, {missing} missing, {extra} extra, {stale} stale", have.len(), want.len());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn spawn_reflector(api: Api<Pod>) -> (reflector::Store<Pod>, tokio::task::JoinHandle<()>) {
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    let task = tokio::spawn(async move {
        stream.for_each(|_| futures::future::ready(())).await;
    });
    (reader, task)
}

both_modes!(reflector_stays_equal_to_fedsim_under_churn_in, reflector_stays_equal_to_fedsim_under_churn, reflector_stays_equal_to_fedsim_under_churn_virtual);

async fn reflector_stays_equal_to_fedsim_under_churn_in(mode: Mode) {
    let sim = start_in(mode, "member-a", 20, 10, 200);
    let client = kube_client(&sim.kubeconfig).await;
    let api: Api<Pod> = Api::all(client.clone());
    let (store, task) = spawn_reflector(api.clone());
    tokio::time::timeout(Duration::from_secs(20), store.wait_until_ready()).await.expect("reflector syncs").expect("writer alive");
    // churn runs for a while with the reflector following
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before = sim.admin(Method::GET, "/fedsim/status").await.unwrap();
    assert!(before["revision"].as_i64().unwrap() > 500, "churn advanced the store: {before}");
    sim.admin(Method::POST, "/fedsim/churn?rate=0").await.unwrap();
    assert_converges(&api, &store, Duration::from_secs(15)).await;
    // pod count stays near the initial 200
    let n = store.state().len();
    assert!((150..=250).contains(&n), "pods after churn: {n}");
    task.abort();
}

/// `GET /version/` answers as `/version` does, as kube-apiserver's does (a client asking with
/// the trailing slash got a 404); `/healthz/` stays unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_answers_with_a_trailing_slash() {
    let sim = start("member-version", 1, 1, 0);
    let client = kube_client(&sim.kubeconfig).await;
    let get = |p: &str| http::Request::get(p).body(Vec::new()).unwrap();
    let plain: serde_json::Value = serde_json::from_str(&client.request_text(get("/version")).await.expect("GET /version")).unwrap();
    let slash: serde_json::Value = serde_json::from_str(&client.request_text(get("/version/")).await.expect("GET /version/")).unwrap();
    assert!(plain["gitVersion"].as_str().is_some_and(|v| v.starts_with("v1.")), "{plain}");
    assert_eq!(plain, slash);
    let e = client.request_text(get("/versionz")).await.expect_err("unknown path");
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 404), "{e:?}");
}

both_modes!(served_objects_deserialize_into_k8s_openapi_types_in, served_objects_deserialize_into_k8s_openapi_types, served_objects_deserialize_into_k8s_openapi_types_virtual);

async fn served_objects_deserialize_into_k8s_openapi_types_in(mode: Mode) {
    // 640 pods: an unpaged LIST streams more than one storage page
    let sim = start_in(mode, "member-b", 8, 80, 0);
    let client = kube_client(&sim.kubeconfig).await;
    let pods: ObjectList<Pod> = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await.expect("pods deserialize");
    assert_eq!(pods.items.len(), 640);
    assert!(pods.items.iter().all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")));
    // paged, as informers list: the pages add up to the same pods at one resourceVersion
    let mut paged = Vec::new();
    let mut lp = ListParams::default().limit(100);
    loop {
        let page: ObjectList<Pod> = Api::<Pod>::all(client.clone()).list(&lp).await.expect("page");
        assert!(page.items.len() <= 100);
        paged.extend(page.items.into_iter().map(|p| (p.metadata.namespace.unwrap(), p.metadata.name.unwrap())));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = ListParams::default().limit(100).continue_token(&c),
            _ => break,
        }
    }
    let unpaged: Vec<(String, String)> = pods.items.iter().map(|p| (p.metadata.namespace.clone().unwrap(), p.metadata.name.clone().unwrap())).collect();
    assert_eq!(paged, unpaged);
    let nodes: ObjectList<Node> = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("nodes deserialize");
    assert_eq!(nodes.items.len(), 8);
    let ns: Api<Namespace> = Api::all(client.clone());
    let ks = ns.get("kube-system").await.expect("kube-system");
    assert_eq!(ks.metadata.uid.as_deref(), Some(fedctl::fedsim::kube_system_uid("member-b", 7, 0).as_str()));
    // field selectors kube-apiserver supports on pods
    let node0 = nodes.items[0].metadata.name.clone().unwrap();
    let on0: ObjectList<Pod> = Api::<Pod>::all(client.clone()).list(&ListParams::default().fields(&format!("spec.nodeName={node0}"))).await.unwrap();
    assert_eq!(on0.items.len(), 80);
    let running: ObjectList<Pod> = Api::<Pod>::all(client.clone()).list(&ListParams::default().fields("status.phase=Running")).await.unwrap();
    assert_eq!(running.items.len(), 640);
    // version looks like Kubernetes
    let v = client.apiserver_version().await.expect("version");
    assert_eq!(v.major, "1");

    // a Deployment made by the controllers deserializes too, with a rollout-complete status
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    deps.create(&PostParams::default(), &d).await.expect("create deployment");
    let t0 = Instant::now();
    loop {
        let d = deps.get("web").await.unwrap();
        let st = d.status.clone().unwrap_or_default();
        if st.available_replicas == Some(2) && st.updated_replicas == Some(2) && st.observed_generation == d.metadata.generation {
            let conds = st.conditions.unwrap_or_default();
            assert!(conds.iter().any(|c| c.type_ == "Available" && c.status == "True"));
            assert!(conds.iter().any(|c| c.type_ == "Progressing" && c.reason.as_deref() == Some("NewReplicaSetAvailable")));
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "deployment did not become available: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

both_modes!(service_account_tokens_authenticate_and_rbac_decides_in, service_account_tokens_authenticate_and_rbac_decides, service_account_tokens_authenticate_and_rbac_decides_virtual);

async fn service_account_tokens_authenticate_and_rbac_decides_in(mode: Mode) {
    let sim = start_in(mode, "member-c", 4, 5, 0);
    let admin = kube_client(&sim.kubeconfig).await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "fed-reader"}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.expect("create sa");
    let tr: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}})).unwrap();
    let out = sas.create_token_request("fed-reader", &PostParams::default(), &tr).await.expect("token request");
    let token = out.status.expect("status").token;
    assert!(!token.is_empty());

    let reader = token_client(&sim.kubeconfig, &token).await;
    let pods: Api<Pod> = Api::all(reader.clone());
    match pods.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("want 403 before any binding, got {other:?}"),
    }
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "fed-reader-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "fed-reader", "namespace": "default"}]
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone()).create(&PostParams::default(), &crb).await.expect("create binding");
    let list = pods.list(&ListParams::default()).await.expect("list with view");
    assert_eq!(list.items.len(), 20);
    // watch is a read verb too
    let mut w = pods.watch(&kube::api::WatchParams::default().timeout(2), &list.metadata.resource_version.unwrap()).await.expect("watch allowed").boxed();
    let _ = tokio::time::timeout(Duration::from_secs(4), w.next()).await;
    // writes are not granted by view
    let victim = list.items[0].metadata.name.clone().unwrap();
    let ns = list.items[0].metadata.namespace.clone().unwrap();
    match Api::<Pod>::namespaced(reader.clone(), &ns).delete(&victim, &Default::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403),
        other => panic!("delete must be forbidden, got {other:?}"),
    }
    // the legacy token controller fills a service-account-token Secret; its token works too
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(admin.clone(), "default");
    let sec: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "fed-reader-token", "annotations": {"kubernetes.io/service-account.name": "fed-reader"}},
        "type": "kubernetes.io/service-account-token"
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &sec).await.expect("create token secret");
    let t0 = Instant::now();
    let legacy = loop {
        let s = secrets.get("fed-reader-token").await.unwrap();
        if let Some(t) = s.data.as_ref().and_then(|d| d.get("token")) {
            assert!(s.data.as_ref().unwrap().contains_key("ca.crt"));
            break String::from_utf8(t.0.clone()).unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "token secret not filled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let legacy_client = token_client(&sim.kubeconfig, &legacy).await;
    assert_eq!(Api::<Pod>::all(legacy_client).list(&ListParams::default()).await.expect("legacy token lists").items.len(), 20);
    // discovery lists the token subresource as kube-apiserver does
    let (http, base) = client_from_kubeconfig(&sim.kubeconfig).unwrap();
    let core: Value = http.get(format!("{base}/api/v1")).send().await.unwrap().json().await.unwrap();
    let tok = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "serviceaccounts/token").expect("serviceaccounts/token listed");
    assert_eq!(tok["kind"], "TokenRequest");
    assert_eq!(tok["group"], "authentication.k8s.io");

    // a token for a deleted service account stops working
    sas.delete("fed-reader", &Default::default()).await.expect("delete sa");
    match pods.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 401),
        other => panic!("want 401 after the service account is gone, got {other:?}"),
    }
}

both_modes!(faults_compact_drop_watches_and_pause_in, faults_compact_drop_watches_and_pause, faults_compact_drop_watches_and_pause_virtual);

async fn faults_compact_drop_watches_and_pause_in(mode: Mode) {
    let sim = start_in(mode, "member-d", 10, 10, 150);
    let client = kube_client(&sim.kubeconfig).await;
    let api: Api<Pod> = Api::all(client.clone());
    let (store, task) = spawn_reflector(api.clone());
    tokio::time::timeout(Duration::from_secs(20), store.wait_until_ready()).await.expect("reflector syncs").expect("writer alive");

    // an old resourceVersion, then compaction: a raw watch from it gets ERROR 410 Expired
    let (http, base) = client_from_kubeconfig(&sim.kubeconfig).unwrap();
    let old: Value = http.get(format!("{base}/api/v1/pods?limit=1")).send().await.unwrap().json().await.unwrap();
    let old_rv = old["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(500)).await;
    sim.admin(Method::POST, "/fedsim/faults/compact").await.unwrap();
    let resp = http.get(format!("{base}/api/v1/pods?watch=1&resourceVersion={old_rv}")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(5), resp.text()).await.expect("stream ends").unwrap();
    let first: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "ERROR", "{first}");
    assert_eq!(first["object"]["code"], 410);
    assert_eq!(first["object"]["reason"], "Expired");

    // the reflector survives dropped watches and compaction (it re-watches or re-lists)
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        sim.admin(Method::POST, "/fedsim/faults/drop-watches").await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        sim.admin(Method::POST, "/fedsim/faults/compact").await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    sim.admin(Method::POST, "/fedsim/churn?rate=0").await.unwrap();
    assert_converges(&api, &store, Duration::from_secs(20)).await;
    task.abort();

    // pause: requests hang for the duration, then work again
    sim.admin(Method::POST, "/fedsim/faults/pause?seconds=2").await.unwrap();
    let t0 = Instant::now();
    let held = http.get(format!("{base}/api/v1/namespaces")).timeout(Duration::from_millis(800)).send().await;
    assert!(held.is_err() && held.unwrap_err().is_timeout(), "a request during the pause must time out");
    let status = sim.admin(Method::GET, "/fedsim/status").await.unwrap();
    assert_eq!(status["paused"], true);
    let ok = http.get(format!("{base}/api/v1/namespaces")).timeout(Duration::from_secs(10)).send().await.expect("answered after the pause");
    assert_eq!(ok.status(), 200);
    assert!(t0.elapsed() >= Duration::from_millis(1500), "held until the pause ended");
}

both_modes!(restart_changes_identity_and_node_count_follows_in, restart_changes_identity_and_node_count_follows, restart_changes_identity_and_node_count_follows_virtual);

async fn restart_changes_identity_and_node_count_follows_in(mode: Mode) {
    let sim = start_in(mode, "member-e", 6, 5, 0);
    let client = kube_client(&sim.kubeconfig).await;
    let ns: Api<Namespace> = Api::all(client.clone());
    let uid0 = ns.get("kube-system").await.unwrap().metadata.uid.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());

    sim.admin(Method::POST, "/fedsim/nodes?count=9").await.unwrap();
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 9);
    let out = sim.admin(Method::POST, "/fedsim/nodes?count=4").await.unwrap();
    assert_eq!(out["removed"], 5);
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 4);
    let left = pods.list(&ListParams::default()).await.unwrap();
    let names: Vec<String> = nodes.list(&ListParams::default()).await.unwrap().items.into_iter().map(|n| n.metadata.name.unwrap()).collect();
    assert!(left.items.iter().all(|p| names.contains(p.spec.as_ref().unwrap().node_name.as_ref().unwrap())));
    assert_eq!(left.items.len(), 20, "pods of removed nodes are gone");

    let rv_before = pods.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let r = sim.admin(Method::POST, "/fedsim/faults/restart").await.unwrap();
    let uid1 = ns.get("kube-system").await.unwrap().metadata.uid.unwrap();
    assert_ne!(uid0, uid1);
    assert_eq!(r["kubeSystemUid"], uid1.as_str());
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 6);
    assert_eq!(pods.list(&ListParams::default()).await.unwrap().items.len(), 30);
    // resuming from before the restart is 410 Expired
    match pods.watch(&kube::api::WatchParams::default().timeout(2), &rv_before).await {
        Ok(s) => {
            let first = s.boxed().next().await;
            assert!(matches!(first, Some(Err(_)) | Some(Ok(kube::api::WatchEvent::Error(_)))), "want an expired watch, got {first:?}");
        }
        Err(e) => panic!("watch request failed: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// kubectl

/// The kubectl binaries to test with: the oldest and newest `kubectl.1.NN` next to the
/// `kubectl` on PATH (or in `FEDCTL_KUBECTL_DIR`), else that `kubectl` itself.
fn kubectls() -> Vec<PathBuf> {
    let dir = match std::env::var_os("FEDCTL_KUBECTL_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let Some(path) = std::env::var_os("PATH") else { return vec![] };
            let Some(found) = std::env::split_paths(&path).map(|d| d.join("kubectl")).find(|p| p.is_file()) else { return vec![] };
            match std::fs::canonicalize(&found).ok().and_then(|p| p.parent().map(Path::to_path_buf)) {
                Some(d) => d,
                None => return vec![found],
            }
        }
    };
    let mut versioned: Vec<(u32, PathBuf)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let minor: u32 = name.strip_prefix("kubectl.1.")?.parse().ok()?;
                    Some((minor, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    versioned.sort();
    match (versioned.first(), versioned.last()) {
        (Some(a), Some(b)) if a.0 != b.0 => vec![a.1.clone(), b.1.clone()],
        (Some(a), _) => vec![a.1.clone()],
        _ => {
            let k = dir.join("kubectl");
            if k.is_file() {
                vec![k]
            } else {
                vec![]
            }
        }
    }
}

struct Kubectl<'a> {
    bin: &'a Path,
    kubeconfig: &'a Path,
    cache: &'a Path,
}

impl Kubectl<'_> {
    fn run(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(self.bin).arg("--kubeconfig").arg(self.kubeconfig).arg("--cache-dir").arg(self.cache).arg("--request-timeout=20s").args(args).output().expect("run kubectl");
        let mut s = String::from_utf8_lossy(&out.stdout).to_string();
        s.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), s)
    }

    fn ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.run(args);
        assert!(ok, "kubectl {} ({}) failed: {out}", args.join(" "), self.bin.display());
        out
    }

    /// Polls `args` until `pred` holds on the output (bounded).
    fn until(&self, args: &[&str], within: Duration, pred: impl Fn(&str) -> bool) -> String {
        let t0 = Instant::now();
        loop {
            let (_, out) = self.run(args);
            if pred(&out) {
                return out;
            }
            assert!(t0.elapsed() < within, "kubectl {}: condition not met in {within:?}; last output:\n{out}", args.join(" "));
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn running_count(out: &str) -> usize {
    out.lines().filter(|l| l.contains(" Running ")).count()
}

#[test]
fn kubectl_gets_applies_scales_and_deletes() {
    kubectl_gets_applies_scales_and_deletes_in(Mode::Loaded)
}

#[test]
fn kubectl_gets_applies_scales_and_deletes_virtual() {
    kubectl_gets_applies_scales_and_deletes_in(Mode::Virtual)
}

fn kubectl_gets_applies_scales_and_deletes_in(mode: Mode) {
    let bins = kubectls();
    if bins.is_empty() {
        eprintln!("no kubectl found on PATH or in FEDCTL_KUBECTL_DIR; skipping");
        return;
    }
    eprintln!("kubectl binaries: {bins:?}");
    let sim = start_in(mode, "member-k", 5, 6, 20);
    let cache = procs::tempfile_dir::Dir::new("kubectl-cache").unwrap();
    for bin in &bins {
        let k = Kubectl { bin, kubeconfig: &sim.kubeconfig, cache: cache.path() };
        let pods = k.ok(&["get", "pods", "-A"]);
        let header = pods.lines().next().unwrap_or("");
        for col in ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"] {
            assert!(header.contains(col), "{header}");
        }
        assert!(running_count(&pods) >= 20, "{pods}");
        let nodes = k.ok(&["get", "nodes"]);
        assert!(nodes.lines().next().unwrap_or("").contains("ROLES"), "{nodes}");
        assert_eq!(nodes.lines().filter(|l| l.contains(" Ready ")).count(), 5, "{nodes}");
        let wide = k.ok(&["get", "pods", "-n", "kube-system", "-o", "wide"]);
        assert!(wide.lines().next().unwrap_or("").contains("NODE"), "{wide}");
    }

    let k = Kubectl { bin: bins.last().unwrap(), kubeconfig: &sim.kubeconfig, cache: cache.path() };
    let manifest = cache.path().join("web.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\nspec:\n  replicas: 3\n  selector:\n    matchLabels: {app: fedsim-web}\n  template:\n    metadata:\n      labels: {app: fedsim-web}\n    spec:\n      containers:\n      - name: nginx\n        image: nginx:1.25\n",
    )
    .unwrap();
    k.ok(&["apply", "-f", manifest.to_str().unwrap()]);
    k.until(&["get", "deploy", "web", "-n", "default"], Duration::from_secs(15), |o| o.lines().any(|l| l.starts_with("web ") && l.contains(" 3/3 ")));
    k.until(&["get", "pods", "-n", "default", "-l", "app=fedsim-web"], Duration::from_secs(15), |o| running_count(o) == 3);
    k.ok(&["rollout", "status", "deploy/web", "-n", "default", "--timeout=15s"]);
    k.ok(&["scale", "deploy/web", "-n", "default", "--replicas=5"]);
    k.until(&["get", "pods", "-n", "default", "-l", "app=fedsim-web"], Duration::from_secs(15), |o| running_count(o) == 5);
    k.until(&["get", "deploy", "web", "-n", "default"], Duration::from_secs(15), |o| o.contains(" 5/5 "));
    k.ok(&["delete", "deploy", "web", "-n", "default"]);
    k.until(&["get", "pods", "-n", "default", "-l", "app=fedsim-web"], Duration::from_secs(15), |o| running_count(o) == 0 && o.contains("No resources"));
}
