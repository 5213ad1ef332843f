//! Who may do what through the global view: a request's authorization attributes (derived from its path as kube-apiserver's RequestInfo derives them) and the federation's decision on them, made before the cache or any member is asked; uses `api` and `pki`.
//!
//! The view does not hold the federation's authorizer (it lives in the server, a layer up):
//! the server hands it a [`ViewAuthorizer`], which answers two questions: may the caller do
//! exactly this ([`ViewAuthorizer::allows`]), and in which namespaces may it do this
//! ([`ViewAuthorizer::namespaces`], for reads across namespaces). [`decide`] puts them
//! together:
//!
//! - `list`/`watch` of a namespaced kind across namespaces: allowed whole when granted
//!   cluster-wide ([`NamespaceGrant::All`]); filtered to the namespaces granted when only
//!   RoleBindings grant it ([`NamespaceGrant::Some`]); else 403;
//! - anything else (a namespaced request, a named object, a cluster-scoped kind, a write, a
//!   subresource such as `log` or `exec`): allowed iff granted exactly, else 403 — so a
//!   request for a member is refused before any member is contacted, and what is allowed is
//!   then decided again by the member's RBAC (the caller is impersonated there).
//!
//! The 403 carries kube-apiserver's RBAC message (`pods is forbidden: User "u" cannot list
//! resource "pods" in API group "" at the cluster scope`).

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use http::Method;

use crate::api::request::Query;
use crate::api::{ApiError, Caller};

/// Where a caller holds a permission on a namespaced kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceGrant {
    /// Cluster-wide (a ClusterRoleBinding, or the fixed rules for admins): every namespace.
    All,
    /// Only in these namespaces (RoleBindings), never empty.
    Some(Arc<BTreeSet<String>>),
    /// Nowhere.
    None,
}

impl NamespaceGrant {
    /// A grant of `namespaces`: [`NamespaceGrant::None`] when empty.
    pub fn of(namespaces: BTreeSet<String>) -> NamespaceGrant {
        if namespaces.is_empty() {
            NamespaceGrant::None
        } else {
            NamespaceGrant::Some(Arc::new(namespaces))
        }
    }

    /// The namespace set when the grant is limited (`None` for [`NamespaceGrant::All`] and
    /// [`NamespaceGrant::None`]).
    pub fn limited(&self) -> Option<&Arc<BTreeSet<String>>> {
        match self {
            NamespaceGrant::Some(s) => Some(s),
            _ => None,
        }
    }
}

/// The authorization attributes of a view request (kube's `authorizer.Attributes` of a
/// resource request), as [`ViewAttributes::of`] derives them from the path below the view's
/// scope (`/api/v1/namespaces/a/pods`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewAttributes {
    /// Lower-case verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`.
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`log`, `exec`, `status`, …), `""` for none.
    pub subresource: String,
    /// Namespace, `""` for cluster scope or across namespaces.
    pub namespace: String,
    /// Object name (or the name a list's field selector pins), `""` for none.
    pub name: String,
    /// Whether the kind is namespaced (unknown kinds count as namespaced).
    pub namespaced: bool,
}

/// Subresources of the pods whose WebSocket upgrade (a GET) is authorized as `create`, as
/// kube-apiserver does with its `AuthorizePodWebsocketUpgradeCreatePermission` feature gate
/// (on by default from 1.35) and as the members (fedsim) do: SPDY sends them as POSTs, which
/// are `create` anyway.
const POD_STREAMS: [&str; 3] = ["exec", "attach", "portforward"];

impl ViewAttributes {
    /// The attributes of `method path?query` (path below the view's scope); `None` when the
    /// path is not a resource request (discovery: `/api`, `/apis/<g>/<v>`, …). Mirrors
    /// kube-apiserver's `RequestInfoFactory`: `/namespaces/<ns>` is the namespace object `ns`
    /// in namespace `ns`; the deprecated `/watch/` prefix and `watch=true` make a `watch`; a
    /// list or watch whose field selector pins `metadata.name` names that object; `upgrade`
    /// (a WebSocket or SPDY request) makes a pod's `exec`, `attach` and `portforward` a
    /// `create`.
    pub fn of(method: &Method, path: &str, query: &Query, upgrade: bool) -> Option<ViewAttributes> {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, mut rest) = match segs.as_slice() {
            ["api", _v, rest @ ..] => ("", rest),
            ["apis", g, _v, rest @ ..] => (*g, rest),
            _ => return None,
        };
        let mut watch_path = false;
        if rest.first() == Some(&"watch") {
            watch_path = true;
            rest = &rest[1..];
        }
        let mut namespace = "";
        if rest.first() == Some(&"namespaces") && rest.len() > 1 {
            namespace = rest[1];
            // `/namespaces/<ns>` and its subresources address the namespace object itself
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        let (resource, name, subresource) = match rest {
            [] => return None,
            [r] => (*r, "", ""),
            [r, n] => (*r, *n, ""),
            [r, n, s, ..] => (*r, *n, *s),
        };
        let watch = watch_path || query.get("watch").is_some_and(|w| w == "true" || w == "1");
        let verb = match *method {
            Method::GET | Method::HEAD if !name.is_empty() => {
                if upgrade && resource == "pods" && POD_STREAMS.contains(&subresource) {
                    "create"
                } else if watch {
                    "watch"
                } else {
                    "get"
                }
            }
            Method::GET | Method::HEAD => {
                if watch {
                    "watch"
                } else {
                    "list"
                }
            }
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if name.is_empty() => "deletecollection",
            Method::DELETE => "delete",
            _ => return None,
        };
        let mut name = name.to_string();
        if name.is_empty() && matches!(verb, "list" | "watch") {
            if let Some(pinned) = pinned_name(query) {
                name = pinned;
            }
        }
        Some(ViewAttributes {
            verb: verb.to_string(),
            group: group.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            namespace: namespace.to_string(),
            name,
            namespaced: true,
        })
    }

