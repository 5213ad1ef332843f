//! The global resource cache: list/watch of the configured kinds in every member cluster,
//! merged into one store per kind with a global resourceVersion; uses `api`, `storage`, `pki`,
//! `http` and `telemetry` (its unit tests also fedsim's generator).
//!
//! Modelled on kube-apiserver's cacher/watchCache:
//! - [`store::KindStore`]: current objects keyed by (namespace, name, cluster), each kept as
//!   its encoded JSON with the `fedctl.io/cluster` annotation already spliced in, and a ring
//!   buffer of recent events (starts at 100, doubles while its oldest event is younger than
//!   the window — 75 s — up to a bound), each event encoded once and shared as `Bytes` by all
//!   watchers;
//! - [`rv::GlobalRv`]: the global resourceVersion (member cluster → position), one opaque
//!   URL-safe string;
//! - [`ingest`]: per (member, kind) a list + watch with the credential the agent synced
//!   (Secret `data.token`, `data["ca.crt"]`, `data.server` named by the Cluster's
//!   `spec.secretRef`); after a dropped connection it resumes from its last resourceVersion,
//!   after a 410 it relists and the store emits the difference as ADDED/MODIFIED/DELETED.
//! - [`GlobalCache`]: reconciles Clusters and their credential Secrets with running ingests
//!   (a Cluster that leaves → its objects are DELETED; a credential change → ingest restarts).
//!
//! ## Stale members
//! A member whose data may not be current keeps its objects in the view (only a Cluster that
//! leaves removes them): its Cluster's `Ready` condition is not `True`, or one of its ingests
//! is not connected (its LIST fails, or its watch dropped and waits in backoff). Reads of the
//! view then carry one Kubernetes warning header per such member
//! ([`GlobalCache::stale_warnings`]), and `fedctl_cache_member_stale{cluster}` is 1; once the
//! member is back its ingest resumes (or relists) and the view catches up.
//!
//! ## Namespace shards
//! Each [`store::KindStore`] is split into shards by namespace (a hot namespace further by a
//! hash of the object name) following the versioned [`shard::ShardMap`] kept in etcd and
//! rebalanced from observed object counts (see [`shard`] for placement, storage and the
//! rebalancing protocol). Each shard holds its objects and a ring of their recent events
//! (bounded by the window and `max_events / shards`). Writes of one kind are sequenced
//! kind-wide, so the merged stream keeps each member's order and every event's global
//! resourceVersion is exact; a GET locks one shard at a time, a LIST page every shard for
//! the page's merge (in index order, as a watch start does). A global resourceVersion stays
//! a map cluster → position: the MUX merges shard listings in key order, rolling each shard
//! back to the page's snapshot ([`store::KindStore::list_at`], which reads each shard only up
//! to the page's last object), and shard rings by sequence number.
//!
//! ## In-process or out-of-process shards
//! By default the shards run in the server process. `fedctl cache --shards 0,1
//! --shard-count 4` ([`process`]) runs a [`GlobalCache`] with the same ingest
//! ([`GlobalCache::run_members`]) that keeps only the objects of its shards (events of other
//! shards only advance the member's position, [`store::KindStore::own_only`]) and serves the
//! search API for them; `fedctl server --cache-endpoints https://a,https://b` then tracks
//! members without ingesting ([`CacheConfig::ingest`]) and answers cached-kind reads through
//! the MUX of [`crate::search::remote`]. Positions are compared at member-resourceVersion
//! granularity where processes meet (see [`rv`]).

pub mod codec;
pub mod ingest;
pub mod rv;
pub mod shard;
pub mod store;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use crate::api::registry::{Cell, Column, LiveRegistry, Registry, ResourceInfo};
use crate::api::request::{Query, ResourceRequest};
use crate::api::ApiServer;
use rv::GlobalRv;
use store::KindStore;

/// Annotation naming the member cluster an object of the global view comes from.
pub const CLUSTER_ANNOTATION: &str = "fedctl.io/cluster";

/// Errors of the cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A global resourceVersion that does not parse (400).
    #[error("invalid global resource version: {0}")]
    MalformedRv(String),
    /// A resourceVersion older than the window (410 Expired).
    #[error("{0}")]
    Expired(String),
    /// A member answered something unusable.
    #[error("member: {0}")]
    Member(String),
    /// A member could not be reached.
    #[error("member request: {0}")]
    Http(#[from] reqwest::Error),
    /// A kind that cannot be cached.
    #[error("unknown kind to cache: {0}")]
    UnknownKind(String),
}

/// A member's connection details, from its credential Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// `https://host:port` of the member's API server.
    pub server: String,
    /// Bearer token.
    pub token: String,
    /// PEM CA bundle of the member's serving certificate.
    pub ca_pem: String,
}

/// A member with running ingests.
pub struct Member {
    /// Its credential.
    pub credential: Credential,
    /// Epoch of its ingests.
    epoch: u64,
    /// An HTTP client trusting its CA and sending its token.
    pub http: reqwest::Client,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Per cached kind: whether its ingest is connected and synced (see [`ingest::run`]).
    connected: BTreeMap<String, Arc<std::sync::atomic::AtomicBool>>,
    /// Per cached kind: whether its first LIST ended (applied or failed).
    settled: BTreeMap<String, Arc<std::sync::atomic::AtomicBool>>,
}

