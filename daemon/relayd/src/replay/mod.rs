//! `relayd replay`: runs a configured chain over a capture file, offline and unprivileged,
//! like `suricata -r` or `tcpdump -r`. Each packet gets its own capture timestamp as the
//! clock services see, a conntrack-like flow state from a small tracker, and (for
//! adaptive services) a fixed egress queue from the command line; what comes out (the
//! packets that pass, and the packets services emit, such as re-sent tunnel packets,
//! ICMP errors and resets) is written to a pcap that tcpdump and Wireshark read.
//!
//! Replay is a shell around the same [`Pipeline`] the live datapaths use: a service that
//! panics costs its packet the queue's malformed verdict, not the replay; a packet a
//! service holds comes out when the capture's clock reaches its deadline (or at the end),
//! with that time as its timestamp; marks and counters are composed as live; and on a
//! queue that offloads, the later packets of a flow the chain offloaded pass without it,
//! as the kernel forwards them live (the flow tracker keeps the offloaded directions).

mod capture;
mod flows;
#[cfg(test)]
mod tests;

pub use capture::{Capture, CaptureError, Record, strip_link};
pub use flows::FlowTracker;

use crate::config::Config;
use crate::daemon::CounterStore;
use crate::status::{QueueStatus, Status};
use anyhow::{Context as _, bail};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, TsResolution};
use relay_core::wire::ethernet::ethertype;
use relay_core::{CtInfo, Decision, IpVersion, Packet, PacketMeta, Route, Verdict};
use relay_pipeline::{HeldBytes, Outcome, Pipeline, Settings};
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

/// Headroom in front of a packet in the replay's buffer, and room behind it (services
/// that encapsulate grow packets in place, as live).
const HEADROOM: usize = 256;
const TAILROOM: usize = 256;

/// A packet's record, kept with it while a service holds it.
#[derive(Debug, Clone, Copy, Default)]
struct Rec {
    number: u64,
    len_in: usize,
    ct: Option<CtInfo>,
}

/// Where the packets that come out go: the pcap (`--write`) and the JSON lines (`--json`).
struct Output<'a> {
    writer: Option<PcapWriter<std::io::BufWriter<std::fs::File>>>,
    json: Option<&'a mut dyn Write>,
    written: u64,
}

impl Output<'_> {
    /// Writes a packet that passes, at `ts`.
    fn packet(&mut self, ts: Duration, bytes: &[u8], number: u64) -> anyhow::Result<()> {
        if let Some(w) = self.writer.as_mut() {
            w.write_packet(&PcapPacket::new(ts, bytes.len() as u32, bytes))
                .with_context(|| format!("writing packet {number}"))?;
            self.written += 1;
        }
        Ok(())
    }

    /// One packet's JSON line, if asked for.
    fn line(&mut self, rec: &Rec, l: Line) -> anyhow::Result<()> {
        let Some(out) = self.json.as_mut() else {
            return Ok(());
        };
        let Line {
            ts,
            decision: d,
            modified,
            len_out,
            emitted,
            held,
            offloaded,
        } = l;
        let verdict = match d.verdict {
            Verdict::Accept => "accept",
            Verdict::Drop => "drop",
            Verdict::Repeat => "repeat",
        };
        let line = serde_json::json!({
            "packet": rec.number,
            "ts": ts.as_secs_f64(),
            "verdict": verdict,
            "modified": modified,
            "mark": d.mark,
            "len_in": rec.len_in,
            "len_out": len_out,
            "emitted": emitted,
            "held": held,
            "offload": d.offload.map(|o| o.reason.as_str()),
            "offloaded": offloaded,
            "ct": rec.ct.map(|c| format!("{:?}{}", c.state, if c.reply { " reply" } else { "" })),
        });
        writeln!(out, "{line}")?;
        Ok(())
    }
}

/// What a packet's JSON line says besides its record.
struct Line {
    /// When it came out (capture time).
    ts: Duration,
    decision: Decision,
    modified: bool,
    len_out: usize,
    /// How many packets services emitted while handling it.
    emitted: usize,
    /// True if a service held it (it comes out at its deadline).
    held: bool,
    /// True if its flow was offloaded: the chain did not see it, as live.
    offloaded: bool,
}

/// The replay's clock: capture time since the first record, as the `Instant` services see.
struct Clock {
    base: Instant,
    first: Option<Duration>,
    since: Duration,
}

