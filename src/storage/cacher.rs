//! A watch cache over a [`Storage`]: per resource one LIST and one upstream watch, the current state and an event ring, shared by every watch of the resource or of one of its namespaces and by LISTs that accept a cached answer; uses no other fedctl module.
//!
//! Modelled on kube-apiserver's cacher (`staging/src/k8s.io/apiserver/pkg/storage/cacher`):
//! the first watch or cached list of a resource (`/registry/<group>/<resource>/`) reads the
//! whole resource from the backend once (pages of 10,000 at one revision, as the cacher's
//! reflector does) and starts one watch of it from that revision. Its events keep the
//! current state, go into a ring of the most recent [`CacherConfig::events`] events and are
//! dispatched to the registered watchers, indexed by their prefix (the resource, or one
//! namespace of it), so an event is offered only to the watchers that can match it. With
//! 1,000 agents each watching the Works of its own exec namespace, etcd serves one watch of
//! Works, not 1,000.
//!
//! **Lists** ([`Storage::list_cached`], mirrors the cacher's `GetList`): every key under the
//! resource or one namespace of it at the newest revision the cache has seen, once that is
//! at least `min_revision` (`waitUntilFreshAndBlock`: at most [`CacherConfig::fresh_timeout`],
//! 3 s, then [`StorageError::FutureRevision`], which the API answers as kube-apiserver does:
//! 504 `Too large resource version` with cause `ResourceVersionTooLarge`). The cache learns
//! of revisions without changes to the resource from the backend's progress notifications:
//! asked for every [`CacherConfig::progress_interval`] (1 s), and at once (then every 100 ms)
//! while a list waits, as kube-apiserver's cacher asks etcd for progress on demand, so such a
//! wait takes about one round trip to the backend.
//! [`Storage::list`] (revision semantics: etcd's) always goes to the backend. While the
//! backend cannot be reached (the upstream failed and cannot be restarted), a list with
//! `min_revision = 0` is answered from the last state the cache had (any staleness is
//! allowed there, as kube-apiserver's cache keeps serving while its etcd client reconnects);
//! one with a revision is the backend's error.
//!
//! **Memory**: the cache holds every object of each resource it serves, as the stored bytes
//! (key + value, shared with the events in the ring), plus the ring: about the size of the
//! resource in etcd. [`Cacher::cached_bytes`] reports it. A resource is cached from its first
//! watch or cached list on, never before. Resources in [`CacherConfig::uncached`] (default:
//! both Event resources, which kube-apiserver does not cache either: `events#0`) go to the
//! backend unchanged. Secrets are cached as kube-apiserver caches them: their values are held
//! in this process's memory as long as someone watches or lists them.
//!
//! Watch semantics are the backend's: a watch gets every change with revision >
//! `after_revision` under its prefix, in revision order.
//! - A watch whose `after_revision` the ring still covers is served from it (the ring's
//!   events after that revision, then live events); one older than the ring (but perhaps
//!   still held by etcd) is passed to the backend unchanged, so resuming from any revision
//!   etcd still has works as before, and a compacted one is the backend's `Compacted`.
//! - `after_revision = 0` ("from now") starts at the newest revision the cache has seen.
//! - A watch from a revision older than the newest seen first reads one key at
//!   `after_revision + 1` from the backend, so a revision etcd compacted is `Compacted` even
//!   while the ring still holds its events (the existing 410 behaviour).
//! - `Progress(rev)` is offered to watchers that asked for it, at most once per their
//!   interval.
//! - A watcher that falls [`CacherConfig::watcher_buffer`] events behind is ended (its stream
//!   ends without an error, as kube-apiserver closes a watcher that cannot keep up); the
//!   client resumes from its last revision, which the ring usually still covers.
//! - When the upstream fails (etcd unreachable, compaction), every watcher of the resource
//!   gets that error as its last item and the next watch starts a new upstream (a new LIST).
//!
//! Prefixes that are not a resource or one namespace of it (anything not under
//! `/registry/<a>/<b>/` with at most one more segment) go to the backend directly; so do
//! reads and writes.

use std::collections::{BTreeMap, HashMap, VecDeque};
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
    /// `RequestProgress`), which becomes watchers' `Progress` and lets a cached list know the
    /// cache is fresh. Default 1 s.
    pub progress_interval: Duration,
    /// How long a cached list waits for the cache to reach its `min_revision` (mirrors
    /// kube-apiserver's `blockTimeout`, 3 s).
    pub fresh_timeout: Duration,
    /// Resource prefixes (`/registry/<group>/<resource>/`) never cached: their watches and
    /// lists go to the backend. Default: the core and `events.k8s.io` Events (kube-apiserver's
    /// default `--watch-cache-sizes` disables the cache for both).
    pub uncached: Vec<String>,
}

