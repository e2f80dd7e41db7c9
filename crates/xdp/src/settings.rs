//! An XDP port's settings (an `[[xdp]]` entry): what the port (`port.rs`), its queue
//! threads (`queue.rs`) and their egress sockets (`egress.rs`) are started with. Apart from
//! them so that those modules import it one way.

use std::time::Duration;

use crate::program::Mode;
use crate::rules::Match;

/// Flow offload on a port (`[[xdp]] offload = true`): the flows its chain offloads go to
/// the program's `flows` map, and their later packets to the kernel's forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffloadConfig {
    /// An offloaded flow direction without a packet for longer than this comes back to
    /// relayd (`offload_idle`).
    pub idle: Duration,
    /// Room in the map, in flow directions (`offload_flows`); beyond it the least recently
    /// used entry is evicted.
    pub flows: u32,
}

impl OffloadConfig {
    /// Default idle time: 30 s.
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(30);
    /// Default room: 65,536 flow directions (8.5 MiB of kernel memory on x86-64).
    pub const DEFAULT_FLOWS: u32 = 65_536;
}

impl Default for OffloadConfig {
    fn default() -> OffloadConfig {
        OffloadConfig {
            idle: OffloadConfig::DEFAULT_IDLE,
            flows: OffloadConfig::DEFAULT_FLOWS,
        }
    }
}

/// Whether the AF_XDP sockets ask for zero-copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroCopy {
    /// Zero-copy where the driver has it, else copy mode (veth: copy).
    #[default]
    Auto,
    /// Zero-copy or an error.
    On,
    /// Copy mode always.
    Off,
}

/// The settings of one XDP port (an `[[xdp]]` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// The ingress interface's name.
    pub interface: String,
    /// The rx queues served, each by its own thread; relayd queue number `first + i`
    /// serves `rx_queues[i]`.
    pub rx_queues: Vec<u32>,
    /// The relayd queue number of the first rx queue (status, metrics, counters).
    pub first: u16,
    /// What the program steers to relayd (empty: every IPv4 and IPv6 packet it can).
    pub matches: Vec<Match>,
    /// With relayd down (no socket bound), matched packets go to the kernel (true) or are
    /// dropped (false), by the program itself.
    pub fail_open: bool,
    /// How the program is attached.
    pub mode: Mode,
    /// Zero-copy or copy mode.
    pub zero_copy: ZeroCopy,
    /// Packets taken from the rx ring per round, at most.
    pub batch: usize,
    /// UMEM frames per socket.
    pub frames: u32,
    /// CPUs the threads are pinned to: thread `i` on `cpus[i % len]`; empty: unpinned.
    pub cpus: Vec<usize>,
    /// Flow offload, if on: the chain's offload votes are carried out (every service of
    /// the chain must declare [`Manifest::offloads`](relay_core::Manifest::offloads)).
    pub offload: Option<OffloadConfig>,
}

impl PortConfig {
    /// Default packets per round.
    pub const DEFAULT_BATCH: usize = 64;
    /// Default UMEM frames per socket ([`FRAME_SIZE`](Self::FRAME_SIZE) each: 8 MiB of
    /// locked memory per socket, half for receiving and half for sending).
    pub const DEFAULT_FRAMES: u32 = 2048;
    /// Bytes per UMEM frame: room for a 1,500-byte packet grown by a service, and for
    /// jumbo frames up to about 3,800 bytes.
    pub const FRAME_SIZE: u32 = 4096;
    /// The most packets per round.
    pub const MAX_BATCH: usize = 1024;
}
