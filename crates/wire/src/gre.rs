//! GRE header view (RFC 2784, with RFC 2890's key and sequence number): the flags, the
//! version, the protocol type (an EtherType) and the optional checksum, key and sequence
//! number, whose presence the flags give.
//!
//! [`GrePacket::new_checked`] fails with [`Malformed::Truncated`] on a buffer shorter than
//! the header its flags announce, and with [`Malformed::BadVersion`] on a version other
//! than 0 (1 is PPTP's enhanced GRE, which relayd's own tunnels never send).
//!
//! A receiver that must read every GRE a host accepts (the IDS, as Suricata's
//! `DecodeGRE`) walks the header with [`GreHeader::parse`]: version 0 with RFC 1701's
//! source routes, and version 1 (PPTP, RFC 2637).

use super::Malformed;
use super::ipv4::{be16, be32};

/// The GRE header's length without optional fields.
pub const HEADER_LEN: usize = 4;

const F_CSUM: u16 = 0x8000;
const F_KEY: u16 = 0x2000;
const F_SEQ: u16 = 0x1000;

/// A read/write view of a GRE packet.
#[derive(Debug, Clone, Copy)]
pub struct GrePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GrePacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        GrePacket { buffer }
    }

    /// Wraps a buffer after checking the header its flags announce fits.
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

    fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), 0..2)
    }

    /// The version (0 for GRE).
    pub fn version(&self) -> u8 {
        (self.flags() & 0x7) as u8
    }

    /// True if the checksum field is present.
    pub fn has_checksum(&self) -> bool {
        self.flags() & F_CSUM != 0
    }

    /// The protocol type: the EtherType of the payload.
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), 2..4)
    }

    /// The header's length with its optional fields.
    pub fn header_len(&self) -> usize {
        let f = self.flags();
        HEADER_LEN
            + if f & F_CSUM != 0 { 4 } else { 0 }
            + if f & F_KEY != 0 { 4 } else { 0 }
            + if f & F_SEQ != 0 { 4 } else { 0 }
    }

    /// The key, if present.
    pub fn key(&self) -> Option<u32> {
        let f = self.flags();
        let at = HEADER_LEN + if f & F_CSUM != 0 { 4 } else { 0 };
        (f & F_KEY != 0).then(|| be32(self.buffer.as_ref(), at..at + 4))
    }

    /// The sequence number, if present.
    pub fn seq_no(&self) -> Option<u32> {
        let f = self.flags();
        let at = self.header_len() - 4;
        (f & F_SEQ != 0).then(|| be32(self.buffer.as_ref(), at..at + 4))
    }

    /// What follows the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// The high-level form of a GRE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GreRepr {
    /// The payload's EtherType.
    pub protocol: u16,
    /// The key, if any.
    pub key: Option<u32>,
    /// The sequence number, if any.
    pub seq_no: Option<u32>,
}

impl GreRepr {
    /// Reads a header (a checksum field is accepted and not verified).
    pub fn parse<T: AsRef<[u8]>>(p: &GrePacket<T>) -> Result<GreRepr, Malformed> {
        let p = GrePacket::new_checked(p.buffer.as_ref())?;
        Ok(GreRepr {
            protocol: p.protocol(),
            key: p.key(),
            seq_no: p.seq_no(),
        })
    }

    /// The header's length (no checksum is written).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
            + if self.key.is_some() { 4 } else { 0 }
            + if self.seq_no.is_some() { 4 } else { 0 }
    }

    /// Writes the header.
    ///
    /// # Panics
    /// If the buffer is shorter than [`GreRepr::header_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut GrePacket<T>) {
        let b = p.buffer.as_mut();
        let mut flags = 0u16;
        let mut at = HEADER_LEN;
        if let Some(k) = self.key {
            flags |= F_KEY;
            b[at..at + 4].copy_from_slice(&k.to_be_bytes());
            at += 4;
        }
        if let Some(s) = self.seq_no {
            flags |= F_SEQ;
            b[at..at + 4].copy_from_slice(&s.to_be_bytes());
        }
        b[0..2].copy_from_slice(&flags.to_be_bytes());
        b[2..4].copy_from_slice(&self.protocol.to_be_bytes());
    }
}

/// PPP's EtherType: the only payload of PPTP's enhanced GRE (version 1).
pub const PROTO_PPP: u16 = 0x880b;

const F_ROUTE: u16 = 0x4000;
const F_SSR: u16 = 0x0800;
const F_RECUR: u16 = 0x0700;
const F_ACK: u16 = 0x0080;
const F_VFLAGS: u16 = 0x0078;

/// A GRE header as a receiver walks it: any header a host accepts, of either version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GreHeader {
    /// 0 (RFC 1701/2784/2890) or 1 (PPTP's enhanced GRE, RFC 2637).
    pub version: u8,
    /// The payload's EtherType.
    pub protocol: u16,
    /// The sequence number field is present (ERSPAN type II has one, type I not).
    pub has_seq: bool,
    /// The header's length: the payload starts there.
    pub len: usize,
}

