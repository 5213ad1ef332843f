//! The request handler: REST verbs over a [`Storage`] with kube-apiserver semantics.
//!
//! Mirrors kube-apiserver's generic registry (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`)
//! and handlers: create/get/list/watch/update/patch/delete/deletecollection, resourceVersion =
//! storage mod revision, optimistic concurrency, finalizers and deletionTimestamp, namespace
//! finalization, status and scale subresources, selectors, paging and Table output.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Map, Value};

use super::admission::{AdmissionHook, AdmissionRequest, Operation};
use super::body;
use super::cached_list;
use super::discovery;
use super::error::{ApiError, ApiResult, Cause};
use super::object::{self, meta_str};
use super::paging;
use super::registry::{LiveRegistry, Registry, ResourceInfo};
use super::request::{parse_path_with, Query, ResourceRequest, Target, Verb};
use super::selector::{FieldSelector, LabelSelector};
use super::table;
use super::watch::{self, WatchOptions};
use crate::storage::{KeyValue, Storage, StorageError};

pub use crate::http::{Body, Response};

/// Namespaces that may never be deleted (mirrors NamespaceLifecycle admission's
/// `immortalNamespaces`): a DELETE of one is a 403 `this namespace may not be deleted`.
pub const IMMORTAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// Bounds that keep one client from exhausting the server (mirrors kube-apiserver's request
/// body limit, max-requests-inflight refusals and the watch cache dropping slow watchers).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest accepted request body in bytes (kube-apiserver: 3 MiB); larger → 413
    /// RequestEntityTooLarge, read no further.
    pub max_body_bytes: usize,
    /// Most open watches per user (`Caller::user`); one more → 429 TooManyRequests with
    /// `Retry-After`. 0: unbounded.
    pub max_watches_per_user: usize,
    /// Largest page a LIST returns: a larger `limit` is lowered to it (the answer carries a
    /// continue token, as any paged list). 0: unbounded.
    pub max_list_limit: i64,
    /// Events buffered per watcher between the store and its connection.
    pub watch_buffer_events: usize,
    /// A watcher whose buffer stays full this long is dropped (its stream ends; the client
    /// re-watches from its last resourceVersion), so it holds neither memory nor the store's
    /// watch stream, and others are not slowed.
    pub watch_send_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_body_bytes: 3 * 1024 * 1024, max_watches_per_user: 1000, max_list_limit: 10_000, watch_buffer_events: 256, watch_send_timeout: Duration::from_secs(2) }
    }
}

/// Tunables of the API layer.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// Per-client bounds.
    pub limits: Limits,
    /// Interval between watch bookmarks for watchers that asked for them (kube: ~1 min).
    pub bookmark_interval: Duration,
    /// `/version` document.
    pub version: Value,
    /// `host:port` advertised in `/api`.
    pub server_address: String,
    /// Most update retries for patch/apply on conflicting concurrent writers.
    pub max_retries: usize,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig { limits: Limits::default(), bookmark_interval: Duration::from_secs(60), version: version_info(), server_address: "127.0.0.1:6443".into(), max_retries: 16 }
    }
}

/// The `/version` document: fedctl speaks Kubernetes 1.33 (kubectl's dispatcher picks its
/// client by this).
pub fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": format!("v1.33.0-fedctl.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": env!("FEDCTL_GIT_COMMIT"),
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
    })
}

/// The authenticated caller as the API layer needs it.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    /// User name (`admin`, `system:fedctl:agent:<cluster>`, …).
    pub user: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// The API server's request handler: a registry of resources over one store.
pub struct ApiServer {
    /// Served resources: the kinds it was built with plus the custom resources of the
    /// stored CustomResourceDefinitions (kept current by [`ApiServer::follow_crds`]).
    pub registry: LiveRegistry,
    /// Backing store.
    pub store: Arc<dyn Storage>,
    /// Tunables.
    pub config: ApiConfig,
    /// Set to true on shutdown: open watches end cleanly.
    stopping: tokio::sync::watch::Sender<bool>,
    /// Admission hooks run on creates and updates (see [`super::admission`]).
    hooks: Vec<Arc<dyn AdmissionHook>>,
    /// Extra subresources, by `(group, resource, subresource)` (see [`ApiServer::register_subresource`]).
    subresources: std::sync::RwLock<SubresourceMap>,
    /// Open watches per user (see [`Limits::max_watches_per_user`]).
    watches: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    /// Live event lines shared by this server's watches (encoded once per event).
    pub watch_lines: Arc<watch::SharedLines>,
    /// The namespaces creates are checked against without a store read, once
    /// [`ApiServer::follow_namespaces`] runs (see [`super::namespaces`]).
    pub namespaces: Arc<super::namespaces::NamespaceCache>,
    /// Set once [`ApiServer::follow_crds`] has served the stored CRDs and follows them.
    crds_synced: std::sync::atomic::AtomicBool,
}

/// One open watch counted against its user's [`Limits::max_watches_per_user`]; released when
/// dropped (the watch's task ends).
pub struct WatchSlot {
    counts: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    user: String,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.user);
            }
        }
    }
}

/// Registered subresource handlers by `(group, resource, subresource)`.
type SubresourceMap = std::collections::HashMap<(String, String, String), Arc<dyn SubresourceHandler>>;

/// One request to a subresource served by a [`SubresourceHandler`].
pub struct SubresourceRequest<'a> {
    /// HTTP method (`POST` for `serviceaccounts/<name>/token`).
    pub method: &'a Method,
    /// The resource, namespace, object name and subresource from the path.
    pub resource: &'a ResourceRequest,
    /// Decoded query string.
    pub query: &'a Query,
    /// The decoded request body (JSON or YAML); `None` when empty.
    pub body: Option<Value>,
    /// The authenticated caller.
    pub caller: &'a Caller,
}

