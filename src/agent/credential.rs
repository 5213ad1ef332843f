//! The member-credential controller: an identity in the member that may only read the
//! kinds the global view caches and impersonate (ServiceAccount `fedctl-system/fedctl-cache`,
//! bound to the ClusterRole [`cache_cluster_role`]), a token for it, and the Secret
//! `fed-exec-<name>/member-credential` (`token`, `ca.crt`, `server`) through which the
//! federation's cache reads the member and its Router acts on it as the federation's caller
//! (`Impersonate-User`/`Impersonate-Group`), so the member's RBAC decides every write
//! (mirrors Karmada's `karmada-impersonator` service account and the secret `karmada-agent`
//! syncs).
//!
//! Tokens come from the TokenRequest API (24 h, renewed after two thirds of that); a member
//! without it (TokenRequest answers 404) gets a legacy
//! `kubernetes.io/service-account-token` Secret instead. The Secret in the federation is
//! watched: when it is changed or deleted, it is written again right away.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;
use tokio::sync::Notify;

use super::watch::{Event, WatchSpec};
use super::{api_code, Backoff, Shared, FIELD_MANAGER};
use crate::api::federation::MEMBER_CREDENTIAL_SECRET as CREDENTIAL_SECRET;

/// Namespace of the agent's objects in the member.
pub const MEMBER_NAMESPACE: &str = "fedctl-system";
/// Name of the ServiceAccount, ClusterRole and ClusterRoleBinding in the member.
pub const CACHE_IDENTITY: &str = "fedctl-cache";
/// Name of the legacy token Secret (only on members without TokenRequest).
pub const LEGACY_TOKEN_SECRET: &str = "fedctl-cache-token";
/// Lifetime asked of TokenRequest, in seconds.
pub const TOKEN_SECONDS: i64 = 24 * 3600;
/// Interval of the level-triggered re-check (the watch makes reactions faster).
const RESYNC: Duration = Duration::from_secs(60);

/// Errors of one credential sync (logged, then retried).
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Creating the identity or its token in the member failed.
    #[error("member API: {0}")]
    Member(kube::Error),
    /// The member issued no token (or the legacy token Secret has none yet: the member's
    /// token controller fills it).
    #[error("the member issued no token for {MEMBER_NAMESPACE}/{CACHE_IDENTITY} yet")]
    TokenPending,
    /// Reading or writing the Secret in the federation failed.
    #[error("federation API: {0}")]
    Federation(kube::Error),
}

/// A token and when to replace it.
struct Token {
    value: String,
    renew_at: Option<Instant>,
}

/// Runs the controller (never returns): the credential sync and the watch on the credential
/// Secret, each waiting until the `Cluster` is registered.
pub async fn run(shared: Arc<Shared>) {
    let notify = Arc::new(Notify::new());
    tokio::join!(sync_loop(shared.clone(), notify.clone()), watch_loop(shared, notify));
}

/// Keeps the credential Secret in the federation current; woken by `notify` (the watch) or
/// every minute, and when the token is due for renewal.
pub async fn sync_loop(shared: Arc<Shared>, notify: Arc<Notify>) {
    let mut token: Option<Token> = None;
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        shared.wait_registered().await;
        let delay = match sync_once(&shared, &mut token).await {
            Ok(()) => {
                backoff.reset();
                let until_renew = token.as_ref().and_then(|t| t.renew_at).map(|at| at.saturating_duration_since(Instant::now()));
                until_renew.map_or(RESYNC, |d| d.min(RESYNC))
            }
            Err(e) => {
                let d = backoff.next_delay();
                tracing::warn!(error = %e, retry_in = ?d, "member credential sync failed");
                d
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = notify.notified() => {}
        }
    }
}

async fn sync_once(shared: &Shared, token: &mut Option<Token>) -> Result<(), CredentialError> {
    if token.as_ref().is_none_or(|t| t.renew_at.is_some_and(|at| Instant::now() >= at)) {
        let member = &shared.member.client;
        ensure_member_identity(member).await?;
        *token = Some(issue_token(member).await?);
        tracing::info!("obtained a member token for the federation's cache");
    }
    let value = &token.as_ref().expect("token set above").value;
    let desired: BTreeMap<String, ByteString> = [("token", value.as_bytes().to_vec()), ("ca.crt", shared.member.ca_pem.as_bytes().to_vec()), ("server", shared.member.server.as_bytes().to_vec())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v)))
        .collect();
    let fed = shared.fed.borrow().clone().api;
    let api: Api<Secret> = Api::namespaced(fed, &shared.exec_namespace);
    let current = api.get_opt(CREDENTIAL_SECRET).await.map_err(CredentialError::Federation)?;
    match current {
        Some(cur) if cur.data.as_ref() == Some(&desired) => Ok(()),
        Some(mut cur) => {
            cur.data = Some(desired);
            cur.string_data = None;
            api.replace(CREDENTIAL_SECRET, &PostParams::default(), &cur).await.map_err(CredentialError::Federation)?;
            tracing::info!(secret = %format!("{}/{CREDENTIAL_SECRET}", shared.exec_namespace), "updated member credential");
            Ok(())
        }
        None => {
            let s: Secret = serde_json::from_value(json!({
                "metadata": {
                    "name": CREDENTIAL_SECRET,
                    "namespace": shared.exec_namespace,
                    "labels": {"cluster.fedctl.io/name": shared.config.cluster_name},
                },
                "type": "Opaque",
            }))
            .expect("valid Secret");
            let s = Secret { data: Some(desired), ..s };
            api.create(&PostParams::default(), &s).await.map_err(CredentialError::Federation)?;
            tracing::info!(secret = %format!("{}/{CREDENTIAL_SECRET}", shared.exec_namespace), "created member credential");
            Ok(())
        }
    }
}

