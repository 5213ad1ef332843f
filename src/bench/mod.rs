//! Benchmarks behind the `fedctl-bench` binary; each prints figures side by side with an anchor.

pub mod cache;
pub mod global;
pub mod fedsim;
pub mod join;
pub mod load;
pub mod procs;
pub mod propagation;
pub mod restart;
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

/// Reads a watch response line by line: calls `on_event(event, arrival)` for each JSON event
/// (lines that do not parse are skipped) until it returns `true` or the stream ends. `arrival`
/// is when the chunk holding the event was received.
pub async fn read_watch_events(resp: reqwest::Response, mut on_event: impl FnMut(&serde_json::Value, std::time::Instant) -> bool) {
    use futures::StreamExt;
    let mut s = resp.bytes_stream();
    let mut buf = Vec::new();
    while let Some(Ok(chunk)) = s.next().await {
        let at = std::time::Instant::now();
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let Ok(ev) = serde_json::from_slice::<serde_json::Value>(&line) else { continue };
            if on_event(&ev, at) {
                return;
            }
        }
    }
}
