//! fedsim's streaming pod subresources `exec`, `attach` and `portforward`, as kubelet serves
//! them behind kube-apiserver: the request is authorized (`create` on `pods/<sub>`), the
//! pod and container checked, then the connection is upgraded to WebSocket (axum's `ws`)
//! or SPDY/3.1 ([`super::spdy`]) and the session runs against [`super::exec`]'s simulated
//! container. Uses `api` (the pod, errors) and fedsim's `auth`, `exec`, `logs` and `spdy`.
//!
//! Protocols (mirrors kubelet and kube-apiserver 1.33):
//! - exec and attach over WebSocket, subprotocols `v5.channel.k8s.io` (kubectl ≥ 1.30) and
//!   `v4.channel.k8s.io`: each binary message starts with its channel byte (0 stdin, 1 stdout,
//!   2 stderr, 3 error, 4 resize; v5 adds 255 `[255, ch]`, the client closing channel `ch`).
//!   The error channel carries the end `Status` (`Success`, or `Failure` reason
//!   `NonZeroExitCode` with an `ExitCode` cause), then the socket closes normally.
//! - exec and attach over SPDY/3.1 (`X-Stream-Protocol-Version` `v5.channel.k8s.io` or
//!   `v4.channel.k8s.io`): the client opens one stream per `streamtype` (`error`, `stdin`,
//!   `stdout`, `stderr`, `resize`); the session starts once the ones the query asks for are
//!   open (30 s, else it ends), the same `Status` goes on the error stream.
//! - portforward over SPDY/3.1 (`portforward.k8s.io`), directly or tunnelled in a WebSocket
//!   with subprotocol `SPDY/3.1+portforward.k8s.io` (kubectl ≥ 1.31): per connection an
//!   `error` and a `data` stream with `port` and `requestid` headers; every port of a
//!   simulated pod is an echo server (what is written comes back).
//!
//! attach shows the container's main process: the log lines of [`super::logs`]
//! (`<pod> <container> line <i>`, one every [`ATTACH_LINE_INTERVAL`]) and, with stdin,
//! what is typed echoed back; it runs until the client leaves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::FromRequestParts;
use axum::response::IntoResponse;
use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use http::StatusCode;
use http_body_util::BodyExt as _;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::exec::{self, Container, Fs, Outcome, PodFiles, Stdio, STDERR, STDOUT};
use super::spdy;
use crate::api::handler::{error_response, Response};
use crate::api::request::ResourceRequest;
use crate::api::{ApiError, ApiServer, Caller};
use crate::http::Request;
use crate::storage::Storage;

/// WebSocket subprotocols of exec and attach, preferred first.
pub const WS_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];
/// SPDY stream protocols of exec and attach, preferred first.
pub const SPDY_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];
/// The SPDY stream protocol of port-forward.
pub const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket subprotocol of port-forward's SPDY tunnel (kubectl ≥ 1.31).
pub const PORT_FORWARD_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
/// How long the client has to open the SPDY streams it asked for (kubelet's
/// `streamCreationTimeout` default).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How often an attached container prints its next line.
pub const ATTACH_LINE_INTERVAL: Duration = Duration::from_millis(500);

/// The channel numbers of the remote-command protocols.
pub mod channel {
    /// stdin (client → server).
    pub const STDIN: u8 = 0;
    /// stdout.
    pub const STDOUT: u8 = 1;
    /// stderr.
    pub const STDERR: u8 = 2;
    /// The error channel: the end `Status`.
    pub const ERROR: u8 = 3;
    /// Terminal resize events (JSON `{"Width":…,"Height":…}`).
    pub const RESIZE: u8 = 4;
    /// v5: `[CLOSE, ch]` closes channel `ch`.
    pub const CLOSE: u8 = 255;
}

