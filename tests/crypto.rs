//! ESP between two relays on the real kernel: src -- A -- B -- dst, A and B each encrypting
//! what they send towards the other and decrypting what arrives. Needs root.

mod support;

use relay_svc_crypto::{Cipher, SaCrypto};
use relay_testbed::line4;
use std::net::UdpSocket;
use std::time::Duration;
use support::*;

fn keys(dir: &TempDir, cipher: Cipher) -> (String, String) {
    let a2b = dir.0.join("a2b.key");
    let b2a = dir.0.join("b2a.key");
    for k in [&a2b, &b2a] {
        relay_svc_crypto::keygen(cipher, k).unwrap();
    }
    (a2b.display().to_string(), b2a.display().to_string())
}

/// Starts relay A (site 10.0.1.0/24) and relay B (site 10.0.3.0/24), each encrypting
/// towards the other and decrypting what the other sends, in transport mode.
fn start_pair(l: &relay_testbed::Line4, cipher: &str, a2b: &str, b2a: &str) -> (Relayd, Relayd) {
    let a = Relayd::start(
        &l.comp,
        &side_a(cipher, (0x1001, a2b), &[(0x2001, b2a)], None),
    );
    let b = Relayd::start(
        &l.decomp,
        &side_b(cipher, (0x2001, b2a), &[(0x1001, a2b)], None),
    );
    (a, b)
}

/// Relay A's configuration: encrypt with `out` (SPI, key file), accept the SAs `ins`;
/// tunnel mode when `tunnel` is set.
fn side_a(cipher: &str, out: (u32, &str), ins: &[(u32, &str)], tunnel: Option<()>) -> String {
    let t = tunnel.map(|_| ("10.0.2.1", "10.0.2.2"));
    relay_config(cipher, out, ins, "10.0.3.0/24", "10.0.1.0/24", t)
}

/// Relay B's configuration, the mirror of [`side_a`].
fn side_b(cipher: &str, out: (u32, &str), ins: &[(u32, &str)], tunnel: Option<()>) -> String {
    let t = tunnel.map(|_| ("10.0.2.2", "10.0.2.1"));
    relay_config(cipher, out, ins, "10.0.1.0/24", "10.0.3.0/24", t)
}

/// One relay's configuration: encrypt what goes from site `home` to site `to`, decrypt
/// ESP arriving for it. `tunnel` = (this relay, the peer) selects tunnel mode, in which
/// the decrypting SAs accept only the peer as outer source.
fn relay_config(
    cipher: &str,
    (out_spi, out_key): (u32, &str),
    ins: &[(u32, &str)],
    to: &str,
    home: &str,
    tunnel: Option<(&str, &str)>,
) -> String {
    let sa_mode = match tunnel {
        Some((_, remote)) => format!("mode = \"tunnel\"\npeer = \"{remote}\"\n"),
        None => String::new(),
    };
    let sas: String = ins
        .iter()
        .map(|(spi, key)| {
            format!(
                "[[service.dec.sa]]\nspi = {spi}\ncipher = \"{cipher}\"\nkey_file = \"{key}\"\n{sa_mode}"
            )
        })
        .collect();
    let (queues, mode) = match tunnel {
        // Transport: encrypt where forwarding happens; decrypt before routing, because
        // forwarding checks the egress MTU before the FORWARD hook, and the ESP packet is
        // larger than what it carries.
        None => (
            format!(
                r#"
[[queue]]
num = 0
hook = "forward"
match = "-d {to} ! -p esp"
services = ["enc"]

[[queue]]
num = 1
hook = "prerouting"
match = "-p esp -d {home}"
services = ["dec"]
"#
            ),
            String::new(),
        ),
        // Tunnel: both before routing (the destination changes) and before conntrack.
        Some((local, remote)) => (
            format!(
                r#"
[[queue]]
num = 0
table = "raw"
hook = "prerouting"
match = "-s {home} -d {to}"
services = ["enc"]

[[queue]]
num = 1
table = "raw"
hook = "prerouting"
match = "-p esp -d {local}"
services = ["dec"]
"#
            ),
            format!("mode = \"tunnel\"\nlocal = \"{local}\"\nremote = \"{remote}\"\n"),
        ),
    };
    format!(
        r#"{queues}
[service.enc]
kind = "encrypt"
cipher = "{cipher}"
spi = {out_spi}
key_file = "{out_key}"
{mode}
[service.dec]
kind = "decrypt"
{sas}"#
    )
}

