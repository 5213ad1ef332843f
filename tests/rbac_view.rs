//! The global view obeys the federation's RBAC, end to end: real etcd, a real `fedctl
//! server`, two fedsim members, kubectl 1.27 and 1.33, static token users.
//!
//! A user bound to `view` in namespace `team-a` only lists (and watches) team-a's pods of
//! every member through `--context global` (with the CLUSTER column), may ask `-n team-a`,
//! gets 403 in `team-b`; its watch across namespaces sees team-a's events only and ends with a
//! 410 once the binding goes. A user without any grant gets 403 on the view's list and watch,
//! and sees everything within seconds of a ClusterRoleBinding of `view`. Requests for members
//! (logs, writes) the federation does not allow are refused before any member is contacted.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::etcd::EtcdServer;
use common::kubectl::{oldest_and_newest, Kubectl};
use common::member::register;
use common::procs::FedsimProcess;
use common::server::{ApiClient, FedServer, Next};
use serde_json::{json, Value};

const V: &str = "/apis/search.fedctl.io/v1alpha1";
const DEV_TOKEN: &str = "team-a-dev-token-0123456789";
const NOBODY_TOKEN: &str = "nobody-token-0123456789abc";
const MEMBERS: [&str; 2] = ["member-a", "member-b"];

async fn wait_for(what: &str, secs: u64, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn start_member(name: &str, seed: &str) -> FedsimProcess {
    FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), name, &["--nodes", "1", "--pods-per-node", "3", "--namespaces", "2", "--seed", seed], Duration::from_secs(60)).expect("start fedsim")
}

/// Adds the static token users `team-a-dev` and `nobody` (no groups) and restarts the server.
fn add_users(server: &mut FedServer) {
    server.stop();
    let path = server.data_path().join("tokens");
    let mut text = std::fs::read_to_string(&path).expect("token file");
    text.push_str(&format!("\n{DEV_TOKEN},team-a-dev,uid-dev\n{NOBODY_TOKEN},nobody,uid-nobody\n"));
    std::fs::write(&path, text).unwrap();
    server.restart();
}

/// A copy of the admin kubeconfig whose `global` context acts as `user`.
fn user_kubeconfig(admin: &Kubectl, src: &Path, dir: &Path, user: &str, token: &str) -> PathBuf {
    let path = dir.join(format!("{user}.kubeconfig"));
    std::fs::copy(src, &path).unwrap();
    let k = Kubectl::new(admin.bin.clone(), &admin.version, &path, dir);
    k.run(&["config", "set-credentials", user, &format!("--token={token}")]).ok();
    k.run(&["config", "set-context", "global", &format!("--user={user}")]).ok();
    path
}

fn pod(name: &str, ns: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
}

/// `(namespace, name, cluster)` of every item of a LIST answer.
fn items(r: &Value) -> Vec<(String, String, String)> {
    let s = |o: &Value, p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    r["items"].as_array().cloned().unwrap_or_default().iter().map(|o| (s(o, "/metadata/namespace"), s(o, "/metadata/name"), s(o, "/metadata/annotations/fedctl.io~1cluster"))).collect()
}

