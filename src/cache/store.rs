//! One cached kind: current objects of every member in namespace shards, each shard with a
//! ring buffer of its recent events (mirrors kube-apiserver's cacher/watchCache: a store + a
//! cyclic event buffer, events encoded once and shared by all watchers).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::codec::{Codec, Dictionaries};
use super::rv::{GlobalRv, Pos};
use super::shard::ShardMap;
use super::{CacheError, CLUSTER_ANNOTATION};

mod attrs;
pub mod cool;
mod positions;
pub(crate) mod scan;
use crate::api::registry::ResourceInfo;
use crate::api::selector::{FieldSelector, LabelSelector};
pub use attrs::Attrs;
use positions::{Mark, Positions};
pub use scan::find_quote_or_escape;

/// Annotation carrying the object's resourceVersion in its member cluster.
pub const MEMBER_RV_ANNOTATION: &str = "fedctl.io/member-resource-version";

/// Smallest ring buffer (kube-apiserver's watch cache starts at 100 events).
const RING_MIN: usize = 100;

/// Where an object sits: (namespace or `""`, name, cluster). Objects are ordered by it, so a
/// namespace is a contiguous range and the key is the LIST cursor.
pub type Key = (String, String, Arc<str>);

/// One cached object, stored compactly: the encoded JSON without `metadata.resourceVersion`
/// and with the cluster annotations already spliced in (`apiVersion`, `kind`, `metadata`
/// first), compressed by its kind's [`Codec`] (see [`crate::cache::codec`]), plus where to
/// splice a resourceVersion. `managedFields` are kept as the member sent them.
///
/// An object that arrives through a member's watch is first held as encoded ("hot", see
/// [`Obj::from_watch_raw`]): a stream of modifications does not pay compression per event on
/// the ingest path, and watchers copy the body instead of decompressing it. The process's
/// [`cool`] thread compresses it once it has been hot for [`cool::HOT_FOR`] (or sooner when
/// hot objects hold more than [`cool::HOT_BUDGET`] bytes); a version dropped before then
/// (superseded and evicted from the event ring) is never compressed. Both forms read the same.
#[derive(Debug)]
pub struct Obj {
    /// The member cluster.
    pub cluster: Arc<str>,
    /// The member's resourceVersion of this state.
    pub member_rv: u64,
    /// The codec that made (or will make) the compressed form.
    codec: Arc<Codec>,
    /// Offset just after `"metadata":{` in the uncompressed JSON.
    meta_at: u32,
    /// Length of the uncompressed JSON.
    raw_len: u32,
    /// [`labels_key`] of the labels' bytes in the attributes: equal keys mean equal labels,
    /// so a modification that keeps them is dispatched without reading the previous state.
    labels_key: u64,
    /// The body and attributes, compressed or (hot) as encoded.
    data: RwLock<Stored>,
}

/// The bytes of an [`Obj`].
#[derive(Debug)]
struct Stored {
    /// The JSON: one zstd frame of `codec` when `packed`, else as encoded.
    body: Box<[u8]>,
    /// What selectors test, as compact JSON of the object's shape: `metadata.name`,
    /// `metadata.namespace`, `metadata.labels` and the kind's field-selector paths (mirrors the
    /// labels and fields kube-apiserver's watch cache keeps with each object); compressed
    /// like the body.
    attrs: Box<[u8]>,
    /// Compressed (else hot).
    packed: bool,
}

impl Obj {
    /// Builds the stored form of a member object (everything the member sent kept, managedFields
    /// included, and the cluster annotations added), compressed with the kind's codec from
    /// [`Dictionaries::global`]. Errors: [`CacheError::Member`] when the object has no name or a
    /// non-numeric resourceVersion, or cannot be compressed.
    pub fn from_member(cluster: &Arc<str>, v: Value) -> Result<(Key, Obj), CacheError> {
        let Value::Object(mut top) = v else { return Err(CacheError::Member("object is not a JSON object".into())) };
        let mut meta = match top.remove("metadata") {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        if name.is_empty() {
            return Err(CacheError::Member("object without metadata.name".into()));
        }
        let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
        let rv_s = match meta.remove("resourceVersion") {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let member_rv: u64 = rv_s.parse().map_err(|_| CacheError::Member(format!("non-numeric resourceVersion {rv_s:?}")))?;
        let ann = meta.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
        if !ann.is_object() {
            *ann = Value::Object(Map::new());
        }
        let ann = ann.as_object_mut().expect("object");
        ann.insert(CLUSTER_ANNOTATION.into(), Value::String(cluster.to_string()));
        ann.insert(MEMBER_RV_ANNOTATION.into(), Value::String(rv_s));
        let api_version = top.remove("apiVersion").unwrap_or(Value::String(String::new()));
        let kind = top.remove("kind").unwrap_or(Value::String(String::new()));
        let attrs = attrs_of(api_version.as_str().unwrap_or(""), kind.as_str().unwrap_or(""), &meta, &top);
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(b"{\"apiVersion\":");
        serde_json::to_writer(&mut out, &api_version).expect("serializable");
        out.extend_from_slice(b",\"kind\":");
        serde_json::to_writer(&mut out, &kind).expect("serializable");
        out.extend_from_slice(b",\"metadata\":{");
        let meta_at = out.len();
        let m = serde_json::to_vec(&Value::Object(meta)).expect("serializable");
        out.extend_from_slice(&m[1..]);
        for (k, v) in top {
            out.push(b',');
            serde_json::to_writer(&mut out, &k).expect("serializable");
            out.push(b':');
            serde_json::to_writer(&mut out, &v).expect("serializable");
        }
        out.push(b'}');
        let obj = Obj::pack(cluster, member_rv, api_version.as_str().unwrap_or(""), kind.as_str().unwrap_or(""), &out, meta_at, attrs.as_bytes()).map_err(|e| e.within(&ns, &name))?;
        Ok(((ns, name, cluster.clone()), obj))
    }

    /// [`Obj::from_member`] of a member object given as its JSON bytes (an item of a LIST page,
    /// the object of a watch event), with `apiVersion` and `kind` set to the given ones (members
    /// omit them in LIST items). The same object results, without decoding the member's JSON
    /// into a tree: the bytes are checked and scanned once for what the cache needs (metadata
    /// name, namespace, resourceVersion, labels, annotations, the kind's field-selector paths)
    /// and copied as they are around the spliced cluster annotations. Objects of an unusual
    /// shape (whitespace between tokens, escaped keys where the cache looks, the cache's own
    /// annotations already present, duplicate metadata keys) are decoded as by
    /// [`Obj::from_member`]. Errors: as [`Obj::from_member`], and [`CacheError::Member`] when
    /// `raw` is not JSON.
    pub fn from_member_raw(cluster: &Arc<str>, api_version: &str, kind: &str, raw: &[u8]) -> Result<(Key, Obj), CacheError> {
        Obj::from_raw(cluster, api_version, kind, raw, false)
    }

    /// [`Obj::from_member_raw`] for an object of a member's watch stream: the object is kept
    /// hot (as encoded) and registered with the [`cool`] thread, which compresses it later;
    /// while hot objects hold more than [`cool::HOT_LIMIT`] bytes (compression falls behind)
    /// it is compressed here. The object must be stored behind an `Arc` handed to
    /// [`cool::register`] (as [`KindStore::apply`] does). Errors: as [`Obj::from_member_raw`].
    pub fn from_watch_raw(cluster: &Arc<str>, api_version: &str, kind: &str, raw: &[u8]) -> Result<(Key, Obj), CacheError> {
        Obj::from_raw(cluster, api_version, kind, raw, !cool::over_limit())
    }

    fn from_raw(cluster: &Arc<str>, api_version: &str, kind: &str, raw: &[u8], hot: bool) -> Result<(Key, Obj), CacheError> {
        let mut out = Vec::with_capacity(raw.len() + 160);
        let mut attrs = Vec::with_capacity(512);
        if let Ok(Some(p)) = raw_member(cluster, api_version, kind, raw, &mut out, &mut attrs) {
            let obj = Obj::build(cluster, p.member_rv, api_version, kind, out, p.meta_at, attrs, p.labels_key, hot).map_err(|e| e.within(&p.namespace, &p.name))?;
            return Ok(((p.namespace, p.name, cluster.clone()), obj));
        }
        let mut v: Value = serde_json::from_slice(raw).map_err(|e| CacheError::Member(format!("object: {e}")))?;
        if let Value::Object(m) = &mut v {
            m.insert("apiVersion".into(), Value::String(api_version.to_string()));
            m.insert("kind".into(), Value::String(kind.to_string()));
        }
        Obj::from_member(cluster, v)
    }

    /// Compresses an encoded object (`body`, `"metadata":{` ending at `meta_at`) and its
    /// selector attributes with the kind's codec.
    fn pack(cluster: &Arc<str>, member_rv: u64, api_version: &str, kind: &str, body: &[u8], meta_at: usize, attrs: &[u8]) -> Result<Obj, PackError> {
        // the labels' bytes as they are in the attributes (no key: never taken as unchanged)
        let key = raw_labels(attrs).map_or(0, |(_, range)| labels_key(&attrs[range]));
        Obj::build(cluster, member_rv, api_version, kind, body.to_vec(), meta_at, attrs.to_vec(), key, false)
    }

    /// The object over `body` and `attrs`: compressed with the kind's codec, or (`hot`) kept
    /// as they are.
    #[allow(clippy::too_many_arguments)]
    fn build(cluster: &Arc<str>, member_rv: u64, api_version: &str, kind: &str, body: Vec<u8>, meta_at: usize, attrs: Vec<u8>, labels_key: u64, hot: bool) -> Result<Obj, PackError> {
        let raw_len = u32::try_from(body.len()).map_err(|_| PackError::TooBig)?;
        let meta_at = u32::try_from(meta_at).map_err(|_| PackError::TooBig)?;
        let mut kind_key = String::with_capacity(api_version.len() + kind.len() + 1);
        kind_key.push_str(api_version);
        kind_key.push('/');
        kind_key.push_str(kind);
        let codec = Dictionaries::global().codec_for(&kind_key, &body);
        let data = if hot {
            Stored { body: body.into_boxed_slice(), attrs: attrs.into_boxed_slice(), packed: false }
        } else {
            let packed = codec.compress(&body).map_err(|e| PackError::Codec(e.to_string()))?;
            let attrs = codec.compress(&attrs).map_err(|e| PackError::Codec(e.to_string()))?;
            Stored { body: packed, attrs, packed: true }
        };
        Ok(Obj { cluster: cluster.clone(), member_rv, codec, meta_at, raw_len, labels_key, data: RwLock::new(data) })
    }

    fn data(&self) -> std::sync::RwLockReadGuard<'_, Stored> {
        self.data.read().unwrap_or_else(|e| e.into_inner())
    }

    /// True while the object is held as encoded (not yet compressed by the [`cool`] thread).
    pub fn is_hot(&self) -> bool {
        !self.data().packed
    }

    /// Compresses a hot object in place (the [`cool`] thread); a no-op once compressed.
    /// Readers meanwhile read the hot form.
    pub fn cool(&self) {
        let (body, attrs) = {
            let d = self.data();
            if d.packed {
                return;
            }
            match (self.codec.compress(&d.body), self.codec.compress(&d.attrs)) {
                (Ok(b), Ok(a)) => (b, a),
                // frames are made in this process: failing here is a bug; the object stays hot
                (Err(e), _) | (_, Err(e)) => {
                    tracing::error!(cluster = %self.cluster, error = %e, "cached object not compressed");
                    return;
                }
            }
        };
        *self.data.write().unwrap_or_else(|e| e.into_inner()) = Stored { body, attrs, packed: true };
    }

    /// Length of the object's JSON without a resourceVersion (bytes).
    pub fn raw_len(&self) -> usize {
        self.raw_len as usize
    }

    /// Bytes held for the object's body (compressed, or as encoded while hot).
    pub fn stored_len(&self) -> usize {
        self.data().body.len()
    }

    /// Bytes held for the object's selector attributes (compressed, or as encoded while hot).
    pub fn attrs_len(&self) -> usize {
        self.data().attrs.len()
    }

    /// Appends the object with `metadata.resourceVersion` = `rv` to `out` (decompressing it,
    /// or copying it while hot). The field goes first in `metadata`; the object is written
    /// once, right behind room for the field, and only its head (`{"apiVersion":…,"metadata":{`)
    /// is moved.
    pub fn write_with_rv(&self, rv: &str, out: &mut Vec<u8>) {
        let start = out.len();
        let mut field = Vec::with_capacity(rv.len() + 24);
        field.extend_from_slice(b"\"resourceVersion\":");
        serde_json::to_writer(&mut field, rv).expect("serializable");
        field.push(b',');
        let gap = field.len();
        out.extend_from_slice(&field);
        {
            let d = self.data();
            if !d.packed {
                out.extend_from_slice(&d.body);
            } else if let Err(e) = self.codec.decompress_into(&d.body, out) {
                // frames are made in this process: failing here is a bug, not bad input
                tracing::error!(cluster = %self.cluster, error = %e, "cached object unreadable");
                out.truncate(start);
                out.extend_from_slice(b"{}");
                return;
            }
        }
        let at = (self.meta_at as usize).min(out.len() - start - gap);
        out.copy_within(start + gap..start + gap + at, start);
        if out.get(start + gap + at) == Some(&b'}') {
            // empty metadata: the field without its comma
            out[start + at..start + at + gap - 1].copy_from_slice(&field[..gap - 1]);
            out.remove(start + at + gap - 1);
        } else {
            out[start + at..start + at + gap].copy_from_slice(&field);
        }
    }

    /// Calls `f` with the selector attributes' JSON (decompressed when needed); `None` when
    /// they cannot be read (a bug: frames are made in this process).
    fn with_attrs<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let d = self.data();
        if !d.packed {
            return Some(f(&d.attrs));
        }
        let raw = self.codec.decompress(&d.attrs).ok()?;
        drop(d);
        Some(f(&raw))
    }

    /// The object decoded, with `metadata.resourceVersion` = `rv` (selectors, Table output).
    pub fn decode(&self, rv: &str) -> Value {
        let mut out = Vec::with_capacity(self.raw_len() + 64);
        self.write_with_rv(rv, &mut out);
        serde_json::from_slice(&out).unwrap_or(Value::Null)
    }
}

