//! Storage conformance suite, run against both backends (memory, and a real etcd process).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use fedctl::storage::etcd::EtcdStorage;
use fedctl::storage::memory::MemoryStorage;
use fedctl::storage::{KeyValue, Storage, StorageError, WatchEvent, WatchStream};

use common::etcd::EtcdServer;

/// Generous bound for anything a test waits on, so a broken backend fails instead of hanging.
const WAIT: Duration = Duration::from_secs(15);

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Next stream item within [`WAIT`]; panics on timeout or end of stream.
async fn next_item(stream: &mut WatchStream) -> Result<WatchEvent, StorageError> {
    match tokio::time::timeout(WAIT, stream.next()).await {
        Ok(Some(item)) => item,
        Ok(None) => panic!("watch stream ended unexpectedly"),
        Err(_) => panic!("no watch item within {WAIT:?}"),
    }
}

/// Next non-progress event; panics on an error item.
async fn next_change(stream: &mut WatchStream) -> WatchEvent {
    loop {
        match next_item(stream).await {
            Ok(WatchEvent::Progress(_)) => continue,
            Ok(ev) => return ev,
            Err(e) => panic!("watch failed: {e}"),
        }
    }
}

/// Asserts that nothing but progress arrives on `stream` for `quiet`.
async fn assert_no_change(stream: &mut WatchStream, quiet: Duration) {
    let deadline = tokio::time::Instant::now() + quiet;
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return,
            Ok(Some(Ok(WatchEvent::Progress(_)))) => continue,
            Ok(other) => panic!("expected no change, got {other:?}"),
        }
    }
}

fn expect_put(ev: WatchEvent) -> (KeyValue, Option<KeyValue>) {
    match ev {
        WatchEvent::Put { kv, prev } => (kv, prev),
        other => panic!("expected Put, got {other:?}"),
    }
}

fn expect_delete(ev: WatchEvent) -> (KeyValue, i64) {
    match ev {
        WatchEvent::Delete { prev, revision } => (prev, revision),
        other => panic!("expected Delete, got {other:?}"),
    }
}

fn keys(kvs: &[KeyValue]) -> Vec<&str> {
    kvs.iter().map(|kv| kv.key.as_str()).collect()
}

/// A watch from `after` must fail with `Compacted`, either at once or as its first item.
async fn expect_watch_compacted(store: &dyn Storage, prefix: &str, after: i64) -> (i64, i64) {
    match store.watch(prefix, after, None).await {
        Err(StorageError::Compacted { requested, compacted }) => (requested, compacted),
        Err(e) => panic!("expected Compacted, got {e}"),
        Ok(mut stream) => match next_item(&mut stream).await {
            Err(StorageError::Compacted { requested, compacted }) => {
                assert!(tokio::time::timeout(WAIT, stream.next()).await.expect("stream ends").is_none(), "stream must end after Compacted");
                (requested, compacted)
            }
            other => panic!("expected Compacted from the stream, got {other:?}"),
        },
    }
}

/// The backend-independent test functions; each uses its own key prefix.
mod suite {
    use super::*;

    pub async fn create_get(store: Arc<dyn Storage>) {
        let p = "/t/create/";
        assert!(store.get(&format!("{p}a")).await.unwrap().is_none());
        let before = store.current_revision().await.unwrap();
        let rev = store.create(&format!("{p}a"), b("one")).await.unwrap();
        assert!(rev > before, "create must bump the revision ({rev} <= {before})");
        assert_eq!(store.current_revision().await.unwrap(), rev);

        let kv = store.get(&format!("{p}a")).await.unwrap().expect("created key");
        assert_eq!(kv.key, format!("{p}a"));
        assert_eq!(kv.value, b("one"));
        assert_eq!(kv.create_revision, rev);
        assert_eq!(kv.mod_revision, rev);

        match store.create(&format!("{p}a"), b("two")).await {
            Err(StorageError::AlreadyExists(k)) => assert_eq!(k, format!("{p}a")),
            other => panic!("expected AlreadyExists, got {other:?}"),
        }
        // The failed create changed nothing.
        assert_eq!(store.current_revision().await.unwrap(), rev);
        assert_eq!(store.get(&format!("{p}a")).await.unwrap().unwrap().value, b("one"));
    }

    pub async fn update_cas(store: Arc<dyn Storage>) {
        let k = "/t/update/a";
        let r1 = store.create(k, b("v1")).await.unwrap();
        let r2 = store.update(k, b("v2"), r1).await.unwrap();
        assert!(r2 > r1);
        let kv = store.get(k).await.unwrap().unwrap();
        assert_eq!((kv.value.clone(), kv.create_revision, kv.mod_revision), (b("v2"), r1, r2));

        // Stale expected revision: Conflict carrying the current state.
        match store.update(k, b("v3"), r1).await {
            Err(StorageError::Conflict { key, current }) => {
                assert_eq!(key, k);
                assert_eq!(current, Some(kv.clone()));
            }
            other => panic!("expected Conflict, got {other:?}"),
        }
        // Expected 0 never matches an existing key.
        assert!(matches!(store.update(k, b("v3"), 0).await, Err(StorageError::Conflict { .. })));
        assert_eq!(store.current_revision().await.unwrap(), r2);

        // Missing key: NotFound, whatever the expected revision (0 must not create it).
        for expected in [0, r2, r2 + 100] {
            match store.update("/t/update/missing", b("x"), expected).await {
                Err(StorageError::NotFound(key)) => assert_eq!(key, "/t/update/missing"),
                other => panic!("expected NotFound for expected={expected}, got {other:?}"),
            }
        }
        assert!(store.get("/t/update/missing").await.unwrap().is_none());
        assert_eq!(store.current_revision().await.unwrap(), r2);
    }