impl Drop for Member {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The member kinds cached by default (`--cache-resources`): what operators list across
/// clusters. Any other kind is listed across members by fan-out (see `search::member`).
pub const DEFAULT_RESOURCES: &str = "pods,nodes,namespaces,events,deployments,replicasets,statefulsets,daemonsets,jobs,services,endpointslices";

/// Tunables of the cache.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Plural resource names of the member kinds to cache (`pods`, `nodes`, `deployments`, …).
    pub resources: Vec<String>,
    /// Ring buffer bound per kind (kube-apiserver: 102,400).
    pub max_events: usize,
    /// The ring keeps at least this much history while under the bound (kube-apiserver: 75 s).
    pub window: Duration,
    /// How often Clusters and Secrets are reconciled.
    pub resync: Duration,
    /// In-process shards per kind.
    pub shards: usize,
    /// How often the shard map is re-read from etcd and, when unbalanced, recomputed.
    pub rebalance_interval: Duration,
    /// Keep only the objects of these shards (of [`CacheConfig::shards`]): a `fedctl cache`
    /// process holding a shard subset (see [`process`]). `None`: all shards.
    pub owned: Option<Vec<usize>>,
    /// Run ingests (list + watch of every member). `false`: members are only tracked (their
    /// credentials serve proxying), the objects live in `fedctl cache` processes.
    pub ingest: bool,
    /// Store the first shard map and propose rebalanced ones. Cache processes only adopt.
    pub propose_maps: bool,
    /// Follow only the members whose Cluster has this `spec.zone` (`fedctl cache --zone`):
    /// one cache process per availability zone, so that each member is listed once. The
    /// Clusters of other zones are *foreign*: a requested global resourceVersion is read
    /// without them ([`GlobalCache::local_rv`]). `None`: every member.
    pub zone: Option<String>,
    /// Member LISTs (one member, one kind) run at once by the ingests; the rest wait. Each
    /// holds a member's whole state of that kind until it is stored, so this bounds the memory
    /// of a cache that starts with many members (and their load on the members).
    pub list_concurrency: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            resources: DEFAULT_RESOURCES.split(',').map(str::to_string).collect(),
            max_events: 102_400,
            window: Duration::from_secs(75),
            resync: Duration::from_secs(1),
            shards: 4,
            rebalance_interval: Duration::from_secs(10),
            owned: None,
            ingest: true,
            propose_maps: true,
            zone: None,
            list_concurrency: 16,
        }
    }
}

/// The global cache: one [`KindStore`] per cached kind and the members feeding them.
pub struct GlobalCache {
    /// Cached kinds by plural resource name.
    pub kinds: BTreeMap<String, Arc<KindStore>>,
    /// Every member kind (discovery, proxying non-cached kinds): the built-in kinds, plus the
    /// custom resources of the federation's CRDs where the view follows them
    /// ([`LiveRegistry::follow_custom`]).
    pub member_registry: LiveRegistry,
    members: Mutex<BTreeMap<String, Member>>,
    /// Last ingest epoch handed out.
    epochs: std::sync::atomic::AtomicU64,
    /// Bumped whenever the member set changes (kubeconfig rewrite).
    pub generation: tokio::sync::watch::Sender<u64>,
    /// Whether members' kinds are ingested (see [`CacheConfig::ingest`]).
    ingest: bool,
    /// Members whose Cluster reports a `Ready` condition other than `True`.
    not_ready: Mutex<std::collections::BTreeSet<String>>,
    /// The members were read from the federation at least once.
    members_known: std::sync::atomic::AtomicBool,
    /// Latched by [`GlobalCache::initialized`].
    initialized: std::sync::atomic::AtomicBool,
    /// The zone whose members this cache follows ([`CacheConfig::zone`]).
    zone: Option<String>,
    /// With a zone: the Clusters whose `spec.zone` is another one (or unset).
    foreign: Mutex<std::collections::BTreeSet<String>>,
    /// Permits of the ingests' LISTs ([`CacheConfig::list_concurrency`]).
    lists: Arc<tokio::sync::Semaphore>,
}

fn cluster_column() -> Column {
    Column {
        name: "Cluster",
        type_: "string",
        format: "",
        priority: 0,
        description: "The member cluster the object lives in.",
        cell: Cell::Func(|o| o.pointer("/metadata/annotations/fedctl.io~1cluster").cloned().unwrap_or(Value::String(String::new()))),
    }
}

/// `info` with the CLUSTER column before its own columns (a kind the cache does not hold,
/// listed across members by fan-out).
pub fn with_cluster_column_of(info: &ResourceInfo) -> ResourceInfo {
    let mut columns = vec![cluster_column()];
    columns.extend(info.columns.iter().copied());
    ResourceInfo { columns, custom: info.custom.clone(), ..*info }
}

/// The member registry's entry for `resource` with a CLUSTER column first after NAME.
fn with_cluster_column(resource: &str) -> Option<ResourceInfo> {
    use crate::api::registry as r;
    let info = match resource {
        "pods" => r::pod(),
        "nodes" => r::node(),
        "namespaces" => r::namespace(),
        "events" => r::event(),
        "endpoints" => r::endpoints(),
        "configmaps" => r::configmap(),
        "secrets" => r::secret(),
        "services" => r::service(),
        "serviceaccounts" => r::serviceaccount(),
        "deployments" => r::deployment(),
        "replicasets" => r::replicaset(),
        "statefulsets" => r::statefulset(),
        "daemonsets" => r::daemonset(),
        "jobs" => r::job(),
        "endpointslices" => return Registry::member().lookup("discovery.k8s.io", "v1", "endpointslices").map(|i| with_cluster_column_of(&i)),
        _ => return None,
    };
    let mut columns = vec![cluster_column()];
    columns.extend(info.columns.iter().copied());
    Some(ResourceInfo { columns, ..info })
}

