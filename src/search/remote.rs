//! The MUX over `fedctl cache` processes (`fedctl server --cache-endpoints`): cached-kind
//! reads of the global view answered by merging what every cache process serves.
//!
//! Every endpoint serves the same search API for the shards it holds; the server talks to
//! them with its admin client certificate.
//! - Positions: each endpoint reports its current global resourceVersion per kind in
//!   `GET …/v1alpha1/shards` (`resourceVersions`). The MUX's snapshot `P` has, for each
//!   cluster every endpoint knows, the smallest member resourceVersion `R` among the
//!   endpoints, as position `R.4294967295`: "everything derived from member state `R`". An
//!   endpoint's position only ever stops at a complete member state (a relist's derived
//!   events are recorded at once), so `P` is a state every endpoint holds or can roll back
//!   to; the stores compare a requested position with their own at member-resourceVersion
//!   granularity. A fresh `P` is taken only once every endpoint follows the same shard map
//!   version and has listed every member (see [`crate::cache::shard`], "Out-of-process
//!   shards").
//! - LIST: every endpoint is asked for pages at `resourceVersion=P&resourceVersionMatch=Exact`
//!   (the continue tokens are the view's own format, so the MUX builds and forwards them);
//!   the pages are merged by key (namespace, name, cluster), a few pages per endpoint in
//!   memory at a time; a paged client LIST gets a token holding `P` and the last key. The
//!   endpoints' pages are their own output, so the MUX splits them by brackets and string ends
//!   and reads only the keys; an unpaged LIST fetches each endpoint's next page while it reads
//!   one (pages bounded by bytes as well as objects, [`PAGE_BYTES`]), and from a single
//!   endpoint (nothing to merge) passes each page's items on as one block.
//! - GET: a LIST by `metadata.name` on every endpoint; several members → 409.
//! - WATCH: one watch per endpoint from the client's resourceVersion (or `P` after an
//!   initial LIST), with prompt complete bookmarks ([`super::PROGRESS_PARAM`]); a watch from
//!   a resourceVersion follows the collection's shared merge ([`super::hub`]), one with
//!   initial events merges legs of its own. An event at
//!   (cluster `c`, position `p`) from endpoint `i` is emitted, per cluster in position order,
//!   once every other endpoint has delivered everything up to `p` for `c` (its stream passed
//!   `p`, or a complete bookmark passed `p`'s member resourceVersion). Each emitted object
//!   carries the merged resourceVersion after it: per cluster, a position all of whose
//!   earlier events were emitted. An endpoint stream that ends ends the client's watch (the
//!   client resumes; an endpoint that restarted answers 410 for positions it never had).
//! - Shard map: the server balances it from the objects per shard and namespace the endpoints
//!   report ([`RemoteMux::run_shard_map`]); the endpoints adopt it.
//! - Zones: an endpoint started with `fedctl cache --zone Z` reports `zone` in `/shards` and
//!   holds only zone `Z`'s members. A cluster is *answered* by the endpoints without a zone
//!   and by those of its own zone (learned from which endpoints report it, in `/shards` and in
//!   their watch streams) — see [`Zones`]. `P` takes each cluster's minimum over the endpoints
//!   that answer it, and a watch event waits only for those; each zone endpoint reads a
//!   requested resourceVersion without the other zones' clusters
//!   ([`crate::cache::GlobalCache::local_rv`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::StatusCode;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};

use super::hub::{self, Driver, Hub, HubKey, Hubs, Subscription};
use super::{add_warnings, exact_match, push_line, scope_path, ContinueToken, PREFIX, PROGRESS_PARAM};
use crate::api::handler::{json_response, Body, Response, WatchSlot};
use crate::api::registry::ResourceInfo;
use crate::api::request::{Query, ResourceRequest};
use crate::api::{table, watch, ApiError};
use crate::cache::rv::{GlobalRv, Pos};
use crate::cache::store::scan::{self, Bad};
use crate::cache::CLUSTER_ANNOTATION;

/// Errors of the MUX's set-up.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The client certificate or CA could not be used.
    #[error("cache endpoints TLS: {0}")]
    Tls(#[from] reqwest::Error),
    /// No endpoint was given.
    #[error("no cache endpoint")]
    NoEndpoint,
}

/// The MUX: the `fedctl cache` endpoints and an HTTPS client for them.
pub struct RemoteMux {
    endpoints: Vec<String>,
    http: reqwest::Client,
    /// Which endpoints answer which clusters, as last read from `/shards` (`None`: not read
    /// yet).
    zones: std::sync::Mutex<Option<Zones>>,
    /// The shared watches ([`super::hub`]).
    hubs: Arc<Hubs>,
}

/// Which endpoints answer for which member cluster: an endpoint without a zone answers for
/// every cluster (it holds some shards of every member), a zone endpoint for the clusters of
/// its zone. A cluster's zone is learned from the zone endpoints that report it (their
/// `/shards` positions, their watch events and bookmarks); a cluster no zone endpoint has
/// reported yet is answered by the endpoints without a zone only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Zones {
    /// Per endpoint (in the MUX's order): its zone.
    pub endpoints: Vec<Option<String>>,
    /// Cluster → zone, as the zone endpoints reported them.
    pub clusters: BTreeMap<String, String>,
}

impl Zones {
    /// Without zones: `n` endpoints that each answer for every cluster.
    pub fn none(n: usize) -> Zones {
        Zones { endpoints: vec![None; n], clusters: BTreeMap::new() }
    }

    /// Records that endpoint `j` reported cluster `c` (no-op for an endpoint without a zone).
    pub fn learn(&mut self, j: usize, c: &str) {
        if let Some(Some(z)) = self.endpoints.get(j) {
            if self.clusters.get(c) != Some(z) {
                self.clusters.insert(c.to_string(), z.clone());
            }
        }
    }

    /// Whether endpoint `j` answers for cluster `c`.
    pub fn answers(&self, j: usize, c: &str) -> bool {
        match self.endpoints.get(j) {
            Some(None) => true,
            Some(Some(z)) => self.clusters.get(c) == Some(z),
            None => false,
        }
    }
}

/// What a cached-kind read needs besides the request.
pub struct ReadCtx {
    /// The kind (with its CLUSTER column).
    pub info: Arc<ResourceInfo>,
    /// The Kubernetes path below the view prefix, e.g. `/api/v1/namespaces/a/pods`.
    pub sub: String,
    /// `clusters/<name>` requests: the member.
    pub cluster: Option<String>,
    /// Table output asked for.
    pub want_table: bool,
    /// Table `includeObject`.
    pub include_object: String,
    /// Interval between bookmarks to clients that ask for them.
    pub bookmark_interval: Duration,
    /// Events buffered per watcher between the merge and its connection.
    pub buffer: usize,
    /// A watcher whose buffer stays full this long is dropped ([`super::push_line`]).
    pub send_timeout: Duration,
    /// Only these namespaces' objects are answered (the caller's namespace grant, see
    /// [`super::access`]); `None`: every object.
    pub namespaces: Option<Arc<std::collections::BTreeSet<String>>>,
}

/// The `Warning` header values of an endpoint's answer (its stale members).
fn warnings_of(r: &reqwest::Response) -> Vec<String> {
    r.headers().get_all(reqwest::header::WARNING).iter().filter_map(|v| v.to_str().ok()).map(str::to_string).collect()
}

/// A member position meaning "every event derived from member resourceVersion `rv`".
fn whole(rv: u64) -> Pos {
    Pos { rv, sub: u32::MAX }
}

/// The snapshot over endpoint positions `got` (one per endpoint, in order): each cluster at
/// the smallest member resourceVersion among the endpoints that answer for it, if every one of
/// them knows it (else it is left out); and whether no cluster was left out.
fn snapshot(got: &[&GlobalRv], zones: &Zones) -> (GlobalRv, bool) {
    let clusters: std::collections::BTreeSet<&String> = got.iter().flat_map(|g| g.0.keys()).collect();
    let mut p = BTreeMap::new();
    let mut complete = true;
    for c in clusters {
        let rvs: Option<Vec<u64>> = got.iter().enumerate().filter(|(j, _)| zones.answers(*j, c)).map(|(_, g)| g.0.get(c).map(|p| p.rv)).collect();
        match rvs.and_then(|v| v.into_iter().min()) {
            Some(rv) => {
                p.insert(c.clone(), whole(rv));
            }
            None => complete = false,
        }
    }
    (GlobalRv(p), complete)
}

/// How much longer than the client's watch its own legs to the endpoints last, in seconds.
const LEG_SLACK_SECONDS: u64 = 10;

/// How long a shared watch's legs last, in seconds (it ends then; its watchers resume).
const HUB_LEG_SECONDS: u64 = 6 * 3600;

/// Most objects per endpoint page of an unpaged LIST.
const CHUNK: usize = 1000;

/// Most bytes per endpoint page of an unpaged LIST ([`super::PAGE_BYTES_PARAM`]; one object
/// larger than this is a page of its own). Each endpoint holds two pages (the one being read
/// and the next one fetched meanwhile), each in a buffer of [`PageBuffers`], so a LIST holds
/// about `2 × PAGE_BYTES` per endpoint however large its objects are: pages of
/// [`CHUNK`] objects measured 4.6 to 17.5 MB over the pods of one zone (BENCHMARKS.md).
const PAGE_BYTES: usize = 4 << 20;

/// Longest wait for one endpoint page.
const PAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Most events a MUX watch holds back waiting for a lagging endpoint; beyond, the watch ends
/// (the client resumes from its last resourceVersion), as a too slow watcher is ended.
const MAX_PENDING: usize = 10_000;

type Key3 = (String, String, String);

/// The merge key of a raw object: its namespace, name and cluster annotation, each `""` when
/// absent. Each part is a slice of the page's bytes (a copy only for a string with escapes),
/// so keying an object allocates nothing; parts compare as bytes, which for UTF-8 is the
/// order of [`Key3`]'s strings.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct RawKey {
    ns: Bytes,
    name: Bytes,
    cluster: Bytes,
}

impl RawKey {
    /// The key as strings (a continue token's). Parts come from [`scan::str_value`] or a
    /// `String`, so they are UTF-8.
    fn to_key3(&self) -> Key3 {
        let s = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        (s(&self.ns), s(&self.name), s(&self.cluster))
    }

