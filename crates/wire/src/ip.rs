//! Either IP header, for code that builds a packet from two addresses of one family
//! without caring which: the one IP header writer of relayd ([`IpRepr::emit`]), used for
//! ICMP errors, TCP resets and tunnel headers alike.
//!
//! [`IpRepr::new`] refuses (`None`) two addresses of different families;
//! [`IpRepr::parse`] fails as [`Ipv4Packet::new_checked`] or [`Ipv6Packet::new_checked`]
//! does, and with [`Malformed::BadVersion`] on a version nibble other than 4 or 6 (or
//! [`Malformed::Truncated`] on an empty buffer).

use super::{Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, Malformed};
use std::net::IpAddr;

/// The high-level form of an IPv4 or IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// An IPv4 header.
    V4(Ipv4Repr),
    /// An IPv6 fixed header.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// A header for `payload_len` bytes of `protocol` from `src` to `dst`, as relayd sends
    /// its own packets ([`Ipv4Repr::new`]: TTL 64, DF; [`Ipv6Repr::new`]: hop limit 64), or
    /// `None` if the addresses are of different families.
    pub fn new(src: IpAddr, dst: IpAddr, protocol: u8, payload_len: usize) -> Option<IpRepr> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                Some(IpRepr::V4(Ipv4Repr::new(s, d, protocol, payload_len)))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                Some(IpRepr::V6(Ipv6Repr::new(s, d, protocol, payload_len)))
            }
            _ => None,
        }
    }

    /// Reads the IP header at the start of `buf`, by its version nibble.
    pub fn parse(buf: &[u8]) -> Result<IpRepr, Malformed> {
        match buf.first().ok_or(Malformed::Truncated)? >> 4 {
            4 => Ipv4Repr::parse(&Ipv4Packet::new_unchecked(buf)).map(IpRepr::V4),
            6 => Ipv6Repr::parse(&Ipv6Packet::new_unchecked(buf)).map(IpRepr::V6),
            _ => Err(Malformed::BadVersion),
        }
    }

    /// The IP version.
    pub const fn version(&self) -> IpVersion {
        match self {
            IpRepr::V4(_) => IpVersion::V4,
            IpRepr::V6(_) => IpVersion::V6,
        }
    }

    /// Source address.
    pub fn src_addr(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.src_addr.into(),
            IpRepr::V6(r) => r.src_addr.into(),
        }
    }

    /// Destination address.
    pub fn dst_addr(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.dst_addr.into(),
            IpRepr::V6(r) => r.dst_addr.into(),
        }
    }

    /// The payload's protocol: the IPv4 protocol or the IPv6 fixed header's next header.
    pub const fn protocol(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.protocol,
            IpRepr::V6(r) => r.next_header,
        }
    }

    /// The TTL or hop limit.
    pub const fn hop_limit(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.ttl,
            IpRepr::V6(r) => r.hop_limit,
        }
    }

    /// Bytes after the header.
    pub const fn payload_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.payload_len,
            IpRepr::V6(r) => r.payload_len,
        }
    }

    /// Sets the bytes after the header.
    pub fn set_payload_len(&mut self, len: usize) {
        match self {
            IpRepr::V4(r) => r.payload_len = len,
            IpRepr::V6(r) => r.payload_len = len,
        }
    }

    /// The header length this form emits: 20 or 40.
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.header_len(),
            IpRepr::V6(r) => r.header_len(),
        }
    }

    /// The whole packet's length.
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len()
    }

    /// Writes the header at the start of `buf` (the IPv4 checksum filled); the payload is
    /// the caller's.
    ///
    /// # Panics
    /// If `buf` is shorter than [`IpRepr::header_len`].
    pub fn emit(&self, buf: &mut [u8]) {
        match self {
            IpRepr::V4(r) => r.emit(&mut Ipv4Packet::new_unchecked(buf)),
            IpRepr::V6(r) => r.emit(&mut Ipv6Packet::new_unchecked(buf)),
        }
    }

    /// The pseudo-header sum of the upper-layer checksum (TCP, UDP, ICMPv6) of the
    /// payload.
    pub fn pseudo_sum(&self) -> u64 {
        match self {
            IpRepr::V4(r) => r.pseudo_sum(),
            IpRepr::V6(r) => r.pseudo_sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{V4_TCP_RST, V6_TCP_RST, pseudo_of};
    use super::*;

    #[test]
    fn emits_the_captured_headers() {
        for pkt in [V4_TCP_RST, V6_TCP_RST] {
            let r = IpRepr::parse(pkt).unwrap();
            assert_eq!(r.buffer_len(), pkt.len());
            assert_eq!(r.pseudo_sum(), pseudo_of(pkt));
            assert_eq!(r.protocol(), 6);
            assert_eq!(r.hop_limit(), 63);
            let mut out = pkt.to_vec();
            out[..r.header_len()].fill(0xee);
            r.emit(&mut out);
            assert_eq!(out, pkt);
        }
    }

    #[test]
    fn new_takes_one_family() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(IpRepr::new(v4, v6, 6, 20), None);
        assert_eq!(IpRepr::new(v6, v4, 6, 20), None);
        let mut r = IpRepr::new(v6, v6, 58, 8).unwrap();
        assert_eq!(
            (r.version(), r.src_addr(), r.dst_addr(), r.header_len()),
            (IpVersion::V6, v6, v6, 40)
        );
        r.set_payload_len(100);
        assert_eq!(r.buffer_len(), 140);
        let r = IpRepr::new(v4, v4, 1, 8).unwrap();
        assert_eq!(
            (r.version(), r.buffer_len(), r.hop_limit()),
            (IpVersion::V4, 28, 64)
        );
        let mut b = [0u8; 28];
        r.emit(&mut b);
        assert!(Ipv4Packet::new_checked(&b[..]).unwrap().verify_checksum());
    }

    #[test]
    fn parse_failures() {
        assert_eq!(IpRepr::parse(&[]), Err(Malformed::Truncated));
        assert_eq!(IpRepr::parse(&[0x50; 40]), Err(Malformed::BadVersion));
        assert_eq!(IpRepr::parse(&V6_TCP_RST[..39]), Err(Malformed::Truncated));
        assert_eq!(IpRepr::parse(&V4_TCP_RST[..39]), Err(Malformed::Truncated));
    }
}

