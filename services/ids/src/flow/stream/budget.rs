//! The bounds of reassembly: the per-direction [`StreamLimits`], the memcap all streams of
//! a flow table share ([`MemBudget`]), the counters, and why a direction stopped
//! ([`Truncation`]).

use super::{DEFAULT_BUFFER, DEFAULT_DEPTH, DEFAULT_OOO_SEGMENTS};
use relay_core::{Counter, Counters};

/// The per-direction bounds of reassembly (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Bytes reassembled per direction; 0 is unlimited. Default [`DEFAULT_DEPTH`].
    pub depth: u64,
    /// Bytes held per direction, not yet consumed by both consumers plus out of order.
    /// Default [`DEFAULT_BUFFER`].
    pub buffer: usize,
    /// Out-of-order segments held per direction. Default [`DEFAULT_OOO_SEGMENTS`].
    pub ooo_segments: usize,
}

impl Default for StreamLimits {
    fn default() -> StreamLimits {
        StreamLimits {
            depth: DEFAULT_DEPTH,
            buffer: DEFAULT_BUFFER,
            ooo_segments: DEFAULT_OOO_SEGMENTS,
        }
    }
}

/// The counters of reassembly, shared by all streams of a table. A fresh set
/// (`default()`) counts without being registered anywhere.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamCounters {
    /// Directions whose reassembly stopped at a bound (any [`Truncation`]).
    pub truncated: Counter,
    /// Out-of-order segments not held, or freed unused when their direction stopped.
    pub ooo_dropped: Counter,
    /// Segments overlapping bytes already received with different bytes.
    pub overlap_mismatch: Counter,
    /// Directions stopped because the memcap was reached.
    pub memcap: Counter,
    /// Gauge: bytes charged to the memcap now.
    pub memuse: Counter,
}

impl StreamCounters {
    /// The counters registered in `c` as `stream_truncated`, `stream_ooo_dropped`,
    /// `stream_overlap_mismatch`, `stream_memcap` and the gauge `stream_memuse`.
    pub(crate) fn register(c: &Counters) -> StreamCounters {
        StreamCounters {
            truncated: c.counter("stream_truncated"),
            ooo_dropped: c.counter("stream_ooo_dropped"),
            overlap_mismatch: c.counter("stream_overlap_mismatch"),
            memcap: c.counter("stream_memcap"),
            memuse: c.gauge("stream_memuse"),
        }
    }
}

/// What all streams of one flow table share: the memcap and the memory charged against
/// it, the per-direction [`StreamLimits`], and the counters. Passed to the calls that may
/// allocate or free, so the streams need no shared pointer.
#[derive(Debug)]
pub(crate) struct MemBudget {
    /// The cap and the bytes charged (shared logic with the application-layer memcap).
    pub(super) mem: crate::memcap::Memcap,
    pub(super) limits: StreamLimits,
    pub(super) counters: StreamCounters,
}

impl MemBudget {
    /// A budget of `cap` bytes for streams bounded by `limits`, counting in `counters`.
    pub(crate) fn new(cap: usize, limits: StreamLimits, counters: StreamCounters) -> MemBudget {
        MemBudget {
            mem: crate::memcap::Memcap::new(cap, counters.memuse.clone()),
            limits,
            counters,
        }
    }

    /// Bytes charged now (buffer capacity and held segments of every stream).
    pub(crate) fn used(&self) -> usize {
        self.mem.used()
    }

    /// The memcap.
    #[cfg(test)]
    pub(crate) fn cap(&self) -> usize {
        self.mem.cap()
    }

    /// The per-direction bounds.
    #[cfg(test)]
    pub(crate) fn limits(&self) -> &StreamLimits {
        &self.limits
    }

    /// The counters.
    #[cfg(test)]
    pub(crate) fn counters(&self) -> &StreamCounters {
        &self.counters
    }

    pub(super) fn try_charge(&mut self, n: usize) -> bool {
        self.mem.try_charge(n)
    }

    /// Charges `n` whatever the cap (allocator rounding, which the global allocator does
    /// not do for `Vec<u8>`; kept so the figure stays true if it ever did).
    pub(super) fn force(&mut self, n: usize) {
        self.mem.force(n);
    }

    pub(super) fn credit(&mut self, n: usize) {
        self.mem.credit(n);
    }
}

/// Why a direction stopped being reassembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum Truncation {
    /// The reassembly depth was reached (normal for large transfers).
    Depth,
    /// More in-order bytes arrived than the buffer may hold unconsumed.
    Buffer,
    /// An out-of-order segment could not be held (segment count or buffer bound): the
    /// gap before it can no longer be filled correctly.
    Gap,
    /// The memcap was reached.
    Memcap,
    /// The flow was decided (a `pass` or `drop` rule, an exception policy): nothing of it
    /// is inspected any more, so nothing is held for it (not counted as a truncation).
    Abandoned,
}
