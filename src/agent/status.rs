//! The cluster-status controller: registers the member's `Cluster`, renews its heartbeat
//! `Lease` and reports its status (mirrors Karmada's cluster status controller in
//! `karmada-agent`, and kubelet's node lease for the heartbeat); uses `agent`'s shared state
//! and `agent::quantity`. The member credential is synced by its own controller
//! (`agent::credential`), which waits for the registration this one confirms.
//!
//! Two loops run concurrently inside the controller's task:
//! - report: every `clusterStatusUpdateSeconds` (default: the heartbeat interval), probes the
//!   member (version, identity, discovery; the node and pod summaries come from informers,
//!   [`super::summary`]), creates or corrects the `Cluster` and patches its `/status`, including
//!   `Ready` (`MemberReady` / `MemberUnreachable`) while its own heartbeat flows — when it
//!   does not, the federation's cluster-controller (`HeartbeatMissed`) decides;
//! - heartbeat: every heartbeat interval, renews `fed-exec-<name>/cluster-heartbeat`.
//!
//! The `Cluster` is claimed only when it does not exist yet or its `spec.id` is this
//! member's (the uid of its `kube-system` namespace); a `Cluster` of the same name with
//! another id belongs to another member: the agent then refuses to do anything (no
//! heartbeat, no status, no Work) and keeps retrying, logging why.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use serde_json::{json, Value};

use crate::api::federation::{HEARTBEAT_LEASE, MEMBER_CREDENTIAL_SECRET};

use super::summary::Summaries;
use super::{api_code, cluster_resource, lease_resource, now_micro_time, now_time, Backoff, Shared};

/// The `Ready` condition's reason while the member API answers.
pub const REASON_READY: &str = "MemberReady";
/// The `Ready` condition's reason while it does not.
pub const REASON_UNREACHABLE: &str = "MemberUnreachable";

/// Errors of one reconcile round (logged, then retried).
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The member API did not answer as needed.
    #[error("member API: {0}")]
    Member(kube::Error),
    /// The member API did not answer in time.
    #[error("member API: no answer within {0:?}")]
    MemberTimeout(Duration),
    /// The member's `kube-system` namespace has no uid (cannot identify the member).
    #[error("member kube-system namespace has no uid")]
    NoIdentity,
    /// The federation API refused or failed a request.
    #[error("federation API: {0}")]
    Federation(kube::Error),
    /// A `Cluster` of this name exists with another member's id.
    #[error("Cluster {name:?} belongs to another member (spec.id {theirs:?}, this member is {ours:?}); refusing to take it over — unjoin that member or rename this one")]
    Owned {
        /// The cluster name.
        name: String,
        /// The id in the existing `Cluster`.
        theirs: String,
        /// This member's id.
        ours: String,
    },
}

/// What one probe of the member found.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberProbe {
    /// uid of the member's `kube-system` namespace: the member's identity.
    pub id: String,
    /// `/version` `gitVersion`, e.g. `v1.30.0`.
    pub kubernetes_version: String,
    /// `nodeSummary {totalNum, readyNum}`; `None` when nodes could not be listed.
    pub node_summary: Option<Value>,
    /// `resourceSummary {allocatable {cpu, memory, pods}, allocated {…}}`; `None` when nodes
    /// or pods could not be listed.
    pub resource_summary: Option<Value>,
    /// `apiEnablements [{groupVersion}]`; `None` when discovery failed.
    pub api_enablements: Option<Value>,
}

/// Runs the controller (never returns): the report and heartbeat loops, and the member's node
/// and pod informers ([`super::summary`]) the reports read their summaries from (started once
/// [`Shared::informers_after`] allows).
pub async fn run(shared: Arc<Shared>) {
    let (summaries, informers) = super::summary::informers(shared.member.watch.clone());
    let mut gate = shared.informers_after.clone();
    let informers = async move {
        if let Some(g) = gate.as_mut() {
            let _ = g.wait_for(|go| *go).await;
        }
        informers.await
    };
    tokio::join!(report_loop(shared.clone(), summaries), heartbeat_loop(shared.clone()), informers);
}

fn heartbeat(shared: &Shared) -> Duration {
    Duration::from_secs(shared.config.heartbeat_interval_seconds.max(1))
}

