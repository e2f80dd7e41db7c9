//! The user side of the four AF_XDP rings, and the free-frame stack.
//!
//! Each ring is a single-producer single-consumer queue shared with the kernel through a
//! mapping: a `u32` producer index, a `u32` consumer index, a flags word and an array of
//! `size` (a power of two) entries. Indices run freely and wrap at `u32::MAX`; an entry's
//! slot is `index & (size - 1)`, and `producer - consumer` (wrapping) is the fill level.
//! The producer writes entries, then publishes them with a release store of its index;
//! the consumer loads that index with acquire before reading the entries, and hands the
//! slots back with a release store of its own index, which the producer loads with
//! acquire before overwriting them (the protocol of the kernel's `xsk_queue.h`).
//!
//! Both sides keep a cached copy of the other side's index and read the shared one only
//! when the cache says the ring is full (producer) or empty (consumer), so a batch costs
//! one or two atomic loads, not one per entry. Nothing here trusts the kernel's indices:
//! a consumer index ahead of the producer reads as a full ring, and a producer index more
//! than `size` ahead reads as `size` entries, so a confused kernel cannot make us read
//! or write outside the mapping.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where one mapped ring's parts live (from `XDP_MMAP_OFFSETS` plus the mapping's base).
#[derive(Debug)]
pub(super) struct RingPtrs<T> {
    /// The producer index.
    pub(super) producer: NonNull<AtomicU32>,
    /// The consumer index.
    pub(super) consumer: NonNull<AtomicU32>,
    /// The flags word (`XDP_RING_NEED_WAKEUP`).
    pub(super) flags: NonNull<AtomicU32>,
    /// The first of `size` entries.
    pub(super) descs: NonNull<T>,
}

impl<T> Clone for RingPtrs<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for RingPtrs<T> {}

impl<T> RingPtrs<T> {
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: `ProdRing::new` / `ConsRing::new` callers promise the pointers stay valid
        // (mapped, aligned) for the ring's life.
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { self.consumer.as_ref() }
    }

    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { self.flags.as_ref() }
    }
}

/// A ring this process produces into: the fill ring (frame addresses) and the tx ring
/// (descriptors).
#[derive(Debug)]
pub(super) struct ProdRing<T> {
    ptrs: RingPtrs<T>,
    size: u32,
    /// The next index to write; runs ahead of `published` until [`ProdRing::publish`].
    local_prod: u32,
    /// The producer index as last stored for the kernel.
    published: u32,
    /// The consumer index as last loaded.
    cached_cons: u32,
}

impl<T: Copy> ProdRing<T> {
    /// Wraps a mapped ring of `size` entries, starting at its current indices.
    ///
    /// # Safety
    /// The pointers must stay valid for reads and writes (the entries: `size` of them) for
    /// the life of the ring, `size` must be a power of two, and no one else in this process
    /// may produce into the ring.
    pub(super) unsafe fn new(ptrs: RingPtrs<T>, size: u32) -> Self {
        let prod = ptrs.producer().load(Ordering::Relaxed);
        let cons = ptrs.consumer().load(Ordering::Acquire);
        ProdRing {
            ptrs,
            size,
            local_prod: prod,
            published: prod,
            cached_cons: cons,
        }
    }

    /// Free slots, counted against the cached consumer unless fewer than `want` are free,
    /// then against the kernel's.
    pub(super) fn free(&mut self, want: u32) -> u32 {
        let free = self.free_cached();
        if free >= want {
            return free;
        }
        // Acquire: the consumer read those slots before it stored this index.
        self.cached_cons = self.ptrs.consumer().load(Ordering::Acquire);
        self.free_cached()
    }

    fn free_cached(&self) -> u32 {
        let used = self.local_prod.wrapping_sub(self.cached_cons);
        // A consumer ahead of our producer (used wraps past size) counts as a full ring.
        self.size.saturating_sub(used)
    }

