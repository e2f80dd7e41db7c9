//! TCP normalization against insertion and overlap evasions, in process: the forbidden
//! string `EVIL` is split across two segments, so only the reassembled stream can see it.
//! Before the real second half (`IL`), the attacker sends a benign `XX` at the same
//! sequence numbers in a segment the receiving Linux host would discard. Without
//! normalization the stream takes `XX` (first bytes win), never sees `EVIL` and lets the
//! real `IL` through: the host reads `EVIL`. Each case here must end with the real
//! segment dropped, or the decoy dropped and the real one inspected and dropped.
//! The kernel version of these cases (a real Linux application) is tests/evasion.rs.

mod common;

use common::*;
use relay_core::{Counters, Hook, Packet};
use relay_svc_ids::{Detector, DetectorOptions, Outcome, RuleSet};
use std::sync::Arc;
use std::time::Instant;

const RULE: &str =
    "drop tcp any any -> any 80 (msg:\"evil\"; flow:to_server; content:\"EVIL\"; sid:1;)";
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;

/// A TCP/IPv4 segment with options, window and TTL of the test's choosing, queued at
/// FORWARD.
#[allow(clippy::too_many_arguments)]
fn seg(
    to_server: bool,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    opts: &[u8],
    ttl: u8,
    payload: &[u8],
) -> Packet {
    let (src, dst, sport, dport) = if to_server {
        (CLIENT, SERVER, 40000u16, 80u16)
    } else {
        (SERVER, CLIENT, 80, 40000)
    };
    let mut p = Tcp4 {
        src,
        dst,
        sport,
        dport,
        flags,
        seq,
        ack,
        window,
        ttl,
        opts,
    }
    .build(payload);
    p.meta.hook = Some(Hook::Forward);
    p
}

/// Timestamp option (NOP NOP TS).
fn ts(val: u32) -> Vec<u8> {
    let mut o = vec![1, 1, 8, 10];
    o.extend_from_slice(&val.to_be_bytes());
    o.extend_from_slice(&0u32.to_be_bytes());
    o
}

const C_ISN: u32 = 1000;
const S_ISN: u32 = 9000;
/// First data byte of each side.
const C0: u32 = C_ISN + 1;
const S0: u32 = S_ISN + 1;

struct Bed {
    d: Detector,
    c: Counters,
    now: Instant,
}

impl Bed {
    fn new(drop_invalid: bool) -> Bed {
        let set = RuleSet::parse_str(RULE, "t.rules", &vars()).unwrap();
        let c = Counters::new();
        let mut opts = DetectorOptions::default();
        opts.drop_invalid = drop_invalid;
        Bed {
            d: Detector::with_options(Arc::new(set), &c, None, opts),
            c,
            now: Instant::now(),
        }
    }

    fn send(&mut self, mut p: Packet) -> Outcome {
        self.d.inspect(&mut p, self.now)
    }

    /// SYN, SYN-ACK, ACK with 64 KiB windows; with timestamps if `tsopt`.
    fn handshake(&mut self, tsopt: bool) {
        let o = |v| if tsopt { ts(v) } else { Vec::new() };
        self.send(seg(true, C_ISN, 0, SYN, 65535, &o(100), 64, b""));
        self.send(seg(false, S_ISN, C0, SYN | ACK, 65535, &o(500), 64, b""));
        self.send(seg(true, C0, S0, ACK, 65535, &o(101), 64, b""));
    }

    /// The honest first half, then a decoy, then the real second half: the outcomes of
    /// the decoy and of the real segment.
    fn evade(&mut self, decoy: Packet, real: Packet) -> (Outcome, Outcome) {
        assert_eq!(
            self.send(seg(true, C0, S0, PSH_ACK, 65535, &[], 64, b"EV")),
            Outcome::Clean
        );
        let a = self.send(decoy);
        let b = self.send(real);
        (a, b)
    }
}

fn real() -> Packet {
    seg(true, C0 + 2, S0, PSH_ACK, 65535, &[], 64, b"IL")
}

/// The decoy never reaches the stream, whatever the mode; in inline mode it is dropped.
fn assert_caught(drop_invalid: bool, decoy: Packet, counter_name: &str) {
    let mut bed = Bed::new(drop_invalid);
    bed.handshake(false);
    let (a, b) = bed.evade(decoy, real());
    assert_eq!(
        a,
        if drop_invalid {
            Outcome::Drop
        } else {
            Outcome::Clean
        },
        "{counter_name}: decoy"
    );
    assert_eq!(
        b,
        Outcome::Drop,
        "{counter_name}: the real bytes got through"
    );
    assert_eq!(counter(&bed.c, counter_name), 1, "{counter_name}");
}

