//! Tunnels and fragments: the inner packet of a tunnel and the packet reassembled from
//! fragments are inspected as packets of their own, and the outer packet's outcome is
//! the strictest of its layers'.

mod common;

use common::*;
use relay_core::Packet;
use relay_svc_ids::Outcome;
use std::time::Instant;

/// `inner` (an IP packet) in VXLAN (VNI 100) in UDP to port 4789.
fn vxlan(inner: &[u8]) -> Packet {
    let mut p = vec![0x08, 0, 0, 0, 0, 0, 100, 0];
    p.extend_from_slice(&[0u8; 12]);
    p.extend_from_slice(&[0x08, 0x00]);
    p.extend_from_slice(inner);
    udp4(CLIENT, SERVER, 40000, 4789, &p)
}

/// The IPv4 packet `pkt` cut into fragments carrying `size` bytes of its payload each.
fn fragments(pkt: &[u8], size: usize) -> Vec<Packet> {
    let (hdr, payload) = pkt.split_at(20);
    let chunks: Vec<&[u8]> = payload.chunks(size).collect();
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut b = hdr.to_vec();
            b[2..4].copy_from_slice(&((20 + c.len()) as u16).to_be_bytes());
            b[4..6].copy_from_slice(&77u16.to_be_bytes());
            let more = if i + 1 < chunks.len() { 0x2000 } else { 0 };
            b[6..8].copy_from_slice(&(((i * size / 8) as u16) | more).to_be_bytes());
            b.extend_from_slice(c);
            Packet::from_bytes(&b)
        })
        .collect()
}

#[test]
fn an_icmp_echo_in_vxlan_alerts_and_its_drop_drops_the_outer_packet() {
    let ping = icmp4(64, 8, b"ping");
    let (mut d, c) = detector("alert icmp any any -> any any (itype:8; sid:1;)");
    let mut outer = vxlan(ping.data());
    assert_eq!(d.inspect(&mut outer, Instant::now()), Outcome::Alert);
    assert_eq!(d.matched_sids().collect::<Vec<_>>(), [1]);
    assert_eq!(counter(&c, "decapsulated"), 1);
    // Not on the VXLAN port: only the outer UDP datagram, which no rule flags.
    let mut p = vec![
        0x08, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    p.extend_from_slice(&[0x08, 0x00]);
    p.extend_from_slice(ping.data());
    let mut other = udp4(CLIENT, SERVER, 40000, 4790, &p);
    assert_eq!(d.inspect(&mut other, Instant::now()), Outcome::Clean);

    let rules =
        "alert udp any any -> any 4789 (sid:1;)\ndrop icmp any any -> any any (itype:8; sid:2;)";
    let (mut d, _) = detector(rules);
    let mut outer = vxlan(ping.data());
    assert_eq!(d.inspect(&mut outer, Instant::now()), Outcome::Drop);
    // The outer packet's match, then the inner one's.
    assert_eq!(d.matched_sids().collect::<Vec<_>>(), [1, 2]);
}

#[test]
fn fragments_are_inspected_once_reassembled() {
    let rules = "alert tcp any any -> any any (dsize:1000; sid:1;)\n\
                 alert tcp any any -> any any (content:\"abc\"; sid:2;)\n\
                 alert ip any any -> any any (sid:3;)";
    let (mut d, c) = detector(rules);
    let mut body = vec![b'x'; 1000];
    body[10..13].copy_from_slice(b"abc");
    let whole = tcp4(CLIENT, SERVER, 1234, 80, 0x18, &body);
    let mut frags = fragments(whole.data(), 464);
    assert_eq!(frags.len(), 3);
    let now = Instant::now();
    let mut sids = Vec::new();
    for f in &mut frags {
        d.inspect(f, now);
        sids.push(d.matched_sids().collect::<Vec<_>>());
    }
    // Each fragment is an IP packet without a transport layer (sid 3 only); the last one
    // completes the segment, inspected whole: its size and its content match once.
    assert_eq!(sids, [vec![3], vec![3], vec![3, 1, 2, 3]]);
    assert_eq!(counter(&c, "reassembled"), 1);
    assert_eq!(counter(&c, "sid:2"), 1);
}

#[test]
fn the_fragment_that_completed_a_dropped_datagram_cannot_be_sent_again() {
    // Issue 24: only the completing fragment was dropped and the train forgotten, so the
    // same fragment sent again completed the datagram at the host.
    let (mut d, c) = detector("drop udp any any -> any any (content:\"forbidden\"; sid:1;)");
    let mut body = vec![b'x'; 100];
    body[60..69].copy_from_slice(b"forbidden");
    let whole = udp4(CLIENT, SERVER, 1234, 53, &body);
    let frags = fragments(whole.data(), 64);
    assert_eq!(frags.len(), 2);
    let now = Instant::now();
    let mut first = Packet::from_bytes(frags[0].data());
    assert_eq!(d.inspect(&mut first, now), Outcome::Clean);
    for _ in 0..3 {
        let mut last = Packet::from_bytes(frags[1].data());
        assert_eq!(d.inspect(&mut last, now), Outcome::Drop);
    }
    assert_eq!(counter(&c, "reassembled"), 1);
    assert_eq!(counter(&c, "defrag_dropped_train"), 2);
    // The first fragment again is dropped too: the host still holds it.
    let mut first = Packet::from_bytes(frags[0].data());
    assert_eq!(d.inspect(&mut first, now), Outcome::Drop);
}
