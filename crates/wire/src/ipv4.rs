//! IPv4 header view (RFC 791) over a byte buffer, and its high-level form [`Ipv4Repr`].
//!
//! [`Ipv4Packet::new_checked`] fails, and only fails, on:
//! - a buffer shorter than 20 bytes: [`Malformed::Truncated`];
//! - a version nibble other than 4: [`Malformed::BadVersion`];
//! - a header length (IHL * 4) below 20, or a total length below the header length:
//!   [`Malformed::BadHeaderLen`];
//! - a total length or header length beyond the buffer: [`Malformed::Truncated`].
//!
//! A total length of zero in a buffer over 64 KiB is accepted (the kernel's marker for a
//! GSO packet). After the check no getter panics, and no setter panics; a setter that
//! changes a length can make the view claim more than the buffer holds, which
//! [`Ipv4Packet::check_len`] finds again (the payload getters clamp to the buffer).
//!
//! Setters write the buffer in place and leave the header checksum to
//! [`Ipv4Packet::fill_checksum`]; [`Ipv4Repr::emit`] writes a whole 20-byte header with its
//! checksum.

use super::{Malformed, checksum};
use std::net::Ipv4Addr;

mod field {
    use std::ops::Range;
    pub(super) const VER_IHL: usize = 0;
    pub(super) const TOS: usize = 1;
    pub(super) const LENGTH: Range<usize> = 2..4;
    pub(super) const IDENT: Range<usize> = 4..6;
    pub(super) const FLG_OFF: Range<usize> = 6..8;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: Range<usize> = 10..12;
    pub(super) const SRC: Range<usize> = 12..16;
    pub(super) const DST: Range<usize> = 16..20;
}

/// Flag bits of the 16-bit flags and fragment offset word.
const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// The minimum IPv4 header length.
pub const HEADER_LEN: usize = 20;
/// The largest IPv4 header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

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

    /// Wraps a buffer after checking version, header length and total length (see the
    /// module docs for what fails).
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

    /// The version nibble (4 in a checked view).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::VER_IHL] & 0x0f) as usize) * 4
    }

    /// The type-of-service byte: DSCP in its top six bits, ECN in the low two (RFC 2474,
    /// RFC 3168).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// The differentiated services code point (0..=63).
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// The ECN codepoint (0..=3).
    pub fn ecn(&self) -> u8 {
        self.tos() & 0x03
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
        be16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// The more-fragments flag.
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// The fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) * 8
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
        let hl = self.header_len().min(b.len());
        checksum::fold(checksum::sum(0, &b[..hl])) == 0xffff
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

    /// The payload: from the end of the header to the end of the packet (or of the
    /// buffer, if it holds less).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = self.packet_len().min(b.len());
        &b[self.header_len().min(end)..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version nibble, keeping the header length.
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Sets the header length in bytes (a multiple of 4, at most 60; the low two bits and
    /// anything above 60 are cut off), keeping the version.
    pub fn set_header_len(&mut self, len: usize) {
        let ihl = ((len / 4).min(15)) as u8;
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ihl;
    }

    /// Sets the whole type-of-service byte (DSCP and ECN).
    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOS] = v;
    }

    /// Sets the DSCP (its low six bits), keeping the ECN bits.
    pub fn set_dscp(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::TOS];
        *b = (*b & 0x03) | (v << 2);
    }

    /// Sets the ECN codepoint (its low two bits), keeping the DSCP.
    pub fn set_ecn(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::TOS];
        *b = (*b & 0xfc) | (v & 0x03);
    }

    /// Sets the total length field.
    pub fn set_total_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the identification field.
    pub fn set_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&v.to_be_bytes());
    }

    fn set_flg_off(&mut self, mask: u16, bits: u16) {
        let b = self.buffer.as_mut();
        let w = (be16(b, field::FLG_OFF) & !mask) | (bits & mask);
        b[field::FLG_OFF].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets or clears the don't-fragment flag.
    pub fn set_dont_frag(&mut self, v: bool) {
        self.set_flg_off(FLAG_DF, if v { FLAG_DF } else { 0 });
    }

    /// Sets or clears the more-fragments flag.
    pub fn set_more_frags(&mut self, v: bool) {
        self.set_flg_off(FLAG_MF, if v { FLAG_MF } else { 0 });
    }

    /// Sets the fragment offset in bytes (a multiple of 8; the low three bits are cut
    /// off), keeping the flags.
    pub fn set_frag_offset(&mut self, bytes: u16) {
        self.set_flg_off(OFFSET_MASK, bytes / 8);
    }

    /// Sets the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Sets the protocol field.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    /// Sets the header checksum field as it is (see [`Ipv4Packet::fill_checksum`]).
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
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
        let hl = hl.min(b.len());
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&b[..hl]);
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, end) = (self.header_len(), self.packet_len());
        let b = self.buffer.as_mut();
        let end = end.min(b.len());
        &mut b[hl.min(end)..end]
    }
}