/// An IP version, or address family: of a parsed packet on the hot path, and of a queue's
/// rules (`family = "ipv4"`), of `iptables` / `ip6tables`, of a listener. One type for all
/// of them, so a family has one name in configuration, rules, status and code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpVersion {
    /// IPv4
    V4,
    /// IPv6
    V6,
}

impl IpVersion {
    /// Both versions, IPv4 first.
    pub const ALL: [IpVersion; 2] = [IpVersion::V4, IpVersion::V6];

    /// The configuration name: `ipv4` or `ipv6`.
    pub fn as_str(self) -> &'static str {
        match self {
            IpVersion::V4 => "ipv4",
            IpVersion::V6 => "ipv6",
        }
    }

    /// The version a packet's first byte announces, if it is 4 or 6 (nothing else checked).
    pub fn of(data: &[u8]) -> Option<IpVersion> {
        match data.first()? >> 4 {
            4 => Some(IpVersion::V4),
            6 => Some(IpVersion::V6),
            _ => None,
        }
    }

    /// The version of an address.
    pub fn of_addr(addr: std::net::IpAddr) -> IpVersion {
        if addr.is_ipv4() {
            IpVersion::V4
        } else {
            IpVersion::V6
        }
    }
}

impl std::fmt::Display for IpVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for IpVersion {
    type Err = String;

    /// Accepts the configuration names, `ipv4` and `ipv6`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ipv4" => Ok(IpVersion::V4),
            "ipv6" => Ok(IpVersion::V6),
            _ => Err(format!(
                "unknown address family `{s}` (expected ipv4 or ipv6)"
            )),
        }
    }
}
