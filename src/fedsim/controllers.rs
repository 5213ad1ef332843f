//! The simulated member's controllers: workloads, scheduling + kubelet stand-in, garbage collection, service accounts.
//!
//! One task (the [`Manager`]) watches the whole store from the revision of an initial list
//! and reconciles level-triggered, as kube-controller-manager's controllers do: an event only
//! queues the object it concerns (or its controlling owner); a reconcile reads the current
//! object and its children and converges them, writing through the [`ApiServer`](crate::api::ApiServer) (so
//! uids, generations and managedFields are as for any client). kwok-like, everything is
//! instant: pods created by controllers are bound and Running in the same write.
//!
//! - Deployment → ReplicaSet named `<deployment>-<pod-template-hash>` (mirrors the
//!   deployment controller's hash of the pod template); a template change creates a new
//!   ReplicaSet and scales the old ones to 0 at once. Status: replicas, updatedReplicas,
//!   readyReplicas, availableReplicas, unavailableReplicas, observedGeneration and the
//!   Available / Progressing conditions that `kubectl rollout status` reads.
//! - ReplicaSet → pods `<rs>-<5 chars>`; scale-down deletes not-ready then newest pods first.
//! - StatefulSet → pods `<sts>-0…N-1`, created in order (OrderedReady), removed from the top.
//! - DaemonSet → one pod per node; follows node additions and removals.
//! - Job → `min(parallelism, completions − succeeded)` pods at a time; each succeeds after
//!   [`super::Config::job_duration`]; then `Complete` (and `SuccessCriteriaMet`) conditions,
//!   `succeeded` and `completionTime`.
//! - Scheduler + kubelet: a pod without `spec.nodeName` (e.g. from `kubectl run`) is bound
//!   round-robin to a node and made Running: Ready conditions, podIP from the node's pod
//!   CIDR, hostIP, containerStatuses, startTime.
//! - Garbage collector: when a Deployment, ReplicaSet, StatefulSet, DaemonSet or Job is
//!   deleted, the objects it controls are deleted (background propagation).
//! - ServiceAccount controller: a new namespace gets the `default` ServiceAccount and the
//!   `kube-root-ca.crt` ConfigMap; token controller: a Secret of type
//!   `kubernetes.io/service-account-token` gets `token`, `ca.crt` and `namespace` filled in.
//!
//! Pods of the generated population name owners that do not exist as objects; the manager
//! tracks children only of owners it has seen, so it never touches them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::{core_key, Sim};
use crate::api::request::ResourceRequest;
use crate::api::{object, ApiError, ApiResult, Caller, Ctx, ResourceInfo};
use crate::storage::{Storage, StorageError, WatchEvent};

const PODS: &str = "/registry/core/pods/";
const NODES: &str = "/registry/core/nodes/";
const SECRETS: &str = "/registry/core/secrets/";
const NAMESPACES: &str = "/registry/core/namespaces/";
/// Secret type filled in by the token controller.
pub const SA_TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";

/// A workload kind the manager reconciles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
    /// batch/v1 Job.
    Job,
}

impl Kind {
    const ALL: [Kind; 5] = [Kind::Deployment, Kind::ReplicaSet, Kind::StatefulSet, Kind::DaemonSet, Kind::Job];

    /// Storage prefix of the kind.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Deployment => "/registry/apps/deployments/",
            Kind::ReplicaSet => "/registry/apps/replicasets/",
            Kind::StatefulSet => "/registry/apps/statefulsets/",
            Kind::DaemonSet => "/registry/apps/daemonsets/",
            Kind::Job => "/registry/batch/jobs/",
        }
    }

    fn group_resource(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Kind::Deployment => ("apps", "v1", "deployments"),
            Kind::ReplicaSet => ("apps", "v1", "replicasets"),
            Kind::StatefulSet => ("apps", "v1", "statefulsets"),
            Kind::DaemonSet => ("apps", "v1", "daemonsets"),
            Kind::Job => ("batch", "v1", "jobs"),
        }
    }

    fn kind_str(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
            Kind::Job => "Job",
        }
    }

    fn api_version(self) -> &'static str {
        if self == Kind::Job {
            "batch/v1"
        } else {
            "apps/v1"
        }
    }

    fn of_key(key: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| key.starts_with(k.prefix()))
    }
}

// ---------------------------------------------------------------------------------------------
// Partial views of stored objects (serde skips everything else without building it)

#[derive(Deserialize, Default)]
struct LiteOwner {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    controller: Option<bool>,
}

#[derive(Deserialize, Default)]
struct LiteMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default, rename = "ownerReferences")]
    owner_references: Vec<LiteOwner>,
    #[serde(default, rename = "deletionTimestamp")]
    deletion_timestamp: Option<String>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
struct LiteSpec {
    #[serde(default, rename = "nodeName")]
    node_name: Option<String>,
    #[serde(default, rename = "podCIDR")]
    pod_cidr: Option<String>,
}

#[derive(Deserialize, Default)]
struct LiteAddress {
    #[serde(default, rename = "type")]
    type_: String,
    #[serde(default)]
    address: String,
}

#[derive(Deserialize, Default)]
struct LiteStatus {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    addresses: Vec<LiteAddress>,
}

#[derive(Deserialize, Default)]
struct Lite {
    #[serde(default)]
    metadata: LiteMeta,
    #[serde(default)]
    spec: LiteSpec,
    #[serde(default)]
    status: LiteStatus,
    #[serde(default, rename = "type")]
    type_: Option<String>,
    #[serde(default)]
    data: Option<BTreeMap<String, serde::de::IgnoredAny>>,
}

impl Lite {
    fn parse(b: &[u8]) -> Option<Lite> {
        // validating UTF-8 once up front is cheaper than per string while skipping
        serde_json::from_str(std::str::from_utf8(b).ok()?).ok()
    }

    fn controller_uid(&self) -> Option<&str> {
        self.metadata.owner_references.iter().find(|o| o.controller == Some(true)).map(|o| o.uid.as_str())
    }
}

/// A node as the scheduler sees it.
struct NodeSlot {
    ip: String,
    /// Pod CIDR network address and host count.
    cidr: Option<(u32, u32)>,
    next: u32,
}

impl NodeSlot {
    /// The next pod IP: round-robin over the upper half of the node's pod CIDR (the lower
    /// half is where the generated population's IPs lie).
    fn next_ip(&mut self) -> String {
        match self.cidr {
            Some((net, size)) if size >= 8 => {
                let lo = size / 2;
                if self.next < lo || self.next >= size - 1 {
                    self.next = lo;
                }
                let ip = Ipv4Addr::from(net + self.next);
                self.next += 1;
                ip.to_string()
            }
            _ => self.ip.clone(),
        }
    }
}

