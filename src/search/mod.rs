//! The global resource view's Router and MUX: `/apis/search.fedctl.io/v1alpha1/global/<path>`
//! (all members as one) and `…/clusters/<name>/<path>` (one member), in the server or in a
//! `fedctl cache` process ([`process`]); uses `cache`, `api`, `storage`, `pki`, `http` and
//! `telemetry`.
//!
//! Under either prefix any Kubernetes API path answers: discovery (`/api`, `/apis`,
//! `/api/v1`, `/apis/<g>/<v>`, `/version`) describes the member kinds; LIST, WATCH and GET
//! of cached kinds are served from the [`GlobalCache`]; everything else (writes,
//! subresources such as `log`, non-cached kinds) is proxied to the owning member with the
//! credential its agent synced, acting as the federation's caller (impersonation headers, see
//! [`member`]), so the member's RBAC decides and its 403 is passed through. A LIST of a kind
//! the cache does not hold fans out to every member ([`member::list`]), as does a DELETE of a
//! collection; a create names no member and is a 400 in the global scope. Upgrade requests
//! (`exec`, `attach`, `portforward` over WebSocket or SPDY/3.1) are forwarded the same way
//! and, on the member's 101, joined byte for byte with the client's connection
//! ([`SearchApi::proxy_upgrade`]). Every resource request is authorized by the federation
//! first ([`access`]): a read across namespaces sees only the namespaces the caller is granted
//! it in (a watch of such a read ends with a 410 when the caller's grants change), anything
//! else needs the exact grant; discovery and OpenAPI are open to every authenticated caller.
//!
//! Resource versions in this view are global ([`crate::cache::rv::GlobalRv`]); LIST items
//! carry their member resourceVersion (also in the annotation
//! `fedctl.io/member-resource-version`), watch events the global resourceVersion after the
//! event. LIST pages merge every shard and cluster in key order (namespace, name, cluster).
//! Continue tokens are base64url of `{"rv": <global rv>, "k": [namespace, name, cluster],
//! "m": <shard map version>, "p": "<cluster>/<namespace>"}` (`p` binds the token to the path
//! it was issued for; another path answers 400): every page is served from the first page's snapshot (the
//! current state with later events rolled back), so each object appears exactly once and the
//! pages together are the state at `rv`; when events after `rv` have left a shard's window the
//! page is 410 Expired, as kube-apiserver answers an expired continue token.
//! `resourceVersionMatch=Exact` with a global resourceVersion lists that snapshot likewise.
//! Reads of cached kinds (LIST, GET, WATCH) carry one `Warning` header per member whose
//! objects may be stale ([`GlobalCache::stale_warnings`]; through the MUX the endpoints'
//! warnings are forwarded, deduplicated). Watches count against the caller's
//! `--max-watches-per-user` like the federation API's (429 beyond it), and a watcher that does
//! not read for the watch send timeout is dropped (its stream ends; the client resumes from
//! its last resourceVersion), as the federation store's watchers are.
//! `GET …/v1alpha1/shards` reports the shard map version and each shard's objects and ring
//! (with `--cache-endpoints`: `{"endpoints": [{"endpoint": url, "status": <its /shards>}]}`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};

use crate::api::handler::{error_response, json_response, Body, Response, WatchSlot};
use crate::api::registry::ResourceInfo;
use crate::api::request::{Query, ResourceRequest, Target};
use crate::api::selector::{FieldSelector, LabelSelector, Requirement};
use crate::api::{discovery, table, watch, ApiError, ApiServer, Caller, Limits};
use crate::cache::rv::GlobalRv;
use crate::cache::store::{Event, EventType, Key, KindStore, Obj, Scope as ListScope, WatchFilter};
use crate::cache::{CacheError, GlobalCache};
use access::NamespaceGrant;

/// The path prefix of the view.
pub const PREFIX: &str = "/apis/search.fedctl.io/v1alpha1";

/// Internal watch parameter (`fedctlProgress=true`): bookmarks as soon as the watcher's
/// position advances past what the client knows (checked every [`PROGRESS_INTERVAL`]; the
/// first one also reports how far the replay of a resumed watch went, even when none of the
/// replayed events was in the watcher's scope and nothing follows), each one taken only when
/// the watcher has caught up with the store, so every event up to it was sent and it is a
/// complete position. The MUX over `fedctl cache` processes ([`remote`]) asks for it: it emits
/// one process's events only once every other process has reported reaching them.
pub const PROGRESS_PARAM: &str = "fedctlProgress";

/// Internal LIST parameter (`fedctlPageBytes=N`): a page with a `limit` also ends once its
/// items reach about `N` bytes as written (at least one item per page), with a continue
/// token as usual, so a page may hold fewer than `limit` objects (as Kubernetes allows).
/// The MUX over `fedctl cache` processes ([`remote`]) asks for it: its page buffers are then
/// bounded by bytes, whatever the objects' sizes. Ignored without `limit`; 0 or absent: no
/// bound.
pub const PAGE_BYTES_PARAM: &str = "fedctlPageBytes";

/// How long a proxied request waits for the member's response head (kube-apiserver's default
/// `--request-timeout`); then 503. Streams (watches, followed logs) run on after their head.
pub const MEMBER_RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a `fedctlProgress` watcher checks for progress.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

pub mod access;
pub mod hub;
pub mod member;
pub mod process;
pub mod remote;

/// Federation group bound by default (ClusterRoleBinding `fedctl:global-view`) to the
/// ClusterRole `fedctl:global-view`: reading the kinds the view can cache (secrets aside) and
/// pods' logs, in every namespace. What such a user may then do on a member is also the
/// member's RBAC's decision (the user is impersonated there).
pub const VIEW_GROUP: &str = "fedctl.io:global-view";

/// Errors of the router (rendered as Kubernetes Status objects).
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// A bad parameter, resourceVersion or continue token (400).
    #[error("{0}")]
    BadRequest(String),
    /// The member could not be reached (503).
    #[error("member {cluster}: {message}")]
    Member { cluster: String, message: String },
}

impl From<SearchError> for ApiError {
    fn from(e: SearchError) -> ApiError {
        match e {
            SearchError::BadRequest(m) => ApiError::BadRequest(m),
            e @ SearchError::Member { .. } => ApiError::Unavailable(e.to_string()),
        }
    }
}

/// The answer to a read of a cached kind while the cache starts ([`GlobalCache::initialized`]):
/// 429 with `Retry-After: 1`, as kube-apiserver answers while its watch cache initializes.
pub(crate) fn initializing() -> ApiError {
    ApiError::TooManyRequests { message: "the global view is initializing (its first list of the members has not ended); retry".into(), retry_after_seconds: 1 }
}

fn cache_err(e: CacheError) -> ApiError {
    match e {
        CacheError::MalformedRv(_) => ApiError::BadRequest(e.to_string()),
        CacheError::Expired(m) => ApiError::Expired(m),
        other => ApiError::Internal(other.to_string()),
    }
}

/// Serves the view.
pub struct SearchApi {
    /// The cache.
    pub cache: Arc<GlobalCache>,
    /// `/version` answer.
    pub version: Value,
    /// `host:port` of this server (APIVersions).
    pub server_address: String,
    /// Interval between bookmarks to watchers that asked for them.
    pub bookmark_interval: Duration,
    /// Cached kinds are read from these `fedctl cache` processes instead of `cache`'s
    /// stores (`fedctl server --cache-endpoints`); `cache` then only tracks members.
    pub remote: Option<Arc<remote::RemoteMux>>,
    /// The federation API whose [`Limits`] and per-user watch count global-view watches share
    /// (`fedctl server`); `None` (a `fedctl cache` process, whose only caller is the MUX, which
    /// applies the limits to its own clients): no per-user bound, the default buffer and no
    /// send timeout (the MUX is never dropped for reading slowly).
    pub api: Option<Arc<ApiServer>>,
    /// The federation's authorizer, asked before anything is read or proxied
    /// ([`access::decide`]); [`access::MastersOnly`] in a `fedctl cache` process.
    pub authorizer: Arc<dyn access::ViewAuthorizer>,
}

