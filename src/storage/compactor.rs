//! Periodic compaction of the store's history (mirrors kube-apiserver's etcd compactor, `--etcd-compaction-interval`).
//!
//! Every interval, each server replica tries a compare-and-swap on [`COMPACT_REV_KEY`]; the
//! one that succeeds compacts the store to the revision it recorded one interval earlier, so
//! the store keeps at least one interval of history (for watches resuming and LISTs at a
//! resourceVersion) and never grows without bound. Replicas that lose the swap learn the
//! key's state and try again one interval later; when the compacting replica stops, another
//! one takes over after one to two intervals. kube-apiserver compares the key's etcd
//! `version`; this compares its mod revision ([`Storage::update`]), which serves the same
//! purpose: it changes at every successful swap.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Storage, StorageError};

/// The key replicas swap to agree on who compacts (its value: the revision the next
/// compaction goes to).
pub const COMPACT_REV_KEY: &str = "/fedctl/compact_rev_key";

/// What a compactor knows between its steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactState {
    /// [`COMPACT_REV_KEY`]'s mod revision as last seen (0: absent).
    pub seen: i64,
    /// The store revision at the last step: what the next successful step compacts to (0:
    /// nothing yet, as after a start).
    pub revision: i64,
}

/// What one [`step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stepped {
    /// This replica won the swap and compacted the store to this revision (0: it had none
    /// recorded yet and did not compact).
    Compacted(i64),
    /// Another replica swapped first; nothing was compacted.
    Lost,
}

/// One compaction step from `state`: swaps [`COMPACT_REV_KEY`] (created when absent), and on
/// success compacts to `state.revision` when it is set. Returns the next state and what was
/// done. Errors: the store's (unreachable, or the compaction failed after the swap: the next
/// step then loses the swap to this one's and learns its state, and the one after compacts).
pub async fn step(store: &dyn Storage, state: CompactState) -> Result<(CompactState, Stepped), StorageError> {
    let value = Bytes::from(state.revision.to_string());
    let swapped = if state.seen == 0 { store.create(COMPACT_REV_KEY, value).await } else { store.update(COMPACT_REV_KEY, value, state.seen).await };
    match swapped {
        Ok(rev) => {
            if state.revision > 0 {
                store.compact(state.revision).await?;
            }
            Ok((CompactState { seen: rev, revision: rev }, Stepped::Compacted(state.revision)))
        }
        Err(StorageError::AlreadyExists(_)) | Err(StorageError::NotFound(_)) | Err(StorageError::Conflict { .. }) => {
            let current = store.get(COMPACT_REV_KEY).await?;
            let revision = store.current_revision().await?;
            Ok((CompactState { seen: current.map_or(0, |kv| kv.mod_revision), revision }, Stepped::Lost))
        }
        Err(e) => Err(e),
    }
}

/// Runs [`step`] every `interval`, forever (the server aborts the task when it stops); the
/// first step comes one interval after the start and compacts nothing: it only records a
/// revision. Errors are logged and the step is tried again one interval later.
pub async fn run(store: Arc<dyn Storage>, interval: Duration) {
    tracing::info!(?interval, "compacting the store's history once per interval");
    let mut state = CompactState::default();
    loop {
        tokio::time::sleep(interval).await;
        match step(&*store, state).await {
            Ok((next, done)) => {
                if let Stepped::Compacted(rev) = done {
                    if rev > 0 {
                        tracing::info!(revision = rev, "compacted the store's history");
                    }
                }
                state = next;
            }
            Err(e) => tracing::warn!(error = %e, "store compaction failed; trying again next interval"),
        }
    }
}
