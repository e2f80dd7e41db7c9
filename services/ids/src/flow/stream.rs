//! TCP stream reassembly for one direction of a flow: segments go in by sequence number,
//! contiguous bytes come out in order for two consumers (the application-layer parser and
//! raw stream inspection), each with its own offset.
//!
//! Modelled on Suricata's stream engine (`stream-tcp-reassemble.c`, `stream-tcp-list.c`):
//! data is reassembled as it arrives, not when acknowledged. Overlaps are resolved as the
//! receiving host's OS does ([`StreamPolicy`], Suricata's `host-os-policy`), so that the
//! bytes inspected are the bytes the application reads: bytes already contiguous (which
//! the host has queued for the application) are never replaced; where a segment overlaps
//! held out-of-order data, the policy decides from the two segments' original bounds
//! (Linux keeps the bytes of the segment that starts first, and of the later one when
//! both start together and it is longer: `tcp_data_queue_ofo`). An overlap with different
//! data is counted (`stream_overlap_mismatch`, Suricata's
//! `reassembly_overlap_different_data`); with [`Stream::configure`]'s `reject_different`
//! (inline mode) such a segment is not inserted at all ([`SegmentResult::rejected`]), and
//! the detector drops it, so the host never sees bytes that differ from what was
//! inspected.
//! Sequence numbers are compared in 32-bit wrapping arithmetic relative to the next
//! expected byte, so a stream crosses 2^32 unharmed; stream offsets are `u64` from the
//! stream's first byte (ISN + 1).
//!
//! Bounds ([`StreamLimits`], with their defaults):
//! - `depth` (default 1 MiB, Suricata's `stream.reassembly.depth`): bytes past it are not
//!   reassembled; reaching it truncates the direction ([`Truncation::Depth`]).
//! - `buffer` (default 256 KiB): bytes held per direction, contiguous but not yet
//!   consumed by both consumers plus out-of-order bytes. Data past it is not kept and the
//!   direction is truncated ([`Truncation::Buffer`]; or [`Truncation::Gap`] if the data
//!   was out of order, since that gap can then never be filled correctly).
//! - `ooo_segments` (default 256): out-of-order segments held per direction (Suricata
//!   has no such limit beyond its memcap; it bounds the cost of a flood of tiny segments).
//! - the memcap of the [`MemBudget`] shared by all streams of a flow table (64 MiB,
//!   Suricata's `stream.memcap`): buffer capacity plus held segments (their bytes and a
//!   record of [`SEGMENT_OVERHEAD`] bytes each). A stream that cannot get memory is
//!   truncated ([`Truncation::Memcap`]).
//!
//! So one direction holds at most `buffer` bytes of buffer capacity plus `buffer` bytes of
//! held segments and `ooo_segments` records, and all streams together at most the memcap.
//! A truncated direction frees its held segments at once and its buffer once both
//! consumers have caught up. Nothing grows past a bound: the stream stops instead, and the
//! stop is counted. No input panics: offsets are computed in `i128` and every slice is
//! taken with `get`.

mod budget;
mod policy;
#[cfg(test)]
mod tests;

pub(crate) use budget::StreamLimits;
pub(crate) use budget::{MemBudget, StreamCounters, Truncation};
pub(crate) use policy::StreamPolicy;

/// Default reassembly depth per direction (Suricata's `stream.reassembly.depth`: 1 MiB).
pub(crate) const DEFAULT_DEPTH: u64 = 1 << 20;
/// Default bound on bytes held per direction (unconsumed plus out of order): 256 KiB.
pub(crate) const DEFAULT_BUFFER: usize = 256 << 10;
/// Default bound on out-of-order segments held per direction.
pub(crate) const DEFAULT_OOO_SEGMENTS: usize = 256;
/// Default memcap over all streams of a flow table (Suricata's `stream.memcap`: 64 MiB).
pub(crate) const DEFAULT_MEMCAP: usize = 64 << 20;
/// What the memcap charges for each held out-of-order segment besides its bytes.
pub(crate) const SEGMENT_OVERHEAD: usize = std::mem::size_of::<Seg>();

/// Smallest buffer allocated for a direction's contiguous bytes.
const MIN_BUF: usize = 4096;
/// Segments between two checks whether the buffer is far larger than its recent use.
const SHRINK_EVERY: u32 = 64;
/// Stream offsets are kept below this (a `depth` of 0, unlimited, means this).
const MAX_OFFSET: u64 = 1 << 62;