fn dynamic(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The ClusterRole `fedctl-cache` of the member credential: get/list/watch of every kind the
/// global view can cache but secrets (its ingest reads them as itself; caching secrets needs
/// a grant on the member by hand) and `impersonate` of users, groups
/// and service accounts (every other request acts as the federation's caller), nothing else.
pub fn cache_cluster_role() -> serde_json::Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": CACHE_IDENTITY},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "nodes", "namespaces", "events", "endpoints", "configmaps", "services", "serviceaccounts"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["users", "groups", "serviceaccounts"], "verbs": ["impersonate"]},
        ],
    })
}

/// Server-side applies (field manager `fedctl`) the namespace, ServiceAccount, ClusterRole
/// and ClusterRoleBinding of the cache identity in the member. Never deletes anything.
pub async fn ensure_member_identity(member: &kube::Client) -> Result<(), CredentialError> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let objects = [
        (dynamic("", "v1", "Namespace", "namespaces"), None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MEMBER_NAMESPACE}})),
        (
            dynamic("", "v1", "ServiceAccount", "serviceaccounts"),
            Some(MEMBER_NAMESPACE),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": CACHE_IDENTITY, "namespace": MEMBER_NAMESPACE}}),
        ),
        (dynamic("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles"), None, cache_cluster_role()),
        (
            dynamic("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings"),
            None,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": CACHE_IDENTITY},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CACHE_IDENTITY},
                "subjects": [{"kind": "ServiceAccount", "name": CACHE_IDENTITY, "namespace": MEMBER_NAMESPACE}],
            }),
        ),
    ];
    for (ar, ns, obj) in objects {
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(member.clone(), ns, &ar),
            None => Api::all_with(member.clone(), &ar),
        };
        let name = obj["metadata"]["name"].as_str().expect("named");
        api.patch(name, &pp, &Patch::Apply(&obj)).await.map_err(CredentialError::Member)?;
    }
    Ok(())
}

/// A token for the cache identity: TokenRequest, or the legacy Secret when the member has
/// no TokenRequest (404).
async fn issue_token(member: &kube::Client) -> Result<Token, CredentialError> {
    let sas: Api<ServiceAccount> = Api::namespaced(member.clone(), MEMBER_NAMESPACE);
    let tr: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS}})).expect("valid TokenRequest");
    match sas.create_token_request(CACHE_IDENTITY, &PostParams::default(), &tr).await {
        Ok(out) => {
            let value = out.status.map(|s| s.token).unwrap_or_default();
            if value.is_empty() {
                return Err(CredentialError::TokenPending);
            }
            // renew after two thirds of the lifetime granted (the server may shorten it)
            let granted = out.spec.expiration_seconds.unwrap_or(TOKEN_SECONDS).max(60) as u64;
            Ok(Token { value, renew_at: Some(Instant::now() + Duration::from_secs(granted * 2 / 3)) })
        }
        Err(e) if api_code(&e) == Some(404) => {
            tracing::info!("member has no TokenRequest API; using a service-account-token Secret");
            legacy_token(member).await
        }
        Err(e) => Err(CredentialError::Member(e)),
    }
}

async fn legacy_token(member: &kube::Client) -> Result<Token, CredentialError> {
    let secrets: Api<Secret> = Api::namespaced(member.clone(), MEMBER_NAMESPACE);
    let obj = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": LEGACY_TOKEN_SECRET, "namespace": MEMBER_NAMESPACE,
            "annotations": {"kubernetes.io/service-account.name": CACHE_IDENTITY},
        },
        "type": "kubernetes.io/service-account-token",
    });
    let s = secrets.patch(LEGACY_TOKEN_SECRET, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&obj)).await.map_err(CredentialError::Member)?;
    let token = s.data.as_ref().and_then(|d| d.get("token")).map(|b| String::from_utf8_lossy(&b.0).into_owned());
    match token.filter(|t| !t.is_empty()) {
        // a legacy token does not expire; re-read it at every resync
        Some(value) => Ok(Token { value, renew_at: Some(Instant::now() + RESYNC) }),
        None => Err(CredentialError::TokenPending),
    }
}

/// Watches the credential Secret in the federation and wakes the sync loop on any change
/// (including its deletion and the agent's own writes, which the sync finds current).
pub async fn watch_loop(shared: Arc<Shared>, notify: Arc<Notify>) {
    shared.wait_registered().await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let spec = WatchSpec { resource: dynamic("", "v1", "Secret", "secrets"), namespace: shared.exec_namespace.clone(), field_selector: Some(format!("metadata.name={CREDENTIAL_SECRET}")) };
    let watcher = super::watch::run(shared.fed.clone(), spec, tx);
    let consumer = async {
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Deleted(_) => {
                    tracing::info!("member credential Secret deleted in the federation; writing it again");
                    notify.notify_one();
                }
                Event::Applied(_) | Event::Listed(_) => notify.notify_one(),
            }
        }
    };
    tokio::join!(watcher, consumer);
}
