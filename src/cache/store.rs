//! One cached kind: current objects of every member plus a ring buffer of recent events
//! (mirrors kube-apiserver's cacher/watchCache: a store + a cyclic event buffer, events encoded
//! once and shared by all watchers).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use super::codec::{Codec, Dictionaries};
use super::rv::{GlobalRv, Pos};
use super::{CacheError, CLUSTER_ANNOTATION};
use crate::api::registry::ResourceInfo;

/// Annotation carrying the object's resourceVersion in its member cluster.
pub const MEMBER_RV_ANNOTATION: &str = "fedctl.io/member-resource-version";

/// Smallest ring buffer (kube-apiserver's watch cache starts at 100 events).
const RING_MIN: usize = 100;
/// Broadcast channel depth per kind; a watcher that falls further behind is ended (as the
/// cacher ends blocked watchers) and resumes from its last resourceVersion.
const BROADCAST_DEPTH: usize = 8192;

/// Where an object sits: (namespace or `""`, name, cluster). Objects are ordered by it, so a
/// namespace is a contiguous range and the key is the LIST cursor.
pub type Key = (String, String, Arc<str>);

/// One cached object, stored compactly: the encoded JSON without `metadata.resourceVersion`
/// and with the cluster annotations already spliced in (`apiVersion`, `kind`, `metadata`
/// first), compressed by its kind's [`Codec`] (see [`crate::cache::codec`]), plus where to
/// splice a resourceVersion. `managedFields` are kept as the member sent them.
#[derive(Debug)]
pub struct Obj {
    /// The member cluster.
    pub cluster: Arc<str>,
    /// The member's resourceVersion of this state.
    pub member_rv: u64,
    /// The compressed JSON (one zstd frame).
    body: Box<[u8]>,
    /// The codec that made `body`.
    codec: Arc<Codec>,
    /// Offset just after `"metadata":{` in the uncompressed JSON.
    meta_at: u32,
    /// Length of the uncompressed JSON.
    raw_len: u32,
}

impl Obj {
    /// Builds the stored form of a member object, compressed with the kind's codec from
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
        let too_big = || CacheError::Member(format!("object {ns}/{name} larger than 4 GiB"));
        let raw_len = u32::try_from(out.len()).map_err(|_| too_big())?;
        let meta_at = u32::try_from(meta_at).map_err(|_| too_big())?;
        let kind_key = format!("{}/{}", api_version.as_str().unwrap_or(""), kind.as_str().unwrap_or(""));
        let codec = Dictionaries::global().codec_for(&kind_key, &out);
        let body = codec.compress(&out).map_err(|e| CacheError::Member(e.to_string()))?;
        let obj = Obj { cluster: cluster.clone(), member_rv, body, codec, meta_at, raw_len };
        Ok(((ns, name, cluster.clone()), obj))
    }

    /// Length of the object's JSON without a resourceVersion (bytes).
    pub fn raw_len(&self) -> usize {
        self.raw_len as usize
    }

    /// Bytes held for the object's body (compressed).
    pub fn stored_len(&self) -> usize {
        self.body.len()
    }

    /// Appends the object with `metadata.resourceVersion` = `rv` to `out` (decompressing it).
    pub fn write_with_rv(&self, rv: &str, out: &mut Vec<u8>) {
        let start = out.len();
        if let Err(e) = self.codec.decompress_into(&self.body, out) {
            // frames are made in this process: failing here is a bug, not bad input
            tracing::error!(cluster = %self.cluster, error = %e, "cached object unreadable");
            out.extend_from_slice(b"{}");
            return;
        }
        let at = start + self.meta_at as usize;
        let mut ins = Vec::with_capacity(rv.len() + 24);
        ins.extend_from_slice(b"\"resourceVersion\":");
        serde_json::to_writer(&mut ins, rv).expect("serializable");
        if out.get(at) != Some(&b'}') {
            ins.push(b',');
        }
        out.splice(at..at, ins);
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
    /// The previous state for MODIFIED (selector transitions).
    pub prev: Option<Arc<Obj>>,
    /// The global resourceVersion after this event.
    pub grv: String,
    /// The watch line `{"type":…,"object":…}\n` with `grv` in the object: encoded by the
    /// first watcher that sends it, then shared (see [`Event::line`]).
    line: OnceLock<Bytes>,
    /// When it was recorded (window accounting).
    pub at: Instant,
}

