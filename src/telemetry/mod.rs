//! Logs and metrics of every fedctl process: the tracing subscriber and the Prometheus
//! registries; uses no other fedctl module.

pub mod logging;
pub mod metrics;
