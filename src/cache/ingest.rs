//! Ingest of one kind from one member: paged LIST, then WATCH with bookmarks, resuming from
//! the last resourceVersion after a dropped connection and relisting after 410 Expired
//! (mirrors client-go's reflector).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::store::{EventType, KindStore, Obj};
use super::CacheError;

/// LIST page size against members.
const PAGE: usize = 500;
/// Member watch timeout (seconds); the watch is re-opened from the last resourceVersion.
const WATCH_TIMEOUT_S: u64 = 300;

/// Runs until aborted: keeps `store`'s state of `cluster` in sync with the member at `server`.
/// `epoch` identifies this ingest to the store (writes of a stopped ingest are fenced off).
/// `connected` is set while the ingest is current: true once a LIST was applied and while its
/// watch is open, false while a LIST fails or a dropped watch waits in backoff (the view then
/// warns that the member's objects may be stale, see [`super::GlobalCache::stale_members`]).
/// `settled` is set once the first LIST ended, applied or failed
/// ([`super::GlobalCache::initialized`]). Each LIST holds a permit of `lists` while it runs:
/// a LIST gathers the member's whole state before it replaces the stored one, so the permits
/// bound how many members' states are in flight at once ([`super::CacheConfig::list_concurrency`]).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    store: Arc<KindStore>,
    epoch: u64,
    cluster: Arc<str>,
    http: reqwest::Client,
    server: String,
    connected: Arc<AtomicBool>,
    settled: Arc<AtomicBool>,
    lists: Arc<tokio::sync::Semaphore>,
) {
    let path = collection_path(&store);
    let labels = crate::telemetry::metrics::IngestLabels { cluster: cluster.to_string(), resource: store.info.resource.to_string() };
    let relists = crate::telemetry::metrics::server().ingest_relists.get_or_create(&labels).clone();
    let fresh = crate::telemetry::metrics::server().ingest_last_event.get_or_create(&labels).clone();
    let mut backoff = Duration::from_millis(200);
    loop {
        relists.inc();
        let listed = match lists.acquire().await {
            Ok(_permit) => list(&store, epoch, &cluster, &http, &server, &path).await,
            Err(_) => return,
        };
        let rv = match listed {
            Ok(rv) => rv,
            Err(e) => {
                connected.store(false, Ordering::Relaxed);
                settled.store(true, Ordering::SeqCst);
                tracing::warn!(%cluster, kind = store.info.resource, error = %e, "global cache: list failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        backoff = Duration::from_millis(200);
        connected.store(true, Ordering::Relaxed);
        settled.store(true, Ordering::SeqCst);
        let mut rv = rv;
        loop {
            match watch(&store, epoch, &cluster, &http, &server, &path, &mut rv, &fresh, &connected).await {
                Ok(WatchEnd::Expired) => break,
                Ok(WatchEnd::Closed) => {}
                Err(e) => {
                    connected.store(false, Ordering::Relaxed);
                    tracing::debug!(%cluster, kind = store.info.resource, error = %e, "global cache: watch dropped; resuming");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
        tracing::info!(%cluster, kind = store.info.resource, "global cache: relisting after 410");
    }
}

fn collection_path(store: &KindStore) -> String {
    let i = &store.info;
    if i.group.is_empty() {
        format!("/api/{}/{}", i.version, i.resource)
    } else {
        format!("/apis/{}/{}/{}", i.group, i.version, i.resource)
    }
}

/// Appends a response body to `out` chunk by chunk as it arrives, so the body is held once, in
/// `out`; reqwest's `bytes()` keeps the chunks and then copies them into a buffer of their
/// total, holding a LIST page twice at its end. Errors: the body's transfer failed.
pub async fn read_body_into(resp: &mut reqwest::Response, out: &mut impl bytes::BufMut) -> reqwest::Result<()> {
    while let Some(chunk) = resp.chunk().await? {
        out.put_slice(&chunk);
    }
    Ok(())
}

async fn list(store: &KindStore, epoch: u64, cluster: &Arc<str>, http: &reqwest::Client, server: &str, path: &str) -> Result<u64, CacheError> {
    let mut objs = Vec::new();
    let mut cont = String::new();
    // one buffer for every page: its objects are copied out (encoded, compressed) before the
    // next page is read, so the pages need neither their own allocation nor reqwest's copy
    let mut body = Vec::new();
    let rv = loop {
        let mut req = http.get(format!("{server}{path}")).query(&[("limit", PAGE.to_string())]);
        if !cont.is_empty() {
            req = req.query(&[("continue", cont.as_str())]);
        }
        let mut resp = req.timeout(Duration::from_secs(60)).send().await?;
        let status = resp.status();
        if status.as_u16() == 410 {
            cont.clear();
            objs.clear();
            continue;
        }
        if !status.is_success() {
            return Err(CacheError::Member(format!("LIST {path}: {status}")));
        }
        body.clear();
        read_body_into(&mut resp, &mut body).await?;
        let (api_version, kind) = (store.info.api_version(), store.info.kind);
        // items are scanned, not decoded (see Obj::from_member_raw)
        let v = match super::store::list_page_items(&body) {
            Some((items, meta)) => {
                for r in items {
                    objs.push(Obj::from_member_raw(cluster, &api_version, kind, &body[r])?);
                }
                serde_json::json!({ "metadata": meta })
            }
            None => {
                let mut v: Value = serde_json::from_slice(&body).map_err(|e| CacheError::Member(format!("LIST {path}: {e}")))?;
                let items = match v.get_mut("items").map(Value::take) {
                    Some(Value::Array(a)) => a,
                    _ => vec![],
                };
                for mut it in items {
                    if it.is_object() {
                        it["apiVersion"] = Value::String(api_version.clone());
                        it["kind"] = Value::String(kind.to_string());
                    }
                    objs.push(Obj::from_member(cluster, it)?);
                }
                v
            }
        };
        let rv = v.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
        cont = v.pointer("/metadata/continue").and_then(Value::as_str).unwrap_or("").to_string();
        if cont.is_empty() {
            break rv;
        }
    };
    let rv: u64 = rv.parse().map_err(|_| CacheError::Member(format!("LIST {path}: non-numeric resourceVersion {rv:?}")))?;
    store.sync(epoch, cluster, rv, objs);
    Ok(rv)
}

enum WatchEnd {
    /// The stream ended normally (timeout): re-watch from the last resourceVersion.
    Closed,
    /// 410: relist.
    Expired,
}

#[allow(clippy::too_many_arguments)]
async fn watch(
    store: &KindStore,
    epoch: u64,
    cluster: &Arc<str>,
    http: &reqwest::Client,
    server: &str,
    path: &str,
    rv: &mut u64,
    fresh: &prometheus_client::metrics::gauge::Gauge,
    connected: &AtomicBool,
) -> Result<WatchEnd, CacheError> {
    let resp = http
        .get(format!("{server}{path}"))
        .query(&[("watch", "1"), ("allowWatchBookmarks", "true")])
        .query(&[("resourceVersion", rv.to_string()), ("timeoutSeconds", WATCH_TIMEOUT_S.to_string())])
        .send()
        .await?;
    if resp.status().as_u16() == 410 {
        return Ok(WatchEnd::Expired);
    }
    if !resp.status().is_success() {
        return Err(CacheError::Member(format!("WATCH {path}: {}", resp.status())));
    }
    connected.store(true, Ordering::Relaxed);
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let idle = Duration::from_secs(WATCH_TIMEOUT_S + 30);
    loop {
        let chunk = match tokio::time::timeout(idle, body.next()).await {
            Err(_) => return Err(CacheError::Member("watch idle".into())),
            Ok(None) => return Ok(WatchEnd::Closed),
            Ok(Some(c)) => c?,
        };
        buf.extend_from_slice(&chunk);
        if buf.contains(&b'\n') {
            fresh.set(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64));
        }
        let mut start = 0;
        while let Some(nl) = buf[start..].iter().position(|b| *b == b'\n') {
            let line = &buf[start..start + nl];
            start += nl + 1;
            match watch_line(store, epoch, cluster, line)? {
                Line::Applied(r) | Line::Bookmark(r) => *rv = r,
                Line::Skip => {}
                Line::Expired => return Ok(WatchEnd::Expired),
            }
        }
        buf.drain(..start);
    }
}

/// What one line of a member's watch stream did (see [`watch_line`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// An ADDED, MODIFIED or DELETED event was applied (or was a duplicate) at this member
    /// resourceVersion.
    Applied(u64),
    /// A bookmark advanced the member's position to this resourceVersion.
    Bookmark(u64),
    /// A blank line or a bookmark without a resourceVersion.
    Skip,
    /// An ERROR event with code 410: the member's history no longer holds our position.
    Expired,
}

/// Applies one line of a member's watch stream (`{"type":…,"object":…}`, without its newline)
/// to `store`: the event's object goes through [`Obj::from_watch_raw`] (scanned, not decoded,
/// kept hot until the cooling thread compresses it);
/// bookmarks and errors are decoded. Errors: [`CacheError::Member`] for a line that is not a
/// watch event, an unknown event type, an ERROR event other than 410, or a bad object.
pub fn watch_line(store: &KindStore, epoch: u64, cluster: &Arc<str>, line: &[u8]) -> Result<Line, CacheError> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(Line::Skip);
    }
    if let Some((ty, obj)) = event_parts(line) {
        // an error here may be the shortcut's (e.g. members after the object): decode below
        if let Ok((key, o)) = Obj::from_watch_raw(cluster, &store.info.api_version(), store.info.kind, obj) {
            let rv = o.member_rv;
            store.apply(epoch, ty, key, o);
            return Ok(Line::Applied(rv));
        }
    }
    let mut ev: Value = serde_json::from_slice(line).map_err(|e| CacheError::Member(format!("watch event: {e}")))?;
    let ty = ev.get("type").and_then(Value::as_str).unwrap_or("").to_string();
    let obj = ev.get_mut("object").map(Value::take).unwrap_or(Value::Null);
    let ty = match ty.as_str() {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => {
            if let Some(b) = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| s.parse().ok()) {
                store.progress(cluster, b);
                return Ok(Line::Bookmark(b));
            }
            return Ok(Line::Skip);
        }
        "ERROR" => {
            if obj.get("code").and_then(Value::as_i64) == Some(410) {
                return Ok(Line::Expired);
            }
            return Err(CacheError::Member(format!("watch error: {obj}")));
        }
        other => return Err(CacheError::Member(format!("watch event type {other:?}"))),
    };
    let mut obj = obj;
    obj["apiVersion"] = Value::String(store.info.api_version());
    obj["kind"] = Value::String(store.info.kind.to_string());
    let (key, o) = Obj::from_member(cluster, obj)?;
    let rv = o.member_rv;
    store.apply(epoch, ty, key, o);
    Ok(Line::Applied(rv))
}

/// The type and the object's bytes of a compact ADDED/MODIFIED/DELETED watch line
/// (`{"type":"…","object":{…}}`, either order); `None` for anything else (decoded instead).
fn event_parts(line: &[u8]) -> Option<(EventType, &[u8])> {
    let rest = line.strip_prefix(b"{\"type\":\"")?;
    let (ty, rest) = if let Some(r) = rest.strip_prefix(b"MODIFIED\",") {
        (EventType::Modified, r)
    } else if let Some(r) = rest.strip_prefix(b"ADDED\",") {
        (EventType::Added, r)
    } else if let Some(r) = rest.strip_prefix(b"DELETED\",") {
        (EventType::Deleted, r)
    } else {
        return None;
    };
    // the object runs to the line's last closing brace; from_member_raw checks it is one
    // JSON object (anything after it fails the check and the line is decoded instead)
    let obj = rest.strip_prefix(b"\"object\":")?;
    let obj = obj.strip_suffix(b"}")?;
    obj.starts_with(b"{").then_some((ty, obj))
}
