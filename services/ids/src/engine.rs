//! The matching engine: a rule set compiled once (shared by the queue threads of a service)
//! and a [`Detector`] per queue thread that inspects packets against it.
//!
//! Per packet: the header facts are read once; the content prefilter over every rule's
//! fast pattern (hashed 4-byte anchors, see `prefilter.rs`) runs once over the payload
//! (only if some content rule applies to the packet's protocol) and names the candidate
//! rules; the candidates and the rules without content (kept in one list per protocol)
//! are then checked fully, in Suricata's action order, stopping at the first `pass`.
//! Nothing is allocated per packet once the scratch vectors have grown to their working
//! size.

use crate::buffer::Buffer;
use crate::classify::Classes;
use crate::eve::{AlertEvent, EveWriter, flow_id};
use crate::inspect::inspect_list;
use crate::parse::{Ctx, RuleError, parse_text};
use crate::prefilter::{Prefilter, Scratch};
use crate::rule::{Rule, RuleAction, RuleProto, Vars, ip_key, port_match};
use crate::track::{Addrs, Tracker};
use relay_core::wire::{
    IcmpPacket, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket, icmp, proto, udp,
};
use relay_core::{Counter, Counters, CtInfo, IpVersion, Packet};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// Most alerts one packet raises (Suricata's default `packet-alert-max`); further
/// matching rules still act and count their hits.
pub const MAX_ALERTS_PER_PACKET: usize = 15;

/// Content-search steps one rule may take on one packet (backtracking over repeated
/// matches of relative contents); past it the rule does not match. Like Suricata's
/// inspection recursion limit, it bounds the cost of a hostile payload.
pub const INSPECT_BUDGET: u32 = 3000;

/// Packet classes rules are grouped by: TCP, UDP, ICMP (v4 and v6), anything else
/// (including non-first fragments, which have no transport header).
const CLASSES: usize = 4;

/// What to load.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Rules files, loaded in order.
    pub files: Vec<PathBuf>,
    /// Address and port variables (`HOME_NET = "[10.0.0.0/8]"`), without the `$`.
    pub vars: BTreeMap<String, String>,
    /// A `classification.config` adding to (or overriding) the built-in classtypes.
    pub classification: Option<PathBuf>,
}

