//! Sender, sink, echo server and probe against each other on 127.0.0.1 (no root needed).

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use relay_traffic::{
    UdpSendConfig, pin_thread, rr_probe, tcp_send, tcp_sink, udp_echo_server, udp_owd_sink,
    udp_send, udp_sink_on,
};

fn bound_udp() -> (UdpSocket, SocketAddr) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let a = s.local_addr().unwrap();
    (s, a)
}

#[test]
fn paced_udp_hits_rate_without_loss() {
    let (sock, addr) = bound_udp();
    let sink = std::thread::spawn(move || {
        udp_sink_on(
            sock,
            Duration::from_millis(300),
            Duration::from_secs(3),
            None,
        )
        .unwrap()
    });
    let rate = 20_000_000;
    let cfg = UdpSendConfig {
        rate_bps: Some(rate),
        duration: Duration::from_millis(500),
        size: 1000,
        ratio: 0.5,
        ..UdpSendConfig::new(addr)
    };
    let sent = udp_send(&cfg).unwrap();
    let got = sink.join().unwrap();

    let expected = rate as f64 * 0.5 / (1028.0 * 8.0);
    let ratio = sent.packets as f64 / expected;
    assert!(
        (0.8..1.2).contains(&ratio),
        "sent {} vs {expected}",
        sent.packets
    );
    assert_eq!(sent.errors, 0);
    assert_eq!(got.packets, sent.packets);
    assert_eq!(got.lost, 0);
    assert_eq!(got.duplicates_or_reordered, 0);
    assert_eq!(got.max_seq + 1, sent.packets);
    assert_eq!(got.bytes, sent.bytes);
    let tput = got.throughput_bps() / rate as f64;
    assert!(
        (0.8..1.2).contains(&tput),
        "throughput {}",
        got.throughput_bps()
    );
    assert!(got.owd_mean().unwrap() < Duration::from_millis(100));
}

#[test]
fn unpaced_udp_sends_and_rejects_bad_sizes() {
    let (sock, addr) = bound_udp();
    let sink = std::thread::spawn(move || {
        udp_sink_on(
            sock,
            Duration::from_millis(200),
            Duration::from_secs(2),
            None,
        )
        .unwrap()
    });
    let cfg = UdpSendConfig {
        duration: Duration::from_millis(100),
        size: 200,
        ..UdpSendConfig::new(addr)
    };
    let sent = udp_send(&cfg).unwrap();
    let got = sink.join().unwrap();
    assert!(sent.packets > 1000, "{sent:?}");
    assert!(got.packets > 0 && got.packets <= sent.packets);
    assert_eq!(got.packets + got.lost, got.max_seq + 1);

    for size in [15, 70_000] {
        let cfg = UdpSendConfig {
            size,
            ..UdpSendConfig::new(addr)
        };
        assert!(udp_send(&cfg).is_err());
    }
}

#[test]
fn rr_probe_against_echo_server() {
    let (sock, addr) = bound_udp();
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || udp_echo_server(sock, stop))
    };
    let stats = rr_probe(
        addr,
        20,
        Duration::from_millis(5),
        Duration::from_millis(500),
    )
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(server.join().unwrap(), 20);
    assert_eq!(stats.samples.len(), 20);
    assert_eq!(stats.lost, 0);
    assert!(stats.p50().unwrap() <= stats.p99().unwrap());
    assert!(stats.p99().unwrap() < Duration::from_millis(500));
    assert!(stats.jitter().is_some());
}

#[test]
fn rr_probe_counts_unanswered_as_lost() {
    // Nobody listens: ICMP port unreachable (or a timeout) makes every probe lost.
    let (sock, addr) = bound_udp();
    drop(sock);
    let stats = rr_probe(addr, 3, Duration::from_millis(1), Duration::from_millis(50)).unwrap();
    assert_eq!(stats.lost, 3);
    assert!(stats.samples.is_empty());
}

#[test]
fn tcp_bulk_transfer() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = std::thread::spawn(move || tcp_sink(listener).unwrap());
    let (sent, elapsed) = tcp_send(addr, Duration::from_millis(200)).unwrap();
    assert_eq!(sink.join().unwrap(), sent);
    assert!(sent > 1 << 20, "{sent}");
    assert!(elapsed >= Duration::from_millis(200));
}

#[test]
fn owd_sink_times_every_datagram_by_the_kernel_clock() {
    let (sock, addr) = bound_udp();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let sink = std::thread::spawn(move || udp_owd_sink(sock, &s2, 100_000).unwrap());
    let sent = std::thread::spawn(move || {
        // The first CPU this process may use.
        let cpu = first_cpu();
        pin_thread(cpu).unwrap();
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert!(
            status.contains(&format!("Cpus_allowed_list:\t{cpu}\n")),
            "{status}"
        );
        udp_send(&UdpSendConfig {
            rate_bps: Some(10_000_000),
            duration: Duration::from_millis(300),
            size: 100,
            ..UdpSendConfig::new(addr)
        })
        .unwrap()
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let got = sink.join().unwrap();
    assert_eq!(got.packets, sent.packets);
    assert_eq!(got.no_timestamp, 0);
    assert_eq!(got.samples_ns.len() as u64, sent.packets);
    assert!(got.samples_ns.windows(2).all(|w| w[0] <= w[1]));
    // Loopback delivers within a millisecond nearly always; a busy machine may stall one.
    let p50 = got.quantile(0.5).unwrap();
    assert!(
        p50 > Duration::ZERO && p50 < Duration::from_millis(5),
        "{p50:?}"
    );
    assert!(got.clock_drift() < Duration::from_millis(1));
    assert!(pin_thread(1 << 20).is_err());
}

/// The first CPU this process may run on.
fn first_cpu() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    list.split([',', '-']).next().unwrap().parse().unwrap()
}
