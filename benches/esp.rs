//! Cost of ESP per cipher on 1,400-byte packets (issue 5): the `encrypt` service end to end
//! (framing, padding, sequence number, AES and the ICV, header fix), and the SA's raw seal
//! and open (ICV check, then decryption) that `decrypt` runs. Criterion reports bytes per
//! second: times 8 for Gb/s per core. `make bench-esp` runs this and `openssl speed` on the
//! same ciphers, and prints the ratios recorded in docs/performance.md.
//!
//! Run: `cargo bench -p relay-svc-crypto --bench esp`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use relay_core::{Context, Counters, Packet, PacketMeta, ServiceConfig};
use relay_svc_crypto::{Cipher, EncryptConfig, ICV_LEN, SaCrypto};
use std::hint::black_box;
use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

/// The packet size the issue names, headers included.
const SIZE: usize = 1400;

fn udp_packet() -> Vec<u8> {
    let mut b = vec![
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
    ];
    b[2..4].copy_from_slice(&(SIZE as u16).to_be_bytes());
    b.extend_from_slice(&[0x0f, 0xa0, 0x13, 0x88]);
    b.extend_from_slice(&((SIZE - 20) as u16).to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend((0..SIZE - 28).map(|i| (i * 7) as u8));
    b
}

fn benches(c: &mut Criterion) {
    let mut cx = Context::new(0, Instant::now());
    let plain = udp_packet();
    // Not the shared temporary directory: relayd refuses keys that others could replace.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("relayd-bench-esp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, cipher) in Cipher::ALL {
        let key_file = dir.join(name);
        let key: Vec<u8> = (0..cipher.key_len() as u8).collect();
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(&key_file, hex).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let cfg: EncryptConfig = toml::from_str(&format!(
            "cipher = \"{name}\"\nspi = 4097\nkey_file = \"{}\"\nesn = true\nstate_dir = \"{}\"",
            key_file.display(),
            dir.join("state").display()
        ))
        .unwrap();
        let mut enc = cfg
            .into_factory("enc")
            .unwrap()
            .build(&Counters::new(), &relay_core::Resources::new());
        let mut g = c.benchmark_group(name);
        g.throughput(Throughput::Bytes(SIZE as u64));
        // The datapath's way: the packet sits in a reused receive buffer with headroom.
        let mut buf = vec![0u8; 128 + SIZE + 512];
        g.bench_function("encrypt_service", |b| {
            b.iter(|| {
                buf[128..128 + SIZE].copy_from_slice(&plain);
                let mut p = Packet::in_buffer(
                    std::mem::take(&mut buf),
                    128,
                    128 + SIZE,
                    PacketMeta::default(),
                );
                black_box(enc.process(&mut p, &mut cx));
                buf = p.into_buffer();
            })
        });
        // The SA alone, on the ESP part of a 1,400-byte transport-mode packet.
        let sa = SaCrypto::new(cipher, &key);
        let body = (SIZE - 20 - 8 - cipher.iv_len() - ICV_LEN) / cipher.block() * cipher.block();
        let mut esp = vec![0u8; 8 + cipher.iv_len() + body + ICV_LEN];
        esp[..4].copy_from_slice(&4097u32.to_be_bytes());
        let mut seq = 0u64;
        g.bench_function("seal", |b| {
            b.iter(|| {
                seq += 1;
                sa.seal(seq, false, black_box(&mut esp)).unwrap();
            })
        });
        sa.seal(1, false, &mut esp).unwrap();
        let sealed = esp.clone();
        g.bench_function("open", |b| {
            b.iter(|| {
                esp.copy_from_slice(&sealed);
                black_box(sa.open(None, black_box(&mut esp))).unwrap();
            })
        });
        g.finish();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(esp, benches);
criterion_main!(esp);
