//! The namespaces an API server knows, kept current by a list and watch of the store (mirrors
//! the namespace informer kube-apiserver's NamespaceLifecycle admission reads).
//!
//! A create checks that its namespace exists and is not terminating. With the cache synced,
//! a namespace found there answers without a read of the store; one not found there (created
//! a moment ago, or absent) is still read from the store, as NamespaceLifecycle does a live
//! lookup on a cache miss. The window in which the cache lags a namespace's termination is the
//! watch latency; the namespace finalizer lists the namespace's content until a whole pass
//! finds nothing, so an object created in that window is removed with the rest (the same race
//! kube-apiserver has and settles the same way).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;

use crate::storage::{KeyValue, Storage, WatchEvent};

/// Name → terminating (has a `deletionTimestamp`), while synced with the store.
#[derive(Default)]
pub struct NamespaceCache {
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    synced: bool,
    namespaces: HashMap<String, bool>,
}

/// What the cache knows of a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// It exists; `true` when it is terminating.
    Present(bool),
    /// Not in the cache, or the cache is not synced: ask the store.
    Unknown,
}

fn terminating(kv: &KeyValue) -> bool {
    serde_json::from_slice::<serde_json::Value>(&kv.value).ok().and_then(|v| v.pointer("/metadata/deletionTimestamp").map(|t| !t.is_null())).unwrap_or(false)
}

fn name_of(key: &str) -> String {
    key.rsplit('/').next().unwrap_or("").to_string()
}

impl NamespaceCache {
    /// What the cache knows of `name`.
    pub fn lookup(&self, name: &str) -> Known {
        let s = self.state.read().unwrap_or_else(|e| e.into_inner());
        match s.namespaces.get(name) {
            Some(t) if s.synced => Known::Present(*t),
            _ => Known::Unknown,
        }
    }

    /// Whether the cache has listed the store and follows its watch.
    pub fn synced(&self) -> bool {
        self.state.read().unwrap_or_else(|e| e.into_inner()).synced
    }

    fn unsync(&self) {
        self.state.write().unwrap_or_else(|e| e.into_inner()).synced = false;
    }

    /// Lists the namespaces under `prefix` (e.g. `/registry/namespaces/`) and follows their
    /// changes, forever: after an error or a closed watch it is unsynced (every lookup goes to
    /// the store) until the next list, a second later.
    pub async fn run(self: Arc<Self>, store: Arc<dyn Storage>, prefix: String) {
        loop {
            if let Err(e) = self.sync_and_follow(&*store, &prefix).await {
                tracing::debug!(error = %e, "namespace cache: relisting");
            }
            self.unsync();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn sync_and_follow(&self, store: &dyn Storage, prefix: &str) -> Result<(), crate::storage::StorageError> {
        let list = store.list(prefix, "", 0, 0).await?;
        let mut watch = store.watch(prefix, list.revision, None).await?;
        {
            let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
            s.namespaces = list.kvs.iter().map(|kv| (name_of(&kv.key), terminating(kv))).collect();
            s.synced = true;
        }
        while let Some(ev) = watch.next().await {
            let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
            match ev? {
                WatchEvent::Put { kv, .. } => {
                    s.namespaces.insert(name_of(&kv.key), terminating(&kv));
                }
                WatchEvent::Delete { prev, .. } => {
                    s.namespaces.remove(&name_of(&prev.key));
                }
                WatchEvent::Progress(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn follows_creation_termination_and_deletion() {
        let store: Arc<dyn Storage> = Arc::new(crate::storage::memory::MemoryStorage::new());
        let p = "/registry/namespaces/";
        store.create(&format!("{p}a"), Bytes::from_static(br#"{"metadata":{"name":"a"}}"#)).await.unwrap();
        let cache = Arc::new(NamespaceCache::default());
        assert_eq!(cache.lookup("a"), Known::Unknown, "unsynced: ask the store");
        let task = tokio::spawn(cache.clone().run(store.clone(), p.to_string()));
        let until = async |want: &dyn Fn(&NamespaceCache) -> bool| {
            for _ in 0..200 {
                if want(&cache) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the cache did not follow the store");
        };
        until(&|c| c.lookup("a") == Known::Present(false)).await;
        assert_eq!(cache.lookup("b"), Known::Unknown);
        let rev = store.create(&format!("{p}b"), Bytes::from_static(br#"{"metadata":{"name":"b"}}"#)).await.unwrap();
        until(&|c| c.lookup("b") == Known::Present(false)).await;
        let rev = store.update(&format!("{p}b"), Bytes::from_static(br#"{"metadata":{"name":"b","deletionTimestamp":"2026-01-01T00:00:00Z"}}"#), rev).await.unwrap();
        until(&|c| c.lookup("b") == Known::Present(true)).await;
        store.delete(&format!("{p}b"), rev).await.unwrap();
        until(&|c| c.lookup("b") == Known::Unknown).await;
        assert_eq!(cache.lookup("a"), Known::Present(false));
        task.abort();
    }
}