/// Counts packets arriving on `node`'s interface `ifname` that match `what` (iptables
/// match words), from the moment of the call, under the name `tag` ([`read_count`]).
fn count_arrivals(node: &relay_testbed::Node, ifname: &str, what: &[&str], tag: &str) {
    count_arrivals_with("iptables", node, ifname, what, tag);
}

/// The packet count of the counting rule named `tag`.
fn read_count(node: &relay_testbed::Node, tag: &str) -> u64 {
    read_count_with("iptables", node, tag)
}

/// Nothing but ESP crossed the middle link into B since [`watch_middle`].
fn assert_only_esp(l: &relay_testbed::Line4, what: &str) {
    let clear = read_count(&l.decomp, "clear");
    assert_eq!(clear, 0, "{what}: packets crossed the middle link in clear");
}

/// Starts counting what arrives at B over the middle link that is not ESP.
fn watch_middle(l: &relay_testbed::Line4) {
    count_arrivals(&l.decomp, &l.links[1].b_if, &["!", "-p", "esp"], "clear");
}

/// 200 numbered UDP datagrams from host A to host B arrive, in order and whole.
fn udp_in_order(l: &relay_testbed::Line4, port: u16) -> bool {
    let rx = l
        .dst
        .run(move || UdpSocket::bind(("10.0.3.2", port)).unwrap());
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 2000];
        (0..200u32)
            .map(|i| {
                let (n, _) = rx.recv_from(&mut buf).unwrap();
                (u32::from_be_bytes(buf[..4].try_into().unwrap()) == i, n)
            })
            .all(|(ok, n)| ok && n == 1200)
    });
    l.src.run(move || {
        let s = UdpSocket::bind("10.0.1.1:0").unwrap();
        for i in 0..200u32 {
            let mut p = vec![0x5au8; 1200];
            p[..4].copy_from_slice(&i.to_be_bytes());
            s.send_to(&p, ("10.0.3.2", port)).unwrap();
            std::thread::sleep(Duration::from_micros(300));
        }
    });
    receiver.join().unwrap()
}

/// [`assert_tcp_intact`] from host A to host B (10.0.3.2) on `port`.
fn assert_sites_tcp_intact(l: &relay_testbed::Line4, port: u16, bytes: u64, what: &str) {
    let to = addr(&format!("10.0.3.2:{port}"));
    assert_tcp_intact(&l.src, &l.dst, to, bytes, what);
}

#[test]
fn esp_between_two_relays_for_every_cipher() {
    for (cipher, mb) in [("aes-128-gcm", 100), ("aes-256-cbc-hmac-sha256", 20)] {
        let l = line4(&format!("esp-{}", &cipher[..7]));
        let dir = key_dir("esp-keys");
        let (a2b, b2a) = keys(&dir, Cipher::from_name(cipher).unwrap());
        // The middle link keeps its 1500 bytes: relayd clamps the TCP MSS so that the
        // ESP packets fit it, as a router in front of a tunnel does.
        let (a, b) = start_pair(&l, cipher, &a2b, &b2a);
        watch_middle(&l);
        assert!(
            l.src.ping("10.0.3.2"),
            "{cipher}: ping through ESP failed\n{}\n{}",
            a.log(),
            b.log()
        );
        assert!(
            udp_in_order(&l, 5000),
            "{cipher}: UDP lost, reordered or changed"
        );
        assert_sites_tcp_intact(&l, 6000, mb << 20, cipher);
        assert_only_esp(&l, cipher);
        let ac = a.counters("enc");
        let bc = b.counters("dec");
        assert!(ac["encrypted"] > 1000, "{ac:?}");
        assert_eq!(bc["decrypted"], ac["encrypted"], "{bc:?} vs {ac:?}");
        assert_eq!(
            bc["dropped_auth_failed"] + bc["dropped_replayed"],
            0,
            "{bc:?}"
        );
        assert_eq!(
            ac["dropped_too_big"], 0,
            "the MSS clamp kept TCP within the path: {ac:?}"
        );
        let rules = iptables_save(&l.comp);
        assert!(rules.contains("-j TCPMSS --set-mss"), "{rules}");
        assert!(!a.status().queues[0].fail_open, "encryption fails closed");
    }
}

