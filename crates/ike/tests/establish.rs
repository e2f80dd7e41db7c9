//! IKE_SA_INIT and IKE_AUTH in memory: both suites, both DH groups, transport and tunnel,
//! failures.

mod common;
use common::*;
use relay_ike::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

fn pair(ike: &str, esp: &str, mode: Mode) -> Net {
    Net::new(
        conn("c", A, B, true, ike, esp, mode),
        conn("c", B, A, false, ike, esp, mode),
    )
}

#[test]
fn establishes_every_suite_and_group() {
    for (ike, esp) in [
        ("aes128gcm16-prfsha256-x25519", "aes128gcm16"),
        ("aes256gcm16-prfsha256-ecp256", "aes256gcm16"),
        ("aes128-sha256-x25519", "aes128-sha256"),
        ("aes256-sha256-ecp256", "aes256-sha256"),
    ] {
        for mode in [Mode::Transport, Mode::Tunnel] {
            let mut n = pair(ike, esp, mode);
            n.advance(Duration::ZERO);
            let (ca, cb) = (Net::children_up(&n.ev_a), Net::children_up(&n.ev_b));
            assert_eq!((ca.len(), cb.len()), (1, 1), "{ike} {esp} {mode:?}");
            assert_paired(ca[0], cb[0]);
            assert_eq!(ca[0].mode, mode);
            assert!(ca[0].encap.is_none());
            assert!(n.ev_a.iter().any(|e| matches!(e, Event::IkeUp { .. })));
            assert_eq!(n.a.status_at(n.now)[0].state, IkeState::Established);
            assert_eq!(n.b.status_at(n.now)[0].children.len(), 1);
            assert_eq!(
                n.a.counters().auth_failures + n.b.counters().auth_failures,
                0
            );
        }
    }
}

#[test]
fn psk_mismatch_fails_without_child() {
    let mut cb = conn(
        "c",
        B,
        A,
        false,
        "aes128gcm16-prfsha256-x25519",
        "aes128gcm16",
        Mode::Transport,
    );
    cb.psk = Secret::new(b"another secret".to_vec());
    let mut n = Net::new(
        conn(
            "c",
            A,
            B,
            true,
            "aes128gcm16-prfsha256-x25519",
            "aes128gcm16",
            Mode::Transport,
        ),
        cb,
    );
    n.advance(Duration::ZERO);
    assert!(Net::children_up(&n.ev_a).is_empty() && Net::children_up(&n.ev_b).is_empty());
    assert_eq!(n.b.counters().auth_failures, 1);
    assert_eq!(
        n.a.counters().auth_failures,
        1,
        "AUTHENTICATION_FAILED received"
    );
    assert!(n.ev_a.iter().any(
        |e| matches!(e, Event::IkeDown { reason, .. } if reason.contains("AUTHENTICATION_FAILED"))
    ));
    assert!(n.b.status_at(n.now).is_empty());
}

#[test]
fn no_common_proposal() {
    let mut n = Net::new(
        conn(
            "c",
            A,
            B,
            true,
            "aes128gcm16-prfsha256-x25519",
            "aes128gcm16",
            Mode::Tunnel,
        ),
        conn(
            "c",
            B,
            A,
            false,
            "aes256-sha256-ecp256",
            "aes128gcm16",
            Mode::Tunnel,
        ),
    );
    n.advance(Duration::ZERO);
    assert_eq!(n.b.counters().no_proposal, 1);
    assert!(n.ev_a.iter().any(|e| matches!(e, Event::IkeDown { .. })));
    // ESP proposals that do not meet: IKE SA up, no child SA.
    let mut n = Net::new(
        conn(
            "c",
            A,
            B,
            true,
            "aes128gcm16-prfsha256-x25519",
            "aes128gcm16",
            Mode::Tunnel,
        ),
        conn(
            "c",
            B,
            A,
            false,
            "aes128gcm16-prfsha256-x25519",
            "aes256-sha256",
            Mode::Tunnel,
        ),
    );
    n.advance(Duration::ZERO);
    assert!(Net::children_up(&n.ev_a).is_empty());
    assert!(n.b.counters().no_proposal >= 1);
}

#[test]
fn invalid_ke_retries_with_the_peers_group() {
    let mut n = Net::new(
        conn(
            "c",
            A,
            B,
            true,
            "aes128gcm16-prfsha256-x25519,aes128gcm16-prfsha256-ecp256",
            "aes128gcm16",
            Mode::Tunnel,
        ),
        conn(
            "c",
            B,
            A,
            false,
            "aes128gcm16-prfsha256-ecp256",
            "aes128gcm16",
            Mode::Tunnel,
        ),
    );
    n.advance(Duration::ZERO);
    assert_eq!(Net::children_up(&n.ev_a).len(), 1);
}

