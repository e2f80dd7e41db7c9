//! Tunnel decapsulation: the inner IP packet of an IP packet that carries one, found as
//! Suricata 7/8's decoders find it (decode-gre.c, decode-vxlan.c, decode-geneve.c,
//! decode-teredo.c, decode-ipv4.c / decode-ipv6.c for IP in IP). The inner packet is a
//! slice of the outer one: nothing is copied or allocated here.
//!
//! Panic-free on any input: every read is bounds-checked, and a header that does not
//! hold together yields `None` (the packet is then inspected as it is, not decapsulated).

use relay_core::wire::ethernet::{self, ethertype};
use relay_core::wire::{
    EthernetFrame, GenevePacket, GreHeader, Ipv6Packet, VxlanPacket, geneve, ipv6, proto, vxlan,
};

/// GRE (RFC 2784, 2890; PPTP's enhanced GRE, RFC 2637).
const GRE: u8 = 47;
/// IPv4 in Ethernet / GRE / Geneve.
const ETH_IPV4: u16 = ethertype::IPV4;
/// IPv6 in Ethernet / GRE / Geneve.
const ETH_IPV6: u16 = ethertype::IPV6;
/// 802.1Q and 802.1ad (QinQ) VLAN tags; 0x9100 the pre-standard QinQ tag.
const ETH_VLAN: [u16; 3] = [ethertype::VLAN, ethertype::QINQ, ethertype::QINQ_LEGACY];
/// Transparent Ethernet bridging (an Ethernet frame in GRE or Geneve).
const ETH_BRIDGE: u16 = ethertype::TEB;
/// PPP in GRE.
const GRE_PPP: u16 = relay_core::wire::gre::PROTO_PPP;
/// ERSPAN type II (with a sequence number) or type I (without) in GRE.
const GRE_ERSPAN: u16 = 0x88be;
/// VLAN tags followed in one Ethernet frame (Suricata's default `vlan.max-layers` is 3;
/// a few more cost nothing).
const MAX_VLAN_TAGS: usize = 4;

/// Which tunnel an inner packet came out of (for counters and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// IPv4 or IPv6 directly in IPv4 or IPv6 (protocol 4 or 41).
    IpInIp,
    /// GRE, version 0 or 1 (PPTP).
    Gre,
    /// VXLAN (RFC 7348) on one of its UDP destination ports.
    Vxlan,
    /// Geneve (RFC 8926) on one of its UDP ports.
    Geneve,
    /// Teredo (RFC 4380) on one of its UDP ports.
    Teredo,
}

/// The UDP ports on which the UDP tunnels are recognised (Suricata's `decoder.*.ports`);
/// an empty list turns that tunnel off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelPorts {
    /// VXLAN: UDP destination ports (default 4789).
    pub vxlan: Vec<u16>,
    /// Geneve: UDP source or destination ports (default 6081).
    pub geneve: Vec<u16>,
    /// Teredo: UDP source or destination ports (default 3544).
    pub teredo: Vec<u16>,
}

