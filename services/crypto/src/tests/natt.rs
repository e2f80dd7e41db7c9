//! NAT traversal (RFC 3948): ESP in UDP out of `encrypt`, into `decrypt`, through a NAT
//! that rewrites the outer source, and what else arrives on the NAT-T port.

use super::*;
use relay_core::wire::{TcpPacket, TcpRepr, checksum, ipv6};

fn udp_config(cipher: Cipher, tag: &str) -> EncryptConfig {
    EncryptConfig {
        encap: Encap::Udp,
        ..enc_config(cipher, key_file(tag, cipher))
    }
}

fn tunnel(e: EncryptConfig, local: &str, remote: &str) -> EncryptConfig {
    EncryptConfig {
        mode: EspMode::Tunnel,
        local: Some(local.parse().unwrap()),
        remote: Some(remote.parse().unwrap()),
        ..e
    }
}

/// Where the UDP header of ESP in UDP starts (no IP options, no extension headers).
fn udp_at(d: &[u8]) -> usize {
    match d[0] >> 4 {
        4 => ipv4::HEADER_LEN,
        _ => ipv6::HEADER_LEN,
    }
}

/// A TCP segment 10.0.1.1:40000 -> 10.0.2.2:80 with `n` bytes of data and a right checksum.
fn tcp_packet(n: usize) -> Vec<u8> {
    let t = TcpRepr {
        src_port: 40000,
        dst_port: 80,
        seq: 7,
        ack: 9,
        flags: 0x18,
        window: 1000,
        urgent: 0,
        options_len: 0,
    };
    let mut ip = Ipv4Repr::new(
        Ipv4Addr::new(10, 0, 1, 1),
        Ipv4Addr::new(10, 0, 2, 2),
        6,
        t.header_len() + n,
    );
    ip.ident = 3;
    let mut b = vec![0u8; ip.buffer_len()];
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
    let mut p = TcpPacket::new_unchecked(&mut b[ipv4::HEADER_LEN..]);
    t.emit(&mut p);
    for (i, x) in p.payload_mut().iter_mut().enumerate() {
        *x = (i * 5) as u8;
    }
    let pseudo = checksum::pseudo_v4(
        Ipv4Addr::new(10, 0, 1, 1),
        Ipv4Addr::new(10, 0, 2, 2),
        6,
        (t.header_len() + n) as u32,
    );
    p.fill_checksum(pseudo);
    b
}

/// The pseudo-header sum of the IPv4 packet `d`'s upper layer.
fn pseudo_of(d: &[u8]) -> u64 {
    let ip = Ipv4Packet::new_unchecked(d);
    checksum::pseudo_v4(
        ip.src_addr(),
        ip.dst_addr(),
        ip.protocol(),
        (d.len() - ipv4::HEADER_LEN) as u32,
    )
}

#[test]
fn esp_in_udp_round_trips_for_every_suite_and_mode() {
    for (name, cipher) in Cipher::ALL {
        for tunnel_mode in [false, true] {
            let tag = format!("natt-{name}-{tunnel_mode}");
            let mut e = udp_config(cipher, &tag);
            if tunnel_mode {
                e = tunnel(e, "192.0.2.1", "192.0.2.2");
            }
            let (mut enc, mut dec, _, dc) = pair_with(e, false);
            let packets = [udp_packet(0), udp_packet(100), tcp_packet(1000)];
            for orig in &packets {
                let mut p = Packet::from_bytes(orig);
                assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue, "{tag}");
                let d = p.data().to_vec();
                let ip = Ipv4Packet::new_checked(&d[..]).unwrap();
                assert_eq!(ip.protocol(), 17, "{tag}: UDP");
                assert!(ip.verify_checksum());
                assert_eq!(ip.total_len() as usize, d.len());
                let u = UdpPacket::new_checked(ip.payload()).unwrap();
                assert_eq!((u.src_port(), u.dst_port()), (4500, 4500), "{tag}");
                assert_eq!(u.len() as usize, d.len() - ipv4::HEADER_LEN, "{tag}");
                assert_eq!(u.checksum(), 0, "{tag}: RFC 3948 2.1, IPv4");
                let esp = EspRepr::parse(&EspPacket::new_unchecked(u.payload())).unwrap();
                assert_eq!(esp.spi, 0x1001, "{tag}: ESP right after the UDP header");
                let body = u.payload().len() - ESP_LEN - cipher.iv_len() - ICV_LEN;
                assert_eq!(body % cipher.block(), 0, "{tag}");
                let mut q = Packet::from_bytes(&d);
                assert_eq!(dec.process(&mut q, &mut cx()), Action::Continue, "{tag}");
                assert_eq!(q.data(), &orig[..], "{tag}: restored byte for byte");
            }
            assert_eq!(count(&dc, "decrypted"), packets.len() as u64, "{tag}");
        }
    }
}

