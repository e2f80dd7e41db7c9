//! Suricata 8's thresholds through `Detector::inspect`: `track by_flow`, `threshold: type
//! backoff` and `detection_filter: unique_on`.

mod common;

use common::*;
use relay_core::Packet;
use relay_svc_ids::{Outcome, RuleSet};
use std::time::Instant;

/// A PSH|ACK segment with payload `x` from the client's `sport` to the server's port 80.
fn to_server(sport: u16) -> Packet {
    tcp4(CLIENT, SERVER, sport, 80, 0x18, b"x")
}

/// The same flow's other direction.
fn to_client(sport: u16) -> Packet {
    tcp4(SERVER, CLIENT, 80, sport, 0x18, b"x")
}

#[test]
fn by_flow_keys_thresholds_and_filters_by_flow() {
    let (mut d, c) = detector(
        "alert tcp any any <> any any (content:\"x\"; threshold: type limit, track by_flow, count 1, seconds 60; sid:1;)",
    );
    let now = Instant::now();
    // Flow A both ways: one alert; flow B (another source port, same addresses): its own.
    for mut p in [to_server(40000), to_client(40000), to_server(40000)] {
        d.inspect(&mut p, now);
    }
    assert_eq!(counter(&c, "alerts"), 1);
    d.inspect(&mut to_server(40001), now);
    d.inspect(&mut to_server(40001), now);
    assert_eq!((counter(&c, "alerts"), counter(&c, "suppressed")), (2, 3));

    let (mut d, _) = detector(
        "drop tcp any any <> any any (content:\"x\"; detection_filter: track by_flow, count 2, seconds 60; sid:2;)",
    );
    let v: Vec<Outcome> = [
        to_server(40000),
        to_client(40000),
        to_server(40001),
        to_server(40000),
    ]
    .into_iter()
    .map(|mut p| d.inspect(&mut p, now))
    .collect();
    assert_eq!(
        v,
        [
            Outcome::Clean,
            Outcome::Clean,
            Outcome::Clean,
            Outcome::Drop
        ]
    );
}

#[test]
fn backoff_alerts_at_count_times_powers_of_the_multiplier() {
    let (mut d, c) = detector(
        "drop tcp any any -> any any (content:\"x\"; threshold: type backoff, track by_flow, count 1, multiplier 2; sid:1;)",
    );
    let now = Instant::now();
    let mut alerted = Vec::new();
    for n in 1..=20u64 {
        let before = counter(&c, "alerts");
        // The action applies to every match; only the alerts back off.
        assert_eq!(d.inspect(&mut to_server(40000), now), Outcome::Drop);
        if counter(&c, "alerts") > before {
            alerted.push(n);
        }
        // Another flow in between has its own sequence (alerts at its 1st and 2nd).
        if n <= 3 {
            d.inspect(&mut to_server(50000), now);
        }
    }
    assert_eq!(alerted, [1, 2, 4, 8, 16]);
    assert_eq!((counter(&c, "alerts"), counter(&c, "suppressed")), (7, 16));
}

#[test]
fn unique_on_counts_distinct_source_ports() {
    let (mut d, c) = detector(
        "drop tcp any any -> 10.0.2.2 80 (flags:S; detection_filter: track by_src, count 2, seconds 60, unique_on src_port; sid:3;)",
    );
    let now = Instant::now();
    let syn = |src, sport| tcp4(src, SERVER, sport, 80, 0x02, b"");
    let v: Vec<Outcome> = [1000, 1000, 1001, 1001, 1002, 1000]
        .into_iter()
        .map(|p| d.inspect(&mut syn(CLIENT, p), now))
        .collect();
    assert_eq!(
        v,
        [
            Outcome::Clean,
            Outcome::Clean,
            Outcome::Clean,
            Outcome::Clean,
            Outcome::Drop,
            Outcome::Drop
        ]
    );
    // Another source counts its own ports.
    assert_eq!(
        d.inspect(&mut syn([10, 0, 1, 9], 1002), now),
        Outcome::Clean
    );
    assert_eq!(counter(&c, "sid:3"), 2);

    // unique_on needs ports: an ip rule is refused, naming the keyword.
    let set = RuleSet::parse_str(
        "alert ip any any -> any any (detection_filter: track by_src, count 2, seconds 60, unique_on src_port; sid:4;)",
        "test.rules",
        &vars(),
    )
    .unwrap();
    let e = set
        .errors()
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        e.contains("`detection_filter`") && e.contains("unique_on"),
        "{e}"
    );
}
