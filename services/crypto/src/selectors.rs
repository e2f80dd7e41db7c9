//! Traffic selectors of an IKE child SA (RFC 7296 3.13, RFC 4301 5.2): what an inbound SA
//! may carry. A packet authenticated under the SA but outside what was negotiated is
//! dropped after decryption, so a peer narrowed to one host or port cannot inject
//! packets for any other address through it.

use relay_core::IpVersion;
use relay_core::wire::{IpPacket, Ipv4Packet, Ipv6Packet, ipv4, ipv6, proto};
use std::net::IpAddr;

/// SCTP's protocol number: it has ports where TCP and UDP have them.
const SCTP: u8 = 132;

/// One selector: an address range, an IP protocol (0: any) and a port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selector {
    /// First address (same family as `end`).
    pub start: IpAddr,
    /// Last address.
    pub end: IpAddr,
    /// IP protocol number, 0 for any.
    pub protocol: u8,
    /// First port.
    pub start_port: u16,
    /// Last port.
    pub end_port: u16,
}

/// What one inner packet is, for the selectors: addresses, protocol and, for TCP, UDP and
/// SCTP, its ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flow {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) protocol: u8,
    /// Source and destination ports, when the protocol has them and they were present.
    pub(crate) ports: Option<(u16, u16)>,
}

impl Selector {
    fn has_addr(&self, a: IpAddr) -> bool {
        match (self.start, self.end, a) {
            (IpAddr::V4(s), IpAddr::V4(e), IpAddr::V4(a)) => s <= a && a <= e,
            (IpAddr::V6(s), IpAddr::V6(e), IpAddr::V6(a)) => s <= a && a <= e,
            _ => false,
        }
    }

    /// Whether `addr` with protocol `protocol` and port `port` (`None`: the packet has
    /// none, or it could not be read) lies within the selector. A selector that names
    /// ports takes only packets that carry one in range.
    fn covers(&self, addr: IpAddr, protocol: u8, port: Option<u16>) -> bool {
        self.has_addr(addr) && self.covers_port(protocol, port)
    }

    /// [`Selector::covers`] without the address: the protocol and port alone.
    fn covers_port(&self, protocol: u8, port: Option<u16>) -> bool {
        let any_port = self.start_port == 0 && self.end_port == u16::MAX;
        (self.protocol == 0 || self.protocol == protocol)
            && (any_port || port.is_some_and(|p| self.start_port <= p && p <= self.end_port))
    }
}

/// The selectors of one inbound SA: the peer's side (sources) and ours (destinations).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selectors {
    /// Where the SA's packets may come from (the peer's TS).
    pub remote: Vec<Selector>,
    /// Where they may go (our TS).
    pub local: Vec<Selector>,
    /// A transport-mode SA whose ESP comes in UDP (RFC 3948): the peer's address as IKE
    /// sees it. Behind a NAT the peer's selectors name its private address, but its
    /// transport-mode packets arrive from the NAT's (RFC 7296 2.23.1), so a packet from
    /// this address is taken when the protocol and port lie within the peer's selectors.
    /// A packet from the peer's own selectors' addresses is taken as without it.
    pub nat_peer: Option<IpAddr>,
}

impl Selectors {
    /// Whether `f` lies within both sides.
    pub(crate) fn allow(&self, f: &Flow) -> bool {
        let (sport, dport) = (f.ports.map(|p| p.0), f.ports.map(|p| p.1));
        let translated = self.nat_peer == Some(f.src);
        self.remote.iter().any(|s| {
            s.covers(f.src, f.protocol, sport) || (translated && s.covers_port(f.protocol, sport))
        }) && self
            .local
            .iter()
            .any(|s| s.covers(f.dst, f.protocol, dport))
    }
}

/// The ports at the start of an upper-layer header of `protocol`, if it has them.
fn ports(protocol: u8, l4: &[u8]) -> Option<(u16, u16)> {
    if !matches!(protocol, proto::TCP | proto::UDP | SCTP) {
        return None;
    }
    let p = l4.get(..4)?;
    Some((
        u16::from_be_bytes([p[0], p[1]]),
        u16::from_be_bytes([p[2], p[3]]),
    ))
}

/// The flow of a whole inner IP packet (tunnel mode). `None` if it is not one.
pub(crate) fn inner_flow(packet: &[u8]) -> Option<Flow> {
    // Only the fixed header is read (its length checked): the caller judges the rest.
    let (ip, l4) = match IpVersion::of(packet)? {
        IpVersion::V4 if packet.len() >= ipv4::HEADER_LEN => {
            let v4 = Ipv4Packet::new_unchecked(packet);
            // A later fragment carries no upper-layer header.
            let l4 = (v4.frag_offset() == 0)
                .then(|| packet.get(v4.header_len()..))
                .flatten();
            (IpPacket::V4(v4), l4)
        }
        IpVersion::V6 if packet.len() >= ipv6::HEADER_LEN => (
            IpPacket::V6(Ipv6Packet::new_unchecked(packet)),
            packet.get(ipv6::HEADER_LEN..),
        ),
        _ => return None,
    };
    let protocol = ip.next_header();
    Some(Flow {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        protocol,
        ports: l4.and_then(|l| ports(protocol, l)),
    })
}