#[test]
fn esp_in_udp_over_ipv6_carries_a_udp_checksum() {
    let cipher = Cipher::Aes128Gcm;
    for tunnel_mode in [false, true] {
        let tag = format!("natt6-{tunnel_mode}");
        let mut e = udp_config(cipher, &tag);
        if tunnel_mode {
            e = tunnel(e, "2001:db8::1", "2001:db8::2");
        }
        let (mut enc, mut dec, _, _) = pair_with(e, false);
        let orig = udp6_packet(300);
        let mut p = Packet::from_bytes(&orig);
        p.meta.hw_protocol = 0x86dd;
        assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue, "{tag}");
        let d = p.data().to_vec();
        let ip = Ipv6Packet::new_checked(&d[..]).unwrap();
        assert_eq!(ip.next_header(), 17, "{tag}");
        let u = UdpPacket::new_checked(&d[ipv6::HEADER_LEN..]).unwrap();
        assert_eq!(u.dst_port(), 4500);
        assert_ne!(u.checksum(), 0, "{tag}: RFC 6935/6936 keep it on IPv6");
        let pseudo = checksum::pseudo_v6(ip.src_addr(), ip.dst_addr(), 17, u.len() as u32);
        assert!(
            u.verify_checksum(pseudo),
            "{tag}: the UDP checksum is right"
        );
        let mut q = Packet::from_bytes(&d);
        q.meta.hw_protocol = 0x86dd;
        assert_eq!(dec.process(&mut q, &mut cx()), Action::Continue, "{tag}");
        if !tunnel_mode {
            // Nothing rewrote the addresses: the inner checksum (0x1234, wrong on
            // purpose) is recomputed; everything else is the original.
            let mut want = orig.clone();
            let pseudo = checksum::pseudo_v6(
                "fd00:1::1".parse().unwrap(),
                "fd00:2::2".parse().unwrap(),
                17,
                (want.len() - ipv6::HEADER_LEN) as u32,
            );
            UdpPacket::new_unchecked(&mut want[ipv6::HEADER_LEN..]).fill_checksum(pseudo);
            assert_eq!(q.data(), &want[..], "{tag}");
        } else {
            assert_eq!(q.data(), &orig[..], "{tag}: tunnel mode needs no fix-up");
        }
    }
}

#[test]
fn ports_are_configurable_and_others_pass_as_not_esp() {
    let cipher = Cipher::Aes256Gcm;
    let e = EncryptConfig {
        encap_port: Some(14500),
        encap_source_port: Some(4501),
        ..udp_config(cipher, "natt-ports")
    };
    let (mut enc, _, _, _) = pair_with(e.clone(), false);
    let mut p = Packet::from_bytes(&udp_packet(40));
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
    let d = p.data().to_vec();
    let u = UdpPacket::new_unchecked(&d[udp_at(&d)..]);
    assert_eq!((u.src_port(), u.dst_port()), (4501, 14500));
    // A decrypt on the default port takes it for any UDP datagram; on 14500 it opens it.
    let mut other = dec_config(cipher, e.key_file.clone().unwrap(), false);
    let dc = Counters::new();
    let mut dec = other.clone().into_factory("d").unwrap().build_started(&dc);
    assert_eq!(
        dec.process(&mut Packet::from_bytes(&d), &mut cx()),
        Action::Continue
    );
    assert_eq!(count(&dc, "passed_not_esp"), 1);
    other.encap_port = 14500;
    let dc = Counters::new();
    let mut dec = other.into_factory("d").unwrap().build_started(&dc);
    let mut q = Packet::from_bytes(&d);
    assert_eq!(dec.process(&mut q, &mut cx()), Action::Continue);
    assert_eq!(q.data(), &udp_packet(40)[..]);
    assert_eq!(count(&dc, "decrypted"), 1);
}

