//! Finding and running specific kubectl versions (`kubectl.1.NN`) against a test server, bounded in time.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bound on one kubectl invocation.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Locates `kubectl.<version>` (e.g. `kubectl.1.27`): in `$FEDCTL_KUBECTL_DIR` if set, else
/// next to the resolved `kubectl` on `PATH` (the google-cloud-sdk dispatcher is a symlink into
/// the folder holding the versioned binaries), else anywhere on `PATH`.
pub fn find_kubectl(version: &str) -> Option<PathBuf> {
    let file = format!("kubectl.{version}");
    if let Some(dir) = std::env::var_os("FEDCTL_KUBECTL_DIR") {
        let p = PathBuf::from(dir).join(&file);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    for dir in &dirs {
        let dispatcher = dir.join("kubectl");
        if let Ok(real) = std::fs::canonicalize(&dispatcher) {
            if let Some(parent) = real.parent() {
                let p = parent.join(&file);
                if p.is_file() {
                    return Some(p);
                }
            }
        }
    }
    dirs.iter().map(|d| d.join(&file)).find(|p| p.is_file())
}

/// kubectl 1.27 and 1.33 against `kubeconfig`, each with its own discovery cache under `dir`
/// (named after the kubeconfig file, so several users' kubectls can share `dir`). Panics when
/// either version is missing: the tests that use it need both.
pub fn oldest_and_newest(kubeconfig: &Path, dir: &Path) -> Vec<Kubectl> {
    ["1.27", "1.33"]
        .iter()
        .map(|v| {
            let bin = find_kubectl(v).unwrap_or_else(|| panic!("kubectl {v} next to kubectl on PATH"));
            let cache = dir.join(format!("kubectl-{v}-{}", kubeconfig.file_name().unwrap().to_string_lossy()));
            std::fs::create_dir_all(&cache).unwrap();
            Kubectl::new(bin, v, kubeconfig, &cache)
        })
        .collect()
}

/// Output of one kubectl run.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts exit code 0; returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "kubectl failed\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        &self.stdout
    }

    /// Asserts a non-zero exit code; returns stderr.
    #[track_caller]
    pub fn failed(&self) -> &str {
        assert_ne!(self.code, Some(0), "kubectl succeeded but should not\nstdout: {}", self.stdout);
        &self.stderr
    }

    /// Asserts exit code 0 and parses stdout as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        let out = self.ok();
        serde_json::from_str(out).unwrap_or_else(|e| panic!("kubectl output is not JSON ({e}): {out}"))
    }
}

/// One kubectl binary bound to one kubeconfig (and a private discovery cache directory).
pub struct Kubectl {
    pub bin: PathBuf,
    pub version: String,
    kubeconfig: PathBuf,
    cache_dir: PathBuf,
}

impl Kubectl {
    /// `bin` talking to the server of `kubeconfig`; kubectl's cache goes to `cache_dir`.
    pub fn new(bin: PathBuf, version: &str, kubeconfig: &Path, cache_dir: &Path) -> Self {
        Kubectl { bin, version: version.to_string(), kubeconfig: kubeconfig.to_path_buf(), cache_dir: cache_dir.to_path_buf() }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig").arg(&self.kubeconfig).arg("--cache-dir").arg(&self.cache_dir).args(args);
        c.env_remove("KUBECONFIG").env("HOME", &self.cache_dir);
        c
    }

    /// Runs kubectl with `args`; killed (and the test failed) after [`RUN_TIMEOUT`].
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with_stdin(args, None)
    }

    /// Runs kubectl with `stdin` fed to it (for `apply -f -`).
    pub fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Run {
        self.run_env(args, stdin, &[])
    }

    /// Runs kubectl with extra environment variables (e.g. `KUBE_EDITOR` for `edit`).
    pub fn run_env(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
        let mut cmd = self.command(args);
        cmd.envs(env.iter().copied());
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", self.bin.display()));
        let out = collect(child.stdout.take().expect("stdout"));
        let err = collect(child.stderr.take().expect("stderr"));
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("stdin pipe");
            pipe.write_all(input.as_bytes()).expect("write kubectl stdin");
            // dropping the pipe closes kubectl's stdin
        }
        let deadline = Instant::now() + RUN_TIMEOUT;
        let code = loop {
            match child.try_wait().expect("wait kubectl") {
                Some(status) => break status.code(),
                None if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("kubectl {args:?} still running after {RUN_TIMEOUT:?}; stderr: {}", take(&err));
                }
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        // the pipes close when the process exits; give the readers a moment to drain
        let (stdout, stderr) = (join(out), join(err));
        Run { code, stdout, stderr }
    }

    /// Starts kubectl in the background (e.g. `get -w`); its stdout is collected as it comes.
    pub fn spawn(&self, args: &[&str]) -> Background {
        let mut cmd = self.command(args);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", self.bin.display()));
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        pump(child.stdout.take().expect("stdout"), stdout.clone());
        pump(child.stderr.take().expect("stderr"), stderr.clone());
        Background { child: Some(child), stdout, stderr }
    }
}

type Reader = (Arc<Mutex<String>>, std::thread::JoinHandle<()>);

fn collect<R: Read + Send + 'static>(r: R) -> Reader {
    let buf = Arc::new(Mutex::new(String::new()));
    let h = pump(r, buf.clone());
    (buf, h)
}

fn pump<R: Read + Send + 'static>(mut r: R, buf: Arc<Mutex<String>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.lock().unwrap().push_str(&String::from_utf8_lossy(&chunk[..n])),
            }
        }
    })
}

fn take(r: &Reader) -> String {
    r.0.lock().unwrap().clone()
}

fn join(r: Reader) -> String {
    let (buf, h) = r;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !h.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = buf.lock().unwrap().clone();
    s
}

/// A kubectl process running in the background; killed (its own pid only) on drop.
pub struct Background {
    child: Option<Child>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Background {
    /// What it has printed so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// What it has printed to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until `pred(stdout)` holds; false after `timeout`.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if pred(&self.stdout()) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process has exited (by itself).
    pub fn exited(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// Kills the process and returns its stdout.
    pub fn stop(&mut self) -> String {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stdout()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}
