//! Counters shared by a listener and its connections (relaxed atomics, no locks), and the
//! plain snapshot the daemon renders in `relayd status` and metrics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

/// Live counters of one proxy listener. Cheap to update from every connection task.
#[derive(Debug, Default)]
pub struct Stats {
    pub(crate) accepted: AtomicU64,
    pub(crate) active: AtomicU64,
    pub(crate) peak_active: AtomicU64,
    pub(crate) refused_cap: AtomicU64,
    pub(crate) bytes_up: AtomicU64,
    pub(crate) bytes_down: AtomicU64,
    pub(crate) upstream_failed: AtomicU64,
    pub(crate) resets: AtomicU64,
    pub(crate) idle_timeouts: AtomicU64,
    pub(crate) drained_aborts: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) mptcp_connections: AtomicU64,
    pub(crate) mptcp_fallbacks: AtomicU64,
    pub(crate) socks_auth_failed: AtomicU64,
    pub(crate) socks_rejected: AtomicU64,
    pub(crate) refused_policy: AtomicU64,
    pub(crate) refused_local: AtomicU64,
    pub(crate) accept_errors: AtomicU64,
}

/// A point-in-time copy of [`Stats`]; field names are the names shown to users.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// Client connections accepted (including those then refused for the cap).
    pub accepted: u64,
    /// Connections being relayed now.
    pub active: u64,
    /// Highest `active` seen.
    pub peak_active: u64,
    /// Connections reset at once because `max_connections` were active.
    pub refused_cap: u64,
    /// Bytes relayed from clients to servers.
    pub bytes_up: u64,
    /// Bytes relayed from servers to clients.
    pub bytes_down: u64,
    /// Upstream connects that failed (refused, unreachable, timed out, resolution failed).
    pub upstream_failed: u64,
    /// Connections ended by a reset on one side, propagated to the other.
    pub resets: u64,
    /// Connections closed by the idle timeout.
    pub idle_timeouts: u64,
    /// Connections still live at the drain deadline, reset.
    pub drained_aborts: u64,
    /// Connections that ended with both directions closed cleanly (FIN both ways).
    pub completed: u64,
    /// Upstream connections that run over MPTCP.
    pub mptcp_connections: u64,
    /// MPTCP was asked for but the connection runs over TCP (socket refused by the
    /// kernel, or the server did not answer with MP_CAPABLE).
    pub mptcp_fallbacks: u64,
    /// SOCKS5 clients that failed authentication.
    pub socks_auth_failed: u64,
    /// SOCKS5 requests refused (bad version, unsupported command or address type).
    pub socks_rejected: u64,
    /// SOCKS5 CONNECTs refused by the destination policy (reply 2, "connection not
    /// allowed by ruleset"): a special or own address not allowed, a `deny` entry, or
    /// no `allow` entry matching.
    #[serde(default)]
    pub refused_policy: u64,
    /// Transparent connections reset without an upstream connect because their original
    /// destination is the relay itself (`::`, loopback, one of its addresses) or never
    /// forwarded by a router (link-local, multicast, broadcast, cloud metadata).
    #[serde(default)]
    pub refused_local: u64,
    /// `accept(2)` errors (e.g. out of file descriptors), survived.
    pub accept_errors: u64,
}

impl Stats {
    /// A copy of every counter now.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            accepted: self.accepted.load(Relaxed),
            active: self.active.load(Relaxed),
            peak_active: self.peak_active.load(Relaxed),
            refused_cap: self.refused_cap.load(Relaxed),
            bytes_up: self.bytes_up.load(Relaxed),
            bytes_down: self.bytes_down.load(Relaxed),
            upstream_failed: self.upstream_failed.load(Relaxed),
            resets: self.resets.load(Relaxed),
            idle_timeouts: self.idle_timeouts.load(Relaxed),
            drained_aborts: self.drained_aborts.load(Relaxed),
            completed: self.completed.load(Relaxed),
            mptcp_connections: self.mptcp_connections.load(Relaxed),
            mptcp_fallbacks: self.mptcp_fallbacks.load(Relaxed),
            socks_auth_failed: self.socks_auth_failed.load(Relaxed),
            socks_rejected: self.socks_rejected.load(Relaxed),
            refused_policy: self.refused_policy.load(Relaxed),
            refused_local: self.refused_local.load(Relaxed),
            accept_errors: self.accept_errors.load(Relaxed),
        }
    }

    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}
