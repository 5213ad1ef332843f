//! The audit log of `fedctl server`: one `audit.k8s.io/v1` Event per request, as JSON lines to a file with size-based rotation (or standard output), modelled on kube-apiserver's audit filter and log backend.
//!
//! Shape and stages mirror `k8s.io/apiserver/pkg/endpoints/filters/audit.go`:
//! - every request gets an audit ID (the client's `Audit-ID` header when it sent one, else a
//!   random UUID), answered in the `Audit-Id` response header whether or not a log is written;
//! - one `ResponseComplete` event when the request is over: for a LIST or GET when its body
//!   has been sent, for a watch, `logs -f` or an upgraded exec/attach/port-forward session when
//!   the stream ends (or the client goes);
//! - long-running requests (verb `watch`/`proxy`, subresources `attach`, `exec`, `log`,
//!   `portforward`, `proxy`: kube-apiserver's `BasicLongRunningRequestCheck`) also get a
//!   `ResponseStarted` event when the response head is sent;
//! - a request that fails authentication (401) is logged once, at stage `ResponseStarted`, with
//!   an empty `user` and the message `Authentication failed, attempted: bearer` (or `x509`,
//!   `basic`; `…, no credentials provided`), as kube-apiserver's `WithFailedAuthenticationAudit`.
//!
//! `verb` and `objectRef` come from the request path as kube-apiserver's `RequestInfoFactory`
//! reads it ([`request_info`]); requests through the global view are described by the member
//! path they carry, with the annotation [`VIEW_ANNOTATION`] naming the view. kube-apiserver
//! has no latency field: every `ResponseComplete` event carries [`LATENCY_ANNOTATION`], the
//! milliseconds from the request's arrival to that event.
//!
//! Levels ([`Level`]): `Metadata` logs who did what to which object and the outcome;
//! `Request` adds the body of creates, updates and patches as `requestObject`, except for
//! requests that carry credentials (see [`is_sensitive`]), which stay at `Metadata`. No header
//! is ever logged (so neither an `Authorization` header nor a token).
//!
//! Events go through a bounded queue to a writer thread (a slow disk never blocks a request);
//! when the queue is full the event is dropped and counted in
//! `apiserver_audit_error_total{plugin="buffered"}` (kube-apiserver's buffered backend does
//! the same). The file rotates as kube-apiserver's log backend (lumberjack) does.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::middleware::Next;
use http_body_util::BodyExt;
use serde::Serialize;
use serde_json::Value;

use crate::api::request::Query;
use crate::api::Caller;
use crate::http::Request;

/// Annotation holding a request's latency in milliseconds (three decimals), on every
/// `ResponseComplete` event. kube-apiserver records none (it annotates
/// `apiserver.latency.k8s.io/total` only past 500 ms).
pub const LATENCY_ANNOTATION: &str = "fedctl.io/latency-ms";
/// Annotation on requests through the global view: `global` or `clusters/<name>`; the event's
/// `verb` and `objectRef` describe the member path inside it.
pub const VIEW_ANNOTATION: &str = "fedctl.io/global-view";
/// Request and response header carrying the audit ID (kube-apiserver's `Audit-ID`).
pub const AUDIT_ID_HEADER: &str = "audit-id";
/// Default `--audit-log-batch-buffer-size`: events queued for the writer (kube-apiserver's
/// default buffer size).
pub const DEFAULT_BUFFER_SIZE: usize = 10_000;
/// Size a log file rotates at when `--audit-log-maxsize` is 0 (lumberjack's default, 100 MiB).
pub const DEFAULT_MAX_SIZE_MB: u64 = 100;
/// Largest error body (bytes) read for the `responseStatus` of a failed request.
const MAX_STATUS_BODY: u64 = 64 * 1024;

/// Errors of the audit log.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The log file could not be opened or created.
    #[error("audit log {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `--audit-level` names no level fedctl writes.
    #[error("audit level {0:?}: want None, Metadata or Request (RequestResponse is not supported: response bodies are never logged)")]
    Level(String),
    /// The writer thread could not be started.
    #[error("audit log writer: {0}")]
    Thread(std::io::Error),
}

/// How much of a request is logged (kube-apiserver's audit levels, without `RequestResponse`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Level {
    /// Nothing.
    None,
    /// User, verb, object, response status, timestamps.
    #[default]
    Metadata,
    /// Metadata and, for creates, updates and patches, the request body (`requestObject`).
    Request,
}

impl std::str::FromStr for Level {
    type Err = AuditError;

    /// `None`, `Metadata` or `Request` (any case). Errors: [`AuditError::Level`].
    fn from_str(s: &str) -> Result<Self, AuditError> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Level::None),
            "metadata" => Ok(Level::Metadata),
            "request" => Ok(Level::Request),
            _ => Err(AuditError::Level(s.to_string())),
        }
    }
}

/// Parses `--audit-level` (for clap).
pub fn parse_level(s: &str) -> Result<Level, String> {
    s.parse().map_err(|e: AuditError| e.to_string())
}

/// Where and how the audit log is written (the server's `--audit-*` flags, after
/// kube-apiserver's `--audit-log-*`).
#[derive(Clone, Debug)]
pub struct AuditConfig {
    /// `--audit-log-path`: the log file; `-` is standard output; `None`: no audit log.
    pub path: Option<PathBuf>,
    /// `--audit-level` (default Metadata).
    pub level: Level,
    /// `--audit-log-maxsize`: megabytes (MiB) a file may reach before it is rotated; 0 is
    /// [`DEFAULT_MAX_SIZE_MB`], as lumberjack reads it.
    pub max_size_mb: u64,
    /// `--audit-log-maxbackup`: rotated files kept (the oldest are removed); 0 keeps all, as
    /// lumberjack and kube-apiserver.
    pub max_backups: usize,
    /// `--audit-log-batch-buffer-size`: events queued for the writer; more are dropped.
    pub buffer_size: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig { path: None, level: Level::Metadata, max_size_mb: 0, max_backups: 0, buffer_size: DEFAULT_BUFFER_SIZE }
    }
}

