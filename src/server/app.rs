//! The federation server's HTTP application as an axum [`Router`]: health, version, OpenAPI
//! and `/metrics` as routes, the Kubernetes REST space as the fallback into the
//! [`ApiServer`]; authentication, authorization and request metrics as layers. Uses `api`,
//! `search`, `pki`, `http`, `telemetry` and the server's `authz`, `bootstrap` and `lazy`.

use std::sync::Arc;

use axum::extract::State;
use axum::middleware::{from_fn_with_state, Next};
use axum::routing::any;
use axum::Router;
use http::StatusCode;
use serde_json::json;

use crate::api::federation::CLUSTER_INFO_PATH;
use crate::api::handler::{error_response, json_response, Response};
use crate::api::request::{Query, Target};
use crate::api::{discovery, ApiError, ApiServer, Caller};
use crate::http::{PeerCerts, Request};
use crate::pki::auth::TokenAuthenticator;
use crate::storage::lazy::LazyStorage;

/// User name of unauthenticated requests (only ever let through to cluster-info).
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// Group of unauthenticated requests.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";

/// The state behind [`router`]: routes non-API paths, authenticates, authorizes (see
/// [`super::authz`]) and hands API paths to the [`ApiServer`]. Unauthenticated requests get 401, except a GET of
/// `kube-public/cluster-info` (join discovery).
pub struct FederationApp {
    /// The API handler.
    pub api: Arc<ApiServer>,
    /// Bearer token authenticator (static admin token and bootstrap tokens).
    pub tokens: Arc<TokenAuthenticator>,
    /// The store, for readiness.
    pub store: Arc<LazyStorage>,
    /// Set once the bootstrap namespaces exist (`default`, `kube-system`, `kube-public`);
    /// `/readyz` fails until then, as kube-apiserver's does until its post-start hooks finish.
    pub bootstrapped: Arc<std::sync::atomic::AtomicBool>,
    /// The global resource view (`/apis/search.fedctl.io/v1alpha1/…`).
    pub search: Arc<crate::search::SearchApi>,
    /// The RBAC authorizer (second in the chain after the fixed rules of [`super::authz`]).
    pub rbac: Arc<super::rbac::Rbac>,
    /// Every bearer-token authenticator: static, bootstrap, ServiceAccount, OIDC and user
    /// tokens ([`super::identity`]).
    pub identity: Arc<super::identity::Authenticators>,
    /// The audit log (see [`super::audit`]), a layer around every route.
    pub audit: Arc<super::audit::Auditor>,
}

/// The uid a request acts with: its identity's (a ServiceAccount's) or, after
/// `Impersonate-Uid`, the impersonated one (a request extension).
#[derive(Clone, Debug)]
struct ActingUid(String);

fn text(code: StatusCode, s: &str) -> Response {
    use http_body_util::{BodyExt, Full};
    http::Response::builder()
        .status(code)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(bytes::Bytes::from(s.to_string())).map_err(|never| match never {}).boxed())
        .expect("valid response")
}

fn protobuf(body: Vec<u8>) -> Response {
    use http_body_util::{BodyExt, Full};
    http::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", discovery::OPENAPI_V2_PROTOBUF)
        .body(Full::new(bytes::Bytes::from(body)).map_err(|never| match never {}).boxed())
        .expect("valid response")
}

impl FederationApp {
    /// Authenticates a request: a verified client certificate (CN = user, O = groups) or a
    /// bearer token ([`super::identity::Authenticators::authenticate`]). `None` → 401.
    pub async fn authenticate(&self, headers: &http::HeaderMap, peer: &PeerCerts) -> Option<Caller> {
        self.authenticate_with_uid(headers, peer).await.map(|(c, _)| c)
    }

    /// [`FederationApp::authenticate`] with the identity's uid when it has one (a
    /// ServiceAccount's), which `kubectl auth whoami` shows.
    async fn authenticate_with_uid(&self, headers: &http::HeaderMap, peer: &PeerCerts) -> Option<(Caller, Option<String>)> {
        if let Some((user, mut groups)) = crate::pki::peer_identity(peer) {
            // every authenticated user is in `system:authenticated`, as kube-apiserver adds it
            if !groups.iter().any(|g| g == crate::pki::auth::AUTHENTICATED_GROUP) {
                groups.push(crate::pki::auth::AUTHENTICATED_GROUP.to_string());
            }
            return Some((Caller { user, groups }, None));
        }
        let h = headers.get("authorization")?.to_str().ok()?;
        let token = h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer "))?.trim();
        self.identity.authenticate(&self.api, token, None).await.map(|a| (a.caller, a.uid))
    }
}

