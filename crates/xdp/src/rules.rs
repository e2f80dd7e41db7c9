//! What an XDP queue steers to relayd: the configuration's `[[xdp.match]]` entries, read
//! and checked here, and compiled into the XDP program's rule table
//! ([`MatchRule`](crate::program::MatchRule)).
//!
//! A packet is steered if any entry matches it; an entry matches if all of its fields do
//! (an absent field matches everything). Ports are destination ports (`ports`) and source
//! ports (`source_ports`), lists of numbers and ranges; an entry with ports matches only
//! TCP and UDP packets. An entry with several port ranges becomes one program rule per
//! pair of ranges, and the program has room for [`MAX_RULES`](crate::program::MAX_RULES).

use relay_core::{IpVersion, Prefix};
use std::fmt;

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port (>= `lo`).
    pub hi: u16,
}

impl PortRange {
    /// Every port.
    pub const ANY: PortRange = PortRange { lo: 0, hi: 65535 };

    /// Reads `5000` or `"6000-6100"` (a TOML integer or string).
    pub fn parse(v: &PortValue<'_>) -> Result<PortRange, String> {
        let one =
            |n: i64| u16::try_from(n).map_err(|_| format!("{n} is not a port number (0-65535)"));
        match v {
            PortValue::Number(n) => one(*n).map(|p| PortRange { lo: p, hi: p }),
            PortValue::Text(s) => {
                let (a, b) = s.split_once('-').unwrap_or((s, s));
                let parse = |t: &str| {
                    t.trim()
                        .parse::<u16>()
                        .map_err(|_| format!("`{s}` is not a port or a range like \"6000-6100\""))
                };
                let (lo, hi) = (parse(a)?, parse(b)?);
                if lo > hi {
                    return Err(format!("range `{s}` runs backwards"));
                }
                Ok(PortRange { lo, hi })
            }
        }
    }
}

/// A port as written in the configuration.
#[derive(Debug, Clone, Copy)]
pub enum PortValue<'a> {
    /// `5000`.
    Number(i64),
    /// `"5000"` or `"6000-6100"`.
    Text(&'a str),
}

/// One `[[xdp.match]]` entry, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Match {
    /// The address family, if the entry names one or its prefixes imply it.
    pub family: Option<IpVersion>,
    /// The IP protocol number (after IPv6's fixed header), if any.
    pub protocol: Option<u8>,
    /// Destination port ranges (empty: any port, and any protocol).
    pub ports: Vec<PortRange>,
    /// Source port ranges (empty: any).
    pub source_ports: Vec<PortRange>,
    /// Source prefix.
    pub source: Option<Prefix>,
    /// Destination prefix.
    pub destination: Option<Prefix>,
}

/// Why a match entry is refused, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchError {
    /// The field (`protocol`, `ports`, ...).
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for MatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for MatchError {}

/// Reads a protocol: a name (`tcp`, `udp`, `icmp`, `icmpv6`, `esp`, `gre`, `sctp`,
/// `ipcomp`, `mpls`) or a number.
pub fn parse_protocol(name: &str) -> Result<u8, String> {
    use relay_core::wire::proto;
    Ok(match name.to_ascii_lowercase().as_str() {
        "tcp" => proto::TCP,
        "udp" => proto::UDP,
        "icmp" => proto::ICMP,
        "icmpv6" | "ipv6-icmp" => proto::ICMPV6,
        "esp" => proto::ESP,
        "gre" => 47,
        "sctp" => 132,
        "ipcomp" => proto::IPCOMP,
        "mpls" | "mpls-in-ip" => proto::MPLS,
        other => other.parse::<u8>().map_err(|_| {
            format!("unknown protocol `{other}` (a name like udp, or a number 0-255)")
        })?,
    })
}

