//! Restart benchmark: a `fedctl cache` process holding every shard of the global view is
//! killed (SIGKILL) with N pods across fedsim members and restarted; time until the view
//! serves a LIST consistent with the members again, the members' initial LIST ingest per
//! member, the restarted process's RSS, and whole-view LISTs streamed to a client.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::Method;
use serde_json::Value;

use super::procs::{client_from_kubeconfig, cpu_time, free_port, register_member, sibling_binary, wait_ready, CacheProcess, EtcdProcess, FedsimProcess, ServerProcess};
use fedctl::cache::rv::GlobalRv;

const V: &str = "/apis/search.fedctl.io/v1alpha1";
/// Pods per simulated node.
const PODS_PER_NODE: usize = 50;

/// Flags of `fedctl-bench restart`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Pods over all members (rounded up to whole nodes of 50 pods per member).
    #[arg(long, default_value_t = 1_000_000)]
    pub pods: usize,
    /// Member clusters (fedsim processes).
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Namespaces per member (Zipf-skewed, as fedsim generates them).
    #[arg(long, default_value_t = 200)]
    pub namespaces: usize,
    /// Shards of the view, all held by the one `fedctl cache` process.
    #[arg(long, default_value_t = 4)]
    pub shards: usize,
    /// Longest wait for each phase (members loaded, first sync, restart), in seconds.
    #[arg(long, default_value_t = 1200)]
    pub timeout_seconds: u64,
    /// etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: String,
}

/// Counts the items of a streamed JSON list (`{…,"items":[{…},{…}]}`) chunk by chunk: a
/// small state machine over JSON strings and nesting (string contents are skipped eight bytes
/// at a time); an item is an object opened at depth 2 (inside the top-level object's array;
/// the list's `metadata` holds no nested values).
#[derive(Default)]
struct ItemCounter {
    depth: i32,
    in_str: bool,
    esc: bool,
    items: usize,
    bytes: usize,
    head: Vec<u8>,
}

impl ItemCounter {
    fn feed(&mut self, chunk: &[u8]) {
        if self.head.len() < 1024 {
            let n = (1024 - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..n]);
        }
        self.bytes += chunk.len();
        let mut i = 0;
        while i < chunk.len() {
            if self.in_str {
                if self.esc {
                    self.esc = false;
                    i += 1;
                    continue;
                }
                match fedctl::cache::store::find_quote_or_escape(chunk, i) {
                    Some(p) => {
                        i = p;
                        if chunk[i] == b'\\' {
                            self.esc = true;
                        } else {
                            self.in_str = false;
                        }
                        i += 1;
                    }
                    None => return,
                }
                continue;
            }
            match chunk[i] {
                b'"' => self.in_str = true,
                b'{' => {
                    if self.depth == 2 {
                        self.items += 1;
                    }
                    self.depth += 1;
                }
                b'[' => self.depth += 1,
                b'}' | b']' => self.depth -= 1,
                _ => {}
            }
            i += 1;
        }
    }

    /// The list's `metadata.resourceVersion`, from the head of the body.
    fn resource_version(&self) -> Option<String> {
        let s = String::from_utf8_lossy(&self.head);
        let at = s.find("\"resourceVersion\":\"")? + "\"resourceVersion\":\"".len();
        Some(s[at..].split('"').next()?.to_string())
    }
}

/// One whole LIST: items, bytes, seconds, and its global resourceVersion.
pub struct Listed {
    /// Items.
    pub items: usize,
    /// Body bytes.
    pub bytes: usize,
    /// Seconds to the last byte.
    pub secs: f64,
    /// `metadata.resourceVersion`.
    pub rv: Option<String>,
}

impl Listed {
    /// MiB/s of the body.
    pub fn mib_s(&self) -> f64 {
        self.bytes as f64 / 1048576.0 / self.secs.max(1e-9)
    }
}

/// Runs `f` while a thread samples the RSS of `pid` every 20 ms: its output and the RSS
/// (KiB) before and at the highest sample during it (0 when unreadable).
pub async fn with_peak_rss<T>(pid: Option<u32>, f: impl std::future::Future<Output = T>) -> (T, (u64, u64)) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let rss = move || pid.and_then(super::procs::rss_kib).unwrap_or(0);
    let before = rss();
    let (stop, peak) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(before)));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let out = f.await;
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    (out, (before, peak.load(Ordering::Relaxed)))
}

