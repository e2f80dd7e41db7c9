//! The IDS over whole conversations: stream reassembly (patterns split across segments),
//! HTTP, DNS and TLS buffers, flowbits, and the per-packet verdict of a stream match.

mod common;

use common::*;
use relay_core::CtState;
use relay_svc_ids::Outcome;
use std::time::Instant;

#[test]
fn a_pattern_split_across_segments_matches_once_on_the_completing_segment() {
    let (mut d, c) = detector(
        "drop tcp any any -> any 9000 (content:\"attack-pattern\"; sid:1;)\n\
         alert tcp any any -> any 9000 (flow:no_stream; content:\"attack-pattern\"; sid:2;)\n\
         alert tcp any any -> any 9000 (flow:only_stream; content:\"attack-pattern\"; sid:3;)",
    );
    let mut conv = Conv::new(9000);
    let mut pkts = conv.handshake();
    pkts.push(conv.data(true, b"xxxxattack-"));
    pkts.push(conv.data(true, b"pattern yyyy"));
    pkts.push(conv.data(true, b"zzzz"));
    let got = run(&mut d, pkts);
    assert_eq!(got[3], Vec::<u32>::new());
    assert_eq!(
        got[4],
        [1, 3],
        "the stream match, on the completing segment"
    );
    assert!(got[5].is_empty(), "old bytes do not match again");
    assert_eq!(counter(&c, "dropped"), 1);
}

#[test]
fn without_the_handshake_there_is_no_stream() {
    let (mut d, _) = detector("alert tcp any any -> any 9000 (content:\"attack-pattern\"; sid:1;)");
    let mut conv = Conv::new(9000);
    conv.handshake();
    let got = run(
        &mut d,
        vec![conv.data(true, b"xxxxattack-"), conv.data(true, b"pattern")],
    );
    assert!(got.iter().all(Vec::is_empty), "{got:?}");
}

#[test]
fn out_of_order_segments_are_reassembled() {
    let (mut d, _) = detector("alert tcp any any -> any 9000 (content:\"attack-pattern\"; sid:1;)");
    let mut conv = Conv::new(9000);
    let mut pkts = conv.handshake();
    // The second half first.
    pkts.push(conv.segment_at(true, 7, b"pattern"));
    pkts.push(conv.data(true, b"attack-"));
    let got = run(&mut d, pkts);
    assert!(got[3].is_empty());
    assert_eq!(got[4], [1]);
}

const REQUEST: &[u8] = b"GET /admin/../secret.php?id=1 HTTP/1.1\r\nHost: Example.COM:8080\r\nUser-Agent: evil-bot/1.0\r\nCookie: session=abc\r\n\r\n";
const RESPONSE: &[u8] =
    b"HTTP/1.1 403 Forbidden\r\nServer: nginx\r\nContent-Length: 11\r\n\r\ngo away now";

#[test]
fn http_buffers_match_once_per_transaction_on_the_completing_packet() {
    let (mut d, c) = detector(
        "alert http any any -> any any (msg:\"uri\"; http.uri; content:\"/secret.php\"; startswith; sid:1;)\n\
         alert http any any -> any any (http.host; content:\"example.com\"; bsize:11; sid:2;)\n\
         alert http any any -> any any (http.user_agent; content:\"evil-bot\"; sid:3;)\n\
         alert http any any -> any any (http.cookie; content:\"session=abc\"; sid:4;)\n\
         alert http any any -> any any (http.method; content:\"GET\"; http.stat_code; content:\"403\"; sid:5;)\n\
         alert http any any -> any any (file_data; content:\"go away\"; sid:6;)\n\
         alert tcp any any -> any any (content:\"/secret.php\"; http_uri; sid:7;)\n\
         alert http any any -> any any (uricontent:\"/admin/\"; sid:8;)",
    );
    let mut conv = Conv::new(80);
    let mut pkts = conv.handshake();
    // The request head in three segments.
    pkts.push(conv.data(true, &REQUEST[..10]));
    pkts.push(conv.data(true, &REQUEST[10..60]));
    pkts.push(conv.data(true, &REQUEST[60..]));
    pkts.push(conv.data(false, &RESPONSE[..40]));
    pkts.push(conv.data(false, &RESPONSE[40..]));
    let got = run(&mut d, pkts);
    assert!(got[3].is_empty(), "{got:?}");
    assert_eq!(got[4], [1, 7], "the URI, once the request line is in");
    assert_eq!(got[5], [2, 3, 4], "the headers, once they are all in");
    assert_eq!(got[6], [5], "the status code, with the request's method");
    assert_eq!(got[7], [6], "the body, once complete");
    // Each once.
    for sid in 1..=7 {
        assert_eq!(counter(&c, &format!("sid:{sid}")), 1, "sid {sid}");
    }
    assert_eq!(
        counter(&c, "sid:8"),
        0,
        "http.uri is normalized: /admin/.. is gone"
    );
}