impl Default for CacherConfig {
    fn default() -> Self {
        CacherConfig {
            events: 4096,
            watcher_buffer: 4096,
            progress_interval: Duration::from_secs(1),
            fresh_timeout: Duration::from_secs(3),
            uncached: vec!["/registry/core/events/".into(), "/registry/events.k8s.io/events/".into()],
        }
    }
}

/// Keys read per backend request while priming a resource (kube-apiserver's cacher lists
/// storage in pages of 10,000).
const PRIME_PAGE: i64 = 10_000;

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

/// The resource prefix (`/registry/<a>/<b>/`) of an object key (`/registry/<a>/<b>/<name>` or
/// `/registry/<a>/<b>/<ns>/<name>`); `None` for a key outside `/registry/`.
fn key_resource(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("/registry/")?;
    let end = rest.match_indices('/').nth(1)?.0;
    Some(&key[..("/registry/".len() + end + 1)])
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
    /// The upstream ended; watchers were told. `objects` is kept as the last known state.
    failed: bool,
    /// The current state: every key of the resource at revision `latest`.
    objects: BTreeMap<String, KeyValue>,
    /// Bytes of keys and values in `objects`.
    bytes: usize,
}

struct Resource {
    prefix: String,
    state: Mutex<State>,
    capacity: usize,
    /// The newest revision seen, for lists waiting until the cache is fresh.
    seen: tokio::sync::watch::Sender<i64>,
    /// Asks the upstream for a progress notification now (a list is waiting).
    progress_requests: Arc<tokio::sync::Notify>,
}

/// While a list waits for a revision, the upstream is asked for progress this often
/// (kube-apiserver's cacher: `progressRequestsInterval`, 100 ms).
const PROGRESS_REQUEST_INTERVAL: Duration = Duration::from_millis(100);

fn kv_bytes(kv: &KeyValue) -> usize {
    kv.key.len() + kv.value.len()
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
        match &ev {
            WatchEvent::Put { kv, .. } => {
                st.bytes += kv_bytes(kv);
                if let Some(old) = st.objects.insert(kv.key.clone(), kv.clone()) {
                    st.bytes -= kv_bytes(&old);
                }
            }
            WatchEvent::Delete { prev, .. } => {
                if let Some(old) = st.objects.remove(&prev.key) {
                    st.bytes -= kv_bytes(&old);
                }
            }
            WatchEvent::Progress(_) => {}
        }
        let latest = st.latest;
        if !matches!(ev, WatchEvent::Progress(_)) {
            if st.ring.len() == self.capacity {
                if let Some(old) = st.ring.pop_front() {
                    st.floor = event_revision(&old);
                }
            }
            st.ring.push_back(ev);
        }
        drop(st);
        self.seen.send_if_modified(|r| std::mem::replace(r, latest) != latest);
    }

    /// Waits until the cache has seen `revision` (at most `timeout`). Errors:
    /// `FutureRevision` with the newest revision seen (mirrors kube-apiserver's
    /// `waitUntilFreshAndBlock` and its "Too large resource version").
    async fn wait_fresh(&self, revision: i64, timeout: Duration) -> Result<(), StorageError> {
        let mut rx = self.seen.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if *rx.borrow_and_update() >= revision {
                return Ok(());
            }
            // a quiet resource learns of newer revisions only from progress notifications:
            // ask for one now, and again while waiting (etcd answers only a caught-up watch)
            self.progress_requests.notify_one();
            let until = deadline.min(tokio::time::Instant::now() + PROGRESS_REQUEST_INTERVAL);
            match tokio::time::timeout_at(until, rx.wait_for(|r| *r >= revision)).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(_)) => break,
                Err(_) if tokio::time::Instant::now() >= deadline => break,
                Err(_) => {}
            }
        }
        let current = *rx.borrow();
        Err(StorageError::FutureRevision { requested: revision, current })
    }

    /// Every key under `prefix` (the resource or one namespace of it) at the newest revision
    /// seen.
    fn snapshot(&self, prefix: &str) -> ListResult {
        let st = self.lock();
        let kvs = st.objects.range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded)).take_while(|(k, _)| k.starts_with(prefix)).map(|(_, kv)| kv.clone()).collect();
        ListResult { kvs, revision: st.latest, remaining: 0 }
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
        self.resources.lock().await.values().filter(|r| !r.lock().failed).count()
    }

    /// Bytes of keys and values the cache holds as current state, over every cached resource
    /// (the ring's events share most of them).
    pub async fn cached_bytes(&self) -> usize {
        self.resources.lock().await.values().map(|r| r.lock().bytes).sum()
    }

    /// The resource prefix of `prefix` when the cache serves it (a resource or one namespace
    /// of it, not in [`CacherConfig::uncached`]).
    fn cached_resource<'a>(&self, prefix: &'a str) -> Option<&'a str> {
        resource_prefix(prefix).filter(|r| !self.config.uncached.iter().any(|u| u == r))
    }

    /// The running upstream of `prefix` (a resource prefix), primed by one list of the
    /// resource and watching from its revision, started when there is none (or the last one
    /// failed). Errors: the backend's.
    async fn resource(&self, prefix: &str) -> Result<Arc<Resource>, StorageError> {
        let mut resources = self.resources.lock().await;
        if let Some(r) = resources.get(prefix) {
            if !r.lock().failed {
                return Ok(r.clone());
            }
        }
        let (objects, start) = prime(&*self.inner, prefix).await?;
        let progress_requests = Arc::new(tokio::sync::Notify::new());
        let upstream = self.inner.watch_with_progress_requests(prefix, start, Some(self.config.progress_interval), progress_requests.clone()).await?;
        let bytes = objects.values().map(kv_bytes).sum();
        let res = Arc::new(Resource {
            prefix: prefix.to_string(),
            state: Mutex::new(State { floor: start, latest: start, objects, bytes, ..State::default() }),
            capacity: self.config.events.max(1),
            seen: tokio::sync::watch::Sender::new(start),
            progress_requests,
        });
        resources.insert(prefix.to_string(), res.clone());
        tokio::spawn(run_upstream(res.clone(), upstream));
        Ok(res)
    }

    /// The last state of a resource whose upstream failed, if there is one.
    async fn stale(&self, prefix: &str) -> Option<Arc<Resource>> {
        self.resources.lock().await.get(prefix).filter(|r| r.lock().failed).cloned()
    }
}

