//! Virtual members benchmark: RSS of one `fedsim --members N` process, and a full paged LIST of one member's pods.
//!
//! Starts `fedsim --members N --nodes X --pods-per-node Y` (sibling binary; every member
//! virtual, see `fedctl::fedsim::overlay`) and measures:
//! - time from spawn until `members.json` is written (all members listening);
//! - RSS then (`VmRSS` of `/proc/<pid>/status`), per member and per generated object;
//! - a full LIST of the first member's pods in pages of `--page` with `continue` (time,
//!   items, bytes), and the RSS after it;
//! - with `--churn R` (per member) for `--seconds`, the RSS after churn ran.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::procs::{client_from_kubeconfig, rss_kib, sibling_binary, tempfile_dir};

/// Flags of `fedctl-bench members`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Members in the one fedsim process.
    #[arg(long, default_value_t = 200)]
    pub members: usize,
    /// Nodes per member.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Pods per node.
    #[arg(long, default_value_t = 50)]
    pub pods_per_node: usize,
    /// Zones the members cycle through.
    #[arg(long, default_value = "z1,z2,z3,z4")]
    pub zones: String,
    /// Page size of the paged LIST.
    #[arg(long, default_value_t = 500)]
    pub page: usize,
    /// Churn per member (events/s) in the churn phase; 0 skips it.
    #[arg(long, default_value_t = 0.0)]
    pub churn: f64,
    /// Seconds of the churn phase.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Runs the benchmark and prints its figures.
pub async fn run(a: Args) -> Result<(), String> {
    let pods = a.members * a.nodes * a.pods_per_node;
    println!(
        "fedctl-bench members: members={} nodes/member={} pods/member={} pods={} nodes={} page={} churn={}/s/member",
        a.members,
        a.nodes,
        a.nodes * a.pods_per_node,
        pods,
        a.members * a.nodes,
        a.page,
        a.churn
    );
    let dir = tempfile_dir::Dir::new("fedctl-bench-members").map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let mut child = Command::new(sibling_binary("fedsim"))
        .args(["--members", &a.members.to_string(), "--name-prefix", "m-", "--zones", &a.zones])
        .args(["--nodes", &a.nodes.to_string(), "--pods-per-node", &a.pods_per_node.to_string(), "--churn", &a.churn.to_string()])
        .arg("--kubeconfig-dir")
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawn fedsim: {e}"))?;
    let pid = child.id();
    let index = dir.path().join("members.json");
    let result = async {
        while !index.exists() {
            if let Ok(Some(st)) = child.try_wait() {
                return Err(format!("fedsim exited: {st}"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let start = t0.elapsed();
        let members: Vec<Value> = serde_json::from_slice(&std::fs::read(&index).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        let rss0 = rss_kib(pid).unwrap_or(0);
        let objects = pods + a.members * a.nodes;
        println!("start: {} members listening after {:.1} s", members.len(), start.as_secs_f64());
        println!("rss after start: {:.0} MiB ({:.2} MiB per member, {:.1} bytes per generated object)", mib(rss0), mib(rss0) / a.members as f64, rss0 as f64 * 1024.0 / objects as f64);

        let kc = members[0]["kubeconfig"].as_str().ok_or("members.json without kubeconfig")?;
        let (http, base) = client_from_kubeconfig(std::path::Path::new(kc))?;
        let t1 = Instant::now();
        let (mut items, mut bytes, mut pages, mut cont) = (0usize, 0usize, 0usize, String::new());
        loop {
            let r = http.get(format!("{base}/api/v1/pods?limit={}&continue={cont}", a.page)).timeout(Duration::from_secs(300)).send().await.map_err(|e| e.to_string())?;
            let body = r.bytes().await.map_err(|e| e.to_string())?;
            bytes += body.len();
            pages += 1;
            let v: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
            items += v["items"].as_array().map_or(0, Vec::len);
            match v["metadata"]["continue"].as_str() {
                Some(c) if !c.is_empty() => cont = c.to_string(),
                _ => break,
            }
        }
        let took = t1.elapsed();
        println!(
            "paged LIST of {}'s pods: {items} items in {pages} pages of {}, {:.1} MiB, {:.2} s ({:.0} pods/s)",
            members[0]["name"].as_str().unwrap_or("?"),
            a.page,
            bytes as f64 / 1048576.0,
            took.as_secs_f64(),
            items as f64 / took.as_secs_f64()
        );
        println!("rss after the LIST: {:.0} MiB", mib(rss_kib(pid).unwrap_or(0)));
        if a.churn > 0.0 {
            tokio::time::sleep(Duration::from_secs(a.seconds)).await;
            println!("rss after {} s of churn at {}/s per member: {:.0} MiB", a.seconds, a.churn, mib(rss_kib(pid).unwrap_or(0)));
        }
        Ok(())
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}