#[test]
fn a_decoy_without_ack_is_not_inserted() {
    for inline in [true, false] {
        assert_caught(
            inline,
            seg(true, C0 + 2, 0, 0x08, 65535, &[], 64, b"XX"),
            "stream_invalid_no_ack",
        );
    }
}

#[test]
fn a_decoy_with_a_bad_checksum_is_not_inserted() {
    let mut decoy = seg(true, C0 + 2, S0, PSH_ACK, 65535, &[], 64, b"XX");
    decoy.data_mut()[36] ^= 0xff;
    assert_caught(true, decoy, "invalid_checksum");
    // A checksum the kernel has not filled in (CHECKSUM_PARTIAL) is not judged.
    let mut bed = Bed::new(true);
    bed.handshake(false);
    let mut p = seg(true, C0, S0, PSH_ACK, 65535, &[], 64, b"EV");
    p.data_mut()[36] ^= 0xff;
    p.meta.csum = relay_core::Checksum::Partial;
    assert_eq!(bed.send(p), Outcome::Clean);
    assert_eq!(bed.send(real()), Outcome::Drop);
}

#[test]
fn a_decoy_acknowledging_unsent_data_is_not_inserted() {
    assert_caught(
        true,
        seg(true, C0 + 2, S0 + 100_000, PSH_ACK, 65535, &[], 64, b"XX"),
        "stream_invalid_ack_unsent",
    );
}

#[test]
fn a_decoy_with_an_old_timestamp_is_not_inserted() {
    let mut bed = Bed::new(true);
    bed.handshake(true);
    assert_eq!(
        bed.send(seg(true, C0, S0, PSH_ACK, 65535, &ts(200), 64, b"EV")),
        Outcome::Clean
    );
    // The server acknowledges "EV": the client's timestamp 200 is its ts_recent now.
    bed.send(seg(false, S0, C0 + 2, ACK, 65535, &ts(600), 64, b""));
    let decoy = seg(true, C0 + 2, S0, PSH_ACK, 65535, &ts(150), 64, b"XX");
    assert_eq!(bed.send(decoy), Outcome::Drop);
    assert_eq!(
        bed.send(seg(true, C0 + 2, S0, PSH_ACK, 65535, &ts(201), 64, b"IL")),
        Outcome::Drop
    );
    assert_eq!(counter(&bed.c, "stream_invalid_paws"), 1);
}

#[test]
fn a_decoy_that_expires_before_the_host_is_not_inserted() {
    let mut bed = Bed::new(true);
    // The server is two routers beyond relayd: its packets arrive with TTL 61.
    bed.send(seg(true, C_ISN, 0, SYN, 65535, &[], 64, b""));
    bed.send(seg(false, S_ISN, C0, SYN | ACK, 65535, &[], 61, b""));
    bed.send(seg(true, C0, S0, ACK, 65535, &[], 64, b""));
    let decoy = seg(true, C0 + 2, S0, PSH_ACK, 65535, &[], 2, b"XX");
    let (a, b) = bed.evade(decoy, real());
    assert_eq!((a, b), (Outcome::Drop, Outcome::Drop));
    assert_eq!(counter(&bed.c, "stream_invalid_ttl"), 1);
}

#[test]
fn rst_follows_rfc_5961() {
    let mut bed = Bed::new(true);
    bed.handshake(false);
    bed.send(seg(true, C0, S0, PSH_ACK, 65535, &[], 64, b"EV"));
    // In the window but not at the next byte: the host answers with a challenge ACK and
    // keeps the connection; so does relayd, and the RST passes (the peer's answer to the
    // challenge needs it).
    assert_eq!(
        bed.send(seg(true, C0 + 100, S0, RST, 0, &[], 64, b"")),
        Outcome::Clean
    );
    // Outside the window (but within 2^30): discarded by the host, dropped here.
    assert_eq!(
        bed.send(seg(true, C0 + 1_000_000, S0, RST, 0, &[], 64, b"")),
        Outcome::Drop
    );
    assert_eq!(counter(&bed.c, "stream_invalid_rst"), 1);
    // The stream goes on: the rest of the pattern is found.
    assert_eq!(bed.send(real()), Outcome::Drop);
    // An RST at the next byte ends it.
    let mut bed = Bed::new(true);
    bed.handshake(false);
    bed.send(seg(true, C0, S0, PSH_ACK, 65535, &[], 64, b"EV"));
    assert_eq!(
        bed.send(seg(true, C0 + 2, S0, RST, 0, &[], 64, b"")),
        Outcome::Clean
    );
    // Data after it is refused (the host has no connection to deliver it to), so a wrong
    // guess of the host's next byte cannot leave the rest uninspected.
    assert_eq!(bed.send(real()), Outcome::Drop);
    assert_eq!(counter(&bed.c, "stream_invalid_after_rst"), 1);
}

