//! Helpers shared by the integration tests (`mod common;` in a test file).
#![allow(dead_code)]

pub mod agent;
pub mod cli;
pub mod etcd;
pub mod kubectl;
pub mod member;
/// The process handles of `fedctl-bench` (fedsim, server, etcd, agent), shared with the tests.
#[path = "../../cmd/fedctl-bench/procs.rs"]
pub mod procs;
pub mod server;
