//! Carrying out the chain's offloads on NFQUEUE: after a batch's verdicts, each flow the
//! pipeline offloaded gets its conntrack mark set over ctnetlink (the queue's
//! [`OffloadMark`] bits: this queue's generation, the directions offloaded, and the verdict
//! mark's bits the skip rules restore), and relayd's skip rules in front of the NFQUEUE
//! rule send the flow's later packets on without queueing them (docs/offload.md).
//!
//! One non-blocking ctnetlink socket per queue thread, opened with the queue. The updates
//! of a batch go in one send; the kernel handles them inside that call, so their
//! acknowledgements are read right after it, several per recvmmsg, never waiting. A small
//! fixed table of flows offloaded in this generation drops repeated requests (the packets
//! already queued behind the first vote); nothing is allocated per packet.

use crate::config::OffloadMark;
use relay_core::{OffloadReason, OffloadScope, QueueCounters};
use relay_netlink::conntrack::{self, ACK_SLOT, CtSocket, CtTuple, Lookup, UPDATE_MAX};
use relay_pipeline::{MAX_OFFLOADS, OffloadRequest};
use std::hash::{Hash, Hasher};
use std::io;

/// Flows remembered per queue thread (a power of two); an older flow in the same slot is
/// forgotten, and if it votes again it is merely updated again.
const TABLE: usize = 4096;
/// Updates awaiting their acknowledgement (a power of two, more than a batch's worth).
const INFLIGHT: usize = 1024;
/// The socket's receive buffer: room for every acknowledgement in flight.
const RCVBUF: usize = 256 << 10;
/// Failed updates after which a flow is left inline for the rest of the generation (an
/// untracked flow, a tuple conntrack does not know): each costs a system call.
const MAX_FAILS: u8 = 4;
/// Acknowledgements read per recvmmsg.
const ACK_BATCH: usize = 32;
/// Bit of a direction in a table slot.
const ORIG: u8 = 1;
const REPLY: u8 = 2;

/// One remembered flow: a hash of its direction-free key (0: empty), the directions the
/// kernel confirmed and those in flight, and its failed updates.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    tag: u64,
    done: u8,
    pending: u8,
    fails: u8,
}

/// One update in flight: enough to send it again with the tuple turned round.
#[derive(Debug, Clone, Copy)]
struct Inflight {
    seq: u32,
    tag: u64,
    bits: u8,
    reason: OffloadReason,
    tuple: CtTuple,
    value: u32,
    mask: u32,
    /// Already the second try (the tuple turned round).
    retried: bool,
    /// A second try with the tuple turned round is allowed (see [`Offloader::push`]).
    may_turn: bool,
    live: bool,
}

impl Default for Inflight {
    fn default() -> Inflight {
        Inflight {
            seq: 0,
            tag: 0,
            bits: 0,
            reason: OffloadReason::Decided,
            tuple: CtTuple {
                src: std::net::Ipv4Addr::UNSPECIFIED.into(),
                dst: std::net::Ipv4Addr::UNSPECIFIED.into(),
                proto: 0,
                sport: 0,
                dport: 0,
            },
            value: 0,
            mask: 0,
            retried: false,
            may_turn: false,
            live: false,
        }
    }
}

/// The queue thread's offload shell (see the module docs).
pub(crate) struct Offloader {
    mark: Option<OffloadMark>,
    sock: Option<CtSocket>,
    table: Box<[Slot]>,
    inflight: Box<[Inflight]>,
    /// Updates the kernel found no entry for, to send again with the tuple turned round.
    retry: Vec<Inflight>,
    seq: u32,
    out: Vec<u8>,
    counters: QueueCounters,
    /// Flows confirmed offloaded in this generation (counted as revoked when it ends).
    live: u64,
    num: u16,
}

impl Offloader {
    /// The offloader of queue `num` with `mark` (`None`: the queue does not offload); opens
    /// its socket now, not per packet.
    pub(crate) fn new(num: u16, mark: Option<OffloadMark>, counters: QueueCounters) -> Offloader {
        let mut o = Offloader {
            mark: None,
            sock: None,
            table: vec![Slot::default(); TABLE].into_boxed_slice(),
            inflight: vec![Inflight::default(); INFLIGHT].into_boxed_slice(),
            retry: Vec::with_capacity(MAX_OFFLOADS),
            seq: 0,
            out: Vec::with_capacity(MAX_OFFLOADS * UPDATE_MAX),
            counters,
            live: 0,
            num,
        };
        o.set_mark(mark);
        o
    }