#[test]
fn traffic_selectors_are_narrowed() {
    let mut ca = conn(
        "c",
        A,
        B,
        true,
        "aes128gcm16-prfsha256-x25519",
        "aes128gcm16",
        Mode::Tunnel,
    );
    ca.local_ts = vec![TrafficSelector::subnet("192.168.0.0".parse().unwrap(), 16)];
    ca.remote_ts = vec![TrafficSelector::subnet("0.0.0.0".parse().unwrap(), 0)];
    let mut cb = conn(
        "c",
        B,
        A,
        false,
        "aes128gcm16-prfsha256-x25519",
        "aes128gcm16",
        Mode::Tunnel,
    );
    cb.local_ts = vec![TrafficSelector::subnet("172.16.1.0".parse().unwrap(), 24)];
    cb.remote_ts = vec![TrafficSelector::subnet("192.168.5.0".parse().unwrap(), 24)];
    let mut n = Net::new(ca, cb);
    n.advance(Duration::ZERO);
    let a = Net::children_up(&n.ev_a)[0].clone();
    assert_eq!(
        a.local_ts,
        vec![TrafficSelector::subnet("192.168.5.0".parse().unwrap(), 24)]
    );
    assert_eq!(
        a.remote_ts,
        vec![TrafficSelector::subnet("172.16.1.0".parse().unwrap(), 24)]
    );
    // Disjoint selectors: TS_UNACCEPTABLE, no child.
    let mut cb = conn(
        "c",
        B,
        A,
        false,
        "aes128gcm16-prfsha256-x25519",
        "aes128gcm16",
        Mode::Tunnel,
    );
    cb.remote_ts = vec![TrafficSelector::subnet("10.9.0.0".parse().unwrap(), 16)];
    let mut n = Net::new(
        conn(
            "c",
            A,
            B,
            true,
            "aes128gcm16-prfsha256-x25519",
            "aes128gcm16",
            Mode::Tunnel,
        ),
        cb,
    );
    n.advance(Duration::ZERO);
    assert!(Net::children_up(&n.ev_a).is_empty());
    assert_eq!(n.b.counters().ts_unacceptable, 1);
    assert_eq!(n.a.counters().ts_unacceptable, 1);
}

#[test]
fn nat_is_detected_and_floats_to_4500() {
    let mut n = pair("aes128gcm16-prfsha256-x25519", "aes128gcm16", Mode::Tunnel);
    n.nat_a = Some("198.51.100.7:40000".parse().unwrap());
    n.advance(Duration::ZERO);
    let (ca, cb) = (Net::children_up(&n.ev_a), Net::children_up(&n.ev_b));
    assert_eq!((ca.len(), cb.len()), (1, 1));
    let (l, r) = ca[0].encap.unwrap();
    assert_eq!((l.port(), r.port()), (4500, 4500));
    let (l, r) = cb[0].encap.unwrap();
    assert_eq!((l.port(), r), (4500, "198.51.100.7:40001".parse().unwrap()));
}

#[test]
fn responder_under_load_demands_cookies() {
    let mut n = pair("aes128gcm16-prfsha256-x25519", "aes128gcm16", Mode::Tunnel);
    // 64 half-open SAs from initiators that never come back.
    for seed in 100..164 {
        let mut e = Endpoint::new(
            vec![conn(
                "c",
                A,
                B,
                true,
                "aes128gcm16-prfsha256-x25519",
                "aes128gcm16",
                Mode::Tunnel,
            )],
            Box::new(SeededRng::new(seed)),
        );
        e.handle_timeout(n.now);
        let t = e.poll_transmit().unwrap();
        n.b.handle(n.now, t.remote, source(seed), &t.payload);
        while n.b.poll_transmit().is_some() {}
    }
    assert_eq!(n.b.counters().cookies_sent, 0);
    n.advance(Duration::ZERO);
    assert_eq!(n.b.counters().cookies_sent, 1);
    assert_eq!(
        Net::children_up(&n.ev_a).len(),
        1,
        "established with the cookie"
    );
    // The half-open ones expire.
    n.advance(Duration::from_secs(60));
    assert_eq!(n.b.status_at(n.now).len(), 1, "{:#?}", n.b.status_at(n.now));
}

