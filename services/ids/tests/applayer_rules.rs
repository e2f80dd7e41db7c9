//! Rules written for an application protocol: which packets they are checked on.

mod common;

use common::*;
use std::time::Instant;

/// Inspects each packet, returning the sids each matched.
fn run(d: &mut relay_svc_ids::Detector, pkts: Vec<relay_core::Packet>) -> Vec<Vec<u32>> {
    let now = Instant::now();
    pkts.into_iter()
        .map(|mut p| {
            d.inspect(&mut p, now);
            sids(d)
        })
        .collect()
}

#[test]
fn a_protocol_only_rule_matches_every_packet_once_the_protocol_is_known() {
    // Suricata's SIG_TYPE_APPLAYER: no buffer to inspect, so a packet rule that needs the
    // flow's protocol (not once per transaction).
    let (mut d, c) = detector(
        "alert http any any -> any any (sid:1;)\n\
         alert tls any any -> any any (sid:2;)",
    );
    let mut conv = Conv::new(80);
    let mut pkts = conv.handshake();
    pkts.push(conv.data(true, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
    pkts.push(conv.data(false, b""));
    pkts.push(conv.data(false, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
    pkts.push(conv.data(true, b""));
    let got = run(&mut d, pkts);
    let none: Vec<u32> = Vec::new();
    assert_eq!(got[..3], [none.clone(), none.clone(), none], "{got:?}");
    for (k, g) in got.iter().enumerate().skip(3) {
        assert_eq!(g, &[1], "packet {k}: {got:?}");
    }
    assert_eq!(counter(&c, "sid:1"), 4);
    assert_eq!(counter(&c, "sid:2"), 0);
}
