//! `reject`: answers a rejected packet the way a host would refuse it (a TCP RST, or an
//! ICMP / ICMPv6 port unreachable for other protocols), emitted into the queue's outbox
//! ([`Context::emit`]), its packets carrying relayd's bypass mark so relayd's own iptables
//! rules do not queue them again.
//!
//! TCP gets two resets: one to the sender and one to the receiver (see
//! [`relay_inject::build`] for how each is aimed). ICMP is never answered with ICMP
//! (RFC 1122 3.2.2), nor a reset with a reset.
//!
//! The answers are rate-limited ([`AnswerLimit`]), like the kernel's own ICMP errors
//! (`icmp_msgs_per_sec` / `icmp_msgs_burst` for the host, `icmp_ratelimit` per
//! destination): a flood with a spoofed source must not turn relayd into a reflector
//! aimed at that source. A suppressed answer is only counted; the packet is dropped all
//! the same.

use relay_core::ratelimit::TokenBucket;
use relay_core::wire::{proto, tcp::flags};
use relay_core::{Context, Counter, IpVersion, Packet, Tally};
use relay_inject::build::{self, MAX_ANSWER, Segment};
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::time::Instant;

/// How many answers `reject` may send, per service instance (one per queue thread).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RejectLimits {
    /// Answers per second, all destinations together.
    pub(crate) rate: u32,
    /// Answers that may leave at once, all destinations together.
    pub(crate) burst: u32,
    /// Answers per second to any one destination address; 0: no per-destination limit.
    pub(crate) dest_rate: u32,
    /// Answers that may leave at once to any one destination address.
    pub(crate) dest_burst: u32,
}

/// Slots of the per-destination table: a fixed size, so a flood of spoofed sources
/// cannot grow it. 1,024 buckets of 40 bytes, 40 KiB per queue thread.
pub(crate) const DEST_SLOTS: usize = 1024;

/// The decision to send an answer: one token bucket for every answer of this queue
/// thread, and one per destination in a fixed table of [`DEST_SLOTS`] buckets indexed by
/// a keyed hash of the address (random per instance, so a sender cannot aim collisions).
/// Destinations that hash to the same slot share its bucket: a collision can only limit
/// more, never less. Nothing is allocated per decision.
#[derive(Debug)]
pub(crate) struct AnswerLimit {
    all: TokenBucket,
    dest: Option<Box<[TokenBucket]>>,
    hasher: RandomState,
}

impl AnswerLimit {
    /// A limiter with full buckets.
    pub(crate) fn new(l: RejectLimits) -> AnswerLimit {
        let dest = (l.dest_rate > 0).then(|| {
            vec![TokenBucket::new(l.dest_rate as f64, l.dest_burst as f64); DEST_SLOTS]
                .into_boxed_slice()
        });
        AnswerLimit {
            all: TokenBucket::new(l.rate as f64, l.burst as f64),
            dest,
            hasher: RandomState::new(),
        }
    }

    /// Whether an answer to `to` may be sent at `now`; if so, its tokens are taken from
    /// both buckets (neither is charged for an answer the other refuses).
    pub(crate) fn allow(&mut self, to: IpAddr, now: Instant) -> bool {
        let all = self.all.ready(now);
        let mut slot = match &mut self.dest {
            // The length is DEST_SLOTS, never 0; `get_mut` keeps this panic-free anyway.
            Some(t) => {
                let i = self.hasher.hash_one(to) as usize % t.len().max(1);
                t.get_mut(i)
            }
            None => None,
        };
        let one = slot.as_mut().is_none_or(|b| b.ready(now));
        if !(all && one) {
            return false;
        }
        self.all.take();
        if let Some(b) = slot {
            b.take();
        }
        true
    }
}

/// Builds rejects for one queue thread and emits them into its outbox.
#[derive(Debug)]
pub(crate) struct Rejecter {
    mark: Option<u32>,
    buf: Vec<u8>,
    tally: Tally,
    suppressed: Counter,
    limit: AnswerLimit,
}

/// The counters a [`Rejecter`] keeps.
#[derive(Debug, Clone)]
pub(crate) struct RejectCounters {
    /// Answers sent (`reject_sent`) and those the datapath could not send
    /// (`reject_errors`), counted by the datapath.
    pub(crate) tally: Tally,
    /// Answers not sent because of the rate limits.
    pub(crate) suppressed: Counter,
}

