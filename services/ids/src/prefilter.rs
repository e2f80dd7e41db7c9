//! The content prefilter: which of a set of patterns occur anywhere in a payload, ASCII
//! case-insensitively.
//!
//! A hashed-anchor design (Wu-Manber / Snort style) rather than an Aho-Corasick automaton,
//! so that the per-packet cost stays nearly flat in the number of patterns: an automaton
//! over thousands of patterns walks thousands of distinct states on ordinary payloads, and
//! each state row is a cache line or more, while here every payload position costs the
//! same few instructions and one probe into a small bitmap.
//!
//! - The payload is first folded to lower case into a scratch buffer (eight bytes at a
//!   time); patterns are stored folded, so every comparison after that is exact.
//! - Each pattern of 4 bytes or more gets one *anchor*: a 4-byte substring at a known
//!   offset, chosen to avoid common bytes and to spread patterns over distinct anchors.
//!   Every occurrence of the pattern contains its anchor at that offset. The anchors are
//!   summarised in a blocked Bloom filter (one 64-bit word per probe, two bits per
//!   anchor, 2^12 to 2^18 bits: it fits the L1 cache) and listed exactly in an
//!   open-addressing table. Per payload position the folded 4-gram is hashed and tested
//!   against the filter; only on a hit is the table consulted and each pattern with that
//!   anchor compared in place.
//! - Patterns of 2 or 3 bytes are found the same way through a direct 65,536-bit table of
//!   their first two bytes; single bytes with `memchr` (few) or a byte-presence set (many).
//!
//! The answer is exact (no false candidates): every pattern reported occurs, and every
//! pattern that occurs is reported once per scan. Nothing is allocated per scan once the
//! [`Scratch`] buffer has grown to the largest payload.

use std::collections::HashMap;

/// Smallest Bloom filter, in 64-bit words (2^12 bits, 512 bytes).
const BLOOM_MIN_WORDS_LOG2: u32 = 6;
/// Largest Bloom filter, in 64-bit words (2^18 bits, 32 KiB: L1-sized). Must stay at most
/// 12 so that the word index (the top bits of the hash, from bit 52) and the two
/// bit positions (bits 38-49) do not overlap.
const BLOOM_MAX_WORDS_LOG2: u32 = 12;
/// The filter word of a hash is its top bits (masked to the filter's size).
const BLOOM_WORD_SHIFT: u32 = 64 - BLOOM_MAX_WORDS_LOG2;
/// Bloom filter bits per anchor (before clamping): about 0.5 % false positives at k = 2.
const BLOOM_BITS_PER_ANCHOR: usize = 24;
/// Up to this many single-byte patterns are looked for with one `memchr` each.
const MEMCHR_MAX: usize = 8;

