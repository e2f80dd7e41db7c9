//! ESP through a real NAT (RFC 3948 UDP encapsulation), on the real kernel:
//! src -- A -- NAT -- B -- dst. A and B encrypt in transport mode with manual keys and
//! `encap = "udp"`; the NAT namespace masquerades A's side behind 198.51.100.1, as a home
//! router does. Traffic both ways is checked byte for byte, and every packet arriving at B
//! from the NAT is decoded: UDP 4500 from the NAT's address, carrying ESP. Needs root.

mod support;

use relay_svc_crypto::Cipher;
use relay_testbed::{Link, Node, Testbed};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

/// The NAT's public address, all that B ever sees of A's site.
const PUBLIC: &str = "198.51.100.1";

struct NatLine {
    _tb: Testbed,
    src: Node,
    a: Node,
    nat: Node,
    b: Node,
    dst: Node,
    /// NAT -- B: the public side.
    public: Link,
}

/// src 10.0.1.1 -- (10.0.1.2) A (10.0.2.1) -- (10.0.2.2) NAT (198.51.100.1) --
/// (198.51.100.2) B (10.0.3.1) -- dst 10.0.3.2. B has no route to 10.0.1.0/24: only the
/// NAT's address is reachable from its side.
fn nat_line(name: &str) -> NatLine {
    let tb = Testbed::new(name);
    let src = tb.node("src");
    let a = tb.node("a");
    let nat = tb.node("nat");
    let b = tb.node("b");
    let dst = tb.node("dst");
    for n in [&a, &nat, &b] {
        n.forwarding(true);
    }
    tb.link(&src, "10.0.1.1/24", &a, "10.0.1.2/24");
    tb.link(&a, "10.0.2.1/24", &nat, "10.0.2.2/24");
    let public = tb.link(&nat, &format!("{PUBLIC}/24"), &b, "198.51.100.2/24");
    tb.link(&b, "10.0.3.1/24", &dst, "10.0.3.2/24");
    src.ip(&["route", "add", "default", "via", "10.0.1.2"]);
    a.ip(&["route", "add", "default", "via", "10.0.2.2"]);
    nat.route("10.0.1.0/24", "10.0.2.1");
    nat.route("10.0.3.0/24", "198.51.100.2");
    b.ip(&["route", "add", "default", "via", PUBLIC]);
    dst.ip(&["route", "add", "default", "via", "10.0.3.1"]);
    let out = nat.exec(&[
        "iptables",
        "-t",
        "nat",
        "-A",
        "POSTROUTING",
        "-o",
        &public.a_if,
        "-s",
        "10.0.1.0/24",
        "-j",
        "MASQUERADE",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    NatLine {
        _tb: tb,
        src,
        a,
        nat,
        b,
        dst,
        public,
    }
}

/// A relay's configuration: encrypt what goes from `home` to `to` in UDP, decrypt ESP in
/// UDP arriving for `home` from `peer`.
fn config(
    cipher: &str,
    out: (u32, &str),
    inb: (u32, &str),
    home: &str,
    to: &str,
    peer: &str,
) -> String {
    format!(
        r#"
[[queue]]
num = 0
hook = "forward"
match = "-s {home} -d {to}"
services = ["enc"]

[[queue]]
num = 1
hook = "prerouting"
match = "-p udp --dport 4500 -d {home}"
services = ["dec"]

[service.enc]
kind = "encrypt"
cipher = "{cipher}"
spi = {}
key_file = "{}"
encap = "udp"

[service.dec]
kind = "decrypt"
[[service.dec.sa]]
spi = {}
cipher = "{cipher}"
key_file = "{}"
peer = "{peer}"
"#,
        out.0, out.1, inb.0, inb.1
    )
}

/// Every IPv4 packet arriving on an interface while it runs (an AF_PACKET socket).
struct Capture {
    packets: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Capture {
    fn start(node: &Node, ifname: &str) -> Capture {
        let fd = ipv4_capture_socket(node, ifname);
        let packets = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (packets.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !s.load(Ordering::Relaxed) {
                let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                // SAFETY: the buffers outlive the call.
                let n = unsafe {
                    libc::recvfrom(
                        fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                        &mut from as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                        &mut len,
                    )
                };
                let Ok(n) = usize::try_from(n) else { continue };
                if from.sll_pkttype != libc::PACKET_OUTGOING {
                    p.lock().unwrap().push(buf[..n].to_vec());
                }
            }
        });
        Capture {
            packets,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.packets.lock().unwrap())
    }
}

/// `n` datagrams of distinct content from src to dst's echo server and back: every one
/// returns exactly as sent; dst sees them from the NAT's address.
fn udp_echo(l: &NatLine, n: u32) {
    let server = l.dst.run(|| UdpSocket::bind("10.0.3.2:7000").unwrap());
    server
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 2000];
        let mut peers = Vec::new();
        for _ in 0..n {
            let Ok((k, from)) = server.recv_from(&mut buf) else {
                break;
            };
            peers.push(from.ip().to_string());
            server.send_to(&buf[..k], from).unwrap();
        }
        peers
    });
    let lost = l.src.run(move || {
        let s = UdpSocket::bind("10.0.1.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut bad = Vec::new();
        let mut buf = [0u8; 2000];
        for i in 0..n {
            let len = 100 + (i as usize * 37) % 1300;
            let p: Vec<u8> = (0..len).map(|j| (j as u32 * 7 + i) as u8).collect();
            s.send_to(&p, "10.0.3.2:7000").unwrap();
            match s.recv_from(&mut buf) {
                Ok((k, _)) if buf[..k] == p[..] => {}
                // One lost is enough to fail (without waiting for each of the rest).
                _ => {
                    bad.push(i);
                    break;
                }
            }
        }
        bad
    });
    assert!(lost.is_empty(), "datagrams not echoed intact: {lost:?}");
    let peers = echo.join().unwrap();
    assert_eq!(peers.len(), n as usize);
    assert!(
        peers.iter().all(|p| p == PUBLIC),
        "dst saw other sources than the NAT: {peers:?}"
    );
}

