//! Acceptance: etcd outages (mid-flight and at server start) give bounded 5xx answers, end watches, and recover with data intact.

mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::server::{event_summary, FedServer, Next};

/// An outage must be reported within this bound, never hang.
const OUTAGE_BOUND: Duration = Duration::from_secs(15);

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}})
}

#[tokio::test]
async fn etcd_outage_mid_flight_then_recovery() {
    let mut etcd = EtcdServer::start_new();
    let mut server = FedServer::start(&etcd.endpoint());
    let api = server.client();
    let cms = "/api/v1/namespaces/default/configmaps";
    let before = api.post(cms, &cm("before")).await;
    assert_eq!(before.status, 201, "{}", before.text);
    let rv = before.json["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let mut watch = api.watch(&format!("{cms}?watch=1&resourceVersion={rv}")).await;

    etcd.stop();

    // a write fails with a 5xx Status, promptly
    let started = Instant::now();
    let r = api.post(cms, &cm("during")).await;
    let took = started.elapsed();
    assert!(took < OUTAGE_BOUND, "create during the outage took {took:?}");
    assert!((500..600).contains(&r.status), "expected 5xx, got {}: {}", r.status, r.text);
    assert_eq!(r.json["kind"], "Status", "{}", r.text);
    assert_eq!(r.json["status"], "Failure");
    assert_eq!(r.json["code"], r.status);
    // reads too
    let r = api.get(&format!("{cms}/before")).await;
    assert!((500..600).contains(&r.status), "expected 5xx, got {}: {}", r.status, r.text);

    // the open watch ends (an ERROR event before the end is allowed, nothing else)
    let deadline = tokio::time::Instant::now() + OUTAGE_BOUND;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match watch.next(left).await {
            Next::End => break,
            Next::Event(ev) => {
                assert_eq!(ev["type"], "ERROR", "only an ERROR may precede the end: {ev}");
                assert!(ev["object"]["code"].as_u64().is_some_and(|c| c >= 500), "{ev}");
            }
            Next::Timeout => panic!("watch still open {OUTAGE_BOUND:?} after etcd went away"),
        }
    }
    let (code, body) = server.readyz().expect("readyz answers during the outage");
    assert_eq!(code, 503, "readyz during the outage: {body}");

    etcd.start();
    server.wait_ready(Duration::from_secs(30)).expect("ready again after etcd is back");
    let after = api.post(cms, &cm("after")).await;
    assert_eq!(after.status, 201, "{}", after.text);
    let got = api.get(&format!("{cms}/before")).await;
    assert_eq!(got.ok()["metadata"]["uid"], before.json["metadata"]["uid"], "data intact");
    assert_eq!(got.json["data"]["k"], "before");
    let list = api.get(cms).await;
    let names: Vec<&str> = list.ok()["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["after", "before"], "the failed create left nothing behind");
    // watches work again, resuming from before the outage
    let mut w = api.watch(&format!("{cms}?watch=1&resourceVersion={rv}")).await;
    assert_eq!(event_summary(&w.expect_event(Duration::from_secs(10)).await), ("ADDED".into(), "after".into()));

    // and a restart of the server itself keeps data, port and credentials
    server.stop();
    server.restart();
    let got = server.client().get(&format!("{cms}/after")).await;
    assert_eq!(got.ok()["metadata"]["uid"], after.json["metadata"]["uid"]);
}

#[tokio::test]
async fn server_started_while_etcd_is_down_becomes_ready_when_it_starts() {
    let mut etcd = EtcdServer::start_new();
    etcd.stop();
    let mut server = FedServer::start_unready(&etcd.endpoint(), &[]);
    let api = server.client();

    let (code, body) = server.readyz().expect("readyz answers");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("etcd"), "readyz names the failing check: {body}");
    let started = Instant::now();
    let r = api.post("/api/v1/namespaces/default/configmaps", &cm("early")).await;
    assert!(started.elapsed() < OUTAGE_BOUND);
    assert!((500..600).contains(&r.status), "expected 5xx before etcd is up, got {}: {}", r.status, r.text);
    assert_eq!(r.json["kind"], "Status", "{}", r.text);
    // discovery does not need etcd
    assert_eq!(api.get("/api/v1").await.status, 200);
    // still not ready a while later
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.readyz().unwrap().0, 503);

    etcd.start();
    server.wait_ready(Duration::from_secs(30)).expect("ready once etcd runs");
    // ready means usable: the bootstrap namespaces exist the moment /readyz says 200
    let list = api.get("/api/v1/namespaces").await;
    let mut names: Vec<String> = list.ok()["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    assert_eq!(names, ["default", "kube-public", "kube-system"], "bootstrap namespaces when ready");
    let r = api.post("/api/v1/namespaces/default/configmaps", &cm("late")).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn frozen_etcd_gives_bounded_5xx_then_recovers() {
    let mut etcd = EtcdServer::start_new();
    let mut server = FedServer::start(&etcd.endpoint());
    let api = server.client();
    let cms = "/api/v1/namespaces/default/configmaps";
    assert_eq!(api.post(cms, &cm("before")).await.status, 201);

    etcd.pause();
    // etcd accepts connections but never answers: the request timeout must end the wait
    let started = Instant::now();
    let r = api.post(cms, &cm("during")).await;
    let took = started.elapsed();
    etcd.resume();
    assert!(took < OUTAGE_BOUND, "create against a frozen etcd took {took:?}");
    assert!((500..600).contains(&r.status), "expected 5xx, got {}: {}", r.status, r.text);
    assert_eq!(r.json["kind"], "Status", "{}", r.text);

    server.wait_ready(Duration::from_secs(30)).expect("ready after etcd thaws");
    let list = api.get(cms).await;
    let names: Vec<&str> = list.ok()["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    // a timed-out write's outcome is unknown, as kube-apiserver's 504 says ("may still be
    // processing the request"): the transaction may already sit in the frozen etcd's socket
    // buffer and commit when it thaws. Either it did not happen, or it happened whole.
    assert!(names == ["before"] || names == ["before", "during"], "after the timed-out create: {names:?}");
    if names.contains(&"during") {
        let during = api.get(&format!("{cms}/during")).await;
        assert_eq!(during.ok()["data"]["k"], "during", "a timed-out create that committed is whole");
    }
    assert_eq!(api.post(cms, &cm("after")).await.status, 201);
}

#[tokio::test]
async fn not_ready_until_bootstrap_namespaces_exist() {
    // etcd answers reads but refuses writes (NOSPACE alarm of a full backend): the server
    // connects, yet cannot create `default` & co., so it must not claim to be ready.
    let etcd = EtcdServer::start_with_args(&["--quota-backend-bytes=1048576"]);
    let mut client = etcd_client::Client::connect([etcd.endpoint()], None).await.expect("connect to etcd");
    let filler = vec![b'q'; 64 * 1024];
    let mut full = false;
    for i in 0..200 {
        if client.put(format!("/filler/{i}"), filler.clone(), None).await.is_err() {
            full = true;
            break;
        }
    }
    assert!(full, "etcd did not fill up");
    let server = FedServer::start_unready(&etcd.endpoint(), &[]);
    let api = server.client();
    // connected (reads work) …
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.get("/api/v1/namespaces").await.status != 200 {
        assert!(Instant::now() < deadline, "server never reached etcd");
        std::thread::sleep(Duration::from_millis(50));
    }
    // … but `default` cannot be created, and /readyz says so for as long as that lasts
    for _ in 0..10 {
        let (code, body) = server.readyz().expect("readyz answers");
        assert_eq!(code, 503, "ready without the bootstrap namespaces: {body}");
        assert!(body.contains("bootstrap"), "{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(api.get("/api/v1/namespaces/default").await.status, 404);
}

#[tokio::test]
async fn restart_over_a_full_etcd_is_ready_when_namespaces_exist() {
    // bootstrap needs no write when the namespaces are already there
    let etcd = EtcdServer::start_with_args(&["--quota-backend-bytes=1048576"]);
    let mut server = FedServer::start(&etcd.endpoint());
    server.stop();
    let mut client = etcd_client::Client::connect([etcd.endpoint()], None).await.expect("connect to etcd");
    let filler = vec![b'q'; 64 * 1024];
    let mut full = false;
    for i in 0..200 {
        if client.put(format!("/filler/{i}"), filler.clone(), None).await.is_err() {
            full = true;
            break;
        }
    }
    assert!(full, "etcd did not fill up");
    server.restart();
    let r = server.client().post("/api/v1/namespaces/default/configmaps", &cm("nospace")).await;
    assert!((500..600).contains(&r.status), "writes fail while etcd is full: {} {}", r.status, r.text);
    assert_eq!(server.client().get("/api/v1/namespaces/default").await.status, 200);
}
