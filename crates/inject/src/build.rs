//! Builders for whole packets a service answers with: an IP header, a bare TCP segment,
//! the two resets that end a TCP connection, and an ICMP / ICMPv6 port unreachable.
//!
//! Each writes into a buffer the caller owns (no allocation) and returns the length
//! written, or `None` if the buffer is too short or the two addresses are of different
//! families. None of them panics on any input.
//!
//! Resets follow RFC 9293 3.10.7.1 and RFC 5961: the one to the segment's sender carries
//! the segment's acknowledgement number as sequence number, which the sender's stack takes
//! as exact; the one to the receiver, in the sender's name, carries the segment's own
//! sequence number, which the receiver expects next.

use relay_core::wire::{
    IcmpPacket, Icmpv4Repr, Icmpv6Repr, IpRepr, TcpPacket, TcpRepr, checksum, icmp, icmpv4, icmpv6,
    proto, tcp, tcp::flags,
};
use std::net::IpAddr;

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

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::Packet;
    use relay_core::wire::Ipv6Packet;

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
        let mut p = Packet::from_bytes(&buf[..n]);
        let ip = p.ipv4().unwrap();
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
        let mut p = Packet::from_bytes(&buf[..n]);
        let t = p.tcp().unwrap();
        assert_eq!(
            (t.dst_port(), t.seq(), t.flags()),
            (80, 1000, flags::RST | flags::ACK)
        );

        // A SYN: reset+ack to the sender acknowledging the SYN, nothing to the receiver.
        let n = rst_to_sender(&seg(flags::SYN), &mut buf).unwrap();
        let mut p = Packet::from_bytes(&buf[..n]);
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
        let mut p = Packet::from_bytes(&buf[..n]);
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
}
