//! Shared MUX watches: one merged watch over the cache endpoints per watched collection, its events encoded once and fanned out to every client watching that collection.
//!
//! Mirrors kube-apiserver's cacher: there one etcd watch per resource feeds an event ring and
//! every watcher is served from it, each event serialized once. Here a [`Hub`] is one set of
//! endpoint watch legs merged by a [`MergeWatch`] for one collection (the view path below the
//! prefix, `clusters/<name>` or global, and the label and field selectors the endpoints
//! filter by). The hub's driver task:
//! - merges the legs' lines, encodes each merged event once (its `resourceVersion` is the
//!   hub's merged position after it) and broadcasts it in batches ([`Item`]), keeping the
//!   latest events in a ring bounded by count and bytes;
//! - every bookmark interval broadcasts a bookmark at the hub's merged position;
//! - ends when a leg ends or sends an error (the error is passed to every watcher; clients
//!   resume, as from a watch over the endpoints of their own), when an endpoint lags too far
//!   behind the others, and when no watcher has followed it for [`LINGER`].
//!
//! A client watch from resourceVersion `R` joins a hub that *covers* `R`: for every cluster
//! the hub's ring starts at (`start`), `R` is at or after it, so every event after `R` is in
//! the ring or still to come. It gets the ring's events after `R`, then the live ones. While
//! `R` is ahead of the hub's position in some cluster (a fresh snapshot taken after the hub's
//! last event), the watcher skips what it already has and its events carry its own position
//! joined with the hub's ([`Follow`]); from the first event whose hub position covers its
//! own, it gets the shared encoded lines. No covering hub: a new hub starts at `R` (its legs
//! opened before the answer, so an endpoint's error becomes the client's Status). Starts of
//! one collection take turns and each looks for a covering hub again when its turn comes, so
//! watchers that arrive together share one hub (`Hubs::subscribe_or_start`).
//!
//! A watcher that falls more than [`BROADCAST_BATCHES`] batches behind is ended (the client
//! resumes from its last resourceVersion), as kube-apiserver ends a watcher whose buffer
//! stays full.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::remote::{AbortOnDrop, MergeWatch, Out, Step};
use crate::api::watch;
use crate::cache::rv::{GlobalRv, Pos};

/// Events kept in a hub's ring for watchers that join at a resourceVersion it passed.
pub const RING_EVENTS: usize = 4096;

/// Bytes of encoded events kept in a hub's ring at most (the global resourceVersion in every
/// event grows with the member count, ≈ 17 bytes per member).
pub const RING_BYTES: usize = 16 << 20;

/// Batches a watcher may fall behind the hub before it is ended.
pub const BROADCAST_BATCHES: usize = 256;

/// Most merged events the driver puts in one batch.
const BATCH_EVENTS: usize = 16;

/// How long a hub without watchers keeps its legs open (so a client that re-watches soon
/// finds its events in the ring).
pub const LINGER: Duration = Duration::from_secs(30);

/// What identifies a shared watch: the view scope (`clusters/<name>` or global), the path
/// below it (e.g. `/api/v1/namespaces/a/pods`), and the selectors the endpoints filter by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HubKey {
    /// `clusters/<name>` requests: the member.
    pub cluster: Option<String>,
    /// The Kubernetes path below the view prefix.
    pub sub: String,
    /// `labelSelector` / `fieldSelector`, as forwarded to the endpoints.
    pub selectors: Vec<(String, String)>,
}

/// One merged event, encoded once.
#[derive(Debug)]
pub struct HubEvent {
    /// The member cluster it comes from.
    pub cluster: String,
    /// Its position in that cluster's stream.
    pub pos: Pos,
    /// The object's namespace (namespace grants filter by it).
    pub namespace: Option<String>,
    /// The watch event line (`{"type":…,"object":…}\n`), the object's `resourceVersion` the
    /// hub's merged position after it.
    pub line: Bytes,
}

/// What a hub broadcasts.
#[derive(Debug)]
pub enum Item {
    /// A merged event.
    Event(Arc<HubEvent>),
    /// The hub's merged position (every earlier event was broadcast).
    Bookmark(Arc<str>),
    /// The hub ended; with the endpoint's error line, if one sent an error.
    End(Option<Bytes>),
}