/// A stage of a request's life at which an event is written (a subset of kube-apiserver's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Stage {
    /// The response head was sent (long-running requests and failed authentication only).
    ResponseStarted,
    /// The response was sent whole (or the client went away).
    ResponseComplete,
}

/// `authentication.k8s.io/v1` UserInfo as the audit Event carries it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UserInfo {
    /// User name; empty (left out) when authentication failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// Groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl UserInfo {
    fn of(c: &Caller) -> Self {
        UserInfo { username: c.user.clone(), groups: c.groups.clone() }
    }
}

/// The object a request is about (`audit.k8s.io/v1` ObjectReference).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Plural resource, e.g. `deployments`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// Namespace.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Object name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// API group (left out for the core group).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// API version.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Subresource, e.g. `status`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// The outcome of a request (a `meta/v1` Status, reduced as kube-apiserver's audit reduces it).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ResponseStatus {
    /// Always `{}`.
    pub metadata: serde_json::Map<String, Value>,
    /// `Failure` for failed requests answered with a Status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The Status message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The Status reason, e.g. `Forbidden`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The Status details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// HTTP status code.
    pub code: u16,
}

/// One `audit.k8s.io/v1` Event, serialized as kube-apiserver's log backend writes it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `Event`.
    pub kind: &'static str,
    /// `audit.k8s.io/v1`.
    pub api_version: &'static str,
    /// The level the request was logged at.
    pub level: Level,
    /// The request's audit ID (also its `Audit-Id` response header).
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// The stage.
    pub stage: Stage,
    /// Path and query as sent.
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    /// Kube verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`, `proxy`), or the lower-case HTTP method for non-resource paths.
    pub verb: String,
    /// The authenticated user (empty when authentication failed).
    pub user: UserInfo,
    /// The user acted as, when impersonating.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    /// `X-Forwarded-For`, `X-Real-Ip` and the connection's address, as kube-apiserver's
    /// `SourceIPs`.
    #[serde(rename = "sourceIPs")]
    pub source_ips: Vec<String>,
    /// The `User-Agent` header.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// The object, for resource requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    /// The outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    /// The request body (level Request, writes without credentials).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    /// When the request arrived (RFC 3339, microseconds).
    pub request_received_timestamp: String,
    /// When this stage was reached (RFC 3339, microseconds).
    pub stage_timestamp: String,
    /// fedctl's annotations ([`LATENCY_ANNOTATION`], [`VIEW_ANNOTATION`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// What kube-apiserver's `RequestInfoFactory` reads from a request (see [`request_info`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// Whether the path is in the resource space (`/api/<v>/…`, `/apis/<g>/<v>/…`).
    pub resource_request: bool,
    /// Kube verb, or the lower-case HTTP method for non-resource requests.
    pub verb: String,
    /// API group (`""`: core).
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Namespace.
    pub namespace: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Object name (for a LIST or WATCH, a `metadata.name=` field selector's value).
    pub name: String,
}

/// Reads verb and object from a request as kube-apiserver's `RequestInfoFactory.NewRequestInfo`
/// does, without knowing which resources exist: `/api/v1/namespaces/ns/pods/p/log` is `get` of
/// `pods` `p`, subresource `log`, in `ns`; a GET without a name is `list`, or `watch` with
/// `watch=true` (or under `/watch/`); a DELETE without one `deletecollection`; paths outside
/// the resource space (`/healthz`, `/api`, `/apis/apps/v1`) are non-resource requests with the
/// lower-case method as verb.
pub fn request_info(method: &str, path: &str, query: Option<&str>) -> RequestInfo {
    let mut info = RequestInfo { verb: method.to_ascii_lowercase(), ..Default::default() };
    let parts: Vec<String> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()).collect();
    if parts.len() < 3 || !(parts[0] == "api" || parts[0] == "apis") {
        return info;
    }
    let mut cur: &[String] = &parts[1..];
    if parts[0] == "apis" {
        if cur.len() < 3 {
            return info;
        }
        info.api_group = cur[0].clone();
        cur = &cur[1..];
    }
    info.resource_request = true;
    info.api_version = cur[0].clone();
    cur = &cur[1..];
    if cur[0] == "watch" || cur[0] == "proxy" {
        if cur.len() < 2 {
            return info;
        }
        info.verb = cur[0].clone();
        cur = &cur[1..];
    } else {
        info.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
    }
    if cur[0] == "namespaces" && cur.len() > 1 {
        info.namespace = cur[1].clone();
        if cur.len() > 2 && !(cur[2] == "status" || cur[2] == "finalize") {
            cur = &cur[2..];
        }
    }
    if cur.len() >= 3 && info.verb != "proxy" {
        info.subresource = cur[2].clone();
    }
    if cur.len() >= 2 {
        info.name = cur[1].clone();
    }
    info.resource = cur[0].clone();
    if info.name.is_empty() && info.verb == "get" {
        let q = Query::parse(query);
        info.verb = if q.flag("watch").unwrap_or(false) { "watch" } else { "list" }.to_string();
        if let Some(name) = q.get("fieldSelector").and_then(name_from_field_selector) {
            info.name = name;
        }
    }
    if info.name.is_empty() && info.verb == "delete" {
        info.verb = "deletecollection".into();
    }
    info
}

