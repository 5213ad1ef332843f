//! A real `fedctl server` process for integration tests (free loopback port, temp data dir, killed on drop) and a raw HTTPS client for it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fedctl::pki::kubeconfig::Kubeconfig;
use serde_json::Value;

/// How long `start` waits for the server to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one unary HTTP request made by [`ApiClient`].
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// One `fedctl server` child process. The data directory (CA, certificates, tokens,
/// `admin.kubeconfig`, the server's log) lives as long as the value, so [`FedServer::stop`]
/// then [`FedServer::restart`] brings the same server back on the same port. Dropping the
/// value kills the child (by its own pid) and removes the directory.
pub struct FedServer {
    etcd_endpoint: String,
    data_dir: tempfile::TempDir,
    port: u16,
    extra_args: Vec<String>,
    child: Option<Child>,
}

impl FedServer {
    /// Starts a server against `etcd_endpoint` and waits until `/readyz` answers 200.
    pub fn start(etcd_endpoint: &str) -> Self {
        Self::start_with_args(etcd_endpoint, &[])
    }

    /// Like [`FedServer::start`] with extra flags (e.g. `--bookmark-interval-seconds 1`),
    /// reused on every restart.
    pub fn start_with_args(etcd_endpoint: &str, extra: &[&str]) -> Self {
        let mut s = Self::spawn(etcd_endpoint, extra);
        if let Err(e) = s.wait_ready(START_TIMEOUT) {
            panic!("fedctl server did not become ready: {e}; log:\n{}", s.log_tail());
        }
        s
    }