/// What one segment did to its stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SegmentResult {
    /// New contiguous bytes available (this segment's and any held ones it connected).
    pub new: usize,
    /// Some of the segment was held out of order.
    pub queued: bool,
    /// The segment overlapped received bytes with different data (the first-seen kept).
    pub mismatch: bool,
    /// This segment stopped the direction's reassembly (see [`Stream::truncated`]).
    pub truncated: bool,
    /// The stream is now complete up to its FIN.
    pub finished: bool,
    /// The stream was not reassembling (not started, finished or truncated): nothing done.
    pub ignored: bool,
    /// The segment overlapped received bytes with different data and the stream rejects
    /// such segments (inline mode): nothing of it was inserted.
    pub rejected: bool,
}

/// A segment being added: its bytes, the stream offset of its first byte (before the
/// stream's start if negative), and its bounds as sent (for the overlap policy).
struct Incoming<'a> {
    bytes: &'a [u8],
    off: i128,
    orig: (u64, u64),
}

/// A held out-of-order piece: bytes from `off`, and the bounds of the segment they came
/// from as it was sent (the overlap policy compares segments, not pieces).
#[derive(Debug)]
struct Seg {
    off: u64,
    data: Vec<u8>,
    orig: (u64, u64),
}

impl Seg {
    fn end(&self) -> u64 {
        self.off + self.data.len() as u64
    }

    fn charge(&self) -> usize {
        self.data.capacity() + SEGMENT_OVERHEAD
    }
}

/// One direction of a TCP flow being reassembled.
///
/// The contiguous bytes sit in one buffer from the oldest byte not yet consumed by both
/// consumers to [`Stream::end`]; consumed bytes at its front are dropped lazily (when the
/// buffer would otherwise grow), so the in-order case copies each byte in once and
/// allocates only while the buffer grows to its working size.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    started: bool,
    /// Sequence number of stream offset 0.
    base: u32,
    buf: Vec<u8>,
    /// Stream offset of `buf[0]`.
    buf_off: u64,
    /// `buf[..head]` is consumed by both consumers.
    head: usize,
    app: u64,
    raw: u64,
    /// Held segments: sorted, disjoint, each starting past `end()`.
    ooo: Vec<Seg>,
    ooo_bytes: usize,
    /// Bytes charged to the budget: `buf.capacity()` plus each held segment's charge.
    mem: usize,
    /// Stream offset of the FIN (the end of the data), once seen.
    fin: Option<u64>,
    finished: bool,
    truncated: Option<Truncation>,
    /// Largest unconsumed length since the last shrink check.
    peak: usize,
    since_shrink: u32,
    /// How overlaps with held data are resolved.
    policy: StreamPolicy,
    /// Segments overlapping received bytes with different data are not inserted.
    reject_different: bool,
}

impl Stream {
    /// A stream not started yet: segments are ignored until [`Stream::start`].
    pub(crate) fn new() -> Stream {
        Stream::default()
    }

    /// Starts the stream at sequence number `seq` (ISN + 1 after a SYN, or the first
    /// sequence number seen when picked up mid-stream). A stream that has received data
    /// keeps its start.
    pub(crate) fn start(&mut self, seq: u32) {
        if self.end() == 0 && self.ooo.is_empty() {
            self.started = true;
            self.base = seq;
        }
    }

    /// Sets the overlap policy of the receiving host and whether a segment overlapping
    /// received bytes with different data is rejected whole (inline mode).
    pub(crate) fn configure(&mut self, policy: StreamPolicy, reject_different: bool) {
        self.policy = policy;
        self.reject_different = reject_different;
    }

    /// The sequence number just past the held out-of-order data, if any (the right edge
    /// of the SACK blocks the receiver would send).
    pub(crate) fn ooo_end_seq(&self) -> Option<u32> {
        self.ooo
            .iter()
            .map(Seg::end)
            .max()
            .map(|e| self.base.wrapping_add(e as u32))
    }

    /// True once started.
    pub(crate) fn is_started(&self) -> bool {
        self.started
    }

    /// True while segments are reassembled: started, not finished, not truncated.
    pub(crate) fn reassembling(&self) -> bool {
        self.started && !self.finished && self.truncated.is_none()
    }

    /// The sequence number of the next expected byte.
    pub(crate) fn next_seq(&self) -> u32 {
        self.base.wrapping_add(self.end() as u32)
    }

    /// Stream offset just past the contiguous bytes: the bytes reassembled so far.
    pub(crate) fn end(&self) -> u64 {
        self.buf_off + self.buf.len() as u64
    }

