//! Reassembly against the host model: each case from Linux's `ip_fragment.c`,
//! `inet_fragment.c` and `reassembly.c`, the policies, the bounds and the timeouts.

use super::*;

const DST: [u8; 4] = [10, 0, 0, 2];

/// IPv4 fragment of a UDP datagram to `dst`: payload `data`, offset in bytes, MF flag.
fn v4to(dst: [u8; 4], id: u16, off: usize, more: bool, data: &[u8]) -> Vec<u8> {
    let total = (20 + data.len()) as u16;
    let fo = (off / 8) as u16 | if more { 0x2000 } else { 0 };
    let mut v = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1];
    v.extend_from_slice(&dst);
    v[2..4].copy_from_slice(&total.to_be_bytes());
    v[4..6].copy_from_slice(&id.to_be_bytes());
    v[6..8].copy_from_slice(&fo.to_be_bytes());
    v.extend_from_slice(data);
    v
}

fn v4frag(id: u16, off: usize, more: bool, data: &[u8]) -> Vec<u8> {
    v4to(DST, id, off, more, data)
}

/// IPv6 fragment (with a hop-by-hop header before the fragment header) of a TCP segment.
fn v6frag(id: u32, off: usize, more: bool, data: &[u8]) -> Vec<u8> {
    let mut v = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
    v.extend_from_slice(&[0u8; 15]);
    v.push(1);
    v.extend_from_slice(&[0u8; 15]);
    v.push(2);
    v.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop, PadN
    let fo = off as u16 | u16::from(more);
    v.extend_from_slice(&[6, 0]);
    v.extend_from_slice(&fo.to_be_bytes());
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(data);
    let plen = (v.len() - 40) as u16;
    v[4..6].copy_from_slice(&plen.to_be_bytes());
    v
}

