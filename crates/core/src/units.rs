//! Rates and durations as operators write them in configuration files and on command
//! lines: rates in `tc` syntax ("20mbit", "1gbit", "10mbps" = bytes), durations with a unit
//! ("40ms", "1.5s"). One parser each, so relayd, its services, relay-traffic and the
//! testbed read them alike.

use serde::Deserialize;
use std::time::Duration;

/// Why a rate string was refused by [`parse_rate`]. Each message quotes the input and
/// says what a rate looks like, so a configuration error can be fixed from it alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RateError {
    /// The string does not start with a number (empty, negative, "fast", "1.2.3").
    #[error("\"{input}\" is not a rate (e.g. \"20mbit\", \"1gbit\", \"500kbit\", \"64000\")")]
    NotANumber {
        /// The string as given.
        input: String,
    },
    /// The number is followed by something that is not a rate unit.
    #[error(
        "\"{input}\" is not a rate: unknown unit \"{unit}\" (bit, kbit, mbit, gbit, tbit, \
         kibit..tibit, k, m, g; or bps, kbps..tbps, kibps..tibps for bytes per second)"
    )]
    UnknownUnit {
        /// The string as given.
        input: String,
        /// The unit as it was read (lower case, trimmed).
        unit: String,
    },
    /// Below 1 bit/s (after rounding), or too large to count in a `u64` of bits.
    #[error("\"{input}\" is out of range (at least 1 bit/s)")]
    OutOfRange {
        /// The string as given.
        input: String,
    },
}

/// Parses a rate in `tc` syntax into bits per second.
///
/// A number (fractions allowed) with an optional unit, case-insensitive, with or without
/// a space before it:
/// - bits per second: `bit`, `kbit`, `mbit`, `gbit`, `tbit` (powers of 1000) and
///   `kibit`, `mibit`, `gibit`, `tibit` (powers of 1024), as `tc(8)` reads them;
/// - bytes per second: `bps`, `kbps`, `mbps`, `gbps`, `tbps` (powers of 1000) and `kibps`,
///   `mibps`, `gibps`, `tibps` (powers of 1024): `tc(8)` reads the `bps` suffixes as
///   **bytes**, so `10mbps` is 80 Mbit/s here too;
/// - `k`, `m`, `g`: short for `kbit`, `mbit`, `gbit` (relay-traffic's CLI took them);
/// - a bare number: bits per second (as in `tc`).
///
/// The result is rounded to whole bits and is at least 1; exponents (`1e6`) and negative
/// numbers are refused. Callers with a stricter floor (tc shapes in bytes per second, so
/// an HTB class needs at least 8 bit/s) check it themselves.
pub fn parse_rate(rate: &str) -> Result<u64, RateError> {
    let s = rate.trim().to_ascii_lowercase();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| RateError::NotANumber {
        input: rate.to_owned(),
    })?;
    const KI: f64 = 1024.0;
    let mult: f64 = match unit.trim() {
        "" | "bit" => 1.0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        "tbit" => 1e12,
        "kibit" => KI,
        "mibit" => KI * KI,
        "gibit" => KI * KI * KI,
        "tibit" => KI * KI * KI * KI,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        "tbps" => 8e12,
        "kibps" => 8.0 * KI,
        "mibps" => 8.0 * KI * KI,
        "gibps" => 8.0 * KI * KI * KI,
        "tibps" => 8.0 * KI * KI * KI * KI,
        u => {
            return Err(RateError::UnknownUnit {
                input: rate.to_owned(),
                unit: u.to_owned(),
            });
        }
    };
    let bits = (value * mult).round();
    // Half of u64::MAX leaves callers room to add rates (an HTB link rate is a sum).
    if !bits.is_finite() || bits < 1.0 || bits > u64::MAX as f64 / 2.0 {
        return Err(RateError::OutOfRange {
            input: rate.to_owned(),
        });
    }
    Ok(bits as u64)
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

