//! fedsim's HTTP application as an axum [`Router`]: health, version and OpenAPI as routes,
//! the `/fedsim/…` admin API, the Kubernetes REST space as the fallback into the API layer;
//! faults, authentication and RBAC as layers. Uses `api`, `pki`, `http`, `storage` and
//! fedsim's `auth`, `controllers` and state.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::middleware::{from_fn_with_state, Next};
use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use super::auth::{authorize, Attributes};
use super::Sim;
use crate::api::handler::{error_response, json_response, Body, Response};
use crate::api::request::{Query, Verb};
use crate::api::{discovery, ApiError, Caller};
use crate::http::{PeerCerts, Request};
use crate::pki::auth::TokenAuthenticator;
use crate::storage::Storage;

/// Routes fedsim's paths (see the module docs of [`super`]) and hands API paths to the
/// [`crate::api::ApiServer`] after authentication and authorization.
pub struct FedsimApp {
    /// The simulated cluster.
    pub sim: Arc<Sim>,
    /// The admin token (static tokens).
    pub tokens: Arc<TokenAuthenticator>,
    /// The simulated containers' files (`exec`, `kubectl cp`).
    pub files: Arc<super::exec::PodFiles>,
}

fn text(code: StatusCode, s: &str) -> Response {
    http::Response::builder()
        .status(code)
        .header("content-type", "text/plain; charset=utf-8")
        .body(http_body_util::Full::new(Bytes::from(s.to_string())).map_err(|never| match never {}).boxed())
        .expect("valid response")
}

fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "the server could not find the requested resource", "reason": "NotFound", "details": {}, "code": 404}),
    )
}

impl FedsimApp {
    /// Authenticates: a client certificate from the CA, the admin token, or a service-account
    /// token issued by this simulator. `None` → 401.
    pub async fn authenticate(&self, headers: &http::HeaderMap, peer: &PeerCerts) -> Option<Caller> {
        if let Some((user, groups)) = crate::pki::peer_identity(peer) {
            return Some(Caller { user, groups });
        }
        let h = headers.get("authorization")?.to_str().ok()?;
        let token = h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer "))?.trim();
        if let Some(id) = self.tokens.validate(token, chrono::Utc::now()) {
            let u = id.user_info();
            return Some(Caller { user: u.name, groups: u.groups });
        }
        self.sim.signer.authenticate(self.sim.store.as_ref() as &dyn Storage, token).await
    }

    /// `/openapi/v2` (gnostic protobuf when asked for, as kube-apiserver; kubectl ≤ 1.27 asks
    /// for it on every client-side apply) and `/openapi/v3[/<gv>]`.
    fn openapi(&self, path: &str, accept: Option<&str>) -> Option<Response> {
        let snapshot = self.sim.api.registry.snapshot();
        let reg = &*snapshot;
        if path == "/openapi/v2" {
            if discovery::wants_openapi_v2_protobuf(accept) {
                use http_body_util::Full;
                let body = Full::new(Bytes::from(discovery::openapi_v2_protobuf(reg))).map_err(|never| match never {}).boxed();
                return Some(http::Response::builder().status(StatusCode::OK).header("content-type", discovery::OPENAPI_V2_PROTOBUF).body(body).expect("valid response"));
            }
            return Some(json_response(StatusCode::OK, &discovery::openapi_v2(reg)));
        }
        if path == "/openapi/v3" {
            return Some(json_response(StatusCode::OK, &discovery::openapi_v3_root(reg)));
        }
        let gv = path.strip_prefix("/openapi/v3/")?;
        let parts: Vec<&str> = gv.split('/').collect();
        let doc = match parts.as_slice() {
            ["api", v] => discovery::openapi_v3_gv(reg, "", v),
            ["apis", g, v] => discovery::openapi_v3_gv(reg, g, v),
            _ => None,
        };
        Some(match doc {
            Some(d) => json_response(StatusCode::OK, &d),
            None => error_response(&ApiError::NoSuchResource),
        })
    }