#[test]
fn esp_tunnel_mode_hides_the_inner_addresses() {
    let cipher = "aes-256-gcm";
    let l = line4("esp-tunnel");
    // The encrypting relay turns arriving packets into packets from itself, before routing.
    for n in [&l.comp, &l.decomp] {
        n.sysctl("net.ipv4.conf.all.accept_local", "1");
    }
    let dir = key_dir("esp-tunnel");
    let (a2b, b2a) = keys(&dir, Cipher::from_name(cipher).unwrap());
    let a = Relayd::start(
        &l.comp,
        &side_a(cipher, (0x1001, &a2b), &[(0x2001, &b2a)], Some(())),
    );
    let b = Relayd::start(
        &l.decomp,
        &side_b(cipher, (0x2001, &b2a), &[(0x1001, &a2b)], Some(())),
    );
    watch_middle(&l);
    // Count ESP between the relays themselves: the outer header of every packet.
    count_arrivals(
        &l.decomp,
        &l.links[1].b_if,
        &["-s", "10.0.2.1", "-d", "10.0.2.2", "-p", "esp"],
        "outer",
    );
    assert!(
        l.src.ping("10.0.3.2"),
        "tunnel ping failed\n{}\n{}",
        a.log(),
        b.log()
    );
    assert!(udp_in_order(&l, 5001), "UDP through the tunnel");
    assert_sites_tcp_intact(&l, 6001, 10 << 20, "tunnel");
    assert_only_esp(&l, "tunnel");
    let encrypted = assert_all_decrypted(&a, &b);
    let outer = read_count(&l.decomp, "outer");
    assert!(
        outer >= encrypted && encrypted > 1000,
        "outer {outer}, encrypted {encrypted}"
    );
    // ESP for B's SA, with a valid ICV, but from host A rather than relay A: B drops it
    // before any cryptographic work.
    let key = relay_svc_crypto::load_key(std::path::Path::new(&a2b), Cipher::Aes256Gcm).unwrap();
    let sa = SaCrypto::new(Cipher::Aes256Gcm, &key);
    let mut p = vec![
        0x45, 0, 0, 0, 0, 9, 0, 0, 64, 50, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
    ];
    let mut esp = vec![0u8; 8 + 8 + 12 + 16];
    esp[..4].copy_from_slice(&0x1001u32.to_be_bytes());
    esp[4..8].copy_from_slice(&1_000_000u32.to_be_bytes());
    esp[27] = 4;
    sa.seal(1_000_000, false, &mut esp).unwrap();
    p.extend_from_slice(&esp);
    send_raw(&l.src, vec![p]);
    assert!(
        wait_for(
            Duration::from_secs(5),
            || b.counters("dec")["dropped_unknown_peer"] == 1
        ),
        "{:?}",
        b.counters("dec")
    );
    let bc = b.counters("dec");
    assert_eq!(
        bc["dropped_auth_failed"] + bc["dropped_malformed"],
        0,
        "{bc:?}"
    );
}