    pub async fn delete_cas(store: Arc<dyn Storage>) {
        let p = "/t/delete/";
        let ra = store.create(&format!("{p}a"), b("a")).await.unwrap();
        let rb = store.create(&format!("{p}b"), b("b")).await.unwrap();

        // Unconditional delete returns the last state and the deletion revision.
        let (rev, prev) = store.delete(&format!("{p}a"), 0).await.unwrap();
        assert!(rev > rb);
        assert_eq!(prev.key, format!("{p}a"));
        assert_eq!(prev.value, b("a"));
        assert_eq!(prev.mod_revision, ra);
        assert!(store.get(&format!("{p}a")).await.unwrap().is_none());
        assert_eq!(store.current_revision().await.unwrap(), rev);

        match store.delete(&format!("{p}a"), 0).await {
            Err(StorageError::NotFound(k)) => assert_eq!(k, format!("{p}a")),
            other => panic!("expected NotFound, got {other:?}"),
        }
        assert!(matches!(store.delete(&format!("{p}a"), ra).await, Err(StorageError::NotFound(_))));

        // Conditional delete with a wrong revision: Conflict with the current state.
        match store.delete(&format!("{p}b"), rb + 1000).await {
            Err(StorageError::Conflict { key, current }) => {
                assert_eq!(key, format!("{p}b"));
                let current = current.expect("current state");
                assert_eq!((current.value, current.mod_revision), (b("b"), rb));
            }
            other => panic!("expected Conflict, got {other:?}"),
        }
        assert!(store.get(&format!("{p}b")).await.unwrap().is_some());

        let (rev2, prev) = store.delete(&format!("{p}b"), rb).await.unwrap();
        assert!(rev2 > rev);
        assert_eq!(prev.mod_revision, rb);
        assert!(store.get(&format!("{p}b")).await.unwrap().is_none());

        // A key can be created again after deletion, with a fresh create revision.
        let rc = store.create(&format!("{p}a"), b("again")).await.unwrap();
        let kv = store.get(&format!("{p}a")).await.unwrap().unwrap();
        assert_eq!((kv.create_revision, kv.mod_revision), (rc, rc));
    }

    pub async fn list_paging(store: Arc<dyn Storage>) {
        let p = "/t/list/pods/";
        // Neighbours that must stay out of the prefix range.
        store.create("/t/list/pods", b("x")).await.unwrap();
        store.create("/t/list/pods2/a", b("x")).await.unwrap();
        store.create("/t/list/pod/a", b("x")).await.unwrap();
        for name in ["d", "a", "c", "e", "b"] {
            store.create(&format!("{p}{name}"), b(name)).await.unwrap();
        }
        let current = store.current_revision().await.unwrap();

        let all = store.list(p, "", 0, 0).await.unwrap();
        assert_eq!(keys(&all.kvs), ["a", "b", "c", "d", "e"].map(|n| format!("{p}{n}")));
        assert_eq!(all.remaining, 0);
        assert_eq!(all.revision, current);
        assert!(all.kvs.iter().all(|kv| kv.value == b(kv.key.rsplit('/').next().unwrap())));

        let page1 = store.list(p, "", 2, 0).await.unwrap();
        assert_eq!(keys(&page1.kvs), [format!("{p}a"), format!("{p}b")]);
        assert_eq!(page1.remaining, 3);

        // Continue from just after the last key (as kube's continue token does).
        let next = format!("{}\0", page1.kvs[1].key);
        let page2 = store.list(p, &next, 2, page1.revision).await.unwrap();
        assert_eq!(keys(&page2.kvs), [format!("{p}c"), format!("{p}d")]);
        assert_eq!(page2.remaining, 1);
        assert_eq!(page2.revision, page1.revision);

        // `start` is inclusive.
        let from_d = store.list(p, &format!("{p}d"), 0, 0).await.unwrap();
        assert_eq!(keys(&from_d.kvs), [format!("{p}d"), format!("{p}e")]);
        assert_eq!(from_d.remaining, 0);

        // A limit larger than the range, and a start past the end.
        let big = store.list(p, "", 100, 0).await.unwrap();
        assert_eq!((big.kvs.len(), big.remaining), (5, 0));
        let past = store.list(p, &format!("{p}zzz"), 0, 0).await.unwrap();
        assert!(past.kvs.is_empty());
        assert_eq!(past.remaining, 0);
        let outside = store.list(p, "/t/list/q", 0, 0).await.unwrap();
        assert!(outside.kvs.is_empty());

        // An empty prefix range still reports the revision.
        let empty = store.list("/t/list/none/", "", 0, 0).await.unwrap();
        assert!(empty.kvs.is_empty());
        assert_eq!(empty.revision, current);

        match store.list(p, "", 0, current + 1000).await {
            Err(StorageError::FutureRevision { requested, current: cur }) => {
                assert_eq!(requested, current + 1000);
                assert_eq!(cur, current);
            }
            other => panic!("expected FutureRevision, got {other:?}"),
        }
    }