/// Reads every key under `prefix` at one revision, page by page; returns them by key with
/// that revision.
async fn prime<S: Storage>(inner: &S, prefix: &str) -> Result<(BTreeMap<String, KeyValue>, i64), StorageError> {
    let mut objects = BTreeMap::new();
    let (mut start, mut revision) = (String::new(), 0);
    loop {
        let page = inner.list(prefix, &start, PRIME_PAGE, revision).await?;
        revision = page.revision;
        let more = page.remaining > 0;
        if let Some(last) = page.kvs.last() {
            start = format!("{}\u{0}", last.key);
        }
        objects.extend(page.kvs.into_iter().map(|kv| (kv.key.clone(), kv)));
        if !more {
            return Ok((objects, revision));
        }
    }
}

/// Reads the upstream into its resource until it fails or ends; then ends its watchers with
/// the error and marks the resource failed, so the next watch starts a new upstream (its last
/// state stays for lists that accept any staleness).
async fn run_upstream(res: Arc<Resource>, mut upstream: WatchStream) {
    let err = loop {
        match upstream.next().await {
            Some(Ok(ev)) => res.absorb(ev),
            Some(Err(e)) => break e,
            None => break StorageError::Unavailable("the backend closed the watch".into()),
        }
    };
    tracing::info!(prefix = %res.prefix, error = %err, "shared watch ended; its watchers end with it");
    res.fail(&err);
}

