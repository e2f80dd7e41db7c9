//! The proxy on the real kernel: a client - relay - server line (testbed `line3`), the
//! proxy process inside the relay namespace, TPROXY rules installed by the test. Needs
//! root.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{TPROXY_PORT, block, cpu_rss, divert, echo_server, start_proxy, stats};
use relay_proxy::tproxy::TproxySpec;
use relay_testbed::{Testbed, line3};
use serde_json::json;
use sha2::{Digest, Sha256};

const DST: &str = "10.0.2.2";

fn addr(port: u16) -> SocketAddr {
    format!("{DST}:{port}").parse().unwrap()
}

fn transfer_mib() -> u64 {
    std::env::var("RELAY_PROXY_TRANSFER_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024)
}

#[test]
fn transfer_1gb_is_byte_identical() {
    let l = line3("proxy_1gb");
    let _spec = divert(&l.relay, vec![5001]);
    let proxy = start_proxy(
        &l.relay,
        "transparent",
        &json!({"listen": format!("0.0.0.0:{TPROXY_PORT}")}),
    );
    let mib = transfer_mib();
    let listener = l.dst.run(|| TcpListener::bind(addr(5001)).unwrap());
    let server = l.dst.run_bg(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut blk = block();
        let mut h = Sha256::new();
        for i in 0..mib {
            blk[..8].copy_from_slice(&i.to_le_bytes());
            h.update(&blk);
            s.write_all(&blk).unwrap();
        }
        s.shutdown(Shutdown::Write).unwrap();
        h.finalize().to_vec()
    });
    let t0 = Instant::now();
    let (got, n) = l.src.run(|| {
        let mut s = TcpStream::connect(addr(5001)).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut h = Sha256::new();
        let mut n = 0u64;
        loop {
            match s.read(&mut buf).unwrap() {
                0 => break,
                k => {
                    h.update(&buf[..k]);
                    n += k as u64;
                }
            }
        }
        (h.finalize().to_vec(), n)
    });
    let secs = t0.elapsed().as_secs_f64();
    let sent = server.join().unwrap();
    assert_eq!(n, mib << 20);
    assert_eq!(got, sent, "hash differs");
    let st = stats(&proxy);
    assert_eq!(st["accepted"], 1);
    assert_eq!(st["bytes_down"], mib << 20);
    println!(
        "1gb: {mib} MiB through the proxy in {secs:.2} s = {:.2} Gbit/s, sha256 equal",
        (mib << 20) as f64 * 8.0 / secs / 1e9
    );
}

