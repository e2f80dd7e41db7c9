//! The attacker's tests of `decrypt` in tunnel mode: a peer holding the SA's key (or a
//! compromised peer relay) chooses the inner header, and must never reach the relay's own
//! sockets with it, on any hook, in either family.

use super::*;
use relay_core::{Hook, Route};
use std::net::IpAddr;

/// A tunnel SA from 192.0.2.1 to 192.0.2.2 whose key the attacker holds: the encrypting
/// side is the attacker's, the decrypting one the relay's.
fn tunnel(tag: &str) -> (Box<dyn Service>, Box<dyn Service>, Counters) {
    let cipher = Cipher::Aes128Gcm;
    let e = EncryptConfig {
        mode: EspMode::Tunnel,
        local: Some("192.0.2.1".parse().unwrap()),
        remote: Some("192.0.2.2".parse().unwrap()),
        ..enc_config(cipher, key_file(tag, cipher))
    };
    let (enc, dec, _, dc) = pair_with(e, false);
    (enc, dec, dc)
}

/// A UDP datagram to `dst` (port 5000), of `dst`'s family.
fn inner_to(dst: IpAddr) -> Vec<u8> {
    match dst {
        IpAddr::V4(a) => {
            let mut b = udp_packet(20);
            let mut ip = Ipv4Packet::new_unchecked(&mut b[..]);
            ip.set_dst_addr(a);
            ip.fill_checksum();
            b
        }
        IpAddr::V6(a) => {
            let mut b = udp6_packet(20);
            Ipv6Packet::new_unchecked(&mut b[..]).set_dst_addr(a);
            b
        }
    }
}

/// The ESP packet the attacker sends for `inner`.
fn sealed(enc: &mut Box<dyn Service>, inner: &[u8]) -> Vec<u8> {
    let mut p = Packet::from_bytes(inner);
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
    p.data().to_vec()
}

/// The relay's context: its addresses are 192.0.2.2 (the tunnel end), 10.0.2.1 on the
/// site link and that link's broadcast address, fd00:2::1.
fn relay_cx() -> Context {
    let mut c = cx();
    c.set_local_addresses(std::sync::Arc::from(
        ["10.0.2.1", "10.0.2.255", "192.0.2.2", "fd00:2::1"].map(|a| a.parse::<IpAddr>().unwrap()),
    ));
    c
}

/// ESP queued from an IPv4 `hook`.
fn queued(esp: &[u8], hook: Hook) -> Packet {
    let mut q = Packet::from_bytes(esp);
    (q.meta.hook, q.meta.hw_protocol) = (Some(hook), 0x0800);
    q
}

#[test]
fn an_inner_packet_to_the_relay_itself_is_dropped_on_every_hook() {
    let (mut enc, mut dec, dc) = tunnel("attack-local");
    let targets = [
        "127.0.0.1",
        "127.0.0.53",
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.251",
        "169.254.169.254",
        "10.0.2.1",
        "10.0.2.255",
        "192.0.2.2",
        "::1",
        "::",
        "fe80::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.2.1",
        "fd00:2::1",
    ];
    let mut n = 0;
    for hook in Hook::ALL {
        for t in targets {
            let esp = sealed(&mut enc, &inner_to(t.parse().unwrap()));
            let mut q = queued(&esp, hook);
            let mut c = relay_cx();
            assert_eq!(dec.process(&mut q, &mut c), Action::Drop, "{t} on {hook:?}");
            assert!(
                c.outbox().is_empty(),
                "{t} on {hook:?}: nothing sent either"
            );
            n += 1;
        }
    }
    assert_eq!(count(&dc, "dropped_local_destination"), n);
    assert_eq!(count(&dc, "decrypted"), n, "authentic, then refused");
    assert_eq!(count(&dc, "reinjected"), 0);
}

#[test]
fn honest_inner_packets_pass_and_on_input_are_forwarded_anew() {
    let (mut enc, mut dec, dc) = tunnel("attack-honest");
    let orig = inner_to("10.0.3.3".parse().unwrap());
    // Before routing, on FORWARD and after: the verdict carries the inner packet.
    for hook in [
        Hook::Prerouting,
        Hook::Forward,
        Hook::Output,
        Hook::Postrouting,
    ] {
        let mut q = queued(&sealed(&mut enc, &orig), hook);
        let mut c = relay_cx();
        assert_eq!(dec.process(&mut q, &mut c), Action::Continue, "{hook:?}");
        assert_eq!(q.data(), &orig[..], "{hook:?}");
        assert!(c.outbox().is_empty());
    }
    // On INPUT a verdict would deliver it to the relay's sockets whatever its address (a
    // UDP socket bound to 0.0.0.0:5000 would take it): it is forwarded anew instead.
    let mut q = queued(&sealed(&mut enc, &orig), Hook::Input);
    let mut c = relay_cx();
    assert_eq!(dec.process(&mut q, &mut c), Action::Drop, "the ESP packet");
    let out: Vec<_> = c.outbox().iter().collect();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].route, Route::Forward);
    assert_eq!(out[0].destination, "10.0.3.3".parse::<IpAddr>().unwrap());
    let mut want = orig.clone();
    let mut w = Ipv4Packet::new_unchecked(&mut want[..]);
    w.set_ttl(w.ttl() - 1);
    w.fill_checksum();
    assert_eq!(out[0].bytes, &want[..], "TTL less one, as a router would");
    assert_eq!(count(&dc, "decrypted"), 5);
    assert_eq!(count(&dc, "dropped_local_destination"), 0);
}

/// Transport mode keeps the outer addresses, which the kernel routed before the hook:
/// nothing for the peer to choose, so the verdict still carries the payload on INPUT.
#[test]
fn transport_mode_is_unchanged() {
    let cipher = Cipher::Aes128Gcm;
    let (mut enc, mut dec, _, dc) =
        pair_with(enc_config(cipher, key_file("attack-tr", cipher)), false);
    let orig = udp_packet(30);
    let mut p = Packet::from_bytes(&orig);
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
    let mut q = queued(p.data(), Hook::Input);
    assert_eq!(dec.process(&mut q, &mut relay_cx()), Action::Continue);
    assert_eq!(q.data(), &orig[..]);
    assert_eq!(count(&dc, "dropped_local_destination"), 0);
}
