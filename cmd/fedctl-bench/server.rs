//! API server benchmark: create / get / list / watch fan-out through `fedctl server`, next to
//! the same operations straight on etcd, in one run on one machine.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use super::median_p99;
use super::procs::{client_from_kubeconfig, sibling_binary, EtcdProcess, ServerProcess};

/// Flags of `fedctl-bench server`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Objects created (then read and listed).
    #[arg(long, default_value_t = 10_000)]
    pub objects: usize,
    /// Concurrent requests in flight.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Watchers for the fan-out phase.
    #[arg(long, default_value_t = 100)]
    pub watchers: usize,
    /// Updates observed by every watcher in the fan-out phase.
    #[arg(long, default_value_t = 500)]
    pub watch_events: usize,
    /// Repetitions of the LIST measurement (median reported).
    #[arg(long, default_value_t = 5)]
    pub list_repeats: usize,
    /// etcd binary.
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: String,
}

/// A realistic resource template: the captured Deployment, without server-set fields.
pub fn template() -> Value {
    let mut d: Value = serde_json::from_str(include_str!("../../testdata/real-objects/deployment-portdocs-1.json")).expect("testdata parses");
    if let Some(m) = d.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "namespace"] {
            m.remove(k);
        }
    }
    if let Some(o) = d.as_object_mut() {
        o.remove("status");
    }
    d
}

struct Phase {
    name: &'static str,
    ops: usize,
    elapsed: Duration,
    lat_ms: Vec<f64>,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

async fn run_concurrent<F, Fut>(n: usize, conc: usize, f: F) -> Result<(Duration, Vec<f64>), String>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let f = f.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let t = Instant::now();
                f(i).await?;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
            Ok::<_, String>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.map_err(|e| e.to_string())??);
    }
    Ok((t0.elapsed(), all))
}

