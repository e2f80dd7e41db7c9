//! The memory attacks of issue 24 against relayd: many HTTP connections that each make the
//! parser hold as much as it may (pipelined gzip POSTs inflating to 100 KiB, slow bodies,
//! endless heads), all kept open and never answered. relayd's RSS growth must stay below
//! `app_memcap` + `stream_memcap` + the flow table's stated size (docs/ids.md, "Memory,
//! stated"), and honest flows must still pass while the attack holds its connections.

#![allow(unreachable_pub)]

use crate::bed::{self, Bed, TCP_PORT};
use crate::support;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const HTTP_PORT: u16 = 8080;

/// Small bounds, so that a few hundred connections exceed them many times over if they
/// did not hold; 4,096 flows so that every attacking connection is tracked.
const APP_MEMCAP: u64 = 4 << 20;
const STREAM_MEMCAP: u64 = 8 << 20;
const FLOWS: u64 = 4096;
/// docs/ids.md ("Memory, stated"): about 780 bytes per flow-table entry (slot, hash
/// bucket, eviction list), for `flows` a power of two.
const FLOW_BYTES: u64 = 780;

/// The rules: HTTP inspected on the attacked port (so its parser runs), the evasion rules.
fn rules() -> String {
    format!(
        "{}alert http any any -> any any (msg:\"http body\"; http.request_body; content:\"never-there\"; sid:10; rev:1;)\n",
        bed::RULES
    )
}

pub fn run() {
    let conns = support::env_count(
        "RELAYD_EVASION_CONNS",
        if crate::soak() { 2000 } else { 300 },
    ) as usize;
    let bed = Bed::new("evasion-mem");
    http_server(&bed);
    let mut failures = Vec::new();
    for kind in ["gzip", "slow_body", "endless_head"] {
        // Without a cap, each gzip connection inflates 3.2 MiB: a third of them is
        // plenty in `make test` and keeps the failing case from taking a minute.
        let conns = if kind == "gzip" && !crate::soak() {
            conns / 3
        } else {
            conns
        };
        let engine = bed.start_engine_with(
            &rules(),
            &format!("flows = {FLOWS}\nstream_memcap = {STREAM_MEMCAP}\napp_memcap = {APP_MEMCAP}"),
            // Suricata as configured by default: smaller stream memcaps than its
            // preallocation leave it dropping every new session.
            &[],
        );
        let bound = match engine {
            bed::Engine::Relayd(_) => APP_MEMCAP + STREAM_MEMCAP + FLOWS * FLOW_BYTES,
            // suricata.yaml's defaults: stream.memcap 64 MiB, stream.reassembly.memcap
            // 256 MiB, flow.memcap 32 MiB, defrag.memcap 32 MiB; HTTP has none.
            bed::Engine::Suricata(..) => (64 + 256 + 32 + 32) << 20,
        };
        // Warm up: one honest flow of each kind before the baseline.
        honest(&bed).unwrap_or_else(|e| panic!("honest flows before the attack: {e}"));
        let before = rss(engine.pid());
        let t = Instant::now();
        let (held, hold) = attack(&bed, kind, conns);
        crate::settle();
        let during = honest(&bed);
        let after = rss(engine.pid());
        let grew = after.hwm.saturating_sub(before.rss);
        let c = engine.counters();
        eprintln!(
            "memory attack {kind} ({}): {conns} connections ({held} held open) in {:.1} s; engine RSS {} -> {} KiB (peak {} KiB), growth {} KiB, bound {} KiB; honest flows during: {during:?}; counters: {}",
            engine.name(),
            t.elapsed().as_secs_f64(),
            before.rss >> 10,
            after.rss >> 10,
            after.hwm >> 10,
            grew >> 10,
            bound >> 10,
            c.iter()
                .filter(|(k, v)| **v > 0
                    && (k.contains("memcap")
                        || k.contains("exception")
                        || k.contains("app_")
                        || k.contains("stream")
                        || k.contains("flow")))
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        if grew >= bound {
            failures.push(format!(
                "{kind}: RSS grew {} KiB, bound {} KiB",
                grew >> 10,
                bound >> 10
            ));
        }
        if let Err(e) = during {
            failures.push(format!(
                "{kind}: an honest flow failed during the attack: {e}"
            ));
        }
        drop(hold);
        engine.check_alive(&bed);
        drop(engine);
    }
    assert!(
        failures.is_empty(),
        "memory attacks:\n{}",
        failures.join("\n")
    );
}

struct Mem {
    rss: u64,
    hwm: u64,
}

/// VmRSS and VmHWM (peak) of `pid`, in bytes.
fn rss(pid: u32) -> Mem {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    Mem {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
    }
}

/// An HTTP server on dst that answers `GET /honest` and otherwise reads and discards
/// whatever comes, never answering: every attacking transaction stays pending.
fn http_server(bed: &Bed) {
    let listener = bed
        .dst
        .run(|| TcpListener::bind(("::", HTTP_PORT)).unwrap());
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { continue };
            let _ = std::thread::Builder::new().stack_size(64 << 10).spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(300))).ok();
                let mut buf = vec![0u8; 16 << 10];
                let mut first = true;
                while let Ok(n @ 1..) = c.read(&mut buf) {
                    if first && buf[..n].starts_with(b"GET /honest") {
                        let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
                        return;
                    }
                    first = false;
                }
            });
        }
    });
}

