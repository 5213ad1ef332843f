//! The seed's members: one `fedsim --members N` process serving every member (virtual
//! members), or one ordinary `fedsim` process per member; either way a list of
//! [`MemberInfo`] as fedsim's `members.json` gives it.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;

use super::super::agents::{load_members_json, MemberInfo};
use super::super::procs::{fedsim_admin, sibling_binary, tempfile_dir, FedsimProcess};

/// How the members are simulated.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Virtual members when this fedsim has `--members`, else one process per member.
    Auto,
    /// One `fedsim --members N` process.
    Virtual,
    /// One `fedsim` process per member.
    Processes,
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Members, named `m-0000`, `m-0001`, … (`--name-prefix m-`).
    pub members: usize,
    /// Zones `z1` … `zN`; member `i` is in zone `i % zones` (as fedsim places them).
    pub zones: usize,
    /// Nodes per member.
    pub nodes: usize,
    /// Pods per node.
    pub pods_per_node: usize,
    /// Seed of what fedsim generates.
    pub seed: u64,
    /// Longest wait for the members to listen.
    pub timeout: Duration,
}

impl Spec {
    /// The zone names, comma-separated (`z1,z2,z3,z4`).
    pub fn zone_list(&self) -> String {
        (1..=self.zones.max(1)).map(|z| format!("z{z}")).collect::<Vec<_>>().join(",")
    }
}

/// The running members; every process is killed (by its pid) on drop and the temporary
/// directory removed.
pub struct Members {
    /// The members.
    pub list: Vec<MemberInfo>,
    /// `virtual` or `processes`.
    pub mode: &'static str,
    /// fedsim process ids (one, or one per member).
    pub pids: Vec<u32>,
    virtual_child: Option<Child>,
    _procs: Vec<FedsimProcess>,
    _dir: tempfile_dir::Dir,
}

impl Drop for Members {
    fn drop(&mut self) {
        if let Some(c) = self.virtual_child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Members {
    /// Sum of the fedsim processes' RSS, KiB.
    pub fn rss_kib(&self) -> u64 {
        self.pids.iter().filter_map(|p| super::super::procs::rss_kib(*p)).sum()
    }

    /// Sets every member's churn (events/s each) through its admin endpoint
    /// (`POST /fedsim/churn?rate=`). Error: the first member that refused.
    pub async fn set_churn(&self, per_member: f64) -> Result<(), String> {
        for m in &self.list {
            fedsim_admin(&m.kubeconfig, Method::POST, &format!("/fedsim/churn?rate={per_member}")).await.map_err(|e| format!("{}: {e}", m.name))?;
        }
        Ok(())
    }
}

/// Whether `fedsim` serves virtual members (its `--help` lists `--members`).
fn has_virtual(fedsim: &Path) -> bool {
    Command::new(fedsim).arg("--help").output().map(|o| String::from_utf8_lossy(&o.stdout).contains("--members")).unwrap_or(false)
}

/// Starts the members of `spec` as `mode` says and waits until all listen. Errors: a
/// process could not start, exited, or the members did not listen within `spec.timeout`.
pub async fn launch(mode: Mode, spec: &Spec) -> Result<Members, String> {
    let fedsim = sibling_binary("fedsim");
    let dir = tempfile_dir::Dir::new("fedctl-bench-seed-members").map_err(|e| format!("temp dir: {e}"))?;
    let virt = match mode {
        Mode::Virtual => true,
        Mode::Processes => false,
        Mode::Auto => has_virtual(&fedsim),
    };
    if virt {
        launch_virtual(&fedsim, spec, dir)
    } else {
        launch_processes(&fedsim, spec, dir).await
    }
}

/// `fedsim --members N --name-prefix m- --kubeconfig-dir DIR --zones … --nodes X
/// --pods-per-node Y --seed S`, then `DIR/members.json`.
fn launch_virtual(fedsim: &Path, spec: &Spec, dir: tempfile_dir::Dir) -> Result<Members, String> {
    let kdir = dir.path().join("kubeconfigs");
    std::fs::create_dir_all(&kdir).map_err(|e| format!("{}: {e}", kdir.display()))?;
    let log = std::fs::File::create(dir.path().join("fedsim.log")).map_err(|e| e.to_string())?;
    let mut child = Command::new(fedsim)
        .args(["--members", &spec.members.to_string(), "--name-prefix", "m-"])
        .arg("--kubeconfig-dir")
        .arg(&kdir)
        .args(["--zones", &spec.zone_list(), "--nodes", &spec.nodes.to_string(), "--pods-per-node", &spec.pods_per_node.to_string(), "--seed", &spec.seed.to_string()])
        .env("RUST_LOG", std::env::var("FEDSIM_LOG").unwrap_or_else(|_| "warn".into()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| format!("start fedsim --members: {e}"))?;
    let json = kdir.join("members.json");
    let t0 = Instant::now();
    let fail = |child: &mut Child, why: String| {
        let _ = child.kill();
        let _ = child.wait();
        let tail = std::fs::read_to_string(dir.path().join("fedsim.log")).unwrap_or_default();
        let tail: Vec<&str> = tail.lines().rev().take(10).collect();
        format!("{why}\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
    };
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(fail(&mut child, format!("fedsim --members exited early: {st}")));
        }
        if let Ok(list) = load_members_json(&json) {
            if list.len() == spec.members {
                let pid = child.id();
                return Ok(Members { list, mode: "virtual", pids: vec![pid], virtual_child: Some(child), _procs: Vec::new(), _dir: dir });
            }
        }
        if t0.elapsed() > spec.timeout {
            return Err(fail(&mut child, format!("fedsim --members wrote no complete {} within {:?}", json.display(), spec.timeout)));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One `fedsim` per member (at most two starting at once), described as `members.json` would.
async fn launch_processes(fedsim: &Path, spec: &Spec, dir: tempfile_dir::Dir) -> Result<Members, String> {
    let zones = spec.zone_list();
    let zones: Vec<&str> = zones.split(',').collect();
    let names: Vec<(String, String)> = (0..spec.members).map(|i| (format!("m-{i:04}"), zones[i % zones.len()].to_string())).collect();
    let mut procs: Vec<FedsimProcess> = Vec::new();
    for chunk in names.chunks(2) {
        let started: Vec<Result<FedsimProcess, String>> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk
                .iter()
                .map(|(name, zone)| {
                    let i = names.iter().position(|(n, _)| n == name).unwrap_or(0) as u64;
                    let (n, p, seed) = (spec.nodes.to_string(), spec.pods_per_node.to_string(), (spec.seed + i).to_string());
                    s.spawn(move || {
                        FedsimProcess::start(fedsim, name, &["--nodes", &n, "--pods-per-node", &p, "--namespaces", "20", "--zone", zone, "--seed", &seed], spec.timeout)
                            .map_err(|e| format!("start fedsim {name}: {e}"))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("fedsim start panicked".into()))).collect()
        });
        for r in started {
            procs.push(r?);
        }
    }
    let mut list = Vec::new();
    for (p, (_, zone)) in procs.iter().zip(&names) {
        let st = p.admin(Method::GET, "/fedsim/status").await?;
        let count = |k: &str| st[k].as_u64().unwrap_or(0) as usize;
        list.push(MemberInfo { name: p.name.clone(), zone: zone.clone(), server: p.url.clone(), kubeconfig: p.kubeconfig.clone(), nodes: count("nodes"), pods: count("pods") });
    }
    let pids = procs.iter().map(FedsimProcess::pid).collect();
    Ok(Members { list, mode: "processes", pids, virtual_child: None, _procs: procs, _dir: dir })
}