/// Watch event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// A new object.
    Added,
    /// A changed object.
    Modified,
    /// A removed object (the event carries its last state).
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One event of the merged stream, encoded once.
#[derive(Debug)]
pub struct Event {
    /// Order of recording within the kind (across shards and clusters).
    pub seq: u64,
    /// The cluster it came from.
    pub cluster: Arc<str>,
    /// Its position in that cluster's stream.
    pub pos: Pos,
    /// Type.
    pub ty: EventType,
    /// Namespace (`""` when cluster-scoped) and name.
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// The object's state (for DELETED: its last state).
    pub obj: Arc<Obj>,
    /// The previous state for MODIFIED (selector transitions) and DELETED (the cached state
    /// the deletion removed; LIST snapshots roll back to it).
    pub prev: Option<Arc<Obj>>,
    /// The global resourceVersion after this event, to be derived when it is sent (see
    /// [`Event::rv`]; recording it costs nothing per member).
    rv_at: Mark,
    /// That resourceVersion, once [`Event::rv`] derived it.
    rv: OnceLock<Box<str>>,
    /// The watch line `{"type":…,"object":…}\n` with the event's resourceVersion in the
    /// object: encoded by the first watcher that sends it, then shared (see [`Event::line`]).
    line: OnceLock<Bytes>,
    /// What selectors look at, of `obj`: read once, on first use, and shared by all watchers
    /// (see [`Event::attrs`]).
    attrs: OnceLock<Attrs>,
    /// The same of `prev` for MODIFIED (see [`Event::prev_attrs`]).
    prev_attrs: OnceLock<Option<Attrs>>,
    /// When it was recorded (window accounting).
    pub at: Instant,
}

impl Event {
    /// The global resourceVersion after this event: every cluster's position once it was
    /// recorded, in the wire form of [`crate::cache::rv`] (a watch resumed from it gets exactly
    /// the later events). Derived on first use (O(clusters)) and kept with the event.
    pub fn rv(&self) -> &str {
        self.rv.get_or_init(|| self.rv_at.encode().into())
    }

    /// The encoded watch line (encoded once, on first use, and shared by all watchers).
    pub fn line(&self) -> &Bytes {
        self.line.get_or_init(|| {
            // the line holds the resourceVersion: it is kept only there unless asked for
            let derived;
            let rv = match self.rv.get() {
                Some(rv) => &**rv,
                None => {
                    derived = self.rv_at.encode();
                    derived.as_str()
                }
            };
            let mut line = Vec::with_capacity(self.obj.raw_len() + rv.len() + 64);
            line.extend_from_slice(b"{\"type\":\"");
            line.extend_from_slice(self.ty.as_str().as_bytes());
            line.extend_from_slice(b"\",\"object\":");
            self.obj.write_with_rv(rv, &mut line);
            line.extend_from_slice(b"}\n");
            Bytes::from(line)
        })
    }
}

impl Event {
    /// The labels and fields selectors test, of the new state: read once per event, however
    /// many watchers filter it (mirrors the attributes kube-apiserver's cacher keeps per event
    /// for all watchers).
    pub fn attrs(&self) -> &Attrs {
        self.attrs.get_or_init(|| self.obj.attrs())
    }

    /// The same of the previous state, for MODIFIED (`None` for other types).
    pub fn prev_attrs(&self) -> Option<&Attrs> {
        self.prev_attrs
            .get_or_init(|| match (self.ty, &self.prev) {
                (EventType::Modified, Some(p)) => Some(p.attrs()),
                _ => None,
            })
            .as_ref()
    }

    /// Whether the selectors match the previous state (MODIFIED only; else false) and the new
    /// state: `(before, now)`, which give a watcher's event type (kube-apiserver's cacheWatcher:
    /// both → MODIFIED, now only → ADDED, before only → DELETED). A label selector alone on a
    /// modification that kept the labels is not tested twice (the previous state is not read).
    pub fn selects(&self, labels: &LabelSelector, fields: &FieldSelector) -> (bool, bool) {
        let now = self.attrs().matches(labels, fields);
        let before = match (self.ty, &self.prev) {
            (EventType::Modified, Some(p)) if fields.is_empty() && p.labels_key == self.obj.labels_key && p.labels_key != 0 => now,
            (EventType::Modified, Some(_)) => self.prev_attrs().is_some_and(|a| a.matches(labels, fields)),
            _ => false,
        };
        (before, now)
    }
}

impl Obj {
    /// `metadata.name`, `metadata.namespace`, `metadata.labels` and the kind's field-selector
    /// paths of the object, as a JSON object of the same shape (enough for
    /// [`crate::api::selector`] to match).
    pub fn selectable(&self) -> Value {
        self.with_attrs(|b| serde_json::from_slice(b).ok()).flatten().unwrap_or(Value::Null)
    }

    /// The same, read into [`Attrs`] for selectors to test (no labels or fields when they cannot
    /// be read, as [`Obj::selectable`] gives `null` then).
    pub fn attrs(&self) -> Attrs {
        self.with_attrs(|b| Attrs::parse(b).ok()).flatten().unwrap_or_default()
    }
}

/// The selector attributes of an object (see [`Obj::selectable`]), from its parts.
fn attrs_of(api_version: &str, kind: &str, meta: &Map<String, Value>, top: &Map<String, Value>) -> Box<str> {
    static KINDS: OnceLock<crate::api::registry::Registry> = OnceLock::new();
    let fields = KINDS.get_or_init(crate::api::registry::Registry::member).by_kind(api_version, kind).map(|i| i.field_selectors).unwrap_or(&[]);
    let mut m = Map::new();
    for k in ["name", "namespace", "labels"] {
        if let Some(v) = meta.get(k) {
            m.insert(k.to_string(), v.clone());
        }
    }
    let mut out = Map::new();
    out.insert("metadata".into(), Value::Object(m));
    for path in fields.iter().filter(|p| !p.starts_with("metadata.")) {
        let mut parts = path.split('.');
        let Some(first) = parts.next() else { continue };
        let mut cur = top.get(first);
        for part in parts.clone() {
            cur = cur.and_then(|c| c.get(part));
        }
        let Some(v) = cur else { continue };
        let mut at = out.entry(first.to_string()).or_insert_with(|| Value::Object(Map::new()));
        let mut rest = parts.peekable();
        if rest.peek().is_none() {
            *at = v.clone();
            continue;
        }
        while let Some(part) = rest.next() {
            let Value::Object(o) = at else { break };
            if rest.peek().is_none() {
                o.insert(part.to_string(), v.clone());
                break;
            }
            at = o.entry(part.to_string()).or_insert_with(|| Value::Object(Map::new()));
        }
    }
    serde_json::to_string(&Value::Object(out)).expect("serializable").into_boxed_str()
}

/// The byte ranges of the items of a LIST response body (`{"kind":…,"metadata":{…},"items":[…]}`)
/// and its metadata decoded, without decoding the items; `None` when `body` is not one JSON
/// object (decode it instead).
pub fn list_page_items(body: &[u8]) -> Option<(Vec<std::ops::Range<usize>>, Value)> {
    let mut s = scan::Scan::new(body).ok()?;
    let mut items = Vec::new();
    let mut meta = Value::Null;
    if s.peek() != Some(b'{') {
        return None;
    }
    s.object(|s, k| {
        let at = s.pos;
        match s.raw(k) {
            b"items" if !k.escaped && s.peek() == Some(b'[') => {
                items.clear();
                s.array_items(|s| {
                    let a = s.pos;
                    s.value()?;
                    items.push(a..s.pos);
                    Ok(())
                })
            }
            b"metadata" if !k.escaped => {
                s.value()?;
                meta = serde_json::from_slice(&body[at..s.pos]).map_err(|_| scan::Bad)?;
                Ok(())
            }
            _ => s.value(),
        }
    })
    .ok()?;
    s.end().ok()?;
    Some((items, meta))
}

/// The labels in selector attributes (`{"metadata":{…,"labels":{…}},…}`) as (key, value)
/// strings; `None` when a key or value is escaped or a value is not a string.
fn raw_labels(attrs: &[u8]) -> Option<(Vec<(&str, &str)>, std::ops::Range<usize>)> {
    match labels_as_written(attrs) {
        Some(found) => found,
        None => raw_labels_scanned(attrs),
    }
}

/// [`raw_labels`] by scanning the whole attributes, whatever their layout.
fn raw_labels_scanned(attrs: &[u8]) -> Option<(Vec<(&str, &str)>, std::ops::Range<usize>)> {
    let mut s = scan::Scan::new(attrs).ok()?;
    let mut out = Vec::new();
    let mut plain = true;
    let mut range = 0..0;
    s.object(|s, k| {
        if s.raw(k) != b"metadata" || s.peek() != Some(b'{') {
            return s.value();
        }
        s.object(|s, k| {
            if s.raw(k) != b"labels" || s.peek() != Some(b'{') {
                return s.value();
            }
            let at = s.pos;
            label_pairs(s, &mut out, &mut plain)?;
            range = at..s.pos;
            Ok(())
        })
    })
    .ok()?;
    plain.then_some((out, range))
}

/// [`raw_labels`] of attributes laid out as [`raw_member`] writes them (`{"metadata":{"name":…,
/// "namespace":…,"labels":{…}`, names without escapes), reading only the labels; `None` for
/// another layout (the whole attributes are scanned then).
fn labels_as_written(attrs: &[u8]) -> Option<Option<(Vec<(&str, &str)>, std::ops::Range<usize>)>> {
    const HEAD: &[u8] = b"{\"metadata\":{\"name\":\"";
    // the end of the plain string whose contents start at `at`
    let plain = |at: usize| -> Option<usize> {
        let end = at + attrs.get(at..)?.iter().position(|c| *c == b'"' || *c == b'\\')?;
        (attrs[end] == b'"').then_some(end + 1)
    };
    let mut at = plain(attrs.strip_prefix(HEAD).map(|_| HEAD.len())?)?;
    if let Some(rest) = attrs[at..].strip_prefix(b",\"namespace\":\"") {
        at = plain(attrs.len() - rest.len())?;
    }
    let Some(rest) = attrs[at..].strip_prefix(b",\"labels\":") else {
        // no labels
        return (attrs.get(at) == Some(&b'}')).then_some(Some((Vec::new(), at..at)));
    };
    let start = attrs.len() - rest.len();
    let mut s = scan::Scan::new(rest).ok()?;
    if s.peek() != Some(b'{') {
        return None;
    }
    let mut out = Vec::new();
    let mut plain_pairs = true;
    let parsed = label_pairs(&mut s, &mut out, &mut plain_pairs);
    Some((parsed.is_ok() && plain_pairs).then_some((out, start..start + s.pos)))
}

/// Consumes a labels object, pushing its (key, value) strings to `out`; clears `plain` when a
/// key or value is escaped or a value is not a string.
fn label_pairs<'a>(s: &mut scan::Scan<'a>, out: &mut Vec<(&'a str, &'a str)>, plain: &mut bool) -> Result<(), scan::Bad> {
    s.object(|s, k| {
        if s.peek() != Some(b'"') {
            *plain = false;
            return s.value();
        }
        let v = s.string()?;
        *plain &= !k.escaped && !v.escaped;
        let text = |t: scan::Str| std::str::from_utf8(s.raw(t)).unwrap_or("");
        out.push((text(k), text(v)));
        Ok(())
    })
}

/// A key of an object's labels as the bytes of their JSON object (empty when there are
/// none), hashed with a per-process random key (so a member cannot make two label sets
/// collide); never 0. Equal keys are taken as equal labels.
fn labels_key(labels: &[u8]) -> u64 {
    static STATE: OnceLock<std::hash::RandomState> = OnceLock::new();
    std::hash::BuildHasher::hash_one(STATE.get_or_init(std::hash::RandomState::new), labels) | 1
}

/// Why [`Obj::pack`] failed (turned into a [`CacheError`] naming the object).
enum PackError {
    TooBig,
    Codec(String),
}

impl PackError {
    fn within(self, ns: &str, name: &str) -> CacheError {
        match self {
            PackError::TooBig => CacheError::Member(format!("object {ns}/{name} larger than 4 GiB")),
            PackError::Codec(e) => CacheError::Member(e),
        }
    }
}

/// What [`raw_member`] found besides the bytes it wrote.
struct RawMember {
    namespace: String,
    name: String,
    member_rv: u64,
    meta_at: usize,
    /// [`labels_key`] of the labels' bytes.
    labels_key: u64,
}

/// A string token's value: its raw bytes when unescaped, else decoded.
fn str_value(s: &scan::Scan<'_>, t: scan::Str) -> Result<String, scan::Bad> {
    let raw = s.raw(t);
    if !t.escaped {
        // the scanner checked UTF-8 and the absence of control characters
        return std::str::from_utf8(raw).map(str::to_string).map_err(|_| scan::Bad);
    }
    serde_json::from_slice(&s.bytes()[t.start - 1..t.end + 1]).map_err(|_| scan::Bad)
}

/// Writes `s` as a JSON string.
fn json_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("a string serializes");
}

/// The fast path of [`Obj::from_member_raw`]: scans `raw` once and writes the stored form to
/// `out` and the selector attributes to `attrs` (both as [`Obj::from_member`] makes them, apart
/// from the order of keys). `Ok(None)`: an unusual shape, to be decoded instead; `Err`: not
/// JSON or not an object of the expected shape (decoding reports the precise error).
fn raw_member(cluster: &str, api_version: &str, kind: &str, raw: &[u8], out: &mut Vec<u8>, attrs: &mut Vec<u8>) -> Result<Option<RawMember>, scan::Bad> {
    thread_local! {
        static SEEN: std::cell::RefCell<scan::Seen> = std::cell::RefCell::new(scan::Seen::default());
    }
    SEEN.with_borrow_mut(|seen| raw_member_seen(seen, cluster, api_version, kind, raw, out, attrs))
}