/// Adds `warnings` to `resp`'s `Warning` headers, each value once.
pub fn add_warnings(resp: &mut Response, warnings: &[String]) {
    for w in warnings {
        let Ok(v) = http::HeaderValue::from_str(w) else { continue };
        if !resp.headers().get_all(http::header::WARNING).iter().any(|h| h == v) {
            resp.headers_mut().append(http::header::WARNING, v);
        }
    }
}

/// Queues one line for a global-view watcher; `Err` when the client is gone or its buffer
/// stayed full for `timeout` (the watcher is dropped, as the federation store's are: counted
/// in `apiserver_terminated_watchers_total`; its stream ends and the client resumes from its
/// last resourceVersion).
pub(crate) async fn push_line(tx: &tokio::sync::mpsc::Sender<Bytes>, line: Bytes, timeout: Duration, resource: &str) -> Result<(), ()> {
    match tx.try_send(line) {
        Ok(()) => Ok(()),
        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => Err(()),
        Err(tokio::sync::mpsc::error::TrySendError::Full(line)) => match tokio::time::timeout(timeout, tx.send(line)).await {
            Ok(r) => r.map_err(|_| ()),
            Err(_) => {
                crate::telemetry::metrics::server().terminated_watchers.inc();
                tracing::info!(resource, ?timeout, "global view: dropping a watcher that does not read its events");
                Err(())
            }
        },
    }
}

/// One watch event line of the view for `obj`: the object itself, or with `as_table` a Table
/// row (column definitions only in the watch's first row, tracked by `first_table`). Shared
/// by the in-process watchers and the MUX over cache processes.
pub(crate) fn object_line(info: &ResourceInfo, ty: &str, obj: Value, rv: &str, as_table: bool, include_object: &str, first_table: &mut bool) -> Bytes {
    if as_table {
        let t = table::table(info, std::slice::from_ref(&obj), json!({"resourceVersion": rv}), include_object, *first_table);
        *first_table = false;
        watch::event_line(ty, &t)
    } else {
        watch::event_line(ty, &obj)
    }
}

