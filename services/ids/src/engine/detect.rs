//! The per-queue-thread [`Detector`]: the flow table, stream reassembly and application
//! layer of the thread's flows, and the inspection of each packet against the rule set.
//!
//! Per packet:
//! 1. the header facts are read once;
//! 2. if the rules need flows (see [`RuleSet::needs_flows`]), the packet's flow is found
//!    or created; a TCP payload goes into its direction's reassembled stream, and the
//!    new in-order bytes (or a UDP datagram) go to the flow's application layer;
//! 3. packet rules: one prefilter scan over the payload, or over the stream window that
//!    ends with it (the bytes this packet completed plus up to `stream_lookback` bytes
//!    before them), names the candidates; they and the rules without a payload fast
//!    pattern are checked fully in Suricata's order, stopping at the first `pass`. A TCP
//!    payload rule matches the packet's payload or, unless `flow:no_stream`, the stream
//!    window provided the match needs the bytes this packet completed (so a pattern split
//!    across segments is found once, on the segment that completes it);
//! 4. transaction rules (`engine::app`) are checked against the transactions of the
//!    flow that progressed;
//! 5. the verdict: drop if any matching rule drops, alerts (at most 15), counters.
//!
//! Nothing is allocated per packet once the scratch vectors have grown, except by the flow
//! table, the streams and the parsers (per flow, within their bounds) and the tracker
//! (per new key).

use super::app::{
    FlowAction, FlowState, after_feed, flow_verdict, memcap_exception, progress, ready, tx_record,
};
use super::exception::{ExceptionCounters, ExceptionPolicy, Exceptions};
use super::offload::{OffloadOptions, OffloadStats};
use super::packet::{PktInfo, checksum_ok, ipv6_options_ok, pkt_info};
use super::payload::{Win, list_matches, payload_matches};
use super::reclaim::Reclaim;
use super::{MAX_ALERTS_PER_PACKET, Outcome, RuleSet};
use crate::applayer::budget::{AppBudget, AppCounters, DEFAULT_APP_MEMCAP};
use crate::applayer::buffer::Buffer;
use crate::applayer::http::HttpLimits;
use crate::applayer::{AppProto, Dir, Progress, Transaction};
use crate::decode::{DecodeOptions, Decoder};
use crate::engine::track::{Addrs, Tracker};
use crate::eve::{AlertEvent, EveWriter, flow_id};
use crate::flow::stream::Truncation;
use crate::flow::{
    FlowCounters, FlowLimits, FlowPacket, FlowTable, Invalid, StreamEvent, TcpHeader, TcpOptions,
};
use crate::outcome::stricter;
use crate::prefilter::{Prefilter, Scratch};
use crate::rules::flowbits::{self, FlowBits};
use crate::rules::parse::NewAction;
use crate::rules::rule::{RuleAction, RuleProto, StreamMode, Vars, port_match};
use relay_core::{Checksum, Counter, Counters, Hook, Offload, Packet};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

mod checks;
mod stages;
mod vote;
use checks::{TxCheck, addrs, check, check_tx, rate_filters};

/// Default bytes of a TCP stream before a packet's new bytes that stream inspection looks
/// at (Suricata inspects its raw stream in chunks of 2,560 bytes).
pub const DEFAULT_STREAM_LOOKBACK: usize = 2048;

/// TCP RST.
const RST: u8 = 0x04;