/// [`raw_member`] with the thread's recently checked values: `metadata.managedFields[*].fieldsV1`,
/// which repeats across the objects one controller made, is checked once (see [`scan::Seen`]).
fn raw_member_seen(seen: &mut scan::Seen, cluster: &str, api_version: &str, kind: &str, raw: &[u8], out: &mut Vec<u8>, attrs: &mut Vec<u8>) -> Result<Option<RawMember>, scan::Bad> {
    use scan::{Bad, Scan, Str};
    static KINDS: OnceLock<crate::api::registry::Registry> = OnceLock::new();
    let paths = KINDS.get_or_init(crate::api::registry::Registry::member).by_kind(api_version, kind).map(|i| i.field_selectors).unwrap_or(&[]);
    // the kind's field-selector paths outside metadata, as (first, second) segments
    let mut sel: Vec<(&str, Option<&str>)> = Vec::with_capacity(paths.len());
    for p in paths.iter().filter(|p| !p.starts_with("metadata.")) {
        let mut it = p.split('.');
        let (a, b) = (it.next().unwrap_or(""), it.next());
        if it.next().is_some() {
            return Ok(None);
        }
        sel.push((a, b));
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Meta {
        Other,
        Rv,
        Annotations,
    }
    let mut unusual = false;
    let mut meta_seen = false;
    let mut name: Option<Str> = None;
    let mut namespace: Option<Str> = None;
    let mut rv: Option<Str> = None;
    let mut labels: Option<(usize, usize)> = None;
    let mut ann: Option<(usize, usize)> = None;
    // metadata members ("key":value ranges) and the other top-level members, in order
    let mut meta_fields: Vec<(usize, usize, Meta)> = Vec::with_capacity(16);
    let mut top: Vec<(Str, usize, usize)> = Vec::with_capacity(8);
    // selector values found: (index in `sel`, value range); the last one of a path wins
    let mut found: Vec<(usize, usize, usize)> = Vec::with_capacity(sel.len());
    let mut s = Scan::new(raw)?;
    if s.peek() != Some(b'{') {
        return Err(Bad);
    }
    s.object(|s, k| {
        if k.escaped {
            unusual = true;
            return s.value();
        }
        let key = s.raw(k);
        let at = s.pos;
        match key {
            b"apiVersion" | b"kind" => s.value(),
            b"metadata" => {
                if meta_seen || s.peek() != Some(b'{') {
                    unusual = true;
                    return s.value();
                }
                meta_seen = true;
                s.object(|s, k| {
                    if k.escaped {
                        unusual = true;
                        return s.value();
                    }
                    let key = s.raw(k);
                    let at = s.pos;
                    let mut what = Meta::Other;
                    let slot = match key {
                        b"name" => Some(&mut name),
                        b"namespace" => Some(&mut namespace),
                        b"resourceVersion" => {
                            what = Meta::Rv;
                            Some(&mut rv)
                        }
                        _ => None,
                    };
                    if let Some(slot) = slot {
                        if slot.is_some() || s.peek() != Some(b'"') {
                            unusual = true;
                            return s.value();
                        }
                        *slot = Some(s.string()?);
                    } else if key == b"labels" {
                        if labels.is_some() {
                            unusual = true;
                        }
                        s.value()?;
                        labels = Some((at, s.pos));
                    } else if key == b"annotations" {
                        if ann.is_some() || s.peek() != Some(b'{') {
                            unusual = true;
                            return s.value();
                        }
                        what = Meta::Annotations;
                        s.object(|s, k| {
                            let key = s.raw(k);
                            if k.escaped || key == CLUSTER_ANNOTATION.as_bytes() || key == MEMBER_RV_ANNOTATION.as_bytes() {
                                unusual = true;
                            }
                            s.value()
                        })?;
                        ann = Some((at, s.pos));
                    } else if key == b"managedFields" && s.peek() == Some(b'[') {
                        s.array_items(|s| {
                            if s.peek() != Some(b'{') {
                                return s.value();
                            }
                            s.object(|s, k| if !k.escaped && s.raw(k) == b"fieldsV1" { s.value_seen(seen) } else { s.value() })
                        })?;
                    } else {
                        s.value()?;
                    }
                    meta_fields.push((k.start - 1, s.pos, what));
                    Ok(())
                })
            }
            _ => {
                if top.iter().any(|(t, _, _)| s.raw(*t) == key) {
                    unusual = true;
                }
                let first = std::str::from_utf8(key).unwrap_or("");
                let deeper = sel.iter().any(|(a, b)| *a == first && b.is_some());
                if deeper && s.peek() == Some(b'{') {
                    s.object(|s, k| {
                        if k.escaped {
                            unusual = true;
                            return s.value();
                        }
                        let key = s.raw(k);
                        let at = s.pos;
                        s.value()?;
                        for (i, (a, b)) in sel.iter().enumerate() {
                            if *a == first && b.is_some_and(|b| b.as_bytes() == key) {
                                found.push((i, at, s.pos));
                            }
                        }
                        Ok(())
                    })?;
                } else {
                    s.value()?;
                }
                for (i, (a, b)) in sel.iter().enumerate() {
                    if *a == first && b.is_none() {
                        found.push((i, at, s.pos));
                    }
                }
                top.push((k, k.start - 1, s.pos));
                Ok(())
            }
        }
    })?;
    s.end()?;
    if unusual || s.spaced() {
        return Ok(None);
    }
    let (Some(name_t), Some(rv_t)) = (name, rv) else { return Ok(None) };
    let name_s = str_value(&s, name_t)?;
    if name_s.is_empty() {
        return Ok(None);
    }
    let ns_s = match namespace {
        Some(t) => str_value(&s, t)?,
        None => String::new(),
    };
    let rv_s = str_value(&s, rv_t)?;
    let Ok(member_rv) = rv_s.parse::<u64>() else { return Ok(None) };

    // the stored form: apiVersion, kind, metadata (without resourceVersion, with the cluster
    // annotations), then the other members as the member sent them
    out.extend_from_slice(b"{\"apiVersion\":");
    json_str(out, api_version);
    out.extend_from_slice(b",\"kind\":");
    json_str(out, kind);
    out.extend_from_slice(b",\"metadata\":{");
    let meta_at = out.len();
    let ours = |out: &mut Vec<u8>| {
        out.push(b'"');
        out.extend_from_slice(CLUSTER_ANNOTATION.as_bytes());
        out.extend_from_slice(b"\":");
        json_str(out, cluster);
        out.extend_from_slice(b",\"");
        out.extend_from_slice(MEMBER_RV_ANNOTATION.as_bytes());
        out.extend_from_slice(b"\":");
        json_str(out, &rv_s);
        out.push(b'}');
    };
    let mut first = true;
    for &(a, b, what) in &meta_fields {
        if what == Meta::Rv {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        if what == Meta::Annotations {
            // `"annotations":{…` without its closing brace, then ours
            out.extend_from_slice(&raw[a..b - 1]);
            if raw[b - 2] != b'{' {
                out.push(b',');
            }
            ours(out);
        } else {
            out.extend_from_slice(&raw[a..b]);
        }
    }
    if ann.is_none() {
        if !first {
            out.push(b',');
        }
        out.extend_from_slice(b"\"annotations\":{");
        ours(out);
    }
    out.push(b'}');
    for &(_, a, b) in &top {
        out.push(b',');
        out.extend_from_slice(&raw[a..b]);
    }
    out.push(b'}');

    // the selector attributes: metadata name, namespace, labels, then the selectable fields
    // grouped by their first segment (in the order of the kind's paths)
    attrs.extend_from_slice(b"{\"metadata\":{\"name\":");
    attrs.extend_from_slice(&raw[name_t.start - 1..name_t.end + 1]);
    if let Some(t) = namespace {
        attrs.extend_from_slice(b",\"namespace\":");
        attrs.extend_from_slice(&raw[t.start - 1..t.end + 1]);
    }
    if let Some((a, b)) = labels {
        attrs.extend_from_slice(b",\"labels\":");
        attrs.extend_from_slice(&raw[a..b]);
    }
    attrs.push(b'}');
    let value_of = |i: usize| found.iter().rev().find(|f| f.0 == i).map(|f| &raw[f.1..f.2]);
    let mut done: Vec<&str> = Vec::with_capacity(sel.len());
    for (i, (a, b)) in sel.iter().enumerate() {
        if done.contains(a) {
            continue;
        }
        done.push(a);
        if b.is_none() {
            if sel.iter().any(|(x, y)| x == a && y.is_some()) {
                // a path and a path below it: rare enough to decode
                return Ok(None);
            }
            if let Some(v) = value_of(i) {
                attrs.extend_from_slice(b",\"");
                attrs.extend_from_slice(a.as_bytes());
                attrs.extend_from_slice(b"\":");
                attrs.extend_from_slice(v);
            }
            continue;
        }
        let mut opened = false;
        for (j, (x, y)) in sel.iter().enumerate().skip(i) {
            let (Some(y), true) = (y, x == a) else { continue };
            let Some(v) = value_of(j) else { continue };
            if opened {
                attrs.push(b',');
            } else {
                attrs.extend_from_slice(b",\"");
                attrs.extend_from_slice(a.as_bytes());
                attrs.extend_from_slice(b"\":{");
                opened = true;
            }
            attrs.push(b'"');
            attrs.extend_from_slice(y.as_bytes());
            attrs.extend_from_slice(b"\":");
            attrs.extend_from_slice(v);
        }
        if opened {
            attrs.push(b'}');
        }
    }
    attrs.push(b'}');
    let labels_key = labels_key(labels.map_or(&[][..], |(a, b)| &raw[a..b]));
    Ok(Some(RawMember { namespace: ns_s, name: name_s, member_rv, meta_at, labels_key }))
}

/// Which events a watcher is handed (the dispatch index); the watcher still applies its
/// full selectors, this only spares it the events that cannot match.
#[derive(Clone, Debug, Default)]
pub struct WatchFilter {
    /// Only objects of this namespace.
    pub namespace: Option<String>,
    /// Only objects that have (now or before a MODIFIED) this label with this value.
    pub label: Option<(String, String)>,
}

/// Per-watcher queue depth; a watcher that falls further behind is ended (as the cacher ends
/// blocked watchers) and resumes from its last resourceVersion.
pub(crate) const WATCHER_DEPTH: usize = 8192;

/// The live watchers of a kind, indexed by what they filter on (mirrors the watcher indexes of
/// kube-apiserver's cacher: an event is offered only to watchers whose index value it has,
/// plus the unindexed ones), so one event costs O(matching watchers), not O(all watchers).
#[derive(Default)]
struct Fanout {
    next: u64,
    all: HashMap<u64, mpsc::Sender<Arc<Event>>>,
    by_ns: HashMap<String, HashMap<u64, mpsc::Sender<Arc<Event>>>>,
    /// Label key → label value → watchers (looked up by `&str`, without allocating).
    by_label: HashMap<String, HashMap<String, HashMap<u64, mpsc::Sender<Arc<Event>>>>>,
    /// Watchers registered when closed ones were last swept.
    swept_at: usize,
}

impl Fanout {
    fn len(&self) -> usize {
        self.all.len() + self.by_ns.values().map(HashMap::len).sum::<usize>() + self.by_label.values().flat_map(HashMap::values).map(HashMap::len).sum::<usize>()
    }

    fn add(&mut self, f: &WatchFilter) -> mpsc::Receiver<Arc<Event>> {
        let n = self.len();
        if n > 64 && n > 2 * self.swept_at {
            self.all.retain(|_, t| !t.is_closed());
            for m in self.by_ns.values_mut().chain(self.by_label.values_mut().flat_map(HashMap::values_mut)) {
                m.retain(|_, t| !t.is_closed());
            }
            self.by_ns.retain(|_, m| !m.is_empty());
            for v in self.by_label.values_mut() {
                v.retain(|_, m| !m.is_empty());
            }
            self.by_label.retain(|_, v| !v.is_empty());
            self.swept_at = self.len();
        }
        let (tx, rx) = mpsc::channel(WATCHER_DEPTH);
        self.next += 1;
        let slot = match (&f.label, &f.namespace) {
            (Some((k, v)), _) => self.by_label.entry(k.clone()).or_default().entry(v.clone()).or_default(),
            (None, Some(ns)) => self.by_ns.entry(ns.clone()).or_default(),
            (None, None) => &mut self.all,
        };
        slot.insert(self.next, tx);
        rx
    }

    /// Offers `e` to the watchers of its labels (and, for MODIFIED, of its previous labels),
    /// reading them from the objects' selector attributes without decoding them into values.
    /// `None` (nothing offered) when a label is escaped or not a string: decode instead.
    fn offer_by_raw_labels(&mut self, e: &Arc<Event>) -> Option<()> {
        // the objects' attributes are read in place (hot) or decompressed once each
        let prev = match (e.ty, &e.prev) {
            (EventType::Modified, Some(p)) => Some(p),
            _ => None,
        };
        e.obj.with_attrs(|now_a| {
            let (now, _) = raw_labels(now_a)?;
            match prev {
                // the same labels: the previous state adds no watcher (and is not read)
                Some(p) if p.labels_key == e.obj.labels_key && p.labels_key != 0 => {
                    self.offer_labels(e, &now, &[]);
                    Some(())
                }
                Some(p) => p.with_attrs(|prev_a| {
                    let (prev, _) = raw_labels(prev_a)?;
                    self.offer_labels(e, &now, &prev);
                    Some(())
                })?,
                None => {
                    self.offer_labels(e, &now, &[]);
                    Some(())
                }
            }
        })?
    }

    /// Offers `e` to the watchers of the labels `now` and of those of `prev` not in `now`.
    fn offer_labels(&mut self, e: &Arc<Event>, now: &[(&str, &str)], prev: &[(&str, &str)]) {
        let changed = prev.iter().filter(|(k, v)| !now.iter().any(|(k2, v2)| k2 == k && v2 == v));
        for (k, v) in now.iter().chain(changed) {
            if let Some(m) = self.by_label.get_mut(*k).and_then(|by_v| by_v.get_mut(*v)) {
                m.retain(|_, t| t.try_send(e.clone()).is_ok());
            }
        }
    }

    fn dispatch(&mut self, e: &Arc<Event>) {
        fn offer(m: &mut HashMap<u64, mpsc::Sender<Arc<Event>>>, e: &Arc<Event>) {
            // a full queue is a watcher too slow to keep: dropping its sender ends it
            m.retain(|_, t| t.try_send(e.clone()).is_ok());
        }
        offer(&mut self.all, e);
        if let Some(m) = self.by_ns.get_mut(&e.namespace) {
            offer(m, e);
        }
        if self.by_label.is_empty() {
            return;
        }
        // the labels read from the attributes' bytes (no decoding), else from the decoded ones
        if let Some(()) = self.offer_by_raw_labels(e) {
            return;
        }
        let now: Vec<(&str, &str)> = e.attrs().labels_iter().collect();
        let prev: Vec<(&str, &str)> = e.prev_attrs().map(|p| p.labels_iter().collect()).unwrap_or_default();
        self.offer_labels(e, &now, &prev);
    }
}

/// What a new watcher starts from.
pub struct Subscription {
    /// Current objects to send as ADDED first (`None` when resuming).
    pub snapshot: Option<Vec<(Key, Arc<Obj>)>>,
    /// Events after the client's resourceVersion, in order (resume only).
    pub replay: Vec<Arc<Event>>,
    /// The global resourceVersion the watcher is at before `replay` (or after `snapshot`).
    pub start: GlobalRv,
    /// Live events after those (the events the watcher's [`WatchFilter`] admits); `None` from
    /// `recv` means the watcher fell too far behind (or the store went away): end the stream.
    pub rx: mpsc::Receiver<Arc<Event>>,
}

/// The kind-wide write state: every write of the kind holds it (members' events of one kind
/// are sequenced here, which orders the merged stream and makes each event's global
/// resourceVersion exact).
struct Writer {
    /// Per cluster, the newest ingest epoch that was stopped by [`KindStore::leave`]: writes
    /// from an ingest of that epoch or older (a task still finishing after its abort) are
    /// ignored.
    fence: BTreeMap<Arc<str>, u64>,
    /// The clusters and their positions (each event's global resourceVersion is marked there).
    clusters: Positions,
    /// Sequence number of the last event.
    seq: u64,
    /// The shard map in force.
    map: Arc<ShardMap>,
    /// Shards whose objects this store keeps (`None`: all). Writes to other shards only
    /// advance their cluster's position (an out-of-process cache holding a shard subset).
    owned: Option<Arc<[bool]>>,
}

/// One shard of a kind: its objects and a ring buffer of their recent events.
#[derive(Default)]
struct Shard {
    objects: BTreeMap<Key, Arc<Obj>>,
    ring: VecDeque<Arc<Event>>,
    cap: usize,
    /// Per cluster, the position of its newest event evicted from this ring: a LIST snapshot or
    /// a watch resume needs a position at least this new.
    evicted: BTreeMap<Arc<str>, Pos>,
    /// Objects per namespace in `objects` (only namespaces with some), kept with them by
    /// [`Shard::put`] and [`Shard::take`], so that counting them does not visit every object.
    namespaces: BTreeMap<String, usize>,
    /// Per cluster, the position of its latest event pushed to `ring` (kept by
    /// [`Shard::push`]; a cluster that left keeps its entry, which only makes
    /// [`Shard::first_after`] walk a little further).
    newest: HashMap<Arc<str>, Pos>,
}

impl Shard {
    /// Stores `obj` under `key`; returns the object it replaces.
    fn put(&mut self, key: Key, obj: Arc<Obj>) -> Option<Arc<Obj>> {
        match self.namespaces.get_mut(&key.0) {
            Some(count) => {
                let prev = self.objects.insert(key, obj);
                if prev.is_none() {
                    *count += 1;
                }
                prev
            }
            None => {
                let ns = key.0.clone();
                let prev = self.objects.insert(key, obj);
                if prev.is_none() {
                    self.namespaces.insert(ns, 1);
                }
                prev
            }
        }
    }

    /// Removes the object under `key`; returns it.
    fn take(&mut self, key: &Key) -> Option<Arc<Obj>> {
        let prev = self.objects.remove(key)?;
        if let Some(count) = self.namespaces.get_mut(&key.0) {
            *count -= 1;
            if *count == 0 {
                self.namespaces.remove(&key.0);
            }
        }
        Some(prev)
    }

    /// Appends `ev` to the ring (the caller made room).
    fn push(&mut self, ev: Arc<Event>) {
        match self.newest.get_mut(&*ev.cluster) {
            Some(p) => *p = ev.pos,
            None => {
                self.newest.insert(ev.cluster.clone(), ev.pos);
            }
        }
        self.ring.push_back(ev);
    }

    /// The index in `ring` from which every event after `at` lies: each cluster's events are
    /// in the ring in position order, so those after `at[c]` are a tail of them. Walks back
    /// from the newest event only while some cluster has a newer event here than `at` holds
    /// (none, for a snapshot at the current position: then nothing is walked). A cluster `at`
    /// does not hold counts only when `absent` (a watch replays all its events: then the
    /// whole ring when this shard holds one of its events).
    fn first_after(&self, at: &GlobalRv, absent: bool) -> usize {
        let mut pending: HashMap<&str, Pos> = HashMap::new();
        for (c, newest) in &self.newest {
            match at.0.get(&**c) {
                Some(p) if newest > p => {
                    pending.insert(&**c, *p);
                }
                Some(_) => {}
                None if absent => return 0,
                None => {}
            }
        }
        let mut i = self.ring.len();
        while !pending.is_empty() && i > 0 {
            i -= 1;
            let e = &self.ring[i];
            if pending.get(&*e.cluster).is_some_and(|p| e.pos <= *p) {
                pending.remove(&*e.cluster);
            }
        }
        i
    }
}

/// Objects and events a shard reports (status endpoint, balancing).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ShardStats {
    /// Cached objects.
    pub objects: usize,
    /// Events in the ring.
    #[serde(rename = "ringEvents")]
    pub ring_events: usize,
    /// Current ring capacity.
    #[serde(rename = "ringCapacity")]
    pub ring_capacity: usize,
}

/// What a write does to a key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Store the object (ADDED when new, else MODIFIED).
    Upsert,
    /// Remove it (DELETED when present, else only the position advances).
    Delete,
}

