use super::tcp::tcp_fast_open;
use super::*;
use relay_core::wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};
use std::net::{IpAddr, Ipv4Addr};

const C: u128 = 0xffff_0a00_0001; // 10.0.0.1, IPv4-mapped
const S: u128 = 0xffff_0a00_0002; // 10.0.0.2

fn table(limits: FlowLimits) -> FlowTable<u32> {
    FlowTable::new(limits, FlowCounters::default())
}

fn udp(src: u128, sport: u16, dst: u128, dport: u16) -> FlowPacket<'static> {
    FlowPacket {
        proto: proto::UDP,
        src,
        dst,
        sport,
        dport,
        tcp: None,
        payload: b"x",
    }
}

fn tcp<'a>(
    (src, sport): (u128, u16),
    (dst, dport): (u128, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &'a [u8],
) -> FlowPacket<'a> {
    FlowPacket {
        proto: proto::TCP,
        src,
        dst,
        sport,
        dport,
        tcp: Some(TcpHeader {
            seq,
            ack,
            flags,
            window: u16::MAX,
            // Scaled windows (2^30) so that the tests' sequence numbers stay inside.
            wscale: (flags & SYN != 0).then_some(14),
            ..TcpHeader::default()
        }),
        payload,
    }
}

/// A client at `C`:`port` talking to `S`:80, with ISNs 1000 (client) and 5000 (server).
struct Conn {
    port: u16,
}

impl Conn {
    fn c<'a>(&self, seq: u32, flags: u8, payload: &'a [u8]) -> FlowPacket<'a> {
        tcp((C, self.port), (S, 80), seq, 5001, flags, payload)
    }

    fn s<'a>(&self, seq: u32, flags: u8, payload: &'a [u8]) -> FlowPacket<'a> {
        tcp((S, 80), (C, self.port), seq, 1001, flags, payload)
    }

    /// Runs the handshake, returning the `established` of each of its packets.
    fn open(&self, t: &mut FlowTable<u32>, now: Instant) -> [bool; 3] {
        let a = t.packet(&self.c(1000, SYN, b""), now).unwrap().established;
        let b = t
            .packet(&self.s(5000, SYN | ACK, b""), now)
            .unwrap()
            .established;
        let c = t.packet(&self.c(1001, ACK, b""), now).unwrap().established;
        [a, b, c]
    }
}

#[test]
fn both_directions_find_one_flow() {
    let now = Instant::now();
    let mut t = table(FlowLimits::default());
    let r = t.packet(&udp(C, 5353, S, 53), now).unwrap();
    assert!(r.new);
    assert_eq!(r.dir, Dir::ToServer);
    assert!(!r.established);
    r.flow.state = 7;
    let id = r.flow.id();
    let r = t.packet(&udp(S, 53, C, 5353), now).unwrap();
    assert!(!r.new);
    assert_eq!(r.dir, Dir::ToClient);
    assert!(r.established);
    assert_eq!(r.flow.state, 7);
    assert_eq!(r.flow.id(), id);
    assert_eq!(r.flow.client(), (C, 5353));
    assert_eq!(r.flow.server(), (S, 53));
    assert_eq!(
        (r.flow.pkts(Dir::ToServer), r.flow.pkts(Dir::ToClient)),
        (1, 1)
    );
    assert_eq!(t.len(), 1);
    // The EVE flow id of the tuple, either way round.
    let (a, b) = (
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    );
    assert_eq!(id, crate::eve::flow_id(a, b, 5353, 53, proto::UDP));
    assert_eq!(id, crate::eve::flow_id(b, a, 53, 5353, proto::UDP));
    // Another port, or protocol, is another flow.
    assert!(t.packet(&udp(C, 5354, S, 53), now).unwrap().new);
    let mut other = udp(C, 5353, S, 53);
    other.proto = proto::TCP;
    assert!(t.packet(&other, now).unwrap().new);
    assert_eq!(t.len(), 3);
}