/// Time between status reports: `clusterStatusUpdateSeconds`, else the heartbeat interval.
fn report_period(shared: &Shared) -> Duration {
    shared.config.cluster_status_update_seconds.map_or_else(|| heartbeat(shared), |s| Duration::from_secs(s.max(1)))
}

/// `period` ±10 % at random: agents whose reports fell together (all started with the
/// federation, or their informers synced at once) drift apart instead of reporting in step
/// (as client-go's `wait.JitterUntil`).
fn jittered(period: Duration) -> Duration {
    period.mul_f64(rand::random_range(0.9..1.1))
}

/// `period` less up to 4 % at random: the heartbeats of agents started together spread out
/// instead of reaching the federation in one burst per period. The kubelet's node lease
/// controller jitters by the same 4 % (`wait.JitterUntil(sync, renewInterval, 0.04, …)`),
/// but later, as its lease lasts four renewals; here a renewal never comes later than the
/// configured interval, which the server's grace period may leave little room above.
fn lease_jittered(period: Duration) -> Duration {
    period.mul_f64(1.0 - rand::random_range(0.0..0.04))
}

async fn report_loop(shared: Arc<Shared>, summaries: Summaries) {
    let period = report_period(&shared);
    let mut backoff = Backoff::new(Duration::from_millis(500), period);
    let mut last_id: Option<String> = None;
    // the first round registers from the member's identity alone, the second follows as soon
    // as the first heartbeat went out, with Ready, discovery and the summaries; while the
    // member's informers have not synced yet, the round after their sync comes without
    // waiting out the period
    let mut identity_reported = false;
    loop {
        let round = report_once(&shared, &mut last_id, identity_reported.then_some(&summaries)).await;
        crate::telemetry::metrics::agent().reconciled("cluster-status", round.is_ok());
        let (delay, wake_on_sync) = match round {
            Ok(complete) => {
                backoff.reset();
                if std::mem::replace(&mut identity_reported, true) {
                    (jittered(period), !complete)
                } else {
                    // registered: the next round reports the member Ready, which needs the
                    // first heartbeat (a heartbeat period at most; mirrors kubelet posting
                    // NodeReady itself rather than waiting for the node controller)
                    let mut hb = shared.last_heartbeat.subscribe();
                    let _ = tokio::time::timeout(heartbeat(&shared), hb.wait_for(Option::is_some)).await;
                    (Duration::ZERO, false)
                }
            }
            Err(e) => {
                let d = backoff.next_delay();
                match &e {
                    StatusError::Owned { .. } => tracing::error!(error = %e, retry_in = ?d, "not registering"),
                    _ => tracing::warn!(error = %e, retry_in = ?d, "cluster status round failed"),
                }
                (d, false)
            }
        };
        let mut s = summaries.clone();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = s.wait_synced(), if wake_on_sync => {}
        }
    }
}

/// One round: probe the member (with discovery and `summaries` when given), claim or correct
/// the `Cluster`, patch its status. `Ok(true)` when the status carried both summaries (the
/// member's informers had synced).
async fn report_once(shared: &Shared, last_id: &mut Option<String>, summaries: Option<&Summaries>) -> Result<bool, StatusError> {
    let timeout = heartbeat(shared).clamp(Duration::from_secs(5), Duration::from_secs(30));
    let probe = probe_member(&shared.member.client, timeout, summaries).await;
    let fed = shared.fed.borrow().clone().api;
    let probe = match probe {
        Ok(p) => p,
        Err(e) => {
            // only a member we identified before may be reported unreachable
            if let Some(id) = last_id.as_deref() {
                if *shared.registered.borrow() {
                    let cluster = ensure_cluster(shared, &fed, id).await?;
                    patch_status(shared, &fed, &cluster, None, &e.to_string()).await?;
                }
            }
            return Err(e);
        }
    };
    *last_id = Some(probe.id.clone());
    let cluster = match ensure_cluster(shared, &fed, &probe.id).await {
        Ok(c) => c,
        Err(e) => {
            if matches!(e, StatusError::Owned { .. }) {
                shared.registered.send_replace(false);
            }
            return Err(e);
        }
    };
    if !shared.registered.send_replace(true) {
        tracing::info!(cluster = %shared.config.cluster_name, id = %probe.id, "registered with the federation");
    }
    let complete = probe.node_summary.is_some() && probe.resource_summary.is_some();
    patch_status(shared, &fed, &cluster, Some(&probe), "").await.map(|()| complete)
}

