//! Deterministic generation of realistic, unique Kubernetes Nodes, Pods and namespaces from captured templates.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::OnceLock;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use serde_json::{json, Map, Value};

/// Birth of every simulated cluster, 2025-05-01T00:00:00Z, in Unix seconds. Nodes are created
/// within the hour after it.
pub const EPOCH_UNIX: i64 = 1_746_057_600;

/// The simulated "now" of the initial population (30 days after [`EPOCH_UNIX`]), in Unix
/// seconds. Node heartbeats lie just before it; the churn clock starts at it.
pub const NOW_UNIX: i64 = EPOCH_UNIX + 30 * 86_400;

/// `status.nodeInfo.kubeletVersion` (and `kubeProxyVersion`) of every generated node.
pub const KUBELET_VERSION: &str = "v1.30.0";

/// Label that [`Churn::LabelChange`] sets on a pod; its value is a decimal counter.
pub const CHURN_LABEL: &str = "churn.fedsim.io/revision";

/// Field manager recorded in `managedFields` for churn label changes.
pub const CHURN_MANAGER: &str = "fedsim-churn";

/// Characters Kubernetes uses for generated name suffixes (no vowels, no confusable digits).
const SUFFIX_ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";

/// Number of distinct 5-character suffixes (27^5).
const SUFFIX_SPACE: u32 = 14_348_907;

// Stream tags mixed into the seed so that independent streams never share random numbers.
const STREAM_NAMESPACES: u64 = 0x6e61_6d65_7370_6163;
const STREAM_NODE: u64 = 0x0000_0000_6e6f_6465;
const STREAM_NODE_TIME: u64 = 0x6e6f_6465_7469_6d65;
const STREAM_PLAN: u64 = 0x0000_0000_706c_616e;
const STREAM_POD: u64 = 0x0000_0000_0070_6f64;
const STREAM_CHURN: u64 = 0x0000_0063_6875_726e;

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// Shape of one simulated member cluster. Everything generated is a pure function of it.
///
/// Every object is derived from a real captured object in `testdata/real-objects/` (embedded
/// with `include_str!`, parsed once), cloned and mutated: names, uids, IPs, times, owners and
/// labels are made unique and consistent, while the rest — `managedFields` included — keeps the
/// size and shape of the original. The same config always yields byte-identical JSON.
///
/// Layout of the simulated cluster:
/// - nodes `<cluster>-node-00000` … with InternalIP `10.128.x.y` and a pod CIDR carved from
///   `10.0.0.0/9` (a `/24` per node unless `pods_per_node` needs more), see [`node`];
/// - `nodes × pods_per_node` pods: a few DaemonSets in `kube-system` with one pod per node, the
///   rest grouped into ReplicaSets, StatefulSets and Jobs of 1 to 300 pods spread over the
///   namespaces with Zipf skew, placed so every node holds exactly `pods_per_node`, see
///   [`PodGenerator`];
/// - all times between [`EPOCH_UNIX`] (cluster birth) and [`NOW_UNIX`] (the initial snapshot).
#[derive(Clone, Debug, PartialEq)]
pub struct GenConfig {
    /// Cluster name: prefixes node names (`<cluster>-node-00042`) and salts every random stream
    /// except namespace names, so two clusters with one seed get distinct uids and workloads.
    pub cluster: String,
    /// Seed of all random streams; the same config gives byte-identical output.
    pub seed: u64,
    /// Number of nodes.
    pub nodes: usize,
    /// Pods on every node in the initial population (DaemonSet pods included).
    pub pods_per_node: usize,
    /// Number of namespaces, `default` and `kube-system` included (at least 2 are generated).
    pub namespaces: usize,
    /// Zipf exponent `s` of the pods-per-namespace distribution: namespace of rank `k` (1-based)
    /// gets a share proportional to `1 / k^s`; `0` is uniform.
    pub namespace_skew: f64,
    /// `topology.kubernetes.io/zone` label of every node, e.g. `us-east-1a`.
    pub zone: String,
    /// `topology.kubernetes.io/region` label of every node, e.g. `us-east-1`.
    pub region: String,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig { cluster: "member-1".to_string(), seed: 1, nodes: 10, pods_per_node: 30, namespaces: 20, namespace_skew: 1.1, zone: "us-east-1a".to_string(), region: "us-east-1".to_string() }
    }
}

impl GenConfig {
    /// Pods in the initial population: `nodes × pods_per_node`.
    pub fn total_pods(&self) -> usize {
        self.nodes * self.pods_per_node
    }

    /// Name of node `index`: `<cluster>-node-<index, zero-padded to 5 digits>`.
    pub fn node_name(&self, index: usize) -> String {
        format!("{}-node-{:05}", self.cluster, index)
    }

    /// InternalIP of node `index`: `10.128.<index / 250>.<4 + index % 250>` (the third octet
    /// carries into the second past 256 × 250 nodes); unique for up to 8 M nodes.
    pub fn node_internal_ip(&self, index: usize) -> Ipv4Addr {
        let subnet = (index / 250) as u32 % (1 << 15);
        let host = 4 + (index % 250) as u32;
        Ipv4Addr::from((10u32 << 24) | (128 << 16) | (subnet << 8) | host)
    }

    /// Pod CIDR of node `index` as (network address, prefix length): consecutive blocks of
    /// `2^(32 - prefix)` addresses from `10.0.0.0/9`; the prefix is `/24` unless
    /// `pods_per_node` needs a bigger block (the block holds at least twice the node's pods so
    /// churn can allocate round-robin). Blocks repeat after 2^23 addresses (32768 `/24` nodes).
    pub fn node_pod_cidr(&self, index: usize) -> (Ipv4Addr, u8) {
        let bits = self.pod_host_bits();
        let offset = ((index as u64) << bits) % (1u64 << 23);
        (Ipv4Addr::from((10u32 << 24) | offset as u32), (32 - bits) as u8)
    }

    /// `status.capacity.pods` of every node: 110, or `pods_per_node` if that is larger.
    pub fn node_pod_capacity(&self) -> usize {
        self.pods_per_node.max(110)
    }

    /// Host bits of a node's pod CIDR: at least 8, and enough for `2 × pods_per_node + 4`.
    fn pod_host_bits(&self) -> u32 {
        let need = 2 * self.pods_per_node + 4;
        let bits = usize::BITS - (need - 1).leading_zeros();
        bits.clamp(8, 23)
    }

    /// Seed salted with the cluster name.
    fn salt(&self) -> u64 {
        mix(self.seed, fnv1a(&self.cluster))
    }
}

// ---------------------------------------------------------------------------------------------
// Templates
// ---------------------------------------------------------------------------------------------

/// One of the five captured pod templates; each maps to one controller kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PodTemplate {
    /// `pod-backstage-1.json`: single nginx container of a Deployment (ReplicaSet), ~4.2 KB.
    Backstage,
    /// `pod-portdocs-1.json`: Helm Deployment pod with env and resources (ReplicaSet), ~6.9 KB.
    PortDocs,
    /// `pod-insights-1.json`: 7-container Prometheus StatefulSet pod (no managedFields), ~18.7 KB.
    Insights,
    /// `pod-nri-1.json`: host-network CNI DaemonSet pod (no managedFields), ~4.2 KB.
    Nri,
    /// `pod-retrievejob-1.json`: Job pod, ~4.6 KB.
    RetrieveJob,
}

impl PodTemplate {
    /// All templates, in a fixed order.
    pub const ALL: [PodTemplate; 5] = [PodTemplate::Backstage, PodTemplate::PortDocs, PodTemplate::Insights, PodTemplate::Nri, PodTemplate::RetrieveJob];