/// Multiplicative hash of a folded 4-gram (or 2-gram): the high bits are well mixed.
#[inline(always)]
fn hash(key: u32) -> u64 {
    u64::from(key).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The two filter bits of a hash, as a mask on one word.
#[inline(always)]
fn bloom_mask(h: u64) -> u64 {
    (1u64 << ((h >> 38) & 63)) | (1u64 << ((h >> 44) & 63))
}

/// ASCII lower-case of eight bytes at once: `A-Z` gain 0x20, every other byte (including
/// non-ASCII ones) is left alone.
#[inline(always)]
fn fold8(x: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let b = x & LOW7;
    // Per byte, no carry across bytes (b <= 0x7f): the high bit says b >= 'A' (0x41)
    // and b > 'Z' (0x5a) respectively.
    let ge_a = b + 0x3f3f_3f3f_3f3f_3f3f;
    let gt_z = b + 0x2525_2525_2525_2525;
    let upper = ge_a & !gt_z & !x & HIGH;
    x | (upper >> 2)
}

/// Writes the ASCII lower-case of `hay` into `out`, followed by 8 zero bytes (so that
/// a 4-byte load at any payload position stays in bounds).
fn fold_into(hay: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.resize(hay.len() + 8, 0);
    let mut chunks = hay.chunks_exact(8);
    let mut dst = out.chunks_exact_mut(8);
    for (c, d) in (&mut chunks).zip(&mut dst) {
        let x = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        d.copy_from_slice(&fold8(x).to_le_bytes());
    }
    let done = hay.len() - chunks.remainder().len();
    for (d, s) in out[done..].iter_mut().zip(chunks.remainder()) {
        *d = s.to_ascii_lowercase();
    }
}

/// How common a byte is in ordinary traffic (text protocols, binary zeros), higher is
/// more common; anchors are chosen to minimise the sum over their bytes.
fn commonness(b: u8) -> u32 {
    match b {
        0x00 => 12,
        b' ' => 10,
        0xff => 8,
        b'e' | b't' | b'a' | b'o' | b'i' | b'n' | b's' | b'r' | b'h' => 7,
        b'\r' | b'\n' | b'/' | b'.' | b'=' | b':' | b'-' | b'&' | b'?' | b'"' | b',' => 6,
        b'0'..=b'9' => 5,
        b'a'..=b'z' => 5,
        0x01..=0x1f | 0x80..=0xfe => 2,
        _ => 3,
    }
}

/// An exact map from a 32-bit key to a range of entries: open addressing, linear
/// probing, indexed by the top bits of [`hash`].
#[derive(Debug, Default)]
struct Table {
    /// Per slot: key, first entry, end of entries (`lo == hi`: empty slot).
    slots: Vec<(u32, u32, u32)>,
    shift: u32,
}

impl Table {
    /// Builds the table over `(key, entry range)` pairs with distinct keys.
    fn new(groups: &[(u32, u32, u32)]) -> Table {
        let bits = (groups.len() * 2)
            .next_power_of_two()
            .max(2)
            .trailing_zeros();
        let mut slots = vec![(0u32, 0u32, 0u32); 1 << bits];
        let mask = slots.len() - 1;
        for &(key, lo, hi) in groups {
            let mut s = (hash(key) >> (64 - bits)) as usize;
            while slots[s].1 != slots[s].2 {
                s = (s + 1) & mask;
            }
            slots[s] = (key, lo, hi);
        }
        Table {
            slots,
            shift: 64 - bits,
        }
    }

    /// The entry range for `key` (empty if absent); `h` is `hash(key)`.
    #[inline]
    fn get(&self, key: u32, h: u64) -> (usize, usize) {
        let mask = self.slots.len() - 1;
        let mut s = (h >> self.shift) as usize;
        loop {
            let (k, lo, hi) = self.slots[s];
            if lo == hi {
                return (0, 0);
            }
            if k == key {
                return (lo as usize, hi as usize);
            }
            s = (s + 1) & mask;
        }
    }
}

/// One pattern reachable through a table key.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Pattern id.
    id: u32,
    /// Offset of the key in the pattern.
    off: u32,
    /// Pattern length.
    len: u32,
    /// Start of the folded pattern in the arena.
    at: u32,
}

/// The compiled prefilter over a list of patterns (ids are their indices).
#[derive(Debug, Default)]
pub(crate) struct Prefilter {
    npat: usize,
    /// Folded patterns, concatenated.
    arena: Vec<u8>,
    /// Patterns of 4+ bytes: Bloom filter over their anchors.
    bloom: Vec<u64>,
    /// Anchor -> entries in `long`.
    long_table: Table,
    long: Vec<Entry>,
    /// Patterns of 2-3 bytes: bit per folded 2-byte prefix (little-endian u16).
    short_bits: Vec<u64>,
    /// Prefix -> entries in `short`.
    short_table: Table,
    short: Vec<Entry>,
    /// Single-byte patterns: (folded byte, id).
    single: Vec<(u8, u32)>,
    /// Empty patterns (they occur in every payload).
    empty: Vec<u32>,
}

