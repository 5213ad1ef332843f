//! Clusters on the federation side: identity admission and the cluster-controller (exec namespaces, heartbeat readiness, unjoin teardown).
//!
//! Admission (mirrors kube-apiserver's NodeRestriction plugin for the agent part):
//! - a Cluster name is a DNS-1123 label short enough for `fed-exec-<name>` to be one;
//! - an agent `system:fedctl:agent:<c>` may only create the Cluster named `<c>`;
//! - `spec.id` (the member's kube-system namespace uid) is write-once: changing it is a 409
//!   naming the registered id — a second member cannot take a name;
//! - no two Clusters may carry the same `spec.id`: a 409 names the Cluster holding it — one
//!   member cannot join twice under two names;
//! - a new Cluster carries [`CLUSTER_FINALIZER`] from its creation, and its exec namespace is
//!   created before the create is answered (the agent's first heartbeat needs it; the
//!   controller keeps both as well).
//!
//! The controller (mirrors kube-controller-manager's node-lifecycle controller, reduced;
//! idempotent, so several servers may run it until leader election exists) for each Cluster:
//! - keeps the finalizer [`CLUSTER_FINALIZER`] and the exec namespace `fed-exec-<name>`
//!   (labelled `fedctl.io/cluster=<name>`);
//! - sets `status.conditions[type=Ready]` from the Lease `fed-exec-<name>/cluster-heartbeat`:
//!   `False`/`HeartbeatMissed` once its `spec.renewTime` is older than the grace period, and
//!   `True`/`HeartbeatRenewed` when heartbeats arrive and no Ready is reported yet or its own
//!   `HeartbeatMissed` stands; while heartbeats arrive, a Ready the agent reported (its probe
//!   of the member API) is left alone (mirrors Karmada: the agent reports readiness, the
//!   control plane only overrides it when the agent goes silent); it writes only on changes,
//!   through a token bucket, and never touches member workloads;
//! - when the Cluster is deleted (unjoin): deletes its Works — annotated with the Cluster's
//!   [`WORKLOAD_DELETION_ANNOTATION`] policy, `Orphan` unless it says `Delete` — and, for
//!   `Orphan`, removes their finalizers itself once the agent had one grace period to do so
//!   (at once when the agent's heartbeat is stale); then deletes the exec namespace, waits
//!   for it to be gone and releases the Cluster.
//!
//! What queues a Cluster (mirrors controller-runtime's event predicates): a change of what the
//! reconcile reads of it (not the agents' periodic status reports), its exec namespace, a
//! renewal of its heartbeat Lease only while that can change the verdict, a change of its
//! Works only while it is torn down, its own timer (when the heartbeat would go stale) and a
//! resync of every Cluster each [`RESYNC_PERIOD`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::authz::Principal;
use super::controller::{named_queue, spawn_watch, spawn_watch_changes, spawn_workers, KeyMapper, TokenBucket, WorkQueue};
use crate::api::federation::{
    cluster_of_exec_namespace, exec_namespace, valid_cluster_name, CLUSTER_FINALIZER, CLUSTER_LABEL, DELETION_DELETE, DELETION_ORPHAN, HEARTBEAT_LEASE, MAX_CLUSTER_NAME_LEN,
    WORKLOAD_DELETION_ANNOTATION,
};
use crate::api::object::{self, meta_str};
use crate::api::request::ResourceRequest;
use crate::api::{AdmissionHook, AdmissionRequest, ApiError, ApiResult, ApiServer, Caller, Cause, Ctx, Operation, ResourceInfo};

/// Condition reason while heartbeats arrive.
pub const REASON_RENEWED: &str = "HeartbeatRenewed";
/// Condition reason when the heartbeat is older than the grace period.
pub const REASON_MISSED: &str = "HeartbeatMissed";
/// How often every Cluster is reconciled even without changes (spread over the period).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(60);