    /// The bytes held, from [`Stream::data_offset`] (the oldest byte not consumed by both
    /// consumers) to [`Stream::end`].
    #[cfg(test)]
    pub(crate) fn data(&self) -> &[u8] {
        self.buf.get(self.head..).unwrap_or(&[])
    }

    /// Stream offset of the first byte of [`Stream::data`].
    #[cfg(test)]
    pub(crate) fn data_offset(&self) -> u64 {
        self.buf_off + self.head as u64
    }

    /// Stream offset of the application-layer consumer.
    pub(crate) fn app_offset(&self) -> u64 {
        self.app
    }

    /// Stream offset of the raw-inspection consumer.
    #[cfg(test)]
    pub(crate) fn raw_offset(&self) -> u64 {
        self.raw
    }

    /// The bytes the application-layer consumer has not consumed.
    pub(crate) fn app_pending(&self) -> &[u8] {
        self.from(self.app)
    }

    /// The raw-inspection window: its stream offset and the bytes from it to the end. The
    /// raw consumer keeps a look-back by consuming only up to the window's tail.
    pub(crate) fn raw_window(&self) -> (u64, &[u8]) {
        (self.raw, self.from(self.raw))
    }

    fn from(&self, off: u64) -> &[u8] {
        let i = off.saturating_sub(self.buf_off) as usize;
        self.buf.get(i..).unwrap_or(&[])
    }

    /// Marks the bytes before stream offset `upto` consumed by the application layer
    /// (clamped to what is held; never moves back).
    pub(crate) fn consume_app(&mut self, upto: u64) {
        self.app = self.app.max(upto.min(self.end()));
        self.free_front();
    }

    /// Marks the bytes before stream offset `upto` consumed by raw inspection (clamped to
    /// what is held; never moves back). A stream nobody inspects raw must still be consumed
    /// here, or it fills its buffer and stops.
    pub(crate) fn consume_raw(&mut self, upto: u64) {
        self.raw = self.raw.max(upto.min(self.end()));
        self.free_front();
    }

    fn free_front(&mut self) {
        let low = self.app.min(self.raw);
        self.head = (low.saturating_sub(self.buf_off) as usize).min(self.buf.len());
        if self.head == self.buf.len() {
            // All consumed: start over at the front without moving a byte.
            self.buf.clear();
            self.buf_off = low.max(self.buf_off);
            self.head = 0;
        }
    }

    /// Why reassembly stopped, if it did at a bound.
    pub(crate) fn truncated(&self) -> Option<Truncation> {
        self.truncated
    }

    /// True once the stream is complete up to its FIN.
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    /// Bytes held: not consumed by both consumers, plus out of order.
    pub(crate) fn held(&self) -> usize {
        self.buf.len() - self.head.min(self.buf.len()) + self.ooo_bytes
    }

    /// Out-of-order segments held.
    #[cfg(test)]
    pub(crate) fn ooo_segments(&self) -> usize {
        self.ooo.len()
    }

    /// Bytes this stream has charged to its budget.
    #[cfg(test)]
    pub(crate) fn mem(&self) -> usize {
        self.mem
    }

    /// Stops reassembling for good and frees everything held (the flow was decided:
    /// nothing of it is inspected any more). Consumers see an empty stream from then on.
    pub(crate) fn abandon(&mut self, budget: &mut MemBudget) {
        if self.started && self.truncated.is_none() {
            self.truncated = Some(Truncation::Abandoned);
        }
        self.release(budget);
    }

    /// Frees everything held and returns its memory to `budget` (when the flow ends). The
    /// offsets stay; [`Stream::data`] is empty afterwards.
    pub(crate) fn release(&mut self, budget: &mut MemBudget) {
        budget.credit(self.mem);
        self.mem = 0;
        self.buf_off = self.end();
        self.buf = Vec::new();
        self.head = 0;
        self.ooo = Vec::new();
        self.ooo_bytes = 0;
    }

