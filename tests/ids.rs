//! The IDS/IPS service on the real kernel: src -- relay (ids) -- dst, with an HTTP server
//! on dst. Forbidden requests are dropped, alerts are written as EVE JSON, a `ratelimit`
//! rule lets only its rate through, and `reject` resets the connection, but answers a
//! flood with a spoofed source only at its configured rate. Needs root.

mod support;

use relay_testbed::line3;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use support::*;

const RULES: &str = r#"# relayd IDS end-to-end rules
drop tcp any any -> $HOME_NET 8080 (msg:"forbidden admin page"; flow:established,to_server; \
    content:"GET"; depth:3; content:"/admin"; distance:0; within:16; \
    sid:1000001; rev:1; classtype:attempted-admin;)
alert tcp any any -> $HOME_NET 8080 (msg:"probe header"; flow:established,to_server; content:"x-probe|3a|"; nocase; sid:1000002; rev:2; classtype:attempted-recon;)
reject tcp any any -> $HOME_NET 8081 (msg:"reset me"; flow:established,to_server; content:"reset-me"; sid:1000003; rev:1;)
ratelimit udp any any -> $HOME_NET 9000 (msg:"udp flood"; rate:50/s, burst 10; sid:1000004; rev:1;)
alert tcp any any -> any any (msg:"broken"; frobnicate:1; sid:1000005;)
"#;

fn config(rules: &str, eve: &str) -> String {
    format!(
        r#"
[[queue]]
num = 0
hook = "forward"
services = ["ids"]

[service.ids]
kind = "ids"
rules = ["{rules}"]
eve_log = "{eve}"
[service.ids.vars]
HOME_NET = "[10.0.2.0/24,fd00:2::/64]"
EXTERNAL_NET = "!$HOME_NET"
"#
    )
}

/// A tiny HTTP server on `dst`: answers every request with `200 ok`.
fn http_server(l: &relay_testbed::Line3, port: u16) {
    let listener = l
        .dst
        .run(move || TcpListener::bind(("10.0.2.2", port)).unwrap());
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(10))).ok();
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = c.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
            });
        }
    });
}

/// Sends `request` to 10.0.2.2:`port` from src; the response, or the error reading it.
fn http(l: &relay_testbed::Line3, port: u16, request: &str) -> std::io::Result<String> {
    let request = request.to_owned();
    l.src.run(move || {
        let mut c = TcpStream::connect_timeout(
            &format!("10.0.2.2:{port}").parse().unwrap(),
            Duration::from_secs(3),
        )?;
        c.set_read_timeout(Some(Duration::from_secs(3)))?;
        c.write_all(request.as_bytes())?;
        let mut out = String::new();
        c.read_to_string(&mut out)?;
        Ok(out)
    })
}

fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.0\r\nHost: dst\r\n{extra}\r\n")
}

