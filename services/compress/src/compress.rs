//! `compress`: replaces a packet's transport header and data with their compressed form
//! in IPComp (RFC 3173), when the paper's decision says it pays, never making a packet
//! larger.

use crate::codec::{Algorithm, Codecs};
use crate::decision::{Estimate, should_compress};
use relay_core::units::parse_rate;
use relay_core::wire::{IpcompPacket, ipcomp, proto};
use relay_core::{
    Action, Clock, Context, Counter, Counters, Manifest, Packet, Resources, Service, ServiceConfig,
    ServiceFactory,
};
use relay_netlink::QueueMonitor;
use serde::Deserialize;
use std::sync::Arc;

/// When to compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Per packet, by `W >= C - (1 - R) S / B` (the paper's scheme).
    Adaptive,
    /// Every packet that gets smaller.
    Always,
    /// Never (count only): the baseline of an experiment.
    Never,
}

/// Where C and R come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EstimateMode {
    /// Start from the configured values, then follow moving averages of real compressions.
    Online,
    /// Keep the configured values, as the paper did.
    Fixed,
}

/// `[service.NAME]` with `kind = "compress"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompressConfig {
    /// Algorithm (default `lzo` when built with it, else `lz4`).
    #[serde(default = "default_algorithm")]
    pub algorithm: Algorithm,
    /// adaptive (default), always or never.
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// Egress rate B, e.g. "100mbit"; default: the egress qdisc's rate (tbf).
    #[serde(default)]
    pub bandwidth: Option<String>,
    /// Initial (or fixed) compression time C, microseconds (paper: 20).
    #[serde(default = "default_c")]
    pub compress_time_us: f64,
    /// Initial (or fixed) compression ratio R (paper: 0.95).
    #[serde(default = "default_r")]
    pub ratio: f64,
    /// online (default) or fixed.
    #[serde(default = "default_estimate")]
    pub estimate: EstimateMode,
    /// Packets smaller than this many bytes are not compressed.
    #[serde(default = "default_min_size")]
    pub min_size: usize,
    /// DEFLATE level 1-9.
    #[serde(default = "default_level")]
    pub level: u32,
}

fn default_algorithm() -> Algorithm {
    if Algorithm::Lzo.available() {
        Algorithm::Lzo
    } else {
        Algorithm::Lz4
    }
}
fn default_mode() -> Mode {
    Mode::Adaptive
}
fn default_c() -> f64 {
    20.0
}
fn default_r() -> f64 {
    0.95
}
fn default_estimate() -> EstimateMode {
    EstimateMode::Online
}
fn default_min_size() -> usize {
    128
}
fn default_level() -> u32 {
    1
}

struct Factory {
    cfg: CompressConfig,
    bandwidth_bytes: Option<f64>,
    manifest: Manifest,
}

impl ServiceConfig for CompressConfig {
    const KIND: &'static str = "compress";

    fn into_factory(
        self,
        _name: &str,
    ) -> Result<Arc<dyn ServiceFactory>, relay_core::InvalidConfig> {
        if !self.algorithm.available() {
            return Err("algorithm = \"lzo\" needs relayd built with the `lzo` feature".into());
        }
        if !(self.ratio > 0.0 && self.ratio <= 1.0) {
            return Err(format!("ratio = {} must be in (0, 1]", self.ratio).into());
        }
        if !(self.compress_time_us >= 0.0 && self.compress_time_us < 1e6) {
            return Err(format!(
                "compress_time_us = {} is out of range",
                self.compress_time_us
            )
            .into());
        }
        if !(1..=9).contains(&self.level) {
            return Err(format!("level = {} must be 1-9", self.level).into());
        }
        let bandwidth_bytes = match &self.bandwidth {
            Some(b) => Some(parse_rate(b).map_err(|e| format!("bandwidth: {e}"))? as f64 / 8.0),
            None => None,
        };
        let manifest = Manifest {
            rewrites_payload: true,
            // Adaptive mode reads the egress queue; the others need no monitor.
            queue_monitor: self.mode == Mode::Adaptive,
            ..Manifest::new()
        };
        Ok(Arc::new(Factory {
            cfg: self,
            bandwidth_bytes,
            manifest,
        }))
    }
}

