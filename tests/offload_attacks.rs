//! Attacks on NFQUEUE flow offload (docs/offload.md) on the real kernel: what conntrack
//! really does with a reused tuple, a packet whose own entry is gone, and the marks a
//! run leaves behind. A test marked `#[ignore = "bug: ..."]` shows a weakness that is
//! still there (it fails today); the others show a defence that holds. Needs root.

mod support;

use relay_testbed::line3;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::*;

/// Queue 7 in FORWARD for TCP to port 5701, running `accept`, offloading.
const ACCEPT_TCP: &str = "[[queue]]\nnum = 7\nhook = \"forward\"\n\
    match = \"-p tcp --dport 5701\"\nservices = [\"accept\"]\noffload = true\n";

const SERVER: &str = "10.0.2.2:5701";

/// The queue's status.
fn queue(r: &Relayd) -> relayd::status::QueueStatus {
    r.queue(7)
}

/// Waits until the queue's packet counter has not moved for half a second; returns it.
fn settled(r: &Relayd) -> u64 {
    r.settled(7)
}

/// A TCP connection from source port `sport` (the calling thread's namespace), with
/// SO_REUSEADDR so that the same tuple can be opened again once the first is gone.
fn connect_from(sport: u16, to: SocketAddr) -> std::io::Result<TcpStream> {
    let SocketAddr::V4(to) = to else {
        unreachable!("IPv4 only")
    };
    // SAFETY: plain socket calls on stack values that outlive them; the descriptor is
    // handed to TcpStream (which closes it) or closed here on error.
    unsafe {
        // CLOEXEC: a process another test spawns must not keep the socket open (a
        // close would then neither reset nor free the port).
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as u32,
        );
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as u16;
        sa.sin_port = sport.to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
        if libc::bind(fd, &sa as *const _ as *const libc::sockaddr, len) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        sa.sin_port = to.port().to_be();
        sa.sin_addr.s_addr = u32::from_ne_bytes(to.ip().octets());
        if libc::connect(fd, &sa as *const _ as *const libc::sockaddr, len) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        Ok(TcpStream::from_raw_fd(fd))
    }
}

/// Accepts one connection on `listener` and returns what it read, once its peer closed
/// or `stop` is set (a segment the IPS dropped would otherwise hold the reader).
fn collect(
    listener: std::net::TcpListener,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
                Err(_) if !stop.load(Ordering::Relaxed) => {}
                Err(_) => break,
            }
        }
        all
    })
}

/// Closes `s` with a reset (SO_LINGER 0), as a peer that aborts does.
fn abort(s: TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a live descriptor with a stack value.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as u32,
        );
    }
    drop(s);
}

/// Who ends the first connection with a reset.
#[derive(Clone, Copy, PartialEq)]
enum Resetter {
    Client,
    Server,
    /// Not a reset: the server closes first with a FIN (its side then waits in
    /// TIME_WAIT, which accepts the new SYN), the client answers with its own.
    ServerFin,
}

