//! The queue worker's NFQUEUE-specific pure part: it decodes a received batch of netlink
//! datagrams, hands each packet to the queue's [`Pipeline`] (which runs the chain, keeps
//! held packets and counts, for every datapath alike), plans the verdicts (one batch
//! verdict, or several verdict messages per sendmsg, or one at a time after a failure) and
//! reads the kernel's replies to a reconfiguration. It makes no system call and reads no
//! clock: the thread in `worker.rs` receives into its slots, hands it the batch with the
//! time, and sends what it asks through the small [`Kernel`] trait, which unit tests
//! implement in memory (`engine/tests.rs`).
//!
//! Packets a service holds ([`relay_core::Action::Hold`]) wait in the pipeline's store and
//! are answered each with its own verdict message, never a batch verdict (which would
//! answer every lower id with it). Once a verdict could not be delivered, batch verdicts
//! stay off: one could answer the stranded packet with another's verdict.
//!
//! The per-packet path takes no lock and allocates nothing: the receive slots, verdict
//! headers and iovecs are sized at start and on reload only.

use crate::config::{QueueConfig, slot_len};
use crate::netlink::{
    self, HDR_LEN, Messages, NF_ACCEPT, NF_DROP, NF_REPEAT, NFNL_SUBSYS_QUEUE, NFQNL_MSG_PACKET,
    PacketMsg, QueueParams, VERDICT_HDR_MAX, align,
};
use relay_core::ratelimit::RateLimit;
use relay_core::{Chain, Decision, Outbox, QueueCounters, Verdict};
use relay_netlink::frame::os_error;
use relay_pipeline::{HeldBytes, Outcome, Pipeline, Settings};
use std::io;
use std::time::Instant;

#[cfg(test)]
mod tests;

/// Held packets answered per sendmsg at most.
const RELEASE_CHUNK: usize = 64;

/// What the engine asks of the queue's netlink socket. The worker's shell implements it
/// with sendmsg; unit tests record the messages and fail them on demand.
pub(crate) trait Kernel {
    /// Sends the netlink messages `iov` describes, in one sendmsg. The buffers stay alive
    /// and unchanged for the call.
    fn send(&mut self, iov: &[libc::iovec]) -> io::Result<()>;

    /// Sends new parameters for queue `num` without waiting for the answer, which comes
    /// among the packets; returns the request's sequence number.
    fn configure(&mut self, num: u16, params: &QueueParams) -> io::Result<u32>;
}

/// One datagram the shell received into a slot: its length and whether the kernel cut it
/// short (`MSG_TRUNC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    pub(crate) len: usize,
    pub(crate) truncated: bool,
}

/// What the shell does after a receive error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterError {
    /// Go on (a timeout, a signal, a counted ENOBUFS).
    Continue,
    /// A stopping queue saw nothing for a whole receive timeout: it is drained.
    Drained,
    /// An unexpected error, counted: wait a little before the next receive.
    Backoff,
}

/// One packet's verdict waiting to be sent.
#[derive(Clone, Copy)]
struct Pending {
    id: u32,
    slot: usize,
    start: usize,
    end: usize,
    decision: Decision,
}

/// The queue worker's state and logic without I/O (see the module docs).
pub(crate) struct Engine {
    cfg: QueueConfig,
    /// The chain, held packets and counters (ids are the held packets' handles).
    pipeline: Pipeline<u32>,
    /// False once a verdict could not be delivered: a batch verdict could then answer the
    /// stranded packet with someone else's verdict.
    batch_verdicts: bool,
    /// The id after the last one answered, while ids have been answered without a gap.
    next_id: Option<u32>,
    /// Sequence number of a configuration change the kernel has not answered yet, and
    /// whether it asked for conntrack state.
    config_seq: Option<(u32, bool)>,
    /// True once the kernel refused the conntrack flag: it is not asked for again.
    ct_refused: bool,
    release_hdrs: Vec<[u8; VERDICT_HDR_MAX]>,
    slot_len: usize,
    slots: Vec<Vec<u8>>,
    pending: Vec<Pending>,
    hdrs: Vec<[u8; VERDICT_HDR_MAX]>,
    send_iov: Vec<libc::iovec>,
    sndbuf_budget: usize,
    /// The rate limit of receive errors' logs (the pipeline limits the others).
    log: RateLimit,
    /// The latest time the shell gave (for the rate limit of warnings).
    now: Instant,
}

