//! VXLAN header view (RFC 7348): the flags (the I bit says the VNI is valid) and the
//! 24-bit VXLAN network identifier; an Ethernet frame follows.
//!
//! [`VxlanPacket::new_checked`] fails ([`Malformed::Truncated`]) only on a buffer shorter
//! than 8 bytes; the I bit is the caller's to judge ([`VxlanPacket::vni_valid`]).

use super::Malformed;
use super::ipv4::be32;

/// The VXLAN header's length.
pub const HEADER_LEN: usize = 8;
/// VXLAN's UDP port (IANA).
pub const UDP_PORT: u16 = 4789;

/// A read/write view of a VXLAN packet.
#[derive(Debug, Clone, Copy)]
pub struct VxlanPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VxlanPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        VxlanPacket { buffer }
    }

    /// Wraps a buffer after checking the 8-byte header fits.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// True if the I flag is set (the VNI is valid).
    pub fn vni_valid(&self) -> bool {
        self.buffer.as_ref()[0] & 0x08 != 0
    }

    /// The VXLAN network identifier.
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), 4..8) >> 8
    }

    /// The Ethernet frame after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VxlanPacket<T> {
    /// Writes a header with the I flag and `vni` (its low 24 bits).
    pub fn set_vni(&mut self, vni: u32) {
        let b = self.buffer.as_mut();
        b[..4].copy_from_slice(&[0x08, 0, 0, 0]);
        b[4..8].copy_from_slice(&(vni << 8).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vni_round_trip() {
        let mut b = [0u8; 9];
        VxlanPacket::new_checked(&mut b[..])
            .unwrap()
            .set_vni(0x123456);
        let v = VxlanPacket::new_checked(&b[..]).unwrap();
        assert!(v.vni_valid());
        assert_eq!((v.vni(), v.payload().len()), (0x123456, 1));
        assert!(VxlanPacket::new_checked(&b[..7]).is_err());
    }
}
