//! The matching engine: a [`Detector`] per queue thread that inspects packets against a
//! compiled [`RuleSet`] (`crate::rules::set`, shared by the queue threads of a service).
//! The per-packet work is `engine::detect`; transaction rules are `engine::app`; the
//! match-list inspector is `engine::inspect`; thresholds and rate filters `engine::track`.

mod app;
mod detect;
mod exception;
mod inspect;
mod offload;
mod packet;
mod payload;
mod reclaim;
pub(crate) mod track;

pub use crate::outcome::Outcome;
pub use crate::rules::set::{LoadError, LoadOptions, RuleSet};
pub use detect::{DEFAULT_STREAM_LOOKBACK, Detector, DetectorOptions};
pub use exception::ExceptionPolicy;
pub use offload::OffloadOptions;

/// Most alerts one packet raises (Suricata's default `packet-alert-max`); further
/// matching rules still act and count their hits.
pub const MAX_ALERTS_PER_PACKET: usize = 15;

/// Content-search steps one rule may take on one packet (backtracking over repeated
/// matches of relative contents); past it the rule does not match. Like Suricata's
/// inspection recursion limit, it bounds the cost of a hostile payload.
pub const INSPECT_BUDGET: u32 = 3000;
