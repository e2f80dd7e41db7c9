//! Rates in `tc` syntax ("20mbit", "1gbit", "500kbit", "10mbps" = bytes), as the VCAN
//! table writes them.

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
        assert_eq!(parse_rate("64000"), Ok(64_000));
        assert!(parse_rate("fast").unwrap_err().contains("not a rate"));
        assert!(
            parse_rate("10 furlongs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_rate("0").is_err());
    }
}