    pub async fn list_at_old_revision(store: Arc<dyn Storage>) {
        let p = "/t/oldlist/";
        let ra = store.create(&format!("{p}a"), b("a1")).await.unwrap();
        store.create(&format!("{p}b"), b("b1")).await.unwrap();
        let r1 = store.current_revision().await.unwrap();

        store.update(&format!("{p}a"), b("a2"), ra).await.unwrap();
        store.delete(&format!("{p}b"), 0).await.unwrap();
        store.create(&format!("{p}c"), b("c1")).await.unwrap();
        store.create("/t/other/x", b("x")).await.unwrap();

        let then = store.list(p, "", 0, r1).await.unwrap();
        assert_eq!(then.revision, r1);
        assert_eq!(keys(&then.kvs), [format!("{p}a"), format!("{p}b")]);
        assert_eq!(then.kvs[0].value, b("a1"));
        assert_eq!(then.kvs[0].mod_revision, ra);
        assert_eq!(then.kvs[1].value, b("b1"));

        let paged = store.list(p, "", 1, r1).await.unwrap();
        assert_eq!(keys(&paged.kvs), [format!("{p}a")]);
        assert_eq!(paged.remaining, 1);
        let rest = store.list(p, &format!("{p}a\0"), 1, r1).await.unwrap();
        assert_eq!(keys(&rest.kvs), [format!("{p}b")]);
        assert_eq!(rest.remaining, 0);

        let now = store.list(p, "", 0, 0).await.unwrap();
        assert_eq!(keys(&now.kvs), [format!("{p}a"), format!("{p}c")]);
        assert_eq!(now.kvs[0].value, b("a2"));
    }

    /// A paged list at one revision reports that revision's remaining count on every page
    /// while writes land between its pages (ahead of the page, behind it, and on the next
    /// page's keys), and a list from the same key at a newer revision counts the newer state.
    pub async fn list_remaining_while_writes_land(store: Arc<dyn Storage>) {
        let p = "/t/remain/";
        let mut mod_revs = BTreeMap::new();
        for i in 0..20 {
            let k = format!("{p}k{i:02}");
            mod_revs.insert(k.clone(), store.create(&k, b("v")).await.unwrap());
        }
        let mut at = 0;
        let mut start = String::new();
        let mut seen = 0usize;
        let mut round = 0;
        loop {
            let page = store.list(p, &start, 3, at).await.unwrap();
            at = page.revision;
            seen += page.kvs.len();
            assert_eq!(page.remaining as usize, 20 - seen, "remaining after {seen} keys at revision {at}");
            // the same page again gives the same count
            let again = store.list(p, &start, 3, at).await.unwrap();
            assert_eq!((keys(&again.kvs), again.remaining), (keys(&page.kvs), page.remaining));
            if page.remaining == 0 {
                break;
            }
            let last = page.kvs.last().unwrap().key.clone();
            // writes between the pages: a key ahead deleted, keys ahead and behind created, and
            // the first key of the next page updated
            let ahead = format!("{p}k{:02}", 19 - round);
            if let Some(rev) = mod_revs.remove(&ahead) {
                store.delete(&ahead, rev).await.unwrap();
            }
            store.create(&format!("{p}k{:02}x", 18 - round), b("new")).await.unwrap();
            store.create(&format!("{p}a{round:02}"), b("new")).await.unwrap();
            let next = store.list(p, &format!("{last}\0"), 1, 0).await.unwrap();
            if let Some(kv) = next.kvs.first() {
                let rev = store.update(&kv.key, b("changed"), kv.mod_revision).await.unwrap();
                mod_revs.insert(kv.key.clone(), rev);
            }
            start = format!("{last}\0");
            round += 1;
        }
        assert!(round >= 6, "the list took {round} rounds of writes");
        // from the first page's end again at the current revision: the current state's count
        // (one more key than at the list's revision)
        store.create(&format!("{p}k99"), b("new")).await.unwrap();
        let now = store.list(p, "", 0, 0).await.unwrap();
        let k02 = format!("{p}k02");
        let pos = now.kvs.iter().position(|kv| kv.key == k02).expect("k02 is kept");
        let page = store.list(p, &format!("{k02}\0"), 3, 0).await.unwrap();
        assert_eq!(page.remaining as usize, now.kvs.len() - pos - 1 - 3);
        assert_eq!(page.remaining, 18 - 3, "k03..k13, six new keys after k02 and k99");
    }

