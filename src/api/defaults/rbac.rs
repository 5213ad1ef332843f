//! `rbac.authorization.k8s.io/v1` defaults: pkg/apis/rbac/v1/defaults.go.

use serde_json::Value;

use super::{child, each, Obj};

/// The RBAC API group, the default of `roleRef.apiGroup` and of User/Group subjects.
const GROUP: &str = "rbac.authorization.k8s.io";

/// RoleBinding and ClusterRoleBinding: SetDefaults_RoleBinding / SetDefaults_ClusterRoleBinding
/// (`roleRef.apiGroup`) and SetDefaults_Subject (User and Group subjects get the RBAC group,
/// ServiceAccount subjects `""`). Roles and ClusterRoles have no defaults.
pub(super) fn apply(kind: &str, o: &mut Obj) {
    if kind != "RoleBinding" && kind != "ClusterRoleBinding" {
        return;
    }
    if let Some(r) = child(o, "roleRef") {
        super::default_zero(r, "apiGroup", GROUP);
    }
    for s in each(o, "subjects") {
        if !super::zero(s, "apiGroup") {
            continue;
        }
        match s.get("kind").and_then(Value::as_str) {
            Some("User") | Some("Group") => {
                s.insert("apiGroup".into(), GROUP.into());
            }
            Some("ServiceAccount") => {
                s.insert("apiGroup".into(), "".into());
            }
            _ => {}
        }
    }
}
