//! Detection over application-layer transactions: which rules inspect transactions, their
//! per-buffer prefilters, and the per-flow record of which rule is done with which
//! transaction.
//!
//! A rule that names an application-layer buffer (`http.uri`, `dns.query`, ...) is a
//! *transaction rule*. A rule written for an application protocol that names no such
//! buffer (`alert http any any -> any any (sid:1;)`, or with `flowbits`, `flow`, payload
//! `content`) is a packet rule that needs the flow's protocol: as Suricata's
//! `SIG_TYPE_APPLAYER` / `SIG_TYPE_PKT` with an `alproto`, it is checked on every packet
//! of the flow once the protocol is known (an `alert http ... (sid:1;)` alerts on each
//! of them, the bare ACKs included). It is inspected against each transaction of a flow
//! of its protocol once the buffers it names are final (their direction has reached the
//! buffer's `ready` progress, see [`crate::buffer::BUFFERS`]), on a packet travelling in
//! the rule's direction (the direction of its buffers, to client if it names buffers of
//! both). It then matches at most once per transaction and direction, as in Suricata, and
//! the packet that completed the transaction's buffers takes the verdict. A transaction
//! is looked at again only when its progress changed.
//!
//! Cost: per packet whose transaction progressed, one scan of each of its buffers by the
//! prefilter over the fast patterns of the protocol's rules in that buffer (the same
//! hashed-anchor prefilter as for payloads), then the candidates and the rules without a
//! fast pattern are checked. Memory per transaction: two bitsets over the protocol's
//! transaction rules (freed with the transaction).

use super::Outcome;
use super::exception::Exceptions;
use super::flowbits::FlowBits;
use crate::applayer::state::AppState;
use crate::applayer::{AppProto, Dir, Progress, Transaction};
use crate::buffer::Buffer;
use crate::prefilter::{Prefilter, Scratch};
use crate::rule::Rule;
use std::collections::{HashMap, VecDeque};

/// Number of application protocols (index: `AppProto as usize`).
pub(crate) const PROTOS: usize = 3;

/// The index of a protocol in per-protocol arrays.
pub(crate) fn proto_index(p: AppProto) -> usize {
    match p {
        AppProto::Http => 0,
        AppProto::Tls => 1,
        AppProto::Dns => 2,
    }
}

/// A prefilter over the fast patterns that lie in one buffer.
#[derive(Debug)]
pub(crate) struct BufferPrefilter {
    pub(crate) buffer: Buffer,
    pub(crate) pf: Prefilter,
    /// Pattern id to the rules (ascending) whose fast pattern it is.
    pub(crate) pat_rules: Vec<Vec<u32>>,
}

/// The transaction rules of one protocol.
#[derive(Debug, Default)]
pub(crate) struct AppRules {
    /// The rules (indices into the rule set, ascending).
    pub(crate) rules: Vec<u32>,
    /// Per buffer, the prefilter over the fast patterns in it.
    pub(crate) prefilters: Vec<BufferPrefilter>,
    /// Rules without a fast pattern in an application-layer buffer (ascending).
    pub(crate) no_fast: Vec<u32>,
}

/// What the rule set knows of transaction rules.
#[derive(Debug, Default)]
pub(crate) struct TxRules {
    pub(crate) by_proto: [AppRules; PROTOS],
    /// Per rule: its slot in its protocol's `rules` (bit in the per-transaction sets), or
    /// `u32::MAX` for a packet rule.
    pub(crate) slot: Vec<u32>,
    /// Per rule: the direction it is inspected in (`None`: either).
    pub(crate) dir: Vec<Option<Dir>>,
}

/// The fast patterns of one (protocol, buffer): the patterns, pattern to id, and per id
/// the rules.
type PatternGroup = (Vec<Vec<u8>>, HashMap<Vec<u8>, usize>, Vec<Vec<u32>>);

/// True if rule `r` inspects transactions rather than packets: it names an
/// application-layer buffer. (Suricata's `SignatureSetType`: a rule with an app-layer
/// inspect engine is `SIG_TYPE_APP_TX`; one with only a protocol is `SIG_TYPE_APPLAYER`,
/// inspected per packet.)
pub(crate) fn is_tx_rule(r: &Rule) -> bool {
    r.app.is_some() && r.lists.iter().any(|l| l.buffer != Buffer::Payload)
}

