//! The exec-controller: applies the manifests of the `Work` objects in the member's exec
//! namespace to the member and reports their status back (mirrors Karmada's execution and
//! work-status controllers in `karmada-agent`).
//!
//! Works are list+watched ([`super::watch`]) into a local cache; a work queue with per-key
//! exponential backoff hands them to up to `concurrentWorkSyncs` workers (agent.yaml,
//! default 5), never one Work to two workers at once, and every Work is reconciled again
//! [`STATUS_INTERVAL`] after its last reconcile so that the status of the member objects
//! stays fresh (level-triggered: a member object deleted behind the agent's back, found
//! without its `work.fedctl.io/work` annotation, changed on the member since the agent
//! applied it — another generation, or for kinds without one other content outside
//! `status` — or with other values of its manifest's labels or annotations, is applied
//! again, as Karmada's objectwatcher does; so a member controller that scales a Deployment
//! the Work sets `replicas` of is overridden at the next resync). A Work whose reconcile changed nothing (nothing applied, its status as it was)
//! waits twice as long before the next one, up to [`QUIET_INTERVAL`]; any change brings it
//! back to [`STATUS_INTERVAL`] (the quiet Works of a member with thousands of them cost a
//! read each per minute, not every five seconds).
//!
//! Per Work:
//! - the finalizer `fedctl.io/exec-cleanup` is added first, unless the Work was created
//!   with it (as the propagation controller creates every Work);
//! - each `spec.manifests[]` object is server-side applied to the member (field manager
//!   `fedctl`, force) in [`apply_order`] (Namespaces, then CustomResourceDefinitions — each
//!   waited for until `Established`, at most [`ESTABLISH_WAIT`], when custom resources of
//!   its group follow in the same Work — then the other cluster-scoped prerequisites, then
//!   the rest), its namespace created if missing (a namespace the agent found, created or
//!   applied before is not read again: an apply's 404 there has it created again and the
//!   apply repeated), with the annotation
//!   `work.fedctl.io/work: <exec-namespace>/<work>` marking which Work owns it;
//! - `status.manifestStatuses[]` gets `{identifier {group, version, kind, namespace, name},
//!   applied, message, status}` (`status` = the member object's `.status`), and
//!   `status.conditions[]` a condition `Applied`;
//! - a manifest removed from the Work (recorded in `status.manifestStatuses`, and no
//!   manifest of the spec names it any more) is deleted from the member, as is every
//!   manifest once the Work is being deleted; then the finalizer is removed. A Work deleted
//!   with the annotation `fedctl.io/workload-deletion: Orphan` (what unjoin sets by
//!   default) only loses its finalizer: its member objects keep running.
//!
//! Only objects carrying this Work's annotation are ever deleted, and nothing is deleted
//! for any other reason (an unreachable federation, a restart, a Work missing from a list).
//! Invalid manifests get `applied: false` with a message; they never stop the controller.
//! A manifest of a kind the member does not serve gets `applied: false` with that message,
//! the `Applied` condition reason [`REASON_KIND_NOT_SERVED`], and the Work is retried with
//! backoff (250 ms doubling to 60 s) until the kind appears: the kind is resolved through
//! the member's discovery again at each retry (only served kinds are cached, and a kind
//! whose apply gets a 404 that is not its namespace's is resolved again: its CRD deleted on
//! the member gives [`REASON_KIND_NOT_SERVED`] too). An object to delete whose version the
//! member does not serve is deleted through a version its CRD still serves; while the CRD
//! serves none, its deletion (and so the Work's) waits; without a CRD defining the kind,
//! nothing is left to delete.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::watch::{Event, WatchSpec};
use super::{api_code, now_time, work_resource, Shared, FIELD_MANAGER};
use crate::api::federation::{DELETION_ORPHAN, WORKLOAD_DELETION_ANNOTATION, WORK_FINALIZER};

/// Finalizer on every Work the agent handles ([`WORK_FINALIZER`]): set by the propagation
/// controller when it creates a Work, added by the agent to one that lacks it.
pub const FINALIZER: &str = WORK_FINALIZER;
/// Annotation on member objects naming the Work that owns them: `<exec-namespace>/<work>`.
pub const OWNER_ANNOTATION: &str = "work.fedctl.io/work";
/// Interval at which a Work is reconciled again after a reconcile that changed something
/// (member status refresh, drift repair).
pub const STATUS_INTERVAL: Duration = Duration::from_secs(5);
/// Longest interval between reconciles of a Work whose reconciles keep changing nothing.
pub const QUIET_INTERVAL: Duration = Duration::from_secs(60);
/// First retry delay after a failed reconcile; doubles up to [`MAX_RETRY`].
const BASE_RETRY: Duration = Duration::from_millis(250);
/// Largest retry delay.
const MAX_RETRY: Duration = Duration::from_secs(60);
/// How long a reconcile waits for an applied CustomResourceDefinition to be `Established`
/// on the member before applying the manifests after it.
pub const ESTABLISH_WAIT: Duration = Duration::from_secs(5);
/// Reason of the `Applied` condition (status `False`) when a manifest's kind is not served
/// by the member; the Work is retried with backoff ([`MAX_RETRY`] at most) until it is.
pub const REASON_KIND_NOT_SERVED: &str = "KindNotServed";

/// Errors of one reconcile (recorded in status where they concern a manifest; otherwise
/// logged and retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A manifest is not a valid object.
    #[error("invalid manifest: {0}")]
    Invalid(String),
    /// The member does not serve the manifest's kind.
    #[error("the member does not serve {group_version} {kind}: {}", brief(.source))]
    UnknownKind {
        /// `group/version`.
        group_version: String,
        /// Kind.
        kind: String,
        /// Discovery error.
        source: kube::Error,
    },
    /// The member API refused or failed a request.
    #[error("member API: {}", brief(.0))]
    Member(kube::Error),
    /// The federation API refused or failed a request.
    #[error("federation API: {}", brief(.0))]
    Federation(kube::Error),
    /// Some manifests failed; the Work is retried with backoff.
    #[error("{0} manifest(s) not applied or not deleted")]
    Incomplete(usize),
}

/// A client error in one line, as a Work's status shows it: an API refusal as its Status
/// message, reason and code (`namespaces "shop" not found (NotFound, 404)`), anything else
/// as it displays.
fn brief(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({}, {})", s.message, s.reason, s.code),
        other => other.to_string(),
    }
}

/// `{group, version, kind, namespace, name}` of a manifest (`namespace` empty for
/// cluster-scoped kinds), as in `status.manifestStatuses[].identifier`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identifier {
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (`""` for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl Identifier {
    /// The JSON form used in status.
    pub fn to_json(&self) -> Value {
        json!({"group": self.group, "version": self.version, "kind": self.kind, "namespace": self.namespace, "name": self.name})
    }

    /// Parses the JSON form; `None` when a field is missing.
    pub fn from_json(v: &Value) -> Option<Identifier> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(Identifier { group: s("group")?, version: s("version")?, kind: s("kind")?, namespace: s("namespace").unwrap_or_default(), name: s("name")? })
    }

    /// This identifier with its namespace as the member resolves it: `default` when a
    /// namespaced kind's manifest names none, empty for a cluster-scoped kind.
    fn scoped(mut self, namespaced: bool) -> Identifier {
        self.namespace = match namespaced {
            true if self.namespace.is_empty() => "default".into(),
            true => self.namespace,
            false => String::new(),
        };
        self
    }

    fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(&self.group, &self.version, &self.kind)
    }

    fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for Identifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.api_version(), self.kind)?;
        if !self.namespace.is_empty() {
            write!(f, " {}/{}", self.namespace, self.name)
        } else {
            write!(f, " {}", self.name)
        }
    }
}

/// A manifest checked for shape: identifier (namespace not yet defaulted) and the object.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// Its identifier as written (namespace possibly empty).
    pub id: Identifier,
    /// The object.
    pub object: Value,
}

/// Checks one `spec.manifests[]` entry: an object with `apiVersion`, `kind` and
/// `metadata.name`. Errors: [`ExecError::Invalid`].
pub fn parse_manifest(v: &Value) -> Result<Manifest, ExecError> {
    let obj = v.as_object().ok_or_else(|| ExecError::Invalid("not an object".into()))?;
    let api_version = obj.get("apiVersion").and_then(Value::as_str).filter(|s| !s.is_empty());
    let api_version = api_version.ok_or_else(|| ExecError::Invalid("apiVersion is missing".into()))?;
    let kind = obj.get("kind").and_then(Value::as_str).filter(|s| !s.is_empty()).ok_or_else(|| ExecError::Invalid("kind is missing".into()))?;
    let name = v.pointer("/metadata/name").and_then(Value::as_str).filter(|s| !s.is_empty());
    let name = name.ok_or_else(|| ExecError::Invalid("metadata.name is missing".into()))?;
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) if !g.is_empty() && !v.is_empty() && !v.contains('/') => (g, v),
        None => ("", api_version),
        _ => return Err(ExecError::Invalid(format!("apiVersion {api_version:?} is malformed"))),
    };
    let namespace = v.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    Ok(Manifest { id: Identifier { group: group.into(), version: version.into(), kind: kind.into(), namespace: namespace.into(), name: name.into() }, object: v.clone() })
}

