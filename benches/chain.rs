//! Per-packet cost of the core: parsing a packet's layout, running chains of built-in
//! services, checksums, and growing/shrinking a packet in place. No kernel involved;
//! compare with the passthrough benchmark for the cost of crossing into userland.
//!
//! Run: `make bench` (or `cargo bench -p relay-core --bench chain`).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use relay_core::{
    Chain, ChainSettings, Context, Counter, Counters, Packet, QueueCounters, ServiceConfig, Verdict,
};
use relay_svc_builtin::{AcceptConfig, DumpConfig, MarkConfig};
use std::hint::black_box;
use std::time::Instant;

/// A 1,500-byte UDP/IPv4 packet.
fn udp_packet(len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    b[..20].copy_from_slice(&[
        0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
    ]);
    b[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    b[20..28].copy_from_slice(&[0x0f, 0xa0, 0x13, 0x88, 0, 0, 0, 0]);
    b[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
    b
}

fn chain_of(services: Vec<(&str, std::sync::Arc<dyn relay_core::ServiceFactory>)>) -> Chain {
    let mut chain = Chain::new(ChainSettings {
        malformed: Verdict::Accept,
        hook: relay_core::Hook::Forward,
        stages: relay_core::StageMark::DEFAULT,
    });
    for (name, f) in services {
        chain.push(
            name,
            f.build(&Counters::new(), &relay_core::Resources::new()),
            Counter::new(),
        );
    }
    chain
}

fn benches(c: &mut Criterion) {
    let bytes = udp_packet(1500);
    let mut cx = Context::new(0, Instant::now());
    let q = QueueCounters::default();
    let mut pkt = Packet::from_bytes(&bytes);

    let mut g = c.benchmark_group("per_packet");
    g.throughput(Throughput::Elements(1));
    g.bench_function("layout_parse_udp1500", |b| {
        b.iter(|| {
            pkt.data_mut(); // forget the cached layout
            black_box(pkt.layout().unwrap())
        })
    });
    let mut accept = chain_of(vec![(
        "accept",
        AcceptConfig {}.into_factory("accept").unwrap(),
    )]);
    g.bench_function("chain_accept", |b| {
        b.iter(|| {
            let mut p = Packet::from_bytes(black_box(&bytes[..64]));
            black_box(accept.run(&mut p, &mut cx, &q))
        })
    });
    let mark = MarkConfig {
        mark: 1,
        mask: 1,
        repeat: false,
    };
    let mut three = chain_of(vec![
        ("dump", DumpConfig { rate: 0 }.into_factory("dump").unwrap()),
        ("mark", mark.into_factory("mark").unwrap()),
        ("accept", AcceptConfig {}.into_factory("accept").unwrap()),
    ]);
    g.bench_function("chain_dump_mark_accept", |b| {
        b.iter(|| {
            let mut p = Packet::from_bytes(black_box(&bytes[..64]));
            black_box(three.run(&mut p, &mut cx, &q))
        })
    });
    g.bench_function("packet_from_bytes_64", |b| {
        b.iter(|| black_box(Packet::from_bytes(black_box(&bytes[..64]))))
    });
    g.bench_function("insert_remove_8_at_20", |b| {
        b.iter(|| {
            pkt.insert(20, 8);
            pkt.remove(20, 8);
        })
    });
    g.finish();

    let mut g = c.benchmark_group("checksum");
    g.throughput(Throughput::Bytes(1500));
    g.bench_function("internet_checksum_1500", |b| {
        b.iter(|| black_box(relay_core::wire::checksum::checksum(black_box(&bytes))))
    });
    g.finish();
}

criterion_group!(chain, benches);
criterion_main!(chain);
