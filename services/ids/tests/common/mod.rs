//! Packet builders and helpers shared by the integration tests.
#![allow(dead_code)]

use relay_core::wire::{Ipv4Packet, TcpPacket, UdpPacket, checksum};
use relay_core::{Counters, CtInfo, CtState, Packet};
use relay_svc_ids::{Detector, RuleSet};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

pub(crate) const CLIENT: [u8; 4] = [10, 0, 1, 1];
pub(crate) const SERVER: [u8; 4] = [10, 0, 2, 2];

/// A TCP/IPv4 segment with the given flags and payload.
pub(crate) fn tcp4(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    flags: u8,
    payload: &[u8],
) -> Packet {
    tcp4_seq(src, dst, sport, dport, flags, 1000, 5000, payload)
}

/// A TCP/IPv4 segment with the given flags, sequence and acknowledgement numbers, the
/// largest unscaled window, TTL 64 and no options.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tcp4_seq(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Packet {
    Tcp4 {
        src,
        dst,
        sport,
        dport,
        flags,
        seq,
        ack,
        ..Tcp4::default()
    }
    .build(payload)
}

/// Every field of a TCP/IPv4 segment a test may set; `build` fills in the lengths and
/// both checksums.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tcp4<'a> {
    pub(crate) src: [u8; 4],
    pub(crate) dst: [u8; 4],
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    pub(crate) flags: u8,
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) window: u16,
    pub(crate) ttl: u8,
    /// TCP options (a multiple of 4 bytes).
    pub(crate) opts: &'a [u8],
}

impl Default for Tcp4<'_> {
    fn default() -> Self {
        Tcp4 {
            src: CLIENT,
            dst: SERVER,
            sport: 40000,
            dport: 80,
            flags: 0x10,
            seq: 1000,
            ack: 5000,
            // The largest unscaled window, as a receiver with room offers.
            window: u16::MAX,
            ttl: 64,
            opts: &[],
        }
    }
}

impl Tcp4<'_> {
    /// The segment carrying `payload`.
    pub(crate) fn build(&self, payload: &[u8]) -> Packet {
        let hl = 20 + self.opts.len();
        let total = 20 + hl + payload.len();
        let mut b = vec![0u8; total];
        b[0] = 0x45;
        b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        b[8] = self.ttl;
        b[9] = 6;
        b[12..16].copy_from_slice(&self.src);
        b[16..20].copy_from_slice(&self.dst);
        b[20..22].copy_from_slice(&self.sport.to_be_bytes());
        b[22..24].copy_from_slice(&self.dport.to_be_bytes());
        b[24..28].copy_from_slice(&self.seq.to_be_bytes());
        b[28..32].copy_from_slice(&self.ack.to_be_bytes());
        b[32] = ((hl / 4) as u8) << 4;
        b[33] = self.flags;
        b[34..36].copy_from_slice(&self.window.to_be_bytes());
        b[40..40 + self.opts.len()].copy_from_slice(self.opts);
        b[hl + 20..].copy_from_slice(payload);
        Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        let mut p = Packet::from_bytes(&b);
        fix_tcp4_checksum(&mut p);
        p
    }
}

/// Recomputes the TCP checksum of a TCP/IPv4 packet whose header a test edited (the
/// IDS drops segments whose checksum the receiver would refuse).
pub(crate) fn fix_tcp4_checksum(p: &mut Packet) {
    let b = p.data_mut();
    let (src, dst) = (
        Ipv4Addr::new(b[12], b[13], b[14], b[15]),
        Ipv4Addr::new(b[16], b[17], b[18], b[19]),
    );
    let ps = checksum::pseudo_v4(src, dst, 6, (b.len() - 20) as u32);
    TcpPacket::new_unchecked(&mut b[20..]).fill_checksum(ps);
}

