//! The simulator's store with generated objects rendered on read: a [`PackedStorage`] overlay of changes over a fixed, virtual base.
//!
//! A virtual member does not hold its generated nodes and pods. They form a *base layer*
//! ([`GeneratedSet`]): a sorted sequence of keys whose values are produced on demand from the
//! generator's plan (seed, index). Only what changed is stored in the overlay (the existing
//! [`PackedStorage`]): churn, controller and client writes, and deletions of generated objects
//! as *tombstones* (a marker value under the object's key). Memory therefore grows with the
//! changes, not with the member's size.
//!
//! Semantics, as one etcd-like store:
//! - every generated object has `create_revision = mod_revision = base`, the store revision
//!   at which the layer was installed; reads at revisions before `base` do not see them;
//! - `get`: the overlay's value if any (a tombstone answers not found), else the generated one;
//! - `list`: a merge in key order of the overlay range (read at the requested revision, with
//!   its history) and the base range found by binary search (no materialisation); an overlay
//!   entry wins over the generated one of the same key; `remaining` is exact;
//! - `create` of a generated key: `AlreadyExists` (unless tombstoned: then it replaces the
//!   tombstone); `update`/`delete` of an untouched generated object expect its revision `base`
//!   and write the new value or a tombstone into the overlay;
//! - `watch`: only overlay changes produce events; a tombstone put is delivered as a
//!   `Delete` whose previous state is the generated object (or its last overlay value), and the
//!   first write of a generated object as a modification with the generated object as `prev`.
//!
//! Without a layer installed the store behaves exactly as the [`PackedStorage`] under it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use super::core_key;
use super::generate::PodPlan;
use super::store::{self, PackedStorage};
use crate::api::{object, ResourceInfo};
use crate::storage::{KeyValue, ListResult, Storage, StorageError, WatchEvent, WatchStream};

/// The value that marks a deleted generated object in the overlay (never valid JSON, never an
/// LZ4-packed value, which start with `{` and `0x01`).
const TOMBSTONE: &[u8] = b"\x02fedsim-tombstone";

fn is_tombstone(v: &[u8]) -> bool {
    v == TOMBSTONE
}

/// Generated objects in ascending key order, addressed by position `0..len()`.
///
/// Implementations must give strictly increasing keys (byte order, as the overlay's map)
/// and the same value for a position every time.
pub trait GeneratedSet: Send + Sync + 'static {
    /// Number of generated objects.
    fn len(&self) -> usize;
    /// True when there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Full storage key of the object at `pos`.
    fn key_at(&self, pos: usize) -> String;
    /// Stored bytes (storage JSON, no resourceVersion) of the object at `pos`.
    fn value_at(&self, pos: usize) -> Bytes;
}

