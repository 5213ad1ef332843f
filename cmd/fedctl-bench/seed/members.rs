//! The seed's members as the federation sees them: every member joined with `fedctl join`
//! and its agent run in this process ([`InProcessAgents`]); registration time, heartbeat
//! writes on etcd and server CPU per member while idle, and templates propagated → Works
//! applied by the agents.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::super::agents::InProcessAgents;
use super::super::median_p99;
use super::super::procs::{client_from_kubeconfig, cpu_time, EtcdProcess, ServerProcess};
use super::sim::Members;
use super::Table;

/// The etcd's current revision (v3 JSON gateway `POST /v3/kv/range`).
async fn etcd_revision(etcd: &str) -> Result<u64, String> {
    let v: Value = reqwest::Client::new().post(format!("{etcd}/v3/kv/range")).json(&json!({"key": "AA=="})).send().await.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
    v["header"]["revision"].as_str().and_then(|r| r.parse().ok()).ok_or_else(|| format!("no revision in {v}"))
}

/// A gauge of etcd's `/metrics` (summed over its series).
async fn etcd_metric(etcd: &str, name: &str) -> Option<f64> {
    let text = reqwest::get(format!("{etcd}/metrics")).await.ok()?.text().await.ok()?;
    let vals: Vec<f64> =
        text.lines().filter(|l| l.starts_with(name) && (l[name.len()..].starts_with(' ') || l[name.len()..].starts_with('{'))).filter_map(|l| l.rsplit(' ').next()?.parse().ok()).collect();
    (!vals.is_empty()).then(|| vals.iter().sum())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Joins every member (in-process agents) and adds the registration rows. With
/// `informers_with_joins` each agent's member informers start with it; otherwise they are
/// held until every member registered (the federation's registration cost apart from the
/// members' initial LISTs, which share this machine's cores here but not on real members),
/// then started and timed on their own. `None` when nothing could be started.
pub async fn register(
    t: &mut Table,
    server: &ServerProcess,
    members: &Members,
    concurrency: usize,
    status_update: Option<u64>,
    informers_with_joins: bool,
    timeout: Duration,
) -> Option<InProcessAgents> {
    let held = if informers_with_joins { "informers running" } else { "their member informers held until all registered" };
    let what = format!("registration ({} members, `fedctl join` → Cluster `Ready=True`, {concurrency} joins at once, agents in one process, {held})", members.list.len());
    let rss0 = server.rss_kib().unwrap_or(0);
    let t0 = Instant::now();
    let agents = match InProcessAgents::join_all(&server.data_dir, &members.list, concurrency, None, status_update, !informers_with_joins, timeout).await {
        Ok(a) => a,
        Err(e) => {
            t.fail(&what, e);
            return None;
        }
    };
    let all = t0.elapsed();
    let (p50, p99, missing) = agents.registration_p50_p99();
    let joins: Vec<f64> = agents.registrations.iter().map(|r| r.joined.as_secs_f64() * 1e3).collect();
    let (j50, j99) = median_p99(joins);
    t.row(&format!("{what}: p50 / p99"), format!("{p50:.0} ms / {p99:.0} ms (`fedctl join` alone: {j50:.0} / {j99:.0} ms); all in {:.1} s", all.as_secs_f64()));
    let stage = |f: fn(&super::super::agents::Registration) -> Option<Duration>| {
        let (a, b) = agents.stage_p50_p99(f);
        format!("{a:.0} / {b:.0}")
    };
    t.row(
        &format!("{what}: stages from `fedctl join` spawned, p50 / p99 ms"),
        format!(
            "join exited {}, Cluster created {}, exec namespace {}, first heartbeat Lease {}, Ready {}",
            stage(|r| Some(r.joined)),
            stage(|r| r.created),
            stage(|r| r.namespace),
            stage(|r| r.heartbeat),
            stage(|r| r.ready)
        ),
    );
    if missing > 0 || !agents.failures.is_empty() {
        let why: Vec<String> = agents.failures.iter().take(3).map(|(m, e)| format!("{m}: {e}")).collect();
        t.fail(&format!("{what}: incomplete"), format!("{missing} joined but not Ready within {timeout:?}; {} failed to join {}", agents.failures.len(), why.join("; ")));
    }
    let exited = agents.exited();
    if !exited.is_empty() {
        t.fail("in-process agents", format!("{} agents stopped: {}", exited.len(), exited.iter().take(5).cloned().collect::<Vec<_>>().join(", ")));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss1 = server.rss_kib().unwrap_or(0);
    t.row(
        "server RSS before the members joined / after",
        format!("{:.0} / {:.0} MiB ({:.0} KiB per member)", mib(rss0), mib(rss1), rss1.saturating_sub(rss0) as f64 / agents.registrations.len().max(1) as f64),
    );
    if informers_with_joins {
        summaries(t, server, members, agents.registrations.len(), t0, "the first join", timeout).await;
    } else {
        agents.start_informers();
        summaries(t, server, members, agents.registrations.len(), Instant::now(), "they were let start", timeout).await;
    }
    Some(agents)
}

/// Waits (at most `timeout`) until every member's `Cluster` carries `status.resourceSummary`:
/// every agent's node and pod informers listed their member once. Rows: when the last one
/// did (from `t0`, which `since` names) and this process's RSS then (the agents with their
/// informers synced), with fedsim's.
async fn summaries(t: &mut Table, server: &ServerProcess, members: &Members, joined: usize, t0: Instant, since: &str, timeout: Duration) {
    let what = format!("every agent's node and pod informers synced ({} members' `resourceSummary` reported)", joined);
    let Ok((http, base)) = client_from_kubeconfig(&server.kubeconfig()) else { return t.fail(&what, "admin kubeconfig unreadable") };
    let deadline = Instant::now() + timeout;
    let mut done = 0;
    while Instant::now() < deadline {
        if let Ok(r) = http.get(format!("{base}/apis/cluster.fedctl.io/v1alpha1/clusters")).send().await {
            let v: Value = r.json().await.unwrap_or(Value::Null);
            done = v["items"].as_array().into_iter().flatten().filter(|c| c.pointer("/status/resourceSummary/allocated").is_some()).count();
            if done >= joined {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let me = super::super::procs::rss_kib(std::process::id()).unwrap_or(0);
    if done < joined {
        t.fail(&what, format!("{done} of {joined} within {timeout:?}"));
    } else {
        t.row(&what, format!("all {:.1} s after {since}", t0.elapsed().as_secs_f64()));
    }
    t.row(
        "this process (the in-process agents, their informers synced) / fedsim RSS",
        format!("{:.0} MiB = {:.1} MiB per agent / {:.0} MiB", mib(me), mib(me) / joined.max(1) as f64, members.rss_kib() as f64 / 1024.0),
    );
}

/// With every agent running and nothing else changing for `secs`: etcd writes/s (revision
/// growth: heartbeat Leases and status patches), server CPU per member, etcd watchers.
pub async fn idle(t: &mut Table, server: &ServerProcess, etcd: &EtcdProcess, members: usize, secs: u64) {
    let what = format!("idle for {secs} s with {members} agents");
    let (r0, c0) = (etcd_revision(&etcd.endpoint).await, cpu_time(server.pid()).unwrap_or_default());
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (r1, c1) = (etcd_revision(&etcd.endpoint).await, cpu_time(server.pid()).unwrap_or_default());
    let el = t0.elapsed().as_secs_f64();
    match (r0, r1) {
        (Ok(a), Ok(b)) => {
            let w = (b - a) as f64 / el;
            t.row(&format!("{what}: etcd writes/s (heartbeat Leases, Cluster status)"), format!("{w:.1}/s = {:.3}/s per member", w / members.max(1) as f64));
        }
        (Err(e), _) | (_, Err(e)) => t.fail(&format!("{what}: etcd writes/s"), e),
    }
    let cpu = c1.saturating_sub(c0).as_secs_f64();
    t.row(&format!("{what}: server CPU"), format!("{:.1}% of a core = {:.3} ms CPU per second per member", cpu * 100.0 / el, cpu * 1e3 / el / members.max(1) as f64));
    match (etcd_metric(&etcd.endpoint, "etcd_debugging_mvcc_watcher_total").await, etcd_metric(&etcd.endpoint, "etcd_debugging_mvcc_watch_stream_total").await) {
        (Some(w), s) => t.row("etcd watchers / watch streams (the federation's watches on etcd)", format!("{w:.0} / {}", s.map_or("—".into(), |s| format!("{s:.0}")))),
        _ => t.fail("etcd watchers", "etcd /metrics has no etcd_debugging_mvcc_watcher_total"),
    }
}

/// Works applied per (template, exec namespace): first `Applied=True` seen.
#[derive(Default)]
struct Seen {
    written: HashMap<(String, String), Instant>,
    applied: HashMap<(String, String), Instant>,
}

/// `templates` ConfigMaps placed on 3 members each (one PropagationPolicy per group of 3
/// members, by label) and one Duplicated to every member; creation at `rate`/s; Work written
/// and Work applied (its agent reports `Applied=True`) latencies from the create request.
pub async fn works(t: &mut Table, server: &ServerProcess, etcd: &EtcdProcess, members: &Members, templates: usize, rate: f64, timeout: Duration) {
    let what = format!("{templates} templates on 3 members each + 1 Duplicated to all {}", members.list.len());
    let Ok((http, base)) = client_from_kubeconfig(&server.kubeconfig()) else { return t.fail(&what, "admin kubeconfig unreadable") };
    let names: Vec<String> = members.list.iter().map(|m| m.name.clone()).collect();
    let n = names.len().max(1);
    let groups = n.div_ceil(3);
    let post = |url: String, body: Value| {
        let http = http.clone();
        async move {
            let r = http.post(&url).json(&body).send().await.map_err(|e| e.to_string())?;
            if r.status().is_success() || r.status() == reqwest::StatusCode::CONFLICT {
                Ok(())
            } else {
                Err(format!("POST {url}: {} {}", r.status(), r.text().await.unwrap_or_default()))
            }
        }
    };
    let pp = format!("{base}/apis/policy.fedctl.io/v1alpha1/namespaces/seed/propagationpolicies");
    let mut setup = vec![post(format!("{base}/api/v1/namespaces"), json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "seed"}})).await];
    for g in 0..groups {
        let to: Vec<&String> = (0..3.min(n)).map(|k| &names[(3 * g + k) % n]).collect();
        setup.push(
            post(
                pp.clone(),
                json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": format!("group-{g}"), "namespace": "seed"},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchLabels": {"seed-group": g.to_string()}}}],
                    "placement": {"clusterAffinity": {"clusterNames": to}, "replicaScheduling": {"type": "Duplicated"}}}}),
            )
            .await,
        );
    }
    setup.push(
        post(
            pp,
            json!({"apiVersion": "policy.fedctl.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "everywhere", "namespace": "seed"},
            "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "everywhere"}], "placement": {"replicaScheduling": {"type": "Duplicated"}}}}),
        )
        .await,
    );
    if let Some(Err(e)) = setup.into_iter().find(Result::is_err) {
        return t.fail(&what, e);
    }
    // the `seed` Namespace goes to every member (a Work each): the templates start once it is
    // applied everywhere, so that fan-out is not measured as theirs
    let settle = Instant::now();
    let ns_works = format!("{base}/apis/work.fedctl.io/v1alpha1/works?labelSelector=propagation.fedctl.io%2Fkind%3DNamespace,propagation.fedctl.io%2Fname%3Dseed");
    let mut settled = 0;
    while settle.elapsed() < timeout {
        if let Ok(r) = http.get(&ns_works).send().await {
            let v: Value = r.json().await.unwrap_or(Value::Null);
            settled = v["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|w| w.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Applied" && c["status"] == "True")))
                .count();
            if settled >= n {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    t.row(&format!("{what}: the `seed` Namespace applied on every member first"), format!("{settled} of {n} in {:.1} s", settle.elapsed().as_secs_f64()));
    // the Works watch, from a fresh LIST
    let works_url = format!("{base}/apis/work.fedctl.io/v1alpha1/works");
    let rv = match http.get(format!("{works_url}?limit=1")).send().await {
        Ok(r) => r.json::<Value>().await.ok().and_then(|v| v["metadata"]["resourceVersion"].as_str().map(str::to_string)).unwrap_or_default(),
        Err(e) => return t.fail(&what, e.to_string()),
    };
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let s2 = seen.clone();
    // read apart from the in-process agents (see `watch_on_own_thread`)
    let watch_url = format!("{works_url}?watch=1&resourceVersion={rv}&timeoutSeconds=1800");
    let watcher = super::super::watch_on_own_thread(server.kubeconfig(), watch_url, move |ev, at| {
        let o = &ev["object"];
        let (Some(tpl), Some(ns)) = (o["metadata"]["labels"]["propagation.fedctl.io/name"].as_str(), o["metadata"]["namespace"].as_str()) else { return false };
        // only the ConfigMaps' Works (the `seed` Namespace is propagated too)
        if !(tpl.starts_with("tpl-") || tpl == "everywhere") {
            return false;
        }
        let k = (tpl.to_string(), ns.to_string());
        let mut s = s2.lock().unwrap_or_else(|e| e.into_inner());
        s.written.entry(k.clone()).or_insert(at);
        let applied = o.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Applied" && c["status"] == "True"));
        if applied {
            s.applied.entry(k).or_insert(at);
        }
        false
    })
    .await;
    let watcher = match watcher {
        Ok(w) => w,
        Err(e) => return t.fail(&what, format!("watch Works: {e}")),
    };
    // templates, open loop at `rate`, 16 in flight
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    // what the phase costs the federation: server and etcd CPU, etcd writes
    let (cpu_server0, cpu_etcd0, rev0) = (cpu_time(server.pid()).unwrap_or_default(), cpu_time(etcd.pid()).unwrap_or_default(), etcd_revision(&etcd.endpoint).await);
    let cpu_members = || cpu_time(std::process::id()).unwrap_or_default() + members.pids.iter().filter_map(|p| cpu_time(*p)).sum::<Duration>();
    let cpu_members0 = cpu_members();
    let cm_url = format!("{base}/api/v1/namespaces/seed/configmaps");
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..=templates {
        tokio::time::sleep_until((t0 + Duration::from_secs_f64(i as f64 / rate.max(0.001))).into()).await;
        let (name, labels) = if i == templates { ("everywhere".to_string(), json!({})) } else { (format!("tpl-{i:06}"), json!({"seed-group": (i % groups).to_string()})) };
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "seed", "labels": labels}, "data": {"index": i.to_string()}});
        let Ok(permit) = sem.clone().acquire_owned().await else { break };
        let (http, url, sent) = (http.clone(), cm_url.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            sent.lock().unwrap_or_else(|e| e.into_inner()).insert(name, Instant::now());
            let r = http.post(url).json(&body).send().await;
            drop(permit);
            match r {
                Ok(r) if r.status().is_success() => Ok(()),
                Ok(r) => Err(format!("create ConfigMap: {}", r.status())),
                Err(e) => Err(e.to_string()),
            }
        }));
    }
    let mut create_errors = Vec::new();
    for h in tasks {
        if let Ok(Err(e)) = h.await {
            create_errors.push(e);
        }
    }
    let created = t0.elapsed();
    let want = templates * 3.min(n) + n;
    let deadline = Instant::now() + timeout;
    while seen.lock().unwrap_or_else(|e| e.into_inner()).applied.len() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // the templates' status writes trail the last Work applied
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu_server1, cpu_etcd1, rev1) = (cpu_time(server.pid()).unwrap_or_default(), cpu_time(etcd.pid()).unwrap_or_default(), etcd_revision(&etcd.endpoint).await);
    let cpu_members1 = cpu_members();
    let phase = t0.elapsed().as_secs_f64();
    drop(watcher);
    let (s, sent) = (seen.lock().unwrap_or_else(|e| e.into_inner()), sent.lock().unwrap_or_else(|e| e.into_inner()));
    let lat = |m: &HashMap<(String, String), Instant>, everywhere: bool| -> Vec<f64> {
        m.iter().filter(|((tpl, _), _)| (tpl == "everywhere") == everywhere).filter_map(|((tpl, _), at)| Some(at.saturating_duration_since(*sent.get(tpl)?).as_secs_f64() * 1e3)).collect()
    };
    let fmt = |v: Vec<f64>, of: usize| {
        let got = v.len();
        let max = v.iter().cloned().fold(0.0, f64::max);
        let (p50, p99) = median_p99(v);
        format!("{p50:.0} ms / {p99:.0} ms / max {max:.0} ms ({got} of {of} Works)")
    };
    t.row(
        &format!("{what}: created"),
        format!(
            "{} ConfigMaps in {:.1} s{}",
            templates + 1,
            created.as_secs_f64(),
            if create_errors.is_empty() { String::new() } else { format!(", {} errors (first: {})", create_errors.len(), create_errors[0]) }
        ),
    );
    t.row(&format!("{what}: 3-member templates → Work written p50 / p99"), fmt(lat(&s.written, false), templates * 3.min(n)));
    t.row(&format!("{what}: 3-member templates → Work `Applied=True` p50 / p99"), fmt(lat(&s.applied, false), templates * 3.min(n)));
    let first = |v: Vec<f64>| v.into_iter().fold(f64::INFINITY, f64::min);
    t.row(&format!("{what}: Duplicated template → Work written on each member p50 / p99"), format!("{} (the first at {:.0} ms)", fmt(lat(&s.written, true), n), first(lat(&s.written, true))));
    t.row(&format!("{what}: Duplicated template → Work `Applied=True` on each member p50 / p99"), fmt(lat(&s.applied, true), n));
    // the agents' share: from a Work first seen to its `Applied=True`
    let agent: Vec<f64> = s.applied.iter().filter(|((tpl, _), _)| tpl == "everywhere").filter_map(|(k, at)| Some(at.saturating_duration_since(*s.written.get(k)?).as_secs_f64() * 1e3)).collect();
    t.row(&format!("{what}: Duplicated template, Work written → `Applied=True` (the agent's part) p50 / p99"), fmt(agent, n));
    let works = want as f64;
    let (cs, ce) = (cpu_server1.saturating_sub(cpu_server0).as_secs_f64(), cpu_etcd1.saturating_sub(cpu_etcd0).as_secs_f64());
    let writes = match (rev0, rev1) {
        (Ok(a), Ok(b)) => format!("{:.1} etcd writes per Work ({} in all; heartbeats and Cluster status included)", (b - a) as f64 / works, b - a),
        (Err(e), _) | (_, Err(e)) => format!("etcd writes unknown: {e}"),
    };
    t.row(
        &format!("{what}: server / etcd CPU per Work, over the phase ({phase:.1} s, until 2 s after the last Work applied)"),
        format!("{:.2} / {:.2} ms ({:.0}% / {:.0}% of a core); {writes}", cs * 1e3 / works, ce * 1e3 / works, cs * 100.0 / phase, ce * 100.0 / phase),
    );
    // the members' side on the same cores: the in-process agents (this process, with the
    // bench's own watch) and fedsim; all four together bound how soon a burst of Works can
    // be applied on this machine
    let cm = cpu_members1.saturating_sub(cpu_members0).as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    t.row(
        &format!("{what}: agents + fedsim CPU per Work, over the phase; all four per Work, and {} Works at that cost on {cores:.0} cores", n),
        format!(
            "{:.2} ms ({:.0}% of a core); {:.2} ms in all → {:.0} ms for {n} Works",
            cm * 1e3 / works,
            cm * 100.0 / phase,
            (cs + ce + cm) * 1e3 / works,
            (cs + ce + cm) * 1e3 / works * n as f64 / cores
        ),
    );
    if s.applied.len() < want {
        t.fail(&format!("{what}: incomplete"), format!("{} of {want} Works Applied within {timeout:?} of the last create", s.applied.len()));
    }
}
