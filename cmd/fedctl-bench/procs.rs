//! Child processes for benchmarks and tests: a throw-away etcd, a `fedctl server`, fedsim
//! members and their agents; uses the `fedctl` library's kubeconfig and agent config only.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback TCP port (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// `n` distinct free loopback ports below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`), for processes that listen later: a port from
/// [`free_port`] is ephemeral, and a run that opens thousands of connections or listeners
/// meanwhile (1,000 virtual members) may be handed it first. Scans 10000..(range start) from a
/// random point; [`free_port`]s when the range leaves no room.
pub fn free_ports_below_ephemeral(n: usize) -> Vec<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok().and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok()).unwrap_or(32768);
    if low <= 10_000 + n as u16 {
        return (0..n).map(|_| free_port()).collect();
    }
    let span = low - 10_000;
    let start = rand::random::<u16>() % span;
    // held until all are chosen, so that they differ
    let held: Vec<TcpListener> = (0..span).filter_map(|i| TcpListener::bind(("127.0.0.1", 10_000 + (start + i) % span)).ok()).take(n).collect();
    held.iter().filter_map(|l| l.local_addr().ok()).map(|a| a.port()).collect()
}

/// A single-member etcd on loopback with its own data dir; killed (by its pid) on drop.
pub struct EtcdProcess {
    child: Child,
    /// Client URL.
    pub endpoint: String,
    _dir: tempfile_dir::Dir,
}

/// Minimal temp dir that removes itself (keeps this module free of test-only crates).
pub mod tempfile_dir {
    use std::path::{Path, PathBuf};
    /// A directory removed on drop.
    pub struct Dir(pub PathBuf);
    impl Dir {
        /// Creates `$TMPDIR/<prefix>-<pid>-<n>`.
        pub fn new(prefix: &str) -> std::io::Result<Dir> {
            let p = std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), rand::random::<u32>()));
            std::fs::create_dir_all(&p)?;
            Ok(Dir(p))
        }
        /// Its path.
        pub fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl EtcdProcess {
    /// Starts `etcd_bin` and waits until its client port accepts connections (≤ 20 s).
    pub fn start(etcd_bin: &str) -> std::io::Result<Self> {
        let dir = tempfile_dir::Dir::new("fedctl-bench-etcd")?;
        let (cp, pp) = (free_port(), free_port());
        let endpoint = format!("http://127.0.0.1:{cp}");
        let peer = format!("http://127.0.0.1:{pp}");
        let child = Command::new(etcd_bin)
            .args(["--data-dir", &dir.path().join("data").to_string_lossy()])
            .args(["--listen-client-urls", &endpoint, "--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("default={peer}"), "--quota-backend-bytes", "8589934592"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let me = EtcdProcess { child, endpoint, _dir: dir };
        wait_port(cp, Duration::from_secs(20))?;
        Ok(me)
    }
}

impl EtcdProcess {
    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_port(port: u16, timeout: Duration) -> std::io::Result<()> {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("port {port} did not open")))
}

/// A `fedctl server` child process; killed (by its pid) on drop.
pub struct ServerProcess {
    child: Child,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// Its data dir (holds `admin.kubeconfig`).
    pub data_dir: PathBuf,
    _dir: tempfile_dir::Dir,
}

impl ServerProcess {
    /// Starts `fedctl server` against `etcd` and waits until the admin kubeconfig exists and
    /// the port accepts connections (≤ 30 s). Extra flags are passed through.
    pub fn start(fedctl_bin: &Path, etcd: &str, extra: &[&str]) -> std::io::Result<Self> {
        let dir = tempfile_dir::Dir::new("fedctl-bench-server")?;
        let port = free_port();
        let child = Command::new(fedctl_bin)
            .args(["server", "--etcd-servers", etcd, "--bind-address", "127.0.0.1"])
            .args(["--secure-port", &port.to_string(), "--data-dir", &dir.path().to_string_lossy()])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        let data_dir = dir.path().to_path_buf();
        let me = ServerProcess { child, url: format!("https://127.0.0.1:{port}"), data_dir, _dir: dir };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        wait_port(port, Duration::from_secs(30))?;
        // the listener is bound before the admin kubeconfig is written
        while !me.kubeconfig().exists() {
            if std::time::Instant::now() > deadline {
                return Err(std::io::Error::other(format!("fedctl server wrote no {} within 30 s", me.kubeconfig().display())));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(me)
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("admin.kubeconfig")
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size in KiB, if readable.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.child.id())
    }
}

/// CPU time (user + system) a process has used so far, from `/proc/<pid>/stat` (`utime`,
/// `stime`, in USER_HZ = 100 ticks per second on Linux). `None` when unreadable.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    stat_cpu(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `utime + stime` of a `stat` file of `/proc`.
fn stat_cpu(stat: &str) -> Option<Duration> {
    // fields after the parenthesised command name: state is the first, utime the 12th
    let rest = stat.rsplit_once(')')?.1;
    let mut f = rest.split_whitespace();
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// CPU time (user + system) of each thread of this process so far, with its name (`comm`, at
/// most 15 bytes: e.g. `cache-cool`, `tokio-runtime-w`), from `/proc/self/task/<tid>/stat`
/// (USER_HZ ticks, as [`cpu_time`]). Threads that end between the listing and the read are
/// left out.
pub fn thread_cpu_times() -> Vec<(String, Duration)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| {
            let name = std::fs::read_to_string(t.path().join("comm")).ok()?.trim_end().to_string();
            Some((name, stat_cpu(&std::fs::read_to_string(t.path().join("stat")).ok()?)?))
        })
        .collect()
}

/// CPU seconds per thread name used between two [`thread_cpu_times`] readings (threads of one
/// name summed; a thread absent from `before` counts from zero).
pub fn cpu_by_thread_name(before: &[(String, Duration)], after: &[(String, Duration)]) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let sum = |v: &[(String, Duration)], out: &mut std::collections::BTreeMap<String, f64>, sign: f64| {
        for (n, d) in v {
            *out.entry(n.clone()).or_insert(0.0) += sign * d.as_secs_f64();
        }
    };
    sum(after, &mut out, 1.0);
    sum(before, &mut out, -1.0);
    out
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The path of a sibling binary of the running executable (e.g. `fedctl` next to `fedctl-bench`).
pub fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.join(name))).unwrap_or_else(|| PathBuf::from(name))
}

