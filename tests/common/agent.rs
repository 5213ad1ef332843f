//! A real `fedctl agent` process for integration tests: run on a config directory (as
//! `fedctl join` writes it), logging to a file, killed (by its own pid) on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// One `fedctl agent --config DIR` child process.
pub struct AgentProcess {
    config_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl AgentProcess {
    /// Starts the agent on `config_dir`, logging (at debug for the agent) to `log`.
    pub fn start(config_dir: &Path, log: &Path) -> Self {
        let mut a = AgentProcess { config_dir: config_dir.to_path_buf(), log: log.to_path_buf(), child: None };
        a.spawn();
        a
    }

    fn spawn(&mut self) {
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("open agent log");
        let err = out.try_clone().expect("clone log handle");
        let child = Command::new(env!("CARGO_BIN_EXE_fedctl"))
            .arg("agent")
            .arg("--config")
            .arg(&self.config_dir)
            .arg("--metrics-bind-address")
            .arg("127.0.0.1:0")
            .env("RUST_LOG", "info,fedctl::agent=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("spawn fedctl agent");
        self.child = Some(child);
    }

    /// Kills the agent (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again after [`AgentProcess::kill`]; no-op while it runs.
    pub fn restart(&mut self) {
        if self.child.is_none() {
            self.spawn();
        }
    }

    /// Panics (with the log) if the process has exited.
    pub fn assert_alive(&mut self) {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                self.child = None;
                panic!("fedctl agent exited with {status}; log:\n{}", self.log_tail(60));
            }
        }
    }

    /// Path of the log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The `/metrics` URL of the running agent (it logs it at start), once it is known.
    pub fn metrics_url(&self) -> Option<String> {
        self.log().lines().rev().find_map(|l| l.strip_prefix("metrics: ").map(|u| u.trim().to_string()))
    }

    /// The `sha256:HEX` fingerprint of the metrics listener's serving certificate (it logs
    /// it at start), once it is known.
    pub fn metrics_cert_sha256(&self) -> Option<String> {
        self.log().lines().rev().find_map(|l| l.strip_prefix("metrics certificate: ").map(|u| u.trim().to_string()))
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for AgentProcess {
    /// Kills the agent; with `FEDCTL_TEST_AGENT_LOG` set, prints its whole log first.
    fn drop(&mut self) {
        self.kill();
        if std::env::var_os("FEDCTL_TEST_AGENT_LOG").is_some() {
            eprintln!("---- agent log {} ----\n{}", self.log.display(), self.log());
        }
    }
}