    /// Starts a server and waits only until it serves HTTPS (any `/readyz` answer), not until
    /// it is ready: for a server whose etcd is down.
    pub fn start_unready(etcd_endpoint: &str, extra: &[&str]) -> Self {
        let mut s = Self::spawn(etcd_endpoint, extra);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            s.assert_alive();
            if s.readyz().is_ok() {
                return s;
            }
            if Instant::now() > deadline {
                panic!("fedctl server did not start serving; log:\n{}", s.log_tail());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts another replica of `first` against the same etcd, on its own port, with a copy
    /// of `first`'s data directory (its PKI and tokens, as an operator copies them to every
    /// replica), and waits until it is ready.
    pub fn start_replica(first: &FedServer, extra: &[&str]) -> Self {
        let data_dir = tempfile::Builder::new().prefix("fedctl-server-").tempdir().expect("create server data dir");
        copy_dir(&first.data_dir.path().join("server"), &data_dir.path().join("server"));
        let mut s = FedServer { etcd_endpoint: first.etcd_endpoint.clone(), data_dir, port: free_port(), extra_args: extra.iter().map(|s| s.to_string()).collect(), child: None };
        s.spawn_child();
        if let Err(e) = s.wait_ready(START_TIMEOUT) {
            panic!("fedctl server replica did not become ready: {e}; log:\n{}", s.log_tail());
        }
        s
    }

    /// The server's data directory (`--data-dir`).
    pub fn data_path(&self) -> PathBuf {
        self.data_dir.path().join("server")
    }

    /// The server process's pid (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// The server's whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Sends SIGTERM (by the child's pid) and waits at most `within` for it to exit; returns
    /// its exit status (`None`: still running after `within`, then killed).
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    fn spawn(etcd_endpoint: &str, extra: &[&str]) -> Self {
        let data_dir = tempfile::Builder::new().prefix("fedctl-server-").tempdir().expect("create server data dir");
        let mut s = FedServer { etcd_endpoint: etcd_endpoint.to_string(), data_dir, port: free_port(), extra_args: extra.iter().map(|s| s.to_string()).collect(), child: None };
        s.spawn_child();
        s
    }

    fn spawn_child(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).expect("open server log");
        let log_err = log.try_clone().expect("clone log handle");
        let child = Command::new(server_binary())
            .arg("server")
            .arg("--etcd-servers")
            .arg(&self.etcd_endpoint)
            .arg("--bind-address")
            .arg("127.0.0.1")
            .arg("--secure-port")
            .arg(self.port.to_string())
            .arg("--data-dir")
            .arg(self.data_dir.path().join("server"))
            .args(&self.extra_args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .expect("spawn fedctl server");
        self.child = Some(child);
    }

    /// Base URL, e.g. `https://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Path of the admin kubeconfig the server wrote.
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.path().join("server").join("admin.kubeconfig")
    }

    /// A scratch directory that lives as long as the server (e.g. for kubectl's cache).
    pub fn scratch_dir(&self) -> PathBuf {
        let p = self.data_dir.path().join("scratch");
        std::fs::create_dir_all(&p).expect("create scratch dir");
        p
    }

    fn log_path(&self) -> PathBuf {
        self.data_dir.path().join("server.log")
    }

    /// The last lines of the server's log (for failure messages).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn assert_alive(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                panic!("fedctl server exited with {status}; log:\n{}", self.log_tail());
            }
        }
    }

    /// Kills the server (SIGKILL) and waits for it to exit. The data directory stays.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped server again on the same port and data directory and waits until
    /// it is ready. No-op when it is running.
    pub fn restart(&mut self) {
        if self.child.is_some() {
            return;
        }
        self.spawn_child();
        if let Err(e) = self.wait_ready(START_TIMEOUT) {
            panic!("fedctl server did not become ready after restart: {e}; log:\n{}", self.log_tail());
        }
    }

    /// Polls `/readyz` until it answers 200 or `timeout` passes.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.assert_alive();
            let last = match self.readyz() {
                Ok((200, _)) => return Ok(()),
                Ok((code, body)) => format!("/readyz {code}: {body}"),
                Err(e) => e,
            };
            if Instant::now() > deadline {
                return Err(format!("not ready after {timeout:?} ({last})"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One `GET /readyz` over TLS (blocking, unauthenticated): `(status, body)`.
    pub fn readyz(&self) -> Result<(u16, String), String> {
        let kc = Kubeconfig::load(&self.kubeconfig()).map_err(|e| format!("kubeconfig: {e}"))?;
        let ca = kc.current_cluster().map_err(|e| e.to_string())?.ca_pem().map_err(|e| e.to_string())?.ok_or("no CA")?;
        let tls = fedctl::pki::client_tls_config(&ca, None).map_err(|e| e.to_string())?;
        blocking_get(self.port, tls, "/readyz")
    }

    /// A client authenticated with the admin client certificate of the kubeconfig.
    pub fn client(&self) -> ApiClient {
        ApiClient::new(&self.kubeconfig(), &self.url(), Auth::ClientCert)
    }

    /// A client presenting no credentials at all.
    pub fn anonymous_client(&self) -> ApiClient {
        ApiClient::new(&self.kubeconfig(), &self.url(), Auth::None)
    }

    /// A client presenting `token` as a bearer token (and no client certificate).
    pub fn token_client(&self, token: &str) -> ApiClient {
        ApiClient::new(&self.kubeconfig(), &self.url(), Auth::Bearer(token.to_string()))
    }
}

impl Drop for FedServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("dir entry");
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().expect("file type").is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy file");
        }
    }
}

/// A loopback TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0").local_addr().expect("local addr").port()
}

