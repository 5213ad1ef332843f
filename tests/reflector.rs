//! A kube-rs watcher against `fedctl server` survives a server restart (resuming without
//! loss or duplication) and an etcd compaction (410 → relist), ending equal to the server.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::etcd::EtcdServer;
use common::server::{etcd_compact, etcd_revision, FedServer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;

async fn client_for(server: &FedServer) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(server.kubeconfig()).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.expect("config");
    kube::Client::try_from(cfg).expect("client")
}

/// What the watcher saw: the live map (name → resourceVersion) and every (name, rv) applied
/// outside of relists, to detect duplicates and gaps.
#[derive(Default)]
struct Seen {
    store: BTreeMap<String, String>,
    live_events: Vec<(String, String)>,
    relists: usize,
    init_buffer: BTreeMap<String, String>,
}

fn cm(name: &str, v: usize) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "reflector"}},
        "data": {"v": v.to_string()}
    }))
    .unwrap()
}

async fn wait_equal(seen: &Arc<Mutex<Seen>>, api: &Api<ConfigMap>) -> BTreeMap<String, String> {
    let mut last = BTreeMap::new();
    for _ in 0..200 {
        let list = api.list(&ListParams::default()).await.expect("list");
        last = list.items.iter().map(|c| (c.metadata.name.clone().unwrap(), c.metadata.resource_version.clone().unwrap())).collect::<BTreeMap<_, _>>();
        if seen.lock().unwrap().store == last {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("watcher store never matched the server: watcher {:?}\nserver {:?}", seen.lock().unwrap().store, last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_survives_restart_and_compaction() {
    let etcd = EtcdServer::start_new();
    let mut a = FedServer::start_with_args(&etcd.endpoint(), &["--bookmark-interval-seconds", "1"]);
    // a second replica on the same etcd (sharing `a`'s PKI): writes go on while `a` is down
    let b = FedServer::start_replica(&a, &[]);
    let client_a = client_for(&a).await;
    let client_b = client_for(&b).await;
    let api_a: Api<ConfigMap> = Api::namespaced(client_a.clone(), "default");
    let api_b: Api<ConfigMap> = Api::namespaced(client_b.clone(), "default");

    for i in 0..5 {
        // a value no later write repeats: a replace that changes nothing writes nothing and
        // makes no event, as with kube-apiserver
        api_b.create(&PostParams::default(), &cm(&format!("c{i}"), 1000)).await.expect("create");
    }

    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = seen.clone();
    let stream = watcher::watcher(api_a.clone(), watcher::Config::default().labels("app=reflector")).default_backoff();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let Ok(ev) = ev else { continue };
            let mut s = s2.lock().unwrap();
            match ev {
                Event::Init => {
                    s.relists += 1;
                    s.init_buffer.clear();
                }
                Event::InitApply(o) => {
                    let (n, rv) = (o.metadata.name.unwrap(), o.metadata.resource_version.unwrap());
                    s.init_buffer.insert(n, rv);
                }
                Event::InitDone => {
                    s.store = std::mem::take(&mut s.init_buffer);
                }
                Event::Apply(o) => {
                    let (n, rv) = (o.metadata.name.unwrap(), o.metadata.resource_version.unwrap());
                    s.live_events.push((n.clone(), rv.clone()));
                    s.store.insert(n, rv);
                }
                Event::Delete(o) => {
                    let (n, rv) = (o.metadata.name.unwrap(), o.metadata.resource_version.unwrap());
                    s.live_events.push((n.clone(), rv));
                    s.store.remove(&n);
                }
            }
        }
    });

    wait_equal(&seen, &api_a).await;
    let relists_at_start = seen.lock().unwrap().relists;

    // Phase 1: live writes, then a server restart with more writes while it is down.
    let mut expected: Vec<(String, String)> = Vec::new();
    for i in 0..20 {
        let name = format!("c{}", i % 5);
        let mut obj = api_b.get(&name).await.expect("get");
        obj.data = Some([("v".to_string(), format!("{i}"))].into());
        let r = api_b.replace(&name, &PostParams::default(), &obj).await.expect("replace");
        expected.push((name, r.metadata.resource_version.unwrap()));
    }
    a.stop();
    for i in 20..40 {
        let name = format!("c{}", i % 5);
        let mut obj = api_b.get(&name).await.expect("get");
        obj.data = Some([("v".to_string(), format!("{i}"))].into());
        let r = api_b.replace(&name, &PostParams::default(), &obj).await.expect("replace");
        expected.push((name, r.metadata.resource_version.unwrap()));
    }
    let created = api_b.create(&PostParams::default(), &cm("new1", 1)).await.expect("create");
    expected.push(("new1".into(), created.metadata.resource_version.unwrap()));
    let del = api_b.delete("c4", &DeleteParams::default()).await.expect("delete");
    let _ = del;
    a.restart();
    wait_equal(&seen, &api_a).await;
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.relists, relists_at_start, "a restart within the history window must resume, not relist");
        // every write seen exactly once, in order per object
        for (name, rv) in &expected {
            let n = s.live_events.iter().filter(|(n2, r2)| n2 == name && r2 == rv).count();
            assert_eq!(n, 1, "event {name}@{rv} seen {n} times");
        }
        let mut per_obj: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for (n, rv) in &s.live_events {
            per_obj.entry(n.as_str()).or_default().push(rv.parse().unwrap());
        }
        for (n, rvs) in per_obj {
            assert!(rvs.windows(2).all(|w| w[0] < w[1]), "events of {n} out of order: {rvs:?}");
        }
        assert!(s.live_events.iter().any(|(n, _)| n == "c4"), "delete of c4 not seen");
    }

    // Phase 2: server down, writes, etcd compacted past the watcher's position → 410 → relist.
    a.stop();
    for i in 0..10 {
        let name = format!("c{}", i % 4);
        let mut obj = api_b.get(&name).await.expect("get");
        obj.data = Some([("v".to_string(), format!("x{i}"))].into());
        api_b.replace(&name, &PostParams::default(), &obj).await.expect("replace");
    }
    api_b.delete("new1", &DeleteParams::default()).await.expect("delete");
    api_b.create(&PostParams::default(), &cm("new2", 2)).await.expect("create");
    let rev = etcd_revision(&etcd.endpoint()).await;
    etcd_compact(&etcd.endpoint(), rev).await;
    a.restart();
    let final_state = wait_equal(&seen, &api_a).await;
    assert!(final_state.contains_key("new2") && !final_state.contains_key("new1"));
    assert!(seen.lock().unwrap().relists > relists_at_start, "compaction must force a relist");
    task.abort();
}
