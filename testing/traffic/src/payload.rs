//! Deterministic payloads of a chosen compressibility, so a compression relay can be fed
//! traffic whose DEFLATE/LZ4 output size is known in advance.

/// Text repeated in the compressible part: short, so that even a small datagram's
/// compressible tail costs only one copy of it plus back-references.
const PHRASE: &[u8] = b"relayd payload. ";

/// A byte pattern of `size` bytes whose DEFLATE/LZ4-compressed size is about
/// `ratio * size`.
///
/// Construction: the first `round(ratio * size)` bytes come from a SplitMix64 generator
/// seeded with `seed` (uniform bytes, which no compressor can shrink); the rest repeats the
/// 16-byte phrase `"relayd payload. "`. A compressor therefore emits the random prefix as
/// literals (plus ~1% framing) and the tail as one literal copy of the phrase followed by
/// back-references (a few bytes per 258 bytes with DEFLATE, one per 255 with LZ4). So:
///
/// - `ratio = 1.0`: random bytes, incompressible;
/// - `ratio = 0.5`: half random, half repeated text, compresses to roughly half;
/// - `ratio = 0.95`: mostly random with a small compressible tail;
/// - `ratio = 0.0`: only text, compresses to a few percent.
///
/// The achieved ratio is above `ratio` by a fixed overhead of some tens of bytes (the one
/// phrase copy, stream framing), and DEFLATE's fixed Huffman code spends ~8.4 bits per
/// random byte, so small payloads compress less than asked. Measured with zlib level 6:
/// 8000 bytes at 0.5 / 0.95 give 0.51 / 0.96; 1400 bytes give 0.55 / 1.0 (no gain); with
/// the `lz4` tool, 1400 bytes at 0.5 / 0.9 give 0.58 / 0.96 including its ~15-byte frame. The random part is contiguous rather than
/// interleaved because interleaving would cost a back-reference per chunk. The same
/// `(size, ratio, seed)` always gives the same bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    bytes: Vec<u8>,
    random_len: usize,
}

impl Payload {
    /// Builds the pattern; `ratio` is clamped to `0.0..=1.0` (NaN counts as 1.0).
    pub fn new(size: usize, ratio: f64, seed: u64) -> Payload {
        let ratio = if ratio.is_nan() {
            1.0
        } else {
            ratio.clamp(0.0, 1.0)
        };
        let random_len = ((ratio * size as f64).round() as usize).min(size);
        let mut bytes = Vec::with_capacity(size);
        let mut rng = SplitMix64(seed);
        while bytes.len() < random_len {
            let word = rng.next().to_le_bytes();
            let take = (random_len - bytes.len()).min(8);
            bytes.extend_from_slice(&word[..take]);
        }
        bytes.extend(PHRASE.iter().copied().cycle().take(size - random_len));
        Payload { bytes, random_len }
    }

    /// The payload bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The payload bytes, by value.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True for a zero-length payload.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Length of the random (incompressible) prefix; the rest is repeated text.
    pub fn random_len(&self) -> usize {
        self.random_len
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough that its output has
/// full byte entropy; cryptographic quality is not needed here.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Shannon entropy in bits per byte.
    fn entropy(b: &[u8]) -> f64 {
        let mut counts = [0u64; 256];
        for &x in b {
            counts[x as usize] += 1;
        }
        let n = b.len() as f64;
        counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                let p = c as f64 / n;
                -p * p.log2()
            })
            .sum()
    }

    /// Fraction of positions whose next 4 bytes already occurred earlier: a crude stand-in
    /// for what an LZ compressor can replace by back-references.
    fn lz_matchable(b: &[u8]) -> f64 {
        let mut seen = HashSet::new();
        let mut hits = 0;
        for w in b.windows(4) {
            if !seen.insert(<[u8; 4]>::try_from(w).unwrap()) {
                hits += 1;
            }
        }
        hits as f64 / b.len().max(1) as f64
    }

    #[test]
    fn deterministic_and_sized() {
        for size in [0, 1, 7, 16, 100, 1400, 9000] {
            for ratio in [0.0, 0.3, 0.5, 0.95, 1.0] {
                let a = Payload::new(size, ratio, 42);
                assert_eq!(a.len(), size);
                assert_eq!(a, Payload::new(size, ratio, 42));
                assert_eq!(a.random_len(), (ratio * size as f64).round() as usize);
            }
        }
        assert_ne!(Payload::new(64, 1.0, 1), Payload::new(64, 1.0, 2));
        assert_eq!(Payload::new(10, 7.0, 1).random_len(), 10);
        assert_eq!(Payload::new(10, -1.0, 1).random_len(), 0);
        assert_eq!(Payload::new(10, f64::NAN, 1).random_len(), 10);
    }

    #[test]
    fn ratio_one_is_high_entropy() {
        let p = Payload::new(65536, 1.0, 7);
        assert!(entropy(p.bytes()) > 7.99, "{}", entropy(p.bytes()));
        assert!(lz_matchable(p.bytes()) < 0.02);
    }

    #[test]
    fn compressible_share_tracks_ratio() {
        for ratio in [0.0, 0.25, 0.5, 0.75, 0.95] {
            let p = Payload::new(8192, ratio, 3);
            let matchable = lz_matchable(p.bytes());
            let expected = 1.0 - ratio;
            assert!(
                (matchable - expected).abs() < 0.03,
                "ratio {ratio}: matchable {matchable}"
            );
        }
        let half = Payload::new(4096, 0.5, 9);
        let (random, text) = half.bytes().split_at(half.random_len());
        assert!(entropy(random) > 7.9);
        assert!(entropy(text) < 4.0);
        assert!(text.chunks(PHRASE.len()).all(|c| PHRASE.starts_with(c)));
    }
}