fn blocking_get(port: u16, tls: Arc<rustls::ClientConfig>, path: &str) -> Result<(u16, String), String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).map_err(|e| format!("connect: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let conn = rustls::ClientConnection::new(tls, name).map_err(|e| e.to_string())?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    // the server may close without close_notify; what was read so far is enough
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    let status: u16 = text.strip_prefix("HTTP/1.1 ").and_then(|r| r.get(..3)).and_then(|c| c.parse().ok()).ok_or_else(|| format!("bad response: {text:?}"))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// How an [`ApiClient`] authenticates.
#[derive(Clone)]
pub enum Auth {
    /// The kubeconfig's client certificate.
    ClientCert,
    /// A bearer token, no certificate.
    Bearer(String),
    /// Nothing.
    None,
}

/// A raw HTTPS client for one server (HTTP/1.1, server verified against the kubeconfig CA).
#[derive(Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// A complete response: status, Content-Type, body (and the body parsed as JSON, `Null` when
/// it is not JSON), and the texts of its `Warning` headers (`299 - "<text>"`).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub text: String,
    pub json: Value,
    pub warnings: Vec<String>,
}

impl Reply {
    /// Asserts that this is a kube `Status` failure with HTTP code `code` and `reason`; returns
    /// the Status.
    #[track_caller]
    pub fn assert_status(&self, code: u16, reason: &str) -> &Value {
        assert_eq!(self.status, code, "HTTP status; body: {}", self.text);
        let s = &self.json;
        assert_eq!(s["kind"], "Status", "kind; body: {}", self.text);
        assert_eq!(s["apiVersion"], "v1", "apiVersion; body: {}", self.text);
        assert_eq!(s["status"], "Failure", "status; body: {}", self.text);
        assert_eq!(s["code"], code, "Status.code; body: {}", self.text);
        assert_eq!(s["reason"], reason, "Status.reason; body: {}", self.text);
        assert!(self.content_type.starts_with("application/json"), "content type {:?}", self.content_type);
        s
    }

    /// Asserts a 2xx answer and returns the JSON body.
    #[track_caller]
    pub fn ok(&self) -> &Value {
        assert!((200..300).contains(&self.status), "expected success, got {}: {}", self.status, self.text);
        &self.json
    }
}

impl ApiClient {
    /// A client for `base_url` trusting the kubeconfig's CA, authenticating as `auth`.
    pub fn new(kubeconfig: &Path, base_url: &str, auth: Auth) -> Self {
        let kc = Kubeconfig::load(kubeconfig).expect("load kubeconfig");
        let ca = kc.current_cluster().expect("cluster").ca_pem().expect("ca").expect("kubeconfig has a CA");
        let user = kc.current_user().expect("user");
        let cert = user.client_cert_pem().expect("cert");
        let key = user.client_key_pem().expect("key");
        let client_cert = match (&auth, &cert, &key) {
            (Auth::ClientCert, Some(c), Some(k)) => Some((c.as_str(), k.as_str())),
            (Auth::ClientCert, _, _) => panic!("kubeconfig has no client certificate"),
            _ => None,
        };
        let tls = fedctl::pki::client_tls_config(&ca, client_cert).expect("client TLS config");
        let http = reqwest::Client::builder().use_preconfigured_tls((*tls).clone()).connect_timeout(Duration::from_secs(5)).build().expect("build HTTP client");
        let token = match auth {
            Auth::Bearer(t) => Some(t),
            _ => None,
        };
        ApiClient { http, base: base_url.to_string(), token }
    }

    /// A request to `path` with this client's credentials, for headers the helpers do not set.
    pub fn request_builder(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.builder(method, path)
    }

    fn builder(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut b = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            b = b.bearer_auth(t);
        }
        b
    }

    /// Sends one request with an optional body and Content-Type; the whole answer is read
    /// within [`REQUEST_TIMEOUT`] (panics otherwise: a hang is a failure).
    pub async fn request(&self, method: &str, path: &str, content_type: Option<&str>, body: Option<Vec<u8>>) -> Reply {
        match self.try_request(method, path, content_type, body).await {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like [`ApiClient::request`], but a transport failure (connection refused or cut, no
    /// complete answer within [`REQUEST_TIMEOUT`]) is an `Err` naming it instead of a panic:
    /// for fault tests, where such an answer means "outcome unknown".
    pub async fn try_request(&self, method: &str, path: &str, content_type: Option<&str>, body: Option<Vec<u8>>) -> Result<Reply, String> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut b = self.builder(method.clone(), path).timeout(REQUEST_TIMEOUT);
        if let Some(ct) = content_type {
            b = b.header("content-type", ct);
        }
        if let Some(body) = body {
            b = b.body(body);
        }
        let resp = match b.send().await {
            Ok(r) => r,
            Err(e) => return Err(format!("{method} {path}: {e}")),
        };
        let status = resp.status().as_u16();
        let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let warnings = resp
            .headers()
            .get_all("warning")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| {
                let quoted = v.strip_prefix("299 - ").unwrap_or(v);
                serde_json::from_str::<String>(quoted).unwrap_or_else(|_| quoted.to_string())
            })
            .collect();
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) => return Err(format!("{method} {path}: reading body: {e}")),
        };
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Reply { status, content_type, text, json, warnings })
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.request("GET", path, None, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.request("POST", path, Some("application/json"), Some(serde_json::to_vec(body).unwrap())).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.request("PUT", path, Some("application/json"), Some(serde_json::to_vec(body).unwrap())).await
    }

    /// `PATCH path` with a JSON merge patch.
    pub async fn merge_patch(&self, path: &str, body: &Value) -> Reply {
        self.request("PATCH", path, Some("application/merge-patch+json"), Some(serde_json::to_vec(body).unwrap())).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Reply {
        self.request("DELETE", path, None, None).await
    }

    /// Opens a watch (`path` carries the query, including `watch=1`). Panics unless the
    /// server answers 200 within [`REQUEST_TIMEOUT`].
    pub async fn watch(&self, path: &str) -> Watch {
        match self.try_watch(path).await {
            Ok(w) => w,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like [`ApiClient::watch`], but a transport failure or a non-200 answer is an `Err`
    /// (naming the HTTP status and body when there was one) instead of a panic.
    pub async fn try_watch(&self, path: &str) -> Result<Watch, String> {
        let resp = match tokio::time::timeout(REQUEST_TIMEOUT, self.builder(reqwest::Method::GET, path).send()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(format!("watch {path}: {e}")),
            Err(_) => return Err(format!("watch {path}: no response headers within {REQUEST_TIMEOUT:?}")),
        };
        let status = resp.status().as_u16();
        if status != 200 {
            let text = resp.text().await.unwrap_or_default();
            return Err(format!("watch {path}: HTTP {status}: {text}"));
        }
        Ok(Watch { resp, buf: Vec::new(), ended: false })
    }
}

/// An open watch stream: newline-delimited JSON events.
pub struct Watch {
    resp: reqwest::Response,
    buf: Vec<u8>,
    ended: bool,
}

/// What [`Watch::next`] saw.
#[derive(Debug)]
pub enum Next {
    /// One event `{type, object}`.
    Event(Value),
    /// The server ended the stream (cleanly or not).
    End,
    /// Nothing arrived in time; the stream is still open.
    Timeout,
}

impl Watch {
    /// The next event, the end of the stream, or `Timeout` after `wait`.
    pub async fn next(&mut self, wait: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let line = &line[..line.len() - 1];
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let v: Value = serde_json::from_slice(line).unwrap_or_else(|e| panic!("watch line is not JSON ({e}): {}", String::from_utf8_lossy(line)));
                return Next::Event(v);
            }
            if self.ended {
                assert!(self.buf.iter().all(u8::is_ascii_whitespace), "watch ended with a partial line: {}", String::from_utf8_lossy(&self.buf));
                return Next::End;
            }
            match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Err(_) => return Next::Timeout,
                Ok(Ok(Some(chunk))) => self.buf.extend_from_slice(&chunk),
                Ok(Ok(None)) | Ok(Err(_)) => self.ended = true,
            }
        }
    }

    /// The next event within `wait`; panics on end of stream or timeout.
    #[track_caller]
    pub fn expect_event(&mut self, wait: Duration) -> impl std::future::Future<Output = Value> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            match self.next(wait).await {
                Next::Event(v) => v,
                other => panic!("{caller}: expected a watch event within {wait:?}, got {other:?}"),
            }
        }
    }

    /// Collects events until the stream ends; panics if it is still open after `wait`.
    pub async fn collect_until_end(&mut self, wait: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Next::Event(v) => out.push(v),
                Next::End => return out,
                Next::Timeout => panic!("watch still open after {wait:?}; events so far: {out:?}"),
            }
        }
    }

    /// Events that arrive within `quiet` (the stream must stay open).
    pub async fn drain_for(&mut self, quiet: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + quiet;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Next::Event(v) => out.push(v),
                Next::Timeout => return out,
                Next::End => panic!("watch ended unexpectedly; events: {out:?}"),
            }
        }
    }
}