/// The sum of `fedctl_global_view_member_requests_total` over its series: requests the view
/// sent to members.
async fn member_requests(admin: &ApiClient) -> f64 {
    let text = admin.get("/metrics").await.text;
    text.lines().filter(|l| l.starts_with("fedctl_global_view_member_requests_total{")).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

async fn allowed(admin: &ApiClient, user: &str, verb: &str, ns: &str) -> bool {
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": {"verb": verb, "resource": "pods", "namespace": ns}}});
    admin.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", &sar).await.json["status"]["allowed"] == true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_global_view_and_the_member_path_obey_rbac() {
    let etcd = EtcdServer::start_new();
    let mut server = FedServer::start_with_args(&etcd.endpoint(), &["--bookmark-interval-seconds", "1"]);
    add_users(&mut server);
    let members: Vec<FedsimProcess> = MEMBERS.iter().enumerate().map(|(i, m)| start_member(m, &(i + 1).to_string())).collect();
    for m in &members {
        register(&server, m).await;
    }
    let admin = server.client();
    common::member::wait_in_view(&server, &MEMBERS).await;

    // team-a and team-b in the federation (not propagated: the members get their own) and on
    // every member, with one pod each
    for ns in ["team-a", "team-b"] {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"fedctl.io/skip-auto-propagation": "true"}}});
        let r = admin.post("/api/v1/namespaces", &obj).await;
        assert_eq!(r.status, 201, "{}", r.text);
        for m in MEMBERS {
            let r = admin.post(&format!("{V}/clusters/{m}/api/v1/namespaces"), &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
            assert_eq!(r.status, 201, "{}", r.text);
            let r = admin.post(&format!("{V}/clusters/{m}/api/v1/namespaces/{ns}/pods"), &pod(&format!("{}-{m}", &ns[5..]), ns)).await;
            assert_eq!(r.status, 201, "{}", r.text);
        }
    }
    wait_for("the teams' pods in the view", 30, async || {
        let r = admin.get(&format!("{V}/global/api/v1/pods")).await;
        items(&r.json).iter().filter(|(ns, _, _)| ns.starts_with("team-")).count() == 4
    })
    .await;
    let all_pods = items(&admin.get(&format!("{V}/global/api/v1/pods")).await.json).len();
    assert!(all_pods > 4, "the generated pods are there too: {all_pods}");

    // --- team-a-dev: `view` bound in team-a only
    let rb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "dev-view", "namespace": "team-a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "team-a-dev"}]});
    let r = admin.post("/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings", &rb).await;
    assert_eq!(r.status, 201, "{}", r.text);
    wait_for("team-a-dev may list pods in team-a", 30, async || allowed(&admin, "team-a-dev", "list", "team-a").await).await;
    let dev = server.token_client(DEV_TOKEN);

    // raw: a list across namespaces holds team-a's pods of every member and nothing else
    let r = dev.get(&format!("{V}/global/api/v1/pods")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut got = items(&r.json);
    got.sort();
    assert_eq!(got, vec![("team-a".into(), "a-member-a".into(), "member-a".into()), ("team-a".into(), "a-member-b".into(), "member-b".into())], "{}", r.text);
    // paged and as a Table too
    let r = dev.get(&format!("{V}/global/api/v1/pods?limit=1")).await;
    assert_eq!(items(&r.json).len(), 1, "{}", r.text);
    assert!(items(&r.json).iter().all(|(ns, _, _)| ns == "team-a"), "{}", r.text);

    let scratch = server.scratch_dir();
    let ks = oldest_and_newest(&server.kubeconfig(), &scratch);
    let dev_kc = user_kubeconfig(&ks[0], &server.kubeconfig(), &scratch, "team-a-dev", DEV_TOKEN);
    for k in oldest_and_newest(&dev_kc, &scratch) {
        let text = k.run(&["--context", "global", "get", "pods", "-A"]).ok().to_string();
        let mut lines = text.lines();
        let head = lines.next().unwrap_or("");
        assert!(head.contains("CLUSTER") && head.starts_with("NAMESPACE"), "kubectl {}: {text}", k.version);
        let rows: Vec<&str> = lines.collect();
        assert_eq!(rows.len(), 2, "kubectl {}: team-a's pods of both members only: {text}", k.version);
        for m in MEMBERS {
            assert!(rows.iter().any(|l| l.starts_with("team-a") && l.contains(&format!("a-{m}")) && l.contains(m)), "kubectl {}: {m}: {text}", k.version);
        }
        let text = k.run(&["--context", "global", "-n", "team-a", "get", "pods"]).ok().to_string();
        assert_eq!(text.lines().count(), 3, "kubectl {}: {text}", k.version);
        let err = k.run(&["--context", "global", "-n", "team-b", "get", "pods"]).failed().to_string();
        assert!(err.contains("pods is forbidden: User \"team-a-dev\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-b\""), "kubectl {}: {err}", k.version);
        let err = k.run(&["--context", "global", "get", "nodes"]).failed().to_string();
        assert!(err.contains("cannot list resource \"nodes\" in API group \"\" at the cluster scope"), "kubectl {}: {err}", k.version);
    }
    let r = dev.get(&format!("{V}/global/api/v1/namespaces/team-b/pods/b-member-a")).await;
    assert_eq!(r.status, 403, "{}", r.text);

    // a watch across namespaces: team-a's events only (initial and live), from every member
    let mut w = dev.watch(&format!("{V}/global/api/v1/pods?watch=1&allowWatchBookmarks=false")).await;
    let initial = w.drain_for(Duration::from_secs(2)).await;
    let names: Vec<String> = initial.iter().map(|e| e["object"]["metadata"]["name"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(initial.len(), 2, "{names:?}");
    assert!(initial.iter().all(|e| e["type"] == "ADDED" && e["object"]["metadata"]["namespace"] == "team-a"), "{initial:?}");
    let kw = oldest_and_newest(&dev_kc, &scratch).remove(1);
    let mut bg = kw.spawn(&["--context", "global", "get", "pods", "-A", "-w", "--output-watch-events"]);
    for (ns, name) in [("team-b", "b2-member-b"), ("team-a", "a2-member-b")] {
        let r = admin.post(&format!("{V}/clusters/member-b/api/v1/namespaces/{ns}/pods"), &pod(name, ns)).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let ev = w.expect_event(Duration::from_secs(10)).await;
    assert_eq!((ev["object"]["metadata"]["namespace"].as_str(), ev["object"]["metadata"]["name"].as_str()), (Some("team-a"), Some("a2-member-b")), "{ev}");
    assert!(bg.wait_for(Duration::from_secs(10), |o| o.contains("a2-member-b")), "kubectl -w: {} {}", bg.stdout(), bg.stderr());
    // the team-b pod (created first) never shows
    for e in w.drain_for(Duration::from_secs(2)).await {
        assert_eq!(e["object"]["metadata"]["namespace"], "team-a", "{e}");
    }
    let out = bg.stop();
    assert!(!out.contains("b2-member-b") && !out.contains("b-member-a"), "kubectl -w saw team-b: {out}");

    // the binding goes: the filtered watch ends with a 410 (the informer relists and is refused)
    let r = admin.delete("/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings/dev-view").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let rest = w.collect_until_end(Duration::from_secs(10)).await;
    let last = rest.last().unwrap_or_else(|| panic!("an ERROR event before the end: {rest:?}"));
    assert_eq!((last["type"].as_str(), last["object"]["code"].as_i64()), (Some("ERROR"), Some(410)), "{rest:?}");
    assert_eq!(dev.get(&format!("{V}/global/api/v1/pods")).await.status, 403);

    // --- nobody: 403 on the view's list and watch, then everything once `view` is bound
    let nobody = server.token_client(NOBODY_TOKEN);
    let r = nobody.get(&format!("{V}/global/api/v1/pods")).await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json["message"], "pods is forbidden: User \"nobody\" cannot list resource \"pods\" in API group \"\" at the cluster scope", "{}", r.text);
    let err = nobody.try_watch(&format!("{V}/global/api/v1/pods?watch=1")).await.err().expect("a 403");
    assert!(err.contains("HTTP 403") && err.contains("cannot watch resource \\\"pods\\\""), "{err}");
    assert_eq!(nobody.get(&format!("{V}/global/api/v1/namespaces/team-a/pods")).await.status, 403);

    // the member path: refused by the federation before any member is contacted
    let before = member_requests(&admin).await;
    let r = nobody.get(&format!("{V}/global/api/v1/namespaces/team-a/pods/a-member-a/log")).await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json["message"], "pods \"a-member-a\" is forbidden: User \"nobody\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"team-a\"", "{}", r.text);
    let r = nobody.merge_patch(&format!("{V}/global/api/v1/namespaces/team-b/pods/b-member-a"), &json!({"metadata": {"labels": {"x": "y"}}})).await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = nobody.get(&format!("{V}/global/api/v1/namespaces/team-a/configmaps")).await;
    assert_eq!(r.status, 403, "a fan-out list: {}", r.text);
    let r = nobody.delete(&format!("{V}/clusters/member-a/api/v1/namespaces/team-b/pods/b-member-a")).await;
    assert_eq!(r.status, 403, "{}", r.text);
    let nobody_kc = user_kubeconfig(&ks[0], &server.kubeconfig(), &scratch, "nobody", NOBODY_TOKEN);
    for k in oldest_and_newest(&nobody_kc, &scratch) {
        let err = k.run(&["--context", "global", "-n", "team-a", "logs", "a-member-a"]).failed().to_string();
        // (kubectl reads the pod first: refused as well)
        assert!(err.contains("User \"nobody\" cannot get resource \"pods"), "kubectl {}: {err}", k.version);
        let err = k.run(&["--context", "global", "-n", "team-b", "label", "pod", "b-member-a", "x=y"]).failed().to_string();
        assert!(err.contains("User \"nobody\" cannot"), "kubectl {}: {err}", k.version);
    }
    assert_eq!(member_requests(&admin).await, before, "no member was contacted for a refused request");
    let after = admin.get(&format!("{V}/clusters/member-a/api/v1/namespaces/team-b/pods/b-member-a")).await;
    assert!(after.json.pointer("/metadata/labels/x").is_none(), "nothing written: {}", after.text);

    let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "nobody-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "nobody"}]});
    let r = admin.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &crb).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let granted = Instant::now();
    wait_for("nobody sees every pod", 10, async || {
        let r = nobody.get(&format!("{V}/global/api/v1/pods")).await;
        r.status == 200 && items(&r.json).len() == all_pods + 2
    })
    .await;
    assert!(granted.elapsed() < Duration::from_secs(10));
    let mut w = nobody.watch(&format!("{V}/global/api/v1/pods?watch=1")).await;
    let initial = w.drain_for(Duration::from_secs(2)).await;
    assert_eq!(initial.len(), all_pods + 2, "every pod, team-b's too");
    assert!(matches!(w.next(Duration::from_millis(100)).await, Next::Timeout));
}