#[test]
fn half_close_rst_and_transparent_source() {
    let l = line3("proxy_halfclose");
    let _spec = divert(&l.relay, vec![5002]);
    let proxy = start_proxy(
        &l.relay,
        "transparent",
        &json!({"listen": format!("0.0.0.0:{TPROXY_PORT}"), "transparent_source": true}),
    );
    let listener = l.dst.run(|| TcpListener::bind(addr(5002)).unwrap());
    let server = l.dst.run_bg(move || {
        // 1: half-close. Read the request to EOF, then answer.
        let (mut s, peer) = listener.accept().unwrap();
        let mut req = Vec::new();
        s.read_to_end(&mut req).unwrap();
        assert_eq!(req, b"request");
        s.write_all(b"answer after your FIN").unwrap();
        drop(s);
        // 2: server resets.
        let (mut s, _) = listener.accept().unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(s);
        // 3: client resets: we must see ECONNRESET, not a clean EOF.
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        let err = loop {
            match s.read(&mut buf) {
                Ok(0) => panic!("clean EOF instead of a reset"),
                Ok(k) => got.extend_from_slice(&buf[..k]),
                Err(e) => break e,
            }
        };
        (peer, got, err.kind())
    });
    l.src.run(|| {
        let mut s = TcpStream::connect(addr(5002)).unwrap();
        s.write_all(b"request").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut ans = String::new();
        s.read_to_string(&mut ans).unwrap();
        assert_eq!(ans, "answer after your FIN");

        let mut s = TcpStream::connect(addr(5002)).unwrap();
        s.write_all(b"ping").unwrap();
        let mut b = [0u8; 8];
        let e = s.read(&mut b).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");

        let mut s = TcpStream::connect(addr(5002)).unwrap();
        s.write_all(b"bye").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        socket2::SockRef::from(&s)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(s);
    });
    let (peer, got, kind) = server.join().unwrap();
    assert_eq!(
        peer.ip().to_string(),
        "10.0.1.1",
        "transparent_source keeps the client"
    );
    assert_eq!(got, b"bye");
    assert_eq!(kind, ErrorKind::ConnectionReset);
    let st = stats(&proxy);
    assert_eq!(
        (st["accepted"].as_u64(), st["resets"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(st["completed"], 1);
}

/// Issue 12: a connection to one of the relay's own addresses on a diverted port is not
/// diverted: the relay's service sees the client itself, never the proxy connecting to it
/// from the relay's address; connections through the relay still are.
#[test]
fn connections_to_the_relay_itself_are_not_diverted() {
    let l = line3("proxy_self");
    let _spec = divert(&l.relay, vec![5006]);
    let proxy = start_proxy(
        &l.relay,
        "transparent",
        &json!({"listen": format!("[::]:{TPROXY_PORT}")}),
    );
    let own = l.relay.run(|| TcpListener::bind("[::]:5006").unwrap());
    let far = l.dst.run(|| TcpListener::bind(addr(5006)).unwrap());
    let serve = |listener: TcpListener, n: usize| {
        move || {
            (0..n)
                .map(|_| {
                    let (mut s, peer) = listener.accept().unwrap();
                    let mut b = [0u8; 4];
                    s.read_exact(&mut b).unwrap();
                    s.write_all(&b).unwrap();
                    peer_ip(peer)
                })
                .collect::<Vec<_>>()
        }
    };
    let own_peers = l.relay.run_bg(serve(own, 3));
    let far_peers = l.dst.run_bg(serve(far, 1));
    l.src.run(|| {
        for to in [
            "10.0.1.2:5006",
            "10.0.2.1:5006",
            "[fd00:1::2]:5006",
            "10.0.2.2:5006",
        ] {
            let mut s = TcpStream::connect(to).unwrap();
            s.write_all(b"ping").unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"ping", "{to}");
        }
    });
    let own_peers = own_peers.join().unwrap();
    assert_eq!(
        own_peers,
        ["10.0.1.1", "10.0.1.1", "fd00:1::1"],
        "the relay's service sees the client"
    );
    assert_eq!(far_peers.join().unwrap(), ["10.0.2.1"], "through the proxy");
    let st = stats(&proxy);
    assert_eq!(st["accepted"], 1, "{st}");
}

/// Runs `program` in `node` with `stdin` as its input; panics with its stderr on failure.
fn feed(node: &relay_testbed::Node, program: &[&str], stdin: &str) {
    use std::process::Stdio;
    let mut c = node.cmd(program[0]);
    c.args(&program[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 12 (security review): a SYN addressed to `[::]:PORT` is not LOCAL to
/// `-m addrtype`, so a TPROXY divert takes it; the listener accepts it with local address
/// `::`, and connecting upstream to `::` reaches `::1`: an outside client would reach the
/// relay's loopback services. The client here sends to fd00:2::99 and its own nftables
/// rewrite the destination to `::` on the wire (and the answers' source back), which is
/// what an attacker crafting packets sends. With the rules of `TproxySpec` the SYN is not
/// diverted at all; with a divert that takes it anyway (a hand-written TPROXY rule, or the
/// rules before this fix) the listener resets it, counts it in `refused_local`, and the
/// server on `[::1]:PORT` sees nothing either way.
#[test]
fn unspecified_destination_never_reaches_the_relays_loopback() {
    const PORT: u16 = 5007;
    let l = line3("proxy_unspec");
    let spec = divert(&l.relay, vec![PORT]);
    let proxy = start_proxy(
        &l.relay,
        "transparent",
        &json!({"listen": format!("[::]:{TPROXY_PORT}"), "connect_timeout_secs": 2}),
    );
    let (reached, stop) = echo_server(&l.relay, &format!("[::1]:{PORT}"));
    feed(
        &l.src,
        &["nft", "-f", "-"],
        &format!(
            "table ip6 spoof {{
  chain out {{ type filter hook postrouting priority 300; ip6 daddr fd00:2::99 tcp dport {PORT} ip6 daddr set :: ; }}
  chain in {{ type filter hook prerouting priority -300; ip6 saddr {{ ::, fd00:1::2 }} tcp sport {PORT} ip6 saddr set fd00:2::99 ; }}
}}
"
        ),
    );
    let to: SocketAddr = format!("[fd00:2::99]:{PORT}").parse().unwrap();
    // What the client gets: the bytes it reads after sending, or why connecting or
    // reading failed.
    let attempt = move || -> Result<Vec<u8>, ErrorKind> {
        let mut s =
            TcpStream::connect_timeout(&to, Duration::from_secs(2)).map_err(|e| e.kind())?;
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(b"ping");
        let mut b = [0u8; 64];
        let n = s.read(&mut b).map_err(|e| e.kind())?;
        Ok(b[..n].to_vec())
    };
    // 1. The rules as TproxySpec writes them: `::` is not diverted, the proxy never sees it.
    let got = l.src.run(attempt);
    assert!(got.is_err(), "connected to [::]:{PORT}: {got:?}");
    let st = stats(&proxy);
    assert_eq!(
        (st["accepted"].as_u64(), st["refused_local"].as_u64()),
        (Some(0), Some(0)),
        "{st}"
    );
    // 2. A divert that takes `::` anyway: the listener's own check refuses it.
    let chain = "RPX-TPROXY";
    let mut text = format!("*mangle\n:{chain} - [0:0]\n");
    for line in spec.mangle_rules(chain, relay_core::IpVersion::V6) {
        if !line.contains("-d ::/128") {
            text.push_str(&line);
            text.push('\n');
        }
    }
    text.push_str("COMMIT\n");
    feed(&l.relay, &["ip6tables-restore", "-w", "--noflush"], &text);
    let got = l.src.run(attempt);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        reached.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "the relay's [::1]:{PORT} was reached from outside (client got {got:?})"
    );
    // The handshake is the listener's, then a reset (seen by connect or by the read).
    assert_eq!(got, Err(ErrorKind::ConnectionReset));
    let st = stats(&proxy);
    assert_eq!(st["accepted"], 1, "the divert took the SYN to [::]: {st}");
    assert_eq!(st["refused_local"], 1, "{st}");
    assert_eq!(st["upstream_failed"], 0, "{st}");
}

/// A peer address as text, an IPv4-mapped one as IPv4.
fn peer_ip(a: SocketAddr) -> String {
    match a.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(v6.to_string(), |v4| v4.to_string()),
        v4 => v4.to_string(),
    }
}

#[test]
fn two_thousand_concurrent_connections_and_the_cap() {
    const N: usize = 2000;
    relay_proxy::raise_fd_limit().unwrap();
    let l = line3("proxy_2000");
    let _spec = divert(&l.relay, vec![5003, 5004]);
    let proxy = start_proxy(
        &l.relay,
        "transparent",
        &json!({"listen": format!("0.0.0.0:{TPROXY_PORT}"), "max_connections": N}),
    );
    let (cpu0, _, _) = cpu_rss(proxy.pid());
    // Listening before the clients start: a SYN that comes first would be refused, and
    // the proxy would rightly reset its client.
    let listener = l.dst.run(|| {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_reuse_address(true).unwrap();
        sock.bind(&addr(5003).into()).unwrap();
        sock.listen(4096).unwrap();
        sock.set_nonblocking(true).unwrap();
        std::net::TcpListener::from(sock)
    });
    let server = l.dst.run_bg(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..N {
                let (mut s, _) = listener.accept().await.unwrap();
                set.spawn(async move {
                    let mut b = [0u8; 100];
                    s.read_exact(&mut b).await.unwrap();
                    s.write_all(&b).await.unwrap();
                    let mut rest = Vec::new();
                    s.read_to_end(&mut rest).await.unwrap();
                });
            }
            let mut done = 0;
            while let Some(r) = set.join_next().await {
                r.unwrap();
                done += 1;
            }
            done
        })
    });
    let t0 = Instant::now();
    let peak = l.src.run(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut conns = Vec::with_capacity(N);
            for _ in 0..N {
                conns.push(tokio::net::TcpStream::connect(addr(5003)).await.unwrap());
            }
            let mut set = tokio::task::JoinSet::new();
            for (i, mut s) in conns.into_iter().enumerate() {
                set.spawn(async move {
                    let msg = [(i % 251) as u8; 100];
                    s.write_all(&msg).await.unwrap();
                    let mut b = [0u8; 100];
                    s.read_exact(&mut b).await.unwrap();
                    assert_eq!(b, msg);
                    s
                });
            }
            let mut open = Vec::new();
            while let Some(r) = set.join_next().await {
                open.push(r.unwrap());
            }
            open.len()
        })
    });
    assert_eq!(peak, N);
    assert_eq!(server.join().unwrap(), N);
    let elapsed = t0.elapsed();
    let (cpu1, rss, hwm) = cpu_rss(proxy.pid());
    let st = stats(&proxy);
    assert_eq!(st["accepted"], N);
    assert_eq!(st["peak_active"], N, "all {N} were open at once");
    assert_eq!(st["refused_cap"], 0);
    assert_eq!(st["upstream_failed"], 0);
    println!(
        "2000: {N} concurrent echo connections in {:.2} s; proxy CPU {:.2} s, VmRSS {rss} KiB, VmHWM {hwm} KiB",
        elapsed.as_secs_f64(),
        cpu1 - cpu0
    );

    // The cap: with max_connections = 3, the fourth connection is reset at once.
    drop(proxy);
    let proxy = start_proxy(
        &l.relay,
        "transparent",
        &json!({"listen": format!("0.0.0.0:{TPROXY_PORT}"), "max_connections": 3}),
    );
    let listener = l.dst.run(|| TcpListener::bind(addr(5004)).unwrap());
    let _server = l.dst.run_bg(move || {
        let mut held = Vec::new();
        for s in listener.incoming().take(3) {
            held.push(s.unwrap());
        }
        std::thread::sleep(Duration::from_secs(3));
    });
    l.src.run(|| {
        let held: Vec<TcpStream> = (0..3)
            .map(|_| TcpStream::connect(addr(5004)).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let mut s = TcpStream::connect(addr(5004)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let e = s.read(&mut [0u8; 4]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
        drop(held);
    });
    let st = stats(&proxy);
    assert_eq!(st["refused_cap"], 1);
}

#[test]
fn drain_stops_accepting_and_resets_at_the_deadline() {
    let l = line3("proxy_drain");
    let _spec = divert(&l.relay, vec![5005]);
    let mut proxy = start_proxy(
        &l.relay,
        "transparent",
        &json!({"listen": format!("0.0.0.0:{TPROXY_PORT}"), "drain_timeout_secs": 2}),
    );
    let listener = l.dst.run(|| TcpListener::bind(addr(5005)).unwrap());
    let _server = l.dst.run_bg(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut b = [0u8; 1];
        while let Ok(1) = s.read(&mut b) {
            s.write_all(&b).unwrap();
        }
    });
    l.src.run(move || {
        let mut s = TcpStream::connect(addr(5005)).unwrap();
        let echo = |s: &mut TcpStream| {
            s.write_all(b"x")?;
            let mut b = [0u8; 1];
            s.read_exact(&mut b)
        };
        echo(&mut s).unwrap();
        proxy.signal(libc::SIGTERM).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        // Draining: the live connection still works, a new one is not accepted.
        echo(&mut s).unwrap();
        let new = TcpStream::connect_timeout(&addr(5005), Duration::from_millis(500));
        assert!(new.is_err(), "a connection was accepted while draining");
        // After the deadline the live one is reset and the proxy exits.
        let (status, out, _) = proxy.wait_output(Duration::from_secs(5));
        assert!(status.unwrap().success());
        assert!(echo(&mut s).is_err());
        let fin: serde_json::Value =
            serde_json::from_str(out.rsplit("final ").next().unwrap().trim()).unwrap();
        assert_eq!(fin["drained_aborts"], 1);
    });
}

/// `src -- relay == dst` with two links between relay and dst; the proxy's upstream is
/// MPTCP and the relay announces its second address as a subflow endpoint.
#[test]
fn mptcp_upstream_uses_both_paths() {
    let tb = Testbed::new("proxy_mptcp");
    let src = tb.node("src");
    let relay = tb.node("relay");
    let dst = tb.node("dst");
    tb.link(&src, "10.0.1.1/24", &relay, "10.0.1.2/24");
    let a = tb.link(&relay, "10.0.2.1/24", &dst, "10.0.2.2/24");
    let b = tb.link(&relay, "10.0.3.1/24", &dst, "10.0.3.2/24");
    for n in [&relay, &dst] {
        n.ip(&[
            "mptcp",
            "limits",
            "set",
            "subflows",
            "2",
            "add_addr_accepted",
            "2",
        ]);
    }
    relay.ip(&[
        "mptcp", "endpoint", "add", "10.0.3.1", "dev", &b.a_if, "subflow",
    ]);
    // Each path is capped so only both together carry the transfer at full speed.
    a.tbf_a("100mbit", 100).unwrap();
    b.tbf_a("100mbit", 100).unwrap();
    let proxy = start_proxy(
        &relay,
        "socks5",
        &json!({"listen": "10.0.1.2:1080", "upstream": "mptcp"}),
    );
    let mptcp_listener = |port: u16| {
        let s = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::STREAM,
            Some(socket2::Protocol::MPTCP),
        )
        .unwrap();
        s.set_reuse_address(true).unwrap();
        s.bind(&SocketAddr::from(([0, 0, 0, 0], port)).into())
            .unwrap();
        s.listen(16).unwrap();
        TcpListener::from(s)
    };
    let listener = dst.run(move || mptcp_listener(6001));
    let plain = dst.run(|| TcpListener::bind("0.0.0.0:6002").unwrap());
    let server = dst.run_bg(move || {
        let mut n = 0u64;
        for l in [listener, plain] {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match s.read(&mut buf).unwrap() {
                    0 => break,
                    k => n += k as u64,
                }
            }
        }
        n
    });
    let rx = |ifname: &str| -> u64 {
        let out = dst.exec(&[
            "cat",
            &format!("/sys/class/net/{ifname}/statistics/rx_bytes"),
        ]);
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let (rx_a0, rx_b0) = (rx(&a.b_if), rx(&b.b_if));
    const BYTES: usize = 60 << 20;
    let socks_send = |port: u16, bytes: usize| {
        let mut s = TcpStream::connect("10.0.1.2:1080").unwrap();
        s.write_all(&[5, 1, 0]).unwrap();
        let mut r = [0u8; 2];
        s.read_exact(&mut r).unwrap();
        let mut req = vec![5, 1, 0, 1, 10, 0, 2, 2];
        req.extend_from_slice(&port.to_be_bytes());
        s.write_all(&req).unwrap();
        let mut rep = [0u8; 10];
        s.read_exact(&mut rep).unwrap();
        assert_eq!(rep[1], 0, "SOCKS reply");
        let chunk = vec![7u8; 1 << 20];
        let t0 = Instant::now();
        for _ in 0..bytes >> 20 {
            s.write_all(&chunk).unwrap();
        }
        s.shutdown(Shutdown::Write).unwrap();
        let _ = s.read(&mut [0u8; 1]);
        t0.elapsed()
    };
    let took = src.run(move || socks_send(6001, BYTES));
    let (rx_a, rx_b) = (rx(&a.b_if) - rx_a0, rx(&b.b_if) - rx_b0);
    src.run(move || socks_send(6002, 1 << 20));
    assert_eq!(server.join().unwrap(), (BYTES + (1 << 20)) as u64);
    let st = stats(&proxy);
    let mbit = BYTES as f64 * 8.0 / took.as_secs_f64() / 1e6;
    let nstat = dst.sh("grep MPTcpExt /proc/net/netstat");
    println!(
        "mptcp: {} MiB in {:.2} s = {mbit:.0} Mbit/s over two 100 Mbit/s paths; \
         rx path A {rx_a} B, path B {rx_b} B; proxy {st}\n{}",
        BYTES >> 20,
        took.as_secs_f64(),
        String::from_utf8_lossy(&nstat.stdout)
    );
    assert_eq!(st["mptcp_connections"], 1);
    assert_eq!(st["mptcp_fallbacks"], 1, "the plain TCP server falls back");
    let min = BYTES as u64 / 5;
    assert!(
        rx_a > min && rx_b > min,
        "both subflows carry data: {rx_a} / {rx_b}"
    );
}

