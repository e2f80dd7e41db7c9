//! IPv6 fixed header view (RFC 8200), the extension-header walk that finds the
//! upper-layer header, and the fixed header's high-level form [`Ipv6Repr`].
//!
//! [`Ipv6Packet::new_checked`] fails, and only fails, on:
//! - a buffer shorter than 40 bytes: [`Malformed::Truncated`];
//! - a version nibble other than 6: [`Malformed::BadVersion`];
//! - a payload length beyond the buffer: [`Malformed::Truncated`].
//!
//! A payload length of zero with a longer buffer is accepted (GSO, or a jumbogram whose
//! real length sits in a hop-by-hop option). After the check no getter or setter panics;
//! [`Ipv6Packet::upper_layer`] returns [`Malformed::Truncated`] for an extension header
//! that runs past the packet.

use super::ipv4::be16;
use super::{Malformed, checksum};
use std::net::Ipv6Addr;

mod field {
    use std::ops::Range;
    /// Version, traffic class and flow label.
    pub(super) const VER_TC_FLOW: Range<usize> = 0..4;
    pub(super) const LENGTH: Range<usize> = 4..6;
    pub(super) const NXT_HDR: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC: Range<usize> = 8..24;
    pub(super) const DST: Range<usize> = 24..40;
}

/// The fixed IPv6 header length.
pub const HEADER_LEN: usize = 40;

/// The largest flow label (20 bits).
pub const MAX_FLOW_LABEL: u32 = (1 << 20) - 1;

/// Extension headers relayd walks past to find the transport header.
pub mod next_header {
    /// Hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// Routing header.
    pub const ROUTING: u8 = 43;
    /// Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Authentication header (its length unit differs: RFC 4302).
    pub const AUTH: u8 = 51;
    /// Destination options.
    pub const DEST_OPTS: u8 = 60;
}

/// A read/write view of an IPv6 packet.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps a buffer after checking version and payload length against the buffer (see
    /// the module docs for what fails). A payload length of zero with a longer buffer is
    /// accepted (GSO / jumbo).
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the fixed header and the payload length it claims.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Malformed::BadVersion);
        }
        if HEADER_LEN + self.payload_len() as usize > b.len() {
            return Err(Malformed::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word0(&self) -> u32 {
        super::ipv4::be32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }

    /// The version nibble (6 in a checked view).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The traffic class: DSCP in its top six bits, ECN in the low two.
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// The differentiated services code point (0..=63).
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// The ECN codepoint (0..=3).
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// The 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        self.word0() & MAX_FLOW_LABEL
    }

    /// The payload length field (bytes after the fixed header).
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The length the packet really has (header plus payload; the buffer length for GSO).
    pub fn packet_len(&self) -> usize {
        match self.payload_len() {
            0 => self.buffer.as_ref().len(),
            n => HEADER_LEN + n as usize,
        }
    }

    /// The next header field of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Ipv6Addr::from(a)
    }

    /// The payload: from the end of the fixed header (extension headers included) to the
    /// end of the packet, or of the buffer if it holds less.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = self.packet_len().min(b.len());
        &b[HEADER_LEN.min(end)..end]
    }

    /// Walks the extension headers. Returns the upper-layer protocol, its offset, and
    /// whether the packet is a fragment (`Some(true)` for the first fragment, `Some(false)`
    /// for a later one, whose transport header is not here).
    pub fn upper_layer(&self) -> Result<(u8, usize, Option<bool>), Malformed> {
        let b = self.buffer.as_ref();
        let end = self.packet_len().min(b.len());
        if end < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        let mut nh = self.next_header();
        let mut off = HEADER_LEN;
        let mut frag = None;
        // Bounded: each step advances at least 8 bytes.
        loop {
            match nh {
                next_header::HOP_BY_HOP | next_header::ROUTING | next_header::DEST_OPTS => {
                    if off + 2 > end {
                        return Err(Malformed::Truncated);
                    }
                    let len = (b[off + 1] as usize + 1) * 8;
                    nh = b[off];
                    off += len;
                }
                next_header::AUTH => {
                    if off + 2 > end {
                        return Err(Malformed::Truncated);
                    }
                    let len = (b[off + 1] as usize + 2) * 4;
                    nh = b[off];
                    off += len;
                }
                next_header::FRAGMENT => {
                    let f = FragmentHeader::new_checked(&b[off.min(end)..end])?;
                    frag = Some(f.frag_offset() == 0);
                    nh = f.next_header();
                    off += FRAGMENT_HEADER_LEN;
                    if f.frag_offset() != 0 {
                        return Ok((nh, off, frag));
                    }
                }
                _ => break,
            }
            if off > end {
                return Err(Malformed::Truncated);
            }
        }
        Ok((nh, off, frag))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    fn set_word0(&mut self, mask: u32, bits: u32) {
        let w = (self.word0() & !mask) | (bits & mask);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the version nibble, keeping traffic class and flow label.
    pub fn set_version(&mut self, v: u8) {
        self.set_word0(0xf000_0000, (v as u32) << 28);
    }

    /// Sets the traffic class (DSCP and ECN), keeping version and flow label.
    pub fn set_traffic_class(&mut self, v: u8) {
        self.set_word0(0x0ff0_0000, (v as u32) << 20);
    }

    /// Sets the DSCP (its low six bits), keeping the ECN bits.
    pub fn set_dscp(&mut self, v: u8) {
        self.set_traffic_class((self.traffic_class() & 0x03) | (v << 2));
    }

    /// Sets the ECN codepoint (its low two bits), keeping the DSCP.
    pub fn set_ecn(&mut self, v: u8) {
        self.set_traffic_class((self.traffic_class() & 0xfc) | (v & 0x03));
    }

    /// Sets the flow label (its low 20 bits).
    pub fn set_flow_label(&mut self, v: u32) {
        self.set_word0(MAX_FLOW_LABEL, v);
    }

    /// Sets the payload length field.
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the next header field of the fixed header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// The payload, writable (see [`Ipv6Packet::payload`]).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.packet_len();
        let b = self.buffer.as_mut();
        let end = end.min(b.len());
        &mut b[HEADER_LEN.min(end)..end]
    }
}

