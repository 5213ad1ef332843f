//! Cache memory and LIST benchmark: N unique generated pods held by fedctl's cache store, by a
//! kube-rs `reflector::Store<Pod>` and as raw JSON, each measured in its own child process.
//!
//! Each representation runs in a fresh child (`fedctl-bench cache --child <rep>`), so its RSS
//! growth is its own: the child builds the pod generators, reads its RSS, streams every pod
//! into the representation (pods are generated one at a time and dropped once inserted), and
//! reads its RSS again; memory per pod = growth / pods. The fedctl child then streams a LIST
//! of every pod into a byte sink (time, bytes, extra peak RSS, read from `VmHWM` after resetting it
//! through `/proc/self/clear_refs`), pages through it with `limit` (per-page latency), and
//! checks a sample of objects against the generator's JSON.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::median_p99;
use fedctl::cache::shard::ShardMap;
use fedctl::cache::store::{Key, KindStore, Obj, Scope};
use fedctl::fedsim::generate::{GenConfig, PodGenerator};

/// Flags of `fedctl-bench cache`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Pods in all (unique: name, uid, IPs, node, timestamps), split over `--members`.
    #[arg(long, default_value_t = 1_000_000)]
    pub pods: usize,
    /// Member clusters the pods come from (one generator each, different seeds).
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Pods per node (nodes = pods / members / this).
    #[arg(long, default_value_t = 40)]
    pub pods_per_node: usize,
    /// Namespaces per member (Zipf-skewed sizes, exponent 1.1 as fedsim's default).
    #[arg(long, default_value_t = 200)]
    pub namespaces: usize,
    /// Representations to measure, in this order: `fedctl`, `kube-rs`, `json`, `watch` (the
    /// watch fan-out, member events ingested as the cache's ingest does), `watch-value` (the
    /// same with each event decoded into a `serde_json::Value` first, the earlier ingest).
    #[arg(long, value_delimiter = ',', default_value = "fedctl,kube-rs,json")]
    pub reps: Vec<String>,
    /// Cache shards of the fedctl store (namespaces balanced over them after the load).
    #[arg(long, default_value_t = 4)]
    pub shards: usize,
    /// Page size of the paged LIST.
    #[arg(long, default_value_t = 500)]
    pub limit: usize,
    /// Watch phase (`--reps watch`): concurrent watchers, each with its own label selector.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Watch phase: member events ingested (modifications of cached pods).
    #[arg(long, default_value_t = 200_000)]
    pub events: usize,
    /// Internal: run one representation and print its figures as one JSON line.
    #[arg(long, hide = true)]
    pub child: Option<String>,
}

/// Runs the benchmark (parent: spawns one child per representation and prints a table).
pub async fn run(a: Args) -> Result<(), String> {
    if let Some(rep) = a.child.clone() {
        // on a thread of its own: the watch phase builds its own runtime
        let out = std::thread::scope(|s| s.spawn(|| child(&a, &rep)).join()).map_err(|_| "child panicked".to_string())??;
        println!("{out}");
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rows: Vec<(String, Value)> = Vec::new();
    for rep in &a.reps {
        eprintln!("measuring {rep} with {} pods …", a.pods);
        let out = std::process::Command::new(&exe)
            .args(["cache", "--pods", &a.pods.to_string(), "--members", &a.members.to_string()])
            .args(["--pods-per-node", &a.pods_per_node.to_string(), "--namespaces", &a.namespaces.to_string()])
            .args(["--limit", &a.limit.to_string(), "--shards", &a.shards.to_string(), "--child", rep])
            .args(["--watchers", &a.watchers.to_string(), "--events", &a.events.to_string()])
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| format!("spawn child: {e}"))?;
        if !out.status.success() {
            return Err(format!("child {rep} failed: {}", out.status));
        }
        let line = String::from_utf8_lossy(&out.stdout);
        let v: Value = serde_json::from_str(line.trim()).map_err(|e| format!("child {rep} printed {line:?}: {e}"))?;
        rows.push((rep.clone(), v));
    }
    println!("pods: {} over {} members", a.pods, a.members);
    println!("| representation | RSS growth | bytes/pod | vs raw JSON |");
    println!("|---|---:|---:|---:|");
    let json_per_pod = rows.iter().find_map(|(_, v)| v["json_bytes"].as_f64()).unwrap_or(0.0) / a.pods as f64;
    for (rep, v) in &rows {
        let per = v["rss_growth_bytes"].as_f64().unwrap_or(0.0) / a.pods as f64;
        let ratio = if json_per_pod > 0.0 { format!("{:.2}×", per / json_per_pod) } else { "-".into() };
        println!("| {rep} | {:.1} MiB | {per:.0} | {ratio} |", v["rss_growth_bytes"].as_f64().unwrap_or(0.0) / 1048576.0);
    }
    println!("raw JSON (compact, managedFields included): {json_per_pod:.0} bytes/pod");
    for (rep, v) in &rows {
        for k in ["watch", "load_seconds", "rebalance_seconds", "largest_shard_vs_avg", "shard_objects_balanced", "list"] {
            if let Some(x) = v.get(k) {
                println!("{rep} {k}: {x}");
            }
        }
    }
    Ok(())
}