struct HubState {
    /// The latest events, oldest first.
    ring: VecDeque<Arc<HubEvent>>,
    ring_bytes: usize,
    /// Per cluster: every event after this position is in the ring or still to come (a
    /// cluster absent: every event of it since the hub started). Starts as the first
    /// watcher's resourceVersion; moves up as the ring drops events.
    start: GlobalRv,
    /// The merged position after the last broadcast item.
    rv: Arc<str>,
    ended: bool,
}

/// One shared merged watch (see the module docs).
pub struct Hub {
    state: Mutex<HubState>,
    tx: broadcast::Sender<Arc<[Item]>>,
    /// The endpoints' `Warning` header values when the legs were opened.
    pub warnings: Vec<String>,
}

/// A watcher's hold on a hub: the ring's events after its resourceVersion, then the live ones.
pub struct Subscription {
    pub hub: Arc<Hub>,
    replay: Vec<Arc<HubEvent>>,
    rx: broadcast::Receiver<Arc<[Item]>>,
}

impl Hub {
    /// A hub whose legs start at `from`.
    pub fn new(from: &GlobalRv, warnings: Vec<String>) -> Arc<Hub> {
        let state = HubState { ring: VecDeque::new(), ring_bytes: 0, start: from.clone(), rv: from.encode().into(), ended: false };
        Arc::new(Hub { state: Mutex::new(state), tx: broadcast::channel(BROADCAST_BATCHES).0, warnings })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins the hub at `from`, when it covers it (see the module docs); `None` otherwise or
    /// when it ended.
    pub fn subscribe(self: &Arc<Self>, from: &GlobalRv) -> Option<Subscription> {
        let st = self.lock();
        if st.ended || !from.covers(&st.start) {
            return None;
        }
        let replay = st.ring.iter().filter(|e| from.0.get(&e.cluster).is_none_or(|p| e.pos > *p)).cloned().collect();
        // under the lock: the first live batch is the one after the ring's last event
        let rx = self.tx.subscribe();
        Some(Subscription { hub: self.clone(), replay, rx })
    }

    /// Watchers following the hub.
    pub fn watchers(&self) -> usize {
        self.tx.receiver_count()
    }

    /// The batches `rx` has not read yet and the merged position after the last of them
    /// (read together under the lock, so the position is after exactly those); `None` when
    /// `rx` fell behind.
    fn drain(&self, rx: &mut broadcast::Receiver<Arc<[Item]>>) -> Option<(Vec<Arc<[Item]>>, Arc<str>)> {
        let st = self.lock();
        let mut pending = Vec::new();
        loop {
            match rx.try_recv() {
                Ok(b) => pending.push(b),
                Err(broadcast::error::TryRecvError::Empty) | Err(broadcast::error::TryRecvError::Closed) => return Some((pending, st.rv.clone())),
                Err(broadcast::error::TryRecvError::Lagged(_)) => return None,
            }
        }
    }

    /// Encodes and broadcasts merged events, keeping them in the ring.
    fn publish(&self, ready: Vec<super::remote::Ready>) {
        let Some(last) = ready.last().map(|r| Arc::<str>::from(r.rv.as_str())) else { return };
        let events: Vec<Arc<HubEvent>> = ready
            .into_iter()
            .map(|r| {
                let namespace = r.obj.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_string);
                Arc::new(HubEvent { cluster: r.cluster, pos: r.pos, namespace, line: watch::event_line(&r.ty, &r.obj) })
            })
            .collect();
        let mut st = self.lock();
        for e in &events {
            st.ring_bytes += e.line.len();
            st.ring.push_back(e.clone());
        }
        while st.ring.len() > RING_EVENTS || (st.ring_bytes > RING_BYTES && st.ring.len() > 1) {
            let Some(e) = st.ring.pop_front() else { break };
            st.ring_bytes -= e.line.len();
            let s = st.start.0.entry(e.cluster.clone()).or_default();
            *s = (*s).max(e.pos);
        }
        st.rv = last;
        let items: Vec<Item> = events.into_iter().map(Item::Event).collect();
        let _ = self.tx.send(items.into());
    }