/// The cache of one kind across all members, in shards (see the module docs of
/// [`crate::cache`] and [`super::shard`]).
pub struct KindStore {
    /// The kind (with the CLUSTER Table column).
    pub info: Arc<ResourceInfo>,
    inner: Mutex<Writer>,
    shards: Vec<Mutex<Shard>>,
    /// Held shared by multi-shard readers and exclusively while objects move between shards.
    moving: RwLock<()>,
    fanout: Mutex<Fanout>,
    /// Ring bound per shard.
    max_events: usize,
    window: Duration,
}

/// The objects of `scope` that a listing considers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scope<'a> {
    /// Only this namespace (`""`: cluster-scoped objects).
    pub namespace: Option<&'a str>,
    /// Only this cluster.
    pub cluster: Option<&'a str>,
}

impl Scope<'_> {
    fn holds(&self, k: &Key) -> bool {
        self.namespace.is_none_or(|n| k.0 == n) && self.cluster.is_none_or(|c| &*k.2 == c)
    }
}

/// One shard's objects in view at a snapshot, in key order: its current objects (`cur`)
/// with the keys changed since the snapshot replaced by their state then (`overlay`: `None`
/// for a key that did not exist then).
struct AtSnapshot<C: Iterator<Item = (Key, Option<Arc<Obj>>)>> {
    cur: std::iter::Peekable<C>,
    overlay: std::iter::Peekable<std::collections::btree_map::IntoIter<Key, Option<Arc<Obj>>>>,
}

impl<C: Iterator<Item = (Key, Option<Arc<Obj>>)>> Iterator for AtSnapshot<C> {
    type Item = (Key, Arc<Obj>);

    fn next(&mut self) -> Option<(Key, Arc<Obj>)> {
        loop {
            let next = match (self.cur.peek(), self.overlay.peek()) {
                (None, None) => return None,
                (Some(_), None) => self.cur.next(),
                (None, Some(_)) => self.overlay.next(),
                (Some(a), Some(b)) => match a.0.cmp(&b.0) {
                    std::cmp::Ordering::Less => self.cur.next(),
                    std::cmp::Ordering::Equal => {
                        self.cur.next();
                        self.overlay.next()
                    }
                    std::cmp::Ordering::Greater => self.overlay.next(),
                },
            };
            if let Some((k, Some(o))) = next {
                return Some((k, o));
            }
        }
    }
}

impl KindStore {
    /// An empty store of `shards` shards; each shard's ring grows from 100 events while its
    /// oldest event is younger than `window` (kube-apiserver: 75 s), up to
    /// `max_events / shards` (kube-apiserver: 102,400 for its one cache).
    pub fn new(info: Arc<ResourceInfo>, max_events: usize, window: Duration) -> KindStore {
        KindStore::sharded(info, max_events, window, 1)
    }