/// `(type, metadata.name)` of a watch event, for compact assertions.
pub fn event_summary(ev: &Value) -> (String, String) {
    (ev["type"].as_str().unwrap_or("").to_string(), ev["object"]["metadata"]["name"].as_str().unwrap_or("").to_string())
}

/// One etcd key as a dump holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpedKey {
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub value: Vec<u8>,
}

/// Every key in etcd (the whole keyspace, read with the `etcd-client` crate) with its
/// revisions and value, except the controllers' leader election state (the election key and
/// the Lease `kube-system/fedctl-controllers`), which the leader writes on its own.
pub async fn etcd_dump(endpoint: &str) -> BTreeMap<String, DumpedKey> {
    let mut client = etcd_client::Client::connect([endpoint], None).await.expect("connect to etcd");
    let resp = client.get(vec![0u8], Some(etcd_client::GetOptions::new().with_from_key())).await.expect("etcd range over the whole keyspace");
    resp.kvs()
        .iter()
        .filter(|kv| {
            let k = String::from_utf8_lossy(kv.key());
            !k.starts_with("/fedctl/leader/") && !k.ends_with("/leases/kube-system/fedctl-controllers")
        })
        .map(|kv| {
            (String::from_utf8_lossy(kv.key()).into_owned(), DumpedKey { create_revision: kv.create_revision(), mod_revision: kv.mod_revision(), version: kv.version(), value: kv.value().to_vec() })
        })
        .collect()
}