    /// Takes the queue's (new) offload bits after a reload. A new generation revokes every
    /// flow offloaded under the old one: the skip rules no longer match them.
    pub(crate) fn set_mark(&mut self, mark: Option<OffloadMark>) {
        if mark == self.mark {
            return;
        }
        if self.mark.is_some() {
            self.counters.offload.revoked.add(self.live);
        }
        self.live = 0;
        self.table.fill(Slot::default());
        for f in self.inflight.iter_mut() {
            f.live = false;
        }
        self.mark = mark;
        if mark.is_some() && self.sock.is_none() {
            match CtSocket::open(RCVBUF) {
                Ok(s) => self.sock = Some(s),
                Err(e) => tracing::error!(
                    queue = self.num,
                    "cannot open the conntrack socket for offloads ({e}); every offload fails"
                ),
            }
        }
    }

    /// Carries out the batch's offloads: one update per flow not yet offloaded in the
    /// directions asked, all in one send, then reads the answers that came; the updates
    /// that found no entry go once more with the tuple turned round.
    pub(crate) fn carry_out(&mut self, requests: impl Iterator<Item = OffloadRequest>) {
        let Some(mark) = self.mark else {
            // The pipeline only asks when the queue offloads; nothing to do otherwise.
            requests.for_each(drop);
            return;
        };
        self.out.clear();
        for r in requests {
            self.push(&mark, &r);
        }
        for _ in 0..2 {
            if self.out.is_empty() || !self.send() {
                return;
            }
            self.read_acks();
            self.out.clear();
            let mut retry = std::mem::take(&mut self.retry);
            for f in retry.drain(..) {
                let turned = CtTuple {
                    src: f.tuple.dst,
                    dst: f.tuple.src,
                    sport: f.tuple.dport,
                    dport: f.tuple.sport,
                    ..f.tuple
                };
                self.emit(Inflight {
                    tuple: turned,
                    retried: true,
                    ..f
                });
            }
            self.retry = retry;
        }
    }

    /// Sends the updates in `out`; false (and all in flight failed) if the kernel refused.
    fn send(&mut self) -> bool {
        let sent = match &self.sock {
            Some(s) => s.send(&self.out),
            None => Err(io::Error::from_raw_os_error(libc::ENOTCONN)),
        };
        if let Err(e) = sent {
            tracing::debug!(queue = self.num, "conntrack updates not sent: {e}");
            self.fail_all_inflight();
            return false;
        }
        true
    }

