//! Parsing of the rate and duration strings the CLI (and experiment scripts) use:
//! `100mbit`, `1gbit`, `500kbit`, plain bits per second; `10s`, `500ms`, `250us`.
//!
//! Rates are relayd's own [`parse_rate`] (tc syntax), so a rate written for relayd's
//! configuration means the same here.

use std::time::Duration;

pub use relay_core::units::{RateError, parse_rate};

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
