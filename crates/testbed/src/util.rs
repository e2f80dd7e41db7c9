//! Running `ip`/`tc` with errors that show the command line and its stderr, and the `tc`
//! rate syntax needed to size token buckets.

use std::process::Command;

/// `prog arg arg ...` for messages, so a failing step can be replayed by hand.
pub(crate) fn cmdline(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion; `Ok(stdout)` on exit status 0, else a message with stderr.
pub(crate) fn run_quiet(cmd: &mut Command) -> Result<String, String> {
    let line = cmdline(cmd);
    match cmd.output() {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) => Err(format!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("`{line}` could not be run: {e}")),
    }
}

/// Runs `cmd` and returns its stdout; panics with the command line and stderr on failure.
pub(crate) fn run_checked(cmd: &mut Command) -> String {
    run_quiet(cmd).unwrap_or_else(|e| panic!("relay-testbed: {e}"))
}

/// Parses a rate in `tc` syntax into bits per second.
///
/// Accepts a number (bits/s) with an optional suffix: `bit`, `kbit`, `mbit`, `gbit`,
/// `tbit` (powers of 1000), `kibit`, `mibit`, `gibit`, `tibit` (powers of 1024), and the
/// byte-based `bps`, `kbps`, `mbps`, `gbps`, `tbps` (as `tc` reads them: bytes per second).
/// Fractions are allowed (`1.5gbit`). Returns `None` for anything else. Public so tests can
/// compute expected throughput from the same string they gave [`crate::Link::tbf_a`].
pub fn parse_tc_rate(rate: &str) -> Option<u64> {
    let s = rate.trim().to_ascii_lowercase();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().ok()?;
    let mult: f64 = match unit {
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
        _ => return None,
    };
    let bits = value * mult;
    (bits.is_finite() && bits >= 1.0).then_some(bits.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_rates() {
        assert_eq!(parse_tc_rate("100mbit"), Some(100_000_000));
        assert_eq!(parse_tc_rate("1gbit"), Some(1_000_000_000));
        assert_eq!(parse_tc_rate("1.5Gbit"), Some(1_500_000_000));
        assert_eq!(parse_tc_rate("500kbit"), Some(500_000));
        assert_eq!(parse_tc_rate("1mibit"), Some(1_048_576));
        assert_eq!(parse_tc_rate("10mbps"), Some(80_000_000));
        assert_eq!(parse_tc_rate("64000"), Some(64_000));
        assert_eq!(parse_tc_rate("fast"), None);
        assert_eq!(parse_tc_rate("10 furlongs"), None);
        assert_eq!(parse_tc_rate("0"), None);
    }
}
