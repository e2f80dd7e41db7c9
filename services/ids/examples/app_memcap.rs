//! Measures the application-layer memcap against the memory attacks of issue 24: many
//! connections of one hostile kind through one `Detector` (one queue thread), checking
//! after every packet that the bytes charged never pass `app_memcap`, and reading the
//! process's resident memory (`/proc/self/statm`) before and after each kind.
//!
//! `cargo run --release -p relay-svc-ids --example app_memcap -- [FLOWS] [CAP_MIB|none]
//! [KIND]` (defaults: 2000 flows, 64 MiB, every kind; `none` runs without a cap, as before
//! the memcap; run one kind per process for RSS figures that do not reuse the memory an
//! earlier kind freed). Kinds:
//! - `gzip`: each connection sends 32 pipelined POSTs whose small gzip bodies inflate to
//!   100 KiB, and never reads a response;
//! - `slow-body`: each connection announces a 1 MB body and sends 100 KiB of it;
//! - `endless-head`: each connection sends 60 KiB of header lines and never ends the head.
//!
//! Connections open one a millisecond; two seconds after the last, 100 honest connections
//! (a GET and a 10 KB answer each) are counted that pass undropped. The rule set has a
//! `drop` rule, so the exception policy is `drop-flow`. Each kind runs on
//! a fresh detector; RSS growth is resident pages after minus before (the allocator may
//! keep freed pages, so it is close to the peak).

#[path = "../tests/common/mod.rs"]
mod common;

use relay_core::{Counters, Packet};
use relay_svc_ids::{Detector, DetectorOptions, Outcome, RuleSet};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SERVER: [u8; 4] = [10, 0, 2, 2];

