//! XDP=1: the AF_XDP datapath's targets (issue 16), measured as the rest of the bench
//! measures (one relay core, interleaved rounds, medians, ratios within the same run), and
//! what the bench needs to run relayd's XDP paths (is a program attached, what relayd's
//! status says of its XDP queue).
//!
//! The comparisons: RFC 2544 throughput and relay-core CPU per packet at 64 bytes for the
//! kernel, relayd `accept` on NFQUEUE and on XDP; `compress` (LZ4, always) at 1,500 bytes
//! and `encrypt` (AES-128-GCM, transport) at [`ESP_SIZE`] bytes on NFQUEUE and on XDP;
//! added latency at 50 % of NFQUEUE `accept`'s RFC 2544 rate. The report goes to stdout
//! and to target/bench-xdp.md.

use super::*;

/// IP packet size of the encrypt rows, the "1,500 bytes" of the target. ESP in transport
/// mode adds 8 bytes of header, 8 of IV, 2-5 of trailer and 16 of ICV: 1,400-byte packets
/// leave the relay as about 1,436 bytes, within eth1's 1,500-byte MTU (1,500-byte ones
/// would not fit, and the kernel's answer, ICMP "too big", would be what we measured).
pub(super) const ESP_SIZE: usize = 1400;

/// Whether an XDP program is attached to an interface of `node` (`prog/xdp` in
/// `ip -d link`).
pub(super) fn attached(node: &Node) -> bool {
    let out = node.exec(&["ip", "-d", "-o", "link", "show"]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .any(|l| l.contains("prog/xdp") || l.contains(" xdp "))
}

/// For an XDP path's relayd: its status, printed as one line of the queue's and the
/// program's non-zero counters, and returned. Panics if the XDP queue transmitted nothing
/// (every packet went another way, and the figures would be the kernel's).
pub(super) fn note(r: &Relayd) -> Option<String> {
    let (_, socket, _) = r.xdp.as_ref()?;
    let st = relayd::status::query(socket).unwrap_or_else(|e| panic!("relayd status: {e}"));
    let q = st
        .queues
        .iter()
        .find(|q| q.hook == "xdp")
        .expect("an XDP queue in relayd's status");
    let mut parts = vec![
        format!("packets {}", q.packets),
        format!("dropped {}", q.dropped),
        format!("errors {}", q.errors),
    ];
    parts.extend(
        q.datapath
            .iter()
            .filter(|&(_, &v)| v != 0)
            .map(|(k, v)| format!("{k} {v}")),
    );
    if let Some(p) = st.xdp.first().and_then(|x| x.program.as_ref()) {
        parts.extend(
            p.iter()
                .filter(|&(_, &v)| v != 0)
                .map(|(k, v)| format!("program {k} {v}")),
        );
    }
    if !st.unhealthy_queues.is_empty() {
        parts.push(format!("UNHEALTHY queues {:?}", st.unhealthy_queues));
    }
    let note = parts.join(", ");
    println!("    relayd status: {note}");
    let transmitted = q.datapath.get("transmitted").copied().unwrap_or(0);
    assert!(
        transmitted > 0,
        "relayd's XDP queue transmitted nothing; the packets went another way: {note}"
    );
    Some(note)
}

/// The medians of one path's RFC 2544 searches.
struct Fig {
    /// Packets/s (0 if nothing passed).
    rate: f64,
    /// Most rounds' floods passed: the path forwards at least `rate`.
    bound: bool,
    /// Relay-core CPU microseconds per packet at `rate`.
    us: f64,
}

impl Fig {
    fn of(s: &[Search]) -> Fig {
        Fig {
            rate: med(s, |s| s.rate),
            bound: s.iter().filter(|s| s.generator_bound).count() * 2 > s.len(),
            us: med(s, |s| s.at.relay_us),
        }
    }
}

/// One target row: XDP's figure against `base`'s, the goal a ratio. Throughput decides
/// when the generator saturated both paths; where it could not (its flood passed), the
/// relay-core CPU per packet does.
fn target_row(report: &mut String, what: &str, size: usize, base: &Fig, x: &Fig, goal: f64) {
    let r = x.rate / base.rate;
    let cpu = base.us / x.us;
    let rate_ratio = match (x.bound, base.bound) {
        _ if !r.is_finite() => "-".to_string(),
        (true, true) => format!("- (both generator-bound, {r:.2})"),
        (true, false) => format!(">= {r:.2}"),
        (false, true) => format!("<= {r:.2}"),
        (false, false) => format!("{r:.2}"),
    };
    let by_rate = match (x.bound, base.bound) {
        _ if !r.is_finite() => None,
        (false, false) => Some(r >= goal),
        (true, false) if r >= goal => Some(true),
        (false, true) if r < goal => Some(false),
        _ => None,
    };
    let met = match by_rate {
        Some(true) => "yes".to_string(),
        Some(false) => "no".to_string(),
        None if !cpu.is_finite() => "?".to_string(),
        None if cpu >= goal => "yes, by CPU per packet".to_string(),
        None => "no, by CPU per packet".to_string(),
    };
    let rate = |f: &Fig| format!("{}{}", if f.bound { ">= " } else { "" }, fmt_rate(f.rate));
    writeln!(
        report,
        "| {what} | {size} B | {} | {} | {rate_ratio} | {:.2} | {:.2} | {} | >= {goal} | {met} |",
        rate(base),
        rate(x),
        base.us,
        x.us,
        ratio(base.us, x.us),
    )
    .unwrap();
}

/// The command that reproduces this run.
fn command_line(k: &Knobs) -> String {
    let mut env = format!(
        "XDP=1 ROUNDS={} SECS={} TRIALS={}",
        k.rounds, k.secs, k.trials
    );
    for var in ["SMOKE", "RELAY_RX", "QUEUE_NICE"] {
        if let Ok(v) = std::env::var(var) {
            write!(env, " {var}={v}").unwrap();
        }
    }
    format!("{env} cargo bench --locked -p relayd --bench passthrough")
}

/// XDP=1: the comparisons of issue 16's targets, in `bed.k.rounds` interleaved rounds.
pub(super) fn run(bed: &mut Bed, started: Instant) {
    if bed.rx != Rx::Napi {
        // With RPS the veth's NAPI, and with it the XDP program, runs on the sending core.
        println!(
            "XDP=1: the relay's eth0 receives in threaded NAPI, not {}",
            bed.rx.name()
        );
        bed.set_rx(Rx::Napi);
    }
    let (rounds, secs) = (bed.k.rounds, bed.k.secs);
    let cmd = command_line(&bed.k);
    println!("{cmd}");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut report = String::new();
    writeln!(
        report,
        "\n## passthrough, AF_XDP against NFQUEUE: relay core CPU {} ({}), traffic core CPU {}; medians of {rounds} round(s) of {secs} s; load average at start: {}\n\n`{cmd}`",
        bed.k.relay_cpu,
        bed.rx.name(),
        bed.k.traffic_cpu,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    )
    .unwrap();

    // RFC 2544 throughput. ------------------------------------------------------------------
    let accept = Path::Accept { fail_open: false };
    let searches = [
        (Path::Kernel, 64),
        (accept, 64),
        (Path::XdpAccept, 64),
        (Path::Kernel, 1500),
        (Path::Compress, 1500),
        (Path::XdpCompress, 1500),
        (Path::Kernel, ESP_SIZE),
        (Path::Encrypt, ESP_SIZE),
        (Path::XdpEncrypt, ESP_SIZE),
    ];
    let mut found: Vec<Vec<Search>> = vec![Vec::new(); searches.len()];
    for round in 0..rounds {
        println!("XDP: RFC 2544 throughput, round {}/{rounds}", round + 1);
        for (i, &(path, size)) in searches.iter().enumerate() {
            found[i].push(rfc2544(bed, path, size));
        }
    }
    rfc_table(&mut report, bed.k.trials, &searches, &found);
    writeln!(
        report,
        "\nThe encrypt rows are {ESP_SIZE}-byte IP packets: ESP adds about 36 bytes, and eth1's MTU is 1,500."
    )
    .unwrap();
    let fig = |path: Path, size: usize| {
        let i = searches
            .iter()
            .position(|&s| s == (path, size))
            .expect("a search of the XDP mode");
        Fig::of(&found[i])
    };
    writeln!(
        report,
        "\n### Targets (issue 16): XDP against NFQUEUE and the kernel, this run\n"
    )
    .unwrap();
    writeln!(report, "| comparison | size | baseline packets/s | XDP packets/s | throughput ratio | baseline us/packet | XDP us/packet | CPU-per-packet ratio (baseline / XDP) | goal | met |").unwrap();
    writeln!(report, "|---|---|---|---|---|---|---|---|---|---|").unwrap();
    let xa = fig(Path::XdpAccept, 64);
    target_row(
        &mut report,
        "accept: XDP / NFQUEUE",
        64,
        &fig(accept, 64),
        &xa,
        2.0,
    );
    target_row(
        &mut report,
        "accept: XDP / kernel",
        64,
        &fig(Path::Kernel, 64),
        &xa,
        1.0,
    );
    target_row(
        &mut report,
        "compress (LZ4): XDP / NFQUEUE",
        1500,
        &fig(Path::Compress, 1500),
        &fig(Path::XdpCompress, 1500),
        1.5,
    );
    target_row(
        &mut report,
        "encrypt (AES-128-GCM): XDP / NFQUEUE",
        ESP_SIZE,
        &fig(Path::Encrypt, ESP_SIZE),
        &fig(Path::XdpEncrypt, ESP_SIZE),
        1.5,
    );
    writeln!(report, "\n\">=\": the generator's flood passed, so the path forwards at least that; where that leaves the throughput ratio open, the relay-core CPU per packet decides (\"by CPU per packet\": conservative for relayd, whose batches are smaller below saturation).").unwrap();

    // Latency at 50 % of NFQUEUE accept's rate. ----------------------------------------------
    let mut r64 = fig(accept, 64).rate;
    if r64.is_nan() || r64 <= 0.0 {
        let i = searches.iter().position(|&s| s == (accept, 64)).unwrap();
        r64 = (med(&found[i], |s| s.flood.delivered_rate) / 2.0).max(1000.0);
        writeln!(
            report,
            "\nWARNING: relayd accept (NFQUEUE) passed no rate with loss <= 0.1 %; latency is measured at half of half its flood rate, {}/s.",
            fmt_rate(r64)
        )
        .unwrap();
    }
    let lat_paths = [Path::Kernel, accept, Path::XdpAccept];
    let mut lats: Vec<Vec<Latency>> = vec![Vec::new(); lat_paths.len()];
    for round in 0..rounds {
        println!("XDP: latency, round {}/{rounds}", round + 1);
        for (j, &path) in lat_paths.iter().enumerate() {
            lats[j].push(latency(bed, path, 0.5 * r64));
        }
    }
    writeln!(
        report,
        "\n### One-way delay src -> dst, 64-byte packets at {}/s (50 % of relayd accept's NFQUEUE RFC 2544 rate)\n",
        fmt_rate(0.5 * r64)
    )
    .unwrap();
    writeln!(
        report,
        "| path | samples per round | p50 / p99 / p99.9 us | added to the kernel's p50 / p99 / p99.9 us | relay core | traffic core |"
    )
    .unwrap();
    writeln!(report, "|---|---|---|---|---|---|").unwrap();
    let q = |v: &[Latency]| (med(v, |l| l.p50), med(v, |l| l.p99), med(v, |l| l.p999));
    let (k50, k99, k999) = q(&lats[0]);
    for (j, path) in lat_paths.iter().enumerate() {
        let (p50, p99, p999) = q(&lats[j]);
        writeln!(
            report,
            "| {} | {} | {p50:.1} / {p99:.1} / {p999:.1} | {:.1} / {:.1} / {:.1} | {} | {} |",
            path.name(),
            fmt_rate(med(&lats[j], |l| l.samples as f64)),
            p50 - k50,
            p99 - k99,
            p999 - k999,
            pct(med(&lats[j], |l| l.cpu.share[bed.k.relay_cpu])),
            pct(med(&lats[j], |l| l.cpu.share[bed.k.traffic_cpu])),
        )
        .unwrap();
    }
    let traffic = lats
        .iter()
        .map(|v| med(v, |l| l.cpu.share[bed.k.traffic_cpu]))
        .fold(0.0, f64::max);
    if traffic > 0.9 {
        // The generator, the sink and dst's receive work share the traffic core: saturated,
        // it queues packets before they are timestamped and sends late.
        writeln!(
            report,
            "\nWARNING: the traffic core was {} busy: the delays include its own queueing, not only the relay's.",
            pct(traffic)
        )
        .unwrap();
    }
    let (n99, x99) = (q(&lats[1]).1, q(&lats[2]).1);
    writeln!(
        report,
        "\nTarget: XDP's p99 below NFQUEUE's: {} ({x99:.1} us against {n99:.1} us).",
        if x99 < n99 { "met" } else { "missed" }
    )
    .unwrap();

    // What relayd's XDP queues said. ------------------------------------------------------------
    writeln!(
        report,
        "\n### relayd status after each XDP search (last round; non-zero counters)\n"
    )
    .unwrap();
    for (i, &(path, size)) in searches.iter().enumerate() {
        if let Some(n) = found[i].last().and_then(|s| s.xdp.as_ref()) {
            writeln!(report, "- {} at {size} B: {n}", path.name()).unwrap();
        }
    }
    bed.dst_drops(false);
    remove_keys();
    println!("{report}");
    if !bed.k.smoke {
        let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .map_or_else(|| "bench-xdp.md".into(), |t| t.join("bench-xdp.md"));
        std::fs::write(&out, &report).expect("writing the XDP report");
        println!("wrote {}", out.display());
    }
    println!(
        "passthrough (XDP): done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
