//! Packets a service sends of its own: the outbox of a queue's [`Context`](crate::Context).
//!
//! A service that must send a packet the verdict cannot carry (a tunnel packet of another
//! address family, a decapsulated inner packet, an ICMP error, a TCP reset) does not open
//! a socket: it emits the bytes into the outbox, in the spirit of boringtun's
//! `TunnResult::WriteToNetwork`, and returns its verdict for the queued packet as usual.
//! After the batch's verdicts the datapath sends everything the batch emitted, one
//! `sendmmsg` per address family, and adds what became of each packet to the [`Tally`] the
//! service emitted it with. So a service stays pure (bytes in, bytes and verdicts out, in
//! a unit test without privileges), and the sending, its marks and its errors live in one
//! place.
//!
//! Every emitted packet carries the stage bits of the queue's hook
//! ([`Context::bypass_mark`](crate::Context::bypass_mark)), put on its mark here, so that
//! relayd's own rules at the hooks it has already crossed do not queue it again.
//!
//! The outbox keeps its storage from batch to batch: emitting allocates only while it
//! grows to the largest batch seen. It holds at most [`Outbox::MAX_PACKETS`] packets and
//! [`Outbox::MAX_BYTES`] bytes per batch; beyond that [`EmitError::Full`] is returned and
//! the packet counted as `queue_full` in its tally (the datapath is congested).

use crate::counters::{Counter, Counters};
use crate::packet::IpVersion;
use crate::wire::{Ipv4Packet, Ipv6Packet};
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

/// What became of the packets a service emitted, in the service's own counters: the
/// datapath adds to them once it has tried to send, so `relayd status` shows them under
/// the service that made the packets. Cloning is cheap (one reference count).
#[derive(Debug, Clone)]
pub struct Tally(Arc<TallyCounters>);

#[derive(Debug)]
struct TallyCounters {
    sent: Counter,
    queue_full: Counter,
    failed: Counter,
    /// Registered on first use, except by [`Tally::resend`]: a service that never forwards
    /// shows no forwarding counters.
    hop_limit: OnceLock<Counter>,
    local_destination: OnceLock<Counter>,
    counters: Counters,
}

impl Tally {
    /// The tally of a service that forwards packets anew (an encapsulation or
    /// decapsulation that changes the address family), in the counters every such service
    /// reports:
    ///
    /// - `reinjected`: handed to the kernel;
    /// - `reinject_queue_full`: the egress qdisc dropped it, the socket buffer or the
    ///   outbox was full (congestion, as a tail drop of a forwarded packet would be);
    /// - `reinject_failed`: any other error (no route, a malformed packet);
    /// - `dropped_hop_limit`: a forwarded packet whose TTL or hop limit ran out;
    /// - `dropped_local_destination`: a forwarded packet addressed to this box itself, or
    ///   to an address no router forwards to (see [`forwardable`]).
    pub fn resend(counters: &Counters) -> Tally {
        let t = Tally::new(
            counters,
            "reinjected",
            "reinject_queue_full",
            "reinject_failed",
        );
        t.hop_limit_counter();
        t.local_destination_counter();
        t
    }

    /// A tally counting sent packets in `sent`, congestion in `queue_full` and any other
    /// error in `failed` (the same name may be given twice to count both in one); a
    /// forwarding refusal, if the service forwards, in `dropped_hop_limit` and
    /// `dropped_local_destination` (registered on the first one).
    pub fn new(counters: &Counters, sent: &str, queue_full: &str, failed: &str) -> Tally {
        Tally(Arc::new(TallyCounters {
            sent: counters.counter(sent),
            queue_full: counters.counter(queue_full),
            failed: counters.counter(failed),
            hop_limit: OnceLock::new(),
            local_destination: OnceLock::new(),
            counters: counters.clone(),
        }))
    }

    /// A tally counting nowhere (tests, benches).
    pub fn detached() -> Tally {
        Tally::new(&Counters::new(), "sent", "queue_full", "failed")
    }

    /// Counts a packet the kernel took.
    pub fn sent(&self) {
        self.0.sent.inc();
    }

    /// Counts a packet lost to congestion (outbox, socket buffer or egress qdisc full).
    pub fn queue_full(&self) {
        self.0.queue_full.inc();
    }