    /// Adds the segment of sequence number `seq` carrying `payload` (and a FIN after it if
    /// `fin`). Bytes already received are compared, not replaced; new bytes next to the
    /// contiguous end are appended (with any held segments they connect), others held out
    /// of order, within the bounds of the module docs.
    pub(crate) fn segment(
        &mut self,
        seq: u32,
        payload: &[u8],
        fin: bool,
        budget: &mut MemBudget,
    ) -> SegmentResult {
        let mut r = SegmentResult::default();
        if !self.reassembling() {
            r.ignored = true;
            if self.started && self.mem > 0 && self.held() == 0 {
                self.release(budget);
            }
            return r;
        }
        self.maybe_shrink(budget);
        let end = self.end();
        let before = end;
        // Relative to the next expected byte: a window of +-2^31 around it, as TCP does.
        let off = i128::from(end) + i128::from(seq.wrapping_sub(self.next_seq()) as i32);
        let seg_end = off + payload.len() as i128;
        let depth = match budget.limits.depth {
            0 => MAX_OFFSET,
            d => d.min(MAX_OFFSET),
        };
        let mut limit = i128::from(depth);
        if fin && self.fin.is_none() && seg_end >= i128::from(end) && seg_end <= limit {
            self.fin = Some(seg_end as u64);
        }
        if let Some(f) = self.fin {
            limit = limit.min(i128::from(f));
        }
        if self.reject_different && self.differs(off, seg_end.min(limit), payload) {
            r.mismatch = true;
            r.rejected = true;
            budget.counters.overlap_mismatch.inc();
            return r;
        }
        // Bytes still in the buffer that the segment covers again.
        self.compare_buf(off, seg_end.min(i128::from(end)), payload, off, &mut r);
        let start = off.max(i128::from(end));
        let stop = seg_end.min(limit);
        if start < stop {
            let new = Incoming {
                bytes: payload,
                off,
                orig: (off.max(0) as u64, seg_end.max(0) as u64),
            };
            let (start, stop) = (start as u64, stop as u64);
            self.overlay(start, stop, &new, budget, &mut r);
            self.fill(start, stop, &new, budget, &mut r);
        }
        let end = self.end();
        if self.fin.is_some_and(|f| end >= f) && self.reassembling() {
            self.finished = true;
            r.finished = true;
            self.drop_ooo(budget);
        } else if end >= depth && self.reassembling() {
            self.truncate(Truncation::Depth, budget, &mut r);
        }
        r.new = (end - before) as usize;
        self.peak = self.peak.max(self.held());
        if r.mismatch {
            budget.counters.overlap_mismatch.inc();
        }
        r
    }

    /// True if `payload` (first byte at `off`, up to `hi`) differs from bytes already
    /// received that it covers: in the buffer or held out of order.
    fn differs(&self, off: i128, hi: i128, payload: &[u8]) -> bool {
        let mut r = SegmentResult::default();
        self.compare_buf(off, hi.min(i128::from(self.end())), payload, off, &mut r);
        if r.mismatch {
            return true;
        }
        self.ooo.iter().any(|s| {
            let lo = i128::from(s.off).max(off);
            let up = i128::from(s.end()).min(hi);
            if lo >= up {
                return false;
            }
            let (a, b, n) = (
                (lo - i128::from(s.off)) as usize,
                (lo - off) as usize,
                (up - lo) as usize,
            );
            s.data.get(a..a + n) != payload.get(b..b + n)
        })
    }

    /// Where the new bytes `[start, stop)` overlap held pieces: compares them, and
    /// writes the new bytes over a piece's where the policy says the new segment wins
    /// (splitting the piece so that each part keeps the bounds of the segment its bytes
    /// came from).
    fn overlay(
        &mut self,
        start: u64,
        stop: u64,
        new_seg: &Incoming<'_>,
        budget: &mut MemBudget,
        r: &mut SegmentResult,
    ) {
        let (payload, off, orig) = (new_seg.bytes, new_seg.off, new_seg.orig);
        let mut i = self.ooo.partition_point(|s| s.end() <= start);
        while let Some(s) = self.ooo.get(i) {
            if s.off >= stop {
                break;
            }
            let (lo, hi) = (s.off.max(start), s.end().min(stop));
            let a = (lo - s.off) as usize;
            let n = (hi - lo) as usize;
            let b = (i128::from(lo) - off) as usize;
            let (Some(new), Some(held)) = (payload.get(b..b + n), s.data.get(a..a + n)) else {
                break;
            };
            if new == held {
                i += 1;
                continue;
            }
            r.mismatch = true;
            if !self.policy.new_wins(orig, s.orig) {
                i += 1;
                continue;
            }
            // Split off the parts before and after the overlap, keeping their owner. Two
            // more pieces must fit the bound on held segments, or the gap can no longer
            // be resolved as the host does.
            if self.ooo.len() + 2 > budget.limits.ooo_segments {
                budget.counters.ooo_dropped.inc();
                self.truncate(Truncation::Gap, budget, r);
                return;
            }
            let mut pieces = Vec::with_capacity(3);
            let s = self.ooo.remove(i);
            let before = s.charge();
            let (s_off, s_orig, mut data) = (s.off, s.orig, s.data);
            let tail = data.split_off(a + n);
            let mid = data.split_off(a);
            data.shrink_to_fit();
            if !data.is_empty() {
                pieces.push(Seg {
                    off: s_off,
                    data,
                    orig: s_orig,
                });
            }
            let mut mid = mid;
            mid.copy_from_slice(new);
            pieces.push(Seg {
                off: lo,
                data: mid,
                orig,
            });
            if !tail.is_empty() {
                pieces.push(Seg {
                    off: hi,
                    data: tail,
                    orig: s_orig,
                });
            }
            let after: usize = pieces.iter().map(Seg::charge).sum();
            let k = pieces.len();
            for (j, p) in pieces.into_iter().enumerate() {
                self.ooo.insert(i + j, p);
            }
            self.mem = self.mem - before + after;
            budget.credit(before);
            budget.force(after);
            i += k;
        }
    }

