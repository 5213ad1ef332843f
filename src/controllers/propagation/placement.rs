//! Placement: which member clusters a template goes to, failover rate limiting, and replica division.
//!
//! Pure functions over a snapshot of the Clusters ([`ClusterView`]) so they can be unit
//! tested without a store; the controller feeds them its caches.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::policy::{Placement, Policy, Scheduling, Taint};

/// The parts of a `cluster.fedctl.io/v1alpha1 Cluster` that placement looks at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterView {
    /// Cluster name.
    pub name: String,
    /// `metadata.labels`.
    pub labels: Map<String, Value>,
    /// `spec.zone`.
    pub zone: Option<String>,
    /// `spec.region`.
    pub region: Option<String>,
    /// `spec.taints[]`.
    pub taints: Vec<Taint>,
    /// `status.conditions[type=Ready].status == "True"`.
    pub ready: bool,
    /// When the cluster last stopped being Ready (the Ready condition's
    /// `lastTransitionTime` while it is not `True`).
    pub not_ready_since: Option<DateTime<Utc>>,
    /// Allocatable minus allocated CPU in millicores (`status.resourceSummary`), when reported.
    pub available_cpu_milli: Option<i64>,
    /// Allocatable minus allocated pods, when reported.
    pub available_pods: Option<i64>,
    /// `metadata.deletionTimestamp` is set (unjoining).
    pub deleting: bool,
}

/// Parses a Kubernetes CPU quantity (`"4"`, `"3500m"`, `"1.5"`, `2`) into millicores.
pub fn cpu_millis(v: &Value) -> Option<i64> {
    if let Some(n) = v.as_i64() {
        return Some(n.saturating_mul(1000));
    }
    if let Some(f) = v.as_f64() {
        return Some((f * 1000.0).round() as i64);
    }
    let s = v.as_str()?.trim();
    if let Some(m) = s.strip_suffix('m') {
        return m.parse::<i64>().ok();
    }
    if let Some(k) = s.strip_suffix('k') {
        return k.parse::<f64>().ok().map(|f| (f * 1e6).round() as i64);
    }
    s.parse::<f64>().ok().map(|f| (f * 1000.0).round() as i64)
}

