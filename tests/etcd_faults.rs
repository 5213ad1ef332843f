//! Fault acceptance: etcd killed with SIGKILL and restarted, then compacted while a watcher is behind, all under write and watch load with a fedsim member propagating a Deployment — no acknowledged write lost, every watcher resumes exactly once or gets 410 and relists to the right state, and no Work is applied twice.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::watch;

use common::etcd::EtcdServer;
use common::member::{JoinOptions, Member};
use common::server::{etcd_compact, etcd_revision, ApiClient, FedServer, Next, Watch};

const NS: &str = "faults";
/// Concurrent writers; writer `w` creates `c{w}-{i}` and patches its counter `n{w}` to `i`.
const WRITERS: usize = 3;
/// How long etcd stays dead.
const OUTAGE: Duration = Duration::from_secs(2);

fn cms() -> String {
    format!("/api/v1/namespaces/{NS}/configmaps")
}

fn rv_of(v: &Value) -> i64 {
    v["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no resourceVersion in {v}"))
}

async fn eventually<T, F, Fut>(fed: &FedServer, what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => {
                panic!("{what}: not within {timeout:?}: {e}\nserver log:\n{}", fed.log_tail())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Writes the server acknowledged (2xx), and how the others ended.
#[derive(Default)]
struct Acked {
    /// ConfigMap created: name → resourceVersion of the create.
    creates: BTreeMap<String, i64>,
    /// Counter patched: (name, value, resourceVersion of the patch).
    patches: Vec<(String, i64, i64)>,
    /// Answers that were not 2xx: (HTTP code, body).
    refused: Vec<(u16, String)>,
    /// Requests with no complete answer (outcome unknown).
    transport_errors: usize,
}

impl Acked {
    fn count(&self) -> usize {
        self.creates.len() + self.patches.len()
    }
}

/// One writer: creates and counter patches until `stop`, recording every outcome in `acked`.
async fn writer(api: ApiClient, w: usize, stop: Arc<AtomicBool>, acked: Arc<Mutex<Acked>>) {
    let mut i = 0i64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let name = format!("c{w}-{i}");
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"i": i.to_string()}});
        let body = serde_json::to_vec(&body).unwrap();
        let r = api.try_request("POST", &cms(), Some("application/json"), Some(body)).await;
        record(&acked, r, |a, rv| {
            a.creates.insert(name.clone(), rv);
        });
        let counter = format!("n{w}");
        let patch = serde_json::to_vec(&json!({"data": {"n": i.to_string()}})).unwrap();
        let r = api.try_request("PATCH", &format!("{}/{counter}", cms()), Some("application/merge-patch+json"), Some(patch)).await;
        record(&acked, r, |a, rv| a.patches.push((counter.clone(), i, rv)));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn record(acked: &Mutex<Acked>, r: Result<common::server::Reply, String>, on_ok: impl FnOnce(&mut Acked, i64)) {
    let mut a = acked.lock().unwrap();
    match r {
        Ok(r) if (200..300).contains(&r.status) => on_ok(&mut a, rv_of(&r.json)),
        Ok(r) => a.refused.push((r.status, r.text)),
        Err(_) => a.transport_errors += 1,
    }
}

/// What a watcher is told: go offline (drop its stream and stay away) and the resourceVersion
/// at which it is done.
#[derive(Clone, Copy, Default)]
struct Ctl {
    offline: bool,
    done_at: Option<i64>,
}

/// One unbroken stretch of a watcher's history: it started at `since` (the watch's starting
/// resourceVersion or a relist's), and saw `events` (name, resourceVersion) up to `last`.
#[derive(Debug)]
struct Segment {
    since: i64,
    last: i64,
    events: BTreeSet<(String, i64)>,
}

/// Everything one watcher saw.
#[derive(Debug, Default)]
struct WatchLog {
    /// Its view of the namespace: name → (resourceVersion, data).
    state: BTreeMap<String, (i64, Value)>,
    segments: Vec<Segment>,
    /// Streams reopened from the last resourceVersion seen.
    resumes: usize,
    /// 410 Expired answers (each followed by a relist).
    expired: usize,
    /// Broken promises: duplicates, events out of order, unexpected types.
    violations: Vec<String>,
}

impl WatchLog {
    fn last(&self) -> i64 {
        self.segments.last().map_or(0, |s| s.last)
    }

