//! Fault acceptance: etcd out of space (`--quota-backend-bytes` small, filled through the API) — writes get a prompt 500 Status, reads and watches keep working, the server survives.

mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::server::FedServer;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn cm(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}})
}

/// A write refused for lack of space: 500 InternalError naming etcd's error, answered promptly.
#[track_caller]
fn assert_quota_refusal(r: &common::server::Reply, took: Duration, what: &str) {
    assert!(took < Duration::from_secs(10), "{what}: answered after {took:?}");
    let st = r.assert_status(500, "InternalError");
    assert!(st["message"].as_str().unwrap().contains("database space exceeded"), "{what}: {}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_etcd_refuses_writes_with_500_and_keeps_serving_reads() {
    let etcd = EtcdServer::start_with_args(&["--quota-backend-bytes=4194304"]);
    let mut server = FedServer::start(&etcd.endpoint());
    let api = server.client();
    api.post(CMS, &cm("kept", "before")).await.ok();
    let rv = api.get(CMS).await.ok()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut watch = api.watch(&format!("{CMS}?watch=1&resourceVersion={rv}")).await;

    // fill etcd through the API until it refuses
    let value = "f".repeat(256 * 1024);
    let mut accepted = 0;
    let refused = loop {
        let t = Instant::now();
        let r = api.post(CMS, &cm(&format!("fill-{accepted:03}"), &value)).await;
        if r.status == 201 {
            accepted += 1;
            assert!(accepted < 200, "etcd never filled up");
            continue;
        }
        assert_quota_refusal(&r, t.elapsed(), "the write that hit the quota");
        break r;
    };
    assert!(accepted > 0, "no write succeeded before the quota: {}", refused.text);
    // etcd's quota check runs twice: before the proposal, which refuses a put with nothing
    // written, and after applying it (its quotaApplier answers "database space exceeded"
    // for a put it has just applied when the backend is over quota then). So the write
    // that hit the quota may be stored; it counts as stored when it can be read back.
    let last = format!("fill-{accepted:03}");
    let hit_stored = api.get(&format!("{CMS}/{last}")).await.status == 200;
    let stored = accepted + usize::from(hit_stored);
    // the watcher saw every accepted write, in order
    for i in 0..stored {
        let ev = watch.expect_event(Duration::from_secs(10)).await;
        assert_eq!(ev["object"]["metadata"]["name"], format!("fill-{i:03}"));
    }

    // every kind of write is refused the same way, small or not
    let t = Instant::now();
    let r = api.post(CMS, &cm("small", "x")).await;
    assert_quota_refusal(&r, t.elapsed(), "create");
    let t = Instant::now();
    let r = api.merge_patch(&format!("{CMS}/kept"), &json!({"data": {"v": "after"}})).await;
    assert_quota_refusal(&r, t.elapsed(), "patch");
    let mut kept = api.get(&format!("{CMS}/kept")).await.ok().clone();
    kept["data"]["v"] = json!("put");
    let t = Instant::now();
    let r = api.put(&format!("{CMS}/kept"), &kept).await;
    assert_quota_refusal(&r, t.elapsed(), "update");
    let t = Instant::now();
    let r = api.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "more"}})).await;
    assert_quota_refusal(&r, t.elapsed(), "namespace create");

    // reads keep working: GET, LIST (paged and not), a new watch with its initial state
    assert_eq!(api.get(&format!("{CMS}/kept")).await.ok()["data"]["v"], "before");
    let list = api.get(CMS).await;
    assert_eq!(list.ok()["items"].as_array().unwrap().len(), stored + 1);
    let page = api.get(&format!("{CMS}?limit=2")).await;
    assert_eq!(page.ok()["items"].as_array().unwrap().len(), 2);
    let mut fresh = api.watch(&format!("{CMS}?watch=1")).await;
    let first = fresh.expect_event(Duration::from_secs(10)).await;
    assert_eq!(first["type"], "ADDED");
    api.get("/api/v1/namespaces").await.ok();
    // the old watch is still open (no event from a refused write)
    assert!(watch.drain_for(Duration::from_millis(500)).await.is_empty());

    // the server survives: still serving after all that, no panic in its log
    assert!(server.readyz().is_ok(), "the server stopped answering");
    server.wait_ready(Duration::from_secs(5)).expect("still ready: the federation's namespaces exist");
    assert!(!server.log().contains("panicked"), "{}", server.log_tail());
}
