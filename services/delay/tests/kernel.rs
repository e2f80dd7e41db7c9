//! `delay` on the real kernel: a relay running the service on a queue holds both
//! directions, so ping's RTT rises by twice the delay, and a TCP transfer through it
//! completes intact. The queue is driven directly (relay_nfq), not through the daemon.
//! Needs root.

use relay_core::{Chain, ChainSettings, Counter, Counters, QueueCounters, ServiceConfig, Verdict};
use relay_nfq::{HoldConfig, Queue, QueueConfig};
use relay_svc_delay::DelayConfig;
use relay_testbed::measure_with_retries;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn start_delay_queue(l: &relay_testbed::Line3, cfg_text: &str) -> (Queue, Counters) {
    let cfg: DelayConfig = toml::from_str(cfg_text).unwrap();
    let factory = cfg.into_factory("wan").unwrap();
    let counters = Counters::new();
    let service = factory.build(&counters, &relay_core::Resources::new());
    let qcfg = QueueConfig {
        copy_range: factory.manifest().needs_bytes.unwrap(),
        gso: !factory.manifest().rewrites_payload,
        max_len: factory.manifest().max_held + 1024,
        hold: HoldConfig {
            max_packets: factory.manifest().max_held,
            overflow: Verdict::Drop,
            ..HoldConfig::default()
        },
        ..QueueConfig::new(3)
    };
    let q = l.relay.run(move || {
        let mut chain = Chain::new(ChainSettings {
            malformed: Verdict::Accept,
            hook: relay_core::Hook::Forward,
            stages: relay_core::StageMark::DEFAULT,
        });
        chain.push("wan", service, Counter::new());
        Queue::start(&qcfg, chain, QueueCounters::default()).unwrap()
    });
    let out = l
        .relay
        .sh("iptables -w -t mangle -A FORWARD -j NFQUEUE --queue-num 3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (q, counters)
}

fn count(c: &Counters, name: &str) -> u64 {
    c.snapshot().into_iter().find(|x| x.0 == name).unwrap().2
}

#[test]
fn ping_rtt_rises_by_twice_the_delay() {
    let l = relay_testbed::line3("delay-ping");
    let base = l.src.ping_avg_ms("10.0.2.2", 10, "0.05");
    assert!(base < 5.0, "baseline RTT {base} ms");
    let (q, counters) = start_delay_queue(&l, "delay = \"20ms\"\nlimit = 1000");
    // Both directions cross the relay's FORWARD hook: 2 x 20 ms on top of the baseline.
    measure_with_retries("delayed ping", 3, |_| {
        let delayed = l.src.ping_avg_ms("10.0.2.2", 20, "0.05");
        if (40.0..50.0).contains(&(delayed - base)) {
            Ok(())
        } else {
            Err(format!(
                "RTT {base:.3} ms -> {delayed:.3} ms, expected +40 ms"
            ))
        }
    });
    let qc = q.counters().clone();
    q.stop();
    assert!(count(&counters, "delayed") >= 40);
    assert_eq!(qc.held.get(), count(&counters, "delayed"));
    assert_eq!(qc.hold_overflow.get(), 0);
    assert_eq!(
        qc.accepted.get(),
        qc.packets.get(),
        "every held packet accepted"
    );
}

#[test]
fn tcp_transfer_through_delay_completes_intact() {
    let l = relay_testbed::line3("delay-tcp");
    let (q, counters) = start_delay_queue(
        &l,
        "delay = \"10ms\"\njitter = \"2ms\"\nlimit = 4000\nseed = 5",
    );
    const LEN: usize = 4 << 20;
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 % 251) as u8).collect();
    let expect = data.clone();
    let ln = l.dst.run(|| TcpListener::bind("10.0.2.2:7000").unwrap());
    let sink = l.dst.run_bg(move || {
        let (mut c, _) = ln.accept().unwrap();
        let mut got = Vec::with_capacity(LEN);
        c.read_to_end(&mut got).unwrap();
        c.write_all(b"done").unwrap();
        got
    });
    let t = Instant::now();
    let reply = l.src.run(move || {
        let mut c = TcpStream::connect("10.0.2.2:7000").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c.write_all(&data).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut r = Vec::new();
        c.read_to_end(&mut r).unwrap();
        r
    });
    let took = t.elapsed();
    assert_eq!(reply, b"done");
    let got = sink.join().unwrap();
    assert!(
        got == expect,
        "{} bytes arrived, not the {} sent",
        got.len(),
        LEN
    );
    let qc = q.counters().clone();
    q.stop();
    // The handshake alone takes an RTT of at least 2 x (10 - 2) ms.
    assert!(took > Duration::from_millis(16), "{took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(count(&counters, "delayed") > 10);
    assert_eq!(qc.errors.get(), 0);
    eprintln!(
        "4 MiB through 2 x 10 ms +- 2 ms in {took:?}; {} packets held, {} overflowed",
        qc.held.get(),
        qc.hold_overflow.get()
    );
}