impl Default for TunnelPorts {
    fn default() -> TunnelPorts {
        TunnelPorts {
            vxlan: vec![4789],
            geneve: vec![6081],
            teredo: vec![3544],
        }
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The inner IP packet of a tunnel, given the outer packet's upper-layer protocol `proto`
/// and its upper-layer bytes `l4` (from the transport header to the packet's end; a
/// non-first fragment has none and is never decapsulated).
pub(crate) fn decap<'a>(proto: u8, l4: &'a [u8], ports: &TunnelPorts) -> Option<(Kind, &'a [u8])> {
    match proto {
        proto::IPV4 | proto::IPV6 => Some((Kind::IpInIp, ip_of(proto, l4)?)),
        GRE => Some((Kind::Gre, gre(l4)?)),
        proto::UDP => udp(l4, ports),
        _ => None,
    }
}

/// `b` if it starts like an IP packet of the version `proto` names.
fn ip_of(proto: u8, b: &[u8]) -> Option<&[u8]> {
    let v = b.first()? >> 4;
    ((proto == proto::IPV4 && v == 4) || (proto == proto::IPV6 && v == 6)).then_some(b)
}

/// The IP packet in an Ethernet frame (after up to [`MAX_VLAN_TAGS`] VLAN tags); `None`
/// for ARP and anything else that is not IP.
pub(crate) fn ethernet(frame: &[u8]) -> Option<&[u8]> {
    let (et, off) = EthernetFrame::new_checked(frame).ok()?.network()?;
    if (off - ethernet::HEADER_LEN) / ethernet::VLAN_TAG_LEN > MAX_VLAN_TAGS {
        return None;
    }
    let rest = frame.get(off..)?;
    match et {
        ETH_IPV4 => ip_of(proto::IPV4, rest),
        ETH_IPV6 => ip_of(proto::IPV6, rest),
        _ => None,
    }
}

/// The IP packet behind an ethertype (VLAN tags followed, Ethernet bridged in).
fn ethertype(mut et: u16, mut rest: &[u8]) -> Option<&[u8]> {
    for _ in 0..=MAX_VLAN_TAGS {
        match et {
            ETH_IPV4 => return ip_of(proto::IPV4, rest),
            ETH_IPV6 => return ip_of(proto::IPV6, rest),
            _ if ETH_VLAN.contains(&et) => {
                et = be16(rest, 2)?;
                rest = rest.get(4..)?;
            }
            _ => return None,
        }
    }
    None
}

/// The IP packet in a PPP frame, as Suricata's DecodePPP: an optional HDLC address and
/// control (`ff 03`), a one-byte (compressed, odd) or two-byte protocol; IPv4 (0x21),
/// IPv6 (0x57) and Van Jacobson uncompressed TCP/IP (0x2f, an IPv4 header as it was).
pub(crate) fn ppp(b: &[u8]) -> Option<&[u8]> {
    let b = if b.first() == Some(&0xff) {
        b.get(2..)?
    } else {
        b
    };
    let first = *b.first()?;
    let (proto, rest) = if first & 1 == 1 {
        (u16::from(first), b.get(1..)?)
    } else {
        (be16(b, 0)?, b.get(2..)?)
    };
    match proto {
        0x21 | 0x2f => ip_of(proto::IPV4, rest),
        0x57 => ip_of(proto::IPV6, rest),
        _ => None,
    }
}

/// The inner packet of GRE, as Suricata's DecodeGRE: the header as the wire crate's
/// receiver walks it ([`GreHeader::parse`]: version 0 with source routes, PPTP's version
/// 1), then IPv4, IPv6, PPP, VLAN-tagged or bridged Ethernet and ERSPAN I/II inside.
fn gre(b: &[u8]) -> Option<&[u8]> {
    let h = GreHeader::parse(b)?;
    let rest = b.get(h.len..)?;
    match h.protocol {
        ETH_IPV4 => ip_of(proto::IPV4, rest),
        ETH_IPV6 => ip_of(proto::IPV6, rest),
        GRE_PPP => ppp(rest),
        p if ETH_VLAN.contains(&p) => ethertype(p, rest),
        ETH_BRIDGE => ethernet(rest),
        // ERSPAN II has an 8-byte header before the mirrored frame; type I (no GRE
        // sequence number) has none.
        GRE_ERSPAN if h.has_seq => ethernet(rest.get(8..)?),
        GRE_ERSPAN => ethernet(rest),
        _ => None,
    }
}

/// The inner packet of a UDP tunnel, tried in Suricata's order: Teredo, Geneve, VXLAN.
fn udp<'a>(l4: &'a [u8], ports: &TunnelPorts) -> Option<(Kind, &'a [u8])> {
    let (sp, dp) = (be16(l4, 0)?, be16(l4, 2)?);
    let pay = l4.get(8..)?;
    let either = |list: &[u16]| list.contains(&sp) || list.contains(&dp);
    if either(&ports.teredo)
        && let Some(ip) = teredo(pay)
    {
        return Some((Kind::Teredo, ip));
    }
    if either(&ports.geneve)
        && let Some(ip) = geneve(pay)
    {
        return Some((Kind::Geneve, ip));
    }
    if ports.vxlan.contains(&dp) {
        return Some((Kind::Vxlan, vxlan(pay)?));
    }
    None
}

/// VXLAN: an 8-byte header with the I flag set, then an Ethernet frame (Suricata's
/// permissive reserved-bits mode, its default).
fn vxlan(b: &[u8]) -> Option<&[u8]> {
    VxlanPacket::new_checked(b).ok().filter(|v| v.vni_valid())?;
    ethernet(b.get(vxlan::HEADER_LEN..)?)
}