/// A BOOKMARK line at `rv` for the kind `info`; `initial_end` marks the end of the initial
/// events (annotation `k8s.io/initial-events-end`, as kube-apiserver's sendInitialEvents).
pub(crate) fn bookmark_line(info: &ResourceInfo, rv: &str, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    watch::event_line("BOOKMARK", &json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": meta}))
}

/// Which members a request addresses.
#[derive(Clone, Debug)]
enum Scope {
    Global,
    Cluster(String),
}

impl Scope {
    fn cluster(&self) -> Option<&str> {
        match self {
            Scope::Global => None,
            Scope::Cluster(c) => Some(c),
        }
    }
}

impl SearchApi {
    /// Handles a request whose path starts with [`PREFIX`].
    pub async fn handle(self: &Arc<Self>, req: crate::http::Request, caller: &Caller) -> Response {
        match self.route(req, caller).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        }
    }

    /// The limits global-view watches follow (see [`SearchApi::api`]).
    fn limits(&self) -> Limits {
        match &self.api {
            Some(a) => a.config.limits.clone(),
            None => Limits { max_watches_per_user: 0, watch_send_timeout: Duration::from_secs(365 * 24 * 3600), ..Limits::default() },
        }
    }

    /// One watch slot of `caller` (429 when it holds the most allowed), or none when unbounded.
    fn watch_slot(&self, caller: &Caller) -> Result<Option<WatchSlot>, ApiError> {
        self.api.as_ref().map(|a| a.acquire_watch(&caller.user)).transpose()
    }

    async fn route(self: &Arc<Self>, req: crate::http::Request, caller: &Caller) -> Result<Response, ApiError> {
        let path = req.uri().path().to_string();
        let rest = path.strip_prefix(PREFIX).unwrap_or("");
        let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        let (scope, sub) = match segs.as_slice() {
            [] => return Ok(json_response(StatusCode::OK, &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "search.fedctl.io/v1alpha1", "resources": []}))),
            ["shards"] if req.method() == Method::GET => {
                let a = access::ViewAttributes {
                    verb: "get".into(),
                    group: "search.fedctl.io".into(),
                    resource: "shards".into(),
                    subresource: String::new(),
                    namespace: String::new(),
                    name: String::new(),
                    namespaced: false,
                };
                access::decide(&*self.authorizer, caller, &a).await?;
                return Ok(json_response(
                    StatusCode::OK,
                    &match &self.remote {
                        Some(mux) => mux.status().await,
                        None => self.cache.status(),
                    },
                ));
            }
            ["global", tail @ ..] => (Scope::Global, tail.join("/")),
            ["clusters", name, tail @ ..] => {
                // (a zone cache process holds nothing of another zone's member: an empty part)
                if self.cache.member_client(name).is_none() && !self.cache.is_foreign(name) {
                    return Err(ApiError::NotFound { resource: "clusters".into(), name: name.to_string() });
                }
                (Scope::Cluster(name.to_string()), tail.join("/"))
            }
            _ => return Err(ApiError::NoSuchResource),
        };
        let sub = format!("/{sub}");
        // the custom resources of the federation's CRDs are served across members too
        if let Some(api) = &self.api {
            self.cache.member_registry.follow_custom(&api.registry);
        }
        let reg = &*self.cache.member_registry.snapshot();
        match sub.as_str() {
            "/version" => return Ok(json_response(StatusCode::OK, &self.version)),
            "/" => return Err(ApiError::NoSuchResource),
            s if s == "/openapi/v2" || s == "/openapi/v3" || s.starts_with("/openapi/v3/") => {
                let view = path.strip_suffix(s).unwrap_or(&path);
                let accept = req.headers().get("accept").and_then(|v| v.to_str().ok());
                return openapi(reg, view, s, accept);
            }
            _ => {}
        }
        let target = match crate::api::request::parse_path_with(reg, &sub, &member_subresource) {
            // a kind the view does not know (a member's own CustomResourceDefinition): the
            // member named decides, as for any proxied request
            Err(ApiError::NoSuchResource) if scope.cluster().is_some() && (sub.starts_with("/apis/") || sub.starts_with("/api/")) => {
                let q = Query::parse(req.uri().query());
                if let Some(a) = access::ViewAttributes::of(req.method(), &sub, &q, is_upgrade(req.headers())) {
                    if let NamespaceGrant::Some(_) = access::decide(&*self.authorizer, caller, &a).await? {
                        return Err(limited_stream(&a, &caller.user));
                    }
                }
                let slot = if req.method() == Method::GET && q.flag("watch")? { self.watch_slot(caller)? } else { None };
                let cluster = scope.cluster().expect("checked").to_string();
                return self.proxy(&cluster, req, &sub, slot, caller).await;
            }
            t => t?,
        };
        let rr = match target {
            Target::CoreVersions => return Ok(json_response(StatusCode::OK, &discovery::core_versions(&self.server_address))),
            Target::Groups => return Ok(json_response(StatusCode::OK, &discovery::group_list(reg))),
            Target::Group(g) => return discovery::group(reg, &g).map(|v| json_response(StatusCode::OK, &v)).ok_or(ApiError::NoSuchResource),
            Target::Resources { group, version } => return Ok(json_response(StatusCode::OK, &discovery::resource_list(reg, &group, &version))),
            Target::Resource(rr) => rr,
        };
        let q = Query::parse(req.uri().query());
        // the federation decides first: nothing is read or sent to a member before (grants
        // followed from here on, so a change while deciding is seen by a watch)
        let changes = self.authorizer.changes();
        let mut attrs = access::ViewAttributes::of(req.method(), &sub, &q, is_upgrade(req.headers())).ok_or(ApiError::MethodNotAllowed)?;
        attrs.namespaced = rr.info.namespaced;
        let grant = access::decide(&*self.authorizer, caller, &attrs).await?;
        let only = grant.limited().cloned();
        let accept = req.headers().get("accept").and_then(|v| v.to_str().ok()).map(str::to_string);
        let want_table = table::wants_table(accept.as_deref());
        let include_object = q.get("includeObject").unwrap_or("Metadata").to_string();
        let store = self.cache.kind(rr.info.group, rr.info.resource).cloned();
        if let (Some(store), true, None) = (&store, req.method() == Method::GET, &rr.subresource) {
            if !self.cache.initialized() {
                return Err(initializing());
            }
            let watching = rr.watch_path || q.flag("watch")?;
            let slot = if watching { self.watch_slot(caller)? } else { None };
            let warnings = self.cache.stale_warnings(store.info.resource, scope.cluster());
            let mut resp = if let Some(mux) = &self.remote {
                let limits = self.limits();
                let ctx = remote::ReadCtx {
                    info: store.info.clone(),
                    sub: sub.clone(),
                    cluster: scope.cluster().map(str::to_string),
                    want_table,
                    include_object,
                    bookmark_interval: self.bookmark_interval,
                    buffer: limits.watch_buffer_events.max(1),
                    send_timeout: limits.watch_send_timeout,
                    namespaces: only.clone(),
                };
                if watching {
                    mux.watch(&rr, &q, ctx, slot).await?
                } else if rr.name.is_some() {
                    mux.get(&rr, ctx).await?
                } else {
                    mux.list(&rr, &q, ctx).await?
                }
            } else if watching {
                self.watch(store, &rr, &q, scope.cluster(), want_table, include_object, slot, only.clone())?
            } else if rr.name.is_some() {
                get(store, &rr, scope.cluster(), want_table, &include_object)?
            } else {
                list(store, &rr, &q, scope.cluster(), want_table, &include_object, only.as_ref(), &|g| self.cache.local_rv(g))?
            };
            if watching {
                resp = self.end_on_change(resp, caller, attrs, grant, changes);
            }
            add_warnings(&mut resp, &warnings);
            return Ok(resp);
        }
        // proxied: a watch holds one of the caller's watch slots for the life of the member's
        // stream, as a watch served from the cache does
        let watching = req.method() == Method::GET && (rr.watch_path || q.flag("watch")?);
        if only.is_some() {
            // a read across namespaces granted in some of them: a LIST is filtered (one
            // member's or every member's), a proxied watch cannot be
            if watching {
                return Err(limited_stream(&attrs, &caller.user));
            }
            if req.method() == Method::GET {
                let members = match &scope {
                    Scope::Cluster(c) => vec![c.clone()],
                    Scope::Global => self.cache.member_names(),
                };
                let fan = member::FanOut { cache: &self.cache, caller, info: &rr.info, sub: &sub, query: &q, members, namespaces: only.as_deref() };
                return member::list(fan, want_table, &include_object).await;
            }
        }
        if let (Scope::Global, None) = (&scope, &rr.name) {
            let fan = member::FanOut { cache: &self.cache, caller, info: &rr.info, sub: &sub, query: &q, members: self.cache.member_names(), namespaces: None };
            match *req.method() {
                Method::POST => {
                    return Err(ApiError::BadRequest(format!(
                        "a create through the global view names no member cluster: send it to one with {PREFIX}/clusters/<name>/… (kubectl: --context cluster-<name>)"
                    )))
                }
                Method::GET if store.is_none() && watching => {
                    return Err(ApiError::BadRequest(format!(
                        "{} are not cached by the global view (the server's --cache-resources), so they cannot be watched across all members: a merged watch needs one resourceVersion over every member, which only the cache keeps; watch one member through clusters/<name>/…",
                        rr.info.resource
                    )))
                }
                Method::GET if store.is_none() => return member::list(fan, want_table, &include_object).await,
                Method::DELETE => return member::delete_collection(fan).await,
                _ => {}
            }
        }
        // a followed log is a long-running stream too: it holds a slot like a watch, as does
        // an exec, attach or port-forward session (an upgraded connection)
        let upgrade = is_upgrade(req.headers());
        let streaming = watching || upgrade || (rr.subresource.as_deref() == Some("log") && q.flag("follow")?);
        let slot = if streaming { self.watch_slot(caller)? } else { None };
        let cluster = match &scope {
            Scope::Cluster(c) => c.clone(),
            Scope::Global => self.owner(store.as_deref(), &rr, &sub, caller).await?,
        };
        if upgrade {
            return self.proxy_upgrade(&cluster, req, &sub, slot, caller).await;
        }
        self.proxy(&cluster, req, &sub, slot, caller).await
    }

    /// Forwards an upgrade request (exec, attach, port-forward: WebSocket or SPDY/3.1) to
    /// member `cluster` as `caller`, with its upgrade headers ([`UPGRADE_REQUEST_HEADERS`]).
    /// On the member's 101 the answer is a 101 with the member's protocol headers
    /// ([`UPGRADE_RESPONSE_HEADERS`]), and the two upgraded connections are joined byte for
    /// byte ([`join_upgraded`]: one side's end is passed on, and both close at most
    /// [`UPGRADE_HALF_CLOSE_GRACE`] later); `slot` is held as long. Any other answer (the member's 403, 404, 400) is
    /// passed through as [`SearchApi::proxy`] does. Errors: 503 when the member gives no
    /// answer within [`MEMBER_RESPONSE_TIMEOUT`] or cannot be reached.
    async fn proxy_upgrade(&self, cluster: &str, mut req: crate::http::Request, sub: &str, slot: Option<WatchSlot>, caller: &Caller) -> Result<Response, ApiError> {
        let (http, server) = self.cache.member_client(cluster).ok_or_else(|| ApiError::NotFound { resource: "clusters".into(), name: cluster.into() })?;
        let client_side = hyper::upgrade::on(&mut req);
        let mut url = format!("{server}{sub}");
        if let Some(q) = req.uri().query() {
            url.push('?');
            url.push_str(q);
        }
        let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes()).map_err(|_| ApiError::MethodNotAllowed)?;
        let mut rb = member::impersonate(http.request(method.clone(), url), caller);
        for (name, value) in req.headers() {
            if UPGRADE_REQUEST_HEADERS.contains(&name.as_str()) {
                rb = rb.header(name.as_str(), value.as_bytes());
            }
        }
        let resp = send_to_member(cluster, method.as_str(), rb).await?;
        let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        if status != StatusCode::SWITCHING_PROTOCOLS {
            let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("application/json").to_string();
            let mut out = http::Response::builder().status(status).header("content-type", ct);
            for (name, value) in resp.headers() {
                if name == "warning" || name == "x-accepted-stream-protocol-versions" {
                    out = out.header(name.as_str(), value.as_bytes());
                }
            }
            let stream = resp.bytes_stream().map(|r| r.map(Frame::data).map_err(std::io::Error::other));
            return Ok(out.body(BodyExt::boxed(StreamBody::new(stream))).expect("valid response"));
        }
        let mut out = http::Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
        for (name, value) in resp.headers() {
            if UPGRADE_RESPONSE_HEADERS.contains(&name.as_str()) {
                out = out.header(name.as_str(), value.as_bytes());
            }
        }
        let member = cluster.to_string();
        let hold = req.extensions().get::<crate::http::Hold>().cloned();
        tokio::spawn(async move {
            let (_slot, _hold) = (slot, hold);
            let (theirs, ours) = match tokio::join!(resp.upgrade(), client_side) {
                (Ok(m), Ok(c)) => (m, c),
                (m, c) => {
                    tracing::debug!(cluster = %member, member_err = ?m.err(), client_err = ?c.err(), "global view: an upgraded connection did not start");
                    return;
                }
            };
            join_upgraded(hyper_util::rt::TokioIo::new(ours), theirs, &member).await;
        });
        Ok(out.body(BodyExt::boxed(http_body_util::Empty::new().map_err(|never| match never {}))).expect("valid response"))
    }

    /// The member holding the object a global request names (cached kinds: from the cache;
    /// others: by asking every member as `caller`). Errors: 404 none, 409 several, 400 no
    /// object named and several members.
    async fn owner(&self, store: Option<&KindStore>, rr: &ResourceRequest, sub: &str, caller: &Caller) -> Result<String, ApiError> {
        let members = self.cache.member_names();
        let Some(name) = rr.name.clone() else {
            if members.len() == 1 {
                return Ok(members[0].clone());
            }
            return Err(ApiError::BadRequest(match store {
                None => format!(
                    "{} are not cached by the global view (the server's --cache-resources), so they cannot be listed or watched across all {} members; ask one member through clusters/<name>/…",
                    rr.info.resource,
                    members.len()
                ),
                Some(_) => format!("this request names no object, so which of the {} members it is for is ambiguous in the global view; send it to one through clusters/<name>/…", members.len()),
            }));
        };
        let owners: Vec<String> = match store {
            Some(_) if self.remote.is_some() => {
                let mux = self.remote.as_ref().expect("checked");
                mux.owners(rr, sub).await?
            }
            Some(s) => s.get(rr.namespace.as_deref().unwrap_or(""), &name).into_iter().map(|(k, _)| k.2.to_string()).collect(),
            None => {
                let obj_path = match &rr.subresource {
                    Some(s) => sub.strip_suffix(&format!("/{s}")).unwrap_or(sub).to_string(),
                    None => sub.to_string(),
                };
                // asked as the caller: a member that refuses to show it (403) may hold it, and
                // when none shows it the request goes to the first of those, whose refusal
                // is then the answer
                let mut found = Vec::new();
                let mut refused = Vec::new();
                for m in members {
                    let Some((http, server)) = self.cache.member_client(&m) else { continue };
                    if let Ok(r) = member::impersonate(http.get(format!("{server}{obj_path}")), caller).timeout(member::FAN_OUT_MEMBER_TIMEOUT).send().await {
                        if r.status().is_success() {
                            found.push(m);
                        } else if r.status() == reqwest::StatusCode::FORBIDDEN {
                            refused.push(m);
                        }
                    }
                }
                if found.is_empty() {
                    refused.truncate(1);
                    refused
                } else {
                    found
                }
            }
        };
        match owners.len() {
            0 => Err(ApiError::NotFound { resource: rr.info.resource.to_string(), name }),
            1 => Ok(owners[0].clone()),
            _ => Err(ambiguous(rr, &name, &owners)),
        }
    }

    /// Forwards `req` (path `sub` under the member's root) to member `cluster` as `caller`
    /// ([`member::impersonate`]), streaming the answer back (logs `follow`, watches of
    /// non-cached kinds) with the member's status, body and `Warning` headers as they are (its
    /// 403 included). `slot` (a proxied watch's or followed log's) is held until the answer's
    /// stream ends or is dropped (the client went away). The request body is bounded like the
    /// federation API's (`max_body_bytes`, else 413); no response head within
    /// [`MEMBER_RESPONSE_TIMEOUT`] is a 503.
    async fn proxy(&self, cluster: &str, req: crate::http::Request, sub: &str, slot: Option<WatchSlot>, caller: &Caller) -> Result<Response, ApiError> {
        let (http, server) = self.cache.member_client(cluster).ok_or_else(|| ApiError::NotFound { resource: "clusters".into(), name: cluster.into() })?;
        let (parts, body) = req.into_parts();
        let max = self.limits().max_body_bytes;
        let body = match http_body_util::Limited::new(body, max).collect().await {
            Ok(c) => c.to_bytes(),
            Err(e) if crate::http::is_length_limit(e.as_ref()) => return Err(ApiError::TooLarge(format!("Request entity too large: limit is {max}"))),
            Err(e) => return Err(ApiError::BadRequest(format!("request body: {e}"))),
        };
        let mut url = format!("{server}{sub}");
        if let Some(q) = parts.uri.query() {
            url.push('?');
            url.push_str(q);
        }
        let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).map_err(|_| ApiError::MethodNotAllowed)?;
        let mut rb = member::impersonate(http.request(method.clone(), url), caller);
        for h in ["content-type", "accept"] {
            if let Some(v) = parts.headers.get(h).and_then(|v| v.to_str().ok()) {
                rb = rb.header(h, v);
            }
        }
        if !body.is_empty() {
            rb = rb.body(body);
        }
        let resp = send_to_member(cluster, method.as_str(), rb).await?;
        let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("application/json").to_string();
        let warnings: Vec<String> = resp.headers().get_all("warning").iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect();
        let stream = resp.bytes_stream().map(move |r| {
            let _held = &slot;
            r.map(Frame::data).map_err(std::io::Error::other)
        });
        let mut out = http::Response::builder().status(status).header("content-type", ct).body(BodyExt::boxed(StreamBody::new(stream))).expect("valid response");
        for w in warnings.iter().filter_map(|w| http::HeaderValue::from_str(w).ok()) {
            out.headers_mut().append(http::header::WARNING, w);
        }
        Ok(out)
    }

    /// Ends the watch answer `resp`, opened under `grant`, once the caller's grants for
    /// `attrs` change (each time `changes` moves, [`access::decide`] is asked again): an ERROR
    /// event `410 Expired` is sent and the stream ends, so an informer relists under its new
    /// rights (a 403 if none are left, only the namespaces still granted otherwise). This is
    /// stricter than kube-apiserver, which authorizes a watch once, when it starts, and lets it
    /// run to its timeout whatever happens to the caller's bindings: here a watch filtered by
    /// a namespace grant would otherwise go on showing namespaces taken away from the caller,
    /// or never show the ones given to it, for up to an hour. A caller decided by fixed rules
    /// (an admin) is not followed: its stream is returned as it is.
    fn end_on_change(&self, resp: Response, caller: &Caller, attrs: access::ViewAttributes, grant: NamespaceGrant, changes: Option<tokio::sync::watch::Receiver<u64>>) -> Response {
        let Some(mut changes) = changes.filter(|_| !self.authorizer.fixed(caller)) else { return resp };
        let (parts, mut body) = resp.into_parts();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let authz = self.authorizer.clone();
        let caller = caller.clone();
        tokio::spawn(async move {
            let mut followed = true;
            loop {
                tokio::select! {
                    f = body.frame() => match f {
                        Some(f) => {
                            if tx.send(f).await.is_err() {
                                return;
                            }
                        }
                        None => return,
                    },
                    r = changes.changed(), if followed => {
                        if r.is_err() {
                            followed = false;
                            continue;
                        }
                        let now = access::decide(&*authz, &caller, &attrs).await.ok();
                        if now.as_ref() != Some(&grant) {
                            tracing::debug!(user = %caller.user, resource = %attrs.resource, "global view: the caller's grants changed; ending its watch");
                            let e = ApiError::Expired(format!("the grants of User \"{}\" for {} changed: list again", caller.user, attrs.resource));
                            let _ = tx.send(Ok(Frame::data(watch::error_line(&e)))).await;
                            return;
                        }
                    }
                    _ = tx.closed() => return,
                }
            }
        });
        http::Response::from_parts(parts, BodyExt::boxed(StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    #[allow(clippy::too_many_arguments)]
    fn watch(
        &self,
        store: &Arc<KindStore>,
        rr: &ResourceRequest,
        q: &Query,
        cluster: Option<&str>,
        as_table: bool,
        include_object: String,
        slot: Option<WatchSlot>,
        only: Option<Arc<BTreeSet<String>>>,
    ) -> Result<Response, ApiError> {
        let (labels, fields) = selectors(rr, q)?;
        let rv = q.get("resourceVersion").unwrap_or("");
        let send_initial = q.flag("sendInitialEvents")?;
        let from = if rv.is_empty() || rv == "0" || send_initial { None } else { Some(self.cache.local_rv(GlobalRv::decode(rv).map_err(cache_err)?)) };
        if send_initial && !rv.is_empty() && rv != "0" {
            GlobalRv::decode(rv).map_err(cache_err)?;
        }
        let timeout = match q.int("timeoutSeconds")? {
            Some(t) if t > 0 => Duration::from_secs(t as u64),
            _ => Duration::from_secs(1800 + rand::random::<u64>() % 1800),
        };
        let limits = self.limits();
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(limits.watch_buffer_events.max(1));
        // the dispatch index: the first equality requirement of the label selector, else the namespace
        let mut filter = WatchFilter {
            namespace: rr.namespace.clone(),
            label: labels.reqs.iter().find_map(|r| match r {
                Requirement::Eq(k, v) => Some((k.clone(), v.clone())),
                Requirement::In(k, vs) if vs.len() == 1 => Some((k.clone(), vs[0].clone())),
                _ => None,
            }),
        };
        // granted in one namespace: offered only that namespace's events
        if let (None, Some(set)) = (&filter.namespace, &only) {
            if set.len() == 1 {
                filter.namespace = set.iter().next().cloned();
            }
        }
        match store.subscribe(from, &filter) {
            Err(e) => {
                let _ = tx.try_send(watch::error_line(&cache_err(e)));
            }
            Ok(sub) => {
                let w = Watcher {
                    store: store.clone(),
                    tx,
                    namespace: rr.namespace.clone(),
                    cluster: cluster.map(str::to_string),
                    only,
                    labels,
                    fields,
                    as_table,
                    include_object,
                    first_table: true,
                    bookmarks: q.flag("allowWatchBookmarks")?,
                    progress: q.flag(PROGRESS_PARAM)?,
                    send_initial,
                    interval: self.bookmark_interval,
                    timeout,
                    send_timeout: limits.watch_send_timeout,
                    _slot: slot,
                };
                tokio::spawn(w.run(sub));
            }
        }
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|b| Ok::<_, std::io::Error>(Frame::data(b)));
        Ok(http::Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .header("cache-control", "no-cache, private")
            .body(BodyExt::boxed(StreamBody::new(stream)) as Body)
            .expect("valid response"))
    }
}

/// The view's OpenAPI documents (the member kinds; kubectl's `edit`, `apply` and validation
/// read them): `/openapi/v2` (protobuf when asked for), `/openapi/v3` with each group-version's
/// `serverRelativeURL` under the view's own prefix `view` (client-go requests it as given, from
/// the server root), and `/openapi/v3/<gv>`.
fn openapi(reg: &crate::api::Registry, view: &str, sub: &str, accept: Option<&str>) -> Result<Response, ApiError> {
    if sub == "/openapi/v2" {
        if discovery::wants_openapi_v2_protobuf(accept) {
            let body = http_body_util::Full::new(Bytes::from(discovery::openapi_v2_protobuf(reg))).map_err(|never| match never {}).boxed();
            return Ok(http::Response::builder().status(StatusCode::OK).header("content-type", discovery::OPENAPI_V2_PROTOBUF).body(body).expect("valid response"));
        }
        return Ok(json_response(StatusCode::OK, &discovery::openapi_v2(reg)));
    }
    if sub == "/openapi/v3" {
        let mut root = discovery::openapi_v3_root(reg);
        if let Some(paths) = root.get_mut("paths").and_then(Value::as_object_mut) {
            for p in paths.values_mut() {
                if let Some(u) = p.get("serverRelativeURL").and_then(Value::as_str) {
                    p["serverRelativeURL"] = json!(format!("{view}{u}"));
                }
            }
        }
        return Ok(json_response(StatusCode::OK, &root));
    }
    let gv = sub.trim_start_matches("/openapi/v3/");
    let parts: Vec<&str> = gv.split('/').collect();
    let doc = match parts.as_slice() {
        ["api", v] => discovery::openapi_v3_gv(reg, "", v),
        ["apis", g, v] => discovery::openapi_v3_gv(reg, g, v),
        _ => None,
    };
    doc.map(|d| json_response(StatusCode::OK, &d)).ok_or(ApiError::NoSuchResource)
}

/// How long the other direction of a joined upgraded connection may go on after one
/// direction ended (its writer closed): then both connections are closed, so a peer that
/// never closes cannot hold the session (and its watch slot).
pub const UPGRADE_HALF_CLOSE_GRACE: Duration = Duration::from_secs(10);

/// Copies bytes both ways between the client's and the member's upgraded connections; when
/// one direction ends its end is passed on (the writer is shut down) and the other gets
/// [`UPGRADE_HALF_CLOSE_GRACE`] to end too; then both are dropped (closed).
async fn join_upgraded<C, M>(client: C, member: M, cluster: &str)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite,
    M: tokio::io::AsyncRead + tokio::io::AsyncWrite,
{
    use tokio::io::AsyncWriteExt;
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut mr, mut mw) = tokio::io::split(member);
    let up = async {
        let r = tokio::io::copy(&mut cr, &mut mw).await;
        let _ = mw.shutdown().await;
        r
    };
    let down = async {
        let r = tokio::io::copy(&mut mr, &mut cw).await;
        let _ = cw.shutdown().await;
        r
    };
    tokio::pin!(up, down);
    let (ended_first, first, then) = tokio::select! {
        r = &mut up => ("client", r, tokio::time::timeout(UPGRADE_HALF_CLOSE_GRACE, &mut down).await),
        r = &mut down => ("member", r, tokio::time::timeout(UPGRADE_HALF_CLOSE_GRACE, &mut up).await),
    };
    tracing::debug!(cluster, ended_first, first = ?first, then = ?then, "global view: upgraded connection closed");
}

