//! `fedctl agent`: the work-agent of one member cluster (cluster-status, exec and
//! cert-rotation controllers). Its configuration is written by `fedctl join`.

pub mod config;
