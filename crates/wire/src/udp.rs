//! UDP header view (RFC 768) and its high-level form [`UdpRepr`].
//!
//! [`UdpPacket::new_checked`] fails, and only fails, on:
//! - a buffer shorter than 8 bytes: [`Malformed::Truncated`];
//! - a length field from 1 to 7 (shorter than the header): [`Malformed::BadHeaderLen`];
//! - a length field beyond the buffer: [`Malformed::Truncated`].
//!
//! A length field of zero is accepted (a GSO datagram over 64 KiB). After the check no
//! getter or setter panics; the payload getters clamp to the buffer.

use super::ipv4::be16;
use super::{Malformed, checksum};

mod field {
    use std::ops::Range;
    pub(super) const SRC_PORT: Range<usize> = 0..2;
    pub(super) const DST_PORT: Range<usize> = 2..4;
    pub(super) const LENGTH: Range<usize> = 4..6;
    pub(super) const CHECKSUM: Range<usize> = 6..8;
}

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

    /// Wraps a buffer after checking the header and the length field (see the module docs
    /// for what fails). A length field of zero is accepted for GSO datagrams larger than
    /// 64 KiB.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the header and what the length field claims.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        let l = self.len() as usize;
        if l != 0 && l < HEADER_LEN {
            return Err(Malformed::BadHeaderLen);
        }
        if l > len {
            return Err(Malformed::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The length field (header plus data).
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// True if the length field says there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }

    /// Checksum field (0: none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    fn payload_end(&self) -> usize {
        let len = self.buffer.as_ref().len();
        match self.len() {
            0 => len,
            n => (n as usize).clamp(HEADER_LEN, len.max(HEADER_LEN)),
        }
    }

    /// The datagram's data (up to the end of the buffer, if the buffer holds less than
    /// the length field says, as a partial copy does).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN.min(b.len())..self.payload_end().min(b.len())]
    }

    /// True if the checksum is right (or absent) given the pseudo-header sum.
    pub fn verify_checksum(&self, pseudo: u64) -> bool {
        self.checksum() == 0
            || checksum::fold(checksum::sum(pseudo, self.buffer.as_ref())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the checksum field as it is (0: none; see [`UdpPacket::fill_checksum`]).
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    /// Recomputes the checksum over the whole buffer given the pseudo-header sum (0 is
    /// sent as 0xffff, RFC 768). [`super::IpRepr::pseudo_sum`] gives the sum of a new
    /// packet; `checksum::pseudo_v4` / `pseudo_v6` that of any addresses.
    pub fn fill_checksum(&mut self, pseudo: u64) {
        let b = self.buffer.as_mut();
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let c = match !checksum::fold(checksum::sum(pseudo, b)) {
            0 => 0xffff,
            c => c,
        };
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// The datagram's data, writable (see [`UdpPacket::payload`]).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.payload_end();
        let b = self.buffer.as_mut();
        let end = end.min(b.len());
        &mut b[HEADER_LEN.min(end)..end]
    }
}

/// The high-level form of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Bytes of data after the header. Over `65535 - 8` the emitted length is 0 (GSO).
    pub payload_len: usize,
}

impl UdpRepr {
    /// Reads a header, checking it as [`UdpPacket::new_checked`] does. The checksum is not
    /// verified (that needs the IP addresses: [`UdpPacket::verify_checksum`]).
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Result<UdpRepr, Malformed> {
        p.check_len()?;
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: p.payload_end() - HEADER_LEN,
        })
    }

    /// The header length: 8.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The datagram's length: header plus data.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header with checksum 0 into `p`. Once the data is in place,
    /// [`UdpPacket::fill_checksum`] fills the checksum (or leave it 0 over IPv4: none).
    ///
    /// # Panics
    /// If `p`'s buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut UdpPacket<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(u16::try_from(self.buffer_len()).unwrap_or(0));
        p.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{V4_UDP, V6_UDP, l4, pseudo_of};
    use super::*;

    #[test]
    fn captured_datagrams_parse_and_verify() {
        for pkt in [V4_UDP, V6_UDP] {
            let u = UdpPacket::new_checked(l4(pkt)).unwrap();
            assert_eq!((u.src_port(), u.dst_port(), u.len()), (40001, 9, 14));
            assert_eq!(u.payload(), b"relayd");
            assert!(!u.is_empty());
            assert_ne!(u.checksum(), 0);
            assert!(u.verify_checksum(pseudo_of(pkt)));
            assert_eq!(
                UdpRepr::parse(&u).unwrap(),
                UdpRepr {
                    src_port: 40001,
                    dst_port: 9,
                    payload_len: 6
                }
            );
        }
    }

    #[test]
    fn emit_and_fill_checksum_give_the_kernels_bytes() {
        for pkt in [V4_UDP, V6_UDP] {
            let orig = l4(pkt);
            let r = UdpRepr::parse(&UdpPacket::new_unchecked(orig)).unwrap();
            let mut out = [0xaau8; 14];
            out[8..].copy_from_slice(b"relayd");
            let mut u = UdpPacket::new_unchecked(&mut out[..]);
            r.emit(&mut u);
            assert_eq!(u.checksum(), 0);
            u.fill_checksum(pseudo_of(pkt));
            assert_eq!(&out[..], orig);
        }
    }

    #[test]
    fn setters_and_zero_checksum() {
        let mut b = [0u8; 12];
        let mut u = UdpPacket::new_unchecked(&mut b[..]);
        u.set_src_port(53);
        u.set_dst_port(5353);
        u.set_len(12);
        u.set_checksum(0);
        u.payload_mut().copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (53, 5353, 12));
        assert!(u.verify_checksum(12345), "a zero checksum is none");
        assert_eq!(b, [0, 53, 0x14, 0xe9, 0, 12, 0, 0, 1, 2, 3, 4]);
        // A sum of 0 is sent as 0xffff: zero means "no checksum".
        let mut z = [0u8; 8];
        let mut u = UdpPacket::new_unchecked(&mut z[..]);
        u.fill_checksum(0xffff);
        assert_eq!(u.checksum(), 0xffff);
    }

    #[test]
    fn rejects_bad_input() {
        let d = l4(V4_UDP);
        let err = |b: &[u8]| UdpPacket::new_checked(b).unwrap_err();
        assert_eq!(err(&d[..7]), Malformed::Truncated);
        let mut b = d.to_vec();
        b[5] = 7;
        assert_eq!(err(&b), Malformed::BadHeaderLen);
        b[5] = 15;
        assert_eq!(err(&b), Malformed::Truncated);
        assert_eq!(
            UdpRepr::parse(&UdpPacket::new_unchecked(&b[..])),
            Err(Malformed::Truncated)
        );
        b[5] = 0;
        let u = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(u.payload(), b"relayd", "length 0: up to the buffer's end");
    }

    #[test]
    fn payload_clamps_to_a_partial_copy() {
        let d = l4(V4_UDP);
        let u = UdpPacket::new_unchecked(&d[..10]);
        assert_eq!(u.payload(), b"re");
        let r = UdpRepr {
            src_port: 1,
            dst_port: 2,
            payload_len: 70_000,
        };
        let mut b = [0u8; 8];
        r.emit(&mut UdpPacket::new_unchecked(&mut b[..]));
        assert_eq!(&b[4..6], &[0, 0], "too long for the field: GSO");
    }
}
