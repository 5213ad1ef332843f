//! fedsim: a kwok-like Kubernetes API simulator that stands in for member clusters in tests and
//! benchmarks; uses `api`, `storage`, `pki` and `http`.
//!
//! One `fedsim` process is one simulated member cluster, served over HTTPS with bearer-token
//! authentication by the same [`ApiServer`] that `fedctl server` uses, here over an
//! in-memory store ([`store::PackedStorage`]: LZ4-compressed values, bounded history; under
//! [`overlay::OverlayStorage`], which adds the virtual mode below).
//! At start it creates its own CA, writes a kubeconfig (CA, real URL, admin token) and loads a
//! realistic population straight into the store (no HTTP): nodes, `nodes × pods_per_node`
//! pods over `namespaces` namespaces with Zipf skew, all from [`generate`]. The namespace
//! `kube-system` has a uid derived from the cluster name, the seed and the restart count: the
//! cluster's identity, as the federation uses it.
//!
//! What runs inside (see [`controllers`]): Deployment → ReplicaSet → Pod, StatefulSet,
//! DaemonSet and Job controllers, a scheduler + kubelet stand-in that binds pods to nodes and
//! makes them Running, a garbage collector by ownerReferences, the ServiceAccount and
//! token controllers; and [`churn`], which creates, modifies and deletes generated pods at a
//! steady rate. Service-account tokens come from the TokenRequest subresource and are
//! authorized by RBAC objects ([`auth`]), which also decide impersonation
//! (`Impersonate-User`/`Impersonate-Group`). Pods serve deterministic `log` lines ([`logs`])
//! and the streaming subresources `exec`, `attach` and `portforward` ([`streams`]) against a
//! simulated container ([`exec`]: built-in commands over a per-pod in-memory file system).
//!
//! # Admin endpoints
//!
//! On the same listener, under `/fedsim/`, only for the admin token (or any `system:masters`
//! identity), answered with a small JSON document:
//!
//! | request | effect |
//! |---|---|
//! | `GET /fedsim/status` | name, revision, pod/node counts, stored keys, virtual or not and generated objects, churn rate, restarts, kube-system uid, paused |
//! | `POST /fedsim/churn?rate=N` | sets churn to `N` events/s (`0` stops it) |
//! | `POST /fedsim/faults/pause?seconds=N` | network-split-like: for `N` s every other request (health included) is held unanswered, and open watch streams stop delivering; afterwards all continue. `/fedsim/` stays reachable |
//! | `POST /fedsim/faults/drop-watches` | ends every open watch stream (clients re-watch from their last RV) |
//! | `POST /fedsim/faults/compact` | compacts the store at the current revision: resuming from any older RV gives `410 Expired` |
//! | `POST /fedsim/faults/restart` | simulates a rebuilt member: state cleared (every open watch ends with 410, older RVs expire), a new `kube-system` uid, the population regenerated, controllers and churn restarted |
//! | `POST /fedsim/nodes?count=N` | adds or removes nodes (removed nodes' pods are deleted, as the pod GC does; DaemonSets follow) |
//!
//! The admin token, CA and token-signing key are random per process unless `--data-dir` is
//! given; then they are kept there (`tokens`, `tls/fedsim-ca.*`, `sa-signing.key`).
//!
//! # Virtual members
//!
//! With `--virtual` (and always with `--members`/`--config`) the generated nodes and pods are
//! not loaded: the store is an [`overlay::OverlayStorage`] whose base layer renders them on
//! read from the generator's plan (seed, index) — the plan holds ~8 bytes per pod and the
//! owners' recipes, the key index 4 bytes per object — and only changes are stored (churn,
//! controller and client writes, tombstones of deleted generated objects). Every generated
//! object carries one fixed resourceVersion (the store revision when the layer was
//! installed); LIST pages merge the layer with the stored changes in key order, LIST at a
//! resourceVersion reads the changes' history, WATCH delivers only changes (so bookmarks,
//! 410 after compaction and the faults behave as before). A virtual member answers the same
//! API as a loaded one; its memory grows with its changes, not with its size.
//!
//! `fedsim --members N --name-prefix m- --kubeconfig-dir DIR --zones z1,z2 --nodes X
//! --pods-per-node Y [--churn R] [--seed S]` runs N such members in one process
//! ([`members`]): `m-0001`…, member `i` (0-based) in zone `zones[i % len]`, each on its own
//! loopback port with its own CA, admin token, kubeconfig `DIR/<name>.kubeconfig`,
//! kube-system uid and `/fedsim/` admin endpoints; `--churn` is per member. Once all
//! listen, `DIR/members.json` is written atomically: `[{"name", "zone", "server",
//! "kubeconfig", "nodes", "pods"}]`. `--config FILE` takes the members from a YAML/JSON list
//! instead (see [`members::MemberSpec`]). One runtime serves them all; the pod templates are
//! parsed once per process.

