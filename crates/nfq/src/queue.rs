//! One NFQUEUE queue served by a dedicated thread: receive packets several per system call,
//! run the chain on each in place, and send all verdicts of a batch in one system call.
//!
//! Nothing here is shared with other queues. The control plane talks to the thread through
//! two atomics and a mutex it only takes on reload; the per-packet path takes no lock and
//! allocates nothing.

use crate::NfqError;
use crate::netlink::{
    self, HDR_LEN, Messages, NF_ACCEPT, NF_DROP, NF_REPEAT, NFNL_SUBSYS_QUEUE, NFQNL_MSG_PACKET,
    NLMSG_ERROR, QueueParams, Socket, VERDICT_HDR_MAX, align4,
};
use relay_core::packet::{Hook, PacketMeta};
use relay_core::ratelimit::RateLimit;
use relay_core::{Chain, Context, Decision, Packet, QueueCounters, Verdict};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a queue is set up in the kernel and served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// The queue number.
    pub num: u16,
    /// Bytes of each packet copied to us (0xffff = whole packets, also GSO ones).
    pub copy_range: u32,
    /// Packets the kernel holds for us before the queue counts as full.
    pub max_len: u32,
    /// When the queue is full, accept packets (true) or drop them (false).
    pub fail_open: bool,
    /// Take GSO super-packets unsegmented (only if no service rewrites packets).
    pub gso: bool,
    /// Socket receive buffer in bytes (at least copy range plus netlink overhead).
    pub rcvbuf: usize,
    /// Datagrams received per system call (1 = one recv and one verdict per packet).
    pub batch: usize,
    /// Answer a batch of identical plain verdicts with one NFQNL_MSG_VERDICT_BATCH.
    pub batch_verdicts: bool,
}

impl QueueConfig {
    /// Defaults for queue `num`: whole packets, 1024 queued, fail-open, no GSO, 8 MiB buffer,
    /// 64 packets per system call, batch verdicts on.
    pub fn new(num: u16) -> QueueConfig {
        QueueConfig {
            num,
            copy_range: 0xffff,
            max_len: 1024,
            fail_open: true,
            gso: false,
            rcvbuf: 8 << 20,
            batch: 64,
            batch_verdicts: true,
        }
    }

    fn params(&self) -> QueueParams {
        QueueParams {
            copy_range: self.copy_range,
            max_len: self.max_len,
            fail_open: self.fail_open,
            gso: self.gso,
        }
    }

    /// Netlink and attribute overhead per received packet, on top of the copy range.
    pub const OVERHEAD: usize = 512;

    /// Spare bytes after each packet so that a service can grow it in place.
    pub const TAILROOM: usize = 512;
}

struct Shared {
    stop: AtomicBool,
    has_update: AtomicBool,
    update: Mutex<Option<(Chain, QueueParams)>>,
}

/// A running queue: its thread, counters, and the handle to reconfigure or stop it.
pub struct Queue {
    num: u16,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    counters: QueueCounters,
    rcvbuf: usize,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("num", &self.num)
            .field("rcvbuf", &self.rcvbuf)
            .finish()
    }
}

/// How long the thread waits in recv before it looks at its stop flag.
const RECV_TIMEOUT_MS: u32 = 100;
/// The longest a stopping queue keeps draining while packets still arrive.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

