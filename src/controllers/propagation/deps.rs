//! propagateDeps: the ConfigMaps, Secrets, ServiceAccounts and PersistentVolumeClaims a workload's pod template references (pure functions over JSON).
//!
//! Mirrors Karmada's dependencies distributor: for a Deployment, StatefulSet, DaemonSet,
//! Job, CronJob, ReplicaSet or bare Pod, the references are read from the pod spec's
//! `volumes[]` (`configMap`, `secret`, `persistentVolumeClaim`, `projected.sources[]`
//! `configMap`/`secret`), every container's and init container's `env[].valueFrom`
//! (`configMapKeyRef`, `secretKeyRef`) and `envFrom[]` (`configMapRef`, `secretRef`),
//! `imagePullSecrets[]` and `serviceAccountName` (except `default`, which every namespace
//! has). All are in the workload's namespace.

use std::collections::BTreeSet;

use serde_json::Value;

use super::overrides::pod_spec_pointer;
use super::work::TemplateKey;

/// Kinds whose pod template is followed by its dependencies.
pub fn has_deps(kind: &str) -> bool {
    matches!(kind, "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "CronJob" | "ReplicaSet" | "Pod")
}

/// Whether a kind can be a dependency.
pub fn is_dep_kind(kind: &str) -> bool {
    matches!(kind, "ConfigMap" | "Secret" | "ServiceAccount" | "PersistentVolumeClaim")
}

/// The template keys of the objects `workload`'s pod template references, sorted; empty for
/// other kinds and cluster-scoped objects.
pub fn dependencies(workload: &Value) -> BTreeSet<TemplateKey> {
    let mut out = BTreeSet::new();
    let kind = workload.get("kind").and_then(Value::as_str).unwrap_or("");
    let ns = workload.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    if !has_deps(kind) || ns.is_empty() {
        return out;
    }
    let Some(spec) = pod_spec_pointer(kind).and_then(|p| workload.pointer(p)) else { return out };
    let mut add = |kind: &str, name: Option<&Value>| {
        if let Some(n) = name.and_then(Value::as_str).filter(|n| !n.is_empty()) {
            out.insert(TemplateKey { group: String::new(), kind: kind.into(), namespace: ns.into(), name: n.into() });
        }
    };
    let arr = |v: &Value, k: &str| v.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
    for v in arr(spec, "volumes") {
        add("ConfigMap", v.pointer("/configMap/name"));
        add("Secret", v.pointer("/secret/secretName"));
        add("PersistentVolumeClaim", v.pointer("/persistentVolumeClaim/claimName"));
        for s in v.pointer("/projected/sources").and_then(Value::as_array).into_iter().flatten() {
            add("ConfigMap", s.pointer("/configMap/name"));
            add("Secret", s.pointer("/secret/name"));
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in arr(spec, list) {
            for e in arr(&c, "env") {
                add("ConfigMap", e.pointer("/valueFrom/configMapKeyRef/name"));
                add("Secret", e.pointer("/valueFrom/secretKeyRef/name"));
            }
            for e in arr(&c, "envFrom") {
                add("ConfigMap", e.pointer("/configMapRef/name"));
                add("Secret", e.pointer("/secretRef/name"));
            }
        }
    }
    for s in arr(spec, "imagePullSecrets") {
        add("Secret", s.get("name"));
    }
    let sa = spec.get("serviceAccountName").or_else(|| spec.get("serviceAccount"));
    if sa.and_then(Value::as_str) != Some("default") {
        add("ServiceAccount", sa);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_reference_is_found() {
        let d = json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"template": {"spec": {
            "serviceAccountName": "web-sa",
            "imagePullSecrets": [{"name": "pull"}],
            "volumes": [{"name": "a", "configMap": {"name": "cfg"}}, {"name": "b", "secret": {"secretName": "tls"}},
                {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "d", "projected": {"sources": [{"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-s"}}, {"serviceAccountToken": {"path": "t"}}]}}],
            "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init-env"}}]}],
            "containers": [{"name": "c", "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "p"}}}, {"name": "X", "value": "y"}],
                "envFrom": [{"secretRef": {"name": "env-s"}}]}]}}}});
        let got: Vec<String> = dependencies(&d).iter().map(|k| format!("{}/{}", k.kind, k.name)).collect();
        assert_eq!(
            got,
            vec![
                "ConfigMap/cfg",
                "ConfigMap/init-env",
                "ConfigMap/proj-cm",
                "PersistentVolumeClaim/data",
                "Secret/db",
                "Secret/env-s",
                "Secret/proj-s",
                "Secret/pull",
                "Secret/tls",
                "ServiceAccount/web-sa",
            ]
        );
        let cron = json!({"kind": "CronJob", "metadata": {"name": "c", "namespace": "n"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "serviceAccountName": "default", "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "x"}}]}]}}}}}});
        assert_eq!(dependencies(&cron).iter().map(|k| k.to_string()).collect::<Vec<_>>(), vec!["/ConfigMap/n/x"]);
        let pod = json!({"kind": "Pod", "metadata": {"name": "p", "namespace": "n"}, "spec": {"serviceAccount": "legacy", "containers": []}});
        assert_eq!(dependencies(&pod).iter().map(|k| k.to_string()).collect::<Vec<_>>(), vec!["/ServiceAccount/n/legacy"]);
        assert!(dependencies(&json!({"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "n"}})).is_empty());
    }
}