/// Labels of a request for `apiserver_request_*`, decided before it is handled.
fn request_labels(api: &ApiServer, method: &http::Method, path: &str, query: Option<&str>) -> crate::telemetry::metrics::LatencyLabels {
    let q = Query::parse(query);
    // unknown methods share one label value (no label cardinality from clients)
    let verb = match method.as_str() {
        m @ ("GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" | "OPTIONS") => m,
        _ => "OTHER",
    };
    let mut l = crate::telemetry::metrics::LatencyLabels { verb: verb.to_string(), group: String::new(), version: String::new(), resource: String::new(), subresource: String::new() };
    if let Some(rest) = path.strip_prefix(crate::search::PREFIX) {
        // the global view: resource = the view (`global` or `clusters`)
        l.group = "search.fedctl.io".into();
        l.version = "v1alpha1".into();
        l.resource = rest.split('/').find(|s| *s == "global" || *s == "clusters").unwrap_or("").to_string();
        if method == http::Method::GET && q.flag("watch").unwrap_or(false) {
            l.verb = "WATCH".into();
        }
        return l;
    }
    if let Ok((verb, Target::Resource(r))) = api.classify(method, path, &q) {
        l.verb = verb.as_str().to_ascii_uppercase();
        l.group = r.info.group.to_string();
        l.version = r.info.version.to_string();
        l.resource = r.info.resource.to_string();
        l.subresource = r.subresource.clone().unwrap_or_default();
    }
    l
}

/// Counts an answered request, observes its latency and, for a watch, counts it open until
/// its body is dropped (the stream ended or the client went away).
fn observe(labels: crate::telemetry::metrics::LatencyLabels, started: std::time::Instant, resp: axum::response::Response) -> axum::response::Response {
    use http_body_util::BodyExt;
    let m = crate::telemetry::metrics::server();
    let code = resp.status();
    m.requests
        .get_or_create(&crate::telemetry::metrics::RequestLabels {
            verb: labels.verb.clone(),
            group: labels.group.clone(),
            version: labels.version.clone(),
            resource: labels.resource.clone(),
            subresource: labels.subresource.clone(),
            code: code.as_str().to_string(),
        })
        .inc();
    m.request_duration.get_or_create(&labels).observe(started.elapsed().as_secs_f64());
    if labels.verb != "WATCH" || !code.is_success() {
        return resp;
    }
    struct Open(prometheus_client::metrics::gauge::Gauge);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.dec();
        }
    }
    let gauge = m.watches.get_or_create(&crate::telemetry::metrics::WatchLabels { verb: labels.verb, group: labels.group, version: labels.version, resource: labels.resource }).clone();
    gauge.inc();
    let open = Open(gauge);
    resp.map(move |body| {
        axum::body::Body::new(body.map_frame(move |f| {
            let _ = &open;
            f
        }))
    })
}

fn metrics_response() -> Response {
    use http_body_util::{BodyExt, Full};
    http::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", crate::telemetry::metrics::CONTENT_TYPE)
        .body(Full::new(bytes::Bytes::from(crate::telemetry::metrics::server().encode())).map_err(|never| match never {}).boxed())
        .expect("valid response")
}

impl FederationApp {
    /// Sets the gauges read from live state (cache sizes, cluster readiness) before a scrape.
    async fn refresh_metrics(&self) {
        let m = crate::telemetry::metrics::server();
        if self.search.remote.is_none() {
            self.search.cache.refresh_metrics();
        }
        if let Some(info) = self.api.registry.lookup("cluster.fedctl.io", "v1alpha1", "clusters") {
            let r = crate::api::request::ResourceRequest { info, namespace: None, name: None, subresource: None, watch_path: false };
            // a scrape must answer while etcd does not
            if let Ok(Ok(list)) = tokio::time::timeout(std::time::Duration::from_secs(2), self.api.list(&r, &Query::default())).await {
                m.cluster_ready.clear();
                for c in &list.items {
                    let Some(name) = c.pointer("/metadata/name").and_then(|n| n.as_str()) else { continue };
                    let ready = c
                        .pointer("/status/conditions")
                        .and_then(|c| c.as_array())
                        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready")))
                        .and_then(|c| c.get("status").and_then(|s| s.as_str()))
                        == Some("True");
                    m.cluster_ready.get_or_create(&crate::telemetry::metrics::ClusterLabel { cluster: name.to_string() }).set(i64::from(ready));
                }
            }
        }
    }
}

/// A request let through unauthenticated (a GET of `kube-public/cluster-info`, join
/// discovery): it skips authorization, as it did not authenticate.
#[derive(Clone, Copy, Debug)]
struct Anonymous;

fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "the server could not find the requested resource", "reason": "NotFound", "details": {}, "code": 404}),
    )
}

fn caller_of(req: &Request) -> Caller {
    req.extensions().get::<Caller>().cloned().unwrap_or_default()
}

/// The federation's router: `/healthz`, `/livez`, `/readyz`, `/version` (and `/version/`, as
/// kube-apiserver answers both) and the console's static assets under `/ui/` open to anyone; `/metrics`, `/openapi/v2`, `/openapi/v3[/…]`,
/// the global view and `/api`, `/apis` behind the authentication and authorization layers;
/// every request counted in `apiserver_request_*`.
pub fn router(app: Arc<FederationApp>) -> Router {
    let version = |State(app): State<Arc<FederationApp>>| async move { json_response(StatusCode::OK, &app.api.config.version) };
    let open = Router::new()
        .route("/healthz", any(|| async { text(StatusCode::OK, "ok") }))
        .route("/livez", any(|| async { text(StatusCode::OK, "ok") }))
        .route("/readyz", any(readyz))
        .route("/version", any(version))
        .route("/version/", any(version))
        .merge(super::console::router());
    let protected = Router::new()
        .route("/metrics", any(metrics))
        .route("/openapi/v2", any(openapi_v2))
        .route("/openapi/v3", any(|State(app): State<Arc<FederationApp>>| async move { json_response(StatusCode::OK, &discovery::openapi_v3_root(&app.api.registry.snapshot())) }))
        .route("/openapi/v3/{*gv}", any(openapi_v3_gv))
        .route("/.well-known/openid-configuration", any(|State(app): State<Arc<FederationApp>>| async move { json_response(StatusCode::OK, &app.identity.service_accounts.openid_configuration()) }))
        .route("/openid/v1/jwks", any(|State(app): State<Arc<FederationApp>>| async move { json_response(StatusCode::OK, &app.identity.service_accounts.jwks()) }))
        .fallback(rest)
        .layer(from_fn_with_state(app.clone(), authorize))
        .layer(from_fn_with_state(app.clone(), authenticate));
    let max_body = app.api.config.limits.max_body_bytes;
    let routes = crate::http::limit_bodies(open.merge(protected), max_body);
    let audit = from_fn_with_state(app.audit.clone(), super::audit::layer);
    crate::http::common_layers(routes.layer(from_fn_with_state(app.clone(), request_metrics)).layer(audit).with_state(app))
}

/// Counts every request in `apiserver_request_*` (see [`request_labels`], [`observe`]); marks
/// watch answers [`crate::http::Uncompressed`].
async fn request_metrics(State(app): State<Arc<FederationApp>>, req: Request, next: Next) -> axum::response::Response {
    let started = std::time::Instant::now();
    let labels = request_labels(&app.api, req.method(), req.uri().path(), req.uri().query());
    let watch = labels.verb == "WATCH";
    let mut resp = next.run(req).await;
    if watch {
        resp.extensions_mut().insert(crate::http::Uncompressed);
    }
    observe(labels, started, resp)
}

/// Authentication layer: puts the [`Caller`] into the request's extensions; 401 without one,
/// except a GET of `kube-public/cluster-info`, which goes on as `system:anonymous`.
async fn authenticate(State(app): State<Arc<FederationApp>>, mut req: Request, next: Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let peer = crate::http::peer_certs(&req);
    match app.authenticate_with_uid(req.headers(), &peer).await {
        Some((caller, uid)) => match super::rbac::impersonation::impersonate(&app.api, &app.rbac, &caller, req.headers()).await {
            Ok(None) => {
                super::audit::record_user(&req, &caller, None);
                req.extensions_mut().insert(caller);
                if let Some(uid) = uid {
                    req.extensions_mut().insert(ActingUid(uid));
                }
            }
            Ok(Some(acting)) => {
                super::audit::record_user(&req, &caller, Some(&acting.caller));
                tracing::debug!(user = %caller.user, as_user = %acting.caller.user, "impersonating");
                req.extensions_mut().insert(acting.caller);
                if let Some(uid) = acting.uid {
                    req.extensions_mut().insert(ActingUid(uid));
                }
            }
            Err(e) => {
                super::audit::record_user(&req, &caller, None);
                return error_response(&e).into_response();
            }
        },
        None if req.method() == http::Method::GET && req.uri().path() == CLUSTER_INFO_PATH => {
            super::audit::record_user(&req, &Caller { user: ANONYMOUS_USER.into(), groups: vec![UNAUTHENTICATED_GROUP.into()] }, None);
            req.extensions_mut().insert(Caller { user: ANONYMOUS_USER.into(), groups: vec![UNAUTHENTICATED_GROUP.into()] });
            req.extensions_mut().insert(Anonymous);
        }
        None => return error_response(&ApiError::Unauthorized).into_response(),
    }
    next.run(req).await
}

