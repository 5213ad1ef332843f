//! `fedctl agent`: the work-agent of one member cluster (cluster-status, exec and
//! cert-rotation controllers). Its configuration is written by `fedctl join`. Uses `api`,
//! `pki`, `http` and `telemetry` (see the layering in `src/lib.rs`).
//!
//! The agent talks to the member cluster's API and to the federation's, both with kube-rs.
//! Three controllers run, one tokio task each, as level-triggered reconcile loops that retry
//! with exponential backoff (mirrors Karmada's `karmada-agent`):
//! - [`status`]: registers the member's `Cluster`, renews its heartbeat `Lease` and reports
//!   its status, with node and resource summaries from informers over the member's nodes and
//!   pods ([`summary`]); the member credential Secret is synced by its own loop ([`credential`]);
//! - [`exec`]: applies the manifests of the `Work` objects in the member's exec namespace
//!   `fed-exec-<cluster>` to the member and reports their status back;
//! - [`certs`]: renews the agent's client certificate through a CSR before it expires and
//!   swaps the federation clients of all controllers.
//!
//! Borg's rule holds throughout: losing the federation (unreachable, restarted, the agent
//! itself restarted) never deletes anything on the member. Only an explicit `Work` deletion
//! or the removal of a manifest from a `Work` deletes member objects.

pub mod certs;
pub mod client;
pub mod config;
pub mod credential;
pub mod exec;
pub mod metrics;
pub mod quantity;
pub mod status;
pub mod summary;
pub mod watch;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use kube::core::{ApiResource, GroupVersionKind};
use tracing::Instrument as _;

use client::{FedHandle, MemberClient};
use config::AgentConfig;

/// Field manager of everything the agent writes (server-side apply on the member too).
pub const FIELD_MANAGER: &str = "fedctl";

/// Errors that stop the agent from starting. Once running, the controllers never stop on
/// errors: they log, back off and retry.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration directory is unusable.
    #[error("config: {0}")]
    Config(#[from] config::ConfigError),
    /// A client could not be built (unreadable or invalid certificate, key, kubeconfig).
    #[error("{0}")]
    Client(#[from] client::ClientError),
    /// The configuration names no cluster.
    #[error("config: clusterName is empty")]
    NoClusterName,
    /// The metrics listener could not be bound.
    #[error("{0}")]
    Metrics(#[from] metrics::MetricsError),
}

/// The agent's metrics listener (`fedctl agent --metrics-bind-address`).
#[derive(Clone, Debug, Default)]
pub struct MetricsOptions {
    /// Address to serve HTTPS `/metrics` on, e.g. `127.0.0.1:9464` (port 0 picks one); empty:
    /// no listener.
    pub bind_address: String,
    /// Its serving certificate (self-signed at start-up unless files are given).
    pub cert: metrics::MetricsCert,
}

/// `cluster.fedctl.io/v1alpha1` `Cluster` (cluster-scoped).
pub fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("cluster.fedctl.io", "v1alpha1", "Cluster"), "clusters")
}

/// `work.fedctl.io/v1alpha1` `Work` (namespaced).
pub fn work_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("work.fedctl.io", "v1alpha1", "Work"), "works")
}

/// `coordination.k8s.io/v1` `Lease` (namespaced).
pub fn lease_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"), "leases")
}

