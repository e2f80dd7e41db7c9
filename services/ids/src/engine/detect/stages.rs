//! The stages of [`super::Detector`]'s inspection of one packet, in order: the receiver's
//! judgement of its headers ([`ip_invalid`]), its flow (a decided flow, the memcaps, the
//! application layer fed: [`flow_stage`]), the packet rules ([`packet_rules`]) and the
//! transaction rules ([`tx_rules`]). Each takes the detector's parts it needs.

use super::*;
use crate::applayer::state::AppState;
use crate::engine::app::TxDetect;
use crate::engine::offload::FlowOffload;
use crate::flow::FlowRef;
use crate::flow::stream::Stream;
use crate::rules::set::tx::proto_index;
use relay_core::PacketMeta;
use std::collections::VecDeque;

/// What the packet's flow lends the rule stages: the flow facts, its stream in the
/// packet's direction, the parser and detection records, and the flow's action.
pub(super) struct FlowStage<'a> {
    pub(super) fx: FlowCx<'a>,
    pub(super) stream: Option<&'a mut Stream>,
    pub(super) app: &'a mut AppState,
    pub(super) txs: &'a mut VecDeque<TxDetect>,
    pub(super) action: &'a mut FlowAction,
    /// The flow's offload record (a `bypass` match marks it).
    pub(super) offload: &'a mut FlowOffload,
    /// The IP-only rules are checked on this packet (its direction's first).
    pub(super) iponly: bool,
    /// Stream bytes this packet completed.
    pub(super) new_bytes: usize,
}

impl<'a> FlowStage<'a> {
    /// The stream window that ends with this packet's new bytes (if it completed any), and
    /// the flow facts.
    pub(super) fn window(&mut self) -> (Option<Win<'_>>, &mut FlowCx<'a>) {
        let new = self.new_bytes;
        let win = self.stream.as_deref().filter(|_| new > 0).map(|s| {
            let (_, bytes) = s.raw_window();
            Win {
                bytes,
                old: bytes.len().saturating_sub(new),
            }
        });
        (win, &mut self.fx)
    }
}

/// Why the receiver discards the packet on its IP or transport header, if it does (only
/// when normalizing): a bad checksum (judged only on a whole packet the kernel did not
/// check) or bad IPv6 options.
pub(super) fn ip_invalid(
    opts: &DetectorOptions,
    p: &PktInfo,
    data: &[u8],
    meta: &PacketMeta,
) -> Option<Invalid> {
    if !opts.normalize {
        None
    } else if p.class <= 1 && meta.csum.judged() && meta.orig_len.is_none() && !checksum_ok(data, p)
    {
        Some(Invalid::Checksum)
    } else if !ipv6_options_ok(data) {
        Some(Invalid::Ipv6Options)
    } else {
        None
    }
}

/// What the flow table judged of the segment: counts it, adds its stream events to `p`;
/// true if an inline detector drops it.
pub(super) fn flow_invalid(
    f: &FlowRef<'_, FlowState>,
    opts: &DetectorOptions,
    stats: &Stats,
    p: &mut PktInfo,
) -> bool {
    let mut drop = false;
    if let Some(why) = f.invalid {
        stats.invalid[why.index()].inc();
        drop = opts.drop_invalid;
        p.events |= why.event().map_or(0, StreamEvent::bit);
    }
    if f.seg.mismatch {
        p.events |= StreamEvent::ReassemblyOverlapDifferentData.bit();
    }
    drop
}

/// The outcome of a flow a `pass` or `drop` rule decided (Suricata's DetectFlow): it is
/// not inspected any more.
fn decided(action: FlowAction, stats: &Stats) -> Option<Outcome> {
    match action {
        FlowAction::Inspect => None,
        FlowAction::Pass => {
            stats.flow_passed.inc();
            Some(Outcome::Pass)
        }
        FlowAction::Drop => {
            stats.flow_dropped.inc();
            Some(Outcome::Drop)
        }
        FlowAction::Reject => {
            stats.flow_dropped.inc();
            stats.rejected.inc();
            Some(Outcome::Reject)
        }
    }
}

