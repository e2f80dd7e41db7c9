//! The IDS rule parser (services/ids `RuleSet::parse_str`): rule headers, address and
//! port lists with variables and negation, every option keyword, escapes and line
//! continuations; each rule set that loads is then compiled into a detector and run over
//! a few fixed packets, so that what the parser accepts is also safe to match with.
//!
//! Input: rules file text (UTF-8; other input is skipped, as relayd reads files as UTF-8).
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::{Counters, CtInfo, CtState, Packet};
use relay_svc_ids::{Detector, RuleSet};
use relayd_fuzz::{CLIENT, SERVER};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

fn packets() -> &'static Vec<Vec<u8>> {
    static P: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    P.get_or_init(|| {
        let mut v: Vec<Vec<u8>> = relayd_fuzz::sample_packets()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        v.push(relayd_fuzz::tcp4(
            CLIENT,
            SERVER,
            40000,
            80,
            0x18,
            &[],
            b"GET /etc/passwd HTTP/1.1\r\nuser  root\r\n\xde\xad\xbe\xef",
        ));
        v.push(relayd_fuzz::udp4(
            [192, 168, 1, 1],
            [8, 8, 8, 8],
            5353,
            53,
            b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04evil\x03com\x00",
        ));
        v
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(set) = RuleSet::parse_str(text, "fuzz.rules", &relayd_fuzz::ids_vars()) else {
        return;
    };
    for e in set.errors() {
        let _ = e.to_string();
    }
    let _ = (
        set.blocks(),
        set.reads_flow_state(),
        set.prefilter_patterns(),
    );
    if set.rules().is_empty() {
        return;
    }
    let mut d = Detector::new(Arc::new(set), &Counters::new(), None, 64);
    let now = Instant::now();
    for (i, b) in packets().iter().enumerate() {
        let mut p = Packet::from_bytes(b);
        if i % 2 == 0 {
            p.meta.ct = Some(CtInfo {
                state: CtState::Established,
                reply: i % 4 == 0,
            });
        }
        let _ = d.inspect(&mut p, now);
        let _ = d.matched_sids().count();
    }
});
