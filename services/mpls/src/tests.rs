//! Byte-exact tests of both encapsulations against the RFC layouts, round trips through
//! the decap, configuration errors, and the QoS table.

use crate::*;
use relay_core::wire::{Ipv4Packet, UdpPacket, checksum};
use relay_core::{Action, Context, Counters, Packet, ServiceConfig};
use std::collections::HashMap;
use std::time::Instant;

/// A UDP/IPv4 packet 10.0.1.1:4000 -> 10.1.2.3:5004, DSCP 34 (AF41), TTL 61, DF set.
fn udp4(payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut b = vec![
        0x45,
        34 << 2,
        0,
        0,
        0x12,
        0x34,
        0x40,
        0,
        61,
        17,
        0,
        0,
        10,
        0,
        1,
        1,
        10,
        1,
        2,
        3,
    ];
    b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    b.extend_from_slice(&4000u16.to_be_bytes());
    b.extend_from_slice(&5004u16.to_be_bytes());
    b.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(payload);
    Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
    let pseudo = checksum::pseudo_v4(
        [10, 0, 1, 1].into(),
        [10, 1, 2, 3].into(),
        17,
        (8 + payload.len()) as u32,
    );
    UdpPacket::new_unchecked(&mut b[20..]).fill_checksum(pseudo);
    b
}

/// A UDP/IPv6 packet fd00:1::1 -> fd00:9::2, traffic class 0xb8 (EF), hop limit 50.
fn udp6(payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0x6b, 0x80, 0, 0];
    b.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    b.extend_from_slice(&[17, 50]);
    b.extend_from_slice(&"fd00:1::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    b.extend_from_slice(&"fd00:9::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    b.extend_from_slice(&4000u16.to_be_bytes());
    b.extend_from_slice(&9000u16.to_be_bytes());
    b.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(payload);
    b
}

const CONFIG: &str = r#"
encap = "ENCAP"
interface = "eth1"
local = "192.0.2.1"
[[vcan]]
name = "video"
match = { dscp = 34 }
label = 100
remote = "192.0.2.2"
rate = "20mbit"
ceil = "50mbit"
[[vcan]]
name = "v6"
match = { dst = "fd00:9::/32" }
label = 101
remote = "192.0.2.3"
rate = "10mbit"
prio = 2
"#;

fn cfg(encap: &str) -> EncapConfig {
    toml::from_str(&CONFIG.replace("ENCAP", encap)).unwrap()
}

/// The encapsulating edge of [`CONFIG`]: the outer source of what it sends.
const PEER: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 0, 2, 1);

/// A decap serving `labels` from [`PEER`].
fn decap(labels: &[u32]) -> DecapConfig {
    DecapConfig {
        labels: labels.to_vec(),
        peers: vec![PEER],
    }
}

fn cx() -> Context {
    Context::new(0, Instant::now())
}

fn counters_map(c: &Counters) -> HashMap<String, u64> {
    c.snapshot().into_iter().map(|(n, _, v)| (n, v)).collect()
}

#[test]
fn mpls_in_ip_is_rfc_4023_byte_for_byte() {
    let inner = udp4(b"0123456789");
    let counters = Counters::new();
    let mut s = cfg("ip")
        .into_factory("e")
        .unwrap()
        .build(&counters, &relay_core::Resources::new());
    let mut p = Packet::from_bytes(&inner);
    assert_eq!(s.process(&mut p, &mut cx()), Action::Continue);
    let total = (inner.len() + 24) as u16;
    let mut want = vec![
        0x45,
        34 << 2, // version/IHL, TOS copied from inner
    ];
    want.extend_from_slice(&total.to_be_bytes());
    want.extend_from_slice(&[0, 1, 0x40, 0]); // ident 1, DF copied
    want.extend_from_slice(&[64, 137, 0, 0]); // TTL 64, protocol 137 (MPLS-in-IP)
    want.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
    let c = checksum::checksum(&want);
    want[10..12].copy_from_slice(&c.to_be_bytes());
    // Label 100, TC = 34 >> 3 = 4, S = 1, TTL 61: 0x00064 << 12 | 4 << 9 | 1 << 8 | 61
    want.extend_from_slice(&[0x00, 0x06, 0x49, 61]);
    want.extend_from_slice(&inner);
    assert_eq!(p.data(), &want[..]);
    assert!(Ipv4Packet::new_checked(p.data()).unwrap().verify_checksum());
    assert_eq!(
        p.verdict_mark(),
        Some(0x01d0_0064),
        "mark = 1d0:100 (label 100 = 0x64)"
    );
    assert_eq!(counters_map(&counters)["encapsulated"], 1);
}

