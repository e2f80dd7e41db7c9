//! The outcome of inspecting a packet, shared by every layer that takes part in a verdict
//! (the decoder combines its inner packets' outcomes; the engine decides them).

/// What the rules decided for a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// No rule matched.
    Clean,
    /// A `pass` rule matched: nothing else applies.
    Pass,
    /// Only `alert` rules matched (or `ratelimit` rules within their rate): let it go.
    Alert,
    /// A `drop` (or over-rate `ratelimit`) rule matched: drop it.
    Drop,
    /// A `reject` rule matched: answer with a reset / unreachable and drop it.
    Reject,
}

impl Outcome {
    /// True if the packet does not go through (`Drop`, `Reject`).
    pub(crate) fn blocks(self) -> bool {
        matches!(self, Outcome::Drop | Outcome::Reject)
    }
}

/// The strictness of an outcome: the outer packet gets the strictest of its layers'.
fn rank(o: Outcome) -> u8 {
    match o {
        Outcome::Clean => 0,
        Outcome::Pass => 1,
        Outcome::Alert => 2,
        Outcome::Drop => 3,
        Outcome::Reject => 4,
    }
}

/// The stricter of two outcomes.
pub(crate) fn stricter(a: Outcome, b: Outcome) -> Outcome {
    if rank(b) > rank(a) { b } else { a }
}