/// Waits (up to 2 s: the last packets may still be on the wire) until B has decrypted
/// everything A encrypted, and returns that number; panics with both counts otherwise.
fn assert_all_decrypted(a: &Relayd, b: &Relayd) -> u64 {
    let (mut enc, mut dec) = (0, 0);
    let settled = wait_for(Duration::from_secs(2), || {
        enc = a.counters("enc")["encrypted"];
        dec = b.counters("dec")["decrypted"];
        enc == dec
    });
    assert!(settled, "A encrypted {enc}, B decrypted {dec}");
    enc
}

/// Relay configuration for IPv6 sites joined by an IPv4 ESP tunnel (6in4): the encrypt
/// queue is an ip6tables one, the decrypt queue an iptables one.
fn six_in_four(
    cipher: &str,
    out: (u32, &str),
    ins: &[(u32, &str)],
    sites: (&str, &str),
    tunnel: (&str, &str),
) -> String {
    let (home, to) = sites;
    relay_config(cipher, out, ins, to, home, Some(tunnel)).replacen(
        "[[queue]]\nnum = 0\n",
        "[[queue]]\nnum = 0\nfamily = \"ipv6\"\n",
        1,
    )
}

#[test]
fn ipv6_sites_through_an_ipv4_tunnel() {
    let cipher = "aes-128-gcm";
    let l = line4("esp-6in4");
    let dir = key_dir("esp-6in4");
    let (a2b, b2a) = keys(&dir, Cipher::Aes128Gcm);
    let a = Relayd::start(
        &l.comp,
        &six_in_four(
            cipher,
            (0x1001, &a2b),
            &[(0x2001, &b2a)],
            ("fd00:1::/64", "fd00:3::/64"),
            ("10.0.2.1", "10.0.2.2"),
        ),
    );
    let b = Relayd::start(
        &l.decomp,
        &six_in_four(
            cipher,
            (0x2001, &b2a),
            &[(0x1001, &a2b)],
            ("fd00:3::/64", "fd00:1::/64"),
            ("10.0.2.2", "10.0.2.1"),
        ),
    );
    // Customer IPv6 arriving at B over the middle link, which should be none: it all
    // travels inside IPv4 ESP.
    count_arrivals_with(
        "ip6tables",
        &l.decomp,
        &l.links[1].b_if,
        &["-s", "fd00:1::/64"],
        "clear6",
    );
    count_arrivals(
        &l.decomp,
        &l.links[1].b_if,
        &["-s", "10.0.2.1", "-p", "esp"],
        "outer",
    );

    assert!(
        l.src.ping("fd00:3::2"),
        "ping6 through the 6in4 tunnel\n{}\n{}",
        a.log(),
        b.log()
    );
    let to = addr("[fd00:3::2]:6003");
    assert_tcp_intact(&l.src, &l.dst, to, 8 << 20, "IPv6 through the tunnel");

    // The data direction carries the 8 MiB; the other only ACKs, whose number depends on
    // how the receiver's GRO and delayed ACKs fall (under load, fewer than 1,000).
    for (r, least) in [(&a, 1000), (&b, 100)] {
        let e = r.assert_all_resent("enc", "encrypted");
        assert!(e["encrypted"] > least, "{e:?}");
        r.assert_all_resent("dec", "decrypted");
    }
    let encrypted = assert_all_decrypted(&a, &b);
    assert!(read_count(&l.decomp, "outer") >= encrypted);
    assert_eq!(
        read_count_with("ip6tables", &l.decomp, "clear6"),
        0,
        "IPv6 crossed the middle link outside ESP"
    );
}

