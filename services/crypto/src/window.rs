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

    /// The window's size in packets.
    pub fn size(&self) -> u32 {
        self.size as u32
    }

    /// The highest sequence number accepted so far (0 before the first).
    pub fn top(&self) -> u64 {
        self.top
    }

    /// The same window with room for `size` packets. Nothing seen before is forgotten:
    /// every number at or below the top counts as seen, so a resize never reopens a replay.
    pub fn resized(&self, size: u32) -> ReplayWindow {
        let mut w = ReplayWindow::new(size);
        w.top = self.top;
        if self.top > 0 {
            w.bits.iter_mut().for_each(|b| *b = u64::MAX);
        }
        w
    }

    /// This (new) window resumed after a restart at the edge `top` read from disk: every
    /// number at or below it counts as seen, as in [`resized`](Self::resized).
    pub fn resumed(mut self, top: u64) -> ReplayWindow {
        self.top = top;
        let fill = if top > 0 { u64::MAX } else { 0 };
        self.bits.iter_mut().for_each(|b| *b = fill);
        self
    }

    /// The full 64-bit sequence number of a packet carrying `low`, its low 32 bits, with
    /// extended sequence numbers (RFC 4303 appendix A2.2): the candidate nearest the window.
    pub fn infer_esn(&self, low: u32) -> u64 {
        let w = self.size;
        let (th, tl) = (self.top >> 32, self.top & 0xffff_ffff);
        let low = low as u64;
        let hi = if tl >= w - 1 {
            // The window lies within one 2^32 subspace.
            if low >= tl + 1 - w { th } else { th + 1 }
        } else {
            // The window spans two subspaces: its bottom is near the end of the previous one.
            let bl = (tl + (1 << 32) + 1 - w) & 0xffff_ffff;
            // Before the first subspace there is nothing: then it lies ahead in this one.
            if low >= bl { th.saturating_sub(1) } else { th }
        };
        (hi << 32) | low
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
        // Resizing forgets nothing: an old number stays refused.
        let r = w.resized(128);
        assert_eq!(r.check(150), Err(Replay::Duplicate));
        assert_eq!(r.check(201), Ok(()));
        // Resumed after a restart: nothing up to the edge on disk is accepted again.
        let r = ReplayWindow::new(64).resumed(500);
        assert_eq!(r.check(500), Err(Replay::Duplicate));
        assert_eq!(r.check(437), Err(Replay::Duplicate));
        assert_eq!(r.check(10), Err(Replay::TooOld));
        assert_eq!(r.check(501), Ok(()));
        assert_eq!(ReplayWindow::new(64).resumed(0).check(1), Ok(()));
        let mut big = ReplayWindow::new(1000);
        big.update(5000);
        assert_eq!(big.check(4000), Ok(()));
        assert_eq!(big.check(3900), Err(Replay::TooOld));
    }

    #[test]
    fn esn_inference_across_the_2_pow_32_boundary() {
        let mut w = ReplayWindow::new(64);
        assert_eq!(w.infer_esn(1), 1, "first packets");
        // Inside one subspace: numbers ahead stay in it, a small low wraps to the next.
        w.update(0x1_0000_1000);
        assert_eq!(w.infer_esn(0x1010), 0x1_0000_1010);
        assert_eq!(w.infer_esn(0x0fd0), 0x1_0000_0fd0);
        assert_eq!(w.infer_esn(5), 0x2_0000_0005, "far behind: next subspace");
        // Near the end of a subspace the next packets wrap.
        let mut e = ReplayWindow::new(64);
        e.update(0xffff_fff0);
        assert_eq!(e.infer_esn(0xffff_fffa), 0xffff_fffa);
        assert_eq!(e.infer_esn(3), 0x1_0000_0003);
        // Just after the wrap, the window spans both: late ones belong to the old subspace.
        e.update(0x1_0000_0003);
        assert_eq!(e.infer_esn(0xffff_fff8), 0xffff_fff8);
        assert_eq!(e.check(0xffff_fff8), Ok(()));
        assert_eq!(e.infer_esn(7), 0x1_0000_0007);
        // At the very start the spanning case has no previous subspace.
        let mut s = ReplayWindow::new(64);
        s.update(3);
        assert_eq!(s.infer_esn(0xffff_fff0), 0xffff_fff0);
    }
}