/// One connection from port `sport` is offloaded (the `accept` chain votes on its SYN),
/// then reset by `who`; a second connection on the same tuple follows at once (inside
/// conntrack's 10 s CLOSE timeout) and carries 64 KiB. Returns queue 7's packets before
/// and after the second connection, and the bytes the server read from it.
fn reuse_after_reset(tag: &str, sport: u16, who: Resetter) -> (u64, u64, usize) {
    let l = line3(tag);
    let r = Relayd::start(&l.relay, ACCEPT_TCP);
    let to = addr(SERVER);
    let listener = l.dst.run(move || std::net::TcpListener::bind(to).unwrap());
    let server = std::thread::spawn(move || {
        let (mut first, _) = listener.accept().unwrap();
        let mut buf = [0u8; 200];
        if who == Resetter::ServerFin {
            first.read_exact(&mut buf).unwrap();
        } else {
            // The client's first bytes stay unread: closing now resets (no FIN).
            let _ = first.read(&mut buf[..1]);
        }
        std::thread::sleep(Duration::from_millis(1500));
        if who != Resetter::Client {
            drop(first);
        }
        let (mut second, _) = listener.accept().unwrap();
        second
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut all = Vec::new();
        let _ = second.read_to_end(&mut all);
        all.len()
    });
    let mut c1 = l.src.run(move || connect_from(sport, to)).unwrap();
    c1.write_all(&[7u8; 200]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let before = settled(&r);
    let offloaded = queue(&r).offload.map(|o| o.flows.values().sum::<u64>());
    assert_eq!(offloaded, Some(1), "the first connection was not offloaded");
    match who {
        Resetter::Client => abort(c1),
        Resetter::Server => {
            // The server's reset arrives within its 1.5 s.
            c1.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 1];
            let got = c1.read(&mut b);
            assert!(got.is_err(), "no reset from the server: {got:?}");
            drop(c1);
        }
        Resetter::ServerFin => {
            c1.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 1];
            let got = c1.read(&mut b);
            assert!(matches!(got, Ok(0)), "no FIN from the server: {got:?}");
            drop(c1);
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut c2 = l
        .src
        .run(move || connect_from(sport, to))
        .expect("the second connection on the same tuple");
    c2.write_all(&[b'E'; 65536]).unwrap();
    c2.shutdown(std::net::Shutdown::Write).unwrap();
    let read = server.join().unwrap();
    let after = settled(&r);
    (before, after, read)
}

/// The client aborts an offloaded connection and opens the same tuple again: conntrack
/// sees the RST in the SYN's own direction, kills the entry and gives the SYN a fresh one
/// without relayd's mark, so the new connection is queued from its SYN. (Checked to fail:
/// with the first connection reset by the server instead, the next test.)
#[test]
fn a_connection_reopened_after_the_clients_reset_is_queued() {
    let (before, after, read) = reuse_after_reset("offa-crst", 40001, Resetter::Client);
    assert_eq!(read, 65536);
    assert!(
        after >= before + 3,
        "the new connection skipped the queue: {before} -> {after} packets"
    );
}

/// The server closes an offloaded connection with a FIN, the client with its own, and
/// opens the same tuple again at once: the SYN meets the entry with a FIN seen
/// (`IP_CT_TCP_FLAG_CLOSE_INIT`), conntrack kills it and makes a new one without the
/// mark, as docs/ids.md says of a reused tuple. (It can fail: the next test.)
#[test]
fn a_connection_reopened_after_a_clean_close_is_queued() {
    let (before, after, read) = reuse_after_reset("offa-fin", 40003, Resetter::ServerFin);
    assert_eq!(read, 65536);
    assert!(
        after >= before + 3,
        "the new connection skipped the queue: {before} -> {after} packets"
    );
}

/// The server resets an offloaded connection (it closes with unread data: a RST, no
/// FIN); the client opens the same tuple again within conntrack's CLOSE timeout. The
/// kernel's TCP tracker reopens an entry only when a FIN was seen or the RST came from
/// the SYN's own direction (nf_conntrack_proto_tcp.c, `TCP_CONNTRACK_SYN_SENT`); here it
/// treats the SYN as "ignored", lets it through on the old entry, and the server's
/// SYN/ACK then re-syncs that entry (old mark and all) to the new connection. The skip
/// rules match it: a whole new connection, never seen by the chain.
#[test]
fn a_connection_reopened_after_the_servers_reset_is_queued() {
    let (before, after, read) = reuse_after_reset("offa-srst", 40002, Resetter::Server);
    assert_eq!(read, 65536);
    assert!(
        after >= before + 3,
        "the new connection skipped the queue: {before} -> {after} packets"
    );
}

/// A TCP segment from `src` to `dst` with `flags`, as an IPv4 packet for
/// [`send_raw`] (the kernel fills in the IP header's length and checksum).
fn tcp_packet(src: SocketAddr, dst: SocketAddr, flags: u8, seq: u32, payload: &[u8]) -> Vec<u8> {
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (src, dst) else {
        unreachable!("IPv4 only")
    };
    let mut tcp = Vec::with_capacity(20 + payload.len());
    tcp.extend_from_slice(&s.port().to_be_bytes());
    tcp.extend_from_slice(&d.port().to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&0u32.to_be_bytes());
    tcp.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    tcp.extend_from_slice(payload);
    let mut sum: u32 = 0;
    let mut words = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    words(&s.ip().octets());
    words(&d.ip().octets());
    words(&[0, 6]);
    words(&(tcp.len() as u16).to_be_bytes());
    words(&tcp);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    tcp[16..18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&s.ip().octets());
    ip.extend_from_slice(&d.ip().octets());
    ip.extend_from_slice(&tcp);
    ip
}

/// The conntrack mark of the relay's entry whose line contains `needle`.
fn ct_mark(r: &Relayd, needle: &str) -> Option<u32> {
    let ct = std::fs::read_to_string(format!("/proc/{}/net/nf_conntrack", r.proc.pid()))
        .unwrap_or_default();
    ct.lines()
        .filter(|l| l.contains(needle))
        .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("mark=")))
        .and_then(|m| m.parse().ok())
}