impl Event {
    /// The encoded watch line (encoded once, on first use, and shared by all watchers).
    pub fn line(&self) -> &Bytes {
        self.line.get_or_init(|| {
            let mut line = Vec::with_capacity(self.obj.raw_len() + self.grv.len() + 64);
            line.extend_from_slice(b"{\"type\":\"");
            line.extend_from_slice(self.ty.as_str().as_bytes());
            line.extend_from_slice(b"\",\"object\":");
            self.obj.write_with_rv(&self.grv, &mut line);
            line.extend_from_slice(b"}\n");
            Bytes::from(line)
        })
    }
}

/// What the store remembers of one cluster.
#[derive(Clone, Debug)]
struct ClusterRec {
    /// Position of its last event (or bookmark-free list).
    pos: Pos,
    /// Position after its join events: resuming needs a position at least this new.
    base_end: Pos,
    /// Position of its newest evicted event: resuming needs a position at least this new.
    evicted_upto: Option<Pos>,
    /// The cluster left; the record stays while its events are in the ring.
    departed: bool,
    /// Its events in the ring.
    in_ring: usize,
}

/// What a new watcher starts from.
pub struct Subscription {
    /// Current objects to send as ADDED first (`None` when resuming).
    pub snapshot: Option<Vec<(Key, Arc<Obj>)>>,
    /// Events after the client's resourceVersion, in order (resume only).
    pub replay: Vec<Arc<Event>>,
    /// The global resourceVersion the watcher is at before `replay` (or after `snapshot`).
    pub start: GlobalRv,
    /// Live events after those.
    pub rx: broadcast::Receiver<Arc<Event>>,
}

/// A LIST snapshot.
pub struct Listing {
    /// Objects in key order (only the requested namespace/cluster, after the cursor).
    pub items: Vec<(Key, Arc<Obj>)>,
    /// The global resourceVersion of the state listed.
    pub grv: String,
}

struct Inner {
    /// Per cluster, the newest ingest epoch that was stopped by [`KindStore::leave`]: writes
    /// from an ingest of that epoch or older (a task still finishing after its abort) are
    /// ignored.
    fence: BTreeMap<Arc<str>, u64>,
    objects: BTreeMap<Key, Arc<Obj>>,
    ring: VecDeque<Arc<Event>>,
    cap: usize,
    clusters: BTreeMap<Arc<str>, ClusterRec>,
}

/// The cache of one kind across all members (see the module docs of [`crate::cache`]).
pub struct KindStore {
    /// The kind (with the CLUSTER Table column).
    pub info: Arc<ResourceInfo>,
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Event>>,
    max_events: usize,
    window: Duration,
}

