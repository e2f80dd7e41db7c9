//! The engine in memory, as quinn-proto tests a connection: netlink datagrams in (built as
//! the kernel sends them), verdict messages and parameter requests out through a recording
//! [`Kernel`] that fails sends on demand. No socket, no privileges.

use super::*;
use crate::netlink::testing::{Sent, error, packet, verdicts};
use relay_core::{Action, ChainSettings, Context, Counter, Packet, Service, StageMark};
use std::time::Duration;

const NUM: u16 = 7;
/// Packets with this mark are held for 10 ms by [`Holder`].
const HOLD: u32 = 0x5;
/// Packets with this mark make [`Panicker`] panic.
const BOOM: u32 = 0x66;

/// The kernel side of the netlink socket, in memory.
#[derive(Default)]
struct FakeKernel {
    /// What each sendmsg that went through carried.
    sends: Vec<Vec<Sent>>,
    /// Sendmsg calls that failed.
    failed: usize,
    /// Packet ids whose verdicts cannot be delivered: a sendmsg carrying one fails.
    refuse: Vec<u32>,
    /// Batch verdict messages fail.
    refuse_batch: bool,
    /// Parameter requests, in order (their sequence numbers count from 1).
    configs: Vec<QueueParams>,
}

impl Kernel for FakeKernel {
    fn send(&mut self, iov: &[libc::iovec]) -> io::Result<()> {
        let mut bytes = Vec::new();
        for v in iov {
            // SAFETY: the engine's contract: every iovec points at live bytes for the call.
            let b = unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) };
            bytes.extend_from_slice(b);
        }
        let sent = verdicts(&bytes);
        if sent
            .iter()
            .any(|v| self.refuse.contains(&v.id) || (v.batch && self.refuse_batch))
        {
            self.failed += 1;
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        self.sends.push(sent);
        Ok(())
    }

    fn configure(&mut self, _num: u16, params: &QueueParams) -> io::Result<u32> {
        self.configs.push(*params);
        Ok(self.configs.len() as u32)
    }
}

/// Holds packets marked [`HOLD`] for 10 ms.
struct Holder;

impl Service for Holder {
    fn process(&mut self, pkt: &mut Packet, cx: &mut Context) -> Action {
        if pkt.meta.mark == HOLD {
            Action::Hold {
                until: cx.now + Duration::from_millis(10),
            }
        } else {
            Action::Continue
        }
    }
}

/// Panics on packets marked [`BOOM`], as a service bug would.
struct Panicker;

impl Service for Panicker {
    fn process(&mut self, pkt: &mut Packet, _cx: &mut Context) -> Action {
        assert_ne!(pkt.meta.mark, BOOM, "a service bug");
        Action::Continue
    }
}

/// Lowers the TTL of every packet: a service that rewrites bytes.
struct Rewriter;

impl Service for Rewriter {
    fn process(&mut self, pkt: &mut Packet, _cx: &mut Context) -> Action {
        pkt.data_mut()[8] -= 1;
        Action::Continue
    }
}

/// A 32-byte IPv4 UDP packet.
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

/// Packet `id` with `mark`, as the kernel queues it to us.
fn p(id: u32, mark: u32) -> Vec<u8> {
    packet(NUM, id, mark, &ipv4())
}

fn accept(id: u32) -> Sent {
    Sent {
        batch: false,
        id,
        verdict: NF_ACCEPT,
        mark: None,
        payload: None,
    }
}

fn drop(id: u32) -> Sent {
    Sent {
        verdict: NF_DROP,
        ..accept(id)
    }
}

fn batch(id: u32) -> Sent {
    Sent {
        batch: true,
        ..accept(id)
    }
}

/// An engine, its kernel and counters, and the clock the test moves.
struct Harness {
    e: Engine,
    k: FakeKernel,
    q: QueueCounters,
    t0: Instant,
}

fn config() -> QueueConfig {
    let mut cfg = QueueConfig::new(NUM);
    cfg.copy_range = 2048;
    cfg.batch = 8;
    cfg.max_len = 64;
    cfg.hold.max_packets = 4;
    cfg
}

