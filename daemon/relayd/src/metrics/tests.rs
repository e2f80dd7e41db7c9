//! The metrics' encoding: every figure a series with its help and type, a stable order,
//! escaped labels, the proxy's series and the scrape cache.

use super::*;
use crate::status::{KernelStatus, QueueStatus, ServiceStatus};
use std::collections::BTreeMap;

pub(crate) fn sample() -> Status {
    Status {
        version: "1.2.3".into(),
        uptime_s: 5.0,
        config: "/etc/relayd/relayd.toml".into(),
        reloads: 2,
        reload_failures: 1,
        start_time_ms: 1_700_000_000_500,
        unhealthy_queues: vec![1],
        queues: [0u16, 1]
            .iter()
            .map(|&num| QueueStatus {
                num,
                hook: "forward".into(),
                table: "mangle".into(),
                services: vec!["a".into()],
                fail_open: true,
                gso: true,
                copy_range: 65535,
                packets: 10 + u64::from(num),
                accepted: 9,
                dropped: 1,
                modified: 2,
                repeated: 0,
                malformed: 3,
                errors: 4,
                enobufs: 5,
                batches: 6,
                kernel: Some(KernelStatus {
                    waiting: 7,
                    queue_dropped: 8,
                    user_dropped: 9,
                }),
                datapath: if num == 1 {
                    [("transmitted".to_string(), 12)].into_iter().collect()
                } else {
                    Default::default()
                },
                offload: (num == 1).then(|| crate::status::OffloadStatus {
                    flows: BTreeMap::from([("decided".into(), 4), ("pass".into(), 1)]),
                    failed: 2,
                    revoked: 1,
                    skipped_packets: 300,
                    skipped_bytes: 45_000,
                }),
            })
            .collect(),
        services: vec![ServiceStatus {
            name: "ids \"x\"".into(),
            kind: "ids".into(),
            queues: vec![0],
            packets: 11,
            counters: BTreeMap::from([
                ("alerts".into(), 3),
                ("sid:1000001".into(), 2),
                ("sid:1000002".into(), 0),
                ("w_us".into(), 40),
            ]),
            gauges: vec!["w_us".into()],
        }],
        listeners: Vec::new(),
        qos: vec![crate::qos::ClassStatus {
            interface: "eth0".into(),
            class: "1d0:64".into(),
            name: "voice".into(),
            bytes: 1000,
            packets: 10,
            drops: 1,
        }],
        xdp: vec![crate::status::XdpStatus {
            interface: "veth0".into(),
            queues: vec![1],
            fail_open: true,
            mode: "native".into(),
            program: Some([("redirected".to_string(), 13)].into_iter().collect()),
            offload: Some([("flows".to_string(), 2)].into_iter().collect()),
        }],
        ike: Vec::new(),
    }
}

#[test]
fn every_figure_is_a_series_with_help_and_type() {
    let t = encode(&sample());
    for line in [
        "# TYPE relayd_queue_packets counter",
        "# HELP relayd_queue_packets Packets received from the queue.",
        "# HELP relayd_reloads Successful SIGHUP reloads since start.",
        "relayd_queue_packets_total{queue=\"0\",hook=\"forward\"} 10",
        "relayd_queue_packets_total{queue=\"1\",hook=\"forward\"} 11",
        "relayd_queue_enobufs_total{queue=\"0\",hook=\"forward\"} 5",
        "relayd_queue_kernel_queue_dropped_total{queue=\"0\",hook=\"forward\"} 8",
        "relayd_queue_kernel_user_dropped_total{queue=\"0\",hook=\"forward\"} 9",
        "relayd_queue_kernel_waiting_packets{queue=\"0\",hook=\"forward\"} 7.0",
        "relayd_queue_thread_up{queue=\"0\",hook=\"forward\"} 1.0",
        "relayd_queue_thread_up{queue=\"1\",hook=\"forward\"} 0.0",
        "relayd_queue_datapath_total{queue=\"1\",hook=\"forward\",counter=\"transmitted\"} 12",
        "relayd_queue_offload_flows_total{queue=\"1\",hook=\"forward\",reason=\"decided\"} 4",
        "relayd_queue_offload_flows_total{queue=\"1\",hook=\"forward\",reason=\"pass\"} 1",
        "relayd_queue_offload_failed_total{queue=\"1\",hook=\"forward\"} 2",
        "relayd_queue_offload_revoked_total{queue=\"1\",hook=\"forward\"} 1",
        "relayd_queue_offload_skipped_packets_total{queue=\"1\",hook=\"forward\"} 300",
        "relayd_queue_offload_skipped_bytes_total{queue=\"1\",hook=\"forward\"} 45000",
        "relayd_xdp_program_packets_total{interface=\"veth0\",outcome=\"redirected\"} 13",
        "relayd_xdp_offload{interface=\"veth0\",counter=\"flows\"} 2.0",
        "relayd_build_info{version=\"1.2.3\"} 1.0",
        "relayd_start_time_seconds 1700000000.5",
        "relayd_reloads_total 2",
        "relayd_reload_failures_total 1",
        "relayd_service_packets_total{service=\"ids \\\"x\\\"\",kind=\"ids\"} 11",
        "relayd_service_counter_total{service=\"ids \\\"x\\\"\",kind=\"ids\",counter=\"alerts\"} 3",
        "relayd_service_gauge{service=\"ids \\\"x\\\"\",kind=\"ids\",counter=\"w_us\"} 40.0",
        "relayd_ids_rule_hits_total{service=\"ids \\\"x\\\"\",sid=\"1000001\"} 2",
        "relayd_tc_class_sent_bytes_total{interface=\"eth0\",class=\"1d0:64\",name=\"voice\"} 1000",
        "relayd_tc_class_dropped_packets_total{interface=\"eth0\",class=\"1d0:64\",name=\"voice\"} 1",
        "# EOF",
    ] {
        assert!(t.lines().any(|l| l == line), "missing {line:?} in\n{t}");
    }
    assert!(!t.contains("sid:"), "{t}");
    assert!(
        !t.contains("1000002"),
        "a rule without hits has no series:\n{t}"
    );
}

