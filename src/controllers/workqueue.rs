//! A controller work queue with per-key dedup, delayed adds and per-key exponential backoff (mirrors client-go's workqueue).
//!
//! Semantics as client-go's rate-limiting queue:
//! - a key added while it is waiting is not added twice (dedup);
//! - a key is never handed to two workers at once: added while being processed, it is
//!   queued again only when [`WorkQueue::done`] is called;
//! - [`WorkQueue::add_rate_limited`] re-adds after `base × 2^failures` (capped), reset by
//!   [`WorkQueue::forget`];
//! - [`WorkQueue::add_after`] adds after a delay (for deadlines such as failover); a key
//!   already waiting for an earlier time is not scheduled again, one waiting for a later
//!   time is moved earlier (client-go's delaying queue), so a burst of delayed adds of one
//!   key is one add; a key already queued (not being processed) is not scheduled at all:
//!   its worker reads the latest state anyway (every reconcile returns its own next
//!   deadline).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

struct Inner<K> {
    queue: VecDeque<K>,
    dirty: HashSet<K>,
    processing: HashSet<K>,
    failures: HashMap<K, u32>,
    /// Keys scheduled by [`WorkQueue::add_after`], with when they are due.
    waiting: HashMap<K, tokio::time::Instant>,
    shut_down: bool,
}