/// The direction a transaction rule is inspected in.
fn rule_dir(r: &Rule) -> Option<Dir> {
    let dirs = r
        .lists
        .iter()
        .filter_map(|l| l.buffer.info().and_then(|i| i.dir));
    let mut out = None;
    for d in dirs {
        if d == Dir::ToClient {
            return Some(Dir::ToClient);
        }
        out = Some(d);
    }
    out.or_else(|| {
        r.flow
            .and_then(|f| f.reply)
            .map(|reply| if reply { Dir::ToClient } else { Dir::ToServer })
    })
}

impl TxRules {
    /// Sorts the transaction rules of `rules` (in evaluation order) by protocol and builds
    /// their prefilters.
    pub(crate) fn build(rules: &[Rule]) -> TxRules {
        let mut t = TxRules {
            slot: vec![u32::MAX; rules.len()],
            dir: vec![None; rules.len()],
            ..TxRules::default()
        };
        // (protocol, buffer) -> (patterns, by pattern, pattern rules)
        let mut groups: HashMap<(usize, Buffer), PatternGroup> = HashMap::new();
        for (i, r) in rules.iter().enumerate() {
            let Some(app) = r.app.filter(|_| is_tx_rule(r)) else {
                continue;
            };
            let pi = proto_index(app);
            let ar = &mut t.by_proto[pi];
            t.slot[i] = ar.rules.len() as u32;
            ar.rules.push(i as u32);
            t.dir[i] = rule_dir(r);
            match r.fast_content() {
                Some((buffer, c)) if buffer != Buffer::Payload => {
                    let key = c.pat.to_ascii_lowercase();
                    let (pats, by, pr) = groups.entry((pi, buffer)).or_default();
                    let id = *by.entry(key.clone()).or_insert_with(|| {
                        pats.push(key);
                        pr.push(Vec::new());
                        pats.len() - 1
                    });
                    if let Some(v) = pr.get_mut(id) {
                        v.push(i as u32);
                    }
                }
                _ => ar.no_fast.push(i as u32),
            }
        }
        let mut groups: Vec<_> = groups.into_iter().collect();
        groups.sort_by_key(|((p, b), _)| (*p, *b));
        for ((pi, buffer), (pats, _, pat_rules)) in groups {
            t.by_proto[pi].prefilters.push(BufferPrefilter {
                buffer,
                pf: Prefilter::new(&pats),
                pat_rules,
            });
        }
        t
    }

    /// Per-thread prefilter scratch for every buffer prefilter, in order.
    pub(crate) fn scratch(&self) -> Vec<Vec<Scratch>> {
        self.by_proto
            .iter()
            .map(|a| a.prefilters.iter().map(|b| b.pf.scratch()).collect())
            .collect()
    }
}

/// What the engine keeps per flow.
#[derive(Debug, Default)]
pub(crate) struct FlowState {
    /// The application layer.
    pub(crate) app: AppState,
    /// The flow's flowbits.
    pub(crate) bits: FlowBits,
    /// Per live transaction, what detection has done with it.
    pub(crate) txs: VecDeque<TxDetect>,
    /// The action a `pass` or `drop` rule set on the whole flow (Suricata's
    /// `FLOW_ACTION_PASS` / `FLOW_ACTION_DROP`): the flow's later packets are not inspected.
    pub(crate) action: FlowAction,
    /// Per direction, whether the IP-only rules (see [`is_ip_only`]) have been checked
    /// (Suricata's `FLOW_TOSERVER_IPONLY_SET` / `FLOW_TOCLIENT_IPONLY_SET`).
    pub(crate) iponly_done: [bool; 2],
}