/// Request headers an upgrade carries to the member besides impersonation: the upgrade
/// itself, WebSocket's handshake and subprotocols, SPDY's stream protocol versions.
pub const UPGRADE_REQUEST_HEADERS: [&str; 10] =
    ["connection", "upgrade", "sec-websocket-key", "sec-websocket-version", "sec-websocket-protocol", "sec-websocket-extensions", "x-stream-protocol-version", "content-type", "accept", "origin"];

/// Headers of the member's 101 passed to the client.
pub const UPGRADE_RESPONSE_HEADERS: [&str; 6] = ["connection", "upgrade", "sec-websocket-accept", "sec-websocket-protocol", "sec-websocket-extensions", "x-stream-protocol-version"];

/// Whether a request asks to upgrade its connection (`Connection: Upgrade` and an `Upgrade`
/// header): a WebSocket or SPDY/3.1 exec, attach or port-forward.
pub fn is_upgrade(headers: &http::HeaderMap) -> bool {
    headers.contains_key(http::header::UPGRADE)
        && headers.get_all(http::header::CONNECTION).iter().filter_map(|v| v.to_str().ok()).any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
}

/// Sends a request to member `cluster`, recording it in the per-member metrics (method,
/// status, latency; status 0 for a failure). Errors: no response head within
/// [`MEMBER_RESPONSE_TIMEOUT`] or a transport failure, as [`SearchError::Member`] (503).
async fn send_to_member(cluster: &str, method: &str, rb: reqwest::RequestBuilder) -> Result<reqwest::Response, ApiError> {
    let started = std::time::Instant::now();
    let resp = match tokio::time::timeout(MEMBER_RESPONSE_TIMEOUT, rb.send()).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {}s", MEMBER_RESPONSE_TIMEOUT.as_secs())),
    };
    crate::telemetry::metrics::observe_member_request(cluster, method, resp.as_ref().map_or(0, |r| r.status().as_u16()), started.elapsed());
    Ok(resp.map_err(|message| SearchError::Member { cluster: cluster.into(), message })?)
}

