//! The shard map: which cache shard holds which namespace, balanced by observed object counts,
//! versioned and stored in etcd so that every server and cache process agrees.
//!
//! ## Placement
//! A [`ShardMap`] lists, per namespace, one shard or several: a namespace with several shards
//! is split by a hash (64-bit FNV-1a) of the object name. Namespaces the map does not list
//! (new since the last rebalance) go to `FNV-1a(namespace) mod shards`. Cluster-scoped objects
//! use the namespace `""`. [`ShardMap::balance`] computes a map from per-namespace object
//! counts: a namespace larger than half the average shard load is cut into pieces of at most
//! that size (at most one piece per shard), then pieces are placed greedily, largest first,
//! on the least loaded shard that holds no other piece of the same namespace (LPT
//! scheduling: the largest shard ends at most one piece, i.e. half an average, above the
//! average, so ≤ 1.5× the average up to hashing noise).
//!
//! ## Storage and versions
//! The map is one JSON object ([`ShardMap`]) under the etcd key [`SHARD_MAP_KEY`]. `version`
//! increases by one on every change; a process proposes a new map with a compare-and-swap on
//! the key's mod revision, so versions form one linear history whatever the number of
//! proposers. Every process polls the key (every rebalance interval) and adopts a newer
//! version; a process whose shard count differs from the map's places shard `i` of the map on
//! its shard `i mod n` and does not propose maps.
//!
//! ## Rebalancing protocol (moving a namespace without losing or duplicating an event)
//! A store's events are numbered per kind (a sequence number) and positioned per member
//! cluster ([`super::rv::Pos`]); a global resourceVersion is the per-cluster position map, so
//! it does not depend on the shard map.
//! 1. A new map version `v+1` is published (CAS).
//! 2. The target shard takes the moving objects from a snapshot at a known per-cluster
//!    position `P` (the source's state at `P`) together with the source's retained events of
//!    those objects (so the target can replay and roll back as if it had always held them).
//! 3. Switch: from `P` on, events of the moved keys are routed by version `v+1` to the target.
//! 4. The source drops the moved objects and events.
//!
//! Readers never observe a half-moved state: a LIST page or a watch start reads all shards
//! under one map version, and a watcher filters the merged stream by its per-cluster positions,
//! so an event seen from the source before the switch is never delivered again by the target
//! (same cluster position), and none after `P` can be missed (the target has them all).
//! In-process shards ([`super::store::KindStore::apply_map`]) perform steps 2–4 atomically
//! under the kind's write lock, with `P` = the current positions, which is the degenerate,
//! obviously safe case of the protocol: no event is recorded while the keys move.
//!
//! ## Out-of-process shards (`fedctl cache`)
//! A cache process holds a fixed set of shard ids of a fixed shard count and never proposes
//! maps: a server with `--cache-endpoints` does, from the objects per shard and namespace the
//! processes report in `/shards`, once they all follow the stored version
//! ([`crate::search::remote::RemoteMux::run_shard_map`]). When a cache
//! process adopts a map version that changes which keys it holds, it takes the simple,
//! correct path instead of steps 2–4 ([`super::GlobalCache::resync`]): it ends its live
//! watches, drops its objects (the members leave under the old map), adopts the new map and
//! relists every member. Each member then joins again as a new incarnation whose history
//! starts at the relist, so a global resourceVersion from before answers 410 from this
//! process, and its clients (the server's MUX, then the MUX's clients) relist.
//!
//! The processes adopt a new version at different moments (each polls every rebalance
//! interval), and between two adoptions their objects do not add up to the view. The MUX
//! ([`crate::search::remote`]) therefore takes a fresh snapshot only when every process
//! reports the same map version and has listed every member (`mapVersion` and `synced` in
//! `/shards`), waiting a few seconds for it and answering 503 otherwise; watches and continued
//! LISTs across the change end with the resyncing process's watches, or get its 410.
//!
//! Known limit: if a member wrote nothing between a process's first list and its relist, a
//! position inside the first list's derived events (`rv.sub`) can still be accepted by the
//! new incarnation (same member resourceVersion); the member's state at that resourceVersion
//! is the same, only its split into derived events may differ.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::storage::{Storage, StorageError};

/// The etcd key of the shard map (next to the federation's own objects).
pub const SHARD_MAP_KEY: &str = "/registry/search.fedctl.io/shardmap";