    /// File name of the template under `testdata/real-objects/`.
    pub fn file_name(self) -> &'static str {
        match self {
            PodTemplate::Backstage => "pod-backstage-1.json",
            PodTemplate::PortDocs => "pod-portdocs-1.json",
            PodTemplate::Insights => "pod-insights-1.json",
            PodTemplate::Nri => "pod-nri-1.json",
            PodTemplate::RetrieveJob => "pod-retrievejob-1.json",
        }
    }

    /// The embedded JSON text of the template, exactly as captured.
    pub fn source(self) -> &'static str {
        match self {
            PodTemplate::Backstage => {
                include_str!("../../testdata/real-objects/pod-backstage-1.json")
            }
            PodTemplate::PortDocs => {
                include_str!("../../testdata/real-objects/pod-portdocs-1.json")
            }
            PodTemplate::Insights => {
                include_str!("../../testdata/real-objects/pod-insights-1.json")
            }
            PodTemplate::Nri => include_str!("../../testdata/real-objects/pod-nri-1.json"),
            PodTemplate::RetrieveJob => {
                include_str!("../../testdata/real-objects/pod-retrievejob-1.json")
            }
        }
    }

    /// Kind of the controller that owns pods made from this template.
    pub fn owner_kind(self) -> OwnerKind {
        match self {
            PodTemplate::Backstage | PodTemplate::PortDocs => OwnerKind::ReplicaSet,
            PodTemplate::Insights => OwnerKind::StatefulSet,
            PodTemplate::Nri => OwnerKind::DaemonSet,
            PodTemplate::RetrieveJob => OwnerKind::Job,
        }
    }

    fn index(self) -> usize {
        match self {
            PodTemplate::Backstage => 0,
            PodTemplate::PortDocs => 1,
            PodTemplate::Insights => 2,
            PodTemplate::Nri => 3,
            PodTemplate::RetrieveJob => 4,
        }
    }
}

/// Kind of a pod's controlling owner (its `ownerReferences[0].kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnerKind {
    /// `apps/v1` ReplicaSet of a Deployment; pods are `<deployment>-<hash>-<5 chars>`.
    ReplicaSet,
    /// `apps/v1` StatefulSet; pods are `<statefulset>-<ordinal>`.
    StatefulSet,
    /// `apps/v1` DaemonSet, one pod per node; pods are `<daemonset>-<5 chars>`.
    DaemonSet,
    /// `batch/v1` Job; pods are `<job>-<5 chars>`.
    Job,
}

impl OwnerKind {
    /// The kind as written in `ownerReferences[].kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            OwnerKind::ReplicaSet => "ReplicaSet",
            OwnerKind::StatefulSet => "StatefulSet",
            OwnerKind::DaemonSet => "DaemonSet",
            OwnerKind::Job => "Job",
        }
    }

    /// The kind's `apiVersion` (`apps/v1` or `batch/v1`).
    pub fn api_version(self) -> &'static str {
        match self {
            OwnerKind::Job => "batch/v1",
            _ => "apps/v1",
        }
    }
}

/// A pod template after load-time normalisation (see [`load_pod_template`]).
struct PodTpl {
    value: Value,
    host_network: bool,
    /// The template's pod IP, replaced wherever it is embedded in annotation strings.
    old_pod_ip: Option<String>,
    /// Container runtime prefix of container IDs (`docker`, `containerd`, `cri-o`).
    runtime: String,
    /// Name of the per-pod projected token volume (`kube-api-access-xxxxx`), if any.
    api_access_volume: Option<String>,
    /// Index of the kubelet's status entry in `managedFields`, if any.
    kubelet_mf: Option<usize>,
}

/// A node template after load-time normalisation (see [`load_node_template`]).
struct NodeTpl {
    value: Value,
    /// Index of the `managedFields` entry that owns `spec.podCIDRs`, if any.
    cidr_mf: Option<usize>,
}

struct Templates {
    pods: Vec<PodTpl>,
    nodes: Vec<NodeTpl>,
}

fn templates() -> &'static Templates {
    static TEMPLATES: OnceLock<Templates> = OnceLock::new();
    TEMPLATES.get_or_init(|| Templates {
        pods: PodTemplate::ALL.iter().map(|&t| load_pod_template(t)).collect(),
        nodes: vec![load_node_template(include_str!("../../testdata/real-objects/node-cilium-1.json")), load_node_template(include_str!("../../testdata/real-objects/node-portdocs-1.json"))],
    })
}

/// Parses a pod template and turns it into a healthy running pod: drops `resourceVersion` and
/// the legacy `selfLink`, ensures an `app` label, sets phase Running with all conditions True and
/// every container running, ready, started, never restarted, and makes the kubelet's
/// managedFields entry cover podIP/podIPs/phase.
fn load_pod_template(which: PodTemplate) -> PodTpl {
    let mut v: Value = serde_json::from_str(which.source()).expect("embedded pod template is JSON");

    let meta = v["metadata"].as_object_mut().expect("pod template has metadata");
    meta.shift_remove("resourceVersion");
    meta.shift_remove("selfLink");
    let labels = meta["labels"].as_object_mut().expect("pod template has labels");
    if !labels.contains_key("app") {
        labels.insert("app".into(), Value::from(""));
        labels.sort_keys();
        if let Some(mf) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
            if let Some(l) = mf.iter_mut().find_map(|e| e.pointer_mut("/fieldsV1/f:metadata/f:labels").and_then(Value::as_object_mut)) {
                l.insert("f:app".into(), json!({}));
                l.sort_keys();
            }
        }
    }

    let host_network = v["spec"]["hostNetwork"].as_bool().unwrap_or(false);
    let api_access_volume = v["spec"]["volumes"].as_array().and_then(|vols| vols.iter().filter_map(|vol| vol["name"].as_str()).find(|n| n.starts_with("kube-api-access-")).map(str::to_string));

    let status = v["status"].as_object_mut().expect("pod template has status");
    let old_pod_ip = status.get("podIP").and_then(Value::as_str).map(str::to_string);
    let runtime = status
        .get("containerStatuses")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find_map(|c| c["containerID"].as_str()))
        .and_then(|id| id.split_once("://"))
        .map(|(rt, _)| rt.to_string())
        .unwrap_or_else(|| "docker".to_string());

    status.insert("phase".into(), Value::from("Running"));
    if !status.contains_key("podIP") {
        // Rebuild to put podIP/podIPs right after hostIP, where the apiserver emits them.
        let old = std::mem::take(status);
        for (k, val) in old {
            let is_host_ip = k == "hostIP";
            status.insert(k, val);
            if is_host_ip {
                status.insert("podIP".into(), Value::from("0.0.0.0"));
                status.insert("podIPs".into(), json!([{ "ip": "0.0.0.0" }]));
            }
        }
        if !status.contains_key("podIP") {
            status.insert("podIP".into(), Value::from("0.0.0.0"));
            status.insert("podIPs".into(), json!([{ "ip": "0.0.0.0" }]));
        }
    }
    if let Some(conds) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds.iter_mut().filter_map(Value::as_object_mut) {
            c.insert("status".into(), Value::from("True"));
            c.shift_remove("reason");
            c.shift_remove("message");
        }
    }
    if let Some(css) = status.get_mut("containerStatuses").and_then(Value::as_array_mut) {
        for cs in css.iter_mut().filter_map(Value::as_object_mut) {
            if !cs.contains_key("containerID") {
                cs.insert("containerID".into(), Value::from(""));
            }
            let image = cs.get("image").and_then(Value::as_str).unwrap_or("").to_string();
            if cs.get("imageID").and_then(Value::as_str).is_none_or(str::is_empty) {
                let prefix = if runtime == "docker" { "docker-pullable://" } else { "" };
                let repo = image.split(':').next().unwrap_or(&image);
                let digest = hex_from_seed(fnv1a(&image), 32);
                cs.insert("imageID".into(), Value::from(format!("{prefix}{repo}@sha256:{digest}")));
            }
            cs.insert("state".into(), json!({ "running": { "startedAt": "" } }));
            cs.insert("lastState".into(), json!({}));
            cs.insert("ready".into(), Value::Bool(true));
            cs.insert("started".into(), Value::Bool(true));
            cs.insert("restartCount".into(), Value::from(0));
        }
    }

    let kubelet_mf = v["metadata"]["managedFields"].as_array().and_then(|mf| mf.iter().position(|e| e["manager"] == "kubelet" && e["fieldsV1"].get("f:status").is_some()));
    if let Some(i) = kubelet_mf {
        let fs = v["metadata"]["managedFields"][i]["fieldsV1"]["f:status"].as_object_mut().expect("kubelet status fields are an object");
        for key in ["f:phase", "f:podIP"] {
            if !fs.contains_key(key) {
                fs.insert(key.into(), json!({}));
            }
        }
        fs.insert("f:podIPs".into(), pod_ips_fields("0.0.0.0"));
        fs.sort_keys();
    }

    PodTpl { value: v, host_network, old_pod_ip, runtime, api_access_volume, kubelet_mf }
}