fn parse_cidr(s: &str) -> Option<(u32, u32)> {
    let (ip, len) = s.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let len: u32 = len.parse().ok()?;
    (len <= 32).then(|| (u32::from(ip), 1u32.checked_shl(32 - len).unwrap_or(u32::MAX)))
}

/// `(namespace, name)` of a namespaced key under `prefix`.
fn split_key<'a>(key: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    key.strip_prefix(prefix)?.split_once('/')
}

fn now() -> String {
    object::now_rfc3339()
}

fn random_hex(n: usize) -> String {
    (0..n).map(|_| format!("{:x}", rand::random::<u8>() % 16)).collect()
}

/// kube-controller-manager's `rand.SafeEncodeString` of a decimal hash (pod-template-hash).
fn safe_encode(n: u32) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    n.to_string().bytes().map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char).collect()
}

/// The pod-template-hash of a pod template (FNV-1a 32 of its JSON, safe-encoded).
pub fn template_hash(template: &Value) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in template.to_string().bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    safe_encode(h)
}

fn owner_ref(kind: Kind, name: &str, uid: &str) -> Value {
    json!({"apiVersion": kind.api_version(), "kind": kind.kind_str(), "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true})
}

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending")
}

fn terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}

fn int(obj: &Value, p: &str, default: i64) -> i64 {
    obj.pointer(p).and_then(Value::as_i64).unwrap_or(default)
}

/// A pod object from a workload's pod template.
fn pod_from_template(template: &Value, ns: &str, owner: Value, name: Option<&str>, generate_name: Option<&str>, extra_labels: &[(&str, String)]) -> Value {
    let mut meta = Map::new();
    if let Some(n) = name {
        meta.insert("name".into(), json!(n));
    }
    if let Some(g) = generate_name {
        meta.insert("generateName".into(), json!(g));
    }
    meta.insert("namespace".into(), json!(ns));
    let mut labels = template.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
    for (k, v) in extra_labels {
        labels.insert(k.to_string(), json!(v));
    }
    meta.insert("labels".into(), Value::Object(labels));
    if let Some(a) = template.pointer("/metadata/annotations").filter(|a| a.is_object()) {
        meta.insert("annotations".into(), a.clone());
    }
    meta.insert("ownerReferences".into(), json!([owner]));
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    if let Some(s) = spec.as_object_mut() {
        s.entry("restartPolicy").or_insert(json!("Always"));
        s.entry("schedulerName").or_insert(json!("default-scheduler"));
        s.entry("terminationGracePeriodSeconds").or_insert(json!(30));
        s.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
        s.entry("serviceAccountName").or_insert(json!("default"));
        s.entry("serviceAccount").or_insert(json!("default"));
        s.entry("securityContext").or_insert(json!({}));
        s.entry("enableServiceLinks").or_insert(json!(true));
        s.entry("preemptionPolicy").or_insert(json!("PreemptLowerPriority"));
        s.entry("priority").or_insert(json!(0));
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

/// Sets `spec.nodeName` and a Running status with Ready conditions, IPs and container
/// statuses (what the scheduler and the kubelet would write).
fn run_on(pod: &mut Value, node: &str, host_ip: &str, pod_ip: &str) {
    let ts = now();
    pod["spec"]["nodeName"] = json!(node);
    let host_net = pod.pointer("/spec/hostNetwork").and_then(Value::as_bool) == Some(true);
    let ip = if host_net { host_ip } else { pod_ip };
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array).cloned().unwrap_or_default();
    let statuses: Vec<Value> = containers
        .iter()
        .map(|c| {
            let image = c.get("image").and_then(Value::as_str).unwrap_or("busybox");
            let image_ref = if image.contains('/') { image.to_string() } else { format!("docker.io/library/{image}") };
            let repo = image_ref.split(':').next().unwrap_or(&image_ref).to_string();
            json!({
                "containerID": format!("containerd://{}", random_hex(64)),
                "image": image_ref,
                "imageID": format!("{repo}@sha256:{}", random_hex(64)),
                "lastState": {},
                "name": c.get("name").cloned().unwrap_or(json!("main")),
                "ready": true,
                "restartCount": 0,
                "started": true,
                "state": {"running": {"startedAt": ts}},
            })
        })
        .collect();
    let has_requests = containers.iter().any(|c| c.pointer("/resources/requests").is_some() || c.pointer("/resources/limits").is_some());
    let cond = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": ts});
    pod["status"] = json!({
        "phase": "Running",
        "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": ts,
        "qosClass": if has_requests { "Burstable" } else { "BestEffort" },
        "containerStatuses": statuses,
    });
}

/// Turns a Running pod into a Succeeded one (containers terminated with exit code 0).
fn succeed(pod: &mut Value) {
    let ts = now();
    let Some(status) = pod.get_mut("status").and_then(Value::as_object_mut) else { return };
    status.insert("phase".into(), json!("Succeeded"));
    if let Some(conds) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds.iter_mut() {
            let t = c["type"].as_str().unwrap_or("").to_string();
            if t == "Ready" || t == "ContainersReady" || t == "PodReadyToStartContainers" {
                c["status"] = json!("False");
                c["lastTransitionTime"] = json!(ts);
                if t != "PodReadyToStartContainers" {
                    c["reason"] = json!("PodCompleted");
                }
            }
        }
    }
    if let Some(css) = status.get_mut("containerStatuses").and_then(Value::as_array_mut) {
        for cs in css.iter_mut() {
            let started = cs.pointer("/state/running/startedAt").cloned().unwrap_or(json!(ts));
            let id = cs.get("containerID").cloned().unwrap_or(Value::Null);
            cs["state"] = json!({"terminated": {"containerID": id, "exitCode": 0, "finishedAt": ts, "reason": "Completed", "startedAt": started}});
            cs["ready"] = json!(false);
            cs["started"] = json!(false);
        }
    }
}

