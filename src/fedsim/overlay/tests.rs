use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

/// `/r/p/a/000`… and `/r/p/b/000`…: `a` generated objects in namespace `a`, `b` in `b`.
struct Numbers {
    a: usize,
    b: usize,
}

impl GeneratedSet for Numbers {
    fn len(&self) -> usize {
        self.a + self.b
    }
    fn key_at(&self, pos: usize) -> String {
        if pos < self.a {
            format!("/r/p/a/{pos:03}")
        } else {
            format!("/r/p/b/{:03}", pos - self.a)
        }
    }
    fn value_at(&self, pos: usize) -> Bytes {
        Bytes::from(format!("{{\"gen\":{pos}}}"))
    }
}

async fn store(a: usize, b: usize) -> (OverlayStorage, i64) {
    let s = OverlayStorage::new(1000);
    s.create("/r/p/a/0005x", Bytes::from_static(b"{\"sys\":1}")).await.unwrap();
    let base = s.install(Arc::new(Numbers { a, b })).await.unwrap();
    (s, base)
}

fn keys(res: &ListResult) -> Vec<&str> {
    res.kvs.iter().map(|kv| kv.key.as_str()).collect()
}

/// Reads the whole prefix page by page with `limit`, checking `remaining` on every page.
async fn paged(s: &OverlayStorage, prefix: &str, limit: i64, revision: i64) -> Vec<KeyValue> {
    let full = s.list(prefix, "", 0, revision).await.unwrap();
    let mut out = Vec::new();
    let mut start = String::new();
    loop {
        let res = s.list(prefix, &start, limit, revision).await.unwrap();
        out.extend(res.kvs.iter().cloned());
        assert_eq!(res.remaining, (full.kvs.len() - out.len()) as i64, "remaining after {} of {}", out.len(), full.kvs.len());
        match res.kvs.last() {
            Some(last) if res.remaining > 0 => start = format!("{}\u{0}", last.key),
            _ => break,
        }
    }
    assert_eq!(out, full.kvs);
    out
}

#[tokio::test]
async fn lists_merge_generated_and_stored_keys_in_order() {
    let (s, base) = store(20, 5).await;
    let all = s.list("/r/p/", "", 0, 0).await.unwrap();
    assert_eq!(all.kvs.len(), 26);
    assert_eq!(all.remaining, 0);
    let k = keys(&all);
    assert_eq!(&k[..3], ["/r/p/a/000", "/r/p/a/0005x", "/r/p/a/001"]);
    let mut sorted = k.clone();
    sorted.sort();
    assert_eq!(k, sorted);
    let g = &all.kvs[0];
    assert_eq!((g.create_revision, g.mod_revision, &g.value[..]), (base, base, &b"{\"gen\":0}"[..]));
    // namespace prefixes and a start key inside the range
    let b = s.list("/r/p/b/", "", 0, 0).await.unwrap();
    assert_eq!(keys(&b), ["/r/p/b/000", "/r/p/b/001", "/r/p/b/002", "/r/p/b/003", "/r/p/b/004"]);
    let from = s.list("/r/p/a/", "/r/p/a/018", 0, 0).await.unwrap();
    assert_eq!(keys(&from), ["/r/p/a/018", "/r/p/a/019"]);
    let one = s.list("/r/p/", "/r/p/a/000\u{0}", 1, 0).await.unwrap();
    assert_eq!((keys(&one), one.remaining), (vec!["/r/p/a/0005x"], 24));
    for limit in [1, 3, 7, 100] {
        paged(&s, "/r/p/", limit, 0).await;
    }
}