/// An honest HTTP request on the attacked port and a 256 KiB TCP transfer to the evasion
/// port, both through relayd while the attack holds its connections.
fn honest(bed: &Bed) -> Result<(), String> {
    let addr: SocketAddr = format!("{}:{HTTP_PORT}", bed::DST4).parse().unwrap();
    let answer = bed.src.run(move || -> std::io::Result<String> {
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        c.set_read_timeout(Some(Duration::from_secs(3)))?;
        c.write_all(b"GET /honest HTTP/1.1\r\nHost: dst\r\n\r\n")?;
        let mut out = String::new();
        c.read_to_string(&mut out)?;
        Ok(out)
    });
    match answer {
        Ok(a) if a.starts_with("HTTP/1.1 200") => {}
        other => return Err(format!("HTTP GET: {other:?}")),
    }
    let tcp: SocketAddr = format!("{}:{TCP_PORT}", bed::DST4).parse().unwrap();
    let (sent, got) = bed.honest_tcp(tcp, 256 << 10, 11);
    if sent != got {
        return Err(format!(
            "TCP transfer: {} of {} bytes arrived intact",
            got.len(),
            sent.len()
        ));
    }
    Ok(())
}

/// Opens `n` attacking connections of `kind` from src and leaves them open until the
/// returned sender is dropped. Returns how many connected.
fn attack(bed: &Bed, kind: &str, n: usize) -> (usize, std::sync::mpsc::Sender<()>) {
    let payload = payload(kind);
    let addr: SocketAddr = format!("{}:{HTTP_PORT}", bed::DST4).parse().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (hold, release) = std::sync::mpsc::channel::<()>();
    let src = bed.src.clone();
    std::thread::spawn(move || {
        src.run(move || {
            let mut held = Vec::with_capacity(n);
            for _ in 0..n {
                let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_secs(3)) else {
                    continue;
                };
                // An engine that drops the flow leaves the write blocked: give it a moment,
                // keep the connection either way (it holds the engine's flow state).
                c.set_write_timeout(Some(Duration::from_millis(20))).ok();
                let _ = c.write_all(&payload);
                held.push(c);
            }
            let _ = tx.send(held.len());
            let _ = release.recv();
            drop(held);
        })
    });
    (rx.recv_timeout(Duration::from_secs(600)).unwrap_or(0), hold)
}

/// What one attacking connection sends.
fn payload(kind: &str) -> Vec<u8> {
    match kind {
        // 32 pipelined POSTs, each a gzip body that inflates to 100 KiB.
        "gzip" => {
            let body = gzip(&vec![b'a'; 100 << 10]);
            let mut out = Vec::new();
            for i in 0..32 {
                out.extend_from_slice(
                    format!(
                        "POST /upload/{i} HTTP/1.1\r\nHost: dst\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    )
                    .as_bytes(),
                );
                out.extend_from_slice(&body);
            }
            out
        }
        // A body of 100 KiB of a declared 10 MB, the rest never sent.
        "slow_body" => {
            let mut out =
                b"POST /slow HTTP/1.1\r\nHost: dst\r\nContent-Length: 10000000\r\n\r\n".to_vec();
            out.extend(std::iter::repeat_n(b'b', 100 << 10));
            out
        }
        // 60 KiB of header lines that never end.
        "endless_head" => {
            let mut out = b"GET /endless HTTP/1.1\r\nHost: dst\r\n".to_vec();
            while out.len() < 60 << 10 {
                out.extend_from_slice(
                    b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
                );
            }
            out
        }
        _ => unreachable!("unknown attack {kind}"),
    }
}

/// `data` gzip-compressed by the system's gzip.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut child = std::process::Command::new("gzip")
        .args(["-c", "-9"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running gzip");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    out.stdout
}
