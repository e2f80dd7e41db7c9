//! Flow offload (issue 27), per core: one TCP flow and a mixed workload through relayd `ids`
//! with and without `offload`, and through Suricata 7 in NFQ IPS mode out of the box and
//! with its flow bypass, each as a ratio to the kernel's forwarding in the same run.
//!
//! Every path runs on the bench's testbed as the rest of the bench: relay work on the relay
//! core (threaded NAPI or RPS there, relayd's queue thread or Suricata's worker thread
//! pinned there at the queues' nice value), the generator and the sinks on the traffic
//! core, the relay core's busy time from /proc/stat. relayd and Suricata load the same
//! rules ([`rules`]): by default 30 public-style rules (benches/offload-ids.rules), or with
//! OFFLOAD_RULES=sizing the sizing rules, which keep every flow inline in relayd.
//!
//! The mixed workload ([`FLOW_SIZES`], [`TLS_SHARE`]): HTTP/1.1 downloads from dst to src,
//! one per connection, plain or over TLS (benches/passthrough/flows.py: Python's ssl, which
//! is OpenSSL), at Poisson arrivals of MIX_RATE flows/s (default [`MIX_RATE`]). Its figure
//! is the relay core's CPU per delivered byte: busy time over the window divided by the
//! bytes src and dst received (frames of both directions, headers included, the same
//! count for every path), and its inverse, bytes per core.
//!
//! Knobs: OFFLOAD=1 runs only this section (`make bench-offload`); OFFLOAD_ONLY=TEXT (the
//! kernel and the paths whose name contains TEXT); MIX_RATE (flows/s);
//! IDS_OFFLOAD_KEYS (the `[service.ids]` keys of the offload path, default
//! [`IDS_OFFLOAD_KEYS`]). Suricata runs if /usr/bin/suricata is installed and not in SMOKE
//! runs (its start takes seconds); relayd's offload path runs if `relayd check` accepts
//! its configuration (the report says why not otherwise).

use super::*;

/// Flow sizes of the mixed workload: the flow-size distribution of Facebook's Hadoop
/// cluster (Roy et al., "Inside the Social Network's (Datacenter) Network", SIGCOMM 2015),
/// as tabulated for HPCC's traffic generator (github.com/alibaba-edu/
/// High-Precision-Congestion-Control, traffic_gen/FbHdp_distribution.txt): points of its
/// CDF, (bytes, percent of flows). Heavy-tailed: half the flows are under 700 bytes, 90 %
/// under 120 kB, and the 10 % above carry about 90 % of the bytes; the largest, up to
/// 10 MB, go past the IDS's stream depth (1 MiB, relayd's and Suricata's default).
const FLOW_SIZES: &[(f64, f64)] = &[
    (0.0, 0.0),
    (100.0, 1.0),
    (200.0, 2.0),
    (300.0, 5.0),
    (350.0, 15.0),
    (400.0, 20.0),
    (500.0, 30.0),
    (600.0, 40.0),
    (700.0, 50.0),
    (1_000.0, 60.0),
    (2_000.0, 67.0),
    (7_000.0, 70.0),
    (30_000.0, 72.0),
    (50_000.0, 82.0),
    (80_000.0, 87.0),
    (120_000.0, 90.0),
    (300_000.0, 95.0),
    (1_000_000.0, 97.5),
    (2_000_000.0, 99.0),
    (10_000_000.0, 100.0),
];

/// Flows of one schedule: the distribution's quantiles at (i + 0.5) / 200, shuffled; the
/// client cycles through it.
const SCHEDULE: usize = 200;

/// Every other flow by size rank is HTTPS (TLS 1.3): half the flows and about half the
/// bytes, the printed schedule says exactly how much.
const TLS_SHARE: &str = "every other flow by size (50 % of flows)";

/// Default offered flows per second of the mixed workload (about 400 Mbit/s of responses).
const MIX_RATE: f64 = 400.0;

/// The `[service.ids]` keys of the offload path (IDS_OFFLOAD_KEYS overrides): the IDS votes
/// (`offload`, its default; a flow past `stream_depth` both ways) and offloads TLS after
/// the handshake (`tls_encryption_handling`, Suricata's `encryption-handling: bypass`).
const IDS_OFFLOAD_KEYS: &str = "offload = true\ntls_encryption_handling = \"bypass\"\n";

