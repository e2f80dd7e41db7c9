//! `relay-traffic`: the traffic generators and sinks of `relay_traffic` as a CLI, for demos
//! and experiment scripts (`ip netns exec NS relay-traffic ...`). Each subcommand prints
//! one JSON object with its statistics on stdout when it ends; sinks and the echo server
//! announce `listening on ADDR` on stderr once bound, so a script can wait for that.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use relay_traffic::units::{parse_duration, parse_rate};
use relay_traffic::{UdpSendConfig, ip_udp_overhead};
use serde_json::{Value, json};

/// Traffic generators and sinks for relayd tests and experiments.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Pin the command's thread to this CPU (sched_setaffinity), e.g. to keep a generator
    /// off the core a relay benchmark measures.
    #[arg(long, global = true)]
    cpu: Option<usize>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Send paced UDP datagrams carrying sequence numbers and timestamps.
    UdpSend {
        /// Destination address, e.g. 10.0.2.2:5001.
        #[arg(long)]
        dst: SocketAddr,
        /// UDP payload bytes per datagram (at least 16).
        #[arg(long, default_value_t = 1000)]
        size: usize,
        /// On-wire IP rate including IP+UDP headers: 90mbit, 1gbit, 500kbit, or bits/s.
        #[arg(long, value_parser = parse_rate, conflicts_with = "pps")]
        rate: Option<u64>,
        /// Datagrams per second instead of --rate.
        #[arg(long)]
        pps: Option<f64>,
        /// How long to send: 10s, 500ms.
        #[arg(long, value_parser = parse_duration, default_value = "10s")]
        duration: Duration,
        /// Payload compressibility: 1.0 incompressible, 0.5 compresses to about half.
        #[arg(long, default_value_t = 1.0)]
        ratio: f64,
        /// Datagrams per sendmmsg call at most.
        #[arg(long, default_value_t = 32)]
        batch: usize,
        /// Datagrams that may accrue while the sender does not run, sent back to back
        /// when it does (default: one batch).
        #[arg(long)]
        burst: Option<usize>,
    },
    /// Count UDP datagrams from udp-send: loss, reordering, one-way delay, throughput.
    UdpSink {
        /// Address to bind, e.g. 0.0.0.0:5001.
        #[arg(long)]
        bind: SocketAddr,
        /// Stop after this long without a datagram (once the first arrived).
        #[arg(long, value_parser = parse_duration, default_value = "1s")]
        idle: Duration,
        /// Stop after this long in any case.
        #[arg(long, value_parser = parse_duration, default_value = "30s")]
        max: Duration,
    },
    /// Write TCP bulk data for a duration.
    TcpSend {
        /// Destination address.
        #[arg(long)]
        dst: SocketAddr,
        /// How long to send.
        #[arg(long, value_parser = parse_duration, default_value = "10s")]
        duration: Duration,
        /// Payload compressibility, as for udp-send.
        #[arg(long, default_value_t = 1.0)]
        ratio: f64,
    },
    /// Accept one TCP connection and read it to EOF.
    TcpSink {
        /// Address to listen on.
        #[arg(long)]
        bind: SocketAddr,
    },
    /// UDP echo server for rr, until SIGINT/SIGTERM or --duration.
    Echo {
        /// Address to bind.
        #[arg(long)]
        bind: SocketAddr,
        /// Stop after this long (default: run until signalled).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
    },
    /// UDP request/response latency probe against `echo`.
    Rr {
        /// Echo server address.
        #[arg(long)]
        dst: SocketAddr,
        /// Number of probes.
        #[arg(long, default_value_t = 100)]
        count: usize,
        /// Milliseconds between probes.
        #[arg(long, default_value_t = 10)]
        interval_ms: u64,
        /// Milliseconds to wait for each answer.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
    },
}

/// Set by SIGINT/SIGTERM so that sinks and the echo server still print their statistics.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn catch_stop_signals() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

