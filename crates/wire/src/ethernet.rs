//! Ethernet: the Ethernet II header (IEEE 802.3), its 802.1Q / 802.1ad VLAN tags, and
//! the Network Service Header that may follow them (RFC 8300). The other link layers of
//! captures are in [`super::link`].
//!
//! [`EthernetFrame::new_checked`] fails ([`Malformed::Truncated`]) only on a buffer
//! shorter than 14 bytes; [`EthernetFrame::network`] walks the VLAN tags with `get` and
//! returns `None` on a frame cut inside them, so nothing here panics on any input.

use super::{IpVersion, Malformed};

/// The untagged Ethernet header's length: two addresses and the EtherType.
pub const HEADER_LEN: usize = 14;
/// A VLAN tag's length (TCI and the next EtherType).
pub const VLAN_TAG_LEN: usize = 4;

/// EtherTypes relayd knows by name.
pub mod ethertype {
    /// IPv4
    pub const IPV4: u16 = 0x0800;
    /// ARP
    pub const ARP: u16 = 0x0806;
    /// Transparent Ethernet bridging (an Ethernet frame inside GRE or Geneve)
    pub const TEB: u16 = 0x6558;
    /// 802.1Q VLAN tag
    pub const VLAN: u16 = 0x8100;
    /// IPv6
    pub const IPV6: u16 = 0x86dd;
    /// MPLS unicast
    pub const MPLS: u16 = 0x8847;
    /// 802.1ad service VLAN tag (QinQ)
    pub const QINQ: u16 = 0x88a8;
    /// The service VLAN tag of QinQ before 802.1ad (still seen; Suricata reads it too)
    pub const QINQ_LEGACY: u16 = 0x9100;
    /// Network Service Header (RFC 8300)
    pub const NSH: u16 = 0x894f;

    /// The EtherType of an IP packet of `version`.
    pub const fn of(version: super::IpVersion) -> u16 {
        match version {
            super::IpVersion::V4 => IPV4,
            super::IpVersion::V6 => IPV6,
        }
    }

    /// The IP version an EtherType carries, if it is IPv4's or IPv6's.
    pub const fn ip_version(ty: u16) -> Option<super::IpVersion> {
        match ty {
            IPV4 => Some(super::IpVersion::V4),
            IPV6 => Some(super::IpVersion::V6),
            _ => None,
        }
    }
}

/// A MAC address.
pub type MacAddr = [u8; 6];

/// A read/write view of an Ethernet frame (from the destination address on).
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer after checking the 14-byte header fits.
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        Ok(Self::new_unchecked(buffer))
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The destination address.
    pub fn dst_addr(&self) -> MacAddr {
        mac(&self.buffer.as_ref()[0..6])
    }

    /// The source address.
    pub fn src_addr(&self) -> MacAddr {
        mac(&self.buffer.as_ref()[6..12])
    }

    /// The outer EtherType (a VLAN tag's, if the frame is tagged).
    pub fn ethertype(&self) -> u16 {
        super::ipv4::be16(self.buffer.as_ref(), 12..14)
    }

    /// The bytes after the untagged header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// The EtherType after any 802.1Q / 802.1ad (or pre-802.1ad 0x9100) tags and the
    /// offset of what it carries, or `None` if the frame ends inside a tag.
    pub fn network(&self) -> Option<(u16, usize)> {
        let b = self.buffer.as_ref();
        let mut off = 12;
        loop {
            let ty = u16::from_be_bytes([*b.get(off)?, *b.get(off + 1)?]);
            if matches!(
                ty,
                ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_LEGACY
            ) {
                off += VLAN_TAG_LEN;
                continue;
            }
            return Some((ty, off + 2));
        }
    }
}

impl<'a> EthernetFrame<&'a [u8]> {
    /// The IP packet of an untagged IPv4 or IPv6 frame, cut to the length its header
    /// gives (a short frame's padding is not the packet's); `None` for any other
    /// EtherType (a VLAN tag's too) or an IP header that claims more than the frame has.
    pub fn into_ip_packet(self) -> Option<(IpVersion, &'a [u8])> {
        let version = ethertype::ip_version(self.ethertype())?;
        let ip = self.buffer.get(HEADER_LEN..)?;
        let len = match version {
            IpVersion::V4 => usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?])),
            IpVersion::V6 => {
                super::ipv6::HEADER_LEN
                    + usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]))
            }
        };
        Some((version, ip.get(..len)?))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[0..6].copy_from_slice(&a);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[6..12].copy_from_slice(&a);
    }

    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, v: u16) {
        self.buffer.as_mut()[12..14].copy_from_slice(&v.to_be_bytes());
    }

    /// The bytes after the untagged header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

fn mac(b: &[u8]) -> MacAddr {
    let mut m = [0; 6];
    m.copy_from_slice(b);
    m
}