/// The TCP header facts the flow table reads, from packet `p` (`data` its bytes).
/// Without `normalize`, only what reassembly itself needs (TCP Fast Open).
fn tcp_header(
    p: &PktInfo,
    data: &[u8],
    meta: &relay_core::PacketMeta,
    normalize: bool,
) -> TcpHeader {
    let opts =
        p.l4.and_then(|o| data.get(o + 20..p.pay.0))
            .map(TcpOptions::parse)
            .unwrap_or_default();
    let field = |at: usize| {
        p.l4.and_then(|o| data.get(o + at..o + at + 2))
            .map_or(0, |w| u16::from_be_bytes([w[0], w[1]]))
    };
    let (window, urgent) = (field(14), field(18));
    // The TTL says whether a segment reaches its receiver only where relayd sits on the
    // forwarding path at a known point: live, at PREROUTING (before the kernel's
    // decrement) or FORWARD / POSTROUTING (after it). Not for captures or AF_XDP.
    let ttl_before_decrement = match (meta.hook, meta.csum) {
        (_, Checksum::Unknown) => None,
        (Some(Hook::Prerouting), _) => Some(true),
        (Some(Hook::Forward | Hook::Postrouting), _) => Some(false),
        _ => None,
    };
    if !normalize {
        return TcpHeader {
            seq: p.seq,
            ack: p.ack,
            flags: p.tcp_flags,
            tfo: opts.tfo,
            ..TcpHeader::default()
        };
    }
    TcpHeader {
        seq: p.seq,
        ack: p.ack,
        flags: p.tcp_flags,
        tfo: opts.tfo,
        window,
        tsval: opts.tsval,
        tsecr: opts.tsecr,
        wscale: opts.wscale,
        urgent,
        sig: opts.sig,
        ttl: p.ttl,
        ttl_before_decrement,
    }
}

/// The bounds and settings of a detector beyond its rule set.
#[derive(Debug, Clone)]
pub struct DetectorOptions {
    /// Most keys tracked for `threshold`, `detection_filter` and `rate`.
    pub track_max: usize,
    /// The flow table's and streams' bounds.
    pub flows: FlowLimits,
    /// The HTTP parser's bounds (the defaults: libhtp's).
    pub(crate) http: HttpLimits,
    /// Bytes of stream before a packet's new bytes that stream inspection includes.
    pub stream_lookback: usize,
    /// Keep a flow table at all (default true). Without it the engine inspects packets
    /// only: no streams, no application layer, no flowbits; `flow:` from conntrack alone.
    pub flow_tracking: bool,
    /// Tunnels and fragments: the inner and reassembled packets inspected too.
    pub decode: DecodeOptions,
    /// Judge each segment as its receiving host would (`crate::flow` normalization:
    /// checksums, flags, PAWS, window, acknowledgements, RST, TTL): one it would
    /// discard is never inserted into a stream or parser. Default true.
    pub normalize: bool,
    /// Inline mode: drop what the receiving host would discard, and segments that
    /// overlap received bytes with different data (Suricata's `stream.drop-invalid`).
    /// Default true; the service defaults it to whether the rules can block.
    pub drop_invalid: bool,
    /// Bytes all application-layer parser states of the detector may hold (`app_memcap`).
    pub app_memcap: usize,
    /// What happens to a flow a memcap refused memory (`exception_policy`).
    pub exception_policy: ExceptionPolicy,
    /// Which offload votes the detector casts (default: none; see [`Detector::offload`]).
    pub offload: OffloadOptions,
}

impl Default for DetectorOptions {
    fn default() -> DetectorOptions {
        DetectorOptions {
            track_max: 65_536,
            flows: FlowLimits::default(),
            http: HttpLimits::default(),
            stream_lookback: DEFAULT_STREAM_LOOKBACK,
            flow_tracking: true,
            decode: DecodeOptions::default(),
            normalize: true,
            drop_invalid: true,
            app_memcap: DEFAULT_APP_MEMCAP,
            exception_policy: ExceptionPolicy::Auto,
            offload: OffloadOptions::default(),
        }
    }
}

/// Per-instance counters (see docs/ids.md).
#[derive(Debug)]
struct Stats {
    alerts: Counter,
    suppressed: Counter,
    dropped: Counter,
    rejected: Counter,
    passed: Counter,
    /// Packets of flows a `pass` rule decided, let go uninspected.
    flow_passed: Counter,
    /// Packets of flows a `drop` / `reject` rule decided, dropped uninspected.
    flow_dropped: Counter,
    eve_dropped: Counter,
    no_ct: Counter,
    /// Segments the receiver would discard, by [`Invalid::index`].
    invalid: [Counter; Invalid::ALL.len()],
    /// Packets dropped because the receiver would discard them.
    invalid_dropped: Counter,
}

/// What a rule check needs besides the rule set, borrowed apart from the scratch lists.
#[derive(Debug)]
struct State {
    tracker: Tracker,
    regexes: Vec<regex::bytes::Regex>,
    no_ct: Counter,
}