/// Parses a node template and turns it into a schedulable worker: drops `resourceVersion`,
/// control-plane role/taint and minikube labels, adds worker role, instance-type and topology
/// labels (with matching managedFields), sets capacity (32 cpu, ~128 GiB) and kubelet version.
fn load_node_template(src: &str) -> NodeTpl {
    let mut v: Value = serde_json::from_str(src).expect("embedded node template is JSON");
    let arch = v["metadata"]["labels"]["kubernetes.io/arch"].as_str().unwrap_or("amd64").to_string();
    let instance_type = if arch == "arm64" { "m7g.8xlarge" } else { "m6i.8xlarge" };
    let dropped = |k: &str| k == "node-role.kubernetes.io/control-plane" || k == "node.kubernetes.io/exclude-from-external-load-balancers" || k.starts_with("minikube.k8s.io/");

    let meta = v["metadata"].as_object_mut().expect("node template has metadata");
    meta.shift_remove("resourceVersion");
    meta.shift_remove("selfLink");
    let labels = meta["labels"].as_object_mut().expect("node template has labels");
    labels.retain(|k, _| !dropped(k));
    labels.insert("node-role.kubernetes.io/worker".into(), Value::from(""));
    labels.insert("node.kubernetes.io/instance-type".into(), Value::from(instance_type));
    labels.insert("topology.kubernetes.io/region".into(), Value::from(""));
    labels.insert("topology.kubernetes.io/zone".into(), Value::from(""));
    labels.sort_keys();

    let mut cidr_mf = None;
    if let Some(mf) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
        let role_owner = mf.iter().position(|e| e["manager"] == "kubectl-label").or_else(|| mf.iter().position(|e| e["manager"] == "kubeadm"));
        for (i, e) in mf.iter_mut().enumerate() {
            let is_kubelet_spec = e["manager"] == "kubelet" && e.get("subresource").is_none();
            let fields = e["fieldsV1"].as_object_mut().expect("fieldsV1 is an object");
            if let Some(fm) = fields.get_mut("f:metadata").and_then(Value::as_object_mut) {
                if let Some(l) = fm.get_mut("f:labels").and_then(Value::as_object_mut) {
                    l.retain(|k, _| !k.strip_prefix("f:").is_some_and(dropped));
                }
            }
            let mut add = Vec::new();
            if is_kubelet_spec {
                add.extend(["f:node.kubernetes.io/instance-type", "f:topology.kubernetes.io/region", "f:topology.kubernetes.io/zone"]);
            }
            if Some(i) == role_owner {
                add.push("f:node-role.kubernetes.io/worker");
            }
            if !add.is_empty() {
                let fm = fields.entry("f:metadata").or_insert_with(|| json!({}));
                let l = fm.as_object_mut().expect("f:metadata is an object");
                let l = l.entry("f:labels").or_insert_with(|| json!({}));
                let l = l.as_object_mut().expect("f:labels is an object");
                for k in add {
                    l.insert(k.into(), json!({}));
                }
                l.sort_keys();
            }
            if let Some(fm) = fields.get_mut("f:metadata").and_then(Value::as_object_mut) {
                if fm.get("f:labels").and_then(Value::as_object).is_some_and(|l| l.is_empty()) {
                    fm.shift_remove("f:labels");
                }
            }
            if fields.get("f:metadata").and_then(Value::as_object).is_some_and(|m| m.is_empty()) {
                fields.shift_remove("f:metadata");
            }
            if let Some(fs) = fields.get_mut("f:spec").and_then(Value::as_object_mut) {
                fs.shift_remove("f:taints");
                if fs.contains_key("f:podCIDRs") {
                    cidr_mf = Some(i);
                }
            }
        }
    }

    if let Some(spec) = v["spec"].as_object_mut() {
        spec.shift_remove("taints");
    }
    let status = v["status"].as_object_mut().expect("node template has status");
    for (key, cpu, storage, memory) in [("capacity", "32", "203056560Ki", "131886620Ki"), ("allocatable", "31850m", "186130677487", "128364572Ki")] {
        let r = status[key].as_object_mut().expect("node resources are an object");
        r.insert("cpu".into(), Value::from(cpu));
        r.insert("ephemeral-storage".into(), Value::from(storage));
        r.insert("memory".into(), Value::from(memory));
    }
    let info = status["nodeInfo"].as_object_mut().expect("node template has nodeInfo");
    info.insert("kubeletVersion".into(), Value::from(KUBELET_VERSION));
    info.insert("kubeProxyVersion".into(), Value::from(KUBELET_VERSION));

    NodeTpl { value: v, cidr_mf }
}

// ---------------------------------------------------------------------------------------------
// Namespaces
// ---------------------------------------------------------------------------------------------

const DOMAINS: &[&str] = &[
    "payments",
    "checkout",
    "orders",
    "ledger",
    "search",
    "catalog",
    "inventory",
    "billing",
    "identity",
    "auth",
    "notifications",
    "shipping",
    "pricing",
    "recommendations",
    "analytics",
    "reporting",
    "gateway",
    "profiles",
    "cart",
    "fraud",
    "risk",
    "loyalty",
    "messaging",
    "media",
    "accounts",
    "onboarding",
    "support",
    "logistics",
    "marketing",
    "partners",
    "compliance",
    "tax",
    "invoicing",
    "subscriptions",
    "reviews",
    "geo",
    "maps",
    "ads",
    "feeds",
    "chat",
];
const ML_WORDS: &[&str] = &["batch", "training", "inference", "features", "notebooks", "pipelines", "eval", "labeling"];
const DATA_WORDS: &[&str] = &["ingest", "etl", "lake", "warehouse", "streaming", "quality", "lineage"];
const PLATFORM_WORDS: &[&str] = &["observability", "ingress", "logging", "ci", "registry", "secrets", "mesh", "dns", "backup", "policy"];
const ENVS: &[&str] = &["prod", "staging", "dev", "qa", "canary", "sandbox"];
const WEB_ROLES: &[&str] = &["web", "frontend", "ui", "portal", "edge", "static"];
const WORKER_ROLES: &[&str] = &["api", "worker", "consumer", "agent", "service", "sync", "processor", "scheduler", "indexer"];
const JOB_TASKS: &[&str] = &["report", "migrate", "backup", "export", "reindex", "cleanup", "train", "rollup"];
const DAEMONSETS: &[&str] = &["kindnet", "node-exporter", "fluent-bit"];
const SYSTEM_DEPLOYMENTS: &[&str] = &["coredns", "metrics-server", "kube-state-metrics", "cluster-autoscaler", "external-dns", "ebs-csi-controller", "cert-manager", "aws-load-balancer-controller"];

fn pick<'a, R: Rng + ?Sized>(rng: &mut R, words: &[&'a str]) -> &'a str {
    words[rng.random_range(0..words.len())]
}

/// Namespace names of the cluster, in Zipf rank order (index 0 is the most populated): first
/// `namespaces - 2` generated team namespaces (`team-payments-3`, `ml-batch-17`,
/// `data-ingest-4`, `platform-observability`, `checkout-prod`, …, all distinct DNS labels), then
/// `kube-system`, then `default`. Always at least those two. Depends only on `seed` and
/// `namespaces` (not on the cluster name), as federated clusters share namespaces.
pub fn namespace_names(cfg: &GenConfig) -> Vec<String> {
    let generated = cfg.namespaces.saturating_sub(2);
    let mut rng = StdRng::seed_from_u64(mix(cfg.seed, STREAM_NAMESPACES));
    let mut seen: HashSet<String> = ["kube-system", "default"].iter().map(|s| s.to_string()).collect();
    let mut names = Vec::with_capacity(generated + 2);
    while names.len() < generated {
        let mut name = String::new();
        for _attempt in 0..20 {
            let r: u32 = rng.random_range(0..100);
            name = match r {
                0..40 => format!("team-{}-{}", pick(&mut rng, DOMAINS), rng.random_range(1..=40)),
                40..55 => format!("ml-{}-{}", pick(&mut rng, ML_WORDS), rng.random_range(1..=40)),
                55..70 => format!("data-{}-{}", pick(&mut rng, DATA_WORDS), rng.random_range(1..=20)),
                70..80 => format!("platform-{}", pick(&mut rng, PLATFORM_WORDS)),
                _ => format!("{}-{}", pick(&mut rng, DOMAINS), pick(&mut rng, ENVS)),
            };
            if !seen.contains(&name) {
                break;
            }
        }
        if seen.contains(&name) {
            name = format!("{name}-{}", names.len());
        }
        seen.insert(name.clone());
        names.push(name);
    }
    names.push("kube-system".to_string());
    names.push("default".to_string());
    names
}

/// Zipf weights of `n` ranks: weight of rank `k` (1-based, index `k - 1`) is `1 / k^s`,
/// normalised to sum to 1; non-increasing. `s = 0` (or negative / NaN) gives uniform weights;
/// `n = 0` gives an empty vector.
pub fn namespace_weights(n: usize, s: f64) -> Vec<f64> {
    let s = if s.is_finite() && s > 0.0 { s } else { 0.0 };
    let raw: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-s)).collect();
    let sum: f64 = raw.iter().sum();
    raw.into_iter().map(|w| w / sum).collect()
}

