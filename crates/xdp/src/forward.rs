//! Forwarding a packet the chain accepted, as the kernel's forwarding would: checked as
//! `ip_rcv` would (lengths, IPv4 header checksum), its TTL or hop limit decreased (by
//! [`relay_core::outbox::decrement_hop`], the one implementation relayd has) and an
//! Ethernet header in front, written from the next hop the XDP program read from the
//! kernel's FIB. Pure functions, unit-tested without a kernel.

use crate::program::FrameMeta;
use relay_core::IpVersion;
use relay_core::wire::ethernet::{self, EthernetFrame, EthernetRepr};
use relay_core::wire::{Ipv4Packet, Ipv6Packet};

/// An Ethernet header's length (untagged: the program steers nothing else).
pub const ETH_LEN: usize = ethernet::HEADER_LEN;

/// The EtherType of an IP packet of `version`.
pub fn ethertype(version: IpVersion) -> u16 {
    ethernet::ethertype::of(version)
}

/// What [`frame`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framed {
    /// `out[..len]` holds the frame.
    Ready(usize),
    /// The packet is not IPv4 or IPv6 (a service turned it into something else).
    NotIp,
    /// Its TTL or hop limit ran out: the kernel's path sends the ICMP error.
    HopLimit,
    /// `out` is too small for it.
    TooBig,
}

/// Whether `packet` can be forwarded: a well-formed IPv4 (valid header checksum) or IPv6
/// header whose length fits the bytes, with a TTL or hop limit above 1 (otherwise
/// [`Framed::NotIp`] or [`Framed::HopLimit`]). The kernel drops what fails the first
/// checks (`ip_rcv`); [`frame`] then succeeds if the frame is large enough.
pub fn forwardable(packet: &[u8]) -> Result<IpVersion, Framed> {
    let version = IpVersion::of(packet).ok_or(Framed::NotIp)?;
    let hops = match version {
        IpVersion::V4 => {
            let ip = Ipv4Packet::new_checked(packet).map_err(|_| Framed::NotIp)?;
            if !ip.verify_checksum() {
                return Err(Framed::NotIp);
            }
            ip.ttl()
        }
        IpVersion::V6 => Ipv6Packet::new_checked(packet)
            .map_err(|_| Framed::NotIp)?
            .hop_limit(),
    };
    if hops <= 1 {
        return Err(Framed::HopLimit);
    }
    Ok(version)
}

/// Writes the Ethernet frame that carries `packet` to the next hop `meta` into `out`, and
/// decreases the TTL or hop limit of the copy. `packet` itself is not changed.
pub fn frame(out: &mut [u8], meta: &FrameMeta, packet: &[u8]) -> Framed {
    let Some(version) = IpVersion::of(packet) else {
        return Framed::NotIp;
    };
    let len = ETH_LEN + packet.len();
    if len > out.len() {
        return Framed::TooBig;
    }
    let Ok(mut f) = EthernetFrame::new_checked(&mut out[..len]) else {
        return Framed::TooBig;
    };
    EthernetRepr {
        dst_addr: meta.dmac,
        src_addr: meta.smac,
        ethertype: ethertype(version),
    }
    .emit(&mut f);
    let ip = f.payload_mut();
    ip.copy_from_slice(packet);
    if !relay_core::outbox::decrement_hop(ip) {
        return Framed::HopLimit;
    }
    Framed::Ready(len)
}

/// The EtherType of an untagged IPv4 or IPv6 Ethernet frame and its IP packet, cut to
/// the length its header gives (a short frame's Ethernet padding is not the packet's);
/// `None` for anything else, or a header that claims more bytes than the frame has.
pub fn ip_payload(frame: &[u8]) -> Option<(u16, &[u8])> {
    let (version, ip) = EthernetFrame::new_checked(frame).ok()?.into_ip_packet()?;
    Some((ethertype(version), ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> FrameMeta {
        FrameMeta {
            ifindex: 7,
            dmac: [2, 0, 0, 0, 0, 2],
            smac: [2, 0, 0, 0, 0, 1],
        }
    }

    fn v4(ttl: u8) -> Vec<u8> {
        let mut p = vec![
            0x45, 0, 0, 28, 0, 1, 0, 0, ttl, 17, 0, 0, 10, 0, 0, 1, 10, 0, 1, 2, 0, 1, 0, 2, 0, 8,
            0, 0,
        ];
        let mut ip = Ipv4Packet::new_unchecked(&mut p[..]);
        ip.fill_checksum();
        p
    }

    #[test]
    fn writes_the_header_and_decrements_the_ttl_with_a_valid_checksum() {
        let pkt = v4(64);
        let mut out = [0u8; 128];
        let Framed::Ready(len) = frame(&mut out, &meta(), &pkt) else {
            panic!("not framed");
        };
        assert_eq!(len, ETH_LEN + pkt.len());
        assert_eq!(&out[..6], &[2, 0, 0, 0, 0, 2]);
        assert_eq!(&out[6..12], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&out[12..14], &[0x08, 0x00]);
        let ip = Ipv4Packet::new_checked(&out[ETH_LEN..len]).unwrap();
        assert_eq!(ip.ttl(), 63);
        assert!(ip.verify_checksum());
        assert_eq!(ip_payload(&out[..len]), Some((0x0800, &out[ETH_LEN..len])));
    }

    #[test]
    fn refuses_what_it_cannot_forward() {
        let mut out = [0u8; 128];
        assert_eq!(frame(&mut out, &meta(), &v4(1)), Framed::HopLimit);
        assert_eq!(forwardable(&v4(1)), Err(Framed::HopLimit));
        assert_eq!(forwardable(&v4(2)), Ok(IpVersion::V4));
        assert_eq!(forwardable(&[0x45; 5]), Err(Framed::NotIp));
        assert_eq!(frame(&mut out, &meta(), &[0x10; 40]), Framed::NotIp);
        assert_eq!(frame(&mut out[..30], &meta(), &v4(64)), Framed::TooBig);
        assert_eq!(ip_payload(&[0u8; 13]), None);
        // A bad header checksum, a length beyond the bytes: not forwarded.
        let mut bad = v4(64);
        bad[10] ^= 1;
        assert_eq!(forwardable(&bad), Err(Framed::NotIp));
        let mut long = v4(64);
        long[3] = 200;
        assert_eq!(forwardable(&long), Err(Framed::NotIp));
        // Ethernet padding is cut off; a header claiming more than the frame is refused.
        let mut padded = vec![0u8; 14];
        padded[12..14].copy_from_slice(&[0x08, 0x00]);
        padded.extend_from_slice(&v4(64));
        padded.resize(60, 0xee);
        assert_eq!(ip_payload(&padded), Some((0x0800, &padded[14..42])));
        padded[14 + 3] = 100;
        assert_eq!(ip_payload(&padded), None);
        let mut arp = [0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(ip_payload(&arp), None);
    }
}
