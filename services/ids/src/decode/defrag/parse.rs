//! Reading one IPv4 or IPv6 fragment: its train key, offset, payload and the header a
//! reassembled packet takes from it, and the checks the destination host makes before
//! a fragment reaches its reassembly queue (Linux's `ip_rcv_core` and `ipv6_frag_rcv`).

use super::Key;
use relay_core::wire::ipv6::{FRAGMENT_HEADER_LEN, FragmentHeader};
use relay_core::wire::{Ipv4Packet, Ipv6Packet, ipv4, ipv6};

/// IPv6 extension headers walked to find the fragment header (and past it, for the
/// RFC 7112 check of a first fragment).
const MAX_EXT_HEADERS: usize = 8;
/// Where the IPv6 fixed header's next-header field is.
const NXT_HDR_AT: usize = 6;

/// One fragment, read.
#[derive(Debug)]
pub(super) struct Frag<'a> {
    pub(super) key: Key,
    pub(super) v6: bool,
    /// Payload offset in the train.
    pub(super) off: usize,
    pub(super) more: bool,
    pub(super) payload: &'a [u8],
    /// The header a reassembled packet takes from its first fragment (IPv4 header; IPv6
    /// header and the extension headers before the fragment header).
    pub(super) hdr: &'a [u8],
    /// IPv6: the index of the next-header byte that named the fragment header, and the
    /// value it gets once the fragment header is gone.
    pub(super) nh_fix: Option<(usize, u8)>,
}

/// What a packet is to reassembly.
#[derive(Debug)]
pub(super) enum Parsed<'a> {
    /// Not a fragment (or not readable as an IP packet at all): inspected as it is.
    Not,
    /// A fragment the host discards before reassembly, leaving its trains as they are.
    Invalid,
    /// A fragment for reassembly.
    Frag(Frag<'a>),
}

/// Reads `pkt`, of tunnel layer `layer`. The IPv4 header checksum is checked only inside
/// tunnels: at layer 0 the relay's own kernel has checked it before the queue, as the
/// host's will.
pub(super) fn parse(pkt: &[u8], layer: u8) -> Parsed<'_> {
    match pkt.first().map(|b| b >> 4) {
        Some(4) => parse4(pkt, layer),
        Some(6) => parse6(pkt, layer),
        _ => Parsed::Not,
    }
}

fn parse4(pkt: &[u8], layer: u8) -> Parsed<'_> {
    if pkt.len() < ipv4::HEADER_LEN {
        return Parsed::Not;
    }
    let raw = Ipv4Packet::new_unchecked(pkt);
    // A zero total length is the kernel's GSO marker, never a fragment's.
    if !raw.is_fragment() || raw.total_len() == 0 {
        return Parsed::Not;
    }
    let Ok(ip) = Ipv4Packet::new_checked(pkt) else {
        // Cut short or a bad header length: `ip_rcv_core` drops it.
        return Parsed::Invalid;
    };
    if layer > 0 && !ip.verify_checksum() {
        return Parsed::Invalid;
    }
    let hl = ip.header_len();
    let (Some(payload), Some(hdr)) = (pkt.get(hl..usize::from(ip.total_len())), pkt.get(..hl))
    else {
        return Parsed::Invalid;
    };
    Parsed::Frag(Frag {
        key: Key {
            src: u128::from(u32::from(ip.src_addr())),
            dst: u128::from(u32::from(ip.dst_addr())),
            id: u32::from(ip.ident()),
            proto: u16::from(ip.protocol()),
            layer,
        },
        v6: false,
        off: usize::from(ip.frag_offset()),
        more: ip.more_frags(),
        payload,
        hdr,
        nh_fix: None,
    })
}

