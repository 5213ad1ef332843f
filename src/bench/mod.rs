//! Benchmarks behind the `fedctl-bench` binary; each prints figures side by side with an anchor.

pub mod cache;
pub mod global;
pub mod fedsim;
pub mod join;
pub mod procs;
pub mod propagation;
pub mod server;

/// Median and p99 of a sample, in the sample's unit; `(0, 0)` when empty.
pub fn median_p99(mut v: Vec<f64>) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}