    /// Whether this is a read across namespaces of a namespaced kind, which a namespace
    /// grant answers filtered.
    pub fn across_namespaces(&self) -> bool {
        self.namespaced && self.namespace.is_empty() && self.name.is_empty() && self.subresource.is_empty() && matches!(self.verb.as_str(), "list" | "watch")
    }

    /// kube-apiserver's RBAC denial message for `user`: `pods "p" is forbidden: User "u"
    /// cannot get resource "pods/log" in API group "" in the namespace "a"`.
    pub fn forbidden(&self, user: &str) -> ApiError {
        let qualified = if self.group.is_empty() { self.resource.clone() } else { format!("{}.{}", self.resource, self.group) };
        let resource = if self.subresource.is_empty() { self.resource.clone() } else { format!("{}/{}", self.resource, self.subresource) };
        let scope = if self.namespace.is_empty() { "at the cluster scope".to_string() } else { format!("in the namespace \"{}\"", self.namespace) };
        let reason = format!("User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}", self.verb, self.group);
        ApiError::Forbidden(if self.name.is_empty() { format!("{qualified} is forbidden: {reason}") } else { format!("{qualified} \"{}\" is forbidden: {reason}", self.name) })
    }
}

/// The field selector's pinned `metadata.name`, when that is its only requirement.
fn pinned_name(query: &Query) -> Option<String> {
    let fs = query.get("fieldSelector")?.trim();
    let (k, v) = fs.split_once("==").or_else(|| fs.split_once('='))?;
    (k.trim() == "metadata.name" && !v.contains(',') && !k.contains('!')).then(|| v.trim().to_string())
}

/// The federation's authorizer as the view asks it (implemented by the server over its
/// fixed rules and RBAC).
pub trait ViewAuthorizer: Send + Sync {
    /// Whether `caller` may do exactly `a`.
    fn allows<'a>(&'a self, caller: &'a Caller, a: &'a ViewAttributes) -> BoxFuture<'a, bool>;
    /// Where `caller` may do `a` (its namespace ignored): everywhere, in some namespaces, or
    /// nowhere.
    fn namespaces<'a>(&'a self, caller: &'a Caller, a: &'a ViewAttributes) -> BoxFuture<'a, NamespaceGrant>;
    /// Whether `caller` is decided by rules that never change (an admin): its watches are not
    /// re-checked.
    fn fixed(&self, caller: &Caller) -> bool;
    /// A receiver that changes whenever grants may have changed (the RBAC index was
    /// rebuilt); `None` when they never change.
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>>;
}

/// The authorizer of a `fedctl cache` process: only `system:masters` (the server's MUX, with
/// the federation's admin certificate) may read; the server decided for its own caller.
pub struct MastersOnly;

fn is_master(caller: &Caller) -> bool {
    caller.groups.iter().any(|g| g == crate::pki::auth::MASTERS_GROUP)
}

impl ViewAuthorizer for MastersOnly {
    fn allows<'a>(&'a self, caller: &'a Caller, _a: &'a ViewAttributes) -> BoxFuture<'a, bool> {
        Box::pin(async move { is_master(caller) })
    }

    fn namespaces<'a>(&'a self, caller: &'a Caller, _a: &'a ViewAttributes) -> BoxFuture<'a, NamespaceGrant> {
        Box::pin(async move {
            if is_master(caller) {
                NamespaceGrant::All
            } else {
                NamespaceGrant::None
            }
        })
    }

    fn fixed(&self, _caller: &Caller) -> bool {
        true
    }

    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// Decides `a` for `caller` (see the module doc): `Ok(All)` to serve it whole,
