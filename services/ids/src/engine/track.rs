//! Per-source (or destination, pair, rule, flow) state for `threshold`, `detection_filter`
//! and `rate`, in a table of bounded size owned by one queue thread. The semantics follow
//! Suricata 8's src/detect-engine-threshold.c.
//!
//! **Keys.** An entry is keyed by the rule, the keyword and what `track` names: the source
//! or destination address, the address pair (lower first, so both directions share it, as
//! in Suricata), nothing (`by_rule`), or the flow id the engine passes in [`Addrs::flow`]
//! (`by_flow`).
//!
//! **Windows.** `limit`, `threshold`, `both` and `detection_filter` count in a fixed window
//! of `seconds` starting at the first match of a key; a match `seconds` or more after that
//! start opens a new window (Suricata keeps a match at exactly `start + seconds` in the old
//! one: the two differ only at that instant). `backoff` has no window: its state lives as
//! long as the flow, taken here as until [`FLOW_IDLE`] passes without a match (Suricata's
//! longest default flow timeout), after which the key starts over.
//!
//! **`unique_on`.** A `detection_filter` with `unique_on` counts distinct ports in the
//! window, in 32 bytes per entry ([`Ports`]): the first 16 distinct ports are remembered
//! exactly, so the count is exact up to 16 (any `count` up to 15 behaves exactly as in
//! Suricata, which keeps an 8 KiB bitmap per entry). From the 17th distinct port on, ports
//! are hashed (Fibonacci hashing) to one of 256 bits: a port whose bit is clear counts as
//! new and sets it; a port whose bit is already set counts as seen. Past 16 the count can
//! thus only fall short of the true number of distinct ports (a new port is missed with
//! probability bits-set / 256, below 1/8 while fewer than 32 ports are counted), so such
//! a rule matches later than Suricata's, never earlier. Once all 256 bits are set every
//! further match counts as a new port (as Suricata counts when it cannot allocate its
//! bitmap), so even a `count` above 272 is reached.
//!
//! **The bound.** At most `max` tracked keys per service instance (queue thread). When the
//! table is full, expired entries are swept (at most once a second); keys that still find
//! no room share one overflow entry per rule and keyword, counted in `track_overflow`, so a
//! flood of sources is limited (or suppressed) as a whole instead of growing the table or
//! escaping the limit. An entry is a 48-byte key and a 64-byte value (asserted by a test);
//! the hash table keeps at most 7/8 of its buckets full and grows in powers of two, with
//! one control byte per bucket, so at the default `max` of 65,536 keys it holds 131,072
//! buckets of 113 bytes: 14.8 MB per queue thread at the bound, nothing before keys come.

use crate::rules::parse::RateFilter;
use crate::rules::rule::{DetectionFilter, Rate, Threshold, ThresholdKind, Track, UniqueOn};
use relay_core::Counter;
use std::collections::HashMap;
use std::time::Instant;

/// Which keyword an entry serves (a rule may have a threshold and a detection filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Threshold,
    Filter,
    Rate,
    /// A threshold file's `rate_filter`.
    RateFilter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    rule: u32,
    kind: Kind,
    a: u128,
    b: u128,
}

/// The distinct ports of a `unique_on` window: 16 exact slots, then a 256-bit hashed set
/// (see the module docs). Which of the two it holds follows from the distinct count kept
/// beside it: up to 16 it is the slots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ports([u64; 4]);

impl Ports {
    /// Ports remembered exactly.
    const EXACT: u32 = 16;

    fn slot(&self, i: u32) -> u16 {
        let w = self.0.get((i / 4) as usize).copied().unwrap_or(0);
        (w >> (16 * (i % 4))) as u16
    }

    fn set_slot(&mut self, i: u32, port: u16) {
        if let Some(w) = self.0.get_mut((i / 4) as usize) {
            let sh = 16 * (i % 4);
            *w = (*w & !(0xffff << sh)) | (u64::from(port) << sh);
        }
    }

    /// The bit of `port` in the hashed set: the top 8 bits of a Fibonacci hash, which
    /// spreads runs of consecutive ports (a scan) evenly.
    fn bit(port: u16) -> u32 {
        u32::from(port).wrapping_mul(0x9E37_79B9) >> 24
    }

