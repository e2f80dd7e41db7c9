//! The pipeline in memory: packets in, outcomes, held packets, transmits and counters out.
//! No kernel, no socket. Each test that names a driver covers a way in which the three
//! chain drivers (NFQUEUE engine, AF_XDP queue, replay) differed before they shared this
//! pipeline.

use super::*;
use relay_core::{
    Action, ChainSettings, CtInfo, CtState, Hook, OffloadReason, Service, StageMark, Tally,
};
use std::time::Duration;

const NUM: u16 = 3;
const HEADROOM: usize = 64;
/// Packets with this mark are held for 10 ms by [`Script`].
const HOLD: u32 = 0x5;
/// ... dropped.
const DROP: u32 = 0x6;
/// ... repeated with mark 0x77.
const REPEAT: u32 = 0x7;
/// ... make [`Script`] panic.
const BOOM: u32 = 0x66;
/// ... rewritten (TTL lowered).
const REWRITE: u32 = 0x8;
/// ... given mark 0x1234 (and accepted).
const MARK: u32 = 0x9;
/// ... emit a copy of themselves.
const EMIT: u32 = 0xa;
/// ... rewritten, then held.
const REWRITE_HOLD: u32 = 0xb;
/// ... held until a deadline already past.
const HOLD_PAST: u32 = 0xc;
/// ... voted offloaded (both directions) and accepted.
const OFFLOAD: u32 = 0xd;
/// ... voted offloaded and dropped.
const OFFLOAD_DROP: u32 = 0xe;

/// One service that does what the packet's mark (with the conntrack bits taken off) says.
struct Script {
    tally: Tally,
    /// What `cx.bypass_mark` was on the last packet.
    seen: Seen,
}

impl Service for Script {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        self.seen
            .lock()
            .unwrap()
            .push((cx.queue, cx.bypass_mark, pkt.meta.ct));
        match pkt.meta.mark & 0xff {
            HOLD => Action::Hold {
                until: cx.now + Duration::from_millis(10),
            },
            HOLD_PAST => Action::Hold { until: cx.now },
            DROP => Action::Drop,
            REPEAT => Action::Repeat { mark: 0x77 },
            BOOM => panic!("a service bug"),
            REWRITE => {
                pkt.data_mut()[8] -= 1;
                Action::Continue
            }
            REWRITE_HOLD => {
                pkt.data_mut()[8] -= 1;
                Action::Hold {
                    until: cx.now + Duration::from_millis(10),
                }
            }
            MARK => {
                pkt.set_mark(0x1234);
                Action::Continue
            }
            OFFLOAD => {
                cx.offload(Offload::both(OffloadReason::Pass));
                Action::Continue
            }
            OFFLOAD_DROP => {
                cx.offload(Offload::both(OffloadReason::Pass));
                Action::Drop
            }
            EMIT => {
                let copy = pkt.data().to_vec();
                let _ = cx.emit(&copy, 0, &self.tally);
                Action::Continue
            }
            _ => Action::Continue,
        }
    }
}

fn ipv4() -> Vec<u8> {
    let mut b = vec![0u8; 32];
    b[0] = 0x45;
    b[2..4].copy_from_slice(&32u16.to_be_bytes());
    b[8] = 64;
    b[9] = 17;
    b[12..16].copy_from_slice(&[10, 0, 0, 1]);
    b[16..20].copy_from_slice(&[10, 0, 0, 2]);
    b[24..26].copy_from_slice(&12u16.to_be_bytes());
    b
}

type Seen = Arc<std::sync::Mutex<Vec<(u16, u32, Option<CtInfo>)>>>;

struct Harness {
    p: Pipeline<u32>,
    q: QueueCounters,
    t0: Instant,
    buf: Vec<u8>,
    seen: Seen,
}

fn chain(malformed: Verdict, seen: &Seen) -> Chain {
    let mut chain = Chain::new(ChainSettings {
        malformed,
        hook: Hook::Forward,
        stages: StageMark::DEFAULT,
    });
    let script = Script {
        tally: Tally::detached(),
        seen: seen.clone(),
    };
    chain.push("script", Box::new(script), Default::default());
    chain
}

fn harness(settings: Settings, malformed: Verdict) -> Harness {
    let q = QueueCounters::default();
    let t0 = Instant::now();
    let seen = Seen::default();
    Harness {
        p: Pipeline::new(settings, chain(malformed, &seen), q.clone(), t0),
        q,
        t0,
        buf: vec![0u8; 2048],
        seen,
    }
}

