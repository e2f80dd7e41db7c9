//! On-path encryption (seed 000, sections 3.4 and 4.2) as two relayd services speaking
//! standard ESP (RFC 4303), so any IPsec-aware tool reads what they send: `encrypt`
//! protects the payload of forwarded packets towards a peer relay, `decrypt` checks and
//! restores it there. Suites: AES-GCM (RFC 4106) and AES-CBC (RFC 3602) with
//! HMAC-SHA-256-128 (RFC 4868); anti-replay per RFC 4303 3.4.3.

mod esp;
mod keys;
mod sa;
mod window;

pub use esp::{DecryptConfig, EncryptConfig, EspMode, SaConfig};
pub use keys::{Cipher, ICV_LEN, keygen, load_key};
pub use sa::{AuthFailed, SaCrypto};
pub use window::{Replay, ReplayWindow};

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::wire::{Ipv4Packet, checksum};
    use relay_core::{Action, Context, Counters, Packet, Service, ServiceConfig};
    use std::os::unix::fs::PermissionsExt;
    use std::time::Instant;

    fn key_file(tag: &str, cipher: Cipher) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("relayd-esp-{}-{tag}.key", std::process::id()));
        let hex: String = (0..cipher.key_len())
            .map(|i| format!("{:02x}", i * 7 % 251))
            .collect();
        std::fs::write(&p, hex).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }

    fn udp_packet(n: usize) -> Vec<u8> {
        let mut b = vec![
            0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
        ];
        b.extend_from_slice(&[0x0f, 0xa0, 0x13, 0x88]);
        b.extend_from_slice(&((8 + n) as u16).to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend((0..n).map(|i| i as u8));
        let total = b.len() as u16;
        b[2..4].copy_from_slice(&total.to_be_bytes());
        Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        b
    }

    fn pair(cipher: Cipher, name: &str) -> (Box<dyn Service>, Box<dyn Service>, Counters) {
        let k = key_file(name, cipher);
        let e = EncryptConfig {
            mode: EspMode::Transport,
            cipher,
            spi: 0x1001,
            key_file: k.clone(),
        };
        let d = DecryptConfig {
            replay_window: 64,
            sa: vec![SaConfig {
                spi: 0x1001,
                cipher,
                key_file: k,
            }],
        };
        let dc = Counters::new();
        (
            e.into_factory("e").unwrap().build(&Counters::new()),
            d.into_factory("d").unwrap().build(&dc),
            dc,
        )
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
                assert_eq!(enc.process(&mut p, &cx()), Action::Continue);
                let d = p.data().to_vec();
                let ip = Ipv4Packet::new_checked(&d[..]).unwrap();
                assert_eq!(
                    (ip.protocol(), ip.total_len() as usize),
                    (50, d.len()),
                    "{name}"
                );
                assert!(ip.verify_checksum());
                assert_eq!(&d[20..24], &[0, 0, 0x10, 0x01], "SPI");
                let seq = u32::from_be_bytes(d[24..28].try_into().unwrap());
                assert!(seq >= 1);
                if cipher.is_gcm() {
                    assert_eq!(
                        &d[28..36],
                        &(seq as u64).to_be_bytes(),
                        "GCM explicit IV = sequence number"
                    );
                }
                let enc_len = d.len() - 20 - 8 - cipher.iv_len() - ICV_LEN;
                assert_eq!(
                    enc_len % cipher.block(),
                    0,
                    "{name}: payload + trailer aligned"
                );
                assert!(enc_len >= 8 + n + 2 && enc_len < 8 + n + 2 + cipher.block());
                // The peer restores every byte, checksum included.
                let mut q = Packet::from_bytes(&d);
                assert_eq!(dec.process(&mut q, &cx()), Action::Continue, "{name} n={n}");
                assert_eq!(q.data(), &orig[..], "{name} n={n}");
                // The same packet again is a replay.
                assert_eq!(
                    dec.process(&mut Packet::from_bytes(&d), &cx()),
                    Action::Drop
                );
                // A fresh packet with one flipped byte fails the ICV (and does not move the window).
                let mut p2 = Packet::from_bytes(&orig);
                enc.process(&mut p2, &cx());
                let mut t = p2.data().to_vec();
                let last = t.len() - 1;
                t[last] ^= 0x80;
                assert_eq!(
                    dec.process(&mut Packet::from_bytes(&t), &cx()),
                    Action::Drop
                );
                // The untampered one still arrives afterwards.
                assert_eq!(
                    dec.process(&mut Packet::from_bytes(p2.data()), &cx()),
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
        let mut frag = udp_packet(100);
        frag[6..8].copy_from_slice(&0x0010u16.to_be_bytes());
        Ipv4Packet::new_unchecked(&mut frag[..]).fill_checksum();
        assert_eq!(
            enc.process(&mut Packet::from_bytes(&frag), &cx()),
            Action::Drop
        );
        // Not ESP: the decrypting relay passes it on.
        assert_eq!(
            dec.process(&mut Packet::from_bytes(&udp_packet(10)), &cx()),
            Action::Continue
        );
        // Unknown SPI, truncated ESP.
        let mut p = Packet::from_bytes(&udp_packet(100));
        enc.process(&mut p, &cx());
        let mut other = p.data().to_vec();
        other[23] = 0x02;
        assert_eq!(
            dec.process(&mut Packet::from_bytes(&other), &cx()),
            Action::Drop
        );
        for cut in 20..p.len() {
            let mut b = p.data()[..cut].to_vec();
            b[2..4].copy_from_slice(&(cut as u16).to_be_bytes());
            assert_eq!(
                dec.process(&mut Packet::from_bytes(&b), &cx()),
                Action::Drop,
                "cut {cut}"
            );
        }
        assert_eq!(count(&dc, "dropped_unknown_spi"), 1);
        let k = key_file("cfg", Cipher::Aes128Gcm);
        let bad = |spi| EncryptConfig {
            mode: EspMode::Transport,
            cipher: Cipher::Aes128Gcm,
            spi,
            key_file: k.clone(),
        };
        assert!(bad(5).into_factory("e").is_err(), "reserved SPI");
        let tunnel = EncryptConfig {
            mode: EspMode::Tunnel,
            ..bad(0x1001)
        };
        assert!(tunnel.into_factory("e").is_err());
        let cfg: EncryptConfig = toml::from_str(&format!(
            "cipher = \"aes-256-gcm\"\nspi = \"0x2001\"\nkey_file = \"{}\"",
            k.display()
        ))
        .unwrap();
        assert!(cfg.into_factory("e").err().unwrap().contains("takes 36"));
    }
}
