//! NFQUEUE flow offload on the real kernel (docs/offload.md): a flow whose chain votes to
//! offload leaves the queue after its first packets and the kernel forwards the rest;
//! without offload the queue sees every packet; a reload revokes; a chain with a service
//! that never votes cannot be configured to offload. Needs root (as CI runs it).

mod support;

use relay_testbed::line3;
use std::time::Duration;
use support::*;

/// Queue 7 in FORWARD for UDP to port 5700, running `services`, offloading or not.
fn config(services: &str, offload: bool) -> String {
    format!(
        "[service.m]\nkind = \"mark\"\nmark = \"0x20\"\nmask = \"0xff\"\n\n\
         [[queue]]\nnum = 7\nhook = \"forward\"\nmatch = \"-p udp --dport 5700\"\n\
         services = {services}\noffload = {offload}\n"
    )
}

const DST: &str = "10.0.2.2:5700";

/// The queue's status.
fn queue(r: &Relayd) -> relayd::status::QueueStatus {
    r.queue(7)
}

/// Waits until the queue's packet counter has not moved for half a second; returns it.
fn settled(r: &Relayd) -> u64 {
    r.settled(7)
}

#[test]
fn an_offloaded_flow_skips_the_queue_while_its_bytes_arrive() {
    let l = line3("offl-on");
    let r = Relayd::start(&l.relay, &config("[\"accept\"]", true));
    let rules = iptables_save(&l.relay);
    assert!(
        rules.contains("--comment relayd-offload-7 -j ACCEPT"),
        "{rules}"
    );
    // 4 s of one UDP flow at 1000 datagrams/s.
    let flow = UdpFlow::start(&l.src, &l.dst, addr(DST), Some(1000), 200, 4.0);
    std::thread::sleep(Duration::from_millis(1000));
    let early = settled(&r);
    std::thread::sleep(Duration::from_millis(1500));
    let late = queue(&r).packets;
    let (sent, got) = flow.finish();
    let q = queue(&r);
    assert_eq!(
        late, early,
        "the queue's counter moved after the offload: {q:?}"
    );
    assert!(
        early < 100,
        "more than the first packets were queued: {q:?}"
    );
    assert_eq!(got.packets, sent.packets, "datagrams lost: {q:?}");
    assert!(sent.packets >= 3500, "{sent:?}");
    let o = q.offload.clone().expect("offload counters");
    assert_eq!(o.flows.get("decided"), Some(&1), "{o:?}\n{}", r.log());
    assert_eq!(q.errors, 0, "{q:?}");
    assert!(
        o.skipped_packets + q.packets >= sent.packets && o.skipped_packets >= 3000,
        "the skip rules' counters do not account for the flow: {o:?} sent {}",
        sent.packets
    );
    assert!(o.skipped_bytes >= o.skipped_packets * 228, "{o:?}");
    // And in the metrics' names, as the status shows them.
    let text = relayd::metrics::encode(&r.status());
    for name in [
        "relayd_queue_offload_flows_total{queue=\"7\",hook=\"forward\",reason=\"decided\"} 1",
        "relayd_queue_offload_skipped_packets_total{queue=\"7\",hook=\"forward\"}",
    ] {
        assert!(text.contains(name), "no {name} in\n{text}");
    }
}

#[test]
fn without_offload_the_queue_sees_every_packet() {
    let l = line3("offl-off");
    let r = Relayd::start(&l.relay, &config("[\"accept\"]", false));
    assert!(!iptables_save(&l.relay).contains("relayd-offload"));
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr(DST), 2000, 1000, 200);
    let q = queue(&r);
    assert_eq!(got, sent, "{q:?}");
    assert!(
        q.packets >= sent,
        "the queue missed packets: {q:?} sent {sent}"
    );
    assert_eq!(q.offload, None, "{q:?}");
}

#[test]
fn a_chain_with_a_service_that_never_votes_is_never_offloaded() {
    let l = line3("offl-never");
    // `dump` declares no offload: its queue cannot offload, and accept's vote alone
    // does not take the flow out.
    let r = Relayd::start(&l.relay, &config("[\"dump\", \"accept\"]", false));
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr(DST), 1000, 1000, 200);
    let q = queue(&r);
    assert_eq!(got, sent);
    assert!(q.packets >= sent, "{q:?} sent {sent}");
    assert_eq!(q.offload, None, "{q:?}");
    // And `relayd check` refuses offload = true for it, naming the field and service.
    let f = r
        .dir
        .file("never.toml", &config("[\"dump\", \"accept\"]", true));
    let (code, out, err) = relayd_cmd(&l.relay, &["check", "-c", f.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("never.toml:")
            && err.contains("queue[0].offload")
            && err.contains("service `dump`"),
        "{err}"
    );
}