#[test]
fn ids_drops_alerts_rate_limits_and_rejects() {
    let l = line3("ids");
    let dir = TempDir::new("ids");
    let rules = dir.file("local.rules", RULES);
    let eve = dir.0.join("eve.json");
    let r = Relayd::start(
        &l.relay,
        &config(&rules.display().to_string(), &eve.display().to_string()),
    );
    // The broken rule is reported with file, line and keyword; the others load.
    assert!(
        wait_for(Duration::from_secs(2), || {
            let log = r.log();
            log.contains("local.rules:8") && log.contains("frobnicate")
        }),
        "{}",
        r.log()
    );
    for port in [8080, 8081] {
        http_server(&l, port);
    }

    // A forbidden request is dropped: the connection gets no answer. Others pass.
    let ok = http(&l, 8080, &get("/index.html", "")).unwrap();
    assert!(ok.starts_with("HTTP/1.0 200"), "{ok}");
    let t = Instant::now();
    let blocked = http(&l, 8080, &get("/admin/users", ""));
    assert!(
        blocked.as_ref().map_or(true, |s| !s.contains("200")),
        "forbidden request answered: {blocked:?}"
    );
    assert!(
        t.elapsed() >= Duration::from_secs(2),
        "it timed out, not failed fast"
    );
    let again = http(&l, 8080, &get("/index.html", "")).unwrap();
    assert!(again.starts_with("HTTP/1.0 200"), "{again}");

    // An alert rule lets the request through and writes one EVE line.
    let probed = http(&l, 8080, &get("/", "X-Probe: 1\r\n")).unwrap();
    assert!(probed.starts_with("HTTP/1.0 200"), "{probed}");
    let line = |sid: u64| {
        std::fs::read_to_string(&eve)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["alert"]["signature_id"] == sid)
            .collect::<Vec<_>>()
    };
    assert!(
        wait_for(Duration::from_secs(3), || line(1000002).len() == 1),
        "EVE: {:?}",
        std::fs::read_to_string(&eve)
    );
    let v = &line(1000002)[0];
    assert_eq!(v["event_type"], "alert");
    assert_eq!(v["src_ip"], "10.0.1.1");
    assert_eq!(v["dest_ip"], "10.0.2.2");
    assert_eq!(v["dest_port"], 8080);
    assert_eq!(v["proto"], "TCP");
    assert_eq!(v["alert"]["action"], "allowed");
    assert_eq!(v["alert"]["rev"], 2);
    assert_eq!(v["alert"]["signature"], "probe header");
    assert!(v["timestamp"].as_str().unwrap().starts_with("20"));
    assert!(v["flow_id"].is_u64());
    assert!(
        line(1000001)
            .iter()
            .all(|v| v["alert"]["action"] == "blocked")
    );
    assert!(!line(1000001).is_empty(), "the drop is alerted too");

    // reject: the client's connection is reset at once.
    let t = Instant::now();
    let reset = http(&l, 8081, "reset-me please\r\n\r\n");
    let err = reset.expect_err("rejected request answered");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    assert!(t.elapsed() < Duration::from_secs(2));

    // ratelimit: 500 packets a second for 2 s, of which 50/s (+10 burst) pass; another
    // port is untouched.
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:9000"), 1000, 500, 100);
    assert_eq!(sent, 1000);
    assert!(
        (80..=160).contains(&got),
        "rate-limited flow: {got} of {sent}"
    );
    let (sent, got) = udp_exchange(&l.src, &l.dst, addr("10.0.2.2:9001"), 300, 500, 100);
    assert_eq!(got, sent, "a flow no rule limits");

    // Per-rule hits in relayd status.
    let c = r.counters("ids");
    assert!(c["sid:1000001"] >= 1, "{c:?}");
    assert_eq!(c["sid:1000002"], 1, "{c:?}");
    assert!(c["sid:1000004"] >= 800, "{c:?}");
}

/// A flood naming a victim as its source, matching a `reject` rule.
const REFLECT_RULES: &str =
    "reject udp any any -> $HOME_NET 7000 (msg:\"reflect\"; sid:1000010;)\n";

/// The address the flood names as its source: on src's link, so the answers aimed at it
/// arrive there and are counted.
const VICTIM: &str = "10.0.1.99";

fn reject_config(rules: &str, options: &str) -> String {
    format!(
        r#"
[[queue]]
num = 0
hook = "forward"
services = ["ids"]

[service.ids]
kind = "ids"
rules = ["{rules}"]
{options}
[service.ids.vars]
HOME_NET = "[10.0.2.0/24]"
"#
    )
}

/// An IPv4/UDP datagram for a raw socket with IP_HDRINCL (the kernel fills in the total
/// length and header checksum; UDP checksum 0, none).
fn udp_raw(src: &str, dst: &str, dport: u16, payload: &[u8]) -> Vec<u8> {
    let src: std::net::Ipv4Addr = src.parse().unwrap();
    let dst: std::net::Ipv4Addr = dst.parse().unwrap();
    let total = 28 + payload.len();
    let mut b = vec![0u8; total];
    b[0] = 0x45;
    b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    b[8] = 64;
    b[9] = 17;
    b[12..16].copy_from_slice(&src.octets());
    b[16..20].copy_from_slice(&dst.octets());
    b[20..22].copy_from_slice(&40000u16.to_be_bytes());
    b[22..24].copy_from_slice(&dport.to_be_bytes());
    b[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    b[28..].copy_from_slice(payload);
    b
}

/// Sends `n` copies of `packet` from `node` through a raw socket at `pps`; returns the
/// time from the first send to the last.
fn send_raw_paced(node: &relay_testbed::Node, packet: Vec<u8>, n: u64, pps: u64) -> Duration {
    node.run(move || {
        // SAFETY: plain socket/sendto/close calls on a buffer and an address that outlive them.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW);
            assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
            let mut sa: libc::sockaddr_in = std::mem::zeroed();
            sa.sin_family = libc::AF_INET as u16;
            sa.sin_addr.s_addr =
                u32::from_ne_bytes([packet[16], packet[17], packet[18], packet[19]]);
            let start = Instant::now();
            for i in 0..n {
                let due = start + Duration::from_secs_f64(i as f64 / pps as f64);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let r = libc::sendto(
                    fd,
                    packet.as_ptr() as *const libc::c_void,
                    packet.len(),
                    0,
                    &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                );
                assert!(r >= 0, "sendto: {}", std::io::Error::last_os_error());
            }
            let took = start.elapsed();
            libc::close(fd);
            took
        }
    })
}

