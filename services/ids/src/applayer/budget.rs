//! The application-layer memcap of one queue thread (`app_memcap`, Suricata's
//! `app-layer.protocols.http.memcap` made to cover every parser): one [`AppBudget`] per
//! detector, and one [`Charge`] per parser state recording what that state has charged.
//!
//! A parser state sets its charge to what it holds after each step that may allocate
//! ([`Charge::set`]); a charge that does not fit is refused and the parser stops (the
//! engine then applies the exception policy and frees the state). A state's charge is
//! credited back when the state shrinks (transactions retired or evicted) and when it is
//! dropped, whatever drops it (flow removed, timed out, reused, parser given up), so the
//! budget never counts memory that is gone.

use crate::memcap::Memcap;
use relay_core::{Counter, Counters};
use std::sync::Arc;

/// Default `app_memcap`: 64 MiB per queue thread, as Suricata's default HTTP memcap
/// (`app-layer.protocols.http.memcap`, 64 MiB in its shipped suricata.yaml).
pub(crate) const DEFAULT_APP_MEMCAP: usize = 64 << 20;

/// What a flate2 (zlib-rs backend) decoder is charged while it runs: zlib-rs's inflate
/// state (about 7 KiB, `zlib_rs::inflate::INFLATE_STATE_SIZE`), its 32 KiB window (plus
/// padding) and flate2's 32 KiB writer buffer (`zio::Writer`), rounded up.
pub(crate) const INFLATE_STATE: usize = 80 << 10;

/// The counters of the application-layer memcap. A fresh set (`default()`) counts without
/// being registered anywhere.
#[derive(Debug, Clone, Default)]
pub(crate) struct AppCounters {
    /// Charges refused because the memcap was reached (each stops one flow's parser).
    pub memcap: Counter,
    /// Gauge: bytes charged now.
    pub memuse: Counter,
    /// Transactions dropped unanswered, oldest first, to stay within the per-flow limit.
    pub tx_evicted: Counter,
}

impl AppCounters {
    /// The counters registered in `c` as `app_memcap`, the gauge `app_memuse` and
    /// `app_tx_evicted`.
    pub(crate) fn register(c: &Counters) -> AppCounters {
        AppCounters {
            memcap: c.counter("app_memcap"),
            memuse: c.gauge("app_memuse"),
            tx_evicted: c.counter("app_tx_evicted"),
        }
    }
}

#[derive(Debug)]
struct Inner {
    mem: Memcap,
    counters: AppCounters,
}

/// The application-layer memory of one queue thread: its cap, the bytes every parser state
/// has charged, the counters. Cloning gives another handle on the same budget (each
/// parser state keeps one so that it can credit its charge back when dropped).
#[derive(Debug, Clone)]
pub(crate) struct AppBudget(Arc<Inner>);

impl AppBudget {
    /// A budget of `cap` bytes counting in `counters`.
    pub(crate) fn new(cap: usize, counters: AppCounters) -> AppBudget {
        AppBudget(Arc::new(Inner {
            mem: Memcap::new(cap, counters.memuse.clone()),
            counters,
        }))
    }

    /// Bytes charged now by all parser states.
    pub(crate) fn used(&self) -> usize {
        self.0.mem.used()
    }

    /// The memcap.
    pub(crate) fn cap(&self) -> usize {
        self.0.mem.cap()
    }

    /// The counters.
    #[cfg(test)]
    pub(crate) fn counters(&self) -> &AppCounters {
        &self.0.counters
    }
}

/// What one parser state has charged to its budget. Detached (the `Default`, as in the
/// parsers' unit tests) it charges nothing and refuses nothing. Dropping it credits the
/// charge back.
#[derive(Debug, Default)]
pub(crate) struct Charge {
    budget: Option<AppBudget>,
    charged: usize,
}

impl Charge {
    /// A charge against `budget`, nothing charged yet.
    pub(crate) fn new(budget: &AppBudget) -> Charge {
        Charge {
            budget: Some(budget.clone()),
            charged: 0,
        }
    }

    /// Makes the charge `now` bytes (what the state holds after a step). A decrease is
    /// credited; an increase is charged if it fits. False, leaving the charge as it was and
    /// counting a memcap hit, if it does not: the caller must then stop and free the state.
    pub(crate) fn set(&mut self, now: usize) -> bool {
        let Some(b) = &self.budget else {
            return true;
        };
        if now <= self.charged {
            b.0.mem.credit(self.charged - now);
        } else if !b.0.mem.try_charge(now - self.charged) {
            b.0.counters.memcap.inc();
            return false;
        }
        self.charged = now;
        true
    }

    /// Bytes charged now.
    pub(crate) fn charged(&self) -> usize {
        self.charged
    }

    /// Counts one transaction evicted unanswered.
    pub(crate) fn evicted(&self) {
        if let Some(b) = &self.budget {
            b.0.counters.tx_evicted.inc();
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.0.mem.credit(self.charged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_is_refused_past_the_cap_and_credited_when_dropped() {
        let b = AppBudget::new(1000, AppCounters::default());
        let mut a = Charge::new(&b);
        let mut c = Charge::new(&b);
        assert!(a.set(700));
        assert!(!c.set(400), "700 + 400 passes the cap");
        assert_eq!((c.charged(), b.used()), (0, 700));
        assert_eq!(b.counters().memcap.get(), 1);
        assert!(a.set(100), "shrinking is always allowed");
        assert!(c.set(400));
        assert_eq!(b.used(), 500);
        drop(a);
        assert_eq!(b.used(), 400);
        drop(c);
        assert_eq!((b.used(), b.counters().memuse.get()), (0, 0));
        // Detached: nothing is charged, nothing refused.
        let mut d = Charge::default();
        assert!(d.set(usize::MAX));
    }
}
