//! CertificateSigningRequests: admission (requester fields, approval rules) and the controller that approves and signs agent certificates.
//!
//! Admission mirrors kube-apiserver's CSR strategies: on create `spec.username`/`spec.groups`
//! are set from the authenticated caller (whatever the client sent), `spec` is immutable
//! afterwards, `/status` may set the certificate once and may not touch Approved/Denied,
//! `/approval` (what `kubectl certificate approve|deny` PUTs) may only add Approved or Denied.
//!
//! The controller mirrors kube-controller-manager's `csrapproving` + `csrsigning` +
//! `csrcleaner` for the one signer the federation runs, [`AGENT_SIGNER`]:
//! - auto-approve (reason `AutoApproved`) a request for CN `system:fedctl:agent:<name>`
//!   (O at most [`AGENTS_GROUP`], usages client auth + digital signature/key encipherment)
//!   made by a bootstrap-token holder (group `system:bootstrappers`: a join), or by the agent
//!   `<name>` itself (a renewal); anything else stays pending for an admin;
//! - sign every approved request of that signer with the server CA, valid for the configured
//!   lifetime (shortened by `spec.expirationSeconds`); a request the signer cannot honour gets
//!   condition `Failed` (reason `SignerValidationFailure`);
//! - delete issued, denied and failed requests after 1 h and pending ones after 24 h.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use super::controller::{named_queue, spawn_watch, spawn_workers, KeyMapper};
use crate::agent::config::{AGENTS_GROUP, AGENT_SIGNER, AGENT_USER_PREFIX};
use crate::api::federation::valid_cluster_name;
use crate::api::object::{self, meta_str};
use crate::api::request::ResourceRequest;
use crate::api::{AdmissionHook, AdmissionRequest, ApiError, ApiResult, ApiServer, Caller, Cause, Ctx, Operation, ResourceInfo};
use crate::pki::auth::{AUTHENTICATED_GROUP, BOOTSTRAPPERS_GROUP, BOOTSTRAP_USER_PREFIX};
use crate::pki::Ca;

/// Condition type of an approved request.
pub const APPROVED: &str = "Approved";
/// Condition type of a denied request.
pub const DENIED: &str = "Denied";
/// Condition type of a request the signer could not sign.
pub const FAILED: &str = "Failed";
/// Reason of the controller's approvals.
pub const AUTO_APPROVED: &str = "AutoApproved";
/// Usages an agent client certificate may ask for (`client auth` is required).
pub const AGENT_USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
/// Shortest `spec.expirationSeconds` accepted (as kube-apiserver: 10 minutes).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// Issued, denied and failed requests are deleted this long after creation.
pub const FINISHED_TTL: Duration = Duration::from_secs(3600);
/// Pending requests are deleted this long after creation.
pub const PENDING_TTL: Duration = Duration::from_secs(24 * 3600);

/// Why a request cannot be auto-approved or signed (becomes a condition message or a log line).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CsrError {
    /// `spec.request` is missing, not base64 or not a PKCS#10 request.
    #[error("spec.request: {0}")]
    Request(String),
    /// The subject is not an agent's: CN `system:fedctl:agent:<cluster>`, O at most `system:fedctl:agents`.
    #[error("subject CN {cn:?} O {orgs:?} is not an agent identity (want CN system:fedctl:agent:<cluster>, O system:fedctl:agents)")]
    NotAgentSubject {
        /// Subject CN.
        cn: String,
        /// Subject O values.
        orgs: Vec<String>,
    },
    /// The usages are not those of a client certificate.
    #[error("usages {0:?} are not allowed (want client auth, optionally digital signature, key encipherment)")]
    Usages(Vec<String>),
}

fn is_csr(info: &ResourceInfo) -> bool {
    crate::api::request::has_approval(info)
}