#[test]
fn a_reload_that_changes_the_chain_revokes_the_offload() {
    let l = line3("offl-reload");
    let r = Relayd::start(&l.relay, &config("[\"accept\"]", true));
    let flow = UdpFlow::start(&l.src, &l.dst, addr(DST), Some(1000), 200, 6.0);
    std::thread::sleep(Duration::from_millis(1000));
    let before = settled(&r);
    let q = queue(&r);
    assert_eq!(q.offload.as_ref().map(|o| o.revoked), Some(0), "{q:?}");
    // Counts the flow's packets that leave the relay carrying the `mark` service's bits.
    let out = l.relay.exec(&[
        "iptables",
        "-t",
        "filter",
        "-A",
        "FORWARD",
        "-p",
        "udp",
        "--dport",
        "5700",
        "-m",
        "mark",
        "--mark",
        "0x20/0xff",
    ]);
    assert!(out.status.success(), "{out:?}");
    // A new chain: the old generation's skip rules are gone, the flow comes back.
    r.rewrite(&config("[\"m\", \"accept\"]", true));
    reload(&r, 1);
    let skipped_at_reload = queue(&r).offload.map_or(0, |o| o.skipped_packets);
    let after = settled(&r);
    let (sent, got) = flow.finish();
    let q = queue(&r);
    let o = q.offload.clone().expect("offload counters");
    assert!(after > before, "no packet came back to the queue: {q:?}");
    assert_eq!(o.revoked, 1, "{o:?}");
    assert_eq!(o.flows.get("decided"), Some(&2), "offloaded again: {o:?}");
    assert_eq!(got.packets, sent.packets, "{q:?}");
    // The new chain's mark is restored onto the packets that skip the queue: every
    // packet after the reload carries it, queued or not.
    let listed = l.relay.exec(&[
        "iptables", "-t", "filter", "-L", "FORWARD", "-v", "-x", "-n",
    ]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let marked: u64 = listed
        .lines()
        .find(|l| l.contains("dpt:5700"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counting rule in\n{listed}"));
    assert!(
        marked >= 2000 && marked + 20 >= o.skipped_packets - skipped_at_reload,
        "{marked} marked packets, skipped {o:?}\n{listed}"
    );
    let rules = iptables_save(&l.relay);
    assert!(
        rules.contains("-j CONNMARK --restore-mark --nfmask 0x20 --ctmask 0x20"),
        "{rules}"
    );
    // The flow's conntrack mark carries the new generation, both directions and the mark.
    let ct = std::fs::read_to_string(format!("/proc/{}/net/nf_conntrack", r.proc.pid()))
        .unwrap_or_default();
    let line = ct
        .lines()
        .find(|l| l.contains("dport=5700"))
        .unwrap_or_else(|| panic!("no conntrack entry for the flow:\n{ct}"));
    let mark: u32 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("mark="))
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no mark in {line}"));
    assert_eq!(
        mark & 0x3_00ff,
        0x3_0020,
        "directions and restored mark: {line}"
    );
    assert_ne!(mark & 0xfc_0000, 0, "a generation: {line}");
}

/// A flow the relay DNATs (10.0.1.2:5800 -> 10.0.2.2:5700) is queued at FORWARD with its
/// translated tuple, which is neither of its conntrack entry's tuples: the update finds
/// the entry by the reply tuple (the packet's turned round) and the flow is offloaded.
#[test]
fn a_flow_the_relay_translated_is_offloaded_too() {
    let l = line3("offl-dnat");
    let out = l.relay.exec(&[
        "iptables",
        "-t",
        "nat",
        "-A",
        "PREROUTING",
        "-p",
        "udp",
        "--dport",
        "5800",
        "-j",
        "DNAT",
        "--to-destination",
        DST,
    ]);
    assert!(out.status.success(), "{out:?}");
    let r = Relayd::start(&l.relay, &config("[\"accept\"]", true));
    let sock = l.dst.run(|| std::net::UdpSocket::bind(addr(DST)).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_sink = stop.clone();
    let sink = std::thread::spawn(move || {
        relay_traffic::udp_sink_on(
            sock,
            Duration::from_millis(800),
            Duration::from_secs(60),
            Some(&*stop_sink),
        )
        .unwrap()
    });
    let mut cfg = relay_traffic::UdpSendConfig::new(addr("10.0.1.2:5800"));
    cfg.size = 200;
    cfg.rate_bps = Some(1000 * 228 * 8);
    cfg.duration = Duration::from_secs(3);
    cfg.ratio = 1.0;
    let sent = l.src.run(move || relay_traffic::udp_send(&cfg).unwrap());
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let got = sink.join().unwrap();
    let q = queue(&r);
    assert_eq!(got.packets, sent.packets, "{q:?}");
    let o = q.offload.clone().expect("offload counters");
    assert_eq!(o.flows.get("decided"), Some(&1), "{o:?}\n{}", r.log());
    assert!(
        q.packets < 100,
        "the translated flow stayed in the queue: {q:?}"
    );
}

/// One TCP connection through an `accept` queue with offload: it leaves the queue with its
/// first packets (the SYN's update finds the entry confirmed) and its bulk data arrives
/// whole, by the kernel's forwarding.
#[test]
fn a_tcp_connection_leaves_the_queue_after_its_first_packets() {
    let l = line3("offl-tcp");
    let r = Relayd::start(
        &l.relay,
        &config("[\"accept\"]", true).replace("-p udp --dport 5700", "-p tcp --dport 5701"),
    );
    let (sent, got) = tcp_exchange(&l.src, &l.dst, addr("10.0.2.2:5701"), 1.0);
    let q = queue(&r);
    let o = q.offload.clone().expect("offload counters");
    assert!(
        sent > 1_000_000 && got == sent,
        "TCP sent {sent} received {got}: {q:?}"
    );
    assert_eq!(o.flows.get("decided"), Some(&1), "{o:?}\n{}", r.log());
    assert!(q.packets < 50, "the connection stayed in the queue: {q:?}");
    assert!(o.skipped_bytes >= got, "{o:?} for {got} bytes");
}