/// Subresources members serve beyond the API layer's own (`status`, `scale`, …), which the
/// view proxies to the owning member: a pod's `log`, `exec`, `attach`, `portforward`,
/// `eviction`, `binding`, `ephemeralcontainers` and `resize`, a service account's `token`,
/// and `proxy` of pods, services and nodes (kube-apiserver 1.33's set).
fn member_subresource(info: &ResourceInfo, sub: &str) -> bool {
    match (info.group, info.resource) {
        ("", "pods") => matches!(sub, "log" | "exec" | "attach" | "portforward" | "eviction" | "binding" | "ephemeralcontainers" | "resize" | "proxy"),
        ("", "serviceaccounts") => sub == "token",
        ("", "services") | ("", "nodes") => sub == "proxy",
        _ => false,
    }
}

/// The 403 for a read across namespaces that is granted only in some namespaces but cannot
/// be filtered here: a watch passed to members as it is (a kind the view does not cache), or
/// a kind only the member knows.
fn limited_stream(a: &access::ViewAttributes, user: &str) -> ApiError {
    match a.forbidden(user) {
        ApiError::Forbidden(m) => ApiError::Forbidden(format!("{m} (granted only in some namespaces, and the view passes this request to the member unfiltered: send it once per namespace)")),
        other => other,
    }
}