fn conditions(obj: &Value) -> Vec<Value> {
    obj.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn has_condition(obj: &Value, ty: &str) -> bool {
    conditions(obj).iter().any(|c| c.get("type").and_then(Value::as_str) == Some(ty) && c.get("status").and_then(Value::as_str) != Some("False"))
}

fn is_approval_type(c: &Value) -> bool {
    matches!(c.get("type").and_then(Value::as_str), Some(APPROVED) | Some(DENIED))
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// The PEM (or DER) bytes of `spec.request`.
pub fn request_bytes(obj: &Value) -> Result<Vec<u8>, CsrError> {
    let b64 = obj.pointer("/spec/request").and_then(Value::as_str).ok_or_else(|| CsrError::Request("required".into()))?;
    base64::engine::general_purpose::STANDARD.decode(b64.trim()).map_err(|e| CsrError::Request(format!("not base64: {e}")))
}

/// The cluster an agent CSR is for, after checking its subject and usages against what the
/// agent signer issues. Errors: [`CsrError`].
pub fn agent_request_cluster(obj: &Value) -> Result<String, CsrError> {
    let der = request_bytes(obj)?;
    let (cn, orgs) = crate::pki::csr_subject(&der).map_err(|e| CsrError::Request(e.to_string()))?;
    let cluster = cn.strip_prefix(AGENT_USER_PREFIX).filter(|c| valid_cluster_name(c)).map(str::to_string);
    let orgs_ok = orgs.iter().all(|o| o == AGENTS_GROUP);
    let Some(cluster) = cluster.filter(|_| orgs_ok) else {
        return Err(CsrError::NotAgentSubject { cn, orgs });
    };
    let usages = str_list(obj.pointer("/spec/usages"));
    if !usages.iter().any(|u| u == "client auth") || !usages.iter().all(|u| AGENT_USAGES.contains(&u.as_str())) {
        return Err(CsrError::Usages(usages));
    }
    Ok(cluster)
}

/// Admission for `certificatesigningrequests` (see the module docs).
pub struct CsrAdmission;

fn invalid(info: &ResourceInfo, name: &str, field: &str, message: String) -> ApiError {
    object::invalid(info, name, vec![Cause { reason: "FieldValueInvalid".into(), message, field: field.into() }])
}

#[async_trait::async_trait]
impl AdmissionHook for CsrAdmission {
    fn handles(&self, info: &ResourceInfo) -> bool {
        is_csr(info)
    }

    async fn admit(&self, _api: &ApiServer, req: &AdmissionRequest<'_>, obj: &mut Value) -> ApiResult<()> {
        let (info, name) = (req.info, req.name);
        match (req.operation, req.old) {
            (Operation::Create, _) | (_, None) => admit_create(info, name, &req.ctx.caller, obj),
            (Operation::Update, Some(old)) => admit_update(info, name, req.subresource, old, req.proposed, obj),
        }
    }
}

fn admit_create(info: &ResourceInfo, name: &str, caller: &Caller, obj: &mut Value) -> ApiResult<()> {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return Err(object::invalid(info, name, vec![object::required("spec")]));
    }
    let der = request_bytes(obj).map_err(|e| invalid(info, name, "spec.request", e.to_string()))?;
    crate::pki::csr_subject(&der).map_err(|e| invalid(info, name, "spec.request", e.to_string()))?;
    if obj.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or("").is_empty() {
        return Err(object::invalid(info, name, vec![object::required("spec.signerName")]));
    }
    if str_list(obj.pointer("/spec/usages")).is_empty() {
        return Err(object::invalid(info, name, vec![object::required("spec.usages")]));
    }
    if let Some(e) = obj.pointer("/spec/expirationSeconds") {
        if e.as_i64().is_none_or(|s| s < MIN_EXPIRATION_SECONDS) {
            return Err(invalid(info, name, "spec.expirationSeconds", format!("Invalid value: {e}: may not specify a duration less than {MIN_EXPIRATION_SECONDS} seconds")));
        }
    }
    let mut groups = caller.groups.clone();
    if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        groups.push(AUTHENTICATED_GROUP.into());
    }
    let spec = obj["spec"].as_object_mut().expect("checked above");
    spec.insert("username".into(), json!(caller.user));
    spec.insert("groups".into(), json!(groups));
    spec.remove("uid");
    spec.remove("extra");
    Ok(())
}