/// The high-level form of an IPv4 header without options: what relayd reads from a
/// header or writes into a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// The payload's protocol (see [`super::proto`]).
    pub protocol: u8,
    /// Bytes after the header. Over `65535 - 20` the emitted total length is 0, the
    /// kernel's GSO marker.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// The type-of-service byte (DSCP and ECN).
    pub tos: u8,
    /// The identification field.
    pub ident: u16,
    /// The don't-fragment flag.
    pub dont_frag: bool,
    /// The more-fragments flag.
    pub more_frags: bool,
    /// The fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
}

impl Ipv4Repr {
    /// A header for `payload_len` bytes of `protocol`, as relayd sends its own packets:
    /// TTL 64, DF set, TOS and identification 0, not a fragment.
    pub fn new(src_addr: Ipv4Addr, dst_addr: Ipv4Addr, protocol: u8, payload_len: usize) -> Self {
        Ipv4Repr {
            src_addr,
            dst_addr,
            protocol,
            payload_len,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
    }

    /// Reads a header, checking its lengths as [`Ipv4Packet::new_checked`] does (so an
    /// unchecked view is safe here). Options are skipped: `payload_len` counts from the
    /// end of the options. The checksum is not verified (see
    /// [`Ipv4Packet::verify_checksum`]).
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr, Malformed> {
        p.check_len()?;
        Ok(Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: p.packet_len() - p.header_len(),
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
        })
    }

    /// The header length this form emits: 20, no options.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The whole packet's length: header plus payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the 20-byte header with its checksum into `p`; the payload is the caller's.
    ///
    /// # Panics
    /// If `p`'s buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>) {
        let b = p.buffer.as_mut();
        b[field::VER_IHL] = 0x40 | (HEADER_LEN / 4) as u8;
        b[field::TOS] = self.tos;
        let total = u16::try_from(self.buffer_len()).unwrap_or(0);
        b[field::LENGTH].copy_from_slice(&total.to_be_bytes());
        b[field::IDENT].copy_from_slice(&self.ident.to_be_bytes());
        let mut fo = (self.frag_offset / 8) & OFFSET_MASK;
        if self.dont_frag {
            fo |= FLAG_DF;
        }
        if self.more_frags {
            fo |= FLAG_MF;
        }
        b[field::FLG_OFF].copy_from_slice(&fo.to_be_bytes());
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = self.protocol;
        b[field::SRC].copy_from_slice(&self.src_addr.octets());
        b[field::DST].copy_from_slice(&self.dst_addr.octets());
        let mut h = Ipv4Packet::new_unchecked(&mut b[..HEADER_LEN]);
        h.fill_checksum();
    }

    /// The pseudo-header sum of the upper-layer checksum (TCP, UDP) of this packet's
    /// payload (RFC 768, RFC 9293 3.1).
    pub fn pseudo_sum(&self) -> u64 {
        checksum::pseudo_v4(
            self.src_addr,
            self.dst_addr,
            self.protocol,
            self.payload_len as u32,
        )
    }
}

#[inline]
pub(crate) fn be16(b: &[u8], r: std::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    let s = r.start;
    u32::from_be_bytes([b[s], b[s + 1], b[s + 2], b[s + 3]])
}

#[cfg(test)]
mod tests {
    use super::super::captures::{V4_ECHO_REQUEST, V4_FRAG_NEEDED, V4_TCP_SYN, V4_UDP};
    use super::*;

    // An ICMP echo request 10.0.1.1 -> 10.0.2.2, written by hand: its header checksum
    // (0xd944) is not the right one (0xd9b3); the captures are the known-good packets.
    const PING: [u8; 28] = [
        0x45, 0x00, 0x00, 0x1c, 0x4a, 0x2b, 0x40, 0x00, 0x40, 0x01, 0xd9, 0x44, 0x0a, 0x00, 0x01,
        0x01, 0x0a, 0x00, 0x02, 0x02, 0x08, 0x00, 0xf7, 0xff, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parses_fields() {
        let p = Ipv4Packet::new_checked(&PING[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0x4a2b);
        assert_eq!(p.protocol(), 1);
        assert_eq!(p.ttl(), 64);
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 1, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 2, 2));
        assert_eq!(p.payload().len(), 8);
        assert!(!p.verify_checksum());
    }