/// A UDP datagram 198.51.100.9:4500 -> 10.0.2.2:4500 carrying `payload`.
fn to_natt_port(payload: &[u8]) -> Vec<u8> {
    let mut b = udp_packet(payload.len());
    let mut ip = Ipv4Packet::new_unchecked(&mut b[..]);
    ip.set_src_addr(Ipv4Addr::new(198, 51, 100, 9));
    ip.fill_checksum();
    let mut u = UdpPacket::new_unchecked(&mut b[ipv4::HEADER_LEN..]);
    u.set_src_port(4500);
    u.set_dst_port(4500);
    u.payload_mut().copy_from_slice(payload);
    b
}

#[test]
fn ike_passes_keepalives_are_dropped_quietly() {
    let (_, mut dec, dc) = pair(Cipher::Aes128Gcm, "natt-ike");
    // IKE behind the zero non-ESP marker: for the host's IKE daemon, untouched.
    let mut ike = vec![0u8; 4];
    ike.extend_from_slice(&[0x11; 60]);
    for payload in [&ike[..], &[0, 0, 0, 0][..]] {
        let b = to_natt_port(payload);
        let mut p = Packet::from_bytes(&b);
        assert_eq!(dec.process(&mut p, &mut cx()), Action::Continue);
        assert_eq!(p.data(), &b[..], "IKE passes as it came");
    }
    assert_eq!(count(&dc, "passed_ike"), 2);
    // A NAT keepalive: dropped, counted, not logged.
    let b = to_natt_port(&[0xff]);
    assert_eq!(
        dec.process(&mut Packet::from_bytes(&b), &mut cx()),
        Action::Drop
    );
    assert_eq!(count(&dc, "dropped_keepalive"), 1);
    assert_eq!(count(&dc, "dropped_malformed"), 0);
}

#[test]
fn truncated_and_garbage_udp_never_panics_and_is_counted() {
    let cipher = Cipher::Aes128CbcHmac;
    let (mut enc, mut dec, _, dc) = pair_with(udp_config(cipher, "natt-garbage"), false);
    let mut p = Packet::from_bytes(&udp_packet(64));
    enc.process(&mut p, &mut cx());
    let good = p.data().to_vec();
    let mut drops = 0;
    let mut passes = 0;
    // Cut anywhere, the IP length following the cut (the UDP length then lies).
    for cut in ipv4::HEADER_LEN..good.len() {
        let mut b = good[..cut].to_vec();
        Ipv4Packet::new_unchecked(&mut b[..]).set_total_len(cut as u16);
        match dec.process(&mut Packet::from_bytes(&b), &mut cx()) {
            Action::Drop => drops += 1,
            Action::Continue => passes += 1,
            a => panic!("cut {cut}: {a:?}"),
        }
    }
    assert_eq!(passes, 0, "a cut packet is never passed on");
    // Payloads of every short length, and every UDP length that lies.
    for payload in [
        &[1u8][..],
        &[1, 2],
        &[1, 2, 3],
        &[0, 0, 0],
        &[0xff, 0xff],
        &[9; 7],
    ] {
        let r = dec.process(&mut Packet::from_bytes(&to_natt_port(payload)), &mut cx());
        assert_eq!(r, Action::Drop, "{payload:?}");
        drops += 1;
    }
    for len in [0u16, 1, 7, 9, 4000] {
        let mut b = good.clone();
        UdpPacket::new_unchecked(&mut b[ipv4::HEADER_LEN..]).set_len(len);
        assert_eq!(
            dec.process(&mut Packet::from_bytes(&b), &mut cx()),
            Action::Drop,
            "UDP length {len}"
        );
        drops += 1;
    }
    // Random bytes after a non-zero marker.
    let mut x: u32 = 0x1234_5678;
    for n in 4..200 {
        let payload: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as u8) | 1
            })
            .collect();
        let r = dec.process(&mut Packet::from_bytes(&to_natt_port(&payload)), &mut cx());
        assert_eq!(r, Action::Drop);
        drops += 1;
    }
    let counted: u64 = [
        "dropped_malformed",
        "dropped_unknown_spi",
        "dropped_auth_failed",
        "dropped_replayed",
        "dropped_too_old",
    ]
    .iter()
    .map(|n| count(&dc, n))
    .sum();
    assert_eq!(counted, drops, "every drop counted");
    assert_eq!(count(&dc, "decrypted"), 0);
    // The untouched packet still opens: nothing moved the window.
    let mut q = Packet::from_bytes(&good);
    assert_eq!(dec.process(&mut q, &mut cx()), Action::Continue);
}