    /// A continue token's key as a merge key.
    fn from_key3(k: &Key3) -> RawKey {
        let b = |s: &String| Bytes::copy_from_slice(s.as_bytes());
        RawKey { ns: b(&k.0), name: b(&k.1), cluster: b(&k.2) }
    }
}

/// One object of an endpoint's LIST page as the endpoint wrote it: a slice of the page's
/// bytes, passed on without being decoded and encoded again.
type RawObj = Bytes;

/// An endpoint's LIST page split into its objects with their merge keys, and its continue
/// token (`None` on the last page). The page is the endpoint's own output, made from objects
/// its ingest checked, so it is split by brackets and string ends and only the keys are read,
/// in one pass over each object ([`item_at`]); the objects and their keys are slices of
/// `body`. Errors: [`Bad`] when the page is not a list object, or an item's key is not
/// readable.
fn split_page(body: &Bytes) -> Result<(Option<String>, Vec<(RawKey, RawObj)>), Bad> {
    let b = &body[..];
    let mut cont = None;
    let mut items = Vec::new();
    let end = scan::trusted_object(b, 0, |k, at| match &*scan::str_value(b, k)? {
        "metadata" => {
            let (c, end) = page_continue(b, at)?;
            cont = c;
            Ok(end)
        }
        "items" if b.get(at) == Some(&b'[') => {
            let mut i = scan::skip_ws(b, at + 1);
            if b.get(i) == Some(&b']') {
                return Ok(i + 1);
            }
            loop {
                let (key, end) = item_at(body, i)?;
                items.push((key, body.slice(i..end)));
                i = scan::skip_ws(b, end);
                match b.get(i) {
                    Some(b',') => i = scan::skip_ws(b, i + 1),
                    Some(b']') => return Ok(i + 1),
                    _ => return Err(Bad),
                }
            }
        }
        _ => scan::skip_trusted(b, at),
    })?;
    if scan::skip_ws(b, end) != b.len() {
        return Err(Bad);
    }
    Ok((cont, items))
}

/// The merge key of the raw object at offset `i` of `body` (the rest of the object is skipped,
/// not read) and the offset after the object. Errors: [`Bad`] when no object starts at `i`,
/// one of the key's parts is not a string, or the annotations are neither an object nor
/// `null`.
fn item_at(body: &Bytes, i: usize) -> Result<(RawKey, usize), Bad> {
    let b = &body[..];
    let mut key = RawKey::default();
    let text = |at: usize| -> Result<(Bytes, usize), Bad> {
        let t = scan::trusted_string(b, at)?;
        let v = match scan::str_value(b, t)? {
            std::borrow::Cow::Borrowed(_) => body.slice(t.start..t.end),
            std::borrow::Cow::Owned(s) => Bytes::from(s),
        };
        Ok((v, t.end + 1))
    };
    let end = scan::trusted_object(b, i, |k, at| {
        if scan::str_value(b, k)? != "metadata" || b.get(at) != Some(&b'{') {
            return scan::skip_trusted(b, at);
        }
        scan::trusted_object(b, at, |k, at| match &*scan::str_value(b, k)? {
            "namespace" => text(at).map(|(v, end)| {
                key.ns = v;
                end
            }),
            "name" => text(at).map(|(v, end)| {
                key.name = v;
                end
            }),
            "annotations" if b.get(at) == Some(&b'{') => scan::trusted_object(b, at, |k, at| {
                if scan::str_value(b, k)? != CLUSTER_ANNOTATION {
                    return scan::skip_trusted(b, at);
                }
                text(at).map(|(v, end)| {
                    key.cluster = v;
                    end
                })
            }),
            "annotations" if b[at..].starts_with(b"null") => Ok(at + 4),
            "annotations" => Err(Bad),
            _ => scan::skip_trusted(b, at),
        })
    })?;
    Ok((key, end))
}

/// How a merge reads its endpoints' pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// Pages of this many objects, each fetched when needed (a paged LIST).
    Pages(usize),
    /// Every object: pages of [`CHUNK`] objects or [`PAGE_BYTES`], the next fetched while
    /// one is read.
    All,
    /// Every object as bytes, for a streamed LIST: as `All`, and from a single endpoint
    /// (nothing to merge) each page's items pass through as one block ([`page_block`]).
    Stream,
}

/// The items of an endpoint's LIST page as one block of its bytes (the items and the commas
/// between them, `None` for none) and its continue token, without reading the items. The
/// endpoint's pages are `{"kind":…,"apiVersion":…,"metadata":{…},"items":[…]}` with the items
/// last (as kube-apiserver writes a list); the members before them are read as
/// [`split_page`] does. Errors: [`Bad`] for another layout.
fn page_block(body: &Bytes) -> Result<(Option<String>, Option<Bytes>), Bad> {
    let b = &body[..];
    let mut i = scan::skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return Err(Bad);
    }
    i = scan::skip_ws(b, i + 1);
    let mut cont = None;
    loop {
        let k = scan::trusted_string(b, i)?;
        i = scan::skip_ws(b, k.end + 1);
        if b.get(i) != Some(&b':') {
            return Err(Bad);
        }
        let at = scan::skip_ws(b, i + 1);
        match &*scan::str_value(b, k)? {
            "items" => {
                // the closing `]}` of a page whose last member is the items
                let mut end = b.len();
                for close in [b'}', b']'] {
                    end = scan::trim_ws_end(b, end);
                    if end == 0 || b[end - 1] != close {
                        return Err(Bad);
                    }
                    end -= 1;
                }
                if b.get(at) != Some(&b'[') || end < at + 1 {
                    return Err(Bad);
                }
                let (start, end) = (scan::skip_ws(b, at + 1), scan::trim_ws_end(b, end));
                return Ok((cont, (start < end).then(|| body.slice(start..end))));
            }
            "metadata" => (cont, i) = page_continue(b, at)?,
            _ => i = scan::skip_trusted(b, at)?,
        }
        i = scan::skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i = scan::skip_ws(b, i + 1),
            _ => return Err(Bad),
        }
    }
}

/// The continue token (`None` when absent or empty) of a page's `metadata` at `at`, and the
/// offset after it. Errors: [`Bad`] when it is not an object with a string token.
fn page_continue(b: &[u8], at: usize) -> Result<(Option<String>, usize), Bad> {
    let end = scan::skip_trusted(b, at)?;
    let meta: RawPageMeta = serde_json::from_slice(&b[at..end]).map_err(|_| Bad)?;
    Ok((meta.cont.filter(|c| !c.is_empty()), end))
}

#[derive(serde::Deserialize, Default)]
struct RawPageMeta {
    #[serde(default, rename = "continue")]
    cont: Option<String>,
}

/// A raw object decoded (LIST pages with a limit, Table output, initial watch events).
fn decode(o: &RawObj) -> Value {
    serde_json::from_slice(o).unwrap_or(Value::Null)
}

fn key_of(v: &Value) -> Key3 {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    (s("/metadata/namespace"), s("/metadata/name"), s("/metadata/annotations/fedctl.io~1cluster"))
}

/// An endpoint's Status answer as the error to give the client.
fn status_error(endpoint: &str, code: u16, body: &[u8]) -> ApiError {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let msg = v.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect());
    match code {
        400 => ApiError::BadRequest(msg),
        404 => ApiError::NotFound {
            resource: v.pointer("/details/kind").and_then(Value::as_str).unwrap_or("").to_string(),
            name: v.pointer("/details/name").and_then(Value::as_str).unwrap_or("").to_string(),
        },
        409 => ApiError::ConflictMessage { message: msg, causes: vec![] },
        410 => ApiError::Expired(msg),
        _ => ApiError::Unavailable(format!("cache endpoint {endpoint}: {code}: {msg}")),
    }
}

fn unreachable(endpoint: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::Unavailable(format!("cache endpoint {endpoint}: {e}"))
}

/// Pages of one endpoint's LIST at one snapshot.
struct Pager {
    endpoint: String,
    url: String,
    query: Vec<(String, String)>,
    next: Option<String>,
    buf: VecDeque<(RawKey, RawObj)>,
    done: bool,
    chunk: usize,
    /// `Warning` header values of the pages read so far.
    warnings: Vec<String>,
    /// Fetch the next page while this one is read (unpaged LISTs, which read them all).
    prefetch: bool,
    /// Each page's items are one entry of `buf` (an empty key, the block of
    /// [`page_block`]): a streamed LIST from a single endpoint.
    whole: bool,
    /// The pages a prefetching task fetched, one waiting at most, and fetched only once the
    /// one before was taken (started by the first fill).
    ahead: Option<tokio::sync::mpsc::Receiver<Result<Fetched, ApiError>>>,
}

/// One page of an endpoint.
struct Fetched {
    /// Its objects with their keys, or in whole mode its one block (if any) under an empty key.
    items: Vec<(RawKey, RawObj)>,
    warnings: Vec<String>,
    /// The continue token of the next page (`None` on the last).
    next: Option<String>,
}

/// The buffers of one endpoint's LIST pages, each reused for a later page once nothing
/// holds a slice of the page it last held (its objects were merged and written out), so a
/// LIST of many pages allocates a few multi-megabyte buffers rather than one per page, which
/// the allocator would keep as resident memory after they are freed. Holds handles on the
/// last [`PageBuffers::KEPT`] pages; a page still referenced when its turn comes is let go,
/// to be freed by its last slice.
#[derive(Default)]
struct PageBuffers {
    pages: VecDeque<Bytes>,
}

impl PageBuffers {
    /// Pages kept for reuse: the one being merged and the one fetched ahead of it (a handle
    /// on one more would keep an idle buffer per endpoint).
    const KEPT: usize = 2;

    /// An empty buffer with room for `size` bytes: a kept page's buffer that nothing else
    /// references and that is large enough, else a new one with an eighth more room (pages
    /// of one LIST differ in size by a few percent, so the next one fits).
    fn take(&mut self, size: usize) -> bytes::BytesMut {
        for _ in 0..self.pages.len() {
            let page = self.pages.pop_front().expect("counted");
            match page.try_into_mut() {
                Ok(mut b) if b.capacity() >= size => {
                    b.clear();
                    return b;
                }
                // too small: freed here rather than grown (growing copies it)
                Ok(_) => {}
                Err(page) => self.pages.push_back(page),
            }
        }
        bytes::BytesMut::with_capacity(size + size / 8)
    }

