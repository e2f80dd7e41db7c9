//! Token buckets: [`RateLimit`] for log lines, so that a flood of odd packets cannot flood
//! the log, and [`TokenBucket`] for limits with their own burst (answers a service sends).

use std::time::Instant;

/// Allows `rate` events per second with a burst of `rate`, counting what it suppressed.
#[derive(Debug, Clone)]
pub struct RateLimit {
    rate: f64,
    tokens: f64,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimit {
    /// A bucket for `per_second` events per second (0 allows none).
    pub fn new(per_second: u32) -> RateLimit {
        RateLimit {
            rate: per_second as f64,
            tokens: per_second as f64,
            last: None,
            suppressed: 0,
        }
    }

    /// A bucket for at most one event per `interval` (burst 1), for "log at most every
    /// 10 s" (an interval below 1 ns is taken as 1 ns). The first event is allowed.
    pub fn every(interval: std::time::Duration) -> RateLimit {
        RateLimit {
            rate: 1.0 / interval.as_secs_f64().max(1e-9),
            tokens: 1.0,
            last: None,
            suppressed: 0,
        }
    }

    /// Takes a token at time `now`. `Some(n)` allows the event, `n` being how many events
    /// were suppressed since the last allowed one (say so in the log line); `None` suppresses it.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.rate.max(1.0));
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

/// A token bucket with its own rate and burst: `rate` tokens a second, holding at most
/// `burst`, full at the start. Unlike [`RateLimit`] (log lines, burst = rate) it lets the
/// caller look before taking, so that one event can be charged to several buckets only if
/// all of them have a token (a global limit and a per-destination one, say).
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket refilled at `per_second` tokens a second, holding at most `burst`
    /// (a burst below 1 is taken as 1; a rate of 0 never refills).
    pub fn new(per_second: f64, burst: f64) -> TokenBucket {
        let burst = if burst.is_finite() {
            burst.max(1.0)
        } else {
            1.0
        };
        let rate = if per_second.is_finite() {
            per_second.max(0.0)
        } else {
            0.0
        };
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: None,
        }
    }

    /// Refills for the time since the last call and says whether a token is there, without
    /// taking it. A clock that steps back refills nothing.
    pub fn ready(&mut self, now: Instant) -> bool {
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        }
        if self.last.is_none_or(|last| now > last) {
            self.last = Some(now);
        }
        self.tokens >= 1.0
    }

    /// Takes a token that [`TokenBucket::ready`] said is there (does nothing otherwise).
    pub fn take(&mut self) {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
        }
    }

    /// Takes a token at time `now` if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        let ok = self.ready(now);
        if ok {
            self.take();
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn limits_and_refills() {
        let t0 = Instant::now();
        let mut r = RateLimit::new(2);
        assert_eq!(r.allow(t0), Some(0));
        assert_eq!(r.allow(t0), Some(0));
        assert_eq!(r.allow(t0), None);
        assert_eq!(r.allow(t0), None);
        assert_eq!(r.allow(t0 + Duration::from_millis(600)), Some(2));
        assert_eq!(RateLimit::new(0).allow(t0), None);
    }

    #[test]
    fn every_allows_one_event_per_interval() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut r = RateLimit::every(s(10));
        assert_eq!(r.allow(t0), Some(0));
        assert_eq!(r.allow(t0 + s(1)), None);
        assert_eq!(r.allow(t0 + s(9)), None);
        assert_eq!(r.allow(t0 + s(10)), Some(2));
        assert_eq!(r.allow(t0 + s(11)), None);
        // A long quiet spell does not build up a burst.
        assert_eq!(r.allow(t0 + s(3600)), Some(1));
        assert_eq!(r.allow(t0 + s(3601)), None);
    }

    #[test]
    fn token_bucket_burst_rate_and_look_before_take() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 3.0);
        assert!((0..3).all(|_| b.try_take(t0)));
        assert!(!b.try_take(t0));
        // Looking does not take.
        let t1 = t0 + Duration::from_millis(100);
        assert!(b.ready(t1) && b.ready(t1));
        b.take();
        assert!(!b.ready(t1));
        // Refill stops at the burst; a clock that steps back adds nothing.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| b.try_take(t2)).count(), 3);
        assert!(!b.try_take(t1));
        assert!(!b.try_take(t2));
        // 1,000 events at 100/s for 10 s through 10/s, burst 3: 3 + 10 * 10.
        let mut b = TokenBucket::new(10.0, 3.0);
        let n = (0..1000)
            .filter(|i| b.try_take(t0 + Duration::from_millis(10 * i)))
            .count();
        assert!((102..=103).contains(&n), "{n}");
        // Rate 0: the burst, then nothing.
        let mut z = TokenBucket::new(0.0, 1.0);
        assert!(z.try_take(t0));
        assert!(!z.try_take(t2));
    }
}
