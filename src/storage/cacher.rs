//! A watch cache over a [`Storage`]: one upstream watch per resource, shared by every watch of the resource or of one of its namespaces; uses no other fedctl module.
//!
//! Modelled on kube-apiserver's cacher (`staging/src/k8s.io/apiserver/pkg/storage/cacher`):
//! the first watch of a resource (`/registry/<group>/<resource>/`) starts one watch of the
//! whole resource on the backend, whose events go into a ring of the most recent
//! [`CacherConfig::events`] events and are dispatched to the registered watchers, indexed by
//! their prefix (the resource, or one namespace of it), so an event is offered only to the
//! watchers that can match it. With 1,000 agents each watching the Works of its own exec
//! namespace, etcd serves one watch of Works, not 1,000.
//!
//! Semantics are the backend's: a watch gets every change with revision > `after_revision`
//! under its prefix, in revision order.
//! - A watch whose `after_revision` the ring still covers is served from it (the ring's
//!   events after that revision, then live events); one older than the ring (but perhaps
//!   still held by etcd) is passed to the backend unchanged, so resuming from any revision
//!   etcd still has works as before, and a compacted one is the backend's `Compacted`.
//! - `after_revision = 0` ("from now") starts at the newest revision the cache has seen.
//! - A watch from a revision older than the newest seen first reads one key at
//!   `after_revision + 1` from the backend, so a revision etcd compacted is `Compacted` even
//!   while the ring still holds its events (the existing 410 behaviour).
//! - `Progress(rev)` is offered to watchers that asked for it, at most once per their
//!   interval; the upstream asks the backend for progress every
//!   [`CacherConfig::progress_interval`].
//! - A watcher that falls [`CacherConfig::watcher_buffer`] events behind is ended (its stream
//!   ends without an error, as kube-apiserver closes a watcher that cannot keep up); the
//!   client resumes from its last revision, which the ring usually still covers.
//! - When the upstream fails (etcd unreachable, compaction), every watcher of the resource
//!   gets that error as its last item and the next watch starts a new upstream.
//!
//! Prefixes that are not a resource or one namespace of it (anything not under
//! `/registry/<a>/<b>/` with at most one more segment) go to the backend directly; so do
//! reads and writes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;

use super::{KeyValue, ListResult, Storage, StorageError, WatchEvent, WatchStream};

/// Tunables of a [`Cacher`].
#[derive(Clone, Debug)]
pub struct CacherConfig {
    /// Events kept per resource for watches that start in the past (kube-apiserver's watch
    /// cache capacity). Default 4,096.
    pub events: usize,
    /// Events a watcher may fall behind before it is ended. Default 4,096.
    pub watcher_buffer: usize,
    /// How often the upstream asks the backend for a progress notification (etcd
    /// `RequestProgress`), which becomes watchers' `Progress`. Default 1 s.
    pub progress_interval: Duration,
}

impl Default for CacherConfig {
    fn default() -> Self {
        CacherConfig { events: 4096, watcher_buffer: 4096, progress_interval: Duration::from_secs(1) }
    }
}

/// The resource prefix (`/registry/<a>/<b>/`) of a watch prefix that is the resource itself or
/// one namespace of it (`/registry/<a>/<b>/<ns>/`); `None` for anything else.
pub fn resource_prefix(prefix: &str) -> Option<&str> {
    let rest = prefix.strip_prefix("/registry/")?;
    if !rest.ends_with('/') {
        return None;
    }
    let segs: Vec<&str> = rest[..rest.len() - 1].split('/').collect();
    if !(2..=3).contains(&segs.len()) || segs.iter().any(|s| s.is_empty()) {
        return None;
    }
    let len = "/registry/".len() + segs[0].len() + segs[1].len() + 2;
    Some(&prefix[..len])
}

/// The key an event is about.
fn event_key(ev: &WatchEvent) -> Option<&str> {
    match ev {
        WatchEvent::Put { kv, .. } => Some(&kv.key),
        WatchEvent::Delete { prev, .. } => Some(&prev.key),
        WatchEvent::Progress(_) => None,
    }
}

fn event_revision(ev: &WatchEvent) -> i64 {
    match ev {
        WatchEvent::Put { kv, .. } => kv.mod_revision,
        WatchEvent::Delete { revision, .. } => *revision,
        WatchEvent::Progress(r) => *r,
    }
}