/// Per-thread state for [`Prefilter::scan`]: the folded payload and the generation
/// stamps that report each pattern once.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    folded: Vec<u8>,
    /// Positions that passed the anchor filter.
    hits: Vec<u32>,
    stamp: Vec<u32>,
    generation: u32,
}

impl Scratch {
    /// Starts a scan: a fresh generation, so every pattern can be reported again.
    fn next_generation(&mut self, npat: usize) {
        if self.stamp.len() != npat {
            self.stamp.clear();
            self.stamp.resize(npat, 0);
            self.generation = 0;
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamp.fill(0);
            self.generation = 1;
        }
    }
}

impl Prefilter {
    /// Compiles the prefilter; pattern `i` of `patterns` is reported as id `i`. Case
    /// does not matter (patterns are folded here).
    pub(crate) fn new<P: AsRef<[u8]>>(patterns: &[P]) -> Prefilter {
        let mut pf = Prefilter {
            npat: patterns.len(),
            ..Prefilter::default()
        };
        let mut long: Vec<(u32, Entry)> = Vec::new();
        let mut short: Vec<(u32, Entry)> = Vec::new();
        // Patterns per anchor so far, to spread patterns over distinct anchors.
        let mut load: HashMap<u32, u32> = HashMap::new();
        for (id, p) in patterns.iter().enumerate() {
            let p = p.as_ref().to_ascii_lowercase();
            let (id, at, len) = (id as u32, pf.arena.len() as u32, p.len() as u32);
            match p.len() {
                0 => pf.empty.push(id),
                1 => pf.single.push((p[0], id)),
                2 | 3 => {
                    let key = u32::from(u16::from_le_bytes([p[0], p[1]]));
                    short.push((
                        key,
                        Entry {
                            id,
                            off: 0,
                            len,
                            at,
                        },
                    ));
                }
                _ => {
                    let key_at =
                        |j: usize| u32::from_le_bytes([p[j], p[j + 1], p[j + 2], p[j + 3]]);
                    let off = (0..=p.len() - 4)
                        .min_by_key(|&j| {
                            let bytes: u32 = p[j..j + 4].iter().map(|&b| commonness(b)).sum();
                            let crowd = load.get(&key_at(j)).copied().unwrap_or(0);
                            crowd * 16 + bytes
                        })
                        .expect("a pattern of 4+ bytes has an anchor");
                    let key = key_at(off);
                    *load.entry(key).or_insert(0) += 1;
                    let off = off as u32;
                    long.push((key, Entry { id, off, len, at }));
                }
            }
            pf.arena.extend_from_slice(&p);
        }
        let group = |mut v: Vec<(u32, Entry)>| -> (Table, Vec<Entry>, Vec<u32>) {
            v.sort_by_key(|&(k, e)| (k, e.id));
            let mut groups = Vec::new();
            let mut keys = Vec::new();
            let mut i = 0;
            while i < v.len() {
                let mut j = i;
                while j < v.len() && v[j].0 == v[i].0 {
                    j += 1;
                }
                groups.push((v[i].0, i as u32, j as u32));
                keys.push(v[i].0);
                i = j;
            }
            (
                Table::new(&groups),
                v.into_iter().map(|(_, e)| e).collect(),
                keys,
            )
        };
        let (table, entries, anchors) = group(long);
        pf.long_table = table;
        pf.long = entries;
        let words_log2 = (anchors.len() * BLOOM_BITS_PER_ANCHOR / 64)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(BLOOM_MIN_WORDS_LOG2, BLOOM_MAX_WORDS_LOG2);
        if !anchors.is_empty() {
            pf.bloom = vec![0u64; 1 << words_log2];
            for &k in &anchors {
                let h = hash(k);
                let mask = pf.bloom.len() - 1;
                pf.bloom[(h >> BLOOM_WORD_SHIFT) as usize & mask] |= bloom_mask(h);
            }
        }
        let (table, entries, prefixes) = group(short);
        pf.short_table = table;
        pf.short = entries;
        if !prefixes.is_empty() {
            pf.short_bits = vec![0u64; 1024];
            for &k in &prefixes {
                pf.short_bits[(k >> 6) as usize] |= 1 << (k & 63);
            }
        }
        pf
    }