#[test]
fn handshake_establishes_and_reassembles_both_ways() {
    let now = Instant::now();
    let mut t = table(FlowLimits::default());
    let conn = Conn { port: 40000 };
    // As Suricata: the handshake's own packets are not yet established.
    assert_eq!(conn.open(&mut t, now), [false, false, false]);
    let r = t
        .packet(&conn.c(1001, ACK | PSH, b"GET / HTTP/1.1\r\n"), now)
        .unwrap();
    assert!(r.established);
    assert_eq!(r.dir, Dir::ToServer);
    assert_eq!(r.seg.new, 16);
    assert!(r.flow.established());
    assert_eq!(r.flow.tcp_state(), Some(TcpState::Established));
    let r = t
        .packet(&conn.s(5001, ACK | PSH, b"HTTP/1.1 200 OK\r\n"), now)
        .unwrap();
    assert_eq!(r.dir, Dir::ToClient);
    assert_eq!(r.seg.new, 17);
    let (state, stream) = r.flow.split_mut(Dir::ToClient);
    *state += 1;
    let stream = stream.unwrap();
    assert_eq!(stream.app_pending(), b"HTTP/1.1 200 OK\r\n");
    stream.consume_app(9);
    assert_eq!(
        r.flow.stream(Dir::ToClient).unwrap().app_pending(),
        b"200 OK\r\n"
    );
    assert_eq!(
        r.flow.stream(Dir::ToServer).unwrap().data(),
        b"GET / HTTP/1.1\r\n"
    );
    assert_eq!(r.flow.client(), (C, 40000));
    assert_eq!(t.len(), 1);
    assert!(t.mem() > 0);
}

#[test]
fn data_on_the_handshake_ack_is_established() {
    let now = Instant::now();
    let mut t = table(FlowLimits::default());
    let conn = Conn { port: 40001 };
    t.packet(&conn.c(1000, SYN, b""), now).unwrap();
    t.packet(&conn.s(5000, SYN | ACK, b""), now).unwrap();
    let r = t.packet(&conn.c(1001, ACK, b"hello"), now).unwrap();
    assert!(r.established);
    assert_eq!(r.seg.new, 5);
}

#[test]
fn wrong_acknowledgements_do_not_establish() {
    let now = Instant::now();
    let mut t = table(FlowLimits::default());
    t.packet(&tcp((C, 1), (S, 80), 1000, 0, SYN, b""), now)
        .unwrap();
    // A SYN-ACK not acknowledging the SYN.
    let r = t
        .packet(&tcp((S, 80), (C, 1), 5000, 777, SYN | ACK, b""), now)
        .unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::SynSent));
    t.packet(&tcp((S, 80), (C, 1), 5000, 1001, SYN | ACK, b""), now)
        .unwrap();
    // An ACK not acknowledging the SYN-ACK.
    let r = t
        .packet(&tcp((C, 1), (S, 80), 1001, 9999, ACK, b"data"), now)
        .unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::SynRecv));
    assert!(r.seg.ignored);
    assert!(!r.flow.established());
    let r = t
        .packet(&tcp((C, 1), (S, 80), 1001, 5001, ACK, b"data"), now)
        .unwrap();
    assert!(r.flow.established());
}

