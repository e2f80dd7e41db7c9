//! Flow offload on the AF_XDP datapath, on the real kernel (docs/xdp.md, "Flow offload"):
//! a flow the chain offloads stops reaching the XDP queue while its packets keep
//! arriving, forwarded by the kernel and counted in the program's map; with offload off
//! every packet reaches the queue; a reload that changes the chain revokes, and so does
//! a new program; an idle flow comes back to the queue. Needs root.
//!
//! Topology (relay_testbed::line3): src 10.0.1.1 -- relay (XDP on eth0) -- dst 10.0.2.2.

mod support;

use relay_testbed::{Line3, Node, line3};
use std::net::UdpSocket;
use std::time::Duration;
use support::*;

/// Turns off transmit checksum offload on `node`'s `ifname` (see tests/xdp.rs: XDP sees
/// the bytes, which a veth that offloads leaves unfinished).
fn no_tx_offload(node: &Node, ifname: &str) {
    let out = node.exec(&["ethtool", "-K", ifname, "tx", "off"]);
    assert!(out.status.success(), "ethtool: {out:?}");
}

fn config(offload: bool, services: &str, extra: &str) -> String {
    format!(
        r#"
[[xdp]]
num = 0
interface = "eth0"
fail_open = true
services = [{services}]
offload = {offload}
{extra}
[service.again]
kind = "accept"
"#
    )
}