    /// Places the new bytes `[start, stop)` of the segment where nothing is held yet.
    fn fill(
        &mut self,
        start: u64,
        stop: u64,
        new_seg: &Incoming<'_>,
        budget: &mut MemBudget,
        r: &mut SegmentResult,
    ) {
        let (payload, off, orig) = (new_seg.bytes, new_seg.off, new_seg.orig);
        let slice = |a: u64, b: u64| {
            let (a, b) = (
                (i128::from(a) - off) as usize,
                (i128::from(b) - off) as usize,
            );
            payload.get(a..b).unwrap_or(&[])
        };
        let mut pos = start;
        while pos < stop && self.reassembling() {
            let end = self.end();
            if pos < end {
                // Connected held segments moved the end past `pos`: compare, skip.
                let hi = end.min(stop);
                self.compare_buf(i128::from(pos), i128::from(hi), payload, off, r);
                pos = hi;
                continue;
            }
            let i = self.ooo.partition_point(|s| s.end() <= pos);
            if let Some(s) = self.ooo.get(i)
                && s.off <= pos
            {
                // Held: `overlay` compared it and applied the policy.
                pos = s.end().min(stop);
                continue;
            }
            let piece_end = self.ooo.get(i).map_or(stop, |s| s.off.min(stop));
            let piece = slice(pos, piece_end);
            if pos == end {
                self.append(piece, budget, r);
                self.connect(budget, r);
            } else {
                self.hold(i, pos, piece, orig, budget, r);
            }
            pos = piece_end;
        }
    }

    /// Compares `payload` (first byte at `off`) over `[lo, hi)` with the buffer, where held.
    fn compare_buf(&self, lo: i128, hi: i128, payload: &[u8], off: i128, r: &mut SegmentResult) {
        let lo = lo.max(i128::from(self.buf_off));
        if lo >= hi {
            return;
        }
        let b = (lo - i128::from(self.buf_off)) as usize;
        let p = (lo - off) as usize;
        let n = (hi - lo) as usize;
        let (Some(x), Some(y)) = (self.buf.get(b..b + n), payload.get(p..p + n)) else {
            return;
        };
        r.mismatch |= x != y;
    }

    /// Appends in-order bytes, within the buffer bound and the memcap.
    fn append(&mut self, bytes: &[u8], budget: &mut MemBudget, r: &mut SegmentResult) {
        let room = budget.limits.buffer.saturating_sub(self.held());
        let n = bytes.len().min(room);
        if n > 0 {
            if !self.grow(n, budget) {
                self.truncate(Truncation::Memcap, budget, r);
                return;
            }
            self.buf.extend_from_slice(bytes.get(..n).unwrap_or(&[]));
        }
        if n < bytes.len() {
            self.truncate(Truncation::Buffer, budget, r);
        }
    }

    /// Makes room for `n` more bytes in the buffer: first by dropping the consumed front,
    /// then by growing (doubling, up to the buffer bound) if the budget allows.
    fn grow(&mut self, n: usize, budget: &mut MemBudget) -> bool {
        if self.buf.len() + n <= self.buf.capacity() {
            return true;
        }
        self.compact();
        let (len, cap) = (self.buf.len(), self.buf.capacity());
        let need = len + n;
        if need <= cap {
            return true;
        }
        let want = need
            .max(cap.saturating_mul(2))
            .max(MIN_BUF)
            .min(budget.limits.buffer.max(need));
        let target = if budget.try_charge(want - cap) {
            want
        } else if want > need && budget.try_charge(need - cap) {
            need
        } else {
            return false;
        };
        self.buf.reserve_exact(target - len);
        // The allocator may round up; charge what is really held.
        budget.force(self.buf.capacity().saturating_sub(target));
        self.mem += self.buf.capacity() - cap;
        true
    }