/// Probes the member: identity and version (required, within `timeout`: else
/// [`StatusError::MemberTimeout`]); with `summaries`, the node and resource summaries as the
/// member's informers have them (`None` until they synced) and the API groups it serves
/// (discovery, within `timeout` too; a failure leaves that part of the status as it was).
pub async fn probe_member(member: &kube::Client, timeout: Duration, summaries: Option<&Summaries>) -> Result<MemberProbe, StatusError> {
    // the requests go out side by side: a registration waits for this probe twice
    let required = async {
        let (version, ns) = tokio::try_join!(async { member.apiserver_version().await.map_err(StatusError::Member) }, async {
            Api::<Namespace>::all(member.clone()).get("kube-system").await.map_err(StatusError::Member)
        },)?;
        let id = ns.metadata.uid.filter(|u| !u.is_empty()).ok_or(StatusError::NoIdentity)?;
        Ok::<_, StatusError>((version, id))
    };
    let required = async { tokio::time::timeout(timeout, required).await.map_err(|_| StatusError::MemberTimeout(timeout))? };
    let Some(summaries) = summaries else {
        let (version, id) = required.await?;
        return Ok(MemberProbe { id, kubernetes_version: version.git_version, node_summary: None, resource_summary: None, api_enablements: None });
    };
    let discovery = async {
        match tokio::time::timeout(timeout, api_enablements(member)).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "member discovery failed");
                None
            }
            Err(_) => {
                tracing::warn!(within = ?timeout, "member discovery did not answer in time");
                None
            }
        }
    };
    let (required, api_enablements) = tokio::join!(required, discovery);
    let (version, id) = required?;
    let (node_summary, resource_summary) = summaries.current();
    Ok(MemberProbe { id, kubernetes_version: version.git_version, node_summary, resource_summary, api_enablements })
}

/// `[{groupVersion}]` for the core versions and every group's versions, sorted.
async fn api_enablements(member: &kube::Client) -> Result<Value, kube::Error> {
    let (core, groups) = tokio::try_join!(member.list_core_api_versions(), member.list_api_groups())?;
    let mut gvs: Vec<String> = core.versions;
    for g in groups.groups {
        gvs.extend(g.versions.into_iter().map(|v| v.group_version));
    }
    gvs.sort();
    gvs.dedup();
    Ok(Value::Array(gvs.into_iter().map(|gv| json!({"groupVersion": gv})).collect()))
}

/// The `Cluster` spec this agent maintains.
fn desired_spec(shared: &Shared, id: &str) -> Value {
    let mut spec = json!({
        "id": id,
        "apiEndpoint": shared.member.server,
        "syncMode": "Pull",
        "secretRef": {"namespace": shared.exec_namespace, "name": MEMBER_CREDENTIAL_SECRET},
    });
    if let Some(z) = &shared.config.zone {
        spec["zone"] = json!(z);
    }
    if let Some(r) = &shared.config.region {
        spec["region"] = json!(r);
    }
    spec
}