fn admit_update(info: &ResourceInfo, name: &str, sub: Option<&str>, old: &Value, proposed: Option<&Value>, obj: &mut Value) -> ApiResult<()> {
    // spec is immutable
    match old.get("spec") {
        Some(s) => obj["spec"] = s.clone(),
        None => {
            if let Some(o) = obj.as_object_mut() {
                o.remove("spec");
            }
        }
    }
    let old_conds = conditions(old);
    match sub {
        Some("approval") => {
            let want = proposed.map(conditions).unwrap_or_default();
            let now = object::now_rfc3339();
            let mut out = Vec::new();
            for mut c in want {
                let ty = c.get("type").and_then(Value::as_str).unwrap_or("").to_string();
                let st = c.get("status").and_then(Value::as_str).unwrap_or("").to_string();
                if ty.is_empty() {
                    return Err(object::invalid(info, name, vec![object::required("status.conditions[].type")]));
                }
                if !matches!(st.as_str(), "True" | "False" | "Unknown") {
                    return Err(invalid(info, name, "status.conditions[].status", format!("Unsupported value: {st:?}: supported values: \"True\", \"False\", \"Unknown\"")));
                }
                if let Some(m) = c.as_object_mut() {
                    for k in ["lastUpdateTime", "lastTransitionTime"] {
                        if m.get(k).is_none_or(Value::is_null) {
                            m.insert(k.into(), json!(now));
                        }
                    }
                }
                out.push(c);
            }
            let has = |ty: &str| out.iter().any(|c| c.get("type").and_then(Value::as_str) == Some(ty) && c.get("status").and_then(Value::as_str) == Some("True"));
            if has(APPROVED) && has(DENIED) {
                return Err(invalid(info, name, "status.conditions", "Approved and Denied conditions are mutually exclusive".into()));
            }
            for oc in old_conds.iter().filter(|c| is_approval_type(c)) {
                let ty = oc.get("type").and_then(Value::as_str).unwrap_or("");
                if !out.iter().any(|c| c.get("type").and_then(Value::as_str) == Some(ty)) {
                    return Err(invalid(info, name, "status.conditions", format!("Forbidden: updates may not remove a condition of type {ty:?}")));
                }
            }
            obj["status"] = old.get("status").cloned().unwrap_or_else(|| json!({}));
            obj["status"]["conditions"] = Value::Array(out);
        }
        Some("status") => {
            // Approved/Denied only through /approval: keep the stored ones
            let mut conds: Vec<Value> = old_conds.iter().filter(|c| is_approval_type(c)).cloned().collect();
            conds.extend(conditions(obj).into_iter().filter(|c| !is_approval_type(c)));
            if conds.is_empty() {
                if let Some(s) = obj.get_mut("status").and_then(Value::as_object_mut) {
                    s.remove("conditions");
                }
            } else {
                if !obj.get("status").is_some_and(Value::is_object) {
                    obj["status"] = json!({});
                }
                obj["status"]["conditions"] = Value::Array(conds);
            }
        }
        _ => {}
    }
    let old_cert = old.pointer("/status/certificate").and_then(Value::as_str).filter(|s| !s.is_empty());
    let new_cert = obj.pointer("/status/certificate").and_then(Value::as_str).filter(|s| !s.is_empty());
    if old_cert.is_some() && old_cert != new_cert {
        return Err(invalid(info, name, "status.certificate", "Forbidden: updates may not modify existing certificate content".into()));
    }
    Ok(())
}

/// The CSR controller: approves and signs agent client certificates, cleans up old requests.
pub struct CsrController {
    api: Arc<ApiServer>,
    ca: Arc<Ca>,
    lifetime: Duration,
    info: Arc<ResourceInfo>,
}

impl CsrController {
    /// A controller signing with `ca` for at most `lifetime`.
    pub fn new(api: Arc<ApiServer>, ca: Arc<Ca>, lifetime: Duration) -> Option<Arc<Self>> {
        let info = api.registry.lookup("certificates.k8s.io", "v1", "certificatesigningrequests")?;
        Some(Arc::new(CsrController { api, ca, lifetime, info }))
    }