    fn bookmark(&self, rv: String) {
        let rv: Arc<str> = rv.into();
        let mut st = self.lock();
        st.rv = rv.clone();
        let _ = self.tx.send(Arc::new([Item::Bookmark(rv)]));
    }

    /// Ends the hub: no watcher joins it any more; the followers get `End`.
    fn end(&self, error: Option<Bytes>) {
        let mut st = self.lock();
        st.ended = true;
        let _ = self.tx.send(Arc::new([Item::End(error)]));
    }
}

/// The MUX's shared watches, by collection; a key holds several hubs when watchers came at
/// positions no live hub covered (a watcher resuming joins the oldest hub that covers it, so
/// the younger ones lose their watchers and end after [`LINGER`]).
#[derive(Default)]
pub struct Hubs {
    hubs: Mutex<HashMap<HubKey, Vec<Arc<Hub>>>>,
    /// Per collection, held while a hub of it is being started, so that watchers arriving
    /// meanwhile join it instead of starting legs of their own.
    starting: Mutex<HashMap<HubKey, Arc<tokio::sync::Mutex<()>>>>,
}

impl Hubs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<HubKey, Vec<Arc<Hub>>>> {
        self.hubs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins a live hub of `key` that covers `from`, the oldest first.
    pub fn subscribe(&self, key: &HubKey, from: &GlobalRv) -> Option<Subscription> {
        self.lock().get(key)?.iter().find_map(|h| h.subscribe(from))
    }

    /// Joins a live hub of `key` that covers `from`, or starts one with `start` (which opens
    /// the legs at `from` and returns the hub and what drives it). Starts of one collection
    /// take turns, and each looks for a covering hub again when its turn comes, so watchers
    /// that arrive together share one hub. `start`'s error is the caller's.
    pub(super) async fn subscribe_or_start<E, F, Fut>(self: &Arc<Self>, key: &HubKey, from: &GlobalRv, start: F) -> Result<Subscription, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(Arc<Hub>, Driver), E>>,
    {
        if let Some(s) = self.subscribe(key, from) {
            return Ok(s);
        }
        let turn = self.starting.lock().unwrap_or_else(|e| e.into_inner()).entry(key.clone()).or_default().clone();
        let started = async {
            let _turn = turn.lock().await;
            if let Some(s) = self.subscribe(key, from) {
                return Ok(s);
            }
            let (hub, driver) = start().await?;
            let sub = hub.subscribe(from).expect("a new hub covers its start");
            self.lock().entry(key.clone()).or_default().push(hub.clone());
            tokio::spawn(drive(self.clone(), key.clone(), hub, driver));
            Ok(sub)
        }
        .await;
        let mut s = self.starting.lock().unwrap_or_else(|e| e.into_inner());
        // the last one out removes the turn (the map holds one reference, `turn` another)
        if s.get(key).is_some_and(|t| Arc::strong_count(t) <= 2) {
            s.remove(key);
        }
        started
    }

    fn remove(&self, key: &HubKey, hub: &Arc<Hub>) {
        Self::remove_locked(&mut self.lock(), key, hub);
    }

    fn remove_locked(m: &mut HashMap<HubKey, Vec<Arc<Hub>>>, key: &HubKey, hub: &Arc<Hub>) {
        if let Some(v) = m.get_mut(key) {
            v.retain(|h| !Arc::ptr_eq(h, hub));
            if v.is_empty() {
                m.remove(key);
            }
        }
    }

    /// Ends and removes `hub` if nobody follows it (checked under the registry's lock, so no
    /// watcher joins it meanwhile).
    fn remove_if_idle(&self, key: &HubKey, hub: &Arc<Hub>) -> bool {
        let mut m = self.lock();
        if hub.watchers() > 0 {
            return false;
        }
        hub.end(None);
        Self::remove_locked(&mut m, key, hub);
        true
    }

