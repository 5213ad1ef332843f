//! The simulator's store: a [`MemoryStorage`] holding LZ4-compressed values, with a small cache of recently decompressed versions.
//!
//! Realistic pods are ~5.5 KB of JSON each; 200k of them raw would be ~1.1 GB before any
//! history. LZ4 halves that at a few µs per object. Values are compressed on write and
//! decompressed on read, so the API layer above sees plain JSON. Small values (< 256 bytes)
//! stay raw: a stored JSON object starts with `{`, a compressed one with a tag byte.
//!
//! Watch fan-out decompresses each version once: a bounded FIFO keyed by mod revision (one
//! revision names exactly one version of one key) holds the most recent decompressed
//! values, so N watchers reading the same event share one decompression.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use crate::storage::memory::MemoryStorage;
use crate::storage::{KeyValue, ListResult, Storage, StorageError, WatchEvent, WatchStream};

/// Tag byte of a compressed value (never the first byte of JSON text).
const TAG_LZ4: u8 = 0x01;
/// Values shorter than this are stored raw.
const MIN_COMPRESS: usize = 256;
/// Entries kept in the decompression cache.
const CACHE_ENTRIES: usize = 4096;

/// A revisioned store of compressed values (see the module docs). Cheap to share via `Arc`.
pub struct PackedStorage {
    mem: MemoryStorage,
    cache: Arc<Mutex<RecentCache>>,
}

#[derive(Default)]
struct RecentCache {
    map: HashMap<i64, Bytes>,
    order: VecDeque<i64>,
}

impl RecentCache {
    fn get(&self, rev: i64) -> Option<Bytes> {
        self.map.get(&rev).cloned()
    }

