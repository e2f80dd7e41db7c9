//! Geneve header view (RFC 8926): version, options length, the O and C flags, the
//! protocol type (an EtherType) and the 24-bit VNI; the options are left as bytes.
//!
//! [`GenevePacket::new_checked`] fails with [`Malformed::Truncated`] on a buffer shorter
//! than the header and options it announces, and with [`Malformed::BadVersion`] on a
//! version other than 0.

use super::Malformed;
use super::ipv4::{be16, be32};

/// The Geneve header's length without options.
pub const HEADER_LEN: usize = 8;
/// Geneve's UDP port (IANA).
pub const UDP_PORT: u16 = 6081;

/// A read view of a Geneve packet.
#[derive(Debug, Clone, Copy)]
pub struct GenevePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GenevePacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        GenevePacket { buffer }
    }

    /// Wraps a buffer after checking its version and that header and options fit.
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

    /// The version (0).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 6
    }

    /// The header's length with its options.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + usize::from(self.buffer.as_ref()[0] & 0x3f) * 4
    }

    /// True for a control packet (O flag).
    pub fn is_control(&self) -> bool {
        self.buffer.as_ref()[1] & 0x80 != 0
    }

    /// The payload's EtherType (0x6558 for an Ethernet frame).
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), 2..4)
    }

    /// The virtual network identifier.
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), 4..8) >> 8
    }

    /// The options, as bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// What follows the header and options.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_with_options() {
        let b = [0x01, 0, 0x65, 0x58, 0, 0, 7, 0, 1, 2, 3, 4, 0xaa];
        let g = GenevePacket::new_checked(&b[..]).unwrap();
        assert_eq!((g.protocol(), g.vni(), g.header_len()), (0x6558, 7, 12));
        assert_eq!((g.options(), g.payload()), (&[1, 2, 3, 4][..], &[0xaa][..]));
        for n in 0..12 {
            assert!(GenevePacket::new_checked(&b[..n]).is_err());
        }
        assert!(GenevePacket::new_checked(&[0x40, 0, 0, 0, 0, 0, 0, 0][..]).is_err());
    }
}