impl GreHeader {
    /// Walks the GRE header at the start of `b` as Suricata's `DecodeGRE` does, or `None`
    /// for a header no host accepts or one cut short:
    /// - version 0: no recursion control or reserved flags; the checksum and offset word
    ///   (present with the checksum or the routing flag), key and sequence number, then
    ///   RFC 1701 source route entries up to the null one;
    /// - version 1 (PPTP): PPP only, key required, no checksum, routes or strict source
    ///   route, and a non-zero payload length; optional sequence and acknowledgement
    ///   numbers.
    ///
    /// The route walk reads at least four bytes per entry, so it ends within `b`.
    pub fn parse(b: &[u8]) -> Option<GreHeader> {
        let flags = be16_at(b, 0)?;
        let protocol = be16_at(b, 2)?;
        let has = |f: u16| flags & f != 0;
        let mut len = HEADER_LEN;
        let version = (flags & 0x7) as u8;
        match version {
            0 => {
                if has(F_RECUR) || has(F_VFLAGS) {
                    return None;
                }
                len += 4 * usize::from(has(F_KEY)) + 4 * usize::from(has(F_SEQ));
                if has(F_CSUM) || has(F_ROUTE) {
                    len += 4;
                }
                if has(F_ROUTE) {
                    loop {
                        let af = be16_at(b, len)?;
                        let sre_len = *b.get(len + 3)?;
                        len += 4;
                        if af == 0 && sre_len == 0 {
                            break;
                        }
                        len += usize::from(sre_len);
                    }
                }
            }
            1 => {
                let refused = F_CSUM | F_ROUTE | F_SSR | F_RECUR | F_VFLAGS;
                if flags & refused != 0 || protocol != PROTO_PPP || !has(F_KEY) {
                    return None;
                }
                // The key's first half is the payload length: a packet without payload
                // carries nothing.
                if be16_at(b, 4)? == 0 {
                    return None;
                }
                len += 4 + 4 * usize::from(has(F_SEQ)) + 4 * usize::from(has(F_ACK));
            }
            _ => return None,
        }
        (b.len() >= len).then_some(GreHeader {
            version,
            protocol,
            has_seq: has(F_SEQ),
            len,
        })
    }
}

fn be16_at(b: &[u8], at: usize) -> Option<u16> {
    let x = b.get(at..at + 2)?;
    Some(u16::from_be_bytes([x[0], x[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let r = GreRepr {
            protocol: 0x0800,
            key: Some(7),
            seq_no: Some(9),
        };
        let mut b = vec![0u8; r.header_len() + 2];
        r.emit(&mut GrePacket::new_unchecked(&mut b[..]));
        let p = GrePacket::new_checked(&b[..]).unwrap();
        assert_eq!(GreRepr::parse(&p), Ok(r));
        assert_eq!(p.payload().len(), 2);
        for n in 0..r.header_len() {
            assert!(GrePacket::new_checked(&b[..n]).is_err());
        }
        b[1] = 1;
        assert_eq!(
            GrePacket::new_checked(&b[..]).unwrap_err(),
            Malformed::BadVersion
        );
    }

    #[test]
    fn receivers_walk_both_versions_and_source_routes() {
        // Version 0 with checksum, key and a source route of one 4-byte entry.
        let mut b = vec![0xa0, 0x00, 0x08, 0x00, 0, 0, 0, 0, 0, 0, 0, 7];
        b[0] |= 0x40; // routing present
        b.extend_from_slice(&[0x08, 0x00, 0, 4, 1, 2, 3, 4, 0, 0, 0, 0, 0x45]);
        let h = GreHeader::parse(&b).unwrap();
        assert_eq!((h.version, h.protocol, h.len), (0, 0x0800, 24));
        assert_eq!(b.get(h.len), Some(&0x45));
        // A route list without its null entry is cut short.
        assert_eq!(GreHeader::parse(&b[..20]), None);
        // Recursion control is refused.
        assert_eq!(GreHeader::parse(&[0x01, 0, 0x08, 0]), None);
        // PPTP: key (payload length 5, call id), sequence and ack numbers.
        let pptp = [
            0x30, 0x81, 0x88, 0x0b, 0, 5, 0, 1, 0, 0, 0, 9, 0, 0, 0, 8, 0xff,
        ];
        let h = GreHeader::parse(&pptp).unwrap();
        assert_eq!(
            (h.version, h.protocol, h.len, h.has_seq),
            (1, PROTO_PPP, 16, true)
        );
        // PPTP without payload, without key, or carrying IPv4 is refused.
        let mut empty = pptp;
        empty[5] = 0;
        assert_eq!(GreHeader::parse(&empty), None);
        assert_eq!(
            GreHeader::parse(&[0x10, 0x81, 0x88, 0x0b, 0, 0, 0, 1]),
            None
        );
        assert_eq!(
            GreHeader::parse(&[0x20, 0x01, 0x08, 0x00, 0, 5, 0, 1]),
            None
        );
        // Every prefix of a valid header is refused, never a panic.
        for n in 0..pptp.len() - 1 {
            assert!(GreHeader::parse(&pptp[..n]).is_none() || n >= 16);
        }
    }
}