#[test]
fn packets_too_big_for_the_path_get_icmp_and_tcp_is_clamped() {
    let l = line4("esp-mtu");
    let dir = key_dir("esp-mtu");
    let (a2b, b2a) = keys(&dir, Cipher::Aes128Gcm);
    let (a, _b) = start_pair(&l, "aes-128-gcm", &a2b, &b2a);
    // A full-size DF packet cannot fit once encrypted: the sender learns the size that
    // does (1500 less ESP's 40 bytes here) and the next probe of that size passes.
    let sh = |cmd: &str| String::from_utf8_lossy(&l.src.sh(cmd).stdout).to_string();
    let big = sh("ping -c 2 -W 1 -M do -s 1472 10.0.3.2 2>&1");
    assert!(
        big.contains("mtu = 1466") || big.contains("mtu=1466"),
        "{big}"
    );
    assert!(a.counters("enc")["icmp_too_big_sent"] >= 1);
    let fits = sh("ping -c 1 -W 2 -M do -s 1438 10.0.3.2 2>&1");
    assert!(fits.contains(" 0% packet loss"), "{fits}");
    // TCP never needs that: its SYN carries the clamped MSS.
    let before = a.counters("enc")["dropped_too_big"];
    assert_sites_tcp_intact(&l, 6002, 4 << 20, "clamped");
    assert_eq!(a.counters("enc")["dropped_too_big"], before);
}

#[test]
fn key_rotation_by_sighup_loses_no_packet() {
    let cipher = "aes-128-gcm";
    let l = line4("esp-rotate");
    let dir = key_dir("esp-rotate");
    let (a2b, b2a) = keys(&dir, Cipher::Aes128Gcm);
    let new_key = dir.0.join("a2b-new.key").display().to_string();
    relay_svc_crypto::keygen(Cipher::Aes128Gcm, std::path::Path::new(&new_key)).unwrap();
    let (a, b) = start_pair(&l, cipher, &a2b, &b2a);
    count_arrivals(
        &l.decomp,
        &l.links[1].b_if,
        &["-p", "esp", "-m", "esp", "--espspi", "0x1002"],
        "new-spi",
    );
    let udp = UdpFlow::start(&l.src, &l.dst, addr("10.0.3.2:5002"), Some(400), 600, 7.0);
    let tcp = {
        let (src, dst) = (l.src.clone(), l.dst.clone());
        std::thread::spawn(move || tcp_transfer_digest(&src, &dst, addr("10.0.3.2:6003"), 40 << 20))
    };
    std::thread::sleep(Duration::from_secs(1));
    // 1. B learns the new SA beside the old one; 2. A switches to it; 3. B drops the old.
    b.rewrite(&side_b(
        cipher,
        (0x2001, &b2a),
        &[(0x1001, &a2b), (0x1002, &new_key)],
        None,
    ));
    reload(&b, 1);
    std::thread::sleep(Duration::from_secs(1));
    a.rewrite(&side_a(cipher, (0x1002, &new_key), &[(0x2001, &b2a)], None));
    reload(&a, 1);
    std::thread::sleep(Duration::from_secs(1));
    b.rewrite(&side_b(cipher, (0x2001, &b2a), &[(0x1002, &new_key)], None));
    reload(&b, 2);
    let (sent, got) = udp.finish();
    assert!(sent.packets > 2000);
    assert_eq!(
        got.packets, sent.packets,
        "UDP packets lost across the key rotation"
    );
    let (hs, hr, n) = tcp.join().unwrap();
    assert_eq!(
        (n, hs),
        (40 << 20, hr),
        "TCP transfer damaged by the rotation"
    );
    let bc = b.counters("dec");
    let lost = bc["dropped_unknown_spi"]
        + bc["dropped_auth_failed"]
        + bc["dropped_replayed"]
        + bc["dropped_too_old"];
    assert_eq!(lost, 0, "{bc:?}");
    let new_spi = read_count(&l.decomp, "new-spi");
    assert!(
        new_spi > 1000,
        "the new SA carried the traffic after the switch ({new_spi})"
    );
    // A reload that keeps an SA keeps its sequence numbers: no replay drops after it.
    reload(&a, 2);
    assert!(l.src.ping("10.0.3.2"));
    assert_eq!(b.counters("dec")["dropped_replayed"], 0);
}