    /// Keeps a handle on `page` (a whole body read into a buffer of [`PageBuffers::take`]),
    /// letting go of the oldest one beyond [`PageBuffers::KEPT`].
    fn keep(&mut self, page: &Bytes) {
        if self.pages.len() == Self::KEPT {
            self.pages.pop_front();
        }
        self.pages.push_back(page.clone());
    }
}

/// Reads a response body into one buffer sized by its `Content-Length` (grown only if the
/// body is larger, see [`crate::cache::ingest::read_body_into`]): one of `buffers` when
/// given (a LIST's pages read one after another), else a new one.
async fn read_body(mut r: reqwest::Response, mut buffers: Option<&mut PageBuffers>) -> reqwest::Result<Bytes> {
    let size = r.content_length().map_or(0, |n| n as usize);
    let mut buf = match buffers.as_deref_mut() {
        Some(b) => b.take(size),
        None => bytes::BytesMut::with_capacity(size),
    };
    crate::cache::ingest::read_body_into(&mut r, &mut buf).await?;
    let page = buf.freeze();
    if let Some(b) = buffers {
        b.keep(&page);
    }
    Ok(page)
}

/// Fetches the page of `url` after `next` (the first page when `None`).
/// `whole`: the page's items as one block ([`page_block`]), else split ([`split_page`]).
/// `buffers`: where the body is read into (see [`read_body`]).
#[allow(clippy::too_many_arguments)]
async fn fetch(
    http: &reqwest::Client,
    endpoint: &str,
    url: &str,
    query: &[(String, String)],
    chunk: usize,
    next: Option<&str>,
    whole: bool,
    buffers: Option<&mut PageBuffers>,
) -> Result<Fetched, ApiError> {
    let mut q = query.to_vec();
    q.push(("limit".into(), chunk.to_string()));
    if let Some(t) = next {
        q.push(("continue".into(), t.to_string()));
    }
    let r = http.get(url).query(&q).timeout(PAGE_TIMEOUT).send().await.map_err(|e| unreachable(endpoint, e))?;
    let code = r.status().as_u16();
    let warnings = warnings_of(&r);
    let body = read_body(r, buffers).await.map_err(|e| unreachable(endpoint, e))?;
    if !(200..300).contains(&code) {
        return Err(status_error(endpoint, code, &body));
    }
    let bad = |_| unreachable(endpoint, "a LIST page that is not a JSON list of objects");
    let (next, items) = if whole {
        let (next, block) = page_block(&body).map_err(bad)?;
        (next, block.map(|b| (RawKey::default(), b)).into_iter().collect())
    } else {
        split_page(&body).map_err(bad)?
    };
    Ok(Fetched { items, warnings, next })
}

impl Pager {
    async fn fill(&mut self, http: &reqwest::Client) -> Result<(), ApiError> {
        while self.buf.is_empty() && !self.done {
            let page = if self.prefetch {
                let rx = self.ahead.get_or_insert_with(|| {
                    let (tx, rx) = tokio::sync::mpsc::channel(1);
                    let (http, endpoint, url, query, chunk, mut next, whole) = (http.clone(), self.endpoint.clone(), self.url.clone(), self.query.clone(), self.chunk, self.next.clone(), self.whole);
                    // ends after the last page, at an error, or when the LIST is dropped;
                    // a page is fetched only once the one before it was taken (the slot is
                    // reserved first), so an endpoint has two pages in memory at most: the
                    // one being read and the next
                    tokio::spawn(async move {
                        let mut buffers = PageBuffers::default();
                        loop {
                            let Ok(slot) = tx.reserve().await else { return };
                            let page = fetch(&http, &endpoint, &url, &query, chunk, next.as_deref(), whole, Some(&mut buffers)).await;
                            let more = page.as_ref().ok().and_then(|p| p.next.clone());
                            slot.send(page);
                            match more {
                                Some(n) => next = Some(n),
                                None => return,
                            }
                        }
                    });
                    rx
                });
                rx.recv().await.ok_or_else(|| unreachable(&self.endpoint, "the page fetch ended"))??
            } else {
                fetch(http, &self.endpoint, &self.url, &self.query, self.chunk, self.next.as_deref(), self.whole, None).await?
            };
            for w in page.warnings {
                if !self.warnings.contains(&w) {
                    self.warnings.push(w);
                }
            }
            self.next = page.next;
            self.done = self.next.is_none();
            self.buf.extend(page.items);
        }
        Ok(())
    }
}

/// The last key a [`Merge`] returned, copied out of its page: a slice would keep the whole
/// page (megabytes) alive after its objects were written, and its buffer from being reused
/// ([`PageBuffers`]). The copies' buffers are reused, so keeping it allocates nothing.
#[derive(Default)]
struct LastKey {
    /// `None` before the first key.
    parts: Option<[Vec<u8>; 3]>,
}

impl LastKey {
    fn of(k: &RawKey) -> LastKey {
        let mut l = LastKey::default();
        l.set(k);
        l
    }

    /// Whether `k` orders at or before this key (it was returned already).
    fn at_or_after(&self, k: &RawKey) -> bool {
        self.parts.as_ref().is_some_and(|[ns, name, cluster]| (&ns[..], &name[..], &cluster[..]) >= (&k.ns[..], &k.name[..], &k.cluster[..]))
    }

    fn set(&mut self, k: &RawKey) {
        let parts = self.parts.get_or_insert_with(Default::default);
        for (to, from) in parts.iter_mut().zip([&k.ns, &k.name, &k.cluster]) {
            to.clear();
            to.extend_from_slice(from);
        }
    }
}

/// A k-way merge of pagers by key.
struct Merge {
    pagers: Vec<Pager>,
    http: reqwest::Client,
    last: LastKey,
    /// Only objects of these namespaces are returned.
    only: Option<Arc<std::collections::BTreeSet<String>>>,
}

impl Merge {
    /// The next object in key order (each key once), or `None` at the end.
    async fn next(&mut self) -> Result<Option<(RawKey, RawObj)>, ApiError> {
        loop {
            for p in self.pagers.iter_mut() {
                p.fill(&self.http).await?;
            }
            let Some(i) = (0..self.pagers.len()).filter(|i| !self.pagers[*i].buf.is_empty()).min_by(|a, b| self.pagers[*a].buf[0].0.cmp(&self.pagers[*b].buf[0].0)) else {
                return Ok(None);
            };
            let (k, v) = self.pagers[i].buf.pop_front().expect("non-empty");
            if self.last.at_or_after(&k) {
                continue;
            }
            self.last.set(&k);
            if self.only.as_ref().is_some_and(|s| !std::str::from_utf8(&k.ns).is_ok_and(|ns| s.contains(ns))) {
                continue;
            }
            return Ok(Some((k, v)));
        }
    }

    /// The endpoints' `Warning` header values of the pages read so far.
    fn warnings(&self) -> Vec<String> {
        self.pagers.iter().flat_map(|p| p.warnings.iter().cloned()).collect()
    }

    /// Whether an object follows.
    async fn more(&mut self) -> Result<bool, ApiError> {
        for p in self.pagers.iter_mut() {
            p.fill(&self.http).await?;
        }
        Ok(self.pagers.iter().any(|p| !p.buf.is_empty()))
    }
}

impl RemoteMux {
    /// A MUX over `endpoints` (`https://host:port`), trusting `ca_pem` and presenting the
    /// client certificate `cert_pem`/`key_pem` (a `system:masters` identity).
    pub fn new(endpoints: Vec<String>, ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<RemoteMux, RemoteError> {
        if endpoints.is_empty() {
            return Err(RemoteError::NoEndpoint);
        }
        let id = reqwest::Identity::from_pem(format!("{cert_pem}\n{key_pem}").as_bytes())?;
        let mut b = reqwest::Client::builder().use_rustls_tls().identity(id).connect_timeout(Duration::from_secs(5)).tls_built_in_root_certs(false);
        for c in reqwest::Certificate::from_pem_bundle(ca_pem.as_bytes())? {
            b = b.add_root_certificate(c);
        }
        Ok(RemoteMux { endpoints: endpoints.into_iter().map(|e| e.trim_end_matches('/').to_string()).collect(), http: b.build()?, zones: Default::default(), hubs: Default::default() })
    }

    /// Keeps the shard map balanced for the endpoints forever (every `interval`): stores the
    /// first map (hash placement over `n` shards) when there is none, and, once every
    /// endpoint follows the stored version and has listed every member, proposes a balanced
    /// map (compare-and-swap) from the objects they hold per shard and namespace, by the rule
    /// of [`crate::cache::shard::ShardMap::rebalanced`]. The endpoints then adopt it.
    pub async fn run_shard_map(self: Arc<Self>, store: Arc<dyn crate::storage::Storage>, n: usize, interval: Duration) {
        loop {
            if let Err(e) = self.shard_map_step(&*store, n).await {
                tracing::debug!(error = %e, "global view: shard map over cache endpoints");
            }
            tokio::time::sleep(interval).await;
        }
    }

    async fn shard_map_step(&self, store: &dyn crate::storage::Storage, n: usize) -> Result<(), String> {
        use crate::cache::shard;
        let Some((map, rev)) = shard::load(store).await.map_err(|e| e.to_string())? else {
            let first = shard::ShardMap { version: 1, ..shard::ShardMap::hashed(n as u32) };
            shard::publish(store, &first, None).await.map_err(|e| e.to_string())?;
            return Ok(());
        };
        let mut loads = vec![0usize; n];
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for ep in &self.endpoints {
            let v: Value = self
                .http
                .get(format!("{ep}{PREFIX}/shards"))
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            if v["mapVersion"].as_u64() != Some(map.version) || v["synced"] != Value::Bool(true) || v["shardCount"].as_u64() != Some(n as u64) {
                return Ok(());
            }
            for s in v["shards"].as_array().into_iter().flatten() {
                if let Some(l) = s["id"].as_u64().and_then(|i| loads.get_mut(i as usize)) {
                    *l += s["objects"].as_u64().unwrap_or(0) as usize;
                }
            }
            for (ns, c) in v["namespaces"].as_object().into_iter().flatten() {
                *counts.entry(ns.clone()).or_default() += c.as_u64().unwrap_or(0) as usize;
            }
        }
        let Some((next, max, predicted)) = map.rebalanced(&counts, &loads) else { return Ok(()) };
        shard::publish(store, &next, Some(rev)).await.map_err(|e| e.to_string())?;
        tracing::info!(version = next.version, from = max, to = predicted, "global view: shard map over cache endpoints rebalanced");
        Ok(())
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Every endpoint's `/shards` document: `{"endpoints": [{"endpoint": "https://…",
    /// "status": {…}}]}` (`"error": "…"` in place of `status` for one that did not answer).
    pub async fn status(&self) -> Value {
        let asks = self.endpoints.iter().map(|ep| async move {
            let r = async {
                let r = self.http.get(format!("{ep}{PREFIX}/shards")).timeout(Duration::from_secs(5)).send().await?.error_for_status()?;
                r.json::<Value>().await
            }
            .await;
            match r {
                Ok(v) => json!({"endpoint": ep, "status": v}),
                Err(e) => json!({"endpoint": ep, "error": e.to_string()}),
            }
        });
        json!({"endpoints": futures::future::join_all(asks).await, "watches": self.hubs.status()})
    }

    fn view_url(&self, endpoint: &str, ctx_cluster: Option<&str>, sub: &str) -> String {
        match ctx_cluster {
            Some(c) => format!("{endpoint}{PREFIX}/clusters/{c}{sub}"),
            None => format!("{endpoint}{PREFIX}/global{sub}"),
        }
    }

    /// Every endpoint's current global resourceVersion of `resource`, shard map version,
    /// whether it is synced and whether it is initialized (see
    /// [`crate::cache::GlobalCache::status`]); records their zones and the clusters each zone
    /// endpoint holds ([`RemoteMux::zones`]).
    async fn endpoint_rvs(&self, resource: &str) -> Result<Vec<(GlobalRv, u64, bool, bool)>, ApiError> {
        let got = self.endpoint_status(resource).await?;
        let mut zones = Zones { endpoints: got.iter().map(|g| g.1.clone()).collect(), clusters: BTreeMap::new() };
        for (j, g) in got.iter().enumerate() {
            for c in g.0 .0 .0.keys() {
                zones.learn(j, c);
            }
        }
        *self.zones.lock().unwrap_or_else(|e| e.into_inner()) = Some(zones);
        Ok(got.into_iter().map(|g| g.0).collect())
    }

    /// Which endpoint answers for which cluster: as last read, else read now from `/shards`.
    pub async fn zones(&self, resource: &str) -> Result<Zones, ApiError> {
        if let Some(z) = self.zones.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(z);
        }
        self.endpoint_rvs(resource).await?;
        Ok(self.zones.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| Zones::none(self.endpoints.len())))
    }

