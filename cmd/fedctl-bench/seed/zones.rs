//! The seed's view: one `fedctl cache --zone` process per zone (each following only its
//! zone's members, holding all their objects), their memory and time to a consistent view,
//! whole-view and one-zone LISTs through the server's MUX, and watch ingest under churn with
//! many global watchers.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

use super::super::agents::MemberInfo;
use super::super::median_p99;
use super::super::procs::{client_from_kubeconfig, cpu_time, fedsim_admin, CacheProcess, ServerProcess};
use super::super::restart::{list_all, with_peak_rss};
use super::sim::Members;
use super::Table;
use fedctl::cache::rv::GlobalRv;

const V: &str = "/apis/search.fedctl.io/v1alpha1";

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The cache process's `/shards` and `/metrics`, read once it is consistent.
struct CacheView {
    /// Objects held by kind.
    objects: BTreeMap<String, u64>,
    /// Bytes held by kind (`fedctl_cache_bytes`).
    bytes: BTreeMap<String, u64>,
}

/// Whether `/shards` says the process is consistent with its zone: initialized, synced, and
/// its pods position holds all `members` of the zone.
fn consistent(status: &Value, members: usize) -> bool {
    let holds = status["resourceVersions"]["pods"].as_str().and_then(|rv| GlobalRv::decode(rv).ok()).is_some_and(|g| g.0.len() >= members);
    status["synced"] == true && status["initialized"] == true && holds
}

/// Sums `name{…resource="R"…} value` lines of a Prometheus text body by resource.
fn by_resource(metrics: &str, name: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for l in metrics.lines().filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{')) {
        let Some(r) = l.split("resource=\"").nth(1).and_then(|r| r.split('"').next()) else { continue };
        let v: f64 = l.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        *out.entry(r.to_string()).or_insert(0) += v as u64;
    }
    out
}

async fn read_view(http: &reqwest::Client, url: &str) -> Result<CacheView, String> {
    let st: Value = http.get(format!("{url}{V}/shards")).send().await.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
    let mut objects = BTreeMap::new();
    for s in st["shards"].as_array().into_iter().flatten() {
        for (k, v) in s["kinds"].as_object().into_iter().flatten() {
            *objects.entry(k.clone()).or_insert(0) += v["objects"].as_u64().unwrap_or(0);
        }
    }
    let m = http.get(format!("{url}/metrics")).send().await.map_err(|e| e.to_string())?.text().await.map_err(|e| e.to_string())?;
    Ok(CacheView { objects, bytes: by_resource(&m, "fedctl_cache_bytes") })
}

/// How the view is split over the cache processes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `fedctl cache --zone z<i+1>`: each process follows its zone's members only.
    Zones,
    /// `fedctl cache --shards i --shard-count <zones>`: each process lists every member and
    /// keeps one shard (namespaces hashed over the processes).
    Shards,
}

