//! Packets relayd gives back or sends itself skip only the hooks they have crossed: a later
//! queue still sees them. The attack this closes: IPv6 datagrams that an IDS on FORWARD
//! drops, wrapped in MPLS-in-IPv4 towards a relay whose `mpls-decap` re-sends the inner
//! packets from a raw socket; before, the re-sent packets carried a bypass bit that exempted
//! them from every relayd queue and reached the destination. Needs root.

mod support;

use relay_core::wire::{Ipv4Packet, UdpPacket, checksum};
use relay_testbed::{Node, line3};
use std::net::{Ipv6Addr, UdpSocket};
use std::time::{Duration, Instant};
use support::*;

const LABEL: u32 = 100;

/// A UDP/IPv6 packet fd00:1::1:4000 -> fd00:2::2:9000 carrying `payload`.
fn udp6(payload: &[u8]) -> Vec<u8> {
    udp6_to("fd00:2::2".parse().unwrap(), payload)
}

/// A UDP/IPv6 packet fd00:1::1:4000 -> `dst`:9000 carrying `payload`.
fn udp6_to(dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    let src: Ipv6Addr = "fd00:1::1".parse().unwrap();
    let len = 8 + payload.len();
    let mut b = vec![0x60, 0, 0, 0];
    b.extend_from_slice(&(len as u16).to_be_bytes());
    b.extend_from_slice(&[17, 64]);
    b.extend_from_slice(&src.octets());
    b.extend_from_slice(&dst.octets());
    b.extend_from_slice(&4000u16.to_be_bytes());
    b.extend_from_slice(&9000u16.to_be_bytes());
    b.extend_from_slice(&(len as u16).to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(payload);
    let pseudo = checksum::pseudo_v6(src, dst, 17, len as u32);
    UdpPacket::new_unchecked(&mut b[40..]).fill_checksum(pseudo);
    b
}

/// `inner` in MPLS-in-IPv4 (RFC 4023, protocol 137) from 10.0.1.1 to the relay, 10.0.1.2.
fn mpls_in_ip(inner: &[u8]) -> Vec<u8> {
    let total = 20 + 4 + inner.len();
    let mut b = vec![0x45, 0];
    b.extend_from_slice(&(total as u16).to_be_bytes());
    b.extend_from_slice(&[0, 0, 0x40, 0, 64, 137, 0, 0, 10, 0, 1, 1, 10, 0, 1, 2]);
    let entry = (LABEL << 12) | (1 << 8) | 64;
    b.extend_from_slice(&entry.to_be_bytes());
    b.extend_from_slice(inner);
    Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
    b
}

/// Binds [fd00:2::2]:9000 on `dst` and returns a thread that collects payloads until no
/// datagram came for a second.
fn sink(dst: &Node) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    let sock = dst.run(|| UdpSocket::bind("[fd00:2::2]:9000").unwrap());
    std::thread::spawn(move || {
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut got = Vec::new();
        let mut last = Instant::now();
        let mut buf = [0u8; 2048];
        while last.elapsed() < Duration::from_secs(1) {
            if let Ok(n) = sock.recv(&mut buf) {
                got.push(buf[..n].to_vec());
                last = Instant::now();
            }
        }
        got
    })
}

fn count(got: &[Vec<u8>], prefix: &[u8]) -> usize {
    got.iter().filter(|p| p.starts_with(prefix)).count()
}

#[test]
fn decapsulated_packets_still_meet_the_ids_on_forward() {
    decap_meets_the_ids("raw", "prerouting");
}

#[test]
fn packets_an_input_queue_decapsulates_still_meet_the_ids_on_forward() {
    decap_meets_the_ids("mangle", "input");
}