    /// Size of the anchor Bloom filter in bytes (0 without patterns of 4+ bytes).
    #[cfg(test)]
    pub(crate) fn bloom_bytes(&self) -> usize {
        self.bloom.len() * 8
    }

    /// Calls `found` once with the id of every pattern that occurs in `hay` (ASCII
    /// case-insensitively), in no particular order.
    pub(crate) fn scan(&self, hay: &[u8], s: &mut Scratch, mut found: impl FnMut(u32)) {
        s.next_generation(self.npat);
        for &id in &self.empty {
            found(id);
        }
        if hay.is_empty() {
            return;
        }
        fold_into(hay, &mut s.folded);
        let (f, stamp, generation) = (&s.folded[..], &mut s.stamp[..], s.generation);
        let n = hay.len();
        let mut emit = |e: &Entry, start: usize| {
            let (len, at) = (e.len as usize, e.at as usize);
            if stamp[e.id as usize] != generation
                && start + len <= n
                && f[start..start + len] == self.arena[at..at + len]
            {
                stamp[e.id as usize] = generation;
                found(e.id);
            }
        };
        if !self.bloom.is_empty() && n >= 4 {
            // First pass, branch-free: the positions whose 4-gram passes the filter.
            if s.hits.len() < n {
                s.hits.resize(n, 0);
            }
            let nhits = self.filter_long(&f[..n], &mut s.hits);
            // Second pass: the exact anchors and the patterns behind them.
            for &i in &s.hits[..nhits] {
                let i = i as usize;
                let key = u32::from_le_bytes([f[i], f[i + 1], f[i + 2], f[i + 3]]);
                let (lo, hi) = self.long_table.get(key, hash(key));
                for e in &self.long[lo..hi] {
                    if let Some(start) = i.checked_sub(e.off as usize) {
                        emit(e, start);
                    }
                }
            }
        }
        if !self.short_bits.is_empty() && n >= 2 {
            let bits = &self.short_bits[..];
            for (i, w) in f[..n].windows(2).enumerate() {
                let key = u32::from(u16::from_le_bytes([w[0], w[1]]));
                if bits[(key >> 6) as usize] & (1 << (key & 63)) != 0 {
                    let (lo, hi) = self.short_table.get(key, hash(key));
                    for e in &self.short[lo..hi] {
                        emit(e, i);
                    }
                }
            }
        }
        if !self.single.is_empty() {
            let f = &f[..n];
            if self.single.len() <= MEMCHR_MAX {
                for &(b, id) in &self.single {
                    if memchr::memchr(b, f).is_some() {
                        found(id);
                    }
                }
            } else {
                let mut seen = [0u64; 4];
                for &b in f {
                    seen[usize::from(b >> 6)] |= 1 << (b & 63);
                }
                for &(b, id) in &self.single {
                    if seen[usize::from(b >> 6)] & (1 << (b & 63)) != 0 {
                        found(id);
                    }
                }
            }
        }
    }