/// The pod generators of the run: one per member, pods numbered across them.
fn generators(a: &Args) -> Vec<(Arc<str>, PodGenerator, usize)> {
    let per = a.pods.div_ceil(a.members.max(1));
    let mut left = a.pods;
    (0..a.members.max(1))
        .map(|m| {
            let n = per.min(left);
            left -= n;
            let cfg = GenConfig {
                cluster: format!("member-{m}"),
                seed: 1000 + m as u64,
                nodes: n.div_ceil(a.pods_per_node.max(1)).max(1),
                pods_per_node: a.pods_per_node.max(1),
                namespaces: a.namespaces,
                ..GenConfig::default()
            };
            (Arc::from(format!("member-{m}").as_str()), PodGenerator::new(&cfg), n)
        })
        .collect()
}

/// Pod `i` of a generator with a resourceVersion (as a member's LIST would carry).
fn pod(g: &PodGenerator, i: usize) -> Value {
    let mut v = g.initial_pod(i);
    v["metadata"]["resourceVersion"] = json!((i + 2).to_string());
    v
}

fn self_status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).unwrap_or(0) * 1024
}

/// Resets `VmHWM` to the current RSS (Linux `clear_refs` value 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn child(a: &Args, rep: &str) -> Result<Value, String> {
    let gens = generators(a);
    let rss0 = self_status("VmRSS:");
    let t0 = Instant::now();
    let mut out = json!({"rep": rep});
    match rep {
        "json" => {
            let mut held: Vec<Box<[u8]>> = Vec::with_capacity(a.pods);
            let mut bytes = 0u64;
            for (_, g, n) in &gens {
                for i in 0..*n {
                    let b = serde_json::to_vec(&pod(g, i)).map_err(|e| e.to_string())?;
                    bytes += b.len() as u64;
                    held.push(b.into_boxed_slice());
                }
            }
            out["json_bytes"] = json!(bytes);
            out["rss_growth_bytes"] = json!(self_status("VmRSS:").saturating_sub(rss0));
            std::hint::black_box(&held);
        }
        "kube-rs" => {
            use k8s_openapi::api::core::v1::Pod;
            use kube::runtime::{reflector::store::Writer, watcher::Event};
            let mut w: Writer<Pod> = Writer::default();
            let store = w.as_reader();
            for (_, g, n) in &gens {
                for i in 0..*n {
                    let p: Pod = serde_json::from_value(pod(g, i)).map_err(|e| e.to_string())?;
                    w.apply_watcher_event(&Event::Apply(p));
                }
            }
            out["objects"] = json!(store.state().len());
            out["rss_growth_bytes"] = json!(self_status("VmRSS:").saturating_sub(rss0));
        }
        "fedctl" => {
            let info = fedctl::api::registry::Registry::member().lookup("", "v1", "pods").ok_or("no pods kind")?;
            let store = KindStore::sharded(info, 102_400, Duration::from_secs(75), a.shards);
            for (cluster, g, n) in &gens {
                let mut batch = Vec::with_capacity(*n);
                for i in 0..*n {
                    batch.push(Obj::from_member(cluster, pod(g, i)).map_err(|e| e.to_string())?);
                }
                store.sync(1, cluster, (*n + 2) as u64, batch);
            }
            let load = t0.elapsed();
            let before = store.shard_stats().iter().map(|s| s.objects).collect::<Vec<_>>();
            let t = Instant::now();
            store.apply_map(ShardMap::balance(&store.namespace_counts(), a.shards as u32, 1));
            out["rebalance_seconds"] = json!(t.elapsed().as_secs_f64());
            let after = store.shard_stats().iter().map(|s| s.objects).collect::<Vec<_>>();
            let skew = |v: &[usize]| {
                let avg = v.iter().sum::<usize>() as f64 / v.len().max(1) as f64;
                v.iter().copied().max().unwrap_or(0) as f64 / avg.max(1.0)
            };
            out["shard_objects_hashed"] = json!(before);
            out["shard_objects_balanced"] = json!(after);
            out["largest_shard_vs_avg"] = json!({"hashed": skew(&before), "balanced": skew(&after)});
            out["objects"] = json!(store.len());
            out["rss_growth_bytes"] = json!(self_status("VmRSS:").saturating_sub(rss0));
            out["load_seconds"] = json!(load.as_secs_f64());
            out["list"] = list_figures(a, &store, &gens)?;
        }
        "watch" => out["watch"] = watch_figures(a, &gens, false)?,
        "watch-value" => out["watch"] = watch_figures(a, &gens, true)?,
        other => return Err(format!("unknown representation {other:?} (fedctl, kube-rs, json, watch, watch-value)")),
    }
    Ok(out)
}