/// The flow facts a rule check reads (and the flowbits it may change).
struct FlowCx<'a> {
    dir: Dir,
    established: bool,
    /// The flow table follows this TCP connection's state (see [`crate::flow::Flow::synced`]), so its
    /// direction and `established` answer `flow` before conntrack's.
    synced: bool,
    app: Option<AppProto>,
    bits: &'a mut FlowBits,
    id: u64,
}

/// The per-queue-thread inspector.
#[derive(Debug)]
pub struct Detector {
    set: Arc<RuleSet>,
    st: State,
    hits: Vec<Counter>,
    scratch: Scratch,
    /// Per protocol, per buffer prefilter, its scratch.
    app_scratch: Vec<Vec<Scratch>>,
    cand: Vec<u32>,
    tx_cand: Vec<u32>,
    matched: Vec<u32>,
    /// The matches of this packet whose action a threshold file's `rate_filter` changed:
    /// (rule, action in force), at most one per match.
    over: Vec<(u32, RuleAction)>,
    /// The packet rules in `matched` that matched the reassembled stream.
    stream_hits: Vec<u32>,
    stats: Stats,
    eve: Option<Arc<EveWriter>>,
    flows: Option<FlowTable<FlowState>>,
    /// Tunnel decapsulation and fragment reassembly (`crate::decode`).
    decoder: Option<Box<Decoder>>,
    /// The outer packet's matches while its layers are inspected.
    layer_matched: Vec<u32>,
    opts: DetectorOptions,
    /// The application-layer memcap every parser state charges (`app_memcap`).
    app_budget: AppBudget,
    /// The exception policy in force and its counters.
    exceptions: Exceptions,
    /// Frees parser memory of idle flows when `app_memcap` runs high.
    reclaim: Reclaim,
    /// The offload vote on the packet being inspected (see [`Detector::offload`]).
    vote: Option<Offload>,
    /// The offload counters.
    offload_stats: OffloadStats,
    /// Votes are configured ([`OffloadOptions::enabled`] as built); they are cast only
    /// while the datapath also carries them out ([`Detector::set_datapath_offloads`]).
    offload_configured: bool,
}

impl Detector {
    /// A detector over `set`, registering its counters (`alerts`, ..., `sid:N` per rule)
    /// in `counters`, sending alerts to `eve`, tracking at most `track_max` keys, with the
    /// default flow, stream and HTTP bounds.
    pub fn new(
        set: Arc<RuleSet>,
        counters: &Counters,
        eve: Option<Arc<EveWriter>>,
        track_max: usize,
    ) -> Detector {
        let opts = DetectorOptions {
            track_max,
            ..DetectorOptions::default()
        };
        Detector::with_options(set, counters, eve, opts)
    }