impl GlobalCache {
    /// A cache for `config.resources`. Errors: [`CacheError::UnknownKind`].
    pub fn new(config: &CacheConfig) -> Result<Arc<GlobalCache>, CacheError> {
        let mut kinds = BTreeMap::new();
        for res in &config.resources {
            let info = with_cluster_column(res).ok_or_else(|| CacheError::UnknownKind(res.clone()))?;
            let store = KindStore::sharded(Arc::new(info), config.max_events, config.window, config.shards);
            if let Some(owned) = &config.owned {
                store.own_only(owned);
            }
            kinds.insert(res.clone(), Arc::new(store));
        }
        Ok(Arc::new(GlobalCache {
            kinds,
            member_registry: LiveRegistry::new(Registry::member()),
            members: Mutex::new(BTreeMap::new()),
            epochs: Default::default(),
            generation: tokio::sync::watch::channel(0).0,
            ingest: config.ingest,
            not_ready: Mutex::new(Default::default()),
            members_known: Default::default(),
            initialized: Default::default(),
            zone: config.zone.clone(),
            foreign: Mutex::new(Default::default()),
            lists: Arc::new(tokio::sync::Semaphore::new(config.list_concurrency.max(1))),
        }))
    }

    /// The store of a cached kind (`group`, plural `resource`).
    pub fn kind(&self, group: &str, resource: &str) -> Option<&Arc<KindStore>> {
        self.kinds.get(resource).filter(|k| k.info.group == group)
    }

    /// Names of the members with running ingests.
    pub fn member_names(&self) -> Vec<String> {
        self.members.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect()
    }

    /// The HTTP client and server URL of member `name`.
    pub fn member_client(&self, name: &str) -> Option<(reqwest::Client, String)> {
        self.members.lock().unwrap_or_else(|e| e.into_inner()).get(name).map(|m| (m.http.clone(), m.credential.server.clone()))
    }

    /// Number of shards per kind.
    pub fn shard_count(&self) -> usize {
        self.kinds.values().next().map_or(1, |k| k.shard_count())
    }

    /// Version of the shard map in force.
    pub fn map_version(&self) -> u64 {
        self.kinds.values().next().map_or(0, |k| k.map_version())
    }

    /// Objects per namespace over all kinds.
    pub fn namespace_counts(&self) -> BTreeMap<String, usize> {
        let mut out: BTreeMap<String, usize> = BTreeMap::new();
        for k in self.kinds.values() {
            for (ns, c) in k.namespace_counts() {
                *out.entry(ns).or_default() += c;
            }
        }
        out
    }

    /// Objects per shard over all kinds.
    pub fn shard_loads(&self) -> Vec<usize> {
        let mut loads = vec![0; self.shard_count()];
        for k in self.kinds.values() {
            for (i, s) in k.shard_stats().iter().enumerate() {
                loads[i] += s.objects;
            }
        }
        loads
    }

    /// Moves every kind to `map` (see [`store::KindStore::apply_map`]).
    pub fn apply_map(&self, map: &shard::ShardMap) {
        for k in self.kinds.values() {
            k.apply_map(map.clone());
        }
        tracing::info!(version = map.version, "global cache: shard map applied");
    }

    /// Shards whose objects this cache keeps (all, unless [`CacheConfig::owned`]).
    pub fn owned_shards(&self) -> Vec<usize> {
        self.kinds.values().next().map_or_else(|| (0..self.shard_count()).collect(), |k| k.owned_shards())
    }

    /// The status document served at `/apis/search.fedctl.io/v1alpha1/shards`:
    /// `{"mapVersion": 3, "shardCount": 4, "shards": [{"id": 0, "objects": 120, "kinds":
    /// {"pods": {...}}}], "resourceVersions": {"pods": "g…"}, "synced": true, "namespaces":
    /// {"shop": 120}}`. `shards` lists only the shards this process holds; `resourceVersions`
    /// is each kind's current global resourceVersion, `synced` [`GlobalCache::synced`] and
    /// `namespaces` the objects held per namespace (what a MUX over `fedctl cache` processes
    /// reads positions and loads from).
    pub fn status(&self) -> Value {
        let loads = self.shard_loads();
        let rvs: serde_json::Map<String, Value> = self.kinds.iter().map(|(n, k)| (n.clone(), Value::String(k.current_rv()))).collect();
        let shards: Vec<Value> = self
            .owned_shards()
            .into_iter()
            .map(|i| {
                let kinds: serde_json::Map<String, Value> = self.kinds.iter().map(|(n, k)| (n.clone(), serde_json::to_value(&k.shard_stats()[i]).unwrap_or(Value::Null))).collect();
                serde_json::json!({"id": i, "objects": loads[i], "kinds": kinds})
            })
            .collect();
        serde_json::json!({"mapVersion": self.map_version(), "shardCount": self.shard_count(), "shards": shards, "resourceVersions": rvs, "synced": self.synced(), "initialized": self.initialized(), "namespaces": self.namespace_counts(), "zone": self.zone})
    }

    /// The zone whose members this cache follows (`None`: every member).
    pub fn zone(&self) -> Option<&str> {
        self.zone.as_deref()
    }

    /// Whether `name` is a Cluster of another zone than this cache's (never with no zone):
    /// one it knows of and does not hold, so its part of the view here is empty, not missing.
    pub fn is_foreign(&self, name: &str) -> bool {
        self.zone.is_some() && self.foreign.lock().unwrap_or_else(|e| e.into_inner()).contains(name)
    }

