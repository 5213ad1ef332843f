//! WATCH streams over storage watches (mirrors kube-apiserver's watch handler and cacher).
//!
//! One JSON object per line: `{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{…}}`.
//! Selector transitions follow the cacher: matched before and after → MODIFIED, only after →
//! ADDED, only before → DELETED. A compacted start revision yields one ERROR event carrying a
//! 410 Expired Status, then the stream ends.
//!
//! Each live event is encoded once for all the watches of one server that send it as is
//! ([`SharedLines`], mirrors kube-apiserver's `cachingObject`): the watch cache hands the
//! same event to every watcher of the resource, and the first to send it encodes the line
//! the others reuse (a reference-counted buffer, not a copy per watcher).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::error::{ApiError, ApiResult};
use super::object;
use super::registry::ResourceInfo;
use super::selector::{FieldSelector, LabelSelector};
use super::table;
use crate::storage::{Storage, StorageError, WatchEvent};

/// Parameters of one watch.
pub struct WatchOptions {
    /// The watched resource.
    pub info: Arc<ResourceInfo>,
    /// Storage prefix (resource, maybe namespace).
    pub prefix: String,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// Start after this resourceVersion; `None` = from the current state.
    pub start_rv: Option<i64>,
    /// Send the current state as ADDED events first (RV ""/"0", or sendInitialEvents).
    pub initial_events: bool,
    /// After the initial events, send a BOOKMARK annotated `k8s.io/initial-events-end`.
    pub send_initial_bookmark: bool,
    /// The client asked for bookmarks (`allowWatchBookmarks`).
    pub bookmarks: bool,
    /// Interval between bookmarks.
    pub bookmark_interval: Duration,
    /// The stream ends after this long (`timeoutSeconds`).
    pub timeout: Duration,
    /// Render event objects as one-row Tables (`kubectl get -w`).
    pub as_table: bool,
    /// Table `includeObject`.
    pub include_object: String,
    /// Events buffered for the connection (see [`start`]).
    pub buffer: usize,
    /// A watcher whose buffer stays full this long is dropped (see [`start`]).
    pub send_timeout: Duration,
    /// Event lines shared with the server's other watches.
    pub shared: Arc<SharedLines>,
}

/// Encoded lines of recent live events, shared by the watches of one server so that an event
/// sent to many watchers is encoded once (mirrors kube-apiserver's `cachingObject`, which
/// keeps an event's serializations while it is dispatched).
///
/// Keyed by (event type, revision, storage key): in one store that names one object state,
/// so every watch that sends the event unchanged (no Table, no version conversion) sends the
/// same bytes. Holds the last [`SharedLines::CAPACITY`] lines (FIFO); a miss only costs the
/// encoding.
#[derive(Default)]
pub struct SharedLines {
    inner: Mutex<LinesInner>,
}

#[derive(Default)]
struct LinesInner {
    lines: HashMap<(u8, i64), (String, Bytes)>,
    order: VecDeque<(u8, i64)>,
    hits: u64,
    misses: u64,
}

impl SharedLines {
    /// Lines kept.
    pub const CAPACITY: usize = 4096;

    fn code(ty: &str) -> u8 {
        match ty {
            "ADDED" => 1,
            "MODIFIED" => 2,
            "DELETED" => 3,
            _ => 0,
        }
    }

    /// The line of event `ty` of `key` at `rv`: the shared one, or `encode()`'s (then shared).
    /// `None` when `encode` gives none.
    pub fn get_or_encode(&self, ty: &str, key: &str, rv: i64, encode: impl FnOnce() -> Option<Bytes>) -> Option<Bytes> {
        let id = (Self::code(ty), rv);
        {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((k, line)) = g.lines.get(&id) {
                if k == key {
                    let line = line.clone();
                    g.hits += 1;
                    return Some(line);
                }
            }
            g.misses += 1;
        }
        let line = encode()?;
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.lines.insert(id, (key.to_string(), line.clone())).is_none() {
            g.order.push_back(id);
            while g.order.len() > Self::CAPACITY {
                if let Some(old) = g.order.pop_front() {
                    g.lines.remove(&old);
                }
            }
        }
        Some(line)
    }

    /// (lines reused, lines encoded) so far.
    pub fn counts(&self) -> (u64, u64) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (g.hits, g.misses)
    }
}

/// Encodes one watch event line.
pub fn event_line(ty: &str, obj: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": ty, "object": obj})).expect("serializable");
    v.push(b'\n');
    Bytes::from(v)
}