fn harness(cfg: QueueConfig, malformed: Verdict, services: Vec<Box<dyn Service>>) -> Harness {
    let mut chain = Chain::new(ChainSettings {
        malformed,
        hook: relay_core::Hook::Output,
        stages: StageMark::DEFAULT,
    });
    for s in services {
        chain.push("test", s, Counter::new());
    }
    let q = QueueCounters::default();
    let t0 = Instant::now();
    let e = Engine::new(cfg, chain, q.clone(), 1 << 20, true, t0);
    Harness {
        e,
        k: FakeKernel::default(),
        q,
        t0,
    }
}

impl Harness {
    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Receives `dgrams` at `ms` (each whole, or cut short where `cut`), returns the
    /// sendmsg calls that went through.
    fn recv(&mut self, ms: u64, dgrams: &[Vec<u8>], cut: bool) -> Vec<Vec<Sent>> {
        let slots = self.e.recv_slots();
        for (slot, d) in slots.iter_mut().zip(dgrams) {
            slot[..d.len()].copy_from_slice(d);
        }
        let received = dgrams.iter().map(|d| Received {
            len: d.len(),
            truncated: cut,
        });
        let now = self.at(ms);
        self.e.handle_batch(received, now, &mut self.k);
        std::mem::take(&mut self.k.sends)
    }

    fn batch(&mut self, ms: u64, dgrams: &[Vec<u8>]) -> Vec<Vec<Sent>> {
        self.recv(ms, dgrams, false)
    }

    fn release(&mut self, ms: u64) -> Vec<Vec<Sent>> {
        let now = Some(self.at(ms));
        self.e.release_held(now, &mut self.k);
        std::mem::take(&mut self.k.sends)
    }
}

#[test]
fn consecutive_plain_verdicts_go_out_as_one_batch_verdict() {
    let mut h = harness(config(), Verdict::Accept, vec![]);
    // The first batch: nothing answered yet, so no batch verdict can be trusted.
    assert_eq!(
        h.batch(0, &[p(1, 0), p(2, 0), p(3, 0)]),
        [vec![accept(1), accept(2), accept(3)]]
    );
    assert_eq!(h.batch(1, &[p(4, 0), p(5, 0)]), [vec![batch(5)]]);
    // A gap (6 was never seen): each packet gets its own verdict, in one sendmsg.
    assert_eq!(
        h.batch(2, &[p(7, 0), p(8, 0)]),
        [vec![accept(7), accept(8)]]
    );
    assert_eq!(h.batch(3, &[p(9, 0), p(10, 0)]), [vec![batch(10)]]);
    assert_eq!((h.q.packets.get(), h.q.batches.get()), (9, 4));
    assert_eq!((h.q.accepted.get(), h.q.errors.get()), (9, 0));
}

#[test]
fn held_packets_get_their_own_verdicts_and_no_batch_verdict_passes_them() {
    let mut h = harness(config(), Verdict::Accept, vec![Box::new(Holder)]);
    assert_eq!(h.batch(0, &[p(1, 0), p(2, 0)]).len(), 1);
    // 4 is held: 3 and 5 are answered now, each by its own message.
    assert_eq!(
        h.batch(0, &[p(3, 0), p(4, HOLD), p(5, 0)]),
        [vec![accept(3), accept(5)]]
    );
    assert_eq!(h.q.held.get(), 1);
    assert!(h.e.holds());
    assert_eq!(h.e.next_due(), Some(h.at(10)));
    // Consecutive plain verdicts, but a batch verdict would answer 4 too.
    assert_eq!(
        h.batch(1, &[p(6, 0), p(7, 0)]),
        [vec![accept(6), accept(7)]]
    );
    assert_eq!(h.release(9), Vec::<Vec<Sent>>::new(), "not due yet");
    assert_eq!(h.release(10), [vec![accept(4)]]);
    assert!(!h.e.holds());
    // Nothing held any more: batch verdicts again.
    assert_eq!(h.batch(11, &[p(8, 0), p(9, 0)]), [vec![batch(9)]]);
    assert_eq!((h.q.accepted.get(), h.q.errors.get()), (9, 0));
}