/// The object to apply: server-owned metadata and `status` stripped (they describe the
/// federation's copy), the namespace set, the owner annotation added.
pub fn prepare_for_member(object: &Value, namespace: &str, owner: &str) -> Value {
    let mut o = object.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("status");
    }
    if !o.get("metadata").is_some_and(Value::is_object) {
        o["metadata"] = json!({});
    }
    let meta = o["metadata"].as_object_mut().expect("object");
    for k in ["resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "finalizers"] {
        meta.remove(k);
    }
    if namespace.is_empty() {
        meta.remove("namespace");
    } else {
        meta.insert("namespace".into(), json!(namespace));
    }
    let ann = meta.entry("annotations").or_insert_with(|| json!({}));
    if !ann.is_object() {
        *ann = json!({});
    }
    ann[OWNER_ANNOTATION] = json!(owner);
    o
}

/// `conditions` with `ty` set (its `lastTransitionTime` kept unless the status flips).
pub fn set_condition(current: Option<&Value>, ty: &str, ok: bool, reason: &str, message: &str, generation: i64, now: &str) -> Value {
    let status = if ok { "True" } else { "False" };
    let mut out: Vec<Value> = current.and_then(Value::as_array).cloned().unwrap_or_default();
    let prev = out.iter().position(|c| c.get("type").and_then(Value::as_str) == Some(ty));
    let transition = prev.and_then(|i| (out[i].get("status").and_then(Value::as_str) == Some(status)).then(|| out[i].get("lastTransitionTime").cloned()).flatten()).unwrap_or_else(|| json!(now));
    let cond = json!({"type": ty, "status": status, "reason": reason, "message": message, "observedGeneration": generation, "lastTransitionTime": transition});
    match prev {
        Some(i) => out[i] = cond,
        None => out.push(cond),
    }
    Value::Array(out)
}

/// The work queue: due time per Work name, failures per name for backoff.
#[derive(Default)]
struct Queue {
    due: HashMap<String, Instant>,
    failures: HashMap<String, u32>,
}

impl Queue {
    /// Queues `name` at `at`, or earlier if it is already due earlier.
    fn add(&mut self, name: &str, at: Instant) {
        let e = self.due.entry(name.to_string()).or_insert(at);
        if at < *e {
            *e = at;
        }
    }

    /// Queues `name` at `at` unless it is queued already.
    fn add_if_absent(&mut self, name: &str, at: Instant) {
        self.due.entry(name.to_string()).or_insert(at);
    }

    /// The earliest due time of a Work not in `busy`.
    fn next_due(&self, busy: &HashSet<String>) -> Option<Instant> {
        self.due.iter().filter(|(n, _)| !busy.contains(*n)).map(|(_, at)| *at).min()
    }

    /// Takes the Work due first (at or before `now`) that is not in `busy`.
    fn pop_due(&mut self, now: Instant, busy: &HashSet<String>) -> Option<String> {
        let name = self.due.iter().filter(|(n, at)| **at <= now && !busy.contains(*n)).min_by_key(|(_, at)| **at).map(|(n, _)| n.clone())?;
        self.due.remove(&name);
        Some(name)
    }

    /// Backoff delay after one more failure of `name`.
    fn failed(&mut self, name: &str) -> Duration {
        let n = self.failures.entry(name.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        BASE_RETRY.saturating_mul(1u32 << (*n - 1).min(16)).min(MAX_RETRY)
    }

    fn succeeded(&mut self, name: &str) {
        self.failures.remove(name);
    }

    fn forget(&mut self, name: &str) {
        self.due.remove(name);
        self.failures.remove(name);
    }
}

/// What the controller remembers per Work between reconciles (in memory only: after a
/// restart everything is applied once again, which server-side apply makes harmless).
#[derive(Default)]
struct Applied {
    /// Generation whose manifests were all applied.
    generation: Option<i64>,
    /// Per member object, what the agent last applied or found in sync: a resync that reads
    /// something else applies the manifest again (Karmada's objectwatcher version record).
    versions: HashMap<Identifier, Seen>,
}

/// What the agent records of a member object it applied or found in sync (see [`drifted`]).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    /// The object's uid: another one means it was deleted and made again since.
    uid: Option<String>,
    /// [`object_version`] of the object.
    version: String,
    /// [`metadata_fingerprint`] of the object against its manifest.
    metadata: u64,
}

impl Seen {
    /// The record of member object `o` applied from `desired` (the manifest as
    /// [`prepare_for_member`] made it).
    fn of(desired: &Value, o: &DynamicObject) -> Seen {
        Seen { uid: o.metadata.uid.clone(), version: object_version(o), metadata: metadata_fingerprint(desired, o) }
    }
}

/// The controller loop's state: the Works cache, the queue and the Works being reconciled.
/// Mirrors client-go's workqueue: a Work queued while a worker holds it waits until that
/// worker is done (it is never reconciled twice at once), so per-Work order is kept.
struct Controller {
    worker: Arc<Worker>,
    works: HashMap<String, DynamicObject>,
    queue: Queue,
    /// Works a worker is reconciling now.
    busy: HashSet<String>,
    /// At most this many Works are reconciled at once.
    workers: usize,
    /// Its share of the process-wide `fedctl_agent_works` gauge.
    works_gauge: WorksGauge,
    /// Per Work, the interval its next resync was queued at ([`resync_after`]).
    quiet: HashMap<String, Duration>,
}

/// The interval to the next resync of a Work after a successful reconcile: [`STATUS_INTERVAL`]
/// when it changed something (or it is the Work's first), else twice the previous interval,
/// at most [`QUIET_INTERVAL`].
fn resync_after(previous: Option<Duration>, changed: bool) -> Duration {
    match previous {
        Some(p) if !changed => (p * 2).min(QUIET_INTERVAL),
        _ => STATUS_INTERVAL,
    }
}

/// One exec controller's share of the process-wide `fedctl_agent_works` gauge: the gauge is
/// the sum over every agent of the process (one in production; many when a benchmark runs
/// agents side by side in one process), so each controller moves it by its own changes and
/// takes its share back when it stops.
#[derive(Default)]
struct WorksGauge {
    reported: i64,
}

impl WorksGauge {
    /// Reports that the controller now tracks `now` Works.
    fn report(&mut self, now: i64) {
        crate::telemetry::metrics::agent().works.inc_by(now - self.reported);
        self.reported = now;
    }
}

impl Drop for WorksGauge {
    fn drop(&mut self) {
        self.report(0);
    }
}

/// What a reconcile needs that outlives one Work: clients, the discovery cache and what was
/// applied. Shared by the workers; its locks are never held across an await.
struct Worker {
    shared: Arc<Shared>,
    applied: std::sync::Mutex<HashMap<String, Applied>>,
    kinds: std::sync::Mutex<HashMap<GroupVersionKind, (ApiResource, bool)>>,
    /// Namespaces this agent found, created or applied (a Work's Namespace manifest) on the
    /// member, so that an apply into one of them needs no read first. One deleted on the
    /// member since is learned from the apply's 404 (see [`Worker::apply_one`]); one this
    /// agent deletes is forgotten.
    namespaces: std::sync::Mutex<HashSet<String>>,
}

/// The end of one reconcile, handed back to the controller loop.
struct Outcome {
    name: String,
    result: Result<(), ExecError>,
    /// The Work as the federation returned it after this reconcile's last write.
    latest: Option<DynamicObject>,
    /// Reconcile again soon (a status write lost a conflict).
    again: bool,
    /// The reconcile wrote something ([`Progress::changed`]).
    changed: bool,
}

/// What one reconcile produced besides its result (see [`Outcome`]).
#[derive(Default)]
struct Progress {
    latest: Option<DynamicObject>,
    again: bool,
    /// Something was written: the finalizer, a manifest applied or deleted, the status.
    changed: bool,
}

