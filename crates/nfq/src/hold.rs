//! The packets a queue holds for a later verdict ([`relay_core::Action::Hold`]), in
//! deadline order.
//!
//! A binary heap of (deadline, arrival number) orders them: equal deadlines leave in
//! arrival order. Entries live in slots reused through a free list, and each slot keeps its
//! byte buffer across uses, so holding allocates nothing once the store has warmed up. Only
//! a packet whose bytes a service changed is copied: the kernel still has the original of
//! every other one, and its verdict needs only the packet id.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// One held packet.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// The kernel's packet id.
    pub(crate) id: u32,
    /// The mark the verdict sets, if any.
    pub(crate) mark: Option<u32>,
    /// The packet's bytes when the verdict carries them (a service changed them), else empty.
    pub(crate) data: Vec<u8>,
    /// True if the verdict carries `data`.
    pub(crate) payload: bool,
    /// The packet's length (counted against the byte limit whether copied or not: the
    /// kernel keeps the original in memory meanwhile).
    len: usize,
}

/// Held packets, bounded in number and bytes.
#[derive(Debug)]
pub(crate) struct HoldStore {
    slots: Vec<Held>,
    free: Vec<u32>,
    heap: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    seq: u64,
    bytes: usize,
    max_packets: usize,
    max_bytes: usize,
}

impl HoldStore {
    /// An empty store for at most `max_packets` packets and `max_bytes` bytes; the index
    /// structures are allocated here, once.
    pub(crate) fn new(max_packets: usize, max_bytes: usize) -> HoldStore {
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
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// True if nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Bytes held (packet lengths).
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds packet `id` until `until`; `data` are its bytes when the verdict must carry
    /// them. False (nothing held) if the store is full.
    pub(crate) fn insert(
        &mut self,
        until: Instant,
        id: u32,
        mark: Option<u32>,
        len: usize,
        data: Option<&[u8]>,
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
        h.id = id;
        h.mark = mark;
        h.len = len;
        h.data.clear();
        h.payload = data.is_some();
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
    pub(crate) fn get(&self, slot: u32) -> &Held {
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

    fn drain(s: &mut HoldStore, now: Option<Instant>) -> Vec<u32> {
        let mut ids = Vec::new();
        while let Some(slot) = s.peek_due(now) {
            assert_eq!(s.pop(), Some(slot));
            ids.push(s.get(slot).id);
            s.free(slot);
        }
        ids
    }

    #[test]
    fn releases_in_deadline_then_arrival_order() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut s = HoldStore::new(10, 1 << 20);
        for (id, at) in [(1, 30), (2, 10), (3, 20), (4, 10), (5, 50)] {
            assert!(s.insert(ms(at), id, None, 100, None));
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
        let mut s = HoldStore::new(2, 1000);
        assert!(s.insert(t, 1, Some(7), 600, Some(&[1, 2, 3])));
        assert!(!s.insert(t, 2, None, 500, None), "over the byte limit");
        assert!(s.insert(t, 3, None, 400, None));
        assert!(!s.insert(t, 4, None, 1, None), "over the packet limit");
        let slot = s.peek_due(None).unwrap();
        s.pop();
        let h = s.get(slot);
        assert_eq!(
            (h.id, h.mark, h.payload, &h.data[..]),
            (1, Some(7), true, &[1, 2, 3][..])
        );
        s.free(slot);
        // The freed slot (and its buffer) is reused; no new slot is made.
        assert!(s.insert(t, 5, None, 600, None));
        assert_eq!(s.slots.len(), 2);
        let h = s.get(slot);
        assert_eq!((h.id, h.payload, h.data.len()), (5, false, 0));
        assert!(h.data.capacity() >= 3);
    }
}
