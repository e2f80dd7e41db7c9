//! IP address prefixes from the configuration (`10.0.1.0/24`, `2001:db8::/32`, or a bare
//! address as a host prefix): which traffic a split policy covers, which outer sources a
//! decapsulating service accepts.

use serde::{Deserialize, Deserializer};
use std::net::IpAddr;
use std::str::FromStr;

/// An IPv4 or IPv6 address prefix; a bare address is a host prefix (/32, /128). Host bits
/// below the length are ignored when matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// True if `a` is inside the prefix (never across address families: an IPv4-mapped
    /// IPv6 address is not inside an IPv4 prefix).
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self.addr, a) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                let m = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(p) & m == u32::from(a) & m
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(p) & m == u128::from(a) & m
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let full = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.len == full {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.len)
        }
    }
}

impl FromStr for Prefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Prefix, String> {
        let (a, l) = s.split_once('/').unwrap_or((s, ""));
        let addr: IpAddr = a.trim().parse().map_err(|_| {
            format!("`{s}` is not an address (\"192.0.2.2\") or prefix (\"10.0.1.0/24\")")
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = if l.is_empty() {
            max
        } else {
            l.trim()
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("`{s}`: prefix length must be 0-{max}"))?
        };
        Ok(Prefix { addr, len })
    }
}

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Prefix, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_and_text() {
        let p: Prefix = "10.0.2.0/24".parse().unwrap();
        assert!(p.contains("10.0.2.200".parse().unwrap()));
        assert!(!p.contains("10.0.3.1".parse().unwrap()));
        assert!(!p.contains("::ffff:10.0.2.1".parse().unwrap()));
        assert_eq!(p.to_string(), "10.0.2.0/24");
        let all: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        let host: Prefix = "192.0.2.1".parse().unwrap();
        assert!(host.contains("192.0.2.1".parse().unwrap()));
        assert!(!host.contains("192.0.2.2".parse().unwrap()));
        assert_eq!(host.to_string(), "192.0.2.1");
        let v6: Prefix = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8:1::1".parse().unwrap()));
        assert!(!v6.contains("2001:db9::1".parse().unwrap()));
        assert!(!v6.contains("10.0.1.1".parse().unwrap()));
        assert!(
            "::/0"
                .parse::<Prefix>()
                .unwrap()
                .contains("::1".parse().unwrap())
        );
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
        assert!("2001:db8::/129".parse::<Prefix>().is_err());
        assert!("nonsense/8".parse::<Prefix>().is_err());
        assert!("relay-b".parse::<Prefix>().is_err());
    }
}