pub mod app;
pub mod auth;
pub mod churn;
pub mod controllers;
pub mod exec;
pub mod generate;
pub mod logs;
pub mod members;
pub mod overlay;
pub mod spdy;
pub mod store;
pub mod streams;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api::{object, ApiConfig, ApiServer, Registry};
use crate::pki;
use crate::pki::kubeconfig::{AuthInfo, Kubeconfig};
use crate::storage::Storage;
use generate::{GenConfig, PodGenerator};
use overlay::{MemberSet, OverlayStorage};

/// Errors that stop fedsim from starting.
#[derive(Debug, thiserror::Error)]
pub enum FedsimError {
    /// The data directory or a file in it could not be used.
    #[error("data dir {path}: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    /// Certificates could not be created or loaded.
    #[error("pki: {0}")]
    Pki(#[from] pki::PkiError),
    /// The admin token could not be created or loaded.
    #[error("auth: {0}")]
    Auth(#[from] crate::pki::auth::AuthError),
    /// The kubeconfig could not be written.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] crate::pki::kubeconfig::KubeconfigError),
    /// The listen address could not be bound.
    #[error("listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    /// The initial population could not be stored.
    #[error("loading the population: {0}")]
    Load(String),
}

/// Configuration of one simulated member cluster (from `fedsim` flags).
#[derive(Clone, Debug)]
pub struct Config {
    /// Cluster name: node names, kubeconfig names, identity.
    pub name: String,
    /// `host:port` to listen on; port 0 picks a free one (the kubeconfig carries the real one).
    pub listen: String,
    /// Number of nodes.
    pub nodes: usize,
    /// Pods per node in the initial population.
    pub pods_per_node: usize,
    /// Number of namespaces (`default` and `kube-system` included).
    pub namespaces: usize,
    /// Zipf exponent of pods per namespace.
    pub namespace_skew: f64,
    /// Churn events per second at start (0 = none).
    pub churn: f64,
    /// Seed of everything generated.
    pub seed: u64,
    /// Where to write the kubeconfig (`None`: not written).
    pub kubeconfig_out: Option<PathBuf>,
    /// `topology.kubernetes.io/zone` of the nodes.
    pub zone: String,
    /// `topology.kubernetes.io/region` of the nodes.
    pub region: String,
    /// Keep CA, admin token and signing key here across runs (`None`: all in memory).
    pub data_dir: Option<PathBuf>,
    /// Changes kept in the store's history (watch resume window), e.g. 50 000 events.
    pub watch_history: usize,
    /// How long a Job's pods run before they succeed.
    pub job_duration: Duration,
    /// Interval between watch bookmarks.
    pub bookmark_interval: Duration,
    /// Serve the generated nodes and pods from [`overlay`] (rendered on read, only changes
    /// stored) instead of loading them into the store.
    pub virtual_objects: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "member-1".into(),
            listen: "127.0.0.1:0".into(),
            nodes: 10,
            pods_per_node: 30,
            namespaces: 20,
            namespace_skew: 1.1,
            churn: 0.0,
            seed: 1,
            kubeconfig_out: None,
            zone: "us-east-1a".into(),
            region: "us-east-1".into(),
            data_dir: None,
            watch_history: 50_000,
            job_duration: Duration::from_secs(2),
            bookmark_interval: Duration::from_secs(60),
            virtual_objects: false,
        }
    }
}

impl Config {
    /// The generator configuration of this cluster.
    pub fn gen_config(&self) -> GenConfig {
        GenConfig {
            cluster: self.name.clone(),
            seed: self.seed,
            nodes: self.nodes,
            pods_per_node: self.pods_per_node,
            namespaces: self.namespaces,
            namespace_skew: self.namespace_skew,
            zone: self.zone.clone(),
            region: self.region.clone(),
        }
    }
}

