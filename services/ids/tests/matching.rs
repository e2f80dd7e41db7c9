//! Matching tests per keyword, flow from conntrack, thresholds and rates, EVE lines and
//! the service as the daemon drives it.

mod common;

use common::*;
use relay_core::{Action, Context, CtState, Packet, ServiceConfig};
use relay_svc_ids::{IdsConfig, Outcome};
use std::time::{Duration, Instant};

#[test]
fn content_and_nocase() {
    assert_eq!(
        hits(r#"content:"Evil";"#, &[b"an Evil x", b"an evil x", b"none"]),
        [true, false, false]
    );
    assert_eq!(
        hits(r#"content:"Evil"; nocase;"#, &[b"an eVIL x", b"none"]),
        [true, false]
    );
    assert_eq!(
        hits(
            r#"content:"|00 01|x|ff|";"#,
            &[b"a\x00\x01x\xffb", b"\x00\x01y\xff"]
        ),
        [true, false]
    );
    assert_eq!(
        hits(r#"content:"abc"; content:!"xyz";"#, &[b"abc", b"abc xyz"]),
        [true, false]
    );
}

#[test]
fn offset_and_depth() {
    let p: &[&[u8]] = &[b"GET /x", b" GET /x", b"xxGETx"];
    assert_eq!(hits(r#"content:"GET"; depth:3;"#, p), [true, false, false]);
    assert_eq!(hits(r#"content:"GET"; offset:1;"#, p), [false, true, true]);
    assert_eq!(
        hits(r#"content:"GET"; offset:1; depth:3;"#, p),
        [false, true, false]
    );
}

#[test]
fn distance_and_within_chain() {
    // B must lie in [end of A + 2, end of A + 2 + 4): 2 to 5 bytes between them.
    let opts = r#"content:"A"; content:"B"; distance:2; within:4;"#;
    assert_eq!(
        hits(opts, &[b"AxxB", b"AB", b"AxB", b"AxxxxxB", b"AxxxxxxB"]),
        [true, false, false, true, false]
    );
    // Backtracking: the first "A" is too far from "B", a later one fits.
    assert_eq!(
        hits(
            r#"content:"A"; content:"B"; within:2;"#,
            &[b"A......AxB", b"A......xxB"]
        ),
        [true, false]
    );
    // A chain of three, each relative to the one before.
    let opts = r#"content:"one"; content:"two"; distance:0; within:5; content:"three"; distance:1; within:8;"#;
    assert_eq!(
        hits(
            opts,
            &[
                b"one two three",
                b"one two  three",
                b"one      two three",
                b"two one three",
                b"one two three two"
            ]
        ),
        [true, true, false, false, true]
    );
    // Negative distance: "B" may start just before the end of "AB".
    assert_eq!(
        hits(
            r#"content:"AB"; content:"B"; distance:-1; within:1;"#,
            &[b"xABx", b"xAxBx"]
        ),
        [true, false]
    );
    // Relative negation: no "x" within 3 bytes after "k".
    assert_eq!(
        hits(
            r#"content:"k"; content:!"x"; distance:0; within:3;"#,
            &[b"k123x", b"k12x"]
        ),
        [true, false]
    );
    // The fast pattern is the longest content even when it comes second.
    assert_eq!(
        hits(
            r#"content:"a"; content:"longer"; distance:0;"#,
            &[b"a longer", b"longer a"]
        ),
        [true, false]
    );
}

#[test]
fn pcre_flags() {
    assert_eq!(
        hits(r#"pcre:"/user\s+root/";"#, &[b"user   root", b"USER root"]),
        [true, false]
    );
    assert_eq!(hits(r#"pcre:"/user\s+root/i";"#, &[b"USER root"]), [true]);
    assert_eq!(hits(r#"pcre:"/^b/m";"#, &[b"a\nb", b"ab"]), [true, false]);
    assert_eq!(hits(r#"pcre:"/a.b/";"#, &[b"a\nb", b"a-b"]), [false, true]);
    assert_eq!(hits(r#"pcre:"/a.b/s";"#, &[b"a\nb"]), [true]);
    assert_eq!(hits(r#"pcre:"/a b c/x";"#, &[b"abc"]), [true]);
    assert_eq!(hits(r#"pcre:"/\xff\x00/";"#, &[b"z\xff\x00z"]), [true]);
    assert_eq!(
        hits(
            r#"content:"id="; pcre:!"/id=\d+/";"#,
            &[b"id=abc", b"id=42"]
        ),
        [true, false]
    );
}

#[test]
fn dsize_ttl_flags_itype() {
    assert_eq!(hits("dsize:>3;", &[b"abcd", b"abc"]), [true, false]);
    assert_eq!(
        hits("dsize:2<>5;", &[b"ab", b"abc", b"abcde"]),
        [false, true, false]
    );
    let (mut d, _) = detector("alert icmp any any -> any any (itype:8; ttl:<10; sid:1;)");
    assert_eq!(
        d.inspect(&mut icmp4(5, 8, b"x"), Instant::now()),
        Outcome::Alert
    );
    assert_eq!(
        d.inspect(&mut icmp4(50, 8, b"x"), Instant::now()),
        Outcome::Clean
    );
    assert_eq!(
        d.inspect(&mut icmp4(5, 0, b"x"), Instant::now()),
        Outcome::Clean
    );
    let (mut d, _) = detector(
        "alert tcp any any -> any any (flags:S,CE; sid:1;)\nalert tcp any any -> any any (flags:+A; sid:2;)",
    );
    let mut syn = tcp4(CLIENT, SERVER, 1, 2, 0x02, b"");
    d.inspect(&mut syn, Instant::now());
    assert_eq!(sids(&d), [1]);
    let mut syn_ece = tcp4(CLIENT, SERVER, 1, 2, 0x42, b"");
    d.inspect(&mut syn_ece, Instant::now());
    assert_eq!(sids(&d), [1]);
    let mut synack = tcp4(CLIENT, SERVER, 1, 2, 0x12, b"");
    d.inspect(&mut synack, Instant::now());
    assert_eq!(sids(&d), [2]);
}

#[test]
fn addresses_ports_and_direction() {
    let (mut d, _) = detector(
        "alert tcp $EXTERNAL_NET any -> $HOME_NET $HTTP_PORTS (sid:1;)\n\
         alert tcp 10.0.1.1 any <> 10.0.2.2 80 (sid:2;)\n\
         alert tcp any any -> [2001:db8::/32] !81 (sid:3;)\n\
         alert udp any any -> any [53,5353] (sid:4;)",
    );
    let now = Instant::now();
    d.inspect(&mut tcp4([8, 8, 8, 8], SERVER, 1, 80, 0x18, b"x"), now);
    assert_eq!(sids(&d), [1]);
    d.inspect(&mut tcp4([8, 8, 8, 8], SERVER, 1, 443, 0x18, b"x"), now);
    assert!(sids(&d).is_empty());
    // `<>` matches the reply direction too.
    d.inspect(&mut tcp4(SERVER, CLIENT, 80, 40000, 0x18, b"x"), now);
    assert_eq!(sids(&d), [2]);
    d.inspect(&mut tcp6("2001:db9::1", "2001:db8::1", 80, b"x"), now);
    assert_eq!(sids(&d), [3]);
    d.inspect(&mut tcp6("2001:db9::1", "2001:db8::1", 81, b"x"), now);
    assert!(sids(&d).is_empty());
    d.inspect(&mut udp4(CLIENT, SERVER, 1, 5353, b"q"), now);
    assert_eq!(sids(&d), [4]);
}

#[test]
fn flow_from_conntrack() {
    let (mut d, c) = detector(
        "alert tcp any any -> any any (flow:to_server,established; content:\"req\"; sid:1;)\n\
         alert tcp any any -> any any (flow:from_server; content:\"req\"; sid:2;)\n\
         alert tcp any any -> any any (flow:not_established; content:\"req\"; sid:3;)\n\
         alert tcp any any -> any any (flow:stateless; content:\"req\"; sid:4;)",
    );
    let now = Instant::now();
    d.inspect(&mut with_ct(http(b"req"), CtState::Established, false), now);
    assert_eq!(sids(&d), [1, 4]);
    d.inspect(&mut with_ct(http(b"req"), CtState::Established, true), now);
    assert_eq!(sids(&d), [2, 4]);
    d.inspect(&mut with_ct(http(b"req"), CtState::New, false), now);
    assert_eq!(sids(&d), [3, 4]);
    // Without conntrack information relayd's own flow table answers: a lone segment
    // without a handshake is not established (Suricata's rule), to server.
    d.inspect(&mut http(b"req"), now);
    assert_eq!(sids(&d), [3, 4]);
    assert_eq!(counter(&c, "no_ct"), 0);
    // An ICMP packet has no flow in the table: only `stateless` can match, and the
    // missing state is counted.
    let (mut d, c) = detector(
        "alert ip any any -> any any (flow:established; sid:1;)\n\
         alert ip any any -> any any (flow:stateless; sid:2;)",
    );
    d.inspect(&mut icmp4(64, 8, b"ping"), now);
    assert_eq!(sids(&d), [2]);
    assert_eq!(counter(&c, "no_ct"), 1);
}

#[test]
fn action_order_pass_first_then_drop_reject() {
    let (mut d, c) = detector(
        "alert tcp any any -> any any (content:\"bad\"; sid:1;)\n\
         drop tcp any any -> any any (content:\"bad\"; sid:2;)\n\
         pass tcp 10.0.1.1 any -> any any (content:\"bad\"; sid:3;)\n\
         reject tcp any any -> any any (content:\"worse\"; sid:4;)",
    );
    let now = Instant::now();
    assert_eq!(d.inspect(&mut http(b"bad"), now), Outcome::Pass);
    assert_eq!(sids(&d), [3]);
    assert_eq!(
        d.inspect(&mut tcp4([1, 1, 1, 1], SERVER, 1, 80, 0x18, b"bad"), now),
        Outcome::Drop
    );
    assert_eq!(sids(&d), [2, 1]);
    assert_eq!(
        d.inspect(
            &mut tcp4([1, 1, 1, 1], SERVER, 1, 80, 0x18, b"bad worse"),
            now
        ),
        Outcome::Reject
    );
    assert_eq!(counter(&c, "sid:2"), 2);
    assert_eq!(counter(&c, "sid:3"), 1);
    assert_eq!(counter(&c, "passed"), 1);
    assert_eq!(counter(&c, "alerts"), 5);
}

#[test]
fn threshold_suppresses_alerts_not_actions() {
    let (mut d, c) = detector(
        "drop tcp any any -> any any (content:\"x\"; threshold: type limit, track by_src, count 2, seconds 60; sid:1;)",
    );
    let now = Instant::now();
    for _ in 0..5 {
        assert_eq!(d.inspect(&mut http(b"x"), now), Outcome::Drop);
    }
    assert_eq!(
        (
            counter(&c, "alerts"),
            counter(&c, "suppressed"),
            counter(&c, "sid:1")
        ),
        (2, 3, 5)
    );
    // Another source has its own budget; a new window starts over.
    d.inspect(&mut tcp4([1, 2, 3, 4], SERVER, 1, 80, 0x18, b"x"), now);
    d.inspect(&mut http(b"x"), now + Duration::from_secs(61));
    assert_eq!(counter(&c, "alerts"), 4);
}

#[test]
fn detection_filter_and_ratelimit() {
    let (mut d, _) = detector(
        "drop udp any any -> any 53 (detection_filter: track by_src, count 3, seconds 10; sid:1;)",
    );
    let t0 = Instant::now();
    let v: Vec<Outcome> = (0..5)
        .map(|_| d.inspect(&mut udp4(CLIENT, SERVER, 1, 53, b"q"), t0))
        .collect();
    assert_eq!(
        v,
        [
            Outcome::Clean,
            Outcome::Clean,
            Outcome::Clean,
            Outcome::Drop,
            Outcome::Drop
        ]
    );
    assert_eq!(
        d.inspect(
            &mut udp4(CLIENT, SERVER, 1, 53, b"q"),
            t0 + Duration::from_secs(10)
        ),
        Outcome::Clean
    );

    // ratelimit with rate: 5 per second per source, burst 5.
    let (mut d, c) =
        detector("ratelimit tcp any any -> any 80 (msg:\"rl\"; rate:5/s, track by_src; sid:9;)");
    let v: Vec<Outcome> = (0..8).map(|_| d.inspect(&mut http(b"x"), t0)).collect();
    assert_eq!(v.iter().filter(|o| **o == Outcome::Clean).count(), 5);
    assert_eq!(v.iter().filter(|o| **o == Outcome::Drop).count(), 3);
    assert_eq!(counter(&c, "dropped"), 3);
    // 200 ms later one token is back.
    let t1 = t0 + Duration::from_millis(200);
    assert_eq!(d.inspect(&mut http(b"x"), t1), Outcome::Clean);
    assert_eq!(d.inspect(&mut http(b"x"), t1), Outcome::Drop);
    // Another source has its own bucket.
    assert_eq!(
        d.inspect(&mut tcp4([9, 9, 9, 9], SERVER, 1, 80, 0x18, b"x"), t1),
        Outcome::Clean
    );

    // ratelimit with detection_filter: everything past 2 per window is dropped.
    let (mut d, _) = detector(
        "ratelimit tcp any any -> any 80 (detection_filter: track by_rule, count 2, seconds 1; sid:9;)",
    );
    let v: Vec<Outcome> = (0..4).map(|_| d.inspect(&mut http(b"x"), t0)).collect();
    assert_eq!(
        v,
        [Outcome::Clean, Outcome::Clean, Outcome::Drop, Outcome::Drop]
    );
}

#[test]
fn malformed_packets_are_clean_not_panics() {
    let (mut d, _) = detector("alert ip any any -> any any (sid:1;)");
    for b in [&[][..], &[0x45, 0, 0], &[0x60; 10]] {
        assert_eq!(
            d.inspect(&mut Packet::from_bytes(b), Instant::now()),
            Outcome::Clean
        );
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("relay-ids-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn service_writes_eve_lines_and_counts_per_sid() {
    let dir = temp_dir("eve");
    let rules = dir.join("local.rules");
    std::fs::write(
        &rules,
        "alert tcp $EXTERNAL_NET any -> $HOME_NET 80 (msg:\"ET POLICY forbidden\"; content:\"forbidden\"; classtype:policy-violation; sid:1000001; rev:2;)\n\
         drop tcp any any -> any 80 (msg:\"block it\"; content:\"blockme\"; sid:1000002;)\n",
    )
    .unwrap();
    let eve = dir.join("eve.json");
    let cfg: IdsConfig = toml::from_str(&format!(
        "rules = [{rules:?}]\neve_log = {eve:?}\n[vars]\nHOME_NET = \"[10.0.0.0/8]\"\nEXTERNAL_NET = \"!$HOME_NET\"\n"
    ))
    .unwrap();
    let f = cfg.into_factory("ids").unwrap();
    assert_eq!(f.kind(), "ids");
    assert_eq!(f.manifest().fail_policy, relay_core::FailPolicy::Closed);
    assert_eq!(f.manifest().needs_bytes, None);
    // relayd's part: it opens the log the manifest names and starts its writer.
    let mut res = relay_core::Resources::new();
    for log in &f.manifest().logs {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log.path)
            .unwrap();
        res.insert_any((log.start)(file).unwrap());
    }
    let counters = relay_core::Counters::new();
    let mut s = f.build(&counters, &res);
    let mut cx = Context::new(0, Instant::now());
    let mut pkt = tcp4(
        [203, 0, 113, 5],
        SERVER,
        40000,
        80,
        0x18,
        b"GET /forbidden HTTP/1.1\r\n",
    );
    assert_eq!(s.process(&mut pkt, &mut cx), Action::Continue);
    assert_eq!(s.process(&mut http(b"blockme"), &mut cx), Action::Drop);
    assert_eq!(s.process(&mut http(b"fine"), &mut cx), Action::Continue);
    assert_eq!(counter(&counters, "sid:1000001"), 1);
    assert_eq!(counter(&counters, "sid:1000002"), 1);
    drop(s);
    drop(res); // the writer flushes and ends
    drop(f);
    let text = std::fs::read_to_string(&eve).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let ts = v["timestamp"].as_str().unwrap();
    assert_eq!(ts.len(), "2026-11-22T20:40:01.123456+0000".len(), "{ts}");
    assert!(ts.ends_with("+0000") && &ts[10..11] == "T" && &ts[19..20] == ".");
    assert_eq!(v["event_type"], "alert");
    assert_eq!(v["src_ip"], "203.0.113.5");
    assert_eq!(v["src_port"], 40000);
    assert_eq!(v["dest_ip"], "10.0.2.2");
    assert_eq!(v["dest_port"], 80);
    assert_eq!(v["proto"], "TCP");
    assert!(v["flow_id"].as_u64().unwrap() > 0);
    let a = &v["alert"];
    assert_eq!(a["action"], "allowed");
    assert_eq!(a["gid"], 1);
    assert_eq!(a["signature_id"], 1000001);
    assert_eq!(a["rev"], 2);
    assert_eq!(a["signature"], "ET POLICY forbidden");
    assert_eq!(a["category"], "Potential Corporate Privacy Violation");
    assert_eq!(a["severity"], 1);
    let v: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(v["alert"]["action"], "blocked");
    // Field order as Suricata writes it.
    let order = [
        "timestamp",
        "flow_id",
        "event_type",
        "src_ip",
        "src_port",
        "dest_ip",
        "dest_port",
        "proto",
        "alert",
    ];
    let pos: Vec<usize> = order
        .iter()
        .map(|k| lines[0].find(&format!("\"{k}\":")).unwrap())
        .collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "{}", lines[0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn strict_refuses_and_lenient_loads_the_rest() {
    let dir = temp_dir("strict");
    let rules = dir.join("bad.rules");
    std::fs::write(
        &rules,
        "alert tcp any any -> any any (content:\"ok\"; sid:1;)\nalert tcp any any -> any any (bogus_kw; sid:2;)\n",
    )
    .unwrap();
    let cfg = |strict: bool| -> IdsConfig {
        toml::from_str(&format!("rules = [{rules:?}]\nstrict = {strict}\n")).unwrap()
    };
    let e = cfg(true).into_factory("ids").err().unwrap();
    assert!(e.message().contains("bad.rules:2: `bogus_kw`"), "{e}");
    let f = cfg(false).into_factory("ids").unwrap();
    assert_eq!(
        f.manifest().fail_policy,
        relay_core::FailPolicy::Open,
        "alert-only fails open"
    );
    let missing: IdsConfig = toml::from_str("rules = [\"/nonexistent/x.rules\"]").unwrap();
    assert!(
        missing
            .into_factory("ids")
            .err()
            .unwrap()
            .message()
            .contains("/nonexistent/x.rules")
    );
    assert!(toml::from_str::<IdsConfig>("rules = []\nunknown_key = 1").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