/// Starts one cache process per zone on `ports` (`fedctl cache --zone z<i+1>`, or with
/// [`Layout::Shards`] `--shards i --shard-count zones`) and adds their rows: RSS, objects and
/// bytes per object by kind, start → consistent and the CPU it took. Returns the running
/// processes (those that started). Rows of a process that fails say why.
pub async fn caches(t: &mut Table, server: &ServerProcess, etcd: &str, ports: &[u16], members: &Members, layout: Layout, timeout: Duration) -> Vec<CacheProcess> {
    let fedctl = super::super::procs::sibling_binary("fedctl");
    let n = ports.len();
    let Ok((http, _)) = client_from_kubeconfig(&server.kubeconfig()) else {
        t.fail("zone caches", "admin kubeconfig unreadable");
        return Vec::new();
    };
    let t0 = Instant::now();
    let mut procs = Vec::new();
    let zone_of = |i: usize| format!("z{}", i + 1);
    // the members a process follows
    let in_zone = |i: usize| match layout {
        Layout::Zones => members.list.iter().filter(|m| m.zone == zone_of(i)).count(),
        Layout::Shards => members.list.len(),
    };
    let holding = |i: usize| match layout {
        Layout::Zones => ["--zone".to_string(), zone_of(i)],
        Layout::Shards => ["--shards".to_string(), i.to_string()],
    };
    for (i, port) in ports.iter().enumerate() {
        let [flag, value] = holding(i);
        match CacheProcess::start(&fedctl, etcd, &server.data_dir, *port, &[&flag, &value], n, &[]) {
            Ok(c) => procs.push((i, c)),
            Err(e) => t.fail(&format!("zone cache {}", i + 1), format!("start: {e}")),
        }
    }
    // poll every process's /shards until consistent
    let mut done: HashMap<usize, Duration> = HashMap::new();
    // CPU time each process had used when it became consistent
    let mut cpu: HashMap<usize, Duration> = HashMap::new();
    let mut peak: HashMap<usize, u64> = HashMap::new();
    while done.len() < procs.len() && t0.elapsed() < timeout {
        for (i, c) in &procs {
            peak.entry(*i).and_modify(|p| *p = (*p).max(c.rss_kib().unwrap_or(0))).or_insert(c.rss_kib().unwrap_or(0));
            if done.contains_key(i) {
                continue;
            }
            let st = match http.get(format!("{}{V}/shards", c.url())).timeout(Duration::from_secs(10)).send().await {
                Ok(r) if r.status().is_success() => r.json::<Value>().await.unwrap_or(Value::Null),
                _ => continue,
            };
            if consistent(&st, in_zone(*i)) {
                done.insert(*i, t0.elapsed());
                if let Some(t) = c.pid().and_then(super::super::procs::cpu_time) {
                    cpu.insert(*i, t);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut all_objects = 0u64;
    for (i, c) in &procs {
        let [flag, value] = holding(*i);
        let what = format!("zone cache {} (`fedctl cache {flag} {value}`, follows {} members)", i + 1, in_zone(*i));
        let Some(at) = done.get(i) else {
            t.fail(&what, format!("not consistent within {timeout:?}; log: {}", c.log_tail(5).replace('\n', " / ")));
            continue;
        };
        let rss = c.rss_kib().unwrap_or(0);
        match read_view(&http, &c.url()).await {
            Ok(v) => {
                let total: u64 = v.objects.values().sum();
                all_objects += total;
                let per_kind: Vec<String> = v.objects.iter().filter(|(_, o)| **o > 0).map(|(k, o)| format!("{k} {o} × {:.0} B", *v.bytes.get(k).unwrap_or(&0) as f64 / *o as f64)).collect();
                let spent = cpu.get(i).map_or(0.0, Duration::as_secs_f64);
                t.row(
                    &format!("{what}: start → consistent view"),
                    format!("{:.1} s; the process's CPU meanwhile {spent:.1} s = {:.1} µs per object held", at.as_secs_f64(), spent * 1e6 / total.max(1) as f64),
                );
                t.row(&format!("{what}: RSS consistent / peak while listing"), format!("{:.0} MiB / {:.0} MiB ({total} objects held)", mib(rss), mib(peak.get(i).copied().unwrap_or(rss))));
                t.row(&format!("{what}: objects × stored bytes per object, by kind"), per_kind.join("; "));
            }
            Err(e) => t.fail(&what, format!("/shards or /metrics: {e}")),
        }
    }
    if !procs.is_empty() {
        t.row("objects held over all zone caches", all_objects.to_string());
    }
    procs.into_iter().map(|(_, c)| c).collect()
}

/// CPU seconds used so far by the server, by the cache processes together and by this
/// process (the bench's client), from `/proc` (0 for one that is unreadable).
fn cpu_now(server: &ServerProcess, caches: &[CacheProcess]) -> [f64; 3] {
    let secs = |pid: Option<u32>| pid.and_then(cpu_time).map_or(0.0, |d| d.as_secs_f64());
    [secs(Some(server.pid())), caches.iter().map(|c| secs(c.pid())).sum(), secs(Some(std::process::id()))]
}

/// Whole-view LIST of pods and one zone's pods (its members one after the other), through
/// the server's MUX: time, items, server RSS growth, and the CPU seconds the server, the
/// cache processes and the bench's client used meanwhile.
pub async fn lists(t: &mut Table, server: &ServerProcess, caches: &[CacheProcess], members: &Members) {
    let Ok((http, base)) = client_from_kubeconfig(&server.kubeconfig()) else { return t.fail("LIST through the MUX", "admin kubeconfig unreadable") };
    let want: usize = members.list.iter().map(|m| m.pods).sum();
    let cpu0 = cpu_now(server, caches);
    let (r, rss) = with_peak_rss(Some(server.pid()), list_all(&http, &format!("{base}{V}/global/api/v1/pods"))).await;
    let cpu = cpu_now(server, caches).iter().zip(cpu0).map(|(a, b)| a - b).collect::<Vec<_>>();
    let what = "whole-view LIST of pods through the MUX";
    match r {
        Ok(l) if l.items == want => t.row(
            what,
            format!(
                "{} pods, {:.0} MiB in {:.1} s ({:.0} pods/s); server RSS {:.0} → peak {:.0} MiB (+{:.0} MiB); CPU server {:.1} s, caches {:.1} s, client {:.1} s",
                l.items,
                l.bytes as f64 / 1048576.0,
                l.secs,
                l.items as f64 / l.secs.max(1e-9),
                mib(rss.0),
                mib(rss.1),
                mib(rss.1.saturating_sub(rss.0)),
                cpu[0],
                cpu[1],
                cpu[2]
            ),
        ),
        Ok(l) => t.fail(what, format!("{} pods listed, the members hold {want}", l.items)),
        Err(e) => t.fail(what, e),
    }
    let zone = members.list.first().map(|m| m.zone.clone()).unwrap_or_default();
    let in_zone: Vec<&MemberInfo> = members.list.iter().filter(|m| m.zone == zone).collect();
    let want: usize = in_zone.iter().map(|m| m.pods).sum();
    let what = format!("one-zone LIST of pods through the MUX (zone {zone}: {} members' `clusters/<name>` LISTs in turn)", in_zone.len());
    let (r, rss) = with_peak_rss(Some(server.pid()), async {
        let t0 = Instant::now();
        let (mut items, mut bytes) = (0, 0);
        for m in &in_zone {
            let l = list_all(&http, &format!("{base}{V}/clusters/{}/api/v1/pods", m.name)).await?;
            items += l.items;
            bytes += l.bytes;
        }
        Ok::<_, String>((items, bytes, t0.elapsed().as_secs_f64()))
    })
    .await;
    match r {
        Ok((items, bytes, secs)) if items == want => t.row(
            &what,
            format!(
                "{items} pods, {:.0} MiB in {secs:.1} s ({:.0} pods/s); server RSS {:.0} → peak {:.0} MiB (+{:.0} MiB)",
                bytes as f64 / 1048576.0,
                items as f64 / secs.max(1e-9),
                mib(rss.0),
                mib(rss.1),
                mib(rss.1.saturating_sub(rss.0))
            ),
        ),
        Ok((items, _, _)) => t.fail(&what, format!("{items} pods listed, the zone's members hold {want}")),
        Err(e) => t.fail(&what, e),
    }
}

/// Identity of a pod event across the member and the view: (cluster, namespace, name, member
/// resourceVersion).
type EventKey = (String, String, String, String);

fn key_of(cluster: &str, obj: &Value, member_rv: Option<&str>) -> Option<EventKey> {
    let md = &obj["metadata"];
    let rv = member_rv.or_else(|| md["resourceVersion"].as_str())?;
    Some((cluster.to_string(), md["namespace"].as_str()?.to_string(), md["name"].as_str()?.to_string(), rv.to_string()))
}

/// Opens a watch of `url` (a pods list URL) from a fresh LIST's resourceVersion.
async fn open_watch(http: &reqwest::Client, url: &str) -> Result<reqwest::Response, String> {
    let v: Value = http.get(format!("{url}?limit=1")).send().await.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
    let rv = v["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    let r = http.get(format!("{url}?watch=1&resourceVersion={rv}&allowWatchBookmarks=false&timeoutSeconds=1800")).send().await.map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!("watch {url}: {}", r.status()));
    }
    Ok(r)
}

/// Sum of the members' revisions (`/fedsim/status`; 0 for one that does not answer).
async fn revision_sum(ms: &[MemberInfo]) -> u64 {
    let mut sum = 0;
    for m in ms {
        sum += fedsim_admin(&m.kubeconfig, Method::GET, "/fedsim/status").await.ok().and_then(|v| v["revision"].as_u64()).unwrap_or(0);
    }
    sum
}

/// Watch ingest: `watchers` global-view pod watches through the server while the members
/// churn `churn` events/s in all for `secs`; events/s delivered and the p99 latency from a
/// member's own watch (on up to 4 members, one per zone) to a global watcher.
pub async fn watch(t: &mut Table, server: &ServerProcess, members: &Members, watchers: usize, churn: f64, secs: u64) {
    let what = format!("watch ingest: {watchers} global-view pod watchers, members churning {churn:.0} events/s for {secs} s");
    let Ok((http, base)) = client_from_kubeconfig(&server.kubeconfig()) else { return t.fail(&what, "admin kubeconfig unreadable") };
    // the members watched directly: the first of each zone
    let mut sampled: Vec<&MemberInfo> = Vec::new();
    for m in &members.list {
        if !sampled.iter().any(|s| s.zone == m.zone) && sampled.len() < 4 {
            sampled.push(m);
        }
    }
    let at_member: Arc<Mutex<HashMap<EventKey, Instant>>> = Arc::default();
    let at_view: Arc<Mutex<HashMap<EventKey, Instant>>> = Arc::default();
    let mut tasks = Vec::new();
    for m in &sampled {
        let Ok((mhttp, mbase)) = client_from_kubeconfig(&m.kubeconfig) else { continue };
        let resp = match open_watch(&mhttp, &format!("{mbase}/api/v1/pods")).await {
            Ok(r) => r,
            Err(e) => return t.fail(&what, format!("member watch {}: {e}", m.name)),
        };
        let (seen, name) = (at_member.clone(), m.name.clone());
        tasks.push(tokio::spawn(super::super::read_watch_events(resp, move |ev, at| {
            if let Some(k) = key_of(&name, &ev["object"], None) {
                seen.lock().unwrap_or_else(|e| e.into_inner()).entry(k).or_insert(at);
            }
            false
        })));
    }
    let lines = Arc::new(AtomicUsize::new(0));
    let url = format!("{base}{V}/global/api/v1/pods");
    for w in 0..watchers {
        let resp = match open_watch(&http, &url).await {
            Ok(r) => r,
            Err(e) => {
                for h in &tasks {
                    h.abort();
                }
                return t.fail(&what, format!("global watcher {w}: {e}"));
            }
        };
        let lines = lines.clone();
        if w < 2 {
            // two watchers decode their events for the latency; the rest only count them
            let seen = at_view.clone();
            tasks.push(tokio::spawn(super::super::read_watch_events(resp, move |ev, at| {
                lines.fetch_add(1, Ordering::Relaxed);
                let o = &ev["object"];
                let ann = &o["metadata"]["annotations"];
                if let (Some(c), Some(rv)) = (ann["fedctl.io/cluster"].as_str(), ann["fedctl.io/member-resource-version"].as_str()) {
                    if let Some(k) = key_of(c, o, Some(rv)) {
                        seen.lock().unwrap_or_else(|e| e.into_inner()).entry(k).or_insert(at);
                    }
                }
                false
            })));
        } else {
            tasks.push(tokio::spawn(async move {
                use futures::StreamExt;
                let mut s = resp.bytes_stream();
                while let Some(Ok(chunk)) = s.next().await {
                    lines.fetch_add(chunk.iter().filter(|b| **b == b'\n').count(), Ordering::Relaxed);
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // the server's merged watches over the cache processes: one shared merge for them all
    match http.get(format!("{base}{V}/shards")).send().await {
        Ok(r) => match r.json::<Value>().await {
            Ok(st) => t.row(&format!("{what}: the server's shared watches / their watchers"), format!("{} / {}", st["watches"]["shared"], st["watches"]["watchers"])),
            Err(e) => t.fail(&format!("{what}: the server's shared watches"), e.to_string()),
        },
        Err(e) => t.fail(&format!("{what}: the server's shared watches"), e.to_string()),
    }
    let rev0 = revision_sum(&members.list).await;
    let l0 = lines.load(Ordering::Relaxed);
    let started = Instant::now();
    if let Err(e) = members.set_churn(churn / members.list.len().max(1) as f64).await {
        for h in &tasks {
            h.abort();
        }
        return t.fail(&what, format!("churn: {e}"));
    }
    let cpu0 = super::super::procs::cpu_time(server.pid()).unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let _ = members.set_churn(0.0).await;
    let el = started.elapsed().as_secs_f64();
    let cpu = super::super::procs::cpu_time(server.pid()).unwrap_or_default().saturating_sub(cpu0);
    let rev1 = revision_sum(&members.list).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let delivered = lines.load(Ordering::Relaxed) - l0;
    for h in &tasks {
        h.abort();
    }
    let produced = rev1.saturating_sub(rev0);
    let (m, v) = (at_member.lock().unwrap_or_else(|e| e.into_inner()), at_view.lock().unwrap_or_else(|e| e.into_inner()));
    let lat: Vec<f64> = v.iter().filter_map(|(k, at)| Some(at.saturating_duration_since(*m.get(k)?).as_secs_f64() * 1e3)).collect();
    let matched = lat.len();
    let (p50, p99) = median_p99(lat);
    t.row(&format!("{what}: member changes"), format!("{produced} in {el:.1} s = {:.0}/s", produced as f64 / el));
    t.row(
        &format!("{what}: events delivered"),
        format!(
            "{delivered} = {:.0}/s in all, {:.0}/s per watcher; server CPU {:.1} s ({:.0}% of a core)",
            delivered as f64 / el,
            delivered as f64 / el / watchers.max(1) as f64,
            cpu.as_secs_f64(),
            cpu.as_secs_f64() * 100.0 / el
        ),
    );
    if matched == 0 {
        t.fail(&format!("{what}: member watch → global watcher latency"), "no event seen on both sides");
    } else {
        t.row(&format!("{what}: member watch → global watcher latency p50 / p99"), format!("{p50:.0} ms / {p99:.0} ms ({matched} events of {} members)", sampled.len()));
    }
}