/// Runs the controller (never returns). Waits until the cluster-status controller has
/// claimed the `Cluster`.
pub async fn run(shared: Arc<Shared>) {
    shared.wait_registered().await;
    let (tx, rx) = mpsc::unbounded_channel();
    let spec = WatchSpec { resource: work_resource(), namespace: shared.exec_namespace.clone(), field_selector: None };
    let watcher = super::watch::run(shared.fed.clone(), spec, tx);
    let workers = shared.config.concurrent_work_syncs.max(1);
    let worker = Arc::new(Worker { shared, applied: Default::default(), kinds: Default::default(), namespaces: Default::default() });
    let mut c = Controller { worker, works: HashMap::new(), queue: Queue::default(), busy: HashSet::new(), workers, works_gauge: WorksGauge::default(), quiet: HashMap::new() };
    tokio::join!(watcher, c.work(rx));
}

/// Whether `new` is an older version of the object than `cached` (the federation's
/// resourceVersions are etcd revisions; unparsable ones never compare as older).
fn older(new: &DynamicObject, cached: &DynamicObject) -> bool {
    let rv = |o: &DynamicObject| o.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok());
    matches!((rv(new), rv(cached)), (Some(a), Some(b)) if a < b)
}

/// Whether an update needs a reconcile: anything but status and resourceVersion changed.
fn spec_changed(old: &DynamicObject, new: &DynamicObject) -> bool {
    old.metadata.generation != new.metadata.generation
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || old.metadata.finalizers != new.metadata.finalizers
        || old.data.get("spec") != new.data.get("spec")
}

impl Controller {
    async fn work(&mut self, mut rx: mpsc::UnboundedReceiver<Event>) {
        let mut running: tokio::task::JoinSet<Outcome> = tokio::task::JoinSet::new();
        let mut tasks: HashMap<tokio::task::Id, String> = HashMap::new();
        loop {
            let free = running.len() < self.workers;
            let next = self.queue.next_due(&self.busy).filter(|_| free).unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                ev = rx.recv() => match ev {
                    None => return,
                    Some(ev) => self.on_event(ev),
                },
                Some(done) = running.join_next_with_id(), if !running.is_empty() => match done {
                    Ok((id, outcome)) => {
                        tasks.remove(&id);
                        self.finished(outcome);
                    }
                    // a panicking reconcile is retried with backoff, like a failed one
                    Err(e) => {
                        tracing::error!(error = %e, "a Work reconcile panicked");
                        if let Some(name) = tasks.remove(&e.id()) {
                            self.finished(Outcome { name, result: Err(ExecError::Incomplete(0)), latest: None, again: false, changed: false });
                        }
                    }
                },
                _ = tokio::time::sleep_until(next) => {
                    while running.len() < self.workers {
                        let Some(name) = self.queue.pop_due(Instant::now(), &self.busy) else { break };
                        if !*self.worker.shared.registered.borrow() {
                            tracing::warn!("Cluster not (or no longer) ours; Works wait");
                            self.queue.add(&name, Instant::now() + STATUS_INTERVAL);
                            self.worker.shared.wait_registered().await;
                            break;
                        }
                        let Some(work) = self.works.get(&name).cloned() else { continue };
                        self.busy.insert(name.clone());
                        let worker = self.worker.clone();
                        let task_name = name.clone();
                        let handle = running.spawn(async move {
                            let mut progress = Progress::default();
                            let result = worker.reconcile(&name, work, &mut progress).await;
                            Outcome { name, result, latest: progress.latest, again: progress.again, changed: progress.changed }
                        });
                        tasks.insert(handle.id(), task_name);
                    }
                }
            }
        }
    }

    /// Takes a finished reconcile's result: caches the Work it wrote, counts it, and queues
    /// the Work again: after a failure with backoff, after a lost status conflict at once,
    /// else for its next resync ([`resync_after`]).
    fn finished(&mut self, o: Outcome) {
        self.busy.remove(&o.name);
        if let Some(w) = o.latest {
            // keep it unless the Work was deleted (or replaced) meanwhile, or is newer already
            let same = self.works.get(&o.name).is_some_and(|cached| cached.metadata.uid == w.metadata.uid && !older(&w, cached));
            if same {
                self.works.insert(o.name.clone(), w);
            }
        }
        crate::telemetry::metrics::agent().reconciled("exec", o.result.is_ok());
        let tracked = self.worker.applied.lock().expect("applied lock").len() as i64;
        self.works_gauge.report(tracked);
        match o.result {
            Ok(()) => {
                self.queue.succeeded(&o.name);
                if self.works.contains_key(&o.name) {
                    let next = resync_after(self.quiet.get(&o.name).copied(), o.changed);
                    self.quiet.insert(o.name.clone(), next);
                    self.queue.add_if_absent(&o.name, Instant::now() + next);
                }
            }
            Err(e) => {
                let d = self.queue.failed(&o.name);
                tracing::warn!(work = %o.name, error = %e, retry_in = ?d, "reconcile failed");
                self.queue.add(&o.name, Instant::now() + d);
            }
        }
        if o.again && self.works.contains_key(&o.name) {
            self.queue.add(&o.name, Instant::now() + BASE_RETRY);
        }
    }

    fn on_event(&mut self, ev: Event) {
        let now = Instant::now();
        match ev {
            Event::Listed(items) => {
                self.works.clear();
                for w in items {
                    let name = w.metadata.name.clone().unwrap_or_default();
                    self.queue.add(&name, now);
                    self.works.insert(name, w);
                }
                let works = &self.works;
                self.quiet.retain(|n, _| works.contains_key(n));
            }
            Event::Applied(w) => {
                let name = w.metadata.name.clone().unwrap_or_default();
                if self.works.get(&name).is_some_and(|old| older(&w, old)) {
                    // the echo of a write whose result is cached already
                    return;
                }
                let changed = self.works.get(&name).is_none_or(|old| spec_changed(old, &w));
                if changed {
                    self.queue.add(&name, now);
                }
                self.works.insert(name, w);
            }
            Event::Deleted(w) => {
                let name = w.metadata.name.clone().unwrap_or_default();
                self.works.remove(&name);
                self.quiet.remove(&name);
                self.worker.applied.lock().expect("applied lock").remove(&name);
                self.queue.forget(&name);
            }
        }
    }
}

impl Worker {
    fn owner(&self, work: &str) -> String {
        format!("{}/{work}", self.shared.exec_namespace)
    }

    fn works_api(&self) -> Api<DynamicObject> {
        let fed = self.shared.fed.borrow().clone().api;
        Api::namespaced_with(fed, &self.shared.exec_namespace, &work_resource())
    }

    /// Reconciles one Work (the copy the controller cached when it handed it out).
    async fn reconcile(&self, name: &str, work: DynamicObject, progress: &mut Progress) -> Result<(), ExecError> {
        let finalizers = work.metadata.finalizers.clone().unwrap_or_default();
        let has_finalizer = finalizers.iter().any(|f| f == FINALIZER);
        if work.metadata.deletion_timestamp.is_some() {
            if !has_finalizer {
                return Ok(());
            }
            return self.finalize(name, &work).await;
        }
        let work = if has_finalizer {
            work
        } else {
            let mut fs = finalizers.clone();
            fs.push(FINALIZER.to_string());
            let patch = json!({"metadata": {"resourceVersion": work.metadata.resource_version, "finalizers": fs}});
            let w = self.works_api().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(ExecError::Federation)?;
            progress.latest = Some(w.clone());
            progress.changed = true;
            w
        };
        self.sync(name, &work, progress).await
    }