    /// [`RemoteMux::endpoint_rvs`] with each endpoint's zone.
    async fn endpoint_status(&self, resource: &str) -> Result<Vec<((GlobalRv, u64, bool, bool), Option<String>)>, ApiError> {
        let asks = self.endpoints.iter().map(|ep| async move {
            let r = self.http.get(format!("{ep}{PREFIX}/shards")).timeout(Duration::from_secs(10)).send().await.map_err(|e| unreachable(ep, e))?;
            let code = r.status().as_u16();
            let body = r.bytes().await.map_err(|e| unreachable(ep, e))?;
            if !(200..300).contains(&code) {
                return Err(status_error(ep, code, &body));
            }
            let v: Value = serde_json::from_slice(&body).map_err(|e| unreachable(ep, e))?;
            let rv = v.pointer(&format!("/resourceVersions/{resource}")).and_then(Value::as_str).ok_or_else(|| unreachable(ep, format!("no resourceVersion of {resource}")))?;
            let g = GlobalRv::decode(rv).map_err(|e| unreachable(ep, e))?;
            let zone = v["zone"].as_str().map(str::to_string);
            Ok(((g, v["mapVersion"].as_u64().unwrap_or(0), v["synced"].as_bool().unwrap_or(true), v["initialized"].as_bool().unwrap_or(true)), zone))
        });
        futures::future::join_all(asks).await.into_iter().collect()
    }

    /// The snapshot `P` (see the module docs): for each cluster every endpoint that answers
    /// for it knows ([`Zones`]), the smallest member resourceVersion among them, as a
    /// whole-state position. Waits briefly (≤ 2 s) for endpoints that are not synced or do not
    /// know the same clusters yet (one just started or is relisting after a shard map change).
    /// Errors: 503 when the endpoints still follow different shard map versions (their objects
    /// would not add up to the view).
    pub async fn positions(&self, resource: &str) -> Result<GlobalRv, ApiError> {
        let mut tries = 0;
        loop {
            let got = self.endpoint_rvs(resource).await?;
            if got.iter().any(|g| !g.3) {
                // a process that (re)started and has not ended its first list of the members
                return Err(super::initializing());
            }
            let zones = self.zones(resource).await?;
            let maps_agree = got.windows(2).all(|w| w[0].1 == w[1].1);
            let (p, complete) = snapshot(&got.iter().map(|g| &g.0).collect::<Vec<_>>(), &zones);
            let settled = got.iter().all(|g| g.2) && complete;
            // a map change settles within a rebalance interval; a member one endpoint cannot
            // list may never settle, so that wait is short
            if (!maps_agree && tries < 25) || (!settled && tries < 10) {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            if !maps_agree {
                return Err(ApiError::Unavailable("the cache endpoints follow different shard map versions (one is adopting a new map); retry".into()));
            }
            return Ok(p);
        }
    }

    fn base_query(q: &Query) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for k in ["labelSelector", "fieldSelector"] {
            if let Some(v) = q.non_empty(k) {
                out.push((k.to_string(), v.to_string()));
            }
        }
        out
    }

    /// A merge of every endpoint's LIST of `sub` at `at`, after `after`, whose first pages
    /// are read (so errors surface before an answer starts).
    async fn merge(&self, ctx: &ReadCtx, base: &[(String, String)], at: &GlobalRv, after: Option<&Key3>, read: Read) -> Result<Merge, ApiError> {
        let (chunk, prefetch) = match read {
            Read::Pages(n) => (n, false),
            Read::All | Read::Stream => (CHUNK, true),
        };
        // (a filtered answer is merged object by object, never passed through in blocks)
        let whole = read == Read::Stream && self.endpoints.len() == 1 && ctx.namespaces.is_none();
        let grv = at.encode();
        let token = after.map(|k| {
            // the endpoint is asked on the client's own path: no scope binding needed
            ContinueToken { rv: grv.clone(), k: k.clone(), m: 0, p: None }.encode()
        });
        let mut query = base.to_vec();
        query.push(("resourceVersion".into(), grv.clone()));
        query.push(("resourceVersionMatch".into(), "Exact".into()));
        if prefetch {
            query.push((super::PAGE_BYTES_PARAM.into(), PAGE_BYTES.to_string()));
        }
        let pagers = self
            .endpoints
            .iter()
            .map(|ep| Pager {
                endpoint: ep.clone(),
                url: self.view_url(ep, ctx.cluster.as_deref(), &ctx.sub),
                query: query.clone(),
                next: token.clone(),
                buf: VecDeque::new(),
                done: false,
                chunk,
                warnings: Vec::new(),
                prefetch,
                whole,
                ahead: None,
            })
            .collect();
        let mut m = Merge { pagers, http: self.http.clone(), last: after.map(|k| LastKey::of(&RawKey::from_key3(k))).unwrap_or_default(), only: ctx.namespaces.clone() };
        let fills = m.pagers.iter_mut().map(|p| p.fill(&self.http));
        for r in futures::future::join_all(fills).await {
            r?;
        }
        Ok(m)
    }

    /// A merge at a fresh snapshot, retrying (≤ 3 s) while an endpoint cannot serve it yet
    /// (one that just restarted holds no history before its relist).
    async fn fresh_merge(&self, ctx: &ReadCtx, base: &[(String, String)], read: Read) -> Result<(GlobalRv, Merge), ApiError> {
        let mut tries = 0;
        loop {
            let at = self.positions(ctx.info.resource).await?;
            match self.merge(ctx, base, &at, None, read).await {
                Err(ApiError::Expired(_)) if tries < 15 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                r => return r.map(|m| (at, m)),
            }
        }
    }

    /// LIST of a cached kind over every endpoint (see the module docs).
    pub async fn list(&self, rr: &ResourceRequest, q: &Query, ctx: ReadCtx) -> Result<Response, ApiError> {
        let limit = q.int("limit")?.unwrap_or(0).max(0) as usize;
        let rv = q.get("resourceVersion").unwrap_or("");
        let exact = exact_match(q, rv)?;
        let scope = scope_path(ctx.cluster.as_deref(), rr.namespace.as_deref());
        let asked = if !rv.is_empty() && rv != "0" { Some(GlobalRv::decode(rv).map_err(|e| ApiError::BadRequest(e.to_string()))?) } else { None };
        let base = Self::base_query(q);
        let read = if limit > 0 {
            Read::Pages(limit + 1)
        } else if ctx.want_table {
            Read::All
        } else {
            Read::Stream
        };
        let (at, mut merge) = match q.non_empty("continue") {
            Some(t) => {
                let (tok, at) = ContinueToken::decode(t, &scope)?;
                let m = self.merge(&ctx, &base, &at, Some(&tok.k), read).await.map_err(|e| match e {
                    ApiError::Expired(m) => {
                        ApiError::Expired(format!("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter. ({m})"))
                    }
                    other => other,
                })?;
                (at, m)
            }
            None => match asked.filter(|_| exact) {
                Some(at) => {
                    let m = self.merge(&ctx, &base, &at, None, read).await?;
                    (at, m)
                }
                None => self.fresh_merge(&ctx, &base, read).await?,
            },
        };
        let grv = at.encode();
        if limit == 0 && !ctx.want_table {
            let warnings = merge.warnings();
            let mut resp = stream_list(ctx.info.clone(), grv, merge);
            add_warnings(&mut resp, &warnings);
            return Ok(resp);
        }
        let mut objs = Vec::new();
        let mut last = None;
        while limit == 0 || objs.len() < limit {
            match merge.next().await? {
                Some((k, v)) => {
                    last = Some(k);
                    objs.push(decode(&v));
                }
                None => break,
            }
        }
        let mut meta = serde_json::Map::new();
        meta.insert("resourceVersion".into(), json!(grv));
        if limit > 0 && objs.len() == limit && merge.more().await? {
            let k = last.expect("limit > 0");
            let tok = ContinueToken { rv: grv.clone(), k: k.to_key3(), m: 0, p: Some(scope) };
            meta.insert("continue".into(), json!(tok.encode()));
        }
        let mut resp = if ctx.want_table {
            json_response(StatusCode::OK, &table::table(&ctx.info, &objs, Value::Object(meta), &ctx.include_object, true))
        } else {
            json_response(StatusCode::OK, &json!({"kind": ctx.info.list_kind(), "apiVersion": ctx.info.api_version(), "metadata": meta, "items": objs}))
        };
        add_warnings(&mut resp, &merge.warnings());
        Ok(resp)
    }