fn ambiguous(rr: &ResourceRequest, name: &str, owners: &[String]) -> ApiError {
    ApiError::ConflictMessage {
        message: format!("{} \"{name}\" exists in several member clusters ({}); address one with /apis/search.fedctl.io/v1alpha1/clusters/<name>/…", rr.info.resource, owners.join(", ")),
        causes: vec![],
    }
}

fn selectors(rr: &ResourceRequest, q: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let mut fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), rr.info.field_selectors).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if let Some(n) = &rr.name {
        fields.reqs.push(("metadata.name".into(), n.clone(), false));
    }
    Ok((labels, fields))
}

fn get(store: &KindStore, rr: &ResourceRequest, cluster: Option<&str>, want_table: bool, include_object: &str) -> Result<Response, ApiError> {
    let name = rr.name.clone().unwrap_or_default();
    let mut found = store.get(rr.namespace.as_deref().unwrap_or(""), &name);
    if let Some(c) = cluster {
        found.retain(|(k, _)| &*k.2 == c);
    }
    let obj = match found.len() {
        0 => return Err(ApiError::NotFound { resource: rr.info.resource.to_string(), name }),
        1 => found[0].1.decode(&found[0].1.member_rv.to_string()),
        _ => return Err(ambiguous(rr, &name, &found.iter().map(|(k, _)| k.2.to_string()).collect::<Vec<_>>())),
    };
    if want_table {
        let rv = obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""));
        return Ok(json_response(StatusCode::OK, &table::table(&store.info, &[obj], json!({"resourceVersion": rv}), include_object, true)));
    }
    Ok(json_response(StatusCode::OK, &obj))
}

/// A continue token of the view: base64url (no padding) of this JSON. `k` is the last key
/// returned, which is every shard's and every cluster's cursor at once (pages merge all
/// shards and clusters in key order); `rv` is the snapshot every page is served at; `m` is the
/// shard map version of the first page (informational: shards move objects with their
/// history, so a page after a rebalance is still served from the same snapshot).
#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: String,
    k: (String, String, String),
    #[serde(default)]
    m: u64,
    /// The scope the token was issued for (`<cluster>/<namespace>`, each empty for all): a
    /// token is refused (400) on another path, as kube-apiserver refuses a continue key
    /// outside the request's prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    p: Option<String>,
}

impl ContinueToken {
    /// The wire form: base64url (no padding) of the JSON.
    fn encode(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).expect("serializable"))
    }

    /// Parses a client's token for a request on `scope` ([`scope_path`]) and its snapshot.
    /// Errors: 400 for anything that is not a token of this view, or one issued elsewhere.
    fn decode(t: &str, scope: &str) -> Result<(ContinueToken, GlobalRv), ApiError> {
        let bad = || ApiError::BadRequest("continue key is not valid: not a global view continue token".into());
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(t).map_err(|_| bad())?;
        let tok: ContinueToken = serde_json::from_slice(&raw).map_err(|_| bad())?;
        if tok.p.as_deref().is_some_and(|p| p != scope) {
            return Err(ApiError::BadRequest("continue key is not valid: it was issued for another path".into()));
        }
        let at = GlobalRv::decode(&tok.rv).map_err(|_| bad())?;
        Ok((tok, at))
    }
}

/// The scope a continue token is bound to: `<cluster>/<namespace>`, each empty for all.
fn scope_path(cluster: Option<&str>, namespace: Option<&str>) -> String {
    format!("{}/{}", cluster.unwrap_or(""), namespace.unwrap_or(""))
}

/// Whether a LIST asks for `resourceVersionMatch=Exact`, checked as kube-apiserver does:
/// Exact needs a resourceVersion other than "0"; values other than Exact and NotOlderThan
/// are 400.
fn exact_match(q: &Query, rv: &str) -> Result<bool, ApiError> {
    match q.get("resourceVersionMatch").unwrap_or("") {
        "" | "NotOlderThan" => Ok(false),
        "Exact" if rv.is_empty() => Err(ApiError::BadRequest("resourceVersionMatch \"Exact\" requires a resourceVersion".into())),
        "Exact" if rv == "0" => Err(ApiError::BadRequest("resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"".into())),
        "Exact" => Ok(true),
        other => Err(ApiError::BadRequest(format!("resourceVersionMatch: unsupported value \"{other}\": supported values: \"Exact\", \"NotOlderThan\""))),
    }
}

/// A LIST of a cached kind; `only`: the namespaces of the caller's grant (`None`: all);
/// `local`: a requested resourceVersion as this cache reads it ([`GlobalCache::local_rv`]).
#[allow(clippy::too_many_arguments)]
fn list(
    store: &Arc<KindStore>,
    rr: &ResourceRequest,
    q: &Query,
    cluster: Option<&str>,
    want_table: bool,
    include_object: &str,
    only: Option<&Arc<BTreeSet<String>>>,
    local: &dyn Fn(GlobalRv) -> GlobalRv,
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(rr, q)?;
    let limit = q.int("limit")?.unwrap_or(0).max(0) as usize;
    let rv = q.get("resourceVersion").unwrap_or("");
    let exact = exact_match(q, rv)?;
    let bound = scope_path(cluster, rr.namespace.as_deref());
    let asked = if !rv.is_empty() && rv != "0" { Some(local(GlobalRv::decode(rv).map_err(cache_err)?)) } else { None };
    let token = match q.non_empty("continue") {
        Some(t) => Some(ContinueToken::decode(t, &bound).map(|(t, at)| (t, local(at)))?),
        None => None,
    };
    let (at, after, map_version) = match token {
        Some((t, at)) => (at, Some((t.k.0, t.k.1, Arc::<str>::from(t.k.2.as_str()))), t.m),
        None => (asked.filter(|_| exact).unwrap_or_else(|| store.current()), None, store.map_version()),
    };
    let keep = selected(&labels, &fields, only.map(|s| &**s));
    let scope = ListScope { namespace: rr.namespace.as_deref(), cluster };
    let expired = |e: CacheError| {
        match e {
        CacheError::Expired(m) if after.is_some() => ApiError::Expired(format!(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. ({m})"
        )),
        other => cache_err(other),
    }
    };
    if limit == 0 && !want_table {
        // the whole view: streamed in chunks of one snapshot (memory bounded by a chunk, not
        // by the result); the first chunk is read before answering, so errors get a Status
        let first = store.list_at(&at, scope, after.as_ref(), &keep, STREAM_CHUNK).map_err(expired)?;
        return Ok(stream_list(store.clone(), at, first, rr.namespace.clone(), cluster.map(str::to_string), labels.clone(), fields.clone(), only.cloned()));
    }
    let page_bytes = q.int(PAGE_BYTES_PARAM)?.unwrap_or(0) as usize;
    let mut picked = store.list_at(&at, scope, after.as_ref(), &keep, if limit > 0 { limit + 1 } else { 0 }).map_err(expired)?;
    let mut more = limit > 0 && picked.len() > limit;
    picked.truncate(if limit > 0 { limit } else { picked.len() });
    if limit > 0 && page_bytes > 0 {
        let n = within_bytes(picked.iter().map(|(_, o)| o.raw_len() + ITEM_ROOM), page_bytes);
        if n < picked.len() {
            picked.truncate(n);
            more = true;
        }
    }
    let grv = at.encode();
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), json!(grv));
    if more {
        let (k, _) = picked.last().expect("limit > 0");
        let tok = ContinueToken { rv: grv.clone(), k: (k.0.clone(), k.1.clone(), k.2.to_string()), m: map_version, p: Some(bound) };
        meta.insert("continue".into(), json!(tok.encode()));
    }
    if want_table {
        let objs: Vec<Value> = picked.iter().map(|(_, o)| o.decode(&o.member_rv.to_string())).collect();
        return Ok(json_response(StatusCode::OK, &table::table(&store.info, &objs, Value::Object(meta), include_object, true)));
    }
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"kind\":");
    serde_json::to_writer(&mut out, &store.info.list_kind()).expect("serializable");
    out.extend_from_slice(b",\"apiVersion\":");
    serde_json::to_writer(&mut out, &store.info.api_version()).expect("serializable");
    out.extend_from_slice(b",\"metadata\":");
    serde_json::to_writer(&mut out, &Value::Object(meta)).expect("serializable");
    out.extend_from_slice(b",\"items\":[");
    // the head's size is known only now (a continue token holds every member's position)
    out.reserve(picked.iter().map(|(_, o)| o.raw_len() + ITEM_ROOM).sum::<usize>() + 2);
    for (i, (_, o)) in picked.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        o.write_with_rv(&o.member_rv.to_string(), &mut out);
    }
    out.extend_from_slice(b"]}");
    Ok(http::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(http_body_util::Full::new(Bytes::from(out)).map_err(|never| match never {})))
        .expect("valid response"))
}

