//! Per-source (or destination, pair, rule) state for `threshold`, `detection_filter` and
//! `rate`, in a table of bounded size owned by one queue thread.
//!
//! The bound: at most `max` tracked keys per service instance (queue thread). When the
//! table is full, expired entries are swept (at most once a second); keys that still find
//! no room share one overflow entry per rule and keyword, so a flood of sources is limited
//! (or suppressed) as a whole instead of growing the table or escaping the limit.

use crate::rule::{DetectionFilter, Rate, Threshold, ThresholdKind, Track};
use relay_core::Counter;
use std::collections::HashMap;
use std::time::Instant;

/// Which keyword an entry serves (a rule may have a threshold and a detection filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Threshold,
    Filter,
    Rate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    rule: u32,
    kind: Kind,
    a: u128,
    b: u128,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Start of the current window (ns since the table's base), or last refill for `rate`.
    t0: u64,
    count: u32,
    tokens: f64,
    /// When the entry carries no information any more (ns since base).
    expires: u64,
}

const NS: u64 = 1_000_000_000;

/// The tracking table of one service instance.
#[derive(Debug)]
pub(crate) struct Tracker {
    map: HashMap<Key, Entry>,
    overflow: HashMap<(u32, Kind), Entry>,
    max: usize,
    base: Option<Instant>,
    last_sweep: u64,
    /// Packets whose key found no room and used the shared overflow entry.
    pub(crate) overflowed: Counter,
}

/// The addresses a packet is tracked by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addrs {
    pub(crate) src: u128,
    pub(crate) dst: u128,
}

fn key(rule: u32, kind: Kind, track: Track, a: Addrs) -> Key {
    let (a, b) = match track {
        Track::Src => (a.src, 0),
        Track::Dst => (a.dst, 0),
        Track::Both => (a.src, a.dst),
        Track::Rule => (0, 0),
    };
    Key { rule, kind, a, b }
}

impl Tracker {
    /// A table of at most `max` keys.
    pub(crate) fn new(max: usize, overflowed: Counter) -> Tracker {
        Tracker {
            map: HashMap::new(),
            overflow: HashMap::new(),
            max,
            base: None,
            last_sweep: 0,
            overflowed,
        }
    }