/// What the controllers share.
pub struct Shared {
    /// The configuration (`agent.yaml`).
    pub config: AgentConfig,
    /// The configuration directory (certificate and key are renewed in place there).
    pub dir: PathBuf,
    /// `fed-exec-<cluster>`.
    pub exec_namespace: String,
    /// The member cluster.
    pub member: MemberClient,
    /// The current federation clients.
    pub fed: FedHandle,
    /// Publishes federation client swaps (cert rotation).
    pub fed_tx: tokio::sync::watch::Sender<client::FedClients>,
    /// True while the cluster-status controller has confirmed that the `Cluster` named
    /// after this member belongs to it (same `spec.id`); the exec controller waits for it.
    pub registered: tokio::sync::watch::Sender<bool>,
    /// When the heartbeat Lease was last renewed (the agent reports `Ready` only while its
    /// heartbeat flows; otherwise the federation's verdict stands). A watch: the status
    /// report after registration waits for the first renewal, so that it reports `Ready`.
    pub last_heartbeat: tokio::sync::watch::Sender<Option<std::time::Instant>>,
    /// When the member's node and pod informers may start (see [`RunOptions::informers_after`]);
    /// `None`: at once.
    pub informers_after: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Shared {
    /// Waits until the `Cluster` is confirmed as this member's (see [`Shared::registered`]).
    pub async fn wait_registered(&self) {
        let mut rx = self.registered.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }
}

/// How [`run_with`] runs an agent beyond its configuration directory.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Serve `/metrics` (see [`run`]).
    pub metrics: Option<MetricsOptions>,
    /// Hold the member's node and pod informers ([`summary`]) until this reads `true`: the
    /// agent registers and heartbeats from its member's identity alone meanwhile, and its
    /// status carries no summaries. For benchmarks that run many agents in one process, to
    /// measure registration apart from the members' initial LISTs (which real members pay on
    /// their own machines). `None`: the informers start at once.
    pub informers_after: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Runs the agent from the configuration directory `config_dir` until `shutdown` resolves.
///
/// Errors only at start (see [`AgentError`]); afterwards every failure is retried. A
/// controller that panics is logged and restarted after a second.
///
/// With `metrics` it serves `/metrics` over HTTPS at [`MetricsOptions::bind_address`] (see
/// [`metrics::start_agent_metrics`] and [`crate::telemetry::metrics::AgentMetrics`]) and prints
/// `metrics: https://ADDR/metrics` and `metrics certificate: sha256:HEX` on stdout.
pub async fn run(config_dir: &Path, metrics: Option<&MetricsOptions>, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    run_with(config_dir, RunOptions { metrics: metrics.cloned(), informers_after: None }, shutdown).await
}

/// [`run`] with [`RunOptions`].
pub async fn run_with(config_dir: &Path, options: RunOptions, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    let RunOptions { metrics, informers_after } = options;
    let metrics = metrics.as_ref();
    let config = AgentConfig::load(config_dir)?;
    if config.cluster_name.is_empty() {
        return Err(AgentError::NoClusterName);
    }
    let mut metrics_task = None;
    if let Some(m) = metrics.filter(|m| !m.bind_address.is_empty()) {
        let l = metrics::start_agent_metrics(&m.bind_address, &m.cert).await?;
        tracing::info!(address = %l.address, cert_sha256 = %l.cert_sha256, "serving metrics over HTTPS");
        println!("metrics: https://{}/metrics", l.address);
        println!("metrics certificate: {}", l.cert_sha256);
        metrics_task = Some(l.task);
    }
    let fed = client::federation_clients(config_dir, &config, 0)?;
    let member = client::member_client(&config.member_kubeconfig).await?;
    let (fed_tx, fed_rx) = tokio::sync::watch::channel(fed);
    let shared = Arc::new(Shared {
        exec_namespace: crate::api::federation::exec_namespace(&config.cluster_name),
        dir: config_dir.to_path_buf(),
        member,
        fed: fed_rx,
        fed_tx,
        registered: tokio::sync::watch::channel(false).0,
        last_heartbeat: tokio::sync::watch::channel(None).0,
        informers_after,
        config,
    });
    tracing::info!(
        cluster = %shared.config.cluster_name,
        federation = %shared.config.federation_server,
        member = %shared.member.server,
        "fedctl agent starting"
    );
    // every controller logs inside a span naming its cluster, so that the logs of several
    // agents sharing one process (a benchmark) can be told apart; at the error level so that
    // no log filter drops it while keeping the events inside
    let span = tracing::error_span!("agent", cluster = %shared.config.cluster_name);
    let tasks = [
        tokio::spawn(supervise("cluster-status", shared.clone(), |s| status::run(s).boxed()).instrument(span.clone())),
        tokio::spawn(supervise("credential", shared.clone(), |s| credential::run(s).boxed()).instrument(span.clone())),
        tokio::spawn(supervise("exec", shared.clone(), |s| exec::run(s).boxed()).instrument(span.clone())),
        tokio::spawn(supervise("cert-rotation", shared.clone(), |s| certs::run(s).boxed()).instrument(span)),
    ];
    shutdown.await;
    tracing::info!("fedctl agent stopping");
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        let _ = t.await;
    }
    if let Some(t) = metrics_task {
        t.abort();
    }
    Ok(())
}

/// Runs one controller, restarting it (after a second) if it panics.
async fn supervise(name: &'static str, shared: Arc<Shared>, start: impl Fn(Arc<Shared>) -> futures::future::BoxFuture<'static, ()>) {
    loop {
        match std::panic::AssertUnwindSafe(start(shared.clone())).catch_unwind().await {
            Ok(()) => return,
            Err(_) => {
                tracing::error!(controller = name, "controller panicked; restarting it");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Exponential backoff with ±20% jitter (mirrors client-go's `wait.Backoff`).
#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Starts at `base`, doubles per failure, never exceeds `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max, next: base }
    }

    /// The delay before the next retry (and doubles the one after).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        let jitter = rand::random_range(0.8..1.2);
        d.mul_f64(jitter).min(self.max)
    }

    /// Back to `base` after a success.
    pub fn reset(&mut self) {
        self.next = self.base;
    }
}

/// Now as RFC 3339 with second precision (`metav1.Time`), e.g. `2024-05-01T10:00:00Z`.
pub fn now_time() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Now as RFC 3339 with microseconds (`metav1.MicroTime`), e.g. `2024-05-01T10:00:00.123456Z`.
pub fn now_micro_time() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The HTTP status of a kube-rs API error (`None` for transport errors).
pub fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_max() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let ds: Vec<Duration> = (0..6).map(|_| b.next_delay()).collect();
        assert!(ds[0] >= Duration::from_millis(80) && ds[0] <= Duration::from_millis(120));
        assert!(ds[1] >= Duration::from_millis(160));
        assert!(ds[5] <= Duration::from_secs(1));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(120));
    }

    #[test]
    fn times_have_kube_shapes() {
        let t = now_time();
        assert!(chrono::DateTime::parse_from_rfc3339(&t).is_ok() && t.ends_with('Z') && !t.contains('.'));
        let m = now_micro_time();
        assert!(chrono::DateTime::parse_from_rfc3339(&m).is_ok());
        assert_eq!(m.split('.').nth(1).unwrap().len(), 7, "{m}");
    }
}
