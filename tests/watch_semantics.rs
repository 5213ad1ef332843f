//! Acceptance: raw watch streams and list paging against a real server over a real etcd (RV resume, bookmarks, WatchList, 410s, selectors, continue).

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

use common::etcd::EtcdServer;
use common::server::{etcd_compact, etcd_revision, etcd_writes_between, event_summary, ApiClient, FedServer, Next, Watch};

/// Bound for one expected event.
const EVENT: Duration = Duration::from_secs(10);

struct Env {
    api: ApiClient,
    _server: FedServer,
    etcd: EtcdServer,
}

fn env() -> Env {
    env_with(&[])
}

fn env_with(args: &[&str]) -> Env {
    let etcd = EtcdServer::start_new();
    let server = FedServer::start_with_args(&etcd.endpoint(), args);
    Env { api: server.client(), _server: server, etcd }
}

fn cms(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/configmaps")
}

fn rv_of(v: &Value) -> i64 {
    v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no resourceVersion in {v}"))
}

impl Env {
    async fn namespace(&self, name: &str) {
        let r = self.api.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }

    async fn create_cm(&self, ns: &str, name: &str, labels: Value) -> Value {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"v": "0"}});
        let r = self.api.post(&cms(ns), &body).await;
        assert_eq!(r.status, 201, "{}", r.text);
        r.json
    }

    async fn patch_cm(&self, ns: &str, name: &str, patch: Value) -> Value {
        let r = self.api.merge_patch(&format!("{}/{name}", cms(ns)), &patch).await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json
    }

    async fn delete_cm(&self, ns: &str, name: &str) -> Value {
        let r = self.api.delete(&format!("{}/{name}", cms(ns))).await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json
    }

    async fn current_rv(&self) -> i64 {
        etcd_revision(&self.etcd.endpoint()).await
    }
}

/// Asserts that nothing arrives for `quiet` and the stream stays open.
async fn assert_quiet(w: &mut Watch, quiet: Duration) {
    let got = w.drain_for(quiet).await;
    assert!(got.is_empty(), "expected no events, got {got:?}");
}

fn summaries(events: &[Value]) -> Vec<(String, String)> {
    events.iter().map(event_summary).collect()
}

fn pair(t: &str, n: &str) -> (String, String) {
    (t.to_string(), n.to_string())
}

#[tokio::test]
async fn watch_from_resource_version_gets_exactly_the_later_events() {
    let e = env();
    e.namespace("w").await;
    let a = e.create_cm("w", "a", json!({})).await;
    let b = e.create_cm("w", "b", json!({})).await;
    let start = rv_of(&b);
    assert!(start > rv_of(&a));
    let a2 = e.patch_cm("w", "a", json!({"data": {"v": "1"}})).await;
    let b_deleted = e.delete_cm("w", "b").await;
    let delete_rv = e.current_rv().await;

    let mut w = e.api.watch(&format!("{}?watch=1&resourceVersion={start}", cms("w"))).await;
    let ev1 = w.expect_event(EVENT).await;
    let ev2 = w.expect_event(EVENT).await;
    assert_eq!(summaries(&[ev1.clone(), ev2.clone()]), vec![pair("MODIFIED", "a"), pair("DELETED", "b")]);
    assert_eq!(rv_of(&ev1["object"]), rv_of(&a2));
    assert_eq!(ev1["object"]["data"]["v"], "1");
    assert_eq!(ev1["object"]["kind"], "ConfigMap");
    assert_eq!(ev1["object"]["apiVersion"], "v1");
    // DELETED carries the last state with the deletion's resourceVersion
    assert_eq!(rv_of(&ev2["object"]), delete_rv);
    assert_eq!(rv_of(&b_deleted), delete_rv);
    assert_eq!(ev2["object"]["metadata"]["uid"], b["metadata"]["uid"]);
    assert_quiet(&mut w, Duration::from_millis(500)).await;

    // live events keep flowing, once each
    let c = e.create_cm("w", "c", json!({})).await;
    let ev = w.expect_event(EVENT).await;
    assert_eq!(event_summary(&ev), pair("ADDED", "c"));
    assert_eq!(rv_of(&ev["object"]), rv_of(&c));
    // a change in another namespace is not seen by a namespaced watch
    e.namespace("other").await;
    e.create_cm("other", "elsewhere", json!({})).await;
    assert_quiet(&mut w, Duration::from_millis(700)).await;

    // resuming from the last RV seen gets nothing twice
    let mut w2 = e.api.watch(&format!("{}?watch=1&resourceVersion={}", cms("w"), rv_of(&c))).await;
    assert_quiet(&mut w2, Duration::from_millis(500)).await;
    e.delete_cm("w", "c").await;
    assert_eq!(event_summary(&w2.expect_event(EVENT).await), pair("DELETED", "c"));
    assert_eq!(event_summary(&w.expect_event(EVENT).await), pair("DELETED", "c"));
}