/// Keeps a condition's `lastTransitionTime` when its status did not change.
fn condition(old_status: Option<&Value>, ty: &str, status: bool, reason: &str, message: &str, with_update_time: bool) -> Value {
    let ts = now();
    let st = if status { "True" } else { "False" };
    let prev = old_status.and_then(|s| s.get("conditions")).and_then(Value::as_array).and_then(|cs| cs.iter().find(|c| c["type"] == ty));
    let transition = match prev {
        Some(p) if p["status"] == st => p.get("lastTransitionTime").cloned().unwrap_or(json!(ts)),
        _ => json!(ts),
    };
    let mut c = json!({"type": ty, "status": st, "reason": reason, "message": message, "lastTransitionTime": transition});
    if with_update_time {
        let same = prev.is_some_and(|p| p["status"] == st && p["reason"] == reason && p["message"] == message);
        c["lastUpdateTime"] = if same { prev.and_then(|p| p.get("lastUpdateTime")).cloned().unwrap_or(json!(ts)) } else { json!(ts) };
    }
    c
}

// ---------------------------------------------------------------------------------------------
// The manager

/// The controller manager of one simulated member (see the module docs).
pub struct Manager {
    sim: Arc<Sim>,
    ctx: Ctx,
    nodes: BTreeMap<String, NodeSlot>,
    rr: usize,
    /// Live workload objects by uid.
    owners: HashMap<String, (Kind, String, String)>,
    /// Keys of the objects each live owner controls (a hint; the store is the truth).
    children: HashMap<String, BTreeSet<String>>,
    queue: VecDeque<(Kind, String, String)>,
    queued: HashSet<(Kind, String, String)>,
    unscheduled: BTreeSet<String>,
    secrets: BTreeSet<String>,
    new_namespaces: BTreeSet<String>,
    to_delete: Vec<String>,
    finishing: BinaryHeap<Reverse<(Instant, String)>>,
    synced_once: bool,
}