    /// Number of tracked keys.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    fn ns(&mut self, now: Instant) -> u64 {
        let base = *self.base.get_or_insert(now);
        now.saturating_duration_since(base).as_nanos() as u64
    }

    /// The entry for `k`, created fresh (by `fresh`) if missing; `None` never happens, the
    /// overflow entry standing in when the table is full.
    fn entry(&mut self, k: Key, now: u64, fresh: Entry) -> &mut Entry {
        if !self.map.contains_key(&k) && self.map.len() >= self.max {
            if now.saturating_sub(self.last_sweep) >= NS || self.last_sweep == 0 {
                self.last_sweep = now.max(1);
                self.map.retain(|_, e| e.expires > now);
            }
            if self.map.len() >= self.max {
                self.overflowed.inc();
                return self.overflow.entry((k.rule, k.kind)).or_insert(fresh);
            }
        }
        self.map.entry(k).or_insert(fresh)
    }

    /// Counts a match in a fixed window of `seconds`, returning the count in the window.
    fn window_count(&mut self, k: Key, now: Instant, seconds: u32) -> u32 {
        let now = self.ns(now);
        let len = seconds as u64 * NS;
        let fresh = Entry {
            t0: now,
            count: 0,
            tokens: 0.0,
            expires: now + len,
        };
        let e = self.entry(k, now, fresh);
        if now.saturating_sub(e.t0) >= len {
            *e = fresh;
        }
        e.count = e.count.saturating_add(1);
        e.count
    }

    /// `detection_filter`: true if this match is past the first `count` in the window.
    pub(crate) fn filter(
        &mut self,
        rule: u32,
        f: &DetectionFilter,
        a: Addrs,
        now: Instant,
    ) -> bool {
        let k = key(rule, Kind::Filter, f.track, a);
        self.window_count(k, now, f.seconds) > f.count
    }

    /// `threshold`: true if this match should alert.
    pub(crate) fn alert(&mut self, rule: u32, t: &Threshold, a: Addrs, now: Instant) -> bool {
        let k = key(rule, Kind::Threshold, t.track, a);
        let n = self.window_count(k, now, t.seconds);
        match t.kind {
            ThresholdKind::Limit => n <= t.count,
            ThresholdKind::Threshold => n.is_multiple_of(t.count),
            ThresholdKind::Both => n == t.count,
        }
    }

    /// `rate`: true if the packet is over the rate (no token left).
    pub(crate) fn over_rate(&mut self, rule: u32, r: &Rate, a: Addrs, now: Instant) -> bool {
        let k = key(rule, Kind::Rate, r.track, a);
        let now = self.ns(now);
        // An idle bucket is full again after burst / rate seconds: then it may go.
        let refill = ((r.burst / r.per_sec) * NS as f64) as u64;
        let fresh = Entry {
            t0: now,
            count: 0,
            tokens: r.burst,
            expires: now + refill,
        };
        let e = self.entry(k, now, fresh);
        let dt = now.saturating_sub(e.t0) as f64 / NS as f64;
        e.tokens = (e.tokens + dt * r.per_sec).min(r.burst);
        e.t0 = now;
        e.expires = now + refill;
        if e.tokens >= 1.0 {
            e.tokens -= 1.0;
            false
        } else {
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn addrs(src: u128) -> Addrs {
        Addrs { src, dst: 99 }
    }

    #[test]
    fn threshold_kinds() {
        let t0 = Instant::now();
        let mut t = Tracker::new(100, Counter::new());
        let th = |kind| Threshold {
            kind,
            track: Track::Src,
            count: 3,
            seconds: 10,
        };
        let limit: Vec<bool> = (0..5)
            .map(|_| t.alert(1, &th(ThresholdKind::Limit), addrs(1), t0))
            .collect();
        assert_eq!(limit, [true, true, true, false, false]);
        let every: Vec<bool> = (0..7)
            .map(|_| t.alert(2, &th(ThresholdKind::Threshold), addrs(1), t0))
            .collect();
        assert_eq!(every, [false, false, true, false, false, true, false]);
        let both: Vec<bool> = (0..5)
            .map(|_| t.alert(3, &th(ThresholdKind::Both), addrs(1), t0))
            .collect();
        assert_eq!(both, [false, false, true, false, false]);
        // A new window starts over.
        assert!(t.alert(
            1,
            &th(ThresholdKind::Limit),
            addrs(1),
            t0 + Duration::from_secs(10)
        ));
        // Another source has its own count.
        assert!(t.alert(1, &th(ThresholdKind::Limit), addrs(2), t0));
    }

    #[test]
    fn table_is_bounded_and_overflow_is_shared() {
        let t0 = Instant::now();
        let c = Counter::new();
        let mut t = Tracker::new(4, c.clone());
        let f = DetectionFilter {
            track: Track::Src,
            count: 2,
            seconds: 60,
        };
        for src in 0..1000 {
            t.filter(1, &f, addrs(src), t0);
        }
        assert_eq!(t.len(), 4);
        assert_eq!(c.get(), 996);
        // The 996 overflowing sources shared one window: well past its count.
        assert!(t.filter(1, &f, addrs(5000), t0));
        // Expired entries make room again (after a second since the last sweep).
        let later = t0 + Duration::from_secs(61);
        assert!(!t.filter(1, &f, addrs(7000), later));
        assert!(t.len() <= 4);
    }

    #[test]
    fn rate_bucket() {
        let t0 = Instant::now();
        let mut t = Tracker::new(10, Counter::new());
        let r = Rate {
            track: Track::Rule,
            per_sec: 2.0,
            burst: 2.0,
        };
        let v: Vec<bool> = (0..4).map(|_| t.over_rate(1, &r, addrs(1), t0)).collect();
        assert_eq!(v, [false, false, true, true]);
        assert!(!t.over_rate(1, &r, addrs(1), t0 + Duration::from_millis(500)));
        assert!(t.over_rate(1, &r, addrs(1), t0 + Duration::from_millis(500)));
    }
}
