//! Per-packet cost of the IDS on one core against 1,500-byte payloads, with 100, 1,000 and
//! 10,000 rules loaded: the point of the prefilters is that the cost stays nearly flat in
//! the number of rules. Rules and payloads are generated (random-ish distinct patterns).
//!
//! - `ids_1500B/N_rules/packet/{clean,hit_one}`: the packet-only engine (no flow table),
//!   the same packet again and again; "clean" matches no rule, "hit" one rule's pattern.
//! - `ids_1500B/N_rules/stream/clean`: the same rules with the flow table on, each packet
//!   the next in-order segment of one reassembled TCP flow (stream inspection included).
//! - `ids_http/N_rules/{packet,stream_http}`: half payload rules, half HTTP buffer rules
//!   (`http.uri`, `http.host`, `http.user_agent`, `http.header`, `file.data`); one
//!   keep-alive HTTP flow, each iteration a request segment and a 1,460-byte response
//!   segment (two packets: throughput counts packets), inspected by the packet-only
//!   engine and by the full one (reassembly, HTTP parsing, transaction rules).

// The same packet builders as the tests (an HTTP-ish request from 10.0.1.1 to port 80).
#[path = "../tests/common/mod.rs"]
mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use relay_core::{Counters, CtInfo, CtState};
use relay_svc_ids::{Detector, DetectorOptions, Outcome, RuleSet};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

/// xorshift64*: deterministic pseudo-random bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn word(&mut self, len: usize) -> Vec<u8> {
        const ALPHA: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-";
        (0..len)
            .map(|_| ALPHA[(self.next() % ALPHA.len() as u64) as usize])
            .collect()
    }
}

/// `n` rules with distinct patterns of 8-16 bytes; a fifth nocase, a tenth with a pcre
/// after the content, some with relative second contents.
fn rules(n: usize) -> (String, Vec<Vec<u8>>) {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut text = String::new();
    let mut pats = Vec::new();
    for i in 0..n {
        let len = 8 + (rng.next() % 9) as usize;
        let p = rng.word(len);
        let ps = String::from_utf8(p.clone()).unwrap();
        let extra = match i % 10 {
            0 => "nocase; ".to_string(),
            1 => "content:\"|0d 0a|\"; distance:0; within:200; ".to_string(),
            2 => "pcre:\"/[a-z]{3}\\d/i\"; ".to_string(),
            _ => String::new(),
        };
        let action = if i % 7 == 0 { "drop" } else { "alert" };
        text.push_str(&format!(
            "{action} tcp any any -> any 80 (msg:\"rule {i}\"; flow:to_server,established; content:\"{ps}\"; {extra}sid:{};)\n",
            1_000_000 + i
        ));
        pats.push(p);
    }
    (text, pats)
}

/// A detector over `set`, with or without the flow table; offload votes on with
/// `IDS_BENCH_OFFLOAD=1` (the service's default), to measure their per-packet cost.
fn detector(set: &Arc<RuleSet>, flows: bool) -> Detector {
    let mut opts = DetectorOptions::default();
    opts.flow_tracking = flows;
    opts.offload.enabled = std::env::var_os("IDS_BENCH_OFFLOAD").is_some_and(|v| v == "1");
    Detector::with_options(set.clone(), &Counters::new(), None, opts)
}

/// Sets the sequence and acknowledgement numbers of a TCP/IPv4 packet built by
/// `common::tcp4_seq`, updating its checksum (RFC 1624) as a sender's would be: the IDS
/// drops segments whose checksum the receiver would refuse.
fn set_seq(pkt: &mut relay_core::Packet, seq: u32, ack: u32) {
    use relay_core::wire::checksum::update16;
    let d = pkt.data_mut();
    let mut sum = u16::from_be_bytes([d[36], d[37]]);
    for (at, new) in [(24, seq), (28, ack)] {
        let old = u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
        for (k, (o, n)) in [(old >> 16, new >> 16), (old & 0xffff, new & 0xffff)]
            .into_iter()
            .enumerate()
        {
            sum = update16(sum, o as u16, n as u16);
            d[at + 2 * k..at + 2 * k + 2].copy_from_slice(&(n as u16).to_be_bytes());
        }
    }
    d[36..38].copy_from_slice(&sum.to_be_bytes());
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("ids_1500B");
    g.throughput(Throughput::Elements(1));
    let mut rng = Rng(0xfeed_beef_cafe_f00d);
    // Text-like payload from a different stream: the patterns (8+ chars) essentially never occur.
    let mut clean = rng.word(1500);
    for i in (0..1500).step_by(60) {
        clean[i] = b' ';
    }
    for n in [100usize, 1_000, 10_000] {
        let (text, pats) = rules(n);
        let set = Arc::new(RuleSet::parse_str(&text, "bench.rules", &BTreeMap::new()).unwrap());
        assert!(set.errors().is_empty(), "{:?}", set.errors().first());
        let mut det = detector(&set, false);
        let ct = Some(CtInfo {
            state: CtState::Established,
            reply: false,
        });
        let now = Instant::now();

        let mut pkt = common::http(&clean);
        pkt.meta.ct = ct;
        assert_eq!(det.inspect(&mut pkt, now), Outcome::Clean);
        g.bench_function(format!("{n}_rules/packet/clean"), |b| {
            b.iter(|| black_box(det.inspect(black_box(&mut pkt), now)))
        });

        // Carries the pattern of an alert rule with a single content (i % 10 >= 3, i % 7 != 0).
        let hit_rule = (3..n).find(|i| i % 10 >= 3 && i % 7 != 0).unwrap();
        let mut hit = clean.clone();
        let p = &pats[hit_rule];
        hit[700..700 + p.len()].copy_from_slice(p);
        let mut pkt = common::http(&hit);
        pkt.meta.ct = ct;
        assert_eq!(det.inspect(&mut pkt, now), Outcome::Alert);
        g.bench_function(format!("{n}_rules/packet/hit_one"), |b| {
            b.iter(|| black_box(det.inspect(black_box(&mut pkt), now)))
        });

        // The same rules and payload as the next in-order segment of a reassembled flow.
        let mut det = detector(&set, true);
        let mut conv = common::Conv::new(80);
        for mut p in conv.handshake() {
            p.meta.ct = ct;
            det.inspect(&mut p, now);
        }
        let mut pkt = conv.data(true, &clean);
        pkt.meta.ct = ct;
        let (mut seq, ack) = (conv.seq[0], conv.seq[1]);
        let mut sent = 0u32;
        g.bench_function(format!("{n}_rules/stream/clean"), |b| {
            b.iter(|| {
                set_seq(&mut pkt, seq, ack);
                seq = seq.wrapping_add(clean.len() as u32);
                let out = det.inspect(black_box(&mut pkt), now);
                // The receiver acknowledges now and then, moving its window on (past
                // its right edge the IDS would refuse the segments, as the host does).
                sent += 1;
                if sent.is_multiple_of(32) {
                    let mut a = common::tcp4_seq(
                        common::SERVER,
                        common::CLIENT,
                        80,
                        conv.sport,
                        0x10,
                        ack,
                        seq,
                        b"",
                    );
                    a.meta.ct = ct;
                    det.inspect(&mut a, now);
                }
                black_box(out)
            })
        });
        // The stream stayed valid to the end: the next segment is inspected.
        let mut last = conv.segment_at(true, 0, &hit);
        set_seq(&mut last, seq, ack);
        last.meta.ct = ct;
        assert_eq!(
            det.inspect(&mut last, now),
            Outcome::Alert,
            "the bench's segments must stay valid"
        );
        let (flows, held) = det.flow_usage();
        assert_eq!(flows, 1);
        assert!(
            held <= 8 << 10,
            "the stream holds only its look-back, not {held} bytes"
        );
    }
    g.finish();
    http(c);
}