/// Parses a plain count (`110`, `"110"`).
fn count(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

impl ClusterView {
    /// Reads a Cluster object. Missing fields are defaults (no labels, not Ready, …).
    pub fn from_object(obj: &Value) -> Self {
        let meta = obj.get("metadata");
        let s = |p: &str| obj.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        let ready_cond = obj.pointer("/status/conditions").and_then(Value::as_array).and_then(|a| a.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready")));
        let ready = ready_cond.and_then(|c| c.get("status")).and_then(Value::as_str) == Some("True");
        let not_ready_since =
            if ready { None } else { ready_cond.and_then(|c| c.get("lastTransitionTime")).and_then(Value::as_str).and_then(|t| DateTime::parse_from_rfc3339(t).ok()).map(|t| t.with_timezone(&Utc)) };
        let avail = |res: &str, parse: fn(&Value) -> Option<i64>| -> Option<i64> {
            let a = obj.pointer(&format!("/status/resourceSummary/allocatable/{res}")).and_then(parse)?;
            let used = obj.pointer(&format!("/status/resourceSummary/allocated/{res}")).and_then(parse).unwrap_or(0);
            Some((a - used).max(0))
        };
        let taints = obj
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|t| Taint {
                        key: t.get("key").and_then(Value::as_str).unwrap_or("").into(),
                        value: t.get("value").and_then(Value::as_str).unwrap_or("").into(),
                        effect: t.get("effect").and_then(Value::as_str).unwrap_or("").into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        ClusterView {
            name: meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("").into(),
            labels: meta.and_then(|m| m.get("labels")).and_then(Value::as_object).cloned().unwrap_or_default(),
            zone: s("/spec/zone"),
            region: s("/spec/region"),
            taints,
            ready,
            not_ready_since,
            available_cpu_milli: avail("cpu", cpu_millis),
            available_pods: avail("pods", count),
            deleting: meta.and_then(|m| m.get("deletionTimestamp")).is_some_and(|v| !v.is_null()),
        }
    }

    /// Whether `other` is the same cluster as far as placement decides (labels, zone,
    /// region, taints, readiness, deletion; not heartbeats or resource usage): when it is
    /// not, every placed template is re-evaluated.
    pub fn same_placement(&self, other: &ClusterView) -> bool {
        self.name == other.name
            && self.labels == other.labels
            && self.zone == other.zone
            && self.region == other.region
            && self.taints == other.taints
            && self.ready == other.ready
            && self.deleting == other.deleting
    }
}

impl Placement {
    /// `clusterAffinity` holds for `c` (names, exclude, labels and zones all satisfied).
    pub fn affinity_matches(&self, c: &ClusterView) -> bool {
        let a = &self.affinity;
        if !a.cluster_names.is_empty() && !a.cluster_names.contains(&c.name) {
            return false;
        }
        if a.exclude.contains(&c.name) {
            return false;
        }
        if let Some(ls) = &a.label_selector {
            if !ls.matches(Some(&c.labels)) {
                return false;
            }
        }
        if !a.zones.is_empty() && !c.zone.as_ref().is_some_and(|z| a.zones.contains(z)) {
            return false;
        }
        true
    }

    /// The first taint of `c` with `effect` that no toleration tolerates.
    fn untolerated(&self, c: &ClusterView, effect: &str) -> bool {
        c.taints.iter().filter(|t| t.effect == effect).any(|t| !self.tolerations.iter().any(|tol| tol.tolerates(t)))
    }
}

/// Global rate limit on failover: at most `max` distinct clusters may have their workloads
/// evicted per `window` (mirrors the node lifecycle controller's eviction rate limiter, so a
/// zone outage or a network split cannot stampede every workload at once). A cluster, once
/// admitted, stays admitted until it is Ready again ([`FailoverLimiter::forget`]).
#[derive(Debug)]
pub struct FailoverLimiter {
    max: usize,
    window: Duration,
    admitted: HashMap<String, Instant>,
    history: VecDeque<Instant>,
}

impl FailoverLimiter {
    /// `max` clusters per `window` (`max` 0 disables failover).
    pub fn new(max: usize, window: Duration) -> Self {
        FailoverLimiter { max, window, admitted: HashMap::new(), history: VecDeque::new() }
    }

    /// Admits evicting `cluster` at `now`: `Ok` when already admitted or there is room in
    /// the window, else `Err(wait)` with the time until the next slot frees up.
    pub fn admit(&mut self, cluster: &str, now: Instant) -> Result<(), Duration> {
        if self.admitted.contains_key(cluster) {
            return Ok(());
        }
        while self.history.front().is_some_and(|t| now.duration_since(*t) >= self.window) {
            self.history.pop_front();
        }
        if self.max == 0 {
            return Err(self.window);
        }
        if self.history.len() < self.max {
            self.history.push_back(now);
            self.admitted.insert(cluster.to_string(), now);
            return Ok(());
        }
        let oldest = *self.history.front().expect("full window is non-empty");
        Err((oldest + self.window).saturating_duration_since(now).max(Duration::from_millis(10)))
    }

    /// Whether `cluster` has been admitted for eviction.
    pub fn is_admitted(&self, cluster: &str) -> bool {
        self.admitted.contains_key(cluster)
    }

    /// The cluster is Ready again: a later outage needs a new admission.
    pub fn forget(&mut self, cluster: &str) {
        self.admitted.remove(cluster);
    }
}

/// The outcome of cluster selection for one template.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    /// Target clusters, sorted by name.
    pub targets: Vec<String>,
    /// Re-evaluate after this long (a failover deadline or a rate-limit slot is pending).
    pub retry_after: Option<Duration>,
}

/// Chooses the target clusters of a template governed by `policy`:
/// `affinity ∩ tolerated (NoSchedule, NoExecute) ∩ Ready` for new placements. A cluster that
/// already hosts the template (`hosting`) stays a target while NotReady or newly tainted
/// `NoSchedule`; with `failover.afterSeconds`, once it has been NotReady that long and the
/// global `limiter` admits it, it is dropped (its replicas re-divided over the others).
/// An untolerated `NoExecute` taint, a deleting Cluster or a changed affinity drop it at once.
pub fn select_clusters(policy: &Policy, clusters: &[ClusterView], hosting: &BTreeSet<String>, now: DateTime<Utc>, mono_now: Instant, limiter: &mut FailoverLimiter) -> Selection {
    let p = &policy.placement;
    let mut sel = Selection::default();
    let retry = |d: Duration, sel: &mut Selection| {
        sel.retry_after = Some(sel.retry_after.map_or(d, |r| r.min(d)));
    };
    let mut sorted: Vec<&ClusterView> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for c in sorted {
        if c.deleting || !p.affinity_matches(c) || p.untolerated(c, "NoExecute") {
            continue;
        }
        let hosts = hosting.contains(&c.name);
        if p.untolerated(c, "NoSchedule") && !hosts {
            continue;
        }
        if c.ready {
            sel.targets.push(c.name.clone());
            continue;
        }
        if !hosts {
            continue; // no new placement on a cluster that is not Ready
        }
        let Some(after) = policy.failover_after_seconds else {
            sel.targets.push(c.name.clone());
            continue;
        };
        let since = c.not_ready_since.unwrap_or(now);
        let elapsed = (now - since).to_std().unwrap_or_default();
        let after = Duration::from_secs(after.max(0) as u64);
        if elapsed < after {
            sel.targets.push(c.name.clone());
            retry(after - elapsed + Duration::from_millis(50), &mut sel);
            continue;
        }
        match limiter.admit(&c.name, mono_now) {
            Ok(()) => {} // evicted: not a target any more
            Err(wait) => {
                sel.targets.push(c.name.clone());
                retry(wait, &mut sel);
            }
        }
    }
    sel
}

/// Divides `replicas` over `weights` proportionally with the largest-remainder method: each
/// cluster gets `floor(replicas × w / Σw)`, and the replicas left over go one each to the
/// largest remainders, ties broken by cluster name (ascending). The result sums exactly to
/// `replicas`, is sorted by cluster name and lists every input cluster (zero shares
/// included). Weights below zero count as zero; when every weight is zero the replicas are
/// divided evenly (mirrors Karmada's static-weight division). Empty input → empty output.
pub fn divide(replicas: i64, weights: &[(String, i64)]) -> Vec<(String, i64)> {
    if weights.is_empty() {
        return vec![];
    }
    let replicas = replicas.max(0);
    let mut ws: Vec<(String, i128)> = weights.iter().map(|(c, w)| (c.clone(), i128::from((*w).max(0)))).collect();
    if ws.iter().all(|(_, w)| *w == 0) {
        for w in ws.iter_mut() {
            w.1 = 1;
        }
    }
    ws.sort_by(|a, b| a.0.cmp(&b.0));
    let total: i128 = ws.iter().map(|(_, w)| *w).sum();
    let r = i128::from(replicas);
    let mut out: Vec<(String, i64, i128)> = ws
        .iter()
        .map(|(c, w)| {
            let exact = r * *w;
            (c.clone(), (exact / total) as i64, exact % total)
        })
        .collect();
    let assigned: i64 = out.iter().map(|(_, n, _)| *n).sum();
    let mut left = replicas - assigned;
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by(|&a, &b| out[b].2.cmp(&out[a].2).then(out[a].0.cmp(&out[b].0)));
    for i in order {
        if left == 0 {
            break;
        }
        out[i].1 += 1;
        left -= 1;
    }
    out.into_iter().map(|(c, n, _)| (c, n)).collect()
}

/// Weights for dividing by available capacity: CPU millicores when every target reports
/// them, else pods when every target reports them, else equal weights.
pub fn capacity_weights(targets: &[&ClusterView]) -> Vec<(String, i64)> {
    if targets.iter().all(|c| c.available_cpu_milli.is_some()) && targets.iter().any(|c| c.available_cpu_milli.unwrap_or(0) > 0) {
        return targets.iter().map(|c| (c.name.clone(), c.available_cpu_milli.unwrap_or(0))).collect();
    }
    if targets.iter().all(|c| c.available_pods.is_some()) && targets.iter().any(|c| c.available_pods.unwrap_or(0) > 0) {
        return targets.iter().map(|c| (c.name.clone(), c.available_pods.unwrap_or(0))).collect();
    }
    targets.iter().map(|c| (c.name.clone(), 1)).collect()
}

/// Splits `replicas` over `targets` as `scheduling` says. `current` is the share each
/// cluster holds now; capacity-based division keeps it while it still adds up to `replicas`
/// over clusters that are all still targets (no reshuffle on every capacity change, as
/// Karmada's steady division). Returns `(cluster, share)` sorted by name, every target listed.
pub fn shares(scheduling: &Scheduling, replicas: i64, targets: &[&ClusterView], current: &BTreeMap<String, i64>) -> Vec<(String, i64)> {
    let names: Vec<String> = targets.iter().map(|c| c.name.clone()).collect();
    match scheduling {
        Scheduling::Duplicated => {
            let mut v: Vec<(String, i64)> = names.into_iter().map(|n| (n, replicas)).collect();
            v.sort();
            v
        }
        Scheduling::Divided { weights, zone_spread } => {
            let w: Vec<(String, i64)> = match weights {
                Some(ws) => names.iter().map(|n| (n.clone(), ws.iter().find(|(c, _)| c == n).map_or(0, |(_, w)| *w))).collect(),
                None => {
                    let sticky = !current.is_empty() && current.keys().all(|c| names.contains(c)) && current.values().sum::<i64>() == replicas;
                    if sticky && !zone_spread {
                        let mut v: Vec<(String, i64)> = names.iter().map(|n| (n.clone(), current.get(n).copied().unwrap_or(0))).collect();
                        v.sort();
                        return v;
                    }
                    capacity_weights(targets)
                }
            };
            if !zone_spread {
                return divide(replicas, &w);
            }
            // even over zones (of clusters with a positive weight), then by weight within each
            let zone_of = |n: &str| targets.iter().find(|c| c.name == n).and_then(|c| c.zone.clone()).unwrap_or_default();
            let positive: Vec<&(String, i64)> = w.iter().filter(|(_, x)| *x > 0).collect();
            let pool: Vec<&(String, i64)> = if positive.is_empty() { w.iter().collect() } else { positive };
            let zones: BTreeSet<String> = pool.iter().map(|(n, _)| zone_of(n)).collect();
            let per_zone = divide(replicas, &zones.iter().map(|z| (z.clone(), 1)).collect::<Vec<_>>());
            let mut out: Vec<(String, i64)> = w.iter().map(|(n, _)| (n.clone(), 0)).collect();
            for (zone, share) in per_zone {
                let members: Vec<(String, i64)> = pool.iter().filter(|(n, _)| zone_of(n) == zone).map(|(n, x)| (n.clone(), *x)).collect();
                for (n, s) in divide(share, &members) {
                    if let Some(e) = out.iter_mut().find(|(c, _)| *c == n) {
                        e.1 = s;
                    }
                }
            }
            out.sort();
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn w(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
        pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    }

    #[test]
    fn divide_two_to_one() {
        assert_eq!(divide(6, &w(&[("a", 2), ("b", 1)])), w(&[("a", 4), ("b", 2)]));
        assert_eq!(divide(9, &w(&[("a", 2), ("b", 1)])), w(&[("a", 6), ("b", 3)]));
        assert_eq!(divide(7, &w(&[("b", 1), ("a", 2)])), w(&[("a", 5), ("b", 2)]));
        assert_eq!(divide(1, &w(&[("a", 2), ("b", 1)])), w(&[("a", 1), ("b", 0)]));
    }

    #[test]
    fn divide_ties_by_name_and_sums_exactly() {
        assert_eq!(divide(1, &w(&[("b", 1), ("a", 1)])), w(&[("a", 1), ("b", 0)]));
        assert_eq!(divide(2, &w(&[("c", 1), ("b", 1), ("a", 1)])), w(&[("a", 1), ("b", 1), ("c", 0)]));
        for replicas in 0..50 {
            let out = divide(replicas, &w(&[("a", 3), ("b", 7), ("c", 11), ("d", 0)]));
            assert_eq!(out.iter().map(|(_, n)| n).sum::<i64>(), replicas);
            assert_eq!(out.iter().find(|(c, _)| c == "d").unwrap().1, 0);
        }
    }

    #[test]
    fn divide_zero_weights_single_and_large() {
        assert_eq!(divide(5, &w(&[("a", 0), ("b", 0)])), w(&[("a", 3), ("b", 2)]));
        assert_eq!(divide(5, &w(&[("a", 0), ("b", 1)])), w(&[("a", 0), ("b", 5)]));
        assert_eq!(divide(5, &w(&[("a", -3), ("b", 1)])), w(&[("a", 0), ("b", 5)]));
        assert_eq!(divide(17, &w(&[("only", 4)])), w(&[("only", 17)]));
        assert_eq!(divide(0, &w(&[("a", 1), ("b", 1)])), w(&[("a", 0), ("b", 0)]));
        assert!(divide(3, &[]).is_empty());
        let big = divide(i64::from(i32::MAX) * 4, &w(&[("a", i64::from(i32::MAX)), ("b", i64::from(i32::MAX) - 1), ("c", 1)]));
        assert_eq!(big.iter().map(|(_, n)| n).sum::<i64>(), i64::from(i32::MAX) * 4);
        let m = divide(1_000_000_007, &w(&[("a", 1), ("b", 1), ("c", 1)]));
        assert_eq!(m, w(&[("a", 333_333_336), ("b", 333_333_336), ("c", 333_333_335)]));
    }

    fn cluster(name: &str, ready: bool) -> ClusterView {
        ClusterView { name: name.into(), ready, ..Default::default() }
    }

    fn policy(spec: Value) -> Policy {
        let mut s = spec;
        s["resourceSelectors"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment"}]);
        super::super::policy::parse(&json!({"metadata": {"name": "p", "namespace": "n"}, "spec": s}), false).unwrap()
    }

    #[test]
    fn cluster_view_reads_status() {
        let c = ClusterView::from_object(&json!({
            "metadata": {"name": "a", "labels": {"env": "prod"}},
            "spec": {"zone": "z1", "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "resourceSummary": {"allocatable": {"cpu": "8", "pods": "110"}, "allocated": {"cpu": "2500m", "pods": 10}}}
        }));
        assert_eq!(c.zone.as_deref(), Some("z1"));
        assert!(!c.ready);
        assert!(c.not_ready_since.is_some());
        assert_eq!(c.available_cpu_milli, Some(5500));
        assert_eq!(c.available_pods, Some(100));
        assert_eq!(c.taints[0].effect, "NoSchedule");
        assert_eq!(cpu_millis(&json!("0.5")), Some(500));
    }

    #[test]
    fn affinity_taints_and_readiness() {
        let p = policy(json!({"placement": {"clusterAffinity": {"labelSelector": {"matchLabels": {"env": "prod"}}, "exclude": ["c"], "zones": ["z1", "z2"]}}}));
        let mk = |name: &str, env: &str, zone: &str, ready: bool| ClusterView { labels: json!({"env": env}).as_object().unwrap().clone(), zone: Some(zone.into()), ..cluster(name, ready) };
        let mut tainted = mk("e", "prod", "z1", true);
        tainted.taints.push(Taint { key: "gpu".into(), value: "".into(), effect: "NoSchedule".into() });
        let clusters = vec![mk("a", "prod", "z1", true), mk("b", "dev", "z1", true), mk("c", "prod", "z2", true), mk("d", "prod", "z3", true), tainted.clone(), mk("f", "prod", "z2", false)];
        let mut lim = FailoverLimiter::new(1, Duration::from_secs(60));
        let sel = select_clusters(&p, &clusters, &BTreeSet::new(), Utc::now(), Instant::now(), &mut lim);
        assert_eq!(sel.targets, vec!["a"]);
        // existing placements stay on a NotReady cluster and on a NoSchedule-tainted one
        let hosting: BTreeSet<String> = ["e", "f"].iter().map(|s| s.to_string()).collect();
        let sel = select_clusters(&p, &clusters, &hosting, Utc::now(), Instant::now(), &mut lim);
        assert_eq!(sel.targets, vec!["a", "e", "f"]);
        assert_eq!(sel.retry_after, None);
        // NoExecute evicts at once
        let mut ne = tainted.clone();
        ne.taints[0].effect = "NoExecute".into();
        let sel = select_clusters(&p, &[ne], &hosting, Utc::now(), Instant::now(), &mut lim);
        assert!(sel.targets.is_empty());
        // a toleration admits the tainted cluster for new placements
        let tol = policy(json!({"placement": {"clusterTolerations": [{"key": "gpu", "operator": "Exists"}]}}));
        let sel = select_clusters(&tol, &[tainted], &BTreeSet::new(), Utc::now(), Instant::now(), &mut lim);
        assert_eq!(sel.targets, vec!["e"]);
    }

    #[test]
    fn failover_waits_then_is_rate_limited() {
        let p = policy(json!({"failover": {"afterSeconds": 30}}));
        let now = Utc::now();
        let down = |name: &str, secs: i64| ClusterView { not_ready_since: Some(now - chrono::Duration::seconds(secs)), ..cluster(name, false) };
        let hosting: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let t0 = Instant::now();
        let mut lim = FailoverLimiter::new(1, Duration::from_secs(60));
        // 10 s down: kept, retry in ~20 s
        let sel = select_clusters(&p, &[down("a", 10), cluster("c", true)], &hosting, now, t0, &mut lim);
        assert_eq!(sel.targets, vec!["a", "c"]);
        let r = sel.retry_after.unwrap();
        assert!(r > Duration::from_secs(19) && r <= Duration::from_secs(21), "{r:?}");
        // two clusters past the deadline: only one evicted per window
        let clusters = [down("a", 40), down("b", 40), cluster("c", true)];
        let sel = select_clusters(&p, &clusters, &hosting, now, t0, &mut lim);
        assert_eq!(sel.targets, vec!["b", "c"]);
        assert!(sel.retry_after.unwrap() <= Duration::from_secs(60));
        // the same decision again (another template) evicts the admitted cluster only
        let sel = select_clusters(&p, &clusters, &hosting, now, t0 + Duration::from_secs(1), &mut lim);
        assert_eq!(sel.targets, vec!["b", "c"]);
        // after the window the next cluster is admitted
        let sel = select_clusters(&p, &clusters, &hosting, now, t0 + Duration::from_secs(61), &mut lim);
        assert_eq!(sel.targets, vec!["c"]);
        // without failover a NotReady host stays forever
        let nf = policy(json!({}));
        let sel = select_clusters(&nf, &clusters, &hosting, now, t0, &mut FailoverLimiter::new(1, Duration::from_secs(60)));
        assert_eq!(sel.targets, vec!["a", "b", "c"]);
    }

    #[test]
    fn shares_by_weights_capacity_and_zones() {
        let a = ClusterView { available_cpu_milli: Some(6000), available_pods: Some(10), zone: Some("z1".into()), ..cluster("a", true) };
        let b = ClusterView { available_cpu_milli: Some(2000), available_pods: Some(30), zone: Some("z1".into()), ..cluster("b", true) };
        let c = ClusterView { available_cpu_milli: Some(4000), available_pods: Some(10), zone: Some("z2".into()), ..cluster("c", true) };
        let none = BTreeMap::new();
        let weighted = Scheduling::Divided { weights: Some(w(&[("a", 2), ("b", 1), ("x", 5)])), zone_spread: false };
        assert_eq!(shares(&weighted, 6, &[&a, &b], &none), w(&[("a", 4), ("b", 2)]));
        // a target without a weight gets nothing
        assert_eq!(shares(&weighted, 6, &[&a, &b, &c], &none), w(&[("a", 4), ("b", 2), ("c", 0)]));
        let by_capacity = Scheduling::Divided { weights: None, zone_spread: false };
        assert_eq!(shares(&by_capacity, 12, &[&a, &b, &c], &none), w(&[("a", 6), ("b", 2), ("c", 4)]));
        // pods when a cluster does not report CPU
        let b2 = ClusterView { available_cpu_milli: None, ..b.clone() };
        assert_eq!(shares(&by_capacity, 10, &[&a, &b2, &c], &none), w(&[("a", 2), ("b", 6), ("c", 2)]));
        // steady: the current split is kept while it still adds up
        let cur: BTreeMap<String, i64> = w(&[("a", 1), ("b", 11)]).into_iter().collect();
        assert_eq!(shares(&by_capacity, 12, &[&a, &b, &c], &cur), w(&[("a", 1), ("b", 11), ("c", 0)]));
        assert_eq!(shares(&by_capacity, 13, &[&a, &b, &c], &cur).iter().map(|x| x.1).sum::<i64>(), 13);
        // zone spread: 6 evenly over z1/z2, then by capacity within z1 (6000:2000)
        let zs = Scheduling::Divided { weights: None, zone_spread: true };
        assert_eq!(shares(&zs, 8, &[&a, &b, &c], &none), w(&[("a", 3), ("b", 1), ("c", 4)]));
        assert_eq!(shares(&Scheduling::Duplicated, 3, &[&b, &a], &none), w(&[("a", 3), ("b", 3)]));
    }
}