/// Waits until `GET {base}/readyz` answers 2xx, polling every 50 ms for at most `timeout`.
/// Errors: `"fedctl server not ready"` when it never does.
pub async fn wait_ready(http: &reqwest::Client, base: &str, timeout: Duration) -> Result<(), String> {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("fedctl server not ready".into())
}

/// A reqwest client authenticated with a kubeconfig's current user (client cert or token)
/// and trusting its CA.
pub fn client_from_kubeconfig(path: &Path) -> Result<(reqwest::Client, String), String> {
    let kc = fedctl::pki::kubeconfig::Kubeconfig::load(path).map_err(|e| e.to_string())?;
    let cluster = kc.current_cluster().map_err(|e| e.to_string())?;
    let user = kc.current_user().map_err(|e| e.to_string())?;
    let mut b = reqwest::Client::builder().use_rustls_tls().pool_max_idle_per_host(256);
    if let Some(ca) = cluster.ca_pem().map_err(|e| e.to_string())? {
        b = b.add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).map_err(|e| e.to_string())?);
    }
    if let (Some(c), Some(k)) = (user.client_cert_pem().map_err(|e| e.to_string())?, user.client_key_pem().map_err(|e| e.to_string())?) {
        let id = reqwest::Identity::from_pem(format!("{c}\n{k}").as_bytes()).map_err(|e| e.to_string())?;
        b = b.identity(id);
    }
    if let Some(t) = user.resolved_token().map_err(|e| e.to_string())? {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("authorization", format!("Bearer {t}").parse().map_err(|_| "bad token".to_string())?);
        b = b.default_headers(h);
    }
    Ok((b.build().map_err(|e| e.to_string())?, cluster.server.clone()))
}

/// A `fedsim` child process (one simulated member cluster) on a free loopback port, with its
/// kubeconfig in a temporary directory; killed (by its pid) on drop.
pub struct FedsimProcess {
    child: Child,
    /// Cluster name.
    pub name: String,
    /// `https://127.0.0.1:<port>` (from the kubeconfig).
    pub url: String,
    /// Path of the admin kubeconfig it wrote.
    pub kubeconfig: PathBuf,
    _dir: tempfile_dir::Dir,
}