    /// Counts a packet that could not be sent for another reason.
    pub fn failed(&self) {
        self.0.failed.inc();
    }

    /// Counts a forwarded packet whose TTL or hop limit ran out.
    pub fn hop_limit(&self) {
        self.hop_limit_counter().inc();
    }

    /// Counts a forwarded packet addressed to this box or to an address no router
    /// forwards to.
    pub fn local_destination(&self) {
        self.local_destination_counter().inc();
    }

    fn hop_limit_counter(&self) -> &Counter {
        let t = &*self.0;
        t.hop_limit
            .get_or_init(|| t.counters.counter("dropped_hop_limit"))
    }

    fn local_destination_counter(&self) -> &Counter {
        let t = &*self.0;
        t.local_destination
            .get_or_init(|| t.counters.counter("dropped_local_destination"))
    }
}

/// How the datapath treats an emitted packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A packet this relay originates (a new outer header, an ICMP error, a reset): sent as
    /// it is to the destination in its IP header.
    Originate,
    /// A packet passing through (a decapsulated inner packet): its TTL or hop limit was
    /// decreased on emission, and the datapath refuses it if it is addressed to one of the
    /// box's own addresses, which a raw socket would deliver locally, as if it came from
    /// `lo`.
    Forward,
    /// An ICMPv6 message without IP header (an error this relay sends as a router would):
    /// the kernel writes the IPv6 header, choosing the source address by route, and the
    /// ICMPv6 checksum.
    Icmpv6,
}

/// Why a packet was not taken into the outbox (it is also counted in its tally).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    /// Not an IPv4 or IPv6 packet whose header holds a destination.
    #[error("not an IP packet with a complete header")]
    NotIp,
    /// The outbox holds as many packets or bytes as a batch may emit.
    #[error("the outbox is full")]
    Full,
    /// A forwarded packet whose TTL or hop limit would reach 0.
    #[error("hop limit exceeded")]
    HopLimit,
    /// A forwarded packet to an address no router forwards to ([`forwardable`]).
    #[error("destination not forwardable")]
    NotForwardable,
}

/// One emitted packet, as the datapath reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emitted<'a> {
    /// The packet, from its IP header (the ICMPv6 message for [`Route::Icmpv6`]).
    pub bytes: &'a [u8],
    /// The mark it leaves with, the queue's stage bits included.
    pub mark: u32,
    /// Its destination, from its IP header (given with the message for [`Route::Icmpv6`]).
    pub destination: IpAddr,
    /// Originated or forwarded.
    pub route: Route,
}

impl Emitted<'_> {
    /// Its address family: its destination's.
    pub fn version(&self) -> IpVersion {
        IpVersion::of_addr(self.destination)
    }
}

#[derive(Debug)]
struct Entry {
    start: usize,
    end: usize,
    mark: u32,
    destination: IpAddr,
    route: Route,
    tally: Tally,
}

/// The packets emitted while one batch ran (see the module docs).
#[derive(Debug, Default)]
pub struct Outbox {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
}

impl Outbox {
    /// The most packets one batch may emit: four per packet of the largest batch (1,024),
    /// room for two resets per packet of an IDS that rejects everything.
    pub const MAX_PACKETS: usize = 4096;
    /// The most bytes one batch may emit.
    pub const MAX_BYTES: usize = 4 << 20;

    /// An empty outbox.
    pub fn new() -> Outbox {
        Outbox::default()
    }

    /// How many packets are waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes `bytes` (a whole IP packet) with `mark` (stage bits already on it).
    pub(crate) fn push(
        &mut self,
        bytes: &[u8],
        mark: u32,
        route: Route,
        tally: &Tally,
    ) -> Result<(), EmitError> {
        let Some((_, destination)) = destination(bytes) else {
            tally.failed();
            return Err(EmitError::NotIp);
        };
        self.push_to(bytes, mark, destination, route, tally)
    }