/// Creates the `Cluster`, or checks it is this member's and corrects the fields the agent
/// owns (spec above, labels from the config; other fields are left alone). Errors:
/// [`StatusError::Owned`] when another member's id is in it.
async fn ensure_cluster(shared: &Shared, fed: &kube::Client, id: &str) -> Result<DynamicObject, StatusError> {
    let api: Api<DynamicObject> = Api::all_with(fed.clone(), &cluster_resource());
    let name = &shared.config.cluster_name;
    let spec = desired_spec(shared, id);
    let labels = &shared.config.labels;
    let current = api.get_opt(name).await.map_err(StatusError::Federation)?;
    let Some(current) = current else {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.fedctl.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }))
        .expect("valid Cluster");
        return match api.create(&PostParams::default(), &obj).await {
            Ok(c) => {
                tracing::info!(cluster = %name, "created Cluster");
                Ok(c)
            }
            // a 409 (created meanwhile, or this member's id already held by another Cluster,
            // which the message names) is looked at again next round
            Err(e) => Err(StatusError::Federation(e)),
        };
    };
    let theirs = current.data.pointer("/spec/id").and_then(Value::as_str).unwrap_or("");
    if !theirs.is_empty() && theirs != id {
        return Err(StatusError::Owned { name: name.clone(), theirs: theirs.to_string(), ours: id.to_string() });
    }
    let spec_drift = spec.as_object().expect("object").iter().any(|(k, v)| current.data.pointer(&format!("/spec/{k}")) != Some(v));
    let cur_labels = current.metadata.labels.clone().unwrap_or_default();
    let label_drift = labels.iter().any(|(k, v)| cur_labels.get(k) != Some(v));
    if !spec_drift && !label_drift {
        return Ok(current);
    }
    let patch = json!({
        "metadata": {"resourceVersion": current.metadata.resource_version, "labels": labels},
        "spec": spec,
    });
    tracing::info!(cluster = %name, "correcting Cluster spec/labels");
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(StatusError::Federation)
}

/// `conditions` with `Ready` set (its `lastTransitionTime` kept unless the status flips),
/// other conditions kept as they are.
pub fn with_ready_condition(current: Option<&Value>, ready: bool, reason: &str, message: &str, now: &str) -> Value {
    let status = if ready { "True" } else { "False" };
    let mut out: Vec<Value> = current.and_then(Value::as_array).cloned().unwrap_or_default();
    let prev = out.iter().position(|c| c.get("type").and_then(Value::as_str) == Some("Ready"));
    let transition = prev
        .and_then(|i| {
            let c = &out[i];
            (c.get("status").and_then(Value::as_str) == Some(status)).then(|| c.get("lastTransitionTime").cloned()).flatten()
        })
        .unwrap_or_else(|| json!(now));
    let cond = json!({
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": transition,
    });
    match prev {
        Some(i) => out[i] = cond,
        None => out.push(cond),
    }
    Value::Array(out)
}

/// Patches `/status` of the `Cluster`: the probe's fields and `Ready=True`, or (no probe)
/// only `Ready=False` with reason `MemberUnreachable` and `message`.
async fn patch_status(shared: &Shared, fed: &kube::Client, cluster: &DynamicObject, probe: Option<&MemberProbe>, message: &str) -> Result<(), StatusError> {
    let api: Api<DynamicObject> = Api::all_with(fed.clone(), &cluster_resource());
    let name = &shared.config.cluster_name;
    let mut cluster = cluster.clone();
    for attempt in 0..3 {
        let now = now_time();
        let conds = cluster.data.pointer("/status/conditions");
        let mut status = match probe {
            Some(p) => {
                let mut s = json!({"kubernetesVersion": p.kubernetes_version});
                if let Some(v) = &p.node_summary {
                    s["nodeSummary"] = v.clone();
                }
                if let Some(v) = &p.resource_summary {
                    s["resourceSummary"] = v.clone();
                }
                if let Some(v) = &p.api_enablements {
                    s["apiEnablements"] = v.clone();
                }
                s
            }
            None => json!({}),
        };
        // Ready is the agent's to report while its heartbeat flows; when it does not, the
        // federation's cluster-controller decides (HeartbeatMissed) and is left alone
        if heartbeat_flowing(shared) {
            status["conditions"] = match probe {
                Some(_) => with_ready_condition(conds, true, REASON_READY, "the member API server answers", &now),
                None => with_ready_condition(conds, false, REASON_UNREACHABLE, message, &now),
            };
        }
        if status.as_object().is_some_and(|o| o.is_empty()) {
            return Ok(());
        }
        let patch = json!({"metadata": {"resourceVersion": cluster.metadata.resource_version}, "status": status});
        match api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(()),
            Err(e) if api_code(&e) == Some(409) && attempt < 2 => {
                cluster = api.get(name).await.map_err(StatusError::Federation)?;
            }
            Err(e) => return Err(StatusError::Federation(e)),
        }
    }
    Ok(())
}

