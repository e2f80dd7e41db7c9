//! The checks of one rule against one packet or transaction, for [`super::Detector`]:
//! header facts, flow state and flowbits ([`header_ok`]), payload and stream window
//! ([`check`]), buffers of a transaction ([`check_tx`]), the stateful tests last
//! ([`finish`]), and the threshold file's `rate_filter`s of a packet's matches
//! ([`rate_filters`]). Kept apart from the detector's per-packet flow so each file reads
//! in one sitting.

use super::*;

/// The threshold file's `rate_filter`s of the matched rules: the matches whose action the
/// filter changes go to `over`, with the action in force.
pub(super) fn rate_filters(
    set: &RuleSet,
    st: &mut State,
    matched: &[u32],
    over: &mut Vec<(u32, RuleAction)>,
    p: &PktInfo,
    flow: Option<u64>,
    now: Instant,
) {
    for &i in matched {
        let Some(r) = set.rules.get(i as usize) else {
            continue;
        };
        let Some(rf) = r.global.as_ref().and_then(|g| g.rate) else {
            continue;
        };
        if st.tracker.rate_filter(i, &rf, addrs(p, flow), now) {
            let a = match rf.action {
                NewAction::Alert => RuleAction::Alert,
                NewAction::Drop => RuleAction::Drop,
                NewAction::Reject => RuleAction::Reject,
                NewAction::Pass => RuleAction::Pass,
            };
            over.push((i, a));
        }
    }
}

/// The checks of rule `i` that do not look at payload or buffers: protocol, addresses and
/// ports, header fields, flow state, application protocol, flowbits tests.
fn header_ok(
    set: &RuleSet,
    st: &mut State,
    i: usize,
    p: &PktInfo,
    payload_len: usize,
    fx: Option<&FlowCx<'_>>,
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
        || r.dsize.is_some_and(|c| !c.test(payload_len as u32))
        || p.events & r.stream_events != r.stream_events
    {
        return false;
    }
    if let Some(f) = r.flow
        && f.needs_ct()
    {
        // relayd's flow table for a TCP connection it follows from its handshake (or
        // picked up with `midstream`): Suricata's direction and `established`; else the
        // kernel's conntrack state when the packet carries it (the kernel may have seen
        // the start relayd missed); else the flow table; else no state.
        let table = |x: &FlowCx<'_>| {
            f.established.is_none_or(|e| e == x.established)
                && f.reply.is_none_or(|rep| rep == (x.dir == Dir::ToClient))
        };
        let ok = match (p.ct, fx) {
            (_, Some(x)) if x.synced => table(x),
            (Some(_), _) => f.test(p.ct),
            (None, Some(x)) => table(x),
            (None, None) => {
                st.no_ct.inc();
                false
            }
        };
        if !ok {
            return false;
        }
    }
    if let Some(a) = r.app
        && fx.and_then(|x| x.app) != Some(a)
    {
        return false;
    }
    for &(neg, a) in &r.app_test {
        match fx.and_then(|x| x.app) {
            Some(cur) if (cur == a) != neg => {}
            _ => return false,
        }
    }
    flowbits::test(&set.bitops[i], fx.map(|x| &*x.bits))
}

/// The regexes of rule `i` (this thread's clones).
fn regexes<'a>(set: &RuleSet, st: &'a State, i: usize) -> &'a [regex::bytes::Regex] {
    let base = set.pcre_base[i] as usize;
    st.regexes
        .get(base..base + set.rules[i].pcres.len())
        .unwrap_or(&[])
}

/// The stateful tests, last (only packets that match everything else count towards a
/// rate), and the flowbits a match sets.
fn finish(
    set: &RuleSet,
    st: &mut State,
    i: usize,
    p: &PktInfo,
    fx: Option<&mut FlowCx<'_>>,
    now: Instant,
) -> bool {
    let r = &set.rules[i];
    if r.filter.is_some() || r.rate.is_some() {
        let addrs = addrs(p, fx.as_ref().map(|f| f.id));
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
    }
    if let Some(fx) = fx {
        flowbits::apply(&set.bitops[i], fx.bits);
    }
    true
}

