//! A [`Storage`] that connects to etcd in the background and answers 503-style errors until then.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::OnceCell;

use crate::storage::etcd::EtcdStorage;
use crate::storage::{KeyValue, ListResult, Storage, StorageError, WatchStream};

/// Wraps a backend that may not be connected yet (etcd unreachable at start: the server
/// still starts, `/readyz` fails, requests get `Unavailable` until the connection is made).
pub struct LazyStorage {
    inner: OnceCell<Arc<dyn Storage>>,
    notify: tokio::sync::Notify,
}

impl LazyStorage {
    /// Starts connecting to `endpoints` in the background, retrying with backoff (≤ 5 s).
    pub fn connect_etcd(endpoints: Vec<String>) -> Arc<Self> {
        let me = Arc::new(LazyStorage { inner: OnceCell::new(), notify: tokio::sync::Notify::new() });
        let m = me.clone();
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(200);
            loop {
                match EtcdStorage::connect(&endpoints).await {
                    Ok(s) => {
                        let s: Arc<dyn Storage> = Arc::new(s);
                        // a connection is only useful once etcd answers
                        if s.current_revision().await.is_ok() {
                            let _ = m.inner.set(s);
                            m.notify.notify_waiters();
                            tracing::info!(?endpoints, "connected to etcd");
                            return;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "etcd not reachable yet; retrying"),
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
        me
    }

    /// Wraps an already connected backend.
    pub fn ready_with(s: Arc<dyn Storage>) -> Arc<Self> {
        let me = Arc::new(LazyStorage { inner: OnceCell::new(), notify: tokio::sync::Notify::new() });
        let _ = me.inner.set(s);
        me
    }

    /// Resolves once connected.
    pub async fn ready(&self) {
        loop {
            let n = self.notify.notified();
            if self.inner.get().is_some() {
                return;
            }
            n.await;
        }
    }

    /// True when the backend is connected and answers within 2 s.
    pub async fn healthy(&self) -> bool {
        match self.inner.get() {
            None => false,
            Some(s) => matches!(tokio::time::timeout(Duration::from_secs(2), s.current_revision()).await, Ok(Ok(_))),
        }
    }

    fn get(&self) -> Result<&Arc<dyn Storage>, StorageError> {
        self.inner.get().ok_or_else(|| StorageError::Unavailable("etcd is not connected yet".into()))
    }
}

#[async_trait]
impl Storage for LazyStorage {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        self.get()?.get(key).await
    }
    async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<ListResult, StorageError> {
        self.get()?.list(prefix, start, limit, revision).await
    }
    async fn list_cached(&self, prefix: &str, min_revision: i64) -> Result<ListResult, StorageError> {
        self.get()?.list_cached(prefix, min_revision).await
    }
    async fn create(&self, key: &str, value: Bytes) -> Result<i64, StorageError> {
        self.get()?.create(key, value).await
    }
    async fn update(&self, key: &str, value: Bytes, expected_revision: i64) -> Result<i64, StorageError> {
        self.get()?.update(key, value, expected_revision).await
    }
    async fn delete(&self, key: &str, expected_revision: i64) -> Result<(i64, KeyValue), StorageError> {
        self.get()?.delete(key, expected_revision).await
    }
    async fn watch(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>) -> Result<WatchStream, StorageError> {
        self.get()?.watch(prefix, after_revision, progress_every).await
    }
    async fn watch_with_progress_requests(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>, requests: Arc<tokio::sync::Notify>) -> Result<WatchStream, StorageError> {
        self.get()?.watch_with_progress_requests(prefix, after_revision, progress_every, requests).await
    }
    async fn current_revision(&self) -> Result<i64, StorageError> {
        self.get()?.current_revision().await
    }
    async fn compact(&self, revision: i64) -> Result<(), StorageError> {
        self.get()?.compact(revision).await
    }
}