/// Splits `total` items over `weights` exactly (largest-remainder rounding, ties to the lower
/// index): the result sums to `total` and entry `i` is within 1 of `total × weights[i] / Σw`.
pub fn namespace_quotas(total: usize, weights: &[f64]) -> Vec<usize> {
    let sum: f64 = weights.iter().sum();
    if weights.is_empty() || sum <= 0.0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<f64> = weights.iter().map(|w| total as f64 * w / sum).collect();
    let mut quotas: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let assigned: usize = quotas.iter().sum();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        let fa = exact[a] - exact[a].floor();
        let fb = exact[b] - exact[b].floor();
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for &i in order.iter().cycle().take(total.saturating_sub(assigned)) {
        quotas[i] += 1;
    }
    quotas
}

/// Samples ranks `0..n` with probability proportional to given weights (e.g. Zipf weights from
/// [`namespace_weights`]), by binary search over the cumulative distribution.
#[derive(Clone, Debug)]
pub struct ZipfSampler {
    cdf: Vec<f64>,
}

impl ZipfSampler {
    /// Sampler over `n` ranks with Zipf exponent `s` (see [`namespace_weights`]).
    pub fn new(n: usize, s: f64) -> Self {
        Self::from_weights(&namespace_weights(n, s))
    }

    /// Sampler over arbitrary non-negative weights (they need not sum to 1).
    pub fn from_weights(weights: &[f64]) -> Self {
        let mut acc = 0.0;
        let cdf = weights
            .iter()
            .map(|w| {
                acc += w.max(0.0);
                acc
            })
            .collect();
        ZipfSampler { cdf }
    }

    /// Number of ranks.
    pub fn len(&self) -> usize {
        self.cdf.len()
    }

    /// True if there are no ranks to sample.
    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }

    /// A rank in `0..len()`; panics if the sampler is empty.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let total = *self.cdf.last().expect("ZipfSampler::sample on an empty sampler");
        let x = rng.random::<f64>() * total;
        self.cdf.partition_point(|&c| c <= x).min(self.cdf.len() - 1)
    }
}

// ---------------------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------------------

/// Creation time of node `index` (Unix seconds): spread over the hour after [`EPOCH_UNIX`].
fn node_created(cfg: &GenConfig, index: usize) -> i64 {
    let spread = (index as u64 * 3600 / cfg.nodes.max(1) as u64).min(3599);
    EPOCH_UNIX + spread as i64 + (mix(cfg.salt() ^ STREAM_NODE_TIME, index as u64) % 3) as i64
}

/// Node `index` of the cluster as a `v1` Node object (JSON, no `resourceVersion`).
///
/// Derived from the two captured node templates (amd64 for three of four indexes, arm64 for
/// every fourth): name [`GenConfig::node_name`], random v4 uid, labels `kubernetes.io/hostname`,
/// `topology.kubernetes.io/zone`/`region`, `node.kubernetes.io/instance-type` and
/// `node-role.kubernetes.io/worker`, InternalIP [`GenConfig::node_internal_ip`], podCIDR
/// [`GenConfig::node_pod_cidr`], capacity 32 cpu / ~128 GiB / [`GenConfig::node_pod_capacity`]
/// pods, conditions with Ready True and heartbeats shortly before [`NOW_UNIX`], nodeInfo with
/// [`KUBELET_VERSION`] and unique bootID/machineID/systemUUID, image list of the template, and
/// managedFields adjusted to all of it.
pub fn node(cfg: &GenConfig, index: usize) -> Value {
    let tpl = &templates().nodes[if index % 4 == 3 { 1 } else { 0 }];
    let mut v = tpl.value.clone();
    let mut rng = StdRng::seed_from_u64(mix(cfg.salt() ^ STREAM_NODE, index as u64));
    let name = cfg.node_name(index);
    let created = node_created(cfg, index);
    let ready = created + rng.random_range(20..=60);
    let heartbeat = NOW_UNIX - rng.random_range(0..=40);
    let (net, prefix) = cfg.node_pod_cidr(index);
    let cidr = format!("{net}/{prefix}");
    let ip = cfg.node_internal_ip(index).to_string();
    let uid = uuid_v4(&mut rng);
    let boot_id = uuid_v4(&mut rng);
    let machine_id = random_hex(&mut rng, 16);
    let system_uuid = uuid_v4(&mut rng);
    let ts_created = format_time(created);

    let meta = v["metadata"].as_object_mut().expect("node metadata");
    meta.insert("name".into(), Value::from(name.as_str()));
    meta.insert("uid".into(), Value::from(uid));
    meta.insert("creationTimestamp".into(), Value::from(ts_created.as_str()));
    let labels = meta["labels"].as_object_mut().expect("node labels");
    labels.insert("kubernetes.io/hostname".into(), Value::from(name.as_str()));
    labels.insert("topology.kubernetes.io/region".into(), Value::from(cfg.region.as_str()));
    labels.insert("topology.kubernetes.io/zone".into(), Value::from(cfg.zone.as_str()));
    if let Some(mf) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
        for (i, e) in mf.iter_mut().enumerate() {
            let t = match (e["manager"].as_str(), e.get("subresource").is_some()) {
                (Some("kubelet"), true) => heartbeat,
                (Some("kubelet"), false) => created,
                (Some("kubeadm"), _) => created + 3,
                (Some("kubectl-label"), _) => created + 4,
                (Some("kube-controller-manager"), _) => ready,
                _ => ready + 4,
            };
            e["time"] = Value::from(format_time(t));
            if Some(i) == tpl.cidr_mf {
                let mut m = Map::new();
                m.insert(".".into(), json!({}));
                m.insert(format!("v:\"{cidr}\""), json!({}));
                e["fieldsV1"]["f:spec"]["f:podCIDRs"] = Value::Object(m);
            }
        }
    }

    let spec = v["spec"].as_object_mut().expect("node spec");
    spec.insert("podCIDR".into(), Value::from(cidr.as_str()));
    spec.insert("podCIDRs".into(), json!([cidr]));
    if spec.contains_key("providerID") {
        spec.insert("providerID".into(), Value::from(format!("fedsim://{}/{}", cfg.cluster, name)));
    }

    let status = v["status"].as_object_mut().expect("node status");
    status.insert("addresses".into(), json!([{ "address": ip, "type": "InternalIP" }, { "address": name, "type": "Hostname" }]));
    let pods = cfg.node_pod_capacity().to_string();
    status["capacity"]["pods"] = Value::from(pods.as_str());
    status["allocatable"]["pods"] = Value::from(pods);
    let (ts_ready, ts_hb) = (format_time(ready), format_time(heartbeat));
    let ts_pressure = format_time(created - 1);
    let ts_net = format_time(ready - 2);
    if let Some(conds) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds.iter_mut() {
            let (hb, tr) = match c["type"].as_str() {
                Some("Ready") => (&ts_hb, &ts_ready),
                Some("NetworkUnavailable") => (&ts_net, &ts_net),
                _ => (&ts_hb, &ts_pressure),
            };
            c["lastHeartbeatTime"] = Value::from(hb.as_str());
            c["lastTransitionTime"] = Value::from(tr.as_str());
        }
    }
    let info = &mut status["nodeInfo"];
    info["bootID"] = Value::from(boot_id);
    info["machineID"] = Value::from(machine_id);
    info["systemUUID"] = Value::from(system_uuid);
    v
}

// ---------------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------------

/// A controller that owns generated pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerInfo {
    /// Controller kind.
    pub kind: OwnerKind,
    /// Controller name (ReplicaSet `<deployment>-<hash>`, StatefulSet, DaemonSet or Job name).
    pub name: String,
    /// Namespace of the controller and its pods.
    pub namespace: String,
    /// Controller uid (v4-shaped), as in the pods' `ownerReferences`.
    pub uid: String,
    /// Value of the pods' `app` label.
    pub app: String,
    /// Template its pods are derived from.
    pub template: PodTemplate,
    /// Number of its pods in the initial population.
    pub initial_pods: usize,
    /// Index of its first pod in the initial population; its pods are contiguous.
    pub first_pod: usize,
}

struct Owner {
    info: OwnerInfo,
    /// How to rebuild the pod prototype (see [`Owner::proto`]): held instead of the prototype
    /// itself, which is a full pod (~20 KB decoded) per owner.
    recipe: OwnerRecipe,
    generate_name: String,
    /// Key of the permutation that turns pod ordinals into unique 5-character suffixes.
    suffix_key: u64,
    created: i64,
}

