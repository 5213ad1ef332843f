//! The global resource view end to end: real etcd, a real `fedctl server`, two fedsim members
//! with churn and skewed namespaces; kube-rs watchers, paged LISTs, kubectl, proxying, errors.
//!
//! Members are registered the way the agent does it: a Secret `fed-exec-<name>/member-credential`
//! (`token`, `ca.crt`, `server`) and a Cluster whose `spec.secretRef` names it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::AsyncFnMut;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use common::etcd::EtcdServer;
use common::kubectl::{find_kubectl, Kubectl};
use common::member::register;
use common::procs::FedsimProcess;
use common::server::FedServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use reqwest::Method;
use serde_json::{json, Value};

const V: &str = "/apis/search.fedctl.io/v1alpha1";

fn start_member(name: &str, nodes: usize, ppn: usize, seed: u64, churn: u32) -> FedsimProcess {
    let (n, p, s, c) = (nodes.to_string(), ppn.to_string(), seed.to_string(), churn.to_string());
    FedsimProcess::start(
        Path::new(env!("CARGO_BIN_EXE_fedsim")),
        name,
        &["--nodes", &n, "--pods-per-node", &p, "--namespaces", "10", "--namespace-skew", "1.3", "--churn", &c, "--seed", &s],
        Duration::from_secs(60),
    )
    .expect("start fedsim")
}

async fn client(kubeconfig: &Path, context: Option<&str>) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let opts = kube::config::KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
    let cfg = kube::Config::from_custom_kubeconfig(kc, &opts).await.expect("kube config");
    Client::try_from(cfg).expect("kube client")
}

/// (cluster, uid) → member resourceVersion of every pod of the members, from fresh LISTs.
async fn members_state(members: &[&FedsimProcess]) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for m in members {
        let api: Api<Pod> = Api::all(client(&m.kubeconfig, None).await);
        for p in api.list(&ListParams::default()).await.expect("member list").items {
            out.insert((m.name.clone(), p.metadata.uid.unwrap_or_default()), p.metadata.resource_version.unwrap_or_default());
        }
    }
    out
}

fn view_state<'a>(pods: impl Iterator<Item = &'a Pod>) -> BTreeMap<(String, String), String> {
    pods.map(|p| {
        let a = p.metadata.annotations.clone().unwrap_or_default();
        ((a.get("fedctl.io/cluster").cloned().unwrap_or_default(), p.metadata.uid.clone().unwrap_or_default()), a.get("fedctl.io/member-resource-version").cloned().unwrap_or_default())
    })
    .collect()
}

async fn set_churn(members: &[&FedsimProcess], rate: u32) {
    for m in members {
        m.admin(Method::POST, &format!("/fedsim/churn?rate={rate}")).await.expect("set churn");
    }
}