/// The rule files of [`Path::Ids`] and [`Path::Suricata`] (written to the run directory):
/// OFFLOAD_RULES=web (the default) benches/offload-ids.rules, 30 public-style rules of
/// which none reads every packet of every flow; OFFLOAD_RULES=sizing the sizing rules
/// (22: sizing-ids.rules and sizing-ids-tcp.rules), with a header rule on every IP packet
/// and a payload rule on every TCP flow, which keep every flow inline in relayd.
pub(super) fn rules() -> Vec<std::path::PathBuf> {
    let dir = run_dir();
    if rule_set() == "sizing" {
        return ids_rules(&dir).to_vec();
    }
    std::fs::create_dir_all(&dir).expect("run directory");
    let web = dir.join("offload-ids.rules");
    std::fs::write(&web, include_str!("../offload-ids.rules")).expect("offload rules");
    vec![web]
}

/// OFFLOAD_RULES: "web" (default) or "sizing" (see [`rules`]).
fn rule_set() -> &'static str {
    match std::env::var("OFFLOAD_RULES").as_deref() {
        Ok("sizing") => "sizing",
        Ok("web") | Err(_) => "web",
        Ok(other) => panic!("OFFLOAD_RULES={other}: web or sizing"),
    }
}

/// The rule set's name in the report.
fn rule_label() -> &'static str {
    if rule_set() == "sizing" {
        "the 22 sizing rules (OFFLOAD_RULES=sizing)"
    } else {
        "30 public-style rules, benches/offload-ids.rules (OFFLOAD_RULES=web)"
    }
}

/// The `[service.ids]` keys of [`Path::Ids`] with offload.
pub(super) fn ids_keys() -> String {
    std::env::var("IDS_OFFLOAD_KEYS")
        .map(|k| k.replace("\\n", "\n") + "\n")
        .unwrap_or_else(|_| IDS_OFFLOAD_KEYS.to_string())
}

/// The size of the flow at `percent` of the distribution (linear between CDF points).
fn quantile(percent: f64) -> f64 {
    for w in FLOW_SIZES.windows(2) {
        let ((x0, p0), (x1, p1)) = (w[0], w[1]);
        if percent <= p1 {
            return if p1 > p0 {
                x0 + (x1 - x0) * (percent - p0) / (p1 - p0)
            } else {
                x1
            };
        }
    }
    FLOW_SIZES.last().map_or(0.0, |p| p.0)
}

