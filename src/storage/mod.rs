//! Revisioned key-value storage: the trait the API layer stands on, with etcd and memory
//! backends; uses no other fedctl module.
//!
//! The model is etcd v3's: one global, monotonically increasing revision; every key
//! carries the revision of its creation and of its last modification; a watch delivers
//! every change after a given revision, in revision order, or fails with
//! [`StorageError::Compacted`] when that history has been compacted away.
//! kube-apiserver maps `metadata.resourceVersion` to the mod revision; so do we.

pub mod cacher;
pub mod compactor;
pub mod etcd;
pub mod lazy;
pub mod memory;

use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

/// One stored key with its value and revisions (mirrors etcd's `mvccpb.KeyValue`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// Full key, e.g. `/registry/apps/deployments/shop/web`.
    pub key: String,
    /// Stored bytes (JSON for the API layer).
    pub value: Bytes,
    /// Revision at which the key was created.
    pub create_revision: i64,
    /// Revision of the last modification; this is the object's resourceVersion.
    pub mod_revision: i64,
}

/// Result of a range read.
#[derive(Clone, Debug, Default)]
pub struct ListResult {
    /// Keys in ascending key order, at most `limit` of them.
    pub kvs: Vec<KeyValue>,
    /// The store revision the read was served at.
    pub revision: i64,
    /// Number of keys in the range from `start` that were *not* returned (0 when complete).
    pub remaining: i64,
}

/// One change seen by a watch.
#[derive(Clone, Debug)]
pub enum WatchEvent {
    /// The key was created (`prev` is `None`) or modified (`prev` is the former state).
    Put { kv: KeyValue, prev: Option<KeyValue> },
    /// The key was deleted at `revision`; `prev` is its last state.
    Delete { prev: KeyValue, revision: i64 },
    /// Every change up to and including this revision has been delivered (etcd progress notify).
    Progress(i64),
}

/// A stream of watch events; ends when the backend closes the watch. An `Err` item is final.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, StorageError>> + Send>>;

/// Errors of the storage layer; the API layer turns them into Kubernetes `Status` objects.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// `create` found the key already present.
    #[error("key {0} already exists")]
    AlreadyExists(String),
    /// The key does not exist.
    #[error("key {0} not found")]
    NotFound(String),
    /// A compare-and-swap failed: the key's mod revision is not the expected one.
    /// `current` holds the current state when the key still exists.
    #[error("key {key} was modified (conflict)")]
    Conflict { key: String, current: Option<KeyValue> },
    /// The requested revision has been compacted; `compacted` is the oldest revision still held.
    #[error("required revision {requested} has been compacted (oldest held {compacted})")]
    Compacted { requested: i64, compacted: i64 },
    /// The requested revision is in the future.
    #[error("required revision {requested} is a future revision (current {current})")]
    FutureRevision { requested: i64, current: i64 },
    /// The backend refused for lack of space (etcd `mvcc: database space exceeded`).
    #[error("storage quota exceeded: {0}")]
    QuotaExceeded(String),
    /// The backend refused a value as too large (etcd `request is too large`, over its
    /// `--max-request-bytes`, 1.5 MiB by default).
    #[error("storage refused the request as too large: {0}")]
    TooLarge(String),
    /// The backend could not be reached or answered with an error.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

