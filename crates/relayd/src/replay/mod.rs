//! `relayd replay`: runs a configured chain over a capture file, offline and unprivileged,
//! like `suricata -r` or `tcpdump -r`. Each packet gets its own capture timestamp as the
//! clock services see, a conntrack-like flow state from a small tracker, and (for
//! adaptive services) a fixed egress queue from the command line; what comes out (the
//! packets that pass, and the packets services emit, such as re-sent tunnel packets,
//! ICMP errors and resets) is written to a pcap that tcpdump and Wireshark read.

mod capture;
mod flows;

pub use capture::{Capture, CaptureError, Record, strip_link};
pub use flows::FlowTracker;

use crate::config::Config;
use crate::daemon::CounterStore;
use crate::status::{QueueStatus, Status};
use anyhow::{Context as _, bail};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, TsResolution};
use relay_core::{Context, Packet, PacketMeta, Route, Verdict};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to replay and where the results go.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// The capture to read (pcap or pcapng).
    pub pcap: PathBuf,
    /// The queue whose chain runs (default: the first queue of the first entry).
    pub queue: Option<u16>,
    /// Where to write the packets that come out (raw-IP pcap, original timestamps).
    pub write: Option<PathBuf>,
    /// One JSON object per packet verdict on standard output.
    pub json: bool,
    /// The egress queue adaptive services see, for every interface: bytes waiting and
    /// rate in bytes/s (0: none). Offline, so a fixed one instead of the kernel's.
    pub egress: (u32, u64),
}

/// Runs the replay; per-packet JSON (if asked) goes to `out`. Returns the counters.
pub fn run(cfg: &Config, opts: &ReplayOptions, out: &mut dyn Write) -> anyhow::Result<Status> {
    let spec = match opts.queue {
        None => cfg.queues.first(),
        Some(n) => cfg.queues.iter().find(|q| q.nums().contains(&n)),
    };
    let Some(spec) = spec else {
        bail!(
            "queue {} is not in {}",
            opts.queue.unwrap_or(0),
            cfg.path.display()
        );
    };
    let num = opts.queue.unwrap_or(spec.first);
    let mut store = CounterStore::default();
    let (backlog, rate) = opts.egress;
    let monitor = relay_netlink::QueueMonitor::fixed(backlog, rate);
    let res = crate::resources::Provider::fixed(monitor)
        .resources(cfg, crate::resources::open_logs(cfg)?)?;
    let mut chain = store.chain(spec, &res, num, cfg.daemon.bypass_mark);
    let q = store.queue(num);
    let mut capture = Capture::open(&opts.pcap)?;
    let mut writer = match &opts.write {
        None => None,
        Some(p) => {
            let f =
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
            let header = PcapHeader {
                datalink: DataLink::RAW,
                ts_resolution: TsResolution::NanoSecond,
                snaplen: 0x40000,
                ..PcapHeader::default()
            };
            Some(
                PcapWriter::with_header(std::io::BufWriter::new(f), header)
                    .context("writing the pcap header")?,
            )
        }
    };
    let mut flows = FlowTracker::default();
    let base = Instant::now();
    let (mut first_ts, mut clock) = (None, Duration::ZERO);
    let (mut non_ip, mut written, mut unreadable) = (0u64, 0u64, 0u64);
    let pcap_name = opts.pcap.display().to_string();
    while let Some(rec) = capture.next_record() {
        // A record the file can be read past (a pcapng packet of an interface never
        // described) is counted and skipped. A record that cannot be read at all (cut
        // short, a damaged length: nothing after it can be framed) fails the replay with
        // its packet number, as docs/replay.md says: a replay that silently stopped early
        // would pass for a whole one.
        let rec = match rec {
            Ok(rec) => rec,
            Err(e @ CaptureError::Skipped { .. }) => {
                unreadable += 1;
                tracing::warn!("{pcap_name}: {e}");
                continue;
            }
            Err(e) => return Err(e).with_context(|| pcap_name.clone()),
        };
        let Some(ip) = rec.ip else {
            non_ip += 1;
            continue;
        };
        // The capture's own time is the services' clock (never running backwards).
        let first = *first_ts.get_or_insert(rec.ts);
        clock = clock.max(rec.ts.saturating_sub(first));
        let mut cx = Context::new(num, base + clock);
        let mut pkt = Packet::from_bytes(&ip);
        pkt.meta = PacketMeta {
            id: rec.number as u32,
            queue: num,
            hw_protocol: if ip.first().is_some_and(|b| b >> 4 == 6) {
                0x86dd
            } else {
                0x0800
            },
            hook: Some(spec.hook),
            // A snap length cut the packet: services treat it as a partial copy, as live.
            orig_len: rec.ip_orig_len,
            // Captures often hold offloaded (wrong) checksums: not judged, as `-k none`.
            csum: relay_core::Checksum::Unknown,
            ..PacketMeta::default()
        };
        pkt.meta.ct = flows.classify(&mut pkt, rec.ts);
        let d = chain.run(&mut pkt, &mut cx, &q);
        let passes = d.verdict != Verdict::Drop;
        if passes && let Some(w) = writer.as_mut() {
            w.write_packet(&PcapPacket::new(rec.ts, pkt.len() as u32, pkt.data()))
                .with_context(|| format!("writing packet {}", rec.number))?;
            written += 1;
        }
        // What the services emitted (a re-sent tunnel packet, an ICMP error, a reset)
        // comes out too, after the packet, as the datapath sends it after the verdict.
        // An ICMPv6 message the kernel would put a header on is counted, not written.
        let emitted = cx.outbox().len();
        if let Some(w) = writer.as_mut() {
            for e in cx.outbox().iter().filter(|e| e.route != Route::Icmpv6) {
                w.write_packet(&PcapPacket::new(rec.ts, e.bytes.len() as u32, e.bytes))
                    .with_context(|| format!("writing what packet {} emitted", rec.number))?;
                written += 1;
            }
        }
        cx.outbox_mut().settle_all_sent();
        if opts.json {
            let verdict = match d.verdict {
                Verdict::Accept => "accept",
                Verdict::Drop => "drop",
                Verdict::Repeat => "repeat",
            };
            let line = serde_json::json!({
                "packet": rec.number,
                "ts": rec.ts.as_secs_f64(),
                "verdict": verdict,
                "modified": pkt.is_modified(),
                "mark": d.mark,
                "len_in": ip.len(),
                "len_out": if passes { pkt.len() } else { 0 },
                "emitted": emitted,
                "ct": pkt.meta.ct.map(|c| format!("{:?}{}", c.state, if c.reply { " reply" } else { "" })),
            });
            writeln!(out, "{line}")?;
        }
    }
    if let Some(w) = writer {
        w.into_writer().flush().context("writing the output pcap")?;
    }
    let services = store.services_status(|_, _, _| true);
    // Replay takes packets as captured: no GSO, no kernel queue.
    let queue = QueueStatus::new(num, spec, false, &q, None);
    tracing::info!(
        flows = flows.len(),
        non_ip,
        unreadable,
        written,
        "replay done"
    );
    Ok(Status {
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_s: clock.as_secs_f64(),
        config: cfg.path.display().to_string(),
        reloads: 0,
        reload_failures: 0,
        start_time_ms: 0,
        unhealthy_queues: Vec::new(),
        queues: vec![queue],
        services,
        listeners: Vec::new(),
        qos: Vec::new(),
        xdp: Vec::new(),
        ike: Vec::new(),
    })
}