/// The fragment header's length (RFC 8200 4.5).
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// A read/write view of an IPv6 fragment header (RFC 8200 4.5): next header, fragment
/// offset, more-fragments flag and identification.
///
/// [`FragmentHeader::new_checked`] fails, and only fails, on a buffer shorter than 8
/// bytes ([`Malformed::Truncated`]).
#[derive(Debug, Clone, Copy)]
pub struct FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

mod frag_field {
    use std::ops::Range;
    pub(super) const NXT_HDR: usize = 0;
    pub(super) const OFF_M: Range<usize> = 2..4;
    pub(super) const IDENT: Range<usize> = 4..8;
}

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        FragmentHeader { buffer }
    }

    /// Wraps a buffer (starting at the fragment header) after checking the header fits.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        if buffer.as_ref().len() < FRAGMENT_HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// The header after this one.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[frag_field::NXT_HDR]
    }

    /// The fragment offset in bytes (0 for the first fragment).
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), frag_field::OFF_M) & 0xfff8
    }

    /// The more-fragments flag.
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), frag_field::OFF_M) & 1 != 0
    }

    /// The identification.
    pub fn ident(&self) -> u32 {
        super::ipv4::be32(self.buffer.as_ref(), frag_field::IDENT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FragmentHeader<T> {
    /// Sets the header after this one.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[frag_field::NXT_HDR] = v;
    }

    /// Sets the fragment offset in bytes (a multiple of 8; the low three bits are cut
    /// off), keeping the more-fragments flag.
    pub fn set_frag_offset(&mut self, bytes: u16) {
        let b = self.buffer.as_mut();
        let w = (be16(b, frag_field::OFF_M) & 0x0007) | (bytes & 0xfff8);
        b[frag_field::OFF_M].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets or clears the more-fragments flag.
    pub fn set_more_frags(&mut self, v: bool) {
        let b = self.buffer.as_mut();
        let w = (be16(b, frag_field::OFF_M) & !1) | v as u16;
        b[frag_field::OFF_M].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, v: u32) {
        self.buffer.as_mut()[frag_field::IDENT].copy_from_slice(&v.to_be_bytes());
    }
}

/// The high-level form of the fixed IPv6 header (extension headers are payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// The next header field.
    pub next_header: u8,
    /// Bytes after the fixed header. Over 65535 the emitted payload length is 0 (GSO).
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits; higher bits are not emitted).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// A header for `payload_len` bytes of `next_header`, as relayd sends its own packets:
    /// hop limit 64, traffic class and flow label 0.
    pub fn new(
        src_addr: Ipv6Addr,
        dst_addr: Ipv6Addr,
        next_header: u8,
        payload_len: usize,
    ) -> Self {
        Ipv6Repr {
            src_addr,
            dst_addr,
            next_header,
            payload_len,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// Reads the fixed header, checking it as [`Ipv6Packet::new_checked`] does.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr, Malformed> {
        p.check_len()?;
        Ok(Ipv6Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: p.packet_len() - HEADER_LEN,
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }

    /// The header length this form emits: 40.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The whole packet's length: fixed header plus payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the fixed header into `p`; the payload is the caller's.
    ///
    /// # Panics
    /// If `p`'s buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) {
        let b = p.buffer.as_mut();
        let w0 =
            (6u32 << 28) | ((self.traffic_class as u32) << 20) | (self.flow_label & MAX_FLOW_LABEL);
        b[field::VER_TC_FLOW].copy_from_slice(&w0.to_be_bytes());
        let len = u16::try_from(self.payload_len).unwrap_or(0);
        b[field::LENGTH].copy_from_slice(&len.to_be_bytes());
        b[field::NXT_HDR] = self.next_header;
        b[field::HOP_LIMIT] = self.hop_limit;
        b[field::SRC].copy_from_slice(&self.src_addr.octets());
        b[field::DST].copy_from_slice(&self.dst_addr.octets());
    }

    /// The pseudo-header sum of the upper-layer checksum (TCP, UDP, ICMPv6) of a payload
    /// that follows the fixed header directly (RFC 8200 8.1).
    pub fn pseudo_sum(&self) -> u64 {
        checksum::pseudo_v6(
            self.src_addr,
            self.dst_addr,
            self.next_header,
            self.payload_len as u32,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{V6_ECHO_REQUEST, V6_PACKET_TOO_BIG, V6_TCP_SYN, V6_UDP};
    use super::*;

    fn packet(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0x60, 0, 0, 0];
        v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        v.push(next);
        v.push(64);
        v.extend_from_slice(&Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1).octets());
        v.extend_from_slice(&Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 2).octets());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn walks_extension_headers() {
        // hop-by-hop (8 bytes) -> fragment (first) -> UDP
        let mut ext = vec![next_header::FRAGMENT, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 7]);
        ext.extend_from_slice(&[0; 8]);
        let b = packet(next_header::HOP_BY_HOP, &ext);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.src_addr(), "fd00:1::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.upper_layer().unwrap(), (17, 56, Some(true)));
    }

    #[test]
    fn later_fragment_has_no_transport_header() {
        let b = packet(
            next_header::FRAGMENT,
            &[17, 0, 0, 0x10, 0, 0, 0, 7, 1, 2, 3, 4],
        );
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap(), (17, 48, Some(false)));
    }

    #[test]
    fn truncated_extension_is_an_error() {
        let b = packet(next_header::DEST_OPTS, &[17, 5]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap_err(), Malformed::Truncated);
        let mut b = packet(17, &[0; 8]);
        b[5] = 200;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]).unwrap_err(),
            Malformed::Truncated
        );
    }

    #[test]
    fn captured_headers_parse_and_emit_byte_for_byte() {
        let p = Ipv6Packet::new_checked(V6_ECHO_REQUEST).unwrap();
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Ipv6Repr {
                src_addr: "2001:db8:1::1".parse().unwrap(),
                dst_addr: "2001:db8:2::2".parse().unwrap(),
                next_header: 58,
                payload_len: 64,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0x80dc7,
            }
        );
        assert_eq!((p.version(), p.payload().len()), (6, 64));
        for pkt in [V6_ECHO_REQUEST, V6_PACKET_TOO_BIG, V6_TCP_SYN, V6_UDP] {
            let r = Ipv6Repr::parse(&Ipv6Packet::new_checked(pkt).unwrap()).unwrap();
            assert_eq!(r.buffer_len(), pkt.len());
            let mut out = pkt.to_vec();
            out[..HEADER_LEN].fill(0xff);
            r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
            assert_eq!(out, pkt);
        }
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut b = V6_ECHO_REQUEST.to_vec();
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_traffic_class(0xb9);
        assert_eq!((p.traffic_class(), p.dscp(), p.ecn()), (0xb9, 46, 1));
        assert_eq!((p.version(), p.flow_label()), (6, 0x80dc7));
        p.set_ecn(2);
        p.set_dscp(10);
        assert_eq!((p.dscp(), p.ecn()), (10, 2));
        p.set_flow_label(0xfff_ffff);
        assert_eq!((p.traffic_class(), p.flow_label()), (0x2a, MAX_FLOW_LABEL));
        p.set_version(4);
        assert_eq!((p.version(), p.traffic_class()), (4, 0x2a));
        p.set_version(6);
        p.set_payload_len(8);
        p.set_next_header(17);
        p.set_hop_limit(1);
        let (s, d): (Ipv6Addr, Ipv6Addr) = ("::1".parse().unwrap(), "ff02::1".parse().unwrap());
        p.set_src_addr(s);
        p.set_dst_addr(d);
        assert_eq!(
            (
                p.payload_len(),
                p.next_header(),
                p.hop_limit(),
                p.src_addr(),
                p.dst_addr()
            ),
            (8, 17, 1, s, d)
        );
        assert_eq!(p.payload_mut().len(), 8);
        assert_eq!(&b[40..], &V6_ECHO_REQUEST[40..], "payload untouched");
    }

    #[test]
    fn fragment_header_fields() {
        // Next header UDP, offset 185 * 8, M set, identification 7.
        let h = [17u8, 0, 0x05, 0xc9, 0, 0, 0, 7];
        let f = FragmentHeader::new_checked(&h[..]).unwrap();
        assert_eq!(
            (f.next_header(), f.frag_offset(), f.more_frags(), f.ident()),
            (17, 1480, true, 7)
        );
        assert_eq!(
            FragmentHeader::new_checked(&h[..7]).unwrap_err(),
            Malformed::Truncated
        );
        let mut b = [0u8, 0xaa, 0, 0, 0, 0, 0, 0];
        let mut f = FragmentHeader::new_unchecked(&mut b[..]);
        f.set_next_header(17);
        f.set_frag_offset(1480);
        f.set_more_frags(true);
        f.set_ident(7);
        assert_eq!(b[1], 0xaa, "reserved byte untouched");
        b[1] = 0;
        assert_eq!(b, h);
        let mut f = FragmentHeader::new_unchecked(&mut b[..]);
        f.set_more_frags(false);
        assert_eq!((f.frag_offset(), f.more_frags()), (1480, false));
    }

    #[test]
    fn check_and_parse_failures() {
        let err = |b: &[u8]| Ipv6Packet::new_checked(b).unwrap_err();
        assert_eq!(err(&V6_UDP[..39]), Malformed::Truncated);
        assert_eq!(err(&V6_UDP[..53]), Malformed::Truncated, "payload cut");
        let mut b = V6_UDP.to_vec();
        b[0] = 0x45;
        assert_eq!(err(&b), Malformed::BadVersion);
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&b[..])),
            Err(Malformed::BadVersion)
        );
        // Payload length 0: GSO, the packet is the buffer.
        let mut b = V6_UDP.to_vec();
        b[4..6].copy_from_slice(&[0, 0]);
        let r = Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.payload_len, 14);
        let mut r = r;
        r.payload_len = 70_000;
        r.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
        assert_eq!(&b[4..6], &[0, 0], "too long for the field");
        // An unchecked short view: the walk refuses rather than panics.
        assert_eq!(
            Ipv6Packet::new_unchecked(&V6_UDP[..20]).upper_layer(),
            Err(Malformed::Truncated)
        );
    }
}