#[async_trait]
impl<S: Storage> Storage for Cacher<S> {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        self.inner.get(key).await
    }

    async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<ListResult, StorageError> {
        self.inner.list(prefix, start, limit, revision).await
    }

    async fn list_cached(&self, prefix: &str, min_revision: i64) -> Result<ListResult, StorageError> {
        let Some(resource) = self.cached_resource(prefix) else {
            return self.inner.list_cached(prefix, min_revision).await;
        };
        let res = match self.resource(resource).await {
            Ok(res) => res,
            Err(e) => match self.stale(resource).await {
                // the backend is unreachable: any staleness is allowed at revision 0
                Some(res) if min_revision == 0 => {
                    tracing::debug!(prefix, error = %e, "serving a list from the last cached state");
                    return Ok(res.snapshot(prefix));
                }
                _ => return Err(e),
            },
        };
        if min_revision > 0 {
            res.wait_fresh(min_revision, self.config.fresh_timeout).await?;
        }
        Ok(res.snapshot(prefix))
    }

    /// The cache's copy of `key` when its resource has a running upstream; never primes one,
    /// never waits (the resource map is only tried: while it is busy, `None`).
    fn get_cached(&self, key: &str) -> Option<KeyValue> {
        let resource = self.cached_resource(key_resource(key)?)?;
        let res = self.resources.try_lock().ok()?.get(resource).cloned()?;
        let st = res.lock();
        if st.failed {
            return None;
        }
        st.objects.get(key).cloned()
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
        let Some(resource) = self.cached_resource(prefix) else {
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
                    let replay: Vec<WatchEvent> = st.ring.iter().filter(|ev| event_revision(ev) > after && event_key(ev).is_some_and(|k| k.starts_with(prefix))).cloned().collect();
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
        Cacher::new(
            Arc::new(MemoryStorage::new()),
            CacherConfig { events, watcher_buffer: buffer, progress_interval: Duration::from_millis(50), fresh_timeout: Duration::from_millis(500), ..Default::default() },
        )
    }

    fn keys(r: &ListResult) -> Vec<&str> {
        r.kvs.iter().map(|kv| kv.key.as_str()).collect()
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

    /// The cache's copy of a key is offered only while its resource is cached and follows
    /// the writes; no read of the backend primes a resource.
    #[tokio::test]
    async fn get_cached_serves_only_cached_resources_and_follows_writes() {
        let c = cacher(100, 100);
        let key = "/registry/w/works/ns-a/w1";
        let rev = c.create(key, Bytes::from_static(b"1")).await.unwrap();
        assert_eq!(c.get_cached(key), None, "nothing cached before a watch or cached list");
        assert_eq!(c.upstreams().await, 0, "get_cached primes nothing");
        let mut w = c.watch("/registry/w/works/ns-a/", 0, None).await.unwrap();
        assert_eq!(c.get_cached(key).map(|kv| (kv.value, kv.mod_revision)), Some((Bytes::from_static(b"1"), rev)));
        assert_eq!(c.get_cached("/registry/w/works/ns-a/none"), None);
        assert_eq!(c.get_cached("/registry/w/other/ns-a/w1"), None, "another resource is not cached");
        let rev2 = c.update(key, Bytes::from_static(b"2"), rev).await.unwrap();
        assert_eq!(next_key(&mut w).await, (key.to_string(), rev2));
        assert_eq!(c.get_cached(key).map(|kv| kv.mod_revision), Some(rev2));
        assert_eq!(key_resource(key), Some("/registry/w/works/"));
        assert_eq!(key_resource("/registry/core/namespaces/shop"), Some("/registry/core/namespaces/"));
        assert_eq!(key_resource("/registry/core"), None);
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

    #[tokio::test]
    async fn a_cached_list_is_primed_from_the_backend_and_follows_its_changes() {
        let c = cacher(100, 100);
        let v = Bytes::from_static(b"v");
        c.create("/registry/w/works/ns-a/x", v.clone()).await.unwrap();
        c.create("/registry/w/works/ns-b/y", v.clone()).await.unwrap();
        let r = c.create("/registry/w/works/ns-a/z", v.clone()).await.unwrap();
        // primed by one list: the namespace's keys, at least at the last write
        let l = c.list_cached("/registry/w/works/ns-a/", 0).await.unwrap();
        assert_eq!(keys(&l), ["/registry/w/works/ns-a/x", "/registry/w/works/ns-a/z"]);
        assert!(l.revision >= r);
        assert_eq!(keys(&c.list_cached("/registry/w/works/", 0).await.unwrap()).len(), 3);
        assert_eq!(c.upstreams().await, 1);
        assert_eq!(c.cached_bytes().await, 3 * ("/registry/w/works/ns-a/x".len() + 1));
        // later changes reach the state; NotOlderThan their revision waits for them
        let (rd, _) = c.delete("/registry/w/works/ns-a/x", 0).await.unwrap();
        let ru = c.update("/registry/w/works/ns-a/z", Bytes::from_static(b"v2"), r).await.unwrap();
        let l = c.list_cached("/registry/w/works/ns-a/", ru.max(rd)).await.unwrap();
        assert_eq!(keys(&l), ["/registry/w/works/ns-a/z"]);
        assert_eq!(l.kvs[0].value, Bytes::from_static(b"v2"));
        assert_eq!(l.kvs[0].mod_revision, ru);
        assert_eq!(l.revision, ru);
        // the backend was read once (the prime), not again: its state differs from the cache's
        // only by what the cache has not seen yet
        assert_eq!(c.upstreams().await, 1);
    }

    #[tokio::test]
    async fn a_revision_ahead_of_the_cache_waits_then_is_a_future_revision() {
        let c = cacher(100, 100);
        let r = c.create("/registry/w/works/ns/a", Bytes::from_static(b"v")).await.unwrap();
        let t0 = tokio::time::Instant::now();
        match c.list_cached("/registry/w/works/", r + 10).await {
            Err(StorageError::FutureRevision { requested, current }) => {
                assert_eq!(requested, r + 10);
                assert!(current >= r && current < r + 10, "current {current}");
            }
            other => panic!("want FutureRevision, got {:?}", other.map(|l| l.revision)),
        }
        assert!(t0.elapsed() >= Duration::from_millis(500), "answered after {:?}, before the fresh timeout", t0.elapsed());
        // a wait that a write ends in time succeeds
        let c = Arc::new(c);
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move { c.list_cached("/registry/w/works/", r + 1).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let r2 = c.create("/registry/w/works/ns/b", Bytes::from_static(b"v")).await.unwrap();
        let l = waiter.await.unwrap().unwrap();
        assert!(l.revision >= r2);
        assert_eq!(keys(&l).len(), 2);
    }

    #[tokio::test]
    async fn a_revision_of_another_resource_is_reached_through_progress() {
        let c = cacher(100, 100);
        c.create("/registry/w/works/ns/a", Bytes::from_static(b"v")).await.unwrap();
        c.list_cached("/registry/w/works/", 0).await.unwrap();
        // works do not change; pods do: the works cache learns the revision from progress
        let r = c.create("/registry/core/pods/ns/p", Bytes::from_static(b"v")).await.unwrap();
        let l = c.list_cached("/registry/w/works/", r).await.unwrap();
        assert!(l.revision >= r);
        assert_eq!(keys(&l), ["/registry/w/works/ns/a"]);
    }

    #[tokio::test]
    async fn a_waiting_list_asks_for_progress_rather_than_wait_for_the_next_one() {
        // progress only every hour: the revision is learnt through the list's own request
        let c = Cacher::new(Arc::new(MemoryStorage::new()), CacherConfig { progress_interval: Duration::from_secs(3600), fresh_timeout: Duration::from_secs(5), ..Default::default() });
        c.create("/registry/w/works/ns/a", Bytes::from_static(b"v")).await.unwrap();
        c.list_cached("/registry/w/works/", 0).await.unwrap();
        for i in 0..3 {
            let r = c.create(&format!("/registry/core/pods/ns/p{i}"), Bytes::from_static(b"v")).await.unwrap();
            let l = c.list_cached("/registry/w/works/", r).await.unwrap();
            assert!(l.revision >= r);
            assert_eq!(keys(&l), ["/registry/w/works/ns/a"]);
        }
    }

    #[tokio::test]
    async fn uncached_resources_go_to_the_backend() {
        let c = cacher(100, 100);
        c.create("/registry/core/events/ns/e", Bytes::from_static(b"v")).await.unwrap();
        let mut w = c.watch("/registry/core/events/ns/", 0, None).await.unwrap();
        let l = c.list_cached("/registry/core/events/", 0).await.unwrap();
        assert_eq!(keys(&l), ["/registry/core/events/ns/e"]);
        assert_eq!(c.upstreams().await, 0);
        assert_eq!(c.cached_bytes().await, 0);
        // the backend's own watch still works
        c.create("/registry/core/events/ns/f", Bytes::from_static(b"v")).await.unwrap();
        assert_eq!(next_key(&mut w).await.0, "/registry/core/events/ns/f");
        // a list the backend cannot answer at the revision is a FutureRevision at once
        let current = c.current_revision().await.unwrap();
        assert!(matches!(c.list_cached("/registry/core/events/", current + 5).await, Err(StorageError::FutureRevision { .. })));
    }

    #[tokio::test]
    async fn a_watch_after_a_cached_list_resumes_from_its_revision() {
        let c = cacher(100, 100);
        c.create("/registry/w/works/ns/a", Bytes::from_static(b"v")).await.unwrap();
        let l = c.list_cached("/registry/w/works/ns/", 0).await.unwrap();
        let mut w = c.watch("/registry/w/works/ns/", l.revision, None).await.unwrap();
        let r = c.create("/registry/w/works/ns/b", Bytes::from_static(b"v")).await.unwrap();
        assert_eq!(next_key(&mut w).await, ("/registry/w/works/ns/b".to_string(), r));
    }
}