#[test]
fn mpls_in_udp_is_rfc_7510_byte_for_byte() {
    let inner = udp4(b"hello");
    let mut s = cfg("udp")
        .into_factory("e")
        .unwrap()
        .build(&Counters::new(), &relay_core::Resources::new());
    let mut p = Packet::from_bytes(&inner);
    assert_eq!(s.process(&mut p, &mut cx()), Action::Continue);
    let d = p.data();
    assert_eq!(d.len(), inner.len() + 32);
    let ip = Ipv4Packet::new_checked(d).unwrap();
    assert_eq!(
        (ip.protocol(), ip.ttl(), ip.total_len() as usize),
        (17, 64, d.len())
    );
    assert!(ip.verify_checksum());
    let u = UdpPacket::new_checked(&d[20..]).unwrap();
    assert_eq!(u.dst_port(), 6635);
    assert!(u.src_port() >= 49152, "source port in the dynamic range");
    assert_eq!(u.len() as usize, d.len() - 20);
    let pseudo = checksum::pseudo_v4(
        [192, 0, 2, 1].into(),
        [192, 0, 2, 2].into(),
        17,
        u.len() as u32,
    );
    assert!(u.checksum() != 0 && u.verify_checksum(pseudo));
    assert_eq!(&d[28..32], &[0x00, 0x06, 0x49, 61]);
    assert_eq!(&d[32..], &inner[..]);
    // The same flow always gets the same source port; another flow (most likely) not.
    let mut q = Packet::from_bytes(&inner);
    s.process(&mut q, &mut cx());
    assert_eq!(&q.data()[20..22], &d[20..22]);
    let mut other = udp4(b"hello");
    other[20..22].copy_from_slice(&4001u16.to_be_bytes());
    let mut q = Packet::from_bytes(&other);
    s.process(&mut q, &mut cx());
    assert_ne!(&q.data()[20..22], &d[20..22]);
    // Zero checksum when configured off (RFC 7510 section 3 allows it over IPv4).
    let mut c = cfg("udp");
    c.udp_checksum = false;
    let mut s = c
        .into_factory("e")
        .unwrap()
        .build(&Counters::new(), &relay_core::Resources::new());
    let mut q = Packet::from_bytes(&inner);
    s.process(&mut q, &mut cx());
    assert_eq!(&q.data()[26..28], &[0, 0]);
}

#[test]
fn ipv6_inner_takes_tc_and_ttl_and_clears_df() {
    let inner = udp6(b"six");
    let f = cfg("ip").into_factory("e").unwrap();
    let mut s = f.build(&Counters::new(), &relay_core::Resources::new());
    let mut p = Packet::from_bytes(&inner);
    assert_eq!(s.process(&mut p, &mut cx()), Action::Continue);
    let d = p.data();
    assert_eq!(d[1], 0xb8, "outer TOS = inner traffic class");
    assert_eq!(&d[6..8], &[0, 0], "DF clear for an IPv6 inner packet");
    assert_eq!(&d[16..20], &[192, 0, 2, 3]);
    // Label 101, TC 46 >> 3 = 5, S, TTL 50.
    assert_eq!(&d[20..24], &lse_bytes(101, 5, 50));
    assert_eq!(&d[24..], &inner[..]);
    assert_eq!(p.verdict_mark(), Some(0x01d0_0065));
    // On an IPv6 hook the verdict cannot carry the IPv4 encapsulation: it is emitted.
    let counters = Counters::new();
    let mut s = f.build(&counters, &relay_core::Resources::new());
    let mut p = Packet::from_bytes(&inner);
    p.meta.hw_protocol = 0x86dd;
    let mut cx = cx();
    assert_eq!(s.process(&mut p, &mut cx), Action::Drop, "the original");
    let out: Vec<_> = cx.outbox().iter().collect();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].route, relay_core::Route::Originate);
    assert_eq!(out[0].destination, std::net::IpAddr::from([192, 0, 2, 3]));
    assert_eq!(&out[0].bytes[24..], &inner[..], "the same encapsulation");
    assert_eq!(out[0].mark, 0x01d0_0065, "the VCAN's mark");
}

