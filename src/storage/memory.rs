//! In-memory revisioned backend of [`super::Storage`] (used by fedsim and tests).
//!
//! State: the current keys in a `BTreeMap`, plus a bounded, revision-contiguous history of
//! changes (each with the new and the previous state). Values are [`Bytes`], so the map and
//! the history share one allocation per stored version. The history serves watches from past
//! revisions and lists at past revisions (by undoing the newer changes); whatever has been
//! evicted from it (capacity) or dropped by [`Storage::compact`] answers
//! [`StorageError::Compacted`], as etcd does.
//!
//! Watchers do not get their own queue: each one keeps a cursor into the shared history and
//! reads it in batches, woken by a revision signal. A watcher that falls so far behind that
//! its cursor has been evicted ends with `Compacted` (like kube-apiserver closing a slow
//! watcher), so no event is ever silently skipped.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::{KeyValue, ListResult, Storage, StorageError, WatchEvent, WatchStream};

/// Default number of changes kept in the history (see [`MemoryStorage::with_history`]).
pub const DEFAULT_HISTORY: usize = 100_000;

/// Most history entries one watcher examines per lock acquisition.
const WATCH_SCAN_BATCH: usize = 1024;

/// Page ends remembered for paged lists (see [`State::page_ends`]); the memo is emptied when
/// it is full.
const PAGE_END_MEMO: usize = 1024;

/// A revisioned in-memory key-value store with etcd's semantics.
///
/// Cloning is cheap and yields a handle to the same store. Revisions start at 1 for an empty
/// store (as in etcd), so the first write gets revision 2.
#[derive(Clone)]
pub struct MemoryStorage {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Carries the current revision; only used to wake watchers after a write.
    rev_tx: watch::Sender<i64>,
}

/// One stored version of a key (the key itself lives next to it).
#[derive(Clone)]
struct Version {
    value: Bytes,
    create_revision: i64,
    mod_revision: i64,
}

/// One change in the history: `new` is `None` for a deletion, `prev` is `None` for a creation.
struct Change {
    revision: i64,
    key: Arc<str>,
    new: Option<Version>,
    prev: Option<Version>,
}

struct State {
    revision: i64,
    /// Oldest revision still served: lists at `revision >= compacted` and watches from
    /// `after_revision >= compacted - 1` work. The history holds every change with a
    /// revision >= `compacted`.
    compacted: i64,
    keys: BTreeMap<Arc<str>, Version>,
    /// Changes in revision order; revisions are contiguous (one change per revision).
    history: VecDeque<Arc<Change>>,
    capacity: usize,
    /// Paged lists' page ends: (revision, prefix, last key of a page) → present entries under
    /// the prefix after that key at that revision. The state at a served revision never
    /// changes, so the next page (which starts right after the key) takes its remaining count
    /// from here instead of walking the rest of the range again: a paged LIST of n keys costs
    /// O(n), not O(n²/limit). etcd counts the range on every page too; this store is the
    /// simulator's, where a member of 1M pods is read in 2,000 pages.
    page_ends: HashMap<(i64, Box<str>, Box<str>), usize>,
}

impl Default for MemoryStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStorage {
    /// An empty store keeping the last [`DEFAULT_HISTORY`] changes.
    pub fn new() -> Self {
        Self::with_history(DEFAULT_HISTORY)
    }

    /// An empty store keeping the last `capacity` changes (at least 1) for watches and
    /// lists at past revisions; older revisions answer `Compacted`.
    pub fn with_history(capacity: usize) -> Self {
        let (rev_tx, _) = watch::channel(1);
        MemoryStorage {
            inner: Arc::new(Inner {
                state: Mutex::new(State { revision: 1, compacted: 1, keys: BTreeMap::new(), history: VecDeque::new(), capacity: capacity.max(1), page_ends: HashMap::new() }),
                rev_tx,
            }),
        }
    }

    /// Number of keys currently stored.
    pub fn key_count(&self) -> usize {
        self.inner.lock().keys.len()
    }

    /// Oldest revision still served by lists and watches (compaction / history horizon).
    pub fn compacted_revision(&self) -> i64 {
        self.inner.lock().compacted
    }

