//! The evasion suite (issue 24): an attacker in the source namespace (scapy,
//! tests/evasion/attack.py) tries every class of IPS evasion it knows against a real Linux
//! application in the destination namespace, through an inline engine that drops a
//! forbidden string. The application records every byte it reads; it must never read the
//! forbidden string, and it must read the honest bytes around the attack. Each case also
//! runs on a control path that bypasses the engine, where the forbidden string must
//! arrive: a case that Linux itself defeats proves nothing, so the control keeps the
//! suite honest as kernels change. Needs root and Debian's python3-scapy.
//!
//! Topology: src -- relay (the engine, queue on FORWARD) -- router -- dst. The router lets
//! a packet's TTL expire after the engine saw it. No conntrack user in the relay
//! namespace, so fragments reach the queue unreassembled (checked).
//!
//! `RELAYD_EVASION_SOAK=1` (`make soak`) adds the long variants: the fragment timeout with
//! Linux's default `ipfrag_time`, more seeds for the random cases, 2,000 connections per
//! memory attack. `RELAYD_EVASION_ENGINE=suricata` runs the same suite with Suricata 7 in
//! NFQ mode as the inline engine instead of relayd (docs/ids.md's comparison).

mod support;

#[path = "evasion/bed.rs"]
mod bed;
#[path = "evasion/memory.rs"]
mod memory;

use bed::{Bed, Outcome};
use std::time::{Duration, Instant};

/// The TCP cases (tests/evasion/attack.py names them `case_*`).
const TCP_CASES: &[&str] = &[
    "plain",
    "honest_no_timestamp",
    "data_on_handshake_ack",
    "ins_noack",
    "ins_bad_tcp_checksum",
    "ins_bad_ip_checksum",
    "ins_ack_unsent",
    "ins_ack_too_old",
    "ins_paws",
    "ins_beyond_window",
    "rst_beyond_window",
    "rst_in_window",
    "rst_bad_checksum",
    "syn_data",
    "syn_resync",
    "urgent_byte",
    "urgent_pointer_ahead",
    "ins_md5_option",
    "ins_v6_destopt_discard",
    "ttl_expires_at_relay",
    "ttl_expires_after_relay",
    "ooo_same_start_longer",
    "ooo_same_start_shorter",
    "ooo_later_start_partial",
    "inorder_overlaps_queued",
    "ooo_new_covers_queued",
    "ooo_new_before_partial",
    "retrans_overlap_new",
    "tiny_random",
];

/// The fragment cases, each over UDP and TCP, IPv4 and IPv6.
const FRAG_CASES: &[&str] = &[
    "resend_completing",
    "short_dup_first",
    "short_dup_first_late",
    "unaligned_more",
    "dup_evil_first",
    "dup_benign_first",
    "overlap_later_first",
    "overlap_earlier_first",
    "false_last_then_fresh",
    "tiny_first_then_fresh",
    "atomic",
    "max_dist_shadow",
];

/// How long the destination keeps a fragment train in `make test` (its `ipfrag_time` and
/// `ip6frag_time`), so that the timeout case takes seconds, not half a minute.
const SHORT_FRAG_TIME: u64 = 2;

/// relayd's fragment timeouts set to the destination's (`SHORT_FRAG_TIME`).
fn frag_options() -> String {
    format!("frag_timeout = {SHORT_FRAG_TIME}\nfrag6_timeout = {SHORT_FRAG_TIME}")
}

fn soak() -> bool {
    std::env::var("RELAYD_EVASION_SOAK").is_ok_and(|v| v != "0")
}

/// Every case name, as attack.py takes them (`NAME/FAMILY`).
fn case_list(seeds_of_random: usize) -> Vec<String> {
    let mut out = Vec::new();
    for fam in [4, 6] {
        for c in TCP_CASES {
            match (*c, fam) {
                ("ins_bad_ip_checksum", 6) => continue, // IPv6 has no header checksum
                ("ins_v6_destopt_discard", 4) => continue,
                _ => {}
            }
            out.push(format!("{c}/{fam}"));
        }
        for _ in 1..seeds_of_random {
            out.push(format!("tiny_random/{fam}"));
        }
        for c in FRAG_CASES {
            if *c == "max_dist_shadow" && fam == 6 {
                continue; // ipfrag_max_dist is IPv4's
            }
            for l4 in ["udp", "tcp"] {
                out.push(format!("frag_{c}_{l4}/{fam}"));
            }
        }
        out.push(format!("frag_timeout_shadow_udp/{fam}"));
        if soak() {
            out.push(format!("frag_timeout_shadow_tcp/{fam}"));
        }
        out.push(format!("frag_honest_udp/{fam}"));
    }
    out
}

