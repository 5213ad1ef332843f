//! Prometheus metrics of `fedctl server` and `fedctl agent`, served at `/metrics` in the
//! Prometheus text format (0.0.4); uses no other fedctl module.
//!
//! Names follow kube-apiserver / client-go where a counterpart exists
//! (`apiserver_request_total`, `apiserver_request_duration_seconds`,
//! `apiserver_longrunning_requests`, `workqueue_depth`, `workqueue_adds_total`,
//! `leader_election_master_status`); fedctl's own are prefixed `fedctl_`. Each process kind
//! has its own registry ([`server`], [`agent`]); the metric handles are cheap clones sharing
//! the registered values.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// `Content-Type` of a `/metrics` answer (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Labels of one API request (kube-apiserver's `apiserver_request_total` labels, without
/// `scope` and `component`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Upper-case verb as kube-apiserver reports it: `GET`, `LIST`, `WATCH`, `CREATE`,
    /// `UPDATE`, `PATCH`, `DELETE`, `DELETECOLLECTION`; for other paths the HTTP method
    /// (`OTHER` for unknown methods).
    pub verb: String,
    /// API group (`""`: core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource; for non-resource paths empty.
    pub resource: String,
    /// Subresource, e.g. `status`.
    pub subresource: String,
    /// HTTP status code.
    pub code: String,
}

/// Labels of a request latency (as [`RequestLabels`] without the code).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    /// See [`RequestLabels::verb`].
    pub verb: String,
    /// API group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
}

/// Labels of open long-running requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    /// Always `WATCH`.
    pub verb: String,
    /// API group (`search.fedctl.io` for the global view).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
}

/// A single `name` label (work queues, controllers, elections).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    /// The name.
    pub name: String,
}

/// A cached kind in one cache shard.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabels {
    /// Shard index.
    pub shard: String,
    /// Plural resource of the member kind.
    pub resource: String,
}

/// One ingest of the global view's cache: a member and a kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IngestLabels {
    /// Member cluster name.
    pub cluster: String,
    /// Plural resource of the member kind.
    pub resource: String,
}

/// A member cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    /// Member cluster name.
    pub cluster: String,
}

/// A Work apply outcome on an agent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `success` or `error`.
    pub result: String,
}

/// A request the global view proxied to a member.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberRequestLabels {
    /// Member cluster name.
    pub cluster: String,
    /// HTTP method sent (`GET`, `PATCH`, …).
    pub method: String,
    /// HTTP status the member answered, `0` when it could not be reached or timed out.
    pub code: String,
}

/// An audit backend (`apiserver_audit_error_total`): `buffered` for events dropped because the
/// writer's queue was full, `log` for events the log file could not take.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    /// `buffered` or `log`.
    pub plugin: String,
}

/// A member, for latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberLatencyLabels {
    /// Member cluster name.
    pub cluster: String,
}

