//! The default roles and bindings, created at first start and reconciled at every start (mirrors kube-apiserver's bootstrap policy, `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`, and its `rbac/bootstrap-roles` post-start hook); uses `api`.
//!
//! The user-facing roles (`admin`, `edit`, `view`) are aggregated from the
//! `system:aggregate-to-*` roles, adapted to the kinds the federation serves, plus the
//! federation's own namespaced policy kinds (PropagationPolicy, OverridePolicy), so a team
//! bound to `edit` in its namespace manages its policies there. Every object carries the label
//! `kubernetes.io/bootstrapping: rbac-defaults` and the annotation
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`; reconciling adds missing rules,
//! subjects, labels and annotations to an object that still says `"true"` (extra rules and
//! subjects an operator added are kept, as kube-apiserver's reconciler does), and leaves an
//! object alone that says `"false"`.

use std::sync::Arc;

use serde_json::{json, Value};

use super::rules::Rule;
use crate::api::request::ResourceRequest;
use crate::api::{ApiError, ApiResult, ApiServer, Caller, Ctx};

/// Label of every default RBAC object.
pub const BOOTSTRAPPING_LABEL: &str = "kubernetes.io/bootstrapping";
/// Its value.
pub const BOOTSTRAPPING_VALUE: &str = "rbac-defaults";
/// Annotation that lets the server reconcile a default object (`"true"`) or not.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// Label prefix of aggregation: `rbac.authorization.k8s.io/aggregate-to-<admin|edit|view>`.
pub const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";

const READ: &[&str] = &["get", "list", "watch"];

/// The default ClusterRole (and ClusterRoleBinding) giving the group
/// [`crate::search::VIEW_GROUP`] read access to the global view's cacheable kinds (secrets
/// excepted) and pods' logs in every namespace. As RBAC rules do not tell the view from the
/// federation's own API, it also lets the group read the federation's templates of those
/// kinds.
pub const GLOBAL_VIEW_ROLE: &str = "fedctl:global-view";
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const ALL: &[&str] = &["*"];

/// The identity the server writes its own RBAC objects as (kube-apiserver's loopback
/// client is in `system:masters` too, so no escalation check applies).
pub fn internal_caller() -> Caller {
    Caller { user: "system:apiserver".into(), groups: vec![crate::pki::auth::MASTERS_GROUP.into()] }
}

fn meta(name: &str, labels: &[(&str, &str)]) -> Value {
    let mut l = serde_json::Map::new();
    l.insert(BOOTSTRAPPING_LABEL.into(), json!(BOOTSTRAPPING_VALUE));
    for (k, v) in labels {
        l.insert(k.to_string(), json!(v));
    }
    json!({"name": name, "labels": l, "annotations": {AUTOUPDATE_ANNOTATION: "true"}})
}

fn cluster_role(name: &str, labels: &[(&str, &str)], rules: Vec<Rule>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(name, labels), "rules": rules.iter().map(Rule::to_json).collect::<Vec<_>>()})
}

/// A ClusterRole whose rules the aggregation controller fills from the roles labelled
/// `aggregate-to-<to>: "true"`.
fn aggregated(name: &str, labels: &[(&str, &str)], to: &str) -> Value {
    let mut r = cluster_role(name, labels, vec![]);
    r["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {format!("{AGGREGATE_TO}{to}"): "true"}}]});
    r
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups.iter().map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g})).collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(name, &[]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": subjects})
}

fn rw(groups: &[&str], resources: &[&str]) -> Rule {
    Rule::new(WRITE, groups, resources)
}

fn ro(groups: &[&str], resources: &[&str]) -> Rule {
    Rule::new(READ, groups, resources)
}

/// The default ClusterRoles, in creation order (kube's `ClusterRoles()`, restricted to what
/// the federation serves).
pub fn cluster_roles() -> Vec<Value> {
    let view_rules = vec![
        ro(
            &[""],
            &[
                "pods",
                "pods/status",
                "pods/log",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "replicationcontrollers/status",
                "serviceaccounts",
                "services",
                "services/status",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "configmaps",
            ],
        ),
        ro(&[""], &["limitranges", "resourcequotas", "resourcequotas/status", "events", "namespaces", "namespaces/status"]),
        ro(&["discovery.k8s.io"], &["endpointslices"]),
        ro(
            &["apps"],
            &[
                "controllerrevisions",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "daemonsets",
                "daemonsets/status",
            ],
        ),
        ro(&["autoscaling"], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        ro(&["batch"], &["jobs", "jobs/status", "cronjobs", "cronjobs/status"]),
        ro(&["policy"], &["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        ro(&["networking.k8s.io"], &["networkpolicies", "ingresses", "ingresses/status"]),
        ro(&["policy.fedctl.io"], &["propagationpolicies", "overridepolicies"]),
    ];
    let edit_rules = vec![
        Rule::new(&["impersonate"], &[""], &["serviceaccounts"]),
        rw(&[""], &["pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"]),
        Rule::new(&["create"], &[""], &["pods/eviction"]),
        rw(&[""], &["replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets", "events"]),
        Rule::new(&["create"], &[""], &["serviceaccounts/token"]),
        rw(&["apps"], &["statefulsets", "statefulsets/scale", "daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets", "replicasets/scale"]),
        rw(&["autoscaling"], &["horizontalpodautoscalers"]),
        rw(&["batch"], &["jobs", "cronjobs"]),
        rw(&["policy"], &["poddisruptionbudgets"]),
        rw(&["networking.k8s.io"], &["networkpolicies", "ingresses"]),
        rw(&["coordination.k8s.io"], &["leases"]),
        ro(&["coordination.k8s.io"], &["leases"]),
        ro(&[""], &["pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"]),
        rw(&["policy.fedctl.io"], &["propagationpolicies", "overridepolicies"]),
    ];
    let admin_rules = vec![
        Rule::new(&["create"], &["authorization.k8s.io"], &["localsubjectaccessreviews"]),
        rw(&["rbac.authorization.k8s.io"], &["roles", "rolebindings"]),
        ro(&["rbac.authorization.k8s.io"], &["roles", "rolebindings"]),
    ];
    let to = |what: &'static str| (format!("{AGGREGATE_TO}{what}"), "true");
    let (to_admin, to_edit, to_view) = (to("admin"), to("edit"), to("view"));
    vec![
        cluster_role("cluster-admin", &[], vec![Rule::new(ALL, ALL, ALL), Rule::urls(ALL, ALL)]),
        aggregated("admin", &[], "admin"),
        aggregated("edit", &[(&to_admin.0, to_admin.1)], "edit"),
        aggregated("view", &[(&to_edit.0, to_edit.1)], "view"),
        cluster_role("system:aggregate-to-admin", &[(&to_admin.0, to_admin.1)], admin_rules),
        cluster_role("system:aggregate-to-edit", &[(&to_edit.0, to_edit.1)], edit_rules),
        cluster_role("system:aggregate-to-view", &[(&to_view.0, to_view.1)], view_rules),
        cluster_role("system:discovery", &[], vec![Rule::urls(&["get"], &["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"])]),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                Rule::new(&["create"], &["authorization.k8s.io"], &["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                Rule::new(&["create"], &["authentication.k8s.io"], &["selfsubjectreviews"]),
            ],
        ),
        cluster_role("system:public-info-viewer", &[], vec![Rule::urls(&["get"], &["/healthz", "/livez", "/readyz", "/version", "/version/"])]),
        cluster_role(
            "system:auth-delegator",
            &[],
            vec![Rule::new(&["create"], &["authentication.k8s.io"], &["tokenreviews"]), Rule::new(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"])],
        ),
        // who was in the global view's group keeps reading it: every kind it can cache but
        // secrets, and pods' logs, in every namespace
        cluster_role(
            GLOBAL_VIEW_ROLE,
            &[],
            vec![
                ro(&[""], &["pods", "pods/log", "nodes", "namespaces", "events", "endpoints", "configmaps", "services", "serviceaccounts"]),
                ro(&["apps"], &["deployments", "replicasets", "statefulsets", "daemonsets"]),
                ro(&["batch"], &["jobs"]),
                ro(&["discovery.k8s.io"], &["endpointslices"]),
            ],
        ),
        cluster_role("system:monitoring", &[], vec![Rule::urls(&["get"], &["/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*", "/metrics", "/metrics/slis"])]),
    ]
}

/// The default ClusterRoleBindings (kube's `ClusterRoleBindings()`).
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", "cluster-admin", &[crate::pki::auth::MASTERS_GROUP]),
        binding("system:discovery", "system:discovery", &[crate::pki::auth::AUTHENTICATED_GROUP]),
        binding("system:basic-user", "system:basic-user", &[crate::pki::auth::AUTHENTICATED_GROUP]),
        binding("system:public-info-viewer", "system:public-info-viewer", &[crate::pki::auth::AUTHENTICATED_GROUP, "system:unauthenticated"]),
        binding("system:monitoring", "system:monitoring", &["system:monitoring"]),
        binding(GLOBAL_VIEW_ROLE, GLOBAL_VIEW_ROLE, &[crate::search::VIEW_GROUP]),
    ]
}

fn request(api: &ApiServer, resource: &str, name: Option<&str>) -> ApiResult<ResourceRequest> {
    let info = api.registry.lookup(super::RBAC_GROUP, "v1", resource).ok_or(ApiError::NoSuchResource)?;
    Ok(ResourceRequest { info, namespace: None, name: name.map(str::to_string), subresource: None, watch_path: false })
}

fn internal_ctx() -> Ctx {
    Ctx { caller: internal_caller(), dry_run: false, manager: "fedctl-rbac-bootstrap".into(), apply: false }
}

/// `want`'s labels, annotations and list items (`rules` or `subjects`) added to `cur`;
/// `None` when nothing is missing.
fn reconciled(cur: &Value, want: &Value, list: &str) -> Option<Value> {
    let mut out = cur.clone();
    let mut changed = false;
    for field in ["labels", "annotations"] {
        if let Some(w) = want.pointer(&format!("/metadata/{field}")).and_then(Value::as_object) {
            for (k, v) in w {
                if out.pointer(&format!("/metadata/{field}/{}", k.replace('~', "~0").replace('/', "~1"))) != Some(v) {
                    if !out["metadata"][field].is_object() {
                        out["metadata"][field] = json!({});
                    }
                    out["metadata"][field][k] = v.clone();
                    changed = true;
                }
            }
        }
    }
    if want.get("aggregationRule").is_some() && out.get("aggregationRule") != want.get("aggregationRule") {
        out["aggregationRule"] = want["aggregationRule"].clone();
        changed = true;
    } else if want.get("aggregationRule").is_none() {
        let have: Vec<Value> = out.get(list).and_then(Value::as_array).cloned().unwrap_or_default();
        let mut items = have.clone();
        for w in want.get(list).and_then(Value::as_array).into_iter().flatten() {
            let present = if list == "rules" {
                let wr = Rule::from_json(w);
                items.iter().any(|h| super::rules::uncovered(&[Rule::from_json(h)], std::slice::from_ref(&wr)).is_empty())
            } else {
                items.iter().any(|h| h.get("kind") == w.get("kind") && h.get("name") == w.get("name"))
            };
            if !present {
                items.push(w.clone());
                changed = true;
            }
        }
        out[list] = Value::Array(items);
    }
    changed.then_some(out)
}

async fn ensure(api: &Arc<ApiServer>, resource: &str, want: Value, list: &str) -> ApiResult<()> {
    let name = want.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let named = request(api, resource, Some(&name))?;
    match api.get(&named).await {
        Ok(cur) => {
            if cur.pointer(&format!("/metadata/annotations/{}", AUTOUPDATE_ANNOTATION.replace('/', "~1"))).and_then(Value::as_str) == Some("false") {
                return Ok(());
            }
            if resource == "clusterrolebindings" && cur.get("roleRef") != want.get("roleRef") {
                // a binding's roleRef is immutable: kube's reconciler recreates it
                api.delete(&named, &json!({}), &internal_ctx()).await?;
                return Box::pin(ensure(api, resource, want, list)).await;
            }
            if let Some(next) = reconciled(&cur, &want, list) {
                tracing::info!(%resource, %name, "reconciling default RBAC object");
                api.update(&named, next, &internal_ctx()).await?;
            }
            Ok(())
        }
        Err(ApiError::NotFound { .. }) => match api.create(&request(api, resource, None)?, want, &internal_ctx()).await {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Creates the default ClusterRoles and ClusterRoleBindings that are missing and reconciles
/// the present ones (see the module doc). Errors: the first store or API error; call again.
pub async fn ensure_defaults(api: &Arc<ApiServer>) -> ApiResult<()> {
    for r in cluster_roles() {
        ensure(api, "clusterroles", r, "rules").await?;
    }
    for b in cluster_role_bindings() {
        ensure(api, "clusterrolebindings", b, "subjects").await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_adds_only_what_is_missing() {
        let want = cluster_role("r", &[], vec![Rule::new(&["get"], &[""], &["pods"])]);
        assert!(reconciled(&want, &want, "rules").is_none());
        let mut cur = want.clone();
        cur["rules"] = json!([{"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]}]);
        assert!(reconciled(&cur, &want, "rules").is_none(), "a broader rule covers the default one");
        cur["rules"] = json!([{"verbs": ["list"], "apiGroups": ["x"], "resources": ["y"]}]);
        let next = reconciled(&cur, &want, "rules").unwrap();
        assert_eq!(next["rules"].as_array().unwrap().len(), 2, "extra rules are kept: {next}");
        cur["metadata"]["labels"] = json!({});
        assert_eq!(reconciled(&cur, &want, "rules").unwrap()["metadata"]["labels"][BOOTSTRAPPING_LABEL], BOOTSTRAPPING_VALUE);
    }

    #[test]
    fn defaults_are_marked_and_aggregate_in_a_chain() {
        for o in cluster_roles().into_iter().chain(cluster_role_bindings()) {
            assert_eq!(o["metadata"]["labels"][BOOTSTRAPPING_LABEL], BOOTSTRAPPING_VALUE);
            assert_eq!(o["metadata"]["annotations"][AUTOUPDATE_ANNOTATION], "true");
        }
        let roles = cluster_roles();
        let by = |n: &str| roles.iter().find(|r| r["metadata"]["name"] == n).unwrap().clone();
        assert_eq!(by("view")["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"], "true");
        assert_eq!(by("edit")["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"], "true");
        assert!(by("admin")["aggregationRule"].is_object());
    }
}
