//! IPv4 header view (RFC 791) over a byte buffer, in the smoltcp style.
//!
//! `Ipv4Packet::new_checked` validates once (version, header length, total length against
//! the buffer); after that every getter is in bounds. Setters write the buffer in place and
//! leave the checksum to `fill_checksum`.

use super::{Malformed, checksum};
use std::net::Ipv4Addr;

mod field {
    pub(super) const VER_IHL: usize = 0;
    pub(super) const LENGTH: std::ops::Range<usize> = 2..4;
    pub(super) const IDENT: std::ops::Range<usize> = 4..6;
    pub(super) const FLG_OFF: std::ops::Range<usize> = 6..8;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: std::ops::Range<usize> = 10..12;
    pub(super) const SRC: std::ops::Range<usize> = 12..16;
    pub(super) const DST: std::ops::Range<usize> = 16..20;
}

/// The minimum IPv4 header length.
pub const HEADER_LEN: usize = 20;

/// A read/write view of an IPv4 packet.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it; getters may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer after checking version, header length and total length.
    ///
    /// A total length larger than the buffer is `Malformed::Truncated` (the kernel handed us
    /// less than the header claims, e.g. a copy range smaller than the packet); a total length of
    /// zero is accepted as the kernel's marker for a GSO packet over 64 KiB.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds what the header claims.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(Malformed::BadVersion);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Malformed::BadHeaderLen);
        }
        let total = self.total_len() as usize;
        if total == 0 && b.len() > 0xffff {
            return Ok(());
        }
        if total < hl {
            return Err(Malformed::BadHeaderLen);
        }
        if total > b.len() || hl > b.len() {
            return Err(Malformed::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::VER_IHL] & 0x0f) as usize) * 4
    }

    /// The total length field.
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The length the packet really has: the total length field, or the buffer length for a
    /// GSO packet whose field is zero.
    pub fn packet_len(&self) -> usize {
        match self.total_len() {
            0 => self.buffer.as_ref().len(),
            n => n as usize,
        }
    }

    /// The identification field.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }

    /// The don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.buffer.as_ref()[field::FLG_OFF.start] & 0x40 != 0
    }

    /// The more-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[field::FLG_OFF.start] & 0x20 != 0
    }

    /// The fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF) & 0x1fff) * 8
    }

    /// True for any fragment (first or later).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol of the payload (6 TCP, 17 UDP, 1 ICMP, 108 IPComp, 50 ESP, ...).
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// The header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// True if the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        let b = self.buffer.as_ref();
        checksum::fold(checksum::sum(0, &b[..self.header_len()])) == 0xffff
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The payload: from the end of the header to the end of the packet.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[self.header_len()..self.packet_len().min(b.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the total length field.
    pub fn set_total_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the protocol field.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    /// Sets the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&b[..hl]);
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, end) = (self.header_len(), self.packet_len());
        let b = self.buffer.as_mut();
        let end = end.min(b.len());
        &mut b[hl..end]
    }
}

#[inline]
pub(crate) fn be16(b: &[u8], r: std::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    // An ICMP echo request 10.0.1.1 -> 10.0.2.2 as captured with tcpdump -x.
    pub(crate) const PING: [u8; 28] = [
        0x45, 0x00, 0x00, 0x1c, 0x4a, 0x2b, 0x40, 0x00, 0x40, 0x01, 0xd9, 0x44, 0x0a, 0x00, 0x01,
        0x01, 0x0a, 0x00, 0x02, 0x02, 0x08, 0x00, 0xf7, 0xff, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parses_fields() {
        let p = Ipv4Packet::new_checked(&PING[..]).unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.protocol(), 1);
        assert_eq!(p.ttl(), 64);
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 1, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 2, 2));
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn checksum_round_trip() {
        let mut buf = PING;
        let mut p = Ipv4Packet::new_checked(&mut buf[..]).unwrap();
        p.set_ttl(63);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            Ipv4Packet::new_checked(&PING[..10]).unwrap_err(),
            Malformed::Truncated
        );
        let mut b = PING;
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Malformed::BadVersion
        );
        let mut b = PING;
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Malformed::BadHeaderLen
        );
        let mut b = PING;
        b[3] = 60;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Malformed::Truncated
        );
        let mut b = PING;
        b[3] = 10;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Malformed::BadHeaderLen
        );
    }
}
