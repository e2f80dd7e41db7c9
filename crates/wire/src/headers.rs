//! A parsed IP packet: its buffer and its [`Layout`], giving typed views of the IP header
//! (either version), the transport header and the 5-tuple without offsets or `match
//! version` at the call site. Services reach it through `Packet::headers` and
//! `Packet::headers_mut` in relay-core, which keep the layout parsed once.
//!
//! [`Headers::new_checked`] fails as [`Layout::parse`] does; a view made from a layout
//! that [`Layout::parse`] returned for the same bytes never panics.

use super::{
    FiveTuple, IcmpPacket, IpPacket, IpVersion, Layout, Malformed, TcpPacket, UdpPacket, proto,
    tcp, udp,
};

/// A view of an IP packet whose layout was parsed.
#[derive(Debug, Clone, Copy)]
pub struct Headers<T: AsRef<[u8]>> {
    buffer: T,
    layout: Layout,
}

impl<T: AsRef<[u8]>> Headers<T> {
    /// Wraps a buffer whose layout is `layout` (as [`Layout::parse`] found it for these
    /// bytes; another layout may make the getters panic).
    #[inline]
    pub const fn new_unchecked(buffer: T, layout: Layout) -> Self {
        Headers { buffer, layout }
    }

    /// Parses the layout of a whole packet and wraps it.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Malformed> {
        let layout = Layout::parse(buffer.as_ref(), false)?;
        Ok(Headers { buffer, layout })
    }

    /// Returns the underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The packet's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The packet's layout.
    #[inline]
    pub const fn layout(&self) -> Layout {
        self.layout
    }

    /// The IP version.
    #[inline]
    pub const fn version(&self) -> IpVersion {
        self.layout.version
    }

    /// The IP header.
    #[inline]
    pub fn ip(&self) -> IpPacket<&[u8]> {
        IpPacket::new_unchecked(self.buffer.as_ref(), self.layout.version)
    }

    /// True if the transport header follows the fixed IP header directly: always for
    /// IPv4, for IPv6 when there is no extension header (what ESP transport mode and
    /// IPComp insert and remove goes there, so extension headers are left alone).
    #[inline]
    pub fn direct(&self) -> bool {
        self.layout.version == IpVersion::V4 || self.ip().next_header() == self.layout.proto
    }

    /// The transport header and data (from the transport offset to the packet's end),
    /// `None` for a later fragment.
    #[inline]
    pub fn l4(&self) -> Option<&[u8]> {
        self.buffer.as_ref().get(self.layout.l4?..self.layout.len)
    }

    /// The TCP segment, if this is TCP with a whole header.
    #[inline]
    pub fn tcp(&self) -> Option<TcpPacket<&[u8]>> {
        (self.layout.proto == proto::TCP)
            .then(|| TcpPacket::new_checked(self.l4()?).ok())
            .flatten()
    }

    /// The UDP datagram, if this is UDP with a whole header and a valid length.
    #[inline]
    pub fn udp(&self) -> Option<UdpPacket<&[u8]>> {
        (self.layout.proto == proto::UDP)
            .then(|| UdpPacket::new_checked(self.l4()?).ok())
            .flatten()
    }

    /// The ICMP or ICMPv6 message, if this is one with a whole header.
    #[inline]
    pub fn icmp(&self) -> Option<IcmpPacket<&[u8]>> {
        matches!(self.layout.proto, proto::ICMP | proto::ICMPV6)
            .then(|| IcmpPacket::new_checked(self.l4()?).ok())
            .flatten()
    }

    /// The packet's addresses, protocol and ports.
    #[inline]
    pub fn five_tuple(&self) -> FiveTuple {
        FiveTuple::new(&self.ip(), self.layout.proto, self.l4())
    }

    /// The pseudo-header sum of the transport checksum (0 for ICMPv4, which has none).
    #[inline]
    pub fn l4_pseudo_sum(&self) -> Option<u64> {
        let l4 = self.layout.l4?;
        Some(match self.layout.proto {
            proto::ICMP => 0,
            p => self.ip().pseudo_sum(p, self.layout.len.saturating_sub(l4)),
        })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Headers<T> {
    /// The IP header, writable. A change to its lengths, protocol or fragment fields
    /// changes the layout: `Packet::headers_mut` notices and parses it again.
    #[inline]
    pub fn ip_mut(&mut self) -> IpPacket<&mut [u8]> {
        IpPacket::new_unchecked(self.buffer.as_mut(), self.layout.version)
    }

    /// The transport header and data, writable (`None` for a later fragment).
    #[inline]
    pub fn l4_mut(&mut self) -> Option<&mut [u8]> {
        let (l4, len) = (self.layout.l4?, self.layout.len);
        self.buffer.as_mut().get_mut(l4..len)
    }

    /// The TCP segment, writable, if this is TCP with a whole header.
    #[inline]
    pub fn tcp_mut(&mut self) -> Option<TcpPacket<&mut [u8]>> {
        if self.layout.proto != proto::TCP {
            return None;
        }
        TcpPacket::new_checked(self.l4_mut()?).ok()
    }

    /// The UDP datagram, writable, if this is UDP with a whole header.
    #[inline]
    pub fn udp_mut(&mut self) -> Option<UdpPacket<&mut [u8]>> {
        if self.layout.proto != proto::UDP {
            return None;
        }
        UdpPacket::new_checked(self.l4_mut()?).ok()
    }

    /// Recomputes the transport checksum over the packet's addresses as they are now:
    /// TCP, UDP (a UDP/IPv4 checksum of 0, "none", stays 0) and ICMPv6; what has no
    /// whole transport header, or another protocol, is left as it is.
    #[inline]
    pub fn fill_l4_checksum(&mut self) {
        let Some(pseudo) = self.l4_pseudo_sum() else {
            return;
        };
        let (version, p) = (self.layout.version, self.layout.proto);
        let Some(seg) = self.l4_mut() else {
            return;
        };
        match p {
            proto::TCP if seg.len() >= tcp::HEADER_LEN => {
                TcpPacket::new_unchecked(seg).fill_checksum(pseudo);
            }
            proto::UDP if seg.len() >= udp::HEADER_LEN => {
                let mut u = UdpPacket::new_unchecked(seg);
                if !(version == IpVersion::V4 && u.checksum() == 0) {
                    u.fill_checksum(pseudo);
                }
            }
            proto::ICMPV6 if version == IpVersion::V6 && seg.len() >= 4 => {
                IcmpPacket::new_unchecked(seg).fill_checksum(pseudo);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::captures::{V4_UDP, V6_TCP_SYN, V6_UDP};
    use super::*;

    #[test]
    fn views_of_parsed_packets() {
        for pkt in [V4_UDP, V6_UDP, V6_TCP_SYN] {
            let h = Headers::new_checked(pkt).unwrap();
            assert!(h.direct());
            let t = h.five_tuple();
            assert_eq!(t.src, h.ip().src_addr());
            assert!(t.ports.is_some());
            assert_eq!(h.tcp().is_some(), h.layout().proto == proto::TCP);
            assert_eq!(h.udp().is_some(), h.layout().proto == proto::UDP);
            let mut b = pkt.to_vec();
            let mut m = Headers::new_checked(&mut b[..]).unwrap();
            m.fill_l4_checksum();
            assert_eq!(&b[..], pkt, "a captured checksum is already right");
        }
        assert!(Headers::new_checked(&V4_UDP[..10]).is_err());
    }
}
