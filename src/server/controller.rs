//! Controller plumbing for the server's in-process controllers: a deduplicating work queue and store watchers feeding it.
//!
//! Mirrors client-go's informer + workqueue pattern, reduced to what level-triggered
//! controllers over our own store need: a watcher turns every change under a storage prefix
//! into a queue key (e.g. a Cluster name), the controller pops keys and reconciles each from
//! the current state it reads itself. A key queued several times before it is processed is
//! processed once. Keys can be re-queued after a delay (timers, retries with backoff).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
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

/// A deduplicating FIFO of keys with delayed adds (mirrors client-go's workqueue): a key
/// queued several times before it is taken is taken once, and a key is never handed to two
/// workers at once — one re-added while being processed is handed out again after
/// [`WorkQueue::done`].
#[derive(Default)]
pub struct WorkQueue {
    state: Mutex<QueueState>,
    notify: tokio::sync::Notify,
    /// `workqueue_depth` and `workqueue_adds_total` of a named queue.
    metrics: Option<(prometheus_client::metrics::gauge::Gauge, prometheus_client::metrics::counter::Counter)>,
}

#[derive(Default)]
struct QueueState {
    order: std::collections::VecDeque<String>,
    dirty: BTreeSet<String>,
    processing: BTreeSet<String>,
}

impl WorkQueue {
    /// An empty queue.
    pub fn new() -> Arc<Self> {
        Arc::new(WorkQueue::default())
    }

    /// An empty queue reporting its depth and adds as `workqueue_*{name}` (see
    /// [`crate::telemetry::metrics`]).
    pub fn named(name: &str) -> Arc<Self> {
        let m = crate::telemetry::metrics::server();
        let l = crate::telemetry::metrics::NameLabel { name: name.to_string() };
        Arc::new(WorkQueue { metrics: Some((m.queue_depth.get_or_create(&l).clone(), m.queue_adds.get_or_create(&l).clone())), ..WorkQueue::default() })
    }

    fn report_depth(&self, depth: usize) {
        if let Some((g, _)) = &self.metrics {
            g.set(depth as i64);
        }
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !st.dirty.insert(key.clone()) {
            return;
        }
        // counted as client-go does: adds of a key not already waiting
        if let Some((_, adds)) = &self.metrics {
            adds.inc();
        }
        if !st.processing.contains(&key) {
            st.order.push_back(key);
            self.report_depth(st.order.len());
            drop(st);
            self.notify.notify_one();
        }
    }

    /// Queues `key` after `delay` (from a background timer task).
    pub fn add_after(self: &Arc<Self>, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let me = self.clone();
        crate::controllers::tasks::spawn(async move {
            tokio::time::sleep(delay).await;
            me.add(key);
        });
    }

    /// The next key, waiting for one; the caller must call [`WorkQueue::done`] with it.
    pub async fn next(&self) -> String {
        loop {
            let notified = self.notify.notified();
            {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(k) = st.order.pop_front() {
                    st.dirty.remove(&k);
                    st.processing.insert(k.clone());
                    self.report_depth(st.order.len());
                    if !st.order.is_empty() {
                        // wake another waiter, if any, for the rest
                        self.notify.notify_one();
                    }
                    return k;
                }
            }
            notified.await;
        }
    }

    /// Marks `key` processed; if it was added again meanwhile it is queued now.
    pub fn done(&self, key: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.processing.remove(key);
        if st.dirty.contains(key) {
            st.order.push_back(key.to_string());
            self.report_depth(st.order.len());
            drop(st);
            self.notify.notify_one();
        }
    }

    /// Number of keys waiting.
    pub fn len(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).order.len()
    }

    /// Whether no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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
            loop {
                let key = queue.next().await;
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

/// Watches every key under `prefix` for as long as the process runs and queues
/// `map(storage key)` on `queue` for each object that exists at (re)list time, each change
/// and each deletion (also deletions missed while the watch was broken, found by comparing
/// lists). Lists, then watches from the list's revision; on a watch error (compaction, store
/// outage) re-lists after a backoff (≤ 5 s). Never returns.
pub async fn watch_prefix(store: Arc<dyn Storage>, prefix: String, map: KeyMapper, queue: Arc<WorkQueue>) {
    let mut known: HashMap<String, ()> = HashMap::new();
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
        let now: HashMap<String, ()> = listed.kvs.iter().map(|kv| (kv.key.clone(), ())).collect();
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
                    known.insert(kv.key.clone(), ());
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

/// Starts [`watch_prefix`] as a background task.
pub fn spawn_watch(store: Arc<dyn Storage>, prefix: String, map: KeyMapper, queue: Arc<WorkQueue>) -> tokio::task::JoinHandle<()> {
    crate::controllers::tasks::spawn(watch_prefix(store, prefix, map, queue))
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
    async fn queue_dedups_and_orders() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.next().await, "a");
        // re-added while processing: handed out only after done
        q.add("a");
        assert_eq!(q.next().await, "b");
        assert!(q.is_empty());
        q.done("b");
        q.done("a");
        assert_eq!(q.next().await, "a");
        q.done("a");
        assert!(q.is_empty());
        q.add_after("later", Duration::from_millis(20));
        let got = tokio::time::timeout(Duration::from_secs(2), q.next()).await.unwrap();
        assert_eq!(got, "later");
        q.done("later");
    }

    #[tokio::test]
    async fn watcher_queues_existing_changed_and_deleted_keys() {
        let store: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        store.create("/p/a", Bytes::from_static(b"1")).await.unwrap();
        let q = WorkQueue::new();
        let map: KeyMapper = Arc::new(|k: &str| k.strip_prefix("/p/").map(str::to_string));
        let h = spawn_watch(store.clone(), "/p/".into(), map, q.clone());
        let next = |q: Arc<WorkQueue>| async move {
            let k = tokio::time::timeout(Duration::from_secs(2), q.next()).await.unwrap();
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