    /// Adds the update for request `r` to the outgoing datagram, unless the flow is
    /// already offloaded (or being offloaded) in those directions.
    ///
    /// Never for a TCP SYN (it may reopen a tuple an old entry still holds: the entry
    /// it would mark is not the new connection's), nor for a packet conntrack does not
    /// track (INVALID, untracked: it has no entry of its own, and its tuple may find
    /// another connection's), nor, before NAT, for a connection NAT translates. The retry with the tuple turned round only where NAT may
    /// have run before the hook, and only for a packet whose destination NAT changed
    /// (the rules' NAT bit: DNAT status in the original direction, SNAT in the reply):
    /// its own entry's other tuple is then its tuple turned round, unique (the NAT core
    /// chose it so). Any other packet whose update finds nothing (its entry never
    /// confirmed: a packet dropped after the queue) would find, turned round, another
    /// connection's entry, a DNAT'ed one's (docs/offload.md).
    fn push(&mut self, mark: &OffloadMark, r: &OffloadRequest) {
        if r.state.is_none() || (r.nat && !mark.turned) {
            // Before NAT (PREROUTING, mangle OUTPUT), a translated connection's other
            // direction is not this packet's tuple turned round: the chain saw another
            // flow than the entry's (docs/offload.md).
            self.counters.offload.failed.inc();
            return;
        }
        let want = match (r.offload.scope, r.reply) {
            (OffloadScope::Both, _) => ORIG | REPLY,
            (OffloadScope::Direction, Some(false)) => ORIG,
            (OffloadScope::Direction, Some(true)) => REPLY,
            // One direction of a flow whose direction the queue does not know: nothing
            // safe to set (docs/offload.md, limits).
            (OffloadScope::Direction, None) => {
                self.counters.offload.failed.inc();
                return;
            }
        };
        let (Some((sport, dport)), Some(tag)) = (r.tuple.ports, flow_tag(&r.tuple)) else {
            // Conntrack finds portless flows by other fields (ICMP ids): not offloaded.
            self.counters.offload.failed.inc();
            return;
        };
        let slot = &mut self.table[(tag as usize) & (TABLE - 1)];
        if slot.tag != tag {
            *slot = Slot {
                tag,
                ..Slot::default()
            };
        }
        if (slot.done | slot.pending) & want == want || slot.fails >= MAX_FAILS {
            return; // asked already in this generation, or given up
        }
        // The directions set so far stay set: the update writes all bits of the mask.
        let bits = slot.done | slot.pending | want;
        slot.pending |= want;
        let value = mark.generation
            | if bits & ORIG != 0 { mark.orig } else { 0 }
            | if bits & REPLY != 0 { mark.reply } else { 0 }
            | (r.mark.unwrap_or(0) & mark.restore);
        self.emit(Inflight {
            seq: 0,
            tag,
            bits: want,
            reason: r.offload.reason,
            tuple: CtTuple {
                src: r.tuple.src,
                dst: r.tuple.dst,
                proto: r.tuple.proto,
                sport,
                dport,
            },
            value,
            mask: mark.mask(),
            retried: false,
            may_turn: mark.turned && r.nat,
            live: true,
        });
    }

    /// Writes update `f` into `out` under a new sequence number and keeps it in flight.
    fn emit(&mut self, mut f: Inflight) {
        self.seq = self.seq.wrapping_add(1);
        f.seq = self.seq;
        f.live = true;
        let at = self.out.len();
        self.out.resize(at + UPDATE_MAX, 0);
        let lookup = if f.retried {
            Lookup::Reply
        } else {
            Lookup::Orig
        };
        let Some(n) = conntrack::mark_update(
            &mut self.out[at..],
            f.seq,
            &f.tuple,
            lookup,
            f.value,
            f.mask,
        ) else {
            self.out.truncate(at);
            self.counters.offload.failed.inc();
            Self::settle(&mut self.table, f.tag, f.bits, false);
            return;
        };
        self.out.truncate(at + n);
        let old = &mut self.inflight[f.seq as usize & (INFLIGHT - 1)];
        if old.live {
            // Its answer never came (a lost acknowledgement): let the flow vote again.
            self.counters.offload.failed.inc();
            Self::settle(&mut self.table, old.tag, old.bits, false);
        }
        *old = f;
    }

    /// Reads every acknowledgement that has come, several per recvmmsg, without waiting.
    fn read_acks(&mut self) {
        let mut bufs = [[0u8; ACK_SLOT]; ACK_BATCH];
        let mut lens = [0usize; ACK_BATCH];
        loop {
            let Some(sock) = &self.sock else { return };
            let n = match sock.try_recv_many(&mut bufs, &mut lens) {
                Ok(n) => n,
                Err(e) => {
                    // ENOBUFS: answers were lost; those updates count as failed.
                    tracing::debug!(queue = self.num, "conntrack answers: {e}");
                    self.fail_all_inflight();
                    return;
                }
            };
            for (buf, len) in bufs.iter().zip(lens).take(n) {
                self.answered(buf.get(..len).unwrap_or_default());
            }
            if n < ACK_BATCH {
                return;
            }
        }
    }

    /// Takes the kernel's answers in one datagram.
    fn answered(&mut self, datagram: &[u8]) {
        let (table, inflight, counters) = (&mut self.table, &mut self.inflight, &self.counters);
        let (live, retry) = (&mut self.live, &mut self.retry);
        conntrack::acks(datagram, |seq, err| {
            let f = &mut inflight[seq as usize & (INFLIGHT - 1)];
            if !f.live || f.seq != seq {
                return;
            }
            f.live = false;
            if err == -libc::ENOENT && f.may_turn && !f.retried && retry.len() < MAX_OFFLOADS {
                // Not found by this tuple: a packet NAT changed is found by the other
                // direction's tuple, its own turned round.
                retry.push(*f);
                return;
            }
            Self::settle(table, f.tag, f.bits, err == 0);
            if err == 0 {
                counters.offload.offloaded(f.reason);
                *live += 1;
            } else {
                // ENOENT: the entry is not confirmed yet (or gone); the flow's next
                // packet votes again.
                counters.offload.failed.inc();
            }
        });
    }

