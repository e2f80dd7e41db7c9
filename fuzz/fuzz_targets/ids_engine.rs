//! The IDS engine (services/ids `Detector::inspect`) on arbitrary packets with a fixed
//! rule set (the IDS tests' varied rules and a few more: contents with every modifier,
//! pcre, flags, dsize, ttl, itype/icode, flow, thresholds, rate limits, IPv6 lists):
//! packet classification, the multi-pattern prefilter, content search with its budget,
//! and the per-source/destination trackers, whose state carries over between inputs.
//!
//! Input: byte 0 = conntrack state (bits 0-1: none, new, established, related; bit 2:
//! reply) and partial copy (bit 3, cut at byte 2); byte 1 = milliseconds to advance the
//! clock (rate and threshold windows); the rest = the packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::{Counters, CtInfo, CtState};
use relay_svc_ids::{Detector, RuleSet};
use relayd_fuzz::Input;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

struct Harness {
    detector: Detector,
    base: Instant,
    clock: Duration,
}

fn harness() -> &'static Mutex<Harness> {
    static H: OnceLock<Mutex<Harness>> = OnceLock::new();
    H.get_or_init(|| {
        let set = RuleSet::parse_str(
            &relayd_fuzz::ids_rules_text(),
            "fuzz.rules",
            &relayd_fuzz::ids_vars(),
        )
        .expect("the fixed rules load");
        assert!(
            set.rules().len() >= 20,
            "fixed rules lost: {:?}",
            set.errors()
        );
        Mutex::new(Harness {
            detector: Detector::new(Arc::new(set), &Counters::new(), None, 256),
            base: Instant::now(),
            clock: Duration::ZERO,
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let ctl = input.byte();
    let step = input.byte();
    let cut = input.byte();
    let bytes = input.rest();
    let mut pkt = relayd_fuzz::packet(bytes, (ctl & 8 != 0).then_some(usize::from(cut)));
    // Arbitrary bytes rarely carry a right checksum: judged, nearly every input would stop
    // at the checksum check, so the fuzzer could not reach the rest of the engine.
    if ctl & 0x40 == 0 {
        pkt.meta.csum = relay_core::Checksum::Unknown;
    }
    let state = match ctl & 3 {
        0 => None,
        1 => Some(CtState::New),
        2 => Some(CtState::Established),
        _ => Some(CtState::Related),
    };
    pkt.meta.ct = state.map(|state| CtInfo {
        state,
        reply: ctl & 4 != 0,
    });
    let mut h = harness().lock().unwrap_or_else(|e| e.into_inner());
    h.clock += Duration::from_millis(u64::from(step));
    let now = h.base + h.clock;
    let _ = h.detector.inspect(&mut pkt, now);
    let set = h.detector.rule_set().clone();
    for sid in h.detector.matched_sids() {
        assert!(set.by_sid(sid).is_some(), "matched an unknown sid {sid}");
    }
});