#[tokio::test]
async fn writes_of_generated_objects_go_to_the_overlay() {
    let (s, base) = store(10, 0).await;
    let key = "/r/p/a/003";
    assert!(matches!(s.create(key, Bytes::from_static(b"{}")).await, Err(StorageError::AlreadyExists(_))));
    match s.update(key, Bytes::from_static(b"{\"v\":1}"), base + 7).await {
        Err(StorageError::Conflict { current: Some(c), .. }) => assert_eq!(c.mod_revision, base),
        other => panic!("want a conflict, got {other:?}"),
    }
    let r1 = s.update(key, Bytes::from_static(b"{\"v\":1}"), base).await.unwrap();
    assert_eq!(s.get(key).await.unwrap().unwrap().value, Bytes::from_static(b"{\"v\":1}"));
    assert!(matches!(s.update(key, Bytes::from_static(b"{\"v\":2}"), base).await, Err(StorageError::Conflict { .. })));
    let (r2, last) = s.delete(key, r1).await.unwrap();
    assert_eq!(last.mod_revision, r1);
    assert!(s.get(key).await.unwrap().is_none());
    assert!(matches!(s.delete(key, 0).await, Err(StorageError::NotFound(_))));
    assert!(matches!(s.update(key, Bytes::from_static(b"{}"), r2).await, Err(StorageError::NotFound(_))));
    // an untouched generated object deleted directly, with and without a precondition
    assert!(matches!(s.delete("/r/p/a/004", base + 1).await, Err(StorageError::Conflict { .. })));
    let (r3, gone) = s.delete("/r/p/a/004", base).await.unwrap();
    assert_eq!(gone.value, Bytes::from_static(b"{\"gen\":4}"));
    let all = s.list("/r/p/", "", 0, 0).await.unwrap();
    assert_eq!(all.kvs.len(), 9);
    assert!(!keys(&all).contains(&key) && !keys(&all).contains(&"/r/p/a/004"));
    // history: at r1 the modified value, at r2 - 1 still present, before base no generated object
    let at1 = s.list("/r/p/", "", 0, r1).await.unwrap();
    assert_eq!(at1.kvs.iter().find(|kv| kv.key == key).unwrap().value, Bytes::from_static(b"{\"v\":1}"));
    let at3 = s.list("/r/p/", "", 0, r3 - 1).await.unwrap();
    assert!(keys(&at3).contains(&"/r/p/a/004") && !keys(&at3).contains(&key));
    assert!(s.list("/r/p/", "", 0, base - 1).await.unwrap().kvs.is_empty(), "nothing generated before base");
    // re-created over the tombstone
    s.create(key, Bytes::from_static(b"{\"v\":3}")).await.unwrap();
    assert!(matches!(s.create(key, Bytes::from_static(b"{}")).await, Err(StorageError::AlreadyExists(_))));
    assert_eq!(s.list("/r/p/", "", 0, 0).await.unwrap().kvs.len(), 10);
    for limit in [1, 2, 4] {
        paged(&s, "/r/p/", limit, 0).await;
        paged(&s, "/r/p/", limit, r3 - 1).await;
    }
    assert_eq!(s.key_count(), 3);
}

#[tokio::test]
async fn watch_sees_only_changes_with_generated_previous_states() {
    let (s, base) = store(10, 0).await;
    let mut w = s.watch("/r/p/", base, None).await.unwrap();
    let r1 = s.update("/r/p/a/001", Bytes::from_static(b"{\"v\":1}"), base).await.unwrap();
    let (r2, _) = s.delete("/r/p/a/002", 0).await.unwrap();
    let (r3, _) = s.delete("/r/p/a/001", 0).await.unwrap();
    let r4 = s.create("/r/p/a/002", Bytes::from_static(b"{\"v\":2}")).await.unwrap();
    match w.next().await.unwrap().unwrap() {
        WatchEvent::Put { kv, prev: Some(p) } => {
            assert_eq!((kv.mod_revision, p.mod_revision, &p.value[..]), (r1, base, &b"{\"gen\":1}"[..]));
        }
        other => panic!("{other:?}"),
    }
    match w.next().await.unwrap().unwrap() {
        WatchEvent::Delete { prev, revision } => assert_eq!((revision, &prev.value[..], prev.mod_revision), (r2, &b"{\"gen\":2}"[..], base)),
        other => panic!("{other:?}"),
    }
    match w.next().await.unwrap().unwrap() {
        WatchEvent::Delete { prev, revision } => assert_eq!((revision, &prev.value[..]), (r3, &b"{\"v\":1}"[..])),
        other => panic!("{other:?}"),
    }
    match w.next().await.unwrap().unwrap() {
        WatchEvent::Put { kv, prev: None } => assert_eq!(kv.mod_revision, r4),
        other => panic!("{other:?}"),
    }
    // the controllers' watch: no previous value rendered, but deletions carry the object
    let mut w = s.watch_without_prev("/r/p/", r4).await.unwrap();
    s.update("/r/p/a/005", Bytes::from_static(b"{\"v\":5}"), base).await.unwrap();
    s.delete("/r/p/a/006", 0).await.unwrap();
    assert!(matches!(w.next().await.unwrap().unwrap(), WatchEvent::Put { prev: Some(p), .. } if p.value.is_empty()));
    assert!(matches!(w.next().await.unwrap().unwrap(), WatchEvent::Delete { prev, .. } if &prev.value[..] == b"{\"gen\":6}"));
}

