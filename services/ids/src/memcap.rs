//! A memory cap: bytes charged against a bound, refused past it, credited back when freed,
//! with a gauge of the use. The stream memcap ([`crate::flow::stream::MemBudget`]) and the
//! application-layer one ([`crate::applayer::budget::AppBudget`]) are each one of these.

use relay_core::Counter;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes charged against a cap. One per queue thread and kind of memory; its methods take
/// `&self` so that holders that outlive a call (an application-layer parser state, which
/// credits its charge back when dropped) can share it. Only its queue thread changes it, so
/// relaxed atomics are enough: they only make sharing the handle sound.
#[derive(Debug)]
pub(crate) struct Memcap {
    cap: usize,
    used: AtomicUsize,
    /// Gauge mirroring `used`.
    gauge: Counter,
}

impl Memcap {
    /// A cap of `cap` bytes, reporting its use in the gauge `gauge`.
    pub(crate) fn new(cap: usize, gauge: Counter) -> Memcap {
        Memcap {
            cap,
            used: AtomicUsize::new(0),
            gauge,
        }
    }

    /// Bytes charged now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The cap.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Charges `n` bytes if the use stays within the cap; false (nothing charged) if not.
    pub(crate) fn try_charge(&self, n: usize) -> bool {
        let r = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(n).filter(|&v| v <= self.cap)
            });
        match r {
            Ok(prev) => {
                self.gauge.set((prev + n) as u64);
                true
            }
            Err(_) => false,
        }
    }

    /// Charges `n` bytes whatever the cap (for memory already allocated that must be
    /// accounted for all the same).
    pub(crate) fn force(&self, n: usize) {
        if n > 0 {
            let prev = self.used.fetch_add(n, Ordering::Relaxed);
            self.gauge.set(prev.saturating_add(n) as u64);
        }
    }

    /// Credits back `n` bytes (never below zero).
    pub(crate) fn credit(&self, n: usize) {
        if n == 0 {
            return;
        }
        let r = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(n))
            });
        let prev = r.unwrap_or_else(|u| u);
        self.gauge.set(prev.saturating_sub(n) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_within_the_cap_and_credits_back() {
        let gauge = Counter::default();
        let m = Memcap::new(100, gauge.clone());
        assert!(m.try_charge(60));
        assert!(!m.try_charge(41), "past the cap");
        assert_eq!(m.used(), 60);
        assert!(m.try_charge(40));
        assert_eq!(gauge.get(), 100);
        m.credit(70);
        assert_eq!(m.used(), 30);
        m.force(200);
        assert_eq!(m.used(), 230);
        m.credit(1000);
        assert_eq!((m.used(), gauge.get()), (0, 0));
    }
}
