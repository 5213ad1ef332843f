//! The web console at `/ui/`: static assets embedded in the binary (plain ES modules, no build step), served without authentication and with a strict Content-Security-Policy.
//!
//! The console holds no data and has no back end of its own: the page signs in with a
//! bearer token (kept in the tab's `sessionStorage`) and `fetch`es the server's public API
//! (Clusters, Works, templates, the global view, `/metrics`) as that identity, so it can do
//! exactly what the token may (403s are shown as such). Every asset is answered with
//! `Content-Type`, `Cache-Control: no-cache` and a strong `ETag` (a `304 Not Modified` for a
//! matching `If-None-Match`), `Content-Security-Policy` (no inline script or style, nothing
//! but this origin; [`CSP`]), `X-Content-Type-Options: nosniff` and
//! `Referrer-Policy: no-referrer`.

use std::sync::OnceLock;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::{BodyExt, Full};
use sha2::{Digest, Sha256};

use crate::http::Response;

/// Where the console is served; `/ui` redirects to it.
pub const PREFIX: &str = "/ui/";

/// The console's Content-Security-Policy: scripts, styles and fetches from this origin only,
/// images from it or `data:` URLs, no framing.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// One embedded file: its name under [`PREFIX`], media type and contents.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $ty:expr) => {
        Asset { name: $name, content_type: $ty, body: include_bytes!(concat!("assets/", $name)) }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the console (`index.html` is also the answer to `/ui/`).
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("members.js", JS),
    asset!("workloads.js", JS),
    asset!("search.js", JS),
    asset!("cache.js", JS),
    asset!("yaml.js", JS),
];

/// The `ETag` of each asset (in [`ASSETS`] order): a quoted prefix of its SHA-256, computed
/// once.
fn etags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| ASSETS.iter().map(|a| format!("\"{}\"", &hex::encode(Sha256::digest(a.body))[..20])).collect())
}

/// The console's routes, to be merged into a router whose state is `S`: `GET /ui` (a
/// redirect to `/ui/`), `GET /ui/` (`index.html`) and `GET /ui/<file>` (an asset, or a
/// plain-text 404). Open to anyone: nothing here is data.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(|| async { redirect() }))
        .route("/ui/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route("/ui/{file}", get(|axum::extract::Path(file): axum::extract::Path<String>, headers: HeaderMap| async move { serve(&file, &headers) }))
}

/// Headers every console answer carries (the CSP and its companions).
fn secure(b: http::response::Builder) -> http::response::Builder {
    b.header("content-security-policy", CSP).header("x-content-type-options", "nosniff").header("referrer-policy", "no-referrer").header("x-frame-options", "DENY")
}

fn redirect() -> Response {
    secure(http::Response::builder().status(StatusCode::MOVED_PERMANENTLY).header("location", PREFIX)).body(Full::new(Bytes::new()).map_err(|never| match never {}).boxed()).expect("valid response")
}

/// Answers asset `name`: 200 with it, 304 when `If-None-Match` names its ETag, 404 when there
/// is no such asset.
fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(i) = ASSETS.iter().position(|a| a.name == name) else {
        return secure(http::Response::builder().status(StatusCode::NOT_FOUND).header("content-type", "text/plain; charset=utf-8"))
            .body(Full::new(Bytes::from_static(b"404 page not found\n")).map_err(|never| match never {}).boxed())
            .expect("valid response");
    };
    let (asset, tag) = (&ASSETS[i], &etags()[i]);
    let matches = headers.get_all(http::header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|t| t.trim() == tag || t.trim() == "*");
    let b = secure(http::Response::builder()).header("cache-control", "no-cache").header("etag", HeaderValue::from_str(tag).expect("hex etag"));
    if matches {
        return b.status(StatusCode::NOT_MODIFIED).body(Full::new(Bytes::new()).map_err(|never| match never {}).boxed()).expect("valid response");
    }
    b.status(StatusCode::OK).header("content-type", asset.content_type).body(Full::new(Bytes::from_static(asset.body)).map_err(|never| match never {}).boxed()).expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    async fn get(path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Vec<u8>) {
        let app: Router = router();
        let mut req = http::Request::builder().uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = app.oneshot(req.body(axum::body::Body::empty()).unwrap()).await.unwrap();
        let (parts, b) = resp.into_parts();
        (parts.status, parts.headers, b.collect().await.unwrap().to_bytes().to_vec())
    }

    #[tokio::test]
    async fn index_and_assets_with_types_csp_and_etags() {
        let (st, h, b) = get("/ui/", &[]).await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(h["content-type"], "text/html; charset=utf-8");
        assert_eq!(h["content-security-policy"], CSP);
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["cache-control"], "no-cache");
        let html = String::from_utf8(b).unwrap();
        assert!(html.contains("<script type=\"module\" src=\"app.js\"></script>"), "{html}");
        let (st, h, _) = get("/ui/app.js", &[]).await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(h["content-type"], JS);
        let tag = h["etag"].to_str().unwrap().to_string();
        let (st, h, b) = get("/ui/app.js", &[("if-none-match", &tag)]).await;
        assert_eq!(st, StatusCode::NOT_MODIFIED);
        assert!(b.is_empty());
        assert_eq!(h["etag"], tag.as_str());
        let (st, _, _) = get("/ui/app.js", &[("if-none-match", "\"other\"")]).await;
        assert_eq!(st, StatusCode::OK);
        let (st, h, _) = get("/ui", &[]).await;
        assert_eq!(st, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(h["location"], "/ui/");
        let (st, h, _) = get("/ui/nope.js", &[]).await;
        assert_eq!(st, StatusCode::NOT_FOUND);
        assert_eq!(h["content-security-policy"], CSP);
    }

    /// The CSP forbids inline script and style: no asset may rely on them (a `<script>` with
    /// a body, a `style=` attribute, an `on…=` handler, a `<style>` element).
    #[test]
    fn no_inline_script_or_style() {
        for a in ASSETS {
            let text = std::str::from_utf8(a.body).unwrap();
            if a.name.ends_with(".html") {
                let lower = text.to_ascii_lowercase();
                assert!(!lower.contains("<style"), "{}: <style>", a.name);
                assert!(!lower.contains(" style="), "{}: style attribute", a.name);
                assert!(!regex::Regex::new(r"\son[a-z]+=").unwrap().is_match(&lower), "{}: inline handler", a.name);
                for script in lower.split("<script").skip(1) {
                    let (open, rest) = script.split_once('>').unwrap();
                    assert!(open.contains("src="), "{}: inline script", a.name);
                    assert!(rest.starts_with("</script>"), "{}: script with a body", a.name);
                }
            }
            if a.name.ends_with(".js") {
                // no eval-like constructs the CSP would refuse, nor inline style strings
                for bad in ["eval(", "new Function(", ".innerHTML", "setAttribute('style'", "setAttribute(\"style\""] {
                    assert!(!text.contains(bad), "{}: {bad}", a.name);
                }
            }
        }
    }
}
