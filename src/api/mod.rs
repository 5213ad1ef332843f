//! The Kubernetes-compatible API layer: resources, handlers, watch, patch, Table, discovery.

pub mod apply;
pub mod error;
pub mod patch;
pub mod registry;

pub use error::{ApiError, ApiResult, Cause};
pub use registry::{Registry, ResourceInfo};
