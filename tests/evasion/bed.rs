//! The evasion suite's testbed: src -- relay -- router -- dst with a control path that
//! bypasses the engine, the recording application on dst, the inline engine (relayd, or
//! Suricata 7 in NFQ mode), and the attacker run from the source namespace.

#![allow(unreachable_pub)]

use crate::support::{Relayd, TempDir, mac_of};
use relay_testbed::{Link, Node, Proc};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The port the TCP rule protects; the recording server listens on it.
pub const TCP_PORT: u16 = 7000;
/// The port the UDP rule protects.
pub const UDP_PORT: u16 = 7100;
/// The forbidden string the rules drop.
pub const FORBIDDEN: &[u8] = b"EVIL-PAYLOAD";

/// The rules both engines run: no `flow` keyword, so nothing loads conntrack.
pub const RULES: &str = "\
drop tcp any any -> $HOME_NET 7000 (msg:\"evasion: forbidden bytes over TCP\"; content:\"EVIL-PAYLOAD\"; sid:1; rev:1;)
drop udp any any -> $HOME_NET 7100 (msg:\"evasion: forbidden bytes over UDP\"; content:\"EVIL-PAYLOAD\"; sid:2; rev:1;)
";

/// The addresses the engine inspects (10.0.3.2) and the control path's (10.0.3.3), which
/// a rule ahead of the engine's lets through uninspected.
pub const DST4: &str = "10.0.3.2";
pub const DST6: &str = "fd00:3::2";
pub const CONTROL4: &str = "10.0.3.3";
pub const CONTROL6: &str = "fd00:3::3";

/// What the recording application read, per (local address, protocol, peer port).
type Log = Arc<Mutex<HashMap<(IpAddr, &'static str, u16), Vec<u8>>>>;

pub struct Bed {
    /// Owns the namespaces (torn down when the bed goes).
    _line: relay_testbed::Line4,
    pub src: Node,
    pub relay: Node,
    pub dst: Node,
    pub src_link: Link,
    pub dir: TempDir,
    log: Log,
}

impl Bed {
    pub fn new(name: &str) -> Bed {
        let l = relay_testbed::line4(name);
        let (src, relay, dst) = (l.src.clone(), l.comp.clone(), l.dst.clone());
        let src_link = l.links[0].clone();
        l.links[2].addr_b(&format!("{CONTROL4}/24"));
        l.links[2].addr_b(&format!("{CONTROL6}/64"));
        // The attacker writes frames to a packet socket; its own kernel must not answer
        // the host's segments for connections it knows nothing of with resets.
        for tool in ["iptables", "ip6tables"] {
            run(
                &src,
                &[
                    tool,
                    "-A",
                    "OUTPUT",
                    "-p",
                    "tcp",
                    "--tcp-flags",
                    "RST",
                    "RST",
                    "-j",
                    "DROP",
                ],
            );
        }
        // Counts fragments as the relay's netfilter first sees them (raw PREROUTING comes
        // after conntrack's defragmentation, if anything loaded it).
        run(&relay, &["iptables", "-t", "raw", "-A", "PREROUTING", "-f"]);
        run(
            &relay,
            &[
                "ip6tables",
                "-t",
                "raw",
                "-A",
                "PREROUTING",
                "-m",
                "frag",
                "--fragmore",
            ],
        );
        for a in [DST4, DST6, CONTROL4, CONTROL6] {
            assert!(src.ping(a), "src cannot reach {a}");
        }
        let bed = Bed {
            src,
            relay,
            dst,
            src_link,
            dir: TempDir::new(name),
            log: Arc::default(),
            _line: l,
        };
        bed.record_tcp(TCP_PORT);
        bed.record_udp(UDP_PORT);
        bed
    }

    /// The recording application: every byte each connection delivers, as it arrives.
    fn record_tcp(&self, port: u16) {
        let listener = self
            .dst
            .run(move || TcpListener::bind(("::", port)).unwrap());
        let log = self.log.clone();
        std::thread::spawn(move || {
            for c in listener.incoming() {
                let Ok(mut c) = c else { continue };
                let (Ok(peer), Ok(local)) = (c.peer_addr(), c.local_addr()) else {
                    continue;
                };
                let key = (local.ip().to_canonical(), "tcp", peer.port());
                let log = log.clone();
                std::thread::spawn(move || {
                    c.set_read_timeout(Some(Duration::from_secs(120))).ok();
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n @ 1..) = c.read(&mut buf) {
                        let mut l = log.lock().unwrap();
                        l.entry(key).or_default().extend_from_slice(&buf[..n]);
                    }
                });
            }
        });
    }

    /// Every datagram delivered on `port`, each followed by a newline; one socket per
    /// local address, which tells the control path from the inspected one.
    fn record_udp(&self, port: u16) {
        for local in [DST4, DST6, CONTROL4, CONTROL6] {
            let ip: IpAddr = local.parse().unwrap();
            let sock = self.dst.run(move || UdpSocket::bind((ip, port)).unwrap());
            let log = self.log.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                while let Ok((n, peer)) = sock.recv_from(&mut buf) {
                    let mut l = log.lock().unwrap();
                    let e = l.entry((ip, "udp", peer.port())).or_default();
                    e.extend_from_slice(&buf[..n]);
                    e.push(b'\n');
                }
            });
        }
    }

    /// What the application read from `(local, proto, port)`.
    pub fn read(&self, local: &str, proto: &str, port: u16) -> Vec<u8> {
        let local: IpAddr = local.parse().unwrap();
        let proto: &'static str = if proto == "udp" { "udp" } else { "tcp" };
        self.log
            .lock()
            .unwrap()
            .get(&(local, proto, port))
            .cloned()
            .unwrap_or_default()
    }

    /// Starts the inline engine (`RELAYD_EVASION_ENGINE`: relayd unless `suricata`), then
    /// the control path's bypass ahead of it. `ids_options` are extra `[service.ids]`
    /// lines for relayd.
    pub fn start_engine(&self, ids_options: &str) -> Engine {
        self.start_engine_with(RULES, ids_options, &[])
    }

    /// [`Bed::start_engine`] with other rules, and `--set` options for Suricata.
    pub fn start_engine_with(&self, rules: &str, ids_options: &str, suricata: &[&str]) -> Engine {
        let rules = self.dir.file("evasion.rules", rules);
        let engine = match std::env::var("RELAYD_EVASION_ENGINE").as_deref() {
            Ok("suricata") => Engine::suricata(self, &rules, suricata),
            _ => Engine::relayd(self, &rules, ids_options),
        };
        for (tool, a) in [("iptables", CONTROL4), ("ip6tables", CONTROL6)] {
            for dir in ["-d", "-s"] {
                run(
                    &self.relay,
                    &[
                        tool, "-t", "mangle", "-I", "FORWARD", "1", dir, a, "-j", "ACCEPT",
                    ],
                );
            }
        }
        engine
    }

    /// Runs `cases` twice at once, through the engine and on the control path, and
    /// returns each case's outcome. `frag_wait` is how long the timeout case waits.
    pub fn attack(&self, cases: &[String], seed: u64, frag_wait: f64) -> Vec<Outcome> {
        let runs = [
            (DST4, DST6, 40000u16, 60000u16),
            (CONTROL4, CONTROL6, 20000, 40000),
        ];
        let handles: Vec<_> = runs
            .iter()
            .enumerate()
            .map(|(i, &(d4, d6, lo, hi))| {
                let cfg = serde_json::json!({
                    "iface": self.src_link.a_if,
                    "src_mac": mac_text(mac_of(&self.src, &self.src_link.a_if)),
                    "gw_mac": mac_text(mac_of(&self.relay, &self.src_link.b_if)),
                    "src4": "10.0.1.1", "src6": "fd00:1::1",
                    "dst4": d4, "dst6": d6,
                    "tcp_port": TCP_PORT, "udp_port": UDP_PORT,
                    "frag_wait": frag_wait, "seed": seed * 2 + i as u64,
                    "ports": [lo, hi],
                });
                let mut cmd = self.src.cmd("/usr/bin/python3");
                cmd.arg("-B")
                    .arg(attack_script())
                    .arg(cfg.to_string())
                    .args(cases);
                std::thread::spawn(move || cmd.output().expect("running /usr/bin/python3"))
            })
            .collect();
        let outs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        crate::settle();
        let parse = |o: &std::process::Output| -> HashMap<String, serde_json::Value> {
            assert!(
                o.status.success(),
                "attack.py failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .map(|v| (v["case"].as_str().unwrap_or("").to_owned(), v))
                .collect()
        };
        let (inspected, control) = (parse(&outs[0]), parse(&outs[1]));
        cases
            .iter()
            .map(|c| {
                let get = |m: &HashMap<String, serde_json::Value>, local4, local6| {
                    let v = m.get(c).cloned().unwrap_or_default();
                    let local = if v["family"] == 6 { local6 } else { local4 };
                    let got = match (v["proto"].as_str(), v["sport"].as_u64()) {
                        (Some(p), Some(port)) => self.read(local, p, port as u16),
                        _ => Vec::new(),
                    };
                    (v, got)
                };
                let (v, got) = get(&inspected, DST4, DST6);
                let (cv, cgot) = get(&control, CONTROL4, CONTROL6);
                Outcome::new(c, v, got, cv, cgot)
            })
            .collect()
    }

    /// Fragments the relay's netfilter has seen unreassembled so far.
    pub fn fragments_at_relay(&self) -> u64 {
        ["iptables", "ip6tables"]
            .iter()
            .map(|tool| {
                let out =
                    self.relay
                        .exec(&[tool, "-t", "raw", "-L", "PREROUTING", "-v", "-n", "-x"]);
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .skip(2)
                    .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
                    .sum::<u64>()
            })
            .sum()
    }

    /// `bytes` of honest data from a kernel socket in src to `addr`, in writes of random
    /// size with Nagle off; returns (sent, what the application read).
    pub fn honest_tcp(&self, addr: SocketAddr, bytes: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let data: Vec<u8> = (0..bytes).map(|_| next() as u8).collect();
        let sizes: Vec<usize> = (0..bytes).map(|_| 1 + (next() % 3000) as usize).collect();
        let send = data.clone();
        // A transfer the engine stops must fail the check, not hang the test: every
        // socket operation has a timeout, and what arrived is compared either way.
        let port = self.src.run(move || -> Option<u16> {
            let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
            let port = c.local_addr().ok()?.port();
            c.set_nodelay(true).ok()?;
            c.set_write_timeout(Some(Duration::from_secs(3))).ok()?;
            c.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
            let (mut at, mut i) = (0, 0);
            while at < send.len() {
                let n = sizes[i].min(send.len() - at);
                if c.write_all(&send[at..at + n]).is_err() {
                    return Some(port);
                }
                at += n;
                i += 1;
                if i % 64 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let _ = c.shutdown(std::net::Shutdown::Write);
            let mut rest = Vec::new();
            let _ = c.read_to_end(&mut rest);
            Some(port)
        });
        let Some(port) = port else {
            return (data, Vec::new());
        };
        let local = addr.ip().to_string();
        // Wait while bytes keep arriving; a transfer stalled for 3 s is over.
        let (mut seen, mut since) = (0, Instant::now());
        loop {
            let n = self.read(&local, "tcp", port).len();
            if n >= bytes || since.elapsed() > Duration::from_secs(3) {
                break;
            }
            if n > seen {
                (seen, since) = (n, Instant::now());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        (data, self.read(&local, "tcp", port))
    }

    /// `n` datagrams of `size` bytes (fragmented by the source's kernel) to `addr`;
    /// returns (what was sent, what the application read), newline-separated.
    pub fn honest_udp(&self, addr: SocketAddr, n: usize, size: usize) -> (Vec<u8>, Vec<u8>) {
        let (port, sent) = self.src.run(move || {
            let bind = if addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            };
            let s = UdpSocket::bind(bind).unwrap();
            let mut sent = Vec::new();
            for i in 0..n {
                let d: Vec<u8> = (0..size).map(|k| b'a' + ((i * 7 + k) % 26) as u8).collect();
                s.send_to(&d, addr).unwrap();
                sent.extend_from_slice(&d);
                sent.push(b'\n');
                std::thread::sleep(Duration::from_millis(5));
            }
            (s.local_addr().unwrap().port(), sent)
        });
        crate::settle();
        (sent, self.read(&addr.ip().to_string(), "udp", port))
    }
}

fn attack_script() -> String {
    format!(
        "{}/../../tests/evasion/attack.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub fn run(node: &Node, args: &[&str]) {
    let out = node.exec(args);
    assert!(
        out.status.success(),
        "{args:?} in {}: {}",
        node.name(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One case's result on both paths.
pub struct Outcome {
    pub case: String,
    /// Why attack.py could not run the case, if it could not.
    error: Option<String>,
    /// The application read the forbidden string through the engine.
    evil: bool,
    /// The application read the honest bytes the case sent before the attack (or the
    /// whole honest datagram of an honest case).
    honest: bool,
    /// What Linux does without an engine in the way (attack.py's `control`), and whether
    /// the control path showed it.
    control_expect: String,
    control_ok: bool,
    pub secs: f64,
}

impl Outcome {
    fn new(
        case: &str,
        v: serde_json::Value,
        got: Vec<u8>,
        cv: serde_json::Value,
        cgot: Vec<u8>,
    ) -> Outcome {
        let has = |b: &[u8]| b.windows(FORBIDDEN.len()).any(|w| w == FORBIDDEN);
        let error = [&v, &cv]
            .iter()
            .find_map(|v| v["error"].as_str().map(String::from))
            .or_else(|| v.get("case").is_none().then(|| "no result".to_owned()));
        let prefix = v["prefix"].as_str().unwrap_or("").as_bytes();
        let exact = v["exact"].as_str().map(|s| s.as_bytes().to_vec());
        let digest = v["sha256"].as_str().map(|want| {
            use sha2::Digest;
            let have: String = sha2::Sha256::digest(&got)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            have == want && v["len"].as_u64() == Some(got.len() as u64)
        });
        let honest = got.starts_with(prefix)
            && exact.is_none_or(|e| got.windows(e.len()).any(|w| w == e.as_slice()))
            && digest.unwrap_or(true);
        let control_expect = cv["control"].as_str().unwrap_or("?").to_owned();
        let control_ok = has(&cgot) == (control_expect == "evil");
        Outcome {
            case: case.to_owned(),
            error,
            evil: has(&got),
            honest,
            control_expect,
            control_ok,
            secs: v["secs"].as_f64().unwrap_or(0.0),
        }
    }

    pub fn pass(&self) -> bool {
        self.error.is_none() && !self.evil && self.honest && self.control_ok
    }

    pub fn why(&self) -> String {
        if let Some(e) = &self.error {
            return format!("could not run: {e}");
        }
        let mut w = Vec::new();
        if self.evil {
            w.push("the application read the forbidden bytes".to_owned());
        }
        if !self.honest {
            w.push("the honest bytes did not arrive".to_owned());
        }
        if !self.control_ok {
            w.push(format!(
                "control path: expected {}, Linux did otherwise (the case no longer tests what it says)",
                self.control_expect
            ));
        }
        w.join("; ")
    }
}

/// The outcome table, one line per case.
pub fn report(outcomes: &[Outcome]) -> String {
    let mut s = String::from("case                                  result  control  secs  why\n");
    for o in outcomes {
        s.push_str(&format!(
            "{:<37} {:<7} {:<8} {:>5.2}  {}\n",
            o.case,
            if o.pass() { "pass" } else { "FAIL" },
            o.control_expect,
            o.secs,
            if o.pass() { String::new() } else { o.why() }
        ));
    }
    s
}

/// Appends `case engine pass|FAIL` lines to `RELAYD_EVASION_RESULTS` if set (the
/// comparison table is built from two runs).
pub fn write_results(engine: &str, outcomes: &[Outcome]) {
    let Ok(path) = std::env::var("RELAYD_EVASION_RESULTS") else {
        return;
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for o in outcomes {
        let r = if o.pass() {
            "pass".to_owned()
        } else {
            format!("FAIL ({})", o.why())
        };
        writeln!(f, "{}\t{engine}\t{r}", o.case).unwrap();
    }
}

/// Starts relayd in the relay namespace on `body(options)`.
pub fn start_relayd(bed: &Bed, body: impl Fn(&str) -> String, options: &str) -> Relayd {
    Relayd::start(&bed.relay, &body(options))
}

/// The inline engine in the relay namespace.
pub enum Engine {
    Relayd(Relayd),
    Suricata(Proc, #[allow(dead_code)] TempDir),
}

impl Engine {
    fn relayd(bed: &Bed, rules: &std::path::Path, ids_options: &str) -> Engine {
        let body = |opts: &str| {
            format!(
                r#"
[[queue]]
num = 0
hook = "forward"
family = "both"
services = ["ids"]

[service.ids]
kind = "ids"
rules = ["{}"]
eve_log = "{}"
{opts}
[service.ids.vars]
HOME_NET = "[10.0.3.0/24,fd00:3::/64]"
EXTERNAL_NET = "any"
"#,
                rules.display(),
                bed.dir.0.join("eve.json").display()
            )
        };
        Engine::Relayd(start_relayd(bed, body, ids_options))
    }

    fn suricata(bed: &Bed, rules: &std::path::Path, sets: &[&str]) -> Engine {
        let dir = TempDir::new("suricata");
        for tool in ["iptables", "ip6tables"] {
            run(
                &bed.relay,
                &[
                    tool,
                    "-t",
                    "mangle",
                    "-A",
                    "FORWARD",
                    "-j",
                    "NFQUEUE",
                    "--queue-num",
                    "0",
                ],
            );
        }
        let mut cmd = bed.relay.cmd("suricata");
        cmd.args(["-c", "/etc/suricata/suricata.yaml", "-q", "0", "-S"])
            .arg(rules)
            .arg("-l")
            .arg(&dir.0)
            .args(["-k", "none", "--runmode", "workers"])
            .args(["--set", "unix-command.enabled=no"])
            .args([
                "--set",
                "vars.address-groups.HOME_NET=[10.0.3.0/24,fd00:3::/64]",
            ])
            .args(["--set", "vars.address-groups.EXTERNAL_NET=any"])
            .args(["--set", "host-os-policy.windows.0=192.0.2.0/24"])
            .args(["--set", "host-os-policy.linux.0=0.0.0.0/0"])
            .args(["--set", "host-os-policy.linux.1=::/0"])
            .args(["--set", "defrag.timeout=2"]);
        for s in sets {
            cmd.args(["--set", s]);
        }
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let p = bed.relay.spawn(cmd);
        let log = dir.0.join("suricata.log");
        let end = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("Engine started")
        {
            assert!(
                Instant::now() < end,
                "Suricata did not start: {}\n{}",
                p.stderr_text(),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Engine::Suricata(p, dir)
    }

    pub fn name(&self) -> String {
        match self {
            Engine::Relayd(_) => "relayd".into(),
            Engine::Suricata(..) => "suricata".into(),
        }
    }

    /// relayd's counters of its `ids` service (none for Suricata).
    pub fn counters(&self) -> std::collections::BTreeMap<String, u64> {
        match self {
            Engine::Relayd(r) => r.counters("ids"),
            Engine::Suricata(..) => Default::default(),
        }
    }

    /// The pid of the engine's process (for its memory).
    pub fn pid(&self) -> u32 {
        match self {
            Engine::Relayd(r) => r.proc.pid(),
            Engine::Suricata(p, _) => p.pid(),
        }
    }

    /// Panics with the engine's log if it is no longer running.
    pub fn check_alive(&self, bed: &Bed) {
        let _ = bed;
        let alive = std::fs::metadata(format!("/proc/{}", self.pid())).is_ok();
        if let Engine::Relayd(r) = self {
            assert!(alive, "relayd died:\n{}", r.log());
        }
        assert!(alive, "the engine died");
    }
}