/// The inputs of [`make_owner`] for one owner, with the planning RNG as it was before the
/// call: replaying them rebuilds the same prototype byte for byte.
struct OwnerRecipe {
    rng: StdRng,
    base_name: String,
    domain: &'static str,
}

impl Owner {
    /// Pod with every owner-level field set (labels, owner reference, generateName, …),
    /// rebuilt from the recipe (costs about one clone of the template).
    fn proto(&self) -> Value {
        let r = &self.recipe;
        build_owner(&mut r.rng.clone(), &self.info.namespace, self.info.template, &r.base_name, &self.info.app, r.domain, self.info.initial_pods).1
    }

    fn pod_name(&self, ordinal: u64) -> String {
        match self.info.kind {
            OwnerKind::StatefulSet => format!("{}-{}", self.info.name, ordinal),
            _ => format!("{}{}", self.generate_name, suffix_for(self.suffix_key, ordinal)),
        }
    }
}

/// Kind of change [`PodGenerator::modify_with`] applies to a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Churn {
    /// Ready → not ready (one container unready, Ready/ContainersReady False with reason
    /// `ContainersNotReady`), or not ready → ready again.
    ReadinessFlip,
    /// Sets label [`CHURN_LABEL`] to the next counter value (managed by [`CHURN_MANAGER`]).
    LabelChange,
    /// One container restarts: `restartCount + 1`, `lastState.terminated`, new containerID.
    Restart,
}

/// Per-pod placement decided by the plan.
struct Slot {
    node: u32,
    ip: Ipv4Addr,
}

/// Generates the pods of one simulated cluster: the initial population (random access by index,
/// or [`PodGenerator::initial_pods`]) and, for churn, modified copies of pods and new pods.
///
/// The initial population has [`GenConfig::total_pods`] pods laid out owner by owner: first
/// `min(3, pods_per_node / 15)` DaemonSets in `kube-system` with one pod per node, then
/// ReplicaSets (~70 % of owners, 1–300 pods), Jobs (~18 %, 1–60 pods) and StatefulSets
/// (~12 %, 1–10 pods), filling each namespace's exact Zipf quota ([`namespace_quotas`] of
/// [`namespace_weights`] in [`namespace_names`] order; `kube-system` gets system Deployments
/// such as `coredns`). Pods are placed on shuffled node slots so each node holds exactly
/// `pods_per_node`, and get IPs in their node's pod CIDR (host-network DaemonSet pods share the
/// node IP, as in real clusters; all other pod IPs are unique). Pods of one owner share labels
/// and spec. Same config ⇒ identical pods; churn is deterministic for the same sequence of calls.
pub struct PodGenerator {
    plan: std::sync::Arc<PodPlan>,
    /// Next ordinal of each owner for a pod created by churn.
    next_ordinal: Vec<u64>,
    /// Next host offset in each node's pod CIDR, for pods created by churn.
    next_ip: Vec<u32>,
    /// Cumulative initial sizes of the owners churn may create pods for, and their indexes.
    churn_cum: Vec<u64>,
    churn_owners: Vec<usize>,
    churn_rng: StdRng,
    clock: i64,
    label_counter: u64,
}

/// The immutable part of a [`PodGenerator`]: owners and placement of the initial population.
/// Every initial pod is a pure function of it and its index, so it can be shared (`Arc`)
/// between the churn (which owns the generator) and a store that renders pods on read
/// ([`super::overlay`]). About 8 bytes per pod plus ~0.5 KB per owner.
pub struct PodPlan {
    cfg: GenConfig,
    namespaces: Vec<String>,
    owners: Vec<Owner>,
    slots: Vec<Slot>,
    pod_salt: u64,
}

impl std::ops::Deref for PodGenerator {
    type Target = PodPlan;
    fn deref(&self) -> &PodPlan {
        &self.plan
    }
}

impl PodGenerator {
    /// The shared plan of the initial population.
    pub fn plan(&self) -> std::sync::Arc<PodPlan> {
        self.plan.clone()
    }

    /// Plans the cluster's owners and pod placement (cheap: no pod JSON is built yet).
    pub fn new(cfg: &GenConfig) -> Self {
        let cfg = cfg.clone();
        let salt = cfg.salt();
        let mut rng = StdRng::seed_from_u64(mix(salt, STREAM_PLAN));
        let namespaces = namespace_names(&cfg);
        let kube_system = namespaces.len() - 2;
        let mut owners: Vec<Owner> = Vec::new();
        let mut used: HashSet<(usize, String)> = HashSet::new();

        let ds_count = if cfg.nodes == 0 { 0 } else { (cfg.pods_per_node / 15).min(DAEMONSETS.len()) };
        for (d, &ds) in DAEMONSETS.iter().enumerate().take(ds_count) {
            used.insert((kube_system, ds.to_string()));
            let created = EPOCH_UNIX + 60 + 10 * d as i64;
            owners.push(make_owner(&mut rng, &namespaces[kube_system], PodTemplate::Nri, ds, ds, "", created, cfg.nodes));
        }

        let per_node = cfg.pods_per_node - ds_count;
        let quotas = namespace_quotas(cfg.nodes * per_node, &namespace_weights(namespaces.len(), cfg.namespace_skew));
        for (ns, &quota) in quotas.iter().enumerate() {
            let mut left = quota;
            while left > 0 {
                let template = match rng.random_range(0..100) {
                    0..35 => PodTemplate::Backstage,
                    35..70 => PodTemplate::PortDocs,
                    // kube-system runs only system Deployments besides its DaemonSets.
                    _ if ns == kube_system => PodTemplate::PortDocs,
                    70..88 => PodTemplate::RetrieveJob,
                    _ => PodTemplate::Insights,
                };
                let max = match template {
                    PodTemplate::RetrieveJob => 60,
                    PodTemplate::Insights => 10,
                    _ => 300,
                };
                let size = log_uniform(&mut rng, max).min(left);
                left -= size;
                let domain = pick(&mut rng, DOMAINS);
                let base = unique_name(&mut rng, &mut used, ns, |rng| match template {
                    _ if ns == kube_system => pick(rng, SYSTEM_DEPLOYMENTS).to_string(),
                    PodTemplate::Backstage => format!("{domain}-{}", pick(rng, WEB_ROLES)),
                    PodTemplate::PortDocs => format!("{domain}-{}", pick(rng, WORKER_ROLES)),
                    PodTemplate::RetrieveJob => format!("{domain}-{}", pick(rng, JOB_TASKS)),
                    _ => format!("prometheus-{domain}"),
                });
                let created = match template {
                    PodTemplate::RetrieveJob => rng.random_range(NOW_UNIX - 2 * 86_400..NOW_UNIX - 600),
                    _ => rng.random_range(EPOCH_UNIX + 7_200..NOW_UNIX - 3_600),
                };
                let (name, app) = match template {
                    // CronJob-style: `<cronjob>-<scheduled minute since the Unix epoch>`.
                    PodTemplate::RetrieveJob => (format!("{base}-{}", created / 60), base),
                    PodTemplate::Insights => (base, "prometheus".to_string()),
                    _ => (base.clone(), base),
                };
                owners.push(make_owner(&mut rng, &namespaces[ns], template, &name, &app, domain, created, size));
            }
        }

        // Placement: DaemonSet pod k on node k; the rest on shuffled per-node slots.
        let mut node_of: Vec<u32> = (0..cfg.nodes as u32).flat_map(|n| std::iter::repeat_n(n, per_node)).collect();
        node_of.shuffle(&mut rng);
        let mut next_free = node_of.iter();
        let mut next_ip = vec![2u32; cfg.nodes];
        let mut slots = Vec::with_capacity(cfg.total_pods());
        let mut first = 0;
        for o in owners.iter_mut() {
            o.info.first_pod = first;
            first += o.info.initial_pods;
            let host_network = templates().pods[o.info.template.index()].host_network;
            for k in 0..o.info.initial_pods {
                let node = if o.info.kind == OwnerKind::DaemonSet { k as u32 } else { *next_free.next().expect("one slot per non-DaemonSet pod") };
                let ip = if host_network {
                    cfg.node_internal_ip(node as usize)
                } else {
                    let (net, _) = cfg.node_pod_cidr(node as usize);
                    let off = next_ip[node as usize];
                    next_ip[node as usize] += 1;
                    Ipv4Addr::from(u32::from(net) + off)
                };
                slots.push(Slot { node, ip });
            }
        }

        let mut churn_cum = Vec::new();
        let mut churn_owners = Vec::new();
        let mut acc = 0u64;
        for (i, o) in owners.iter().enumerate() {
            if o.info.kind != OwnerKind::DaemonSet {
                acc += o.info.initial_pods.max(1) as u64;
                churn_cum.push(acc);
                churn_owners.push(i);
            }
        }

        let next_ordinal = owners.iter().map(|o| o.info.initial_pods as u64).collect();
        PodGenerator {
            plan: std::sync::Arc::new(PodPlan { namespaces, owners, slots, pod_salt: mix(salt, STREAM_POD), cfg }),
            next_ordinal,
            next_ip,
            churn_cum,
            churn_owners,
            churn_rng: StdRng::seed_from_u64(mix(salt, STREAM_CHURN)),
            clock: NOW_UNIX,
            label_counter: 0,
        }
    }
}