    /// Records the kernel's answer for `bits` of flow `tag`.
    fn settle(table: &mut [Slot], tag: u64, bits: u8, ok: bool) {
        let slot = &mut table[(tag as usize) & (TABLE - 1)];
        if slot.tag != tag {
            return;
        }
        slot.pending &= !bits;
        if ok {
            slot.done |= bits;
        } else {
            slot.fails = slot.fails.saturating_add(1);
        }
    }

    fn fail_all_inflight(&mut self) {
        for f in self.inflight.iter_mut().filter(|f| f.live) {
            f.live = false;
            self.counters.offload.failed.inc();
            Self::settle(&mut self.table, f.tag, f.bits, false);
        }
        for f in self.retry.drain(..) {
            self.counters.offload.failed.inc();
            Self::settle(&mut self.table, f.tag, f.bits, false);
        }
    }
}

/// A direction-free key of the flow of `t`: both directions' tuples give the same tag
/// (never 0, which marks an empty slot). `None` without ports.
fn flow_tag(t: &relay_core::wire::FiveTuple) -> Option<u64> {
    let (sp, dp) = t.ports?;
    let a = (t.src, sp);
    let b = (t.dst, dp);
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h = std::hash::DefaultHasher::new();
    (lo, hi, t.proto).hash(&mut h);
    Some(h.finish().max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::wire::FiveTuple;
    use relay_core::{CtState, Offload};

    fn req(src: &str, dst: &str, sp: u16, dp: u16, offload: Offload) -> OffloadRequest {
        OffloadRequest {
            tuple: FiveTuple {
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
                proto: 6,
                ports: Some((sp, dp)),
            },
            offload,
            mark: Some(0x77),
            reply: None,
            state: Some(CtState::Established),
            nat: false,
        }
    }

    fn mark() -> OffloadMark {
        OffloadMark {
            orig: 0x1_0000,
            reply: 0x2_0000,
            gen_mask: 0xfc_0000,
            generation: 0x4_0000,
            restore: 0xff,
            turned: true,
        }
    }

    /// The kernel's answer `err` to update `seq`, as one datagram.
    fn ack(seq: u32, err: i32) -> Vec<u8> {
        let mut b = relay_netlink::frame::Builder::new(relay_netlink::frame::NLMSG_ERROR, 0, seq);
        b.push(&err.to_ne_bytes())
            .push(&[0u8; relay_netlink::frame::NLMSG_HDRLEN]);
        b.finish().to_vec()
    }

    #[test]
    fn no_update_for_an_untracked_packet() {
        // (A SYN never reaches here: the pipeline asks no offload on one.)
        let counters = QueueCounters::default();
        let mut o = Offloader::new(0, None, counters.clone());
        o.mark = Some(mark());
        let tracked = req(
            "10.0.0.1",
            "10.0.1.1",
            1000,
            80,
            Offload::both(OffloadReason::Pass),
        );
        let untracked = OffloadRequest {
            state: None,
            ..tracked
        };
        o.push(&mark(), &untracked);
        assert!(o.out.is_empty(), "an untracked packet is never offloaded");
        assert_eq!(counters.offload.failed.get(), 1);
        // The same flow's next (tracked) packet is updated.
        o.push(&mark(), &tracked);
        assert!(!o.out.is_empty());
    }

    #[test]
    fn only_a_packet_nat_translated_before_the_hook_is_retried_turned_round() {
        for (nat, turned, retried) in [(true, true, true), (false, true, false)] {
            let counters = QueueCounters::default();
            let mut o = Offloader::new(0, None, counters.clone());
            let m = OffloadMark { turned, ..mark() };
            o.mark = Some(m);
            let mut r = req(
                "10.0.0.1",
                "10.0.1.1",
                1000,
                80,
                Offload::both(OffloadReason::Pass),
            );
            r.nat = nat;
            o.push(&m, &r);
            assert!(!o.out.is_empty());
            o.answered(&ack(o.seq, -libc::ENOENT));
            assert_eq!(
                o.retry.len(),
                usize::from(retried),
                "nat {nat}, turned {turned}"
            );
            assert_eq!(counters.offload.failed.get(), u64::from(!retried));
        }
        // Before NAT, a translated connection's packet is not offloaded at all.
        let counters = QueueCounters::default();
        let mut o = Offloader::new(0, None, counters.clone());
        let m = OffloadMark {
            turned: false,
            ..mark()
        };
        o.mark = Some(m);
        let mut r = req(
            "10.0.0.1",
            "10.0.1.1",
            1000,
            80,
            Offload::both(OffloadReason::Pass),
        );
        r.nat = true;
        o.push(&m, &r);
        assert!(o.out.is_empty());
        assert_eq!(counters.offload.failed.get(), 1);
    }

    #[test]
    fn both_directions_share_one_tag() {
        let a = req(
            "10.0.0.1",
            "10.0.1.1",
            1000,
            80,
            Offload::both(OffloadReason::Decided),
        );
        let b = req(
            "10.0.1.1",
            "10.0.0.1",
            80,
            1000,
            Offload::both(OffloadReason::Decided),
        );
        assert_eq!(flow_tag(&a.tuple), flow_tag(&b.tuple));
        let c = req(
            "10.0.1.1",
            "10.0.0.1",
            81,
            1000,
            Offload::both(OffloadReason::Decided),
        );
        assert_ne!(flow_tag(&a.tuple), flow_tag(&c.tuple));
    }

    #[test]
    fn repeated_requests_are_one_update_and_unknown_directions_fail() {
        let counters = QueueCounters::default();
        let mut o = Offloader::new(0, None, counters.clone());
        // No socket: build only (the socket is not needed to fill the datagram).
        o.mark = Some(mark());
        let both = req(
            "10.0.0.1",
            "10.0.1.1",
            1000,
            80,
            Offload::both(OffloadReason::Decided),
        );
        o.push(&mark(), &both);
        let one = o.out.len();
        assert!(one > 0);
        o.push(&mark(), &both);
        let mut back = both;
        back.tuple = FiveTuple {
            src: both.tuple.dst,
            dst: both.tuple.src,
            ports: Some((80, 1000)),
            ..both.tuple
        };
        o.push(&mark(), &back);
        assert_eq!(o.out.len(), one, "the same flow is updated once");
        // The update carries generation, both direction bits and the restored mark bits.
        let m = relay_netlink::frame::Messages::new(&o.out).next().unwrap();
        let attrs: Vec<_> = relay_netlink::frame::Attrs::new(&m.payload[4..]).collect();
        assert_eq!(attrs[1].be32(), Some(0x4_0000 | 0x3_0000 | 0x77));
        assert_eq!(attrs[2].be32(), Some(mark().mask()));
        let dir = req(
            "10.0.0.2",
            "10.0.1.1",
            1000,
            80,
            Offload::direction(OffloadReason::Pass),
        );
        o.push(&mark(), &dir);
        assert_eq!(o.out.len(), one, "no direction known: nothing sent");
        assert_eq!(counters.offload.failed.get(), 1);
        // A failed answer lets the flow ask again, up to MAX_FAILS times.
        let tag = flow_tag(&both.tuple).unwrap();
        for k in 1..=MAX_FAILS as usize {
            Offloader::settle(&mut o.table, tag, ORIG | REPLY, false);
            o.push(&mark(), &both);
            let want = if k < MAX_FAILS as usize { k + 1 } else { k };
            assert_eq!(o.out.len(), want * one, "after {k} failures");
        }
    }

    #[test]
    fn a_new_generation_revokes_and_forgets() {
        let counters = QueueCounters::default();
        let mut o = Offloader::new(0, None, counters.clone());
        o.mark = Some(mark());
        o.live = 3;
        o.table[5].tag = 9;
        let mut next = mark();
        next.generation = 0x8_0000;
        o.set_mark(Some(next));
        assert_eq!(counters.offload.revoked.get(), 3);
        assert_eq!(o.table[5].tag, 0);
        o.set_mark(Some(next));
        assert_eq!(
            counters.offload.revoked.get(),
            3,
            "same bits: nothing revoked"
        );
    }
}