/// The `/version` document of a simulated member: a real-looking Kubernetes 1.30 build
/// (matching the generated kubelets' version).
pub fn member_version() -> Value {
    json!({
        "major": "1",
        "minor": "30",
        "gitVersion": "v1.30.0",
        "gitCommit": "7c48c2bd72b9bf5c44d21d7338cc7bea77d0ad2a",
        "gitTreeState": "clean",
        "buildDate": "2024-04-17T17:27:03Z",
        "goVersion": "go1.22.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// The uid of `kube-system` (the cluster's identity): a v4-shaped UUID from SHA-256 of the
/// cluster name, seed and restart count, so it is stable across runs and changes on restart.
pub fn kube_system_uid(name: &str, seed: u64, restarts: u64) -> String {
    derived_uid(&format!("kube-system/{name}/{seed}/{restarts}"))
}

fn derived_uid(input: &str) -> String {
    let h = Sha256::digest(input.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(b).to_string()
}

/// Fault switches shared by the HTTP layer and the admin endpoints.
pub struct Faults {
    /// `Some(deadline)` while paused.
    pub pause: tokio::sync::watch::Sender<Option<tokio::time::Instant>>,
    /// Bumped to end every open watch stream.
    pub drop_watches: tokio::sync::watch::Sender<u64>,
}

impl Faults {
    fn new() -> Self {
        Faults { pause: tokio::sync::watch::channel(None).0, drop_watches: tokio::sync::watch::channel(0).0 }
    }

    /// Resolves once no pause is in force.
    pub async fn wait_unpaused(&self) {
        let mut rx = self.pause.subscribe();
        loop {
            let until = *rx.borrow_and_update();
            match until {
                Some(t) if t > tokio::time::Instant::now() => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(t) => {}
                        _ = rx.changed() => {}
                    }
                }
                _ => return,
            }
        }
    }

    /// True while a pause is in force.
    pub fn paused(&self) -> bool {
        self.pause.borrow().is_some_and(|t| t > tokio::time::Instant::now())
    }
}

/// One running simulated cluster: its API, store, faults and background tasks.
pub struct Sim {
    /// The configuration it was started with.
    pub config: Config,
    /// The API handler.
    pub api: Arc<ApiServer>,
    /// The store under it (with a layer of generated objects when virtual).
    pub store: Arc<OverlayStorage>,
    /// Fault switches.
    pub faults: Faults,
    /// Service-account token signer.
    pub signer: Arc<auth::TokenSigner>,
    /// CA certificate PEM (for `kube-root-ca.crt` and token secrets).
    pub ca_pem: String,
    /// Current node count.
    pub node_count: AtomicUsize,
    /// Restarts so far (salts the kube-system uid).
    pub restarts: AtomicU64,
    /// Churn events per second.
    pub churn_rate: tokio::sync::watch::Sender<f64>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    lifecycle: tokio::sync::Mutex<()>,
}

impl Sim {
    /// Builds a simulator over a fresh store (nothing loaded, nothing running).
    pub fn new(config: Config, ca_pem: String, signer: auth::TokenSigner, server_address: String) -> Arc<Sim> {
        let store = Arc::new(OverlayStorage::new(config.watch_history.max(1)));
        let api_config = ApiConfig { bookmark_interval: config.bookmark_interval, server_address, version: member_version(), ..ApiConfig::default() };
        let api = ApiServer::new(Registry::member(), store.clone() as Arc<dyn Storage>, api_config);
        let signer = Arc::new(signer);
        api.register_subresource("", "serviceaccounts", "token", Arc::new(auth::TokenRequestHandler { signer: signer.clone() }));
        api.register_subresource("", "pods", "eviction", Arc::new(auth::EvictionHandler));
        let churn = config.churn;
        Arc::new(Sim {
            node_count: AtomicUsize::new(config.nodes),
            config,
            api,
            store,
            faults: Faults::new(),
            signer,
            ca_pem,
            restarts: AtomicU64::new(0),
            churn_rate: tokio::sync::watch::channel(churn).0,
            tasks: Mutex::new(Vec::new()),
            lifecycle: tokio::sync::Mutex::new(()),
        })
    }

    /// Loads the population and starts controllers and churn. Returns the load time.
    pub async fn start(self: &Arc<Self>) -> Result<Duration, FedsimError> {
        let _g = self.lifecycle.lock().await;
        self.start_locked().await
    }

    async fn start_locked(self: &Arc<Self>) -> Result<Duration, FedsimError> {
        let t0 = std::time::Instant::now();
        let gen = load_population(self).await?;
        let took = t0.elapsed();
        let manager = controllers::Manager::start(self.clone()).await;
        let churn = tokio::spawn(churn::run(self.clone(), gen));
        let crds = tokio::spawn(self.api.clone().follow_crds());
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.push(manager);
        tasks.push(churn);
        tasks.push(crds);
        Ok(took)
    }

    /// The restart fault: stops controllers and churn, clears the store (open watches end with
    /// 410), bumps the restart count (new kube-system uid) and starts over.
    pub async fn restart(self: &Arc<Self>) -> Result<Duration, FedsimError> {
        let _g = self.lifecycle.lock().await;
        for t in self.tasks.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            t.abort();
        }
        self.store.reset();
        self.restarts.fetch_add(1, Ordering::SeqCst);
        self.node_count.store(self.config.nodes, Ordering::SeqCst);
        self.start_locked().await
    }

    /// Current uid of `kube-system`.
    pub fn kube_system_uid(&self) -> String {
        kube_system_uid(&self.config.name, self.config.seed, self.restarts.load(Ordering::SeqCst))
    }

    /// Stops background tasks.
    pub fn stop(&self) {
        for t in self.tasks.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            t.abort();
        }
    }
}