/// install/remove of routing and the standalone chain are idempotent and leave the
/// namespace as it was.
#[test]
fn tproxy_install_remove_leaves_nothing() {
    let tb = Testbed::new("proxy_rules");
    let n = tb.node("r");
    let snapshot = || {
        let mut s = String::new();
        for args in [
            vec!["ip", "-4", "rule"],
            vec!["ip", "-6", "rule"],
            vec!["ip", "-4", "route", "show", "table", "all"],
            vec!["ip", "-6", "route", "show", "table", "all"],
            vec!["iptables", "-w", "-t", "mangle", "-S"],
            vec!["ip6tables", "-w", "-t", "mangle", "-S"],
        ] {
            let out = n.exec(&args);
            s.push_str(&String::from_utf8_lossy(&out.stdout));
        }
        s
    };
    let before = snapshot();
    let spec = TproxySpec::static_ports(9040, vec![80, 443]);
    for _ in 0..2 {
        spec.install_routing(Some(n.name())).unwrap();
        spec.install_chain(Some(n.name()), "RPX-T").unwrap();
    }
    let during = snapshot();
    assert_eq!(
        during
            .matches("fwmark 0x10000000/0x10000000 lookup 233")
            .count(),
        2,
        "{during}"
    );
    assert_eq!(
        during.matches("-A PREROUTING -j RPX-T").count(),
        2,
        "{during}"
    );
    assert!(during.contains("TPROXY --on-port 9040"));
    let mark_spec = TproxySpec::default();
    mark_spec.install_chain(Some(n.name()), "RPX-T").unwrap();
    assert!(!snapshot().contains("multiport"));
    for _ in 0..2 {
        spec.remove_chain(Some(n.name()), "RPX-T").unwrap();
        spec.remove_routing(Some(n.name())).unwrap();
    }
    assert_eq!(snapshot(), before);
    let _ = Command::new("true").status();
}
