//! The outer source addresses an inbound SA accepts: its `peer`, an address or a prefix.
//! Checked before any cryptographic work, so that ESP from anywhere else costs nothing
//! but a counter (and an SA cannot be used to decapsulate what a stranger sent).

use serde::{Deserialize, Deserializer};
use std::net::IpAddr;
use std::str::FromStr;

/// An IPv4 or IPv6 address prefix; a bare address is a host prefix (/32, /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    addr: IpAddr,
    len: u8,
}

impl Peer {
    /// True if `a` is inside the prefix (never across address families).
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

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let full = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.len == full {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.len)
        }
    }
}

impl FromStr for Peer {
    type Err = String;

    fn from_str(s: &str) -> Result<Peer, String> {
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
        Ok(Peer { addr, len })
    }
}

impl<'de> Deserialize<'de> for Peer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Peer, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_prefixes() {
        let host: Peer = "192.0.2.2".parse().unwrap();
        assert!(host.contains("192.0.2.2".parse().unwrap()));
        assert!(!host.contains("192.0.2.3".parse().unwrap()));
        assert!(!host.contains("::ffff:192.0.2.2".parse().unwrap()));
        assert_eq!(host.to_string(), "192.0.2.2");
        let site: Peer = "10.0.1.0/24".parse().unwrap();
        assert!(site.contains("10.0.1.77".parse().unwrap()));
        assert!(!site.contains("10.0.2.1".parse().unwrap()));
        assert_eq!(site.to_string(), "10.0.1.0/24");
        let v6: Peer = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8:1::1".parse().unwrap()));
        assert!(!v6.contains("10.0.1.1".parse().unwrap()));
        assert!("0.0.0.0/0".parse::<Peer>().is_ok());
        assert!("10.0.0.0/33".parse::<Peer>().is_err());
        assert!("relay-b".parse::<Peer>().is_err());
    }
}