#[test]
fn samples_are_in_a_stable_order() {
    let t = encode(&sample());
    let a = t.find("relayd_queue_packets_total{queue=\"0\"").unwrap();
    let b = t.find("relayd_queue_packets_total{queue=\"1\"").unwrap();
    assert!(a < b, "{t}");
    assert_eq!(t, encode(&sample()));
}

#[test]
fn proxy_listeners_have_counters_and_connection_gauges() {
    let mut st = sample();
    st.listeners = vec![crate::status::ListenerStatus {
        name: "split".into(),
        kind: "tproxy".into(),
        listen: "0.0.0.0:7000".into(),
        upstream: "mptcp".into(),
        state: "running".into(),
        stats: relay_proxy::StatsSnapshot {
            accepted: 12,
            active: 3,
            peak_active: 5,
            bytes_up: 1000,
            ..Default::default()
        },
    }];
    let t = encode(&st);
    let l = "{listener=\"split\",kind=\"tproxy\",listen=\"0.0.0.0:7000\",upstream=\"mptcp\",state=\"running\"}";
    for line in [
        format!("relayd_listener_accepted_total{l} 12"),
        format!("relayd_listener_bytes_up_total{l} 1000"),
        format!("relayd_listener_completed_total{l} 0"),
        format!("relayd_listener_active_connections{l} 3.0"),
        format!("relayd_listener_peak_active_connections{l} 5.0"),
        "# TYPE relayd_listener_active_connections gauge".to_string(),
        "# TYPE relayd_listener_accepted counter".to_string(),
    ] {
        assert!(t.lines().any(|x| x == line), "missing {line:?} in\n{t}");
    }
    // One HELP/TYPE per family however many listeners there are.
    st.listeners.push(st.listeners[0].clone());
    st.listeners[1].name = "other".into();
    let t = encode(&st);
    assert_eq!(
        t.matches("# TYPE relayd_listener_accepted counter").count(),
        1,
        "{t}"
    );
}

/// One status serves every scrape of the next second, concurrent ones included:
/// however many clients connect, the daemon's lock is taken (and `tc` run) at most
/// once a second for them.
#[test]
fn scrapes_within_a_second_share_one_status() {
    use std::io::{Read, Write};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let listener = rt.block_on(bind("127.0.0.1:0".parse().unwrap())).unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(serve(listener, Limits::default(), move || {
        counted.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        Some(sample())
    }));
    let scrape = move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        out
    };
    let clients: Vec<_> = (0..8).map(|_| std::thread::spawn(scrape)).collect();
    let bodies: Vec<String> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "eight scrapes, one status");
    let text = |r: &str| r.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    assert!(bodies.iter().all(|b| text(b) == text(&bodies[0])));
    std::thread::sleep(FRESH + Duration::from_millis(100));
    scrape();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "a new status after a second"
    );
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(esc("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}
