//! Builders for whole packets a service answers with: an IP header, a bare TCP segment,
//! the two resets that end a TCP connection, an ICMP / ICMPv6 port unreachable, and the
//! "too big" errors (ICMP "fragmentation needed", ICMPv6 "packet too big") with the rule
//! of who may get one ([`answerable_source`]).
//!
//! Each writes into a buffer the caller owns (no allocation) and returns the length
//! written, or `None` if the buffer is too short or the two addresses are of different
//! families. None of them panics on any input.
//!
//! Resets follow RFC 9293 3.10.7.1 and RFC 5961: the one to the segment's sender carries
//! the segment's acknowledgement number as sequence number, which the sender's stack takes
//! as exact; the one to the receiver, in the sender's name, carries the segment's own
//! sequence number, which the receiver expects next.

use crate::ipv6::{FragmentHeader, next_header};
use crate::{
    IcmpPacket, Icmpv4Repr, Icmpv6Repr, IpRepr, Ipv4Packet, Ipv4Repr, Ipv6Packet, TcpPacket,
    TcpRepr, checksum, icmp, icmpv4, icmpv6, ipv4, ipv6, proto, tcp, tcp::flags,
};
use std::net::{IpAddr, Ipv4Addr};

/// The largest answer worth building: the IPv6 minimum MTU (RFC 8200 5), which every path
/// carries; an ICMPv6 error fills at most this much (RFC 4443 2.4).
pub const MAX_ANSWER: usize = 1280;
/// The largest ICMPv4 error: 576 bytes, what every host accepts (RFC 1812 4.3.2.3).
pub const MAX_ICMP4: usize = 576;

/// Writes an IPv4 (DF set, TTL 64, checksum filled) or IPv6 (hop limit 64) header for
/// `payload` bytes of protocol `p` from `src` to `dst`; returns the header's length.
/// `out` must have room for the header and the payload that follows it.
pub fn emit_ip(out: &mut [u8], src: IpAddr, dst: IpAddr, p: u8, payload: usize) -> Option<usize> {
    let ip = IpRepr::new(src, dst, p, payload)?;
    // The length field must say it: 65535 bytes in all (IPv4) or of payload (IPv6).
    let field = match ip {
        IpRepr::V4(_) => ip.buffer_len(),
        IpRepr::V6(_) => payload,
    };
    u16::try_from(field).ok()?;
    let h = out.get_mut(..ip.buffer_len())?;
    ip.emit(h);
    Some(ip.header_len())
}

/// The pseudo-header sum of TCP, UDP and ICMPv6 (0 for mixed families).
pub fn pseudo(src: IpAddr, dst: IpAddr, p: u8, len: u32) -> u64 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => checksum::pseudo_v4(s, d, p, len),
        (IpAddr::V6(s), IpAddr::V6(d)) => checksum::pseudo_v6(s, d, p, len),
        _ => 0,
    }
}

/// Writes an IP header and a 20-byte TCP header (no options, no data, window 0, checksum
/// filled) to `out`; returns the packet's length.
#[allow(clippy::too_many_arguments)]
pub fn emit_tcp(
    out: &mut [u8],
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    tcp_flags: u8,
) -> Option<usize> {
    let ip_len = emit_ip(out, src, dst, proto::TCP, tcp::HEADER_LEN)?;
    let mut t = TcpPacket::new_unchecked(&mut out[ip_len..ip_len + tcp::HEADER_LEN]);
    TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq,
        ack,
        flags: tcp_flags,
        window: 0,
        urgent: 0,
        options_len: 0,
    }
    .emit(&mut t);
    t.fill_checksum(pseudo(src, dst, proto::TCP, tcp::HEADER_LEN as u32));
    Some(ip_len + tcp::HEADER_LEN)
}

/// Writes an ICMP port unreachable (type 3 code 3) or ICMPv6 port unreachable (type 1
/// code 4) from `src` to `dst` quoting as much of `orig` as the answer's size limit allows
/// ([`MAX_ICMP4`], [`MAX_ANSWER`]); returns its length.
pub fn emit_port_unreachable(
    out: &mut [u8],
    src: IpAddr,
    dst: IpAddr,
    orig: &[u8],
) -> Option<usize> {
    let (p, quote) = match src {
        IpAddr::V4(_) => (proto::ICMP, orig.len().min(MAX_ICMP4 - 28)),
        IpAddr::V6(_) => (proto::ICMPV6, orig.len().min(MAX_ANSWER - 48)),
    };
    let len = icmp::HEADER_LEN + quote;
    let ip_len = emit_ip(out, src, dst, p, len)?;
    let mut m = IcmpPacket::new_unchecked(&mut out[ip_len..ip_len + len]);
    if p == proto::ICMPV6 {
        Icmpv6Repr::DstUnreachable {
            code: icmpv6::dst_unreachable::PORT,
        }
        .emit(&mut m);
    } else {
        Icmpv4Repr::DstUnreachable {
            code: icmpv4::dst_unreachable::PORT,
        }
        .emit(&mut m);
    }
    m.data_mut().copy_from_slice(&orig[..quote]);
    let ps = if p == proto::ICMPV6 {
        pseudo(src, dst, p, len as u32)
    } else {
        0
    };
    m.fill_checksum(ps);
    Some(ip_len + len)
}