    /// Every endpoint's objects named like `rr` (a LIST by `metadata.name` of its collection),
    /// with the endpoints' `Warning` header values.
    async fn named(&self, rr: &ResourceRequest, cluster: Option<&str>) -> Result<(Vec<Value>, Vec<String>), ApiError> {
        let name = rr.name.clone().unwrap_or_default();
        let coll = collection_path(rr);
        let asks = self.endpoints.iter().map(|ep| {
            let url = self.view_url(ep, cluster, &coll);
            let name = name.clone();
            async move {
                let r = self.http.get(&url).query(&[("fieldSelector", format!("metadata.name={name}"))]).timeout(Duration::from_secs(30)).send().await.map_err(|e| unreachable(ep, e))?;
                let code = r.status().as_u16();
                let warnings = warnings_of(&r);
                let body = r.bytes().await.map_err(|e| unreachable(ep, e))?;
                if !(200..300).contains(&code) {
                    return Err(status_error(ep, code, &body));
                }
                let mut v: Value = serde_json::from_slice(&body).map_err(|e| unreachable(ep, e))?;
                let items = match v.get_mut("items").map(Value::take) {
                    Some(Value::Array(items)) => items,
                    _ => vec![],
                };
                Ok((items, warnings))
            }
        });
        let mut out = Vec::new();
        let mut warnings = Vec::new();
        for r in futures::future::join_all(asks).await {
            let (items, ws) = r?;
            out.extend(items);
            warnings.extend(ws);
        }
        out.sort_by_key(key_of);
        out.dedup_by(|a, b| key_of(a) == key_of(b));
        Ok((out, warnings))
    }

    /// GET by name: one object, 404, or 409 when several members have it.
    pub async fn get(&self, rr: &ResourceRequest, ctx: ReadCtx) -> Result<Response, ApiError> {
        let name = rr.name.clone().unwrap_or_default();
        let (mut found, warnings) = self.named(rr, ctx.cluster.as_deref()).await?;
        let obj = match found.len() {
            0 => return Err(ApiError::NotFound { resource: rr.info.resource.to_string(), name }),
            1 => found.remove(0),
            _ => return Err(super::ambiguous(rr, &name, &found.iter().map(|o| key_of(o).2).collect::<Vec<_>>())),
        };
        let mut resp = if ctx.want_table {
            let rv = obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(json!(""));
            json_response(StatusCode::OK, &table::table(&ctx.info, &[obj], json!({"resourceVersion": rv}), &ctx.include_object, true))
        } else {
            json_response(StatusCode::OK, &obj)
        };
        add_warnings(&mut resp, &warnings);
        Ok(resp)
    }

    /// The member clusters holding the object `rr` names (a delete's owner).
    pub async fn owners(&self, rr: &ResourceRequest, _sub: &str) -> Result<Vec<String>, ApiError> {
        Ok(self.named(rr, None).await?.0.iter().map(|o| key_of(o).2).collect())
    }

    /// Opens every endpoint's watch of `ctx`'s collection from `from` (answers checked, so an
    /// error becomes the client's Status), with prompt complete bookmarks, lasting `seconds`;
    /// a reader task per leg splits its lines into `rx` (`(endpoint, None)` when it ends).
    async fn open_legs(&self, ctx: &ReadCtx, base: &[(String, String)], from: &GlobalRv, seconds: u64) -> Result<Legs, ApiError> {
        let zones = self.zones(ctx.info.resource).await?;
        let mut wq = base.to_vec();
        wq.push(("watch".into(), "true".into()));
        wq.push(("resourceVersion".into(), from.encode()));
        wq.push(("allowWatchBookmarks".into(), "true".into()));
        wq.push((PROGRESS_PARAM.into(), "true".into()));
        wq.push(("timeoutSeconds".into(), seconds.to_string()));
        let opens = self.endpoints.iter().map(|ep| {
            let url = self.view_url(ep, ctx.cluster.as_deref(), &ctx.sub);
            let wq = wq.clone();
            async move {
                let r = self.http.get(&url).query(&wq).send().await.map_err(|e| unreachable(ep, e))?;
                let code = r.status().as_u16();
                if !(200..300).contains(&code) {
                    let body = r.bytes().await.unwrap_or_default();
                    return Err(status_error(ep, code, &body));
                }
                Ok(r)
            }
        });
        let mut streams = Vec::new();
        let mut warnings = Vec::new();
        for r in futures::future::join_all(opens).await {
            let r = r?;
            warnings.extend(warnings_of(&r));
            streams.push(r);
        }
        let (ev_tx, rx) = tokio::sync::mpsc::channel::<(usize, Option<Value>)>(1024);
        let mut readers = Vec::new();
        for (i, resp) in streams.into_iter().enumerate() {
            let ev_tx = ev_tx.clone();
            readers.push(tokio::spawn(async move {
                let mut body = resp.bytes_stream();
                let mut buf: Vec<u8> = Vec::new();
                while let Some(Ok(chunk)) = body.next().await {
                    buf.extend_from_slice(&chunk);
                    let mut at = 0;
                    while let Some(nl) = buf[at..].iter().position(|b| *b == b'\n') {
                        let line = &buf[at..at + nl + 1];
                        at += nl + 1;
                        if let Ok(v) = serde_json::from_slice::<Value>(line) {
                            if ev_tx.send((i, Some(v))).await.is_err() {
                                return;
                            }
                        }
                    }
                    buf.drain(..at);
                }
                let _ = ev_tx.send((i, None)).await;
            }));
        }
        Ok(Legs { rx, readers: AbortOnDrop(readers), warnings, zones })
    }

