//! relayd on the real kernel: traffic through a relay running built-in services, failure
//! policy, signals, cleanup, malformed packets, reload. Needs root (as CI runs it).

mod support;

use relay_testbed::line3;
use std::time::Duration;
use support::*;

const ACCEPT_ALL: &str = r#"
[[queue]]
num = 0
hook = "forward"
services = ["accept"]
"#;

fn no_relayd_rules(save: &str) -> bool {
    !save.contains("RELAYD")
}

#[test]
fn icmp_udp_tcp_pass_through_accept() {
    let l = line3("accept");
    // `dump` reads headers only, so the queue copies 192 bytes of each (GSO) packet: the
    // chain must cope with partial packets without an error.
    let r = Relayd::start(
        &l.relay,
        &ACCEPT_ALL.replace("[\"accept\"]", "[\"dump\", \"accept\"]"),
    );
    assert!(
        iptables_save(&l.relay)
            .contains("-A RELAYD-FORWARD -j NFQUEUE --queue-num 0 --queue-bypass")
    );
    assert!(
        l.src.ping("10.0.2.2"),
        "ping through relayd failed\n{}",
        r.log()
    );
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:5000"), 500, 5000, 200);
    assert_eq!(got, sent, "UDP lost through accept");
    let (sent, got) = tcp_exchange(&l.src, &l.dst, addr("10.0.2.2:6000"), 0.5);
    assert!(
        sent > 1_000_000 && got == sent,
        "TCP sent {sent} received {got}"
    );
    let st = r.status();
    let q = &st.queues[0];
    assert_eq!(q.num, 0);
    // ping (2 packets) + 500 UDP + a TCP connection in both directions went through queue 0.
    assert!(q.packets >= 502 + 10, "{q:?}");
    assert_eq!(q.accepted, q.packets, "{q:?}");
    assert_eq!((q.dropped, q.malformed, q.errors), (0, 0, 0), "{q:?}");
    assert!(
        q.gso,
        "accept does not rewrite packets, so its queue takes GSO packets"
    );
    assert_eq!(q.copy_range, 192);
    let names: Vec<&str> = st.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["accept", "dump"]);
    assert!(
        st.services.iter().all(|s| s.packets == q.packets),
        "{:?}",
        st.services
    );
    assert!(st.services[1].counters["logged"] > 0);
    let json = status_cli(&l.relay, &r.socket);
    assert!(json["queues"][0]["packets"].as_u64().unwrap() >= q.packets);
}

#[test]
fn drop_queue_drops_only_what_it_matches() {
    let l = line3("drop");
    let r = Relayd::start(
        &l.relay,
        r#"
[[queue]]
num = 3
hook = "forward"
match = "-p udp --dport 5001"
services = ["drop"]

[[queue]]
num = 4
hook = "forward"
services = ["accept"]
"#,
    );
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:5001"), 200, 2000, 100);
    assert!(
        sent >= 180 && got == 0,
        "the drop queue let UDP/5001 through: sent {sent}, got {got}"
    );
    let dropped_sent = sent;
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:5000"), 200, 2000, 100);
    assert_eq!(got, sent, "UDP/5000 must pass");
    assert!(l.src.ping("10.0.2.2"));
    let st = r.status();
    let q3 = st.queues.iter().find(|q| q.num == 3).unwrap();
    let q4 = st.queues.iter().find(|q| q.num == 4).unwrap();
    assert_eq!(
        (q3.packets, q3.dropped),
        (dropped_sent, dropped_sent),
        "{q3:?}"
    );
    // Everything UDP/5000 the paced sender managed to send (fewer than asked for on a
    // busy machine), and the ping's request and reply.
    assert!(
        q4.packets >= sent + 2 && q4.dropped == 0,
        "sent {sent}: {q4:?}"
    );
}

#[test]
fn sigkill_fails_open_and_cleanup_leaves_no_trace() {
    let l = line3("sigkill");
    let mut r = Relayd::start(&l.relay, ACCEPT_ALL);
    assert!(l.src.ping("10.0.2.2"));
    r.proc.kill();
    // The rules are still there (nobody removed them) but --queue-bypass lets traffic pass.
    assert!(iptables_save(&l.relay).contains("RELAYD-FORWARD"));
    assert!(
        l.src.ping("10.0.2.2"),
        "traffic blackholed after SIGKILL: fail-open broken"
    );
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:5000"), 100, 2000, 100);
    assert_eq!(got, sent);
    let (code, out, err) = relayd_cmd(&l.relay, &["cleanup"]);
    assert_eq!(code, 0, "cleanup failed: {out}{err}");
    let save = iptables_save(&l.relay);
    assert!(no_relayd_rules(&save), "cleanup left rules:\n{save}");
    // Cleaning up again is a no-op, not an error.
    assert_eq!(relayd_cmd(&l.relay, &["cleanup"]).0, 0);
}

