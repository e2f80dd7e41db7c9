//! A token bucket on the relay's egress really limits what reaches dst: relay-traffic
//! sends twice the shaped rate through a line3 and the sink sees the shaped rate.

use std::net::UdpSocket;
use std::time::Duration;

use relay_core::units::parse_rate;
use relay_testbed::{line3, measure_with_retries};
use relay_traffic::{UdpSendConfig, udp_send, udp_sink_on};

#[test]
fn tbf_limits_udp_through_relay() {
    let l = line3("tbf_udp");
    let shaped = "20mbit";
    l.dst_link.tbf_a(shaped, 50).unwrap();
    let limit = parse_rate(shaped).unwrap() as f64;
    measure_with_retries("tbf rate", 3, |_| {
        let sock = l.dst.run(|| UdpSocket::bind("10.0.2.2:0").unwrap());
        let addr = sock.local_addr().unwrap();
        let sink = l.dst.run_bg(move || {
            udp_sink_on(
                sock,
                Duration::from_millis(300),
                Duration::from_secs(3),
                None,
            )
            .unwrap()
        });
        let sent = l.src.run(move || {
            udp_send(&UdpSendConfig {
                rate_bps: Some(40_000_000),
                duration: Duration::from_millis(600),
                ..UdpSendConfig::new(addr)
            })
            .unwrap()
        });
        let got = sink.join().unwrap();
        eprintln!("sent {sent:?}\nreceived {got:?}");
        let ratio = got.throughput_bps() / limit;
        // IP bytes at the sink vs tbf's rate, which also counts the 14-byte Ethernet header.
        if !(0.8..1.1).contains(&ratio) {
            return Err(format!("{} bit/s at dst", got.throughput_bps()));
        }
        if got.lost <= sent.packets / 4 {
            return Err(format!("too few lost: {got:?} of {sent:?}"));
        }
        Ok(())
    });
}
