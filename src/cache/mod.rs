//! The global resource cache: list/watch of the configured kinds in every member cluster,
//! merged into one store per kind with a global resourceVersion.
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
//! ## Namespace sharding (next step)
//! A shard will be a subset of namespaces (a hot namespace split further by a hash of the
//! name) with its own [`store::KindStore`]; a shard map (balanced by observed size) routes
//! each ingested event to its shard by its [`store::Key`]. A global resourceVersion stays a
//! map cluster → position, because every shard sees each member's events in the member's
//! order: the MUX merges shard listings in key order and shard watch streams by filtering
//! each with the same global resourceVersion. The seam is [`ShardMap`]: today one shard.

pub mod codec;
pub mod ingest;
pub mod rv;
pub mod store;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::Value;

use crate::api::registry::{Cell, Column, Registry, ResourceInfo};
use crate::api::request::{Query, ResourceRequest};
use crate::api::ApiServer;
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

/// Which shard holds a key. Today one shard; see the module docs.
pub trait ShardMap: Send + Sync {
    /// The shard index of objects in `namespace` named `name`.
    fn shard(&self, namespace: &str, name: &str) -> usize;
    /// Number of shards.
    fn shards(&self) -> usize;
}

/// The single-shard map.
pub struct OneShard;

impl ShardMap for OneShard {
    fn shard(&self, _namespace: &str, _name: &str) -> usize {
        0
    }
    fn shards(&self) -> usize {
        1
    }
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
}

impl Drop for Member {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

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
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { resources: vec!["pods".into(), "nodes".into()], max_events: 102_400, window: Duration::from_secs(75), resync: Duration::from_secs(1) }
    }
}

/// The global cache: one [`KindStore`] per cached kind and the members feeding them.
pub struct GlobalCache {
    /// Cached kinds by plural resource name.
    pub kinds: BTreeMap<String, Arc<KindStore>>,
    /// Every member kind (discovery, proxying non-cached kinds).
    pub member_registry: Registry,
    members: Mutex<BTreeMap<String, Member>>,
    /// Last ingest epoch handed out.
    epochs: std::sync::atomic::AtomicU64,
    /// Bumped whenever the member set changes (kubeconfig rewrite).
    pub generation: tokio::sync::watch::Sender<u64>,
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
            kinds.insert(res.clone(), Arc::new(KindStore::new(Arc::new(info), config.max_events, config.window)));
        }
        Ok(Arc::new(GlobalCache { kinds, member_registry: Registry::member(), members: Mutex::new(BTreeMap::new()), epochs: Default::default(), generation: tokio::sync::watch::channel(0).0 }))
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

    /// Reconciles forever: every `config.resync`, reads Clusters and their credential Secrets
    /// from the federation API and starts, restarts or stops ingests.
    pub async fn run(self: Arc<Self>, api: Arc<ApiServer>, config: CacheConfig) {
        loop {
            match read_members(&api).await {
                Ok(want) => self.reconcile(want),
                Err(e) => tracing::debug!(error = %e, "global cache: reading clusters"),
            }
            tokio::time::sleep(config.resync).await;
        }
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
                let tasks = self
                    .kinds
                    .values()
                    .map(|k| tokio::spawn(ingest::run(k.clone(), epoch, cluster.clone(), http.clone(), cred.server.clone())))
                    .collect();
                tracing::info!(cluster = %name, server = %cred.server, "global cache: ingest started");
                // replacing drops (aborts) the old ingest; the new one relists and diffs
                members.insert(name, Member { credential: cred, epoch, http, tasks });
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

/// Clusters with a usable credential Secret: name → credential.
async fn read_members(api: &Arc<ApiServer>) -> Result<BTreeMap<String, Credential>, crate::api::ApiError> {
    let info = api.registry.lookup("cluster.fedctl.io", "v1alpha1", "clusters").ok_or(crate::api::ApiError::NoSuchResource)?;
    let sinfo = api.registry.lookup("", "v1", "secrets").ok_or(crate::api::ApiError::NoSuchResource)?;
    let rr = ResourceRequest { info, namespace: None, name: None, subresource: None, watch_path: false };
    let clusters = api.list(&rr, &Query::default()).await?.into_items();
    let mut out = BTreeMap::new();
    for c in clusters {
        let Some(name) = c.pointer("/metadata/name").and_then(Value::as_str) else { continue };
        if c.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let (Some(sns), Some(sname)) = (
            c.pointer("/spec/secretRef/namespace").and_then(Value::as_str),
            c.pointer("/spec/secretRef/name").and_then(Value::as_str),
        ) else {
            continue;
        };
        let sr = ResourceRequest { info: sinfo.clone(), namespace: Some(sns.into()), name: Some(sname.into()), subresource: None, watch_path: false };
        let Ok(secret) = api.get(&sr).await else { continue };
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
        if server.is_empty() || token.is_empty() {
            continue;
        }
        out.insert(name.to_string(), Credential { server: server.trim_end_matches('/').to_string(), token, ca_pem: field("ca.crt") });
    }
    Ok(out)
}
