//! SAs from the IKE control plane ([`IkeSas`]): fail closed without one, a switch under
//! traffic from two queue threads loses no packet, removal and usage.

use super::*;
use relay_core::Kept;
use std::sync::Arc;

fn key(c: Cipher, tag: u8) -> Vec<u8> {
    (0..c.key_len() as u8)
        .map(|i| i.wrapping_mul(31) ^ tag)
        .collect()
}

fn ike_encrypt(conn: &str) -> EncryptConfig {
    EncryptConfig {
        cipher: None,
        spi: None,
        key_file: None,
        ike: Some(conn.into()),
        ..enc_config(Cipher::Aes128Gcm, "/nonexistent/k".into())
    }
}

fn ike_decrypt(conns: &[&str]) -> DecryptConfig {
    DecryptConfig {
        sa: vec![],
        ike: conns.iter().map(|c| c.to_string()).collect(),
        replay_window: 4096,
        ..dec_config(Cipher::Aes128Gcm, "/nonexistent/k".into(), false)
    }
}

#[test]
fn without_an_sa_packets_are_dropped_and_counted() {
    let kept = Kept::new();
    let ec = Counters::new();
    let mut enc = ike_encrypt("c")
        .into_factory_kept("e", &kept)
        .unwrap()
        .build_started(&ec);
    let mut p = Packet::from_bytes(&udp_packet(20));
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Drop);
    assert_eq!(count(&ec, "dropped_no_sa"), 1);
    let t = IkeSas::shared(&kept);
    let c = Cipher::Aes256Gcm;
    t.set_outbound("c", 0x3001, c, false, &key(c, 1)).unwrap();
    let mut p = Packet::from_bytes(&udp_packet(20));
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
    assert_eq!(esp_of(p.data()).spi, 0x3001);
    assert_eq!(esp_of(p.data()).seq_no, 1, "a fresh key starts at 1");
    t.clear_outbound("c");
    let mut p = Packet::from_bytes(&udp_packet(20));
    assert_eq!(enc.process(&mut p, &mut cx()), Action::Drop, "fails closed");
    assert_eq!(count(&ec, "dropped_no_sa"), 2);
    // Nothing on disk for IKE SAs.
    assert!(t.set_outbound("c", 5, c, false, &key(c, 1)).is_err());
    assert!(matches!(
        t.install_inbound("c", 0x3001, c, false, &[0; 3]),
        Err(IkeSaError::KeyLength { got: 3, .. })
    ));
}

#[test]
fn a_rekey_under_traffic_from_two_threads_loses_no_packet() {
    let kept = Kept::new();
    let t = IkeSas::shared(&kept);
    let c = Cipher::Aes128CbcHmac;
    let dc = Counters::new();
    let mut dec = ike_decrypt(&["c"])
        .into_factory_kept("d", &kept)
        .unwrap()
        .build_started(&dc);
    t.install_inbound("c", 0x4000, c, false, &key(c, 0))
        .unwrap();
    t.set_outbound("c", 0x4000, c, false, &key(c, 0)).unwrap();
    let factory = ike_encrypt("c").into_factory_kept("e", &kept).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let mut enc = factory.build_started(&Counters::new());
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && out.len() < 20_000 {
                    let mut p = Packet::from_bytes(&udp_packet(40));
                    assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
                    out.push(p.data().to_vec());
                }
                out
            })
        })
        .collect();
    // Rekeys as the control plane does them: the new inbound SA first, then the switch.
    for n in 1..=5u8 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        let spi = 0x4000 + u32::from(n);
        t.install_inbound("c", spi, c, false, &key(c, n)).unwrap();
        t.set_outbound("c", spi, c, false, &key(c, n)).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut sent: Vec<Vec<u8>> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    // Each SA's packets in sequence order, as one link would deliver them.
    sent.sort_by_key(|p| (esp_of(p).spi, esp_of(p).seq_no));
    let spis: std::collections::BTreeSet<u32> = sent.iter().map(|p| esp_of(p).spi).collect();
    assert!(
        spis.len() >= 3,
        "the switches happened under traffic: {spis:x?}"
    );
    let mut seen = std::collections::HashSet::new();
    for p in &sent {
        let e = esp_of(p);
        assert!(
            seen.insert((e.spi, e.seq_no)),
            "{:#x}/{} twice",
            e.spi,
            e.seq_no
        );
        let mut q = Packet::from_bytes(p);
        assert_eq!(dec.process(&mut q, &mut cx()), Action::Continue, "{e:?}");
        assert_eq!(q.data(), &udp_packet(40)[..]);
    }
    assert_eq!(count(&dc, "decrypted"), sent.len() as u64);
    // After a switch, the next packet uses the new SA.
    let mut enc = factory.build_started(&Counters::new());
    t.set_outbound("c", 0x5000, c, true, &key(c, 9)).unwrap();
    let mut p = Packet::from_bytes(&udp_packet(40));
    enc.process(&mut p, &mut cx());
    assert_eq!(esp_of(p.data()).spi, 0x5000);
    // Usage per SA; a removed inbound SA's packets are dropped as of an unknown SPI.
    let (bytes, packets) = t.usage("c", 0x4000).unwrap();
    assert!(packets > 0 && bytes > packets * 40, "{bytes} {packets}");
    assert_eq!(t.usage("c", 0x5000), Some((p.data().len() as u64 - 20, 1)));
    t.remove_inbound("c", 0x4000);
    assert_eq!(t.usage("c", 0x4000), None);
    let old = sent.iter().find(|p| esp_of(p).spi == 0x4000).unwrap();
    assert_eq!(
        dec.process(&mut Packet::from_bytes(old), &mut cx()),
        Action::Drop
    );
    assert_eq!(count(&dc, "dropped_unknown_spi"), 1);
}