/// Encodes one watch event line from an object's stored form without decoding it
/// (see [`object::write_stored_with_rv`]); `None` when the bytes are not in stored form.
pub fn raw_event_line(ty: &str, stored: &[u8], rv: i64) -> Option<Bytes> {
    let mut v = Vec::with_capacity(stored.len() + 64);
    v.extend_from_slice(b"{\"type\":\"");
    v.extend_from_slice(ty.as_bytes());
    v.extend_from_slice(b"\",\"object\":");
    if !object::write_stored_with_rv(&mut v, stored, rv) {
        return None;
    }
    v.extend_from_slice(b"}\n");
    Some(Bytes::from(v))
}

/// The ERROR event for an API error (e.g. 410 Expired).
pub fn error_line(e: &ApiError) -> Bytes {
    event_line("ERROR", &e.status())
}

/// Starts a watch; returns a channel of encoded event lines (at most `opts.buffer` waiting).
/// The setup errors that kube-apiserver reports before the stream starts (bad selector etc.)
/// are checked by the caller; storage errors here become an ERROR event. `hold` (e.g. the
/// caller's watch slot) is dropped when the watch ends: at its timeout, on shutdown, when
/// the receiver is dropped, or when the watcher is dropped for not reading (its buffer full
/// for `opts.send_timeout`, as kube-apiserver's watch cache terminates unresponsive
/// watchers): the channel then closes after the lines already in it.
pub async fn start<H: Send + 'static>(store: Arc<dyn Storage>, opts: WatchOptions, mut stopping: tokio::sync::watch::Receiver<bool>, hold: H) -> ApiResult<mpsc::Receiver<Bytes>> {
    let (tx, rx) = mpsc::channel::<Bytes>(opts.buffer.max(1));
    tokio::spawn(async move {
        tokio::select! {
            _ = run(store, opts, tx) => {}
            _ = stopping.wait_for(|s| *s) => {}
        }
        drop(hold);
    });
    Ok(rx)
}

struct Sender {
    tx: mpsc::Sender<Bytes>,
    info: Arc<ResourceInfo>,
    as_table: bool,
    include_object: String,
    first: bool,
    send_timeout: Duration,
    shared: Arc<SharedLines>,
}

impl Sender {
    /// Queues one line; `Err` when the receiver is gone or stayed full for `send_timeout`
    /// (the watcher is dropped: the store's watch stream is released with this task).
    async fn push(&self, line: Bytes) -> Result<(), ()> {
        match self.tx.try_send(line) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
            Err(mpsc::error::TrySendError::Full(line)) => match tokio::time::timeout(self.send_timeout, self.tx.send(line)).await {
                Ok(r) => r.map_err(|_| ()),
                Err(_) => {
                    crate::telemetry::metrics::server().terminated_watchers.inc();
                    tracing::info!(resource = self.info.resource, timeout = ?self.send_timeout, "dropping a watcher that does not read its events");
                    Err(())
                }
            },
        }
    }

    /// Sends a live event's object: the line shared with other watches when this watch
    /// renders objects unchanged, else as [`Sender::send`].
    async fn send_live(&mut self, ty: &str, key: &str, rv: i64, obj: &Value) -> Result<(), ()> {
        if self.as_table || self.info.converts() {
            return self.send(ty, obj).await;
        }
        let line = self.shared.get_or_encode(ty, key, rv, || Some(event_line(ty, obj))).expect("encoded");
        self.push(line).await
    }

    async fn send(&mut self, ty: &str, obj: &Value) -> Result<(), ()> {
        // a custom resource served in several versions is shown in the watched one
        let rewritten;
        let obj = if self.info.converts() && ty != "BOOKMARK" && ty != "ERROR" {
            let mut o = obj.clone();
            self.info.from_storage(&mut o);
            rewritten = o;
            &rewritten
        } else {
            obj
        };
        let line = if self.as_table && ty != "ERROR" && ty != "BOOKMARK" {
            let rv = object::meta_str(obj, "resourceVersion").unwrap_or("").to_string();
            let t = table::table(&self.info, std::slice::from_ref(obj), json!({"resourceVersion": rv}), &self.include_object, self.first);
            self.first = false;
            event_line(ty, &t)
        } else {
            event_line(ty, obj)
        };
        self.push(line).await
    }

    /// Sends an object given in stored form: spliced without decoding when the watch has
    /// no selector and no Table output (`fast`), decoded otherwise. Undecodable values are
    /// skipped, as the decoding path does.
    /// A live event (`key` given) shares its line with the server's other watches.
    async fn send_stored(&mut self, ty: &str, key: Option<&str>, stored: &[u8], rv: i64, fast: bool) -> Result<(), ()> {
        if fast {
            let line = match key {
                Some(key) => self.shared.get_or_encode(ty, key, rv, || raw_event_line(ty, stored, rv)),
                None => raw_event_line(ty, stored, rv),
            };
            if let Some(line) = line {
                return self.push(line).await;
            }
        }
        match object::from_stored(stored, rv) {
            Ok(obj) => self.send(ty, &obj).await,
            Err(_) => Ok(()),
        }
    }

    async fn error(&mut self, e: &ApiError) {
        let _ = self.push(error_line(e)).await;
    }

    async fn bookmark(&mut self, rv: i64, initial_end: bool) -> Result<(), ()> {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.info.kind, "apiVersion": self.info.api_version(), "metadata": meta});
        self.send("BOOKMARK", &obj).await
    }
}

