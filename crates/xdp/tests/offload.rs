//! The XDP program's offloaded flows on the kernel (root; a namespace testbed): a flow in
//! the `flows` map passes to the kernel while offload is on and its entry is live, is
//! counted in the entry and the queue's slot, and comes back to relayd (entry deleted,
//! counted) once idle or from an older generation. Test frames through
//! `BPF_PROG_TEST_RUN` in the relay's namespace, so the FIB lookups of the misses are real.
//!
//! Topology (relay_testbed::line3): src 10.0.1.1 -- relay (eth0) -- dst 10.0.2.2.

use std::time::Duration;

use relay_core::wire::FiveTuple;
use relay_testbed::line3;
use relay_xdp::offload::{FlowKey, FlowSink, FlowValue, monotonic_ns};
use relay_xdp::program::{MatchRule, Program, ProgramStats};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;

/// An Ethernet frame with an IPv4 UDP datagram 10.0.1.1:40000 -> 10.0.2.2:`dport`
/// (`frag`: the frag_off field), 4 bytes of payload: 32 IP bytes.
fn udp4(dport: u16, frag: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 32, 0, 1]);
    f.extend_from_slice(&frag.to_be_bytes());
    f.extend_from_slice(&[64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2]);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 12, 0, 0]);
    f.extend_from_slice(b"data");
    f
}

/// The same datagram the other way (10.0.2.2:`dport` -> 10.0.1.1:40000).
fn udp4_back(dport: u16) -> Vec<u8> {
    let mut f = udp4(dport, 0);
    let (s, d) = (f[26..30].to_vec(), f[30..34].to_vec());
    f[26..30].copy_from_slice(&d);
    f[30..34].copy_from_slice(&s);
    let (sp, dp) = (f[34..36].to_vec(), f[36..38].to_vec());
    f[34..36].copy_from_slice(&dp);
    f[36..38].copy_from_slice(&sp);
    f
}

/// An IPv6 TCP segment header fd00:1::1:40000 -> fd00:2::2:`dport`.
fn tcp6(dport: u16) -> Vec<u8> {
    tcp6_flags(dport, 0x10)
}

/// The same with TCP flags `flags` (0x02 SYN, 0x10 ACK).
fn tcp6_flags(dport: u16, flags: u8) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, 6, 64]);
    f.extend_from_slice(&"fd00:1::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    f.extend_from_slice(&"fd00:2::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&dport.to_be_bytes());
    tcp[12] = 0x50;
    tcp[13] = flags;
    f.extend_from_slice(&tcp);
    f
}

fn key(src: &str, dst: &str, proto: u8, ports: (u16, u16)) -> FlowKey {
    FlowKey::of(&FiveTuple {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        proto,
        ports: Some(ports),
    })
    .unwrap()
}

fn fresh(generation: u32) -> FlowValue {
    FlowValue {
        last_ns: monotonic_ns(),
        generation,
        ..FlowValue::default()
    }
}

fn ifindex(name: &str) -> u32 {
    relay_netlink::ifindex(name).expect("interface")
}