/// The decapsulating queue in `table` at `hook`, the IDS on FORWARD.
fn decap_meets_the_ids(table: &str, hook: &str) {
    let l = line3(&format!("resend-ids-{hook}"));
    let dir = TempDir::new("resend-ids");
    let rules = dir.file(
        "local.rules",
        "drop udp any any -> any 9000 (msg:\"evil over udp\"; content:\"EVIL\"; sid:1;)\n",
    );
    let r = Relayd::start(
        &l.relay,
        &format!(
            r#"
[[queue]]
num = 1
family = "ipv4"
table = "{table}"
hook = "{hook}"
match = "-d 10.0.1.2 -p 137"
services = ["decap"]

[[queue]]
num = 2
family = "ipv6"
hook = "forward"
match = "-i {ingress} -p udp --dport 9000"
services = ["ids"]

[service.decap]
kind = "mpls-decap"
labels = [{LABEL}]
peers = ["10.0.1.1"]

[service.ids]
kind = "ids"
rules = ["{rules}"]
"#,
            ingress = l.src_link.b_if,
            rules = rules.display()
        ),
    );

    // Sent directly, the IDS drops every forbidden datagram and passes the others.
    let rx = sink(&l.dst);
    l.src.run(|| {
        let s = UdpSocket::bind("[fd00:1::1]:4000").unwrap();
        for i in 0..100 {
            s.send_to(format!("EVIL {i}").as_bytes(), "[fd00:2::2]:9000")
                .unwrap();
            s.send_to(format!("GOOD {i}").as_bytes(), "[fd00:2::2]:9000")
                .unwrap();
        }
    });
    let got = rx.join().unwrap();
    assert_eq!(
        (count(&got, b"EVIL"), count(&got, b"GOOD")),
        (0, 100),
        "direct: the IDS drops what its rule matches\n{}",
        r.log()
    );

    // The same datagrams from the decapsulating relay's configured peer, in MPLS-in-IPv4:
    // the decap re-sends them from a raw IPv6 socket, and the IDS on FORWARD still sees
    // every one (from relayd's OUTPUT chain, where the kernel walks them).
    let rx = sink(&l.dst);
    let mut packets = Vec::new();
    for i in 0..100 {
        packets.push(mpls_in_ip(&udp6(format!("EVIL {i}").as_bytes())));
        packets.push(mpls_in_ip(&udp6(format!("GOOD {i}").as_bytes())));
    }
    send_raw(&l.src, packets);
    let got = rx.join().unwrap();
    let decap = r.assert_all_resent("decap", "decapsulated");
    assert_eq!(decap["decapsulated"], 200, "{decap:?}");
    assert_eq!(
        (count(&got, b"EVIL"), count(&got, b"GOOD")),
        (0, 100),
        "decapsulated: re-sent packets must not bypass the IDS on FORWARD\n{}",
        r.log()
    );
    let ids = r.status().queues.into_iter().find(|q| q.num == 2).unwrap();
    assert_eq!(ids.dropped, 200, "{ids:?}");
}

#[test]
fn a_prerouting_repeat_still_meets_a_forward_queue() {
    let l = line3("resend-repeat");
    let r = Relayd::start(
        &l.relay,
        r#"
[[queue]]
num = 0
table = "mangle"
hook = "prerouting"
match = "-p udp"
services = ["m"]

[[queue]]
num = 1
hook = "forward"
match = "-p udp"
services = ["accept"]

[service.m]
kind = "mark"
mark = "0x1"
mask = "0x1"
repeat = true
"#,
    );
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:5002"), 100, 2000, 100);
    assert_eq!(got, sent);
    let st = r.status();
    let q = |n: u16| st.queues.iter().find(|q| q.num == n).unwrap().clone();
    // Queue 0 sees each packet once (the repeat skips PREROUTING), queue 1 sees each too.
    assert_eq!((q(0).packets, q(0).repeated), (sent, sent), "{:?}", q(0));
    assert_eq!(
        q(1).packets,
        sent,
        "FORWARD must still see repeated packets: {:?}",
        q(1)
    );
}

#[test]
fn decapsulated_packets_never_reach_the_relay_itself() {
    // A peer (or whoever forges its address) wraps packets for the relay's loopback and
    // for the relay's own address: re-sent from a raw socket they would arrive from `lo`.
    let l = line3("resend-local");
    let r = Relayd::start(
        &l.relay,
        &format!(
            r#"
[[queue]]
num = 1
family = "ipv4"
table = "raw"
hook = "prerouting"
match = "-d 10.0.1.2 -p 137"
services = ["decap"]

[service.decap]
kind = "mpls-decap"
labels = [{LABEL}]
peers = ["10.0.1.1"]
"#
        ),
    );
    let sock = l.relay.run(|| UdpSocket::bind("[::]:9000").unwrap());
    let mut packets = Vec::new();
    for dst in ["::1", "fd00:2::1", "fd00:1::2"] {
        for i in 0..20 {
            packets.push(mpls_in_ip(&udp6_to(
                dst.parse().unwrap(),
                format!("LOCAL {i}").as_bytes(),
            )));
        }
    }
    // One good one, to know the decap works and to wait for it.
    let rx = sink(&l.dst);
    packets.push(mpls_in_ip(&udp6(b"GOOD")));
    send_raw(&l.src, packets);
    let got = rx.join().unwrap();
    assert_eq!(count(&got, b"GOOD"), 1, "{}", r.log());
    sock.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    assert!(
        sock.recv(&mut buf).is_err(),
        "a decapsulated packet reached a socket on the relay"
    );
    let c = r.counters("decap");
    assert_eq!(c["dropped_local_destination"], 60, "{c:?}");
    assert_eq!(c["reinjected"], 1, "{c:?}");
}
