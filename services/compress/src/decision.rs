//! The paper's decision (seed 003, section 5.2): compress a packet only if
//! `W >= C - (1 - R) * S / B`, with online estimates of C and R.

/// Moving averages of compression time C and ratio R for one algorithm, or fixed values.
#[derive(Debug, Clone, Copy)]
pub struct Estimate {
    /// Compression time per packet, seconds.
    pub c: f64,
    /// Compression ratio: compressed size (with the IPComp header) / original size.
    pub r: f64,
    /// Keep the configured values (the paper's setting) instead of measuring.
    pub fixed: bool,
    /// Measurements folded in so far (the first ones count fully: see `update`).
    pub samples: u32,
}

/// The moving averages weigh about the last `WINDOW` compressions.
const WINDOW: u32 = 32;

impl Estimate {
    /// Folds in one measured compression: `c` seconds, ratio `r` (1.0 if no gain).
    #[inline]
    pub fn update(&mut self, c: f64, r: f64) {
        if !self.fixed {
            // A plain mean over the first WINDOW samples, then an exponential average:
            // the configured start values are replaced by the first measurement at once
            // instead of fading out over hundreds of packets.
            self.samples = self.samples.saturating_add(1);
            let alpha = 1.0 / self.samples.min(WINDOW) as f64;
            self.c += alpha * (c - self.c);
            self.r += alpha * (r.min(1.0) - self.r);
        }
    }
}

/// True if compressing a packet of `s` bytes pays: its expected wait `w` (seconds) in the
/// egress queue covers the compression time less the transmission time it saves on a link
/// of `b` bytes per second. With a fast CPU (C below (1 - R) S / B) this holds even on an
/// empty queue; with the paper's C = 20 us it needs a queue.
#[inline]
pub fn should_compress(w: f64, est: &Estimate, s: f64, b: f64) -> bool {
    w >= est.c - (1.0 - est.r) * s / b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_numbers() {
        // C = 20 us, R = 0.95, S = 1500 B, B = 100 Mb/s = 12.5 MB/s:
        // (1 - R) S / B = 75 B / 12.5 MB/s = 6 us, so compress when W >= 14 us.
        let est = Estimate {
            c: 20e-6,
            r: 0.95,
            fixed: true,
            samples: 0,
        };
        let b = 12.5e6;
        assert!(!should_compress(0.0, &est, 1500.0, b));
        assert!(!should_compress(13e-6, &est, 1500.0, b));
        assert!(should_compress(14.5e-6, &est, 1500.0, b));
        // A fast CPU (C = 1 us): compressing pays with an empty queue.
        let fast = Estimate {
            c: 1e-6,
            r: 0.95,
            fixed: true,
            samples: 0,
        };
        assert!(should_compress(0.0, &fast, 1500.0, b));
        // Incompressible data (R = 1): only a wait longer than C justifies trying.
        let incompressible = Estimate {
            c: 1e-6,
            r: 1.0,
            fixed: true,
            samples: 0,
        };
        assert!(!should_compress(0.0, &incompressible, 1500.0, b));
    }

    #[test]
    fn online_estimates_move_and_fixed_ones_do_not() {
        let mut e = Estimate {
            c: 20e-6,
            r: 0.95,
            fixed: false,
            samples: 0,
        };
        e.update(2e-6, 0.5);
        assert!(
            (e.c - 2e-6).abs() < 1e-12 && e.r == 0.5,
            "the first measurement replaces the start values: {e:?}"
        );
        for _ in 0..500 {
            e.update(1e-6, 0.5);
        }
        assert!(
            (e.c - 1e-6).abs() < 1e-7 && (e.r - 0.5).abs() < 0.01,
            "{e:?}"
        );
        let mut f = Estimate {
            c: 20e-6,
            r: 0.95,
            fixed: true,
            samples: 0,
        };
        f.update(1e-6, 0.5);
        assert_eq!((f.c, f.r), (20e-6, 0.95));
    }
}