/// The namespace index of a key under `resource` (`/registry/a/b/ns/name` → `ns`; a
/// cluster-scoped key has none).
fn namespace_of<'a>(resource: &str, key: &'a str) -> Option<&'a str> {
    let rest = key.strip_prefix(resource)?;
    rest.split_once('/').map(|(ns, _)| ns)
}

struct Watcher {
    tx: mpsc::Sender<Result<WatchEvent, StorageError>>,
    /// Skip events up to this revision (a watch from a revision the cache has not seen yet).
    after: i64,
    /// Offer `Progress` at most this often (`None`: never).
    progress: Option<Duration>,
    last_progress: tokio::time::Instant,
}

impl Watcher {
    /// Offers an event; `false` when the watcher is gone or too far behind (to be removed).
    fn offer(&mut self, ev: &WatchEvent) -> bool {
        let rev = event_revision(ev);
        if let WatchEvent::Progress(_) = ev {
            let Some(every) = self.progress else { return !self.tx.is_closed() };
            let now = tokio::time::Instant::now();
            if rev <= self.after || now < self.last_progress + every {
                return !self.tx.is_closed();
            }
            self.last_progress = now;
        } else if rev <= self.after {
            return true;
        }
        self.tx.try_send(Ok(ev.clone())).is_ok()
    }
}

#[derive(Default)]
struct State {
    /// The most recent events, in revision order.
    ring: VecDeque<WatchEvent>,
    /// Every change with revision > `floor` is in `ring` (or yet to come).
    floor: i64,
    /// The newest revision seen (events and progress).
    latest: i64,
    /// Watchers by index: `""` for the whole resource, else a namespace.
    watchers: HashMap<String, HashMap<u64, Watcher>>,
    next_id: u64,
    /// The upstream ended; watchers were told.
    failed: bool,
}

struct Resource {
    prefix: String,
    state: Mutex<State>,
    capacity: usize,
}

impl Resource {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one upstream event and dispatches it.
    fn absorb(&self, ev: WatchEvent) {
        let mut st = self.lock();
        let rev = event_revision(&ev);
        st.latest = st.latest.max(rev);
        let State { watchers, .. } = &mut *st;
        match event_key(&ev).map(|k| namespace_of(&self.prefix, k)) {
            None => {
                for set in watchers.values_mut() {
                    set.retain(|_, w| w.offer(&ev));
                }
            }
            Some(ns) => {
                for idx in [Some(""), ns].into_iter().flatten() {
                    if let Some(set) = watchers.get_mut(idx) {
                        set.retain(|_, w| w.offer(&ev));
                    }
                }
            }
        }
        st.watchers.retain(|_, set| !set.is_empty());
        if !matches!(ev, WatchEvent::Progress(_)) {
            if st.ring.len() == self.capacity {
                if let Some(old) = st.ring.pop_front() {
                    st.floor = event_revision(&old);
                }
            }
            st.ring.push_back(ev);
        }
    }

    /// Ends every watcher with `err` (the upstream failed).
    fn fail(&self, err: &StorageError) {
        let mut st = self.lock();
        st.failed = true;
        for (_, set) in st.watchers.drain() {
            for (_, w) in set {
                let _ = w.tx.try_send(Err(clone_error(err)));
            }
        }
    }
}

fn clone_error(e: &StorageError) -> StorageError {
    match e {
        StorageError::Compacted { requested, compacted } => StorageError::Compacted { requested: *requested, compacted: *compacted },
        StorageError::FutureRevision { requested, current } => StorageError::FutureRevision { requested: *requested, current: *current },
        other => StorageError::Unavailable(other.to_string()),
    }
}

type Upstreams = Arc<tokio::sync::Mutex<HashMap<String, Arc<Resource>>>>;

/// A [`Storage`] whose watches of a resource share one upstream watch of the backend `S`
/// (see the module documentation); everything else goes to `S` unchanged.
pub struct Cacher<S: Storage> {
    inner: Arc<S>,
    config: CacherConfig,
    resources: Upstreams,
}

