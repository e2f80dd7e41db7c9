//! ICMP / ICMPv6 header view: type, code, checksum and the rest-of-header word.

use super::ipv4::be16;
use super::{Malformed, checksum};

/// The ICMP header length.
pub const HEADER_LEN: usize = 8;

/// A read/write view of an ICMP or ICMPv6 message.
#[derive(Debug, Clone, Copy)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        IcmpPacket { buffer }
    }

    /// Wraps a buffer after checking the header fits.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Message code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2..4)
    }

    /// The identifier of an echo request or reply.
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4..6)
    }

    /// The sequence number of an echo request or reply.
    pub fn echo_seq(&self) -> u16 {
        be16(self.buffer.as_ref(), 6..8)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Recomputes the checksum; `pseudo` is 0 for ICMPv4 and the pseudo-header sum for ICMPv6.
    pub fn fill_checksum(&mut self, pseudo: u64) {
        let b = self.buffer.as_mut();
        b[2..4].copy_from_slice(&[0, 0]);
        let c = !checksum::fold(checksum::sum(pseudo, b));
        b[2..4].copy_from_slice(&c.to_be_bytes());
    }
}