    /// Applies the Work's manifests, deletes removed ones, writes status.
    async fn sync(&self, name: &str, work: &DynamicObject, progress: &mut Progress) -> Result<(), ExecError> {
        let generation = work.metadata.generation.unwrap_or(0);
        let owner = self.owner(name);
        let manifests: Vec<Value> = work.data.pointer("/spec/manifests").and_then(Value::as_array).cloned().unwrap_or_default();
        let previous = previous_statuses(work);
        let (reapply, last_versions) = {
            let applied = self.applied.lock().expect("applied lock");
            let a = applied.get(name);
            (a.and_then(|a| a.generation) != Some(generation), a.map(|a| a.versions.clone()).unwrap_or_default())
        };
        let mut versions: HashMap<Identifier, Seen> = HashMap::new();
        let mut statuses: Vec<Value> = Vec::new();
        let mut current: HashSet<Identifier> = HashSet::new();
        let mut failures = 0usize;
        // kinds the member does not serve, as `group/version Kind` (condition message)
        let mut unknown: Vec<String> = Vec::new();
        // API groups of the manifests (a CRD of one of them is waited for, see below)
        let groups: HashSet<&str> = manifests.iter().filter_map(|m| m.get("apiVersion")?.as_str()?.rsplit_once('/').map(|(g, _)| g)).collect();
        for i in apply_order(&manifests) {
            let raw = &manifests[i];
            let m = match parse_manifest(raw) {
                Ok(m) => m,
                Err(e) => {
                    failures += 1;
                    statuses.push(invalid_status(raw, i, &e));
                    continue;
                }
            };
            let (ar, namespaced) = match self.resolve(&m.id).await {
                Ok(r) => r,
                Err(e) => {
                    failures += 1;
                    if let ExecError::UnknownKind { group_version, kind, .. } = &e {
                        unknown.push(format!("{group_version} {kind}"));
                    }
                    statuses.push(json!({"identifier": as_recorded(&previous, &m.id).to_json(), "applied": false, "message": e.to_string()}));
                    continue;
                }
            };
            let id = m.id.clone().scoped(namespaced);
            if !current.insert(id.clone()) {
                failures += 1;
                statuses.push(json!({"identifier": id.to_json(), "applied": false, "message": format!("manifest {i} duplicates an earlier manifest")}));
                continue;
            }
            let was_applied = previous.get(&id).is_some_and(|s| s.get("applied").and_then(Value::as_bool) == Some(true));
            let apply = reapply || !was_applied;
            match self.apply_one(&ar, &id, &m.object, &owner, apply, last_versions.get(&id)).await {
                Ok((obj, seen, written)) => {
                    progress.changed |= written;
                    versions.insert(id.clone(), seen);
                    // custom resources of this CRD follow in the same Work: wait until the
                    // member serves them
                    let crd_group = is_crd(&id.group, &id.kind).then(|| m.object.pointer("/spec/group").and_then(Value::as_str)).flatten();
                    let dependants = crd_group.is_some_and(|g| groups.contains(g));
                    let obj = if written && dependants { self.wait_established(&ar, obj).await } else { obj };
                    let message = if dependants && !established(&obj) { "not yet Established on the member" } else { "" };
                    statuses.push(json!({
                        "identifier": id.to_json(),
                        "applied": true,
                        "message": message,
                        "status": obj.data.get("status").cloned().unwrap_or(json!({})),
                    }))
                }
                Err(e) => {
                    failures += 1;
                    progress.changed |= apply;
                    if let ExecError::UnknownKind { group_version, kind, .. } = &e {
                        unknown.push(format!("{group_version} {kind}"));
                    }
                    statuses.push(json!({"identifier": id.to_json(), "applied": false, "message": e.to_string()}));
                }
            }
        }
        // objects recorded before that no manifest of the Work names any more (not even an
        // invalid or unresolvable one): delete them (if they exist and are this Work's)
        let removed = recorded(&previous).filter(|id| !current.contains(*id) && !manifests.iter().any(|m| refers_to(m, id)));
        for id in removed {
            progress.changed = true;
            match self.delete_one(id, &owner).await {
                Ok(()) => tracing::info!(work = %name, object = %id, "manifest removed from Work; deleted it from the member"),
                Err(e) => {
                    failures += 1;
                    // still applied on the member: kept (applied) until the deletion succeeds
                    statuses.push(json!({"identifier": id.to_json(), "applied": true, "message": format!("removed from the Work; deleting it from the member failed: {e}")}));
                }
            }
        }
        if failures == 0 {
            *self.applied.lock().expect("applied lock").entry(name.to_string()).or_default() = Applied { generation: Some(generation), versions };
        } else {
            self.applied.lock().expect("applied lock").remove(name);
        }
        unknown.sort();
        unknown.dedup();
        let message = if failures == 0 {
            format!("all {} manifest(s) applied", manifests.len())
        } else if !unknown.is_empty() {
            format!("{failures} manifest(s) failed; the member does not serve {}; retried with backoff; see manifestStatuses", unknown.join(", "))
        } else {
            format!("{failures} manifest(s) failed; see manifestStatuses")
        };
        let reason = if failures == 0 {
            "AppliedSuccessful"
        } else if !unknown.is_empty() {
            REASON_KIND_NOT_SERVED
        } else {
            "AppliedFailed"
        };
        let now = now_time();
        let conditions = set_condition(work.data.pointer("/status/conditions"), "Applied", failures == 0, reason, &message, generation, &now);
        let status = json!({"conditions": conditions, "manifestStatuses": statuses});
        if work.data.get("status") != Some(&status) {
            progress.changed = true;
            let patch = json!({"metadata": {"resourceVersion": work.metadata.resource_version}, "status": status});
            match self.works_api().patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(w) => progress.latest = Some(w),
                // the Work changed meanwhile: its watch event queues it again
                Err(e) if api_code(&e) == Some(409) => progress.again = true,
                Err(e) => return Err(ExecError::Federation(e)),
            }
        }
        if failures > 0 {
            return Err(ExecError::Incomplete(failures));
        }
        Ok(())
    }

    /// Deletes every manifest of a Work being deleted, then removes the finalizer.
    async fn finalize(&self, name: &str, work: &DynamicObject) -> Result<(), ExecError> {
        let policy = work.metadata.annotations.as_ref().and_then(|a| a.get(WORKLOAD_DELETION_ANNOTATION)).map(String::as_str);
        if policy == Some(DELETION_ORPHAN) {
            tracing::info!(work = %name, "Work deleted with the Orphan policy (unjoin): its member objects keep running");
            return self.release(name, work).await;
        }
        let owner = self.owner(name);
        let previous = previous_statuses(work);
        let mut ids: Vec<Identifier> = recorded(&previous).cloned().collect();
        // manifests applied without their status recorded (the agent stopped in between)
        for raw in work.data.pointer("/spec/manifests").and_then(Value::as_array).into_iter().flatten() {
            if let Ok(m) = parse_manifest(raw) {
                let id = m.id;
                match self.resolve(&id).await {
                    Ok((_, namespaced)) => {
                        ids.push(id.scoped(namespaced));
                    }
                    // not served in this version now: [`Worker::delete_one`] finds whether a
                    // CRD still holds such objects
                    Err(ExecError::UnknownKind { .. }) => ids.push(id),
                    Err(e) => return Err(e),
                }
            }
        }
        ids.sort();
        ids.dedup();
        let mut failed = 0;
        for id in &ids {
            if let Err(e) = self.delete_one(id, &owner).await {
                failed += 1;
                tracing::warn!(work = %name, object = %id, error = %e, "deleting a manifest of a deleted Work failed");
            }
        }
        if failed > 0 {
            return Err(ExecError::Incomplete(failed));
        }
        tracing::info!(work = %name, objects = ids.len(), "Work deleted; its member objects are deleted");
        self.release(name, work).await
    }

    /// Removes the finalizer of a Work being deleted.
    async fn release(&self, name: &str, work: &DynamicObject) -> Result<(), ExecError> {
        let fs: Vec<String> = work.metadata.finalizers.clone().unwrap_or_default().into_iter().filter(|f| f != FINALIZER).collect();
        let patch = json!({"metadata": {"resourceVersion": work.metadata.resource_version, "finalizers": fs}});
        match self.works_api().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(e) if api_code(&e) == Some(404) => {}
            Err(e) => return Err(ExecError::Federation(e)),
        }
        self.applied.lock().expect("applied lock").remove(name);
        Ok(())
    }

    /// Resolves a manifest's kind through the member's discovery (cached).
    async fn resolve(&self, id: &Identifier) -> Result<(ApiResource, bool), ExecError> {
        let gvk = id.gvk();
        if let Some(r) = self.kinds.lock().expect("kinds lock").get(&gvk) {
            return Ok(r.clone());
        }
        let (ar, caps) = kube::discovery::pinned_kind(&self.shared.member.client, &gvk).await.map_err(|source| {
            // a 404 for the group/version or a kind missing from it is an answer; anything
            // else (transport, 5xx) says nothing about the kind
            let definitive = matches!(source, kube::Error::Discovery(_)) || api_code(&source) == Some(404);
            if definitive {
                ExecError::UnknownKind { group_version: id.api_version(), kind: id.kind.clone(), source }
            } else {
                ExecError::Member(source)
            }
        })?;
        let r = (ar, caps.scope == Scope::Namespaced);
        self.kinds.lock().expect("kinds lock").insert(gvk, r.clone());
        Ok(r)
    }

    /// How objects of `id`'s group and kind, whose version the member's discovery does not
    /// serve, can be reached: through a version a CustomResourceDefinition of the member
    /// serves (the manifest's own when it is served, else the storage version, else the
    /// first served), not at all while the CRD serves none, or there is no such CRD (no such
    /// object can exist). One LIST of the CRDs, made only to delete such an object. Groups
    /// without a dot are built in, and a member without the CRD API defines none. Errors:
    /// [`ExecError::Member`] when the list fails otherwise.
    async fn served_version(&self, id: &Identifier) -> Result<Reach, ExecError> {
        if !id.group.contains('.') {
            return Ok(Reach::Undefined);
        }
        let crds: Api<CustomResourceDefinition> = Api::all(self.shared.member.client.clone());
        let list = match crds.list(&Default::default()).await {
            Err(e) if api_code(&e) == Some(404) => return Ok(Reach::Undefined),
            Err(e) => return Err(ExecError::Member(e)),
            Ok(list) => list,
        };
        // only a CRD whose names were accepted serves anything (another one with the same
        // kind is refused: NamesAccepted False, never Established)
        let established = |c: &CustomResourceDefinition| c.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        let Some(crd) = list.items.into_iter().find(|c| c.spec.group == id.group && c.spec.names.kind == id.kind && established(c)) else { return Ok(Reach::Undefined) };
        let served: Vec<_> = crd.spec.versions.iter().filter(|v| v.served).collect();
        let pick = served.iter().find(|v| v.name == id.version).or_else(|| served.iter().find(|v| v.storage)).or_else(|| served.first());
        let Some(version) = pick else { return Ok(Reach::Unserved) };
        let gvk = GroupVersionKind::gvk(&id.group, &version.name, &id.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
        Ok(Reach::Via(ar, crd.spec.scope == "Namespaced"))
    }

    /// A member error on an object of `id`'s kind as [`ExecError::Member`]; a 404 that does
    /// not name the object (one for its resource: the kind stopped being served since it was
    /// cached) also drops the kind from the cache, so that the retry resolves it again.
    fn member_error(&self, id: &Identifier, e: kube::Error) -> ExecError {
        if api_code(&e) == Some(404) && !object_missing(&e, &id.name) {
            self.kinds.lock().expect("kinds lock").remove(&id.gvk());
        }
        ExecError::Member(e)
    }

    fn member_api(&self, ar: &ApiResource, namespace: &str) -> Api<DynamicObject> {
        let client = self.shared.member.client.clone();
        if namespace.is_empty() {
            Api::all_with(client, ar)
        } else {
            Api::namespaced_with(client, namespace, ar)
        }
    }

    /// Server-side applies one manifest when `apply`; otherwise reads the member object and
    /// applies the manifest only when it [`drifted`] from `recorded` (missing, without its
    /// [`OWNER_ANNOTATION`], changed, or the manifest's labels or annotations changed).
    /// Returns the member object as written or read, its record, and whether it was written.
    /// A 404 that is not the namespace's has the kind resolved again through the member's
    /// discovery, so a kind the member stopped serving (its CRD deleted) gives
    /// [`ExecError::UnknownKind`]. Errors: [`ExecError::Member`] otherwise.
    async fn apply_one(&self, ar: &ApiResource, id: &Identifier, object: &Value, owner: &str, apply: bool, recorded: Option<&Seen>) -> Result<(DynamicObject, Seen, bool), ExecError> {
        let api = self.member_api(ar, &id.namespace);
        let ns = id.namespace.as_str();
        let body = prepare_for_member(object, ns, owner);
        if !apply {
            let live = api.get_opt(&id.name).await.map_err(ExecError::Member)?;
            match (drifted(&body, live.as_ref(), recorded), live) {
                (None, Some(o)) => {
                    let seen = Seen::of(&body, &o);
                    return Ok((o, seen, false));
                }
                (why, _) => tracing::info!(object = %id, "member object {}; applying it again", why.unwrap_or("is gone")),
            }
        }
        let known = !ns.is_empty() && self.namespaces.lock().expect("namespaces lock").contains(ns);
        if !ns.is_empty() && !known {
            self.ensure_namespace(ns).await?;
        }
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let mut applied = api.patch(&id.name, &pp, &Patch::Apply(&body)).await;
        // the namespace deleted on the member after this agent saw it: create it again and
        // apply once more
        if known && applied.as_ref().err().is_some_and(|e| namespace_missing(e, ns)) {
            tracing::info!(namespace = ns, object = %id, "the namespace is gone from the member; creating it again");
            self.namespaces.lock().expect("namespaces lock").remove(ns);
            self.ensure_namespace(ns).await?;
            applied = api.patch(&id.name, &pp, &Patch::Apply(&body)).await;
        }
        crate::telemetry::metrics::agent().applied(applied.is_ok());
        match applied {
            Ok(o) => {
                if is_namespace(id) {
                    self.namespaces.lock().expect("namespaces lock").insert(id.name.clone());
                }
                let seen = Seen::of(&body, &o);
                Ok((o, seen, true))
            }
            // the kind may be gone (its CRD deleted on the member): ask discovery again
            Err(e) if api_code(&e) == Some(404) && !namespace_missing(&e, ns) => {
                self.kinds.lock().expect("kinds lock").remove(&id.gvk());
                match self.resolve(id).await {
                    Err(unknown @ ExecError::UnknownKind { .. }) => Err(unknown),
                    _ => Err(ExecError::Member(e)),
                }
            }
            Err(e) => Err(ExecError::Member(e)),
        }
    }

    /// Polls the member's copy of a just-applied CustomResourceDefinition until its
    /// `Established` condition is `True` (at most [`ESTABLISH_WAIT`]), so that the custom
    /// resources applied after it find their kind served. Returns the last copy read (the
    /// applied one when reads fail).
    async fn wait_established(&self, ar: &ApiResource, applied: DynamicObject) -> DynamicObject {
        let Some(name) = applied.metadata.name.clone() else { return applied };
        let api = self.member_api(ar, "");
        let deadline = Instant::now() + ESTABLISH_WAIT;
        let mut last = applied;
        while !established(&last) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            match api.get_opt(&name).await {
                Ok(Some(o)) => last = o,
                Ok(None) | Err(_) => {}
            }
        }
        if !established(&last) {
            tracing::warn!(crd = %name, "CustomResourceDefinition not Established on the member yet");
        }
        last
    }

    /// Makes sure namespace `ns` exists on the member: reads it, creates it when missing (a
    /// 409 from the create counts as existing), and remembers it in [`Worker::namespaces`].
    /// Errors: [`ExecError::Member`] when the read or the create fails otherwise.
    async fn ensure_namespace(&self, ns: &str) -> Result<(), ExecError> {
        let api: Api<Namespace> = Api::all(self.shared.member.client.clone());
        if api.get_opt(ns).await.map_err(ExecError::Member)?.is_none() {
            let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("valid Namespace");
            match api.create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, &obj).await {
                Ok(_) => tracing::info!(namespace = ns, "created namespace in the member"),
                Err(e) if api_code(&e) == Some(409) => {}
                Err(e) => return Err(ExecError::Member(e)),
            }
        }
        self.namespaces.lock().expect("namespaces lock").insert(ns.to_string());
        Ok(())
    }

    /// Deletes one member object if this Work owns it (its annotation); a missing object or
    /// one owned by someone else counts as done.
    async fn delete_one(&self, id: &Identifier, owner: &str) -> Result<(), ExecError> {
        let (ar, namespaced) = match self.resolve(id).await {
            Ok(r) => r,
            // the member does not serve the manifest's version: no such object can exist
            // unless a CRD still defines the kind; then it is reached through a version the
            // CRD serves, or, with none served, the deletion is retried until one is
            Err(e @ ExecError::UnknownKind { .. }) => match self.served_version(id).await? {
                Reach::Undefined => return Ok(()),
                Reach::Via(ar, namespaced) => (ar, namespaced),
                Reach::Unserved => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let id = &id.clone().scoped(namespaced);
        if is_namespace(id) {
            self.namespaces.lock().expect("namespaces lock").remove(&id.name);
        }
        let api = self.member_api(&ar, &id.namespace);
        let obj = match api.get(&id.name).await {
            Ok(o) => o,
            Err(e) if object_missing(&e, &id.name) => return Ok(()),
            Err(e) => return Err(self.member_error(id, e)),
        };
        let holder = obj.metadata.annotations.as_ref().and_then(|a| a.get(OWNER_ANNOTATION)).map(String::as_str);
        if holder != Some(owner) {
            tracing::info!(object = %id, owner = ?holder, "not deleting a member object this Work does not own");
            return Ok(());
        }
        let dp = DeleteParams { preconditions: obj.metadata.uid.clone().map(|uid| kube::api::Preconditions { uid: Some(uid), resource_version: None }), ..DeleteParams::background() };
        match api.delete(&id.name, &dp).await {
            Ok(_) => Ok(()),
            // gone meanwhile, or made again (another uid): not this object any more
            Err(e) if object_missing(&e, &id.name) || api_code(&e) == Some(409) => Ok(()),
            Err(e) => Err(self.member_error(id, e)),
        }
    }
}

/// How [`Worker::served_version`] can reach objects of a kind the member's discovery does
/// not serve in the manifest's version.
enum Reach {
    /// No CustomResourceDefinition defines the kind: no such object exists.
    Undefined,
    /// Through this served version (and whether the kind is namespaced).
    Via(ApiResource, bool),
    /// A CRD defines the kind but serves no version: its objects exist, out of reach.
    Unserved,
}

/// Whether `e` is the member's 404 for the object `name` (details naming it), not for its
/// resource (a kind no longer served: `the server could not find the requested resource`,
/// without details).
fn object_missing(e: &kube::Error, name: &str) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 && s.details.as_ref().is_some_and(|d| d.name == name))
}

