//! Namespaces everywhere: which federation Namespaces are created on every member without a policy (pure functions).
//!
//! Mirrors Karmada's namespace sync controller: a Namespace created in the federation is
//! propagated to every Ready member (and to members that join or become Ready later), and
//! deleting it in the federation deletes it on the members. Never: `default`, `kube-*`,
//! `fed-system`, `fed-exec-*`, and Namespaces labelled
//! `fedctl.io/skip-auto-propagation: "true"`. A ClusterPropagationPolicy selecting a
//! Namespace governs it instead (its placement, not every member). A Namespace that stops
//! being propagated (opted out, or no longer selected) is left in place on members: its
//! Works are deleted with the `Orphan` workload-deletion policy, as deleting a member
//! namespace deletes everything in it.

use serde_json::Value;

use super::policy::is_reserved_namespace;

/// Label that opts a Namespace out of auto-propagation (value `"true"`).
pub const LABEL_SKIP_AUTO_PROPAGATION: &str = "fedctl.io/skip-auto-propagation";

/// Whether a Namespace of this name is never touched on members: `default`, `kube-*`,
/// and the federation's own (`fed-system`, `fed-exec-*`).
pub fn never_propagated(name: &str) -> bool {
    name == "default" || name.starts_with("kube-") || is_reserved_namespace(name)
}

/// Whether the Namespace object `ns` goes to every member when no policy governs it.
pub fn auto_propagated(ns: &Value) -> bool {
    let name = ns.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let skip = ns.pointer("/metadata/labels").and_then(|l| l.get(LABEL_SKIP_AUTO_PROPAGATION)).and_then(Value::as_str) == Some("true");
    !name.is_empty() && !skip && !never_propagated(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn which_namespaces() {
        let ns = |name: &str, labels: Value| json!({"kind": "Namespace", "metadata": {"name": name, "labels": labels}});
        assert!(auto_propagated(&ns("shop", json!({}))));
        assert!(auto_propagated(&ns("shop", json!({LABEL_SKIP_AUTO_PROPAGATION: "false"}))));
        assert!(!auto_propagated(&ns("shop", json!({LABEL_SKIP_AUTO_PROPAGATION: "true"}))));
        for n in ["default", "kube-system", "kube-public", "kube-anything", "fed-system", "fed-exec-a"] {
            assert!(!auto_propagated(&ns(n, json!({}))), "{n}");
        }
    }
}