    /// A detector with explicit bounds (see [`DetectorOptions`]).
    pub fn with_options(
        set: Arc<RuleSet>,
        counters: &Counters,
        eve: Option<Arc<EveWriter>>,
        opts: DetectorOptions,
    ) -> Detector {
        let c = |n: &str| counters.counter(n);
        let stats = Stats {
            alerts: c("alerts"),
            suppressed: c("suppressed"),
            dropped: c("dropped"),
            rejected: c("rejected"),
            passed: c("passed"),
            flow_passed: c("flow_passed"),
            flow_dropped: c("flow_dropped"),
            eve_dropped: c("eve_dropped"),
            no_ct: c("no_ct"),
            invalid: Invalid::ALL.map(|r| c(r.counter())),
            invalid_dropped: c("invalid_dropped"),
        };
        let overflow = c("track_overflow");
        // A regex clone has its own match cache, so queue threads share no lock.
        let regexes = set
            .rules
            .iter()
            .flat_map(|r| r.pcres.iter().map(|p| p.re.clone()))
            .collect();
        let hits = set
            .rules
            .iter()
            .map(|r| c(&format!("sid:{}", r.sid)))
            .collect();
        // A `pass`, `drop` or `reject` rule may decide a whole flow, which needs the table.
        let flow_actions = set.rules.iter().any(|r| {
            matches!(
                r.action,
                RuleAction::Pass | RuleAction::Drop | RuleAction::Reject
            )
        });
        let mut limits = opts.flows.clone();
        limits.reject_different = opts.normalize && opts.drop_invalid;
        limits.normalize = opts.normalize;
        let flows = ((set.needs_flows || flow_actions) && opts.flow_tracking)
            .then(|| FlowTable::new(limits, FlowCounters::register(counters)));
        let mut decode = opts.decode.clone();
        decode.drop_invalid = opts.drop_invalid;
        let decoder = decode
            .enabled
            .then(|| Box::new(Decoder::new(decode, counters)));
        let app_budget = AppBudget::new(opts.app_memcap, AppCounters::register(counters));
        let exceptions = Exceptions::new(
            opts.exception_policy,
            set.blocks(),
            ExceptionCounters::register(counters),
        );
        Detector {
            app_budget,
            exceptions,
            reclaim: Reclaim::new(counters),
            vote: None,
            offload_stats: OffloadStats::register(counters),
            offload_configured: opts.offload.enabled,
            decoder,
            layer_matched: Vec::new(),
            st: State {
                tracker: Tracker::new(opts.track_max, overflow),
                regexes,
                no_ct: stats.no_ct.clone(),
            },
            hits,
            scratch: set
                .prefilter
                .as_ref()
                .map(Prefilter::scratch)
                .unwrap_or_default(),
            app_scratch: set.tx.scratch(),
            cand: Vec::with_capacity(64),
            tx_cand: Vec::with_capacity(64),
            matched: Vec::with_capacity(16),
            over: Vec::new(),
            stream_hits: Vec::with_capacity(16),
            stats,
            eve,
            flows,
            opts,
            set,
        }
    }

    /// The rule set in use.
    pub fn rule_set(&self) -> &Arc<RuleSet> {
        &self.set
    }