/// Whether `e` is the member's 404 for namespace `ns` (kube-apiserver's NamespaceLifecycle
/// answer to a write into a missing namespace: details `{kind: namespaces, name: ns}`, or
/// without details the message `namespaces "<ns>" not found`). Any other 404 (a kind the
/// member stopped serving) is not.
fn namespace_missing(e: &kube::Error, ns: &str) -> bool {
    let kube::Error::Api(s) = e else { return false };
    if s.code != 404 {
        return false;
    }
    match &s.details {
        Some(d) if !d.kind.is_empty() => d.kind == "namespaces" && d.name == ns,
        _ => s.message == format!("namespaces \"{ns}\" not found"),
    }
}

/// The version of a member object that tells whether it changed since the agent last
/// applied it: `g:<generation>` for kinds that track `metadata.generation` (mirrors
/// Karmada's objectwatcher `ObjectVersion`); for kinds without one, `c:<hash>` of its
/// content outside `metadata` and `status`, where Karmada takes the resourceVersion, so that
/// status writes (a kubelet's, a load balancer's, an autoscaler's) are not taken for drift.
fn object_version(o: &DynamicObject) -> String {
    match o.metadata.generation {
        Some(g) if g != 0 => format!("g:{g}"),
        _ => {
            let mut h = std::hash::DefaultHasher::new();
            for (k, v) in o.data.as_object().into_iter().flatten().filter(|(k, _)| *k != "status" && *k != "metadata") {
                k.hash(&mut h);
                serde_json::to_string(v).unwrap_or_default().hash(&mut h);
            }
            format!("c:{:016x}", h.finish())
        }
    }
}