/// A subresource the generic REST layer does not implement itself — kube-apiserver's
/// per-resource `rest.Storage` for things like `serviceaccounts/token` or `pods/eviction`.
///
/// Registered with [`ApiServer::register_subresource`]; `handle` gets the server (to read and
/// write objects through it) and answers with an HTTP status and a JSON body, or an
/// [`ApiError`] rendered as a Status.
#[async_trait::async_trait]
pub trait SubresourceHandler: Send + Sync + 'static {
    /// Answers one request.
    async fn handle(&self, api: &Arc<ApiServer>, req: SubresourceRequest<'_>) -> ApiResult<(StatusCode, Value)>;

    /// How discovery lists the subresource: `(group, version, kind, verbs)` of the object it
    /// takes and returns, e.g. `("authentication.k8s.io", "v1", "TokenRequest", ["create"])`.
    /// `None` (the default) leaves it out of discovery.
    fn discovery(&self) -> Option<(&'static str, &'static str, &'static str, &'static [&'static str])> {
        None
    }
}

/// Builds a JSON response.
pub fn json_response(code: StatusCode, v: &Value) -> Response {
    bytes_response(code, Bytes::from(serde_json::to_vec(v).expect("serializable")))
}

fn bytes_response(code: StatusCode, b: Bytes) -> Response {
    http::Response::builder().status(code).header("content-type", "application/json").body(Full::new(b).map_err(|never| match never {}).boxed()).expect("valid response")
}

/// Renders an error as its Status response.
pub fn error_response(e: &ApiError) -> Response {
    let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(code, &e.status());
    if let ApiError::TooManyRequests { retry_after_seconds, .. } = e {
        resp.headers_mut().insert("retry-after", http::HeaderValue::from(*retry_after_seconds));
    }
    resp
}

fn content_type(headers: &HeaderMap) -> String {
    headers.get("content-type").and_then(|v| v.to_str().ok()).map(|s| s.split(';').next().unwrap_or("").trim().to_ascii_lowercase()).unwrap_or_default()
}

/// Decodes a request body as JSON, YAML or protobuf into a value (see [`body::decode`]).
/// Errors: 400 for malformed input, 415 for an unsupported media type.
pub fn decode_body(ct: &str, body: &[u8]) -> ApiResult<Value> {
    body::decode(ct, body, false).map(|d| d.value)
}

/// What one attempt of [`ApiServer::guaranteed_update`] came to.
enum Attempt {
    /// Stored (or deleted, its last finalizer gone): the object as written.
    Written(Value),
    /// Nothing to write (or a dry run): the object as it would be.
    Unchanged(Value),
    /// The compare-and-swap lost; the state etcd returned with the conflict, when it did.
    Conflict(Option<KeyValue>),
}

impl ApiServer {
    /// A handler over `store` serving `registry`.
    pub fn new(registry: Registry, store: Arc<dyn Storage>, config: ApiConfig) -> Arc<Self> {
        Self::with_admission(registry, store, config, Vec::new())
    }

    /// A handler that runs `hooks` (in this order) on every create and update of the kinds
    /// they handle.
    pub fn with_admission(registry: Registry, store: Arc<dyn Storage>, config: ApiConfig, hooks: Vec<Arc<dyn AdmissionHook>>) -> Arc<Self> {
        Arc::new(ApiServer {
            registry: LiveRegistry::new(registry),
            store,
            config,
            stopping: tokio::sync::watch::Sender::new(false),
            hooks,
            subresources: Default::default(),
            watches: Default::default(),
            watch_lines: Default::default(),
            namespaces: Default::default(),
            crds_synced: Default::default(),
        })
    }

    /// Keeps [`ApiServer::namespaces`] in step with the store, forever (spawn it). Until it
    /// has listed them, every create reads its namespace from the store.
    pub async fn follow_namespaces(self: Arc<Self>) {
        let Some(info) = self.registry.lookup("", "v1", "namespaces") else { return };
        self.namespaces.clone().run(self.store.clone(), info.prefix()).await
    }

    /// Serves the custom resources of the stored CustomResourceDefinitions and keeps their
    /// status current, forever (spawn it; see [`super::crd`]). Until it has listed them,
    /// only the kinds the server was built with are served.
    pub async fn follow_crds(self: Arc<Self>) {
        super::crd::run(self).await
    }

    /// True once the custom resources of the stored CRDs are served and CRD changes are
    /// followed (kube-apiserver's `poststarthook/crd-informer-synced` readiness check).
    pub fn crds_synced(&self) -> bool {
        self.crds_synced.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(super) fn set_crds_synced(&self) {
        self.crds_synced.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Ends every open watch stream (graceful shutdown: clients see the stream end and
    /// re-watch elsewhere, as after kube-apiserver's shutdown).
    pub fn shutdown(&self) {
        self.stopping.send_replace(true);
    }

    /// Runs the admission hooks for `req.info` on `obj`.
    async fn admit(&self, req: &AdmissionRequest<'_>, obj: &mut Value) -> ApiResult<()> {
        for h in self.hooks.iter().filter(|h| h.handles(req.info)) {
            h.admit(self, req, obj).await?;
        }
        Ok(())
    }

    fn has_hooks(&self, info: &ResourceInfo) -> bool {
        self.hooks.iter().any(|h| h.handles(info))
    }

    /// Serves `<resource>/<subresource>` of `group` through `handler` (every method; the path
    /// must name an object). Replaces an earlier registration. Requests reach it after
    /// authentication and authorization, with the verb [`ApiServer::classify`] gives
    /// (`create` for POST).
    pub fn register_subresource(&self, group: &str, resource: &str, subresource: &str, handler: Arc<dyn SubresourceHandler>) {
        self.subresources.write().unwrap_or_else(|e| e.into_inner()).insert((group.to_string(), resource.to_string(), subresource.to_string()), handler);
    }

    /// Appends the registered subresources of `group`/`version` to an APIResourceList.
    fn add_subresource_discovery(&self, list: &mut Value, group: &str, version: &str) {
        let map = self.subresources.read().unwrap_or_else(|e| e.into_inner());
        let mut extra: Vec<Value> = map
            .iter()
            .filter(|((g, _, _), _)| g == group)
            .filter_map(|((g, res, sub), h)| {
                let info = self.registry.lookup(g, version, res)?;
                let (dg, dv, kind, verbs) = h.discovery()?;
                Some(json!({"name": format!("{res}/{sub}"), "singularName": "", "namespaced": info.namespaced, "group": dg, "version": dv, "kind": kind, "verbs": verbs}))
            })
            .collect();
        extra.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        if let Some(items) = list.get_mut("resources").and_then(Value::as_array_mut) {
            items.extend(extra);
        }
    }

    /// The aggregated discovery document of `/api` (`core`) or `/apis` in `version` (`v2`,
    /// `v2beta1`): every served group-version's resource list, subresources included, as
    /// [`discovery::aggregated`] shapes it; built from the registry of the moment, so custom
    /// resources appear and go with their CRDs.
    fn aggregated_discovery(&self, version: &str, core: bool) -> Value {
        let reg = self.registry.snapshot();
        let lists: Vec<(String, Vec<(String, Value)>)> = reg
            .groups()
            .iter()
            .filter(|(g, _)| g.is_empty() == core)
            .map(|(g, vs)| {
                let versions = vs
                    .iter()
                    .map(|v| {
                        let mut list = discovery::resource_list(&reg, g, v);
                        self.add_subresource_discovery(&mut list, g, v);
                        (v.to_string(), list)
                    })
                    .collect();
                (g.to_string(), versions)
            })
            .collect();
        let custom = |g: &str| reg.all().iter().any(|r| r.group == g && r.custom.is_some());
        discovery::aggregated(version, &lists, &custom)
    }

    fn subresource_handler(&self, r: &ResourceRequest) -> Option<Arc<dyn SubresourceHandler>> {
        let sub = r.subresource.as_deref()?;
        let map = self.subresources.read().unwrap_or_else(|e| e.into_inner());
        map.get(&(r.info.group.to_string(), r.info.resource.to_string(), sub.to_string())).cloned()
    }

    /// Parses method + path into the verb and target (for authorization before `handle`).
    pub fn classify(&self, method: &Method, path: &str, query: &Query) -> ApiResult<(Verb, Target)> {
        let registry = self.registry.snapshot();
        let target = parse_path_with(&registry, path, &|info, sub| {
            let map = self.subresources.read().unwrap_or_else(|e| e.into_inner());
            map.contains_key(&(info.group.to_string(), info.resource.to_string(), sub.to_string()))
        })?;
        let verb = match &target {
            Target::Resource(r) => {
                let watching = r.watch_path || query.flag("watch").unwrap_or(false);
                match (method.as_str(), r.name.is_some()) {
                    ("GET", true) if r.watch_path => Verb::Watch,
                    ("GET", true) => Verb::Get,
                    ("GET", false) if watching => Verb::Watch,
                    ("GET", false) => Verb::List,
                    ("POST", false) => Verb::Create,
                    ("POST", true) => Verb::Create,
                    ("PUT", true) => Verb::Update,
                    ("PATCH", true) => Verb::Patch,
                    ("DELETE", true) => Verb::Delete,
                    ("DELETE", false) => Verb::DeleteCollection,
                    _ => return Err(ApiError::MethodNotAllowed),
                }
            }
            _ => match method.as_str() {
                "GET" => Verb::Get,
                _ => return Err(ApiError::MethodNotAllowed),
            },
        };
        Ok((verb, target))
    }

    /// Handles one API request (paths under `/api` and `/apis`), never failing: errors become
    /// Status responses.
    pub async fn handle<B>(self: &Arc<Self>, req: http::Request<B>, caller: &Caller) -> Response
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        match self.handle_inner(req, caller).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        }
    }

    async fn handle_inner<B>(self: &Arc<Self>, req: http::Request<B>, caller: &Caller) -> ApiResult<Response>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let (parts, body) = req.into_parts();
        let query = Query::parse(parts.uri.query());
        let (verb, target) = self.classify(&parts.method, parts.uri.path(), &query)?;
        let aggregated = match target {
            Target::CoreVersions | Target::Groups => discovery::wants_aggregated(parts.headers.get("accept").and_then(|v| v.to_str().ok())),
            _ => None,
        };
        if let Some(version) = aggregated {
            let doc = self.aggregated_discovery(version, matches!(target, Target::CoreVersions));
            let body = serde_json::to_vec(&doc).expect("serializable");
            let etag = {
                use sha2::Digest;
                format!("\"{}\"", hex::encode(&sha2::Sha256::digest(&body)[..16]))
            };
            return Ok(http::Response::builder()
                .status(StatusCode::OK)
                .header("content-type", discovery::aggregated_content_type(version))
                .header("etag", etag)
                .header("vary", "Accept")
                .body(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed())
                .expect("valid response"));
        }
        let r = match target {
            Target::CoreVersions => return Ok(json_response(StatusCode::OK, &discovery::core_versions(&self.config.server_address))),
            Target::Groups => return Ok(json_response(StatusCode::OK, &discovery::group_list(&self.registry.snapshot()))),
            Target::Group(g) => return discovery::group(&self.registry.snapshot(), &g).map(|v| json_response(StatusCode::OK, &v)).ok_or(ApiError::NoSuchResource),
            Target::Resources { group, version } => {
                let mut list = discovery::resource_list(&self.registry.snapshot(), &group, &version);
                self.add_subresource_discovery(&mut list, &group, &version);
                return Ok(json_response(StatusCode::OK, &list));
            }
            Target::Resource(r) => r,
        };
        let accept = parts.headers.get("accept").and_then(|v| v.to_str().ok()).map(str::to_string);
        let ct = content_type(&parts.headers);
        let body = match verb {
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection => {
                // the listener's body-limit layer (`http::limit_bodies`) wraps the body in
                // `Limited`; reading past it is this 413
                let max = self.config.limits.max_body_bytes;
                match body.collect().await {
                    Ok(c) => c.to_bytes(),
                    Err(e) if crate::http::is_length_limit(&e) => return Err(ApiError::TooLarge(format!("Request entity too large: limit is {max}"))),
                    Err(e) => return Err(ApiError::BadRequest(format!("reading request body: {e}"))),
                }
            }
            _ => Bytes::new(),
        };
        if let Some(ns) = &r.namespace {
            if !object::is_dns1123_label(ns) {
                return Err(ApiError::NotFound { resource: "namespaces".into(), name: ns.clone() });
            }
        }
        if let (Some(h), Some(_)) = (self.subresource_handler(&r), &r.name) {
            let body = if body.is_empty() { None } else { Some(decode_body(&ct, &body)?) };
            let sreq = SubresourceRequest { method: &parts.method, resource: &r, query: &query, body, caller };
            let (code, v) = h.handle(self, sreq).await?;
            return Ok(json_response(code, &v));
        }
        let want_table = table::wants_table(accept.as_deref());
        let include_object = query.get("includeObject").unwrap_or("Metadata").to_string();
        let dry_run = query.get("dryRun").is_some_and(|v| v == "All");
        let manager = query
            .non_empty("fieldManager")
            .map(str::to_string)
            .or_else(|| parts.headers.get("user-agent").and_then(|v| v.to_str().ok()).map(|ua| ua.split('/').next().unwrap_or("unknown").to_string()))
            .unwrap_or_else(|| "unknown".into());
        let ctx = Ctx { caller: caller.clone(), dry_run, manager, apply: false };
        match verb {
            Verb::Get => {
                let obj = self.get(&r).await?;
                if want_table && r.subresource.is_none() {
                    let rv = meta_str(&obj, "resourceVersion").unwrap_or("").to_string();
                    return Ok(json_response(StatusCode::OK, &table::table(&r.info, &[obj], json!({"resourceVersion": rv}), &include_object, true)));
                }
                Ok(json_response(StatusCode::OK, &obj))
            }
            Verb::List => {
                let unfiltered = query.non_empty("labelSelector").is_none() && query.non_empty("fieldSelector").is_none();
                if !want_table && unfiltered && r.subresource.is_none() && !needs_version_rewrite(&r.info) {
                    return self.list_raw(&r, &query).await;
                }
                let list = self.list(&r, &query).await?;
                if want_table {
                    let meta = list.meta.clone();
                    let items = list.into_items();
                    return Ok(json_response(StatusCode::OK, &table::table(&r.info, &items, meta, &include_object, true)));
                }
                Ok(bytes_response(StatusCode::OK, Bytes::from(list.to_bytes(&r.info))))
            }
            Verb::Watch => {
                let slot = self.acquire_watch(&caller.user)?;
                self.watch(&r, &query, want_table, include_object, slot).await
            }
            Verb::Create => {
                let mode = FieldValidation::from_query(&query)?;
                let doc = body::decode(&ct, &body, mode.checks())?;
                let warnings = field_validation(&r, mode, &doc)?;
                let out = self.create(&r, doc.value, &ctx).await?;
                let warnings = [warnings, unchecked_rules(&r.info, &out)].concat();
                Ok(with_warnings(json_response(StatusCode::CREATED, &out), &warnings))
            }
            Verb::Update => {
                let mode = FieldValidation::from_query(&query)?;
                let doc = body::decode(&ct, &body, mode.checks())?;
                let warnings = field_validation(&r, mode, &doc)?;
                let (out, created) = self.update(&r, doc.value, &ctx).await?;
                let warnings = [warnings, unchecked_rules(&r.info, &out)].concat();
                Ok(with_warnings(json_response(if created { StatusCode::CREATED } else { StatusCode::OK }, &out), &warnings))
            }
            Verb::Patch => {
                let mode = FieldValidation::from_query(&query)?;
                let warnings = match body::decode(&ct, &body, mode.checks()) {
                    Ok(doc) if doc.value.is_object() => field_validation(&r, mode, &doc)?,
                    _ => Vec::new(),
                };
                let (out, created) = self.patch(&r, &ct, &body, &query, &ctx).await?;
                let warnings = [warnings, unchecked_rules(&r.info, &out)].concat();
                Ok(with_warnings(json_response(if created { StatusCode::CREATED } else { StatusCode::OK }, &out), &warnings))
            }
            Verb::Delete => {
                let opts = if body.is_empty() { json!({}) } else { decode_body(&ct, &body)? };
                let (code, out) = self.delete(&r, &opts, &ctx).await?;
                Ok(json_response(code, &out))
            }
            Verb::DeleteCollection => {
                let out = self.delete_collection(&r, &query, &ctx).await?;
                Ok(json_response(StatusCode::OK, &out))
            }
        }
    }

    // -------------------------------------------------------------------------------------
    // Reads

    async fn read(&self, info: &ResourceInfo, ns: Option<&str>, name: &str) -> ApiResult<(Value, i64)> {
        let key = info.key(ns, name);
        match self.store.get(&key).await? {
            Some(kv) => {
                let mut obj = object::from_stored(&kv.value, kv.mod_revision)?;
                served_version(info, &mut obj);
                Ok((obj, kv.mod_revision))
            }
            None => Err(not_found(info, name)),
        }
    }

    /// GET one object (or its status/scale subresource).
    pub async fn get(&self, r: &ResourceRequest) -> ApiResult<Value> {
        let name = r.name.as_deref().ok_or(ApiError::MethodNotAllowed)?;
        let (obj, _) = self.read(&r.info, r.namespace.as_deref(), name).await?;
        match r.subresource.as_deref() {
            None => Ok(obj),
            Some("status") if r.info.has_status => Ok(obj),
            Some("scale") if r.info.has_scale => Ok(scale_of(&r.info, &obj)),
            Some("approval") if super::request::has_approval(&r.info) => Ok(obj),
            _ => Err(ApiError::NoSuchResource),
        }
    }

    /// LIST with selectors, paging and resourceVersion semantics, decoding every object
    /// (selectors and Table output need them; plain lists go through [`ApiServer::list_raw`]).
    pub async fn list(&self, r: &ResourceRequest, q: &Query) -> ApiResult<ListOut> {
        if r.subresource.is_some() || r.name.is_some() {
            return Err(ApiError::MethodNotAllowed);
        }
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), r.info.field_selectors).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let limit = self.capped_limit(q)?;
        let prefix = r.info.ns_prefix(r.namespace.as_deref());
        if let Some(min) = cached_list::min_revision(q)? {
            // from the watch cache: every match, `limit` ignored (as kube-apiserver 1.33)
            let res = self.store.list_cached(&prefix, min).await?;
            let mut items = Vec::new();
            for kv in &res.kvs {
                let mut obj = object::from_stored(&kv.value, kv.mod_revision)?;
                served_version(&r.info, &mut obj);
                if labels.matches_object(&obj) && fields.matches(&obj) {
                    items.push(obj);
                }
            }
            return Ok(ListOut { items, meta: json!({"resourceVersion": res.revision.to_string()}) });
        }
        let (mut revision, mut start) = self.list_start(&prefix, q).await?;
        let filtered = !labels.is_empty() || !fields.is_empty();
        if !filtered && limit == 0 && start.is_empty() {
            // fast path: one read
            let res = self.store.list(&prefix, "", 0, revision).await.map_err(|e| continue_expired(e, None))?;
            let mut items = Vec::with_capacity(res.kvs.len());
            for kv in &res.kvs {
                let mut obj = object::from_stored(&kv.value, kv.mod_revision)?;
                served_version(&r.info, &mut obj);
                items.push(obj);
            }
            return Ok(ListOut { items, meta: json!({"resourceVersion": res.revision.to_string()}) });
        }
        let had_continue = !start.is_empty();
        let mut items = Vec::new();
        let mut last_key: Option<String> = None;
        let mut more;
        let mut remaining;
        loop {
            let page = if limit > 0 { (limit - items.len() as i64).max(1).max(if filtered { 256 } else { 0 }) } else { 0 };
            let resume_at = had_continue.then(|| start.strip_prefix(&prefix).unwrap_or(&start).to_string());
            let res = self.store.list(&prefix, &start, page, revision).await.map_err(|e| continue_expired(e, resume_at))?;
            revision = res.revision;
            remaining = res.remaining;
            more = res.remaining > 0;
            let mut stopped_early = false;
            for (i, kv) in res.kvs.iter().enumerate() {
                let mut obj = object::from_stored(&kv.value, kv.mod_revision)?;
                served_version(&r.info, &mut obj);
                if labels.matches_object(&obj) && fields.matches(&obj) {
                    items.push(obj);
                }
                last_key = Some(kv.key.clone());
                if limit > 0 && items.len() as i64 >= limit {
                    let left = (res.kvs.len() - i - 1) as i64;
                    if left > 0 {
                        more = true;
                        remaining += left;
                    }
                    stopped_early = true;
                    break;
                }
            }
            if stopped_early || !more || limit == 0 {
                break;
            }
            start = format!("{}\u{0}", last_key.clone().unwrap_or_default());
        }
        let mut meta = Map::new();
        meta.insert("resourceVersion".into(), json!(revision.to_string()));
        if more {
            if let Some(k) = &last_key {
                let rel = k.strip_prefix(&prefix).unwrap_or(k);
                meta.insert("continue".into(), json!(paging::encode(revision, rel)));
                if !filtered {
                    meta.insert("remainingItemCount".into(), json!(remaining));
                }
            }
        }
        Ok(ListOut { items, meta: Value::Object(meta) })
    }

    /// The revision (0 = latest) and start key a LIST reads from, from `resourceVersion`,
    /// `resourceVersionMatch` and `continue`. Errors: 400 for bad parameters or tokens, 504
    /// for a resourceVersion ahead of the store.
    async fn list_start(&self, prefix: &str, q: &Query) -> ApiResult<(i64, String)> {
        let rv_param = q.get("resourceVersion").unwrap_or("");
        let rv_match = q.get("resourceVersionMatch").unwrap_or("");
        let (mut revision, mut start) = (0i64, String::new());
        if let Some(tok) = q.non_empty("continue") {
            if !rv_param.is_empty() && rv_param != "0" {
                return Err(ApiError::BadRequest("specifying resource version is not allowed when using continue".into()));
            }
            let (rv, s) = paging::decode(tok)?;
            revision = rv.max(0);
            start = format!("{prefix}{s}");
        } else if !rv_param.is_empty() && rv_param != "0" {
            let want: i64 = rv_param.parse().map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv_param}")))?;
            let current = self.store.current_revision().await?;
            if want > current {
                return Err(ApiError::ResourceVersionTooLarge { requested: want, current });
            }
            if rv_match == "Exact" {
                revision = want;
            }
        } else if rv_match == "Exact" {
            return Err(ApiError::BadRequest("resourceVersionMatch \"Exact\" requires a resourceVersion".into()));
        }
        Ok((revision, start))
    }

    /// LIST without selectors, rendered from the stored bytes without decoding them (see
    /// [`object::write_stored_with_rv`]). An unpaged list is streamed page by page from one
    /// revision, so a list of 200k objects needs no more memory than a page; with `limit`,
    /// one page with a continue token, as [`ApiServer::list`].
    pub async fn list_raw(self: &Arc<Self>, r: &ResourceRequest, q: &Query) -> ApiResult<Response> {
        if r.subresource.is_some() || r.name.is_some() {
            return Err(ApiError::MethodNotAllowed);
        }
        const PAGE: i64 = 500;
        let limit = self.capped_limit(q)?;
        let prefix = r.info.ns_prefix(r.namespace.as_deref());
        if let Some(min) = cached_list::min_revision(q)? {
            let res = self.store.list_cached(&prefix, min).await?;
            let head = cached_list::list_head(&r.info, &json!({"resourceVersion": res.revision.to_string()}));
            return Ok(cached_list::stream_list(head, res.kvs));
        }
        let (revision, start) = self.list_start(&prefix, q).await?;
        let had_continue = !start.is_empty();
        let page = if limit > 0 { limit } else { PAGE };
        let resume_at = had_continue.then(|| start.strip_prefix(&prefix).unwrap_or(&start).to_string());
        let first = self.store.list(&prefix, &start, page, revision).await.map_err(|e| continue_expired(e, resume_at))?;
        let revision = first.revision;
        let mut meta = Map::new();
        meta.insert("resourceVersion".into(), json!(revision.to_string()));
        if limit > 0 && first.remaining > 0 {
            if let Some(last) = first.kvs.last() {
                let rel = last.key.strip_prefix(&prefix).unwrap_or(&last.key);
                meta.insert("continue".into(), json!(paging::encode(revision, rel)));
                meta.insert("remainingItemCount".into(), json!(first.remaining));
            }
        }
        let mut head = cached_list::list_head(&r.info, &Value::Object(meta));
        let render = cached_list::render_items;
        let mut first_item = true;
        head.extend_from_slice(&render(&first.kvs, &mut first_item).map_err(|e| ApiError::Internal(e.to_string()))?);
        if limit > 0 || first.remaining == 0 {
            head.extend_from_slice(b"]}");
            return Ok(bytes_response(StatusCode::OK, Bytes::from(head)));
        }
        // stream the remaining pages at the same revision, from a task (the body must be Sync)
        let mut next = first.kvs.last().map(|kv| format!("{}\u{0}", kv.key));
        let store = self.store.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(2);
        tokio::spawn(async move {
            if tx.send(Ok(Bytes::from(head))).await.is_err() {
                return;
            }
            while let Some(start) = next.take() {
                match store.list(&prefix, &start, PAGE, revision).await {
                    Ok(res) => {
                        if res.remaining > 0 {
                            next = res.kvs.last().map(|kv| format!("{}\u{0}", kv.key));
                        }
                        let chunk = render(&res.kvs, &mut first_item);
                        let failed = chunk.is_err();
                        if tx.send(chunk.map(Bytes::from)).await.is_err() || failed {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                        return;
                    }
                }
            }
            let _ = tx.send(Ok(Bytes::from_static(b"]}"))).await;
        });
        let body = tokio_stream::wrappers::ReceiverStream::new(rx).map(|r| r.map(Frame::data));
        Ok(http::Response::builder().status(StatusCode::OK).header("content-type", "application/json").body(BodyExt::boxed(StreamBody::new(body))).expect("valid response"))
    }

    /// The `limit` query parameter (0 when absent), lowered to [`Limits::max_list_limit`].
    fn capped_limit(&self, q: &Query) -> ApiResult<i64> {
        let limit = q.int("limit")?.unwrap_or(0);
        let max = self.config.limits.max_list_limit;
        Ok(if max > 0 && limit > max { max } else { limit })
    }

    /// Counts one more watch for `user`: 429 TooManyRequests (retry after 1 s) when the user
    /// already holds [`Limits::max_watches_per_user`].
    pub fn acquire_watch(&self, user: &str) -> ApiResult<WatchSlot> {
        let max = self.config.limits.max_watches_per_user;
        let mut m = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(user.to_string()).or_insert(0);
        if max > 0 && *n >= max {
            crate::telemetry::metrics::server().watches_refused.inc();
            return Err(ApiError::TooManyRequests { message: format!("Too many requests, please try again later: user {user:?} already has {max} open watches"), retry_after_seconds: 1 });
        }
        *n += 1;
        Ok(WatchSlot { counts: self.watches.clone(), user: user.to_string() })
    }

    async fn watch(self: &Arc<Self>, r: &ResourceRequest, q: &Query, as_table: bool, include_object: String, slot: WatchSlot) -> ApiResult<Response> {
        if r.subresource.is_some() {
            return Err(ApiError::MethodNotAllowed);
        }
        let mut fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), r.info.field_selectors).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        if let Some(n) = &r.name {
            fields.reqs.push(("metadata.name".into(), n.clone(), false));
        }
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let rv = q.get("resourceVersion").unwrap_or("").to_string();
        let send_initial = q.flag("sendInitialEvents")?;
        if send_initial && q.get("resourceVersionMatch") != Some("NotOlderThan") {
            return Err(ApiError::Invalid {
                kind: "ListOptions".into(),
                group: "meta.k8s.io".into(),
                name: String::new(),
                causes: vec![Cause {
                    reason: "FieldValueInvalid".into(),
                    message: "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan".into(),
                    field: "resourceVersionMatch".into(),
                }],
            });
        }
        let start_rv = if rv.is_empty() || rv == "0" { None } else { Some(rv.parse::<i64>().map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv}")))?) };
        let timeout = match q.int("timeoutSeconds")? {
            Some(t) if t > 0 => Duration::from_secs(t as u64),
            _ => Duration::from_secs(1800 + rand::random::<u64>() % 1800),
        };
        let opts = WatchOptions {
            info: r.info.clone(),
            prefix: r.info.ns_prefix(r.namespace.as_deref()),
            labels,
            fields,
            start_rv,
            initial_events: start_rv.is_none() || send_initial,
            send_initial_bookmark: send_initial,
            bookmarks: q.flag("allowWatchBookmarks")?,
            bookmark_interval: self.config.bookmark_interval,
            timeout,
            as_table,
            include_object,
            buffer: self.config.limits.watch_buffer_events,
            send_timeout: self.config.limits.watch_send_timeout,
            shared: self.watch_lines.clone(),
        };
        let rx = watch::start(self.store.clone(), opts, self.stopping.subscribe(), slot).await?;
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|b| Ok::<_, std::io::Error>(Frame::data(b)));
        Ok(http::Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .header("cache-control", "no-cache, private")
            .body(BodyExt::boxed(StreamBody::new(stream)))
            .expect("valid response"))
    }

    // -------------------------------------------------------------------------------------
    // Writes

    fn check_type(&self, info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
        if !obj.is_object() {
            return Err(ApiError::BadRequest("the body of the request must be a JSON or YAML object".into()));
        }
        if let Some(av) = obj.get("apiVersion") {
            if av.as_str() != Some(info.api_version().as_str()) {
                return Err(ApiError::BadRequest(format!("the API version in the data ({}) does not match the expected API version ({})", av.as_str().unwrap_or("?"), info.api_version())));
            }
        }
        if let Some(k) = obj.get("kind") {
            if k.as_str() != Some(info.kind) {
                return Err(ApiError::BadRequest(format!("the kind in the data ({}) does not match the expected kind ({})", k.as_str().unwrap_or("?"), info.kind)));
            }
        }
        if let Some(m) = obj.get("metadata") {
            if !m.is_object() {
                return Err(ApiError::BadRequest("metadata must be an object".into()));
            }
        }
        Ok(())
    }

    fn validate(&self, info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
        self.validate_with_old(info, obj, None)
    }

    /// [`ApiServer::validate`] with the stored object of an update (a custom resource's
    /// transition rules compare against it).
    fn validate_with_old(&self, info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
        object::validate_meta(info, obj)?;
        if let Some(c) = info.custom.as_ref().filter(|c| c.schema.is_object()) {
            let out = super::schema::validate(obj, old, &c.schema);
            if !out.causes.is_empty() {
                return Err(object::invalid(info, meta_str(obj, "name").unwrap_or(""), out.causes));
            }
        }
        if let Some(v) = info.validate {
            let causes = v(obj);
            if !causes.is_empty() {
                return Err(object::invalid(info, meta_str(obj, "name").unwrap_or(""), causes));
            }
        }
        // then the decoding into the kind's type kube-apiserver does first (400): the
        // kind-specific checks above name the field for the mistakes they know (422)
        if let Some(decode) = info.decode {
            // mirrors kube-apiserver's decoding of the body into the kind's Go type (400)
            decode(obj).map_err(|e| ApiError::BadRequest(format!("{k} in version \"{v}\" cannot be handled as a {k}: {e}", k = info.kind, v = info.version)))?;
        }
        Ok(())
    }

    /// Mirrors NamespaceLifecycle admission for a create of `name` (empty with generateName)
    /// in `ns`: the namespace must exist (404 otherwise) and not be terminating (403).
    async fn check_namespace(&self, info: &ResourceInfo, ns: Option<&str>, name: &str) -> ApiResult<()> {
        if !info.namespaced {
            return Ok(());
        }
        let ns = ns.ok_or_else(|| ApiError::BadRequest("the namespace of the provided object does not match the namespace sent on the request".into()))?;
        // an active namespace the cache knows needs no read; anything else is read (a miss
        // may be a namespace created a moment ago; a terminating one gets the exact answer)
        if self.namespaces.lookup(ns) == super::namespaces::Known::Present(false) {
            return Ok(());
        }
        let nsinfo = self.registry.lookup("", "v1", "namespaces").ok_or(ApiError::NoSuchResource)?;
        match self.store.get(&nsinfo.key(None, ns)).await? {
            None => Err(ApiError::NotFound { resource: "namespaces".into(), name: ns.into() }),
            Some(kv) => {
                let obj = object::from_stored(&kv.value, kv.mod_revision)?;
                if object::meta(&obj).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                    return Err(ApiError::Forbidden(format!("{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated", info.resource)));
                }
                Ok(())
            }
        }
    }

    /// Prepares a new object (mirrors the registry's BeforeCreate: uid, timestamps, generation,
    /// status reset) and stores it. Returns the stored object.
    pub async fn create(self: &Arc<Self>, r: &ResourceRequest, mut obj: Value, ctx: &Ctx) -> ApiResult<Value> {
        let info = &r.info;
        if r.subresource.is_some() {
            return Err(ApiError::MethodNotAllowed);
        }
        self.check_type(info, &obj)?;
        // namespace: path wins; a conflicting body namespace is a 400
        if info.namespaced {
            match (meta_str(&obj, "namespace"), r.namespace.as_deref()) {
                (Some(b), Some(p)) if !b.is_empty() && b != p => return Err(ApiError::BadRequest("the namespace of the provided object does not match the namespace sent on the request".into())),
                _ => {}
            }
            if let Some(p) = &r.namespace {
                object::meta_mut(&mut obj).insert("namespace".into(), json!(p));
            }
        } else {
            object::meta_mut(&mut obj).remove("namespace");
        }
        if meta_str(&obj, "name").unwrap_or("").is_empty() {
            if let Some(g) = meta_str(&obj, "generateName").map(str::to_string) {
                let name = format!("{g}{}", random_suffix());
                object::meta_mut(&mut obj).insert("name".into(), json!(name));
            }
        }
        if let (Some(pn), Some(bn)) = (r.name.as_deref(), meta_str(&obj, "name")) {
            if pn != bn {
                return Err(ApiError::BadRequest("the name of the object does not match the name on the URL".into()));
            }
        }
        apply_defaults(info, &mut obj);
        self.validate(info, &obj)?;
        self.check_namespace(info, r.namespace.as_deref(), meta_str(&obj, "name").unwrap_or("")).await?;
        prepare_create(info, &mut obj, ctx);
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        if self.has_hooks(info) {
            let req = AdmissionRequest { operation: Operation::Create, info, namespace: r.namespace.as_deref(), name: &name, subresource: None, old: None, proposed: None, ctx };
            self.admit(&req, &mut obj).await?;
            self.validate(info, &obj)?;
            if meta_str(&obj, "name") != Some(name.as_str()) {
                return Err(ApiError::Internal("admission changed the object's name".into()));
            }
        }
        let key = info.key(r.namespace.as_deref(), &name);
        if ctx.dry_run {
            if self.store.get(&key).await?.is_some() {
                return Err(ApiError::AlreadyExists { resource: info.qualified(), name });
            }
            return Ok(obj);
        }
        let rev = match self.store.create(&key, Bytes::from(object::to_stored(info, &obj))).await {
            Ok(rev) => rev,
            Err(StorageError::AlreadyExists(_)) => return Err(ApiError::AlreadyExists { resource: info.qualified(), name }),
            Err(e) => return Err(e.into()),
        };
        let mut out = obj;
        round_trip(info, &mut out);
        out["apiVersion"] = json!(info.api_version());
        out["kind"] = json!(info.kind);
        object::set_rv(&mut out, rev);
        if self.has_hooks(info) {
            let req = AdmissionRequest { operation: Operation::Create, info, namespace: r.namespace.as_deref(), name: &name, subresource: None, old: None, proposed: None, ctx };
            for h in self.hooks.iter().filter(|h| h.handles(info)) {
                h.after_create(self, &req, &out).await;
            }
        }
        Ok(out)
    }

    /// PUT: replaces an object (main resource or status), honouring metadata.resourceVersion
    /// as a precondition. Returns `(object, created)`.
    pub async fn update(self: &Arc<Self>, r: &ResourceRequest, obj: Value, ctx: &Ctx) -> ApiResult<(Value, bool)> {
        let info = r.info.clone();
        self.check_type(&info, &obj)?;
        let name = r.name.clone().ok_or(ApiError::MethodNotAllowed)?;
        if let Some(bn) = meta_str(&obj, "name") {
            if bn != name {
                return Err(ApiError::BadRequest("the name of the object does not match the name on the URL".into()));
            }
        }
        if let (Some(bns), Some(pns)) = (meta_str(&obj, "namespace"), r.namespace.as_deref()) {
            if !bns.is_empty() && bns != pns {
                return Err(ApiError::BadRequest("the namespace of the provided object does not match the namespace sent on the request".into()));
            }
        }
        let precondition: Option<i64> = match meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(s.parse().map_err(|_| ApiError::BadRequest(format!("invalid resourceVersion {s:?}")))?),
        };
        if r.subresource.as_deref() == Some("scale") {
            if !info.has_scale {
                return Err(ApiError::NoSuchResource);
            }
            let replicas = obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
            let info2 = info.clone();
            let out = self
                .guaranteed_update(r, &name, precondition, ctx, move |cur| {
                    let mut n = cur.clone();
                    set_replicas(&info2, &mut n, json!(replicas));
                    Ok(n)
                })
                .await?;
            return Ok((scale_of(&info, &out), false));
        }
        let out = self.guaranteed_update(r, &name, precondition, ctx, move |_cur| Ok(obj.clone())).await?;
        Ok((out, false))
    }

    /// PATCH: JSON merge, JSON patch, strategic merge or server-side apply.
    pub async fn patch(self: &Arc<Self>, r: &ResourceRequest, ct: &str, body: &[u8], q: &Query, ctx: &Ctx) -> ApiResult<(Value, bool)> {
        let name = r.name.clone().ok_or(ApiError::MethodNotAllowed)?;
        let info = r.info.clone();
        let patch_doc = decode_body(ct, body)?;
        let kind = match ct {
            "application/merge-patch+json" => PatchKind::Merge,
            "application/json-patch+json" => PatchKind::Json,
            "application/strategic-merge-patch+json" => {
                if !info.builtin {
                    return Err(ApiError::UnsupportedMediaType("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into()));
                }
                PatchKind::Strategic
            }
            "application/apply-patch+yaml" => PatchKind::Apply { force: q.flag("force")? },
            other => return Err(ApiError::UnsupportedMediaType(format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"))),
        };
        if matches!(kind, PatchKind::Apply { .. }) && q.non_empty("fieldManager").is_none() {
            return Err(ApiError::BadRequest("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into()));
        }
        if !matches!(kind, PatchKind::Json) && !patch_doc.is_object() {
            return Err(ApiError::BadRequest("the patch must be a JSON object".into()));
        }
        if matches!(kind, PatchKind::Json) && !patch_doc.is_array() {
            return Err(ApiError::BadRequest("json patch must be a JSON array of operations".into()));
        }
        let precondition: Option<i64> = match patch_doc.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
            Some(s) if !matches!(kind, PatchKind::Apply { .. }) => Some(s.parse().map_err(|_| ApiError::BadRequest(format!("invalid resourceVersion {s:?}")))?),
            _ => None,
        };
        let scale = r.subresource.as_deref() == Some("scale");
        if scale && !info.has_scale {
            return Err(ApiError::NoSuchResource);
        }
        let apply_ctx;
        let ctx = if matches!(kind, PatchKind::Apply { .. }) {
            apply_ctx = Ctx { apply: true, ..ctx.clone() };
            &apply_ctx
        } else {
            ctx
        };
        // server-side apply may create
        if let PatchKind::Apply { force } = kind {
            if r.subresource.is_none() {
                match self.read(&info, r.namespace.as_deref(), &name).await {
                    Err(ApiError::NotFound { .. }) => {
                        self.check_type(&info, &patch_doc)?;
                        let created = super::apply::server_side_apply(None, &patch_doc, &ctx.manager, force, &info.api_version(), info.kind, &object::now_rfc3339()).map_err(apply_err)?;
                        let out = self.create(r, created, ctx).await?;
                        return Ok((out, true));
                    }
                    Err(e) => return Err(e),
                    Ok(_) => {}
                }
            }
        }
        let info2 = info.clone();
        let manager = ctx.manager.clone();
        let out = self
            .guaranteed_update(r, &name, precondition, ctx, move |cur| {
                let target = if scale { scale_of(&info2, cur) } else { cur.clone() };
                let patched = match kind {
                    PatchKind::Merge => super::patch::merge_patch(&target, &patch_doc),
                    PatchKind::Json => super::patch::json_patch(&target, &patch_doc).map_err(|e| patch_err(&info2, meta_str(cur, "name").unwrap_or(""), e))?,
                    PatchKind::Strategic => {
                        super::patch::strategic_merge_patch(&target, &patch_doc, &info2.api_version(), info2.kind).map_err(|e| patch_err(&info2, meta_str(cur, "name").unwrap_or(""), e))?
                    }
                    PatchKind::Apply { force } => {
                        super::apply::server_side_apply_defaulted(Some(&target), &patch_doc, &manager, force, &info2.api_version(), info2.kind, &object::now_rfc3339(), |v| apply_defaults(&info2, v))
                            .map_err(apply_err)?
                    }
                };
                if scale {
                    let mut n = cur.clone();
                    set_replicas(&info2, &mut n, patched.pointer("/spec/replicas").cloned().unwrap_or(json!(0)));
                    return Ok(n);
                }
                Ok(patched)
            })
            .await?;
        Ok((if scale { scale_of(&info, &out) } else { out }, false))
    }

    /// The update loop (mirrors the registry's GuaranteedUpdate): read, transform, validate,
    /// compare-and-swap; retries on a concurrent write unless the caller pinned a
    /// resourceVersion (then 409 Conflict).
    ///
    /// The first attempt starts from the watch cache's copy of the object when the cache
    /// holds its resource ([`Storage::get_cached`]; kube-apiserver's cacher passes its copy
    /// to etcd3's `GuaranteedUpdate` as `cachedExistingObject`): one etcd read less per
    /// update. A copy may be stale, so what it leads to — a conflict, an error, a no-op, a
    /// dry run — is tried again from a read of etcd before it is answered; a conflict's
    /// retry starts from the state etcd returned with it (etcd3's txn `else get`).
    pub async fn guaranteed_update<F>(self: &Arc<Self>, r: &ResourceRequest, name: &str, precondition: Option<i64>, ctx: &Ctx, f: F) -> ApiResult<Value>
    where
        F: Fn(&Value) -> ApiResult<Value>,
    {
        let info = r.info.clone();
        let key = info.key(r.namespace.as_deref(), name);
        // (state, read from etcd just now)
        let mut next: Option<(KeyValue, bool)> = self.store.get_cached(&key).map(|kv| (kv, false));
        for _ in 0..self.config.max_retries {
            let (kv, current) = match next.take() {
                Some(s) => s,
                None => (self.store.get(&key).await?.ok_or_else(|| not_found(&info, name))?, true),
            };
            match self.update_once(r, &info, &key, name, &kv, precondition, ctx, &f).await {
                Ok(Attempt::Written(v)) => return Ok(v),
                Ok(Attempt::Unchanged(v)) if current => return Ok(v),
                Ok(Attempt::Conflict(Some(now))) => next = Some((now, true)),
                Ok(Attempt::Unchanged(_) | Attempt::Conflict(None)) => {}
                Err(e) if current => return Err(e),
                Err(_) => {}
            }
        }
        Err(conflict(&info, name))
    }

    /// One attempt of [`Self::guaranteed_update`] from the state `kv`.
    #[allow(clippy::too_many_arguments)]
    async fn update_once<F>(self: &Arc<Self>, r: &ResourceRequest, info: &Arc<ResourceInfo>, key: &str, name: &str, kv: &KeyValue, precondition: Option<i64>, ctx: &Ctx, f: &F) -> ApiResult<Attempt>
    where
        F: Fn(&Value) -> ApiResult<Value>,
    {
        let mut cur = object::from_stored(&kv.value, kv.mod_revision)?;
        served_version(info, &mut cur);
        // kube-apiserver defaults what it decodes from etcd too: an object stored without
        // a default (before it existed) is patched, compared and stored with it, and
        // gaining it is no spec change
        apply_defaults(info, &mut cur);
        if let Some(p) = precondition {
            if p != kv.mod_revision {
                return Err(conflict(info, name));
            }
        }
        let proposed = f(&cur)?;
        self.check_type(info, &proposed)?;
        let hooked = self.has_hooks(info);
        let proposed_copy = if hooked { Some(proposed.clone()) } else { None };
        let mut new = merge_update(info, &cur, proposed, r.subresource.as_deref());
        if matches!(r.subresource.as_deref(), None | Some("scale")) || info.custom.is_some() {
            // kube-apiserver defaults the decoded body of every update and patch; a status
            // write keeps the stored spec, so it is not defaulted again
            apply_defaults(info, &mut new);
        }
        if let Some(bn) = meta_str(&new, "name") {
            if bn != name {
                return Err(ApiError::BadRequest("the name of the object does not match the name on the URL".into()));
            }
        }
        if hooked {
            let req = AdmissionRequest {
                operation: Operation::Update,
                info,
                namespace: r.namespace.as_deref(),
                name,
                subresource: r.subresource.as_deref(),
                old: Some(&cur),
                proposed: proposed_copy.as_ref(),
                ctx,
            };
            self.admit(&req, &mut new).await?;
        }
        self.validate_with_old(info, &new, Some(&cur))?;
        let changed_spec = spec_changed(&cur, &new);
        if info.has_generation && changed_spec {
            let g = cur.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            object::meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        if !ctx.apply {
            super::apply::track_update(Some(&cur), &mut new, &ctx.manager, &info.api_version(), &object::now_rfc3339());
        }
        // a terminating object whose last finalizer is gone is deleted
        let terminating = object::meta(&new).is_some_and(|m| m.contains_key("deletionTimestamp"));
        if terminating && object::finalizers(&new).is_empty() && !ctx.dry_run {
            match self.store.delete(key, kv.mod_revision).await {
                Ok((rev, _)) => {
                    object::set_rv(&mut new, rev);
                    return Ok(Attempt::Written(new));
                }
                Err(StorageError::Conflict { current, .. }) if precondition.is_none() => return Ok(Attempt::Conflict(current)),
                Err(StorageError::Conflict { .. }) => return Err(conflict(info, name)),
                Err(StorageError::NotFound(_)) => return Err(not_found(info, name)),
                Err(e) => return Err(e.into()),
            }
        }
        let stored_new = object::to_stored(info, &new);
        if stored_new == object::to_stored(info, &cur) || object::same_content(&new, &cur) || ctx.dry_run {
            // no-op update: nothing written, resourceVersion unchanged
            return Ok(Attempt::Unchanged(if ctx.dry_run { new } else { cur }));
        }
        match self.store.update(key, Bytes::from(stored_new), kv.mod_revision).await {
            Ok(rev) => {
                round_trip(info, &mut new);
                new["apiVersion"] = json!(info.api_version());
                new["kind"] = json!(info.kind);
                object::set_rv(&mut new, rev);
                Ok(Attempt::Written(new))
            }
            Err(StorageError::Conflict { current, .. }) if precondition.is_none() => Ok(Attempt::Conflict(current)),
            Err(StorageError::Conflict { .. }) => Err(conflict(info, name)),
            Err(StorageError::NotFound(_)) => Err(not_found(info, name)),
            Err(e) => Err(e.into()),
        }
    }

    /// DELETE one object: graceful with finalizers (sets deletionTimestamp), immediate otherwise;
    /// namespaces are finalized in the background (their content removed first).
    /// `propagationPolicy` is accepted and has no effect here: the federation store runs no
    /// owner-reference garbage collector (a template's Works are removed by the propagation
    /// controller, not by ownerReferences).
    pub async fn delete(self: &Arc<Self>, r: &ResourceRequest, opts: &Value, ctx: &Ctx) -> ApiResult<(StatusCode, Value)> {
        let info = r.info.clone();
        let name = r.name.clone().ok_or(ApiError::MethodNotAllowed)?;
        if r.subresource.is_some() {
            return Err(ApiError::MethodNotAllowed);
        }
        if info.group.is_empty() && info.resource == "namespaces" && IMMORTAL_NAMESPACES.contains(&name.as_str()) {
            return Err(ApiError::Forbidden(format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")));
        }
        let key = info.key(r.namespace.as_deref(), &name);
        let pre_rv: Option<i64> = opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str).and_then(|s| s.parse().ok());
        let pre_uid = opts.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string);
        for _ in 0..self.config.max_retries {
            let kv = self.store.get(&key).await?.ok_or_else(|| not_found(&info, &name))?;
            let mut cur = object::from_stored(&kv.value, kv.mod_revision)?;
            served_version(&info, &mut cur);
            if pre_rv.is_some_and(|p| p != kv.mod_revision) {
                return Err(ApiError::Conflict {
                    resource: info.qualified(),
                    name: name.clone(),
                    message: format!(
                        "the ResourceVersion in the precondition ({}) does not match the ResourceVersion in record ({}). The object might have been modified",
                        pre_rv.unwrap_or(0),
                        kv.mod_revision
                    ),
                });
            }
            if let Some(u) = &pre_uid {
                if meta_str(&cur, "uid") != Some(u.as_str()) {
                    return Err(ApiError::Conflict {
                        resource: info.qualified(),
                        name: name.clone(),
                        message: format!(
                            "the UID in the precondition ({u}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                            meta_str(&cur, "uid").unwrap_or("")
                        ),
                    });
                }
            }
            let is_ns = info.group.is_empty() && info.resource == "namespaces";
            // a CRD is deleted once its custom resources are (kube-apiserver's CRD storage adds
            // the cleanup finalizer on delete; the CRD controller removes it)
            let is_crd = info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions";
            let needs_graceful = !object::finalizers(&cur).is_empty() || is_ns || is_crd;
            if needs_graceful {
                if object::meta(&cur).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                    return Ok((StatusCode::ACCEPTED, cur));
                }
                let mut new = cur.clone();
                let m = object::meta_mut(&mut new);
                m.insert("deletionTimestamp".into(), json!(object::now_rfc3339()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                if is_crd {
                    let mut fs = object::finalizers(&new);
                    if !fs.iter().any(|f| f == super::crd::CLEANUP_FINALIZER) {
                        fs.push(super::crd::CLEANUP_FINALIZER.to_string());
                    }
                    object::meta_mut(&mut new).insert("finalizers".into(), json!(fs));
                }
                if is_ns {
                    new["status"] = json!({"phase": "Terminating"});
                    new["spec"] = json!({"finalizers": ["kubernetes"]});
                }
                if ctx.dry_run {
                    return Ok((StatusCode::ACCEPTED, new));
                }
                match self.store.update(&key, Bytes::from(object::to_stored(&info, &new)), kv.mod_revision).await {
                    Ok(rev) => {
                        object::set_rv(&mut new, rev);
                        if is_ns {
                            let me = self.clone();
                            tokio::spawn(me.finalize_namespace(name.clone()));
                        }
                        return Ok((StatusCode::ACCEPTED, new));
                    }
                    Err(StorageError::Conflict { .. }) => continue,
                    Err(StorageError::NotFound(_)) => return Err(not_found(&info, &name)),
                    Err(e) => return Err(e.into()),
                }
            }
            if ctx.dry_run {
                return Ok((StatusCode::OK, cur));
            }
            match self.store.delete(&key, kv.mod_revision).await {
                Ok((rev, _)) => {
                    let mut out = cur;
                    object::set_rv(&mut out, rev);
                    return Ok((StatusCode::OK, out));
                }
                Err(StorageError::Conflict { .. }) => continue,
                Err(StorageError::NotFound(_)) => return Err(not_found(&info, &name)),
                Err(e) => return Err(e.into()),
            }
        }
        Err(conflict(&info, &name))
    }

    /// DELETE on a collection: deletes every object matching the selectors.
    pub async fn delete_collection(self: &Arc<Self>, r: &ResourceRequest, q: &Query, ctx: &Ctx) -> ApiResult<Value> {
        let mut q2 = q.clone();
        q2.0.remove("limit");
        q2.0.remove("continue");
        let list = self.list(r, &q2).await?;
        let meta = list.meta.clone();
        let mut deleted = Vec::new();
        for obj in list.into_items() {
            let name = meta_str(&obj, "name").unwrap_or("").to_string();
            let rr = ResourceRequest { name: Some(name), namespace: meta_str(&obj, "namespace").map(str::to_string).or(r.namespace.clone()), ..r.clone() };
            match self.delete(&rr, &json!({}), ctx).await {
                Ok((_, o)) => deleted.push(o),
                Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(json!({"kind": r.info.list_kind(), "apiVersion": r.info.api_version(), "metadata": meta, "items": deleted}))
    }

    /// Namespace finalization (mirrors kube-controller-manager's namespace controller): deletes
    /// every namespaced object in `ns`, waits for objects held by finalizers, then removes the
    /// namespace. Idempotent; safe to run from several servers.
    pub fn finalize_namespace(self: Arc<Self>, ns: String) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(async move { self.finalize_namespace_inner(&ns).await })
    }

    async fn finalize_namespace_inner(self: &Arc<Self>, ns: &str) {
        let ctx =
            Ctx { caller: Caller { user: "system:serviceaccount:kube-system:namespace-controller".into(), groups: vec![] }, dry_run: false, manager: "namespace-controller".into(), apply: false };
        let mut delay = Duration::from_millis(100);
        loop {
            let mut left = 0usize;
            let mut failed = false;
            for info in self.registry.all().iter().filter(|i| i.namespaced) {
                let prefix = info.ns_prefix(Some(ns));
                let res = match self.store.list(&prefix, "", 0, 0).await {
                    Ok(r) => r,
                    Err(_) => {
                        failed = true;
                        continue;
                    }
                };
                for kv in res.kvs {
                    left += 1;
                    let name = kv.key.rsplit('/').next().unwrap_or("").to_string();
                    let rr = ResourceRequest { info: info.clone(), namespace: Some(ns.to_string()), name: Some(name), subresource: None, watch_path: false };
                    let empty = json!({});
                    let fut: std::pin::Pin<Box<dyn std::future::Future<Output = ApiResult<(StatusCode, Value)>> + Send + '_>> = Box::pin(self.delete(&rr, &empty, &ctx));
                    if let Err(e) = fut.await {
                        if !matches!(e, ApiError::NotFound { .. }) {
                            failed = true;
                        }
                    }
                }
            }
            if left == 0 && !failed {
                let Some(nsinfo) = self.registry.lookup("", "v1", "namespaces") else { return };
                let key = nsinfo.key(None, ns);
                match self.store.get(&key).await {
                    Ok(Some(kv)) => {
                        let Ok(obj) = object::from_stored(&kv.value, kv.mod_revision) else { return };
                        if !object::meta(&obj).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                            return; // recreated meanwhile
                        }
                        if object::finalizers(&obj).is_empty() {
                            if self.store.delete(&key, kv.mod_revision).await.is_ok() {
                                return;
                            }
                        } else {
                            // other finalizers still hold it: drop ours and let them finish
                            let mut new = obj.clone();
                            new["spec"] = json!({"finalizers": []});
                            if self.store.update(&key, Bytes::from(object::to_stored(&nsinfo, &new)), kv.mod_revision).await.is_ok() {
                                return;
                            }
                        }
                    }
                    Ok(None) => return,
                    Err(_) => {}
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }

    /// Resumes finalization of namespaces left terminating (e.g. by a restart).
    pub async fn resume_namespace_finalization(self: &Arc<Self>) {
        let Some(nsinfo) = self.registry.lookup("", "v1", "namespaces") else { return };
        if let Ok(res) = self.store.list(&nsinfo.prefix(), "", 0, 0).await {
            for kv in res.kvs {
                if let Ok(obj) = object::from_stored(&kv.value, kv.mod_revision) {
                    if object::meta(&obj).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                        let name = meta_str(&obj, "name").unwrap_or("").to_string();
                        let me = self.clone();
                        tokio::spawn(me.finalize_namespace(name.clone()));
                    }
                }
            }
        }
    }
}

/// Per-request context for writes.
#[derive(Clone, Debug, Default)]
pub struct Ctx {
    /// Who is asking.
    pub caller: Caller,
    /// `dryRun=All`: validate and answer, write nothing.
    pub dry_run: bool,
    /// Field manager (from `fieldManager`, else the user agent's program name).
    pub manager: String,
    /// A server-side apply: managedFields were already computed by the apply engine, so
    /// no `Update` entry is recorded.
    pub apply: bool,
}

#[derive(Clone, Copy)]
enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply { force: bool },
}

/// A list result before rendering.
pub struct ListOut {
    /// Matching objects with their resourceVersions set.
    pub items: Vec<Value>,
    /// ListMeta: resourceVersion, continue, remainingItemCount.
    pub meta: Value,
}

impl ListOut {
    /// All items.
    pub fn into_items(self) -> Vec<Value> {
        self.items
    }

    /// Encodes `{kind: <Kind>List, apiVersion, metadata, items}`.
    pub fn to_bytes(&self, info: &ResourceInfo) -> Vec<u8> {
        serde_json::to_vec(&json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": self.meta, "items": self.items})).expect("serializable")
    }
}

fn apply_err(e: super::apply::ApplyError) -> ApiError {
    e.into()
}

/// Maps a patch engine error: malformed patch → 400, inapplicable patch → 422 on the object.
fn patch_err(info: &ResourceInfo, name: &str, e: super::patch::PatchError) -> ApiError {
    if e.code() == 400 {
        return ApiError::BadRequest(e.to_string());
    }
    ApiError::Invalid { kind: info.kind.into(), group: info.group.into(), name: name.into(), causes: vec![Cause { reason: "FieldValueInvalid".into(), message: e.to_string(), field: "patch".into() }] }
}

fn not_found(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::NotFound { resource: info.qualified(), name: name.into() }
}

fn conflict(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::Conflict { resource: info.qualified(), name: name.into(), message: "the object has been modified; please apply your changes to the latest version and try again".into() }
}

/// Maps a list error; a compacted revision while following a continue token (`resume_at`:
/// the token's start key relative to the prefix) is 410 Expired carrying a fresh token that
/// continues from the same key at the latest revision (`rv: -1`), as kube-apiserver's
/// `handleCompactedErrorForPaging`.
fn continue_expired(e: StorageError, resume_at: Option<String>) -> ApiError {
    match (e, resume_at) {
        (StorageError::Compacted { .. }, Some(start)) => ApiError::ContinueExpired { token: paging::encode_start(-1, &start) },
        (other, _) => other.into(),
    }
}

fn random_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5).map(|_| ALPHA[rand::random::<u32>() as usize % ALPHA.len()] as char).collect()
}

/// Fills server-owned metadata on create (mirrors `rest.BeforeCreate`).
fn prepare_create(info: &ResourceInfo, obj: &mut Value, ctx: &Ctx) {
    let now = object::now_rfc3339();
    {
        let m = object::meta_mut(obj);
        m.insert("uid".into(), json!(object::new_uid()));
        m.insert("creationTimestamp".into(), json!(now));
        m.remove("resourceVersion");
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if info.has_generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    if info.kind == "Namespace" {
        obj["status"] = json!({"phase": "Active"});
        if obj.pointer("/spec/finalizers").is_none() {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
        }
        let name = meta_str(obj, "name").unwrap_or("").to_string();
        let m = object::meta_mut(obj);
        let labels = m.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    } else if info.has_status && info.kind != "Pod" && info.kind != "Node" {
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    }
    // again after the status reset: defaults inside status (a PVC's phase) are what a
    // kube-apiserver shows when it decodes the stored object
    apply_defaults(info, obj);
    if !ctx.apply {
        super::apply::track_update(None, obj, &ctx.manager, &info.api_version(), &now);
    }
}

/// The `fieldValidation` query parameter (absent = `Warn`, as kube-apiserver).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// Reads `fieldValidation`. Errors: 400 for a value other than Ignore, Warn, Strict.
    fn from_query(q: &Query) -> ApiResult<Self> {
        match q.get("fieldValidation").unwrap_or("Warn") {
            "Ignore" => Ok(FieldValidation::Ignore),
            "Warn" => Ok(FieldValidation::Warn),
            "Strict" => Ok(FieldValidation::Strict),
            mode => Err(ApiError::BadRequest(format!("fieldValidation must be one of Ignore, Warn, Strict (got {mode:?})"))),
        }
    }

    /// Whether the body must be checked for duplicate keys.
    fn checks(self) -> bool {
        self != FieldValidation::Ignore
    }
}

/// `fieldValidation` (Strict | Warn | Ignore; absent = Warn), mirroring kube-apiserver's
/// strict decoding: unknown fields of a built-in kind (`unknown field "spec.x"`) and keys
/// repeated within one object are a 400 under Strict (`… cannot be handled as a <Kind>:
/// strict decoding error: …`) and `Warning` headers under Warn. Repeated keys are
/// reported for every kind: `duplicate field "<path>"` for JSON (a key both unknown and
/// repeated only as unknown, as for kube's typed kinds), `line <n>: key "<k>" already set in
/// map` for YAML (yaml.v2's words, each repetition, before the unknown fields). The stored
/// object keeps the last occurrence, as kube-apiserver does. Duplicates come before unknown
/// fields (kube-apiserver interleaves JSON ones in document order). Returns the warnings to
/// send.
fn field_validation(r: &ResourceRequest, mode: FieldValidation, doc: &body::Decoded) -> ApiResult<Vec<String>> {
    if mode == FieldValidation::Ignore || r.subresource.is_some() {
        return Ok(Vec::new());
    }
    let unknown = match r.info.custom.as_ref().filter(|c| c.schema.is_object()) {
        Some(c) => super::schema::unknown_fields(&doc.value, &c.schema),
        None => super::protobuf::unknown_fields(&r.info.api_version(), r.info.kind, &doc.value).unwrap_or_default(),
    };
    let shadowed = |path: &str| !doc.yaml && unknown.iter().any(|u| path == u || path.strip_prefix(u.as_str()).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('[')));
    let dups: Vec<String> = doc.duplicates.iter().filter(|d| !shadowed(&d.path)).map(body::Duplicate::message).collect();
    let unknown: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
    if mode == FieldValidation::Strict && !(dups.is_empty() && unknown.is_empty()) {
        let mut parts = Vec::new();
        if !dups.is_empty() {
            parts.push(if doc.yaml { format!("yaml: unmarshal errors:\n  {}", dups.join("\n  ")) } else { dups.join(", ") });
        }
        parts.extend(unknown);
        return Err(ApiError::BadRequest(format!("{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}", r.info.kind, r.info.version, r.info.kind, parts.join(", "))));
    }
    Ok(dups.into_iter().chain(unknown).collect())
}

/// Adds `Warning: 299 - "<text>"` headers (kubectl prints them as `Warning: <text>`).
fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let v = format!("299 - {}", serde_json::to_string(w).unwrap_or_default());
        if let Ok(h) = http::HeaderValue::from_str(&v) {
            resp.headers_mut().append("warning", h);
        }
    }
    resp
}

/// kube-apiserver's defaulting of built-in kinds (see [`super::defaults`]); custom and
/// fedctl kinds are left as they are.
fn apply_defaults(info: &ResourceInfo, obj: &mut Value) {
    if let Some(c) = &info.custom {
        // a custom resource: pruned to its structural schema, then its defaults filled
        // (mirrors the CRD handler's decoding: unknown fields dropped, `default`s applied)
        if c.schema.is_object() {
            super::schema::prune(obj, &c.schema);
            super::schema::default(obj, &c.schema);
        }
        return;
    }
    super::defaults::apply(info.group, info.version, info.kind, obj);
}

/// True when objects of `info` may be stored in another version than `info`'s: a custom
/// resource served in several versions (conversion strategy None) or a built-in kind with a
/// conversion (autoscaling/v1 HorizontalPodAutoscaler).
fn needs_version_rewrite(info: &ResourceInfo) -> bool {
    info.converts()
}

/// Gives an object read from storage the form of the version it is served in (for strategy
/// None only its `apiVersion` changes).
fn served_version(info: &ResourceInfo, obj: &mut Value) {
    info.from_storage(obj);
}

/// A written object of a kind with a conversion as a read would show it (converted to the
/// storage version and back, as kube-apiserver answers a write with what it stored).
fn round_trip(info: &ResourceInfo, obj: &mut Value) {
    if info.conversion.is_some() {
        info.to_storage(obj);
        info.from_storage(obj);
    }
}

/// The `x-kubernetes-validations` rules of a custom resource the CEL interpreter could not
/// check for `obj`, as warnings (also logged): never reported as if they had passed.
fn unchecked_rules(info: &ResourceInfo, obj: &Value) -> Vec<String> {
    let Some(c) = info.custom.as_ref().filter(|c| c.has_rules) else { return Vec::new() };
    let w = super::schema::validate(obj, None, &c.schema).warnings;
    for w in &w {
        tracing::warn!(resource = info.resource, name = meta_str(obj, "name").unwrap_or(""), "{w}");
    }
    w
}

/// The Scale of an object: a custom resource's from its CRD's scale paths, a built-in
/// workload's from `spec.replicas`.
fn scale_of(info: &ResourceInfo, obj: &Value) -> Value {
    match info.custom.as_ref().and_then(|c| c.scale.as_ref()) {
        Some(s) => super::crd::to_scale(obj, s),
        None => to_scale(obj),
    }
}

/// Sets the replicas a Scale write asks for (a custom resource's `specReplicasPath`).
fn set_replicas(info: &ResourceInfo, obj: &mut Value, replicas: Value) {
    match info.custom.as_ref().and_then(|c| c.scale.as_ref()) {
        Some(s) => super::crd::set_path(obj, &s.spec_replicas, replicas),
        None => obj["spec"]["replicas"] = replicas,
    }
}

/// Combines the current object with a proposed one for an update of the main resource or
/// of a subresource (mirrors the strategies' PrepareForUpdate): server-owned metadata is
/// carried over; with a status subresource the main endpoint keeps the current status and
/// `/status` changes only status.
fn merge_update(info: &ResourceInfo, cur: &Value, proposed: Value, subresource: Option<&str>) -> Value {
    let mut new = match subresource {
        Some("status") => {
            let mut n = cur.clone();
            match proposed.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(o) = n.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            n
        }
        Some("finalize") if info.kind == "Namespace" => {
            let mut n = cur.clone();
            n["spec"] = proposed.get("spec").cloned().unwrap_or(json!({}));
            n
        }
        _ => {
            let mut n = proposed;
            if info.has_status || info.kind == "Namespace" {
                match cur.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        if let Some(o) = n.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            n
        }
    };
    let cm = object::meta(cur).cloned().unwrap_or_default();
    let m = object::meta_mut(&mut new);
    for k in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "namespace", "name"] {
        match cm.get(k) {
            Some(v) => {
                m.insert(k.into(), v.clone());
            }
            None => {
                m.remove(k);
            }
        }
    }
    // finalizers may only be removed, not added, once deletion has begun
    new
}

/// True when anything outside metadata and status differs (drives metadata.generation).
fn spec_changed(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
            o.remove("apiVersion");
            o.remove("kind");
        }
        v
    };
    strip(a) != strip(b)
}

/// `autoscaling/v1 Scale` view of a workload.
fn to_scale(obj: &Value) -> Value {
    let m = object::meta(obj).cloned().unwrap_or_default();
    let sel = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|l| l.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}"))).collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    let mut smeta = Map::new();
    for k in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = m.get(k) {
            smeta.insert(k.into(), v.clone());
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": smeta,
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {"replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": sel},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStorage;
    use serde_json::json;

    /// A Deployment stored without defaults (as by an older version) gets them on its next
    /// write, and that write is no spec change: generation stays 1, as kube-apiserver
    /// (which defaults on decoding from etcd) behaves.
    #[tokio::test]
    async fn an_object_stored_without_defaults_gets_them_on_its_next_write_without_a_new_generation() {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let api = ApiServer::new(Registry::federation(), store.clone(), ApiConfig::default());
        let info = api.registry.lookup("apps", "v1", "deployments").expect("deployments served");
        let old = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "old", "namespace": "default", "uid": "u1", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"selector": {"matchLabels": {"app": "old"}}, "template": {"metadata": {"labels": {"app": "old"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}});
        store.create(&info.key(Some("default"), "old"), Bytes::from(object::to_stored(&info, &old))).await.expect("stored");
        let r = ResourceRequest { info: info.clone(), namespace: Some("default".into()), name: Some("old".into()), subresource: None, watch_path: false };
        let ctx = Ctx { manager: "test".into(), ..Default::default() };
        let out = api
            .guaranteed_update(&r, "old", None, &ctx, |cur| {
                let mut n = cur.clone();
                n["metadata"]["labels"] = json!({"touched": "yes"});
                Ok(n)
            })
            .await
            .expect("update");
        assert_eq!(out["spec"]["replicas"], 1);
        assert_eq!(out["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert_eq!(out["metadata"]["generation"], 1, "defaults are no spec change: {out}");
        let kv = store.get(&info.key(Some("default"), "old")).await.unwrap().unwrap();
        let stored = object::from_stored(&kv.value, kv.mod_revision).unwrap();
        assert_eq!(stored["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%", "stored with the defaults");
    }

    /// A memory store whose "watch cache" holds a fixed copy of every key (stale once the
    /// key is written), counting the reads that reach the store.
    struct StaleCache {
        inner: MemoryStorage,
        copy: std::sync::Mutex<Option<KeyValue>>,
        gets: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Storage for StaleCache {
        async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
            self.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.inner.get(key).await
        }
        fn get_cached(&self, _key: &str) -> Option<KeyValue> {
            self.copy.lock().unwrap().clone()
        }
        async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<crate::storage::ListResult, StorageError> {
            self.inner.list(prefix, start, limit, revision).await
        }
        async fn create(&self, key: &str, value: Bytes) -> Result<i64, StorageError> {
            self.inner.create(key, value).await
        }
        async fn update(&self, key: &str, value: Bytes, expected_revision: i64) -> Result<i64, StorageError> {
            self.inner.update(key, value, expected_revision).await
        }
        async fn delete(&self, key: &str, expected_revision: i64) -> Result<(i64, KeyValue), StorageError> {
            self.inner.delete(key, expected_revision).await
        }
        async fn watch(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>) -> Result<crate::storage::WatchStream, StorageError> {
            self.inner.watch(prefix, after_revision, progress_every).await
        }
        async fn current_revision(&self) -> Result<i64, StorageError> {
            self.inner.current_revision().await
        }
        async fn compact(&self, revision: i64) -> Result<(), StorageError> {
            self.inner.compact(revision).await
        }
    }

    /// guaranteed_update starts from the cache's copy (no read of the store when it is
    /// current) and never answers from a stale one: a lost compare-and-swap, a no-op, a
    /// precondition or an error seen on the stale copy is tried again on the stored state.
    #[tokio::test]
    async fn guaranteed_update_starts_from_the_cached_copy_and_never_answers_from_a_stale_one() {
        let store = Arc::new(StaleCache { inner: MemoryStorage::new(), copy: Default::default(), gets: Default::default() });
        let api = ApiServer::new(Registry::federation(), store.clone(), ApiConfig::default());
        let info = api.registry.lookup("", "v1", "configmaps").expect("configmaps served");
        let key = info.key(Some("default"), "n");
        let cm =
            |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n", "namespace": "default", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"}, "data": {"n": n}});
        let rev1 = store.inner.create(&key, Bytes::from(object::to_stored(&info, &cm("1")))).await.unwrap();
        let r = ResourceRequest { info: info.clone(), namespace: Some("default".into()), name: Some("n".into()), subresource: None, watch_path: false };
        let ctx = Ctx { manager: "test".into(), ..Default::default() };
        let set = |v: &'static str| {
            move |cur: &Value| -> ApiResult<Value> {
                let mut n = cur.clone();
                n["data"]["n"] = json!(v);
                Ok(n)
            }
        };
        let incr = |cur: &Value| -> ApiResult<Value> {
            let mut n = cur.clone();
            let v: i64 = cur["data"]["n"].as_str().unwrap().parse().unwrap();
            n["data"]["n"] = json!((v + 1).to_string());
            Ok(n)
        };
        let stored = || async { store.inner.get(&key).await.unwrap().unwrap() };
        let gets = || store.gets.load(std::sync::atomic::Ordering::SeqCst);

        // a current copy: written without a read of the store
        *store.copy.lock().unwrap() = Some(stored().await);
        let out = api.guaranteed_update(&r, "n", None, &ctx, incr).await.unwrap();
        assert_eq!((out["data"]["n"].as_str(), gets()), (Some("2"), 0), "{out}");

        // the copy is now stale (n=1): the lost compare-and-swap retries on the stored n=2
        let out = api.guaranteed_update(&r, "n", None, &ctx, incr).await.unwrap();
        assert_eq!(out["data"]["n"], "3", "no update lost: {out}");
        let rev3 = stored().await.mod_revision;

        // n=1 is a no-op on the stale copy, not on the stored state: it is written
        let out = api.guaranteed_update(&r, "n", None, &ctx, set("1")).await.unwrap();
        assert_eq!(out["data"]["n"], "1");
        assert!(stored().await.mod_revision > rev3, "written, not answered as unchanged from the stale copy");
        let now = stored().await;

        // a precondition naming the stored revision holds, whatever the copy says
        api.guaranteed_update(&r, "n", Some(now.mod_revision), &ctx, set("4")).await.expect("precondition of the stored state");
        // and one naming only the stale copy's revision is a conflict
        let err = api.guaranteed_update(&r, "n", Some(rev1), &ctx, set("5")).await.unwrap_err();
        assert!(matches!(err, ApiError::Conflict { .. }), "{err:?}");

        // an error the stale copy leads to is checked against the stored state
        let fails_on_1 = |cur: &Value| -> ApiResult<Value> {
            if cur["data"]["n"] == "1" {
                return Err(ApiError::BadRequest("n=1".into()));
            }
            let mut n = cur.clone();
            n["data"]["m"] = json!("x");
            Ok(n)
        };
        let out = api.guaranteed_update(&r, "n", None, &ctx, fails_on_1).await.unwrap();
        assert_eq!((out["data"]["n"].as_str(), out["data"]["m"].as_str()), (Some("4"), Some("x")));
    }

    #[test]
    fn same_content_ignores_key_order_and_resource_version_only() {
        use super::object::same_content;
        let a = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "resourceVersion": "5"}, "spec": {"replicas": 1, "paused": false}});
        let b = json!({"metadata": {"resourceVersion": "9", "name": "d"}, "spec": {"paused": false, "replicas": 1}});
        assert!(same_content(&a, &b));
        let c = json!({"metadata": {"name": "d", "generation": 2}, "spec": {"paused": false, "replicas": 1}});
        assert!(!same_content(&a, &c), "another metadata field is a change");
        let d = json!({"metadata": {"name": "d"}, "spec": {"paused": false, "replicas": 2}});
        assert!(!same_content(&a, &d));
        let e = json!({"metadata": {"name": "d"}, "spec": {"paused": false, "replicas": 1}, "status": {}});
        assert!(!same_content(&a, &e), "an added field is a change");
    }
}
