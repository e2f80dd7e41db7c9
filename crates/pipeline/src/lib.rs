//! relayd's packet pipeline, without I/O, in the manner of quinn-proto: every datapath
//! (NFQUEUE, AF_XDP, `relayd replay`) hands it each packet it receives, with the time and
//! the caller-owned buffer the packet sits in, and carries out what it answers. It makes
//! no system call and reads no clock, so it is tested whole in memory (`tests.rs`).
//!
//! For one packet ([`Pipeline::process`]) it:
//! - decodes the conntrack state from the mark bits, if the queue has them, and takes them
//!   off the mark the services see;
//! - runs the queue's chain under a panic guard: a service that panics costs the packet the
//!   queue's malformed verdict (and counts an error), never the thread;
//! - composes the verdict's mark: the services' mark with the stage bits the packet came
//!   with (in the chain), and without the conntrack bits (here);
//! - keeps a packet a service holds ([`relay_core::Action::Hold`]) until its deadline, or
//!   answers it by the overflow policy when the store is full;
//! - counts the outcome in the queue's counters.
//!
//! What it answers: the verdict, and the packet's bytes in the caller's buffer when they
//! changed. What services emit (re-sent packets, ICMP errors, resets) waits in the
//! pipeline's outbox ([`Pipeline::outbox_mut`]) for the datapath to send after the batch.
//! Held packets leave through [`Pipeline::release_due`], each with the datapath's own
//! handle for it (`H`: a packet id, a next hop, a capture record).
//!
//! The control block a datapath thread shares with the control plane ([`Control`]) lives
//! here too, so that each datapath has the same stop, reload and heartbeat.
//!
//! The per-packet path takes no lock and allocates nothing once the hold store has warmed
//! up (a panic costs a new buffer, on its own path).

mod control;
mod hold;
#[cfg(test)]
mod tests;

pub use control::Control;
pub use hold::Held;

use hold::HoldStore;
use relay_core::ratelimit::RateLimit;
use relay_core::wire::{FiveTuple, TcpPacket, proto, tcp};
use relay_core::{
    Chain, Context, CtMarkBits, CtState, Decision, Offload, Outbox, Packet, PacketMeta,
    QueueCounters, Verdict,
};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

/// How many packets a queue may hold for a later verdict, and what happens beyond that.
///
/// On NFQUEUE the kernel counts held packets against the queue's `max_len` (they are
/// queued, awaiting a verdict), so `max_len` must leave room for a batch on top of
/// `max_packets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldConfig {
    /// The most packets held at once (0: a hold is always an overflow). Set it to the sum
    /// of the queue's services' [`max_held`](relay_core::Manifest::max_held).
    pub max_packets: u32,
    /// The most bytes held at once (packet lengths, copied or not).
    pub max_bytes: usize,
    /// The verdict given at once to a packet the store has no room for: `Accept` (it
    /// leaves undelayed) or `Drop` (as a full netem queue would). Counted in
    /// `hold_overflow`.
    pub overflow: Verdict,
}

impl Default for HoldConfig {
    /// No holding (services that never hold need none): 0 packets, 64 MiB, accept.
    fn default() -> HoldConfig {
        HoldConfig {
            max_packets: 0,
            max_bytes: 64 << 20,
            overflow: Verdict::Accept,
        }
    }
}

/// Which bytes of a held packet the pipeline copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBytes {
    /// Only those of a packet a service changed: the datapath still has the original of
    /// every other one (NFQUEUE: the kernel keeps it, and a verdict needs only its id).
    Modified,
    /// Every packet's: nothing else keeps them (AF_XDP reuses the frame, replay the
    /// record).
    All,
}

/// What a datapath's pipeline is set up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The queue number (services see it in [`Context::queue`]).
    pub num: u16,
    /// Limits on held packets.
    pub hold: HoldConfig,
    /// Which bytes of a held packet are copied.
    pub held_bytes: HeldBytes,
    /// The mark bits that tell each packet's conntrack state, if the queue has them.
    pub ct_mark_bits: Option<CtMarkBits>,
    /// The largest modified packet the datapath's verdict can carry: a larger one keeps
    /// its original bytes and counts an error (a netlink attribute carries at most 64 KiB).
    pub max_payload: usize,
    /// The datapath carries out offloads ([`Pipeline::take_offloads`]): the queue's
    /// configuration allows them and every service of its chain may vote. Without it a
    /// chain's offload vote is ignored and no packet's flow leaves the queue.
    pub offload: bool,
    /// The mark bit a rule in front of the queue sets on a packet whose destination NAT
    /// changed before the hook (0: none). Like the conntrack bits, it leaves the packet's
    /// mark before the services see it and is not given back in the verdict; the
    /// offload request says it ([`OffloadRequest::nat`]).
    pub nat_mark: u32,
}