fn lse_bytes(label: u32, tc: u8, ttl: u8) -> [u8; 4] {
    lse::LseRepr {
        label,
        tc,
        bottom: true,
        ttl,
    }
    .to_bytes()
}

#[test]
fn decap_restores_every_byte_both_encaps_and_families() {
    for encap in ["ip", "udp"] {
        for inner in [udp4(&[7u8; 300]), udp6(&[9u8; 200])] {
            let mut e = cfg(encap)
                .into_factory("e")
                .unwrap()
                .build(&Counters::new(), &relay_core::Resources::new());
            let counters = Counters::new();
            let mut d = decap(&[101, 100])
                .into_factory("d")
                .unwrap()
                .build(&counters, &relay_core::Resources::new());
            let mut p = Packet::from_bytes(&inner);
            e.process(&mut p, &mut cx());
            let mut q = Packet::from_bytes(p.data());
            assert_eq!(d.process(&mut q, &mut cx()), Action::Continue);
            assert_eq!(q.data(), &inner[..], "{encap}");
            assert_eq!(counters_map(&counters)["decapsulated"], 1);
        }
    }
}

#[test]
fn decap_drops_unknown_labels_and_malformed_and_passes_the_rest() {
    let inner = udp4(b"payload");
    let mut e = cfg("udp")
        .into_factory("e")
        .unwrap()
        .build(&Counters::new(), &relay_core::Resources::new());
    let mut p = Packet::from_bytes(&inner);
    e.process(&mut p, &mut cx());
    let good = p.data().to_vec();
    let counters = Counters::new();
    let mut d = decap(&[200])
        .into_factory("d")
        .unwrap()
        .build(&counters, &relay_core::Resources::new());
    assert_eq!(
        d.process(&mut Packet::from_bytes(&good), &mut cx()),
        Action::Drop
    );
    assert_eq!(counters_map(&counters)["dropped_unknown_label"], 1);
    let mut d = decap(&[100])
        .into_factory("d")
        .unwrap()
        .build(&counters, &relay_core::Resources::new());
    // Plain traffic passes untouched.
    let mut plain = Packet::from_bytes(&inner);
    assert_eq!(d.process(&mut plain, &mut cx()), Action::Continue);
    assert!(!plain.is_modified());
    // A corrupted UDP checksum, every truncation and every byte flip: never a panic, and
    // a truncated or corrupt encapsulation is never passed on as a different packet.
    let mut bad = good.clone();
    bad[40] ^= 0xff;
    assert_eq!(
        d.process(&mut Packet::from_bytes(&bad), &mut cx()),
        Action::Drop
    );
    for cut in 20..good.len() {
        let mut b = good[..cut].to_vec();
        b[2..4].copy_from_slice(&(cut as u16).to_be_bytes());
        Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        let mut q = Packet::from_bytes(&b);
        let a = d.process(&mut q, &mut cx());
        assert!(a == Action::Drop || q.data() != &inner[..], "cut {cut}");
    }
    for i in 0..good.len() {
        for v in [0u8, 0xff, 0x45, 0x60] {
            let mut b = good.clone();
            b[i] = v;
            let _ = d.process(&mut Packet::from_bytes(&b), &mut cx());
        }
    }
    let snap = counters_map(&counters);
    assert!(snap["dropped_malformed"] > 10, "{snap:?}");
    // MPLS-in-IP with a label stack lacking the bottom bit is malformed.
    let mut e = cfg("ip")
        .into_factory("e")
        .unwrap()
        .build(&Counters::new(), &relay_core::Resources::new());
    let mut p = Packet::from_bytes(&inner);
    e.process(&mut p, &mut cx());
    let mut b = p.data().to_vec();
    b[22] &= !0x01;
    assert_eq!(locate_inner(&b, &[100]).unwrap_err(), DecapError::Malformed);
    // An outer fragment is dropped.
    let mut b = p.data().to_vec();
    b[6] |= 0x20;
    assert_eq!(locate_inner(&b, &[100]).unwrap_err(), DecapError::Fragment);
}