    /// Starts the watcher and one worker; runs for the life of the process.
    pub fn spawn(self: &Arc<Self>) {
        let queue = named_queue("csr");
        let prefix = self.info.prefix();
        let p2 = prefix.clone();
        let map: KeyMapper = Arc::new(move |k: &str| k.strip_prefix(&p2).map(str::to_string));
        spawn_watch(self.api.store.clone(), prefix, map, queue.clone());
        let me = self.clone();
        spawn_workers(queue, 1, move |name| {
            let me = me.clone();
            async move {
                crate::telemetry::metrics::server().reconciled("csr", true);
                me.reconcile(&name).await
            }
        });
    }

    fn ctx(&self) -> Ctx {
        Ctx { caller: Caller { user: "system:fedctl:csr-controller".into(), groups: vec![] }, dry_run: false, manager: "csr-controller".into(), apply: false }
    }

    fn req(&self, name: &str, sub: Option<&str>) -> ResourceRequest {
        ResourceRequest { info: self.info.clone(), namespace: None, name: Some(name.to_string()), subresource: sub.map(str::to_string), watch_path: false }
    }

    /// Reconciles one request; returns when to look at it again (GC or retry).
    pub async fn reconcile(&self, name: &str) -> Option<Duration> {
        let obj = match self.api.get(&self.req(name, None)).await {
            Ok(o) => o,
            Err(ApiError::NotFound { .. }) => return None,
            Err(e) => {
                tracing::warn!(csr = name, error = %e, "reading CSR; retrying");
                return Some(Duration::from_secs(2));
            }
        };
        if let Some(left) = self.collect_garbage(name, &obj).await {
            return left;
        }
        if obj.pointer("/spec/signerName").and_then(Value::as_str) != Some(AGENT_SIGNER) {
            return None; // not ours
        }
        let issued = obj.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
        if issued || has_condition(&obj, DENIED) || has_condition(&obj, FAILED) {
            return None;
        }
        let approved = has_condition(&obj, APPROVED);
        if !approved {
            match self.auto_approvable(&obj) {
                Ok(true) => {
                    if let Err(e) = self.approve(name).await {
                        tracing::warn!(csr = name, error = %e, "approving CSR; retrying");
                        return Some(Duration::from_secs(1));
                    }
                    let requestor = obj.pointer("/spec/username").and_then(Value::as_str).unwrap_or("");
                    tracing::info!(csr = name, requestor, "auto-approved agent CSR");
                }
                Ok(false) => return None, // pending: an admin decides
                Err(e) => {
                    tracing::info!(csr = name, reason = %e, "CSR not auto-approvable; left pending");
                    return None;
                }
            }
        }
        match self.sign(name, &obj).await {
            Ok(()) => None,
            Err(e) => {
                tracing::warn!(csr = name, error = %e, "signing CSR; retrying");
                Some(Duration::from_secs(1))
            }
        }
    }

    /// Whether the request is a join (bootstrap token) or the agent's own renewal.
    fn auto_approvable(&self, obj: &Value) -> Result<bool, CsrError> {
        let cluster = agent_request_cluster(obj)?;
        let user = obj.pointer("/spec/username").and_then(Value::as_str).unwrap_or("");
        let groups = str_list(obj.pointer("/spec/groups"));
        let bootstrap = user.starts_with(BOOTSTRAP_USER_PREFIX) && groups.iter().any(|g| g == BOOTSTRAPPERS_GROUP);
        let renewal = user == format!("{AGENT_USER_PREFIX}{cluster}");
        Ok(bootstrap || renewal)
    }

    async fn approve(&self, name: &str) -> ApiResult<Value> {
        let now = object::now_rfc3339();
        self.api
            .guaranteed_update(&self.req(name, Some("approval")), name, None, &self.ctx(), move |cur| {
                let mut n = cur.clone();
                let mut conds = conditions(cur);
                if !conds.iter().any(|c| c.get("type").and_then(Value::as_str) == Some(APPROVED)) {
                    conds.push(json!({
                        "type": APPROVED, "status": "True", "reason": AUTO_APPROVED,
                        "message": "Auto approving fedctl agent client certificate",
                        "lastUpdateTime": now, "lastTransitionTime": now,
                    }));
                }
                if !n.get("status").is_some_and(Value::is_object) {
                    n["status"] = json!({});
                }
                n["status"]["conditions"] = Value::Array(conds);
                Ok(n)
            })
            .await
    }

