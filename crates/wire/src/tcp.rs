//! TCP header view (RFC 9293): ports, sequence numbers, flags, header length and checksum,
//! and the fixed header's high-level form [`TcpRepr`].
//!
//! [`TcpPacket::new_checked`] fails, and only fails, on:
//! - a buffer shorter than 20 bytes: [`Malformed::Truncated`];
//! - a data offset below 5 (a header shorter than 20 bytes): [`Malformed::BadHeaderLen`];
//! - a header (with options) longer than the buffer: [`Malformed::Truncated`].
//!
//! After the check no getter or setter panics; a setter that changes the header length
//! can make the view claim more than the buffer holds, which the payload and options
//! getters clamp to and [`TcpPacket::check_len`] finds again.

use super::ipv4::{be16, be32};
use super::{Malformed, checksum};

mod field {
    use std::ops::Range;
    pub(super) const SRC_PORT: Range<usize> = 0..2;
    pub(super) const DST_PORT: Range<usize> = 2..4;
    pub(super) const SEQ: Range<usize> = 4..8;
    pub(super) const ACK: Range<usize> = 8..12;
    pub(super) const DATA_OFF: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const WINDOW: Range<usize> = 14..16;
    pub(super) const CHECKSUM: Range<usize> = 16..18;
    pub(super) const URGENT: Range<usize> = 18..20;
}

/// The minimum TCP header length.
pub const HEADER_LEN: usize = 20;
/// The largest TCP header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// TCP flag bits as they sit in byte 13.
pub mod flags {
    /// FIN
    pub const FIN: u8 = 0x01;
    /// SYN
    pub const SYN: u8 = 0x02;
    /// RST
    pub const RST: u8 = 0x04;
    /// PSH
    pub const PSH: u8 = 0x08;
    /// ACK
    pub const ACK: u8 = 0x10;
    /// URG
    pub const URG: u8 = 0x20;
    /// ECE (RFC 3168)
    pub const ECE: u8 = 0x40;
    /// CWR (RFC 3168)
    pub const CWR: u8 = 0x80;
}