/// Why a rule set could not be built at all (bad rules are not this: see
/// [`RuleSet::errors`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A rules or classification file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A classification file line is wrong.
    #[error("{}:{line}: {message}", path.display())]
    Classification {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The content prefilter could not be built (kept for compatibility: the hashed-anchor
    /// prefilter cannot fail to build).
    #[error("cannot build the content prefilter: {0}")]
    Prefilter(String),
}

/// A compiled rule set: the rules in evaluation order and the prefilter over them.
#[derive(Debug)]
pub struct RuleSet {
    rules: Vec<Rule>,
    errors: Vec<RuleError>,
    prefilter: Option<Prefilter>,
    /// Prefilter pattern id to the rules (indices, ascending) whose fast pattern it is.
    pat_rules: Vec<Vec<u32>>,
    /// Per packet class, the rules without a fast pattern that may apply (ascending).
    header_only: [Vec<u32>; CLASSES],
    /// Per packet class, whether any content rule may apply.
    class_has_content: [bool; CLASSES],
    /// Per rule, the index of its first pcre in the flattened pcre list.
    pcre_base: Vec<u32>,
}

impl RuleSet {
    /// Loads the rules files. A file that cannot be read is an error; rules that cannot be
    /// parsed are left out and listed in [`RuleSet::errors`].
    pub fn load(opts: &LoadOptions) -> Result<RuleSet, LoadError> {
        let mut classes = Classes::default();
        if let Some(path) = &opts.classification {
            let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            classes
                .load_text(&text)
                .map_err(|(line, message)| LoadError::Classification {
                    path: path.clone(),
                    line,
                    message,
                })?;
        }
        let ctx = Ctx {
            vars: &opts.vars,
            classes: &classes,
        };
        let (mut rules, mut errors, mut sids) = (Vec::new(), Vec::new(), HashSet::new());
        for path in &opts.files {
            let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
            let name: Arc<str> = Arc::from(path.display().to_string());
            parse_text(&text, &name, &ctx, &mut sids, &mut rules, &mut errors);
        }
        RuleSet::build(rules, errors)
    }

    /// Parses rules from a string (tests, benches, tools); `source` names it in errors.
    pub fn parse_str(
        text: &str,
        source: &str,
        vars: &BTreeMap<String, String>,
    ) -> Result<RuleSet, LoadError> {
        let classes = Classes::default();
        let ctx = Ctx {
            vars,
            classes: &classes,
        };
        let (mut rules, mut errors, mut sids) = (Vec::new(), Vec::new(), HashSet::new());
        parse_text(
            text,
            &Arc::from(source),
            &ctx,
            &mut sids,
            &mut rules,
            &mut errors,
        );
        RuleSet::build(rules, errors)
    }

    fn build(mut rules: Vec<Rule>, errors: Vec<RuleError>) -> Result<RuleSet, LoadError> {
        // Suricata's order: by action (pass, drop, reject, alert), then priority.
        rules.sort_by_key(|r| (r.action, r.priority, r.sid));
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut by_pat: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut pat_rules: Vec<Vec<u32>> = Vec::new();
        let mut header_only: [Vec<u32>; CLASSES] = Default::default();
        let mut class_has_content = [false; CLASSES];
        let mut pcre_base = Vec::with_capacity(rules.len());
        let mut npcre = 0u32;
        for (i, r) in rules.iter().enumerate() {
            pcre_base.push(npcre);
            npcre += r.pcres.len() as u32;
            let classes: &[usize] = match r.proto {
                RuleProto::Ip => &[0, 1, 2, 3],
                RuleProto::Tcp => &[0],
                RuleProto::Udp => &[1],
                RuleProto::Icmp => &[2],
                RuleProto::TcpOrUdp => &[0, 1],
            };
            match r.fast_pattern() {
                Some(p) => {
                    // One case-insensitive prefilter serves every pattern; a candidate's
                    // case is checked when the rule is verified.
                    let key = p.to_ascii_lowercase();
                    let id = *by_pat.entry(key.clone()).or_insert_with(|| {
                        patterns.push(key);
                        pat_rules.push(Vec::new());
                        patterns.len() - 1
                    });
                    pat_rules[id].push(i as u32);
                    for &c in classes {
                        class_has_content[c] = true;
                    }
                }
                None => {
                    for &c in classes {
                        header_only[c].push(i as u32);
                    }
                }
            }
        }
        let prefilter = (!patterns.is_empty()).then(|| Prefilter::new(&patterns));
        Ok(RuleSet {
            rules,
            errors,
            prefilter,
            pat_rules,
            header_only,
            class_has_content,
            pcre_base,
        })
    }

    /// The rules, in evaluation order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rules that could not be loaded.
    pub fn errors(&self) -> &[RuleError] {
        &self.errors
    }

    /// The rule with signature id `sid`.
    pub fn by_sid(&self, sid: u32) -> Option<&Rule> {
        self.rules.iter().find(|r| r.sid == sid)
    }

    /// True if some rule can stop traffic (drop, reject, ratelimit).
    pub fn blocks(&self) -> bool {
        self.rules.iter().any(|r| r.action.blocks())
    }

    /// True if any rule asks about the flow (`flow:`), which needs conntrack state.
    pub fn reads_flow_state(&self) -> bool {
        self.rules.iter().any(|r| r.flow.is_some())
    }

    /// Number of distinct patterns in the prefilter.
    pub fn prefilter_patterns(&self) -> usize {
        self.pat_rules.len()
    }
}

/// What the rules decided for a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// No rule matched.
    Clean,
    /// A `pass` rule matched: nothing else applies.
    Pass,
    /// Only `alert` rules matched (or `ratelimit` rules within their rate): let it go.
    Alert,
    /// A `drop` (or over-rate `ratelimit`) rule matched: drop it.
    Drop,
    /// A `reject` rule matched: answer with a reset / unreachable and drop it.
    Reject,
}

/// Per-instance counters (see docs/ids.md).
#[derive(Debug)]
struct Stats {
    alerts: Counter,
    suppressed: Counter,
    dropped: Counter,
    rejected: Counter,
    passed: Counter,
    eve_dropped: Counter,
    no_ct: Counter,
}

/// What a rule check needs besides the rule set, borrowed apart from the scratch lists.
#[derive(Debug)]
struct State {
    tracker: Tracker,
    regexes: Vec<regex::bytes::Regex>,
    no_ct: Counter,
}

/// The facts of a packet the rules look at, read once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PktInfo {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    ks: u128,
    kd: u128,
    pub(crate) sport: Option<u16>,
    pub(crate) dport: Option<u16>,
    pub(crate) proto: u8,
    class: usize,
    ttl: u8,
    tcp_flags: u8,
    pub(crate) icmp: Option<(u8, u8)>,
    pay: (usize, usize),
    ct: Option<CtInfo>,
}