impl Queue {
    /// Binds queue `cfg.num` (errors, such as the queue being taken, come back here) and
    /// starts its thread running `chain`.
    pub fn start(
        cfg: &QueueConfig,
        chain: Chain,
        counters: QueueCounters,
    ) -> Result<Queue, NfqError> {
        let min = cfg.copy_range as usize + QueueConfig::OVERHEAD;
        if cfg.rcvbuf < min {
            return Err(NfqError::Invalid(format!(
                "queue {}: rcvbuf {} is smaller than copy_range plus netlink overhead ({min})",
                cfg.num, cfg.rcvbuf
            )));
        }
        let batch = cfg.batch.clamp(1, 1024);
        let slot = cfg.copy_range as usize + QueueConfig::OVERHEAD + QueueConfig::TAILROOM;
        // Verdicts of a whole batch go in one sendmsg: the send buffer must hold them.
        let sndbuf = (batch * (slot + VERDICT_HDR_MAX)).max(1 << 20);
        let mut sock = Socket::open(cfg.rcvbuf, sndbuf, RECV_TIMEOUT_MS)?;
        sock.bind_queue(cfg.num, &cfg.params())?;
        let rcvbuf = sock.rcvbuf();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            has_update: AtomicBool::new(false),
            update: Mutex::new(None),
        });
        let worker_shared = shared.clone();
        let worker_counters = counters.clone();
        let (num, params, batch_verdicts) = (cfg.num, cfg.params(), cfg.batch_verdicts);
        let thread = std::thread::Builder::new()
            .name(format!("relayd-q{num}"))
            .spawn(move || {
                let mut w = Worker::new(
                    sock,
                    num,
                    params,
                    chain,
                    worker_counters,
                    worker_shared,
                    batch,
                    slot,
                );
                w.batch_verdicts = batch_verdicts;
                w.run();
            })
            .map_err(|e| NfqError::Socket("spawn queue thread", e))?;
        Ok(Queue {
            num,
            shared,
            thread: Some(thread),
            counters,
            rcvbuf,
        })
    }

    /// The queue number.
    pub fn num(&self) -> u16 {
        self.num
    }

    /// The queue's counters.
    pub fn counters(&self) -> &QueueCounters {
        &self.counters
    }

    /// The receive buffer the kernel granted.
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf
    }

    /// True while the thread runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Hands the thread a new chain and queue parameters; it switches between two
    /// batches, so no packet is lost or sees half of each chain.
    pub fn update(&self, chain: Chain, cfg: &QueueConfig) {
        *self.shared.update.lock().unwrap_or_else(|e| e.into_inner()) = Some((chain, cfg.params()));
        self.shared.has_update.store(true, Ordering::Release);
    }

    /// Stops the queue after draining it: the thread serves what is still queued (call
    /// this after removing the rules that feed the queue), then unbinds and exits.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!(queue = self.num, "queue thread panicked");
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.shutdown();
    }
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

struct Worker {
    sock: Socket,
    num: u16,
    params: QueueParams,
    chain: Chain,
    counters: QueueCounters,
    shared: Arc<Shared>,
    batch_verdicts: bool,
    slot_len: usize,
    slots: Vec<Vec<u8>>,
    iov: Vec<libc::iovec>,
    mmsg: Vec<libc::mmsghdr>,
    pending: Vec<Pending>,
    hdrs: Vec<[u8; VERDICT_HDR_MAX]>,
    send_iov: Vec<libc::iovec>,
    sndbuf_budget: usize,
    log: RateLimit,
}

// SAFETY: the raw pointers in `iov`, `mmsg` and `send_iov` point only into `slots` and
// `hdrs`, which the worker owns; they are rebuilt before each use on the worker's thread.
unsafe impl Send for Worker {}

static ZEROS: [u8; 4] = [0; 4];

impl Worker {
    #[allow(clippy::too_many_arguments)]
    fn new(
        sock: Socket,
        num: u16,
        params: QueueParams,
        chain: Chain,
        counters: QueueCounters,
        shared: Arc<Shared>,
        batch: usize,
        slot_len: usize,
    ) -> Worker {
        let empty_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: an all-zero mmsghdr is a valid (empty) value.
        let empty_mmsg: libc::mmsghdr = unsafe { std::mem::zeroed() };
        Worker {
            sock,
            num,
            params,
            chain,
            counters,
            shared,
            batch_verdicts: true,
            slot_len,
            slots: (0..batch).map(|_| vec![0u8; slot_len]).collect(),
            iov: vec![empty_iov; batch],
            mmsg: vec![empty_mmsg; batch],
            pending: Vec::with_capacity(batch),
            hdrs: vec![[0u8; VERDICT_HDR_MAX]; batch],
            send_iov: Vec::with_capacity(batch * 3),
            sndbuf_budget: (batch * (slot_len + VERDICT_HDR_MAX)).max(1 << 20) / 2,
            log: RateLimit::new(10),
        }
    }