    /// Writes `value` into the next slot (not yet visible to the kernel); false if full.
    pub(super) fn push(&mut self, value: T) -> bool {
        if self.free(1) == 0 {
            return false;
        }
        let slot = (self.local_prod & (self.size - 1)) as usize;
        // SAFETY: slot < size, and the slot is ours: the consumer has released it.
        unsafe { self.ptrs.descs.as_ptr().add(slot).write(value) };
        self.local_prod = self.local_prod.wrapping_add(1);
        true
    }

    /// Entries written by [`ProdRing::push`] and not yet published.
    pub(super) fn unpublished(&self) -> u32 {
        self.local_prod.wrapping_sub(self.published)
    }

    /// Makes every pushed entry visible to the kernel; returns how many were new.
    pub(super) fn publish(&mut self) -> u32 {
        let n = self.unpublished();
        if n != 0 {
            // Release: the entries written above become visible before the index does.
            self.ptrs
                .producer()
                .store(self.local_prod, Ordering::Release);
            self.published = self.local_prod;
        }
        n
    }

    /// Published entries the kernel has not consumed yet (loads the consumer index).
    pub(super) fn outstanding(&mut self) -> u32 {
        self.cached_cons = self.ptrs.consumer().load(Ordering::Acquire);
        let n = self.published.wrapping_sub(self.cached_cons);
        if n > self.size { 0 } else { n }
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`) to process this ring.
    pub(super) fn needs_wakeup(&self) -> bool {
        self.ptrs.flags().load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

/// A ring this process consumes from: the rx ring (descriptors) and the completion ring
/// (frame addresses).
#[derive(Debug)]
pub(super) struct ConsRing<T> {
    ptrs: RingPtrs<T>,
    size: u32,
    /// The next index to read; published by [`ConsRing::release`].
    local_cons: u32,
    /// The producer index as last loaded.
    cached_prod: u32,
}

impl<T: Copy> ConsRing<T> {
    /// Wraps a mapped ring of `size` entries, starting at its current indices.
    ///
    /// # Safety
    /// The pointers must stay valid for reads and writes (the entries: reads, `size` of
    /// them) for the life of the ring, `size` must be a power of two, and no one else in
    /// this process may consume from the ring.
    pub(super) unsafe fn new(ptrs: RingPtrs<T>, size: u32) -> Self {
        let cons = ptrs.consumer().load(Ordering::Relaxed);
        let prod = ptrs.producer().load(Ordering::Acquire);
        ConsRing {
            ptrs,
            size,
            local_cons: cons,
            cached_prod: prod,
        }
    }

    /// Entries ready to read, at most `max`; loads the kernel's producer index only when
    /// the cached one shows fewer than `max`.
    pub(super) fn available(&mut self, max: u32) -> u32 {
        let n = self.available_cached();
        if n >= max {
            return max;
        }
        // Acquire: the entries were written before the producer stored this index.
        self.cached_prod = self.ptrs.producer().load(Ordering::Acquire);
        self.available_cached().min(max)
    }

    fn available_cached(&self) -> u32 {
        let n = self.cached_prod.wrapping_sub(self.local_cons);
        // More than a ringful (a producer behind us, or garbage) means nothing to read.
        if n > self.size { 0 } else { n }
    }

    /// The `i`-th unread entry; `i` must be below what [`ConsRing::available`] returned.
    pub(super) fn get(&self, i: u32) -> T {
        let slot = (self.local_cons.wrapping_add(i) & (self.size - 1)) as usize;
        // SAFETY: slot < size; the producer published this entry (see `available`).
        unsafe { self.ptrs.descs.as_ptr().add(slot).read() }
    }

    /// Hands the next `n` read entries' slots back to the producer.
    pub(super) fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.local_cons = self.local_cons.wrapping_add(n);
        // Release: our reads of the entries happen before the producer may reuse them.
        self.ptrs
            .consumer()
            .store(self.local_cons, Ordering::Release);
    }

    /// Whether the ring has entries not yet read (loads the producer index).
    pub(super) fn is_empty(&mut self) -> bool {
        self.available(1) == 0
    }
}

/// A preallocated stack of free frame addresses: frames are taken and given back with no
/// allocation, and the stack never holds more than it was sized for.
#[derive(Debug)]
pub(super) struct FrameStack {
    addrs: Box<[u64]>,
    len: usize,
}

impl FrameStack {
    /// An empty stack with room for `capacity` frames (the one allocation).
    pub(super) fn with_capacity(capacity: usize) -> Self {
        FrameStack {
            addrs: vec![0; capacity].into_boxed_slice(),
            len: 0,
        }
    }

    /// Adds a free frame; false (and the frame is not kept) if the stack is full, which
    /// means the caller returned a frame twice.
    pub(super) fn push(&mut self, addr: u64) -> bool {
        match self.addrs.get_mut(self.len) {
            Some(slot) => {
                *slot = addr;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Takes a free frame, the most recently freed first (its cache lines may be warm).
    pub(super) fn pop(&mut self) -> Option<u64> {
        self.len = self.len.checked_sub(1)?;
        self.addrs.get(self.len).copied()
    }

    /// The frames on the stack.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How many frames the stack can hold.
    pub(super) fn capacity(&self) -> usize {
        self.addrs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring in ordinary memory, standing in for a kernel mapping.
    struct FakeRing<T> {
        producer: Box<AtomicU32>,
        consumer: Box<AtomicU32>,
        flags: Box<AtomicU32>,
        descs: Box<[T]>,
    }

    impl<T: Copy + Default> FakeRing<T> {
        fn new(size: u32, start: u32) -> Self {
            FakeRing {
                producer: Box::new(AtomicU32::new(start)),
                consumer: Box::new(AtomicU32::new(start)),
                flags: Box::new(AtomicU32::new(0)),
                descs: vec![T::default(); size as usize].into_boxed_slice(),
            }
        }

        fn ptrs(&mut self) -> RingPtrs<T> {
            RingPtrs {
                producer: NonNull::from(&*self.producer),
                consumer: NonNull::from(&*self.consumer),
                flags: NonNull::from(&*self.flags),
                descs: NonNull::new(self.descs.as_mut_ptr()).unwrap(),
            }
        }
    }

    /// Starting indices just below the wrap, so every test crosses `u32::MAX`.
    const NEAR_WRAP: u32 = u32::MAX - 2;

    #[test]
    fn producer_fills_to_size_and_wraps() {
        let mut fake = FakeRing::<u64>::new(4, NEAR_WRAP);
        let ptrs = fake.ptrs();
        // SAFETY: `fake` outlives both rings, size is a power of two.
        let (mut prod, mut cons) = unsafe { (ProdRing::new(ptrs, 4), ConsRing::new(ptrs, 4)) };
        for round in 0..5u64 {
            for i in 0..4 {
                assert!(prod.push(round * 10 + i));
            }
            assert!(!prod.push(99), "a full ring takes nothing more");
            assert_eq!(prod.unpublished(), 4);
            assert_eq!(cons.available(8), 0, "unpublished entries stay invisible");
            assert_eq!(prod.publish(), 4);
            assert_eq!(prod.outstanding(), 4);
            assert_eq!(cons.available(8), 4);
            let got: Vec<u64> = (0..4).map(|i| cons.get(i)).collect();
            assert_eq!(
                got,
                [round * 10, round * 10 + 1, round * 10 + 2, round * 10 + 3]
            );
            assert_eq!(
                prod.free(1),
                0,
                "slots stay taken until the consumer releases"
            );
            cons.release(3);
            assert_eq!(prod.free(1), 3);
            assert_eq!(prod.outstanding(), 1);
            cons.release(1);
            assert_eq!(prod.outstanding(), 0);
        }
        assert_eq!(
            fake.producer.load(Ordering::Relaxed),
            NEAR_WRAP.wrapping_add(20)
        );
        assert_eq!(
            fake.consumer.load(Ordering::Relaxed),
            NEAR_WRAP.wrapping_add(20)
        );
    }

    #[test]
    fn consumer_caps_at_max_and_reads_in_order_across_the_wrap() {
        let mut fake = FakeRing::<u64>::new(8, NEAR_WRAP);
        let ptrs = fake.ptrs();
        // SAFETY: as above.
        let (mut prod, mut cons) = unsafe { (ProdRing::new(ptrs, 8), ConsRing::new(ptrs, 8)) };
        for v in 0..6 {
            assert!(prod.push(v));
        }
        prod.publish();
        assert_eq!(cons.available(4), 4);
        assert_eq!(cons.get(0), 0);
        assert_eq!(cons.get(3), 3);
        cons.release(4);
        assert_eq!(cons.available(4), 2);
        assert_eq!(cons.get(0), 4);
        assert_eq!(cons.get(1), 5);
        cons.release(2);
        assert!(cons.is_empty());
    }

    #[test]
    fn garbage_indices_read_as_full_or_empty() {
        let mut fake = FakeRing::<u64>::new(4, 100);
        let ptrs = fake.ptrs();
        // SAFETY: as above.
        let (mut prod, mut cons) = unsafe { (ProdRing::new(ptrs, 4), ConsRing::new(ptrs, 4)) };
        for v in 0..4 {
            assert!(prod.push(v));
        }
        prod.publish();
        // A consumer index ahead of the producer: no free slot, nothing outstanding.
        fake.consumer.store(150, Ordering::Release);
        assert_eq!(prod.free(1), 0);
        assert!(!prod.push(1));
        assert_eq!(prod.outstanding(), 0);
        // A producer index a long way ahead of the consumer: nothing readable.
        fake.consumer.store(100, Ordering::Release);
        fake.producer.store(100 + 1000, Ordering::Release);
        assert_eq!(cons.available(16), 0);
        // Sane again: the four published entries are readable.
        fake.producer.store(104, Ordering::Release);
        assert_eq!(cons.available(16), 4);
    }

    #[test]
    fn need_wakeup_flag_is_read_from_the_ring() {
        let mut fake = FakeRing::<u64>::new(2, 0);
        // SAFETY: as above.
        let prod = unsafe { ProdRing::new(fake.ptrs(), 2) };
        assert!(!prod.needs_wakeup());
        fake.flags
            .store(libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        assert!(prod.needs_wakeup());
    }

    /// Producer and consumer on two threads, through a small ring many times round: every
    /// value arrives once, in order (the acquire/release pairs at work).
    #[test]
    fn two_threads_pass_every_value_in_order() {
        const N: u64 = 200_000;
        let mut fake = FakeRing::<u64>::new(16, NEAR_WRAP);
        let ptrs = fake.ptrs();
        // SAFETY: as above; the scope below ends before `fake` is dropped.
        let (mut prod, mut cons) = unsafe { (ProdRing::new(ptrs, 16), ConsRing::new(ptrs, 16)) };
        struct SendPtr<R>(R);
        // SAFETY: each ring is used by exactly one thread; the memory is `fake`'s.
        unsafe impl<R> Send for SendPtr<R> {}
        let (p, c) = (SendPtr(&mut prod), SendPtr(&mut cons));
        std::thread::scope(|s| {
            s.spawn(move || {
                let p = p;
                let mut next = 0u64;
                while next < N {
                    while next < N && p.0.push(next) {
                        next += 1;
                    }
                    p.0.publish();
                    std::hint::spin_loop();
                }
            });
            s.spawn(move || {
                let c = c;
                let mut want = 0u64;
                while want < N {
                    let n = c.0.available(8);
                    for i in 0..n {
                        assert_eq!(c.0.get(i), want);
                        want += 1;
                    }
                    c.0.release(n);
                }
            });
        });
        drop(fake);
    }

    #[test]
    fn frame_stack_is_bounded_and_lifo() {
        let mut s = FrameStack::with_capacity(3);
        assert_eq!(s.capacity(), 3);
        assert_eq!(s.pop(), None);
        assert!(s.push(0));
        assert!(s.push(2048));
        assert!(s.push(4096));
        assert!(!s.push(6144), "a full stack refuses a fourth frame");
        assert_eq!(s.len(), 3);
        assert_eq!(s.pop(), Some(4096));
        assert_eq!(s.pop(), Some(2048));
        assert!(s.push(8192));
        assert_eq!(s.pop(), Some(8192));
        assert_eq!(s.pop(), Some(0));
        assert_eq!(s.pop(), None);
        assert_eq!(s.len(), 0);
    }
}
