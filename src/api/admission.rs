//! Per-kind admission hooks: mutate or refuse a write before it is stored (mirrors kube-apiserver's admission chain).
//!
//! A hook is registered on an [`ApiServer`](super::ApiServer) for the kinds it
//! [handles](AdmissionHook::handles) and runs, in registration order, on every create and on
//! every update (PUT and PATCH of the object or of one of its subresources), after the generic
//! preparation (server-owned metadata, status carried over) and before validation and the
//! store write. Returning an error refuses the request: nothing is written. Dry-run requests
//! run the hooks too. Deletes are not admitted. After a create is stored (not on dry-run), the
//! hooks that admitted it may act on it ([`AdmissionHook::after_create`], as the registry's
//! `AfterCreate` in kube-apiserver's generic store).

use std::sync::Arc;

use serde_json::Value;

use super::error::ApiResult;
use super::handler::{ApiServer, Ctx};
use super::registry::ResourceInfo;

/// Which write is being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A create (POST, or server-side apply creating the object).
    Create,
    /// An update of an existing object (PUT, PATCH).
    Update,
}

/// One write as a hook sees it.
pub struct AdmissionRequest<'a> {
    /// Create or update.
    pub operation: Operation,
    /// The resource written.
    pub info: &'a ResourceInfo,
    /// Namespace (`None` for cluster-scoped objects).
    pub namespace: Option<&'a str>,
    /// Object name (for a create: the name after `generateName` was resolved).
    pub name: &'a str,
    /// Subresource written (`status`, `approval`, …), `None` for the object itself.
    pub subresource: Option<&'a str>,
    /// The stored object before an update; `None` on create.
    pub old: Option<&'a Value>,
    /// What the client proposed for an update, before the generic merge (e.g. the whole
    /// object sent to a subresource, whose other parts the merge discards); `None` on create.
    pub proposed: Option<&'a Value>,
    /// Who is writing, dry-run, field manager.
    pub ctx: &'a Ctx,
}

/// A mutating and validating admission hook for some kinds.
#[async_trait::async_trait]
pub trait AdmissionHook: Send + Sync + 'static {
    /// Whether this hook admits writes of `info`.
    fn handles(&self, info: &ResourceInfo) -> bool;

    /// Admits one write: may change `obj` (the object about to be validated and stored) or
    /// refuse with an error, which the client receives as its Status (e.g. 403, 409, 422).
    /// `api` gives read access to other objects (through its store). Must be idempotent:
    /// an update may be admitted several times when it is retried after a conflict.
    async fn admit(&self, api: &ApiServer, req: &AdmissionRequest<'_>, obj: &mut Value) -> ApiResult<()>;

    /// Runs once a create this hook admitted is stored (`stored`: the object as returned to
    /// the client), before the response is sent; mirrors `AfterCreate` of kube-apiserver's
    /// generic registry store. The object is stored whatever happens here, so a hook logs its
    /// failures rather than returning them, and what it does must also be done by a
    /// controller (this only does it sooner). Default: nothing.
    async fn after_create(&self, _api: &Arc<ApiServer>, _req: &AdmissionRequest<'_>, _stored: &Value) {}
}
