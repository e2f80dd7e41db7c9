//! MOSTO's Fig. 5 (seed 004) on a namespace testbed: client -- relay1 -- relay2 -- server,
//! 40 ms of round-trip delay on each of the three segments from relayd's `delay` service
//! (120 ms end to end), and the time to download 10 KB, 100 KB and 500 KB measured
//! direct, split at one relay (relay1) and split at both (three TCP connections).
//!
//! Where the delay sits (the test kernel has no netem, so relayd delays what each relay
//! *receives*, in raw PREROUTING; the client and server run nothing):
//!
//! | segment        | delayed packets                         | one way        | RTT   |
//! |----------------|-----------------------------------------|----------------|-------|
//! | client–relay1  | relay1 in on eth0 (from the client)     | 40 ms up       | 40 ms |
//! | relay1–relay2  | relay1 in on eth1, relay2 in on eth0    | 20 ms each way | 40 ms |
//! | relay2–server  | relay2 in on eth1 (from the server)     | 40 ms down     | 40 ms |
//!
//! Not on egress: a relay that splits sends from its own sockets, and a packet NFQUEUE
//! holds still counts against its socket's TCP Small Queues budget (about 1 ms of data at
//! the pacing rate), so a 40 ms hold in POSTROUTING throttles the proxy's sender to a
//! trickle (netem orphans the skb for this reason; a userland queue cannot). Incoming
//! packets belong to no local socket. The split queue shares the eth0 queue, before the
//! delay, since an accepted packet leaves the hook (a second queue rule after the first
//! would never see it).
//!
//! A download is: connect, send "N\n", read N bytes until the server closes; the time runs
//! from connect() to end of file. `tcp_no_metrics_save` is set everywhere so that no run
//! inherits the congestion state of the one before.
//!
//! Writes docs/experiment-split.md (table), docs/experiment-split.dat and, with gnuplot,
//! docs/experiment-split.png. Run: `make experiment-split` (root). Environment: REPS
//! (default 15), SIZES (default "10 100 500", KB).

#[path = "experiment/mod.rs"]
mod experiment;

use experiment::{docs, env_list, env_num, gnuplot, start_relayd};
use relay_testbed::{Line4, Node, line4};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const PORT: u16 = 8000;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Direct,
    SplitOne,
    SplitTwo,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Direct, Mode::SplitOne, Mode::SplitTwo];

    fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::SplitOne => "split-1",
            Mode::SplitTwo => "split-2",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Direct => "direct (1 connection)",
            Mode::SplitOne => "split at relay1 (2 connections)",
            Mode::SplitTwo => "split at both relays (3 connections)",
        }
    }
}

/// A relay's configuration: delay on what it receives on eth0 (`in0_ms`) and on eth1
/// (`in1_ms`), in raw PREROUTING, and the split decision first on eth0 if `split`.
fn relay_config(in0_ms: u32, in1_ms: u32, split: bool) -> String {
    let chain0 = if split { "\"split\", \"d0\"" } else { "\"d0\"" };
    let mut c = format!(
        r#"
[[queue]]
num = 0
hook = "prerouting"
table = "raw"
match = "-i eth0"
services = [{chain0}]

[[queue]]
num = 1
hook = "prerouting"
table = "raw"
match = "-i eth1"
services = ["d1"]

[service.d0]
kind = "delay"
delay = "{in0_ms}ms"
limit = 20000

[service.d1]
kind = "delay"
delay = "{in1_ms}ms"
limit = 20000
"#
    );
    if split {
        c.push_str(&format!(
            r#"
[service.split]
kind = "tcpsplit"
ports = [{PORT}]
"#
        ));
    }
    c
}

/// The server: for each connection, read "N\n", send N bytes, close.
fn serve(node: &Node) {
    let addr: SocketAddr = format!("10.0.3.2:{PORT}").parse().unwrap();
    let l = node.run(move || TcpListener::bind(addr).unwrap());
    std::thread::spawn(move || {
        let data = vec![0x5au8; 1 << 20];
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let data = data.clone();
            std::thread::spawn(move || {
                let mut req = Vec::new();
                let mut b = [0u8; 64];
                while !req.contains(&b'\n') {
                    match c.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                let n: usize = String::from_utf8_lossy(&req).trim().parse().unwrap_or(0);
                let _ = c.write_all(&data[..n.min(data.len())]);
            });
        }
    });
}