fn holding(held_bytes: HeldBytes, max: u32) -> Settings {
    Settings {
        hold: HoldConfig {
            max_packets: max,
            ..HoldConfig::default()
        },
        held_bytes,
        ..Settings::new(NUM)
    }
}

impl Harness {
    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Runs packet `id` (the IPv4 packet with `mark`) at `ms`.
    fn run(&mut self, ms: u64, id: u32, mark: u32) -> Outcome {
        self.run_bytes(ms, id, mark, &ipv4())
    }

    fn run_bytes(&mut self, ms: u64, id: u32, mark: u32, bytes: &[u8]) -> Outcome {
        let end = HEADROOM + bytes.len();
        self.buf[HEADROOM..end].copy_from_slice(bytes);
        let meta = PacketMeta {
            id,
            queue: NUM,
            mark,
            ..PacketMeta::default()
        };
        let now = self.at(ms);
        self.p.process(now, meta, &mut self.buf, HEADROOM, end, id)
    }

    /// Releases what is due at `ms` (all for `None`): (id, mark, payload, bytes) each.
    fn release(&mut self, ms: Option<u64>) -> Vec<(u32, Option<u32>, bool, Vec<u8>)> {
        let now = ms.map(|ms| self.at(ms));
        let n = self.p.release_due(now, usize::MAX, |_| true);
        let out = (0..n)
            .map(|k| {
                let h = self.p.released(k).unwrap();
                (h.handle, h.mark, h.payload, h.data.clone())
            })
            .collect();
        self.p.finish_release();
        out
    }
}

fn decision(o: Outcome) -> Decision {
    match o {
        Outcome::Now { decision, .. } => decision,
        Outcome::Held => panic!("held"),
    }
}

fn verdict(v: Verdict, mark: Option<u32>, payload: bool) -> Decision {
    Decision {
        verdict: v,
        mark,
        payload,
        hold: None,
        offload: None,
    }
}

#[test]
fn offloads_are_handed_to_the_datapath_only_where_the_queue_offloads() {
    let tuple = FiveTuple::parse(&ipv4()).unwrap().0;
    for on in [false, true] {
        let mut h = harness(
            Settings {
                offload: on,
                ..Settings::new(NUM)
            },
            Verdict::Accept,
        );
        let d = decision(h.run(0, 1, OFFLOAD));
        assert_eq!(d.verdict, Verdict::Accept);
        assert_eq!(d.offload.is_some(), on, "offload {on}");
        // A dropped packet's flow is never offloaded, whatever the vote.
        assert_eq!(decision(h.run(0, 2, OFFLOAD_DROP)).offload, None);
        assert_eq!(decision(h.run(0, 3, 0)).offload, None);
        let got: Vec<_> = h.p.take_offloads().collect();
        let want = on.then_some(OffloadRequest {
            tuple,
            offload: Offload::both(OffloadReason::Pass),
            mark: None,
            reply: None,
            state: None,
            nat: false,
        });
        assert_eq!(got, want.into_iter().collect::<Vec<_>>());
        assert_eq!(h.p.take_offloads().count(), 0, "taken once");
    }
    // A batch asks for at most MAX_OFFLOADS; the rest count as failed and vote again.
    let mut h = harness(
        Settings {
            offload: true,
            ..Settings::new(NUM)
        },
        Verdict::Accept,
    );
    for id in 0..MAX_OFFLOADS as u32 + 3 {
        h.run(0, id, OFFLOAD);
    }
    assert_eq!(h.p.take_offloads().count(), MAX_OFFLOADS);
    assert_eq!(h.q.offload.failed.get(), 3);
}

/// A TCP segment 10.0.0.1:1000 -> 10.0.0.2:80 with `flags`.
fn tcp(flags: u8) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    b[0] = 0x45;
    b[2..4].copy_from_slice(&40u16.to_be_bytes());
    b[8] = 64;
    b[9] = 6;
    b[12..16].copy_from_slice(&[10, 0, 0, 1]);
    b[16..20].copy_from_slice(&[10, 0, 0, 2]);
    b[20..22].copy_from_slice(&1000u16.to_be_bytes());
    b[22..24].copy_from_slice(&80u16.to_be_bytes());
    b[32] = 0x50;
    b[33] = flags;
    b
}

#[test]
fn no_offload_is_asked_on_a_tcp_syn() {
    let mut h = harness(
        Settings {
            offload: true,
            ..Settings::new(NUM)
        },
        Verdict::Accept,
    );
    // SYN, SYN/ACK, ACK, FIN/ACK, and UDP: all vote, the SYN alone asks for nothing.
    let mut offloaded = Vec::new();
    for (id, bytes) in [tcp(0x02), tcp(0x12), tcp(0x10), tcp(0x11), ipv4()]
        .iter()
        .enumerate()
    {
        let d = decision(h.run_bytes(0, id as u32, OFFLOAD, bytes));
        offloaded.push(d.offload.is_some());
    }
    assert_eq!(offloaded, [false, true, true, true, true]);
    assert_eq!(h.p.take_offloads().count(), 4);
    assert_eq!(h.q.offload.failed.get(), 0, "not counted as failed");
}