/// A hash of the member's values (or their absence) of the labels and annotations that
/// `desired` sets: a label removed or changed on the member changes it; labels others added
/// do not, nor does a value the member rewrites on every write (it is recorded as written).
fn metadata_fingerprint(desired: &Value, o: &DynamicObject) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    for (field, have) in [("labels", &o.metadata.labels), ("annotations", &o.metadata.annotations)] {
        for k in desired["metadata"][field].as_object().into_iter().flat_map(|m| m.keys()) {
            (field, k, have.as_ref().and_then(|m| m.get(k))).hash(&mut h);
        }
    }
    h.finish()
}

/// Why a member object no longer matches what the agent applied, or `None` when it does
/// (`desired` is the manifest as [`prepare_for_member`] made it, `recorded` what the agent
/// recorded after its last apply). It drifted when it is missing; when it lacks the
/// [`OWNER_ANNOTATION`] (a namespace another Work's object made bare, or the annotation
/// removed by hand); or, carrying this Work's annotation, when its uid (made again by
/// hand from a copy, with the same generation), its [`object_version`] or
/// the [`metadata_fingerprint`] of its manifest's labels and annotations differs from the
/// record. One another Work's annotation names is left to that Work, so that two Works
/// never fight over it; with no record only the first two count. Mirrors Karmada's
/// objectwatcher `ObjectNeedsUpdate`.
fn drifted(desired: &Value, live: Option<&DynamicObject>, recorded: Option<&Seen>) -> Option<&'static str> {
    let Some(live) = live else { return Some("is gone") };
    let Some(holder) = live.metadata.annotations.as_ref().and_then(|a| a.get(OWNER_ANNOTATION)) else { return Some("lacks its Work annotation") };
    if desired["metadata"]["annotations"][OWNER_ANNOTATION].as_str() != Some(holder.as_str()) {
        return None;
    }
    let recorded = recorded?;
    if recorded.uid != live.metadata.uid {
        return Some("was deleted and made again since the agent applied it");
    }
    if recorded.version != object_version(live) {
        return Some("changed since the agent applied it");
    }
    if recorded.metadata != metadata_fingerprint(desired, live) {
        return Some("has other labels or annotations of its manifest than the agent applied");
    }
    None
}

/// Whether `id` names a core/v1 Namespace.
fn is_namespace(id: &Identifier) -> bool {
    id.group.is_empty() && id.kind == "Namespace"
}

/// Whether `group`/`kind` is a CustomResourceDefinition.
fn is_crd(group: &str, kind: &str) -> bool {
    group == "apiextensions.k8s.io" && kind == "CustomResourceDefinition"
}

/// Whether an object's `status.conditions` has `Established` = `True` (a CRD's readiness).
fn established(o: &DynamicObject) -> bool {
    o.data.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
}

/// Apply rank of one `spec.manifests[]` entry: what others depend on goes first, as
/// Helm's install order does: 0 Namespace, 1 CustomResourceDefinition, 2 the other
/// cluster-scoped prerequisites (PriorityClass, StorageClass, RuntimeClass, IngressClass,
/// ClusterRole), 3 ServiceAccount, 4 everything else (custom resources included).
pub fn apply_rank(manifest: &Value) -> u8 {
    let s = |k: &str| manifest.get(k).and_then(Value::as_str).unwrap_or("");
    let group = s("apiVersion").rsplit_once('/').map_or("", |(g, _)| g);
    match (group, s("kind")) {
        ("", "Namespace") => 0,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => 1,
        ("scheduling.k8s.io", "PriorityClass")
        | ("storage.k8s.io", "StorageClass")
        | ("node.k8s.io", "RuntimeClass")
        | ("networking.k8s.io", "IngressClass")
        | ("rbac.authorization.k8s.io", "ClusterRole") => 2,
        ("", "ServiceAccount") => 3,
        _ => 4,
    }
}

/// Indices of `manifests` in the order they are applied: by [`apply_rank`], the Work's own
/// order within a rank.
pub fn apply_order(manifests: &[Value]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..manifests.len()).collect();
    order.sort_by_key(|&i| apply_rank(&manifests[i]));
    order
}

/// `status.manifestStatuses` of a Work by identifier (entries the agent wrote before).
fn previous_statuses(work: &DynamicObject) -> BTreeMap<Identifier, Value> {
    work.data.pointer("/status/manifestStatuses").and_then(Value::as_array).into_iter().flatten().filter_map(|s| Some((Identifier::from_json(s.get("identifier")?)?, s.clone()))).collect()
}

/// Identifiers recorded in status that may name a member object (well-formed ones; whether
/// the object exists and is this Work's is checked on the member before deleting). A
/// manifest that failed its last apply may still have an object from an earlier one.
fn recorded(previous: &BTreeMap<Identifier, Value>) -> impl Iterator<Item = &Identifier> {
    previous.keys().filter(|id| !id.version.is_empty() && !id.kind.is_empty() && !id.name.is_empty())
}

/// `id` (a manifest's identifier, its namespace as written) as an earlier status recorded it
/// once the member resolved its scope (`default` for a namespaced kind's manifest without
/// one, empty for a cluster-scoped kind); `id` itself when none did. Keeps the object's
/// identifier while its kind is not served, so that removing it later deletes the right
/// object.
fn as_recorded(previous: &BTreeMap<Identifier, Value>, id: &Identifier) -> Identifier {
    let same = |r: &&Identifier| r.group == id.group && r.version == id.version && r.kind == id.kind && r.name == id.name;
    // a manifest without a namespace resolves to `default`, and any manifest of a
    // cluster-scoped kind to none
    let scoped = |r: &&Identifier| r.namespace == id.namespace || (id.namespace.is_empty() && r.namespace == "default") || r.namespace.is_empty();
    previous.keys().find(|r| same(r) && scoped(r)).cloned().unwrap_or_else(|| id.clone())
}