impl<S: Storage> Cacher<S> {
    /// A watch cache over `inner`.
    pub fn new(inner: Arc<S>, config: CacherConfig) -> Self {
        Cacher { inner, config, resources: Default::default() }
    }

    /// The backend.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// Resources with a running upstream watch.
    pub async fn upstreams(&self) -> usize {
        self.resources.lock().await.len()
    }

    /// The running upstream of `prefix` (a resource prefix), started at the backend's current
    /// revision when there is none (or the last one failed). Errors: the backend's.
    async fn resource(&self, prefix: &str) -> Result<Arc<Resource>, StorageError> {
        let mut resources = self.resources.lock().await;
        if let Some(r) = resources.get(prefix) {
            if !r.lock().failed {
                return Ok(r.clone());
            }
        }
        let start = self.inner.current_revision().await?;
        let upstream = self.inner.watch(prefix, start, Some(self.config.progress_interval)).await?;
        let res = Arc::new(Resource {
            prefix: prefix.to_string(),
            state: Mutex::new(State { floor: start, latest: start, ..State::default() }),
            capacity: self.config.events.max(1),
        });
        resources.insert(prefix.to_string(), res.clone());
        tokio::spawn(run_upstream(res.clone(), upstream, self.resources.clone()));
        Ok(res)
    }
}

/// Reads the upstream into its resource until it fails or ends; then ends its watchers with
/// the error and forgets the resource, so the next watch starts a new upstream.
async fn run_upstream(res: Arc<Resource>, mut upstream: WatchStream, resources: Upstreams) {
    let err = loop {
        match upstream.next().await {
            Some(Ok(ev)) => res.absorb(ev),
            Some(Err(e)) => break e,
            None => break StorageError::Unavailable("the backend closed the watch".into()),
        }
    };
    tracing::info!(prefix = %res.prefix, error = %err, "shared watch ended; its watchers end with it");
    res.fail(&err);
    let mut map = resources.lock().await;
    if map.get(&res.prefix).is_some_and(|r| Arc::ptr_eq(r, &res)) {
        map.remove(&res.prefix);
    }
}