    /// WATCH of a cached kind over every endpoint (see the module docs); `slot` (the caller's
    /// watch slot) is released when the watch ends.
    pub async fn watch(&self, _rr: &ResourceRequest, q: &Query, ctx: ReadCtx, slot: Option<WatchSlot>) -> Result<Response, ApiError> {
        let rv = q.get("resourceVersion").unwrap_or("");
        let send_initial = q.flag("sendInitialEvents")?;
        let bookmarks = q.flag("allowWatchBookmarks")?;
        let asked = if !rv.is_empty() && rv != "0" { Some(GlobalRv::decode(rv).map_err(|e| ApiError::BadRequest(e.to_string()))?) } else { None };
        let timeout = match q.int("timeoutSeconds")? {
            Some(t) if t > 0 => Duration::from_secs(t as u64),
            _ => Duration::from_secs(1800 + rand::random::<u64>() % 1800),
        };
        let base = Self::base_query(q);
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(ctx.buffer.max(1));
        let mut out = Out::new(tx, ctx.info.clone(), ctx.want_table, ctx.include_object.clone(), ctx.send_timeout, ctx.namespaces.clone());
        // the start: the client's position, or a merged LIST at a fresh snapshot first
        let (from, initial) = match asked.filter(|_| !send_initial) {
            Some(at) => (at, None),
            None => {
                let (at, merge) = self.fresh_merge(&ctx, &base, Read::All).await?;
                (at, Some(merge))
            }
        };
        let mut warnings = initial.as_ref().map(|m| m.warnings()).unwrap_or_default();
        // A watch with initial events merges its own legs: its client reads the initial state
        // first, and the legs wait for it meanwhile. A watch from a resourceVersion follows the
        // collection's shared watch (see [`super::hub`]), started here when none covers it.
        let plan = if initial.is_some() {
            let legs = self.open_legs(&ctx, &base, &from, timeout.as_secs().max(1) + LEG_SLACK_SECONDS).await?;
            warnings.extend(legs.warnings.iter().cloned());
            Plan::Own(legs)
        } else {
            let key = HubKey { cluster: ctx.cluster.clone(), sub: ctx.sub.clone(), selectors: base.clone() };
            let sub = self
                .hubs
                .subscribe_or_start(&key, &from, async || {
                    let legs = self.open_legs(&ctx, &base, &from, HUB_LEG_SECONDS).await?;
                    let hub = Hub::new(&from, legs.warnings);
                    Ok::<_, ApiError>((hub, Driver { merge: MergeWatch::new(legs.zones, &from), rx: legs.rx, readers: legs.readers, interval: ctx.bookmark_interval }))
                })
                .await?;
            warnings.extend(sub.hub.warnings.iter().cloned());
            Plan::Shared(sub)
        };
        let interval = ctx.bookmark_interval;
        tokio::spawn(async move {
            let _slot = slot;
            let _ = async {
                if let Some(mut merge) = initial {
                    let grv = from.encode();
                    while let Some((_, raw)) = merge.next().await.map_err(|e| {
                        let _ = out.tx.try_send(watch::error_line(&e));
                    })? {
                        let mut v = decode(&raw);
                        v["metadata"]["resourceVersion"] = json!(grv);
                        out.event("ADDED", v, &grv).await?;
                    }
                    if send_initial {
                        out.bookmark(&grv, true).await?;
                    }
                }
                match plan {
                    Plan::Own(legs) => {
                        let _abort = legs.readers;
                        let mut w = MergeWatch::new(legs.zones, &from);
                        w.run(legs.rx, &mut out, bookmarks, interval, timeout).await
                    }
                    Plan::Shared(sub) => hub::follow(sub, from, &mut out, bookmarks, timeout).await,
                }
            }
            .await;
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|b| Ok::<_, std::io::Error>(Frame::data(b)));
        let mut resp = http::Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .header("cache-control", "no-cache, private")
            .body(BodyExt::boxed(StreamBody::new(stream)) as Body)
            .expect("valid response");
        add_warnings(&mut resp, &warnings);
        Ok(resp)
    }
}

/// Every endpoint's watch of one collection, as [`RemoteMux::open_legs`] opened them.
struct Legs {
    rx: tokio::sync::mpsc::Receiver<(usize, Option<Value>)>,
    readers: AbortOnDrop,
    warnings: Vec<String>,
    zones: Zones,
}

/// How a client watch is served.
enum Plan {
    /// By a merge of its own legs.
    Own(Legs),
    /// By the collection's shared watch.
    Shared(Subscription),
}

/// Tasks aborted when this is dropped (a watch's leg readers).
pub(super) struct AbortOnDrop(pub(super) Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// The collection path of a named request, e.g. `/api/v1/namespaces/a/pods`.
fn collection_path(rr: &ResourceRequest) -> String {
    let root = if rr.info.group.is_empty() { format!("/api/{}", rr.info.version) } else { format!("/apis/{}/{}", rr.info.group, rr.info.version) };
    match &rr.namespace {
        Some(ns) => format!("{root}/namespaces/{ns}/{}", rr.info.resource),
        None => format!("{root}/{}", rr.info.resource),
    }
}

/// The client side of a MUX watch.
pub(super) struct Out {
    pub(super) tx: tokio::sync::mpsc::Sender<Bytes>,
    pub(super) info: Arc<ResourceInfo>,
    pub(super) as_table: bool,
    include_object: String,
    first_table: bool,
    /// A watcher whose buffer stays full this long is dropped.
    send_timeout: Duration,
    /// Only events of objects of these namespaces are sent.
    pub(super) only: Option<Arc<std::collections::BTreeSet<String>>>,
}

impl Out {
    /// The client side `tx` of a watch of `info` (as Table rows with `as_table`).
    pub(super) fn new(
        tx: tokio::sync::mpsc::Sender<Bytes>,
        info: Arc<ResourceInfo>,
        as_table: bool,
        include_object: String,
        send_timeout: Duration,
        only: Option<Arc<std::collections::BTreeSet<String>>>,
    ) -> Out {
        Out { tx, info, as_table, include_object, first_table: true, send_timeout, only }
    }

    /// Sends one encoded line (`Err`: the client left or does not read).
    pub(super) async fn push(&self, line: Bytes) -> Result<(), ()> {
        push_line(&self.tx, line, self.send_timeout, self.info.resource).await
    }

    /// Sends an event of `obj` (whose `resourceVersion` is `rv`), unless the namespace grant
    /// leaves it out.
    pub(super) async fn event(&mut self, ty: &str, obj: Value, rv: &str) -> Result<(), ()> {
        if let Some(only) = &self.only {
            if !obj.pointer("/metadata/namespace").and_then(Value::as_str).is_some_and(|ns| only.contains(ns)) {
                return Ok(());
            }
        }
        let line = super::object_line(&self.info, ty, obj, rv, self.as_table, &self.include_object, &mut self.first_table);
        self.push(line).await
    }

    /// Sends a bookmark at `rv`.
    pub(super) async fn bookmark(&mut self, rv: &str, initial_end: bool) -> Result<(), ()> {
        self.push(super::bookmark_line(&self.info, rv, initial_end)).await
    }
}

/// One cluster's held-back events: (position, endpoint, arrival) → (type, object).
type Held = BTreeMap<(Pos, usize, u64), (String, Value)>;

/// A merged event ready to go out: its type, the object (its `resourceVersion` set to `rv`),
/// the merged position after it, and its cluster and position there.
pub(super) struct Ready {
    pub(super) ty: String,
    pub(super) obj: Value,
    pub(super) rv: String,
    pub(super) cluster: String,
    pub(super) pos: Pos,
}

/// What an endpoint line did to a merged watch.
pub(super) enum Step {
    /// Go on.
    Go,
    /// The watch ends; with the endpoint's error line to pass on, if it sent one.
    End(Option<Bytes>),
}

/// The per-cluster ordering state of a MUX watch.
pub(super) struct MergeWatch {
    /// Which endpoints answer for which cluster (learned further from the streams).
    zones: Zones,
    /// Per endpoint, per cluster: every event up to this position was received.
    seen: Vec<BTreeMap<String, Pos>>,
    /// Per endpoint, per cluster: no event at or below this member resourceVersion will come.
    complete: Vec<BTreeMap<String, u64>>,
    /// Received, not yet emitted: per cluster, by (position, endpoint, arrival).
    pending: BTreeMap<String, Held>,
    /// The merged position: per cluster, every earlier event was emitted.
    emitted: BTreeMap<String, Pos>,
    arrivals: u64,
    /// Events in `pending`.
    held: usize,
    /// Emitted, not yet taken ([`MergeWatch::take_ready`]).
    ready: Vec<Ready>,
}

impl MergeWatch {
    /// A merge of `zones.endpoints` watches from `from`.
    pub(super) fn new(zones: Zones, from: &GlobalRv) -> MergeWatch {
        let n = zones.endpoints.len();
        MergeWatch { zones, seen: vec![from.0.clone(); n], complete: vec![BTreeMap::new(); n], pending: BTreeMap::new(), emitted: from.0.clone(), arrivals: 0, held: 0, ready: Vec::new() }
    }

    /// The emitted events not taken yet, in order.
    pub(super) fn take_ready(&mut self) -> Vec<Ready> {
        std::mem::take(&mut self.ready)
    }

    /// How many emitted events wait to be taken.
    pub(super) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Whether every endpoint but `i` that answers for cluster `c` delivered it up to `p`.
    fn others_covered(&self, i: usize, c: &str, p: Pos) -> bool {
        (0..self.seen.len()).all(|j| j == i || !self.zones.answers(j, c) || self.covered(j, c, p))
    }

    /// Whether endpoint `j` delivered everything of cluster `c` up to `p`.
    fn covered(&self, j: usize, c: &str, p: Pos) -> bool {
        self.seen[j].get(c).is_some_and(|s| *s >= p) || self.complete[j].get(c).is_some_and(|r| *r >= p.rv)
    }

    /// How far endpoint `j` delivered cluster `c`.
    fn cover(&self, j: usize, c: &str) -> Option<Pos> {
        let s = self.seen[j].get(c).copied();
        let w = self.complete[j].get(c).map(|r| whole(*r));
        s.max(w)
    }

    /// The merged position, encoded.
    pub(super) fn merged(&self) -> String {
        GlobalRv(self.emitted.clone()).encode()
    }

    /// Advances clusters without pending events to what every endpoint has covered.
    pub(super) fn advance(&mut self) -> bool {
        let mut changed = false;
        let clusters: Vec<String> = self.seen.iter().flat_map(|s| s.keys().cloned()).chain(self.complete.iter().flat_map(|s| s.keys().cloned())).collect();
        for c in clusters {
            if self.pending.get(&c).is_some_and(|p| !p.is_empty()) {
                continue;
            }
            let covers: Option<Vec<Pos>> = (0..self.seen.len()).filter(|j| self.zones.answers(*j, &c)).map(|j| self.cover(j, &c)).collect();
            let Some(min) = covers.and_then(|v| v.into_iter().min()) else { continue };
            let e = self.emitted.entry(c).or_default();
            if min > *e {
                *e = min;
                changed = true;
            }
        }
        changed
    }

    /// Moves every held event whose cluster every other endpoint passed to `ready`.
    fn emit_ready(&mut self) {
        loop {
            let mut ready = None;
            for (c, q) in &self.pending {
                let Some((&(p, i, a), _)) = q.iter().next() else { continue };
                if self.others_covered(i, c, p) {
                    ready = Some((c.clone(), (p, i, a)));
                    break;
                }
            }
            let Some((c, k)) = ready else { return };
            let (ty, mut obj) = self.pending.get_mut(&c).and_then(|q| q.remove(&k)).expect("present");
            self.held -= 1;
            self.emitted.insert(c.clone(), k.0);
            let rv = self.merged();
            obj["metadata"]["resourceVersion"] = json!(rv);
            self.ready.push(Ready { ty, obj, rv, cluster: c, pos: k.0 });
        }
    }

    async fn run(&mut self, mut rx: tokio::sync::mpsc::Receiver<(usize, Option<Value>)>, out: &mut Out, bookmarks: bool, interval: Duration, timeout: Duration) -> Result<(), ()> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            tokio::select! {
                m = rx.recv() => {
                    let Some((i, Some(v))) = m else {
                        // an endpoint's stream ended: so does the client's watch
                        return Ok(());
                    };
                    let step = self.on_line(i, v);
                    for r in self.take_ready() {
                        out.event(&r.ty, r.obj, &r.rv).await?;
                    }
                    if let Step::End(error) = step {
                        if let Some(l) = error {
                            let _ = out.push(l).await;
                        }
                        return Ok(());
                    }
                }
                _ = tick.tick(), if bookmarks => {
                    self.advance();
                    let rv = self.merged();
                    out.bookmark(&rv, false).await?;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    if bookmarks {
                        self.advance();
                        let rv = self.merged();
                        out.bookmark(&rv, false).await?;
                    }
                    return Ok(());
                }
                _ = out.tx.closed() => return Err(()),
            }
        }
    }

