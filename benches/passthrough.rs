//! Passthrough benchmark: the kernel's own forwarding against relayd running `accept`, on
//! the same namespace testbed in the same run (src -- relay -- dst over veth).
//!
//! Measures 64-byte UDP packets per second, TCP throughput (GSO on, as relayd sets it for
//! `accept`, and off), and the latency relayd adds to a request/response probe (p50, p99).
//! relayd's queue is fail-closed here, so that overload shows as loss instead of packets
//! bypassing relayd, and the naive baseline (one recv and one verdict per packet,
//! `batch = 1`) runs beside the batched datapath. Each figure is the median of several
//! interleaved rounds; ratios are taken against the kernel measured in the same run.
//!
//! Run: `make bench-passthrough` (root). Environment: ROUNDS (default 3), SECS (default 3).

use relay_testbed::{Line3, Proc, line3};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const RELAYD: &str = env!("CARGO_BIN_EXE_relayd");

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Kernel,
    Relayd,
    Naive,
    RelaydNoGso,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Kernel => "kernel forwarding",
            Mode::Relayd => "relayd accept (batched)",
            Mode::Naive => "relayd accept (naive: batch = 1)",
            Mode::RelaydNoGso => "relayd accept, GSO off",
        }
    }

    fn config(self, dir: &std::path::Path) -> Option<String> {
        let extra = match self {
            Mode::Kernel => return None,
            Mode::Relayd => "",
            Mode::Naive => "batch = 1\n",
            Mode::RelaydNoGso => "gso = false\n",
        };
        Some(format!(
            "[daemon]\nsocket = \"{}/bench.sock\"\n[[queue]]\nnum = 0\nhook = \"forward\"\nfail_open = false\n{extra}services = [\"accept\"]\n",
            dir.display()
        ))
    }
}

/// Starts relayd for `mode` in the relay namespace (None for the kernel alone).
fn start(l: &Line3, mode: Mode) -> Option<Proc> {
    let dir = std::env::temp_dir().join(format!("relayd-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = mode.config(&dir)?;
    let cfg = dir.join("bench.toml");
    std::fs::write(&cfg, text).unwrap();
    let mut cmd = l.relay.cmd(RELAYD);
    cmd.args(["run", "-c"])
        .arg(&cfg)
        .args(["--log", "warn,relayd::cli=info"]);
    cmd.stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    let p = l.relay.spawn(cmd);
    assert!(
        p.wait_stderr_contains("relayd running", Duration::from_secs(10)),
        "{}",
        p.stderr_text()
    );
    Some(p)
}

fn stop(p: Option<Proc>) {
    if let Some(mut p) = p {
        p.stop(libc::SIGTERM, Duration::from_secs(10));
    }
}

fn udp_pps(l: &Line3, secs: f64) -> f64 {
    let dst: SocketAddr = "10.0.2.2:9000".parse().unwrap();
    let sock = l.dst.run(move || UdpSocket::bind(dst).unwrap());
    let sink = std::thread::spawn(move || {
        relay_traffic::udp_sink_on(
            sock,
            Duration::from_millis(500),
            Duration::from_secs(60),
            None,
        )
        .unwrap()
    });
    let mut cfg = relay_traffic::UdpSendConfig::new(dst);
    cfg.size = 64 - 28; // 64-byte IP packets
    cfg.rate_bps = None;
    cfg.duration = Duration::from_secs_f64(secs);
    cfg.ratio = 1.0;
    l.src.run(move || relay_traffic::udp_send(&cfg).unwrap());
    let got = sink.join().unwrap();
    got.packets as f64 / got.duration().as_secs_f64().max(1e-3)
}

fn tcp_bps(l: &Line3, secs: f64) -> f64 {
    let dst: SocketAddr = "10.0.2.2:9001".parse().unwrap();
    let listener = l.dst.run(move || std::net::TcpListener::bind(dst).unwrap());
    let sink = std::thread::spawn(move || relay_traffic::tcp_sink(listener).unwrap());
    let (sent, elapsed) = l
        .src
        .run(move || relay_traffic::tcp_send(dst, Duration::from_secs_f64(secs)).unwrap());
    let got = sink.join().unwrap();
    assert_eq!(got, sent);
    sent as f64 * 8.0 / elapsed.as_secs_f64()
}

fn rr(l: &Line3, count: usize) -> (Duration, Duration) {
    let echo_addr: SocketAddr = "10.0.2.2:9002".parse().unwrap();
    let sock = l.dst.run(move || UdpSocket::bind(echo_addr).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let server = std::thread::spawn(move || relay_traffic::udp_echo_server(sock, s2));
    let st = l.src.run(move || {
        relay_traffic::rr_probe(
            echo_addr,
            count,
            Duration::from_micros(500),
            Duration::from_millis(200),
        )
        .unwrap()
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.join().unwrap();
    (st.p50().unwrap_or_default(), st.p99().unwrap_or_default())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing we use.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let secs: f64 = std::env::var("SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let l = line3("passthrough");
    let modes = [Mode::Kernel, Mode::Relayd, Mode::Naive, Mode::RelaydNoGso];
    let mut pps: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut tcp: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut lat: Vec<Vec<(f64, f64)>> = vec![Vec::new(); modes.len()];
    for round in 0..rounds {
        for (i, &m) in modes.iter().enumerate() {
            let p = start(&l, m);
            if m != Mode::RelaydNoGso {
                pps[i].push(udp_pps(&l, secs));
                let (p50, p99) = rr(&l, 2000);
                lat[i].push((p50.as_secs_f64() * 1e6, p99.as_secs_f64() * 1e6));
            }
            tcp[i].push(tcp_bps(&l, secs));
            stop(p);
            eprintln!("round {}/{rounds}: {} done", round + 1, m.name());
        }
    }
    let k_pps = median(pps[0].clone());
    let k_tcp = median(tcp[0].clone());
    let k_p50 = median(lat[0].iter().map(|x| x.0).collect());
    let k_p99 = median(lat[0].iter().map(|x| x.1).collect());
    println!(
        "passthrough: {rounds} rounds of {secs} s, medians; ratios against the kernel in the same run\n"
    );
    println!(
        "| path | 64 B UDP pps | ratio | TCP Mbit/s | ratio | RR p50 us | RR p99 us | added p50 / p99 us |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (i, m) in modes.iter().enumerate() {
        let t = median(tcp[i].clone());
        if *m == Mode::RelaydNoGso {
            println!(
                "| {} | - | - | {:.0} | {:.2} | - | - | - |",
                m.name(),
                t / 1e6,
                t / k_tcp
            );
            continue;
        }
        let p = median(pps[i].clone());
        let p50 = median(lat[i].iter().map(|x| x.0).collect());
        let p99 = median(lat[i].iter().map(|x| x.1).collect());
        println!(
            "| {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} / {:.0} |",
            m.name(),
            p,
            p / k_pps,
            t / 1e6,
            t / k_tcp,
            p50,
            p99,
            p50 - k_p50,
            p99 - k_p99
        );
    }
}