// SAFETY: the raw pointers in `send_iov` point only into `slots`, `hdrs`, the pipeline's
// hold store and a static; they are rebuilt before each send and never read after it.
unsafe impl Send for Engine {}

static ZEROS: [u8; 4] = [0; 4];

impl Engine {
    /// The engine of queue `cfg.num` running `chain`; `sndbuf` is the send buffer the
    /// kernel granted (a sendmsg stays well below it), `kernel_conntrack` whether the
    /// kernel took the conntrack flag at bind time, `now` the time.
    pub(crate) fn new(
        cfg: QueueConfig,
        chain: Chain,
        counters: QueueCounters,
        sndbuf: usize,
        kernel_conntrack: bool,
        now: Instant,
    ) -> Engine {
        let mut e = Engine {
            batch_verdicts: cfg.batch_verdicts,
            ct_refused: cfg.conntrack && !kernel_conntrack,
            pipeline: Pipeline::new(settings(&cfg), chain, counters, now),
            cfg,
            next_id: None,
            config_seq: None,
            release_hdrs: vec![[0u8; VERDICT_HDR_MAX]; RELEASE_CHUNK],
            slot_len: 0,
            slots: Vec::new(),
            pending: Vec::new(),
            hdrs: Vec::new(),
            send_iov: Vec::new(),
            sndbuf_budget: 0,
            log: RateLimit::new(10),
            now,
        };
        e.size_buffers(sndbuf);
        e
    }

    /// The configuration served.
    pub(crate) fn cfg(&self) -> &QueueConfig {
        &self.cfg
    }

    /// (Re)allocates the receive slots and verdict buffers for the current configuration.
    /// Only at start and on reload.
    fn size_buffers(&mut self, sndbuf: usize) {
        // A checked batch (`QueueConfig::check`): 1 to 1024.
        let batch = self.cfg.batch;
        self.slot_len = slot_len(&self.cfg);
        self.slots.resize_with(batch, Vec::new);
        for s in &mut self.slots {
            if s.len() < self.slot_len {
                s.resize(self.slot_len, 0);
            }
        }
        self.pending = Vec::with_capacity(batch);
        self.hdrs = vec![[0u8; VERDICT_HDR_MAX]; batch];
        self.send_iov = Vec::with_capacity(batch * 3);
        // A sendmsg larger than the send buffer fails with EMSGSIZE: stay well below what
        // the kernel actually granted (it may cap our request).
        self.sndbuf_budget = (sndbuf / 2)
            .saturating_sub(1024)
            .max(VERDICT_HDR_MAX + 0x10000);
    }

    /// The parameters the kernel is asked for: the configuration's, less conntrack once
    /// the kernel refused it.
    fn params(&self) -> QueueParams {
        QueueParams {
            conntrack: self.cfg.conntrack && !self.ct_refused,
            ..self.cfg.params()
        }
    }

    /// The receive slots, each at least a slot long, for the shell to receive a batch
    /// into (one datagram per slot).
    pub(crate) fn recv_slots(&mut self) -> &mut [Vec<u8>] {
        for slot in &mut self.slots {
            if slot.len() < self.slot_len {
                slot.resize(self.slot_len, 0);
            }
        }
        &mut self.slots
    }

    /// True if packets are held.
    pub(crate) fn holds(&self) -> bool {
        self.pipeline.holds()
    }