/// Reads the facts of a packet, or `None` if it cannot be parsed.
pub(crate) fn pkt_info(pkt: &mut Packet) -> Option<PktInfo> {
    let l = pkt.layout().ok()?;
    let ct = pkt.meta.ct;
    let data = pkt.data();
    let (src, dst, ttl): (IpAddr, IpAddr, u8) = match l.version {
        IpVersion::V4 => {
            let ip = Ipv4Packet::new_unchecked(data);
            (ip.src_addr().into(), ip.dst_addr().into(), ip.ttl())
        }
        IpVersion::V6 => {
            let ip = Ipv6Packet::new_unchecked(data);
            (ip.src_addr().into(), ip.dst_addr().into(), ip.hop_limit())
        }
    };
    let end = l.len.min(data.len());
    let mut p = PktInfo {
        src,
        dst,
        ks: ip_key(src),
        kd: ip_key(dst),
        sport: None,
        dport: None,
        proto: l.proto,
        class: 3,
        ttl,
        tcp_flags: 0,
        icmp: None,
        pay: (end, end),
        ct,
    };
    let Some(off) = l.l4 else { return Some(p) };
    let l4 = data.get(off..end)?;
    match l.proto {
        proto::TCP => {
            let t = TcpPacket::new_checked(l4).ok()?;
            p.sport = Some(t.src_port());
            p.dport = Some(t.dst_port());
            p.tcp_flags = t.flags();
            p.class = 0;
            p.pay = ((off + t.header_len()).min(end), end);
        }
        // The length field is not checked: the rules see the bytes as they came.
        proto::UDP if l4.len() >= udp::HEADER_LEN => {
            let u = UdpPacket::new_unchecked(l4);
            p.sport = Some(u.src_port());
            p.dport = Some(u.dst_port());
            p.class = 1;
            p.pay = (off + udp::HEADER_LEN, end);
        }
        proto::ICMP | proto::ICMPV6 if l4.len() >= icmp::HEADER_LEN => {
            let m = IcmpPacket::new_unchecked(l4);
            p.icmp = Some((m.msg_type(), m.code()));
            p.class = 2;
            p.pay = (off + icmp::HEADER_LEN, end);
        }
        _ => p.pay = (off, end),
    }
    Some(p)
}

/// The per-queue-thread inspector.
#[derive(Debug)]
pub struct Detector {
    set: Arc<RuleSet>,
    st: State,
    hits: Vec<Counter>,
    scratch: Scratch,
    cand: Vec<u32>,
    matched: Vec<u32>,
    stats: Stats,
    eve: Option<Arc<EveWriter>>,
}

impl Detector {
    /// A detector over `set`, registering its counters (`alerts`, ..., `sid:N` per rule)
    /// in `counters`, sending alerts to `eve`, tracking at most `track_max` keys.
    pub fn new(
        set: Arc<RuleSet>,
        counters: &Counters,
        eve: Option<Arc<EveWriter>>,
        track_max: usize,
    ) -> Detector {
        let c = |n: &str| counters.counter(n);
        let stats = Stats {
            alerts: c("alerts"),
            suppressed: c("suppressed"),
            dropped: c("dropped"),
            rejected: c("rejected"),
            passed: c("passed"),
            eve_dropped: c("eve_dropped"),
            no_ct: c("no_ct"),
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
        Detector {
            st: State {
                tracker: Tracker::new(track_max, overflow),
                regexes,
                no_ct: stats.no_ct.clone(),
            },
            hits,
            scratch: set
                .prefilter
                .as_ref()
                .map(Prefilter::scratch)
                .unwrap_or_default(),
            cand: Vec::with_capacity(64),
            matched: Vec::with_capacity(16),
            stats,
            eve,
            set,
        }
    }

    /// The rule set in use.
    pub fn rule_set(&self) -> &Arc<RuleSet> {
        &self.set
    }

    /// The sids of the rules the last packet matched, in evaluation order.
    pub fn matched_sids(&self) -> impl Iterator<Item = u32> + '_ {
        self.matched.iter().map(|&i| self.set.rules[i as usize].sid)
    }

