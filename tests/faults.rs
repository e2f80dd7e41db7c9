//! The fault suite: relayd killed at every moment of its life, reloaded under traffic,
//! flooded, stopped, and fed malformed packets, on the real kernel. Each test prints the
//! figures docs/reliability.md quotes. Needs root.
//!
//! The counts come from the environment, so that `make soak` runs long versions of the
//! same tests:
//!
//! | variable | default | what |
//! |---|---|---|
//! | `RELAYD_FAULT_CYCLES` | 50 | kill -9 cycles |
//! | `RELAYD_FAULT_RELOADS` | 30 | SIGHUP reloads under the paced flow |
//! | `RELAYD_FAULT_SECS` | 3 | seconds of the flood, the stop and the malformed stream |
//! | `RELAYD_FAULT_SEED` | 1 | seed of the random kill moments |
//!
//! The tests run one at a time: they measure loss at rates that a neighbour sharing the
//! two cores would disturb.

mod support;

use relay_testbed::{Line3, Node, line3};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::*;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn secs() -> f64 {
    env_count("RELAYD_FAULT_SECS", 3).max(1) as f64
}

/// An IDS rule that needs the conntrack mark rules (`flow:`), so that kind of rule is
/// installed too.
const IDS_RULES: &str = "drop tcp any any -> any 8080 (msg:\"admin\"; \
    flow:established,to_server; content:\"/admin\"; sid:1; rev:1;)\n";

/// A configuration that installs every kind of trace relayd can own: queue rules in
/// `raw` and `mangle` at every hook, both families, fail-open and fail-closed, a queue
/// range, the IDS's conntrack mark rules, the split proxy's TPROXY rules, ip rules and
/// local routes (both families), and the MPLS edge's tc tree and TCPMSS clamp.
fn full_config(l: &Line3, ids_rules: &Path, legacy: bool) -> String {
    format!(
        r#"{flavour}
[[queue]]
num = 0
hook = "forward"
family = "both"
match = "-p udp --dport 5000"
services = ["accept"]

[[queue]]
num = 1
table = "raw"
hook = "prerouting"
family = "both"
match = "-p tcp --syn"
services = ["split"]

[[queue]]
num = 2
hook = "prerouting"
match = "-p udp -d 10.0.9.0/24"
services = ["edge"]

[[queue]]
num = 3
hook = "input"
family = "both"
match = "-p tcp --dport 8080"
services = ["ids"]

[[queue]]
num = "4-5"
hook = "postrouting"
family = "ipv6"
fail_open = false
match = "-p udp --dport 9"
services = ["drop"]

[[queue]]
num = 6
table = "raw"
hook = "output"
match = "-p udp --dport 9"
services = ["accept"]

[[queue]]
num = 7
hook = "output"
family = "both"
match = "-p udp --dport 10"
services = ["dump", "accept"]

[service.split]
kind = "tcpsplit"
ports = [5201]

[service.edge]
kind = "mpls-encap"
encap = "ip"
interface = "{core_if}"
local = "10.0.2.1"
link_rate = "40mbit"
default_rate = "1mbit"

[[service.edge.vcan]]
name = "video"
match = {{ proto = "udp", dport = "5004" }}
label = 100
remote = "10.0.2.2"
rate = "8mbit"
ceil = "8mbit"

[service.ids]
kind = "ids"
rules = ["{rules}"]
"#,
        flavour = if legacy {
            "iptables = \"legacy\"\n"
        } else {
            ""
        },
        core_if = l.dst_link.a_if,
        rules = ids_rules.display(),
    )
}

/// A small deterministic generator (xorshift64*), so a failing cycle can be rerun.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// UDP datagrams from `src` to `dst_addr` at about `pps` until stopped, drained by a
/// socket on `dst`: load that does not need counting.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Load {
    fn start(src: &Node, dst: &Node, dst_addr: std::net::SocketAddr, pps: u64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sink = dst.run(move || std::net::UdpSocket::bind(dst_addr).unwrap());
        sink.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let s = stop.clone();
        let drain = std::thread::spawn(move || {
            let (mut n, mut buf) = (0, [0u8; 2048]);
            while !s.load(Ordering::Relaxed) {
                if sink.recv(&mut buf).is_ok() {
                    n += 1;
                }
            }
            n
        });
        let s = stop.clone();
        let send = src.run_bg(move || {
            let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            let (mut n, start) = (0u64, Instant::now());
            while !s.load(Ordering::Relaxed) {
                let due = start + Duration::from_secs_f64(n as f64 / pps as f64);
                if let Some(w) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
                let _ = sock.send_to(&n.to_be_bytes(), dst_addr);
                n += 1;
            }
            n
        });
        Load {
            stop,
            threads: vec![send, drain],
        }
    }

    /// Stops; returns (sent, received).
    fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let mut it = self.threads.drain(..).map(|t| t.join().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    }
}