impl KindStore {
    /// An empty store; the ring grows from 100 events while its oldest event is younger than
    /// `window` (kube-apiserver: 75 s), up to `max_events` (kube-apiserver: 102,400).
    pub fn new(info: Arc<ResourceInfo>, max_events: usize, window: Duration) -> KindStore {
        KindStore {
            info,
            inner: Mutex::new(Inner { fence: BTreeMap::new(), objects: BTreeMap::new(), ring: VecDeque::new(), cap: RING_MIN.min(max_events.max(1)), clusters: BTreeMap::new() }),
            tx: broadcast::channel(BROADCAST_DEPTH).0,
            max_events: max_events.max(1),
            window,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.lock().objects.len()
    }

    /// True when no object is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The current global resourceVersion.
    pub fn current_rv(&self) -> String {
        grv_of(&self.lock().clusters).encode()
    }

    /// Clusters that currently have (non-departed) state here.
    pub fn has_cluster(&self, cluster: &str) -> bool {
        self.lock().clusters.get(cluster).is_some_and(|r| !r.departed)
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
            Some(rec) if list_rv >= rec.pos.rv => {
                let mut next = if list_rv > rec.pos.rv { Pos::member(list_rv) } else { rec.pos };
                let mut fresh: BTreeMap<Key, Obj> = objs.into_iter().collect();
                let old: Vec<(Key, Arc<Obj>)> =
                    g.objects.iter().filter(|(k, _)| k.2 == *cluster).map(|(k, v)| (k.clone(), v.clone())).collect();
                for (k, o) in old {
                    match fresh.remove(&k) {
                        None => {
                            next.sub += 1;
                            self.record(&mut g, EventType::Deleted, k, o, None, next);
                        }
                        Some(n) if n.member_rv != o.member_rv => {
                            next.sub += 1;
                            self.record(&mut g, EventType::Modified, k, Arc::new(n), Some(o), next);
                        }
                        Some(_) => {}
                    }
                }
                for (k, n) in fresh {
                    next.sub += 1;
                    self.record(&mut g, EventType::Added, k, Arc::new(n), None, next);
                }
                if let Some(r) = g.clusters.get_mut(cluster) {
                    r.pos = r.pos.max(next);
                }
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
                g.clusters.insert(
                    cluster.clone(),
                    ClusterRec { pos: base, base_end: Pos { rv: list_rv, sub: n }, evicted_upto: None, departed: false, in_ring },
                );
                for (i, (k, o)) in objs.into_iter().enumerate() {
                    self.record(&mut g, EventType::Added, k, Arc::new(o), None, Pos { rv: list_rv, sub: i as u32 + 1 });
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
        if pos <= rec.pos {
            return;
        }
        match ty {
            EventType::Added | EventType::Modified => {
                let prev = g.objects.get(&key).cloned();
                let ty = if prev.is_some() { EventType::Modified } else { EventType::Added };
                self.record(&mut g, ty, key, Arc::new(obj), prev, pos);
            }
            EventType::Deleted => {
                if g.objects.contains_key(&key) {
                    self.record(&mut g, EventType::Deleted, key, Arc::new(obj), None, pos);
                } else if let Some(r) = g.clusters.get_mut(&key.2) {
                    r.pos = pos;
                }
            }
        }
    }

    /// A member's progress without an event (a bookmark): advances its position.
    pub fn progress(&self, cluster: &str, rv: u64) {
        let mut g = self.lock();
        if let Some(r) = g.clusters.get_mut(cluster).filter(|r| !r.departed) {
            if Pos::member(rv) > r.pos {
                r.pos = Pos::member(rv);
            }
        }
    }

    /// A cluster left: DELETED for each of its objects. Its entry stays in the global
    /// resourceVersion while its events are in the ring. Later writes from ingests of epoch
    /// `fence` or older are ignored.
    pub fn leave(&self, cluster: &str, fence: u64) {
        let mut g = self.lock();
        let f = g.fence.entry(Arc::from(cluster)).or_insert(0);
        *f = (*f).max(fence);
        let Some(rec) = g.clusters.get(cluster).filter(|r| !r.departed).cloned() else { return };
        let mut next = rec.pos;
        let old: Vec<(Key, Arc<Obj>)> = g.objects.iter().filter(|(k, _)| &*k.2 == cluster).map(|(k, v)| (k.clone(), v.clone())).collect();
        for (k, o) in old {
            next.sub += 1;
            self.record(&mut g, EventType::Deleted, k, o, None, next);
        }
        if let Some(r) = g.clusters.get_mut(cluster) {
            r.departed = true;
            if r.in_ring == 0 {
                g.clusters.remove(cluster);
            }
        }
    }

    /// Applies one event to the objects, the cluster's position, the ring and the watchers.
    fn record(&self, g: &mut Inner, ty: EventType, key: Key, obj: Arc<Obj>, prev: Option<Arc<Obj>>, pos: Pos) {
        match ty {
            EventType::Deleted => {
                g.objects.remove(&key);
            }
            _ => {
                g.objects.insert(key.clone(), obj.clone());
            }
        }
        if let Some(r) = g.clusters.get_mut(&key.2) {
            r.pos = pos;
            r.in_ring += 1;
        }
        let grv = grv_of(&g.clusters).encode();
        let (namespace, name, cluster) = key;
        let ev = Arc::new(Event { cluster, pos, ty, namespace, name, obj, prev, grv, line: OnceLock::new(), at: Instant::now() });
        while g.ring.len() >= g.cap {
            let oldest_young = g.ring.front().is_some_and(|e| e.at.elapsed() < self.window);
            if oldest_young && g.cap < self.max_events {
                g.cap = (g.cap * 2).min(self.max_events);
                continue;
            }
            let Some(old) = g.ring.pop_front() else { break };
            let drop_rec = match g.clusters.get_mut(&old.cluster) {
                Some(r) => {
                    r.in_ring -= 1;
                    r.evicted_upto = Some(r.evicted_upto.map_or(old.pos, |p| p.max(old.pos)));
                    r.departed && r.in_ring == 0
                }
                None => false,
            };
            if drop_rec {
                g.clusters.remove(&old.cluster);
            }
        }
        g.ring.push_back(ev.clone());
        let _ = self.tx.send(ev);
    }

    /// Objects after `after` (exclusive) in `namespace` (all when `None`) of `cluster` (all
    /// when `None`), with the global resourceVersion of that state.
    pub fn list(&self, namespace: Option<&str>, cluster: Option<&str>, after: Option<&Key>) -> Listing {
        use std::ops::Bound;
        let g = self.lock();
        let lower = match (after, namespace) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new(), Arc::from(""))),
            (None, None) => Bound::Unbounded,
        };
        let items = g
            .objects
            .range((lower, Bound::Unbounded))
            .take_while(|(k, _)| namespace.is_none_or(|ns| k.0 == ns))
            .filter(|(k, _)| cluster.is_none_or(|c| &*k.2 == c))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Listing { items, grv: grv_of(&g.clusters).encode() }
    }

