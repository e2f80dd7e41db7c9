//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Every service that rewrites a header fixes the checksums it touches with these helpers;
//! they never panic on any input length.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Adds `data` to a running ones'-complement sum (not yet folded).
///
/// Adds the data as big-endian 32-bit words into a plain 64-bit accumulator: a 32-bit
/// word `hi << 16 | lo` is congruent to `hi + lo` modulo 0xffff, so the folded result is
/// the textbook 16-bit loop's, and without an end-around carry per word the loop has no
/// dependency chain and vectorizes (the IDS judges every TCP and UDP checksum it sees:
/// this halved the sum's cost on full-size packets). No carry is lost: 2^32 words would
/// be needed to overflow the accumulator.
#[inline]
pub fn sum(acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(4);
    let mut wide: u64 = 0;
    for c in &mut chunks {
        wide += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let mut acc = add_u64(acc, wide);
    let rest = chunks.remainder();
    let mut i = 0;
    while i + 1 < rest.len() {
        acc = add_u64(acc, u16::from_be_bytes([rest[i], rest[i + 1]]) as u64);
        i += 2;
    }
    if i < rest.len() {
        acc = add_u64(acc, (rest[i] as u64) << 8);
    }
    acc
}

#[inline]
fn add_u64(acc: u64, v: u64) -> u64 {
    let (s, carry) = acc.overflowing_add(v);
    s + carry as u64
}

/// Folds a running sum to 16 bits (not complemented).
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The checksum field value for `data`: the complemented folded sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(0, data))
}

/// The running sum of the IPv4 pseudo header (RFC 768 / RFC 793).
#[inline]
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u32) -> u64 {
    let mut acc = sum(0, &src.octets());
    acc = sum(acc, &dst.octets());
    add_u64(add_u64(acc, proto as u64), len as u64)
}

/// The running sum of the IPv6 pseudo header (RFC 8200 section 8.1).
#[inline]
pub fn pseudo_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u64 {
    let mut acc = sum(0, &src.octets());
    acc = sum(acc, &dst.octets());
    add_u64(add_u64(acc, next_header as u64), len as u64)
}

/// Updates checksum `old_sum` after a 16-bit field changed from `old` to `new` (RFC 1624 eq. 3).
#[inline]
pub fn update16(old_sum: u16, old: u16, new: u16) -> u16 {
    let acc = (!old_sum) as u64 + (!old) as u64 + new as u64;
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &data)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_lengths_match_the_16_bit_loop() {
        for len in (0..40usize).chain([1499, 1500, 9000, 65535]) {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8 | 0xf0).collect();
            let mut slow: u64 = 0;
            for c in data.chunks(2) {
                let w = if c.len() == 2 {
                    u16::from_be_bytes([c[0], c[1]])
                } else {
                    (c[0] as u16) << 8
                };
                slow += w as u64;
            }
            while slow > 0xffff {
                slow = (slow & 0xffff) + (slow >> 16);
            }
            assert_eq!(fold(sum(0, &data)), slow as u16, "len {len}");
            // A running sum carried in (a pseudo header) too.
            let pseudo = 0xffff_fffe_u64;
            let mut with = slow + pseudo;
            while with > 0xffff {
                with = (with & 0xffff) + (with >> 16);
            }
            assert_eq!(fold(sum(pseudo, &data)), with as u16, "len {len}");
        }
    }

    #[test]
    fn incremental_update_equals_recompute() {
        let mut data = [
            0x45u8, 0, 0, 84, 0x12, 0x34, 0x40, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = checksum(&data);
        data[10..12].copy_from_slice(&c.to_be_bytes());
        // Decrement TTL: the word holding TTL and protocol changes.
        let old = u16::from_be_bytes([data[8], data[9]]);
        data[8] -= 1;
        let new = u16::from_be_bytes([data[8], data[9]]);
        let upd = update16(c, old, new);
        data[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(upd, checksum(&data));
    }
}
