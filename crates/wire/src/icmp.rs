//! ICMP / ICMPv6 header view: type, code, checksum and the 4-byte rest of the header,
//! whose meaning depends on the type (echo identifier and sequence number, next-hop MTU,
//! packet-too-big MTU, parameter-problem pointer). Both versions share this layout
//! (RFC 792, RFC 4443); their high-level forms are [`super::Icmpv4Repr`] and
//! [`super::Icmpv6Repr`].
//!
//! [`IcmpPacket::new_checked`] fails, and only fails, on a buffer shorter than 8 bytes
//! ([`Malformed::Truncated`]); after it no getter or setter panics.

use super::ipv4::{be16, be32};
use super::{Malformed, checksum};

mod field {
    use std::ops::Range;
    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: Range<usize> = 2..4;
    /// The rest of the header, as one word.
    pub(super) const REST: Range<usize> = 4..8;
    /// Echo identifier.
    pub(super) const ECHO_IDENT: Range<usize> = 4..6;
    /// Echo sequence number.
    pub(super) const ECHO_SEQ: Range<usize> = 6..8;
    /// ICMPv4 parameter problem pointer (RFC 792).
    pub(super) const POINTER: usize = 4;
    /// ICMPv4 next-hop MTU of "fragmentation needed" (RFC 1191 4).
    pub(super) const NEXT_HOP_MTU: Range<usize> = 6..8;
}

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

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The rest of the header as one word (an ICMPv6 packet-too-big MTU or
    /// parameter-problem pointer).
    pub fn rest_of_header(&self) -> u32 {
        be32(self.buffer.as_ref(), field::REST)
    }

    /// The identifier of an echo request or reply.
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// The sequence number of an echo request or reply.
    pub fn echo_seq(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_SEQ)
    }

    /// The next-hop MTU of an ICMPv4 "fragmentation needed" (RFC 1191 4).
    pub fn next_hop_mtu(&self) -> u16 {
        be16(self.buffer.as_ref(), field::NEXT_HOP_MTU)
    }

    /// The pointer of an ICMPv4 parameter problem: the octet of the quoted header at
    /// fault (RFC 792).
    pub fn pointer(&self) -> u8 {
        self.buffer.as_ref()[field::POINTER]
    }

    /// The message body after the 8-byte header: echo data, or the quoted packet of an
    /// error.
    pub fn data(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN.min(b.len())..]
    }

    /// True if the checksum is right; `pseudo` is 0 for ICMPv4 and the pseudo-header sum
    /// for ICMPv6.
    pub fn verify_checksum(&self, pseudo: u64) -> bool {
        checksum::fold(checksum::sum(pseudo, self.buffer.as_ref())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }

    /// Sets the message code.
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }

    /// Sets the checksum field as it is (see [`IcmpPacket::fill_checksum`]).
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the rest of the header as one word.
    pub fn set_rest_of_header(&mut self, v: u32) {
        self.buffer.as_mut()[field::REST].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::ECHO_IDENT].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the echo sequence number.
    pub fn set_echo_seq(&mut self, v: u16) {
        self.buffer.as_mut()[field::ECHO_SEQ].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the next-hop MTU of an ICMPv4 "fragmentation needed".
    pub fn set_next_hop_mtu(&mut self, v: u16) {
        self.buffer.as_mut()[field::NEXT_HOP_MTU].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the pointer of an ICMPv4 parameter problem.
    pub fn set_pointer(&mut self, v: u8) {
        self.buffer.as_mut()[field::POINTER] = v;
    }

    /// The message body, writable (see [`IcmpPacket::data`]).
    pub fn data_mut(&mut self) -> &mut [u8] {
        let b = self.buffer.as_mut();
        let start = HEADER_LEN.min(b.len());
        &mut b[start..]
    }

    /// Recomputes the checksum over the whole buffer; `pseudo` is 0 for ICMPv4 and the
    /// pseudo-header sum for ICMPv6 ([`super::Ipv6Repr::pseudo_sum`]).
    pub fn fill_checksum(&mut self, pseudo: u64) {
        let b = self.buffer.as_mut();
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let c = !checksum::fold(checksum::sum(pseudo, b));
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{V4_ECHO_REQUEST, V6_ECHO_REQUEST, l4, pseudo_of};
    use super::*;

    #[test]
    fn reads_captured_echoes() {
        for (pkt, ty, ident) in [(V4_ECHO_REQUEST, 8, 2467), (V6_ECHO_REQUEST, 128, 2468)] {
            let m = IcmpPacket::new_checked(l4(pkt)).unwrap();
            assert_eq!((m.msg_type(), m.code()), (ty, 0));
            assert_eq!((m.echo_ident(), m.echo_seq()), (ident, 1));
            assert_eq!(m.rest_of_header(), (ident as u32) << 16 | 1);
            assert_eq!(m.data().len(), 56);
            assert!(m.verify_checksum(pseudo_of(pkt)));
            assert!(!m.verify_checksum(pseudo_of(pkt) + 1));
        }
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut b = l4(V4_ECHO_REQUEST).to_vec();
        let mut m = IcmpPacket::new_unchecked(&mut b[..]);
        m.set_msg_type(3);
        m.set_code(4);
        m.set_checksum(0xabcd);
        m.set_rest_of_header(0);
        m.set_next_hop_mtu(1280);
        assert_eq!(m.rest_of_header(), 1280);
        m.set_pointer(9);
        assert_eq!((m.pointer(), m.next_hop_mtu()), (9, 1280));
        m.set_echo_ident(7);
        m.set_echo_seq(8);
        assert_eq!((m.echo_ident(), m.echo_seq()), (7, 8));
        assert_eq!((m.msg_type(), m.code(), m.checksum()), (3, 4, 0xabcd));
        m.data_mut()[0] = 0xee;
        m.fill_checksum(0);
        assert!(m.verify_checksum(0));
        assert_eq!(&b[..9], &[3, 4, b[2], b[3], 0, 7, 0, 8, 0xee]);
        assert_eq!(
            &b[9..],
            &l4(V4_ECHO_REQUEST)[9..],
            "the rest of the data untouched"
        );
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            IcmpPacket::new_checked(&[8u8, 0, 0, 0, 0, 0, 0][..]).unwrap_err(),
            Malformed::Truncated
        );
        let m = IcmpPacket::new_checked(&[8u8, 0, 0, 0, 0, 0, 0, 0][..]).unwrap();
        assert!(m.data().is_empty());
    }
}