    /// Random writes, then every past revision listed and compared with a model.
    pub async fn list_every_revision_matches_model(store: Arc<dyn Storage>) {
        let p = "/t/model/";
        type Model = BTreeMap<String, (Bytes, i64)>;
        let mut model = Model::new();
        let mut snapshots: Vec<(i64, Model)> = Vec::new();
        snapshots.push((store.current_revision().await.unwrap(), model.clone()));
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rand = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for i in 0..120 {
            let key = format!("{p}k{:02}", rand(12));
            let value = Bytes::from(format!("v{i}"));
            let rev = match model.get(&key).cloned() {
                None => store.create(&key, value.clone()).await.unwrap(),
                Some((_, mod_rev)) if rand(3) == 0 => store.delete(&key, mod_rev).await.unwrap().0,
                Some((_, mod_rev)) => store.update(&key, value.clone(), mod_rev).await.unwrap(),
            };
            if store.get(&key).await.unwrap().is_some() {
                model.insert(key, (value, rev));
            } else {
                model.remove(&key);
            }
            snapshots.push((rev, model.clone()));
        }
        for (rev, snap) in &snapshots {
            for limit in [0, 3] {
                let mut got = Vec::new();
                let mut start = String::new();
                loop {
                    let page = store.list(p, &start, limit, *rev).await.unwrap();
                    assert_eq!(page.revision, *rev);
                    got.extend(page.kvs.iter().map(|kv| (kv.key.clone(), (kv.value.clone(), kv.mod_revision))));
                    if page.remaining == 0 {
                        break;
                    }
                    assert_eq!(page.kvs.len() as i64, limit, "a partial page must be full");
                    start = format!("{}\0", page.kvs.last().unwrap().key);
                }
                let want: Vec<_> = snap.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(got, want, "list at revision {rev} (limit {limit})");
            }
        }
    }

    pub async fn watch_from_past(store: Arc<dyn Storage>) {
        let p = "/t/watchpast/";
        let r0 = store.create(&format!("{p}a"), b("a1")).await.unwrap();
        let r1 = store.create(&format!("{p}b"), b("b1")).await.unwrap();
        store.create("/t/watchpast-other/x", b("x")).await.unwrap(); // outside the prefix
        let r2 = store.update(&format!("{p}a"), b("a2"), r0).await.unwrap();
        let (r3, _) = store.delete(&format!("{p}b"), r1).await.unwrap();

        // From r0: exactly the later changes under the prefix, in order, with prev values.
        let mut w = store.watch(p, r0, None).await.unwrap();
        let (kv, prev) = expect_put(next_change(&mut w).await);
        assert_eq!((kv.key.as_str(), kv.value.clone(), kv.mod_revision), (&*format!("{p}b"), b("b1"), r1));
        assert_eq!(kv.create_revision, r1);
        assert!(prev.is_none(), "a creation has no prev");
        let (kv, prev) = expect_put(next_change(&mut w).await);
        assert_eq!((kv.value.clone(), kv.mod_revision, kv.create_revision), (b("a2"), r2, r0));
        let prev = prev.expect("an update carries prev");
        assert_eq!((prev.value, prev.mod_revision), (b("a1"), r0));
        let (prev, rev) = expect_delete(next_change(&mut w).await);
        assert_eq!(rev, r3);
        assert_eq!((prev.key.as_str(), prev.value.clone(), prev.mod_revision), (&*format!("{p}b"), b("b1"), r1));
        assert_no_change(&mut w, Duration::from_millis(300)).await;

        // Then it continues live.
        let r4 = store.create(&format!("{p}c"), b("c1")).await.unwrap();
        let (kv, _) = expect_put(next_change(&mut w).await);
        assert_eq!((kv.key.as_str(), kv.mod_revision), (&*format!("{p}c"), r4));

        // From the latest revision: nothing old.
        let mut w2 = store.watch(p, r4, None).await.unwrap();
        assert_no_change(&mut w2, Duration::from_millis(300)).await;
    }

    pub async fn watch_many_in_order(store: Arc<dyn Storage>) {
        let p = "/t/watchmany/";
        let start = store.current_revision().await.unwrap();
        let mut revs = Vec::new();
        let value = Bytes::from(vec![b'x'; 2048]);
        for i in 0..400 {
            revs.push(store.create(&format!("{p}{i:04}"), value.clone()).await.unwrap());
        }
        assert!(revs.windows(2).all(|w| w[0] < w[1]), "revisions strictly increase");
        let mut w = store.watch(p, start, None).await.unwrap();
        for (i, rev) in revs.iter().enumerate() {
            let (kv, prev) = expect_put(next_change(&mut w).await);
            assert_eq!((kv.key.as_str(), kv.mod_revision), (&*format!("{p}{i:04}"), *rev));
            assert_eq!(kv.value.len(), 2048);
            assert!(prev.is_none());
        }
    }