    /// `rv` without the clusters of other zones, which a zone cache never holds: a MUX's
    /// snapshot or continue token names every member of the view, and each zone process reads
    /// only its own part of it. Clusters this cache does not know of at all stay in (the
    /// stores answer 410 for them, as for a member that left). Without a zone: `rv` as it is.
    pub fn local_rv(&self, mut rv: GlobalRv) -> GlobalRv {
        if self.zone.is_some() {
            let foreign = self.foreign.lock().unwrap_or_else(|e| e.into_inner());
            rv.0.retain(|c, _| !foreign.contains(c));
        }
        rv
    }

    /// The members whose objects in the view may be stale, with the reason: their Cluster is
    /// not Ready (its `Ready` condition is present and not `True`), or the ingest of
    /// `resource` (any cached kind when `None`) is not connected and synced. Sorted by name.
    pub fn stale_members(&self, resource: Option<&str>) -> Vec<(String, String)> {
        let not_ready = self.not_ready.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (name, m) in members.iter() {
            if not_ready.contains(name) {
                out.push((name.clone(), "cluster is not Ready".to_string()));
                continue;
            }
            let down = m.connected.iter().find(|(k, c)| resource.is_none_or(|r| r == k.as_str()) && !c.load(std::sync::atomic::Ordering::Relaxed));
            if let Some((k, _)) = down {
                out.push((name.clone(), format!("the cache's list/watch of {k} is not connected")));
            }
        }
        out
    }

    /// The `Warning` header values of a read of `resource` in the view (of member `cluster`
    /// only when given): one per stale member ([`GlobalCache::stale_members`]), in
    /// kube-apiserver's format `299 - "<member>: <reason>; its objects in this view may be
    /// stale"` (kubectl prints the text on stderr).
    pub fn stale_warnings(&self, resource: &str, cluster: Option<&str>) -> Vec<String> {
        self.stale_members(Some(resource))
            .into_iter()
            .filter(|(n, _)| cluster.is_none_or(|c| c == n))
            .map(|(n, why)| warning_header(&format!("{n}: {why}; its objects in this view may be stale")))
            .collect()
    }

    /// Sets `fedctl_cache_member_stale{cluster}` for every tracked member (removing the series
    /// of members that left).
    fn refresh_stale_metric(&self, gone: &[String]) {
        let fam = &crate::telemetry::metrics::server().cache_member_stale;
        let stale: std::collections::BTreeSet<String> = self.stale_members(None).into_iter().map(|(n, _)| n).collect();
        for n in self.member_names() {
            fam.get_or_create(&crate::telemetry::metrics::ClusterLabel { cluster: n.clone() }).set(i64::from(stale.contains(&n)));
        }
        for n in gone {
            fam.remove(&crate::telemetry::metrics::ClusterLabel { cluster: n.clone() });
        }
    }

    /// Whether the cache has finished its start: the members were read from the federation
    /// and the first LIST of every member and kind then known has ended (applied, or failed:
    /// that member is then reported stale rather than waited for). Until then a read of the
    /// current state would miss whole members, so the view answers 429 (as kube-apiserver's
    /// watch cache does while it initializes) and clients retry. Latched: members that join
    /// later appear as they are listed. Always true without ingest (`--cache-endpoints`).
    pub fn initialized(&self) -> bool {
        use std::sync::atomic::Ordering;
        if !self.ingest || self.initialized.load(Ordering::SeqCst) {
            return true;
        }
        if !self.members_known.load(Ordering::SeqCst) {
            return false;
        }
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        let done = members.values().all(|m| m.settled.values().all(|d| d.load(Ordering::SeqCst)));
        if done {
            self.initialized.store(true, Ordering::SeqCst);
        }
        done
    }

    /// Whether every member with running ingests has a current state in every kind (false
    /// while members are first listed, or relisted after [`GlobalCache::resync`]).
    pub fn synced(&self) -> bool {
        !self.ingest || self.member_names().iter().all(|m| self.kinds.values().all(|k| k.has_cluster(m)))
    }

    /// Sets the cache gauges of [`crate::telemetry::metrics::server`] (objects, events and bytes per held
    /// shard and kind, stale members) before a scrape.
    pub fn refresh_metrics(&self) {
        self.refresh_stale_metric(&[]);
        let m = crate::telemetry::metrics::server();
        for (resource, store) in &self.kinds {
            let owned = store.owned_shards();
            let bytes = store.shard_bytes();
            for (i, s) in store.shard_stats().iter().enumerate() {
                if !owned.contains(&i) {
                    continue;
                }
                let l = crate::telemetry::metrics::ShardLabels { shard: i.to_string(), resource: resource.clone() };
                m.cache_objects.get_or_create(&l).set(s.objects as i64);
                m.cache_events.get_or_create(&l).set(s.ring_events as i64);
                m.cache_bytes.get_or_create(&l).set(bytes[i] as i64);
            }
        }
    }

    /// Keeps the shard map in step with etcd forever (every `config.rebalance_interval`):
    /// adopts a newer stored version and, unless `config.propose_maps` is false (then it only
    /// adopts, see [`shard`] for cache processes), stores the first one and proposes a
    /// balanced map (compare-and-swap) by the rule of [`shard::ShardMap::rebalanced`].
    pub async fn run_shard_map(self: Arc<Self>, store: Arc<dyn crate::storage::Storage>, config: CacheConfig) {
        let n = self.shard_count();
        loop {
            let step = if config.propose_maps { self.shard_map_step(&*store, n).await } else { self.adopt_map(&*store).await };
            if let Err(e) = step {
                tracing::debug!(error = %e, "global cache: shard map");
            }
            tokio::time::sleep(config.rebalance_interval).await;
        }
    }