/// Full LIST streamed into a sink, paged LIST latencies, and a sample compared to the source.
fn list_figures(a: &Args, store: &KindStore, gens: &[(Arc<str>, PodGenerator, usize)]) -> Result<Value, String> {
    let before = self_status("VmRSS:");
    reset_peak();
    let t = Instant::now();
    let mut sink = std::io::sink();
    let mut bytes = 0usize;
    let mut buf = Vec::with_capacity(1 << 20);
    // streamed as the global view serves a LIST: chunks of one snapshot, written as they come
    let at = store.current();
    let grv = at.encode();
    let all = |_: &Key, _: &Obj| true;
    let mut count = 0usize;
    let mut after: Option<Key> = None;
    loop {
        let chunk = store.list_at(&at, Scope::default(), after.as_ref(), &all, 1000).map_err(|e| e.to_string())?;
        for (_, o) in &chunk {
            o.write_with_rv(&grv, &mut buf);
            buf.push(b',');
        }
        count += chunk.len();
        if buf.len() >= 1 << 20 {
            bytes += buf.len();
            sink.write_all(&buf).map_err(|e| e.to_string())?;
            buf.clear();
        }
        match chunk.last() {
            Some((k, _)) if chunk.len() == 1000 => after = Some(k.clone()),
            _ => break,
        }
    }
    bytes += buf.len();
    let full = t.elapsed();
    let peak_extra = self_status("VmHWM:").saturating_sub(before);
    // where the bytes are: compressed bodies, selector attributes, keys
    let (mut body, mut attrs, mut keys) = (0usize, 0usize, 0usize);
    let mut after: Option<Key> = None;
    loop {
        let chunk = store.list_at(&at, Scope::default(), after.as_ref(), &all, 10_000).map_err(|e| e.to_string())?;
        for (k, o) in &chunk {
            body += o.stored_len();
            attrs += o.attrs_len();
            keys += k.0.len() + k.1.len();
        }
        match chunk.last() {
            Some((k, _)) if chunk.len() == 10_000 => after = Some(k.clone()),
            _ => break,
        }
    }

    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let t = Instant::now();
        let page = store.list_at(&at, Scope::default(), after.as_ref(), &all, a.limit).map_err(|e| e.to_string())?;
        buf.clear();
        for (_, o) in &page {
            o.write_with_rv(&grv, &mut buf);
        }
        pages.push(t.elapsed().as_secs_f64() * 1000.0);
        match page.last() {
            Some((k, _)) if page.len() == a.limit => after = Some(k.clone()),
            _ => break,
        }
    }
    let (p50, p99) = median_p99(pages.clone());

    // a sample decoded from the store equals the generator's pod, apart from the cluster
    // annotations the cache adds
    let mut checked = 0;
    for (cluster, g, n) in gens {
        for i in (0..*n).step_by((*n / 50).max(1)) {
            let want = pod(g, i);
            let ns = want["metadata"]["namespace"].as_str().unwrap_or("");
            let name = want["metadata"]["name"].as_str().unwrap_or("");
            let got = store.get(ns, name).into_iter().find(|(k, _)| k.2 == *cluster).ok_or(format!("{ns}/{name} missing"))?;
            let mut got = got.1.decode(&(i + 2).to_string());
            if let Some(ann) = got["metadata"]["annotations"].as_object_mut() {
                ann.remove(fedctl::cache::CLUSTER_ANNOTATION);
                ann.remove(fedctl::cache::store::MEMBER_RV_ANNOTATION);
                if ann.is_empty() && want["metadata"].get("annotations").is_none() {
                    got["metadata"].as_object_mut().map(|m| m.remove("annotations"));
                }
            }
            if got != want {
                return Err(format!("{cluster} {ns}/{name}: cached object differs from the member's"));
            }
            checked += 1;
        }
    }
    Ok(json!({
        "objects": count,
        "body_bytes_per_object": body as f64 / count.max(1) as f64,
        "attrs_bytes_per_object": attrs as f64 / count.max(1) as f64,
        "key_string_bytes_per_object": keys as f64 / count.max(1) as f64,
        "seconds": full.as_secs_f64(),
        "mib": bytes as f64 / 1048576.0,
        "extra_peak_mib": peak_extra as f64 / 1048576.0,
        "page_limit": a.limit,
        "pages_timed": pages.len(),
        "page_p50_ms": p50,
        "page_p99_ms": p99,
        "sample_checked": checked,
    }))
}