    /// Takes one watch line of endpoint `i`; what became ready goes to `ready`. `End`: the
    /// watch ends (with the endpoint's error to pass on, when it sent one).
    pub(super) fn on_line(&mut self, i: usize, mut v: Value) -> Step {
        let ty = v.get("type").and_then(Value::as_str).unwrap_or("").to_string();
        let Some(mut obj) = v.get_mut("object").map(Value::take) else { return Step::Go };
        match ty.as_str() {
            "ERROR" => {
                return Step::End(Some(watch::event_line("ERROR", &obj)));
            }
            "BOOKMARK" => {
                let Some(g) = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| GlobalRv::decode(s).ok()) else { return Step::Go };
                for (c, p) in g.0 {
                    self.zones.learn(i, &c);
                    let s = self.seen[i].entry(c.clone()).or_default();
                    *s = (*s).max(p);
                    let r = self.complete[i].entry(c).or_default();
                    *r = (*r).max(p.rv);
                }
            }
            _ => {
                let Some(g) = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| GlobalRv::decode(s).ok()) else { return Step::Go };
                let c = obj.pointer("/metadata/annotations").and_then(|a| a.get(CLUSTER_ANNOTATION)).and_then(Value::as_str).unwrap_or("").to_string();
                let Some(p) = g.0.get(&c).copied() else { return Step::Go };
                for (cl, q) in g.0 {
                    self.zones.learn(i, &cl);
                    let s = self.seen[i].entry(cl).or_default();
                    *s = (*s).max(q);
                }
                if p.rv > 0 {
                    let r = self.complete[i].entry(c.clone()).or_default();
                    *r = (*r).max(p.rv - 1);
                }
                // already emitted (a position the client had)
                if self.emitted.get(&c).is_some_and(|e| p <= *e) {
                    return Step::Go;
                }
                obj["metadata"]["resourceVersion"] = json!("");
                self.arrivals += 1;
                self.pending.entry(c).or_default().insert((p, i, self.arrivals), (ty, obj));
                self.held += 1;
            }
        }
        self.emit_ready();
        self.advance();
        if self.held > MAX_PENDING {
            tracing::warn!(held = self.held, "global view watch over cache endpoints: an endpoint lags too far; ending the watch");
            return Step::End(None);
        }
        Step::Go
    }
}

/// Bytes of merged objects sent to the client as one frame of a streamed LIST.
const OUT_FRAME: usize = 256 * 1024;