/// First position whose key is `>= key`.
fn lower_bound(set: &dyn GeneratedSet, key: &str) -> usize {
    let (mut lo, mut hi) = (0, set.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if set.key_at(mid).as_str() < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The smallest key greater than every key starting with `prefix` (`None`: no bound).
fn prefix_end(prefix: &str) -> Option<String> {
    let mut b = prefix.as_bytes().to_vec();
    while let Some(last) = b.pop() {
        if last < 0xff {
            b.push(last + 1);
            return Some(String::from_utf8_lossy(&b).into_owned());
        }
    }
    None
}

/// An installed base layer.
struct Layer {
    set: Arc<dyn GeneratedSet>,
    /// Revision the generated objects carry.
    base: i64,
    /// Generated keys that have (or had) an overlay entry: a modified value or a tombstone.
    /// Overlay keys never leave the overlay while the layer lives, so this tells, for any
    /// overlay entry, whether it shadows a generated object.
    shadowed: Mutex<HashSet<Box<str>>>,
}

impl Layer {
    fn position(&self, key: &str) -> Option<usize> {
        let pos = lower_bound(self.set.as_ref(), key);
        (pos < self.set.len() && self.set.key_at(pos) == key).then_some(pos)
    }

    fn kv_at(&self, pos: usize, key: String) -> KeyValue {
        KeyValue { key, value: self.set.value_at(pos), create_revision: self.base, mod_revision: self.base }
    }

    fn generated(&self, key: &str) -> Option<KeyValue> {
        self.position(key).map(|pos| self.kv_at(pos, key.to_string()))
    }

    fn shadow(&self, key: &str) {
        self.shadowed.lock().unwrap_or_else(|e| e.into_inner()).insert(key.into());
    }

    fn is_shadowed(&self, key: &str) -> bool {
        self.shadowed.lock().unwrap_or_else(|e| e.into_inner()).contains(key)
    }
}

/// A store of changes over a virtual base layer (see the module docs). Cheap to share via `Arc`.
pub struct OverlayStorage {
    packed: PackedStorage,
    layer: Arc<RwLock<Option<Arc<Layer>>>>,
}

impl OverlayStorage {
    /// An empty store without a layer, keeping `history` changes (see [`PackedStorage::new`]).
    pub fn new(history: usize) -> Self {
        OverlayStorage { packed: PackedStorage::new(history), layer: Arc::default() }
    }

    /// The overlay (values compressed, tombstones included).
    pub fn packed(&self) -> &PackedStorage {
        &self.packed
    }

    /// Installs `set` as the base layer at the current revision, which its objects carry;
    /// returns that revision. Replaces a previous layer.
    pub async fn install(&self, set: Arc<dyn GeneratedSet>) -> Result<i64, StorageError> {
        let base = self.packed.current_revision().await?;
        *self.layer.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(Layer { set, base, shadowed: Mutex::default() }));
        Ok(base)
    }

    /// Number of generated objects in the base layer (0 without one).
    pub fn generated_count(&self) -> usize {
        self.current().map_or(0, |l| l.set.len())
    }

    /// Keys held in the overlay (changed objects, tombstones, everything not generated).
    pub fn key_count(&self) -> usize {
        self.packed.key_count()
    }

    /// Drops the layer, all state and history (see [`PackedStorage::reset`]).
    pub fn reset(&self) -> i64 {
        *self.layer.write().unwrap_or_else(|e| e.into_inner()) = None;
        self.packed.reset()
    }

    /// Creates `key` with an already packed value (bulk load; see [`PackedStorage::create_packed`]).
    pub async fn create_packed(&self, key: &str, packed: Bytes) -> Result<i64, StorageError> {
        self.packed.create_packed(key, packed).await
    }

    /// Oldest revision still served by lists and watches.
    pub fn compacted_revision(&self) -> i64 {
        self.packed.memory().compacted_revision()
    }

    fn current(&self) -> Option<Arc<Layer>> {
        self.layer.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A watch like [`Storage::watch`] whose updates carry an empty previous value (see
    /// [`PackedStorage::watch_without_prev`]): generated objects are then only rendered for
    /// deletions.
    pub async fn watch_without_prev(&self, prefix: &str, after_revision: i64) -> Result<WatchStream, StorageError> {
        let inner = self.packed.watch_without_prev(prefix, after_revision).await?;
        Ok(translate(inner, self.layer.clone(), false))
    }

    /// Maps a `Conflict` whose current state is a tombstone to `NotFound`.
    fn tomb_conflict(e: StorageError) -> StorageError {
        match e {
            StorageError::Conflict { key, current: Some(kv) } if is_tombstone(&kv.value) => StorageError::NotFound(key),
            other => other,
        }
    }
}

/// Turns overlay watch events into the events of the merged store (see the module docs).
fn translate(inner: WatchStream, layer: Arc<RwLock<Option<Arc<Layer>>>>, with_prev: bool) -> WatchStream {
    let current = move || layer.read().unwrap_or_else(|e| e.into_inner()).clone();
    Box::pin(inner.map(move |ev| {
        let ev = ev?;
        Ok(match ev {
            WatchEvent::Put { kv, prev } if is_tombstone(&kv.value) => {
                let prev = match prev {
                    Some(p) if !p.value.is_empty() && !is_tombstone(&p.value) => p,
                    // the generated object; without prev values (the controllers' watch) also
                    // when the deleted object had been modified: its last stored value is not
                    // at hand there; the controllers only read its owner references, and the
                    // owners generated pods name do not exist as objects
                    _ => current().and_then(|l| l.generated(&kv.key)).unwrap_or(KeyValue { key: kv.key.clone(), value: Bytes::new(), create_revision: 0, mod_revision: 0 }),
                };
                WatchEvent::Delete { revision: kv.mod_revision, prev }
            }
            WatchEvent::Put { kv, prev } => {
                let prev = match prev {
                    Some(p) if is_tombstone(&p.value) => None,
                    Some(p) => Some(p),
                    None => match current() {
                        Some(l) if l.is_shadowed(&kv.key) => {
                            if with_prev {
                                l.generated(&kv.key)
                            } else {
                                Some(KeyValue { key: kv.key.clone(), value: Bytes::new(), create_revision: l.base, mod_revision: l.base })
                            }
                        }
                        _ => None,
                    },
                };
                WatchEvent::Put { kv, prev }
            }
            other => other,
        })
    }))
}

#[async_trait]
impl Storage for OverlayStorage {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        match self.packed.get(key).await? {
            Some(kv) if is_tombstone(&kv.value) => Ok(None),
            Some(kv) => Ok(Some(kv)),
            None => Ok(self.current().and_then(|l| l.generated(key))),
        }
    }

    async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<ListResult, StorageError> {
        let Some(layer) = self.current() else {
            let mut res = self.packed.list(prefix, start, limit, revision).await?;
            res.kvs.retain(|kv| !is_tombstone(&kv.value));
            return Ok(res);
        };
        let from = if start > prefix { start } else { prefix };
        // the whole overlay range from `from` (values still packed): usually small
        let ov = self.packed.memory().list(prefix, from, 0, revision).await?;
        let at = ov.revision;
        let set = layer.set.as_ref();
        let (mut vpos, vend) = if at >= layer.base {
            let end = prefix_end(prefix).map_or(set.len(), |e| lower_bound(set, &e));
            (lower_bound(set, from).min(end), end)
        } else {
            (0, 0)
        };
        let limit = if limit <= 0 { usize::MAX } else { limit as usize };
        let mut kvs = Vec::new();
        let mut overlay = ov.kvs.into_iter().peekable();
        let mut vkey: Option<String> = None;
        while kvs.len() < limit {
            if vkey.is_none() && vpos < vend {
                vkey = Some(set.key_at(vpos));
            }
            let take_overlay = match (&vkey, overlay.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(v), Some(o)) => match v.as_str().cmp(o.key.as_str()) {
                    std::cmp::Ordering::Less => false,
                    std::cmp::Ordering::Greater => true,
                    std::cmp::Ordering::Equal => {
                        // the overlay entry replaces (or deletes) the generated object
                        vkey = None;
                        vpos += 1;
                        true
                    }
                },
            };
            if take_overlay {
                let mut kv = overlay.next().expect("peeked");
                if !is_tombstone(&kv.value) {
                    kv.value = store::unpack(&kv.value)?;
                    kvs.push(kv);
                }
            } else {
                let key = vkey.take().expect("virtual key");
                kvs.push(layer.kv_at(vpos, key));
                vpos += 1;
            }
        }
        // what is left: the generated objects, corrected by the overlay entries among them
        let mut remaining = (vend - vpos) as i64;
        let shadowed = layer.shadowed.lock().unwrap_or_else(|e| e.into_inner());
        for kv in overlay {
            if is_tombstone(&kv.value) {
                remaining -= 1;
            } else if !shadowed.contains(kv.key.as_str()) {
                remaining += 1;
            }
        }
        Ok(ListResult { kvs, revision: at, remaining })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<i64, StorageError> {
        loop {
            match self.packed.get(key).await? {
                Some(kv) if is_tombstone(&kv.value) => match self.packed.update(key, value.clone(), kv.mod_revision).await {
                    Err(StorageError::Conflict { .. }) | Err(StorageError::NotFound(_)) => continue,
                    other => return other,
                },
                Some(_) => return Err(StorageError::AlreadyExists(key.to_string())),
                None => {
                    if self.current().is_some_and(|l| l.position(key).is_some()) {
                        return Err(StorageError::AlreadyExists(key.to_string()));
                    }
                    return self.packed.create(key, value).await;
                }
            }
        }
    }

    async fn update(&self, key: &str, value: Bytes, expected_revision: i64) -> Result<i64, StorageError> {
        loop {
            match self.packed.get(key).await? {
                Some(kv) if is_tombstone(&kv.value) => return Err(StorageError::NotFound(key.to_string())),
                Some(_) => return self.packed.update(key, value, expected_revision).await.map_err(Self::tomb_conflict),
                None => {
                    let Some(layer) = self.current() else { return Err(StorageError::NotFound(key.to_string())) };
                    let Some(current) = layer.generated(key) else { return Err(StorageError::NotFound(key.to_string())) };
                    if expected_revision != layer.base {
                        return Err(StorageError::Conflict { key: key.to_string(), current: Some(current) });
                    }
                    layer.shadow(key);
                    match self.packed.create(key, value.clone()).await {
                        // written meanwhile: decide again against the overlay entry
                        Err(StorageError::AlreadyExists(_)) => continue,
                        other => return other,
                    }
                }
            }
        }
    }

    async fn delete(&self, key: &str, expected_revision: i64) -> Result<(i64, KeyValue), StorageError> {
        loop {
            let layer = self.current();
            match self.packed.get(key).await? {
                Some(kv) if is_tombstone(&kv.value) => return Err(StorageError::NotFound(key.to_string())),
                Some(kv) => {
                    if !layer.as_ref().is_some_and(|l| l.is_shadowed(key)) {
                        return self.packed.delete(key, expected_revision).await.map_err(Self::tomb_conflict);
                    }
                    if expected_revision != 0 && expected_revision != kv.mod_revision {
                        return Err(StorageError::Conflict { key: key.to_string(), current: Some(kv) });
                    }
                    match self.packed.update(key, Bytes::from_static(TOMBSTONE), kv.mod_revision).await {
                        Ok(rev) => return Ok((rev, kv)),
                        Err(StorageError::Conflict { .. }) | Err(StorageError::NotFound(_)) => continue,
                        Err(e) => return Err(e),
                    }
                }
                None => {
                    let Some(layer) = layer else { return Err(StorageError::NotFound(key.to_string())) };
                    let Some(current) = layer.generated(key) else { return Err(StorageError::NotFound(key.to_string())) };
                    if expected_revision != 0 && expected_revision != layer.base {
                        return Err(StorageError::Conflict { key: key.to_string(), current: Some(current) });
                    }
                    layer.shadow(key);
                    match self.packed.create(key, Bytes::from_static(TOMBSTONE)).await {
                        Ok(rev) => return Ok((rev, current)),
                        Err(StorageError::AlreadyExists(_)) => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }

    async fn watch(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>) -> Result<WatchStream, StorageError> {
        let inner = self.packed.watch(prefix, after_revision, progress_every).await?;
        Ok(translate(inner, self.layer.clone(), true))
    }

    async fn current_revision(&self) -> Result<i64, StorageError> {
        self.packed.current_revision().await
    }

    async fn compact(&self, revision: i64) -> Result<(), StorageError> {
        self.packed.compact(revision).await
    }
}

#[cfg(test)]
mod tests;

/// The generated nodes and pods of one member as a [`GeneratedSet`]: the node keys, then
/// the pod keys (`/registry/core/nodes/` sorts before `/registry/core/pods/`), each in key
/// order through a sorted index of generator indexes (4 bytes per object). Values are
/// rendered by the shared [`PodPlan`] on every read.
pub struct MemberSet {
    plan: Arc<PodPlan>,
    node_order: Vec<u32>,
    pod_order: Vec<u32>,
    node_info: Arc<ResourceInfo>,
    pod_info: Arc<ResourceInfo>,
}

impl MemberSet {
    /// Indexes the plan's nodes and initial pods by key (sorting needs their names once:
    /// about 100 bytes per pod while it runs).
    pub fn new(plan: Arc<PodPlan>, node_info: Arc<ResourceInfo>, pod_info: Arc<ResourceInfo>) -> Self {
        let cfg = plan.config();
        let mut node_order: Vec<u32> = (0..cfg.nodes as u32).collect();
        node_order.sort_by_cached_key(|&i| cfg.node_name(i as usize));
        let mut pod_order: Vec<u32> = (0..plan.initial_len() as u32).collect();
        pod_order.sort_by_cached_key(|&i| {
            let (ns, name) = plan.initial_pod_name(i as usize);
            format!("{ns}/{name}")
        });
        MemberSet { plan, node_order, pod_order, node_info, pod_info }
    }
}

impl GeneratedSet for MemberSet {
    fn len(&self) -> usize {
        self.node_order.len() + self.pod_order.len()
    }

    fn key_at(&self, pos: usize) -> String {
        match pos.checked_sub(self.node_order.len()) {
            None => core_key("nodes", None, &self.plan.config().node_name(self.node_order[pos] as usize)),
            Some(p) => {
                let (ns, name) = self.plan.initial_pod_name(self.pod_order[p] as usize);
                core_key("pods", Some(ns), &name)
            }
        }
    }

    fn value_at(&self, pos: usize) -> Bytes {
        match pos.checked_sub(self.node_order.len()) {
            None => Bytes::from(object::into_stored(&self.node_info, self.plan.node(self.node_order[pos] as usize))),
            Some(p) => Bytes::from(object::into_stored(&self.pod_info, self.plan.initial_pod(self.pod_order[p] as usize))),
        }
    }
}
