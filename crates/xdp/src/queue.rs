//! One XDP queue: an AF_XDP socket on one rx queue of the ingress interface, served by a
//! dedicated thread that runs the queue's chain on each packet and transmits what it
//! accepts on an AF_XDP socket of the egress interface the XDP program found in the FIB.
//!
//! Per round the thread takes up to `batch` packets from the rx ring. Each packet is
//! copied once, from its frame into the chain's packet buffer (relayd's `Packet` owns a
//! growable buffer, which services that grow packets need), and once more, with its
//! Ethernet header, into a frame of the egress socket; the rx frame goes straight back to
//! the fill ring. After the round: one `sendto` per egress socket that has frames queued,
//! the completion rings read back, and what services emitted sent with the
//! [`relay_nfq::Emitter`] (one `sendmmsg` per family), as on an NFQUEUE queue. Nothing is
//! allocated or locked per packet.
//!
//! What the chain decides:
//! - accept (or repeat: there is no netfilter hook to repeat) -> forwarded, TTL or hop
//!   limit decreased;
//! - drop -> the frame is reused, nothing sent;
//! - a packet that cannot leave by AF_XDP (no next hop known to the program: egress
//!   ifindex 0; larger than the egress MTU or a frame; an egress interface whose socket
//!   cannot be opened; the ingress interface itself) -> handed to the kernel's
//!   forwarding through the outbox, counted in `to_kernel`.
//!
//! A panicking service is caught: the packet gets the queue's malformed verdict (its
//! original bytes, from the rx frame, if that is accept) and the panic is counted.

use crate::forward::{self, Framed};
use crate::port::{PortConfig, ZeroCopy};
use crate::program::{FrameMeta, META_LEN};
use crate::xsk::{BindMode, Socket, SocketConfig};
use relay_core::ratelimit::RateLimit;
use relay_core::{
    Chain, Context, Counter, Counters, Packet, PacketMeta, QueueCounters, Tally, Verdict,
};
use relay_nfq::Emitter;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the thread waits for packets before it looks at its stop flag.
const WAIT_MS: i32 = 100;

/// Headroom in front of a packet in the chain's buffer (encapsulation grows in place).
const HEADROOM: usize = 256;

/// The chain's packet buffer: headroom and the largest IP packet.
const PACKET_BUF: usize = HEADROOM + 65_536;

/// Egress sockets a queue thread keeps at most (one per egress interface).
const MAX_EGRESS: usize = 64;

/// How long an egress interface whose socket could not be opened is left to the kernel
/// before the thread tries again.
const EGRESS_RETRY: Duration = Duration::from_secs(5);

/// The longest a healthy thread goes without starting a new round ([`WAIT_MS`]).
pub const IDLE_WAKE: Duration = Duration::from_millis(WAIT_MS as u64);

/// What the XDP datapath counts per queue beyond the [`QueueCounters`], by name (shown in
/// `relayd status` and the metrics).
#[derive(Clone)]
pub struct XdpCounters {
    /// Frames transmitted on an egress socket.
    pub transmitted: Counter,
    /// Packets dropped because the egress socket had no free frame or tx ring slot.
    pub tx_full: Counter,
    /// Packets handed to the kernel's forwarding instead (see the module docs).
    pub to_kernel: Counter,
    /// Frames without the program's metadata, or not IP (counted, dropped).
    pub bad_frames: Counter,
    /// The named set the counters above are in, with the sockets' own statistics as
    /// gauges (`rx_dropped`, `rx_ring_full`, `fill_ring_empty`, `tx_invalid`, ...).
    pub set: Counters,
}

impl XdpCounters {
    /// Counters registered in `set`.
    pub fn new(set: &Counters) -> XdpCounters {
        XdpCounters {
            transmitted: set.counter("transmitted"),
            tx_full: set.counter("tx_full"),
            to_kernel: set.counter("to_kernel"),
            bad_frames: set.counter("bad_frames"),
            set: set.clone(),
        }
    }
}

/// What the control plane shares with the queue thread.
struct Shared {
    stop: AtomicBool,
    has_update: AtomicBool,
    update: Mutex<Option<Chain>>,
    loops: AtomicU64,
}

