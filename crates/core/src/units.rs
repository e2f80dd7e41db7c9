//! Rates and durations as operators write them in configuration files: rates in `tc`
//! syntax ("20mbit", "1gbit", "10mbps" = bytes), durations with a unit ("40ms", "1.5s").
//! One parser each, so every service reads them alike.

use std::time::Duration;

/// Parses a rate in `tc` syntax into bits per second.
///
/// A number with an optional unit: `bit`, `kbit`, `mbit`, `gbit`, `tbit` (powers of
/// 1000), `kibit`, `mibit`, `gibit`, `tibit` (powers of 1024), or the byte-based `bps`,
/// `kbps`, `mbps`, `gbps`, `tbps` (bytes per second, as `tc` reads them). A bare number is
/// bits per second. The error says what was wrong.
pub fn parse_rate(rate: &str) -> Result<u64, String> {
    let s = rate.trim().to_ascii_lowercase();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("\"{rate}\" is not a rate (e.g. \"20mbit\", \"1gbit\")"))?;
    let mult: f64 = match unit.trim() {
        "" | "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        "kibit" => 1024.0,
        "mibit" => 1024.0 * 1024.0,
        "gibit" => 1024.0 * 1024.0 * 1024.0,
        "tibit" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        "tbps" => 8e12,
        u => {
            return Err(format!(
                "\"{rate}\": unknown unit \"{u}\" (bit, kbit, mbit, gbit, tbit, kibit..tibit, or bps..tbps for bytes)"
            ));
        }
    };
    let bits = value * mult;
    if !bits.is_finite() || bits < 1.0 || bits > u64::MAX as f64 / 2.0 {
        return Err(format!("\"{rate}\" is out of range"));
    }
    Ok(bits.round() as u64)
}

/// Parses a duration with a unit: `s`, `ms`, `us` (or `µs`) or `ns`; fractions allowed.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration such as \"40ms\""))?;
    let scale = match unit.trim() {
        "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "" => return Err(format!("`{s}` needs a unit (s, ms, us or ns)")),
        u => return Err(format!("unknown unit `{u}` in `{s}` (use s, ms, us or ns)")),
    };
    let secs = n * scale;
    if !(0.0..=3600.0).contains(&secs) {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("20mbit"), Ok(20_000_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("500kbit"), Ok(500_000));
        assert_eq!(parse_rate("10mbps"), Ok(80_000_000));
        assert_eq!(parse_rate("1.5Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate("1mibit"), Ok(1_048_576));
        assert_eq!(parse_rate("64000"), Ok(64_000));
        assert!(parse_rate("fast").unwrap_err().contains("not a rate"));
        assert!(
            parse_rate("10 furlongs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_rate("0").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("40ms"), Ok(Duration::from_millis(40)));
        assert_eq!(parse_duration("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_duration(" 250us "), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        assert!(parse_duration("40").is_err());
        assert!(parse_duration("40 min").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("-1ms").is_err());
    }
}