#[test]
fn midstream_flows_are_not_reassembled_by_default() {
    let now = Instant::now();
    let mut t = table(FlowLimits::default());
    let r = t
        .packet(&tcp((C, 2), (S, 80), 7000, 9000, ACK, b"mid"), now)
        .unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::Unsynced));
    assert!(r.seg.ignored);
    assert!(!r.established);
    assert!(r.flow.stream(Dir::ToServer).is_none());
    let r = t
        .packet(&tcp((S, 80), (C, 2), 9000, 7003, ACK, b"reply"), now)
        .unwrap();
    assert_eq!(r.dir, Dir::ToClient);
    assert!(!r.flow.established());
    // A SYN on the tuple starts a tracked connection (Suricata's session reuse).
    let r = t
        .packet(&tcp((S, 80), (C, 2), 100, 0, SYN, b""), now)
        .unwrap();
    assert!(r.new);
    assert_eq!(r.dir, Dir::ToServer);
    assert_eq!(r.flow.client(), (S, 80));
    assert_eq!(r.flow.tcp_state(), Some(TcpState::SynSent));

    let mut t = table(FlowLimits {
        midstream: true,
        ..FlowLimits::default()
    });
    let r = t
        .packet(&tcp((C, 2), (S, 80), 7000, 9000, ACK, b"mid"), now)
        .unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::Established));
    assert_eq!(r.seg.new, 3);
    let r = t
        .packet(&tcp((S, 80), (C, 2), 9000, 7003, ACK, b"reply"), now)
        .unwrap();
    assert_eq!(r.seg.new, 5);
    assert_eq!(r.flow.stream(Dir::ToClient).unwrap().data(), b"reply");
    // Picked up on a packet without ACK: the reply's direction starts at its first byte.
    let r = t
        .packet(&tcp((C, 4), (S, 80), 7000, 0, PSH, b"mid"), now)
        .unwrap();
    assert_eq!(r.seg.new, 3);
    assert!(r.flow.stream(Dir::ToClient).is_none());
    let r = t
        .packet(&tcp((S, 80), (C, 4), 9000, 7003, ACK, b"reply"), now)
        .unwrap();
    assert_eq!(r.seg.new, 5);
}

#[test]
fn midstream_syn_ack_is_reversed() {
    let now = Instant::now();
    let mut t = table(FlowLimits {
        midstream: true,
        ..FlowLimits::default()
    });
    let r = t
        .packet(&tcp((S, 80), (C, 3), 5000, 1001, SYN | ACK, b""), now)
        .unwrap();
    assert_eq!(r.dir, Dir::ToClient);
    assert_eq!(r.flow.client(), (C, 3));
    let r = t
        .packet(&tcp((C, 3), (S, 80), 1001, 5001, ACK, b"hi"), now)
        .unwrap();
    assert_eq!(r.dir, Dir::ToServer);
    assert!(r.established);
    assert_eq!(r.seg.new, 2);
    // Without midstream, the sender of the first packet is the client.
    let mut t = table(FlowLimits::default());
    let r = t
        .packet(&tcp((S, 80), (C, 3), 5000, 1001, SYN | ACK, b""), now)
        .unwrap();
    assert_eq!(r.dir, Dir::ToServer);
    assert_eq!(r.flow.tcp_state(), Some(TcpState::Unsynced));
}

#[test]
fn fin_and_rst_close() {
    let now = Instant::now();
    let mut t = table(FlowLimits::default());
    let conn = Conn { port: 40002 };
    conn.open(&mut t, now);
    let r = t.packet(&conn.c(1001, ACK | FIN, b"bye"), now).unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::Closing));
    assert!(r.seg.finished);
    let r = t.packet(&conn.s(5001, ACK | FIN, b""), now).unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::Closed));
    assert!(r.established);
    // A retransmitted SYN (the first ISN) does not reopen it; a new one does.
    assert!(!t.packet(&conn.c(1000, SYN, b""), now).unwrap().new);
    let r = t.packet(&conn.c(3000, SYN, b""), now).unwrap();
    assert!(r.new);
    assert_eq!(r.flow.tcp_state(), Some(TcpState::SynSent));

    let conn = Conn { port: 40003 };
    conn.open(&mut t, now);
    t.packet(&conn.c(1001, ACK, b"abcd"), now).unwrap();
    // An RST behind the data already seen is not believed; one at the next byte is.
    let r = t.packet(&conn.c(900, RST, b""), now).unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::Established));
    let r = t.packet(&conn.c(1005, RST, b""), now).unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::Closed));
    // Data after the close is not reassembled.
    let r = t.packet(&conn.s(5001, ACK, b"late"), now).unwrap();
    assert!(r.seg.ignored);
}