#[test]
fn huge_lifetimes_do_not_overflow() {
    let mut ca = conn(
        "c",
        A,
        B,
        true,
        "aes128gcm16-prfsha256-x25519",
        "aes128gcm16",
        Mode::Tunnel,
    );
    ca.ike_rekey = Duration::MAX;
    ca.child_rekey = Duration::MAX;
    ca.dpd_delay = Duration::MAX;
    ca.retransmit.timeout = Duration::MAX;
    let mut cb = ca.clone();
    cb.name = "c".into();
    std::mem::swap(&mut cb.local, &mut cb.remote);
    std::mem::swap(&mut cb.local_id, &mut cb.remote_id);
    std::mem::swap(&mut cb.local_ts, &mut cb.remote_ts);
    cb.initiate = false;
    let mut n = Net::new(ca, cb);
    n.advance(Duration::from_secs(10));
    assert_eq!(Net::children_up(&n.ev_a).len(), 1);
}

#[test]
fn unusable_configuration_is_refused_by_name() {
    let mut ca = conn(
        "c",
        A,
        B,
        false,
        "aes128gcm16-prfsha256-x25519",
        "aes128gcm16",
        Mode::Tunnel,
    );
    ca.remote_ts.clear();
    let mut e = Endpoint::new(vec![ca], Box::new(SeededRng::new(1)));
    let now = std::time::Instant::now();
    match e.initiate(now, "c") {
        Err(Error::BadConfig { conn, problem }) => {
            assert!(conn == "c" && problem.contains("remote_ts"), "{problem}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.initiate(now, "d"), Err(Error::UnknownConn("d".into())));
    assert!(e.poll_transmit().is_none());
    // Started by the endpoint itself: an IkeDown event says why.
    let mut ca = conn(
        "c",
        A,
        B,
        true,
        "aes128gcm16-prfsha256-x25519",
        "aes128gcm16",
        Mode::Tunnel,
    );
    ca.local_ts.clear();
    let mut e = Endpoint::new(vec![ca], Box::new(SeededRng::new(1)));
    e.handle_timeout(now);
    assert!(
        matches!(e.poll_event(), Some(Event::IkeDown { reason, .. }) if reason.contains("local_ts"))
    );
    assert!(e.poll_transmit().is_none() && e.poll_timeout().is_none());
}

#[test]
fn half_open_sas_are_bounded_even_with_cookies() {
    let mut n = pair("aes128gcm16-prfsha256-x25519", "aes128gcm16", Mode::Tunnel);
    for seed in 1000..2100 {
        let mut e = Endpoint::new(
            vec![conn(
                "c",
                A,
                B,
                true,
                "aes128gcm16-prfsha256-x25519",
                "aes128gcm16",
                Mode::Tunnel,
            )],
            Box::new(SeededRng::new(seed)),
        );
        e.handle_timeout(n.now);
        // The initiator answers cookies but never sends IKE_AUTH.
        for _ in 0..2 {
            let Some(t) = e.poll_transmit() else { break };
            n.b.handle(n.now, t.remote, source(seed), &t.payload);
            if let Some(r) = n.b.poll_transmit()
                && r.payload.len() < 100
            {
                e.handle(n.now, r.remote, r.local, &r.payload);
            }
        }
    }
    assert_eq!(
        n.b.counters().cookies_sent,
        1024 - 64,
        "a cookie for each beyond 64 half-open"
    );
    assert_eq!(n.b.status_at(n.now).len(), 1024);
    assert_eq!(n.b.counters().dropped_half_open, 1100 - 1024);
}

/// An initiator's address of its own (198.18.0.0/15, for tests), so that a crowd of
/// half-open SAs is not refused as one source's.
fn source(seed: u64) -> SocketAddr {
    SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(198, 18, (seed >> 8) as u8, seed as u8)),
        500,
    )
}

/// One host on its real address (answering cookies) cannot take every half-open slot:
/// beyond a few, its new IKE_SA_INIT requests are dropped, and others still get in.
#[test]
fn one_source_cannot_fill_the_half_open_table() {
    let mut n = pair("aes128gcm16-prfsha256-x25519", "aes128gcm16", Mode::Tunnel);
    for seed in 200..300 {
        let mut e = Endpoint::new(
            vec![conn(
                "c",
                A,
                B,
                true,
                "aes128gcm16-prfsha256-x25519",
                "aes128gcm16",
                Mode::Tunnel,
            )],
            Box::new(SeededRng::new(seed)),
        );
        e.handle_timeout(n.now);
        let t = e.poll_transmit().unwrap();
        n.b.handle(n.now, t.remote, source(7), &t.payload);
        while n.b.poll_transmit().is_some() {}
    }
    assert_eq!(n.b.status_at(n.now).len(), 8, "half-open from one source");
    assert_eq!(n.b.counters().dropped_half_open, 100 - 8);
    // The real peer, from its own address, still establishes.
    n.advance(Duration::ZERO);
    assert_eq!(Net::children_up(&n.ev_a).len(), 1);
}
