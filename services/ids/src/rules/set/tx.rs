//! The transaction rules of a rule set, sorted at compile time: per application protocol
//! the rules, their per-buffer prefilters and the rules without a fast pattern, and which
//! rules are IP-only or act on their whole flow (Suricata's signature types).

use crate::applayer::AppProto;
use crate::applayer::buffer::Buffer;
use crate::flow::Dir;
use crate::prefilter::{Prefilter, Scratch};
use crate::rules::rule::{Expr, FlowbitCmd, Rule};
use std::collections::HashMap;

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
        && r.flowbits.iter().all(|o| o.cmd == FlowbitCmd::Set)
        && !has_negation(&r.src)
        && !has_negation(&r.dst)
}

/// True if an address expression negates something (Suricata's `src_contains_negation`).
fn has_negation<T>(e: &Expr<T>) -> bool {
    match e {
        Expr::List(items) => items.iter().any(|(neg, e)| *neg || has_negation(e)),
        _ => false,
    }
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
