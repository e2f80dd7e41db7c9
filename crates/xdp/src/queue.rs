//! One XDP queue: an AF_XDP socket on one rx queue of the ingress interface, served by a
//! dedicated thread (`worker.rs`) that hands each packet to the queue's
//! [`relay_pipeline::Pipeline`] and transmits what it accepts on an AF_XDP socket of the
//! egress interface the XDP program found in the FIB. This is the handle the control plane
//! keeps: start, update, stop, counters and heartbeat.
//!
//! What the chain decides:
//! - accept (or repeat: there is no netfilter hook to repeat) -> forwarded, TTL or hop
//!   limit decreased;
//! - drop -> the frame is reused, nothing sent;
//! - hold -> kept by the pipeline and forwarded when due (a port's services cannot hold
//!   today: the configuration refuses them, so every hold is an overflow, accepted at once);
//! - a packet that cannot leave by AF_XDP (no next hop known to the program: egress
//!   ifindex 0; larger than the egress MTU or a frame; an egress interface whose socket is
//!   not open yet or cannot be opened; the ingress interface itself) -> handed to the
//!   kernel's forwarding through the outbox, counted in `to_kernel`.
//!
//! A panicking service is caught by the pipeline: the packet gets the queue's malformed
//! verdict (its original bytes, from the rx frame, if that is accept) and the panic is
//! counted.
//!
//! With offload on, a flow the chain offloads goes into the program's `flows` map after
//! the round, and its later packets to the kernel's forwarding (`offload.rs`).

pub use crate::counters::XdpCounters;
use crate::egress::{EgressTable, bind_mode, ring_size};
use crate::offload::{FlowMaps, Offloader};
use crate::settings::PortConfig;
use crate::worker::{PACKET_BUF, PacketPath, Shared, WAIT_MS, Worker};
use crate::xsk::{Socket, SocketConfig};
use relay_core::{Chain, QueueCounters, Tally};
use relay_dataio::Emitter;
use relay_pipeline::{Pipeline, Settings};
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest a healthy thread goes without starting a new round (its wait for packets,
/// 100 ms).
pub const IDLE_WAKE: Duration = Duration::from_millis(WAIT_MS as u64);

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
    /// The generation of offloaded flows in force
    /// ([`Program::set_generation`](crate::program::Program::set_generation)).
    pub generation: u32,
}

impl XdpQueue {
    /// Opens the rx socket of `q.rx_queue` and starts its thread. The caller then binds
    /// the socket into the program's XSKMAP ([`XdpQueue::fd`]), which starts the traffic.
    /// `flows`: the program's maps for offload, when `port.offload` is on (else unused).
    pub fn start(
        port: &PortConfig,
        q: &QueueSettings,
        chain: Chain,
        counters: QueueCounters,
        xdp: XdpCounters,
        flows: Option<FlowMaps>,
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
        let now = Instant::now();
        let shared = Arc::new(Shared::new(now));
        // No hold limits: a port's services cannot hold (the configuration refuses them),
        // so a hold is an overflow, accepted at once; held packets are copied whole (the
        // rx frame goes back to the ring).
        let offload = flows.filter(|_| port.offload.is_some()).map(|maps| {
            Offloader::new(
                Box::new(maps),
                counters.offload.clone(),
                xdp.offload_expired.clone(),
                q.generation,
            )
        });
        let settings = Settings {
            offload: offload.is_some(),
            ..Settings::new(q.num)
        };
        let pipeline = Pipeline::new(settings, chain, counters.clone(), now);
        let mut worker = Worker {
            batch: port.batch.max(1),
            rx,
            emitter: Emitter::new(),
            shared: shared.clone(),
            path: PacketPath {
                num: q.num,
                ingress: q.ifindex,
                pipeline,
                egress: EgressTable::new(q.num, q.ifindex, q.rx_queue, port.frames, port.zero_copy),
                xdp: xdp.clone(),
                tally: Tally::new(
                    &xdp.set,
                    "to_kernel_sent",
                    "to_kernel_queue_full",
                    "to_kernel_failed",
                ),
                buf: vec![0u8; PACKET_BUF],
                scratch: vec![0u8; PACKET_BUF],
                offload,
            },
        };
        let num = q.num;
        let thread = std::thread::Builder::new()
            .name(format!("relayd-xdp{num}"))
            .spawn(move || worker.run())
            .map_err(|e| QueueError::Thread(num, e))?;
        // Pinned before the caller binds the socket into the XSKMAP, so before any packet
        // (the same call as an NFQUEUE queue's pin).
        if let Some(cpu) = q.cpu
            && let Err(e) = relay_dataio::pin_thread(&thread, cpu)
        {
            tracing::warn!(cpu, queue = num, "pinning an XDP queue thread: {e}");
        }
        Ok(XdpQueue {
            num,
            rx_queue: q.rx_queue,
            fd,
            shared,
            thread: Some(thread),
            counters,
            xdp,
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
        self.shared.since_last_loop(Instant::now())
    }

    /// Switches the thread to a new chain between two rounds; the flows it offloads from
    /// then on are written for `generation`.
    pub fn update(&self, chain: Chain, generation: u32) {
        self.shared.post((chain, generation));
    }

    /// Asks the thread to stop after its round.
    pub fn request_stop(&self) {
        self.shared.request_stop();
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
