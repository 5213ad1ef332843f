//! Informers over the member's nodes and pods that keep the cluster-status controller's
//! `nodeSummary` and `resourceSummary` current (mirrors karmada-agent, whose cluster status
//! controller reads nodes and pods from informers instead of listing them every round).
//!
//! Each informer is a kube-runtime [`watcher`]: it lists once in pages of [`PAGE`], watches
//! from the last resourceVersion, resumes after interruptions and lists again only after
//! `410 Gone`. Objects are decoded into small partial types ([`PodLite`], [`NodeLite`]) and
//! folded at once into a fixed-size entry per object (its key's 64-bit hash and what it adds
//! to the totals): the member's nodes and pods are never held, and the totals follow every
//! change. A summary is `None` until the first list has completed.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash as _, Hasher as _};

use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::Api;
use kube::core::object::Object;
use kube::core::ApiResource;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt as _;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::quantity::{format_bytes, format_count, format_cpu, parse_milli};

/// Page size of the informers' lists (client-go's and kube-runtime's default).
pub const PAGE: u32 = 500;

/// The fields of a pod's spec that its resource requests need.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecLite {
    /// `spec.nodeName`: empty while the pod is not scheduled.
    #[serde(default)]
    pub node_name: Option<String>,
    /// `spec.containers[]`, only their resources.
    #[serde(default)]
    pub containers: Vec<ContainerLite>,
}

/// A container's `resources.requests`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ContainerLite {
    /// `resources`.
    #[serde(default)]
    pub resources: Option<ResourcesLite>,
}

/// `resources.requests` (limits are not summed).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ResourcesLite {
    /// `requests`, e.g. `{cpu: 250m, memory: 64Mi}`.
    #[serde(default)]
    pub requests: Option<BTreeMap<String, Quantity>>,
}

/// `status.phase` of a pod.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodStatusLite {
    /// `Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`.
    #[serde(default)]
    pub phase: Option<String>,
}

/// A pod decoded only as far as [`PodRequests`] needs.
pub type PodLite = Object<PodSpecLite, PodStatusLite>;

/// A node's spec is not read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeSpecLite {}

/// The fields of a node's status that the summaries need.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeStatusLite {
    /// `status.allocatable`, e.g. `{cpu: "4", memory: 16Gi, pods: "110"}`.
    #[serde(default)]
    pub allocatable: Option<BTreeMap<String, Quantity>>,
    /// `status.conditions[]`, only type and status.
    #[serde(default)]
    pub conditions: Option<Vec<ConditionLite>>,
}

