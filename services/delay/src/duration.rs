//! Durations as operators write them: "40ms", "1.5ms", "250us", "2s".

use std::time::Duration;

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
