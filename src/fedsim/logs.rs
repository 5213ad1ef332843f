//! fedsim's `pods/log` subresource: deterministic log lines of simulated containers, with
//! kube-apiserver's options. Uses `api` (the pod, errors) and fedsim's `auth` (RBAC).
//!
//! A container writes line `i` (from 1) at `start + i` seconds, where `start` is the pod's
//! `status.startTime` (else its `creationTimestamp`): `<pod> <container> line <i>`; at most
//! the last [`KEPT_LINES`] are kept. Its previous instance (only when its `restartCount` is
//! above 0) wrote [`PREVIOUS_LINES`] lines `<pod> <container> previous line <i>`. Options
//! (mirrors kube-apiserver's `PodLogOptions`): `container` (required when the pod has several
//! and no `kubectl.kubernetes.io/default-container` annotation), `follow` (new lines as they
//! are written, until the pod is deleted or the client goes away), `previous`, `timestamps`
//! (RFC 3339 with nanoseconds and a space before each line), `sinceSeconds`, `sinceTime`,
//! `tailLines`, `limitBytes`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::StatusCode;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::Value;

use crate::api::handler::{error_response, Response};
use crate::api::request::{Query, ResourceRequest};
use crate::api::{ApiError, ApiServer, Caller};
use crate::storage::Storage;

/// Lines a container keeps (older ones are gone, as after log rotation).
pub const KEPT_LINES: i64 = 1000;
/// Lines the previous instance of a restarted container wrote.
pub const PREVIOUS_LINES: i64 = 5;
/// How often a follower checks for new lines and whether the pod is still there.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// Errors of a log request (400 with kube-apiserver's messages; the pod's own errors pass
/// through from the API layer).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The pod has several containers and none was named.
    #[error("a container name must be specified for pod {pod}, choose one of: [{choices}]")]
    ContainerRequired { pod: String, choices: String },
    /// The named container is not in the pod.
    #[error("container {container} is not valid for pod {pod}")]
    NoSuchContainer { pod: String, container: String },
    /// `previous` for a container that never restarted.
    #[error("previous terminated container \"{container}\" in pod \"{pod}\" not found")]
    NoPrevious { pod: String, container: String },
    /// A malformed option.
    #[error("{0}")]
    BadOption(String),
}

impl From<LogError> for ApiError {
    fn from(e: LogError) -> ApiError {
        ApiError::BadRequest(e.to_string())
    }
}

/// The options of one request, parsed.
struct Options {
    container: String,
    follow: bool,
    previous: bool,
    timestamps: bool,
    since: Option<DateTime<Utc>>,
    tail: Option<i64>,
    limit_bytes: Option<usize>,
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc))
}

/// Line `i` (from 1) of container `container` of `pod`, newline-terminated: what its
/// current instance writes (`attach` shows the same lines as they are written).
pub fn text_line(pod: &str, container: &str, i: i64) -> String {
    format!("{pod} {container} line {i}\n")
}

fn line(pod: &str, o: &Options, i: i64, start: DateTime<Utc>) -> String {
    let text = if o.previous { format!("{pod} {} previous line {i}", o.container) } else { text_line(pod, &o.container, i).trim_end().to_string() };
    if o.timestamps {
        let at = start + chrono::Duration::seconds(i);
        format!("{} {text}\n", at.format("%Y-%m-%dT%H:%M:%S%.9fZ"))
    } else {
        format!("{text}\n")
    }
}

/// Lines of `o` already written at `now`, as `(first, last)` indexes (empty when first > last).
fn written(o: &Options, start: DateTime<Utc>, now: DateTime<Utc>) -> (i64, i64) {
    let last = if o.previous { PREVIOUS_LINES } else { (now - start).num_seconds().max(0) };
    let mut first = if o.previous { 1 } else { (last - KEPT_LINES + 1).max(1) };
    if let Some(since) = o.since {
        // line i is at start + i s
        first = first.max((since - start).num_seconds() + if (since - start).num_milliseconds() % 1000 > 0 { 1 } else { 0 });
    }
    if let Some(t) = o.tail {
        first = first.max(last - t + 1);
    }
    (first.max(1), last)
}

fn options(pod: &Value, q: &Query) -> Result<Options, ApiError> {
    let name = crate::api::object::meta_str(pod, "name").unwrap_or("").to_string();
    let containers: Vec<String> = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array).cloned().unwrap_or_default())
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    let default = pod.pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container").and_then(Value::as_str);
    let container = match (q.non_empty("container"), default) {
        (Some(c), _) => c.to_string(),
        (None, Some(d)) => d.to_string(),
        (None, None) if containers.len() == 1 => containers[0].clone(),
        (None, None) => return Err(LogError::ContainerRequired { pod: name, choices: containers.join(" ") }.into()),
    };
    if !containers.contains(&container) {
        return Err(LogError::NoSuchContainer { pod: name, container }.into());
    }
    let previous = q.flag("previous")?;
    if previous {
        let restarts = pod
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|s| s.get("name").and_then(Value::as_str) == Some(container.as_str())))
            .and_then(|s| s.get("restartCount").and_then(Value::as_i64))
            .unwrap_or(0);
        if restarts == 0 {
            return Err(LogError::NoPrevious { pod: name, container }.into());
        }
    }
    let since = match (q.int("sinceSeconds")?, q.non_empty("sinceTime")) {
        (Some(s), _) if s <= 0 => return Err(LogError::BadOption("sinceSeconds: Invalid value: must be greater than 0".into()).into()),
        (Some(s), _) => Some(Utc::now() - chrono::Duration::seconds(s)),
        (None, Some(t)) => Some(parse_time(t).ok_or_else(|| LogError::BadOption(format!("sinceTime: Invalid value: \"{t}\": not RFC 3339")))?),
        (None, None) => None,
    };
    let tail = q.int("tailLines")?;
    if tail.is_some_and(|t| t < 0) {
        return Err(LogError::BadOption("tailLines: Invalid value: must be greater than or equal to 0".into()).into());
    }
    let limit_bytes = q.int("limitBytes")?.map(|b| b.max(1) as usize);
    Ok(Options { container, follow: q.flag("follow")? && !previous, previous, timestamps: q.flag("timestamps")?, since, tail, limit_bytes })
}

