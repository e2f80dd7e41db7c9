//! What the XDP datapath counts per queue beyond the common queue counters, by name: what
//! the queue thread (`worker.rs`) counts and the control plane (`queue.rs`, relayd's
//! status and metrics) reads.

use relay_core::{Counter, Counters};

/// What the XDP datapath counts per queue beyond the [`relay_core::QueueCounters`], by name (shown in
/// `relayd status` and the metrics).
#[derive(Clone)]
pub struct XdpCounters {
    /// Frames transmitted on an egress socket.
    pub transmitted: Counter,
    /// Packets dropped because the egress socket had no free frame or tx ring slot.
    pub tx_full: Counter,
    /// Packets handed to the kernel's forwarding instead (see the `queue` module docs).
    pub to_kernel: Counter,
    /// Frames without the program's metadata, or not IP (counted, dropped).
    pub bad_frames: Counter,
    /// Offloaded flows' entries the program deleted for idleness (also counted in the
    /// queue's `offload.revoked`, with those a reload revoked).
    pub offload_expired: Counter,
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
            offload_expired: set.counter("offload_expired"),
            set: set.clone(),
        }
    }
}