/// One download of `bytes` from the client; seconds from connect() to end of file.
fn download(client: &Node, bytes: usize) -> f64 {
    let addr: SocketAddr = format!("10.0.3.2:{PORT}").parse().unwrap();
    client.run(move || {
        let t = Instant::now();
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(format!("{bytes}\n").as_bytes()).unwrap();
        let mut got = 0;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => panic!("download: {e} after {got} bytes"),
            }
        }
        assert_eq!(got, bytes, "short download");
        t.elapsed().as_secs_f64()
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn ping_rtt(node: &Node, dst: &str) -> f64 {
    let out = node.exec(&["ping", "-q", "-c", "3", "-i", "0.2", dst]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.rsplit("= ")
        .next()
        .and_then(|s| s.split('/').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

fn main() {
    // `cargo bench` passes --bench; nothing to filter here.
    let reps: usize = env_num("REPS", 15);
    let sizes: Vec<usize> = env_list("SIZES", "10 100 500");
    let l: Line4 = line4("exp_split");
    let (client, r1, r2, server) = (&l.src, &l.comp, &l.decomp, &l.dst);
    for n in [client, r1, r2, server] {
        n.sysctl("net.ipv4.tcp_no_metrics_save", "1");
    }
    serve(server);
    let mut rows: Vec<(usize, Mode, f64, f64, f64)> = Vec::new();
    let mut rtts = Vec::new();
    for mode in Mode::ALL {
        let mut p1 = start_relayd(
            r1,
            &format!("r1-{}", mode.name()),
            &relay_config(40, 20, mode != Mode::Direct),
        );
        let mut p2 = start_relayd(
            r2,
            &format!("r2-{}", mode.name()),
            &relay_config(20, 40, mode == Mode::SplitTwo),
        );
        rtts.push((mode, ping_rtt(client, "10.0.3.2")));
        // One warm-up download (ARP/neighbour entries, first-connection costs).
        download(client, 1000);
        for &kb in &sizes {
            let mut t: Vec<f64> = (0..reps).map(|_| download(client, kb * 1000)).collect();
            let (min, max) = (
                t.iter().cloned().fold(f64::INFINITY, f64::min),
                t.iter().cloned().fold(0.0, f64::max),
            );
            let med = median(&mut t);
            println!(
                "{:8} {:4} KB  median {:6.1} ms  (min {:6.1}, max {:6.1}, {reps} runs)",
                mode.name(),
                kb,
                med * 1e3,
                min * 1e3,
                max * 1e3
            );
            rows.push((kb, mode, med, min, max));
        }
        for p in [&mut p1, &mut p2] {
            p.stop(libc::SIGTERM, Duration::from_secs(10));
        }
    }

    let docs = docs();
    let mut dat = String::from("# size_kb mode median_ms min_ms max_ms\n");
    for (kb, m, med, min, max) in &rows {
        dat.push_str(&format!(
            "{kb} {} {:.1} {:.1} {:.1}\n",
            m.name(),
            med * 1e3,
            min * 1e3,
            max * 1e3
        ));
    }
    std::fs::write(docs.join("experiment-split.dat"), &dat).unwrap();
    let mut md = format!(
        "Median download time (ms) over {reps} runs, client–relay1–relay2–server, 40 ms RTT per \
         segment from the `delay` service (ping RTT end to end: {}).\n\n\
         | size | direct | split at relay1 | split at both | speed-up, one relay | speed-up, two relays |\n\
         |-----:|-------:|----------------:|--------------:|--------------------:|---------------------:|\n",
        rtts.iter()
            .map(|(m, r)| format!("{} {r:.0} ms", m.name()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for &kb in &sizes {
        let get = |m: Mode| {
            rows.iter()
                .find(|r| r.0 == kb && r.1 == m)
                .map(|r| r.2 * 1e3)
                .unwrap()
        };
        let (d, s1, s2) = (get(Mode::Direct), get(Mode::SplitOne), get(Mode::SplitTwo));
        md.push_str(&format!(
            "| {kb} KB | {d:.0} | {s1:.0} | {s2:.0} | {:+.0} % | {:+.0} % |\n",
            (d / s1 - 1.0) * 100.0,
            (d / s2 - 1.0) * 100.0
        ));
    }
    md.push_str("\nSpeed-up as MOSTO reports it: direct time / split time - 1.\n");
    std::fs::write(docs.join("experiment-split.md"), &md).unwrap();
    print!("\n{md}");
    plot(&docs, &sizes);
}

/// Grouped bars per size, one per mode: the shape of MOSTO's Fig. 5.
fn plot(docs: &std::path::Path, sizes: &[usize]) {
    let mut table = String::from("size direct split1 split2\n");
    let dat = std::fs::read_to_string(docs.join("experiment-split.dat")).unwrap();
    for kb in sizes {
        let v: Vec<&str> = Mode::ALL
            .iter()
            .map(|m| {
                dat.lines()
                    .find(|l| l.starts_with(&format!("{kb} {} ", m.name())))
                    .and_then(|l| l.split_whitespace().nth(2))
                    .unwrap_or("0")
            })
            .collect();
        table.push_str(&format!("\"{kb} KB\" {} {} {}\n", v[0], v[1], v[2]));
    }
    let tmp = std::env::temp_dir().join(format!("relayd-exps-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("bars.dat"), table).unwrap();
    let script = format!(
        "set terminal pngcairo size 900,560\nset output '{}'\n\
         set title 'Download time, client-relay-relay-server, 40 ms RTT per segment'\n\
         set style data histogram\nset style histogram cluster gap 1\n\
         set style fill solid 0.8 border -1\nset boxwidth 0.9\nset grid ytics\n\
         set ylabel 'median transfer time (ms)'\nset key left top\nset yrange [0:*]\n\
         plot '{}' using 2:xtic(1) title '{}', '' using 3 title '{}', '' using 4 title '{}'\n",
        docs.join("experiment-split.png").display(),
        tmp.join("bars.dat").display(),
        Mode::Direct.label(),
        Mode::SplitOne.label(),
        Mode::SplitTwo.label()
    );
    let ok = gnuplot(docs, &script);
    let _ = std::fs::remove_dir_all(&tmp);
    if ok {
        println!("wrote docs/experiment-split.md, .dat and .png");
    } else {
        eprintln!("gnuplot missing or failed: no plot (apt-get install gnuplot-nox)");
    }
}
