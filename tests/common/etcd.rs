//! A real, throw-away etcd server for integration tests: own ports, own data dir, killed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long `start` waits for etcd to report healthy before giving up.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One single-member etcd process listening on loopback ports picked at random.
///
/// The data directory lives as long as the value, so [`EtcdServer::stop`] followed by
/// [`EtcdServer::start`] restarts the same member with its data (an outage, not a wipe).
/// Dropping the value kills the process (by its own pid) and removes the data directory.
pub struct EtcdServer {
    binary: PathBuf,
    data_dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    extra_args: Vec<String>,
    child: Option<Child>,
}

impl EtcdServer {
    /// Starts a fresh etcd and waits until it answers `/health`. Panics when the binary is
    /// missing or the server does not come up (the panic message carries its log).
    pub fn start_new() -> Self {
        Self::start_with_args(&[])
    }

    /// Like [`EtcdServer::start_new`], passing `extra` flags to etcd (e.g.
    /// `--quota-backend-bytes=…`); they are reused on every restart.
    pub fn start_with_args(extra: &[&str]) -> Self {
        let binary = find_etcd_binary();
        let mut last_err = String::new();
        // Ports are picked by binding port 0 and releasing it; another process may grab one
        // in between, so retry a few times with new ports.
        for _ in 0..3 {
            let data_dir = tempfile::Builder::new().prefix("fedctl-etcd-").tempdir().expect("create etcd data dir");
            let (client_port, peer_port) = (free_port(), free_port());
            let mut server = EtcdServer { binary: binary.clone(), data_dir, client_port, peer_port, extra_args: extra.iter().map(|s| s.to_string()).collect(), child: None };
            match server.try_start() {
                Ok(()) => return server,
                Err(e) => last_err = e,
            }
        }
        panic!("could not start etcd: {last_err}");
    }

    /// Client URL, e.g. `http://127.0.0.1:41234`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The client URL as a one-element list (the shape `EtcdStorage::connect` takes).
    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    /// Data directory of this member.
    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// Whether the process is currently running (started and not stopped).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the process (SIGKILL, like a crash) and waits for it to exit. The data stays.
    /// No-op when already stopped.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the process (SIGSTOP to its own pid): etcd keeps its sockets but answers
    /// nothing, the hang case a crash does not show. [`EtcdServer::resume`] thaws it; dropping
    /// a paused server still kills it.
    pub fn pause(&mut self) {
        self.signal("-STOP");
        // kill(2) only queues the signal: wait until every thread of etcd is stopped, so a
        // request sent after this returns cannot be answered
        let pid = self.child.as_ref().expect("etcd is running").id();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let states: Vec<String> =
                std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.flatten().filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok()).collect()).unwrap_or_default();
            let state = |stat: &String| stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
            if !states.is_empty() && states.iter().all(|s| matches!(state(s), Some('T') | Some('t'))) {
                return;
            }
            assert!(Instant::now() < deadline, "etcd (pid {pid}) not stopped 5 s after SIGSTOP: thread states {:?}", states.iter().map(state).collect::<Vec<_>>());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Thaws a paused process (SIGCONT).
    pub fn resume(&mut self) {
        self.signal("-CONT");
    }

    fn signal(&mut self, sig: &str) {
        let pid = self.child.as_ref().expect("etcd is running").id();
        let status = Command::new("kill").arg(sig).arg(pid.to_string()).status().expect("run kill");
        assert!(status.success(), "kill {sig} {pid} failed");
    }

    /// Restarts the member on the same ports with the same data directory and waits until it
    /// is healthy. Panics if it does not come up. No-op when already running.
    pub fn start(&mut self) {
        if self.is_running() {
            return;
        }
        if let Err(e) = self.try_start() {
            panic!("could not restart etcd: {e}");
        }
    }

    fn log_path(&self) -> PathBuf {
        // Outside the member directory so etcd does not complain about unknown files.
        self.data_dir.path().join("etcd.log")
    }

    fn try_start(&mut self) -> Result<(), String> {
        let client_url = self.endpoint();
        let peer_url = format!("http://127.0.0.1:{}", self.peer_port);
        let member_dir = self.data_dir.path().join("member-data");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).map_err(|e| format!("open etcd log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| format!("clone log handle: {e}"))?;
        let child = Command::new(&self.binary)
            .arg("--name")
            .arg("default")
            .arg("--data-dir")
            .arg(&member_dir)
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(format!("default={peer_url}"))
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.binary.display()))?;
        self.child = Some(child);

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("etcd exited with {status}; log:\n{}", self.log_tail()));
                }
            }
            if health_ok(self.client_port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(format!("etcd not healthy after {START_TIMEOUT:?}; log:\n{}", self.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `$ETCD_BIN`, else `etcd` on `PATH`, else `/usr/bin/etcd`. Panics when none exists.
fn find_etcd_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("ETCD_BIN") {
        return PathBuf::from(p);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("etcd");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    let fallback = PathBuf::from("/usr/bin/etcd");
    if fallback.is_file() {
        return fallback;
    }
    panic!("etcd binary not found (set ETCD_BIN or put etcd on PATH)");
}

/// A loopback TCP port that was free a moment ago.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// Plain HTTP/1.0 `GET /health` against the client port; true when etcd reports healthy.
fn health_ok(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.") && response.contains("\"health\":\"true\"")
}
