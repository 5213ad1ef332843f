//! `networking.k8s.io/v1` defaults: pkg/apis/networking/v1/defaults.go.

use serde_json::{json, Value};

use super::{child, default, each, member, Obj};

/// `networking.k8s.io/v1` kinds (Ingress has no defaults in v1).
pub(super) fn apply(kind: &str, o: &mut Obj) {
    match kind {
        "NetworkPolicy" => network_policy(o),
        "IngressClass" => {
            // SetDefaults_IngressClass
            if let Some(p) = child(o, "spec").and_then(|s| child(s, "parameters")) {
                default(p, "scope", "Cluster");
            }
        }
        _ => {}
    }
}

/// SetDefaults_NetworkPolicy (policyTypes `[Ingress]`, plus `Egress` when egress rules are
/// given) and SetDefaults_NetworkPolicyPort (protocol TCP) for every rule's ports.
fn network_policy(o: &mut Obj) {
    let Some(spec) = member(o, "spec") else { return };
    for dir in ["ingress", "egress"] {
        for rule in each(spec, dir) {
            for p in each(rule, "ports") {
                default(p, "protocol", "TCP");
            }
        }
    }
    if spec.get("policyTypes").and_then(Value::as_array).is_none_or(|t| t.is_empty()) {
        let egress = spec.get("egress").and_then(Value::as_array).is_some_and(|e| !e.is_empty());
        let types = if egress { json!(["Ingress", "Egress"]) } else { json!(["Ingress"]) };
        spec.insert("policyTypes".into(), types);
    }
}