/// `{type, status}` of a condition.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ConditionLite {
    /// `Ready`, `MemoryPressure`, …
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False`, `Unknown`.
    pub status: String,
}

/// A node decoded only as far as [`NodeCapacity`] needs.
pub type NodeLite = Object<NodeSpecLite, NodeStatusLite>;

/// What one object adds to its informer's totals.
pub trait Contribution: Copy + Send + Sync + 'static {
    /// The object type the informer decodes.
    type Object: kube::Resource<DynamicType = ApiResource> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static;
    /// The member resource the informer watches (cluster-wide).
    fn resource() -> ApiResource;
    /// The sum over every object.
    type Totals: Copy + Default + PartialEq + std::fmt::Debug + Send + Sync + 'static;
    /// The object's contribution; `None` when it adds nothing (then it is not kept at all).
    fn of(obj: &Self::Object) -> Option<Self>;
    /// Adds `self` to `t` (`sign` 1) or takes it away (`sign` -1).
    fn apply(self, t: &mut Self::Totals, sign: i128);
}

/// The quantity `key` of `list` (requests, allocatable) in milli-units; 0 when absent,
/// malformed or beyond `i64`.
fn milli(list: Option<&BTreeMap<String, Quantity>>, key: &str) -> i64 {
    list.and_then(|l| l.get(key)).and_then(|q| parse_milli(&q.0).ok()).and_then(|v| i64::try_from(v).ok()).unwrap_or(0)
}

/// The requests of one scheduled, non-terminal pod, in milli-units (cpu in millicores,
/// memory in thousandths of a byte). Approximate like Karmada's: init containers and pod
/// overhead are left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodRequests {
    cpu: i64,
    memory: i64,
}

/// The sum of [`PodRequests`] over the member's pods, and how many pods were summed (× 1000,
/// milli-units like the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodUsage {
    /// Millicores.
    pub cpu: i128,
    /// Thousandths of a byte.
    pub memory: i128,
    /// Pods × 1000.
    pub count: i128,
}

impl Contribution for PodRequests {
    type Object = PodLite;
    type Totals = PodUsage;

    fn resource() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
    }

    /// Counted when scheduled (`spec.nodeName` set) and neither `Succeeded` nor `Failed`.
    fn of(p: &PodLite) -> Option<Self> {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
        if p.spec.node_name.as_deref().unwrap_or("").is_empty() || phase == "Succeeded" || phase == "Failed" {
            return None;
        }
        let mut r = PodRequests::default();
        for req in p.spec.containers.iter().filter_map(|c| c.resources.as_ref()?.requests.as_ref()) {
            r.cpu = r.cpu.saturating_add(milli(Some(req), "cpu"));
            r.memory = r.memory.saturating_add(milli(Some(req), "memory"));
        }
        Some(r)
    }

    fn apply(self, t: &mut PodUsage, sign: i128) {
        t.cpu += sign * self.cpu as i128;
        t.memory += sign * self.memory as i128;
        t.count += sign * 1000;
    }
}

/// What one node adds: one node, ready or not, and its allocatable cpu, memory and pods
/// (milli-units).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCapacity {
    ready: bool,
    cpu: i64,
    memory: i64,
    pods: i64,
}

/// The sum of [`NodeCapacity`] over the member's nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeTotals {
    /// Nodes.
    pub total: i64,
    /// Nodes whose `Ready` condition is `True`.
    pub ready: i64,
    /// Allocatable millicores.
    pub cpu: i128,
    /// Allocatable memory, thousandths of a byte.
    pub memory: i128,
    /// Allocatable pods × 1000.
    pub pods: i128,
}

impl Contribution for NodeCapacity {
    type Object = NodeLite;
    type Totals = NodeTotals;

    fn resource() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&())
    }

    fn of(n: &NodeLite) -> Option<Self> {
        let status = n.status.as_ref();
        let ready = status.and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let alloc = status.and_then(|s| s.allocatable.as_ref());
        Some(NodeCapacity { ready, cpu: milli(alloc, "cpu"), memory: milli(alloc, "memory"), pods: milli(alloc, "pods") })
    }

    fn apply(self, t: &mut NodeTotals, sign: i128) {
        t.total += sign as i64;
        t.ready += if self.ready { sign as i64 } else { 0 };
        t.cpu += sign * self.cpu as i128;
        t.memory += sign * self.memory as i128;
        t.pods += sign * self.pods as i128;
    }
}

/// `{totalNum, readyNum}` of the Cluster's `status.nodeSummary`.
pub fn node_summary(n: &NodeTotals) -> Value {
    json!({"totalNum": n.total, "readyNum": n.ready})
}

/// `{allocatable, allocated}` of the Cluster's `status.resourceSummary`: the nodes'
/// allocatable cpu, memory and pods, and the pods' requests (pods = their count).
pub fn resource_summary(n: &NodeTotals, used: &PodUsage) -> Value {
    json!({
        "allocatable": {"cpu": format_cpu(n.cpu), "memory": format_bytes(n.memory), "pods": format_count(n.pods)},
        "allocated": {"cpu": format_cpu(used.cpu), "memory": format_bytes(used.memory), "pods": format_count(used.count)},
    })
}

/// The entries of one informer and their totals.
#[derive(Debug)]
pub struct Fold<C: Contribution> {
    entries: HashMap<u64, C>,
    totals: C::Totals,
}

impl<C: Contribution> Default for Fold<C> {
    fn default() -> Self {
        Fold { entries: HashMap::new(), totals: C::Totals::default() }
    }
}

impl<C: Contribution> Fold<C> {
    /// Sets the entry of the object with key hash `key` (`None`: it adds nothing or is gone).
    pub fn set(&mut self, key: u64, c: Option<C>) {
        let old = match c {
            Some(c) => {
                c.apply(&mut self.totals, 1);
                self.entries.insert(key, c)
            }
            None => self.entries.remove(&key),
        };
        if let Some(old) = old {
            old.apply(&mut self.totals, -1);
        }
    }

    /// The sum over every entry.
    pub fn totals(&self) -> C::Totals {
        self.totals
    }

    /// Objects that add something.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no object adds anything.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The 64-bit hash of `namespace/name` that keys an object's entry (SipHash with fixed keys:
/// two objects of one member colliding is about as likely as 1 in 10^11 at 10,000 pods).
pub fn key_of(meta: &kube::core::ObjectMeta) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    meta.namespace.as_deref().unwrap_or("").hash(&mut h);
    meta.name.as_deref().unwrap_or("").hash(&mut h);
    h.finish()
}

/// Runs the informer of `C` over the member (`client` should have no read timeout: a watch
/// may be idle for minutes) and publishes its totals on `out` after the first list and after
/// every change. Returns when `out` has no receivers left; errors are logged and retried
/// with kube-runtime's default backoff.
pub async fn run<C: Contribution>(client: kube::Client, out: watch::Sender<Option<C::Totals>>) {
    let ar = C::resource();
    let what = ar.plural.clone();
    let api: Api<C::Object> = Api::all_with(client, &ar);
    let stream = watcher::watcher(api, watcher::Config::default().page_size(PAGE)).default_backoff();
    futures::pin_mut!(stream);
    let mut fold = Fold::<C>::default();
    // the entries of a (re)list in progress; they replace the fold when it completes
    let mut listing: Option<Fold<C>> = None;
    while let Some(ev) = stream.next().await {
        if out.is_closed() {
            return;
        }
        match ev {
            Ok(Event::Init) => listing = Some(Fold::default()),
            Ok(Event::InitApply(o)) => {
                if let Some(l) = listing.as_mut() {
                    l.set(key_of(kube::Resource::meta(&o)), C::of(&o));
                }
            }
            Ok(Event::InitDone) => {
                if let Some(l) = listing.take() {
                    fold = l;
                }
                tracing::debug!(what = %what, objects = fold.len(), "member informer synced");
                out.send_replace(Some(fold.totals()));
            }
            Ok(Event::Apply(o)) => {
                fold.set(key_of(kube::Resource::meta(&o)), C::of(&o));
                publish(&out, &fold);
            }
            Ok(Event::Delete(o)) => {
                fold.set(key_of(kube::Resource::meta(&o)), None);
                publish(&out, &fold);
            }
            Err(e) => tracing::warn!(what = %what, error = %e, "member informer: list or watch failed; retrying"),
        }
    }
}

/// Publishes the totals once the informer has synced (before that the summary stays unknown).
fn publish<C: Contribution>(out: &watch::Sender<Option<C::Totals>>, fold: &Fold<C>) {
    out.send_if_modified(|cur| match cur {
        Some(t) if *t != fold.totals() => {
            *t = fold.totals();
            true
        }
        _ => false,
    });
}

/// The totals the cluster-status controller reads: nodes and pods, each `None` until its
/// informer first synced.
#[derive(Clone, Debug)]
pub struct Summaries {
    /// From the nodes' informer.
    pub nodes: watch::Receiver<Option<NodeTotals>>,
    /// From the pods' informer.
    pub pods: watch::Receiver<Option<PodUsage>>,
}

impl Summaries {
    /// `(nodeSummary, resourceSummary)` as they stand; each `None` while unknown.
    pub fn current(&self) -> (Option<Value>, Option<Value>) {
        let nodes = *self.nodes.borrow();
        let pods = *self.pods.borrow();
        (nodes.as_ref().map(node_summary), nodes.zip(pods).map(|(n, p)| resource_summary(&n, &p)))
    }

    /// Whether both informers have synced.
    pub fn synced(&self) -> bool {
        self.nodes.borrow().is_some() && self.pods.borrow().is_some()
    }

    /// Waits until both informers have synced (forever if one never does).
    pub async fn wait_synced(&mut self) {
        let _ = self.nodes.wait_for(Option::is_some).await;
        let _ = self.pods.wait_for(Option::is_some).await;
    }
}

/// The [`Summaries`] and the future that runs both informers for them (nothing runs until it
/// is polled; it ends when every [`Summaries`] clone is dropped and an event arrives).
pub fn informers(client: kube::Client) -> (Summaries, impl std::future::Future<Output = ()>) {
    let (nodes_tx, nodes) = watch::channel(None);
    let (pods_tx, pods) = watch::channel(None);
    let run = async move {
        tokio::join!(run::<NodeCapacity>(client.clone(), nodes_tx), run::<PodRequests>(client, pods_tx));
    };
    (Summaries { nodes, pods }, run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str, phase: &str) -> PodLite {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "a", "labels": {"x": "y"}, "managedFields": [{"manager": "m"}]},
            "spec": {"nodeName": node, "restartPolicy": "Always", "containers": [
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1"}}},
                {"name": "b", "image": "i"}
            ]},
            "status": {"phase": phase, "podIP": "10.0.0.1"}
        }))
        .unwrap()
    }

    fn node(name: &str, ready: &str, cpu: &str, mem: &str) -> NodeLite {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": "110"},
                       "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    }

    fn set<C: Contribution>(f: &mut Fold<C>, o: &C::Object) {
        f.set(key_of(kube::Resource::meta(o)), C::of(o));
    }

    #[test]
    fn pods_fold_into_their_requests_and_follow_changes() {
        let mut f = Fold::<PodRequests>::default();
        for p in [pod("p1", "n1", "Running"), pod("p2", "n1", "Running"), pod("p3", "", "Pending"), pod("p4", "n1", "Succeeded")] {
            set(&mut f, &p);
        }
        let n = NodeTotals { total: 2, ready: 1, cpu: 7_500, memory: 16 * (1 << 30) * 1000, pods: 220_000 };
        assert_eq!(f.len(), 2, "only scheduled, non-terminal pods are kept");
        let s = resource_summary(&n, &f.totals());
        assert_eq!(s["allocatable"], json!({"cpu": "7500m", "memory": "16Gi", "pods": "220"}));
        assert_eq!(s["allocated"], json!({"cpu": "500m", "memory": "128Mi", "pods": "2"}));
        // the same pod again changes nothing; finishing, or being deleted, takes it away
        set(&mut f, &pod("p1", "n1", "Running"));
        assert_eq!(f.totals().count, 2000);
        set(&mut f, &pod("p1", "n1", "Succeeded"));
        assert_eq!(f.totals(), PodUsage { cpu: 250, memory: 64 * (1 << 20) * 1000, count: 1000 });
        f.set(key_of(&pod("p2", "", "").metadata), None);
        assert_eq!(f.totals(), PodUsage::default());
        assert!(f.is_empty());
        // scheduled later: counted from then on
        set(&mut f, &pod("p3", "n2", "Running"));
        assert_eq!(f.totals().count, 1000);
    }

    #[test]
    fn nodes_fold_into_capacity_and_readiness() {
        let mut f = Fold::<NodeCapacity>::default();
        set(&mut f, &node("n1", "True", "3500m", "8Gi"));
        set(&mut f, &node("n2", "False", "4", "8Gi"));
        assert_eq!(node_summary(&f.totals()), json!({"totalNum": 2, "readyNum": 1}));
        assert_eq!(resource_summary(&f.totals(), &PodUsage::default())["allocatable"], json!({"cpu": "7500m", "memory": "16Gi", "pods": "220"}));
        set(&mut f, &node("n2", "True", "4", "8Gi"));
        assert_eq!(node_summary(&f.totals()), json!({"totalNum": 2, "readyNum": 2}));
        f.set(key_of(&node("n1", "", "", "").metadata), None);
        assert_eq!(f.totals(), NodeTotals { total: 1, ready: 1, cpu: 4000, memory: 8 * (1 << 30) * 1000, pods: 110_000 });
    }

    #[test]
    fn pods_of_one_name_in_two_namespaces_are_two_entries() {
        let mut a = pod("p", "n1", "Running");
        let b = a.clone();
        a.metadata.namespace = Some("other".into());
        let mut f = Fold::<PodRequests>::default();
        set(&mut f, &a);
        set(&mut f, &b);
        assert_eq!(f.len(), 2);
    }
}
