//! The offload vote on one inspected packet of a tracked flow (docs/ids.md, "Offload"):
//! a flow a `pass` (or bypass) decided votes at once; otherwise each trigger (the streams
//! done at their depth, TLS encrypted both ways) checks the rules once
//! ([`RuleSet::live_rule`]) and, if none could still match, records the vote in the flow.
//! Every later packet then reads the flow's record: a flag check.

use super::*;
use crate::applayer::state::AppState;
use crate::engine::offload::{
    DEPTH_BOTH, DEPTH_TO_CLIENT, DEPTH_TO_SERVER, ENCRYPTED, OffloadOptions, OffloadStats,
};
use crate::flow::FlowRef;
use crate::flow::stream::Stream;
use crate::rules::set::later::FlowView;
use relay_core::{Offload, OffloadReason, OffloadScope};

/// Whether a direction's stream will have no more bytes inspected: (done, at its depth).
fn stream_done(s: Option<&Stream>) -> (bool, bool) {
    match s {
        Some(s) => {
            let depth = s.truncated() == Some(Truncation::Depth);
            (depth || s.finished(), depth)
        }
        None => (false, false),
    }
}

/// The vote on the packet just inspected (in direction `f.dir`), if any. `one_way`: votes
/// for one direction are allowed (only without normalization: a direction's segments are
/// judged against the other's sequence and window, which an offloaded direction would
/// leave stale).
pub(super) fn vote(
    f: &mut FlowRef<'_, FlowState>,
    set: &RuleSet,
    o: OffloadOptions,
    one_way: bool,
    stats: &OffloadStats,
) -> Option<Offload> {
    let state = &f.flow.state;
    match state.action {
        FlowAction::Pass => return Some(state.offload.passed()),
        FlowAction::Inspect => {}
        FlowAction::Drop | FlowAction::Reject => return None,
    }
    let (ts, ts_depth) = stream_done(f.flow.stream(Dir::ToServer));
    let (tc, tc_depth) = stream_done(f.flow.stream(Dir::ToClient));
    let mut now = 0;
    if one_way && ts_depth {
        now |= DEPTH_TO_SERVER;
    }
    if one_way && tc_depth {
        now |= DEPTH_TO_CLIENT;
    }
    if ts && tc && (ts_depth || tc_depth) {
        now |= DEPTH_BOTH;
    }
    if o.encrypted && state.app.tls_encrypted() {
        now |= ENCRYPTED;
    }
    let new = now & !state.offload.tried;
    if new != 0 {
        decide(f, set, new, [ts, tc], stats);
    }
    f.flow.state.offload.vote[f.dir.index()]
}

/// Checks the rules for the triggers in `new` (`done`: per direction, the stream is
/// done) and records the votes they allow.
fn decide(
    f: &mut FlowRef<'_, FlowState>,
    set: &RuleSet,
    new: u8,
    done: [bool; 2],
    stats: &OffloadStats,
) {
    let flow = &f.flow;
    let st = &flow.state;
    let more = !(done[0] && done[1]);
    // With one direction still read, a parser that exists may yet start a transaction
    // (a response without its request): only no parser at all is settled then.
    let parser_gone = matches!(st.app, AppState::Failed(_) | AppState::OverCap(_));
    let view = |one_way: bool| FlowView {
        client: flow.client(),
        server: flow.server(),
        app: st.app.proto(),
        app_open: st.app.detecting() && more,
        iponly_done: st.iponly_done,
        stream_done: done,
        app_settled: if one_way {
            parser_gone
        } else {
            st.app.settled(more)
        },
    };
    let mut votes = st.offload.vote;
    let both = Offload::both;
    let one = Offload::direction;
    for (bit, dirs, offload) in [
        (ENCRYPTED, [true, true], both(OffloadReason::Encrypted)),
        (DEPTH_BOTH, [true, true], both(OffloadReason::StreamDepth)),
        (
            DEPTH_TO_SERVER,
            [true, false],
            one(OffloadReason::StreamDepth),
        ),
        (
            DEPTH_TO_CLIENT,
            [false, true],
            one(OffloadReason::StreamDepth),
        ),
    ] {
        if new & bit == 0 {
            continue;
        }
        let one_way = offload.scope == OffloadScope::Direction;
        if set.live_rule(&view(one_way), dirs).is_some() {
            stats.kept_inline.inc();
            continue;
        }
        for (d, v) in votes.iter_mut().enumerate() {
            let wider = v.is_none_or(|x| x.scope < offload.scope);
            if dirs[d] && wider {
                *v = Some(offload);
            }
        }
    }
    let rec = &mut f.flow.state.offload;
    rec.vote = votes;
    rec.tried |= new;
}

/// After the rules, for a packet of a tracked flow: frees what a flow this packet decided
/// holds, and returns the packet's vote (`voting`: the detector votes on this packet).
pub(super) fn settle(
    f: &mut FlowRef<'_, FlowState>,
    decided_now: bool,
    set: &RuleSet,
    opts: &DetectorOptions,
    voting: bool,
    stats: &OffloadStats,
) -> Option<Offload> {
    // A flow this packet decided is not inspected again: its parser and streams are
    // freed now rather than when it times out (their memory is other flows').
    if decided_now {
        f.flow.state.app.disable();
        f.flow.state.txs.clear();
        f.abandon_streams();
    }
    if !voting {
        return None;
    }
    vote(f, set, opts.offload, !opts.normalize, stats)
}