/// Errors of a stream request before the upgrade (400 as kube-apiserver and kubelet word
/// them; the pod's 404 comes from the API layer).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Neither a WebSocket nor a SPDY upgrade request.
    #[error("Upgrade request required")]
    NoUpgrade,
    /// No subprotocol both sides speak.
    #[error("unable to upgrade: unable to negotiate protocol: client supports {client:?}, server accepts {server:?}")]
    Protocol { client: Vec<String>, server: Vec<String> },
    /// A bad option (`command`, `container`, streams, ports).
    #[error("{0}")]
    Option(String),
}

impl From<StreamError> for ApiError {
    fn from(e: StreamError) -> ApiError {
        ApiError::BadRequest(e.to_string())
    }
}

/// The frame of one message on a channel: the channel byte, then the data.
pub fn ws_frame(ch: u8, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(data.len() + 1);
    b.extend_from_slice(&[ch]);
    b.extend_from_slice(data);
    b.freeze()
}

/// What a client message on the channel protocol means.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientMessage<'a> {
    /// Data for channel `.0`.
    Data(u8, &'a [u8]),
    /// v5: the client closed channel `.0`.
    Close(u8),
    /// An empty message (ignored).
    Empty,
}

/// Parses one binary client message (`v5` enables the close signal).
pub fn parse_client_message(msg: &[u8], v5: bool) -> ClientMessage<'_> {
    match msg {
        [] => ClientMessage::Empty,
        [channel::CLOSE, ch, ..] if v5 => ClientMessage::Close(*ch),
        [ch, rest @ ..] => ClientMessage::Data(*ch, rest),
    }
}

/// The end `Status` of a command, as kubelet writes it on the error channel.
pub fn end_status(argv: &[String], outcome: &Outcome) -> Value {
    let Outcome::Exited(code) = outcome;
    if *code == 0 {
        return json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
    }
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", argv.join(" ")),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// Which subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `exec`.
    Exec,
    /// `attach`.
    Attach,
    /// `portforward`.
    PortForward,
}

impl Kind {
    /// The subresource name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Exec => "exec",
            Kind::Attach => "attach",
            Kind::PortForward => "portforward",
        }
    }
}

/// The request's options (query parameters, repeated ones kept).
#[derive(Clone, Debug, Default)]
struct Options {
    command: Vec<String>,
    container: Option<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

fn options(query: Option<&str>) -> Options {
    let mut o = Options::default();
    let truthy = |v: &str| matches!(v, "1" | "true" | "True" | "TRUE" | "t");
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*k {
            "command" => o.command.push(v.into_owned()),
            "container" if !v.is_empty() => o.container = Some(v.into_owned()),
            "stdin" | "input" => o.stdin = truthy(&v),
            "stdout" | "output" => o.stdout = truthy(&v),
            "stderr" | "error" => o.stderr = truthy(&v),
            "tty" => o.tty = truthy(&v),
            _ => {}
        }
    }
    o
}

/// The container a request addresses: `container`, else the default-container annotation,
/// else the only one (kube-apiserver's wording for the errors).
fn container_of(pod: &Value, asked: Option<&str>) -> Result<Container, StreamError> {
    let name = crate::api::object::meta_str(pod, "name").unwrap_or("").to_string();
    let containers: Vec<&Value> = pod.pointer("/spec/containers").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default();
    let names: Vec<&str> = containers.iter().filter_map(|c| c.get("name").and_then(Value::as_str)).collect();
    let default = pod.pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container").and_then(Value::as_str);
    let chosen = match (asked, default) {
        (Some(c), _) => c,
        (None, Some(d)) => d,
        (None, None) if names.len() == 1 => names[0],
        (None, None) => return Err(StreamError::Option(format!("a container name must be specified for pod {name}, choose one of: [{}]", names.join(" ")))),
    };
    let Some(c) = containers.iter().find(|c| c.get("name").and_then(Value::as_str) == Some(chosen)) else {
        return Err(StreamError::Option(format!("container {chosen} is not valid for pod {name}")));
    };
    let env =
        c.get("env").and_then(Value::as_array).map(|a| a.iter().filter_map(|e| Some((e.get("name")?.as_str()?.to_string(), e.get("value")?.as_str()?.to_string()))).collect()).unwrap_or_default();
    Ok(Container { pod: name, name: chosen.to_string(), env })
}