/// The TCP facts of a segment a reset answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The segment's source address.
    pub src: IpAddr,
    /// The segment's destination address.
    pub dst: IpAddr,
    /// The source port.
    pub sport: u16,
    /// The destination port.
    pub dport: u16,
    /// The sequence number.
    pub seq: u32,
    /// The acknowledgement number.
    pub ack: u32,
    /// The TCP flags byte.
    pub flags: u8,
    /// The length of the segment's data.
    pub len: u32,
}

/// Writes the reset to the segment's sender (RFC 9293 3.10.7.1 reset generation); returns
/// its length.
pub fn rst_to_sender(s: &Segment, out: &mut [u8]) -> Option<usize> {
    if s.flags & flags::ACK != 0 {
        emit_tcp(out, s.dst, s.src, s.dport, s.sport, s.ack, 0, flags::RST)
    } else {
        let mut ack = s.seq.wrapping_add(s.len);
        if s.flags & flags::SYN != 0 {
            ack = ack.wrapping_add(1);
        }
        if s.flags & flags::FIN != 0 {
            ack = ack.wrapping_add(1);
        }
        emit_tcp(
            out,
            s.dst,
            s.src,
            s.dport,
            s.sport,
            0,
            ack,
            flags::RST | flags::ACK,
        )
    }
}

/// Writes the reset to the segment's receiver, in the sender's name; returns its length,
/// or `None` for a segment without ACK (a SYN: the receiver has no connection yet).
pub fn rst_to_receiver(s: &Segment, out: &mut [u8]) -> Option<usize> {
    if s.flags & flags::ACK == 0 {
        return None;
    }
    emit_tcp(
        out,
        s.src,
        s.dst,
        s.sport,
        s.dport,
        s.seq,
        s.ack,
        flags::RST | flags::ACK,
    )
}

/// Original bytes quoted in an ICMPv4 error: the message stays within 576 bytes (RFC 1812 4.3.2.3).
pub const QUOTE_V4: usize = 576 - 20 - 8;
/// Original bytes quoted in an ICMPv6 error: within the minimum MTU of 1280 (RFC 4443 2.4).
pub const QUOTE_V6: usize = 1280 - 40 - 8;

/// The source of `pkt` if an ICMP error may be sent to it about `pkt`: not about an ICMP
/// error or a later fragment, not to an unspecified, multicast or broadcast source.
pub fn answerable_source(pkt: &[u8]) -> Option<IpAddr> {
    let src = match pkt.first()? >> 4 {
        4 if pkt.len() >= ipv4::HEADER_LEN => {
            // Only the fixed header is read: lengths are the caller's (it hands over the
            // packet as the layout parsed it).
            let ip = Ipv4Packet::new_unchecked(pkt);
            let icmp_type = (ip.protocol() == proto::ICMP)
                .then(|| pkt.get(ip.header_len()).copied())
                .flatten();
            let error = icmp_type.is_some_and(icmpv4::is_error);
            if error || ip.frag_offset() != 0 {
                return None;
            }
            IpAddr::from(ip.src_addr())
        }
        6 if pkt.len() >= ipv6::HEADER_LEN => {
            let ip = Ipv6Packet::new_unchecked(pkt);
            // Directly after the fixed header only: a packet with other extension headers
            // is answered even if it is an error or a later fragment, which RFC 4443 2.4
            // allows to be missed by a router that does not parse them either.
            let after = &pkt[ipv6::HEADER_LEN..];
            let error = ip.next_header() == proto::ICMPV6
                && after.first().is_some_and(|&t| icmpv6::is_error(t));
            let later_fragment = ip.next_header() == next_header::FRAGMENT
                && FragmentHeader::new_checked(after).is_ok_and(|f| f.frag_offset() != 0);
            if error || later_fragment {
                return None;
            }
            IpAddr::from(ip.src_addr())
        }
        _ => return None,
    };
    let broadcast = matches!(src, IpAddr::V4(v) if v.is_broadcast());
    (!src.is_unspecified() && !src.is_multicast() && !broadcast).then_some(src)
}

