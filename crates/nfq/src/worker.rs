//! The queue thread's shell: the system calls around the pure [`Engine`]. It receives a
//! batch with one recvmmsg into the engine's slots, hands it over with the time, lends the
//! engine the socket to send verdicts and parameters with sendmsg (the [`Kernel`] trait),
//! and sends what the services emitted with the [`Emitter`] after the verdicts. It also
//! waits for held packets' deadlines, takes the control plane's updates and unbinds on
//! stop.
//!
//! The control plane talks to the thread through the datapaths' common control block
//! ([`Control`]: two atomics, and a mutex taken only on reload); the per-packet path takes
//! no lock and allocates nothing.

use crate::Emitter;
use crate::config::{QueueConfig, sndbuf_for};
use crate::engine::{AfterError, Engine, Kernel, Received};
use crate::netlink::QueueParams;
use crate::offload::Offloader;
use crate::socket::Socket;
use relay_core::{Chain, QueueCounters};
use relay_pipeline::Control;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the thread waits in recv before it looks at its stop flag.
pub(crate) const RECV_TIMEOUT_MS: u32 = 100;

/// The longest a stopping queue keeps draining while packets still arrive; what is still
/// queued after that is dropped by the kernel when the queue is unbound.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// What the control plane shares with the queue thread: a reload brings a new chain and
/// queue configuration.
pub(crate) type Shared = Control<(Chain, QueueConfig)>;

impl Kernel for Socket {
    fn send(&mut self, iov: &[libc::iovec]) -> io::Result<()> {
        self.send_iov(iov)
    }

    fn configure(&mut self, num: u16, params: &QueueParams) -> io::Result<u32> {
        self.configure_async(num, params)
    }
}

/// The queue thread: its socket, engine and emitter, and the receive headers.
pub(crate) struct Worker {
    sock: Socket,
    engine: Engine,
    shared: Arc<Shared>,
    emitter: Emitter,
    /// Carries out the chain's offloads after each batch's verdicts.
    offloader: Offloader,
    iov: Vec<libc::iovec>,
    mmsg: Vec<libc::mmsghdr>,
    /// Loop iterations so far (published in `shared.loops`).
    loops: u64,
}

// SAFETY: the raw pointers in `iov` and `mmsg` point only into the engine's receive
// slots; they are rebuilt before each receive on the worker's thread.
unsafe impl Send for Worker {}

impl Worker {
    /// The worker of a bound socket; `kernel_conntrack` says whether the kernel took the
    /// conntrack flag.
    pub(crate) fn new(
        sock: Socket,
        cfg: QueueConfig,
        chain: Chain,
        counters: QueueCounters,
        shared: Arc<Shared>,
        kernel_conntrack: bool,
    ) -> Worker {
        let sndbuf = sock.sndbuf();
        let offloader = Offloader::new(cfg.num, cfg.offload, counters.clone());
        let engine = Engine::new(
            cfg,
            chain,
            counters,
            sndbuf,
            kernel_conntrack,
            Instant::now(),
        );
        Worker {
            sock,
            engine,
            shared,
            emitter: Emitter::new(),
            offloader,
            iov: Vec::new(),
            mmsg: Vec::new(),
            loops: 0,
        }
    }

    fn num(&self) -> u16 {
        self.engine.cfg().num
    }

