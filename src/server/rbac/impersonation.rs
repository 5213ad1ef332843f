//! Impersonation: `Impersonate-User`, `Impersonate-Group` and `Impersonate-Uid` headers (kubectl `--as`, `--as-group`, `--as-uid`) let a caller act as another user when it may `impersonate` them (mirrors kube-apiserver's `endpoints/filters/impersonation.go`); uses `api` and the server's authorizer chain.
//!
//! Each impersonated value is authorized on its own: the user as `users` (core group) by
//! name, or for `system:serviceaccount:<ns>:<name>` as `serviceaccounts` `<name>` in `<ns>`;
//! each group as `groups`; the uid as `uids` of `authentication.k8s.io`. The impersonated user
//! gets `system:authenticated` (and, when no group is asked for, a service account its
//! `system:serviceaccounts` groups), as kube-apiserver adds them. `Impersonate-Extra-*`
//! headers are refused (403): extra user info is not modelled.

use http::HeaderMap;

use super::rules::{Attributes, Target};
use super::Rbac;
use crate::api::{ApiError, ApiServer, Caller};
use crate::pki::auth::AUTHENTICATED_GROUP;

/// Header naming the user to act as.
pub const USER_HEADER: &str = "impersonate-user";
/// Header (repeatable) naming a group to act with.
pub const GROUP_HEADER: &str = "impersonate-group";
/// Header naming the uid to act with.
pub const UID_HEADER: &str = "impersonate-uid";
/// Prefix of the extra-info headers.
pub const EXTRA_PREFIX: &str = "impersonate-extra-";

/// The identity a request acts as after impersonation.
#[derive(Clone, Debug)]
pub struct Impersonated {
    /// User and groups.
    pub caller: Caller,
    /// The `Impersonate-Uid`, if given.
    pub uid: Option<String>,
}

fn values<'a>(h: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    h.get_all(name).iter().filter_map(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty()).collect()
}

fn denied(caller: &Caller, resource: &str, group: &str, ns: &str, name: &str) -> ApiError {
    let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
    let scope = if ns.is_empty() { "at the cluster scope".to_string() } else { format!("in the namespace \"{ns}\"") };
    ApiError::Forbidden(format!("{qualified} \"{name}\" is forbidden: User \"{}\" cannot impersonate resource \"{resource}\" in API group \"{group}\" {scope}", caller.user))
}

/// Applies the impersonation headers of a request made by `caller`: `Ok(None)` when there are
/// none, `Ok(Some(_))` the identity to act as. Errors: 403 when the caller may not impersonate
/// one of the values (or sends `Impersonate-Extra-*`), 400 for groups or a uid without a user.
pub async fn impersonate(api: &ApiServer, rbac: &Rbac, caller: &Caller, headers: &HeaderMap) -> Result<Option<Impersonated>, ApiError> {
    let users = values(headers, USER_HEADER);
    let groups = values(headers, GROUP_HEADER);
    let uids = values(headers, UID_HEADER);
    let extra = headers.keys().any(|k| k.as_str().starts_with(EXTRA_PREFIX));
    if users.is_empty() {
        if !groups.is_empty() || !uids.is_empty() || extra {
            return Err(ApiError::BadRequest("impersonating groups, a uid or extra info requires impersonating a user (Impersonate-User)".into()));
        }
        return Ok(None);
    }
    if extra {
        return Err(ApiError::Forbidden(format!("User \"{}\" cannot impersonate extra user info: not supported", caller.user)));
    }
    let user = users[0];
    let check = async |resource: &str, group: &str, ns: &str, name: &str| {
        let a = Attributes { verb: "impersonate", target: Target::Resource { group, resource, subresource: "", namespace: ns, name } };
        if crate::server::authz::can(api, rbac, caller, &a).await {
            Ok(())
        } else {
            Err(denied(caller, resource, group, ns, name))
        }
    };
    let mut out_groups: Vec<String> = Vec::new();
    match user.strip_prefix(super::SA_USER_PREFIX).and_then(|r| r.split_once(':')) {
        Some((ns, name)) => {
            check("serviceaccounts", "", ns, name).await?;
            if groups.is_empty() {
                out_groups = super::service_account_user(ns, name).1;
            }
        }
        None => check("users", "", "", user).await?,
    }
    for g in &groups {
        check("groups", "", "", g).await?;
        out_groups.push(g.to_string());
    }
    let uid = match uids.first() {
        Some(u) => {
            check("uids", "authentication.k8s.io", "", u).await?;
            Some(u.to_string())
        }
        None => None,
    };
    if user != crate::server::app::ANONYMOUS_USER && !out_groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        out_groups.push(AUTHENTICATED_GROUP.to_string());
    }
    Ok(Some(Impersonated { caller: Caller { user: user.to_string(), groups: out_groups }, uid }))
}
