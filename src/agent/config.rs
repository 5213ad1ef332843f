//! The agent's configuration directory, written by `fedctl join` and read by `fedctl agent`.
//!
//! Layout of `DIR`:
//! - `agent.yaml` — [`AgentConfig`];
//! - `federation-ca.crt` — the federation's CA (pinned at join by its hash);
//! - `agent.crt`, `agent.key` (0600) — the agent's client certificate, CN
//!   `system:fedctl:agent:<cluster>`, renewed in place by the cert-rotation controller.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name of the config document inside the directory.
pub const CONFIG_FILE: &str = "agent.yaml";
/// File name of the federation CA certificate.
pub const CA_FILE: &str = "federation-ca.crt";
/// File name of the agent's client certificate.
pub const CERT_FILE: &str = "agent.crt";
/// File name of the agent's client key (mode 0600).
pub const KEY_FILE: &str = "agent.key";
/// CSR signer for agent client certificates.
pub const AGENT_SIGNER: &str = "fedctl.io/agent-client";
/// Common-name prefix of agent identities: `system:fedctl:agent:<cluster>`.
pub const AGENT_USER_PREFIX: &str = "system:fedctl:agent:";
/// Group of all agents.
pub const AGENTS_GROUP: &str = "system:fedctl:agents";

/// Errors reading or writing the config directory.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// `agent.yaml` is not valid.
    #[error("{path}: {source}")]
    Yaml { path: PathBuf, source: serde_yaml::Error },
}

/// `agent.yaml`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AgentConfig {
    /// Member cluster name (the Cluster object's name).
    pub cluster_name: String,
    /// Federation API URL, e.g. `https://127.0.0.1:6443`.
    pub federation_server: String,
    /// Path of the member cluster's kubeconfig (absolute, or relative to the directory).
    pub member_kubeconfig: PathBuf,
    /// Labels for the Cluster object.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Availability zone of the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Region of the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Seconds between heartbeat Lease renewals (default 10).
    #[serde(default = "default_heartbeat")]
    pub heartbeat_interval_seconds: u64,
    /// Seconds between cluster status reports (a probe of the member — version, identity,
    /// discovery — and a patch of the Cluster's status with the node and pod summaries its
    /// informers keep); unset: the heartbeat interval. Mirrors karmada-agent's
    /// `--cluster-status-update-frequency`, kept apart from the Lease renewal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_status_update_seconds: Option<u64>,
    /// How many Works the exec-controller reconciles at once (default 5; mirrors
    /// karmada-agent's `--concurrent-work-syncs`). One Work is never reconciled by two
    /// workers at the same time, and its manifests are applied in order.
    #[serde(default = "default_work_syncs")]
    pub concurrent_work_syncs: usize,
}

fn default_heartbeat() -> u64 {
    10
}

fn default_work_syncs() -> usize {
    5
}

impl AgentConfig {
    /// Reads `DIR/agent.yaml`; a relative `member_kubeconfig` is resolved against `DIR`.
    pub fn load(dir: &Path) -> Result<Self, ConfigError> {
        let path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io { path: path.clone(), source })?;
        let mut c: AgentConfig = serde_yaml::from_str(&text).map_err(|source| ConfigError::Yaml { path, source })?;
        if c.member_kubeconfig.is_relative() {
            c.member_kubeconfig = dir.join(&c.member_kubeconfig);
        }
        Ok(c)
    }

    /// Writes `DIR/agent.yaml` (creating `DIR`, mode 0700).
    pub fn write(&self, dir: &Path) -> Result<(), ConfigError> {
        std::fs::create_dir_all(dir).map_err(|source| ConfigError::Io { path: dir.into(), source })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        let path = dir.join(CONFIG_FILE);
        let text = serde_yaml::to_string(self).map_err(|source| ConfigError::Yaml { path: path.clone(), source })?;
        std::fs::write(&path, text).map_err(|source| ConfigError::Io { path, source })
    }

    /// Path of the federation CA file in `dir`.
    pub fn ca_path(dir: &Path) -> PathBuf {
        dir.join(CA_FILE)
    }
    /// Path of the client certificate in `dir`.
    pub fn cert_path(dir: &Path) -> PathBuf {
        dir.join(CERT_FILE)
    }
    /// Path of the client key in `dir`.
    pub fn key_path(dir: &Path) -> PathBuf {
        dir.join(KEY_FILE)
    }
}
