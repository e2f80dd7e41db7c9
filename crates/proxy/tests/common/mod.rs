//! Helpers shared by the kernel tests: start `relay-proxy-run` in a namespace, read its
//! counters, divert ports to it with TPROXY, measure its CPU and memory.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Stdio;
use std::time::Duration;

use relay_proxy::tproxy::TproxySpec;
use relay_testbed::{Node, Proc};
use serde_json::Value;

/// The transparent listener's port in these tests.
pub const TPROXY_PORT: u16 = 9040;

/// Starts `relay-proxy-run MODE CONFIG` inside `node` and waits for `ready`.
pub fn start_proxy(node: &Node, mode: &str, cfg: &Value) -> Proc {
    let mut c = node.cmd(env!("CARGO_BIN_EXE_relay-proxy-run"));
    c.args([mode, &cfg.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let p = node.spawn(c);
    assert!(
        p.wait_stdout_contains("ready", Duration::from_secs(10)),
        "proxy did not start: {}",
        p.stderr_text()
    );
    p
}

/// The proxy's counters now (SIGUSR1, then the next `stats` line).
pub fn stats(p: &Proc) -> Value {
    let before = p.stdout_text().matches("\nstats ").count();
    p.signal(libc::SIGUSR1).unwrap();
    for _ in 0..400 {
        let text = p.stdout_text();
        if text.matches("\nstats ").count() > before {
            let line = text.rsplit("\nstats ").next().unwrap();
            let line = line.lines().next().unwrap();
            return serde_json::from_str(line).unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("no stats line; stdout: {}", p.stdout_text());
}

/// Diverts new TCP connections to `ports` on `node` to the transparent listener.
pub fn divert(node: &Node, ports: Vec<u16>) -> TproxySpec {
    let spec = TproxySpec::static_ports(TPROXY_PORT, ports);
    spec.install_routing(Some(node.name())).unwrap();
    spec.install_chain(Some(node.name()), "RPX-TPROXY").unwrap();
    spec
}

/// (user + system CPU seconds, VmRSS KiB, VmHWM KiB) of a process.
pub fn cpu_rss(pid: u32) -> (f64, u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (ticks as f64 / hz, kib("VmRSS:"), kib("VmHWM:"))
}

/// A 1 MiB pseudo-random block; each copy sent carries its index in the first 8 bytes,
/// so reordered or repeated blocks change the hash.
pub fn block() -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A TCP server in `node` on `at` that answers each connection's first read with the
/// same bytes; counts connections until the returned flag is set.
pub fn echo_server(
    node: &relay_testbed::Node,
    at: &str,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    let at: SocketAddr = at.parse().unwrap();
    let listener = node.run(move || TcpListener::bind(at).unwrap());
    listener.set_nonblocking(true).unwrap();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (c, st) = (count.clone(), stop.clone());
    std::thread::spawn(move || {
        while !st.load(Relaxed) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    c.fetch_add(1, Relaxed);
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut b = [0u8; 64];
                    if let Ok(n) = s.read(&mut b) {
                        let _ = s.write_all(&b[..n]);
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    (count, stop)
}
