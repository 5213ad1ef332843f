//! The Router's member path: the caller's identity on proxied requests (impersonation
//! headers) and the fan-out of LIST and DELETE-collection of a kind over every member.
//! Uses `api` (queries, tables, errors), `cache` (members and their clients) and `telemetry`.

use std::time::Duration;

use base64::Engine;
use http::StatusCode;
use serde_json::{json, Value};

use crate::api::handler::{json_response, Response};
use crate::api::registry::ResourceInfo;
use crate::api::request::Query;
use crate::api::{table, ApiError, Caller};
use crate::cache::GlobalCache;

/// How long one member may take to answer its part of a fan-out request (less when the
/// request's own `timeout` parameter is shorter); a member that does not answer in time is
/// left out with a warning, so a paused or cut-off member cannot hold the whole answer.
pub const FAN_OUT_MEMBER_TIMEOUT: Duration = Duration::from_secs(5);

/// Groups not forwarded as `Impersonate-Group`: the member adds `system:authenticated`
/// itself to every impersonated user (as kube-apiserver's impersonation filter does).
const SKIPPED_GROUPS: [&str; 2] = [crate::pki::auth::AUTHENTICATED_GROUP, "system:unauthenticated"];

/// Errors of the member path (rendered as Kubernetes Status objects).
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// A malformed or foreign continue token (400).
    #[error("invalid continue token for a list across members: {0}")]
    Continue(String),
}

impl From<MemberError> for ApiError {
    fn from(e: MemberError) -> ApiError {
        ApiError::BadRequest(e.to_string())
    }
}

/// Adds the federation caller's identity to a request for a member: `Impersonate-User:
/// <user>` and one `Impersonate-Group` per group (but `system:authenticated` and
/// `system:unauthenticated`), as kube-aggregator and Karmada's cluster proxy send them. The
/// member credential may impersonate and read, nothing else, so the member's RBAC decides
/// what the caller may do there.
pub fn impersonate(mut rb: reqwest::RequestBuilder, caller: &Caller) -> reqwest::RequestBuilder {
    rb = rb.header("Impersonate-User", caller.user.as_str());
    for g in caller.groups.iter().filter(|g| !SKIPPED_GROUPS.contains(&g.as_str())) {
        rb = rb.header("Impersonate-Group", g.as_str());
    }
    rb
}

/// A fan-out continue token: the member to go on with and that member's own continue token
/// (`""`: from its start), bound to the path it was issued for. Encoded as base64url of
/// `{"c": cluster, "t": member token, "p": path}`.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Continue {
    c: String,
    t: String,
    p: String,
}

impl Continue {
    fn encode(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).expect("serializable"))
    }

    fn decode(s: &str, path: &str) -> Result<Continue, MemberError> {
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).map_err(|e| MemberError::Continue(e.to_string()))?;
        let c: Continue = serde_json::from_slice(&raw).map_err(|e| MemberError::Continue(e.to_string()))?;
        if c.p != path {
            return Err(MemberError::Continue(format!("it was issued for {}", c.p)));
        }
        Ok(c)
    }
}

/// One member's answer that is not a list: its status and body (passed through when no
/// member answered), or a transport failure / timeout (`status` 0).
struct Failure {
    cluster: String,
    status: u16,
    body: Value,
    message: String,
}

impl Failure {
    fn warning(&self) -> String {
        crate::cache::warning_header(&format!("{}: {}; its objects are missing from this answer", self.cluster, self.message))
    }
}

/// The query sent to members: the client's, with `limit` and `continue` replaced.
fn member_query(q: &Query, limit: Option<i64>, cont: &str) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    let mut keys: Vec<&String> = q.0.keys().collect();
    keys.sort();
    for k in keys {
        if k != "limit" && k != "continue" {
            s.append_pair(k, &q.0[k]);
        }
    }
    if let Some(l) = limit {
        s.append_pair("limit", &l.to_string());
    }
    if !cont.is_empty() {
        s.append_pair("continue", cont);
    }
    s.finish()
}