/// After a flow's application layer was fed or closed: if the memcap stopped its parser
/// (already freed), applies the exception policy `ex` (see [`memcap_exception`]); and
/// drops the detection records of transactions the parser no longer holds (evicted
/// unanswered), so that they neither pile up nor hold back the retirement of later ones.
/// `Some`: the packet's outcome, decided by the policy (inspect no further).
pub(crate) fn after_feed(
    app: &mut AppState,
    txs: &mut VecDeque<TxDetect>,
    action: &mut FlowAction,
    ex: &Exceptions,
) -> Option<Outcome> {
    if !txs.is_empty() && txs.len() > app.tx_count() {
        txs.retain(|r| app.holds_tx(r.id));
    }
    if app.take_memcap_hit() {
        return memcap_exception(app, txs, action, ex);
    }
    None
}

/// Applies the exception policy `ex` to a flow a memcap refused memory (the
/// application-layer memcap, through [`after_feed`]; the stream memcap, when a segment
/// truncated the flow's stream with `Truncation::Memcap`): sets the flow's `action` and
/// counts. On `drop-flow`, `pass-flow` and `bypass` the flow's parser is freed too (as
/// Suricata's drop-flow disables the flow's application layer: nothing will read it
/// again); on `ignore` it stays (the application-layer memcap has freed it already).
/// `Some`: the packet's outcome (inspect no further); `None`: inspect it as usual.
pub(crate) fn memcap_exception(
    app: &mut AppState,
    txs: &mut VecDeque<TxDetect>,
    action: &mut FlowAction,
    ex: &Exceptions,
) -> Option<Outcome> {
    let out = ex.apply(action);
    if out.is_some() {
        app.disable();
        txs.clear();
    }
    out
}

/// True if `r` is an IP-only rule as Suricata's `SignatureIsIPOnly` judges it (type
/// `SIG_TYPE_IPONLY`): no application protocol, no payload or buffer, no packet keyword
/// other than the IP-only compatible ones (`threshold`, `flowbits:set`), and no negated
/// address (a negated address makes it *like* IP-only, checked per packet). Suricata checks
/// IP-only rules once per flow direction, on the direction's first packet that reaches
/// detection; on packets without a flow, on each packet. A rule with a `detection_filter`
/// or a `rate` stays per packet here: relayd applies such rate verdicts per packet (as
/// [`acts_on_flow`] does), where Suricata would count only each direction's first packet.
pub(crate) fn is_ip_only(r: &Rule) -> bool {
    r.app.is_none()
        && r.app_test.is_empty()
        && no_packet_tests(r)
        && r.filter.is_none()
        && r.rate.is_none()
        && r.flowbits
            .iter()
            .all(|o| o.cmd == crate::rule::FlowbitCmd::Set)
        && !has_negation(&r.src)
        && !has_negation(&r.dst)
}

/// True if an address expression negates something (Suricata's `src_contains_negation`).
fn has_negation<T>(e: &crate::rule::Expr<T>) -> bool {
    match e {
        crate::rule::Expr::List(items) => items.iter().any(|(neg, e)| *neg || has_negation(e)),
        _ => false,
    }
}

/// What a `pass` or `drop` / `reject` match decided for the rest of its flow.
///
/// As in Suricata, the first to be set wins, and it is set only by a rule whose action
/// applies to the flow: an IP-only-like rule (no payload, no packet keyword), a
/// transaction rule, or a payload rule that matched the reassembled stream.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlowAction {
    /// Inspect the flow's packets.
    #[default]
    Inspect,
    /// Pass the flow's later packets uninspected.
    Pass,
    /// Drop the flow's later packets, without inspecting them or alerting.
    Drop,
    /// Reject the flow's later packets (relayd answers each, within its reject rates),
    /// without inspecting them or alerting.
    Reject,
}

/// True if a match of `r` (of action pass, drop or reject) applies to its whole flow:
/// Suricata's signature types IP-only, like-IP-only, protocol-detection-only, app-layer
/// and app-tx apply it to the flow; a stream or packet-and-stream rule when it matched
/// the stream (`stream`); a packet rule never. Rules with a `detection_filter` or `rate`
/// stay per packet: their verdict is about a rate, which relayd keeps applying per packet
/// (docs/ids.md), not about the flow.
pub(crate) fn acts_on_flow(r: &Rule, stream: bool) -> bool {
    if r.filter.is_some() || r.rate.is_some() {
        return false;
    }
    if is_tx_rule(r) || stream {
        return true;
    }
    no_packet_tests(r)
}

