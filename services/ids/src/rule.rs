//! A parsed rule and the per-packet checks it is made of: address and port expressions,
//! numeric comparisons, TCP flags, flow state, and `content` searches with their modifiers.
//! Everything here is immutable after parsing and shared by every queue thread.

use memchr::memmem;
use relay_core::{CtInfo, CtState};
use std::sync::Arc;

/// A rule's action, in the order Suricata applies them (`pass` first, then `drop`,
/// `reject`, relayd's `ratelimit` (a drop for packets over the rate), `alert`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum RuleAction {
    /// Stop inspecting the packet: no alert, no drop, from any rule.
    Pass,
    /// Drop the packet and alert.
    Drop,
    /// Send a TCP RST (or ICMP port unreachable), drop the packet and alert.
    Reject,
    /// Drop the packets of the rule's traffic beyond its rate (`rate` or
    /// `detection_filter`), and alert on them; packets within the rate pass.
    Ratelimit,
    /// Alert only.
    Alert,
}

impl RuleAction {
    /// The action's keyword in the rule language.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleAction::Pass => "pass",
            RuleAction::Drop => "drop",
            RuleAction::Reject => "reject",
            RuleAction::Ratelimit => "ratelimit",
            RuleAction::Alert => "alert",
        }
    }

    /// True for actions that stop the packet.
    pub fn blocks(self) -> bool {
        matches!(
            self,
            RuleAction::Drop | RuleAction::Reject | RuleAction::Ratelimit
        )
    }
}

/// The protocol a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RuleProto {
    /// Any IP packet.
    Ip,
    /// TCP (first fragments and whole packets).
    Tcp,
    /// UDP.
    Udp,
    /// ICMP and ICMPv6.
    Icmp,
}

/// An expression over addresses or ports: `any`, one item, or a list of possibly negated
/// expressions (a list matches when some positive item matches, or it has none, and no
/// negated item matches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expr<T> {
    Any,
    Item(T),
    List(Vec<(bool, Expr<T>)>),
}

impl<T> Expr<T> {
    pub(crate) fn eval(&self, f: &impl Fn(&T) -> bool) -> bool {
        match self {
            Expr::Any => true,
            Expr::Item(t) => f(t),
            Expr::List(items) => {
                let mut positive = false;
                let mut hit = false;
                for (neg, e) in items {
                    let m = e.eval(f);
                    if *neg {
                        if m {
                            return false;
                        }
                    } else {
                        positive = true;
                        hit |= m;
                    }
                }
                !positive || hit
            }
        }
    }

    /// True if the expression matches everything (so a packet without ports passes it).
    pub(crate) fn is_any(&self) -> bool {
        matches!(self, Expr::Any)
    }
}

/// An address block; IPv4 is held IPv4-mapped (`::ffff:a.b.c.d`) so one compare serves both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Net {
    pub(crate) addr: u128,
    pub(crate) mask: u128,
}

impl Net {
    pub(crate) fn contains(&self, a: u128) -> bool {
        a & self.mask == self.addr
    }
}

/// Address key of an IP address: IPv4 mapped into IPv6.
pub(crate) fn ip_key(ip: std::net::IpAddr) -> u128 {
    match ip {
        std::net::IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        std::net::IpAddr::V6(a) => u128::from(a),
    }
}

/// Addresses.
pub(crate) type AddrExpr = Expr<Net>;
/// Ports, as inclusive ranges.
pub(crate) type PortExpr = Expr<(u16, u16)>;

pub(crate) fn port_match(e: &PortExpr, port: Option<u16>) -> bool {
    match port {
        Some(p) => e.eval(&|&(lo, hi)| lo <= p && p <= hi),
        None => e.is_any(),
    }
}

/// A numeric test (`dsize`, `ttl`, `itype`, `icode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq(u32),
    Ne(u32),
    Lt(u32),
    Le(u32),
    Gt(u32),
    Ge(u32),
    /// Strictly between (Suricata's `a<>b`).
    Between(u32, u32),
}

impl Cmp {
    pub(crate) fn test(self, v: u32) -> bool {
        match self {
            Cmp::Eq(n) => v == n,
            Cmp::Ne(n) => v != n,
            Cmp::Lt(n) => v < n,
            Cmp::Le(n) => v <= n,
            Cmp::Gt(n) => v > n,
            Cmp::Ge(n) => v >= n,
            Cmp::Between(a, b) => a < v && v < b,
        }
    }
}

/// How `flags` compares the packet's flags with the rule's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlagsMode {
    /// Exactly these (after the ignore mask).
    Exact,
    /// These and possibly others (`+`).
    All,
    /// Any of these (`*`).
    Any,
    /// None of these (`!`).
    Not,
}

/// The `flags` keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flags {
    pub(crate) mode: FlagsMode,
    pub(crate) mask: u8,
    pub(crate) ignore: u8,
}