impl Settings {
    /// Settings for queue `num`: no holding, no conntrack bits, any payload size, held
    /// packets copied whole, no offload.
    pub fn new(num: u16) -> Settings {
        Settings {
            num,
            hold: HoldConfig::default(),
            held_bytes: HeldBytes::All,
            ct_mark_bits: None,
            max_payload: usize::MAX,
            offload: false,
            nat_mark: 0,
        }
    }
}

/// What became of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answer it now.
    Now {
        /// The verdict and mark; `payload` says the verdict carries `buf[start..end]`
        /// (the changed bytes), else the packet leaves as it came. Never a hold.
        decision: Decision,
        /// Where the packet now sits in the caller's buffer.
        start: usize,
        /// See `start`.
        end: usize,
        /// True if a service changed the packet's bytes (also when the verdict cannot
        /// carry them).
        modified: bool,
    },
    /// A service held it: it comes out of [`Pipeline::release_due`] later.
    Held,
}

/// A flow the chain offloaded, for the datapath to carry out after the batch's verdicts
/// ([`Pipeline::take_offloads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffloadRequest {
    /// The tuple of the packet that carried the vote, as it left (the direction is the
    /// packet's: with [`OffloadScope::Direction`](relay_core::OffloadScope) only packets
    /// of this tuple leave the queue).
    pub tuple: FiveTuple,
    /// What the chain agreed to.
    pub offload: Offload,
    /// The mark the packet's verdict gave it, if any: the flow's later packets, which the
    /// services no longer see, should carry it too.
    pub mark: Option<u32>,
    /// The packet's conntrack direction, where the datapath knew it (true: reply).
    pub reply: Option<bool>,
    /// The packet's conntrack state, where the datapath knew it (`None`: unknown, or
    /// not tracked). A datapath that marks conntrack entries needs it to tell the
    /// packet's own entry from another one its tuple might find (docs/offload.md).
    pub state: Option<CtState>,
    /// NAT changed the packet's destination before the hook (its [`Settings::nat_mark`]
    /// was set): its tuple is neither of its entry's, but turned round it is the other
    /// direction's.
    pub nat: bool,
}

/// The most offloads one batch may ask for; beyond it they count as failed (the flows'
/// next packets vote again).
pub const MAX_OFFLOADS: usize = 256;

/// A queue's chain with everything around it that does not depend on how packets arrive
/// (see the module docs). `H` is the datapath's handle for a held packet.
pub struct Pipeline<H> {
    settings: Settings,
    chain: Chain,
    counters: QueueCounters,
    /// The services' context, its outbox kept from packet to packet.
    cx: Context,
    hold: HoldStore<H>,
    /// Held packets being released (slots of `hold`).
    releasing: Vec<u32>,
    /// Offloads asked for since the datapath last took them.
    offloads: Vec<OffloadRequest>,
    log: RateLimit,
}

impl<H> std::fmt::Debug for Pipeline<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("settings", &self.settings)
            .field("chain", &self.chain)
            .finish()
    }
}

impl<H: Copy + Default> Pipeline<H> {
    /// The pipeline of `chain` with `settings`, counting in `counters`; `now` is the time.
    pub fn new(
        settings: Settings,
        chain: Chain,
        counters: QueueCounters,
        now: Instant,
    ) -> Pipeline<H> {
        let mut p = Pipeline {
            hold: store(&settings.hold),
            releasing: Vec::with_capacity(64),
            offloads: Vec::with_capacity(MAX_OFFLOADS),
            settings,
            chain,
            counters,
            cx: Context::new(settings.num, now),
            log: RateLimit::new(10),
        };
        p.set_chain_context();
        p
    }

    /// The settings served.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The queue's counters (datapaths count their own events in them too).
    pub fn counters(&self) -> &QueueCounters {
        &self.counters
    }

    /// The chain's verdict for packets that cannot be parsed (or whose service panicked).
    pub fn malformed_verdict(&self) -> Verdict {
        self.chain.malformed_verdict()
    }

    /// Runs `chain` from the next packet on.
    pub fn set_chain(&mut self, chain: Chain) {
        self.chain = chain;
        self.set_chain_context();
    }

    fn set_chain_context(&mut self) {
        self.cx.queue = self.settings.num;
        self.cx.bypass_mark = self.chain.bypass_mark();
        self.cx.stages = self.chain.stages();
        self.cx.set_offloads(self.settings.offload);
    }

    /// Takes new settings. Release every held packet first ([`Pipeline::release_due`]
    /// with `None`): the store is made anew for the new limits.
    pub fn reconfigure(&mut self, settings: Settings) {
        debug_assert!(self.hold.is_empty() && self.releasing.is_empty());
        self.hold = store(&settings.hold);
        self.settings = settings;
        self.set_chain_context();
    }