#[test]
fn offloaded_flows_pass_until_idle_or_revoked() {
    let l = line3("xdpoff-frames");
    assert!(l.relay.ping("10.0.2.2"), "relay reaches dst");
    assert!(l.relay.ping("fd00:2::2"), "relay reaches dst over IPv6");
    let in_if = l.src_link.b_if.clone();
    l.relay.run(move || {
        let ingress = ifindex(&in_if);
        let mut prog = Program::load_with_flows(1024).expect("load");
        prog.set_rules(&[MatchRule::ANY]).unwrap();
        prog.set_fail_open(false).unwrap();
        // Offload on, 300 ms idle time.
        prog.set_offload(Some(Duration::from_millis(300))).unwrap();
        let run = |prog: &Program, frame: &[u8]| -> (u32, ProgramStats) {
            let before = prog.stats().unwrap();
            let r = prog.test_run(frame, ingress, 0).unwrap();
            let after = prog.stats().unwrap();
            assert_eq!(after.seen, before.seen + 1);
            let d = ProgramStats {
                pass_offloaded: after.pass_offloaded - before.pass_offloaded,
                no_socket: after.no_socket - before.no_socket,
                offload_expired: after.offload_expired - before.offload_expired,
                offload_revoked: after.offload_revoked - before.offload_revoked,
                ..ProgramStats::default()
            };
            (r.action, d)
        };
        let offloaded = |n| ProgramStats {
            pass_offloaded: n,
            ..ProgramStats::default()
        };
        let relayds = ProgramStats {
            no_socket: 1,
            ..ProgramStats::default()
        };

        // Not offloaded: relayd's (no socket bound here, fail-closed: dropped).
        let frame = udp4(5000, 0);
        assert_eq!(run(&prog, &frame), (XDP_DROP, relayds));
        let k = key("10.0.1.1", "10.0.2.2", 17, (40000, 5000));
        // Written as a queue thread writes it: inserted once, not reset by a repeat.
        let mut maps = prog.flow_maps(0).unwrap();
        assert!(maps.insert(&k, &fresh(0)).unwrap(), "inserted");
        assert!(!maps.insert(&k, &fresh(0)).unwrap(), "already there");
        assert_eq!(run(&prog, &frame), (XDP_PASS, offloaded(1)));
        assert_eq!(run(&prog, &frame), (XDP_PASS, offloaded(1)));
        let v = prog.flow(&k).unwrap().expect("entry");
        assert_eq!((v.packets, v.bytes), (2, 64), "counted in the entry");
        let q = maps.queue_stats().unwrap();
        assert_eq!((q.passed, q.bytes), (2, 64), "and in rx queue 0's slot");
        // One direction only: the reply is relayd's, and so are other ports.
        assert_eq!(run(&prog, &udp4_back(5000)), (XDP_DROP, relayds));
        assert_eq!(run(&prog, &udp4(5001, 0)), (XDP_DROP, relayds));
        // A fragment of the flow is never looked up: relayd's.
        assert_eq!(run(&prog, &udp4(5000, 0x2000)), (XDP_DROP, relayds));
        // IPv6 likewise.
        let k6 = key("fd00:1::1", "fd00:2::2", 6, (40000, 443));
        assert_eq!(run(&prog, &tcp6(443)), (XDP_DROP, relayds));
        prog.insert_flow(&k6, &fresh(0)).unwrap();
        assert_eq!(run(&prog, &tcp6(443)), (XDP_PASS, offloaded(1)));
        let t = prog.offload_table().unwrap();
        assert_eq!((t.flows, t.packets), (2, 3), "{t:?}");
        // A SYN (or SYN-ACK) on an offloaded tuple is a new connection: relayd's, and the
        // old entry is gone, so the new connection is inspected from its start.
        let ksyn = key("fd00:1::1", "fd00:2::2", 6, (40000, 444));
        prog.insert_flow(&ksyn, &fresh(0)).unwrap();
        assert_eq!(run(&prog, &tcp6_flags(444, 0x10)), (XDP_PASS, offloaded(1)));
        for flags in [0x02, 0x12] {
            prog.insert_flow(&ksyn, &fresh(0)).unwrap();
            let syn = ProgramStats {
                offload_revoked: 1,
                ..relayds
            };
            assert_eq!(
                run(&prog, &tcp6_flags(444, flags)),
                (XDP_DROP, syn),
                "{flags:#x}"
            );
            assert_eq!(prog.flow(&ksyn).unwrap(), None, "deleted by {flags:#x}");
        }

        // Offload off: nothing is looked up, entries stay.
        prog.set_offload(None).unwrap();
        assert_eq!(run(&prog, &frame), (XDP_DROP, relayds));
        prog.set_offload(Some(Duration::from_millis(300))).unwrap();
        assert_eq!(run(&prog, &frame), (XDP_PASS, offloaded(1)));

        // A new generation (a reload): the entry is revoked by its next packet.
        prog.set_generation(1).unwrap();
        let revoked = ProgramStats {
            offload_revoked: 1,
            ..relayds
        };
        assert_eq!(run(&prog, &frame), (XDP_DROP, revoked));
        assert_eq!(prog.flow(&k).unwrap(), None, "deleted");
        assert_eq!(run(&prog, &frame), (XDP_DROP, relayds));
        // Written again for the new generation: offloaded again, until idle.
        prog.insert_flow(&k, &fresh(1)).unwrap();
        assert_eq!(run(&prog, &frame), (XDP_PASS, offloaded(1)));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(run(&prog, &frame), (XDP_PASS, offloaded(1)), "refreshed");
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            run(&prog, &frame),
            (XDP_PASS, offloaded(1)),
            "400 ms after insertion, 200 ms after the last packet"
        );
        std::thread::sleep(Duration::from_millis(400));
        let expired = ProgramStats {
            offload_expired: 1,
            ..relayds
        };
        assert_eq!(run(&prog, &frame), (XDP_DROP, expired));
        assert_eq!(prog.flow(&k).unwrap(), None, "deleted");
        let q = maps.queue_stats().unwrap();
        // Revoked: the two SYNs' entries and the reload's.
        assert_eq!((q.expired, q.revoked), (1, 3), "{q:?}");
        // The v6 entry is from generation 0: not live.
        assert_eq!(prog.offload_table().unwrap().flows, 0);
    });
}