    /// The earliest deadline of a held packet.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.pipeline.next_due()
    }

    /// What the batch's services emitted, for the shell to send after the verdicts.
    pub(crate) fn outbox_mut(&mut self) -> &mut Outbox {
        self.pipeline.outbox_mut()
    }

    /// The flows the last batch offloaded, for the shell to carry out after its verdicts.
    pub(crate) fn take_offloads(&mut self) -> std::vec::Drain<'_, relay_pipeline::OffloadRequest> {
        self.pipeline.take_offloads()
    }

    /// Takes a new configuration (with its granted send buffer `sndbuf`) after the held
    /// packets were released, and asks the kernel for the parameters that changed (its
    /// answer comes with the packets; see [`Engine::handle_batch`]).
    pub(crate) fn reconfigure(
        &mut self,
        cfg: QueueConfig,
        sndbuf: usize,
        kernel: &mut impl Kernel,
    ) {
        let num = self.cfg.num;
        let old = self.params();
        self.batch_verdicts = cfg.batch_verdicts && self.batch_verdicts;
        self.cfg = cfg;
        self.size_buffers(sndbuf);
        // Only ever called with nothing held (the worker releases first).
        self.pipeline.reconfigure(settings(&self.cfg));
        let params = self.params();
        if params != old {
            match kernel.configure(num, &params) {
                Ok(seq) => self.config_seq = Some((seq, params.conntrack)),
                Err(e) => tracing::error!(queue = num, "sending new queue parameters failed: {e}"),
            }
        }
    }

    /// Runs the new chain from the next batch on.
    pub(crate) fn set_chain(&mut self, chain: Chain) {
        self.pipeline.set_chain(chain);
    }

    /// Counts a receive error and says what the shell does next; `stopping` while the
    /// queue drains.
    pub(crate) fn receive_failed(&mut self, e: &io::Error, stopping: bool) -> AfterError {
        match e.raw_os_error() {
            Some(libc::EAGAIN) if stopping => AfterError::Drained,
            Some(libc::EAGAIN | libc::EINTR) => AfterError::Continue,
            Some(libc::ENOBUFS) => {
                // The kernel could not deliver some packets to us: they were accepted or
                // dropped by the queue's policy. Count and go on.
                self.pipeline.counters().enobufs.inc();
                AfterError::Continue
            }
            _ => {
                self.pipeline.counters().errors.inc();
                if let Some(s) = self.log.allow(self.now) {
                    tracing::error!(queue = self.cfg.num, suppressed = s, "receive failed: {e}");
                }
                AfterError::Backoff
            }
        }
    }

    /// Tells the services the box's own addresses from now on
    /// ([`Context::set_local_addresses`]).
    pub(crate) fn set_local_addresses(&mut self, addrs: std::sync::Arc<[std::net::IpAddr]>) {
        self.pipeline.set_local_addresses(addrs);
    }

    /// Handles the datagrams received into the first `received.len()` slots at `now`:
    /// decodes them, runs the chain, and sends the verdicts through `kernel`. What the
    /// services emitted waits in [`Engine::outbox_mut`].
    pub(crate) fn handle_batch(
        &mut self,
        received: impl IntoIterator<Item = Received>,
        now: Instant,
        kernel: &mut impl Kernel,
    ) {
        self.pipeline.counters().batches.inc();
        self.now = now;
        self.pending.clear();
        for (slot, r) in received.into_iter().take(self.slots.len()).enumerate() {
            let len = r.len.min(self.slots[slot].len());
            self.handle_datagram(slot, len, r.truncated, kernel);
        }
        self.send_verdicts(kernel);
    }

    fn handle_datagram(
        &mut self,
        slot: usize,
        len: usize,
        truncated: bool,
        kernel: &mut impl Kernel,
    ) {
        let packet_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET;
        let mut found: Option<(PacketMsg, usize)> = None;
        let (mut odd, mut refused, mut config_refused) = (0u32, None, None);
        for m in Messages::new(&self.slots[slot][..len]) {
            if m.ty() == packet_type {
                match netlink::parse_packet(m.payload) {
                    // nfnetlink_queue sends one packet per datagram; anything else is odd.
                    Some(p) if found.is_none() => found = Some((p, m.offset)),
                    _ => odd += 1,
                }
            } else if let Some(err) = m.error() {
                if let Some((seq, with_ct)) = self.config_seq
                    && seq == m.seq()
                {
                    self.config_seq = None;
                    if err == -libc::EOPNOTSUPP && with_ct {
                        // The kernel cannot send conntrack state: ask again without it.
                        self.ct_refused = true;
                        let params = self.params();
                        tracing::warn!(
                            queue = self.cfg.num,
                            "the kernel cannot send conntrack state with queued packets; \
                             only the conntrack mark bits, if configured, tell it"
                        );
                        match kernel.configure(self.cfg.num, &params) {
                            Ok(seq) => self.config_seq = Some((seq, false)),
                            Err(e) => config_refused = Some(e),
                        }
                    } else if err != 0 {
                        config_refused = Some(os_error(err));
                    }
                } else if err != 0 {
                    refused = Some(os_error(err));
                }
            }
        }
        if let Some(e) = config_refused {
            self.pipeline.counters().errors.inc();
            tracing::error!(
                queue = self.cfg.num,
                "the kernel refused the new queue parameters: {e}"
            );
        }
        if let Some(e) = refused {
            self.count_error_with(|| format!("kernel refused a verdict: {e}"));
        }
        if odd > 0 {
            self.count_error("unparsable or extra packet message");
        }
        let data = found.and_then(|(p, base)| p.payload.map(|(s, e)| (p, base + s, base + e)));
        let Some((p, start, end)) = data.filter(|_| !truncated) else {
            // A packet we cannot run the chain on (cut short, no payload) still gets an
            // answer, or it would sit in the kernel's queue until relayd stops.
            let id = found
                .map(|(p, _)| p.id)
                .or_else(|| netlink::packet_id_of_damaged(&self.slots[slot][..len]));
            if let Some(id) = id {
                let decision = self.pipeline.unreadable(
                    self.now,
                    "packet message cut short or without payload; answered by the malformed policy",
                );
                self.pending.push(Pending {
                    id,
                    slot,
                    start: 0,
                    end: 0,
                    decision,
                });
            }
            return;
        };
        // The conntrack mark bits, if any, are the pipeline's to decode and strip; the
        // kernel's own state, if sent, wins over them.
        let meta = p.meta(self.cfg.num, None);
        let outcome =
            self.pipeline
                .process(self.now, meta, &mut self.slots[slot], start, end, p.id);
        if let Outcome::Now {
            decision,
            start,
            end,
            ..
        } = outcome
        {
            self.pending.push(Pending {
                id: p.id,
                slot,
                start,
                end,
                decision,
            });
        }
    }

    /// Answers held packets: those due at `now`, or all of them for `None`. Each gets its
    /// own verdict message (several per sendmsg), in deadline order.
    pub(crate) fn release_held(&mut self, now: Option<Instant>, kernel: &mut impl Kernel) {
        if let Some(now) = now {
            self.now = now;
        }
        let budget = self.sndbuf_budget;
        loop {
            self.send_iov.clear();
            let mut bytes = 0;
            let n = self.pipeline.release_due(now, RELEASE_CHUNK, |h| {
                let size = VERDICT_HDR_MAX + if h.payload { align(h.data.len()) } else { 0 };
                let fits = bytes == 0 || bytes + size <= budget;
                bytes += size;
                fits
            });
            if n == 0 {
                break;
            }
            for k in 0..n {
                self.push_held_verdict(k);
            }
            if kernel.send(&self.send_iov).is_err() {
                // One at a time, to find the one the kernel refuses.
                for k in 0..n {
                    self.send_iov.clear();
                    self.push_held_verdict(k);
                    if let Err(e) = kernel.send(&self.send_iov) {
                        self.batch_verdicts = false;
                        let id = self.pipeline.released(k).map_or(0, |h| h.handle);
                        self.count_error_with(|| {
                            format!("verdict for held packet {id} failed: {e}; batch verdicts off")
                        });
                    }
                }
            }
            self.send_iov.clear();
            // Counted accepted, delivered or not (a failure was counted as an error).
            self.pipeline.finish_release();
        }
    }

    /// Adds the verdict of released packet `k` to `send_iov`.
    fn push_held_verdict(&mut self, k: usize) {
        let (Some(h), Some(hdr)) = (self.pipeline.released(k), self.release_hdrs.get_mut(k)) else {
            return;
        };
        let data = h.payload.then_some(&h.data[..]);
        push_verdict_iov(
            &mut self.send_iov,
            hdr,
            self.cfg.num,
            h.handle,
            NF_ACCEPT,
            h.mark,
            data,
        );
    }

    fn count_error(&mut self, what: &'static str) {
        self.count_error_with(|| what.to_string());
    }

    /// Counts an error and logs `what` (rate-limited, so formatted only when logged).
    pub(crate) fn count_error_with(&mut self, what: impl FnOnce() -> String) {
        self.pipeline.count_error(self.now, what);
    }

    /// True if one batch verdict answers exactly the pending packets: all want the same
    /// plain verdict, and their ids follow the last answered one without a gap (the kernel
    /// applies a batch verdict to every queued id up to the one given).
    fn batchable(&self) -> bool {
        let Some(first) = self.pending.first() else {
            return false;
        };
        // A batch verdict answers every queued id up to the one given: never while any
        // packet is held.
        self.batch_verdicts
            && !self.pipeline.holds()
            && self.pending.len() > 1
            && self.next_id == Some(first.id)
            && self.pending.iter().enumerate().all(|(k, p)| {
                p.id == first.id.wrapping_add(k as u32)
                    && !p.decision.payload
                    && p.decision.verdict == first.decision.verdict
                    && p.decision.mark == first.decision.mark
            })
    }

    fn send_verdicts(&mut self, kernel: &mut impl Kernel) {
        let Some(&first) = self.pending.first() else {
            return;
        };
        let last = self.pending[self.pending.len() - 1];
        if self.batchable() {
            let n = netlink::verdict_header(
                &mut self.hdrs[0],
                true,
                self.cfg.num,
                last.id,
                nf_verdict(first.decision.verdict),
                first.decision.mark,
                None,
            );
            let iov = [libc::iovec {
                iov_base: self.hdrs[0].as_mut_ptr().cast(),
                iov_len: n,
            }];
            match kernel.send(&iov) {
                Ok(()) => self.next_id = Some(last.id.wrapping_add(1)),
                // Answer them one by one instead.
                Err(_) => self.send_range(0, self.pending.len(), kernel),
            }
            return;
        }
        self.send_iov.clear();
        let mut bytes = 0;
        let mut from = 0;
        for k in 0..self.pending.len() {
            let len = self.push_verdict(k);
            if bytes + len > self.sndbuf_budget && k > from {
                // This one goes in the next sendmsg.
                let keep = self
                    .send_iov
                    .split_off(self.send_iov.len() - self.iov_count(k));
                self.flush(from, k, kernel);
                self.send_iov = keep;
                from = k;
                bytes = 0;
            }
            bytes += len;
        }
        self.flush(from, self.pending.len(), kernel);
        // Ids were answered in order; a gap (a packet the kernel could not deliver) only
        // means the next batch cannot be answered in one message.
        self.next_id = Some(last.id.wrapping_add(1));
    }

    /// Adds pending verdict `k` to `send_iov`; returns its size in bytes.
    fn push_verdict(&mut self, k: usize) -> usize {
        let p = self.pending[k];
        let data = p
            .decision
            .payload
            .then(|| &self.slots[p.slot][p.start..p.end]);
        push_verdict_iov(
            &mut self.send_iov,
            &mut self.hdrs[k],
            self.cfg.num,
            p.id,
            nf_verdict(p.decision.verdict),
            p.decision.mark,
            data,
        )
    }

    /// How many iovecs `push_verdict(k)` adds.
    fn iov_count(&self, k: usize) -> usize {
        let p = &self.pending[k];
        match (p.decision.payload, (p.end - p.start) % 4) {
            (false, _) => 1,
            (true, 0) => 2,
            (true, _) => 3,
        }
    }

    /// Sends the verdicts in `send_iov` (those of pending[from..to]) in one sendmsg; if
    /// that fails, one message at a time.
    fn flush(&mut self, from: usize, to: usize, kernel: &mut impl Kernel) {
        if self.send_iov.is_empty() {
            return;
        }
        if kernel.send(&self.send_iov).is_err() {
            self.send_iov.clear();
            self.send_range(from, to, kernel);
        }
        self.send_iov.clear();
    }

    fn send_range(&mut self, from: usize, to: usize, kernel: &mut impl Kernel) {
        for k in from..to {
            self.send_iov.clear();
            self.push_verdict(k);
            if let Err(e) = kernel.send(&self.send_iov) {
                // The packet stays queued in the kernel (until unbind drops it). Never let a
                // later batch verdict answer it in passing.
                self.batch_verdicts = false;
                let id = self.pending[k].id;
                self.count_error_with(|| {
                    format!("verdict for packet {id} failed: {e}; batch verdicts off")
                });
            }
        }
        self.send_iov.clear();
    }
}

