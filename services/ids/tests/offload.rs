//! Offload votes (docs/ids.md, "Offload"): each reason votes when nothing later in the flow
//! could change a verdict or an alert, and every case that keeps a flow inline never
//! votes. Votes change nothing of what is inspected: the same packets give the same
//! matches and outcomes with votes on and off.

mod common;

use common::*;
use relay_core::{Context, Offload, OffloadReason, Packet, Service, ServiceConfig};
use relay_svc_ids::{Detector, DetectorOptions, IdsConfig, OffloadOptions, Outcome, RuleSet};
use std::sync::Arc;
use std::time::Instant;

const DEPTH: u64 = 100;

fn opts(enabled: bool, encrypted: bool, normalize: bool) -> DetectorOptions {
    let mut o = DetectorOptions::default();
    o.offload = OffloadOptions { enabled, encrypted };
    o.normalize = normalize;
    o.flows.stream.depth = DEPTH;
    o
}

fn det(rules: &str, o: DetectorOptions) -> (Detector, relay_core::Counters) {
    let set = RuleSet::parse_str(rules, "t.rules", &vars()).unwrap();
    assert!(set.errors().is_empty(), "{:?}", set.errors());
    let c = relay_core::Counters::new();
    (Detector::with_options(Arc::new(set), &c, None, o), c)
}

/// Per packet: its outcome, the sids it matched, and the vote.
type Seen = Vec<(Outcome, Vec<u32>, Option<Offload>)>;

fn feed(d: &mut Detector, pkts: &[Packet]) -> Seen {
    let now = Instant::now();
    pkts.iter()
        .map(|p| {
            let mut p = Packet::from_bytes(p.data());
            let out = d.inspect(&mut p, now);
            (out, sids(d), d.offload())
        })
        .collect()
}

/// `rules` over `pkts` with votes on (`o`) and off: the matches and outcomes must be the
/// same; returns what the voting detector saw, and its counters.
fn both_ways(rules: &str, o: DetectorOptions, pkts: &[Packet]) -> (Seen, relay_core::Counters) {
    let mut off = o.clone();
    off.offload = OffloadOptions::default();
    let (mut d, c) = det(rules, o);
    let on = feed(&mut d, pkts);
    let (mut d0, _) = det(rules, off);
    let quiet = feed(&mut d0, pkts);
    for (i, (a, b)) in on.iter().zip(&quiet).enumerate() {
        assert_eq!(
            (a.0, &a.1),
            (b.0, &b.1),
            "packet {i}: votes changed inspection"
        );
        assert_eq!(b.2, None, "packet {i}: a vote with offload off");
    }
    (on, c)
}

/// A connection to `port` whose two directions each send `ts` and `tc` bytes in 40-byte
/// segments, alternating.
fn bulk(port: u16, ts: usize, tc: usize) -> Vec<Packet> {
    let mut conv = Conv::new(port);
    let mut pkts = conv.handshake();
    let (mut a, mut b) = (ts, tc);
    while a > 0 || b > 0 {
        if a > 0 {
            pkts.push(conv.data(true, &[b'a'; 40][..a.min(40)]));
            a -= a.min(40);
        }
        if b > 0 {
            pkts.push(conv.data(false, &[b'b'; 40][..b.min(40)]));
            b -= b.min(40);
        }
    }
    pkts.push(conv.data(true, b"after depth"));
    pkts.push(conv.data(false, b"after depth"));
    pkts
}

const DEPTH_BOTH: Option<Offload> = Some(Offload::both(OffloadReason::StreamDepth));