/// The per-member deadline of a fan-out request: [`FAN_OUT_MEMBER_TIMEOUT`], or the
/// request's `timeout` parameter (kube-apiserver's duration syntax, e.g. `30s`) when shorter.
fn member_timeout(q: &Query) -> Duration {
    let asked = q.get("timeout").and_then(|t| crate::config::duration::parse(t).ok()).filter(|d| !d.is_zero());
    asked.map_or(FAN_OUT_MEMBER_TIMEOUT, |d| d.min(FAN_OUT_MEMBER_TIMEOUT))
}

/// Sends one request to `cluster` as `caller`; `Ok` is the member's JSON body of a 2xx.
async fn send(cache: &GlobalCache, caller: &Caller, cluster: &str, method: reqwest::Method, path_query: &str, timeout: Duration) -> Result<Value, Failure> {
    let fail = |status: u16, body: Value, message: String| Failure { cluster: cluster.to_string(), status, body, message };
    let Some((http, server)) = cache.member_client(cluster) else {
        return Err(fail(0, Value::Null, "the member left".into()));
    };
    let rb = impersonate(http.request(method.clone(), format!("{server}{path_query}")), caller).header("accept", "application/json").timeout(timeout);
    let started = std::time::Instant::now();
    let r = rb.send().await;
    let code = r.as_ref().map(|r| r.status().as_u16()).unwrap_or(0);
    crate::telemetry::metrics::observe_member_request(cluster, method.as_str(), code, started.elapsed());
    let resp = match r {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Err(fail(0, Value::Null, format!("did not answer within {}s", timeout.as_secs_f64()))),
        Err(e) => return Err(fail(0, Value::Null, format!("could not be reached: {e}"))),
    };
    let status = resp.status().as_u16();
    let body = match tokio::time::timeout(timeout, resp.bytes()).await {
        Ok(Ok(b)) => serde_json::from_slice::<Value>(&b).unwrap_or(Value::Null),
        Ok(Err(e)) => return Err(fail(0, Value::Null, format!("its answer broke off: {e}"))),
        Err(_) => return Err(fail(0, Value::Null, format!("did not answer within {}s", timeout.as_secs_f64()))),
    };
    if !(200..300).contains(&status) {
        let msg = body.get("message").and_then(Value::as_str).unwrap_or("").to_string();
        return Err(fail(status, body, format!("answered {status}: {msg}")));
    }
    Ok(body)
}

/// The items of a member's list answer, each annotated with `fedctl.io/cluster`.
fn items_of(cluster: &str, mut list: Value) -> (Vec<Value>, String) {
    let cont = list.pointer("/metadata/continue").and_then(Value::as_str).unwrap_or("").to_string();
    let mut items = match list.get_mut("items").map(Value::take) {
        Some(Value::Array(a)) => a,
        _ => vec![],
    };
    for o in &mut items {
        if !o.get("metadata").is_some_and(Value::is_object) {
            o["metadata"] = json!({});
        }
        let meta = &mut o["metadata"];
        if !meta.get("annotations").is_some_and(Value::is_object) {
            meta["annotations"] = json!({});
        }
        meta["annotations"]["fedctl.io/cluster"] = json!(cluster);
    }
    (items, cont)
}

/// The answer when no member produced a list: the first member's own error (its status and
/// Status body, e.g. a 403 from its RBAC), else 503 naming every failure.
fn all_failed(failures: &[Failure]) -> Result<Response, ApiError> {
    if let Some(f) = failures.iter().find(|f| f.status != 0) {
        let code = StatusCode::from_u16(f.status).unwrap_or(StatusCode::BAD_GATEWAY);
        return Ok(json_response(code, &f.body));
    }
    Err(ApiError::Unavailable(format!("no member answered: {}", failures.iter().map(|f| format!("{}: {}", f.cluster, f.message)).collect::<Vec<_>>().join("; "))))
}

