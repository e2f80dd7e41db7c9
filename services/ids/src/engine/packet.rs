//! The facts of a packet the rules look at, read once: addresses, ports, TTL, TCP flags
//! and sequence numbers, ICMP type and code, where the payload lies, conntrack state.

use crate::rule::ip_key;
use relay_core::wire::{
    IcmpPacket, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket, checksum, icmp, proto, udp,
};
use relay_core::{CtInfo, IpVersion, Packet};
use std::net::IpAddr;

/// The facts of a packet the rules look at, read once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PktInfo {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) ks: u128,
    pub(crate) kd: u128,
    pub(crate) sport: Option<u16>,
    pub(crate) dport: Option<u16>,
    pub(crate) proto: u8,
    /// 0 TCP, 1 UDP, 2 ICMP, 3 anything else.
    pub(crate) class: usize,
    pub(crate) ttl: u8,
    pub(crate) tcp_flags: u8,
    /// TCP sequence and acknowledgement numbers.
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) icmp: Option<(u8, u8)>,
    /// The payload: `data[pay.0..pay.1]`.
    pub(crate) pay: (usize, usize),
    pub(crate) ct: Option<CtInfo>,
    /// Where the transport header starts, for an unfragmented TCP or UDP packet.
    pub(crate) l4: Option<usize>,
}

/// True unless the TCP or UDP checksum of the unfragmented packet `data` (transport
/// header at `l4`, described by `p`) is wrong: what the receiving host verifies before
/// anything else (`tcp_v4_rcv`'s `tcp_checksum_complete`, `__udp4_lib_rcv`). A UDP/IPv4
/// checksum of 0 means none; a UDP/IPv6 one of 0 is wrong (RFC 8200 section 8.1). Only
/// meaningful when the datapath says the checksum is complete
/// ([`relay_core::Checksum::judged`]).
pub(crate) fn checksum_ok(data: &[u8], p: &PktInfo) -> bool {
    let Some(l4) = p.l4 else { return true };
    let end = p.pay.1;
    let Some(seg) = data.get(l4..end) else {
        return true;
    };
    let len = seg.len() as u32;
    let pseudo = match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_v4(s, d, p.proto, len),
        (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_v6(s, d, p.proto, len),
        _ => return true,
    };
    match p.proto {
        proto::TCP => TcpPacket::new_unchecked(seg).verify_checksum(pseudo),
        proto::UDP => {
            let u = UdpPacket::new_unchecked(seg);
            if u.checksum() == 0 {
                p.src.is_ipv4()
            } else {
                u.verify_checksum(pseudo)
            }
        }
        _ => true,
    }
}

/// Reads the facts of a packet, or `None` if it cannot be parsed. With `defrag` (the
/// detector reassembles fragments, `crate::decode`) a fragment, first or later, has no
/// transport header and no payload, as in Suricata (decode-ipv4.c hands a fragment to
/// reassembly before its transport header is decoded): its bytes are inspected once, in
/// the reassembled packet. Without it a first fragment is read as a whole packet.
pub(crate) fn pkt_info(pkt: &mut Packet, defrag: bool) -> Option<PktInfo> {
    let l = pkt.layout().ok()?;
    let ct = pkt.meta.ct;
    let data = pkt.data();
    let (src, dst, ttl): (IpAddr, IpAddr, u8) = match l.version {
        IpVersion::V4 => {
            let ip = Ipv4Packet::new_unchecked(data);
            (ip.src_addr().into(), ip.dst_addr().into(), ip.ttl())
        }
        IpVersion::V6 => {
            let ip = Ipv6Packet::new_unchecked(data);
            (ip.src_addr().into(), ip.dst_addr().into(), ip.hop_limit())
        }
    };
    let end = l.len.min(data.len());
    let mut p = PktInfo {
        src,
        dst,
        ks: ip_key(src),
        kd: ip_key(dst),
        sport: None,
        dport: None,
        proto: l.proto,
        class: 3,
        ttl,
        tcp_flags: 0,
        seq: 0,
        ack: 0,
        icmp: None,
        pay: (end, end),
        ct,
        l4: None,
    };
    let Some(off) = l.l4.filter(|_| !(defrag && l.fragment)) else {
        return Some(p);
    };
    let l4 = data.get(off..end)?;
    match l.proto {
        proto::TCP => {
            let t = TcpPacket::new_checked(l4).ok()?;
            p.sport = Some(t.src_port());
            p.dport = Some(t.dst_port());
            p.tcp_flags = t.flags();
            p.seq = t.seq();
            p.ack = t.ack();
            p.class = 0;
            p.pay = ((off + t.header_len()).min(end), end);
            p.l4 = (!l.fragment).then_some(off);
        }
        // The length field is not checked: the rules see the bytes as they came.
        proto::UDP if l4.len() >= udp::HEADER_LEN => {
            let u = UdpPacket::new_unchecked(l4);
            p.sport = Some(u.src_port());
            p.dport = Some(u.dst_port());
            p.class = 1;
            p.pay = (off + udp::HEADER_LEN, end);
            p.l4 = (!l.fragment).then_some(off);
        }
        proto::ICMP | proto::ICMPV6 if l4.len() >= icmp::HEADER_LEN => {
            let m = IcmpPacket::new_unchecked(l4);
            p.icmp = Some((m.msg_type(), m.code()));
            p.class = 2;
            p.pay = (off + icmp::HEADER_LEN, end);
        }
        _ => p.pay = (off, end),
    }
    Some(p)
}