/// A TCP/IPv4 segment (the integration tests' builder: window 65,535, TTL 64).
#[allow(clippy::too_many_arguments)]
fn tcp4(
    src: [u8; 4],
    sport: u16,
    dst: [u8; 4],
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Packet {
    common::tcp4_seq(src, dst, sport, dport, flags, seq, ack, payload)
}

/// One client connection to SERVER:80.
struct Conn {
    src: [u8; 4],
    sport: u16,
    seq: u32,
    ack: u32,
}

impl Conn {
    fn new(i: usize) -> Conn {
        Conn {
            src: [10, 1, (i >> 8) as u8, i as u8],
            sport: 20_000 + (i % 40_000) as u16,
            seq: 1000,
            ack: 5000,
        }
    }

    fn handshake(&mut self, d: &mut Detector, now: Instant) {
        let (s, a) = (self.seq, self.ack);
        d.inspect(
            &mut tcp4(self.src, self.sport, SERVER, 80, 0x02, s, 0, b""),
            now,
        );
        d.inspect(
            &mut tcp4(SERVER, 80, self.src, self.sport, 0x12, a, s + 1, b""),
            now,
        );
        self.seq += 1;
        self.ack += 1;
        d.inspect(
            &mut tcp4(
                self.src, self.sport, SERVER, 80, 0x10, self.seq, self.ack, b"",
            ),
            now,
        );
    }

    /// Sends `bytes` in segments of at most 1400 bytes; how many were dropped.
    fn send(
        &mut self,
        d: &mut Detector,
        bytes: &[u8],
        now: Instant,
        check: &mut impl FnMut(&Detector),
    ) -> usize {
        let mut dropped = 0;
        for c in bytes.chunks(1400) {
            let mut p = tcp4(
                self.src, self.sport, SERVER, 80, 0x18, self.seq, self.ack, c,
            );
            self.seq = self.seq.wrapping_add(c.len() as u32);
            if d.inspect(&mut p, now) == Outcome::Drop {
                dropped += 1;
            }
            // The server acknowledges, moving its window on as a receiver does (past
            // the window the IDS refuses segments, as the host would).
            let mut a = tcp4(
                SERVER, 80, self.src, self.sport, 0x10, self.ack, self.seq, b"",
            );
            d.inspect(&mut a, now);
            check(d);
        }
        dropped
    }
}

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn counter(c: &Counters, name: &str) -> u64 {
    c.snapshot()
        .into_iter()
        .find(|(n, _, _)| n == name)
        .map_or(0, |x| x.2)
}

/// The bytes each connection of a kind sends.
fn attack(kind: &str) -> Vec<u8> {
    match kind {
        "gzip" => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(&vec![b'A'; 100 << 10]).expect("gzip");
            let body = gz.finish().expect("gzip");
            let mut out = Vec::new();
            for i in 0..32 {
                out.extend_from_slice(
                    format!(
                        "POST /u{i} HTTP/1.1\r\nHost: a\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    )
                    .as_bytes(),
                );
                out.extend_from_slice(&body);
            }
            out
        }
        "slow-body" => {
            let mut out =
                b"POST /slow HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n".to_vec();
            out.extend(std::iter::repeat_n(b'x', 100 << 10));
            out
        }
        _ => {
            let mut out = b"GET /endless HTTP/1.1\r\nHost: a\r\n".to_vec();
            while out.len() < 60 << 10 {
                out.extend_from_slice(
                    b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
                );
            }
            out
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flows: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(2000);
    let cap = match args.get(2).map(String::as_str) {
        Some("none") => usize::MAX,
        Some(v) => v.parse::<usize>().map_or(64 << 20, |m| m << 20),
        None => 64 << 20,
    };
    let mut vars = BTreeMap::new();
    vars.insert("HOME_NET".to_string(), "any".to_string());
    vars.insert("EXTERNAL_NET".to_string(), "any".to_string());
    let rules = "drop http any any -> any any (http.uri; content:\"/forbidden\"; sid:1;)";
    let cap_text = if cap == usize::MAX {
        "none".to_string()
    } else {
        format!("{} MiB", cap >> 20)
    };
    println!("flows per kind: {flows}, app_memcap: {cap_text}");
    let kinds = match args.get(3) {
        Some(k) => vec![k.as_str()],
        None => vec!["gzip", "slow-body", "endless-head"],
    };
    for kind in kinds {
        let set = Arc::new(RuleSet::parse_str(rules, "memcap.rules", &vars).expect("rules"));
        let counters = Counters::new();
        let mut opts = DetectorOptions::default();
        opts.app_memcap = cap;
        opts.flows.max_flows = flows.max(65_536);
        let mut d = Detector::with_options(set, &counters, None, opts);
        let bytes = attack(kind);
        let t0 = Instant::now();
        let before = rss();
        let mut peak = 0;
        let mut check = |d: &Detector| {
            let (used, cap) = d.app_usage();
            assert!(
                used <= cap,
                "{kind}: {used} bytes charged past the cap {cap}"
            );
            peak = peak.max(used);
        };
        let mut dropped = 0;
        for i in 0..flows {
            // One new connection a millisecond.
            let now = t0 + Duration::from_millis(i as u64);
            let mut c = Conn::new(i);
            c.handshake(&mut d, now);
            dropped += c.send(&mut d, &bytes, now, &mut check);
        }
        let after = rss();
        // Honest connections two seconds after the attack: a GET and a 10 KB answer each.
        let now = t0 + Duration::from_millis(flows as u64 + 2000);
        let mut honest = 0;
        for i in 0..100 {
            let mut c = Conn::new(50_000 + i);
            c.handshake(&mut d, now);
            let get = b"GET /index.html HTTP/1.1\r\nHost: a\r\n\r\n";
            let mut ok = c.send(&mut d, get, now, &mut check) == 0;
            let mut resp = b"HTTP/1.1 200 OK\r\nContent-Length: 10000\r\n\r\n".to_vec();
            resp.extend(std::iter::repeat_n(b'h', 10_000));
            for part in resp.chunks(1400) {
                let mut p = tcp4(SERVER, 80, c.src, c.sport, 0x18, c.ack, c.seq, part);
                c.ack = c.ack.wrapping_add(part.len() as u32);
                ok &= d.inspect(&mut p, now) != Outcome::Drop;
            }
            honest += usize::from(ok);
        }
        let (nflows, stream) = d.flow_usage();
        println!(
            "{kind:>12}: {:>7.1} MiB on the wire, RSS +{:>6.1} MiB, app charged peak {:>5.1} MiB now {:>5.1} MiB, \
             streams {:>5.1} MiB, {nflows} flows, app_memcap hits {}, drop-flow {}, tx evicted {}, packets dropped {dropped}; \
             then {honest} of 100 honest exchanges passed ({} idle flows reclaimed)",
            (bytes.len() * flows) as f64 / 1048576.0,
            after.saturating_sub(before) as f64 / 1048576.0,
            peak as f64 / 1048576.0,
            d.app_usage().0 as f64 / 1048576.0,
            stream as f64 / 1048576.0,
            counter(&counters, "app_memcap"),
            counter(&counters, "exception_policy_drop_flow"),
            counter(&counters, "app_tx_evicted"),
            counter(&counters, "app_reclaimed"),
        );
        drop(d);
    }
}