#[test]
fn flowbits_carry_state_from_request_to_response() {
    let (mut d, c) = detector(
        "alert http any any -> any any (http.uri; content:\"/secret\"; flowbits:set,asked; flowbits:noalert; sid:1;)\n\
         alert http any any -> any any (flowbits:isset,asked; http.stat_code; content:\"403\"; sid:2;)\n\
         alert http any any -> any any (flowbits:isnotset,asked; http.stat_code; content:\"403\"; sid:3;)",
    );
    let mut conv = Conv::new(80);
    let mut pkts = conv.handshake();
    pkts.push(conv.data(true, REQUEST));
    pkts.push(conv.data(false, RESPONSE));
    let got = run(&mut d, pkts);
    assert_eq!(got[3], [1]);
    assert_eq!(got[4], [2]);
    assert_eq!(counter(&c, "alerts"), 1, "noalert on the setter");
}

#[test]
fn a_drop_rule_on_a_transaction_drops_the_completing_packet() {
    let (mut d, _) =
        detector("drop http any any -> any any (http.uri; content:\"/secret\"; sid:1;)");
    let mut conv = Conv::new(80);
    let now = Instant::now();
    for mut p in conv.handshake() {
        assert_eq!(d.inspect(&mut p, now), Outcome::Clean);
    }
    let mut first = conv.data(true, &REQUEST[..20]);
    assert_eq!(d.inspect(&mut first, now), Outcome::Clean);
    let mut last = conv.data(true, &REQUEST[20..]);
    assert_eq!(d.inspect(&mut last, now), Outcome::Drop);
}