/// Errors of the cluster-controller (logged; the key is retried).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// An API operation failed.
    #[error("{0}")]
    Api(#[from] ApiError),
    /// The registry lacks a kind the controller needs.
    #[error("resource {0} is not served")]
    MissingKind(&'static str),
}

fn is_cluster(info: &ResourceInfo) -> bool {
    info.group == "cluster.fedctl.io" && info.resource == "clusters"
}

fn spec_id(obj: &Value) -> &str {
    obj.pointer("/spec/id").and_then(Value::as_str).unwrap_or("")
}

/// Admission for `clusters` (see the module docs).
pub struct ClusterAdmission;

#[async_trait::async_trait]
impl AdmissionHook for ClusterAdmission {
    fn handles(&self, info: &ResourceInfo) -> bool {
        is_cluster(info)
    }

    async fn admit(&self, api: &ApiServer, req: &AdmissionRequest<'_>, obj: &mut Value) -> ApiResult<()> {
        if req.operation == Operation::Create && !valid_cluster_name(req.name) {
            return Err(object::invalid(
                req.info,
                req.name,
                vec![Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!(
                        "Invalid value: {:?}: a cluster name must be a DNS-1123 label of at most {MAX_CLUSTER_NAME_LEN} characters (its exec namespace fed-exec-<name> must be a label too)",
                        req.name
                    ),
                    field: "metadata.name".into(),
                }],
            ));
        }
        if let (Operation::Create, Principal::Agent(own)) = (req.operation, Principal::of(&req.ctx.caller)) {
            if req.name != own {
                return Err(ApiError::Forbidden(format!("clusters.cluster.fedctl.io \"{}\" is forbidden: agent \"{}\" may only register its own cluster \"{own}\"", req.name, req.ctx.caller.user)));
            }
        }
        if req.subresource.is_some() {
            return Ok(()); // spec is carried over from the stored object
        }
        if req.operation == Operation::Create {
            // the controller's finalizer comes with the Cluster (as kube-apiserver gives a new
            // Namespace its `kubernetes` finalizer), not in a write of its first reconcile
            let mut f = object::finalizers(obj);
            if !f.iter().any(|x| x == CLUSTER_FINALIZER) {
                f.push(CLUSTER_FINALIZER.into());
                object::meta_mut(obj).insert("finalizers".into(), json!(f));
            }
        }
        let new_id = spec_id(obj).to_string();
        let old_id = req.old.map(spec_id).unwrap_or("");
        if !old_id.is_empty() && new_id != old_id {
            return Err(ApiError::ConflictMessage {
                message: format!(
                    "cluster \"{}\" is registered by member {old_id}; member {} cannot take this name (unjoin \"{}\" first, or join under another name)",
                    req.name,
                    if new_id.is_empty() { "<none>".to_string() } else { new_id.clone() },
                    req.name
                ),
                causes: vec![],
            });
        }
        if new_id.is_empty() || new_id == old_id {
            return Ok(());
        }
        // the Clusters as of now, from the watch cache when one holds them (it waits until
        // it has the latest revision), else from the backend
        let prefix = req.info.prefix();
        let cached = match api.store.current_revision().await {
            Ok(rev) => api.store.list_cached(&prefix, rev).await.ok(),
            Err(_) => None,
        };
        let listed = match cached {
            Some(l) => l,
            None => api.store.list(&prefix, "", 0, 0).await?,
        };
        // a stored Cluster holds the id's JSON text when it carries it: only those are decoded
        // (at a thousand members, decoding every Cluster on every registration was most of
        // the server's work while members joined)
        let needle = serde_json::to_string(&new_id).map_err(|e| ApiError::Internal(e.to_string()))?;
        for kv in listed.kvs {
            if !std::str::from_utf8(&kv.value).map_or(true, |text| text.contains(needle.as_str())) {
                continue;
            }
            let other = object::from_stored(&kv.value, kv.mod_revision)?;
            let other_name = meta_str(&other, "name").unwrap_or("");
            if other_name != req.name && spec_id(&other) == new_id {
                return Err(ApiError::ConflictMessage {
                    message: format!("member {new_id} is already joined as cluster \"{other_name}\"; it cannot also join as \"{}\" (unjoin \"{other_name}\" first)", req.name),
                    causes: vec![],
                });
            }
        }
        Ok(())
    }

    /// Creates the new Cluster's exec namespace before the create is answered, so that its
    /// agent's first heartbeat (a Lease in it) finds it rather than waiting for the
    /// controller's first reconcile. An existing namespace (an old one still terminating, or
    /// one made beforehand) and failures are left to the controller, which keeps the
    /// namespace either way.
    async fn after_create(&self, api: &Arc<ApiServer>, req: &AdmissionRequest<'_>, _stored: &Value) {
        let Some(namespaces) = api.registry.lookup("", "v1", "namespaces") else { return };
        let ns = exec_namespace(req.name);
        match api.create(&rr(&namespaces, None, None, None), exec_namespace_object(req.name), &controller_ctx()).await {
            Ok(_) => tracing::info!(cluster = req.name, namespace = %ns, "created exec namespace with its Cluster"),
            Err(ApiError::AlreadyExists { .. }) => {}
            Err(e) => tracing::warn!(cluster = req.name, namespace = %ns, error = %e, "exec namespace not created with its Cluster; the controller will"),
        }
    }
}