    /// Takes `bytes` for `destination`.
    pub(crate) fn push_to(
        &mut self,
        bytes: &[u8],
        mark: u32,
        destination: IpAddr,
        route: Route,
        tally: &Tally,
    ) -> Result<(), EmitError> {
        if self.entries.len() >= Self::MAX_PACKETS
            || self.bytes.len() + bytes.len() > Self::MAX_BYTES
        {
            tally.queue_full();
            return Err(EmitError::Full);
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        self.entries.push(Entry {
            start,
            end: self.bytes.len(),
            mark,
            destination,
            route,
            tally: tally.clone(),
        });
        Ok(())
    }

    /// The waiting packets, in the order they were emitted.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Emitted<'_>> {
        self.entries.iter().map(|e| self.view(e))
    }

    /// Packet `i` and its tally.
    pub fn get(&self, i: usize) -> Option<(Emitted<'_>, &Tally)> {
        self.entries.get(i).map(|e| (self.view(e), &e.tally))
    }

    fn view<'a>(&'a self, e: &Entry) -> Emitted<'a> {
        Emitted {
            bytes: &self.bytes[e.start..e.end],
            mark: e.mark,
            destination: e.destination,
            route: e.route,
        }
    }

    /// Counts every waiting packet as sent in its tally and empties the outbox, returning
    /// how many there were: what a datapath whose sends all succeed does. For tests and
    /// offline replay, which send nothing.
    pub fn settle_all_sent(&mut self) -> usize {
        let n = self.entries.len();
        for e in &self.entries {
            e.tally.sent();
        }
        self.clear();
        n
    }

    /// Forgets every waiting packet, keeping the storage (after the datapath sent them).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
    }
}

/// The family and destination address of an IPv4 or IPv6 packet with a complete header.
pub fn destination(data: &[u8]) -> Option<(IpVersion, IpAddr)> {
    match IpVersion::of(data)? {
        IpVersion::V4 => {
            let ip = Ipv4Packet::new_checked(data).ok()?;
            Some((IpVersion::V4, IpAddr::V4(ip.dst_addr())))
        }
        IpVersion::V6 => {
            let ip = Ipv6Packet::new_checked(data).ok()?;
            Some((IpVersion::V6, IpAddr::V6(ip.dst_addr())))
        }
    }
}

/// Decrements the TTL (IPv4, checksum updated) or hop limit (IPv6) as forwarding does;
/// false if the packet may not be forwarded (it would reach 0, or the header is short).
pub fn decrement_hop(data: &mut [u8]) -> bool {
    match IpVersion::of(data) {
        Some(IpVersion::V4) => match Ipv4Packet::new_checked(&mut data[..]) {
            Ok(mut ip) => match ip.ttl().checked_sub(1).filter(|t| *t > 0) {
                Some(ttl) => {
                    ip.set_ttl(ttl);
                    ip.fill_checksum();
                    true
                }
                None => false,
            },
            Err(_) => false,
        },
        Some(IpVersion::V6) => match Ipv6Packet::new_checked(&mut data[..]) {
            Ok(mut ip) => match ip.hop_limit().checked_sub(1).filter(|h| *h > 0) {
                Some(h) => {
                    ip.set_hop_limit(h);
                    true
                }
                None => false,
            },
            Err(_) => false,
        },
        None => false,
    }
}

