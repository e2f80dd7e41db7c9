//! The exception policy (`exception_policy`, Suricata's `exception-policy`): what happens
//! to a flow when a memcap refuses it memory — the application-layer memcap (here) and the
//! stream memcap (the caller of [`ExceptionPolicy::apply`]).
//!
//! As Suricata's `ExceptionPolicyApply` (`src/util-exception-policy.c`): `drop-flow` drops
//! the packet and every later packet of the flow (`FLOW_ACTION_DROP`, and the flow's
//! application layer is disabled); `pass-flow` passes the packet and every later one
//! uninspected (`FLOW_ACTION_PASS`); `bypass` is `pass-flow` plus a bypass callback that
//! would let the kernel or NIC skip the flow, which relayd does not have, so here it is
//! `pass-flow` counted apart; `ignore` (Suricata's "not set") keeps inspecting the flow's
//! packets and stream, without its application-layer parser (freed at the memcap).
//! Suricata's default (`auto`) is `drop-flow` in IPS mode and `ignore` in IDS mode; relayd
//! is always inline, so `auto` is `drop-flow` when the rule set can block (it has `drop`
//! or `reject` rules: an IPS) and `ignore` when it only alerts (an IDS on the path, which
//! must not start dropping traffic because it ran out of memory).

use super::Outcome;
use relay_core::{Counter, Counters};
use serde::Deserialize;

/// What to do with a flow a memcap refused memory (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExceptionPolicy {
    /// `drop-flow` if the rule set can block, `ignore` otherwise (the default).
    #[default]
    Auto,
    /// Drop this packet and every later packet of the flow.
    DropFlow,
    /// Pass this packet and every later packet of the flow, uninspected.
    PassFlow,
    /// As `pass-flow` (relayd has no bypass path below it), counted apart.
    Bypass,
    /// Keep inspecting the flow's packets and stream without its application layer.
    Ignore,
}

impl ExceptionPolicy {
    /// The policy in force: `Auto` resolved for a rule set that can block (`blocks`) or
    /// only alert.
    pub fn resolve(self, blocks: bool) -> ExceptionPolicy {
        match self {
            ExceptionPolicy::Auto if blocks => ExceptionPolicy::DropFlow,
            ExceptionPolicy::Auto => ExceptionPolicy::Ignore,
            p => p,
        }
    }

    /// The name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            ExceptionPolicy::Auto => "auto",
            ExceptionPolicy::DropFlow => "drop-flow",
            ExceptionPolicy::PassFlow => "pass-flow",
            ExceptionPolicy::Bypass => "bypass",
            ExceptionPolicy::Ignore => "ignore",
        }
    }
}

/// Flows the exception policy was applied to, per policy.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExceptionCounters {
    drop_flow: Counter,
    pass_flow: Counter,
    bypass: Counter,
    ignore: Counter,
}

impl ExceptionCounters {
    /// Registered in `c` as `exception_policy_drop_flow`, `exception_policy_pass_flow`,
    /// `exception_policy_bypass` and `exception_policy_ignore`.
    pub(crate) fn register(c: &Counters) -> ExceptionCounters {
        ExceptionCounters {
            drop_flow: c.counter("exception_policy_drop_flow"),
            pass_flow: c.counter("exception_policy_pass_flow"),
            bypass: c.counter("exception_policy_bypass"),
            ignore: c.counter("exception_policy_ignore"),
        }
    }
}

/// The policy in force on one detector and its counters.
#[derive(Debug, Clone)]
pub(crate) struct Exceptions {
    policy: ExceptionPolicy,
    counters: ExceptionCounters,
}

impl Exceptions {
    /// `policy` resolved for a rule set that can block (`blocks`) or not.
    pub(crate) fn new(policy: ExceptionPolicy, blocks: bool, counters: ExceptionCounters) -> Self {
        Exceptions {
            policy: policy.resolve(blocks),
            counters,
        }
    }

    /// True if the policy in force is `bypass` (a flow it passes votes `Bypass`).
    pub(crate) fn bypasses(&self) -> bool {
        self.policy == ExceptionPolicy::Bypass
    }

    /// Applies the policy to a flow a memcap refused memory (its application-layer parser
    /// is already freed, or its stream stopped): sets the flow's `action` and counts.
    /// `Some(outcome)`: the packet's outcome, not inspected further (drop-flow, pass-flow,
    /// bypass); `None`: inspect the packet as usual (ignore).
    pub(crate) fn apply(&self, action: &mut FlowAction) -> Option<Outcome> {
        match self.policy {
            ExceptionPolicy::DropFlow | ExceptionPolicy::Auto => {
                self.counters.drop_flow.inc();
                *action = FlowAction::Drop;
                Some(Outcome::Drop)
            }
            ExceptionPolicy::PassFlow => {
                self.counters.pass_flow.inc();
                *action = FlowAction::Pass;
                Some(Outcome::Pass)
            }
            ExceptionPolicy::Bypass => {
                self.counters.bypass.inc();
                *action = FlowAction::Pass;
                Some(Outcome::Pass)
            }
            ExceptionPolicy::Ignore => {
                self.counters.ignore.inc();
                None
            }
        }
    }
}

/// What a `pass` or `drop` / `reject` match decided for the rest of its flow.
///
/// As in Suricata, the first to be set wins, and it is set only by a rule whose action
/// applies to the flow: an IP-only-like rule (no payload, no packet keyword), a
/// transaction rule, or a payload rule that matched the reassembled stream.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlowAction {
    /// Inspect the flow's packets.
    #[default]
    Inspect,
    /// Pass the flow's later packets uninspected.
    Pass,
    /// Drop the flow's later packets, without inspecting them or alerting.
    Drop,
    /// Reject the flow's later packets (relayd answers each, within its reject rates),
    /// without inspecting them or alerting.
    Reject,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_follows_suricata_and_each_policy_sets_the_flow_action() {
        assert_eq!(
            ExceptionPolicy::Auto.resolve(true),
            ExceptionPolicy::DropFlow
        );
        assert_eq!(
            ExceptionPolicy::Auto.resolve(false),
            ExceptionPolicy::Ignore
        );
        assert_eq!(
            ExceptionPolicy::PassFlow.resolve(true),
            ExceptionPolicy::PassFlow
        );
        let c = Counters::default();
        let cases = [
            (
                ExceptionPolicy::DropFlow,
                Some(Outcome::Drop),
                FlowAction::Drop,
                "exception_policy_drop_flow",
            ),
            (
                ExceptionPolicy::PassFlow,
                Some(Outcome::Pass),
                FlowAction::Pass,
                "exception_policy_pass_flow",
            ),
            (
                ExceptionPolicy::Bypass,
                Some(Outcome::Pass),
                FlowAction::Pass,
                "exception_policy_bypass",
            ),
            (
                ExceptionPolicy::Ignore,
                None,
                FlowAction::Inspect,
                "exception_policy_ignore",
            ),
        ];
        for (p, out, act, counter) in cases {
            let e = Exceptions::new(p, true, ExceptionCounters::register(&c));
            let mut a = FlowAction::Inspect;
            assert_eq!(e.apply(&mut a), out, "{}", p.name());
            assert_eq!(a, act, "{}", p.name());
            assert_eq!(c.counter(counter).get(), 1, "{counter}");
        }
    }
}