    /// Writes to `hits` the positions in `f` whose 4-gram passes the anchor filter and
    /// returns how many there are (`hits` holds at least `f.len()` slots).
    #[inline(never)]
    fn filter_long(&self, f: &[u8], hits: &mut [u32]) -> usize {
        let bloom = &self.bloom[..];
        let mask = bloom.len() - 1;
        let mut nhits = 0;
        for (i, w) in f.windows(4).enumerate() {
            let h = hash(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
            let m = bloom_mask(h);
            let hit = bloom[(h >> BLOOM_WORD_SHIFT) as usize & mask] & m == m;
            hits[nhits] = i as u32;
            nhits += usize::from(hit);
        }
        nhits
    }

    /// A scratch buffer sized for this prefilter.
    pub(crate) fn scratch(&self) -> Scratch {
        Scratch {
            folded: Vec::with_capacity(2048),
            hits: Vec::with_capacity(2048),
            stamp: vec![0; self.npat],
            generation: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Rng;
    use std::collections::BTreeSet;

    /// `len` bytes drawn from `alpha`.
    fn bytes(rng: &mut Rng, len: usize, alpha: &[u8]) -> Vec<u8> {
        (0..len).map(|_| alpha[rng.below(alpha.len())]).collect()
    }

    /// Flips the ASCII case of about half the letters.
    fn recase(rng: &mut Rng, p: &mut [u8]) {
        for b in p {
            if b.is_ascii_alphabetic() && rng.next() & 1 == 1 {
                *b ^= 0x20;
            }
        }
    }

    /// Every pattern searched for with a naive case-insensitive scan.
    fn brute(pats: &[Vec<u8>], hay: &[u8]) -> BTreeSet<u32> {
        let hay = hay.to_ascii_lowercase();
        pats.iter()
            .enumerate()
            .filter(|(_, p)| {
                let p = p.to_ascii_lowercase();
                p.is_empty() || hay.windows(p.len()).any(|w| w == &p[..])
            })
            .map(|(i, _)| i as u32)
            .collect()
    }

    fn scan(pf: &Prefilter, s: &mut Scratch, hay: &[u8]) -> BTreeSet<u32> {
        let mut got = Vec::new();
        pf.scan(hay, s, |id| got.push(id));
        let set: BTreeSet<u32> = got.iter().copied().collect();
        assert_eq!(set.len(), got.len(), "a pattern was reported twice");
        set
    }

    #[test]
    fn fold_matches_ascii_lowercase() {
        let all: Vec<u8> = (0..=255u8).collect();
        let mut out = Vec::new();
        for start in 0..8 {
            let hay = &all[start..];
            fold_into(hay, &mut out);
            assert_eq!(&out[..hay.len()], &hay.to_ascii_lowercase()[..]);
            assert!(out[hay.len()..].iter().all(|&b| b == 0));
        }
        for x in 0..=255u8 {
            let w = u64::from_le_bytes([x, 0x41, 0x5a, 0x40, 0x5b, 0xc1, 0x61, x ^ 0x80]);
            let want = u64::from_le_bytes(w.to_le_bytes().map(|b| b.to_ascii_lowercase()));
            assert_eq!(fold8(w), want, "{x:#x}");
        }
    }

    #[test]
    fn small_cases() {
        let pats: Vec<Vec<u8>> = [
            &b"abcd"[..],
            b"ABCDE",
            b"bcd",
            b"cd",
            b"d",
            b"xyzzy",
            b"\x00\xff\x00\xff",
            b"",
            b"Abcd",
        ]
        .iter()
        .map(|p| p.to_vec())
        .collect();
        let pf = Prefilter::new(&pats);
        let mut s = pf.scratch();
        for hay in [
            &b"abcd"[..],
            b"xABCDEx",
            b"d",
            b"",
            b"xyzz",
            b"XYZZY",
            b"\x00\xff\x00\xff\x00",
            b"cdcdcd",
        ] {
            assert_eq!(scan(&pf, &mut s, hay), brute(&pats, hay), "{hay:?}");
        }
    }

    /// Random pattern sets of 1..20,000 patterns of 1..32 bytes against random payloads,
    /// with planted occurrences (at both edges, overlapping, in random case).
    #[test]
    fn equals_brute_force() {
        let mut rng = Rng(0x5eed_0123_4567_89ab);
        let alphabets: [&[u8]; 4] = [
            b"aAbB",
            b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 /.-",
            &[0, 1, 0xff, b'a', b'A', b'z', b'Z', 0xc1, 0xe1, b'@', b'['],
            &(0..=255u8).collect::<Vec<u8>>(),
        ];
        let sizes = [1usize, 2, 3, 7, 20, 100, 1000, 5000, 20_000];
        for (round, &npat) in sizes.iter().cycle().take(sizes.len() * 3).enumerate() {
            let alpha = alphabets[round % alphabets.len()];
            let maxlen = [32usize, 4, 8, 32][(round / 2) % 4];
            let pats: Vec<Vec<u8>> = (0..npat)
                .map(|_| {
                    let len = 1 + rng.below(maxlen);
                    bytes(&mut rng, len, alpha)
                })
                .collect();
            let pf = Prefilter::new(&pats);
            assert_eq!(pf.npat, npat);
            let mut s = pf.scratch();
            // Fewer payloads for big sets: the brute force is slow in debug builds.
            let payloads = if npat >= 5000 { 3 } else { 12 };
            for k in 0..payloads {
                let len = [0usize, 1, 3, 4, 5, 40, 300, 1500][rng.below(8)];
                let mut hay = bytes(&mut rng, len, alpha);
                // Plant a few patterns: at the start, at the end, anywhere, overlapping.
                for j in 0..(k % 5) {
                    let p = &pats[rng.below(npat)];
                    if p.len() > hay.len() {
                        continue;
                    }
                    let at = match j {
                        0 => 0,
                        1 => hay.len() - p.len(),
                        _ => rng.below(hay.len() - p.len() + 1),
                    };
                    let mut q = p.clone();
                    recase(&mut rng, &mut q);
                    hay[at..at + q.len()].copy_from_slice(&q);
                }
                assert_eq!(
                    scan(&pf, &mut s, &hay),
                    brute(&pats, &hay),
                    "round {round}, {npat} patterns, payload {hay:?}"
                );
            }
        }
    }

    #[test]
    fn overlapping_and_repeated() {
        // Every suffix and prefix of one string, and self-overlapping patterns.
        let base = b"aaaabaaaabaaaXYZaaa";
        let mut pats: Vec<Vec<u8>> = Vec::new();
        for i in 0..base.len() {
            pats.push(base[i..].to_vec());
            pats.push(base[..=i].to_vec());
            pats.push(base[i..(i + 5).min(base.len())].to_vec());
        }
        pats.push(b"aaaaa".to_vec());
        pats.push(b"AAAAB".to_vec());
        let pf = Prefilter::new(&pats);
        let mut s = pf.scratch();
        for hay in [
            &base[..],
            b"AAAABAAAAB",
            b"aaaaaaaaaa",
            b"xyzaaa",
            b"baaaXyZ",
        ] {
            // Twice: the generation stamps must reset between scans.
            assert_eq!(scan(&pf, &mut s, hay), brute(&pats, hay));
            assert_eq!(scan(&pf, &mut s, hay), brute(&pats, hay));
        }
    }

    #[test]
    fn many_single_bytes_and_generation_wrap() {
        let pats: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let pf = Prefilter::new(&pats);
        let mut s = pf.scratch();
        s.generation = u32::MAX - 1;
        for _ in 0..4 {
            assert_eq!(
                scan(&pf, &mut s, b"Hello, World"),
                brute(&pats, b"Hello, World")
            );
        }
    }

    #[test]
    fn bloom_stays_small() {
        let mut rng = Rng(7);
        let pats: Vec<Vec<u8>> = (0..10_000)
            .map(|_| bytes(&mut rng, 12, b"abcdefghij"))
            .collect();
        let pf = Prefilter::new(&pats);
        assert!(pf.bloom_bytes() <= 32 * 1024);
        assert!(Prefilter::new(&[b"abcd"]).bloom_bytes() <= 512);
    }
}