#[test]
fn ike_and_manual_keys_exclude_each_other() {
    let k = key_file("ike-cfg", Cipher::Aes128Gcm);
    let both = EncryptConfig {
        ike: Some("c".into()),
        ..enc_config(Cipher::Aes128Gcm, k.clone())
    };
    let e = both.into_factory("e").err().unwrap();
    assert!(e.message().contains("ike excludes spi"), "{e}");
    let neither = EncryptConfig {
        ike: None,
        spi: None,
        ..enc_config(Cipher::Aes128Gcm, k.clone())
    };
    let e = neither.into_factory("e").err().unwrap();
    assert!(e.message().contains("spi, cipher and key_file"), "{e}");
    let e = ike_decrypt(&[]).into_factory("d").err().unwrap();
    assert!(e.message().contains("at least one SA or IKE"), "{e}");
    let tunnel = DecryptConfig {
        ike_mode: EspMode::Tunnel,
        ..ike_decrypt(&["c"])
    };
    assert!(
        tunnel
            .into_factory("d")
            .err()
            .unwrap()
            .message()
            .contains("ike_peer")
    );
    // As written in a file: `ike` instead of the manual keys, beside `[[sa]]`.
    let cfg: EncryptConfig = toml::from_str("ike = \"site-b\"").unwrap();
    assert!(cfg.into_factory("e").is_ok());
    let cfg: DecryptConfig = toml::from_str(&format!(
        "ike = [\"site-b\"]\nstate_dir = \"{}\"\n[[sa]]\nspi = 4097\ncipher = \"aes-128-gcm\"\nkey_file = \"{}\"",
        state_dir_of(&k).display(),
        k.display()
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(cfg.into_factory("d").is_ok());
}

/// An inbound IKE SA carries only what its traffic selectors allow: a packet the peer
/// authenticated but addressed outside them is dropped after decryption (RFC 4301 5.2).
#[test]
fn packets_outside_the_child_sas_selectors_are_dropped() {
    let kept = Kept::new();
    let t = IkeSas::shared(&kept);
    let c = Cipher::Aes128Gcm;
    let dc = Counters::new();
    let mut dec = ike_decrypt(&["c"])
        .into_factory_kept("d", &kept)
        .unwrap()
        .build_started(&dc);
    let mut enc = ike_encrypt("c")
        .into_factory_kept("e", &kept)
        .unwrap()
        .build_started(&Counters::new());
    let sel = |a: &str, b: &str, protocol: u8, ports: (u16, u16)| Selector {
        start: a.parse().unwrap(),
        end: b.parse().unwrap(),
        protocol,
        start_port: ports.0,
        end_port: ports.1,
    };
    // udp_packet is 10.0.1.1:4000 -> 10.0.2.2:5000.
    for (spi, local_port, delivered) in [(0x6001, 5000, true), (0x6002, 6000, false)] {
        let ts = Selectors {
            remote: vec![sel("10.0.1.0", "10.0.1.255", 0, (0, 65535))],
            local: vec![sel("10.0.2.2", "10.0.2.2", 17, (local_port, local_port))],
            nat_peer: None,
        };
        t.install_inbound_with("c", spi, c, false, &key(c, 3), Some(ts))
            .unwrap();
        t.set_outbound("c", spi, c, false, &key(c, 3)).unwrap();
        let mut p = Packet::from_bytes(&udp_packet(30));
        assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
        let want = if delivered {
            Action::Continue
        } else {
            Action::Drop
        };
        assert_eq!(dec.process(&mut p, &mut cx()), want, "SPI {spi:#x}");
        t.remove_inbound("c", spi);
    }
    assert_eq!(count(&dc, "decrypted"), 1);
    assert_eq!(count(&dc, "dropped_outside_ts"), 1);
}