/// Sends `n` datagrams of one flow, 10.0.1.1:`sport` -> 10.0.2.2:`dport`, 2 ms apart,
/// and returns how many dst received.
fn flow(l: &Line3, sport: u16, dport: u16, n: u32) -> u32 {
    let bind = format!("10.0.2.2:{dport}");
    let rx = l.dst.run(move || UdpSocket::bind(&bind).unwrap());
    rx.set_read_timeout(Some(Duration::from_millis(600)))
        .unwrap();
    let to = format!("10.0.2.2:{dport}");
    l.src.run(move || {
        let s = UdpSocket::bind(format!("10.0.1.1:{sport}")).unwrap();
        for i in 0..n {
            s.send_to(&i.to_be_bytes(), &to).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let mut got = 0;
    let mut buf = [0u8; 64];
    while rx.recv_from(&mut buf).is_ok() {
        got += 1;
    }
    got
}

/// The packets XDP queue 0 has handled.
fn queue_packets(r: &Relayd) -> u64 {
    let st = r.status();
    st.queues
        .iter()
        .find(|q| q.num == 0)
        .expect("xdp queue 0")
        .packets
}

/// Program counter `name` of the port (0 if absent).
fn program(r: &Relayd, name: &str) -> u64 {
    let st = r.status();
    let p = st.xdp[0].program.clone().expect("program counters");
    p.get(name).copied().unwrap_or(0)
}

/// Offload figure `name` of the port (`flows`, `packets`, `expired`, ...).
fn offload(r: &Relayd, name: &str) -> u64 {
    let st = r.status();
    let o = st.xdp[0].offload.clone().expect("offload figures");
    o.get(name).copied().unwrap_or(0)
}

fn start(l: &Line3, body: &str) -> Relayd {
    let r = Relayd::start(&l.relay, body);
    // Neighbours resolved, so that the flow's first packets leave by AF_XDP.
    assert!(l.src.ping("10.0.2.2"), "ping through the relay");
    r
}

#[test]
fn an_offloaded_flow_skips_the_queue_and_a_reload_revokes_it() {
    let l = line3("xdpoff-on");
    no_tx_offload(&l.src, "eth0");
    let mut r = start(&l, &config(true, "\"accept\"", ""));
    // The flow's first packet goes through the chain, which offloads it.
    assert_eq!(flow(&l, 40000, 5000, 20), 20);
    let before = queue_packets(&r);
    let map_before = offload(&r, "packets");
    // Its later packets arrive, forwarded by the kernel, and skip the queue.
    assert_eq!(flow(&l, 40000, 5000, 200), 200, "the sink keeps receiving");
    assert_eq!(queue_packets(&r), before, "the queue saw none of them");
    let map_after = offload(&r, "packets");
    assert!(map_after >= map_before + 200, "{map_before} -> {map_after}");
    assert!(program(&r, "pass_offloaded") >= 200);
    assert!(offload(&r, "flows") >= 1);
    // Only the first packets of the warm-up were the queue's (and the pings').
    assert!(before < 20, "queue packets {before}");

    // TCP through an offloaded connection arrives intact.
    assert_tcp_intact(
        &l.src,
        &l.dst,
        addr("10.0.2.2:6000"),
        4 << 20,
        "offloaded tcp",
    );
    let after_tcp = queue_packets(&r);
    assert!(
        after_tcp < before + 100,
        "a 4 MiB transfer offloaded after its first packets: {before} -> {after_tcp}"
    );

    // A reload that changes the chain revokes: the flow's next packet is the new
    // chain's, which offloads it again.
    r.rewrite(&config(true, "\"again\"", ""));
    reload(&r, 1);
    let before = queue_packets(&r);
    assert_eq!(flow(&l, 40000, 5000, 50), 50);
    let after = queue_packets(&r);
    assert!(after > before, "the revoked flow came back to the queue");
    assert!(
        after < before + 10,
        "and was offloaded again: {before} -> {after}"
    );
    assert!(offload(&r, "revoked") >= 1);

    // A reload that turns offload off starts the port anew: every packet is relayd's.
    r.rewrite(&config(false, "\"again\"", ""));
    reload(&r, 2);
    let before = queue_packets(&r);
    assert_eq!(flow(&l, 40000, 5000, 50), 50);
    assert!(
        queue_packets(&r) >= before + 50,
        "every packet back in the queue"
    );
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
}

#[test]
fn without_offload_every_packet_reaches_the_queue() {
    let l = line3("xdpoff-off");
    no_tx_offload(&l.src, "eth0");
    // The same chain, which votes to offload, on a port without offload.
    let mut r = start(&l, &config(false, "\"accept\"", ""));
    assert_eq!(flow(&l, 40000, 5000, 20), 20);
    let before = queue_packets(&r);
    assert_eq!(flow(&l, 40000, 5000, 200), 200);
    assert!(
        queue_packets(&r) >= before + 200,
        "every packet through the queue"
    );
    assert_eq!(program(&r, "pass_offloaded"), 0);
    assert_eq!(r.status().xdp[0].offload, None, "no offload figures");
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
}

#[test]
fn an_idle_offloaded_flow_comes_back_to_the_queue() {
    let l = line3("xdpoff-idle");
    no_tx_offload(&l.src, "eth0");
    let mut r = start(&l, &config(true, "\"accept\"", "offload_idle = \"1s\""));
    assert_eq!(flow(&l, 40001, 5001, 20), 20);
    let before = queue_packets(&r);
    // 2 ms apart, and 600 ms since the warm-up: never idle for 1 s, so it stays offloaded.
    assert_eq!(flow(&l, 40001, 5001, 200), 200);
    assert_eq!(queue_packets(&r), before, "offloaded");
    // Idle for 1.6 s (the receiver's wait above, and this): the next packet finds the
    // entry expired and goes to the queue, whose chain offloads the flow again.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(flow(&l, 40001, 5001, 50), 50);
    let after = queue_packets(&r);
    assert!(after > before && after < before + 10, "{before} -> {after}");
    assert!(offload(&r, "expired") >= 1);
    // The queue counts the expiry too (read from the program once a second).
    assert!(wait_for(Duration::from_secs(3), || {
        let st = r.status();
        st.queues[0].datapath.get("offload_expired").copied() >= Some(1)
    }));
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
}

/// The XDP program's own time per packet on real traffic (`kernel.bpf_stats_enabled`,
/// read from relayd's program descriptor): offload off against on, for one flow (on: the
/// flow is offloaded after its first packet, so the hit path) and for a new flow on
/// every packet (on: every lookup a miss, in a map that fills up). Only the program's
/// time: with offload on and new flows, relayd also writes each flow to the map.
/// `cargo test -p relayd --test xdp_offload -- --ignored --nocapture program_cost`.
#[test]
#[ignore = "a measurement, not a check"]
fn program_cost_on_real_traffic() {
    let old = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap();
    std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1").unwrap();
    let n: u32 = std::env::var("OFFLOAD_PACKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000);
    let mut rows = Vec::new();
    for round in 0..3 {
        for (offload, new_flows) in [(false, false), (true, false), (false, true), (true, true)] {
            let l = line3(&format!(
                "xdpoff-cost{round}{}{}",
                offload as u8, new_flows as u8
            ));
            no_tx_offload(&l.src, "eth0");
            let r = start(&l, &config(offload, "\"accept\"", ""));
            let dst_mac = mac_of(&l.relay, "eth0");
            let frames: Vec<(u16, Vec<u8>)> = (0..n)
                .map(|i| {
                    let sport = if new_flows {
                        1024 + (i % 60_000) as u16
                    } else {
                        40000
                    };
                    let mut p = vec![0x45, 0, 0, 64, 0, 1, 0, 0, 64, 17, 0, 0];
                    p.extend_from_slice(&[10, 0, 1, 1, 10, 0, 2, 2]);
                    p.extend_from_slice(&sport.to_be_bytes());
                    p.extend_from_slice(&9000u16.to_be_bytes());
                    p.extend_from_slice(&[0, 44, 0, 0]);
                    p.resize(64, 0x5a);
                    relay_core::wire::Ipv4Packet::new_unchecked(&mut p[..]).fill_checksum();
                    (0x0800, p)
                })
                .collect();
            let tid = thread_named(r.proc.pid(), "relayd-xdp0");
            let before = prog_stats(r.proc.pid());
            let cpu_before = thread_cpu(r.proc.pid(), tid);
            send_frames(&l.src, "eth0", dst_mac, frames, 20_000);
            std::thread::sleep(Duration::from_millis(300));
            let after = prog_stats(r.proc.pid());
            let cpu = thread_cpu(r.proc.pid(), tid) - cpu_before;
            let (t, c) = (after.0 - before.0, after.1 - before.1);
            let thread_us = cpu * 1e6 / f64::from(n);
            rows.push((offload, new_flows, t as f64 / c.max(1) as f64, c, thread_us));
            drop(r);
        }
    }
    std::fs::write("/proc/sys/kernel/bpf_stats_enabled", old.trim()).unwrap();
    for (offload, new_flows, ns, c, us) in &rows {
        println!(
            "offload {offload:5} new flows {new_flows:5}: {ns:6.1} ns/packet in the program ({c} runs), relayd-xdp0 {us:5.2} us/packet sent"
        );
    }
}

/// CPU seconds (user and system, in clock ticks) thread `tid` of `pid` has used.
fn thread_cpu(pid: u32, tid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
    // After the command's closing parenthesis: field 3 is the state; utime and stime are
    // fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// `run_time_ns` and `run_cnt` of the XDP program whose descriptor process `pid` holds.
fn prog_stats(pid: u32) -> (u64, u64) {
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let info = std::fs::read_to_string(e.path()).unwrap_or_default();
        if !info.contains("prog_type:\t6\n") {
            continue;
        }
        let field = |k: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        return (field("run_time_ns:"), field("run_cnt:"));
    }
    panic!("relayd holds no XDP program");
}