impl Manager {
    /// Starts the manager task over `sim`'s store.
    pub async fn start(sim: Arc<Sim>) -> tokio::task::JoinHandle<()> {
        let ctx = Ctx {
            caller: Caller { user: "system:kube-controller-manager".into(), groups: vec![crate::pki::auth::MASTERS_GROUP.into()] },
            dry_run: false,
            manager: "kube-controller-manager".into(),
            apply: false,
        };
        let mut m = Manager {
            sim,
            ctx,
            nodes: BTreeMap::new(),
            rr: 0,
            owners: HashMap::new(),
            children: HashMap::new(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
            unscheduled: BTreeSet::new(),
            secrets: BTreeSet::new(),
            new_namespaces: BTreeSet::new(),
            to_delete: Vec::new(),
            finishing: BinaryHeap::new(),
            synced_once: false,
        };
        let rev = m.sync().await;
        tokio::spawn(async move { m.run(rev).await })
    }

    fn store(&self) -> &dyn Storage {
        self.sim.store.as_ref()
    }

    fn info(&self, kind: Kind) -> Arc<ResourceInfo> {
        let (g, v, r) = kind.group_resource();
        self.sim.api.registry.lookup(g, v, r).expect("workload kinds are registered")
    }

    fn core_info(&self, resource: &str) -> Arc<ResourceInfo> {
        self.sim.api.registry.lookup("", "v1", resource).expect("core kinds are registered")
    }

    fn req(info: Arc<ResourceInfo>, ns: &str, name: Option<&str>, sub: Option<&str>) -> ResourceRequest {
        ResourceRequest { namespace: if info.namespaced { Some(ns.to_string()) } else { None }, info, name: name.map(str::to_string), subresource: sub.map(str::to_string), watch_path: false }
    }

    fn enqueue(&mut self, kind: Kind, ns: &str, name: &str) {
        let k = (kind, ns.to_string(), name.to_string());
        if self.queued.insert(k.clone()) {
            self.queue.push_back(k);
        }
    }

    fn enqueue_uid(&mut self, uid: &str) {
        if let Some((k, ns, n)) = self.owners.get(uid).cloned() {
            self.enqueue(k, &ns, &n);
        }
    }

    fn enqueue_daemonsets(&mut self) {
        let ds: Vec<(String, String)> = self.owners.values().filter(|(k, _, _)| *k == Kind::DaemonSet).map(|(_, ns, n)| (ns.clone(), n.clone())).collect();
        for (ns, n) in ds {
            self.enqueue(Kind::DaemonSet, &ns, &n);
        }
    }

    /// Lists everything the manager tracks at one revision and returns it (the watch starts
    /// after it). Pods are scanned only when some workload exists or after the first sync:
    /// a freshly loaded population has no live owners and no unscheduled pods.
    async fn sync(&mut self) -> i64 {
        self.nodes.clear();
        self.owners.clear();
        self.children.clear();
        self.queue.clear();
        self.queued.clear();
        self.unscheduled.clear();
        self.finishing.clear();
        let rev = self.store().current_revision().await.unwrap_or(0);
        let mut lists: Vec<(&str, Vec<(String, Lite)>)> = Vec::new();
        for prefix in [NODES, Kind::Deployment.prefix(), Kind::ReplicaSet.prefix(), Kind::StatefulSet.prefix(), Kind::DaemonSet.prefix(), Kind::Job.prefix(), SECRETS] {
            lists.push((prefix, self.scan(prefix, rev).await));
        }
        for (prefix, items) in &lists {
            for (key, l) in items {
                if *prefix == NODES {
                    self.put_node(l);
                } else if let Some(kind) = Kind::of_key(key) {
                    self.owners.insert(l.metadata.uid.clone(), (kind, l.metadata.namespace.clone(), l.metadata.name.clone()));
                    self.enqueue(kind, &l.metadata.namespace, &l.metadata.name);
                } else if *prefix == SECRETS && l.type_.as_deref() == Some(SA_TOKEN_SECRET_TYPE) {
                    self.secrets.insert(key.clone());
                }
            }
        }
        // children of deployments (their ReplicaSets)
        for (key, l) in &lists[2].1 {
            if let Some(u) = l.controller_uid() {
                if self.owners.contains_key(u) {
                    self.children.entry(u.to_string()).or_default().insert(key.clone());
                }
            }
        }
        if !self.owners.is_empty() || self.synced_once {
            for (key, l) in self.scan(PODS, rev).await {
                self.put_pod(&key, &l);
            }
        }
        self.synced_once = true;
        rev
    }

    /// Lists `prefix` at `rev` page by page, keeping partial views only.
    async fn scan(&self, prefix: &str, rev: i64) -> Vec<(String, Lite)> {
        let mut out = Vec::new();
        let mut start = String::new();
        loop {
            let Ok(res) = self.store().list(prefix, &start, 1000, rev).await else { return out };
            for kv in &res.kvs {
                if let Some(l) = Lite::parse(&kv.value) {
                    out.push((kv.key.clone(), l));
                }
            }
            match res.kvs.last() {
                Some(last) if res.remaining > 0 => start = format!("{}\u{0}", last.key),
                _ => return out,
            }
        }
    }

    fn put_node(&mut self, l: &Lite) {
        let ip = l.status.addresses.iter().find(|a| a.type_ == "InternalIP").map(|a| a.address.clone()).unwrap_or_else(|| "10.0.0.1".into());
        let cidr = l.spec.pod_cidr.as_deref().and_then(parse_cidr);
        let slot = self.nodes.entry(l.metadata.name.clone()).or_insert(NodeSlot { ip: ip.clone(), cidr, next: 0 });
        slot.ip = ip;
        slot.cidr = cidr;
    }

    fn put_pod(&mut self, key: &str, l: &Lite) {
        if let Some(u) = l.controller_uid() {
            if let Some((kind, _, _)) = self.owners.get(u).cloned() {
                self.children.entry(u.to_string()).or_default().insert(key.to_string());
                if kind == Kind::Job && l.status.phase.as_deref() == Some("Running") && !self.finishing.iter().any(|Reverse((_, k))| k == key) {
                    self.finishing.push(Reverse((Instant::now() + self.sim.config.job_duration, key.to_string())));
                }
                self.enqueue_uid(u);
            }
        }
        if l.spec.node_name.is_none() && l.metadata.deletion_timestamp.is_none() {
            self.unscheduled.insert(key.to_string());
        }
    }

    fn on_put(&mut self, key: &str, value: &[u8], created: bool) {
        if key.starts_with(PODS) {
            if let Some(l) = Lite::parse(value) {
                self.put_pod(key, &l);
            }
        } else if key.starts_with(NODES) {
            if let Some(l) = Lite::parse(value) {
                let new = !self.nodes.contains_key(&l.metadata.name);
                self.put_node(&l);
                if new {
                    self.enqueue_daemonsets();
                }
            }
        } else if let Some(kind) = Kind::of_key(key) {
            if let Some(l) = Lite::parse(value) {
                let uid = l.metadata.uid.clone();
                self.owners.insert(uid, (kind, l.metadata.namespace.clone(), l.metadata.name.clone()));
                self.enqueue(kind, &l.metadata.namespace, &l.metadata.name);
                if let Some(u) = l.controller_uid() {
                    if self.owners.contains_key(u) {
                        self.children.entry(u.to_string()).or_default().insert(key.to_string());
                        self.enqueue_uid(u);
                    }
                }
            }
        } else if key.starts_with(SECRETS) {
            if let Some(l) = Lite::parse(value) {
                let has_token = l.data.as_ref().is_some_and(|d| d.contains_key("token"));
                if l.type_.as_deref() == Some(SA_TOKEN_SECRET_TYPE) && !has_token {
                    self.secrets.insert(key.to_string());
                }
            }
        } else if created && key.starts_with(NAMESPACES) {
            if let Some(name) = key.strip_prefix(NAMESPACES) {
                self.new_namespaces.insert(name.to_string());
            }
        }
    }

    fn on_delete(&mut self, key: &str, value: &[u8]) {
        if key.starts_with(PODS) {
            self.unscheduled.remove(key);
            if let Some(l) = Lite::parse(value) {
                if let Some(u) = l.controller_uid() {
                    if let Some(set) = self.children.get_mut(u) {
                        set.remove(key);
                    }
                    self.enqueue_uid(u);
                }
            }
        } else if key.starts_with(NODES) {
            if let Some(name) = key.strip_prefix(NODES) {
                self.nodes.remove(name);
                self.enqueue_daemonsets();
            }
        } else if Kind::of_key(key).is_some() {
            if let Some(l) = Lite::parse(value) {
                self.owners.remove(&l.metadata.uid);
                // garbage collection: background propagation to what it controlled
                if let Some(kids) = self.children.remove(&l.metadata.uid) {
                    self.to_delete.extend(kids);
                }
                if let Some(u) = l.controller_uid() {
                    if let Some(set) = self.children.get_mut(u) {
                        set.remove(key);
                    }
                    self.enqueue_uid(u);
                }
            }
        }
    }

    fn on_event(&mut self, ev: WatchEvent) {
        match ev {
            WatchEvent::Put { kv, prev } => self.on_put(&kv.key, &kv.value, prev.is_none()),
            WatchEvent::Delete { prev, .. } => self.on_delete(&prev.key, &prev.value),
            WatchEvent::Progress(_) => {}
        }
    }

    async fn run(mut self, mut rev: i64) {
        loop {
            let mut stream = match self.sim.store.watch_without_prev("/registry/", rev).await {
                Ok(s) => s,
                Err(_) => {
                    rev = self.sync().await;
                    continue;
                }
            };
            self.process().await;
            loop {
                let due = self.finishing.peek().map(|Reverse((t, _))| *t);
                let ev = tokio::select! {
                    ev = stream.next() => Some(ev),
                    _ = async { match due { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => None,
                };
                let mut broken = false;
                match ev {
                    Some(Some(Ok(ev))) => self.on_event(ev),
                    Some(_) => broken = true,
                    None => {}
                }
                // take whatever else is ready before reconciling
                let mut n = 0;
                while !broken && n < 10_000 {
                    match stream.next().now_or_never() {
                        Some(Some(Ok(ev))) => self.on_event(ev),
                        Some(_) => broken = true,
                        None => break,
                    }
                    n += 1;
                }
                if broken {
                    tracing::info!("controller watch ended; re-listing");
                    break;
                }
                self.process().await;
            }
            rev = self.sync().await;
        }
    }

    /// Does all pending work: deletions, job completions, namespaces, secrets, reconciles and
    /// scheduling.
    async fn process(&mut self) {
        for key in std::mem::take(&mut self.to_delete) {
            self.delete_key(&key).await;
        }
        let now_i = Instant::now();
        while self.finishing.peek().is_some_and(|Reverse((t, _))| *t <= now_i) {
            let Some(Reverse((_, key))) = self.finishing.pop() else { break };
            let _ = self
                .update_direct(&key, |p| {
                    if phase(p) == "Running" {
                        succeed(p);
                        true
                    } else {
                        false
                    }
                })
                .await;
        }
        for ns in std::mem::take(&mut self.new_namespaces) {
            self.ensure_namespace_defaults(&ns).await;
        }
        for key in std::mem::take(&mut self.secrets) {
            self.fill_token_secret(&key).await;
        }
        let mut budget = 1000;
        while let Some(item) = self.queue.pop_front() {
            self.queued.remove(&item);
            let (kind, ns, name) = item;
            let res = match kind {
                Kind::Deployment => self.reconcile_deployment(&ns, &name).await,
                Kind::ReplicaSet => self.reconcile_replicaset(&ns, &name).await,
                Kind::StatefulSet => self.reconcile_statefulset(&ns, &name).await,
                Kind::DaemonSet => self.reconcile_daemonset(&ns, &name).await,
                Kind::Job => self.reconcile_job(&ns, &name).await,
            };
            if let Err(e) = res {
                tracing::debug!(?kind, %ns, %name, error = %e, "reconcile failed; requeued");
                self.enqueue(kind, &ns, &name);
            }
            budget -= 1;
            if budget == 0 {
                break;
            }
        }
        let pending: Vec<String> = std::mem::take(&mut self.unscheduled).into_iter().collect();
        for key in pending {
            self.schedule_existing(&key).await;
        }
    }

    fn pick_node(&mut self) -> Option<(String, String, String)> {
        if self.nodes.is_empty() {
            return None;
        }
        let i = self.rr % self.nodes.len();
        self.rr = self.rr.wrapping_add(1);
        let (name, slot) = self.nodes.iter_mut().nth(i)?;
        Some((name.clone(), slot.ip.clone(), slot.next_ip()))
    }

    fn place_on(&mut self, node: &str) -> Option<(String, String)> {
        let slot = self.nodes.get_mut(node)?;
        Some((slot.ip.clone(), slot.next_ip()))
    }

    /// Reads a key straight from the store, applies `f` (false = no change) and writes it
    /// back with compare-and-swap, retrying on conflicts.
    async fn update_direct(&self, key: &str, f: impl Fn(&mut Value) -> bool) -> Result<(), StorageError> {
        let info = self.core_info("pods");
        for _ in 0..8 {
            let Some(kv) = self.store().get(key).await? else { return Ok(()) };
            let Ok(mut v) = serde_json::from_slice::<Value>(&kv.value) else { return Ok(()) };
            if !f(&mut v) {
                return Ok(());
            }
            match self.store().update(key, Bytes::from(object::to_stored(&info, &v)), kv.mod_revision).await {
                Ok(_) => return Ok(()),
                Err(StorageError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Binds an existing unscheduled pod and makes it Running.
    async fn schedule_existing(&mut self, key: &str) {
        let Some((node, host_ip, pod_ip)) = self.pick_node() else {
            self.unscheduled.insert(key.to_string());
            return;
        };
        let _ = self
            .update_direct(key, |p| {
                if p.pointer("/spec/nodeName").is_some_and(|n| n.is_string()) || terminating(p) {
                    return false;
                }
                run_on(p, &node, &host_ip, &pod_ip);
                true
            })
            .await;
    }

    async fn delete_key(&self, key: &str) {
        let Some(rest) = key.strip_prefix("/registry/") else { return };
        let parts: Vec<&str> = rest.split('/').collect();
        let (group, resource, ns, name) = match parts.as_slice() {
            [g, r, ns, n] => (if *g == "core" { "" } else { *g }, *r, Some(*ns), *n),
            [g, r, n] => (if *g == "core" { "" } else { *g }, *r, None, *n),
            _ => return,
        };
        let Some(info) = self.sim.api.registry.all().iter().find(|i| i.group == group && i.resource == resource).cloned() else { return };
        let r = ResourceRequest { info, namespace: ns.map(str::to_string), name: Some(name.to_string()), subresource: None, watch_path: false };
        let _ = self.sim.api.delete(&r, &json!({"propagationPolicy": "Background"}), &self.ctx).await;
    }

    /// The live objects a controller owns, read from the store; stale index entries dropped.
    async fn children_of(&mut self, uid: &str) -> Vec<Value> {
        let keys: Vec<String> = self.children.get(uid).map(|s| s.iter().cloned().collect()).unwrap_or_default();
        let mut out = Vec::new();
        for key in keys {
            match self.store().get(&key).await {
                Ok(Some(kv)) => {
                    if let Ok(mut v) = serde_json::from_slice::<Value>(&kv.value) {
                        let owned = v.pointer("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|a| a.iter().any(|o| o["uid"] == uid && o["controller"] == true));
                        if owned {
                            object::set_rv(&mut v, kv.mod_revision);
                            out.push(v);
                            continue;
                        }
                    }
                    if let Some(s) = self.children.get_mut(uid) {
                        s.remove(&key);
                    }
                }
                _ => {
                    if let Some(s) = self.children.get_mut(uid) {
                        s.remove(&key);
                    }
                }
            }
        }
        out
    }

    /// Creates a pod bound to `node` (or round-robin) and Running; records it as a child.
    async fn create_pod(&mut self, mut pod: Value, owner_uid: &str, node: Option<&str>) -> ApiResult<Value> {
        let placed = match node {
            Some(n) => self.place_on(n).map(|(h, p)| (n.to_string(), h, p)),
            None => self.pick_node(),
        };
        if let Some((n, h, p)) = placed {
            run_on(&mut pod, &n, &h, &p);
        }
        let ns = object::meta_str(&pod, "namespace").unwrap_or("default").to_string();
        let r = Self::req(self.core_info("pods"), &ns, None, None);
        let out = self.sim.api.create(&r, pod, &self.ctx).await?;
        let name = object::meta_str(&out, "name").unwrap_or("").to_string();
        let key = core_key("pods", Some(&ns), &name);
        self.children.entry(owner_uid.to_string()).or_default().insert(key);
        Ok(out)
    }

    async fn get(&self, kind: Kind, ns: &str, name: &str) -> ApiResult<Option<Value>> {
        match self.sim.api.get(&Self::req(self.info(kind), ns, Some(name), None)).await {
            Ok(v) => Ok(Some(v)),
            Err(ApiError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn set_status(&self, kind: Kind, ns: &str, name: &str, status: Value) -> ApiResult<()> {
        let r = Self::req(self.info(kind), ns, Some(name), Some("status"));
        let res = self
            .sim
            .api
            .guaranteed_update(&r, name, None, &self.ctx, move |cur| {
                let mut n = cur.clone();
                n["status"] = status.clone();
                Ok(n)
            })
            .await;
        match res {
            Ok(_) | Err(ApiError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete_pods(&self, pods: &[Value]) {
        for p in pods {
            let ns = object::meta_str(p, "namespace").unwrap_or("");
            let name = object::meta_str(p, "name").unwrap_or("");
            self.delete_key(&core_key("pods", Some(ns), name)).await;
        }
    }

    // ---------------------------------------------------------------------------------------
    // Workloads

    async fn reconcile_replicaset(&mut self, ns: &str, name: &str) -> ApiResult<()> {
        let Some(rs) = self.get(Kind::ReplicaSet, ns, name).await? else { return Ok(()) };
        if terminating(&rs) {
            return Ok(());
        }
        let uid = object::meta_str(&rs, "uid").unwrap_or("").to_string();
        let desired = int(&rs, "/spec/replicas", 1).max(0) as usize;
        let mut pods: Vec<Value> = self.children_of(&uid).await.into_iter().filter(|p| !terminating(p) && !matches!(phase(p), "Succeeded" | "Failed")).collect();
        if pods.len() < desired {
            let template = rs.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
            for _ in pods.len()..desired {
                let pod = pod_from_template(&template, ns, owner_ref(Kind::ReplicaSet, name, &uid), None, Some(&format!("{name}-")), &[]);
                pods.push(self.create_pod(pod, &uid, None).await?);
            }
        } else if pods.len() > desired {
            // not ready first, then newest
            pods.sort_by(|a, b| is_ready(a).cmp(&is_ready(b)).then_with(|| object::meta_str(b, "creationTimestamp").cmp(&object::meta_str(a, "creationTimestamp"))));
            let extra: Vec<Value> = pods.drain(..pods.len() - desired).collect();
            self.delete_pods(&extra).await;
        }
        let ready = pods.iter().filter(|p| is_ready(p)).count() as i64;
        let mut status = json!({"replicas": pods.len(), "fullyLabeledReplicas": pods.len(), "observedGeneration": int(&rs, "/metadata/generation", 1)});
        if ready > 0 {
            status["readyReplicas"] = json!(ready);
            status["availableReplicas"] = json!(ready);
        }
        self.set_status(Kind::ReplicaSet, ns, name, status).await
    }

    async fn reconcile_deployment(&mut self, ns: &str, name: &str) -> ApiResult<()> {
        let Some(dep) = self.get(Kind::Deployment, ns, name).await? else { return Ok(()) };
        if terminating(&dep) {
            return Ok(());
        }
        let uid = object::meta_str(&dep, "uid").unwrap_or("").to_string();
        let desired = int(&dep, "/spec/replicas", 1).max(0);
        let template = dep.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
        let hash = template_hash(&template);
        let rs_name = format!("{name}-{hash}");
        let sets = self.children_of(&uid).await;
        let mut new_rs = sets.iter().find(|r| object::meta_str(r, "name") == Some(rs_name.as_str())).cloned();
        let rs_info = self.info(Kind::ReplicaSet);
        let revision = |r: &Value| r.pointer("/metadata/annotations/deployment.kubernetes.io~1revision").and_then(Value::as_str).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
        match &new_rs {
            None => {
                let next_rev = sets.iter().map(revision).max().unwrap_or(0) + 1;
                let mut tpl = template.clone();
                tpl["metadata"]["labels"]["pod-template-hash"] = json!(hash);
                let mut selector = dep.pointer("/spec/selector").cloned().unwrap_or_else(|| json!({}));
                selector["matchLabels"]["pod-template-hash"] = json!(hash);
                let mut labels = template.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({}));
                labels["pod-template-hash"] = json!(hash);
                let rs = json!({
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {
                        "name": rs_name,
                        "namespace": ns,
                        "labels": labels,
                        "annotations": {
                            "deployment.kubernetes.io/desired-replicas": desired.to_string(),
                            "deployment.kubernetes.io/max-replicas": (desired + (desired as f64 * 0.25).ceil() as i64).to_string(),
                            "deployment.kubernetes.io/revision": next_rev.to_string(),
                        },
                        "ownerReferences": [owner_ref(Kind::Deployment, name, &uid)],
                    },
                    "spec": {"replicas": desired, "minReadySeconds": int(&dep, "/spec/minReadySeconds", 0), "selector": selector, "template": tpl},
                });
                let out = match self.sim.api.create(&Self::req(rs_info.clone(), ns, None, None), rs, &self.ctx).await {
                    Ok(o) => o,
                    Err(ApiError::AlreadyExists { .. }) => self.get(Kind::ReplicaSet, ns, &rs_name).await?.ok_or(ApiError::Internal("replicaset vanished".into()))?,
                    Err(e) => return Err(e),
                };
                self.children.entry(uid.clone()).or_default().insert(rs_info.key(Some(ns), &rs_name));
                new_rs = Some(out);
            }
            Some(rs) if int(rs, "/spec/replicas", 1) != desired => {
                let r = Self::req(rs_info.clone(), ns, Some(&rs_name), None);
                self.sim
                    .api
                    .guaranteed_update(&r, &rs_name, None, &self.ctx, move |cur| {
                        let mut n = cur.clone();
                        n["spec"]["replicas"] = json!(desired);
                        n["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] = json!(desired.to_string());
                        Ok(n)
                    })
                    .await?;
            }
            Some(_) => {}
        }
        // old ReplicaSets: scaled to zero at once
        for old in sets.iter().filter(|r| object::meta_str(r, "name") != Some(rs_name.as_str())) {
            if int(old, "/spec/replicas", 1) != 0 {
                let n = object::meta_str(old, "name").unwrap_or("").to_string();
                let r = Self::req(rs_info.clone(), ns, Some(&n), None);
                self.sim
                    .api
                    .guaranteed_update(&r, &n, None, &self.ctx, |cur| {
                        let mut x = cur.clone();
                        x["spec"]["replicas"] = json!(0);
                        Ok(x)
                    })
                    .await?;
            }
        }
        let sets = self.children_of(&uid).await;
        let sum = |p: &str| sets.iter().map(|r| int(r, p, 0)).sum::<i64>();
        let replicas = sum("/status/replicas");
        let ready = sum("/status/readyReplicas");
        let available = sum("/status/availableReplicas");
        let new_rs = sets.iter().find(|r| object::meta_str(r, "name") == Some(rs_name.as_str())).or(new_rs.as_ref());
        let updated = new_rs.map(|r| int(r, "/status/replicas", 0)).unwrap_or(0);
        let complete = updated == desired && replicas == desired && available == desired;
        let old = dep.get("status");
        let available_ok = available >= desired;
        let mut status = json!({
            "observedGeneration": int(&dep, "/metadata/generation", 1),
            "replicas": replicas,
            "updatedReplicas": updated,
            "conditions": [
                condition(old, "Available", available_ok,
                    if available_ok { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                    if available_ok { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." }, true),
                condition(old, "Progressing", true,
                    if complete { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" },
                    &if complete { format!("ReplicaSet \"{rs_name}\" has successfully progressed.") } else { format!("ReplicaSet \"{rs_name}\" is progressing.") }, true),
            ],
        });
        if ready > 0 {
            status["readyReplicas"] = json!(ready);
        }
        if available > 0 {
            status["availableReplicas"] = json!(available);
        }
        if desired > available {
            status["unavailableReplicas"] = json!(desired - available);
        }
        self.set_status(Kind::Deployment, ns, name, status).await
    }

    async fn reconcile_statefulset(&mut self, ns: &str, name: &str) -> ApiResult<()> {
        let Some(sts) = self.get(Kind::StatefulSet, ns, name).await? else { return Ok(()) };
        if terminating(&sts) {
            return Ok(());
        }
        let uid = object::meta_str(&sts, "uid").unwrap_or("").to_string();
        let desired = int(&sts, "/spec/replicas", 1).max(0) as usize;
        let template = sts.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
        let revision = format!("{name}-{}", template_hash(&template));
        let pods = self.children_of(&uid).await;
        let ordinal = |p: &Value| -> Option<usize> { object::meta_str(p, "name")?.strip_prefix(&format!("{name}-"))?.parse().ok() };
        let mut by_ord: BTreeMap<usize, Value> = pods.into_iter().filter_map(|p| ordinal(&p).map(|o| (o, p))).collect();
        // scale down from the top
        let extra: Vec<Value> = by_ord.split_off(&desired).into_values().collect();
        self.delete_pods(&extra).await;
        // OrderedReady: create the first missing ordinal once all below it are Ready
        for i in 0..desired {
            match by_ord.get(&i) {
                Some(p) if is_ready(p) => continue,
                Some(_) => break,
                None => {
                    let pod_name = format!("{name}-{i}");
                    let mut pod = pod_from_template(
                        &template,
                        ns,
                        owner_ref(Kind::StatefulSet, name, &uid),
                        Some(&pod_name),
                        None,
                        &[("statefulset.kubernetes.io/pod-name", pod_name.clone()), ("apps.kubernetes.io/pod-index", i.to_string()), ("controller-revision-hash", revision.clone())],
                    );
                    pod["spec"]["hostname"] = json!(pod_name);
                    if let Some(svc) = sts.pointer("/spec/serviceName").and_then(Value::as_str) {
                        pod["spec"]["subdomain"] = json!(svc);
                    }
                    match self.create_pod(pod, &uid, None).await {
                        Ok(p) => {
                            by_ord.insert(i, p);
                        }
                        Err(ApiError::AlreadyExists { .. }) => {
                            self.children.entry(uid.clone()).or_default().insert(core_key("pods", Some(ns), &pod_name));
                        }
                        Err(e) => return Err(e),
                    }
                    break;
                }
            }
        }
        let n = by_ord.len() as i64;
        let ready = by_ord.values().filter(|p| is_ready(p)).count() as i64;
        let mut status = json!({
            "observedGeneration": int(&sts, "/metadata/generation", 1),
            "replicas": n,
            "currentReplicas": n,
            "updatedReplicas": n,
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        });
        if ready > 0 {
            status["readyReplicas"] = json!(ready);
            status["availableReplicas"] = json!(ready);
        }
        self.set_status(Kind::StatefulSet, ns, name, status).await
    }

    async fn reconcile_daemonset(&mut self, ns: &str, name: &str) -> ApiResult<()> {
        let Some(ds) = self.get(Kind::DaemonSet, ns, name).await? else { return Ok(()) };
        if terminating(&ds) {
            return Ok(());
        }
        let uid = object::meta_str(&ds, "uid").unwrap_or("").to_string();
        let template = ds.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
        let revision = template_hash(&template);
        let generation = int(&ds, "/metadata/generation", 1);
        let pods = self.children_of(&uid).await;
        let mut on_node: BTreeMap<String, Value> = BTreeMap::new();
        let mut extra = Vec::new();
        for p in pods.into_iter().filter(|p| !terminating(p)) {
            let node = p.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").to_string();
            if self.nodes.contains_key(&node) && !on_node.contains_key(&node) {
                on_node.insert(node, p);
            } else {
                extra.push(p);
            }
        }
        self.delete_pods(&extra).await;
        let nodes: Vec<String> = self.nodes.keys().filter(|n| !on_node.contains_key(*n)).cloned().collect();
        for node in nodes {
            let pod = pod_from_template(
                &template,
                ns,
                owner_ref(Kind::DaemonSet, name, &uid),
                None,
                Some(&format!("{name}-")),
                &[("controller-revision-hash", revision.clone()), ("pod-template-generation", generation.to_string())],
            );
            let p = self.create_pod(pod, &uid, Some(&node)).await?;
            on_node.insert(node, p);
        }
        let n = on_node.len() as i64;
        let ready = on_node.values().filter(|p| is_ready(p)).count() as i64;
        let status = json!({
            "observedGeneration": generation,
            "desiredNumberScheduled": self.nodes.len(),
            "currentNumberScheduled": n,
            "updatedNumberScheduled": n,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
        });
        self.set_status(Kind::DaemonSet, ns, name, status).await
    }

    async fn reconcile_job(&mut self, ns: &str, name: &str) -> ApiResult<()> {
        let Some(job) = self.get(Kind::Job, ns, name).await? else { return Ok(()) };
        if terminating(&job) {
            return Ok(());
        }
        let uid = object::meta_str(&job, "uid").unwrap_or("").to_string();
        let completions = int(&job, "/spec/completions", 1).max(0);
        let parallelism = int(&job, "/spec/parallelism", 1).max(0);
        let pods = self.children_of(&uid).await;
        let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count() as i64;
        let failed = pods.iter().filter(|p| phase(p) == "Failed").count() as i64;
        let mut active: Vec<&Value> = pods.iter().filter(|p| !terminating(p) && !matches!(phase(p), "Succeeded" | "Failed")).collect();
        let already_complete = job.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Complete" && c["status"] == "True"));
        let mut created = Vec::new();
        if !already_complete && succeeded < completions {
            let want = parallelism.min(completions - succeeded) - active.len() as i64;
            let template = job.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
            for _ in 0..want.max(0) {
                let pod = pod_from_template(
                    &template,
                    ns,
                    owner_ref(Kind::Job, name, &uid),
                    None,
                    Some(&format!("{name}-")),
                    &[("batch.kubernetes.io/controller-uid", uid.clone()), ("batch.kubernetes.io/job-name", name.to_string()), ("controller-uid", uid.clone()), ("job-name", name.to_string())],
                );
                let p = self.create_pod(pod, &uid, None).await?;
                let pname = object::meta_str(&p, "name").unwrap_or("").to_string();
                self.finishing.push(Reverse((Instant::now() + self.sim.config.job_duration, core_key("pods", Some(ns), &pname))));
                created.push(p);
            }
        }
        active.extend(created.iter());
        let old = job.get("status");
        let start = old.and_then(|s| s.get("startTime")).cloned().unwrap_or_else(|| json!(now()));
        let mut status = json!({
            "startTime": start,
            "succeeded": succeeded,
            "ready": active.iter().filter(|p| is_ready(p)).count(),
            "terminating": 0,
            "uncountedTerminatedPods": {},
        });
        if !active.is_empty() {
            status["active"] = json!(active.len());
        }
        if failed > 0 {
            status["failed"] = json!(failed);
        }
        if already_complete || succeeded >= completions {
            let done = old.and_then(|s| s.get("completionTime")).cloned().unwrap_or_else(|| json!(now()));
            status["completionTime"] = done;
            status["conditions"] = json!([
                condition(old, "SuccessCriteriaMet", true, "CompletionsReached", "Reached expected number of succeeded pods", false),
                condition(old, "Complete", true, "CompletionsReached", "Reached expected number of succeeded pods", false),
            ]);
            status.as_object_mut().map(|s| s.remove("active"));
        }
        self.set_status(Kind::Job, ns, name, status).await
    }

    // ---------------------------------------------------------------------------------------
    // Service accounts

    async fn ensure_namespace_defaults(&self, ns: &str) {
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
        let _ = self.sim.api.create(&Self::req(self.core_info("serviceaccounts"), ns, None, None), sa, &self.ctx).await;
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": ns}, "data": {"ca.crt": self.sim.ca_pem}});
        let _ = self.sim.api.create(&Self::req(self.core_info("configmaps"), ns, None, None), cm, &self.ctx).await;
    }

    async fn fill_token_secret(&self, key: &str) {
        let Some((ns, _)) = split_key(key, SECRETS) else { return };
        let Ok(Some(kv)) = self.store().get(key).await else { return };
        let Some(l) = Lite::parse(&kv.value) else { return };
        let Some(sa_name) = l.metadata.annotations.as_ref().and_then(|a| a.get("kubernetes.io/service-account.name")).cloned() else { return };
        let Ok(Some(sa)) = self.store().get(&core_key("serviceaccounts", Some(ns), &sa_name)).await else { return };
        let Some(sa_uid) = Lite::parse(&sa.value).map(|s| s.metadata.uid) else { return };
        let token = self.sim.signer.issue(ns, &sa_name, &sa_uid, &[], chrono::Utc::now(), 10 * 365 * 86_400);
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
        let (t, ca, n) = (b64(&token), b64(&self.sim.ca_pem), b64(ns));
        let info = self.core_info("secrets");
        let Ok(mut v) = serde_json::from_slice::<Value>(&kv.value) else { return };
        if v.pointer("/data/token").is_some() {
            return;
        }
        if !v.get("data").is_some_and(Value::is_object) {
            v["data"] = json!({});
        }
        v["data"]["token"] = json!(t);
        v["data"]["ca.crt"] = json!(ca);
        v["data"]["namespace"] = json!(n);
        v["metadata"]["annotations"]["kubernetes.io/service-account.uid"] = json!(sa_uid);
        let _ = self.store().update(key, Bytes::from(object::to_stored(&info, &v)), kv.mod_revision).await;
    }
}

/// Sets the node count: creates generated nodes up to `count` or deletes those beyond it,
/// together with their pods (as the pod garbage collector removes pods of deleted nodes).
/// Returns `(nodes added, nodes removed, pods deleted)`.
pub async fn set_node_count(sim: &Arc<Sim>, count: usize) -> ApiResult<(usize, usize, usize)> {
    let cfg = sim.config.gen_config();
    let cur = sim.node_count.swap(count, Ordering::SeqCst);
    let info = sim.api.registry.lookup("", "v1", "nodes").expect("nodes registered");
    let (mut added, mut removed, mut pods) = (0, 0, 0);
    if count > cur {
        for i in cur..count {
            let n = super::generate::node(&cfg, i);
            if sim.store.create(&core_key("nodes", None, &cfg.node_name(i)), Bytes::from(object::to_stored(&info, &n))).await.is_ok() {
                added += 1;
            }
        }
    } else if count < cur {
        let mut gone = HashSet::new();
        for i in count..cur {
            let name = cfg.node_name(i);
            if sim.store.delete(&core_key("nodes", None, &name), 0).await.is_ok() {
                removed += 1;
            }
            gone.insert(name);
        }
        let mut start = String::new();
        loop {
            let res = sim.store.list(PODS, &start, 1000, 0).await?;
            for kv in &res.kvs {
                if let Some(l) = Lite::parse(&kv.value) {
                    if l.spec.node_name.as_ref().is_some_and(|n| gone.contains(n)) && sim.store.delete(&kv.key, 0).await.is_ok() {
                        pods += 1;
                    }
                }
            }
            match res.kvs.last() {
                Some(last) if res.remaining > 0 => start = format!("{}\u{0}", last.key),
                _ => break,
            }
        }
    }
    Ok((added, removed, pods))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_and_safe() {
        let t = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let h = template_hash(&t);
        assert_eq!(h, template_hash(&t));
        assert!(h.bytes().all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)));
        assert_ne!(h, template_hash(&json!({"spec": {}})));
    }

    #[test]
    fn pods_run_and_succeed() {
        let t = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}});
        let mut p = pod_from_template(&t, "ns", owner_ref(Kind::Job, "j", "u"), None, Some("j-"), &[("job-name", "j".into())]);
        run_on(&mut p, "n1", "10.1.0.1", "10.2.0.9");
        assert!(is_ready(&p));
        assert_eq!(p["status"]["podIP"], "10.2.0.9");
        assert_eq!(p["metadata"]["labels"]["job-name"], "j");
        assert_eq!(crate::api::registry::pod_status_reason(&p), "Running");
        succeed(&mut p);
        assert_eq!(phase(&p), "Succeeded");
        assert!(!is_ready(&p));
        assert_eq!(crate::api::registry::pod_status_reason(&p), "Completed");
    }

    #[test]
    fn node_slots_allocate_in_upper_half() {
        let mut s = NodeSlot { ip: "10.128.0.4".into(), cidr: parse_cidr("10.0.1.0/24"), next: 0 };
        assert_eq!(s.next_ip(), "10.0.1.128");
        assert_eq!(s.next_ip(), "10.0.1.129");
    }
}
