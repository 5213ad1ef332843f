//! etcd v3 backend of [`super::Storage`] (etcd-client over gRPC).
//!
//! Writes are single transactions guarded by compares on `create_revision` / `mod_revision`,
//! so every `create`/`update`/`delete` is one atomic etcd round trip. Every unary call is
//! bounded by a request timeout; transport failures and timeouts surface as
//! [`StorageError::Unavailable`]. Watch streams end with an error item when etcd goes away.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchRequestSender, WatchResponse,
    WatchResponseStream,
};
use tokio::sync::Notify;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::{KeyValue, ListResult, Storage, StorageError, WatchEvent, WatchStream};

/// Default bound on one unary etcd request (see [`EtcdStorage::with_request_timeout`]).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest gRPC message we accept from etcd (big list pages, catch-up watch batches).
const MAX_DECODING_MESSAGE: usize = 1 << 30;

/// How long to wait for etcd to tell the compacted revision after a `Compacted` error.
const COMPACT_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// [`Storage`] over an etcd v3 cluster.
///
/// Cloning shares the underlying gRPC channel.
#[derive(Clone)]
pub struct EtcdStorage {
    client: Client,
    request_timeout: Duration,
}

/// How an etcd call failed, before mapping to a [`StorageError`] (which may need context).
enum Failure {
    /// `mvcc: required revision has been compacted`.
    Compacted(String),
    /// `mvcc: required revision is a future revision`.
    Future(String),
    /// `mvcc: database space exceeded`.
    Quota(String),
    /// `etcdserver: request is too large` (or a gRPC message over etcd's receive limit).
    TooLarge(String),
    /// Transport errors, timeouts and every other server error.
    Other(String),
}

impl Failure {
    fn from_etcd(e: etcd_client::Error) -> Self {
        let text = e.to_string();
        let message = match &e {
            etcd_client::Error::GRpcStatus(status) => status.message().to_string(),
            _ => text.clone(),
        };
        if message.contains("required revision has been compacted") {
            Failure::Compacted(text)
        } else if message.contains("required revision is a future revision") {
            Failure::Future(text)
        } else if message.contains("database space exceeded") {
            Failure::Quota(text)
        } else if message.contains("request is too large") || message.contains("larger than max") {
            Failure::TooLarge(text)
        } else {
            Failure::Other(text)
        }
    }

    /// Mapping for calls where revision errors cannot carry a useful context.
    fn into_storage(self) -> StorageError {
        match self {
            Failure::Quota(m) => StorageError::QuotaExceeded(m),
            Failure::TooLarge(m) => StorageError::TooLarge(m),
            Failure::Compacted(m) | Failure::Future(m) | Failure::Other(m) => StorageError::Unavailable(m),
        }
    }
}

impl EtcdStorage {
    /// Creates a client for `endpoints` (URLs such as `http://127.0.0.1:2379`).
    ///
    /// The connection is made lazily and re-made after failures, so this succeeds even if
    /// etcd is down; use [`Storage::current_revision`] to probe. Errors: `Unavailable` for
    /// an empty or malformed endpoint list.
    pub async fn connect(endpoints: &[String]) -> Result<Self, StorageError> {
        if endpoints.is_empty() {
            return Err(StorageError::Unavailable("no etcd endpoints given".into()));
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            // Detects a silently dead server while a watch is open; etcd refuses pings more
            // often than every 5 s by default.
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        let client = Client::connect(endpoints, Some(options)).await.map_err(|e| StorageError::Unavailable(format!("etcd connect: {e}")))?;
        Ok(EtcdStorage { client, request_timeout: DEFAULT_REQUEST_TIMEOUT })
    }

    /// Sets the bound on each unary request (default [`DEFAULT_REQUEST_TIMEOUT`]); a request
    /// that takes longer fails with `Unavailable`.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// A clone of the underlying etcd client (shares the channel), e.g. for leases.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Runs one etcd call under the request timeout.
    async fn call<T>(&self, what: &str, fut: impl Future<Output = Result<T, etcd_client::Error>>) -> Result<T, Failure> {
        match tokio::time::timeout(self.request_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Failure::from_etcd(e)),
            Err(_) => Err(Failure::Other(format!("etcd {what} timed out after {:?}", self.request_timeout))),
        }
    }

