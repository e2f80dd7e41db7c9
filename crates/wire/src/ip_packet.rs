//! A version-independent view of an IP packet: [`IpPacket`] is an IPv4 or IPv6 view with
//! the fields both have (addresses, traffic class, hop limit, lengths), so that code which
//! reads or rewrites them writes no `match version` of its own.
//!
//! [`IpPacket::new_checked`] fails as [`Ipv4Packet::new_checked`] or
//! [`Ipv6Packet::new_checked`] does, with [`Malformed::BadVersion`] on a version nibble
//! other than 4 or 6 and [`Malformed::Truncated`] on an empty buffer.

use super::{IpVersion, Ipv4Packet, Ipv6Packet, Malformed, checksum, ipv6};
use std::net::IpAddr;

/// An IPv4 or IPv6 packet view.
#[derive(Debug, Clone, Copy)]
pub enum IpPacket<T: AsRef<[u8]>> {
    /// An IPv4 packet.
    V4(Ipv4Packet<T>),
    /// An IPv6 packet.
    V6(Ipv6Packet<T>),
}

impl<T: AsRef<[u8]>> IpPacket<T> {
    /// Wraps a buffer whose header was checked as `version` (by a packet's layout), or is
    /// about to be written.
    #[inline]
    pub fn new_unchecked(buffer: T, version: IpVersion) -> Self {
        match version {
            IpVersion::V4 => IpPacket::V4(Ipv4Packet::new_unchecked(buffer)),
            IpVersion::V6 => IpPacket::V6(Ipv6Packet::new_unchecked(buffer)),
        }
    }