    /// Drops every key and all history, as if the store had been rebuilt, but keeps
    /// revisions increasing: the revision is bumped and everything before the new one
    /// answers `Compacted`, so open watches end with `Compacted` and clients re-list instead
    /// of resuming into the new state. Returns the new revision.
    pub fn reset(&self) -> i64 {
        let mut st = self.inner.lock();
        st.keys.clear();
        st.history.clear();
        st.page_ends.clear();
        // two steps, so that even a client holding the last old revision cannot resume
        st.revision += 2;
        st.compacted = st.revision;
        let rev = st.revision;
        self.inner.rev_tx.send_replace(rev);
        rev
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters more than losing the store, so keep serving.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies one change under the held lock: bumps the revision, updates the map, records
    /// history (evicting beyond capacity) and wakes watchers. Returns the new revision.
    fn apply(&self, st: &mut State, key: Arc<str>, new_value: Option<Bytes>) -> i64 {
        st.revision += 1;
        let revision = st.revision;
        let new = new_value.map(|value| {
            let create_revision = st.keys.get(&*key).map_or(revision, |v| v.create_revision);
            Version { value, create_revision, mod_revision: revision }
        });
        let prev = match &new {
            Some(v) => st.keys.insert(key.clone(), v.clone()),
            None => st.keys.remove(&*key),
        };
        st.history.push_back(Arc::new(Change { revision, key, new, prev }));
        while st.history.len() > st.capacity {
            if let Some(evicted) = st.history.pop_front() {
                st.compacted = st.compacted.max(evicted.revision + 1);
            }
        }
        self.rev_tx.send_replace(revision);
        revision
    }

    /// Reads history for a watcher: up to [`WATCH_SCAN_BATCH`] changes from revision `next`
    /// on, keeping those under `prefix`. Returns the matches, the next revision to read and
    /// the current revision; `Compacted` when `next` has left the history.
    fn read_changes(&self, prefix: &str, next: i64) -> Result<(Vec<Arc<Change>>, i64, i64), StorageError> {
        let st = self.lock();
        if next < st.compacted {
            return Err(StorageError::Compacted { requested: next, compacted: st.compacted });
        }
        let mut matches = Vec::new();
        let mut next_out = next;
        if let Some(front) = st.history.front() {
            let skip = usize::try_from(next - front.revision).unwrap_or(0);
            for change in st.history.iter().skip(skip).take(WATCH_SCAN_BATCH) {
                if change.key.starts_with(prefix) {
                    matches.push(change.clone());
                }
                next_out = change.revision + 1;
            }
        }
        Ok((matches, next_out, st.revision))
    }
}

impl State {
    /// Entries under `prefix` from `from` on, as of `revision` (which must be served), in key
    /// order: at most `limit` (0 = all) returned plus the count of the rest. A `from` of
    /// `K + "\0"` after a page that ended at `K` takes the count from [`State::page_ends`].
    fn range_at(&mut self, prefix: &str, from: &str, limit: usize, revision: i64) -> (Vec<(Arc<str>, Version)>, usize) {
        let known_rest = from.strip_suffix('\0').and_then(|last| self.page_ends.get(&(revision, Box::from(prefix), Box::from(last)))).copied();
        let (out, rest) = self.collect_at(prefix, from, limit, revision, known_rest);
        if rest > 0 {
            if let Some((last, _)) = out.last() {
                if self.page_ends.len() >= PAGE_END_MEMO {
                    self.page_ends.clear();
                }
                self.page_ends.insert((revision, Box::from(prefix), Box::from(&**last)), rest);
            }
        }
        (out, rest)
    }