fn parse6(pkt: &[u8], layer: u8) -> Parsed<'_> {
    let Ok(ip) = Ipv6Packet::new_checked(pkt) else {
        return Parsed::Not;
    };
    // A zero payload length is a jumbogram (or the GSO marker), never a fragment's.
    if ip.payload_len() == 0 {
        return Parsed::Not;
    }
    let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
    // The extension headers are walked here rather than with `Ipv6Packet::upper_layer`:
    // reassembly needs the byte that names the fragment header (the fixed header's
    // next-header field, at 6, or an extension's first byte) to rewrite it.
    let mut nh_at = NXT_HDR_AT;
    let mut off = ipv6::HEADER_LEN;
    for _ in 0..MAX_EXT_HEADERS {
        let Some(&nh) = pkt.get(nh_at) else {
            return Parsed::Not;
        };
        match nh {
            0 | 43 | 60 => {
                nh_at = off;
                match pkt.get(off + 1) {
                    Some(&l) => off += (usize::from(l) + 1) * 8,
                    None => return Parsed::Not,
                }
            }
            51 => {
                nh_at = off;
                match pkt.get(off + 1) {
                    Some(&l) => off += (usize::from(l) + 2) * 4,
                    None => return Parsed::Not,
                }
            }
            44 => {
                let Some(fh) = pkt
                    .get(off..)
                    .and_then(|b| FragmentHeader::new_checked(b).ok())
                else {
                    return Parsed::Invalid;
                };
                let (Some(payload), Some(hdr)) =
                    (pkt.get(off + FRAGMENT_HEADER_LEN..end), pkt.get(..off))
                else {
                    return Parsed::Invalid;
                };
                let frag_off = usize::from(fh.frag_offset());
                if frag_off == 0
                    && fh.more_frags()
                    && header_chain_cut(pkt, end, off, fh.next_header())
                {
                    return Parsed::Invalid;
                }
                return Parsed::Frag(Frag {
                    key: Key {
                        src: u128::from(ip.src_addr()),
                        dst: u128::from(ip.dst_addr()),
                        id: fh.ident(),
                        proto: 0x106,
                        layer,
                    },
                    v6: true,
                    off: frag_off,
                    more: fh.more_frags(),
                    payload,
                    hdr,
                    nh_fix: Some((nh_at, fh.next_header())),
                });
            }
            _ => return Parsed::Not,
        }
    }
    Parsed::Not
}

/// RFC 8200 section 4.5 / RFC 7112, as Linux's `ipv6frag_thdr_truncated`: a first
/// fragment must hold every header up to and including the upper-layer one (its first
/// 20 bytes for TCP, 8 for UDP and ICMPv6, 1 for anything else). The walk gives up (not
/// cut) where Linux's `ipv6_skip_exthdr` does: an extension header past the packet's end,
/// or no next header (59).
fn header_chain_cut(pkt: &[u8], end: usize, frag_at: usize, first: u8) -> bool {
    let mut nh = first;
    let mut off = frag_at + FRAGMENT_HEADER_LEN;
    for _ in 0..MAX_EXT_HEADERS {
        let len = match nh {
            0 | 43 | 60 => pkt
                .get(off + 1)
                .filter(|_| off + 2 <= end)
                .map(|&l| (usize::from(l) + 1) * 8),
            51 => pkt
                .get(off + 1)
                .filter(|_| off + 2 <= end)
                .map(|&l| (usize::from(l) + 2) * 4),
            44 => {
                // A second fragment header: Linux stops there if its offset is not 0.
                match pkt
                    .get(off..end)
                    .and_then(|b| FragmentHeader::new_checked(b).ok())
                {
                    Some(f) if f.frag_offset() != 0 => break,
                    Some(_) => Some(FRAGMENT_HEADER_LEN),
                    None => None,
                }
            }
            59 => return false,
            _ => break,
        };
        let Some(len) = len else {
            return false;
        };
        let Some(&next) = pkt.get(off) else {
            return false;
        };
        nh = next;
        off += len;
    }
    let upper = match nh {
        6 => 20,
        17 | 58 => 8,
        _ => 1,
    };
    off + upper > end
}