#[test]
fn a_segment_past_the_window_is_not_inserted() {
    let mut bed = Bed::new(true);
    bed.handshake(false);
    // The server offered 64 KiB from S0... the client's data past it is refused.
    let far = seg(true, C0 + 70_000, S0, PSH_ACK, 65535, &[], 64, b"XX");
    assert_eq!(bed.send(far), Outcome::Drop);
    assert_eq!(counter(&bed.c, "stream_invalid_window"), 1);
    // A SYN in the connection is answered with a challenge ACK by the host: passed,
    // its data never inserted.
    bed.send(seg(true, C0, S0, PSH_ACK, 65535, &[], 64, b"EV"));
    assert_eq!(
        bed.send(seg(true, C0 + 2, 0, SYN, 65535, &[], 64, b"XX")),
        Outcome::Clean
    );
    assert_eq!(bed.send(real()), Outcome::Drop);
}

#[test]
fn overlaps_with_different_data_are_dropped_inline_and_resolved_as_linux_otherwise() {
    // A queued segment replaced by a longer one with the same start: Linux keeps the
    // longer (later) one.
    for inline in [true, false] {
        let mut bed = Bed::new(inline);
        bed.handshake(false);
        let ooo = |p: &[u8]| seg(true, C0 + 2, S0, PSH_ACK, 65535, &[], 64, p);
        assert_eq!(bed.send(ooo(b"XX")), Outcome::Clean);
        let longer = bed.send(ooo(b"ILL"));
        let first = bed.send(seg(true, C0, S0, PSH_ACK, 65535, &[], 64, b"EV"));
        if inline {
            // The longer one differs from what is held: dropped, the host keeps "XX".
            assert_eq!((longer, first), (Outcome::Drop, Outcome::Clean));
            assert_eq!(counter(&bed.c, "stream_overlap_dropped"), 1);
        } else {
            // Let through, and inspected as the host reads it: "EVILL".
            assert_eq!((longer, first), (Outcome::Clean, Outcome::Drop));
        }
    }
    // An in-order segment overlapping a queued one: the in-order bytes win in Linux.
    let mut bed = Bed::new(false);
    bed.handshake(false);
    assert_eq!(
        bed.send(seg(true, C0 + 2, S0, PSH_ACK, 65535, &[], 64, b"XX")),
        Outcome::Clean
    );
    assert_eq!(
        bed.send(seg(true, C0, S0, PSH_ACK, 65535, &[], 64, b"EVIL")),
        Outcome::Drop
    );
}

#[test]
fn honest_traffic_is_untouched() {
    let mut bed = Bed::new(true);
    bed.handshake(true);
    let mut tsv = 200;
    let mut seq = C0;
    let mut sseq = S0;
    for i in 0..200u32 {
        let body = format!("chunk {i} of an honest upload ");
        tsv += 1;
        let p = seg(
            true,
            seq,
            sseq,
            PSH_ACK,
            65535,
            &ts(tsv),
            64,
            body.as_bytes(),
        );
        assert_eq!(bed.send(p), Outcome::Clean, "segment {i}");
        seq += body.len() as u32;
        // The server acknowledges and answers every tenth segment.
        if i % 10 == 0 {
            let p = seg(false, sseq, seq, PSH_ACK, 65535, &ts(600 + i), 64, b"ok");
            assert_eq!(bed.send(p), Outcome::Clean);
            sseq += 2;
        }
        // A retransmission of the segment just sent (same bytes) changes nothing.
        if i % 17 == 0 {
            let p = seg(
                true,
                seq - body.len() as u32,
                sseq,
                PSH_ACK,
                65535,
                &ts(tsv),
                64,
                body.as_bytes(),
            );
            assert_eq!(bed.send(p), Outcome::Clean);
        }
    }
    assert_eq!(counter(&bed.c, "invalid_dropped"), 0);
}

#[test]
fn urgent_data_is_dropped_inline() {
    // "EV", then "XIL" with the urgent pointer on "X": Linux takes "X" out of the stream
    // and the application reads "EVIL".
    let mut bed = Bed::new(true);
    bed.handshake(false);
    bed.send(seg(true, C0, S0, PSH_ACK, 65535, &[], 64, b"EV"));
    let mut urg = seg(true, C0 + 2, S0, PSH_ACK | 0x20, 65535, &[], 64, b"XIL");
    urg.data_mut()[38..40].copy_from_slice(&1u16.to_be_bytes());
    fix_tcp4_checksum(&mut urg);
    assert_eq!(bed.send(urg), Outcome::Drop);
    assert_eq!(counter(&bed.c, "stream_invalid_urgent"), 1);
}