/// Revisioned key-value store (mirrors the parts of etcd v3 that kube-apiserver uses).
///
/// Keys are UTF-8 strings; prefixes used with `list`/`watch` end with `/`.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Reads one key at the latest revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError>;

    /// Reads keys under `prefix`, starting at key `start` (inclusive; `""` = from the
    /// beginning of the prefix), at most `limit` keys (`0` = no limit), at `revision`
    /// (`0` = latest). Errors: `Compacted` for a compacted revision, `FutureRevision`.
    async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<ListResult, StorageError>;

    /// Reads every key under `prefix` at a revision of at least `min_revision` (`0`: any),
    /// which may be older than the latest: the semantics of kube-apiserver's LIST with
    /// `resourceVersion=0` or `resourceVersionMatch=NotOlderThan`, which its watch cache
    /// answers. Never paged (`remaining` is 0). A watch cache ([`cacher::Cacher`]) answers
    /// from memory, waiting a while for `min_revision`; this default reads the latest
    /// revision from the backend. Error: `FutureRevision` when `min_revision` is ahead of
    /// what the store (or cache) has.
    async fn list_cached(&self, prefix: &str, min_revision: i64) -> Result<ListResult, StorageError> {
        let res = self.list(prefix, "", 0, 0).await?;
        if res.revision < min_revision {
            return Err(StorageError::FutureRevision { requested: min_revision, current: res.revision });
        }
        Ok(res)
    }

    /// The state of `key` as a watch cache holds it, without a request to the backend:
    /// `None` when no running cache holds its resource or the key is not in it (a caller
    /// then reads the backend). It may be older than the backend's state, so it serves only
    /// as the first guess of a compare-and-swap (mirrors kube-apiserver's
    /// `GuaranteedUpdate(…, cachedExistingObject)`, which the cacher passes from its
    /// watch cache). Backends without a cache return `None`.
    fn get_cached(&self, _key: &str) -> Option<KeyValue> {
        None
    }

    /// Creates `key` only if absent; returns the new revision. Error: `AlreadyExists`.
    async fn create(&self, key: &str, value: Bytes) -> Result<i64, StorageError>;

    /// Replaces `key` only if its mod revision equals `expected_revision`; returns the new
    /// revision. Errors: `NotFound`, `Conflict` (with the current state).
    async fn update(&self, key: &str, value: Bytes, expected_revision: i64) -> Result<i64, StorageError>;

    /// Deletes `key`; when `expected_revision` is non-zero only if the mod revision matches.
    /// Returns the deletion revision and the last state. Errors: `NotFound`, `Conflict`.
    async fn delete(&self, key: &str, expected_revision: i64) -> Result<(i64, KeyValue), StorageError>;

    /// Watches every key under `prefix` for changes with revision > `after_revision`
    /// (`0` = from now). With `progress_every`, the stream also yields a `Progress(rev)`
    /// at about that interval, meaning every change up to `rev` has been delivered
    /// (etcd: `RequestProgress`). Error: `Compacted` if `after_revision + 1` is no longer
    /// held (the stream may also end with it).
    async fn watch(&self, prefix: &str, after_revision: i64, progress_every: Option<std::time::Duration>) -> Result<WatchStream, StorageError>;

    /// [`Storage::watch`] whose stream also yields a `Progress(rev)` soon after each
    /// `requests.notify_one()` (etcd: one `RequestProgress` on the watch's stream per
    /// notification; etcd answers it only while the watch has caught up, so a caller that
    /// still waits asks again). Mirrors the progress requester of kube-apiserver's cacher,
    /// which asks etcd for progress while a consistent read from the cache waits for a
    /// revision. Default: `requests` is not listened to (progress as `progress_every` says).
    async fn watch_with_progress_requests(
        &self,
        prefix: &str,
        after_revision: i64,
        progress_every: Option<std::time::Duration>,
        requests: std::sync::Arc<tokio::sync::Notify>,
    ) -> Result<WatchStream, StorageError> {
        let _ = requests;
        self.watch(prefix, after_revision, progress_every).await
    }

    /// The store's current revision.
    async fn current_revision(&self) -> Result<i64, StorageError>;

    /// Discards history before `revision`; later reads/watches at older revisions fail
    /// with `Compacted`.
    async fn compact(&self, revision: i64) -> Result<(), StorageError>;
}

/// Waits for the next progress request of a watch (see
/// [`Storage::watch_with_progress_requests`]); never completes without a source of them.
pub(crate) async fn progress_requested(requests: &Option<std::sync::Arc<tokio::sync::Notify>>) {
    match requests {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}
