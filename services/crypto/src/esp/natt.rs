//! NAT traversal (RFC 3948): ESP inside UDP, usually port 4500, so that a NAT between the
//! relays can rewrite ports as it does for any UDP flow. Here: the encapsulation's ports,
//! how a datagram to the NAT-T port is told apart (ESP, IKE, keepalive), the UDP header of
//! an encapsulated packet (the inner checksum fix-up of transport mode is
//! `Headers::fill_l4_checksum` of the wire crate).

use relay_core::wire::{Ipv6Packet, UdpPacket, checksum, ipv6, proto, udp};
use serde::Deserialize;

pub use crate::live::{NATT_PORT, UdpEncap};

/// `encap` of a manual `encrypt`: how ESP leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encap {
    /// Raw ESP (IP protocol 50).
    #[default]
    None,
    /// ESP in UDP (RFC 3948), for a path through a NAT.
    Udp,
}

/// What a UDP datagram to the NAT-T port carries (RFC 3948 2.2, 2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NattDatagram {
    /// ESP starting at this offset of the packet (a non-zero SPI there).
    Esp(usize),
    /// A zero non-ESP marker: IKE, for the host's IKE daemon.
    Ike,
    /// A one-byte 0xFF payload: a NAT keepalive.
    Keepalive,
    /// A UDP header or payload that cannot be any of these.
    Malformed(&'static str),
}

/// Classifies the UDP datagram at `l4` of `d` (a packet of `len` bytes by its IP header).
pub(crate) fn classify(d: &[u8], l4: usize, len: usize) -> NattDatagram {
    let Some(u) = d.get(l4..len).and_then(|b| UdpPacket::new_checked(b).ok()) else {
        return NattDatagram::Malformed("truncated UDP header");
    };
    if u.len() as usize != len - l4 {
        return NattDatagram::Malformed("UDP length does not match the IP packet");
    }
    match u.payload() {
        [0xff] => NattDatagram::Keepalive,
        [0, 0, 0, 0, ..] => NattDatagram::Ike,
        p if p.len() < 4 => NattDatagram::Malformed("UDP payload shorter than an SPI"),
        _ => NattDatagram::Esp(l4 + udp::HEADER_LEN),
    }
}

/// Writes the UDP header of an encapsulated ESP packet at `at` of `d` (the datagram runs
/// to `end`), checksum 0 (RFC 3948 2.1: IPv4; the IPv6 one is filled by [`fill_udp_v6`]).
pub(crate) fn emit_udp(d: &mut [u8], at: usize, end: usize, e: UdpEncap) {
    let mut u = UdpPacket::new_unchecked(&mut d[at..end]);
    u.set_src_port(e.src_port);
    u.set_dst_port(e.dst_port);
    u.set_len((end - at) as u16);
    u.set_checksum(0);
}

/// Fills the UDP checksum of the datagram at `at` of the IPv6 packet `d` (RFC 6935/6936:
/// IPv6 keeps the UDP checksum, also for ESP in UDP).
pub(crate) fn fill_udp_v6(d: &mut [u8], at: usize, end: usize) {
    let ip = Ipv6Packet::new_unchecked(&d[..ipv6::HEADER_LEN]);
    let pseudo = checksum::pseudo_v6(ip.src_addr(), ip.dst_addr(), proto::UDP, (end - at) as u32);
    UdpPacket::new_unchecked(&mut d[at..end]).fill_checksum(pseudo);
}