#[test]
fn verdicts_and_their_counters() {
    let mut h = harness(Settings::new(NUM), Verdict::Accept);
    assert_eq!(decision(h.run(0, 1, 0)), Decision::ACCEPT);
    assert_eq!(decision(h.run(0, 2, DROP)), Decision::DROP);
    // A repeat carries the hook's stage bits (FORWARD's) on the service's mark.
    let stage = StageMark::DEFAULT.for_hook(Hook::Forward);
    assert_eq!(
        decision(h.run(0, 3, REPEAT)),
        verdict(Verdict::Repeat, Some(0x77 | stage), false)
    );
    let Outcome::Now {
        decision: d,
        start,
        end,
        modified,
    } = h.run(0, 4, REWRITE)
    else {
        panic!("held")
    };
    assert_eq!(d, verdict(Verdict::Accept, None, true));
    assert!(modified);
    assert_eq!(
        h.buf.get(start + 8),
        Some(&63),
        "the changed bytes in the buffer"
    );
    let q = &h.q;
    assert_eq!(
        (
            q.packets.get(),
            q.accepted.get(),
            q.dropped.get(),
            q.repeated.get(),
            q.modified.get(),
            q.errors.get()
        ),
        (4, 2, 1, 1, 1, 0)
    );
    assert_eq!(end - start, 32);
}

/// Replay built a fresh context per packet: services saw no bypass mark there, where the
/// live datapaths gave them the chain's. Now every datapath's services see the same.
#[test]
fn services_see_the_queue_and_the_chains_bypass_mark() {
    let mut h = harness(Settings::new(NUM), Verdict::Accept);
    h.run(0, 1, 0);
    let bypass = StageMark::DEFAULT.for_send(Hook::Forward);
    assert_ne!(bypass, 0);
    assert_eq!(h.seen.lock().unwrap()[0], (NUM, bypass, None));
}

/// The conntrack mark bits: decoded into the state services see, taken off the mark they
/// see, and given back off in the verdict (the packet leaves with the mark it came with,
/// less the bits). The NFQUEUE engine did this; now every datapath does.
#[test]
fn conntrack_mark_bits_are_decoded_and_stripped_from_the_verdict() {
    let bits = CtMarkBits {
        established: 0x100,
        related: 0x200,
        reply: 0x400,
        tracked: 0x800,
    };
    let mut h = harness(
        Settings {
            ct_mark_bits: Some(bits),
            ..Settings::new(NUM)
        },
        Verdict::Accept,
    );
    let came = 0x1000_0000 | 0x900;
    // Unmarked by the services: the verdict restores the mark without the bits.
    assert_eq!(
        decision(h.run(0, 1, came)),
        verdict(Verdict::Accept, Some(0x1000_0000), false)
    );
    let ct = Some(CtInfo {
        state: CtState::Established,
        reply: false,
    });
    assert_eq!(h.seen.lock().unwrap()[0].2, ct);
    // Marked by a service (0x1234): the stage bits it came with stay, the conntrack bits
    // go, also those the service set (0x200).
    assert_eq!(
        decision(h.run(0, 2, 0xc000_0000 | 0x900 | MARK)),
        verdict(Verdict::Accept, Some(0xc000_1034), false)
    );
    // The kernel's own conntrack state wins over the bits.
    let meta = PacketMeta {
        mark: 0x900,
        ct: Some(CtInfo {
            state: CtState::New,
            reply: true,
        }),
        ..PacketMeta::default()
    };
    let end = HEADROOM + 32;
    h.p.process(h.t0, meta, &mut h.buf, HEADROOM, end, 3);
    assert_eq!(h.seen.lock().unwrap()[2].2.unwrap().state, CtState::New);
    // A drop gets no mark; a packet without the bits keeps its mark untouched.
    assert_eq!(decision(h.run(0, 4, 0x800 | DROP)), Decision::DROP);
    assert_eq!(decision(h.run(0, 5, 0x42)), Decision::ACCEPT);
}