/// The same filtering when the view's objects live in a `fedctl cache` process (the server
/// merges its answers, `--cache-endpoints`): a namespace-granted LIST (streamed, paged, Table)
/// and WATCH hold only the granted namespaces, and the watch ends with a 410 once the grant goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn namespace_grants_filter_reads_over_cache_endpoints() {
    let etcd = EtcdServer::start_new();
    let port = common::server::free_port();
    let endpoint = format!("https://127.0.0.1:{port}");
    let mut server = FedServer::start_with_args(&etcd.endpoint(), &["--bookmark-interval-seconds", "1", "--cache-rebalance-seconds", "3600", "--cache-endpoints", &endpoint]);
    add_users(&mut server);
    let cache = common::procs::CacheProcess::start(Path::new(env!("CARGO_BIN_EXE_fedctl")), &etcd.endpoint(), &server.data_path(), port, &["--shards", "0,1,2,3"], 4, &[]).expect("start fedctl cache");
    cache.wait_listening(Duration::from_secs(60)).expect("cache process listening");
    let member = start_member("member-a", "7");
    register(&server, &member).await;
    let admin = server.client();
    for ns in ["team-a", "team-b"] {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"fedctl.io/skip-auto-propagation": "true"}}});
        assert_eq!(admin.post("/api/v1/namespaces", &obj).await.status, 201);
        wait_for("the member in the view", 60, async || {
            admin.post(&format!("{V}/clusters/member-a/api/v1/namespaces"), &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await.status == 201
        })
        .await;
        for i in 0..2 {
            let r = admin.post(&format!("{V}/clusters/member-a/api/v1/namespaces/{ns}/pods"), &pod(&format!("{}{i}", &ns[5..]), ns)).await;
            assert_eq!(r.status, 201, "{}", r.text);
        }
    }
    wait_for("the teams' pods in the view", 60, async || {
        let r = admin.get(&format!("{V}/global/api/v1/pods")).await;
        items(&r.json).iter().filter(|(ns, _, _)| ns.starts_with("team-")).count() == 4
    })
    .await;
    let rb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "dev-view", "namespace": "team-a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "team-a-dev"}]});
    assert_eq!(admin.post("/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings", &rb).await.status, 201);
    wait_for("team-a-dev may list pods in team-a", 30, async || allowed(&admin, "team-a-dev", "list", "team-a").await).await;
    let dev = server.token_client(DEV_TOKEN);
    let names = |r: &Value| items(r).into_iter().map(|(ns, n, _)| format!("{ns}/{n}")).collect::<Vec<_>>();
    // streamed (unpaged), paged, and as a Table
    let r = dev.get(&format!("{V}/global/api/v1/pods")).await;
    assert_eq!(names(&r.json), ["team-a/a0", "team-a/a1"], "{}", r.text);
    let r = dev.get(&format!("{V}/global/api/v1/pods?limit=1")).await;
    assert_eq!(names(&r.json), ["team-a/a0"], "{}", r.text);
    let cont = r.json["metadata"]["continue"].as_str().expect("a continue token").to_string();
    let r = dev.get(&format!("{V}/global/api/v1/pods?limit=1&continue={cont}")).await;
    assert_eq!(names(&r.json), ["team-a/a1"], "{}", r.text);
    let t: Value =
        dev.request_builder(reqwest::Method::GET, &format!("{V}/global/api/v1/pods")).header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io").send().await.unwrap().json().await.unwrap();
    let rows = t["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 2, "{t}");
    assert!(rows.iter().all(|r| r["object"]["metadata"]["namespace"] == "team-a"), "{t}");
    // a watch: team-a's objects and events only; it ends with a 410 once the binding goes
    let mut w = dev.watch(&format!("{V}/global/api/v1/pods?watch=1")).await;
    let initial = w.drain_for(Duration::from_secs(2)).await;
    assert_eq!(initial.len(), 2, "{initial:?}");
    for (ns, name) in [("team-b", "b9"), ("team-a", "a9")] {
        assert_eq!(admin.post(&format!("{V}/clusters/member-a/api/v1/namespaces/{ns}/pods"), &pod(name, ns)).await.status, 201);
    }
    let ev = w.expect_event(Duration::from_secs(10)).await;
    assert_eq!(ev["object"]["metadata"]["name"], "a9", "{ev}");
    assert!(w.drain_for(Duration::from_secs(2)).await.iter().all(|e| e["object"]["metadata"]["namespace"] == "team-a"));
    assert_eq!(admin.delete("/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings/dev-view").await.status, 200);
    let rest = w.collect_until_end(Duration::from_secs(10)).await;
    let last = rest.last().unwrap_or_else(|| panic!("an ERROR event before the end: {rest:?}"));
    assert_eq!((last["type"].as_str(), last["object"]["code"].as_i64()), (Some("ERROR"), Some(410)), "{rest:?}");
    assert_eq!(dev.get(&format!("{V}/global/api/v1/pods")).await.status, 403);
}