/// The value a field selector requires `metadata.name` to have exactly (`metadata.name=x` or
/// `==x` among its terms), when it is a valid path segment (apimachinery's
/// `RequiresExactMatch` and `IsValidPathSegmentName`).
fn name_from_field_selector(sel: &str) -> Option<String> {
    sel.split(',').find_map(|term| {
        let (k, v) = term.split_once("==").or_else(|| term.split_once('='))?;
        if k.trim() != "metadata.name" || k.ends_with('!') {
            return None;
        }
        let v = v.trim();
        (!v.is_empty() && v != "." && v != ".." && !v.contains('/') && !v.contains('%')).then(|| v.to_string())
    })
}

/// Whether a request's body may carry credentials, so that it is never logged: Secrets (with
/// bootstrap-token Secrets), TokenRequests (`serviceaccounts/token`) and TokenReviews. Bodies
/// are also checked for embedded objects of those kinds ([`carries_credentials`]).
pub fn is_sensitive(info: &RequestInfo) -> bool {
    (info.api_group.is_empty() && info.resource == "secrets")
        || (info.resource == "serviceaccounts" && info.subresource == "token")
        || (info.api_group == "authentication.k8s.io" && info.resource == "tokenreviews")
}

/// Whether `v` is, or holds anywhere (a Work's manifests, a List's items), an object of a kind
/// that carries credentials (`Secret`, `TokenRequest`, `TokenReview`).
pub fn carries_credentials(v: &Value) -> bool {
    match v {
        Value::Object(m) => matches!(m.get("kind").and_then(Value::as_str), Some("Secret" | "TokenRequest" | "TokenReview")) || m.values().any(carries_credentials),
        Value::Array(a) => a.iter().any(carries_credentials),
        _ => false,
    }
}

/// Source addresses of a request as kube-apiserver's `utilnet.SourceIPs` orders them: the valid
/// `X-Forwarded-For` entries, `X-Real-Ip` unless already among them, then the connection's
/// address unless it is the last one already.
pub fn source_ips(headers: &http::HeaderMap, remote: Option<IpAddr>) -> Vec<String> {
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Some(fwd) = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        ips.extend(fwd.split(',').filter_map(|p| p.trim().parse::<IpAddr>().ok()));
    }
    if let Some(ip) = headers.get("x-real-ip").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<IpAddr>().ok()) {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    if let Some(ip) = remote {
        if ips.last() != Some(&ip) {
            ips.push(ip);
        }
    }
    ips.iter().map(IpAddr::to_string).collect()
}

/// The message kube-apiserver logs for a failed authentication, naming the credentials the
/// request carried.
fn failed_authentication_message(headers: &http::HeaderMap, has_cert: bool) -> String {
    let mut methods = Vec::new();
    if let Some(auth) = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let mut words = auth.trim().split(' ');
        let scheme = words.next().unwrap_or("").to_ascii_lowercase();
        let has_more = words.next().is_some();
        if scheme == "basic" && has_more {
            methods.push("basic");
        }
        if scheme == "bearer" && has_more {
            methods.push("bearer");
        }
    }
    if has_cert {
        methods.push("x509");
    }
    if methods.is_empty() {
        "Authentication failed, no credentials provided".into()
    } else {
        format!("Authentication failed, attempted: {}", methods.join(", "))
    }
}