/// The packet's flow: `Err(outcome)` if the flow was decided or an exception policy
/// decides it now (its streams are then let go: nothing of it is inspected again);
/// otherwise feeds the new in-order bytes (or the datagram) to its application layer and
/// lends the rule stages what they read.
#[allow(clippy::too_many_arguments)]
pub(super) fn flow_stage<'a>(
    f: &'a mut FlowRef<'_, FlowState>,
    set: &RuleSet,
    opts: &DetectorOptions,
    stats: &Stats,
    app_budget: &mut AppBudget,
    exceptions: &Exceptions,
    p: &PktInfo,
    payload: &[u8],
) -> Result<FlowStage<'a>, Outcome> {
    let (dir, established, synced, id) = (f.dir, f.established, f.flow.synced(), f.flow.id());
    let (new_bytes, seg_truncated, finished) = (f.seg.new, f.seg.truncated, f.seg.finished);
    let ports = (p.sport.unwrap_or(0), p.dport.unwrap_or(0));
    if let Some(out) = decided(f.flow.state.action, stats) {
        f.abandon_streams();
        return Err(out);
    }
    // The stream memcap refused this direction memory: the exception policy, as for the
    // application layer's memcap (Suricata's `stream.memcap-policy`).
    let refused = {
        let (state, s) = f.flow.split_mut(dir);
        if seg_truncated && s.as_deref().and_then(|s| s.truncated()) == Some(Truncation::Memcap) {
            memcap_exception(
                &mut state.app,
                &mut state.txs,
                &mut state.action,
                exceptions,
            )
        } else {
            None
        }
    };
    if let Some(out) = refused {
        f.flow.state.offload.bypass |= exceptions.bypasses();
        f.abandon_streams();
        return Err(out);
    }
    // Suricata checks IP-only rules once per flow direction.
    let iponly = match f.flow.state.iponly_done.get_mut(dir.index()) {
        Some(done) => !std::mem::replace(done, true),
        None => true,
    };
    let stopped = {
        let (state, s) = f.flow.split_mut(dir);
        let FlowState {
            app, txs, action, ..
        } = state;
        match s {
            Some(s) => {
                if set.needs_app {
                    let n = app.feed_stream(dir, s.app_pending(), ports, &opts.http, app_budget);
                    let upto = s.app_offset() + n as u64;
                    s.consume_app(upto);
                } else {
                    let end = s.end();
                    s.consume_app(end);
                }
                // The direction ends once its stream is complete up to its FIN (not at a
                // FIN that arrives ahead of missing bytes).
                if finished {
                    app.close(dir);
                }
            }
            None if p.class == 1 && set.needs_app => {
                app.feed_datagram(dir, payload, ports, app_budget);
            }
            None => {}
        }
        if p.tcp_flags & RST != 0 {
            app.close(dir);
            app.close(dir.reverse());
        }
        // The application-layer memcap stopped the parser: the exception policy.
        after_feed(app, txs, action, exceptions)
    };
    if let Some(out) = stopped {
        f.flow.state.offload.bypass |= exceptions.bypasses();
        f.abandon_streams();
        return Err(out);
    }
    let (state, stream) = f.flow.split_mut(dir);
    let FlowState {
        app,
        bits,
        txs,
        action,
        offload,
        ..
    } = state;
    Ok(FlowStage {
        fx: FlowCx {
            dir,
            established,
            synced,
            app: app.proto(),
            bits,
            id,
        },
        stream,
        app,
        txs,
        action,
        offload,
        iponly,
        new_bytes,
    })
}

