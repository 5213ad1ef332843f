//! The Kubernetes-compatible API layer: resources, handlers, watch, patch, Table, discovery,
//! and the federation's own API types; uses `storage`, `http`, `config` and `telemetry`.

pub mod admission;
pub mod apply;
pub mod body;
pub mod cached_list;
pub mod conversion;
pub mod crd;
pub mod defaults;
pub mod discovery;
pub mod error;
pub mod federation;
pub mod handler;
pub mod kinds;
pub mod namespaces;
pub mod object;
pub mod overrides;
pub mod paging;
pub mod patch;
pub mod policy;
pub mod protobuf;
pub mod registry;
pub mod request;
pub mod schema;
pub mod selector;
pub mod table;
pub mod typed_schema;
pub mod watch;

pub use admission::{AdmissionHook, AdmissionRequest, Operation};
pub use error::{ApiError, ApiResult, Cause};
pub use handler::{ApiConfig, ApiServer, Caller, Ctx, Limits};
pub use registry::{Registry, ResourceInfo};