#[test]
fn the_inner_checksum_is_fixed_after_a_nat_rewrote_the_source() {
    for (name, cipher) in Cipher::ALL {
        let e = EncryptConfig {
            ..udp_config(cipher, &format!("natt-csum-{name}"))
        };
        let (mut enc, mut dec, _, _) = pair_with(e, false);
        // TCP, UDP with a checksum, UDP without one (IPv4: none stays none).
        let mut udp_sum = udp_packet(77);
        let ps = pseudo_of(&udp_sum);
        UdpPacket::new_unchecked(&mut udp_sum[ipv4::HEADER_LEN..]).fill_checksum(ps);
        for orig in [tcp_packet(500), udp_sum, udp_packet(33)] {
            let mut p = Packet::from_bytes(&orig);
            assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
            // The NAT: a new source address and port; the UDP checksum is 0, so it
            // changes only the IP header's.
            let mut d = p.data().to_vec();
            let mut ip = Ipv4Packet::new_unchecked(&mut d[..]);
            ip.set_src_addr(Ipv4Addr::new(203, 0, 113, 7));
            ip.fill_checksum();
            UdpPacket::new_unchecked(&mut d[ipv4::HEADER_LEN..]).set_src_port(61000);
            let mut q = Packet::from_bytes(&d);
            assert_eq!(dec.process(&mut q, &mut cx()), Action::Continue, "{name}");
            let out = q.data().to_vec();
            let l4 = &out[ipv4::HEADER_LEN..];
            let proto = Ipv4Packet::new_unchecked(&out[..]).protocol();
            let ok = match proto {
                6 => TcpPacket::new_checked(l4)
                    .unwrap()
                    .verify_checksum(pseudo_of(&out)),
                _ => UdpPacket::new_checked(l4)
                    .unwrap()
                    .verify_checksum(pseudo_of(&out)),
            };
            assert!(ok, "{name}: the host accepts the inner checksum");
            // Only the source address and the inner checksum changed.
            let at = if proto == 6 { 16 } else { 6 };
            let mut want = orig.clone();
            Ipv4Packet::new_unchecked(&mut want[..]).set_src_addr(Ipv4Addr::new(203, 0, 113, 7));
            Ipv4Packet::new_unchecked(&mut want[..]).fill_checksum();
            let c = ipv4::HEADER_LEN + at;
            want[c..c + 2].copy_from_slice(&out[c..c + 2]);
            assert_eq!(out, want, "{name}");
            let was = u16::from_be_bytes([orig[c], orig[c + 1]]);
            if was != 0 {
                assert_ne!(&out[c..c + 2], &orig[c..c + 2], "{name}: it had to change");
            } else {
                assert_eq!(
                    &out[c..c + 2],
                    &[0, 0],
                    "{name}: no UDP checksum stays none"
                );
            }
        }
    }
}

#[test]
fn encap_keys_are_checked_and_named() {
    let cipher = Cipher::Aes128Gcm;
    let k = key_file("natt-cfg", cipher);
    let err = |e: EncryptConfig| e.into_factory("e").err().unwrap().message().to_string();
    let e = err(EncryptConfig {
        encap_port: Some(4500),
        ..enc_config(cipher, k.clone())
    });
    assert!(e.contains("encap_port is for encap = \"udp\""), "{e}");
    let e = err(EncryptConfig {
        encap_source_port: Some(0),
        ..udp_config(cipher, "natt-cfg")
    });
    assert!(e.contains("encap_source_port = 0"), "{e}");
    let e = err(EncryptConfig {
        cipher: None,
        spi: None,
        key_file: None,
        ike: Some("c".into()),
        ..udp_config(cipher, "natt-cfg")
    });
    assert!(e.contains("encap is for manual keys"), "{e}");
    let bad: Result<EncryptConfig, _> = toml::from_str("encap = \"tcp\"");
    assert!(bad.unwrap_err().to_string().contains("encap"));
    let mut d = dec_config(cipher, k.clone(), false);
    d.encap_port = 0;
    let e = d.into_factory("d").err().unwrap();
    assert!(e.message().contains("encap_port = 0"), "{e}");
    // In TOML, as documented.
    let cfg: EncryptConfig = toml::from_str(&format!(
        "cipher = \"aes-128-gcm\"\nspi = 4097\nkey_file = \"{}\"\nencap = \"udp\"\n\
         encap_port = 4500\nencap_source_port = 4500\nstate_dir = \"{}\"",
        k.display(),
        state_dir_of(&k).display()
    ))
    .unwrap();
    assert!(cfg.into_factory("e").is_ok());
}