#[test]
fn transport_mode_through_a_masquerading_nat() {
    let cipher = "aes-128-gcm";
    let l = nat_line("natt");
    let keys = key_dir("natt-keys");
    let (a2b, b2a) = (keys.0.join("a2b.key"), keys.0.join("b2a.key"));
    for k in [&a2b, &b2a] {
        relay_svc_crypto::keygen(Cipher::from_name(cipher).unwrap(), k).unwrap();
    }
    let (a2b, b2a) = (a2b.display().to_string(), b2a.display().to_string());
    let a = Relayd::start(
        &l.a,
        &config(
            cipher,
            (0x1001, &a2b),
            (0x2001, &b2a),
            "10.0.1.0/24",
            "10.0.3.0/24",
            "10.0.3.0/24",
        ),
    );
    let b = Relayd::start(
        &l.b,
        &config(
            cipher,
            (0x2001, &b2a),
            (0x1001, &a2b),
            "10.0.3.0/24",
            PUBLIC,
            PUBLIC,
        ),
    );
    let cap = Capture::start(&l.b, &l.public.b_if);
    assert!(
        l.src.ping("10.0.3.2"),
        "ping through the NAT failed\n{}\n{}",
        a.log(),
        b.log()
    );
    udp_echo(&l, 300);
    // TCP both ways (data one way, ACKs back), its checksums fixed after the NAT.
    assert_tcp_intact(
        &l.src,
        &l.dst,
        addr("10.0.3.2:7001"),
        4 << 20,
        "TCP through the NAT",
    );
    let wire = cap.finish();
    // The wire between the NAT and B: UDP from the NAT's address, port 4500 to 4500
    // (masquerading keeps a free port), each carrying ESP of A's SA.
    assert!(wire.len() > 300, "{} packets captured", wire.len());
    for p in &wire {
        assert_eq!(p[9], 17, "not UDP: {:02x?}", &p[..p.len().min(40)]);
        assert_eq!(&p[12..16], &[198, 51, 100, 1], "source not the NAT's");
        let ihl = (p[0] & 0x0f) as usize * 4;
        let u = &p[ihl..];
        let (sport, dport) = (
            u16::from_be_bytes([u[0], u[1]]),
            u16::from_be_bytes([u[2], u[3]]),
        );
        assert_eq!((sport, dport), (4500, 4500));
        assert_eq!(
            u16::from_be_bytes([u[6], u[7]]),
            0,
            "UDP checksum 0 (RFC 3948)"
        );
        let spi = u32::from_be_bytes(u[8..12].try_into().unwrap());
        assert_eq!(spi, 0x1001, "ESP of A's SA right after the UDP header");
    }
    let dec_b = b.counters("dec");
    let dec_a = a.counters("dec");
    for (who, c) in [("B", &dec_b), ("A", &dec_a)] {
        assert!(c["decrypted"] > 300, "{who}: {c:?}");
        for (k, v) in c.iter() {
            if k.starts_with("dropped_") {
                assert_eq!(*v, 0, "{who}: {k}: {c:?}");
            }
        }
    }
    eprintln!(
        "natt: {} packets on the public wire, all ESP in UDP 4500; decrypted A {} B {}",
        wire.len(),
        dec_a["decrypted"],
        dec_b["decrypted"]
    );
}

