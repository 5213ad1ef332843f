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
//! ([`work::strip_manifest`]) with the cluster's share. The template's Namespace is *not*
//! put in the Work: the agent creates missing namespaces, and a Namespace manifest would
//! make the deletion of one Work delete the whole member namespace. Propagating a Namespace
//! itself (labels, annotations) is done by selecting it with a ClusterPropagationPolicy.
//! ConfigMaps, Secrets, Services and ServiceAccounts propagate like any template. Works of
//! clusters no longer targeted, of templates no longer selected and of deleted templates
//! are deleted. Work creation waits (retrying) until the exec namespace exists; the
//! cluster-controller creates it.
//!
//! # Status
//! The members' statuses fed back in `status.manifestStatuses[]` are summed into the
//! template's status through `/status` ([`status::aggregate`]) with `observedGeneration`,
//! and kept per cluster in the `fedctl.io/cluster-status` annotation — each written only
//! when it changes.

pub mod placement;
pub use crate::api::policy;
pub mod status;
pub mod work;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::informer::{Change, Handler, Informer};
use super::workqueue::WorkQueue;
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
        Config {
            workers: 4,
            failover_limit: 2,
            failover_window: Duration::from_secs(60),
            retry_base: Duration::from_millis(50),
            retry_max: Duration::from_secs(30),
        }
    }
}

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
    works: Arc<Informer>,
    work_info: Arc<ResourceInfo>,
    queue: Arc<WorkQueue<String>>,
    limiter: Mutex<FailoverLimiter>,
    first_seen_not_ready: Mutex<HashMap<String, DateTime<Utc>>>,
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
        templates.insert(info.kind, Informer::new(info, None));
    }
    let work_info = lookup("work.fedctl.io", "v1alpha1", "works")?;
    let c = Arc::new(Controller {
        clusters: Informer::new(lookup("cluster.fedctl.io", "v1alpha1", "clusters")?, None),
        policies: Informer::new(lookup("policy.fedctl.io", "v1alpha1", "propagationpolicies")?, None),
        cluster_policies: Informer::new(lookup("policy.fedctl.io", "v1alpha1", "clusterpropagationpolicies")?, None),
        works: Informer::new(work_info.clone(), Some(|w| meta_annotation(w, work::ANNOTATION_TEMPLATE))),
        work_info,
        templates: std::sync::RwLock::new(templates),
        queue: WorkQueue::named("propagation", config.retry_base, config.retry_max),
        limiter: Mutex::new(FailoverLimiter::new(config.failover_limit, config.failover_window)),
        first_seen_not_ready: Mutex::new(HashMap::new()),
        ctx: Ctx {
            caller: Caller { user: "system:fedctl:propagation-controller".into(), groups: vec!["system:masters".into()] },
            dry_run: false,
            manager: "fedctl-propagation".into(),
            apply: false,
        },
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
    crate::controllers::tasks::spawn(c.clusters.clone().run(store.clone(), Arc::new(move |ch: &Change| me.on_cluster(ch))));
    let me = c.clone();
    crate::controllers::tasks::spawn(c.works.clone().run(store.clone(), Arc::new(move |ch: &Change| me.on_work(ch))));
    all.extend([c.policies.clone(), c.cluster_policies.clone(), c.clusters.clone(), c.works.clone()]);
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

    async fn worker(self: Arc<Self>) {
        while let Some(k) = self.queue.get().await {
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

    /// Every template that is placed (annotated with a policy or holding Works).
    fn enqueue_placed(&self) {
        for inf in self.template_informers() {
            for t in inf.list() {
                if meta_annotation(&t, work::ANNOTATION_POLICY_NAME).is_some() {
                    self.enqueue(&t);
                }
            }
        }
        for w in self.works.list() {
            if let Some(k) = meta_annotation(&w, work::ANNOTATION_TEMPLATE) {
                self.queue.add(k);
            }
        }
    }

    fn on_template(&self, ch: &Change) {
        if let Change::Modified { old, new } = ch {
            if template_unchanged(old, new) {
                return;
            }
        }
        let obj = ch.object();
        if let (Change::Added(_), Some("Namespace")) = (ch, obj.get("kind").and_then(Value::as_str)) {
            if meta_str(obj, "name").is_some_and(|n| work::cluster_of_namespace(n).is_some()) {
                // an exec namespace appeared: Works waiting for it can be written now
                self.enqueue_placed();
            }
        }
        self.enqueue(obj);
    }

    fn on_policy(&self, ch: &Change, cluster_scoped: bool) {
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
                if o.same_placement(&n) {
                    return; // heartbeats, resource usage
                }
            }
            Change::Deleted(old) => {
                let name = meta_str(old, "name").unwrap_or("").to_string();
                self.limiter.lock().unwrap_or_else(|e| e.into_inner()).forget(&name);
            }
            Change::Added(_) => {}
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
            self.queue.add(k);
        }
    }

    // -------------------------------------------------------------------------------------
    // Reconcile

    fn policies_for(&self, namespace: Option<&str>) -> Vec<Policy> {
        let mut out = Vec::new();
        if let Some(ns) = namespace {
            for p in self.policies.list() {
                if meta_str(&p, "namespace") == Some(ns) && !terminating(&p) {
                    if let Ok(p) = policy::parse(&p, false) {
                        out.push(p);
                    }
                }
            }
        }
        for p in self.cluster_policies.list() {
            if !terminating(&p) {
                if let Ok(p) = policy::parse(&p, true) {
                    out.push(p);
                }
            }
        }
        out
    }

    fn cluster_views(&self, now: DateTime<Utc>) -> Vec<ClusterView> {
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
        out
    }

    fn rr(&self, info: &Arc<ResourceInfo>, namespace: Option<&str>, name: Option<&str>, subresource: Option<&str>) -> ResourceRequest {
        ResourceRequest {
            info: info.clone(),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: subresource.map(str::to_string),
            watch_path: false,
        }
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
        let (Some(t), Some(pol)) = (template, governing) else {
            // deleted, or no longer selected: its Works go
            let mut errs = Vec::new();
            for w in &works {
                if let Err(e) = self.delete_work(w).await {
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

        // placement
        let now = Utc::now();
        let clusters = self.cluster_views(now);
        let live: Vec<&Arc<Value>> = works.iter().filter(|w| !terminating(w)).collect();
        let cluster_of = |w: &Value| meta_str(w, "namespace").and_then(work::cluster_of_namespace).map(str::to_string);
        let hosting: BTreeSet<String> = live.iter().filter_map(|w| cluster_of(w)).collect();
        let sel = {
            let mut lim = self.limiter.lock().unwrap_or_else(|e| e.into_inner());
            placement::select_clusters(&pol, &clusters, &hosting, now, Instant::now(), &mut lim)
        };
        let targets: Vec<&ClusterView> = clusters.iter().filter(|c| sel.targets.contains(&c.name)).collect();

        // division
        let mut desired: BTreeMap<String, Option<Share>> = BTreeMap::new();
        match work::replicas_of(&t) {
            Some(total) => {
                let current: BTreeMap<String, i64> = live
                    .iter()
                    .filter_map(|w| Some((cluster_of(w)?, w.pointer("/spec/manifests/0").and_then(work::replicas_of)?)))
                    .collect();
                let shares = placement::shares(&pol.placement.scheduling, total, &targets, &current);
                let divided = matches!(pol.placement.scheduling, Scheduling::Divided { .. });
                let completions: BTreeMap<String, i64> = match work::completions_of(&t) {
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
                    if let Err(e) = self.delete_work(w).await {
                        errs.push(e);
                    }
                }
            }
        }
        let mut retry = sel.retry_after;
        let mut writes = Vec::new();
        for (cluster, share) in &desired {
            let d = work::desired_work(&t, key, cluster, *share);
            match existing_for.get(cluster) {
                Some(w) if terminating(w) => {
                    // the agent is still removing the old one; its deletion event requeues us
                    retry = Some(retry.map_or(Duration::from_secs(5), |r| r.min(Duration::from_secs(5))));
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
            .keys()
            .map(|c| status::member_status(c, existing_for.get(c).filter(|w| !terminating(w)).map(|w| w.as_ref()), key))
            .collect();
        let generation = t.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
        let breakdown = status::breakdown(&key.kind, &members);
        if let Err(e) = self.write_template_meta(&inf, &t, Some(&pol), Some(&breakdown)).await {
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
        collect(errs).map(|_| retry)
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