/// The LIST filter of a label and a field selector, tested on each object's stored selector
/// attributes (no decoding of the object itself).
/// `only` keeps only those namespaces' objects (a caller's namespace grant).
fn selected<'a>(labels: &'a LabelSelector, fields: &'a FieldSelector, only: Option<&'a BTreeSet<String>>) -> impl Fn(&Key, &Obj) -> bool + 'a {
    let filtered = !labels.is_empty() || !fields.is_empty();
    move |k: &Key, o: &Obj| {
        if only.is_some_and(|s| !s.contains(&k.0)) {
            return false;
        }
        if !filtered {
            return true;
        }
        o.attrs().matches(labels, fields)
    }
}

/// How many of the leading items of `sizes` (bytes each) a page of at most `max` bytes
/// holds: those that fit, and never fewer than one (an item larger than `max` is a page of
/// its own).
fn within_bytes(sizes: impl Iterator<Item = usize>, max: usize) -> usize {
    let mut total = 0;
    let mut n = 0;
    for size in sizes {
        total += size;
        if total > max && n > 0 {
            break;
        }
        n += 1;
    }
    n
}

/// Objects per chunk of a streamed LIST.
const STREAM_CHUNK: usize = 1000;

/// Bytes a LIST adds to each stored object: the separating comma and
/// `"resourceVersion":"<up to 20 digits>",` (a buffer sized with less grows, copying the page).
const ITEM_ROOM: usize = 48;

/// Answers an unpaged LIST as a stream: `{"kind":…,"metadata":{"resourceVersion":<at>},"items":[`,
/// then the objects of the snapshot `at` chunk by chunk (read on a blocking thread, at most a
/// few chunks buffered ahead of the client), then `]}`. `first` is the first chunk, already
/// read. If a later chunk can no longer be served from the snapshot (its events left the
/// window during a very long LIST), the stream ends without the closing bytes, so the client
/// sees a failed request rather than a short list.
#[allow(clippy::too_many_arguments)]
fn stream_list(
    store: Arc<KindStore>,
    at: GlobalRv,
    first: Vec<(Key, Arc<Obj>)>,
    namespace: Option<String>,
    cluster: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    only: Option<Arc<BTreeSet<String>>>,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || {
        let grv = at.encode();
        let mut head = Vec::with_capacity(256);
        head.extend_from_slice(b"{\"kind\":");
        serde_json::to_writer(&mut head, &store.info.list_kind()).expect("serializable");
        head.extend_from_slice(b",\"apiVersion\":");
        serde_json::to_writer(&mut head, &store.info.api_version()).expect("serializable");
        head.extend_from_slice(b",\"metadata\":");
        serde_json::to_writer(&mut head, &json!({"resourceVersion": grv})).expect("serializable");
        head.extend_from_slice(b",\"items\":[");
        if tx.blocking_send(Ok(Frame::data(Bytes::from(head)))).is_err() {
            return;
        }
        let keep = selected(&labels, &fields, only.as_deref());
        let scope = ListScope { namespace: namespace.as_deref(), cluster: cluster.as_deref() };
        let mut chunk = first;
        let mut n = 0usize;
        loop {
            let mut out = Vec::with_capacity(chunk.iter().map(|(_, o)| o.raw_len() + ITEM_ROOM).sum::<usize>());
            for (_, o) in &chunk {
                if n > 0 {
                    out.push(b',');
                }
                n += 1;
                o.write_with_rv(&o.member_rv.to_string(), &mut out);
            }
            if !out.is_empty() && tx.blocking_send(Ok(Frame::data(Bytes::from(out)))).is_err() {
                return;
            }
            let after = match chunk.last() {
                Some((k, _)) if chunk.len() == STREAM_CHUNK => k.clone(),
                _ => break,
            };
            chunk = match store.list_at(&at, scope, Some(&after), &keep, STREAM_CHUNK) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(kind = %store.info.resource, error = %e, "streamed LIST ended early");
                    let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                    return;
                }
            };
        }
        let _ = tx.blocking_send(Ok(Frame::data(Bytes::from_static(b"]}"))));
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    http::Response::builder().status(StatusCode::OK).header("content-type", "application/json").body(BodyExt::boxed(StreamBody::new(stream))).expect("valid response")
}

/// Advances a watcher's position to the store's current one when nothing is queued for it:
/// events are handed to watchers while recorded, under the store's write lock, so every event
/// the current position includes that this watcher's index admits is already in `rx`; an empty
/// queue means the watcher has seen all of them (the rest were filtered out by its index).
/// Bookmarks then carry a fresh position even for a watcher whose selector matches rarely.
/// A watcher the store dropped (its queue was full, so later events were not handed to it)
/// does not advance: its queue is empty once drained, yet events are missing from it.
/// Returns whether it did (then `state` is at least the store's position when called).
fn caught_up(store: &KindStore, rx: &tokio::sync::mpsc::Receiver<Arc<Event>>, state: &mut BTreeMap<String, crate::cache::rv::Pos>) -> bool {
    let cur = store.current();
    if !rx.is_empty() || rx.is_closed() {
        return false;
    }
    for (c, p) in cur.0 {
        let e = state.entry(c).or_insert(p);
        *e = (*e).max(p);
    }
    true
}

/// One client watch on the merged stream.
struct Watcher {
    store: Arc<KindStore>,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    namespace: Option<String>,
    cluster: Option<String>,
    /// Only these namespaces (the caller's namespace grant); `None`: every namespace.
    only: Option<Arc<BTreeSet<String>>>,
    labels: LabelSelector,
    fields: FieldSelector,
    as_table: bool,
    include_object: String,
    first_table: bool,
    bookmarks: bool,
    /// Prompt, complete bookmarks (see [`PROGRESS_PARAM`]).
    progress: bool,
    send_initial: bool,
    interval: Duration,
    timeout: Duration,
    /// A watcher whose buffer stays full this long is dropped ([`push_line`]).
    send_timeout: Duration,
    /// The caller's watch slot, released when the watch ends.
    _slot: Option<WatchSlot>,
}

impl Watcher {
    async fn push(&self, line: Bytes) -> Result<(), ()> {
        push_line(&self.tx, line, self.send_timeout, self.store.info.resource).await
    }

