//! Packets captured from Linux for the wire tests (see `testdata/README.md`), and two
//! helpers to reach their transport header and pseudo-header sum.

use super::{Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};

pub(crate) const V4_ECHO_REQUEST: &[u8] = include_bytes!("testdata/v4_echo_request.bin");
pub(crate) const V6_ECHO_REQUEST: &[u8] = include_bytes!("testdata/v6_echo_request.bin");
pub(crate) const V4_TIME_EXCEEDED: &[u8] = include_bytes!("testdata/v4_time_exceeded.bin");
pub(crate) const V6_TIME_EXCEEDED: &[u8] = include_bytes!("testdata/v6_time_exceeded.bin");
pub(crate) const V4_FRAG_NEEDED: &[u8] = include_bytes!("testdata/v4_frag_needed.bin");
pub(crate) const V6_PACKET_TOO_BIG: &[u8] = include_bytes!("testdata/v6_packet_too_big.bin");
pub(crate) const V4_UDP: &[u8] = include_bytes!("testdata/v4_udp.bin");
pub(crate) const V6_UDP: &[u8] = include_bytes!("testdata/v6_udp.bin");
pub(crate) const V4_PORT_UNREACHABLE: &[u8] = include_bytes!("testdata/v4_port_unreachable.bin");
pub(crate) const V6_PORT_UNREACHABLE: &[u8] = include_bytes!("testdata/v6_port_unreachable.bin");
pub(crate) const V4_TCP_SYN: &[u8] = include_bytes!("testdata/v4_tcp_syn.bin");
pub(crate) const V6_TCP_SYN: &[u8] = include_bytes!("testdata/v6_tcp_syn.bin");
pub(crate) const V4_TCP_RST: &[u8] = include_bytes!("testdata/v4_tcp_rst.bin");
pub(crate) const V6_TCP_RST: &[u8] = include_bytes!("testdata/v6_tcp_rst.bin");

/// The bytes after the IP header (none of the captures has IPv6 extension headers).
pub(crate) fn l4(pkt: &[u8]) -> &[u8] {
    match pkt[0] >> 4 {
        4 => &pkt[Ipv4Packet::new_checked(pkt).unwrap().header_len()..],
        _ => &pkt[super::ipv6::HEADER_LEN..],
    }
}

/// The pseudo-header sum of the packet's transport checksum (0 for ICMPv4, which has none).
pub(crate) fn pseudo_of(pkt: &[u8]) -> u64 {
    match pkt[0] >> 4 {
        4 => {
            let r = Ipv4Repr::parse(&Ipv4Packet::new_checked(pkt).unwrap()).unwrap();
            if r.protocol == super::proto::ICMP {
                0
            } else {
                r.pseudo_sum()
            }
        }
        _ => Ipv6Repr::parse(&Ipv6Packet::new_checked(pkt).unwrap())
            .unwrap()
            .pseudo_sum(),
    }
}
