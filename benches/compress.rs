//! Per-packet cost of compression: compress and decompress a 1,500-byte UDP packet per
//! algorithm at several compressibilities (payloads from relay-traffic), and the
//! decision itself. Each compressor runs through the real `compress` service, so the
//! figures include IPComp framing and header fixes.
//!
//! Run: `cargo bench -p relay-svc-compress --bench compress`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use relay_core::{Context, Counters, Packet, ServiceConfig};
use relay_svc_compress::{Algorithm, CompressConfig, DecompressConfig, Estimate, should_compress};
use std::hint::black_box;
use std::time::Instant;

fn packet(payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut b = vec![
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
    ];
    b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    b.extend_from_slice(&[0x0f, 0xa0, 0x13, 0x88]);
    b.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(payload);
    b
}

fn benches(c: &mut Criterion) {
    let mut cx = Context::new(0, Instant::now());
    for ratio in [0.5, 0.95, 1.0] {
        let payload = relay_traffic::Payload::new(1472, ratio, 1);
        let bytes = packet(payload.bytes());
        let mut g = c.benchmark_group(format!("ratio_{ratio}"));
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        for alg in ["lzo", "lz4", "deflate"] {
            if alg == "lzo" && !Algorithm::Lzo.available() {
                continue;
            }
            let cfg: CompressConfig =
                toml::from_str(&format!("algorithm = \"{alg}\"\nmode = \"always\"")).unwrap();
            let mut comp = cfg
                .into_factory("c")
                .unwrap()
                .build(&Counters::new(), &relay_core::Resources::new());
            let mut decomp = DecompressConfig::default()
                .into_factory("d")
                .unwrap()
                .build(&Counters::new(), &relay_core::Resources::new());
            let mut p = Packet::from_bytes(&bytes);
            comp.process(&mut p, &mut cx);
            let compressed = p.data().to_vec();
            g.bench_function(format!("compress_{alg}"), |b| {
                b.iter(|| {
                    let mut p = Packet::from_bytes(black_box(&bytes));
                    black_box(comp.process(&mut p, &mut cx));
                })
            });
            if compressed.len() < bytes.len() {
                g.bench_function(format!("decompress_{alg}"), |b| {
                    b.iter(|| {
                        let mut p = Packet::from_bytes(black_box(&compressed));
                        black_box(decomp.process(&mut p, &mut cx));
                    })
                });
            }
        }
        g.finish();
    }
    let est = Estimate {
        c: 20e-6,
        r: 0.95,
        fixed: true,
        samples: 0,
    };
    c.bench_function("decision", |b| {
        b.iter(|| should_compress(black_box(1e-5), black_box(&est), 1500.0, 12.5e6))
    });
}

criterion_group!(compress, benches);
criterion_main!(compress);
