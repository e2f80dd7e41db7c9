//! One NFQUEUE queue served by a dedicated thread: receive packets several per system call,
//! run the chain on each in place, and send all verdicts of a batch in one system call.
//!
//! Packets a service holds ([`relay_core::Action::Hold`]) wait in a deadline-ordered store
//! (see `hold.rs`); while any are held the thread waits for the socket with a timeout that
//! ends at the earliest deadline, and answers each held packet with its own verdict message,
//! never a batch verdict (which would answer every lower id with it).
//!
//! Nothing here is shared with other queues. The control plane talks to the thread through
//! two atomics and a mutex it only takes on reload; the per-packet path takes no lock and
//! allocates nothing.

use crate::NfqError;
use crate::affinity::{CpuMask, MAX_CPU, format_cpu_list};
use crate::hold::HoldStore;
use crate::netlink::{
    self, HDR_LEN, Messages, NF_ACCEPT, NF_DROP, NF_REPEAT, NFNL_SUBSYS_QUEUE, NFQNL_MSG_PACKET,
    NLMSG_ERROR, QueueParams, Socket, VERDICT_HDR_MAX, align4,
};
use crate::priority::{self, NICE_RANGE};
use relay_core::CtMarkBits;
use relay_core::Hook;
use relay_core::packet::PacketMeta;
use relay_core::ratelimit::RateLimit;
use relay_core::{Chain, Context, Decision, Packet, QueueCounters, Verdict};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// Ask the kernel for each packet's conntrack state (NFQA_CFG_F_CONNTRACK, set when a
    /// service [needs it](relay_core::ServiceFactory::needs_conntrack)). A kernel without
    /// CONFIG_NETFILTER_NETLINK_GLUE_CT refuses the flag: the queue then runs without it
    /// (see [`Queue::kernel_conntrack`]) and only `ct_mark_bits` can tell the state.
    pub conntrack: bool,
    /// Decode each packet's conntrack state from these nfmark bits, set by iptables rules in
    /// front of the NFQUEUE rule, and give the packet its mark back without them. The state
    /// the kernel sends with the packet (NFQA_CT_INFO), when it does, wins over the bits.
    pub ct_mark_bits: Option<CtMarkBits>,
    /// Limits on packets held for a later verdict.
    pub hold: HoldConfig,
    /// The CPU the queue's thread is pinned to (`sched_setaffinity`), or `None` to leave
    /// it where the scheduler likes (the affinity relayd was started with). Applied at
    /// start and on every update; must be one of [`crate::available_cpus`].
    pub cpu: Option<usize>,
    /// The queue thread's nice value (`setpriority`, -20 to 19: lower runs more), or
    /// `None` to leave the one it inherited from the thread that started it. On a core
    /// shared with the kernel's receive work, a negative value keeps the queue thread
    /// served under overload. Applied at start and on every update; lowering it needs
    /// CAP_SYS_NICE.
    pub nice: Option<i32>,
}

/// How many packets a queue may hold for a later verdict, and what happens beyond that.
///
/// The kernel counts held packets against the queue's `max_len` (they are queued, awaiting
/// a verdict), so `max_len` must leave room for a batch on top of `max_packets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldConfig {
    /// The most packets held at once (0: a hold is always an overflow). Set it to the sum
    /// of the queue's services' [`max_held`](relay_core::ServiceFactory::max_held).
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