impl FedsimProcess {
    /// Starts `fedsim --name NAME --listen 127.0.0.1:0 --kubeconfig-out DIR/NAME.kubeconfig`
    /// plus `extra` flags, and waits (at most `timeout`) until the kubeconfig exists (written
    /// once the population is loaded) and the port answers. Error: the process exited or the
    /// wait timed out.
    pub fn start(fedsim_bin: &Path, name: &str, extra: &[&str], timeout: Duration) -> std::io::Result<Self> {
        let dir = tempfile_dir::Dir::new("fedsim")?;
        let kubeconfig = dir.path().join(format!("{name}.kubeconfig"));
        let mut child = Command::new(fedsim_bin)
            .args(["--name", name, "--listen", "127.0.0.1:0"])
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .args(extra)
            .env("RUST_LOG", std::env::var("FEDSIM_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        let t0 = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(std::io::Error::other(format!("fedsim exited early: {status}")));
            }
            if kubeconfig.exists() {
                break;
            }
            if t0.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "fedsim did not write its kubeconfig"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let kc = fedctl::pki::kubeconfig::Kubeconfig::load(&kubeconfig).map_err(std::io::Error::other)?;
        let url = kc.current_cluster().map_err(std::io::Error::other)?.server.clone();
        let port: u16 = url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let me = FedsimProcess { child, name: name.to_string(), url, kubeconfig, _dir: dir };
        wait_port(port, timeout.saturating_sub(t0.elapsed()).max(Duration::from_secs(1)))?;
        Ok(me)
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size in KiB (`VmRSS` of `/proc/<pid>/status`), if readable.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.child.id())
    }

    /// Calls an admin endpoint (`/fedsim/...`) with the admin token; returns its JSON answer.
    pub async fn admin(&self, method: reqwest::Method, path_and_query: &str) -> Result<serde_json::Value, String> {
        fedsim_admin(&self.kubeconfig, method, path_and_query).await
    }
}

/// Calls an admin endpoint (`/fedsim/...`) of the fedsim member whose admin kubeconfig is
/// `kubeconfig`; returns its JSON answer. Error: transport, a non-JSON or non-2xx answer.
pub async fn fedsim_admin(kubeconfig: &Path, method: reqwest::Method, path_and_query: &str) -> Result<serde_json::Value, String> {
    let (http, base) = client_from_kubeconfig(kubeconfig)?;
    let r = http.request(method, format!("{base}{path_and_query}")).send().await.map_err(|e| e.to_string())?;
    let status = r.status();
    let v: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{path_and_query}: {status}: {v}"));
    }
    Ok(v)
}

impl Drop for FedsimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `VmRSS` of process `pid` in KiB, from `/proc/<pid>/status`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A `fedctl agent --config DIR` child process for one member; killed (by its pid) on drop.
pub struct AgentProcess {
    child: Child,
    /// The agent's config directory (written by `fedctl join`); read by the integration tests.
    #[allow(dead_code)]
    pub config_dir: PathBuf,
    _dir: Option<tempfile_dir::Dir>,
}

impl AgentProcess {
    /// Starts `fedctl_bin agent --config config_dir` with `RUST_LOG=warn`, stdout and stderr
    /// appended to `log`. Error: the log cannot be opened or the process not spawned.
    pub fn start(fedctl_bin: &Path, config_dir: &Path, log: &Path) -> std::io::Result<Self> {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let child = Command::new(fedctl_bin).arg("agent").arg("--config").arg(config_dir).env("RUST_LOG", "warn").stdin(Stdio::null()).stdout(Stdio::from(out)).stderr(Stdio::from(err)).spawn()?;
        Ok(AgentProcess { child, config_dir: config_dir.to_path_buf(), _dir: None })
    }

