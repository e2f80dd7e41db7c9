//! The monitor against the real kernel: a tbf qdisc's rate and a growing backlog are seen.

use relay_netlink::QueueMonitor;
use std::time::Duration;

#[test]
fn sees_tbf_rate_and_backlog() {
    let l = relay_testbed::line3("qmon");
    l.dst_link.tbf_a("8mbit", 1000).unwrap();
    let out = l.relay.exec(&[
        "cat",
        &format!("/sys/class/net/{}/ifindex", l.dst_link.a_if),
    ]);
    let ifindex: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    // The monitor must run inside the relay's namespace: start it on a thread there.
    let (rate, max_backlog, polls) = l.relay.run(move || {
        let m = QueueMonitor::start(Duration::from_millis(1)).unwrap();
        let first = m.get(ifindex).expect("the relay's egress qdisc is visible");
        assert!(first.age < Duration::from_millis(50));
        // Offer about 20 Mbit/s to an 8 Mbit/s bucket from the relay itself: its own
        // packets to dst queue in the same qdisc.
        let s = std::net::UdpSocket::bind("10.0.2.1:0").unwrap();
        let mut max = 0;
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(500) {
            for _ in 0..10 {
                let _ = s.send_to(&[0u8; 1200], "10.0.2.2:9");
            }
            std::thread::sleep(Duration::from_millis(5));
            max = max.max(m.get(ifindex).unwrap().backlog_bytes);
        }
        let polls = m.polls();
        m.stop();
        (first.rate_bytes, max, polls)
    });
    assert_eq!(rate, 1_000_000, "8mbit is 1,000,000 bytes/s");
    assert!(max_backlog > 10_000, "backlog never grew: {max_backlog}");
    assert!(
        polls > 100,
        "the monitor polled only {polls} times in 0.5 s"
    );
}
