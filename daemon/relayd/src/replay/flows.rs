//! A small flow tracker that classifies packets the way conntrack does (new, established,
//! related; original or reply direction), so that services see during replay what the
//! kernel would have told them live. It also keeps which directions of a flow the chain
//! offloaded, as the conntrack mark does live (docs/offload.md).

use relay_core::wire::{FiveTuple, IcmpPacket, TcpPacket, proto, tcp};
use relay_core::{CtInfo, CtState, OffloadScope, Packet};
use std::collections::HashMap;
use std::time::Duration;

/// A flow idle this long starts over as new (conntrack's timeouts vary by protocol and
/// state; one generous value keeps replay predictable).
const IDLE: Duration = Duration::from_secs(600);

#[derive(Debug)]
struct Entry {
    replied: bool,
    last: Duration,
    /// The offloaded directions ([`ORIGINAL`], [`REPLY`]).
    offloaded: u8,
}

/// The flow's original direction, in [`Entry::offloaded`].
const ORIGINAL: u8 = 1;
/// Its reply direction.
const REPLY: u8 = 2;

/// Flows seen so far, keyed by their original direction.
#[derive(Debug, Default)]
pub struct FlowTracker {
    flows: HashMap<FiveTuple, Entry>,
}

/// The addresses, protocol and ports of an IP packet in `data` as conntrack keys a flow:
/// TCP and UDP ports, the ICMP echo identifier for both ports, `None` for anything else;
/// also the offset of its transport header.
fn key_of(data: &[u8]) -> Option<(FiveTuple, usize)> {
    let (mut key, off) = FiveTuple::parse(data)?;
    let l4 = data.get(off..).unwrap_or(&[]);
    key.ports = match key.proto {
        proto::TCP | proto::UDP => key.ports,
        proto::ICMP | proto::ICMPV6 => IcmpPacket::new_checked(l4)
            .ok()
            .map(|m| (m.echo_ident(), m.echo_ident())),
        _ => None,
    };
    Some((key, off))
}

/// True for ICMP / ICMPv6 error types, which quote the packet they are about.
fn is_icmp_error(p: u8, t: u8) -> bool {
    match p {
        proto::ICMP => matches!(t, 3 | 4 | 5 | 11 | 12),
        proto::ICMPV6 => matches!(t, 1..=4),
        _ => false,
    }
}

impl FlowTracker {
    /// Classifies `pkt`, seen at capture time `ts`, and remembers its flow.
    pub fn classify(&mut self, pkt: &mut Packet, ts: Duration) -> Option<CtInfo> {
        // A non-first fragment has no transport header to read ports from.
        pkt.layout().ok()?.l4?;
        let data = pkt.data();
        let (key, off) = key_of(data)?;
        if let Some(m) = data
            .get(off..)
            .and_then(|l4| IcmpPacket::new_checked(l4).ok())
            && is_icmp_error(key.proto, m.msg_type())
        {
            // Related if the quoted packet belongs to a known flow.
            let (inner, _) = key_of(m.data())?;
            return if self.flows.contains_key(&inner) {
                Some(CtInfo {
                    state: CtState::Related,
                    reply: true,
                })
            } else if self.flows.contains_key(&inner.reversed()) {
                Some(CtInfo {
                    state: CtState::Related,
                    reply: false,
                })
            } else {
                None
            };
        }
        if let Some(e) = self
            .flows
            .get_mut(&key)
            .filter(|e| ts.saturating_sub(e.last) < IDLE)
        {
            e.last = ts;
            let state = if e.replied {
                CtState::Established
            } else {
                CtState::New
            };
            return Some(CtInfo {
                state,
                reply: false,
            });
        }
        if let Some(e) = self
            .flows
            .get_mut(&key.reversed())
            .filter(|e| ts.saturating_sub(e.last) < IDLE)
        {
            e.last = ts;
            e.replied = true;
            return Some(CtInfo {
                state: CtState::Established,
                reply: true,
            });
        }
        self.flows.remove(&key.reversed());
        self.flows.insert(
            key,
            Entry {
                replied: false,
                last: ts,
                offloaded: 0,
            },
        );
        Some(CtInfo {
            state: CtState::New,
            reply: false,
        })
    }

    /// Records that the chain offloaded the flow of `tuple` (a packet's, in its own
    /// direction) in `scope`. `None` if no tracked flow has that tuple (the datapath
    /// counts it failed, as live); else whether a direction was newly offloaded.
    pub fn offload(&mut self, tuple: &FiveTuple, scope: OffloadScope) -> Option<bool> {
        let (e, dir) = match self.flows.get_mut(tuple) {
            Some(e) => (e, ORIGINAL),
            None => (self.flows.get_mut(&tuple.reversed())?, REPLY),
        };
        let bits = match scope {
            OffloadScope::Both => ORIGINAL | REPLY,
            OffloadScope::Direction => dir,
        };
        let newly = e.offloaded & bits != bits;
        e.offloaded |= bits;
        Some(newly)
    }