#[test]
fn syn_flood_does_not_evict_established_flows() {
    let t0 = Instant::now();
    let counters = FlowCounters::default();
    let mut t: FlowTable<u32> = FlowTable::new(
        FlowLimits {
            max_flows: 16,
            ..FlowLimits::default()
        },
        counters.clone(),
    );
    for port in 1..=4 {
        let conn = Conn { port };
        conn.open(&mut t, t0);
        t.packet(&conn.c(1001, ACK, b"x"), t0).unwrap().flow.state = u32::from(port);
    }
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..1000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let src = 0xffff_c000_0000 | u128::from(rng as u16);
        let r = t.packet(
            &tcp((src, (rng >> 16) as u16), (S, 80), rng as u32, 0, SYN, b""),
            t0,
        );
        assert!(r.is_some());
        assert!(t.len() <= 16);
    }
    assert_eq!(counters.created.get(), 1004);
    assert_eq!(counters.evicted.get(), 1004 - 16);
    assert_eq!(counters.overflow.get(), 0);
    for port in 1..=4 {
        let r = t.packet(&Conn { port }.c(1002, ACK, b"y"), t0).unwrap();
        assert!(!r.new);
        assert_eq!(r.flow.state, u32::from(port));
        assert_eq!(r.seg.new, 1);
    }
    // A table of established flows only: a new flow is not tracked, and counted.
    let mut t: FlowTable<u32> = FlowTable::new(
        FlowLimits {
            max_flows: 4,
            ..FlowLimits::default()
        },
        counters.clone(),
    );
    for port in 1..=4 {
        Conn { port }.open(&mut t, t0);
    }
    assert!(t.packet(&Conn { port: 9 }.c(1000, SYN, b""), t0).is_none());
    assert_eq!(counters.overflow.get(), 1);
    assert_eq!(t.len(), 4);
    // A closed flow may go.
    t.packet(&Conn { port: 1 }.c(1001, RST, b""), t0).unwrap();
    assert!(t.packet(&Conn { port: 9 }.c(1000, SYN, b""), t0).is_some());
    assert!(t.flows().all(|f| f.client().1 != 1));
}

#[test]
fn timeouts_free_flows() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let counters = FlowCounters::default();
    let mut t: FlowTable<u32> = FlowTable::new(FlowLimits::default(), counters.clone());
    t.packet(&udp(C, 1, S, 53), t0).unwrap(); // new
    t.packet(&udp(C, 2, S, 53), t0).unwrap();
    t.packet(&udp(S, 53, C, 2), t0).unwrap(); // established
    let closed = Conn { port: 3 };
    closed.open(&mut t, t0);
    t.packet(&closed.c(1001, ACK, &[0; 3000]), t0).unwrap();
    t.packet(&closed.c(4001, RST, b""), t0).unwrap();
    let open = Conn { port: 4 };
    open.open(&mut t, t0);
    t.packet(&open.c(1001, ACK, &[0; 3000]), t0).unwrap();
    assert_eq!(t.len(), 4);
    let mem = t.mem();
    assert!(mem > 0);
    assert_eq!(t.sweep(t0 + s(10)), 0);
    // The closed flow goes after 10 s, freeing its stream memory.
    assert_eq!(t.sweep(t0 + s(11)), 1);
    assert!(t.mem() < mem);
    assert_eq!(t.sweep(t0 + s(31)), 1);
    assert_eq!(t.len(), 2);
    assert_eq!(t.sweep(t0 + s(301)), 2);
    assert!(t.is_empty());
    assert_eq!(t.mem(), 0);
    assert_eq!(counters.timed_out.get(), 4);
    assert_eq!(counters.stream.memuse.get(), 0);
    // A packet of a timed-out flow not yet swept starts a fresh flow.
    let r = t.packet(&udp(C, 1, S, 53), t0 + s(400)).unwrap();
    r.flow.state = 5;
    let r = t.packet(&udp(C, 1, S, 53), t0 + s(431)).unwrap();
    assert!(r.new);
    assert_eq!(r.flow.state, 0);
    assert_eq!(counters.timed_out.get(), 5);
}