#[test]
fn unclassified_pass_or_drop() {
    let mut other = udp4(b"x");
    other[1] = 0; // DSCP 0: no VCAN
    Ipv4Packet::new_unchecked(&mut other[..]).fill_checksum();
    let counters = Counters::new();
    let mut s = cfg("ip")
        .into_factory("e")
        .unwrap()
        .build(&counters, &relay_core::Resources::new());
    let mut p = Packet::from_bytes(&other);
    assert_eq!(s.process(&mut p, &mut cx()), Action::Continue);
    assert!(!p.is_modified() && p.verdict_mark().is_none());
    let mut c = cfg("ip");
    c.unclassified = Unclassified::Drop;
    let mut s = c
        .into_factory("e")
        .unwrap()
        .build(&counters, &relay_core::Resources::new());
    assert_eq!(
        s.process(&mut Packet::from_bytes(&other), &mut cx()),
        Action::Drop
    );
    let snap = counters_map(&counters);
    assert_eq!(
        (snap["unclassified_passed"], snap["dropped_unclassified"]),
        (1, 1)
    );
}

/// `udp4(payload)` from 127.0.0.1 instead: what a "too big" answer may be sent to in a test.
fn udp4_loopback(payload: &[u8]) -> Vec<u8> {
    let mut b = udp4(payload);
    b[12..16].copy_from_slice(&[127, 0, 0, 1]);
    Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
    let pseudo = checksum::pseudo_v4(
        [127, 0, 0, 1].into(),
        [10, 1, 2, 3].into(),
        17,
        (8 + payload.len()) as u32,
    );
    UdpPacket::new_unchecked(&mut b[20..]).fill_checksum(pseudo);
    b
}

#[test]
fn too_big_with_df_is_dropped_without_df_encapsulated() {
    let counters = Counters::new();
    let mut s = cfg("ip")
        .into_factory("e")
        .unwrap()
        .build(&counters, &relay_core::Resources::new());
    let big = udp4_loopback(&[1u8; 1472]);
    assert_eq!(
        s.process(&mut Packet::from_bytes(&big), &mut cx()),
        Action::Drop
    );
    assert_eq!(counters_map(&counters)["dropped_too_big"], 1);
    let mut nodf = big.clone();
    nodf[6] = 0;
    Ipv4Packet::new_unchecked(&mut nodf[..]).fill_checksum();
    let mut p = Packet::from_bytes(&nodf);
    assert_eq!(s.process(&mut p, &mut cx()), Action::Continue);
    assert_eq!(p.len(), 1500 + 24);
    let f = cfg("udp").into_factory("e").unwrap();
    let m = f.manifest().clamp_mss.unwrap();
    assert_eq!((m.ipv4, m.ipv6), (1500 - 32 - 40, 1500 - 32 - 60));
}

/// The next-hop MTU of the "fragmentation needed" in `cx`'s outbox that quotes `orig`.
fn frag_needed_about(cx: &Context, orig: &[u8]) -> Option<u16> {
    cx.outbox().iter().find_map(|e| {
        let icmp = e.bytes.get(20..)?;
        (icmp.len() >= 8 + 28 && icmp[..2] == [3, 4] && icmp[8..8 + 28] == orig[..28])
            .then(|| u16::from_be_bytes([icmp[6], icmp[7]]))
    })
}

