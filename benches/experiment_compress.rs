//! The experiment of seed 003 (section 5.3, Fig. 11 and 12), reproduced on a namespace
//! testbed: src -- comp -- decomp -- dst, a 100 Mb/s tbf bottleneck with a 1,000-packet
//! buffer on the compressor's egress, UDP of 1,500-byte packets offered at 90-110 Mb/s (and
//! at twice the bottleneck) for DURATION seconds with ping alongside, for the modes never,
//! adaptive (the paper's fixed C = 20 us, R = 0.95), adaptive with online estimates, and
//! always; payloads that compress (with LZO, per packet) to about 0.95 and 0.5, and
//! incompressible ones.
//!
//! Writes docs/experiment-compress.md (tables), docs/experiment-compress.dat (data) and,
//! when gnuplot is installed, one PNG per payload shaped like the paper's Fig. 12.
//!
//! Run: `make experiment-compress` (root). Environment: DURATION (default 10), LOADS
//! (default "90 95 100 105 110 200"), PAYLOADS (default "0.95 0.5 1.0").

#[path = "experiment/mod.rs"]
mod experiment;

use experiment::{docs, env_list, env_num, gnuplot, run_dir, start_relayd};
use relay_svc_compress::{Algorithm, Codecs};
use relay_testbed::{Line4, line4};
use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

const PACKET: usize = 1500; // IP packet size, as in the paper
const UDP_PAYLOAD: usize = PACKET - 28;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Never,
    AdaptiveFixed,
    AdaptiveOnline,
    Always,
}

impl Mode {
    const ALL: [Mode; 4] = [
        Mode::Never,
        Mode::AdaptiveFixed,
        Mode::AdaptiveOnline,
        Mode::Always,
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::Never => "never",
            Mode::AdaptiveFixed => "adaptive",
            Mode::AdaptiveOnline => "adaptive-online",
            Mode::Always => "always",
        }
    }

    fn service(self) -> &'static str {
        match self {
            Mode::Never => "mode = \"never\"",
            Mode::AdaptiveFixed => "mode = \"adaptive\"\nestimate = \"fixed\"",
            Mode::AdaptiveOnline => "mode = \"adaptive\"\nestimate = \"online\"",
            Mode::Always => "mode = \"always\"",
        }
    }
}

