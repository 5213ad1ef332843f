//! Response compression: large bodies (over 128 KiB, or streamed LISTs) go out gzip-encoded to
//! clients that send `Accept-Encoding: gzip`, small ones and watch streams as they are.

mod common;

use std::io::Read as _;
use std::time::Duration;

use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::server::{ApiClient, FedServer};

/// One GET with or without `Accept-Encoding: gzip`: status, `Content-Encoding`, `Vary` and
/// the body decoded (gunzipped when it came encoded).
async fn get(api: &ApiClient, path: &str, gzip: bool) -> (u16, Option<String>, Option<String>, Value, usize) {
    let mut b = api.request_builder(reqwest::Method::GET, path).timeout(Duration::from_secs(60));
    if gzip {
        b = b.header("accept-encoding", "gzip");
    }
    let r = b.send().await.expect("GET");
    let status = r.status().as_u16();
    let header = |h: &str| r.headers().get(h).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (encoding, vary) = (header("content-encoding"), header("vary"));
    let raw = r.bytes().await.expect("body").to_vec();
    let wire = raw.len();
    let body = match encoding.as_deref() {
        Some("gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut out).expect("valid gzip");
            out
        }
        _ => raw,
    };
    (status, encoding, vary, serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{path}: not JSON ({e})")), wire)
}

async fn create_namespace(api: &ApiClient, name: &str) {
    let r = api.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

async fn create_configmaps(api: &ApiClient, ns: &str, count: usize, value_len: usize) {
    use futures::StreamExt as _;
    // varied text, so that gzip has real work (not one repeated byte)
    let value: String = (0..value_len).map(|i| char::from(b'a' + ((i * 7 + i / 13) % 26) as u8)).collect();
    futures::stream::iter(0..count)
        .for_each_concurrent(8, |i| {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i:04}")}, "data": {"v": value}});
            let path = format!("/api/v1/namespaces/{ns}/configmaps");
            async move {
                let r = api.post(&path, &cm).await;
                assert_eq!(r.status, 201, "{}", r.text);
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_lists_are_gzipped_small_ones_and_watches_are_not() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start(&etcd.endpoint());
    let api = server.client();
    for ns in ["small", "big", "many"] {
        create_namespace(&api, ns).await;
    }
    create_configmaps(&api, "small", 2, 100).await;
    // 3 × 60 KiB: one page of ~180 KiB, answered with a known length
    create_configmaps(&api, "big", 3, 60 * 1024).await;
    // 520 small objects: more than one storage page, so the LIST is streamed (no length)
    create_configmaps(&api, "many", 520, 200).await;

    // small: never encoded, even when the client accepts gzip
    let (code, enc, _, small, _) = get(&api, "/api/v1/namespaces/small/configmaps", true).await;
    assert_eq!(code, 200);
    assert_eq!(enc, None, "a small LIST must not be compressed");
    assert_eq!(small["items"].as_array().map(Vec::len), Some(2));

    for ns in ["big", "many"] {
        let path = format!("/api/v1/namespaces/{ns}/configmaps");
        let (code, enc, vary, zipped, wire) = get(&api, &path, true).await;
        assert_eq!(code, 200);
        assert_eq!(enc.as_deref(), Some("gzip"), "{ns}: a large LIST is gzip-encoded");
        assert!(vary.unwrap_or_default().to_ascii_lowercase().contains("accept-encoding"), "{ns}: Vary names Accept-Encoding");
        // without Accept-Encoding: the same LIST, not encoded
        let (code, enc, _, plain, plain_wire) = get(&api, &path, false).await;
        assert_eq!((code, enc), (200, None));
        assert_eq!(zipped, plain, "{ns}: the decoded LIST equals the plain one");
        assert!(wire * 3 < plain_wire, "{ns}: {wire} compressed bytes vs {plain_wire} plain");
    }

    // a watch stays unencoded and its events arrive at once
    let mut w = api.request_builder(reqwest::Method::GET, "/api/v1/namespaces/small/configmaps?watch=true&resourceVersion=0").header("accept-encoding", "gzip").send().await.expect("watch");
    assert_eq!(w.status().as_u16(), 200);
    assert_eq!(w.headers().get("content-encoding"), None, "a watch must not be compressed");
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // the initial ADDED events, then one for an object created now
    let mut created = false;
    while !String::from_utf8_lossy(&seen).contains("late-one") {
        if !created && String::from_utf8_lossy(&seen).matches("\"ADDED\"").count() >= 2 {
            create_configmaps_named(&api, "small", "late-one").await;
            created = true;
        }
        let chunk = tokio::time::timeout_at(deadline, w.chunk()).await.expect("watch event within 10 s").expect("watch chunk").expect("stream open");
        seen.extend_from_slice(&chunk);
    }
    assert!(created);
}

async fn create_configmaps_named(api: &ApiClient, ns: &str, name: &str) {
    let r = api.post(&format!("/api/v1/namespaces/{ns}/configmaps"), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})).await;
    assert_eq!(r.status, 201, "{}", r.text);
}