#[test]
fn a_full_hold_store_answers_by_the_overflow_policy() {
    let mut cfg = config();
    cfg.hold.max_packets = 1;
    cfg.hold.overflow = Verdict::Drop;
    let mut h = harness(cfg, Verdict::Accept, vec![Box::new(Holder)]);
    assert_eq!(
        h.batch(0, &[p(1, HOLD), p(2, HOLD), p(3, 0)]),
        [vec![drop(2), accept(3)]]
    );
    assert_eq!((h.q.hold_overflow.get(), h.q.dropped.get()), (1, 1));
    // Stopping releases what is held whatever its deadline.
    h.e.release_held(None, &mut h.k);
    assert_eq!(h.k.sends, [vec![accept(1)]]);
}

#[test]
fn an_undeliverable_verdict_turns_batch_verdicts_off() {
    let mut h = harness(config(), Verdict::Accept, vec![]);
    h.k.refuse = vec![12];
    // The sendmsg of all three fails; one at a time, only 12's does.
    assert_eq!(
        h.batch(0, &[p(10, 0), p(11, 0), p(12, 0)]),
        [vec![accept(10)], vec![accept(11)]]
    );
    assert_eq!(h.k.failed, 2);
    assert_eq!(h.q.errors.get(), 1);
    assert!(!h.e.batch_verdicts);
    // 12 still waits in the kernel: a batch verdict for 14 would answer it in passing.
    h.k.refuse.clear();
    assert_eq!(
        h.batch(1, &[p(13, 0), p(14, 0)]),
        [vec![accept(13), accept(14)]]
    );
    // A reload keeps them off, whatever the new configuration says.
    h.e.reconfigure(config(), 1 << 20, &mut h.k);
    assert!(!h.e.batch_verdicts);
}

#[test]
fn a_refused_batch_verdict_is_replaced_by_one_verdict_each() {
    let mut h = harness(config(), Verdict::Accept, vec![]);
    h.batch(0, &[p(1, 0), p(2, 0)]);
    h.k.refuse_batch = true;
    assert_eq!(
        h.batch(1, &[p(3, 0), p(4, 0)]),
        [vec![accept(3)], vec![accept(4)]]
    );
    assert_eq!((h.k.failed, h.q.errors.get()), (1, 0));
    assert!(h.e.batch_verdicts, "every packet was answered");
}

#[test]
fn enobufs_is_counted_and_survived() {
    let mut h = harness(config(), Verdict::Accept, vec![]);
    let err = io::Error::from_raw_os_error;
    assert_eq!(
        h.e.receive_failed(&err(libc::ENOBUFS), false),
        AfterError::Continue
    );
    assert_eq!((h.q.enobufs.get(), h.q.errors.get()), (1, 0));
    // A receive timeout: go on, or stop once draining.
    assert_eq!(
        h.e.receive_failed(&err(libc::EAGAIN), false),
        AfterError::Continue
    );
    assert_eq!(
        h.e.receive_failed(&err(libc::EAGAIN), true),
        AfterError::Drained
    );
    assert_eq!(
        h.e.receive_failed(&err(libc::EINTR), true),
        AfterError::Continue
    );
    assert_eq!(
        h.e.receive_failed(&err(libc::EBADF), false),
        AfterError::Backoff
    );
    assert_eq!((h.q.enobufs.get(), h.q.errors.get()), (1, 1));
    // The queue serves on.
    assert_eq!(h.batch(0, &[p(1, 0)]), [vec![accept(1)]]);
}