#[tokio::test]
async fn watch_without_resource_version_starts_with_the_current_state() {
    let e = env();
    e.namespace("w").await;
    e.create_cm("w", "one", json!({})).await;
    e.create_cm("w", "two", json!({})).await;
    let mut w = e.api.watch(&format!("{}?watch=1", cms("w"))).await;
    let initial = vec![w.expect_event(EVENT).await, w.expect_event(EVENT).await];
    assert_eq!(summaries(&initial), vec![pair("ADDED", "one"), pair("ADDED", "two")]);
    e.create_cm("w", "three", json!({})).await;
    assert_eq!(event_summary(&w.expect_event(EVENT).await), pair("ADDED", "three"));
}

#[tokio::test]
async fn bookmarks_only_when_asked() {
    let e = env_with(&["--bookmark-interval-seconds", "1"]);
    e.namespace("w").await;
    let start = e.current_rv().await;
    let mut with = e.api.watch(&format!("{}?watch=1&allowWatchBookmarks=true&resourceVersion={start}", cms("w"))).await;
    let mut without = e.api.watch(&format!("{}?watch=1&resourceVersion={start}", cms("w"))).await;
    // a write elsewhere moves the store's revision; only the bookmark watcher learns of it
    let secret = e.api.post("/api/v1/namespaces/w/secrets", &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {}})).await;
    assert_eq!(secret.status, 201, "{}", secret.text);
    let secret_rv = rv_of(&secret.json);
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut bookmarks = Vec::new();
    // etcd's revision just after the first bookmark arrived
    let mut rev_after_first = 0;
    let mut second_write = false;
    while Instant::now() < deadline && bookmarks.len() < 2 {
        match with.next(Duration::from_millis(500)).await {
            Next::Event(ev) => {
                assert_eq!(ev["type"], "BOOKMARK", "only bookmarks expected: {ev}");
                if bookmarks.is_empty() {
                    rev_after_first = e.current_rv().await;
                }
                bookmarks.push(ev);
            }
            Next::Timeout => {}
            Next::End => panic!("watch ended"),
        }
        if bookmarks.len() == 1 && !second_write {
            // move the revision again, for a second bookmark
            second_write = true;
            e.api.merge_patch("/api/v1/namespaces/w/secrets/s", &json!({"metadata": {"labels": {"x": "y"}}})).await.ok();
        }
    }
    assert!(!bookmarks.is_empty(), "no BOOKMARK within 8 s with --bookmark-interval-seconds 1");
    let b = &bookmarks[0];
    assert_eq!(b["object"]["kind"], "ConfigMap");
    assert_eq!(b["object"]["apiVersion"], "v1");
    // The bookmark carries the store revision when it is sent: the secret's, unless the
    // server itself wrote meanwhile (the controllers' leader Lease is renewed every few
    // seconds). So every revision between the secret and the bookmark must be a write of
    // another collection, and the bookmark's revision one that etcd really reached.
    let b_rv = rv_of(&b["object"]);
    assert!((secret_rv..=rev_after_first).contains(&b_rv), "the bookmark carries the store revision: {b_rv}, not within [{secret_rv}, {rev_after_first}]");
    let between = etcd_writes_between(&e.etcd.endpoint(), secret_rv, b_rv).await;
    if b_rv > secret_rv {
        eprintln!("writes between the secret ({secret_rv}) and the bookmark ({b_rv}): {between:?}");
        assert_eq!(between.last().map(|(_, rev)| *rev), Some(b_rv), "the bookmark's revision is a write's: {between:?}");
    }
    assert!(between.iter().all(|(key, _)| !key.starts_with("/registry/core/configmaps/w/")), "a ConfigMap of the watched namespace changed before the bookmark, yet no event was sent: {between:?}");
    assert!(b["object"].get("data").is_none() && b["object"]["metadata"].get("name").is_none(), "bookmark carries only the RV: {b}");
    assert_eq!(bookmarks.len(), 2, "bookmarks keep coming as the revision moves: {bookmarks:?}");
    assert!(rv_of(&bookmarks[1]["object"]) > b_rv);
    assert_quiet(&mut without, Duration::from_millis(1500)).await;
}