impl Flags {
    pub(crate) fn test(self, flags: u8) -> bool {
        let f = flags & !self.ignore;
        match self.mode {
            FlagsMode::Exact => f == self.mask,
            FlagsMode::All => f & self.mask == self.mask,
            FlagsMode::Any => f & self.mask != 0,
            FlagsMode::Not => f & self.mask == 0,
        }
    }
}

/// The `flow` keyword, answered from the kernel's conntrack state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Flow {
    /// `Some(true)`: established; `Some(false)`: not_established.
    pub(crate) established: Option<bool>,
    /// `Some(false)`: to_server / from_client; `Some(true)`: to_client / from_server.
    pub(crate) reply: Option<bool>,
}

impl Flow {
    /// Without conntrack information only the stateless part (no state, no direction) matches.
    pub(crate) fn test(self, ct: Option<CtInfo>) -> bool {
        if self.established.is_none() && self.reply.is_none() {
            return true;
        }
        let Some(ct) = ct else { return false };
        if let Some(e) = self.established
            && (ct.state == CtState::Established) != e
        {
            return false;
        }
        if let Some(r) = self.reply
            && ct.reply != r
        {
            return false;
        }
        true
    }

    /// True if the test needs conntrack information.
    pub(crate) fn needs_ct(self) -> bool {
        self.established.is_some() || self.reply.is_some()
    }
}

/// What a tracking table entry is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Track {
    /// `by_src`
    Src,
    /// `by_dst`
    Dst,
    /// `by_both`: the address pair, either way round (as Suricata orders it, lower first)
    Both,
    /// `by_rule`: one key for the rule
    Rule,
    /// `by_flow`: one key per flow (the flow id the engine gives the tracker)
    Flow,
}

/// `threshold: type ...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThresholdKind {
    /// Alert on the first `count` matches per interval.
    Limit,
    /// Alert on every `count`-th match per interval.
    Threshold,
    /// Alert once per interval, at the `count`-th match.
    Both,
    /// Suricata 8's `backoff` (only `by_flow`, no interval): alert on the `count`-th match,
    /// then on the `count * multiplier`-th, `count * multiplier^2`-th, and so on.
    Backoff {
        /// 2..=65535.
        multiplier: u32,
    },
}

/// The `threshold` keyword: suppresses alerts (never the rule's action).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Threshold {
    pub(crate) kind: ThresholdKind,
    pub(crate) track: Track,
    pub(crate) count: u32,
    /// The interval; 0 for `backoff`, which has none.
    pub(crate) seconds: u32,
}

/// `detection_filter: ..., unique_on`: which port is counted distinctly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UniqueOn {
    /// `unique_on src_port`
    SrcPort,
    /// `unique_on dst_port`
    DstPort,
}

/// `detection_filter`: the rule matches only after `count` matches per `seconds` window
/// (with `unique_on`: once more than `count` distinct ports were seen in the window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DetectionFilter {
    pub(crate) track: Track,
    pub(crate) count: u32,
    pub(crate) seconds: u32,
    /// Suricata 8's `unique_on`: count distinct ports instead of matches.
    pub(crate) unique_on: Option<UniqueOn>,
}

/// relayd's `rate` (for `ratelimit` rules): a token bucket per tracked key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rate {
    pub(crate) track: Track,
    /// Packets per second.
    pub(crate) per_sec: f64,
    /// Bucket size in packets.
    pub(crate) burst: f64,
}

/// One `content` with its modifiers.
#[derive(Debug, Clone)]
pub(crate) struct Content {
    /// The bytes (lowercased when `nocase`).
    pub(crate) pat: Vec<u8>,
    pub(crate) nocase: bool,
    pub(crate) negated: bool,
    pub(crate) offset: Option<u32>,
    pub(crate) depth: Option<u32>,
    pub(crate) distance: Option<i32>,
    pub(crate) within: Option<u32>,
    pub(crate) fast_pattern: bool,
    pub(crate) finder: memmem::Finder<'static>,
}

impl Content {
    pub(crate) fn new(pat: Vec<u8>, negated: bool) -> Content {
        let finder = memmem::Finder::new(&pat).into_owned();
        Content {
            pat,
            nocase: false,
            negated,
            offset: None,
            depth: None,
            distance: None,
            within: None,
            fast_pattern: false,
            finder,
        }
    }

    pub(crate) fn set_nocase(&mut self) {
        self.nocase = true;
        self.pat.make_ascii_lowercase();
        self.finder = memmem::Finder::new(&self.pat).into_owned();
    }

    pub(crate) fn relative(&self) -> bool {
        self.distance.is_some() || self.within.is_some()
    }