#[test]
fn a_decoy_with_a_signature_option_no_key_expects_is_not_inserted() {
    // TCP-MD5 option (kind 19, 18 bytes) and two NOPs: the host has no key for a
    // connection whose handshake had none, and drops it (TCP_MD5UNEXPECTED).
    let mut md5 = vec![1, 1, 19, 18];
    md5.extend_from_slice(&[0u8; 16]);
    assert_caught(
        true,
        seg(true, C0 + 2, S0, PSH_ACK, 65535, &md5, 64, b"XX"),
        "stream_invalid_signature",
    );
}

/// Suricata's `stream-event` keyword for the events normalization raises: an overlap
/// with different data is dropped inline and the rule on its event alerts on it.
#[test]
fn stream_event_rules_see_what_normalization_raises() {
    let rules = format!(
        "{RULE}\nalert tcp any any -> any any (msg:\"overlap\"; stream-event:reassembly_overlap_different_data; sid:2;)\n\
         alert tcp any any -> any any (msg:\"paws\"; stream-event:pkt_invalid_timestamp; sid:3;)"
    );
    let set = RuleSet::parse_str(&rules, "t.rules", &vars()).unwrap();
    assert!(set.errors().is_empty(), "{:?}", set.errors());
    let c = Counters::new();
    let mut bed = Bed {
        d: Detector::with_options(Arc::new(set), &c, None, DetectorOptions::default()),
        c,
        now: Instant::now(),
    };
    bed.handshake(true);
    let mut p = seg(true, C0, S0, PSH_ACK, 65535, &ts(200), 64, b"EVXX");
    assert_eq!(bed.d.inspect(&mut p, bed.now), Outcome::Clean);
    assert!(bed.d.matched_sids().next().is_none());
    // The same bytes again: no event.
    let mut p = seg(true, C0, S0, PSH_ACK, 65535, &ts(200), 64, b"EVXX");
    bed.d.inspect(&mut p, bed.now);
    assert!(bed.d.matched_sids().next().is_none());
    // Different bytes over them: dropped, and the event's rule alerts.
    let mut p = seg(true, C0 + 2, S0, PSH_ACK, 65535, &ts(201), 64, b"IL");
    assert_eq!(bed.d.inspect(&mut p, bed.now), Outcome::Drop);
    assert_eq!(bed.d.matched_sids().collect::<Vec<_>>(), [2]);
    // An old timestamp.
    bed.send(seg(false, S0, C0 + 4, ACK, 65535, &ts(600), 64, b""));
    let mut p = seg(true, C0 + 4, S0, PSH_ACK, 65535, &ts(100), 64, b"zz");
    assert_eq!(bed.d.inspect(&mut p, bed.now), Outcome::Drop);
    assert_eq!(bed.d.matched_sids().collect::<Vec<_>>(), [3]);
    assert_eq!(counter(&bed.c, "sid:2"), 1);
    // An event relayd does not raise is refused with the keyword named.
    let bad = RuleSet::parse_str(
        "alert tcp any any -> any any (stream-event:3whs_ack_in_wrong_dir; sid:9;)",
        "t.rules",
        &vars(),
    )
    .unwrap();
    assert_eq!(bad.errors().len(), 1);
    assert!(bad.errors()[0].to_string().contains("stream-event"));
}

/// Linux in SYN-SENT discards an RST (or a SYN-ACK) echoing a timestamp it never sent
/// (`tcp_rcv_synsent_state_process`): such an RST must not end relayd's connection, or
/// the real handshake after it would go uninspected (suricata-verify's bug-3286).
#[test]
fn an_answer_to_the_syn_echoing_a_foreign_timestamp_changes_nothing() {
    let mut bed = Bed::new(true);
    let tse = |val: u32, ecr: u32| {
        let mut o = vec![1, 1, 8, 10];
        o.extend_from_slice(&val.to_be_bytes());
        o.extend_from_slice(&ecr.to_be_bytes());
        o
    };
    bed.send(seg(true, C_ISN, 0, SYN, 65535, &tse(100, 0), 64, b""));
    let rst = seg(false, 0, C0, RST | ACK, 65535, &tse(7, 7), 64, b"");
    assert_eq!(bed.send(rst), Outcome::Drop);
    assert_eq!(counter(&bed.c, "stream_invalid_paws"), 1);
    // The real handshake (its SYN-ACK echoes the SYN's timestamp) goes on, inspected.
    bed.send(seg(
        false,
        S_ISN,
        C0,
        SYN | ACK,
        65535,
        &tse(500, 100),
        64,
        b"",
    ));
    bed.send(seg(true, C0, S0, ACK, 65535, &tse(101, 500), 64, b""));
    let (a, b) = bed.evade(seg(true, C0 + 2, 0, 0x08, 65535, &[], 64, b"XX"), real());
    assert_eq!((a, b), (Outcome::Drop, Outcome::Drop));
}