    /// [`KindStore::new`] with `shards` shards placed by the hash map until
    /// [`KindStore::apply_map`].
    pub fn sharded(info: Arc<ResourceInfo>, max_events: usize, window: Duration, shards: usize) -> KindStore {
        let n = shards.max(1);
        let per = max_events.max(1).div_ceil(n);
        KindStore {
            info,
            inner: Mutex::new(Writer { fence: BTreeMap::new(), clusters: Positions::default(), seq: 0, map: Arc::new(ShardMap::hashed(n as u32)), owned: None }),
            shards: (0..n).map(|_| Mutex::new(Shard { cap: RING_MIN.min(per), ..Default::default() })).collect(),
            moving: RwLock::new(()),
            fanout: Mutex::new(Fanout::default()),
            max_events: per,
            window,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn shard(&self, i: usize) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read_all(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.moving.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Version of the shard map in force.
    pub fn map_version(&self) -> u64 {
        self.lock().map.version
    }

    /// The shard map in force.
    pub fn map(&self) -> Arc<ShardMap> {
        self.lock().map.clone()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        (0..self.shards.len()).map(|i| self.shard(i).objects.len()).sum()
    }

    /// True when no object is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Per shard: objects, ring length and capacity.
    pub fn shard_stats(&self) -> Vec<ShardStats> {
        (0..self.shards.len())
            .map(|i| {
                let s = self.shard(i);
                ShardStats { objects: s.objects.len(), ring_events: s.ring.len(), ring_capacity: s.cap }
            })
            .collect()
    }

    /// Bytes of each shard's objects: compressed bodies plus selector attributes (one pass
    /// over the objects, one shard locked at a time; for the metrics scrape).
    pub fn shard_bytes(&self) -> Vec<usize> {
        (0..self.shards.len()).map(|i| self.shard(i).objects.values().map(|o| o.stored_len() + o.attrs_len()).sum()).collect()
    }

    /// Objects per namespace (`""`: cluster-scoped), for balancing: the sum of the shards'
    /// own counts, kept as objects come and go (cost per namespace, not per object).
    pub fn namespace_counts(&self) -> BTreeMap<String, usize> {
        let mut out: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..self.shards.len() {
            for (ns, c) in &self.shard(i).namespaces {
                match out.get_mut(ns) {
                    Some(n) => *n += c,
                    None => {
                        out.insert(ns.clone(), *c);
                    }
                }
            }
        }
        out
    }

    /// The current global resourceVersion.
    pub fn current_rv(&self) -> String {
        self.current().encode()
    }

    /// The current global resourceVersion, decoded.
    pub fn current(&self) -> GlobalRv {
        self.lock().clusters.current()
    }

    /// Clusters that currently have (non-departed) state here.
    pub fn has_cluster(&self, cluster: &str) -> bool {
        self.lock().clusters.get(cluster).is_some_and(|r| !r.departed)
    }

    /// A cluster's cached objects, across shards.
    fn cluster_objects(&self, cluster: &str) -> Vec<(Key, Arc<Obj>)> {
        let mut out = Vec::new();
        for i in 0..self.shards.len() {
            out.extend(self.shard(i).objects.iter().filter(|(k, _)| &*k.2 == cluster).map(|(k, v)| (k.clone(), v.clone())));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// A member's complete state at `list_rv` (after a first list, a relist after 410, or
    /// an ingest restart). A new cluster gets ADDED events; a known one the difference to
    /// what is cached (ADDED/MODIFIED/DELETED), so watches stay open and correct. A member
    /// whose resourceVersion went backwards is treated as a new cluster (leave, then join).
    /// `epoch` identifies the ingest (see [`KindStore::leave`]).
    pub fn sync(&self, epoch: u64, cluster: &Arc<str>, list_rv: u64, objs: Vec<(Key, Obj)>) {
        let mut g = self.lock();
        if g.fence.get(cluster).is_some_and(|f| epoch <= *f) {
            return;
        }
        let known = g.clusters.get(cluster).filter(|r| !r.departed).cloned();
        match known {
            Some(rec) if list_rv >= rec.pos().rv => {
                let mut next = if list_rv > rec.pos().rv { Pos::member(list_rv) } else { rec.pos() };
                let mut fresh: BTreeMap<Key, Obj> = objs.into_iter().collect();
                for (k, o) in self.cluster_objects(cluster) {
                    match fresh.remove(&k) {
                        None => {
                            next.sub += 1;
                            self.record(&mut g, Op::Delete, k, o, next);
                        }
                        Some(n) if n.member_rv != o.member_rv => {
                            next.sub += 1;
                            self.record(&mut g, Op::Upsert, k, Arc::new(n), next);
                        }
                        Some(_) => {}
                    }
                }
                for (k, n) in fresh {
                    next.sub += 1;
                    self.record(&mut g, Op::Upsert, k, Arc::new(n), next);
                }
                g.clusters.advance(cluster, next);
            }
            Some(_) => {
                drop(g);
                self.leave(cluster, 0);
                self.sync(epoch, cluster, list_rv, objs);
            }
            None => {
                let in_ring = g.clusters.get(cluster).map_or(0, |r| r.in_ring);
                let n = objs.len() as u32;
                let base = Pos::member(list_rv);
                g.clusters.join(cluster, base, Pos { rv: list_rv, sub: n }, in_ring);
                for i in 0..self.shards.len() {
                    // a new incarnation: positions of an earlier one say nothing about it
                    self.shard(i).evicted.remove(cluster);
                }
                for (i, (k, o)) in objs.into_iter().enumerate() {
                    self.record(&mut g, Op::Upsert, k, Arc::new(o), Pos { rv: list_rv, sub: i as u32 + 1 });
                }
            }
        }
    }

    /// One event from a member's watch. Events at or before the cluster's position are
    /// duplicates (a resumed member watch) and ignored; the type is recomputed from the cache
    /// (an ADDED for a cached object is a MODIFIED; a DELETED for an unknown object only
    /// advances the position).
    pub fn apply(&self, epoch: u64, ty: EventType, key: Key, obj: Obj) {
        let mut g = self.lock();
        if g.fence.get(&key.2).is_some_and(|f| epoch <= *f) {
            return;
        }
        let Some(rec) = g.clusters.get(&key.2).filter(|r| !r.departed) else { return };
        let pos = Pos::member(obj.member_rv);
        if pos <= rec.pos() {
            return;
        }
        let op = if ty == EventType::Deleted { Op::Delete } else { Op::Upsert };
        let obj = Arc::new(obj);
        if obj.is_hot() {
            cool::register(&obj);
        }
        self.record(&mut g, op, key, obj, pos);
    }

    /// A member's progress without an event (a bookmark): advances its position.
    pub fn progress(&self, cluster: &str, rv: u64) {
        let mut g = self.lock();
        if g.clusters.get(cluster).is_some_and(|r| !r.departed) {
            g.clusters.advance(cluster, Pos::member(rv));
        }
    }

    /// A cluster left: DELETED for each of its objects. Its entry stays in the global
    /// resourceVersion while its events are in a ring. Later writes from ingests of epoch
    /// `fence` or older are ignored.
    pub fn leave(&self, cluster: &str, fence: u64) {
        let mut g = self.lock();
        let f = g.fence.entry(Arc::from(cluster)).or_insert(0);
        *f = (*f).max(fence);
        let Some(rec) = g.clusters.get(cluster).filter(|r| !r.departed).cloned() else { return };
        let mut next = rec.pos();
        for (k, o) in self.cluster_objects(cluster) {
            next.sub += 1;
            self.record(&mut g, Op::Delete, k, o, next);
        }
        if let Some(r) = g.clusters.get_mut(cluster) {
            r.departed = true;
            if r.in_ring == 0 {
                g.clusters.remove(cluster);
            }
        }
    }

    /// Applies one write to its shard's objects and ring, the cluster's position and the
    /// watchers. A delete of an absent key only advances the position.
    fn record(&self, g: &mut Writer, op: Op, key: Key, obj: Arc<Obj>, pos: Pos) {
        let si = g.map.shard(&key.0, &key.1, self.shards.len());
        if g.owned.as_ref().is_some_and(|o| !o.get(si).copied().unwrap_or(false)) {
            // another process's shard: only the position moves
            g.clusters.advance(&key.2, pos);
            return;
        }
        let mut sh = self.shard(si);
        let (ty, prev) = match op {
            Op::Delete => match sh.take(&key) {
                Some(p) => (EventType::Deleted, Some(p)),
                None => {
                    g.clusters.advance(&key.2, pos);
                    return;
                }
            },
            Op::Upsert => match sh.put(key.clone(), obj.clone()) {
                Some(p) => (EventType::Modified, Some(p)),
                None => (EventType::Added, None),
            },
        };
        g.clusters.set(&key.2, pos);
        if let Some(r) = g.clusters.get_mut(&key.2) {
            r.in_ring += 1;
        }
        g.seq += 1;
        // the global resourceVersion after the event: marked, derived when it is sent
        let rv_at = g.clusters.mark();
        let (namespace, name, cluster) = key;
        let ev = Arc::new(Event {
            seq: g.seq,
            cluster,
            pos,
            ty,
            namespace,
            name,
            obj,
            prev,
            rv_at,
            rv: OnceLock::new(),
            line: OnceLock::new(),
            attrs: OnceLock::new(),
            prev_attrs: OnceLock::new(),
            at: Instant::now(),
        });
        while sh.ring.len() >= sh.cap {
            let oldest_young = sh.ring.front().is_some_and(|e| e.at.elapsed() < self.window);
            if oldest_young && sh.cap < self.max_events {
                sh.cap = (sh.cap * 2).min(self.max_events);
                continue;
            }
            let Some(old) = sh.ring.pop_front() else { break };
            let e = sh.evicted.entry(old.cluster.clone()).or_default();
            *e = (*e).max(old.pos);
            let drop_rec = match g.clusters.get_mut(&old.cluster) {
                Some(r) => {
                    r.in_ring = r.in_ring.saturating_sub(1);
                    r.departed && r.in_ring == 0
                }
                None => false,
            };
            if drop_rec {
                g.clusters.remove(&old.cluster);
            }
        }
        sh.push(ev.clone());
        drop(sh);
        self.fanout.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ev);
    }

    /// Replaces the shard map: objects and their retained events move to their new shards
    /// atomically (see the rebalancing protocol in [`super::shard`]). Readers and writers wait
    /// meanwhile; no event is lost or repeated.
    pub fn apply_map(&self, map: ShardMap) {
        let _m = self.moving.write().unwrap_or_else(|e| e.into_inner());
        let mut g = self.lock();
        let n = self.shards.len();
        let mut shards: Vec<std::sync::MutexGuard<'_, Shard>> = (0..n).map(|i| self.shard(i)).collect();
        let mut moved: Vec<(usize, Key, Arc<Obj>)> = Vec::new();
        for (i, sh) in shards.iter_mut().enumerate() {
            let keys: Vec<Key> = sh.objects.keys().filter(|k| map.shard(&k.0, &k.1, n) != i).cloned().collect();
            for k in keys {
                let o = sh.take(&k).expect("listed");
                moved.push((map.shard(&k.0, &k.1, n), k, o));
            }
        }
        for (t, k, o) in moved {
            shards[t].put(k, o);
        }
        // events follow their objects; every shard keeps the most conservative eviction marks
        let mut events: Vec<Arc<Event>> = Vec::new();
        let mut evicted: BTreeMap<Arc<str>, Pos> = BTreeMap::new();
        for sh in shards.iter_mut() {
            events.extend(sh.ring.drain(..));
            sh.newest.clear();
            for (c, p) in &sh.evicted {
                let e = evicted.entry(c.clone()).or_default();
                *e = (*e).max(*p);
            }
        }
        events.sort_by_key(|e| e.seq);
        for e in events {
            shards[map.shard(&e.namespace, &e.name, n)].push(e);
        }
        for sh in shards.iter_mut() {
            sh.evicted = evicted.clone();
            sh.cap = sh.cap.max(sh.ring.len().min(self.max_events)).max(RING_MIN.min(self.max_events));
        }
        g.map = Arc::new(map);
    }

    /// Objects of `scope` after `after` (exclusive) as they were at global resourceVersion
    /// `at` (a cluster absent from `at` contributes nothing), in key order, keeping those
    /// `keep` accepts, at most `max` (0: all). The state at `at` is the current state with the
    /// retained events after `at` rolled back (the snapshot a continue token refers to).
    /// Errors: [`CacheError::Expired`] when a shard no longer holds every event after `at`
    /// (or `at` names a cluster this store has forgotten).
    ///
    /// The shards are read together, merged in key order: a page reads each shard only up to
    /// its own last object (plus one object ahead), so a page of one cluster's objects visits
    /// the other clusters' objects between its first and last one, once. A cluster `at` does
    /// not name visits nothing.
    pub fn list_at(&self, at: &GlobalRv, scope: Scope<'_>, after: Option<&Key>, keep: &dyn Fn(&Key, &Obj) -> bool, max: usize) -> Result<Vec<(Key, Arc<Obj>)>, CacheError> {
        self.list_at_visiting(at, scope, after, keep, max).map(|(out, _)| out)
    }

    /// [`KindStore::list_at`], with the number of stored objects it visited to answer.
    fn list_at_visiting(&self, at: &GlobalRv, scope: Scope<'_>, after: Option<&Key>, keep: &dyn Fn(&Key, &Obj) -> bool, max: usize) -> Result<(Vec<(Key, Arc<Obj>)>, usize), CacheError> {
        use std::ops::Bound;
        {
            let g = self.lock();
            for (c, p) in &at.0 {
                match g.clusters.get(c.as_str()) {
                    None => return Err(CacheError::Expired(format!("too old resource version: cluster {c} is not in the watch window"))),
                    Some(rec) if p.rv > rec.pos().rv || *p < rec.base_end => {
                        return Err(CacheError::Expired(format!("too old resource version: cluster {c} at {}.{} is not in the cache's history (the member's history was reset)", p.rv, p.sub)))
                    }
                    Some(_) => {}
                }
            }
        }
        let _r = self.read_all();
        // every shard at once, in index order (as `subscribe` takes them), for one merge
        let shards: Vec<std::sync::MutexGuard<'_, Shard>> = (0..self.shards.len()).map(|i| self.shard(i)).collect();
        for sh in &shards {
            for (c, p) in &at.0 {
                if sh.evicted.get(c.as_str()).is_some_and(|e| p < e) {
                    return Err(CacheError::Expired(format!("too old resource version: the events of cluster {c} after {}.{} left the window", p.rv, p.sub)));
                }
            }
        }
        if scope.cluster.is_some_and(|c| !at.0.contains_key(c)) {
            // (a zone cache asked for another zone's member): none of its objects is in view
            return Ok((Vec::new(), 0));
        }
        let in_view = |k: &Key| scope.holds(k) && at.0.contains_key(&*k.2) && after.is_none_or(|a| k > a);
        let in_view = &in_view;
        let visited = std::cell::Cell::new(0usize);
        let visited = &visited;
        let mut heads: Vec<_> = shards
            .iter()
            .map(|sh| {
                // the state at `at` of keys changed since: the state before their first later event
                let mut overlay: BTreeMap<Key, Option<Arc<Obj>>> = BTreeMap::new();
                for e in sh.ring.range(sh.first_after(at, false)..) {
                    let Some(p) = at.0.get(&*e.cluster) else { continue };
                    if e.pos <= *p {
                        continue;
                    }
                    let k = (e.namespace.clone(), e.name.clone(), e.cluster.clone());
                    if !in_view(&k) {
                        continue;
                    }
                    overlay.entry(k).or_insert_with(|| if e.ty == EventType::Added { None } else { e.prev.clone() });
                }
                let lower = match (after, scope.namespace) {
                    (Some(k), _) => Bound::Excluded(k.clone()),
                    (None, Some(ns)) => Bound::Included((ns.to_string(), String::new(), Arc::from(""))),
                    (None, None) => Bound::Unbounded,
                };
                let cur = sh
                    .objects
                    .range((lower, Bound::Unbounded))
                    .inspect(move |_| visited.set(visited.get() + 1))
                    .take_while(move |(k, _)| scope.namespace.is_none_or(|ns| k.0 == ns))
                    .filter(move |(k, _)| in_view(k))
                    .map(|(k, v)| (k.clone(), Some(v.clone())));
                AtSnapshot { cur: cur.peekable(), overlay: overlay.into_iter().peekable() }.peekable()
            })
            .collect();
        let mut out: Vec<(Key, Arc<Obj>)> = Vec::new();
        loop {
            // the shard whose next object comes first (the first shard among equal keys)
            let next = heads.iter_mut().enumerate().filter_map(|(i, h)| h.peek().map(|(k, _)| (i, k))).min_by(|a, b| a.1.cmp(b.1)).map(|(i, _)| i);
            let Some(i) = next else { break };
            let (k, o) = heads[i].next().expect("peeked");
            if out.last().is_some_and(|(last, _)| *last == k) {
                continue;
            }
            if keep(&k, &o) {
                out.push((k, o));
                if max > 0 && out.len() >= max {
                    break;
                }
            }
        }
        drop(heads);
        Ok((out, visited.get()))
    }

    /// Objects after `after` (exclusive) in `namespace` (all when `None`) of `cluster` (all
    /// when `None`), at the current global resourceVersion, which is returned too.
    pub fn list(&self, namespace: Option<&str>, cluster: Option<&str>, after: Option<&Key>) -> (Vec<(Key, Arc<Obj>)>, GlobalRv) {
        let at = self.current();
        let items = self.list_at(&at, Scope { namespace, cluster }, after, &|_, _| true, 0).unwrap_or_default();
        (items, at)
    }

    /// Objects named `name` in `namespace` (`""` for cluster-scoped), one per cluster.
    pub fn get(&self, namespace: &str, name: &str) -> Vec<(Key, Arc<Obj>)> {
        let _r = self.read_all();
        let lo = (namespace.to_string(), name.to_string(), Arc::<str>::from(""));
        let mut out = Vec::new();
        for i in 0..self.shards.len() {
            let sh = self.shard(i);
            out.extend(sh.objects.range(lo.clone()..).take_while(|(k, _)| k.0 == namespace && k.1 == name).map(|(k, v)| (k.clone(), v.clone())));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Keeps only the objects of shards `owned` (indexes below [`KindStore::shard_count`]):
    /// writes to other shards only advance their cluster's position. Call before the first
    /// write (an out-of-process cache; see [`super::shard`]).
    pub fn own_only(&self, owned: &[usize]) {
        let flags: Vec<bool> = (0..self.shards.len()).map(|i| owned.contains(&i)).collect();
        self.lock().owned = Some(flags.into());
    }

    /// Shards whose objects this store keeps (all unless [`KindStore::own_only`]).
    pub fn owned_shards(&self) -> Vec<usize> {
        let g = self.lock();
        (0..self.shards.len()).filter(|i| g.owned.as_ref().is_none_or(|o| o[*i])).collect()
    }

    /// Ends every live watch (their streams close; clients resume from their last
    /// resourceVersion).
    pub fn close_watchers(&self) {
        *self.fanout.lock().unwrap_or_else(|e| e.into_inner()) = Fanout::default();
    }

    /// Live watchers registered (closed ones are swept as new ones come).
    pub fn watchers(&self) -> usize {
        self.fanout.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Starts a watch: from the current state (`from` = `None`: snapshot + live events) or
    /// resuming after global resourceVersion `from`. Errors: [`CacheError::Expired`] when a
    /// cluster's entry is older than what the rings hold (or names a cluster the cache does
    /// not know any more), or a cluster the client has not seen has events evicted.
    pub fn subscribe(&self, from: Option<GlobalRv>, filter: &WatchFilter) -> Result<Subscription, CacheError> {
        let g = self.lock();
        let rx = self.fanout.lock().unwrap_or_else(|e| e.into_inner()).add(filter);
        let shards: Vec<_> = (0..self.shards.len()).map(|i| self.shard(i)).collect();
        let Some(from) = from else {
            let mut snapshot: Vec<(Key, Arc<Obj>)> = shards.iter().flat_map(|s| s.objects.iter().map(|(k, v)| (k.clone(), v.clone()))).collect();
            snapshot.sort_by(|a, b| a.0.cmp(&b.0));
            return Ok(Subscription { snapshot: Some(snapshot), replay: vec![], start: g.clusters.current(), rx });
        };
        let evicted = |c: &str| shards.iter().filter_map(|s| s.evicted.get(c).copied()).max();
        for (c, p) in &from.0 {
            let Some(rec) = g.clusters.get(c.as_str()) else {
                return Err(CacheError::Expired(format!("too old resource version: cluster {c} is not in the watch window")));
            };
            if p.rv > rec.pos().rv {
                // a position the cache never reached: the member's history was reset (its
                // resourceVersions went backwards) since the client saw it
                return Err(CacheError::Expired(format!(
                    "too old resource version: cluster {c} at {}.{} is ahead of the cache ({}.{}): the member's history was reset",
                    p.rv,
                    p.sub,
                    rec.pos().rv,
                    rec.pos().sub
                )));
            }
            let ev = evicted(c);
            if *p < rec.base_end || ev.is_some_and(|e| *p < e) {
                let oldest = ev.unwrap_or(rec.base_end).max(rec.base_end);
                return Err(CacheError::Expired(format!("too old resource version: cluster {c} at {}.{} (oldest {}.{})", p.rv, p.sub, oldest.rv, oldest.sub)));
            }
        }
        for c in g.clusters.keys() {
            if !from.0.contains_key(&**c) && evicted(c).is_some() {
                return Err(CacheError::Expired(format!("too old resource version: cluster {c} is missing and its early events left the window")));
            }
        }
        let mut replay: Vec<Arc<Event>> = shards.iter().flat_map(|s| s.ring.range(s.first_after(&from, true)..).filter(|e| from.0.get(&*e.cluster).is_none_or(|p| e.pos > *p)).cloned()).collect();
        replay.sort_by_key(|e| e.seq);
        Ok(Subscription { snapshot: None, replay, start: from, rx })
    }

    /// Ring buffer length and capacity summed over shards (metrics, tests).
    pub fn ring_stats(&self) -> (usize, usize) {
        self.shard_stats().iter().fold((0, 0), |(l, c), s| (l + s.ring_events, c + s.ring_capacity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(c: &Arc<str>, ns: &str, name: &str, rv: u64) -> (Key, Obj) {
        Obj::from_member(c, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string()}, "spec": {}})).unwrap()
    }

    fn store(max: usize) -> KindStore {
        KindStore::new(Arc::new(crate::api::registry::pod()), max, Duration::from_secs(0))
    }

    fn labeled(c: &Arc<str>, ns: &str, name: &str, rv: u64, app: &str) -> (Key, Obj) {
        let v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string(), "labels": {"app": app}},
            "spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}});
        Obj::from_member(c, v).unwrap()
    }

    #[test]
    fn raw_members_store_what_decoded_members_store() {
        use crate::fedsim::generate::{GenConfig, PodGenerator};
        let c: Arc<str> = Arc::from("m1");
        let g = PodGenerator::new(&GenConfig { nodes: 30, pods_per_node: 10, ..GenConfig::default() });
        let mut cases: Vec<(Vec<u8>, bool)> = (0..300)
            .map(|i| {
                let mut p = g.initial_pod(i);
                p["metadata"]["resourceVersion"] = json!((i + 5).to_string());
                if i % 2 == 0 {
                    // as in LIST items
                    p.as_object_mut().unwrap().remove("apiVersion");
                    p.as_object_mut().unwrap().remove("kind");
                }
                if i % 3 == 0 {
                    p["metadata"].as_object_mut().unwrap().remove("annotations");
                }
                (serde_json::to_vec(&p).unwrap(), true)
            })
            .collect();
        let odd: [(&str, bool); 8] = [
            (r#"{"metadata":{"name":"a","namespace":"n","resourceVersion":"7","annotations":{"fedctl.io/cluster":"x"}},"spec":{}}"#, false),
            (r#"{"metadata":{"name":"a\u0062","resourceVersion":"7","annotations":{},"labels":{"k":"v"}},"spec":{"nodeName":"n1"},"status":{"phase":"Running","podIP":"1.2.3.4"}}"#, true),
            (r#"{"metadata": {"name":"a","resourceVersion":"7"}, "spec": {"nodeName": "n"}}"#, false),
            (r#"{"metadata":{"name":"a","resourceVersion":"7","annotations":null},"spec":null}"#, false),
            (r#"{"kind":"X","metadata":{"resourceVersion":"7","name":"é","labels":{"a":"b"}},"status":{"phase":"P"},"spec":{"nodeName":"x","nodeName":"y"}}"#, true),
            (r#"{"metadata":{"resourceVersion":"7","name":"a","annotations":{"x":"1"},"uid":"u"},"spec":{"restartPolicy":"Always"},"extra":[1,{"b":null}]}"#, true),
            (r#"{"metadata":{"name":"a","name":"b","resourceVersion":"7"}}"#, false),
            (r#"{"spec":{},"metadata":{"name":"a","resourceVersion":"7","labels":null},"spec":{"nodeName":"z"}}"#, false),
        ];
        cases.extend(odd.iter().map(|(s, fast)| (s.as_bytes().to_vec(), *fast)));
        for (raw, fast) in &cases {
            let (mut out, mut attrs) = (Vec::new(), Vec::new());
            let took = raw_member("m1", "v1", "Pod", raw, &mut out, &mut attrs).ok().flatten().is_some();
            assert_eq!(took, *fast, "fast path for {}", String::from_utf8_lossy(raw));
            let (k1, o1) = Obj::from_member_raw(&c, "v1", "Pod", raw).unwrap();
            let mut v: Value = serde_json::from_slice(raw).unwrap();
            v["apiVersion"] = json!("v1");
            v["kind"] = json!("Pod");
            let (k2, o2) = Obj::from_member(&c, v).unwrap();
            assert_eq!(k1, k2);
            assert_eq!(o1.member_rv, o2.member_rv);
            assert_eq!(o1.decode("g1"), o2.decode("g1"), "{}", String::from_utf8_lossy(raw));
            assert_eq!(o1.selectable(), o2.selectable(), "{}", String::from_utf8_lossy(raw));
            // the labels read for the dispatch: as the whole scan reads them, as decoded
            let labels = o1.selectable()["metadata"]["labels"].as_object().map(|l| l.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect::<Vec<_>>()).unwrap_or_default();
            for o in [&o1, &o2] {
                o.with_attrs(|a| {
                    fn owned(a: &[u8], r: Option<(Vec<(&str, &str)>, std::ops::Range<usize>)>) -> Option<(Vec<(String, String)>, Vec<u8>)> {
                        r.map(|(p, r)| (p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), a[r].to_vec()))
                    }
                    let (read, scanned) = (raw_labels(a), raw_labels_scanned(a));
                    assert_eq!(owned(a, read.clone()), owned(a, scanned), "{}", String::from_utf8_lossy(a));
                    let (pairs, range) = read.expect("plain labels");
                    assert_eq!(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>(), labels);
                    assert_eq!(o.labels_key, labels_key(&a[range]));
                })
                .expect("attributes");
            }
            assert_eq!(o1.labels_key, o2.labels_key, "the same labels' bytes");
            let mut line = Vec::new();
            o1.write_with_rv("g1", &mut line);
            assert!(!line.contains(&b'\n') && serde_json::from_slice::<Value>(&line).is_ok());
            // the watch ingest's hot form reads the same, before and after cooling
            let (k3, o3) = Obj::from_watch_raw(&c, "v1", "Pod", raw).unwrap();
            assert_eq!(k3, k1);
            assert_eq!(o3.is_hot(), *fast, "{}", String::from_utf8_lossy(raw));
            for _ in 0..2 {
                let mut hot = Vec::new();
                o3.write_with_rv("g1", &mut hot);
                assert_eq!(hot, line);
                assert_eq!(o3.selectable(), o1.selectable());
                assert_eq!(o3.raw_len(), o1.raw_len());
                assert_eq!(o3.labels_key, o1.labels_key);
                o3.cool();
                assert!(!o3.is_hot());
            }
        }
        for bad in [
            &b"{"[..],
            b"[1]",
            b"{\"metadata\":{\"resourceVersion\":\"1\"}}",
            b"{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"x\"}}",
            b"{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"1\"}} x",
        ] {
            assert!(Obj::from_member_raw(&c, "v1", "Pod", bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn damaged_member_json_is_refused_or_stored_as_decoding_would() {
        use crate::fedsim::generate::{GenConfig, PodGenerator};
        let c: Arc<str> = Arc::from("m1");
        let g = PodGenerator::new(&GenConfig { nodes: 4, pods_per_node: 10, ..GenConfig::default() });
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let alphabet = b"{}[]:,\"\\ 0-.eEtfnu1x";
        for i in 0..3000 {
            let mut p = g.initial_pod(i % 40);
            p["metadata"]["resourceVersion"] = json!("9");
            let mut raw = serde_json::to_vec(&p).unwrap();
            // one to three damaged bytes, or a cut
            for _ in 0..1 + next() % 3 {
                let at = (next() as usize) % raw.len();
                if next() % 8 == 0 {
                    raw.truncate(at);
                    break;
                }
                raw[at] = alphabet[(next() as usize) % alphabet.len()];
            }
            let fast = Obj::from_member_raw(&c, "v1", "Pod", &raw);
            let slow = serde_json::from_slice::<Value>(&raw).map_err(|e| CacheError::Member(e.to_string())).and_then(|mut v| {
                if let Value::Object(m) = &mut v {
                    m.insert("apiVersion".into(), json!("v1"));
                    m.insert("kind".into(), json!("Pod"));
                }
                Obj::from_member(&c, v)
            });
            match (fast, slow) {
                (Ok((k1, o1)), Ok((k2, o2))) => {
                    assert_eq!(k1, k2);
                    assert_eq!(o1.decode("g"), o2.decode("g"), "{}", String::from_utf8_lossy(&raw));
                    assert_eq!(o1.selectable(), o2.selectable(), "{}", String::from_utf8_lossy(&raw));
                }
                (Err(_), Err(_)) => {}
                (f, s) => panic!("raw {:?} vs decoded {:?} for {}", f.map(|x| x.0), s.map(|x| x.0), String::from_utf8_lossy(&raw)),
            }
        }
    }

    #[test]
    fn list_pages_are_split_into_items() {
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"c"},"items":[{"a":1},{"b":[2]}]}"#;
        let (items, meta) = list_page_items(body).unwrap();
        assert_eq!(items.iter().map(|r| &body[r.clone()]).collect::<Vec<_>>(), [&br#"{"a":1}"#[..], br#"{"b":[2]}"#]);
        assert_eq!(meta, json!({"resourceVersion": "12", "continue": "c"}));
        assert!(list_page_items(br#"{"items":[1,}"#).is_none());
        assert!(list_page_items(br#"{"items":null}"#).unwrap().0.is_empty());
    }

    #[test]
    fn watchers_are_offered_only_events_their_index_admits() {
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 1000, Duration::from_secs(60), 2);
        let a: Arc<str> = Arc::from("a");
        s.sync(1, &a, 1, vec![labeled(&a, "n1", "p1", 1, "web"), labeled(&a, "n2", "p2", 1, "db")]);
        let at = s.current();
        let web = WatchFilter { namespace: None, label: Some(("app".into(), "web".into())) };
        let mut by_label = s.subscribe(Some(at.clone()), &web).unwrap();
        let mut by_ns = s.subscribe(Some(at.clone()), &WatchFilter { namespace: Some("n2".into()), label: None }).unwrap();
        let mut all = s.subscribe(Some(at), &WatchFilter::default()).unwrap();
        let (k, o) = labeled(&a, "n2", "p2", 2, "db");
        s.apply(1, EventType::Modified, k, o);
        // p1 leaves app=web: its watcher still gets the event (the previous state matched)
        let (k, o) = labeled(&a, "n1", "p1", 3, "api");
        s.apply(1, EventType::Modified, k, o);
        let (k, o) = labeled(&a, "n2", "p3", 4, "web");
        s.apply(1, EventType::Added, k, o);
        let names = |sub: &mut Subscription| {
            let mut v = Vec::new();
            while let Ok(e) = sub.rx.try_recv() {
                v.push(format!("{}/{}", e.name, e.pos.rv));
            }
            v
        };
        assert_eq!(names(&mut by_label), ["p1/3", "p3/4"]);
        assert_eq!(names(&mut by_ns), ["p2/2", "p3/4"]);
        assert_eq!(names(&mut all), ["p2/2", "p1/3", "p3/4"]);
        // the attributes selectors see: labels and the kind's selectable fields, nothing else
        let (k, o) = labeled(&a, "n2", "p3", 5, "web");
        let mut one = s.subscribe(Some(s.current()), &web).unwrap();
        s.apply(1, EventType::Modified, k, o);
        let ev = one.rx.try_recv().unwrap();
        assert_eq!(ev.obj.selectable(), json!({"metadata": {"name": "p3", "namespace": "n2", "labels": {"app": "web"}}, "spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}}));
        let now = ev.attrs();
        assert_eq!(now.labels_iter().collect::<Vec<_>>(), [("app", "web")]);
        assert_eq!((now.field_value("metadata.name"), now.field_value("spec.nodeName"), now.field_value("status.phase")), (Some("p3"), Some("node-1"), Some("Running")));
        assert_eq!(ev.prev_attrs().unwrap().label("app"), Some("web"));
        // before and now: the same labels give one answer; a field selector reads both states
        let sel = |l: &str, f: &str| ev.selects(&LabelSelector::parse(l).unwrap(), &FieldSelector::parse(f, &["spec.nodeName"]).unwrap());
        assert_eq!(sel("app=web", ""), (true, true));
        assert_eq!(sel("app=api", ""), (false, false));
        assert_eq!(sel("", "spec.nodeName=node-1"), (true, true));
        assert_eq!(sel("", "metadata.name=p1"), (false, false));
        // a label change: the watchers of the old label get the event, which leaves their selector
        let (k, o) = labeled(&a, "n2", "p3", 6, "api");
        s.apply(1, EventType::Modified, k, o);
        let ev = one.rx.try_recv().unwrap();
        let web_sel = LabelSelector::parse("app=web").unwrap();
        assert_eq!(ev.selects(&web_sel, &FieldSelector::default()), (true, false));
        assert_eq!(ev.selects(&LabelSelector::parse("app in (web,api)").unwrap(), &FieldSelector::default()), (true, true));
        // a watcher that stops reading is dropped once its queue is full; others go on
        let mut slow = s.subscribe(Some(s.current()), &WatchFilter::default()).unwrap();
        for i in 0..(WATCHER_DEPTH as u64 + 5) {
            let (k, o) = labeled(&a, "n1", "p9", 10 + i, "x");
            s.apply(1, EventType::Modified, k, o);
        }
        let mut got = 0;
        while slow.rx.try_recv().is_ok() {
            got += 1;
        }
        assert_eq!(got, WATCHER_DEPTH);
        assert!(matches!(slow.rx.try_recv(), Err(tokio::sync::mpsc::error::TryRecvError::Disconnected)), "a dropped watcher's stream ends");
    }

    #[test]
    fn hot_watch_objects_are_dispatched_and_cooled_by_the_thread() {
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 1000, Duration::from_secs(60), 2);
        let a: Arc<str> = Arc::from("a");
        s.sync(1, &a, 1, vec![labeled(&a, "n1", "p1", 1, "web")]);
        let web = WatchFilter { namespace: None, label: Some(("app".into(), "web".into())) };
        let mut sub = s.subscribe(Some(s.current()), &web).unwrap();
        let hot = |rv: u64, app: &str| {
            let raw = format!(r#"{{"metadata":{{"name":"p1","namespace":"n1","resourceVersion":"{rv}","labels":{{"app":"{app}"}}}},"spec":{{"nodeName":"node-1"}}}}"#);
            Obj::from_watch_raw(&a, "v1", "Pod", raw.as_bytes()).unwrap()
        };
        // hot now and hot previous state: p1 leaves app=web, then comes back
        let (k, o) = hot(2, "api");
        assert!(o.is_hot());
        s.apply(1, EventType::Modified, k, o);
        let (k, o) = hot(3, "db");
        s.apply(1, EventType::Modified, k, o);
        let (k, o) = hot(4, "web");
        s.apply(1, EventType::Modified, k, o);
        let mut got = Vec::new();
        while let Ok(e) = sub.rx.try_recv() {
            let v: Value = serde_json::from_slice(e.line()).unwrap();
            assert_eq!(v["object"]["metadata"]["resourceVersion"], json!(e.rv()));
            got.push((e.pos.rv, v["object"]["metadata"]["labels"]["app"].as_str().unwrap().to_string()));
        }
        assert_eq!(got, [(2, "api".to_string()), (4, "web".to_string())]);
        // the cooling thread compresses what is still held (current state and ring)
        let cur = s.get("n1", "p1").pop().unwrap().1;
        let before = cur.decode("x");
        let deadline = Instant::now() + Duration::from_secs(20);
        while cur.is_hot() {
            assert!(Instant::now() < deadline, "not cooled");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(cur.decode("x"), before);
        assert!(cool::counts().0 > 0);
    }

    #[test]
    fn positions_from_before_a_member_reset_are_expired() {
        let s = store(1000);
        let a: Arc<str> = Arc::from("a");
        s.sync(1, &a, 100, vec![pod(&a, "n", "p", 90)]);
        let (k, o) = pod(&a, "n", "p", 120);
        s.apply(1, EventType::Modified, k, o);
        let before = s.current();
        // the member is rebuilt: its resourceVersions start again lower
        s.sync(2, &a, 10, vec![pod(&a, "n", "q", 5)]);
        let (k, o) = pod(&a, "n", "q", 11);
        s.apply(2, EventType::Modified, k, o);
        assert!(matches!(s.subscribe(Some(before.clone()), &WatchFilter::default()), Err(CacheError::Expired(_))), "a watch from before the reset");
        assert!(matches!(s.list_at(&before, Scope::default(), None, &|_, _| true, 0), Err(CacheError::Expired(_))), "an exact LIST from before the reset");
        // positions of the new history serve
        assert!(s.subscribe(Some(s.current()), &WatchFilter::default()).is_ok());
        assert_eq!(s.list_at(&s.current(), Scope::default(), None, &|_, _| true, 0).unwrap().len(), 1);
    }

    #[test]
    fn join_modify_resume_leave() {
        let s = store(1000);
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        s.sync(1, &a, 10, vec![pod(&a, "n", "p1", 5), pod(&a, "n", "p2", 6)]);
        let rv1 = GlobalRv::decode(&s.current_rv()).unwrap();
        s.sync(1, &b, 3, vec![pod(&b, "n", "p1", 2)]);
        let (k, o) = pod(&a, "n", "p1", 11);
        s.apply(1, EventType::Modified, k, o);
        assert_eq!(s.get("n", "p1").len(), 2);
        let sub = s.subscribe(Some(rv1), &WatchFilter::default()).unwrap();
        let kinds: Vec<_> = sub.replay.iter().map(|e| (e.cluster.to_string(), e.ty)).collect();
        assert_eq!(kinds, vec![("b".into(), EventType::Added), ("a".into(), EventType::Modified)]);
        let v: Value = serde_json::from_slice(sub.replay[1].line()).unwrap();
        assert_eq!(v["object"]["metadata"]["resourceVersion"], json!(sub.replay[1].rv()));
        assert_eq!(v["object"]["metadata"]["annotations"][CLUSTER_ANNOTATION], "a");
        // relist with one deleted, one changed, one new
        s.sync(1, &a, 20, vec![pod(&a, "n", "p1", 11), pod(&a, "n", "p3", 19)]);
        let l = s.list(None, Some("a"), None);
        assert_eq!(l.0.iter().map(|(k, _)| k.1.clone()).collect::<Vec<_>>(), vec!["p1", "p3"]);
        s.leave("b", 1);
        assert!(s.list(None, Some("b"), None).0.is_empty());
        assert!(GlobalRv::decode(&s.current_rv()).unwrap().0.contains_key("b"), "tombstone while in ring");
        // a stopped ingest (epoch 1) cannot bring b back; a new one (epoch 2) can
        s.sync(1, &b, 9, vec![pod(&b, "n", "p9", 8)]);
        assert!(!s.has_cluster("b"));
        s.sync(2, &b, 9, vec![pod(&b, "n", "p9", 8)]);
        assert!(s.has_cluster("b"));
    }

    #[test]
    fn eviction_expires_old_rvs() {
        let s = store(4);
        let a: Arc<str> = Arc::from("a");
        s.sync(1, &a, 1, vec![]);
        let start = GlobalRv::decode(&s.current_rv()).unwrap();
        for i in 0..10u64 {
            let (k, o) = pod(&a, "n", &format!("p{i}"), 2 + i);
            s.apply(1, EventType::Added, k, o);
        }
        assert!(matches!(s.subscribe(Some(start), &WatchFilter::default()), Err(CacheError::Expired(_))));
        let now = GlobalRv::decode(&s.current_rv()).unwrap();
        assert!(s.subscribe(Some(now), &WatchFilter::default()).unwrap().replay.is_empty());
        assert!(matches!(s.subscribe(Some(GlobalRv::default()), &WatchFilter::default()), Err(CacheError::Expired(_))));
    }

    /// The text inside a global resourceVersion (`a=10.1,b=3`).
    fn rv_text(rv: &str) -> String {
        use base64::Engine;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(rv.strip_prefix('g').expect("global")).expect("base64");
        String::from_utf8(raw).expect("utf-8")
    }

    /// The resourceVersion an event carries.
    fn ev_rv(e: &Event) -> String {
        e.rv().to_string()
    }

    /// Joins, member events, a bookmark, a delete of an unknown object, relists (one with
    /// changes, one without), a leave and (`rejoin`) a rejoin over three clusters; every event
    /// `s` recorded, in order.
    fn rv_script(s: &KindStore, rejoin: bool) -> Vec<Arc<Event>> {
        let mut all = s.subscribe(None, &WatchFilter::default()).unwrap();
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"), Arc::from("c"));
        let apply = |ty: EventType, (k, o): (Key, Obj)| s.apply(1, ty, k, o);
        s.sync(1, &a, 10, vec![pod(&a, "n1", "p1", 5), pod(&a, "n2", "p2", 6), pod(&a, "n3", "p3", 7)]);
        s.sync(1, &b, 3, vec![pod(&b, "n1", "q1", 2)]);
        apply(EventType::Modified, pod(&a, "n1", "p1", 11));
        s.progress("b", 8);
        apply(EventType::Added, pod(&b, "n2", "q2", 9));
        apply(EventType::Deleted, pod(&a, "n2", "p2", 12));
        apply(EventType::Deleted, pod(&a, "n4", "zz", 13));
        s.sync(1, &c, 100, vec![pod(&c, "n1", "r1", 90), pod(&c, "n3", "r2", 95)]);
        s.sync(1, &a, 20, vec![pod(&a, "n3", "p3", 19), pod(&a, "n4", "p4", 18)]);
        s.sync(1, &b, 25, vec![pod(&b, "n1", "q1", 2), pod(&b, "n2", "q2", 9)]);
        apply(EventType::Modified, pod(&c, "n1", "r1", 101));
        s.leave("c", 1);
        apply(EventType::Modified, pod(&a, "n4", "p4", 21));
        if rejoin {
            s.sync(2, &c, 200, vec![pod(&c, "n2", "r3", 150)]);
            apply(EventType::Modified, pod(&b, "n1", "q1", 26));
        }
        let mut out = Vec::new();
        while let Ok(e) = all.rx.try_recv() {
            out.push(e);
        }
        out
    }

    /// Each event carries the global position after it (every cluster's, bookmarks and
    /// position-only writes included) in the canonical wire form, its watch line carries the
    /// same, and a watch resumed from it replays exactly the events after it; a store keeping
    /// only some shards gives its events the same resourceVersions.
    #[test]
    fn events_carry_the_global_position_after_them_and_resume_exactly() {
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 10_000, Duration::from_secs(60), 3);
        let events = rv_script(&s, true);
        let got: Vec<String> = events.iter().map(|e| format!("{} {}.{} {} {}", e.cluster, e.pos.rv, e.pos.sub, e.ty.as_str(), rv_text(&ev_rv(e)))).collect();
        let want = [
            "a 10.1 ADDED a=10.1",
            "a 10.2 ADDED a=10.2",
            "a 10.3 ADDED a=10.3",
            "b 3.1 ADDED a=10.3,b=3.1",
            "a 11.0 MODIFIED a=11,b=3.1",
            // b's bookmark at 8 is passed by its next event
            "b 9.0 ADDED a=11,b=9",
            "a 12.0 DELETED a=12,b=9",
            // a's delete of an unknown object moved it to 13 without an event
            "c 100.1 ADDED a=13,b=9,c=100.1",
            "c 100.2 ADDED a=13,b=9,c=100.2",
            "a 20.1 DELETED a=20.1,b=9,c=100.2",
            "a 20.2 MODIFIED a=20.2,b=9,c=100.2",
            "a 20.3 ADDED a=20.3,b=9,c=100.2",
            // b's relist at 25 changed nothing but its position
            "c 101.0 MODIFIED a=20.3,b=25,c=101",
            "c 101.1 DELETED a=20.3,b=25,c=101.1",
            "c 101.2 DELETED a=20.3,b=25,c=101.2",
            "a 21.0 MODIFIED a=21,b=25,c=101.2",
            "c 200.1 ADDED a=21,b=25,c=200.1",
            "b 26.0 MODIFIED a=21,b=26,c=200.1",
        ];
        assert_eq!(got, want);
        for (i, e) in events.iter().enumerate() {
            let rv = ev_rv(e);
            assert_eq!(e.seq, i as u64 + 1);
            assert_eq!(GlobalRv::decode(&rv).unwrap().encode(), rv, "canonical");
            assert_eq!(GlobalRv::decode(&rv).unwrap().0[&*e.cluster], e.pos);
            let v: Value = serde_json::from_slice(e.line()).unwrap();
            assert_eq!(v["object"]["metadata"]["resourceVersion"], json!(rv));
        }
        assert_eq!(s.current_rv(), ev_rv(events.last().unwrap()));
        // positions within a join are expired (a cluster's resumable positions start after
        // its join events); after its rejoin, c's earlier positions name an older incarnation
        assert_eq!(resumed_or_expired(&s, &events), [0, 1, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        let before = KindStore::sharded(Arc::new(crate::api::registry::pod()), 10_000, Duration::from_secs(60), 3);
        let upto = rv_script(&before, false);
        assert_eq!(upto.len(), 16);
        assert_eq!(resumed_or_expired(&before, &upto), [0, 1, 7]);
        // one shard of four kept: its events only, though every write moves the positions
        let full = KindStore::sharded(Arc::new(crate::api::registry::pod()), 10_000, Duration::from_secs(60), 4);
        let part = KindStore::sharded(Arc::new(crate::api::registry::pod()), 10_000, Duration::from_secs(60), 4);
        part.own_only(&[0]);
        let (fe, pe) = (rv_script(&full, true), rv_script(&part, true));
        assert_eq!(fe.iter().map(|e| rv_text(&ev_rv(e))).collect::<Vec<_>>(), got.iter().map(|g| g.splitn(4, ' ').nth(3).unwrap().to_string()).collect::<Vec<_>>());
        let got: Vec<String> = pe.iter().map(|e| format!("{} {}.{} {} {}", e.cluster, e.pos.rv, e.pos.sub, e.ty.as_str(), rv_text(&ev_rv(e)))).collect();
        let want = [
            "a 10.1 ADDED a=10.1",
            // a's other objects are another process's: only its position moved
            "b 3.1 ADDED a=10.3,b=3.1",
            "a 11.0 MODIFIED a=11,b=3.1",
            "c 100.1 ADDED a=13,b=9,c=100.1",
            "a 20.1 DELETED a=20.1,b=9,c=100.2",
            // b's relist differs from what this store holds by an object it does not keep
            "c 101.0 MODIFIED a=20.3,b=25.1,c=101",
            "c 101.1 DELETED a=20.3,b=25.1,c=101.1",
            "b 26.0 MODIFIED a=21,b=26,c=200.1",
        ];
        assert_eq!(got, want);
        assert_eq!(rv_text(&part.current_rv()), "a=21,b=26,c=200.1");
    }

    /// Resumes a watch from each event's resourceVersion: one that serves replays exactly the
    /// events after it; returns the indexes of those that are expired.
    fn resumed_or_expired(s: &KindStore, events: &[Arc<Event>]) -> Vec<usize> {
        let mut expired = Vec::new();
        for (i, e) in events.iter().enumerate() {
            match s.subscribe(Some(GlobalRv::decode(&ev_rv(e)).unwrap()), &WatchFilter::default()) {
                Ok(sub) => {
                    let replay: Vec<u64> = sub.replay.iter().map(|e| e.seq).collect();
                    assert_eq!(replay, events[i + 1..].iter().map(|e| e.seq).collect::<Vec<_>>(), "resumed after event {i}");
                }
                Err(CacheError::Expired(_)) => expired.push(i),
                Err(e) => panic!("{e}"),
            }
        }
        expired
    }

    /// Recording an event keeps nothing per member: the ring's events share chunks of logged
    /// position changes holding a few positions per event, and starting chunks copies at most
    /// one position per event, with 4 members as with 300; the resourceVersions derived from
    /// them are every member's position after each event.
    #[test]
    fn recording_an_event_keeps_no_position_per_member() {
        for members in [4usize, 300] {
            let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 100_000, Duration::from_secs(60), 4);
            let mut all = s.subscribe(None, &WatchFilter::default()).unwrap();
            let clusters: Vec<Arc<str>> = (0..members).map(|i| Arc::from(format!("m{i:03}").as_str())).collect();
            for c in &clusters {
                s.sync(1, c, 1, vec![pod(c, "n", "p", 1)]);
            }
            for i in 0..3000u64 {
                let c = &clusters[(i as usize * 7) % members];
                let (k, o) = pod(c, &format!("n{}", i % 5), "p", 2 + i);
                s.apply(1, EventType::Added, k, o);
            }
            let events = members as u64 + 3000;
            assert!(s.lock().clusters.copied() <= events, "{members} members: {} positions copied for {events} events", s.lock().clusters.copied());
            let mut chunks = std::collections::HashMap::new();
            for i in 0..s.shard_count() {
                for e in &s.shard(i).ring {
                    let (held, id) = e.rv_at.held();
                    chunks.insert(id, held);
                }
            }
            let held: usize = chunks.values().sum();
            assert!(held as u64 <= 4 * events, "{members} members: the ring's events keep {held} positions for {events} events");
            // every event's resourceVersion: each member's position after it
            let mut model: BTreeMap<String, Pos> = BTreeMap::new();
            let mut n = 0;
            while let Ok(e) = all.rx.try_recv() {
                model.insert(e.cluster.to_string(), e.pos);
                assert_eq!(e.rv(), GlobalRv(model.clone()).encode(), "{members} members: event {}", e.seq);
                n += 1;
            }
            assert_eq!(n, events);
            assert_eq!(s.current(), GlobalRv(model));
        }
    }

    /// A departed cluster stays in the events' positions until its last event leaves the ring
    /// (the event that evicts it still names it).
    #[test]
    fn a_departed_cluster_leaves_the_positions_with_its_last_event() {
        let s = store(4);
        let mut all = s.subscribe(None, &WatchFilter::default()).unwrap();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        s.sync(1, &a, 1, vec![pod(&a, "n", "p1", 1)]);
        s.sync(1, &b, 1, vec![pod(&b, "n", "q1", 1), pod(&b, "n", "q2", 1)]);
        s.leave("b", 1);
        for rv in 2..9 {
            let (k, o) = pod(&a, "n", "p1", rv);
            s.apply(1, EventType::Modified, k, o);
        }
        let mut got = Vec::new();
        while let Ok(e) = all.rx.try_recv() {
            got.push(format!("{} {}.{} {}", e.cluster, e.pos.rv, e.pos.sub, rv_text(&ev_rv(&e))));
        }
        let want = [
            "a 1.1 a=1.1",
            "b 1.1 a=1.1,b=1.1",
            "b 1.2 a=1.1,b=1.2",
            "b 1.3 a=1.1,b=1.3",
            "b 1.4 a=1.1,b=1.4",
            "a 2.0 a=2,b=1.4",
            "a 3.0 a=3,b=1.4",
            "a 4.0 a=4,b=1.4",
            // this event evicts b's last one (the ring holds 4)
            "a 5.0 a=5,b=1.4",
            "a 6.0 a=6",
            "a 7.0 a=7",
            "a 8.0 a=8",
        ];
        assert_eq!(got, want);
        assert_eq!(rv_text(&s.current_rv()), "a=8");
    }

    fn names(items: &[(Key, Arc<Obj>)]) -> Vec<String> {
        items.iter().map(|(k, o)| format!("{}/{}@{}:{}", k.0, k.1, k.2, o.member_rv)).collect()
    }

    #[test]
    fn list_at_rolls_back_to_the_snapshot_across_shards() {
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 1000, Duration::from_secs(60), 3);
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        let pods = |c: &Arc<str>, rv: u64| (0..12).map(|i| pod(c, &format!("ns{}", i % 4), &format!("p{i}"), rv)).collect::<Vec<_>>();
        s.sync(1, &a, 10, pods(&a, 5));
        s.sync(1, &b, 20, pods(&b, 15));
        let at = s.current();
        let before = names(&s.list_at(&at, Scope::default(), None, &|_, _| true, 0).unwrap());
        assert_eq!(before.len(), 24);
        // churn after the snapshot: modify, delete, add, and a new cluster
        let (k, o) = pod(&a, "ns1", "p1", 11);
        s.apply(1, EventType::Modified, k, o);
        let (k, o) = pod(&b, "ns2", "p2", 21);
        s.apply(1, EventType::Deleted, k, o);
        let (k, o) = pod(&a, "ns0", "new", 12);
        s.apply(1, EventType::Added, k, o);
        let c: Arc<str> = Arc::from("c");
        s.sync(1, &c, 3, pods(&c, 2));
        // the snapshot is unchanged, page by page, whatever the page size
        for limit in [1, 5, 7, 100] {
            let mut got = Vec::new();
            let mut after: Option<Key> = None;
            loop {
                let page = s.list_at(&at, Scope::default(), after.as_ref(), &|_, _| true, limit).unwrap();
                after = page.last().map(|(k, _)| k.clone());
                got.extend(names(&page));
                if page.len() < limit {
                    break;
                }
            }
            assert_eq!(got, before, "limit {limit}");
        }
        // one namespace, one cluster
        let ns1 = s.list_at(&at, Scope { namespace: Some("ns1"), cluster: Some("a") }, None, &|_, _| true, 0).unwrap();
        assert_eq!(names(&ns1), vec!["ns1/p1@a:5", "ns1/p5@a:5", "ns1/p9@a:5"]);
        assert_eq!(s.list(None, None, None).0.len(), 24 - 1 + 1 + 12);
        // moving namespaces keeps both the objects and the history
        let map = crate::cache::shard::ShardMap { version: 2, shards: 3, namespaces: [("ns0".to_string(), vec![0, 1, 2]), ("ns1".to_string(), vec![2])].into() };
        let now = names(&s.list(None, None, None).0);
        s.apply_map(map);
        assert_eq!(s.map_version(), 2);
        assert_eq!(names(&s.list(None, None, None).0), now);
        assert_eq!(names(&s.list_at(&at, Scope::default(), None, &|_, _| true, 0).unwrap()), before);
        let sub = s.subscribe(Some(at.clone()), &WatchFilter::default()).unwrap();
        let seqs: Vec<u64> = sub.replay.iter().map(|e| e.seq).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]) && seqs.len() == 15, "{seqs:?}");
        assert_eq!(s.shard_stats().iter().map(|x| x.objects).sum::<usize>(), 36);
    }

    /// A LIST snapshot rolls back only the ring events after it, and finds them by walking the
    /// ring back from its newest event: at the current position nothing is walked; after a
    /// change, only back to it (the clusters' earlier events are at or before the snapshot).
    /// A watch from a position that lacks a cluster replays all of that cluster's events.
    #[test]
    fn a_snapshot_walks_the_ring_only_back_to_its_position() {
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 1000, Duration::from_secs(60), 2);
        s.apply_map(ShardMap { version: 2, shards: 2, namespaces: [("ns0".to_string(), vec![0]), ("ns1".to_string(), vec![1])].into() });
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        s.sync(1, &a, 10, (0..10).map(|i| pod(&a, &format!("ns{}", i % 2), &format!("p{i}"), 5)).collect());
        s.sync(1, &b, 20, (0..10).map(|i| pod(&b, &format!("ns{}", i % 2), &format!("p{i}"), 15)).collect());
        let after = |at: &GlobalRv, i: usize| -> Vec<usize> {
            let sh = s.shard(i);
            sh.ring.iter().enumerate().filter(|(_, e)| at.0.get(&*e.cluster).is_none_or(|p| e.pos > *p)).map(|(j, _)| j).collect()
        };
        let at = s.current();
        for i in 0..2 {
            let sh = s.shard(i);
            assert!(!sh.ring.is_empty());
            assert_eq!(sh.first_after(&at, false), sh.ring.len(), "shard {i}: nothing after the current position");
        }
        let (k, o) = pod(&a, "ns1", "p3", 11);
        s.apply(1, EventType::Modified, k.clone(), o);
        let changed = s.lock().map.shard(&k.0, &k.1, 2);
        for i in 0..2 {
            let (f, len, a_before) = {
                let sh = s.shard(i);
                let a_at = at.0["a"];
                (sh.first_after(&at, false), sh.ring.len(), sh.ring.iter().rposition(|e| &*e.cluster == "a" && e.pos <= a_at))
            };
            if i == changed {
                assert_eq!(after(&at, i), vec![len - 1]);
                // back to `a`'s last event at or before the snapshot, not further
                assert_eq!(Some(f), a_before, "shard {i}");
            } else {
                assert!(after(&at, i).is_empty());
                assert_eq!(f, len, "shard {i}");
            }
        }
        // an older snapshot of `a` (inside its list), `b` current
        let mut mid = at.clone();
        mid.0.insert("a".into(), Pos { rv: 10, sub: 4 });
        for i in 0..2 {
            let f = s.shard(i).first_after(&mid, false);
            let want = after(&mid, i);
            assert!(!want.is_empty() && want.iter().all(|j| *j >= f), "shard {i}: {want:?} from {f}");
            assert!(f == 0 || !after(&mid, i).contains(&(f - 1)));
        }
        // without `b`: a LIST leaves it out, a watch replays all of it
        let mut no_b = at.clone();
        no_b.0.remove("b");
        for i in 0..2 {
            let sh = s.shard(i);
            if sh.ring.iter().any(|e| &*e.cluster == "b") {
                assert_eq!(sh.first_after(&no_b, true), 0);
            }
        }
        assert_eq!(s.subscribe(Some(no_b), &WatchFilter::default()).unwrap().replay.len(), 11);
        assert_eq!(s.subscribe(Some(at.clone()), &WatchFilter::default()).unwrap().replay.len(), 1);
    }

    /// A page of one cluster's objects reads each shard only up to the page's last object, so
    /// a paged LIST of a cluster visits each stored object about once, not a page's worth of
    /// that cluster's objects in every shard per page; a cluster the snapshot does not name
    /// (another zone's member) visits none. The pages are the whole LIST's objects of the
    /// cluster, and the whole LIST's pages are the same merged from the shards.
    #[test]
    fn a_paged_list_of_one_cluster_visits_each_object_about_once() {
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 100_000, Duration::from_secs(60), 4);
        // ns0 … ns7 two to a shard, so every page draws on several shards
        s.apply_map(ShardMap { version: 2, shards: 4, namespaces: (0..8u32).map(|i| (format!("ns{i}"), vec![i % 4])).collect() });
        let clusters: Vec<Arc<str>> = (0..10).map(|i| Arc::from(format!("m{i}").as_str())).collect();
        for c in &clusters {
            // the same names in every cluster: the clusters' objects alternate in key order
            s.sync(1, c, 10, (0..200).map(|i| pod(c, &format!("ns{}", i % 8), &format!("p{i}"), 5)).collect());
        }
        assert_eq!(s.len(), 2000);
        let at = s.current();
        let whole = s.list_at(&at, Scope::default(), None, &|_, _| true, 0).unwrap();
        assert_eq!(whole.len(), 2000);
        let m3: Vec<(Key, Arc<Obj>)> = whole.iter().filter(|(k, _)| &*k.2 == "m3").cloned().collect();
        // pages as the view asks for them: `limit + 1` objects, to know whether more follow
        let pages = |scope: Scope<'_>, limit: usize| {
            let (mut got, mut after, mut visited, mut pages) = (Vec::new(), None::<Key>, 0, 0);
            loop {
                let (mut page, v) = s.list_at_visiting(&at, scope, after.as_ref(), &|_, _| true, limit + 1).unwrap();
                visited += v;
                pages += 1;
                let more = page.len() > limit;
                page.truncate(limit);
                after = page.last().map(|(k, _)| k.clone());
                got.extend(page);
                if !more {
                    return (got, visited, pages);
                }
            }
        };
        let (got, visited, n) = pages(Scope { namespace: None, cluster: Some("m3") }, 20);
        assert_eq!(names(&got), names(&m3));
        assert_eq!(n, 10);
        // (up to `limit + 1` of the cluster's objects read from every shard: 6,674 visited)
        assert!(visited < 2 * s.len(), "{visited} objects visited to list {} of {}", got.len(), s.len());
        let (page, visited) = s.list_at_visiting(&at, Scope { namespace: None, cluster: Some("elsewhere") }, None, &|_, _| true, 21).unwrap();
        assert!(page.is_empty());
        assert_eq!(visited, 0);
        for limit in [1, 7, 1000] {
            // each page visits what it reads and at most one object ahead in each shard
            let (got, visited, n) = pages(Scope::default(), limit);
            assert_eq!(names(&got), names(&whole), "limit {limit}");
            assert!(visited <= n * (limit + 1 + 4), "limit {limit}: {visited} objects visited in {n} pages");
        }
        let (got, _, _) = pages(Scope { namespace: Some("ns5"), cluster: Some("m3") }, 4);
        assert_eq!(names(&got), names(&m3.iter().filter(|(k, _)| k.0 == "ns5").cloned().collect::<Vec<_>>()));
    }

    /// The objects per namespace are kept as objects come, go and move between shards: always
    /// what counting the stored objects gives, without the namespaces left empty.
    #[test]
    fn namespace_counts_follow_writes_relists_moves_and_leaves() {
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 1000, Duration::from_secs(60), 3);
        let recount = |s: &KindStore| {
            let mut m: BTreeMap<String, usize> = BTreeMap::new();
            for (k, _) in s.list(None, None, None).0 {
                *m.entry(k.0).or_default() += 1;
            }
            m
        };
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        s.sync(1, &a, 10, (0..12).map(|i| pod(&a, &format!("ns{}", i % 4), &format!("p{i}"), 5)).collect());
        s.sync(1, &b, 20, (0..6).map(|i| pod(&b, &format!("ns{}", i % 3), &format!("p{i}"), 15)).collect());
        assert_eq!(s.namespace_counts(), recount(&s));
        assert_eq!(s.namespace_counts()["ns0"], 5);
        let (k, o) = pod(&a, "ns1", "p1", 11);
        s.apply(1, EventType::Modified, k, o);
        let (k, o) = pod(&a, "ns3", "p3", 12);
        s.apply(1, EventType::Deleted, k, o);
        let (k, o) = pod(&a, "other", "x", 13);
        s.apply(1, EventType::Added, k, o);
        assert_eq!(s.namespace_counts(), recount(&s));
        assert_eq!((s.namespace_counts()["ns3"], s.namespace_counts()["other"]), (2, 1));
        // a relist that leaves `a` one object
        s.sync(1, &a, 30, vec![pod(&a, "ns0", "p0", 30)]);
        assert_eq!(s.namespace_counts(), recount(&s));
        s.apply_map(ShardMap { version: 2, shards: 3, namespaces: [("ns0".to_string(), vec![0, 1, 2]), ("ns1".to_string(), vec![2])].into() });
        assert_eq!(s.namespace_counts(), recount(&s));
        s.leave("b", 1);
        assert_eq!(s.namespace_counts(), BTreeMap::from([("ns0".to_string(), 1)]));
    }

    #[test]
    fn snapshot_outside_the_window_is_expired() {
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 8, Duration::from_secs(0), 2);
        let a: Arc<str> = Arc::from("a");
        s.sync(1, &a, 1, vec![pod(&a, "n", "p", 1)]);
        let at = s.current();
        for i in 0..20u64 {
            let (k, o) = pod(&a, "n", "p", 2 + i);
            s.apply(1, EventType::Modified, k, o);
        }
        assert!(matches!(s.list_at(&at, Scope::default(), None, &|_, _| true, 0), Err(CacheError::Expired(_))));
        assert_eq!(s.list_at(&s.current(), Scope::default(), None, &|_, _| true, 0).unwrap().len(), 1);
    }

    #[test]
    fn a_live_watch_crosses_a_rebalance_without_gap_or_duplicate() {
        let s = KindStore::sharded(Arc::new(crate::api::registry::pod()), 1000, Duration::from_secs(60), 4);
        let a: Arc<str> = Arc::from("a");
        s.sync(1, &a, 1, (0..40).map(|i| pod(&a, &format!("ns{}", i % 5), &format!("p{i}"), 1)).collect());
        let mut sub = s.subscribe(Some(s.current()), &WatchFilter::default()).unwrap();
        let mut rv = 2;
        let mut churn = |s: &KindStore, n: usize| {
            for i in 0..n {
                let (k, o) = pod(&a, &format!("ns{}", i % 5), &format!("p{}", i % 40), rv);
                s.apply(1, EventType::Modified, k, o);
                rv += 1;
            }
        };
        churn(&s, 30);
        let counts = s.namespace_counts();
        s.apply_map(crate::cache::shard::ShardMap::balance(&counts, 4, 5));
        churn(&s, 30);
        s.apply_map(crate::cache::shard::ShardMap { version: 6, shards: 4, namespaces: [("ns0".to_string(), vec![3])].into() });
        churn(&s, 30);
        let mut got = Vec::new();
        while let Ok(e) = sub.rx.try_recv() {
            got.push(e.pos.rv);
        }
        assert_eq!(got, (2..92).collect::<Vec<_>>());
        assert_eq!(s.len(), 40);
    }
}