    /// Runs a transaction; returns whether the compare succeeded, the header revision and
    /// the op responses of the branch taken.
    async fn txn(&self, txn: Txn) -> Result<(bool, i64, Vec<TxnOpResponse>), StorageError> {
        let mut kv = self.client.kv_client();
        let resp = self.call("txn", kv.txn(txn)).await.map_err(Failure::into_storage)?;
        let revision = resp.header().map_or(0, |h| h.revision());
        Ok((resp.succeeded(), revision, resp.op_responses()))
    }

    /// The revision etcd has been compacted to, learned by watching from revision 1 (etcd
    /// answers such a watch with its compact revision). `None` if it cannot be told quickly.
    async fn compacted_revision(&self) -> Option<i64> {
        let probe = async {
            let mut wc = self.client.watch_client();
            let options = WatchOptions::new().with_start_revision(1);
            let (_sender, mut responses) = wc.watch("/", Some(options)).await.ok()?.split();
            loop {
                let resp = responses.message().await.ok()??;
                if resp.compact_revision() != 0 {
                    return Some(resp.compact_revision());
                }
                if resp.canceled() {
                    return None;
                }
            }
        };
        tokio::time::timeout(COMPACT_PROBE_TIMEOUT, probe).await.ok().flatten()
    }

    /// Turns a range/compaction failure at `requested` into the storage error.
    async fn revision_error(&self, failure: Failure, requested: i64) -> StorageError {
        match failure {
            Failure::Compacted(_) => StorageError::Compacted { requested, compacted: self.compacted_revision().await.unwrap_or(requested + 1) },
            Failure::Future(_) => StorageError::FutureRevision { requested, current: self.current_revision().await.unwrap_or(requested - 1) },
            other => other.into_storage(),
        }
    }
}

/// Converts an etcd key-value, sharing the value buffer. Errors on a non-UTF-8 key.
fn convert_kv(kv: etcd_client::KeyValue) -> Result<KeyValue, StorageError> {
    let create_revision = kv.create_revision();
    let mod_revision = kv.mod_revision();
    let (key, value) = kv.into_key_value();
    let key = String::from_utf8(key).map_err(|e| StorageError::Unavailable(format!("etcd returned a non-UTF-8 key: {e}")))?;
    Ok(KeyValue { key, value: Bytes::from(value), create_revision, mod_revision })
}

/// The first key-value of the first `Get` response among `ops`, if any.
fn first_get_kv(ops: Vec<TxnOpResponse>) -> Result<Option<KeyValue>, StorageError> {
    for op in ops {
        if let TxnOpResponse::Get(mut get) = op {
            return get.take_kvs().into_iter().next().map(convert_kv).transpose();
        }
    }
    Ok(None)
}