#[tokio::test]
async fn send_initial_events_then_end_bookmark() {
    let e = env();
    e.namespace("w").await;
    for n in ["c1", "c2", "c3"] {
        e.create_cm("w", n, json!({})).await;
    }
    let last_rv = e.current_rv().await;
    let mut w = e.api.watch(&format!("{}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=", cms("w"))).await;
    let mut initial = Vec::new();
    for _ in 0..3 {
        initial.push(w.expect_event(EVENT).await);
    }
    assert_eq!(summaries(&initial), vec![pair("ADDED", "c1"), pair("ADDED", "c2"), pair("ADDED", "c3")]);
    let end = w.expect_event(EVENT).await;
    assert_eq!(end["type"], "BOOKMARK", "{end}");
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert!(rv_of(&end["object"]) >= last_rv);
    e.create_cm("w", "c4", json!({})).await;
    assert_eq!(event_summary(&w.expect_event(EVENT).await), pair("ADDED", "c4"));

    // sendInitialEvents needs resourceVersionMatch=NotOlderThan
    let r = e.api.get(&format!("{}?watch=1&sendInitialEvents=true", cms("w"))).await;
    r.assert_status(422, "Invalid");
}

#[tokio::test]
async fn compacted_resource_version_yields_one_410_error_event() {
    let e = env();
    e.namespace("w").await;
    let a = e.create_cm("w", "a", json!({})).await;
    let old = rv_of(&a);
    // Events are served past the watch cache (straight from etcd, as kube-apiserver can
    // have them): their watch from a compacted revision is answered the same way
    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "w"}, "involvedObject": {"kind": "ConfigMap", "namespace": "w", "name": "a"}, "reason": "Test", "message": "m", "type": "Normal"});
    let r = e.api.post("/api/v1/namespaces/w/events", &event).await;
    assert_eq!(r.status, 201, "{}", r.text);
    for i in 1..=3 {
        e.patch_cm("w", "a", json!({"data": {"v": i.to_string()}})).await;
    }
    let compact_at = e.current_rv().await;
    etcd_compact(&e.etcd.endpoint(), compact_at).await;

    let mut w = e.api.watch(&format!("{}?watch=1&resourceVersion={old}", cms("w"))).await;
    let events = w.collect_until_end(Duration::from_secs(10)).await;
    assert_eq!(events.len(), 1, "exactly one event, then the stream ends: {events:?}");
    let ev = &events[0];
    assert_eq!(ev["type"], "ERROR");
    let st = &ev["object"];
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["apiVersion"], "v1");
    assert_eq!(st["status"], "Failure");
    assert_eq!(st["code"], 410);
    assert_eq!(st["reason"], "Expired");
    let msg = st["message"].as_str().unwrap();
    assert!(msg.starts_with(&format!("too old resource version: {old} (")), "{msg}");
    let mut w = e.api.watch(&format!("/api/v1/namespaces/w/events?watch=1&resourceVersion={old}")).await;
    let events = w.collect_until_end(Duration::from_secs(10)).await;
    assert_eq!(events.len(), 1, "exactly one event, then the stream ends: {events:?}");
    assert_eq!((events[0]["type"].as_str(), events[0]["object"]["code"].as_i64()), (Some("ERROR"), Some(410)), "{}", events[0]);
    let msg = events[0]["object"]["message"].as_str().unwrap();
    assert!(msg.starts_with(&format!("too old resource version: {old} (")), "uncached: {msg}");

    // a watch from the compaction point itself still works
    let mut ok = e.api.watch(&format!("{}?watch=1&resourceVersion={compact_at}", cms("w"))).await;
    e.patch_cm("w", "a", json!({"data": {"v": "after"}})).await;
    assert_eq!(event_summary(&ok.expect_event(EVENT).await), pair("MODIFIED", "a"));
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream() {
    let e = env();
    e.namespace("w").await;
    let rv = e.current_rv().await;
    let started = Instant::now();
    let mut w = e.api.watch(&format!("{}?watch=1&timeoutSeconds=2&resourceVersion={rv}", cms("w"))).await;
    let events = w.collect_until_end(Duration::from_secs(10)).await;
    let took = started.elapsed();
    assert!(events.is_empty(), "{events:?}");
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(6), "stream lasted {took:?}");
}