/// The exec namespace of Cluster `cluster` as created: `fed-exec-<cluster>`, labelled with
/// [`CLUSTER_LABEL`] = the Cluster's name.
fn exec_namespace_object(cluster: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": exec_namespace(cluster), "labels": {CLUSTER_LABEL: cluster}}})
}

/// Who the cluster-controller (and the Cluster's after-create step) writes as.
fn controller_ctx() -> Ctx {
    Ctx { caller: Caller { user: "system:fedctl:cluster-controller".into(), groups: vec![] }, dry_run: false, manager: "cluster-controller".into(), apply: false }
}

/// A Ready condition the cluster-controller is to write.
struct Verdict {
    status: &'static str,
    reason: &'static str,
    message: String,
    /// The Lease's last `renewTime` (RFC 3339, seconds), when it has one.
    heartbeat: Option<String>,
}

/// Settings of the cluster-controller.
#[derive(Clone, Debug)]
pub struct ClusterControllerConfig {
    /// A Cluster whose heartbeat Lease was last renewed longer ago is not Ready (default 40 s).
    pub grace_period: Duration,
    /// Status writes per second over all Clusters (token bucket; default 10).
    pub status_qps: f64,
    /// Token bucket size (default 20).
    pub status_burst: u32,
}

impl Default for ClusterControllerConfig {
    fn default() -> Self {
        ClusterControllerConfig { grace_period: Duration::from_secs(40), status_qps: 10.0, status_burst: 20 }
    }
}

/// The cluster-controller (see the module docs).
pub struct ClusterController {
    api: Arc<ApiServer>,
    config: ClusterControllerConfig,
    limiter: TokenBucket,
    /// Clusters whose Ready condition needs the controller's verdict written: one worker
    /// writes them as the token bucket allows, so that the reconciles (a new member's exec
    /// namespace, which its first heartbeat waits for) never wait for a token.
    verdicts: Arc<WorkQueue>,
    /// Clusters whose last reconcile found a fresh heartbeat and nothing to write: a renewal
    /// of their Lease cannot change the verdict, so it is not queued (the reconcile's own
    /// timer, due when the heartbeat would go stale, reads the Lease again; mirrors the
    /// node-lifecycle controller, which reads Leases on its monitor period, not per renewal).
    settled: Arc<std::sync::Mutex<HashSet<String>>>,
    /// Clusters being torn down (deleted or gone): only their Works' changes are queued.
    tearing_down: Arc<std::sync::Mutex<HashSet<String>>>,
    clusters: Arc<ResourceInfo>,
    namespaces: Arc<ResourceInfo>,
    leases: Arc<ResourceInfo>,
    works: Arc<ResourceInfo>,
}

fn rr(info: &Arc<ResourceInfo>, ns: Option<&str>, name: Option<&str>, sub: Option<&str>) -> ResourceRequest {
    ResourceRequest { info: info.clone(), namespace: ns.map(str::to_string), name: name.map(str::to_string), subresource: sub.map(str::to_string), watch_path: false }
}

fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&chrono::Utc))
}

fn lock(set: &std::sync::Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    set.lock().unwrap_or_else(|e| e.into_inner())
}

/// The fingerprint of what a reconcile reads of a stored Cluster
/// ([`super::controller::Fingerprint`]): its uid, creation time, deletion, finalizers,
/// workload-deletion policy and the Ready condition's status and reason. Stored bytes that do
/// not decode get a fingerprint of their own (the reconcile reports them).
fn reconciled_fields(stored: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match serde_json::from_slice::<Value>(stored) {
        Ok(c) => {
            let meta = |f: &str| c.pointer(&format!("/metadata/{f}")).map(Value::to_string);
            (meta("uid"), meta("creationTimestamp"), meta("deletionTimestamp"), meta("finalizers")).hash(&mut h);
            c.pointer("/metadata/annotations").and_then(|a| a.get(WORKLOAD_DELETION_ANNOTATION)).map(Value::to_string).hash(&mut h);
            let ready = ready_condition(&c);
            let field = |f: &str| ready.and_then(|r| r.get(f)).map(Value::to_string);
            (ready.is_some(), field("status"), field("reason")).hash(&mut h);
        }
        Err(_) => stored.hash(&mut h),
    }
    h.finish()
}

fn terminating(obj: &Value) -> bool {
    object::meta(obj).is_some_and(|m| m.contains_key("deletionTimestamp"))
}

/// The Ready condition of a Cluster, if any.
pub fn ready_condition(obj: &Value) -> Option<&Value> {
    obj.pointer("/status/conditions")?.as_array()?.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
}

impl ClusterController {
    /// A controller over `api`. Errors: [`ClusterError::MissingKind`] when the registry lacks
    /// Clusters, Namespaces, Leases or Works.
    pub fn new(api: Arc<ApiServer>, config: ClusterControllerConfig) -> Result<Arc<Self>, ClusterError> {
        let get = |g: &str, v: &str, r: &'static str| api.registry.lookup(g, v, r).ok_or(ClusterError::MissingKind(r));
        Ok(Arc::new(ClusterController {
            clusters: get("cluster.fedctl.io", "v1alpha1", "clusters")?,
            namespaces: get("", "v1", "namespaces")?,
            leases: get("coordination.k8s.io", "v1", "leases")?,
            works: get("work.fedctl.io", "v1alpha1", "works")?,
            limiter: TokenBucket::new(config.status_qps, config.status_burst),
            verdicts: named_queue("cluster-readiness"),
            settled: Arc::default(),
            tearing_down: Arc::default(),
            config,
            api,
        }))
    }