#[test]
fn too_big_with_df_is_answered_with_the_mtu_that_fits() {
    for (encap, overhead) in [("ip", 24), ("udp", 32)] {
        let mut out = cx();
        let counters = Counters::new();
        let mut s = cfg(encap)
            .into_factory("e")
            .unwrap()
            .build(&counters, &relay_core::Resources::new());
        // Exactly what fits the path once encapsulated, and one byte more; the latter with
        // a distinct IP identification, so that its answer is told apart from others'.
        let fits = udp4_loopback(&vec![7u8; 1500 - overhead - 28]);
        let mut big = udp4_loopback(&vec![7u8; 1500 - overhead - 28 + 1]);
        big[4..6].copy_from_slice(&(0x7e00 + overhead as u16).to_be_bytes());
        Ipv4Packet::new_unchecked(&mut big[..]).fill_checksum();
        assert_eq!(
            s.process(&mut Packet::from_bytes(&fits), &mut cx()),
            Action::Continue,
            "{encap}: {} bytes fit",
            fits.len()
        );
        assert_eq!(
            s.process(&mut Packet::from_bytes(&big), &mut out),
            Action::Drop,
            "{encap}"
        );
        let c = counters_map(&counters);
        assert_eq!(c["dropped_too_big"], 1, "{encap}");
        assert_eq!(out.outbox().len(), 1, "{encap}: one error emitted");
        assert_eq!(
            frag_needed_about(&out, &big),
            Some(1500 - overhead as u16),
            "{encap}: the sender is told the MTU less the overhead"
        );
    }
}

#[test]
fn qos_table_and_config_errors_name_the_field() {
    let q = cfg("ip").qos().unwrap();
    assert_eq!(q.interface, "eth1");
    assert_eq!(q.handle, 0x1d0);
    assert_eq!(q.classes[0].minor, 100);
    assert_eq!(q.classes[0].mark, 0x01d0_0064);
    assert_eq!(
        (q.classes[0].rate_bps, q.classes[0].ceil_bps),
        (20_000_000, 50_000_000)
    );
    assert_eq!((q.classes[1].ceil_bps, q.classes[1].prio), (10_000_000, 2));
    assert_eq!(
        q.link_rate_bps, 50_000_000,
        "largest ceil beats the sum of rates + default"
    );
    let bad = |edit: &str, want: &str| {
        let text = CONFIG.replace("ENCAP", "ip").replace("label = 100", edit);
        let err = match toml::from_str::<EncapConfig>(&text) {
            Err(e) => e.to_string(),
            Ok(c) => c.into_factory("e").err().expect(edit).to_string(),
        };
        assert!(err.contains(want), "{edit}: {err}");
    };
    bad("label = 3", "vcan[0] (\"video\"): label: 3");
    bad("label = 101", "class: 0x65 is also");
    bad("label = 100\nclass = 1", "class: 1 must be");
    bad("label = 200000", "give the VCAN a `class`");
    bad("label = 100\nspeed = 1", "unknown field `speed`");
    bad("label = 100\nprio = 9", "prio: 9");
    let text = CONFIG
        .replace("ENCAP", "ip")
        .replace("{ dscp = 34 }", "{ dst = \"10.1.2.3/16\" }");
    let e = toml::from_str::<EncapConfig>(&text)
        .unwrap()
        .into_factory("e")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("match.dst") && e.contains("host bits"), "{e}");
    let text = CONFIG
        .replace("ENCAP", "ip")
        .replace("{ dscp = 34 }", "{ proto = \"icmp\", dport = 80 }");
    let e = toml::from_str::<EncapConfig>(&text)
        .unwrap()
        .into_factory("e")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("ports only exist"), "{e}");
    let text = CONFIG
        .replace("ENCAP", "ip")
        .replace("{ dscp = 34 }", "{ dport = \"90-80\" }");
    let e = toml::from_str::<EncapConfig>(&text)
        .unwrap()
        .into_factory("e")
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("vcan[0] (\"video\"): match.dport: range \"90-80\" is empty"),
        "{e}"
    );
    let text = CONFIG
        .replace("ENCAP", "ip")
        .replace("rate = \"20mbit\"", "rate = \"20 furlongs\"");
    let e = toml::from_str::<EncapConfig>(&text)
        .unwrap()
        .into_factory("e")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("vcan[0] (\"video\"): rate:"), "{e}");
    assert!(
        toml::from_str::<EncapConfig>("interface = \"eth1\"")
            .unwrap_err()
            .to_string()
            .contains("local")
    );
    assert!(decap(&[]).into_factory("d").is_err());
    assert!(decap(&[1 << 20]).into_factory("d").is_err());
}

