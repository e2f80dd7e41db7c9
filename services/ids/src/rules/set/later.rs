//! Which rules could still match a flow's later packets: the question the engine asks
//! once per flow before it votes to offload it (a flow leaves the queue only when nothing
//! later in it could change a verdict or raise an alert; docs/ids.md, "Offload").
//!
//! Judged from the rule alone and the flow's fixed facts (its two ends, its application
//! protocol), conservatively: a rule counts as live unless it provably cannot match a
//! later packet of the flow in the directions asked about.

use super::RuleSet;
use super::tx::is_tx_rule;
use crate::applayer::{AppProto, Dir};
use crate::rules::rule::{NewAction, Rule, RuleAction, RuleProto, StreamMode, port_match};

/// The facts of a TCP flow that say which rules could still apply to its later packets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowView {
    /// The client's and the server's address key and port.
    pub(crate) client: (u128, u16),
    pub(crate) server: (u128, u16),
    /// The flow's application protocol, if detected.
    pub(crate) app: Option<AppProto>,
    /// The protocol may still be detected (no verdict yet, and bytes may still reach the
    /// detection): a rule for any protocol may then apply.
    pub(crate) app_open: bool,
    /// Per direction ([`Dir::index`]), the IP-only rules were checked (they never are
    /// again for that direction).
    pub(crate) iponly_done: [bool; 2],
    /// Per direction, no more stream bytes will be inspected (reassembly stopped at its
    /// depth, or the direction finished): `flow:only_stream` rules cannot match there.
    pub(crate) stream_done: [bool; 2],
    /// The flow's parser will make no transaction progress any more (nothing live, or
    /// the parser stopped): transaction rules cannot match.
    pub(crate) app_settled: bool,
}

impl RuleSet {
    /// The first rule (index, in evaluation order) that could still match a later packet
    /// of TCP flow `v` travelling in one of `dirs` (`[to server, to client]`), or raise an
    /// alert or a drop there; `None` if no rule could, so offloading those packets changes
    /// no verdict and loses no alert.
    ///
    /// Live: a packet rule with a packet or header test that applies to the flow (its
    /// protocol, ends and application protocol), which is every packet rule but the
    /// IP-only ones already checked and `flow:only_stream` rules on a direction whose
    /// stream is done; a transaction rule of the flow's protocol while its parser can
    /// still progress. Not live: `pass` rules (a match only lets packets through) and
    /// rules whose protocol, addresses, ports or application protocol exclude the flow.
    ///
    /// Cost: one pass over `tcp_later`, stopping at the first live rule; the engine asks
    /// at most once per trigger and flow.
    pub(crate) fn live_rule(&self, v: &FlowView, dirs: [bool; 2]) -> Option<usize> {
        self.tcp_later.iter().map(|&i| i as usize).find(|&i| {
            self.rules
                .get(i)
                .is_some_and(|r| applies(r, v, dirs) && self.could_match(i, r, v, dirs))
        })
    }

    /// True if rule `i` (`r`), which applies to `v`, could match a later packet in `dirs`.
    fn could_match(&self, i: usize, r: &Rule, v: &FlowView, dirs: [bool; 2]) -> bool {
        let in_dirs = |f: &dyn Fn(usize) -> bool| (0..2).any(|d| dirs[d] && f(d));
        if self.ip_only.get(i).copied().unwrap_or(false) {
            return in_dirs(&|d| !v.iponly_done[d]);
        }
        if is_tx_rule(r) {
            return !v.app_settled;
        }
        let only_stream = r.flow.is_some_and(|f| f.stream == StreamMode::Only);
        if only_stream && !r.lists.is_empty() {
            return in_dirs(&|d| !v.stream_done[d]);
        }
        true
    }
}

/// The rules that may apply to a TCP flow's packets and do more than pass, ascending:
/// what [`RuleSet::live_rule`] reads. A `pass` rule with a threshold file's
/// `rate_filter` whose `new_action` is not `pass` does more: over the rate it drops,
/// rejects or alerts.
pub(crate) fn candidates(rules: &[Rule]) -> Vec<u32> {
    let tcp = |r: &Rule| {
        matches!(
            r.proto,
            RuleProto::Tcp | RuleProto::Ip | RuleProto::TcpOrUdp
        )
    };
    let only_passes = |r: &Rule| {
        r.action == RuleAction::Pass
            && r.global
                .as_ref()
                .and_then(|g| g.rate)
                .is_none_or(|rf| rf.action == NewAction::Pass)
    };
    (0..rules.len())
        .filter(|&i| rules.get(i).is_some_and(|r| !only_passes(r) && tcp(r)))
        .map(|i| i as u32)
        .collect()
}

/// True if `r`'s ends and application protocol admit packets of `v` in one of `dirs`.
fn applies(r: &Rule, v: &FlowView, dirs: [bool; 2]) -> bool {
    let way = |(s, sp): (u128, u16), (d, dp): (u128, u16)| {
        r.src.eval(&|n| n.contains(s))
            && port_match(&r.sport, Some(sp))
            && r.dst.eval(&|n| n.contains(d))
            && port_match(&r.dport, Some(dp))
    };
    let dir_ok = |d: Dir| {
        let (s, t) = match d {
            Dir::ToServer => (v.client, v.server),
            Dir::ToClient => (v.server, v.client),
        };
        way(s, t) || r.bidir && way(t, s)
    };
    let ends = [Dir::ToServer, Dir::ToClient]
        .into_iter()
        .any(|d| dirs[d.index()] && dir_ok(d));
    ends && app_admits(r, v)
}