/// Appends one NFQNL_MSG_VERDICT message to `iov`: its header (written into `hdr`), the
/// packet bytes if any, and their padding. Returns its size in bytes. `hdr` and `data` must
/// stay alive and unmoved until the iovecs are sent.
fn push_verdict_iov(
    iov: &mut Vec<libc::iovec>,
    hdr: &mut [u8; VERDICT_HDR_MAX],
    queue: u16,
    id: u32,
    verdict: u32,
    mark: Option<u32>,
    data: Option<&[u8]>,
) -> usize {
    let n = netlink::verdict_header(hdr, false, queue, id, verdict, mark, data.map(<[u8]>::len));
    iov.push(libc::iovec {
        iov_base: hdr.as_mut_ptr() as *mut libc::c_void,
        iov_len: n,
    });
    let Some(data) = data else { return n };
    let len = data.len();
    // sendmsg only reads through these pointers.
    iov.push(libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: len,
    });
    let pad = align(len) - len;
    if pad > 0 {
        iov.push(libc::iovec {
            iov_base: ZEROS.as_ptr() as *mut libc::c_void,
            iov_len: pad,
        });
    }
    n + align(len)
}

/// The pipeline settings of a queue configured with `cfg`: a verdict carries a changed
/// packet in one netlink attribute (at most 64 KiB), and the kernel keeps every held
/// packet's original, so only changed ones are copied.
fn settings(cfg: &QueueConfig) -> Settings {
    Settings {
        num: cfg.num,
        hold: cfg.hold,
        held_bytes: HeldBytes::Modified,
        ct_mark_bits: cfg.ct_mark_bits,
        max_payload: u16::MAX as usize - 4,
        // Carried out by the queue thread over ctnetlink (offload.rs).
        offload: cfg.offload.is_some(),
        // The rules tell a packet NAT matters to by the offload bits' first bit
        // (docs/offload.md, `OffloadMark::nat_mark`).
        nat_mark: cfg.offload.map_or(0, |m| m.nat_mark()),
    }
}

fn nf_verdict(v: Verdict) -> u32 {
    match v {
        Verdict::Accept => NF_ACCEPT,
        Verdict::Drop => NF_DROP,
        Verdict::Repeat => NF_REPEAT,
    }
}

const _: () = assert!(HDR_LEN == 20);