#[test]
fn ten_thousand_vcans_classify_to_the_right_one() {
    let mut text = String::from("interface = \"eth1\"\nlocal = \"192.0.2.1\"\n");
    for i in 0..10_000u32 {
        text.push_str(&format!(
            "[[vcan]]\nname = \"v{i}\"\nmatch = {{ dst = \"10.{}.{}.0/24\", proto = \"udp\" }}\nlabel = {}\nremote = \"192.0.2.2\"\nrate = \"1mbit\"\n",
            i / 256,
            i % 256,
            16 + i
        ));
    }
    let c: EncapConfig = toml::from_str(&text).unwrap();
    assert_eq!(c.qos().unwrap().classes.len(), 10_000);
    let mut s = c
        .into_factory("e")
        .unwrap()
        .build(&Counters::new(), &relay_core::Resources::new());
    let mut last = udp4(b"x");
    last[16..20].copy_from_slice(&[10, 39, 15, 9]); // 9999 = 39 * 256 + 15
    Ipv4Packet::new_unchecked(&mut last[..]).fill_checksum();
    let mut p = Packet::from_bytes(&last);
    s.process(&mut p, &mut cx());
    assert_eq!(p.verdict_mark(), Some(0x01d0_0000 | (16 + 9999)));
}

/// The encapsulation of `inner` by [`CONFIG`]'s edge (outer source [`PEER`]).
fn encapsulated(encap: &str, inner: &[u8]) -> Vec<u8> {
    let mut e = cfg(encap)
        .into_factory("e")
        .unwrap()
        .build(&Counters::new(), &relay_core::Resources::new());
    let mut p = Packet::from_bytes(inner);
    assert_eq!(e.process(&mut p, &mut cx()), Action::Continue);
    p.data().to_vec()
}

#[test]
fn decap_takes_mpls_only_from_its_peers() {
    let other: std::net::Ipv4Addr = [192, 0, 2, 9].into();
    for encap in ["ip", "udp"] {
        for inner in [udp4(b"from whom"), udp6(b"from whom")] {
            let good = encapsulated(encap, &inner);
            // Not a peer: dropped and counted, nothing else looked at.
            let counters = Counters::new();
            let mut d = DecapConfig {
                labels: vec![100, 101],
                peers: vec![other],
            }
            .into_factory("d")
            .unwrap()
            .build(&counters, &relay_core::Resources::new());
            let mut p = Packet::from_bytes(&good);
            assert_eq!(d.process(&mut p, &mut cx()), Action::Drop, "{encap}");
            assert!(!p.is_modified());
            // A broken label stack or UDP checksum from a stranger is still a stranger:
            // the source is checked before anything past the outer header.
            let mut broken = good.clone();
            let last = broken.len() - 1;
            broken[last] ^= 0xff; // UDP checksum (udp), the inner payload (ip)
            broken[if encap == "udp" { 30 } else { 22 }] &= !1; // no bottom of stack
            assert_eq!(
                d.process(&mut Packet::from_bytes(&broken), &mut cx()),
                Action::Drop
            );
            let snap = counters_map(&counters);
            assert_eq!(snap["dropped_unknown_peer"], 2, "{encap}: {snap:?}");
            assert_eq!(
                (
                    snap["decapsulated"],
                    snap["dropped_malformed"],
                    snap["dropped_unknown_label"]
                ),
                (0, 0, 0),
                "{encap}: {snap:?}"
            );
            assert_eq!(
                locate_inner_from(&good, &[other], &[100, 101]),
                Err(DecapError::UnknownPeer(PEER))
            );
            // Plain traffic from a stranger is not MPLS: it passes as before.
            let mut plain = Packet::from_bytes(&inner);
            assert_eq!(d.process(&mut plain, &mut cx()), Action::Continue);
            assert!(!plain.is_modified());
            assert_eq!(counters_map(&counters)["passed_not_mpls"], 1);

            // The peer among others: decapsulated to the very bytes sent.
            let counters = Counters::new();
            let mut d = DecapConfig {
                labels: vec![100, 101],
                peers: vec![other, PEER, [10, 0, 0, 1].into()],
            }
            .into_factory("d")
            .unwrap()
            .build(&counters, &relay_core::Resources::new());
            let mut p = Packet::from_bytes(&good);
            assert_eq!(d.process(&mut p, &mut cx()), Action::Continue, "{encap}");
            assert_eq!(p.data(), &inner[..]);
            let snap = counters_map(&counters);
            assert_eq!(
                (snap["decapsulated"], snap["dropped_unknown_peer"]),
                (1, 0),
                "{snap:?}"
            );
        }
    }
}

