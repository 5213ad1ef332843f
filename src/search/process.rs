//! `fedctl cache`: a process holding a subset of the global view's shards, serving the search
//! API for them to `fedctl server --cache-endpoints` (see [`super::remote`]).
//!
//! It ingests every member exactly as the server's in-process cache does
//! ([`crate::cache::GlobalCache::run_members`]: Clusters and credential Secrets read from etcd),
//! follows the shard map in etcd without ever proposing one, and keeps only the objects of
//! its shards (other shards' events only advance the member's position, so its positions
//! track the member). With `--zone Z` it ingests only the members whose Cluster has
//! `spec.zone: Z` (and holds every shard unless `--shards` says otherwise): one process per
//! availability zone lists each member once, where shard-split processes each list every
//! member. It serves `/apis/search.fedctl.io/v1alpha1/…` (the view, `/shards`) and
//! `/metrics` over TLS with a serving certificate it issues itself from the federation CA
//! (`DATA_DIR/tls/server-ca.{crt,key}`, the server's), only to callers with a client
//! certificate from that CA in `system:masters`; `/healthz` is open.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::middleware::Next;
use axum::routing::any;
use axum::Router;
use http::StatusCode;
use http_body_util::{BodyExt, Full};

use crate::api::handler::{error_response, Response};
use crate::api::{ApiConfig, ApiError, ApiServer, Caller, Registry};
use crate::cache::{CacheConfig, CacheError, GlobalCache};
use crate::http::Request;
use crate::storage::Storage;