#[test]
fn evasion_cases_never_deliver_the_forbidden_bytes() {
    let t = Instant::now();
    let bed = Bed::new("evasion");
    bed.dst
        .sysctl("net.ipv4.ipfrag_time", &SHORT_FRAG_TIME.to_string());
    bed.dst
        .sysctl("net.ipv6.ip6frag_time", &SHORT_FRAG_TIME.to_string());
    let engine = bed.start_engine(&frag_options());
    let cases = case_list(if soak() { 8 } else { 1 });
    let outcomes = bed.attack(&cases, 1, SHORT_FRAG_TIME as f64 + 0.6);
    let frags = bed.fragments_at_relay();
    let report = bed::report(&outcomes);
    eprintln!(
        "{report}\nengine {}: {} cases in {:.1} s; fragments that reached the relay's \
         netfilter unreassembled: {frags}",
        engine.name(),
        outcomes.len(),
        t.elapsed().as_secs_f64()
    );
    engine.check_alive(&bed);
    bed::write_results(&engine.name(), &outcomes);
    assert!(
        frags > 0,
        "fragments were reassembled before the queue (a conntrack user in the relay namespace?)"
    );
    assert_all_pass(&outcomes, &report);
}

/// The long fragment timeout (soak only): the host forgets a train after Linux's default
/// 30 s (`ipfrag_time`); a benign first fragment sent 32 s before the real train must not
/// shadow it. Prints and returns at once without `RELAYD_EVASION_SOAK`.
#[test]
fn fragment_timeout_with_linux_defaults() {
    if !soak() {
        eprintln!("skipped: the 32 s fragment timeout runs in `make soak` (RELAYD_EVASION_SOAK=1)");
        return;
    }
    let bed = Bed::new("evasion-ftime");
    let engine = bed.start_engine("");
    let cases: Vec<String> = ["udp", "tcp"]
        .iter()
        .map(|l4| format!("frag_timeout_shadow_{l4}/4"))
        .collect();
    let outcomes = bed.attack(&cases, 3, 32.0);
    let report = bed::report(&outcomes);
    eprintln!("{report}");
    engine.check_alive(&bed);
    assert_all_pass(&outcomes, &report);
}

/// The TCP cases with `flow:established,to_server` in the rule (soak only): the keyword
/// makes relayd read conntrack state, so the relay namespace tracks connections, and the
/// stream must still be the one the host reads.
#[test]
fn tcp_cases_with_flow_keywords() {
    if !soak() {
        eprintln!("skipped: runs in `make soak` (RELAYD_EVASION_SOAK=1)");
        return;
    }
    let bed = Bed::new("evasion-flow");
    let rules = bed::RULES.replace(
        "content:\"EVIL-PAYLOAD\"; sid:1;",
        "flow:established,to_server; content:\"EVIL-PAYLOAD\"; sid:1;",
    );
    let engine = bed.start_engine_with(&rules, &frag_options(), &[]);
    let cases: Vec<String> = case_list(1)
        .into_iter()
        .filter(|c| !c.starts_with("frag_"))
        .collect();
    let outcomes = bed.attack(&cases, 9, 0.0);
    let report = bed::report(&outcomes);
    eprintln!("{report}");
    engine.check_alive(&bed);
    assert_all_pass(&outcomes, &report);
}

/// Honest traffic through the same configuration arrives byte-identical: 1 MiB over TCP
/// to the protected port from the attacker's crafting code in segments of random size,
/// some reordered, some sent twice (IPv4; 256 KiB over IPv6); 1 MiB from a kernel socket
/// written in random pieces with TCP_NODELAY (256 KiB over IPv6); and UDP datagrams the
/// source's kernel fragments.
#[test]
fn honest_traffic_passes_byte_identical() {
    let bed = Bed::new("evasion-honest");
    let engine = bed.start_engine(&frag_options());
    let cases = ["honest_random/4".to_owned(), "honest_random/6".to_owned()];
    let outcomes = bed.attack(&cases, 5, 0.0);
    let report = bed::report(&outcomes);
    eprintln!("{report}");
    assert_all_pass(&outcomes, &report);
    for (dst, bytes) in [("10.0.3.2", 1 << 20), ("[fd00:3::2]", 256 << 10)] {
        let addr = support::addr(&format!("{dst}:{}", bed::TCP_PORT));
        let t = Instant::now();
        let (sent, got) = bed.honest_tcp(addr, bytes, 7);
        assert_eq!(got.len(), sent.len(), "{dst}: bytes at the application");
        assert!(got == sent, "{dst}: the application read other bytes");
        eprintln!(
            "honest TCP {dst}: {bytes} bytes identical in {:?}",
            t.elapsed()
        );
    }
    for dst in ["10.0.3.2", "[fd00:3::2]"] {
        let addr = support::addr(&format!("{dst}:{}", bed::UDP_PORT));
        let (sent, got) = bed.honest_udp(addr, 20, 3000);
        assert_eq!(got, sent, "{dst}: fragmented datagrams delivered whole");
    }
    engine.check_alive(&bed);
}

/// The memory attacks of issue 24 against relayd (see tests/evasion/memory.rs).
#[test]
fn memory_attacks_stay_within_the_stated_bound() {
    memory::run();
}

fn assert_all_pass(outcomes: &[Outcome], report: &str) {
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.pass()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} evasion cases failed:\n{}\n(full table above)\n{report}",
        failed.len(),
        outcomes.len(),
        failed
            .iter()
            .map(|o| format!("  {}: {}", o.case, o.why()))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A pause long enough for packets in flight to reach the application.
pub(crate) fn settle() {
    std::thread::sleep(Duration::from_millis(500));
}
