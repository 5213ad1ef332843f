//! Leader election on a real etcd: one leader at a time, fast hand-over on a clean stop,
//! hand-over within the lease TTL when the leader dies without stepping down.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::etcd::EtcdServer;
use fedctl::server::leader::{run, Election};

fn election(endpoint: &str, id: &str) -> Election {
    Election { endpoints: vec![endpoint.to_string()], name: "/fedctl/test/leader".into(), identity: id.into(), ttl: Duration::from_secs(3) }
}

/// Spawns a candidate whose "controllers" record `id` as active while they run.
fn candidate(endpoint: &str, id: &'static str, active: Arc<Mutex<Vec<&'static str>>>) -> (tokio::task::JoinHandle<()>, tokio::sync::watch::Sender<bool>) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let e = election(endpoint, id);
    let h = tokio::spawn(async move {
        run(
            e,
            || {
                let active = active.clone();
                async move {
                    struct Guard(Arc<Mutex<Vec<&'static str>>>, &'static str);
                    impl Drop for Guard {
                        fn drop(&mut self) {
                            self.0.lock().unwrap().retain(|x| *x != self.1);
                        }
                    }
                    active.lock().unwrap().push(id);
                    let _g = Guard(active.clone(), id);
                    futures::future::pending::<()>().await;
                }
            },
            stop_rx,
        )
        .await
    });
    (h, stop_tx)
}

async fn wait_for(active: &Arc<Mutex<Vec<&'static str>>>, want: &str, within: Duration) -> Duration {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        {
            let a = active.lock().unwrap();
            assert!(a.len() <= 1, "two leaders at once: {a:?}");
            if a.first() == Some(&want) {
                return t0.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{want} did not become leader within {within:?}; active: {:?}", active.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_and_hand_over() {
    let etcd = EtcdServer::start_new();
    let active = Arc::new(Mutex::new(Vec::new()));
    let (ha, stop_a) = candidate(&etcd.endpoint(), "a", active.clone());
    wait_for(&active, "a", Duration::from_secs(10)).await;
    let (hb, stop_b) = candidate(&etcd.endpoint(), "b", active.clone());
    // b must not lead while a does
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(*active.lock().unwrap(), vec!["a"]);
    // clean stop: a revokes its lease, b takes over well within the TTL
    stop_a.send_replace(true);
    ha.await.unwrap();
    let took = wait_for(&active, "b", Duration::from_secs(10)).await;
    assert!(took < Duration::from_secs(2), "clean hand-over took {took:?}");
    // a new candidate c, then b dies without stepping down (task aborted, lease not revoked)
    let (hc, stop_c) = candidate(&etcd.endpoint(), "c", active.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    hb.abort();
    let _ = hb.await;
    drop(stop_b);
    let took = wait_for(&active, "c", Duration::from_secs(15)).await;
    assert!(took <= Duration::from_secs(6), "hand-over after a crash took {took:?} (ttl 3s)");
    stop_c.send_replace(true);
    hc.await.unwrap();
}