#[test]
fn dns_query_names_from_udp() {
    let (mut d, _) = detector(
        "alert dns any any -> any any (dns.query; content:\"evil.example\"; nocase; sid:1;)\n\
         alert udp any any -> any 53 (app-layer-protocol:dns; sid:2;)",
    );
    // A query for www.EVIL.example, type A.
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["www", "EVIL", "example"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let got = run(&mut d, vec![udp4(CLIENT, SERVER, 5555, 53, &q)]);
    assert_eq!(got[0], [1, 2]);
}

#[test]
fn keep_alive_transactions_are_each_inspected_and_retired() {
    let (mut d, c) = detector(
        "alert http any any -> any any (http.uri; content:\"/item.php\"; sid:1;)\n\
         alert http any any -> any any (file.data; content:\"body\"; sid:2;)",
    );
    let mut conv = Conv::new(80);
    let now = Instant::now();
    for mut p in conv.handshake() {
        d.inspect(&mut p, now);
    }
    let req = b"GET /item.php?id=1 HTTP/1.1\r\nHost: a\r\n\r\n";
    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody";
    for _ in 0..500 {
        d.inspect(&mut conv.data(true, req), now);
        d.inspect(&mut conv.data(false, resp), now);
    }
    assert_eq!(counter(&c, "sid:1"), 500);
    assert_eq!(counter(&c, "sid:2"), 500);
    let (flows, held) = d.flow_usage();
    assert_eq!(flows, 1);
    assert!(
        held <= 16 << 10,
        "{held} bytes held: only the look-back should stay"
    );
}

/// A detector over `rules` with a small flow table and stream buffer.
fn small_detector(
    rules: &str,
    flows: usize,
    buffer: usize,
) -> (relay_svc_ids::Detector, relay_core::Counters) {
    let set = relay_svc_ids::RuleSet::parse_str(rules, "t.rules", &vars()).unwrap();
    assert!(set.errors().is_empty(), "{:?}", set.errors());
    let counters = relay_core::Counters::new();
    let mut opts = relay_svc_ids::DetectorOptions::default();
    opts.flows.max_flows = flows;
    opts.flows.stream.buffer = buffer;
    let d = relay_svc_ids::Detector::with_options(std::sync::Arc::new(set), &counters, None, opts);
    (d, counters)
}

#[test]
fn a_syn_flood_neither_grows_the_table_nor_evicts_an_established_flow() {
    let (mut d, c) = small_detector(
        "alert http any any -> any any (http.uri; content:\"/after-flood\"; sid:1;)",
        1000,
        64 << 10,
    );
    let now = Instant::now();
    let mut conv = Conv::new(80);
    for mut p in conv.handshake() {
        d.inspect(&mut p, now);
    }
    for i in 0..20_000u32 {
        let src = [172, 16, (i >> 8) as u8, i as u8];
        let mut syn = tcp4_seq(src, SERVER, 1024 + (i % 50_000) as u16, 80, SYN, i, 0, b"");
        d.inspect(&mut syn, now);
    }
    let (flows, _) = d.flow_usage();
    assert!(flows <= 1000, "{flows} flows");
    assert!(counter(&c, "flow_evicted") >= 19_000);
    // The established flow is still there, and still parsed.
    d.inspect(
        &mut conv.data(true, b"GET /after-flood HTTP/1.1\r\nHost: a\r\n\r\n"),
        now,
    );
    assert_eq!(sids(&d), [1]);
}

#[test]
fn an_out_of_order_flood_stays_within_the_stream_bound() {
    let (mut d, c) = small_detector(
        "alert tcp any any -> any 9000 (content:\"never\"; sid:1;)",
        1000,
        64 << 10,
    );
    let now = Instant::now();
    let mut conv = Conv::new(9000);
    for mut p in conv.handshake() {
        d.inspect(&mut p, now);
    }
    let chunk = [b'x'; 1000];
    // Segments ahead of a hole that never fills.
    for i in 1..5_000u32 {
        let mut p = conv.segment_at(true, i * 1000, &chunk);
        d.inspect(&mut p, now);
        let (_, held) = d.flow_usage();
        assert!(held <= 2 * (64 << 10) + 4096, "{held} bytes held");
    }
    // Beyond the 64 KiB window the server offered, segments are refused outright (the
    // receiver would discard them); within it, the buffer bound holds.
    assert!(counter(&c, "stream_invalid_window") >= 4_900);
    assert!(counter(&c, "invalid_dropped") >= 4_900);
}

#[test]
fn a_finished_transaction_that_stays_alerts_once() {
    // TLS keeps its one transaction for the flow's life: later packets must not alert
    // on it again.
    let (mut d, c) =
        detector("alert tls any any -> any any (tls.sni; content:\"example\"; sid:1;)");
    let mut conv = Conv::new(443);
    let now = Instant::now();
    for mut p in conv.handshake() {
        d.inspect(&mut p, now);
    }
    // A ClientHello for www.example.com, then application data both ways.
    let sni = b"www.example.com";
    let mut ext = vec![0u8, 0];
    let list_len = (sni.len() + 3) as u16;
    ext.extend_from_slice(&(list_len + 2).to_be_bytes());
    ext.extend_from_slice(&list_len.to_be_bytes());
    ext.push(0);
    ext.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    ext.extend_from_slice(sni);
    let mut body = vec![3u8, 3];
    body.extend_from_slice(&[0u8; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1u8, 0, (body.len() >> 8) as u8, body.len() as u8];
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16u8, 3, 1, (hs.len() >> 8) as u8, hs.len() as u8];
    rec.extend_from_slice(&hs);
    d.inspect(&mut conv.data(true, &rec), now);
    assert_eq!(sids(&d), [1]);
    for _ in 0..5 {
        d.inspect(&mut conv.data(true, b"\x17\x03\x03\x00\x05hello"), now);
        d.inspect(&mut conv.data(false, b"\x17\x03\x03\x00\x05world"), now);
    }
    assert_eq!(counter(&c, "sid:1"), 1);
}

#[test]
fn a_close_delimited_body_completes_at_the_fin_in_sequence_order() {
    let (mut d, c) =
        detector("alert http any any -> any any (file.data; content:\"tail-of-body\"; sid:1;)");
    let mut conv = Conv::new(80);
    let now = Instant::now();
    for mut p in conv.handshake() {
        d.inspect(&mut p, now);
    }
    d.inspect(&mut conv.data(true, b"GET / HTTP/1.0\r\n\r\n"), now);
    d.inspect(
        &mut conv.data(false, b"HTTP/1.0 200 OK\r\n\r\nsome body "),
        now,
    );
    // The FIN arrives ahead of the body's last bytes: the body is not complete yet.
    let missing = b"tail-of-body";
    let mut fin = conv.segment_at(false, missing.len() as u32, b"");
    fin.data_mut()[33] = FIN_ACK;
    fix_tcp4_checksum(&mut fin);
    d.inspect(&mut fin, now);
    assert_eq!(counter(&c, "sid:1"), 0);
    // The missing bytes complete the stream up to the FIN: now the body is whole.
    d.inspect(&mut conv.data(false, missing), now);
    assert_eq!(sids(&d), [1]);
}

#[test]
fn a_pass_rule_on_a_transaction_passes_the_rest_of_the_flow() {
    // Suricata's FLOW_ACTION_PASS: once an app-layer pass rule matched, the flow's later
    // packets are not inspected, so the alert on the response never fires.
    let (mut d, c) = detector(
        "pass http any any -> any any (http.uri; content:\"/secret.php\"; sid:1;)\n\
         alert tcp any any -> any any (content:\"Forbidden\"; sid:2;)",
    );
    let mut conv = Conv::new(80);
    let now = Instant::now();
    for mut p in conv.handshake() {
        assert_eq!(d.inspect(&mut p, now), Outcome::Clean);
    }
    assert_eq!(d.inspect(&mut conv.data(true, REQUEST), now), Outcome::Pass);
    assert_eq!(
        d.inspect(&mut conv.data(false, RESPONSE), now),
        Outcome::Pass
    );
    assert!(sids(&d).is_empty(), "not inspected");
    assert_eq!(counter(&c, "sid:2"), 0);
    assert_eq!(counter(&c, "flow_passed"), 1);
    // Another flow is inspected as usual.
    let mut other = Conv::new(8080);
    let mut pkts = other.handshake();
    pkts.push(other.data(false, RESPONSE));
    let got = run(&mut d, pkts);
    assert_eq!(got[3], [2]);
}

#[test]
fn a_drop_rule_matching_the_stream_drops_the_rest_of_the_flow() {
    let (mut d, c) = detector(
        "drop tcp any any -> any 9000 (content:\"attack\"; sid:1;)\n\
         alert tcp any any -> any 9000 (content:\"more\"; sid:2;)",
    );
    let mut conv = Conv::new(9000);
    let now = Instant::now();
    for mut p in conv.handshake() {
        d.inspect(&mut p, now);
    }
    assert_eq!(
        d.inspect(&mut conv.data(true, b"an attack"), now),
        Outcome::Drop
    );
    assert_eq!(
        d.inspect(&mut conv.data(true, b"more bytes"), now),
        Outcome::Drop
    );
    assert!(sids(&d).is_empty(), "no further alerts");
    assert_eq!(counter(&c, "sid:2"), 0);
    assert_eq!(counter(&c, "flow_dropped"), 1);
    assert_eq!(counter(&c, "dropped"), 1);
}

#[test]
fn a_packet_only_pass_rule_passes_only_its_packet() {
    // `dsize` makes it a packet rule (Suricata's SIG_TYPE_PKT): the action stays on the
    // packet.
    let (mut d, c) = detector(
        "pass tcp any any -> any 9000 (dsize:<5; sid:1;)\n\
         alert tcp any any -> any 9000 (flow:no_stream; content:\"x\"; sid:2;)",
    );
    let mut conv = Conv::new(9000);
    let mut pkts = conv.handshake();
    pkts.push(conv.data(true, b"x"));
    pkts.push(conv.data(true, b"xxxxxxxx"));
    let got = run(&mut d, pkts);
    assert_eq!(got[3], [1]);
    assert_eq!(got[4], [2]);
    assert_eq!(counter(&c, "flow_passed"), 0);
}

#[test]
fn a_reject_rule_rejects_the_rest_of_the_flow_without_alerts() {
    let (mut d, c) = detector("reject udp any any -> any 9 (sid:7;)");
    let now = Instant::now();
    for _ in 0..3 {
        let mut p = udp4(CLIENT, SERVER, 40000, 9, b"q");
        assert_eq!(d.inspect(&mut p, now), Outcome::Reject);
    }
    assert_eq!(counter(&c, "sid:7"), 1, "matched once: the flow is decided");
    assert_eq!(counter(&c, "alerts"), 1);
    assert_eq!(counter(&c, "rejected"), 3);
    assert_eq!(counter(&c, "flow_dropped"), 2);
}

/// A client SYN from `conv` whose 12 bytes of options hold a TCP Fast Open cookie (kind
/// 34) if `tfo`, else a timestamp, followed by `data`.
fn syn_with_data(conv: &Conv, tfo: bool, data: &[u8]) -> relay_core::Packet {
    let mut body = if tfo {
        vec![1, 1, 34, 10, 1, 2, 3, 4, 5, 6, 7, 8]
    } else {
        vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0]
    };
    body.extend_from_slice(data);
    let p = tcp4_seq(
        CLIENT,
        SERVER,
        conv.sport,
        conv.port,
        SYN,
        conv.seq[0],
        0,
        &body,
    );
    let mut b = p.data().to_vec();
    b[32] = 8 << 4; // data offset: 20 bytes of header and 12 of options
    let mut p = relay_core::Packet::from_bytes(&b);
    fix_tcp4_checksum(&mut p);
    p
}