impl ServiceFactory for Factory {
    fn kind(&self) -> &'static str {
        "compress"
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn build(&self, counters: &Counters, res: &Resources) -> Box<dyn Service> {
        let c = |n: &str| counters.counter(n);
        let mut codecs = Codecs::new(self.cfg.level);
        let mut scratch = vec![0u8; Algorithm::max_output(0x10000)];
        // Touch the scratch buffer and the compressor's state once, so that the first
        // measured compression is not a page-faulting outlier that skews C.
        let warm = vec![0x5au8; 1500];
        let _ = codecs.compress(self.cfg.algorithm, &warm, &mut scratch);
        Box::new(Compress {
            declined: 0,
            alg: self.cfg.algorithm,
            mode: self.cfg.mode,
            min_size: self.cfg.min_size,
            bandwidth_bytes: self.bandwidth_bytes,
            monitor: res.get::<QueueMonitor>(),
            clock: res.clock().clone(),
            est: Estimate {
                c: self.cfg.compress_time_us * 1e-6,
                r: self.cfg.ratio,
                fixed: self.cfg.estimate == EstimateMode::Fixed,
                samples: 0,
            },
            codecs,
            scratch,
            n: Names {
                seen: c("seen"),
                compressed: c("compressed"),
                bytes_in: c("bytes_in"),
                bytes_out: c("bytes_out"),
                skip_small: c("skipped_small"),
                skip_fragment: c("skipped_fragment"),
                skip_compressed: c("skipped_ipcomp_or_esp"),
                skip_unfit: c("skipped_partial_or_gso"),
                skip_ipv6_ext: c("skipped_ipv6_ext"),
                skip_no_bandwidth: c("skipped_no_bandwidth"),
                skip_decision: c("skipped_decision"),
                skip_mode: c("skipped_mode"),
                skip_no_gain: c("skipped_no_gain"),
                probes: c("probes"),
                c_ns: counters.gauge("c_ns"),
                r_milli: counters.gauge("r_milli"),
                w_us: counters.gauge("w_us"),
            },
        })
    }
}

struct Names {
    seen: Counter,
    compressed: Counter,
    bytes_in: Counter,
    bytes_out: Counter,
    skip_small: Counter,
    skip_fragment: Counter,
    skip_compressed: Counter,
    skip_unfit: Counter,
    skip_ipv6_ext: Counter,
    skip_no_bandwidth: Counter,
    skip_decision: Counter,
    skip_mode: Counter,
    skip_no_gain: Counter,
    probes: Counter,
    c_ns: Counter,
    r_milli: Counter,
    w_us: Counter,
}

/// How old a queue view may be before it counts as unknown.
const STALE: std::time::Duration = std::time::Duration::from_millis(100);

/// One packet in this many of those the decision declines is compressed anyway, to keep
/// online estimates of C and R current.
const PROBE_EVERY: u64 = 64;

struct Compress {
    declined: u64,
    alg: Algorithm,
    mode: Mode,
    min_size: usize,
    bandwidth_bytes: Option<f64>,
    /// The egress queues (adaptive mode), as the daemon gave them.
    monitor: Option<Arc<QueueMonitor>>,
    /// What compressions are timed with (C), as the daemon gave it.
    clock: Clock,
    est: Estimate,
    codecs: Codecs,
    scratch: Vec<u8>,
    n: Names,
}

