//! Task groups: every task spawned (through [`spawn`]) while running inside a group belongs to it, and aborting the group aborts them all.
//!
//! The leader-elected controllers start many background tasks (watchers, workers, timers);
//! when the replica loses its lease they must all stop at once, so that a deposed leader
//! writes nothing more. Code running inside [`TaskGroup::scope`] — and every task it spawns
//! with [`spawn`], transitively — is registered in that group; [`TaskGroup::abort`] aborts
//! every registered task and makes later spawns into the group abort at once. Outside a
//! group [`spawn`] is plain `tokio::spawn`.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::{AbortHandle, JoinHandle};

tokio::task_local! {
    static GROUP: TaskGroup;
}

/// A set of tasks aborted together. Cloning shares the set.
#[derive(Clone, Default)]
pub struct TaskGroup {
    inner: Arc<Mutex<GroupState>>,
}

#[derive(Default)]
struct GroupState {
    tasks: Vec<AbortHandle>,
    aborted: bool,
}

impl TaskGroup {
    /// An empty group.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `fut` inside this group: tasks it spawns through [`spawn`] join the group.
    pub async fn scope<F: Future>(&self, fut: F) -> F::Output {
        GROUP.scope(self.clone(), fut).await
    }

    /// Runs `f` inside this group synchronously (for starters that spawn and return).
    pub fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        GROUP.sync_scope(self.clone(), f)
    }

    fn register(&self, h: AbortHandle) {
        let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if st.aborted {
            h.abort();
            return;
        }
        // drop finished tasks now and then (timers come and go)
        if st.tasks.len() >= 64 && st.tasks.len().is_power_of_two() {
            st.tasks.retain(|t| !t.is_finished());
        }
        st.tasks.push(h);
    }

    /// Aborts every task of the group; tasks spawned into it later are aborted at once.
    pub fn abort(&self) {
        let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        st.aborted = true;
        for t in &st.tasks {
            t.abort();
        }
    }

    /// Number of tasks of the group still running.
    pub fn running(&self) -> usize {
        let st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        st.tasks.iter().filter(|t| !t.is_finished()).count()
    }

    /// Aborts the group and waits (at most `within`) until its tasks have finished, i.e. are
    /// no longer polled. Returns whether they all did.
    pub async fn abort_and_wait(&self, within: Duration) -> bool {
        self.abort();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.running() == 0 {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Spawns `fut`; inside a [`TaskGroup`] (see [`TaskGroup::scope`]) the task joins that group
/// and runs inside it too, so that what it spawns joins as well.
pub fn spawn<F>(fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match GROUP.try_with(|g| g.clone()) {
        Ok(g) => {
            let h = tokio::spawn(GROUP.scope(g.clone(), fut));
            g.register(h.abort_handle());
            h
        }
        Err(_) => tokio::spawn(fut),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn abort_stops_nested_tasks() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let g = TaskGroup::new();
        let t = ticks.clone();
        g.sync_scope(|| {
            spawn(async move {
                // a nested task, spawned from inside a group task
                spawn(async move {
                    loop {
                        t.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                });
                futures::future::pending::<()>().await;
            });
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(ticks.load(Ordering::SeqCst) > 0);
        assert_eq!(g.running(), 2);
        assert!(g.abort_and_wait(Duration::from_secs(1)).await);
        let n = ticks.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), n);
        // spawning into an aborted group aborts at once
        let h = g.sync_scope(|| spawn(futures::future::pending::<()>()));
        assert!(h.await.unwrap_err().is_cancelled());
        // outside a group: a plain task
        assert_eq!(spawn(async { 7 }).await.unwrap(), 7);
    }
}