async fn heartbeat_loop(shared: Arc<Shared>) {
    let period = heartbeat(&shared);
    // short first retries: the first renewal is what makes a new member Ready (its exec
    // namespace comes with its Cluster; a re-joined member's old one may still be going)
    let mut backoff = Backoff::new(Duration::from_millis(100), period);
    let mut renewed = false;
    loop {
        shared.wait_registered().await;
        let delay = match renew_lease(&shared, !renewed).await {
            Ok(()) => {
                backoff.reset();
                renewed = true;
                lease_jittered(period)
            }
            Err(e) => {
                let d = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?d, "heartbeat lease renewal failed");
                d
            }
        };
        tokio::time::sleep(delay).await;
    }
}

/// Renews (or creates) `fed-exec-<name>/cluster-heartbeat`: `holderIdentity` = the cluster
/// name, `renewTime` = now (MicroTime), `leaseDurationSeconds` = 4 heartbeat intervals
/// (mirrors kubelet's node lease in `kube-node-lease`). With `create_first` (this agent's
/// first renewal: a new member has no Lease yet) it creates the Lease and patches it only
/// when it exists (409); otherwise it patches it and creates it only when missing (404).
pub async fn renew_lease(shared: &Shared, create_first: bool) -> Result<(), StatusError> {
    let fed = shared.fed.borrow().clone().api;
    let api: Api<DynamicObject> = Api::namespaced_with(fed, &shared.exec_namespace, &lease_resource());
    let now = now_micro_time();
    let duration = (shared.config.heartbeat_interval_seconds.max(1) * 4) as i64;
    let spec = json!({
        "holderIdentity": shared.config.cluster_name,
        "leaseDurationSeconds": duration,
        "renewTime": now,
    });
    let patch = || async { api.patch(HEARTBEAT_LEASE, &PatchParams::default(), &Patch::Merge(&json!({"spec": spec}))).await.map(|_| ()) };
    let create = || async {
        let mut spec = spec.clone();
        spec["acquireTime"] = json!(now);
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": HEARTBEAT_LEASE, "namespace": shared.exec_namespace},
            "spec": spec,
        }))
        .expect("valid Lease");
        api.create(&PostParams::default(), &obj).await.map(|_| ())
    };
    let renewed = if create_first {
        match create().await {
            Err(e) if api_code(&e) == Some(409) => patch().await,
            r => r,
        }
    } else {
        match patch().await {
            Err(e) if api_code(&e) == Some(404) => create().await,
            r => r,
        }
    }
    .map_err(StatusError::Federation);
    if renewed.is_ok() {
        shared.last_heartbeat.send_replace(Some(std::time::Instant::now()));
    }
    renewed
}

/// Whether the heartbeat Lease was renewed within its duration (4 heartbeat intervals).
fn heartbeat_flowing(shared: &Shared) -> bool {
    let last = *shared.last_heartbeat.borrow();
    last.is_some_and(|t| t.elapsed() <= heartbeat(shared) * 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_are_spread_over_four_percent_of_the_period_never_later() {
        let p = Duration::from_secs(10);
        let delays: Vec<Duration> = (0..200).map(|_| lease_jittered(p)).collect();
        assert!(delays.iter().all(|d| *d <= p && *d > p.mul_f64(0.96)), "{delays:?}");
        let distinct: std::collections::HashSet<Duration> = delays.iter().copied().collect();
        assert!(distinct.len() > 100, "the delays vary: {} distinct of 200", distinct.len());
    }

    #[test]
    fn ready_condition_keeps_transition_time_and_other_conditions() {
        let cur = json!([
            {"type": "Other", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}
        ]);
        let out = with_ready_condition(Some(&cur), true, REASON_READY, "ok", "2024-01-01T00:00:00Z");
        assert_eq!(out[0]["type"], "Other");
        assert_eq!(out[1]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_eq!(out[1]["lastHeartbeatTime"], "2024-01-01T00:00:00Z");
        let out = with_ready_condition(Some(&out), false, REASON_UNREACHABLE, "down", "2024-01-02T00:00:00Z");
        assert_eq!(out[1]["status"], "False");
        assert_eq!(out[1]["reason"], REASON_UNREACHABLE);
        assert_eq!(out[1]["lastTransitionTime"], "2024-01-02T00:00:00Z");
        let fresh = with_ready_condition(None, true, REASON_READY, "ok", "t");
        assert_eq!(fresh.as_array().unwrap().len(), 1);
    }
}
