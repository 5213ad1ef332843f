//! In-process informers: list + watch of one resource straight on the store, an in-memory cache and change callbacks (mirrors client-go's shared informer).
//!
//! The server's controllers run next to the API layer, so they list and watch the store
//! directly (no HTTP). A broken or compacted watch is answered by a re-list whose
//! difference with the cache is delivered as Added/Modified/Deleted, so handlers never miss
//! a change (level-triggered consumers only need the latest state).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use crate::api::object;
use crate::api::ResourceInfo;
use crate::storage::{Storage, WatchEvent};

/// One change seen by an informer (objects carry their resourceVersion).
#[derive(Clone, Debug)]
pub enum Change {
    /// A new object (or one found by a re-list).
    Added(Arc<Value>),
    /// An object changed from `old` to `new`.
    Modified { old: Arc<Value>, new: Arc<Value> },
    /// An object was deleted; its last known state.
    Deleted(Arc<Value>),
}

impl Change {
    /// The object after the change (the last state for a deletion).
    pub fn object(&self) -> &Arc<Value> {
        match self {
            Change::Added(o) | Change::Deleted(o) => o,
            Change::Modified { new, .. } => new,
        }
    }
}

/// Callback invoked for every change, after the cache has been updated.
pub type Handler = Arc<dyn Fn(&Change) + Send + Sync>;

/// Computes an object's secondary index value (e.g. the template a Work belongs to).
pub type IndexFn = fn(&Value) -> Option<String>;

struct Cache {
    objects: HashMap<String, Arc<Value>>,
    index: HashMap<String, BTreeSet<String>>,
}

/// A cache of every object of one resource, kept current by a store watch.
pub struct Informer {
    /// The resource.
    pub info: Arc<ResourceInfo>,
    cache: RwLock<Cache>,
    index_fn: Option<IndexFn>,
    synced: watch::Sender<bool>,
}

impl Informer {
    /// An informer for `info`, optionally maintaining a secondary index.
    pub fn new(info: Arc<ResourceInfo>, index_fn: Option<IndexFn>) -> Arc<Self> {
        Arc::new(Informer { info, cache: RwLock::new(Cache { objects: HashMap::new(), index: HashMap::new() }), index_fn, synced: watch::channel(false).0 })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Cache> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    /// One object by namespace (ignored when cluster-scoped) and name.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<Value>> {
        self.read().objects.get(&self.info.key(namespace, name)).cloned()
    }

    /// Every cached object (unordered).
    pub fn list(&self) -> Vec<Arc<Value>> {
        self.read().objects.values().cloned().collect()
    }

    /// Objects whose index value is `value`.
    pub fn by_index(&self, value: &str) -> Vec<Arc<Value>> {
        let c = self.read();
        c.index.get(value).map(|keys| keys.iter().filter_map(|k| c.objects.get(k).cloned()).collect()).unwrap_or_default()
    }