#[test]
fn sigterm_and_sigint_remove_all_rules() {
    let l = line3("sigterm");
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut r = Relayd::start(&l.relay, ACCEPT_ALL);
        assert!(l.src.ping("10.0.2.2"));
        assert!(r.stop(sig), "relayd exited with an error:\n{}", r.log());
        let save = iptables_save(&l.relay);
        assert!(
            no_relayd_rules(&save),
            "rules left after signal {sig}:\n{save}"
        );
        assert!(!r.socket.exists(), "status socket left behind");
        assert!(l.src.ping("10.0.2.2"));
    }
}

#[test]
fn fail_closed_queue_blocks_traffic_when_relayd_is_gone() {
    let l = line3("closed");
    let mut r = Relayd::start(
        &l.relay,
        r#"
[[queue]]
num = 0
hook = "forward"
fail_open = false
services = ["accept"]
"#,
    );
    assert!(l.src.ping("10.0.2.2"));
    assert!(!iptables_save(&l.relay).contains("--queue-bypass"));
    r.proc.kill();
    assert!(
        !l.src.ping("10.0.2.2"),
        "a fail-closed queue let traffic bypass a dead relayd"
    );
    assert_eq!(relayd_cmd(&l.relay, &["cleanup"]).0, 0);
    assert!(l.src.ping("10.0.2.2"));
}

fn ipv4(proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut p = vec![
        0x45, 0, 0, 0, 0, 7, 0, 0, 64, proto, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
    ];
    let len = (20 + l4.len()) as u16;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p.extend_from_slice(l4);
    p
}

#[test]
fn malformed_packets_are_counted_and_handled_by_policy() {
    let l = line3("malformed");
    let mut r = Relayd::start(
        &l.relay,
        r#"
[[queue]]
num = 0
hook = "forward"
match = "-d 10.0.2.2"
malformed = "drop"
services = ["dump"]
"#,
    );
    let bad = vec![
        ipv4(6, &[0x12, 0x34, 0x00]),    // TCP header cut at 3 bytes
        ipv4(6, &[0; 20].map(|_| 0x11)), // TCP data offset 1 (< 5)
        ipv4(17, &[0x0f, 0xa0, 0x13, 0x88, 0x00, 0x03, 0, 0]), // UDP length 3
        ipv4(17, &[0x0f, 0xa0, 0x13, 0x88, 0x01, 0x00, 0, 0]), // UDP length past the packet
        ipv4(1, &[8, 0]),                // ICMP cut at 2 bytes
    ];
    let n = bad.len() as u64;
    send_raw(&l.src, bad);
    assert!(
        wait_for(Duration::from_secs(5), || r.status().queues[0].malformed
            == n),
        "malformed not counted: {:?}\n{}",
        r.status().queues[0],
        r.log()
    );
    let q = r.status().queues[0].clone();
    assert_eq!(q.dropped, n, "malformed = \"drop\" must drop them: {q:?}");
    // relayd is alive and still serving.
    assert!(r.alive());
    assert!(l.src.ping("10.0.2.2"));
    assert!(
        r.log().contains("malformed packet"),
        "no log line for malformed packets"
    );
}