/// Storage key of a core object.
pub fn core_key(resource: &str, ns: Option<&str>, name: &str) -> String {
    match ns {
        Some(ns) => format!("/registry/core/{resource}/{ns}/{name}"),
        None => format!("/registry/core/{resource}/{name}"),
    }
}

fn stored(api: &ApiServer, api_version: &str, kind: &str, obj: &Value) -> Bytes {
    let info = api.registry.by_kind(api_version, kind).expect("kind is registered");
    Bytes::from(object::to_stored(&info, obj))
}

/// The system objects of a fresh cluster, as `(key, object)`: namespaces with their
/// `default` ServiceAccount and `kube-root-ca.crt`, the `kubernetes` Service and Endpoints,
/// and the `cluster-admin` and `view` ClusterRoles.
fn system_objects(sim: &Sim, namespaces: &[String]) -> Vec<(String, &'static str, &'static str, Value)> {
    let restarts = sim.restarts.load(Ordering::SeqCst);
    let cfg = &sim.config;
    let born = generate::format_time(generate::EPOCH_UNIX);
    let mut out = Vec::new();
    let mut all: Vec<String> = namespaces.to_vec();
    for extra in ["kube-public", "kube-node-lease"] {
        if !all.iter().any(|n| n == extra) {
            all.push(extra.to_string());
        }
    }
    for ns in &all {
        let uid = if ns == "kube-system" { sim.kube_system_uid() } else { derived_uid(&format!("ns/{}/{}/{restarts}/{ns}", cfg.name, cfg.seed)) };
        out.push((
            core_key("namespaces", None, ns),
            "v1",
            "Namespace",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "uid": uid, "creationTimestamp": born, "labels": {"kubernetes.io/metadata.name": ns}}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        ));
        let sa_uid = derived_uid(&format!("sa/{}/{}/{restarts}/{ns}", cfg.name, cfg.seed));
        out.push((
            core_key("serviceaccounts", Some(ns), "default"),
            "v1",
            "ServiceAccount",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns, "uid": sa_uid, "creationTimestamp": born}}),
        ));
        let cm_uid = derived_uid(&format!("cm/{}/{}/{restarts}/{ns}", cfg.name, cfg.seed));
        out.push((
            core_key("configmaps", Some(ns), "kube-root-ca.crt"),
            "v1",
            "ConfigMap",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": ns, "uid": cm_uid, "creationTimestamp": born, "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}}, "data": {"ca.crt": sim.ca_pem}}),
        ));
    }
    let host_ip = cfg.listen.rsplit_once(':').map(|(h, _)| h.trim_matches(['[', ']'])).unwrap_or("127.0.0.1").to_string();
    out.push((
        core_key("services", Some("default"), "kubernetes"),
        "v1",
        "Service",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default", "uid": derived_uid(&format!("svc/{}/{}/{restarts}", cfg.name, cfg.seed)), "creationTimestamp": born, "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"], "internalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}], "sessionAffinity": "None", "type": "ClusterIP"},
            "status": {"loadBalancer": {}}}),
    ));
    out.push((
        core_key("endpoints", Some("default"), "kubernetes"),
        "v1",
        "Endpoints",
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "default", "uid": derived_uid(&format!("ep/{}/{}/{restarts}", cfg.name, cfg.seed)), "creationTimestamp": born, "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": host_ip}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]}),
    ));
    let rbac = |name: &str, rules: Value| {
        (
            format!("/registry/rbac.authorization.k8s.io/clusterroles/{name}"),
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name, "uid": derived_uid(&format!("cr/{}/{}/{restarts}/{name}", cfg.name, cfg.seed)), "creationTimestamp": born, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}}, "rules": rules}),
        )
    };
    out.push(rbac("cluster-admin", json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}])));
    out.push(rbac(
        "view",
        json!([
            {"apiGroups": [""], "resources": ["pods", "pods/status", "nodes", "namespaces", "services", "endpoints", "configmaps", "serviceaccounts", "events", "replicationcontrollers", "persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["deployments", "replicasets", "statefulsets", "daemonsets", "deployments/scale", "replicasets/scale", "statefulsets/scale"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch"]}
        ]),
    ));
    out
}

