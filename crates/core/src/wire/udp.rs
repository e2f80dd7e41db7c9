//! UDP header view (RFC 768).

use super::ipv4::be16;
use super::{Malformed, checksum};

/// The UDP header length.
pub const HEADER_LEN: usize = 8;

/// A read/write view of a UDP datagram (header and data).
#[derive(Debug, Clone, Copy)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps a buffer after checking the header and the length field. A length field of
    /// zero is accepted for GSO datagrams larger than 64 KiB.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        let len = p.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        let l = p.len() as usize;
        if l != 0 && l < HEADER_LEN {
            return Err(Malformed::BadHeaderLen);
        }
        if l > len {
            return Err(Malformed::Truncated);
        }
        Ok(p)
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0..2)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2..4)
    }

    /// The length field (header plus data).
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4..6)
    }

    /// True if the length field says there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }

    /// Checksum field (0: none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6..8)
    }

    /// The datagram's data (up to the end of the buffer, if the buffer holds less than
    /// the length field says, as a partial copy does).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = match self.len() {
            0 => b.len(),
            n => (n as usize).clamp(HEADER_LEN, b.len()),
        };
        &b[HEADER_LEN..end]
    }

    /// True if the checksum is right (or absent) given the pseudo-header sum.
    pub fn verify_checksum(&self, pseudo: u64) -> bool {
        self.checksum() == 0
            || checksum::fold(checksum::sum(pseudo, self.buffer.as_ref())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    /// Recomputes the checksum given the pseudo-header sum (0 is sent as 0xffff, RFC 768).
    pub fn fill_checksum(&mut self, pseudo: u64) {
        let b = self.buffer.as_mut();
        b[6..8].copy_from_slice(&[0, 0]);
        let c = match !checksum::fold(checksum::sum(pseudo, b)) {
            0 => 0xffff,
            c => c,
        };
        b[6..8].copy_from_slice(&c.to_be_bytes());
    }
}
