//! The IDS over whole hostile conversations: each input is one TCP flow (after a real
//! handshake) or a run of UDP datagrams, through a detector with HTTP, DNS and TLS buffer
//! rules, flowbits, stream rules and the byte keywords. Exercises stream reassembly (in
//! order, out of order, retransmissions with other bytes, FIN and RST), protocol
//! detection, the three parsers on any bytes, transaction inspection and retirement, and
//! the flow table filling up across inputs (each input is a new client port, and state
//! carries over).
//!
//! Input: byte 0 = server port choice (80, 443, 53, 9000) and UDP (bit 2); then segments,
//! each: a control byte (bit 0: to client; bits 1-2: in order / a gap of `len` bytes ahead
//! / a retransmission `len` bytes back / in order with FIN; bit 3: RST after), a length
//! byte, and that many payload bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::Counters;
use relay_svc_ids::{Detector, RuleSet};
use relayd_fuzz::Input;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const RULES: &str = r#"
alert http any any -> any any (msg:"uri"; http.uri; content:"/admin"; sid:1;)
alert http any any -> any any (http.host; content:"evil"; http.user_agent; content:"bot"; sid:2;)
drop http any any -> any any (file.data; content:"MZ"; startswith; isdataat:60,relative; sid:3;)
alert http any any -> any any (http.header; content:"X-"; byte_extract:1,0,n,relative; byte_test:1,>,n,0,relative; sid:4;)
alert http any any -> any any (http.stat_code; content:"500"; flowbits:isset,asked; sid:5;)
alert http any any -> any any (http.method; content:"POST"; flowbits:set,asked; flowbits:noalert; sid:6;)
alert http any any -> any any (http.request_body; pcre:"/pass(word)?=/i"; sid:7;)
alert http any any -> any any (http.cookie; bsize:>10; sid:8;)
alert dns any any -> any any (dns.query; content:"evil"; nocase; endswith; sid:9;)
alert tls any any -> any any (tls.sni; content:".example"; endswith; sid:10;)
alert tls any any -> any any (tls.cert_subject; content:"CN="; sid:11;)
alert tcp any any -> any any (content:"split-pattern"; sid:12;)
alert tcp any any -> any any (flow:only_stream; content:"|00 01|"; byte_jump:2,0,relative; content:"end"; within:10; sid:13;)
alert tcp any any -> any any (app-layer-protocol:!http; content:"GET"; depth:3; sid:14;)
alert udp any any -> any any (content:"|01 00|"; offset:2; depth:2; threshold:type backoff,track by_flow,count 1,multiplier 2; sid:15;)
"#;

struct Harness {
    detector: Detector,
    base: Instant,
    clock: Duration,
    port: u16,
}

fn harness() -> &'static Mutex<Harness> {
    static H: OnceLock<Mutex<Harness>> = OnceLock::new();
    H.get_or_init(|| {
        let set = RuleSet::parse_str(RULES, "fuzz.rules", &relayd_fuzz::ids_vars())
            .expect("the rules load");
        assert!(set.errors().is_empty(), "{:?}", set.errors());
        // A small table, so that eviction and overflow are exercised too.
        let mut opts = relay_svc_ids::DetectorOptions::default();
        opts.flows.max_flows = 64;
        Mutex::new(Harness {
            detector: Detector::with_options(Arc::new(set), &Counters::new(), None, opts),
            base: Instant::now(),
            clock: Duration::ZERO,
            port: 1024,
        })
    })
}

const CLIENT: [u8; 4] = [10, 0, 1, 1];
const SERVER: [u8; 4] = [10, 0, 2, 2];

/// A TCP/IPv4 segment with its sequence and acknowledgement numbers.
#[allow(clippy::too_many_arguments)]
fn seg(
    to_server: bool,
    cport: u16,
    sport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
    data: &[u8],
) -> Vec<u8> {
    let (src, dst, sp, dp) = if to_server {
        (CLIENT, SERVER, cport, sport)
    } else {
        (SERVER, CLIENT, sport, cport)
    };
    let mut b = relayd_fuzz::tcp4(src, dst, sp, dp, flags, &[], data);
    b[24..28].copy_from_slice(&seq.to_be_bytes());
    b[28..32].copy_from_slice(&ack.to_be_bytes());
    // A right checksum again: the IDS drops segments the host would refuse.
    let len = (b.len() - 20) as u32;
    let ps = relay_core::wire::checksum::pseudo_v4(src.into(), dst.into(), 6, len);
    relay_core::wire::TcpPacket::new_unchecked(&mut b[20..]).fill_checksum(ps);
    b
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let head = input.byte();
    let sport = [80u16, 443, 53, 9000][usize::from(head & 3)];
    let udp = head & 4 != 0;
    let mut h = harness().lock().unwrap_or_else(|e| e.into_inner());
    h.port = h.port.wrapping_add(1).max(1024);
    let cport = h.port;
    h.clock += Duration::from_millis(200);
    let now = h.base + h.clock;
    let mut pkts: Vec<Vec<u8>> = Vec::new();
    let mut seq = [0xffff_ff00u32, 0x7fff_fff0u32];
    if !udp {
        pkts.push(seg(true, cport, sport, 0x02, seq[0], 0, b""));
        seq[0] = seq[0].wrapping_add(1);
        pkts.push(seg(false, cport, sport, 0x12, seq[1], seq[0], b""));
        seq[1] = seq[1].wrapping_add(1);
        pkts.push(seg(true, cport, sport, 0x10, seq[0], seq[1], b""));
    }
    let mut rest = input.rest();
    while rest.len() >= 2 && pkts.len() < 64 {
        let (ctl, len) = (rest[0], usize::from(rest[1]));
        let body = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[(2 + len).min(rest.len())..];
        let to_server = ctl & 1 == 0;
        if udp {
            let (src, dst, sp, dp) = if to_server {
                (CLIENT, SERVER, cport, sport)
            } else {
                (SERVER, CLIENT, sport, cport)
            };
            pkts.push(relayd_fuzz::udp4(src, dst, sp, dp, body));
            continue;
        }
        let d = usize::from(!to_server);
        let n = body.len() as u32;
        let (at, advance, flags) = match (ctl >> 1) & 3 {
            0 => (seq[d], true, 0x18),
            1 => (seq[d].wrapping_add(n), false, 0x18),
            2 => (seq[d].wrapping_sub(n), false, 0x18),
            _ => (seq[d], true, 0x19),
        };
        pkts.push(seg(to_server, cport, sport, flags, at, seq[1 - d], body));
        if advance {
            seq[d] = seq[d].wrapping_add(n + u32::from(flags & 1));
        }
        if ctl & 8 != 0 {
            pkts.push(seg(to_server, cport, sport, 0x04, seq[d], 0, b""));
        }
    }
    let set = h.detector.rule_set().clone();
    for p in pkts {
        let mut pkt = relayd_fuzz::packet(&p, None);
        let _ = h.detector.inspect(&mut pkt, now);
        for sid in h.detector.matched_sids() {
            assert!(set.by_sid(sid).is_some(), "matched an unknown sid {sid}");
        }
    }
    let (flows, held) = h.detector.flow_usage();
    assert!(flows <= 64, "{flows} flows in a table of 64");
    assert!(held <= 64 << 20, "{held} stream bytes");
});