/// An IPS queue at PREROUTING (before DNAT): `drop` on "EVIL" keeps every TCP flow
/// inline; a `pass` rule lets the client reach the inner server 10.0.2.2 directly.
/// Connection C goes to the public 10.0.1.2:5802, DNAT'ed to 10.0.2.2:5701: its
/// entry's tuples are 10.0.1.1:p -> 10.0.1.2:5802 and 10.0.2.2:5701 -> 10.0.1.1:p.
/// The attacker sends one TCP packet 10.0.1.1:p -> 10.0.2.2:5701 with `flags`: a new
/// flow to the IDS, which the pass rule decides (vote: pass). That packet has no
/// confirmed conntrack entry once its verdict is sent (conntrack judged it INVALID, or
/// `forward_drop`: the box's filter FORWARD lets only DNAT'ed traffic reach the inner
/// server, so its NEW entry dies with it), so the update by its tuple finds nothing
/// (ENOENT), and the retry "with the tuple turned round" (crates/nfq/src/offload.rs,
/// `carry_out`/`answered`) finds C by its reply tuple and marks C offloaded, both ways.
/// Returns what the server read from C (an "EVIL" C sent after the attack included) and
/// C's conntrack mark before and after.
fn turned_round(tag: &str, sport: u16, flags: u8, forward_drop: bool) -> (String, u32, u32) {
    let l = line3(tag);
    let nat = [
        "iptables",
        "-t",
        "nat",
        "-A",
        "PREROUTING",
        "-p",
        "tcp",
        "-d",
        "10.0.1.2",
        "--dport",
        "5802",
        "-j",
        "DNAT",
        "--to-destination",
        SERVER,
    ];
    let fwd = [
        "iptables",
        "-A",
        "FORWARD",
        "-d",
        "10.0.2.2",
        "-m",
        "conntrack",
        "!",
        "--ctstate",
        "DNAT",
        "-j",
        "DROP",
    ];
    for rule in [&nat[..], &fwd[..]]
        .into_iter()
        .take(1 + usize::from(forward_drop))
    {
        let out = l.relay.exec(rule);
        assert!(out.status.success(), "{out:?}");
    }
    let dir = TempDir::new(tag);
    let rules = dir.file(
        "ips.rules",
        "drop tcp any any -> any any (msg:\"evil\"; content:\"EVIL\"; sid:1;)\n\
         pass tcp 10.0.1.1 any -> 10.0.2.2 any (msg:\"direct\"; sid:2;)\n",
    );
    let cfg = format!(
        "[[queue]]\nnum = 7\nhook = \"prerouting\"\nmatch = \"-p tcp\"\n\
         services = [\"ids\"]\noffload = true\n\n[service.ids]\nkind = \"ids\"\n\
         rules = [\"{}\"]\n",
        rules.display()
    );
    let r = Relayd::start(&l.relay, &cfg);
    let to = addr(SERVER);
    let listener = l.dst.run(move || std::net::TcpListener::bind(to).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let server = collect(listener, stop.clone());
    let mut c = l
        .src
        .run(move || connect_from(sport, addr("10.0.1.2:5802")))
        .unwrap();
    c.write_all(b"hello ").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let _ = settled(&r);
    let flows = queue(&r)
        .offload
        .map_or(0, |o| o.flows.values().sum::<u64>());
    assert_eq!(flows, 0, "C was offloaded on its own:\n{}", r.log());
    let needle = format!("sport={sport} dport=5802");
    let before = ct_mark(&r, &needle).expect("C's conntrack entry");
    let from = addr(&format!("10.0.1.1:{sport}"));
    send_raw(&l.src, vec![tcp_packet(from, to, flags, 12345, &[])]);
    std::thread::sleep(Duration::from_millis(500));
    let after = ct_mark(&r, &needle).expect("C's conntrack entry");
    c.write_all(b"EVIL ").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    drop(c);
    let got = String::from_utf8_lossy(&server.join().unwrap()).into_owned();
    (got, before, after)
}

/// The attacker's packet is a FIN|ACK, which conntrack judges INVALID (no entry) and
/// the box forwards.
#[test]
fn an_invalid_packet_on_the_turned_tuple_does_not_offload_another_connection() {
    let (got, before, after) = turned_round("offa-turn-inv", 41000, 0x11, false);
    assert!(!got.contains("EVIL"), "the server read {got:?}");
    assert_eq!(after, before, "C's conntrack mark changed");
}

/// The attacker's packet is a SYN the box's firewall drops after the queue (only
/// DNAT'ed traffic may reach the inner server): its NEW entry is never confirmed.
#[test]
fn a_dropped_syn_on_the_turned_tuple_does_not_offload_another_connection() {
    let (got, before, after) = turned_round("offa-turn-syn", 41001, 0x02, true);
    assert!(!got.contains("EVIL"), "the server read {got:?}");
    assert_eq!(after, before, "C's conntrack mark changed");
}

/// Without the firewall rule the attacker's SYN gets an entry of its own (the NAT core
/// moves its source port off C's reply tuple) and its update finds that entry: C keeps
/// its mark and its "EVIL" is dropped. (It can fail: the same steps with the firewall
/// rule, the test above, fail both assertions today.)
#[test]
fn a_confirmed_syn_on_the_turned_tuple_offloads_only_itself() {
    let (got, before, after) = turned_round("offa-turn-own", 41002, 0x02, false);
    assert!(!got.contains("EVIL"), "the server read {got:?}");
    assert_eq!(after, before, "C's conntrack mark changed");
}

/// A long-lived connection offloaded under one generation keeps that generation in its
/// conntrack mark after a reload revoked it; the generation field (6 bits by default)
/// comes round again after 63 reloads with one offloading queue
/// (daemon/relayd/src/config/offload.rs, `set_generations`), and the stale mark then
/// matches the new skip rules: the connection skips a chain that now drops its bytes.
/// A restart picks its generation at random, so a connection left from an earlier run
/// matches with odds 1 in 63, and an attacker holding one connection per generation
/// always has one that matches.
#[test]
fn a_revoked_flow_stays_revoked_when_the_generation_comes_round() {
    let l = line3("offa-wrap");
    let dir = TempDir::new("offa-wrap");
    let rules = dir.file("ips.rules", "pass tcp any any -> any 5701 (sid:2;)\n");
    let cfg = format!(
        "[[queue]]\nnum = 7\nhook = \"forward\"\nmatch = \"-p tcp --dport 5701\"\n\
         services = [\"ids\"]\noffload = true\n\n[service.ids]\nkind = \"ids\"\n\
         rules = [\"{}\"]\n",
        rules.display()
    );
    let r = Relayd::start(&l.relay, &cfg);
    let to = addr(SERVER);
    let listener = l.dst.run(move || std::net::TcpListener::bind(to).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let server = collect(listener, stop.clone());
    let mut c = l.src.run(move || connect_from(41010, to)).unwrap();
    c.write_all(b"hello ").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let _ = settled(&r);
    let o = queue(&r).offload.expect("offload counters");
    assert_eq!(o.flows.get("pass"), Some(&1), "{o:?}\n{}", r.log());
    // The operator's new rules drop "EVIL"; every reload revokes the old offloads.
    dir.file(
        "ips.rules",
        "drop tcp any any -> any any (msg:\"evil\"; content:\"EVIL\"; sid:1;)\n",
    );
    for n in 1..=63 {
        reload(&r, n);
    }
    assert_eq!(queue(&r).offload.map(|o| o.revoked), Some(1));
    c.write_all(b"EVIL ").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    drop(c);
    let got = String::from_utf8_lossy(&server.join().unwrap()).into_owned();
    assert!(
        !got.contains("EVIL"),
        "the server read {got:?}: {:?}",
        queue(&r)
    );
}

/// The Internet checksum of `b`.
fn csum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An ICMP port unreachable from `from` to `to` quoting a UDP datagram `to` -> `from`
/// (the error a host sends about a flow's packet), with `extra` after the quote.
fn icmp_unreachable(from: SocketAddr, to: SocketAddr, extra: &[u8]) -> Vec<u8> {
    let (SocketAddr::V4(f), SocketAddr::V4(t)) = (from, to) else {
        unreachable!("IPv4 only")
    };
    let mut inner = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0];
    inner.extend_from_slice(&t.ip().octets());
    inner.extend_from_slice(&f.ip().octets());
    let total = (20 + 8 + 16) as u16;
    inner[2..4].copy_from_slice(&total.to_be_bytes());
    let c = csum(&inner);
    inner[10..12].copy_from_slice(&c.to_be_bytes());
    inner.extend_from_slice(&t.port().to_be_bytes());
    inner.extend_from_slice(&f.port().to_be_bytes());
    inner.extend_from_slice(&24u16.to_be_bytes());
    inner.extend_from_slice(&[0, 0]);
    let mut icmp = vec![3, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&inner);
    icmp.extend_from_slice(extra);
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 1, 0, 0];
    ip.extend_from_slice(&f.ip().octets());
    ip.extend_from_slice(&t.ip().octets());
    ip.extend_from_slice(&icmp);
    ip
}

