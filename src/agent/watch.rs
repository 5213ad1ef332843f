//! A list+watch loop over one federation resource that survives federation outages and
//! client swaps (mirrors client-go's reflector): it lists once, then watches from the last
//! resourceVersion seen, resumes from it after any interruption (stream end, error, idle
//! timeout, certificate rotation) and lists again only after `410 Gone`.

use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, DynamicObject};
use tokio::sync::mpsc;

use super::client::FedHandle;
use super::Backoff;

/// Server-side bound of one watch request, in seconds (the server ends the stream then and
/// the loop resumes it).
pub const WATCH_TIMEOUT_SECONDS: u32 = 240;
/// A watch that delivers nothing (not even a bookmark) for this long is restarted: the
/// connection may be dead without the socket knowing (network split).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Errors of one list or watch attempt (logged, then retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The LIST failed.
    #[error("list {resource}: {source}")]
    List {
        /// Plural resource name.
        resource: String,
        /// The client error.
        source: kube::Error,
    },
    /// Opening the watch, or the stream, failed.
    #[error("watch {resource}: {source}")]
    Watch {
        /// Plural resource name.
        resource: String,
        /// The client error.
        source: kube::Error,
    },
    /// The server no longer has the resourceVersion the watch resumed from.
    #[error("watch {resource}: resourceVersion {rv} is too old (410); relisting")]
    Expired {
        /// Plural resource name.
        resource: String,
        /// The expired resourceVersion.
        rv: String,
    },
}

/// What the loop delivers.
#[derive(Debug)]
pub enum Event {
    /// A full (re)list: exactly the objects that exist now.
    Listed(Vec<DynamicObject>),
    /// An object was created or changed.
    Applied(DynamicObject),
    /// An object was deleted (its last state).
    Deleted(DynamicObject),
}

/// What to watch.
#[derive(Clone, Debug)]
pub struct WatchSpec {
    /// The resource.
    pub resource: ApiResource,
    /// Its namespace.
    pub namespace: String,
    /// Optional field selector, e.g. `metadata.name=member-credential`.
    pub field_selector: Option<String>,
}

/// Lists and watches `spec` through the current federation clients, sending [`Event`]s to
/// `tx`, forever (returns when `tx`'s receiver is gone).
pub async fn run(mut fed: FedHandle, spec: WatchSpec, tx: mpsc::UnboundedSender<Event>) {
    let plural = spec.resource.plural.clone();
    let mut rv: Option<String> = None;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    loop {
        if tx.is_closed() {
            return;
        }
        let clients = fed.borrow_and_update().clone();
        if rv.is_none() {
            let api: Api<DynamicObject> = Api::namespaced_with(clients.api.clone(), &spec.namespace, &spec.resource);
            let mut lp = ListParams::default();
            if let Some(f) = &spec.field_selector {
                lp = lp.fields(f);
            }
            match api.list(&lp).await {
                Ok(list) => {
                    rv = list.metadata.resource_version.clone();
                    if tx.send(Event::Listed(list.items)).is_err() {
                        return;
                    }
                }
                Err(source) => {
                    let e = WatchError::List { resource: plural.clone(), source };
                    let d = backoff.next_delay();
                    tracing::warn!(error = %e, retry_in = ?d, "federation list failed");
                    sleep_or_swap(&mut fed, d).await;
                    continue;
                }
            }
        }
        let from = rv.clone().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(clients.watch.clone(), &spec.namespace, &spec.resource);
        let mut wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECONDS);
        if let Some(f) = &spec.field_selector {
            wp = wp.fields(f);
        }
        let stream = match api.watch(&wp, &from).await {
            Ok(s) => s,
            Err(source) => {
                if super::api_code(&source) == Some(410) {
                    tracing::info!(error = %WatchError::Expired { resource: plural.clone(), rv: from }, "relisting");
                    rv = None;
                    continue;
                }
                let e = WatchError::Watch { resource: plural.clone(), source };
                let d = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?d, "federation watch failed");
                sleep_or_swap(&mut fed, d).await;
                continue;
            }
        };
        let mut stream = stream.boxed();
        let opened = tokio::time::Instant::now();
        let mut delivered = false;
        loop {
            tokio::select! {
                changed = fed.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    tracing::info!(resource = %plural, resource_version = ?rv, "federation client swapped; resuming watch");
                    break;
                }
                item = tokio::time::timeout(IDLE_TIMEOUT, stream.try_next()) => {
                    let ev = match item {
                        Err(_) => {
                            tracing::info!(resource = %plural, "watch idle; restarting it");
                            break;
                        }
                        Ok(Ok(None)) => {
                            // a server that ends watches at once must not make this spin
                            if !delivered && opened.elapsed() < Duration::from_secs(1) {
                                sleep_or_swap(&mut fed, backoff.next_delay()).await;
                            }
                            break;
                        }
                        Ok(Ok(Some(ev))) => ev,
                        Ok(Err(source)) => {
                            tracing::warn!(error = %WatchError::Watch { resource: plural.clone(), source }, "watch stream broke; resuming");
                            tokio::time::sleep(backoff.next_delay()).await;
                            break;
                        }
                    };
                    delivered = true;
                    backoff.reset();
                    let out = match ev {
                        WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                            rv = o.metadata.resource_version.clone().or(rv.take());
                            Event::Applied(o)
                        }
                        WatchEvent::Deleted(o) => {
                            rv = o.metadata.resource_version.clone().or(rv.take());
                            Event::Deleted(o)
                        }
                        WatchEvent::Bookmark(b) => {
                            rv = Some(b.metadata.resource_version);
                            continue;
                        }
                        WatchEvent::Error(s) => {
                            if s.code == 410 {
                                tracing::info!(error = %WatchError::Expired { resource: plural.clone(), rv: rv.clone().unwrap_or_default() }, "relisting");
                                rv = None;
                            } else {
                                tracing::warn!(resource = %plural, status = ?s, "watch error event; resuming");
                                tokio::time::sleep(backoff.next_delay()).await;
                            }
                            break;
                        }
                    };
                    if tx.send(out).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Sleeps `d`, cut short when the federation clients are swapped (new credentials may be
/// what was missing).
async fn sleep_or_swap(fed: &mut FedHandle, d: Duration) {
    let sleep = tokio::time::sleep(d);
    tokio::pin!(sleep);
    tokio::select! {
        _ = &mut sleep => {}
        changed = fed.changed() => {
            if changed.is_err() {
                sleep.await;
            }
        }
    }
}