fn latency_histogram() -> Histogram {
    // 1 ms … ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The server's metrics.
pub struct ServerMetrics {
    registry: Registry,
    /// `apiserver_request_total{verb,group,version,resource,subresource,code}`.
    pub requests: Family<RequestLabels, Counter>,
    /// `apiserver_request_duration_seconds{verb,group,version,resource,subresource}`:
    /// time to the response head (a watch: to the start of its stream).
    pub request_duration: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    /// `apiserver_longrunning_requests{verb="WATCH",group,version,resource}`: open watches.
    pub watches: Family<WatchLabels, Gauge>,
    /// `workqueue_depth{name}`: keys waiting in a controller's work queue.
    pub queue_depth: Family<NameLabel, Gauge>,
    /// `workqueue_adds_total{name}`: keys added to a controller's work queue.
    pub queue_adds: Family<NameLabel, Counter>,
    /// `fedctl_controller_reconciles_total{name}`: reconciles run by a controller.
    pub reconciles: Family<NameLabel, Counter>,
    /// `fedctl_controller_reconcile_errors_total{name}`: reconciles that failed (retried).
    pub reconcile_errors: Family<NameLabel, Counter>,
    /// `fedctl_cache_objects{shard,resource}`: objects in the global view's cache.
    pub cache_objects: Family<ShardLabels, Gauge>,
    /// `fedctl_cache_events{shard,resource}`: events kept for watch resumption.
    pub cache_events: Family<ShardLabels, Gauge>,
    /// `fedctl_cache_bytes{shard,resource}`: bytes of the cached objects (compressed bodies
    /// and selector attributes; the index and allocator overhead are not counted).
    pub cache_bytes: Family<ShardLabels, Gauge>,
    /// `fedctl_cluster_ready{cluster}`: 1 when the member's `Ready` condition is True.
    pub cluster_ready: Family<ClusterLabel, Gauge>,
    /// `fedctl_cache_ingest_last_event_timestamp_seconds{cluster,resource}`: Unix time the
    /// member's watch last delivered an event or bookmark (ingest lag ≈ `time() - this`
    /// while the member changes or bookmarks).
    pub ingest_last_event: Family<IngestLabels, Gauge>,
    /// `fedctl_cache_ingest_relists_total{cluster,resource}`: full LISTs of a member's kind
    /// (at start, after 410 Expired).
    pub ingest_relists: Family<IngestLabels, Counter>,
    /// `fedctl_cache_member_stale{cluster}`: 1 while the global view's objects of a member may
    /// be stale (its Cluster is not Ready, or an ingest of it is not connected and synced), 0
    /// when current.
    pub cache_member_stale: Family<ClusterLabel, Gauge>,
    /// `leader_election_master_status{name="fedctl-controllers"}`: 1 while this replica
    /// leads (runs the controllers).
    pub leader: Gauge,
    /// `fedctl_leader_transitions_total`: terms this replica started as leader.
    pub leader_terms: Counter,
    /// `apiserver_terminated_watchers_total`: watchers dropped because they did not read
    /// their events (mirrors kube-apiserver's counter of the same name).
    pub terminated_watchers: Counter,
    /// `fedctl_apiserver_watches_refused_total`: watches refused with 429 because their user
    /// already held the most open watches allowed.
    pub watches_refused: Counter,
    /// `fedctl_global_view_member_requests_total{cluster,method,code}`: requests the global
    /// view sent to a member (proxied, fanned out).
    pub member_requests: Family<MemberRequestLabels, Counter>,
    /// `fedctl_global_view_member_request_duration_seconds{cluster}`: time to the member's
    /// response head.
    pub member_request_duration: Family<MemberLatencyLabels, Histogram, fn() -> Histogram>,
    /// `apiserver_audit_event_total`: audit events generated (mirrors kube-apiserver's).
    pub audit_events: Counter,
    /// `apiserver_audit_error_total{plugin}`: audit events lost — dropped on a full queue
    /// (`buffered`) or not written (`log`); mirrors kube-apiserver's.
    pub audit_errors: Family<PluginLabel, Counter>,
}

/// Counts one request the global view sent to member `cluster` (`code` 0: unreachable or
/// timed out) and its time to the response head.
pub fn observe_member_request(cluster: &str, method: &str, code: u16, elapsed: std::time::Duration) {
    let m = server();
    m.member_requests.get_or_create(&MemberRequestLabels { cluster: cluster.to_string(), method: method.to_string(), code: code.to_string() }).inc();
    m.member_request_duration.get_or_create(&MemberLatencyLabels { cluster: cluster.to_string() }).observe(elapsed.as_secs_f64());
}

impl ServerMetrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("apiserver_request", "Counter of API requests by verb, group, version, resource, subresource and HTTP code", requests.clone());
        let request_duration = Family::<LatencyLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register("apiserver_request_duration_seconds", "Response latency distribution in seconds by verb, group, version, resource and subresource", request_duration.clone());
        let watches = Family::<WatchLabels, Gauge>::default();
        registry.register("apiserver_longrunning_requests", "Number of open long-running requests (watches)", watches.clone());
        let queue_depth = Family::<NameLabel, Gauge>::default();
        registry.register("workqueue_depth", "Current depth of a controller work queue", queue_depth.clone());
        let queue_adds = Family::<NameLabel, Counter>::default();
        registry.register("workqueue_adds", "Keys added to a controller work queue", queue_adds.clone());
        let reconciles = Family::<NameLabel, Counter>::default();
        registry.register("fedctl_controller_reconciles", "Reconciles run by a controller", reconciles.clone());
        let reconcile_errors = Family::<NameLabel, Counter>::default();
        registry.register("fedctl_controller_reconcile_errors", "Reconciles of a controller that failed and are retried", reconcile_errors.clone());
        let cache_objects = Family::<ShardLabels, Gauge>::default();
        registry.register("fedctl_cache_objects", "Objects in the global view's cache by shard and member kind", cache_objects.clone());
        let cache_events = Family::<ShardLabels, Gauge>::default();
        registry.register("fedctl_cache_events", "Events the global view's cache keeps for watch resumption by shard and member kind", cache_events.clone());
        let cache_bytes = Family::<ShardLabels, Gauge>::default();
        registry.register("fedctl_cache_bytes", "Bytes of the objects in the global view's cache (compressed bodies and selector attributes) by shard and member kind", cache_bytes.clone());
        let cluster_ready = Family::<ClusterLabel, Gauge>::default();
        registry.register("fedctl_cluster_ready", "Whether a member cluster is Ready (1) or not (0)", cluster_ready.clone());
        let ingest_last_event = Family::<IngestLabels, Gauge>::default();
        registry.register("fedctl_cache_ingest_last_event_timestamp_seconds", "Unix time a member's watch last delivered an event or bookmark to the global view's cache", ingest_last_event.clone());
        let ingest_relists = Family::<IngestLabels, Counter>::default();
        registry.register("fedctl_cache_ingest_relists", "Full LISTs of a member's kind by the global view's cache", ingest_relists.clone());
        let cache_member_stale = Family::<ClusterLabel, Gauge>::default();
        registry.register("fedctl_cache_member_stale", "Whether the global view's objects of a member may be stale (1) or are current (0)", cache_member_stale.clone());
        let leader_family = Family::<NameLabel, Gauge>::default();
        registry.register("leader_election_master_status", "1 while this replica is the leader of the election", leader_family.clone());
        let leader = leader_family.get_or_create(&NameLabel { name: "fedctl-controllers".into() }).clone();
        let leader_terms = Counter::default();
        registry.register("fedctl_leader_transitions", "Terms this replica started as leader", leader_terms.clone());
        let terminated_watchers = Counter::default();
        registry.register("apiserver_terminated_watchers", "Watchers dropped because they did not read their events", terminated_watchers.clone());
        let watches_refused = Counter::default();
        registry.register("fedctl_apiserver_watches_refused", "Watches refused because their user held the most open watches allowed", watches_refused.clone());
        let member_requests = Family::<MemberRequestLabels, Counter>::default();
        registry.register(
            "fedctl_global_view_member_requests",
            "Requests the global view sent to a member cluster by member, method and HTTP code (0: unreachable or timed out)",
            member_requests.clone(),
        );
        let member_request_duration = Family::<MemberLatencyLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        registry.register("fedctl_global_view_member_request_duration_seconds", "Time to a member's response head for requests the global view sent to it", member_request_duration.clone());
        let audit_events = Counter::default();
        registry.register("apiserver_audit_event", "Counter of audit events generated and sent to the audit backend", audit_events.clone());
        let audit_errors = Family::<PluginLabel, Counter>::default();
        registry.register("apiserver_audit_error", "Counter of audit events that failed to be audited properly, by plugin (buffered: dropped on a full queue; log: not written)", audit_errors.clone());
        ServerMetrics {
            audit_events,
            audit_errors,
            member_requests,
            member_request_duration,
            registry,
            requests,
            request_duration,
            watches,
            queue_depth,
            queue_adds,
            reconciles,
            reconcile_errors,
            cache_objects,
            cache_events,
            cache_bytes,
            cluster_ready,
            ingest_last_event,
            ingest_relists,
            cache_member_stale,
            leader,
            leader_terms,
            terminated_watchers,
            watches_refused,
        }
    }

    /// The registry in the Prometheus text format.
    pub fn encode(&self) -> String {
        encode(&self.registry)
    }

    /// Counts one reconcile of controller `name`, failed or not.
    pub fn reconciled(&self, name: &str, ok: bool) {
        count_reconcile(&self.reconciles, &self.reconcile_errors, name, ok);
    }
}

