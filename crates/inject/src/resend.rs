//! Packets a service forwards itself because their verdict cannot carry them: an NFQUEUE
//! verdict keeps the packet's address family, so an encapsulation or decapsulation that
//! changes it (IPv6 inside an IPv4 tunnel, and back) must send the result anew and drop
//! the queued original.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use relay_core::ratelimit::RateLimit;
use relay_core::wire::Ipv4Packet;
use relay_core::{Context, Counter, Counters, IpVersion, Packet};

use crate::{LocalAddrs, RawSender, forwardable};

/// Sends packets anew from raw sockets ([`RawSender::forwarding`]), with the mark a service
/// gave the packet and the stage bits of the sending queue's hook ([`Context::sent_mark`]),
/// and counts what became of them:
///
/// - `reinjected`: handed to the kernel;
/// - `reinject_queue_full`: the egress qdisc dropped it or the socket buffer was full
///   (congestion, as a tail drop of a forwarded packet would be);
/// - `reinject_failed`: any other error (no route, a malformed packet), also logged at
///   most once a second;
/// - `dropped_hop_limit`: a forwarded packet whose TTL or hop limit ran out;
/// - `dropped_local_destination`: a forwarded packet addressed to this box itself, or to
///   an address no router forwards to (loopback, multicast, link-local, ...; see
///   [`forwardable`](crate::forwardable)): sent from a raw socket it would be delivered
///   locally, as if it came from `lo`.
///
/// One per service instance (queue thread); sockets open on first use.
pub struct Resender {
    raw: RawSender,
    reinjected: Counter,
    queue_full: Counter,
    failed: Counter,
    hop_limit: Counter,
    local_dst: Counter,
    local: LocalAddrs,
    log: RateLimit,
}

impl Resender {
    /// A resender counting in `counters`.
    pub fn new(counters: &Counters) -> Resender {
        Resender {
            raw: RawSender::forwarding(),
            reinjected: counters.counter("reinjected"),
            queue_full: counters.counter("reinject_queue_full"),
            failed: counters.counter("reinject_failed"),
            hop_limit: counters.counter("dropped_hop_limit"),
            local_dst: counters.counter("dropped_local_destination"),
            local: LocalAddrs::new(),
            log: RateLimit::new(1),
        }
    }

    /// Sends `pkt` as it is to the destination in its IP header: for a packet this relay
    /// originates in a sense (a new outer header). The caller then drops the original.
    pub fn send(&mut self, pkt: &Packet, cx: &Context) {
        match destination(pkt.data()) {
            Some(to) => self.send_to(pkt, to, cx),
            None => self.failed.inc(),
        }
    }

    /// Like [`Resender::send`] for a packet passing through (a decapsulated inner packet):
    /// its TTL or hop limit is decreased first, as forwarding would, and a packet that
    /// runs out is dropped and counted. So is one addressed to this box or to an address
    /// no router forwards to (`dropped_local_destination`).
    pub fn forward(&mut self, pkt: &mut Packet, cx: &Context) {
        let Some(to) = destination(pkt.data()) else {
            self.failed.inc();
            return;
        };
        if !forwardable(to) || self.local.contains(to, cx.now) {
            self.local_dst.inc();
            return;
        }
        if !decrement_hop(pkt.data_mut()) {
            self.hop_limit.inc();
            return;
        }
        self.send_to(pkt, to, cx);
    }

    fn send_to(&mut self, pkt: &Packet, to: IpAddr, cx: &Context) {
        let mark = cx.sent_mark(pkt.verdict_mark().unwrap_or(0));
        match self.raw.send(pkt.data(), to, mark) {
            Ok(()) => self.reinjected.inc(),
            Err(e) if e.is_queue_full() => self.queue_full.inc(),
            Err(e) => {
                self.failed.inc();
                if let Some(suppressed) = self.log.allow(cx.now) {
                    tracing::warn!(queue = cx.queue, suppressed, "re-sending a packet: {e}");
                }
            }
        }
    }
}

/// The destination address in an IPv4 or IPv6 header.
fn destination(data: &[u8]) -> Option<IpAddr> {
    Some(match IpVersion::of(data)? {
        IpVersion::V4 => {
            let b: [u8; 4] = data.get(16..20)?.try_into().ok()?;
            IpAddr::V4(Ipv4Addr::from(b))
        }
        IpVersion::V6 => {
            let b: [u8; 16] = data.get(24..40)?.try_into().ok()?;
            IpAddr::V6(Ipv6Addr::from(b))
        }
    })
}

/// Decrements the TTL (IPv4, checksum updated) or hop limit (IPv6) as forwarding does;
/// false if the packet may not be forwarded (it would reach 0, or the header is short).
fn decrement_hop(data: &mut [u8]) -> bool {
    match IpVersion::of(data) {
        Some(IpVersion::V4) if data.len() >= 20 => {
            let mut ip = Ipv4Packet::new_unchecked(data);
            match ip.ttl().checked_sub(1).filter(|t| *t > 0) {
                Some(ttl) => {
                    ip.set_ttl(ttl);
                    ip.fill_checksum();
                    true
                }
                None => false,
            }
        }
        Some(IpVersion::V6) if data.len() >= 40 => match data[7].checked_sub(1) {
            Some(h) if h > 0 => {
                data[7] = h;
                true
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_decrease_and_stop_at_one() {
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[7] = 64;
        v6[24..40].copy_from_slice(&"fd00:4::2".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(destination(&v6), Some("fd00:4::2".parse().unwrap()));
        assert!(decrement_hop(&mut v6));
        assert_eq!(v6[7], 63);
        v6[7] = 1;
        assert!(!decrement_hop(&mut v6));

        let mut v4 = [
            0x45, 0, 0, 20, 0, 1, 0, 0, 2, 17, 0, 0, 10, 0, 1, 1, 10, 0, 4, 2,
        ];
        Ipv4Packet::new_unchecked(&mut v4[..]).fill_checksum();
        assert_eq!(destination(&v4), Some("10.0.4.2".parse().unwrap()));
        assert!(decrement_hop(&mut v4));
        let ip = Ipv4Packet::new_checked(&v4[..]).unwrap();
        assert_eq!(ip.ttl(), 1);
        assert!(ip.verify_checksum());
        assert!(!decrement_hop(&mut v4));
    }

    #[test]
    fn short_or_unknown_headers_are_refused() {
        assert_eq!(destination(&[0x45; 10]), None);
        assert_eq!(destination(&[0x55; 40]), None);
        assert!(!decrement_hop(&mut [0x60; 20]));
        assert!(!decrement_hop(&mut []));
    }
}