/// Streams an unpaged LIST: the head, the merged objects as they come (a page per endpoint
/// in memory at a time), then `]}`. An endpoint failing midway ends the stream without the
/// closing bytes, so the client sees a failed request rather than a short list.
fn stream_list(info: Arc<ResourceInfo>, grv: String, mut merge: Merge) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
    tokio::spawn(async move {
        let mut head = Vec::with_capacity(256);
        head.extend_from_slice(b"{\"kind\":");
        serde_json::to_writer(&mut head, &info.list_kind()).expect("serializable");
        head.extend_from_slice(b",\"apiVersion\":");
        serde_json::to_writer(&mut head, &info.api_version()).expect("serializable");
        head.extend_from_slice(b",\"metadata\":");
        serde_json::to_writer(&mut head, &json!({"resourceVersion": grv})).expect("serializable");
        head.extend_from_slice(b",\"items\":[");
        if tx.send(Ok(Frame::data(Bytes::from(head)))).await.is_err() {
            return;
        }
        let mut n = 0usize;
        let mut out = Vec::new();
        // one endpoint: nothing to merge, each page's items pass through as one block
        let whole = merge.pagers.len() == 1 && merge.pagers[0].whole;
        loop {
            let next = if whole {
                let p = &mut merge.pagers[0];
                p.fill(&merge.http).await.map(|()| p.buf.pop_front())
            } else {
                merge.next().await
            };
            match next {
                Ok(Some((_, v))) => {
                    if !whole && out.capacity() == 0 {
                        // one allocation per frame (an object may carry it past the frame size)
                        out.reserve(OUT_FRAME + 2 * v.len());
                    }
                    if n > 0 {
                        out.push(b',');
                    }
                    n += 1;
                    if whole {
                        // the block as received, after what is pending
                        if (!out.is_empty() && tx.send(Ok(Frame::data(Bytes::from(std::mem::take(&mut out))))).await.is_err()) || tx.send(Ok(Frame::data(v))).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    out.extend_from_slice(&v);
                    if out.len() >= OUT_FRAME && tx.send(Ok(Frame::data(Bytes::from(std::mem::take(&mut out))))).await.is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(kind = %info.resource, error = %e, "streamed LIST over cache endpoints ended early");
                    let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                    return;
                }
            }
        }
        out.extend_from_slice(b"]}");
        let _ = tx.send(Ok(Frame::data(Bytes::from(out)))).await;
    });
    http::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx))))
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(ns: &str, name: &str, cluster: Option<&str>, extra: Value) -> Value {
        let mut meta = json!({"name": name, "managedFields": [{"fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:a]}\"": {}}}}}]});
        if !ns.is_empty() {
            meta["namespace"] = json!(ns);
        }
        if let Some(c) = cluster {
            meta["annotations"] = json!({"x": "{[\"", CLUSTER_ANNOTATION: c, "z": "y"});
        }
        json!({"apiVersion": "v1", "kind": "Pod", "spec": extra, "metadata": meta, "status": {"n": [1, -2.5e3, true, null, "}"]}})
    }

    #[test]
    fn a_page_buffer_is_reused_only_once_nothing_holds_a_slice_of_its_page() {
        let mut buffers = PageBuffers::default();
        let page = |buffers: &mut PageBuffers, len: usize| {
            let mut b = buffers.take(len);
            b.extend_from_slice(&vec![b'x'; len]);
            let p = b.freeze();
            buffers.keep(&p);
            p
        };
        let first = page(&mut buffers, 1000);
        let at = first.as_ptr();
        let item = first.slice(10..20);
        drop(first);
        // an item of the page is still held (not yet written out): a new buffer
        let second = page(&mut buffers, 1000);
        assert_ne!(second.as_ptr(), at);
        drop(second);
        drop(item);
        // the first page's buffer is free again (and so is the second's)
        let third = buffers.take(900);
        assert!(third.is_empty() && third.capacity() >= 900);
        assert_eq!(third.as_ptr(), at);
        // a page larger than every kept buffer gets a new one of its size
        let mut buffers = PageBuffers::default();
        let small = page(&mut buffers, 100);
        let at = small.as_ptr();
        drop(small);
        let big = buffers.take(4096);
        assert!(big.capacity() >= 4096 && big.as_ptr() != at && buffers.pages.is_empty());
        // handles on at most KEPT pages, the oldest let go first
        let mut buffers = PageBuffers::default();
        let held: Vec<Bytes> = (0..PageBuffers::KEPT + 2).map(|_| page(&mut buffers, 64)).collect();
        assert_eq!(buffers.pages.len(), PageBuffers::KEPT);
        assert_eq!(buffers.pages.front().map(|p| p.as_ptr()), Some(held[2].as_ptr()));
    }

    #[test]
    fn the_merge_last_key_is_a_copy_ordered_as_the_keys() {
        let key = |ns: &str, name: &str, c: &str| RawKey::from_key3(&(ns.into(), name.into(), c.into()));
        let mut last = LastKey::default();
        assert!(!last.at_or_after(&key("", "", "")));
        let page = Bytes::from_static(b"ns-1pod-am1");
        let k = RawKey { ns: page.slice(0..4), name: page.slice(4..9), cluster: page.slice(9..11) };
        last.set(&k);
        drop(k);
        // no slice of the page is kept
        assert!(last.parts.as_ref().unwrap().iter().all(|p| !page.as_ptr_range().contains(&p.as_ptr())));
        for (k, seen) in [
            (key("ns-1", "pod-a", "m1"), true),
            (key("ns-1", "pod-a", "m0"), true),
            (key("ns-0", "z", "z"), true),
            (key("ns-1", "pod-a", "m2"), false),
            (key("ns-1", "pod-b", ""), false),
            (key("ns-2", "", ""), false),
        ] {
            assert_eq!(last.at_or_after(&k), seen, "{:?}", k.to_key3());
        }
        last.set(&key("ns-2", "", ""));
        assert!(last.at_or_after(&key("ns-1", "pod-b", "")));
    }

    #[test]
    fn pages_split_into_the_endpoint_items_with_their_keys() {
        let items = vec![item("ns-1", "a", Some("m1"), json!({"s": "q\"uote\\ \u{e9}\n"})), item("", "b\"c", Some("m\u{e9}"), json!([[], {}, [{"a": []}]])), item("ns-2", "d", None, json!(null))];
        for (cont, meta) in [(None, json!({"resourceVersion": "9"})), (Some("tok"), json!({"continue": "tok", "resourceVersion": "9"}))] {
            let page = json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items});
            for text in [serde_json::to_vec(&page).unwrap(), serde_json::to_vec_pretty(&page).unwrap()] {
                let (got_cont, got) = split_page(&Bytes::from(text.clone())).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&text)));
                assert_eq!(got_cont.as_deref(), cont);
                assert_eq!(got.len(), items.len());
                for ((k, raw), want) in got.iter().zip(&items) {
                    assert_eq!(k.to_key3(), key_of(want));
                    assert_eq!(&serde_json::from_slice::<Value>(raw).unwrap(), want);
                }
            }
        }
        // a page's items as one block: the same objects, the same token
        for (cont, meta) in [(None, json!({"resourceVersion": "9"})), (Some("tok"), json!({"continue": "tok"}))] {
            let page = json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items});
            for text in [serde_json::to_vec(&page).unwrap(), serde_json::to_vec_pretty(&page).unwrap()] {
                let (got_cont, block) = page_block(&Bytes::from(text)).unwrap();
                assert_eq!(got_cont.as_deref(), cont);
                let block = block.unwrap();
                let list: Value = serde_json::from_slice(&[b"[", &block[..], b"]"].concat()).unwrap();
                assert_eq!(list, json!(items));
            }
        }
        for (text, block) in [(&br#"{"metadata":{},"items":[]}"#[..], None), (br#" { "items" : [ ] } "#, None), (br#"{"items":[{"a":1}, {}]}"#, Some(&br#"{"a":1}, {}"#[..]))] {
            assert_eq!(page_block(&Bytes::from_static(text)).unwrap().1.as_deref(), block, "{}", String::from_utf8_lossy(text));
        }
        for b in [&br#"{"items":[{}]"#[..], br#"{"items":{}}"#, br#"[{}]"#, br#"{"metadata":{}}"#, br#"{"metadata":{"continue":1},"items":[]}"#, br#"{"items":]}"#] {
            assert!(page_block(&Bytes::from_static(b)).is_err(), "{}", String::from_utf8_lossy(b));
        }
        let empty = split_page(&Bytes::from_static(br#"{"kind":"PodList","items":[],"metadata":{"continue":""}}"#)).unwrap();
        assert!(empty.0.is_none() && empty.1.is_empty());
        let broken =
            [&br#"{"items":[{"metadata":{"name":"a"}}"#[..], br#"{"items":[{"metadata":{"name":1}}]}"#, br#"{"items":[{}]]}"#, br#"{"items":[{}]} x"#, br#"[{}]"#, br#"{"items":[{"a":"\x"}]}"#];
        for b in broken {
            assert!(split_page(&Bytes::from_static(b)).is_err(), "{}", String::from_utf8_lossy(b));
        }
    }

    fn rv(entries: &[(&str, u64, u32)]) -> String {
        GlobalRv(entries.iter().map(|(c, rv, sub)| (c.to_string(), Pos { rv: *rv, sub: *sub })).collect()).encode()
    }

    fn ev(name: &str, cluster: &str, at: &[(&str, u64, u32)]) -> Value {
        json!({"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {"name": name, "resourceVersion": rv(at), "annotations": {CLUSTER_ANNOTATION: cluster}}}})
    }

    fn bookmark(at: &[(&str, u64, u32)]) -> Value {
        json!({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": rv(at)}}})
    }

    /// One endpoint line into `w`, its ready events out through `out` (`Ok(false)`: the watch
    /// ends), as the MUX's own-legs watch does.
    async fn feed(w: &mut MergeWatch, i: usize, v: Value, out: &mut Out) -> Result<bool, ()> {
        let step = w.on_line(i, v);
        for r in w.take_ready() {
            out.event(&r.ty, r.obj, &r.rv).await?;
        }
        Ok(matches!(step, Step::Go))
    }

    fn drain(rx: &mut tokio::sync::mpsc::Receiver<Bytes>) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while let Ok(l) = rx.try_recv() {
            let v: Value = serde_json::from_slice(&l).unwrap();
            out.push((v["object"]["metadata"]["name"].as_str().unwrap().to_string(), v["object"]["metadata"]["resourceVersion"].as_str().unwrap().to_string()));
        }
        out
    }

    /// Under a namespace grant only the granted namespaces' events leave the merge, in the
    /// same order, while every event still moves the merged position.
    #[tokio::test]
    async fn a_namespace_grant_filters_merged_events() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(100);
        let only = Some(Arc::new(std::collections::BTreeSet::from(["team-a".to_string()])));
        let mut out = Out { tx, info: Arc::new(crate::api::registry::pod()), as_table: false, include_object: String::new(), first_table: true, send_timeout: Duration::from_secs(5), only };
        let from = GlobalRv::decode(&rv(&[("a", 10, 0)])).unwrap();
        let mut w = MergeWatch::new(Zones::none(1), &from);
        let in_ns = |name: &str, ns: &str, at: u64| {
            let mut e = ev(name, "a", &[("a", at, 0)]);
            e["object"]["metadata"]["namespace"] = json!(ns);
            e
        };
        feed(&mut w, 0, in_ns("b1", "team-b", 11), &mut out).await.unwrap();
        feed(&mut w, 0, in_ns("a1", "team-a", 12), &mut out).await.unwrap();
        feed(&mut w, 0, in_ns("b2", "team-b", 13), &mut out).await.unwrap();
        feed(&mut w, 0, in_ns("a2", "team-a", 14), &mut out).await.unwrap();
        let got = drain(&mut rx);
        assert_eq!(got, vec![("a1".to_string(), rv(&[("a", 12, 0)])), ("a2".to_string(), rv(&[("a", 14, 0)]))]);
    }

    #[tokio::test]
    async fn events_are_emitted_per_cluster_in_position_order_once_every_endpoint_passed_them() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(100);
        let mut out = Out { tx, info: Arc::new(crate::api::registry::pod()), as_table: false, include_object: String::new(), first_table: true, send_timeout: Duration::from_secs(5), only: None };
        let from = GlobalRv::decode(&rv(&[("a", 10, 0)])).unwrap();
        let mut w = MergeWatch::new(Zones::none(2), &from);
        // endpoint 0 has a's event at 11; endpoint 1 has not passed 11 yet
        assert!(feed(&mut w, 0, ev("p11", "a", &[("a", 11, 0)]), &mut out).await.unwrap());
        assert!(drain(&mut rx).is_empty());
        // endpoint 1's event at 12 shows it passed 11: 11 goes out; 12 waits for endpoint 0
        feed(&mut w, 1, ev("p12", "a", &[("a", 12, 0)]), &mut out).await.unwrap();
        assert_eq!(drain(&mut rx), vec![("p11".to_string(), rv(&[("a", 11, 0)]))]);
        // endpoint 0's complete bookmark at 12 (nothing of its own there)
        feed(&mut w, 0, bookmark(&[("a", 12, 0)]), &mut out).await.unwrap();
        assert_eq!(drain(&mut rx), vec![("p12".to_string(), rv(&[("a", 12, 0)]))]);
        // a relist at 13: endpoint 0 derives 3 events, endpoint 1 two; merged by position
        for s in 1..=3 {
            feed(&mut w, 0, ev(&format!("x{s}"), "a", &[("a", 13, s)]), &mut out).await.unwrap();
        }
        for s in 1..=2 {
            feed(&mut w, 1, ev(&format!("y{s}"), "a", &[("a", 13, s)]), &mut out).await.unwrap();
        }
        let names: Vec<String> = drain(&mut rx).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["x1", "y1", "x2", "y2"], "x3 waits: endpoint 1 may still derive (13, 3)");
        feed(&mut w, 1, bookmark(&[("a", 13, 2)]), &mut out).await.unwrap();
        assert_eq!(drain(&mut rx), vec![("x3".to_string(), rv(&[("a", 13, 3)]))]);
        // an event of another cluster does not wait for cluster a
        feed(&mut w, 1, bookmark(&[("a", 13, 2), ("b", 5, 0)]), &mut out).await.unwrap();
        feed(&mut w, 0, ev("b6", "b", &[("a", 13, 3), ("b", 6, 0)]), &mut out).await.unwrap();
        assert!(drain(&mut rx).is_empty(), "endpoint 1 has not passed b=6");
        feed(&mut w, 1, bookmark(&[("a", 14, 0), ("b", 6, 0)]), &mut out).await.unwrap();
        assert_eq!(drain(&mut rx), vec![("b6".to_string(), rv(&[("a", 13, 3), ("b", 6, 0)]))]);
        // an error from an endpoint is passed on and ends the watch
        assert!(!feed(&mut w, 0, json!({"type": "ERROR", "object": {"kind": "Status", "code": 410}}), &mut out).await.unwrap());
    }

    fn zones(endpoints: &[Option<&str>], clusters: &[(&str, &str)]) -> Zones {
        Zones { endpoints: endpoints.iter().map(|z| z.map(str::to_string)).collect(), clusters: clusters.iter().map(|(c, z)| (c.to_string(), z.to_string())).collect() }
    }

    /// Zone endpoints: an event waits only for the endpoints of its cluster's zone (two
    /// processes of zone z1 holding different shards, one of zone z2), and a cluster first
    /// seen in a stream is placed in that endpoint's zone.
    #[tokio::test]
    async fn zone_endpoints_wait_only_for_their_own_zone() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(100);
        let mut out = Out { tx, info: Arc::new(crate::api::registry::pod()), as_table: false, include_object: String::new(), first_table: true, send_timeout: Duration::from_secs(5), only: None };
        let from = GlobalRv::decode(&rv(&[("a", 10, 0), ("b", 20, 0)])).unwrap();
        let mut w = MergeWatch::new(zones(&[Some("z1"), Some("z1"), Some("z2")], &[("a", "z1"), ("b", "z2")]), &from);
        // b lives in z2, which only endpoint 2 holds: out at once
        feed(&mut w, 2, ev("b21", "b", &[("b", 21, 0)]), &mut out).await.unwrap();
        assert_eq!(drain(&mut rx), vec![("b21".to_string(), rv(&[("a", 10, 0), ("b", 21, 0)]))]);
        // a lives in z1: endpoint 0's event waits for endpoint 1, never for endpoint 2
        feed(&mut w, 0, ev("a11", "a", &[("a", 11, 0)]), &mut out).await.unwrap();
        assert!(drain(&mut rx).is_empty(), "endpoint 1 (zone z1) has not passed a=11");
        feed(&mut w, 1, bookmark(&[("a", 11, 0)]), &mut out).await.unwrap();
        assert_eq!(drain(&mut rx), vec![("a11".to_string(), rv(&[("a", 11, 0), ("b", 21, 0)]))]);
        // a member that joined z2 after the watch started: learned from endpoint 2's event
        feed(&mut w, 2, ev("c1", "c", &[("b", 21, 0), ("c", 1, 0)]), &mut out).await.unwrap();
        assert_eq!(drain(&mut rx), vec![("c1".to_string(), rv(&[("a", 11, 0), ("b", 21, 0), ("c", 1, 0)]))]);
        // bookmarks move the merged position per zone
        feed(&mut w, 2, bookmark(&[("b", 25, 0), ("c", 3, 0)]), &mut out).await.unwrap();
        feed(&mut w, 0, bookmark(&[("a", 12, 0)]), &mut out).await.unwrap();
        feed(&mut w, 1, bookmark(&[("a", 12, 0)]), &mut out).await.unwrap();
        assert_eq!(w.merged(), rv(&[("a", 12, u32::MAX), ("b", 25, u32::MAX), ("c", 3, u32::MAX)]));
    }

    /// The snapshot takes each cluster's minimum over the endpoints that answer for it, and
    /// leaves out (and reports) a cluster one of them does not know yet.
    #[test]
    fn the_snapshot_is_per_cluster_over_the_endpoints_that_answer_it() {
        let g = |at: &[(&str, u64, u32)]| GlobalRv::decode(&rv(at)).unwrap();
        let (e0, e1, e2) = (g(&[("a", 12, 0)]), g(&[("a", 10, 0), ("c", 4, 0)]), g(&[("b", 30, 0)]));
        let z = zones(&[Some("z1"), Some("z1"), Some("z2")], &[("a", "z1"), ("b", "z2"), ("c", "z1")]);
        let (p, complete) = snapshot(&[&e0, &e1, &e2], &z);
        assert_eq!(p, g(&[("a", 10, u32::MAX), ("b", 30, u32::MAX)]));
        assert!(!complete, "endpoint 0 of zone z1 does not know c yet");
        // without zones every endpoint answers every cluster
        let (p, complete) = snapshot(&[&e0, &e1], &Zones::none(2));
        assert_eq!(p, g(&[("a", 10, u32::MAX)]));
        assert!(!complete);
    }
}