/// The agent's metrics.
pub struct AgentMetrics {
    registry: Registry,
    /// `fedctl_agent_reconciles_total{name}`: reconciles by controller (`exec`, `cluster-status`).
    pub reconciles: Family<NameLabel, Counter>,
    /// `fedctl_agent_reconcile_errors_total{name}`: failed reconciles by controller.
    pub reconcile_errors: Family<NameLabel, Counter>,
    /// `fedctl_agent_work_applies_total{result}`: manifests of Works server-side applied to
    /// the member cluster, by outcome.
    pub work_applies: Family<ResultLabel, Counter>,
    /// `fedctl_agent_works`: Works the exec controller currently tracks.
    pub works: Gauge,
}

impl AgentMetrics {
    fn new() -> Self {
        let mut registry = Registry::default();
        let reconciles = Family::<NameLabel, Counter>::default();
        registry.register("fedctl_agent_reconciles", "Reconciles run by an agent controller", reconciles.clone());
        let reconcile_errors = Family::<NameLabel, Counter>::default();
        registry.register("fedctl_agent_reconcile_errors", "Reconciles of an agent controller that failed and are retried", reconcile_errors.clone());
        let work_applies = Family::<ResultLabel, Counter>::default();
        registry.register("fedctl_agent_work_applies", "Work manifests server-side applied to the member cluster, by result", work_applies.clone());
        let works = Gauge::default();
        registry.register("fedctl_agent_works", "Works the exec controller tracks", works.clone());
        AgentMetrics { registry, reconciles, reconcile_errors, work_applies, works }
    }