    /// The window `[lo, hi)` the whole match must lie in, given the end of the previous
    /// content match (Suricata: start = prev + distance, end = start + within).
    pub(crate) fn window(&self, prev_end: usize, len: usize) -> Option<(usize, usize)> {
        let (lo, hi) = if self.relative() {
            let d = self.distance.unwrap_or(0) as i64;
            let lo = (prev_end as i64 + d).max(0) as usize;
            let hi = match self.within {
                Some(w) => ((prev_end as i64 + d).max(0) as usize).saturating_add(w as usize),
                None => len,
            };
            (lo, hi)
        } else {
            let lo = self.offset.unwrap_or(0) as usize;
            let hi = match self.depth {
                Some(d) => lo.saturating_add(d as usize),
                None => len,
            };
            (lo, hi)
        };
        let hi = hi.min(len);
        (lo < hi).then_some((lo, hi))
    }

    /// The first match starting at or after `from` and ending by `hi`.
    pub(crate) fn find(&self, hay: &[u8], from: usize, hi: usize) -> Option<usize> {
        let n = self.pat.len();
        if from > hi || hi - from < n {
            return None;
        }
        let h = &hay[from..hi];
        let pos = if self.nocase {
            find_nocase(&self.pat, h)
        } else {
            self.finder.find(h)
        };
        pos.map(|p| p + from)
    }
}

/// ASCII case-insensitive search of a lowercased needle.
fn find_nocase(needle: &[u8], hay: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let n = needle.len();
    let up = first.to_ascii_uppercase();
    let mut start = 0;
    while start + n <= hay.len() {
        let i = start + memchr::memchr2(first, up, &hay[start..=hay.len() - n])?;
        if hay[i + 1..i + n].eq_ignore_ascii_case(rest) {
            return Some(i);
        }
        start = i + 1;
    }
    None
}

/// A `pcre`, translated to the `regex` crate's bytes API.
#[derive(Debug, Clone)]
pub(crate) struct Pcre {
    pub(crate) re: regex::bytes::Regex,
    pub(crate) negated: bool,
}

/// A parsed rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// What to do when it matches.
    pub action: RuleAction,
    /// Which packets it applies to.
    pub proto: RuleProto,
    /// Signature id (`sid`), unique in a rule set.
    pub sid: u32,
    /// Revision (`rev`, default 0).
    pub rev: u32,
    /// The message (`msg`), the EVE `signature`.
    pub msg: String,
    /// The `classtype` short name, if any.
    pub classtype: Option<String>,
    /// The class's description, the EVE `category` (empty without a classtype).
    pub category: String,
    /// Severity: the `priority` keyword, else the classtype's priority, else 3.
    pub priority: u8,
    /// The rules file it came from.
    pub file: Arc<str>,
    /// The line it starts on (1-based).
    pub line: usize,
    pub(crate) src: AddrExpr,
    pub(crate) sport: PortExpr,
    pub(crate) dst: AddrExpr,
    pub(crate) dport: PortExpr,
    pub(crate) bidir: bool,
    pub(crate) contents: Vec<Content>,
    pub(crate) pcres: Vec<Pcre>,
    pub(crate) dsize: Option<Cmp>,
    pub(crate) ttl: Option<Cmp>,
    pub(crate) itype: Option<Cmp>,
    pub(crate) icode: Option<Cmp>,
    pub(crate) flags: Option<Flags>,
    pub(crate) flow: Option<Flow>,
    pub(crate) threshold: Option<Threshold>,
    pub(crate) filter: Option<DetectionFilter>,
    pub(crate) rate: Option<Rate>,
    /// Index in `contents` of the pattern the prefilter looks for, if any.
    pub(crate) fast: Option<usize>,
}

impl Rule {
    /// The pattern the prefilter looks for (`fast_pattern`, else the longest non-negated
    /// content), if the rule has one.
    pub fn fast_pattern(&self) -> Option<&[u8]> {
        self.fast.map(|i| self.contents[i].pat.as_slice())
    }

    /// Number of `content` matches in the rule.
    pub fn content_count(&self) -> usize {
        self.contents.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_semantics_follow_suricata() {
        // [1-10, !5] : 1..10 except 5.
        let e: PortExpr = Expr::List(vec![
            (false, Expr::Item((1, 10))),
            (true, Expr::Item((5, 5))),
        ]);
        assert!(port_match(&e, Some(4)));
        assert!(!port_match(&e, Some(5)));
        assert!(!port_match(&e, Some(11)));
        // !80 : anything but 80, and nothing for a packet without ports.
        let e: PortExpr = Expr::List(vec![(true, Expr::Item((80, 80)))]);
        assert!(port_match(&e, Some(81)));
        assert!(!port_match(&e, Some(80)));
        assert!(!port_match(&e, None));
    }

    #[test]
    fn nocase_search() {
        assert_eq!(find_nocase(b"abd", b"xxABcx"), None);
        assert_eq!(find_nocase(b"abc", b"xxABcx"), Some(2));
        assert_eq!(find_nocase(b"abc", b"xxABCx"), Some(2));
        assert_eq!(find_nocase(b"a", b"A"), Some(0));
        assert_eq!(find_nocase(b"ab", b"a"), None);
    }
}
