//! relayd control: owns the iptables chains relayd needs and installs and removes them
//! atomically (`iptables-restore --noflush`), idempotently, and without touching any rule
//! or chain it does not own (DESIGN.md, "Leave no trace, touch nothing else").
//!
//! For every (table, hook) in use there is one chain `{prefix}-{HOOK}` (e.g.
//! `RELAYD-FORWARD` in `mangle`), jumped to from the built-in chain at position 1. It
//! starts with a rule that returns packets carrying relayd's bypass mark (so injected or
//! re-queued packets are not queued again), then holds one `NFQUEUE` rule per configured
//! queue, in configuration order.
//!
//! Planning is pure (see [`RuleSet::restore_text`]); only [`RuleSet::validate`],
//! [`RuleSet::install`], [`RuleSet::remove`] and [`cleanup`] run iptables, through a
//! [`Backend`]. Every tool (iptables, `tc`, and the proxy's `ip`) is started by [`cmd`].
//!
//! [`tc`] does the same for per-VCAN QoS: an HTB tree with one class per VCAN and an
//! O(1) mark-to-class classifier, installed, updated and removed in one `tc -batch` run.

mod args;
mod backend;
pub mod cmd;
mod error;
mod model;
mod ops;
mod render;
mod saved;
pub mod tc;

pub use args::{MatchError, quote_arg, split_matches};
pub use backend::{Backend, IptablesName};
pub use error::ControlError;
pub use model::{
    Hook, IpVersion, OwnedRule, PreRule, QueueRule, RuleSet, Table, parse_queue_range,
};
pub use ops::{cleanup, commented_counters};
pub use render::{CleanupReport, InstallReport};
pub use tc::{ClassStats, HtbClass, HtbPlan, InstallOutcome, Tc, TcError};