/// 64-bit FNV-1a of `s` (stable across processes and releases, unlike `std`'s hasher).
pub fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Which shard holds which namespace (see the module docs). Serialized as
/// `{"version": 3, "shards": 4, "namespaces": {"ns-a": [2], "hot": [0, 1, 3]}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    /// Increases by one per change (0: the built-in hash placement, never stored).
    pub version: u64,
    /// Number of shards the map was made for.
    pub shards: u32,
    /// Namespace → its shards (several: split by a hash of the object name).
    #[serde(default)]
    pub namespaces: BTreeMap<String, Vec<u32>>,
}

impl ShardMap {
    /// The hash placement over `shards` shards (version 0).
    pub fn hashed(shards: u32) -> ShardMap {
        ShardMap { version: 0, shards: shards.max(1), namespaces: BTreeMap::new() }
    }

    /// The shard (of `n` local shards) holding object `name` of `namespace`.
    pub fn shard(&self, namespace: &str, name: &str, n: usize) -> usize {
        let n = n.max(1) as u64;
        let s = match self.namespaces.get(namespace) {
            Some(v) if v.len() == 1 => u64::from(v[0]),
            Some(v) if !v.is_empty() => u64::from(v[(fnv1a(name) % v.len() as u64) as usize]),
            _ => fnv1a(namespace) % u64::from(self.shards.max(1)),
        };
        (s % n) as usize
    }

    /// A balanced map (version `version`) for `counts` (namespace → objects) over `shards`
    /// shards; see the module docs for the algorithm.
    pub fn balance(counts: &BTreeMap<String, usize>, shards: u32, version: u64) -> ShardMap {
        let n = shards.max(1) as usize;
        let total: usize = counts.values().sum();
        let mut map = ShardMap { version, shards: n as u32, namespaces: BTreeMap::new() };
        if total == 0 {
            return map;
        }
        let piece_max = (total as f64 / n as f64 / 2.0).max(1.0);
        let mut pieces: Vec<(f64, &str)> = Vec::new();
        for (ns, c) in counts {
            let k = ((*c as f64 / piece_max).ceil() as usize).clamp(1, n);
            for _ in 0..k {
                pieces.push((*c as f64 / k as f64, ns));
            }
        }
        pieces.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        let mut loads = vec![0.0f64; n];
        for (size, ns) in pieces {
            let taken = map.namespaces.entry(ns.to_string()).or_default();
            let s = (0..n).filter(|s| !taken.contains(&(*s as u32))).min_by(|a, b| loads[*a].total_cmp(&loads[*b]).then(a.cmp(b))).unwrap_or(0);
            loads[s] += size;
            taken.push(s as u32);
        }
        for v in map.namespaces.values_mut() {
            v.sort_unstable();
        }
        map
    }

    /// The balanced successor of this map (version + 1) when `loads` (objects per shard under
    /// it, `n` = `loads.len()` shards) are unbalanced: the largest shard holds more than
    /// 1.25× the average (and there are at least 8 objects per shard), and the proposal for
    /// `counts` (objects per namespace) would cut it by at least 10 %. Returns the map, the
    /// largest load and the largest predicted load.
    pub fn rebalanced(&self, counts: &BTreeMap<String, usize>, loads: &[usize]) -> Option<(ShardMap, f64, f64)> {
        let n = loads.len();
        if n == 0 || self.shards as usize != n {
            return None;
        }
        let total: usize = loads.iter().sum();
        let max = loads.iter().copied().max().unwrap_or(0) as f64;
        let avg = total as f64 / n as f64;
        if total < 8 * n || max <= 1.25 * avg {
            return None;
        }
        let next = ShardMap::balance(counts, n as u32, self.version + 1);
        let predicted = next.predict(counts, n).into_iter().fold(0.0, f64::max);
        (predicted <= 0.9 * max).then_some((next, max, predicted))
    }

    /// Expected objects per shard (of `n`) under this map for `counts` (a split namespace's
    /// objects spread evenly over its shards).
    pub fn predict(&self, counts: &BTreeMap<String, usize>, n: usize) -> Vec<f64> {
        let mut loads = vec![0.0; n.max(1)];
        for (ns, c) in counts {
            match self.namespaces.get(ns) {
                Some(v) if !v.is_empty() => {
                    for s in v {
                        loads[*s as usize % n.max(1)] += *c as f64 / v.len() as f64;
                    }
                }
                _ => loads[self.shard(ns, "", n)] += *c as f64,
            }
        }
        loads
    }
}

