//! Kubernetes resource quantities (`500m`, `1.5`, `16Gi`, `129Ki`, `1e3`): parsing to exact
//! milli-units and formatting sums back (mirrors apimachinery's `resource.Quantity`
//! canonical forms closely enough for status summaries).

/// Errors parsing a quantity.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantityError {
    /// Not `<sign><digits>[.<digits>][suffix]`.
    #[error("quantity {0:?} is malformed")]
    Malformed(String),
    /// The value does not fit (beyond ~10^35 milli-units).
    #[error("quantity {0:?} is out of range")]
    Overflow(String),
}

/// Parses a quantity into thousandths of its unit, rounding up (as `Quantity.MilliValue`):
/// `"500m"` → 500, `"2"` → 2000, `"1Ki"` → 1 024 000.
pub fn parse_milli(s: &str) -> Result<i128, QuantityError> {
    let bad = || QuantityError::Malformed(s.to_string());
    let over = || QuantityError::Overflow(s.to_string());
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let num_end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, suffix) = t.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(bad());
    }
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    let digits = format!("{int_part}{frac_part}");
    let mantissa: i128 = digits.parse().map_err(|_| over())?;
    // value = mantissa / 10^frac * base^exp
    let (mul_num, mul_den): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1000),
        "k" => (1000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().map_err(|_| bad())?;
            if exp.unsigned_abs() > 30 {
                return Err(over());
            }
            let p = 10i128.pow(exp.unsigned_abs());
            if exp >= 0 {
                (p, 1)
            } else {
                (1, p)
            }
        }
        _ => return Err(bad()),
    };
    let frac_den = 10i128.checked_pow(frac_part.len() as u32).ok_or_else(over)?;
    let numer = mantissa.checked_mul(mul_num).and_then(|v| v.checked_mul(1000)).ok_or_else(over)?;
    let denom = frac_den.checked_mul(mul_den).ok_or_else(over)?;
    let v = (numer + denom - 1) / denom;
    Ok(if neg { -v } else { v })
}

/// Formats milli-cores as a CPU quantity: `"4"` when whole, else `"3500m"`.
pub fn format_cpu(milli: i128) -> String {
    if milli % 1000 == 0 {
        format!("{}", milli / 1000)
    } else {
        format!("{milli}m")
    }
}

/// Formats a byte count (given in milli-bytes) with the largest binary suffix that divides
/// it exactly (`"16Gi"`, `"129Ki"`, `"1000"`).
pub fn format_bytes(milli: i128) -> String {
    let bytes = (milli + 999) / 1000;
    if bytes == 0 {
        return "0".into();
    }
    for (shift, suffix) in [(60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        let unit = 1i128 << shift;
        if bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Formats a plain count (given in milli-units, rounded up), e.g. pods: `"110"`.
pub fn format_count(milli: i128) -> String {
    ((milli + 999) / 1000).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kube_forms() {
        assert_eq!(parse_milli("500m"), Ok(500));
        assert_eq!(parse_milli("2"), Ok(2000));
        assert_eq!(parse_milli("1.5"), Ok(1500));
        assert_eq!(parse_milli("0.1"), Ok(100));
        assert_eq!(parse_milli("1Ki"), Ok(1024 * 1000));
        assert_eq!(parse_milli("128364572Ki"), Ok(128364572 * 1024 * 1000));
        assert_eq!(parse_milli("186130677487"), Ok(186130677487 * 1000));
        assert_eq!(parse_milli("1e3"), Ok(1_000_000));
        assert_eq!(parse_milli("1k"), Ok(1_000_000));
        assert_eq!(parse_milli("100n"), Ok(1)); // rounded up
        assert_eq!(parse_milli("-2"), Ok(-2000));
        assert_eq!(parse_milli("1.5Gi"), Ok(1536 * 1024 * 1024 * 1000));
        for bad in ["", "m", "1.2.3", "12x", "Gi", "1e"] {
            assert!(parse_milli(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_cpu(4000), "4");
        assert_eq!(format_cpu(3500), "3500m");
        assert_eq!(format_bytes(16 * (1 << 30) * 1000), "16Gi");
        assert_eq!(format_bytes(129 * 1024 * 1000), "129Ki");
        assert_eq!(format_bytes(1000 * 1000), "1000");
        assert_eq!(format_bytes(0), "0");
        assert_eq!(format_count(110_000), "110");
    }
}
