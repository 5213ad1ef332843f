//! fedctl: a Kubernetes multi-cluster federation control plane in one binary.
//!
//! The library holds all logic; the binaries in `cmd/` only parse flags into a `Config`
//! and call a mode's `run`. Layering, from the bottom (a module uses only modules of the
//! layers below it; `tests/layering.rs` reads the source and fails on any other import):
//!
//! | layer | modules | may use |
//! |---|---|---|
//! | base | `config`, `telemetry`, `http`, `storage` | no other fedctl module |
//! | primitives | `pki` | `config` |
//! | API | `api` (REST semantics, kinds, the federation's own API types) | `config`, `http`, `storage`, `telemetry` |
//! | engines | `cache`, `controllers`, `fedsim` | `api` and the base (`cache` and `fedsim` also `pki`) |
//! | view | `search` (Router, MUX, the `fedctl cache` process) | `cache` and everything below it |
//! | modes | `agent`; `server`; `cli` (`join`, `unjoin`, `token`) | `agent`: `api`, `pki` and the base; `server`: everything but `cli` and `fedsim`; `cli`: `agent`, `server`, `api`, `pki`, `config` |

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
