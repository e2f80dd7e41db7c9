//! The packets a queue holds for a later verdict ([`relay_core::Action::Hold`]), in
//! deadline order, each with the datapath's handle for it (NFQUEUE: the packet id; AF_XDP:
//! the next hop; replay: the capture record).
//!
//! A binary heap of (deadline, arrival number) orders them: equal deadlines leave in
//! arrival order. Entries live in slots reused through a free list, and each slot keeps its
//! byte buffer across uses, so holding allocates nothing once the store has warmed up.
//! Which bytes are copied is the caller's choice ([`crate::HeldBytes`]): on NFQUEUE only a
//! packet whose bytes a service changed (the kernel keeps the original of every other
//! one), on datapaths that keep nothing, every packet.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// One held packet.
#[derive(Debug, Default)]
pub struct Held<H> {
    /// The datapath's handle for the packet (what it needs to answer or send it later).
    pub handle: H,
    /// The mark the verdict sets, if any.
    pub mark: Option<u32>,
    /// The packet's bytes as copied when it was held (see [`crate::HeldBytes`]), else empty.
    pub data: Vec<u8>,
    /// True if a service changed the packet and its verdict carries `data`.
    pub payload: bool,
    /// The packet's length (counted against the byte limit whether copied or not: the
    /// kernel keeps the original in memory meanwhile).
    len: usize,
}

/// Held packets, bounded in number and bytes.
#[derive(Debug)]
pub(crate) struct HoldStore<H> {
    slots: Vec<Held<H>>,
    free: Vec<u32>,
    heap: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    seq: u64,
    bytes: usize,
    max_packets: usize,
    max_bytes: usize,
}

impl<H: Copy + Default> HoldStore<H> {
    /// An empty store for at most `max_packets` packets and `max_bytes` bytes; the index
    /// structures are allocated here, once.
    pub(crate) fn new(max_packets: usize, max_bytes: usize) -> HoldStore<H> {
        HoldStore {
            slots: Vec::with_capacity(max_packets),
            free: Vec::with_capacity(max_packets),
            heap: BinaryHeap::with_capacity(max_packets),
            seq: 0,
            bytes: 0,
            max_packets,
            max_bytes,
        }
    }

    /// Packets held.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// True if nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Bytes held (packet lengths).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds the packet `handle` until `until`; `data` are the bytes to keep of it,
    /// `payload` whether its verdict carries them. False (nothing held) if the store is
    /// full.
    pub(crate) fn insert(
        &mut self,
        until: Instant,
        handle: H,
        mark: Option<u32>,
        len: usize,
        data: Option<&[u8]>,
        payload: bool,
    ) -> bool {
        if self.heap.len() >= self.max_packets || self.bytes + len > self.max_bytes {
            return false;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Held::default());
                (self.slots.len() - 1) as u32
            }
        };
        let h = &mut self.slots[slot as usize];
        h.handle = handle;
        h.mark = mark;
        h.len = len;
        h.data.clear();
        h.payload = payload;
        if let Some(d) = data {
            h.data.extend_from_slice(d);
        }
        self.bytes += len;
        self.seq = self.seq.wrapping_add(1);
        self.heap.push(Reverse((until, self.seq, slot)));
        true
    }

    /// The earliest deadline, if anything is held.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The slot of the packet due first, if its deadline is at or before `now` (`None`
    /// for `now` takes any). It stays held until [`HoldStore::pop`].
    pub(crate) fn peek_due(&self, now: Option<Instant>) -> Option<u32> {
        let Reverse((t, _, slot)) = self.heap.peek()?;
        now.is_none_or(|now| *t <= now).then_some(*slot)
    }

    /// Removes the packet due first from the order; its slot stays readable until
    /// [`HoldStore::free`].
    pub(crate) fn pop(&mut self) -> Option<u32> {
        let Reverse((_, _, slot)) = self.heap.pop()?;
        self.bytes -= self.slots[slot as usize].len;
        Some(slot)
    }

    /// The packet in `slot`.
    pub(crate) fn get(&self, slot: u32) -> &Held<H> {
        &self.slots[slot as usize]
    }

    /// Gives a popped slot back for reuse (its buffer is kept).
    pub(crate) fn free(&mut self, slot: u32) {
        self.free.push(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn drain(s: &mut HoldStore<u32>, now: Option<Instant>) -> Vec<u32> {
        let mut ids = Vec::new();
        while let Some(slot) = s.peek_due(now) {
            assert_eq!(s.pop(), Some(slot));
            ids.push(s.get(slot).handle);
            s.free(slot);
        }
        ids
    }

    #[test]
    fn releases_in_deadline_then_arrival_order() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut s = HoldStore::<u32>::new(10, 1 << 20);
        for (id, at) in [(1, 30), (2, 10), (3, 20), (4, 10), (5, 50)] {
            assert!(s.insert(ms(at), id, None, 100, None, false));
        }
        assert_eq!((s.len(), s.bytes(), s.next_due()), (5, 500, Some(ms(10))));
        assert_eq!(drain(&mut s, Some(ms(5))), Vec::<u32>::new());
        assert_eq!(drain(&mut s, Some(ms(20))), [2, 4, 3]);
        assert_eq!(drain(&mut s, Some(ms(40))), [1]);
        assert_eq!(drain(&mut s, None), [5], "stop releases everything");
        assert!(s.is_empty() && s.bytes() == 0);
    }

    #[test]
    fn bounded_by_packets_and_bytes_and_reuses_slots() {
        let t = Instant::now();
        let mut s = HoldStore::<u32>::new(2, 1000);
        assert!(s.insert(t, 1, Some(7), 600, Some(&[1, 2, 3]), true));
        assert!(
            !s.insert(t, 2, None, 500, None, false),
            "over the byte limit"
        );
        assert!(s.insert(t, 3, None, 400, None, false));
        assert!(
            !s.insert(t, 4, None, 1, None, false),
            "over the packet limit"
        );
        let slot = s.peek_due(None).unwrap();
        s.pop();
        let h = s.get(slot);
        assert_eq!(
            (h.handle, h.mark, h.payload, &h.data[..]),
            (1, Some(7), true, &[1, 2, 3][..])
        );
        s.free(slot);
        // The freed slot (and its buffer) is reused; no new slot is made.
        assert!(s.insert(t, 5, None, 600, None, false));
        assert_eq!(s.slots.len(), 2);
        let h = s.get(slot);
        assert_eq!((h.handle, h.payload, h.data.len()), (5, false, 0));
        assert!(h.data.capacity() >= 3);
    }
}
