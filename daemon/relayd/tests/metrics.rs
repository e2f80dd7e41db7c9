//! relayd's Prometheus endpoint (`daemon.metrics`) on a real `relayd run`:
//!
//! - a real Prometheus server (Debian's `prometheus`, `make deps`) scrapes relayd in the
//!   same namespace after traffic went through a queue and a reload was refused, and its
//!   HTTP API (`/api/v1/query`) returns the series with the values `relayd status --json`
//!   reports; `relayd status --format prometheus` prints the same text as `/metrics`;
//! - the endpoint answers `/metrics` only (404 elsewhere, 405 for other methods), bounds
//!   request heads, keeps scraping while slow clients hold connections, and frees the
//!   slots of clients that never finish their request;
//! - a queue thread stopped for real (ptrace) shows as `relayd_queue_thread_up 0` while
//!   scrapes go on answering, and as 1 again once it runs;
//! - node_exporter's textfile collector reads `relayd status --format prometheus`;
//! - the alert rules pass `promtool check rules` and use only series relayd exports;
//! - a non-loopback `daemon.metrics` without `metrics_public = true` is refused at its line.
//!
//! Needs root (namespaces, iptables, NFQUEUE).

#[path = "../../../tests/support/mod.rs"]
mod support;

use relay_testbed::{Node, Testbed};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use support::*;

/// Where relayd serves /metrics inside the test namespace.
const METRICS: &str = "127.0.0.1:19477";
/// Where Prometheus listens inside the test namespace.
const PROMETHEUS_WEB: &str = "127.0.0.1:19090";
const PROMETHEUS: &str = "/usr/bin/prometheus";

/// The configuration body: `metrics` belongs to the `[daemon]` table the support code
/// opens; one queue on the output hook for UDP to port 9.
fn body() -> String {
    format!(
        r#"metrics = "{METRICS}"

[[queue]]
num = 0
hook = "output"
match = "-p udp --dport 9"
services = ["accept"]
"#
    )
}