#[test]
fn sweeps_are_lazy_and_make_room() {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(31);
    let counters = FlowCounters::default();
    let limits = FlowLimits {
        max_flows: 8,
        ..FlowLimits::default()
    };
    // Each packet examines a few slots: traffic on one flow sweeps the others.
    let mut t: FlowTable<u32> = FlowTable::new(FlowLimits::default(), counters.clone());
    for port in 0..8 {
        t.packet(&udp(C, port, S, 53), t0).unwrap();
    }
    for _ in 0..8 {
        t.packet(&udp(C, 100, S, 53), later).unwrap();
    }
    assert_eq!(t.len(), 1);
    assert_eq!(counters.timed_out.get(), 8);
    // A full table sweeps whole before it evicts, at most once a second.
    let counters = FlowCounters::default();
    let mut t: FlowTable<u32> = FlowTable::new(limits.clone(), counters.clone());
    for port in 0..8 {
        t.packet(&udp(C, port, S, 53), t0).unwrap();
    }
    let ns = t.ns(later);
    assert!(t.make_room(ns));
    assert!(t.is_empty());
    assert_eq!(counters.timed_out.get(), 8);
    for port in 0..8 {
        t.packet(&udp(C, port, S, 53), later).unwrap();
        t.packet(&udp(S, 53, C, port), later).unwrap();
    }
    // Established, not timed out, swept a moment ago: no room.
    assert!(!t.make_room(ns + 1));
    assert!(t.packet(&udp(C, 99, S, 53), later).is_none());
    assert_eq!(counters.overflow.get(), 1);
    assert_eq!(counters.evicted.get(), 0);
    // Timed out flows make room before anything is evicted.
    let t2 = later + Duration::from_secs(301);
    assert!(t.packet(&udp(C, 99, S, 53), t2).unwrap().new);
    assert_eq!(counters.evicted.get(), 0);
}

#[test]
fn stream_memory_holds_its_bound_under_an_ooo_flood() {
    let t0 = Instant::now();
    let counters = FlowCounters::default();
    let memcap = 1 << 20;
    let mut t: FlowTable<u32> = FlowTable::new(
        FlowLimits {
            max_flows: 64,
            memcap,
            ..FlowLimits::default()
        },
        counters.clone(),
    );
    for port in 0..64 {
        Conn { port }.open(&mut t, t0);
    }
    let payload = [0x55u8; 1400];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let conn = Conn {
            port: (rng % 64) as u16,
        };
        // Always past a gap: never in order.
        let seq = 1002 + (rng >> 8) as u32 % 1_000_000;
        let p = if rng & 1 == 0 {
            conn.c(seq, ACK, &payload)
        } else {
            conn.s(seq + 4000, ACK, &payload)
        };
        t.packet(&p, t0).unwrap();
        assert!(t.mem() <= memcap);
    }
    let held: usize = t
        .flows()
        .flat_map(|f| [f.stream(Dir::ToServer), f.stream(Dir::ToClient)])
        .flatten()
        .map(|s| s.mem())
        .sum();
    assert_eq!(held, t.mem());
    assert!(counters.stream.truncated.get() > 0);
    assert!(counters.stream.ooo_dropped.get() > 0);
}

#[test]
fn hostile_packets_do_not_panic() {
    let t0 = Instant::now();
    let mut t: FlowTable<u32> = table(FlowLimits {
        max_flows: 32,
        memcap: 200_000,
        midstream: true,
        ..FlowLimits::default()
    });
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let payload = [0xaau8; 3000];
    for i in 0..50_000u64 {
        let r = next();
        let (src, dst) = if r & 1 == 0 { (C, S) } else { (S, C) };
        let p = tcp(
            (src, (r >> 1) as u16 % 4),
            (dst, (r >> 3) as u16 % 4),
            next() as u32 % 5000,
            next() as u32 % 5000,
            next() as u8,
            &payload[..(r >> 20) as usize % payload.len()],
        );
        let now = t0 + Duration::from_millis(i * 3);
        if let Some(f) = t.packet(&p, now)
            && let Some(s) = f.flow.stream_mut(f.dir)
        {
            let end = s.end();
            s.consume_app(end.saturating_sub(next() % 2000));
            s.consume_raw(end.saturating_sub(next() % 2000));
        }
        assert!(t.mem() <= 200_000);
        assert!(t.len() <= 32);
    }
}