/// Whether a router may forward a packet to `ip` at all: not unspecified, loopback,
/// multicast, limited broadcast, IPv4 "this network" (0/8), link-local (IPv4 169.254/16,
/// which RFC 3927 2.7 forbids routers to forward, the home of cloud metadata services;
/// IPv6 fe80::/10) or IPv4-mapped (the kernel treats the others as martians or never
/// forwards them).
///
/// A decapsulated packet that relayd sends from a raw socket is routed like one the box
/// originates: to loopback it would be delivered locally, arriving from `lo` where
/// firewalls usually trust everything. A peer that can forge its outer source could then
/// reach services bound to the relay itself, which the kernel's own decapsulation never
/// allows and no router does. So [`Route::Forward`] packets to such addresses are refused,
/// and so are inner packets a verdict would carry ([`Context::pass_inner`](crate::Context::pass_inner)).
pub fn forwardable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            !(a.octets()[0] == 0
                || a.is_loopback()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_link_local())
        }
        IpAddr::V6(a) => {
            !(a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || a.is_unicast_link_local()
                || a.to_ipv4_mapped().is_some())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;
    use crate::wire::Ipv4Packet;
    use std::net::Ipv6Addr;
    use std::time::Instant;

    fn counts(c: &Counters) -> std::collections::HashMap<String, u64> {
        c.snapshot().into_iter().map(|(n, _, v)| (n, v)).collect()
    }

    fn v4(dst: [u8; 4], ttl: u8) -> Vec<u8> {
        let mut v4 = vec![
            0x45, 0, 0, 20, 0, 1, 0, 0, ttl, 17, 0, 0, 10, 0, 1, 1, dst[0], dst[1], dst[2], dst[3],
        ];
        Ipv4Packet::new_unchecked(&mut v4[..]).fill_checksum();
        v4
    }

    fn v6(dst: &str, hops: u8) -> Vec<u8> {
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        v6[7] = hops;
        v6[24..40].copy_from_slice(&dst.parse::<Ipv6Addr>().unwrap().octets());
        v6
    }

    #[test]
    fn hops_decrease_and_stop_at_one() {
        let mut p = v6("fd00:4::2", 64);
        assert_eq!(
            destination(&p),
            Some((IpVersion::V6, "fd00:4::2".parse().unwrap()))
        );
        assert!(decrement_hop(&mut p));
        assert_eq!(p[7], 63);
        p[7] = 1;
        assert!(!decrement_hop(&mut p));

        let mut p = v4([10, 0, 4, 2], 2);
        assert_eq!(
            destination(&p),
            Some((IpVersion::V4, "10.0.4.2".parse().unwrap()))
        );
        assert!(decrement_hop(&mut p));
        let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert_eq!(ip.ttl(), 1);
        assert!(ip.verify_checksum());
        assert!(!decrement_hop(&mut p));
    }

    #[test]
    fn short_or_unknown_headers_are_refused() {
        assert_eq!(destination(&[0x45; 10]), None);
        assert_eq!(destination(&[0x55; 40]), None);
        assert!(!decrement_hop(&mut [0x60; 20]));
        assert!(!decrement_hop(&mut []));
    }

    #[test]
    fn only_routable_destinations_are_forwardable() {
        for bad in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.9.9.9",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "ff02::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "169.254.169.254",
            "169.254.1.1",
        ] {
            assert!(!forwardable(bad.parse().unwrap()), "{bad}");
        }
        for good in ["10.0.2.2", "192.0.2.1", "fd00:2::2", "2001:db8::1"] {
            assert!(forwardable(good.parse().unwrap()), "{good}");
        }
    }

    #[test]
    fn emitted_packets_carry_the_stage_bits_and_keep_their_order() {
        let c = Counters::new();
        let tally = Tally::resend(&c);
        let mut cx = Context::new(3, Instant::now());
        cx.bypass_mark = 0x4000_0000;
        cx.stages = crate::StageMark::DEFAULT;
        let stage = cx.sent_mark(0x12);
        assert_ne!(stage, 0x12, "the stage bits are put on");
        cx.emit(&v4([10, 0, 2, 2], 64), 0x12, &tally).unwrap();
        let mut fwd = v6("fd00:2::2", 64);
        cx.forward(&mut fwd, 0, &tally).unwrap();
        assert_eq!(fwd[7], 63, "forwarding decreased the hop limit");
        let out: Vec<_> = cx.outbox().iter().collect();
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[0].version(), out[0].route, out[0].mark),
            (IpVersion::V4, Route::Originate, stage)
        );
        assert_eq!(out[0].destination, "10.0.2.2".parse::<IpAddr>().unwrap());
        assert_eq!(
            (out[1].version(), out[1].route),
            (IpVersion::V6, Route::Forward)
        );
        assert_eq!(out[1].bytes, &fwd[..]);
        cx.outbox_mut().clear();
        assert!(cx.outbox().is_empty());
    }

    #[test]
    fn refusals_are_counted_in_the_tally() {
        let c = Counters::new();
        let tally = Tally::resend(&c);
        let mut cx = Context::new(0, Instant::now());
        assert_eq!(cx.emit(&[0x45; 8], 0, &tally), Err(EmitError::NotIp));
        assert_eq!(
            cx.forward(&mut v4([127, 0, 0, 1], 64), 0, &tally),
            Err(EmitError::NotForwardable)
        );
        assert_eq!(
            cx.forward(&mut v6("fd00:2::2", 1), 0, &tally),
            Err(EmitError::HopLimit)
        );
        let n = counts(&c);
        assert_eq!(n["reinject_failed"], 1);
        assert_eq!(n["dropped_local_destination"], 1);
        assert_eq!(n["dropped_hop_limit"], 1);
        assert!(cx.outbox().is_empty());
    }

    #[test]
    fn a_full_outbox_refuses_and_counts_congestion() {
        let c = Counters::new();
        let tally = Tally::resend(&c);
        let mut cx = Context::new(0, Instant::now());
        let p = v4([10, 0, 2, 2], 64);
        for _ in 0..Outbox::MAX_PACKETS {
            cx.emit(&p, 0, &tally).unwrap();
        }
        assert_eq!(cx.emit(&p, 0, &tally), Err(EmitError::Full));
        assert_eq!(counts(&c)["reinject_queue_full"], 1);
        assert_eq!(cx.outbox().len(), Outbox::MAX_PACKETS);
    }

    /// The decision of every decapsulating service ([`Context::pass_inner`]): an inner
    /// packet never reaches the box itself, whatever the hook.
    #[test]
    fn an_inner_packet_is_never_delivered_locally() {
        use crate::{Action, Hook, Packet};
        let c = Counters::new();
        let tally = Tally::resend(&c);
        let mut cx = Context::new(0, Instant::now());
        cx.set_local_addresses(std::sync::Arc::from([
            "10.0.2.1".parse::<IpAddr>().unwrap(),
            "10.0.2.255".parse().unwrap(),
            "fd00:2::1".parse().unwrap(),
        ]));
        let pass = |cx: &mut Context, bytes: Vec<u8>, hook: Hook, hw: u16| {
            let mut p = Packet::from_bytes(&bytes);
            (p.meta.hook, p.meta.hw_protocol) = (Some(hook), hw);
            cx.pass_inner(&mut p, &tally)
        };
        let refused = [
            v4([127, 0, 0, 1], 64),
            v4([127, 1, 2, 3], 64),
            v4([0, 0, 0, 0], 64),
            v4([224, 0, 0, 1], 64),
            v4([255, 255, 255, 255], 64),
            v4([169, 254, 169, 254], 64),
            v4([10, 0, 2, 1], 64),
            v4([10, 0, 2, 255], 64),
            v6("::1", 64),
            v6("::", 64),
            v6("ff02::1", 64),
            v6("fe80::1", 64),
            v6("::ffff:127.0.0.1", 64),
            v6("::ffff:10.0.2.1", 64),
            v6("fd00:2::1", 64),
        ];
        let mut n = 0;
        for hook in Hook::ALL {
            for p in &refused {
                assert_eq!(pass(&mut cx, p.clone(), hook, 0), Action::Drop, "{hook:?}");
                n += 1;
            }
        }
        assert_eq!(counts(&c)["dropped_local_destination"], n);
        assert!(cx.outbox().is_empty(), "nothing refused is sent either");
        // Elsewhere the verdict carries it, except on INPUT (local delivery whatever the
        // destination) and across families: there it is forwarded anew.
        for hook in [
            Hook::Prerouting,
            Hook::Forward,
            Hook::Output,
            Hook::Postrouting,
        ] {
            let a = pass(&mut cx, v4([10, 0, 3, 3], 64), hook, 0x0800);
            assert_eq!(a, Action::Continue, "{hook:?}");
        }
        assert!(cx.outbox().is_empty());
        assert_eq!(
            pass(&mut cx, v4([10, 0, 3, 3], 64), Hook::Input, 0x0800),
            Action::Drop
        );
        assert_eq!(
            pass(&mut cx, v6("fd00:3::3", 64), Hook::Prerouting, 0x0800),
            Action::Drop
        );
        let out: Vec<_> = cx.outbox().iter().collect();
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|p| p.route == Route::Forward));
        assert_eq!(out[0].destination, "10.0.3.3".parse::<IpAddr>().unwrap());
        assert_eq!(out[0].bytes[8], 63, "forwarded as a router would");
        assert_eq!(counts(&c)["dropped_local_destination"], n, "unchanged");
    }
}
