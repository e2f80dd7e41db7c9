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
}
