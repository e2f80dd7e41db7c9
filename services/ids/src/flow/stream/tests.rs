use super::*;
use crate::testutil::Rng;

fn budget_with(cap: usize, limits: StreamLimits) -> MemBudget {
    MemBudget::new(cap, limits, StreamCounters::default())
}

fn budget() -> MemBudget {
    budget_with(DEFAULT_MEMCAP, StreamLimits::default())
}

fn started(seq: u32) -> Stream {
    let mut s = Stream::new();
    s.start(seq);
    s
}

/// Consumes everything for both consumers.
fn drain(s: &mut Stream) {
    s.consume_app(s.end());
    s.consume_raw(s.end());
}

#[test]
fn not_started_ignores_segments() {
    let mut b = budget();
    let mut s = Stream::new();
    let r = s.segment(1, b"abc", false, &mut b);
    assert!(r.ignored);
    assert_eq!(s.end(), 0);
    assert_eq!(b.used(), 0);
}

#[test]
fn in_order() {
    let mut b = budget();
    let mut s = started(1000);
    let r = s.segment(1000, b"GET /", false, &mut b);
    assert_eq!((r.new, r.queued, r.mismatch), (5, false, false));
    let r = s.segment(1005, b"index HTTP/1.1\r\n", false, &mut b);
    assert_eq!(r.new, 16);
    assert_eq!(s.data(), b"GET /index HTTP/1.1\r\n");
    assert_eq!(s.end(), 21);
    assert_eq!(s.next_seq(), 1021);
    assert_eq!(s.app_pending(), s.data());
    assert_eq!(s.raw_window(), (0, &b"GET /index HTTP/1.1\r\n"[..]));
    assert_eq!(b.used(), s.mem());
    assert!(s.mem() >= 21);
}

#[test]
fn consumers_are_independent() {
    let mut b = budget();
    let mut s = started(0);
    s.segment(0, b"0123456789", false, &mut b);
    s.consume_app(8);
    assert_eq!(s.app_pending(), b"89");
    // The raw consumer has not moved: nothing is freed.
    assert_eq!(s.data_offset(), 0);
    assert_eq!(s.data(), b"0123456789");
    s.consume_raw(4);
    assert_eq!(s.data_offset(), 4);
    assert_eq!(s.data(), b"456789");
    assert_eq!(s.raw_window(), (4, &b"456789"[..]));
    // Offsets never move back, and clamp to the end.
    s.consume_app(2);
    assert_eq!(s.app_offset(), 8);
    s.consume_app(1 << 40);
    assert_eq!(s.app_offset(), 10);
    assert!(s.app_pending().is_empty());
    s.consume_raw(10);
    assert!(s.data().is_empty());
    assert_eq!(s.data_offset(), 10);
    // More data continues at the right offsets.
    s.segment(10, b"abc", false, &mut b);
    assert_eq!((s.data_offset(), s.data()), (10, &b"abc"[..]));
    assert_eq!(s.app_pending(), b"abc");
}

#[test]
fn out_of_order() {
    let mut b = budget();
    let mut s = started(100);
    let r = s.segment(110, b"KLMNO", false, &mut b);
    assert_eq!((r.new, r.queued), (0, true));
    let r = s.segment(105, b"FGHIJ", false, &mut b);
    assert_eq!((r.new, r.queued), (0, true));
    assert_eq!(s.ooo_segments(), 2);
    assert_eq!(s.held(), 10);
    assert!(s.data().is_empty());
    let r = s.segment(100, b"ABCDE", false, &mut b);
    assert_eq!((r.new, r.queued), (15, false));
    assert_eq!(s.data(), b"ABCDEFGHIJKLMNO");
    assert_eq!(s.ooo_segments(), 0);
    assert_eq!(b.used(), s.mem());
}

#[test]
fn retransmissions_are_not_added_twice() {
    let mut b = budget();
    let mut s = started(0);
    s.segment(0, b"abcdef", false, &mut b);
    let r = s.segment(0, b"abcdef", false, &mut b);
    assert_eq!((r.new, r.mismatch), (0, false));
    // Partly old, partly new.
    let r = s.segment(3, b"defghi", false, &mut b);
    assert_eq!((r.new, r.mismatch), (3, false));
    // A held segment retransmitted.
    s.segment(20, b"uvw", false, &mut b);
    let r = s.segment(20, b"uvw", false, &mut b);
    assert_eq!((r.new, r.mismatch, r.queued), (0, false, false));
    assert_eq!(s.ooo_segments(), 1);
    assert_eq!(s.data(), b"abcdefghi");
    assert_eq!(b.counters().overlap_mismatch.get(), 0);
}

