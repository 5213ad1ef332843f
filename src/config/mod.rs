//! Flag values shared by every mode: Go-style durations; uses no other fedctl module.

pub mod duration;