impl Compress {
    /// Why a packet is not a candidate, as the counter to bump; `None` if it is one.
    fn unfit(&self, pkt: &mut Packet) -> Option<&Counter> {
        let n = &self.n;
        let Some((l, direct)) = pkt.headers().map(|h| (h.layout(), h.direct())) else {
            return Some(&n.skip_unfit);
        };
        if pkt.is_partial() || pkt.meta.gso || l.len > 0xffff {
            Some(&n.skip_unfit)
        } else if l.fragment || l.l4.is_none() {
            Some(&n.skip_fragment)
        } else if l.proto == proto::IPCOMP || l.proto == proto::ESP {
            Some(&n.skip_compressed)
        } else if l.len < self.min_size {
            Some(&n.skip_small)
        } else if !direct {
            // IPComp goes right after the fixed header; extension headers are left alone.
            Some(&n.skip_ipv6_ext)
        } else {
            None
        }
    }
}

impl Service for Compress {
    fn process(&mut self, pkt: &mut Packet, _cx: &mut Context) -> Action {
        self.n.seen.inc();
        if let Some(counter) = self.unfit(pkt) {
            counter.inc();
            return Action::Continue;
        }
        let Ok(l) = pkt.layout() else {
            return Action::Continue;
        };
        let Some(off) = l.l4 else {
            return Action::Continue;
        };
        match self.mode {
            Mode::Never => {
                self.n.skip_mode.inc();
                return Action::Continue;
            }
            Mode::Always => {}
            Mode::Adaptive => {
                // A view older than this means the monitor stopped: treat the queue as unknown.
                let q = self
                    .monitor
                    .as_ref()
                    .and_then(|m| m.get(pkt.meta.outdev))
                    .filter(|q| q.age < STALE);
                let b = self
                    .bandwidth_bytes
                    .or(q.map(|q| q.rate_bytes as f64).filter(|&r| r > 0.0));
                let Some(b) = b else {
                    self.n.skip_no_bandwidth.inc();
                    return Action::Continue;
                };
                let w = q.map_or(0.0, |q| q.backlog_bytes as f64 / b);
                self.n.w_us.set((w * 1e6) as u64);
                if !should_compress(w, &self.est, l.len as f64, b) {
                    // Online estimates only learn from compressions: probe one packet in
                    // PROBE_EVERY that the decision turns down, or estimates that start (or
                    // became) pessimistic would never be corrected.
                    self.declined += 1;
                    if self.est.fixed || !self.declined.is_multiple_of(PROBE_EVERY) {
                        self.n.skip_decision.inc();
                        return Action::Continue;
                    }
                    self.n.probes.inc();
                }
            }
        }
        let plen = l.len - off;
        // C is the time this compression takes, not the packet's: read on the clock the
        // daemon handed in (a test's manual one), not the system's.
        let t0 = self.clock.now();
        let out = self
            .codecs
            .compress(self.alg, &pkt.data()[off..l.len], &mut self.scratch);
        let c = self.clock.now().saturating_duration_since(t0).as_secs_f64();
        let gain = out.filter(|&n| n + ipcomp::HEADER_LEN < plen);
        let ratio = gain.map_or(1.0, |n| (n + ipcomp::HEADER_LEN) as f64 / plen as f64);
        self.est.update(c, ratio);
        self.n.c_ns.set((self.est.c * 1e9) as u64);
        self.n.r_milli.set((self.est.r * 1000.0) as u64);
        let Some(n) = gain else {
            // RFC 3173 section 2.2: never send what compression made larger.
            self.n.skip_no_gain.inc();
            return Action::Continue;
        };
        let total = off + ipcomp::HEADER_LEN + n;
        self.n.bytes_in.add(l.len as u64);
        self.n.bytes_out.add(total as u64);
        let Some(t) = pkt.set_transport(l, ipcomp::HEADER_LEN + n, proto::IPCOMP) else {
            return Action::Continue;
        };
        let mut h = IpcompPacket::new_unchecked(t);
        h.set_header(l.proto, self.alg.cpi());
        h.payload_mut().copy_from_slice(&self.scratch[..n]);
        self.n.compressed.inc();
        Action::Continue
    }
}