    /// Starts the watchers (Clusters, exec namespaces, heartbeat Leases, Works), a periodic
    /// resync, two workers and the verdict writer; runs for the life of the process.
    pub fn spawn(self: &Arc<Self>) {
        let queue = named_queue("cluster");
        let store = self.api.store.clone();
        let cp = self.clusters.prefix();
        let p = cp.clone();
        let by_name: KeyMapper = Arc::new(move |k: &str| k.strip_prefix(&p).map(str::to_string));
        // the agents' status reports (every member's, each period) change none of it
        spawn_watch_changes(store.clone(), cp, by_name, Arc::new(reconciled_fields), queue.clone());

        let np = self.namespaces.prefix();
        let p = np.clone();
        let by_ns: KeyMapper = Arc::new(move |k: &str| k.strip_prefix(&p).and_then(cluster_of_exec_namespace).map(str::to_string));
        spawn_watch(store.clone(), np, by_ns, queue.clone());

        let lp = self.leases.prefix();
        let p = lp.clone();
        let settled = self.settled.clone();
        let by_lease: KeyMapper = Arc::new(move |k: &str| {
            let (ns, name) = k.strip_prefix(&p)?.split_once('/')?;
            (name == HEARTBEAT_LEASE).then_some(())?;
            let cluster = cluster_of_exec_namespace(ns)?;
            (!lock(&settled).contains(cluster)).then(|| cluster.to_string())
        });
        spawn_watch(store.clone(), lp, by_lease, queue.clone());

        let wp = self.works.prefix();
        let p = wp.clone();
        // a Work concerns the cluster-controller only while its Cluster is torn down
        let tearing_down = self.tearing_down.clone();
        let by_work: KeyMapper = Arc::new(move |k: &str| {
            let (ns, _) = k.strip_prefix(&p)?.split_once('/')?;
            let cluster = cluster_of_exec_namespace(ns)?;
            lock(&tearing_down).contains(cluster).then(|| cluster.to_string())
        });
        spawn_watch(store.clone(), wp, by_work, queue.clone());

        let me = self.clone();
        let q = queue.clone();
        crate::controllers::tasks::spawn(async move {
            loop {
                tokio::time::sleep(RESYNC_PERIOD).await;
                if let Ok(l) = me.api.store.list(&me.clusters.prefix(), "", 0, 0).await {
                    let prefix = me.clusters.prefix();
                    let names: Vec<&str> = l.kvs.iter().filter_map(|kv| kv.key.strip_prefix(&prefix)).collect();
                    let n = u32::try_from(names.len()).unwrap_or(u32::MAX).max(1);
                    // spread over the period: at a thousand members, queueing them all at
                    // once put a new member's exec namespace behind a thousand reconciles
                    for (i, name) in (0u32..).zip(names) {
                        q.add_after(name.to_string(), RESYNC_PERIOD / n * i);
                    }
                }
            }
        });
        let me = self.clone();
        spawn_workers(self.verdicts.clone(), 1, move |name| {
            let me = me.clone();
            async move {
                me.limiter.acquire().await;
                let r = me.write_verdict(&name).await;
                crate::telemetry::metrics::server().reconciled("cluster-readiness", r.is_ok());
                r.err().map(|e| {
                    tracing::warn!(cluster = %name, error = %e, "cluster readiness write failed; retrying");
                    Duration::from_secs(2)
                })
            }
        });
        let me = self.clone();
        spawn_workers(queue, 2, move |name| {
            let me = me.clone();
            async move {
                let r = me.reconcile(&name).await;
                crate::telemetry::metrics::server().reconciled("cluster", r.is_ok());
                match r {
                    Ok(again) => again,
                    Err(e) => {
                        tracing::warn!(cluster = %name, error = %e, "cluster reconcile failed; retrying");
                        Some(Duration::from_secs(2))
                    }
                }
            }
        });
    }

    fn ctx(&self) -> Ctx {
        controller_ctx()
    }