    /// `{"shared": hubs with watchers, "idle": hubs lingering without, "watchers": watchers
    /// following them}` (in the MUX's status document).
    pub fn status(&self) -> Value {
        let m = self.lock();
        let followed: Vec<usize> = m.values().flatten().map(|h| h.watchers()).collect();
        json!({"shared": followed.iter().filter(|n| **n > 0).count(), "idle": followed.iter().filter(|n| **n == 0).count(), "watchers": followed.iter().sum::<usize>()})
    }
}

/// What drives a new hub: the merge of its legs, the legs' lines (`(endpoint, None)` when
/// one ends) and their reader tasks, and the bookmark interval.
pub(super) struct Driver {
    pub(super) merge: MergeWatch,
    pub(super) rx: tokio::sync::mpsc::Receiver<(usize, Option<Value>)>,
    pub(super) readers: AbortOnDrop,
    pub(super) interval: Duration,
}

/// Runs a hub: merges the legs' lines and broadcasts the result until the hub ends (see the
/// module docs).
async fn drive(hubs: Arc<Hubs>, key: HubKey, hub: Arc<Hub>, d: Driver) {
    let Driver { merge: mut w, mut rx, readers: _readers, interval } = d;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle_since: Option<tokio::time::Instant> = None;
    let error = loop {
        tokio::select! {
            m = rx.recv() => {
                let mut step = match m {
                    Some((i, Some(v))) => w.on_line(i, v),
                    _ => Step::End(None),
                };
                // what else already arrived goes in the same batch
                while matches!(step, Step::Go) && w.ready_len() < BATCH_EVENTS {
                    step = match rx.try_recv() {
                        Ok((i, Some(v))) => w.on_line(i, v),
                        Ok((_, None)) | Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => Step::End(None),
                        Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                    };
                }
                hub.publish(w.take_ready());
                if let Step::End(e) = step {
                    break e;
                }
            }
            _ = tick.tick() => {
                w.advance();
                hub.bookmark(w.merged());
                if hub.watchers() > 0 {
                    idle_since = None;
                } else if idle_since.get_or_insert_with(tokio::time::Instant::now).elapsed() >= LINGER && hubs.remove_if_idle(&key, &hub) {
                    return;
                }
            }
        }
    };
    hub.end(error);
    hubs.remove(&key, &hub);
}

/// A watcher's position while it is ahead of the hub's (see the module docs).
struct Follow {
    /// `Some` while some cluster of the watcher's position is ahead of the hub's.
    own: Option<GlobalRv>,
}

impl Follow {
    async fn event(&mut self, e: &HubEvent, out: &mut Out) -> Result<(), ()> {
        if let Some(own) = &mut self.own {
            if own.0.get(&e.cluster).is_some_and(|p| e.pos <= *p) {
                // the watcher had it
                return Ok(());
            }
            let Ok(mut v) = serde_json::from_slice::<Value>(&e.line) else { return Ok(()) };
            let hub = v.pointer("/object/metadata/resourceVersion").and_then(Value::as_str).and_then(|s| GlobalRv::decode(s).ok()).unwrap_or_default();
            own.0.insert(e.cluster.clone(), e.pos);
            if !hub.covers(own) {
                own.join(&hub);
                let rv = own.encode();
                let ty = v["type"].as_str().unwrap_or("").to_string();
                let mut obj = v["object"].take();
                obj["metadata"]["resourceVersion"] = json!(rv);
                return out.event(&ty, obj, &rv).await;
            }
            self.own = None;
        }
        if let Some(only) = &out.only {
            if !e.namespace.as_deref().is_some_and(|ns| only.contains(ns)) {
                return Ok(());
            }
        }
        if out.as_table {
            let Ok(mut v) = serde_json::from_slice::<Value>(&e.line) else { return Ok(()) };
            let ty = v["type"].as_str().unwrap_or("").to_string();
            let obj = v["object"].take();
            let rv = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
            return out.event(&ty, obj, &rv).await;
        }
        out.push(e.line.clone()).await
    }

