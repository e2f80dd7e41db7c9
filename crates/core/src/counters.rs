//! Counters written by one queue thread and read by the status server.
//!
//! A [`Counter`] has exactly one writer (the queue thread that owns the service or chain),
//! so an increment is a plain load and store, not a locked read-modify-write; readers on
//! other threads see a value at most one update old. Counter sets are created at setup and
//! kept across reloads, so totals survive a SIGHUP.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::offload::OffloadReason;

/// One monotonically increasing (or gauge) value with a single writer thread.
#[derive(Debug, Clone, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// A fresh counter at zero, not registered anywhere.
    pub fn new() -> Counter {
        Counter::default()
    }

    /// Adds `n`. Only the counter's one writer thread may call this.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Sets the value (for gauges such as a current estimate).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }

    /// Reads the value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// How a named counter is combined across the threads of a queue range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterKind {
    /// Summed (packets, bytes).
    Total,
    /// Reported as the most recent value (estimates such as a compression ratio x 1000).
    Gauge,
}

/// The named counters of one service instance, in registration order.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    inner: Arc<Mutex<Named>>,
}

/// Counters in registration order, with an index by name (an IDS registers one per rule).
#[derive(Debug, Default)]
struct Named {
    list: Vec<(String, CounterKind, Counter)>,
    by_name: std::collections::HashMap<String, usize>,
}

impl Counters {
    /// An empty set.
    pub fn new() -> Counters {
        Counters::default()
    }

    /// The counter called `name`, created at zero on first use. Call at setup, not per packet.
    pub fn counter(&self, name: &str) -> Counter {
        self.get_or_add(name, CounterKind::Total)
    }

    /// A gauge called `name` (see [`CounterKind::Gauge`]).
    pub fn gauge(&self, name: &str) -> Counter {
        self.get_or_add(name, CounterKind::Gauge)
    }

    fn get_or_add(&self, name: &str, kind: CounterKind) -> Counter {
        let mut v = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&i) = v.by_name.get(name) {
            return v.list[i].2.clone();
        }
        let c = Counter::new();
        let i = v.list.len();
        v.list.push((name.to_string(), kind, c.clone()));
        v.by_name.insert(name.to_string(), i);
        c
    }

    /// The current values, in registration order.
    pub fn snapshot(&self) -> Vec<(String, CounterKind, u64)> {
        let v = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        v.list
            .iter()
            .map(|(n, k, c)| (n.clone(), *k, c.get()))
            .collect()
    }
}

/// The fixed counters of one queue, shown by `relayd status`.
#[derive(Debug, Clone, Default)]
pub struct QueueCounters {
    /// Packets received from the kernel.
    pub packets: Counter,
    /// Packets given an accept verdict (modified or not).
    pub accepted: Counter,
    /// Packets given a drop verdict.
    pub dropped: Counter,
    /// Packets accepted with modified bytes.
    pub modified: Counter,
    /// Packets given a repeat verdict.
    pub repeated: Counter,
    /// Packets that could not be parsed (handled by the queue's malformed policy).
    pub malformed: Counter,
    /// Datapath errors: failed verdicts, netlink error replies, unparsable messages.
    pub errors: Counter,
    /// Receive buffer overruns (ENOBUFS): the kernel could not deliver some packets to us.
    pub enobufs: Counter,
    /// recv system calls that returned packets (packets / batches = packets per syscall).
    pub batches: Counter,
    /// Packets a service held for a later verdict ([`crate::Action::Hold`]); each is
    /// counted again in `accepted` (or `dropped`) when its verdict is given.
    pub held: Counter,
    /// Holds the datapath refused because its hold store was full: those packets got the
    /// queue's overflow verdict at once.
    pub hold_overflow: Counter,
    /// Flows offloaded, failed offloads, revocations and what skipped the queue.
    pub offload: OffloadCounters,
}

/// A queue's offload counters: written by its datapath thread (flows, failures,
/// revocations) and by the control plane (what skipped the queue, read from the kernel's
/// rule counters or BPF map), one writer each.
#[derive(Debug, Clone, Default)]
pub struct OffloadCounters {
    /// Flows offloaded, by reason ([`OffloadReason::index`]).
    pub flows: [Counter; OffloadReason::ALL.len()],
    /// Offloads the datapath could not carry out (no conntrack entry yet, a full map, a
    /// netlink error): the flow stays inline and its next packets vote again.
    pub failed: Counter,
    /// Offloaded flows taken back by a reload that changed the chain, or expired.
    pub revoked: Counter,
    /// Packets of offloaded flows the kernel forwarded without queueing them.
    pub skipped_packets: Counter,
    /// Their bytes.
    pub skipped_bytes: Counter,
}

impl OffloadCounters {
    /// Counts a flow offloaded for `reason`.
    pub fn offloaded(&self, reason: OffloadReason) {
        self.flows[reason.index()].inc();
    }

    /// All flows offloaded, whatever the reason.
    pub fn total(&self) -> u64 {
        self.flows.iter().map(Counter::get).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_counters_are_shared_by_name() {
        let set = Counters::new();
        let a = set.counter("seen");
        a.add(2);
        set.counter("seen").inc();
        set.gauge("ratio").set(950);
        let snap = set.snapshot();
        assert_eq!(snap[0], ("seen".to_string(), CounterKind::Total, 3));
        assert_eq!(snap[1], ("ratio".to_string(), CounterKind::Gauge, 950));
    }

    #[test]
    fn offloaded_flows_are_counted_by_reason() {
        let c = OffloadCounters::default();
        c.offloaded(OffloadReason::Encrypted);
        c.offloaded(OffloadReason::Pass);
        assert_eq!(c.total(), 2);
        assert_eq!(c.flows[OffloadReason::Encrypted.index()].get(), 1);
    }
}
