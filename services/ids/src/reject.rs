//! `reject`: answers a rejected packet the way a host would refuse it (a TCP RST, or an
//! ICMP / ICMPv6 port unreachable for other protocols), through `relay-inject`'s raw
//! sockets, its packets carrying relayd's bypass mark so relayd's own iptables rules do
//! not queue them again.
//!
//! TCP gets two resets: one to the sender and one to the receiver (see
//! [`relay_inject::build`] for how each is aimed). ICMP is never answered with ICMP
//! (RFC 1122 3.2.2), nor a reset with a reset.

use relay_core::wire::{proto, tcp::flags};
use relay_core::{Counter, IpVersion, Packet, ratelimit::RateLimit};
use relay_inject::RawSender;
use relay_inject::build::{self, MAX_ANSWER, Segment};
use std::net::IpAddr;
use std::time::Instant;

/// Sends rejects for one queue thread; sockets are opened on first use.
#[derive(Debug)]
pub(crate) struct Rejecter {
    mark: Option<u32>,
    raw: RawSender,
    buf: Vec<u8>,
    sent: Counter,
    errors: Counter,
    log: RateLimit,
}

impl Rejecter {
    /// `mark`: the configured mark, or `None` to take the datapath's bypass mark.
    pub(crate) fn new(mark: Option<u32>, sent: Counter, errors: Counter) -> Rejecter {
        Rejecter {
            mark,
            raw: RawSender::new(),
            buf: vec![0; MAX_ANSWER],
            sent,
            errors,
            log: RateLimit::new(1),
        }
    }

    /// The configured mark, if any.
    pub(crate) fn mark(&self) -> Option<u32> {
        self.mark
    }

    /// Answers `pkt` (which the caller then drops); the answers carry `mark`.
    pub(crate) fn reject(&mut self, pkt: &mut Packet, mark: u32, now: Instant) {
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
                self.send(&buf[..n], s.src, mark, now);
            }
            if let Some(n) = build::rst_to_receiver(&s, &mut buf) {
                self.send(&buf[..n], s.dst, mark, now);
            }
            self.buf = buf;
        } else if l.proto != proto::ICMP && l.proto != proto::ICMPV6 {
            let mut buf = std::mem::take(&mut self.buf);
            if let Some(n) = build::emit_port_unreachable(&mut buf, dst, src, &pkt.data()[..l.len])
            {
                self.send(&buf[..n], src, mark, now);
            }
            self.buf = buf;
        }
    }

    fn send(&mut self, bytes: &[u8], to: IpAddr, mark: u32, now: Instant) {
        match self.raw.send(bytes, to, mark) {
            Ok(()) => self.sent.inc(),
            Err(e) => {
                self.errors.inc();
                if let Some(suppressed) = self.log.allow(now) {
                    tracing::warn!(error = %e, %to, suppressed, "ids: cannot send a reject");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::Counters;

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

    #[test]
    fn rejects_leave_marked_through_the_shared_sender() {
        let counters = Counters::new();
        let (sent, errors) = (
            counters.counter("reject_sent"),
            counters.counter("reject_errors"),
        );
        let mut r = Rejecter::new(Some(0x4000_0000), sent.clone(), errors.clone());
        let now = Instant::now();
        // Two resets for a TCP segment, one unreachable for UDP, nothing for a reset.
        r.reject(
            &mut Packet::from_bytes(&loopback(proto::TCP)),
            0x4000_0000,
            now,
        );
        r.reject(
            &mut Packet::from_bytes(&loopback(proto::UDP)),
            0x4000_0000,
            now,
        );
        let mut rst = loopback(proto::TCP);
        rst[33] |= flags::RST;
        r.reject(&mut Packet::from_bytes(&rst), 0x4000_0000, now);
        assert_eq!((sent.get(), errors.get()), (3, 0));
    }
}