/// The NAT bit: taken off the mark the services see and the verdict gives back, like
/// the conntrack bits, and handed to the datapath with the offload request.
#[test]
fn the_nat_bit_is_stripped_and_told_with_the_offload() {
    let bits = CtMarkBits {
        established: 0x100,
        related: 0x200,
        reply: 0x400,
        tracked: 0x800,
    };
    let mut h = harness(
        Settings {
            ct_mark_bits: Some(bits),
            nat_mark: 0x1_0000,
            offload: true,
            ..Settings::new(NUM)
        },
        Verdict::Accept,
    );
    let d = decision(h.run(0, 1, 0x1_0000 | 0x900 | OFFLOAD));
    assert_eq!(d.mark, Some(OFFLOAD), "the bits leave the verdict's mark");
    decision(h.run(0, 2, 0x900 | OFFLOAD));
    let got: Vec<_> = h.p.take_offloads().map(|r| (r.nat, r.state)).collect();
    let est = Some(CtState::Established);
    assert_eq!(got, [(true, est), (false, est)]);
}

/// A panicking service, under each malformed policy: the packet gets the policy's verdict
/// (never its changed bytes), the panic is counted, the caller gets a buffer of the same
/// size and the pipeline goes on. Replay caught no panic before.
#[test]
fn a_panicking_service_gets_the_malformed_policy() {
    for policy in [Verdict::Accept, Verdict::Drop] {
        let mut h = harness(Settings::new(NUM), policy);
        assert_eq!(
            decision(h.run(0, 1, BOOM)),
            verdict(policy, None, false),
            "{policy:?}"
        );
        assert_eq!(h.buf.len(), 2048);
        assert_eq!((h.q.packets.get(), h.q.errors.get()), (1, 1));
        assert_eq!(decision(h.run(0, 2, 0)), Decision::ACCEPT, "goes on");
    }
}

/// A packet the chain cannot parse gets the malformed policy and is counted.
#[test]
fn malformed_packets_by_policy() {
    for policy in [Verdict::Accept, Verdict::Drop] {
        let mut h = harness(Settings::new(NUM), policy);
        assert_eq!(
            decision(h.run_bytes(0, 1, 0, &[0x45, 0, 0])),
            verdict(policy, None, false)
        );
        assert_eq!(h.q.malformed.get(), 1);
        assert!(h.seen.lock().unwrap().is_empty(), "no service saw it");
        assert_eq!(
            h.p.unreadable(h.t0, "cut short"),
            verdict(policy, None, false)
        );
        assert_eq!(h.q.errors.get(), 1);
    }
}

/// Held packets leave at their deadline in deadline order, not before; counted accepted
/// when they leave. Replay and the AF_XDP queue ignored holds (a held packet went out at
/// once, and the AF_XDP queue never counted it accepted).
#[test]
fn held_packets_are_released_when_due() {
    let mut h = harness(holding(HeldBytes::All, 4), Verdict::Accept);
    assert_eq!(h.run(0, 1, HOLD), Outcome::Held);
    assert_eq!(h.run(5, 2, HOLD), Outcome::Held);
    assert_eq!(decision(h.run(5, 3, 0)), Decision::ACCEPT);
    assert_eq!(h.p.held(), (2, 64));
    assert_eq!(h.p.next_due(), Some(h.at(10)));
    assert_eq!(h.release(Some(9)), vec![]);
    let released = h.release(Some(10));
    assert_eq!(released.len(), 1);
    assert_eq!((released[0].0, &released[0].3[..]), (1, &ipv4()[..]));
    assert_eq!((h.q.held.get(), h.q.accepted.get()), (2, 2));
    assert_eq!(h.release(Some(100)).len(), 1);
    assert!(!h.p.holds());
    assert_eq!(h.q.accepted.get(), 3);
}

/// A stopping (or reloading, or ending) datapath releases everything at once.
#[test]
fn everything_held_is_released_on_stop() {
    let mut h = harness(holding(HeldBytes::All, 4), Verdict::Accept);
    for id in 1..=3 {
        assert_eq!(h.run(0, id, HOLD), Outcome::Held);
    }
    let ids: Vec<u32> = h.release(None).iter().map(|r| r.0).collect();
    assert_eq!(ids, [1, 2, 3]);
    assert!(!h.p.holds());
}

/// Release stops at `max` and where `admit` says (the first is always taken), so that a
/// datapath can fill one system call at a time.
#[test]
fn release_is_bounded_by_the_callers_budget() {
    let mut h = harness(holding(HeldBytes::All, 8), Verdict::Accept);
    for id in 1..=5 {
        h.run(0, id, HOLD);
    }
    let later = Some(h.at(50));
    assert_eq!(h.p.release_due(later, 2, |_| true), 2);
    h.p.finish_release();
    assert_eq!(
        h.p.release_due(later, 8, |_| false),
        1,
        "the first is taken"
    );
    assert_eq!(h.p.released(0).map(|r| r.handle), Some(3));
    h.p.finish_release();
    assert_eq!(h.p.release_due(later, 8, |_| true), 2);
    h.p.finish_release();
    assert_eq!(h.q.accepted.get(), 5);
}

