//! Churn: a steady, seeded stream of pod creates, modifications and deletes, straight on the store.
//!
//! Only the generated pods (initial and churn-created) are touched, never those of the
//! in-process controllers. Each event is, by a seeded draw: a modification (50 %: readiness
//! flip, label change or container restart, from [`PodGenerator::modify`]), a creation (25 %:
//! [`PodGenerator::new_pod`]) or a deletion (25 %); when the pod count drifts more than 5 %
//! from the initial population the draw is biased back, so the count stays roughly stable.
//! The rate (events/s) can change at any time through [`super::Sim::churn_rate`]. Pods are
//! drawn by generator index (plus the keys churn created), never by listing the store, so
//! churn on a virtual member renders only the pods it touches.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use super::generate::{PodGenerator, PodPlan};
use super::{core_key, Sim};
use crate::api::object;
use crate::storage::{Storage, StorageError};

/// Seed salt of the churn's own draws (which event, which pod).
const CHURN_SALT: u64 = 0x6368_7572_6e5f_6f70;

/// Tick of the churn loop; each tick performs the events due since the last one.
const TICK: Duration = Duration::from_millis(10);

/// The pods churn may touch: the generated population by index (with a bit per pod that
/// churn has seen deleted) and the keys of the pods churn created. About one bit per
/// generated pod, so it costs nothing on a virtual member.
struct Pool {
    plan: std::sync::Arc<PodPlan>,
    dead: Vec<u64>,
    dead_count: usize,
    created: Vec<String>,
}

/// One pod picked by [`Pool::pick`]: a generated index or a position in `created`.
#[derive(Clone, Copy)]
enum Pick {
    Generated(usize),
    Created(usize),
}

impl Pool {
    fn new(plan: std::sync::Arc<PodPlan>) -> Self {
        let n = plan.initial_len();
        Pool { plan, dead: vec![0; n.div_ceil(64)], dead_count: 0, created: Vec::new() }
    }

    fn len(&self) -> usize {
        self.plan.initial_len() - self.dead_count + self.created.len()
    }

    fn is_dead(&self, i: usize) -> bool {
        self.dead[i / 64] & (1 << (i % 64)) != 0
    }

    /// A uniformly drawn live pod (a few tries past generated pods already gone).
    fn pick(&self, rng: &mut StdRng) -> Option<Pick> {
        let n = self.plan.initial_len();
        for _ in 0..16 {
            let i = rng.random_range(0..n + self.created.len());
            if i >= n {
                return Some(Pick::Created(i - n));
            }
            if !self.is_dead(i) {
                return Some(Pick::Generated(i));
            }
        }
        None
    }

    fn key(&self, p: Pick) -> String {
        match p {
            Pick::Generated(i) => {
                let (ns, name) = self.plan.initial_pod_name(i);
                core_key("pods", Some(ns), &name)
            }
            Pick::Created(i) => self.created[i].clone(),
        }
    }

    fn remove(&mut self, p: Pick) {
        match p {
            Pick::Generated(i) => {
                if !self.is_dead(i) {
                    self.dead[i / 64] |= 1 << (i % 64);
                    self.dead_count += 1;
                }
            }
            Pick::Created(i) => {
                self.created.swap_remove(i);
            }
        }
    }
}

/// The churn task: runs until aborted.
pub async fn run(sim: Arc<Sim>, mut gen: PodGenerator) {
    let mut rng = StdRng::seed_from_u64(sim.config.seed ^ CHURN_SALT);
    let mut pool = Pool::new(gen.plan());
    let target = pool.len().max(1);
    let pod_info = sim.api.registry.lookup("", "v1", "pods").expect("pods registered");
    let mut rate_rx = sim.churn_rate.subscribe();
    let mut budget = 0.0f64;
    let mut last = tokio::time::Instant::now();
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let rate = *rate_rx.borrow_and_update();
        if rate <= 0.0 {
            budget = 0.0;
            if rate_rx.changed().await.is_err() {
                return;
            }
            last = tokio::time::Instant::now();
            continue;
        }
        interval.tick().await;
        let now = tokio::time::Instant::now();
        budget += rate * (now - last).as_secs_f64();
        last = now;
        // never catch up more than 100 ms of backlog in one go
        budget = budget.min((rate * 0.1).max(1.0));
        let wall = chrono::Utc::now().timestamp();
        let mut done = 0usize;
        while budget >= 1.0 {
            budget -= 1.0;
            gen.set_clock(wall - 1);
            one_event(&sim, &mut gen, &mut rng, &mut pool, target, &pod_info).await;
            done += 1;
            if done % 64 == 0 {
                tokio::task::yield_now().await;
            }
        }
    }
}

async fn one_event(sim: &Sim, gen: &mut PodGenerator, rng: &mut StdRng, pool: &mut Pool, target: usize, pod_info: &crate::api::ResourceInfo) {
    let draw: u32 = rng.random_range(0..100);
    let len = pool.len();
    let low = len * 100 < target * 95;
    let high = len * 100 > target * 105;
    let op = match draw {
        _ if len == 0 => 1,
        0..50 => 0,
        50..75 if !high => 1,
        50..75 => 2,
        _ if low => 1,
        _ => 2,
    };
    match op {
        0 => {
            let Some(p) = pool.pick(rng) else { return };
            let key = pool.key(p);
            for _ in 0..4 {
                let kv = match sim.store.get(&key).await {
                    Ok(Some(kv)) => kv,
                    _ => {
                        pool.remove(p);
                        return;
                    }
                };
                let Ok(text) = std::str::from_utf8(&kv.value) else { return };
                let Ok(pod) = serde_json::from_str::<Value>(text) else { return };
                let new = gen.modify(&pod);
                drop(pod);
                match sim.store.update(&key, Bytes::from(object::into_stored(pod_info, new)), kv.mod_revision).await {
                    Ok(_) => return,
                    Err(StorageError::Conflict { .. }) => continue,
                    Err(_) => {
                        pool.remove(p);
                        return;
                    }
                }
            }
        }
        1 => {
            let Some(pod) = gen.new_pod() else { return };
            // skip pods placed on nodes removed by `/fedsim/nodes`
            let node_ok = pod
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .and_then(|n| n.rsplit('-').next())
                .and_then(|i| i.parse::<usize>().ok())
                .is_none_or(|i| i < sim.node_count.load(Ordering::Relaxed));
            if !node_ok {
                return;
            }
            let ns = object::meta_str(&pod, "namespace").unwrap_or("default").to_string();
            let name = object::meta_str(&pod, "name").unwrap_or("").to_string();
            let key = core_key("pods", Some(&ns), &name);
            if sim.store.create(&key, Bytes::from(object::into_stored(pod_info, pod))).await.is_ok() {
                pool.created.push(key);
            }
        }
        _ => {
            let Some(p) = pool.pick(rng) else { return };
            let key = pool.key(p);
            pool.remove(p);
            let _ = sim.store.delete(&key, 0).await;
        }
    }
}
