//! Escalation prevention for RBAC writes (mirrors kube-apiserver's policy-based RBAC storage and `registry/rbac/validation` `ConfirmNoEscalation`); uses `api` and the RBAC index.
//!
//! An admission hook on Roles, ClusterRoles, RoleBindings and ClusterRoleBindings:
//! - a Role or ClusterRole may be written only with rules the writer already holds in that
//!   namespace (cluster-wide for a ClusterRole), unless it may `escalate` that resource;
//!   an `aggregationRule` needs every permission (cluster-admin), as kube-apiserver asks;
//! - a binding may be written only when the writer may `bind` the referenced role (verb
//!   `bind` on `roles`/`clusterroles` by name, in the binding's namespace), or holds every
//!   rule of that role; a binding to a role that does not exist is refused then.
//!
//! Members of `system:masters` bypass both (kube's `EscalationAllowed`). An update that
//! leaves the rules (roles) or the role reference and subjects (bindings) as they were is not
//! checked, as only such fields as labels or finalizers changed. Refusals are 403 with
//! kube-apiserver's message.

use std::sync::Arc;

use serde_json::Value;

use super::rules::{self, Attributes, Rule, Target};
use super::Rbac;
use crate::api::{AdmissionHook, AdmissionRequest, ApiError, ApiResult, ApiServer, Caller, Operation, ResourceInfo};

/// The admission hook (register it on the federation's [`ApiServer`]).
pub struct EscalationCheck {
    /// The rules callers hold.
    pub rbac: Arc<Rbac>,
}

fn forbidden(info: &ResourceInfo, name: &str, why: &str) -> ApiError {
    ApiError::Forbidden(format!("{} \"{name}\" is forbidden: {why}", info.qualified()))
}

fn go_quoted(l: &[String]) -> String {
    format!("[{}]", l.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" "))
}

/// kube's `ConfirmNoEscalation`: the caller holds every rule of `wanted` in `ns`.
fn confirm_no_escalation(rbac: &Rbac, caller: &Caller, ns: &str, wanted: &[Rule]) -> Result<(), String> {
    let held = rbac.rules_for(&caller.user, &caller.groups, ns);
    let missing = rules::uncovered(&held, wanted);
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!("user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}", caller.user, go_quoted(&caller.groups), rules::compact(&missing)))
}

fn masters(caller: &Caller) -> bool {
    caller.groups.iter().any(|g| g == crate::pki::auth::MASTERS_GROUP)
}

#[async_trait::async_trait]
impl AdmissionHook for EscalationCheck {
    fn handles(&self, info: &ResourceInfo) -> bool {
        info.group == super::RBAC_GROUP && matches!(info.resource, "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings")
    }

    async fn admit(&self, api: &ApiServer, req: &AdmissionRequest<'_>, obj: &mut Value) -> ApiResult<()> {
        let caller = &req.ctx.caller;
        if masters(caller) {
            return Ok(());
        }
        let ns = req.namespace.unwrap_or("");
        let binding = matches!(req.info.resource, "rolebindings" | "clusterrolebindings");
        if req.operation == Operation::Update {
            let same = |f: &str| req.old.and_then(|o| o.get(f)) == obj.get(f);
            let unchanged = if binding { same("roleRef") && same("subjects") } else { same("rules") && same("aggregationRule") };
            if unchanged {
                return Ok(());
            }
        }
        if !binding {
            // the request's name, as kube-apiserver's RequestInfo has it: none for a create
            let name = if req.operation == Operation::Create { "" } else { req.name };
            let escalate = Attributes { verb: "escalate", target: Target::Resource { group: super::RBAC_GROUP, resource: req.info.resource, subresource: "", namespace: ns, name } };
            if crate::server::authz::can(api, &self.rbac, caller, &escalate).await {
                return Ok(());
            }
            if obj.get("aggregationRule").is_some_and(|a| !a.is_null()) {
                let all = [Rule::new(&["*"], &["*"], &["*"]), Rule::urls(&["*"], &["*"])];
                if confirm_no_escalation(&self.rbac, caller, "", &all).is_err() {
                    return Err(forbidden(req.info, req.name, "must have cluster-admin privileges to use the aggregationRule"));
                }
            }
            return confirm_no_escalation(&self.rbac, caller, ns, &Rule::list_of(obj)).map_err(|m| forbidden(req.info, req.name, &m));
        }
        let kind = obj.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or("");
        let role = obj.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or("");
        let resource = match kind {
            "Role" => "roles",
            "ClusterRole" => "clusterroles",
            other => return Err(forbidden(req.info, req.name, &format!("unsupported role reference kind: {other:?}"))),
        };
        let bind = Attributes { verb: "bind", target: Target::Resource { group: super::RBAC_GROUP, resource, subresource: "", namespace: ns, name: role } };
        if crate::server::authz::can(api, &self.rbac, caller, &bind).await {
            return Ok(());
        }
        let rules = match kind {
            "Role" => self.rbac.role_rules(ns, role).ok_or_else(|| format!("role.rbac.authorization.k8s.io \"{role}\" not found")),
            _ => self.rbac.cluster_role_rules(role).ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io \"{role}\" not found")),
        }
        .map_err(|m| forbidden(req.info, req.name, &m))?;
        confirm_no_escalation(&self.rbac, caller, ns, &rules).map_err(|m| forbidden(req.info, req.name, &m))
    }
}