    /// Adopts a newer stored shard map without ever proposing one (a `fedctl cache` process).
    /// A map that changes which objects this cache holds restarts every ingest: the cache
    /// drops what it held, ends its watches, and relists (see the protocol in [`shard`]).
    async fn adopt_map(self: &Arc<Self>, store: &dyn crate::storage::Storage) -> Result<(), shard::ShardMapError> {
        let Some((map, _)) = shard::load(store).await? else { return Ok(()) };
        if map.version == self.map_version() {
            return Ok(());
        }
        let old = self.kinds.values().next().map(|k| k.map());
        let moved = old.is_none_or(|o| o.shards != map.shards || o.namespaces != map.namespaces);
        let subset = self.owned_shards().len() < self.shard_count();
        if moved && subset {
            tracing::info!(version = map.version, "global cache: held namespaces changed; resyncing");
            self.resync(&map);
        } else {
            self.apply_map(&map);
        }
        Ok(())
    }

    /// Adopts `map` by dropping every held object and relisting every member: live watches
    /// end, clusters leave (under the old map, where their objects are) and rejoin as new
    /// incarnations under `map` (resourceVersions from before answer 410 here).
    pub fn resync(self: &Arc<Self>, map: &shard::ShardMap) {
        let members: Vec<(String, Credential)> = {
            let mut m = self.members.lock().unwrap_or_else(|e| e.into_inner());
            let out = m.iter().map(|(n, mem)| (n.clone(), mem.credential.clone())).collect();
            for k in self.kinds.values() {
                k.close_watchers();
            }
            for (n, mem) in std::mem::take(&mut *m) {
                let epoch = mem.epoch;
                drop(mem); // stops its ingests
                for k in self.kinds.values() {
                    k.leave(&n, epoch);
                }
            }
            out
        };
        self.apply_map(map);
        self.reconcile(members.into_iter().collect());
    }

    async fn shard_map_step(&self, store: &dyn crate::storage::Storage, n: usize) -> Result<(), shard::ShardMapError> {
        let Some((map, rev)) = shard::load(store).await? else {
            let first = shard::ShardMap { version: 1, ..shard::ShardMap::hashed(n as u32) };
            shard::publish(store, &first, None).await?;
            return Ok(());
        };
        if map.version != self.map_version() {
            self.apply_map(&map);
        }
        if map.shards as usize != n {
            return Ok(());
        }
        let Some((next, max, predicted)) = map.rebalanced(&self.namespace_counts(), &self.shard_loads()) else { return Ok(()) };
        shard::publish(store, &next, Some(rev)).await?;
        tracing::info!(version = next.version, from = max, to = predicted, "global cache: shard map rebalanced");
        self.apply_map(&next);
        Ok(())
    }

    /// Reconciles forever: every `config.resync`, reads Clusters and their credential Secrets
    /// from the federation API and starts, restarts or stops ingests; also keeps the shard map
    /// in step with etcd ([`GlobalCache::run_shard_map`]).
    pub async fn run(self: Arc<Self>, api: Arc<ApiServer>, config: CacheConfig) {
        tokio::spawn(self.clone().run_shard_map(api.store.clone(), config.clone()));
        self.run_members(api, config.resync).await
    }