    /// Whether the packet in `data`, seen at `ts`, belongs to an offloaded direction of a
    /// live flow: the kernel would forward it without queueing it. Its flow's idle time
    /// starts again, as conntrack's does. A TCP segment with SYN set opens a new
    /// connection on the tuple and ends the old one's offload.
    pub fn offloaded(&mut self, data: &[u8], ts: Duration) -> bool {
        let Some((key, off)) = key_of(data) else {
            return false;
        };
        let syn = key.proto == proto::TCP
            && data
                .get(off..)
                .and_then(|l4| TcpPacket::new_checked(l4).ok())
                .is_some_and(|t| t.flags() & tcp::flags::SYN != 0);
        let (e, dir) = match self.flows.get_mut(&key) {
            Some(e) => (e, ORIGINAL),
            None => match self.flows.get_mut(&key.reversed()) {
                Some(e) => (e, REPLY),
                None => return false,
            },
        };
        if syn || ts.saturating_sub(e.last) >= IDLE {
            e.offloaded = 0;
            return false;
        }
        if e.offloaded & dir == 0 {
            return false;
        }
        e.last = ts;
        true
    }

    /// How many flows are tracked.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// True if no flow was seen.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Packet {
        let mut b = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0];
        b.extend_from_slice(&src);
        b.extend_from_slice(&dst);
        b.extend_from_slice(&sport.to_be_bytes());
        b.extend_from_slice(&dport.to_be_bytes());
        b.extend_from_slice(&[0, 8, 0, 0]);
        Packet::from_bytes(&b)
    }

    #[test]
    fn new_then_established_both_ways_then_related() {
        let mut f = FlowTracker::default();
        let t = Duration::from_secs(1);
        let a = [10, 0, 1, 1];
        let b = [10, 0, 2, 2];
        let ct = |s, r| Some(CtInfo { state: s, reply: r });
        assert_eq!(
            f.classify(&mut udp(a, 4000, b, 53), t),
            ct(CtState::New, false)
        );
        assert_eq!(
            f.classify(&mut udp(a, 4000, b, 53), t),
            ct(CtState::New, false)
        );
        assert_eq!(
            f.classify(&mut udp(b, 53, a, 4000), t),
            ct(CtState::Established, true)
        );
        assert_eq!(
            f.classify(&mut udp(a, 4000, b, 53), t),
            ct(CtState::Established, false)
        );
        // An ICMP port unreachable from b quoting a's datagram.
        let quoted = udp(a, 4000, b, 53).data().to_vec();
        let mut icmp = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0];
        icmp.extend_from_slice(&b);
        icmp.extend_from_slice(&a);
        icmp.extend_from_slice(&[3, 3, 0, 0, 0, 0, 0, 0]);
        icmp.extend_from_slice(&quoted);
        let len = icmp.len() as u16;
        icmp[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            f.classify(&mut Packet::from_bytes(&icmp), t),
            ct(CtState::Related, true)
        );
        // Idle for longer than the timeout: new again.
        assert_eq!(
            f.classify(&mut udp(a, 4000, b, 53), t + IDLE),
            ct(CtState::New, false)
        );
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn offloaded_directions_skip_until_idle_or_a_new_syn() {
        let mut f = FlowTracker::default();
        let t = Duration::from_secs(1);
        let (a, b) = ([10, 0, 1, 1], [10, 0, 2, 2]);
        let out = udp(a, 4000, b, 53);
        let back = udp(b, 53, a, 4000);
        let tuple = FiveTuple::parse(out.data()).unwrap().0;
        assert_eq!(f.offload(&tuple, OffloadScope::Both), None, "no flow yet");
        f.classify(&mut udp(a, 4000, b, 53), t);
        assert!(!f.offloaded(out.data(), t));
        // One direction: the reply is still inspected.
        assert_eq!(f.offload(&tuple, OffloadScope::Direction), Some(true));
        assert_eq!(f.offload(&tuple, OffloadScope::Direction), Some(false));
        assert!(f.offloaded(out.data(), t));
        assert!(!f.offloaded(back.data(), t));
        // Both, asked by a reply packet.
        let reply = FiveTuple::parse(back.data()).unwrap().0;
        assert_eq!(f.offload(&reply, OffloadScope::Both), Some(true));
        assert!(f.offloaded(back.data(), t));
        // Idle past the timeout: a new flow, inspected again.
        assert!(!f.offloaded(out.data(), t + t + IDLE));
        assert!(!f.offloaded(back.data(), t + t + IDLE));
        // A TCP SYN on an offloaded tuple ends the offload.
        let mut syn = vec![0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0];
        syn.extend_from_slice(&a);
        syn.extend_from_slice(&b);
        syn.extend_from_slice(&[0x0f, 0xa0, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10]);
        syn.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        let ack = Packet::from_bytes(&syn);
        f.classify(&mut Packet::from_bytes(&syn), t);
        let tcp = FiveTuple::parse(ack.data()).unwrap().0;
        assert_eq!(f.offload(&tcp, OffloadScope::Both), Some(true));
        assert!(f.offloaded(ack.data(), t));
        syn[33] = 0x02;
        assert!(!f.offloaded(&syn, t), "a SYN is a new connection");
        assert!(!f.offloaded(ack.data(), t), "and the old offload is over");
    }
}