/// Loads the initial population straight into the store: system objects, nodes and pods
/// (generated and packed on all cores, inserted in order). Returns the generator, whose
/// churn state continues from there.
async fn load_population(sim: &Arc<Sim>) -> Result<PodGenerator, FedsimError> {
    let sim2 = sim.clone();
    tokio::task::spawn_blocking(move || {
        let sim = sim2;
        let gen = PodGenerator::new(&sim.config.gen_config());
        let err = |e: crate::storage::StorageError| FedsimError::Load(e.to_string());
        for (key, av, kind, obj) in system_objects(&sim, gen.namespaces()) {
            futures::executor::block_on(sim.store.create(&key, stored(&sim.api, av, kind, &obj))).map_err(err)?;
        }
        let node_info = sim.api.registry.lookup("", "v1", "nodes").expect("nodes registered");
        let pod_info = sim.api.registry.lookup("", "v1", "pods").expect("pods registered");
        if sim.config.virtual_objects {
            let set = MemberSet::new(gen.plan(), node_info, pod_info);
            futures::executor::block_on(sim.store.install(Arc::new(set))).map_err(err)?;
            return Ok(gen);
        }
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 8);
        // nodes, then pods, in chunks generated in parallel and inserted in index order
        type Make<'a> = &'a (dyn Fn(usize) -> (String, Bytes) + Sync);
        let jobs: [(usize, Make); 2] = [
            (gen.config().nodes, &|i| {
                let n = gen.node(i);
                let name = object::meta_str(&n, "name").unwrap_or("").to_string();
                (core_key("nodes", None, &name), store::pack(&object::into_stored(&node_info, n)))
            }),
            (gen.initial_len(), &|i| {
                let p = gen.initial_pod(i);
                let ns = object::meta_str(&p, "namespace").unwrap_or("default").to_string();
                let name = object::meta_str(&p, "name").unwrap_or("").to_string();
                (core_key("pods", Some(&ns), &name), store::pack(&object::into_stored(&pod_info, p)))
            }),
        ];
        for (count, make) in jobs {
            const CHUNK: usize = 2048;
            let mut start = 0;
            while start < count {
                let end = (start + CHUNK * threads).min(count);
                let per = (end - start).div_ceil(threads);
                let parts: Vec<Vec<(String, Bytes)>> = std::thread::scope(|s| {
                    let hs: Vec<_> = (0..threads)
                        .map(|t| {
                            let (a, b) = ((start + t * per).min(end), (start + (t + 1) * per).min(end));
                            s.spawn(move || (a..b).map(make).collect::<Vec<_>>())
                        })
                        .collect();
                    hs.into_iter().map(|h| h.join().expect("generator thread")).collect()
                });
                for (key, value) in parts.into_iter().flatten() {
                    futures::executor::block_on(sim.store.create_packed(&key, value)).map_err(err)?;
                }
                start = end;
            }
        }
        Ok(gen)
    })
    .await
    .map_err(|e| FedsimError::Load(e.to_string()))?
}

/// One member that is listening with its population loaded and its kubeconfig written
/// (see [`start`]); [`Started::serve`] answers requests.
pub struct Started {
    /// The member's simulator.
    pub sim: Arc<Sim>,
    /// `https://<host>:<port>` it listens on.
    pub url: String,
    /// Admin kubeconfig of the member (CA, URL, admin token).
    pub kubeconfig: Kubeconfig,
    /// Time it took to load the population.
    pub load_time: Duration,
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Arc<app::FedsimApp>,
}

impl Started {
    /// Serves HTTPS until `shutdown` resolves, then stops the background tasks.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let sim = self.sim.clone();
        crate::http::serve(self.listener, self.tls, app::router(self.app), shutdown, Duration::from_secs(2)).await;
        sim.stop();
    }
}

