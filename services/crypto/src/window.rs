//! The anti-replay window of RFC 4303 section 3.4.3: accept each sequence number once,
//! and none older than the window. Checked before the ICV, updated only after it.

/// Why a sequence number is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Seen already.
    Duplicate,
    /// Left of the window.
    TooOld,
}

/// A sliding window of `size` sequence numbers below the highest seen.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    size: u64,
    top: u64,
    bits: Vec<u64>,
}

impl ReplayWindow {
    /// A window of `size` packets (rounded up to a multiple of 64).
    pub fn new(size: u32) -> ReplayWindow {
        let words = (size.max(1) as usize).div_ceil(64);
        ReplayWindow {
            size: words as u64 * 64,
            top: 0,
            bits: vec![0; words],
        }
    }

    fn bit(&self, seq: u64) -> (usize, u64) {
        let i = (seq % self.size) as usize;
        (i / 64, 1u64 << (i % 64))
    }

    /// Whether `seq` may be accepted (nothing is changed).
    pub fn check(&self, seq: u64) -> Result<(), Replay> {
        if seq == 0 {
            return Err(Replay::TooOld); // RFC 4303: the first packet has number 1
        }
        if seq > self.top {
            return Ok(());
        }
        if self.top - seq >= self.size {
            return Err(Replay::TooOld);
        }
        let (w, m) = self.bit(seq);
        if self.bits[w] & m != 0 {
            Err(Replay::Duplicate)
        } else {
            Ok(())
        }
    }

    /// Records `seq` as received (after its ICV verified).
    pub fn update(&mut self, seq: u64) {
        if seq > self.top {
            let shift = seq - self.top;
            if shift >= self.size {
                self.bits.iter_mut().for_each(|w| *w = 0);
            } else {
                for s in self.top + 1..=seq {
                    let (w, m) = self.bit(s);
                    self.bits[w] &= !m;
                }
            }
            self.top = seq;
        }
        let (w, m) = self.bit(seq);
        self.bits[w] |= m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_old_and_reordered() {
        let mut w = ReplayWindow::new(64);
        for s in [1, 2, 5, 3] {
            assert_eq!(w.check(s), Ok(()));
            w.update(s);
        }
        assert_eq!(w.check(2), Err(Replay::Duplicate));
        assert_eq!(w.check(4), Ok(()));
        w.update(200);
        assert_eq!(w.check(136), Err(Replay::TooOld));
        assert_eq!(w.check(137), Ok(()));
        assert_eq!(w.check(200), Err(Replay::Duplicate));
        assert_eq!(w.check(0), Err(Replay::TooOld));
        let mut big = ReplayWindow::new(1000);
        big.update(5000);
        assert_eq!(big.check(4000), Ok(()));
        assert_eq!(big.check(3900), Err(Replay::TooOld));
    }
}
