//! The link-layer headers captures carry instead of Ethernet (pcap link types): Linux
//! cooked capture (SLL, SLL2), BSD loopback (NULL, LOOP), PPP and Cisco HDLC. Each
//! function returns what the header carries, or `None` if it is not IPv4 or IPv6 or the
//! header is cut; all read with `get`, so none panics on any input.

use super::ethernet::ethertype;

/// The SLL header's length.
pub const SLL_HEADER_LEN: usize = 16;
/// The SLL2 header's length.
pub const SLL2_HEADER_LEN: usize = 20;

/// The IP packet of a frame whose EtherType is `ty`, if it is IPv4's or IPv6's.
fn ip(ty: u16, rest: &[u8]) -> Option<&[u8]> {
    ethertype::ip_version(ty).map(|_| rest)
}

/// The IP packet of an SLL frame (16-byte header, protocol in its last two bytes).
pub fn sll(frame: &[u8]) -> Option<&[u8]> {
    ip(
        u16::from_be_bytes([*frame.get(14)?, *frame.get(15)?]),
        frame.get(SLL_HEADER_LEN..)?,
    )
}

/// The IP packet of an SLL2 frame (20-byte header, protocol first).
pub fn sll2(frame: &[u8]) -> Option<&[u8]> {
    ip(
        u16::from_be_bytes([*frame.first()?, *frame.get(1)?]),
        frame.get(SLL2_HEADER_LEN..)?,
    )
}

/// The IP packet of a BSD loopback frame: a 4-byte address family, in network order
/// (`LOOP`, `network_order`) or host order (`NULL`: read as the writer's, whose order the
/// first byte tells); AF_INET is 2 everywhere, AF_INET6 24, 28 or 30 depending on the BSD.
pub fn bsd_loopback(frame: &[u8], network_order: bool) -> Option<&[u8]> {
    let h: [u8; 4] = frame.get(..4)?.try_into().ok()?;
    let af = if network_order || h[0] == 0 {
        u32::from_be_bytes(h)
    } else {
        u32::from_le_bytes(h)
    };
    matches!(af, 2 | 24 | 28 | 30)
        .then(|| frame.get(4..))
        .flatten()
}

/// The IP packet of a PPP frame: an optional address/control pair (ff 03), then the
/// protocol, one byte when compressed (RFC 1661 section 6.5: the low bit of its first
/// byte set), else two: IPv4 (0x21), IPv6 (0x57), or Van Jacobson uncompressed TCP/IP
/// (0x2f), which carries an IPv4 header as it was.
pub fn ppp(frame: &[u8]) -> Option<&[u8]> {
    let rest = match frame {
        [0xff, 0x03, rest @ ..] => rest,
        _ => frame,
    };
    let first = *rest.first()?;
    let (proto, n) = if first & 1 == 1 {
        (u16::from(first), 1)
    } else {
        (u16::from_be_bytes([first, *rest.get(1)?]), 2)
    };
    matches!(proto, 0x0021 | 0x0057 | 0x002f)
        .then(|| rest.get(n..))
        .flatten()
}

/// The IP packet of a Cisco HDLC frame: address, control, then an EtherType.
pub fn c_hdlc(frame: &[u8]) -> Option<&[u8]> {
    ip(
        u16::from_be_bytes([*frame.get(2)?, *frame.get(3)?]),
        frame.get(4..)?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_headers_are_none() {
        let ip = [0x45u8; 20];
        let mut s = vec![0u8; 14];
        s.extend_from_slice(&[0x08, 0x00]);
        s.extend_from_slice(&ip);
        assert_eq!(sll(&s), Some(&ip[..]));
        assert_eq!(bsd_loopback(&[2, 0, 0, 0, 0x45], false), Some(&[0x45][..]));
        assert_eq!(bsd_loopback(&[0, 0, 0, 2, 0x45], true), Some(&[0x45][..]));
        assert_eq!(ppp(&[0xff, 0x03, 0x21, 0x45]), Some(&[0x45][..]));
        assert_eq!(c_hdlc(&[0x0f, 0, 0x86, 0xdd, 0x60]), Some(&[0x60][..]));
        for n in 0..s.len() {
            let f = &s[..n];
            let _ = (sll(f), sll2(f), bsd_loopback(f, false), ppp(f), c_hdlc(f));
        }
    }
}