/// Counts packets arriving on `node`'s `ifname` that match `what` (iptables match words)
/// in a rule named `tag`.
fn count_arrivals(node: &relay_testbed::Node, ifname: &str, what: &[&str], tag: &str) {
    let mut args = vec!["iptables", "-t", "raw", "-I", "PREROUTING", "-i", ifname];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-m", "comment", "--comment", tag]);
    let out = node.exec(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The packet count of the counting rule named `tag`.
fn read_count(node: &relay_testbed::Node, tag: &str) -> u64 {
    let out = node.exec(&[
        "iptables",
        "-t",
        "raw",
        "-L",
        "PREROUTING",
        "-v",
        "-n",
        "-x",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let needle = format!("/* {tag} */");
    text.lines()
        .find(|l| l.contains(&needle))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no rule with {needle}:\n{text}"))
}

/// One flood of `n` spoofed datagrams at `pps` against a relayd running `options`: every
/// datagram is rejected (none reaches dst), every answer relayd sends reaches the victim,
/// and the victim gets at most `burst + rate * duration` of them (the rest counted as
/// `reject_suppressed`). Returns the answers the victim got.
fn reflect(
    l: &relay_testbed::Line3,
    options: &str,
    n: u64,
    pps: u64,
    rate: u64,
    burst: u64,
) -> u64 {
    let dir = TempDir::new("ids-reflect");
    let rules = dir.file("reflect.rules", REFLECT_RULES);
    let mut r = Relayd::start(
        &l.relay,
        &reject_config(&rules.display().to_string(), options),
    );
    let (answers0, leaked0) = (read_count(&l.src, "answers"), read_count(&l.dst, "leaked"));
    let took = send_raw_paced(
        &l.src,
        udp_raw(VICTIM, "10.0.2.2", 7000, b"reflect"),
        n,
        pps,
    );
    assert!(
        wait_for(Duration::from_secs(5), || r.counters("ids")["rejected"]
            == n),
        "not all rejected: {:?}\n{}",
        r.counters("ids"),
        r.log()
    );
    let c = r.counters("ids");
    let answers = read_count(&l.src, "answers") - answers0;
    let bound = burst + (rate as f64 * (took.as_secs_f64() + 0.5)) as u64;
    eprintln!(
        "{options:?}: {n} in {took:?}, {answers} answers at the victim (bound {bound}): {c:?}"
    );
    assert_eq!(
        read_count(&l.dst, "leaked") - leaked0,
        0,
        "a rejected datagram got through"
    );
    // The first datagram's match decides the flow (the rule has no packet-specific test:
    // Suricata's flow action); the flow's later datagrams are rejected without inspection.
    assert_eq!(c["sid:1000010"] + c["flow_dropped"], n, "{c:?}");
    assert_eq!(c["rejected"], n, "{c:?}");
    assert_eq!(c["reject_errors"], 0, "{c:?}");
    assert_eq!(c["reject_sent"] + c["reject_suppressed"], n, "{c:?}");
    assert_eq!(
        answers, c["reject_sent"],
        "every answer sent reaches the victim"
    );
    assert!(
        answers <= bound,
        "{answers} answers to a spoofed flood, bound {bound}"
    );
    assert!(
        answers >= burst,
        "at least the burst is answered: {answers}"
    );
    assert!(r.stop(libc::SIGTERM), "{}", r.log());
    answers
}

#[test]
fn reject_answers_to_a_spoofed_flood_are_rate_limited() {
    let l = line3("ids-reflect");
    l.src_link.addr_a(&format!("{VICTIM}/24"));
    // Resolve the victim's neighbour entry first: no answer waits for ARP.
    assert!(l.relay.ping(VICTIM));
    count_arrivals(
        &l.src,
        &l.src_link.a_if,
        &[
            "-d",
            VICTIM,
            "-p",
            "icmp",
            "--icmp-type",
            "port-unreachable",
        ],
        "answers",
    );
    count_arrivals(
        &l.dst,
        &l.dst_link.b_if,
        &["-p", "udp", "--dport", "7000"],
        "leaked",
    );
    // The queue's bucket alone: 5,000 datagrams at 2,500/s through 300/s, burst 30.
    reflect(
        &l,
        "reject_rate = 300\nreject_burst = 30\nreject_dest_rate = 0\n",
        5000,
        2500,
        300,
        30,
    );
    // The defaults: one address gets 10/s, burst 10, of 2,500 datagrams in 1 s.
    reflect(&l, "", 2500, 2500, 10, 10);
}