    /// Wraps a buffer after checking it by its version nibble.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        match IpVersion::of(buffer.as_ref()) {
            Some(IpVersion::V4) => Ipv4Packet::new_checked(buffer).map(IpPacket::V4),
            Some(IpVersion::V6) => Ipv6Packet::new_checked(buffer).map(IpPacket::V6),
            None if buffer.as_ref().is_empty() => Err(Malformed::Truncated),
            None => Err(Malformed::BadVersion),
        }
    }

    /// The IP version.
    #[inline]
    pub fn version(&self) -> IpVersion {
        match self {
            IpPacket::V4(_) => IpVersion::V4,
            IpPacket::V6(_) => IpVersion::V6,
        }
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> IpAddr {
        match self {
            IpPacket::V4(p) => p.src_addr().into(),
            IpPacket::V6(p) => p.src_addr().into(),
        }
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> IpAddr {
        match self {
            IpPacket::V4(p) => p.dst_addr().into(),
            IpPacket::V6(p) => p.dst_addr().into(),
        }
    }

    /// The IPv4 TOS byte or IPv6 traffic class: DSCP in the top six bits, ECN below.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        match self {
            IpPacket::V4(p) => p.tos(),
            IpPacket::V6(p) => p.traffic_class(),
        }
    }

    /// The TTL or hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        match self {
            IpPacket::V4(p) => p.ttl(),
            IpPacket::V6(p) => p.hop_limit(),
        }
    }

    /// The IPv4 DF bit; `None` for IPv6, which has none (what it means there is the
    /// caller's policy: routers never fragment IPv6, a tunnel's outer IPv4 may).
    #[inline]
    pub fn dont_frag(&self) -> Option<bool> {
        match self {
            IpPacket::V4(p) => Some(p.dont_frag()),
            IpPacket::V6(_) => None,
        }
    }

    /// The length of the fixed header: the IPv4 header with options, or IPv6's 40 bytes
    /// (extension headers are payload here).
    #[inline]
    pub fn header_len(&self) -> usize {
        match self {
            IpPacket::V4(p) => p.header_len(),
            IpPacket::V6(_) => ipv6::HEADER_LEN,
        }
    }

    /// The IPv4 protocol, or the IPv6 fixed header's next header (which may name an
    /// extension header).
    #[inline]
    pub fn next_header(&self) -> u8 {
        match self {
            IpPacket::V4(p) => p.protocol(),
            IpPacket::V6(p) => p.next_header(),
        }
    }

    /// The packet's length per its header.
    #[inline]
    pub fn packet_len(&self) -> usize {
        match self {
            IpPacket::V4(p) => p.packet_len(),
            IpPacket::V6(p) => p.packet_len(),
        }
    }

    /// The pseudo-header sum of an upper-layer checksum (TCP, UDP, ICMPv6) over `len`
    /// bytes of protocol `proto` carried by this packet.
    #[inline]
    pub fn pseudo_sum(&self, proto: u8, len: usize) -> u64 {
        match self {
            IpPacket::V4(p) => checksum::pseudo_v4(p.src_addr(), p.dst_addr(), proto, len as u32),
            IpPacket::V6(p) => checksum::pseudo_v6(p.src_addr(), p.dst_addr(), proto, len as u32),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IpPacket<T> {
    /// Sets the TTL or hop limit (the IPv4 header checksum is the caller's to fill).
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        match self {
            IpPacket::V4(p) => p.set_ttl(v),
            IpPacket::V6(p) => p.set_hop_limit(v),
        }
    }

    /// Sets the IPv4 TOS byte or IPv6 traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, v: u8) {
        match self {
            IpPacket::V4(p) => p.set_tos(v),
            IpPacket::V6(p) => p.set_traffic_class(v),
        }
    }

    /// Fills the IPv4 header checksum (IPv6 has none).
    #[inline]
    pub fn fill_checksum(&mut self) {
        if let IpPacket::V4(p) = self {
            p.fill_checksum();
        }
    }

    /// Rewrites the header after the bytes from the transport offset on were replaced, so
    /// that the packet is `total` bytes carrying `protocol`: the IPv4 total length,
    /// protocol and header checksum, or the IPv6 payload length and the fixed header's
    /// next header.
    ///
    /// # Panics
    /// If an IPv6 `total` is below the fixed header's length (the caller's arithmetic);
    /// `total` must fit the length field (it is truncated to 16 bits).
    #[inline]
    pub fn set_len_and_protocol(&mut self, total: usize, protocol: u8) {
        match self {
            IpPacket::V4(ip) => {
                ip.set_total_len(total as u16);
                ip.set_protocol(protocol);
                ip.fill_checksum();
            }
            IpPacket::V6(ip) => {
                ip.set_payload_len((total - ipv6::HEADER_LEN) as u16);
                ip.set_next_header(protocol);
            }
        }
    }

    /// Decreases the TTL or hop limit as a router forwarding the packet does (and fills
    /// the IPv4 header checksum), or returns false, leaving it as it was, if it would
    /// reach 0.
    #[inline]
    pub fn decrement_hop_limit(&mut self) -> bool {
        match self.hop_limit().checked_sub(1).filter(|h| *h > 0) {
            Some(h) => {
                self.set_hop_limit(h);
                self.fill_checksum();
                true
            }
            None => false,
        }
    }

    /// The bytes after the fixed header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        match self {
            IpPacket::V4(p) => p.payload_mut(),
            IpPacket::V6(p) => p.payload_mut(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{V4_UDP, V6_UDP};
    use super::*;

    #[test]
    fn both_versions_read_alike() {
        for pkt in [V4_UDP, V6_UDP] {
            let ip = IpPacket::new_checked(pkt).unwrap();
            assert_eq!(ip.next_header(), 17);
            assert_eq!(ip.packet_len(), pkt.len());
            let mut b = pkt.to_vec();
            let mut m = IpPacket::new_checked(&mut b[..]).unwrap();
            let h = m.hop_limit();
            assert!(m.decrement_hop_limit());
            assert_eq!(m.hop_limit(), h - 1);
            if let IpPacket::V4(p) = m {
                assert!(p.verify_checksum());
            }
        }
        assert_eq!(
            IpPacket::new_checked(&[][..]).unwrap_err(),
            Malformed::Truncated
        );
        assert_eq!(
            IpPacket::new_checked(&[0x50][..]).unwrap_err(),
            Malformed::BadVersion
        );
    }
}