    async fn sign(&self, name: &str, obj: &Value) -> ApiResult<()> {
        let checked = agent_request_cluster(obj).and_then(|c| request_bytes(obj).map(|b| (c, b)));
        let signed = checked.and_then(|(cluster, der)| {
            let mut lifetime = self.lifetime;
            if let Some(s) = obj.pointer("/spec/expirationSeconds").and_then(Value::as_i64).filter(|s| *s > 0) {
                lifetime = lifetime.min(Duration::from_secs(s as u64));
            }
            self.ca.sign_csr(&der, Some(&format!("{AGENT_USER_PREFIX}{cluster}")), lifetime).map_err(|e| CsrError::Request(e.to_string()))
        });
        let now = object::now_rfc3339();
        let failed = signed.as_ref().err().map(|e| e.to_string());
        let (cert, failure) = match signed {
            Ok(pem) => (Some(base64::engine::general_purpose::STANDARD.encode(pem)), None),
            Err(e) => (None, Some(e.to_string())),
        };
        self.api
            .guaranteed_update(&self.req(name, Some("status")), name, None, &self.ctx(), move |cur| {
                let mut n = cur.clone();
                if !n.get("status").is_some_and(Value::is_object) {
                    n["status"] = json!({});
                }
                match (&cert, &failure) {
                    (Some(c), _) => n["status"]["certificate"] = json!(c),
                    (None, Some(msg)) => {
                        let mut conds = conditions(cur);
                        conds.push(json!({"type": FAILED, "status": "True", "reason": "SignerValidationFailure", "message": msg, "lastUpdateTime": now, "lastTransitionTime": now}));
                        n["status"]["conditions"] = Value::Array(conds);
                    }
                    (None, None) => {}
                }
                Ok(n)
            })
            .await?;
        match &failed {
            None => tracing::info!(csr = name, "signed agent certificate"),
            Some(m) => tracing::info!(csr = name, reason = %m, "agent CSR failed signer validation"),
        }
        Ok(())
    }