/// `2026-01-02T03:04:05.123456Z` (metav1.MicroTime).
fn micro_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The audit ID of a request: its `Audit-ID` header when the client sent a usable one (as
/// kube-apiserver keeps the caller's), else a new UUID.
fn audit_id(headers: &http::HeaderMap) -> String {
    headers
        .get(AUDIT_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

/// A message to the writer thread.
enum Msg {
    Event(Box<Event>, Option<BodyWork>),
    Flush(SyncSender<()>),
}

/// A request body to look into off the request path: for the object's name (creates) and, at
/// level Request, for `requestObject`.
struct BodyWork {
    bytes: Vec<u8>,
    content_type: String,
    /// The request succeeded (bodies other than JSON are only decoded then: the API layer has
    /// accepted them, YAML bombs included).
    succeeded: bool,
    /// Fill `objectRef.name`/`namespace` from the object's metadata when the path named none.
    fill_name: bool,
    /// Log the body as `requestObject` unless it carries credentials.
    want_object: bool,
}

impl BodyWork {
    fn decode(&self) -> Option<Value> {
        let ct = self.content_type.to_ascii_lowercase();
        if ct.contains("protobuf") {
            return self.succeeded.then(|| crate::api::protobuf::decode_k8s_protobuf(&self.bytes).ok()).flatten();
        }
        if ct.contains("yaml") {
            return self.succeeded.then(|| serde_yaml::from_slice::<Value>(&self.bytes).ok()).flatten();
        }
        serde_json::from_slice(&self.bytes).ok()
    }

    /// Completes `ev` from the body.
    fn apply(self, ev: &mut Event) {
        let Some(v) = self.decode() else { return };
        if self.fill_name {
            if let Some(r) = ev.object_ref.as_mut() {
                if r.name.is_empty() {
                    r.name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
                }
                if r.namespace.is_empty() {
                    r.namespace = v.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("").to_string();
                }
            }
        }
        if self.want_object {
            if carries_credentials(&v) {
                ev.level = Level::Metadata;
            } else {
                ev.request_object = Some(v);
            }
        }
    }
}

/// The audit log: the level, the queue to the writer thread. Cheap to share (`Arc`).
pub struct Auditor {
    level: Level,
    tx: Option<SyncSender<Msg>>,
    max_body: usize,
}

impl Auditor {
    /// An auditor writing nothing (still answering `Audit-Id`).
    pub fn disabled() -> Arc<Auditor> {
        Arc::new(Auditor { level: Level::None, tx: None, max_body: 0 })
    }

    /// Opens the log of `config` (creating the file, mode 0600, and its directory) and starts
    /// its writer thread; [`Auditor::disabled`] without a path or at level None.
    /// `max_body` bounds the request bytes kept to find an object's name or log it (the
    /// server's body limit). Errors: [`AuditError::Open`], [`AuditError::Thread`].
    pub fn start(config: &AuditConfig, max_body: usize) -> Result<Arc<Auditor>, AuditError> {
        let Some(path) = config.path.clone() else { return Ok(Auditor::disabled()) };
        if config.level == Level::None {
            return Ok(Auditor::disabled());
        }
        let mut sink = if path.as_os_str() == "-" {
            Sink::Stdout
        } else {
            let max = if config.max_size_mb == 0 { DEFAULT_MAX_SIZE_MB } else { config.max_size_mb };
            Sink::File(RotatingFile::open(path, max.saturating_mul(1024 * 1024), config.max_backups)?)
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(config.buffer_size.max(1));
        std::thread::Builder::new().name("audit-log".into()).spawn(move || run_writer(rx, &mut sink)).map_err(AuditError::Thread)?;
        Ok(Arc::new(Auditor { level: config.level, tx: Some(tx), max_body }))
    }

    /// Whether events are written.
    pub fn enabled(&self) -> bool {
        self.tx.is_some() && self.level != Level::None
    }

    /// Queues `ev` without waiting; a full queue drops it (counted).
    fn send(&self, ev: Event, body: Option<BodyWork>) {
        let Some(tx) = &self.tx else { return };
        let m = crate::telemetry::metrics::server();
        m.audit_events.inc();
        match tx.try_send(Msg::Event(Box::new(ev), body)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                m.audit_errors.get_or_create(&crate::telemetry::metrics::PluginLabel { plugin: "buffered".into() }).inc();
            }
            Err(TrySendError::Disconnected(_)) => {
                m.audit_errors.get_or_create(&crate::telemetry::metrics::PluginLabel { plugin: "log".into() }).inc();
            }
        }
    }

    /// Waits (at most `timeout`) until every event queued so far is written and flushed.
    pub fn flush(&self, timeout: Duration) {
        let Some(tx) = &self.tx else { return };
        let (ack, done) = std::sync::mpsc::sync_channel(1);
        let deadline = Instant::now() + timeout;
        let mut msg = Msg::Flush(ack);
        loop {
            match tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return,
            }
        }
        let _ = done.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

/// Where the writer writes.
enum Sink {
    Stdout,
    File(RotatingFile),
}

impl Sink {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Stdout => std::io::stdout().lock().write_all(line),
            Sink::File(f) => f.write_line(line),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Stdout => std::io::stdout().lock().flush(),
            Sink::File(f) => f.flush(),
        }
    }
}

/// The writer thread: serializes events (finishing them from their bodies) one JSON line
/// each, flushing whenever the queue is empty. Ends when every sender is gone.
fn run_writer(rx: Receiver<Msg>, sink: &mut Sink) {
    let mut failing = false;
    let mut handle = |msg: Msg, sink: &mut Sink| match msg {
        Msg::Event(mut ev, body) => {
            if let Some(b) = body {
                b.apply(&mut ev);
            }
            let mut line = serde_json::to_vec(&ev).unwrap_or_default();
            line.push(b'\n');
            match sink.write_line(&line) {
                Ok(()) => failing = false,
                Err(e) => {
                    crate::telemetry::metrics::server().audit_errors.get_or_create(&crate::telemetry::metrics::PluginLabel { plugin: "log".into() }).inc();
                    if !failing {
                        tracing::error!(error = %e, "writing the audit log; events are lost until it works again");
                    }
                    failing = true;
                }
            }
        }
        Msg::Flush(ack) => {
            let _ = sink.flush();
            let _ = ack.try_send(());
        }
    };
    while let Ok(msg) = rx.recv() {
        handle(msg, sink);
        while let Ok(msg) = rx.try_recv() {
            handle(msg, sink);
        }
        let _ = sink.flush();
    }
}

/// A log file rotated by size as lumberjack (kube-apiserver's log backend) rotates it: before a
/// write that would take it past `max` bytes the file is renamed to
/// `<name>-<UTC time as 2006-01-02T15-04-05.000><.ext>` in the same directory (`audit.log` →
/// `audit-2026-12-02T13-05-01.123.log`) and a new one is started; only the `backups` newest
/// rotated files are kept (0: all).
pub struct RotatingFile {
    path: PathBuf,
    file: Option<std::io::BufWriter<std::fs::File>>,
    size: u64,
    max: u64,
    backups: usize,
    last_rotation: Option<chrono::DateTime<chrono::Utc>>,
}

impl RotatingFile {
    /// Opens (appending) or creates `path`. Errors: [`AuditError::Open`].
    pub fn open(path: PathBuf, max: u64, backups: usize) -> Result<Self, AuditError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| AuditError::Open { path: path.clone(), source })?;
        }
        let file = open_append(&path).map_err(|source| AuditError::Open { path: path.clone(), source })?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(RotatingFile { path, file: Some(std::io::BufWriter::new(file)), size, max: max.max(1), backups, last_rotation: None })
    }

    /// Appends `line`, rotating first when it would take the file past its size.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max {
            self.rotate()?;
        }
        if self.file.is_none() {
            // a rotation that failed half-way: go on in the file as it is
            let f = open_append(&self.path)?;
            self.size = f.metadata().map(|m| m.len()).unwrap_or(0);
            self.file = Some(std::io::BufWriter::new(f));
        }
        let f = self.file.as_mut().expect("opened");
        f.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> std::io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        // names sort as the rotations happened: two within a millisecond (or a clock step
        // back) take the millisecond after the last one's
        let mut t = chrono::Utc::now();
        if let Some(last) = self.last_rotation.filter(|l| *l >= t) {
            t = last + chrono::Duration::milliseconds(1);
        }
        let mut backup = backup_name(&self.path, t);
        while backup.exists() {
            t += chrono::Duration::milliseconds(1);
            backup = backup_name(&self.path, t);
        }
        self.last_rotation = Some(t);
        std::fs::rename(&self.path, &backup)?;
        self.file = Some(std::io::BufWriter::new(open_append(&self.path)?));
        self.size = 0;
        self.prune();
        Ok(())
    }

    /// Removes the oldest rotated files beyond `backups`.
    fn prune(&self) {
        if self.backups == 0 {
            return;
        }
        let mut rotated = rotated_files(&self.path);
        rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
        for (_, p) in rotated.into_iter().skip(self.backups) {
            if let Err(e) = std::fs::remove_file(&p) {
                tracing::warn!(file = %p.display(), error = %e, "removing an old audit log");
            }
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

const BACKUP_TIME_FORMAT: &str = "%Y-%m-%dT%H-%M-%S%.3f";

/// `dir/<stem>-<time><.ext>` (lumberjack's `backupName`, UTC).
fn backup_name(path: &Path, t: chrono::DateTime<chrono::Utc>) -> PathBuf {
    let (stem, ext) = stem_ext(path);
    path.with_file_name(format!("{stem}-{}{ext}", t.format(BACKUP_TIME_FORMAT)))
}

fn stem_ext(path: &Path) -> (String, String) {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match name.rfind('.') {
        Some(i) if i > 0 => (name[..i].to_string(), name[i..].to_string()),
        _ => (name, String::new()),
    }
}

/// The rotated files of the log at `path`, with their rotation times.
pub fn rotated_files(path: &Path) -> Vec<(chrono::NaiveDateTime, PathBuf)> {
    let (stem, ext) = stem_ext(path);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let prefix = format!("{stem}-");
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let mid = name.strip_prefix(&prefix)?.strip_suffix(ext.as_str())?;
            let t = chrono::NaiveDateTime::parse_from_str(mid, BACKUP_TIME_FORMAT).ok()?;
            Some((t, e.path()))
        })
        .collect()
}