/// A list answer of `items` for `info` (a Table with the CLUSTER column when asked for).
fn list_answer(info: &ResourceInfo, items: Vec<Value>, cont: Option<String>, want_table: bool, include_object: &str, warnings: &[String]) -> Response {
    let mut meta = json!({});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    let body = if want_table {
        table::table(&crate::cache::with_cluster_column_of(info), &items, meta, include_object, true)
    } else {
        json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": meta, "items": items})
    };
    let mut resp = json_response(StatusCode::OK, &body);
    super::add_warnings(&mut resp, warnings);
    resp
}

/// What a fan-out request addresses.
pub struct FanOut<'a> {
    /// The cache (members and their clients).
    pub cache: &'a GlobalCache,
    /// The federation caller, impersonated on every member.
    pub caller: &'a Caller,
    /// The kind.
    pub info: &'a ResourceInfo,
    /// The path under a member's root (`/apis/apps/v1/namespaces/x/deployments`).
    pub sub: &'a str,
    /// The client's query.
    pub query: &'a Query,
    /// The members asked, in name order.
    pub members: Vec<String>,
    /// Only the items of these namespaces are kept (the caller's namespace grant, see
    /// [`super::access`]); `None`: every item.
    pub namespaces: Option<&'a std::collections::BTreeSet<String>>,
}

impl FanOut<'_> {
    /// Drops the items outside [`FanOut::namespaces`].
    fn keep(&self, items: &mut Vec<Value>) {
        if let Some(only) = self.namespaces {
            items.retain(|o| o.pointer("/metadata/namespace").and_then(Value::as_str).is_some_and(|ns| only.contains(ns)));
        }
    }
}

/// LIST of a kind the cache does not hold, across every member: each member is asked as the
/// caller (its RBAC decides) and the items are joined, each annotated `fedctl.io/cluster`,
/// members in name order and each member's items in its own order. With `limit` the members
/// are paged one after the other and the continue token ([`Continue`]) names the member and
/// its own continue token; a member that fails or does not answer within
/// [`member_timeout`] is left out and named in a `Warning` header. When no member answers, the
/// first member's error is passed through (503 when none answered at all). Under a namespace
/// grant only its namespaces' items are kept (a page may then hold fewer than `limit`).
pub async fn list(f: FanOut<'_>, want_table: bool, include_object: &str) -> Result<Response, ApiError> {
    let members = f.members.clone();
    let limit = f.query.int("limit")?.filter(|l| *l > 0);
    let timeout = member_timeout(f.query);
    let (start, mut member_cont) = match f.query.non_empty("continue") {
        Some(t) => {
            let c = Continue::decode(t, f.sub)?;
            (members.iter().position(|m| *m >= c.c).unwrap_or(members.len()), if members.contains(&c.c) { c.t } else { String::new() })
        }
        None => (0, String::new()),
    };
    let mut failures = Vec::new();
    let mut items = Vec::new();
    let mut answered = 0usize;
    let mut next = None;
    let Some(limit) = limit else {
        // unpaged: every member at once
        let (items, failures, answered) = on_every_member(&f, &members[start..], reqwest::Method::GET, timeout).await;
        if answered == 0 && !failures.is_empty() {
            return all_failed(&failures);
        }
        let warnings: Vec<String> = failures.iter().map(Failure::warning).collect();
        return Ok(list_answer(f.info, items, None, want_table, include_object, &warnings));
    };
    let mut remaining = limit;
    for (i, m) in members.iter().enumerate().skip(start) {
        let pq = format!("{}?{}", f.sub, member_query(f.query, Some(remaining), &std::mem::take(&mut member_cont)));
        match send(f.cache, f.caller, m, reqwest::Method::GET, &pq, timeout).await {
            Ok(list) => {
                answered += 1;
                let (mut got, cont) = items_of(m, list);
                remaining -= got.len() as i64;
                f.keep(&mut got);
                items.extend(got);
                if !cont.is_empty() {
                    next = Some(Continue { c: m.clone(), t: cont, p: f.sub.to_string() });
                    break;
                }
            }
            Err(e) => failures.push(e),
        }
        if remaining <= 0 {
            if let Some(n) = members.get(i + 1) {
                next = Some(Continue { c: n.clone(), t: String::new(), p: f.sub.to_string() });
            }
            break;
        }
    }
    if answered == 0 && !failures.is_empty() {
        return all_failed(&failures);
    }
    let warnings: Vec<String> = failures.iter().map(Failure::warning).collect();
    Ok(list_answer(f.info, items, next.map(|c| c.encode()), want_table, include_object, &warnings))
}