/// Errors starting an XDP queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The rx socket could not be opened or bound.
    #[error("XDP queue {num} (rx queue {rx_queue} of {interface}): {source}")]
    Socket {
        /// relayd's queue number.
        num: u16,
        /// The rx queue.
        rx_queue: u32,
        /// The interface.
        interface: String,
        /// Why.
        source: crate::xsk::XskError,
    },
    /// The thread could not be started.
    #[error("XDP queue {0}: starting its thread: {1}")]
    Thread(u16, io::Error),
}

/// A running XDP queue: its thread, counters, and the handle to update or stop it.
pub struct XdpQueue {
    num: u16,
    rx_queue: u32,
    fd: std::os::fd::RawFd,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    counters: QueueCounters,
    xdp: XdpCounters,
    heartbeat_seen: Mutex<(u64, Instant)>,
}

impl std::fmt::Debug for XdpQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpQueue")
            .field("num", &self.num)
            .field("rx_queue", &self.rx_queue)
            .finish()
    }
}

/// What a queue thread needs to start: the port's settings and which of its rx queues.
#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// relayd's number of the queue.
    pub num: u16,
    /// The ingress interface's index.
    pub ifindex: u32,
    /// The rx queue served.
    pub rx_queue: u32,
    /// The CPU the thread is pinned to, if any.
    pub cpu: Option<usize>,
}

fn bind_mode(z: ZeroCopy) -> BindMode {
    match z {
        ZeroCopy::Auto => BindMode::Auto,
        ZeroCopy::On => BindMode::ZeroCopy,
        ZeroCopy::Off => BindMode::Copy,
    }
}

impl XdpQueue {
    /// Opens the rx socket of `q.rx_queue` and starts its thread. The caller then binds
    /// the socket into the program's XSKMAP ([`XdpQueue::fd`]), which starts the traffic.
    pub fn start(
        port: &PortConfig,
        q: &QueueSettings,
        chain: Chain,
        counters: QueueCounters,
        xdp: XdpCounters,
    ) -> Result<XdpQueue, QueueError> {
        let cfg = SocketConfig {
            ifindex: q.ifindex,
            queue: q.rx_queue,
            rx_size: ring_size(port.frames / 2),
            tx_size: 0,
            frames: port.frames,
            frame_size: PortConfig::FRAME_SIZE,
            bind: bind_mode(port.zero_copy),
        };
        let rx = Socket::open(&cfg).map_err(|source| QueueError::Socket {
            num: q.num,
            rx_queue: q.rx_queue,
            interface: port.interface.clone(),
            source,
        })?;
        let fd = rx.fd();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            has_update: AtomicBool::new(false),
            update: Mutex::new(None),
            loops: AtomicU64::new(0),
        });
        let mut worker = Worker {
            batch: port.batch.max(1),
            rx,
            emitter: Emitter::new(),
            shared: shared.clone(),
            path: PacketPath {
                num: q.num,
                ingress: q.ifindex,
                rx_queue: q.rx_queue,
                frames: port.frames,
                zero_copy: port.zero_copy,
                malformed: chain.malformed_verdict(),
                chain,
                egress: Vec::new(),
                counters: counters.clone(),
                xdp: xdp.clone(),
                tally: Tally::new(
                    &xdp.set,
                    "to_kernel_sent",
                    "to_kernel_queue_full",
                    "to_kernel_failed",
                ),
                buf: vec![0u8; PACKET_BUF],
                scratch: vec![0u8; PACKET_BUF],
                panic_log: RateLimit::new(10),
            },
        };
        let cpu = q.cpu;
        let num = q.num;
        let thread = std::thread::Builder::new()
            .name(format!("relayd-xdp{num}"))
            .spawn(move || {
                if let Some(cpu) = cpu {
                    pin_to(cpu);
                }
                worker.run();
            })
            .map_err(|e| QueueError::Thread(num, e))?;
        Ok(XdpQueue {
            num,
            rx_queue: q.rx_queue,
            fd,
            shared,
            thread: Some(thread),
            counters,
            xdp,
            heartbeat_seen: Mutex::new((0, Instant::now())),
        })
    }

    /// relayd's number of the queue.
    pub fn num(&self) -> u16 {
        self.num
    }

    /// The rx queue it serves.
    pub fn rx_queue(&self) -> u32 {
        self.rx_queue
    }

    /// The rx socket, for the program's XSKMAP. Valid while the queue runs.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.fd
    }

    /// The queue's counters.
    pub fn counters(&self) -> &QueueCounters {
        &self.counters
    }

    /// The XDP datapath's own counters.
    pub fn xdp_counters(&self) -> &XdpCounters {
        &self.xdp
    }

    /// True while the thread runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// How long the thread has not started a new round, as seen by the control plane's
    /// calls (see `relay_nfq::Queue::since_last_loop`).
    pub fn since_last_loop(&self) -> Duration {
        let loops = self.shared.loops.load(Ordering::Relaxed);
        let mut seen = self
            .heartbeat_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if seen.0 != loops {
            *seen = (loops, Instant::now());
        }
        seen.1.elapsed()
    }

    /// Switches the thread to a new chain between two rounds.
    pub fn update(&self, chain: Chain) {
        *self.shared.update.lock().unwrap_or_else(|e| e.into_inner()) = Some(chain);
        self.shared.has_update.store(true, Ordering::Release);
    }

    /// Asks the thread to stop after its round.
    pub fn request_stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
    }

    /// Waits for the thread (after [`XdpQueue::request_stop`]).
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Stops the thread and waits for it; its sockets close with it.
    pub fn stop(self) {
        self.request_stop();
        self.join();
    }
}

