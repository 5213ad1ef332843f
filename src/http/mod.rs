//! HTTPS serving shared by every fedctl listener: TLS accept loop, HTTP/1.1 + HTTP/2, graceful
//! stop; uses no other fedctl module.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

/// Response body: a boxed stream of bytes (watch streams are long-lived).
pub type Body = http_body_util::combinators::BoxBody<bytes::Bytes, std::io::Error>;
/// An HTTP response of any fedctl listener.
pub type Response = http::Response<Body>;

/// The verified client certificate chain of a connection (empty without one); every request
/// carries it as an extension (`req.extensions().get::<PeerCerts>()`).
pub type PeerCerts = Arc<Vec<CertificateDer<'static>>>;

/// The remote address of a request's connection, as a request extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr(pub SocketAddr);

/// A value a layer attaches to a request that must last as long as the request's work does,
/// an upgraded connection included: a handler that takes over the connection (exec, attach,
/// port-forward) keeps the request's `Hold` until the connection ends. (The audit log writes a
/// request's final event when the last reference goes.)
#[derive(Clone)]
pub struct Hold(pub Arc<dyn std::any::Any + Send + Sync>);

/// Request body every listener's router sees.
pub type RequestBody = axum::body::Body;
/// An HTTP request of any fedctl listener.
pub type Request = http::Request<RequestBody>;

/// Marks a response that must not be compressed: a watch stream, which kube-apiserver's watch
/// server writes uncompressed too (the compressor would end a deflate block at every event it
/// forwards, paying CPU and framing per small event for little saving).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uncompressed;

/// The verified client certificates of `req`'s connection (empty when none or not served by
/// [`serve`]).
pub fn peer_certs<B>(req: &http::Request<B>) -> PeerCerts {
    req.extensions().get::<PeerCerts>().cloned().unwrap_or_default()
}

/// Bodies larger than this (bytes) are gzip-compressed for clients that accept it: mirrors
/// kube-apiserver's `defaultGzipThresholdBytes` (128 KiB).
pub const GZIP_THRESHOLD_BYTES: u64 = 128 * 1024;

/// Which responses the compression layer encodes (when the request's `Accept-Encoding`
/// allows gzip): a body larger than [`GZIP_THRESHOLD_BYTES`], or of unknown length (a LIST
/// streamed page by page, which only happens past one storage page), unless marked
/// [`Uncompressed`] (watch streams). Mirrors kube-apiserver, which gzips LIST and GET answers
/// over the threshold and leaves watches plain.
#[derive(Clone, Copy, Debug, Default)]
pub struct LargeBodies;

impl tower_http::compression::Predicate for LargeBodies {
    fn should_compress<B>(&self, response: &http::Response<B>) -> bool
    where
        B: hyper::body::Body,
    {
        if response.extensions().get::<Uncompressed>().is_some() {
            return false;
        }
        let len = response.body().size_hint().exact().or_else(|| response.headers().get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()));
        len.is_none_or(|n| n > GZIP_THRESHOLD_BYTES)
    }
}

/// The request body limit as a layer (mirrors kube-apiserver's 3 MiB `maxRequestBodyBytes`):
/// every request body is wrapped in [`http_body_util::Limited`], so a handler reading more
/// than `max_bytes` gets a [`http_body_util::LengthLimitError`] (see [`is_length_limit`]),
/// which the API layer answers with a Kubernetes `Status` 413 `RequestEntityTooLarge`
/// (`Request entity too large: limit is N`) and nothing stored. As kube-apiserver's
/// `limitedReadBody`, the body is read up to the limit even when `Content-Length` already
/// says it is over: answering before the client has sent its body would cut the connection
/// under it, and the client would see a transport error instead of the Status.
/// tower-http's `RequestBodyLimitLayer` refuses on `Content-Length` at once and in plain text.
pub fn limit_bodies<S: Clone + Send + Sync + 'static>(router: axum::Router<S>, max_bytes: usize) -> axum::Router<S> {
    router.layer(axum::middleware::from_fn(move |req: Request, next: axum::middleware::Next| async move {
        let (parts, body) = req.into_parts();
        next.run(http::Request::from_parts(parts, RequestBody::new(http_body_util::Limited::new(body, max_bytes)))).await
    }))
}

/// Whether `e` or an error it wraps ([`std::error::Error::source`]) is the
/// [`http_body_util::LengthLimitError`] of a body [`limit_bodies`] limited.
pub fn is_length_limit(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The layers every listener's router gets outermost: gzip for large answers (see
/// [`LargeBodies`]; level 1, as kube-apiserver's `defaultGzipContentEncodingLevel`, for the
/// least CPU at nearly the same ratio) and a tracing span per request (tower-http's
/// `TraceLayer`, all its events at DEBUG level).
pub fn common_layers(router: axum::Router) -> axum::Router {
    use tower_http::compression::{CompressionLayer, CompressionLevel};
    router.layer(CompressionLayer::new().gzip(true).quality(CompressionLevel::Precise(1)).compress_when(LargeBodies)).layer(
        // failures (5xx: an unready /readyz, an etcd outage) are the handlers' to log; the
        // layer's own events stay at DEBUG
        tower_http::trace::TraceLayer::new_for_http().on_failure(tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG)),
    )
}

/// Serves `app` over TLS on `listener` until `shutdown` resolves; then stops accepting and
/// gives open connections (including watches) `grace` to finish before returning.
/// HTTP/1.1 and HTTP/2 (ALPN), with upgrades; each request carries its connection's
/// [`PeerCerts`] and [`RemoteAddr`] as extensions. Mirrors mini-redis's `run(listener,
/// shutdown)` shape.
pub async fn serve(listener: TcpListener, tls: Arc<rustls::ServerConfig>, app: axum::Router, shutdown: impl Future<Output = ()>, grace: Duration) {
    let acceptor = TlsAcceptor::from(tls);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, remote) = tokio::select! {
            _ = &mut shutdown => break,
            res = listener.accept() => match res {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let mut stop = stop_rx.clone();
        conns.spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let peer: PeerCerts = Arc::new(tls.get_ref().1.peer_certificates().map(|c| c.iter().map(|c| c.clone().into_owned()).collect()).unwrap_or_default());
            let service = service_fn(move |mut req: http::Request<Incoming>| {
                req.extensions_mut().insert(peer.clone());
                req.extensions_mut().insert(RemoteAddr(remote));
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
        while conns.try_join_next().is_some() {}
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
}
