//! GRE header view (RFC 2784, with RFC 2890's key and sequence number): the flags, the
//! version, the protocol type (an EtherType) and the optional checksum, key and sequence
//! number, whose presence the flags give.
//!
//! [`GrePacket::new_checked`] fails with [`Malformed::Truncated`] on a buffer shorter than
//! the header its flags announce, and with [`Malformed::BadVersion`] on a version other
//! than 0 (1 is PPTP's enhanced GRE, which relayd does not decode).

use super::Malformed;
use super::ipv4::{be16, be32};

/// The GRE header's length without optional fields.
pub const HEADER_LEN: usize = 4;

const F_CSUM: u16 = 0x8000;
const F_KEY: u16 = 0x2000;
const F_SEQ: u16 = 0x1000;

/// A read/write view of a GRE packet.
#[derive(Debug, Clone, Copy)]
pub struct GrePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GrePacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        GrePacket { buffer }
    }

    /// Wraps a buffer after checking the header its flags announce fits.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        let p = Self::new_unchecked(buffer);
        if p.version() != 0 {
            return Err(Malformed::BadVersion);
        }
        if p.buffer.as_ref().len() < p.header_len() {
            return Err(Malformed::Truncated);
        }
        Ok(p)
    }

    fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), 0..2)
    }

    /// The version (0 for GRE).
    pub fn version(&self) -> u8 {
        (self.flags() & 0x7) as u8
    }

    /// True if the checksum field is present.
    pub fn has_checksum(&self) -> bool {
        self.flags() & F_CSUM != 0
    }

    /// The protocol type: the EtherType of the payload.
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), 2..4)
    }

    /// The header's length with its optional fields.
    pub fn header_len(&self) -> usize {
        let f = self.flags();
        HEADER_LEN
            + if f & F_CSUM != 0 { 4 } else { 0 }
            + if f & F_KEY != 0 { 4 } else { 0 }
            + if f & F_SEQ != 0 { 4 } else { 0 }
    }

    /// The key, if present.
    pub fn key(&self) -> Option<u32> {
        let f = self.flags();
        let at = HEADER_LEN + if f & F_CSUM != 0 { 4 } else { 0 };
        (f & F_KEY != 0).then(|| be32(self.buffer.as_ref(), at..at + 4))
    }

    /// The sequence number, if present.
    pub fn seq_no(&self) -> Option<u32> {
        let f = self.flags();
        let at = self.header_len() - 4;
        (f & F_SEQ != 0).then(|| be32(self.buffer.as_ref(), at..at + 4))
    }

    /// What follows the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// The high-level form of a GRE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GreRepr {
    /// The payload's EtherType.
    pub protocol: u16,
    /// The key, if any.
    pub key: Option<u32>,
    /// The sequence number, if any.
    pub seq_no: Option<u32>,
}

impl GreRepr {
    /// Reads a header (a checksum field is accepted and not verified).
    pub fn parse<T: AsRef<[u8]>>(p: &GrePacket<T>) -> Result<GreRepr, Malformed> {
        let p = GrePacket::new_checked(p.buffer.as_ref())?;
        Ok(GreRepr {
            protocol: p.protocol(),
            key: p.key(),
            seq_no: p.seq_no(),
        })
    }

    /// The header's length (no checksum is written).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
            + if self.key.is_some() { 4 } else { 0 }
            + if self.seq_no.is_some() { 4 } else { 0 }
    }

    /// Writes the header.
    ///
    /// # Panics
    /// If the buffer is shorter than [`GreRepr::header_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut GrePacket<T>) {
        let b = p.buffer.as_mut();
        let mut flags = 0u16;
        let mut at = HEADER_LEN;
        if let Some(k) = self.key {
            flags |= F_KEY;
            b[at..at + 4].copy_from_slice(&k.to_be_bytes());
            at += 4;
        }
        if let Some(s) = self.seq_no {
            flags |= F_SEQ;
            b[at..at + 4].copy_from_slice(&s.to_be_bytes());
        }
        b[0..2].copy_from_slice(&flags.to_be_bytes());
        b[2..4].copy_from_slice(&self.protocol.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let r = GreRepr {
            protocol: 0x0800,
            key: Some(7),
            seq_no: Some(9),
        };
        let mut b = vec![0u8; r.header_len() + 2];
        r.emit(&mut GrePacket::new_unchecked(&mut b[..]));
        let p = GrePacket::new_checked(&b[..]).unwrap();
        assert_eq!(GreRepr::parse(&p), Ok(r));
        assert_eq!(p.payload().len(), 2);
        for n in 0..r.header_len() {
            assert!(GrePacket::new_checked(&b[..n]).is_err());
        }
        b[1] = 1;
        assert_eq!(
            GrePacket::new_checked(&b[..]).unwrap_err(),
            Malformed::BadVersion
        );
    }
}