/// A read/write view of a TCP segment (header and data).
#[derive(Debug, Clone, Copy)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wraps a buffer after checking that the header (with options) fits (see the module
    /// docs for what fails).
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the header its data offset claims.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(Malformed::BadHeaderLen);
        }
        if hl > len {
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

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgement number.
    pub fn ack(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::DATA_OFF] >> 4) as usize) * 4
    }

    /// The flag byte (see [`flags`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Receive window.
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT)
    }

    /// The options: from byte 20 to the end of the header.
    pub fn options(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = self.header_len().min(b.len());
        &b[HEADER_LEN.min(end)..end]
    }

    /// The segment's data.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[self.header_len().min(b.len())..]
    }

    /// True if the checksum is right given the pseudo-header sum (see `checksum::pseudo_v4`).
    pub fn verify_checksum(&self, pseudo: u64) -> bool {
        checksum::fold(checksum::sum(pseudo, self.buffer.as_ref())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the acknowledgement number.
    pub fn set_ack(&mut self, v: u32) {
        self.buffer.as_mut()[field::ACK].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the header length in bytes (a multiple of 4, at most 60: the low two bits and
    /// anything above are cut off); the reserved bits are cleared.
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::DATA_OFF] = ((len / 4).min(15) as u8) << 4;
    }

    /// Sets the flag byte (see [`flags`]).
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    /// Sets the receive window.
    pub fn set_window(&mut self, v: u16) {
        self.buffer.as_mut()[field::WINDOW].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the checksum field as it is (see [`TcpPacket::fill_checksum`]).
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the urgent pointer.
    pub fn set_urgent(&mut self, v: u16) {
        self.buffer.as_mut()[field::URGENT].copy_from_slice(&v.to_be_bytes());
    }

    /// The options, writable (see [`TcpPacket::options`]).
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        let end = hl.min(b.len());
        &mut b[HEADER_LEN.min(end)..end]
    }

    /// The segment's data, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        let start = hl.min(b.len());
        &mut b[start..]
    }

    /// Recomputes the checksum over the whole buffer given the pseudo-header sum
    /// ([`super::IpRepr::pseudo_sum`], or `checksum::pseudo_v4` / `pseudo_v6`).
    pub fn fill_checksum(&mut self, pseudo: u64) {
        let b = self.buffer.as_mut();
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let c = !checksum::fold(checksum::sum(pseudo, b));
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

/// The high-level form of a TCP header: the fixed fields, and how many bytes of options
/// follow them (the options themselves are the caller's to read or write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// The flag byte (see [`flags`]).
    pub flags: u8,
    /// Receive window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Bytes of options after the fixed header: emitted rounded up to a multiple of 4 and
    /// at most 40 (see [`TcpRepr::header_len`]).
    pub options_len: usize,
}

impl TcpRepr {
    /// Reads a header, checking it as [`TcpPacket::new_checked`] does. The checksum is not
    /// verified (that needs the IP addresses: [`TcpPacket::verify_checksum`]).
    pub fn parse<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Result<TcpRepr, Malformed> {
        p.check_len()?;
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq(),
            ack: p.ack(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
            options_len: p.header_len() - HEADER_LEN,
        })
    }

    /// The header length this form emits: 20 plus the options, rounded up to a multiple
    /// of 4, at most 60.
    pub const fn header_len(&self) -> usize {
        let l = HEADER_LEN + self.options_len;
        let l = l.div_ceil(4) * 4;
        if l > MAX_HEADER_LEN {
            MAX_HEADER_LEN
        } else {
            l
        }
    }

    /// Writes the header into `p` with checksum 0 and the options area untouched. Once
    /// options and data are in place, [`TcpPacket::fill_checksum`] fills the checksum.
    ///
    /// # Panics
    /// If `p`'s buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut TcpPacket<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq(self.seq);
        p.set_ack(self.ack);
        p.set_header_len(self.header_len());
        p.set_flags(self.flags);
        p.set_window(self.window);
        p.set_checksum(0);
        p.set_urgent(self.urgent);
    }

    /// The sequence space the segment occupies: its data, plus one for SYN and one for
    /// FIN (RFC 9293 3.4).
    pub const fn segment_len(&self, payload_len: u32) -> u32 {
        let mut n = payload_len;
        if self.flags & flags::SYN != 0 {
            n = n.wrapping_add(1);
        }
        if self.flags & flags::FIN != 0 {
            n = n.wrapping_add(1);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{V4_TCP_RST, V4_TCP_SYN, V6_TCP_RST, V6_TCP_SYN, l4, pseudo_of};
    use super::*;

    #[test]
    fn captured_syns_parse_and_verify() {
        for (pkt, port, seq, window, mss) in [
            (V4_TCP_SYN, 50650, 3130723432, 64480, 1240u16),
            (V6_TCP_SYN, 55318, 1303574562, 64660, 1220),
        ] {
            let t = TcpPacket::new_checked(l4(pkt)).unwrap();
            assert!(t.verify_checksum(pseudo_of(pkt)));
            let r = TcpRepr::parse(&t).unwrap();
            assert_eq!(
                r,
                TcpRepr {
                    src_port: port,
                    dst_port: 81,
                    seq,
                    ack: 0,
                    flags: flags::SYN,
                    window,
                    urgent: 0,
                    options_len: 20,
                }
            );
            assert_eq!(r.header_len(), 40);
            assert_eq!(r.segment_len(0), 1);
            // MSS option first: kind 2, length 4.
            assert_eq!(
                &t.options()[..4],
                &[&[2u8, 4][..], &mss.to_be_bytes()].concat()[..]
            );
            assert!(t.payload().is_empty());
        }
    }

    #[test]
    fn emitted_resets_are_the_kernels_bytes() {
        for (pkt, port, ack) in [
            (V4_TCP_RST, 50650, 3130723433),
            (V6_TCP_RST, 55318, 1303574563),
        ] {
            let r = TcpRepr {
                src_port: 81,
                dst_port: port,
                seq: 0,
                ack,
                flags: flags::RST | flags::ACK,
                window: 0,
                urgent: 0,
                options_len: 0,
            };
            let mut out = [0x55u8; HEADER_LEN];
            let mut t = TcpPacket::new_unchecked(&mut out[..]);
            r.emit(&mut t);
            t.fill_checksum(pseudo_of(pkt));
            assert_eq!(&out[..], l4(pkt));
            assert_eq!(TcpRepr::parse(&TcpPacket::new_unchecked(l4(pkt))), Ok(r));
        }
    }

    #[test]
    fn emit_leaves_options_and_data_to_the_caller() {
        let syn = l4(V4_TCP_SYN);
        let r = TcpRepr::parse(&TcpPacket::new_unchecked(syn)).unwrap();
        let mut out = vec![0u8; syn.len()];
        let mut t = TcpPacket::new_unchecked(&mut out[..]);
        r.emit(&mut t);
        t.options_mut().copy_from_slice(&syn[20..40]);
        assert!(t.payload_mut().is_empty());
        t.fill_checksum(pseudo_of(V4_TCP_SYN));
        assert_eq!(&out[..], syn);
    }

    #[test]
    fn setters_touch_only_their_field() {
        let mut b = l4(V4_TCP_SYN).to_vec();
        let mut t = TcpPacket::new_unchecked(&mut b[..]);
        t.set_src_port(1);
        t.set_dst_port(2);
        t.set_seq(3);
        t.set_ack(4);
        t.set_flags(flags::SYN | flags::ACK | flags::ECE);
        t.set_window(5);
        t.set_urgent(6);
        t.set_checksum(7);
        assert_eq!(
            (
                t.src_port(),
                t.dst_port(),
                t.seq(),
                t.ack(),
                t.window(),
                t.urgent()
            ),
            (1, 2, 3, 4, 5, 6)
        );
        assert_eq!((t.flags(), t.checksum(), t.header_len()), (0x52, 7, 40));
        t.set_header_len(24);
        assert_eq!(
            (t.header_len(), t.options().len(), t.payload().len()),
            (24, 4, 16)
        );
        t.set_header_len(60);
        assert_eq!(t.check_len(), Err(Malformed::Truncated));
        assert_eq!((t.options().len(), t.payload().len()), (20, 0), "clamped");
        assert_eq!(&b[20..], &l4(V4_TCP_SYN)[20..], "options untouched");
    }

    #[test]
    fn rejects_bad_input() {
        let syn = l4(V4_TCP_SYN);
        let err = |b: &[u8]| TcpPacket::new_checked(b).unwrap_err();
        assert_eq!(err(&syn[..19]), Malformed::Truncated);
        assert_eq!(err(&syn[..39]), Malformed::Truncated, "options cut off");
        let mut b = syn.to_vec();
        b[12] = 0x40;
        assert_eq!(err(&b), Malformed::BadHeaderLen);
        assert_eq!(
            TcpRepr::parse(&TcpPacket::new_unchecked(&b[..])),
            Err(Malformed::BadHeaderLen)
        );
    }

    #[test]
    fn header_len_rounds_and_caps_the_options() {
        let mut r = TcpRepr::parse(&TcpPacket::new_unchecked(l4(V4_TCP_RST))).unwrap();
        for (opts, hl) in [(0, 20), (1, 24), (4, 24), (39, 60), (40, 60), (100, 60)] {
            r.options_len = opts;
            assert_eq!(r.header_len(), hl, "{opts} bytes of options");
        }
        r.flags = flags::SYN | flags::FIN;
        assert_eq!(r.segment_len(10), 12);
    }
}
