//! Where the headers of an IP packet are ([`Layout`]), found once by [`Layout::parse`]:
//! the version, the length its header gives, the upper-layer protocol after IPv6
//! extension headers and the transport offset. A packet's typed views start from it.

use super::{IpVersion, Ipv4Packet, Ipv6Packet, Malformed, TcpPacket, UdpPacket, proto};

/// Where the headers of a packet are, found once and cached until the packet changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// IP version.
    pub version: IpVersion,
    /// The packet's length per its IP header (at most the buffer length).
    pub len: usize,
    /// The upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Offset of the upper-layer header, or `None` for a non-first fragment.
    pub l4: Option<usize>,
    /// True if the packet is a fragment (first or later).
    pub fragment: bool,
}

impl Layout {
    /// Finds the L3/L4 layout of the IP packet in `data` and checks the transport header
    /// of a first fragment or whole packet fits. A partial copy (`partial`: copy range) is
    /// checked only as far as it goes.
    #[inline]
    pub fn parse(data: &[u8], partial: bool) -> Result<Layout, Malformed> {
        let first = *data.first().ok_or(Malformed::Truncated)?;
        let layout = match first >> 4 {
            4 => {
                let p = if partial {
                    // Only the header can be checked against a partial copy.
                    let p = Ipv4Packet::new_unchecked(data);
                    if data.len() < super::ipv4::HEADER_LEN
                        || p.header_len() < super::ipv4::HEADER_LEN
                    {
                        return Err(Malformed::BadHeaderLen);
                    }
                    if p.header_len() > data.len() {
                        return Err(Malformed::Truncated);
                    }
                    // A total length shorter than the header (0 is GSO's "see the buffer")
                    // would put the payload's end before its start.
                    if p.total_len() != 0 && (p.total_len() as usize) < p.header_len() {
                        return Err(Malformed::BadHeaderLen);
                    }
                    p
                } else {
                    Ipv4Packet::new_checked(data)?
                };
                let len = p.packet_len().min(data.len());
                Layout {
                    version: IpVersion::V4,
                    len,
                    proto: p.protocol(),
                    l4: (p.frag_offset() == 0).then_some(p.header_len()),
                    fragment: p.is_fragment(),
                }
            }
            6 => {
                let p = Ipv6Packet::new_unchecked(data);
                if data.len() < super::ipv6::HEADER_LEN {
                    return Err(Malformed::Truncated);
                }
                if !partial {
                    Ipv6Packet::new_checked(data)?;
                }
                let len = p.packet_len().min(data.len());
                let (proto, off, frag) = p.upper_layer()?;
                Layout {
                    version: IpVersion::V6,
                    len,
                    proto,
                    l4: (frag != Some(false)).then_some(off),
                    fragment: frag.is_some(),
                }
            }
            _ => return Err(Malformed::BadVersion),
        };
        if let (Some(off), false) = (layout.l4, partial) {
            let l4 = data.get(off..layout.len).ok_or(Malformed::Truncated)?;
            // A first fragment may legitimately carry less than a whole transport header only
            // in attacks (RFC 1858): treat it as malformed too.
            match layout.proto {
                proto::TCP => {
                    TcpPacket::new_checked(l4)?;
                }
                proto::UDP if !layout.fragment => {
                    UdpPacket::new_checked(l4)?;
                }
                proto::UDP if l4.len() < super::udp::HEADER_LEN => {
                    return Err(Malformed::Truncated);
                }
                proto::ICMP | proto::ICMPV6 if l4.len() < super::icmp::HEADER_LEN => {
                    return Err(Malformed::Truncated);
                }
                _ => {}
            }
        }
        Ok(layout)
    }
}