impl PodPlan {
    /// The configuration this generator was built from.
    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    /// Namespace names in Zipf rank order (see [`namespace_names`]).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// The owners of the initial population, in pod order.
    pub fn owners(&self) -> impl ExactSizeIterator<Item = &OwnerInfo> + '_ {
        self.owners.iter().map(|o| &o.info)
    }

    /// Number of pods in the initial population ([`GenConfig::total_pods`]).
    pub fn initial_len(&self) -> usize {
        self.slots.len()
    }

    /// Owner of initial pod `index`; panics if `index >= initial_len()`.
    pub fn owner_of(&self, index: usize) -> &OwnerInfo {
        &self.owners[self.owner_index(index)].info
    }

    /// Node index that initial pod `index` runs on; panics if `index >= initial_len()`.
    pub fn node_of(&self, index: usize) -> usize {
        self.slots[index].node as usize
    }

    /// Node `index` as JSON (same as the free function [`node`]).
    pub fn node(&self, index: usize) -> Value {
        node(&self.cfg, index)
    }

    /// All nodes of the cluster, in index order.
    pub fn nodes(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.cfg.nodes).map(|i| node(&self.cfg, i))
    }

    /// Initial pod `index` (`0..initial_len()`) as a `v1` Pod (JSON, no `resourceVersion`):
    /// phase Running, all conditions True, containers running/ready/started with 0 restarts,
    /// unique name, uid, containerIDs and pod IP; depends only on the config and `index`.
    /// Panics if `index >= initial_len()`.
    pub fn initial_pod(&self, index: usize) -> Value {
        let oi = self.owner_index(index);
        let owner = &self.owners[oi];
        let ordinal = (index - owner.info.first_pod) as u64;
        let slot = &self.slots[index];
        let mut rng = StdRng::seed_from_u64(mix(self.pod_salt, index as u64));
        let created = match owner.info.kind {
            OwnerKind::StatefulSet => owner.created + 25 * ordinal as i64 + rng.random_range(0..5),
            OwnerKind::DaemonSet => owner.created.max(node_created(&self.cfg, slot.node as usize)) + rng.random_range(5..40),
            _ => owner.created + rng.random_range(0..=300),
        };
        self.render(oi, ordinal, slot.node as usize, slot.ip, created, &mut rng)
    }

    /// The whole initial population, in index order.
    pub fn initial_pods(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.initial_len()).map(|i| self.initial_pod(i))
    }

    /// Namespace and name of initial pod `index` without rendering it (cheap: no JSON).
    /// Panics if `index >= initial_len()`.
    pub fn initial_pod_name(&self, index: usize) -> (&str, String) {
        let owner = &self.owners[self.owner_index(index)];
        (&owner.info.namespace, owner.pod_name((index - owner.info.first_pod) as u64))
    }

    fn owner_index(&self, index: usize) -> usize {
        assert!(index < self.slots.len(), "pod index {index} out of range");
        self.owners.partition_point(|o| o.info.first_pod <= index) - 1
    }
}

impl PodGenerator {
    /// Current churn clock (Unix seconds); starts at [`NOW_UNIX`] and advances one second per
    /// churn call. Times written by churn come from it.
    pub fn clock(&self) -> i64 {
        self.clock
    }

    /// Sets the churn clock (Unix seconds), e.g. to wall-clock time.
    pub fn set_clock(&mut self, unix_secs: i64) {
        self.clock = unix_secs;
    }

    /// A new pod for churn creation: a further replica of an existing non-DaemonSet owner
    /// (chosen with probability proportional to its initial size, so namespace skew holds), on a
    /// random node, with the next free IP of that node's CIDR (round-robin, as host-local IPAM
    /// does), created at the churn clock. Its name is new for its owner (never reused).
    /// `None` if the cluster has no such owner (no nodes, or only DaemonSet pods).
    pub fn new_pod(&mut self) -> Option<Value> {
        let total = *self.churn_cum.last()?;
        let r = self.churn_rng.random_range(0..total);
        let oi = self.churn_owners[self.churn_cum.partition_point(|&c| c <= r)];
        let node = self.churn_rng.random_range(0..self.cfg.nodes);
        let host_network = templates().pods[self.owners[oi].info.template.index()].host_network;
        let ip = if host_network {
            self.cfg.node_internal_ip(node)
        } else {
            let (net, prefix) = self.cfg.node_pod_cidr(node);
            let size = 1u32 << (32 - prefix as u32);
            let off = self.next_ip[node];
            self.next_ip[node] = if off + 1 >= size - 1 { 2 } else { off + 1 };
            Ipv4Addr::from(u32::from(net) + off)
        };
        let ordinal = self.next_ordinal[oi];
        self.next_ordinal[oi] += 1;
        let created = self.tick();
        let mut rng = StdRng::seed_from_u64(self.churn_rng.random());
        Some(self.render(oi, ordinal, node, ip, created, &mut rng))
    }

    /// A modified copy of `pod` for churn, with a change picked at random: readiness flip
    /// (50 %), label change (25 %) or container restart (25 %). See [`PodGenerator::modify_with`].
    pub fn modify(&mut self, pod: &Value) -> Value {
        let kind = match self.churn_rng.random_range(0..4) {
            0 | 1 => Churn::ReadinessFlip,
            2 => Churn::LabelChange,
            _ => Churn::Restart,
        };
        self.modify_with(pod, kind)
    }

    /// A copy of `pod` with one [`Churn`] change applied at the churn clock (which advances one
    /// second); the kubelet's (or churn manager's) managedFields time is updated too. Fields
    /// missing from `pod` are tolerated: the change then touches what exists.
    pub fn modify_with(&mut self, pod: &Value, kind: Churn) -> Value {
        let now = self.tick();
        let ts = format_time(now);
        let mut v = pod.clone();
        match kind {
            Churn::ReadinessFlip => self.flip_readiness(&mut v, &ts),
            Churn::LabelChange => {
                self.label_counter += 1;
                set_churn_label(&mut v, &self.label_counter.to_string(), &ts);
            }
            Churn::Restart => self.restart_container(&mut v, now),
        }
        if kind != Churn::LabelChange {
            touch_kubelet_fields(&mut v, &ts);
        }
        v
    }

    fn tick(&mut self) -> i64 {
        self.clock += 1;
        self.clock
    }