/// An IPS queue for all traffic at FORWARD whose rules pass UDP to port 5700 and drop
/// every ICMP destination unreachable. Once the UDP flow is offloaded, an ICMP error
/// quoting it is RELATED to its entry: the kernel gives the error the flow's conntrack
/// (`nf_ct_get` returns the master with IP_CT_RELATED_REPLY), so `--ctdir REPLY` and the
/// connmark match and the skip rule lets it by, with whatever it carries after the
/// quote. (It can fail: without the offload, the IPS drops the error.)
#[test]
fn an_icmp_error_about_an_offloaded_flow_is_still_inspected() {
    let l = line3("offa-icmp");
    let dir = TempDir::new("offa-icmp");
    let rules = dir.file(
        "ips.rules",
        "pass udp any any -> any 5700 (sid:1;)\n\
         drop icmp any any -> any any (msg:\"unreachable\"; itype:3; sid:2;)\n",
    );
    let cfg = format!(
        "[[queue]]\nnum = 7\nhook = \"forward\"\nservices = [\"ids\"]\noffload = true\n\n\
         [service.ids]\nkind = \"ids\"\nrules = [\"{}\"]\n",
        rules.display()
    );
    let r = Relayd::start(&l.relay, &cfg);
    // Counts, after relayd's mangle rules, the errors that got through.
    let count = [
        "iptables",
        "-A",
        "FORWARD",
        "-p",
        "icmp",
        "--icmp-type",
        "3",
        "-m",
        "comment",
        "--comment",
        "unreach",
    ];
    let out = l.relay.exec(&count);
    assert!(out.status.success(), "{out:?}");
    let server = addr("10.0.2.2:5700");
    let client = addr("10.0.1.1:41030");
    let _sink = l
        .dst
        .run(move || std::net::UdpSocket::bind(server).unwrap());
    let sock = l
        .src
        .run(move || std::net::UdpSocket::bind(client).unwrap());
    for _ in 0..5 {
        sock.send_to(b"hello", server).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = settled(&r);
    let o = queue(&r).offload.expect("offload counters");
    assert_eq!(o.flows.get("pass"), Some(&1), "{o:?}\n{}", r.log());
    send_raw(
        &l.dst,
        vec![icmp_unreachable(server, client, b"EVIL payload")],
    );
    std::thread::sleep(Duration::from_millis(300));
    let listed = l
        .relay
        .exec(&["iptables", "-L", "FORWARD", "-v", "-x", "-n"]);
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let passed: u64 = listed
        .lines()
        .find(|l| l.contains("unreach"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counting rule in\n{listed}"));
    assert_eq!(
        passed,
        0,
        "the ICMP error got past the IPS: {:?}",
        queue(&r)
    );
}

/// The generations `set_generations` gives the offloading queues of `cfg` at `epoch`.
fn generations_at(cfg: &relayd::config::Config, epoch: u32) -> Vec<u32> {
    let mut c = cfg.clone();
    relayd::config::set_generations(&mut c, epoch);
    c.queues
        .iter()
        .filter_map(|q| q.queue.offload.map(|m| m.generation))
        .collect()
}

/// Five offloading queues (allowed: up to 31 with the default bits). The daemon's
/// epoch starts at a random value up to about 2^30 and counts reloads; `epoch * n`
/// is taken modulo 2^32 (`wrapping_mul`) before the modulo of the generation field,
/// so around epoch 2^32 / 5 two queues of one epoch share a generation, and a queue's
/// skip rules match what the other offloaded, which its own chain never decided.
/// (Checked over the first 10,000 epochs too, where the wrap is not reached: distinct.)
#[test]
fn queues_never_share_a_generation_whatever_the_epoch() {
    let mut text = String::new();
    for n in 0..5 {
        text += &format!(
            "[[queue]]\nnum = {n}\nhook = \"forward\"\nmatch = \"-p udp --dport {}\"\n\
             services = [\"accept\"]\noffload = true\n\n",
            6000 + n
        );
    }
    let cfg = relayd::config::parse(
        &text,
        std::path::Path::new("five.toml"),
        &relayd::Registry::with_builtins(),
    )
    .unwrap();
    let wrap = u32::MAX / 5 + 1;
    for epoch in (1..10_000).chain(wrap - 100..wrap + 100) {
        let now = generations_at(&cfg, epoch);
        let before = generations_at(&cfg, epoch.wrapping_sub(1));
        for (k, g) in now.iter().enumerate() {
            assert!(
                !now[..k].contains(g) && !before.contains(g),
                "epoch {epoch}: generations {now:x?}, the epoch before {before:x?}"
            );
        }
    }
}

/// An FTP control connection the IPS passes (offloaded at its SYN) announces a passive
/// data port; the kernel's FTP helper (assigned by the box's own `CT --helper ftp` rule)
/// expects the data connection, and conntrack gives the expected connection its
/// master's mark (`init_conntrack`: `ct->mark = exp->master->mark`): relayd's offload
/// bits and generation included. The data connection then skips the IPS from its SYN,
/// though no chain ever voted on it, and its "EVIL" reaches the server. (It can fail:
/// without the helper rule the data connection is queued and "EVIL" dropped; checked.)
#[test]
fn an_expected_connection_of_an_offloaded_one_is_inspected() {
    let l = line3("offa-ftp");
    let dir = TempDir::new("offa-ftp");
    let rules = dir.file(
        "ips.rules",
        "pass tcp any any -> any 21 (sid:1;)\n\
         drop tcp any any -> any any (msg:\"evil\"; content:\"EVIL\"; sid:2;)\n",
    );
    let cfg = format!(
        "[[queue]]\nnum = 7\nhook = \"forward\"\nmatch = \"-p tcp\"\n\
         services = [\"ids\"]\noffload = true\n\n[service.ids]\nkind = \"ids\"\n\
         rules = [\"{}\"]\n",
        rules.display()
    );
    let r = Relayd::start(&l.relay, &cfg);
    let out = l.relay.exec(&[
        "iptables",
        "-t",
        "raw",
        "-A",
        "PREROUTING",
        "-p",
        "tcp",
        "--dport",
        "21",
        "-j",
        "CT",
        "--helper",
        "ftp",
    ]);
    assert!(out.status.success(), "{out:?}");
    let control = l
        .dst
        .run(|| std::net::TcpListener::bind(addr("10.0.2.2:21")).unwrap());
    let data = l
        .dst
        .run(|| std::net::TcpListener::bind(addr("10.0.2.2:6000")).unwrap());
    let ftpd = std::thread::spawn(move || {
        let (mut c, _) = control.accept().unwrap();
        // The helper parses a line only after one it saw end (a server's banner).
        c.write_all(b"220 ready\r\n").unwrap();
        let mut buf = [0u8; 64];
        let _ = c.read(&mut buf);
        // 6000 = 23 * 256 + 112.
        c.write_all(b"227 Entering Passive Mode (10,0,2,2,23,112).\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_secs(3));
    });
    let stop = Arc::new(AtomicBool::new(false));
    let server = collect(data, stop.clone());
    let mut c = l
        .src
        .run(|| TcpStream::connect(addr("10.0.2.2:21")))
        .unwrap();
    let mut reply = [0u8; 64];
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let n = c.read(&mut reply).unwrap();
    assert!(reply[..n].starts_with(b"220 "), "{:?}", &reply[..n]);
    std::thread::sleep(Duration::from_millis(300));
    c.write_all(b"PASV\r\n").unwrap();
    let n = c.read(&mut reply).unwrap();
    assert!(reply[..n].starts_with(b"227 "), "{:?}", &reply[..n]);
    let o = queue(&r).offload.expect("offload counters");
    assert_eq!(o.flows.get("pass"), Some(&1), "{o:?}\n{}", r.log());
    let mut d = l
        .src
        .run(|| TcpStream::connect(addr("10.0.2.2:6000")))
        .unwrap();
    d.write_all(b"hello EVIL ").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    drop(d);
    let got = String::from_utf8_lossy(&server.join().unwrap()).into_owned();
    let q = queue(&r);
    drop(c);
    ftpd.join().unwrap();
    assert!(!got.contains("EVIL"), "the server read {got:?}: {q:?}");
}

/// The skip rules in `node`'s rule set.
fn skip_rules(node: &relay_testbed::Node) -> Vec<String> {
    iptables_save(node)
        .lines()
        .filter(|l| l.contains("relayd-offload-"))
        .map(String::from)
        .collect()
}

/// relayd killed with SIGKILL right after offloading a connection leaves its skip rules
/// (the offloaded flow keeps flowing, the queue rule without a reader drops the rest):
/// the next start removes them before installing its own, with its own generation, and
/// a clean stop (SIGTERM) leaves none. The connection's conntrack mark is not cleared
/// by either (see `a_revoked_flow_stays_revoked_when_the_generation_comes_round`).
#[test]
fn skip_rules_a_killed_relayd_left_are_replaced_at_the_next_start() {
    let l = line3("offa-kill");
    let mut r = Relayd::start(&l.relay, ACCEPT_TCP);
    let to = addr(SERVER);
    let listener = l.dst.run(move || std::net::TcpListener::bind(to).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let server = collect(listener, stop.clone());
    let mut c = l.src.run(move || connect_from(40010, to)).unwrap();
    c.write_all(b"hello ").unwrap();
    let _ = settled(&r);
    let first = skip_rules(&l.relay);
    assert_eq!(first.len(), 2, "{first:?}");
    r.proc.signal(libc::SIGKILL).unwrap();
    let _ = r.proc.wait_timeout(Duration::from_secs(5));
    assert_eq!(skip_rules(&l.relay), first, "SIGKILL removed nothing");
    // The offloaded connection still flows while relayd is down.
    c.write_all(b"while down ").unwrap();
    r.respawn();
    r.wait_running();
    let second = skip_rules(&l.relay);
    assert_eq!(second.len(), 2, "stale skip rules stayed: {second:?}");
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
    assert_eq!(skip_rules(&l.relay), Vec::<String>::new());
    stop.store(true, Ordering::Relaxed);
    drop(c);
    let got = String::from_utf8_lossy(&server.join().unwrap()).into_owned();
    assert!(got.contains("while down"), "{got:?}");
}