/// Parses a 32-bit value written as an integer or as a "0x..." string (marks and SPIs
/// are usually written in hex). For `#[serde(deserialize_with = "de_u32")]`.
pub fn de_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum V {
        N(i64),
        S(String),
    }
    let err = |s: &str| serde::de::Error::custom(format!("{s} is not a 32-bit value"));
    match V::deserialize(d)? {
        V::N(n) => u32::try_from(n).map_err(|_| err(&n.to_string())),
        V::S(s) => {
            let t = s.trim();
            let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(h) => u32::from_str_radix(h, 16),
                None => t.parse(),
            };
            r.map_err(|_| err(&format!("\"{s}\"")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unit, in every spelling users wrote before the three parsers became one.
    #[test]
    fn rates_accepted() {
        let ok = [
            // bits, powers of 1000 (tc, relayd configs, relay-traffic)
            ("64000", 64_000),
            ("64000bit", 64_000),
            ("500kbit", 500_000),
            ("20mbit", 20_000_000),
            ("100mbit", 100_000_000),
            ("1gbit", 1_000_000_000),
            ("2tbit", 2_000_000_000_000),
            // relay-traffic's shorthands
            ("500k", 500_000),
            ("90m", 90_000_000),
            ("1g", 1_000_000_000),
            // bits, powers of 1024
            ("1kibit", 1024),
            ("1mibit", 1_048_576),
            ("1gibit", 1 << 30),
            ("1tibit", 1 << 40),
            // bytes (tc reads bps as bytes per second)
            ("1bps", 8),
            ("2kbps", 16_000),
            ("10mbps", 80_000_000),
            ("1gbps", 8_000_000_000),
            ("1tbps", 8_000_000_000_000),
            ("1kibps", 8 * 1024),
            ("1mibps", 8 << 20),
            ("1gibps", 8 << 30),
            ("1tibps", 8 << 40),
            // case, fractions, spaces
            ("1.5Gbit", 1_500_000_000),
            ("10MBps", 80_000_000),
            ("1KiBit", 1024),
            (" 20 mbit ", 20_000_000),
            (".5kbit", 500),
            ("2.", 2),
            ("1.4", 1),
        ];
        for (input, bits) in ok {
            assert_eq!(parse_rate(input), Ok(bits), "{input:?}");
        }
    }

    #[test]
    fn rates_refused() {
        for input in ["", "  ", "fast", "mbit", "bps", "-1mbit", "1.2.3mbit", "+5"] {
            assert_eq!(
                parse_rate(input),
                Err(RateError::NotANumber {
                    input: input.to_owned()
                }),
                "{input:?}"
            );
        }
        for (input, unit) in [
            ("10 furlongs", "furlongs"),
            ("10parsecs", "parsecs"),
            ("1e6", "e6"),
            ("5t", "t"),
            ("5kb", "kb"),
            ("5 k bit", "k bit"),
            ("5mbit/s", "mbit/s"),
        ] {
            assert_eq!(
                parse_rate(input),
                Err(RateError::UnknownUnit {
                    input: input.to_owned(),
                    unit: unit.to_owned()
                }),
                "{input:?}"
            );
        }
        for input in ["0", "0bit", "0.4", "0.0001kbit", "99999999999999tbit"] {
            assert_eq!(
                parse_rate(input),
                Err(RateError::OutOfRange {
                    input: input.to_owned()
                }),
                "{input:?}"
            );
        }
    }

    #[test]
    fn rate_errors_quote_the_input_and_say_what_a_rate_is() {
        let e = parse_rate("fast").unwrap_err().to_string();
        assert!(e.contains("\"fast\" is not a rate"), "{e}");
        assert!(e.contains("20mbit"), "{e}");
        let e = parse_rate("20 furlongs").unwrap_err().to_string();
        assert!(e.contains("\"20 furlongs\" is not a rate"), "{e}");
        assert!(e.contains("unknown unit \"furlongs\""), "{e}");
        assert!(e.contains("bytes per second"), "{e}");
        let e = parse_rate("0").unwrap_err().to_string();
        assert!(e.contains("\"0\" is out of range"), "{e}");
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
