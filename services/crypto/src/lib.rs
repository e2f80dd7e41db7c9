//! On-path encryption (seed 000, sections 3.4 and 4.2) as two relayd services speaking
//! standard ESP (RFC 4303), so any IPsec-aware tool reads what they send: `encrypt`
//! protects the payload of forwarded packets towards a peer relay, `decrypt` checks and
//! restores it there. Suites: AES-GCM (RFC 4106) and AES-CBC (RFC 3602) with
//! HMAC-SHA-256-128 (RFC 4868); anti-replay per RFC 4303 3.4.3.

mod durable;
mod esp;
mod keys;
mod live;
pub mod persist;
mod sa;
mod selectors;
mod state;
mod table;
mod window;

pub use esp::{DecryptConfig, Encap, EncryptConfig, EspMode, NATT_PORT, SaConfig, UdpEncap};
pub use keys::{Cipher, ICV_LEN, KeyFileError, keygen, load_key, open_secret};
pub use relay_core::Prefix;
pub use sa::{AuthFailed, BadLength, SaCrypto};
pub use selectors::{Selector, Selectors};
pub use table::{IkeSaError, IkeSas};
pub use window::{Replay, ReplayWindow};

#[cfg(test)]
mod tests {
    mod ike;
    mod local_delivery;
    mod natt;
    mod restart;
    mod started;

    use super::*;
    use relay_core::wire::esp::HEADER_LEN as ESP_LEN;
    use relay_core::wire::{
        EspPacket, EspRepr, IcmpPacket, Icmpv4Repr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr,
        UdpPacket, UdpRepr, checksum, ipv4, udp,
    };
    use relay_core::{Action, Context, Counters, Packet, Service, ServiceConfig};
    use started::BuildStarted;
    use std::net::Ipv4Addr;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Instant;

    fn key_file(tag: &str, cipher: Cipher) -> std::path::PathBuf {
        // A directory per key: tests run in parallel, and a directory is made anew.
        let p = keys::test_key_dir(&format!("esp-{tag}")).join(format!("{tag}.key"));
        // Each test its own key: SAs with one SPI and key share state (as across reloads).
        let salt: usize = tag.bytes().map(usize::from).sum();
        let hex: String = (0..cipher.key_len())
            .map(|i| format!("{:02x}", (i * 7 + salt) % 251))
            .collect();
        std::fs::write(&p, hex).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }

    /// A UDP datagram 10.0.1.1:4000 -> 10.0.2.2:5000 (DF, identification 1, no UDP
    /// checksum) with `n` bytes of data 0, 1, 2, ...
    fn udp_packet(n: usize) -> Vec<u8> {
        let u = UdpRepr {
            src_port: 4000,
            dst_port: 5000,
            payload_len: n,
        };
        let mut ip = Ipv4Repr::new(
            Ipv4Addr::new(10, 0, 1, 1),
            Ipv4Addr::new(10, 0, 2, 2),
            17,
            u.buffer_len(),
        );
        ip.ident = 1;
        let mut b = vec![0u8; ip.buffer_len()];
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]));
        let mut d = UdpPacket::new_unchecked(&mut b[ipv4::HEADER_LEN..]);
        u.emit(&mut d);
        for (i, x) in d.payload_mut().iter_mut().enumerate() {
            *x = i as u8;
        }
        b
    }

    fn enc_config(cipher: Cipher, key_file: std::path::PathBuf) -> EncryptConfig {
        EncryptConfig {
            state_dir: Some(state_dir_of(&key_file)),
            mode: EspMode::Transport,
            cipher: Some(cipher),
            spi: Some(0x1001),
            key_file: Some(key_file),
            ike: None,
            esn: false,
            local: None,
            remote: None,
            mtu: 1500,
            sequence_reserve: 65536,
            encap: Encap::None,
            encap_port: None,
            encap_source_port: None,
        }
    }

    /// The state directory of the tests using `key_file`: beside it, made on first use.
    fn state_dir_of(key_file: &std::path::Path) -> std::path::PathBuf {
        key_file.parent().unwrap().join("state")
    }

    fn dec_config(cipher: Cipher, key_file: std::path::PathBuf, esn: bool) -> DecryptConfig {
        DecryptConfig {
            state_dir: Some(state_dir_of(&key_file)),
            ike: vec![],
            ike_mode: EspMode::Transport,
            ike_peer: None,
            replay_window: 64,
            encap_port: NATT_PORT,
            sa: vec![SaConfig {
                spi: 0x1001,
                cipher,
                key_file,
                esn,
                mode: EspMode::Transport,
                peer: None,
            }],
        }
    }

    /// An encrypting and a decrypting instance, and the counters of each.
    fn pair_with(
        e: EncryptConfig,
        esn: bool,
    ) -> (Box<dyn Service>, Box<dyn Service>, Counters, Counters) {
        pair_kept(e, esn, &relay_core::Kept::new())
    }

    /// [`pair_with`], the SAs' state in `kept`.
    fn pair_kept(
        e: EncryptConfig,
        esn: bool,
        kept: &relay_core::Kept,
    ) -> (Box<dyn Service>, Box<dyn Service>, Counters, Counters) {
        let mut d = dec_config(e.cipher.unwrap(), e.key_file.clone().unwrap(), esn);
        // The receiving SA knows the sender's mode, and in tunnel mode its address.
        d.sa[0].mode = e.mode;
        d.sa[0].peer = e.local.map(|a| a.to_string().parse().unwrap());
        let (ec, dc) = (Counters::new(), Counters::new());
        (
            e.into_factory_kept("e", kept).unwrap().build_started(&ec),
            d.into_factory_kept("d", kept).unwrap().build_started(&dc),
            ec,
            dc,
        )
    }

    fn pair(cipher: Cipher, name: &str) -> (Box<dyn Service>, Box<dyn Service>, Counters) {
        let (e, d, _, dc) = pair_with(enc_config(cipher, key_file(name, cipher)), false);
        (e, d, dc)
    }

    /// `udp_packet` from 127.0.0.1, so that any ICMP error about it stays on loopback.
    fn loopback_packet(n: usize) -> Vec<u8> {
        let mut b = udp_packet(n);
        let mut ip = Ipv4Packet::new_unchecked(&mut b[..]);
        ip.set_src_addr(Ipv4Addr::LOCALHOST);
        ip.fill_checksum();
        b
    }

    /// A UDP datagram [fd00:1::1]:4000 -> [fd00:2::2]:5000 (UDP checksum 0x1234, not
    /// the right one) with `n` bytes of data 0, 3, 6, ...
    fn udp6_packet(n: usize) -> Vec<u8> {
        let u = UdpRepr {
            src_port: 4000,
            dst_port: 5000,
            payload_len: n,
        };
        let ip = Ipv6Repr::new(
            "fd00:1::1".parse().unwrap(),
            "fd00:2::2".parse().unwrap(),
            17,
            u.buffer_len(),
        );
        let mut b = vec![0u8; ip.buffer_len()];
        ip.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
        let mut d = UdpPacket::new_unchecked(&mut b[ip.header_len()..]);
        u.emit(&mut d);
        d.set_checksum(0x1234);
        for (i, x) in d.payload_mut().iter_mut().enumerate() {
            *x = (i * 3) as u8;
        }
        b
    }

    /// `pkt` made a later fragment (offset 128, DF and MF clear), checksum fixed.
    fn later_fragment(mut pkt: Vec<u8>) -> Vec<u8> {
        let mut ip = Ipv4Packet::new_unchecked(&mut pkt[..]);
        ip.set_dont_frag(false);
        ip.set_frag_offset(128);
        ip.fill_checksum();
        pkt
    }

    /// The ESP header of an ESP-over-IPv4 packet (no IP options).
    fn esp_of(d: &[u8]) -> EspRepr {
        EspRepr::parse(&EspPacket::new_unchecked(&d[ipv4::HEADER_LEN..])).unwrap()
    }

    fn cx() -> Context {
        Context::new(0, Instant::now())
    }

    fn count(c: &Counters, name: &str) -> u64 {
        c.snapshot()
            .into_iter()
            .find(|x| x.0 == name)
            .map_or(0, |x| x.2)
    }

    #[test]
    fn esp_layout_is_rfc_4303_and_round_trips_for_every_suite() {
        for (name, cipher) in Cipher::ALL {
            let (mut enc, mut dec, dc) = pair(cipher, name);
            for n in [0usize, 1, 13, 14, 15, 16, 100, 1372] {
                let orig = udp_packet(n);
                let mut p = Packet::from_bytes(&orig);
                assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
                let d = p.data().to_vec();
                let ip = Ipv4Packet::new_checked(&d[..]).unwrap();
                assert_eq!(
                    (ip.protocol(), ip.total_len() as usize),
                    (50, d.len()),
                    "{name}"
                );
                assert!(ip.verify_checksum());
                assert_eq!(esp_of(&d).spi, 0x1001, "SPI");
                let seq = esp_of(&d).seq_no;
                assert!(seq >= 1);
                if cipher.is_gcm() {
                    assert_eq!(
                        &EspPacket::new_unchecked(ip.payload()).payload()[..8],
                        &(seq as u64).to_be_bytes(),
                        "GCM explicit IV = sequence number"
                    );
                }
                let enc_len = d.len() - ipv4::HEADER_LEN - ESP_LEN - cipher.iv_len() - ICV_LEN;
                assert_eq!(
                    enc_len % cipher.block(),
                    0,
                    "{name}: payload + trailer aligned"
                );
                let udp = udp::HEADER_LEN + n;
                assert!(enc_len >= udp + 2 && enc_len < udp + 2 + cipher.block());
                // The peer restores every byte, checksum included.
                let mut q = Packet::from_bytes(&d);
                assert_eq!(
                    dec.process(&mut q, &mut cx()),
                    Action::Continue,
                    "{name} n={n}"
                );
                assert_eq!(q.data(), &orig[..], "{name} n={n}");
                // The same packet again is a replay.
                assert_eq!(
                    dec.process(&mut Packet::from_bytes(&d), &mut cx()),
                    Action::Drop
                );
                // A fresh packet with one flipped byte fails the ICV (and does not move the window).
                let mut p2 = Packet::from_bytes(&orig);
                enc.process(&mut p2, &mut cx());
                let mut t = p2.data().to_vec();
                let last = t.len() - 1;
                t[last] ^= 0x80;
                assert_eq!(
                    dec.process(&mut Packet::from_bytes(&t), &mut cx()),
                    Action::Drop
                );
                // The untampered one still arrives afterwards.
                assert_eq!(
                    dec.process(&mut Packet::from_bytes(p2.data()), &mut cx()),
                    Action::Continue
                );
            }
            assert_eq!(count(&dc, "decrypted"), 16);
            assert_eq!(count(&dc, "dropped_replayed"), 8);
            assert_eq!(count(&dc, "dropped_auth_failed"), 8);
            let _ = checksum::checksum(&[]);
        }
    }

    #[test]
    fn fails_closed_and_refuses_bad_configuration() {
        let (mut enc, mut dec, dc) = pair(Cipher::Aes128Gcm, "closed");
        // A later fragment cannot be protected in transport mode: dropped, never sent clear.
        let frag = later_fragment(udp_packet(100));
        assert_eq!(
            enc.process(&mut Packet::from_bytes(&frag), &mut cx()),
            Action::Drop
        );
        // Not ESP: the decrypting relay passes it on.
        assert_eq!(
            dec.process(&mut Packet::from_bytes(&udp_packet(10)), &mut cx()),
            Action::Continue
        );
        // Unknown SPI, truncated ESP.
        let mut p = Packet::from_bytes(&udp_packet(100));
        enc.process(&mut p, &mut cx());
        let mut other = p.data().to_vec();
        EspPacket::new_unchecked(&mut other[ipv4::HEADER_LEN..]).set_spi(0x1002);
        assert_eq!(
            dec.process(&mut Packet::from_bytes(&other), &mut cx()),
            Action::Drop
        );
        for cut in ipv4::HEADER_LEN..p.len() {
            let mut b = p.data()[..cut].to_vec();
            Ipv4Packet::new_unchecked(&mut b[..]).set_total_len(cut as u16);
            assert_eq!(
                dec.process(&mut Packet::from_bytes(&b), &mut cx()),
                Action::Drop,
                "cut {cut}"
            );
        }
        assert_eq!(count(&dc, "dropped_unknown_spi"), 1);
        let k = key_file("cfg", Cipher::Aes128Gcm);
        let bad = |spi| EncryptConfig {
            spi: Some(spi),
            ..enc_config(Cipher::Aes128Gcm, k.clone())
        };
        assert!(bad(5).into_factory("e").is_err(), "reserved SPI");
        let tunnel = EncryptConfig {
            mode: EspMode::Tunnel,
            ..bad(0x1001)
        };
        let e = tunnel.clone().into_factory("e").err().unwrap();
        assert!(e.message().contains("needs local"), "{e}");
        let mixed = EncryptConfig {
            local: Some("192.0.2.1".parse().unwrap()),
            remote: Some("2001:db8::2".parse().unwrap()),
            ..tunnel
        };
        assert!(
            mixed
                .into_factory("e")
                .err()
                .unwrap()
                .message()
                .contains("family")
        );
        let transport_with_peer = EncryptConfig {
            remote: Some("192.0.2.2".parse().unwrap()),
            ..bad(0x1001)
        };
        assert!(transport_with_peer.into_factory("e").is_err());
        let cfg: EncryptConfig = toml::from_str(&format!(
            "cipher = \"aes-256-gcm\"\nspi = \"0x2001\"\nkey_file = \"{}\"",
            k.display()
        ))
        .unwrap();
        assert!(
            cfg.into_factory("e")
                .err()
                .unwrap()
                .message()
                .contains("takes 36")
        );
    }

    /// 6in4: an IPv6 packet queued from an IPv6 hook, in a tunnel with IPv4 ends. The
    /// verdict cannot carry the ESP packet: it is emitted and the original dropped; the
    /// peer's decrypt, on an IPv4 hook, forwards the inner IPv6 packet (hop limit less
    /// one) the same way.
    #[test]
    fn a_tunnel_of_the_other_family_emits_and_forwards() {
        let cipher = Cipher::Aes128Gcm;
        let e = EncryptConfig {
            mode: EspMode::Tunnel,
            local: Some("192.0.2.1".parse().unwrap()),
            remote: Some("192.0.2.2".parse().unwrap()),
            ..enc_config(cipher, key_file("six-in-four", cipher))
        };
        let (mut enc, mut dec, ec, dc) = pair_with(e, false);
        let orig = udp6_packet(300);
        let mut p = Packet::from_bytes(&orig);
        p.meta.hw_protocol = 0x86dd;
        let mut out = cx();
        assert_eq!(enc.process(&mut p, &mut out), Action::Drop, "the original");
        let sent: Vec<_> = out.outbox().iter().collect();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].route, relay_core::Route::Originate);
        assert_eq!(sent[0].destination, std::net::IpAddr::from([192, 0, 2, 2]));
        let esp = sent[0].bytes.to_vec();
        assert_eq!(
            Ipv4Packet::new_checked(&esp[..]).unwrap().protocol(),
            50,
            "ESP over IPv4"
        );
        assert_eq!(out.outbox_mut().settle_all_sent(), 1);
        assert_eq!(count(&ec, "reinjected"), 1);

        let mut q = Packet::from_bytes(&esp);
        q.meta.hw_protocol = 0x0800;
        let mut back = cx();
        assert_eq!(
            dec.process(&mut q, &mut back),
            Action::Drop,
            "the ESP packet"
        );
        let fwd: Vec<_> = back.outbox().iter().collect();
        assert_eq!(fwd.len(), 1);
        assert_eq!(fwd[0].route, relay_core::Route::Forward);
        let mut want = orig.clone();
        let mut w = Ipv6Packet::new_unchecked(&mut want[..]);
        w.set_hop_limit(w.hop_limit() - 1);
        assert_eq!(
            fwd[0].bytes,
            &want[..],
            "the inner packet, hop limit less one"
        );
        assert_eq!(count(&dc, "decrypted"), 1);
    }

    #[test]
    fn tunnel_mode_wraps_the_whole_packet_and_restores_it() {
        for (name, cipher) in Cipher::ALL {
            let k = key_file(&format!("tunnel-{name}"), cipher);
            let e = EncryptConfig {
                mode: EspMode::Tunnel,
                local: Some("192.0.2.1".parse().unwrap()),
                remote: Some("192.0.2.2".parse().unwrap()),
                ..enc_config(cipher, k)
            };
            let (mut enc, mut dec, _, dc) = pair_with(e, false);
            // A later fragment and an IPv6 packet are fine in tunnel mode.
            let frag = later_fragment(udp_packet(200));
            for orig in [udp_packet(0), udp_packet(1000), frag, udp6_packet(77)] {
                let mut p = Packet::from_bytes(&orig);
                assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue, "{name}");
                let d = p.data().to_vec();
                let ip = Ipv4Packet::new_checked(&d[..]).unwrap();
                assert_eq!(ip.protocol(), 50);
                assert_eq!(ip.total_len() as usize, d.len());
                assert!(ip.verify_checksum());
                assert_eq!(
                    (ip.src_addr(), ip.dst_addr()),
                    (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2))
                );
                assert_eq!(ip.ttl(), 64, "outer TTL");
                let inner_df = relay_core::IpVersion::of(&orig) == Some(relay_core::IpVersion::V6)
                    || Ipv4Packet::new_unchecked(&orig[..]).dont_frag();
                assert_eq!(ip.dont_frag(), inner_df, "DF copied");
                assert_eq!(esp_of(&d).spi, 0x1001);
                // Nothing of the inner packet is visible.
                assert!(
                    !d.windows(8).any(|w| w == &orig[12..20]),
                    "{name}: inner addresses in clear"
                );
                let mut q = Packet::from_bytes(&d);
                assert_eq!(dec.process(&mut q, &mut cx()), Action::Continue, "{name}");
                assert_eq!(q.data(), &orig[..], "{name}");
            }
            assert_eq!(count(&dc, "decrypted"), 4);
        }
    }

    #[test]
    fn extended_sequence_numbers_cross_2_pow_32() {
        for esn in [true, false] {
            let cipher = Cipher::Aes256Gcm;
            let k = key_file(&format!("esn-{esn}"), cipher);
            let key = load_key(&k, cipher).unwrap();
            let kept = relay_core::Kept::new();
            let (mut enc, mut dec, ec, dc) = pair_kept(
                EncryptConfig {
                    esn,
                    ..enc_config(cipher, k)
                },
                esn,
                &kept,
            );
            let mut low_bytes = Vec::new();
            esp::jump_sequence(&kept, 0x1001, cipher, &key, u32::MAX as u64 - 3);
            for i in 0..10 {
                let orig = udp_packet(50 + i);
                let mut p = Packet::from_bytes(&orig);
                let a = enc.process(&mut p, &mut cx());
                if a == Action::Continue {
                    low_bytes.push(esp_of(p.data()).seq_no as u8);
                    // The window sits at the end of a subspace: the peer infers the next one.
                    let mut q = Packet::from_bytes(p.data());
                    assert_eq!(
                        dec.process(&mut q, &mut cx()),
                        Action::Continue,
                        "esn={esn} i={i}"
                    );
                    assert_eq!(q.data(), &orig[..]);
                }
            }
            if esn {
                assert_eq!(count(&dc, "decrypted"), 10);
                assert_eq!(
                    low_bytes[3..7],
                    [255, 0, 1, 2],
                    "the low half sent wraps after 2^32 - 1"
                );
            } else {
                // Without ESN the counter may not wrap: the SA stops until rotated.
                assert_eq!(count(&dc, "decrypted"), 4);
                assert_eq!(count(&ec, "dropped_seq_exhausted"), 6);
            }
        }
    }

    /// An IPv4 ESP packet from 10.0.1.1 to 10.0.2.2 for SPI 0x1001 and `seq`, whose
    /// encrypted body is `body` exactly (no padding added), sealed with the SA's real key:
    /// its ICV verifies whatever the body holds.
    fn forged(sa: &SaCrypto, seq: u32, body: &[u8]) -> Vec<u8> {
        let c = sa.cipher();
        let body_at = ESP_LEN + c.iv_len();
        let mut ip = Ipv4Repr::new(
            Ipv4Addr::new(10, 0, 1, 1),
            Ipv4Addr::new(10, 0, 2, 2),
            50,
            body_at + body.len() + ICV_LEN,
        );
        (ip.ident, ip.dont_frag) = (9, false);
        let mut p = vec![0u8; ip.buffer_len()];
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut p[..]));
        let esp = &mut p[ipv4::HEADER_LEN..];
        EspRepr {
            spi: 0x1001,
            seq_no: seq,
        }
        .emit(&mut EspPacket::new_unchecked(&mut esp[..]));
        esp[body_at..body_at + body.len()].copy_from_slice(body);
        sa.seal_unchecked(seq as u64, false, esp);
        p
    }

    #[test]
    fn authenticated_but_malformed_bodies_are_dropped_and_counted() {
        for (name, cipher) in Cipher::ALL {
            let k = key_file(&format!("malformed-{name}"), cipher);
            let sa = SaCrypto::new(cipher, &load_key(&k, cipher).unwrap());
            let (_, mut dec, _, dc) = pair_with(enc_config(cipher, k), false);
            let b = cipher.block();
            // A body too large for its pad length: pad length 200 in a one-block body.
            let mut big_pad = vec![0u8; b];
            big_pad[b - 2] = 200;
            big_pad[b - 1] = 17;
            let mut cases: Vec<(&str, Vec<u8>)> = vec![
                ("empty body", vec![]),
                ("one byte", vec![17]),
                ("pad length beyond the body", big_pad),
                ("one byte short of a block", vec![0; b - 1]),
            ];
            if !cipher.is_gcm() {
                cases.push(("CBC body of 20 bytes", vec![0; 20]));
            }
            let mut seq = 0;
            for (what, body) in &cases {
                seq += 1;
                let before = count(&dc, "dropped_malformed");
                let mut p = Packet::from_bytes(&forged(&sa, seq, body));
                assert_eq!(
                    dec.process(&mut p, &mut cx()),
                    Action::Drop,
                    "{name}: {what}"
                );
                assert_eq!(
                    count(&dc, "dropped_malformed"),
                    before + 1,
                    "{name}: {what} counted as malformed"
                );
            }
            assert_eq!(count(&dc, "dropped_auth_failed"), 0, "{name}");
            assert_eq!(count(&dc, "decrypted"), 0, "{name}");
            // A well-formed body sealed the same way (all padding, next header 17) passes:
            // the forging itself is right.
            let mut ok = vec![0u8; b];
            for (i, x) in ok[..b - 2].iter_mut().enumerate() {
                *x = i as u8 + 1;
            }
            ok[b - 2] = (b - 2) as u8;
            ok[b - 1] = 17;
            let mut p = Packet::from_bytes(&forged(&sa, 100, &ok));
            assert_eq!(dec.process(&mut p, &mut cx()), Action::Continue, "{name}");
            assert_eq!(
                p.len(),
                ipv4::HEADER_LEN,
                "{name}: nothing but the IP header left"
            );
        }
    }

    #[test]
    fn only_the_sa_peer_may_use_it_and_modes_do_not_mix() {
        let cipher = Cipher::Aes128CbcHmac;
        let k = key_file("peer", cipher);
        let tunnel = EncryptConfig {
            mode: EspMode::Tunnel,
            local: Some("192.0.2.1".parse().unwrap()),
            remote: Some("192.0.2.2".parse().unwrap()),
            ..enc_config(cipher, k.clone())
        };
        let (mut enc, mut dec, _, dc) = pair_with(tunnel, false);
        let mut p = Packet::from_bytes(&udp_packet(100));
        assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
        let good = p.data().to_vec();
        // The same packet from another source: dropped before the ICV is even computed,
        // so a corrupt ICV makes no difference, and the window does not move.
        let mut stranger = good.clone();
        let last = stranger.len() - 1;
        stranger[last] ^= 1;
        let mut ip = Ipv4Packet::new_unchecked(&mut stranger[..]);
        ip.set_src_addr(Ipv4Addr::new(203, 0, 113, 9));
        ip.fill_checksum();
        assert_eq!(
            dec.process(&mut Packet::from_bytes(&stranger), &mut cx()),
            Action::Drop
        );
        assert_eq!(count(&dc, "dropped_unknown_peer"), 1);
        assert_eq!(
            count(&dc, "dropped_auth_failed"),
            0,
            "no ICV work for strangers"
        );
        let mut q = Packet::from_bytes(&good);
        assert_eq!(dec.process(&mut q, &mut cx()), Action::Continue);
        assert_eq!(q.data(), &udp_packet(100)[..]);

        // A tunnel SA needs its peer.
        let mut no_peer = dec_config(cipher, k.clone(), false);
        no_peer.sa[0].mode = EspMode::Tunnel;
        let e = no_peer.into_factory("d").err().unwrap();
        assert!(e.message().contains("needs peer"), "{e}");

        // A transport SA does not decapsulate a tunnel packet, even an authentic one
        // from its peer; a tunnel SA does not take a transport packet.
        let k2 = key_file("mode", cipher);
        let (mut enc_t, _, _, _) = pair_with(
            EncryptConfig {
                mode: EspMode::Tunnel,
                local: Some("10.0.1.1".parse().unwrap()),
                remote: Some("10.0.2.2".parse().unwrap()),
                ..enc_config(cipher, k2.clone())
            },
            false,
        );
        let mut transport_sa = dec_config(cipher, k2.clone(), false);
        transport_sa.sa[0].peer = Some("10.0.1.0/24".parse().unwrap());
        let dc2 = Counters::new();
        let mut dec_t = transport_sa.into_factory("d").unwrap().build_started(&dc2);
        let mut p = Packet::from_bytes(&udp_packet(10));
        assert_eq!(enc_t.process(&mut p, &mut cx()), Action::Continue);
        assert_eq!(dec_t.process(&mut p, &mut cx()), Action::Drop);
        assert_eq!(count(&dc2, "dropped_wrong_mode"), 1);
        assert_eq!(
            count(&dc2, "dropped_unknown_peer"),
            0,
            "10.0.1.1 is in 10.0.1.0/24"
        );

        let k3 = key_file("mode3", cipher);
        let (mut enc_p, _, _, _) = pair_with(enc_config(cipher, k3.clone()), false);
        let mut tunnel_sa = dec_config(cipher, k3, false);
        tunnel_sa.sa[0].mode = EspMode::Tunnel;
        tunnel_sa.sa[0].peer = Some("10.0.1.1".parse().unwrap());
        let dc3 = Counters::new();
        let mut dec_p = tunnel_sa.into_factory("d").unwrap().build_started(&dc3);
        let mut p = Packet::from_bytes(&udp_packet(10));
        assert_eq!(enc_p.process(&mut p, &mut cx()), Action::Continue);
        assert_eq!(dec_p.process(&mut p, &mut cx()), Action::Drop);
        assert_eq!(count(&dc3, "dropped_wrong_mode"), 1);

        // In configuration: an address or a prefix.
        let cfg: DecryptConfig = toml::from_str(&format!(
            "[[sa]]\nspi = 4097\ncipher = \"aes-128-cbc-hmac-sha256\"\nkey_file = \"{}\"\n\
             mode = \"tunnel\"\npeer = \"2001:db8::1\"",
            k.display()
        ))
        .unwrap();
        assert!(cfg.into_factory("d").is_ok());
        let bad: Result<DecryptConfig, _> = toml::from_str(&format!(
            "[[sa]]\nspi = 4097\ncipher = \"aes-128-gcm\"\nkey_file = \"{}\"\npeer = \"b\"",
            k.display()
        ));
        assert!(bad.unwrap_err().to_string().contains("not an address"));
    }

    #[test]
    fn seal_refuses_what_cannot_be_an_esp_packet() {
        for (name, cipher) in Cipher::ALL {
            let sa = SaCrypto::new(cipher, &vec![7u8; cipher.key_len()]);
            let min = ESP_LEN + cipher.iv_len() + ICV_LEN;
            for len in [0, min - 1, min + 1, min + cipher.block() + 1] {
                let mut b = vec![0u8; len];
                assert_eq!(sa.seal(1, false, &mut b), Err(BadLength), "{name} {len}");
                assert!(b.iter().all(|&x| x == 0), "{name}: left as it was");
            }
            let mut b = vec![0u8; min + cipher.block()];
            assert_eq!(sa.seal(1, false, &mut b), Ok(()));
            assert_eq!(sa.open(None, &mut b), Ok(()));
        }
    }

    #[test]
    fn too_big_for_the_path_is_refused_as_a_router_would() {
        for (name, cipher) in Cipher::ALL {
            let k = key_file(&format!("mtu-{name}"), cipher);
            let e = EncryptConfig {
                mtu: 1400,
                ..enc_config(cipher, k)
            };
            let mss = e
                .clone()
                .into_factory("e")
                .unwrap()
                .manifest()
                .clamp_mss
                .unwrap();
            let (mut enc, mut dec, ec, _) = pair_with(e, false);
            // The largest packet the MSS allows (IP + TCP headers = 40) just fits ...
            let max = mss.ipv4 as usize + 40;
            let mut p = Packet::from_bytes(&loopback_packet(max - 28));
            assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue, "{name}");
            assert!(
                p.len() <= 1400 && p.len() > 1400 - cipher.block(),
                "{name}: {}",
                p.len()
            );
            assert_eq!(
                dec.process(&mut Packet::from_bytes(p.data()), &mut cx()),
                Action::Continue
            );
            // ... one more byte does not: with DF it is dropped and its sender told,
            // without DF it goes out and the kernel fragments it.
            let bigger = loopback_packet(max - 28 + cipher.block());
            let mut out = cx();
            assert_eq!(
                enc.process(&mut Packet::from_bytes(&bigger), &mut out),
                Action::Drop,
                "{name}"
            );
            assert_eq!(count(&ec, "dropped_too_big"), 1);
            let errors: Vec<_> = out.outbox().iter().collect();
            assert_eq!(errors.len(), 1, "{name}: one error emitted");
            let icmp = IcmpPacket::new_checked(&errors[0].bytes[ipv4::HEADER_LEN..]).unwrap();
            let Ok(Icmpv4Repr::FragNeeded { mtu }) = Icmpv4Repr::parse(&icmp) else {
                panic!("{name}: not fragmentation needed");
            };
            let told = mtu as usize;
            assert!(
                (max..bigger.len()).contains(&told),
                "{name}: told {told}, what fits is {max}.."
            );
            assert_eq!(
                &icmp.data()[..28],
                &bigger[..28],
                "{name}: the packet quoted"
            );
            let mut no_df = bigger.clone();
            let mut ip = Ipv4Packet::new_unchecked(&mut no_df[..]);
            ip.set_dont_frag(false);
            ip.fill_checksum();
            let mut p = Packet::from_bytes(&no_df);
            assert_eq!(enc.process(&mut p, &mut cx()), Action::Continue);
            assert!(p.len() > 1400);
            // IPv6 headers take 20 more bytes (give or take what the padding had spare).
            let less = (mss.ipv4 - mss.ipv6) as usize;
            assert!(
                (21 - cipher.block()..20 + cipher.block()).contains(&less),
                "{name}: {mss:?}"
            );
        }
    }
}