#[test]
fn flow_size_is_as_documented() {
    // The module docs state 584 bytes a slot with the engine's state (this, without it).
    let n = std::mem::size_of::<Flow<()>>();
    assert!(n <= 500, "{n}");
}

#[test]
fn tcp_fast_open_options_are_recognised() {
    // NOP, NOP, kind 34 with an 8-byte cookie.
    assert!(tcp_fast_open(&[1, 1, 34, 10, 1, 2, 3, 4, 5, 6, 7, 8]));
    // A cookie request (length 2) after an MSS option.
    assert!(tcp_fast_open(&[2, 4, 5, 180, 34, 2]));
    // The experimental kind with the magic, and without it.
    assert!(tcp_fast_open(&[254, 4, 0xf9, 0x89]));
    assert!(!tcp_fast_open(&[254, 4, 0xf9, 0x88]));
    // Odd cookie length, an option running past the end, end of list first, nothing.
    assert!(!tcp_fast_open(&[34, 5, 1, 2, 3]));
    assert!(!tcp_fast_open(&[34, 10, 1, 2]));
    assert!(!tcp_fast_open(&[0, 34, 2]));
    assert!(!tcp_fast_open(&[1, 1, 8]));
    assert!(!tcp_fast_open(&[]));
}

#[test]
fn tcp_fast_open_syn_data_is_reassembled() {
    let now = Instant::now();
    let mut t = table(FlowLimits::default());
    let mut syn = tcp((C, 5), (S, 80), 1000, 0, SYN, b"GET /");
    let plain = syn;
    if let Some(h) = &mut syn.tcp {
        h.tfo = true;
    }
    let r = t.packet(&syn, now).unwrap();
    assert_eq!(r.seg.new, 5);
    assert!(!r.established);
    assert_eq!(r.flow.stream(Dir::ToServer).unwrap().data(), b"GET /");
    // The SYN-ACK acknowledges the SYN and its data.
    let r = t
        .packet(&tcp((S, 80), (C, 5), 5000, 1006, SYN | ACK, b""), now)
        .unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::SynRecv));
    let r = t
        .packet(&tcp((C, 5), (S, 80), 1006, 5001, ACK, b" HTTP"), now)
        .unwrap();
    assert!(r.established);
    assert_eq!(r.flow.stream(Dir::ToServer).unwrap().data(), b"GET / HTTP");
    // Without the option the data is not reassembled, and that SYN-ACK answers nothing.
    let mut t = table(FlowLimits::default());
    let r = t.packet(&plain, now).unwrap();
    assert!(r.seg.ignored);
    let r = t
        .packet(&tcp((S, 80), (C, 5), 5000, 1006, SYN | ACK, b""), now)
        .unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::SynSent));
}

#[test]
fn an_rst_without_a_session_establishes_nothing() {
    let now = Instant::now();
    let mut t = table(FlowLimits::default());
    t.packet(&tcp((C, 6), (S, 80), 7000, 9000, ACK | PSH, b"hi"), now)
        .unwrap();
    let r = t
        .packet(&tcp((S, 80), (C, 6), 9000, 0, RST, b""), now)
        .unwrap();
    assert_eq!(r.flow.tcp_state(), Some(TcpState::Unsynced));
    let r = t
        .packet(&tcp((C, 6), (S, 80), 7000, 9000, ACK | PSH, b"hi"), now)
        .unwrap();
    assert!(!r.established);
    assert!(!r.flow.established());
    assert!(!r.flow.synced());
}

#[test]
fn a_midstream_pickup_is_established_from_its_second_packet() {
    let now = Instant::now();
    let mut t = table(FlowLimits {
        midstream: true,
        ..FlowLimits::default()
    });
    let r = t
        .packet(&tcp((C, 7), (S, 80), 7000, 9000, ACK | PSH, b"one"), now)
        .unwrap();
    assert!(!r.established);
    assert!(r.flow.synced());
    assert_eq!(r.seg.new, 3);
    let r = t
        .packet(&tcp((C, 7), (S, 80), 7003, 9000, ACK | PSH, b"two"), now)
        .unwrap();
    assert!(r.established);
}