    /// Drops the consumed front of the buffer (one move of the unconsumed bytes).
    fn compact(&mut self) {
        if self.head > 0 {
            self.buf.drain(..self.head.min(self.buf.len()));
            self.buf_off += self.head as u64;
            self.head = 0;
        }
    }

    /// Every [`SHRINK_EVERY`] segments, gives back buffer capacity far above recent use,
    /// so a flow that once had a burst does not keep its peak buffer for its lifetime.
    fn maybe_shrink(&mut self, budget: &mut MemBudget) {
        self.since_shrink += 1;
        if self.since_shrink < SHRINK_EVERY {
            return;
        }
        self.since_shrink = 0;
        let keep = self.peak.saturating_mul(2).max(MIN_BUF);
        self.peak = 0;
        let cap = self.buf.capacity();
        if cap > keep.saturating_mul(2) {
            self.compact();
            self.buf.shrink_to(keep);
            let freed = cap.saturating_sub(self.buf.capacity());
            self.mem -= freed;
            budget.credit(freed);
        }
    }

    /// Holds `bytes` (at stream offset `off`, past the end; from the segment `orig`) as
    /// piece `i` of the list.
    #[allow(clippy::too_many_arguments)]
    fn hold(
        &mut self,
        i: usize,
        off: u64,
        bytes: &[u8],
        orig: (u64, u64),
        budget: &mut MemBudget,
        r: &mut SegmentResult,
    ) {
        let lim = budget.limits;
        if self.ooo.len() >= lim.ooo_segments || self.held() + bytes.len() > lim.buffer {
            budget.counters.ooo_dropped.inc();
            self.truncate(Truncation::Gap, budget, r);
            return;
        }
        if !budget.try_charge(bytes.len() + SEGMENT_OVERHEAD) {
            budget.counters.ooo_dropped.inc();
            self.truncate(Truncation::Memcap, budget, r);
            return;
        }
        let seg = Seg {
            off,
            data: bytes.to_vec(),
            orig,
        };
        // `to_vec` allocates exactly; charge any rounding all the same.
        budget.force(seg.data.capacity() - bytes.len());
        self.mem += seg.charge();
        self.ooo_bytes += bytes.len();
        self.ooo.insert(i, seg);
        r.queued = true;
    }

    /// Appends the held segments that the end has reached.
    fn connect(&mut self, budget: &mut MemBudget, r: &mut SegmentResult) {
        let mut ooo = std::mem::take(&mut self.ooo);
        let mut used = 0;
        for s in &ooo {
            let end = self.end();
            if s.off > end || !self.reassembling() {
                break;
            }
            used += 1;
            self.ooo_bytes -= s.data.len();
            self.mem -= s.charge();
            budget.credit(s.charge());
            // A FIN learnt after the segment was held may cut it short.
            let skip = (end - s.off) as usize;
            let stop = match self.fin {
                Some(f) => (f.saturating_sub(s.off) as usize).min(s.data.len()),
                None => s.data.len(),
            };
            if let Some(part) = s.data.get(skip..stop)
                && !part.is_empty()
            {
                self.append(part, budget, r);
            }
        }
        ooo.drain(..used);
        self.ooo = ooo;
        if !self.reassembling() {
            self.drop_ooo(budget);
        }
    }

    /// Frees the held segments (the stream stopped), counting them dropped.
    fn drop_ooo(&mut self, budget: &mut MemBudget) {
        if self.ooo.is_empty() {
            return;
        }
        budget.counters.ooo_dropped.add(self.ooo.len() as u64);
        for s in &self.ooo {
            self.mem -= s.charge();
            budget.credit(s.charge());
        }
        self.ooo = Vec::new();
        self.ooo_bytes = 0;
    }

    fn truncate(&mut self, why: Truncation, budget: &mut MemBudget, r: &mut SegmentResult) {
        if self.truncated.is_some() {
            return;
        }
        self.truncated = Some(why);
        r.truncated = true;
        budget.counters.truncated.inc();
        if why == Truncation::Memcap {
            budget.counters.memcap.inc();
        }
        self.drop_ooo(budget);
    }
}
