//! A packet in one line of text, as tcpdump writes it: for the `dump` service and for the
//! log lines of services that tell which packet they dropped.

use crate::packet::{IpVersion, Packet};
use crate::wire::{IcmpPacket, TcpPacket, UdpPacket, proto, tcp::flags};
use std::fmt::Write;

/// Writes a tcpdump-like one-line summary of `pkt` into `out`, e.g.
/// `IP 10.0.1.1.4000 > 10.0.2.2.5000: UDP, length 5`. Never fails on malformed input.
pub fn format_packet(out: &mut String, pkt: &mut Packet) {
    let layout = match pkt.layout() {
        Ok(l) => l,
        Err(e) => {
            let _ = write!(out, "malformed ({e}), {} bytes", pkt.len());
            return;
        }
    };
    let Some(h) = pkt.headers() else { return };
    let ip = h.ip();
    out.push_str(match ip.version() {
        IpVersion::V4 => "IP ",
        IpVersion::V6 => "IP6 ",
    });
    // The packet's real length from its IP header: with a copy range, the bytes may hold
    // only its first part, so lengths are read from header fields, never from slices.
    let (src, dst, full_len) = (ip.src_addr(), ip.dst_addr(), ip.packet_len());
    let l4 = layout.l4.zip(h.l4());
    match (layout.proto, l4) {
        (proto::TCP, Some((off, b))) if b.len() >= 20 => {
            let t = TcpPacket::new_unchecked(b);
            let _ = write!(
                out,
                "{src}.{} > {dst}.{}: Flags [",
                t.src_port(),
                t.dst_port()
            );
            for (bit, c) in [
                (flags::SYN, 'S'),
                (flags::FIN, 'F'),
                (flags::RST, 'R'),
                (flags::PSH, 'P'),
            ] {
                if t.flags() & bit != 0 {
                    out.push(c);
                }
            }
            if t.flags() & flags::ACK != 0 {
                out.push('.');
            }
            let len = full_len.saturating_sub(off + t.header_len());
            let _ = write!(out, "], seq {}, win {}, length {len}", t.seq(), t.window());
        }
        (proto::UDP, Some((_, b))) if b.len() >= 8 => {
            let u = UdpPacket::new_unchecked(b);
            let len = (u.len() as usize).saturating_sub(8);
            let _ = write!(
                out,
                "{src}.{} > {dst}.{}: UDP, length {len}",
                u.src_port(),
                u.dst_port()
            );
        }
        (proto::ICMP | proto::ICMPV6, Some((off, b))) if b.len() >= 8 => {
            let i = IcmpPacket::new_unchecked(b);
            let name = match (layout.proto, i.msg_type()) {
                (proto::ICMP, 8) | (proto::ICMPV6, 128) => "echo request",
                (proto::ICMP, 0) | (proto::ICMPV6, 129) => "echo reply",
                (proto::ICMP, 3) | (proto::ICMPV6, 1) => "unreachable",
                (proto::ICMP, 11) | (proto::ICMPV6, 3) => "time exceeded",
                _ => "type",
            };
            let kind = if layout.proto == proto::ICMP {
                "ICMP"
            } else {
                "ICMP6"
            };
            let len = full_len.saturating_sub(off);
            let _ = write!(
                out,
                "{src} > {dst}: {kind} {name} {}/{}, length {len}",
                i.msg_type(),
                i.code()
            );
        }
        (p, _) => {
            let frag = if layout.fragment { " (fragment)" } else { "" };
            let _ = write!(out, "{src} > {dst}: proto {p}{frag}, length {full_len}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::tests::udp4;

    #[test]
    fn formats_udp_like_tcpdump() {
        let mut s = String::new();
        format_packet(&mut s, &mut Packet::from_bytes(&udp4(b"hello")));
        assert_eq!(s, "IP 10.0.1.1.4000 > 10.0.2.2.5000: UDP, length 5");
        s.clear();
        format_packet(&mut s, &mut Packet::from_bytes(&[0x45, 0, 1]));
        assert_eq!(s, "malformed (truncated), 3 bytes");
    }

    #[test]
    fn partial_copies_print_real_lengths_and_never_panic() {
        let full = udp4(&[1u8; 300]);
        let mut s = String::new();
        let mut p = Packet::from_bytes(&full[..192]);
        p.meta.orig_len = Some(full.len() as u32);
        format_packet(&mut s, &mut p);
        assert_eq!(s, "IP 10.0.1.1.4000 > 10.0.2.2.5000: UDP, length 300");
        // Every cut, with and without the kernel's "partial" flag, every protocol number.
        for proto in [1u8, 6, 17, 58, 99] {
            let mut b = full.clone();
            b[9] = proto;
            for n in 0..b.len() {
                for partial in [false, true] {
                    let mut p = Packet::from_bytes(&b[..n]);
                    if partial {
                        p.meta.orig_len = Some(b.len() as u32);
                    }
                    s.clear();
                    format_packet(&mut s, &mut p);
                }
            }
        }
    }
}