    /// `/fedsim/...` admin endpoints.
    async fn admin(&self, method: &Method, path: &str, query: &Query) -> Result<Value, ApiError> {
        let sim = &self.sim;
        let num = |k: &str| -> Result<f64, ApiError> {
            query.get(k).ok_or_else(|| ApiError::BadRequest(format!("missing {k}")))?.parse::<f64>().map_err(|_| ApiError::BadRequest(format!("bad {k}"))).and_then(|v| {
                if v.is_finite() && v >= 0.0 {
                    Ok(v)
                } else {
                    Err(ApiError::BadRequest(format!("bad {k}")))
                }
            })
        };
        match (method.as_str(), path) {
            ("GET", "/fedsim/status") => Ok(self.status().await),
            ("POST", "/fedsim/churn") => {
                let rate = num("rate")?;
                sim.churn_rate.send_replace(rate);
                Ok(json!({"churn": rate}))
            }
            ("POST", "/fedsim/faults/pause") => {
                let secs = num("seconds")?;
                let until = tokio::time::Instant::now() + Duration::from_secs_f64(secs.min(3600.0));
                sim.faults.pause.send_replace(Some(until));
                Ok(json!({"paused": secs}))
            }
            ("POST", "/fedsim/faults/drop-watches") => {
                sim.faults.drop_watches.send_modify(|n| *n += 1);
                Ok(json!({"dropped": true}))
            }
            ("POST", "/fedsim/faults/compact") => {
                let rev = sim.store.current_revision().await?;
                sim.store.compact(rev).await?;
                Ok(json!({"compacted": rev}))
            }
            ("POST", "/fedsim/faults/restart") => {
                sim.faults.drop_watches.send_modify(|n| *n += 1);
                let took = sim.restart().await.map_err(|e| ApiError::Internal(e.to_string()))?;
                Ok(json!({"restarted": true, "kubeSystemUid": sim.kube_system_uid(), "loadMillis": took.as_millis() as u64}))
            }
            ("POST", "/fedsim/nodes") => {
                let count = num("count")? as usize;
                let (added, removed, pods) = super::controllers::set_node_count(sim, count).await?;
                Ok(json!({"nodes": count, "added": added, "removed": removed, "podsDeleted": pods}))
            }
            _ => Err(ApiError::NoSuchResource),
        }
    }

    async fn status(&self) -> Value {
        let sim = &self.sim;
        let count = |prefix: &'static str| async move { sim.store.list(prefix, "", 1, 0).await.map(|r| r.kvs.len() as i64 + r.remaining).unwrap_or(0) };
        json!({
            "name": sim.config.name,
            "revision": sim.store.current_revision().await.unwrap_or(0),
            "compactedRevision": sim.store.compacted_revision(),
            "pods": count("/registry/core/pods/").await,
            "nodes": count("/registry/core/nodes/").await,
            "keys": sim.store.key_count(),
            "virtual": sim.config.virtual_objects,
            "generated": sim.store.generated_count(),
            "churn": *sim.churn_rate.borrow(),
            "restarts": sim.restarts.load(Ordering::SeqCst),
            "kubeSystemUid": sim.kube_system_uid(),
            "paused": sim.faults.paused(),
        })
    }

    /// Wraps a watch response so that the drop-watches fault ends it and a pause holds it.
    fn faultable(&self, resp: Response) -> Response {
        let (parts, mut body) = resp.into_parts();
        if parts.status != StatusCode::OK {
            return http::Response::from_parts(parts, body);
        }
        let sim = self.sim.clone();
        let mut dropped = sim.faults.drop_watches.subscribe();
        dropped.borrow_and_update();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
        tokio::spawn(async move {
            loop {
                let frame = tokio::select! {
                    _ = dropped.changed() => return,
                    _ = tx.closed() => return,
                    f = body.frame() => f,
                };
                let data = match frame {
                    None => return,
                    Some(Err(e)) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    Some(Ok(f)) => match f.into_data() {
                        Ok(d) => d,
                        Err(_) => continue,
                    },
                };
                if sim.faults.paused() {
                    tokio::select! {
                        _ = dropped.changed() => return,
                        _ = sim.faults.wait_unpaused() => {}
                    }
                }
                if tx.send(Ok(data)).await.is_err() {
                    return;
                }
            }
        });
        use futures::StreamExt;
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|r| r.map(hyper::body::Frame::data));
        let body: Body = BodyExt::boxed(http_body_util::StreamBody::new(stream));
        http::Response::from_parts(parts, body)
    }
}

/// fedsim's router: `/healthz`, `/livez`, `/readyz`, `/version` (and `/version/`, as
/// kube-apiserver answers both) open to anyone; `/openapi/…`, `/fedsim/…` (system:masters),
/// pods' `log` ([`super::logs`]), `exec`, `attach` and `portforward` ([`super::streams`]) and `/api`, `/apis` (RBAC) behind the authentication layer; every path but `/fedsim/…`
/// held while the simulator is paused.
pub fn router(app: Arc<FedsimApp>) -> Router {
    let ok = || async { text(StatusCode::OK, "ok") };
    let version = |State(app): State<Arc<FedsimApp>>| async move { json_response(StatusCode::OK, &app.sim.api.config.version) };
    let open = Router::new().route("/healthz", any(ok)).route("/livez", any(ok)).route("/readyz", any(ok)).route("/version", any(version)).route("/version/", any(version));
    let protected = Router::new()
        .route("/fedsim/{*op}", any(admin))
        .route("/api/v1/namespaces/{ns}/pods/{name}/log", any(pod_log))
        .route("/api/v1/namespaces/{ns}/pods/{name}/exec", any(pod_exec))
        .route("/api/v1/namespaces/{ns}/pods/{name}/attach", any(pod_attach))
        .route("/api/v1/namespaces/{ns}/pods/{name}/portforward", any(pod_port_forward))
        .fallback(rest)
        .layer(from_fn_with_state(app.clone(), authenticate));
    let max_body = app.sim.api.config.limits.max_body_bytes;
    let routes = crate::http::limit_bodies(open.merge(protected), max_body);
    crate::http::common_layers(routes.layer(from_fn_with_state(app.clone(), pause)).with_state(app))
}