    /// Deletes an old request (mirrors `csrcleaner`). `Some(x)`: done with this key (x = when
    /// to look again); `None`: go on reconciling.
    async fn collect_garbage(&self, name: &str, obj: &Value) -> Option<Option<Duration>> {
        let created = meta_str(obj, "creationTimestamp").and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())?;
        let age = (chrono::Utc::now() - created.with_timezone(&chrono::Utc)).to_std().unwrap_or_default();
        let issued = obj.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
        let finished = issued || has_condition(obj, DENIED) || has_condition(obj, FAILED);
        let ttl = if finished { FINISHED_TTL } else { PENDING_TTL };
        if age < ttl {
            if finished {
                return Some(Some(ttl - age + Duration::from_secs(1)));
            }
            return None;
        }
        match self.api.delete(&self.req(name, None), &json!({}), &self.ctx()).await {
            Ok(_) | Err(ApiError::NotFound { .. }) => {
                tracing::info!(csr = name, "deleted old CSR");
                Some(None)
            }
            Err(e) => {
                tracing::warn!(csr = name, error = %e, "deleting old CSR; retrying");
                Some(Some(Duration::from_secs(30)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr_obj(cn: &str, orgs: &[&str], usages: &[&str]) -> Value {
        let (pem, _key) = crate::pki::generate_csr(cn, orgs).unwrap();
        json!({"spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem), "signerName": AGENT_SIGNER, "usages": usages}})
    }

    #[test]
    fn agent_subject_rules() {
        let ok = csr_obj("system:fedctl:agent:east", &[AGENTS_GROUP], &["digital signature", "client auth"]);
        assert_eq!(agent_request_cluster(&ok).unwrap(), "east");
        let no_o = csr_obj("system:fedctl:agent:east", &[], &["client auth"]);
        assert_eq!(agent_request_cluster(&no_o).unwrap(), "east");
        assert!(matches!(agent_request_cluster(&csr_obj("admin", &[], &["client auth"])), Err(CsrError::NotAgentSubject { .. })));
        assert!(matches!(agent_request_cluster(&csr_obj("system:fedctl:agent:east", &["system:masters"], &["client auth"])), Err(CsrError::NotAgentSubject { .. })));
        assert!(matches!(agent_request_cluster(&csr_obj("system:fedctl:agent:East", &[], &["client auth"])), Err(CsrError::NotAgentSubject { .. })));
        assert!(matches!(agent_request_cluster(&csr_obj("system:fedctl:agent:east", &[], &["server auth"])), Err(CsrError::Usages(_))));
        assert!(matches!(agent_request_cluster(&json!({"spec": {}})), Err(CsrError::Request(_))));
    }

    #[test]
    fn create_sets_requester() {
        let info = crate::api::registry::csr();
        let mut obj = csr_obj("system:fedctl:agent:east", &[], &["client auth"]);
        obj["spec"]["username"] = json!("admin");
        obj["spec"]["groups"] = json!(["system:masters"]);
        let caller = Caller { user: "system:bootstrap:abcdef".into(), groups: vec!["system:bootstrappers".into(), "system:authenticated".into()] };
        admit_create(&info, "x", &caller, &mut obj).unwrap();
        assert_eq!(obj["spec"]["username"], "system:bootstrap:abcdef");
        assert_eq!(obj["spec"]["groups"], json!(["system:bootstrappers", "system:authenticated"]));
        let mut bad = json!({"spec": {"request": "!!", "signerName": AGENT_SIGNER, "usages": ["client auth"]}});
        assert_eq!(admit_create(&info, "x", &caller, &mut bad).unwrap_err().code(), 422);
        let mut short = csr_obj("system:fedctl:agent:east", &[], &["client auth"]);
        short["spec"]["expirationSeconds"] = json!(60);
        assert_eq!(admit_create(&info, "x", &caller, &mut short).unwrap_err().code(), 422);
    }

    #[test]
    fn approval_and_status_rules() {
        let info = crate::api::registry::csr();
        let old = json!({"spec": {"username": "u"}, "status": {}});
        // approval: conditions from the proposal, spec kept
        let proposed = json!({"spec": {"username": "evil"}, "status": {"conditions": [{"type": "Approved", "status": "True", "reason": "KubectlApprove", "lastTransitionTime": null}]}});
        let mut merged = json!({"spec": {"username": "evil"}, "status": {}});
        admit_update(&info, "x", Some("approval"), &old, Some(&proposed), &mut merged).unwrap();
        assert!(merged["status"]["conditions"][0]["lastTransitionTime"].is_string());
        assert_eq!(merged["spec"]["username"], "u");
        assert_eq!(merged["status"]["conditions"][0]["type"], "Approved");
        assert!(merged["status"]["conditions"][0]["lastUpdateTime"].is_string());
        // both approved and denied: refused
        let both = json!({"status": {"conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]}});
        assert_eq!(admit_update(&info, "x", Some("approval"), &old, Some(&both), &mut json!({})).unwrap_err().code(), 422);
        // approval cannot be removed
        let removed = json!({"status": {"conditions": []}});
        assert_eq!(admit_update(&info, "x", Some("approval"), &merged.clone(), Some(&removed), &mut json!({})).unwrap_err().code(), 422);
        // status cannot approve
        let mut via_status = json!({"status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "Y2VydA=="}});
        admit_update(&info, "x", Some("status"), &old, None, &mut via_status).unwrap();
        assert!(via_status["status"].get("conditions").is_none());
        assert_eq!(via_status["status"]["certificate"], "Y2VydA==");
        // certificate is write-once
        let mut changed = json!({"status": {"certificate": "b3RoZXI="}});
        assert_eq!(admit_update(&info, "x", Some("status"), &via_status, None, &mut changed).unwrap_err().code(), 422);
    }
}