/// A relay pair's IKEv2 connection in transport mode, A behind the NAT: A's selectors name
/// its private subnet, but its packets reach B from the NAT's address (RFC 7296 2.23.1),
/// which B's decrypt must take (IKE saw A there) without opening the SA to other sources.
fn ike_config(local: &str, remote: &str, home: &str, to: &str, psk: &str, start: bool) -> String {
    format!(
        r#"
[ike.peer]
local = "{local}"
remote = "{remote}"
local_id = "{me}"
remote_id = "{them}"
psk_file = "{psk}"
proposals = ["aes128gcm16-prfsha256-x25519"]
esp_proposals = ["aes128gcm16"]
local_ts = ["{home}"]
remote_ts = ["{to}"]
mode = "transport"
start = {start}

[[queue]]
num = 0
hook = "forward"
match = "-s {home} -d {to_or_nat}"
services = ["enc"]

[[queue]]
num = 1
hook = "prerouting"
match = "-p udp --dport 4500 -d {home}"
services = ["dec"]

[service.enc]
kind = "encrypt"
ike = "peer"

[service.dec]
kind = "decrypt"
ike = ["peer"]
"#,
        // B answers the NAT's address: that is where A's traffic came from.
        to_or_nat = if start { to } else { PUBLIC },
        // Behind a NAT addresses do not identify: names do.
        me = if start { "@a.example" } else { "@b.example" },
        them = if start { "@b.example" } else { "@a.example" },
    )
}

#[test]
fn ike_transport_mode_through_a_masquerading_nat() {
    let l = nat_line("nattike");
    // A's own address goes behind the NAT too: its IKE comes from the NAT's address.
    let out = l.nat.exec(&[
        "iptables",
        "-t",
        "nat",
        "-A",
        "POSTROUTING",
        "-o",
        &l.public.a_if,
        "-s",
        "10.0.2.0/24",
        "-j",
        "MASQUERADE",
    ]);
    assert!(out.status.success());
    let keys = key_dir("nattike-keys");
    let psk = keys.0.join("peer.psk");
    write_psk(&psk, "a pre-shared key of the NAT test, long enough");
    let psk = psk.display().to_string();
    let b = Relayd::start(
        &l.b,
        &ike_config(
            "198.51.100.2",
            PUBLIC,
            "10.0.3.0/24",
            "10.0.1.0/24",
            &psk,
            false,
        ),
    );
    let a = Relayd::start(
        &l.a,
        &ike_config(
            "10.0.2.1",
            "198.51.100.2",
            "10.0.1.0/24",
            "10.0.3.0/24",
            &psk,
            true,
        ),
    );
    wait_ike_pair(&a, &b);
    assert!(
        b.status().ike.first().is_some_and(|i| i.nat),
        "B did not see the NAT"
    );
    udp_echo(&l, 200);
    let dec_b = b.counters("dec");
    assert!(dec_b["decrypted"] >= 200, "B: {dec_b:?}");
    assert_eq!(dec_b["dropped_outside_ts"], 0, "B: {dec_b:?}");
    assert!(a.counters("dec")["decrypted"] >= 200);
}