/// The largest power of two at most `n` (ring sizes must be powers of two), at least 64.
fn ring_size(n: u32) -> u32 {
    let n = n.max(64);
    1 << (31 - n.leading_zeros())
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            tracing::warn!(
                cpu,
                "pinning an XDP queue thread: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// An egress interface's socket, or the time opening one last failed.
struct Egress {
    ifindex: u32,
    socket: Option<Socket>,
    mtu: usize,
    failed_at: Option<Instant>,
}

/// The queue thread's state.
struct Worker {
    batch: usize,
    rx: Socket,
    emitter: Emitter,
    shared: Arc<Shared>,
    /// Everything the per-packet path touches, apart from the rx socket it reads from.
    path: PacketPath,
}

impl Worker {
    fn run(&mut self) {
        tracing::debug!(queue = self.path.num, "XDP queue thread running");
        let mut cx = Context::new(self.path.num, Instant::now());
        let mut loops = 0u64;
        let mut stats_at = Instant::now();
        loop {
            loops = loops.wrapping_add(1);
            self.shared.loops.store(loops, Ordering::Relaxed);
            if self.shared.has_update.swap(false, Ordering::Acquire)
                && let Some(chain) = self
                    .shared
                    .update
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
            {
                self.path.malformed = chain.malformed_verdict();
                self.path.chain = chain;
            }
            if self.shared.stop.load(Ordering::Acquire) {
                break;
            }
            let now = Instant::now();
            cx.queue = self.path.num;
            cx.now = now;
            cx.bypass_mark = self.path.chain.bypass_mark();
            cx.stages = self.path.chain.stages();
            let n = self.round(&mut cx);
            for e in &mut self.path.egress {
                if let Some(s) = &mut e.socket {
                    if s.pending_tx() > 0
                        && let Err(err) = s.flush()
                    {
                        self.path.counters.errors.inc();
                        tracing::debug!(queue = self.path.num, "egress flush: {err}");
                    }
                    s.complete();
                }
            }
            if !cx.outbox().is_empty() {
                self.emitter.flush(cx.outbox_mut(), self.path.num, now);
            }
            if now.duration_since(stats_at) >= Duration::from_secs(1) {
                stats_at = now;
                self.publish_stats();
            }
            if n == 0 {
                // Frames the kernel left on a tx ring (its send buffer was full) go out
                // with the next flush: come back for them soon rather than after WAIT_MS.
                let pending = self
                    .path
                    .egress
                    .iter()
                    .filter_map(|e| e.socket.as_ref())
                    .any(|s| s.pending_tx() > 0);
                match self.rx.wait(if pending { 1 } else { WAIT_MS }) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.path.counters.errors.inc();
                        tracing::warn!(queue = self.path.num, "waiting for packets: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            } else {
                self.path.counters.batches.inc();
            }
        }
        self.publish_stats();
        tracing::debug!(queue = self.path.num, "XDP queue thread stopped");
    }

    /// Takes one batch from the rx ring and handles each packet.
    fn round(&mut self, cx: &mut Context) -> usize {
        let path = &mut self.path;
        self.rx
            .recv(self.batch, |frame, head| path.packet(frame, head, cx))
    }

    /// Copies the sockets' statistics into the gauges.
    fn publish_stats(&self) {
        let set = &self.path.xdp.set;
        if let Ok(s) = self.rx.stats() {
            set.gauge("rx_dropped").set(s.rx_dropped);
            set.gauge("rx_invalid").set(s.rx_invalid_descs);
            set.gauge("rx_ring_full").set(s.rx_ring_full);
            set.gauge("fill_ring_empty").set(s.rx_fill_ring_empty_descs);
        }
        let (mut invalid, mut empty) = (0, 0);
        for e in &self.path.egress {
            if let Some(Ok(s)) = e.socket.as_ref().map(Socket::stats) {
                invalid += s.tx_invalid_descs;
                empty += s.tx_ring_empty_descs;
            }
        }
        set.gauge("tx_invalid").set(invalid);
        set.gauge("tx_ring_empty").set(empty);
    }
}

/// The per-packet part of a round: the chain, its buffers, the egress sockets and the
/// counters (the worker's rx socket stays outside, so that a batch can be read from it
/// while each packet is handled here).
struct PacketPath {
    num: u16,
    ingress: u32,
    rx_queue: u32,
    frames: u32,
    zero_copy: ZeroCopy,
    malformed: Verdict,
    chain: Chain,
    egress: Vec<Egress>,
    counters: QueueCounters,
    xdp: XdpCounters,
    tally: Tally,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    panic_log: RateLimit,
}

impl PacketPath {
    fn packet(&mut self, frame: &[u8], head: &[u8], cx: &mut Context) {
        let meta = head
            .len()
            .checked_sub(META_LEN)
            .and_then(|at| FrameMeta::parse(&head[at..]));
        let (Some(meta), Some((ethertype, ip))) = (meta, forward::ip_payload(frame)) else {
            self.counters.packets.inc();
            self.xdp.bad_frames.inc();
            self.counters.dropped.inc();
            return;
        };
        if ip.len() + HEADROOM > self.buf.len() {
            self.xdp.bad_frames.inc();
            return;
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf[HEADROOM..HEADROOM + ip.len()].copy_from_slice(ip);
        let pmeta = PacketMeta {
            queue: self.num,
            hw_protocol: ethertype,
            indev: self.ingress,
            outdev: meta.ifindex,
            // veth's XDP hands over locally generated packets with partial checksums.
            csum: relay_core::Checksum::Unknown,
            ..PacketMeta::default()
        };
        let mut pkt = Packet::in_buffer(buf, HEADROOM, HEADROOM + ip.len(), pmeta);
        let chain = &mut self.chain;
        let counters = &self.counters;
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let d = chain.run(&mut pkt, cx, counters);
            (d, pkt)
        }));
        match run {
            Ok((d, pkt)) => {
                if d.verdict != Verdict::Drop {
                    self.send(&meta, pkt.data(), d.mark.unwrap_or(0), cx);
                }
                self.buf = pkt.into_buffer();
            }
            Err(_) => {
                self.counters.errors.inc();
                if let Some(suppressed) = self.panic_log.allow(cx.now) {
                    tracing::warn!(
                        queue = self.num,
                        suppressed,
                        "a service panicked on a packet; verdict by the malformed policy"
                    );
                }
                self.buf = vec![0u8; PACKET_BUF];
                if self.malformed == Verdict::Accept {
                    self.send(&meta, ip, 0, cx);
                }
            }
        }
    }

    /// Sends `packet` to the next hop `meta` on the egress socket, or to the kernel.
    /// `mark`: the chain's verdict mark, which only a packet handed to the kernel keeps
    /// (an AF_XDP transmit carries none).
    fn send(&mut self, meta: &FrameMeta, packet: &[u8], mark: u32, cx: &mut Context) {
        match forward::forwardable(packet) {
            Ok(_) => {}
            // Not for what the program steers (it passes TTL <= 1 to the kernel), but a
            // service may rewrite the header: the kernel's path answers it.
            Err(Framed::HopLimit) => return self.via_kernel(packet, mark, cx),
            Err(_) => {
                self.xdp.bad_frames.inc();
                return;
            }
        }
        // Egress ifindex 0: the program found no next hop (no neighbour yet, larger than
        // the egress MTU); the kernel's forwarding resolves or answers it.
        if meta.ifindex == 0 {
            return self.via_kernel(packet, mark, cx);
        }
        let Some(e) = self.egress_for(meta.ifindex) else {
            return self.via_kernel(packet, mark, cx);
        };
        let fits = packet.len() <= e.mtu;
        let Some(socket) = e.socket.as_mut().filter(|_| fits) else {
            return self.via_kernel(packet, mark, cx);
        };
        // `forwardable` passed and the frame has the packet's length: `frame` succeeds.
        if socket.send(forward::ETH_LEN + packet.len(), |out| {
            let framed = forward::frame(out, meta, packet);
            debug_assert!(matches!(framed, Framed::Ready(_)), "{framed:?}");
        }) {
            self.xdp.transmitted.inc();
        } else {
            self.xdp.tx_full.inc();
        }
    }

    /// Hands `packet` to the kernel's forwarding through the outbox (a raw socket, after
    /// the round): the exceptional path, so a copy in the scratch buffer is no burden.
    fn via_kernel(&mut self, packet: &[u8], mark: u32, cx: &mut Context) {
        self.xdp.to_kernel.inc();
        let Some(copy) = self.scratch.get_mut(..packet.len()) else {
            return;
        };
        copy.copy_from_slice(packet);
        // `forward` decreases the TTL and refuses what no router forwards (counted).
        let _ = cx.forward(copy, mark, &self.tally);
    }

    /// The egress entry for `ifindex`, opening its socket on first use (and again after
    /// [`EGRESS_RETRY`] if that failed); `None` for the ingress interface itself (its rx
    /// socket has no tx ring) and when the table is full.
    fn egress_for(&mut self, ifindex: u32) -> Option<&mut Egress> {
        if ifindex == self.ingress {
            return None;
        }
        let i = match self.egress.iter().position(|e| e.ifindex == ifindex) {
            Some(i) => i,
            None if self.egress.len() < MAX_EGRESS => {
                self.egress.push(Egress {
                    ifindex,
                    socket: None,
                    mtu: 0,
                    failed_at: None,
                });
                self.egress.len() - 1
            }
            None => return None,
        };
        let e = &mut self.egress[i];
        if e.socket.is_none() && e.failed_at.is_none_or(|t| t.elapsed() >= EGRESS_RETRY) {
            let cfg = SocketConfig {
                ifindex,
                queue: self.rx_queue,
                rx_size: 0,
                tx_size: ring_size(self.frames / 2),
                frames: self.frames,
                frame_size: PortConfig::FRAME_SIZE,
                bind: bind_mode(self.zero_copy),
            };
            match Socket::open(&cfg) {
                Ok(s) => {
                    e.mtu = interface_mtu(ifindex).unwrap_or(1500);
                    e.socket = Some(s);
                    e.failed_at = None;
                }
                Err(err) => {
                    tracing::warn!(
                        queue = self.num,
                        ifindex,
                        "no AF_XDP socket on the egress interface; its packets go through the kernel: {err}"
                    );
                    e.failed_at = Some(Instant::now());
                }
            }
        }
        Some(e)
    }
}

/// The MTU of interface `ifindex` (sysfs).
fn interface_mtu(ifindex: u32) -> Option<usize> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `name` has IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(ifindex, name.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name into `name`.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_str()
        .ok()?;
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}
