//! The live SAs that services and the IKE table share: an outbound SA with its sequence
//! counter, an inbound one with its replay window, what each carried, and how ESP is
//! encapsulated. Below both `esp` (the services) and `table` (the IKE SAs), which use them.

use crate::durable::{InEdge, Job, OutSeq, Persister};
use crate::sa::SaCrypto;
use crate::window::ReplayWindow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The NAT-T port (RFC 3948 2.1), the default of both ends.
pub const NATT_PORT: u16 = 4500;

/// UDP encapsulation of an outbound SA (RFC 3948): ESP sent from `src_port` to `dst_port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpEncap {
    /// This end's port (the IKE SA's local port; 4500 by default).
    pub src_port: u16,
    /// The peer's port (as the NAT shows it; 4500 by default).
    pub dst_port: u16,
}

impl Default for UdpEncap {
    fn default() -> UdpEncap {
        UdpEncap {
            src_port: NATT_PORT,
            dst_port: NATT_PORT,
        }
    }
}

/// An outbound SA: keys and the sequence counter, shared by the queue threads of a range
/// (so no sequence number, and no GCM IV, repeats) and kept across reloads; the counter's
/// reservation is kept on disk across restarts ([`OutSeq`]).
pub(crate) struct Outbound {
    pub(crate) spi: u32,
    pub(crate) crypto: SaCrypto,
    pub(crate) seq: Arc<OutSeq>,
    /// Bytes and packets sent, counted for IKE SAs only (rekeying by volume).
    pub(crate) usage: Option<Usage>,
}

/// An inbound SA: keys and the replay window, shared and kept the same way; the window's
/// edge is kept on disk across restarts ([`InEdge`]).
pub(crate) struct Inbound {
    pub(crate) spi: u32,
    pub(crate) crypto: SaCrypto,
    pub(crate) window: Mutex<ReplayWindow>,
    pub(crate) edge: InEdge,
    /// Bytes and packets accepted, counted for IKE SAs only.
    pub(crate) usage: Option<Usage>,
}

impl Inbound {
    pub(crate) fn top(&self) -> u64 {
        self.window.lock().unwrap_or_else(|e| e.into_inner()).top()
    }

    /// Starts persisting the edge (when a service is built).
    pub(crate) fn activate(self: &Arc<Self>, persister: &Arc<Persister>) {
        if self.edge.activate(self.top()) {
            persister.add(Arc::downgrade(self) as std::sync::Weak<dyn Job>);
        }
    }
}

impl Job for Inbound {
    fn tick(&self, now: Instant) {
        self.edge.tick(self.top(), now);
    }
}

impl Drop for Inbound {
    fn drop(&mut self) {
        let top = self
            .window
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .top();
        self.edge.finish(top);
    }
}

/// Bytes and packets an SA carried (relaxed counters, per packet).
#[derive(Default)]
pub(crate) struct Usage {
    bytes: AtomicU64,
    packets: AtomicU64,
}

impl Usage {
    /// Counts a packet of `bytes`.
    pub(crate) fn add(&self, bytes: usize) {
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.packets.fetch_add(1, Ordering::Relaxed);
    }

    /// (bytes, packets).
    pub(crate) fn get(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.packets.load(Ordering::Relaxed),
        )
    }
}