    /// The registry in the Prometheus text format.
    pub fn encode(&self) -> String {
        encode(&self.registry)
    }

    /// Counts one reconcile of controller `name`, failed or not.
    pub fn reconciled(&self, name: &str, ok: bool) {
        count_reconcile(&self.reconciles, &self.reconcile_errors, name, ok);
    }

    /// Counts one manifest apply.
    pub fn applied(&self, ok: bool) {
        self.work_applies.get_or_create(&ResultLabel { result: if ok { "success" } else { "error" }.into() }).inc();
    }
}

fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // writing to a String cannot fail
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, registry);
    out
}

static SERVER: LazyLock<ServerMetrics> = LazyLock::new(ServerMetrics::new);
static AGENT: LazyLock<AgentMetrics> = LazyLock::new(AgentMetrics::new);

/// The server's metrics (process-wide).
pub fn server() -> &'static ServerMetrics {
    &SERVER
}

/// The agent's metrics (process-wide).
pub fn agent() -> &'static AgentMetrics {
    &AGENT
}

/// Counts one reconcile of controller `name` in `reconciles`, and in `errors` when it failed.
/// The error series exists (at 0) from the first reconcile on, so that `rate()` and alerts on
/// it work before the first error.
fn count_reconcile(reconciles: &Family<NameLabel, Counter>, errors: &Family<NameLabel, Counter>, name: &str, ok: bool) {
    let l = NameLabel { name: name.to_string() };
    reconciles.get_or_create(&l).inc();
    let e = errors.get_or_create(&l);
    if !ok {
        e.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format() {
        let m = ServerMetrics::new();
        m.requests.get_or_create(&RequestLabels { verb: "LIST".into(), group: "".into(), version: "v1".into(), resource: "pods".into(), subresource: "".into(), code: "200".into() }).inc();
        m.leader.set(1);
        let t = m.encode();
        assert!(t.contains("# TYPE apiserver_request_total counter"), "{t}");
        assert!(t.contains(r#"apiserver_request_total{verb="LIST",group="",version="v1",resource="pods",subresource="",code="200"} 1"#), "{t}");
        assert!(t.contains(r#"leader_election_master_status{name="fedctl-controllers"} 1"#), "{t}");
    }
}