#[test]
fn tampered_and_replayed_esp_is_dropped_and_counted() {
    let l = line4("esp-attack");
    let dir = key_dir("esp-attack");
    let (a2b, b2a) = keys(&dir, Cipher::Aes128Gcm);
    let (_a, b) = start_pair(&l, "aes-128-gcm", &a2b, &b2a);
    assert!(l.src.ping("10.0.3.2"));
    // Forge ESP packets with the real key, as an attacker on the path who recorded one
    // would replay it: sequence number 1 was used by the ping already.
    let key = relay_svc_crypto::load_key(std::path::Path::new(&a2b), Cipher::Aes128Gcm).unwrap();
    let sa = SaCrypto::new(Cipher::Aes128Gcm, &key);
    let esp_packet = |seq: u32, tamper: bool| {
        let mut p = vec![
            0x45, 0, 0, 0, 0, 9, 0, 0, 64, 50, 0, 0, 10, 0, 1, 1, 10, 0, 3, 2,
        ];
        let mut esp = vec![0u8; 8 + 8 + 12 + 16];
        esp[..4].copy_from_slice(&0x1001u32.to_be_bytes());
        esp[4..8].copy_from_slice(&seq.to_be_bytes());
        esp[16..26].copy_from_slice(b"0123456789");
        esp[26] = 0; // pad length
        esp[27] = 17;
        sa.seal(seq as u64, false, &mut esp).unwrap();
        if tamper {
            esp[20] ^= 1;
        }
        p.extend_from_slice(&esp);
        let len = p.len() as u16;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p
    };
    send_raw(
        &l.src,
        vec![esp_packet(1, false), esp_packet(1_000_000, true)],
    );
    assert!(
        wait_for(Duration::from_secs(5), || {
            let c = b.counters("dec");
            c["dropped_replayed"] == 1 && c["dropped_auth_failed"] == 1
        }),
        "{:?}\n{}",
        b.counters("dec"),
        b.log()
    );
    assert!(
        l.src.ping("10.0.3.2"),
        "a tampered packet must not disturb the SA"
    );
}

