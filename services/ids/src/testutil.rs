//! What the crate's unit tests share: a small deterministic generator for their random and
//! property tests (xorshift64*), so that every failure reproduces from its seed.

/// xorshift64*: deterministic pseudo-random numbers from a non-zero seed.
#[derive(Debug, Clone)]
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// The next 64 bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 for `n` = 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// A byte.
    pub(crate) fn byte(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }
}
