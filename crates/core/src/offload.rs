//! Flow offload: a service's statement that it needs no more packets of a flow, so that
//! the datapath can let the kernel forward the flow's later packets without queueing them
//! (NFQUEUE: conntrack mark bits the queue rules skip; AF_XDP: a BPF map of flows the XDP
//! program passes to the kernel).
//!
//! A service votes per packet with [`Context::offload`](crate::Context::offload); the chain
//! offloads a flow only when every one of its services voted on the same packet and the
//! verdict is an accept ([`Decision::offload`](crate::Decision::offload)). A service that
//! says nothing keeps the flow inline, so offload is never the default: a service that
//! could still change a verdict of the flow (a rule on a later transaction, a threshold,
//! flow bits) must not vote.

/// Which packets of the flow the vote covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OffloadScope {
    /// Only the direction of the packet that carried the vote (a stream reassembled to its
    /// depth one way, while the other way is still read).
    Direction,
    /// Both directions of the flow.
    Both,
}

/// Why a flow was offloaded, as counted and shown (`relayd status`, metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OffloadReason {
    /// The service's answer for every packet of the flow is fixed (`accept`, `mark` on a
    /// flow's tuple, a connection the split proxy leaves alone): it gives way to any
    /// other reason when several services vote.
    Decided,
    /// The IDS reassembled the stream to its depth (`stream_depth`) in the directions
    /// voted for: nothing later is inspected.
    StreamDepth,
    /// Encrypted payload no rule reads (TLS after the handshake, Suricata's
    /// `encryption-handling: bypass`).
    Encrypted,
    /// A `pass` rule matched the flow.
    Pass,
    /// A rule with the `bypass` keyword matched the flow.
    Bypass,
}

impl OffloadReason {
    /// Every reason, in the order of [`OffloadReason::index`].
    pub const ALL: [OffloadReason; 5] = [
        OffloadReason::Decided,
        OffloadReason::StreamDepth,
        OffloadReason::Encrypted,
        OffloadReason::Pass,
        OffloadReason::Bypass,
    ];

    /// The reason's name in status, metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            OffloadReason::Decided => "decided",
            OffloadReason::StreamDepth => "stream_depth",
            OffloadReason::Encrypted => "encrypted",
            OffloadReason::Pass => "pass",
            OffloadReason::Bypass => "bypass",
        }
    }

    /// The reason's place in [`OffloadReason::ALL`] (and in [`OffloadCounters::flows`](crate::OffloadCounters::flows)).
    pub fn index(self) -> usize {
        match self {
            OffloadReason::Decided => 0,
            OffloadReason::StreamDepth => 1,
            OffloadReason::Encrypted => 2,
            OffloadReason::Pass => 3,
            OffloadReason::Bypass => 4,
        }
    }
}

/// One service's vote, or the chain's combined answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Offload {
    /// The packets it covers.
    pub scope: OffloadScope,
    /// Why.
    pub reason: OffloadReason,
}

impl Offload {
    /// Both directions for `reason`.
    pub const fn both(reason: OffloadReason) -> Offload {
        Offload {
            scope: OffloadScope::Both,
            reason,
        }
    }

    /// This packet's direction only, for `reason`.
    pub const fn direction(reason: OffloadReason) -> Offload {
        Offload {
            scope: OffloadScope::Direction,
            reason,
        }
    }

    /// What two services' votes on the same packet allow together: the narrower scope,
    /// and the reason of the one that is not merely [`OffloadReason::Decided`] (the first
    /// one's when both are or neither is).
    pub fn and(self, other: Offload) -> Offload {
        Offload {
            scope: self.scope.min(other.scope),
            reason: if self.reason == OffloadReason::Decided {
                other.reason
            } else {
                self.reason
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn votes_combine_to_the_narrower_scope_and_the_telling_reason() {
        let d = Offload::both(OffloadReason::Decided);
        let s = Offload::direction(OffloadReason::StreamDepth);
        assert_eq!(d.and(s), s);
        assert_eq!(s.and(d), s);
        assert_eq!(d.and(d), d);
        let p = Offload::both(OffloadReason::Pass);
        assert_eq!(p.and(s), Offload::direction(OffloadReason::Pass));
    }

    #[test]
    fn reasons_index_their_counters() {
        for (i, r) in OffloadReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{}", r.as_str());
        }
    }
}