/// The full check of packet rule `i`; `on_stream` is set if a payload list matched the
/// reassembled stream (the packet's payload is part of it).
#[allow(clippy::too_many_arguments)]
pub(super) fn check(
    set: &RuleSet,
    st: &mut State,
    i: usize,
    p: &PktInfo,
    payload: &[u8],
    win: Option<&Win<'_>>,
    fx: Option<&mut FlowCx<'_>>,
    now: Instant,
    on_stream: &mut bool,
) -> bool {
    if !header_ok(set, st, i, p, payload.len(), fx.as_deref()) {
        return false;
    }
    let r = &set.rules[i];
    let mode = r.flow.map_or(StreamMode::Any, |f| f.stream);
    // Stream inspection is for TCP.
    let win = win.filter(|_| p.class == 0);
    let re = regexes(set, st, i);
    let mut vars = Vars::default();
    for list in &r.lists {
        let ok = if list.buffer == Buffer::Payload {
            payload_matches(list, mode, payload, win, re, &mut vars)
        } else {
            false
        };
        if !ok {
            return false;
        }
    }
    // Suricata inspects a stream rule against the stream first; a TCP payload rule of a
    // flow whose stream holds this packet's bytes matched there.
    *on_stream = !r.lists.is_empty() && win.is_some() && mode != StreamMode::No;
    finish(set, st, i, p, fx, now)
}

/// What checking a transaction rule against a transaction found.
pub(super) enum TxCheck {
    /// Not decidable yet (buffers not final, or the packet's facts do not fit): ask again
    /// when the transaction progresses.
    NotYet,
    /// Decided for this transaction and direction: matched or not.
    Done(bool),
}

/// The check of transaction rule `i` against transaction `tx`, on packet `p`.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_tx(
    set: &RuleSet,
    st: &mut State,
    i: usize,
    p: &PktInfo,
    payload: &[u8],
    tx: &dyn Transaction,
    fx: Option<&mut FlowCx<'_>>,
    now: Instant,
) -> TxCheck {
    let Some(dir) = fx.as_ref().map(|f| f.dir) else {
        return TxCheck::NotYet;
    };
    let r = &set.rules[i];
    if r.lists
        .iter()
        .any(|l| l.buffer != Buffer::Payload && !ready(tx, l.buffer, dir))
    {
        return TxCheck::NotYet;
    }
    if !header_ok(set, st, i, p, payload.len(), fx.as_deref()) {
        return TxCheck::NotYet;
    }
    let re = regexes(set, st, i);
    let mut vars = Vars::default();
    for list in &r.lists {
        if list.buffer == Buffer::Payload {
            // Depends on the packet: try again on the next one.
            if !list_matches(list, payload, re, &mut vars) {
                return TxCheck::NotYet;
            }
            continue;
        }
        let d = list.buffer.info().and_then(|b| b.dir).unwrap_or(dir);
        if !tx.for_each(list.buffer, d, &mut |b| {
            list_matches(list, b, re, &mut vars)
        }) {
            return TxCheck::Done(false);
        }
    }
    TxCheck::Done(finish(set, st, i, p, fx, now))
}

/// What the tracker keys a packet by; the flow is the flow table's id, or the 5-tuple's
/// EVE flow id when the packet has no tracked flow.
pub(super) fn addrs(p: &PktInfo, flow: Option<u64>) -> Addrs {
    let (sport, dport) = (p.sport.unwrap_or(0), p.dport.unwrap_or(0));
    Addrs {
        src: p.ks,
        dst: p.kd,
        sport,
        dport,
        flow: flow.unwrap_or_else(|| flow_id(p.src, p.dst, sport, dport, p.proto)),
    }
}