    async fn get_opt(&self, r: &ResourceRequest) -> ApiResult<Option<Value>> {
        match self.api.get(r).await {
            Ok(v) => Ok(Some(v)),
            Err(ApiError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reconciles Cluster `name`; returns when to look at it again.
    pub async fn reconcile(&self, name: &str) -> Result<Option<Duration>, ClusterError> {
        lock(&self.settled).remove(name);
        let cluster = match self.get_opt(&rr(&self.clusters, None, Some(name), None)).await? {
            Some(c) if !terminating(&c) => c,
            // deleted, or gone without passing through the finalizer (then only what we
            // created is cleaned up)
            gone => {
                // before the Works are listed, so that a change of one after that is queued
                lock(&self.tearing_down).insert(name.to_string());
                let r = self.teardown(name, gone.as_ref()).await;
                if matches!(r, Ok(None)) {
                    lock(&self.tearing_down).remove(name);
                }
                return r;
            }
        };
        lock(&self.tearing_down).remove(name);
        if !object::finalizers(&cluster).iter().any(|f| f == CLUSTER_FINALIZER) {
            self.api
                .guaranteed_update(&rr(&self.clusters, None, Some(name), None), name, None, &self.ctx(), |cur| {
                    let mut n = cur.clone();
                    let mut f = object::finalizers(cur);
                    if !f.iter().any(|x| x == CLUSTER_FINALIZER) && !terminating(cur) {
                        f.push(CLUSTER_FINALIZER.into());
                    }
                    object::meta_mut(&mut n).insert("finalizers".into(), json!(f));
                    Ok(n)
                })
                .await?;
        }
        if let Some(again) = self.ensure_namespace(name).await? {
            return Ok(Some(again));
        }
        self.heartbeat(name, &cluster).await
    }

    /// Creates (or labels) the exec namespace; `Some(delay)` while an old one is still terminating.
    async fn ensure_namespace(&self, name: &str) -> Result<Option<Duration>, ClusterError> {
        let ns = exec_namespace(name);
        let r = rr(&self.namespaces, None, Some(&ns), None);
        match self.get_opt(&r).await? {
            Some(cur) if terminating(&cur) => Ok(Some(Duration::from_secs(1))),
            Some(cur) => {
                if cur.pointer("/metadata/labels").and_then(|l| l.get(CLUSTER_LABEL)).and_then(Value::as_str) != Some(name) {
                    let name = name.to_string();
                    self.api
                        .guaranteed_update(&r, &ns, None, &self.ctx(), move |cur| {
                            let mut n = cur.clone();
                            let m = object::meta_mut(&mut n);
                            let labels = m.entry("labels").or_insert_with(|| json!({}));
                            labels[CLUSTER_LABEL] = json!(name);
                            Ok(n)
                        })
                        .await?;
                }
                Ok(None)
            }
            None => match self.api.create(&rr(&self.namespaces, None, None, None), exec_namespace_object(name), &self.ctx()).await {
                Ok(_) => {
                    tracing::info!(cluster = name, namespace = %ns, "created exec namespace");
                    Ok(None)
                }
                Err(ApiError::AlreadyExists { .. }) => Ok(Some(Duration::from_millis(100))),
                Err(e) => Err(e.into()),
            },
        }
    }

    /// The last heartbeat (Lease `spec.renewTime`) of `name`, if any.
    async fn last_heartbeat(&self, name: &str) -> ApiResult<Option<chrono::DateTime<chrono::Utc>>> {
        let ns = exec_namespace(name);
        let lease = self.get_opt(&rr(&self.leases, Some(&ns), Some(HEARTBEAT_LEASE), None)).await?;
        Ok(lease.and_then(|l| l.pointer("/spec/renewTime").and_then(Value::as_str).and_then(parse_time)))
    }

    fn grace(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.config.grace_period).unwrap_or_else(|_| chrono::Duration::seconds(40))
    }

    /// The Ready verdict the heartbeat Lease gives `cluster` now, when it is to be written
    /// (`None`: the condition stands, or the agent's own report does), when it may flip next,
    /// and whether the heartbeat is fresh (renewed within the grace period).
    async fn verdict(&self, name: &str, cluster: &Value) -> Result<(Option<Verdict>, Option<Duration>, bool), ClusterError> {
        let now = chrono::Utc::now();
        let grace = self.grace();
        let renewed = self.last_heartbeat(name).await?;
        let (status, reason, message, next) = match renewed {
            Some(t) if now - t <= grace => {
                let left = (t + grace - now).to_std().unwrap_or_default() + Duration::from_millis(200);
                ("True", REASON_RENEWED, format!("heartbeat renewed at {}", t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)), Some(left))
            }
            Some(t) => ("False", REASON_MISSED, format!("no heartbeat since {} (grace period {}s)", t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), self.config.grace_period.as_secs()), None),
            None => {
                let created = meta_str(cluster, "creationTimestamp").and_then(parse_time).unwrap_or(now);
                if now - created <= grace {
                    // a new member gets one grace period for its first heartbeat
                    return Ok((None, Some((created + grace - now).to_std().unwrap_or_default() + Duration::from_millis(200)), false));
                }
                ("False", REASON_MISSED, format!("no heartbeat received (grace period {}s)", self.config.grace_period.as_secs()), None)
            }
        };
        let cur = ready_condition(cluster);
        let same = cur.is_some_and(|c| c.get("status").and_then(Value::as_str) == Some(status) && c.get("reason").and_then(Value::as_str) == Some(reason));
        // while heartbeats arrive, Ready is the agent's report (its probe of the member API,
        // with reasons of its own): the controller overrides it only when heartbeats stop,
        // and takes back only its own verdict when they resume
        let agents_report = status == "True" && cur.is_some_and(|c| c.get("reason").and_then(Value::as_str) != Some(REASON_MISSED));
        let fresh = status == "True";
        if same || agents_report {
            return Ok((None, next, fresh));
        }
        let heartbeat = renewed.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        Ok((Some(Verdict { status, reason, message, heartbeat }), next, fresh))
    }