#[test]
fn the_flows_map_holds_what_it_was_sized_for_and_evicts_the_oldest() {
    let prog = Program::load_with_flows(64).expect("load");
    let mut maps = prog.flow_maps(0).unwrap();
    // More flows than room: an LRU map takes every insert, evicting old entries.
    for p in 0..1000u16 {
        let k = key("10.0.1.1", "10.0.2.2", 17, (p, 80));
        assert!(maps.insert(&k, &fresh(0)).unwrap(), "flow {p}");
    }
    let k = key("10.0.1.1", "10.0.2.2", 17, (999, 80));
    assert!(prog.flow(&k).unwrap().is_some(), "the newest is there");
    assert!(prog.flow_maps(64).is_err(), "rx queues 0-63");
}

/// The program's cost per packet on the miss path (`cargo test -p relay-xdp --test
/// offload -- --ignored --nocapture miss_path`): the same matched UDP frame, whose flow is
/// not offloaded, with offload off, on with an empty map, on with a full map of other
/// flows, and (for scale) a hit. OFFLOAD_MODE=off|empty|full|hit runs only that case,
/// OFFLOAD_REPEAT times, for `perf stat -e instructions:k` (subtract a run with
/// OFFLOAD_REPEAT=1 for the setup).
#[test]
#[ignore = "a measurement, not a check"]
fn miss_path_cost() {
    let l = line3("xdpoff-cost");
    assert!(l.relay.ping("10.0.2.2"), "relay reaches dst");
    let in_if = l.src_link.b_if.clone();
    let only = std::env::var("OFFLOAD_MODE").ok();
    let repeat: u32 = std::env::var("OFFLOAD_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    l.relay.run(move || {
        let ingress = ifindex(&in_if);
        let setup = |mode: &str| {
            let mut prog = Program::load_with_flows(65_536).expect("load");
            prog.set_rules(&[MatchRule::ANY]).unwrap();
            prog.set_fail_open(false).unwrap();
            if mode != "off" {
                prog.set_offload(Some(Duration::from_secs(30))).unwrap();
            }
            let mut maps = prog.flow_maps(0).unwrap();
            if mode == "full" {
                for i in 0..65_536u32 {
                    let k = key("10.0.1.1", "10.0.2.2", 17, ((i >> 16) as u16 + 1, i as u16));
                    maps.insert(&k, &fresh(0)).unwrap();
                }
            }
            if mode == "hit" {
                let k = key("10.0.1.1", "10.0.2.2", 17, (40000, 5000));
                maps.insert(&k, &fresh(0)).unwrap();
            }
            prog
        };
        let frame = udp4(5000, 0);
        let modes: Vec<&str> = match &only {
            Some(m) => vec![m.as_str()],
            None => vec!["off", "empty", "full", "hit"],
        };
        let progs: Vec<_> = modes.iter().map(|m| (*m, setup(m))).collect();
        // The flows maps' kernel memory (map_type 9: LRU hash), from fdinfo.
        for e in std::fs::read_dir("/proc/self/fdinfo").unwrap().flatten() {
            let info = std::fs::read_to_string(e.path()).unwrap_or_default();
            if info.contains("map_type:\t9\n") {
                let field = |k: &str| {
                    info.lines()
                        .find(|l| l.starts_with(k))
                        .unwrap_or("")
                        .to_string()
                };
                println!("flows map: {} {}", field("max_entries"), field("memlock"));
            }
        }
        let mut ns: Vec<Vec<f64>> = vec![Vec::new(); progs.len()];
        let rounds = if only.is_some() { 1 } else { 7 };
        for _ in 0..rounds {
            for (i, (_, prog)) in progs.iter().enumerate() {
                let d = prog.time_runs(&frame, ingress, 0, repeat).unwrap();
                ns[i].push(d.as_nanos() as f64);
            }
        }
        for (i, (m, _)) in progs.iter().enumerate() {
            let mut v = ns[i].clone();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "offload {m:>5}: median {:.1} ns/run (min {:.1}, max {:.1}, {} rounds of {repeat})",
                v[v.len() / 2],
                v[0],
                v[v.len() - 1],
                v.len()
            );
        }
    });
}

#[test]
fn the_status_walk_sums_every_live_entry() {
    let mut prog = Program::load_with_flows(65_536).expect("load");
    prog.set_offload(Some(Duration::from_secs(30))).unwrap();
    let mut maps = prog.flow_maps(0).unwrap();
    // More entries than one batch, and some of another generation or idle.
    for i in 0..10_000u32 {
        let k = key("10.0.1.1", "10.0.2.2", 6, ((i >> 8) as u16 + 1, i as u16));
        let mut v = fresh(u32::from(i % 10 == 0));
        v.packets = 2;
        v.bytes = 100;
        if i % 10 == 1 {
            v.last_ns -= 60_000_000_000;
        }
        assert!(maps.insert(&k, &v).unwrap());
    }
    let t = prog.offload_table().unwrap();
    assert_eq!((t.flows, t.packets, t.bytes), (8_000, 16_000, 800_000));
}
