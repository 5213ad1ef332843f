//! fedsim: a kwok-like Kubernetes API simulator that stands in for member clusters in tests and benchmarks.

pub mod generate;