/// Authorization layer (see [`super::authz`]): `/metrics` and the paths under `/api` and
/// `/apis`; the global view authorizes its own requests (`search::access`, by the same rules).
async fn authorize(State(app): State<Arc<FederationApp>>, req: Request, next: Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    if req.extensions().get::<Anonymous>().is_none() {
        let caller = caller_of(&req);
        let path = req.uri().path();
        if path == "/metrics" {
            if let Err(e) = super::authz::authorize_metrics(&app.rbac, &caller) {
                return error_response(&e.into()).into_response();
            }
        } else if path == "/api" || path.starts_with("/api/") || path == "/apis" || path.starts_with("/apis/") {
            if !(path == crate::search::PREFIX || path.starts_with(&format!("{}/", crate::search::PREFIX))) {
                let query = Query::parse(req.uri().query());
                if let Err(e) = super::authz::authorize(&app.api, &app.rbac, &caller, req.method(), path, &query).await {
                    tracing::debug!(user = %caller.user, method = %req.method(), %path, "forbidden");
                    return error_response(&e.into()).into_response();
                }
            }
        }
    }
    next.run(req).await
}

async fn readyz(State(app): State<Arc<FederationApp>>) -> Response {
    if !app.store.healthy().await {
        return text(StatusCode::SERVICE_UNAVAILABLE, "[-]etcd failed: not connected\nreadyz check failed");
    }
    if !app.bootstrapped.load(std::sync::atomic::Ordering::Acquire) {
        return text(StatusCode::SERVICE_UNAVAILABLE, "[+]etcd ok\n[-]poststarthook/bootstrap-namespaces failed: not finished\nreadyz check failed");
    }
    if !app.api.crds_synced() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "[+]etcd ok\n[+]poststarthook/bootstrap-namespaces ok\n[-]poststarthook/crd-informer-synced failed: not finished\nreadyz check failed");
    }
    text(StatusCode::OK, "ok")
}

async fn metrics(State(app): State<Arc<FederationApp>>) -> Response {
    app.refresh_metrics().await;
    metrics_response()
}

async fn openapi_v2(State(app): State<Arc<FederationApp>>, headers: http::HeaderMap) -> Response {
    let accept = headers.get("accept").and_then(|v| v.to_str().ok());
    if discovery::wants_openapi_v2_protobuf(accept) {
        return protobuf(discovery::openapi_v2_protobuf(&app.api.registry.snapshot()));
    }
    json_response(StatusCode::OK, &discovery::openapi_v2(&app.api.registry.snapshot()))
}

async fn openapi_v3_gv(State(app): State<Arc<FederationApp>>, axum::extract::Path(gv): axum::extract::Path<String>) -> Response {
    openapi_v3_doc(&app, &gv)
}

fn openapi_v3_doc(app: &FederationApp, gv: &str) -> Response {
    let parts: Vec<&str> = gv.split('/').collect();
    let doc = match parts.as_slice() {
        ["api", v] => discovery::openapi_v3_gv(&app.api.registry.snapshot(), "", v),
        ["apis", g, v] => discovery::openapi_v3_gv(&app.api.registry.snapshot(), g, v),
        _ => None,
    };
    match doc {
        Some(d) => json_response(StatusCode::OK, &d),
        None => error_response(&ApiError::NoSuchResource),
    }
}

/// The fallback: the global view, then the Kubernetes REST space into the [`ApiServer`].
async fn rest(State(app): State<Arc<FederationApp>>, req: Request) -> Response {
    let caller = caller_of(&req);
    let path = req.uri().path().to_string();
    if path == crate::search::PREFIX || path.starts_with(&format!("{}/", crate::search::PREFIX)) {
        return app.search.handle(req, &caller).await;
    }
    if path == "/api" || path.starts_with("/api/") || path == "/apis" || path.starts_with("/apis/") {
        if super::rbac::review::is_review(&app.api, req.method(), &path) {
            let uid = req.extensions().get::<ActingUid>().map(|u| u.0.clone());
            return super::rbac::review::handle(&app.api, &app.rbac, &app.identity, req, &caller, uid.as_deref()).await;
        }
        return app.api.handle(req, &caller).await;
    }
    if let Some(gv) = path.strip_prefix("/openapi/v3/") {
        return openapi_v3_doc(&app, gv);
    }
    not_found()
}