/// True if `r`'s application protocol and `app-layer-protocol` tests may hold for `v`.
fn app_admits(r: &Rule, v: &FlowView) -> bool {
    if v.app.is_none() && v.app_open {
        return true;
    }
    if r.app.is_some_and(|a| v.app != Some(a)) {
        return false;
    }
    r.app_test
        .iter()
        .all(|&(neg, a)| v.app.is_some_and(|cur| (cur == a) != neg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> RuleSet {
        let s = RuleSet::parse_str(text, "t", &Default::default()).expect("set");
        assert!(s.errors().is_empty(), "{:?}", s.errors());
        s
    }

    fn view() -> FlowView {
        let key = |s: &str| crate::rules::rule::ip_key(s.parse().unwrap());
        FlowView {
            client: (key("10.0.0.1"), 40000),
            server: (key("10.0.0.2"), 80),
            app: None,
            app_open: false,
            iponly_done: [true; 2],
            stream_done: [true; 2],
            app_settled: true,
        }
    }

    const BOTH: [bool; 2] = [true, true];

    #[test]
    fn a_pass_rule_a_rate_filter_turns_into_a_drop_is_a_candidate() {
        use crate::rules::rule::{FileRule, RateFilter, Track};
        let s = set("pass tcp any any -> any 80 (content:\"x\"; sid:1;)");
        let mut rules = s.rules.clone();
        assert!(candidates(&rules).is_empty(), "a plain pass only passes");
        for (action, want) in [
            (NewAction::Drop, 1),
            (NewAction::Reject, 1),
            (NewAction::Pass, 0),
        ] {
            rules[0].global = Some(Box::new(FileRule {
                rate: Some(RateFilter {
                    track: Track::Src,
                    count: 1,
                    seconds: 1,
                    action,
                    timeout: 1,
                }),
                ..FileRule::default()
            }));
            assert_eq!(candidates(&rules).len(), want, "{action:?}");
        }
    }

    #[test]
    fn packet_tests_keep_a_flow_inline_and_spent_rules_do_not() {
        let live = |text: &str, v: &FlowView, dirs| set(text).live_rule(v, dirs).is_some();
        let v = view();
        for (rule, want) in [
            // A payload rule reads every later packet's payload.
            ("alert tcp any any -> any 80 (content:\"x\"; sid:1;)", true),
            ("alert tcp any any -> any any (dsize:>100; sid:1;)", true),
            ("alert tcp any any -> any any (flags:R; sid:1;)", true),
            ("drop ip any any -> any any (ttl:<3; sid:1;)", true),
            (
                "alert tcp any any -> any any (flow:established; sid:1;)",
                true,
            ),
            // Only the stream, which is done both ways.
            (
                "alert tcp any any -> any any (flow:only_stream; content:\"x\"; sid:1;)",
                false,
            ),
            // IP-only, checked on each direction's first packet.
            ("alert tcp 10.0.0.1 any -> any any (sid:1;)", false),
            // Another port, another protocol, a pass rule.
            (
                "alert tcp any any -> any 443 (content:\"x\"; sid:1;)",
                false,
            ),
            (
                "alert udp any any -> any any (content:\"x\"; sid:1;)",
                false,
            ),
            ("pass tcp any any -> any any (content:\"x\"; sid:1;)", false),
            // An application protocol the flow does not have.
            (
                "alert tls any any -> any any (flow:established; sid:1;)",
                false,
            ),
            (
                "alert tcp any any -> any any (http.uri; content:\"x\"; sid:1;)",
                false,
            ),
        ] {
            assert_eq!(live(rule, &v, BOTH), want, "{rule}");
        }
        // The server's port as the source: the rule applies to the way back.
        let back = "alert tcp any 80 -> any any (content:\"x\"; sid:1;)";
        assert!(live(back, &v, [false, true]));
        assert!(!live(back, &v, [true, false]));
        let mut open = v;
        open.iponly_done = [true, false];
        assert!(live(
            "alert tcp 10.0.0.2 any -> any any (sid:1;)",
            &open,
            BOTH
        ));
        open.stream_done = [false, true];
        let os = "alert tcp any any -> any any (flow:only_stream; content:\"x\"; sid:1;)";
        assert!(live(os, &open, [true, false]));
        assert!(!live(os, &open, [false, true]));
        let mut http = v;
        http.app = Some(AppProto::Http);
        let tx = "drop http any any -> any any (http.uri; content:\"/admin\"; sid:1;)";
        assert!(!live(tx, &http, BOTH));
        http.app_settled = false;
        assert!(live(tx, &http, BOTH));
        // Undetected yet: any protocol's rules may apply.
        let mut undetected = v;
        undetected.app_open = true;
        assert!(live(
            "alert tls any any -> any any (flow:established; sid:1;)",
            &undetected,
            BOTH
        ));
    }
}
