//! Controller plumbing for the server's in-process controllers: a deduplicating work queue and store watchers feeding it.
//!
//! Mirrors client-go's informer + workqueue pattern, reduced to what level-triggered
//! controllers over our own store need: a watcher turns every change under a storage prefix
//! into a queue key (e.g. a Cluster name), the controller pops keys and reconciles each from
//! the current state it reads itself. A key queued several times before it is processed is
//! processed once. Keys can be re-queued after a delay (timers, retries with backoff); a key
//! has one such timer at most. A watcher can be given a [`Fingerprint`] of what its
//! controller reads, so that changes to the rest of an object queue nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::storage::{Storage, WatchEvent};

/// Errors of the controller plumbing (only logged: controllers retry).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The store failed a list or watch.
    #[error("store: {0}")]
    Store(#[from] crate::storage::StorageError),
}

/// The queue the server's controllers share: keys are names, deduplicated, never handed to
/// two workers at once, with at most one delayed add per key (see
/// [`crate::controllers::workqueue`]).
pub type WorkQueue = crate::controllers::workqueue::WorkQueue<String>;

/// A queue reporting its depth and adds as `workqueue_*{name}` (see
/// [`crate::telemetry::metrics`]). Retries are the delays reconciles return
/// ([`spawn_workers`]), so the queue's own backoff is not used.
pub fn named_queue(name: &str) -> Arc<WorkQueue> {
    WorkQueue::named(name, Duration::from_millis(100), Duration::from_secs(5))
}

/// Runs `workers` tasks that take keys from `queue` and run `reconcile` on each; the
/// returned delay, if any, re-queues the key after it (a timer or a retry).
pub fn spawn_workers<F, Fut>(queue: Arc<WorkQueue>, workers: usize, reconcile: F)
where
    F: Fn(String) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Option<Duration>> + Send + 'static,
{
    for _ in 0..workers.max(1) {
        let queue = queue.clone();
        let reconcile = reconcile.clone();
        crate::controllers::tasks::spawn(async move {
            while let Some(key) = queue.get().await {
                let again = reconcile(key.clone()).await;
                queue.done(&key);
                if let Some(d) = again {
                    queue.add_after(key, d);
                }
            }
        });
    }
}

