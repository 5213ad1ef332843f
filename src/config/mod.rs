//! Flag values shared by every mode: Go-style durations and YAML config files of flags; uses no
//! other fedctl module.

pub mod duration;
pub mod file;