impl Clock {
    /// Moves to capture time `ts` (never backwards) and returns the services' time.
    fn at(&mut self, ts: Duration) -> Instant {
        let first = *self.first.get_or_insert(ts);
        self.since = self.since.max(ts.saturating_sub(first));
        self.base + self.since
    }

    /// The capture time of the services' time `t`.
    fn capture_time(&self, t: Instant) -> Duration {
        self.first.unwrap_or_default() + t.saturating_duration_since(self.base)
    }
}

/// Writes the held packets due at `now` (all for `None`), each at its deadline.
fn release(
    pipeline: &mut Pipeline<Rec>,
    now: Option<Instant>,
    clock: &Clock,
    out: &mut Output<'_>,
) -> anyhow::Result<()> {
    while let Some(due) = pipeline
        .next_due()
        .filter(|t| now.is_none_or(|now| *t <= now))
    {
        let ts = clock.capture_time(due);
        let n = pipeline.release_due(Some(due), 64, |_| true);
        for k in 0..n {
            let Some(h) = pipeline.released(k) else {
                break;
            };
            out.packet(ts, &h.data, h.handle.number)?;
            let d = Decision {
                mark: h.mark,
                payload: h.payload,
                ..Decision::ACCEPT
            };
            let line = Line {
                ts,
                decision: d,
                modified: h.payload,
                len_out: h.data.len(),
                emitted: 0,
                held: true,
                offloaded: false,
            };
            out.line(&h.handle, line)?;
        }
        pipeline.finish_release();
    }
    Ok(())
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
    let chain = store.chain(spec, &res, num, cfg.daemon.bypass_mark);
    let q = store.queue(num);
    let mut capture = Capture::open(&opts.pcap)?;
    let writer = match &opts.write {
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
    let mut output = Output {
        writer,
        json: opts.json.then_some(out),
        written: 0,
    };
    let mut clock = Clock {
        base: Instant::now(),
        first: None,
        since: Duration::ZERO,
    };
    // The queue's hold limits, as live; every held packet is copied (nothing else keeps
    // it). Replayed packets carry no mark: the flow tracker tells their conntrack state.
    // A queue that offloads: the chain's offloads are carried out by the flow tracker
    // (later packets of an offloaded flow pass without the chain, as the kernel forwards
    // them live).
    let settings = Settings {
        hold: spec.queue.hold,
        held_bytes: HeldBytes::All,
        offload: spec.queue.offload.is_some(),
        ..Settings::new(num)
    };
    let mut r = Replay {
        pipeline: Pipeline::new(settings, chain, q.clone(), clock.base),
        flows: FlowTracker::default(),
        buf: Vec::new(),
        hook: spec.hook,
        counters: q.clone(),
    };
    let (mut non_ip, mut unreadable) = (0u64, 0u64);
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
        let Some(ip) = rec.ip.as_deref() else {
            non_ip += 1;
            continue;
        };
        // The capture's own time is the services' clock (never running backwards).
        let now = clock.at(rec.ts);
        release(&mut r.pipeline, Some(now), &clock, &mut output)?;
        r.one(&rec, ip, now, &mut output)?;
    }
    release(&mut r.pipeline, None, &clock, &mut output)?;
    let written = output.written;
    if let Some(w) = output.writer {
        w.into_writer().flush().context("writing the output pcap")?;
    }
    let services = store.services_status(|_, _, _| true);
    // Replay takes packets as captured: no GSO, no kernel queue.
    let queue = QueueStatus::new(num, spec, false, &q, None);
    tracing::info!(
        flows = r.flows.len(),
        non_ip,
        unreadable,
        written,
        "replay done"
    );
    Ok(Status {
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_s: clock.since.as_secs_f64(),
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

/// The pipeline and what the replay keeps from packet to packet.
struct Replay {
    pipeline: Pipeline<Rec>,
    flows: FlowTracker,
    /// The packet buffer, reused from packet to packet.
    buf: Vec<u8>,
    /// The queue's hook, which services see in the packet's metadata.
    hook: relay_core::Hook,
    /// The queue's counters (the pipeline's), for what the replay counts itself.
    counters: relay_core::QueueCounters,
}

impl Replay {
    /// Runs one record's IP packet `ip` through the pipeline at `now` and writes what
    /// comes out: the packet (unless dropped or held), then what the services emitted.
    fn one(
        &mut self,
        rec: &Record,
        ip: &[u8],
        now: Instant,
        out: &mut Output<'_>,
    ) -> anyhow::Result<()> {
        if self.pipeline.settings().offload && self.flows.offloaded(ip, rec.ts) {
            return self.skip(rec, ip, out);
        }
        let meta = PacketMeta {
            id: rec.number as u32,
            queue: self.pipeline.settings().num,
            hw_protocol: ethertype::of(IpVersion::of(ip).unwrap_or(IpVersion::V4)),
            hook: Some(self.hook),
            // A snap length cut the packet: services treat it as a partial copy, as live.
            orig_len: rec.ip_orig_len,
            // Captures often hold offloaded (wrong) checksums: not judged, as `-k none`.
            csum: relay_core::Checksum::Unknown,
            ..PacketMeta::default()
        };
        let buf = &mut self.buf;
        let end = HEADROOM + ip.len();
        buf.clear();
        buf.resize(HEADROOM, 0);
        buf.extend_from_slice(ip);
        buf.resize(end + TAILROOM, 0);
        let mut pkt = Packet::in_buffer(std::mem::take(buf), HEADROOM, end, meta);
        let ct = self.flows.classify(&mut pkt, rec.ts);
        let meta = PacketMeta { ct, ..pkt.meta };
        *buf = pkt.into_buffer();
        let r = Rec {
            number: rec.number,
            len_in: ip.len(),
            ct,
        };
        let outcome = self.pipeline.process(now, meta, buf, HEADROOM, end, r);
        self.carry_out_offloads();
        let Outcome::Now {
            decision,
            start,
            end,
            modified,
        } = outcome
        else {
            // Held: written when released.
            write_emitted(&mut self.pipeline, rec, out)?;
            return Ok(());
        };
        // The changed bytes if the verdict carries them, else the packet as it came (a
        // partial copy's changes are not kept, as live).
        let bytes = match self.buf.get(start..end).filter(|_| decision.payload) {
            Some(b) => b,
            None => ip,
        };
        let passes = decision.verdict != Verdict::Drop;
        let len_out = if passes { bytes.len() } else { 0 };
        if passes {
            out.packet(rec.ts, bytes, rec.number)?;
        }
        let emitted = write_emitted(&mut self.pipeline, rec, out)?;
        let line = Line {
            ts: rec.ts,
            decision,
            modified,
            len_out,
            emitted,
            held: false,
            offloaded: false,
        };
        out.line(&r, line)
    }

    /// Writes a packet of an offloaded flow as it came, without the chain, and counts it
    /// as skipping the queue.
    fn skip(&mut self, rec: &Record, ip: &[u8], out: &mut Output<'_>) -> anyhow::Result<()> {
        let o = &self.counters.offload;
        o.skipped_packets.inc();
        o.skipped_bytes.add(ip.len() as u64);
        out.packet(rec.ts, ip, rec.number)?;
        let r = Rec {
            number: rec.number,
            len_in: ip.len(),
            ct: None,
        };
        let line = Line {
            ts: rec.ts,
            decision: Decision::ACCEPT,
            modified: false,
            len_out: ip.len(),
            emitted: 0,
            held: false,
            offloaded: true,
        };
        out.line(&r, line)
    }

    /// Records the flows the chain offloaded in the tracker, counted as live: a flow newly
    /// offloaded by its reason, one the tracker does not know as failed.
    fn carry_out_offloads(&mut self) {
        let o = &self.counters.offload;
        for req in self.pipeline.take_offloads() {
            match self.flows.offload(&req.tuple, req.offload.scope) {
                Some(true) => o.offloaded(req.offload.reason),
                Some(false) => {}
                None => o.failed.inc(),
            }
        }
    }
}

/// What the services emitted (a re-sent tunnel packet, an ICMP error, a reset) comes out
/// too, after the packet, as the datapath sends it after the verdict. An ICMPv6 message
/// the kernel would put a header on is counted, not written. Returns how many.
fn write_emitted(
    pipeline: &mut Pipeline<Rec>,
    rec: &Record,
    out: &mut Output<'_>,
) -> anyhow::Result<usize> {
    let outbox = pipeline.outbox_mut();
    let emitted = outbox.len();
    if let Some(w) = out.writer.as_mut() {
        for e in outbox.iter().filter(|e| e.route != Route::Icmpv6) {
            w.write_packet(&PcapPacket::new(rec.ts, e.bytes.len() as u32, e.bytes))
                .with_context(|| format!("writing what packet {} emitted", rec.number))?;
            out.written += 1;
        }
    }
    outbox.settle_all_sent();
    Ok(emitted)
}