    /// The member loop of [`GlobalCache::run`] (shared by `fedctl server` and `fedctl cache`):
    /// reads every Cluster and its credential Secret once, then follows changes (mirrors an
    /// informer: watches of Clusters and Secrets from the revision before that read), and
    /// every `resync` re-reads only the Clusters that changed, or whose credential Secret
    /// did, and reconciles the ingests. A watch that ends (store outage, compaction, a
    /// watcher too slow for the watch cache) re-reads everything. So an idle federation costs
    /// nothing per `resync`, and a change costs a read of one Cluster and one Secret, not a
    /// LIST of every Cluster.
    pub async fn run_members(self: Arc<Self>, api: Arc<ApiServer>, resync: Duration) {
        let (Some(clusters), Some(secrets)) = (api.registry.lookup("cluster.fedctl.io", "v1alpha1", "clusters"), api.registry.lookup("", "v1", "secrets")) else {
            tracing::error!("global cache: clusters or secrets not served; no members followed");
            return;
        };
        let mut delay = resync;
        loop {
            match self.follow_members(&api, &clusters, &secrets, resync).await {
                Ok(()) => delay = resync,
                Err(e) => {
                    tracing::debug!(error = %e, "global cache: reading clusters; retrying");
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// One term of [`GlobalCache::run_members`]: the full read, then changes until a watch
    /// ends (`Ok`: re-read at once) or a read fails (`Err`: re-read after a backoff).
    async fn follow_members(self: &Arc<Self>, api: &Arc<ApiServer>, clusters: &Arc<ResourceInfo>, secrets: &Arc<ResourceInfo>, resync: Duration) -> Result<(), crate::api::ApiError> {
        let from = api.store.current_revision().await?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Changed>();
        let watches = [
            tokio::spawn(watch_keys(api.store.clone(), clusters.prefix(), from, tx.clone(), |key| Changed::Cluster(key.rsplit('/').next().unwrap_or("").to_string()))),
            tokio::spawn(watch_keys(api.store.clone(), secrets.prefix(), from, tx, |key| Changed::Secret(key.to_string()))),
        ];
        let _stop = AbortOnDrop(watches);
        let mut followed = read_members(api, clusters, secrets).await?;
        self.apply_members(&followed);
        loop {
            tokio::time::sleep(resync).await;
            let mut changed = std::collections::BTreeSet::new();
            let mut secret_keys = std::collections::HashSet::new();
            loop {
                match rx.try_recv() {
                    Ok(Changed::Cluster(name)) => {
                        changed.insert(name);
                    }
                    Ok(Changed::Secret(key)) => {
                        secret_keys.insert(key);
                    }
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                    Ok(Changed::Ended) | Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => return Ok(()),
                }
            }
            if !secret_keys.is_empty() {
                changed.extend(followed.iter().filter(|(_, f)| f.secret_key.as_ref().is_some_and(|k| secret_keys.contains(k))).map(|(n, _)| n.clone()));
            }
            if changed.is_empty() {
                continue;
            }
            for name in changed {
                match read_member(api, clusters, secrets, &name).await? {
                    Some(f) => followed.insert(name, f),
                    None => followed.remove(&name),
                };
            }
            self.apply_members(&followed);
        }
    }

    /// Reconciles the ingests with the followed Clusters and records which are not Ready.
    fn apply_members(self: &Arc<Self>, followed: &BTreeMap<String, Followed>) {
        let before = self.member_names();
        let mut creds = BTreeMap::new();
        let mut not_ready = std::collections::BTreeSet::new();
        let mut foreign = std::collections::BTreeSet::new();
        for (name, f) in followed {
            if self.zone.is_some() && f.zone != self.zone {
                foreign.insert(name.clone());
                continue;
            }
            let Some((cred, ready)) = &f.member else { continue };
            if !ready {
                not_ready.insert(name.clone());
            }
            creds.insert(name.clone(), cred.clone());
        }
        let gone: Vec<String> = before.into_iter().filter(|n| !creds.contains_key(n)).collect();
        *self.not_ready.lock().unwrap_or_else(|e| e.into_inner()) = not_ready;
        *self.foreign.lock().unwrap_or_else(|e| e.into_inner()) = foreign;
        self.reconcile(creds);
        self.members_known.store(true, std::sync::atomic::Ordering::SeqCst);
        self.refresh_stale_metric(&gone);
    }

    /// Makes the running ingests match `want` (member name → credential).
    pub fn reconcile(self: &Arc<Self>, want: BTreeMap<String, Credential>) {
        let mut changed = false;
        let mut gone = Vec::new();
        {
            let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
            let names: Vec<String> = members.keys().cloned().collect();
            for n in names {
                if !want.contains_key(&n) {
                    if let Some(m) = members.remove(&n) {
                        gone.push((n, m.epoch));
                    }
                    changed = true;
                }
            }
            for (name, cred) in want {
                if members.get(&name).is_some_and(|m| m.credential == cred) {
                    continue;
                }
                let http = match member_http(&cred) {
                    Ok(h) => h,
                    Err(e) => {
                        tracing::warn!(cluster = %name, error = %e, "global cache: unusable credential");
                        continue;
                    }
                };
                let cluster: Arc<str> = Arc::from(name.as_str());
                let epoch = self.epochs.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                let mut connected = BTreeMap::new();
                let mut settled = BTreeMap::new();
                let mut tasks = Vec::new();
                if self.ingest {
                    for (res, k) in &self.kinds {
                        let c = Arc::new(std::sync::atomic::AtomicBool::new(false));
                        let d = Arc::new(std::sync::atomic::AtomicBool::new(false));
                        connected.insert(res.clone(), c.clone());
                        settled.insert(res.clone(), d.clone());
                        tasks.push(tokio::spawn(ingest::run(k.clone(), epoch, cluster.clone(), http.clone(), cred.server.clone(), c, d, self.lists.clone())));
                    }
                }
                tracing::info!(cluster = %name, server = %cred.server, "global cache: ingest started");
                // replacing drops (aborts) the old ingest; the new one relists and diffs
                members.insert(name, Member { credential: cred, epoch, http, tasks, connected, settled });
                changed = true;
            }
        }
        for (n, epoch) in gone {
            tracing::info!(cluster = %n, "global cache: cluster left");
            for k in self.kinds.values() {
                k.leave(&n, epoch);
            }
        }
        if changed {
            self.generation.send_modify(|g| *g += 1);
        }
    }
}

fn member_http(cred: &Credential) -> Result<reqwest::Client, CacheError> {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert("authorization", format!("Bearer {}", cred.token).parse().map_err(|_| CacheError::Member("token is not a header value".into()))?);
    let mut b = reqwest::Client::builder().use_rustls_tls().default_headers(h).connect_timeout(Duration::from_secs(5));
    if !cred.ca_pem.is_empty() {
        for c in reqwest::Certificate::from_pem_bundle(cred.ca_pem.as_bytes())? {
            b = b.add_root_certificate(c);
        }
    }
    Ok(b.build()?)
}

/// A `Warning` header value (`299 - "<text>"`, as kube-apiserver writes them; quotes and
/// backslashes in `text` escaped, control characters dropped).
pub fn warning_header(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str("299 - \"");
    for ch in text.chars() {
        match ch {
            '"' | '\\' => {
                out.push('\\');
                out.push(ch);
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether a Cluster counts as Ready for the view: its `Ready` condition is `True`, or it has
/// none yet (no verdict: a member that just joined).
fn cluster_ready(c: &Value) -> bool {
    let cond = c.pointer("/status/conditions").and_then(Value::as_array).and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready")));
    cond.is_none_or(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

/// What [`GlobalCache::run_members`] keeps of a Cluster.
struct Followed {
    /// Storage key of the credential Secret its `spec.secretRef` names (its changes make
    /// the Cluster read again).
    secret_key: Option<String>,
    /// Its `spec.zone`.
    zone: Option<String>,
    /// Its credential and [`cluster_ready`], when the Secret holds a usable one and the
    /// Cluster is not being deleted.
    member: Option<(Credential, bool)>,
}

/// A change seen by [`watch_keys`]: a Cluster (by name), a Secret (by storage key), or the
/// watch's end.
enum Changed {
    Cluster(String),
    Secret(String),
    Ended,
}

/// Aborts the tasks when dropped.
struct AbortOnDrop<const N: usize>([tokio::task::JoinHandle<()>; N]);

impl<const N: usize> Drop for AbortOnDrop<N> {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Sends `what(storage key)` for every change under `prefix` after revision `from`, then
/// [`Changed::Ended`] when the watch ends.
async fn watch_keys(store: Arc<dyn crate::storage::Storage>, prefix: String, from: i64, tx: tokio::sync::mpsc::UnboundedSender<Changed>, what: fn(&str) -> Changed) {
    use futures::StreamExt;
    if let Ok(mut stream) = store.watch(&prefix, from, None).await {
        while let Some(ev) = stream.next().await {
            let key = match ev {
                Ok(crate::storage::WatchEvent::Put { kv, .. }) => kv.key,
                Ok(crate::storage::WatchEvent::Delete { prev, .. }) => prev.key,
                Ok(crate::storage::WatchEvent::Progress(_)) => continue,
                Err(_) => break,
            };
            if tx.send(what(&key)).is_err() {
                return;
            }
        }
    }
    let _ = tx.send(Changed::Ended);
}

/// The [`Followed`] state of Cluster `c` (its credential Secret read through the API).
async fn follow(api: &Arc<ApiServer>, secrets: &Arc<ResourceInfo>, c: &Value) -> Followed {
    let secret = match (c.pointer("/spec/secretRef/namespace").and_then(Value::as_str), c.pointer("/spec/secretRef/name").and_then(Value::as_str)) {
        (Some(ns), Some(name)) => Some((ns.to_string(), name.to_string())),
        _ => None,
    };
    let secret_key = secret.as_ref().map(|(ns, name)| secrets.key(Some(ns.as_str()), name));
    let zone = c.pointer("/spec/zone").and_then(Value::as_str).filter(|z| !z.is_empty()).map(str::to_string);
    let mut out = Followed { secret_key, zone, member: None };
    let Some((sns, sname)) = secret else { return out };
    if c.pointer("/metadata/deletionTimestamp").is_some() {
        return out;
    }
    let sr = ResourceRequest { info: secrets.clone(), namespace: Some(sns), name: Some(sname), subresource: None, watch_path: false };
    let Ok(secret) = api.get(&sr).await else { return out };
    let field = |k: &str| -> String {
        secret
            .pointer(&format!("/data/{}", k.replace('/', "~1")))
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_default()
    };
    let mut server = field("server");
    if server.is_empty() {
        server = c.pointer("/spec/apiEndpoint").and_then(Value::as_str).unwrap_or("").to_string();
    }
    let token = field("token");
    if !server.is_empty() && !token.is_empty() {
        out.member = Some((Credential { server: server.trim_end_matches('/').to_string(), token, ca_pem: field("ca.crt") }, cluster_ready(c)));
    }
    out
}

/// Every Cluster: name → [`Followed`].
async fn read_members(api: &Arc<ApiServer>, clusters: &Arc<ResourceInfo>, secrets: &Arc<ResourceInfo>) -> Result<BTreeMap<String, Followed>, crate::api::ApiError> {
    let rr = ResourceRequest { info: clusters.clone(), namespace: None, name: None, subresource: None, watch_path: false };
    let mut out = BTreeMap::new();
    for c in api.list(&rr, &Query::default()).await?.into_items() {
        let Some(name) = c.pointer("/metadata/name").and_then(Value::as_str) else { continue };
        out.insert(name.to_string(), follow(api, secrets, &c).await);
    }
    Ok(out)
}

/// Cluster `name`'s [`Followed`] state; `None` when it is gone.
async fn read_member(api: &Arc<ApiServer>, clusters: &Arc<ResourceInfo>, secrets: &Arc<ResourceInfo>, name: &str) -> Result<Option<Followed>, crate::api::ApiError> {
    let rr = ResourceRequest { info: clusters.clone(), namespace: None, name: Some(name.to_string()), subresource: None, watch_path: false };
    match api.get(&rr).await {
        Ok(c) => Ok(Some(follow(api, secrets, &c).await)),
        Err(crate::api::ApiError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use std::sync::Arc;

    use base64::Engine as _;

    #[test]
    fn warning_headers_are_kube_apiserver_shaped_and_escaped() {
        assert_eq!(super::warning_header("member-a: cluster is not Ready"), "299 - \"member-a: cluster is not Ready\"");
        assert_eq!(super::warning_header("a \"q\" \\ b\nc"), "299 - \"a \\\"q\\\" \\\\ bc\"");
    }

    /// A store counting the LISTs under one prefix (everything else passed through).
    struct CountingLists {
        inner: crate::storage::memory::MemoryStorage,
        prefix: String,
        lists: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl crate::storage::Storage for CountingLists {
        async fn get(&self, key: &str) -> Result<Option<crate::storage::KeyValue>, crate::storage::StorageError> {
            self.inner.get(key).await
        }
        async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<crate::storage::ListResult, crate::storage::StorageError> {
            if prefix == self.prefix {
                self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            self.inner.list(prefix, start, limit, revision).await
        }
        async fn create(&self, key: &str, value: bytes::Bytes) -> Result<i64, crate::storage::StorageError> {
            self.inner.create(key, value).await
        }
        async fn update(&self, key: &str, value: bytes::Bytes, expected_revision: i64) -> Result<i64, crate::storage::StorageError> {
            self.inner.update(key, value, expected_revision).await
        }
        async fn delete(&self, key: &str, expected_revision: i64) -> Result<(i64, crate::storage::KeyValue), crate::storage::StorageError> {
            self.inner.delete(key, expected_revision).await
        }
        async fn watch(&self, prefix: &str, after_revision: i64, progress_every: Option<std::time::Duration>) -> Result<crate::storage::WatchStream, crate::storage::StorageError> {
            self.inner.watch(prefix, after_revision, progress_every).await
        }
        async fn current_revision(&self) -> Result<i64, crate::storage::StorageError> {
            self.inner.current_revision().await
        }
        async fn compact(&self, revision: i64) -> Result<(), crate::storage::StorageError> {
            self.inner.compact(revision).await
        }
    }

    /// The member loop follows Clusters and their credential Secrets by watch: an idle
    /// federation of many Clusters costs no LIST per resync (it re-read every Cluster each
    /// second, O(members) of work per second with nothing changing), and a credential that
    /// appears after its Cluster, a readiness change and a deletion are still followed.
    #[tokio::test]
    async fn members_are_followed_by_watch_not_relisted_every_resync() {
        use crate::api::{ApiConfig, Caller, Ctx};
        use std::sync::atomic::Ordering;
        use std::time::Duration;
        let registry = super::Registry::federation();
        let clusters = registry.lookup("cluster.fedctl.io", "v1alpha1", "clusters").unwrap();
        let secrets = registry.lookup("", "v1", "secrets").unwrap();
        let namespaces = registry.lookup("", "v1", "namespaces").unwrap();
        let store = Arc::new(CountingLists { inner: crate::storage::memory::MemoryStorage::new(), prefix: clusters.prefix(), lists: Default::default() });
        let api = crate::api::ApiServer::new(registry, store.clone(), ApiConfig::default());
        let ctx = Ctx { caller: Caller { user: "admin".into(), groups: vec![] }, dry_run: false, manager: "test".into(), apply: false };
        let rr = |info: &Arc<super::ResourceInfo>, ns: Option<&str>| super::ResourceRequest { info: info.clone(), namespace: ns.map(str::to_string), name: None, subresource: None, watch_path: false };
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let secret = |name: &str| {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "member-credential", "namespace": format!("fed-exec-{name}")},
            "data": {"token": b64("t"), "server": b64(&format!("https://127.0.0.1:1/{name}"))}})
        };
        let cluster = |name: &str| {
            json!({"apiVersion": "cluster.fedctl.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name},
            "spec": {"secretRef": {"namespace": format!("fed-exec-{name}"), "name": "member-credential"}}})
        };
        let namespace = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("fed-exec-{name}")}});
        for i in 0..20 {
            let n = format!("m{i:02}");
            api.create(&rr(&namespaces, None), namespace(&n), &ctx).await.unwrap();
            api.create(&rr(&secrets, Some(&format!("fed-exec-{n}"))), secret(&n), &ctx).await.unwrap();
            api.create(&rr(&clusters, None), cluster(&n), &ctx).await.unwrap();
        }
        let cache = super::GlobalCache::new(&super::CacheConfig { ingest: false, ..Default::default() }).unwrap();
        let task = tokio::spawn(cache.clone().run_members(api.clone(), Duration::from_millis(20)));
        let until = |what: &'static str, f: Box<dyn Fn() -> bool>| async move {
            for _ in 0..250 {
                if f() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("{what}");
        };
        let c = cache.clone();
        until("20 members followed", Box::new(move || c.member_names().len() == 20)).await;
        let lists = store.lists.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(store.lists.load(Ordering::SeqCst), lists, "Clusters listed again while nothing changed");

        // a Cluster whose credential is written after it
        api.create(&rr(&namespaces, None), namespace("late"), &ctx).await.unwrap();
        api.create(&rr(&clusters, None), cluster("late"), &ctx).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!cache.member_names().contains(&"late".to_string()), "followed without a credential");
        api.create(&rr(&secrets, Some("fed-exec-late")), secret("late"), &ctx).await.unwrap();
        let c = cache.clone();
        until("the late member followed once its Secret exists", Box::new(move || c.member_names().contains(&"late".to_string()))).await;
        // NotReady, then deleted
        let late = super::ResourceRequest { name: Some("late".into()), subresource: Some("status".into()), ..rr(&clusters, None) };
        api.guaranteed_update(&late, "late", None, &ctx, |cur| {
            let mut n = cur.clone();
            n["status"] = json!({"conditions": [{"type": "Ready", "status": "False"}]});
            Ok(n)
        })
        .await
        .unwrap();
        let c = cache.clone();
        until("the late member stale once NotReady", Box::new(move || c.stale_members(None).iter().any(|(n, _)| n == "late"))).await;
        let late = super::ResourceRequest { subresource: None, ..late };
        api.delete(&late, &json!({}), &ctx).await.unwrap();
        let c = cache.clone();
        until("the deleted member gone", Box::new(move || !c.member_names().contains(&"late".to_string()) && c.member_names().len() == 20)).await;
        assert_eq!(store.lists.load(Ordering::SeqCst), lists, "Clusters listed again for single changes");
        task.abort();
    }

    #[test]
    fn a_cluster_is_ready_unless_its_ready_condition_says_otherwise() {
        let with = |st: &str| json!({"status": {"conditions": [{"type": "Joined", "status": "False"}, {"type": "Ready", "status": st}]}});
        assert!(super::cluster_ready(&with("True")));
        assert!(!super::cluster_ready(&with("False")));
        assert!(!super::cluster_ready(&with("Unknown")));
        assert!(super::cluster_ready(&json!({"metadata": {"name": "new"}})), "no verdict yet");
    }
}
