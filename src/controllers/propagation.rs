//! The federation exec-controller: resource templates + PropagationPolicies → one Work per target cluster, and Work statuses → template status.
//!
//! Mirrors Karmada's resource-detector + scheduler + binding controller, folded into one
//! level-triggered controller running inside `fedctl server` against the API layer.
//!
//! # Loop
//! Informers list and watch (straight on the store) every template kind
//! ([`policy::template_kinds`]: every built-in kind but a cluster's own records), PropagationPolicies, ClusterPropagationPolicies, Clusters
//! and Works. Changes map to template keys (`<group>/<Kind>/<namespace>/<name>`) on a
//! [`WorkQueue`] (per-key dedup, exponential retry backoff 50 ms → 30 s); workers reconcile
//! one key at a time. A reconcile reads only the caches and writes only what differs, so
//! running it again writes nothing.
//!
//! # Policy matching
//! A template is governed by the policy that selects it most specifically — a selector
//! naming it beats one matching its labels, which beats one matching its kind only — then
//! by the higher `spec.priority`, then a namespaced PropagationPolicy before a
//! ClusterPropagationPolicy, then by policy name. (Karmada puts the policy's scope first;
//! fedctl puts specificity first so a cluster-wide policy naming a template is not
//! overridden by a namespace's catch-all.) The winner is recorded on the template as
//! annotations `policy.fedctl.io/name` and, for a PropagationPolicy,
//! `policy.fedctl.io/namespace`. Templates in `kube-*`, `fed-system` and `fed-exec-*`
//! namespaces are never propagated.
//!
//! # Placement
//! Targets are the clusters that satisfy `clusterAffinity`, whose `NoSchedule`/`NoExecute`
//! taints are tolerated and that are Ready. A cluster already hosting the template stays a
//! target while NotReady (workloads are not moved off a cluster because it stopped
//! answering) until `failover.afterSeconds` have passed since it became NotReady; then it is
//! dropped — at most `failover_limit` clusters per `failover_window` across the whole
//! federation, so a zone outage cannot stampede (see [`placement::FailoverLimiter`]).
//! Replicas: Duplicated gives each target the full count; Divided splits by static weights
//! or, without weights, by available capacity ([`placement::divide`], largest remainder).
//! Divided targets whose share is 0 get no Work (unless the template asks for 0 replicas).
//!
//! # Works
//! One Work per (template, target) in `fed-exec-<cluster>`, named
//! `<kind-lower>-<namespace>-<name>` ([`work::work_name`]), holding the stripped template
//! ([`work::strip_manifest`]) with the cluster's share, then the override policies that
//! select the template applied for that cluster ([`overrides`]: ClusterOverridePolicies,
//! then OverridePolicies, by name). A template's namespace is not put in its Work (the agent
//! creates missing namespaces); Namespaces have Works of their own: without a policy every
//! Namespace but `default`, `kube-*` and the federation's own goes to every member
//! ([`namespaces`]; a ClusterPropagationPolicy selecting it places it instead), and a
//! Namespace Work is deleted with the `Orphan` policy while the Namespace still exists, so
//! only deleting it in the federation deletes it on members. ConfigMaps, Secrets,
//! ServiceAccounts and PVCs that no policy selects follow the workloads referencing them
//! whose policy says `propagateDeps` ([`deps`]). Works of
//! clusters no longer targeted, of templates no longer selected and of deleted templates
//! are deleted. Work creation waits (retrying) until the exec namespace exists; the
//! cluster-controller creates it.
//!
//! # Status
//! The members' statuses fed back in `status.manifestStatuses[]` are summed into the
//! template's status through `/status` ([`status::aggregate`]) with `observedGeneration`,
//! and kept per cluster, with the share and the overrides applied or failed, in the
//! `fedctl.io/cluster-status` annotation of every propagated template ([`status::breakdown`])
//! — each written only when it changes.

pub mod deps;
pub mod events;
pub mod namespaces;
pub mod parsed;
pub use crate::api::overrides;
pub mod placement;
pub use crate::api::policy;
pub mod status;
pub mod work;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::informer::{Change, Handler, Informer};
use super::workqueue::WorkQueue;
use crate::api::federation::cluster_of_exec_namespace;
use crate::api::object::{meta_mut, meta_str};
use crate::api::request::ResourceRequest;
use crate::api::{ApiError, ApiServer, Caller, Ctx, ResourceInfo};
use placement::{ClusterView, FailoverLimiter};
use policy::{Policy, Scheduling, TemplateRef};
use work::{Share, TemplateKey};

/// Tunables of the propagation controller.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconcile workers.
    pub workers: usize,
    /// Most clusters whose workloads may be failed over per `failover_window`.
    pub failover_limit: usize,
    /// The failover rate-limit window.
    pub failover_window: Duration,
    /// First retry delay of a failed reconcile (doubles per failure).
    pub retry_base: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 4, failover_limit: 2, failover_window: Duration::from_secs(60), retry_base: Duration::from_millis(50), retry_max: Duration::from_secs(30) }
    }
}

/// How long a template's reconcile waits after a change of one of its Works (added or
/// modified), so that the Works of all its members, their agents' finalizers and statuses,
/// arriving within this time of each other, cost one reconcile and one write of the
/// template's status rather than one each.
pub const WORK_EVENT_DELAY: Duration = Duration::from_millis(200);