#[tokio::test]
async fn label_selector_transitions() {
    let e = env();
    e.namespace("w").await;
    let rv = e.current_rv().await;
    let mut w = e.api.watch(&format!("{}?watch=1&labelSelector=tier%3Dweb&resourceVersion={rv}", cms("w"))).await;
    e.create_cm("w", "plain", json!({"tier": "db"})).await; // never matches
    e.create_cm("w", "x", json!({"tier": "web"})).await; // ADDED
    e.patch_cm("w", "x", json!({"data": {"v": "1"}})).await; // MODIFIED
    e.patch_cm("w", "x", json!({"metadata": {"labels": {"tier": null}}})).await; // DELETED (left the selection)
    e.patch_cm("w", "x", json!({"data": {"v": "2"}})).await; // nothing
    e.patch_cm("w", "plain", json!({"data": {"v": "2"}})).await; // nothing
    let readded = e.patch_cm("w", "x", json!({"metadata": {"labels": {"tier": "web"}}})).await; // ADDED
    e.delete_cm("w", "x").await; // DELETED
    e.delete_cm("w", "plain").await; // nothing
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(w.expect_event(EVENT).await);
    }
    assert_eq!(summaries(&got), vec![pair("ADDED", "x"), pair("MODIFIED", "x"), pair("DELETED", "x"), pair("ADDED", "x"), pair("DELETED", "x")]);
    // the DELETED for leaving the selection carries the new (non-matching) state
    assert!(got[2]["object"]["metadata"]["labels"].get("tier").is_none(), "{}", got[2]);
    assert_eq!(got[3]["object"]["data"]["v"], "2");
    assert_eq!(rv_of(&got[3]["object"]), rv_of(&readded));
    assert_quiet(&mut w, Duration::from_millis(700)).await;
}

fn decode_token(tok: &str) -> Value {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(tok).expect("continue token is base64url");
    serde_json::from_slice(&raw).expect("continue token is JSON")
}