/// The protocol values a client offers in `name` headers (comma-separated, several headers).
fn offered(headers: &http::HeaderMap, name: &str) -> Vec<String> {
    headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

fn is_upgrade(headers: &http::HeaderMap, proto: &str) -> bool {
    let conn = headers.get_all(http::header::CONNECTION).iter().filter_map(|v| v.to_str().ok()).any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")));
    conn && headers.get(http::header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|u| u.eq_ignore_ascii_case(proto))
}

/// Everything a session needs.
#[derive(Clone)]
struct Ctx {
    kind: Kind,
    opts: Options,
    container: Container,
    fs: Arc<Mutex<Fs>>,
}

/// `GET|POST /api/v1/namespaces/<ns>/pods/<name>/{exec,attach,portforward}`: authorizes
/// `create` on `pods/<sub>` for `caller` by fedsim's RBAC, checks the pod (404), its
/// container and the options (400), and upgrades (see the module docs; 400 without an
/// upgrade, 403 when no protocol is shared).
#[allow(clippy::too_many_arguments)]
pub async fn serve(api: Arc<ApiServer>, store: &dyn Storage, files: &PodFiles, caller: &Caller, namespace: &str, name: &str, kind: Kind, req: Request) -> Response {
    let attrs = super::auth::Attributes { verb: "create".into(), group: "".into(), resource: format!("pods/{}", kind.name()), namespace: Some(namespace.into()), name: Some(name.into()) };
    if let Err(e) = super::auth::authorize(store, caller, &attrs).await {
        return error_response(&e);
    }
    match answer(api, files, namespace, name, kind, req).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

async fn answer(api: Arc<ApiServer>, files: &PodFiles, namespace: &str, name: &str, kind: Kind, req: Request) -> Result<Response, ApiError> {
    if !matches!(*req.method(), http::Method::GET | http::Method::POST) {
        return Err(ApiError::MethodNotAllowed);
    }
    let info = api.registry.lookup("", "v1", "pods").ok_or(ApiError::NoSuchResource)?;
    let rr = ResourceRequest { info, namespace: Some(namespace.to_string()), name: Some(name.to_string()), subresource: None, watch_path: false };
    let pod = api.get(&rr).await?;
    let opts = options(req.uri().query());
    if kind != Kind::PortForward {
        if pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").is_empty() {
            return Err(ApiError::BadRequest(format!("pod {name} does not have a host assigned")));
        }
        if let Some(phase @ ("Succeeded" | "Failed")) = pod.pointer("/status/phase").and_then(Value::as_str) {
            return Err(ApiError::BadRequest(format!("cannot {} into a container in a completed pod; current phase is {phase}", kind.name())));
        }
    }
    let container = match kind {
        Kind::PortForward => Container { pod: name.to_string(), name: String::new(), env: vec![] },
        _ => container_of(&pod, opts.container.as_deref())?,
    };
    if kind == Kind::Exec && opts.command.is_empty() {
        return Err(StreamError::Option("you must specify at least 1 command".into()).into());
    }
    if kind != Kind::PortForward && !(opts.stdin || opts.stdout || opts.stderr) {
        return Err(StreamError::Option("you must specify at least one of stdin, stdout, stderr".into()).into());
    }
    let uid = crate::api::object::meta_str(&pod, "uid").unwrap_or("");
    let ctx = Ctx { kind, opts, container, fs: files.of(namespace, name, uid) };
    let headers = req.headers().clone();
    if is_upgrade(&headers, "websocket") {
        let (mut parts, _) = req.into_parts();
        let ws = WebSocketUpgrade::from_request_parts(&mut parts, &()).await.map_err(|e| ApiError::BadRequest(e.body_text()))?;
        let server: Vec<&str> = if kind == Kind::PortForward { vec![PORT_FORWARD_TUNNEL] } else { WS_PROTOCOLS.to_vec() };
        let client = offered(&headers, "sec-websocket-protocol");
        let Some(chosen) = server.iter().find(|s| client.iter().any(|c| c == *s)).map(|s| s.to_string()) else {
            return Err(StreamError::Protocol { client, server: server.iter().map(|s| s.to_string()).collect() }.into());
        };
        let ws = ws.protocols([chosen.clone()]);
        let resp = ws.on_upgrade(move |socket| async move {
            if ctx.kind == Kind::PortForward {
                port_forward(spdy::Session::start(ws_byte_stream(socket))).await;
            } else {
                ws_session(socket, chosen == WS_PROTOCOLS[0], ctx).await;
            }
        });
        // the 101 has no body
        let (parts, _) = resp.into_response().into_parts();
        return Ok(http::Response::from_parts(parts, empty_body()));
    }
    if is_upgrade(&headers, "SPDY/3.1") {
        let server: Vec<&str> = if kind == Kind::PortForward { vec![PORT_FORWARD_PROTOCOL] } else { SPDY_PROTOCOLS.to_vec() };
        let client = offered(&headers, "x-stream-protocol-version");
        if client.is_empty() {
            return Err(ApiError::BadRequest("unable to upgrade: X-Stream-Protocol-Version is required".into()));
        }
        let Some(chosen) = client.iter().find(|c| server.contains(&c.as_str())).cloned() else {
            let mut resp = error_response(&ApiError::Forbidden(StreamError::Protocol { client, server: server.iter().map(|s| s.to_string()).collect() }.to_string()));
            for s in &server {
                resp.headers_mut().append("x-accepted-stream-protocol-versions", http::HeaderValue::from_static(s));
            }
            return Ok(resp);
        };
        let mut req = req;
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let io = match on_upgrade.await {
                Ok(u) => hyper_util::rt::TokioIo::new(u),
                Err(e) => {
                    tracing::debug!(error = %e, "SPDY upgrade failed");
                    return;
                }
            };
            let session = spdy::Session::start(io);
            if ctx.kind == Kind::PortForward {
                port_forward(session).await;
            } else {
                spdy_session(session, ctx).await;
            }
        });
        return Ok(http::Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, "SPDY/3.1")
            .header("x-stream-protocol-version", chosen)
            .body(empty_body())
            .expect("valid response"));
    }
    Err(StreamError::NoUpgrade.into())
}