/// Sends `method` on the fan-out's path (the client's query, unpaged) to each of `members` at
/// once, as the caller: the items of every list answered (each annotated with its member),
/// the members that failed, and how many answered.
async fn on_every_member(f: &FanOut<'_>, members: &[String], method: reqwest::Method, timeout: Duration) -> (Vec<Value>, Vec<Failure>, usize) {
    let reqs = members.iter().map(|m| {
        let pq = format!("{}?{}", f.sub, member_query(f.query, None, ""));
        let method = method.clone();
        async move { (m.clone(), send(f.cache, f.caller, m, method, &pq, timeout).await) }
    });
    let (mut items, mut failures, mut answered) = (Vec::new(), Vec::new(), 0usize);
    for (m, r) in futures::future::join_all(reqs).await {
        match r {
            Ok(list) => {
                answered += 1;
                let mut got = items_of(&m, list).0;
                f.keep(&mut got);
                items.extend(got);
            }
            Err(e) => failures.push(e),
        }
    }
    (items, failures, answered)
}

/// DELETE of a collection (with the client's selectors) on every member, as the caller: the
/// answer joins the members' lists of deleted objects (each annotated `fedctl.io/cluster`);
/// members that refuse or fail are named in warnings, and when none succeeded the first
/// member's error is passed through.
pub async fn delete_collection(f: FanOut<'_>) -> Result<Response, ApiError> {
    let timeout = member_timeout(f.query);
    let members = f.members.clone();
    let (items, failures, answered) = on_every_member(&f, &members, reqwest::Method::DELETE, timeout).await;
    if answered == 0 && !failures.is_empty() {
        return all_failed(&failures);
    }
    let warnings: Vec<String> = failures.iter().map(Failure::warning).collect();
    Ok(list_answer(f.info, items, None, false, "", &warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_bind_to_their_path() {
        let c = Continue { c: "member-b".into(), t: "abc".into(), p: "/apis/apps/v1/deployments".into() };
        let s = c.encode();
        assert_eq!(Continue::decode(&s, "/apis/apps/v1/deployments").unwrap(), c);
        assert!(Continue::decode(&s, "/api/v1/configmaps").is_err());
        assert!(Continue::decode("not base64!", "/x").is_err());
    }

    #[test]
    fn member_queries_replace_limit_and_continue() {
        let q = Query::parse(Some("labelSelector=a%3Db&limit=10&continue=xyz"));
        assert_eq!(member_query(&q, Some(4), "m1"), "labelSelector=a%3Db&limit=4&continue=m1");
        assert_eq!(member_query(&q, None, ""), "labelSelector=a%3Db");
    }

    #[test]
    fn impersonation_headers_carry_user_and_groups() {
        let caller = Caller { user: "jane".into(), groups: vec!["dev".into(), "system:authenticated".into(), "ops".into()] };
        let req = impersonate(reqwest::Client::new().get("https://127.0.0.1:1/"), &caller).build().unwrap();
        assert_eq!(req.headers()["impersonate-user"], "jane");
        let groups: Vec<&str> = req.headers().get_all("impersonate-group").iter().map(|v| v.to_str().unwrap()).collect();
        assert_eq!(groups, vec!["dev", "ops"]);
    }
}
