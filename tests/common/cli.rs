//! Running the `fedctl` binary's client commands (`join`, `unjoin`, `token`) from tests, bounded in time.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Bound on one invocation.
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// Output of one run.
#[derive(Debug)]
pub struct CliRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CliRun {
    /// Asserts exit code 0; returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "fedctl failed\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        &self.stdout
    }

    /// Asserts a non-zero exit; returns stderr.
    #[track_caller]
    pub fn failed(&self) -> &str {
        assert!(matches!(self.code, Some(c) if c != 0), "fedctl should have failed\nstdout: {}\nstderr: {}", self.stdout, self.stderr);
        &self.stderr
    }
}

/// Runs `fedctl <args>`; the child is killed (by its own pid) and the test fails after
/// [`RUN_TIMEOUT`].
pub fn fedctl(args: &[&str]) -> CliRun {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fedctl"))
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("FEDCTL_TOKEN")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fedctl");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + RUN_TIMEOUT;
    let code = loop {
        match child.try_wait().expect("wait fedctl") {
            Some(status) => break status.code(),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("fedctl {args:?} still running after {RUN_TIMEOUT:?}");
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    CliRun { code, stdout: out_t.join().unwrap_or_default(), stderr: err_t.join().unwrap_or_default() }
}
