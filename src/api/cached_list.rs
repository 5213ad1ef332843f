//! LISTs that kube-apiserver answers from its watch cache (`resourceVersion=0`, `NotOlderThan`): which requests qualify, and the list body rendered from stored bytes.
//!
//! Mirrors kube-apiserver 1.33's `shouldDelegateList` (`staging/src/k8s.io/apiserver/pkg/
//! storage/cacher/delegator.go`) for the cases it serves from the cache:
//! - `resourceVersion=0` (without `Exact`): any revision, the cache's newest;
//! - `resourceVersion=N&resourceVersionMatch=NotOlderThan`: the cache once it has seen N;
//! - `resourceVersion=N` without a match and without `limit` (the legacy "not older than").
//!
//! Everything else stays with etcd: `resourceVersion=""` (consistent), `Exact`, `continue`,
//! and `resourceVersion=N` with `limit` (the legacy exact match). A cache-served list ignores
//! `limit` and has no `continue`: kube-apiserver 1.33 returns every matching object from the
//! cache (paging from the cache needs the later `ListFromCacheSnapshot` feature).

use bytes::Bytes;
use futures::StreamExt;
use http::StatusCode;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::object;
use super::registry::ResourceInfo;
use super::request::Query;
use crate::storage::KeyValue;

/// Objects rendered per body chunk of a streamed list.
const CHUNK: usize = 500;

/// The revision a LIST accepts from the watch cache (`0`: any), or `None` when it must be read
/// from etcd (see the module documentation). Error: 400 for a resourceVersion that is not a
/// number.
pub fn min_revision(q: &Query) -> ApiResult<Option<i64>> {
    if q.non_empty("continue").is_some() {
        return Ok(None);
    }
    let rv = q.get("resourceVersion").unwrap_or("");
    let rv_match = q.get("resourceVersionMatch").unwrap_or("");
    let parse = || rv.parse::<i64>().map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv}")));
    let limited = q.int("limit")?.unwrap_or(0) > 0;
    Ok(match (rv, rv_match) {
        ("", _) => None,
        ("0", "" | "NotOlderThan") => Some(0),
        (_, "NotOlderThan") => Some(parse()?.max(0)),
        (_, "") if !limited => Some(parse()?.max(0)),
        _ => None,
    })
}

/// The start of a list body: `{"kind":…,"apiVersion":…,"metadata":<meta>,"items":[`.
pub fn list_head(info: &ResourceInfo, meta: &Value) -> Vec<u8> {
    let mut head = Vec::with_capacity(128);
    head.extend_from_slice(b"{\"kind\":");
    head.extend_from_slice(&serde_json::to_vec(&info.list_kind()).expect("string"));
    head.extend_from_slice(b",\"apiVersion\":");
    head.extend_from_slice(&serde_json::to_vec(&info.api_version()).expect("string"));
    head.extend_from_slice(b",\"metadata\":");
    head.extend_from_slice(&serde_json::to_vec(meta).expect("serializable"));
    head.extend_from_slice(b",\"items\":[");
    head
}

/// Renders stored objects as list items (comma-separated; `first_item` says whether none was
/// rendered before), spliced from the stored bytes when they are in stored form, decoded and
/// encoded otherwise. Error: an undecodable value.
pub fn render_items(kvs: &[KeyValue], first_item: &mut bool) -> Result<Vec<u8>, std::io::Error> {
    let mut out = Vec::with_capacity(kvs.iter().map(|kv| kv.value.len() + 40).sum());
    for kv in kvs {
        if !*first_item {
            out.push(b',');
        }
        *first_item = false;
        if !object::write_stored_with_rv(&mut out, &kv.value, kv.mod_revision) {
            let obj = object::from_stored(&kv.value, kv.mod_revision).map_err(|e| std::io::Error::other(e.to_string()))?;
            serde_json::to_writer(&mut out, &obj).map_err(std::io::Error::other)?;
        }
    }
    Ok(out)
}

/// A 200 response with the list of `kvs` under `head` (see [`list_head`]), streamed in chunks
/// of [`CHUNK`] objects from a task, so a large cached list is never rendered whole.
pub fn stream_list(head: Vec<u8>, kvs: Vec<KeyValue>) -> crate::http::Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from(head))).await.is_err() {
            return;
        }
        let mut first_item = true;
        for chunk in kvs.chunks(CHUNK) {
            let body = render_items(chunk, &mut first_item);
            let failed = body.is_err();
            if tx.send(body.map(Bytes::from)).await.is_err() || failed {
                return;
            }
        }
        let _ = tx.send(Ok(Bytes::from_static(b"]}"))).await;
    });
    let body = tokio_stream::wrappers::ReceiverStream::new(rx).map(|r| r.map(Frame::data));
    http::Response::builder().status(StatusCode::OK).header("content-type", "application/json").body(BodyExt::boxed(StreamBody::new(body))).expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Query {
        Query::parse(Some(s))
    }

    #[test]
    fn which_lists_the_cache_answers() {
        assert_eq!(min_revision(&q("resourceVersion=0")).unwrap(), Some(0));
        assert_eq!(min_revision(&q("resourceVersion=0&limit=5")).unwrap(), Some(0));
        assert_eq!(min_revision(&q("resourceVersion=0&resourceVersionMatch=NotOlderThan")).unwrap(), Some(0));
        assert_eq!(min_revision(&q("resourceVersion=42&resourceVersionMatch=NotOlderThan&limit=5")).unwrap(), Some(42));
        assert_eq!(min_revision(&q("resourceVersion=42")).unwrap(), Some(42));
        // consistent, exact, legacy exact (RV with limit) and continue: etcd
        assert_eq!(min_revision(&q("")).unwrap(), None);
        assert_eq!(min_revision(&q("limit=5")).unwrap(), None);
        assert_eq!(min_revision(&q("resourceVersion=42&resourceVersionMatch=Exact")).unwrap(), None);
        assert_eq!(min_revision(&q("resourceVersion=42&limit=5")).unwrap(), None);
        assert_eq!(min_revision(&q("resourceVersion=0&continue=abc")).unwrap(), None);
        assert!(min_revision(&q("resourceVersion=x&resourceVersionMatch=NotOlderThan")).is_err());
    }
}
