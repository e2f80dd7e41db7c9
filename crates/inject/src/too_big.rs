//! "Packet too big" for the sender of a packet that does not fit the path once a service
//! has grown it: ICMP "fragmentation needed" (RFC 792, RFC 1191) for IPv4 with DF, ICMPv6
//! "packet too big" (RFC 4443) for IPv6, as a router in front of a tunnel sends them.
//! The errors are rate-limited, and errors about errors, about non-first fragments and to
//! sources nobody can answer are never sent (RFC 1812 4.3.2.7, RFC 4443 2.4).

use relay_core::ratelimit::RateLimit;
use relay_core::wire::ipv6::{FragmentHeader, next_header};
use relay_core::wire::{
    IcmpPacket, Icmpv4Repr, Icmpv6Repr, Ipv4Packet, Ipv4Repr, Ipv6Packet, icmp, icmpv4, icmpv6,
    ipv4, ipv6, proto,
};
use relay_core::{Context, Counter, Counters, Tally};
use std::net::{IpAddr, Ipv4Addr};

/// Original bytes quoted in an ICMPv4 error: the message stays within 576 bytes (RFC 1812 4.3.2.3).
const QUOTE_V4: usize = 576 - 20 - 8;
/// Original bytes quoted in an ICMPv6 error: within the minimum MTU of 1280 (RFC 4443 2.4).
const QUOTE_V6: usize = 1280 - 40 - 8;

/// What [`TooBig::emit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// The error is in the outbox, to leave after the batch's verdicts.
    Emitted,
    /// The packet must not be answered: not IPv4 or IPv6, an ICMP error itself, a
    /// non-first fragment, or from an unspecified, multicast or broadcast source.
    NotAnswered,
    /// The rate limit held it back (`icmp_too_big_suppressed`).
    Suppressed,
    /// The outbox refused it (`icmp_too_big_failed`).
    Failed,
}

/// Builds "too big" errors on one queue thread and emits them into the queue's outbox
/// ([`Context::emit`]).
///
/// Counters (registered by [`TooBig::new`], the same names in every service that uses it):
/// `icmp_too_big_sent` (the kernel took it), `icmp_too_big_suppressed` (the rate limit),
/// `icmp_too_big_failed` (anything else; a full socket buffer or qdisc included).
#[derive(Debug)]
pub struct TooBig {
    limit: RateLimit,
    buf: Vec<u8>,
    suppressed: Counter,
    tally: Tally,
}

impl TooBig {
    /// The rate limit services use unless they have a reason not to: errors per second
    /// per queue thread.
    pub const DEFAULT_RATE: u32 = 100;

    /// At most `per_second` errors per second leave; the rest are counted in `counters`.
    pub fn new(per_second: u32, counters: &Counters) -> TooBig {
        TooBig {
            limit: RateLimit::new(per_second),
            buf: Vec::with_capacity(QUOTE_V4.max(QUOTE_V6) + 48),
            suppressed: counters.counter("icmp_too_big_suppressed"),
            tally: Tally::new(
                counters,
                "icmp_too_big_sent",
                "icmp_too_big_failed",
                "icmp_too_big_failed",
            ),
        }
    }

    /// Tells the sender of `pkt` (a whole IPv4 or IPv6 packet, from its IP header) that the
    /// path carries packets of at most `mtu` bytes: the error goes into `cx`'s outbox and
    /// carries the queue's stage bits.
    pub fn emit(&mut self, pkt: &[u8], mtu: u16, cx: &mut Context) -> Answer {
        let Some(src) = answerable_source(pkt) else {
            return Answer::NotAnswered;
        };
        if self.limit.allow(cx.now).is_none() {
            self.suppressed.inc();
            return Answer::Suppressed;
        }
        let emitted = match src {
            IpAddr::V4(a) => {
                frag_needed(&mut self.buf, a, pkt, mtu);
                cx.emit(&self.buf, 0, &self.tally)
            }
            IpAddr::V6(a) => {
                packet_too_big(&mut self.buf, pkt, mtu);
                cx.emit_icmpv6(&self.buf, a, 0, &self.tally)
            }
        };
        match emitted {
            Ok(()) => Answer::Emitted,
            Err(_) => Answer::Failed,
        }
    }
}

/// The source of `pkt` if an ICMP error may be sent to it about `pkt`.
fn answerable_source(pkt: &[u8]) -> Option<IpAddr> {
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
fn frag_needed(b: &mut Vec<u8>, dst: Ipv4Addr, pkt: &[u8], mtu: u16) {
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
fn packet_too_big(b: &mut Vec<u8>, pkt: &[u8], mtu: u16) {
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
    use relay_core::wire::checksum;
    use std::time::Instant;

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
        let ip = relay_core::wire::Ipv6Repr::new(src, std::net::Ipv6Addr::LOCALHOST, next, 8);
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

    #[test]
    fn emits_into_the_outbox_and_is_rate_limited() {
        use relay_core::Route;
        let counters = Counters::new();
        let mut tb = TooBig::new(1, &counters);
        let mut cx = Context::new(0, Instant::now());
        cx.bypass_mark = 0x4000_0000;
        let pkt = icmp4([127, 0, 0, 1], 8, 1500);
        assert_eq!(tb.emit(&pkt, 1400, &mut cx), Answer::Emitted);
        assert_eq!(tb.emit(&pkt, 1400, &mut cx), Answer::Suppressed);
        assert_eq!(
            tb.emit(&icmp4([127, 0, 0, 1], 11, 100), 1400, &mut cx),
            Answer::NotAnswered,
            "not counted, not rate-limited"
        );
        cx.now += std::time::Duration::from_secs(1);
        assert_eq!(
            tb.emit(&v6(std::net::Ipv6Addr::LOCALHOST, 17, 0), 1280, &mut cx),
            Answer::Emitted
        );
        let out: Vec<_> = cx.outbox().iter().collect();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].route, Route::Originate);
        assert_eq!(out[0].destination, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(&out[0].bytes[20..22], &[3, 4], "fragmentation needed");
        assert_eq!(out[0].mark, 0x4000_0000, "the queue's stage bits");
        assert_eq!(out[1].route, Route::Icmpv6);
        assert_eq!(
            out[1].destination,
            IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        );
        assert_eq!(
            &out[1].bytes[..8],
            &[2, 0, 0, 0, 0, 0, 5, 0],
            "packet too big"
        );
        // The datapath counts what it sent in the tally the errors carry.
        cx.outbox().get(0).unwrap().1.sent();
        cx.outbox().get(1).unwrap().1.queue_full();
        let snap: std::collections::HashMap<_, _> = counters
            .snapshot()
            .into_iter()
            .map(|(n, _, v)| (n, v))
            .collect();
        assert_eq!(snap["icmp_too_big_sent"], 1);
        assert_eq!(snap["icmp_too_big_suppressed"], 1);
        assert_eq!(snap["icmp_too_big_failed"], 1);
    }
}
