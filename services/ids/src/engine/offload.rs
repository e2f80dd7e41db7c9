//! Offload votes (issue 27): the per-flow record of whether the IDS needs the flow's later
//! packets, the settings that allow each reason, and the counters. The decision itself
//! (which rules could still match) is `engine::detect::vote`; this module only holds what
//! a flow keeps, so that the per-packet cost of a decided flow is a flag check.

use relay_core::{Counter, Counters, Offload, OffloadReason};

/// What the detector may vote to offload (docs/ids.md, "Offload").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffloadOptions {
    /// Vote at all (`offload`, default true: votes only take effect on a queue whose
    /// `offload` key is on).
    pub enabled: bool,
    /// Offload TLS flows once both directions are encrypted, unless a rule reads their
    /// later packets (`tls_encryption_handling = "bypass"`, Suricata's
    /// `app-layer.protocols.tls.encryption-handling: bypass`).
    pub encrypted: bool,
}

/// Triggers: conditions under which the rules are checked once for the flow.
pub(crate) const DEPTH_TO_SERVER: u8 = 1;
/// The stream to the client reached its depth (or finished, the other being at depth).
pub(crate) const DEPTH_TO_CLIENT: u8 = 2;
/// Both directions' streams are done, at least one at its depth.
pub(crate) const DEPTH_BOTH: u8 = 4;
/// TLS encrypted both ways (with [`OffloadOptions::encrypted`]).
pub(crate) const ENCRYPTED: u8 = 8;

/// A flow's offload record.
#[derive(Debug, Default)]
pub(crate) struct FlowOffload {
    /// Per direction ([`crate::flow::Dir::index`]), the vote on its packets once decided.
    pub(crate) vote: [Option<Offload>; 2],
    /// The triggers whose rule check has run (each runs once per flow).
    pub(crate) tried: u8,
    /// The flow's pass came from a bypass (the `bypass` keyword, or the `bypass`
    /// exception policy): its vote says so.
    pub(crate) bypass: bool,
}

impl FlowOffload {
    /// The vote for a flow decided `pass`: every later packet passes uninspected.
    pub(crate) fn passed(&self) -> Offload {
        Offload::both(if self.bypass {
            OffloadReason::Bypass
        } else {
            OffloadReason::Pass
        })
    }
}

/// The detector's offload counters (docs/ids.md, "Counters").
#[derive(Debug, Clone, Default)]
pub(crate) struct OffloadStats {
    /// Packets voted, by reason: stream depth, encrypted, pass, bypass.
    votes: [Counter; 4],
    /// Flows a trigger would have offloaded but a rule that could still match kept
    /// inline (counted once per trigger and flow).
    pub(crate) kept_inline: Counter,
}

impl OffloadStats {
    /// The counters registered in `c`: `offload_votes_stream_depth`,
    /// `offload_votes_encrypted`, `offload_votes_pass`, `offload_votes_bypass` and
    /// `offload_kept_inline`.
    pub(crate) fn register(c: &Counters) -> OffloadStats {
        OffloadStats {
            votes: [
                c.counter("offload_votes_stream_depth"),
                c.counter("offload_votes_encrypted"),
                c.counter("offload_votes_pass"),
                c.counter("offload_votes_bypass"),
            ],
            kept_inline: c.counter("offload_kept_inline"),
        }
    }

    /// Counts a packet voted with `o`.
    pub(crate) fn voted(&self, o: Offload) {
        let i = match o.reason {
            OffloadReason::Encrypted => 1,
            OffloadReason::Pass => 2,
            OffloadReason::Bypass => 3,
            _ => 0,
        };
        if let Some(c) = self.votes.get(i) {
            c.inc();
        }
    }
}