/// What is known of a request while it runs; its final event is written when the last
/// reference goes (the response body sent or dropped, the request and any upgraded session
/// over).
struct Pending {
    auditor: Arc<Auditor>,
    started: Instant,
    base: Event,
    long_running: bool,
    sensitive: bool,
    fill_name: bool,
    want_object: bool,
    content_type: String,
    failed_auth_message: String,
    body: Option<Arc<Mutex<Capture>>>,
    state: Mutex<PendingState>,
}

#[derive(Default)]
struct PendingState {
    user: Option<UserInfo>,
    impersonated: Option<UserInfo>,
    status: Option<ResponseStatus>,
    /// The final event was already written (failed authentication).
    done: bool,
}

/// Request bytes copied as they are read, up to a bound.
#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
    overflow: bool,
}

impl Pending {
    fn event(&self, stage: Stage, state: &PendingState) -> Event {
        let now = chrono::Utc::now();
        let mut ev = self.base.clone();
        ev.stage = stage;
        ev.stage_timestamp = micro_time(now);
        ev.user = state.user.clone().unwrap_or_default();
        ev.impersonated_user = state.impersonated.clone();
        ev.response_status =
            Some(state.status.clone().unwrap_or_else(|| ResponseStatus { status: Some("Success".into()), message: Some("Connection closed early".into()), code: 200, ..Default::default() }));
        if stage == Stage::ResponseComplete {
            ev.annotations.insert(LATENCY_ANNOTATION.into(), format!("{:.3}", self.started.elapsed().as_secs_f64() * 1000.0));
        }
        ev
    }