    fn flip_readiness(&mut self, v: &mut Value, ts: &str) {
        let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) else {
            return;
        };
        let ready = status.get("conditions").and_then(Value::as_array).and_then(|cs| cs.iter().find(|c| c["type"] == "Ready")).is_none_or(|c| c["status"] == "True");
        let names: Vec<String> = status.get("containerStatuses").and_then(Value::as_array).map(|cs| cs.iter().filter_map(|c| c["name"].as_str().map(str::to_string)).collect()).unwrap_or_default();
        let unready = if ready && !names.is_empty() { Some(names[self.churn_rng.random_range(0..names.len())].clone()) } else { None };
        if let Some(css) = status.get_mut("containerStatuses").and_then(Value::as_array_mut) {
            for cs in css.iter_mut().filter_map(Value::as_object_mut) {
                let is_unready = unready.is_some() && cs.get("name").and_then(Value::as_str) == unready.as_deref();
                cs.insert("ready".into(), Value::Bool(!is_unready));
            }
        }
        if let Some(conds) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in conds.iter_mut().filter_map(Value::as_object_mut) {
                let ty = c.get("type").and_then(Value::as_str).unwrap_or("");
                if ty != "Ready" && ty != "ContainersReady" {
                    continue;
                }
                c.insert("lastTransitionTime".into(), Value::from(ts));
                if ready {
                    let list = unready.as_deref().unwrap_or("");
                    c.insert("message".into(), Value::from(format!("containers with unready status: [{list}]")));
                    c.insert("reason".into(), Value::from("ContainersNotReady"));
                    c.insert("status".into(), Value::from("False"));
                } else {
                    c.shift_remove("message");
                    c.shift_remove("reason");
                    c.insert("status".into(), Value::from("True"));
                }
            }
        }
    }

    fn restart_container(&mut self, v: &mut Value, now: i64) {
        let runtime =
            v.pointer("/status/containerStatuses/0/containerID").and_then(Value::as_str).and_then(|id| id.split_once("://")).map(|(rt, _)| rt.to_string()).unwrap_or_else(|| "containerd".to_string());
        let Some(css) = v.pointer_mut("/status/containerStatuses").and_then(Value::as_array_mut) else {
            return;
        };
        if css.is_empty() {
            return;
        }
        let i = self.churn_rng.random_range(0..css.len());
        let Some(cs) = css[i].as_object_mut() else {
            return;
        };
        let old_id = cs.get("containerID").cloned().unwrap_or(Value::from(""));
        let old_start = cs.get("state").and_then(|s| s.pointer("/running/startedAt")).cloned().unwrap_or_else(|| Value::from(format_time(now - 60)));
        let (code, reason) = if self.churn_rng.random_bool(0.3) { (137, "OOMKilled") } else { (1, "Error") };
        let restarts = cs.get("restartCount").and_then(Value::as_u64).unwrap_or(0) + 1;
        cs.insert(
            "lastState".into(),
            json!({ "terminated": {
                "containerID": old_id,
                "exitCode": code,
                "finishedAt": format_time(now - 1),
                "reason": reason,
                "startedAt": old_start,
            }}),
        );
        cs.insert("containerID".into(), Value::from(format!("{runtime}://{}", random_hex(&mut self.churn_rng, 32))));
        cs.insert("restartCount".into(), Value::from(restarts));
        cs.insert("started".into(), Value::Bool(true));
        cs.insert("state".into(), json!({ "running": { "startedAt": format_time(now) } }));
    }
}

impl PodPlan {
    /// Builds one pod of owner `oi` from its prototype.
    fn render(&self, oi: usize, ordinal: u64, node: usize, ip: Ipv4Addr, created: i64, rng: &mut StdRng) -> Value {
        let owner = &self.owners[oi];
        let tpl = &templates().pods[owner.info.template.index()];
        let mut v = owner.proto();
        let name = owner.pod_name(ordinal);
        let uid = uuid_v4(rng);
        let node_name = self.cfg.node_name(node);
        let host_ip = self.cfg.node_internal_ip(node).to_string();
        let pod_ip = ip.to_string();

        let start = created + rng.random_range(0..=1);
        let sandbox = created + rng.random_range(1..=3);
        let pulled = created + rng.random_range(2..=20);
        let ncont = v["status"]["containerStatuses"].as_array().map_or(0, Vec::len);
        let started: Vec<i64> = (0..ncont).map(|_| pulled + rng.random_range(0..=2)).collect();
        let ready = started.iter().copied().max().unwrap_or(pulled) + rng.random_range(1..=10);
        let (ts_created, ts_start, ts_sandbox, ts_ready) = (format_time(created), format_time(start), format_time(sandbox), format_time(ready));

        let meta = v["metadata"].as_object_mut().expect("pod metadata");
        meta.insert("name".into(), Value::from(name.as_str()));
        meta.insert("uid".into(), Value::from(uid));
        meta.insert("creationTimestamp".into(), Value::from(ts_created.as_str()));
        if owner.info.kind == OwnerKind::StatefulSet {
            if let Some(l) = meta.get_mut("labels").and_then(Value::as_object_mut) {
                if l.contains_key("statefulset.kubernetes.io/pod-name") {
                    l.insert("statefulset.kubernetes.io/pod-name".into(), Value::from(name.as_str()));
                }
            }
        }
        if let (Some(old_ip), Some(ann)) = (tpl.old_pod_ip.as_deref(), meta.get_mut("annotations").and_then(Value::as_object_mut)) {
            for a in ann.values_mut() {
                if let Some(s) = a.as_str().filter(|s| s.contains(old_ip)) {
                    *a = Value::from(s.replace(old_ip, &pod_ip));
                }
            }
        }
        if let Some(mf) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
            for (i, e) in mf.iter_mut().enumerate() {
                let is_kubelet = Some(i) == tpl.kubelet_mf;
                e["time"] = Value::from(if is_kubelet { ts_ready.as_str() } else { ts_created.as_str() });
                if is_kubelet {
                    e["fieldsV1"]["f:status"]["f:podIPs"] = pod_ips_fields(&pod_ip);
                }
            }
        }

        let spec = &mut v["spec"];
        spec["nodeName"] = Value::from(node_name.as_str());
        if owner.info.kind == OwnerKind::StatefulSet && spec.get("hostname").is_some() {
            spec["hostname"] = Value::from(name.as_str());
        }
        if let Some(values) = spec.pointer_mut("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values") {
            *values = json!([node_name]);
        }
        if let Some(old) = tpl.api_access_volume.as_deref() {
            let new = format!("kube-api-access-{}", random_suffix(rng, 5));
            rename_volume(spec, old, &new);
        }

        let status = v["status"].as_object_mut().expect("pod status");
        if let Some(conds) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in conds.iter_mut() {
                let t = match c["type"].as_str() {
                    Some("Initialized") => &ts_start,
                    Some("PodReadyToStartContainers") => &ts_sandbox,
                    Some("Ready") | Some("ContainersReady") => &ts_ready,
                    _ => &ts_created,
                };
                c["lastTransitionTime"] = Value::from(t.as_str());
            }
        }
        status.insert("hostIP".into(), Value::from(host_ip.as_str()));
        if status.contains_key("hostIPs") {
            status.insert("hostIPs".into(), json!([{ "ip": host_ip }]));
        }
        status.insert("podIP".into(), Value::from(pod_ip.as_str()));
        status.insert("podIPs".into(), json!([{ "ip": pod_ip }]));
        status.insert("startTime".into(), Value::from(ts_start));
        if let Some(css) = status.get_mut("containerStatuses").and_then(Value::as_array_mut) {
            for (cs, &t) in css.iter_mut().zip(&started) {
                cs["containerID"] = Value::from(format!("{}://{}", tpl.runtime, random_hex(rng, 32)));
                cs["state"]["running"]["startedAt"] = Value::from(format_time(t));
            }
        }
        v
    }
}

/// Builds an owner, keeping the recipe of its pod prototype rather than the prototype.
#[allow(clippy::too_many_arguments)]
fn make_owner(rng: &mut StdRng, namespace: &str, template: PodTemplate, name: &str, app: &str, domain: &'static str, created: i64, initial_pods: usize) -> Owner {
    let recipe = OwnerRecipe { rng: rng.clone(), base_name: name.to_string(), domain };
    let (info, _proto, generate_name, suffix_key) = build_owner(rng, namespace, template, name, app, domain, initial_pods);
    Owner { info, recipe, generate_name, suffix_key, created }
}