    pub async fn watch_from_now(store: Arc<dyn Storage>) {
        let p = "/t/watchnow/";
        store.create(&format!("{p}old"), b("old")).await.unwrap();
        let mut w = store.watch(p, 0, None).await.unwrap();
        // Written right after watch() returned: must be seen.
        let r = store.create(&format!("{p}new"), b("new")).await.unwrap();
        let (kv, prev) = expect_put(next_change(&mut w).await);
        assert_eq!((kv.key.as_str(), kv.mod_revision), (&*format!("{p}new"), r));
        assert!(prev.is_none());
        let (rd, _) = store.delete(&format!("{p}old"), 0).await.unwrap();
        let (prev, rev) = expect_delete(next_change(&mut w).await);
        assert_eq!((prev.key.as_str(), prev.value.clone(), rev), (&*format!("{p}old"), b("old"), rd));
        assert_no_change(&mut w, Duration::from_millis(300)).await;
    }

    /// A watch without periodic progress yields `Progress` when asked for it, past writes
    /// outside its prefix.
    pub async fn watch_progress_on_request(store: Arc<dyn Storage>) {
        let p = "/t/asked/";
        let requests = Arc::new(tokio::sync::Notify::new());
        let mut w = store.watch_with_progress_requests(p, 0, None, requests.clone()).await.unwrap();
        let outside = store.create("/t/elsewhere-asked/x", b("x")).await.unwrap();
        assert_no_change(&mut w, Duration::from_millis(300)).await;
        for round in 0..3 {
            let r = store.create(&format!("/t/elsewhere-asked/r{round}"), b("x")).await.unwrap();
            assert!(r > outside);
            requests.notify_one();
            // etcd answers a progress request only once the watch has caught up: ask again
            // until one arrives past the write
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                match tokio::time::timeout(Duration::from_millis(200), w.next()).await {
                    Ok(Some(Ok(WatchEvent::Progress(rev)))) if rev >= r => break,
                    Ok(Some(Ok(WatchEvent::Progress(_)))) | Err(_) => requests.notify_one(),
                    other => panic!("expected Progress, got {other:?}"),
                }
                assert!(tokio::time::Instant::now() < deadline, "no progress past {r} when asked");
            }
        }
    }

    pub async fn watch_progress(store: Arc<dyn Storage>) {
        let p = "/t/progress/";
        store.create("/t/elsewhere/x", b("x")).await.unwrap();
        let mut w = store.watch(p, 0, Some(Duration::from_millis(200))).await.unwrap();
        let current = store.current_revision().await.unwrap();
        match next_item(&mut w).await {
            Ok(WatchEvent::Progress(rev)) => assert_eq!(rev, current),
            other => panic!("expected Progress, got {other:?}"),
        }
        // Changes outside the prefix still advance the progress revision.
        let outside = store.create("/t/elsewhere/y", b("y")).await.unwrap();
        let r = store.create(&format!("{p}a"), b("a")).await.unwrap();
        assert!(outside < r);
        let mut saw_event = false;
        let mut last_progress = current;
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            assert!(tokio::time::Instant::now() < deadline, "no progress past {r}");
            match next_item(&mut w).await.unwrap() {
                WatchEvent::Put { kv, .. } => {
                    assert_eq!(kv.mod_revision, r);
                    saw_event = true;
                }
                WatchEvent::Progress(rev) => {
                    assert!(rev >= last_progress, "progress went back: {rev} < {last_progress}");
                    last_progress = rev;
                    if rev >= r {
                        assert!(saw_event, "progress {rev} arrived before event {r}");
                        break;
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        // Without progress_every, no Progress items.
        let mut quiet = store.watch(p, 0, None).await.unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(700), quiet.next()).await.is_err(), "no items expected without progress_every");
    }

    /// Two server replicas' compactors (mirrors kube-apiserver's): one wins each round's
    /// swap and compacts to the revision it recorded a round earlier, keeping that round's
    /// history; the other only learns the state; when the winner stops, the other takes over.
    pub async fn compactor_replicas(store: Arc<dyn Storage>) {
        use fedctl::storage::compactor::{step, CompactState, Stepped};
        let p = "/t/compactor/";
        let old = store.create(&format!("{p}a"), b("1")).await.unwrap();
        // round 1: the first replica creates the key and records a revision, compacting nothing
        let (a, done) = step(&*store, CompactState::default()).await.unwrap();
        assert_eq!(done, Stepped::Compacted(0));
        let (b1, done) = step(&*store, CompactState::default()).await.unwrap();
        assert_eq!(done, Stepped::Lost);
        assert_eq!(b1.seen, a.seen, "the loser learns the key's state");
        store.list(p, "", 0, old).await.expect("nothing compacted yet");
        // round 2: the first replica compacts to what it recorded in round 1
        let kept = store.update(&format!("{p}a"), b("2"), old).await.unwrap();
        let (_, done) = step(&*store, a).await.unwrap();
        assert_eq!(done, Stepped::Compacted(a.revision));
        let to = a.revision;
        assert!(to > old && to < kept, "compacted to {to}: after the first write ({old}), before the last ({kept})");
        assert!(matches!(store.list(p, "", 0, old).await, Err(StorageError::Compacted { .. })), "history before round 1 is gone");
        assert_eq!(store.list(p, "", 0, kept).await.unwrap().kvs[0].value, b("2"), "the last round's history is kept");
        // the second replica, a round late, loses again
        let (b2, done) = step(&*store, b1).await.unwrap();
        assert_eq!(done, Stepped::Lost);
        // the first replica stops: the second takes over one round later
        let (b3, done) = step(&*store, b2).await.unwrap();
        assert_eq!(done, Stepped::Compacted(b2.revision));
        assert!(b2.revision > to);
        assert!(matches!(store.list(p, "", 0, kept).await, Err(StorageError::Compacted { .. })), "compacted past the last write");
        assert!(b3.seen > b2.revision);
    }

    pub async fn compaction(store: Arc<dyn Storage>) {
        let p = "/t/compact/";
        let r1 = store.create(&format!("{p}a"), b("1")).await.unwrap();
        let r2 = store.update(&format!("{p}a"), b("2"), r1).await.unwrap();
        let r3 = store.update(&format!("{p}a"), b("3"), r2).await.unwrap();
        let r4 = store.create(&format!("{p}b"), b("b")).await.unwrap();

        store.compact(r3).await.unwrap();
        // Compacting again (or to an older revision) is a no-op.
        store.compact(r3).await.unwrap();
        store.compact(r2).await.unwrap();

        match store.list(p, "", 0, r2).await {
            Err(StorageError::Compacted { requested, compacted }) => {
                assert_eq!(requested, r2);
                assert_eq!(compacted, r3);
            }
            other => panic!("expected Compacted, got {other:?}"),
        }
        let (requested, compacted) = expect_watch_compacted(&*store, p, r1).await;
        assert_eq!(requested, r1 + 1);
        assert_eq!(compacted, r3);

        // The compaction revision itself is still served.
        let at = store.list(p, "", 0, r3).await.unwrap();
        assert_eq!(keys(&at.kvs), [format!("{p}a")]);
        assert_eq!(at.kvs[0].value, b("3"));
        let mut w = store.watch(p, r3, None).await.unwrap();
        let (kv, _) = expect_put(next_change(&mut w).await);
        assert_eq!(kv.mod_revision, r4);
        // A watch from just before the compaction revision gets the update at it with its
        // former state (the memory backend keeps it with the change) or, where that state is
        // compacted away (etcd), ends as compacted: never an update without its former
        // state, which its watchers would take for a creation.
        let mut w = store.watch(p, r3 - 1, None).await.unwrap();
        match next_item(&mut w).await {
            Ok(WatchEvent::Put { kv, prev: Some(prev) }) => assert_eq!((kv.mod_revision, kv.value, prev.value), (r3, b("3"), b("2"))),
            Err(StorageError::Compacted { requested, .. }) => assert_eq!(requested, r3 - 1),
            other => panic!("expected the update with its former state, or Compacted; got {other:?}"),
        }

        match store.compact(r4 + 1000).await {
            Err(StorageError::FutureRevision { requested, .. }) => assert_eq!(requested, r4 + 1000),
            other => panic!("expected FutureRevision, got {other:?}"),
        }
    }

    pub async fn revisions_increase(store: Arc<dyn Storage>) {
        let p = "/t/revs/";
        let mut last = store.current_revision().await.unwrap();
        let mut check = |rev: i64| {
            assert!(rev > last, "revision {rev} not above {last}");
            last = rev;
        };
        let r = store.create(&format!("{p}a"), b("1")).await.unwrap();
        check(r);
        let r = store.update(&format!("{p}a"), b("2"), r).await.unwrap();
        check(r);
        let r2 = store.create(&format!("{p}b"), b("1")).await.unwrap();
        check(r2);
        let (r3, _) = store.delete(&format!("{p}a"), r).await.unwrap();
        check(r3);
        let r4 = store.update(&format!("{p}b"), b("2"), r2).await.unwrap();
        check(r4);
        // Failed operations do not bump it.
        let _ = store.create(&format!("{p}b"), b("x")).await.unwrap_err();
        let _ = store.update(&format!("{p}b"), b("x"), r2).await.unwrap_err();
        let _ = store.delete(&format!("{p}zz"), 0).await.unwrap_err();
        assert_eq!(store.current_revision().await.unwrap(), r4);
    }

    /// Concurrent read-modify-write loops on one counter: CAS must lose no increment.
    pub async fn concurrent_cas(store: Arc<dyn Storage>) {
        let k = "/t/cas/counter";
        store.create(k, b("0")).await.unwrap();
        let (tasks, per_task) = (6, 15);
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let mut conflicts = 0;
                for _ in 0..per_task {
                    loop {
                        let kv = store.get(k).await.unwrap().unwrap();
                        let n: u64 = std::str::from_utf8(&kv.value).unwrap().parse().unwrap();
                        tokio::task::yield_now().await;
                        match store.update(k, Bytes::from((n + 1).to_string()), kv.mod_revision).await {
                            Ok(_) => break,
                            Err(StorageError::Conflict { current, .. }) => {
                                assert!(current.is_some());
                                conflicts += 1;
                            }
                            Err(e) => panic!("update: {e}"),
                        }
                    }
                }
                conflicts
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        let kv = store.get(k).await.unwrap().unwrap();
        assert_eq!(kv.value, Bytes::from((tasks * per_task).to_string()));
    }
}