    /// Objects named `name` in `namespace` (`""` for cluster-scoped), one per cluster.
    pub fn get(&self, namespace: &str, name: &str) -> Vec<(Key, Arc<Obj>)> {
        let g = self.lock();
        let lo = (namespace.to_string(), name.to_string(), Arc::<str>::from(""));
        g.objects
            .range(lo..)
            .take_while(|(k, _)| k.0 == namespace && k.1 == name)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Starts a watch: from the current state (`from` = `None`: snapshot + live events) or
    /// resuming after global resourceVersion `from`. Errors: [`CacheError::Expired`] when a
    /// cluster's entry is older than what the ring holds (or names a cluster the cache does
    /// not know any more), or a cluster the client has not seen has events evicted.
    pub fn subscribe(&self, from: Option<GlobalRv>) -> Result<Subscription, CacheError> {
        let g = self.lock();
        let rx = self.tx.subscribe();
        let Some(from) = from else {
            let snapshot = g.objects.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            return Ok(Subscription { snapshot: Some(snapshot), replay: vec![], start: grv_of(&g.clusters), rx });
        };
        for (c, p) in &from.0 {
            let Some(rec) = g.clusters.get(c.as_str()) else {
                return Err(CacheError::Expired(format!("too old resource version: cluster {c} is not in the watch window")));
            };
            if *p < rec.base_end || rec.evicted_upto.is_some_and(|e| *p < e) {
                return Err(CacheError::Expired(format!(
                    "too old resource version: cluster {c} at {}.{} (oldest {}.{})",
                    p.rv,
                    p.sub,
                    rec.evicted_upto.unwrap_or(rec.base_end).max(rec.base_end).rv,
                    rec.evicted_upto.unwrap_or(rec.base_end).max(rec.base_end).sub
                )));
            }
        }
        for (c, rec) in &g.clusters {
            if !from.0.contains_key(&**c) && rec.evicted_upto.is_some() {
                return Err(CacheError::Expired(format!("too old resource version: cluster {c} is missing and its early events left the window")));
            }
        }
        let replay = g.ring.iter().filter(|e| from.0.get(&*e.cluster).is_none_or(|p| e.pos > *p)).cloned().collect();
        Ok(Subscription { snapshot: None, replay, start: from, rx })
    }

    /// Ring buffer length and capacity (metrics, tests).
    pub fn ring_stats(&self) -> (usize, usize) {
        let g = self.lock();
        (g.ring.len(), g.cap)
    }
}

fn grv_of(clusters: &BTreeMap<Arc<str>, ClusterRec>) -> GlobalRv {
    GlobalRv(clusters.iter().map(|(c, r)| (c.to_string(), r.pos)).collect())
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
        let sub = s.subscribe(Some(rv1)).unwrap();
        let kinds: Vec<_> = sub.replay.iter().map(|e| (e.cluster.to_string(), e.ty)).collect();
        assert_eq!(kinds, vec![("b".into(), EventType::Added), ("a".into(), EventType::Modified)]);
        let v: Value = serde_json::from_slice(sub.replay[1].line()).unwrap();
        assert_eq!(v["object"]["metadata"]["resourceVersion"], json!(sub.replay[1].grv));
        assert_eq!(v["object"]["metadata"]["annotations"][CLUSTER_ANNOTATION], "a");
        // relist with one deleted, one changed, one new
        s.sync(1, &a, 20, vec![pod(&a, "n", "p1", 11), pod(&a, "n", "p3", 19)]);
        let l = s.list(None, Some("a"), None);
        assert_eq!(l.items.iter().map(|(k, _)| k.1.clone()).collect::<Vec<_>>(), vec!["p1", "p3"]);
        s.leave("b", 1);
        assert!(s.list(None, Some("b"), None).items.is_empty());
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
        assert!(matches!(s.subscribe(Some(start)), Err(CacheError::Expired(_))));
        let now = GlobalRv::decode(&s.current_rv()).unwrap();
        assert!(s.subscribe(Some(now)).unwrap().replay.is_empty());
        assert!(matches!(s.subscribe(Some(GlobalRv::default())), Err(CacheError::Expired(_))));
    }
}
