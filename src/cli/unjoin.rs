//! `fedctl unjoin`: removes a member from the federation — its Works, exec namespace and Cluster — leaving its workloads running unless asked.
//!
//! The CLI records the workload policy on the Cluster (annotation
//! [`WORKLOAD_DELETION_ANNOTATION`]: `Orphan` by default, `Delete` with `--delete-workloads`),
//! deletes the Cluster and waits (bounded) until the server's cluster-controller has removed
//! the Works, the exec namespace and finally the Cluster (see `server::cluster`). With
//! `Orphan` the controller strips the Works' finalizers itself when the agent is gone (or
//! after one grace period), so unjoin finishes without an agent; with `Delete` it waits for
//! the agent to delete the member workloads and release each Work. Running unjoin again
//! without `--delete-workloads` switches a stuck `Delete` to `Orphan`.
//!
//! The agent keeps its certificate: stop it (or it registers the Cluster again).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::api::federation::{cluster_path, exec_namespace, valid_cluster_name, works_path, DELETION_DELETE, DELETION_ORPHAN, WORKLOAD_DELETION_ANNOTATION};
use crate::cli::client::{Client, ClientError};

/// Default bound on waiting for the teardown.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Errors of `fedctl unjoin`.
#[derive(Debug, thiserror::Error)]
pub enum UnjoinError {
    /// The name cannot be a cluster's.
    #[error("invalid cluster name {0:?}")]
    InvalidName(String),
    /// No such Cluster and nothing left of it.
    #[error("cluster {0:?} is not joined")]
    NotJoined(String),
    /// An API call failed.
    #[error("{0}")]
    Api(#[from] ClientError),
    /// The teardown did not finish in time; says what is left.
    #[error("cluster {name:?} not removed after {}s: {left}", .timeout.as_secs())]
    Timeout {
        /// The cluster.
        name: String,
        /// The bound.
        timeout: Duration,
        /// What remains (Works with finalizers, the namespace, the Cluster).
        left: String,
    },
}

/// Configuration of `fedctl unjoin` (from flags; see `cmd/fedctl`).
#[derive(Clone, Debug)]
pub struct Config {
    /// Member cluster name.
    pub cluster_name: String,
    /// Admin kubeconfig of the federation.
    pub kubeconfig: PathBuf,
    /// Ask the agent to delete the member workloads the Works created.
    pub delete_workloads: bool,
    /// Bound on waiting for the teardown.
    pub timeout: Duration,
}

/// Runs the unjoin (see the module docs). Prints progress to stdout.
pub async fn run(cfg: Config) -> Result<(), UnjoinError> {
    let name = &cfg.cluster_name;
    if !valid_cluster_name(name) {
        return Err(UnjoinError::InvalidName(name.clone()));
    }
    let client = Client::from_kubeconfig(&cfg.kubeconfig)?;
    let policy = if cfg.delete_workloads { DELETION_DELETE } else { DELETION_ORPHAN };
    let ns_path = format!("/api/v1/namespaces/{}", exec_namespace(name));
    match client.get_opt(&cluster_path(name)).await? {
        Some(_) => {
            client.merge_patch(&cluster_path(name), &json!({"metadata": {"annotations": {WORKLOAD_DELETION_ANNOTATION: policy}}})).await?;
            client.delete(&cluster_path(name)).await?;
            println!("cluster {name:?} deleted (workloads: {}); waiting for its Works and exec namespace to go", if cfg.delete_workloads { "delete" } else { "keep" });
        }
        None => {
            if client.get_opt(&ns_path).await?.is_none() {
                return Err(UnjoinError::NotJoined(name.clone()));
            }
            println!("cluster {name:?} is gone; waiting for its exec namespace to go");
        }
    }
    let deadline = tokio::time::Instant::now() + cfg.timeout;
    loop {
        let cluster = client.get_opt(&cluster_path(name)).await?;
        let ns = client.get_opt(&ns_path).await?;
        let works = match &ns {
            Some(_) => client.get_opt(&works_path(name)).await?.and_then(|l| l.get("items").and_then(Value::as_array).cloned()).unwrap_or_default(),
            None => vec![],
        };
        if cluster.is_none() && ns.is_none() {
            println!("cluster {name:?} unjoined; stop its agent (it would register the cluster again)");
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let mut left = Vec::new();
            if !works.is_empty() {
                let names: Vec<&str> = works.iter().filter_map(|w| w.pointer("/metadata/name").and_then(Value::as_str)).collect();
                left.push(format!(
                    "{} Work(s) held by finalizers ({}){}",
                    works.len(),
                    names.join(", "),
                    if cfg.delete_workloads { " — is the agent running? run unjoin without --delete-workloads to leave the workloads and finish" } else { "" }
                ));
            }
            if ns.is_some() {
                left.push(format!("namespace {}", exec_namespace(name)));
            }
            if cluster.is_some() {
                left.push("the Cluster object".into());
            }
            return Err(UnjoinError::Timeout { name: name.clone(), timeout: cfg.timeout, left: left.join("; ") });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