/// Sends `req` to `addr` from inside `node` and returns what came back before the
/// server closed (or `timeout` passed).
fn http(node: &Node, addr: &str, req: Vec<u8>, timeout: Duration) -> std::io::Result<String> {
    let addr: SocketAddr = addr.parse().unwrap();
    node.run(move || {
        let mut s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        s.write_all(&req)?;
        let mut out = Vec::new();
        s.read_to_end(&mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    })
}

/// `GET path` on `addr`: (status code, body).
fn get(node: &Node, addr: &str, path: &str) -> (u16, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let resp = http(node, addr, req.into_bytes(), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    parse(&resp)
}

/// (status code, body) of an HTTP/1.1 response without chunked encoding.
fn parse(resp: &str) -> (u16, String) {
    let code = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {resp:?}"));
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// Sends `n` UDP datagrams to 127.0.0.1:9 from inside `node` (through queue 0).
fn send_udp(node: &Node, n: usize) {
    node.run(move || {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..n {
            s.send_to(format!("packet {i}").as_bytes(), "127.0.0.1:9")
                .unwrap();
        }
    });
}

/// A Prometheus instant query through its HTTP API: (labels, value) of each series.
fn query(node: &Node, q: &str) -> Vec<(serde_json::Value, f64)> {
    let enc: String = q
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    let (code, body) = get(node, PROMETHEUS_WEB, &format!("/api/v1/query?query={enc}"));
    assert_eq!(code, 200, "{q}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            let val = r["value"][1].as_str().unwrap_or("NaN").parse().unwrap();
            (r["metric"].clone(), val)
        })
        .collect()
}

/// The single value of `q` in Prometheus, or None.
fn one(node: &Node, q: &str) -> Option<f64> {
    let r = query(node, q);
    (r.len() == 1).then(|| r[0].1)
}

/// True, after saying so loudly, if the test's binary `bin` (from Debian's `package`,
/// which `make deps` installs) is missing: the test is then skipped.
fn missing(bin: &str, package: &str) -> bool {
    let gone = !std::path::Path::new(bin).exists();
    if gone {
        eprintln!(
            "\n\n*** SKIPPED: {bin} is missing; `make deps` installs Debian's {package} ***\n\n"
        );
    }
    gone
}

#[test]
fn prometheus_scrapes_the_values_status_reports() {
    if missing(PROMETHEUS, "prometheus") {
        return;
    }
    let tb = Testbed::new("mx-prom");
    let n = tb.node("r");
    // An IDS ahead of `accept`: its own counters and per-rule hits become series too.
    let rules_dir = TempDir::new("mx-rules");
    let rules = rules_dir.file(
        "t.rules",
        "alert udp any any -> any 9 (msg:\"metrics test\"; content:\"packet 1\"; sid:1000001; rev:1;)\n\
         alert udp any any -> any 9 (msg:\"never\"; content:\"nothing like it\"; sid:1000002; rev:1;)\n",
    );
    let cfg = body().replace(
        "services = [\"accept\"]\n",
        &format!(
            "services = [\"ids\", \"accept\"]\n\n[service.ids]\nkind = \"ids\"\nrules = [\"{}\"]\n",
            rules.display()
        ),
    );
    let r = Relayd::start(&n, &cfg);
    send_udp(&n, 57);
    assert!(
        wait_for(Duration::from_secs(5), || r.status().queues[0].packets
            == 57),
        "{:?}",
        r.status()
    );
    // Refused reloads: a file with errors, and a new metrics address (bound only at
    // start): relayd_reload_failures_total 2, relayd_reloads_total 0.
    let failures = |n: u64| wait_for(Duration::from_secs(5), || r.status().reload_failures == n);
    r.rewrite("this is not a relayd configuration");
    r.proc.signal(libc::SIGHUP).unwrap();
    assert!(failures(1), "{}", r.log());
    r.rewrite(&cfg.replace(METRICS, "127.0.0.1:19478"));
    r.proc.signal(libc::SIGHUP).unwrap();
    assert!(failures(2), "{}", r.log());
    assert!(
        r.log().contains(
            "daemon.metrics, daemon.user and daemon.socket_group can only change with a restart"
        ),
        "{}",
        r.log()
    );
    let st = r.status();
    assert_eq!(st.reloads, 0);

    // The endpoint and `relayd status --format prometheus` print the same text.
    let (code, text) = get(&n, METRICS, "/metrics");
    assert_eq!(code, 200, "{text}");
    let out = n
        .cmd(RELAYD)
        .args(["status", "--format", "prometheus", "--socket"])
        .arg(&r.socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
    assert!(text.ends_with("# EOF\n"), "{text}");

    // Prometheus in the same namespace, scraping every second.
    let dir = TempDir::new("prom");
    let cfg = dir.file(
        "prometheus.yml",
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: relayd\n    static_configs:\n      - targets: ['{METRICS}']\n"
        ),
    );
    let mut cmd = n.cmd(PROMETHEUS);
    cmd.arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.0.join("data").display()
        ))
        .arg(format!("--web.listen-address={PROMETHEUS_WEB}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let prom = n.spawn(cmd);
    let t0 = Instant::now();
    let scraped = wait_for(Duration::from_secs(20), || {
        http(
            &n,
            PROMETHEUS_WEB,
            b"GET /-/ready HTTP/1.0\r\n\r\n".to_vec(),
            Duration::from_secs(1),
        )
        .is_ok_and(|r| parse(&r).0 == 200)
            && one(&n, "relayd_queue_packets_total").is_some()
    });
    assert!(
        scraped,
        "no scrape within 20 s\ntargets: {:?}\nprometheus:\n{}\nrelayd:\n{}",
        get(&n, PROMETHEUS_WEB, "/api/v1/targets"),
        prom.stderr_text(),
        r.log()
    );
    eprintln!("first scrape after {:?}", t0.elapsed());
    let up = query(&n, "up{job=\"relayd\"}");
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0].1, 1.0, "{up:?}");

    // Every value as `relayd status --json` reports it (nothing moves any more).
    let json = status_cli(&n, &r.socket);
    let q0 = &json["queues"][0];
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v}")) as f64;
    let sel = "{queue=\"0\",hook=\"output\",job=\"relayd\"}";
    for (series, field) in [
        ("packets", "packets"),
        ("accepted", "accepted"),
        ("dropped", "dropped"),
        ("modified", "modified"),
        ("malformed", "malformed"),
        ("errors", "errors"),
        ("enobufs", "enobufs"),
    ] {
        assert_eq!(
            one(&n, &format!("relayd_queue_{series}_total{sel}")),
            Some(u(&q0[field])),
            "relayd_queue_{series}_total vs status {field}"
        );
    }
    assert_eq!(u(&q0["packets"]), 57.0);
    let k = &q0["kernel"];
    assert!(k.is_object(), "{json}");
    assert_eq!(
        one(&n, &format!("relayd_queue_kernel_queue_dropped_total{sel}")),
        Some(u(&k["queue_dropped"]))
    );
    assert_eq!(
        one(&n, &format!("relayd_queue_kernel_user_dropped_total{sel}")),
        Some(u(&k["user_dropped"]))
    );
    assert_eq!(
        one(&n, &format!("relayd_queue_kernel_waiting_packets{sel}")),
        Some(u(&k["waiting"]))
    );
    assert_eq!(one(&n, &format!("relayd_queue_thread_up{sel}")), Some(1.0));
    let services = json["services"].as_array().unwrap();
    assert_eq!(services.len(), 2, "{json}");
    for svc in services {
        let (name, kind) = (&svc["name"], &svc["kind"]);
        assert_eq!(
            one(
                &n,
                &format!("relayd_service_packets_total{{service={name},kind={kind}}}")
            ),
            Some(u(&svc["packets"])),
            "{svc}"
        );
        assert_eq!(u(&svc["packets"]), 57.0, "{svc}");
        let gauges = svc["gauges"].as_array().cloned().unwrap_or_default();
        for (counter, v) in svc["counters"].as_object().unwrap() {
            let gauge = gauges.iter().any(|g| g.as_str() == Some(counter.as_str()));
            let q = match counter.strip_prefix("sid:") {
                Some(sid) => format!("relayd_ids_rule_hits_total{{service={name},sid=\"{sid}\"}}"),
                // A current value (the IDS's `app_memuse`, say) is a gauge.
                None if gauge => format!(
                    "relayd_service_gauge{{service={name},kind={kind},counter=\"{counter}\"}}"
                ),
                None => format!(
                    "relayd_service_counter_total{{service={name},kind={kind},counter=\"{counter}\"}}"
                ),
            };
            // Rules that never matched have no series.
            let want = (!(counter.starts_with("sid:") && u(v) == 0.0)).then(|| u(v));
            assert_eq!(one(&n, &q), want, "{q}");
        }
    }
    // "packet 1", "packet 10" to "packet 19": 11 of the 57 match the rule.
    assert_eq!(
        one(&n, "relayd_ids_rule_hits_total{sid=\"1000001\"}"),
        Some(11.0)
    );
    let ids = services.iter().find(|s| s["kind"] == "ids").unwrap();
    assert_eq!(ids["counters"]["sid:1000002"], 0, "{json}");
    assert_eq!(one(&n, "relayd_ids_rule_hits_total{sid=\"1000002\"}"), None);
    assert_eq!(one(&n, "relayd_reloads_total"), Some(u(&json["reloads"])));
    assert_eq!(
        one(&n, "relayd_reload_failures_total"),
        Some(u(&json["reload_failures"]))
    );
    assert_eq!(
        one(
            &n,
            &format!("relayd_build_info{{version={}}}", json["version"])
        ),
        Some(1.0)
    );
    let start = one(&n, "relayd_start_time_seconds").unwrap();
    assert!(
        start == json["start_time_ms"].as_u64().unwrap() as f64 / 1000.0,
        "{start} vs {}",
        json["start_time_ms"]
    );
    // HELP/TYPE reached Prometheus: it knows the families' types.
    let (code, meta) = get(
        &n,
        PROMETHEUS_WEB,
        "/api/v1/metadata?metric=relayd_queue_packets",
    );
    assert_eq!(code, 200, "{meta}");
    assert!(meta.contains("\"type\":\"counter\""), "{meta}");
    drop(prom);
}