fn body(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// A packet through reassembly that relayd passes: planned, then committed.
fn feed(d: &mut Defrag, pkt: &[u8], now: Instant, out: &mut Vec<u8>) -> Step {
    let s = d.plan(pkt, 0, now, out);
    if matches!(s, Step::Pass { .. }) {
        d.commit(pkt, 0, now);
    }
    s
}

const HELD: Step = Step::Pass { complete: false };
const DONE: Step = Step::Pass { complete: true };

fn inline() -> Defrag {
    Defrag::new(DefragLimits::default(), true)
}

#[test]
fn a_short_duplicate_of_the_first_fragment_keeps_the_train() {
    // The case: relayd refused it and forgot the train; Linux drops it as a
    // duplicate (IPv4) and keeps the queue.
    let b = body(24);
    let now = Instant::now();
    let mut out = Vec::new();
    for drop_invalid in [true, false] {
        let mut d = Defrag::new(DefragLimits::default(), drop_invalid);
        assert_eq!(
            feed(&mut d, &v4frag(1, 0, true, &b[..16]), now, &mut out),
            HELD
        );
        // The same bytes: a duplicate, passed, nothing changes.
        assert_eq!(
            feed(&mut d, &v4frag(1, 0, true, &b[..8]), now, &mut out),
            HELD
        );
        // Other bytes: dropped inline; otherwise passed and dropped by the host.
        let evil = v4frag(1, 0, true, &[0xee; 8]);
        let s = feed(&mut d, &evil, now, &mut out);
        assert_eq!(s, if drop_invalid { Step::Overlap } else { HELD });
        assert_eq!(d.trains(), 1);
        assert_eq!(
            feed(&mut d, &v4frag(1, 16, false, &b[16..]), now, &mut out),
            DONE
        );
        assert_eq!(&out[20..], &b[..], "the first bytes, as the host has them");
        assert_eq!(d.counts.overlaps, 2);
        assert_eq!(d.trains(), 0);
    }
}

#[test]
fn an_overlap_with_the_same_bytes_kills_the_train_in_linux_and_is_dropped_inline() {
    let b = body(32);
    let now = Instant::now();
    let mut out = Vec::new();
    // The model (IDS mode): [8, 24) is not within the run [0, 16): RFC 5722, the whole
    // queue goes.
    let mut ids = Defrag::new(DefragLimits::default(), false);
    assert_eq!(
        feed(&mut ids, &v4frag(2, 0, true, &b[..16]), now, &mut out),
        HELD
    );
    assert_eq!(
        feed(&mut ids, &v4frag(2, 8, true, &b[8..24]), now, &mut out),
        HELD
    );
    assert_eq!(ids.trains(), 0);
    // Inline: dropped instead, and both sides keep the train.
    let mut d = inline();
    assert_eq!(
        feed(&mut d, &v4frag(2, 0, true, &b[..16]), now, &mut out),
        HELD
    );
    assert_eq!(
        feed(&mut d, &v4frag(2, 8, true, &b[8..24]), now, &mut out),
        Step::Invalid
    );
    assert_eq!(d.trains(), 1);
    // With other bytes, inline: dropped as an overlap, and the train stays.
    let mut x = b[8..24].to_vec();
    x[0] ^= 1;
    assert_eq!(
        feed(&mut d, &v4frag(2, 8, true, &x), now, &mut out),
        Step::Overlap
    );
    assert_eq!(d.trains(), 1);
    assert_eq!(
        feed(&mut d, &v4frag(2, 16, false, &b[16..]), now, &mut out),
        DONE
    );
    assert_eq!(&out[20..], &b[..]);
}

#[test]
fn runs_are_kept_apart_as_the_kernel_keeps_them() {
    let b = body(24);
    let now = Instant::now();
    let mut out = Vec::new();
    let mut d = Defrag::new(DefragLimits::default(), false);
    // In order: one run [0, 16); [0, 16) again is a duplicate.
    feed(&mut d, &v4frag(4, 0, true, &b[..8]), now, &mut out);
    feed(&mut d, &v4frag(4, 8, true, &b[8..16]), now, &mut out);
    assert_eq!(
        feed(&mut d, &v4frag(4, 0, true, &b[..16]), now, &mut out),
        HELD
    );
    assert_eq!(d.trains(), 1);
    // Out of order: [8, 16) then [0, 8) are two runs; [0, 16) spans both and kills.
    feed(&mut d, &v4frag(5, 8, true, &b[8..16]), now, &mut out);
    feed(&mut d, &v4frag(5, 0, true, &b[..8]), now, &mut out);
    assert_eq!(
        feed(&mut d, &v4frag(5, 0, true, &b[..16]), now, &mut out),
        HELD
    );
    assert_eq!(d.trains(), 1, "train 5 is gone, train 4 stays");
    // Inline the same fragment is dropped: it would have the host drop its train.
    let mut d = inline();
    feed(&mut d, &v4frag(5, 8, true, &b[8..16]), now, &mut out);
    feed(&mut d, &v4frag(5, 0, true, &b[..8]), now, &mut out);
    assert_eq!(
        feed(&mut d, &v4frag(5, 0, true, &b[..16]), now, &mut out),
        Step::Invalid
    );
    assert_eq!(d.trains(), 1);
}

#[test]
fn length_rules_of_ip_frag_queue() {
    let b = body(40);
    let now = Instant::now();
    let mut out = Vec::new();
    // The model itself: IDS mode, where such fragments pass.
    let mut d = Defrag::new(DefragLimits::default(), false);
    // A non-last IPv4 fragment is cut to a multiple of 8: [0, 12) holds [0, 8).
    feed(&mut d, &v4frag(6, 0, true, &b[..12]), now, &mut out);
    let mut late = b[8..16].to_vec();
    late[0] = 0xaa;
    assert_eq!(
        feed(&mut d, &v4frag(6, 8, false, &late), now, &mut out),
        DONE
    );
    assert_eq!(out.len(), 36);
    assert_eq!(out[28], 0xaa, "byte 8 comes from the second fragment");
    // A fragment cut to nothing kills the train.
    feed(&mut d, &v4frag(7, 0, true, &b[..8]), now, &mut out);
    assert_eq!(
        feed(&mut d, &v4frag(7, 8, true, &b[..7]), now, &mut out),
        HELD
    );
    assert_eq!(d.trains(), 0);
    // A second last fragment with another end kills it, as do bytes past the end.
    feed(&mut d, &v4frag(8, 8, false, &b[8..24]), now, &mut out);
    assert_eq!(
        feed(&mut d, &v4frag(8, 16, false, &b[16..40]), now, &mut out),
        HELD
    );
    assert_eq!(d.trains(), 0);
    feed(&mut d, &v4frag(9, 8, false, &b[8..24]), now, &mut out);
    assert_eq!(
        feed(&mut d, &v4frag(9, 24, true, &b[24..32]), now, &mut out),
        HELD
    );
    assert_eq!(d.trains(), 0);
    // A duplicate last fragment sets the last flag even though it is dropped.
    feed(&mut d, &v4frag(10, 0, true, &b[..16]), now, &mut out);
    assert_eq!(
        feed(&mut d, &v4frag(10, 8, false, &b[8..16]), now, &mut out),
        HELD
    );
    // So a fragment past 16 now kills the train.
    assert_eq!(
        feed(&mut d, &v4frag(10, 16, false, &b[16..24]), now, &mut out),
        HELD
    );
    assert_eq!(d.trains(), 0);
    // Inline, each of those is dropped and the train kept.
    let mut d = inline();
    feed(&mut d, &v4frag(11, 0, true, &b[..16]), now, &mut out);
    for f in [
        v4frag(11, 16, true, &b[..7]),
        v4frag(11, 8, false, &b[8..16]),
        v4frag(11, 8, false, &b[8..12]),
    ] {
        assert_eq!(feed(&mut d, &f, now, &mut out), Step::Invalid);
    }
    // A non-last fragment cut to a multiple of 8 is no reason to drop.
    assert_eq!(
        feed(&mut d, &v4frag(11, 16, true, &b[16..28]), now, &mut out),
        HELD
    );
    assert_eq!(
        feed(&mut d, &v4frag(11, 24, false, &b[24..40]), now, &mut out),
        DONE
    );
    assert_eq!(&out[20..], &b[..]);
}

#[test]
fn ipv6_discards_what_linux_discards_and_keeps_the_train() {
    let b = body(64);
    let now = Instant::now();
    let mut out = Vec::new();
    let mut d = inline();
    assert_eq!(
        feed(&mut d, &v6frag(9, 0, true, &b[..24]), now, &mut out),
        HELD
    );
    // Not a multiple of 8 and not last: discarded (parameter problem).
    assert_eq!(
        feed(&mut d, &v6frag(9, 24, true, &b[24..30]), now, &mut out),
        Step::Invalid
    );
    // A first fragment without the whole TCP header (RFC 7112): discarded, whether it
    // would start a train or repeat the held one's start (the short duplicate).
    for (id, n) in [(10, 8), (9, 8), (9, 16)] {
        let f = v6frag(id, 0, true, &b[..n]);
        assert_eq!(feed(&mut d, &f, now, &mut out), Step::Invalid);
    }
    // The same first fragment again is a duplicate: passed, nothing changes.
    assert_eq!(
        feed(&mut d, &v6frag(9, 0, true, &b[..24]), now, &mut out),
        HELD
    );
    // IDS mode: passed, and still nothing changes.
    let mut ids = Defrag::new(DefragLimits::default(), false);
    assert_eq!(
        feed(&mut ids, &v6frag(10, 0, true, &b[..8]), now, &mut out),
        Step::Invalid
    );
    assert_eq!(ids.trains(), 0);
    assert_eq!(d.trains(), 1);
    assert_eq!(
        feed(&mut d, &v6frag(9, 24, false, &b[24..]), now, &mut out),
        DONE
    );
    assert_eq!(&out[48..], &b[..]);
    // An atomic fragment is a whole packet, without its fragment header.
    assert_eq!(
        feed(&mut d, &v6frag(11, 0, false, &b[..24]), now, &mut out),
        DONE
    );
    assert_eq!((out.len(), out[40]), (48 + 24, 6));
    assert_eq!(d.trains(), 0);
}

#[test]
fn ipv6_fixes_the_next_header_and_length() {
    let mut d = inline();
    let now = Instant::now();
    let b = body(1000);
    let mut out = Vec::new();
    assert_eq!(
        feed(&mut d, &v6frag(9, 0, true, &b[..464]), now, &mut out),
        HELD
    );
    assert_eq!(
        feed(&mut d, &v6frag(9, 928, false, &b[928..]), now, &mut out),
        HELD
    );
    assert_eq!(
        feed(&mut d, &v6frag(9, 464, true, &b[464..928]), now, &mut out),
        DONE
    );
    assert_eq!(out.len(), 48 + 1000);
    assert_eq!(&out[4..6], &1008u16.to_be_bytes());
    assert_eq!(out[6], 0, "hop-by-hop first");
    assert_eq!(out[40], 6, "the hop-by-hop header now names TCP");
    assert_eq!(&out[48..], &b[..]);
    assert_eq!((d.trains(), d.mem()), (0, 0));
}

#[test]
fn planning_changes_nothing() {
    let mut d = inline();
    let now = Instant::now();
    let b = body(24);
    let mut out = Vec::new();
    assert_eq!(
        d.plan(&v4frag(1, 0, true, &b[..16]), 0, now, &mut out),
        HELD
    );
    assert_eq!(d.trains(), 0);
    feed(&mut d, &v4frag(1, 0, true, &b[..16]), now, &mut out);
    // The completing fragment planned twice (dropped the first time): complete twice.
    let last = v4frag(1, 16, false, &b[16..]);
    assert_eq!(d.plan(&last, 0, now, &mut out), DONE);
    assert_eq!(d.plan(&last, 0, now, &mut out), DONE);
    assert_eq!(&out[20..], &b[..]);
    assert_eq!(d.trains(), 1);
}

#[test]
fn trains_live_as_long_as_the_hosts_queues() {
    let t0 = Instant::now();
    let b = body(24);
    let mut out = Vec::new();
    let mut d = inline();
    // The case: a benign first fragment 32 s before the real ones. Linux gave
    // up on it after 30 s, so relayd must not complete the datagram with it.
    feed(&mut d, &v4frag(1, 0, true, &[0x11; 16]), t0, &mut out);
    let t32 = t0 + Duration::from_secs(32);
    assert_eq!(
        feed(&mut d, &v4frag(1, 16, false, &b[16..]), t32, &mut out),
        HELD
    );
    assert_eq!(d.counts.timeouts, 1);
    assert_eq!(
        feed(&mut d, &v4frag(1, 0, true, &b[..16]), t32, &mut out),
        DONE
    );
    assert_eq!(&out[20..], &b[..], "the real bytes are inspected");
    // IPv6 trains live 60 s.
    feed(&mut d, &v6frag(1, 0, true, &b[..24]), t0, &mut out);
    let t58 = t0 + Duration::from_secs(58);
    assert_eq!(
        feed(&mut d, &v6frag(1, 24, false, &[1; 8]), t58, &mut out),
        DONE
    );
    // Inline, within a second of the deadline: dropped (the host's timer may have run).
    feed(&mut d, &v4frag(2, 0, true, &b[..16]), t0, &mut out);
    let t29 = t0 + Duration::from_millis(29_500);
    assert_eq!(
        feed(&mut d, &v4frag(2, 16, false, &b[16..]), t29, &mut out),
        Step::Late
    );
    let t30 = t0 + Duration::from_millis(30_500);
    assert_eq!(
        feed(&mut d, &v4frag(2, 16, false, &b[16..]), t30, &mut out),
        Step::Late
    );
    // IDS mode: no guard; at 29.5 s it still completes.
    let mut ids = Defrag::new(DefragLimits::default(), false);
    feed(&mut ids, &v4frag(2, 0, true, &b[..16]), t0, &mut out);
    assert_eq!(
        feed(&mut ids, &v4frag(2, 16, false, &b[16..]), t29, &mut out),
        DONE
    );
}

#[test]
fn a_refused_fragment_never_makes_relayd_forget_a_train() {
    let limits = DefragLimits {
        trains: 1,
        fragments: 2,
        ..DefragLimits::default()
    };
    let mut d = Defrag::new(limits, true);
    let now = Instant::now();
    let b = body(32);
    let mut out = Vec::new();
    assert_eq!(
        feed(&mut d, &v4frag(1, 0, true, &b[..8]), now, &mut out),
        HELD
    );
    // A second train: refused, the first stays.
    assert_eq!(
        feed(&mut d, &v4frag(2, 0, true, &b[..8]), now, &mut out),
        Step::Refused
    );
    assert_eq!(
        feed(&mut d, &v4frag(1, 8, true, &b[8..16]), now, &mut out),
        HELD
    );
    // A third fragment in all: refused, the train stays.
    assert_eq!(
        feed(&mut d, &v4frag(1, 24, false, &b[24..]), now, &mut out),
        Step::Refused
    );
    assert_eq!(d.trains(), 1);
    assert_eq!(d.counts.refused, 2);
    // A duplicate needs no room: passed.
    assert_eq!(
        feed(&mut d, &v4frag(1, 0, true, &b[..8]), now, &mut out),
        HELD
    );
}

#[test]
fn memcap_refuses_and_charges_at_least_the_kernels_truesize() {
    let limits = DefragLimits {
        memcap: 4000,
        ..DefragLimits::default()
    };
    let mut d = Defrag::new(limits, true);
    let mut out = Vec::new();
    let now = Instant::now();
    assert_eq!(
        feed(&mut d, &v4frag(1, 0, true, &[0; 800]), now, &mut out),
        HELD
    );
    // 820 bytes and the buffer around them: 2048, and the queue.
    assert_eq!(d.mem(), 2048 + 256);
    assert_eq!(
        feed(&mut d, &v4frag(2, 0, true, &[0; 800]), now, &mut out),
        Step::Refused
    );
    assert!(d.mem() <= 4000);
}

#[test]
fn the_host_policy_is_chosen_per_destination() {
    let mut policy = PolicyMap::new(FragPolicy::Linux);
    policy.insert("10.0.1.0/24", FragPolicy::First).unwrap();
    policy.insert("10.0.2.0/24", FragPolicy::Last).unwrap();
    policy.insert("10.0.3.0/24", FragPolicy::Bsd).unwrap();
    let limits = DefragLimits {
        policy,
        ..DefragLimits::default()
    };
    let now = Instant::now();
    let b = body(24);
    let mut out = Vec::new();
    // IDS mode, so overlaps with other bytes are resolved rather than dropped.
    let mut d = Defrag::new(limits, false);
    let mut run = |dst: [u8; 4]| {
        feed(&mut d, &v4to(dst, 1, 8, true, &b[8..16]), now, &mut out);
        // Starts before the held bytes and covers them.
        feed(&mut d, &v4to(dst, 1, 0, true, &[0xee; 16]), now, &mut out);
        let s = feed(&mut d, &v4to(dst, 1, 16, false, &b[16..]), now, &mut out);
        (s, out.get(28).copied())
    };
    assert_eq!(run([10, 0, 1, 9]), (DONE, Some(8)), "first: the held bytes");
    assert_eq!(
        run([10, 0, 2, 9]),
        (DONE, Some(0xee)),
        "last: the new bytes"
    );
    assert_eq!(
        run([10, 0, 3, 9]),
        (DONE, Some(0xee)),
        "bsd: the earlier start wins"
    );
    // linux: the overlap kills the train, the last fragment starts a new one.
    assert_eq!(run([10, 0, 4, 9]).0, HELD);
    // Inline, the overlap with other bytes is dropped whatever the policy.
    let mut policy = PolicyMap::new(FragPolicy::Linux);
    policy.insert("10.0.2.0/24", FragPolicy::Last).unwrap();
    let mut d = Defrag::new(
        DefragLimits {
            policy,
            ..DefragLimits::default()
        },
        true,
    );
    let dst = [10, 0, 2, 9];
    feed(&mut d, &v4to(dst, 1, 8, true, &b[8..16]), now, &mut out);
    let s = feed(&mut d, &v4to(dst, 1, 0, true, &[0xee; 16]), now, &mut out);
    assert_eq!(s, Step::Overlap);
}

#[test]
fn a_train_that_other_fragments_of_its_source_passed_is_restarted() {
    let now = Instant::now();
    let b = body(24);
    let mut out = Vec::new();
    for drop_invalid in [true, false] {
        let mut d = Defrag::new(DefragLimits::default(), drop_invalid);
        feed(&mut d, &v4frag(1, 0, true, &b[..8]), now, &mut out);
        for id in 2..67 {
            feed(&mut d, &v4frag(id, 0, true, &[0; 8]), now, &mut out);
        }
        // 65 fragments of the source since train 1's: Linux restarts it (`ip_frag_reinit`).
        let s = feed(&mut d, &v4frag(1, 8, false, &b[8..16]), now, &mut out);
        if drop_invalid {
            assert_eq!(s, Step::Invalid, "inline: dropped");
        } else {
            assert_eq!(s, HELD, "the first fragment is gone");
            assert_eq!(
                feed(&mut d, &v4frag(1, 0, true, &[7; 8]), now, &mut out),
                DONE
            );
            assert_eq!(&out[20..28], &[7; 8]);
        }
    }
}

#[test]
fn not_fragments_and_layers() {
    let mut d = inline();
    let now = Instant::now();
    let mut out = Vec::new();
    let mut whole = v4frag(1, 0, false, &[1, 2, 3, 4]);
    assert_eq!(feed(&mut d, &whole, now, &mut out), Step::Whole);
    whole.truncate(3);
    assert_eq!(feed(&mut d, &whole, now, &mut out), Step::Whole);
    // A fragment cut short: the host never takes it.
    let mut cut = v4frag(1, 0, true, &[0; 16]);
    cut.truncate(30);
    assert_eq!(feed(&mut d, &cut, now, &mut out), Step::Invalid);
    // The same ids in two tunnel layers are two trains.
    let f = v4frag(1, 0, true, &[0; 8]);
    assert_eq!(d.plan(&f, 0, now, &mut out), HELD);
    d.commit(&f, 0, now);
    let g = v4frag(1, 8, false, &[0; 8]);
    assert_eq!(
        d.plan(&g, 1, now, &mut out),
        Step::Invalid,
        "bad checksum inside a tunnel"
    );
    let mut g = g;
    let mut ip = relay_core::wire::Ipv4Packet::new_unchecked(&mut g[..]);
    ip.fill_checksum();
    assert_eq!(d.plan(&g, 1, now, &mut out), HELD);
    d.commit(&g, 1, now);
    assert_eq!(d.trains(), 2);
}

#[test]
fn a_dropped_datagram_is_remembered_until_the_host_gives_up() {
    let t0 = Instant::now();
    let b = body(24);
    let mut out = Vec::new();
    let mut d = inline();
    feed(&mut d, &v4frag(1, 0, true, &b[..16]), t0, &mut out);
    let last = v4frag(1, 16, false, &b[16..]);
    assert_eq!(d.plan(&last, 0, t0, &mut out), DONE);
    d.mark_dropped(&last, 0);
    assert_eq!(d.plan(&last, 0, t0, &mut out), Step::DroppedTrain);
    assert_eq!(
        d.plan(&v4frag(1, 0, true, &b[..16]), 0, t0, &mut out),
        Step::DroppedTrain
    );
    assert_eq!(d.mem(), 256, "nothing held but the mark");
    // Gone 31 s later (30 s and the guard): a new train.
    let t31 = t0 + Duration::from_secs(31);
    assert_eq!(feed(&mut d, &last, t31, &mut out), HELD);
}

#[test]
fn the_largest_packet_reassembles() {
    let mut d = inline();
    let now = Instant::now();
    let b = body(65_535 - 20);
    let mut out = Vec::new();
    let mut last = HELD;
    for (i, c) in b.chunks(64).enumerate() {
        let more = (i + 1) * 64 < b.len();
        last = feed(&mut d, &v4frag(3, i * 64, more, c), now, &mut out);
    }
    assert_eq!(last, DONE);
    assert_eq!(out.len(), 65_535);
    assert_eq!(&out[20..], &b[..]);
    // One byte more does not fit: the host drops the queue; inline that fragment is
    // dropped (later kernels drop the queue at it, not at reassembly).
    let mut ids = Defrag::new(DefragLimits::default(), false);
    for d in [&mut d, &mut ids] {
        for (i, c) in body(65_535 - 19).chunks(64).enumerate() {
            let more = (i + 1) * 64 < 65_535 - 19;
            last = feed(d, &v4frag(4, i * 64, more, c), now, &mut out);
        }
    }
    assert_eq!((last, ids.trains()), (HELD, 0));
    assert_eq!(d.trains(), 1);
}

#[test]
fn hostile_fragments_never_panic() {
    let mut rng = crate::testutil::Rng(0x5eed_f00d);
    let mut policy = PolicyMap::new(FragPolicy::Linux);
    for (i, (_, p)) in FragPolicy::ALL.iter().enumerate() {
        policy.insert(&format!("10.0.0.{}", i + 2), *p).unwrap();
    }
    for drop_invalid in [true, false] {
        let mut d = Defrag::new(
            DefragLimits {
                trains: 8,
                fragments: 64,
                memcap: 1 << 16,
                timeout: Duration::from_secs(1),
                policy: policy.clone(),
                ..DefragLimits::default()
            },
            drop_invalid,
        );
        let mut out = Vec::new();
        let t0 = Instant::now();
        for i in 0..20_000u64 {
            let len = 8 * (1 + rng.below(4));
            let mut p = if rng.below(2) == 0 {
                let dst = [10, 0, 0, 2 + rng.below(8) as u8];
                v4to(
                    dst,
                    rng.below(4) as u16,
                    rng.below(64) * 8,
                    rng.below(2) == 0,
                    &vec![rng.byte(); len],
                )
            } else {
                v6frag(
                    rng.below(4) as u32,
                    rng.below(64) * 8,
                    rng.below(2) == 0,
                    &vec![rng.byte(); len],
                )
            };
            for _ in 0..rng.below(3) {
                let at = rng.below(p.len());
                p[at] = rng.byte();
            }
            p.truncate(rng.below(p.len() + 1).max(p.len() / 2));
            let now = t0 + Duration::from_millis(i / 4);
            let s = d.plan(&p, 0, now, &mut out);
            if matches!(s, Step::Pass { .. }) && rng.below(4) > 0 {
                d.commit(&p, 0, now);
            } else if s == DONE {
                d.mark_dropped(&p, 0);
            }
            assert!(d.trains() <= 8, "{}", d.trains());
            // A commit may pass the cap by the fragment planned before it.
            assert!(d.mem() <= (1 << 16) + 8192, "{}", d.mem());
        }
    }
}

#[test]
fn policy_overlaps_match_a_byte_by_byte_model() {
    // Each byte belongs to the fragment that last won it; a new fragment wins a byte as
    // its policy says against that fragment.
    let mut rng = crate::testutil::Rng(0x0b5e_55ed);
    for (_, policy) in FragPolicy::ALL
        .iter()
        .filter(|(_, p)| *p != FragPolicy::Linux)
    {
        for _ in 0..200 {
            let mut t = Train::new(*policy, Instant::now());
            let mut owner: Vec<Option<usize>> = vec![None; 128];
            let mut bytes = [0u8; 128];
            let mut frags: Vec<(usize, usize)> = Vec::new();
            for n in 0..1 + rng.below(6) {
                let off = rng.below(12) * 8;
                let end = (off + 8 * (1 + rng.below(4))).min(128);
                let data = vec![n as u8 + 1; end - off];
                t.insert_policy(off, &data);
                for (b, slot) in owner.iter_mut().enumerate().take(end).skip(off) {
                    let wins = match *slot {
                        None => true,
                        Some(o) => {
                            let (oo, oe) = frags[o];
                            policy.new_wins(off, end, oo, oe)
                        }
                    };
                    if wins {
                        *slot = Some(frags.len());
                        bytes[b] = n as u8 + 1;
                    }
                }
                frags.push((off, end));
            }
            let held = owner.iter().filter(|o| o.is_some()).count();
            assert_eq!(t.meat, held, "{policy}");
            for (b, o) in owner.iter().enumerate() {
                if o.is_some() {
                    assert_eq!(t.data.get(b), Some(&bytes[b]), "{policy} byte {b}");
                }
            }
        }
    }
}