#[test]
fn stream_depth_both_ways_votes_when_no_rule_reads_later_packets() {
    // A transaction rule (no parser on this flow), a rule for another port, a stream-only
    // rule, an IP-only rule and a pass rule for another port: none reads later packets.
    let rules = "alert http any any -> any any (http.uri; content:\"/x\"; sid:1;)\n\
                 drop tcp any any -> any 443 (content:\"aaa\"; sid:2;)\n\
                 alert tcp any any -> any 9000 (flow:only_stream; content:\"zzz\"; sid:3;)\n\
                 alert tcp 10.0.0.1 any -> any any (sid:4;)\n\
                 pass tcp any any -> any 22 (content:\"a\"; sid:5;)";
    let pkts = bulk(9000, 200, 200);
    let (seen, c) = both_ways(rules, opts(true, false, true), &pkts);
    let first = seen.iter().position(|s| s.2.is_some()).expect("a vote");
    // The vote comes with the packet that took the second direction to its depth.
    assert_eq!(first, 3 + 5, "{seen:?}");
    assert!(seen[..first].iter().all(|s| s.2.is_none()));
    assert!(seen[first..].iter().all(|s| s.2 == DEPTH_BOTH), "{seen:?}");
    assert_eq!(
        counter(&c, "offload_votes_stream_depth"),
        (seen.len() - first) as u64
    );
    assert_eq!(counter(&c, "offload_kept_inline"), 0);
}

#[test]
fn stream_depth_one_way_votes_that_direction_only_and_never_both() {
    let rules = "alert tcp any any -> any 443 (content:\"x\"; sid:1;)";
    let pkts = bulk(9000, 200, 20);
    let (seen, _) = both_ways(rules, opts(true, false, true), &pkts);
    // With normalization (the service's), one direction's segments are judged against the
    // other's sequence and window: no one-way vote, and never Both.
    assert!(seen.iter().all(|s| s.2.is_none()), "{seen:?}");
    let (seen, _) = both_ways(rules, opts(true, false, false), &pkts);
    let dir = Some(Offload::direction(OffloadReason::StreamDepth));
    let votes: Vec<_> = seen.iter().filter_map(|s| s.2).collect();
    assert!(!votes.is_empty());
    assert!(votes.iter().all(|v| Some(*v) == dir), "{seen:?}");
    // The client's packets after its depth vote; the server's never do.
    assert_eq!(seen.last().unwrap().2, None);
    assert_eq!(seen[seen.len() - 2].2, dir);
}

#[test]
fn a_packet_rule_keeps_a_flow_past_its_depth_inline_and_still_drops() {
    let rules = "drop tcp any any -> any 9000 (content:\"evil\"; sid:1;)";
    let mut pkts = bulk(9000, 200, 200);
    // Past the depth, the packet itself is still inspected.
    let mut conv = Conv::new(9000);
    conv.seq = [
        0xffff_ff01u32.wrapping_add(200 + 11),
        0x7000_0001 + 200 + 11,
    ];
    pkts.push(conv.data(true, b"evil"));
    let (seen, c) = both_ways(rules, opts(true, false, true), &pkts);
    assert!(seen.iter().all(|s| s.2.is_none()), "{seen:?}");
    assert_eq!(seen.last().unwrap().0, Outcome::Drop);
    assert_eq!(counter(&c, "offload_kept_inline"), 1);
    for keep in [
        "alert tcp any any -> any any (flags:R; sid:1;)",
        "alert tcp any any -> any any (dsize:>1000; sid:1;)",
        "drop ip any any -> any any (ttl:<2; sid:1;)",
        "alert tcp any any -> any 9000 (flow:established,to_server; sid:1;)",
        // flowbits set by one packet rule, read by another.
        "alert tcp any any -> any 9000 (content:\"login\"; flowbits:set,auth; noalert; sid:1;)\n\
         alert tcp any any -> any 9000 (flowbits:isset,auth; sid:2;)",
        // A threshold still counting.
        "alert tcp any any -> any 9000 (flags:R; threshold: type limit, track by_src, count 1, seconds 60; sid:1;)",
        // A rate that could still drop.
        "ratelimit tcp any any -> any 9000 (rate:10/s; sid:1;)",
    ] {
        let (seen, _) = both_ways(keep, opts(true, false, true), &pkts);
        assert!(seen.iter().all(|s| s.2.is_none()), "{keep}: {seen:?}");
    }
}