    /// Records the response head: code, failure details from a Status body, and writes the
    /// `ResponseStarted` event of a long-running request or a failed authentication.
    async fn response(&self, resp: axum::response::Response) -> axum::response::Response {
        let code = resp.status().as_u16();
        let mut status = ResponseStatus { code, ..Default::default() };
        let mut resp = resp;
        if code >= 400 {
            let small = hyper::body::Body::size_hint(resp.body()).exact().is_some_and(|n| n <= MAX_STATUS_BODY);
            let json = resp.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("json"));
            if small && json {
                let (parts, body) = resp.into_parts();
                let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
                if let Ok(Value::Object(s)) = serde_json::from_slice::<Value>(&bytes) {
                    if s.get("kind").and_then(Value::as_str) == Some("Status") {
                        let text = |k: &str| s.get(k).and_then(Value::as_str).filter(|v| !v.is_empty()).map(str::to_string);
                        status.status = text("status");
                        status.reason = text("reason");
                        status.message = text("message");
                        status.details = s.get("details").filter(|d| d.as_object().is_some_and(|m| !m.is_empty())).cloned();
                        // a refused credential-carrying body may be quoted in the message
                        if self.sensitive && matches!(status.reason.as_deref(), Some("Invalid" | "BadRequest")) {
                            status.message = None;
                            status.details = None;
                        }
                    }
                }
                resp = axum::response::Response::from_parts(parts, axum::body::Body::from(bytes));
            }
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if code == 401 && st.user.is_none() {
            status.status = Some("Failure".into());
            status.message = Some(self.failed_auth_message.clone());
            status.reason = None;
            status.details = None;
            st.status = Some(status);
            st.done = true;
            let ev = self.event(Stage::ResponseStarted, &st);
            drop(st);
            self.auditor.send(ev, None);
            return resp;
        }
        if st.user.is_none() {
            // the open paths (/healthz, /version, …) do not authenticate
            st.user = Some(UserInfo { username: super::app::ANONYMOUS_USER.into(), groups: vec![super::app::UNAUTHENTICATED_GROUP.into()] });
        }
        st.status = Some(status);
        if self.long_running {
            let ev = self.event(Stage::ResponseStarted, &st);
            drop(st);
            self.auditor.send(ev, None);
        }
        resp
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let st = std::mem::take(self.state.get_mut().unwrap_or_else(|e| e.into_inner()));
        if st.done {
            return;
        }
        let ev = self.event(Stage::ResponseComplete, &st);
        let body = self.body.as_ref().and_then(|c| {
            let c = std::mem::take(&mut *c.lock().unwrap_or_else(|e| e.into_inner()));
            (!c.overflow && !c.bytes.is_empty()).then_some(c.bytes)
        });
        let work = body.map(|bytes| BodyWork {
            bytes,
            content_type: self.content_type.clone(),
            succeeded: st.status.as_ref().is_some_and(|s| s.code < 400),
            fill_name: self.fill_name,
            want_object: self.want_object,
        });
        self.auditor.send(ev, work);
    }
}

/// A request's audit record, as a request extension: the authentication layer records the
/// user with [`record_user`].
#[derive(Clone)]
struct AuditHandle(Arc<Pending>);

/// Records the authenticated user of `req` and, when it impersonates, the user it acts as.
pub fn record_user(req: &Request, user: &Caller, impersonated: Option<&Caller>) {
    if let Some(h) = req.extensions().get::<AuditHandle>() {
        let mut st = h.0.state.lock().unwrap_or_else(|e| e.into_inner());
        st.user = Some(UserInfo::of(user));
        st.impersonated = impersonated.map(UserInfo::of);
    }
}

/// The audit layer (`axum::middleware::from_fn_with_state(auditor, audit::layer)`), outermost
/// on the server's router: gives every request its audit ID (`Audit-Id` response header) and,
/// when the log is enabled, writes its events (see the module documentation).
pub async fn layer(State(auditor): State<Arc<Auditor>>, mut req: Request, next: Next) -> axum::response::Response {
    let id = audit_id(req.headers());
    if !auditor.enabled() {
        let mut resp = next.run(req).await;
        set_audit_id(&mut resp, &id);
        return resp;
    }
    let received = chrono::Utc::now();
    let started = Instant::now();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let method = req.method().as_str().to_string();
    let mut annotations = BTreeMap::new();
    // the global view: described by the member path it carries
    let (info_path, view) = match path.strip_prefix(crate::search::PREFIX).map(|r| r.trim_start_matches('/')) {
        Some(rest) if rest.starts_with("global/") => (format!("/{}", &rest["global/".len()..]), Some("global".to_string())),
        Some(rest) if rest.starts_with("clusters/") => {
            let tail = &rest["clusters/".len()..];
            let (name, inner) = tail.split_once('/').unwrap_or((tail, ""));
            (format!("/{inner}"), Some(format!("clusters/{name}")))
        }
        _ => (path.clone(), None),
    };
    if let Some(v) = view {
        annotations.insert(VIEW_ANNOTATION.to_string(), v);
    }
    let info = request_info(&method, &info_path, query.as_deref());
    let sensitive = info.resource_request && is_sensitive(&info);
    let write = matches!(info.verb.as_str(), "create" | "update" | "patch");
    let level = if auditor.level == Level::Request && sensitive { Level::Metadata } else { auditor.level };
    let want_object = level == Level::Request && write;
    let fill_name = info.resource_request && info.verb == "create" && info.subresource.is_empty() && info.name.is_empty();
    let long_running = info.verb == "watch" || info.verb == "proxy" || matches!(info.subresource.as_str(), "attach" | "exec" | "log" | "portforward" | "proxy");
    let remote = req.extensions().get::<crate::http::RemoteAddr>().map(|a| a.0.ip());
    let has_cert = !crate::http::peer_certs(&req).is_empty();
    let headers = req.headers();
    let base = Event {
        kind: "Event",
        api_version: "audit.k8s.io/v1",
        level,
        audit_id: id.clone(),
        stage: Stage::ResponseComplete,
        request_uri: req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| path.clone()),
        verb: info.verb.clone(),
        user: UserInfo::default(),
        impersonated_user: None,
        source_ips: source_ips(headers, remote),
        user_agent: headers.get(http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("").to_string(),
        object_ref: info.resource_request.then(|| ObjectRef {
            resource: info.resource.clone(),
            namespace: info.namespace.clone(),
            name: info.name.clone(),
            api_group: info.api_group.clone(),
            api_version: info.api_version.clone(),
            subresource: info.subresource.clone(),
        }),
        response_status: None,
        request_object: None,
        request_received_timestamp: micro_time(received),
        stage_timestamp: String::new(),
        annotations,
    };
    let body = (want_object || fill_name).then(|| Arc::new(Mutex::new(Capture::default())));
    let pending = Arc::new(Pending {
        auditor: auditor.clone(),
        started,
        base,
        long_running,
        sensitive,
        fill_name,
        want_object,
        content_type: headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string(),
        failed_auth_message: failed_authentication_message(headers, has_cert),
        body: body.clone(),
        state: Mutex::new(PendingState::default()),
    });
    if let Some(cap) = body {
        let max = auditor.max_body;
        let (parts, b) = req.into_parts();
        let teed = b.map_frame(move |f| {
            if let Some(d) = f.data_ref() {
                let mut c = cap.lock().unwrap_or_else(|e| e.into_inner());
                if !c.overflow {
                    if c.bytes.len() + d.len() > max {
                        c.overflow = true;
                        c.bytes = Vec::new();
                    } else {
                        c.bytes.extend_from_slice(d);
                    }
                }
            }
            f
        });
        req = http::Request::from_parts(parts, axum::body::Body::new(teed));
    }
    req.extensions_mut().insert(AuditHandle(pending.clone()));
    req.extensions_mut().insert(crate::http::Hold(pending.clone()));
    let resp = next.run(req).await;
    let mut resp = pending.response(resp).await;
    set_audit_id(&mut resp, &id);
    resp.map(move |b| {
        axum::body::Body::new(b.map_frame(move |f| {
            let _ = &pending;
            f
        }))
    })
}