    #[test]
    fn captured_headers_verify() {
        for pkt in [V4_ECHO_REQUEST, V4_FRAG_NEEDED, V4_TCP_SYN, V4_UDP] {
            let p = Ipv4Packet::new_checked(pkt).unwrap();
            assert!(p.verify_checksum());
            assert_eq!(p.packet_len(), pkt.len());
        }
        let p = Ipv4Packet::new_checked(V4_FRAG_NEEDED).unwrap();
        assert_eq!(
            (p.tos(), p.dscp(), p.ecn()),
            (0xc0, 48, 0),
            "class selector 6"
        );
        assert_eq!((p.ident(), p.dont_frag(), p.ttl()), (46672, false, 64));
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
        // IHL 15 (60 bytes) in a 28-byte packet: total length below the header.
        let mut b = PING;
        b[0] = 0x4f;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Malformed::BadHeaderLen
        );
        // A zero total length is GSO only in a buffer over 64 KiB.
        let mut b = PING;
        b[2..4].copy_from_slice(&[0, 0]);
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Malformed::BadHeaderLen
        );
        let mut big = vec![0u8; 70_000];
        big[..28].copy_from_slice(&b);
        let p = Ipv4Packet::new_checked(&big[..]).unwrap();
        assert_eq!(p.packet_len(), 70_000);
        assert_eq!(
            Ipv4Repr::parse(&p).unwrap().payload_len,
            70_000 - HEADER_LEN
        );
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut b = PING;
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_dscp(46);
        p.set_ecn(1);
        assert_eq!((p.tos(), p.dscp(), p.ecn()), (0xb9, 46, 1));
        p.set_ecn(2);
        assert_eq!((p.dscp(), p.ecn()), (46, 2));
        p.set_tos(0);
        p.set_ident(0xbeef);
        p.set_more_frags(true);
        p.set_frag_offset(1480);
        assert_eq!(
            (p.dont_frag(), p.more_frags(), p.frag_offset()),
            (true, true, 1480)
        );
        p.set_dont_frag(false);
        assert_eq!(
            (p.dont_frag(), p.more_frags(), p.frag_offset()),
            (false, true, 1480)
        );
        p.set_more_frags(false);
        p.set_frag_offset(0);
        assert!(!p.is_fragment());
        p.set_header_len(24);
        assert_eq!((p.version(), p.header_len()), (4, 24));
        p.set_header_len(20);
        p.set_version(6);
        assert_eq!((p.version(), p.header_len()), (6, 20));
        p.set_version(4);
        p.set_protocol(17);
        p.set_total_len(28);
        p.set_src_addr(Ipv4Addr::new(192, 0, 2, 1));
        p.set_dst_addr(Ipv4Addr::new(198, 51, 100, 7));
        p.set_checksum(0x1234);
        assert_eq!(p.checksum(), 0x1234);
        assert_eq!(
            (p.ident(), p.protocol(), p.ttl()),
            (0xbeef, 17, 64),
            "TTL untouched"
        );
        assert_eq!(&b[12..20], &[192, 0, 2, 1, 198, 51, 100, 7]);
        assert_eq!(&b[20..], &PING[20..], "payload untouched");
    }

    #[test]
    fn payload_getters_clamp_after_a_bad_setter() {
        let mut b = PING;
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_header_len(60);
        assert!(p.payload().is_empty());
        assert!(p.payload_mut().is_empty());
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert_eq!(p.check_len(), Err(Malformed::BadHeaderLen));
    }

    #[test]
    fn repr_round_trip_is_byte_exact() {
        let p = Ipv4Packet::new_checked(V4_ECHO_REQUEST).unwrap();
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Ipv4Repr {
                src_addr: Ipv4Addr::new(192, 0, 2, 1),
                dst_addr: Ipv4Addr::new(198, 51, 100, 2),
                protocol: 1,
                payload_len: 64,
                ttl: 64,
                tos: 0,
                ident: 43273,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
            }
        );
        assert_eq!(r.buffer_len(), 84);
        for pkt in [V4_ECHO_REQUEST, V4_FRAG_NEEDED, V4_TCP_SYN, V4_UDP] {
            let r = Ipv4Repr::parse(&Ipv4Packet::new_checked(pkt).unwrap()).unwrap();
            let mut out = pkt.to_vec();
            out[..20].fill(0xff);
            r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
            assert_eq!(out, pkt, "the captured header, checksum included");
        }
    }

    #[test]
    fn repr_emits_fragments_and_gso_lengths() {
        let mut r = Ipv4Repr::new(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            17,
            100,
        );
        r.dont_frag = false;
        r.more_frags = true;
        r.frag_offset = 2960;
        r.tos = 0xb8;
        let mut b = [0u8; 120];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(&b[6..8], &[0x21, 0x72], "MF and offset 370 words");
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), r);

        r.payload_len = 70_000;
        r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
        assert_eq!(&b[2..4], &[0, 0], "too long for the field: the GSO marker");
    }

    #[test]
    fn repr_parse_fails_as_the_view_does() {
        for (bytes, e) in [
            (&PING[..19], Malformed::Truncated),
            (&[0x65; 28][..], Malformed::BadVersion),
        ] {
            assert_eq!(Ipv4Repr::parse(&Ipv4Packet::new_unchecked(bytes)), Err(e));
        }
        let mut b = PING;
        b[0] = 0x44;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&b[..])),
            Err(Malformed::BadHeaderLen)
        );
    }

    #[test]
    fn pseudo_sum_matches_the_checksum_module() {
        let r = Ipv4Repr::new(Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8), 6, 20);
        assert_eq!(
            r.pseudo_sum(),
            checksum::pseudo_v4(r.src_addr, r.dst_addr, 6, 20)
        );
    }
}