/// Errors of one reconcile (the key is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum PropagationError {
    /// A write through the API layer failed.
    #[error("{what}: {source}")]
    Api { what: String, source: ApiError },
    /// The registry does not serve a resource the controller needs.
    #[error("resource {0} is not served")]
    NotServed(String),
    /// Several writes failed; the first is reported.
    #[error("{count} writes failed, first: {first}")]
    Several { count: usize, first: Box<PropagationError> },
}

fn api_err(what: impl Into<String>) -> impl FnOnce(ApiError) -> PropagationError {
    let what = what.into();
    move |source| PropagationError::Api { what, source }
}

/// The running controller: caches, queue and failover state.
pub struct Controller {
    api: Arc<ApiServer>,
    config: Config,
    /// Template informers by kind; custom resources' kinds are added as CRDs appear.
    templates: std::sync::RwLock<HashMap<&'static str, Arc<Informer>>>,
    clusters: Arc<Informer>,
    policies: Arc<Informer>,
    cluster_policies: Arc<Informer>,
    override_policies: Arc<Informer>,
    cluster_override_policies: Arc<Informer>,
    /// (Cluster)PropagationPolicies parsed, kept by their informers' handlers.
    parsed_policies: parsed::ParsedIndex<Policy>,
    /// (Cluster)OverridePolicies parsed, kept by their informers' handlers.
    parsed_overrides: parsed::ParsedIndex<overrides::OverridePolicy>,
    works: Arc<Informer>,
    work_info: Arc<ResourceInfo>,
    queue: Arc<WorkQueue<String>>,
    limiter: Mutex<FailoverLimiter>,
    first_seen_not_ready: Mutex<HashMap<String, DateTime<Utc>>>,
    /// Bumped on every change the Cluster informer delivers.
    clusters_changed: AtomicU64,
    /// The placement views of every Cluster, sorted by name, and the `clusters_changed`
    /// they were built at: rebuilt only after a Cluster changed, so a reconcile costs no
    /// O(clusters) work of its own (shared by every template reconciled in between).
    views: Mutex<(u64, Arc<[ClusterView]>)>,
    /// Reconciles run (for tests and benchmarks).
    reconciles: AtomicU64,
    /// Keys of the templates a Cluster change may move: those annotated with a policy and
    /// the Namespaces that go to every member (kept by the template handlers, so a Cluster
    /// change does not scan every template).
    placed: Mutex<BTreeSet<String>>,
    ctx: Ctx,
}

fn terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null())
}

/// Whether two versions of an object are equal outside the top-level fields `top_skip`,
/// the metadata fields `meta_skip` and the annotations `ann_skip` (compared in place,
/// without copying the objects).
fn equal_ignoring(a: &Value, b: &Value, top_skip: &[&str], meta_skip: &[&str], ann_skip: &[&str]) -> bool {
    type Nested<'a> = &'a dyn Fn(&str, Option<&Value>, Option<&Value>) -> bool;
    fn same_map(a: Option<&Value>, b: Option<&Value>, skip: &[&str], nested: Nested) -> bool {
        let (ma, mb) = (a.and_then(Value::as_object), b.and_then(Value::as_object));
        let keys = ma.into_iter().flat_map(|m| m.keys()).chain(mb.into_iter().flat_map(|m| m.keys()));
        for k in keys {
            if skip.contains(&k.as_str()) {
                continue;
            }
            if !nested(k, ma.and_then(|m| m.get(k)), mb.and_then(|m| m.get(k))) {
                return false;
            }
        }
        true
    }
    let plain = |_: &str, x: Option<&Value>, y: Option<&Value>| x == y;
    let meta = |k: &str, x: Option<&Value>, y: Option<&Value>| {
        if k == "annotations" {
            same_map(x, y, ann_skip, &plain)
        } else {
            x == y
        }
    };
    let top = |k: &str, x: Option<&Value>, y: Option<&Value>| {
        if k == "metadata" {
            same_map(x, y, meta_skip, &meta)
        } else {
            x == y
        }
    };
    same_map(Some(a), Some(b), top_skip, &top)
}

/// Template events that change only what the controller itself writes or what changes on
/// every write (status, resourceVersion, managedFields, the cluster-status annotation) need
/// no reconcile.
fn template_unchanged(old: &Value, new: &Value) -> bool {
    equal_ignoring(old, new, &["status"], &["resourceVersion", "managedFields"], &[work::ANNOTATION_CLUSTER_STATUS])
}

/// Work events that change only resourceVersion or managedFields need no reconcile.
fn work_unchanged(old: &Value, new: &Value) -> bool {
    equal_ignoring(old, new, &[], &["resourceVersion", "managedFields"], &[])
}