/// `Ok(Some(namespaces))` to serve only those namespaces (reads across namespaces), `Err` the
/// 403 to answer.
pub async fn decide(authz: &dyn ViewAuthorizer, caller: &Caller, a: &ViewAttributes) -> Result<NamespaceGrant, ApiError> {
    if a.across_namespaces() {
        return match authz.namespaces(caller, a).await {
            NamespaceGrant::None => Err(a.forbidden(&caller.user)),
            g => Ok(g),
        };
    }
    if authz.allows(caller, a).await {
        Ok(NamespaceGrant::All)
    } else {
        Err(a.forbidden(&caller.user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, path: &str, query: &str, upgrade: bool) -> ViewAttributes {
        ViewAttributes::of(&method, path, &Query::parse(Some(query)), upgrade).unwrap()
    }

    #[test]
    fn attributes_follow_request_info() {
        let a = attrs(Method::GET, "/api/v1/pods", "", false);
        assert_eq!((a.verb.as_str(), a.resource.as_str(), a.namespace.as_str()), ("list", "pods", ""));
        assert!(a.across_namespaces());
        let a = attrs(Method::GET, "/api/v1/pods", "watch=true", false);
        assert_eq!(a.verb, "watch");
        let a = attrs(Method::GET, "/api/v1/watch/namespaces/a/pods", "", false);
        assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("watch", "a"));
        assert!(!a.across_namespaces());
        let a = attrs(Method::GET, "/api/v1/namespaces/a/pods/p/log", "follow=true", false);
        assert_eq!((a.verb.as_str(), a.name.as_str(), a.subresource.as_str()), ("get", "p", "log"));
        let a = attrs(Method::GET, "/api/v1/namespaces/a/pods/p/exec", "command=ls", true);
        assert_eq!(a.verb, "create", "a WebSocket exec is authorized as create");
        let a = attrs(Method::DELETE, "/apis/apps/v1/namespaces/a/deployments", "", false);
        assert_eq!((a.verb.as_str(), a.group.as_str()), ("deletecollection", "apps"));
        let a = attrs(Method::GET, "/api/v1/namespaces/a", "", false);
        assert_eq!((a.resource.as_str(), a.name.as_str(), a.namespace.as_str()), ("namespaces", "a", "a"));
        let a = attrs(Method::PUT, "/api/v1/namespaces/a/finalize", "", false);
        assert_eq!((a.verb.as_str(), a.resource.as_str(), a.subresource.as_str()), ("update", "namespaces", "finalize"));
        let a = attrs(Method::GET, "/api/v1/pods", "fieldSelector=metadata.name%3Dp", false);
        assert_eq!(a.name, "p");
        assert!(!a.across_namespaces(), "a pinned name is a read of one object");
        assert!(ViewAttributes::of(&Method::GET, "/apis/apps/v1", &Query::default(), false).is_none());
        assert!(ViewAttributes::of(&Method::GET, "/api", &Query::default(), false).is_none());
    }

    #[test]
    fn denials_read_like_kube_apiservers() {
        let a = attrs(Method::GET, "/api/v1/pods", "", false);
        assert_eq!(a.forbidden("u").to_string(), "pods is forbidden: User \"u\" cannot list resource \"pods\" in API group \"\" at the cluster scope");
        let a = attrs(Method::GET, "/api/v1/namespaces/b/pods/p/log", "", false);
        assert_eq!(a.forbidden("u").to_string(), "pods \"p\" is forbidden: User \"u\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"b\"");
        let a = attrs(Method::PATCH, "/apis/apps/v1/namespaces/b/deployments/web", "", false);
        assert_eq!(a.forbidden("u").to_string(), "deployments.apps \"web\" is forbidden: User \"u\" cannot patch resource \"deployments\" in API group \"apps\" in the namespace \"b\"");
    }

    struct Fixed(NamespaceGrant, bool);
    impl ViewAuthorizer for Fixed {
        fn allows<'a>(&'a self, _c: &'a Caller, _a: &'a ViewAttributes) -> BoxFuture<'a, bool> {
            Box::pin(async move { self.1 })
        }
        fn namespaces<'a>(&'a self, _c: &'a Caller, _a: &'a ViewAttributes) -> BoxFuture<'a, NamespaceGrant> {
            Box::pin(async move { self.0.clone() })
        }
        fn fixed(&self, _c: &Caller) -> bool {
            false
        }
        fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
            None
        }
    }

    #[tokio::test]
    async fn reads_across_namespaces_are_filtered_and_the_rest_exact() {
        let c = Caller { user: "u".into(), groups: vec![] };
        let some = NamespaceGrant::of(["a".to_string()].into());
        let list = attrs(Method::GET, "/api/v1/pods", "", false);
        assert_eq!(decide(&Fixed(some.clone(), false), &c, &list).await.unwrap(), some);
        assert!(decide(&Fixed(NamespaceGrant::None, true), &c, &list).await.is_err());
        let one = attrs(Method::GET, "/api/v1/namespaces/a/pods", "", false);
        assert_eq!(decide(&Fixed(NamespaceGrant::None, true), &c, &one).await.unwrap(), NamespaceGrant::All);
        assert!(decide(&Fixed(some, false), &c, &one).await.is_err());
        let mut nodes = attrs(Method::GET, "/api/v1/nodes", "", false);
        nodes.namespaced = false;
        assert!(!nodes.across_namespaces());
        assert!(decide(&Fixed(NamespaceGrant::All, false), &c, &nodes).await.is_err(), "a cluster-scoped kind needs a cluster-wide grant");
    }
}
