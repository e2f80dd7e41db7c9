//! IPComp header view (RFC 3173 section 3): next header, flags, and the compression
//! parameter index (CPI) naming the algorithm.
//!
//! [`IpcompPacket::new_checked`] fails, and only fails, on a buffer shorter than 4 bytes
//! ([`Malformed::Truncated`]); after it no getter or setter panics. The CPI is not checked:
//! an unknown one is the decompressor's to refuse.

use super::Malformed;
use super::ipv4::be16;

/// The IPComp header length.
pub const HEADER_LEN: usize = 4;

/// Well-known CPIs (RFC 3173 section 3.3, IANA) and relayd's private ones (61440-65535).
pub mod cpi {
    /// DEFLATE, RFC 2394 (raw deflate, no zlib header).
    pub const DEFLATE: u16 = 2;
    /// LZO1X-1, relayd's private CPI (documented in docs/compression.md).
    pub const LZO: u16 = 61440;
    /// LZ4 block format, relayd's private CPI.
    pub const LZ4: u16 = 61441;
}

/// A read/write view of an IPComp header and the compressed payload after it.
#[derive(Debug, Clone, Copy)]
pub struct IpcompPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IpcompPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        IpcompPacket { buffer }
    }

    /// Wraps a buffer after checking the header fits.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// The protocol of the compressed payload once decompressed.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Flags (reserved: zero on send, ignored on receipt).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// The compression parameter index.
    pub fn cpi(&self) -> u16 {
        be16(self.buffer.as_ref(), 2..4)
    }

    /// The compressed data.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IpcompPacket<T> {
    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    /// Sets the compression parameter index.
    pub fn set_cpi(&mut self, v: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&v.to_be_bytes());
    }

    /// Writes the whole header (flags zero).
    pub fn set_header(&mut self, next_header: u8, cpi: u16) {
        let b = self.buffer.as_mut();
        b[0] = next_header;
        b[1] = 0;
        b[2..4].copy_from_slice(&cpi.to_be_bytes());
    }

    /// The compressed data, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let mut b = [0u8; 8];
        IpcompPacket::new_checked(&mut b[..])
            .unwrap()
            .set_header(17, cpi::DEFLATE);
        assert_eq!(&b[..4], &[17, 0, 0, 2]);
        let p = IpcompPacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.next_header(), p.flags(), p.cpi(), p.payload().len()),
            (17, 0, 2, 4)
        );
        assert!(IpcompPacket::new_checked(&b[..3]).is_err());
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut b = [0xffu8; 6];
        let mut p = IpcompPacket::new_unchecked(&mut b[..]);
        p.set_next_header(6);
        p.set_flags(0);
        p.set_cpi(cpi::LZ4);
        assert_eq!((p.next_header(), p.flags(), p.cpi()), (6, 0, 61441));
        assert_eq!(b, [6, 0, 0xf0, 0x01, 0xff, 0xff]);
    }
}
