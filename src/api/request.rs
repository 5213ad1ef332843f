//! Request parsing: path → resource, verb and query options (mirrors apiserver's RequestInfoFactory).

use std::collections::HashMap;
use std::sync::Arc;

use super::error::ApiError;
use super::registry::{Registry, ResourceInfo};

/// What a path names.
#[derive(Clone)]
pub enum Target {
    /// `/api`: APIVersions.
    CoreVersions,
    /// `/apis`: APIGroupList.
    Groups,
    /// `/apis/<group>`: APIGroup.
    Group(String),
    /// `/api/v1`, `/apis/<g>/<v>`: APIResourceList.
    Resources { group: String, version: String },
    /// A resource request.
    Resource(ResourceRequest),
}

/// A request for a resource (collection or one object, maybe a subresource).
#[derive(Clone)]
pub struct ResourceRequest {
    /// The resource served.
    pub info: Arc<ResourceInfo>,
    /// Namespace from the path (`None` for cluster-scoped or all-namespaces requests).
    pub namespace: Option<String>,
    /// Object name from the path.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`, `finalize`, …).
    pub subresource: Option<String>,
    /// The deprecated `/watch/` path prefix was used.
    pub watch_path: bool,
}

/// Kubernetes verb of a request, for authorization and dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    /// Lower-case name as RBAC spells it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// Parses a URL path against `registry`. Errors: 404 for unknown paths/resources.
pub fn parse_path(registry: &Registry, path: &str) -> Result<Target, ApiError> {
    parse_path_with(registry, path, &|_, _| false)
}

/// [`parse_path`] that also accepts the subresources `extra(info, name)` says are served
/// (handlers registered on the API server, e.g. `serviceaccounts/token`).
pub fn parse_path_with(registry: &Registry, path: &str, extra: &dyn Fn(&ResourceInfo, &str) -> bool) -> Result<Target, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest): (String, String, &[&str]) = match segs.as_slice() {
        ["api"] => return Ok(Target::CoreVersions),
        ["apis"] => return Ok(Target::Groups),
        ["apis", g] => {
            if registry.serves_group(g, None) {
                return Ok(Target::Group(g.to_string()));
            }
            return Err(ApiError::NoSuchResource);
        }
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return Err(ApiError::NoSuchResource),
    };
    if !registry.serves_group(&group, Some(&version)) {
        return Err(ApiError::NoSuchResource);
    }
    if rest.is_empty() {
        return Ok(Target::Resources { group, version });
    }
    let (watch_path, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let lookup = |res: &str| registry.lookup(&group, &version, res);
    // namespaces/<ns>/<resource>/... for namespaced resources
    if let ["namespaces", ns, res, tail @ ..] = rest {
        if let Some(info) = lookup(res).filter(|i| i.namespaced) {
            return build(info, Some(ns.to_string()), tail, watch_path, extra);
        }
    }
    let [res, tail @ ..] = rest else { return Err(ApiError::NoSuchResource) };
    let info = lookup(res).ok_or(ApiError::NoSuchResource)?;
    if info.namespaced && !tail.is_empty() {
        // a namespaced resource addressed without a namespace only lists across namespaces
        return Err(ApiError::NoSuchResource);
    }
    build(info, None, tail, watch_path, extra)
}

fn build(info: Arc<ResourceInfo>, namespace: Option<String>, tail: &[&str], watch_path: bool, extra: &dyn Fn(&ResourceInfo, &str) -> bool) -> Result<Target, ApiError> {
    let (name, subresource) = match tail {
        [] => (None, None),
        [n] => (Some(n.to_string()), None),
        [n, s] if (has_subresource(&info, s) || extra(&info, s)) && !watch_path => (Some(n.to_string()), Some(s.to_string())),
        // an unknown subresource names nothing, whatever the verb (kube-apiserver: 404)
        _ => return Err(ApiError::NoSuchResource),
    };
    Ok(Target::Resource(ResourceRequest { info, namespace, name, subresource, watch_path }))
}

/// The subresources `info` serves: `status`, `scale`, a namespace's `finalize` and a
/// CertificateSigningRequest's `approval`.
fn has_subresource(info: &ResourceInfo, sub: &str) -> bool {
    match sub {
        "status" => info.has_status,
        "scale" => info.has_scale,
        "finalize" => info.group.is_empty() && info.resource == "namespaces",
        "approval" => has_approval(info),
        _ => false,
    }
}

/// Whether `info` has the `approval` subresource (certificates.k8s.io
/// CertificateSigningRequests: `kubectl certificate approve|deny` PUT the whole object there
/// with its new Approved/Denied condition).
pub fn has_approval(info: &ResourceInfo) -> bool {
    info.group == "certificates.k8s.io" && info.resource == "certificatesigningrequests"
}

/// Decoded query string; repeated keys keep the last value.
#[derive(Clone, Debug, Default)]
pub struct Query(pub HashMap<String, String>);

impl Query {
    /// Parses `a=b&c=d` (percent-decoding).
    pub fn parse(q: Option<&str>) -> Self {
        Query(form_urlencoded::parse(q.unwrap_or("").as_bytes()).into_owned().collect())
    }

    /// A value, `None` when absent.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    /// A non-empty value.
    pub fn non_empty(&self, k: &str) -> Option<&str> {
        self.get(k).filter(|v| !v.is_empty())
    }

    /// A boolean query parameter as kube-apiserver reads one (`watch=1`, `watch=true`,
    /// `force=True`, even `watch=`): false only when absent, `0` or `false`. Never fails (the
    /// `Result` keeps callers' `?`).
    pub fn flag(&self, k: &str) -> Result<bool, ApiError> {
        // mirrors apimachinery's Convert_Slice_string_To_bool: only an absent parameter, `0`
        // and `false` (any case) are false; any other value, the empty one included, is true
        Ok(match self.get(k) {
            None => false,
            Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
        })
    }

    /// A non-negative integer.
    pub fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        match self.non_empty(k) {
            None => Ok(None),
            Some(v) => v.parse::<i64>().ok().filter(|n| *n >= 0).map(Some).ok_or_else(|| ApiError::BadRequest(format!("invalid value for {k}: {v:?}"))),
        }
    }
}