    /// Every value the secondary index holds (each once, sorted).
    pub fn index_values(&self) -> Vec<String> {
        let mut v: Vec<String> = self.read().index.keys().cloned().collect();
        v.sort();
        v
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the first list has been loaded.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    fn index_remove(c: &mut Cache, f: Option<IndexFn>, key: &str, obj: &Value) {
        if let Some(v) = f.and_then(|f| f(obj)) {
            if let Some(set) = c.index.get_mut(&v) {
                set.remove(key);
                if set.is_empty() {
                    c.index.remove(&v);
                }
            }
        }
    }

    fn index_add(c: &mut Cache, f: Option<IndexFn>, key: &str, obj: &Value) {
        if let Some(v) = f.and_then(|f| f(obj)) {
            c.index.entry(v).or_default().insert(key.to_string());
        }
    }

    fn upsert(&self, key: String, obj: Arc<Value>) -> Change {
        let mut c = self.write();
        let old = c.objects.insert(key.clone(), obj.clone());
        if let Some(o) = &old {
            Self::index_remove(&mut c, self.index_fn, &key, o);
        }
        Self::index_add(&mut c, self.index_fn, &key, &obj);
        match old {
            Some(old) => Change::Modified { old, new: obj },
            None => Change::Added(obj),
        }
    }

    fn remove(&self, key: &str) -> Option<Change> {
        let mut c = self.write();
        let old = c.objects.remove(key)?;
        Self::index_remove(&mut c, self.index_fn, key, &old);
        Some(Change::Deleted(old))
    }

    /// Lists and watches the resource until the process ends, calling `handler` for every
    /// change. Store errors are retried with backoff (≤ 5 s); each re-list reconciles the
    /// cache with the store.
    pub async fn run(self: Arc<Self>, store: Arc<dyn Storage>, handler: Handler) {
        let prefix = self.info.prefix();
        let mut delay = Duration::from_millis(100);
        loop {
            let res = match store.list(&prefix, "", 0, 0).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(resource = self.info.resource, error = %e, "informer list failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            let mut seen = std::collections::HashSet::new();
            for kv in &res.kvs {
                seen.insert(kv.key.clone());
                let Ok(obj) = object::from_stored(&kv.value, kv.mod_revision) else { continue };
                let unchanged = self.read().objects.get(&kv.key).is_some_and(|o| object::meta_str(o, "resourceVersion") == object::meta_str(&obj, "resourceVersion"));
                if !unchanged {
                    let ch = self.upsert(kv.key.clone(), Arc::new(obj));
                    handler(&ch);
                }
            }
            let gone: Vec<String> = self.read().objects.keys().filter(|k| !seen.contains(*k)).cloned().collect();
            for k in gone {
                if let Some(ch) = self.remove(&k) {
                    handler(&ch);
                }
            }
            self.synced.send_replace(true);
            let mut stream = match store.watch(&prefix, res.revision, None).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(resource = self.info.resource, error = %e, "informer watch failed; re-listing");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            delay = Duration::from_millis(100);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Put { kv, .. }) => {
                        if let Ok(obj) = object::from_stored(&kv.value, kv.mod_revision) {
                            let ch = self.upsert(kv.key.clone(), Arc::new(obj));
                            handler(&ch);
                        }
                    }
                    Ok(WatchEvent::Delete { prev, .. }) => {
                        if let Some(ch) = self.remove(&prev.key) {
                            handler(&ch);
                        }
                    }
                    Ok(WatchEvent::Progress(_)) => {}
                    Err(e) => {
                        tracing::info!(resource = self.info.resource, error = %e, "informer watch ended; re-listing");
                        break;
                    }
                }
            }
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::registry;
    use crate::storage::memory::MemoryStorage;
    use bytes::Bytes;
    use serde_json::json;
    use std::sync::Mutex;

    #[tokio::test]
    async fn lists_watches_and_indexes() {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let info = Arc::new(registry::configmap());
        let put = |name: &str, owner: &str| {
            let obj = json!({"metadata": {"name": name, "namespace": "n", "labels": {"owner": owner}}});
            (info.key(Some("n"), name), Bytes::from(object::to_stored(&info, &obj)))
        };
        let (k, v) = put("a", "x");
        store.create(&k, v).await.unwrap();
        let inf = Informer::new(info.clone(), Some(|o| o.pointer("/metadata/labels/owner").and_then(Value::as_str).map(str::to_string)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let handler: Handler = Arc::new(move |c: &Change| {
            let kind = match c {
                Change::Added(_) => "added",
                Change::Modified { .. } => "modified",
                Change::Deleted(_) => "deleted",
            };
            s2.lock().unwrap().push(format!("{kind} {}", object::meta_str(c.object(), "name").unwrap_or("")));
        });
        tokio::spawn(inf.clone().run(store.clone(), handler));
        inf.wait_synced().await;
        assert_eq!(inf.len(), 1);
        let (k, v) = put("b", "x");
        store.create(&k, v).await.unwrap();
        let (k, v) = put("a", "y");
        let rev = store.get(&k).await.unwrap().unwrap().mod_revision;
        store.update(&k, v, rev).await.unwrap();
        let (kb, _) = put("b", "x");
        store.delete(&kb, 0).await.unwrap();
        for _ in 0..100 {
            if seen.lock().unwrap().len() >= 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(*seen.lock().unwrap(), vec!["added a", "added b", "modified a", "deleted b"]);
        assert!(inf.by_index("x").is_empty());
        assert_eq!(inf.by_index("y").len(), 1);
        assert!(inf.get(Some("n"), "a").is_some());
    }
}