#[test]
fn repeat_with_mark_reenters_the_hook_once() {
    let l = line3("repeat");
    // A user's own rule acts on the mark relayd sets; relayd's bypass bit keeps the
    // repeated packet from being queued a second time.
    let out = l.relay.exec(&[
        "iptables", "-A", "FORWARD", "-p", "udp", "--dport", "5002", "-m", "mark", "--mark",
        "0x1/0x1", "-j", "DROP",
    ]);
    assert!(out.status.success());
    let r = Relayd::start(
        &l.relay,
        r#"
[[queue]]
num = 0
hook = "forward"
match = "-p udp"
services = ["m"]

[service.m]
kind = "mark"
mark = "0x1"
mask = "0x1"
repeat = true
"#,
    );
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:5002"), 100, 2000, 100);
    assert!(
        sent >= 90 && got == 0,
        "the mark did not reach the user's rule: sent {sent}, got {got}"
    );
    let (sent2, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:5003"), 100, 2000, 100);
    assert_eq!(got, sent2, "marked and repeated packets must continue");
    let q = r.status().queues[0].clone();
    assert_eq!(
        (q.packets, q.repeated),
        (sent + sent2, sent + sent2),
        "each packet is queued exactly once: {q:?}"
    );
}

#[test]
fn queue_range_balances_flows_over_threads() {
    let l = line3("balance");
    let r = Relayd::start(
        &l.relay,
        r#"
[[queue]]
num = "10-11"
hook = "forward"
match = "-p udp"
services = ["accept"]
"#,
    );
    assert!(iptables_save(&l.relay).contains("--queue-balance 10:11"));
    // The kernel spreads by a hash of the addresses (not the ports): use 16 source addresses.
    let sink_sock = l
        .dst
        .run(|| std::net::UdpSocket::bind("10.0.2.2:7000").unwrap());
    let sink = std::thread::spawn(move || {
        relay_traffic::udp_sink_on(
            sink_sock,
            Duration::from_millis(800),
            Duration::from_secs(30),
            None,
        )
        .unwrap()
    });
    for i in 0..16 {
        l.src.ip(&[
            "addr",
            "add",
            &format!("10.0.1.{}/24", 100 + i),
            "dev",
            &l.src_link.a_if,
        ]);
    }
    let total = l.src.run(|| {
        let mut n = 0;
        for i in 0..16 {
            let s = std::net::UdpSocket::bind(format!("10.0.1.{}:0", 100 + i)).unwrap();
            for seq in 0..20u64 {
                let mut b = [0u8; 64];
                b[..8].copy_from_slice(&(i * 20 + seq).to_be_bytes());
                s.send_to(&b, "10.0.2.2:7000").unwrap();
                n += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        n
    });
    let got = sink.join().unwrap();
    assert_eq!(got.packets, total);
    let st = r.status();
    assert_eq!(st.queues.len(), 2);
    let counts: Vec<u64> = st.queues.iter().map(|q| q.packets).collect();
    assert_eq!(counts.iter().sum::<u64>(), total);
    assert!(
        counts.iter().all(|&c| c > 0),
        "16 flows all hashed to one queue: {counts:?}"
    );
}

#[test]
fn sighup_reload_swaps_chains_without_losing_packets() {
    let l = line3("reload");
    let mut r = Relayd::start(&l.relay, ACCEPT_ALL);
    let flow = UdpFlow::start(&l.src, &l.dst, addr("10.0.2.2:5000"), Some(3000), 200, 3.0);
    std::thread::sleep(Duration::from_millis(500));
    // 1: a new chain on queue 0 and a new queue 1 for ICMP, while traffic flows.
    r.rewrite(
        r#"
[[queue]]
num = 1
hook = "forward"
match = "-p icmp"
services = ["dump"]

[[queue]]
num = 0
hook = "forward"
copy_range = 65535
batch = 8
services = ["d", "accept"]

[service.d]
kind = "dump"
rate = 1
"#,
    );
    r.proc.signal(libc::SIGHUP).unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || r.status().reloads == 1),
        "{}",
        r.log()
    );
    std::thread::sleep(Duration::from_millis(500));
    // 2: a broken file is refused and the running configuration stays.
    r.rewrite("[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"nope\"]\n");
    r.proc.signal(libc::SIGHUP).unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || r
            .log()
            .contains("reload refused")),
        "{}",
        r.log()
    );
    let (sent, got) = flow.finish();
    assert_eq!(
        got.packets,
        sent.packets,
        "packets lost across reloads ({} lost)",
        sent.packets - got.packets
    );
    let st = r.status();
    assert_eq!(st.reloads, 1);
    assert_eq!(st.queues.len(), 2);
    let q0 = st.queues.iter().find(|q| q.num == 0).unwrap();
    assert_eq!(q0.services, vec!["d".to_string(), "accept".to_string()]);
    // The copy range grew from headers only to whole packets while traffic flowed: no
    // packet may be left unanswered in the kernel's queue.
    assert_eq!(q0.copy_range, 65535);
    assert_eq!(q0.kernel.as_ref().map(|k| k.waiting), Some(0), "{q0:?}");
    assert_eq!(q0.errors, 0, "{q0:?}");
    assert!(
        q0.packets >= sent.packets,
        "counters must survive the reload: {q0:?}"
    );
    assert!(l.src.ping("10.0.2.2"));
    assert!(wait_for(Duration::from_secs(2), || r
        .status()
        .queues
        .iter()
        .any(|q| q.num == 1 && q.packets >= 2)));
    assert!(r.stop(libc::SIGTERM));
    assert!(no_relayd_rules(&iptables_save(&l.relay)));
}