impl Drop for Load {
    /// A failing test stops its load too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What the kills left behind, over all cycles.
#[derive(Default, Debug)]
struct KillTally {
    /// Kills after which nothing was left (killed before the first rule existed).
    nothing: u64,
    /// Kills after which every kind of trace a full start installs was there.
    everything: u64,
    /// Kills in between: some kinds of trace there, others not yet.
    partial: u64,
    /// Cycles per kind of trace left.
    by_kind: std::collections::BTreeMap<&'static str, u64>,
    /// Kills that left children of relayd (iptables-restore, tc, ip) running.
    orphans: u64,
    /// Recoveries by `relayd cleanup`, by a restart.
    cleanups: u64,
    restarts: u64,
    legacy: u64,
    under_load: u64,
}

/// One flavour of the kill test: its relayd (re-spawned each cycle on the same
/// configuration), what a full start installs, and how long a start takes.
struct Flavour {
    r: Relayd,
    installed: HostState,
    startup: Duration,
}

#[test]
fn kill_9_at_any_moment_then_cleanup_or_restart_leaves_no_trace() {
    let _serial = serial();
    let began = Instant::now();
    let cycles = env_count("RELAYD_FAULT_CYCLES", 50);
    let seed = env_count("RELAYD_FAULT_SEED", 1).max(1);
    let l = line3("faults_kill");
    let dir = TempDir::new("kill");
    let rules = dir.file("ids.rules", IDS_RULES);
    let pristine = HostState::capture(&l.relay);

    // A full start and a clean stop of each flavour: what relayd installs (every kind of
    // trace, each checked present), how long starting takes, and that SIGTERM leaves
    // nothing.
    let mut flavours = Vec::new();
    for legacy in [false, true] {
        let t0 = Instant::now();
        let mut r = Relayd::spawn(&l.relay, &full_config(&l, &rules, legacy));
        r.wait_running();
        let startup = t0.elapsed();
        let installed = HostState::capture(&l.relay);
        let kinds = installed.differing(&pristine);
        let family = if legacy { "legacy" } else { "nft" };
        for want in [
            "ip rule",
            "ip -6 rule",
            "ip route",
            "ip -6 route",
            "tc qdisc",
            "bound queues",
        ] {
            assert!(kinds.contains(&want), "{family}: no {want} installed");
        }
        assert!(
            kinds.contains(&if legacy {
                "iptables-legacy"
            } else {
                "iptables-nft"
            }) && kinds.contains(&if legacy {
                "ip6tables-legacy"
            } else {
                "ip6tables-nft"
            }),
            "{family}: rules not in the expected tables: {kinds:?}"
        );
        assert!(r.stop(libc::SIGTERM), "{}", r.log());
        let now = HostState::capture(&l.relay);
        assert!(
            now == pristine,
            "{family}: SIGTERM left a trace:\n{}",
            now.diff(&pristine)
        );
        eprintln!("{family}: a full start takes {startup:?}, installs {kinds:?}");
        flavours.push(Flavour {
            r,
            installed,
            startup,
        });
    }

    let load = Load::start(&l.src, &l.dst, addr("10.0.2.2:5000"), 5000);
    let mut rng = Rng(seed);
    let mut t = KillTally::default();
    let mut delays = Vec::new();
    for i in 0..cycles {
        // Every block of 8 cycles has each kill moment with each recovery; every third
        // block drives the legacy tables.
        let legacy = (i / 8) % 3 == 2;
        let restart = (i / 4) % 2 == 1;
        let f = &mut flavours[usize::from(legacy)];
        f.r.respawn();
        let t0 = Instant::now();
        let moment = match i % 4 {
            0 => {
                let d = f.startup.mul_f64(rng.unit());
                std::thread::sleep(d);
                format!("random {d:?} into start-up")
            }
            1 => {
                // 0, 10 %, .., 90 % of the start-up: 0 kills before any rule exists.
                let d = f.startup.mul_f64(((i / 4) % 10) as f64 / 10.0);
                std::thread::sleep(d);
                format!("stepped {d:?} into start-up")
            }
            2 => {
                f.r.wait_running();
                "right after start-up".to_string()
            }
            _ => {
                f.r.wait_running();
                t.under_load += 1;
                assert!(
                    wait_for(Duration::from_secs(3), || f
                        .r
                        .status()
                        .queues
                        .iter()
                        .any(|q| q.num == 0 && q.packets >= 100)),
                    "the load did not cross queue 0: {:?}",
                    f.r.status().queues
                );
                "running, under load".to_string()
            }
        };
        let at = t0.elapsed();
        delays.push(at);
        f.r.proc.kill();
        // relayd's children (iptables-restore, tc, ip) outlive it and finish what they
        // were doing: wait for them, so their work is part of what must be cleaned.
        if !netns_pids(&l.relay).is_empty() {
            t.orphans += 1;
            assert!(
                wait_for(Duration::from_secs(10), || netns_pids(&l.relay).is_empty()),
                "processes left in the namespace: {:?}",
                netns_pids(&l.relay)
            );
        }
        let left = HostState::capture(&l.relay);
        let kinds = left.differing(&pristine);
        let full: Vec<_> = f
            .installed
            .differing(&pristine)
            .into_iter()
            .filter(|k| *k != "bound queues")
            .collect();
        if kinds.is_empty() {
            t.nothing += 1;
        }
        if full.iter().all(|k| kinds.contains(k)) {
            t.everything += 1;
        } else if !kinds.is_empty() {
            t.partial += 1;
        }
        for k in &kinds {
            *t.by_kind.entry(k).or_default() += 1;
        }
        t.legacy += u64::from(legacy);
        let what = format!(
            "cycle {i} ({}, killed {moment}, at {at:?}, left {kinds:?})",
            if legacy { "legacy" } else { "nft" }
        );
        if restart {
            t.restarts += 1;
            f.r.respawn();
            f.r.wait_running();
            let now = HostState::capture(&l.relay);
            assert!(
                now == f.installed,
                "{what}: a restart over the leftovers did not install exactly one copy:\n{}",
                now.diff(&f.installed)
            );
            assert!(f.r.stop(libc::SIGTERM), "{what}:\n{}", f.r.log());
        } else {
            t.cleanups += 1;
            let cfg = f.r.config.display().to_string();
            // Without -c on some nft cycles: the defaults find the same traces.
            let args: &[&str] = if !legacy && i % 16 == 0 {
                &["cleanup"]
            } else {
                &["cleanup", "-c", &cfg]
            };
            let (code, out, err) = relayd_cmd(&l.relay, args);
            assert_eq!(code, 0, "{what}: cleanup failed: {out}{err}");
        }
        let now = HostState::capture(&l.relay);
        assert!(
            now == pristine,
            "{what}: trace left after {}:\n{}",
            if restart {
                "restart and SIGTERM"
            } else {
                "cleanup"
            },
            now.diff(&pristine)
        );
    }
    let (sent, got) = load.stop();
    delays.sort();
    let pick = |q: f64| delays.get(((delays.len() as f64 - 1.0) * q) as usize);
    eprintln!(
        "kill -9: {cycles} cycles (seed {seed}) in {:?}, kill moments min/median/max {:?}/{:?}/{:?}, \
         {} under load ({sent} datagrams sent, {got} received); {t:?}",
        began.elapsed(),
        pick(0.0),
        pick(0.5),
        pick(1.0),
        t.under_load,
    );
    if cycles >= 8 {
        assert!(
            t.nothing > 0,
            "no kill came before the first rule existed: {t:?}"
        );
        assert!(
            t.everything > 0,
            "no kill came after every trace was installed: {t:?}"
        );
    }
}

/// The configurations the reload test cycles through: `n % 3` picks one. 0 and 1 keep the
/// flow on queue 0 with another chain, copy range and batch, and add or remove an ICMP
/// queue; 2 moves the flow to the queue range 2-3 (queue 0 is unbound after the swap).
fn reload_config(n: u64) -> &'static str {
    match n % 3 {
        0 => {
            r#"
[[queue]]
num = 0
hook = "forward"
match = "-p udp --dport 5000"
services = ["accept"]
"#
        }
        1 => {
            r#"
[[queue]]
num = 1
hook = "forward"
match = "-p icmp"
services = ["dump"]

[[queue]]
num = 0
hook = "forward"
match = "-p udp --dport 5000"
copy_range = 65535
batch = 8
services = ["d", "accept"]

[service.d]
kind = "dump"
rate = 1
"#
        }
        _ => {
            r#"
[[queue]]
num = "2-3"
hook = "forward"
family = "both"
match = "-p udp --dport 5000"
services = ["dump", "accept"]
"#
        }
    }
}