/// The schedule: (response bytes, TLS) per flow, in a fixed shuffled order.
fn schedule() -> Vec<(u64, bool)> {
    let mut v: Vec<(u64, bool)> = (0..SCHEDULE)
        .map(|i| {
            let size = quantile((i as f64 + 0.5) / SCHEDULE as f64 * 100.0);
            (size.round().max(1.0) as u64, i % 2 == 1)
        })
        .collect();
    // Fisher-Yates with a fixed xorshift: the same order in every run.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// The mixed workload's files and its server (in dst, on the traffic core).
struct Workload {
    script: std::path::PathBuf,
    schedule: std::path::PathBuf,
    /// flows.py serve, in dst (stopped when the workload drops).
    _server: Proc,
    /// Offered flows per second.
    rate: f64,
}

impl Workload {
    fn start(bed: &Bed) -> Workload {
        let dir = run_dir().join("flows");
        std::fs::create_dir_all(&dir).expect("flows directory");
        let script = dir.join("flows.py");
        std::fs::write(&script, include_str!("flows.py")).expect("flows.py");
        let flows = schedule();
        let text: String = flows
            .iter()
            .map(|(size, tls)| format!("{size} {}\n", u8::from(*tls)))
            .collect();
        let schedule = dir.join("schedule");
        std::fs::write(&schedule, text).expect("schedule");
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let ok = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=bench.example", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "openssl req: a certificate for the TLS server");
        let mut cmd = taskset(&bed.l.dst, bed.k.traffic_cpu, &script);
        cmd.arg("serve").arg(&cert).arg(&key);
        let server = bed.l.dst.spawn(cmd);
        assert!(
            server.wait_stdout_contains("ready", Duration::from_secs(10)),
            "flows.py serve: {}",
            server.stderr_text()
        );
        Workload {
            script,
            schedule,
            _server: server,
            rate: if bed.k.smoke {
                100.0
            } else {
                env_num("MIX_RATE", MIX_RATE)
            },
        }
    }
}

/// `python3 script` in `node`, pinned to `cpu` (taskset execs it in place); Debian's
/// interpreter when there is one, as the evasion suite runs it.
fn taskset(node: &Node, cpu: usize, script: &std::path::Path) -> std::process::Command {
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut cmd = node.cmd("taskset");
    cmd.args(["-c", &cpu.to_string(), python]).arg(script);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

/// One run of the mixed workload and what the relay core spent on it.
#[derive(Clone, Debug, Default)]
struct Mixed {
    /// Frames' bytes src and dst received per second within the window.
    bps: f64,
    /// Relay-core CPU nanoseconds per kB (1,000 bytes) delivered.
    relay_ns_per_kb: f64,
    relay_share: f64,
    cpu: CpuUse,
    /// Flows started, completed, failed, and the client's largest lag behind its
    /// schedule (seconds): a path that cannot keep up shows here.
    flows: f64,
    done: f64,
    errors: f64,
    lag_s: f64,
    /// Seconds the client took past its schedule to complete its flows.
    tail_s: f64,
}

/// The mixed workload through `path`, whose relayd (or peer) runs.
fn mixed_on(bed: &mut Bed, path: Path, w: &Workload) -> Mixed {
    bed.dst_drops(false);
    // Long enough for the client to start and its flows to overlap as they will.
    let warm = if bed.k.smoke { 0.5 } else { 1.0 };
    let secs = bed.k.secs;
    let mut src_dev = proc_net_dev(&bed.l.src);
    let mut dst_dev = proc_net_dev(&bed.l.dst);
    let mut bytes = || rx_bytes(&mut src_dev, "eth0") + rx_bytes(&mut dst_dev, "eth0");
    let scheduled = warm + secs + 0.2;
    let mut cmd = taskset(&bed.l.src, bed.k.traffic_cpu, &w.script);
    cmd.args(["client", "10.0.2.2"])
        .arg(&w.schedule)
        .arg(w.rate.to_string())
        .arg(scheduled.to_string())
        .arg("27");
    let mut client = bed.l.src.spawn(cmd);
    std::thread::sleep(Duration::from_secs_f64(warm));
    let (c1, b1) = (read_cpus(), bytes());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (c2, b2) = (read_cpus(), bytes());
    let (status, out, err) = client.wait_output(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "flows.py client: {out} {err}"
    );
    let stats: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("flows.py client printed {out:?}: {e}"));
    let num = |k: &str| stats[k].as_f64().unwrap_or(f64::NAN);
    let delivered = (b2 - b1) as f64;
    let cpu = cpu_use(&c1, &c2);
    let relay = bed.k.relay_cpu;
    let m = Mixed {
        bps: delivered * 8.0 / (c2.at - c1.at).as_secs_f64(),
        relay_ns_per_kb: cpu.busy_s[relay] * 1e9 / (delivered / 1000.0).max(1.0),
        relay_share: cpu.share[relay],
        cpu,
        flows: num("flows"),
        done: num("done"),
        errors: num("errors"),
        lag_s: num("lag_s"),
        tail_s: num("elapsed_s") - scheduled,
    };
    println!(
        "    {:<32} mixed {:>5.0} Mbit/s, flows {}/{} done, {} errors, lag {:.2} s, done {:.1} s after the schedule, {}; relay core {:.1} ns/kB",
        path.name(),
        m.bps / 1e6,
        m.done,
        m.flows,
        m.errors,
        m.lag_s,
        m.tail_s,
        shares(&bed.k, &m.cpu),
        m.relay_ns_per_kb
    );
    m
}

/// Suricata's version line, if it is installed.
fn suricata_version() -> Option<String> {
    let out = std::process::Command::new("suricata")
        .arg("-V")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Suricata's `--set` options: Debian's suricata.yaml with HOME_NET the dst side and the
/// recipe's host-os-policy (Linux for the testbed's addresses), and with `bypass` its flow
/// bypass as its documentation configures it for NFQ: `stream.bypass` (a flow whose
/// reassembly depth is reached), TLS `encryption-handling: bypass` (after the handshake),
/// and the NFQ bypass mark the iptables rules of [`suricata_rules`] save on the connection.
fn suricata_settings(bypass: bool) -> Vec<&'static str> {
    let mut v = vec![
        "vars.address-groups.HOME_NET=[10.0.2.0/24]",
        "unix-command.enabled=no",
        "host-os-policy.windows.0=192.0.2.0/24",
        "host-os-policy.linux.0=0.0.0.0/0",
        "host-os-policy.linux.1=::/0",
    ];
    if bypass {
        v.extend([
            "stream.bypass=yes",
            "app-layer.protocols.tls.encryption-handling=bypass",
            "nfq.mode=accept",
            "nfq.bypass-mark=1",
            "nfq.bypass-mask=1",
        ]);
    }
    v
}

/// The relay's iptables rules for Suricata (set up, torn down): every forwarded packet to
/// queue 0; with `bypass`, a connection whose packet Suricata marked 0x1 (`nfq.bypass-mark`)
/// keeps the mark in its connmark, and its later packets skip the queue (Suricata's "capture
/// bypass" for NFQ: docs/userguide/performance/ignoring-traffic.rst).
fn suricata_rules(bypass: bool) -> (String, String) {
    let mut rules = vec![("filter", "FORWARD", "-j NFQUEUE --queue-num 0")];
    if bypass {
        rules.extend([
            ("filter", "FORWARD", "-m mark --mark 0x1/0x1 -j ACCEPT"),
            (
                "mangle",
                "PREROUTING",
                "-j CONNMARK --restore-mark --mask 0x1",
            ),
            (
                "mangle",
                "POSTROUTING",
                "-j CONNMARK --save-mark --mask 0x1",
            ),
        ]);
    }
    let script = |op: &str| {
        let mut s = Vec::new();
        for ipt in ["iptables", "ip6tables"] {
            for (table, chain, rule) in &rules {
                s.push(format!("{ipt} -w -t {table} {op} {chain} {rule}"));
            }
        }
        s.join(" && ")
    };
    // -I: each rule goes first, so the ACCEPT of a marked packet precedes the NFQUEUE.
    (script("-I"), script("-D"))
}

/// Suricata 7 in NFQ IPS mode in the relay namespace (queue 0, workers runmode), with the
/// bench's IDS rules in one file, once its engine runs and its worker thread is pinned to
/// the relay core at the queues' nice value. Stopped, and its iptables rules removed, when
/// the returned value drops.
pub(super) fn suricata(bed: &Bed, bypass: bool) -> Relayd {
    let dir = run_dir().join(if bypass {
        "suricata-bypass"
    } else {
        "suricata"
    });
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("Suricata's log directory");
    let file = dir.join("bench.rules");
    let text: String = rules()
        .iter()
        .map(|r| std::fs::read_to_string(r).expect("ids rules"))
        .collect();
    std::fs::write(&file, text).expect("Suricata's rules");
    let relay = &bed.l.relay;
    let (setup, teardown) = suricata_rules(bypass);
    sh(relay, &setup);
    let mut cmd = relay.cmd("suricata");
    cmd.args(["-c", "/etc/suricata/suricata.yaml", "-q", "0", "-S"])
        .arg(&file)
        .arg("-l")
        .arg(&dir)
        .args(["-k", "none", "--runmode", "workers"]);
    for s in suricata_settings(bypass) {
        cmd.args(["--set", s]);
    }
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let p = relay.spawn(cmd);
    let log = dir.join("suricata.log");
    let started = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Engine started")) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "Suricata did not start: {} {}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            p.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (tid, name) = worker(p.pid());
    pin_task(tid, bed.k.relay_cpu, &name);
    set_nice(tid, &name);
    Relayd {
        procs: vec![p],
        xdp: None,
        cleanup: Some((relay.clone(), teardown)),
    }
}

/// The thread id and name of Suricata's NFQ worker (`W-NFQ#01` in workers runmode).
fn worker(pid: u32) -> (u32, String) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("Suricata's tasks");
    let workers: Vec<(u32, String)> = tasks
        .flatten()
        .filter_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            let tid = t.file_name().to_str()?.parse().ok()?;
            comm.starts_with("W-NFQ")
                .then(|| (tid, comm.trim().to_string()))
        })
        .collect();
    assert_eq!(
        workers.len(),
        1,
        "one NFQ worker thread in Suricata: {workers:?}"
    );
    workers.into_iter().next().unwrap_or_default()
}