/// Writes ICMP "fragmentation needed" to `dst` about `pkt` into `b`, with an IP header
/// whose source and identification the kernel fills in (raw(7); it fills the checksum
/// again too).
pub fn frag_needed(b: &mut Vec<u8>, dst: Ipv4Addr, pkt: &[u8], mtu: u16) {
    let quote = &pkt[..pkt.len().min(QUOTE_V4)];
    let mut ip = Ipv4Repr::new(
        Ipv4Addr::UNSPECIFIED,
        dst,
        proto::ICMP,
        icmp::HEADER_LEN + quote.len(),
    );
    // TOS 0xc0: internetwork control, as the kernel's own ICMP errors.
    ip.tos = 0xc0;
    ip.dont_frag = false;
    b.clear();
    b.resize(ip.buffer_len(), 0);
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
    // Destination unreachable, fragmentation needed, next-hop MTU (RFC 1191 4).
    let mut m = IcmpPacket::new_unchecked(&mut b[ip.header_len()..]);
    Icmpv4Repr::FragNeeded { mtu }.emit(&mut m);
    m.data_mut().copy_from_slice(quote);
    m.fill_checksum(0);
}

/// Writes ICMPv6 "packet too big" about `pkt` into `b`, without IPv6 header: the kernel
/// adds it and the checksum.
pub fn packet_too_big(b: &mut Vec<u8>, pkt: &[u8], mtu: u16) {
    let quote = &pkt[..pkt.len().min(QUOTE_V6)];
    b.clear();
    b.resize(icmp::HEADER_LEN + quote.len(), 0);
    let mut m = IcmpPacket::new_unchecked(&mut b[..]);
    Icmpv6Repr::PacketTooBig { mtu: mtu.into() }.emit(&mut m);
    m.data_mut().copy_from_slice(quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Headers, Ipv4Packet, Ipv6Packet};

    fn seg(flags: u8) -> Segment {
        Segment {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            sport: 40000,
            dport: 80,
            seq: 1000,
            ack: 5000,
            flags,
            len: 100,
        }
    }

    #[test]
    fn resets_are_valid_and_aimed() {
        let mut buf = vec![0; MAX_ANSWER];
        let n = rst_to_sender(&seg(flags::ACK | flags::PSH), &mut buf).unwrap();
        let p = Headers::new_checked(&buf[..n]).unwrap();
        let ip = Ipv4Packet::new_checked(&buf[..n]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.dst_addr().to_string(), "10.0.0.1");
        let t = p.tcp().unwrap();
        assert_eq!(
            (t.src_port(), t.dst_port(), t.seq(), t.flags()),
            (80, 40000, 5000, flags::RST)
        );
        let ps = checksum::pseudo_v4([10, 0, 0, 2].into(), [10, 0, 0, 1].into(), 6, 20);
        assert!(t.verify_checksum(ps));

        let n = rst_to_receiver(&seg(flags::ACK), &mut buf).unwrap();
        let p = Headers::new_checked(&buf[..n]).unwrap();
        let t = p.tcp().unwrap();
        assert_eq!(
            (t.dst_port(), t.seq(), t.flags()),
            (80, 1000, flags::RST | flags::ACK)
        );

        // A SYN: reset+ack to the sender acknowledging the SYN, nothing to the receiver.
        let n = rst_to_sender(&seg(flags::SYN), &mut buf).unwrap();
        let p = Headers::new_checked(&buf[..n]).unwrap();
        let t = p.tcp().unwrap();
        assert_eq!((t.ack(), t.flags()), (1101, flags::RST | flags::ACK));
        assert!(rst_to_receiver(&seg(flags::SYN), &mut buf).is_none());
    }

    #[test]
    fn unreachable_quotes_the_original() {
        let mut buf = vec![0; MAX_ANSWER];
        let orig = [0x45u8; 60];
        let n = emit_port_unreachable(
            &mut buf,
            "10.0.0.2".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
            &orig,
        )
        .unwrap();
        let p = Headers::new_checked(&buf[..n]).unwrap();
        let l4 = p.l4().unwrap().to_vec();
        let icmp = IcmpPacket::new_checked(&l4[..]).unwrap();
        assert_eq!((icmp.msg_type(), icmp.code()), (3, 3));
        assert_eq!(checksum::checksum(&l4), 0);
        assert_eq!(&l4[8..], &orig[..]);

        let src: IpAddr = "2001:db8::2".parse().unwrap();
        let dst: IpAddr = "2001:db8::1".parse().unwrap();
        let n = emit_port_unreachable(&mut buf, src, dst, &[0x60; 2000]).unwrap();
        assert_eq!(n, MAX_ANSWER);
        let ip = Ipv6Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(ip.next_header(), 58);
        let ps = pseudo(src, dst, 58, (n - 40) as u32);
        assert_eq!(checksum::fold(checksum::sum(ps, &buf[40..n])), 0xffff);
    }

    #[test]
    fn short_buffers_and_mixed_families_are_refused() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let mut small = [0u8; 39];
        assert_eq!(emit_tcp(&mut small, v4, v4, 1, 2, 0, 0, flags::RST), None);
        let mut buf = [0u8; 128];
        assert_eq!(emit_tcp(&mut buf, v4, v6, 1, 2, 0, 0, flags::RST), None);
        assert_eq!(emit_port_unreachable(&mut buf, v6, v4, &[0; 8]), None);
        assert_eq!(emit_ip(&mut buf, v4, v4, 6, 70_000), None);
    }

    /// An IPv4 ICMP echo request (or, with `ty`, another ICMP message) from `src`.
    fn icmp4(src: [u8; 4], ty: u8, len: usize) -> Vec<u8> {
        let ip = Ipv4Repr::new(src.into(), [127, 0, 0, 2].into(), proto::ICMP, len - 20);
        let mut p = vec![0u8; len];
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut p[..]));
        IcmpPacket::new_unchecked(&mut p[20..]).set_msg_type(ty);
        p
    }

    /// An IPv6 packet from `src` with 8 bytes of `next`, the first of them `first`.
    fn v6(src: std::net::Ipv6Addr, next: u8, first: u8) -> Vec<u8> {
        let ip = crate::Ipv6Repr::new(src, std::net::Ipv6Addr::LOCALHOST, next, 8);
        let mut p = vec![0u8; ip.buffer_len()];
        let mut v = Ipv6Packet::new_unchecked(&mut p[..]);
        ip.emit(&mut v);
        v.payload_mut()[0] = first;
        p
    }

    #[test]
    fn never_answers_errors_or_unanswerable_sources() {
        let lo = [127, 0, 0, 1];
        assert_eq!(answerable_source(&icmp4(lo, 8, 28)), Some(IpAddr::from(lo)));
        assert_eq!(answerable_source(&icmp4(lo, 3, 28)), None, "an error");
        assert_eq!(answerable_source(&icmp4(lo, 8, 28)[..10]), None);
        for src in [[0, 0, 0, 0], [224, 0, 0, 1], [255, 255, 255, 255]] {
            assert_eq!(answerable_source(&icmp4(src, 8, 28)), None, "{src:?}");
        }
        let mut later = icmp4(lo, 8, 28);
        Ipv4Packet::new_unchecked(&mut later[..]).set_frag_offset(8);
        assert_eq!(answerable_source(&later), None, "a later fragment");

        let lo6 = std::net::Ipv6Addr::LOCALHOST;
        assert_eq!(answerable_source(&v6(lo6, 58, 128)), Some(IpAddr::V6(lo6)));
        assert_eq!(answerable_source(&v6(lo6, 58, 2)), None, "an error");
        assert_eq!(
            answerable_source(&v6("ff02::1".parse().unwrap(), 17, 0)),
            None
        );
        assert_eq!(answerable_source(&v6("::".parse().unwrap(), 17, 0)), None);
        let mut frag = v6(lo6, 44, 17);
        assert_eq!(answerable_source(&frag), Some(IpAddr::V6(lo6)), "first");
        FragmentHeader::new_unchecked(&mut frag[40..]).set_frag_offset(8);
        assert_eq!(answerable_source(&frag), None, "a later fragment");
    }

    #[test]
    fn frag_needed_is_rfc_1191_and_quotes_at_most_548_bytes() {
        let orig = icmp4([127, 0, 0, 1], 8, 1500);
        let mut b = Vec::new();
        frag_needed(&mut b, Ipv4Addr::LOCALHOST, &orig, 1476);
        assert_eq!(b.len(), 576);
        let ip = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(ip.total_len(), 576);
        assert_eq!((ip.protocol(), ip.dst_addr()), (1, Ipv4Addr::LOCALHOST));
        let m = IcmpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!((m.msg_type(), m.code()), (3, 4), "type 3 code 4");
        assert_eq!(m.next_hop_mtu(), 1476, "next-hop MTU");
        assert_eq!(checksum::checksum(ip.payload()), 0);
        assert_eq!(m.data(), &orig[..548]);

        packet_too_big(&mut b, &[0x60; 2000], 1280);
        assert_eq!(b.len(), 1280 - 40);
        assert_eq!(&b[..8], &[2, 0, 0, 0, 0, 0, 5, 0]);
    }
}
