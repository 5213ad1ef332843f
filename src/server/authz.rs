//! Authorization of federation API requests: fixed rules (admins everything, agents their own cluster, bootstrap tokens joining only), then RBAC; uses `api`, `pki` and the server's `rbac`.
//!
//! Runs in [`FederationApp`](super::FederationApp) after authentication and before the
//! [`ApiServer`] touches anything, so a denial changes nothing. The fixed rules below decide
//! first; what they do not allow is asked of the RBAC objects ([`super::rbac`]); the denial
//! message has kube-apiserver's RBAC shape, e.g.
//! `clusters.cluster.fedctl.io "x" is forbidden: User "u" cannot get resource "clusters" in
//! API group "cluster.fedctl.io" at the cluster scope`.
//!
//! | caller | allowed |
//! |---|---|
//! | group `system:masters` | everything |
//! | agent `system:fedctl:agent:<c>` | get/list/watch/update/patch its Cluster `<c>` (and `/status`), create Clusters (admission restricts the name to `<c>`); every verb on namespaced objects in `fed-exec-<c>`; get/list/watch of the namespace `fed-exec-<c>`; create CSRs, get/list/watch its own CSRs |
//! | bootstrap token `system:bootstrap:<id>` | create CSRs, get/list/watch its own CSRs |
//! | anyone authenticated | discovery, OpenAPI, get of `kube-public/cluster-info` |
//! | group `system:monitoring` | get of `/metrics` (as kube's default `system:monitoring` binding) |
//!
//! A list or watch counts as "of one object" when its field selector pins `metadata.name`
//! (as client-go's single-object informers do); "own CSR" means `spec.username` is the caller.

use http::Method;
use serde_json::Value;

use super::rbac::{Attributes, Rbac, Target};
use crate::api::federation::{exec_namespace, CLUSTER_INFO_NAME, CLUSTER_INFO_NAMESPACE};
use crate::api::request::{Query, ResourceRequest, Target as ApiTarget, Verb};
use crate::api::{ApiError, ApiServer, Caller};
use crate::pki::auth::{Identity, UserInfo, BOOTSTRAPPERS_GROUP, BOOTSTRAP_USER_PREFIX};

/// Why a request was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthzError {
    /// The caller may not do this; carries the kube-style message (403).
    #[error("{0}")]
    Forbidden(String),
}

impl From<AuthzError> for ApiError {
    fn from(e: AuthzError) -> Self {
        match e {
            AuthzError::Forbidden(m) => ApiError::Forbidden(m),
        }
    }
}

/// Who the caller is, for the rules above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// `system:masters` member.
    Admin,
    /// The agent of this cluster.
    Agent(String),
    /// A bootstrap-token holder (`system:bootstrap:<id>` in `system:bootstrappers`).
    Bootstrap,
    /// Anyone else.
    Other,
}

impl Principal {
    /// Classifies a caller (an agent identity wins over group membership, as in
    /// [`Identity::from_user`]).
    pub fn of(caller: &Caller) -> Principal {
        if caller.user.starts_with(BOOTSTRAP_USER_PREFIX) && caller.groups.iter().any(|g| g == BOOTSTRAPPERS_GROUP) {
            return Principal::Bootstrap;
        }
        match Identity::from_user(UserInfo { name: caller.user.clone(), groups: caller.groups.clone() }) {
            Identity::Admin(_) => Principal::Admin,
            Identity::Agent { cluster } => Principal::Agent(cluster),
            _ => Principal::Other,
        }
    }
}

/// Group allowed to scrape `/metrics` besides admins (kube-apiserver's default RBAC binds
/// the `system:monitoring` ClusterRole to it).
pub const MONITORING_GROUP: &str = "system:monitoring";

/// Whether `caller` may `GET /metrics`: admins and members of [`MONITORING_GROUP`] by the
/// fixed rules, anyone else only through an RBAC non-resource rule. Errors: the 403
/// kube-apiserver gives for a non-resource URL.
pub fn authorize_metrics(rbac: &Rbac, caller: &Caller) -> Result<(), AuthzError> {
    if Principal::of(caller) == Principal::Admin || caller.groups.iter().any(|g| g == MONITORING_GROUP) {
        return Ok(());
    }
    let a = Attributes { verb: "get", target: Target::NonResource { path: "/metrics" } };
    if rbac.allows(&caller.user, &caller.groups, &a) {
        return Ok(());
    }
    Err(AuthzError::Forbidden(format!("forbidden: User \"{}\" cannot get path \"/metrics\"", caller.user)))
}