/// An owner and its pod prototype (all owner-level fields of the template replaced), as
/// `(info, prototype, generateName, suffix key)`; draws from `rng` in a fixed order.
#[allow(clippy::too_many_arguments)]
fn build_owner(rng: &mut StdRng, namespace: &str, template: PodTemplate, name: &str, app: &str, domain: &str, initial_pods: usize) -> (OwnerInfo, Value, String, u64) {
    let kind = template.owner_kind();
    let uid = uuid_v4(rng);
    let hash_len = if rng.random_bool(0.5) { 9 } else { 10 };
    let hash = random_suffix(rng, hash_len);
    let name = match kind {
        OwnerKind::ReplicaSet => format!("{name}-{hash}"),
        _ => name.to_string(),
    };
    let generate_name = format!("{name}-");
    let mut v = templates().pods[template.index()].value.clone();

    let meta = v["metadata"].as_object_mut().expect("pod metadata");
    meta.insert("generateName".into(), Value::from(generate_name.as_str()));
    meta.insert("namespace".into(), Value::from(namespace));
    if let Some(r) = meta.get_mut("ownerReferences").and_then(|r| r.get_mut(0)) {
        r["name"] = Value::from(name.as_str());
        r["uid"] = Value::from(uid.as_str());
    }
    if let Some(mf) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
        for e in mf.iter_mut() {
            if let Some(refs) = e.pointer_mut("/fieldsV1/f:metadata/f:ownerReferences").and_then(Value::as_object_mut) {
                let old = std::mem::take(refs);
                for (k, val) in old {
                    let k = if k.starts_with("k:{\"uid\":") { format!("k:{{\"uid\":\"{uid}\"}}") } else { k };
                    refs.insert(k, val);
                }
            }
        }
    }
    let labels = meta["labels"].as_object_mut().expect("pod labels");
    let mut set = |k: &str, val: &str| {
        if let Some(slot) = labels.get_mut(k) {
            *slot = Value::from(val);
        }
    };
    set("app", app);
    match template {
        PodTemplate::Backstage => {
            set("backstage.io/kubernetes-id", app);
            set("pod-template-hash", &hash);
        }
        PodTemplate::PortDocs => {
            set("app.kubernetes.io/instance", app);
            set("app.kubernetes.io/name", app);
            set("helm.sh/chart", &format!("{app}-0.8.6"));
            set("pod-template-hash", &hash);
        }
        PodTemplate::Insights => {
            set("controller-revision-hash", &format!("{name}-{hash}"));
            set("operator.prometheus.io/name", domain);
            set("prometheus", domain);
        }
        PodTemplate::Nri => {
            set("k8s-app", app);
            set("controller-revision-hash", &hash);
        }
        PodTemplate::RetrieveJob => {
            set("batch.kubernetes.io/controller-uid", &uid);
            set("batch.kubernetes.io/job-name", &name);
            set("controller-uid", &uid);
            set("job-name", &name);
        }
    }

    let spec = &mut v["spec"];
    match template {
        PodTemplate::Backstage => {
            // The legacy per-ServiceAccount token secret of the template.
            let old = spec.pointer("/volumes/0/name").and_then(Value::as_str).map(str::to_string);
            if let Some(old) = old.filter(|o| o.starts_with("default-token-")) {
                let new = format!("default-token-{}", random_suffix(rng, 5));
                rename_volume(spec, &old, &new);
                spec["volumes"][0]["secret"]["secretName"] = Value::from(new);
            }
        }
        PodTemplate::PortDocs => {
            if let Some(env) = spec.pointer_mut("/containers/0/env").and_then(Value::as_array_mut) {
                for e in env.iter_mut() {
                    if let Some(r) = e.pointer_mut("/valueFrom/secretKeyRef/name") {
                        *r = Value::from(app);
                    }
                }
            }
        }
        PodTemplate::Insights => {
            if let Some(ns) = spec.pointer_mut("/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/0/podAffinityTerm/namespaces") {
                *ns = json!([namespace]);
            }
        }
        PodTemplate::Nri => {
            spec["serviceAccount"] = Value::from(app);
            spec["serviceAccountName"] = Value::from(app);
        }
        PodTemplate::RetrieveJob => {}
    }

    let info = OwnerInfo { kind, name, namespace: namespace.to_string(), uid, app: app.to_string(), template, initial_pods, first_pod: 0 };
    (info, v, generate_name, rng.random())
}

/// Draws a name from `gen` that is not yet used in namespace `ns`, recording it.
fn unique_name(rng: &mut StdRng, used: &mut HashSet<(usize, String)>, ns: usize, mut gen: impl FnMut(&mut StdRng) -> String) -> String {
    let mut name = gen(rng);
    for _ in 0..8 {
        if !used.contains(&(ns, name.clone())) {
            break;
        }
        name = gen(rng);
    }
    let base = name.clone();
    let mut n = 2;
    while used.contains(&(ns, name.clone())) {
        name = format!("{base}-{n}");
        n += 1;
    }
    used.insert((ns, name.clone()));
    name
}

/// Size in `1..=max`, log-uniformly distributed (many small owners, a few large ones).
fn log_uniform(rng: &mut StdRng, max: usize) -> usize {
    let x = rng.random::<f64>() * ((max + 1) as f64).ln();
    (x.exp() as usize).clamp(1, max)
}

fn rename_volume(spec: &mut Value, old: &str, new: &str) {
    if let Some(vols) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for vol in vols.iter_mut().filter(|vol| vol["name"] == old) {
            vol["name"] = Value::from(new);
        }
    }
    for key in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut() {
            let Some(ms) = c.get_mut("volumeMounts").and_then(Value::as_array_mut) else {
                continue;
            };
            for m in ms.iter_mut().filter(|m| m["name"] == old) {
                m["name"] = Value::from(new);
            }
        }
    }
}

/// managedFields set for `status.podIPs` with one IP.
fn pod_ips_fields(ip: &str) -> Value {
    let mut m = Map::new();
    m.insert(".".into(), json!({}));
    m.insert(format!("k:{{\"ip\":\"{ip}\"}}"), json!({ ".": {}, "f:ip": {} }));
    Value::Object(m)
}

fn set_churn_label(v: &mut Value, value: &str, ts: &str) {
    let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if let Some(l) = labels.as_object_mut() {
        let fresh = !l.contains_key(CHURN_LABEL);
        l.insert(CHURN_LABEL.into(), Value::from(value));
        if fresh {
            l.sort_keys();
        }
    }
    let Some(mf) = meta.get_mut("managedFields").and_then(Value::as_array_mut) else {
        return;
    };
    if let Some(e) = mf.iter_mut().find(|e| e["manager"] == CHURN_MANAGER) {
        e["time"] = Value::from(ts);
    } else {
        let mut labels = Map::new();
        labels.insert(format!("f:{CHURN_LABEL}"), json!({}));
        mf.push(json!({
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": { "f:metadata": { "f:labels": labels } },
            "manager": CHURN_MANAGER,
            "operation": "Update",
            "time": ts,
        }));
    }
}

fn touch_kubelet_fields(v: &mut Value, ts: &str) {
    let Some(mf) = v.pointer_mut("/metadata/managedFields").and_then(Value::as_array_mut) else {
        return;
    };
    if let Some(e) = mf.iter_mut().find(|e| e["manager"] == "kubelet" && e["fieldsV1"].get("f:status").is_some()) {
        e["time"] = Value::from(ts);
    }
}

// ---------------------------------------------------------------------------------------------
// Small deterministic helpers
// ---------------------------------------------------------------------------------------------

/// RFC 3339 UTC timestamp with second precision (`2025-05-01T00:00:00Z`), as the apiserver
/// writes `metav1.Time`, from Unix seconds.
pub fn format_time(unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs = unix_secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3_600, secs / 60 % 60, secs % 60)
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Combines two 64-bit values into a well-mixed seed.
fn mix(a: u64, b: u64) -> u64 {
    splitmix64(a ^ splitmix64(b))
}

/// FNV-1a hash of a string (stable across platforms and Rust versions).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Random v4 UUID (lowercase, hyphenated) from the given RNG.
fn uuid_v4<R: RngCore + ?Sized>(rng: &mut R) -> String {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    uuid::Builder::from_random_bytes(b).into_uuid().to_string()
}

/// `bytes` random bytes as lowercase hex.
fn random_hex<R: RngCore + ?Sized>(rng: &mut R, bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rng.fill_bytes(&mut b);
    hex::encode(b)
}

fn hex_from_seed(seed: u64, bytes: usize) -> String {
    random_hex(&mut StdRng::seed_from_u64(seed), bytes)
}

/// `len` random characters of the Kubernetes name-suffix alphabet.
fn random_suffix<R: Rng + ?Sized>(rng: &mut R, len: usize) -> String {
    (0..len).map(|_| SUFFIX_ALPHABET[rng.random_range(0..SUFFIX_ALPHABET.len())] as char).collect()
}

/// The 5-character suffix of pod `ordinal` of an owner: a keyed permutation of `0..27^5`, so
/// suffixes look random but never repeat within an owner (for fewer than 27^5 ordinals).
fn suffix_for(key: u64, ordinal: u64) -> String {
    // Cycle-walking a 24-bit Feistel permutation keeps the result a bijection on 0..27^5.
    let mut x = (ordinal % u64::from(SUFFIX_SPACE)) as u32;
    loop {
        let (mut l, mut r) = (x >> 12, x & 0xfff);
        for round in 0..4u64 {
            let f = (mix(key ^ round, u64::from(r)) & 0xfff) as u32;
            (l, r) = (r, l ^ f);
        }
        x = (l << 12) | r;
        if x < SUFFIX_SPACE {
            break;
        }
    }
    let mut out = [0u8; 5];
    for c in out.iter_mut().rev() {
        *c = SUFFIX_ALPHABET[(x % 27) as usize];
        x /= 27;
    }
    String::from_utf8(out.to_vec()).expect("suffix alphabet is ASCII")
}

#[cfg(test)]
mod tests;