/// The packet rules: one prefilter scan over the payload (and the stream window ending
/// with it) names the candidates; they and the rules without a payload fast pattern are
/// checked in evaluation order, stopping at the first `pass` (then true).
#[allow(clippy::too_many_arguments)]
pub(super) fn packet_rules(
    set: &RuleSet,
    st: &mut State,
    scratch: &mut Scratch,
    cand: &mut Vec<u32>,
    matched: &mut Vec<u32>,
    stream_hits: &mut Vec<u32>,
    p: &PktInfo,
    payload: &[u8],
    win: Option<&Win<'_>>,
    mut fx: Option<&mut FlowCx<'_>>,
    iponly: bool,
    now: Instant,
) -> bool {
    cand.clear();
    if set.class_has_content[p.class]
        && let Some(pf) = &set.prefilter
    {
        let mut scan = |hay: &[u8], cand: &mut Vec<u32>| {
            pf.scan(hay, scratch, |id| {
                cand.extend_from_slice(&set.pat_rules[id as usize]);
            });
        };
        match win {
            Some(w) => {
                scan(w.bytes, cand);
                if !w.contains(payload) {
                    scan(payload, cand);
                }
            }
            None if !payload.is_empty() => scan(payload, cand),
            None => {}
        }
        cand.sort_unstable();
        cand.dedup();
    }
    let ho = &set.header_only[p.class];
    let (mut a, mut b) = (0, 0);
    loop {
        // The candidates and the header-only rules, merged in ascending order.
        let i = match (cand.get(a), ho.get(b)) {
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
            (None, None) => return false,
        };
        let mut on_stream = false;
        if !iponly && set.ip_only.get(i as usize).copied().unwrap_or(false) {
            continue;
        }
        let fx = fx.as_deref_mut();
        if check(
            set,
            st,
            i as usize,
            p,
            payload,
            win,
            fx,
            now,
            &mut on_stream,
        ) {
            matched.push(i);
            if on_stream {
                stream_hits.push(i);
            }
            if set.rules[i as usize].action == RuleAction::Pass {
                return true;
            }
        }
    }
}

/// The transaction rules of the flow's protocol, against each of its transactions that
/// progressed; then retires the transactions inspected for good both ways.
#[allow(clippy::too_many_arguments)]
pub(super) fn tx_rules(
    set: &RuleSet,
    st: &mut State,
    app_scratch: &mut [Vec<Scratch>],
    tx_cand: &mut Vec<u32>,
    matched: &mut Vec<u32>,
    fs: &mut FlowStage<'_>,
    p: &PktInfo,
    payload: &[u8],
    now: Instant,
) {
    let FlowStage { fx, app, txs, .. } = fs;
    let Some(proto) = app.proto() else { return };
    let dir = fx.dir;
    let pi = proto_index(proto);
    let ar = &set.tx.by_proto[pi];
    if ar.rules.is_empty() {
        return;
    }
    let Some(scr) = app_scratch.get_mut(pi) else {
        return;
    };
    app.for_each_tx(&mut |tx| {
        let rec = tx_record(txs, tx.id());
        let prog = progress(tx);
        if prog == rec.seen {
            return;
        }
        rec.seen = prog;
        tx_cand.clear();
        for (k, bp) in ar.prefilters.iter().enumerate() {
            if !ready(tx, bp.buffer, dir) {
                continue;
            }
            let d = bp.buffer.info().and_then(|i| i.dir).unwrap_or(dir);
            let Some(sc) = scr.get_mut(k) else { continue };
            tx.for_each(bp.buffer, d, &mut |b| {
                bp.pf.scan(b, sc, |id| {
                    if let Some(r) = bp.pat_rules.get(id as usize) {
                        tx_cand.extend_from_slice(r);
                    }
                });
                false
            });
        }
        tx_cand.extend_from_slice(&ar.no_fast);
        tx_cand.sort_unstable();
        tx_cand.dedup();
        for &i in tx_cand.iter() {
            let slot = set.tx.slot[i as usize];
            if rec.is_done(dir, slot) || set.tx.dir[i as usize].is_some_and(|d| d != dir) {
                continue;
            }
            match check_tx(set, st, i as usize, p, payload, tx, Some(&mut *fx), now) {
                TxCheck::NotYet => {}
                TxCheck::Done(m) => {
                    rec.mark_done(dir, slot);
                    if m {
                        matched.push(i);
                    }
                }
            }
        }
    });
    retire(app, txs);
    // One order for the verdict and the alerts: Suricata's.
    matched.sort_unstable();
}

