//! Acceptance: one client cannot exhaust the server — request body size and nesting, watches per user (429 + Retry-After; watches the global view proxies to a member count too), LIST page size, and slow watchers dropped without slowing the others; refused requests write nothing.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::procs::FedsimProcess;
use fedctl::pki::kubeconfig::Kubeconfig;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::etcd::EtcdServer;
use common::member::register;
use common::server::{assert_same_dump, etcd_dump, ApiClient, FedServer, Reply};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
/// The global view's API group.
const V: &str = "/apis/search.fedctl.io/v1alpha1";

/// A raw HTTP/1.1 connection over TLS with the admin client certificate: for what a
/// high-level client hides (chunked bodies, response headers, a reader that never reads).
async fn raw_conn(server: &FedServer) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let kc = Kubeconfig::load(&server.kubeconfig()).expect("kubeconfig");
    let ca = kc.current_cluster().unwrap().ca_pem().unwrap().unwrap();
    let user = kc.current_user().unwrap();
    let (cert, key) = (user.client_cert_pem().unwrap().unwrap(), user.client_key_pem().unwrap().unwrap());
    let tls: Arc<rustls::ClientConfig> = fedctl::pki::client_tls_config(&ca, Some((cert.as_str(), key.as_str()))).expect("tls");
    let port = server.url().rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.expect("TLS handshake")
}

/// Reads one whole response (`Connection: close` requests): `(status, head, body)`.
async fn read_response(conn: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> (u16, String, String) {
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut raw)).await.expect("response within 20 s");
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("bad response: {text:?}"));
    (status, head.to_string(), body.to_string())
}

/// The JSON of a chunked body (single-chunk Status answers) or a plain one.
fn body_json(head: &str, body: &str) -> Value {
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        serde_json::from_str(&out).unwrap_or(Value::Null)
    } else {
        serde_json::from_str(body).unwrap_or(Value::Null)
    }
}

fn cm(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}})
}

/// Sends a request through `send` and asserts etcd's whole keyspace is unchanged.
async fn untouched<Fut: std::future::Future<Output = Reply>>(etcd: &EtcdServer, what: &str, send: Fut) -> Reply {
    let before = etcd_dump(&etcd.endpoint()).await;
    let r = send.await;
    assert_same_dump(&before, &etcd_dump(&etcd.endpoint()).await, what);
    r
}

async fn scrape(c: &ApiClient) -> String {
    let r = c.get("/metrics").await;
    assert_eq!(r.status, 200, "GET /metrics: {}", r.text);
    r.text
}