/// Starts the controller on `api`'s store: informers first, workers once every cache has
/// loaded. Returns at once; everything runs on spawned tasks for the life of the process.
pub fn start(api: Arc<ApiServer>, config: Config) -> Result<Arc<Controller>, PropagationError> {
    let snapshot = api.registry.snapshot();
    let reg = &*snapshot;
    let lookup = |g: &str, v: &str, r: &str| reg.lookup(g, v, r).ok_or_else(|| PropagationError::NotServed(format!("{r}.{g}")));
    let mut templates = HashMap::new();
    for info in policy::template_kinds(reg) {
        // workloads are indexed by namespace: their dependencies look them up (propagateDeps)
        let index: Option<super::informer::IndexFn> = deps::has_deps(info.kind).then_some(|o| meta_str(o, "namespace").map(str::to_string));
        templates.insert(info.kind, Informer::new(info, index));
    }
    let work_info = lookup("work.fedctl.io", "v1alpha1", "works")?;
    let c = Arc::new(Controller {
        clusters: Informer::new(lookup("cluster.fedctl.io", "v1alpha1", "clusters")?, None),
        policies: Informer::new(lookup("policy.fedctl.io", "v1alpha1", "propagationpolicies")?, None),
        cluster_policies: Informer::new(lookup("policy.fedctl.io", "v1alpha1", "clusterpropagationpolicies")?, None),
        override_policies: Informer::new(lookup("policy.fedctl.io", "v1alpha1", "overridepolicies")?, None),
        cluster_override_policies: Informer::new(lookup("policy.fedctl.io", "v1alpha1", "clusteroverridepolicies")?, None),
        parsed_policies: parsed::ParsedIndex::default(),
        parsed_overrides: parsed::ParsedIndex::default(),
        works: Informer::new(work_info.clone(), Some(|w| meta_annotation(w, work::ANNOTATION_TEMPLATE))),
        work_info,
        templates: std::sync::RwLock::new(templates),
        queue: WorkQueue::named("propagation", config.retry_base, config.retry_max),
        limiter: Mutex::new(FailoverLimiter::new(config.failover_limit, config.failover_window)),
        first_seen_not_ready: Mutex::new(HashMap::new()),
        clusters_changed: AtomicU64::new(1),
        views: Mutex::new((0, Arc::from(Vec::new()))),
        reconciles: AtomicU64::new(0),
        placed: Mutex::new(BTreeSet::new()),
        ctx: Ctx { caller: Caller { user: "system:fedctl:propagation-controller".into(), groups: vec!["system:masters".into()] }, dry_run: false, manager: "fedctl-propagation".into(), apply: false },
        api,
        config,
    });
    let store = c.api.store.clone();
    let mut all: Vec<Arc<Informer>> = Vec::new();
    for inf in c.template_informers() {
        let me = c.clone();
        let h: Handler = Arc::new(move |ch: &Change| me.on_template(ch));
        crate::controllers::tasks::spawn(inf.clone().run(store.clone(), h));
        all.push(inf.clone());
    }
    let me = c.clone();
    crate::controllers::tasks::spawn(c.policies.clone().run(store.clone(), Arc::new(move |ch: &Change| me.on_policy(ch, false))));
    let me = c.clone();
    crate::controllers::tasks::spawn(c.cluster_policies.clone().run(store.clone(), Arc::new(move |ch: &Change| me.on_policy(ch, true))));
    let me = c.clone();
    crate::controllers::tasks::spawn(c.override_policies.clone().run(store.clone(), Arc::new(move |ch: &Change| me.on_override_policy(ch, false))));
    let me = c.clone();
    crate::controllers::tasks::spawn(c.cluster_override_policies.clone().run(store.clone(), Arc::new(move |ch: &Change| me.on_override_policy(ch, true))));
    let me = c.clone();
    crate::controllers::tasks::spawn(c.clusters.clone().run(store.clone(), Arc::new(move |ch: &Change| me.on_cluster(ch))));
    let me = c.clone();
    crate::controllers::tasks::spawn(c.works.clone().run(store.clone(), Arc::new(move |ch: &Change| me.on_work(ch))));
    all.extend([c.policies.clone(), c.cluster_policies.clone(), c.override_policies.clone(), c.cluster_override_policies.clone(), c.clusters.clone(), c.works.clone()]);
    let me = c.clone();
    crate::controllers::tasks::spawn(async move {
        for inf in &all {
            inf.wait_synced().await;
        }
        tracing::info!(templates = me.template_informers().iter().map(|i| i.len()).sum::<usize>(), works = me.works.len(), "propagation controller caches synced");
        // templates whose Works exist but which are gone or no longer selected
        for k in me.works.list().iter().filter_map(|w| meta_annotation(w, work::ANNOTATION_TEMPLATE)) {
            me.queue.add(k);
        }
        for _ in 0..me.config.workers.max(1) {
            let me = me.clone();
            crate::controllers::tasks::spawn(async move { me.worker().await });
        }
        // custom resources of CRDs served later get their informers as they appear
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            me.follow_new_kinds();
        }
    });
    Ok(c)
}