/// Watch fan-out: the pods loaded into a sharded store, `--watchers` watchers each filtering
/// with its own label selector (the distinct labels of the pods, round robin; each watcher is
/// registered under its label, as the global view registers a selector's first equality), then
/// `--events` member modifications ingested as fast as one thread can (one change of each of
/// 20,000 pods in a shuffled order, repeated): each event is the watch line a member sends
/// (`{"type":"MODIFIED","object":…}`, its resourceVersion written into prepared bytes) handed
/// to [`fedctl::cache::ingest::watch_line`] (scan, encode, store hot, ring, broadcast; the
/// cooling thread compresses later), or with `decode_first` decoded into a `Value` and applied
/// through [`Obj::from_member`] (the earlier ingest).
/// Figures: ingest events/s, process CPU per event (during the ingest, and once the hot
/// objects are compressed), events delivered, event-to-watcher latency (from recording in
/// the store to a watcher holding the encoded line).
fn watch_figures(a: &Args, gens: &[(Arc<str>, PodGenerator, usize)], decode_first: bool) -> Result<Value, String> {
    use fedctl::api::selector::LabelSelector;
    use fedctl::cache::store::EventType;
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicU64, Ordering};

    let info = fedctl::api::registry::Registry::member().lookup("", "v1", "pods").ok_or("no pods kind")?;
    let store = Arc::new(KindStore::sharded(info.clone(), 102_400, Duration::from_secs(75), a.shards));
    let mut pods: Vec<(Arc<str>, Value)> = Vec::new();
    let mut labels: BTreeSet<(String, String)> = BTreeSet::new();
    for (cluster, g, n) in gens {
        let mut batch = Vec::with_capacity(*n);
        for i in 0..*n {
            let p = pod(g, i);
            if let Some(l) = p["metadata"]["labels"].as_object() {
                for (k, v) in l {
                    if labels.len() < 100_000 {
                        labels.insert((k.clone(), v.as_str().unwrap_or("").to_string()));
                    }
                }
            }
            if pods.len() < 20_000 {
                pods.push((cluster.clone(), p.clone()));
            }
            batch.push(Obj::from_member(cluster, p).map_err(|e| e.to_string())?);
        }
        store.sync(1, cluster, (*n + 2) as u64, batch);
    }
    let labels: Vec<(String, String)> = labels.into_iter().collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| e.to_string())?;
    let delivered = Arc::new(AtomicU64::new(0));
    let lagged = Arc::new(AtomicU64::new(0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..a.watchers {
        let (k, v) = &labels[w % labels.len().max(1)];
        let sel = LabelSelector::parse(&format!("{k}={v}")).map_err(|e| e.to_string())?;
        let fields = fedctl::api::selector::FieldSelector::default();
        let filter = fedctl::cache::store::WatchFilter { namespace: None, label: Some((k.clone(), v.clone())) };
        let sub = store.subscribe(Some(store.current()), &filter).map_err(|e| e.to_string())?;
        let (delivered, lagged, done) = (delivered.clone(), lagged.clone(), done.clone());
        tasks.push(rt.spawn(async move {
            let mut rx = sub.rx;
            let mut lat: Vec<f64> = Vec::new();
            loop {
                match rx.recv().await {
                    Some(e) => {
                        // as the global view's watchers do: ADDED, MODIFIED or DELETED
                        // for this selector, or nothing
                        let (before, now) = e.selects(&sel, &fields);
                        if before || now {
                            let line = e.line().clone();
                            std::hint::black_box(line);
                            delivered.fetch_add(1, Ordering::Relaxed);
                            if lat.len() < 20_000 {
                                lat.push(e.at.elapsed().as_secs_f64() * 1000.0);
                            }
                        }
                    }
                    None => {
                        if !done.load(Ordering::Relaxed) {
                            lagged.fetch_add(1, Ordering::Relaxed);
                        }
                        return lat;
                    }
                }
            }
        }));
    }
    // ingest: modifications of cached pods, member resourceVersions increasing
    let mut churn = PodGenerator::new(&GenConfig { nodes: 1, pods_per_node: 1, ..GenConfig::default() });
    // each changed pod as the member's watch line, split where its resourceVersion goes
    const MARK: &str = "@@resourceVersion@@";
    let mut changed: Vec<(Arc<str>, Vec<u8>, Vec<u8>)> = Vec::new();
    // 20,000 pods (more than the cache keeps checked values of), in a shuffled order, so that
    // consecutive events come from different owners as a member's status updates do
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by_key(|i| (*i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17));
    for (c, p) in order.iter().map(|i| &pods[*i]) {
        let mut p = churn.modify(p);
        p["metadata"]["resourceVersion"] = json!(MARK);
        let line = serde_json::to_string(&json!({"type": "MODIFIED", "object": p})).map_err(|e| e.to_string())?;
        let (pre, post) = line.split_once(MARK).ok_or("marker")?;
        changed.push((c.clone(), pre.as_bytes().to_vec(), post.as_bytes().to_vec()));
    }
    let (api_version, kind) = (info.api_version(), info.kind);
    let mut line: Vec<u8> = Vec::with_capacity(16 << 10);
    let cpu0 = super::procs::cpu_time(std::process::id());
    let threads0 = super::procs::thread_cpu_times();
    let t = Instant::now();
    let mut rv = 10_000_000u64;
    for i in 0..a.events {
        let (cluster, pre, post) = &changed[i % changed.len()];
        rv += 1;
        line.clear();
        line.extend_from_slice(pre);
        line.extend_from_slice(rv.to_string().as_bytes());
        line.extend_from_slice(post);
        if decode_first {
            let mut ev: Value = serde_json::from_slice(&line).map_err(|e| e.to_string())?;
            let mut obj = ev["object"].take();
            obj["apiVersion"] = json!(api_version);
            obj["kind"] = json!(kind);
            let (key, obj) = Obj::from_member(cluster, obj).map_err(|e| e.to_string())?;
            store.apply(1, EventType::Modified, key, obj);
        } else {
            fedctl::cache::ingest::watch_line(&store, 1, cluster, &line).map_err(|e| e.to_string())?;
        }
    }
    let ingest = t.elapsed();
    let cpu = super::procs::cpu_time(std::process::id()).zip(cpu0).map(|(b, a)| (b - a).as_secs_f64());
    let threads = super::procs::cpu_by_thread_name(&threads0, &super::procs::thread_cpu_times());
    // the deferred work: the hot objects still held are compressed by the cooling thread
    let cooled_in = Instant::now();
    while fedctl::cache::store::cool::hot_bytes() > 0 && cooled_in.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let cooled_in = cooled_in.elapsed();
    let cpu_all = super::procs::cpu_time(std::process::id()).zip(cpu0).map(|(b, a)| (b - a).as_secs_f64());
    let (cooled, gone) = fedctl::cache::store::cool::counts();
    // the watchers drain what is left, then the stores' senders are dropped to end them
    std::thread::sleep(Duration::from_secs(2));
    done.store(true, Ordering::Relaxed);
    drop(store);
    let mut lat = Vec::new();
    for t in tasks {
        if let Ok(l) = rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), t).await }) {
            lat.extend(l.unwrap_or_default());
        }
    }
    let (p50, p99) = median_p99(lat);
    // CPU of each role during the ingest, per event: this (the ingest) thread, the cache's
    // cooling thread, the runtime's workers (the watchers)
    let me = std::fs::read_to_string("/proc/thread-self/comm").map(|s| s.trim_end().to_string()).unwrap_or_default();
    let per_event = |name: &str| threads.get(name).map(|s| s * 1e6 / a.events as f64);
    let ingest_thread = per_event(&me);
    Ok(json!({
        "watchers": a.watchers,
        "distinct_selectors": labels.len().min(a.watchers),
        "events": a.events,
        "ingest_events_per_s": a.events as f64 / ingest.as_secs_f64(),
        "process_cpu_seconds": cpu,
        "cpu_us_per_event": cpu.map(|c| c * 1e6 / a.events as f64),
        "ingest_thread_cpu_us_per_event": ingest_thread,
        "ingest_events_per_thread_cpu_second": ingest_thread.map(|us| 1e6 / us),
        "cooling_thread_cpu_us_per_event": per_event("cache-cool"),
        "watcher_threads_cpu_us_per_event": per_event("tokio-rt-worker"),
        "cpu_us_per_event_by_thread": threads.iter().map(|(n, s)| (n.clone(), json!(s * 1e6 / a.events as f64))).collect::<serde_json::Map<_, _>>(),
        "events_per_cpu_second": cpu.map(|c| a.events as f64 / c),
        "cooling_after_ingest_s": cooled_in.as_secs_f64(),
        "cpu_us_per_event_with_cooling": cpu_all.map(|c| c * 1e6 / a.events as f64),
        "objects_cooled": cooled,
        "objects_dropped_hot": gone,
        "ingest": if decode_first { "decode to Value, Obj::from_member" } else { "ingest::watch_line (scanned)" },
        "delivered": delivered.load(Ordering::Relaxed),
        "watchers_lagged": lagged.load(Ordering::Relaxed),
        "latency_p50_ms": p50,
        "latency_p99_ms": p99,
    }))
}
