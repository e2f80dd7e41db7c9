//! Which packets a rule is checked on, by its type (Suricata's `SignatureSetType`):
//! IP-only rules once per flow direction, protocol-only rules on every packet of a flow
//! of their protocol.

mod common;

use common::*;

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

#[test]
fn an_ip_only_rule_is_checked_once_per_flow_direction() {
    // sid 1 is IP-only; sid 2 negates an address (like IP-only: per packet); sid 3 has a
    // packet keyword (per packet).
    let (mut d, c) = detector(
        "alert tcp any any -> any any (sid:1;)\n\
         alert tcp !192.0.2.1 any -> any any (sid:2;)\n\
         alert tcp any any -> any any (flags:A+; sid:3;)",
    );
    let mut conv = Conv::new(9000);
    let mut pkts = conv.handshake();
    pkts.push(conv.data(true, b"hello"));
    pkts.push(conv.data(false, b"world"));
    let got = run(&mut d, pkts);
    assert_eq!(got[0], [1, 2], "{got:?}");
    assert_eq!(got[1], [1, 2, 3], "{got:?}");
    for g in &got[2..] {
        assert_eq!(g, &[2, 3], "{got:?}");
    }
    assert_eq!(counter(&c, "sid:1"), 2);
    assert_eq!(counter(&c, "sid:2"), 5);
    // A new flow: both directions again.
    let mut conv = Conv::new(9001);
    let got = run(&mut d, conv.handshake());
    assert_eq!(got[0], [1, 2], "{got:?}");
    assert_eq!(got[1], [1, 2, 3], "{got:?}");
    assert_eq!(got[2], [2, 3], "{got:?}");
}
