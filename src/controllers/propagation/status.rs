//! Status aggregation: members' workload statuses (fed back in Works) summed into the template's status.
//!
//! Mirrors Karmada's resource-binding status aggregation: counters are summed over the
//! target clusters; the per-cluster figures are kept in the template's
//! `fedctl.io/cluster-status` annotation.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::work::TemplateKey;

/// What one target cluster reports for the template (from its Work's
/// `status.manifestStatuses[]` entry whose identifier names the template).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberStatus {
    /// Cluster name.
    pub cluster: String,
    /// `applied`, when the agent has reported.
    pub applied: Option<bool>,
    /// `message`, when present.
    pub message: Option<String>,
    /// The member object's `.status`, when reported.
    pub status: Option<Value>,
    /// The cluster's replica share (divisible kinds), before overrides.
    pub share: Option<i64>,
    /// Override policies applied to the cluster's manifest, in order.
    pub overrides: Vec<String>,
    /// Override rules that could not apply to it.
    pub override_errors: Vec<String>,
}

/// Counters summed over members, per kind (status field names as in the Kubernetes API).
pub fn summed_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Deployment" => &["replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"],
        "StatefulSet" => &["replicas", "readyReplicas", "currentReplicas", "updatedReplicas", "availableReplicas"],
        "DaemonSet" => &["currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady", "updatedNumberScheduled", "numberAvailable", "numberUnavailable"],
        "Job" => &["active", "succeeded", "failed", "ready"],
        _ => &[],
    }
}

/// Whether the template's status is aggregated from members (workload kinds only; other
/// kinds keep their own status and only get the per-cluster annotation).
pub fn aggregates_status(kind: &str) -> bool {
    !summed_fields(kind).is_empty()
}

/// Reads a target's report for `key` out of its Work (`None` work → nothing reported yet).
pub fn member_status(cluster: &str, work: Option<&Value>, key: &TemplateKey) -> MemberStatus {
    let mut m = MemberStatus { cluster: cluster.to_string(), ..Default::default() };
    let Some(entries) = work.and_then(|w| w.pointer("/status/manifestStatuses")).and_then(Value::as_array) else {
        return m;
    };
    let s = |e: &Value, f: &str| e.pointer(&format!("/identifier/{f}")).and_then(Value::as_str).unwrap_or("").to_string();
    let entry = entries.iter().find(|e| s(e, "kind") == key.kind && s(e, "name") == key.name && s(e, "namespace") == key.namespace && s(e, "group") == key.group);
    if let Some(e) = entry {
        m.applied = e.get("applied").and_then(Value::as_bool);
        m.message = e.get("message").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        m.status = e.get("status").filter(|v| v.is_object()).cloned();
    }
    m
}

fn condition_true<'a>(status: &'a Value, ty: &str) -> Option<&'a Value> {
    status.get("conditions").and_then(Value::as_array)?.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(ty) && c.get("status").and_then(Value::as_str) == Some("True"))
}

/// The template's aggregated `status` for `kind` at `generation`: summed counters (only
/// those some member reports) and `observedGeneration`. For Jobs also the earliest
/// `startTime`, and `Complete` (every target complete, with the latest `completionTime`) or
/// `Failed` (any target failed) conditions. `None` for kinds that are not aggregated.
pub fn aggregate(kind: &str, generation: i64, members: &[MemberStatus]) -> Option<Value> {
    let fields = summed_fields(kind);
    if fields.is_empty() {
        return None;
    }
    let mut out = Map::new();
    for f in fields {
        let vals: Vec<i64> = members.iter().filter_map(|m| m.status.as_ref()?.get(*f)?.as_i64()).collect();
        if !vals.is_empty() {
            out.insert((*f).to_string(), json!(vals.iter().sum::<i64>()));
        }
    }
    if kind == "Job" && !members.is_empty() {
        let statuses: Vec<&Value> = members.iter().filter_map(|m| m.status.as_ref()).collect();
        if let Some(start) = statuses.iter().filter_map(|s| s.get("startTime")?.as_str()).min() {
            out.insert("startTime".into(), json!(start));
        }
        let mut conditions = Vec::new();
        let all_complete = statuses.len() == members.len() && statuses.iter().all(|s| condition_true(s, "Complete").is_some());
        if all_complete {
            let when = statuses.iter().filter_map(|s| condition_true(s, "Complete")?.get("lastTransitionTime")?.as_str()).max();
            let mut c = json!({"type": "Complete", "status": "True"});
            if let Some(t) = when {
                c["lastTransitionTime"] = json!(t);
            }
            conditions.push(c);
            if let Some(t) = statuses.iter().filter_map(|s| s.get("completionTime")?.as_str()).max() {
                out.insert("completionTime".into(), json!(t));
            }
        }
        if let Some(failed) = statuses.iter().filter_map(|s| condition_true(s, "Failed")).next() {
            let mut c = json!({"type": "Failed", "status": "True"});
            for k in ["reason", "message", "lastTransitionTime"] {
                if let Some(v) = failed.get(k) {
                    c[k] = v.clone();
                }
            }
            conditions.push(c);
        }
        if !conditions.is_empty() {
            out.insert("conditions".into(), Value::Array(conditions));
        }
    }
    out.insert("observedGeneration".into(), json!(generation));
    Some(Value::Object(out))
}