/// Instantiates every suite function once per backend.
macro_rules! storage_suite {
    ($($name:ident),* $(,)?) => {
        mod memory_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let store: std::sync::Arc<dyn fedctl::storage::Storage> =
                        std::sync::Arc::new(fedctl::storage::memory::MemoryStorage::new());
                    super::suite::$name(store).await;
                }
            )*
        }
        mod etcd_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let server = super::EtcdServer::start_new();
                    let store: std::sync::Arc<dyn fedctl::storage::Storage> = std::sync::Arc::new(
                        super::EtcdStorage::connect(&server.endpoints()).await.expect("connect"),
                    );
                    super::suite::$name(store).await;
                    drop(server);
                }
            )*
        }
    };
}

storage_suite!(
    create_get,
    update_cas,
    delete_cas,
    list_paging,
    list_at_old_revision,
    list_every_revision_matches_model,
    list_remaining_while_writes_land,
    watch_from_past,
    watch_many_in_order,
    watch_from_now,
    watch_progress,
    watch_progress_on_request,
    compaction,
    compactor_replicas,
    revisions_increase,
    concurrent_cas,
);

/// A watch from etcd's compaction revision gets the change at that revision without its
/// former state (etcd's `prev_kv` is compacted away): the watch ends as compacted, where it
/// used to yield the change as a creation (its watchers saw ADDED for an update; a deletion
/// without its former state was lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_watch_ends_when_an_events_former_state_is_compacted() {
    let server = EtcdServer::start_new();
    let store = EtcdStorage::connect(&server.endpoints()).await.expect("connect");
    let p = "/t/prevkv/";
    let r1 = store.create(&format!("{p}a"), b("1")).await.unwrap();
    let r2 = store.update(&format!("{p}a"), b("2"), r1).await.unwrap();
    store.compact(r2).await.unwrap();
    let mut w = store.watch(p, r2 - 1, None).await.unwrap();
    match next_item(&mut w).await {
        Err(StorageError::Compacted { .. }) => {}
        other => panic!("an update whose former state is compacted: expected Compacted, got {other:?}"),
    }
    // (a deletion at the compaction revision is compacted away with its key, so a deletion
    // without its former state comes only to a watcher etcd compacted behind, not here)
    // a creation at the compaction revision needs no former state
    let rc = store.create(&format!("{p}c"), b("c")).await.unwrap();
    store.compact(rc).await.unwrap();
    let mut w = store.watch(p, rc - 1, None).await.unwrap();
    match next_change(&mut w).await {
        WatchEvent::Put { kv, prev: None } => assert_eq!(kv.mod_revision, rc),
        other => panic!("expected the creation, got {other:?}"),
    }
}