/// Errors that stop a cache process from starting.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The federation CA could not be read (it is never created here).
    #[error("federation CA in {dir}: {source}")]
    Ca { dir: PathBuf, source: std::io::Error },
    /// Certificates could not be used or issued.
    #[error("pki: {0}")]
    Pki(#[from] crate::pki::PkiError),
    /// The shard selection is invalid.
    #[error("{0}")]
    Shards(String),
    /// The cache configuration is invalid.
    #[error("cache: {0}")]
    Cache(#[from] CacheError),
    /// The listen address could not be bound.
    #[error("listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
}

/// Configuration of `fedctl cache` (from flags; see `cmd/fedctl`).
#[derive(Clone, Debug)]
pub struct Config {
    /// etcd client URLs (the federation's store: Clusters, credential Secrets, shard map).
    pub etcd_servers: Vec<String>,
    /// The server's data directory, or a copy of its `tls/` part: the federation CA is read
    /// from `DATA_DIR/tls/server-ca.{crt,key}`.
    pub data_dir: PathBuf,
    /// `host:port` to serve on (port 0 picks a free one).
    pub listen: String,
    /// Extra serving-certificate SANs (the listen host, `localhost` and `127.0.0.1` always).
    pub tls_sans: Vec<String>,
    /// The shards this process holds (indexes below `cache.shards`); empty with a zone
    /// (`cache.zone`): every shard.
    pub shards: Vec<usize>,
    /// Interval between watch bookmarks.
    pub bookmark_interval: Duration,
    /// Kinds, window, shard count (`--shard-count`).
    pub cache: CacheConfig,
}

struct CacheApp {
    search: Arc<super::SearchApi>,
}

fn text(code: StatusCode, s: &'static str) -> Response {
    http::Response::builder()
        .status(code)
        .header("content-type", "text/plain")
        .body(Full::new(bytes::Bytes::from_static(s.as_bytes())).map_err(|never| match never {}).boxed())
        .expect("valid response")
}

/// The cache process's router: `/healthz`, `/livez`, `/readyz` open; `/metrics` and the
/// search API behind the client-certificate authentication layer (callers in
/// `system:masters` only for `/metrics`; the search API checks its own).
fn router(app: Arc<CacheApp>) -> Router {
    let ok = || async { text(StatusCode::OK, "ok") };
    let protected = Router::new().route("/metrics", any(metrics)).fallback(rest).layer(axum::middleware::from_fn(authenticate));
    let router = Router::new().route("/healthz", any(ok)).route("/livez", any(ok)).route("/readyz", any(ok)).merge(protected);
    let max_body = ApiConfig::default().limits.max_body_bytes;
    crate::http::common_layers(crate::http::limit_bodies(router, max_body).with_state(app))
}

/// Authentication layer: a client certificate from the federation CA makes the [`Caller`];
/// 401 without one.
async fn authenticate(mut req: Request, next: Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Some((user, groups)) = crate::pki::peer_identity(&crate::http::peer_certs(&req)) else {
        return error_response(&ApiError::Unauthorized).into_response();
    };
    req.extensions_mut().insert(Caller { user, groups });
    next.run(req).await
}

fn caller_of(req: &Request) -> Caller {
    req.extensions().get::<Caller>().cloned().unwrap_or_default()
}

async fn metrics(State(app): State<Arc<CacheApp>>, req: Request) -> Response {
    let caller = caller_of(&req);
    if !caller.groups.iter().any(|g| g == crate::pki::auth::MASTERS_GROUP) {
        return error_response(&ApiError::Forbidden(format!("User \"{}\" cannot get path \"/metrics\"", caller.user)));
    }
    app.search.cache.refresh_metrics();
    http::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", crate::telemetry::metrics::CONTENT_TYPE)
        .body(Full::new(bytes::Bytes::from(crate::telemetry::metrics::server().encode())).map_err(|never| match never {}).boxed())
        .expect("valid response")
}

/// The fallback: the search API under its prefix, otherwise 404.
async fn rest(State(app): State<Arc<CacheApp>>, req: Request) -> Response {
    let caller = caller_of(&req);
    let path = req.uri().path();
    if path == super::PREFIX || path.starts_with(&format!("{}/", super::PREFIX)) {
        let watch = req.method() == http::Method::GET && crate::api::request::Query::parse(req.uri().query()).flag("watch").unwrap_or(false);
        let mut resp = app.search.handle(req, &caller).await;
        if watch {
            resp.extensions_mut().insert(crate::http::Uncompressed);
        }
        return resp;
    }
    error_response(&ApiError::NoSuchResource)
}

/// Runs a cache process until `shutdown` resolves (then ends watches within 5 s).
/// Errors: at start (CA, shards, listen).
pub async fn run(config: Config, shutdown: impl std::future::Future<Output = ()>) -> Result<(), ProcessError> {
    let n = config.cache.shards.max(1);
    let shards = if config.shards.is_empty() && config.cache.zone.is_some() { (0..n).collect() } else { config.shards.clone() };
    if shards.is_empty() || shards.iter().any(|s| *s >= n) {
        return Err(ProcessError::Shards(format!("--shards must name shards below --shard-count {n}, got {:?} (without --zone, --shards is required)", config.shards)));
    }
    if config.cache.zone.as_deref() == Some("") {
        return Err(ProcessError::Shards("--zone must name a zone".into()));
    }
    let tls_dir = config.data_dir.join("tls");
    let read = |f: &str| std::fs::read_to_string(tls_dir.join(f)).map_err(|e| ProcessError::Ca { dir: tls_dir.clone(), source: e });
    let ca = crate::pki::Ca::from_pem(&read("server-ca.crt")?, &read("server-ca.key")?)?;
    let listener = tokio::net::TcpListener::bind(&config.listen).await.map_err(|e| ProcessError::Listen { addr: config.listen.clone(), source: e })?;
    let local = listener.local_addr().map_err(|e| ProcessError::Listen { addr: config.listen.clone(), source: e })?;
    let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !local.ip().is_unspecified() {
        sans.push(local.ip().to_string());
    }
    sans.extend(config.tls_sans.iter().cloned());
    sans.sort();
    sans.dedup();
    let (cert, key) = ca.issue_serving(&sans, crate::pki::LEAF_VALIDITY)?;
    let tls = crate::pki::server_tls_config(&cert, &key, ca.cert_pem())?;

    let mut cache_config = config.cache.clone();
    cache_config.shards = n;
    cache_config.owned = Some(shards.clone());
    cache_config.propose_maps = false;
    cache_config.ingest = true;
    let cache = GlobalCache::new(&cache_config)?;
    let store = crate::storage::lazy::LazyStorage::connect_etcd(config.etcd_servers.clone());
    let api = ApiServer::new(Registry::federation(), store.clone() as Arc<dyn Storage>, ApiConfig::default());
    let search = Arc::new(super::SearchApi {
        cache: cache.clone(),
        version: api.config.version.clone(),
        server_address: local.to_string(),
        bookmark_interval: config.bookmark_interval,
        remote: None,
        api: None,
        authorizer: Arc::new(super::access::MastersOnly),
    });
    {
        let cache = cache.clone();
        let cfg = cache_config.clone();
        tokio::spawn(async move {
            store.ready().await;
            tokio::spawn(cache.clone().run_shard_map(api.store.clone(), cfg.clone()));
            cache.run_members(api, cfg.resync).await;
        });
    }
    let url = format!("https://{local}");
    tracing::info!(%url, ?shards, shard_count = n, zone = ?config.cache.zone, "fedctl cache listening");
    println!("fedctl cache listening on {url}");
    crate::http::serve(listener, tls, router(Arc::new(CacheApp { search })), shutdown, Duration::from_secs(5)).await;
    tracing::info!("fedctl cache stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use crate::cache::rv::Pos;
    use crate::cache::shard::ShardMap;
    use crate::cache::store::{EventType, KindStore, Obj, Scope, WatchFilter};

    fn pod(c: &Arc<str>, ns: &str, name: &str, rv: u64) -> (crate::cache::store::Key, Obj) {
        Obj::from_member(c, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string()}})).unwrap()
    }

    #[test]
    fn a_shard_subset_keeps_its_objects_and_tracks_the_member_position() {
        let (n, owned) = (4, [0usize, 1]);
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 1000, Duration::from_secs(60), n);
        s.own_only(&owned);
        let a: Arc<str> = Arc::from("a");
        let pods: Vec<_> = (0..40).map(|i| pod(&a, &format!("ns{}", i % 8), &format!("p{i}"), 5)).collect();
        let mine = |ns: &str, name: &str| owned.contains(&ShardMap::hashed(n as u32).shard(ns, name, n));
        let want = pods.iter().filter(|(k, _)| mine(&k.0, &k.1)).count();
        assert!(want > 0 && want < 40, "the test namespaces spread over both halves: {want}");
        s.sync(1, &a, 10, pods);
        assert_eq!(s.len(), want);
        // the join positions count every object of the member's list, held or not
        assert_eq!(s.current().0["a"], Pos { rv: 10, sub: 40 });
        let mut sub = s.subscribe(Some(s.current()), &WatchFilter::default()).unwrap();
        // an event of a shard held elsewhere: no event here, the position still moves
        let other = (0..8).map(|i| format!("ns{i}")).find(|ns| !mine(ns, "q")).unwrap();
        let (k, o) = pod(&a, &other, "q", 11);
        s.apply(1, EventType::Added, k, o);
        assert!(sub.rx.try_recv().is_err());
        assert_eq!(s.current().0["a"], Pos::member(11));
        assert_eq!(s.len(), want);
        // a whole-state position of a member resourceVersion this store reached serves
        let whole = crate::cache::rv::GlobalRv([("a".to_string(), Pos { rv: 11, sub: u32::MAX })].into());
        assert_eq!(s.list_at(&whole, Scope::default(), None, &|_, _| true, 0).unwrap().len(), want);
        assert!(s.subscribe(Some(whole), &WatchFilter::default()).is_ok());
        assert_eq!(s.owned_shards(), owned);
    }
}