    /// [`State::range_at`] without the memo: `known_rest` is the count of present entries
    /// from `from` on, when known (then the rest is not walked).
    fn collect_at(&self, prefix: &str, from: &str, limit: usize, revision: i64, known_rest: Option<usize>) -> (Vec<(Arc<str>, Version)>, usize) {
        let in_range = |k: &str| k.starts_with(prefix);
        let current = self.keys.range::<str, _>((Bound::Included(from), Bound::Unbounded)).take_while(|(k, _)| in_range(k)).map(|(k, v)| (k, Some(v)));

        if revision >= self.revision {
            return collect_limited(current, limit, known_rest);
        }

        // Undo every change newer than `revision`, newest first, so that the last write per
        // key leaves the state it had at `revision`.
        let mut overlay: BTreeMap<&Arc<str>, Option<&Version>> = BTreeMap::new();
        for change in self.history.iter().rev() {
            if change.revision <= revision {
                break;
            }
            if in_range(&change.key) && &*change.key >= from {
                overlay.insert(&change.key, change.prev.as_ref());
            }
        }
        let merged = MergeOverlay { base: current.peekable(), overlay: overlay.into_iter().peekable() };
        collect_limited(merged, limit, known_rest)
    }
}

/// Takes up to `limit` (0 = all) present entries, cloning them (refcounts only), and counts
/// the present entries left over; `known_rest` (the present entries in all, when known)
/// spares walking them.
fn collect_limited<'a, I>(iter: I, limit: usize, known_rest: Option<usize>) -> (Vec<(Arc<str>, Version)>, usize)
where
    I: Iterator<Item = (&'a Arc<str>, Option<&'a Version>)>,
{
    let mut present = iter.filter_map(|(k, v)| v.map(|v| (k, v)));
    let mut out = Vec::new();
    for (k, v) in present.by_ref() {
        out.push((k.clone(), v.clone()));
        if limit != 0 && out.len() >= limit {
            break;
        }
    }
    let rest = match known_rest {
        Some(all) => all.saturating_sub(out.len()),
        None => present.count(),
    };
    (out, rest)
}

/// Merges the current entries with the undo overlay (both in key order); the overlay wins.
struct MergeOverlay<'a, B, O>
where
    B: Iterator<Item = (&'a Arc<str>, Option<&'a Version>)>,
    O: Iterator<Item = (&'a Arc<str>, Option<&'a Version>)>,
{
    base: std::iter::Peekable<B>,
    overlay: std::iter::Peekable<O>,
}

impl<'a, B, O> Iterator for MergeOverlay<'a, B, O>
where
    B: Iterator<Item = (&'a Arc<str>, Option<&'a Version>)>,
    O: Iterator<Item = (&'a Arc<str>, Option<&'a Version>)>,
{
    type Item = (&'a Arc<str>, Option<&'a Version>);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.base.peek(), self.overlay.peek()) {
            (None, None) => None,
            (Some(_), None) => self.base.next(),
            (None, Some(_)) => self.overlay.next(),
            (Some((bk, _)), Some((ok, _))) => match (***bk).cmp(&***ok) {
                std::cmp::Ordering::Less => self.base.next(),
                std::cmp::Ordering::Greater => self.overlay.next(),
                std::cmp::Ordering::Equal => {
                    self.base.next();
                    self.overlay.next()
                }
            },
        }
    }
}

fn to_kv(key: &str, v: &Version) -> KeyValue {
    KeyValue { key: key.to_string(), value: v.value.clone(), create_revision: v.create_revision, mod_revision: v.mod_revision }
}

fn to_event(change: &Change) -> WatchEvent {
    let prev = change.prev.as_ref().map(|p| to_kv(&change.key, p));
    match (&change.new, prev) {
        (Some(new), prev) => WatchEvent::Put { kv: to_kv(&change.key, new), prev },
        (None, Some(prev)) => WatchEvent::Delete { prev, revision: change.revision },
        // A deletion always has a previous state; keep the stream total anyway.
        (None, None) => WatchEvent::Delete { prev: KeyValue { key: change.key.to_string(), value: Bytes::new(), create_revision: 0, mod_revision: 0 }, revision: change.revision },
    }
}

#[async_trait]
impl Storage for MemoryStorage {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        let st = self.inner.lock();
        Ok(st.keys.get(key).map(|v| to_kv(key, v)))
    }

    async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<ListResult, StorageError> {
        let from = if start > prefix { start } else { prefix };
        let limit = usize::try_from(limit.max(0)).unwrap_or(usize::MAX);
        let (entries, rest, served_at) = {
            let mut st = self.inner.lock();
            let at = if revision <= 0 { st.revision } else { revision };
            if at > st.revision {
                return Err(StorageError::FutureRevision { requested: at, current: st.revision });
            }
            if at < st.compacted {
                return Err(StorageError::Compacted { requested: at, compacted: st.compacted });
            }
            let (entries, rest) = st.range_at(prefix, from, limit, at);
            (entries, rest, at)
        };
        // Key strings are allocated outside the lock.
        let kvs = entries.iter().map(|(k, v)| to_kv(k, v)).collect();
        Ok(ListResult { kvs, revision: served_at, remaining: rest as i64 })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<i64, StorageError> {
        let mut st = self.inner.lock();
        if st.keys.contains_key(key) {
            return Err(StorageError::AlreadyExists(key.to_string()));
        }
        Ok(self.inner.apply(&mut st, Arc::from(key), Some(value)))
    }

    async fn update(&self, key: &str, value: Bytes, expected_revision: i64) -> Result<i64, StorageError> {
        let mut st = self.inner.lock();
        let (stored_key, current) = match st.keys.get_key_value(key) {
            None => return Err(StorageError::NotFound(key.to_string())),
            Some((k, v)) => (k.clone(), v),
        };
        if current.mod_revision != expected_revision {
            return Err(StorageError::Conflict { key: key.to_string(), current: Some(to_kv(key, current)) });
        }
        Ok(self.inner.apply(&mut st, stored_key, Some(value)))
    }

    async fn delete(&self, key: &str, expected_revision: i64) -> Result<(i64, KeyValue), StorageError> {
        let mut st = self.inner.lock();
        let (stored_key, current) = match st.keys.get_key_value(key) {
            None => return Err(StorageError::NotFound(key.to_string())),
            Some((k, v)) => (k.clone(), to_kv(key, v)),
        };
        if expected_revision != 0 && current.mod_revision != expected_revision {
            return Err(StorageError::Conflict { key: key.to_string(), current: Some(current) });
        }
        let revision = self.inner.apply(&mut st, stored_key, None);
        Ok((revision, current))
    }

    async fn watch(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>) -> Result<WatchStream, StorageError> {
        self.open_watch(prefix, after_revision, progress_every, None)
    }

    async fn watch_with_progress_requests(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>, requests: Arc<Notify>) -> Result<WatchStream, StorageError> {
        self.open_watch(prefix, after_revision, progress_every, Some(requests))
    }

    async fn current_revision(&self) -> Result<i64, StorageError> {
        Ok(self.inner.lock().revision)
    }

    async fn compact(&self, revision: i64) -> Result<(), StorageError> {
        let mut st = self.inner.lock();
        if revision > st.revision {
            return Err(StorageError::FutureRevision { requested: revision, current: st.revision });
        }
        if revision <= st.compacted {
            return Ok(());
        }
        while st.history.front().is_some_and(|c| c.revision < revision) {
            st.history.pop_front();
        }
        st.compacted = revision;
        Ok(())
    }
}