    fn in_scope(&self, ns: &str, cluster: &str) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == ns) && self.cluster.as_deref().is_none_or(|c| c == cluster) && self.only.as_ref().is_none_or(|s| s.contains(ns))
    }

    async fn send_obj(&mut self, ty: &str, obj: Value, rv: &str) -> Result<(), ()> {
        let line = object_line(&self.store.info, ty, obj, rv, self.as_table, &self.include_object, &mut self.first_table);
        self.push(line).await
    }

    async fn bookmark(&mut self, rv: &str, initial_end: bool) -> Result<(), ()> {
        self.push(bookmark_line(&self.store.info, rv, initial_end)).await
    }

    async fn event(&mut self, state: &mut BTreeMap<String, crate::cache::rv::Pos>, e: &Event) -> Result<(), ()> {
        if state.get(&*e.cluster).is_some_and(|p| e.pos <= *p) {
            return Ok(());
        }
        state.insert(e.cluster.to_string(), e.pos);
        if !self.in_scope(&e.namespace, &e.cluster) {
            return Ok(());
        }
        let plain = self.labels.is_empty() && self.fields.is_empty() && !self.as_table;
        if plain {
            return self.push(e.line().clone()).await;
        }
        // selectors test the event's attributes, read once for all watchers
        let (before, now_m) = e.selects(&self.labels, &self.fields);
        let ty = match e.ty {
            EventType::Added => now_m.then_some("ADDED"),
            EventType::Deleted => now_m.then_some("DELETED"),
            EventType::Modified => match (before, now_m) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                _ => None,
            },
        };
        match ty {
            // the shared line when the type is the event's own (the common case)
            Some(ty) if ty == e.ty.as_str() && !self.as_table => self.push(e.line().clone()).await,
            Some(ty) => self.send_obj(ty, e.obj.decode(e.rv()), e.rv()).await,
            None => Ok(()),
        }
    }

    async fn run(mut self, sub: crate::cache::store::Subscription) {
        let _ = self.run_inner(sub).await;
    }

    async fn run_inner(&mut self, sub: crate::cache::store::Subscription) -> Result<(), ()> {
        let mut state = sub.start.0.clone();
        let mut rx = sub.rx;
        if let Some(snapshot) = sub.snapshot {
            let rv = sub.start.encode();
            for (k, o) in snapshot {
                if !self.in_scope(&k.0, &k.2) {
                    continue;
                }
                if self.labels.is_empty() && self.fields.is_empty() && !self.as_table {
                    let mut line = Vec::with_capacity(o.raw_len() + rv.len() + 48);
                    line.extend_from_slice(b"{\"type\":\"ADDED\",\"object\":");
                    o.write_with_rv(&rv, &mut line);
                    line.extend_from_slice(b"}\n");
                    self.push(Bytes::from(line)).await?;
                    continue;
                }
                if o.attrs().matches(&self.labels, &self.fields) {
                    self.send_obj("ADDED", o.decode(&rv), &rv).await?;
                }
            }
            if self.send_initial {
                self.bookmark(&rv, true).await?;
            }
        }
        for e in &sub.replay {
            self.event(&mut state, e).await?;
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + self.interval, self.interval);
        let mut progress_tick = tokio::time::interval(PROGRESS_INTERVAL);
        progress_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // what the client knows: its own resourceVersion (a resume) or the snapshot's. Replayed
        // events outside this watcher's scope move `state` without a line, so the first
        // progress bookmark must report it even if nothing follows (the MUX waits for it).
        let mut last_sent = sub.start.0.clone();
        if self.progress && !self.bookmarks {
            self.bookmarks = true;
        }
        loop {
            tokio::select! {
                r = rx.recv() => match r {
                    Some(e) => self.event(&mut state, &e).await?,
                    // too slow (its queue was full): end the stream; the client resumes from
                    // its last resourceVersion
                    None => return Ok(()),
                },
                _ = progress_tick.tick(), if self.progress => {
                    // only positions the store had reached with every event up to them
                    // sent: the MUX takes a cluster's entry as "nothing more of this member
                    // resourceVersion", which a position taken between the events of one
                    // relist (several positions of one resourceVersion) is not
                    if caught_up(&self.store, &rx, &mut state) && state != last_sent {
                        last_sent = state.clone();
                        let rv = GlobalRv(state.clone()).encode();
                        self.bookmark(&rv, false).await?;
                    }
                }
                _ = tick.tick(), if self.bookmarks && !self.progress => {
                    // (when it cannot catch up, the position of its last event is still one)
                    caught_up(&self.store, &rx, &mut state);
                    let rv = GlobalRv(state.clone()).encode();
                    self.bookmark(&rv, false).await?;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    // (a progress watcher's bookmarks must be complete positions)
                    if self.bookmarks && !self.progress {
                        let rv = GlobalRv(state.clone()).encode();
                        self.bookmark(&rv, false).await?;
                    }
                    return Ok(());
                }
                _ = self.tx.closed() => return Err(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::store::{Obj, WATCHER_DEPTH};

    /// A page bounded by bytes holds the items that fit, and always the first one.
    #[test]
    fn a_page_holds_the_items_within_its_bytes_and_at_least_one() {
        let n = |sizes: &[usize], max| within_bytes(sizes.iter().copied(), max);
        assert_eq!(n(&[10, 10, 10], 30), 3);
        assert_eq!(n(&[10, 10, 10], 29), 2);
        assert_eq!(n(&[10, 10, 10], 1000), 3);
        assert_eq!(n(&[50, 10], 20), 1, "an item larger than the bound is a page of its own");
        assert_eq!(n(&[10, 50, 10], 20), 1);
        assert_eq!(n(&[], 20), 0);
    }

    /// A watcher whose queue overflowed lost events: once it drained what was queued, its
    /// position must not jump to the store's (a bookmark there would skip the lost events).
    #[test]
    fn a_dropped_watcher_does_not_catch_up() {
        let store = KindStore::new(Arc::new(crate::api::registry::pod()), 100_000, Duration::from_secs(0));
        let c: Arc<str> = Arc::from("m1");
        let pod = |rv: u64| Obj::from_member(&c, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n1", "resourceVersion": rv.to_string()}})).unwrap();
        store.sync(1, &c, 1, vec![pod(1)]);
        let filter = WatchFilter { namespace: Some("n1".into()), label: None };
        let mut sub = store.subscribe(Some(store.current()), &filter).unwrap();
        let mut state = sub.start.0.clone();
        // a watcher that keeps up catches up
        let (k, o) = pod(2);
        store.apply(1, EventType::Modified, k, o);
        let e = sub.rx.try_recv().unwrap();
        state.insert(e.cluster.to_string(), e.pos);
        assert!(caught_up(&store, &sub.rx, &mut state));
        assert_eq!(state, store.current().0);
        // one that falls behind by more than its queue is dropped: the last events never reach it
        for rv in 3..(WATCHER_DEPTH as u64 + 10) {
            let (k, o) = pod(rv);
            store.apply(1, EventType::Modified, k, o);
        }
        let mut last = None;
        while let Ok(e) = sub.rx.try_recv() {
            last = Some(e.pos);
        }
        let last = last.unwrap();
        state.insert("m1".into(), last);
        assert!(last < store.current().0["m1"], "events were lost");
        assert!(!caught_up(&store, &sub.rx, &mut state));
        assert_eq!(state["m1"], last, "a dropped watcher's position stays at its last event");
    }

    /// A progress watcher (the MUX's leg) resumed from a position whose later events are all
    /// outside its namespace reports the position they bring it to, though nothing follows:
    /// without it the MUX waits forever for this leg before emitting another leg's events.
    #[tokio::test]
    async fn a_resumed_progress_watcher_reports_the_position_its_replay_reached() {
        let info = Arc::new(crate::api::registry::pod());
        let store = Arc::new(KindStore::new(info.clone(), 100_000, Duration::from_secs(0)));
        let c: Arc<str> = Arc::from("m1");
        let pod = |ns: &str, rv: u64| Obj::from_member(&c, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns, "resourceVersion": rv.to_string()}})).unwrap();
        store.sync(1, &c, 1, vec![pod("n1", 1), pod("n2", 1)]);
        let from = store.current();
        for rv in 2..5 {
            let (k, o) = pod("n2", rv);
            store.apply(1, EventType::Modified, k, o);
        }
        let now = store.current();
        assert_ne!(from, now);
        let filter = WatchFilter { namespace: Some("n1".into()), label: None };
        let sub = store.subscribe(Some(from), &filter).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let w = Watcher {
            store: store.clone(),
            tx,
            namespace: Some("n1".into()),
            cluster: None,
            only: None,
            labels: LabelSelector::parse("").unwrap(),
            fields: FieldSelector::parse("", info.field_selectors).unwrap(),
            as_table: false,
            include_object: String::new(),
            first_table: true,
            bookmarks: true,
            progress: true,
            send_initial: false,
            interval: Duration::from_secs(3600),
            timeout: Duration::from_secs(3600),
            send_timeout: Duration::from_secs(10),
            _slot: None,
        };
        let task = tokio::spawn(w.run(sub));
        let line = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("a bookmark comes").unwrap();
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["type"], "BOOKMARK");
        assert_eq!(GlobalRv::decode(v["object"]["metadata"]["resourceVersion"].as_str().unwrap()).unwrap(), now);
        task.abort();
    }
}