fn us(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(d.as_secs_f64() * 1e6))
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if let Some(cpu) = cli.cpu {
        relay_traffic::pin_thread(cpu).with_context(|| format!("pinning to CPU {cpu}"))?;
    }
    let out = match cli.cmd {
        Cmd::UdpSend {
            dst,
            size,
            rate,
            pps,
            duration,
            ratio,
            batch,
            burst,
        } => {
            let per_packet_bits = ((size + ip_udp_overhead(&dst)) * 8) as f64;
            let rate_bps = rate.or(pps.map(|p| (p * per_packet_bits).round() as u64));
            let cfg = UdpSendConfig {
                dst,
                size,
                rate_bps,
                duration,
                ratio,
                batch,
                burst,
            };
            let s = relay_traffic::udp_send(&cfg).context("udp-send")?;
            json!({
                "mode": "udp-send",
                "dst": dst.to_string(),
                "size": size,
                "ratio": ratio,
                "target_rate_bps": rate_bps,
                "packets": s.packets,
                "bytes": s.bytes,
                "wire_bytes": s.wire_bytes,
                "errors": s.errors,
                "elapsed_s": s.elapsed.as_secs_f64(),
                "wire_rate_bps": s.wire_bps(),
                "pps": s.packets as f64 / s.elapsed.as_secs_f64().max(1e-9),
            })
        }
        Cmd::UdpSink { bind, idle, max } => {
            catch_stop_signals();
            let sock = UdpSocket::bind(bind).with_context(|| format!("binding {bind}"))?;
            eprintln!("relay-traffic: listening on {}", sock.local_addr()?);
            let s = relay_traffic::udp_sink_on(sock, idle, max, Some(&STOP)).context("udp-sink")?;
            json!({
                "mode": "udp-sink",
                "bind": bind.to_string(),
                "packets": s.packets,
                "bytes": s.bytes,
                "lost": s.lost,
                "loss_ratio": s.loss_ratio(),
                "duplicates_or_reordered": s.duplicates_or_reordered,
                "short": s.short,
                "max_seq": s.max_seq,
                "duration_s": s.duration().as_secs_f64(),
                "throughput_bps": s.throughput_bps(),
                "owd_min_us": us(s.owd_min),
                "owd_mean_us": us(s.owd_mean()),
                "owd_max_us": us(s.owd_max),
            })
        }
        Cmd::TcpSend {
            dst,
            duration,
            ratio,
        } => {
            let (bytes, elapsed) =
                relay_traffic::tcp_send_ratio(dst, duration, ratio).context("tcp-send")?;
            json!({
                "mode": "tcp-send",
                "dst": dst.to_string(),
                "ratio": ratio,
                "bytes": bytes,
                "elapsed_s": elapsed.as_secs_f64(),
                "goodput_bps": bytes as f64 * 8.0 / elapsed.as_secs_f64().max(1e-9),
            })
        }
        Cmd::TcpSink { bind } => {
            let listener = TcpListener::bind(bind).with_context(|| format!("binding {bind}"))?;
            eprintln!("relay-traffic: listening on {}", listener.local_addr()?);
            let start = Instant::now();
            let bytes = relay_traffic::tcp_sink(listener).context("tcp-sink")?;
            json!({
                "mode": "tcp-sink",
                "bind": bind.to_string(),
                "bytes": bytes,
                "wall_s": start.elapsed().as_secs_f64(),
            })
        }
        Cmd::Echo { bind, duration } => {
            catch_stop_signals();
            let sock = UdpSocket::bind(bind).with_context(|| format!("binding {bind}"))?;
            eprintln!("relay-traffic: listening on {}", sock.local_addr()?);
            let stop = Arc::new(AtomicBool::new(false));
            let server = {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || relay_traffic::udp_echo_server(sock, stop))
            };
            let start = Instant::now();
            while !STOP.load(Ordering::Relaxed) && duration.is_none_or(|d| start.elapsed() < d) {
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::Relaxed);
            let echoed = server
                .join()
                .map_err(|_| anyhow::anyhow!("echo thread panicked"))?;
            json!({
                "mode": "echo",
                "bind": bind.to_string(),
                "echoed": echoed,
                "elapsed_s": start.elapsed().as_secs_f64(),
            })
        }
        Cmd::Rr {
            dst,
            count,
            interval_ms,
            timeout_ms,
        } => {
            let s = relay_traffic::rr_probe(
                dst,
                count,
                Duration::from_millis(interval_ms),
                Duration::from_millis(timeout_ms),
            )
            .context("rr")?;
            json!({
                "mode": "rr",
                "dst": dst.to_string(),
                "count": count,
                "received": s.samples.len(),
                "lost": s.lost,
                "min_us": us(s.min()),
                "p50_us": us(s.p50()),
                "mean_us": us(s.mean()),
                "p99_us": us(s.p99()),
                "max_us": us(s.max()),
                "jitter_us": us(s.jitter()),
            })
        }
    };
    println!("{out}");
    Ok(())
}
