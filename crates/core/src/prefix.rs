//! IP address prefixes from the configuration (`10.0.1.0/24`, `2001:db8::/32`, or a bare
//! address as a host prefix): which traffic a split policy covers, which outer sources a
//! decapsulating service accepts.

use serde::{Deserialize, Deserializer};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 address prefix; a bare address is a host prefix (/32, /128). Host bits
/// below the length are ignored when matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// The bits of `addr`'s family: 32 or 128.
const fn max_len(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

impl Prefix {
    /// The prefix of the first `len` bits of `addr` (host bits below `len` are kept, as
    /// when parsed); `None` if `len` exceeds the family's 32 or 128 bits. `const`, so that
    /// tables of fixed ranges are checked when compiled.
    pub const fn new(addr: IpAddr, len: u8) -> Option<Prefix> {
        if len > max_len(addr) {
            return None;
        }
        Some(Prefix { addr, len })
    }

    /// The prefix holding `addr` alone (/32 or /128).
    pub const fn host(addr: IpAddr) -> Prefix {
        Prefix {
            addr,
            len: max_len(addr),
        }
    }

    /// The address as given (with any host bits below the length; see
    /// [`Prefix::network`]).
    pub const fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    #[allow(
        clippy::len_without_is_empty,
        reason = "a length in bits; no prefix is empty (/0 holds every address)"
    )]
    pub const fn len(&self) -> u8 {
        self.len
    }

    /// Whether the prefix is a single address (/32 or /128).
    pub const fn is_host(&self) -> bool {
        self.len == max_len(self.addr)
    }

    /// The first address of the prefix: the address with the host bits cleared.
    pub fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let m = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
            }
            IpAddr::V6(a) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
            }
        }
    }

    /// True if every address of `self` is inside `outer` (same family, at least as long,
    /// and inside it): `10.0.1.0/24` is within `10.0.0.0/8` and within itself.
    pub fn is_within(&self, outer: &Prefix) -> bool {
        self.len >= outer.len && outer.contains(self.addr)
    }

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

    #[test]
    fn parts_construction_and_nesting() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let p: Prefix = "10.0.2.7/24".parse().unwrap();
        assert_eq!(
            (p.addr(), p.len(), p.network()),
            (ip("10.0.2.7"), 24, ip("10.0.2.0"))
        );
        assert!(!p.is_host());
        assert_eq!(Prefix::new(ip("10.0.2.7"), 24), Some(p));
        assert_eq!(Prefix::new(ip("10.0.0.0"), 33), None);
        assert_eq!(Prefix::new(ip("::"), 129), None);
        let h = Prefix::host(ip("2001:db8::1"));
        assert!(h.is_host() && h.len() == 128 && h.contains(ip("2001:db8::1")));
        assert_eq!(h.to_string(), "2001:db8::1");
        let v6: Prefix = "2001:db8::/32".parse().unwrap();
        assert_eq!(v6.network(), ip("2001:db8::"));
        assert_eq!("::1/0".parse::<Prefix>().unwrap().network(), ip("::"));
        // Nesting: inside and at least as long; never across families.
        let eight: Prefix = "10.0.0.0/8".parse().unwrap();
        assert!(p.is_within(&eight) && p.is_within(&p) && eight.is_within(&eight));
        assert!(!eight.is_within(&p));
        assert!(!"11.0.0.0/24".parse::<Prefix>().unwrap().is_within(&eight));
        assert!(h.is_within(&v6) && !v6.is_within(&h));
        assert!(!Prefix::host(ip("::ffff:10.0.0.1")).is_within(&eight));
        assert!(p.is_within(&"0.0.0.0/0".parse().unwrap()));
        assert!(!p.is_within(&"::/0".parse().unwrap()));
    }
}
