//! The IDS/IPS service on the real kernel: src -- relay (ids) -- dst, with an HTTP server
//! on dst. Forbidden requests are dropped, alerts are written as EVE JSON, a `ratelimit`
//! rule lets only its rate through, and `reject` resets the connection. Needs root.

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