/// Whether relayd accepts the offload path's configuration (`relayd check`): the
/// offload keys exist once issue 27's datapath and IDS work is merged.
fn offload_check(cpu: usize) -> Result<(), String> {
    let dir = run_dir();
    std::fs::create_dir_all(&dir).expect("run directory");
    let cfg = dir.join("offload-check.toml");
    let body = Path::Ids { offload: true }.body(cpu).unwrap_or_default();
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nsocket = \"{}\"\n{body}",
            dir.join("check.sock").display()
        ),
    )
    .expect("offload-check.toml");
    let out = std::process::Command::new(RELAYD)
        .args(["check", "-c"])
        .arg(&cfg)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("relayd check failed")
            .trim()
            .to_string())
    }
}

/// What skipped the queue so far, printed after each measurement: relayd's queue counters
/// on an `ids` path (with offload, the queue sees a fraction of the packets), the relay's
/// FORWARD counters on a Suricata path (with its bypass, marked connections are accepted
/// before the NFQUEUE rule).
fn note_queue(bed: &Bed, path: Path) {
    if let Path::Suricata { .. } = path {
        let out = bed
            .l
            .relay
            .exec(&["iptables", "-w", "-L", "FORWARD", "-v", "-n", "-x"]);
        let text = String::from_utf8_lossy(&out.stdout);
        let rules: Vec<String> = text
            .lines()
            .skip(2)
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                format!(
                    "{} {} packets",
                    f.get(2).copied().unwrap_or("?"),
                    f.first().copied().unwrap_or("?")
                )
            })
            .collect();
        println!("    relay FORWARD: {}", rules.join(", "));
        suricata_stats(path);
        return;
    }
    if !matches!(path, Path::Ids { .. }) {
        return;
    }
    match relayd::status::query(&run_dir().join("relay.sock")) {
        Ok(st) => {
            for q in &st.queues {
                let extra: Vec<String> = q
                    .datapath
                    .iter()
                    .filter(|&(_, &v)| v != 0)
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                // The queue's offload counters, read by name (absent while nothing was
                // offloaded, and before issue 27's datapath work).
                let offload = serde_json::to_value(q)
                    .ok()
                    .and_then(|v| v.get("offload").map(|o| o.to_string()))
                    .unwrap_or_else(|| "none".into());
                println!(
                    "    relayd status: queue {} packets {} accepted {} dropped {} {}; offload {offload}",
                    q.num,
                    q.packets,
                    q.accepted,
                    q.dropped,
                    extra.join(", ")
                );
            }
        }
        Err(e) => println!("    relayd status: {e}"),
    }
}