async fn run(store: Arc<dyn Storage>, opts: WatchOptions, tx: mpsc::Sender<Bytes>) -> Result<(), ()> {
    let mut out =
        Sender { tx, info: opts.info.clone(), as_table: opts.as_table, include_object: opts.include_object.clone(), first: true, send_timeout: opts.send_timeout, shared: opts.shared.clone() };
    let matches = |o: &Value| opts.labels.matches_object(o) && opts.fields.matches(o);
    // without selectors and Table output no event needs decoding: stored bytes are spliced
    let fast = opts.labels.is_empty() && opts.fields.is_empty() && !opts.as_table && !opts.info.converts();
    let deadline = tokio::time::Instant::now() + opts.timeout;
    let mut after = match opts.start_rv {
        Some(rv) => rv,
        None => 0,
    };
    if opts.initial_events {
        // current state, read page by page at one revision
        let mut start = String::new();
        let mut revision = 0;
        loop {
            let res = match store.list(&opts.prefix, &start, 1000, revision).await {
                Ok(r) => r,
                Err(e) => {
                    out.error(&e.into()).await;
                    return Err(());
                }
            };
            revision = res.revision;
            for kv in &res.kvs {
                if fast {
                    out.send_stored("ADDED", None, &kv.value, kv.mod_revision, true).await?;
                    continue;
                }
                let Ok(obj) = object::from_stored(&kv.value, kv.mod_revision) else { continue };
                if matches(&obj) {
                    out.send("ADDED", &obj).await?;
                }
            }
            match res.kvs.last() {
                Some(last) if res.remaining > 0 => start = format!("{}\u{0}", last.key),
                _ => break,
            }
        }
        after = revision;
        if opts.send_initial_bookmark {
            out.bookmark(after, true).await?;
        }
    }
    let progress = if opts.bookmarks { Some(opts.bookmark_interval) } else { None };
    let mut stream = match store.watch(&opts.prefix, after, progress).await {
        Ok(s) => s,
        Err(e) => {
            out.error(&watch_error(e, after)).await;
            return Err(());
        }
    };
    let mut last_sent = after;
    // whether the store's stream gave anything yet: etcd tells a start revision it already
    // compacted as the stream's first item, which is still the watch's start
    let mut started = false;
    loop {
        let ev = tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {
                if opts.bookmarks && last_sent > 0 {
                    let _ = out.bookmark(last_sent, false).await;
                }
                return Ok(());
            }
            _ = out.tx.closed() => return Ok(()),
            ev = stream.next() => ev,
        };
        let first = !started;
        started = true;
        match ev {
            None => return Ok(()),
            Some(Err(e)) if first => {
                out.error(&watch_error(e, after)).await;
                return Err(());
            }
            Some(Err(e)) => {
                out.error(&stream_error(e)).await;
                return Err(());
            }
            Some(Ok(WatchEvent::Progress(rev))) => {
                if opts.bookmarks && rev > last_sent {
                    out.bookmark(rev, false).await?;
                    last_sent = rev;
                }
            }
            Some(Ok(WatchEvent::Put { kv, prev })) if fast => {
                let ty = if prev.is_some() { "MODIFIED" } else { "ADDED" };
                out.send_stored(ty, Some(&kv.key), &kv.value, kv.mod_revision, true).await?;
                last_sent = kv.mod_revision;
            }
            Some(Ok(WatchEvent::Delete { prev, revision })) if fast => {
                out.send_stored("DELETED", Some(&prev.key), &prev.value, revision, true).await?;
                last_sent = revision;
            }
            Some(Ok(WatchEvent::Put { kv, prev })) => {
                let Ok(obj) = object::from_stored(&kv.value, kv.mod_revision) else { continue };
                let now = matches(&obj);
                let before = prev.as_ref().and_then(|p| object::from_stored(&p.value, p.mod_revision).ok()).map(|p| matches(&p));
                let ty = match (before, now) {
                    (None, true) => Some("ADDED"),
                    (Some(true), true) => Some("MODIFIED"),
                    (Some(false), true) => Some("ADDED"),
                    (Some(true), false) => Some("DELETED"),
                    _ => None,
                };
                if let Some(ty) = ty {
                    out.send_live(ty, &kv.key, kv.mod_revision, &obj).await?;
                    last_sent = kv.mod_revision;
                }
            }
            Some(Ok(WatchEvent::Delete { prev, revision })) => {
                let Ok(obj) = object::from_stored(&prev.value, revision) else { continue };
                if matches(&obj) {
                    out.send_live("DELETED", &prev.key, revision, &obj).await?;
                    last_sent = revision;
                }
            }
        }
    }
}