/// Random creates, updates and deletes against a plain model of the merged state; every
/// list (random start, limit, prefix) and get agrees with it, including `remaining`.
#[tokio::test]
async fn random_operations_agree_with_a_model() {
    let (s, base) = store(40, 25).await;
    let mut model: BTreeMap<String, (Bytes, i64)> = BTreeMap::new();
    model.insert("/r/p/a/0005x".into(), (Bytes::from_static(b"{\"sys\":1}"), base));
    let set = Numbers { a: 40, b: 25 };
    for pos in 0..set.len() {
        model.insert(set.key_at(pos), (set.value_at(pos), base));
    }
    let mut rng = StdRng::seed_from_u64(3);
    let candidates: Vec<String> = (0..50).map(|i| format!("/r/p/a/{i:03}")).chain((0..30).map(|i| format!("/r/p/b/{i:03}"))).chain((0..5).map(|i| format!("/r/p/c/{i}"))).collect();
    for step in 0..600 {
        let key = &candidates[rng.random_range(0..candidates.len())];
        let value = Bytes::from(format!("{{\"step\":{step}}}"));
        match rng.random_range(0..4) {
            0 => match s.create(key, value.clone()).await {
                Ok(rev) => assert!(model.insert(key.clone(), (value, rev)).is_none(), "{key} existed"),
                Err(StorageError::AlreadyExists(_)) => assert!(model.contains_key(key)),
                Err(e) => panic!("{e}"),
            },
            1 => {
                let exp = model.get(key).map_or(1, |(_, r)| *r);
                match s.update(key, value.clone(), exp).await {
                    Ok(rev) => assert!(model.insert(key.clone(), (value, rev)).is_some()),
                    Err(StorageError::NotFound(_)) => assert!(!model.contains_key(key)),
                    Err(e) => panic!("{key}: {e}"),
                }
            }
            2 => match s.delete(key, 0).await {
                Ok((_, prev)) => assert_eq!(model.remove(key), Some((prev.value, prev.mod_revision))),
                Err(StorageError::NotFound(_)) => assert!(!model.contains_key(key)),
                Err(e) => panic!("{e}"),
            },
            _ => {
                let got = s.get(key).await.unwrap().map(|kv| (kv.value, kv.mod_revision));
                assert_eq!(got, model.get(key).cloned(), "get {key}");
            }
        }
        if step % 25 == 0 {
            for prefix in ["/r/p/", "/r/p/a/", "/r/p/b/", "/r/p/c/"] {
                let limit = rng.random_range(0..8);
                let start = candidates[rng.random_range(0..candidates.len())].clone();
                let from = if start.as_str() > prefix { start.clone() } else { prefix.to_string() };
                let want: Vec<(&String, &(Bytes, i64))> = model.range(from.clone()..).take_while(|(k, _)| k.starts_with(prefix)).collect();
                let res = s.list(prefix, &start, limit, 0).await.unwrap();
                let n = if limit == 0 { want.len() } else { want.len().min(limit as usize) };
                let got: Vec<(String, Bytes, i64)> = res.kvs.iter().map(|kv| (kv.key.clone(), kv.value.clone(), kv.mod_revision)).collect();
                let exp: Vec<(String, Bytes, i64)> = want[..n].iter().map(|(k, (v, r))| ((*k).clone(), v.clone(), *r)).collect();
                assert_eq!(got, exp, "list {prefix} from {start} limit {limit}");
                assert_eq!(res.remaining, (want.len() - n) as i64);
            }
        }
    }
}

#[test]
fn member_set_keys_are_sorted_and_render_the_generated_objects() {
    use crate::fedsim::generate::{GenConfig, PodGenerator};
    let gen = PodGenerator::new(&GenConfig { nodes: 7, pods_per_node: 20, namespaces: 9, ..GenConfig::default() });
    let reg = crate::api::Registry::member();
    let set = MemberSet::new(gen.plan(), reg.lookup("", "v1", "nodes").unwrap(), reg.lookup("", "v1", "pods").unwrap());
    assert_eq!(set.len(), 7 + 140);
    let keys: Vec<String> = (0..set.len()).map(|p| set.key_at(p)).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys strictly increasing");
    let mut from_gen: Vec<String> = (0..gen.initial_len())
        .map(|i| {
            let p = gen.initial_pod(i);
            format!("/registry/core/pods/{}/{}", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap())
        })
        .collect();
    from_gen.sort();
    assert_eq!(&keys[7..], &from_gen[..]);
    for (pos, key) in keys.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_slice(&set.value_at(pos)).unwrap();
        let name = v["metadata"]["name"].as_str().unwrap();
        assert!(key.ends_with(&format!("/{name}")), "{key} holds {name}");
        assert!(v["metadata"].get("resourceVersion").is_none());
    }
    assert_eq!(lower_bound(&set, &keys[40]), 40);
    assert_eq!(lower_bound(&set, &format!("{}\u{0}", keys[40])), 41);
}
