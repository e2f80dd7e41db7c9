//! ESP header view (RFC 4303 section 2): the security parameter index, the sequence
//! number, and the protected payload after them (IV, ciphertext with its trailer, ICV:
//! their lengths depend on the SA's suite, so the view leaves them to the crypto code).
//!
//! [`EspPacket::new_checked`] fails, and only fails, on a buffer shorter than 8 bytes
//! ([`Malformed::Truncated`]); after it no getter or setter panics. The SPI is not
//! checked against the reserved values (0 to 255): an unknown SPI is the SA lookup's to
//! refuse.

use super::Malformed;
use super::ipv4::be32;

mod field {
    use std::ops::Range;
    pub(super) const SPI: Range<usize> = 0..4;
    pub(super) const SEQ: Range<usize> = 4..8;
}

/// The ESP header length: SPI and sequence number.
pub const HEADER_LEN: usize = 8;

/// A read/write view of an ESP packet (from the SPI to the end of the ICV).
#[derive(Debug, Clone, Copy)]
pub struct EspPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EspPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        EspPacket { buffer }
    }

    /// Wraps a buffer after checking the header fits.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the 8-byte header.
    pub fn check_len(&self) -> Result<(), Malformed> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The security parameter index naming the SA.
    pub fn spi(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SPI)
    }

    /// The sequence number (the low 32 bits with extended sequence numbers, RFC 4303 2.2.1).
    pub fn seq_no(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ)
    }

    /// What follows the header: IV, ciphertext and trailer, ICV.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN.min(b.len())..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EspPacket<T> {
    /// Sets the SPI.
    pub fn set_spi(&mut self, v: u32) {
        self.buffer.as_mut()[field::SPI].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the sequence number.
    pub fn set_seq_no(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }

    /// What follows the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let start = HEADER_LEN.min(b.len());
        &mut b[start..]
    }
}

/// The high-level form of an ESP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EspRepr {
    /// The security parameter index.
    pub spi: u32,
    /// The sequence number (low 32 bits).
    pub seq_no: u32,
}

impl EspRepr {
    /// Reads the header (checking its length).
    pub fn parse<T: AsRef<[u8]>>(p: &EspPacket<T>) -> Result<EspRepr, Malformed> {
        p.check_len()?;
        Ok(EspRepr {
            spi: p.spi(),
            seq_no: p.seq_no(),
        })
    }

    /// The header length: 8.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `p`.
    ///
    /// # Panics
    /// If `p`'s buffer is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut EspPacket<T>) {
        p.set_spi(self.spi);
        p.set_seq_no(self.seq_no);
    }
}

/// The ESP trailer's fixed part: the pad length and next header bytes.
pub const TRAILER_LEN: usize = 2;

/// The ESP trailer (RFC 4303 section 2.4) at the end of the plaintext: padding 1, 2, 3,
/// ..., its length, and the protocol of the payload in front of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EspTrailer {
    /// Bytes of padding.
    pub pad_len: u8,
    /// The protocol of the protected payload (a transport, or 4 / 41 in tunnel mode).
    pub next_header: u8,
}

impl EspTrailer {
    /// The trailer for `payload_len` bytes of `next_header` padded to a multiple of
    /// `block` bytes (the cipher's block, 4 at least for alignment).
    ///
    /// # Panics
    /// If `block` is 0 or above 256 (no cipher has such a block).
    pub fn for_payload(payload_len: usize, block: usize, next_header: u8) -> EspTrailer {
        let padded = (payload_len + TRAILER_LEN).next_multiple_of(block);
        EspTrailer {
            pad_len: (padded - payload_len - TRAILER_LEN) as u8,
            next_header,
        }
    }

    /// Bytes the trailer takes: its padding and the two fixed bytes.
    pub const fn len(&self) -> usize {
        self.pad_len as usize + TRAILER_LEN
    }

    /// Always false: a trailer is never empty (for clippy's `len_without_is_empty`).
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// Reads the trailer at the end of a decrypted `body`: the length of the payload in
    /// front of the padding, and the trailer. [`Malformed::Truncated`] if the body is
    /// shorter than the trailer or its padding; [`Malformed::BadHeaderLen`] if the
    /// padding is not 1, 2, 3, ...
    pub fn parse(body: &[u8]) -> Result<(usize, EspTrailer), Malformed> {
        let [rest @ .., pad, next] = body else {
            return Err(Malformed::Truncated);
        };
        let plain = rest
            .len()
            .checked_sub(*pad as usize)
            .ok_or(Malformed::Truncated)?;
        let padding = rest.get(plain..).ok_or(Malformed::Truncated)?;
        if !padding
            .iter()
            .enumerate()
            .all(|(k, &b)| b == (k as u8).wrapping_add(1))
        {
            return Err(Malformed::BadHeaderLen);
        }
        Ok((
            plain,
            EspTrailer {
                pad_len: *pad,
                next_header: *next,
            },
        ))
    }

    /// Writes the trailer into `buf` (the bytes right after the payload).
    ///
    /// # Panics
    /// If `buf` is shorter than [`EspTrailer::len`].
    pub fn emit(&self, buf: &mut [u8]) {
        let pad = self.pad_len as usize;
        for (i, b) in buf[..pad].iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        buf[pad] = self.pad_len;
        buf[pad + 1] = self.next_header;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An ESP header (SPI 0x1001, sequence number 5) and the first bytes of an IV.
    const ESP: [u8; 12] = [0, 0, 0x10, 0x01, 0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef];

    #[test]
    fn parse_emit_round_trip() {
        let p = EspPacket::new_checked(&ESP[..]).unwrap();
        let r = EspRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            EspRepr {
                spi: 0x1001,
                seq_no: 5
            }
        );
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        let mut out = [0u8; 12];
        let mut q = EspPacket::new_unchecked(&mut out[..]);
        r.emit(&mut q);
        q.payload_mut().copy_from_slice(&ESP[8..]);
        assert_eq!(out, ESP);
        assert_eq!(r.header_len(), 8);
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut b = ESP;
        let mut p = EspPacket::new_unchecked(&mut b[..]);
        p.set_seq_no(0xffff_fffe);
        assert_eq!((p.spi(), p.seq_no()), (0x1001, 0xffff_fffe));
        p.set_spi(0x8000_0001);
        assert_eq!(&b[..8], &[0x80, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(&b[8..], &ESP[8..]);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            EspPacket::new_checked(&ESP[..7]).unwrap_err(),
            Malformed::Truncated
        );
        assert_eq!(
            EspRepr::parse(&EspPacket::new_unchecked(&ESP[..4])),
            Err(Malformed::Truncated)
        );
        assert!(
            EspPacket::new_checked(&ESP[..8])
                .unwrap()
                .payload()
                .is_empty()
        );
    }

    #[test]
    fn trailer_round_trip() {
        let t = EspTrailer::for_payload(13, 16, 4);
        assert_eq!((t.pad_len, t.len()), (1, 3));
        let mut b = vec![0xaa; 13 + t.len()];
        t.emit(&mut b[13..]);
        assert_eq!(EspTrailer::parse(&b), Ok((13, t)));
        b[13] = 2;
        assert_eq!(EspTrailer::parse(&b), Err(Malformed::BadHeaderLen));
        assert_eq!(EspTrailer::parse(&[5, 4]), Err(Malformed::Truncated));
        assert_eq!(EspTrailer::parse(&[4]), Err(Malformed::Truncated));
    }
}