/// Transactions finished both ways are inspected for good: retire them.
fn retire(app: &mut AppState, txs: &mut VecDeque<TxDetect>) {
    let done = [Progress::Complete; 2];
    let below = txs
        .iter()
        .take_while(|r| r.seen == done)
        .last()
        .map(|r| r.id + 1);
    if let Some(below) = below {
        app.retire(below);
        // Keep the records of the transactions the parser still has (TLS keeps its one
        // transaction for the flow's life): a record dropped too early would have the
        // transaction inspected, and alerted on, again.
        let mut oldest = None;
        app.for_each_tx(&mut |t| {
            oldest.get_or_insert(t.id());
        });
        txs.retain(|r| oldest.is_some_and(|o| r.id >= o));
    }
}

/// The packet's flow in the flow table (found or created), which also reassembles its
/// TCP payload; `None` past the table's bounds.
pub(super) fn find_flow<'t>(
    t: &'t mut FlowTable<FlowState>,
    p: &PktInfo,
    data: &[u8],
    meta: &PacketMeta,
    payload: &[u8],
    normalize: bool,
    now: Instant,
) -> Option<FlowRef<'t, FlowState>> {
    t.packet(
        &FlowPacket {
            proto: p.proto,
            src: p.ks,
            dst: p.kd,
            sport: p.sport.unwrap_or(0),
            dport: p.dport.unwrap_or(0),
            tcp: (p.class == 0).then(|| tcp_header(p, data, meta, normalize)),
            payload,
        },
        now,
    )
}

/// After the rules: lets go of the stream bytes inspection no longer needs, applies the
/// threshold file's rate filters and sets the flow's action from the matches. Returns
/// the flow id and whether this packet decided the flow.
#[allow(clippy::too_many_arguments)]
pub(super) fn settle_flow(
    fs: FlowStage<'_>,
    set: &RuleSet,
    st: &mut State,
    matched: &[u32],
    over: &mut Vec<(u32, RuleAction)>,
    stream_hits: &[u32],
    p: &PktInfo,
    opts: &DetectorOptions,
    now: Instant,
) -> (Option<u64>, bool) {
    if let Some(s) = fs.stream {
        let upto = s.end().saturating_sub(opts.stream_lookback as u64);
        s.consume_raw(upto);
    }
    let flow = Some(fs.fx.id);
    rate_filters(set, st, matched, over, p, flow, now);
    *fs.action = flow_verdict(set, matched, stream_hits, over);
    // A `bypass` match that lets the packet through passes the rest of the flow
    // (Suricata's bypass callback: the flow is not inspected again).
    if bypassed(set, matched, over) && matches!(*fs.action, FlowAction::Inspect | FlowAction::Pass)
    {
        *fs.action = FlowAction::Pass;
        fs.offload.bypass = true;
    }
    (flow, *fs.action != FlowAction::Inspect)
}

/// True if a matched rule with `bypass` is among those that decide the packet (up to the
/// first `pass`, as the verdict reads them) and none of them drops it.
fn bypassed(set: &RuleSet, matched: &[u32], over: &[(u32, RuleAction)]) -> bool {
    let mut by = false;
    for &i in matched {
        let Some((r, act)) = set.acting(i, over) else {
            continue;
        };
        by |= r.bypass;
        if act == RuleAction::Pass {
            break;
        }
        if act.blocks() {
            return false;
        }
    }
    by
}
