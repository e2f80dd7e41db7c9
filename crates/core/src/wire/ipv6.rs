//! IPv6 fixed header view (RFC 8200) and the extension-header walk that finds the
//! upper-layer header.

use super::Malformed;
use super::ipv4::be16;
use std::net::Ipv6Addr;

/// The fixed IPv6 header length.
pub const HEADER_LEN: usize = 40;

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

    /// Wraps a buffer after checking version and payload length against the buffer.
    /// A payload length of zero with a longer buffer is accepted (GSO / jumbo).
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let p = Self::new_unchecked(buffer);
        let b = p.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Malformed::BadVersion);
        }
        if HEADER_LEN + p.payload_len() as usize > b.len() {
            return Err(Malformed::Truncated);
        }
        Ok(p)
    }

    /// The payload length field (bytes after the fixed header).
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4..6)
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
        self.buffer.as_ref()[6]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[8..24]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[24..40]);
        Ipv6Addr::from(a)
    }

    /// Walks the extension headers. Returns the upper-layer protocol, its offset, and
    /// whether the packet is a fragment (`Some(true)` for the first fragment, `Some(false)`
    /// for a later one, whose transport header is not here).
    pub fn upper_layer(&self) -> Result<(u8, usize, Option<bool>), Malformed> {
        let b = self.buffer.as_ref();
        let end = self.packet_len().min(b.len());
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
                    if off + 8 > end {
                        return Err(Malformed::Truncated);
                    }
                    let offset = be16(b, off + 2..off + 4) & 0xfff8;
                    frag = Some(offset == 0);
                    nh = b[off];
                    off += 8;
                    if offset != 0 {
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
    /// Sets the payload length field.
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[4..6].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the next header field of the fixed header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[6] = v;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[7] = v;
    }
}

#[cfg(test)]
mod tests {
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
}