/// GETs `url` and reads the body to its end, counting items. Error: a non-200 answer or a
/// body that ends early (a streamed LIST that fails midway ends without its closing bytes).
pub async fn list_all(http: &reqwest::Client, url: &str) -> Result<Listed, String> {
    let t = Instant::now();
    let r = http.get(url).send().await.map_err(|e| format!("GET {url}: {e}"))?;
    let code = r.status();
    if !code.is_success() {
        return Err(format!("GET {url}: {code}: {}", r.text().await.unwrap_or_default()));
    }
    let mut c = ItemCounter::default();
    let mut s = r.bytes_stream();
    while let Some(chunk) = s.next().await {
        c.feed(&chunk.map_err(|e| format!("GET {url}: body: {e}"))?);
    }
    if c.depth != 0 {
        return Err(format!("GET {url}: body ended early after {} bytes", c.bytes));
    }
    Ok(Listed { items: c.items, bytes: c.bytes, secs: t.elapsed().as_secs_f64(), rv: c.resource_version() })
}

/// GETs `url` with `Accept-Encoding: gzip` and reads the compressed body to its end: bytes
/// on the wire and seconds (the client's decompression is outside the timing). Error: a
/// non-200 answer or an answer that is not gzip-encoded.
async fn list_gzip(http: &reqwest::Client, url: &str) -> Result<Listed, String> {
    let t = Instant::now();
    let r = http.get(url).header("accept-encoding", "gzip").send().await.map_err(|e| format!("GET {url}: {e}"))?;
    let code = r.status();
    if !code.is_success() {
        return Err(format!("GET {url} (gzip): {code}"));
    }
    if r.headers().get("content-encoding").and_then(|v| v.to_str().ok()) != Some("gzip") {
        return Err(format!("GET {url}: asked for gzip, answer not gzip-encoded"));
    }
    let mut bytes = 0usize;
    let mut s = r.bytes_stream();
    while let Some(chunk) = s.next().await {
        bytes += chunk.map_err(|e| format!("GET {url} (gzip): body: {e}"))?.len();
    }
    Ok(Listed { items: 0, bytes, secs: t.elapsed().as_secs_f64(), rv: None })
}

/// A paged LIST of a member's pods (`limit`, as the cache's ingest pages): pods, bytes, seconds.
async fn list_paged(http: &reqwest::Client, base: &str, limit: usize) -> Result<Listed, String> {
    let t = Instant::now();
    let (mut cont, mut items, mut bytes) = (String::new(), 0usize, 0usize);
    loop {
        let r = http.get(format!("{base}/api/v1/pods")).query(&[("limit", limit.to_string()), ("continue", cont.clone())]).send().await.map_err(|e| e.to_string())?;
        let code = r.status();
        let body = r.bytes().await.map_err(|e| e.to_string())?;
        if !code.is_success() {
            return Err(format!("member LIST: {code}: {}", String::from_utf8_lossy(&body)));
        }
        bytes += body.len();
        let v: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        items += v["items"].as_array().map(Vec::len).unwrap_or(0);
        cont = v["metadata"]["continue"].as_str().unwrap_or("").to_string();
        if cont.is_empty() {
            break;
        }
    }
    Ok(Listed { items, bytes, secs: t.elapsed().as_secs_f64(), rv: None })
}

/// Whether global resourceVersion `rv` holds every member of `revs` at a member
/// resourceVersion at least its value.
fn covers(rv: &str, revs: &BTreeMap<String, u64>) -> bool {
    let Ok(g) = GlobalRv::decode(rv) else { return false };
    revs.iter().all(|(m, r)| g.0.get(m).is_some_and(|p| p.rv >= *r))
}

/// The cache process's `/shards`: objects of `pods` over its shards and its global
/// resourceVersion of `pods` decoded. `None` while it does not answer.
async fn cache_status(http: &reqwest::Client, url: &str) -> Option<(u64, GlobalRv)> {
    let r = http.get(format!("{url}{V}/shards")).timeout(Duration::from_secs(5)).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    let v: Value = r.json().await.ok()?;
    let objects = v["shards"].as_array()?.iter().map(|s| s["kinds"]["pods"]["objects"].as_u64().unwrap_or(0)).sum();
    let g = GlobalRv::decode(v["resourceVersions"]["pods"].as_str()?).ok()?;
    Some((objects, g))
}