/// Waits until the reflector equals the members' union (bounded); panics with a diff summary.
async fn converge(store: &reflector::Store<Pod>, members: &[&FedsimProcess], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let want = members_state(members).await;
        let got = view_state(store.state().iter().map(|p| p.as_ref()));
        if want == got && !want.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            let missing = want.keys().filter(|k| !got.contains_key(*k)).count();
            let extra = got.keys().filter(|k| !want.contains_key(*k)).count();
            let stale = want.iter().filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v)).count();
            let miss: Vec<_> = want.iter().filter(|(k, _)| !got.contains_key(*k)).collect();
            panic!("{what}: view != members: {} vs {} objects, missing {missing} {miss:?}, extra {extra}, stale {stale}", got.len(), want.len());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn wait_for(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn kubectls(kubeconfig: &Path, dir: &Path) -> Vec<Kubectl> {
    ["1.27", "1.33"]
        .iter()
        .filter_map(|v| {
            let bin = find_kubectl(v)?;
            let cache = dir.join(format!("kubectl-{v}"));
            std::fs::create_dir_all(&cache).ok()?;
            Some(Kubectl::new(bin, v, kubeconfig, &cache))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn global_view_end_to_end() {
    let etcd = EtcdServer::start_new();
    let mut server = FedServer::start_with_args(&etcd.endpoint(), &["--bookmark-interval-seconds", "1", "--cache-max-events", "2000"]);
    let a = start_member("member-a", 3, 6, 1, 8);
    let b = start_member("member-b", 2, 9, 2, 8);
    let members = [&a, &b];
    register(&server, &a).await;
    register(&server, &b).await;
    let api = server.client();
    let kubeconfig: PathBuf = server.kubeconfig();

    // both members appear (and their kubeconfig contexts)
    wait_for("both members in the view", async || {
        let r = api.get(&format!("{V}/global/api/v1/pods")).await;
        let items = r.json["items"].as_array().cloned().unwrap_or_default();
        let clusters: BTreeSet<String> = items.iter().filter_map(|p| p.pointer("/metadata/annotations/fedctl.io~1cluster").and_then(Value::as_str).map(str::to_string)).collect();
        clusters.len() == 2
    })
    .await;
    wait_for("cluster contexts", async || std::fs::read_to_string(&kubeconfig).unwrap_or_default().contains("cluster-member-b")).await;

    // a kube-rs reflector on the global view equals the union of the members at quiet points
    let gclient = client(&kubeconfig, Some("global")).await;
    let gpods: Api<Pod> = Api::all(gclient.clone());
    let (reader, writer) = reflector::store();
    let wcfg = watcher::Config::default().any_semantic();
    let stream = watcher(gpods.clone(), wcfg).default_backoff().reflect(writer).applied_objects();
    let watch_task = tokio::spawn(async move {
        let mut s = std::pin::pin!(stream);
        while s.next().await.is_some() {}
    });
    reader.wait_until_ready().await.expect("reflector ready");
    tokio::time::sleep(Duration::from_secs(3)).await; // churn flows through the view
    set_churn(&members, 0).await;
    converge(&reader, &members, "under churn, paused").await;

    // paged LIST: each object at most once, every stable object present
    let mut seen = BTreeSet::new();
    let mut cont = String::new();
    let mut first_rv = None;
    loop {
        let r = api.get(&format!("{V}/global/api/v1/pods?limit=50&continue={cont}")).await;
        let v = r.ok().clone();
        first_rv.get_or_insert(v["metadata"]["resourceVersion"].as_str().unwrap().to_string());
        assert_eq!(v["metadata"]["resourceVersion"].as_str(), first_rv.as_deref(), "every page carries the first page's global RV");
        for p in v["items"].as_array().unwrap() {
            let key = (p["metadata"]["annotations"]["fedctl.io/cluster"].as_str().unwrap().to_string(), p["metadata"]["uid"].as_str().unwrap().to_string());
            assert!(seen.insert(key), "object listed twice");
        }
        cont = v["metadata"]["continue"].as_str().unwrap_or("").to_string();
        if cont.is_empty() {
            break;
        }
    }
    let want: BTreeSet<_> = members_state(&members).await.into_keys().collect();
    assert_eq!(seen, want, "paged LIST equals the members' pods");

    // pages bounded by bytes (`fedctlPageBytes`, what the MUX asks the cache processes for):
    // fewer objects than the limit, each page within the bound (or one object), every object
    // once (churn is paused: the same objects as the paged LIST above)
    let (mut by_bytes, mut cont, mut pages) = (Vec::new(), String::new(), 0);
    let (bound, limit) = (20_000, seen.len() + 1);
    loop {
        let r = api.get(&format!("{V}/global/api/v1/pods?limit={limit}&fedctlPageBytes={bound}&continue={cont}")).await;
        let v = r.ok().clone();
        let items = v["items"].as_array().unwrap();
        assert!(!items.is_empty() && items.len() < seen.len(), "a page of {} objects", items.len());
        // each item's size as JSON (the page's bytes less its head and commas)
        let bytes: usize = items.iter().map(|p| serde_json::to_vec(p).unwrap().len()).sum();
        assert!(items.len() == 1 || bytes <= bound, "a page of {} objects in {bytes} bytes", items.len());
        by_bytes.extend(items.iter().map(|p| (p["metadata"]["annotations"]["fedctl.io/cluster"].as_str().unwrap().to_string(), p["metadata"]["uid"].as_str().unwrap().to_string())));
        pages += 1;
        cont = v["metadata"]["continue"].as_str().unwrap_or("").to_string();
        if cont.is_empty() {
            break;
        }
    }
    assert!(pages >= 2, "{pages} pages of {} objects", seen.len());
    assert_eq!(by_bytes.iter().cloned().collect::<BTreeSet<_>>(), seen, "pages bounded by bytes list every object");
    assert_eq!(by_bytes.len(), seen.len(), "each object once");

    // /metrics: the cache's size and each member's ingest
    let metrics = api.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let sample = |series: &str| metrics.text.lines().find_map(|l| l.strip_prefix(series).and_then(|r| r.trim().parse::<f64>().ok()));
    // per shard: they add up to the view, spread over the shards as the shard map places them
    let per_shard: Vec<f64> = (0..4).map(|i| sample(&format!(r#"fedctl_cache_objects{{shard="{i}",resource="pods"}}"#)).unwrap_or(0.0)).collect();
    assert_eq!(per_shard.iter().sum::<f64>(), seen.len() as f64, "{}", metrics.text);
    assert!(per_shard.iter().filter(|n| **n > 0.0).count() >= 2, "objects in several shards: {per_shard:?}");
    // bytes follow the objects: every shard holding objects holds at least ~100 B per pod
    for (i, n) in per_shard.iter().enumerate() {
        let bytes = sample(&format!(r#"fedctl_cache_bytes{{shard="{i}",resource="pods"}}"#)).unwrap_or(0.0);
        assert_eq!(bytes > 0.0, *n > 0.0, "shard {i}: {n} objects, {bytes} bytes");
        assert!(bytes >= 100.0 * n, "shard {i}: {n} objects in only {bytes} bytes");
    }
    for m in ["member-a", "member-b"] {
        let ts = sample(&format!(r#"fedctl_cache_ingest_last_event_timestamp_seconds{{cluster="{m}",resource="pods"}}"#)).unwrap_or(0.0);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(now - ts < 60.0, "{m}: last ingest event at {ts}, now {now}");
        assert!(sample(&format!(r#"fedctl_cache_ingest_relists_total{{cluster="{m}",resource="pods"}}"#)).unwrap_or(0.0) >= 1.0);
    }

    // errors: malformed RV / continue → 400, unknown cluster → 404
    api.get(&format!("{V}/global/api/v1/pods?resourceVersion=12x")).await.assert_status(400, "BadRequest");
    api.get(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion=gnot-base64!")).await.assert_status(400, "BadRequest");
    api.get(&format!("{V}/global/api/v1/pods?limit=5&continue=garbage")).await.assert_status(400, "BadRequest");
    for bad in ["-1", "x", "1.5"] {
        api.get(&format!("{V}/global/api/v1/pods?limit=5&fedctlPageBytes={bad}")).await.assert_status(400, "BadRequest");
    }
    api.get(&format!("{V}/clusters/nope/api/v1/pods")).await.assert_status(404, "NotFound");
    // a kind the view does not cache is listed across members by fan-out; watching it is a
    // 400 that says why
    let r = api.get(&format!("{V}/global/api/v1/namespaces/default/configmaps")).await;
    assert_eq!(r.ok()["kind"], "ConfigMapList", "{}", r.text);
    assert!(r.json["items"].as_array().unwrap().iter().all(|c| c.pointer("/metadata/annotations/fedctl.io~1cluster").is_some()), "{}", r.text);
    let r = api.get(&format!("{V}/global/api/v1/namespaces/default/configmaps?watch=1")).await;
    let s = r.assert_status(400, "BadRequest");
    assert!(s["message"].as_str().unwrap().starts_with("configmaps are not cached by the global view"), "{}", r.text);

    // same name in two members: a global GET is a 409 naming both; clusters/<name> disambiguates
    let dup = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dup-pod", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    for m in &members {
        api.post(&format!("{V}/clusters/{}/api/v1/namespaces/default/pods", m.name), &dup).await.ok();
    }
    wait_for("dup-pod in both", async || api.get(&format!("{V}/global/api/v1/namespaces/default/pods/dup-pod")).await.status == 409).await;
    let r = api.get(&format!("{V}/global/api/v1/namespaces/default/pods/dup-pod")).await;
    assert!(r.text.contains("member-a") && r.text.contains("member-b"), "{}", r.text);
    let one = api.get(&format!("{V}/clusters/member-b/api/v1/namespaces/default/pods/dup-pod")).await;
    assert_eq!(one.ok()["metadata"]["annotations"]["fedctl.io/cluster"], "member-b");
    // (a kube-rs store keys objects by namespace/name: keep names unique across members)
    api.delete(&format!("{V}/clusters/member-a/api/v1/namespaces/default/pods/dup-pod?gracePeriodSeconds=0")).await.ok();
    wait_for("dup-pod only in member-b", async || api.get(&format!("{V}/global/api/v1/namespaces/default/pods/dup-pod")).await.status == 200).await;
    // a non-cached kind is proxied
    api.get(&format!("{V}/clusters/member-a/api/v1/namespaces/default/serviceaccounts/default")).await.ok();

    // kubectl: CLUSTER column, per-cluster context, delete through the global context
    let scratch = server.scratch_dir();
    for k in kubectls(&kubeconfig, &scratch) {
        let out = k.run(&["get", "pods", "-A", "--context", "global"]);
        let text = out.ok().to_string();
        let header = text.lines().next().unwrap_or("");
        assert!(header.contains("CLUSTER"), "kubectl {}: header {header:?}", k.version);
        assert!(text.contains("member-a") && text.contains("member-b"), "kubectl {}: both members", k.version);
        let only_a = k.run(&["--context", "cluster-member-a", "get", "pods", "-A"]);
        let t = only_a.ok().to_string();
        assert!(t.contains("member-a") && !t.contains("member-b"), "kubectl {}: cluster context shows one member", k.version);
    }
    if let Some(k) = kubectls(&kubeconfig, &scratch).into_iter().next() {
        // a pod that exists only in member-a
        let listed = api.get(&format!("{V}/clusters/member-a/api/v1/pods")).await;
        let victim = listed.json["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["metadata"]["name"] != "dup-pod")
            .map(|p| (p["metadata"]["namespace"].as_str().unwrap().to_string(), p["metadata"]["name"].as_str().unwrap().to_string()))
            .unwrap();
        let out = k.run(&["delete", "pod", &victim.1, "-n", &victim.0, "--context", "global", "--wait=false"]);
        out.ok();
        wait_for("pod deleted on member-a", async || {
            let member: Api<Pod> = Api::namespaced(client(&a.kubeconfig, None).await, &victim.0);
            member.get_opt(&victim.1).await.map(|p| p.is_none() || p.unwrap().metadata.deletion_timestamp.is_some()).unwrap_or(false)
        })
        .await;
    }

    // resume is exactly once: w1 stays open; w2 reads some events and is dropped; w3 resumes
    // from w2's last global RV; w2 + w3 == w1
    let rv0 = api.get(&format!("{V}/global/api/v1/pods")).await.ok()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    set_churn(&members, 10).await;
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
    let key = |e: &Value| {
        let m = &e["object"]["metadata"];
        (
            e["type"].as_str().unwrap_or("").to_string(),
            m["annotations"]["fedctl.io/cluster"].as_str().unwrap_or("").to_string(),
            m["uid"].as_str().unwrap_or("").to_string(),
            m["resourceVersion"].as_str().unwrap_or("").to_string(),
        )
    };
    let all1: Vec<_> = w1.drain_for(Duration::from_secs(2)).await.iter().map(key).collect();
    let mut joined: Vec<_> = seq2.iter().map(key).collect();
    joined.extend(w3.drain_for(Duration::from_secs(2)).await.iter().map(key));
    assert!(all1.len() > 15, "churn produced events: {}", all1.len());
    assert_eq!(joined, all1, "a resumed watch gets every later event exactly once, in order");
    // an RV from the future of a cluster the cache never saw → 410 on the stream
    let mut bogus = fedctl::cache::rv::GlobalRv::default();
    bogus.0.insert("no-such-member".into(), fedctl::cache::rv::Pos::member(5));
    let mut w4 = api.watch(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion={}", bogus.encode())).await;
    let e = w4.expect_event(Duration::from_secs(5)).await;
    assert_eq!((e["type"].as_str(), e["object"]["code"].as_i64()), (Some("ERROR"), Some(410)), "{e}");

    // churn again, then the server restarts: the reflector resumes (or gets 410 and relists)
    set_churn(&members, 8).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart();
    server.wait_ready(Duration::from_secs(30)).expect("server ready again");
    tokio::time::sleep(Duration::from_secs(3)).await;
    set_churn(&members, 0).await;
    converge(&reader, &members, "after a server restart").await;

    // a member is rebuilt (its watches end with 410): the cache relists it and emits the
    // difference; the global watch stays correct
    a.admin(Method::POST, "/fedsim/faults/restart").await.expect("restart fault");
    tokio::time::sleep(Duration::from_secs(2)).await;
    set_churn(&members, 0).await;
    converge(&reader, &members, "after member-a was rebuilt (410, relist)").await;

    // a member leaves: its objects are DELETED from the view, the watch stays open
    api.delete("/apis/cluster.fedctl.io/v1alpha1/clusters/member-b").await;
    converge(&reader, &[&a], "after member-b left").await;
    watch_task.abort();
}

/// Objects per shard from the view's status endpoint: (map version, loads).
async fn shard_loads(api: &common::server::ApiClient) -> (u64, Vec<u64>) {
    let s = api.get(&format!("{V}/shards")).await;
    let v = s.ok().clone();
    let loads = v["shards"].as_array().unwrap().iter().map(|s| s["objects"].as_u64().unwrap()).collect();
    (v["mapVersion"].as_u64().unwrap(), loads)
}

/// Every page of a global pods LIST with `limit`, pausing `pause` between pages: the global RV
/// each page carried and the (cluster, uid) of every item, in order.
async fn paged_list(api: &common::server::ApiClient, limit: usize, pause: Duration) -> (BTreeSet<String>, Vec<(String, String)>) {
    let (mut rvs, mut items, mut cont, mut pages) = (BTreeSet::new(), Vec::new(), String::new(), 0);
    loop {
        let r = api.get(&format!("{V}/global/api/v1/pods?limit={limit}&continue={cont}")).await;
        let v = r.ok().clone();
        rvs.insert(v["metadata"]["resourceVersion"].as_str().unwrap().to_string());
        let page = v["items"].as_array().unwrap();
        assert!(page.len() <= limit, "page of {} > limit {limit}", page.len());
        for p in page {
            items.push((p["metadata"]["annotations"]["fedctl.io/cluster"].as_str().unwrap().to_string(), p["metadata"]["uid"].as_str().unwrap().to_string()));
        }
        pages += 1;
        cont = v["metadata"]["continue"].as_str().unwrap_or("").to_string();
        if cont.is_empty() {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    assert!(pages > 2, "limit {limit}: {pages} pages of {} items", items.len());
    (rvs, items)
}

/// Three shards × three members with heavily skewed namespaces, under churn: paged LISTs are
/// one snapshot (each object once, every object that existed throughout present), the shard
/// map is rebalanced (stored in etcd) to ≤ 1.5× the average shard, a watcher resuming from its
/// last global RV after the members dropped their watches gets every later event exactly once
/// (or 410), bad tokens are 400 and unknown clusters 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn global_view_shards() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--bookmark-interval-seconds", "1", "--cache-shards", "3", "--cache-rebalance-seconds", "1", "--cache-max-events", "30000"]);
    let skewed = |name: &str, seed: &str| {
        FedsimProcess::start(
            Path::new(env!("CARGO_BIN_EXE_fedsim")),
            name,
            &["--nodes", "5", "--pods-per-node", "110", "--namespaces", "10", "--namespace-skew", "2.0", "--churn", "20", "--seed", seed],
            Duration::from_secs(60),
        )
        .expect("start fedsim")
    };
    // one seed: the members share namespace names, so the hot namespace is hot three times over
    let (a, b, c) = (skewed("member-a", "11"), skewed("member-b", "11"), skewed("member-c", "11"));
    let members = [&a, &b, &c];
    for m in members {
        register(&server, m).await;
    }
    let api = server.client();
    wait_for("three members in the view", async || {
        let r = api.get(&format!("{V}/global/api/v1/pods?limit=1")).await;
        let g = r.json["metadata"]["resourceVersion"].as_str().and_then(|s| fedctl::cache::rv::GlobalRv::decode(s).ok());
        g.is_some_and(|g| g.0.len() == 3)
    })
    .await;

    // paged LISTs under churn (and under rebalancing, which starts now)
    for (limit, pause) in [(500, Duration::from_millis(400)), (137, Duration::from_millis(100))] {
        let before: BTreeSet<_> = members_state(&members).await.into_keys().collect();
        // the view's snapshot can only hold what it has ingested: wait until it has caught up
        // with the members' state at `before` (ingest lags a little on a loaded machine)
        let mut want = BTreeMap::new();
        for m in &members {
            let api: Api<Pod> = Api::all(client(&m.kubeconfig, None).await);
            let rv = api.list(&ListParams::default().limit(1)).await.expect("member list").metadata.resource_version.unwrap_or_default();
            want.insert(m.name.clone(), rv.parse::<u64>().expect("numeric member RV"));
        }
        wait_for("the view caught up with the members", async || {
            let r = api.get(&format!("{V}/global/api/v1/pods?limit=1")).await;
            let g = r.json["metadata"]["resourceVersion"].as_str().and_then(|s| fedctl::cache::rv::GlobalRv::decode(s).ok());
            g.is_some_and(|g| want.iter().all(|(c, rv)| g.0.get(c).is_some_and(|p| p.rv >= *rv)))
        })
        .await;
        let (rvs, items) = paged_list(&api, limit, pause).await;
        let after: BTreeSet<_> = members_state(&members).await.into_keys().collect();
        assert_eq!(rvs.len(), 1, "every page carries the first page's global RV: {rvs:?}");
        let seen: BTreeSet<_> = items.iter().cloned().collect();
        assert_eq!(seen.len(), items.len(), "limit {limit}: an object listed twice");
        let throughout: BTreeSet<_> = before.intersection(&after).cloned().collect();
        let missing: Vec<_> = throughout.difference(&seen).collect();
        assert!(missing.is_empty(), "limit {limit}: {} objects that existed throughout are missing: {:?}", missing.len(), &missing[..missing.len().min(5)]);
        let clusters: BTreeSet<_> = items.iter().map(|(c, _)| c.clone()).collect();
        assert_eq!(clusters.len(), 3);
        // the listed snapshot can be read again exactly (Exact match), unpaged
        let rv = rvs.into_iter().next().unwrap();
        let again = api.get(&format!("{V}/global/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact")).await;
        let again: Vec<_> = again.ok()["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["metadata"]["annotations"]["fedctl.io/cluster"].as_str().unwrap().to_string(), p["metadata"]["uid"].as_str().unwrap().to_string()))
            .collect();
        assert_eq!(again, items, "limit {limit}: pages == the snapshot read at once");
    }

    // the shard map is rebalanced: versioned, in etcd, largest shard ≤ 1.5× the average
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (version, loads) = shard_loads(&api).await;
        eprintln!("shard map version {version}, objects per shard {loads:?}");
        let avg = loads.iter().sum::<u64>() as f64 / loads.len() as f64;
        let max = *loads.iter().max().unwrap() as f64;
        if version >= 2 && max <= 1.5 * avg {
            break;
        }
        assert!(Instant::now() < deadline, "shards not balanced: map version {version}, loads {loads:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let dump = common::server::etcd_dump(&etcd.endpoint()).await;
    let stored: Value = serde_json::from_slice(&dump.get("/registry/search.fedctl.io/shardmap").expect("shard map in etcd").value).unwrap();
    assert!(stored["version"].as_u64().unwrap() >= 2 && stored["shards"] == 3, "{stored}");
    assert!(stored["namespaces"].as_object().unwrap().values().any(|v| v.as_array().unwrap().len() > 1), "the hot namespace is split: {stored}");

    // resume after the members dropped their watches: exactly once (or 410)
    let rv0 = api.get(&format!("{V}/global/api/v1/pods?limit=1")).await.ok()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut w1 = api.watch(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion={rv0}")).await;
    let mut w2 = api.watch(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion={rv0}")).await;
    let mut seq2 = Vec::new();
    for _ in 0..30 {
        seq2.push(w2.expect_event(Duration::from_secs(10)).await);
    }
    drop(w2);
    for m in members {
        m.admin(Method::POST, "/fedsim/faults/drop-watches").await.expect("drop watches");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let last = seq2.last().unwrap()["object"]["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut w3 = api.watch(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion={last}")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    set_churn(&members, 0).await;
    let key = |e: &Value| {
        let m = &e["object"]["metadata"];
        (
            e["type"].as_str().unwrap_or("").to_string(),
            m["annotations"]["fedctl.io/cluster"].as_str().unwrap_or("").to_string(),
            m["uid"].as_str().unwrap_or("").to_string(),
            m["resourceVersion"].as_str().unwrap_or("").to_string(),
        )
    };
    let all1: Vec<_> = w1.drain_for(Duration::from_secs(3)).await.iter().map(key).collect();
    let rest: Vec<_> = w3.drain_for(Duration::from_secs(2)).await;
    if rest.first().is_some_and(|e| e["type"] == "ERROR") {
        assert_eq!(rest[0]["object"]["code"], 410, "{}", rest[0]);
        eprintln!("resumed watch: 410 Expired");
    } else {
        let mut joined: Vec<_> = seq2.iter().map(key).collect();
        joined.extend(rest.iter().map(key));
        assert!(all1.len() > 30, "churn produced events: {}", all1.len());
        let uniq: BTreeSet<_> = all1.iter().collect();
        assert_eq!(uniq.len(), all1.len(), "no event twice");
        assert_eq!(joined, all1, "a resumed watch gets every later event exactly once, in order");
        eprintln!("resumed watch: {} events, exactly once", joined.len());
    }

    // bad input: 400 / 404, the view unchanged
    let count = |v: &Value| v["items"].as_array().map_or(0, |a| a.len());
    let before = api.get(&format!("{V}/global/api/v1/pods")).await.ok().clone();
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    for bad in [
        "resourceVersion=12x".to_string(),
        format!("resourceVersion=g{}&resourceVersionMatch=Exact", b64("a=1,a=2")),
        format!("limit=5&continue={}", b64("not json")),
        format!("limit=5&continue={}", b64(r#"{"rv":"12","k":["a","b","c"]}"#)),
        format!("limit=5&continue={}", b64(r#"{"rv":"g","k":["a","b"]}"#)),
        "limit=5&continue=%25%25".to_string(),
        // as kube-apiserver: Exact needs a resourceVersion other than "0"; unknown match values
        "resourceVersion=0&resourceVersionMatch=Exact".to_string(),
        "resourceVersionMatch=Exact".to_string(),
        "resourceVersionMatch=Newest".to_string(),
        // another spelling of a position is not a resourceVersion fedctl handed out
        format!("resourceVersion=g{}", b64("member-a=01")),
        format!("resourceVersion=g{}", b64("member-a=1.0")),
    ] {
        api.get(&format!("{V}/global/api/v1/pods?{bad}")).await.assert_status(400, "BadRequest");
    }
    // a continue token is bound to the path it was issued for
    let page = api.get(&format!("{V}/global/api/v1/pods?limit=2")).await.ok().clone();
    let token = page["metadata"]["continue"].as_str().expect("more than two pods").to_string();
    api.get(&format!("{V}/global/api/v1/namespaces/default/pods?limit=2&continue={token}")).await.assert_status(400, "BadRequest");
    api.get(&format!("{V}/global/api/v1/pods?limit=2&continue={token}")).await.ok();
    api.get(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion=gnot-base64!")).await.assert_status(400, "BadRequest");
    api.get(&format!("{V}/clusters/nope/api/v1/pods")).await.assert_status(404, "NotFound");
    api.get(&format!("{V}/clusters/nope/api/v1/namespaces/default/pods/x")).await.assert_status(404, "NotFound");
    let after = api.get(&format!("{V}/global/api/v1/pods")).await.ok().clone();
    assert_eq!(count(&before), count(&after), "churn is off: the view did not change");
}

/// A continue token whose snapshot left the window (small rings, no time window) is 410
/// Expired, as kube-apiserver answers an expired continue token; a fresh token still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn global_view_expired_continue() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--cache-shards", "3", "--cache-window-seconds", "0", "--cache-max-events", "300"]);
    let a = start_member("member-a", 3, 20, 5, 0);
    register(&server, &a).await;
    let api = server.client();
    wait_for("member in the view", async || api.get(&format!("{V}/global/api/v1/pods")).await.json["items"].as_array().is_some_and(|i| i.len() > 40)).await;
    let first = api.get(&format!("{V}/global/api/v1/pods?limit=20")).await.ok().clone();
    let token = first["metadata"]["continue"].as_str().expect("more pages").to_string();
    let page2 = format!("{V}/global/api/v1/pods?limit=20&continue={token}");
    api.get(&page2).await.ok();
    set_churn(&[&a], 100).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = api.get(&page2).await;
        if r.status == 410 {
            r.assert_status(410, "Expired");
            break;
        }
        r.ok();
        assert!(Instant::now() < deadline, "the snapshot never left the window");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // a watch from that snapshot is expired too; a new list pages fine
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap();
    let mut w = api.watch(&format!("{V}/global/api/v1/pods?watch=1&resourceVersion={rv}")).await;
    let e = w.expect_event(Duration::from_secs(5)).await;
    assert_eq!((e["type"].as_str(), e["object"]["code"].as_i64()), (Some("ERROR"), Some(410)), "{e}");
    set_churn(&[&a], 0).await;
    let fresh = api.get(&format!("{V}/global/api/v1/pods?limit=20")).await.ok().clone();
    let t = fresh["metadata"]["continue"].as_str().unwrap();
    api.get(&format!("{V}/global/api/v1/pods?limit=20&continue={t}")).await.ok();
}

/// Every pod served by the global view equals, in meaning, the member's own JSON of it
/// (managedFields included): only the two `fedctl.io/` annotations are added. Enough pods that
/// objects are encoded both before and after the cache trains its per-kind dictionary.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn global_view_objects_equal_the_members() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let a = start_member("member-a", 30, 40, 11, 0);
    let b = start_member("member-b", 10, 30, 12, 0);
    register(&server, &a).await;
    register(&server, &b).await;
    let api = server.client();
    let mut with_managed_fields = 0;
    for m in [&a, &b] {
        let kube = client(&m.kubeconfig, None).await;
        let req = http::Request::get("/api/v1/pods").body(Vec::new()).unwrap();
        let member: Value = kube.request(req).await.expect("member LIST");
        let want: BTreeMap<String, Value> = member["items"].as_array().unwrap().iter().map(|p| (p["metadata"]["uid"].as_str().unwrap().to_string(), p.clone())).collect();
        let mut got: BTreeMap<String, Value> = BTreeMap::new();
        wait_for("the member's pods in the view", async || {
            let r = api.get(&format!("{V}/clusters/{}/api/v1/pods", m.name)).await;
            got = r.json["items"].as_array().cloned().unwrap_or_default().into_iter().map(|p| (p["metadata"]["uid"].as_str().unwrap_or("").to_string(), p)).collect();
            got.len() == want.len()
        })
        .await;
        for (uid, w) in &want {
            let mut g = got.remove(uid).unwrap_or_else(|| panic!("{} pod {uid} missing from the view", m.name));
            let ann = g["metadata"]["annotations"].as_object_mut().expect("the view adds annotations");
            assert_eq!(ann.remove("fedctl.io/cluster"), Some(json!(m.name)));
            assert_eq!(ann.remove("fedctl.io/member-resource-version").as_ref(), w["metadata"].get("resourceVersion"));
            if ann.is_empty() && w["metadata"].get("annotations").is_none() {
                g["metadata"].as_object_mut().unwrap().remove("annotations");
            }
            assert_eq!(&g, w, "{} pod {uid}: the view's JSON differs from the member's", m.name);
            with_managed_fields += usize::from(w["metadata"].get("managedFields").is_some());
        }
    }
    assert!(with_managed_fields > 100, "the sample holds pods with managedFields ({with_managed_fields})");

    // selectors filter on the cached attributes exactly as the member filters its objects
    let kube = client(&a.kubeconfig, None).await;
    let member_list = async |query: &str| -> BTreeSet<String> {
        let req = http::Request::get(format!("/api/v1/pods?{query}")).body(Vec::new()).unwrap();
        let v: Value = kube.request(req).await.expect("member LIST");
        v["items"].as_array().unwrap().iter().map(|p| p["metadata"]["uid"].as_str().unwrap().to_string()).collect()
    };
    let sample: Value = {
        let req = http::Request::get("/api/v1/pods?limit=1").body(Vec::new()).unwrap();
        kube.request(req).await.expect("member LIST")
    };
    let p0 = &sample["items"][0];
    let (lk, lv) = p0["metadata"]["labels"].as_object().and_then(|l| l.iter().next()).map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string())).expect("a labeled pod");
    let node = p0["spec"]["nodeName"].as_str().expect("a scheduled pod").to_string();
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
    for query in [
        format!("labelSelector={}", enc(&format!("{lk}={lv}"))),
        format!("labelSelector={}", enc(&format!("{lk}!={lv}"))),
        format!("fieldSelector={}", enc(&format!("spec.nodeName={node}"))),
        format!("fieldSelector={}", enc("status.phase=Running")),
    ] {
        let want = member_list(&query).await;
        assert!(!want.is_empty(), "{query} selects something on the member");
        for (path, limit) in [(format!("clusters/{}", a.name), ""), ("global".to_string(), ""), (format!("clusters/{}", a.name), "&limit=7")] {
            let mut got = BTreeSet::new();
            let mut cont = String::new();
            loop {
                let r = api.get(&format!("{V}/{path}/api/v1/pods?{query}{limit}&continue={cont}")).await;
                for p in r.ok()["items"].as_array().unwrap() {
                    if p["metadata"]["annotations"]["fedctl.io/cluster"] == json!(a.name) {
                        got.insert(p["metadata"]["uid"].as_str().unwrap().to_string());
                    }
                }
                cont = r.json["metadata"]["continue"].as_str().unwrap_or("").to_string();
                if cont.is_empty() {
                    break;
                }
            }
            assert_eq!(got, want, "{path} ?{query}{limit}: the view selects what the member selects");
        }
    }
}