#[async_trait]
impl<S: Storage> Storage for Cacher<S> {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        self.inner.get(key).await
    }

    async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<ListResult, StorageError> {
        self.inner.list(prefix, start, limit, revision).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<i64, StorageError> {
        self.inner.create(key, value).await
    }

    async fn update(&self, key: &str, value: Bytes, expected_revision: i64) -> Result<i64, StorageError> {
        self.inner.update(key, value, expected_revision).await
    }

    async fn delete(&self, key: &str, expected_revision: i64) -> Result<(i64, KeyValue), StorageError> {
        self.inner.delete(key, expected_revision).await
    }

    async fn watch(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>) -> Result<WatchStream, StorageError> {
        let Some(resource) = resource_prefix(prefix) else {
            return self.inner.watch(prefix, after_revision, progress_every).await;
        };
        let index = namespace_of(resource, prefix).unwrap_or("").to_string();
        if after_revision > 0 {
            // the ring may hold history the backend compacted away; a watch from there is
            // the backend's Compacted, as without the cache (a one-key read at the revision)
            let current = self.resource(resource).await?.lock().latest;
            if after_revision < current {
                self.inner.list(prefix, "", 1, after_revision + 1).await?;
            }
        }
        let (tx, rx) = mpsc::channel(self.config.watcher_buffer.max(1));
        let mut tx = Some(tx);
        let replay: Vec<WatchEvent> = loop {
            let res = self.resource(resource).await?;
            // Some(replay): registered; None: failed meanwhile (try again) or too old
            let registered = {
                let mut st = res.lock();
                if st.failed {
                    Err(true)
                } else if after_revision > 0 && after_revision < st.floor {
                    Err(false)
                } else {
                    let after = if after_revision == 0 { st.latest } else { after_revision };
                    let replay: Vec<WatchEvent> = st
                        .ring
                        .iter()
                        .filter(|ev| event_revision(ev) > after && event_key(ev).is_some_and(|k| k.starts_with(prefix)))
                        .cloned()
                        .collect();
                    let last = replay.last().map(event_revision).unwrap_or(after);
                    let id = st.next_id;
                    st.next_id += 1;
                    let w = Watcher { tx: tx.take().expect("registered once"), after: last, progress: progress_every, last_progress: tokio::time::Instant::now() };
                    st.watchers.entry(index.clone()).or_default().insert(id, w);
                    Ok(replay)
                }
            };
            match registered {
                Ok(replay) => break replay,
                // failed since it was handed out: the next call starts a new upstream
                Err(true) => continue,
                // older than the ring: the backend decides (it may still hold it)
                Err(false) => return self.inner.watch(prefix, after_revision, progress_every).await,
            }
        };
        let live = tokio_stream::wrappers::ReceiverStream::new(rx);
        Ok(Box::pin(futures::stream::iter(replay.into_iter().map(Ok)).chain(live)))
    }

    async fn current_revision(&self) -> Result<i64, StorageError> {
        self.inner.current_revision().await
    }

    async fn compact(&self, revision: i64) -> Result<(), StorageError> {
        self.inner.compact(revision).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryStorage;

    fn cacher(events: usize, buffer: usize) -> Cacher<MemoryStorage> {
        Cacher::new(Arc::new(MemoryStorage::new()), CacherConfig { events, watcher_buffer: buffer, progress_interval: Duration::from_millis(50) })
    }

    async fn next_key(s: &mut WatchStream) -> (String, i64) {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), s.next()).await.expect("an event within 5 s") {
                Some(Ok(WatchEvent::Progress(_))) => continue,
                Some(Ok(ev)) => return (event_key(&ev).unwrap().to_string(), event_revision(&ev)),
                other => panic!("stream ended: {:?}", other.map(|r| r.map(|_| ()))),
            }
        }
    }

    #[test]
    fn resource_prefixes() {
        assert_eq!(resource_prefix("/registry/core/pods/"), Some("/registry/core/pods/"));
        assert_eq!(resource_prefix("/registry/work.fedctl.io/works/fed-exec-a/"), Some("/registry/work.fedctl.io/works/"));
        assert_eq!(resource_prefix("/registry/core/pods"), None);
        assert_eq!(resource_prefix("/registry/core/"), None);
        assert_eq!(resource_prefix("/registry/core/pods/ns/name/"), None);
        assert_eq!(resource_prefix("/other/a/b/"), None);
        assert_eq!(resource_prefix("/registry//pods/"), None);
    }

    #[tokio::test]
    async fn namespaces_share_one_upstream_and_see_only_their_own() {
        let c = cacher(100, 100);
        let mut a = c.watch("/registry/w/works/ns-a/", 0, None).await.unwrap();
        let mut b = c.watch("/registry/w/works/ns-b/", 0, None).await.unwrap();
        let mut all = c.watch("/registry/w/works/", 0, None).await.unwrap();
        let mut other = c.watch("/registry/core/pods/", 0, None).await.unwrap();
        assert_eq!(c.upstreams().await, 2);
        c.create("/registry/w/works/ns-a/x", Bytes::from_static(b"1")).await.unwrap();
        c.create("/registry/w/works/ns-b/y", Bytes::from_static(b"2")).await.unwrap();
        c.create("/registry/core/pods/ns-a/p", Bytes::from_static(b"3")).await.unwrap();
        assert_eq!(next_key(&mut a).await.0, "/registry/w/works/ns-a/x");
        assert_eq!(next_key(&mut b).await.0, "/registry/w/works/ns-b/y");
        assert_eq!(next_key(&mut all).await.0, "/registry/w/works/ns-a/x");
        assert_eq!(next_key(&mut all).await.0, "/registry/w/works/ns-b/y");
        assert_eq!(next_key(&mut other).await.0, "/registry/core/pods/ns-a/p");
        // nothing else arrived for a
        assert!(tokio::time::timeout(Duration::from_millis(200), a.next()).await.is_err());
    }

    #[tokio::test]
    async fn resumes_from_the_ring_and_older_revisions_from_the_backend() {
        let c = cacher(3, 100);
        let _keep = c.watch("/registry/w/works/", 0, None).await.unwrap();
        let mut revs = Vec::new();
        for i in 0..6 {
            revs.push(c.create(&format!("/registry/w/works/ns/o{i}"), Bytes::from_static(b"v")).await.unwrap());
        }
        // the ring (3 events) covers revs[2]..: resume after revs[3] gets o4, o5
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut r = c.watch("/registry/w/works/ns/", revs[3], None).await.unwrap();
        assert_eq!(next_key(&mut r).await, ("/registry/w/works/ns/o4".to_string(), revs[4]));
        assert_eq!(next_key(&mut r).await, ("/registry/w/works/ns/o5".to_string(), revs[5]));
        // older than the ring: the backend serves it, every event in order
        let mut old = c.watch("/registry/w/works/", revs[0], None).await.unwrap();
        for (i, rev) in revs.iter().enumerate().skip(1) {
            assert_eq!(next_key(&mut old).await, (format!("/registry/w/works/ns/o{i}"), *rev));
        }
        // and a live event reaches both
        let rev = c.create("/registry/w/works/ns/o6", Bytes::from_static(b"v")).await.unwrap();
        assert_eq!(next_key(&mut r).await.1, rev);
        assert_eq!(next_key(&mut old).await.1, rev);
        assert_eq!(c.upstreams().await, 1);
    }

    #[tokio::test]
    async fn a_watch_from_a_revision_not_yet_seen_skips_up_to_it() {
        let c = cacher(100, 100);
        let _keep = c.watch("/registry/w/works/", 0, None).await.unwrap();
        let r1 = c.create("/registry/w/works/ns/a", Bytes::from_static(b"v")).await.unwrap();
        // a caller that listed at r1 and watches from it sees only later changes
        let mut w = c.watch("/registry/w/works/", r1, None).await.unwrap();
        let r2 = c.create("/registry/w/works/ns/b", Bytes::from_static(b"v")).await.unwrap();
        assert_eq!(next_key(&mut w).await.1, r2);
    }

    #[tokio::test]
    async fn a_lagging_watcher_is_ended_and_others_go_on() {
        let c = cacher(100, 2);
        let mut slow = c.watch("/registry/w/works/", 0, None).await.unwrap();
        let mut fast = c.watch("/registry/w/works/", 0, None).await.unwrap();
        let mut got = 0;
        for i in 0..5 {
            c.create(&format!("/registry/w/works/ns/o{i}"), Bytes::from_static(b"v")).await.unwrap();
            next_key(&mut fast).await;
            got += 1;
        }
        assert_eq!(got, 5);
        // the slow one got its buffer's worth, then its stream ends without an error
        let mut n = 0;
        while let Some(item) = tokio::time::timeout(Duration::from_secs(5), slow.next()).await.unwrap() {
            assert!(item.is_ok());
            n += 1;
        }
        assert_eq!(n, 2);
    }

    #[tokio::test]
    async fn progress_is_offered_to_watchers_that_asked() {
        let c = cacher(100, 100);
        let mut w = c.watch("/registry/w/works/ns/", 0, Some(Duration::from_millis(50))).await.unwrap();
        let rev = c.create("/registry/w/works/other/x", Bytes::from_static(b"v")).await.unwrap();
        loop {
            match tokio::time::timeout(Duration::from_secs(5), w.next()).await.unwrap() {
                Some(Ok(WatchEvent::Progress(r))) if r >= rev => break,
                Some(Ok(WatchEvent::Progress(_))) => continue,
                other => panic!("unexpected {:?}", other.map(|r| r.map(|_| ()))),
            }
        }
    }

    #[tokio::test]
    async fn a_compacted_revision_is_compacted_even_while_the_ring_holds_it() {
        let c = cacher(100, 100);
        let _keep = c.watch("/registry/w/works/", 0, None).await.unwrap();
        let r1 = c.create("/registry/w/works/ns/a", Bytes::from_static(b"v")).await.unwrap();
        let r2 = c.create("/registry/w/works/ns/b", Bytes::from_static(b"v")).await.unwrap();
        let r3 = c.create("/registry/w/works/ns/c", Bytes::from_static(b"v")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        c.compact(r3).await.unwrap();
        match c.watch("/registry/w/works/ns/", r1, None).await {
            Err(StorageError::Compacted { .. }) => {}
            other => panic!("want Compacted, got {:?}", other.map(|_| ())),
        }
        // from the revision just before the compaction point: every later change is held
        let mut w = c.watch("/registry/w/works/ns/", r2, None).await.unwrap();
        assert_eq!(next_key(&mut w).await.1, r3);
    }
}