/// Smallest key greater than every key starting with `prefix` (etcd's prefix range end);
/// `\0` (meaning "to the end of the keyspace") when no such key exists.
fn prefix_range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[async_trait]
impl Storage for EtcdStorage {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        let mut kv = self.client.kv_client();
        let mut resp = self.call("get", kv.get(key, None)).await.map_err(Failure::into_storage)?;
        resp.take_kvs().into_iter().next().map(convert_kv).transpose()
    }

    async fn list(&self, prefix: &str, start: &str, limit: i64, revision: i64) -> Result<ListResult, StorageError> {
        let from = if start > prefix { start } else { prefix };
        let end = prefix_range_end(prefix);
        let mut kv = self.client.kv_client().max_decoding_message_size(MAX_DECODING_MESSAGE);
        let options = GetOptions::new().with_range(end).with_limit(limit.max(0)).with_revision(revision.max(0));
        // `from >= prefix`, so a `from` outside the prefix sorts after every key in it.
        let result = if !from.starts_with(prefix) {
            // Nothing to return; still validate the revision and learn the served one.
            let probe = GetOptions::new().with_count_only().with_revision(revision.max(0));
            self.call("range", kv.get(prefix, Some(probe))).await.map(|resp| (resp, true))
        } else {
            self.call("range", kv.get(from, Some(options))).await.map(|resp| (resp, false))
        };
        let (mut resp, empty) = match result {
            Ok(r) => r,
            Err(f) => return Err(self.revision_error(f, revision).await),
        };
        let served_at = if revision > 0 { revision } else { resp.header().map_or(0, |h| h.revision()) };
        if empty {
            return Ok(ListResult { kvs: Vec::new(), revision: served_at, remaining: 0 });
        }
        let count = resp.count();
        let kvs = resp.take_kvs().into_iter().map(convert_kv).collect::<Result<Vec<_>, _>>()?;
        let remaining = (count - kvs.len() as i64).max(0);
        Ok(ListResult { kvs, revision: served_at, remaining })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<i64, StorageError> {
        let txn = Txn::new().when([Compare::create_revision(key, CompareOp::Equal, 0)]).and_then([TxnOp::put(key, value.to_vec(), None)]);
        let (succeeded, revision, _) = self.txn(txn).await?;
        if succeeded {
            Ok(revision)
        } else {
            Err(StorageError::AlreadyExists(key.to_string()))
        }
    }

    async fn update(&self, key: &str, value: Bytes, expected_revision: i64) -> Result<i64, StorageError> {
        // `version > 0` keeps a missing key (mod revision 0) from matching expected 0.
        let txn = Txn::new()
            .when([Compare::version(key, CompareOp::Greater, 0), Compare::mod_revision(key, CompareOp::Equal, expected_revision)])
            .and_then([TxnOp::put(key, value.to_vec(), None)])
            .or_else([TxnOp::get(key, None)]);
        let (succeeded, revision, ops) = self.txn(txn).await?;
        if succeeded {
            return Ok(revision);
        }
        match first_get_kv(ops)? {
            None => Err(StorageError::NotFound(key.to_string())),
            Some(current) => Err(StorageError::Conflict { key: key.to_string(), current: Some(current) }),
        }
    }

    async fn delete(&self, key: &str, expected_revision: i64) -> Result<(i64, KeyValue), StorageError> {
        let mut compares = vec![Compare::version(key, CompareOp::Greater, 0)];
        if expected_revision != 0 {
            compares.push(Compare::mod_revision(key, CompareOp::Equal, expected_revision));
        }
        let txn = Txn::new().when(compares).and_then([TxnOp::delete(key, Some(DeleteOptions::new().with_prev_key()))]).or_else([TxnOp::get(key, None)]);
        let (succeeded, revision, ops) = self.txn(txn).await?;
        if !succeeded {
            return match first_get_kv(ops)? {
                None => Err(StorageError::NotFound(key.to_string())),
                Some(current) => Err(StorageError::Conflict { key: key.to_string(), current: Some(current) }),
            };
        }
        for op in ops {
            if let TxnOpResponse::Delete(mut del) = op {
                if let Some(prev) = del.take_prev_kvs().into_iter().next() {
                    return Ok((revision, convert_kv(prev)?));
                }
            }
        }
        // The compare guaranteed the key existed, so etcd must have returned it.
        Err(StorageError::Unavailable(format!("etcd delete of {key} returned no previous value")))
    }

    async fn watch(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>) -> Result<WatchStream, StorageError> {
        self.open_watch(prefix, after_revision, progress_every, None).await
    }

    async fn watch_with_progress_requests(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>, requests: Arc<Notify>) -> Result<WatchStream, StorageError> {
        self.open_watch(prefix, after_revision, progress_every, Some(requests)).await
    }

    async fn current_revision(&self) -> Result<i64, StorageError> {
        let mut kv = self.client.kv_client();
        let options = GetOptions::new().with_count_only();
        let resp = self.call("get", kv.get("/", Some(options))).await.map_err(Failure::into_storage)?;
        resp.header().map(|h| h.revision()).ok_or_else(|| StorageError::Unavailable("etcd response without header".into()))
    }

    async fn compact(&self, revision: i64) -> Result<(), StorageError> {
        let mut kv = self.client.kv_client();
        let options = CompactionOptions::new().with_physical();
        match self.call("compact", kv.compact(revision, Some(options))).await {
            Ok(_) => Ok(()),
            // Already compacted at or beyond `revision`: nothing left to do.
            Err(Failure::Compacted(_)) => Ok(()),
            Err(f) => Err(self.revision_error(f, revision).await),
        }
    }
}

