//! Rates as operators write them for tc: "100mbit", "1.5gbit", "800kbit", or bits/s.

/// Parses a rate into bits per second. Refuses tc's byte units ("mbps" is megabytes per
/// second to tc and megabits to most people): only bit, kbit, mbit and gbit are taken.
pub fn parse_rate_bits(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a rate such as \"100mbit\""))?;
    let mult = match unit {
        "" | "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => {
            return Err(format!(
                "unknown rate unit in `{s}` (use bit, kbit, mbit or gbit)"
            ));
        }
    };
    let v = n * mult;
    if !(1.0..1e13).contains(&v) {
        return Err(format!("rate `{s}` out of range"));
    }
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate_bits("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate_bits("1.5Gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate_bits("64000"), Ok(64000));
        assert!(parse_rate_bits("100mbps").is_err());
        assert!(parse_rate_bits("fast").is_err());
        assert!(parse_rate_bits("0mbit").is_err());
    }
}
