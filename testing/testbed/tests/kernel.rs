//! Testbeds against the real kernel: topologies build and route, teardown removes every
//! namespace (also after a panic) and kills what ran inside, `Node::run` enters the
//! namespace. Needs root; `Testbed::new` panics otherwise.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use relay_testbed::{Testbed, line3, line4};

/// Names listed by `ip netns list` right now.
fn netns_list() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn assert_gone(names: &[String]) {
    let now = netns_list();
    for n in names {
        assert!(!now.contains(n), "namespace {n} still exists: {now:?}");
    }
}

#[test]
fn line3_builds_and_pings_across_relay() {
    let l = line3("line3_ping");
    let names = l.tb.namespaces();
    assert_eq!(names.len(), 3);
    assert!(names.iter().all(|n| netns_list().contains(n)));
    assert_eq!(l.src_link.a_if, "eth0");
    assert_eq!(l.src_link.b_if, "eth0");
    assert_eq!(l.dst_link.a_if, "eth1");
    assert!(l.src.ping("10.0.2.2"), "v4 ping src -> dst failed");
    assert!(l.dst.ping("10.0.1.1"), "v4 ping dst -> src failed");
    assert!(l.src.ping("fd00:2::2"), "v6 ping src -> dst failed");
    let fwd = l.relay.exec(&["cat", "/proc/sys/net/ipv4/ip_forward"]);
    assert_eq!(String::from_utf8_lossy(&fwd.stdout).trim(), "1");
    let fwd = l.src.exec(&["cat", "/proc/sys/net/ipv4/ip_forward"]);
    assert_eq!(String::from_utf8_lossy(&fwd.stdout).trim(), "0");
    drop(l);
    assert_gone(&names);
}

#[test]
fn line4_pings_end_to_end() {
    let l = line4("line4_ping");
    assert!(l.src.ping("10.0.3.2"), "v4 ping src -> dst failed");
    assert!(l.dst.ping("fd00:1::1"), "v6 ping dst -> src failed");
    assert_eq!(l.links[1].a_if, "eth1");
    assert_eq!(l.links[1].b_if, "eth0");
}

#[test]
fn relay_without_forwarding_drops() {
    let l = line3("no_forwarding");
    l.relay.forwarding(false);
    assert!(!l.src.ping("10.0.2.2"));
    l.relay.forwarding(true);
    assert!(l.src.ping("10.0.2.2"));
}

#[test]
fn panic_still_removes_namespaces() {
    let names = std::sync::Mutex::new(Vec::new());
    let res = std::panic::catch_unwind(|| {
        let l = line3("panicking");
        *names.lock().unwrap() = l.tb.namespaces();
        panic!("deliberate panic inside a testbed");
    });
    assert!(res.is_err());
    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 3);
    assert_gone(&names);
}

#[test]
fn node_run_creates_sockets_in_the_namespace() {
    let l = line3("node_run");
    let addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 1, 1), 0);
    let inside = l.src.run(move || UdpSocket::bind(addr).map(|_| ()));
    assert!(inside.is_ok(), "bind in src failed: {inside:?}");
    let in_relay = l.relay.run(move || UdpSocket::bind(addr).map(|_| ()));
    assert!(in_relay.is_err(), "10.0.1.1 must not be local in relay");
    assert!(
        UdpSocket::bind(addr).is_err(),
        "10.0.1.1 must not be local in root ns"
    );

    // A TCP exchange across the relay, both ends created by Node::run(_bg).
    let listener = l.dst.run(|| TcpListener::bind("10.0.2.2:0").unwrap());
    let port = listener.local_addr().unwrap().port();
    let server = l.dst.run_bg(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut buf).unwrap();
        buf
    });
    l.src.run(move || {
        let mut s = std::net::TcpStream::connect(("10.0.2.2", port)).unwrap();
        std::io::Write::write_all(&mut s, b"hello across the relay").unwrap();
    });
    assert_eq!(server.join().unwrap(), b"hello across the relay");
}

#[test]
fn node_run_propagates_panics() {
    let tb = Testbed::new("run_panics");
    let n = tb.node("n");
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        n.run(|| panic!("inside the namespace"));
    }));
    assert!(res.is_err());
}

#[test]
fn teardown_kills_processes_left_inside() {
    let tb = Testbed::new("teardown_kills");
    let n = tb.node("n");
    let mut cmd = n.cmd("sleep");
    cmd.arg("30");
    let mut p = n.spawn(cmd);
    assert!(p.wait_timeout(Duration::from_millis(100)).is_none());
    drop(tb);
    let status = p
        .wait_timeout(Duration::from_secs(2))
        .expect("teardown left the process running");
    assert!(!status.success());
}

#[test]
fn proc_captures_output_and_signals() {
    let tb = Testbed::new("proc_output");
    let n = tb.node("n");
    let mut cmd = n.cmd("sh");
    cmd.args(["-c", "echo ready; ip -br link; exec sleep 30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut p = n.spawn(cmd);
    assert!(p.wait_stdout_contains("ready", Duration::from_secs(2)));
    assert!(p.wait_stdout_contains("lo", Duration::from_secs(2)));
    p.signal(libc::SIGTERM).unwrap();
    let (status, out, _err) = p.wait_output(Duration::from_secs(2));
    assert!(status.is_some());
    // Only lo exists in a fresh namespace.
    assert!(!out.contains("eth0"), "{out}");
}

#[test]
fn tbf_installs_and_limits() {
    let l = line3("tbf");
    l.dst_link.tbf_a("10mbit", 100).unwrap();
    let q = l
        .relay
        .exec(&["tc", "qdisc", "show", "dev", &l.dst_link.a_if]);
    let q = String::from_utf8_lossy(&q.stdout);
    assert!(q.contains("tbf") && q.contains("10Mbit"), "{q}");
    assert!(l.dst_link.tbf_b("lots", 10).is_err());
    l.dst_link.clear_qdisc_a().unwrap();
    assert!(l.src.ping("10.0.2.2"));
}

#[test]
fn exec_and_sh_do_not_panic_on_failure() {
    let tb = Testbed::new("exec_fail");
    let n = tb.node("n");
    assert!(!n.sh("exit 3").status.success());
    assert_eq!(n.sh("exit 3").status.code(), Some(3));
    let out = n.exec(&["ip", "-br", "link", "show", "lo"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("UP"));
}