/// The per-cluster breakdown, keyed by cluster name (sorted): `applied`, `message` and the
/// kind's counters as that cluster reports them; `share` (the replicas division gave it),
/// `overrides` and `overrideErrors` when there are any. Every propagated template carries it
/// (the `fedctl.io/cluster-status` annotation), whatever its kind.
pub fn breakdown(kind: &str, members: &[MemberStatus]) -> Value {
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    for m in members {
        let mut e = Map::new();
        if let Some(a) = m.applied {
            e.insert("applied".into(), json!(a));
        }
        if let Some(msg) = &m.message {
            e.insert("message".into(), json!(msg));
        }
        if let Some(s) = m.share {
            e.insert("share".into(), json!(s));
        }
        if !m.overrides.is_empty() {
            e.insert("overrides".into(), json!(m.overrides));
        }
        if !m.override_errors.is_empty() {
            e.insert("overrideErrors".into(), json!(m.override_errors));
        }
        if let Some(st) = &m.status {
            for f in summed_fields(kind) {
                if let Some(v) = st.get(*f) {
                    e.insert((*f).to_string(), v.clone());
                }
            }
        }
        out.insert(m.cluster.clone(), Value::Object(e));
    }
    json!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> TemplateKey {
        TemplateKey { group: "apps".into(), kind: "Deployment".into(), namespace: "shop".into(), name: "web".into() }
    }

    fn work(status: Value) -> Value {
        json!({"status": {"manifestStatuses": [
            {"identifier": {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "shop", "name": "web"}, "applied": true, "status": {"readyReplicas": 100}},
            {"identifier": {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "web"}, "applied": true, "status": status}
        ]}})
    }

    #[test]
    fn deployment_sums() {
        let a = work(json!({"replicas": 4, "readyReplicas": 4, "availableReplicas": 4, "updatedReplicas": 4}));
        let b = work(json!({"replicas": 2, "readyReplicas": 2, "availableReplicas": 1, "updatedReplicas": 2, "unavailableReplicas": 1}));
        let members = vec![member_status("a", Some(&a), &key()), member_status("b", Some(&b), &key()), member_status("c", None, &key())];
        let st = aggregate("Deployment", 3, &members).unwrap();
        assert_eq!(st, json!({"replicas": 6, "updatedReplicas": 6, "readyReplicas": 6, "availableReplicas": 5, "unavailableReplicas": 1, "observedGeneration": 3}));
        let bd = breakdown("Deployment", &members);
        assert_eq!(bd["a"], json!({"applied": true, "replicas": 4, "updatedReplicas": 4, "readyReplicas": 4, "availableReplicas": 4}));
        assert_eq!(bd["c"], json!({}));
        assert!(aggregate("ConfigMap", 1, &members).is_none());
        assert_eq!(aggregate("Deployment", 1, &[]).unwrap(), json!({"observedGeneration": 1}));
    }

    #[test]
    fn job_conditions() {
        let k = TemplateKey { group: "batch".into(), kind: "Job".into(), namespace: "n".into(), name: "j".into() };
        let w = |st: Value| json!({"status": {"manifestStatuses": [{"identifier": {"group": "batch", "version": "v1", "kind": "Job", "namespace": "n", "name": "j"}, "applied": true, "status": st}]}});
        let done = |t: &str| {
            w(json!({"succeeded": 2, "startTime": format!("2026-01-01T00:00:0{t}Z"), "completionTime": format!("2026-01-01T00:01:0{t}Z"),
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": format!("2026-01-01T00:01:0{t}Z")}]}))
        };
        let running = w(json!({"active": 1, "succeeded": 1, "startTime": "2026-01-01T00:00:00Z"}));
        let m = vec![member_status("a", Some(&done("1")), &k), member_status("b", Some(&running), &k)];
        let st = aggregate("Job", 1, &m).unwrap();
        assert_eq!(st["active"], 1);
        assert_eq!(st["succeeded"], 3);
        assert_eq!(st["startTime"], "2026-01-01T00:00:00Z");
        assert!(st.get("conditions").is_none());
        let m = vec![member_status("a", Some(&done("1")), &k), member_status("b", Some(&done("2")), &k)];
        let st = aggregate("Job", 1, &m).unwrap();
        assert_eq!(st["conditions"][0]["type"], "Complete");
        assert_eq!(st["completionTime"], "2026-01-01T00:01:02Z");
    }
}