/// Asserts two dumps are identical, naming the keys that differ.
#[track_caller]
pub fn assert_same_dump(before: &BTreeMap<String, DumpedKey>, after: &BTreeMap<String, DumpedKey>, what: &str) {
    if before == after {
        return;
    }
    let mut diff = Vec::new();
    for (k, v) in after {
        match before.get(k) {
            None => diff.push(format!("+ {k}")),
            Some(b) if b != v => diff.push(format!("~ {k} (mod_revision {} -> {})", b.mod_revision, v.mod_revision)),
            _ => {}
        }
    }
    for k in before.keys().filter(|k| !after.contains_key(*k)) {
        diff.push(format!("- {k}"));
    }
    panic!("{what}: etcd changed:\n{}", diff.join("\n"));
}

/// Compacts etcd's history up to `revision` (physical compaction, waited for).
pub async fn etcd_compact(endpoint: &str, revision: i64) {
    let mut client = etcd_client::Client::connect([endpoint], None).await.expect("connect to etcd");
    client.compact(revision, Some(etcd_client::CompactionOptions::new().with_physical())).await.expect("etcd compact");
}

/// etcd's current revision.
pub async fn etcd_revision(endpoint: &str) -> i64 {
    let mut client = etcd_client::Client::connect([endpoint], None).await.expect("connect to etcd");
    let resp = client.get("/", None).await.expect("etcd get");
    resp.header().expect("header").revision()
}

/// Every write etcd made in the revisions `(after, upto]`: `(key, revision)` in revision
/// order, read from etcd's history (a watch over the whole keyspace from `after + 1`).
/// Panics when that history is compacted or does not reach `upto` within 10 s.
pub async fn etcd_writes_between(endpoint: &str, after: i64, upto: i64) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    if upto <= after {
        return out;
    }
    let mut client = etcd_client::Client::connect([endpoint], None).await.expect("connect to etcd");
    let opts = etcd_client::WatchOptions::new().with_from_key().with_start_revision(after + 1);
    let mut stream = client.watch(vec![0u8], Some(opts)).await.expect("etcd watch");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let msg = tokio::time::timeout_at(deadline, stream.message())
            .await
            .unwrap_or_else(|_| panic!("etcd history did not reach {upto} within 10 s: {out:?}"))
            .expect("etcd watch")
            .expect("etcd watch stream ended");
        assert!(!msg.canceled(), "etcd watch canceled (compacted at {})", msg.compact_revision());
        for ev in msg.events() {
            let kv = ev.kv().expect("event carries its key");
            if kv.mod_revision() <= upto {
                out.push((String::from_utf8_lossy(kv.key()).into_owned(), kv.mod_revision()));
            }
        }
        // one response carries every event of a revision
        if msg.events().iter().any(|ev| ev.kv().is_some_and(|kv| kv.mod_revision() >= upto)) {
            return out;
        }
    }
}

/// The `fedctl` binary servers are started from: `$FEDCTL_TEST_BIN` when set (e.g. a release
/// build, to measure a test's figures with an optimized server), else the one cargo built for
/// the tests. Agents and the CLI always run the test build.
pub fn server_binary() -> PathBuf {
    match std::env::var_os("FEDCTL_TEST_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_fedctl")),
    }
}