impl Rejecter {
    /// `mark`: the configured mark, or `None` to take the datapath's bypass mark.
    /// `limits`: how many answers may leave.
    pub(crate) fn new(mark: Option<u32>, limits: RejectLimits, c: RejectCounters) -> Rejecter {
        Rejecter {
            mark,
            buf: vec![0; MAX_ANSWER],
            tally: c.tally,
            suppressed: c.suppressed,
            limit: AnswerLimit::new(limits),
        }
    }

    /// Answers `pkt` (which the caller then drops): the answers go into `cx`'s outbox with
    /// the configured mark (or none) and the queue's stage bits.
    pub(crate) fn reject(&mut self, pkt: &mut Packet, cx: &mut Context) {
        let mark = self.mark.unwrap_or(0);
        let Ok(l) = pkt.layout() else { return };
        let (src, dst): (IpAddr, IpAddr) = match l.version {
            IpVersion::V4 => match pkt.ipv4() {
                Some(ip) => (ip.src_addr().into(), ip.dst_addr().into()),
                None => return,
            },
            IpVersion::V6 => match pkt.ipv6() {
                Some(ip) => (ip.src_addr().into(), ip.dst_addr().into()),
                None => return,
            },
        };
        if l.proto == proto::TCP {
            let Some(t) = pkt.tcp() else { return };
            if t.flags() & flags::RST != 0 {
                return;
            }
            let s = Segment {
                src,
                dst,
                sport: t.src_port(),
                dport: t.dst_port(),
                seq: t.seq(),
                ack: t.ack(),
                flags: t.flags(),
                len: t.payload().len() as u32,
            };
            let mut buf = std::mem::take(&mut self.buf);
            if let Some(n) = build::rst_to_sender(&s, &mut buf) {
                self.send(&buf[..n], s.src, mark, cx);
            }
            if let Some(n) = build::rst_to_receiver(&s, &mut buf) {
                self.send(&buf[..n], s.dst, mark, cx);
            }
            self.buf = buf;
        } else if l.proto != proto::ICMP && l.proto != proto::ICMPV6 {
            let mut buf = std::mem::take(&mut self.buf);
            if let Some(n) = build::emit_port_unreachable(&mut buf, dst, src, &pkt.data()[..l.len])
            {
                self.send(&buf[..n], src, mark, cx);
            }
            self.buf = buf;
        }
    }