/// The `relay_traffic::Payload` ratio whose datagrams LZO compresses to about `target`
/// (transport header and data, plus the IPComp header), found by bisection.
fn calibrate(target: f64) -> (f64, f64) {
    let mut codecs = Codecs::new(1);
    let mut out = vec![0u8; Algorithm::max_output(PACKET)];
    let mut measure = |r: f64| {
        let mut dgram = vec![0u8; 8];
        dgram.extend_from_slice(relay_traffic::Payload::new(UDP_PAYLOAD, r, 0x5eed).bytes());
        match codecs.compress(Algorithm::Lzo, &dgram, &mut out) {
            Some(n) if n + 4 < dgram.len() => (n + 4) as f64 / dgram.len() as f64,
            _ => 1.0,
        }
    };
    if target >= 1.0 {
        return (1.0, measure(1.0));
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..30 {
        let mid = (lo + hi) / 2.0;
        if measure(mid) < target {
            lo = mid
        } else {
            hi = mid
        }
    }
    (lo, measure(lo))
}

struct Row {
    payload: f64,
    achieved: f64,
    mode: Mode,
    offered: u64,
    throughput: f64,
    loss: f64,
    rtt: f64,
    jitter: f64,
    compressed: f64,
}

fn status_counter(tag: &str, service: &str, key: &str) -> u64 {
    let sock = run_dir(tag).join("s.sock");
    relayd::status::query(&sock)
        .ok()
        .and_then(|s| s.services.into_iter().find(|x| x.name == service))
        .and_then(|s| s.counters.get(key).copied())
        .unwrap_or(0)
}

fn run_one(l: &Line4, ratio: f64, mbit: u64, secs: f64) -> (f64, f64, f64, f64) {
    let dst: SocketAddr = "10.0.3.2:9000".parse().unwrap();
    let sock = l.dst.run(move || UdpSocket::bind(dst).unwrap());
    let sink = std::thread::spawn(move || {
        relay_traffic::udp_sink_on(
            sock,
            Duration::from_millis(1500),
            Duration::from_secs(600),
            None,
        )
        .unwrap()
    });
    let count = (secs * 50.0) as u64; // ping every 20 ms, as long as the flow
    let mut ping = l.src.cmd("ping");
    ping.args(["-q", "-i", "0.02", "-c", &count.to_string(), "10.0.3.2"]);
    ping.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let ping = ping.spawn().unwrap();
    let mut cfg = relay_traffic::UdpSendConfig::new(dst);
    cfg.size = UDP_PAYLOAD;
    cfg.rate_bps = Some(mbit * 1_000_000);
    cfg.duration = Duration::from_secs_f64(secs);
    cfg.ratio = ratio;
    let sent = l.src.run(move || relay_traffic::udp_send(&cfg).unwrap());
    let got = sink.join().unwrap();
    let ping = ping.wait_with_output().unwrap();
    let (rtt, jitter) = relay_testbed::ping_rtt_ms(&String::from_utf8_lossy(&ping.stdout))
        .unwrap_or((f64::NAN, f64::NAN));
    // Over the time packets arrived: a full queue drains for a while after the sender stops.
    let throughput =
        got.packets as f64 * PACKET as f64 * 8.0 / got.duration().as_secs_f64().max(1e-3) / 1e6;
    let loss = 1.0 - got.packets as f64 / sent.packets.max(1) as f64;
    (throughput, loss.max(0.0), rtt, jitter)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let secs: f64 = env_num("DURATION", 10.0);
    let loads: Vec<u64> = env_list("LOADS", "90 95 100 105 110 200");
    let payloads: Vec<f64> = env_list("PAYLOADS", "0.95 0.5 1.0");
    let l = line4("experiment");
    l.links[1]
        .tbf_a("100mbit", 1000)
        .expect("tbf on the compressor's egress");
    let _decomp = start_relayd(
        &l.decomp,
        "decomp",
        "[[queue]]\nnum = 0\nhook = \"forward\"\nmatch = \"-p 108\"\nservices = [\"d\"]\n[service.d]\nkind = \"decompress\"\n",
    );
    let mut rows = Vec::new();
    for &target in &payloads {
        let (ratio, achieved) = calibrate(target);
        eprintln!(
            "payload {target}: generator ratio {ratio:.3} compresses to {achieved:.3} with LZO"
        );
        for mode in Mode::ALL {
            let tag = format!("comp-{}", mode.name());
            let body = format!(
                "[[queue]]\nnum = 0\nhook = \"forward\"\nmatch = \"-p udp\"\nservices = [\"c\"]\n[service.c]\nkind = \"compress\"\nalgorithm = \"lzo\"\ncompress_time_us = 20\nratio = 0.95\n{}\n",
                mode.service()
            );
            let mut comp = start_relayd(&l.comp, &tag, &body);
            for &mbit in &loads {
                let seen0 = status_counter(&tag, "c", "seen");
                let comp0 = status_counter(&tag, "c", "compressed");
                let (throughput, loss, rtt, jitter) = run_one(&l, ratio, mbit, secs);
                let seen = status_counter(&tag, "c", "seen") - seen0;
                let compressed =
                    (status_counter(&tag, "c", "compressed") - comp0) as f64 / seen.max(1) as f64;
                eprintln!(
                    "  {:>15} {mbit:>4} Mb/s: {throughput:6.1} Mb/s, loss {:5.2} %, rtt {rtt:.2} ms, jitter {jitter:.2} ms, compressed {:.0} %",
                    mode.name(),
                    loss * 100.0,
                    compressed * 100.0
                );
                rows.push(Row {
                    payload: target,
                    achieved,
                    mode,
                    offered: mbit,
                    throughput,
                    loss,
                    rtt,
                    jitter,
                    compressed,
                });
            }
            comp.stop(libc::SIGTERM, Duration::from_secs(10));
        }
    }
    write_results(&rows, secs);
}

fn write_results(rows: &[Row], secs: f64) {
    let docs = docs();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Adaptive compression: the paper's experiment\n\nProduced by `make experiment-compress` \
         (benches/experiment_compress.rs); {secs} s per point. Testbed: src -- comp -- decomp -- dst \
         over veth, tbf 100 Mb/s with a 1,000-packet buffer on comp's egress, UDP of 1,500-byte IP \
         packets, ping every 20 ms alongside. Compression: LZO; `adaptive` keeps the paper's C = 20 us \
         and R = 0.95, `adaptive-online` measures them. Throughput counts 1,500-byte packets \
         received at dst.\n"
    );
    let mut dat = String::from(
        "# payload mode offered_mbit throughput_mbit loss rtt_ms jitter_ms compressed_share\n",
    );
    let mut payloads: Vec<f64> = rows.iter().map(|r| r.payload).collect();
    payloads.dedup();
    for p in &payloads {
        let achieved = rows
            .iter()
            .find(|r| r.payload == *p)
            .map_or(1.0, |r| r.achieved);
        let _ = writeln!(md, "\n## Payload {p} (LZO per packet: {achieved:.3})\n");
        let _ = writeln!(
            md,
            "| offered Mb/s | mode | throughput Mb/s | loss % | RTT ms | jitter ms | compressed % |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|");
        for r in rows.iter().filter(|r| r.payload == *p) {
            let _ = writeln!(
                md,
                "| {} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.0} |",
                r.offered,
                r.mode.name(),
                r.throughput,
                r.loss * 100.0,
                r.rtt,
                r.jitter,
                r.compressed * 100.0
            );
            let _ = writeln!(
                dat,
                "{} {} {} {:.3} {:.5} {:.3} {:.3} {:.3}",
                p,
                r.mode.name(),
                r.offered,
                r.throughput,
                r.loss,
                r.rtt,
                r.jitter,
                r.compressed
            );
        }
    }
    std::fs::write(docs.join("experiment-compress.dat"), &dat).unwrap();
    let mut pngs = Vec::new();
    for p in &payloads {
        let name = format!("experiment-compress-{}.png", p.to_string().replace('.', ""));
        if plot(&docs, *p, &name) {
            pngs.push(name);
        }
    }
    for name in &pngs {
        let _ = writeln!(md, "\n![{name}]({name})");
    }
    std::fs::write(docs.join("experiment-compress.md"), md).unwrap();
    eprintln!(
        "wrote docs/experiment-compress.md, .dat and {} plots",
        pngs.len()
    );
}

