//! A token bucket for log lines, so that a flood of odd packets cannot flood the log.

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
}
