//! fedctl: a Kubernetes multi-cluster federation control plane in one binary.
//!
//! The library holds all logic; the binaries in `cmd/` only parse flags into a `Config`
//! and call a mode's `run`.

pub mod api;
pub mod fedsim;
pub mod storage;
