//! Parsing of the rate and duration strings the CLI (and experiment scripts) use:
//! `100mbit`, `1gbit`, `500kbit`, plain bits per second; `10s`, `500ms`, `250us`.

use std::time::Duration;

/// Parses a rate into bits per second.
///
/// A number (fractions allowed) with an optional suffix: `bit`, `kbit`/`k`, `mbit`/`m`,
/// `gbit`/`g` (powers of 1000, like `tc`). Byte-based suffixes (`mbps`, ...) are refused
/// because `tc` reads them as bytes while people often mean bits.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, unit) = split_number(&t);
    let value: f64 = num.parse().map_err(|_| format!("not a rate: {s:?}"))?;
    let mult = match unit {
        "" | "bit" => 1.0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        u if u.ends_with("bps") => {
            return Err(format!(
                "ambiguous rate unit in {s:?}: write bits per second, e.g. `100mbit`"
            ));
        }
        _ => {
            return Err(format!(
                "unknown rate unit in {s:?} (use bit, kbit, mbit, gbit)"
            ));
        }
    };
    let bits = value * mult;
    if !bits.is_finite() || bits < 1.0 {
        return Err(format!("rate must be at least 1 bit/s: {s:?}"));
    }
    Ok(bits.round() as u64)
}

/// Parses a duration: a number with `h`, `m` (minutes), `s`, `ms`, `us` or `ns`; a bare
/// number means seconds. Fractions allowed (`1.5s`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, unit) = split_number(&t);
    let value: f64 = num.parse().map_err(|_| format!("not a duration: {s:?}"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("unknown duration unit in {s:?} (use s, ms, us, m)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("duration out of range: {s:?}"))
}

fn split_number(t: &str) -> (&str, &str) {
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    (num, unit.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("1.5Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate("500kbit"), Ok(500_000));
        assert_eq!(parse_rate("90m"), Ok(90_000_000));
        assert_eq!(parse_rate("64000"), Ok(64_000));
        assert_eq!(parse_rate("64000bit"), Ok(64_000));
        assert!(parse_rate("10mbps").is_err());
        assert!(parse_rate("bps").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("10parsecs").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 fortnights").is_err());
    }
}