#[test]
fn overlaps_keep_the_first_seen_bytes() {
    let mut b = budget();
    let mut s = started(0);
    s.configure(StreamPolicy::First, false);
    s.segment(0, b"attack", false, &mut b);
    let r = s.segment(0, b"benign", false, &mut b);
    assert!(r.mismatch);
    assert_eq!(s.data(), b"attack");
    // Held bytes win over later in-order bytes covering them too.
    s.segment(10, b"AAAAA", false, &mut b);
    let r = s.segment(6, b"xxxxBBBBByy", false, &mut b);
    assert!(r.mismatch);
    assert_eq!(r.new, 11);
    assert_eq!(s.data(), b"attackxxxxAAAAAyy");
    // A new segment spanning two held ones and the gap between them.
    s.segment(20, b"12", false, &mut b);
    s.segment(24, b"56", false, &mut b);
    let r = s.segment(19, b"z-34-7", false, &mut b);
    assert!(r.mismatch);
    assert_eq!(s.data(), b"attackxxxxAAAAAyy");
    s.segment(17, b"..", false, &mut b);
    assert_eq!(s.data(), b"attackxxxxAAAAAyy..z124-56");
    assert_eq!(b.counters().overlap_mismatch.get(), 3);
}

#[test]
fn sequence_numbers_wrap() {
    let mut b = budget();
    let isn1 = u32::MAX - 3;
    let mut s = started(isn1);
    s.segment(isn1, b"abc", false, &mut b);
    // Held across the wrap, then the segment that spans it.
    s.segment(2, b"ghij", false, &mut b);
    let r = s.segment(u32::MAX, b"def", false, &mut b);
    assert_eq!(r.new, 7);
    assert_eq!(s.data(), b"abcdefghij");
    assert_eq!(s.end(), 10);
    assert_eq!(s.next_seq(), 6);
    // A segment far behind (more than 2^31 away reads as behind) is old data.
    let r = s.segment(6u32.wrapping_add(1 << 31), b"zzz", false, &mut b);
    assert_eq!(r.new, 0);
    assert_eq!(s.end(), 10);
}

#[test]
fn fin_ends_the_stream() {
    let mut b = budget();
    let mut s = started(0);
    // FIN held out of order, with data.
    s.segment(5, b"world", true, &mut b);
    assert!(!s.finished());
    let r = s.segment(0, b"hello", false, &mut b);
    assert!(r.finished);
    assert!(s.finished());
    assert_eq!(s.data(), b"helloworld");
    assert!(s.segment(10, b"more", false, &mut b).ignored);
    assert_eq!(s.end(), 10);
    // A FIN alone.
    let mut s = started(7);
    s.segment(7, b"ab", false, &mut b);
    assert!(s.segment(9, b"", true, &mut b).finished);
    // Bytes held past a FIN learnt later are cut at the FIN.
    let mut s = started(0);
    s.segment(4, b"efgh", false, &mut b);
    s.segment(2, b"cd", true, &mut b);
    s.segment(0, b"ab", false, &mut b);
    assert_eq!(s.data(), b"abcd");
    assert!(s.finished());
}

#[test]
fn depth_truncates() {
    let limits = StreamLimits {
        depth: 10,
        ..StreamLimits::default()
    };
    let mut b = budget_with(DEFAULT_MEMCAP, limits);
    let mut s = started(0);
    s.segment(0, b"0123456", false, &mut b);
    let r = s.segment(7, b"789abc", false, &mut b);
    assert_eq!(r.new, 3);
    assert!(r.truncated);
    assert_eq!(s.truncated(), Some(Truncation::Depth));
    assert_eq!(s.data(), b"0123456789");
    assert!(s.segment(13, b"x", false, &mut b).ignored);
    assert_eq!(b.counters().truncated.get(), 1);
    // Once consumed, the truncated stream gives its memory back on the next segment.
    drain(&mut s);
    s.segment(14, b"y", false, &mut b);
    assert_eq!((s.mem(), b.used()), (0, 0));
}