/// Decides whether `caller` may send `method path?query`: the fixed rules above first, then
/// the RBAC objects ([`Rbac`]). `Ok` lets the request through (it may still fail in the
/// handler, e.g. 404); `Err` is the 403 to answer. Reads the named
/// CertificateSigningRequest when ownership decides; RBAC reads only memory.
pub async fn authorize(api: &ApiServer, rbac: &Rbac, caller: &Caller, method: &Method, path: &str, query: &Query) -> Result<(), AuthzError> {
    let principal = Principal::of(caller);
    if principal == Principal::Admin {
        return Ok(());
    }
    let (verb, target) = match api.classify(method, path, query) {
        Ok(x) => x,
        // unknown paths and methods: a non-resource request, for RBAC's URL rules
        Err(_) => {
            let verb = method.as_str().to_ascii_lowercase();
            if rbac.allows(&caller.user, &caller.groups, &Attributes { verb: &verb, target: Target::NonResource { path } }) {
                return Ok(());
            }
            return Err(AuthzError::Forbidden(format!("forbidden: User \"{}\" cannot {verb} path \"{path}\"", caller.user)));
        }
    };
    let r = match target {
        ApiTarget::Resource(r) => r,
        _ => return Ok(()), // discovery
    };
    let name = object_name(verb, &r, query);
    let a = Attributes {
        verb: verb.as_str(),
        target: Target::Resource {
            group: r.info.group,
            resource: r.info.resource,
            subresource: r.subresource.as_deref().unwrap_or(""),
            namespace: r.namespace.as_deref().unwrap_or(""),
            name: name.as_deref().unwrap_or(""),
        },
    };
    if allowed(api, &principal, caller, &a).await || rbac.allows(&caller.user, &caller.groups, &a) {
        return Ok(());
    }
    Err(forbidden(caller, verb, &r))
}

/// Whether `caller` may do `a` by the fixed rules or by RBAC: the authorizer chain, for
/// checks made inside a request (impersonation, `bind`/`escalate`, access reviews). Reads
/// the named CertificateSigningRequest when ownership decides.
pub async fn can(api: &ApiServer, rbac: &Rbac, caller: &Caller, a: &Attributes<'_>) -> bool {
    let p = Principal::of(caller);
    if p == Principal::Admin {
        return true;
    }
    if let Target::NonResource { path } = a.target {
        if path == "/metrics" && a.verb == "get" && caller.groups.iter().any(|g| g == MONITORING_GROUP) {
            return true;
        }
    }
    allowed(api, &p, caller, a).await || rbac.allows(&caller.user, &caller.groups, a)
}

/// The federation's authorizer chain as the global view asks it ([`crate::search::access`]):
/// admins by the fixed rules (no further cost, never re-checked), everyone else by the fixed
/// rules and then RBAC — a read across namespaces is granted everywhere by a cluster-wide
/// grant, else in the namespaces RBAC's RoleBindings (and an agent's fixed rules, its exec
/// namespace) grant it.
pub struct ViewAuthz {
    /// For the fixed rules' lookups.
    pub api: std::sync::Arc<ApiServer>,
    /// The RBAC index.
    pub rbac: std::sync::Arc<Rbac>,
}

fn view_attributes(a: &crate::search::access::ViewAttributes) -> Attributes<'_> {
    Attributes { verb: &a.verb, target: Target::Resource { group: &a.group, resource: &a.resource, subresource: &a.subresource, namespace: &a.namespace, name: &a.name } }
}