/// What [`wait_ingest`] saw, measured from its `t0`: when the cache process first answered
/// `/shards`, and per member when its position there first reached the member's revision
/// (the member's initial LIST applied).
struct IngestTimes {
    first_answer: Option<Duration>,
    member: BTreeMap<String, Duration>,
    /// Largest RSS of the process seen while polling, KiB.
    peak_rss_kib: u64,
}

/// What the view's LIST answered first with 200 after the restart: when, how many members its
/// resourceVersion held at their revision or later, and its `Warning` headers.
struct First200 {
    at: Duration,
    covered: usize,
    warnings: usize,
}

/// Member revisions (`/fedsim/status` `revision`) by name.
async fn member_revs(members: &[FedsimProcess]) -> Result<BTreeMap<String, u64>, String> {
    let mut out = BTreeMap::new();
    for m in members {
        out.insert(m.name.clone(), m.admin(Method::GET, "/fedsim/status").await?["revision"].as_u64().unwrap_or(0));
    }
    Ok(out)
}

fn cpu_s(pid: Option<u32>) -> f64 {
    pid.and_then(cpu_time).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Runs the benchmark and prints its figures.
pub async fn run(a: Args) -> Result<(), String> {
    let timeout = Duration::from_secs(a.timeout_seconds.max(10));
    let members_n = a.members.max(1);
    let shards_n = a.shards.max(1);
    let nodes = a.pods.div_ceil(members_n).div_ceil(PODS_PER_NODE).max(1);
    let etcd = EtcdProcess::start(&a.etcd_bin).map_err(|e| format!("start etcd: {e}"))?;
    let fedctl = sibling_binary("fedctl");
    let port = free_port();
    let cache_url = format!("https://127.0.0.1:{port}");
    let shard_count = shards_n.to_string();
    let server = ServerProcess::start(&fedctl, &etcd.endpoint, &["--cache-resources", "pods", "--cache-shards", &shard_count, "--cache-endpoints", &cache_url, "--cluster-grace-period", "24h"])
        .map_err(|e| format!("start fedctl server: {e}"))?;
    let shards: Vec<String> = (0..shards_n).map(|i| i.to_string()).collect();
    let mut cache = CacheProcess::start(&fedctl, &etcd.endpoint, &server.data_dir, port, &["--shards", &shards.join(",")], shards_n, &["--cache-resources", "pods"])
        .map_err(|e| format!("start fedctl cache: {e}"))?;
    cache.wait_listening(Duration::from_secs(30)).map_err(|e| format!("fedctl cache: {e}\n{}", cache.log_tail(20)))?;
    let (http, base) = client_from_kubeconfig(&server.kubeconfig())?;
    wait_ready(&http, &base, Duration::from_millis(600 * 50)).await?;

    // members, loaded side by side
    let fedsim = sibling_binary("fedsim");
    let t_load = Instant::now();
    let members: Vec<FedsimProcess> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..members_n)
            .map(|i| {
                let fedsim = &fedsim;
                let (n, ns) = (nodes.to_string(), a.namespaces.to_string());
                s.spawn(move || {
                    let seed = (i + 1).to_string();
                    FedsimProcess::start(fedsim, &format!("member-{i}"), &["--nodes", &n, "--pods-per-node", &PODS_PER_NODE.to_string(), "--namespaces", &ns, "--seed", &seed], timeout)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().map_err(|_| "fedsim start panicked".to_string()).and_then(|r| r.map_err(|e| format!("start fedsim: {e}")))).collect::<Result<Vec<_>, String>>()
    })?;
    let load_s = t_load.elapsed().as_secs_f64();
    let mut pods_of = BTreeMap::new();
    for m in &members {
        pods_of.insert(m.name.clone(), m.admin(Method::GET, "/fedsim/status").await?["pods"].as_u64().unwrap_or(0) as usize);
    }
    let want: usize = pods_of.values().sum();
    let fedsim_rss: u64 = members.iter().filter_map(FedsimProcess::rss_kib).sum();
    println!("fedctl-bench restart: members={members_n} pods={want} ({} per member, {nodes} nodes × {PODS_PER_NODE}) shards={shards_n} in one fedctl cache process", want / members_n);
    println!("members loaded in {load_s:.1} s, fedsim RSS {:.0} MiB in all", fedsim_rss as f64 / 1024.0);

    // anchor: a client's paged LIST of one member, as the ingest pages it (no store)
    let (mhttp, mbase) = client_from_kubeconfig(&members[0].kubeconfig)?;
    let member_list = list_paged(&mhttp, &mbase, 500).await?;
    println!("client paged LIST of {}: {} pods in {:.1} s", members[0].name, member_list.items, member_list.secs);

    // first sync
    let cache_rss0 = cache.rss_kib().unwrap_or(0);
    let t_sync = Instant::now();
    for m in &members {
        register_member(&http, &base, m).await?;
    }
    let revs = member_revs(&members).await?;
    let first = wait_ingest(&http, &cache.url(), cache.pid(), &revs, t_sync, timeout).await;
    if first.member.len() < revs.len() {
        return Err(format!("first sync: {} of {} members listed after {timeout:?}\n{}", first.member.len(), revs.len(), cache.log_tail(20)));
    }
    let sync_s = first.member.values().max().copied().unwrap_or_default().as_secs_f64();
    let before = wait_consistent(&http, &base, &revs, Instant::now(), timeout).await?;
    let list0 = list_all(&http, &format!("{base}{V}/global/api/v1/pods")).await?;
    if list0.items != want {
        return Err(format!("view before the restart: LIST has {} pods, want {want}", list0.items));
    }
    let cache_rss1 = cache.rss_kib().unwrap_or(0);
    println!("first sync: {sync_s:.1} s; consistent LIST {:.1} s later; LIST {} pods in {:.1} s", before.1.as_secs_f64(), list0.items, list0.secs);

    // kill, restart
    let revs = member_revs(&members).await?;
    let old = cache.pid();
    cache.kill();
    let cpu_members0: Vec<f64> = members.iter().map(|m| cpu_s(Some(m.pid()))).collect();
    let cpu_server0 = cpu_s(Some(server.pid()));
    let t0 = Instant::now();
    cache.spawn().map_err(|e| format!("restart fedctl cache: {e}"))?;
    println!("killed fedctl cache (pid {}) with SIGKILL; restarted as pid {}", old.unwrap_or(0), cache.pid().unwrap_or(0));
    // the view's LIST answers (first 200) and is consistent, polled side by side with the
    // cache's own positions
    let cache_url = cache.url();
    let (ingest, consistent) = tokio::join!(wait_ingest(&http, &cache_url, cache.pid(), &revs, t0, timeout), wait_consistent(&http, &base, &revs, t0, timeout));
    let (first_200, consistent) = consistent?;
    let cpu_cache = cpu_s(cache.pid());
    let cpu_members: f64 = members.iter().zip(&cpu_members0).map(|(m, c0)| cpu_s(Some(m.pid())) - c0).sum();
    let cpu_server = cpu_s(Some(server.pid())) - cpu_server0;
    let rss_consistent = cache.rss_kib().unwrap_or(0);
    let complete = list_all(&http, &format!("{base}{V}/global/api/v1/pods")).await?;
    let complete_at = t0.elapsed();
    if complete.items != want || !complete.rv.as_deref().is_some_and(|rv| covers(rv, &revs)) {
        return Err(format!("view after the restart: LIST has {} pods (want {want}) at {:?} (want every member at ≥ {revs:?})", complete.items, complete.rv));
    }
    let rss_after_list = cache.rss_kib().unwrap_or(0);
    // whole LIST streamed to a client: through the server (MUX) and from the cache process
    let (cpu_s0, cpu_c0) = (cpu_s(Some(server.pid())), cpu_s(cache.pid()));
    let (via_server, server_rss) = with_peak_rss(Some(server.pid()), list_all(&http, &format!("{base}{V}/global/api/v1/pods"))).await;
    let via_server = via_server?;
    let (cpu_s1, cpu_c1) = (cpu_s(Some(server.pid())), cpu_s(cache.pid()));
    let (direct, cache_rss) = with_peak_rss(cache.pid(), list_all(&http, &format!("{}{V}/global/api/v1/pods", cache.url()))).await;
    let direct = direct?;
    let cpu_c2 = cpu_s(cache.pid());
    // the same LIST through the server asking for gzip (kubectl and client-go send
    // `Accept-Encoding: gzip`): time to the last compressed byte and bytes on the wire
    let cpu_s2 = cpu_s(Some(server.pid()));
    let gz = list_gzip(&http, &format!("{base}{V}/global/api/v1/pods")).await?;
    let cpu_s3 = cpu_s(Some(server.pid()));
    for (what, l) in [("through the server", &via_server), ("from the cache process", &direct)] {
        if l.items != want {
            return Err(format!("LIST {what}: {} pods, want {want}", l.items));
        }
    }

    let s = |d: Option<&Duration>| d.map_or("—".to_string(), |d| format!("{:.1} s", d.as_secs_f64()));
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| pods (members) | {want} ({members_n} fedsim members, {shards_n} shards in one `fedctl cache` process) |");
    println!(
        "| client paged LIST of one member (limit 500, TLS, JSON decoded) | {} pods in {:.1} s = {:.0} pods/s ({:.1} MiB/s) |",
        member_list.items,
        member_list.secs,
        member_list.items as f64 / member_list.secs,
        member_list.mib_s()
    );
    println!("| first sync (members registered → every member listed by the cache) | {sync_s:.1} s |");
    println!("| cache RSS: started with no members / synced | {:.0} MiB / {:.0} MiB |", cache_rss0 as f64 / 1024.0, cache_rss1 as f64 / 1024.0);
    println!("| restart → cache answers `/shards` | {} |", s(ingest.first_answer.as_ref()));
    for (m, d) in &ingest.member {
        let n = pods_of.get(m).copied().unwrap_or(0);
        println!("| restart → {m}'s initial LIST ingested ({n} pods) | {:.1} s = {:.0} pods/s |", d.as_secs_f64(), n as f64 / d.as_secs_f64().max(1e-9));
    }
    println!(
        "| restart → first 200 of the view's LIST (limit=1, through the server) | {:.1} s ({} of {} members at their revision, {} `Warning` headers) |",
        first_200.at.as_secs_f64(),
        first_200.covered,
        revs.len(),
        first_200.warnings
    );
    println!("| **restart → LIST consistent** (position ≥ every member's revision) | **{:.1} s** |", consistent.as_secs_f64());
    println!(
        "| restart → complete LIST received ({} pods, {:.0} MiB) | **{:.1} s** (that LIST: {:.1} s) |",
        complete.items,
        complete.bytes as f64 / 1048576.0,
        complete_at.as_secs_f64(),
        complete.secs
    );
    println!("| CPU from restart to consistent: cache / {members_n} members / server | {cpu_cache:.1} s / {cpu_members:.1} s / {cpu_server:.1} s |");
    println!(
        "| cache RSS after restart: peak while ingesting / consistent / after the complete LIST | {:.0} / {:.0} / {:.0} MiB ({:.0} B per pod) |",
        ingest.peak_rss_kib as f64 / 1024.0,
        rss_consistent as f64 / 1024.0,
        rss_after_list as f64 / 1024.0,
        rss_after_list as f64 * 1024.0 / want.max(1) as f64
    );
    println!(
        "| whole-view LIST through the server (MUX) | {:.1} s, {:.0} MiB = {:.1} MiB/s, {:.0} pods/s; CPU server {:.1} s, cache {:.1} s |",
        via_server.secs,
        via_server.bytes as f64 / 1048576.0,
        via_server.mib_s(),
        want as f64 / via_server.secs,
        cpu_s1 - cpu_s0,
        cpu_c1 - cpu_c0
    );
    println!(
        "| whole-view LIST from the cache process directly | {:.1} s, {:.0} MiB = {:.1} MiB/s, {:.0} pods/s; CPU cache {:.1} s |",
        direct.secs,
        direct.bytes as f64 / 1048576.0,
        direct.mib_s(),
        want as f64 / direct.secs,
        cpu_c2 - cpu_c1
    );
    println!(
        "| whole-view LIST through the server, `Accept-Encoding: gzip` | {:.1} s ({:.2}× the plain LIST's time), {:.0} MiB on the wire ({:.1}× fewer bytes); CPU server {:.1} s (plain: {:.1} s) |",
        gz.secs,
        gz.secs / via_server.secs,
        gz.bytes as f64 / 1048576.0,
        via_server.bytes as f64 / gz.bytes.max(1) as f64,
        cpu_s3 - cpu_s2,
        cpu_s1 - cpu_s0
    );
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "| RSS before / peak during those LISTs: server (MUX) / cache process (direct) | {:.0} / {:.0} MiB (+{:.0} MiB) / {:.0} / {:.0} MiB (+{:.0} MiB) |",
        mib(server_rss.0),
        mib(server_rss.1),
        mib(server_rss.1.saturating_sub(server_rss.0)),
        mib(cache_rss.0),
        mib(cache_rss.1),
        mib(cache_rss.1.saturating_sub(cache_rss.0))
    );
    println!("| check | restarted view's LIST holds {want} pods at a position covering every member |");
    drop(cache);
    drop(members);
    drop(server);
    drop(etcd);
    Ok(())
}