/// An HTTP-ish request from client to server port 80 (PSH|ACK).
pub(crate) fn http(payload: &[u8]) -> Packet {
    tcp4(CLIENT, SERVER, 40000, 80, 0x18, payload)
}

/// A UDP/IPv4 datagram.
pub(crate) fn udp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Packet {
    let total = 28 + payload.len();
    let mut b = vec![0u8; total];
    b[0] = 0x45;
    b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    b[8] = 64;
    b[9] = 17;
    b[12..16].copy_from_slice(&src);
    b[16..20].copy_from_slice(&dst);
    b[20..22].copy_from_slice(&sport.to_be_bytes());
    b[22..24].copy_from_slice(&dport.to_be_bytes());
    b[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    b[28..].copy_from_slice(payload);
    Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
    let ps = checksum::pseudo_v4(
        Ipv4Addr::from(src),
        Ipv4Addr::from(dst),
        17,
        (8 + payload.len()) as u32,
    );
    UdpPacket::new_unchecked(&mut b[20..]).fill_checksum(ps);
    Packet::from_bytes(&b)
}

/// An ICMP echo request with `ttl` and payload.
pub(crate) fn icmp4(ttl: u8, ty: u8, payload: &[u8]) -> Packet {
    let total = 28 + payload.len();
    let mut b = vec![0u8; total];
    b[0] = 0x45;
    b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    b[8] = ttl;
    b[9] = 1;
    b[12..16].copy_from_slice(&CLIENT);
    b[16..20].copy_from_slice(&SERVER);
    b[20] = ty;
    b[28..].copy_from_slice(payload);
    Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
    Packet::from_bytes(&b)
}

/// A TCP/IPv6 segment.
pub(crate) fn tcp6(src: &str, dst: &str, dport: u16, payload: &[u8]) -> Packet {
    let src: std::net::Ipv6Addr = src.parse().unwrap();
    let dst: std::net::Ipv6Addr = dst.parse().unwrap();
    let plen = 20 + payload.len();
    let mut b = vec![0u8; 40 + plen];
    b[0] = 0x60;
    b[4..6].copy_from_slice(&(plen as u16).to_be_bytes());
    b[6] = 6;
    b[7] = 64;
    b[8..24].copy_from_slice(&src.octets());
    b[24..40].copy_from_slice(&dst.octets());
    b[40..42].copy_from_slice(&40000u16.to_be_bytes());
    b[42..44].copy_from_slice(&dport.to_be_bytes());
    b[52] = 5 << 4;
    b[53] = 0x18;
    b[54..56].copy_from_slice(&u16::MAX.to_be_bytes());
    b[60..].copy_from_slice(payload);
    let ps = checksum::pseudo_v6(src, dst, 6, plen as u32);
    TcpPacket::new_unchecked(&mut b[40..]).fill_checksum(ps);
    Packet::from_bytes(&b)
}

pub(crate) fn with_ct(mut p: Packet, state: CtState, reply: bool) -> Packet {
    p.meta.ct = Some(CtInfo { state, reply });
    p
}

pub(crate) fn vars() -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    v.insert("HOME_NET".into(), "[10.0.0.0/8,192.168.0.0/16]".into());
    v.insert("EXTERNAL_NET".into(), "!$HOME_NET".into());
    v.insert("HTTP_PORTS".into(), "[80,8080]".into());
    v
}

/// A detector over `rules` (which must all load), with its counters.
pub(crate) fn detector(rules: &str) -> (Detector, Counters) {
    let set = RuleSet::parse_str(rules, "test.rules", &vars()).unwrap();
    assert!(set.errors().is_empty(), "rule errors: {:?}", set.errors());
    let counters = Counters::new();
    let d = Detector::new(Arc::new(set), &counters, None, 1024);
    (d, counters)
}

pub(crate) fn counter(c: &Counters, name: &str) -> u64 {
    c.snapshot()
        .into_iter()
        .find(|(n, _, _)| n == name)
        .map(|x| x.2)
        .unwrap_or(0)
}