#[test]
fn the_endpoint_serves_only_metrics_and_survives_hostile_clients() {
    let tb = Testbed::new("mx-http");
    let n = tb.node("r");
    let r = Relayd::start(&n, &body());
    let (code, text) = get(&n, METRICS, "/metrics");
    assert_eq!(code, 200);
    assert!(text.contains("relayd_queue_packets_total{"), "{text}");
    let resp = http(
        &n,
        METRICS,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
        Duration::from_secs(5),
    )
    .unwrap();
    assert!(
        resp.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{resp}"
    );
    for path in ["/", "/metrics/", "/debug/pprof", "/../metrics", "/metricsx"] {
        assert_eq!(get(&n, METRICS, path).0, 404, "{path}");
    }
    let post = http(
        &n,
        METRICS,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            .to_vec(),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(parse(&post).0, 405);

    // A request head far beyond the limit: refused and closed, not buffered.
    let huge = http(
        &n,
        METRICS,
        [
            b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec(),
            vec![b'a'; 256 << 10],
            b"\r\n\r\n".to_vec(),
        ]
        .concat(),
        Duration::from_secs(5),
    );
    if let Ok(h) = &huge {
        assert!(!h.starts_with("HTTP/1.1 200"), "{h}");
    }

    // Slowloris: clients that never finish their request head do not block scrapes.
    let addr: SocketAddr = METRICS.parse().unwrap();
    let slow: Vec<TcpStream> = n.run(move || {
        (0..8)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    .unwrap();
                s
            })
            .collect()
    });
    let t = Instant::now();
    assert_eq!(get(&n, METRICS, "/metrics").0, 200);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // Beyond the connection cap (16) the extra connections are closed at once, and the
    // slow ones are dropped after the 5 s header timeout, freeing their slots.
    let more: Vec<TcpStream> = n.run(move || {
        (0..12)
            .filter_map(|_| {
                let mut s = TcpStream::connect(addr).ok()?;
                s.write_all(b"GET /metrics HTTP/1.1\r\n").ok()?;
                Some(s)
            })
            .collect()
    });
    let t = Instant::now();
    let back = wait_for(Duration::from_secs(10), || {
        http(
            &n,
            METRICS,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            Duration::from_secs(2),
        )
        .is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    assert!(back, "scrapes did not come back after the slow clients");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    // The slow clients were closed by relayd (EOF or reset), not kept for ever.
    for mut s in slow.into_iter().chain(more) {
        s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
        let mut buf = Vec::new();
        let res = s.read_to_end(&mut buf);
        assert!(
            res.is_ok()
                || res
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "{res:?}"
        );
    }
    // relayd still serves and still runs.
    assert_eq!(get(&n, METRICS, "/metrics").0, 200);
    let mut r = r;
    assert!(r.alive(), "{}", r.log());
}

#[test]
fn the_alert_rules_pass_promtool_and_use_series_relayd_exports() {
    let rules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/prometheus/relayd-alerts.yml"
    );
    let text = std::fs::read_to_string(rules).unwrap();
    // Every relayd series the rules use exists in relayd's output.
    let names: std::collections::BTreeSet<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("relayd_"))
        .collect();
    assert!(names.len() >= 4, "{names:?}");
    let tb = Testbed::new("mx-rules");
    let n = tb.node("r");
    let _r = Relayd::start(&n, &body());
    let (_, exported) = get(&n, METRICS, "/metrics");
    for name in &names {
        assert!(
            exported.contains(&format!("\n{name}{{")) || exported.contains(&format!("\n{name} ")),
            "{name} is not exported:\n{exported}"
        );
    }
    match std::process::Command::new("promtool")
        .args(["check", "rules", rules])
        .output()
    {
        Ok(out) => assert!(out.status.success(), "{out:?}"),
        Err(e) => eprintln!(
            "\n\n*** SKIPPED promtool check: {e}; `make deps` installs Debian's prometheus ***\n\n"
        ),
    }
}