fn empty_body() -> crate::api::handler::Body {
    http_body_util::Empty::new().map_err(|never| match never {}).boxed()
}

/// Runs the container side of exec or attach on `io` until it ends or `gone` resolves.
async fn process(ctx: &Ctx, io: Stdio, gone: impl std::future::Future<Output = ()>) -> Option<Outcome> {
    let work = async {
        match ctx.kind {
            Kind::Exec => exec::run(&ctx.container, &ctx.fs, &ctx.opts.command, io).await,
            _ => attached(&ctx.container, io).await,
        }
    };
    tokio::select! {
        o = work => Some(o),
        _ = gone => None,
    }
}

/// The attached main process: its log lines, and stdin echoed on stdout.
async fn attached(c: &Container, mut io: Stdio) -> Outcome {
    let mut tick = tokio::time::interval(ATTACH_LINE_INTERVAL);
    let mut i = 0i64;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                i += 1;
                if io.out.send((STDOUT, Bytes::from(super::logs::text_line(&c.pod, &c.name, i)))).await.is_err() {
                    return Outcome::Exited(0);
                }
            }
            b = async { match &mut io.stdin { Some(rx) => rx.recv().await, None => std::future::pending().await } } => match b {
                Some(b) => {
                    if io.out.send((STDOUT, b)).await.is_err() {
                        return Outcome::Exited(0);
                    }
                }
                None => io.stdin = None,
            },
        }
    }
}