fn start_of(pod: &Value) -> DateTime<Utc> {
    pod.pointer("/status/startTime").and_then(Value::as_str).or_else(|| crate::api::object::meta_str(pod, "creationTimestamp")).and_then(parse_time).unwrap_or_else(Utc::now)
}

/// `GET /api/v1/namespaces/<ns>/pods/<name>/log`: authorizes `get pods/log` for `caller`
/// by fedsim's RBAC, then answers `text/plain` lines (streamed with `follow`). Errors: the
/// pod's 404, 403, or 400 ([`LogError`]).
pub async fn serve(api: Arc<ApiServer>, store: &dyn Storage, caller: &Caller, namespace: &str, name: &str, q: &Query) -> Response {
    let attrs = super::auth::Attributes { verb: "get".into(), group: "".into(), resource: "pods/log".into(), namespace: Some(namespace.into()), name: Some(name.into()) };
    if let Err(e) = super::auth::authorize(store, caller, &attrs).await {
        return error_response(&e);
    }
    match answer(api, namespace, name, q).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

async fn answer(api: Arc<ApiServer>, namespace: &str, name: &str, q: &Query) -> Result<Response, ApiError> {
    let info = api.registry.lookup("", "v1", "pods").ok_or(ApiError::NoSuchResource)?;
    let rr = ResourceRequest { info, namespace: Some(namespace.to_string()), name: Some(name.to_string()), subresource: None, watch_path: false };
    let pod = api.get(&rr).await?;
    let o = options(&pod, q)?;
    let start = start_of(&pod);
    let uid = crate::api::object::meta_str(&pod, "uid").unwrap_or("").to_string();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(16);
    let pod_name = name.to_string();
    tokio::spawn(async move {
        let mut budget = o.limit_bytes.unwrap_or(usize::MAX);
        let (first, mut last) = written(&o, start, Utc::now());
        let mut next = first;
        loop {
            let mut chunk = String::new();
            while next <= last {
                chunk.push_str(&line(&pod_name, &o, next, start));
                next += 1;
            }
            if !chunk.is_empty() {
                let mut b = chunk.into_bytes();
                if b.len() >= budget {
                    b.truncate(budget);
                    let _ = tx.send(Ok(Frame::data(Bytes::from(b)))).await;
                    return;
                }
                budget -= b.len();
                if tx.send(Ok(Frame::data(Bytes::from(b)))).await.is_err() {
                    return;
                }
            }
            if !o.follow {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
                _ = tx.closed() => return,
            }
            // the container's log ends with its pod
            match api.get(&rr).await {
                Ok(p) if crate::api::object::meta_str(&p, "uid") == Some(uid.as_str()) && p.pointer("/metadata/deletionTimestamp").is_none() => {}
                _ => return,
            }
            last = written(&o, start, Utc::now()).1;
        }
    });
    Ok(http::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/plain")
        .body(BodyExt::boxed(StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx))))
        .expect("valid response"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(tail: Option<i64>, since: Option<DateTime<Utc>>, previous: bool) -> Options {
        Options { container: "c".into(), follow: false, previous, timestamps: false, since, tail, limit_bytes: None }
    }

    #[test]
    fn written_lines_follow_tail_and_since() {
        let start = parse_time("2026-01-01T00:00:00Z").unwrap();
        let now = start + chrono::Duration::seconds(30);
        assert_eq!(written(&opts(None, None, false), start, now), (1, 30));
        assert_eq!(written(&opts(Some(5), None, false), start, now), (26, 30));
        assert_eq!(written(&opts(Some(0), None, false), start, now), (31, 30));
        assert_eq!(written(&opts(None, Some(start + chrono::Duration::seconds(20)), false), start, now), (20, 30));
        assert_eq!(written(&opts(None, None, true), start, now), (1, PREVIOUS_LINES));
        let late = start + chrono::Duration::seconds(5000);
        assert_eq!(written(&opts(None, None, false), start, late), (5000 - KEPT_LINES + 1, 5000));
    }

    #[test]
    fn lines_carry_timestamps_when_asked() {
        let start = parse_time("2026-01-01T00:00:00Z").unwrap();
        let mut o = opts(None, None, false);
        assert_eq!(line("p", &o, 3, start), "p c line 3\n");
        o.timestamps = true;
        assert_eq!(line("p", &o, 3, start), "2026-01-01T00:00:03.000000000Z p c line 3\n");
    }
}