/// `n` rules: half payload contents (as `rules`), half HTTP buffer contents.
fn http_rules(n: usize) -> String {
    let (payload, _) = rules(n / 2);
    let mut rng = Rng(0x0ddb_a11c_afe0_0001);
    let mut text = payload;
    const BUFS: [&str; 5] = [
        "http.uri",
        "http.host",
        "http.user_agent",
        "http.header",
        "file.data",
    ];
    for i in 0..n - n / 2 {
        let len = 8 + (rng.next() % 9) as usize;
        let mut p = String::from_utf8(rng.word(len)).unwrap();
        let buf = BUFS[i % BUFS.len()];
        if buf == "http.host" {
            // The host buffer is lowercase.
            p.make_ascii_lowercase();
        }
        text.push_str(&format!(
            "alert http any any -> any any (msg:\"http {i}\"; flow:established; {buf}; content:\"{p}\"; sid:{};)\n",
            2_000_000 + i
        ));
    }
    text
}

fn http(c: &mut Criterion) {
    let mut g = c.benchmark_group("ids_http");
    // Two packets per iteration.
    g.throughput(Throughput::Elements(2));
    let request = b"GET /catalog/item.php?id=4711&view=full HTTP/1.1\r\nHost: shop.example.com\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\nAccept: */*\r\nCookie: s=12345\r\n\r\n";
    let mut rng = Rng(0x5eed_0000_0000_0001);
    let head = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: text/html\r\nContent-Length: 1380\r\n\r\n";
    let mut response = head.to_vec();
    let mut body = rng.word(1380);
    for i in (0..body.len()).step_by(60) {
        body[i] = b' ';
    }
    response.extend_from_slice(&body);
    let ct = Some(CtInfo {
        state: CtState::Established,
        reply: false,
    });
    let now = Instant::now();
    for n in [100usize, 1_000, 10_000] {
        let set =
            Arc::new(RuleSet::parse_str(&http_rules(n), "bench.rules", &BTreeMap::new()).unwrap());
        assert!(set.errors().is_empty(), "{:?}", set.errors().first());
        for (name, flows) in [("packet", false), ("stream_http", true)] {
            let mut det = detector(&set, flows);
            let mut conv = common::Conv::new(80);
            for mut p in conv.handshake() {
                p.meta.ct = ct;
                det.inspect(&mut p, now);
            }
            // The first request's sequence numbers: the packets below are rewritten to
            // them (an ACK of bytes the other side never sent would be refused).
            let mut seq = [conv.seq[0], conv.seq[1]];
            let mut req = conv.data(true, request);
            let mut resp = conv.data(false, &response);
            req.meta.ct = ct;
            resp.meta.ct = Some(CtInfo {
                state: CtState::Established,
                reply: true,
            });
            g.bench_function(format!("{n}_rules/{name}"), |b| {
                b.iter(|| {
                    set_seq(&mut req, seq[0], seq[1]);
                    seq[0] = seq[0].wrapping_add(request.len() as u32);
                    black_box(det.inspect(black_box(&mut req), now));
                    set_seq(&mut resp, seq[1], seq[0]);
                    seq[1] = seq[1].wrapping_add(response.len() as u32);
                    black_box(det.inspect(black_box(&mut resp), now))
                })
            });
            set_seq(&mut req, seq[0], seq[1]);
            assert_eq!(
                det.inspect(&mut req, now),
                Outcome::Clean,
                "the bench's segments must stay valid"
            );
            if flows {
                let (f, held) = det.flow_usage();
                assert_eq!(f, 1);
                assert!(held <= 16 << 10, "held {held}");
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