impl QueueConfig {
    /// Defaults for queue `num`: whole packets, 1024 queued, fail-open, no GSO, 8 MiB buffer,
    /// 64 packets per system call, batch verdicts on, no conntrack state, no holding, no
    /// CPU pin, the inherited nice value.
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
            conntrack: false,
            ct_mark_bits: None,
            hold: HoldConfig::default(),
            cpu: None,
            nice: None,
        }
    }

    pub(crate) fn params(&self) -> QueueParams {
        QueueParams {
            copy_range: self.copy_range,
            max_len: self.max_len,
            fail_open: self.fail_open,
            gso: self.gso,
            conntrack: self.conntrack,
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
    update: Mutex<Option<(Chain, QueueConfig)>>,
    /// The worker's loop iterations so far, stored (relaxed) once per iteration: the
    /// heartbeat [`Queue::since_last_loop`] reads.
    loops: AtomicU64,
}

/// A running queue: its thread, counters, and the handle to reconfigure or stop it.
pub struct Queue {
    num: u16,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    counters: QueueCounters,
    rcvbuf: usize,
    kernel_conntrack: bool,
    /// The CPU the thread is pinned to now.
    pinned: Mutex<Option<usize>>,
    /// The mask the thread was started with, restored when a pin is taken away.
    inherited: CpuMask,
    /// The thread's kernel id, which `setpriority` takes.
    tid: libc::pid_t,
    /// The nice value set on the thread now (`None`: the inherited one).
    niced: Mutex<Option<i32>>,
    /// The nice value the thread was started with, restored when `nice` is taken away.
    inherited_nice: i32,
    /// The heartbeat as last read by the control plane, and when it was first seen at that
    /// value.
    heartbeat_seen: Mutex<(u64, Instant)>,
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

/// The longest a healthy queue thread goes without starting a new loop iteration when
/// it has nothing to do: it wakes from every receive (or wait for a held packet's
/// deadline) after this long. A busy thread goes round once per batch. So a thread whose
/// heartbeat ([`Queue::since_last_loop`]) is many times older than this is stuck (a
/// service that never returns, a thread stopped by a debugger, ...).
pub const IDLE_WAKE: Duration = Duration::from_millis(RECV_TIMEOUT_MS as u64);
/// The longest a stopping queue keeps draining while packets still arrive; what is still
/// queued after that is dropped by the kernel when the queue is unbound.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Held packets answered per sendmsg at most.
const RELEASE_CHUNK: usize = 64;

fn check_config(cfg: &QueueConfig, stage_mask: u32) -> Result<(), NfqError> {
    let invalid = |what: String| Err(NfqError::Invalid(format!("queue {}: {what}", cfg.num)));
    if let Some(bits) = cfg.ct_mark_bits {
        if let Err(e) = bits.validate() {
            return invalid(e);
        }
        if bits.mask() & stage_mask != 0 {
            return invalid(format!(
                "conntrack mark bits {:#x} overlap the stage bits {stage_mask:#x}",
                bits.mask()
            ));
        }
    }
    if cfg.hold.overflow == Verdict::Repeat {
        return invalid("the hold overflow verdict must be accept or drop".into());
    }
    let h = cfg.hold.max_packets as usize;
    if h > 0 && (cfg.max_len as usize) < h + cfg.batch.clamp(1, 1024) {
        return invalid(format!(
            "max_len {} leaves no room: the kernel counts the {h} packets a service may hold \
             against it; make it at least {}",
            cfg.max_len,
            h + cfg.batch.clamp(1, 1024)
        ));
    }
    if let Some(nice) = cfg.nice
        && !NICE_RANGE.contains(&nice)
    {
        return invalid(format!(
            "nice {nice} is outside {}..{}",
            NICE_RANGE.start(),
            NICE_RANGE.end()
        ));
    }
    if let Some(cpu) = cfg.cpu {
        let available = crate::available_cpus()
            .map_err(|e| NfqError::Affinity(cfg.num, format!("CPU {cpu}"), e))?;
        if !available.contains(&cpu) {
            return invalid(format!(
                "CPU {cpu} is not available to relayd (available: {})",
                format_cpu_list(&available)
            ));
        }
    }
    let min = cfg.copy_range as usize + QueueConfig::OVERHEAD;
    if cfg.rcvbuf < min {
        return Err(NfqError::Invalid(format!(
            "queue {}: rcvbuf {} is smaller than copy_range plus netlink overhead ({min})",
            cfg.num, cfg.rcvbuf
        )));
    }
    Ok(())
}

/// Receive slot size for a copy range: the packet, netlink overhead, room to grow.
fn slot_len(cfg: &QueueConfig) -> usize {
    cfg.copy_range as usize + QueueConfig::OVERHEAD + QueueConfig::TAILROOM
}

/// Send buffer wanted so that the verdicts of a whole batch fit in one sendmsg.
fn sndbuf_for(cfg: &QueueConfig) -> usize {
    (cfg.batch.clamp(1, 1024) * (slot_len(cfg) + VERDICT_HDR_MAX)).max(1 << 20)
}

impl Queue {
    /// Binds queue `cfg.num` (errors, such as the queue being taken, come back here) and
    /// starts its thread running `chain`.
    pub fn start(
        cfg: &QueueConfig,
        chain: Chain,
        counters: QueueCounters,
    ) -> Result<Queue, NfqError> {
        check_config(cfg, chain.stages().mask())?;
        let inherited = CpuMask::current()
            .map_err(|e| NfqError::Affinity(cfg.num, "the inherited CPUs".into(), e))?;
        // The thread starts with this thread's nice value (Linux keeps one per thread).
        let inherited_nice = priority::nice_of(0).map_err(|source| NfqError::Priority {
            num: cfg.num,
            what: "reading the inherited nice value".into(),
            hint: "",
            source,
        })?;
        let mut sock = Socket::open(cfg.rcvbuf, sndbuf_for(cfg), RECV_TIMEOUT_MS)?;
        let kernel_conntrack = sock.bind_queue(cfg.num, &cfg.params())?;
        let rcvbuf = sock.rcvbuf();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            has_update: AtomicBool::new(false),
            update: Mutex::new(None),
            loops: AtomicU64::new(0),
        });
        let worker_shared = shared.clone();
        let worker_counters = counters.clone();
        let (cpu, nice) = (cfg.cpu, cfg.nice);
        let cfg = cfg.clone();
        let num = cfg.num;
        // The thread tells its kernel id first thing, for setpriority.
        let (tid_tx, tid_rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name(format!("relayd-q{num}"))
            .spawn(move || {
                // The receiver waits for this; if it is gone, start has failed anyway.
                let _ = tid_tx.send(priority::current_tid());
                block_signals();
                let mut w = Worker::new(sock, cfg, chain, worker_counters, worker_shared);
                w.ct_refused = w.cfg.conntrack && !kernel_conntrack;
                w.run();
            })
            .map_err(|e| NfqError::Socket("spawn queue thread", e))?;
        let Ok(tid) = tid_rx.recv() else {
            // The thread ended without a word (it cannot, short of a panic).
            shared.stop.store(true, Ordering::Release);
            let _ = thread.join();
            return Err(NfqError::Socket(
                "spawn queue thread",
                io::Error::other("the queue thread ended at once"),
            ));
        };
        let queue = Queue {
            num,
            shared,
            thread: Some(thread),
            counters,
            rcvbuf,
            kernel_conntrack,
            pinned: Mutex::new(None),
            inherited,
            tid,
            niced: Mutex::new(None),
            inherited_nice,
            heartbeat_seen: Mutex::new((0, Instant::now())),
        };
        // Pinned and niced before any rule feeds the queue (the daemon binds queues
        // first); if the kernel refuses, the queue is stopped again (on drop) and the
        // error returned.
        queue.pin(cpu)?;
        queue.renice(nice)?;
        Ok(queue)
    }

    /// Pins the thread to `cpu`, or gives it back the mask it started with (`None`), if
    /// that changes anything.
    fn pin(&self, cpu: Option<usize>) -> Result<(), NfqError> {
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        if *pinned == cpu {
            return Ok(());
        }
        let what = cpu.map_or_else(|| "its inherited CPUs".to_string(), |c| format!("CPU {c}"));
        let mask = match cpu {
            Some(c) => CpuMask::one(c).ok_or_else(|| {
                NfqError::Invalid(format!("queue {}: CPU {c} is past CPU {MAX_CPU}", self.num))
            })?,
            None => self.inherited,
        };
        if let Some(t) = &self.thread {
            mask.apply(t)
                .map_err(|e| NfqError::Affinity(self.num, what, e))?;
        }
        *pinned = cpu;
        Ok(())
    }

    /// The CPU the queue's thread is pinned to, if any.
    pub fn cpu(&self) -> Option<usize> {
        *self.pinned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the thread's nice value to `nice`, or gives it back the one it started with
    /// (`None`), if that changes anything.
    fn renice(&self, nice: Option<i32>) -> Result<(), NfqError> {
        let mut niced = self.niced.lock().unwrap_or_else(|e| e.into_inner());
        if *niced == nice {
            return Ok(());
        }
        let (value, what) = match nice {
            Some(n) if NICE_RANGE.contains(&n) => {
                (n, format!("setting its thread's nice value to {n}"))
            }
            Some(n) => {
                return Err(NfqError::Invalid(format!(
                    "queue {}: nice {n} is outside {}..{}",
                    self.num,
                    NICE_RANGE.start(),
                    NICE_RANGE.end()
                )));
            }
            None => (
                self.inherited_nice,
                format!(
                    "restoring its thread's inherited nice value {}",
                    self.inherited_nice
                ),
            ),
        };
        // A finished thread's id may be reused: leave a dead queue's alone.
        if self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            let from = niced.unwrap_or(self.inherited_nice);
            priority::set_nice(self.tid, value).map_err(|source| NfqError::Priority {
                num: self.num,
                what,
                hint: priority::hint(&source, from, value),
                source,
            })?;
        }
        *niced = nice;
        Ok(())
    }

    /// The nice value set on the queue's thread, if any (`None`: the inherited one).
    pub fn nice(&self) -> Option<i32> {
        *self.niced.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The nice value the thread was started with, which `nice = None` restores.
    pub fn inherited_nice(&self) -> i32 {
        self.inherited_nice
    }

    /// The thread's nice value now: the one set, or the inherited one.
    pub fn effective_nice(&self) -> i32 {
        self.nice().unwrap_or(self.inherited_nice)
    }

    /// True if the kernel took the conntrack flag at start, so it sends each packet's
    /// conntrack state (false if not asked for, or refused by the kernel).
    pub fn kernel_conntrack(&self) -> bool {
        self.kernel_conntrack
    }

    /// The queue number.
    pub fn num(&self) -> u16 {
        self.num
    }

    /// The queue's counters.
    pub fn counters(&self) -> &QueueCounters {
        &self.counters
    }

    /// The receive buffer the kernel granted at start.
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf
    }

    /// True while the thread runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// The thread's heartbeat: how many times it has gone round its loop. A healthy
    /// thread adds one at least every [`IDLE_WAKE`], also when no packet comes, and once
    /// per batch under load.
    pub fn loops(&self) -> u64 {
        self.shared.loops.load(Ordering::Relaxed)
    }

    /// How long the thread has gone without a new loop iteration, as far as the callers
    /// of this method can tell: the time since a call first saw the current
    /// [`Queue::loops`] count. A thread that went round since the previous call gives
    /// zero, so the answer understates a stall by at most the time between two calls;
    /// call it periodically (the daemon's health check does). Stays small (under a few
    /// [`IDLE_WAKE`]s plus the calling period) while the thread is healthy, and grows
    /// without bound once it is stuck or has ended. The thread's only cost is one relaxed
    /// store per loop iteration, no clock read.
    pub fn since_last_loop(&self) -> Duration {
        let now = self.loops();
        let mut seen = self
            .heartbeat_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if seen.0 != now {
            *seen = (now, Instant::now());
        }
        seen.1.elapsed()
    }

    /// Hands the thread a new chain and queue configuration. The thread first resizes its
    /// buffers for the new copy range and batch, then tells the kernel, then switches chains
    /// between two batches, so no packet is lost or sees half of each chain.
    /// Packets held when the update is applied get their verdicts first (accept), so none
    /// is lost. A changed `cpu` or `nice` is applied at once, before anything else; if
    /// the kernel refuses either, the queue keeps its old settings and the error comes
    /// back.
    pub fn update(&self, chain: Chain, cfg: &QueueConfig) -> Result<(), NfqError> {
        check_config(cfg, chain.stages().mask())?;
        // The thread's CPU and nice value first: if the kernel refuses one, nothing else
        // changes (a new pin is taken back if the nice value is refused).
        let old_cpu = self.cpu();
        self.pin(cfg.cpu)?;
        if let Err(e) = self.renice(cfg.nice) {
            if let Err(back) = self.pin(old_cpu) {
                tracing::warn!(queue = self.num, "{back}");
            }
            return Err(e);
        }
        *self.shared.update.lock().unwrap_or_else(|e| e.into_inner()) = Some((chain, cfg.clone()));
        self.shared.has_update.store(true, Ordering::Release);
        Ok(())
    }

    /// Asks the thread to drain and stop, without waiting (see [`Queue::join`]): it serves
    /// what is still queued (remove the rules that feed the queue first), accepts what
    /// services hold at once, then unbinds.
    pub fn request_stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }

    /// Waits for a stopping thread to finish.
    pub fn join(mut self) {
        self.shutdown();
    }

    /// Drains, unbinds and waits: `request_stop` then `join`.
    pub fn stop(self) {
        self.request_stop();
        self.join();
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

/// Queue threads take no signals: the control plane handles them, and a signal landing
/// here would only cut a receive short.
fn block_signals() {
    // SAFETY: a zeroed sigset filled by sigfillset, applied to this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
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
    cfg: QueueConfig,
    chain: Chain,
    counters: QueueCounters,
    shared: Arc<Shared>,
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
    /// Packets held for a later verdict.
    hold: HoldStore,
    /// Held packets being answered (slots of `hold`).
    releasing: Vec<u32>,
    release_hdrs: Vec<[u8; VERDICT_HDR_MAX]>,
    slot_len: usize,
    slots: Vec<Vec<u8>>,
    iov: Vec<libc::iovec>,
    mmsg: Vec<libc::mmsghdr>,
    pending: Vec<Pending>,
    hdrs: Vec<[u8; VERDICT_HDR_MAX]>,
    send_iov: Vec<libc::iovec>,
    sndbuf_budget: usize,
    log: RateLimit,
    /// Loop iterations so far (published in `shared.loops`).
    loops: u64,
    /// The services' context, its outbox kept from batch to batch.
    cx: Context,
    /// Sends what the services emitted.
    emitter: crate::Emitter,
}

// SAFETY: the raw pointers in `iov`, `mmsg` and `send_iov` point only into `slots` and
// `hdrs`, which the worker owns; they are rebuilt before each use on the worker's thread.
unsafe impl Send for Worker {}

static ZEROS: [u8; 4] = [0; 4];

impl Worker {
    fn new(
        sock: Socket,
        cfg: QueueConfig,
        chain: Chain,
        counters: QueueCounters,
        shared: Arc<Shared>,
    ) -> Worker {
        let mut w = Worker {
            sock,
            batch_verdicts: cfg.batch_verdicts,
            cfg,
            chain,
            counters,
            shared,
            next_id: None,
            config_seq: None,
            ct_refused: false,
            hold: HoldStore::new(0, 0),
            releasing: Vec::with_capacity(RELEASE_CHUNK),
            release_hdrs: vec![[0u8; VERDICT_HDR_MAX]; RELEASE_CHUNK],
            slot_len: 0,
            slots: Vec::new(),
            iov: Vec::new(),
            mmsg: Vec::new(),
            pending: Vec::new(),
            hdrs: Vec::new(),
            send_iov: Vec::new(),
            sndbuf_budget: 0,
            log: RateLimit::new(10),
            loops: 0,
            cx: Context::new(0, Instant::now()),
            emitter: crate::Emitter::new(),
        };
        w.size_buffers();
        w
    }

    /// (Re)allocates the receive slots and verdict buffers for the current configuration.
    /// Only at start and on reload.
    fn size_buffers(&mut self) {
        let batch = self.cfg.batch.clamp(1, 1024);
        self.slot_len = slot_len(&self.cfg);
        self.slots.resize_with(batch, Vec::new);
        for s in &mut self.slots {
            if s.len() < self.slot_len {
                s.resize(self.slot_len, 0);
            }
        }
        let empty_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        self.iov = vec![empty_iov; batch];
        // SAFETY: an all-zero mmsghdr is a valid (empty) value.
        self.mmsg = vec![unsafe { std::mem::zeroed::<libc::mmsghdr>() }; batch];
        self.pending = Vec::with_capacity(batch);
        self.hdrs = vec![[0u8; VERDICT_HDR_MAX]; batch];
        self.send_iov = Vec::with_capacity(batch * 3);
        // A sendmsg larger than the send buffer fails with EMSGSIZE: stay well below what
        // the kernel actually granted (it may cap our request).
        self.sndbuf_budget = (self.sock.sndbuf() / 2)
            .saturating_sub(1024)
            .max(VERDICT_HDR_MAX + 0x10000);
        // Only ever called with nothing held (start, and reload after releasing).
        debug_assert!(self.hold.is_empty());
        self.hold = HoldStore::new(self.cfg.hold.max_packets as usize, self.cfg.hold.max_bytes);
    }

    /// The parameters the kernel is asked for: the configuration's, less conntrack once
    /// the kernel refused it.
    fn params(&self) -> QueueParams {
        QueueParams {
            conntrack: self.cfg.conntrack && !self.ct_refused,
            ..self.cfg.params()
        }
    }

    fn run(&mut self) {
        tracing::debug!(queue = self.cfg.num, "queue thread running");
        let mut stopping_since: Option<Instant> = None;
        loop {
            // The heartbeat: a plain store of our own count, no read-modify-write.
            self.loops = self.loops.wrapping_add(1);
            self.shared.loops.store(self.loops, Ordering::Relaxed);
            if self.shared.has_update.swap(false, Ordering::Acquire) {
                self.apply_update();
            }
            if stopping_since.is_none() && self.shared.stop.load(Ordering::Acquire) {
                stopping_since = Some(Instant::now());
            }
            if stopping_since.is_some_and(|t| t.elapsed() > DRAIN_LIMIT) {
                tracing::warn!(
                    queue = self.cfg.num,
                    "still busy after draining for {DRAIN_LIMIT:?}; unbinding"
                );
                break;
            }
            if !self.hold.is_empty() {
                // A stopping queue lets everything go at once; otherwise what is due.
                let now = stopping_since.is_none().then(Instant::now);
                self.release_held(now);
            }
            if let Some(due) = self.hold.next_due() {
                // Wake for a packet or for the earliest deadline, whichever comes first.
                let wait = due
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(RECV_TIMEOUT_MS.into()));
                match self.sock.wait_readable(wait) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        if e.raw_os_error() != Some(libc::EINTR) {
                            self.count_error_with(|| format!("poll failed: {e}"));
                        }
                        continue;
                    }
                }
            }
            match self.receive() {
                Ok(0) => {}
                Ok(n) => self.handle_batch(n),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => {
                        if stopping_since.is_some() {
                            break; // drained: nothing arrived for a whole receive timeout
                        }
                    }
                    Some(libc::EINTR) => {}
                    Some(libc::ENOBUFS) => {
                        // The kernel could not deliver some packets to us: they were
                        // accepted or dropped by the queue's policy. Count and go on.
                        self.counters.enobufs.inc();
                    }
                    _ => {
                        self.counters.errors.inc();
                        if let Some(s) = self.log.allow(Instant::now()) {
                            tracing::error!(
                                queue = self.cfg.num,
                                suppressed = s,
                                "receive failed: {e}"
                            );
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                },
            }
        }
        // Unbinding drops whatever is still queued in the kernel: held packets go first.
        self.release_held(None);
        if let Err(e) = self.sock.unbind_queue(self.cfg.num) {
            tracing::debug!(queue = self.cfg.num, "unbind: {e}");
        }
        tracing::debug!(queue = self.cfg.num, "queue thread stopped");
    }

    fn apply_update(&mut self) {
        let update = self
            .shared
            .update
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some((chain, cfg)) = update else { return };
        let num = self.cfg.num;
        // Held packets were held by the old chain under the old limits: answer them now
        // rather than carry them over (a reload is rare; none is lost).
        self.release_held(None);
        if cfg != self.cfg {
            if (cfg.rcvbuf != self.cfg.rcvbuf || sndbuf_for(&cfg) != sndbuf_for(&self.cfg))
                && let Err(e) = self.sock.set_buffers(cfg.rcvbuf, sndbuf_for(&cfg))
            {
                tracing::error!(queue = num, "new socket buffer sizes refused: {e}");
            }
            // Buffers first: from the kernel's next packet on, it may copy more.
            let old = self.params();
            self.batch_verdicts = cfg.batch_verdicts && self.batch_verdicts;
            self.cfg = cfg;
            self.size_buffers();
            let params = self.params();
            if params != old {
                match self.sock.configure_async(num, &params) {
                    Ok(seq) => self.config_seq = Some((seq, params.conntrack)),
                    Err(e) => {
                        tracing::error!(queue = num, "sending new queue parameters failed: {e}")
                    }
                }
            }
        }
        self.chain = chain;
        tracing::info!(queue = num, "chain replaced");
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
            h.msg_hdr.msg_flags = 0;
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
        let now = Instant::now();
        let mut cx = std::mem::replace(&mut self.cx, Context::new(self.cfg.num, now));
        cx.queue = self.cfg.num;
        cx.now = now;
        cx.bypass_mark = self.chain.bypass_mark();
        cx.stages = self.chain.stages();
        self.pending.clear();
        for i in 0..n {
            let len = (self.mmsg[i].msg_len as usize).min(self.slots[i].len());
            let truncated = self.mmsg[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.handle_datagram(i, len, truncated, &mut cx);
        }
        self.send_verdicts();
        if !cx.outbox().is_empty() {
            self.emitter.flush(cx.outbox_mut(), self.cfg.num, now);
        }
        self.cx = cx;
    }

    fn handle_datagram(&mut self, slot: usize, len: usize, truncated: bool, cx: &mut Context) {
        let packet_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET;
        let mut found: Option<(netlink::PacketMsg, usize)> = None;
        let (mut odd, mut refused, mut config_refused) = (0u32, None, None);
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
                if let Some((seq, with_ct)) = self.config_seq
                    && seq == m.seq
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
                        match self.sock.configure_async(self.cfg.num, &params) {
                            Ok(seq) => self.config_seq = Some((seq, false)),
                            Err(e) => config_refused = Some(e),
                        }
                    } else if err != 0 {
                        config_refused = Some(io::Error::from_raw_os_error(err.saturating_neg()));
                    }
                } else if err != 0 {
                    refused = Some(io::Error::from_raw_os_error(err.saturating_neg()));
                }
            }
        }
        if let Some(e) = config_refused {
            self.counters.errors.inc();
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
                let decision = Decision {
                    verdict: self.chain.malformed_verdict(),
                    mark: None,
                    payload: false,
                    hold: None,
                };
                self.pending.push(Pending {
                    id,
                    slot,
                    start: 0,
                    end: 0,
                    decision,
                });
                self.count_error(
                    "packet message cut short or without payload; answered by the malformed policy",
                );
            }
            return;
        };
        let mut meta = PacketMeta {
            id: p.id,
            queue: self.cfg.num,
            hw_protocol: p.hw_protocol,
            hook: Hook::from_kernel(p.hook),
            mark: p.mark,
            indev: p.indev,
            outdev: p.outdev,
            orig_len: p.cap_len,
            gso: p.gso,
            ct: None,
        };
        // The mark the verdict must restore when the conntrack bits were set on the packet.
        let mut restore_mark = None;
        if let Some(bits) = self.cfg.ct_mark_bits {
            let (ct, rest) = bits.decode(p.mark);
            meta.ct = ct;
            meta.mark = rest;
            if p.mark != rest {
                restore_mark = Some(rest);
            }
        }
        if let Some(info) = p.ct_info {
            meta.ct = netlink::ct_from_kernel(info);
        }
        let buf = std::mem::take(&mut self.slots[slot]);
        let mut pkt = Packet::in_buffer(buf, start, end, meta);
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
                let mut d = Decision {
                    verdict: self.chain.malformed_verdict(),
                    mark: None,
                    payload: false,
                    hold: None,
                };
                self.strip_ct_bits(&mut d, restore_mark);
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
        self.strip_ct_bits(&mut decision, restore_mark);
        if let Some(until) = decision.hold.take() {
            let data = decision.payload.then(|| &self.slots[slot][start..end]);
            if until <= cx.now {
                self.counters.accepted.inc(); // due already: answer with the batch
            } else if self
                .hold
                .insert(until, p.id, decision.mark, end - start, data)
            {
                return;
            } else {
                self.counters.hold_overflow.inc();
                decision.verdict = self.cfg.hold.overflow;
                match decision.verdict {
                    Verdict::Drop => self.counters.dropped.inc(),
                    _ => self.counters.accepted.inc(),
                }
            }
        }
        self.pending.push(Pending {
            id: p.id,
            slot,
            start,
            end,
            decision,
        });
    }

    /// Gives the packet its mark back without the conntrack bits: `restore` is its mark
    /// without them when it came with some.
    fn strip_ct_bits(&self, d: &mut Decision, restore: Option<u32>) {
        let Some(bits) = self.cfg.ct_mark_bits else {
            return;
        };
        if d.verdict == Verdict::Drop {
            return;
        }
        d.mark = match d.mark {
            Some(m) => Some(m & !bits.mask()),
            None => restore,
        };
    }

    /// Answers held packets: those due at `now`, or all of them for `None`. Each gets its
    /// own verdict message (several per sendmsg), in deadline order.
    fn release_held(&mut self, now: Option<Instant>) {
        while self.hold.peek_due(now).is_some() {
            self.releasing.clear();
            self.send_iov.clear();
            let mut bytes = 0;
            while self.releasing.len() < RELEASE_CHUNK {
                let Some(slot) = self.hold.peek_due(now) else {
                    break;
                };
                let h = self.hold.get(slot);
                let size = VERDICT_HDR_MAX + if h.payload { align4(h.data.len()) } else { 0 };
                if !self.releasing.is_empty() && bytes + size > self.sndbuf_budget {
                    break;
                }
                bytes += size;
                self.hold.pop();
                self.releasing.push(slot);
            }
            for k in 0..self.releasing.len() {
                self.push_held_verdict(k);
            }
            if self.sock.send_iov(&self.send_iov).is_err() {
                // One at a time, to find the one the kernel refuses.
                for k in 0..self.releasing.len() {
                    self.send_iov.clear();
                    self.push_held_verdict(k);
                    if let Err(e) = self.sock.send_iov(&self.send_iov) {
                        self.batch_verdicts = false;
                        let id = self.hold.get(self.releasing[k]).id;
                        self.count_error_with(|| {
                            format!("verdict for held packet {id} failed: {e}; batch verdicts off")
                        });
                    }
                }
            }
            self.send_iov.clear();
            for k in 0..self.releasing.len() {
                self.hold.free(self.releasing[k]);
            }
            self.counters.accepted.add(self.releasing.len() as u64);
            self.releasing.clear();
        }
    }

    /// Adds the verdict of held packet `releasing[k]` to `send_iov`.
    fn push_held_verdict(&mut self, k: usize) {
        let h = self.hold.get(self.releasing[k]);
        let data = h.payload.then_some(&h.data[..]);
        push_verdict_iov(
            &mut self.send_iov,
            &mut self.release_hdrs[k],
            self.cfg.num,
            h.id,
            NF_ACCEPT,
            h.mark,
            data,
        );
    }

    fn count_error(&mut self, what: &'static str) {
        self.count_error_with(|| what.to_string());
    }

    fn count_error_with(&mut self, what: impl FnOnce() -> String) {
        self.counters.errors.inc();
        if let Some(s) = self.log.allow(Instant::now()) {
            tracing::warn!(queue = self.cfg.num, suppressed = s, "{}", what());
        }
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
            && self.hold.is_empty()
            && self.pending.len() > 1
            && self.next_id == Some(first.id)
            && self.pending.iter().enumerate().all(|(k, p)| {
                p.id == first.id.wrapping_add(k as u32)
                    && !p.decision.payload
                    && p.decision.verdict == first.decision.verdict
                    && p.decision.mark == first.decision.mark
            })
    }

    fn send_verdicts(&mut self) {
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
            match self.sock.send(&self.hdrs[0][..n]) {
                Ok(()) => self.next_id = Some(last.id.wrapping_add(1)),
                // Answer them one by one instead.
                Err(_) => self.send_each(0),
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
                self.flush(from, k);
                self.send_iov = keep;
                from = k;
                bytes = 0;
            }
            bytes += len;
        }
        self.flush(from, self.pending.len());
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
    fn flush(&mut self, from: usize, to: usize) {
        if self.send_iov.is_empty() {
            return;
        }
        if self.sock.send_iov(&self.send_iov).is_err() {
            self.send_iov.clear();
            self.send_range(from, to);
        }
        self.send_iov.clear();
    }

    fn send_each(&mut self, from: usize) {
        self.send_range(from, self.pending.len());
    }

    fn send_range(&mut self, from: usize, to: usize) {
        for k in from..to {
            self.send_iov.clear();
            self.push_verdict(k);
            if let Err(e) = self.sock.send_iov(&self.send_iov) {
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
    let pad = align4(len) - len;
    if pad > 0 {
        iov.push(libc::iovec {
            iov_base: ZEROS.as_ptr() as *mut libc::c_void,
            iov_len: pad,
        });
    }
    n + align4(len)
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
    use super::*;
    use relay_core::{Action, ChainSettings, Counter, Service, StageMark};
    use std::sync::mpsc;

    const NUM: u16 = 26;

    /// A service that holds the queue thread inside `process` until the test says go: a
    /// thread stuck in a service, as a service bug would leave it.
    struct Block(mpsc::Receiver<()>);

    impl Service for Block {
        fn process(&mut self, _pkt: &mut Packet, _cx: &mut Context) -> Action {
            let _ = self.0.recv_timeout(Duration::from_secs(20));
            Action::Continue
        }
    }

    /// The largest `since_last_loop` seen over `over`, sampled every 50 ms, and the loop
    /// count at the end.
    fn watch(q: &Queue, over: Duration) -> (Duration, u64) {
        let end = Instant::now() + over;
        let mut worst = Duration::ZERO;
        while Instant::now() < end {
            worst = worst.max(q.since_last_loop());
            std::thread::sleep(Duration::from_millis(50));
        }
        (worst.max(q.since_last_loop()), q.loops())
    }

    /// An idle queue thread goes round its loop every IDLE_WAKE, so its heartbeat stays
    /// fresh; a thread stuck in a service stops it, and the age grows until the service
    /// returns. Needs root (a queue bound in a testbed namespace).
    #[test]
    fn the_heartbeat_tells_an_idle_thread_from_a_stuck_one() {
        let tb = relay_testbed::Testbed::new("nfq-heartbeat");
        let n = tb.node("q");
        n.ip(&["link", "set", "lo", "up"]);
        let out = n.sh(&format!(
            "iptables -w -A OUTPUT -o lo -p udp --dport 9 -j NFQUEUE --queue-num {NUM}"
        ));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (go, wait) = mpsc::channel();
        let q = n.run(move || {
            let mut chain = Chain::new(ChainSettings {
                malformed: Verdict::Accept,
                hook: relay_core::Hook::Output,
                stages: StageMark::DEFAULT,
            });
            chain.push("block", Box::new(Block(wait)), Counter::new());
            Queue::start(&QueueConfig::new(NUM), chain, QueueCounters::default()).unwrap()
        });

        // Idle: about ten wake-ups a second, never long without one.
        let before = q.loops();
        let (worst, after) = watch(&q, Duration::from_millis(800));
        eprintln!(
            "idle: {} loops in 0.8 s, oldest heartbeat {worst:?}",
            after - before
        );
        assert!(
            after >= before + 4,
            "{before} -> {after} loops in 0.8 s idle"
        );
        assert!(
            worst < IDLE_WAKE * 4,
            "idle thread's heartbeat {worst:?} old"
        );

        // One packet into the blocking service: the thread stops going round.
        n.run(|| {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.send_to(b"x", "127.0.0.1:9").unwrap();
        });
        std::thread::sleep(Duration::from_millis(200));
        let stuck_at = q.loops();
        let (age, later) = watch(&q, Duration::from_millis(1000));
        eprintln!("stuck: heartbeat {age:?} old, loops {stuck_at} -> {later}");
        assert_eq!(later, stuck_at, "the stuck thread went round its loop");
        assert!(
            age >= Duration::from_millis(800),
            "stuck for 1 s, heartbeat {age:?} old"
        );

        // The service returns: fresh again at once.
        go.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (worst, resumed) = watch(&q, Duration::from_millis(400));
        assert!(resumed > stuck_at, "no loop after the service returned");
        assert!(
            worst < IDLE_WAKE * 4,
            "heartbeat {worst:?} old after resuming"
        );
        assert_eq!(q.counters().packets.get(), 1);
        q.stop();
    }
}
