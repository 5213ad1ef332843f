//! Flag values shared by every mode: Go-style durations, YAML config files of flags and the
//! YAML nesting pre-check every YAML reader runs; uses no other fedctl module.

pub mod duration;
pub mod file;
pub mod yaml;