#[test]
fn buffer_bound_truncates_unless_consumed() {
    let limits = StreamLimits {
        buffer: 100,
        ..StreamLimits::default()
    };
    let mut b = budget_with(DEFAULT_MEMCAP, limits);
    let mut s = started(0);
    s.segment(0, &[b'a'; 60], false, &mut b);
    let r = s.segment(60, &[b'b'; 60], false, &mut b);
    assert_eq!(r.new, 40);
    assert_eq!(s.truncated(), Some(Truncation::Buffer));
    assert_eq!(s.held(), 100);
    // Consumed as it comes, a stream runs up to its depth in a buffer of the bound.
    let mut s = started(0);
    let mut seq = 0u32;
    for _ in 0..2000 {
        let r = s.segment(seq, &[b'c'; 50], false, &mut b);
        assert_eq!(r.new, 50);
        seq += 50;
        drain(&mut s);
        assert!(s.mem() <= 100);
    }
    assert_eq!(s.truncated(), None);
    assert_eq!(s.end(), 100_000);
}

#[test]
fn raw_lookback_is_kept() {
    let mut b = budget();
    let mut s = started(0);
    let mut seq = 0u32;
    for i in 0..100u8 {
        s.segment(seq, &[i; 100], false, &mut b);
        seq += 100;
        s.consume_app(s.end());
        // Raw inspection keeps the last 30 bytes for matches across the boundary.
        let (off, win) = s.raw_window();
        assert_eq!(off + win.len() as u64, s.end());
        s.consume_raw(s.end() - 30);
        assert_eq!(s.data().len(), 30);
        assert_eq!(s.data()[..], [i; 30]);
    }
    assert!(s.mem() <= MIN_BUF);
}

#[test]
fn ooo_segment_bound_truncates_as_a_gap() {
    let limits = StreamLimits {
        ooo_segments: 4,
        ..StreamLimits::default()
    };
    let mut b = budget_with(DEFAULT_MEMCAP, limits);
    let mut s = started(0);
    for i in 0..4u32 {
        assert!(s.segment(10 + 10 * i, b"x", false, &mut b).queued);
    }
    let r = s.segment(100, b"y", false, &mut b);
    assert!(r.truncated);
    assert_eq!(s.truncated(), Some(Truncation::Gap));
    assert_eq!(s.ooo_segments(), 0);
    assert_eq!(b.counters().ooo_dropped.get(), 5);
    assert_eq!(b.used(), s.mem());
}

#[test]
fn memcap_is_shared_and_holds() {
    let mut b = budget_with(3 * MIN_BUF, StreamLimits::default());
    let mut a = started(0);
    let mut c = started(0);
    a.segment(0, &[1; 2 * MIN_BUF], false, &mut b);
    assert_eq!(a.truncated(), None);
    let r = c.segment(0, &[2; 2 * MIN_BUF], false, &mut b);
    assert!(r.truncated);
    assert_eq!(c.truncated(), Some(Truncation::Memcap));
    assert!(b.used() <= b.cap());
    assert_eq!(b.counters().memcap.get(), 1);
    assert_eq!(b.used(), a.mem() + c.mem());
    a.release(&mut b);
    c.release(&mut b);
    assert_eq!(b.used(), 0);
    assert_eq!(b.counters().memuse.get(), 0);
}

#[test]
fn buffer_shrinks_after_a_burst() {
    let mut b = budget();
    let mut s = started(0);
    s.segment(0, &[0; 200_000], false, &mut b);
    drain(&mut s);
    let big = s.mem();
    assert!(big >= 200_000);
    let mut seq = 200_000u32;
    for _ in 0..2 * SHRINK_EVERY {
        s.segment(seq, b"small", false, &mut b);
        seq += 5;
        drain(&mut s);
    }
    assert!(s.mem() <= 2 * MIN_BUF, "{}", s.mem());
    assert_eq!(b.used(), s.mem());
}

#[test]
fn ooo_flood_stays_within_bounds() {
    // Many streams, each flooded with out-of-order segments: every bound holds throughout.
    let limits = StreamLimits {
        depth: 1 << 20,
        buffer: 16 << 10,
        ooo_segments: 64,
    };
    let cap = 256 << 10;
    let mut b = budget_with(cap, limits);
    let mut streams: Vec<Stream> = (0..64).map(|i| started(i * 7919)).collect();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for _ in 0..50_000 {
        let i = (rng.next() % 64) as usize;
        let s = &mut streams[i];
        let seq = s.next_seq().wrapping_add(1 + (rng.next() % 200_000) as u32);
        let len = 1 + (rng.next() % 1400) as usize;
        s.segment(seq, &vec![0x41; len], false, &mut b);
        assert!(b.used() <= cap);
        assert!(s.held() <= limits.buffer);
        assert!(s.ooo_segments() <= limits.ooo_segments);
    }
    let total: usize = streams.iter().map(Stream::mem).sum();
    assert_eq!(total, b.used());
    assert!(streams.iter().all(|s| s.truncated().is_some()));
    assert!(b.counters().ooo_dropped.get() > 0);
    for s in &mut streams {
        s.release(&mut b);
    }
    assert_eq!(b.used(), 0);
}