    fn put(&mut self, rev: i64, v: Bytes) {
        if self.map.insert(rev, v).is_none() {
            self.order.push_back(rev);
            while self.order.len() > CACHE_ENTRIES {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }

    fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

/// Compresses a stored value (raw when small or when compression does not pay).
pub fn pack(value: &[u8]) -> Bytes {
    if value.len() < MIN_COMPRESS {
        return Bytes::copy_from_slice(value);
    }
    let c = lz4_flex::compress_prepend_size(value);
    if c.len() + 1 >= value.len() {
        return Bytes::copy_from_slice(value);
    }
    let mut out = Vec::with_capacity(c.len() + 1);
    out.push(TAG_LZ4);
    out.extend_from_slice(&c);
    Bytes::from(out)
}

/// Decompresses a value written by [`pack`]. Error: `Unavailable` for corrupt data.
pub fn unpack(value: &Bytes) -> Result<Bytes, StorageError> {
    match value.first() {
        Some(&TAG_LZ4) => lz4_flex::decompress_size_prepended(&value[1..]).map(Bytes::from).map_err(|e| StorageError::Unavailable(format!("corrupt compressed value: {e}"))),
        _ => Ok(value.clone()),
    }
}

impl PackedStorage {
    /// An empty store keeping `history` changes for watches and lists at past revisions.
    pub fn new(history: usize) -> Self {
        PackedStorage { mem: MemoryStorage::with_history(history), cache: Arc::new(Mutex::new(RecentCache::default())) }
    }

    /// The underlying memory store (values compressed).
    pub fn memory(&self) -> &MemoryStorage {
        &self.mem
    }

    /// Number of keys stored.
    pub fn key_count(&self) -> usize {
        self.mem.key_count()
    }

    /// Drops all state and history (see [`MemoryStorage::reset`]); returns the new revision.
    pub fn reset(&self) -> i64 {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.mem.reset()
    }

    /// Creates `key` with an already packed value (the bulk-load path: packing can then run
    /// on other threads).
    pub async fn create_packed(&self, key: &str, packed: Bytes) -> Result<i64, StorageError> {
        self.mem.create(key, packed).await
    }

    fn unpack_kv(cache: &Mutex<RecentCache>, mut kv: KeyValue, remember: bool) -> Result<KeyValue, StorageError> {
        if kv.value.first() != Some(&TAG_LZ4) {
            return Ok(kv);
        }
        if let Some(v) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(kv.mod_revision) {
            kv.value = v;
            return Ok(kv);
        }
        let v = unpack(&kv.value)?;
        if remember {
            cache.lock().unwrap_or_else(|e| e.into_inner()).put(kv.mod_revision, v.clone());
        }
        kv.value = v;
        Ok(kv)
    }
}

impl PackedStorage {
    /// A watch that decompresses new values (and the last state of deleted keys) but leaves
    /// the previous value of an update empty: for consumers that only need to know whether
    /// a put created the key, like the in-process controllers.
    pub async fn watch_without_prev(&self, prefix: &str, after_revision: i64) -> Result<WatchStream, StorageError> {
        let inner = self.mem.watch(prefix, after_revision, None).await?;
        let cache = self.cache.clone();
        Ok(Box::pin(inner.map(move |ev| {
            let ev = ev?;
            Ok(match ev {
                WatchEvent::Put { kv, prev } => WatchEvent::Put {
                    kv: Self::unpack_kv(&cache, kv, true)?,
                    prev: prev.map(|mut p| {
                        p.value = Bytes::new();
                        p
                    }),
                },
                WatchEvent::Delete { prev, revision } => WatchEvent::Delete { prev: Self::unpack_kv(&cache, prev, true)?, revision },
                p @ WatchEvent::Progress(_) => p,
            })
        })))
    }
}

#[async_trait]
impl Storage for PackedStorage {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        match self.mem.get(key).await? {
            Some(kv) => Ok(Some(Self::unpack_kv(&self.cache, kv, false)?)),
            None => Ok(None),
        }
    }

    async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<ListResult, StorageError> {
        let mut res = self.mem.list(prefix, start, limit, revision).await?;
        for kv in res.kvs.iter_mut() {
            kv.value = unpack(&kv.value)?;
        }
        Ok(res)
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<i64, StorageError> {
        self.mem.create(key, pack(&value)).await
    }

    async fn update(&self, key: &str, value: Bytes, expected_revision: i64) -> Result<i64, StorageError> {
        self.mem.update(key, pack(&value), expected_revision).await.map_err(|e| match e {
            StorageError::Conflict { key, current } => {
                let current = current.and_then(|kv| Self::unpack_kv(&self.cache, kv, false).ok());
                StorageError::Conflict { key, current }
            }
            other => other,
        })
    }

    async fn delete(&self, key: &str, expected_revision: i64) -> Result<(i64, KeyValue), StorageError> {
        match self.mem.delete(key, expected_revision).await {
            Ok((rev, kv)) => Ok((rev, Self::unpack_kv(&self.cache, kv, false)?)),
            Err(StorageError::Conflict { key, current }) => {
                let current = current.and_then(|kv| Self::unpack_kv(&self.cache, kv, false).ok());
                Err(StorageError::Conflict { key, current })
            }
            Err(e) => Err(e),
        }
    }

    async fn watch(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>) -> Result<WatchStream, StorageError> {
        let inner = self.mem.watch(prefix, after_revision, progress_every).await?;
        let cache = self.cache.clone();
        Ok(Box::pin(inner.map(move |ev| {
            let ev = ev?;
            Ok(match ev {
                WatchEvent::Put { kv, prev } => WatchEvent::Put { kv: Self::unpack_kv(&cache, kv, true)?, prev: prev.map(|p| Self::unpack_kv(&cache, p, true)).transpose()? },
                WatchEvent::Delete { prev, revision } => WatchEvent::Delete { prev: Self::unpack_kv(&cache, prev, true)?, revision },
                p @ WatchEvent::Progress(_) => p,
            })
        })))
    }

    async fn current_revision(&self) -> Result<i64, StorageError> {
        self.mem.current_revision().await
    }

    async fn compact(&self, revision: i64) -> Result<(), StorageError> {
        self.mem.compact(revision).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn values_round_trip_packed() {
        let s = PackedStorage::new(100);
        let big = format!("{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{}},\"x\":\"{}\"}}", "abc".repeat(500));
        let rev = s.create("/a", Bytes::from(big.clone())).await.unwrap();
        let raw = s.memory().get("/a").await.unwrap().unwrap();
        assert!(raw.value.len() < big.len() / 4, "compressed");
        assert_eq!(s.get("/a").await.unwrap().unwrap().value, big.as_bytes());
        let l = s.list("/", "", 0, 0).await.unwrap();
        assert_eq!(l.kvs[0].value, big.as_bytes());
        let mut w = s.watch("/", rev - 1, None).await.unwrap();
        match w.next().await.unwrap().unwrap() {
            WatchEvent::Put { kv, .. } => assert_eq!(kv.value, big.as_bytes()),
            _ => panic!("want put"),
        }
        s.create("/b", Bytes::from_static(b"{}")).await.unwrap();
        assert_eq!(s.get("/b").await.unwrap().unwrap().value, &b"{}"[..]);
    }

    #[tokio::test]
    async fn reset_expires_old_revisions() {
        let s = PackedStorage::new(100);
        let rev = s.create("/a", Bytes::from_static(b"{}")).await.unwrap();
        let mut w = s.watch("/", rev, None).await.unwrap();
        s.reset();
        assert!(matches!(w.next().await, Some(Err(StorageError::Compacted { .. }))));
        assert!(matches!(s.watch("/", rev, None).await, Err(StorageError::Compacted { .. })));
        assert!(s.list("/", "", 0, 0).await.unwrap().kvs.is_empty());
        let now = s.current_revision().await.unwrap();
        let mut w = s.watch("/", now, None).await.unwrap();
        s.create("/b", Bytes::from_static(b"{}")).await.unwrap();
        assert!(matches!(w.next().await, Some(Ok(WatchEvent::Put { .. }))));
    }
}