/// Geneve: version 0, reserved bits clear, options that add up to the header's option
/// length; IPv4, IPv6 or bridged Ethernet inside.
fn geneve(b: &[u8]) -> Option<&[u8]> {
    let g = GenevePacket::new_checked(b).ok()?;
    if *b.get(1)? & 0x3f != 0 || *b.get(7)? != 0 {
        return None;
    }
    let hdr = g.header_len();
    let opts = b.get(geneve::HEADER_LEN..hdr)?;
    let mut off = 0;
    while off < opts.len() {
        off += 4 + usize::from(*opts.get(off + 3)? & 0x1f) * 4;
    }
    if off != opts.len() {
        return None;
    }
    let rest = b.get(hdr..)?;
    match g.protocol() {
        ETH_IPV4 => ip_of(proto::IPV4, rest),
        ETH_IPV6 => ip_of(proto::IPV6, rest),
        ETH_BRIDGE => ethernet(rest),
        _ => None,
    }
}

/// Teredo: an IPv6 packet (after an optional 8-byte origin indication) whose payload
/// length accounts for exactly the rest of the datagram, with a non-zero hop limit.
fn teredo(b: &[u8]) -> Option<&[u8]> {
    let ip = match b {
        [0, 0, ..] => b.get(8..)?,
        [0, ..] => return None,
        _ => b,
    };
    if ip.len() < ipv6::HEADER_LEN {
        return None;
    }
    let h = Ipv6Packet::new_unchecked(ip);
    if h.version() != 6 || h.hop_limit() == 0 {
        return None;
    }
    let plen = usize::from(h.payload_len());
    if h.next_header() == 0 && plen < 8 {
        return None;
    }
    (ip.len() == ipv6::HEADER_LEN + plen).then_some(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal IPv4 header (no options) with `payload`.
    pub(crate) fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut v = vec![
            0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        v[2..4].copy_from_slice(&total.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&et.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn udp_hdr(sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = Vec::new();
        u.extend_from_slice(&sp.to_be_bytes());
        u.extend_from_slice(&dp.to_be_bytes());
        u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(payload);
        u
    }

    #[test]
    fn vxlan_geneve_teredo_by_port() {
        let inner = ipv4(1, &[8, 0, 0, 0, 0, 0, 0, 0]);
        let ports = TunnelPorts::default();
        let mut vx = vec![0x08, 0, 0, 0, 0, 0, 100, 0];
        vx.extend_from_slice(&eth(ETH_IPV4, &inner));
        let u = udp_hdr(40000, 4789, &vx);
        assert_eq!(
            decap(proto::UDP, &u, &ports),
            Some((Kind::Vxlan, &inner[..]))
        );
        // Not on the VXLAN port, or the I flag clear: not decapsulated.
        assert_eq!(decap(proto::UDP, &udp_hdr(4789, 40000, &vx), &ports), None);
        let mut no_i = vx.clone();
        no_i[0] = 0;
        assert_eq!(decap(proto::UDP, &udp_hdr(1, 4789, &no_i), &ports), None);
        // ARP in VXLAN: recognised, but no IP packet.
        let mut arp = vec![0x08, 0, 0, 0, 0, 0, 100, 0];
        arp.extend_from_slice(&eth(0x0806, &[0u8; 28]));
        assert_eq!(decap(proto::UDP, &udp_hdr(1, 4789, &arp), &ports), None);
        // Geneve with one 8-byte option, on the source port.
        let mut gv = vec![0x02, 0, 0x08, 0x00, 0, 0, 1, 0, 0, 1, 2, 0x01, 0, 0, 0, 0];
        gv.extend_from_slice(&inner);
        let u = udp_hdr(6081, 1, &gv);
        assert_eq!(
            decap(proto::UDP, &u, &ports),
            Some((Kind::Geneve, &inner[..]))
        );
        let mut bad = gv.clone();
        bad[11] = 0x02; // the option claims 12 bytes of 8
        assert_eq!(decap(proto::UDP, &udp_hdr(6081, 1, &bad), &ports), None);
        // Teredo with an origin indication.
        let mut v6 = vec![0x60, 0, 0, 0, 0, 4, 59, 64];
        v6.extend_from_slice(&[0u8; 32]);
        v6.extend_from_slice(&[1, 2, 3, 4]);
        let mut t = vec![0, 0, 0, 0, 0, 0, 0, 0];
        t.extend_from_slice(&v6);
        let u = udp_hdr(3544, 1, &t);
        assert_eq!(decap(proto::UDP, &u, &ports), Some((Kind::Teredo, &v6[..])));
        // A payload length that does not fit the datagram: not Teredo.
        let mut short = v6.clone();
        short[5] = 5;
        assert_eq!(decap(proto::UDP, &udp_hdr(3544, 1, &short), &ports), None);
        // No ports configured: nothing.
        let none = TunnelPorts {
            vxlan: vec![],
            geneve: vec![],
            teredo: vec![],
        };
        assert_eq!(decap(proto::UDP, &udp_hdr(40000, 4789, &vx), &none), None);
    }

    #[test]
    fn gre_versions_and_payloads() {
        let inner = ipv4(17, &[0u8; 8]);
        // v0 with key and sequence, IPv4 inside.
        let mut g = vec![0x30, 0, 0x08, 0x00, 0, 0, 0, 1, 0, 0, 0, 2];
        g.extend_from_slice(&inner);
        assert_eq!(
            decap(GRE, &g, &TunnelPorts::default()),
            Some((Kind::Gre, &inner[..]))
        );
        // v0 PPP (compressed and uncompressed protocol, with and without ff 03).
        for ppp_hdr in [&[0xff, 0x03, 0x00, 0x21][..], &[0x00, 0x21], &[0x21]] {
            let mut g = vec![0, 0, 0x88, 0x0b];
            g.extend_from_slice(ppp_hdr);
            g.extend_from_slice(&inner);
            assert_eq!(gre(&g), Some(&inner[..]), "{ppp_hdr:x?}");
        }
        // v1 (PPTP): key required, payload length non-zero.
        let mut v1 = vec![0x30, 0x81, 0x88, 0x0b, 0, 30, 0, 1, 0, 0, 0, 5, 0, 0, 0, 4];
        v1.extend_from_slice(&[0xff, 0x03, 0x00, 0x21]);
        v1.extend_from_slice(&inner);
        assert_eq!(gre(&v1), Some(&inner[..]));
        let mut no_key = v1.clone();
        no_key[0] = 0x10;
        assert_eq!(gre(&no_key), None);
        // Bridged Ethernet with a VLAN tag.
        let mut br = vec![0, 0, 0x65, 0x58];
        let mut tagged = vec![0u8; 12];
        tagged.extend_from_slice(&[0x81, 0x00, 0, 7, 0x08, 0x00]);
        tagged.extend_from_slice(&inner);
        br.extend_from_slice(&tagged);
        assert_eq!(gre(&br), Some(&inner[..]));
        // Version 2, recursion bits, a source route running off the end: nothing.
        assert_eq!(gre(&[0, 2, 0x08, 0x00, 0x45]), None);
        assert_eq!(gre(&[0x01, 0, 0x08, 0x00, 0x45]), None);
        assert_eq!(gre(&[0x40, 0, 0x08, 0x00, 0, 0, 0, 0, 0, 1, 0, 200]), None);
    }

    #[test]
    fn ip_in_ip_checks_the_version() {
        let inner = ipv4(6, &[0u8; 20]);
        let p = TunnelPorts::default();
        assert_eq!(
            decap(proto::IPV4, &inner, &p),
            Some((Kind::IpInIp, &inner[..]))
        );
        assert_eq!(decap(proto::IPV6, &inner, &p), None);
        assert_eq!(decap(proto::TCP, &inner, &p), None);
    }

    #[test]
    fn truncations_never_panic() {
        let inner = ipv4(1, &[8, 0, 0, 0]);
        let mut vx = vec![0x08, 0, 0, 0, 0, 0, 100, 0];
        vx.extend_from_slice(&eth(ETH_IPV4, &inner));
        let mut gv = vec![0x01, 0, 0x65, 0x58, 0, 0, 1, 0, 0, 1, 2, 0x00];
        gv.extend_from_slice(&eth(ETH_IPV4, &inner));
        let mut g = vec![0xf0, 0, 0x08, 0x00, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2];
        g.extend_from_slice(&[0, 1, 0, 4, 1, 2, 3, 4, 0, 0, 0, 0]);
        g.extend_from_slice(&inner);
        let cases: [(u8, Vec<u8>); 4] = [
            (proto::UDP, udp_hdr(1, 4789, &vx)),
            (proto::UDP, udp_hdr(6081, 1, &gv)),
            (proto::UDP, udp_hdr(3544, 1, &[0, 0, 1, 2])),
            (GRE, g),
        ];
        let p = TunnelPorts::default();
        for (proto, b) in &cases {
            for n in 0..b.len() {
                let _ = decap(*proto, &b[..n], &p);
            }
        }
        assert!(decap(cases[0].0, &cases[0].1, &p).is_some());
        assert!(decap(cases[1].0, &cases[1].1, &p).is_some());
        assert!(decap(cases[3].0, &cases[3].1, &p).is_some());
    }
}