/// Fault layer: while the simulator is paused, every request but the admin API's waits.
async fn pause(State(app): State<Arc<FedsimApp>>, req: Request, next: Next) -> axum::response::Response {
    if !req.uri().path().starts_with("/fedsim/") {
        app.sim.faults.wait_unpaused().await;
    }
    next.run(req).await
}

/// Authentication layer: puts the [`Caller`] into the request's extensions (the impersonated
/// one when the request carries `Impersonate-User` and the caller may impersonate it, see
/// [`super::auth::impersonate`]); 401 without one.
async fn authenticate(State(app): State<Arc<FedsimApp>>, mut req: Request, next: Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let peer = crate::http::peer_certs(&req);
    let Some(caller) = app.authenticate(req.headers(), &peer).await else {
        return error_response(&ApiError::Unauthorized).into_response();
    };
    let caller = match super::auth::impersonate(app.sim.store.as_ref() as &dyn Storage, &caller, req.headers()).await {
        Ok(c) => c,
        Err(e) => return error_response(&e).into_response(),
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

fn caller_of(req: &Request) -> Caller {
    req.extensions().get::<Caller>().cloned().unwrap_or_default()
}

/// `/fedsim/…`: the admin API, for `system:masters` only.
async fn admin(State(app): State<Arc<FedsimApp>>, req: Request) -> Response {
    let caller = caller_of(&req);
    if !caller.groups.iter().any(|g| g == crate::pki::auth::MASTERS_GROUP) {
        return error_response(&ApiError::Forbidden(format!("User \"{}\" cannot use the fedsim admin API", caller.user)));
    }
    let query = Query::parse(req.uri().query());
    match app.admin(req.method(), req.uri().path(), &query).await {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => error_response(&e),
    }
}

/// `GET …/pods/<name>/log` ([`super::logs`]); other methods 405.
async fn pod_log(State(app): State<Arc<FedsimApp>>, axum::extract::Path((ns, name)): axum::extract::Path<(String, String)>, req: Request) -> Response {
    if req.method() != Method::GET {
        return error_response(&ApiError::MethodNotAllowed);
    }
    let caller = caller_of(&req);
    let query = Query::parse(req.uri().query());
    super::logs::serve(app.sim.api.clone(), app.sim.store.as_ref() as &dyn Storage, &caller, &ns, &name, &query).await
}

async fn pod_stream(app: Arc<FedsimApp>, ns: String, name: String, kind: super::streams::Kind, req: Request) -> Response {
    let caller = caller_of(&req);
    super::streams::serve(app.sim.api.clone(), app.sim.store.as_ref() as &dyn Storage, &app.files, &caller, &ns, &name, kind, req).await
}

/// `GET|POST …/pods/<name>/exec` ([`super::streams`]).
async fn pod_exec(State(app): State<Arc<FedsimApp>>, axum::extract::Path((ns, name)): axum::extract::Path<(String, String)>, req: Request) -> Response {
    pod_stream(app, ns, name, super::streams::Kind::Exec, req).await
}

/// `GET|POST …/pods/<name>/attach` ([`super::streams`]).
async fn pod_attach(State(app): State<Arc<FedsimApp>>, axum::extract::Path((ns, name)): axum::extract::Path<(String, String)>, req: Request) -> Response {
    pod_stream(app, ns, name, super::streams::Kind::Attach, req).await
}

/// `GET|POST …/pods/<name>/portforward` ([`super::streams`]).
async fn pod_port_forward(State(app): State<Arc<FedsimApp>>, axum::extract::Path((ns, name)): axum::extract::Path<(String, String)>, req: Request) -> Response {
    pod_stream(app, ns, name, super::streams::Kind::PortForward, req).await
}

/// The fallback: OpenAPI, then the Kubernetes REST space, authorized by fedsim's RBAC, into
/// the API layer; watches answer through the drop-watches and pause faults.
async fn rest(State(app): State<Arc<FedsimApp>>, req: Request) -> Response {
    let caller = caller_of(&req);
    let path = req.uri().path().to_string();
    let accept = req.headers().get("accept").and_then(|v| v.to_str().ok());
    if let Some(r) = app.openapi(&path, accept) {
        return r;
    }
    if !(path == "/api" || path.starts_with("/api/") || path == "/apis" || path.starts_with("/apis/")) {
        return not_found();
    }
    let query = Query::parse(req.uri().query());
    let (verb, target) = match app.sim.api.classify(req.method(), &path, &query) {
        Ok(x) => x,
        Err(e) => return error_response(&e),
    };
    if let Some(attrs) = Attributes::of(verb, &target) {
        if let Err(e) = authorize(app.sim.store.as_ref() as &dyn Storage, &caller, &attrs).await {
            return error_response(&e);
        }
    }
    let resp = app.sim.api.handle(req, &caller).await;
    if verb == Verb::Watch {
        let mut resp = app.faultable(resp);
        resp.extensions_mut().insert(crate::http::Uncompressed);
        return resp;
    }
    resp
}