    /// Sets the Ready condition from the heartbeat Lease: a verdict to write is queued for the
    /// verdict writer ([`ClusterController::write_verdict`]); returns when it may flip next.
    /// A Cluster with a fresh heartbeat and nothing to write is marked settled (its Lease's
    /// renewals are not queued until the next reconcile).
    async fn heartbeat(&self, name: &str, cluster: &Value) -> Result<Option<Duration>, ClusterError> {
        let (verdict, next, fresh) = self.verdict(name, cluster).await?;
        match verdict {
            Some(_) => self.verdicts.add(name.to_string()),
            None if fresh => {
                lock(&self.settled).insert(name.to_string());
            }
            None => {}
        }
        Ok(next)
    }

    /// Writes the Ready verdict of Cluster `name` if it still needs one (the Cluster and its
    /// Lease are read again: the agent may have reported meanwhile).
    async fn write_verdict(&self, name: &str) -> Result<(), ClusterError> {
        let Some(cluster) = self.get_opt(&rr(&self.clusters, None, Some(name), None)).await? else { return Ok(()) };
        if terminating(&cluster) {
            return Ok(());
        }
        let (Some(v), _, _) = self.verdict(name, &cluster).await? else { return Ok(()) };
        let Verdict { status, reason, message, heartbeat } = v;
        let (st, rs) = (status.to_string(), reason.to_string());
        self.api
            .guaranteed_update(&rr(&self.clusters, None, Some(name), Some("status")), name, None, &self.ctx(), move |cur| {
                let mut n = cur.clone();
                let now = object::now_rfc3339();
                let mut conds: Vec<Value> = n.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
                let old = conds.iter().position(|c| c.get("type").and_then(Value::as_str) == Some("Ready"));
                let transition = match old.map(|i| &conds[i]) {
                    Some(c) if c.get("status").and_then(Value::as_str) == Some(st.as_str()) => c.get("lastTransitionTime").cloned().unwrap_or(json!(now)),
                    _ => json!(now),
                };
                let mut cond = json!({"type": "Ready", "status": st, "reason": rs, "message": message, "lastTransitionTime": transition});
                if let Some(h) = &heartbeat {
                    cond["lastHeartbeatTime"] = json!(h);
                }
                match old {
                    Some(i) => conds[i] = cond,
                    None => conds.push(cond),
                }
                if !n.get("status").is_some_and(Value::is_object) {
                    n["status"] = json!({});
                }
                n["status"]["conditions"] = Value::Array(conds);
                Ok(n)
            })
            .await?;
        tracing::info!(cluster = name, ready = status, reason, "cluster readiness changed");
        Ok(())
    }