#[test]
fn the_size_limits_leave_room_for_the_udp_header() {
    let cipher = Cipher::Aes128Gcm;
    let raw = enc_config(cipher, key_file("natt-mss", cipher));
    let udp = EncryptConfig {
        encap: Encap::Udp,
        ..raw.clone()
    };
    let m_raw = raw.into_factory("e").unwrap().manifest().clamp_mss.unwrap();
    let m_udp = udp
        .clone()
        .into_factory("e")
        .unwrap()
        .manifest()
        .clamp_mss
        .unwrap();
    // GCM pads to 4 bytes: the 8 bytes of UDP header come off the MSS exactly.
    assert_eq!(m_raw.ipv4 - m_udp.ipv4, 8);
    assert_eq!(m_raw.ipv6 - m_udp.ipv6, 8);
    // The largest segment the clamp lets through fits the MTU in UDP.
    let (mut enc, _, _, _) = pair_with(udp, false);
    let mut p = Packet::from_bytes(&tcp_packet(m_udp.ipv4 as usize));
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
    assert!(p.len() <= 1500 && p.len() > 1500 - 4, "{}", p.len());
}

#[test]
fn an_ike_sa_in_udp_and_back_to_raw_esp() {
    let kept = relay_core::Kept::new();
    let table = IkeSas::shared(&kept);
    let cipher = Cipher::Aes128Gcm;
    let key = vec![5u8; cipher.key_len()];
    let e = EncryptConfig {
        cipher: None,
        spi: None,
        key_file: None,
        ike: Some("nat".into()),
        ..enc_config(cipher, "/nonexistent/k".into())
    };
    let d = DecryptConfig {
        sa: vec![],
        ike: vec!["nat".into()],
        ..dec_config(cipher, "/nonexistent/k".into(), false)
    };
    let mut enc = e
        .into_factory_kept("e", &kept)
        .unwrap()
        .build_started(&Counters::new());
    let mut dec = d
        .into_factory_kept("d", &kept)
        .unwrap()
        .build_started(&Counters::new());
    table
        .install_inbound("nat", 0x3001, cipher, false, &key)
        .unwrap();
    let encap = UdpEncap {
        src_port: 4500,
        dst_port: 31000,
    };
    table
        .set_outbound_encap("nat", 0x3001, cipher, false, &key, Some(encap))
        .unwrap();
    let mut p = Packet::from_bytes(&udp_packet(20));
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
    let d = p.data().to_vec();
    assert_eq!(d[9], 17, "UDP");
    let u = UdpPacket::new_unchecked(&d[ipv4::HEADER_LEN..]);
    assert_eq!((u.src_port(), u.dst_port()), (4500, 31000));
    // The peer's NAT maps its public port 31000 back to the peer's 4500.
    let mut d = d;
    UdpPacket::new_unchecked(&mut d[ipv4::HEADER_LEN..]).set_dst_port(4500);
    let mut q = Packet::from_bytes(&d);
    assert_eq!(dec.process(&mut q, &mut cx()), Action::Continue);
    assert_eq!(q.data(), &udp_packet(20)[..]);
    // Raw ESP again (a rekey after the NAT went away): a new SA.
    table
        .install_inbound("nat", 0x3002, cipher, false, &key)
        .unwrap();
    table
        .set_outbound("nat", 0x3002, cipher, false, &key)
        .unwrap();
    let mut p = Packet::from_bytes(&udp_packet(20));
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
    assert_eq!(p.data()[9], 50, "raw ESP");
    assert_eq!(
        dec.process(&mut Packet::from_bytes(p.data()), &mut cx()),
        Action::Continue
    );
}