#[test]
fn decap_without_peers_is_refused() {
    let err = |text: &str| {
        toml::from_str::<DecapConfig>(text)
            .map_err(|e| e.to_string())
            .and_then(|c| c.into_factory("d").map(drop).map_err(|e| e.to_string()))
            .unwrap_err()
    };
    let e = err("labels = [100]");
    assert!(e.contains("peers: missing or empty"), "{e}");
    let e = err("labels = [100]\npeers = []");
    assert!(e.contains("peers: missing or empty"), "{e}");
    for bad in ["0.0.0.0", "224.0.0.1", "255.255.255.255"] {
        let e = err(&format!("labels = [100]\npeers = [\"{bad}\"]"));
        assert!(e.contains(&format!("peers: {bad} is not a unicast")), "{e}");
    }
    let e = err("labels = [100]\npeers = [\"fd00::1\"]");
    assert!(e.contains("IPv4"), "{e}");
    assert!(
        toml::from_str::<DecapConfig>("labels = [100]\npeers = [\"192.0.2.1\", \"192.0.2.1\"]")
            .unwrap()
            .into_factory("d")
            .is_ok()
    );
}

/// Every name and rate `relayd run` refuses on its way to tc must be refused here, where
/// `relayd check` sees it (issue 12, defect 6).
#[test]
fn check_refuses_what_tc_would() {
    let with = |from: &str, to: &str| {
        let text = CONFIG.replace("ENCAP", "ip").replace(from, to);
        toml::from_str::<EncapConfig>(&text)
            .unwrap()
            .into_factory("e")
            .err()
            .map(|e| e.to_string())
    };
    for bad in [
        "eth\\n1",
        "eth\\t1",
        "eth1\\n",
        "eth\\r1",
        "eth\\u000b1",
        "eth 1",
        "eth\\u00a01",
        "eth\\u20281",
        "eth#1",
        "eth\\\"1",
        "eth\\\\1",
        "eth:1",
        "a/b",
        ".",
        "..",
        "",
        "abcdefghijklmnop",
    ] {
        let e = with("interface = \"eth1\"", &format!("interface = \"{bad}\""))
            .unwrap_or_else(|| panic!("interface {bad:?} accepted"));
        assert!(
            e.starts_with("interface: ") && e.contains("is not an interface name"),
            "{bad:?}: {e}"
        );
        assert!(!e.contains(['\n', '\t', '\r']), "{bad:?}: {e:?}");
    }
    let e = with("interface = \"eth1\"", "interface = \"eth\\n1\"").unwrap();
    assert!(e.contains(r#""eth\n1""#), "{e}");
    assert!(with("interface = \"eth1\"", "interface = \"veth-a.100\"").is_none());
    // tc shapes in bytes per second: less than 8 bit/s is 0, which it refuses.
    for (from, to, want) in [
        (
            "rate = \"20mbit\"",
            "rate = \"7bit\"",
            "vcan[0] (\"video\"): rate: \"7bit\" is below 8 bit/s",
        ),
        (
            "ceil = \"50mbit\"",
            "ceil = \"1bit\"",
            "ceil: \"1bit\" is below 8 bit/s",
        ),
        (
            "interface = \"eth1\"",
            "interface = \"eth1\"\ndefault_rate = \"4bit\"",
            "default_rate: \"4bit\" is below",
        ),
        (
            "interface = \"eth1\"",
            "interface = \"eth1\"\nlink_rate = \"1bit\"",
            "link_rate: \"1bit\" is below",
        ),
    ] {
        let e = with(from, to).unwrap_or_else(|| panic!("{to} accepted"));
        assert!(e.contains(want), "{to}: {e}");
    }
    assert!(with("rate = \"20mbit\"", "rate = \"8bit\"").is_none());
}

/// A peer (or whoever forges its outer source) chooses the inner header: one addressed
/// to the edge itself, to loopback or to any address no router forwards to is dropped on
/// every hook and counted, never handed to the kernel to deliver locally. On INPUT, where
/// a verdict delivers locally whatever the address, honest packets are forwarded anew.
#[test]
fn decap_never_delivers_the_inner_packet_locally() {
    use relay_core::Hook;
    use relay_core::wire::Ipv6Packet;
    use std::net::IpAddr;
    // MPLS-in-IP from PEER, the inner packet at 20 (outer header) + 4 (one label).
    let to = |dst: &str| {
        let a: IpAddr = dst.parse().unwrap();
        let mut e = encapsulated("ip", &if a.is_ipv4() { udp4(b"x") } else { udp6(b"x") });
        let inner = &mut e[24..];
        match a {
            IpAddr::V4(a) => {
                let mut ip = Ipv4Packet::new_unchecked(inner);
                ip.set_dst_addr(a);
                ip.fill_checksum();
            }
            IpAddr::V6(a) => Ipv6Packet::new_unchecked(inner).set_dst_addr(a),
        }
        e
    };
    let counters = Counters::new();
    let mut d = decap(&[100, 101])
        .into_factory("d")
        .unwrap()
        .build(&counters, &relay_core::Resources::new());
    let edge_cx = || {
        let mut c = cx();
        c.set_local_addresses(std::sync::Arc::from(
            ["10.1.2.1", "192.0.2.2"].map(|a| a.parse::<IpAddr>().unwrap()),
        ));
        c
    };
    let mut n = 0;
    for hook in Hook::ALL {
        for bad in [
            "127.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "169.254.169.254",
            "10.1.2.1",
            "::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
        ] {
            let mut p = Packet::from_bytes(&to(bad));
            p.meta.hook = Some(hook);
            let mut c = edge_cx();
            assert_eq!(d.process(&mut p, &mut c), Action::Drop, "{bad} {hook:?}");
            assert!(c.outbox().is_empty());
            n += 1;
        }
    }
    assert_eq!(counters_map(&counters)["dropped_local_destination"], n);
    // Honest: carried by the verdict before routing, forwarded anew on INPUT.
    let mut p = Packet::from_bytes(&to("10.1.2.3"));
    p.meta.hook = Some(Hook::Prerouting);
    assert_eq!(d.process(&mut p, &mut edge_cx()), Action::Continue);
    assert_eq!(p.data(), &udp4(b"x")[..]);
    let mut p = Packet::from_bytes(&to("10.1.2.3"));
    p.meta.hook = Some(Hook::Input);
    let mut c = edge_cx();
    assert_eq!(d.process(&mut p, &mut c), Action::Drop);
    assert_eq!(c.outbox().len(), 1);
    assert_eq!(counters_map(&counters)["dropped_local_destination"], n);
}