    /// Unjoin: Works, then the exec namespace, then the Cluster's finalizer. `cluster` is
    /// `None` when the Cluster is already gone (only our namespace is cleaned up then).
    async fn teardown(&self, name: &str, cluster: Option<&Value>) -> Result<Option<Duration>, ClusterError> {
        let ns = exec_namespace(name);
        let ns_obj = self.get_opt(&rr(&self.namespaces, None, Some(&ns), None)).await?;
        let ours = ns_obj.as_ref().is_some_and(|n| n.pointer("/metadata/labels").and_then(|l| l.get(CLUSTER_LABEL)).and_then(Value::as_str) == Some(name));
        if cluster.is_none() && !ours {
            return Ok(None);
        }
        let policy = match cluster.and_then(|c| c.pointer("/metadata/annotations").and_then(|a| a.get(WORKLOAD_DELETION_ANNOTATION)).and_then(Value::as_str)) {
            Some(DELETION_DELETE) => DELETION_DELETE,
            _ => DELETION_ORPHAN,
        };
        if ns_obj.is_some() {
            // 1. Works
            let works = self.api.store.list(&self.works.ns_prefix(Some(&ns)), "", 0, 0).await.map_err(ApiError::from)?;
            if !works.kvs.is_empty() {
                let deleting_since = cluster.and_then(|c| meta_str(c, "deletionTimestamp")).and_then(parse_time).unwrap_or_else(chrono::Utc::now);
                let agent_alive = matches!(self.last_heartbeat(name).await?, Some(t) if chrono::Utc::now() - t <= self.grace());
                let waited_enough = chrono::Utc::now() - deleting_since >= self.grace();
                let force = policy == DELETION_ORPHAN && (!agent_alive || waited_enough);
                for kv in works.kvs {
                    let w = object::from_stored(&kv.value, kv.mod_revision)?;
                    let wname = meta_str(&w, "name").unwrap_or("").to_string();
                    self.delete_work(&ns, &wname, &w, policy, force).await?;
                }
                return Ok(Some(Duration::from_secs(1)));
            }
            // 2. the namespace
            if !ns_obj.as_ref().is_some_and(terminating) {
                match self.api.delete(&rr(&self.namespaces, None, Some(&ns), None), &json!({}), &self.ctx()).await {
                    Ok(_) | Err(ApiError::NotFound { .. }) => tracing::info!(cluster = name, namespace = %ns, "deleting exec namespace"),
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(Some(Duration::from_millis(500)));
        }
        // 3. release the Cluster
        if cluster.is_some() {
            let r = rr(&self.clusters, None, Some(name), None);
            let res = self
                .api
                .guaranteed_update(&r, name, None, &self.ctx(), |cur| {
                    let mut n = cur.clone();
                    let f: Vec<String> = object::finalizers(cur).into_iter().filter(|f| f != CLUSTER_FINALIZER).collect();
                    object::meta_mut(&mut n).insert("finalizers".into(), json!(f));
                    Ok(n)
                })
                .await;
            match res {
                Ok(_) | Err(ApiError::NotFound { .. }) => tracing::info!(cluster = name, "cluster unjoined"),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// Annotates a Work with the deletion policy, deletes it and, when `force`, removes its
    /// finalizers (the agent is gone, or had its chance).
    async fn delete_work(&self, ns: &str, name: &str, w: &Value, policy: &str, force: bool) -> ApiResult<()> {
        let r = rr(&self.works, Some(ns), Some(name), None);
        let annotated = w.pointer("/metadata/annotations").and_then(|a| a.get(WORKLOAD_DELETION_ANNOTATION)).and_then(Value::as_str) == Some(policy);
        if !annotated {
            let p = policy.to_string();
            self.api
                .guaranteed_update(&r, name, None, &self.ctx(), move |cur| {
                    let mut n = cur.clone();
                    let m = object::meta_mut(&mut n);
                    let a = m.entry("annotations").or_insert_with(|| json!({}));
                    a[WORKLOAD_DELETION_ANNOTATION] = json!(p);
                    Ok(n)
                })
                .await
                .or_else(ignore_not_found)?;
        }
        if !terminating(w) {
            match self.api.delete(&r, &json!({}), &self.ctx()).await {
                Ok(_) | Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if force {
            self.api
                .guaranteed_update(&r, name, None, &self.ctx(), |cur| {
                    let mut n = cur.clone();
                    if terminating(cur) {
                        object::meta_mut(&mut n).insert("finalizers".into(), json!([]));
                    }
                    Ok(n)
                })
                .await
                .or_else(ignore_not_found)?;
        }
        Ok(())
    }
}

fn ignore_not_found(e: ApiError) -> ApiResult<Value> {
    match e {
        ApiError::NotFound { .. } => Ok(Value::Null),
        e => Err(e),
    }
}