impl Match {
    /// Checks the entry as a whole: prefixes of one family that agrees with `family`,
    /// ports only with TCP or UDP (or no protocol).
    pub fn check(&mut self) -> Result<(), MatchError> {
        let fam = |p: &Prefix| IpVersion::of_addr(p.addr());
        for (field, p) in [("source", self.source), ("destination", self.destination)] {
            let Some(p) = p else { continue };
            match self.family {
                Some(f) if f != fam(&p) => {
                    return Err(MatchError {
                        field,
                        message: format!("{} prefix in a {f} match", fam(&p)),
                    });
                }
                _ => self.family = Some(fam(&p)),
            }
        }
        let has_ports = !self.ports.is_empty() || !self.source_ports.is_empty();
        if has_ports
            && let Some(p) = self.protocol
            && p != relay_core::wire::proto::TCP
            && p != relay_core::wire::proto::UDP
        {
            return Err(MatchError {
                field: "ports",
                message: format!("protocol {p} has no ports (only tcp and udp do)"),
            });
        }
        Ok(())
    }

    /// How many program rules this entry takes (one per pair of port ranges).
    pub fn rule_count(&self) -> usize {
        self.ports.len().max(1) * self.source_ports.len().max(1)
    }

    /// The (source, destination) port range pairs of the entry's rules.
    pub fn port_pairs(&self) -> impl Iterator<Item = (PortRange, PortRange)> + '_ {
        let or_any = |v: &[PortRange]| -> Vec<PortRange> {
            if v.is_empty() {
                vec![PortRange::ANY]
            } else {
                v.to_vec()
            }
        };
        let (s, d) = (or_any(&self.source_ports), or_any(&self.ports));
        s.into_iter()
            .flat_map(move |s| d.clone().into_iter().map(move |d| (s, d)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_ranges_parse() {
        assert_eq!(
            PortRange::parse(&PortValue::Number(53)),
            Ok(PortRange { lo: 53, hi: 53 })
        );
        assert_eq!(
            PortRange::parse(&PortValue::Text("6000-6100")),
            Ok(PortRange { lo: 6000, hi: 6100 })
        );
        assert!(PortRange::parse(&PortValue::Number(70000)).is_err());
        assert!(PortRange::parse(&PortValue::Text("9-1")).is_err());
        assert!(PortRange::parse(&PortValue::Text("x")).is_err());
    }

    #[test]
    fn protocols_by_name_and_number() {
        assert_eq!(parse_protocol("UDP"), Ok(17));
        assert_eq!(parse_protocol("esp"), Ok(50));
        assert_eq!(parse_protocol("132"), Ok(132));
        assert!(parse_protocol("bogus").is_err());
    }

    #[test]
    fn check_infers_the_family_and_refuses_mixes() {
        let mut m = Match {
            source: Some("10.0.0.0/8".parse().unwrap()),
            ..Match::default()
        };
        m.check().unwrap();
        assert_eq!(m.family, Some(IpVersion::V4));
        let mut m = Match {
            source: Some("10.0.0.0/8".parse().unwrap()),
            destination: Some("2001:db8::/32".parse().unwrap()),
            ..Match::default()
        };
        assert_eq!(m.check().unwrap_err().field, "destination");
        let mut m = Match {
            protocol: Some(1),
            ports: vec![PortRange::ANY],
            ..Match::default()
        };
        assert_eq!(m.check().unwrap_err().field, "ports");
    }

    #[test]
    fn port_pairs_are_the_cross_product() {
        let m = Match {
            ports: vec![PortRange { lo: 1, hi: 1 }, PortRange { lo: 2, hi: 3 }],
            source_ports: vec![PortRange { lo: 9, hi: 9 }],
            ..Match::default()
        };
        assert_eq!(m.rule_count(), 2);
        let pairs: Vec<_> = m.port_pairs().collect();
        assert_eq!(
            pairs[1],
            (PortRange { lo: 9, hi: 9 }, PortRange { lo: 2, hi: 3 })
        );
        assert_eq!(Match::default().port_pairs().count(), 1);
    }
}