    /// Tells the services the box's own addresses from now on
    /// ([`Context::set_local_addresses`]).
    pub fn set_local_addresses(&mut self, addrs: Arc<[IpAddr]>) {
        self.cx.set_local_addresses(addrs);
    }

    /// The services' context, for a datapath that sends through its outbox itself (the
    /// AF_XDP datapath hands the kernel what it cannot transmit with
    /// [`Context::forward`]).
    pub fn context_mut(&mut self) -> &mut Context {
        &mut self.cx
    }

    /// What the services emitted since the datapath last emptied it.
    pub fn outbox_mut(&mut self) -> &mut Outbox {
        self.cx.outbox_mut()
    }

    /// Runs the chain on the packet in `buf[start..end]` with metadata `meta` (its mark as
    /// it arrived, its conntrack state if the datapath knows it), received at `now`;
    /// `handle` is what the datapath needs to answer or send it if it is held. The
    /// packet's bytes stay in `buf`, which may grow (or be replaced after a panic, at its
    /// old length).
    pub fn process(
        &mut self,
        now: Instant,
        mut meta: PacketMeta,
        buf: &mut Vec<u8>,
        start: usize,
        end: usize,
        handle: H,
    ) -> Outcome {
        self.cx.now = now;
        let nat = meta.mark & self.settings.nat_mark != 0;
        let restore = self.decode_ct_bits(&mut meta);
        let len = buf.len();
        let mut pkt = Packet::in_buffer(std::mem::take(buf), start, end, meta);
        let (chain, cx, counters) = (&mut self.chain, &mut self.cx, &self.counters);
        // A service bug must not take the queue down with it: the packet gets the queue's
        // malformed-packet verdict and the panic is counted. (Unwinding costs nothing
        // until it happens.)
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let d = chain.run(&mut pkt, cx, counters);
            (d, pkt)
        }));
        let Ok((mut decision, pkt)) = run else {
            self.count_error(now, || {
                "a service panicked on a packet; verdict by the malformed policy".into()
            });
            let mut decision = self.malformed();
            self.strip_ct_bits(&mut decision, restore);
            // The packet (and its buffer) unwound with the panic: the caller gets a new one.
            *buf = vec![0u8; len];
            return Outcome::Now {
                decision,
                start: 0,
                end: 0,
                modified: false,
            };
        };
        let (start, end) = pkt.bounds();
        let modified = pkt.is_modified();
        *buf = pkt.into_buffer();
        if decision.payload && end - start > self.settings.max_payload {
            decision.payload = false;
            self.count_error(now, || {
                "modified packet too large for a verdict; original kept".into()
            });
        }
        self.strip_ct_bits(&mut decision, restore);
        if let Some(offload) = decision.offload.take()
            && self.offload(&decision, offload, buf.get(start..end), (&meta, nat))
        {
            decision.offload = Some(offload);
        }
        if let Some(until) = decision.hold.take() {
            if until <= now {
                self.counters.accepted.inc(); // due already: answered at once
            } else {
                let data = match self.settings.held_bytes {
                    HeldBytes::Modified => decision.payload.then(|| buf.get(start..end)),
                    HeldBytes::All => Some(buf.get(start..end)),
                };
                let data = data.map(|d| d.unwrap_or_default());
                let (mark, payload) = (decision.mark, decision.payload);
                if self
                    .hold
                    .insert(until, handle, mark, end - start, data, payload)
                {
                    return Outcome::Held;
                }
                self.counters.hold_overflow.inc();
                decision.verdict = self.settings.hold.overflow;
                match decision.verdict {
                    Verdict::Drop => self.counters.dropped.inc(),
                    _ => self.counters.accepted.inc(),
                }
            }
        }
        Outcome::Now {
            decision,
            start,
            end,
            modified,
        }
    }

    /// Records the chain's offload of the packet's flow for the datapath, if the queue
    /// offloads. Returns whether it did (else the decision carries no offload).
    fn offload(
        &mut self,
        d: &Decision,
        offload: Offload,
        data: Option<&[u8]>,
        (meta, nat): (&PacketMeta, bool),
    ) -> bool {
        if !self.settings.offload || d.verdict != Verdict::Accept {
            return false;
        }
        let Some(data) = data else { return false };
        let Some((tuple, l4)) = FiveTuple::parse(data) else {
            return false;
        };
        // Never on a TCP SYN: it may open a new connection on a tuple an old, offloaded
        // one still holds (in conntrack, in an XDP map), which must be inspected from its
        // start. The connection's next packet votes again.
        let syn = tuple.proto == proto::TCP
            && tuple.ports.is_some()
            && data
                .get(l4..)
                .and_then(|t| TcpPacket::new_checked(t).ok())
                .is_some_and(|t| {
                    t.flags() & (tcp::flags::SYN | tcp::flags::ACK) == tcp::flags::SYN
                });
        if syn {
            return false;
        }
        if self.offloads.len() >= MAX_OFFLOADS {
            self.counters.offload.failed.inc();
            return false;
        }
        self.offloads.push(OffloadRequest {
            tuple,
            offload,
            mark: d.mark,
            reply: meta.ct.map(|ct| ct.reply),
            state: meta.ct.map(|ct| ct.state),
            nat,
        });
        true
    }

    /// The flows offloaded since the last call, for the datapath to carry out (and count,
    /// in [`QueueCounters::offload`], by what the kernel made of them). Nothing is
    /// allocated: the requests' room is kept.
    pub fn take_offloads(&mut self) -> std::vec::Drain<'_, OffloadRequest> {
        self.offloads.drain(..)
    }

    /// The decision for a packet the datapath received but could not read (a message cut
    /// short, no payload): the malformed policy, counted as an error with `what` logged.
    pub fn unreadable(&mut self, now: Instant, what: &'static str) -> Decision {
        self.count_error(now, || what.to_string());
        self.malformed()
    }

    /// The decision for a packet the chain could not run on.
    fn malformed(&self) -> Decision {
        Decision {
            verdict: self.chain.malformed_verdict(),
            mark: None,
            payload: false,
            hold: None,
            offload: None,
        }
    }

    /// Decodes the conntrack mark bits, if the queue has them: the state goes to
    /// `meta.ct` unless the kernel told it (which wins), the bits leave `meta.mark`.
    /// Returns the mark the verdict must give back when the packet came with some bits.
    fn decode_ct_bits(&self, meta: &mut PacketMeta) -> Option<u32> {
        let bits = self.settings.ct_mark_bits?;
        let (ct, mark) = bits.decode(meta.mark & !self.settings.nat_mark);
        let restore = (mark != meta.mark).then_some(mark);
        meta.mark = mark;
        if meta.ct.is_none() {
            meta.ct = ct;
        }
        restore
    }

    /// Gives the packet its mark back without the conntrack bits: `restore` is its mark
    /// without them when it came with some.
    fn strip_ct_bits(&self, d: &mut Decision, restore: Option<u32>) {
        let Some(bits) = self.settings.ct_mark_bits else {
            return;
        };
        if d.verdict == Verdict::Drop {
            return;
        }
        d.mark = match d.mark {
            Some(m) => Some(m & !bits.mask() & !self.settings.nat_mark),
            None => restore,
        };
    }

    /// Counts an error and logs `what` (rate-limited, so formatted only when logged).
    pub fn count_error(&mut self, now: Instant, what: impl FnOnce() -> String) {
        self.counters.errors.inc();
        if let Some(s) = self.log.allow(now) {
            tracing::warn!(queue = self.settings.num, suppressed = s, "{}", what());
        }
    }

    /// True if packets are held.
    pub fn holds(&self) -> bool {
        !self.hold.is_empty()
    }

    /// How many packets are held, and their bytes.
    pub fn held(&self) -> (usize, usize) {
        (self.hold.len(), self.hold.bytes())
    }

    /// The earliest deadline of a held packet.
    pub fn next_due(&self) -> Option<Instant> {
        self.hold.next_due()
    }

    /// Takes held packets out of the store for the datapath to answer or send: those due
    /// at `now` (all of them for `None`: a stopping or reloading queue), in deadline order,
    /// at most `max`, and while `admit` takes them (it sees each in turn; the first is
    /// always taken). Read them with [`Pipeline::released`], then call
    /// [`Pipeline::finish_release`]. Returns how many were taken.
    pub fn release_due(
        &mut self,
        now: Option<Instant>,
        max: usize,
        mut admit: impl FnMut(&Held<H>) -> bool,
    ) -> usize {
        self.finish_release();
        while self.releasing.len() < max {
            let Some(slot) = self.hold.peek_due(now) else {
                break;
            };
            if !admit(self.hold.get(slot)) && !self.releasing.is_empty() {
                break;
            }
            self.hold.pop();
            self.releasing.push(slot);
        }
        self.releasing.len()
    }

    /// Released packet `k` (of those [`Pipeline::release_due`] took).
    pub fn released(&self, k: usize) -> Option<&Held<H>> {
        self.releasing.get(k).map(|&slot| self.hold.get(slot))
    }

    /// Gives the released packets' slots back and counts them accepted (their verdict is
    /// an accept, given or not: one that could not be delivered is counted as an error by
    /// the datapath).
    pub fn finish_release(&mut self) {
        for &slot in &self.releasing {
            self.hold.free(slot);
        }
        self.counters.accepted.add(self.releasing.len() as u64);
        self.releasing.clear();
    }
}

/// A hold store for `cfg`'s limits.
fn store<H: Copy + Default>(cfg: &HoldConfig) -> HoldStore<H> {
    HoldStore::new(cfg.max_packets as usize, cfg.max_bytes)
}