/// node_exporter's binary as Debian installs it (`prometheus-node-exporter`).
const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";

#[test]
fn node_exporter_textfile_collector_reads_status_format_prometheus() {
    if missing(NODE_EXPORTER, "prometheus-node-exporter") {
        return;
    }
    let tb = Testbed::new("mx-textfile");
    let n = tb.node("r");
    let r = Relayd::start(&n, &body());
    send_udp(&n, 23);
    assert!(wait_for(Duration::from_secs(5), || r.status().queues[0]
        .packets
        == 23));
    let out = n
        .cmd(RELAYD)
        .args(["status", "--format", "prometheus", "--socket"])
        .arg(&r.socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let dir = TempDir::new("textfile");
    dir.file("relayd.prom", &String::from_utf8_lossy(&out.stdout));
    let mut cmd = n.cmd(NODE_EXPORTER);
    cmd.arg(format!(
        "--collector.textfile.directory={}",
        dir.0.display()
    ))
    .args([
        "--collector.disable-defaults",
        "--collector.textfile",
        "--web.listen-address=127.0.0.1:19100",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let ne = n.spawn(cmd);
    let mut text = String::new();
    let up = wait_for(Duration::from_secs(10), || {
        text = http(
            &n,
            "127.0.0.1:19100",
            b"GET /metrics HTTP/1.0\r\n\r\n".to_vec(),
            Duration::from_secs(1),
        )
        .unwrap_or_default();
        text.contains("node_textfile_scrape_error")
    });
    assert!(up, "node_exporter did not answer:\n{}", ne.stderr_text());
    for line in [
        "node_textfile_scrape_error 0",
        "relayd_queue_packets_total{hook=\"output\",queue=\"0\"} 23",
        "relayd_service_packets_total{kind=\"accept\",service=\"accept\"} 23",
        "relayd_queue_thread_up{hook=\"output\",queue=\"0\"} 1",
        "relayd_reload_failures_total 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?}:\n{text}\n{}",
            ne.stderr_text()
        );
    }
}

#[test]
fn a_stuck_queue_thread_shows_as_down_and_scrapes_still_answer() {
    let tb = Testbed::new("mx-stuck");
    let n = tb.node("r");
    let r = Relayd::start(&n, &body());
    let line = "relayd_queue_thread_up{queue=\"0\",hook=\"output\"}";
    let value = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(line))
            .map(|v| v.trim().to_string())
    };
    assert_eq!(
        value(&get(&n, METRICS, "/metrics").1).as_deref(),
        Some("1.0")
    );
    let tid = thread_named(r.proc.pid(), "relayd-q0");
    let frozen = Freeze::thread(tid);
    // Stuck after 5 s without a loop iteration (the daemon's default limit).
    let t = Instant::now();
    let mut last = String::new();
    let down = wait_for(Duration::from_secs(10), || {
        let (code, text) = get(&n, METRICS, "/metrics");
        last = text;
        code == 200 && value(&last).as_deref() == Some("0.0")
    });
    assert!(down, "still up after {:?}:\n{last}", t.elapsed());
    assert!(t.elapsed() >= Duration::from_secs(4), "{:?}", t.elapsed());
    assert_eq!(r.status().unhealthy_queues, vec![0]);
    drop(frozen);
    assert!(
        wait_for(Duration::from_secs(5), || value(
            &get(&n, METRICS, "/metrics").1
        )
        .as_deref()
            == Some("1.0")),
        "not up again after the thread resumed"
    );
}

#[test]
fn a_public_metrics_address_needs_metrics_public() {
    let dir = TempDir::new("mx-check");
    let q = "[[queue]]\nnum = 0\nhook = \"forward\"\nservices = [\"accept\"]\n";
    let bad = dir.file(
        "bad.toml",
        &format!("[daemon]\nsocket = \"/tmp/x.sock\"\nmetrics = \"0.0.0.0:9477\"\n{q}"),
    );
    let out = std::process::Command::new(RELAYD)
        .args(["check", "-c"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{}:3:", bad.display())) && err.contains("daemon.metrics"),
        "{err}"
    );
    assert!(err.contains("metrics_public"), "{err}");
    let ok = dir.file(
        "ok.toml",
        &format!(
            "[daemon]\nsocket = \"/tmp/x.sock\"\nmetrics = \"0.0.0.0:9477\"\nmetrics_public = true\n{q}"
        ),
    );
    let out = std::process::Command::new(RELAYD)
        .args(["check", "-c"])
        .arg(&ok)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}