/// A tunnel-mode ESP packet from relay A (10.0.2.1) to relay B (10.0.2.2) for SPI 0x1001
/// and `seq`, sealed with the SA's real key, carrying a UDP datagram 10.0.1.1:4000 ->
/// `inner_dst`:`port` with `payload`: what a peer holding the key can make B decrypt.
fn tunnel_esp(sa: &SaCrypto, seq: u32, inner_dst: [u8; 4], port: u16, payload: &[u8]) -> Vec<u8> {
    let ip = |len: usize, proto: u8, src: [u8; 4], dst: [u8; 4]| {
        let mut h = vec![0x45, 0, 0, 0, 0, 7, 0x40, 0, 64, proto, 0, 0];
        h[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        relay_core::wire::Ipv4Packet::new_unchecked(&mut h[..]).fill_checksum();
        h
    };
    let mut inner = ip(28 + payload.len(), 17, [10, 0, 1, 1], inner_dst);
    inner.extend_from_slice(&4000u16.to_be_bytes());
    inner.extend_from_slice(&port.to_be_bytes());
    inner.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    inner.extend_from_slice(&[0, 0]); // no UDP checksum
    inner.extend_from_slice(payload);
    // ESP: SPI, sequence number, the explicit IV, then inner packet, padding 1, 2, ...
    // to a whole number of 4-byte blocks with the trailer, pad length, next header 4.
    let mut esp = 0x1001u32.to_be_bytes().to_vec();
    esp.extend_from_slice(&seq.to_be_bytes());
    esp.extend_from_slice(&[0; 8]);
    esp.extend_from_slice(&inner);
    let pad = (4 - (inner.len() + 2) % 4) % 4;
    esp.extend((1..=pad as u8).collect::<Vec<_>>());
    esp.extend_from_slice(&[pad as u8, 4]);
    esp.extend_from_slice(&[0; 16]);
    sa.seal(seq as u64, false, &mut esp).unwrap();
    let mut p = ip(20 + esp.len(), 50, [10, 0, 2, 1], [10, 0, 2, 2]);
    p.extend_from_slice(&esp);
    p
}

/// Issue 24: a `decrypt` on INPUT. A peer holding the key (here: ESP sent from relay A's
/// own address with the real key) aims inner packets at 127.0.0.1 and at B's own
/// addresses, on a port where B has a wildcard-bound UDP socket. An accepted verdict on
/// INPUT delivers locally whatever the inner destination, so before the fix the socket
/// read them all (the honest packet for host B too); now they are dropped and counted,
/// and the honest inner packet is forwarded anew to its host.
#[test]
fn decrypt_on_input_never_delivers_the_inner_packet_locally() {
    inner_packets_never_reach_the_relay("esp-input", "mangle", "input", 1);
}

/// The same before routing, where the kernel routes the accepted inner packet by its own
/// header: to B's other address it would be delivered locally (the relay's addresses
/// reach the services from the datapath's snapshot); the honest one is carried on by
/// the verdict.
#[test]
fn decrypt_before_routing_never_delivers_the_inner_packet_locally() {
    inner_packets_never_reach_the_relay("esp-prerouting", "raw", "prerouting", 0);
}

/// Relay B decrypts on `hook` of `table`; see the two tests above. `forwarded`: how many
/// packets B sends anew (the honest one on INPUT).
fn inner_packets_never_reach_the_relay(tag: &str, table: &str, hook: &str, forwarded: u64) {
    let l = line4(tag);
    let dir = key_dir(tag);
    let (a2b, _) = keys(&dir, Cipher::Aes128Gcm);
    let b = Relayd::start(
        &l.decomp,
        &format!(
            r#"
[[queue]]
num = 1
table = "{table}"
hook = "{hook}"
match = "-p esp -d 10.0.2.2"
services = ["dec"]

[service.dec]
kind = "decrypt"
[[service.dec.sa]]
spi = 0x1001
cipher = "aes-128-gcm"
key_file = "{a2b}"
mode = "tunnel"
peer = "10.0.2.1"
"#
        ),
    );
    let port = 7000;
    // The relay's own listener, bound to every address, and the honest destination's.
    let relay_rx = l
        .decomp
        .run(move || UdpSocket::bind(("0.0.0.0", port)).unwrap());
    let host_rx = l
        .dst
        .run(move || UdpSocket::bind(("10.0.3.2", port)).unwrap());
    for s in [&relay_rx, &host_rx] {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
    }
    let key = relay_svc_crypto::load_key(std::path::Path::new(&a2b), Cipher::Aes128Gcm).unwrap();
    let sa = SaCrypto::new(Cipher::Aes128Gcm, &key);
    send_raw(
        &l.comp,
        vec![
            tunnel_esp(&sa, 1, [127, 0, 0, 1], port, b"to loopback"),
            tunnel_esp(&sa, 2, [10, 0, 2, 2], port, b"to the relay"),
            tunnel_esp(&sa, 3, [10, 0, 3, 1], port, b"to the relay's other side"),
            tunnel_esp(&sa, 4, [10, 0, 3, 2], port, b"honest"),
        ],
    );
    assert!(
        wait_for(Duration::from_secs(5), || b.counters("dec")["decrypted"]
            == 4),
        "{:?}\n{}",
        b.counters("dec"),
        b.log()
    );
    let read = |s: &UdpSocket| {
        let mut got = Vec::new();
        let mut buf = [0u8; 1500];
        while let Ok((n, _)) = s.recv_from(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        got
    };
    assert_eq!(
        read(&relay_rx),
        Vec::<String>::new(),
        "nothing decrypted reached the relay's own socket"
    );
    assert_eq!(
        read(&host_rx),
        ["honest"],
        "the honest inner packet is forwarded"
    );
    let c = b.counters("dec");
    assert_eq!(
        (c["dropped_local_destination"], c["reinjected"]),
        (3, forwarded),
        "{c:?}"
    );
    assert_eq!(
        c["dropped_auth_failed"] + c["dropped_unknown_peer"],
        0,
        "{c:?}"
    );
}
