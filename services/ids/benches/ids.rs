//! Packets per second per core for the IDS against 1,500-byte payloads, with 100, 1,000
//! and 10,000 content rules loaded: the point of the prefilter is that the cost stays
//! nearly flat in the number of rules. Rules and payloads are generated (random-ish
//! distinct patterns); "clean" payloads match no rule, "hit" payloads carry one rule's
//! pattern.

// The same packet builders as the tests (an HTTP-ish request from 10.0.1.1 to port 80).
#[path = "../tests/common/mod.rs"]
mod common;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use relay_core::{Counters, CtInfo, CtState};
use relay_svc_ids::{Detector, Outcome, RuleSet};
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
        let mut det = Detector::new(set, &Counters::new(), None, 65_536);
        let ct = Some(CtInfo {
            state: CtState::Established,
            reply: false,
        });
        let now = Instant::now();

        let mut pkt = common::http(&clean);
        pkt.meta.ct = ct;
        assert_eq!(det.inspect(&mut pkt, now), Outcome::Clean);
        g.bench_function(format!("{n}_rules/clean"), |b| {
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
        g.bench_function(format!("{n}_rules/hit_one"), |b| {
            b.iter(|| black_box(det.inspect(black_box(&mut pkt), now)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
