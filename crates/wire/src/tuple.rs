//! The 5-tuple of a packet (addresses, protocol, ports): the one way relayd reads it, for
//! flow tracking in replay, MPLS classification and the IDS alike.
//!
//! [`FiveTuple::parse`] never panics: it returns `None` for anything that is not an IPv4
//! or IPv6 header it can walk (it checks the header lengths, not the total length, so it
//! also reads the truncated packet an ICMP error quotes).

use super::{IpPacket, IpVersion, Ipv4Packet, Ipv6Packet, ipv4, ipv6, proto};
use std::net::IpAddr;

/// SCTP's protocol number (ports as in UDP's first four bytes).
const SCTP: u8 = 132;
/// UDP-Lite's protocol number (ports as in UDP's first four bytes).
const UDPLITE: u8 = 136;

/// Addresses, protocol and ports of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// The upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Source and destination ports, when the packet has them: TCP, UDP, SCTP and
    /// UDP-Lite with at least four bytes of their header (all four start with the two
    /// ports), not a later fragment.
    pub ports: Option<(u16, u16)>,
}

/// True for the protocols whose header starts with the source and destination ports.
#[inline]
pub const fn has_ports(p: u8) -> bool {
    matches!(p, proto::TCP | proto::UDP | SCTP | UDPLITE)
}

/// The ports at the start of `l4` if `p` has ports and they are there.
#[inline]
pub fn ports(p: u8, l4: &[u8]) -> Option<(u16, u16)> {
    if !has_ports(p) {
        return None;
    }
    let b = l4.get(..4)?;
    Some((
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]]),
    ))
}

impl FiveTuple {
    /// The tuple of a packet whose IP header is `ip`, upper-layer protocol `proto` and
    /// transport bytes `l4` (`None` for a later fragment, which has no ports).
    #[inline]
    pub fn new<T: AsRef<[u8]>>(ip: &IpPacket<T>, proto: u8, l4: Option<&[u8]>) -> FiveTuple {
        FiveTuple {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            proto,
            ports: l4.and_then(|l4| ports(proto, l4)),
        }
    }

    /// The tuple of the IP packet at the start of `data` and the offset of its transport
    /// header, reading only the headers (not the total length): also a quoted packet. A
    /// later fragment has no ports.
    pub fn parse(data: &[u8]) -> Option<(FiveTuple, usize)> {
        let (ip, p, off, later) = match IpVersion::of(data)? {
            IpVersion::V4 => {
                let ip = Ipv4Packet::new_unchecked(data);
                let hl = ip.header_len();
                if data.len() < ipv4::HEADER_LEN || hl < ipv4::HEADER_LEN || data.len() < hl {
                    return None;
                }
                let (p, later) = (ip.protocol(), ip.frag_offset() != 0);
                (IpPacket::V4(ip), p, hl, later)
            }
            IpVersion::V6 => {
                if data.len() < ipv6::HEADER_LEN {
                    return None;
                }
                let ip = Ipv6Packet::new_unchecked(data);
                let (p, off, frag) = ip.upper_layer().ok()?;
                (IpPacket::V6(ip), p, off, frag == Some(false))
            }
        };
        // A later fragment has no transport header: no ports.
        let l4 = (!later).then(|| data.get(off..).unwrap_or(&[]));
        Some((FiveTuple::new(&ip, p, l4), off))
    }

    /// The tuple of the other direction.
    #[inline]
    pub fn reversed(self) -> FiveTuple {
        FiveTuple {
            src: self.dst,
            dst: self.src,
            proto: self.proto,
            ports: self.ports.map(|(s, d)| (d, s)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{V4_UDP, V6_TCP_SYN};
    use super::*;

    #[test]
    fn tuples_of_captures() {
        let (t, off) = FiveTuple::parse(V4_UDP).unwrap();
        assert_eq!((t.proto, off), (17, 20));
        assert!(t.ports.is_some());
        assert_eq!(t.reversed().reversed(), t);
        assert_eq!(t.reversed().src, t.dst);
        let (t, off) = FiveTuple::parse(V6_TCP_SYN).unwrap();
        assert_eq!((t.proto, off), (6, 40));
        for n in 0..V6_TCP_SYN.len() {
            let _ = FiveTuple::parse(&V6_TCP_SYN[..n]);
        }
        assert_eq!(FiveTuple::parse(&[0x45, 0, 0]), None);
        assert_eq!(ports(1, &[0; 8]), None);
    }
}