#[test]
fn data_on_a_tcp_fast_open_syn_is_reassembled() {
    let rules = "alert http any any -> any any (http.uri; content:\"/etc/passwd\"; sid:1;)\n\
                 alert tcp any any -> any any (flow:established,to_client; content:\"200 OK\"; sid:2;)";
    let req = b"GET /etc/passwd HTTP/1.0\r\n\r\n";
    let resp = b"HTTP/1.0 200 OK\r\n\r\n";
    let mut hits = Vec::new();
    for tfo in [true, false] {
        let (mut d, _) = detector(rules);
        let mut conv = Conv::new(80);
        let syn = syn_with_data(&conv, tfo, req);
        // The server acknowledges the SYN and its data (TCP Fast Open accepted).
        conv.seq[0] = conv.seq[0].wrapping_add(1 + req.len() as u32);
        let synack = tcp4_seq(
            SERVER,
            CLIENT,
            conv.port,
            conv.sport,
            SYN | ACK,
            conv.seq[1],
            conv.seq[0],
            b"",
        );
        conv.seq[1] = conv.seq[1].wrapping_add(1);
        let ack = conv.segment_at(true, 0, b"");
        let data = conv.data(false, resp);
        hits.push(run(&mut d, vec![syn, synack, ack, data]));
    }
    // With the option: the request on the SYN is parsed and the SYN-ACK acknowledging it
    // completes the handshake. Without: a receiver drops data on a SYN, and a SYN-ACK
    // acknowledging it is not an answer to the SYN.
    assert_eq!(hits[0], [vec![1], vec![], vec![], vec![2]]);
    assert!(hits[1].iter().all(Vec::is_empty));
}

#[test]
fn flow_direction_of_a_followed_connection_is_the_flow_tables() {
    // Conntrack calls the first sender the original direction; a connection relayd
    // follows from its SYN has Suricata's direction and `established` instead.
    let (mut d, _) = detector(
        "alert tcp any any -> any any (flow:established,to_server; content:\"req\"; sid:1;)\n\
         alert tcp any any -> any any (flow:not_established; content:\"x\"; sid:2;)",
    );
    let mut conv = Conv::new(9100);
    let mut pkts: Vec<_> = conv
        .handshake()
        .into_iter()
        .map(|p| with_ct(p, CtState::Established, true))
        .collect();
    pkts.push(with_ct(conv.data(true, b"req"), CtState::New, true));
    let hits = run(&mut d, pkts);
    assert_eq!(hits, [vec![], vec![], vec![], vec![1]]);
    // A segment of a connection relayd did not see start: conntrack answers.
    let mut late = Conv::new(9101);
    let p = with_ct(late.data(true, b"x"), CtState::New, false);
    assert_eq!(run(&mut d, vec![p]), [vec![2]]);
}