// ---- the watch cache over etcd ----

/// A cached list of a quiet resource, at a revision written elsewhere, is answered once a
/// progress request comes back, not at the next periodic progress (an hour away here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_cached_list_of_a_quiet_resource_asks_for_progress() {
    use fedctl::storage::cacher::{Cacher, CacherConfig};
    let server = EtcdServer::start_new();
    let etcd = Arc::new(EtcdStorage::connect(&server.endpoints()).await.expect("connect"));
    let config = CacherConfig { progress_interval: Duration::from_secs(3600), fresh_timeout: Duration::from_secs(10), ..Default::default() };
    let c = Cacher::new(etcd, config);
    c.create("/registry/w/works/ns/a", b("v")).await.unwrap();
    c.list_cached("/registry/w/works/", 0).await.unwrap();
    for i in 0..3 {
        let r = c.create(&format!("/registry/core/pods/ns/p{i}"), b("v")).await.unwrap();
        let l = c.list_cached("/registry/w/works/", r).await.unwrap();
        assert!(l.revision >= r, "listed at {} for {r}", l.revision);
        assert_eq!(keys(&l.kvs), ["/registry/w/works/ns/a"]);
    }
    drop(server);
}

// ---- memory-only behaviour ----

#[tokio::test]
async fn memory_history_capacity_compacts() {
    let store = MemoryStorage::with_history(5);
    let p = "/m/cap/";
    let first = store.create(&format!("{p}a"), b("0")).await.unwrap();
    let mut rev = first;
    for i in 1..10 {
        rev = store.update(&format!("{p}a"), Bytes::from(i.to_string()), rev).await.unwrap();
    }
    // Five changes held: revisions rev-4 ..= rev.
    assert_eq!(store.compacted_revision(), rev - 4);
    let (requested, compacted) = expect_watch_compacted(&store, p, first).await;
    assert_eq!((requested, compacted), (first + 1, rev - 4));
    assert!(matches!(
        store.list(p, "", 0, rev - 5).await,
        Err(StorageError::Compacted { requested, compacted }) if requested == rev - 5 && compacted == rev - 4
    ));
    let old = store.list(p, "", 0, rev - 4).await.unwrap();
    assert_eq!(old.kvs[0].value, b("5"));
    let mut w = store.watch(p, rev - 5, None).await.unwrap();
    for expected in 5..10 {
        let (kv, prev) = expect_put(next_change(&mut w).await);
        assert_eq!(kv.value, Bytes::from(expected.to_string()));
        assert_eq!(prev.unwrap().value, Bytes::from((expected - 1).to_string()));
    }
}