/// NFQUEUE keeps only a changed packet's bytes (the kernel has the original); the other
/// datapaths keep every held packet's.
#[test]
fn held_bytes_are_copied_as_the_datapath_needs() {
    let mut h = harness(holding(HeldBytes::Modified, 4), Verdict::Accept);
    h.run(0, 1, HOLD);
    h.run(0, 2, REWRITE_HOLD);
    let r = h.release(None);
    assert_eq!((r[0].2, r[0].3.len()), (false, 0));
    assert_eq!((r[1].2, r[1].3.len(), r[1].3.get(8)), (true, 32, Some(&63)));
    let mut h = harness(holding(HeldBytes::All, 4), Verdict::Accept);
    h.run(0, 1, HOLD);
    let r = h.release(None);
    assert_eq!((r[0].2, r[0].3.len()), (false, 32));
}

/// A full store answers by the overflow policy at once; a deadline already past is
/// answered at once too. Both counted.
#[test]
fn hold_overflow_and_past_deadlines_answer_at_once() {
    for overflow in [Verdict::Accept, Verdict::Drop] {
        let mut s = holding(HeldBytes::All, 1);
        s.hold.overflow = overflow;
        let mut h = harness(s, Verdict::Accept);
        assert_eq!(h.run(0, 1, HOLD), Outcome::Held);
        assert_eq!(decision(h.run(0, 2, HOLD)).verdict, overflow);
        assert_eq!(h.q.hold_overflow.get(), 1);
        let counted = match overflow {
            Verdict::Drop => h.q.dropped.get(),
            _ => h.q.accepted.get(),
        };
        assert_eq!(counted, 1);
    }
    // No hold configured (the AF_XDP queue's default): every hold is an overflow.
    let mut h = harness(Settings::new(NUM), Verdict::Accept);
    assert_eq!(decision(h.run(0, 1, HOLD)), Decision::ACCEPT);
    assert_eq!((h.q.hold_overflow.get(), h.q.accepted.get()), (1, 1));
    let mut h = harness(holding(HeldBytes::All, 4), Verdict::Accept);
    assert_eq!(decision(h.run(0, 1, HOLD_PAST)), Decision::ACCEPT);
    assert_eq!((h.q.accepted.get(), h.q.hold_overflow.get()), (1, 0));
}

/// A changed packet larger than the verdict can carry keeps its original bytes.
#[test]
fn a_payload_past_the_datapaths_limit_keeps_the_original() {
    let mut h = harness(
        Settings {
            max_payload: 16,
            ..Settings::new(NUM)
        },
        Verdict::Accept,
    );
    let Outcome::Now {
        decision, modified, ..
    } = h.run(0, 1, REWRITE)
    else {
        panic!("held")
    };
    assert_eq!((decision.payload, modified), (false, true));
    assert_eq!(h.q.errors.get(), 1);
}

/// What services emit waits in the outbox, with the chain's bypass mark on it.
#[test]
fn transmits_wait_in_the_outbox() {
    let mut h = harness(Settings::new(NUM), Verdict::Accept);
    h.run(0, 1, EMIT);
    h.run(0, 2, EMIT);
    let out = h.p.outbox_mut();
    assert_eq!(out.len(), 2);
    let bypass = StageMark::DEFAULT.for_send(Hook::Forward);
    for e in out.iter() {
        assert_eq!((e.bytes, e.mark), (&ipv4()[..], bypass));
    }
    assert_eq!(out.settle_all_sent(), 2);
    assert!(h.p.outbox_mut().is_empty());
}

/// A new chain takes over from the next packet, with its own malformed policy.
#[test]
fn a_new_chain_and_new_settings() {
    let mut h = harness(holding(HeldBytes::All, 4), Verdict::Accept);
    h.p.set_chain(chain(Verdict::Drop, &h.seen));
    assert_eq!(decision(h.run(0, 1, BOOM)).verdict, Verdict::Drop);
    assert_eq!(h.p.malformed_verdict(), Verdict::Drop);
    h.p.reconfigure(Settings::new(9));
    h.run(0, 2, 0);
    assert_eq!(h.seen.lock().unwrap().last().unwrap().0, 9);
    assert_eq!(decision(h.run(0, 3, HOLD)), Decision::ACCEPT, "no hold now");
}