impl EtcdStorage {
    /// Opens one etcd watch stream (see [`Storage::watch`]); with `requests`, each
    /// notification asks etcd for progress at once.
    async fn open_watch(&self, prefix: &str, after_revision: i64, progress_every: Option<Duration>, requests: Option<Arc<Notify>>) -> Result<WatchStream, StorageError> {
        let mut options = WatchOptions::new().with_prefix().with_prev_key();
        if after_revision > 0 {
            options = options.with_start_revision(after_revision + 1);
        }
        let mut wc = self.client.watch_client().max_decoding_message_size(MAX_DECODING_MESSAGE);
        let stream = self.call("watch", wc.watch(prefix, Some(options))).await.map_err(Failure::into_storage)?;
        let (sender, mut responses) = stream.split();

        // Wait for the "created" answer so that, once we return, no later write is missed.
        let created = self.call("watch", responses.message()).await.map_err(Failure::into_storage)?;
        let next = match created {
            Some(resp) if resp.compact_revision() != 0 => {
                return Err(StorageError::Compacted { requested: after_revision + 1, compacted: resp.compact_revision() });
            }
            Some(resp) if resp.created() && !resp.canceled() => {
                if after_revision > 0 {
                    after_revision + 1
                } else {
                    resp.header().map_or(0, |h| h.revision()) + 1
                }
            }
            Some(resp) => {
                return Err(StorageError::Unavailable(format!("etcd refused the watch: {}", resp.cancel_reason())));
            }
            None => return Err(StorageError::Unavailable("etcd closed the watch stream".into())),
        };

        let ticker = progress_every.map(|every| {
            let mut t = tokio::time::interval_at(Instant::now() + every, every);
            t.set_missed_tick_behavior(MissedTickBehavior::Delay);
            t
        });
        let state = EtcdWatch { sender, responses, ticker, requests, pending: VecDeque::new(), next, done: false };
        Ok(Box::pin(futures::stream::unfold(state, |mut w| async move {
            let item = w.next_item().await?;
            Some((item, w))
        })))
    }
}

/// What woke a waiting etcd watch.
enum Wake {
    Message(Result<Option<WatchResponse>, etcd_client::Error>),
    Tick,
}