/// TCP flag bits.
pub(crate) const SYN: u8 = 0x02;
pub(crate) const ACK: u8 = 0x10;
pub(crate) const PSH_ACK: u8 = 0x18;
pub(crate) const FIN_ACK: u8 = 0x11;

/// One TCP connection between CLIENT:40000 and SERVER:`port`, building its segments with
/// consistent sequence and acknowledgement numbers (a capture of a real conversation).
pub(crate) struct Conv {
    pub(crate) port: u16,
    pub(crate) sport: u16,
    /// Next sequence number of the client and of the server.
    pub(crate) seq: [u32; 2],
}

impl Conv {
    /// A connection to `port`, with initial sequence numbers near the 2^32 wrap so that
    /// tests cross it.
    pub(crate) fn new(port: u16) -> Conv {
        Conv {
            port,
            sport: 40000,
            seq: [0xffff_ff00, 0x7000_0000],
        }
    }

    /// The three-way handshake: SYN, SYN-ACK, ACK.
    pub(crate) fn handshake(&mut self) -> Vec<Packet> {
        let syn = tcp4_seq(
            CLIENT,
            SERVER,
            self.sport,
            self.port,
            SYN,
            self.seq[0],
            0,
            b"",
        );
        self.seq[0] = self.seq[0].wrapping_add(1);
        let synack = tcp4_seq(
            SERVER,
            CLIENT,
            self.port,
            self.sport,
            SYN | ACK,
            self.seq[1],
            self.seq[0],
            b"",
        );
        self.seq[1] = self.seq[1].wrapping_add(1);
        let ack = tcp4_seq(
            CLIENT,
            SERVER,
            self.sport,
            self.port,
            ACK,
            self.seq[0],
            self.seq[1],
            b"",
        );
        vec![syn, synack, ack]
    }

    /// A data segment from the client (`to_server`) or the server, advancing its sequence.
    pub(crate) fn data(&mut self, to_server: bool, payload: &[u8]) -> Packet {
        let p = self.segment_at(to_server, 0, payload);
        let i = usize::from(!to_server);
        self.seq[i] = self.seq[i].wrapping_add(payload.len() as u32);
        p
    }

    /// A data segment `offset` bytes after the sender's next sequence number, without
    /// advancing it (out-of-order and retransmitted segments).
    pub(crate) fn segment_at(&self, to_server: bool, offset: u32, payload: &[u8]) -> Packet {
        let i = usize::from(!to_server);
        let (src, dst, sp, dp) = if to_server {
            (CLIENT, SERVER, self.sport, self.port)
        } else {
            (SERVER, CLIENT, self.port, self.sport)
        };
        tcp4_seq(
            src,
            dst,
            sp,
            dp,
            PSH_ACK,
            self.seq[i].wrapping_add(offset),
            self.seq[1 - i],
            payload,
        )
    }
}

/// The sids of the rules the last packet matched, in evaluation order.
pub(crate) fn sids(d: &Detector) -> Vec<u32> {
    d.matched_sids().collect()
}

/// Which of `payloads` (TCP, client to server port 80) the single rule `opts` matches.
pub(crate) fn hits(opts: &str, payloads: &[&[u8]]) -> Vec<bool> {
    let (mut d, _) = detector(&format!("alert tcp any any -> any any ({opts} sid:1;)"));
    payloads
        .iter()
        .map(|p| {
            d.inspect(&mut http(p), std::time::Instant::now()) == relay_svc_ids::Outcome::Alert
        })
        .collect()
}

/// Inspects each packet at one instant, returning the sids each matched.
pub(crate) fn run(d: &mut Detector, pkts: Vec<Packet>) -> Vec<Vec<u32>> {
    let now = std::time::Instant::now();
    pkts.into_iter()
        .map(|mut p| {
            d.inspect(&mut p, now);
            sids(d)
        })
        .collect()
}