#[tokio::test]
async fn paging_returns_every_object_exactly_once() {
    let e = env();
    e.namespace("p").await;
    for i in 0..7 {
        e.create_cm("p", &format!("cm-{i}"), json!({"parity": if i % 2 == 0 { "even" } else { "odd" }})).await;
    }
    let mut names = Vec::new();
    let mut pages = 0;
    let mut list_rv: Option<String> = None;
    let mut next = format!("{}?limit=3", cms("p"));
    let mut remaining_seen = Vec::new();
    loop {
        let r = e.api.get(&next).await;
        let page = r.ok();
        pages += 1;
        assert_eq!(page["kind"], "ConfigMapList");
        assert_eq!(page["apiVersion"], "v1");
        let rv = page["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        // every page is served from the first page's snapshot
        assert_eq!(list_rv.get_or_insert(rv.clone()), &rv);
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 3);
        names.extend(items.iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()));
        remaining_seen.push(page["metadata"].get("remainingItemCount").cloned());
        if pages == 1 {
            // written after the first page: must not show up in this list
            e.create_cm("p", "cm-late", json!({})).await;
        }
        match page["metadata"].get("continue").and_then(Value::as_str).filter(|c| !c.is_empty()) {
            Some(tok) => {
                let t = decode_token(tok);
                assert_eq!(t["v"], "meta.k8s.io/v1");
                assert_eq!(t["rv"].to_string(), rv);
                next = format!("{}?limit=3&continue={tok}", cms("p"));
            }
            None => break,
        }
        assert!(pages < 10, "paging does not terminate");
    }
    let want: Vec<String> = (0..7).map(|i| format!("cm-{i}")).collect();
    assert_eq!(names, want, "all objects, once each, in key order");
    assert_eq!(pages, 3);
    assert_eq!(remaining_seen, vec![Some(json!(4)), Some(json!(1)), None]);

    // with a selector: continue still works, remainingItemCount is not sent
    let mut evens = Vec::new();
    let mut next = format!("{}?limit=2&labelSelector=parity%3Deven", cms("p"));
    loop {
        let r = e.api.get(&next).await;
        let page = r.ok();
        assert!(page["metadata"].get("remainingItemCount").is_none(), "{page}");
        evens.extend(page["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()));
        match page["metadata"].get("continue").and_then(Value::as_str).filter(|c| !c.is_empty()) {
            Some(tok) => next = format!("{}?limit=2&labelSelector=parity%3Deven&continue={tok}", cms("p")),
            None => break,
        }
    }
    assert_eq!(evens, vec!["cm-0", "cm-2", "cm-4", "cm-6"]);
}

#[tokio::test]
async fn continue_token_with_compacted_revision_is_410_with_fresh_token() {
    let e = env();
    e.namespace("p").await;
    for i in 0..5 {
        e.create_cm("p", &format!("cm-{i}"), json!({})).await;
    }
    let first = e.api.get(&format!("{}?limit=2", cms("p"))).await;
    let tok = first.ok()["metadata"]["continue"].as_str().expect("continue token").to_string();
    e.create_cm("p", "cm-5", json!({})).await;
    e.delete_cm("p", "cm-0").await;
    etcd_compact(&e.etcd.endpoint(), e.current_rv().await).await;

    let r = e.api.get(&format!("{}?limit=2&continue={tok}", cms("p"))).await;
    let st = r.assert_status(410, "Expired");
    assert_eq!(
        st["message"],
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
    );
    let fresh = st["metadata"]["continue"].as_str().expect("410 carries a fresh continue token");
    let t = decode_token(fresh);
    assert_eq!(t["rv"], -1, "fresh token continues at the latest revision: {t}");
    assert_eq!(t["start"], decode_token(&tok)["start"]);

    // the fresh token continues after the first page, at the latest state
    let mut names = Vec::new();
    let mut next = format!("{}?limit=2&continue={fresh}", cms("p"));
    loop {
        let r = e.api.get(&next).await;
        let page = r.ok();
        names.extend(page["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()));
        match page["metadata"].get("continue").and_then(Value::as_str).filter(|c| !c.is_empty()) {
            Some(tok) => next = format!("{}?limit=2&continue={tok}", cms("p")),
            None => break,
        }
    }
    assert_eq!(names, vec!["cm-2", "cm-3", "cm-4", "cm-5"]);

    // an explicit compacted resourceVersion (Exact) is a plain 410 too
    let r = e.api.get(&format!("{}?resourceVersion=2&resourceVersionMatch=Exact", cms("p"))).await;
    r.assert_status(410, "Expired");
}

/// The server compacts etcd's history itself (`--etcd-compaction-interval`, as
/// kube-apiserver does): a resourceVersion older than two intervals becomes 410 Expired.
/// (That the last interval's history is kept is checked step by step in `tests/storage.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_compacts_history_older_than_its_interval() {
    let e = env_with(&["--etcd-compaction-interval", "1s"]);
    e.namespace("c").await;
    let old = rv_of(&e.create_cm("c", "cm-0", json!({})).await);
    e.create_cm("c", "cm-1", json!({})).await;
    let at = format!("{}?resourceVersion={old}&resourceVersionMatch=Exact", cms("c"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = e.api.get(&at).await;
        if r.status == 410 {
            r.assert_status(410, "Expired");
            break;
        }
        assert_eq!(r.ok()["items"].as_array().unwrap().len(), 1, "the state at {old}");
        assert!(Instant::now() < deadline, "resourceVersion {old} still listed after 30 s of 1 s compaction intervals");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// etcd's count of its watchers (the gauge `etcd_debugging_mvcc_watcher_total` of its
/// `/metrics`).
async fn etcd_watchers(endpoint: &str) -> f64 {
    let text = reqwest::get(format!("{endpoint}/metrics")).await.expect("etcd /metrics").text().await.expect("etcd /metrics body");
    text.lines()
        .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no etcd_debugging_mvcc_watcher_total in etcd's metrics"))
}

/// The watch cache: 40 watches of configmaps, one namespace each (as agents watch their exec
/// namespaces), add no etcd watcher beyond the one the resource already has, and each sees
/// only its namespace; without the watch cache (`--watch-cache-events 0`) each is an etcd
/// watch of its own.
#[tokio::test]
async fn watches_of_many_namespaces_share_one_etcd_watch() {
    const N: usize = 40;
    for (args, shared) in [(&[][..], true), (&["--watch-cache-events", "0"][..], false)] {
        let e = env_with(args);
        for i in 0..N {
            e.namespace(&format!("ns-{i}")).await;
        }
        // one watch first, so that the shared one exists before counting
        let mut first = e.api.watch(&format!("{}?watch=1", cms("ns-0"))).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = etcd_watchers(&e.etcd.endpoint()).await;
        let mut ws = Vec::new();
        for i in 1..N {
            ws.push(e.api.watch(&format!("{}?watch=1", cms(&format!("ns-{i}")))).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let added = etcd_watchers(&e.etcd.endpoint()).await - before;
        if shared {
            assert!(added < 1.0, "{} more etcd watchers for {} watches through the watch cache", added, N - 1);
        } else {
            assert!(added >= (N - 1) as f64, "without the watch cache each watch is an etcd watch: {added}");
        }
        e.create_cm("ns-7", "x", json!({})).await;
        match ws[6].next(EVENT).await {
            Next::Event(ev) => {
                assert_eq!(ev["type"], "ADDED");
                assert_eq!(ev["object"]["metadata"]["name"], "x");
                assert_eq!(ev["object"]["metadata"]["namespace"], "ns-7");
            }
            other => panic!("ns-7's watch: {:?}", matches!(other, Next::End)),
        }
        for (i, w) in ws.iter_mut().enumerate().filter(|(i, _)| *i != 6).take(5) {
            assert!(matches!(w.next(Duration::from_millis(200)).await, Next::Timeout), "watch {i} saw another namespace's event");
        }
        assert!(matches!(first.next(Duration::from_millis(200)).await, Next::Timeout));
    }
}
