//! Per-packet cost of the MPLS edge: encapsulation (MPLS-in-IP and MPLS-in-UDP) and
//! decapsulation of a 1,500-byte packet through the real services, and VCAN
//! classification with 10 and 10,000 VCANs, matching the first or the last one, indexed
//! and (for comparison) by linear scan.
//!
//! Run: `cargo bench -p relay-svc-mpls --bench mpls`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use relay_core::wire::Ipv4Packet;
use relay_core::{Context, Counters, Packet, ServiceConfig};
use relay_svc_mpls::classify::{Addr, Classifier, FlowKey, PortRange, Prefix, ProtoMatch, Rule};
use relay_svc_mpls::{DecapConfig, EncapConfig};
use std::hint::black_box;
use std::time::Instant;

fn udp4(dst: [u8; 4], payload: usize) -> Vec<u8> {
    let total = 28 + payload;
    let mut b = vec![
        0x45,
        34 << 2,
        0,
        0,
        0,
        1,
        0x40,
        0,
        64,
        17,
        0,
        0,
        10,
        0,
        1,
        1,
    ];
    b.extend_from_slice(&dst);
    b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    b.extend_from_slice(&[0x0f, 0xa0, 0x13, 0x8c]);
    b.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.resize(total, 0x5a);
    Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
    b
}

/// `n` VCANs, each `{ dst = 10.x.y.0/24, proto = udp }` (indexed by destination), or
/// with `ranges` each `{ proto = udp, dport = "a-b" }` (only an ordered scan can do it).
fn config(n: u32, encap: &str) -> EncapConfig {
    let mut text =
        format!("encap = \"{encap}\"\ninterface = \"eth1\"\nlocal = \"192.0.2.1\"\nmtu = 9000\n");
    for i in 0..n {
        text.push_str(&format!(
            "[[vcan]]\nname = \"v{i}\"\nmatch = {{ dst = \"10.{}.{}.0/24\", proto = \"udp\" }}\nlabel = {}\nremote = \"192.0.2.2\"\nrate = \"1mbit\"\n",
            100 + i / 256,
            i % 256,
            16 + i
        ));
    }
    toml::from_str(&text).unwrap()
}

fn key(i: u32) -> FlowKey {
    FlowKey {
        dscp: 0,
        src: Addr::V4(0x0a00_0101),
        dst: Addr::V4((10 << 24) | ((100 + i / 256) << 16) | ((i % 256) << 8) | 9),
        proto: 17,
        ports: Some((4000, 5004)),
    }
}

fn benches(c: &mut Criterion) {
    let mut cx = Context::new(0, Instant::now());
    let bytes = udp4([10, 100, 0, 9], 1472);
    let mut g = c.benchmark_group("mpls");
    g.throughput(Throughput::Elements(1));
    for encap in ["ip", "udp"] {
        let mut e = config(10, encap)
            .into_factory("e")
            .unwrap()
            .build(&Counters::new(), &relay_core::Resources::new());
        g.bench_function(format!("encap_{encap}_1500B"), |b| {
            b.iter(|| {
                let mut p = Packet::from_bytes(black_box(&bytes));
                black_box(e.process(&mut p, &mut cx));
            })
        });
        let mut p = Packet::from_bytes(&bytes);
        e.process(&mut p, &mut cx);
        let enc = p.data().to_vec();
        let mut d = DecapConfig {
            labels: vec![16],
            peers: vec![[192, 0, 2, 1].into()],
        }
        .into_factory("d")
        .unwrap()
        .build(&Counters::new(), &relay_core::Resources::new());
        g.bench_function(format!("decap_{encap}_1500B"), |b| {
            b.iter(|| {
                let mut p = Packet::from_bytes(black_box(&enc));
                black_box(d.process(&mut p, &mut cx));
            })
        });
    }
    g.bench_function("packet_copy_only_1500B", |b| {
        b.iter(|| black_box(Packet::from_bytes(black_box(&bytes))))
    });
    g.finish();

    let mut g = c.benchmark_group("classify");
    for n in [10u32, 10_000] {
        let prefixes: Vec<Rule> = (0..n)
            .map(|i| Rule {
                dst: Some(Prefix::V4(
                    (10 << 24) | ((100 + i / 256) << 16) | ((i % 256) << 8),
                    24,
                )),
                proto: Some(ProtoMatch::Number(17)),
                ..Rule::default()
            })
            .collect();
        let cl = Classifier::new(prefixes);
        for (what, i) in [("first", 0), ("last", n - 1)] {
            let k = key(i);
            assert_eq!(cl.classify(&k), Some(i as usize));
            g.bench_function(format!("dst_prefix_{n}_{what}"), |b| {
                b.iter(|| black_box(cl.classify(black_box(&k))))
            });
            g.bench_function(format!("linear_{n}_{what}"), |b| {
                b.iter(|| black_box(cl.classify_linear(black_box(&k))))
            });
        }
        // Port ranges cannot be indexed: the ordered scan, the paper's situation.
        let ranges: Vec<Rule> = (0..n)
            .map(|i| Rule {
                proto: Some(ProtoMatch::Number(17)),
                dport: Some(PortRange {
                    lo: (i * 2) as u16,
                    hi: (i * 2 + 1) as u16,
                }),
                ..Rule::default()
            })
            .collect();
        let cl = Classifier::new(ranges);
        let mut k = key(0);
        k.ports = Some((4000, ((n - 1) * 2) as u16));
        g.bench_function(format!("port_ranges_scan_{n}_last"), |b| {
            b.iter(|| black_box(cl.classify(black_box(&k))))
        });
    }
    g.finish();
}

criterion_group!(mpls, benches);
criterion_main!(mpls);