/// Polls the cache process's `/shards` every 100 ms from `t0` until every member of `revs`
/// is at least at its revision there, or `timeout`.
async fn wait_ingest(http: &reqwest::Client, url: &str, pid: Option<u32>, revs: &BTreeMap<String, u64>, t0: Instant, timeout: Duration) -> IngestTimes {
    let mut out = IngestTimes { first_answer: None, member: BTreeMap::new(), peak_rss_kib: 0 };
    while out.member.len() < revs.len() && t0.elapsed() < timeout {
        out.peak_rss_kib = out.peak_rss_kib.max(pid.and_then(super::procs::rss_kib).unwrap_or(0));
        if let Some((_, g)) = cache_status(http, url).await {
            let at = t0.elapsed();
            out.first_answer.get_or_insert(at);
            for (m, r) in revs {
                if !out.member.contains_key(m) && g.0.get(m).is_some_and(|p| p.rv >= *r) {
                    out.member.insert(m.clone(), at);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    out
}

/// Polls the view's LIST (`limit=1`, through the server) every 100 ms from `t0`: returns its
/// first 200 answer and when its resourceVersion first covered `revs`. Error: not consistent
/// within `timeout`.
async fn wait_consistent(http: &reqwest::Client, base: &str, revs: &BTreeMap<String, u64>, t0: Instant, timeout: Duration) -> Result<(First200, Duration), String> {
    let mut first_200: Option<First200> = None;
    let mut last = String::new();
    while t0.elapsed() < timeout {
        match http.get(format!("{base}{V}/global/api/v1/pods?limit=1")).timeout(Duration::from_secs(30)).send().await {
            Ok(r) if r.status().is_success() => {
                let at = t0.elapsed();
                let warnings = r.headers().get_all(reqwest::header::WARNING).iter().count();
                let v: Value = r.json().await.unwrap_or_default();
                let rv = v["metadata"]["resourceVersion"].as_str().unwrap_or("");
                let covered = revs.iter().filter(|(m, r)| covers(rv, &[(m.to_string(), **r)].into())).count();
                if first_200.is_none() {
                    first_200 = Some(First200 { at, covered, warnings });
                }
                if covered == revs.len() {
                    return Ok((first_200.take().expect("set above"), at));
                }
                last = format!("200 at {rv}");
            }
            Ok(r) => last = format!("{}", r.status()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("the view's LIST was not consistent within {timeout:?} (last answer: {last})"))
}

#[cfg(test)]
mod tests {
    use super::ItemCounter;

    #[test]
    fn items_are_counted_across_chunks_and_strings() {
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"gYT0x"},"items":[{"a":{"b":[{"c":"}{\"["}]}},{"x":"]"},{}]}"#;
        for split in [1, 3, 7, body.len()] {
            let mut c = ItemCounter::default();
            for ch in body.chunks(split) {
                c.feed(ch);
            }
            assert_eq!((c.items, c.depth, c.bytes), (3, 0, body.len()), "chunks of {split}");
            assert_eq!(c.resource_version().as_deref(), Some("gYT0x"));
        }
        let mut c = ItemCounter::default();
        c.feed(br#"{"items":[{"a":1},"#);
        assert_ne!(c.depth, 0, "an unfinished body is seen as such");
    }
}
