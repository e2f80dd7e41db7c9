//! The facts of a packet the rules look at, read once: addresses, ports, TTL, TCP flags
//! and sequence numbers, ICMP type and code, where the payload lies, conntrack state.

use crate::rules::rule::ip_key;
use relay_core::wire::{IcmpPacket, IpPacket, TcpPacket, UdpPacket, checksum, icmp, proto, udp};
use relay_core::{CtInfo, Packet};
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
    /// The `stream-event`s normalization raised on the packet
    /// ([`crate::flow::StreamEvent`] bits).
    pub(crate) events: u8,
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
    // The layout parsed, so the fixed header is whole.
    let ip = IpPacket::new_unchecked(data, l.version);
    let (src, dst, ttl) = (ip.src_addr(), ip.dst_addr(), ip.hop_limit());
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
        events: 0,
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

/// Non-padding options a destination options header may hold (Linux's
/// `net.ipv6.max_dst_opts_number`).
const MAX_DST_OPTS: usize = 8;

/// True unless the IPv6 packet `data` carries a destination options header that Linux's
/// `ip6_parse_tlv` makes the receiving host discard the packet for: an option it does not
/// know whose two high bits are not 00 (RFC 8200 section 4.2), more than 8 options,
/// more than 7 bytes of padding in a row, PadN with non-zero bytes (RFC 4942), or an
/// option running past its header. The relay's own kernel reads only hop-by-hop
/// options, so such a packet passes the relay and dies at the host: an insertion. Known
/// options: Pad1, PadN and the Home Address option (Mobile IPv6). IPv4 packets, and
/// IPv6 packets whose headers cannot be walked, are left to the rest of the engine.
pub(crate) fn ipv6_options_ok(data: &[u8]) -> bool {
    if data.first().is_none_or(|b| b >> 4 != 6) {
        return true;
    }
    let Some(&first) = data.get(6) else {
        return true;
    };
    let (mut nh, mut off) = (first, 40usize);
    for _ in 0..8 {
        let (Some(&next), Some(&hlen)) = (data.get(off), data.get(off + 1)) else {
            return true;
        };
        let len = match nh {
            // Hop-by-hop (read by every node, the relay's kernel included), routing.
            0 | 43 => (usize::from(hlen) + 1) * 8,
            60 => {
                let len = (usize::from(hlen) + 1) * 8;
                match data.get(off + 2..off + len) {
                    Some(tlvs) if dest_options_ok(tlvs) => {}
                    Some(_) => return false,
                    // Cut short: the host would refuse it too, but it cannot be a
                    // well-formed packet either; the engine reads what is there.
                    None => return true,
                }
                len
            }
            51 => (usize::from(hlen) + 2) * 4,
            // A fragment header (the reassembled packet is checked) or the upper layer.
            _ => return true,
        };
        nh = next;
        off += len;
    }
    true
}

/// The TLVs of one destination options header, as `ip6_parse_tlv` reads them.
fn dest_options_ok(mut tlvs: &[u8]) -> bool {
    let (mut pad, mut count) = (0usize, 0usize);
    while let Some(&ty) = tlvs.first() {
        if ty == 0 {
            pad += 1;
            if pad > 7 {
                return false;
            }
            tlvs = tlvs.get(1..).unwrap_or(&[]);
            continue;
        }
        let Some(&l) = tlvs.get(1) else { return false };
        let n = usize::from(l) + 2;
        let Some(body) = tlvs.get(2..n) else {
            return false;
        };
        if ty == 1 {
            pad += n;
            if pad > 7 || body.iter().any(|&b| b != 0) {
                return false;
            }
        } else {
            count += 1;
            // 0xC9: Home Address; anything else unknown, judged by its action bits.
            if count > MAX_DST_OPTS || (ty != 0xc9 && ty >> 6 != 0) {
                return false;
            }
            pad = 0;
        }
        tlvs = tlvs.get(n..).unwrap_or(&[]);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(nh: u8, ext: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        b[0] = 0x60;
        b[6] = nh;
        b.extend_from_slice(ext);
        b.extend_from_slice(&[0u8; 20]);
        b
    }

    #[test]
    fn destination_options_are_judged_as_linux_does() {
        // Next header TCP (6), length 0 (8 bytes): an unknown option 0x5E (action 01:
        // discard) with 4 bytes.
        assert!(!ipv6_options_ok(&v6(60, &[6, 0, 0x5e, 4, 0, 0, 0, 0])));
        // Action 00 (skip): kept.
        assert!(ipv6_options_ok(&v6(60, &[6, 0, 0x1e, 4, 0, 0, 0, 0])));
        // PadN with a non-zero byte; six bytes of padding are fine.
        assert!(!ipv6_options_ok(&v6(60, &[6, 0, 1, 4, 0, 0, 7, 0])));
        assert!(ipv6_options_ok(&v6(60, &[6, 0, 1, 4, 0, 0, 0, 0])));
        // Too much padding in a row (two headers' worth).
        assert!(!ipv6_options_ok(&v6(
            60,
            &[6, 1, 1, 4, 0, 0, 0, 0, 1, 4, 0, 0, 0, 0, 0, 0]
        )));
        // An option running past its header.
        assert!(!ipv6_options_ok(&v6(60, &[6, 0, 0x1e, 9, 0, 0, 0, 0])));
        // Behind a hop-by-hop header.
        assert!(!ipv6_options_ok(&v6(
            0,
            &[60, 0, 1, 4, 0, 0, 0, 0, 6, 0, 0x9e, 4, 0, 0, 0, 0]
        )));
        // No extension headers, IPv4, garbage: left alone.
        assert!(ipv6_options_ok(&v6(6, &[])));
        assert!(ipv6_options_ok(&[0x45, 0, 0, 20]));
        for n in 0..48 {
            let p = v6(60, &[6, 0, 0x5e, 4, 0, 0, 0, 0]);
            let _ = ipv6_options_ok(&p[..n]);
        }
    }
}