/// Whether a manifest (valid or not) may mean the object `id`: same name, and same kind and
/// namespace unless the manifest leaves them out. Objects a manifest may mean are never
/// deleted as "removed from the Work" (a manifest that does not resolve for a moment, or
/// that someone broke, must not delete what it applied before).
fn refers_to(manifest: &Value, id: &Identifier) -> bool {
    let s = |p: &str| manifest.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (kind, ns) = (s("/kind"), s("/metadata/namespace"));
    s("/metadata/name") == id.name && (kind.is_empty() || kind == id.kind) && (ns.is_empty() || ns == id.namespace)
}

/// Status entry of an invalid manifest: a best-effort identifier and the reason.
fn invalid_status(raw: &Value, index: usize, e: &ExecError) -> Value {
    let s = |p: &str| raw.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    let api_version = s("/apiVersion");
    let (group, version) = api_version.split_once('/').map(|(g, v)| (g.to_string(), v.to_string())).unwrap_or((String::new(), api_version.clone()));
    json!({
        "identifier": {"group": group, "version": version, "kind": s("/kind"), "namespace": s("/metadata/namespace"), "name": s("/metadata/name")},
        "applied": false,
        "message": format!("manifest {index}: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn works_gauge_sums_the_agents_of_one_process() {
        // before: each agent set the gauge to its own count, so with two agents in one
        // process the last to report won
        let gauge = || crate::telemetry::metrics::agent().works.get();
        let start = gauge();
        let (mut a, mut b) = (WorksGauge::default(), WorksGauge::default());
        a.report(3);
        b.report(5);
        assert_eq!(gauge() - start, 8);
        a.report(1);
        assert_eq!(gauge() - start, 6);
        drop(b);
        assert_eq!(gauge() - start, 1, "a stopped controller takes its share back");
        drop(a);
        assert_eq!(gauge(), start);
    }

    #[test]
    fn manifests_are_checked() {
        let m = parse_manifest(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}})).unwrap();
        assert_eq!(m.id, Identifier { group: "apps".into(), version: "v1".into(), kind: "Deployment".into(), namespace: "shop".into(), name: "web".into() });
        let core = parse_manifest(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}})).unwrap();
        assert_eq!((core.id.group.as_str(), core.id.namespace.as_str()), ("", ""));
        for bad in [
            json!("x"),
            json!({"kind": "Service", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "Service"}),
            json!({"apiVersion": "a/b/c", "kind": "Service", "metadata": {"name": "a"}}),
        ] {
            assert!(matches!(parse_manifest(&bad), Err(ExecError::Invalid(_))), "{bad}");
        }
        let st = invalid_status(&json!({"apiVersion": "apps/v1", "kind": "Deployment"}), 3, &ExecError::Invalid("metadata.name is missing".into()));
        assert_eq!(st["identifier"]["group"], "apps");
        assert_eq!(st["applied"], false);
    }

    #[test]
    fn prepared_objects_lose_server_fields_and_gain_owner() {
        let o = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "a", "namespace": "x", "uid": "u", "resourceVersion": "5", "ownerReferences": [], "annotations": {"k": "v"}},
            "spec": {"ports": [{"port": 80}]},
            "status": {"loadBalancer": {}}
        });
        let p = prepare_for_member(&o, "default", "fed-exec-a/w");
        assert_eq!(p["metadata"], json!({"name": "a", "namespace": "default", "annotations": {"k": "v", OWNER_ANNOTATION: "fed-exec-a/w"}}));
        assert!(p.get("status").is_none());
        let c = prepare_for_member(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "namespace": "junk"}}), "", "o");
        assert!(c["metadata"].get("namespace").is_none());
    }

    #[test]
    fn removal_is_conservative() {
        let id = Identifier { group: "apps".into(), version: "v1".into(), kind: "Deployment".into(), namespace: "default".into(), name: "web".into() };
        assert!(refers_to(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}), &id));
        assert!(refers_to(&json!({"kind": "Deployment", "metadata": {"name": "web"}}), &id), "invalid manifests still protect");
        assert!(refers_to(&json!({"apiVersion": "apps/v2", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"}}), &id));
        assert!(!refers_to(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}), &id));
        assert!(!refers_to(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "other"}}), &id));
    }

    #[test]
    fn only_well_formed_records_count_and_stale_echoes_are_older() {
        let w: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "work.fedctl.io/v1alpha1", "kind": "Work", "metadata": {"name": "w", "resourceVersion": "12"},
            "status": {"manifestStatuses": [
                {"identifier": {"group": "", "version": "v1", "kind": "Service", "namespace": "d", "name": "s"}, "applied": false},
                {"identifier": {"group": "", "version": "", "kind": "", "namespace": "", "name": ""}, "applied": false},
                {"identifier": {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "", "name": ""}, "applied": false}
            ]}
        }))
        .unwrap();
        let prev = previous_statuses(&w);
        let names: Vec<&str> = recorded(&prev).map(|id| id.name.as_str()).collect();
        assert_eq!(names, ["s"]);
        let mut echo = w.clone();
        echo.metadata.resource_version = Some("11".into());
        assert!(older(&echo, &w));
        assert!(!older(&w, &echo));
        echo.metadata.resource_version = Some("opaque".into());
        assert!(!older(&echo, &w));
    }

    #[test]
    fn identifiers_round_trip() {
        let id = Identifier { group: "".into(), version: "v1".into(), kind: "Service".into(), namespace: "d".into(), name: "s".into() };
        assert_eq!(Identifier::from_json(&id.to_json()), Some(id.clone()));
        assert_eq!(id.to_string(), "v1 Service d/s");
    }

    #[test]
    fn quiet_works_are_resynced_less_often_until_something_changes() {
        let mut next = resync_after(None, false);
        assert_eq!(next, STATUS_INTERVAL, "a Work's first resync");
        let mut seen = vec![next];
        for _ in 0..6 {
            next = resync_after(Some(next), false);
            seen.push(next);
        }
        let secs: Vec<u64> = seen.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [5, 10, 20, 40, 60, 60, 60]);
        assert_eq!(resync_after(Some(QUIET_INTERVAL), true), STATUS_INTERVAL, "a change resets it");
    }

    #[test]
    fn queue_orders_and_backs_off() {
        let mut q = Queue::default();
        let t = Instant::now();
        q.add("b", t + Duration::from_secs(2));
        q.add("a", t + Duration::from_secs(1));
        q.add("b", t + Duration::from_secs(5)); // later: keeps the earlier time
        let none = HashSet::new();
        assert_eq!(q.next_due(&none), Some(t + Duration::from_secs(1)));
        assert_eq!(q.pop_due(t, &none), None);
        assert_eq!(q.pop_due(t + Duration::from_secs(3), &none).as_deref(), Some("a"));
        assert_eq!(q.pop_due(t + Duration::from_secs(3), &none).as_deref(), Some("b"));
        // a Work a worker holds is not handed out again until it is released
        q.add("c", t);
        q.add("d", t + Duration::from_secs(1));
        let busy: HashSet<String> = ["c".to_string()].into();
        assert_eq!(q.next_due(&busy), Some(t + Duration::from_secs(1)));
        assert_eq!(q.pop_due(t + Duration::from_secs(3), &busy).as_deref(), Some("d"));
        assert_eq!(q.pop_due(t + Duration::from_secs(3), &busy), None);
        assert_eq!(q.pop_due(t + Duration::from_secs(3), &none).as_deref(), Some("c"));
        assert_eq!(q.failed("x"), BASE_RETRY);
        assert_eq!(q.failed("x"), BASE_RETRY * 2);
        for _ in 0..20 {
            q.failed("x");
        }
        assert_eq!(q.failed("x"), MAX_RETRY);
        q.succeeded("x");
        assert_eq!(q.failed("x"), BASE_RETRY);
    }

    #[test]
    fn prerequisites_are_applied_first() {
        let m = |av: &str, kind: &str, name: &str| json!({"apiVersion": av, "kind": kind, "metadata": {"name": name}});
        let manifests = vec![
            m("example.com/v1", "Widget", "w"),
            m("apps/v1", "Deployment", "d"),
            m("v1", "ServiceAccount", "sa"),
            m("rbac.authorization.k8s.io/v1", "ClusterRole", "cr"),
            m("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.com"),
            m("v1", "Namespace", "ns"),
            m("v1", "ConfigMap", "c"),
            // a Namespace kind of another group is not a Namespace
            m("example.com/v1", "Namespace", "fake"),
            json!("not an object"),
        ];
        let names: Vec<&str> = apply_order(&manifests).into_iter().map(|i| manifests[i].pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?")).collect();
        assert_eq!(names, ["ns", "widgets.example.com", "cr", "sa", "w", "d", "c", "fake", "?"]);
    }

    #[test]
    fn only_a_404_for_the_namespace_means_it_is_gone() {
        let status = |code: u16, message: &str, details: Option<(&str, &str)>| {
            let mut s = kube::core::Status::failure(message, "NotFound").with_code(code);
            if let Some((kind, name)) = details {
                s = s.with_details(serde_json::from_value(json!({"kind": kind, "name": name})).expect("StatusDetails"));
            }
            kube::Error::Api(s.boxed())
        };
        assert!(namespace_missing(&status(404, "namespaces \"shop\" not found", Some(("namespaces", "shop"))), "shop"));
        assert!(namespace_missing(&status(404, "namespaces \"shop\" not found", None), "shop"));
        // another namespace, a kind no longer served, another code
        assert!(!namespace_missing(&status(404, "namespaces \"other\" not found", Some(("namespaces", "other"))), "shop"));
        assert!(!namespace_missing(&status(404, "the server could not find the requested resource", None), "shop"));
        assert!(!namespace_missing(&status(404, "widgets.example.com \"w\" not found", Some(("widgets", "w"))), "shop"));
        assert!(!namespace_missing(&status(403, "namespaces \"shop\" not found", Some(("namespaces", "shop"))), "shop"));
        // what a Work's status shows: the Status in one line, not its debug form
        let e = ExecError::Member(status(404, "namespaces \"shop\" not found", Some(("namespaces", "shop"))));
        assert_eq!(e.to_string(), "member API: namespaces \"shop\" not found (NotFound, 404)");
    }

    #[test]
    fn drift_is_read_from_the_record_of_the_last_apply() {
        let desired = prepare_for_member(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}}}), "shop", "fed-exec-a/w");
        let object = |generation: Option<i64>, labels: Value, annotations: Value, spec: Value, status: Value| {
            let meta = json!({"name": "web", "namespace": "shop", "generation": generation, "resourceVersion": "10", "labels": labels, "annotations": annotations});
            serde_json::from_value::<DynamicObject>(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec, "status": status})).expect("object")
        };
        let ours = json!({OWNER_ANNOTATION: "fed-exec-a/w"});
        let live = |generation: Option<i64>, labels: Value| object(generation, labels, json!({OWNER_ANNOTATION: "fed-exec-a/w"}), json!({"replicas": 2}), json!({}));
        let applied = live(Some(2), json!({"app": "web"}));
        let rec = Seen::of(&desired, &applied);
        assert_eq!(rec.version, "g:2");
        assert_eq!(drifted(&desired, Some(&applied), Some(&rec)), None);
        // status writes and metadata others added are no drift
        let extra = json!({OWNER_ANNOTATION: "fed-exec-a/w", "deployment.kubernetes.io/revision": "1"});
        assert_eq!(drifted(&desired, Some(&object(Some(2), json!({"app": "web", "pod-template-hash": "x"}), extra, json!({"replicas": 2}), json!({"readyReplicas": 2}))), Some(&rec)), None);
        // without a generation the content outside metadata and status is compared
        let plain = |spec: Value, status: Value| object(None, json!({"app": "web"}), ours.clone(), spec, status);
        let plain_rec = Seen::of(&desired, &plain(json!({"replicas": 2}), json!({})));
        assert!(plain_rec.version.starts_with("c:"), "{plain_rec:?}");
        assert_eq!(drifted(&desired, Some(&plain(json!({"replicas": 2}), json!({"phase": "Running"}))), Some(&plain_rec)), None);
        assert_eq!(drifted(&desired, Some(&plain(json!({"replicas": 3}), json!({}))), Some(&plain_rec)), Some("changed since the agent applied it"));
        assert_eq!(drifted(&desired, Some(&live(Some(3), json!({"app": "web"}))), Some(&rec)), Some("changed since the agent applied it"));
        assert_eq!(drifted(&desired, None, Some(&rec)), Some("is gone"));
        assert_eq!(drifted(&desired, Some(&object(Some(2), json!({"app": "web"}), json!({}), json!({}), json!({}))), Some(&rec)), Some("lacks its Work annotation"));
        let relabelled = "has other labels or annotations of its manifest than the agent applied";
        assert_eq!(drifted(&desired, Some(&live(Some(2), json!({}))), Some(&rec)), Some(relabelled));
        assert_eq!(drifted(&desired, Some(&live(Some(2), json!({"app": "db"}))), Some(&rec)), Some(relabelled));
        // a label the member rewrites on every write (as kubernetes.io/metadata.name) is
        // recorded as the member wrote it: no re-apply at every resync
        let rewritten = live(Some(2), json!({"app": "member-value"}));
        assert_eq!(drifted(&desired, Some(&rewritten), Some(&Seen::of(&desired, &rewritten))), None);
        // deleted and made again from a copy: the same generation, another uid
        let with_uid = |uid: &str| {
            let mut o = live(Some(2), json!({"app": "web"}));
            o.metadata.uid = Some(uid.into());
            o
        };
        let uid_rec = Seen::of(&desired, &with_uid("u1"));
        assert_eq!(drifted(&desired, Some(&with_uid("u1")), Some(&uid_rec)), None);
        assert_eq!(drifted(&desired, Some(&with_uid("u2")), Some(&uid_rec)), Some("was deleted and made again since the agent applied it"));
        // no record: only a missing object or annotation counts
        assert_eq!(drifted(&desired, Some(&live(Some(7), json!({}))), None), None);
        // another Work's object is left to it, whatever it looks like
        assert_eq!(drifted(&desired, Some(&object(Some(5), json!({}), json!({OWNER_ANNOTATION: "fed-exec-a/other"}), json!({}), json!({}))), Some(&rec)), None);
    }

    #[test]
    fn an_unresolved_manifest_keeps_the_scope_recorded_before() {
        let id = |ns: &str| Identifier { group: "example.com".into(), version: "v1".into(), kind: "Widget".into(), namespace: ns.into(), name: "w".into() };
        let previous: BTreeMap<Identifier, Value> = [(id("default"), json!({}))].into();
        assert_eq!(as_recorded(&previous, &id("")), id("default"));
        assert_eq!(as_recorded(&previous, &id("default")), id("default"));
        assert_eq!(as_recorded(&previous, &id("other")), id("other"));
        assert_eq!(as_recorded(&BTreeMap::new(), &id("")), id(""));
        let cluster: BTreeMap<Identifier, Value> = [(id(""), json!({}))].into();
        assert_eq!(as_recorded(&cluster, &id("x")), id(""));
        // the same name in another namespace is another object
        let two: BTreeMap<Identifier, Value> = [(id("app"), json!({})), (id("default"), json!({}))].into();
        assert_eq!(as_recorded(&two, &id("")), id("default"));
        assert_eq!(as_recorded(&two, &id("app")), id("app"));
        let elsewhere: BTreeMap<Identifier, Value> = [(id("app"), json!({}))].into();
        assert_eq!(as_recorded(&elsewhere, &id("")), id(""));
        // a 404 naming the object means it is gone; one for the resource does not
        let e = |details: Option<&str>| {
            let mut s = kube::core::Status::failure("not found", "NotFound").with_code(404);
            if let Some(name) = details {
                s = s.with_details(serde_json::from_value(json!({"kind": "widgets", "name": name})).expect("StatusDetails"));
            }
            kube::Error::Api(s.boxed())
        };
        assert!(object_missing(&e(Some("w")), "w"));
        assert!(!object_missing(&e(None), "w"));
        assert!(!object_missing(&e(Some("v")), "w"));
    }

    #[test]
    fn crd_establishment_is_read_from_conditions() {
        let o = |conds: Value| {
            serde_json::from_value::<DynamicObject>(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "a.b"}, "status": {"conditions": conds}}))
                .unwrap()
        };
        assert!(established(&o(json!([{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]))));
        assert!(!established(&o(json!([{"type": "Established", "status": "False"}]))));
        assert!(!established(&o(json!(null))));
        assert!(is_crd("apiextensions.k8s.io", "CustomResourceDefinition") && !is_crd("", "CustomResourceDefinition"));
    }

    #[test]
    fn condition_transition_time_is_kept() {
        let c = set_condition(None, "Applied", true, "AppliedSuccessful", "ok", 1, "t1");
        let c2 = set_condition(Some(&c), "Applied", true, "AppliedSuccessful", "ok", 2, "t2");
        assert_eq!(c2[0]["lastTransitionTime"], "t1");
        let c3 = set_condition(Some(&c2), "Applied", false, "AppliedFailed", "no", 2, "t3");
        assert_eq!(c3[0]["lastTransitionTime"], "t3");
    }
}
