//! Acceptance: the server's watch cache against a real etcd: LIST with resourceVersion=0 and NotOlderThan answered from it (selectors, namespaces, 504 for a revision it never reaches), and etcd watches independent of the number of watched exec namespaces.

mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::server::{etcd_revision, ApiClient, FedServer, Next};

struct Env {
    api: ApiClient,
    _server: FedServer,
    etcd: EtcdServer,
}

fn env() -> Env {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    Env { api: server.client(), _server: server, etcd }
}

fn cms(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/configmaps")
}

/// Names of the listed objects in the test's namespaces (`a`, `b`; the server keeps its own
/// ConfigMaps elsewhere), sorted.
fn names(list: &Value) -> Vec<String> {
    let mut n: Vec<String> = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {list}"))
        .iter()
        .filter(|o| matches!(o["metadata"]["namespace"].as_str(), Some("a" | "b")))
        .map(|o| o["metadata"]["name"].as_str().expect("name").to_string())
        .collect();
    n.sort();
    n
}

impl Env {
    async fn namespace(&self, name: &str) {
        let r = self.api.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }

    async fn create_cm(&self, ns: &str, name: &str, labels: Value) -> i64 {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"v": "0"}});
        let r = self.api.post(&cms(ns), &body).await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.json["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
    }

    /// LIST RV=0 until it shows `want` (the cache follows etcd's watch, so eventually).
    async fn eventually_lists(&self, path: &str, want: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.api.get(path).await;
            let list = r.ok().clone();
            if names(&list) == want {
                return list;
            }
            assert!(Instant::now() < deadline, "{path} still lists {:?}, want {want:?}", names(&list));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// LIST resourceVersion=0 is answered from the watch cache: after etcd is killed it still
/// answers with every object, with label and field selectors and namespace scope applied and
/// `limit` ignored (kube-apiserver 1.33 ignores it for cache-served lists), while a consistent
/// LIST (resourceVersion unset) fails.
#[tokio::test]
async fn a_list_at_resource_version_0_is_answered_from_the_cache() {
    let mut e = env();
    for ns in ["a", "b"] {
        e.namespace(ns).await;
    }
    e.create_cm("a", "one", json!({"tier": "web"})).await;
    e.create_cm("a", "two", json!({"tier": "db"})).await;
    e.create_cm("b", "three", json!({"tier": "web"})).await;
    let all = "/api/v1/configmaps?resourceVersion=0";
    e.eventually_lists(all, &["one", "three", "two"]).await;
    // a write, then LIST RV=0 eventually sees it
    let rv = e.create_cm("a", "four", json!({"tier": "web"})).await;
    let list = e.eventually_lists(all, &["four", "one", "three", "two"]).await;
    let list_rv: i64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(list_rv >= rv, "list at {list_rv}, write at {rv}");
    assert_eq!(list["kind"], "ConfigMapList");
    assert!(list["metadata"].get("continue").is_none(), "{}", list["metadata"]);

    e.etcd.stop();
    // the consistent read needs etcd
    match e.api.try_request("GET", "/api/v1/configmaps", None, None).await {
        Ok(r) => assert!(r.status >= 500, "consistent LIST with etcd down answered {}: {}", r.status, r.text),
        Err(_) => {} // no answer in time: etcd is unreachable
    }
    // the cache answers without etcd
    let r = e.api.get(all).await;
    assert_eq!(names(r.ok()), ["four", "one", "three", "two"], "{}", r.text);
    let r = e.api.get(&format!("{}?resourceVersion=0", cms("a"))).await;
    assert_eq!(names(r.ok()), ["four", "one", "two"]);
    let r = e.api.get("/api/v1/configmaps?resourceVersion=0&labelSelector=tier%3Dweb").await;
    assert_eq!(names(r.ok()), ["four", "one", "three"]);
    let r = e.api.get(&format!("{}?resourceVersion=0&labelSelector=tier%21%3Dweb", cms("a"))).await;
    assert_eq!(names(r.ok()), ["two"]);
    let r = e.api.get("/api/v1/configmaps?resourceVersion=0&fieldSelector=metadata.name%3Dthree").await;
    assert_eq!(names(r.ok()), ["three"]);
    let r = e.api.get("/api/v1/configmaps?resourceVersion=0&fieldSelector=metadata.namespace%3Db").await;
    assert_eq!(names(r.ok()), ["three"]);
    // limit ignored, no continue token
    let r = e.api.get("/api/v1/configmaps?resourceVersion=0&limit=1").await;
    let list = r.ok();
    assert_eq!(names(list), ["four", "one", "three", "two"]);
    assert!(list["metadata"].get("continue").is_none(), "{}", list["metadata"]);
    // Table output (what kubectl asks for) from the cache too
    let r = e.api.request_builder(reqwest::Method::GET, "/api/v1/configmaps?resourceVersion=0").header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io").send().await.expect("table list");
    assert_eq!(r.status(), 200);
    let t: Value = r.json().await.expect("table json");
    assert_eq!(t["kind"], "Table");
    let rows: Vec<&Value> = t["rows"].as_array().expect("rows").iter().filter(|r| matches!(r["object"]["metadata"]["namespace"].as_str(), Some("a" | "b"))).collect();
    assert_eq!(rows.len(), 4, "{t}");
    // Exact needs etcd
    match e.api.try_request("GET", &format!("/api/v1/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact"), None, None).await {
        Ok(r) => assert!(r.status >= 500, "Exact LIST with etcd down answered {}: {}", r.status, r.text),
        Err(_) => {}
    }
}

/// NotOlderThan: a revision etcd reached (even through another resource's write) is answered
/// from the cache at once; one the cache never sees is 504 `Too large resource version` with
/// cause ResourceVersionTooLarge after kube-apiserver's 3 s wait.
#[tokio::test]
async fn not_older_than_waits_for_the_cache_then_504() {
    let e = env();
    e.namespace("a").await;
    e.create_cm("a", "one", json!({})).await;
    let all = "/api/v1/configmaps?resourceVersion=0";
    e.eventually_lists(all, &["one"]).await;
    // a later write to another resource: the configmap cache learns of it from progress
    let r = e.api.post("/api/v1/namespaces/a/secrets", &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let current = etcd_revision(&e.etcd.endpoint()).await;
    let t0 = Instant::now();
    let r = e.api.get(&format!("/api/v1/configmaps?resourceVersion={current}&resourceVersionMatch=NotOlderThan")).await;
    let list = r.ok();
    assert_eq!(names(list), ["one"]);
    let list_rv: i64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(list_rv >= current, "list at {list_rv} for NotOlderThan {current}");
    assert!(t0.elapsed() < Duration::from_secs(3), "took {:?}", t0.elapsed());
    // a legacy RV without match and limit is "not older than" too
    let r = e.api.get(&format!("{}?resourceVersion={current}", cms("a"))).await;
    assert_eq!(names(r.ok()), ["one"]);

    let future = current + 1000;
    let t0 = Instant::now();
    let r = e.api.get(&format!("/api/v1/configmaps?resourceVersion={future}&resourceVersionMatch=NotOlderThan&limit=10")).await;
    let waited = t0.elapsed();
    let st = r.assert_status(504, "Timeout");
    assert!(waited >= Duration::from_millis(2900) && waited < Duration::from_secs(10), "answered after {waited:?}");
    assert!(st["message"].as_str().unwrap().starts_with("Too large resource version"), "{st}");
    assert_eq!(st["details"]["causes"][0]["reason"], "ResourceVersionTooLarge", "{st}");
    assert_eq!(st["details"]["retryAfterSeconds"], 1, "{st}");
    // a selector or a namespace does not change it
    let r = e.api.get(&format!("{}?resourceVersion={future}&resourceVersionMatch=NotOlderThan&labelSelector=x%3Dy", cms("a"))).await;
    r.assert_status(504, "Timeout");
}

/// etcd's count of its watchers (`etcd_debugging_mvcc_watcher_total` on its `/metrics`).
async fn etcd_watchers(endpoint: &str) -> f64 {
    let text = reqwest::get(format!("{endpoint}/metrics")).await.expect("etcd /metrics").text().await.expect("etcd /metrics body");
    text.lines()
        .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watcher_total ").or_else(|| l.strip_prefix("etcd_mvcc_watcher_total ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no watcher gauge in etcd's metrics"))
}

/// Agents each watching the Works of their own exec namespace: etcd's watcher count is the
/// same with 5 and with 100 of them (one shared watch of Works), and each watch sees its own
/// namespace's Work.
#[tokio::test]
async fn etcd_watchers_do_not_grow_with_the_number_of_exec_namespaces() {
    let e = env();
    let works = |i: usize| format!("/apis/work.fedctl.io/v1alpha1/namespaces/fed-exec-m{i}/works");
    for i in 0..100 {
        e.namespace(&format!("fed-exec-m{i}")).await;
    }
    let mut ws = Vec::new();
    for i in 0..5 {
        ws.push(e.api.watch(&format!("{}?watch=1&allowWatchBookmarks=true", works(i))).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let with_5 = etcd_watchers(&e.etcd.endpoint()).await;
    for i in 5..100 {
        ws.push(e.api.watch(&format!("{}?watch=1&allowWatchBookmarks=true", works(i))).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let with_100 = etcd_watchers(&e.etcd.endpoint()).await;
    assert_eq!(with_5, with_100, "etcd watchers: {with_5} with 5 Work watches, {with_100} with 100");
    // the rest are the server's own (one per resource its controllers and caches follow)
    eprintln!("etcd watchers: {with_5} with 5 Work watches, {with_100} with 100");
    let work = json!({"apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": "w"}, "spec": {"manifests": []}});
    let r = e.api.post(&works(42), &work).await;
    assert_eq!(r.status, 201, "{}", r.text);
    loop {
        match ws[42].next(Duration::from_secs(10)).await {
            Next::Event(ev) if ev["type"] == "BOOKMARK" => continue,
            Next::Event(ev) => {
                assert_eq!(ev["type"], "ADDED", "{ev}");
                assert_eq!(ev["object"]["metadata"]["namespace"], "fed-exec-m42");
                break;
            }
            _ => panic!("fed-exec-m42's watch saw no event"),
        }
    }
    for i in [0, 41, 43, 99] {
        match ws[i].next(Duration::from_millis(200)).await {
            Next::Event(ev) if ev["type"] != "BOOKMARK" => panic!("watch {i} saw {ev}"),
            _ => {}
        }
    }
}
