//! fedctl: a Kubernetes multi-cluster federation control plane in one binary.
//!
//! The library holds all logic; the binaries in `cmd/` only parse flags into a `Config`
//! and call a mode's `run`.

pub mod agent;
pub mod api;
pub mod auth;
pub mod bench;
pub mod cache;
pub mod client;
pub mod controllers;
pub mod duration;
pub mod federation;
pub mod fedsim;
pub mod http;
pub mod join;
pub mod kubeconfig;
pub mod logging;
pub mod metrics;
pub mod pki;
pub mod search;
pub mod server;
pub mod storage;
pub mod token;
pub mod unjoin;
