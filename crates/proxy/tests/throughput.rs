//! Proxy throughput on one long TCP flow as a ratio to the kernel's own forwarding, on the
//! same `line3` testbed in the same run: kernel forwarding, then the transparent proxy with
//! the splice core, then with the copy core. Prints one line per run and the ratios.
//!
//! For numbers worth quoting use an optimised build:
//! `cargo test --release -p relay-proxy --test throughput -- --nocapture`
//! (`RELAY_PROXY_BENCH_SECS` sets the length of each run, default 5).

mod common;

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use common::{TPROXY_PORT, divert, start_proxy};
use relay_testbed::{Line3, line3};
use serde_json::json;

fn run(l: &Line3, port: u16, secs: u64) -> f64 {
    let dst: SocketAddr = format!("10.0.2.2:{port}").parse().unwrap();
    let listener = l.dst.run(move || TcpListener::bind(dst).unwrap());
    let sink = l
        .dst
        .run_bg(move || relay_traffic::tcp_sink(listener).unwrap());
    let (sent, elapsed) = l
        .src
        .run(move || relay_traffic::tcp_send(dst, Duration::from_secs(secs)).unwrap());
    let got = sink.join().unwrap();
    assert_eq!(got, sent);
    sent as f64 * 8.0 / elapsed.as_secs_f64()
}

#[test]
fn proxy_throughput_vs_kernel_forwarding() {
    let secs = std::env::var("RELAY_PROXY_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let l = line3("proxy_bench");
    let _spec = divert(&l.relay, vec![5102, 5103, 5104, 5105]);
    let kernel = run(&l, 5101, secs);
    println!("bench: kernel forwarding      {:7.2} Gbit/s", kernel / 1e9);
    let mut ratios = Vec::new();
    let runs = [
        ("splice", 64 << 10, 5102),
        ("splice", 1 << 20, 5103),
        ("copy", 64 << 10, 5104),
        ("copy", 1 << 20, 5105),
    ];
    for (mode, buf, port) in runs {
        let proxy = start_proxy(
            &l.relay,
            "transparent",
            &json!({"listen": format!("0.0.0.0:{TPROXY_PORT}"), "relay": mode, "buffer_size": buf}),
        );
        let before = common::cpu_rss(proxy.pid()).0;
        let rate = run(&l, port, secs);
        let cpu = common::cpu_rss(proxy.pid()).0 - before;
        let st = common::stats(&proxy);
        assert_eq!(st["accepted"], 1, "the flow went through the proxy");
        println!(
            "bench: proxy {mode:6} {:4} KiB {:7.2} Gbit/s  ratio {:.2}  proxy CPU {:.0} % of one core ({:.1} % per Gbit/s)",
            buf >> 10,
            rate / 1e9,
            rate / kernel,
            cpu / secs as f64 * 100.0,
            cpu / secs as f64 * 100.0 / (rate / 1e9)
        );
        ratios.push((mode, buf >> 10, (rate / kernel * 100.0).round() / 100.0));
    }
    println!("bench: ratios to kernel forwarding: {ratios:?}");
}