    /// Joins member `name` (reached with `member_kubeconfig`) to the server whose data dir is
    /// `server_data_dir` with [`join_member`] (plus `--labels labels` when not empty); sets
    /// `concurrentWorkSyncs: work_syncs` in the agent.yaml it wrote unless `work_syncs` is 0
    /// (the agent's default); then starts `fedctl agent` on it (logging warnings to stderr).
    /// Errors: the join command is missing or malformed, `join` failed, the config could not
    /// be rewritten, or the agent could not be spawned.
    pub fn join_and_start(fedctl_bin: &Path, server_data_dir: &Path, name: &str, member_kubeconfig: &Path, labels: &str, work_syncs: usize) -> std::io::Result<Self> {
        let jc = JoinCommand::read(server_data_dir)?;
        let dir = tempfile_dir::Dir::new(&format!("fedctl-bench-agent-{name}"))?;
        let config_dir = dir.path().join("agent");
        join_member(fedctl_bin, &jc, name, member_kubeconfig, labels, None, &config_dir)?;
        if work_syncs > 0 {
            let path = config_dir.join(fedctl::agent::config::CONFIG_FILE);
            let mut doc: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(&path)?).map_err(std::io::Error::other)?;
            doc["concurrentWorkSyncs"] = serde_yaml::Value::from(work_syncs as u64);
            std::fs::write(&path, serde_yaml::to_string(&doc).map_err(std::io::Error::other)?)?;
        }
        let child = Command::new(fedctl_bin).arg("agent").arg("--config").arg(&config_dir).env("RUST_LOG", "warn").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit()).spawn()?;
        Ok(AgentProcess { child, config_dir, _dir: Some(dir) })
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running (false once it exited).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The join command `fedctl server` writes to `DATA_DIR/join-command` at first start.
#[derive(Clone, Debug)]
pub struct JoinCommand {
    /// `--server`: the federation URL.
    pub server: String,
    /// `--token`: a bootstrap token.
    pub token: String,
    /// `--ca-cert-hash`: `sha256:<hex>` of the federation CA.
    pub ca_cert_hash: String,
}

impl JoinCommand {
    /// Reads `server_data_dir/join-command`. Errors: unreadable, or a flag is missing.
    pub fn read(server_data_dir: &Path) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(server_data_dir.join("join-command"))?;
        let words: Vec<&str> = text.split_whitespace().collect();
        let arg = |flag: &str| {
            words.iter().position(|w| *w == flag).and_then(|i| words.get(i + 1)).map(|s| s.to_string()).ok_or_else(|| std::io::Error::other(format!("{flag} missing in the join command")))
        };
        Ok(JoinCommand { server: arg("--server")?, token: arg("--token")?, ca_cert_hash: arg("--ca-cert-hash")? })
    }
}