    fn apply(&mut self, who: &str, ev: &Value) {
        let ty = ev["type"].as_str().unwrap_or("");
        let obj = &ev["object"];
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let rv = rv_of(obj);
        let last = self.last();
        if rv <= last {
            self.violations.push(format!("{who}: {ty} {name}@{rv} after {last} (duplicate or out of order)"));
        }
        match ty {
            "ADDED" if self.state.contains_key(&name) => self.violations.push(format!("{who}: ADDED {name}@{rv} but it was already there")),
            "MODIFIED" | "DELETED" if !self.state.contains_key(&name) => self.violations.push(format!("{who}: {ty} {name}@{rv} of an object it never saw")),
            "ADDED" | "MODIFIED" | "DELETED" => {}
            _ => self.violations.push(format!("{who}: unexpected event {ev}")),
        }
        if ty == "DELETED" {
            self.state.remove(&name);
        } else {
            self.state.insert(name.clone(), (rv, obj["data"].clone()));
        }
        let seg = self.segments.last_mut().expect("a segment");
        seg.last = rv.max(seg.last);
        seg.events.insert((name, rv));
    }

    /// Replaces the state with a LIST's and starts a new segment at its resourceVersion.
    fn relisted(&mut self, list: &Value) {
        let rv = rv_of(list);
        self.state = list["items"].as_array().unwrap().iter().map(|i| (i["metadata"]["name"].as_str().unwrap().to_string(), (rv_of(i), i["data"].clone()))).collect();
        self.segments.push(Segment { since: rv, last: rv, events: BTreeSet::new() });
    }
}

/// A watcher as a client library runs one: start from the LIST `initial`, watch from its
/// resourceVersion; when the stream ends (or an
/// ERROR other than 410 arrives) reopen it from the last resourceVersion seen; on 410 relist
/// and watch from the list's resourceVersion. Stops once it has seen `done_at`.
async fn watcher(api: ApiClient, who: String, initial: Value, mut ctl: watch::Receiver<Ctl>) -> WatchLog {
    let mut log = WatchLog::default();
    log.relisted(&initial);
    let mut stream: Option<Watch> = None;
    let mut opened_once = false;
    loop {
        let c = *ctl.borrow_and_update();
        if c.done_at.is_some_and(|d| log.last() >= d) {
            return log;
        }
        if c.offline {
            stream = None;
            let _ = tokio::time::timeout(Duration::from_millis(200), ctl.changed()).await;
            continue;
        }
        let Some(w) = stream.as_mut() else {
            match api.try_watch(&format!("{}?watch=1&resourceVersion={}", cms(), log.last())).await {
                Ok(w) => {
                    if opened_once {
                        log.resumes += 1;
                    }
                    opened_once = true;
                    stream = Some(w);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
            continue;
        };
        match w.next(Duration::from_millis(200)).await {
            Next::Timeout => {}
            Next::End => stream = None,
            Next::Event(ev) if ev["type"] == "ERROR" => {
                stream = None;
                if ev["object"]["code"] == 410 {
                    log.expired += 1;
                    // relist (retried while the server cannot answer), then watch from there
                    loop {
                        match api.try_request("GET", &cms(), None, None).await {
                            Ok(r) if r.status == 200 => {
                                log.relisted(&r.json);
                                break;
                            }
                            _ => tokio::time::sleep(Duration::from_millis(200)).await,
                        }
                    }
                    opened_once = false;
                } else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Next::Event(ev) => log.apply(&who, &ev),
        }
    }
}

/// Deployment `name` in `NS` (2 replicas).
fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}})
}

/// A member's Deployment `name`: (uid, generation), once it exists.
async fn member_deployment(m: &Member, name: &str) -> Result<(String, i64), String> {
    let (code, d) = m.get(&format!("/apis/apps/v1/namespaces/{NS}/deployments/{name}")).await;
    if code != 200 {
        return Err(format!("HTTP {code}"));
    }
    Ok((d["metadata"]["uid"].as_str().unwrap_or("").to_string(), d["metadata"]["generation"].as_i64().unwrap_or(-1)))
}

/// Works carrying Deployment `name`.
async fn works_for(admin: &ApiClient, name: &str) -> usize {
    let list = admin.get("/apis/work.fedctl.io/v1alpha1/works").await;
    let want = format!("apps/Deployment/{NS}/{name}");
    list.ok()["items"].as_array().unwrap().iter().filter(|w| w["metadata"]["annotations"]["propagation.fedctl.io/template"] == want.as_str()).count()
}