/// A deduplicating work queue of keys `K`, shared by several worker tasks.
pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
    base_delay: Duration,
    max_delay: Duration,
    /// `workqueue_depth` and `workqueue_adds_total` of a named queue.
    metrics: Option<(prometheus_client::metrics::gauge::Gauge, prometheus_client::metrics::counter::Counter)>,
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// A queue whose retries back off from `base_delay` doubling up to `max_delay`.
    pub fn new(base_delay: Duration, max_delay: Duration) -> Arc<Self> {
        Arc::new(WorkQueue {
            inner: Mutex::new(Inner { queue: VecDeque::new(), dirty: HashSet::new(), processing: HashSet::new(), failures: HashMap::new(), waiting: HashMap::new(), shut_down: false }),
            notify: Notify::new(),
            base_delay,
            max_delay,
            metrics: None,
        })
    }

    /// Like [`WorkQueue::new`], reporting its depth and adds as `workqueue_*{name}` (see
    /// [`crate::telemetry::metrics`]).
    pub fn named(name: &str, base_delay: Duration, max_delay: Duration) -> Arc<Self> {
        let m = crate::telemetry::metrics::server();
        let l = crate::telemetry::metrics::NameLabel { name: name.to_string() };
        let mut q = Arc::into_inner(Self::new(base_delay, max_delay)).expect("a fresh queue has one owner");
        q.metrics = Some((m.queue_depth.get_or_create(&l).clone(), m.queue_adds.get_or_create(&l).clone()));
        Arc::new(q)
    }

    fn report_depth(&self, depth: usize) {
        if let Some((g, _)) = &self.metrics {
            g.set(depth as i64);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `key` as needing processing (no-op when it already waits).
    pub fn add(&self, key: K) {
        let mut g = self.lock();
        if g.shut_down || g.dirty.contains(&key) {
            return;
        }
        // counted as client-go does: adds of a key not already waiting
        if let Some((_, adds)) = &self.metrics {
            adds.inc();
        }
        g.dirty.insert(key.clone());
        if !g.processing.contains(&key) {
            g.queue.push_back(key);
            self.report_depth(g.queue.len());
            drop(g);
            self.notify.notify_one();
        }
    }

    /// Adds `key` after `delay`; nothing when it is already scheduled no later (see the
    /// module docs).
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let due = tokio::time::Instant::now() + delay;
        {
            let mut g = self.lock();
            // queued and not being processed: a worker will read the latest state anyway
            let queued = g.dirty.contains(&key) && !g.processing.contains(&key);
            if g.shut_down || queued || g.waiting.get(&key).is_some_and(|at| *at <= due) {
                return;
            }
            g.waiting.insert(key.clone(), due);
        }
        let me = self.clone();
        crate::controllers::tasks::spawn(async move {
            tokio::time::sleep_until(due).await;
            {
                let mut g = me.lock();
                // moved earlier by a later call: that call's timer adds it
                if g.waiting.get(&key) != Some(&due) {
                    return;
                }
                g.waiting.remove(&key);
            }
            me.add(key);
        });
    }

    /// The backoff the next [`WorkQueue::add_rate_limited`] of `key` would wait.
    pub fn backoff(&self, key: &K) -> Duration {
        let n = self.lock().failures.get(key).copied().unwrap_or(0);
        self.base_delay.saturating_mul(1u32 << n.min(20)).min(self.max_delay)
    }

    /// Re-adds a key that failed, after its backoff; each call doubles the next backoff.
    pub fn add_rate_limited(self: &Arc<Self>, key: K) {
        let delay = self.backoff(&key);
        *self.lock().failures.entry(key.clone()).or_insert(0) += 1;
        self.add_after(key, delay);
    }

    /// Clears `key`'s failure count (it succeeded).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// Waits for the next key; `None` once shut down. The caller must call
    /// [`WorkQueue::done`] with it.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut g = self.lock();
                if g.shut_down {
                    return None;
                }
                if let Some(k) = g.queue.pop_front() {
                    g.dirty.remove(&k);
                    g.processing.insert(k.clone());
                    self.report_depth(g.queue.len());
                    let more = !g.queue.is_empty();
                    drop(g);
                    if more {
                        self.notify.notify_one();
                    }
                    return Some(k);
                }
            }
            notified.await;
        }
    }

    /// Ends processing of `key`; if it was added meanwhile it is queued again.
    pub fn done(&self, key: &K) {
        let mut g = self.lock();
        g.processing.remove(key);
        if g.dirty.contains(key) {
            g.queue.push_back(key.clone());
            self.report_depth(g.queue.len());
            drop(g);
            self.notify.notify_one();
        }
    }

    /// Keys waiting (not counting those being processed).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops handing out keys; waiting workers get `None`.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dedups_and_requeues_after_processing() {
        let q: Arc<WorkQueue<&str>> = WorkQueue::new(Duration::from_millis(5), Duration::from_secs(1));
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        let k = q.get().await.unwrap();
        assert_eq!(k, "a");
        // added while processing: not handed out until done
        q.add("a");
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await.unwrap(), "b");
        assert!(q.is_empty());
        q.done(&"a");
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await.unwrap(), "a");
        q.done(&"a");
        q.done(&"b");
        assert!(q.is_empty());
    }

    /// Keys handed out within `window`, each marked done at once.
    async fn drain(q: &Arc<WorkQueue<&'static str>>, window: Duration) -> Vec<&'static str> {
        let end = tokio::time::Instant::now() + window;
        let mut got = Vec::new();
        while let Ok(Some(k)) = tokio::time::timeout_at(end, q.get()).await {
            got.push(k);
            q.done(&k);
        }
        got.sort();
        got
    }

    #[tokio::test]
    async fn delayed_adds_of_one_key_are_one_add() {
        let q: Arc<WorkQueue<&str>> = WorkQueue::new(Duration::from_millis(5), Duration::from_secs(1));
        // three schedules of a (the last one earliest) and one of b: a once, b once (each
        // schedule of a would hand it out again without the folding)
        q.add_after("a", Duration::from_millis(150));
        q.add_after("a", Duration::from_millis(400));
        q.add_after("a", Duration::from_millis(50));
        q.add_after("b", Duration::from_millis(400));
        assert_eq!(drain(&q, Duration::from_millis(1500)).await, vec!["a", "b"]);
        // once due, a key can be scheduled again
        q.add_after("a", Duration::from_millis(20));
        assert_eq!(drain(&q, Duration::from_millis(500)).await, vec!["a"]);
        // queued already (not being processed): the delayed add is dropped
        q.add("a");
        q.add_after("a", Duration::from_millis(20));
        assert_eq!(drain(&q, Duration::from_millis(500)).await, vec!["a"]);
        // being processed: the delayed add stands, and comes after done
        q.add("a");
        let k = q.get().await.unwrap();
        q.add_after("a", Duration::from_millis(20));
        tokio::time::sleep(Duration::from_millis(60)).await;
        q.done(&k);
        assert_eq!(drain(&q, Duration::from_millis(500)).await, vec!["a"]);
    }

    #[tokio::test]
    async fn backoff_grows_and_resets() {
        let q: Arc<WorkQueue<String>> = WorkQueue::new(Duration::from_millis(10), Duration::from_millis(50));
        let k = "x".to_string();
        assert_eq!(q.backoff(&k), Duration::from_millis(10));
        q.add_rate_limited(k.clone());
        assert_eq!(q.backoff(&k), Duration::from_millis(20));
        q.add_rate_limited(k.clone());
        q.add_rate_limited(k.clone());
        assert_eq!(q.backoff(&k), Duration::from_millis(50));
        let got = tokio::time::timeout(Duration::from_secs(2), q.get()).await.unwrap().unwrap();
        assert_eq!(got, k);
        q.done(&k);
        q.forget(&k);
        assert_eq!(q.backoff(&k), Duration::from_millis(10));
    }

    #[tokio::test]
    async fn workers_wake_and_shut_down() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new(Duration::from_millis(1), Duration::from_millis(10));
        let mut handles = Vec::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..3 {
            let (q, seen) = (q.clone(), seen.clone());
            handles.push(tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    seen.lock().unwrap().push(k);
                    q.done(&k);
                }
            }));
        }
        for i in 0..100 {
            q.add(i);
        }
        q.add_after(1000, Duration::from_millis(20));
        tokio::time::sleep(Duration::from_millis(200)).await;
        q.shut_down();
        for h in handles {
            tokio::time::timeout(Duration::from_secs(2), h).await.unwrap().unwrap();
        }
        let mut s = seen.lock().unwrap().clone();
        s.sort();
        assert_eq!(s.len(), 101);
        assert_eq!(s[100], 1000);
    }
}