fn meta_annotation(obj: &Value, key: &str) -> Option<String> {
    obj.pointer("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str).map(str::to_string)
}

impl Controller {
    fn template_informers(&self) -> Vec<Arc<Informer>> {
        self.templates.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
    }

    fn template_informer(&self, kind: &str) -> Option<Arc<Informer>> {
        self.templates.read().unwrap_or_else(|e| e.into_inner()).get(kind).cloned()
    }

    /// Starts an informer for every propagatable kind the API server serves now and the
    /// controller does not follow yet (custom resources of a CRD established since); its
    /// initial list enqueues the templates already stored.
    fn follow_new_kinds(self: &Arc<Self>) {
        let snapshot = self.api.registry.snapshot();
        for info in policy::template_kinds(&snapshot) {
            if self.template_informer(info.kind).is_some() {
                continue;
            }
            let inf = Informer::new(info.clone(), None);
            self.templates.write().unwrap_or_else(|e| e.into_inner()).insert(info.kind, inf.clone());
            tracing::info!(kind = info.kind, group = info.group, "propagation controller follows a new kind");
            let me = self.clone();
            let h: Handler = Arc::new(move |ch: &Change| me.on_template(ch));
            crate::controllers::tasks::spawn(inf.run(self.api.store.clone(), h));
        }
    }

    /// Keys waiting in the work queue (for tests and benchmarks).
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Reconciles run so far (for tests and benchmarks).
    pub fn reconcile_count(&self) -> u64 {
        self.reconciles.load(Ordering::Relaxed)
    }

    async fn worker(self: Arc<Self>) {
        while let Some(k) = self.queue.get().await {
            self.reconciles.fetch_add(1, Ordering::Relaxed);
            match TemplateKey::parse(&k) {
                None => {}
                Some(key) => match self.reconcile(&key).await.inspect(|_| crate::telemetry::metrics::server().reconciled("propagation", true)) {
                    Ok(next) => {
                        self.queue.forget(&k);
                        if let Some(d) = next {
                            self.queue.add_after(k.clone(), d);
                        }
                    }
                    Err(e) => {
                        crate::telemetry::metrics::server().reconciled("propagation", false);
                        let wait = self.queue.backoff(&k);
                        tracing::warn!(template = %k, error = %e, retry_in = ?wait, "propagation reconcile failed");
                        self.queue.add_rate_limited(k.clone());
                    }
                },
            }
            self.queue.done(&k);
        }
    }

    // -------------------------------------------------------------------------------------
    // Event handlers: map changes to template keys

    fn enqueue(&self, obj: &Value) {
        if let Some(k) = TemplateKey::of(obj) {
            self.queue.add(k.to_string());
        }
    }

    /// Every template that is placed (annotated with a policy or holding Works), and the
    /// Namespaces that go to every member (also to one that just joined or became Ready);
    /// the other Namespaces (exec namespaces, `kube-*`, opted out) are placed nowhere
    /// unless annotated or holding Works. O(placed templates), from [`Controller::placed`]
    /// and the Works' template index.
    fn enqueue_placed(&self) {
        let placed: Vec<String> = self.placed.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect();
        for k in placed {
            self.queue.add(k);
        }
        for k in self.works.index_values() {
            self.queue.add(k);
        }
    }

    /// Keeps [`Controller::placed`] in step with a template change.
    fn track_placed(&self, ch: &Change) {
        let obj = ch.object();
        let Some(key) = TemplateKey::of(obj) else { return };
        let is_namespace = obj.get("kind").and_then(Value::as_str) == Some("Namespace") && obj.get("apiVersion").and_then(Value::as_str) == Some("v1");
        let placed = !matches!(ch, Change::Deleted(_)) && (meta_annotation(obj, work::ANNOTATION_POLICY_NAME).is_some() || (is_namespace && namespaces::auto_propagated(obj)));
        let mut set = self.placed.lock().unwrap_or_else(|e| e.into_inner());
        if placed {
            set.insert(key.to_string());
        } else {
            set.remove(&key.to_string());
        }
    }

    /// The dependencies of a workload object (propagateDeps), queued.
    fn enqueue_deps(&self, obj: &Value) {
        for k in deps::dependencies(obj) {
            self.queue.add(k.to_string());
        }
    }

    fn on_template(&self, ch: &Change) {
        self.track_placed(ch);
        if let Change::Modified { old, new } = ch {
            if template_unchanged(old, new) {
                return;
            }
        }
        let obj = ch.object();
        if let (Change::Added(_), Some("Namespace")) = (ch, obj.get("kind").and_then(Value::as_str)) {
            if meta_str(obj, "name").is_some_and(|n| cluster_of_exec_namespace(n).is_some()) {
                // an exec namespace appeared: Works waiting for it can be written now
                self.enqueue_placed();
            }
        }
        if let Change::Modified { old, .. } = ch {
            self.enqueue_deps(old);
        }
        self.enqueue_deps(obj);
        self.enqueue(obj);
    }

    fn on_override_policy(&self, ch: &Change, cluster_scoped: bool) {
        self.parsed_overrides.apply(ch, |o| overrides::parse(o, cluster_scoped).ok());
        let mut objs = vec![ch.object().clone()];
        if let Change::Modified { old, .. } = ch {
            objs.push(old.clone());
        }
        for o in objs {
            let Ok(p) = overrides::parse(&o, cluster_scoped) else { continue };
            let kinds: Vec<&str> = if p.selectors.is_empty() {
                self.template_informers().iter().map(|i| i.info.kind).collect()
            } else {
                p.selectors.iter().map(|s| s.kind.as_str()).collect::<BTreeSet<_>>().into_iter().collect()
            };
            for kind in kinds {
                let Some(inf) = self.template_informer(kind) else { continue };
                for t in inf.list() {
                    if template_ref(&t).is_some_and(|tr| p.selects(&tr)) {
                        self.enqueue(&t);
                    }
                }
            }
        }
    }

    fn on_policy(&self, ch: &Change, cluster_scoped: bool) {
        self.parsed_policies.apply(ch, |o| policy::parse(o, cluster_scoped).ok());
        let mut objs = vec![ch.object().clone()];
        if let Change::Modified { old, .. } = ch {
            objs.push(old.clone());
        }
        for o in objs {
            let Ok(p) = policy::parse(&o, cluster_scoped) else { continue };
            let kinds: BTreeSet<&str> = p.selectors.iter().map(|s| s.kind.as_str()).collect();
            for kind in kinds {
                let Some(inf) = self.template_informer(kind) else { continue };
                for t in inf.list() {
                    if let Some(tr) = template_ref(&t) {
                        if p.matches(&tr).is_some() || meta_annotation(&t, work::ANNOTATION_POLICY_NAME).as_deref() == Some(p.name.as_str()) {
                            self.enqueue(&t);
                        }
                    }
                }
            }
        }
    }

    fn on_cluster(&self, ch: &Change) {
        match ch {
            Change::Modified { old, new } => {
                let (o, n) = (ClusterView::from_object(old), ClusterView::from_object(new));
                if n.ready {
                    self.limiter.lock().unwrap_or_else(|e| e.into_inner()).forget(&n.name);
                }
                if o == n {
                    // an agent's status report with nothing placement reads (heartbeat times,
                    // version, discovery): the views stand (at a thousand members the reports
                    // come every few milliseconds, and each rebuild reads every Cluster)
                    return;
                }
                self.clusters_changed.fetch_add(1, Ordering::SeqCst);
                if o.same_placement(&n) {
                    return; // resource usage
                }
            }
            Change::Deleted(old) => {
                self.clusters_changed.fetch_add(1, Ordering::SeqCst);
                let name = meta_str(old, "name").unwrap_or("").to_string();
                self.limiter.lock().unwrap_or_else(|e| e.into_inner()).forget(&name);
            }
            Change::Added(_) => {
                self.clusters_changed.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.enqueue_placed();
    }

    fn on_work(&self, ch: &Change) {
        if let Change::Modified { old, new } = ch {
            if work_unchanged(old, new) {
                return;
            }
        }
        if let Some(k) = meta_annotation(ch.object(), work::ANNOTATION_TEMPLATE) {
            // a workload's placement changed: its dependencies follow
            if let Some(key) = TemplateKey::parse(&k).filter(|key| deps::has_deps(&key.kind)) {
                if let Some(t) = self.template_informer(key.kind.as_str()).and_then(|inf| inf.get(key.ns(), &key.name)) {
                    self.enqueue_deps(&t);
                }
            }
            match ch {
                // a Work gone may free the way for its replacement: at once
                Change::Deleted(_) => self.queue.add(k),
                // the Work the controller just wrote, its agent's finalizer and status come
                // in a burst per member: one reconcile (one status write) for all of them
                _ => self.queue.add_after(k, WORK_EVENT_DELAY),
            }
        }
    }

    // -------------------------------------------------------------------------------------
    // Reconcile

    /// The PropagationPolicies of `namespace`, then every ClusterPropagationPolicy (parsed,
    /// not terminating).
    fn policies_for(&self, namespace: Option<&str>) -> Vec<Arc<Policy>> {
        let mut out = namespace.map(|ns| self.parsed_policies.of(Some(ns))).unwrap_or_default();
        out.extend(self.parsed_policies.of(None));
        out
    }

    /// Every Cluster's placement view, sorted by name; a NotReady one without a transition
    /// time counts as NotReady since the controller first saw it so. Built from the
    /// informer only when a Cluster changed since the last call.
    fn cluster_views(&self, now: DateTime<Utc>) -> Arc<[ClusterView]> {
        // read before listing: a change delivered meanwhile leaves the views marked stale
        let changed = self.clusters_changed.load(Ordering::SeqCst);
        let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        if views.0 == changed {
            return views.1.clone();
        }
        let mut seen = self.first_seen_not_ready.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<ClusterView> = self.clusters.list().iter().map(|c| ClusterView::from_object(c)).collect();
        for c in out.iter_mut() {
            if c.ready {
                seen.remove(&c.name);
            } else if c.not_ready_since.is_none() {
                c.not_ready_since = Some(*seen.entry(c.name.clone()).or_insert(now));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        *views = (changed, Arc::from(out));
        views.1.clone()
    }

    fn rr(&self, info: &Arc<ResourceInfo>, namespace: Option<&str>, name: Option<&str>, subresource: Option<&str>) -> ResourceRequest {
        ResourceRequest { info: info.clone(), namespace: namespace.map(str::to_string), name: name.map(str::to_string), subresource: subresource.map(str::to_string), watch_path: false }
    }

    async fn delete_work(&self, w: &Value) -> Result<(), PropagationError> {
        if terminating(w) {
            return Ok(());
        }
        let (ns, name) = (meta_str(w, "namespace").unwrap_or(""), meta_str(w, "name").unwrap_or(""));
        match self.api.delete(&self.rr(&self.work_info, Some(ns), Some(name), None), &json!({}), &self.ctx).await {
            Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
            Err(e) => Err(api_err(format!("delete work {ns}/{name}"))(e)),
        }
    }

    /// Deletes a Work leaving what it created on the member in place (the agent orphans
    /// the objects of a Work annotated `fedctl.io/workload-deletion: Orphan`), unless the
    /// Work already carries a workload-deletion policy.
    async fn orphan_work(&self, w: &Value) -> Result<(), PropagationError> {
        use crate::api::federation::{DELETION_ORPHAN, WORKLOAD_DELETION_ANNOTATION};
        if terminating(w) {
            return Ok(());
        }
        // a policy already set (an unjoin with --delete-workloads says Delete) is kept
        if meta_annotation(w, WORKLOAD_DELETION_ANNOTATION).is_none() {
            let (ns, name) = (meta_str(w, "namespace").unwrap_or("").to_string(), meta_str(w, "name").unwrap_or("").to_string());
            let rr = self.rr(&self.work_info, Some(&ns), Some(&name), None);
            let r = self
                .api
                .guaranteed_update(&rr, &name, None, &self.ctx, |cur| {
                    let mut n = cur.clone();
                    let m = meta_mut(&mut n);
                    let ann = m.entry("annotations").or_insert_with(|| json!({}));
                    if !ann.is_object() {
                        *ann = json!({});
                    }
                    ann[WORKLOAD_DELETION_ANNOTATION] = json!(DELETION_ORPHAN);
                    Ok(n)
                })
                .await;
            match r {
                Ok(_) | Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(api_err(format!("orphan work {ns}/{name}"))(e)),
            }
        }
        self.delete_work(w).await
    }

    async fn update_work(&self, ns: &str, name: &str, desired: Value) -> Result<(), ApiError> {
        let rr = self.rr(&self.work_info, Some(ns), Some(name), None);
        self.api.guaranteed_update(&rr, name, None, &self.ctx, move |cur| Ok(work::merge_work(cur, &desired))).await.map(|_| ())
    }

    async fn write_work(&self, existing: Option<&Value>, desired: Value) -> Result<(), PropagationError> {
        let ns = meta_str(&desired, "namespace").unwrap_or("").to_string();
        let name = meta_str(&desired, "name").unwrap_or("").to_string();
        let what = format!("work {ns}/{name}");
        match existing {
            Some(_) => self.update_work(&ns, &name, desired).await.map_err(api_err(what)),
            None => {
                let rr = self.rr(&self.work_info, Some(&ns), None, None);
                match self.api.create(&rr, desired.clone(), &self.ctx).await {
                    Ok(_) => Ok(()),
                    // the cache had not seen it yet: bring it in line
                    Err(ApiError::AlreadyExists { .. }) => self.update_work(&ns, &name, desired).await.map_err(api_err(what)),
                    Err(e) => Err(api_err(what)(e)),
                }
            }
        }
    }

    /// Every ClusterOverridePolicy, then the OverridePolicies of `namespace` (parsed, not
    /// terminating).
    fn override_policies_for(&self, namespace: Option<&str>) -> Vec<Arc<overrides::OverridePolicy>> {
        let mut out = self.parsed_overrides.of(None);
        if let Some(ns) = namespace {
            out.extend(self.parsed_overrides.of(Some(ns)));
        }
        out
    }

    /// The clusters a dependency (ConfigMap, Secret, ServiceAccount, PVC) must be on: those
    /// holding a live Work of a workload in its namespace that references it and whose
    /// governing policy says `propagateDeps: true`.
    fn dependency_targets(&self, key: &TemplateKey) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        if !deps::is_dep_kind(&key.kind) || key.group != "" || key.ns().is_none_or(policy::is_reserved_namespace) {
            return out;
        }
        let policies = self.policies_for(key.ns());
        for inf in self.template_informers() {
            if !deps::has_deps(inf.info.kind) {
                continue;
            }
            for w in inf.by_index(&key.namespace) {
                if terminating(&w) || !deps::dependencies(&w).contains(key) {
                    continue;
                }
                let follows = template_ref(&w).and_then(|tr| policy::select(&policies, &tr)).is_some_and(|p| p.propagate_deps);
                if !follows {
                    continue;
                }
                let Some(wk) = TemplateKey::of(&w) else { continue };
                for work in self.works.by_index(&wk.to_string()) {
                    if !terminating(&work) {
                        if let Some(c) = meta_str(&work, "namespace").and_then(cluster_of_exec_namespace) {
                            out.insert(c.to_string());
                        }
                    }
                }
            }
        }
        out
    }

    /// Where a template governed by `pol` goes, with each target's share (see the module
    /// docs: placement, then division), and when to look again.
    fn place_by_policy(&self, t: &Value, pol: &Policy, clusters: &[ClusterView], live: &[&Arc<Value>], now: DateTime<Utc>) -> (BTreeMap<String, Option<Share>>, Option<Duration>) {
        let cluster_of = |w: &Value| meta_str(w, "namespace").and_then(cluster_of_exec_namespace).map(str::to_string);
        let hosting: BTreeSet<String> = live.iter().filter_map(|w| cluster_of(w)).collect();
        let sel = {
            let mut lim = self.limiter.lock().unwrap_or_else(|e| e.into_inner());
            placement::select_clusters(pol, clusters, &hosting, now, Instant::now(), &mut lim)
        };
        let targets: Vec<&ClusterView> = clusters.iter().filter(|c| sel.targets.contains(&c.name)).collect();
        let mut desired: BTreeMap<String, Option<Share>> = BTreeMap::new();
        match work::replicas_of(t) {
            Some(total) => {
                let current: BTreeMap<String, i64> = live.iter().filter_map(|w| Some((cluster_of(w)?, work::share_of(w)?))).collect();
                let shares = placement::shares(&pol.placement.scheduling, total, &targets, &current);
                let divided = matches!(pol.placement.scheduling, Scheduling::Divided { .. });
                let completions: BTreeMap<String, i64> = match work::completions_of(t) {
                    Some(c) if divided => placement::divide(c, &shares).into_iter().collect(),
                    Some(c) => shares.iter().map(|(n, _)| (n.clone(), c)).collect(),
                    None => BTreeMap::new(),
                };
                for (cluster, n) in shares {
                    if divided && n == 0 && total > 0 {
                        continue;
                    }
                    let comp = completions.get(&cluster).copied();
                    desired.insert(cluster, Some(Share { replicas: n, completions: comp }));
                }
            }
            None => {
                for c in &targets {
                    desired.insert(c.name.clone(), None);
                }
            }
        }
        (desired, sel.retry_after)
    }

    /// Brings one template's Works, annotations and status in line with the policies and
    /// clusters. Returns when to look again (pending failover), if ever.
    async fn reconcile(&self, key: &TemplateKey) -> Result<Option<Duration>, PropagationError> {
        let inf = self.template_informer(key.kind.as_str()).ok_or_else(|| PropagationError::NotServed(key.kind.clone()))?;
        let works = self.works.by_index(&key.to_string());
        let template = inf.get(key.ns(), &key.name).filter(|t| !terminating(t));
        let governing = template.as_ref().and_then(|t| {
            let tr = template_ref(t)?;
            let policies = self.policies_for(key.ns());
            policy::select(&policies, &tr).cloned()
        });
        let now = Utc::now();
        // a Namespace no policy governs and that does not go everywhere (an exec namespace,
        // `kube-*`, opted out) is placed nowhere whatever the clusters: no views needed
        let placed_nowhere = key.kind == "Namespace" && key.group.is_empty() && governing.is_none() && !template.as_ref().is_some_and(|t| namespaces::auto_propagated(t));
        let clusters: Arc<[ClusterView]> = if template.is_none() || placed_nowhere { Arc::from(Vec::new()) } else { self.cluster_views(now) };
        let live: Vec<&Arc<Value>> = works.iter().filter(|w| !terminating(w)).collect();
        let cluster_of = |w: &Value| meta_str(w, "namespace").and_then(cluster_of_exec_namespace).map(str::to_string);

        // where it goes: its policy; else, for a Namespace, every member; else, for a
        // dependency of placed workloads, where they are
        let mut retry = None;
        let desired: BTreeMap<String, Option<Share>> = match (&template, &governing) {
            (None, _) => BTreeMap::new(),
            (Some(t), Some(pol)) => {
                let (d, r) = self.place_by_policy(t, pol, &clusters, &live, now);
                retry = r;
                d
            }
            (Some(t), None) if key.kind == "Namespace" && key.group.is_empty() => {
                if namespaces::auto_propagated(t) {
                    let hosting: BTreeSet<String> = live.iter().filter_map(|w| cluster_of(w)).collect();
                    clusters.iter().filter(|c| !c.deleting && (c.ready || hosting.contains(&c.name))).map(|c| (c.name.clone(), None)).collect()
                } else {
                    BTreeMap::new()
                }
            }
            (Some(_), None) => self.dependency_targets(key).into_iter().map(|c| (c, None)).collect(),
        };
        if let Some(t) = &template {
            if deps::has_deps(&key.kind) {
                self.enqueue_deps(t);
            }
        }
        let Some(t) = template.filter(|_| !desired.is_empty() || governing.is_some()) else {
            // deleted, or not placed at all: its Works go
            let mut errs = Vec::new();
            let orphan = key.kind == "Namespace" && inf.get(key.ns(), &key.name).is_some_and(|t| !terminating(&t));
            for w in &works {
                // a Namespace that stays in the federation is never deleted on members because
                // it stopped being propagated (that would delete everything in it)
                let r = if orphan { self.orphan_work(w).await } else { self.delete_work(w).await };
                if let Err(e) = r {
                    errs.push(e);
                }
            }
            if let Some(t) = inf.get(key.ns(), &key.name).filter(|t| !terminating(t)) {
                if let Err(e) = self.write_template_meta(&inf, &t, None, None).await {
                    errs.push(e);
                }
            }
            return collect(errs).map(|_| None);
        };
        let pol = governing;

        // Works
        let mut errs = Vec::new();
        let want_name = work::work_name(&key.kind, key.ns(), &key.name);
        let mut existing_for: BTreeMap<String, &Arc<Value>> = BTreeMap::new();
        for w in &works {
            let keep = cluster_of(w).filter(|c| desired.contains_key(c) && meta_str(w, "name") == Some(want_name.as_str()));
            match keep {
                Some(c) => {
                    existing_for.insert(c, w);
                }
                None => {
                    let r = if key.kind == "Namespace" { self.orphan_work(w).await } else { self.delete_work(w).await };
                    if let Err(e) = r {
                        errs.push(e);
                    }
                }
            }
        }
        let override_policies = self.override_policies_for(key.ns());
        let applicable = template_ref(&t).map(|tr| overrides::applicable(&override_policies, &tr)).unwrap_or_default();
        let mut outcomes: BTreeMap<String, overrides::Outcome> = BTreeMap::new();
        let mut writes = Vec::new();
        for (cluster, share) in &desired {
            let mut d = work::desired_work(&t, key, cluster, *share);
            if !applicable.is_empty() {
                if let (Some(cv), Some(m)) = (clusters.iter().find(|c| &c.name == cluster), d.pointer_mut("/spec/manifests/0")) {
                    let member = overrides::Member { name: &cv.name, labels: &cv.labels, zone: cv.zone.as_deref() };
                    let outcome = overrides::apply(&applicable, m, &member);
                    work::set_override_annotations(&mut d, &outcome);
                    outcomes.insert(cluster.clone(), outcome);
                }
            }
            match existing_for.get(cluster) {
                Some(w) if terminating(w) => {
                    // the agent is still removing the old one; its deletion event requeues us
                    retry = Some(retry.map_or(Duration::from_secs(5), |r: Duration| r.min(Duration::from_secs(5))));
                }
                Some(w) if !work::work_differs(w, &d) => {}
                Some(w) => writes.push(self.write_work(Some(w), d)),
                None => writes.push(self.write_work(None, d)),
            }
        }
        for r in futures::future::join_all(writes).await {
            if let Err(e) = r {
                errs.push(e);
            }
        }

        // status
        let members: Vec<status::MemberStatus> = desired
            .iter()
            .map(|(c, share)| {
                let mut m = status::member_status(c, existing_for.get(c).filter(|w| !terminating(w)).map(|w| w.as_ref()), key);
                m.share = share.map(|s| s.replicas);
                if let Some(o) = outcomes.remove(c) {
                    m.overrides = o.applied;
                    m.override_errors = o.failed;
                }
                m
            })
            .collect();
        let generation = t.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
        let breakdown = status::breakdown(&key.kind, &members);
        let previous: Option<Value> = meta_annotation(&t, work::ANNOTATION_CLUSTER_STATUS).and_then(|s| serde_json::from_str(&s).ok());
        let by = match &pol {
            Some(p) => match &p.namespace {
                Some(ns) => format!("{} {ns}/{}", p.kind(), p.name),
                None => format!("{} {}", p.kind(), p.name),
            },
            None if key.kind == "Namespace" => "every member".to_string(),
            None => "with the workloads that use it".to_string(),
        };
        let evs = events::transitions(previous.as_ref(), &breakdown, &by);
        if let Err(e) = self.write_template_meta(&inf, &t, pol.as_ref(), Some(&breakdown)).await {
            errs.push(e);
        }
        if let Some(st) = status::aggregate(&key.kind, generation, &members) {
            if t.get("status") != Some(&st) {
                let rr = self.rr(&inf.info, key.ns(), Some(&key.name), Some("status"));
                let st2 = st.clone();
                let r = self
                    .api
                    .guaranteed_update(&rr, &key.name, None, &self.ctx, move |cur| {
                        let mut n = cur.clone();
                        n["status"] = st2.clone();
                        Ok(n)
                    })
                    .await;
                match r {
                    Ok(_) | Err(ApiError::NotFound { .. }) => {}
                    Err(e) => errs.push(api_err(format!("status of {key}"))(e)),
                }
            }
        }
        // after the template's own writes, which clients wait for
        self.record_events(&t, &evs).await;
        collect(errs).map(|_| retry)
    }

    /// Records `events` about template `t` as core/v1 Events. Best effort: a failed write is
    /// logged, never retried (the reconcile's outcome does not depend on it).
    async fn record_events(&self, t: &Value, events: &[events::Event]) {
        let Some(info) = self.api.registry.lookup("", "v1", "events") else { return };
        for e in events {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
            let obj = events::event_object(t, e, "fedctl-propagation", &crate::api::object::now_rfc3339(), nanos);
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
            if let Err(err) = self.api.create(&self.rr(&info, Some(&ns), None, None), obj, &self.ctx).await {
                tracing::debug!(reason = e.reason, error = %err, "event not recorded");
            }
        }
    }

    /// Sets (or, with `pol: None`, removes) the policy and cluster-status annotations of a
    /// template, writing only when they differ.
    async fn write_template_meta(&self, inf: &Informer, t: &Value, pol: Option<&Policy>, breakdown: Option<&Value>) -> Result<(), PropagationError> {
        let mut want: BTreeMap<&str, Option<String>> = BTreeMap::new();
        want.insert(work::ANNOTATION_POLICY_NAME, pol.map(|p| p.name.clone()));
        want.insert(work::ANNOTATION_POLICY_NAMESPACE, pol.and_then(|p| p.namespace.clone()));
        want.insert(work::ANNOTATION_CLUSTER_STATUS, breakdown.map(|b| b.to_string()));
        let differs = |obj: &Value| want.iter().any(|(k, v)| meta_annotation(obj, k) != *v);
        if !differs(t) {
            return Ok(());
        }
        let name = meta_str(t, "name").unwrap_or("").to_string();
        let ns = meta_str(t, "namespace").map(str::to_string);
        let rr = self.rr(&inf.info, ns.as_deref(), Some(&name), None);
        let want2 = want.clone();
        let r = self
            .api
            .guaranteed_update(&rr, &name, None, &self.ctx, move |cur| {
                let mut n = cur.clone();
                let m = meta_mut(&mut n);
                let ann = m.entry("annotations").or_insert_with(|| json!({}));
                if !ann.is_object() {
                    *ann = json!({});
                }
                let a = ann.as_object_mut().expect("object");
                for (k, v) in &want2 {
                    match v {
                        Some(v) => {
                            a.insert((*k).to_string(), json!(v));
                        }
                        None => {
                            a.remove(*k);
                        }
                    }
                }
                if a.is_empty() {
                    m.remove("annotations");
                }
                Ok(n)
            })
            .await;
        match r {
            Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
            Err(e) => Err(api_err(format!("annotations of {}", TemplateKey::of(t).map(|k| k.to_string()).unwrap_or_default()))(e)),
        }
    }
}

fn collect(mut errs: Vec<PropagationError>) -> Result<(), PropagationError> {
    match errs.len() {
        0 => Ok(()),
        1 => Err(errs.remove(0)),
        n => Err(PropagationError::Several { count: n, first: Box::new(errs.remove(0)) }),
    }
}

/// The matching view of a template object.
fn template_ref(t: &Value) -> Option<TemplateRef<'_>> {
    Some(TemplateRef {
        api_version: t.get("apiVersion").and_then(Value::as_str)?,
        kind: t.get("kind").and_then(Value::as_str)?,
        namespace: meta_str(t, "namespace").filter(|s| !s.is_empty()),
        name: meta_str(t, "name")?,
        labels: t.pointer("/metadata/labels").and_then(Value::as_object),
    })
}

#[cfg(test)]
mod tests;