/// Errors of the shard map's storage.
#[derive(Debug, thiserror::Error)]
pub enum ShardMapError {
    /// etcd answered with an error (a CAS conflict included: another process moved first).
    #[error("shard map storage: {0}")]
    Storage(#[from] StorageError),
    /// The stored map is not a [`ShardMap`].
    #[error("shard map at {SHARD_MAP_KEY} does not parse: {0}")]
    Decode(#[from] serde_json::Error),
}

/// The stored map and the key's mod revision (for [`publish`]), or `None` when absent.
pub async fn load(store: &dyn Storage) -> Result<Option<(ShardMap, i64)>, ShardMapError> {
    match store.get(SHARD_MAP_KEY).await? {
        None => Ok(None),
        Some(kv) => Ok(Some((serde_json::from_slice(&kv.value)?, kv.mod_revision))),
    }
}

/// Stores `map`: creates the key when `expected` is `None`, else replaces it only if its mod
/// revision is still `expected`. Returns the new mod revision. Errors: `AlreadyExists` /
/// `Conflict` (another process published first: reload and retry later).
pub async fn publish(store: &dyn Storage, map: &ShardMap, expected: Option<i64>) -> Result<i64, ShardMapError> {
    let body = Bytes::from(serde_json::to_vec(map)?);
    Ok(match expected {
        None => store.create(SHARD_MAP_KEY, body).await?,
        Some(rev) => store.update(SHARD_MAP_KEY, body, rev).await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Zipf-like counts: namespace i has `base / (i+1)^s` objects.
    fn zipf(namespaces: usize, base: f64, s: f64) -> BTreeMap<String, usize> {
        (0..namespaces).map(|i| (format!("ns-{i}"), (base / ((i + 1) as f64).powf(s)).round().max(1.0) as usize)).collect()
    }

    /// Places real object names with the map and returns objects per shard.
    fn actual(map: &ShardMap, counts: &BTreeMap<String, usize>, n: usize) -> Vec<usize> {
        let mut loads = vec![0; n];
        for (ns, c) in counts {
            for i in 0..*c {
                loads[map.shard(ns, &format!("pod-{ns}-{i}-{}", i * 7919 % 1000), n)] += 1;
            }
        }
        loads
    }

    #[test]
    fn balances_skewed_namespaces_within_one_and_a_half_of_average() {
        for (namespaces, s, n) in [(10, 2.0, 3u32), (10, 1.3, 4), (40, 1.1, 4), (3, 3.0, 3), (200, 0.8, 8), (1, 1.0, 4)] {
            let counts = zipf(namespaces, 5000.0, s);
            let total: usize = counts.values().sum();
            let avg = total as f64 / n as f64;
            let hashed = actual(&ShardMap::hashed(n), &counts, n as usize);
            let map = ShardMap::balance(&counts, n, 1);
            let got = actual(&map, &counts, n as usize);
            let max = *got.iter().max().unwrap() as f64;
            assert!(max <= 1.5 * avg, "{namespaces} ns, s={s}, {n} shards: {got:?} (avg {avg:.0}; hashed {hashed:?}; map {map:?})");
            assert_eq!(got.iter().sum::<usize>(), total, "every object on exactly one shard");
            let predicted = map.predict(&counts, n as usize);
            assert!(predicted.iter().cloned().fold(0.0, f64::max) <= 1.5 * avg);
        }
    }

    #[test]
    fn placement_is_stable_and_total() {
        let counts = zipf(10, 3000.0, 2.0);
        let a = ShardMap::balance(&counts, 3, 7);
        assert_eq!(a, ShardMap::balance(&counts, 3, 7), "deterministic");
        assert!(a.namespaces["ns-0"].len() > 1, "the hot namespace is split: {a:?}");
        // a namespace the map does not know is hashed; any name maps within range
        for ns in ["unknown", "", "ns-0", "ns-9"] {
            assert!(a.shard(ns, "x", 3) < 3);
            assert!(a.shard(ns, "x", 2) < 2, "fewer local shards than the map's");
        }
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<ShardMap>(&json).unwrap(), a);
    }
}