/// Draws the paper's four panels for one payload with gnuplot; false if it is missing.
fn plot(docs: &std::path::Path, payload: f64, name: &str) -> bool {
    let modes = Mode::ALL.map(|m| m.name());
    let series = |col: usize, scale: &str| {
        modes
            .iter()
            .map(|m| {
                format!(
                    "'experiment-compress.dat' using ($1=={payload} && strcol(2) eq '{m}' && $3 < 150 ? $3 : 1/0):(${col}{scale}) with linespoints title '{m}'"
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let script = format!(
        "set terminal pngcairo size 1200,900\nset output '{name}'\nset datafile commentschars '#'\n\
         set multiplot layout 2,2 title 'Adaptive compression, payload {payload} (100 Mb/s bottleneck)'\n\
         set xlabel 'offered rate (Mb/s)'\nset key left top\nset grid\n\
         set ylabel 'throughput (Mb/s)'\nplot {}\n\
         set ylabel 'packet loss ratio'\nplot {}\n\
         set ylabel 'round trip time (ms)'\nplot {}\n\
         set ylabel 'jitter (ms)'\nplot {}\nunset multiplot\n",
        series(4, ""),
        series(5, ""),
        series(6, ""),
        series(7, "")
    );
    let ok = gnuplot(docs, &script);
    if !ok {
        eprintln!("gnuplot missing or failed: no {name} (apt-get install gnuplot-nox)");
    }
    ok
}