/// Maps a storage key to the queue key it concerns (`None`: not of interest).
pub type KeyMapper = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What of a stored object a controller reacts to (mirrors controller-runtime's event
/// predicates, such as `GenerationChangedPredicate`): a hash of the parts its reconcile reads,
/// from the stored bytes. A change that leaves it equal is not queued; creations, deletions
/// and everything found by a (re)list always are.
pub type Fingerprint = Arc<dyn Fn(&[u8]) -> u64 + Send + Sync>;

/// Watches every key under `prefix` for as long as the process runs and queues
/// `map(storage key)` on `queue` for each object that exists at (re)list time, each change
/// (with `fingerprint`: each change of its fingerprint) and each deletion (also deletions
/// missed while the watch was broken, found by comparing lists). Lists, then watches from the
/// list's revision; on a watch error (compaction, store outage) re-lists after a backoff
/// (≤ 5 s). Never returns.
pub async fn watch_prefix(store: Arc<dyn Storage>, prefix: String, map: KeyMapper, fingerprint: Option<Fingerprint>, queue: Arc<WorkQueue>) {
    let print = |value: &[u8]| fingerprint.as_ref().map_or(0, |f| f(value));
    let mut known: HashMap<String, u64> = HashMap::new();
    let mut delay = Duration::from_millis(100);
    loop {
        let listed = match store.list(&prefix, "", 0, 0).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(%prefix, error = %e, "controller list failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        let now: HashMap<String, u64> = listed.kvs.iter().map(|kv| (kv.key.clone(), print(&kv.value))).collect();
        for k in known.keys().filter(|k| !now.contains_key(*k)).chain(now.keys()) {
            if let Some(q) = map(k) {
                queue.add(q);
            }
        }
        known = now;
        let mut stream = match store.watch(&prefix, listed.revision, None).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%prefix, error = %e, "controller watch failed; re-listing");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        delay = Duration::from_millis(100);
        while let Some(ev) = stream.next().await {
            let key = match ev {
                Ok(WatchEvent::Put { kv, .. }) => {
                    let p = print(&kv.value);
                    if known.insert(kv.key.clone(), p) == Some(p) && fingerprint.is_some() {
                        continue;
                    }
                    kv.key
                }
                Ok(WatchEvent::Delete { prev, .. }) => {
                    known.remove(&prev.key);
                    prev.key
                }
                Ok(WatchEvent::Progress(_)) => continue,
                Err(e) => {
                    tracing::debug!(%prefix, error = %e, "controller watch ended; re-listing");
                    break;
                }
            };
            if let Some(q) = map(&key) {
                queue.add(q);
            }
        }
        tokio::time::sleep(delay).await;
    }
}

/// Starts [`watch_prefix`] as a background task, queueing every change.
pub fn spawn_watch(store: Arc<dyn Storage>, prefix: String, map: KeyMapper, queue: Arc<WorkQueue>) -> tokio::task::JoinHandle<()> {
    crate::controllers::tasks::spawn(watch_prefix(store, prefix, map, None, queue))
}

/// Starts [`watch_prefix`] as a background task, queueing only the changes of `fingerprint`.
pub fn spawn_watch_changes(store: Arc<dyn Storage>, prefix: String, map: KeyMapper, fingerprint: Fingerprint, queue: Arc<WorkQueue>) -> tokio::task::JoinHandle<()> {
    crate::controllers::tasks::spawn(watch_prefix(store, prefix, map, Some(fingerprint), queue))
}

/// A token bucket (mirrors client-go's `flowcontrol` rate limiter): `qps` tokens per second,
/// at most `burst` saved up. [`TokenBucket::acquire`] waits for a token.
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: tokio::sync::Mutex<(f64, tokio::time::Instant)>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket { qps: qps.max(0.001), burst, state: tokio::sync::Mutex::new((burst, tokio::time::Instant::now())) }
    }

    /// Takes one token, sleeping until one is available.
    pub async fn acquire(&self) {
        let mut st = self.state.lock().await;
        let now = tokio::time::Instant::now();
        let elapsed = now.duration_since(st.1).as_secs_f64();
        st.0 = (st.0 + elapsed * self.qps).min(self.burst);
        st.1 = now;
        if st.0 >= 1.0 {
            st.0 -= 1.0;
            return;
        }
        let wait = Duration::from_secs_f64((1.0 - st.0) / self.qps);
        tokio::time::sleep(wait).await;
        st.0 = 0.0;
        st.1 = tokio::time::Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStorage;
    use bytes::Bytes;

    #[tokio::test]
    async fn a_reconcile_that_asks_to_look_again_keeps_one_timer_per_key() {
        // every run asks to look again in 100 ms, as the cluster-controller's heartbeat check
        // does; events add the key meanwhile. Runs must stay about one per 100 ms plus one per
        // event, not one more timer (and one more run every 100 ms) per event.
        let q = named_queue("test-one-timer");
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r = runs.clone();
        spawn_workers(q.clone(), 1, move |_key| {
            let r = r.clone();
            async move {
                r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Some(Duration::from_millis(100))
            }
        });
        for _ in 0..10 {
            q.add("c".to_string());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(900)).await;
        let n = runs.load(std::sync::atomic::Ordering::SeqCst);
        // one timer: ≤ 10 runs from the events + ~10 from the timer; one timer per run: ~100
        assert!(n <= 30, "{n} runs in 1 s");
        // the timer keeps running it (a loaded machine runs it less often, never more)
        assert!(n >= 3, "{n} runs in 1 s");
    }

    #[tokio::test]
    async fn watcher_queues_existing_changed_and_deleted_keys() {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        store.create("/p/a", Bytes::from_static(b"1")).await.unwrap();
        let q = named_queue("test-watch");
        let map: KeyMapper = Arc::new(|k: &str| k.strip_prefix("/p/").map(str::to_string));
        let h = spawn_watch(store.clone(), "/p/".into(), map, q.clone());
        let next = |q: Arc<WorkQueue>| async move {
            let k = tokio::time::timeout(Duration::from_secs(2), q.get()).await.unwrap().unwrap();
            q.done(&k);
            k
        };
        assert_eq!(next(q.clone()).await, "a");
        // the watch starts after the list; give it a moment
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.create("/p/b", Bytes::from_static(b"1")).await.unwrap();
        assert_eq!(next(q.clone()).await, "b");
        let rev = store.get("/p/a").await.unwrap().unwrap().mod_revision;
        store.delete("/p/a", rev).await.unwrap();
        assert_eq!(next(q.clone()).await, "a");
        h.abort();
    }

    #[tokio::test]
    async fn a_fingerprinted_watcher_queues_only_changes_of_the_fingerprint() {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let q = named_queue("test-fingerprint");
        let map: KeyMapper = Arc::new(|k: &str| k.strip_prefix("/p/").map(str::to_string));
        // what the reconcile reads: the first byte
        let first: Fingerprint = Arc::new(|v: &[u8]| u64::from(v.first().copied().unwrap_or(0)));
        let h = spawn_watch_changes(store.clone(), "/p/".into(), map, first, q.clone());
        let take = |q: Arc<WorkQueue>| async move {
            let k = tokio::time::timeout(Duration::from_secs(2), q.get()).await.expect("a key is queued").unwrap();
            q.done(&k);
            k
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let rev = store.create("/p/a", Bytes::from_static(b"1a")).await.unwrap();
        assert_eq!(take(q.clone()).await, "a", "a creation is queued");
        let rev = store.update("/p/a", Bytes::from_static(b"1b"), rev).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(q.is_empty(), "a change outside the fingerprint was queued");
        store.update("/p/a", Bytes::from_static(b"2b"), rev).await.unwrap();
        assert_eq!(take(q.clone()).await, "a", "a change of the fingerprint is queued");
        let rev = store.get("/p/a").await.unwrap().unwrap().mod_revision;
        store.delete("/p/a", rev).await.unwrap();
        assert_eq!(take(q.clone()).await, "a", "a deletion is queued");
        h.abort();
    }

    #[tokio::test]
    async fn token_bucket_limits_rate() {
        let b = TokenBucket::new(20.0, 2);
        let t0 = tokio::time::Instant::now();
        for _ in 0..4 {
            b.acquire().await;
        }
        // 2 from the burst, 2 more at 20/s: ≥ ~100 ms
        assert!(t0.elapsed() >= Duration::from_millis(90), "{:?}", t0.elapsed());
    }
}