fn sample(text: &str, series: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_deeply_nested_bodies_are_refused_and_write_nothing() {
    let etcd = EtcdServer::start_new();
    // a body limit above etcd's own 1.5 MiB request limit, so both refusals can be seen
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--max-request-body-bytes", "2621440"]);
    let api = server.client();

    // over the flag's limit, announced by Content-Length: read up to the limit, then refused
    let big = serde_json::to_vec(&cm("big", &"x".repeat(2_700_000))).unwrap();
    let r = untouched(&etcd, "body over the limit", api.request("POST", CMS, Some("application/json"), Some(big))).await;
    assert_eq!(r.assert_status(413, "RequestEntityTooLarge")["message"], "Request entity too large: limit is 2621440");

    // the same without Content-Length (chunked): cut off while reading
    let before = etcd_dump(&etcd.endpoint()).await;
    let mut conn = raw_conn(&server).await;
    conn.write_all(format!("POST {CMS} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let chunk = vec![b' '; 1 << 20];
    let mut refused_early = false;
    for _ in 0..4 {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(&chunk);
        framed.extend_from_slice(b"\r\n");
        if conn.write_all(&framed).await.is_err() {
            refused_early = true; // the server answered and closed mid-upload
            break;
        }
    }
    if !refused_early {
        let _ = conn.write_all(b"0\r\n\r\n").await;
    }
    let (status, head, body) = read_response(&mut conn).await;
    assert_eq!(status, 413, "chunked body over the limit: {head}\n{body}");
    let st = body_json(&head, &body);
    assert_eq!(st["reason"], "RequestEntityTooLarge", "{body}");
    assert_same_dump(&before, &etcd_dump(&etcd.endpoint()).await, "chunked body over the limit");

    // under the body limit but over what etcd stores in one request: 413 as well, not a 5xx
    let huge_string = serde_json::to_vec(&cm("huge-string", &"y".repeat(2_000_000))).unwrap();
    let r = untouched(&etcd, "object over etcd's request limit", api.request("POST", CMS, Some("application/json"), Some(huge_string))).await;
    let st = r.assert_status(413, "RequestEntityTooLarge");
    assert!(st["message"].as_str().unwrap().contains("too large"), "{}", r.text);

    // JSON nested 100k deep (small body): 400, no stack overflow, nothing written
    let deep = format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"deep"}},"x":{}1{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
    let r = untouched(&etcd, "deep JSON", api.request("POST", CMS, Some("application/json"), Some(deep.into_bytes()))).await;
    let st = r.assert_status(400, "BadRequest");
    assert!(st["message"].as_str().unwrap().contains("recursion limit"), "{}", r.text);
    // the same as a merge patch of an existing object
    api.post(CMS, &cm("target", "v")).await.ok();
    let deep_patch = format!(r#"{{"data":{{"v":"w"}},"x":{}1{}}}"#, "[".repeat(50_000), "]".repeat(50_000));
    let r = untouched(&etcd, "deep merge patch", api.request("PATCH", &format!("{CMS}/target"), Some("application/merge-patch+json"), Some(deep_patch.into_bytes()))).await;
    r.assert_status(400, "BadRequest");

    // YAML nested deep (libyaml's scanner is quadratic in flow depth: this took minutes
    // before the depth was checked first), and a YAML alias bomb (each level doubles the
    // expansion)
    let deep_yaml = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep-yaml\nx: {}1{}\n", "[".repeat(200_000), "]".repeat(200_000));
    let started = Instant::now();
    let r = untouched(&etcd, "deep YAML", api.request("POST", CMS, Some("application/yaml"), Some(deep_yaml.into_bytes()))).await;
    let st = r.assert_status(400, "BadRequest");
    assert!(st["message"].as_str().unwrap().contains("nested deeper than"), "{}", r.text);
    assert!(started.elapsed() < Duration::from_secs(10), "the deep YAML took {:?}", started.elapsed());
    let mut bomb = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\na0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..30 {
        let p = i - 1;
        bomb.push_str(&format!("a{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"));
    }
    let started = Instant::now();
    let r = untouched(&etcd, "YAML alias bomb", api.request("POST", CMS, Some("application/yaml"), Some(bomb.into_bytes()))).await;
    r.assert_status(400, "BadRequest");
    assert!(started.elapsed() < Duration::from_secs(10), "the alias bomb took {:?}", started.elapsed());

    // the server is still healthy and accepts a normal write
    api.post(CMS, &cm("after", "ok")).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_per_user_are_bounded_and_list_pages_capped() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--max-watches-per-user", "2", "--max-list-limit", "5"]);
    let api = server.client();
    let w = format!("{CMS}?watch=1");

    let first = api.watch(&w).await;
    let second = api.watch(&format!("/api/v1/namespaces?watch=1")).await;
    // the third open watch of the same user: 429 with Retry-After, written nowhere
    let before = etcd_dump(&etcd.endpoint()).await;
    let mut conn = raw_conn(&server).await;
    conn.write_all(format!("GET {w} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let (status, head, body) = read_response(&mut conn).await;
    assert_eq!(status, 429, "{head}\n{body}");
    assert!(head.to_ascii_lowercase().contains("\r\nretry-after: 1"), "Retry-After header: {head}");
    let st = body_json(&head, &body);
    assert_eq!(st["kind"], "Status", "{body}");
    assert_eq!(st["reason"], "TooManyRequests", "{body}");
    assert_eq!(st["code"], 429);
    assert_eq!(st["details"]["retryAfterSeconds"], 1);
    assert_same_dump(&before, &etcd_dump(&etcd.endpoint()).await, "refused watch");
    assert_eq!(sample(&scrape(&api).await, "fedctl_apiserver_watches_refused_total"), 1.0);
    // other verbs of that user are not limited by its watches
    api.get(CMS).await.ok();

    // closing one frees its slot (the server notices the closed connection)
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    let third = loop {
        let mut conn = raw_conn(&server).await;
        conn.write_all(format!("GET {w} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await.expect("response head").unwrap();
        if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200") {
            break conn;
        }
        assert!(Instant::now() < deadline, "the closed watch's slot was not released");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    drop((second, third));

    // LIST: a limit above the cap returns pages of the cap with a continue token
    for i in 0..12 {
        api.post(CMS, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i:02}"), "labels": {"set": "a"}}})).await.ok();
    }
    for path in [format!("{CMS}?limit=1000"), format!("{CMS}?limit=1000&labelSelector=set%3Da")] {
        let mut names = Vec::new();
        let mut next = path.clone();
        let mut pages = 0;
        loop {
            let page = api.get(&next).await;
            let page = page.ok();
            let items = page["items"].as_array().unwrap();
            assert!(items.len() <= 5, "{path}: a page of {} items", items.len());
            names.extend(items.iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()));
            pages += 1;
            match page["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => next = format!("{path}&continue={c}"),
                _ => break,
            }
        }
        let want: Vec<String> = (0..12).map(|i| format!("cm-{i:02}")).collect();
        assert_eq!(names, want, "{path}");
        assert!(pages >= 3, "{path}: {pages} pages");
    }
    // an explicit smaller limit is kept
    assert_eq!(api.get(&format!("{CMS}?limit=2")).await.ok()["items"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_watcher_is_dropped_without_slowing_the_others() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--watch-buffer-events", "8", "--watch-send-timeout", "1s", "--max-watches-per-user", "2"]);
    let api = server.client();
    let rv = api.get(CMS).await.ok()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let path = format!("{CMS}?watch=1&resourceVersion={rv}");

    // the slow watcher sends its request and never reads
    let mut slow = raw_conn(&server).await;
    slow.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut fast = api.watch(&path).await;

    let value = "z".repeat(256 * 1024);
    let mut written = 0;
    let mut worst = Duration::ZERO;
    let mut dropped_after = None;
    for i in 0..150 {
        api.post(CMS, &cm(&format!("big-{i:03}"), &value)).await.ok();
        written += 1;
        let t = Instant::now();
        let ev = fast.expect_event(Duration::from_secs(5)).await;
        worst = worst.max(t.elapsed());
        assert_eq!(ev["object"]["metadata"]["name"], format!("big-{i:03}"));
        let dropped = sample(&scrape(&api).await, "apiserver_terminated_watchers_total");
        if dropped >= 1.0 {
            assert_eq!(dropped, 1.0, "only the slow watcher is dropped");
            dropped_after = Some(written);
            break;
        }
    }
    let dropped_after = dropped_after.unwrap_or_else(|| panic!("the slow watcher was not dropped after {written} events of 256 KiB; log:\n{}", server.log_tail()));
    // the fast watcher keeps receiving promptly after the drop
    for i in 0..5 {
        api.post(CMS, &cm(&format!("after-{i}"), "small")).await.ok();
        let t = Instant::now();
        let ev = fast.expect_event(Duration::from_secs(5)).await;
        worst = worst.max(t.elapsed());
        assert_eq!(ev["object"]["metadata"]["name"], format!("after-{i}"));
    }
    assert!(worst < Duration::from_secs(2), "the fast watcher waited {worst:?} for an event");
    // the slow watcher's slot was released: another watch of the same user is accepted
    let _another = api.watch(&format!("{CMS}?watch=1")).await;
    assert!(server.log().contains("dropping a watcher that does not read its events"), "{}", server.log_tail());

    // reading now, the slow watcher gets what was queued before the drop, then the end of its
    // stream: none of the later events
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
        if raw.ends_with(b"\r\n0\r\n\r\n") || Instant::now() > deadline {
            break;
        }
    }
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..text.len().min(200)]);
    assert!(raw.ends_with(b"\r\n0\r\n\r\n"), "the dropped watch's stream did not end ({} bytes read)", raw.len());
    let got = text.matches("{\"type\":\"ADDED\"").count();
    assert!(got < dropped_after, "the slow watcher got {got} events, {dropped_after} were written before it was dropped");
    assert!(!text.contains("\"after-0\""), "the slow watcher got an event from after its drop");
}

/// `GET path` on a fresh raw connection (`Connection: close`): `(status, head, body)`.
async fn raw_get(server: &FedServer, path: &str) -> (u16, String, String) {
    let mut conn = raw_conn(server).await;
    conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    read_response(&mut conn).await
}

/// Asserts `path` is refused as the watch beyond the user's limit: 429 TooManyRequests Status
/// with `Retry-After: 1`, answered by the server (not the member).
async fn assert_watch_refused(server: &FedServer, path: &str) {
    let (status, head, body) = raw_get(server, path).await;
    assert_eq!(status, 429, "{path}: {head}\n{body}");
    assert!(head.to_ascii_lowercase().contains("\r\nretry-after: 1"), "{path}: Retry-After header: {head}");
    let st = body_json(&head, &body);
    assert_eq!((st["kind"].as_str(), st["reason"].as_str()), (Some("Status"), Some("TooManyRequests")), "{path}: {body}");
    assert!(st["message"].as_str().unwrap_or("").contains("open watches"), "{path}: {body}");
}

/// Opens a watch on `path`, retrying while it is refused (a released slot is noticed once the
/// server has seen the stream end); panics after 10 s.
async fn watch_when_free(api: &ApiClient, path: &str) -> common::server::Watch {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match api.try_watch(path).await {
            Ok(w) => return w,
            Err(e) => {
                assert!(e.contains("HTTP 429") && Instant::now() < deadline, "{path}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Watches the global view proxies to a member (kinds it does not cache: configmaps through
/// `clusters/<name>`, deployments through `global`) hold the user's watch slots like any other
/// watch, for as long as the member's stream lasts: beyond the limit the next watch of either
/// kind is a 429, and the slots come back when the member ends the streams or the client leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxied_global_view_watches_count_against_the_per_user_limit() {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), &["--max-watches-per-user", "2"]);
    let sim = FedsimProcess::start(Path::new(env!("CARGO_BIN_EXE_fedsim")), "member-a", &["--nodes", "1", "--pods-per-node", "2", "--namespaces", "1"], Duration::from_secs(60)).expect("start fedsim");
    register(&server, &sim).await;
    let api = server.client();
    let cms = format!("{V}/clusters/member-a/api/v1/configmaps");
    let deploys = format!("{V}/global/apis/apps/v1/deployments");
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get(&cms).await.status != 200 {
        assert!(Instant::now() < deadline, "the global view never proxied to member-a: {}", api.get(&cms).await.text);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // deployments are cached by the view (its watch is served from the cache); service
    // accounts, like config maps, are proxied to the member
    let sas = format!("{V}/clusters/member-a/api/v1/serviceaccounts");
    let first = api.watch(&format!("{cms}?watch=1")).await;
    let mut second = api.watch(&format!("{sas}?watch=1")).await;
    // the two proxied watches hold both slots: a third watch, proxied, cached or local, is refused
    assert_watch_refused(&server, &format!("{cms}?watch=1")).await;
    assert_watch_refused(&server, &format!("{deploys}?watch=true")).await;
    assert_watch_refused(&server, &format!("{CMS}?watch=1")).await;
    assert_eq!(sample(&scrape(&api).await, "fedctl_apiserver_watches_refused_total"), 3.0);
    // proxied requests that are no watches are not limited
    api.get(&deploys).await.ok();
    api.get(&cms).await.ok();

    // the member ends its watch streams: the server notices and releases both slots
    sim.admin(reqwest::Method::POST, "/fedsim/faults/drop-watches").await.expect("drop the member's watches");
    let mut first = first;
    first.collect_until_end(Duration::from_secs(10)).await;
    second.collect_until_end(Duration::from_secs(10)).await;
    let again = watch_when_free(&api, &format!("{cms}?watch=1")).await;
    let local = watch_when_free(&api, &format!("{CMS}?watch=1")).await;
    assert_watch_refused(&server, &format!("{deploys}?watch=1")).await;

    // the client leaving a proxied watch releases its slot too
    drop(again);
    let _third = watch_when_free(&api, &format!("{deploys}?watch=1")).await;
    assert_watch_refused(&server, &format!("{cms}?watch=1")).await;
    drop(local);
}