    fn send(&mut self, bytes: &[u8], to: IpAddr, mark: u32, cx: &mut Context) {
        if !self.limit.allow(to, cx.now) {
            self.suppressed.inc();
            return;
        }
        // A refusal is counted in the tally (`reject_errors`).
        let _ = cx.emit(bytes, mark, &self.tally);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::Counters;
    use std::time::Duration;

    /// The defaults of the `ids` options.
    const DEFAULT: RejectLimits = RejectLimits {
        rate: 1000,
        burst: 50,
        dest_rate: 10,
        dest_burst: 10,
    };

    /// Only the per-queue limit.
    const NO_DEST: RejectLimits = RejectLimits {
        dest_rate: 0,
        ..DEFAULT
    };

    /// The `i`-th of a flood of 5,000 packets a second: a virtual clock.
    fn at(t0: Instant, i: u64) -> Instant {
        t0 + Duration::from_micros(200 * i)
    }

    #[test]
    fn a_flood_draws_burst_plus_rate_answers() {
        let t0 = Instant::now();
        let victim: IpAddr = "192.0.2.7".parse().unwrap();
        // 10,000 answers in 2 s (5,000/s) through 1000/s, burst 50: 50 + 1000 * 2.
        let mut l = AnswerLimit::new(NO_DEST);
        let n = (0..10_000).filter(|&i| l.allow(victim, at(t0, i))).count();
        assert!((2040..=2050).contains(&n), "{n}");
        // The per-destination limit: one address gets 10 + 10 * 2 of them.
        let mut l = AnswerLimit::new(DEFAULT);
        let n = (0..10_000).filter(|&i| l.allow(victim, at(t0, i))).count();
        assert!((29..=30).contains(&n), "{n}");
    }

    #[test]
    fn one_destinations_flood_leaves_the_others_their_answers() {
        let t0 = Instant::now();
        let victim: IpAddr = "2001:db8::7".parse().unwrap();
        let mut l = AnswerLimit::new(DEFAULT);
        // The victim's burst is 10 of the queue's 50; its refused answers take no token
        // from the queue's bucket, so other addresses share the remaining 40.
        assert_eq!((0..1000).filter(|_| l.allow(victim, t0)).count(), 10);
        let others = (1..=60u32).filter(|&k| l.allow(IpAddr::from([10, 0, 0, k as u8]), t0));
        // (An address whose slot collides with the victim's is refused: hence the range.)
        let n = others.count();
        assert!((30..=40).contains(&n), "{n}");
        // A clock that steps back refills nothing.
        assert!(!l.allow(victim, t0 - Duration::from_secs(5)));
    }

    /// A TCP segment (ACK) or UDP datagram between two loopback addresses.
    fn loopback(p: u8) -> Vec<u8> {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let mut b = vec![0u8; 60];
        let n = match p {
            proto::TCP => build::emit_tcp(&mut b, lo, lo, 40000, 9, 1000, 5000, flags::ACK),
            _ => {
                let n = build::emit_ip(&mut b, lo, lo, proto::UDP, 8).unwrap();
                b[n..n + 8].copy_from_slice(&[0x9c, 0x40, 0, 9, 0, 8, 0, 0]);
                Some(n + 8)
            }
        };
        b.truncate(n.unwrap());
        b
    }

    fn counters(c: &Counters) -> RejectCounters {
        RejectCounters {
            tally: Tally::new(c, "reject_sent", "reject_errors", "reject_errors"),
            suppressed: c.counter("reject_suppressed"),
        }
    }

    fn count(c: &Counters, name: &str) -> u64 {
        c.snapshot()
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map_or(0, |(_, _, v)| v)
    }

    #[test]
    fn rejects_are_emitted_marked_with_the_stage_bits() {
        let c = Counters::new();
        let mut r = Rejecter::new(Some(0x10), DEFAULT, counters(&c));
        let mut cx = Context::new(0, Instant::now());
        cx.bypass_mark = 0x4000_0000;
        // Two resets for a TCP segment, one unreachable for UDP, nothing for a reset.
        r.reject(&mut Packet::from_bytes(&loopback(proto::TCP)), &mut cx);
        r.reject(&mut Packet::from_bytes(&loopback(proto::UDP)), &mut cx);
        let mut rst = loopback(proto::TCP);
        rst[33] |= flags::RST;
        r.reject(&mut Packet::from_bytes(&rst), &mut cx);
        let out: Vec<_> = cx.outbox().iter().collect();
        assert_eq!(out.len(), 3);
        for e in &out {
            assert_eq!(
                e.mark, 0x4000_0010,
                "the configured mark and the stage bits"
            );
        }
        assert_eq!(out[0].bytes[9], proto::TCP);
        assert_ne!(out[0].bytes[33] & flags::RST, 0, "a reset");
        assert_eq!(
            (out[2].bytes[9], out[2].bytes[20]),
            (proto::ICMP, 3),
            "unreachable"
        );
        // The datapath counts what it sent.
        assert_eq!(cx.outbox_mut().settle_all_sent(), 3);
        assert_eq!(
            (count(&c, "reject_sent"), count(&c, "reject_errors")),
            (3, 0)
        );
    }

    #[test]
    fn a_spoofed_flood_through_the_rejecter_sends_at_most_the_limit() {
        let counters = Counters::new();
        let c = self::counters(&counters);
        let mut r = Rejecter::new(Some(0x4000_0000), NO_DEST, c.clone());
        let t0 = Instant::now();
        let mut cx = Context::new(0, t0);
        // 10,000 UDP datagrams at 5,000/s, each answered (to loopback) or suppressed.
        let udp = loopback(proto::UDP);
        for i in 0..10_000 {
            cx.now = at(t0, i);
            r.reject(&mut Packet::from_bytes(&udp), &mut cx);
            cx.outbox_mut().settle_all_sent();
        }
        let sent = count(&counters, "reject_sent");
        let (errors, suppressed) = (count(&counters, "reject_errors"), c.suppressed.get());
        assert_eq!(errors, 0);
        assert!((2040..=2050).contains(&sent), "{sent}");
        assert_eq!(sent + suppressed, 10_000);
        // A TCP segment asks for two answers, each charged: 10 s later the bucket is full
        // (50), so 25 segments are answered in full and the 26th not at all.
        let tcp = loopback(proto::TCP);
        let t1 = at(t0, 10_000) + Duration::from_secs(10);
        cx.now = t1;
        for _ in 0..26 {
            r.reject(&mut Packet::from_bytes(&tcp), &mut cx);
            cx.outbox_mut().settle_all_sent();
        }
        assert_eq!(count(&counters, "reject_sent") - sent, 50);
        assert_eq!(c.suppressed.get() - suppressed, 2);
    }
}