impl MemoryStorage {
    /// Opens one watch (see [`Storage::watch`]); with `requests`, each notification makes
    /// the watch yield a `Progress` once it has caught up.
    fn open_watch(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>, requests: Option<Arc<Notify>>) -> Result<WatchStream, StorageError> {
        let next = {
            let st = self.inner.lock();
            if after_revision <= 0 {
                st.revision + 1
            } else if after_revision + 1 < st.compacted {
                return Err(StorageError::Compacted { requested: after_revision + 1, compacted: st.compacted });
            } else {
                after_revision + 1
            }
        };
        let state = MemWatch {
            inner: self.inner.clone(),
            rev_rx: self.inner.rev_tx.subscribe(),
            prefix: prefix.to_string(),
            next,
            pending: VecDeque::new(),
            progress: progress_every.map(|every| (every, Instant::now() + every)),
            requests,
            asked: false,
            done: false,
        };
        Ok(Box::pin(futures::stream::unfold(state, |mut w| async move {
            let item = w.next_item().await?;
            Some((item, w))
        })))
    }
}

/// State of one memory watch stream.
struct MemWatch {
    inner: Arc<Inner>,
    rev_rx: watch::Receiver<i64>,
    prefix: String,
    /// Next revision to examine.
    next: i64,
    pending: VecDeque<WatchEvent>,
    /// Progress interval and the time the next `Progress` is due.
    progress: Option<(Duration, Instant)>,
    /// Progress requests (see [`Storage::watch_with_progress_requests`]).
    requests: Option<Arc<Notify>>,
    /// A progress request came: the next caught-up point yields `Progress`.
    asked: bool,
    done: bool,
}

impl MemWatch {
    async fn next_item(&mut self) -> Option<Result<WatchEvent, StorageError>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(ev) = self.pending.pop_front() {
                return Some(Ok(ev));
            }
            // Mark the signal seen *before* reading, so a write after the read wakes us.
            self.rev_rx.borrow_and_update();
            let (changes, next, current) = match self.inner.read_changes(&self.prefix, self.next) {
                Ok(read) => read,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            self.next = next;
            self.pending.extend(changes.iter().map(|c| to_event(c)));
            if !self.pending.is_empty() {
                continue;
            }
            let caught_up = self.next > current;
            if !caught_up {
                continue; // a batch without matches; keep scanning
            }
            if std::mem::take(&mut self.asked) {
                return Some(Ok(WatchEvent::Progress(current)));
            }
            if let Some((every, due)) = self.progress.as_mut() {
                if Instant::now() >= *due {
                    *due = Instant::now() + *every;
                    return Some(Ok(WatchEvent::Progress(current)));
                }
            }
            let due = self.progress.map(|(_, due)| due);
            let (rev_rx, requests) = (&mut self.rev_rx, &self.requests);
            let (changed, asked) = tokio::select! {
                changed = rev_rx.changed() => (changed.is_ok(), false),
                _ = sleep_until_opt(due) => (true, false),
                _ = super::progress_requested(requests) => (true, true),
            };
            self.asked = asked;
            // The sender lives in `inner`, which we hold, so this cannot happen; end cleanly.
            if !changed {
                self.done = true;
                return None;
            }
        }
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
