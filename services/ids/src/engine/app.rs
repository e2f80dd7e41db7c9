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
//! buffer's `ready` progress, see [`crate::applayer::buffer::BUFFERS`]), on a packet travelling in
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

use super::exception::Exceptions;
pub(crate) use super::exception::FlowAction;
use super::offload::FlowOffload;
use crate::applayer::buffer::Buffer;
use crate::applayer::state::AppState;
use crate::applayer::{Dir, Progress, Transaction};
use crate::outcome::Outcome;
use crate::rules::flowbits::FlowBits;
use crate::rules::set::RuleSet;
use crate::rules::set::tx::acts_on_flow;
use std::collections::VecDeque;

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
    /// Whether the IDS votes to offload the flow's later packets (`engine::offload`).
    pub(crate) offload: FlowOffload,
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
    set: &RuleSet,
    matched: &[u32],
    stream: &[u32],
    over: &[(u32, crate::rules::rule::RuleAction)],
) -> FlowAction {
    for &i in matched {
        let Some((r, act)) = set.acting(i, over) else {
            continue;
        };
        let action = match act {
            crate::rules::rule::RuleAction::Pass => FlowAction::Pass,
            crate::rules::rule::RuleAction::Drop => FlowAction::Drop,
            crate::rules::rule::RuleAction::Reject => FlowAction::Reject,
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