/// The flow of a transport-mode packet: the outer addresses, the protocol the ESP trailer
/// named and the upper-layer header at the start of the decrypted payload.
pub(crate) fn transport_flow(src: IpAddr, dst: IpAddr, protocol: u8, payload: &[u8]) -> Flow {
    Flow {
        src,
        dst,
        protocol,
        ports: ports(protocol, payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(start: &str, end: &str, protocol: u8, ports: (u16, u16)) -> Selector {
        Selector {
            start: start.parse().unwrap(),
            end: end.parse().unwrap(),
            protocol,
            start_port: ports.0,
            end_port: ports.1,
        }
    }

    fn flow(src: &str, dst: &str, protocol: u8, ports: Option<(u16, u16)>) -> Flow {
        Flow {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            protocol,
            ports,
        }
    }

    #[test]
    fn packets_outside_the_negotiated_selectors_are_refused() {
        let s = Selectors {
            remote: vec![sel("10.0.3.0", "10.0.3.255", 0, (0, 65535))],
            local: vec![sel("10.0.1.5", "10.0.1.5", proto::UDP, (5000, 5000))],
            nat_peer: None,
        };
        assert!(s.allow(&flow(
            "10.0.3.2",
            "10.0.1.5",
            proto::UDP,
            Some((40000, 5000))
        )));
        // Another destination, port, protocol, source, or family: refused.
        assert!(!s.allow(&flow("10.0.3.2", "10.0.1.6", proto::UDP, Some((1, 5000)))));
        assert!(!s.allow(&flow("10.0.3.2", "10.0.1.5", proto::UDP, Some((1, 5001)))));
        assert!(!s.allow(&flow("10.0.3.2", "10.0.1.5", proto::TCP, Some((1, 5000)))));
        assert!(!s.allow(&flow("10.0.4.2", "10.0.1.5", proto::UDP, Some((1, 5000)))));
        assert!(!s.allow(&flow("fd00::1", "10.0.1.5", proto::UDP, Some((1, 5000)))));
        // No port to read (a later fragment): not within a selector that names ports.
        assert!(!s.allow(&flow("10.0.3.2", "10.0.1.5", proto::UDP, None)));
        // No selectors at all: nothing passes.
        assert!(!Selectors::default().allow(&flow("10.0.3.2", "10.0.1.5", 17, None)));
    }

    /// RFC 7296 2.23.1: a peer behind a NAT negotiated its private subnet; its
    /// transport-mode packets come from the NAT's address, which IKE saw.
    #[test]
    fn transport_mode_behind_a_nat_is_taken_from_the_nat_address_only() {
        let mut s = Selectors {
            remote: vec![sel("10.0.1.0", "10.0.1.255", proto::UDP, (0, 65535))],
            local: vec![sel("10.0.3.0", "10.0.3.255", 0, (0, 65535))],
            nat_peer: None,
        };
        let from_nat = flow("198.51.100.1", "10.0.3.2", proto::UDP, Some((40000, 7000)));
        assert!(!s.allow(&from_nat), "without the NAT's address: refused");
        s.nat_peer = Some("198.51.100.1".parse().unwrap());
        assert!(s.allow(&from_nat));
        assert!(s.allow(&flow("10.0.1.1", "10.0.3.2", proto::UDP, Some((1, 2)))));
        // Still only what was negotiated: the protocol, the local side, other sources.
        assert!(!s.allow(&flow("198.51.100.1", "10.0.3.2", proto::TCP, Some((1, 2)))));
        assert!(!s.allow(&flow("198.51.100.1", "10.0.4.2", proto::UDP, Some((1, 2)))));
        assert!(!s.allow(&flow("198.51.100.9", "10.0.3.2", proto::UDP, Some((1, 2)))));
    }

    #[test]
    fn flows_are_read_from_inner_packets_without_panicking() {
        let mut v4 = vec![
            0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 3, 2, 10, 0, 1, 5,
        ];
        v4.extend_from_slice(&[0x9c, 0x40, 0x13, 0x88, 0, 8, 0, 0]);
        assert_eq!(
            inner_flow(&v4),
            Some(flow("10.0.3.2", "10.0.1.5", 17, Some((40000, 5000))))
        );
        // A later fragment has no ports.
        let mut frag = v4.clone();
        frag[7] = 8;
        assert_eq!(inner_flow(&frag).unwrap().ports, None);
        for n in 0..v4.len() {
            let _ = inner_flow(&v4[..n]);
        }
        assert_eq!(inner_flow(&[0x70; 40]), None);
    }
}