impl crate::search::access::ViewAuthorizer for ViewAuthz {
    fn allows<'a>(&'a self, caller: &'a Caller, a: &'a crate::search::access::ViewAttributes) -> futures::future::BoxFuture<'a, bool> {
        Box::pin(async move { can(&self.api, &self.rbac, caller, &view_attributes(a)).await })
    }

    fn namespaces<'a>(&'a self, caller: &'a Caller, a: &'a crate::search::access::ViewAttributes) -> futures::future::BoxFuture<'a, crate::search::access::NamespaceGrant> {
        use crate::search::access::NamespaceGrant;
        Box::pin(async move {
            let p = Principal::of(caller);
            if p == Principal::Admin {
                return NamespaceGrant::All;
            }
            let everywhere = crate::search::access::ViewAttributes { namespace: String::new(), ..a.clone() };
            let attrs = view_attributes(&everywhere);
            if allowed(&self.api, &p, caller, &attrs).await {
                return NamespaceGrant::All;
            }
            let grant = self.rbac.namespaces(&caller.user, &caller.groups, &attrs);
            let Principal::Agent(cluster) = &p else { return grant };
            let exec = crate::search::access::ViewAttributes { namespace: exec_namespace(cluster), ..a.clone() };
            if !allowed(&self.api, &p, caller, &view_attributes(&exec)).await {
                return grant;
            }
            match grant {
                NamespaceGrant::All => NamespaceGrant::All,
                NamespaceGrant::Some(set) => {
                    let mut set = (*set).clone();
                    set.insert(exec.namespace);
                    NamespaceGrant::of(set)
                }
                NamespaceGrant::None => NamespaceGrant::of([exec.namespace].into()),
            }
        })
    }

    fn fixed(&self, caller: &Caller) -> bool {
        Principal::of(caller) == Principal::Admin
    }

    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.rbac.subscribe())
    }
}

/// The field selector's pinned `metadata.name`, if it has exactly that requirement.
fn pinned_name(query: &Query) -> Option<String> {
    let fs = query.get("fieldSelector")?.trim();
    let (k, v) = fs.split_once("==").or_else(|| fs.split_once('='))?;
    (k.trim() == "metadata.name" && !v.contains(',') && !k.contains('!')).then(|| v.trim().to_string())
}

/// The single object a request addresses: its path name, or for list/watch a pinned name
/// (as kube-apiserver's RequestInfo takes it from the field selector).
fn object_name(verb: Verb, r: &ResourceRequest, query: &Query) -> Option<String> {
    match verb {
        Verb::List | Verb::Watch if r.name.is_none() => pinned_name(query),
        _ => r.name.clone(),
    }
}

/// The fixed rules (module doc) for a resource request; non-resource requests other than
/// discovery are left to RBAC.
async fn allowed(api: &ApiServer, p: &Principal, caller: &Caller, a: &Attributes<'_>) -> bool {
    let Target::Resource { group, resource, subresource, namespace, name } = a.target else { return false };
    let is = |g: &str, res: &str| group == g && resource == res;
    let verb = a.verb;
    // discovery data for joiners: everyone may read cluster-info
    if is("", "configmaps") && verb == "get" && namespace == CLUSTER_INFO_NAMESPACE && name == CLUSTER_INFO_NAME && subresource.is_empty() {
        return true;
    }
    let csr = is("certificates.k8s.io", "certificatesigningrequests");
    if csr && matches!(p, Principal::Agent(_) | Principal::Bootstrap) {
        return match verb {
            "create" => subresource.is_empty(),
            "get" | "list" | "watch" if subresource.is_empty() && !name.is_empty() => owns_csr(api, caller, name).await,
            _ => false,
        };
    }
    let Principal::Agent(cluster) = p else { return false };
    let exec_ns = exec_namespace(cluster);
    if is("cluster.fedctl.io", "clusters") {
        if verb == "create" {
            return subresource.is_empty(); // the name is checked at admission
        }
        let own = name == cluster.as_str();
        let sub_ok = matches!(subresource, "" | "status");
        return own && sub_ok && matches!(verb, "get" | "list" | "watch" | "update" | "patch");
    }
    if is("", "namespaces") {
        return name == exec_ns && subresource.is_empty() && matches!(verb, "get" | "list" | "watch");
    }
    // a namespace is set only for namespaced resources
    namespace == exec_ns && matches!(verb, "get" | "list" | "watch" | "create" | "update" | "patch" | "delete" | "deletecollection")
}