#[test]
fn sighup_reloads_under_a_paced_flow_lose_and_duplicate_nothing() {
    let _serial = serial();
    let began = Instant::now();
    let reloads = env_count("RELAYD_FAULT_RELOADS", 30);
    let pps = 20_000;
    let l = line3("faults_reload");
    let r = Relayd::start(&l.relay, reload_config(0));
    // A reload takes about 300 ms with a debug build on two busy cores; leave room for 400.
    let flow_secs = 2.0 + reloads as f64 * 0.4;
    let flow = UdpFlow::start(
        &l.src,
        &l.dst,
        addr("10.0.2.2:5000"),
        Some(pps),
        200,
        flow_secs,
    );
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    for n in 1..=reloads {
        r.rewrite(reload_config(n));
        reload(&r, n);
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = t0.elapsed();
    assert!(
        took.as_secs_f64() + 0.5 < flow_secs,
        "{reloads} reloads took {took:?}, longer than the flow"
    );
    let (sent, got) = flow.finish();
    let (lost, dups) = loss_and_duplicates(&sent, &got);
    let st = r.status();
    eprintln!(
        "reload: {reloads} reloads in {took:?} under {pps} packets/s ({:.0} achieved): sent {}, \
         received {}, lost {lost}, duplicated {dups}, reordered {} ({:?} in all)",
        sent.packets as f64 / sent.elapsed.as_secs_f64(),
        sent.packets,
        got.packets,
        got.duplicates_or_reordered,
        began.elapsed()
    );
    assert_eq!(st.reloads, reloads);
    // The pacer cannot catch up after a stall of the sending thread: on a machine busy
    // with other work it runs somewhat below its rate.
    assert!(
        sent.packets as f64 >= 0.7 * pps as f64 * flow_secs,
        "the flow ran far below its rate: {sent:?}"
    );
    assert_eq!(
        (lost, dups),
        (0, 0),
        "loss or duplicates across reloads: sent {sent:?}\nreceived {got:?}\n{}",
        r.log()
    );
    for q in &st.queues {
        assert_eq!(q.errors, 0, "{q:?}");
        assert_eq!(q.kernel.as_ref().map(|k| k.waiting), Some(0), "{q:?}");
    }
}

#[test]
fn fail_closed_queue_under_a_flood_lets_nothing_bypass() {
    let _serial = serial();
    let began = Instant::now();
    let l = line3("faults_closed");
    let udp = ["-p", "udp", "--dport", "5000"];
    count_arrivals_with("iptables", &l.relay, &l.src_link.b_if, &udp, "arrived");
    count_arrivals_with("iptables", &l.dst, &l.dst_link.b_if, &udp, "delivered");
    let mut r = Relayd::start(
        &l.relay,
        r#"
[[queue]]
num = 0
hook = "forward"
match = "-p udp --dport 5000"
fail_open = false
max_len = 256
services = ["accept"]
"#,
    );
    assert!(!iptables_save(&l.relay).contains("--queue-bypass"));
    let flood = secs();
    let (sent, got) =
        UdpFlow::start(&l.src, &l.dst, addr("10.0.2.2:5000"), None, 64, flood).finish();
    assert!(
        wait_for(Duration::from_secs(5), || r.status().queues[0]
            .kernel
            .as_ref()
            .is_some_and(|k| k.waiting == 0)),
        "packets left waiting: {:?}",
        r.status().queues[0]
    );
    let q = r.status().queues[0].clone();
    let k = kernel_queues(&l.relay)
        .into_iter()
        .find(|k| k.num == 0)
        .expect("queue 0 not bound");
    let status_k = q.kernel.clone().unwrap();
    let arrived = read_count_with("iptables", &l.relay, "arrived");
    let delivered = read_count_with("iptables", &l.dst, "delivered");
    let kernel_drops = k.queue_dropped + k.user_dropped;
    eprintln!(
        "fail-closed flood: {} sent in {flood} s ({:.0} packets/s), {arrived} reached the relay, \
         relayd took {} and accepted {}, the kernel dropped {} (queue full) + {} (undeliverable), \
         {delivered} reached dst, the sink got {}; relayd counted {} ENOBUFS",
        sent.packets,
        sent.packets as f64 / sent.elapsed.as_secs_f64(),
        q.packets,
        q.accepted,
        k.queue_dropped,
        k.user_dropped,
        got.packets,
        q.enobufs,
    );
    assert_eq!(
        (status_k.queue_dropped, status_k.user_dropped),
        (k.queue_dropped, k.user_dropped),
        "relayd status and the kernel disagree"
    );
    assert!(
        kernel_drops > 0,
        "the flood never filled the queue: not a flood ({q:?})"
    );
    assert_eq!(
        arrived,
        q.packets + kernel_drops,
        "every packet that reached the queue was either given to relayd or dropped: {q:?} {k:?}"
    );
    assert_eq!(q.accepted, q.packets, "{q:?}");
    assert!(
        delivered <= q.accepted && got.packets <= delivered,
        "more reached dst ({delivered}, sink {}) than relayd relayed ({})",
        got.packets,
        q.accepted
    );
    assert_eq!(q.errors, 0, "{q:?}");

    // With relayd gone, nothing at all passes the fail-closed queue.
    r.proc.kill();
    let before = (
        read_count_with("iptables", &l.relay, "arrived"),
        read_count_with("iptables", &l.dst, "delivered"),
    );
    let (dead_sent, dead_got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:5000"), 1000, 5000, 64);
    let after = (
        read_count_with("iptables", &l.relay, "arrived"),
        read_count_with("iptables", &l.dst, "delivered"),
    );
    eprintln!(
        "fail-closed, relayd killed: {dead_sent} sent, {} reached the relay, {} passed",
        after.0 - before.0,
        after.1 - before.1
    );
    assert_eq!(after.0 - before.0, dead_sent);
    assert_eq!((after.1 - before.1, dead_got), (0, 0));
    assert_eq!(relayd_cmd(&l.relay, &["cleanup"]).0, 0);
    eprintln!("fail-closed test took {:?}", began.elapsed());
}

#[test]
fn fail_open_queue_passes_traffic_while_relayd_is_stopped() {
    let _serial = serial();
    let began = Instant::now();
    let l = line3("faults_stopped");
    count_arrivals_with(
        "iptables",
        &l.dst,
        &l.dst_link.b_if,
        &["-p", "udp", "--dport", "5000"],
        "delivered",
    );
    let max_len = 64;
    let r = Relayd::start(
        &l.relay,
        &format!(
            r#"
[[queue]]
num = 0
hook = "forward"
match = "-p udp --dport 5000"
fail_open = true
max_len = {max_len}
services = ["accept"]
"#
        ),
    );
    let pps = 5000;
    let stopped = secs().min(10.0);
    let flow = UdpFlow::start(
        &l.src,
        &l.dst,
        addr("10.0.2.2:5000"),
        Some(pps),
        200,
        stopped + 2.0,
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        r.status().queues[0].packets > pps / 2,
        "the flow is not queued"
    );
    r.proc.signal(libc::SIGSTOP).unwrap();
    let t0 = Instant::now();
    let before = read_count_with("iptables", &l.dst, "delivered");
    std::thread::sleep(Duration::from_secs_f64(stopped - 0.2));
    let waiting = kernel_queues(&l.relay)
        .into_iter()
        .find(|k| k.num == 0)
        .map(|k| k.waiting);
    let during = read_count_with("iptables", &l.dst, "delivered") - before;
    let expected = (t0.elapsed().as_secs_f64() * pps as f64) as u64;
    r.proc.signal(libc::SIGCONT).unwrap();
    let (sent, got) = flow.finish();
    let (lost, dups) = loss_and_duplicates(&sent, &got);
    let q = r.status().queues[0].clone();
    eprintln!(
        "fail-open, SIGSTOP for {stopped} s: {waiting:?} waiting in the kernel, {during} of about \
         {expected} passed while stopped; in all {} sent, {} received, lost {lost}, \
         duplicated {dups}, late {}; relayd handled {} ({:?})",
        sent.packets,
        got.packets,
        got.duplicates_or_reordered,
        q.packets,
        began.elapsed()
    );
    assert_eq!(waiting, Some(max_len), "the queue should have filled up");
    assert!(
        during as f64 >= 0.8 * expected.saturating_sub(max_len) as f64,
        "traffic did not pass the full queue of a stopped relayd: {during} of {expected}"
    );
    assert_eq!((lost, dups), (0, 0), "{sent:?}\n{got:?}");
    assert!(
        q.packets >= max_len && q.packets < sent.packets,
        "relayd handled the queued packets after SIGCONT: {q:?}"
    );
    assert_eq!(q.kernel.as_ref().map(|k| k.waiting), Some(0), "{q:?}");
    assert_eq!(q.errors, 0, "{q:?}");
}

/// The Internet checksum of `b`.
fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// An IPv4 packet 10.0.1.1 -> 10.0.2.2 with `proto` and `l4`, correct lengths and
/// header checksum; `frag` is the flags and fragment offset field.
fn v4(proto: u8, l4: &[u8], frag: u16) -> Vec<u8> {
    let mut p = vec![
        0x45, 0, 0, 0, 0x12, 0x34, 0, 0, 64, proto, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2,
    ];
    let len = (20 + l4.len()) as u16;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    let c = csum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(l4);
    p
}

/// Recomputes the IPv4 header checksum after a change.
fn rechecksum(mut p: Vec<u8>) -> Vec<u8> {
    let ihl = usize::from(p[0] & 0x0f) * 4;
    p[10] = 0;
    p[11] = 0;
    if let Some(h) = p.get(..ihl.min(p.len())) {
        let c = csum(h);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    }
    p
}

/// An IPv6 packet fd00:1::1 -> fd00:2::2 with next header `next` and `payload`.
fn v6(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0, 0, 0, next, 64];
    p[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    p.extend_from_slice(&[0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.extend_from_slice(&[0xfd, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    p.extend_from_slice(payload);
    p
}

/// A UDP header (checksum 0) from port 40000 to `dport`, then `data`.
fn udp(dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = vec![0x9c, 0x40, 0, 0, 0, 0, 0, 0];
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(data);
    u
}

/// A 20-byte TCP SYN header to `dport` with data offset `doff` and checksum 0xdead.
fn tcp(dport: u16, doff: u8) -> Vec<u8> {
    let mut t = vec![
        0x9c, 0x40, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0x02, 0xff, 0xff,
    ];
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[12] = doff << 4;
    t.extend_from_slice(&[0xde, 0xad, 0, 0]);
    t
}

/// Pseudo-random bytes (the same each run).
fn garbage(n: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    (0..n).map(|_| (r.unit() * 256.0) as u8).collect()
}

/// One MPLS label stack entry.
fn lse(label: u32, bottom: bool) -> [u8; 4] {
    (label << 12 | u32::from(bottom) << 8 | 64).to_be_bytes()
}

/// An IPComp payload: header (next header `next`, CPI `cpi`) and `data`.
fn ipcomp(next: u8, cpi: u16, data: &[u8]) -> Vec<u8> {
    let mut c = vec![next, 0];
    c.extend_from_slice(&cpi.to_be_bytes());
    c.extend_from_slice(data);
    c
}

/// IPComp packets whose data decompress to `n` zero bytes with each algorithm: more than
/// any IP packet can hold.
fn ipcomp_bombs(n: usize) -> Vec<Vec<u8>> {
    use relay_svc_compress::{Algorithm, Codecs};
    let mut codecs = Codecs::new(9);
    let zeros = vec![0u8; n];
    let mut out = Vec::new();
    for alg in [Algorithm::Deflate, Algorithm::Lz4, Algorithm::Lzo] {
        if !alg.available() {
            continue;
        }
        let mut buf = vec![0u8; Algorithm::max_output(n)];
        if let Some(k) = codecs.compress(alg, &zeros, &mut buf)
            && k < 1400
        {
            out.push(v4(108, &ipcomp(17, alg.cpi(), &buf[..k]), 0));
        }
    }
    out
}

/// Every kind of malformed packet the test sends, as (ethertype, network-layer bytes).
fn malformed_packets(esp_spi: u32) -> Vec<(u16, Vec<u8>)> {
    let ok_udp = udp(5001, &[0u8; 20]);
    let mut v4s: Vec<Vec<u8>> = vec![
        v4(17, &ok_udp, 0)[..12].to_vec(), // IPv4 header cut at 12 bytes
        rechecksum({
            let mut p = v4(17, &ok_udp, 0);
            p[0] = 0x43; // IHL 3
            p
        }),
        rechecksum({
            let mut p = v4(17, &ok_udp, 0);
            p[0] = 0x4f; // IHL 15: options past the packet
            p
        }),
        rechecksum({
            let mut p = v4(17, &ok_udp, 0);
            p[2..4].copy_from_slice(&1000u16.to_be_bytes()); // total length past the frame
            p
        }),
        rechecksum({
            let mut p = v4(17, &ok_udp, 0);
            p[2..4].copy_from_slice(&10u16.to_be_bytes()); // total length < header
            p
        }),
        {
            let mut p = v4(17, &ok_udp, 0);
            p[10] ^= 0xff; // header checksum
            p
        },
        rechecksum({
            let mut p = v4(17, &ok_udp, 0);
            p[0] = 0x65; // version 6 in an IPv4 frame
            p
        }),
        rechecksum({
            // IHL 6 with a timestamp option of length 0.
            let mut p = v4(17, &ok_udp, 0);
            p.splice(20..20, [0x44, 0, 0, 0]);
            p[0] = 0x46;
            let len = p.len() as u16;
            p[2..4].copy_from_slice(&len.to_be_bytes());
            p
        }),
        v4(6, &[0x12, 0x34, 0x00], 0),        // TCP cut at 3 bytes
        v4(6, &tcp(5001, 1), 0),              // TCP data offset 1
        v4(6, &tcp(5001, 15), 0),             // TCP data offset past the packet
        v4(6, &tcp(5001, 5), 0),              // TCP SYN with a bad checksum
        v4(17, &[0x9c, 0x40, 0x13, 0x89], 0), // UDP cut at 4 bytes
        v4(17, &[0x9c, 0x40, 0x13, 0x89, 0, 3, 0, 0], 0), // UDP length 3
        v4(17, &[0x9c, 0x40, 0x13, 0x89, 1, 0, 0, 0], 0), // UDP length past the packet
        v4(
            17,
            &[0x9c, 0x40, 0x13, 0x89, 0, 12, 0xba, 0xd0, 1, 2, 3, 4],
            0,
        ), // bad checksum
        v4(1, &[8, 0], 0),                    // ICMP cut at 2 bytes
        v4(1, &[3, 4, 0, 0, 0, 0, 0x05, 0xdc, 0x45], 0), // ICMP error quoting 1 byte
        // IPComp to the decompress queue.
        v4(108, &[17, 0], 0),
        v4(108, &ipcomp(17, 2, &garbage(200, 1)), 0),
        v4(108, &ipcomp(17, 61440, &garbage(200, 2)), 0),
        v4(108, &ipcomp(17, 61441, &garbage(200, 3)), 0),
        v4(108, &ipcomp(17, 0x1234, &garbage(50, 4)), 0),
        v4(108, &ipcomp(108, 2, &[0x03, 0x00]), 0), // deflate of nothing, next header IPComp
        v4(108, &ipcomp(17, 2, &[]), 0),
        // ESP to the decrypt queue.
        v4(50, &[0, 0, 0x10], 0),
        v4(
            50,
            &[&0xdead_beefu32.to_be_bytes()[..], &garbage(100, 5)].concat(),
            0,
        ),
        v4(
            50,
            &[&esp_spi.to_be_bytes()[..], &[0, 0, 0, 1], &garbage(100, 6)].concat(),
            0,
        ),
        v4(
            50,
            &[&esp_spi.to_be_bytes()[..], &[0, 0, 0, 2], &garbage(4, 7)].concat(),
            0,
        ),
        v4(50, &[&esp_spi.to_be_bytes()[..], &[0, 0, 0, 3]].concat(), 0),
        // MPLS-in-IP and MPLS-in-UDP to the decap queues.
        v4(137, &[0, 1], 0),
        v4(
            137,
            &(0..20).flat_map(|_| lse(100, false)).collect::<Vec<_>>(),
            0,
        ),
        v4(137, &[&lse(100, true)[..], &garbage(40, 8)].concat(), 0),
        v4(
            137,
            &[&lse(100, true)[..], &[0x45, 0, 0, 80, 0, 0]].concat(),
            0,
        ),
        v4(
            137,
            &[&lse(100, true)[..], &[0x60, 0, 0, 0, 0, 200, 17]].concat(),
            0,
        ),
        v4(137, &[&lse(999, true)[..], &v4(17, &ok_udp, 0)].concat(), 0),
        v4(17, &udp(6635, &[1, 2, 3]), 0),
        v4(
            17,
            &udp(6635, &[&lse(100, true)[..], &garbage(30, 9)].concat()),
            0,
        ),
        v4(
            17,
            &udp(6635, &[&lse(100, false)[..], &lse(100, false)].concat()),
            0,
        ),
        // Fragments: a first fragment alone, a middle one, one overlapping the UDP
        // header, fragments of ESP and MPLS.
        v4(17, &udp(5001, &[0u8; 16])[..16], 0x2000),
        v4(17, &garbage(64, 10), 0x2000 | 8),
        v4(17, &garbage(8, 11), 1),
        v4(
            50,
            &[&esp_spi.to_be_bytes()[..], &garbage(60, 12)].concat(),
            0x2000,
        ),
        v4(137, &garbage(16, 13), 0x2000 | 2),
    ];
    v4s.extend(ipcomp_bombs(100_000));
    v4s.extend(ipcomp_bombs(70_000));
    let mut hbh = vec![17, 0, 0, 0]; // a hop-by-hop header cut short
    hbh.truncate(4);
    let mut dest_chain = Vec::new();
    for _ in 0..20 {
        dest_chain.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]); // 20 destination options
    }
    dest_chain[8 * 19] = 17;
    dest_chain.extend_from_slice(&udp(5001, &[0; 8]));
    let v6s: Vec<Vec<u8>> = vec![
        v6(17, &udp(5001, &[0; 8]))[..20].to_vec(), // header cut at 20 bytes
        {
            let mut p = v6(17, &udp(5001, &[0; 8]));
            p[4..6].copy_from_slice(&900u16.to_be_bytes()); // payload length past the frame
            p
        },
        {
            let mut p = v6(17, &udp(5001, &[0; 8]));
            p[0] = 0x40; // version 4 in an IPv6 frame
            p
        },
        v6(17, &[0x9c, 0x40, 0x13, 0x89]),     // UDP cut at 4 bytes
        v6(17, &udp(5001, &[0; 8])),           // UDP with checksum 0 (invalid over IPv6)
        v6(6, &tcp(5001, 2)),                  // TCP data offset 2
        v6(58, &[128]),                        // ICMPv6 cut at 1 byte
        v6(0, &hbh),                           // hop-by-hop cut short
        v6(43, &[17, 6, 0, 0xff, 0, 0, 0, 0]), // routing header type 0, bad length
        v6(
            44,
            &[&[17, 0, 0, 1, 0, 0, 0, 7][..], &udp(5001, &[0; 8])].concat(),
        ), // first fragment
        v6(
            44,
            &[&[17, 0, 0x03, 0x20, 0, 0, 0, 8][..], &garbage(32, 14)].concat(),
        ), // offset 100
        v6(60, &dest_chain),
        v6(50, &garbage(40, 15)),
        v6(108, &ipcomp(17, 2, &garbage(40, 16))),
        v6(137, &garbage(12, 17)),
    ];
    let mut out: Vec<(u16, Vec<u8>)> = v4s.into_iter().map(|p| (0x0800, p)).collect();
    out.extend(v6s.into_iter().map(|p| (0x86dd, p)));
    // MPLS directly on Ethernet, which the relay does not route.
    out.push((0x8847, [&lse(100, true)[..], &garbage(40, 18)].concat()));
    out
}

/// Resident memory of process `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[test]
fn malformed_packets_of_every_kind_beside_a_good_flow_lose_nothing() {
    let _serial = serial();
    let began = Instant::now();
    let l = line3("faults_malformed");
    let dir = TempDir::new("malformed");
    let keys = key_dir("malformed");
    let key = keys.0.join("esp.key");
    relay_svc_crypto::keygen(relay_svc_crypto::Cipher::Aes128Gcm, &key).unwrap();
    let rules = dir.file("ids.rules", IDS_RULES);
    let spi = 0x1001;
    let mut r = Relayd::start(
        &l.relay,
        &format!(
            r#"
[[queue]]
num = 1
table = "raw"
hook = "prerouting"
match = "-p 108"
services = ["d"]

[[queue]]
num = 2
table = "raw"
hook = "prerouting"
match = "-p esp"
services = ["dec"]

[[queue]]
num = 3
table = "raw"
hook = "prerouting"
match = "-p 137"
services = ["mdec"]

[[queue]]
num = 4
table = "raw"
hook = "prerouting"
match = "-p udp --dport 6635"
services = ["mdec"]

[[queue]]
num = 0
hook = "forward"
family = "both"
services = ["ids", "dump", "accept"]

[service.d]
kind = "decompress"

[service.dec]
kind = "decrypt"
[[service.dec.sa]]
spi = {spi}
cipher = "aes-128-gcm"
key_file = "{key}"

[service.mdec]
kind = "mpls-decap"
labels = [100]
peers = ["10.0.1.1"]

[service.ids]
kind = "ids"
rules = ["{rules}"]

[service.dump]
kind = "dump"
rate = 5
"#,
            key = key.display(),
            rules = rules.display(),
        ),
    );
    let kinds = malformed_packets(spi);
    let secs = secs();
    let (bad_pps, good_pps) = (3000u64, 5000u64);
    let n_bad = (bad_pps as f64 * secs) as usize;
    let frames: Vec<(u16, Vec<u8>)> = kinds.iter().cycle().take(n_bad).cloned().collect();
    let rss_before = rss_kib(r.proc.pid());
    let flow = UdpFlow::start(
        &l.src,
        &l.dst,
        addr("10.0.2.2:5000"),
        Some(good_pps),
        200,
        secs + 1.0,
    );
    std::thread::sleep(Duration::from_millis(500));
    let mac = mac_of(&l.relay, &l.src_link.b_if);
    let t0 = Instant::now();
    let bad_sent = send_frames(&l.src, &l.src_link.a_if, mac, frames, bad_pps);
    let bad_secs = t0.elapsed().as_secs_f64();
    let (sent, got) = flow.finish();
    let (lost, dups) = loss_and_duplicates(&sent, &got);
    assert!(r.alive(), "relayd died on malformed input:\n{}", r.log());
    let st = r.status();
    let rss_after = rss_kib(r.proc.pid());
    let queued: u64 = st
        .queues
        .iter()
        .filter(|q| q.num != 0)
        .map(|q| q.packets)
        .sum();
    let q0 = st.queues.iter().find(|q| q.num == 0).unwrap();
    let malformed: u64 = st.queues.iter().map(|q| q.malformed).sum();
    eprintln!(
        "malformed: {} kinds, {bad_sent} packets at {:.0}/s beside {} good at {good_pps}/s: \
         good received {}, lost {lost}, duplicated {dups}; decap/decrypt/decompress queues \
         took {queued}, queue 0 took {} ({} malformed in all queues); RSS {rss_before} -> \
         {rss_after} KiB ({:?})",
        kinds.len(),
        bad_sent as f64 / bad_secs,
        sent.packets,
        got.packets,
        q0.packets,
        malformed,
        began.elapsed()
    );
    for s in &st.services {
        eprintln!("  {} ({}): {:?}", s.name, s.kind, s.counters);
    }
    assert_eq!(bad_sent, n_bad as u64, "frames the packet socket refused");
    assert_eq!((lost, dups), (0, 0), "{sent:?}\n{got:?}");
    assert!(
        malformed > 0 && queued > 0,
        "the malformed packets never reached relayd"
    );
    for q in &st.queues {
        assert_eq!(
            q.errors,
            0,
            "a service failed on bad input: {q:?}\n{}",
            r.log()
        );
    }
    assert!(
        rss_after < rss_before + 64 * 1024,
        "relayd grew from {rss_before} to {rss_after} KiB"
    );
    // Still serving, on the datapath and on the status socket.
    assert!(l.src.ping("10.0.2.2"));
    let json = status_cli(&l.relay, &r.socket);
    assert!(json["queues"].as_array().is_some_and(|q| q.len() == 5));
}