/// Waits for the next progress tick; never completes without a ticker.
async fn tick(ticker: &mut Option<Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// State of one etcd watch stream.
struct EtcdWatch {
    /// Kept alive for the stream's lifetime: dropping it would end the gRPC request stream.
    sender: WatchRequestSender,
    responses: WatchResponseStream,
    ticker: Option<Interval>,
    /// Asks for progress at once when notified (see [`Storage::watch_with_progress_requests`]).
    requests: Option<Arc<Notify>>,
    pending: VecDeque<WatchEvent>,
    /// Next revision this watch expects (for the `requested` of a compaction error).
    next: i64,
    done: bool,
}

impl EtcdWatch {
    async fn next_item(&mut self) -> Option<Result<WatchEvent, StorageError>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(ev) = self.pending.pop_front() {
                return Some(Ok(ev));
            }
            let wake = {
                let (ticker, responses, requests) = (&mut self.ticker, &mut self.responses, &self.requests);
                tokio::select! {
                    message = responses.message() => Wake::Message(message),
                    _ = tick(ticker) => Wake::Tick,
                    _ = super::progress_requested(requests) => Wake::Tick,
                }
            };
            match wake {
                Wake::Message(Ok(Some(resp))) => {
                    if let Some(item) = self.absorb(resp) {
                        return Some(item);
                    }
                }
                Wake::Message(Ok(None)) => {
                    return self.fail(StorageError::Unavailable("etcd closed the watch stream".into()));
                }
                Wake::Message(Err(e)) => {
                    return self.fail(StorageError::Unavailable(format!("etcd watch: {e}")));
                }
                Wake::Tick => {
                    if let Err(e) = self.sender.request_progress().await {
                        return self.fail(StorageError::Unavailable(format!("etcd watch progress request: {e}")));
                    }
                }
            }
        }
    }

    fn fail(&mut self, e: StorageError) -> Option<Result<WatchEvent, StorageError>> {
        self.done = true;
        Some(Err(e))
    }

    /// Queues the events of one response; returns an item to yield right away (progress or
    /// a final error), if any.
    fn absorb(&mut self, resp: WatchResponse) -> Option<Result<WatchEvent, StorageError>> {
        if resp.compact_revision() != 0 {
            return self.fail(StorageError::Compacted { requested: self.next, compacted: resp.compact_revision() });
        }
        if resp.canceled() {
            return self.fail(StorageError::Unavailable(format!("etcd canceled the watch: {}", resp.cancel_reason())));
        }
        if resp.events().is_empty() {
            if resp.created() {
                return None;
            }
            // A progress notification: every event up to the header revision was sent.
            let revision = resp.header().map_or(0, |h| h.revision());
            return Some(Ok(WatchEvent::Progress(revision)));
        }
        for event in resp.events() {
            match convert_event(event) {
                Ok(ev) => {
                    let revision = match &ev {
                        WatchEvent::Put { kv, .. } => kv.mod_revision,
                        WatchEvent::Delete { revision, .. } => *revision,
                        WatchEvent::Progress(r) => *r,
                    };
                    self.next = revision + 1;
                    self.pending.push_back(ev);
                }
                Err(e) => {
                    // Undecodable event: the stream can no longer be complete, so end it.
                    self.pending.clear();
                    return self.fail(e);
                }
            }
        }
        None
    }
}

/// A watch event as the storage's. Errors: `Unavailable` for an event without its key, and
/// `Compacted` for a change or deletion whose former state etcd no longer holds. etcd sends
/// such an event without `prev_kv` when the revision before it was compacted (a watch from
/// the compaction revision itself, or a watcher that fell behind while etcd compacted).
/// Without its former state a change cannot be told from a creation, nor a deletion be
/// described, so the watch ends and its watchers start again from a LIST (kube-apiserver's
/// watcher likewise refuses "etcd event received with PrevKv=nil" and ends the watch).
fn convert_event(event: &etcd_client::Event) -> Result<WatchEvent, StorageError> {
    let kv = event.kv().cloned().ok_or_else(|| StorageError::Unavailable("etcd watch event without kv".into()))?;
    let prev = event.prev_kv().cloned().map(convert_kv).transpose()?;
    let kv = convert_kv(kv)?;
    let revision = kv.mod_revision;
    let lost = || StorageError::Compacted { requested: revision - 1, compacted: revision };
    match event.event_type() {
        EventType::Put if prev.is_none() && kv.create_revision != kv.mod_revision => Err(lost()),
        EventType::Put => Ok(WatchEvent::Put { kv, prev }),
        EventType::Delete => Ok(WatchEvent::Delete { prev: prev.ok_or_else(lost)?, revision }),
    }
}