/// exec/attach over a channel-protocol WebSocket.
async fn ws_session(socket: WebSocket, v5: bool, ctx: Ctx) {
    let (mut sink, mut source) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Bytes)>(32);
    let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(32);
    let (gone_tx, gone_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        while let Some((ch, b)) = out_rx.recv().await {
            if sink.send(Message::Binary(ws_frame(ch, &b))).await.is_err() {
                return;
            }
        }
        let _ = sink.send(Message::Close(Some(CloseFrame { code: axum::extract::ws::close_code::NORMAL, reason: "".into() }))).await;
    });
    let want_stdin = ctx.opts.stdin;
    let reader = tokio::spawn(async move {
        let mut stdin_tx = want_stdin.then_some(stdin_tx);
        while let Some(Ok(msg)) = source.next().await {
            match msg {
                Message::Binary(b) => match parse_client_message(&b, v5) {
                    ClientMessage::Data(channel::STDIN, data) => {
                        if let Some(tx) = &stdin_tx {
                            if tx.send(Bytes::copy_from_slice(data)).await.is_err() {
                                stdin_tx = None;
                            }
                        }
                    }
                    ClientMessage::Close(channel::STDIN) => stdin_tx = None,
                    _ => {}
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = gone_tx.send(());
    });
    let io = Stdio { stdin: Some(stdin_rx), out: out_tx.clone() };
    let outcome = process(&ctx, io, async {
        let _ = gone_rx.await;
    })
    .await;
    if let Some(o) = outcome {
        let status = end_status(&ctx.opts.command, &o);
        let _ = out_tx.send((channel::ERROR, Bytes::from(serde_json::to_vec(&status).expect("serializable")))).await;
    }
    drop(out_tx);
    let _ = writer.await;
    reader.abort();
}

/// exec/attach over SPDY: waits for the streams the query asks for, then runs.
async fn spdy_session(mut session: spdy::Session, ctx: Ctx) {
    let o = &ctx.opts;
    let mut want: Vec<&str> = vec!["error"];
    if o.stdin {
        want.push("stdin");
    }
    if o.stdout {
        want.push("stdout");
    }
    if o.stderr && !o.tty {
        want.push("stderr");
    }
    if o.tty {
        want.push("resize");
    }
    let mut streams: HashMap<String, spdy::Stream> = HashMap::new();
    let deadline = tokio::time::sleep(STREAM_CREATION_TIMEOUT);
    tokio::pin!(deadline);
    while !want.iter().all(|w| streams.contains_key(*w)) {
        tokio::select! {
            s = session.incoming.recv() => match s {
                Some(s) => {
                    let ty = spdy::header(&s.headers, "streamtype").unwrap_or("").to_string();
                    streams.insert(ty, s);
                }
                None => return,
            },
            _ = &mut deadline => {
                tracing::debug!("SPDY exec: the client did not open its streams in time");
                session.close().await;
                return;
            }
        }
    }
    let error = streams.remove("error").expect("waited for");
    let stdin = streams.remove("stdin").map(|s| s.rx);
    let stdout = streams.remove("stdout").map(|s| s.writer);
    let stderr = streams.remove("stderr").map(|s| s.writer);
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Bytes)>(32);
    let (so, se) = (stdout.clone(), stderr.clone());
    let forward = tokio::spawn(async move {
        while let Some((ch, b)) = out_rx.recv().await {
            let w = if ch == STDERR { se.as_ref() } else { so.as_ref() };
            if let Some(w) = w {
                if !w.write(b) {
                    return;
                }
            }
        }
    });
    let mut incoming = std::mem::replace(&mut session.incoming, mpsc::channel(1).1);
    let gone = async move {
        // further streams (a second resize, …) are refused; the end of the connection ends it
        while let Some(s) = incoming.recv().await {
            s.writer.reset(spdy::RST_REFUSED_STREAM);
        }
    };
    let outcome = process(&ctx, Stdio { stdin, out: out_tx }, gone).await;
    let _ = forward.await;
    if let Some(o) = outcome {
        let status = end_status(&ctx.opts.command, &o);
        error.writer.write(Bytes::from(serde_json::to_vec(&status).expect("serializable")));
    }
    for w in [Some(&error.writer), stdout.as_ref(), stderr.as_ref()].into_iter().flatten() {
        w.close();
    }
    session.close().await;
}

/// port-forward over a SPDY session: each `data` stream is echoed back; its `error` stream
/// closes with it. Runs until the client ends the connection.
async fn port_forward(mut session: spdy::Session) {
    let mut errors: HashMap<String, spdy::StreamWriter> = HashMap::new();
    while let Some(mut s) = session.incoming.recv().await {
        let ty = spdy::header(&s.headers, "streamtype").unwrap_or("");
        let request = spdy::header(&s.headers, "requestid").unwrap_or("").to_string();
        let port_ok = spdy::header(&s.headers, "port").and_then(|p| p.parse::<u16>().ok()).is_some_and(|p| p > 0);
        match ty {
            "error" => {
                errors.insert(request, s.writer);
            }
            "data" => {
                let error = errors.remove(&request);
                if !port_ok {
                    if let Some(e) = &error {
                        e.write(Bytes::from_static(b"invalid port header"));
                        e.close();
                    }
                    s.writer.reset(spdy::RST_PROTOCOL_ERROR);
                    continue;
                }
                tokio::spawn(async move {
                    while let Some(b) = s.rx.recv().await {
                        if !s.writer.write(b) {
                            break;
                        }
                    }
                    s.writer.close();
                    if let Some(e) = error {
                        e.close();
                    }
                });
            }
            _ => s.writer.reset(spdy::RST_PROTOCOL_ERROR),
        }
    }
    session.close().await;
}

/// A WebSocket as a byte stream (binary messages in, binary messages out; a normal close
/// at the end), for SPDY tunnelled in it.
fn ws_byte_stream(socket: WebSocket) -> tokio::io::DuplexStream {
    let (ours, theirs) = tokio::io::duplex(256 * 1024);
    let (mut rd, mut wr) = tokio::io::split(ours);
    let (mut sink, mut source) = socket.split();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Some(Ok(msg)) = source.next().await {
            match msg {
                Message::Binary(b) if wr.write_all(&b).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = wr.shutdown().await;
    });
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink.send(Message::Binary(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = sink.send(Message::Close(Some(CloseFrame { code: axum::extract::ws::close_code::NORMAL, reason: "".into() }))).await;
    });
    theirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_frames() {
        assert_eq!(&ws_frame(channel::STDOUT, b"hi\n")[..], b"\x01hi\n");
        assert_eq!(parse_client_message(b"\x00abc", true), ClientMessage::Data(0, b"abc"));
        assert_eq!(parse_client_message(&[255, 0], true), ClientMessage::Close(0));
        // v4 has no close signal: 255 is just an unknown channel
        assert_eq!(parse_client_message(&[255, 0], false), ClientMessage::Data(255, &[0]));
        assert_eq!(parse_client_message(b"", true), ClientMessage::Empty);
    }

    #[test]
    fn end_statuses_carry_the_exit_code() {
        let argv = vec!["sh".to_string(), "-c".into(), "exit 3".into()];
        assert_eq!(end_status(&argv, &Outcome::Exited(0))["status"], "Success");
        let s = end_status(&argv, &Outcome::Exited(3));
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
    }

    #[test]
    fn options_keep_every_command_word() {
        let o = options(Some("command=sh&command=-c&command=exit%203&container=c&stdin=true&stdout=1&stderr=true&tty=false"));
        assert_eq!(o.command, vec!["sh", "-c", "exit 3"]);
        assert_eq!(o.container.as_deref(), Some("c"));
        assert!(o.stdin && o.stdout && o.stderr && !o.tty);
    }
}