    async fn bookmark(&mut self, rv: &str, out: &mut Out) -> Result<(), ()> {
        if let Some(own) = &mut self.own {
            let hub = GlobalRv::decode(rv).unwrap_or_default();
            if !hub.covers(own) {
                own.join(&hub);
                let rv = own.encode();
                return out.bookmark(&rv, false).await;
            }
            self.own = None;
        }
        out.bookmark(rv, false).await
    }
}

/// Serves one client watch from its subscription, from `from` until `timeout` (a final
/// bookmark then, when `bookmarks`), the hub's end or the client leaving (`Err`).
pub(super) async fn follow(mut sub: Subscription, from: GlobalRv, out: &mut Out, bookmarks: bool, timeout: Duration) -> Result<(), ()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut f = Follow { own: Some(from) };
    for e in std::mem::take(&mut sub.replay) {
        f.event(&e, out).await?;
    }
    loop {
        tokio::select! {
            r = sub.rx.recv() => match r {
                Ok(items) => {
                    for it in items.iter() {
                        match it {
                            Item::Event(e) => f.event(e, out).await?,
                            Item::Bookmark(rv) => {
                                if bookmarks {
                                    f.bookmark(rv, out).await?;
                                }
                            }
                            Item::End(error) => {
                                if let Some(l) = error {
                                    let _ = out.push(l.clone()).await;
                                }
                                return Ok(());
                            }
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    crate::telemetry::metrics::server().terminated_watchers.inc();
                    tracing::info!(resource = out.info.resource, behind = n, "global view: ending a watcher that fell behind its shared watch");
                    return Ok(());
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            _ = tokio::time::sleep_until(deadline) => {
                if bookmarks {
                    // what the hub broadcast before its position goes out before the bookmark
                    let Some((pending, rv)) = sub.hub.drain(&mut sub.rx) else { return Ok(()) };
                    for items in pending {
                        for it in items.iter() {
                            match it {
                                Item::Event(e) => f.event(e, out).await?,
                                Item::Bookmark(_) => {}
                                Item::End(_) => return Ok(()),
                            }
                        }
                    }
                    f.bookmark(&rv, out).await?;
                }
                return Ok(());
            }
            _ = out.tx.closed() => return Err(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::remote::Ready;

    fn g(at: &[(&str, u64, u32)]) -> GlobalRv {
        GlobalRv(at.iter().map(|(c, rv, sub)| (c.to_string(), Pos { rv: *rv, sub: *sub })).collect())
    }

    /// A merged event of pod `name` in cluster `c` at `(rv, 0)`, the hub's position after it `after`.
    fn ready(name: &str, c: &str, rv: u64, after: &[(&str, u64, u32)]) -> Ready {
        let at = g(after).encode();
        Ready { ty: "ADDED".into(), obj: json!({"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": at}}), rv: at, cluster: c.into(), pos: Pos::member(rv) }
    }

    fn out() -> (Out, tokio::sync::mpsc::Receiver<Bytes>) {
        let (tx, rx) = tokio::sync::mpsc::channel(100);
        (Out::new(tx, Arc::new(crate::api::registry::pod()), false, String::new(), Duration::from_secs(5), None), rx)
    }

    /// (type, name, resourceVersion) of each line sent.
    fn lines(rx: &mut tokio::sync::mpsc::Receiver<Bytes>) -> Vec<(String, String, GlobalRv)> {
        let mut v = Vec::new();
        while let Ok(l) = rx.try_recv() {
            let e: Value = serde_json::from_slice(&l).unwrap();
            let o = &e["object"]["metadata"];
            v.push((e["type"].as_str().unwrap().to_string(), o["name"].as_str().unwrap_or("").to_string(), GlobalRv::decode(o["resourceVersion"].as_str().unwrap()).unwrap()));
        }
        v
    }

    /// A hub covers a position at or after its start in each of its clusters; a cluster the
    /// position lacks but the hub started at is not covered (the watcher would need its
    /// events from the beginning); a cluster the hub did not start at is.
    #[test]
    fn a_hub_covers_positions_at_or_after_its_start() {
        let hub = Hub::new(&g(&[("a", 10, 0), ("b", 5, 0)]), vec![]);
        assert!(hub.subscribe(&g(&[("a", 10, 0), ("b", 5, 0)])).is_some());
        assert!(hub.subscribe(&g(&[("a", 12, 0), ("b", 5, 7), ("c", 3, 0)])).is_some());
        assert!(hub.subscribe(&g(&[("a", 9, 0), ("b", 5, 0)])).is_none(), "a=9 is before the hub's start");
        assert!(hub.subscribe(&g(&[("a", 12, 0)])).is_none(), "b's events from the beginning are not in the hub");
        hub.end(None);
        assert!(hub.subscribe(&g(&[("a", 10, 0), ("b", 5, 0)])).is_none(), "an ended hub takes no watcher");
    }

    /// The ring keeps the latest events; dropping one moves the hub's start in its cluster,
    /// so a watcher at a position before it is not covered any more, one after it gets the
    /// rest of the ring.
    #[test]
    fn the_ring_drops_its_oldest_events_and_moves_the_start() {
        let hub = Hub::new(&g(&[("a", 10, 0)]), vec![]);
        for i in 0..RING_EVENTS as u64 + 5 {
            hub.publish(vec![ready(&format!("p{i}"), "a", 11 + i, &[("a", 11 + i, 0)])]);
        }
        assert!(hub.subscribe(&g(&[("a", 14, 0)])).is_none(), "events after a=14 were dropped");
        let s = hub.subscribe(&g(&[("a", 16, 0)])).expect("the ring starts after a=15");
        assert_eq!(s.replay.len(), RING_EVENTS - 1);
        assert_eq!(s.replay[0].pos, Pos::member(17));
    }

    /// A watcher joining at a position the hub passed gets the ring's later events, then the
    /// live ones, all as the hub encoded them; a bookmark follows at the hub's position.
    #[tokio::test]
    async fn a_watcher_gets_the_ring_after_its_position_then_the_live_events() {
        let hub = Hub::new(&g(&[("a", 10, 0)]), vec![]);
        hub.publish(vec![ready("p11", "a", 11, &[("a", 11, 0)]), ready("p12", "a", 12, &[("a", 12, 0)])]);
        let sub = hub.subscribe(&g(&[("a", 11, 0)])).unwrap();
        let (mut o, mut rx) = out();
        let h = hub.clone();
        let t = tokio::spawn(async move { follow(sub, g(&[("a", 11, 0)]), &mut o, true, Duration::from_secs(30)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        h.publish(vec![ready("p13", "a", 13, &[("a", 13, 0)])]);
        h.bookmark(g(&[("a", 13, u32::MAX)]).encode());
        h.end(None);
        assert_eq!(t.await.unwrap(), Ok(()));
        let got = lines(&mut rx);
        assert_eq!(got, vec![("ADDED".into(), "p12".into(), g(&[("a", 12, 0)])), ("ADDED".into(), "p13".into(), g(&[("a", 13, 0)])), ("BOOKMARK".into(), "".into(), g(&[("a", 13, u32::MAX)])),]);
    }

    /// A watcher whose position is ahead of the hub's in a cluster (a snapshot taken after the
    /// hub's last event there) skips what it had, and its events carry its own position
    /// joined with the hub's until the hub's covers it; from then on the shared lines.
    #[tokio::test]
    async fn a_watcher_ahead_of_the_hub_keeps_its_own_position_until_the_hub_covers_it() {
        let hub = Hub::new(&g(&[("a", 10, 0)]), vec![]);
        let from = g(&[("a", 11, u32::MAX), ("b", 7, u32::MAX)]);
        let sub = hub.subscribe(&from).unwrap();
        let (mut o, mut rx) = out();
        let h = hub.clone();
        let t = tokio::spawn(async move { follow(sub, from, &mut o, false, Duration::from_secs(30)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // a=11 the watcher had; a=12 goes out at the watcher's b=7 joined with the hub's a=12
        h.publish(vec![ready("p11", "a", 11, &[("a", 11, 0)]), ready("p12", "a", 12, &[("a", 12, 0)])]);
        // b=8: the hub's position now covers the watcher's; shared lines from here on
        h.publish(vec![ready("q8", "b", 8, &[("a", 12, 0), ("b", 8, 0)]), ready("p13", "a", 13, &[("a", 13, 0), ("b", 8, 0)])]);
        h.end(None);
        assert_eq!(t.await.unwrap(), Ok(()));
        assert_eq!(
            lines(&mut rx),
            vec![
                ("ADDED".into(), "p12".into(), g(&[("a", 12, 0), ("b", 7, u32::MAX)])),
                ("ADDED".into(), "q8".into(), g(&[("a", 12, 0), ("b", 8, 0)])),
                ("ADDED".into(), "p13".into(), g(&[("a", 13, 0), ("b", 8, 0)])),
            ]
        );
    }

    /// Watchers of one collection that arrive together start one hub, not one each: starts
    /// take turns and look for a covering hub again; a start that fails is its caller's
    /// error and leaves nothing behind.
    #[tokio::test]
    async fn watchers_arriving_together_start_one_hub() {
        let hubs = Arc::new(Hubs::default());
        let key = HubKey { cluster: None, sub: "/api/v1/pods".into(), selectors: vec![] };
        let starts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        // the legs' senders, kept so that the hubs' legs stay open
        let legs = Arc::new(Mutex::new(Vec::new()));
        let mut joins = Vec::new();
        for i in 0..10u64 {
            let (hubs, key, starts, legs) = (hubs.clone(), key.clone(), starts.clone(), legs.clone());
            joins.push(tokio::spawn(async move {
                let from = g(&[("a", 10 + i % 2, 0)]);
                let f = from.clone();
                hubs.subscribe_or_start(&key, &from, async move || {
                    starts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let (tx, rx) = tokio::sync::mpsc::channel(1);
                    legs.lock().unwrap().push(tx);
                    Ok::<_, String>((
                        Hub::new(&f, vec![]),
                        Driver { merge: MergeWatch::new(crate::search::remote::Zones::none(1), &f), rx, readers: AbortOnDrop(vec![]), interval: Duration::from_secs(60) },
                    ))
                })
                .await
            }));
        }
        let subs: Vec<Subscription> = futures::future::join_all(joins).await.into_iter().map(|j| j.unwrap().unwrap()).collect();
        // a=10 and a=11 arrive in any order: a hub at 11 does not cover 10, one at 10 covers both
        let n = starts.load(std::sync::atomic::Ordering::SeqCst);
        assert!((1..=2).contains(&n), "{n} hubs started for 10 watchers");
        assert_eq!(hubs.status()["watchers"], 10);
        let failed = hubs.subscribe_or_start(&HubKey { sub: "/api/v1/nodes".into(), ..key }, &g(&[("a", 1, 0)]), async || Err::<(Arc<Hub>, Driver), _>("refused")).await;
        assert_eq!(failed.err(), Some("refused"));
        assert!(hubs.starting.lock().unwrap().is_empty(), "no start turn is left behind");
        drop(subs);
    }

    /// A watcher that stops reading falls behind the hub's broadcast and is ended; the hub
    /// and its other watchers go on.
    #[tokio::test]
    async fn a_watcher_that_falls_behind_is_ended() {
        let hub = Hub::new(&g(&[("a", 10, 0)]), vec![]);
        let sub = hub.subscribe(&g(&[("a", 10, 0)])).unwrap();
        for i in 0..BROADCAST_BATCHES as u64 + 1 {
            hub.publish(vec![ready(&format!("p{i}"), "a", 11 + i, &[("a", 11 + i, 0)])]);
        }
        let (tx, _rx) = tokio::sync::mpsc::channel(10_000);
        let mut o = Out::new(tx, Arc::new(crate::api::registry::pod()), false, String::new(), Duration::from_secs(5), None);
        let r = tokio::time::timeout(Duration::from_secs(5), follow(sub, g(&[("a", 10, 0)]), &mut o, false, Duration::from_secs(30))).await;
        assert_eq!(r.expect("ended, not waiting"), Ok(()));
        assert!(hub.subscribe(&g(&[("a", 300, 0)])).is_some(), "the hub goes on");
    }
}