    /// Serves the queue until asked to stop, then releases what is held and unbinds.
    pub(crate) fn run(&mut self) {
        let num = self.num();
        tracing::debug!(queue = num, "queue thread running");
        let mut stopping_since: Option<Instant> = None;
        loop {
            // The heartbeat, and a reload's update if one waits.
            self.loops = self.loops.wrapping_add(1);
            if let Some(update) = self.shared.tick(self.loops) {
                self.apply_update(update);
            }
            if stopping_since.is_none() && self.shared.stop_requested() {
                stopping_since = Some(Instant::now());
            }
            if stopping_since.is_some_and(|t| t.elapsed() > DRAIN_LIMIT) {
                tracing::warn!(
                    queue = self.num(),
                    "still busy after draining for {DRAIN_LIMIT:?}; unbinding"
                );
                break;
            }
            if self.engine.holds() {
                // A stopping queue lets everything go at once; otherwise what is due.
                let now = stopping_since.is_none().then(Instant::now);
                self.engine.release_held(now, &mut self.sock);
            }
            if let Some(due) = self.engine.next_due() {
                // Wake for a packet or for the earliest deadline, whichever comes first.
                let wait = due
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(RECV_TIMEOUT_MS.into()));
                match self.sock.wait_readable(wait) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        if e.raw_os_error() != Some(libc::EINTR) {
                            self.engine.count_error_with(|| format!("poll failed: {e}"));
                        }
                        continue;
                    }
                }
            }
            match self.receive() {
                Ok(0) => {}
                Ok(n) => self.handle_batch(n),
                Err(e) => match self.engine.receive_failed(&e, stopping_since.is_some()) {
                    AfterError::Continue => {}
                    AfterError::Drained => break,
                    AfterError::Backoff => std::thread::sleep(Duration::from_millis(10)),
                },
            }
        }
        // Unbinding drops whatever is still queued in the kernel: held packets go first.
        self.engine.release_held(None, &mut self.sock);
        if let Err(e) = self.sock.unbind_queue(num) {
            tracing::debug!(queue = num, "unbind: {e}");
        }
        tracing::debug!(queue = num, "queue thread stopped");
    }

    fn apply_update(&mut self, (chain, cfg): (Chain, QueueConfig)) {
        let num = self.num();
        // Held packets were held by the old chain under the old limits: answer them now
        // rather than carry them over (a reload is rare; none is lost).
        self.engine.release_held(None, &mut self.sock);
        let old = self.engine.cfg();
        if cfg != *old {
            if (cfg.rcvbuf != old.rcvbuf || sndbuf_for(&cfg) != sndbuf_for(old))
                && let Err(e) = self.sock.set_buffers(cfg.rcvbuf, sndbuf_for(&cfg))
            {
                tracing::error!(queue = num, "new socket buffer sizes refused: {e}");
            }
            // Buffers first: from the kernel's next packet on, it may copy more.
            let sndbuf = self.sock.sndbuf();
            // A new generation revokes the old offloads (the skip rules moved on too).
            self.offloader.set_mark(cfg.offload);
            self.engine.reconfigure(cfg, sndbuf, &mut self.sock);
        }
        self.engine.set_chain(chain);
        tracing::info!(queue = num, "chain replaced");
    }

    /// Receives a batch into the engine's slots: how many datagrams came.
    fn receive(&mut self) -> io::Result<usize> {
        let slots = self.engine.recv_slots();
        let empty_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // Sized to the batch at start and after a reload; no allocation otherwise.
        self.iov.resize(slots.len(), empty_iov);
        // SAFETY: an all-zero mmsghdr is a valid (empty) value.
        self.mmsg
            .resize(slots.len(), unsafe { std::mem::zeroed::<libc::mmsghdr>() });
        for (i, slot) in slots.iter_mut().enumerate() {
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
        if slots.len() == 1 {
            // One recv per packet: the baseline the batched path is measured against.
            let n = self.sock.recv(&mut slots[0])?;
            self.mmsg[0].msg_len = n as u32;
            return Ok(1);
        }
        self.sock.recv_many(&mut self.mmsg)
    }

    /// Hands a received batch to the engine (which sends the verdicts), then sends what
    /// its services emitted.
    fn handle_batch(&mut self, n: usize) {
        let now = Instant::now();
        let received = self.mmsg[..n].iter().map(|m| Received {
            len: m.msg_len as usize,
            truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        });
        // Decapsulating services must know the box's addresses (renewed once a second).
        if let Some(local) = self.emitter.renewed_local_addresses(now) {
            self.engine.set_local_addresses(local);
        }
        self.engine.handle_batch(received, now, &mut self.sock);
        // After the verdicts: the first packet's entry is confirmed by now.
        self.offloader.carry_out(self.engine.take_offloads());
        let num = self.num();
        let outbox = self.engine.outbox_mut();
        if !outbox.is_empty() {
            self.emitter.flush(outbox, num, now);
        }
    }
}