/// The byte a consistent sender puts at sequence number `seq`.
fn byte_at(seq: u32) -> u8 {
    (seq.wrapping_mul(2_654_435_761) >> 24) as u8
}

fn check(s: &Stream, b: &MemBudget) {
    let l = b.limits();
    assert!(b.used() <= b.cap());
    assert_eq!(s.data().len() as u64, s.end() - s.data_offset());
    assert!(s.data_offset() <= s.app_offset().min(s.raw_offset()));
    assert!(s.app_offset() <= s.end() && s.raw_offset() <= s.end());
    assert!(s.held() <= l.buffer);
    assert!(s.ooo_segments() <= l.ooo_segments);
    assert!(l.depth == 0 || s.end() <= l.depth);
}

#[test]
fn random_segments_keep_the_invariants() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut verified, mut reassembled) = (0usize, 0u64);
    for round in 0..200 {
        // Tight random bounds in half the rounds, roomy ones in the other half.
        let tight = round % 4 < 2;
        let limits = StreamLimits {
            depth: [0, 5000, 1 << 20][round % 3],
            buffer: 1 + (rng.next() % if tight { 8000 } else { 200_000 }) as usize,
            ooo_segments: (rng.next() % if tight { 20 } else { 300 }) as usize,
        };
        let cap = (rng.next() % if tight { 40_000 } else { 4_000_000 }) as usize;
        let mut b = budget_with(cap, limits);
        let isn1 = rng.next() as u32;
        let mut s = started(isn1);
        // Consistent senders (payload a function of the sequence number) must give a
        // stream whose every byte is the byte of its sequence number.
        let consistent = round % 2 == 0;
        let mut pay = Vec::new();
        for _ in 0..300 {
            let seq = match rng.next() % if tight { 4 } else { 40 } {
                0 => rng.next() as u32,
                1 => s.next_seq(),
                _ => s
                    .next_seq()
                    .wrapping_add((rng.next() % 3000) as u32)
                    .wrapping_sub(1000),
            };
            let len = (rng.next() % 1500) as usize;
            pay.clear();
            pay.extend((0..len).map(|k| {
                if consistent {
                    byte_at(seq.wrapping_add(k as u32))
                } else {
                    rng.next() as u8
                }
            }));
            let before = s.end();
            let r = s.segment(seq, &pay, rng.next().is_multiple_of(50), &mut b);
            assert_eq!(r.new as u64, s.end() - before);
            if consistent {
                assert!(!r.mismatch);
            }
            check(&s, &b);
            assert_eq!(b.used(), s.mem());
            if consistent {
                let base = isn1.wrapping_add(s.data_offset() as u32);
                for (k, &byte) in s.data().iter().enumerate() {
                    assert_eq!(byte, byte_at(base.wrapping_add(k as u32)));
                }
                verified += s.data().len();
            }
            match rng.next() % 3 {
                0 => s.consume_app(s.app_offset() + rng.next() % 2000),
                1 => s.consume_raw(s.raw_offset() + rng.next() % 2000),
                _ => {}
            }
            check(&s, &b);
        }
        reassembled += s.end();
        s.release(&mut b);
        assert_eq!(b.used(), 0);
    }
    // The loop exercised real reassembly, not only truncated streams.
    assert!(verified > 1_000_000, "{verified}");
    assert!(reassembled > 1_000_000, "{reassembled}");
}