/// Suricata's drop and bypass counters from the last block of its stats.log (written every
/// 8 s), printed: what it dropped (a stalled flow's reason) and what it bypassed.
fn suricata_stats(path: Path) {
    let Path::Suricata { bypass } = path else {
        return;
    };
    let dir = run_dir().join(if bypass {
        "suricata-bypass"
    } else {
        "suricata"
    });
    let text = std::fs::read_to_string(dir.join("stats.log")).unwrap_or_default();
    let Some(last) = text.rsplit("Date:").next() else {
        return;
    };
    let counters: Vec<String> = last
        .lines()
        .filter(|l| {
            [
                "ips.",
                "flow_bypassed",
                "exception_policy",
                "memcap",
                "flow.end.state",
            ]
            .iter()
            .any(|k| l.contains(k))
        })
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            let (name, value) = (f.first()?, f.get(2)?);
            (*value != "0").then(|| format!("{name} {value}"))
        })
        .collect();
    if !counters.is_empty() {
        println!("    Suricata stats.log: {}", counters.join(", "));
    }
}

/// OFFLOAD=1: only this section, printed.
pub(super) fn run(bed: &mut Bed, started: Instant) {
    let mut report = String::new();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    writeln!(
        report,
        "\n## passthrough OFFLOAD: relay core CPU {} ({}), traffic core CPU {}; medians of {} round(s) of {} s; load average at start: {}",
        bed.k.relay_cpu,
        bed.rx.name(),
        bed.k.traffic_cpu,
        bed.k.rounds,
        bed.k.secs,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    )
    .unwrap();
    section(bed, &mut report);
    println!("{report}");
    println!(
        "passthrough OFFLOAD: done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

/// The section: every path started once per round (interleaved), one TCP flow then the
/// mixed workload through it; two tables into `report`.
pub(super) fn section(bed: &mut Bed, report: &mut String) {
    let peer = if bed.k.smoke {
        Err("SMOKE")
    } else {
        suricata_version().ok_or("not installed")
    };
    let offload = offload_check(bed.k.relay_cpu);
    let mut paths = vec![Path::Kernel, Path::Ids { offload: false }];
    if offload.is_ok() {
        paths.push(Path::Ids { offload: true });
    }
    if peer.is_ok() {
        paths.extend([
            Path::Suricata { bypass: false },
            Path::Suricata { bypass: true },
        ]);
    }
    // OFFLOAD_ONLY=TEXT: the kernel and the paths whose name contains TEXT.
    if let Ok(only) = std::env::var("OFFLOAD_ONLY") {
        paths.retain(|p| *p == Path::Kernel || p.name().contains(only.as_str()));
    }
    let w = Workload::start(bed);
    let mut tcps: Vec<Vec<Tcp>> = vec![Vec::new(); paths.len()];
    let mut mixes: Vec<Vec<Mixed>> = vec![Vec::new(); paths.len()];
    let mut loads = Vec::new();
    for round in 0..bed.k.rounds {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let load: Vec<&str> = load.split_whitespace().take(3).collect();
        // The relay core's busy share with no traffic and no relay running: other
        // processes' work, which every figure of the round carries too.
        let idle = background(bed);
        loads.push(format!(
            "{}, relay core {} busy idle",
            load.join(" "),
            pct(idle)
        ));
        println!(
            "Flow offload, round {}/{} (load average {}; relay core {} busy with no traffic)",
            round + 1,
            bed.k.rounds,
            load.join(" "),
            pct(idle)
        );
        for (j, &path) in paths.iter().enumerate() {
            let _r = start(bed, path);
            tcps[j].push(tcp_on(bed, path));
            note_queue(bed, path);
            mixes[j].push(mixed_on(bed, path, &w));
            note_queue(bed, path);
        }
    }
    drop(w);
    for d in ["flows", "suricata", "suricata-bypass"] {
        let _ = std::fs::remove_dir_all(run_dir().join(d));
    }
    writeln!(
        report,
        "\n### Flow offload: one TCP flow through `ids` and Suricata with {} (per round: load average, and the relay core's busy share with no traffic: {})\n",
        rule_label(),
        loads.join("; ")
    )
    .unwrap();
    tcp_table(report, bed.k.traffic_cpu, &paths, &tcps);
    mixed_table(report, bed.k.traffic_cpu, &paths, &mixes);
    notes(report, &paths, &tcps, &mixes, &offload, &peer);
}

/// The relay core's busy share over a second without traffic (0.2 s in SMOKE runs).
fn background(bed: &Bed) -> f64 {
    let c1 = read_cpus();
    std::thread::sleep(Duration::from_secs_f64(if bed.k.smoke { 0.2 } else { 1.0 }));
    let c2 = read_cpus();
    cpu_use(&c1, &c2).share[bed.k.relay_cpu]
}

/// The mixed workload's table: medians per path, CPU per byte as a ratio to the kernel's.
fn mixed_table(report: &mut String, traffic_cpu: usize, paths: &[Path], mixes: &[Vec<Mixed>]) {
    let s = schedule();
    let total: u64 = s.iter().map(|f| f.0).sum();
    let tls: u64 = s.iter().filter(|f| f.1).map(|f| f.0).sum();
    writeln!(
        report,
        "\n### Flow offload: mixed workload (flow sizes: Facebook Hadoop, Roy et al. SIGCOMM 2015, mean {:.0} kB; TLS: {TLS_SHARE}, {:.0} % of the bytes)\n",
        total as f64 / s.len() as f64 / 1000.0,
        tls as f64 / total.max(1) as f64 * 100.0
    )
    .unwrap();
    writeln!(report, "| path | delivered Mbit/s | flows done / started | done after the schedule, s | relay core | traffic core | relay-core ns per kB | ratio to kernel | bytes per core, Gbit/s | lowest round: ns per kB | ratio |").unwrap();
    writeln!(report, "|---|---|---|---|---|---|---|---|---|---|---|").unwrap();
    let kns = mixes
        .first()
        .map_or(f64::NAN, |m| med(m, |m| m.relay_ns_per_kb));
    let klow = mixes.first().map_or(f64::NAN, |m| lowest(m));
    for (p, m) in paths.iter().zip(mixes) {
        let ns = med(m, |m| m.relay_ns_per_kb);
        let low = lowest(m);
        writeln!(
            report,
            "| {} | {:.0} | {:.0} / {:.0} | {:.1} | {} | {} | {ns:.1} | {} | {:.2} | {low:.1} | {} |",
            p.name(),
            med(m, |m| m.bps) / 1e6,
            med(m, |m| m.done),
            med(m, |m| m.flows),
            med(m, |m| m.tail_s),
            pct(med(m, |m| m.relay_share)),
            pct(med(m, |m| m.cpu.share[traffic_cpu])),
            ratio(ns, kns),
            8000.0 / ns,
            ratio(low, klow),
        )
        .unwrap();
    }
    writeln!(report, "\n\"lowest round\": other processes' work on the relay core only adds to its busy time, so the round with the least is the least disturbed estimate of a path's own cost; the median is the bench's usual figure.").unwrap();
}

/// The lowest relay-core CPU per kB among a path's rounds of the mixed workload.
fn lowest(m: &[Mixed]) -> f64 {
    m.iter()
        .map(|m| m.relay_ns_per_kb)
        .filter(|x| x.is_finite())
        .fold(f64::NAN, f64::min)
}

/// What the tables compare, against issue 27's targets, and what did not run and why.
fn notes(
    report: &mut String,
    paths: &[Path],
    tcps: &[Vec<Tcp>],
    mixes: &[Vec<Mixed>],
    offload: &Result<(), String>,
    peer: &Result<String, &str>,
) {
    let at = |p: Path| paths.iter().position(|&x| x == p);
    let tcp = |p: Path, f: fn(&Tcp) -> f64| at(p).map_or(f64::NAN, |i| med(&tcps[i], f));
    let mix = |p: Path| at(p).map_or(f64::NAN, |i| med(&mixes[i], |m| m.relay_ns_per_kb));
    let low = |p: Path| at(p).map_or(f64::NAN, |i| lowest(&mixes[i]));
    let (k, off, byp) = (
        Path::Kernel,
        Path::Ids { offload: true },
        Path::Suricata { bypass: true },
    );
    writeln!(report).unwrap();
    match offload {
        Ok(()) => writeln!(
            report,
            "Targets (issue 27): one flow through `ids` with offload at {} of the kernel's throughput (>= 0.9) and {} of its relay-core CPU per byte (<= 1.2); mixed workload at {} of the kernel's CPU per byte (<= 1.5) and {} Suricata-with-bypass's bytes per core (>= 1.5); by the lowest rounds {} and {}.",
            ratio(tcp(off, |t| t.bps), tcp(k, |t| t.bps)),
            ratio(tcp(off, |t| t.relay_ns_per_kb), tcp(k, |t| t.relay_ns_per_kb)),
            ratio(mix(off), mix(k)),
            ratio(mix(byp), mix(off)),
            ratio(low(off), low(k)),
            ratio(low(byp), low(off)),
        ),
        Err(e) => writeln!(
            report,
            "relayd `ids` with offload not run: `relayd check` refused `offload = true` and the IDS keys `{}`: {e}",
            ids_keys().trim().replace('\n', "; ")
        ),
    }
    .unwrap();
    match peer {
        Ok(v) => writeln!(
            report,
            "Peer: {v}, NFQ IPS mode (`-q 0 --runmode workers -k none`), Debian's suricata.yaml; \"bypass\": `{}`, and iptables rules that save Suricata's bypass mark in the connmark and let marked connections skip the queue. Suricata does not offload relayd's way: its bypass needs conntrack and CONNMARK rules in the relay namespace, and these rows pay for them.",
            suricata_settings(true)
                .iter()
                .skip(5)
                .copied()
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Err(why) => writeln!(report, "Suricata not run ({why})."),
    }
    .unwrap();
    writeln!(
        report,
        "Mixed workload: HTTP/1.1 downloads dst -> src, one per connection, Poisson arrivals; delivered bytes are the frames src and dst received (both directions, headers included), bytes per core is their rate per second of relay-core busy time."
    )
    .unwrap();
}