/// Runs `fedctl join NAME --server … --token … --ca-cert-hash … --kubeconfig
/// MEMBER_KUBECONFIG --config-dir CONFIG_DIR` (plus `--labels`, `--zone` when given) and
/// waits for it: the real join (CSR signed by the server, agent config written). Error: it
/// could not be spawned or exited non-zero (its stderr in the message).
pub fn join_member(fedctl_bin: &Path, jc: &JoinCommand, name: &str, member_kubeconfig: &Path, labels: &str, zone: Option<&str>, config_dir: &Path) -> std::io::Result<()> {
    let mut join = Command::new(fedctl_bin);
    join.args(["join", name, "--server", &jc.server, "--token", &jc.token, "--ca-cert-hash", &jc.ca_cert_hash])
        .arg("--kubeconfig")
        .arg(member_kubeconfig)
        .arg("--config-dir")
        .arg(config_dir)
        .env("RUST_LOG", "warn")
        .env_remove("KUBECONFIG");
    if !labels.is_empty() {
        join.args(["--labels", labels]);
    }
    if let Some(z) = zone {
        join.args(["--zone", z]);
    }
    let out = join.stdin(Stdio::null()).output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!("fedctl join {name}: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(())
}

/// A `fedctl cache` child process holding some shards of the global view (see
/// `fedctl::search::process`), serving on a fixed loopback port so that it can be killed and
/// restarted at the same endpoint; stdout and stderr go to a log file in its temporary
/// directory. Killed (by its pid) on drop.
pub struct CacheProcess {
    child: Option<Child>,
    bin: PathBuf,
    args: Vec<String>,
    port: u16,
    log: PathBuf,
    _dir: tempfile_dir::Dir,
}

impl CacheProcess {
    /// Spawns `fedctl_bin cache HOLDING --shard-count N --listen 127.0.0.1:PORT --etcd-servers
    /// ETCD --data-dir SERVER_DATA_DIR` plus `extra`, where `holding` is `["--shards", "0,1"]`
    /// or `["--zone", "z1"]` (the federation CA is read from the server's data dir, so the
    /// server must have started first). Does not wait: see [`CacheProcess::wait_listening`].
    /// Error: the log cannot be created or the spawn failed.
    pub fn start(fedctl_bin: &Path, etcd: &str, server_data_dir: &Path, port: u16, holding: &[&str], shard_count: usize, extra: &[&str]) -> std::io::Result<Self> {
        let dir = tempfile_dir::Dir::new("fedctl-bench-cache")?;
        let mut args: Vec<String> =
            ["cache"].iter().chain(holding).chain(&["--shard-count", &shard_count.to_string(), "--listen", &format!("127.0.0.1:{port}"), "--etcd-servers", etcd]).map(|s| s.to_string()).collect();
        args.push("--data-dir".into());
        args.push(server_data_dir.to_string_lossy().into_owned());
        args.extend(extra.iter().map(|s| s.to_string()));
        let log = dir.path().join("cache.log");
        let mut me = CacheProcess { child: None, bin: fedctl_bin.to_path_buf(), args, port, log, _dir: dir };
        me.spawn()?;
        Ok(me)
    }

    /// Spawns the process again with the same flags (after [`CacheProcess::kill`]).
    pub fn spawn(&mut self) -> std::io::Result<()> {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let err = out.try_clone()?;
        let child = Command::new(&self.bin).args(&self.args).env("RUST_LOG", "warn").stdin(Stdio::null()).stdout(Stdio::from(out)).stderr(Stdio::from(err)).spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Kills the process with SIGKILL (by its pid) and reaps it; no-op when not running.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits (at most `timeout`) until its port accepts connections. Error: timed out.
    pub fn wait_listening(&self, timeout: Duration) -> std::io::Result<()> {
        wait_port(self.port, timeout)
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The running child's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Resident set size in KiB, if running and readable.
    pub fn rss_kib(&self) -> Option<u64> {
        self.pid().and_then(rss_kib)
    }

    /// The last `lines` lines of its log (for error messages).
    pub fn log_tail(&self, lines: usize) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let v: Vec<&str> = s.lines().collect();
        v[v.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for CacheProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Registers fedsim member `m` with the federation at `base` (see [`register_member_at`]).
pub async fn register_member(http: &reqwest::Client, base: &str, m: &FedsimProcess) -> Result<(), String> {
    register_member_at(http, base, &m.name, &m.url, &m.kubeconfig, None).await
}

/// Registers member `name` (API at `url`, admin kubeconfig `kubeconfig`) with the federation
/// at `base` the way `fedctl join` and the agent would: its `fed-exec-<name>` namespace, a
/// credential Secret (token, CA, server URL) and a `Cluster` naming it (in `zone`, when
/// given). Errors: transport errors; answers are not checked (an existing object is fine).
pub async fn register_member_at(http: &reqwest::Client, base: &str, name: &str, url: &str, kubeconfig: &Path, zone: Option<&str>) -> Result<(), String> {
    use base64::Engine;
    let kc = fedctl::pki::kubeconfig::Kubeconfig::load(kubeconfig).map_err(|e| e.to_string())?;
    let token = kc.current_user().map_err(|e| e.to_string())?.resolved_token().map_err(|e| e.to_string())?.unwrap_or_default();
    let ca = kc.current_cluster().map_err(|e| e.to_string())?.ca_pem().map_err(|e| e.to_string())?.unwrap_or_default();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ns = format!("fed-exec-{name}");
    let mut cluster = serde_json::json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name}, "spec": {"apiEndpoint": url, "secretRef": {"namespace": ns, "name": "member-credential"}}});
    if let Some(z) = zone {
        cluster["spec"]["zone"] = serde_json::json!(z);
    }
    for (path, body) in [
        ("/api/v1/namespaces".to_string(), serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
        (
            format!("/api/v1/namespaces/{ns}/secrets"),
            serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "member-credential"}, "data": {"token": b64(&token), "ca.crt": b64(&ca), "server": b64(url)}}),
        ),
        ("/apis/cluster.fedctl.io/v1alpha1/clusters".to_string(), cluster),
    ] {
        http.post(format!("{base}{path}")).json(&body).send().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