    /// Sets the bit of `port`, returning whether it was clear.
    fn set_bit(&mut self, port: u16) -> bool {
        let b = Self::bit(port);
        match self.0.get_mut((b / 64) as usize) {
            Some(w) => {
                let m = 1u64 << (b % 64);
                let clear = *w & m == 0;
                *w |= m;
                clear
            }
            None => false,
        }
    }

    /// Adds `port` to a set holding `n` distinct ports; true if it counts as a new one.
    fn add(&mut self, n: u32, port: u16) -> bool {
        if n <= Self::EXACT {
            if (0..n).any(|i| self.slot(i) == port) {
                return false;
            }
            if n < Self::EXACT {
                self.set_slot(n, port);
                return true;
            }
            // The 17th distinct port: from now on a hashed set, holding the 16 as well.
            let exact = *self;
            self.0 = [0; 4];
            for i in 0..Self::EXACT {
                self.set_bit(exact.slot(i));
            }
            self.set_bit(port);
            return true;
        }
        if self.0.iter().all(|w| *w == u64::MAX) {
            return true;
        }
        self.set_bit(port)
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Start of the current window (ns since the table's base); for `rate` the last refill,
    /// for `backoff` the last match.
    t0: u64,
    /// When the entry carries no information any more (ns since base).
    expires: u64,
    /// Matches in the window; distinct ports for `unique_on`; a flow's matches for backoff.
    count: u32,
    /// `backoff`: the match number that alerts next.
    next: u32,
    /// `rate`: tokens in the bucket.
    tokens: f64,
    /// `unique_on`: the ports seen in the window.
    ports: Ports,
}

impl Entry {
    fn fresh(t0: u64, expires: u64) -> Entry {
        Entry {
            t0,
            expires,
            count: 0,
            next: 0,
            tokens: 0.0,
            ports: Ports::default(),
        }
    }
}

const NS: u64 = 1_000_000_000;

/// How long a `backoff` (flow) entry lives without a match: Suricata's longest default
/// flow timeout (TCP established, 600 s), standing in for the end of the flow.
pub(crate) const FLOW_IDLE: u64 = 600;

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

/// What a packet is tracked by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addrs {
    /// Source address (`rule::ip_key`).
    pub(crate) src: u128,
    /// Destination address (`rule::ip_key`).
    pub(crate) dst: u128,
    /// Source port, 0 without one (`unique_on src_port`).
    pub(crate) sport: u16,
    /// Destination port, 0 without one (`unique_on dst_port`).
    pub(crate) dport: u16,
    /// The packet's flow, the same for both directions (`by_flow`).
    pub(crate) flow: u64,
}

fn key(rule: u32, kind: Kind, track: Track, a: Addrs) -> Key {
    let (a, b) = match track {
        Track::Src => (a.src, 0),
        Track::Dst => (a.dst, 0),
        Track::Both => (a.src.min(a.dst), a.src.max(a.dst)),
        Track::Rule => (0, 0),
        Track::Flow => (u128::from(a.flow), 0),
    };
    Key { rule, kind, a, b }
}

/// Suricata's BackoffCalcNextValue: `cur * m`, or `u32::MAX` where that would overflow.
fn backoff_next(cur: u32, m: u32) -> u32 {
    cur.saturating_mul(m)
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

    /// The entry for `k`, created as `fresh` if missing; the rule's overflow entry stands in
    /// when the table is full.
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

    /// The entry of `k` in its current window of `seconds` (a new one if the last is over).
    fn window(&mut self, k: Key, now: Instant, seconds: u32) -> &mut Entry {
        let now = self.ns(now);
        let len = u64::from(seconds) * NS;
        let fresh = Entry::fresh(now, now.saturating_add(len));
        let e = self.entry(k, now, fresh);
        if now.saturating_sub(e.t0) >= len {
            *e = fresh;
        }
        e
    }

    /// Counts a match in a fixed window of `seconds`, returning the count in the window.
    fn window_count(&mut self, k: Key, now: Instant, seconds: u32) -> u32 {
        let e = self.window(k, now, seconds);
        e.count = e.count.saturating_add(1);
        e.count
    }

    /// `detection_filter`: true if this match is past the first `count` in the window (with
    /// `unique_on`: if more than `count` distinct ports were seen in the window).
    pub(crate) fn filter(
        &mut self,
        rule: u32,
        f: &DetectionFilter,
        a: Addrs,
        now: Instant,
    ) -> bool {
        let k = key(rule, Kind::Filter, f.track, a);
        let Some(u) = f.unique_on else {
            return self.window_count(k, now, f.seconds) > f.count;
        };
        let port = match u {
            UniqueOn::SrcPort => a.sport,
            UniqueOn::DstPort => a.dport,
        };
        let e = self.window(k, now, f.seconds);
        if e.ports.add(e.count, port) {
            e.count = e.count.saturating_add(1);
        }
        e.count > f.count
    }

    /// `threshold`: true if this match should alert.
    pub(crate) fn alert(&mut self, rule: u32, t: &Threshold, a: Addrs, now: Instant) -> bool {
        let k = key(rule, Kind::Threshold, t.track, a);
        let multiplier = match t.kind {
            ThresholdKind::Backoff { multiplier } => multiplier,
            ThresholdKind::Limit => return self.window_count(k, now, t.seconds) <= t.count,
            ThresholdKind::Threshold => {
                return self.window_count(k, now, t.seconds).is_multiple_of(t.count);
            }
            ThresholdKind::Both => return self.window_count(k, now, t.seconds) == t.count,
        };
        // Backoff, as ThresholdSetup / ThresholdCheckUpdate do it: a flow's matches are
        // counted; the one numbered `next` alerts and multiplies `next` (saturating); from
        // the u32::MAX-th match on nothing alerts.
        let now = self.ns(now);
        let idle = FLOW_IDLE * NS;
        let mut fresh = Entry::fresh(now, now + idle);
        fresh.next = t.count;
        let e = self.entry(k, now, fresh);
        if now.saturating_sub(e.t0) >= idle {
            *e = fresh;
        }
        e.t0 = now;
        e.expires = now + idle;
        if e.count == u32::MAX {
            return false;
        }
        e.count += 1;
        if e.count != e.next {
            return false;
        }
        e.next = backoff_next(e.next, multiplier);
        true
    }

    /// A threshold file's `rate_filter` (Suricata's TYPE_RATE in ThresholdCheckUpdate):
    /// true if the match takes the filter's `new_action`. Matches are counted in windows
    /// of `seconds`; the match that makes the count pass `count` starts a timeout of
    /// `timeout` seconds in which every match takes the new action. The timeout's start
    /// is kept in whole seconds since the table's base plus one in `next` (0: none), as
    /// Suricata compares whole seconds.
    pub(crate) fn rate_filter(
        &mut self,
        rule: u32,
        f: &RateFilter,
        a: Addrs,
        now: Instant,
    ) -> bool {
        let k = key(rule, Kind::RateFilter, f.track, a);
        let now = self.ns(now);
        let len = u64::from(f.seconds) * NS;
        let fresh = Entry::fresh(now, now.saturating_add(len));
        let e = self.entry(k, now, fresh);
        let secs = (now / NS) as u32;
        if e.next != 0 {
            // Past the timeout this match takes the rule's own action and leaves the
            // window as it is (as Suricata does).
            if secs.saturating_sub(e.next - 1) > f.timeout {
                e.next = 0;
                return false;
            }
            return true;
        } else if now.saturating_sub(e.t0) <= len {
            e.count = e.count.saturating_add(1);
            if e.count > f.count {
                e.next = secs.saturating_add(1);
                let until = now.saturating_add((u64::from(f.timeout) + 1) * NS);
                e.expires = e.expires.max(until);
                return true;
            }
            return false;
        }
        // A match after the window starts a new one, counted 1.
        e.t0 = now;
        e.count = 1;
        e.expires = now.saturating_add(len);
        false
    }

    /// `rate`: true if the packet is over the rate (no token left).
    pub(crate) fn over_rate(&mut self, rule: u32, r: &Rate, a: Addrs, now: Instant) -> bool {
        let k = key(rule, Kind::Rate, r.track, a);
        let now = self.ns(now);
        // An idle bucket is full again after burst / rate seconds: then it may go.
        let refill = ((r.burst / r.per_sec) * NS as f64) as u64;
        let mut fresh = Entry::fresh(now, now.saturating_add(refill));
        fresh.tokens = r.burst;
        let e = self.entry(k, now, fresh);
        let dt = now.saturating_sub(e.t0) as f64 / NS as f64;
        e.tokens = (e.tokens + dt * r.per_sec).min(r.burst);
        e.t0 = now;
        e.expires = now.saturating_add(refill);
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
        Addrs {
            src,
            dst: 99,
            sport: 1024,
            dport: 80,
            flow: 7,
        }
    }

    fn flow(flow: u64) -> Addrs {
        Addrs { flow, ..addrs(1) }
    }

    #[test]
    fn sizes_stated_in_the_module_docs() {
        assert_eq!(std::mem::size_of::<Key>(), 48);
        assert_eq!(std::mem::size_of::<Entry>(), 64);
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
    fn by_flow_and_by_both_keys() {
        let t0 = Instant::now();
        let mut t = Tracker::new(100, Counter::new());
        let limit = |track| Threshold {
            kind: ThresholdKind::Limit,
            track,
            count: 1,
            seconds: 60,
        };
        // by_flow: the same source in two flows has two budgets; one flow, one budget.
        let l = limit(Track::Flow);
        assert!(t.alert(1, &l, flow(1), t0));
        assert!(!t.alert(1, &l, flow(1), t0));
        assert!(t.alert(1, &l, flow(2), t0));
        assert!(!t.alert(1, &l, Addrs { src: 5, ..flow(2) }, t0));
        // by_both: the pair either way round is one key.
        let b = limit(Track::Both);
        let ab = Addrs {
            src: 10,
            dst: 20,
            ..addrs(0)
        };
        let ba = Addrs {
            src: 20,
            dst: 10,
            ..addrs(0)
        };
        assert!(t.alert(2, &b, ab, t0));
        assert!(!t.alert(2, &b, ba, t0));
        // detection_filter by_flow.
        let f = DetectionFilter {
            track: Track::Flow,
            count: 1,
            seconds: 60,
            unique_on: None,
        };
        assert!(!t.filter(3, &f, flow(1), t0));
        assert!(t.filter(3, &f, flow(1), t0));
        assert!(!t.filter(3, &f, flow(2), t0));
    }

    /// The match numbers (1-based) that alert among the first `n` of one flow.
    fn backoff_alerts(count: u32, multiplier: u32, n: u32) -> Vec<u32> {
        let t0 = Instant::now();
        let mut t = Tracker::new(10, Counter::new());
        let th = Threshold {
            kind: ThresholdKind::Backoff { multiplier },
            track: Track::Flow,
            count,
            seconds: 0,
        };
        (1..=n).filter(|_| t.alert(1, &th, flow(1), t0)).collect()
    }

    #[test]
    fn backoff_sequences() {
        // thresholding.rst's three examples.
        assert_eq!(backoff_alerts(1, 10, 20_000), [1, 10, 100, 1000, 10_000]);
        assert_eq!(backoff_alerts(1, 2, 100), [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(
            backoff_alerts(5, 5, 20_000),
            [5, 25, 125, 625, 3125, 15_625]
        );
        // suricata-verify threshold-rule-flow-backoff-single-flow: one flow with 6676
        // matching packets gives 13, 12 and 5 alerts.
        assert_eq!(backoff_alerts(1, 2, 6676).len(), 13);
        assert_eq!(backoff_alerts(3, 2, 6676).len(), 12);
        assert_eq!(backoff_alerts(5, 5, 6676).len(), 5);
        // The next value saturates instead of wrapping.
        assert_eq!(backoff_next(65_535 * 65_535, 2), u32::MAX);
        assert_eq!(backoff_next(3, 2), 6);
    }

    #[test]
    fn backoff_is_per_flow_and_ends_with_the_flow() {
        let t0 = Instant::now();
        let mut t = Tracker::new(10, Counter::new());
        let th = Threshold {
            kind: ThresholdKind::Backoff { multiplier: 2 },
            track: Track::Flow,
            count: 2,
            seconds: 0,
        };
        let mut run = |f: u64, at: Instant| -> Vec<bool> {
            (0..4).map(|_| t.alert(1, &th, flow(f), at)).collect()
        };
        assert_eq!(run(1, t0), [false, true, false, true]);
        assert_eq!(run(2, t0), [false, true, false, true]);
        // Flow 1 goes on: matches 5..8 alert at 8.
        let busy = t0 + Duration::from_secs(FLOW_IDLE - 1);
        assert_eq!(run(1, busy), [false, false, false, true]);
        // Idle for FLOW_IDLE: a new flow.
        let later = busy + Duration::from_secs(FLOW_IDLE);
        assert_eq!(run(1, later), [false, true, false, true]);
    }

    #[test]
    fn unique_on_counts_distinct_ports() {
        let t0 = Instant::now();
        let mut t = Tracker::new(10, Counter::new());
        let f = |count, unique_on| DetectionFilter {
            track: Track::Src,
            count,
            seconds: 60,
            unique_on: Some(unique_on),
        };
        let sport = |p| Addrs {
            sport: p,
            ..addrs(1)
        };
        // suricata-verify detection_filter-distinct-srcport: count 1, two source ports.
        let f1 = f(1, UniqueOn::SrcPort);
        let v: Vec<bool> = [1000, 1000, 1001, 1000]
            .into_iter()
            .map(|p| t.filter(1, &f1, sport(p), t0))
            .collect();
        assert_eq!(v, [false, false, true, true]);
        // ...-no-dups: count 3, only two distinct ports: never.
        let f3 = f(3, UniqueOn::SrcPort);
        assert!(
            [1000, 1001, 1000, 1001, 1001]
                .into_iter()
                .all(|p| !t.filter(2, &f3, sport(p), t0))
        );
        // dst_port; a new window forgets the ports.
        let fd = f(2, UniqueOn::DstPort);
        let dport = |p| Addrs {
            dport: p,
            ..addrs(1)
        };
        for p in [22, 23, 22] {
            assert!(!t.filter(3, &fd, dport(p), t0));
        }
        assert!(t.filter(3, &fd, dport(25), t0));
        let next = t0 + Duration::from_secs(60);
        assert!(!t.filter(3, &fd, dport(25), next));
        assert!(!t.filter(3, &fd, dport(26), next));
        assert!(t.filter(3, &fd, dport(27), next));
    }

    #[test]
    fn port_set_is_exact_to_16_then_falls_short() {
        let mut s = Ports::default();
        let mut n = 0;
        // 16 distinct ports, each repeated: exact.
        for p in 1000..1016u16 {
            assert!(s.add(n, p));
            n += 1;
            assert!(!s.add(n, p));
            assert!(!s.add(n, 1000));
        }
        // The 17th is new; the first 16 stay known in the hashed set.
        assert!(s.add(n, 5000));
        n += 1;
        for p in (1000..1016u16).chain([5000]) {
            assert!(!s.add(n, p), "{p}");
        }
        // A scan of 256 more ports: counted at most once each, at most 256 bits.
        let mut counted = 0;
        for p in 6000..6256u16 {
            if s.add(n, p) {
                n += 1;
                counted += 1;
            }
            assert!(!s.add(n, p));
        }
        assert!(counted <= 256 && counted > 128, "{counted}");
        // Saturated: every port counts.
        for p in 0..=u16::MAX {
            if s.add(n, p) {
                n += 1;
            }
        }
        assert_eq!(s.0, [u64::MAX; 4]);
        assert!(s.add(n, 1000));
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
            unique_on: None,
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

    #[test]
    fn rate_filter_switches_for_the_timeout() {
        use crate::rules::parse::{NewAction, RateFilter};
        let t0 = Instant::now();
        let mut t = Tracker::new(100, Counter::new());
        let f = RateFilter {
            track: Track::Src,
            count: 2,
            seconds: 10,
            action: NewAction::Drop,
            timeout: 5,
        };
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Two matches in the window keep the action; the third switches it for 5 s.
        let v: Vec<bool> = [0, 1, 2, 3, 7, 8, 9]
            .iter()
            .map(|&s| t.rate_filter(1, &f, addrs(1), at(s)))
            .collect();
        // 7 - 2 = 5 is not past the timeout; at 8 it is over (that match keeps the rule's
        // action), and at 9 the window of 0..10 still counts past 2: switched again.
        assert_eq!(v, [false, false, true, true, true, false, true]);
        // Another source has its own count.
        assert!(!t.rate_filter(1, &f, addrs(2), at(3)));
        // A match after the window (and the timeout) starts over.
        assert!(!t.rate_filter(1, &f, addrs(1), at(30)));
        assert!(!t.rate_filter(1, &f, addrs(1), at(40)));
    }
}
