//! fedctl: a Kubernetes multi-cluster federation control plane in one binary.
//!
//! The library holds all logic; the binaries in `cmd/` only parse flags into a `Config`
//! and call a mode's `run`. Layering, from the bottom: `config`, `telemetry`, `pki` and
//! `http` use no other fedctl module but each other in that order; `api` and `storage` build
//! on them; `cache`, `search` and `controllers` on those; the modes `server`, `agent`,
//! `fedsim` and the `cli` commands sit on top.

pub mod agent;
pub mod api;
pub mod cache;
pub mod cli;
pub mod config;
pub mod controllers;
pub mod fedsim;
pub mod http;
pub mod pki;
pub mod search;
pub mod server;
pub mod storage;
pub mod telemetry;