async fn acked_count(acked: &Mutex<Acked>) -> usize {
    acked.lock().unwrap().count()
}

/// Waits until `n` more writes than now were acknowledged.
async fn more_writes(fed: &FedServer, acked: &Arc<Mutex<Acked>>, n: usize, what: &str) {
    let target = acked_count(acked).await + n;
    eventually(fed, what, Duration::from_secs(30), || async {
        let c = acked_count(acked).await;
        if c >= target {
            Ok(())
        } else {
            Err(format!("{c} of {target} writes acknowledged"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_and_compacted_under_load_loses_nothing() {
    let mut etcd = EtcdServer::start_new();
    // a grace period longer than the outage: the member stays Ready across it
    let mut fed = FedServer::start_with_args(&etcd.endpoint(), &["--cluster-grace-period", "60s"]);
    let admin = fed.client();
    let opts = JoinOptions { labels: "", zone: "z", region: "r", heartbeat: 1 };
    let member = Member::start(&fed, "member-a", &["--nodes", "1", "--pods-per-node", "1", "--namespaces", "1", "--seed", "7"], &opts);
    eventually(&fed, "member-a Ready", Duration::from_secs(40), || async {
        let c = admin.get("/apis/cluster.fedctl.io/v1alpha1/clusters/member-a").await.json;
        let ready = c.pointer("/status/conditions").and_then(Value::as_array).and_then(|cs| cs.iter().find(|c| c["type"] == "Ready")).and_then(|c| c["status"].as_str()).unwrap_or("").to_string();
        if ready == "True" {
            Ok(())
        } else {
            Err(format!("Ready={ready:?}"))
        }
    })
    .await;

    // a Deployment propagated to the member before the faults
    admin.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await.ok();
    let policy = json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "web", "namespace": NS},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web-after"}],
            "placement": {"clusterAffinity": {"clusterNames": ["member-a"]}, "replicaScheduling": {"type": "Duplicated"}}}});
    admin.post(&format!("/apis/policy.fedctl.io/v1alpha1/namespaces/{NS}/propagationpolicies"), &policy).await.ok();
    let deploys = format!("/apis/apps/v1/namespaces/{NS}/deployments");
    admin.post(&deploys, &deployment("web")).await.ok();
    let (uid, generation) = eventually(&fed, "web on member-a", Duration::from_secs(40), || member_deployment(&member, "web")).await;
    assert_eq!(generation, 1);

    // the counters, then watchers from here and the write load
    for w in 0..WRITERS {
        let r = admin.post(&cms(), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("n{w}")}, "data": {"n": "0"}})).await;
        r.ok();
    }
    let initial = admin.get(&cms()).await.ok().clone();
    let (live_ctl, live_rx) = watch::channel(Ctl::default());
    let (lag_ctl, lag_rx) = watch::channel(Ctl::default());
    let watchers: Vec<_> =
        [("live-1", &live_rx), ("live-2", &live_rx), ("lagging", &lag_rx)].into_iter().map(|(who, rx)| tokio::spawn(watcher(admin.clone(), who.to_string(), initial.clone(), rx.clone()))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let writers: Vec<_> = (0..WRITERS).map(|w| tokio::spawn(writer(admin.clone(), w, stop.clone(), acked.clone()))).collect();
    more_writes(&fed, &acked, 20, "writes before the kill").await;

    // the lagging watcher goes away; etcd is killed and restarted under load
    lag_ctl.send_modify(|c| c.offline = true);
    let refused_before = acked.lock().unwrap().refused.len();
    etcd.stop();
    tokio::time::sleep(OUTAGE).await;
    etcd.start();
    fed.wait_ready(Duration::from_secs(30)).expect("ready again after etcd is back");
    more_writes(&fed, &acked, 20, "writes after the restart").await;

    // compaction while the lagging watcher is behind, then more writes, then it comes back
    let compact_at = etcd_revision(&etcd.endpoint()).await;
    etcd_compact(&etcd.endpoint(), compact_at).await;
    more_writes(&fed, &acked, 10, "writes after the compaction").await;
    lag_ctl.send_modify(|c| c.offline = false);
    more_writes(&fed, &acked, 10, "writes after the lagging watcher is back").await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("writer");
    }

    // a last write every watcher must reach
    let sentinel = admin.post(&cms(), &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sentinel"}})).await;
    let sentinel_rv = rv_of(sentinel.ok());
    live_ctl.send_modify(|c| c.done_at = Some(sentinel_rv));
    lag_ctl.send_modify(|c| c.done_at = Some(sentinel_rv));
    let mut logs = Vec::new();
    for (who, w) in ["live-1", "live-2", "lagging"].into_iter().zip(watchers) {
        let log = tokio::time::timeout(Duration::from_secs(30), w).await.unwrap_or_else(|_| panic!("{who} did not reach the last write within 30 s")).expect("watcher");
        logs.push((who, log));
    }

    let acked = std::mem::take(&mut *acked.lock().unwrap());
    eprintln!(
        "acknowledged {} creates and {} patches; {} refused, {} without an answer; compacted at {compact_at}",
        acked.creates.len(),
        acked.patches.len(),
        acked.refused.len(),
        acked.transport_errors
    );
    // the outage was felt by the writers, and every refusal is a 5xx Status
    assert!(acked.refused.len() > refused_before || acked.transport_errors > 0, "no write failed while etcd was down");
    for (code, text) in &acked.refused {
        assert!((500..600).contains(code), "a write was refused with {code}, not a 5xx: {text}");
        let st: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        assert_eq!(st["kind"], "Status", "{text}");
    }

    // no acknowledged write lost
    let list = admin.get(&cms()).await;
    let fin: BTreeMap<String, (i64, Value)> = list.ok()["items"].as_array().unwrap().iter().map(|i| (i["metadata"]["name"].as_str().unwrap().to_string(), (rv_of(i), i["data"].clone()))).collect();
    for (name, rv) in &acked.creates {
        let got = fin.get(name).unwrap_or_else(|| panic!("acknowledged create of {name} (rv {rv}) lost"));
        assert_eq!(got.0, *rv, "{name} changed after its acknowledged create");
    }
    for w in 0..WRITERS {
        let name = format!("n{w}");
        let (rv, data) = &fin[&name];
        let n: i64 = data["n"].as_str().unwrap().parse().unwrap();
        if let Some((_, last_n, last_rv)) = acked.patches.iter().filter(|p| p.0 == name).max_by_key(|p| p.1) {
            assert!(n >= *last_n && rv >= last_rv, "{name}: acknowledged n={last_n} (rv {last_rv}), found n={n} (rv {rv})");
        }
    }

    // every watcher: nothing twice, nothing out of order, no acknowledged change missed in
    // any unbroken stretch, and the final state is the server's
    let acked_writes: Vec<(String, i64)> = acked.creates.iter().map(|(n, rv)| (n.clone(), *rv)).chain(acked.patches.iter().map(|(n, _, rv)| (n.clone(), *rv))).collect();
    for (who, log) in &logs {
        eprintln!("{who}: {} resumes, {} 410s, {} segments", log.resumes, log.expired, log.segments.len());
        assert!(log.violations.is_empty(), "{who}: {:#?}", log.violations);
        for seg in &log.segments {
            for (name, rv) in &acked_writes {
                if *rv > seg.since && *rv <= seg.last {
                    assert!(seg.events.contains(&(name.clone(), *rv)), "{who}: missed the acknowledged write {name}@{rv} (stretch {}..={})", seg.since, seg.last);
                }
            }
        }
        assert_eq!(log.state, fin, "{who}: final state differs from a LIST");
    }
    // the live watchers lost their streams with etcd and resumed (or relisted); the lagging
    // one came back after the compaction and had to relist
    for (who, log) in &logs[..2] {
        assert!(log.resumes + log.expired > 0, "{who}: its stream never broke, so the outage was not under watch load");
    }
    assert!(logs[2].1.expired > 0, "lagging: no 410 after resuming from before the compaction");

    // the member: the Deployment propagated before the faults was not applied again, and
    // propagation works after them
    admin.post(&deploys, &deployment("web-after")).await.ok();
    let (_, g) = eventually(&fed, "web-after on member-a", Duration::from_secs(40), || member_deployment(&member, "web-after")).await;
    assert_eq!(g, 1);
    assert_eq!(member_deployment(&member, "web").await.unwrap(), (uid, 1), "web on member-a was re-created or changed");
    assert_eq!(works_for(&admin, "web").await, 1);
    assert_eq!(works_for(&admin, "web-after").await, 1);
}