    /// Inspects one packet at time `now` (the batch time): counts hits, raises alerts and
    /// says what to do with the packet.
    pub fn inspect(&mut self, pkt: &mut Packet, now: Instant) -> Outcome {
        self.matched.clear();
        let Some(p) = pkt_info(pkt) else {
            return Outcome::Clean;
        };
        let payload = &pkt.data()[p.pay.0..p.pay.1];
        let set = &*self.set;
        self.cand.clear();
        if set.class_has_content[p.class]
            && !payload.is_empty()
            && let Some(pf) = &set.prefilter
        {
            let cand = &mut self.cand;
            // Each pattern is reported once per scan.
            pf.scan(payload, &mut self.scratch, |id| {
                cand.extend_from_slice(&set.pat_rules[id as usize]);
            });
            // Each rule has one fast pattern, so the list has no duplicates.
            self.cand.sort_unstable();
        }
        let ho = &set.header_only[p.class];
        let (mut a, mut b) = (0, 0);
        loop {
            let i = match (self.cand.get(a), ho.get(b)) {
                (Some(&x), Some(&y)) if x < y => {
                    a += 1;
                    x
                }
                (_, Some(&y)) => {
                    b += 1;
                    y
                }
                (Some(&x), None) => {
                    a += 1;
                    x
                }
                (None, None) => break,
            };
            if check(set, &mut self.st, i as usize, &p, payload, now) {
                self.matched.push(i);
                if set.rules[i as usize].action == RuleAction::Pass {
                    break;
                }
            }
        }
        self.decide(&p, now)
    }

    fn decide(&mut self, p: &PktInfo, now: Instant) -> Outcome {
        let set = &*self.set;
        let Some(&first) = self.matched.first() else {
            return Outcome::Clean;
        };
        if set.rules[first as usize].action == RuleAction::Pass {
            self.hits[first as usize].inc();
            self.stats.passed.inc();
            return Outcome::Pass;
        }
        let addrs = Addrs {
            src: p.ks,
            dst: p.kd,
        };
        let mut out = Outcome::Alert;
        let mut alerts = 0;
        for &i in &self.matched {
            let r = &set.rules[i as usize];
            self.hits[i as usize].inc();
            match r.action {
                RuleAction::Reject => out = Outcome::Reject,
                RuleAction::Drop | RuleAction::Ratelimit if out != Outcome::Reject => {
                    out = Outcome::Drop
                }
                _ => {}
            }
            let alert = match &r.threshold {
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
                    blocked: r.action.blocks(),
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

/// The full check of rule `i` against a packet.
fn check(
    set: &RuleSet,
    st: &mut State,
    i: usize,
    p: &PktInfo,
    payload: &[u8],
    now: Instant,
) -> bool {
    let r = &set.rules[i];
    let proto_ok = match r.proto {
        RuleProto::Ip => true,
        RuleProto::Tcp => p.class == 0,
        RuleProto::Udp => p.class == 1,
        RuleProto::Icmp => p.class == 2,
        RuleProto::TcpOrUdp => p.class <= 1,
    };
    if !proto_ok {
        return false;
    }
    let way = |s: u128, sp: Option<u16>, d: u128, dp: Option<u16>| {
        r.src.eval(&|n| n.contains(s))
            && port_match(&r.sport, sp)
            && r.dst.eval(&|n| n.contains(d))
            && port_match(&r.dport, dp)
    };
    if !(way(p.ks, p.sport, p.kd, p.dport) || r.bidir && way(p.kd, p.dport, p.ks, p.sport)) {
        return false;
    }
    if r.ttl.is_some_and(|c| !c.test(p.ttl.into()))
        || r.flags
            .is_some_and(|f| p.class != 0 || !f.test(p.tcp_flags))
        || r.itype
            .is_some_and(|c| p.icmp.is_none_or(|(t, _)| !c.test(t.into())))
        || r.icode
            .is_some_and(|c| p.icmp.is_none_or(|(_, k)| !c.test(k.into())))
        || r.dsize.is_some_and(|c| !c.test(payload.len() as u32))
    {
        return false;
    }
    if let Some(f) = r.flow {
        if f.needs_ct() && p.ct.is_none() {
            st.no_ct.inc();
        }
        if !f.test(p.ct) {
            return false;
        }
    }
    let base = set.pcre_base[i] as usize;
    let regexes = st.regexes.get(base..base + r.pcres.len()).unwrap_or(&[]);
    let mut vars = Vars::default();
    for list in &r.lists {
        // Application-layer buffers are not filled yet: a rule over them does not match.
        if list.buffer != Buffer::Payload {
            return false;
        }
        let mut budget = INSPECT_BUDGET;
        if !inspect_list(list, payload, regexes, &mut vars, &mut budget) {
            return false;
        }
    }
    // Stateful last: only packets that match everything else count towards a rate.
    let addrs = Addrs {
        src: p.ks,
        dst: p.kd,
    };
    if let Some(f) = &r.filter
        && !st.tracker.filter(i as u32, f, addrs, now)
    {
        return false;
    }
    if let Some(rate) = &r.rate
        && !st.tracker.over_rate(i as u32, rate, addrs, now)
    {
        return false;
    }
    true
}