/// Runs the benchmark and prints a table of fedctl vs etcd figures with their ratios.
pub async fn run(a: Args) -> Result<(), String> {
    let etcd = EtcdProcess::start(&a.etcd_bin).map_err(|e| format!("start etcd: {e}"))?;
    let server = ServerProcess::start(&sibling_binary("fedctl"), &etcd.endpoint, &[]).map_err(|e| format!("start fedctl: {e}"))?;
    let (http, base) = client_from_kubeconfig(&server.kubeconfig())?;
    // wait for readiness
    for _ in 0..200 {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ns = "bench";
    http.post(format!("{base}/api/v1/namespaces")).json(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).send().await.map_err(|e| e.to_string())?;
    let mut etcd_client = etcd_client::Client::connect([etcd.endpoint.clone()], None).await.map_err(|e| e.to_string())?;
    let tpl = template();
    let body_size = serde_json::to_vec(&tpl).map(|v| v.len()).unwrap_or(0);
    println!("fedctl-bench server: objects={} concurrency={} watchers={} watch_events={} object_bytes={}", a.objects, a.concurrency, a.watchers, a.watch_events, body_size);

    let mut fed: Vec<Phase> = Vec::new();
    let mut raw: Vec<Phase> = Vec::new();

    // CREATE
    {
        let (http, base, tpl1) = (http.clone(), base.clone(), tpl.clone());
        let (el, lat) = run_concurrent(a.objects, a.concurrency, move |i| {
            let (http, base) = (http.clone(), base.clone());
            let mut obj = tpl1.clone();
            obj["metadata"]["name"] = json!(format!("web-{i:06}"));
            async move {
                let r = http.post(format!("{base}/apis/apps/v1/namespaces/{ns}/deployments")).json(&obj).send().await.map_err(|e| e.to_string())?;
                if r.status().as_u16() != 201 {
                    return Err(format!("create: {}", r.status()));
                }
                Ok(())
            }
        })
        .await?;
        fed.push(Phase { name: "create", ops: a.objects, elapsed: el, lat_ms: lat });
        let kv = etcd_client.kv_client();
        let tpl2 = tpl.clone();
        let (el, lat) = run_concurrent(a.objects, a.concurrency, move |i| {
            let mut kv = kv.clone();
            let mut obj = tpl2.clone();
            obj["metadata"]["name"] = json!(format!("web-{i:06}"));
            let bytes = serde_json::to_vec(&obj).unwrap_or_default();
            async move {
                let key = format!("/bench-raw/deployments/{ns}/web-{i:06}");
                let txn = etcd_client::Txn::new().when([etcd_client::Compare::create_revision(key.clone(), etcd_client::CompareOp::Equal, 0)]).and_then([etcd_client::TxnOp::put(key, bytes, None)]);
                kv.txn(txn).await.map_err(|e| e.to_string())?;
                Ok(())
            }
        })
        .await?;
        raw.push(Phase { name: "create", ops: a.objects, elapsed: el, lat_ms: lat });
    }
    // GET
    {
        let (http, base) = (http.clone(), base.clone());
        let n = a.objects;
        let (el, lat) = run_concurrent(n, a.concurrency, move |i| {
            let (http, base) = (http.clone(), base.clone());
            async move {
                let j = (i * 7919) % n;
                let r = http.get(format!("{base}/apis/apps/v1/namespaces/{ns}/deployments/web-{j:06}")).send().await.map_err(|e| e.to_string())?;
                if !r.status().is_success() {
                    return Err(format!("get: {}", r.status()));
                }
                r.bytes().await.map_err(|e| e.to_string())?;
                Ok(())
            }
        })
        .await?;
        fed.push(Phase { name: "get", ops: n, elapsed: el, lat_ms: lat });
        let kv = etcd_client.kv_client();
        let (el, lat) = run_concurrent(n, a.concurrency, move |i| {
            let mut kv = kv.clone();
            async move {
                let j = (i * 7919) % n;
                kv.get(format!("/bench-raw/deployments/{ns}/web-{j:06}"), None).await.map_err(|e| e.to_string())?;
                Ok(())
            }
        })
        .await?;
        raw.push(Phase { name: "get", ops: n, elapsed: el, lat_ms: lat });
    }
    // LIST (all objects, one request); then the same LIST asking for gzip
    let mut gzip_list = (Vec::new(), 0usize, 0usize);
    {
        let mut fl = Vec::new();
        let mut rl = Vec::new();
        for _ in 0..a.list_repeats {
            let t = Instant::now();
            let r = http.get(format!("{base}/apis/apps/v1/namespaces/{ns}/deployments")).header("accept-encoding", "gzip").send().await.map_err(|e| e.to_string())?;
            if r.headers().get("content-encoding").and_then(|v| v.to_str().ok()) != Some("gzip") {
                return Err("a LIST asking for gzip came back unencoded".into());
            }
            let b = r.bytes().await.map_err(|e| e.to_string())?;
            gzip_list.0.push(t.elapsed().as_secs_f64() * 1e3);
            gzip_list.1 = b.len();
            // timed: request to last byte received (the client's decoding is not the server's cost)
            let t = Instant::now();
            let r = http.get(format!("{base}/apis/apps/v1/namespaces/{ns}/deployments")).send().await.map_err(|e| e.to_string())?;
            let b = r.bytes().await.map_err(|e| e.to_string())?;
            fl.push(t.elapsed().as_secs_f64() * 1e3);
            gzip_list.2 = b.len();
            let v: Value = serde_json::from_slice(&b).map_err(|e| e.to_string())?;
            let got = v["items"].as_array().map_or(0, |a| a.len());
            if got != a.objects {
                return Err(format!("list returned {got} items, want {}", a.objects));
            }
            let t = Instant::now();
            let resp = etcd_client
                .kv_client()
                .max_decoding_message_size(1 << 30)
                .get(format!("/bench-raw/deployments/{ns}/"), Some(etcd_client::GetOptions::new().with_prefix()))
                .await
                .map_err(|e| e.to_string())?;
            if resp.kvs().len() != a.objects {
                return Err("raw list size mismatch".into());
            }
            rl.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (fm, _) = median_p99(fl.clone());
        let (rm, _) = median_p99(rl.clone());
        fed.push(Phase { name: "list", ops: 1, elapsed: Duration::from_secs_f64(fm / 1e3), lat_ms: fl });
        raw.push(Phase { name: "list", ops: 1, elapsed: Duration::from_secs_f64(rm / 1e3), lat_ms: rl });
    }
    // WATCH fan-out: W watchers, M updates; time until every watcher saw every update.
    {
        let m = a.watch_events;
        let rv = {
            let r = http.get(format!("{base}/apis/apps/v1/namespaces/{ns}/deployments?limit=1")).send().await.map_err(|e| e.to_string())?;
            let v: Value = r.json().await.map_err(|e| e.to_string())?;
            v["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string()
        };
        let done = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        for _ in 0..a.watchers {
            let (http, base, rv, done) = (http.clone(), base.clone(), rv.clone(), done.clone());
            handles.push(tokio::spawn(async move {
                let r = http.get(format!("{base}/apis/apps/v1/namespaces/{ns}/deployments?watch=1&resourceVersion={rv}&timeoutSeconds=300")).send().await.map_err(|e| e.to_string())?;
                let mut s = r.bytes_stream();
                let mut seen = 0usize;
                let mut buf = Vec::new();
                while let Some(chunk) = s.next().await {
                    let chunk = chunk.map_err(|e| e.to_string())?;
                    buf.extend_from_slice(&chunk);
                    while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=pos).collect();
                        if line.windows(10).any(|w| w == b"\"MODIFIED\"") {
                            seen += 1;
                        }
                    }
                    if seen >= m {
                        break;
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
                Ok::<_, String>(())
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let t0 = Instant::now();
        for i in 0..m {
            let r = http
                .patch(format!("{base}/apis/apps/v1/namespaces/{ns}/deployments/web-{:06}", i % a.objects))
                .header("content-type", "application/merge-patch+json")
                .body(json!({"metadata": {"labels": {"bench-seq": i.to_string()}}}).to_string())
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !r.status().is_success() {
                return Err(format!("patch: {}", r.status()));
            }
        }
        let writes = t0.elapsed();
        for h in handles {
            h.await.map_err(|e| e.to_string())??;
        }
        let el = t0.elapsed();
        fed.push(Phase { name: "watch fan-out", ops: m * a.watchers, elapsed: el, lat_ms: vec![] });
        println!("  (fedctl fan-out: {m} sequential writes took {:.2}s)", writes.as_secs_f64());

        // raw etcd: W etcd watchers on the prefix
        let done = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        for _ in 0..a.watchers {
            let mut c = etcd_client.clone();
            let done = done.clone();
            handles.push(tokio::spawn(async move {
                let mut s = c.watch(format!("/bench-raw/deployments/{ns}/"), Some(etcd_client::WatchOptions::new().with_prefix().with_prev_key())).await.map_err(|e| e.to_string())?;
                let mut seen = 0usize;
                while let Some(resp) = s.message().await.map_err(|e| e.to_string())? {
                    seen += resp.events().len();
                    if seen >= m {
                        break;
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
                Ok::<_, String>(())
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let t0 = Instant::now();
        let tpl2 = tpl.clone();
        for i in 0..m {
            let mut obj = tpl2.clone();
            obj["metadata"]["name"] = json!(format!("web-{:06}", i % a.objects));
            obj["metadata"]["labels"]["bench-seq"] = json!(i.to_string());
            etcd_client.put(format!("/bench-raw/deployments/{ns}/web-{:06}", i % a.objects), serde_json::to_vec(&obj).unwrap_or_default(), None).await.map_err(|e| e.to_string())?;
        }
        for h in handles {
            h.await.map_err(|e| e.to_string())??;
        }
        raw.push(Phase { name: "watch fan-out", ops: m * a.watchers, elapsed: t0.elapsed(), lat_ms: vec![] });
    }

    println!();
    println!("| operation | fedctl | etcd direct | fedctl/etcd |");
    println!("|---|---:|---:|---:|");
    for (f, r) in fed.iter().zip(raw.iter()) {
        if f.name == "list" {
            let (fm, _) = median_p99(f.lat_ms.clone());
            let (rm, _) = median_p99(r.lat_ms.clone());
            println!("| list {} objects (median of {}) | {:.0} ms | {:.0} ms | {:.2}× time |", a.objects, a.list_repeats, fm, rm, fm / rm);
            let (gm, _) = median_p99(gzip_list.0.clone());
            let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
            println!(
                "| list {} objects, Accept-Encoding: gzip (median of {}) | {:.0} ms, {:.2} MiB on the wire (plain: {:.2} MiB, {:.1}× smaller) | | {:.2}× plain time |",
                a.objects,
                a.list_repeats,
                gm,
                mib(gzip_list.1),
                mib(gzip_list.2),
                gzip_list.2 as f64 / gzip_list.1.max(1) as f64,
                gm / fm
            );
        } else if f.lat_ms.is_empty() {
            println!("| {} ({} watchers × {} events) | {:.0} events/s | {:.0} events/s | {:.2}× throughput |", f.name, a.watchers, a.watch_events, f.rate(), r.rate(), f.rate() / r.rate());
        } else {
            let (fm, fp) = median_p99(f.lat_ms.clone());
            let (rm, rp) = median_p99(r.lat_ms.clone());
            println!(
                "| {} ({} ops, {} in flight) | {:.0}/s, p50 {:.2} ms, p99 {:.2} ms | {:.0}/s, p50 {:.2} ms, p99 {:.2} ms | {:.2}× throughput |",
                f.name,
                f.ops,
                a.concurrency,
                f.rate(),
                fm,
                fp,
                r.rate(),
                rm,
                rp,
                f.rate() / r.rate()
            );
        }
    }
    Ok(())
}