    fn run(&mut self) {
        tracing::debug!(queue = self.num, "queue thread running");
        let mut stopping_since: Option<Instant> = None;
        loop {
            if self.shared.has_update.swap(false, Ordering::Acquire) {
                self.apply_update();
            }
            if stopping_since.is_none() && self.shared.stop.load(Ordering::Acquire) {
                stopping_since = Some(Instant::now());
            }
            if stopping_since.is_some_and(|t| t.elapsed() > DRAIN_LIMIT) {
                break;
            }
            match self.receive() {
                Ok(0) => {}
                Ok(n) => self.handle_batch(n),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => {
                        if stopping_since.is_some() {
                            break; // drained: nothing arrived for a whole receive timeout
                        }
                    }
                    Some(libc::ENOBUFS) => {
                        // The kernel could not deliver some packets to us: they were
                        // accepted or dropped by the queue's policy. Count and go on.
                        self.counters.enobufs.inc();
                    }
                    _ => {
                        self.counters.errors.inc();
                        if let Some(s) = self.log.allow(Instant::now()) {
                            tracing::error!(
                                queue = self.num,
                                suppressed = s,
                                "receive failed: {e}"
                            );
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                },
            }
        }
        if let Err(e) = self.sock.unbind_queue(self.num) {
            tracing::debug!(queue = self.num, "unbind: {e}");
        }
        tracing::debug!(queue = self.num, "queue thread stopped");
    }

    fn apply_update(&mut self) {
        let update = self
            .shared
            .update
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((chain, params)) = update {
            if params != self.params {
                match self.sock.configure(self.num, &params) {
                    Ok(()) => self.params = params,
                    Err(e) => tracing::error!(
                        queue = self.num,
                        "new queue parameters refused, keeping the old: {e}"
                    ),
                }
            }
            self.chain = chain;
            tracing::info!(queue = self.num, "chain replaced");
        }
    }

    fn receive(&mut self) -> io::Result<usize> {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.len() < self.slot_len {
                slot.resize(self.slot_len, 0);
            }
            self.iov[i] = libc::iovec {
                iov_base: slot.as_mut_ptr() as *mut libc::c_void,
                iov_len: slot.len(),
            };
            let h = &mut self.mmsg[i];
            h.msg_hdr.msg_iov = &mut self.iov[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_len = 0;
        }
        if self.slots.len() == 1 {
            // One recv per packet: the baseline the batched path is measured against.
            let n = self.sock.recv(&mut self.slots[0])?;
            self.mmsg[0].msg_len = n as u32;
            return Ok(1);
        }
        self.sock.recv_many(&mut self.mmsg)
    }

    fn handle_batch(&mut self, n: usize) {
        self.counters.batches.inc();
        let cx = Context {
            queue: self.num,
            now: Instant::now(),
        };
        self.pending.clear();
        for i in 0..n {
            let len = (self.mmsg[i].msg_len as usize).min(self.slots[i].len());
            self.handle_datagram(i, len, &cx);
        }
        self.send_verdicts();
    }

    fn handle_datagram(&mut self, slot: usize, len: usize, cx: &Context) {
        let packet_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET;
        let mut found: Option<(netlink::PacketMsg, usize)> = None;
        let (mut odd, mut refused) = (0u32, None);
        for m in Messages::new(&self.slots[slot][..len]) {
            if m.ty == packet_type {
                match netlink::parse_packet(m.payload) {
                    // nfnetlink_queue sends one packet per datagram; anything else is odd.
                    Some(p) if found.is_none() => found = Some((p, m.offset)),
                    _ => odd += 1,
                }
            } else if m.ty == NLMSG_ERROR && m.payload.len() >= 4 {
                let err =
                    i32::from_ne_bytes([m.payload[0], m.payload[1], m.payload[2], m.payload[3]]);
                if err != 0 {
                    refused = Some(io::Error::from_raw_os_error(-err));
                }
            }
        }
        if odd > 0 {
            self.count_error("unparsable or extra packet message");
        }
        if let Some(e) = refused {
            self.count_error_with(|| format!("kernel refused a verdict: {e}"));
        }
        let Some((p, base)) = found else { return };
        let Some((s, e)) = p.payload else {
            // A packet message without payload cannot be processed; let it through.
            self.pending.push(Pending {
                id: p.id,
                slot,
                start: 0,
                end: 0,
                decision: Decision::ACCEPT,
            });
            self.count_error("packet message without payload");
            return;
        };
        let meta = PacketMeta {
            id: p.id,
            queue: self.num,
            hw_protocol: p.hw_protocol,
            hook: Hook::from_kernel(p.hook),
            mark: p.mark,
            indev: p.indev,
            outdev: p.outdev,
            orig_len: p.cap_len,
            gso: p.gso,
        };
        let buf = std::mem::take(&mut self.slots[slot]);
        let mut pkt = Packet::in_buffer(buf, base + s, base + e, meta);
        // A service bug must not take the queue down with it: the packet gets the queue's
        // malformed-packet verdict and the panic is counted. (Unwinding costs nothing
        // until it happens.)
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let d = self.chain.run(&mut pkt, cx, &self.counters);
            (d, pkt)
        }));
        let (mut decision, pkt) = match run {
            Ok(r) => r,
            Err(_) => {
                self.count_error("a service panicked on a packet; verdict by the malformed policy");
                let d = Decision {
                    verdict: self.chain.malformed_verdict(),
                    mark: None,
                    payload: false,
                };
                // The packet (and its buffer) unwound with the panic: give the slot a new one.
                self.pending.push(Pending {
                    id: p.id,
                    slot,
                    start: 0,
                    end: 0,
                    decision: d,
                });
                self.slots[slot] = vec![0u8; self.slot_len];
                return;
            }
        };
        let (start, end) = pkt.bounds();
        self.slots[slot] = pkt.into_buffer();
        if decision.payload && end - start > u16::MAX as usize - 4 {
            // A netlink attribute cannot carry more; keep the original packet.
            decision.payload = false;
            self.count_error("modified packet too large for a verdict; original kept");
        }
        self.pending.push(Pending {
            id: p.id,
            slot,
            start,
            end,
            decision,
        });
    }

    fn count_error(&mut self, what: &'static str) {
        self.count_error_with(|| what.to_string());
    }

    fn count_error_with(&mut self, what: impl FnOnce() -> String) {
        self.counters.errors.inc();
        if let Some(s) = self.log.allow(Instant::now()) {
            tracing::warn!(queue = self.num, suppressed = s, "{}", what());
        }
    }

    fn send_verdicts(&mut self) {
        let Some(first) = self.pending.first().copied() else {
            return;
        };
        let uniform = self.pending.iter().all(|p| {
            !p.decision.payload
                && p.decision.verdict == first.decision.verdict
                && p.decision.mark == first.decision.mark
        });
        if self.batch_verdicts && uniform && self.pending.len() > 1 {
            // Ids grow monotonically and every packet up to the largest id is in this batch
            // (or was already answered), so one batch verdict answers them all.
            let max_id = self
                .pending
                .iter()
                .map(|p| p.id)
                .fold(first.id, |a, b| if id_after(b, a) { b } else { a });
            let n = netlink::verdict_header(
                &mut self.hdrs[0],
                true,
                self.num,
                max_id,
                nf_verdict(first.decision.verdict),
                first.decision.mark,
                None,
            );
            if let Err(e) = self.sock.send(&self.hdrs[0][..n]) {
                self.count_error_with(|| format!("batch verdict failed: {e}"));
            }
            return;
        }
        self.send_iov.clear();
        let mut bytes = 0;
        for k in 0..self.pending.len() {
            let p = self.pending[k];
            let payload_len = p.decision.payload.then_some(p.end - p.start);
            let n = netlink::verdict_header(
                &mut self.hdrs[k],
                false,
                self.num,
                p.id,
                nf_verdict(p.decision.verdict),
                p.decision.mark,
                payload_len,
            );
            self.send_iov.push(libc::iovec {
                iov_base: self.hdrs[k].as_mut_ptr() as *mut libc::c_void,
                iov_len: n,
            });
            bytes += n;
            if let Some(len) = payload_len {
                let data = &mut self.slots[p.slot][p.start..p.end];
                self.send_iov.push(libc::iovec {
                    iov_base: data.as_mut_ptr() as *mut libc::c_void,
                    iov_len: len,
                });
                let pad = align4(len) - len;
                if pad > 0 {
                    self.send_iov.push(libc::iovec {
                        iov_base: ZEROS.as_ptr() as *mut libc::c_void,
                        iov_len: pad,
                    });
                }
                bytes += align4(len);
            }
            if bytes >= self.sndbuf_budget || self.send_iov.len() > 1000 {
                self.flush_iov();
                bytes = 0;
            }
        }
        self.flush_iov();
    }

    fn flush_iov(&mut self) {
        if self.send_iov.is_empty() {
            return;
        }
        if let Err(e) = self.sock.send_iov(&self.send_iov) {
            self.count_error_with(|| format!("verdicts failed: {e}"));
        }
        self.send_iov.clear();
    }
}

/// True if packet id `a` comes after `b` (ids wrap around).
fn id_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

fn nf_verdict(v: Verdict) -> u32 {
    match v {
        Verdict::Accept => NF_ACCEPT,
        Verdict::Drop => NF_DROP,
        Verdict::Repeat => NF_REPEAT,
    }
}

const _: () = assert!(HDR_LEN == 20);

#[cfg(test)]
mod tests {
    use super::id_after;

    #[test]
    fn ids_wrap() {
        assert!(id_after(5, 4));
        assert!(!id_after(4, 5));
        assert!(id_after(2, u32::MAX - 1));
    }
}
