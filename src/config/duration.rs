//! Go-style durations for flags (`8760h`, `40s`, `1h30m`, `500ms`), as kubectl and kubeadm spell them.

use std::time::Duration;

/// A string that is not a duration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DurationError {
    /// Empty input, a number without a unit, an unknown unit or an overflow; carries the input.
    #[error("invalid duration {0:?} (want e.g. 90s, 40m, 24h, 1h30m; units ns, us, ms, s, m, h)")]
    Invalid(String),
}

/// Parses a non-negative Go duration: one or more `<decimal><unit>` terms with units `ns`,
/// `us` (or `µs`), `ms`, `s`, `m`, `h`; a bare `0` is zero. Fractions are allowed (`1.5h`).
/// Mirrors Go's `time.ParseDuration` without negative values.
/// Errors: [`DurationError::Invalid`].
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    let bad = || DurationError::Invalid(s.to_string());
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() {
        return Err(bad());
    }
    let mut rest = t;
    let mut total_nanos: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let nanos_per: f64 = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total_nanos += value * nanos_per;
    }
    if !total_nanos.is_finite() || total_nanos > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(Duration::from_nanos(total_nanos.round() as u64))
}

/// Formats a duration the short way `kubeadm token list` shows TTLs: `23h`, `59m`, `42s`
/// (largest whole unit, rounded down; `0s` for zero).
pub fn format_short(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h", s / 3600)
    } else if s >= 60 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("8760h").unwrap(), Duration::from_secs(8760 * 3600));
        assert_eq!(parse("40s").unwrap(), Duration::from_secs(40));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert_eq!(parse("2m3s4ms").unwrap(), Duration::from_millis(123_004));
        for bad in ["", "h", "10", "10x", "-1s", "1h 2m", "s10"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_short() {
        assert_eq!(format_short(Duration::from_secs(86399)), "23h");
        assert_eq!(format_short(Duration::from_secs(3599)), "59m");
        assert_eq!(format_short(Duration::from_secs(5)), "5s");
        assert_eq!(format_short(Duration::ZERO), "0s");
    }
}