fn set_audit_id(resp: &mut axum::response::Response, id: &str) {
    if let Ok(v) = http::HeaderValue::from_str(id) {
        resp.headers_mut().insert(http::HeaderName::from_static(AUDIT_ID_HEADER), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: &str, path: &str, query: Option<&str>) -> RequestInfo {
        request_info(method, path, query)
    }

    #[test]
    fn request_info_mirrors_kube_apiserver() {
        let i = info("GET", "/api/v1/namespaces/ns/pods/p/log", None);
        assert_eq!((i.verb.as_str(), i.resource.as_str(), i.name.as_str(), i.subresource.as_str(), i.namespace.as_str()), ("get", "pods", "p", "log", "ns"));
        assert!(i.resource_request && i.api_group.is_empty() && i.api_version == "v1");
        let i = info("GET", "/apis/apps/v1/namespaces/ns/deployments", None);
        assert_eq!((i.verb.as_str(), i.api_group.as_str(), i.resource.as_str()), ("list", "apps", "deployments"));
        let i = info("GET", "/apis/apps/v1/deployments", Some("watch=true&fieldSelector=metadata.name%3Dweb"));
        assert_eq!((i.verb.as_str(), i.name.as_str(), i.namespace.as_str()), ("watch", "web", ""));
        let i = info("GET", "/api/v1/watch/namespaces/ns/pods", None);
        assert_eq!((i.verb.as_str(), i.resource.as_str(), i.namespace.as_str()), ("watch", "pods", "ns"));
        let i = info("DELETE", "/api/v1/namespaces/ns/configmaps", None);
        assert_eq!(i.verb, "deletecollection");
        let i = info("DELETE", "/api/v1/namespaces/ns", None);
        assert_eq!((i.verb.as_str(), i.resource.as_str(), i.name.as_str(), i.namespace.as_str()), ("delete", "namespaces", "ns", "ns"));
        let i = info("PUT", "/api/v1/namespaces/ns/finalize", None);
        assert_eq!((i.verb.as_str(), i.resource.as_str(), i.name.as_str(), i.subresource.as_str()), ("update", "namespaces", "ns", "finalize"));
        let i = info("POST", "/api/v1/namespaces", None);
        assert_eq!((i.verb.as_str(), i.resource.as_str(), i.name.as_str()), ("create", "namespaces", ""));
        let i = info("PATCH", "/apis/apps/v1/namespaces/ns/deployments/web/scale", None);
        assert_eq!((i.verb.as_str(), i.subresource.as_str()), ("patch", "scale"));
        // non-resource requests: the method, lower-case
        for p in ["/healthz", "/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/metrics", "/openapi/v3/apis/apps/v1"] {
            let i = info("GET", p, None);
            assert!(!i.resource_request, "{p}");
            assert_eq!(i.verb, "get", "{p}");
        }
        assert_eq!(info("POST", "/version", None).verb, "post");
        // a list with a field selector on another field names nothing
        assert_eq!(info("GET", "/api/v1/pods", Some("fieldSelector=spec.nodeName%3Dn1")).name, "");
        assert_eq!(info("GET", "/api/v1/pods", Some("fieldSelector=metadata.name%3Da%2Fb")).name, "");
    }

    #[test]
    fn credentials_are_recognised() {
        assert!(is_sensitive(&info("POST", "/api/v1/namespaces/ns/secrets", None)));
        assert!(is_sensitive(&info("POST", "/api/v1/namespaces/ns/serviceaccounts/default/token", None)));
        assert!(is_sensitive(&info("POST", "/apis/authentication.k8s.io/v1/tokenreviews", None)));
        assert!(!is_sensitive(&info("POST", "/api/v1/namespaces/ns/configmaps", None)));
        assert!(!is_sensitive(&info("POST", "/api/v1/namespaces/ns/serviceaccounts", None)));
        let work = serde_json::json!({"kind": "Work", "spec": {"workload": {"manifests": [{"kind": "ConfigMap"}, {"apiVersion": "v1", "kind": "Secret", "data": {"k": "djE="}}]}}});
        assert!(carries_credentials(&work));
        assert!(!carries_credentials(&serde_json::json!({"kind": "ConfigMap", "data": {"kind": "Secret?"}})));
    }

    #[test]
    fn source_ips_follow_kube_apiserver() {
        let remote: IpAddr = "127.0.0.1".parse().unwrap();
        let mut h = http::HeaderMap::new();
        assert_eq!(source_ips(&h, Some(remote)), vec!["127.0.0.1"]);
        h.insert("x-forwarded-for", "10.0.0.1, bogus, 10.0.0.2".parse().unwrap());
        h.insert("x-real-ip", "10.0.0.2".parse().unwrap());
        assert_eq!(source_ips(&h, Some(remote)), vec!["10.0.0.1", "10.0.0.2", "127.0.0.1"]);
        h.insert("x-forwarded-for", "10.0.0.1,127.0.0.1".parse().unwrap());
        h.remove("x-real-ip");
        assert_eq!(source_ips(&h, Some(remote)), vec!["10.0.0.1", "127.0.0.1"]);
    }

    #[test]
    fn failed_authentication_names_the_credentials() {
        let mut h = http::HeaderMap::new();
        assert_eq!(failed_authentication_message(&h, false), "Authentication failed, no credentials provided");
        h.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(failed_authentication_message(&h, true), "Authentication failed, attempted: bearer, x509");
    }

    #[test]
    fn levels_parse() {
        assert_eq!("Metadata".parse::<Level>().unwrap(), Level::Metadata);
        assert_eq!("request".parse::<Level>().unwrap(), Level::Request);
        assert_eq!("None".parse::<Level>().unwrap(), Level::None);
        assert!("RequestResponse".parse::<Level>().is_err());
    }

    fn sample(id: &str) -> Event {
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Request,
            audit_id: id.into(),
            stage: Stage::ResponseComplete,
            request_uri: "/api/v1/namespaces/ns/configmaps".into(),
            verb: "create".into(),
            user: UserInfo { username: "jane".into(), groups: vec!["system:authenticated".into()] },
            impersonated_user: None,
            source_ips: vec!["127.0.0.1".into()],
            user_agent: "test".into(),
            object_ref: Some(ObjectRef { resource: "configmaps".into(), namespace: "ns".into(), api_version: "v1".into(), ..Default::default() }),
            response_status: Some(ResponseStatus { code: 201, ..Default::default() }),
            request_object: None,
            request_received_timestamp: micro_time(chrono::Utc::now()),
            stage_timestamp: micro_time(chrono::Utc::now()),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn event_serializes_as_audit_k8s_io_v1() {
        let mut ev = sample("a");
        let body = BodyWork {
            bytes: br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"}}"#.to_vec(),
            content_type: "application/json".into(),
            succeeded: true,
            fill_name: true,
            want_object: true,
        };
        body.apply(&mut ev);
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(v["auditID"], "a");
        assert_eq!(v["requestURI"], "/api/v1/namespaces/ns/configmaps");
        assert_eq!(v["sourceIPs"][0], "127.0.0.1");
        assert_eq!(v["objectRef"], serde_json::json!({"resource": "configmaps", "namespace": "ns", "name": "cm", "apiVersion": "v1"}));
        assert_eq!(v["responseStatus"], serde_json::json!({"metadata": {}, "code": 201}));
        assert_eq!(v["requestObject"]["data"]["k"], "v");
        assert_eq!(v["level"], "Request");
        assert!(v["stageTimestamp"].as_str().unwrap().len() == "2026-01-02T03:04:05.123456Z".len());
        // a Secret inside stays out, and the event says Metadata
        let mut ev = sample("b");
        let body = BodyWork {
            bytes: br#"{"kind":"Work","spec":{"m":[{"kind":"Secret","data":{"p":"c2VjcmV0"}}]}}"#.to_vec(),
            content_type: "application/json".into(),
            succeeded: true,
            fill_name: false,
            want_object: true,
        };
        body.apply(&mut ev);
        let line = serde_json::to_string(&ev).unwrap();
        assert!(!line.contains("c2VjcmV0") && !line.contains("requestObject"), "{line}");
        assert!(line.contains(r#""level":"Metadata""#), "{line}");
    }

    #[test]
    fn full_queue_drops_and_counts() {
        let (tx, _rx) = std::sync::mpsc::sync_channel(1);
        let a = Auditor { level: Level::Metadata, tx: Some(tx), max_body: 0 };
        let label = crate::telemetry::metrics::PluginLabel { plugin: "buffered".into() };
        let before = crate::telemetry::metrics::server().audit_errors.get_or_create(&label).get();
        for i in 0..3 {
            a.send(sample(&i.to_string()), None);
        }
        let after = crate::telemetry::metrics::server().audit_errors.get_or_create(&label).get();
        assert!(after - before >= 2, "{before} → {after}");
    }

    #[test]
    fn rotation_keeps_at_most_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut f = RotatingFile::open(path.clone(), 100, 2).unwrap();
        let line = [b'x'; 39].iter().copied().chain(std::iter::once(b'\n')).collect::<Vec<u8>>();
        for _ in 0..20 {
            f.write_line(&line).unwrap();
            f.flush().unwrap();
        }
        let rotated = rotated_files(&path);
        assert_eq!(rotated.len(), 2, "{rotated:?}");
        for (_, p) in &rotated {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.starts_with("audit-") && name.ends_with(".log"), "{name}");
            assert_eq!(std::fs::metadata(p).unwrap().len(), 80);
        }
        assert!(std::fs::metadata(&path).unwrap().len() <= 100);
        // 0 keeps every rotated file
        let path = dir.path().join("all");
        let mut f = RotatingFile::open(path.clone(), 100, 0).unwrap();
        for _ in 0..10 {
            f.write_line(&line).unwrap();
        }
        assert_eq!(rotated_files(&path).len(), 4);
    }
}