/// Writes `kc` to `path` through a temporary name, so readers never see a half-written file.
fn write_kubeconfig(kc: &Kubeconfig, path: &std::path::Path) -> Result<(), FedsimError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| FedsimError::DataDir { path: parent.to_path_buf(), source: e })?;
    }
    let tmp = path.with_extension("tmp");
    kc.write(&tmp)?;
    std::fs::rename(&tmp, path).map_err(|e| FedsimError::DataDir { path: path.to_path_buf(), source: e })
}

/// Starts one simulated member: builds its PKI and admin token, binds the listener, loads
/// the population, starts the controllers and churn and writes the kubeconfig (real port)
/// when `config.kubeconfig_out` is set. Nothing is answered until [`Started::serve`].
pub async fn start(config: Config) -> Result<Started, FedsimError> {
    let (ca, tokens, signer) = match &config.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| FedsimError::DataDir { path: dir.clone(), source: e })?;
            let ca = pki::Ca::load_or_create(dir, "fedsim")?;
            let tokens = crate::pki::auth::TokenAuthenticator::load_or_create(dir)?;
            let key_path = dir.join("sa-signing.key");
            let key: [u8; 32] = match std::fs::read(&key_path) {
                Ok(b) if b.len() == 32 => b.try_into().expect("32 bytes"),
                _ => {
                    let k: [u8; 32] = rand::random();
                    pki::write_private_file(&key_path, &k).map_err(|e| FedsimError::DataDir { path: key_path.clone(), source: e })?;
                    k
                }
            };
            (ca, tokens, auth::TokenSigner::with_key(key))
        }
        None => {
            let ca = pki::Ca::generate(&format!("fedsim-{}-ca", config.name))?;
            let admin = crate::pki::auth::StaticToken {
                token: hex::encode(rand::random::<[u8; 32]>()),
                user: crate::pki::auth::UserInfo::new(crate::pki::auth::ADMIN_USER, [crate::pki::auth::MASTERS_GROUP]),
                uid: crate::pki::auth::ADMIN_USER.to_string(),
            };
            (ca, crate::pki::auth::TokenAuthenticator::new(vec![admin]), auth::TokenSigner::random())
        }
    };
    let listener = tokio::net::TcpListener::bind(&config.listen).await.map_err(|e| FedsimError::Listen { addr: config.listen.clone(), source: e })?;
    let local: SocketAddr = listener.local_addr().map_err(|e| FedsimError::Listen { addr: config.listen.clone(), source: e })?;
    let host = if local.ip().is_unspecified() { "127.0.0.1".to_string() } else { local.ip().to_string() };
    let url_host = if host.contains(':') { format!("[{host}]") } else { host.clone() };
    let url = format!("https://{url_host}:{}", local.port());
    let mut sans: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into(), "kubernetes.default.svc".into()];
    if !sans.contains(&host) {
        sans.push(host.clone());
    }
    let (cert_pem, key_pem) = ca.issue_serving(&sans, pki::LEAF_VALIDITY)?;
    let tls = pki::server_tls_config(&cert_pem, &key_pem, ca.cert_pem())?;
    let admin_token = tokens.admin_token().unwrap_or_default().to_string();

    let sim = Sim::new(config.clone(), ca.cert_pem().to_string(), signer, format!("{url_host}:{}", local.port()));
    let load_time = sim.start().await?;
    let kubeconfig = Kubeconfig::single(&config.name, &url, ca.cert_pem(), AuthInfo::bearer_token(&admin_token));
    if let Some(path) = &config.kubeconfig_out {
        write_kubeconfig(&kubeconfig, path)?;
    }
    tracing::info!(%url, name = %config.name, pods = sim.config.nodes * sim.config.pods_per_node, virtual_objects = config.virtual_objects, load_ms = load_time.as_millis() as u64, "fedsim listening");
    let app = Arc::new(app::FedsimApp { sim: sim.clone(), tokens: Arc::new(tokens), files: Arc::default() });
    Ok(Started { sim, url, kubeconfig, load_time, listener, tls, app })
}

/// Runs one simulated member until `shutdown` resolves (see [`start`]). Prints
/// `fedsim <name> listening on <url>`.
pub async fn run(config: Config, shutdown: impl std::future::Future<Output = ()>) -> Result<(), FedsimError> {
    let name = config.name.clone();
    let started = start(config).await?;
    println!("fedsim {name} listening on {}", started.url);
    started.serve(shutdown).await;
    Ok(())
}