    /// The sids of the rules the last packet matched, in evaluation order (then those its
    /// inner or reassembled packets matched).
    pub fn matched_sids(&self) -> impl Iterator<Item = u32> + '_ {
        self.matched.iter().map(|&i| self.set.rules[i as usize].sid)
    }

    /// The offload vote on the last packet [`Detector::inspect`] let through: the flow's
    /// later packets (in the vote's scope) could change no verdict and raise no alert, so
    /// the datapath may stop queueing them (docs/ids.md, "Offload"). `None` unless
    /// [`DetectorOptions::offload`] allows it; never for a packet dropped, a fragment, or
    /// a packet carrying inner packets (a tunnel's).
    pub fn offload(&self) -> Option<Offload> {
        self.vote
    }

    /// Tells the detector whether the datapath carries out its votes (the queue's
    /// `offload`, [`relay_core::Context::offloads`]): where it does not, no vote is cast
    /// and no flow is taken for one whose end may go unseen. A detector is built voting
    /// as configured.
    pub fn set_datapath_offloads(&mut self, on: bool) {
        self.opts.offload.enabled = self.offload_configured && on;
    }

    /// Flows tracked now, and the stream bytes they hold.
    pub fn flow_usage(&self) -> (usize, usize) {
        self.flows.as_ref().map_or((0, 0), |t| (t.len(), t.mem()))
    }

    /// Bytes the application-layer parser states hold now, and the cap (`app_memcap`).
    pub fn app_usage(&self) -> (usize, usize) {
        (self.app_budget.used(), self.app_budget.cap())
    }

    /// Fragment trains held for reassembly, and the bytes they hold.
    pub fn defrag_usage(&self) -> (usize, usize) {
        self.decoder.as_ref().map_or((0, 0), |d| d.defrag_usage())
    }

    /// Inspects one packet at time `now` (the batch time): counts hits, raises alerts and
    /// says what to do with the packet. The packet's layers (a tunnel's inner packet, the
    /// packet its fragment completes: `crate::decode`) are inspected after it as packets
    /// of their own, and the outcome is the strictest of all.
    pub fn inspect(&mut self, pkt: &mut Packet, now: Instant) -> Outcome {
        let out = self.inspect_one(pkt, now);
        let vote = self.vote.take().filter(|_| !out.blocks());
        let Some(mut dec) = self.decoder.take() else {
            self.cast(vote);
            return out;
        };
        let mut outer = std::mem::take(&mut self.layer_matched);
        outer.clear();
        let mut layers = dec.layers(pkt.data(), now);
        let mut layered = false;
        // Inner packets never vote: their vote would be thrown away (a flow that carries
        // them stays inline), yet mark their flows as offloaded and scan the rules.
        let voting = std::mem::replace(&mut self.opts.offload.enabled, false);
        while let Some(p) = layers.next() {
            layered = true;
            outer.extend_from_slice(&self.matched);
            let o = self.inspect_one(p, now);
            layers.outcome(o);
        }
        self.opts.offload.enabled = voting;
        let inner = layers.finish(out);
        if !outer.is_empty() {
            outer.extend_from_slice(&self.matched);
            std::mem::swap(&mut outer, &mut self.matched);
        }
        self.layer_matched = outer;
        self.decoder = Some(dec);
        let out = stricter(out, inner);
        // Inner packets are inspected as packets of their own: a flow that carries them
        // stays inline.
        self.cast(vote.filter(|_| !layered && !out.blocks()));
        out
    }

    /// Records `vote` as the last packet's, counting it.
    fn cast(&mut self, vote: Option<Offload>) {
        if let Some(v) = vote {
            self.offload_stats.voted(v);
        }
        self.vote = vote;
    }

    /// Inspects one packet (an outer or an inner one), stage by stage (`detect::stages`).
    fn inspect_one(&mut self, pkt: &mut Packet, now: Instant) -> Outcome {
        self.matched.clear();
        self.stream_hits.clear();
        self.over.clear();
        self.vote = None;
        let Some(mut p) = pkt_info(pkt, self.opts.decode.enabled) else {
            return Outcome::Clean;
        };
        let Detector {
            set,
            st,
            scratch,
            app_scratch,
            cand,
            tx_cand,
            matched,
            over,
            stream_hits,
            flows,
            opts,
            stats,
            app_budget,
            exceptions,
            reclaim,
            vote,
            offload_stats,
            ..
        } = self;
        let set: &RuleSet = set;
        let meta = pkt.meta;
        let data = pkt.data();
        let payload = data.get(p.pay.0..p.pay.1).unwrap_or(&[]);
        // A segment or datagram whose checksum the receiver refuses is not inserted
        // anywhere (and dropped inline); a partial copy cannot be judged. With
        // `drop_invalid` such a packet is dropped after the rules have seen it (as a
        // packet: nothing of it reaches a stream or parser), so that `stream-event` rules
        // and alerts on it still fire, as in Suricata's IPS mode.
        let ip_invalid = stages::ip_invalid(opts, &p, data, &meta);
        let mut drop_invalid = false;
        if let Some(why) = ip_invalid {
            stats.invalid[why.index()].inc();
            drop_invalid = opts.drop_invalid;
        }
        if let Some(t) = flows.as_mut() {
            reclaim.run(t, app_budget, exceptions, now);
        }
        let mut fref = match flows {
            Some(t) if p.class <= 1 && ip_invalid.is_none() => {
                stages::find_flow(t, &p, data, &meta, payload, opts.normalize, now)
            }
            _ => None,
        };
        if let Some(f) = fref.as_ref() {
            drop_invalid |= stages::flow_invalid(f, opts, stats, &mut p);
        }
        if drop_invalid {
            stats.invalid_dropped.inc();
        }
        let or_drop = |out| {
            if drop_invalid {
                stricter(out, Outcome::Drop)
            } else {
                out
            }
        };
        // Votes only for an unfragmented TCP or UDP packet whose verdict is not a drop
        // already, and never on a SYN or SYN-ACK: a connection starts there (perhaps on
        // the tuple of an old one whose conntrack entry still carries its offload), and
        // is inspected from its start.
        let syn = p.class == 0 && p.tcp_flags & relay_core::wire::tcp::flags::SYN != 0;
        let voting =
            opts.offload.enabled && p.class <= 1 && p.l4.is_some() && !drop_invalid && !syn;
        let mut fs = match fref.as_mut() {
            Some(f) => {
                match stages::flow_stage(f, set, opts, stats, app_budget, exceptions, &p, payload) {
                    Ok(fs) => Some(fs),
                    Err(out) => {
                        *vote =
                            (voting && out == Outcome::Pass).then(|| f.flow.state.offload.passed());
                        if vote.is_some() {
                            f.set_offloaded();
                        }
                        return or_drop(out);
                    }
                }
            }
            None => None,
        };
        let iponly = fs.as_ref().is_none_or(|fs| fs.iponly);
        let (win, fx) = match fs.as_mut() {
            Some(fs) => {
                let (win, fx) = fs.window();
                (win, Some(fx))
            }
            None => (None, None),
        };
        let passed = stages::packet_rules(
            set,
            st,
            scratch,
            cand,
            matched,
            stream_hits,
            &p,
            payload,
            win.as_ref(),
            fx,
            iponly,
            now,
        );
        if !passed && let Some(fs) = fs.as_mut() {
            stages::tx_rules(set, st, app_scratch, tx_cand, matched, fs, &p, payload, now);
        }
        let (flow, decided_now) = match fs {
            Some(fs) => stages::settle_flow(fs, set, st, matched, over, stream_hits, &p, opts, now),
            None => {
                rate_filters(set, st, matched, over, &p, None, now);
                (None, false)
            }
        };
        if let Some(f) = fref.as_mut() {
            *vote = vote::settle(f, decided_now, set, opts, voting, offload_stats);
            if vote.is_some() {
                f.set_offloaded();
            }
        }
        let out = self.decide(&p, flow, now);
        or_drop(out)
    }

    fn decide(&mut self, p: &PktInfo, flow: Option<u64>, now: Instant) -> Outcome {
        let set = &*self.set;
        let Some(&first) = self.matched.first() else {
            return Outcome::Clean;
        };
        let over = &self.over;
        let action = |i: u32| set.acting(i, over).map_or(RuleAction::Alert, |(_, a)| a);
        if action(first) == RuleAction::Pass {
            self.hits[first as usize].inc();
            self.stats.passed.inc();
            return Outcome::Pass;
        }
        let addrs = addrs(p, flow);
        let mut out = Outcome::Alert;
        let mut alerts = 0;
        for &i in &self.matched {
            let r = &set.rules[i as usize];
            self.hits[i as usize].inc();
            let act = action(i);
            match act {
                RuleAction::Reject => out = Outcome::Reject,
                RuleAction::Drop | RuleAction::Ratelimit if out != Outcome::Reject => {
                    out = Outcome::Drop
                }
                // A pass after other matches (a transaction rule's) only stops alerts.
                RuleAction::Pass => break,
                _ => {}
            }
            if r.noalert {
                continue;
            }
            let suppressed = r
                .global
                .as_ref()
                .is_some_and(|g| g.suppress.iter().any(|s| s.hits(p.ks, p.kd)));
            let alert = match &r.threshold {
                _ if suppressed => false,
                Some(t) => self.st.tracker.alert(i, t, addrs, now),
                None => true,
            };
            if !alert || alerts >= MAX_ALERTS_PER_PACKET {
                self.stats.suppressed.inc();
                continue;
            }
            alerts += 1;
            self.stats.alerts.inc();
            if let Some(eve) = &self.eve {
                let ev = AlertEvent {
                    time: SystemTime::now(),
                    rule: i,
                    blocked: act.blocks(),
                    src: p.src,
                    dst: p.dst,
                    sport: p.sport,
                    dport: p.dport,
                    proto: p.proto,
                    icmp: p.icmp,
                    flow_id: flow_id(
                        p.src,
                        p.dst,
                        p.sport.unwrap_or(0),
                        p.dport.unwrap_or(0),
                        p.proto,
                    ),
                };
                if !eve.try_send(ev) {
                    self.stats.eve_dropped.inc();
                }
            }
        }
        match out {
            Outcome::Reject => self.stats.rejected.inc(),
            Outcome::Drop => self.stats.dropped.inc(),
            _ => {}
        }
        out
    }
}
