//! relayd's in-network IDS/IPS (seed 000, PacketCloud 3.4 and 4.1): rules in a subset of
//! the Suricata language, matched per packet with one multi-pattern prefilter over all
//! fast patterns, acting by `pass` / `drop` / `reject` / `ratelimit` / `alert`, and alerts
//! written as Suricata EVE JSON lines. The kernel's conntrack state (NFQA_CT) answers the
//! `flow` keyword.
//!
//! The daemon registers [`IdsConfig`] (kind `ids`). Everything else is public for tests,
//! benches and tools; docs/ids.md describes the language and its limits.

mod applayer;
mod decode;
mod engine;
mod eve;
mod flow;
mod hostos;
mod memcap;
mod outcome;
mod prefilter;
mod reject;
mod rules;
mod service;
#[cfg(test)]
mod testutil;

pub use engine::{
    DEFAULT_STREAM_LOOKBACK, Detector, DetectorOptions, INSPECT_BUDGET, LoadError, LoadOptions,
    MAX_ALERTS_PER_PACKET, Outcome, RuleSet,
};
pub use engine::{ExceptionPolicy, OffloadOptions};
pub use eve::{AlertEvent, EveWriter, flow_id, format_line, timestamp};
pub use rules::parse::RuleError;
pub use rules::rule::{Rule, RuleAction, RuleProto};
pub use rules::vars::SURICATA_VARS;
pub use service::{EncryptionHandling, IdsConfig};