#[tokio::test]
async fn memory_slow_watcher_is_terminated() {
    let store = MemoryStorage::with_history(10);
    let p = "/m/slow/";
    let mut w = store.watch(p, 0, None).await.unwrap();
    for i in 0..50 {
        store.create(&format!("{p}{i:02}"), b("x")).await.unwrap();
    }
    // The watcher never read; its next revision left the history: it must fail, not skip.
    match next_item(&mut w).await {
        Err(StorageError::Compacted { .. }) => {}
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(w.next().await.is_none(), "stream ends after the error");

    // A watcher that keeps up is fine with the same small history.
    let mut live = store.watch(p, 0, None).await.unwrap();
    for i in 0..50 {
        let r = store.update(&format!("{p}{i:02}"), b("y"), store.get(&format!("{p}{i:02}")).await.unwrap().unwrap().mod_revision).await.unwrap();
        let (kv, _) = expect_put(next_change(&mut live).await);
        assert_eq!(kv.mod_revision, r);
    }
}

#[tokio::test]
async fn memory_values_are_shared_not_copied() {
    let store = MemoryStorage::new();
    let value = Bytes::from(vec![7u8; 4096]);
    store.create("/m/share/a", value.clone()).await.unwrap();
    let got = store.get("/m/share/a").await.unwrap().unwrap();
    assert_eq!(got.value.as_ptr(), value.as_ptr(), "get returns the stored buffer");
    let mut w = store.watch("/m/share/", 1, None).await.unwrap();
    let (kv, _) = expect_put(next_change(&mut w).await);
    assert_eq!(kv.value.as_ptr(), value.as_ptr(), "history shares the buffer");
    assert_eq!(store.key_count(), 1);
}

// ---- etcd-only behaviour ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_connect_rejects_empty_endpoints() {
    assert!(matches!(EtcdStorage::connect(&[]).await, Err(StorageError::Unavailable(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_client_shares_the_store() {
    let server = EtcdServer::start_new();
    let store = EtcdStorage::connect(&server.endpoints()).await.unwrap();
    let mut client = store.client();
    client.put("/e/raw", "hello", None).await.unwrap();
    assert_eq!(store.get("/e/raw").await.unwrap().unwrap().value, b("hello"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_outage_is_unavailable_and_recovers() {
    let mut server = EtcdServer::start_new();
    let store = EtcdStorage::connect(&server.endpoints()).await.unwrap().with_request_timeout(Duration::from_secs(3));
    let r = store.create("/e/out/a", b("1")).await.unwrap();
    let mut w = store.watch("/e/out/", 0, None).await.unwrap();

    server.stop();
    // The open watch ends with Unavailable instead of hanging.
    match next_item(&mut w).await {
        Err(StorageError::Unavailable(_)) => {}
        other => panic!("expected Unavailable from the watch, got {other:?}"),
    }
    assert!(tokio::time::timeout(WAIT, w.next()).await.unwrap().is_none());
    // Requests fail with Unavailable within the request timeout.
    let t = tokio::time::Instant::now();
    match store.get("/e/out/a").await {
        Err(StorageError::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(matches!(store.update("/e/out/a", b("2"), r).await, Err(StorageError::Unavailable(_))));
    assert!(matches!(store.watch("/e/out/", 0, None).await, Err(StorageError::Unavailable(_))));

    server.start();
    // The same client reconnects by itself.
    let deadline = tokio::time::Instant::now() + WAIT;
    let r2 = loop {
        match store.update("/e/out/a", b("2"), r).await {
            Ok(rev) => break rev,
            Err(StorageError::Unavailable(_)) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("after restart: {e}"),
        }
    };
    // Data survived the restart, and a watch resumes from where the old one stopped.
    let mut w = store.watch("/e/out/", r, None).await.unwrap();
    let (kv, prev) = expect_put(next_change(&mut w).await);
    assert_eq!((kv.mod_revision, kv.value), (r2, b("2")));
    assert_eq!(prev.unwrap().value, b("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_quota_exceeded_is_reported() {
    // A tiny backend quota; etcd raises the NOSPACE alarm once it is exceeded.
    let server = EtcdServer::start_with_args(&["--quota-backend-bytes=1048576"]);
    let store = EtcdStorage::connect(&server.endpoints()).await.unwrap();
    let value = Bytes::from(vec![b'q'; 64 * 1024]);
    let mut outcome = None;
    for i in 0..200 {
        match store.create(&format!("/e/quota/{i}"), value.clone()).await {
            Ok(_) => continue,
            Err(e) => {
                outcome = Some(e);
                break;
            }
        }
    }
    match outcome {
        Some(StorageError::QuotaExceeded(msg)) => assert!(msg.contains("space"), "{msg}"),
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }
}