/// The attacker's case for a fail-closed IPS: HTTP keep-alive, a clean first request and
/// response, then a second request a `drop` rule matches.
#[test]
fn keep_alive_second_request_is_dropped_and_the_flow_never_voted() {
    let rules = "drop http any any -> any any (http.uri; content:\"/admin\"; sid:1;)\n\
                 drop tcp any any -> any 80 (content:\"/secret\"; sid:2;)";
    let mut conv = Conv::new(80);
    let mut pkts = conv.handshake();
    pkts.push(conv.data(true, b"GET /ok HTTP/1.1\r\nHost: a\r\n\r\n"));
    pkts.push(conv.data(false, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"));
    pkts.push(conv.data(true, b"GET /admin HTTP/1.1\r\nHost: a\r\n\r\n"));
    let mut o = opts(true, true, true);
    o.flows.stream.depth = 1 << 20;
    let (seen, _) = both_ways(rules, o, &pkts);
    assert!(seen.iter().all(|s| s.2.is_none()), "{seen:?}");
    assert_eq!(seen.last().unwrap().0, Outcome::Drop);
    // Past the depth both ways, the packet rule still reads the second request.
    let mut conv = Conv::new(80);
    let mut pkts = conv.handshake();
    let body = [b'x'; 120];
    let mut req = b"POST /ok HTTP/1.1\r\nContent-Length: 120\r\n\r\n".to_vec();
    req.extend_from_slice(&body);
    pkts.push(conv.data(true, &req));
    let mut resp = b"HTTP/1.1 200 OK\r\nContent-Length: 120\r\n\r\n".to_vec();
    resp.extend_from_slice(&body);
    pkts.push(conv.data(false, &resp));
    pkts.push(conv.data(true, b"GET /secret HTTP/1.1\r\n\r\n"));
    let (seen, _) = both_ways(rules, opts(true, true, true), &pkts);
    assert!(seen.iter().all(|s| s.2.is_none()), "{seen:?}");
    assert_eq!(seen.last().unwrap().0, Outcome::Drop);
}

/// A ClientHello naming `sni`, in one record.
fn client_hello(sni: &[u8]) -> Vec<u8> {
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
    rec
}

fn tls_flow() -> Vec<Packet> {
    let mut conv = Conv::new(443);
    let mut pkts = conv.handshake();
    pkts.push(conv.data(true, &client_hello(b"www.example.com")));
    pkts.push(conv.data(false, b"\x14\x03\x03\x00\x01\x01"));
    pkts.push(conv.data(true, b"\x14\x03\x03\x00\x01\x01"));
    for _ in 0..3 {
        pkts.push(conv.data(true, b"\x17\x03\x03\x00\x05hello"));
        pkts.push(conv.data(false, b"\x17\x03\x03\x00\x05world"));
    }
    pkts
}

#[test]
fn tls_votes_once_encrypted_both_ways_with_bypass_unless_a_rule_reads_it() {
    let rules = "alert tls any any -> any any (tls.sni; content:\"example\"; sid:1;)";
    let pkts = tls_flow();
    let enc = Some(Offload::both(OffloadReason::Encrypted));
    let (seen, c) = both_ways(rules, opts(true, true, true), &pkts);
    assert_eq!(seen[3].1, [1], "the SNI is inspected");
    assert!(seen[..5].iter().all(|s| s.2.is_none()), "{seen:?}");
    assert!(seen[5..].iter().all(|s| s.2 == enc), "{seen:?}");
    assert_eq!(counter(&c, "offload_votes_encrypted"), 7);
    // Without `tls_encryption_handling = "bypass"`: no vote.
    let (seen, _) = both_ways(rules, opts(true, false, true), &pkts);
    assert!(seen.iter().all(|s| s.2.is_none()));
    // A rule on the encrypted bytes, or any packet rule of the flow, keeps it inline.
    for keep in [
        "alert tcp any any -> any 443 (content:\"|17 03 03|\"; sid:2;)",
        "alert tls any any -> any any (content:\"world\"; sid:2;)",
        "alert tls any any -> any any (flow:established; sid:2;)",
    ] {
        let (seen, _) = both_ways(&format!("{rules}\n{keep}"), opts(true, true, true), &pkts);
        assert!(seen.iter().all(|s| s.2.is_none()), "{keep}: {seen:?}");
    }
}

#[test]
fn a_pass_rule_and_the_bypass_keyword_vote_for_the_rest_of_the_flow() {
    let pkts = bulk(9000, 80, 80);
    let pass = Some(Offload::both(OffloadReason::Pass));
    let (seen, c) = both_ways(
        "pass tcp any any -> any 9000 (sid:1;)\ndrop tcp any any -> any 9000 (content:\"a\"; sid:2;)",
        opts(true, false, true),
        &pkts,
    );
    assert!(seen.iter().all(|s| s.2 == pass), "{seen:?}");
    assert!(counter(&c, "offload_votes_pass") > 0);
    let rules = "alert tcp any any -> any 9000 (content:\"aaaa\"; bypass; sid:1;)\n\
                 alert tcp any 9000 -> any any (content:\"bbbb\"; sid:2;)";
    let (seen, c) = both_ways(rules, opts(true, false, true), &pkts);
    let at = seen.iter().position(|s| s.1.contains(&1)).unwrap();
    assert!(seen[..at].iter().all(|s| s.2.is_none()));
    let by = Some(Offload::both(OffloadReason::Bypass));
    assert!(seen[at..].iter().all(|s| s.2 == by), "{seen:?}");
    // Bypassed: the rest of the flow is passed uninspected, as in Suricata.
    assert!(seen[at + 1..].iter().all(|s| s.1.is_empty()));
    assert!(counter(&c, "flow_passed") > 0);
    // A bypass rule that matches with a drop: the packet is dropped, no bypass.
    let rules = "alert tcp any any -> any 9000 (content:\"aaaa\"; bypass; sid:1;)\n\
                 drop tcp any any -> any 9000 (content:\"aa\"; sid:2;)";
    let (seen, _) = both_ways(rules, opts(true, false, true), &pkts);
    assert!(seen.iter().all(|s| s.2.is_none()), "{seen:?}");
}

#[test]
fn the_service_declares_offloads_and_votes_through_its_context() {
    let dir = std::env::temp_dir().join(format!("ids-offload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("r.rules");
    std::fs::write(&rules, "pass tcp any any -> any 9000 (sid:1;)\n").unwrap();
    let cfg = |extra: &str| -> IdsConfig {
        toml::from_str(&format!(
            "rules = [{:?}]\n{extra}",
            rules.display().to_string()
        ))
        .unwrap()
    };
    let f = cfg("").into_factory("ids").unwrap();
    assert!(f.manifest().offloads);
    let off = cfg("offload = false\n").into_factory("ids").unwrap();
    assert!(!off.manifest().offloads);
    assert!(
        toml::from_str::<IdsConfig>("rules = [\"r\"]\ntls_encryption_handling = \"track-only\"\n")
            .is_err()
    );
    cfg("tls_encryption_handling = \"bypass\"\n");
    let vote = |f: &std::sync::Arc<dyn relay_core::ServiceFactory>| {
        let mut s: Box<dyn Service> = f.build(&relay_core::Counters::new(), &Default::default());
        let mut conv = Conv::new(9000);
        let mut last = None;
        for mut p in conv.handshake() {
            let mut cx = Context::new(0, Instant::now());
            s.process(&mut p, &mut cx);
            last = cx.offload_vote();
        }
        last
    };
    assert_eq!(vote(&f), Some(Offload::both(OffloadReason::Pass)));
    assert_eq!(vote(&off), None);
}