/// True if `r` looks at nothing of a packet beyond its addresses and protocol: no payload
/// or buffer, no pcre, no `dsize`, `ttl`, `itype`, `icode`, `flags`, `flow` or
/// `stream-event`.
fn no_packet_tests(r: &Rule) -> bool {
    r.lists.is_empty()
        && r.pcres.is_empty()
        && r.dsize.is_none()
        && r.ttl.is_none()
        && r.itype.is_none()
        && r.icode.is_none()
        && r.flags.is_none()
        && r.flow.is_none()
        && r.stream_events == 0
}

/// Detection's record of one transaction.
#[derive(Debug)]
pub(crate) struct TxDetect {
    pub(crate) id: u64,
    /// The progress (to server, to client) at the last inspection.
    pub(crate) seen: [Progress; 2],
    /// Per direction, the transaction rules done with it (matched, or final and not
    /// matching), as bits over the protocol's rule slots.
    done: [Vec<u64>; 2],
}

impl TxDetect {
    fn new(id: u64) -> TxDetect {
        TxDetect {
            id,
            seen: [Progress::None; 2],
            done: [Vec::new(), Vec::new()],
        }
    }

    /// True if the rule in `slot` is done with the transaction in direction `dir`.
    pub(crate) fn is_done(&self, dir: Dir, slot: u32) -> bool {
        self.done[dir.index()]
            .get((slot / 64) as usize)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    /// Marks the rule in `slot` done with the transaction in direction `dir`.
    pub(crate) fn mark_done(&mut self, dir: Dir, slot: u32) {
        let v = &mut self.done[dir.index()];
        let i = (slot / 64) as usize;
        if i >= v.len() {
            v.resize(i + 1, 0);
        }
        if let Some(w) = v.get_mut(i) {
            *w |= 1 << (slot % 64);
        }
    }
}

/// The detection record of transaction `id`, created if new (records go when their
/// transactions are retired, so there are at most as many as live transactions).
pub(crate) fn tx_record(txs: &mut VecDeque<TxDetect>, id: u64) -> &mut TxDetect {
    let pos = match txs.iter().position(|t| t.id == id) {
        Some(p) => p,
        None => {
            let at = txs.iter().position(|t| t.id > id).unwrap_or(txs.len());
            txs.insert(at, TxDetect::new(id));
            at
        }
    };
    &mut txs[pos]
}

/// The current progress of a transaction, both directions.
pub(crate) fn progress(tx: &dyn Transaction) -> [Progress; 2] {
    [tx.progress(Dir::ToServer), tx.progress(Dir::ToClient)]
}

/// True if buffer `b` of `tx` is final for an inspection in direction `dir`.
pub(crate) fn ready(tx: &dyn Transaction, b: Buffer, dir: Dir) -> bool {
    match b.info() {
        None => true,
        Some(i) => tx.progress(i.dir.unwrap_or(dir)) >= i.ready,
    }
}

/// What the matches of a packet (in evaluation order, `stream`: the packet rules among
/// them that matched the stream) decide for the rest of its flow, as Suricata's
/// `RuleActionToFlow`: the first `pass` or `drop` / `reject` match whose action applies
/// to the flow (see [`acts_on_flow`]); matches after a `pass` do not count (the verdict
/// stops there too). `over` holds the actions a threshold file's `rate_filter` put in
/// force for some of the matches.
pub(crate) fn flow_verdict(
    set: &super::RuleSet,
    matched: &[u32],
    stream: &[u32],
    over: &[(u32, crate::rule::RuleAction)],
) -> FlowAction {
    for &i in matched {
        let Some(r) = set.rules.get(i as usize) else {
            continue;
        };
        let act = over
            .iter()
            .find(|(x, _)| *x == i)
            .map_or(r.action, |(_, a)| *a);
        let action = match act {
            crate::rule::RuleAction::Pass => FlowAction::Pass,
            crate::rule::RuleAction::Drop => FlowAction::Drop,
            crate::rule::RuleAction::Reject => FlowAction::Reject,
            _ => continue,
        };
        if acts_on_flow(r, stream.contains(&i)) {
            return action;
        }
        if action == FlowAction::Pass {
            break;
        }
    }
    FlowAction::Inspect
}