#[test]
fn a_second_relayd_is_refused_and_the_first_keeps_its_rules() {
    let l = line3("busy");
    let r = Relayd::start(&l.relay, ACCEPT_ALL);
    let before = iptables_save(&l.relay);
    let dir = TempDir::new("busy2");
    // Same chain prefix: refused before it touches any rule.
    let second = |name: &str, daemon_extra: &str| {
        let text = format!(
            "[daemon]\nsocket = \"{}/{name}.sock\"\n{daemon_extra}{ACCEPT_ALL}",
            dir.0.display()
        );
        dir.file(&format!("{name}.toml"), &text)
    };
    let same = second("b", "");
    let (code, _, err) = relayd_cmd(&l.relay, &["run", "-c", same.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("another relayd"), "{err}");
    // Another prefix but the same queue: the kernel refuses the bind.
    let other = second("c", "chain_prefix = \"OTHER\"\n");
    let (code, _, err) = relayd_cmd(&l.relay, &["run", "-c", other.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already bound"), "{err}");
    // `cleanup` will not pull the rules from under a running daemon.
    let (code, _, err) = relayd_cmd(&l.relay, &["cleanup"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        iptables_save(&l.relay).replace(char::is_numeric, ""),
        before.replace(char::is_numeric, "")
    );
    assert!(l.src.ping("10.0.2.2"));
    assert!(r.status().queues[0].packets >= 2);
}

#[test]
fn sigterm_under_traffic_loses_nothing() {
    let l = line3("drain");
    let mut r = Relayd::start(&l.relay, ACCEPT_ALL);
    let flow = UdpFlow::start(&l.src, &l.dst, addr("10.0.2.2:5000"), Some(5000), 200, 2.0);
    std::thread::sleep(Duration::from_millis(800));
    let before = r.status().queues[0].packets;
    assert!(
        before > 1000,
        "traffic was not going through relayd: {before}"
    );
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
    let (sent, got) = flow.finish();
    assert_eq!(
        got.packets, sent.packets,
        "packets lost while relayd stopped"
    );
    assert!(no_relayd_rules(&iptables_save(&l.relay)));
}

#[test]
fn overload_is_counted_and_survived() {
    let l = line3("overload");
    // A tiny receive buffer and a short queue: a flood overruns both.
    let mut r = Relayd::start(
        &l.relay,
        r#"
[[queue]]
num = 0
hook = "forward"
match = "-p udp"
rcvbuf = 2048
max_len = 64
services = ["accept"]
"#,
    );
    let (sent, got) = UdpFlow::start(&l.src, &l.dst, addr("10.0.2.2:5000"), None, 64, 1.0).finish();
    let q = r.status().queues[0].clone();
    let k = q.kernel.clone().unwrap();
    // Fail-open: what relayd could not take, the kernel passed on (queue full) or relayd
    // counted as undeliverable (ENOBUFS); nothing is silently lost on the relay itself.
    assert!(
        sent.packets > q.packets,
        "the flood did not overload relayd: {q:?}"
    );
    assert!(
        q.enobufs + k.user_dropped > 0 || got.packets > q.packets,
        "overload left no trace: {q:?}"
    );
    assert_eq!(q.errors, 0, "{q:?}");
    assert!(r.alive(), "relayd died under overload:\n{}", r.log());
    assert!(l.src.ping("10.0.2.2"));
    assert!(wait_for(Duration::from_secs(2), || r.status().queues[0]
        .kernel
        .as_ref()
        .is_some_and(|k| k.waiting == 0)));
}

#[test]
fn ipv6_passes_through_both_families() {
    let l = line3("ipv6");
    let r = Relayd::start(
        &l.relay,
        r#"
[[queue]]
num = 0
hook = "forward"
family = "both"
services = ["dump", "accept"]
"#,
    );
    assert!(
        iptables_save(&l.relay)
            .matches("-j NFQUEUE --queue-num 0")
            .count()
            == 2
    );
    let out = l
        .src
        .exec(&["ping", "-6", "-c", "2", "-i", "0.2", "-W", "1", "fd00:2::2"]);
    assert!(
        out.status.success(),
        "ping6 through relayd failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("[fd00:2::2]:5000"), 200, 2000, 300);
    assert_eq!(got, sent);
    let q = r.status().queues[0].clone();
    assert!(
        q.packets >= sent + 4 && q.malformed == 0 && q.errors == 0,
        "sent {sent}: {q:?}"
    );
    assert!(
        r.log().contains("IP6 fd00:1::1"),
        "dump did not print IPv6 packets"
    );
}