/// Linux's `tcp_data_queue_ofo`: where a new segment overlaps held out-of-order data, the
/// one that starts first wins; of two that start together, the later if it is longer.
/// Bytes already contiguous are never replaced.
#[test]
fn linux_policy_resolves_overlaps_as_linux_does() {
    let mut b = budget();
    // A queued segment replaced by a longer one with the same start.
    let mut s = started(0);
    s.segment(10, b"AAAAA", false, &mut b);
    let r = s.segment(10, b"BBBBBBBB", false, &mut b);
    assert!(r.mismatch);
    s.segment(18, b"!", false, &mut b);
    s.segment(0, b"0123456789", false, &mut b);
    assert_eq!(&s.data()[10..], b"BBBBBBBB!");
    // Same start, not longer: the held bytes stay.
    let mut s = started(0);
    s.segment(10, b"AAAAA", false, &mut b);
    s.segment(10, b"CCC", false, &mut b);
    s.segment(0, b"0123456789", false, &mut b);
    assert_eq!(&s.data()[10..], b"AAAAA");
    // An in-order segment overlapping a queued one: it starts first, it wins.
    let mut s = started(0);
    s.segment(0, b"012345", false, &mut b);
    s.segment(10, b"AAAAA", false, &mut b);
    let r = s.segment(6, b"xxxxyy", false, &mut b);
    assert_eq!(r.new, 9);
    assert_eq!(s.data(), b"012345xxxxyyAAA");
    // A segment starting inside a held one and running past it: held bytes win where
    // they overlap, the new ones fill the rest.
    let mut s = started(0);
    s.segment(10, b"AAAAA", false, &mut b);
    s.segment(12, b"ZZZZZZ", false, &mut b);
    s.segment(0, b"0123456789", false, &mut b);
    assert_eq!(&s.data()[10..], b"AAAAAZZZ");
    // A segment starting before two held ones, covering the gap between them.
    let mut s = started(0);
    s.segment(20, b"12", false, &mut b);
    s.segment(24, b"56", false, &mut b);
    s.segment(19, b"z-34-7", false, &mut b);
    s.segment(0, b"0123456789abcdefghi", false, &mut b);
    assert_eq!(&s.data()[19..], b"z-34-76");
    // Bytes already contiguous are never replaced.
    let r = s.segment(0, b"XXXX", false, &mut b);
    assert!(r.mismatch);
    assert_eq!(&s.data()[..4], b"0123");
    // Splitting held pieces keeps the accounting exact.
    let mut b = budget();
    let mut s = started(0);
    s.segment(10, b"AAAAAAAA", false, &mut b);
    s.segment(8, b"xxxxx", false, &mut b);
    assert_eq!(s.ooo_segments(), 3);
    assert_eq!(b.used(), s.mem());
    s.segment(0, b"01234567", false, &mut b);
    assert_eq!(s.data(), b"01234567xxxxxAAAAA");
    assert_eq!(b.used(), s.mem());
}

/// Inline mode: a segment overlapping received bytes with different data is not
/// inserted at all; one overlapping with the same bytes is.
#[test]
fn inline_streams_reject_different_overlaps_whole() {
    let mut b = budget();
    let mut s = started(0);
    s.configure(StreamPolicy::Linux, true);
    s.segment(0, b"GET /", false, &mut b);
    s.segment(10, b"AAAAA", false, &mut b);
    // Overlaps held bytes with different data (and brings new ones): rejected whole.
    let r = s.segment(8, b"xxBBBBByy", false, &mut b);
    assert!(r.rejected && r.mismatch);
    assert_eq!((r.new, r.queued), (0, false));
    assert_eq!(s.ooo_segments(), 1);
    // Overlaps contiguous bytes with different data: rejected.
    assert!(s.segment(0, b"PUT /a", false, &mut b).rejected);
    assert_eq!(s.data(), b"GET /");
    // Same bytes where it overlaps: taken.
    let r = s.segment(3, b" /ind", false, &mut b);
    assert!(!r.rejected);
    assert_eq!(r.new, 3);
    let r = s.segment(8, b"exAAAAA!", false, &mut b);
    assert!(!r.rejected);
    assert_eq!(s.data(), b"GET /indexAAAAA!");
    assert_eq!(b.counters().overlap_mismatch.get(), 2);
}

#[test]
fn policies_follow_suricatas_table() {
    use StreamPolicy::*;
    // New starts before the held segment.
    assert!(Linux.new_wins((0, 5), (2, 8)));
    assert!(Bsd.new_wins((0, 5), (2, 8)));
    assert!(!First.new_wins((0, 5), (2, 8)));
    assert!(!Vista.new_wins((0, 5), (2, 8)));
    assert!(!Solaris.new_wins((0, 5), (2, 8)));
    assert!(Solaris.new_wins((0, 9), (2, 8)));
    // Same start.
    assert!(Linux.new_wins((2, 9), (2, 8)));
    assert!(!Linux.new_wins((2, 8), (2, 8)));
    assert!(OldLinux.new_wins((2, 8), (2, 8)));
    assert!(!Windows.new_wins((2, 9), (2, 8)));
    // New starts after.
    assert!(!Linux.new_wins((3, 9), (2, 8)));
    assert!(Hpux11.new_wins((3, 9), (2, 8)));
    assert!(Last.new_wins((3, 4), (2, 8)));
    for (name, p) in StreamPolicy::NAMES {
        assert_eq!(StreamPolicy::by_name(name), Some(p));
        assert_eq!(p.name(), name);
    }
    assert_eq!(StreamPolicy::by_name("beos"), None);
}