#[test]
fn a_panicking_service_gets_the_malformed_verdict_and_is_counted() {
    let mut h = harness(config(), Verdict::Drop, vec![Box::new(Panicker)]);
    assert_eq!(
        h.batch(0, &[p(1, 0), p(2, BOOM), p(3, 0)]),
        [vec![accept(1), drop(2), accept(3)]]
    );
    assert_eq!(h.q.errors.get(), 1);
    // The slot lost its buffer with the panic and got a new one: the next batch through
    // it is served as usual.
    assert!(h.e.recv_slots()[1].len() >= slot_len(&config()));
    assert_eq!(h.batch(1, &[p(4, 0), p(5, 0)]), [vec![batch(5)]]);
    assert_eq!(h.q.errors.get(), 1);
}

#[test]
fn a_modified_packet_goes_back_in_its_verdict() {
    let mut h = harness(config(), Verdict::Accept, vec![Box::new(Rewriter)]);
    let mut want = ipv4();
    want[8] = 63;
    let sent = h.batch(0, &[p(1, 0), p(2, 0)]);
    let carried = Sent {
        payload: Some(want),
        ..accept(1)
    };
    assert_eq!(sent, [vec![carried.clone(), Sent { id: 2, ..carried }]]);
    assert_eq!(h.q.modified.get(), 2);
}

#[test]
fn a_cut_datagram_is_answered_by_the_malformed_policy() {
    let mut h = harness(config(), Verdict::Drop, vec![]);
    let whole = p(9, 0);
    assert_eq!(h.recv(0, &[whole[..40].to_vec()], true), [vec![drop(9)]]);
    assert_eq!((h.q.errors.get(), h.q.packets.get()), (1, 0));
}

#[test]
fn a_refused_conntrack_flag_is_asked_for_again_without_it() {
    let mut cfg = config();
    cfg.conntrack = true;
    let mut h = harness(cfg.clone(), Verdict::Accept, vec![]);
    cfg.max_len = 128;
    h.e.reconfigure(cfg.clone(), 1 << 20, &mut h.k);
    assert_eq!(h.k.configs.len(), 1);
    assert!(h.k.configs[0].conntrack && h.k.configs[0].max_len == 128);
    // The answer comes with the packets: this kernel cannot send conntrack state.
    let mut reply = error(1, -libc::EOPNOTSUPP);
    reply.extend(p(1, 0));
    assert_eq!(h.batch(0, &[reply]), [vec![accept(1)]]);
    assert_eq!(h.k.configs.len(), 2);
    assert!(!h.k.configs[1].conntrack && h.k.configs[1].max_len == 128);
    assert_eq!(h.q.errors.get(), 0, "a refused flag is no error");
    // The second request is taken; later ones never ask for the flag again.
    h.batch(1, &[error(2, 0)]);
    assert_eq!(h.e.config_seq, None);
    cfg.max_len = 256;
    h.e.reconfigure(cfg, 1 << 20, &mut h.k);
    assert!(!h.k.configs[2].conntrack);
    assert_eq!(h.q.errors.get(), 0);
}

#[test]
fn refused_parameters_and_a_refused_verdict_are_counted() {
    let mut h = harness(config(), Verdict::Accept, vec![]);
    let mut cfg = config();
    cfg.fail_open = false;
    h.e.reconfigure(cfg, 1 << 20, &mut h.k);
    assert_eq!(h.k.configs.len(), 1);
    h.batch(0, &[error(1, -libc::EINVAL)]);
    assert_eq!(
        (h.q.errors.get(), h.k.configs.len()),
        (1, 1),
        "not asked again"
    );
    // An error answering no request of ours: a verdict the kernel refused.
    h.batch(1, &[error(77, -libc::ENOENT)]);
    assert_eq!(h.q.errors.get(), 2);
    // An acknowledgement is no error; an unchanged configuration asks nothing.
    h.batch(2, &[error(78, 0)]);
    h.e.reconfigure(config_without_fail_open(), 1 << 20, &mut h.k);
    assert_eq!((h.q.errors.get(), h.k.configs.len()), (2, 1));
}

fn config_without_fail_open() -> QueueConfig {
    QueueConfig {
        fail_open: false,
        ..config()
    }
}
