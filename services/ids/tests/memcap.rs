//! The application-layer memcap (`app_memcap`) and the exception policy over whole
//! conversations: many flows holding big HTTP bodies stop at the cap, the flow that hits
//! it gets the policy, memory is credited back when transactions retire and when flows
//! go, and unanswered pipelined requests past the per-flow limit are evicted oldest first.

mod common;

use common::*;
use relay_core::Counters;
use relay_svc_ids::{Detector, DetectorOptions, ExceptionPolicy, Outcome, RuleSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn detector_with(rules: &str, cap: usize, policy: ExceptionPolicy) -> (Detector, Counters) {
    detector_voting(rules, cap, policy, false)
}

/// [`detector_with`], with offload votes on or off.
fn detector_voting(
    rules: &str,
    cap: usize,
    policy: ExceptionPolicy,
    votes: bool,
) -> (Detector, Counters) {
    let set = RuleSet::parse_str(rules, "test.rules", &vars()).unwrap();
    assert!(set.errors().is_empty(), "{:?}", set.errors());
    let counters = Counters::new();
    let mut opts = DetectorOptions::default();
    opts.app_memcap = cap;
    opts.exception_policy = policy;
    opts.offload.enabled = votes;
    (
        Detector::with_options(Arc::new(set), &counters, None, opts),
        counters,
    )
}

/// A connection from source port `sport` to port 80, handshake done.
fn open(d: &mut Detector, sport: u16, now: Instant) -> Conv {
    let mut conv = Conv::new(80);
    conv.sport = sport;
    for mut p in conv.handshake() {
        d.inspect(&mut p, now);
    }
    conv
}

/// Sends `bytes` from the client in segments of at most 1400 bytes, the server
/// acknowledging each (its window moves on, as a receiver's does); the outcomes of the
/// client's segments.
fn send(d: &mut Detector, conv: &mut Conv, bytes: &[u8], now: Instant) -> Vec<Outcome> {
    bytes
        .chunks(1400)
        .map(|c| {
            let out = d.inspect(&mut conv.data(true, c), now);
            d.inspect(&mut conv.segment_at(false, 0, b""), now);
            out
        })
        .collect()
}

/// A POST head announcing `len` body bytes.
fn post(len: usize) -> Vec<u8> {
    format!("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: {len}\r\n\r\n").into_bytes()
}

const RULES_DROP: &str = "drop http any any -> any any (http.uri; content:\"/forbidden\"; sid:1;)\n\
    alert http any any -> any any (http.uri; content:\"/after\"; sid:2;)\n\
    drop tcp any any -> any 80 (content:\"evil-bytes\"; sid:3;)";

#[test]
fn many_flows_holding_big_bodies_stop_at_the_cap_and_the_hit_flows_are_dropped() {
    let cap = 2 << 20;
    let (mut d, c) = detector_with(RULES_DROP, cap, ExceptionPolicy::Auto);
    let now = Instant::now();
    let body = vec![b'x'; 100 << 10];
    let mut hit = None;
    for i in 0..60u16 {
        let mut conv = open(&mut d, 20_000 + i, now);
        let mut outs = send(&mut d, &mut conv, &post(200 << 10), now);
        outs.extend(send(&mut d, &mut conv, &body, now));
        let (used, _) = d.app_usage();
        assert!(
            used <= cap,
            "flow {i}: {used} bytes charged past the cap {cap}"
        );
        if hit.is_none() && outs.contains(&Outcome::Drop) {
            hit = Some(conv);
        }
    }
    // Without a cap, 60 flows would hold 60 x 100 KiB; the cap stopped some of them, and
    // the rule set can block, so the default policy dropped those flows.
    assert!(counter(&c, "app_memcap") >= 1);
    assert!(counter(&c, "exception_policy_drop_flow") >= 1);
    assert_eq!(
        counter(&c, "app_memcap"),
        counter(&c, "exception_policy_drop_flow")
    );
    let mut conv = hit.expect("a flow hit the cap");
    assert_eq!(
        d.inspect(&mut conv.data(true, b"more"), now),
        Outcome::Drop,
        "later packets of the flow are dropped"
    );
    // The hit flows' parsers were freed: a new flow is still parsed and inspected.
    let mut fresh = open(&mut d, 30_000, now);
    d.inspect(
        &mut fresh.data(true, b"GET /after HTTP/1.1\r\nHost: a\r\n\r\n"),
        now,
    );
    assert_eq!(sids(&d), [2]);
    assert_eq!(counter(&c, "app_memuse") as usize, d.app_usage().0);
}

/// Fills the cap with one flow's body, then sends a second flow over it; returns the
/// second flow's outcomes and the detector.
fn overflow(policy: ExceptionPolicy, rules: &str) -> (Detector, Counters, Conv, Vec<Outcome>) {
    overflow_voting(policy, rules, false)
}

/// [`overflow`], with offload votes on or off.
fn overflow_voting(
    policy: ExceptionPolicy,
    rules: &str,
    votes: bool,
) -> (Detector, Counters, Conv, Vec<Outcome>) {
    let (mut d, c) = detector_voting(rules, 250 << 10, policy, votes);
    let now = Instant::now();
    let mut first = open(&mut d, 20_000, now);
    send(&mut d, &mut first, &post(200 << 10), now);
    send(&mut d, &mut first, &vec![b'x'; 100 << 10], now);
    assert_eq!(
        counter(&c, "app_memcap"),
        0,
        "one body fits: {:?}",
        d.app_usage()
    );
    let mut second = open(&mut d, 20_001, now);
    let mut outs = send(&mut d, &mut second, &post(200 << 10), now);
    outs.extend(send(&mut d, &mut second, &vec![b'y'; 100 << 10], now));
    assert_eq!(
        counter(&c, "app_memcap"),
        1,
        "the second flow hits the cap: {:?}",
        d.app_usage()
    );
    (d, c, second, outs)
}

#[test]
fn pass_flow_and_bypass_let_the_hit_flow_go_uninspected() {
    for (policy, name) in [
        (ExceptionPolicy::PassFlow, "exception_policy_pass_flow"),
        (ExceptionPolicy::Bypass, "exception_policy_bypass"),
    ] {
        let (mut d, c, mut conv, outs) = overflow(policy, RULES_DROP);
        assert!(outs.contains(&Outcome::Pass), "{name}");
        assert_eq!(counter(&c, name), 1);
        // Even bytes a rule drops pass now.
        let now = Instant::now();
        assert_eq!(
            d.inspect(&mut conv.data(true, b"evil-bytes"), now),
            Outcome::Pass,
            "{name}"
        );
    }
}

/// A flow the exception policy passes votes to offload: `bypass` says so, `pass-flow` is a
/// pass; `drop-flow` and `ignore` never vote.
#[test]
fn a_flow_the_exception_policy_passes_votes_to_offload() {
    use relay_core::{Offload, OffloadReason};
    for (policy, want) in [
        (ExceptionPolicy::PassFlow, Some(OffloadReason::Pass)),
        (ExceptionPolicy::Bypass, Some(OffloadReason::Bypass)),
        (ExceptionPolicy::DropFlow, None),
        (ExceptionPolicy::Ignore, None),
    ] {
        let (mut d, _, mut conv, _) = overflow_voting(policy, RULES_DROP, true);
        d.inspect(&mut conv.data(true, b"more"), Instant::now());
        assert_eq!(d.offload(), want.map(Offload::both), "{}", policy.name());
    }
}

#[test]
fn ignore_keeps_inspecting_packets_and_stream_without_the_app_layer() {
    let (mut d, c, mut conv, outs) = overflow(ExceptionPolicy::Ignore, RULES_DROP);
    assert!(!outs.contains(&Outcome::Drop) && !outs.contains(&Outcome::Pass));
    assert_eq!(counter(&c, "exception_policy_ignore"), 1);
    let now = Instant::now();
    // Payload rules still apply to the flow.
    assert_eq!(
        d.inspect(&mut conv.data(true, b"evil-bytes"), now),
        Outcome::Drop
    );
    // The freed parser holds nothing: only the first flow's state is charged.
    let (used, cap) = d.app_usage();
    assert!(used < cap && used >= 100 << 10, "{used}");
}

#[test]
fn an_alert_only_rule_set_ignores_by_default() {
    let (_, c, _, outs) = overflow(
        ExceptionPolicy::Auto,
        "alert http any any -> any any (http.uri; content:\"/x\"; sid:1;)",
    );
    assert!(!outs.contains(&Outcome::Drop));
    assert_eq!(counter(&c, "exception_policy_ignore"), 1);
    assert_eq!(counter(&c, "exception_policy_drop_flow"), 0);
}

#[test]
fn memory_is_credited_when_transactions_retire_and_when_flows_go() {
    let (mut d, c) = detector_with(RULES_DROP, 64 << 20, ExceptionPolicy::Auto);
    let now = Instant::now();
    // Retired transactions: request, response, again; the charge does not grow.
    let mut conv = open(&mut d, 20_000, now);
    let mut after_first = 0;
    for i in 0..20 {
        send(&mut d, &mut conv, &post(50_000), now);
        send(&mut d, &mut conv, &vec![b'x'; 50_000], now);
        assert!(d.app_usage().0 >= 50_000, "the body is charged while held");
        d.inspect(
            &mut conv.data(false, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            now,
        );
        d.inspect(&mut conv.data(true, b""), now);
        let used = d.app_usage().0;
        assert!(
            used < 50_000,
            "round {i}: {used} still charged once retired"
        );
        if i == 0 {
            after_first = used;
        }
        assert!(used <= after_first + 4096, "round {i}: {used} grows");
    }
    // Flows holding bodies, then removed by the table (timed out): all credited back.
    for i in 0..50u16 {
        let mut conv = open(&mut d, 21_000 + i, now);
        send(&mut d, &mut conv, &post(200 << 10), now);
        send(&mut d, &mut conv, &vec![b'x'; 60_000], now);
    }
    assert!(d.app_usage().0 >= 50 * 60_000);
    let later = now + Duration::from_secs(3600);
    for i in 0..200u16 {
        // Each packet sweeps two more slots of the table.
        let mut syn = tcp4_seq([10, 9, 9, 9], SERVER, 40_000 + i, 80, SYN, 1, 0, b"");
        d.inspect(&mut syn, later);
    }
    assert_eq!(
        d.app_usage().0,
        0,
        "every removed flow's app memory is credited"
    );
    assert_eq!(counter(&c, "app_memuse"), 0);
}

#[test]
fn pipelined_unanswered_requests_past_the_limit_are_evicted_oldest_first() {
    let (mut d, c) = detector_with(
        "alert http any any -> any any (http.uri; content:\"/req-39\"; sid:1;)",
        64 << 20,
        ExceptionPolicy::Auto,
    );
    let now = Instant::now();
    let mut conv = open(&mut d, 20_000, now);
    let mut all = Vec::new();
    for i in 0..40 {
        all.extend_from_slice(format!("GET /req-{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
    }
    let mut alerted = false;
    for chunk in all.chunks(1400) {
        d.inspect(&mut conv.data(true, chunk), now);
        alerted |= sids(&d) == [1];
    }
    // Before: the 33rd request was an error and nothing after it was parsed.
    assert!(alerted, "the 40th request is still parsed and inspected");
    assert_eq!(counter(&c, "app_tx_evicted"), 8);
}

#[test]
fn idle_flows_holding_memory_are_reclaimed_so_new_flows_are_still_parsed() {
    let cap = 2 << 20;
    let (mut d, c) = detector_with(RULES_DROP, cap, ExceptionPolicy::Auto);
    let t0 = Instant::now();
    // Endless heads fill the cap; the flows that hit it are dropped, the others wait.
    let mut head = b"GET /endless HTTP/1.1\r\nHost: a\r\n".to_vec();
    while head.len() < 60 << 10 {
        head.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    for i in 0..60u16 {
        let mut conv = open(&mut d, 20_000 + i, t0);
        send(&mut d, &mut conv, &head, t0);
    }
    let (used, _) = d.app_usage();
    assert!(used > cap - cap / 8, "the attack fills the cap: {used}");
    let dropped = counter(&c, "exception_policy_drop_flow");
    // Two seconds later, an honest upload: the waiting heads are reclaimed (dropped by
    // the policy, their parsers freed) and the upload is parsed and inspected.
    let t1 = t0 + Duration::from_secs(2);
    let mut honest = open(&mut d, 30_000, t1);
    let mut upload = b"POST /after HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n".to_vec();
    upload.extend(std::iter::repeat_n(b'u', 100_000));
    let outs = send(&mut d, &mut honest, &upload, t1);
    assert!(!outs.contains(&Outcome::Drop), "the honest upload passes");
    assert_eq!(counter(&c, "sid:2"), 1, "and is inspected");
    assert!(counter(&c, "app_reclaimed") >= 1);
    assert!(
        counter(&c, "exception_policy_drop_flow") > dropped,
        "reclaimed flows get the policy"
    );
    assert!(
        d.app_usage().0 <= cap - cap / 4 + (200 << 10),
        "{:?}",
        d.app_usage()
    );
}

/// The stream memcap gets the exception policy too (Suricata's `stream.memcap-policy`):
/// out-of-order segments that fill it end the flow that hit it, dropped by default when
/// the rules can block; other flows go on.
#[test]
fn the_stream_memcap_applies_the_exception_policy() {
    let set = RuleSet::parse_str(RULES_DROP, "test.rules", &vars()).unwrap();
    let c = Counters::new();
    let mut opts = DetectorOptions::default();
    opts.flows.memcap = 32 << 10;
    let mut d = Detector::with_options(Arc::new(set), &c, None, opts);
    let now = Instant::now();
    let conv = open(&mut d, 20_000, now);
    let chunk = [b'x'; 1000];
    let mut outs = Vec::new();
    // Segments past a hole that never fills, within the window, until the memcap stops
    // the direction.
    for i in 1..60u32 {
        outs.push(d.inspect(&mut conv.segment_at(true, i * 1000, &chunk), now));
    }
    assert!(counter(&c, "stream_memcap") >= 1);
    assert_eq!(counter(&c, "exception_policy_drop_flow"), 1);
    let first_drop = outs.iter().position(|o| *o == Outcome::Drop).unwrap();
    assert!(outs[first_drop..].iter().all(|o| *o == Outcome::Drop));
    // The dropped flow holds no stream memory any more: it would otherwise keep every
    // later flow at the memcap until it timed out.
    assert_eq!(d.flow_usage().1, 0);
    assert_eq!(counter(&c, "stream_memuse"), 0);
    // Another flow is reassembled and inspected as before, also where it needs memory.
    let mut other = open(&mut d, 20_001, now);
    for i in 1..20u32 {
        let out = d.inspect(&mut other.segment_at(true, 100 + i * 1000, &chunk), now);
        assert_eq!(out, Outcome::Clean);
    }
    assert!(d.flow_usage().1 >= 19_000);
    d.inspect(
        &mut other.data(true, b"GET /after HTTP/1.1\r\nHost: a\r\n\r\n"),
        now,
    );
    assert_eq!(sids(&d), [2]);
}