/// The high-level form of an untagged Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination address.
    pub dst_addr: MacAddr,
    /// Source address.
    pub src_addr: MacAddr,
    /// EtherType.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the header of a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> Result<EthernetRepr, Malformed> {
        if f.buffer.as_ref().len() < HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        Ok(EthernetRepr {
            dst_addr: f.dst_addr(),
            src_addr: f.src_addr(),
            ethertype: f.ethertype(),
        })
    }

    /// The header's length.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut EthernetFrame<T>) {
        f.set_dst_addr(self.dst_addr);
        f.set_src_addr(self.src_addr);
        f.set_ethertype(self.ethertype);
    }
}

/// A view of a Network Service Header (RFC 8300 section 2.2): version, length, MD type
/// and the next protocol. Checked as Suricata's DecodeNSH does: version 0, MD type 1 (a
/// fixed 24-byte header) or 2 (variable), a length of at least 8 bytes that leaves
/// something after it.
#[derive(Debug, Clone, Copy)]
pub struct NshHeader<T: AsRef<[u8]>> {
    buffer: T,
}

/// NSH next-protocol values (RFC 8300 section 2.3).
pub mod nsh_next {
    /// IPv4
    pub const IPV4: u8 = 1;
    /// IPv6
    pub const IPV6: u8 = 2;
    /// Ethernet
    pub const ETHERNET: u8 = 3;
}

impl<T: AsRef<[u8]>> NshHeader<T> {
    /// Wraps a buffer after the checks above ([`Malformed::Truncated`] for a short
    /// buffer, [`Malformed::BadVersion`] or [`Malformed::BadHeaderLen`] otherwise).
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let b = buffer.as_ref();
        if b.len() < 4 {
            return Err(Malformed::Truncated);
        }
        let h = NshHeader { buffer };
        if h.version() != 0 {
            return Err(Malformed::BadVersion);
        }
        let len = h.header_len();
        let md = h.md_type();
        if len < 8 || (md == 1 && len != 24) || (md != 1 && md != 2) {
            return Err(Malformed::BadHeaderLen);
        }
        if len >= h.buffer.as_ref().len() {
            return Err(Malformed::Truncated);
        }
        Ok(h)
    }

    /// The version (0).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 6
    }

    /// The header's length in bytes (the length field counts 4-byte words).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[1] & 0x3f) * 4
    }

    /// The metadata type (1 fixed, 2 variable).
    pub fn md_type(&self) -> u8 {
        self.buffer.as_ref()[2] & 0x0f
    }

    /// The protocol that follows ([`nsh_next`]).
    pub fn next_protocol(&self) -> u8 {
        self.buffer.as_ref()[3]
    }

    /// What follows the header (in a checked view).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged_and_tagged_frames() {
        let mut f = [0u8; 14 + 28];
        let mut e = EthernetFrame::new_checked(&mut f[..]).unwrap();
        EthernetRepr {
            dst_addr: [2, 0, 0, 0, 0, 2],
            src_addr: [2, 0, 0, 0, 0, 1],
            ethertype: ethertype::IPV4,
        }
        .emit(&mut e);
        e.payload_mut()[0] = 0x45;
        e.payload_mut()[3] = 20;
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.dst_addr(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(e.network(), Some((0x0800, 14)));
        assert_eq!(e.into_ip_packet(), Some((IpVersion::V4, &f[14..34])));
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x88, 0xa8, 0, 1, 0x81, 0, 0, 2]);
        tagged.extend_from_slice(&f[12..]);
        let t = EthernetFrame::new_checked(&tagged[..]).unwrap();
        assert_eq!(t.network(), Some((0x0800, 22)));
        assert_eq!(t.into_ip_packet(), None, "tagged: not an untagged IP frame");
        let mut legacy = f[..12].to_vec();
        legacy.extend_from_slice(&[0x91, 0x00, 0, 1]);
        legacy.extend_from_slice(&f[12..]);
        let l = EthernetFrame::new_checked(&legacy[..]).unwrap();
        assert_eq!(l.network(), Some((0x0800, 18)), "a pre-802.1ad 0x9100 tag");
        for n in 0..tagged.len() {
            if let Ok(t) = EthernetFrame::new_checked(&tagged[..n]) {
                let _ = t.network();
                let _ = t.into_ip_packet();
            }
        }
        assert!(EthernetFrame::new_checked(&f[..13]).is_err());
    }

    #[test]
    fn nsh_checks() {
        let mut h = vec![0x0, 6, 1, 1];
        h.resize(24, 0);
        h.push(0x45);
        let n = NshHeader::new_checked(&h[..]).unwrap();
        assert_eq!((n.next_protocol(), n.payload()), (1, &[0x45][..]));
        assert!(NshHeader::new_checked(&h[..24]).is_err());
        h[0] = 0x40;
        assert_eq!(
            NshHeader::new_checked(&h[..]).unwrap_err(),
            Malformed::BadVersion
        );
    }
}