/// Whether CSR `name` exists and was requested by the caller (`spec.username`).
async fn owns_csr(api: &ApiServer, caller: &Caller, name: &str) -> bool {
    let Some(info) = api.registry.lookup("certificates.k8s.io", "v1", "certificatesigningrequests") else { return false };
    let named = ResourceRequest { info, namespace: None, name: Some(name.to_string()), subresource: None, watch_path: false };
    match api.get(&named).await {
        Ok(obj) => obj.pointer("/spec/username").and_then(Value::as_str) == Some(caller.user.as_str()),
        Err(_) => false,
    }
}

/// The 403 message kube-apiserver's RBAC authorizer would give.
pub fn forbidden(caller: &Caller, verb: Verb, r: &ResourceRequest) -> AuthzError {
    let resource = match &r.subresource {
        Some(s) => format!("{}/{s}", r.info.resource),
        None => r.info.resource.to_string(),
    };
    let scope = match (&r.namespace, r.info.namespaced) {
        (Some(ns), true) => format!("in the namespace \"{ns}\""),
        _ => "at the cluster scope".to_string(),
    };
    let reason = format!("User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}", caller.user, verb.as_str(), r.info.group);
    let msg = match &r.name {
        Some(n) => format!("{} \"{n}\" is forbidden: {reason}", r.info.qualified()),
        None => format!("{} is forbidden: {reason}", r.info.qualified()),
    };
    AuthzError::Forbidden(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(user: &str, groups: &[&str]) -> Caller {
        Caller { user: user.into(), groups: groups.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn principals() {
        assert_eq!(Principal::of(&caller("admin", &["system:masters"])), Principal::Admin);
        assert_eq!(Principal::of(&caller("system:fedctl:agent:east", &["system:fedctl:agents"])), Principal::Agent("east".into()));
        // an agent name wins over a masters group
        assert_eq!(Principal::of(&caller("system:fedctl:agent:east", &["system:masters"])), Principal::Agent("east".into()));
        assert_eq!(Principal::of(&caller("system:bootstrap:abcdef", &["system:bootstrappers", "system:authenticated"])), Principal::Bootstrap);
        assert_eq!(Principal::of(&caller("system:bootstrap:abcdef", &[])), Principal::Other);
        assert_eq!(Principal::of(&caller("jane", &["dev"])), Principal::Other);
    }

    #[test]
    fn pinned_names() {
        let q = |s: &str| Query::parse(Some(s));
        assert_eq!(pinned_name(&q("fieldSelector=metadata.name%3Deast")), Some("east".into()));
        assert_eq!(pinned_name(&q("fieldSelector=metadata.name%3D%3Deast")), Some("east".into()));
        assert_eq!(pinned_name(&q("fieldSelector=metadata.name!%3Deast")), None);
        assert_eq!(pinned_name(&q("fieldSelector=metadata.name%3Deast,metadata.namespace%3Dx")), None);
        assert_eq!(pinned_name(&q("labelSelector=a%3Db")), None);
    }

    #[test]
    fn forbidden_messages() {
        let reg = crate::api::Registry::federation();
        let c = caller("system:fedctl:agent:a", &[]);
        let clusters = ResourceRequest { info: reg.lookup("cluster.fedctl.io", "v1alpha1", "clusters").unwrap(), namespace: None, name: Some("x".into()), subresource: None, watch_path: false };
        assert_eq!(
            forbidden(&c, Verb::Get, &clusters).to_string(),
            "clusters.cluster.fedctl.io \"x\" is forbidden: User \"system:fedctl:agent:a\" cannot get resource \"clusters\" in API group \"cluster.fedctl.io\" at the cluster scope"
        );
        let works = ResourceRequest { info: reg.lookup("work.fedctl.io", "v1alpha1", "works").unwrap(), namespace: Some("fed-exec-b".into()), name: None, subresource: None, watch_path: false };
        assert_eq!(
            forbidden(&c, Verb::List, &works).to_string(),
            "works.work.fedctl.io is forbidden: User \"system:fedctl:agent:a\" cannot list resource \"works\" in API group \"work.fedctl.io\" in the namespace \"fed-exec-b\""
        );
        let status = ResourceRequest { subresource: Some("status".into()), ..clusters };
        assert!(forbidden(&c, Verb::Update, &status).to_string().contains("cannot update resource \"clusters/status\""));
    }
}
