//! Helpers shared by the integration tests (`mod common;` in a test file).
#![allow(dead_code)]

pub mod agent;
pub mod cli;
pub mod etcd;
pub mod kubectl;
pub mod member;
pub mod server;