/// The error of a watch that cannot start after revision `after`: 410 `too old resource
/// version: <after> (<compacted>)` when etcd compacted past it (mirrors the cacher's answer).
fn watch_error(e: StorageError, after: i64) -> ApiError {
    match e {
        StorageError::Compacted { compacted, .. } => ApiError::Expired(format!("too old resource version: {after} ({compacted})")),
        other => other.into(),
    }
}

/// The error ending a running watch: a compaction it fell behind becomes 410 `The
/// resourceVersion for the provided watch is too old.` (mirrors kube-apiserver's etcd3
/// watcher, `interpretWatchError`: the revision the stream started at is no longer what
/// expired).
fn stream_error(e: StorageError) -> ApiError {
    match e {
        StorageError::Compacted { .. } => ApiError::Expired(STREAM_EXPIRED.into()),
        other => other.into(),
    }
}

/// Message of the 410 ending a running watch that met a compaction ([`stream_error`]).
pub const STREAM_EXPIRED: &str = "The resourceVersion for the provided watch is too old.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compaction_names_the_start_revision_only_when_the_watch_starts() {
        let compacted = || StorageError::Compacted { requested: 41, compacted: 57 };
        let at_start = watch_error(compacted(), 40).to_string();
        assert!(at_start.contains("too old resource version: 40 (57)"), "{at_start}");
        let running = stream_error(compacted()).to_string();
        assert!(running.contains(STREAM_EXPIRED) && !running.contains("40"), "{running}");
        assert!(matches!(stream_error(compacted()), ApiError::Expired(_)));
    }

    #[test]
    fn an_event_line_is_encoded_once_and_shared() {
        let shared = SharedLines::default();
        let mut encoded = 0;
        let mut line = |key: &str, rv: i64, ty: &str| {
            shared.get_or_encode(ty, key, rv, || {
                encoded += 1;
                Some(Bytes::from(format!("{ty} {key} {rv}\n")))
            })
        };
        let a = line("/registry/core/pods/ns/p", 5, "MODIFIED").unwrap();
        let b = line("/registry/core/pods/ns/p", 5, "MODIFIED").unwrap();
        // the same buffer, not a copy
        assert_eq!(a.as_ptr(), b.as_ptr());
        // another type, revision or key is another line
        line("/registry/core/pods/ns/p", 5, "DELETED").unwrap();
        line("/registry/core/pods/ns/p", 6, "MODIFIED").unwrap();
        let other = line("/registry/core/pods/ns/q", 5, "MODIFIED").unwrap();
        assert_eq!(&other[..], b"MODIFIED /registry/core/pods/ns/q 5\n");
        assert_eq!(encoded, 4);
        assert_eq!(shared.counts(), (1, 4));
    }

    #[test]
    fn shared_lines_are_bounded() {
        let shared = SharedLines::default();
        for rv in 0..(SharedLines::CAPACITY as i64 + 10) {
            shared.get_or_encode("ADDED", "k", rv, || Some(Bytes::from_static(b"x")));
        }
        let g = shared.inner.lock().unwrap();
        assert_eq!(g.lines.len(), SharedLines::CAPACITY);
        assert_eq!(g.order.len(), SharedLines::CAPACITY);
        assert!(!g.lines.contains_key(&(1, 0)));
    }
}
