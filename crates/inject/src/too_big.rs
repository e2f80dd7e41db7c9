//! "Packet too big" for the sender of a packet that does not fit the path once a service
//! has grown it: ICMP "fragmentation needed" (RFC 792, RFC 1191) for IPv4 with DF, ICMPv6
//! "packet too big" (RFC 4443) for IPv6, as a router in front of a tunnel sends them.
//! The errors are rate-limited, and errors about errors, about non-first fragments and to
//! sources nobody can answer are never sent (RFC 1812 4.3.2.7, RFC 4443 2.4).

use relay_core::ratelimit::RateLimit;
use relay_core::wire::build;
use relay_core::{Context, Counter, Counters, Tally};
use std::net::IpAddr;

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
            buf: Vec::with_capacity(build::MAX_ANSWER),
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
        let Some(src) = build::answerable_source(pkt) else {
            return Answer::NotAnswered;
        };
        if self.limit.allow(cx.now).is_none() {
            self.suppressed.inc();
            return Answer::Suppressed;
        }
        let emitted = match src {
            IpAddr::V4(a) => {
                build::frag_needed(&mut self.buf, a, pkt, mtu);
                cx.emit(&self.buf, 0, &self.tally)
            }
            IpAddr::V6(a) => {
                build::packet_too_big(&mut self.buf, pkt, mtu);
                cx.emit_icmpv6(&self.buf, a, 0, &self.tally)
            }
        };
        match emitted {
            Ok(()) => Answer::Emitted,
            Err(_) => Answer::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::wire::{IcmpPacket, Ipv4Packet, Ipv4Repr, Ipv6Packet, proto};
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
