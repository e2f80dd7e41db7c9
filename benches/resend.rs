//! Packets/s of 6in4 ESP re-sends on one core (issue 15): IPv6 packets queued from an IPv6
//! hook, encrypted by `encrypt` in tunnel mode with IPv4 ends, so that their verdict cannot
//! carry them and they leave anew from a socket. The relay's part only: the service, which
//! emits each ESP packet into the queue's outbox, and the datapath's [`Emitter`], which
//! sends a batch's packets with one `sendmmsg` after the batch (before issue 15 the service
//! sent each with its own `sendto`: 374k/s at 100 B, 298k/s at 1,400 B here), in a namespace where the tunnel's remote end is routed through a veth whose
//! peer is down (the kernel has no dummy interfaces here: veth frees what it cannot pass
//! on, after the whole IP output path), on CPU 1, batches of 64 as the datapath receives
//! them.
//!
//! Run (root): `cargo bench -p relayd --bench resend`; RESEND_CPU picks the core.

use criterion::{Criterion, Throughput};
use relay_core::{Context, Counters, Packet, PacketMeta, ServiceConfig};
use relay_nfq::Emitter;
use relay_svc_crypto::EncryptConfig;
use std::hint::black_box;
use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

/// Packets per batch, as the datapath's receive batch.
const BATCH: usize = 64;

/// An IPv6 UDP packet of `size` bytes from fd00:1::1 to fd00:2::2.
fn udp6(size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    b[0] = 0x60;
    b[4..6].copy_from_slice(&((size - 40) as u16).to_be_bytes());
    b[6] = 17;
    b[7] = 64;
    b[8..24].copy_from_slice(&"fd00:1::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    b[24..40].copy_from_slice(&"fd00:2::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    b[40..42].copy_from_slice(&4000u16.to_be_bytes());
    b[42..44].copy_from_slice(&9000u16.to_be_bytes());
    b[44..46].copy_from_slice(&((size - 40) as u16).to_be_bytes());
    b
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call reads it only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

fn main() {
    let tb = relay_testbed::Testbed::new("bench-resend");
    let relay = tb.node("relay");
    relay.sh(
        "ip link set lo up && ip link add v0 type veth peer name v1 && ip link set v0 up \
         && ip addr add 10.9.0.1/24 dev v0 \
         && ip neigh add 10.9.0.2 lladdr 02:00:00:00:00:02 dev v0 nud permanent",
    );
    let cpu: usize = std::env::var("RESEND_CPU")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    relay.run(move || {
        pin(cpu);
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("relayd-bench-resend-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key");
        std::fs::write(&key, "000102030405060708090a0b0c0d0e0f10111213").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let cfg: EncryptConfig = toml::from_str(&format!(
            "mode = \"tunnel\"\nlocal = \"10.9.0.1\"\nremote = \"10.9.0.2\"\ncipher = \"aes-128-gcm\"\nspi = 4097\nkey_file = \"{}\"\nmtu = 1600\n",
            key.display()
        ))
        .unwrap();
        let counters = Counters::new();
        let mut enc = cfg.into_factory("esp").unwrap().build(&counters, &relay_core::Resources::new());
        let mut c = Criterion::default().configure_from_args();
        let mut emitter = Emitter::new();
        let mut cx = Context::new(0, Instant::now());
        for size in [100usize, 1400] {
            let plain = udp6(size);
            let meta = PacketMeta {
                hw_protocol: 0x86dd,
                ..PacketMeta::default()
            };
            let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; 128 + size + 512]).collect();
            let mut g = c.benchmark_group(format!("resend_6in4_{size}"));
            g.throughput(Throughput::Elements(BATCH as u64));
            g.bench_function("encrypt_and_send", |b| {
                b.iter(|| {
                    cx.now = Instant::now();
                    for buf in bufs.iter_mut() {
                        buf[128..128 + size].copy_from_slice(&plain);
                        let mut p =
                            Packet::in_buffer(std::mem::take(buf), 128, 128 + size, meta);
                        black_box(enc.process(&mut p, &mut cx));
                        *buf = p.into_buffer();
                    }
                    let now = cx.now;
                    black_box(emitter.flush(cx.outbox_mut(), 0, now));
                })
            });
            g.finish();
        }
        let sent = counters.snapshot();
        println!("counters: {sent:?}");
        let _ = std::fs::remove_dir_all(&dir);
    });
}
